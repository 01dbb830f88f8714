"""How the numerics of two runs made with `--numerics` changed: rule verdicts and per fused kernel errors."""

from __future__ import annotations

from atbprof.diff.report import KernelNumericsChange, NumericsChange, RuleVerdictChange
from atbprof.numerics.report import KernelNumerics, NumericsReport, parse_report

_RANK = {"aligned": 0, "degraded": 1, "broken": 2}


def report_of(meta: dict[str, object], source: str) -> NumericsReport | None:
    doc = meta.get("numerics")
    return None if doc is None else parse_report(doc, f"{source}: run.json numerics")


def numerics_change(base: NumericsReport | None, new: NumericsReport | None) -> NumericsChange | None:
    """None when neither run has numerics; else verdicts and errors side by side (absent side: null)."""
    if base is None and new is None:
        return None
    rules = sorted({*(base.rules if base else {}), *(new.rules if new else {})})
    verdicts = []
    for rule in rules:
        b = base.rules.get(rule) if base else None
        n = new.rules.get(rule) if new else None
        # worse: a verdict that dropped, or a rule the new run fuses that is not aligned
        worse = n is not None and _RANK[n] > (_RANK[b] if b is not None else 0)
        verdicts.append(RuleVerdictChange(rule=rule, base=b, new=n, worse=worse))
    kernels_b = {_key(k): k for k in (base.kernels if base else [])}
    kernels_n = {_key(k): k for k in (new.kernels if new else [])}
    kernels = []
    for key in sorted({*kernels_b, *kernels_n}):
        kb, kn = kernels_b.get(key), kernels_n.get(key)
        kernels.append(
            KernelNumericsChange(
                phase=key[0],
                op_type=key[1],
                role=key[2],
                base_verdict=kb.verdict if kb else None,
                new_verdict=kn.verdict if kn else None,
                base_max_abs_err=kb.fused_vs_unfused.max_abs_err if kb else None,
                new_max_abs_err=kn.fused_vs_unfused.max_abs_err if kn else None,
                base_ulp_p99=kb.fused_vs_unfused.ulp_p99 if kb else None,
                new_ulp_p99=kn.fused_vs_unfused.ulp_p99 if kn else None,
                base_scaled_err=kb.fused_vs_ref.scaled_err if kb else None,
                new_scaled_err=kn.fused_vs_ref.scaled_err if kn else None,
            )
        )
    missing = [side for side, r in (("base", base), ("new", new)) if r is None]
    return NumericsChange(
        base_finite=base.finite if base else None,
        new_finite=new.finite if new else None,
        rules=verdicts,
        kernels=kernels,
        worse_rules=[v.rule for v in verdicts if v.worse],
        note=f"the {missing[0]} run was made without --numerics" if missing else "",
    )


def _key(k: KernelNumerics) -> tuple[str, str, str]:
    return (k.phase, k.op_type, k.role)
