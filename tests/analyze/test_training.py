"""Training steps (issue 13 item 4): forward, backward and optimizer phases, backward kernels in the block they
differentiate, and no per-token figures for a training step."""

from __future__ import annotations

import fnmatch
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.analyze import analyze
from atbprof.analyze.categories import CATEGORY_NAMES, by_blocks
from atbprof.analyze.detect import detect_kernels
from atbprof.analyze.patterns import load_patterns
from atbprof.analyze.training import TRAINING_PHASES, _matches, training_phases
from atbprof.analyze.view import OpView
from atbprof.diff.api import diff
from atbprof.importers import load_profile
from tests.importers.conftest import ASCEND, LEVEL1, QWEN, TRACES, shared


def test_the_qwen3_training_step_has_its_phases() -> None:
    profile = load_profile(shared(QWEN))
    patterns = load_patterns()
    view = OpView.build(profile.ops)
    phase = training_phases(view, patterns)
    assert phase is not None
    types = [view.type_names[c] for c in view.type_codes]
    by = Counter((TRAINING_PHASES[p], t) for p, t in zip(phase.tolist(), types, strict=True))
    assert by["forward", "FlashAttentionScore"] == 28 and by["backward", "FlashAttentionScoreGrad"] == 28
    assert by["backward", "RmsNormGrad"] == 112 and by["optimizer", "ApplyAdamWV2"] == 57
    assert not any(p == "forward" and "Grad" in t for p, t in by)
    codes, rule = by_blocks(view, patterns, detect_kernels(profile.ops, patterns, None, view=view))
    cat = Counter((t, CATEGORY_NAMES[c]) for t, c in zip(types, codes.tolist(), strict=True))
    # backward kernels count for the block they differentiate
    assert cat["FlashAttentionScoreGrad", "attention"] == 28 and cat["RotaryPositionEmbeddingGrad", "attention"] == 56
    assert cat["SwiGluGrad", "ffn"] == 28 and cat["ApplyAdamWV2", "other"] == 57
    assert "backward phase" in rule


def test_the_qwen3_breakdown_no_longer_calls_the_step_attention() -> None:
    b = analyze(load_profile(shared(QWEN))).breakdown
    cats = {r.name: r for r in b.phases[0].categories}
    assert b.step_kind == "training" and cats["attention"].share < 0.35 and cats["ffn"].share > 0.05  # was 61.7 % / 0
    shares = {t.phase: t.share for t in b.training}
    assert set(shares) == set(TRAINING_PHASES) and shares["backward"] > shares["forward"] > shares["optimizer"] > 0


def test_an_inference_profile_is_not_a_training_step() -> None:
    b = analyze(load_profile(shared(TRACES / "hta_triton_example.json.gz"))).breakdown
    assert b.step_kind == "inference" and b.training == []


def test_a_training_diff_has_no_per_token_figures() -> None:
    report = diff(
        load_profile(shared(LEVEL1)), load_profile(shared(ASCEND / "msinsight_imagenet_cnn_level1_rank1"))
    ).report
    assert (
        report.headline.tokens_per_s is None and "training step" in report.summary and "ms/token" not in report.summary
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="abGrd_*?[]!x", max_size=12), max_size=8),
    st.lists(st.text(alphabet="abGrd_*?[]!x", min_size=0, max_size=4), max_size=5).map(tuple),
)
def test_globs_match_as_fnmatchcase(names: list[str], globs: tuple[str, ...]) -> None:
    """The training globs are matched as one regular expression: the same answers as fnmatchcase, glob by glob."""
    want = [any(fnmatch.fnmatchcase(n, g) for g in globs) for n in names] + [False]
    assert _matches(names, globs).tolist() == want
