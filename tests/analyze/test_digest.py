"""The findings digest (analyze/digest.py): a run's findings cut into parts anywhere, added part by part, give each
finding's figures as the whole occurrences table does (analyze/group_sums.py), the re-simulated what-if included."""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.analyze.attribute import attribute
from atbprof.analyze.detect import detect_parts
from atbprof.analyze.digest import FindingsDigest
from atbprof.analyze.graph_edges import graph_edges, run_config
from atbprof.analyze.group_sums import GroupSums, group_sums
from atbprof.analyze.patterns import load_patterns
from atbprof.analyze.report import Breakdown
from atbprof.analyze.whatif import resimulate, resimulated_savings, rule_facts, whatif_resimulated
from atbprof.config import load_config
from atbprof.importers.ours import load_run
from atbprof.run import run_simulation
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[tuple[int, int], pa.Table]], object, object]:
    """A run with many kinds of findings (unfused, 910A's aggressive fusion leaves others), detected whole."""
    run = tmp_path_factory.mktemp("digest") / "run"
    cfg = load_config(FIXTURES / "llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.decode_tokens=6"])
    run_simulation(cfg.model_copy(update={"output": cfg.output.model_copy(update={"trace": False})}), run)
    profile = load_run(run)
    patterns = load_patterns(None)
    parts = detect_parts(profile.ops, patterns, graph_edges(run_config(profile.meta)))  # type: ignore[arg-type]
    whole = pa.concat_tables([t for _, t in sorted(parts, key=lambda p: p[0])])
    breakdown = attribute(profile.ops, profile.steps, whole, patterns, frames=profile.step_frames)
    return parts, profile, breakdown


def _cut(parts: list[tuple[tuple[int, int], pa.Table]], cuts: list[int], n_parts: int) -> list[list[tuple]]:
    """Each key's table cut at the same relative points into `n_parts` parts (some empty): the parts' findings."""
    out: list[list[tuple]] = [[] for _ in range(n_parts)]
    for key, table in parts:
        n = table.num_rows
        edges = [0, *sorted(min(n, c * n // 1000) for c in cuts[: n_parts - 1]), n]
        for i in range(n_parts):
            out[i].append((key, table.slice(edges[i], edges[i + 1] - edges[i])))
    return out


def _own_evidence(key: tuple[int, int], table: pa.Table) -> pa.Table:
    """Every occurrence's evidence its own: a finding's is then its first occurrence's, which must be found."""
    i = table.schema.get_field_index("evidence")
    texts = pa.array([f"{key} row {r}" for r in range(table.num_rows)], pa.string())
    return table.set_column(i, table.schema.field(i), texts)


def _same(a: list[GroupSums], b: list[GroupSums]) -> None:
    assert [(s.level, s.kind, s.pattern, s.fused_as) for s in a] == [
        (s.level, s.kind, s.pattern, s.fused_as) for s in b
    ]
    for x, y in zip(a, b, strict=True):
        dx, dy = asdict(x), asdict(y)
        sx, sy = dx.pop("saving_ns"), dy.pop("saving_ns")  # one rounding against a sum of rounded shares
        assert (sx is None) == (sy is None) and (sx is None or sx == pytest.approx(sy, rel=1e-12, abs=1e-9))
        px, py = dx.pop("by_phase"), dy.pop("by_phase")
        assert [p[:4] for p in px] == [p[:4] for p in py]
        assert [p[4] for p in px] == pytest.approx([p[4] for p in py], rel=1e-12, abs=1e-9)
        assert dx == dy  # counts, times, first rule and evidence, examples (their own shares exactly)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], print_blob=False)
@given(st.lists(st.integers(0, 1000), min_size=6, max_size=6), st.integers(1, 7), st.booleans(), st.randoms())
def test_parts_anywhere_give_the_whole_tables_sums(
    found: tuple, cuts: list[int], n_parts: int, whatif: bool, rnd: random.Random
) -> None:
    """Cut anywhere, added in any order (the chunked reader adds them part by part; the digest orders by place)."""
    parts, profile, breakdown = found
    assert isinstance(breakdown, Breakdown)
    parts = [(key, _own_evidence(key, t)) for key, t in parts]
    whole = pa.concat_tables([t for _, t in sorted(parts, key=lambda p: p[0])])
    digest = FindingsDigest(top=10)
    adds = [(index, key, table) for index, part in enumerate(_cut(parts, cuts, n_parts)) for key, table in part]
    rnd.shuffle(adds)
    for index, key, table in adds:
        digest.add(key, index, table)
    assert digest.occurrences == whole.num_rows
    if whatif:
        cfg, summary = run_config(profile.meta), profile.meta["summary"]
        held, wi = whatif_resimulated(whole, cfg, summary, breakdown.span_us)  # type: ignore[arg-type]
        again, shares = resimulate(digest.rule_facts(), cfg, summary, breakdown.span_us)  # type: ignore[arg-type]
        assert again == wi and digest.rule_facts() == rule_facts(whole)
        digest.estimated(shares)
        assert np.array_equal(resimulated_savings(whole, shares), held.column("est_saving_ns").to_numpy(), True)
        whole = held
    _same(digest.group_sums(breakdown), group_sums(whole, breakdown, 10))


def test_no_findings(found: tuple) -> None:
    _, _, breakdown = found
    assert FindingsDigest(top=3).group_sums(breakdown) == []


def test_a_finding_first_seen_in_a_later_part_of_an_earlier_key(found: tuple) -> None:
    """The first occurrence is the least (key, part, row): a finding of key A in part 2 comes before one of key B
    in part 0, as the whole table (ordered by key, then part) has them."""
    parts, _, breakdown = found
    ordered = sorted(parts, key=lambda p: p[0])
    (first_key, first), (second_key, second) = ordered[0], ordered[1]
    digest = FindingsDigest(top=3)
    digest.add(second_key, 0, second)
    digest.add(first_key, 2, first)
    got = [(s.kind, s.pattern) for s in digest.group_sums(breakdown)]
    want = [(s.kind, s.pattern) for s in group_sums(pa.concat_tables([first, second]), breakdown, 3)]
    assert got == want


def test_the_run_has_what_the_test_needs(found: tuple, tmp_path: Path) -> None:
    parts, _, _ = found
    kinds = {k for _, t in parts for k in t.column("kind").to_pylist()}
    assert len(parts) >= 3 and len(kinds) >= 2
