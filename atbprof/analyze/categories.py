"""Seed 000's rows for every op: Attention (with its norm), FFN (with its norm), other (+ communication).

Runs of ours carry roles, and the simulator's own summary (atbprof/sim/summary.py) maps them; this uses the same
map so the two agree. Foreign profiles have no roles: ops are cut into blocks at the layer norms and each block is
named by the kernels in it (see HEURISTIC).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.detect import first_tensor
from atbprof.analyze.module_roles import MODULE_RULE, by_modules
from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.training import ops_matching, training_phases
from atbprof.analyze.view import OpView, RowsOf, int_column
from atbprof.sim.categories import CATEGORIES

CATEGORY_NAMES = ("attention", "ffn", "other", "communication", "memory")
"""memory: device copies and fills a profile records as their own tasks (Kineto gpu_memcpy / gpu_memset)."""
ROLES_RULE = (
    "roles from the run: attn.* is Attention (with attn.norm and the residual Add after attention), ffn.* (and a "
    "MoE layer's moe.*) is FFN (with ffn.norm and its residual Add), head.* (embedding, final norm, LM head, "
    "sampling) plus each step's host lead-in and token sync is other - the simulator's own rows (run.json "
    "breakdown_ms_per_token)"
)
HEURISTIC = (
    "no roles in this profile, so blocks were inferred per stream: a block starts at each norm over the hidden "
    "width ({hidden}; q/k norms inside attention do not start one; a framework-level norm chain starts one at the "
    "first kernel it launched) and keeps the residual Add before the next norm; "
    "a block with an attention kernel (FlashAttention, softmax, BatchMatMul, RoPE, KV-cache write) is Attention, a "
    "block with MatMuls right after an Attention block is FFN, everything else (embedding, LM head, optimizer) is "
    "other; communication kernels are their own row, as are device copies and fills (memory)"
)
TRAINING_HEURISTIC = (
    "; in a training step's backward phase a block ends at its norm's gradient (the reverse of the forward order) "
    "and is Attention when it holds an attention gradient kernel, else FFN when it holds MatMuls, so backward "
    "kernels count for the block they differentiate; the optimizer phase is other"
)


def norm_symbols(patterns: PatternSet) -> set[int]:
    """Symbols of the classes the fused_norm patterns name: the norm kernels (plain or fused)."""
    names: set[str] = set()
    for cp in patterns.kernel.patterns:
        if cp.spec.kind == "fused_norm":
            names |= {n.strip() for tok in cp.spec.regex.split("<")[1:] for n in tok.split(">")[0].split("|")}
    return {patterns.kernel.symbols[n] for n in names if n in patterns.kernel.symbols}


def by_roles(view: OpView) -> np.ndarray:
    """Category code (index into CATEGORY_NAMES) of every op, in view order, from its role."""
    codes, roles = view.codes("role")
    per_role = np.array(
        [CATEGORY_NAMES.index(CATEGORIES.get(r.split(".")[0], "other")) for r in roles] + [2], dtype=np.int64
    )
    return per_role[codes]


def _widths(view: OpView, column: str, positions: np.ndarray) -> np.ndarray:
    """Last dimension of the first tensor of `column` at positions (-1 when unknown), parsing each string once."""
    codes, names = view.codes(column)
    per_name = np.array([(first_tensor(s) or (-1,))[-1] for s in names] + [-1], dtype=np.int64)
    return per_name[codes[positions]]


def _kinds(view: OpView, patterns: PatternSet) -> np.ndarray:
    kinds = np.array([patterns.category_of(t) or "" for t in view.type_names] + [""], dtype=object)
    return kinds[view.type_codes]


def categorise(
    view: OpView,
    patterns: PatternSet,
    findings: pa.Table,
    host_calls: pa.Table | None = None,
    framework: pa.Table | None = None,
) -> tuple[np.ndarray, str]:
    """Category codes (view order) of a profile without roles, and the rule as a sentence: from the module calls
    that launched each kernel where the profile records them (module_roles.py), else blocks cut at the norms."""
    codes = by_modules(view, host_calls, CATEGORY_NAMES)
    if codes is None:
        return by_blocks(view, patterns, findings, framework)
    cat_of_op = _kinds(view, patterns)
    codes[cat_of_op == "communication"] = CATEGORY_NAMES.index("communication")
    codes[cat_of_op == "memory"] = CATEGORY_NAMES.index("memory")
    return codes, MODULE_RULE


def _framework_chain_starts(findings: pa.Table, framework: pa.Table | None, view: OpView) -> np.ndarray:
    """op_index of the first kernel each framework-level decomposed norm chain launched (a Hugging Face eager
    RMSNorm is aten::pow / mean / add / rsqrt / mul calls: its kernels are elementwise ones no kernel pattern
    names)."""
    if framework is None or not framework.num_rows:
        return np.zeros(0, np.int64)
    rows = findings.filter(pc.equal(findings.column("level"), "framework"))
    firsts = [
        ix[0]
        for ix, kind in zip(rows.column("op_indices").to_pylist(), rows.column("kind").to_pylist(), strict=True)
        if kind.startswith("decomposed") and ix
    ]
    launch = view.ints("host_launch_start_ns")
    if not firsts or not (launch >= 0).any():
        return np.zeros(0, np.int64)
    call_start = int_column(framework, "start_ns", 0)[RowsOf(int_column(framework, "index", 0)).rows(firsts)]
    known = np.flatnonzero(launch >= 0)
    order = known[np.argsort(launch[known], kind="stable")]
    at = np.searchsorted(launch[order], call_start, side="left")
    at = at[at < len(order)]
    return view.op_index[order[at]]


def by_blocks(
    view: OpView, patterns: PatternSet, findings: pa.Table, framework: pa.Table | None = None
) -> tuple[np.ndarray, str]:
    """Category codes (view order) for a profile without roles, and the heuristic as a sentence."""
    n = len(view)
    cat_of_op = _kinds(view, patterns)
    attention = cat_of_op == "attention"
    matmul = cat_of_op == "matmul"
    comm = cat_of_op == "communication"
    memory = cat_of_op == "memory"
    lut = np.append(patterns.kernel.lookup(view.type_names), np.uint8(0))
    anchor = np.isin(lut[view.type_codes], np.array(sorted(norm_symbols(patterns)), dtype=np.uint8))
    kernel_rows = findings.filter(pc.equal(findings.column("level"), "kernel"))
    decomposed = [k.startswith("decomposed") for k in kernel_rows.column("kind").to_pylist()]
    chain_starts = [ix[0] for ix, d in zip(kernel_rows.column("op_indices").to_pylist(), decomposed, strict=True) if d]
    anchor |= np.isin(view.op_index, np.array(chain_starts, dtype=np.int64))
    # a framework-level chain starts a block at the first kernel it launched
    anchor |= np.isin(view.op_index, _framework_chain_starts(findings, framework, view))
    hidden = "unknown"
    mm_widths = _widths(view, "output_shapes", np.flatnonzero(matmul))
    if (mm_widths > 0).any():
        width = Counter(mm_widths[mm_widths > 0].tolist()).most_common(1)[0][0]
        anchor_pos = np.flatnonzero(anchor)
        norm_widths = _widths(view, "input_shapes", anchor_pos)
        if (norm_widths == width).any():  # else keep every norm: better than none
            anchor[anchor_pos[(norm_widths != width) & (norm_widths > 0)]] = False
            hidden = str(width)
    training = training_phases(view, patterns)
    phase_start = np.zeros(n, dtype=bool)
    if training is not None:
        phase_start[1:] = training[1:] != training[:-1]  # a (step, stream) group is in start order
        anchor &= training == 0  # forward norms start forward blocks; the backward is cut below
    boundary = anchor | view.group_first | phase_start
    seg = np.cumsum(boundary) - 1
    n_seg = int(seg[-1]) + 1 if n else 0
    seg_attn = np.bincount(seg, weights=attention, minlength=n_seg) > 0
    seg_mm = np.bincount(seg, weights=matmul, minlength=n_seg) > 0
    starts = np.flatnonzero(boundary)
    led_by_norm = anchor[starts]
    new_group = (view.group_first | phase_start)[starts]
    seg_cat = np.full(n_seg, CATEGORY_NAMES.index("other"), dtype=np.int64)
    seg_cat[seg_attn & led_by_norm] = CATEGORY_NAMES.index("attention")
    prev_attn = np.zeros(n_seg, dtype=bool)
    prev_attn[1:] = (seg_cat[:-1] == CATEGORY_NAMES.index("attention")) & ~new_group[1:]
    seg_cat[seg_mm & ~seg_attn & led_by_norm & prev_attn] = CATEGORY_NAMES.index("ffn")
    codes = seg_cat[seg] if n else np.zeros(0, dtype=np.int64)
    heuristic = HEURISTIC.format(hidden=hidden)
    if training is not None:
        codes = _backward_blocks(view, patterns, training, phase_start, attention, matmul, codes)
        heuristic += TRAINING_HEURISTIC
    codes[comm] = CATEGORY_NAMES.index("communication")
    codes[memory] = CATEGORY_NAMES.index("memory")
    return codes, heuristic


def _backward_blocks(
    view: OpView,
    patterns: PatternSet,
    training: np.ndarray,
    phase_start: np.ndarray,
    attention: np.ndarray,
    matmul: np.ndarray,
    codes: np.ndarray,
) -> np.ndarray:
    """Categories of a training step's backward and optimizer ops: a backward block runs up to and including the
    next norm gradient."""
    norm_grad = ops_matching(view, patterns.training.norm_backward)
    backward = training == 1
    ends = norm_grad & backward
    after_end = np.zeros(len(ends), dtype=bool)
    after_end[1:] = ends[:-1]
    seg = np.cumsum(view.group_first | phase_start | after_end) - 1
    n_seg = int(seg[-1]) + 1 if len(seg) else 0
    has = lambda mask: np.bincount(seg, weights=mask & backward, minlength=n_seg) > 0  # noqa: E731
    closed, attn, mm = has(ends), has(attention), has(matmul)
    cat = np.full(n_seg, CATEGORY_NAMES.index("other"), dtype=np.int64)
    cat[closed & attn] = CATEGORY_NAMES.index("attention")
    cat[closed & mm & ~attn] = CATEGORY_NAMES.index("ffn")
    out = codes.copy()
    out[backward] = cat[seg[backward]]
    out[training == 2] = CATEGORY_NAMES.index("other")
    return out
