"""The cluster report's terminal / Markdown view: the matrix as a heat table, and a large cluster's rank table kept
to its slow ranks and longest steps (exact output)."""

from __future__ import annotations

from typer.testing import CliRunner

from atbprof.analyze.cluster_report import RankRow, StepSplit
from atbprof.commands import app
from atbprof.render.cluster import ALL_RANKS_UP_TO, _ranks_shown
from tests.analyze.test_cluster import QWEN, needs_qwen

runner = CliRunner()


@needs_qwen
def test_the_qwen3_matrix_is_a_heat_table() -> None:
    out = runner.invoke(app, ["analyze", str(QWEN), "--format", "md"])
    assert out.exit_code == 0, out.output
    heat = out.output.split("## communication matrix as a heat table")[1].split("\n\n## ")[0]
    assert heat.splitlines()[2:] == [
        "| src \\ dst | 0 | 1 | 2 | 3 |",
        "|---:|---:|---:|---:|---:|",
        "| 0 |  | 18.94 █ | 19.10 █ | 0.06 |",
        "| 1 | 18.94 █ |  | 0.07 | 19.13 █ |",
        "| 2 | 19.10 █ | 0.08 |  | 18.93 █ |",
        "| 3 | 0.02 | 19.13 █ | 18.93 █ |  |",
    ]
    assert "partial (no kernel tables): 1-3" in out.output


def _row(rank: int, step_us: float, slow: bool = False) -> RankRow:
    split = dict.fromkeys(StepSplit.model_fields, 0.0) | {"stage_us": step_us}
    return RankRow.model_construct(
        rank=rank,
        stage=0,
        complete=False,
        steps=1,
        step_source="none",
        slow=slow,
        slow_reason=None,
        fusion_saving_us=None,
        **split,
    )


def test_a_large_cluster_shows_its_slow_ranks_and_longest_steps() -> None:
    small = [_row(r, 100.0) for r in range(ALL_RANKS_UP_TO)]
    assert _ranks_shown(small, 10) == small
    ranks = [_row(r, 100.0 + (r % 7), slow=r in (40, 900)) for r in range(1024)]
    shown = [r.rank for r in _ranks_shown(ranks, 10)]
    assert shown == sorted(shown) and len(shown) == 10 and {40, 900} <= set(shown)
    assert all(r % 7 == 6 for r in shown if r not in (40, 900))  # the longest steps: 106 µs
