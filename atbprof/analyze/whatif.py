"""What fusing the findings would save: re-simulated for runs of ours, device-model estimates for other profiles.

Pure: returns a new findings table with `est_fused_ns` / `est_saving_ns` filled, and the WhatIf summary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.detect import first_tensor
from atbprof.analyze.estimate import estimate
from atbprof.analyze.estimate_ops import fused_op
from atbprof.analyze.graph_edges import config_key
from atbprof.analyze.patterns import OPPORTUNITY_KINDS
from atbprof.analyze.replay import replay_savings
from atbprof.analyze.report import WhatIf, WhatIfStep
from atbprof.analyze.view import OpView, RowsOf, dict_codes
from atbprof.arrays import distinct

if TYPE_CHECKING:
    from atbprof.config.models import RunConfig

RESIMULATED = (
    "re-simulated the run's own config with the fusion rule(s) switched on one after another, in rule order "
    "({rules}): exact within the simulator; each finding gets its rule's saving in proportion to its time"
)
DEVICE_MODEL = (
    "each matched chain is replaced by the device model's estimate of the fused kernel from its shapes on {device} "
    "({why}); the rest of the profile stays as measured; the idle time before the removed kernels (their launch "
    "waits) goes with them, the wait before the first one stays; Norm+MatMul keeps the measured MatMul and adds the "
    "model's cost of folding the norm into it (into the AddRmsNorm when an Add->Norm finding shares the norm, so no "
    "norm is removed twice); chains without shapes assume the fused kernel costs as much as their longest kernel; "
    "framework-level findings (host time of the aten calls) count only when no device-level one does; where the "
    "profile records launches, its timeline is replayed without the removed kernels (each chain one fused kernel, "
    "later launches earlier by the host time the removed calls took): a host-bound step saves its launches "
    "wherever its idle shows"
)


def _with_estimates(findings: pa.Table, fused: np.ndarray, saving: np.ndarray) -> pa.Table:
    out = findings.set_column(
        findings.schema.get_field_index("est_fused_ns"),
        "est_fused_ns",
        pa.array(fused, pa.float64(), mask=np.isnan(fused)),
    )
    return out.set_column(
        out.schema.get_field_index("est_saving_ns"),
        "est_saving_ns",
        pa.array(saving, pa.float64(), mask=np.isnan(saving)),
    )


def counted(findings: pa.Table) -> np.ndarray:
    """Which rows count toward the total: device-level opportunities, or framework ones if there are none."""
    opp = _is_in(findings.column("kind"), list(OPPORTUNITY_KINDS))
    kernel = opp & _equals(findings, "level", "kernel")
    return kernel if kernel.any() else opp


def _equals(table: pa.Table, column: str, value: str) -> np.ndarray:
    """Bool per row (null -> False); Arrow compares in bulk where object arrays would compare one by one."""
    col = table.column(column)
    return np.asarray(pc.fill_null(pc.equal(col, pa.scalar(value, col.type)), False).to_numpy(), bool)


def _is_in(column: pa.ChunkedArray | pa.Array, values: list[str]) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.is_in(column, pa.array(values, column.type)), False).to_numpy(), bool)


_LATENCIES: dict[tuple[str, str], dict[str, Any]] = {}
"""simulate_latency's summaries by config (and the stamps of the files it reads): the ranks of a cluster, one
config, ask for the same ones."""


def _latency(cfg: RunConfig) -> dict[str, Any]:
    from atbprof.run import simulate_latency  # the simulator: only for runs of ours

    key = config_key(cfg)
    if key not in _LATENCIES:
        if len(_LATENCIES) >= 64:
            _LATENCIES.clear()
        _LATENCIES[key] = simulate_latency(cfg).model_dump()
    return copy.deepcopy(_LATENCIES[key])


@dataclass(frozen=True)
class RuleFacts:
    """What the findings say of the simulator's fusion rules: the rules of kernel-level opportunities (the rows the
    re-simulation prices), those of them with an unfused_op finding, and the kinds of each rule's rows."""

    rules: frozenset[str]
    unfused: frozenset[str]
    kinds: dict[str, frozenset[str]]


def priced(level: str, kind: str) -> bool:
    """Rows the re-simulation prices: kernel-level opportunities (`counted` of them, at kernel level)."""
    return level == "kernel" and kind in OPPORTUNITY_KINDS


