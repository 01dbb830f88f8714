"""The README and docs/ as a user meets them: the site builds with --strict (no broken link, no page left out of the
navigation), every ```sh block runs as written, the Python API page's example runs, the README is a front door
(short, the capture guide and a first analysis on its first screen) and no page speaks of the team's history."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
SHARED = ROOT.parent / "shared"
BIN = Path(sys.executable).parent  # the venv the suite runs in: its `atbprof`


def blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def workdir(tmp: Path) -> Path:
    """A user's working directory: the repository's shipped inputs, nothing it wrote before."""
    work = tmp / "work"
    (work / "traces").mkdir(parents=True)
    (work / "fixtures").symlink_to(ROOT / "fixtures")
    (work / "traces" / "examples").symlink_to(ROOT / "traces" / "examples")
    if SHARED.is_dir():
        (tmp / "shared").symlink_to(SHARED)
    return work


def test_the_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra (pip install '.[docs]'); `make test` installs it")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "capture" / "index.html").is_file()
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert all(page.name in nav for page in DOCS), "every page is in the navigation"


RUNNABLE = [p for p in [ROOT / "README.md", *DOCS] if blocks(p, "sh")]


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_shell_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    """A page's ```sh blocks, in order, in a fresh directory, as a user pastes them (bash, stop at the first error)."""
    work = workdir(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "120"}
    for block in blocks(page, "sh"):
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, f"{page.name}:\n{block}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


def test_the_api_page_example_runs(tmp_path: Path) -> None:
    work = workdir(tmp_path)
    code = "\n".join(blocks(ROOT / "docs" / "api.md", "python"))
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ms/token" in out.stdout and "occurrences" in out.stdout


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert 100 <= len(lines) <= 250
    first_screen = "\n".join(lines[:50])
    assert "docs/capture.md" in first_screen and "atbprof analyze" in first_screen
    assert "make test" in first_screen


def test_user_docs_speak_to_users() -> None:
    history = re.compile(r"this session|earlier session|\bissue \d+|\bsession's\b", re.I)
    for page in [ROOT / "README.md", *DOCS, ROOT / "traces" / "README.md"]:
        found = [line for line in page.read_text(encoding="utf-8").splitlines() if history.search(line)]
        assert found == [], page.name
