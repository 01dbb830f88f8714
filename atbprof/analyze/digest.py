"""The findings of a run read in parts (analyze/chunked.py), reduced as each part's come: memory grows with the
distinct findings, phases and steps, not with the occurrences (one per 2-6 ops of the unfused or TP runs of the
benchmark, ~300 bytes each held as a table).

Each part's findings are a table per detection key (analyze/detect.detect_parts); the whole table's occurrences
would be those tables ordered by key, then part. Every occurrence is placed by (key, part, row), which orders it as
the whole table would, so the first appearances (which number a finding's and a phase's codes, and so the order of
the findings and of their phases), the first occurrence of a finding (its rule and evidence) and its longest
occurrences (the examples; equal times in table order) come out as analyze/group_sums.py finds them in the whole
table. Sums of integer nanoseconds are exact in any order (a framework call's device time, a float, is not read in
parts: runs of ours have no framework level). The re-simulated what-if (runs of ours, the only ones
read in parts) shares a phase's saving among a rule's occurrences by their time: a finding's share is summed here
as saving x (its time) / (the rule's time), one rounding, where the whole table sums each occurrence's share (the
two agree to ~1e-15 of the figure; the report rounds to 1 ns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.group_sums import EXAMPLE_COLUMNS, GroupSums
from atbprof.analyze.patterns import OPPORTUNITY_KINDS
from atbprof.analyze.report import Breakdown
from atbprof.analyze.view import dict_codes, int_column
from atbprof.analyze.whatif import RuleFacts, priced

Position = tuple[int, int, int, int]  # (key pass, key pattern, part, row): the whole table's order
KEYS = ("level", "kind", "pattern", "fused_as")


@dataclass
class _Group:
    """One finding's running figures (key: its level, kind, pattern, fused_as)."""

    first: Position
    rule: str
    evidence: str
    count: int = 0
    time: int = 0
    kernel: int = 0
    wait: int = 0
    launch: int = 0
    device: float = 0.0
    device_unknown: bool = False  # some occurrence has no device time (NaN)
    device_kernels: int = 0
    phases: dict[str | None, list[int]] = field(default_factory=dict)  # phase -> [count, time]
    steps: dict[str | None, set[int]] = field(default_factory=dict)  # phase -> its steps (a phase with no step count)
    rule_time: dict[tuple[str | None, str], int] = field(default_factory=dict)  # (phase, rule) -> time
    rules: set[str] = field(default_factory=set)
    examples: list[tuple[int, Position, dict[str, Any]]] = field(default_factory=list)  # (-time, position, row)


