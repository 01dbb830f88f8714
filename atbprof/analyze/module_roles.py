"""Categories from what the model ran: a kernel takes the role of the module whose call launched it.

A Kineto trace recorded with modules (`with_modules` / `with_stack`) has a python_function range
"nn.Module: <Class>_<n>" per module call. Classes are named by module_roles.yaml (attention, ffn, norm, other). A
kernel belongs to the module call its host launch falls in:

  - inside an attention or FFN module (at any depth: a q/k norm or a rotary embedding inside attention, the
    experts inside an MoE block) it is that block's;
  - inside a norm that no attention / FFN module holds (a pre-norm layer's input and post-attention norms) it is
    the block of the next attention / FFN call - seed 000 counts a block's norm in the block; the final norm
    (followed by the LM head, not a block) is other;
  - outside every named module, it is the block of the last named call before its launch (the residual Add right
    after attention is Attention's, the one after the MLP is FFN's; the LM head after the final norm and the
    sampler are other).

Pure: the ops, the host calls and the vocabulary in, a category code per op out.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.view import OpView
from atbprof.arrays import distinct
from atbprof.yamlio import load_data

MODULE_PREFIX = "nn.Module: "
MODULE_RULE = (
    "roles from the module calls the profile records (nn.Module ranges): a kernel is in the block of the "
    "attention / FFN module whose call launched it, a layer's norm in the block it feeds, a kernel between "
    "modules (a residual Add) in the block before it; embedding, final norm, LM head and sampling are other "
    "(analyze/module_roles.yaml); communication kernels are their own row, as are device copies and fills (memory)"
)


@cache
def _rules() -> tuple[tuple[str, re.Pattern[str]], ...]:
    text = resources.files("atbprof.analyze").joinpath("module_roles.yaml").read_text(encoding="utf-8")
    return tuple((r["role"], re.compile(r["regex"])) for r in load_data(text)["rules"])


def role_of_class(name: str) -> str | None:
    """The role of an `nn.Module: <Class>_<n>` range (None: a module with no role of its own)."""
    cls = re.sub(r"_\d+$", "", name.removeprefix(MODULE_PREFIX))
    for role, regex in _rules():
        if regex.fullmatch(cls):
            return role
    return None


def by_modules(view: OpView, host_calls: pa.Table | None, names: tuple[str, ...]) -> np.ndarray | None:
    """Category code (index into `names`: attention, ffn, other, ...) per op in view order; None when the profile
    records no named module call, no op has a host launch to place, or most kernel time was launched outside
    every named module call."""
    if host_calls is None or not host_calls.num_rows or not view.table.num_rows:
        return None
    modules = host_calls.filter(pc.starts_with(host_calls.column("name"), MODULE_PREFIX))
    if not modules.num_rows:
        return None
    roles = [role_of_class(n) for n in modules.column("name").to_pylist()]
    named = np.array([r is not None for r in roles], bool)
    if not named.any():
        return None
    start = np.asarray(modules.column("start_ns").to_numpy(), np.int64)[named]
    end = start + np.asarray(modules.column("dur_ns").to_numpy(), np.int64)[named]
    role = np.array([r for r in roles if r is not None], dtype=object)
    order = np.lexsort((-end, start))
    start, end, role = start[order], end[order], role[order]
    top = _top_level(start, end)
    block = _block_roles(start, end, role, top)
    launch = view.ints("host_launch_start_ns")
    if not (launch >= 0).any():
        return None
    at = _owner(start, end, top, launch)
    inside = (launch >= 0) & (at >= 0) & (launch < end[np.clip(at, 0, None)])
    dur = view.dur.astype(np.float64)
    if dur[inside].sum() < 0.5 * dur[launch >= 0].sum():
        # most kernel time was launched outside every module call: replayed from a captured graph (vLLM's and
        # SGLang's decode), whose launch no module range holds - the module calls say nothing about those kernels
        return None
    code = {r: names.index(r) if r in names else names.index("other") for r in ("attention", "ffn", "other")}
    block_codes = np.array([code[b] for b in block] + [code["other"]], np.int64)
    return block_codes[np.where((launch >= 0) & (at >= 0), at, len(block))]


def _top_level(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the outermost named range holding each range (itself when none does); ranges in start order,
    longer first on ties."""
    n = len(start)
    reach = np.maximum.accumulate(end) if n else end
    # a range is top-level when it starts at or after every earlier range has ended
    is_top = np.ones(n, bool)
    is_top[1:] = start[1:] >= reach[:-1]
    tops = np.flatnonzero(is_top)
    outer = tops[np.searchsorted(tops, np.arange(n), side="right") - 1]
    return outer


def _block_roles(start: np.ndarray, end: np.ndarray, role: np.ndarray, top: np.ndarray) -> list[str]:
    """The block each named range's kernels count for: its top-level range's role, and for a top-level norm the
    role of the next top-level attention / FFN range (other when an embedding, LM head or nothing comes first)."""
    top_ids = distinct(top)
    top_role = role[top_ids]
    resolved = top_role.copy()
    following = "other"
    for i in range(len(top_ids) - 1, -1, -1):  # one pass from the end: the next block of every norm
        if top_role[i] == "norm":
            resolved[i] = following
        else:
            following = top_role[i] if top_role[i] in ("attention", "ffn") else "other"
    by_top = dict(zip(top_ids.tolist(), resolved.tolist(), strict=True))
    return [by_top[t] for t in top.tolist()]


def _owner(start: np.ndarray, end: np.ndarray, top: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time: the top-level named range holding it, else the last one that started before it (-1: none)."""
    tops = distinct(top)
    k = np.searchsorted(start[tops], t, side="right") - 1
    return np.where(k >= 0, tops[np.clip(k, 0, None)], -1)
