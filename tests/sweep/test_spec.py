"""The sweep's points from --grid options and sweep YAML files: expansion, values read back exactly as given, and
every bad input one message naming the key (before any point runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.config.loader import parse_overrides
from atbprof.errors import ConfigError, UsageError
from atbprof.sweep.spec import build_spec, override, split_values
from tests.conftest import FIXTURES

BASE = FIXTURES / "seed000-baseline.yaml"
SEED_SWEEP = FIXTURES / "sweeps" / "seed000.yaml"


def test_values_split_on_top_level_commas_only() -> None:
    assert split_values("1,4, 8") == ["1", "4", "8"]
    assert split_values("[20,12],[16,16]") == ["[20,12]", "[16,16]"]
    assert split_values('"a,b",c') == ['"a,b"', "c"]


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False, width=64),
        st.booleans(),
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00\r\n\x85\u2028\u2029"), max_size=20),
        st.lists(st.integers(0, 100), max_size=4),
    )
)
def test_an_override_reads_back_as_the_value_it_was_made_of(value: object) -> None:
    ((_, parsed),) = parse_overrides([override("k", value)])
    assert parsed == value and type(parsed) is type(value)


def test_a_grid_is_the_product_of_its_axes_then_the_explicit_points() -> None:
    spec = build_spec(BASE, None, ["workload.batch_size=1,8", "fusion=seed000-baseline,seed000-lnfused"], [])
    assert [a.key for a in spec.axes] == ["workload.batch_size", "fusion"]
    assert spec.points == [
        {"workload.batch_size": 1, "fusion": "seed000-baseline"},
        {"workload.batch_size": 1, "fusion": "seed000-lnfused"},
        {"workload.batch_size": 8, "fusion": "seed000-baseline"},
        {"workload.batch_size": 8, "fusion": "seed000-lnfused"},
    ]
    assert spec.overrides(2) == ["workload.batch_size=8", "fusion=seed000-baseline"]
    assert spec.compare is not None and (spec.compare.base, spec.compare.new) == ("seed000-baseline", "seed000-lnfused")


def test_zipped_axes_and_explicit_points(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        f"base: {BASE}\n"
        "set: {workload.decode_tokens: 4}\n"
        "grid: {workload.batch_size: [1, 2]}\n"
        "zip: [{model.preset: [llama2-7b, llama2-13b], device.preset: [910B2, 910B4]}]\n"
        "points: [{workload.batch_size: 64, workload.prompt_len: 128}]\n"
    )
    spec = build_spec(None, f, [], [])
    assert len(spec.points) == 2 * 2 + 1
    assert spec.points[1] == {"workload.batch_size": 1, "model.preset": "llama2-13b", "device.preset": "910B4"}
    assert spec.points[-1] == {"workload.batch_size": 64, "workload.prompt_len": 128}
    assert spec.swept_keys() == ["workload.batch_size", "model.preset", "device.preset", "workload.prompt_len"]
    assert spec.fixed == ["workload.decode_tokens=4"] and spec.name == "s"


def test_the_seed000_sweep_file() -> None:
    spec = build_spec(None, SEED_SWEEP, [], [])
    assert len(spec.points) == 30 and spec.name == "seed000" and len(spec.reference) == 3
    assert spec.base == str(BASE.resolve())


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (["workload.batchsize=1,2"], "--grid workload.batchsize=1: workload.batchsize: unknown key (did you mean"),
        (
            ["workload.batch_size=1,two"],
            "--grid workload.batch_size=two: workload.batch_size = 'two': expected a whole",
        ),
        (["workload.batch_size=0,1"], "--grid workload.batch_size=0: workload.batch_size = 0: Input should be greater"),
        (["workload.batch_size="], "an empty value"),
        (["workload.batch_size=1,,2"], "an empty value"),
        (["batch"], "expected KEY=V1,V2"),
        (["workload.batch_size=1", "workload.batch_size=2"], "given twice"),
        ([], "no points"),
        (["device.preset=910Z"], "--grid device.preset=910Z: "),
    ],
)
def test_bad_grids_are_named_before_anything_runs(grid: list[str], message: str) -> None:
    with pytest.raises((UsageError, ConfigError)) as err:
        build_spec(BASE, None, grid, [])
    assert message in str(err.value), str(err.value)


def test_bad_sweep_files(tmp_path: Path) -> None:
    cases = {
        "zip: [{workload.batch_size: [1, 2], workload.prompt_len: [8]}]\n": "need as many values each",
        "grid: {workload.batch_size: []}\n": "has no values",
        "grid: {workload.batch_size: [1]}\npoints: [{workload.batch_size: 1}]\n": "point 1 repeats point 0",
        "grid: {workload.batch_size: [1]}\nbogus: 1\n": "bogus: Extra inputs are not permitted",
        "grid: {workload.batch_size: [1, 2]}\ncompare: {axis: fusion, base: a, new: b}\n": "not a swept key",
        "grid: {fusion: [none, default]}\nreference: [{label: x, at: {workload.batch_size: 1}, gain_pct: 5}]\n": (
            "reference[0].at: workload.batch_size is not a swept key"
        ),
    }
    for i, (text, message) in enumerate(cases.items()):
        f = tmp_path / f"s{i}.yaml"
        f.write_text(f"base: {BASE}\n{text}")
        with pytest.raises((UsageError, ConfigError)) as err:
            build_spec(None, f, [], [])
        assert message in str(err.value), (text, str(err.value))
    with pytest.raises(UsageError, match="also swept in"):
        build_spec(None, SEED_SWEEP, ["fusion=none,default"], [])
    with pytest.raises(UsageError, match="give the base config with --config"):
        build_spec(None, None, ["workload.batch_size=1"], [])


def test_a_value_that_clashes_with_another_setting_is_left_to_its_point() -> None:
    """tp 3 does not divide LLaMA-2-7B's 32 heads: that point fails (recorded), the sweep is still valid."""
    spec = build_spec(BASE, None, ["parallel.tp=1,3"], ["device.preset=910B2"])
    assert [p["parallel.tp"] for p in spec.points] == [1, 3]


def test_a_sweep_name_is_a_plain_name(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(f"name: ../../elsewhere\nbase: {BASE}\ngrid: {{workload.batch_size: [1]}}\n")
    with pytest.raises(ConfigError, match="line 1: name: String should match pattern"):
        build_spec(None, f, [], [])