class FindingsDigest:
    """Add each part's findings tables (FINDINGS_SCHEMA, no what-if columns yet) with their detection keys, in part
    order; then `rule_facts()` for the what-if, and `group_sums()` as the whole table's would be."""

    def __init__(self, top: int) -> None:
        self.n_examples = max(min(3, top), 1)
        self._groups: dict[tuple[str, str, str, str], _Group] = {}
        self._first: dict[str, dict[str, Position]] = {k: {} for k in (*KEYS, "phase")}
        self._has_launch = False
        self._shares: list[tuple[str, dict[str, float]]] | None = None
        self.occurrences = 0

    def add(self, key: tuple[int, int], part: int, table: pa.Table) -> None:
        n = table.num_rows
        if not n:
            return
        self.occurrences += n
        at = (int(key[0]), int(key[1]), int(part))
        coded = {k: dict_codes(table.column(k)) for k in (*KEYS, "phase", "rule", "evidence")}
        for k in (*KEYS, "phase"):  # first appearances, by the whole table's order
            codes, names = coded[k]
            seen = self._first[k]
            values, rows = np.unique(codes, return_index=True)
            for v, r in zip(values.tolist(), rows.tolist(), strict=True):
                # parts come in order within a key, not across keys: the least position wins
                if v >= 0 and (names[v] not in seen or (*at, r) < seen[names[v]]):
                    seen[names[v]] = (*at, r)
        group = np.zeros(n, np.int64)
        for k in KEYS:
            codes, names = coded[k]
            group = group * (len(names) + 1) + codes
        _, first_rows, inverse = np.unique(group, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        time = table.column("time_ns").to_numpy()
        kernel, wait = table.column("kernel_ns").to_numpy(), table.column("wait_ns").to_numpy()
        launch = table.column("launch_ns")
        self._has_launch |= launch.null_count < len(launch)
        launch_np = pc.fill_null(launch, 0).to_numpy()
        device = table.column("device_ns").to_numpy(zero_copy_only=False).astype(float)
        device_kernels = pc.fill_null(table.column("device_kernels"), -1).to_numpy()
        phase_codes, phase_names = coded["phase"]
        rule_codes, rule_names = coded["rule"]
        step = int_column(table, "step")
        for g, first in enumerate(first_rows.tolist()):
            rows = np.flatnonzero(inverse == g)
            l_, k_, p_, f_ = (coded[k][1][coded[k][0][first]] for k in KEYS)
            name = (l_, k_, p_, f_)
            position = (*at, first)
            grp = self._groups.get(name)
            if grp is None or position < grp.first:
                rule, evidence = (coded[k][1][coded[k][0][first]] for k in ("rule", "evidence"))
                if grp is None:
                    grp = self._groups[name] = _Group(position, rule, evidence)
                else:
                    grp.first, grp.rule, grp.evidence = position, rule, evidence
            grp.count += len(rows)
            grp.time += int(time[rows].sum())
            grp.kernel += int(kernel[rows].sum())
            grp.wait += int(wait[rows].sum())
            grp.launch += int(launch_np[rows].sum())
            dev = device[rows]
            grp.device_unknown |= bool(np.isnan(dev).any())
            grp.device += float(dev.sum())
            grp.device_kernels += int(device_kernels[rows].sum())
            for pcode in np.unique(phase_codes[rows]).tolist():
                sel = rows[phase_codes[rows] == pcode]
                ph = phase_names[pcode] if pcode >= 0 else None
                sums = grp.phases.setdefault(ph, [0, 0])
                sums[0] += len(sel)
                sums[1] += int(time[sel].sum())
                grp.steps.setdefault(ph, set()).update(np.unique(step[sel]).tolist())
                for rcode in np.unique(rule_codes[sel]).tolist():
                    rule = rule_names[rcode]
                    grp.rules.add(rule)
                    t = int(time[sel[rule_codes[sel] == rcode]].sum())
                    grp.rule_time[(ph, rule)] = grp.rule_time.get((ph, rule), 0) + t
            self._keep_examples(grp, table, rows, time, at)

    def _keep_examples(self, grp: _Group, table: pa.Table, rows: np.ndarray, time: np.ndarray, at: tuple) -> None:
        """The group's longest occurrences so far (equal times: the earlier in the whole table's order first)."""
        best = rows[np.argsort(-time[rows], kind="stable")[: self.n_examples]]
        picked = table.select([*EXAMPLE_COLUMNS, "rule"]).take(pa.array(best)).to_pylist()
        grp.examples += [(-int(time[r]), (*at, int(r)), row) for r, row in zip(best.tolist(), picked, strict=True)]
        grp.examples.sort(key=lambda e: (e[0], e[1]))
        del grp.examples[self.n_examples :]

    def rule_facts(self) -> RuleFacts:
        """What the re-simulated what-if needs of the findings (whatif.rule_facts of the whole table)."""
        rules: set[str] = set()
        unfused: set[str] = set()
        kinds: dict[str, set[str]] = {}
        for (level, kind, _, _), grp in self._groups.items():
            if priced(level, kind):
                for rule in grp.rules:
                    if rule:
                        rules.add(rule)
                        kinds.setdefault(rule, set()).add(kind)
                        if kind == "unfused_op":
                            unfused.add(rule)
        return RuleFacts(frozenset(rules), frozenset(unfused), {r: frozenset(k) for r, k in kinds.items()})

    def estimated(self, shares: list[tuple[str, dict[str, float]]]) -> None:
        """The re-simulation's savings (whatif.resimulate): each priced occurrence gets its share."""
        self._shares = shares

    def group_sums(self, breakdown: Breakdown) -> list[GroupSums]:
        """As group_sums(the whole table with its what-if columns) would give them."""
        code = {k: {v: i for i, (v, _) in enumerate(sorted(self._first[k].items(), key=lambda x: x[1]))} for k in KEYS}
        phase_code = {v: i for i, (v, _) in enumerate(sorted(self._first["phase"].items(), key=lambda x: x[1]))}
        steps_of = {p.phase: p.steps for p in breakdown.phases}
        shares = self._shares
        saved = dict(shares or [])
        # a priced rule's time per phase, over every finding: what its saving is shared by
        rule_total: dict[tuple[str | None, str], int] = {}
        for (level, kind, _, _), grp in self._groups.items():
            if priced(level, kind):
                for k, t in grp.rule_time.items():
                    rule_total[k] = rule_total.get(k, 0) + t
        out = []
        for name in sorted(self._groups, key=lambda nm: tuple(code[k][v] for k, v in zip(KEYS, nm, strict=True))):
            grp = self._groups[name]
            level, kind = name[0], name[1]
            use = priced(level, kind)

            def saving(ph: str | None, rule: str, time: int, use: bool = use, kind: str = kind) -> float | None:
                """What `time` of this finding's (phase, rule) occurrences saves; None where not estimated."""
                if shares is None:
                    return None  # no what-if: nothing estimated
                if not use:
                    return 0.0 if kind not in OPPORTUNITY_KINDS else None
                if rule not in saved:
                    return None
                if ph not in ("prefill", "decode"):
                    return 0.0
                return saved[rule][ph] * float(time) / max(float(rule_total[(ph, rule)]), 1.0)

            by_phase = []
            group_saving = 0.0
            estimated = False
            for ph in sorted(grp.phases, key=lambda p: phase_code[p] if p is not None else len(phase_code)):
                count, time = grp.phases[ph]
                parts = [saving(ph, rule, t) for (p, rule), t in grp.rule_time.items() if p == ph]
                estimated |= any(v is not None for v in parts)
                phase_saving = float(sum(v for v in parts if v is not None))
                group_saving += phase_saving
                label = ph if ph is not None else "all"
                n_steps = steps_of.get(label) or len(grp.steps[ph]) or 1
                by_phase.append((label, count, n_steps, float(time), phase_saving))
            known = not grp.device_unknown
            examples = []
            for _, _, row in grp.examples:
                row = dict(row)
                # the occurrence's own share, as the whole table's per-row what-if computes it
                row["est_saving_ns"] = saving(row["phase"], row.pop("rule"), row["time_ns"])
                examples.append(row)
            out.append(
                GroupSums(
                    level=level,
                    kind=kind,
                    pattern=name[2],
                    fused_as=name[3],
                    rule=grp.rule,
                    evidence=grp.evidence,
                    count=grp.count,
                    time_ns=float(grp.time),
                    kernel_ns=grp.device if known else float(grp.kernel),
                    host_ns=float(grp.kernel),
                    device_kernels=grp.device_kernels if known else None,
                    wait_ns=float(grp.wait),
                    launch_ns=float(grp.launch) if self._has_launch else None,
                    saving_ns=group_saving if estimated or kind not in OPPORTUNITY_KINDS else None,
                    estimated=estimated,
                    by_phase=by_phase,
                    examples=examples,
                )
            )
        return out
