"""The command line's start-up: pyarrow's pandas probe is answered without importing pandas (~0.15-0.2 s), analyze
of a profile that is not a run of ours does not import pyarrow.parquet, and the garbage collector runs less often."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.importers.conftest import QWEN, shared

ROOT = Path(__file__).resolve().parents[1]
_PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('pandas loaded' if 'pandas' in sys.modules else 'no pandas', file=sys.stderr))\n"
    "atexit.register(lambda: print('pyarrow.parquet loaded' * ('pyarrow.parquet' in sys.modules), file=sys.stderr))\n"
    "atexit.register(lambda: print('gc', __import__('gc').get_threshold(), file=sys.stderr))\n"
    "atexit.register(lambda: print('matplotlib loaded' * ('matplotlib' in sys.modules), file=sys.stderr))\n"
    "sys.argv = ['atbprof', *sys.argv[1:]]\n"
    "from atbprof.commands import main\n"
    "main()\n"
)


def test_analyze_runs_without_importing_pandas() -> None:
    pytest.importorskip("pandas")  # only meaningful where pandas is installed (pyarrow would import it)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "analyze", str(shared(QWEN)), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stderr.strip().endswith("no pandas")
    assert "pyarrow.parquet loaded" not in out.stderr  # only runs of ours (ops.parquet) need it
    assert "matplotlib loaded" not in out.stderr  # only plot, report and sweep draw
    assert "gc (200000, 30, 30)" in out.stderr
    report = json.loads(out.stdout)
    assert sum(f["count"] for f in report["findings"] if f["kind"] == "add_norm") == 54


def test_pandas_stays_importable_after_the_probe() -> None:
    code = (
        "from atbprof.startup import skip_pyarrow_pandas_probe\n"
        "import sys\n"
        "skip_pyarrow_pandas_probe()\n"
        "import pyarrow as pa\n"
        "pa.array(['x'])\n"
        "try:\n"
        "    import pandas\n"
        "except ImportError:\n"
        "    print('absent')\n"
        "else:\n"
        "    print('importable')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ("importable" if importlib.util.find_spec("pandas") else "absent")
