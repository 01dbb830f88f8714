"""The training pass of every kernel of a profile: forward, backward or optimizer (analyze/training.py's phases).

A profile with no backward kernel (inference, or a capture of part of a step) is forward, but for its optimizer
kernels (patterns.yaml `training.optimizer`: ApplyAdamW, ...), which are the optimizer's wherever they run.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.analyze.patterns import load_patterns
from atbprof.analyze.training import TRAINING_PHASES, ops_matching, training_phases
from atbprof.analyze.view import OpView

PASSES = TRAINING_PHASES


def kernel_passes(ops: pa.Table) -> np.ndarray:
    """Per row of `ops` (in its order): the index into PASSES of the pass its kernel belongs to."""
    code = np.zeros(ops.num_rows, dtype=np.int64)
    if ops.num_rows == 0:
        return code
    view = OpView.build(ops)
    patterns = load_patterns()
    phases = training_phases(view, patterns)
    if phases is None:
        phases = np.where(ops_matching(view, patterns.training.optimizer), PASSES.index("optimizer"), 0)
    code[view.rows] = phases
    return code
