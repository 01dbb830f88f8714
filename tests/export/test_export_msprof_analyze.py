"""The exports read by the real analyzer: msprof-analyze (mstt) advisor and cluster, pinned in the `test` extra.

What must hold: the advisor reads both layouts without errors, and its fusion checks see what fusion changed —
  * Affinity API Issues (aten cpu_op runs in trace_view.json): `torch_npu.npu_rms_norm` for a decomposed RMSNorm,
    not once the norm is a kernel;
  * Fusible Operator Analysis (kernel sequences in kernel_details.csv / op_summary): sequences with a residual Add
    followed by a separate RmsNorm kernel (the AddRmsNorm opportunity) while unfused, none once fused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from atbprof.export import ExportResult, ExportTarget
from tests.export.helpers import problem_rows, read_xlsx, rows, sequence_tables, us_to_ns


def _executable() -> str | None:
    beside = Path(sys.executable).parent / "msprof-analyze"
    return str(beside) if beside.exists() else shutil.which("msprof-analyze")


MSPROF_ANALYZE = _executable()
pytestmark = pytest.mark.skipif(
    MSPROF_ANALYZE is None,
    reason="msprof-analyze is not installed (it is in the `test` extra: pip install -e '.[test]')",
)
Exported = Callable[[str, ExportTarget], ExportResult]
KERNELS = Path("ASCEND_PROFILER_OUTPUT") / "kernel_details.csv"


@dataclass(frozen=True)
class Advice:
    output: str  # terminal output (the problem table and the log)
    book: dict[str, list[list[str | None]]]  # mstt_advisor_*.xlsx

    @property
    def problems(self) -> dict[str, str]:
        return problem_rows(self.book)

    @property
    def affinity_apis(self) -> set[str]:
        table = self.book.get("Affinity API Issues", [])
        return {str(r[0]) for r in table[1:] if r and r[0]}

    def sequences(self) -> list[tuple[int, int, int]]:
        return sequence_tables(self.book)


def _run(args: list[str], cwd: Path) -> str:
    assert MSPROF_ANALYZE is not None
    done = subprocess.run(
        [MSPROF_ANALYZE, *args], cwd=cwd, capture_output=True, text=True, timeout=900, env=_env(), check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "[ERROR]" not in output, output[-3000:]
    return output


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "DISABLE_AFFINITY_API"}
    return env | {"PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="session")
def advise(exported: Exported, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, ExportTarget], Advice]:
    """`msprof-analyze advisor all` on the export of run `key` (once per session)."""
    done: dict[tuple[str, str], Advice] = {}

    def get(key: str, target: ExportTarget) -> Advice:
        if (key, target) not in done:
            out = tmp_path_factory.mktemp(f"advisor-{key}-{target}")
            output = _run(["advisor", "all", "-d", str(exported(key, target).root), "-o", str(out), "-l", "en"], out)
            books = sorted(out.rglob("mstt_advisor_*.xlsx"))
            assert len(books) == 1 and sorted(out.glob("mstt_advisor_*.html")), output[-2000:]
            done[key, target] = Advice(output, read_xlsx(books[0]))
        return done[key, target]

    return get


def _types(result: ExportResult) -> list[str]:
    path = result.root / KERNELS if result.target == "ascend-pt" else next(result.root.rglob("op_summary_*.csv"))
    return [r.get("Type") or r["OP Type"] for r in rows(path)]


def _with(types: list[str], seqs: list[tuple[int, int, int]], chain: tuple[str, ...]) -> int:
    """How many reported sequences contain `chain` as consecutive kernels (indices are kernel_details rows)."""
    k = len(chain)
    return sum(any(tuple(types[i : i + k]) == chain for i in range(start, end - k + 2)) for start, end, _ in seqs)


@pytest.mark.parametrize(("key", "target"), [("tiny-none", "ascend-pt"), ("s0-baseline", "msprof")])
def test_advisor_reads_the_export(
    key: str, target: ExportTarget, advise: Callable[[str, ExportTarget], Advice]
) -> None:
    advice = advise(key, target)
    assert "Operator Dynamic Shape Issues" in advice.problems  # it read the kernel table (eager: dynamic ops)
    if target == "ascend-pt":
        assert "Overall Summary" in advice.problems  # it read trace_view.json


@pytest.mark.parametrize(("unfused", "fused"), [("tiny-none", "tiny-default"), ("s0-none", "s0-lnfused")])
def test_affinity_api_flags_the_decomposed_rmsnorm(
    unfused: str, fused: str, advise: Callable[[str, ExportTarget], Advice]
) -> None:
    before, after = advise(unfused, "ascend-pt"), advise(fused, "ascend-pt")
    assert "Affinity API Issues" in before.problems
    assert "torch_npu.npu_rms_norm" in before.affinity_apis
    assert "torch_npu.npu_rms_norm" not in after.affinity_apis


def test_fusible_sequences_find_add_then_rmsnorm(
    advise: Callable[[str, ExportTarget], Advice], exported: Exported
) -> None:
    before, after = advise("s0-baseline", "ascend-pt"), advise("s0-lnfused", "ascend-pt")
    assert "Fusible Operator Analysis" in before.problems
    b_seq, a_seq = before.sequences(), after.sequences()
    b_types, a_types = _types(exported("s0-baseline", "ascend-pt")), _types(exported("s0-lnfused", "ascend-pt"))
    assert b_seq and all(0 <= s <= e < len(b_types) for s, e, _ in b_seq)
    assert _with(b_types, b_seq, ("Add", "RmsNorm")) > 0
    assert _with(a_types, a_seq, ("Add", "RmsNorm")) == 0 and "RmsNorm" not in a_types


def test_fusible_sequences_find_the_decomposed_rmsnorm(
    advise: Callable[[str, ExportTarget], Advice], exported: Exported
) -> None:
    chain = ("Pows", "ReduceMean", "Add", "Rsqrt")
    before, after = advise("s0-none", "ascend-pt"), advise("s0-lnfused", "ascend-pt")
    assert _with(_types(exported("s0-none", "ascend-pt")), before.sequences(), chain) > 0
    assert _with(_types(exported("s0-lnfused", "ascend-pt")), after.sequences(), chain) == 0


def test_both_layouts_give_the_same_kernel_analysis(advise: Callable[[str, ExportTarget], Advice]) -> None:
    pt, native = advise("s0-baseline", "ascend-pt"), advise("s0-baseline", "msprof")
    assert pt.sequences() == native.sequences()
    assert pt.problems["Fusible Operator Analysis"] == native.problems["Fusible Operator Analysis"]


def test_overall_summary_computing_time_is_the_exported_busy_time(
    advise: Callable[[str, ExportTarget], Advice], exported: Exported
) -> None:
    summary = {str(r[0]).strip(): r for r in advise("s0-baseline", "ascend-pt").book["Overall Summary"][1:] if r}
    steps = rows(exported("s0-baseline", "ascend-pt").root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    busy_ms = sum(us_to_ns(r["Computing"]) for r in steps) / 1e6
    assert float(str(summary["Computing Time"][1])) == pytest.approx(busy_ms, abs=1e-3)


def test_cluster_analysis_reads_step_trace_time(exported: Exported, tmp_path: Path) -> None:
    result = exported("s0-baseline", "ascend-pt")
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    shutil.copytree(result.root, cluster / result.root.name)
    _run(["cluster", "-d", str(cluster), "-o", str(tmp_path / "out")], tmp_path)
    got = rows(next((tmp_path / "out").rglob("cluster_step_trace_time.csv")))
    ours = rows(result.root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    assert [(r["Step"], r["Computing"], r["Stage"]) for r in got] == [
        (r["Step"], r["Computing"], r["Stage"]) for r in ours
    ]
