"""Training steps: each op's phase within its step - forward, backward or optimizer - from the step's kernels.

A step with a backward kernel (patterns.yaml `training.backward`: *Grad, *Backward*, *Backprop*, *_bwd*...) is a
training step. Its ops before the first backward kernel are the forward, from there to the first optimizer kernel
after it (`training.optimizer`: ApplyAdamW, FusedAdam, multi_tensor_apply...) the backward, and the optimizer from
there on, by start time across streams. A pipeline schedule that interleaves forward and backward microbatches
(1F1B) puts the forwards after the first backward into the backward phase: the phases are the step's structure as
GPipe-like schedules (and the Qwen3 sample's rank 0) run it.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

import numpy as np

from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.view import OpView

TRAINING_PHASES = ("forward", "backward", "optimizer")


@lru_cache(maxsize=8)
def _glob_regex(globs: tuple[str, ...]) -> re.Pattern[str] | None:
    """The globs as one regular expression (fnmatchcase of any of them), or None for no globs."""
    return re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None


def _matches(names: list[str], globs: tuple[str, ...]) -> np.ndarray:
    regex = _glob_regex(globs)
    if regex is None:
        return np.zeros(len(names) + 1, dtype=bool)
    return np.array([regex.match(n) is not None for n in names] + [False], dtype=bool)


def ops_matching(view: OpView, globs: tuple[str, ...]) -> np.ndarray:
    """Ops (view order) whose type matches one of `globs` (patterns.yaml `training`), matched once per op type."""
    return _matches(view.type_names, globs)[view.type_codes]


def training_phases(view: OpView, patterns: PatternSet) -> np.ndarray | None:
    """Code into TRAINING_PHASES of every op (view order), or None when no step has a backward kernel."""
    if not _matches(view.type_names, patterns.training.backward).any():  # per op type, before any per-op work
        return None
    backward = ops_matching(view, patterns.training.backward)
    if not backward.any():
        return None
    optimizer = ops_matching(view, patterns.training.optimizer)
    steps, step_of = np.unique(view.step, return_inverse=True)
    inf = np.iinfo(np.int64).max
    first_bwd = np.full(len(steps), inf)
    np.minimum.at(first_bwd, step_of[backward], view.start[backward])
    after = optimizer & (view.start >= first_bwd[step_of])
    first_opt = np.full(len(steps), inf)
    np.minimum.at(first_opt, step_of[after], view.start[after])
    start = view.start
    phase = np.where(start < first_bwd[step_of], 0, np.where(start < first_opt[step_of], 1, 2))
    return phase.astype(np.int64)
