"""Real Perfetto trace_processor (WASM, Node) checks of atbprof traces."""
