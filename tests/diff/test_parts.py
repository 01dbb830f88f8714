"""Two runs of ours diffed in parts (diff/parts.py) give the report of the tables held whole, byte for byte, wherever
the parts are cut; a diff that needs the whole tables still reads them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.config import load_config
from atbprof.diff.api import diff, diff_paths
from atbprof.diff.parts import plan_parts
from atbprof.errors import InputError
from atbprof.importers.detect import load_profile
from atbprof.render.diff import diff_json
from atbprof.run import run_simulation
from tests.conftest import FIXTURES, regroup

UNFUSED = ("llama2-7b-910b2.yaml", ["fusion.strategy=none"])
JITTER = ["execution.jitter.kernel_cv=0.05", "execution.jitter.host_cv=0.1"]
PAIRS = {
    "fusion": (UNFUSED, ("llama2-7b-910b2.yaml", [])),
    "seed": (UNFUSED, ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "seed=1", *JITTER])),
    "graph": (("llama2-7b-910b2.yaml", [*JITTER]), ("llama2-7b-910b2.yaml", ["execution.mode=graph", "seed=2"])),
    "device": (("llama2-7b-910a.yaml", []), ("llama2-7b-910b2.yaml", [])),
    # one step a side: the rows are tested on the layers' instances within the step
    "one-step": (
        ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.decode_tokens=0", *JITTER]),
        ("llama2-7b-910b2.yaml", ["workload.decode_tokens=0", "seed=3", *JITTER]),
    ),
}


@cache
def _run(root: Path, side: tuple[str, tuple[str, ...]]) -> Path:
    config, overrides = side
    out = root / f"run{abs(hash(side))}"
    cfg = load_config(FIXTURES / config, ["workload.decode_tokens=6", *overrides, "output.trace=false"])
    run_simulation(cfg, out)
    regroup(out, 700)  # several row groups a step or more: parts end mid-group, steps carried to the next part
    return out


def _pair(root: Path, name: str) -> tuple[Path, Path]:
    (bc, bo), (nc, no) = PAIRS[name]
    return _run(root, (bc, tuple(bo))), _run(root, (nc, tuple(no)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parts")


def _whole(a: Path, b: Path, **options: object) -> str:
    report = diff(load_profile(a, framework=False), load_profile(b, framework=False), **options).report  # type: ignore[arg-type]
    return str(diff_json(report))


@pytest.mark.parametrize("name", list(PAIRS))
@pytest.mark.parametrize("by", ["op-type", "category", "layer", "role", "shape"])
def test_parts_give_the_whole_tables_report(runs: Path, name: str, by: str) -> None:
    a, b = _pair(runs, name)
    plans = plan_parts(a, b, part_ops=1, parts_from=0)
    assert plans is not None
    assert all(len(p.chunks) > 2 for p in plans) or name == "one-step"  # read in parts (a step is never cut)
    parts = diff_paths(a, b, part_ops=1, parts_from=0, by=by).report
    assert str(diff_json(parts)) == _whole(a, b, by=by)


def test_the_one_step_pair_tests_instances(runs: Path) -> None:
    a, b = _pair(runs, "one-step")
    report = diff_paths(a, b, part_ops=1, parts_from=0).report
    assert report.matching.pairs == 1
    assert any(r.ci_low_us is not None for r in report.rows)  # the per-instance test ran on the parts' sides


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part_ops=st.integers(1, 20_000), from_ops=st.sampled_from([0, 5_000]))
def test_any_cut_gives_the_same_report(runs: Path, part_ops: int, from_ops: int) -> None:
    """Parts of any size, and one side read in parts only because the other is larger than `parts_from`."""
    a, b = _pair(runs, "seed")
    parts = diff_paths(a, b, part_ops=part_ops, parts_from=from_ops, fail_if_slower_pct=0.5).report
    assert str(diff_json(parts)) == _whole(a, b, fail_if_slower_pct=0.5)


def test_small_runs_several_devices_renames_and_other_models_are_read_whole(runs: Path) -> None:
    a, b = _pair(runs, "fusion")
    assert plan_parts(a, b) is None  # neither larger than CHUNKED_FROM
    tp = _run(runs, ("llama2-70b-910b2-tp4-pp2.yaml", ("workload.decode_tokens=2",)))
    tp_fused = _run(runs, ("llama2-70b-910b2-tp4-pp2.yaml", ("workload.decode_tokens=2", "fusion.strategy=none")))
    assert plan_parts(tp, tp_fused, parts_from=0) is None  # several devices: rank 0, read whole
    assert str(diff_json(diff_paths(tp, tp_fused, parts_from=0).report)) == _whole(tp, tp_fused)
    renames = {"Cast": "Cast"}
    mapped = diff_paths(a, b, parts_from=0, name_map=renames).report
    assert mapped.matching.method == "alignment"
    assert str(diff_json(mapped)) == _whole(a, b, name_map=renames)
    other = _run(runs, ("llama3-8b-910b2.yaml", ("workload.decode_tokens=2",)))
    assert plan_parts(a, other, parts_from=0) is None
    with pytest.raises(InputError, match="runs of different models"):
        diff_paths(a, other, parts_from=0)
    forced = diff_paths(a, other, parts_from=0, force=True).report
    assert forced.matching.method == "alignment"


def test_the_cli_diffs_large_runs_in_parts(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`atbprof diff` takes the parts path for runs it plans in parts, and prints what the whole tables give."""
    from typer.testing import CliRunner

    import atbprof.diff.api as api
    from atbprof.commands import app

    a, b = _pair(runs, "seed")
    formats = ("json", "md", "rich")
    whole = [CliRunner().invoke(app, ["diff", str(a), str(b), "--format", f]).output for f in formats]
    seen: list[Path] = []
    real = api.plan_parts

    def in_parts(base: Path, new: Path, **_: object) -> object:
        seen.append(base)
        return real(base, new, part_ops=1, parts_from=0)

    monkeypatch.setattr(api, "plan_parts", in_parts)
    parts = [CliRunner().invoke(app, ["diff", str(a), str(b), "--format", f]).output for f in formats]
    assert seen == [a] * len(formats)
    assert parts == whole
    assert '"significant"' in whole[0]
