"""`atbprof report` pages in headless Chromium (Debian's, driven by Playwright; skipped where it is absent): a
run's, a diff's, a cluster's and a sweep's page loads with no console error and no request beyond the page
itself, in the light and the dark colour scheme, and every figure is drawn (a decoded, non-blank image). The page
checks that do not need a browser, and what `report` refuses, run everywhere."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from tests.conftest import FIXTURES
from tests.tp.perfetto_ui import CHROMIUM, FLAGS, chromium

runner = CliRunner()
TINY = FIXTURES / "tiny-llama.yaml"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.analyze.test_cluster import _sim_cluster

    root = tmp_path_factory.mktemp("pages")
    for name, fusion in (("base", "none"), ("fused", "default")):
        assert (
            runner.invoke(app, ["run", "--config", str(TINY), "--fusion", fusion, "--out", str(root / name)]).exit_code
            == 0
        )
    sweep = ["sweep", "--config", str(TINY), "--grid", "workload.batch_size=1,2", "--grid", "fusion=none,default"]
    assert runner.invoke(app, [*sweep, "--out", str(root / "s"), "--workers", "0"]).exit_code == 0
    cluster = _sim_cluster(root / "c", {2: 1.15})
    inputs = {
        "run": [root / "base"],
        "diff": [root / "base", root / "fused"],
        "cluster": [cluster],
        "sweep": [root / "s"],
    }
    out = {}
    for kind, paths in inputs.items():
        page = root / f"{kind}.html"
        done = runner.invoke(app, ["report", *map(str, paths), "--out", str(page)])
        assert done.exit_code == 0, done.output
        assert f"wrote {page}" in done.output and f"({kind} " in done.output
        out[kind] = page
    return out


@pytest.mark.parametrize("kind", ["run", "diff", "cluster", "sweep"])
def test_a_page_is_self_contained(pages: dict[str, Path], kind: str) -> None:
    html = pages[kind].read_text(encoding="utf-8")
    assert html.startswith('<!-- {"generator":"atbprof","kind":"report"')
    assert "<script" not in html and "default-src 'none'" in html
    urls = re.findall(r"""(?:src|href|srcset)=["']([^"']+)""", html)
    assert urls and all(u.startswith(("data:image/png;base64,", "#fig-")) for u in urls)
    assert html.count("<figure") >= 2 and "<table>" in html


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_pages_load_in_chromium_with_their_figures_drawn(pages: dict[str, Path], scheme: str) -> None:
    pytest.importorskip("playwright")
    from matplotlib.image import imread
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            for kind, path in pages.items():
                context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900})
                page = context.new_page()
                errors: list[str] = []
                requests: list[str] = []
                page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.on("request", lambda r, requests=requests: requests.append(r.url))
                page.goto(path.as_uri(), wait_until="load")
                assert errors == [], (kind, errors)
                assert [u for u in requests if not u.startswith("data:")] == [path.as_uri()], (kind, requests)
                images = page.locator("figure img")
                assert images.count() >= 2, kind
                for i in range(images.count()):
                    img = images.nth(i)
                    ok = img.evaluate("e => e.complete && e.naturalWidth > 200 && e.naturalHeight > 150")
                    assert ok, (kind, i)
                    src = img.evaluate("e => e.currentSrc")
                    dark = img.evaluate("e => e.parentElement.querySelector('source').srcset")
                    assert (src == dark) is (scheme == "dark"), (kind, i)  # the scheme picks the rendering
                    shot = imread(io.BytesIO(img.screenshot()), format="png")
                    colours = np.unique((shot[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
                    assert len(colours) > 20, (kind, i, len(colours))  # drawn, not a blank box
                context.close()
        finally:
            browser.close()


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 800])
def test_no_page_scrolls_sideways(pages: dict[str, Path], width: int) -> None:
    """At a laptop's and a half screen's width, nothing runs off the page (a wide table scrolls in its own box)."""
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            for kind, path in pages.items():
                page.goto(path.as_uri(), wait_until="load")
                scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
                assert scroll <= inner, (kind, width, scroll)
            context.close()
        finally:
            browser.close()


def test_what_report_refuses(pages: dict[str, Path], tmp_path: Path) -> None:
    run = pages["run"].parent / "base"
    cases = [
        (["report", str(run), "--out", str(pages["run"])], 3, "exists; pass --force"),
        (["report", str(run), "--out", str(tmp_path / "r.txt")], 2, "a report is an HTML file"),
        (["report", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")], 2, "no such file or directory"),
    ]
    for args, code, message in cases:
        out = runner.invoke(app, args)
        assert out.exit_code == code and message in out.output, (args, out.output)
        assert "Traceback" not in out.output
    assert runner.invoke(app, ["report", str(run), "--out", str(pages["run"]), "--force"]).exit_code == 0
    mine = tmp_path / "mine.html"
    mine.write_text("<html>mine</html>")
    out = runner.invoke(app, ["report", str(run), "--out", str(mine), "--force"])
    assert out.exit_code == 3 and "not a report atbprof wrote" in out.output and mine.read_text() == "<html>mine</html>"
