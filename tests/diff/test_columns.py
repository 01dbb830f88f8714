"""`diff` reads runs of ours with only DIFF_COLUMNS: the report is the one the whole tables give, on pairs that
exercise its paths (fused against unfused, graph against eager, another device, several ranks, another seed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.analyze.columns import DIFF_COLUMNS
from atbprof.config import load_config
from atbprof.diff.api import diff
from atbprof.importers.detect import load_profile
from atbprof.render.diff import diff_json
from atbprof.run import run_simulation
from tests.conftest import FIXTURES

BASE = ("llama2-7b-910b2.yaml", ["fusion.strategy=none"])
PAIRS = [
    (BASE, ("llama2-7b-910b2.yaml", [])),
    (("llama2-7b-910b2.yaml", []), ("llama2-7b-910b2.yaml", ["execution.mode=graph"])),
    (BASE, ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "seed=1", "execution.jitter.kernel_cv=0.05"])),
    (("llama2-7b-910a.yaml", []), ("llama2-7b-910b2.yaml", [])),
    (("llama2-70b-910b2-tp4-pp2.yaml", ["fusion.strategy=none"]), ("llama2-70b-910b2-tp4-pp2.yaml", [])),
]


def _run(tmp_path: Path, name: str, side: tuple[str, list[str]]) -> Path:
    config, overrides = side
    out = tmp_path / name
    run_simulation(load_config(FIXTURES / config, [*overrides, "workload.decode_tokens=3", "output.trace=false"]), out)
    return out


@pytest.mark.parametrize(("base", "new"), PAIRS, ids=["fusion", "graph", "seed", "device", "tp-pp"])
def test_projected_diff_is_the_whole_tables(
    tmp_path: Path, base: tuple[str, list[str]], new: tuple[str, list[str]]
) -> None:
    a, b = _run(tmp_path, "a", base), _run(tmp_path, "b", new)
    whole = diff(load_profile(a, framework=False), load_profile(b, framework=False))
    held = [load_profile(p, framework=False, columns=DIFF_COLUMNS) for p in (a, b)]
    assert held[0].ops.num_columns < whole.base.profile.ops.num_columns
    assert diff_json(diff(*held).report) == diff_json(whole.report)


def test_projected_alignment_keeps_the_fused_ops_origins(tmp_path: Path) -> None:
    """A `--map` diff aligns the op sequences, pairing a fused kernel with the ops its `fused_from` names."""
    a, b = _run(tmp_path, "a", BASE), _run(tmp_path, "b", ("llama2-7b-910b2.yaml", []))
    renames = {"Cast": "Cast"}
    whole = diff(load_profile(a, framework=False), load_profile(b, framework=False), name_map=renames)
    held = [load_profile(p, framework=False, columns=DIFF_COLUMNS) for p in (a, b)]
    assert whole.report.matching.method == "alignment"
    assert diff_json(diff(*held, name_map=renames).report) == diff_json(whole.report)