def rule_facts(findings: pa.Table) -> RuleFacts:
    use = counted(findings) & _equals(findings, "level", "kernel")
    rule_codes, rule_names = dict_codes(findings.column("rule"))
    kind_codes, kind_names = dict_codes(findings.column("kind"))
    rules, unfused, kinds = set(), set(), {}
    for r, name in enumerate(rule_names):
        rows = use & (rule_codes == r)
        if name and rows.any():
            rules.add(name)
            kinds[name] = frozenset(kind_names[k] for k in distinct(kind_codes[rows]).tolist())
            if "unfused_op" in kinds[name]:
                unfused.add(name)
    return RuleFacts(frozenset(rules), frozenset(unfused), kinds)


def resimulate(
    facts: RuleFacts, cfg: RunConfig, before: dict[str, object], span_us: float
) -> tuple[WhatIf, list[tuple[str, dict[str, float]]]]:
    """Runs of ours: `before` is run.json's summary (the measured run); one re-simulation per rule involved, in
    order. Returns the WhatIf and, per rule re-simulated, what each phase saved (ns, as the phase's total: its
    findings share it by their time)."""
    from atbprof.fusion import load_rules

    rules_in_order = list(load_rules(cfg.fusion.rules_file).rules)
    wanted = [r for r in rules_in_order if r and r in facts.rules]
    # the norm fusions first (seed 000's comparison: the baseline with them on is its lnfused run), then the rest
    # of the catalogue, each in rule order
    wanted.sort(key=lambda r: r in facts.unfused)
    n_dec = int(before.get("decode_steps", 0))  # type: ignore[call-overload]

    def total_us(s: dict[str, object]) -> float:
        return (float(s["ttft_ms"]) + float(s["decode_ms_per_token"]) * n_dec) * 1e3  # type: ignore[arg-type]

    prev = total_us(before)
    prev_phase = {"prefill": float(before["ttft_ms"]), "decode": float(before["decode_ms_per_token"]) * n_dec}  # type: ignore[arg-type]
    steps: list[WhatIfStep] = []
    shares: list[tuple[str, dict[str, float]]] = []
    enabled: list[str] = list(cfg.fusion.enable)
    after_tok = before.get("decode_ms_per_token")
    for rule in wanted:
        if rule not in enabled:
            enabled.append(rule)
        fusion = cfg.fusion.model_copy(
            update={"enable": tuple(enabled), "disable": tuple(r for r in cfg.fusion.disable if r not in enabled)}
        )
        s = _latency(cfg.model_copy(update={"fusion": fusion}))
        now = total_us(s)
        saved = prev - now
        now_phase = {"prefill": float(s["ttft_ms"]), "decode": float(s["decode_ms_per_token"]) * n_dec}
        # the re-simulation says what each phase saved; within a phase, findings share it by their time
        shares.append((rule, {ph: (prev_phase[ph] - now_phase[ph]) * 1e6 for ph in ("prefill", "decode")}))
        prev_phase = now_phase
        fired = {ph: int(v.get(rule, 0)) for ph, v in s["fusion_fired"].items()}
        notes = [f"{why}" for r, why in s["fusion_disabled"].items() if r.startswith(rule)]
        notes += [
            f"{nm['count']} near-miss(es) in {nm['phase']}: {nm['reason']}"
            for nm in s["near_misses"]
            if nm["rule"] == rule
        ]
        steps.append(
            WhatIfStep(
                kinds=sorted(facts.kinds[rule]),
                rules=list(enabled),
                span_us=round(now, 3),
                ttft_ms=s["ttft_ms"],
                decode_ms_per_token=s["decode_ms_per_token"],
                saving_us=round(saved, 3),
                fired=fired,
                notes=notes,
            )
        )
        prev, after_tok = now, s["decode_ms_per_token"]
    total = total_us(before) - prev
    result = WhatIf(
        method="resimulated",
        device=None,
        assumption=RESIMULATED.format(rules=", ".join(wanted) or "none needed"),
        span_us=round(span_us, 3),
        total_saving_us=round(total, 3),
        span_after_us=round(span_us - total, 3),
        saving_share=round(total / span_us, 4) if span_us else 0.0,
        decode_ms_per_token_before=before.get("decode_ms_per_token") if n_dec else None,  # type: ignore[arg-type]
        decode_ms_per_token_after=after_tok if n_dec else None,  # type: ignore[arg-type]
        steps=steps,
    )
    return result, shares


def whatif_resimulated(
    findings: pa.Table, cfg: RunConfig, before: dict[str, object], span_us: float
) -> tuple[pa.Table, WhatIf]:
    """Runs of ours: `before` is run.json's summary (the measured run); one re-simulation per rule involved."""
    result, shares = resimulate(rule_facts(findings), cfg, before, span_us)
    return _with_estimates(findings, np.full(findings.num_rows, np.nan), resimulated_savings(findings, shares)), result


def resimulated_savings(findings: pa.Table, shares: list[tuple[str, dict[str, float]]]) -> np.ndarray:
    """Per row, its share of what its rule's re-simulation saved its phase (by its time among the phase's priced
    rows of that rule); 0 for rows that are not opportunities, NaN for opportunities not priced."""
    use = counted(findings) & _equals(findings, "level", "kernel")
    rule_codes, rule_names = dict_codes(findings.column("rule"))  # the column coded once, not compared per rule
    phase_is = {ph: _equals(findings, "phase", ph) for ph in ("prefill", "decode")}
    saving = np.full(findings.num_rows, np.nan)
    saving[~use & ~_is_in(findings.column("kind"), list(OPPORTUNITY_KINDS))] = 0.0
    time = findings.column("time_ns").to_numpy().astype(float)
    for rule, saved in shares:
        rows = use & (rule_codes == (rule_names.index(rule) if rule in rule_names else -2))
        for ph in ("prefill", "decode"):
            sel = rows & phase_is[ph]
            saving[sel] = saved[ph] * time[sel] / max(float(time[sel].sum()), 1.0)
        saving[rows & ~phase_is["prefill"] & ~phase_is["decode"]] = 0.0
    return saving


def _dtype(text: object) -> str:
    return "bf16" if isinstance(text, str) and "BF16" in text.upper() else "fp16"


def profile_whatif(method: str, device: str | None, assumption: str, span_us: float, total_us: float) -> WhatIf:
    """The WhatIf of a profile (no decode per-token figures, no re-simulation steps): a total over its span."""
    return WhatIf(
        method=method,  # type: ignore[arg-type]
        device=device,
        assumption=assumption,
        span_us=round(span_us, 3),
        total_saving_us=round(total_us, 3),
        span_after_us=round(span_us - total_us, 3),
        saving_share=round(total_us / span_us, 4) if span_us else 0.0,
        decode_ms_per_token_before=None,
        decode_ms_per_token_after=None,
        steps=[],
    )


def framework_savings(findings: pa.Table, level: str = "framework") -> np.ndarray:
    """Per finding, what fusing a framework-level chain saves in host time (NaN on other rows): a fused call costs
    about its longest member, its other calls go, and the waits between them; an Add in front of a decomposed norm
    (found at the same level) and the norm's fused call become one call (the chain's own saving counts the rest).
    `level="kernel"`: the same for kernel-level chains, in device time (kernels and the idle between them)."""
    k = findings.num_rows
    out = np.full(k, np.nan)
    kinds = findings.column("kind").to_pylist()
    levels = findings.column("level").to_pylist()
    kernel = findings.column("kernel_ns").to_numpy().astype(float)
    inner = findings.column("inner_wait_ns").to_numpy().astype(float)
    longest = findings.column("max_kernel_ns").to_numpy().astype(float)
    last = findings.column("last_kernel_ns").to_numpy().astype(float)
    members = findings.column("op_indices").to_pylist()
    chain_at = {
        (str(levels[i]), ix[0]): i for i, ix in enumerate(members) if str(kinds[i]).startswith("decomposed") and ix
    }
    for i in range(k):
        if levels[i] != level or kinds[i] not in OPPORTUNITY_KINDS:
            continue
        chain = chain_at.get((str(levels[i]), members[i][-1])) if kinds[i] == "add_norm" and members[i] else None
        if chain is None:
            out[i] = kernel[i] - longest[i] + inner[i]
        else:  # the Add and the already fused norm call (about the chain's longest member) become one call
            add, norm = kernel[i] - last[i], longest[chain]
            out[i] = add + norm - max(add, norm) + inner[i]
    return out


def _member_shapes(
    findings: pa.Table, rows: list[int], view: OpView
) -> dict[int, tuple[list[str], list[str | None], list[float]]]:
    """Row -> (Types, input shapes, durations) of its member kernels, for the rows asked."""
    members = findings.column("op_indices").to_pylist()
    rows_of = RowsOf(view.op_index)
    shape_codes, shape_names = view.codes("input_shapes")
    out = {}
    for r in rows:
        p = rows_of.rows(members[r]).tolist()
        out[r] = (
            [view.type_names[view.type_codes[x]] if view.type_codes[x] >= 0 else "" for x in p],
            [shape_names[shape_codes[x]] if shape_codes[x] >= 0 else None for x in p],
            [float(view.dur[x]) for x in p],
        )
    return out


# the order the simulator's rules run in: decomposed norms (norm_kernel), Add->Norm (add_norm), Norm->MatMul
# (norm_matmul), then the catalogue's other fusions (independent of the norms)
_RULE_ORDER = {"decomposed_rmsnorm": 0, "decomposed_layernorm": 0, "add_norm": 1, "norm_matmul": 2, "unfused_op": 3}


def whatif_device_model(
    findings: pa.Table,
    device: str,
    why: str,
    span_us: float,
    clock_mhz: float | None = None,
    view: OpView | None = None,
) -> tuple[pa.Table, WhatIf]:
    """Profiles without a config to re-simulate: the device model prices each fused kernel from its shapes (on
    `device` at `clock_mhz` when the profile's counters show a clock other than the preset's); `view`: the op
    table's, where the catalogue's other fusions read their members' shapes."""
    k = findings.num_rows
    host_saving = framework_savings(findings)
    cols = {c: findings.column(c).to_pylist() for c in ("kind", "level", "shape", "dtype", "out_width", "fused_as")}
    kernel = findings.column("kernel_ns").to_numpy().astype(float)
    inner = findings.column("inner_wait_ns").to_numpy().astype(float)
    longest = findings.column("max_kernel_ns").to_numpy().astype(float)
    last = findings.column("last_kernel_ns").to_numpy().astype(float)
    fused = np.full(k, np.nan)
    saving = np.zeros(k)
    model_members = 0.0
    measured_members = 0.0
    members_of = findings.column("op_indices").to_pylist()
    first_op = [ix[0] if ix else -1 for ix in members_of]
    last_op = [ix[-1] if ix else -1 for ix in members_of]
    # the norm an Add->Norm finding ends with, by op_index -> that finding's row (Norm->MatMul builds on it)
    add_norm_of: dict[int, int] = {}
    chain_at: dict[tuple[str, int], int] = {}  # (level, first op of a decomposed chain) -> its row
    chain_end: dict[int, int] = {}  # last op of a kernel-level decomposed chain -> its row
    for i, ix in enumerate(members_of):
        if cols["kind"][i] == "add_norm" and cols["level"][i] == "kernel":
            add_norm_of[ix[-1]] = i
        if str(cols["kind"][i]).startswith("decomposed") and ix:
            chain_at[(str(cols["level"][i]), ix[0])] = i
            if cols["level"][i] == "kernel":
                chain_end[ix[-1]] = i

    def chain_of(i: int) -> int | None:
        """The decomposed norm an Add->Norm finding ends with (the norm is a chain, fused first)."""
        return chain_at.get((str(cols["level"][i]), last_op[i])) if cols["kind"][i] == "add_norm" else None

    def norm_before(i: int) -> tuple[int | None, int]:
        """A Norm->MatMul's norm: (the decomposed chain it follows, or None; the op the norm starts at, where an
        Add->Norm in front of it ends)."""
        behind = chain_end.get(first_op[i]) if cols["kind"][i] == "norm_matmul" else None
        return behind, members_of[behind][0] if behind is not None else first_op[i]

    def folded(i: int) -> list[int]:
        """The kernels earlier findings made that a Norm->MatMul's fused kernel takes in: the decomposed norm's
        (the chain) and the AddRmsNorm's (the Add->Norm in front of its norm)."""
        if cols["kind"][i] != "norm_matmul":
            return []
        behind, norm_at = norm_before(i)
        out = list(members_of[behind]) if behind is not None else []
        return out + (list(members_of[add_norm_of[norm_at]]) if norm_at in add_norm_of else [])

    rules = findings.column("rule").to_pylist()
    calls = np.ones(k)  # kernels each finding's fused form launches
    others = [i for i in range(k) if cols["kind"][i] == "unfused_op" and cols["level"][i] == "kernel"]
    shapes = _member_shapes(findings, others, view) if others and view is not None else {}
    in_order = sorted(range(k), key=lambda r: _RULE_ORDER.get(str(cols["kind"][r]), 0))
    for i in in_order:
        kind = str(cols["kind"][i])
        if kind not in OPPORTUNITY_KINDS:
            continue
        chain = chain_of(i)
        if cols["level"][i] == "framework":
            saving[i] = host_saving[i]
            continue
        if kind == "unfused_op":
            # the catalogue's other fusions: the simulator's rule on the dimensions the shapes give
            types, inputs, durs = shapes.get(i, ([], [], []))
            op = fused_op(str(rules[i]), types, inputs, durs, _dtype(cols["dtype"][i]), device, clock_mhz)
            fused[i] = op.fused_ns if op is not None else longest[i]
            calls[i] = op.calls if op is not None else 1
            saving[i] = kernel[i] + inner[i] - fused[i]
            if op is not None and op.members_ns is not None:
                model_members += op.members_ns
                measured_members += kernel[i]
            continue
        # Norm->MatMul after a decomposed norm: the norm is the kernel the chain became, or the AddRmsNorm an
        # Add->Norm in front of the chain made of it
        behind, norm_at = norm_before(i)
        after_add = kind == "norm_matmul" and norm_at in add_norm_of
        # Norm->MatMul: the norm is either the measured kernel, or the AddRmsNorm that Add->Norm left in its place
        if after_add:
            norm_part = fused[add_norm_of[norm_at]]
        elif behind is not None:
            norm_part = fused[behind]
        else:
            norm_part = kernel[i] - last[i]
        if chain is not None and not np.isnan(fused[chain]):
            # Add->Norm after a decomposed norm: the Add and the fused norm the chain became (not the chain's first
            # kernel, whose time the chain's own saving already counts)
            kernel[i] = kernel[i] - last[i] + fused[chain]
        dims = first_tensor(cols["shape"][i])
        if not dims or dims[-1] <= 0:  # no shapes: assume the fused kernel costs its longest member
            if kind == "norm_matmul":
                fused[i], saving[i] = last[i], norm_part + inner[i]
            else:
                fused[i], saving[i] = longest[i], kernel[i] + inner[i] - longest[i]
            continue
        hidden = dims[-1]
        tokens = max(int(np.prod(dims)) // hidden, 1)
        fused_as = str(cols["fused_as"][i])
        if kind == "add_norm" and fused_as.endswith("MatMul"):
            # the Add folds into a Norm+MatMul kernel: that kernel as measured, plus what the Add costs it
            args = (tokens, hidden, int(cols["out_width"][i] or 0), _dtype(cols["dtype"][i]), "LayerNorm" in fused_as)
            grown = estimate("norm_matmul", *args, True, device, clock_mhz).fused_ns
            grown -= estimate("norm_matmul", *args, False, device, clock_mhz).fused_ns
            fused[i] = last[i] + grown
            saving[i] = kernel[i] + inner[i] - fused[i]
            continue
        est = estimate(
            kind,
            tokens,
            hidden,
            int(cols["out_width"][i] or 0),
            _dtype(cols["dtype"][i]),
            "LayerNorm" in fused_as,
            after_add or "Add" in fused_as,
            device,
            clock_mhz,
        )
        if kind == "norm_matmul":
            fused[i] = last[i] + est.fused_ns - est.matmul_ns  # the MatMul stays as measured
            saving[i] = norm_part + inner[i] - (est.fused_ns - est.matmul_ns)
        else:
            fused[i] = est.fused_ns
            saving[i] = kernel[i] + inner[i] - est.fused_ns
        if not after_add and chain is None and behind is None:  # members measured as such (no estimate in place)
            model_members += est.members_ns
            measured_members += kernel[i]
    rows = np.array(
        [
            cols["kind"][i] in OPPORTUNITY_KINDS and cols["level"][i] == "kernel" and not np.isnan(fused[i])
            for i in range(k)
        ],
        bool,
    )
    if rows.any() and view is not None:
        # the profile's own timeline, replayed without the chains, in rule order: removing launches saves what a
        # host-bound step loses to them, wherever its idle shows (replay.py); a Norm->MatMul after an Add->Norm
        # takes in the AddRmsNorm that one made
        folds = {i: f for i in range(k) if rows[i] and (f := folded(i))}
        replayed = replay_savings(view, findings, rows, fused, [i for i in in_order if rows[i]], folds, calls)
        if replayed is not None:
            saving[rows] = np.where(np.isnan(replayed[rows]), saving[rows], replayed[rows])
    use = counted(findings)
    total = float(saving[use].sum()) / 1e3
    label = f"{device} at {clock_mhz:g} MHz" if clock_mhz else device
    assumption = DEVICE_MODEL.format(device=label, why=why)
    if model_members and measured_members:
        ratio = model_members / measured_members
        assumption += (
            f"; the model prices the replaced kernels at {ratio:.0%} of their measured time, so the estimate "
            "inherits that calibration gap"
        )
    result = profile_whatif("device-model" if k else "none", label, assumption, span_us, total)
    saving[~np.isin(np.array(cols["kind"], dtype=object), list(OPPORTUNITY_KINDS))] = 0.0
    return _with_estimates(findings, fused, saving), result
