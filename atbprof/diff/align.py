"""Matching any two inputs: align the op-type sequences of each paired step, stream by stream.

The alignment (a longest common subsequence of op types, rapidfuzz's Indel, after `--map` renames) gives equal
runs (1:1 groups) and edit blocks. In an edit block a known fusion is one edit: a new op whose type is a fused
kernel (`fused_from` in the profile, a chain in known_fusions.yaml or atbprof/data/fusion_rules.yaml, or a name
made of the replaced types in order, e.g. Add + RmsNorm -> AddRmsNorm) takes the contiguous run of base ops it
replaces (and the reverse is a split). What is left is grouped by op type + input shapes, then op type
(msprof-analyze KernelCompare's key); the rest is removed / added. Steps with identical sequences reuse one
alignment, so a long trace costs one per distinct step.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rapidfuzz.distance import Indel

from atbprof.analyze.categories import CATEGORY_NAMES
from atbprof.diff.groups import GroupInfo, Matching, pair_frames, structure_of
from atbprof.diff.measure import Side
from atbprof.errors import InputError
from atbprof.fusion.passes import type_matches

MAX_FUSED = 12  # longest base chain one fused kernel may replace


@lru_cache(maxsize=1)
def _rule_chains() -> dict[str, tuple[tuple[str, ...], ...]]:
    """fused op type -> the op-type chains it replaces: known_fusions.yaml, then the fusion rules."""
    from atbprof.fusion.rules import load_rules

    out: dict[str, list[tuple[str, ...]]] = {}
    known = yaml.safe_load((Path(__file__).parent / "known_fusions.yaml").read_text(encoding="utf-8"))
    for fused, chains in known["fusions"].items():
        out.setdefault(fused, []).extend(tuple(c) for c in chains)
    for rule in load_rules().rules.values():
        for pat in rule.patterns:
            names = {pat.fused} if isinstance(pat.fused, str) else set(pat.fused.values())
            names |= set(pat.fused_by_soc.values())
            for name in names:
                if "{" not in name:
                    out.setdefault(name, []).append(tuple(pat.ops))
    return {k: tuple(v) for k, v in out.items()}


def _named_after(fused: str, parts: tuple[str, ...]) -> bool:
    """Is `fused` named after `parts` in order (AddRmsNorm <- Add, RmsNorm)?"""
    if len(parts) < 2:
        return False
    at = 0
    for p in parts:
        found = fused.find(p, at)
        if found < 0:
            return False
        at = found + len(p)
    return True


@dataclass
class _Vocab:
    names: list[str] = field(default_factory=list)
    code: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> int:
        if name not in self.code:
            self.code[name] = len(self.names)
            self.names.append(name)
        return self.code[name]


# one group of an alignment: (positions in the base sequence, positions in the new sequence); a plain tuple, as
# a long trace makes tens of thousands of them
_Local = tuple[tuple[int, ...], tuple[int, ...]]
_BASE, _NEW = itemgetter(0), itemgetter(1)


class _Aligner:
    def __init__(self, vocab: _Vocab, fused_from: dict[str, tuple[str, ...]]) -> None:
        self.vocab = vocab
        self.fused_from = fused_from
        self.cache: dict[tuple[bytes, bytes, bytes, bytes], tuple[int, list[_Local]]] = {}
        self._known_of: dict[str, frozenset[str]] = {}
        self._parts: dict[int, tuple[int, frozenset[int]]] = {}

    def chains(self, fused: str) -> list[tuple[str, ...]]:
        out = list(_rule_chains().get(fused, ()))
        if fused in self.fused_from:
            out.insert(0, self.fused_from[fused])
        return out

    def _known(self, fused: str) -> frozenset[str]:
        """The op types the chains of `fused` name (remembered: thousands of steps ask for the same few)."""
        found = self._known_of.get(fused)
        if found is None:
            found = self._known_of[fused] = frozenset(t for c in self.chains(fused) for w in c for t in w.split("|"))
        return found

    def _parts_of(self, code: int) -> frozenset[int]:
        """The op types (codes) that may be part of a fusion into op type `code`: named in its chains or in its name
        (remembered per vocabulary size: a block is skipped by one set test when none of its ops can be)."""
        found = self._parts.get(code)
        if found is None or found[0] != len(self.vocab.names):
            fused, known = self.vocab.names[code], self._known(self.vocab.names[code])
            found = self._parts[code] = (
                len(self.vocab.names),
                frozenset(c for c, name in enumerate(self.vocab.names) if name in fused or name in known),
            )
        return found[1]

    def _fits(self, fused: str, types: list[str]) -> bool:
        if any(
            len(c) == len(types) and all(type_matches(w, t) for w, t in zip(c, types, strict=True))
            for c in self.chains(fused)
        ):
            return True
        return _named_after(fused, tuple(types))

    def align(self, a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> tuple[int, list[_Local]]:
        key = (a.tobytes(), b.tobytes(), sa.tobytes(), sb.tobytes())
        hit = self.cache.get(key)
        if hit is None:
            hit = (len(self.cache), self._align(a.tolist(), b.tolist(), sa.tolist(), sb.tolist()))
            self.cache[key] = hit
        return hit

    def _expand(self, seq: list[int]) -> tuple[list[int], list[int]]:
        """The sequence with each fused kernel of known make-up replaced by the kernels it replaced (so the
        alignment sees a fusion as one edit), and the owner position of every element."""
        names, fused_from = self.vocab.names, self.fused_from
        if not any(names[code] in fused_from for code in set(seq)):
            return seq, list(range(len(seq)))
        out: list[int] = []
        owner: list[int] = []
        for j, code in enumerate(seq):
            parts = self.fused_from.get(self.vocab.names[code])
            members = [self.vocab.get(t) for t in parts] if parts else [code]
            out.extend(members)
            owner.extend([j] * len(members))
        return out, owner

    def _align(self, a: list[int], b: list[int], sa: list[int], sb: list[int]) -> list[_Local]:
        ea, oa = self._expand(a)
        eb, ob = self._expand(b)
        equal = [op for op in Indel.opcodes(ea, eb) if op.tag == "equal"]  # a longest common subsequence (C++)
        if len(ea) == len(a) and len(eb) == len(b):
            # nothing expanded (no fused kernel of known make-up): every matched pair is a 1:1 group
            out: list[_Local] = []
            gaps: list[tuple[range, range]] = []  # the edit blocks: between two consecutive matched runs
            at_a = at_b = 0
            for op in equal:
                gaps.append((range(at_a, op.src_start), range(at_b, op.dest_start)))
                matched = zip(range(op.src_start, op.src_end)), zip(range(op.dest_start, op.dest_end))
                out.extend(zip(*matched, strict=True))
                at_a, at_b = op.src_end, op.dest_end
            gaps.append((range(at_a, len(a)), range(at_b, len(b))))
            for ia, ib in gaps:
                if ia or ib:
                    out.extend(self._edit(a, b, sa, sb, list(ia), list(ib)))
            return out
        return self._grouped(a, b, sa, sb, equal, oa, ob)

    def _grouped(
        self, a: list[int], b: list[int], sa: list[int], sb: list[int], equal: list[Any], oa: list[int], ob: list[int]
    ) -> list[_Local]:
        """Groups of owners (expanded fused kernels) whose elements all matched each other: 1:1, N:1 or 1:N."""
        # owners matched element by element: (base owner, new owner) -> matched elements
        links: dict[tuple[int, int], int] = {}
        for op in equal:
            for k in range(op.src_end - op.src_start):
                key = (oa[op.src_start + k], ob[op.dest_start + k])
                links[key] = links.get(key, 0) + 1
        size_a = [0] * len(a)
        size_b = [0] * len(b)
        for x in oa:
            size_a[x] += 1
        for y in ob:
            size_b[y] += 1
        by_a: dict[int, list[int]] = {}
        by_b: dict[int, list[int]] = {}
        for (i, j), _n in links.items():
            by_a.setdefault(i, []).append(j)
            by_b.setdefault(j, []).append(i)
        out: list[_Local] = []
        used_a: set[int] = set()
        used_b: set[int] = set()
        for i in range(len(a)):
            if i in used_a or i not in by_a:
                continue
            # a connected set of owners whose elements all matched each other: one group (1:1, N:1 or 1:N)
            js = by_a[i]
            if len(js) == 1:
                j = js[0]
                ins = by_b[j]
                full = sum(links[(x, j)] for x in ins) == size_b[j] and all(
                    links[(x, j)] == size_a[x] and len(by_a[x]) == 1 for x in ins
                )
                if full and not used_b.intersection([j]) and not used_a.intersection(ins):
                    out.append((tuple(sorted(ins)), (j,)))
                    used_a.update(ins)
                    used_b.add(j)
                    continue
            if (
                all(len(by_b[j]) == 1 for j in js)
                and sum(links[(i, j)] for j in js) == size_a[i]
                and all(links[(i, j)] == size_b[j] for j in js)
                and not used_b.intersection(js)
            ):
                out.append(((i,), tuple(sorted(js))))
                used_a.add(i)
                used_b.update(js)
        return self._rest(a, b, sa, sb, out, used_a, used_b)

    def _rest(
        self,
        a: list[int],
        b: list[int],
        sa: list[int],
        sb: list[int],
        out: list[_Local],
        used_a: set[int],
        used_b: set[int],
    ) -> list[_Local]:
        """`out` plus the unmatched ops, edit block by edit block: between two consecutive matched groups."""
        anchors = sorted((max(g[0]), max(g[1])) for g in out)
        cut_a = [x for x, _ in anchors]
        cut_b = list(np.maximum.accumulate([y for _, y in anchors])) if anchors else []
        blocks: dict[int, tuple[list[int], list[int]]] = {}
        for i in range(len(a)):
            if i not in used_a:
                blocks.setdefault(bisect.bisect_left(cut_a, i), ([], []))[0].append(i)
        for j in range(len(b)):
            if j not in used_b:
                blocks.setdefault(bisect.bisect_left(cut_b, j), ([], []))[1].append(j)
        for k in sorted(blocks):
            ia, ib = blocks[k]
            out.extend(self._edit(a, b, sa, sb, ia, ib))
        return out

    def _edit(
        self, a: list[int], b: list[int], sa: list[int], sb: list[int], ia: list[int], ib: list[int]
    ) -> list[_Local]:
        if not ia or not ib:  # only removed or only added ops: nothing to fuse or pair
            return [((i,), ()) for i in ia] or [((), (j,)) for j in ib]
        names = self.vocab.names
        out: list[_Local] = []
        used_a: set[int] = set()
        used_b: set[int] = set()
        codes_a, codes_b = {a[i] for i in ia}, {b[j] for j in ib}
        # fusions (one new kernel <- a contiguous base run) and splits (the reverse)
        for one, many, a_is_one in ((ib, ia, False), (ia, ib, True)):
            used_one, used_many = (used_a, used_b) if a_is_one else (used_b, used_a)
            seq_one, seq_many = (a, b) if a_is_one else (b, a)
            one_codes, many_codes = (codes_a, codes_b) if a_is_one else (codes_b, codes_a)
            if len(many) < 2 or all(self._parts_of(c).isdisjoint(many_codes) for c in one_codes):
                continue  # a fusion or split replaces at least two kernels, each a part of the fused one
            many_names = [names[seq_many[i]] for i in many]
            for j in one:
                if j in used_one or self._parts_of(seq_one[j]).isdisjoint(many_codes):
                    continue
                fused = names[seq_one[j]]
                known = self._known(fused)
                free = [
                    i
                    for i, name in zip(many, many_names, strict=True)
                    if i not in used_many and (name in fused or name in known)
                ]
                hit = None
                for start in range(len(free)):
                    for length in range(min(MAX_FUSED, len(free) - start), 1, -1):
                        run = free[start : start + length]
                        if run[-1] - run[0] != length - 1:
                            continue
                        if self._fits(fused, [names[seq_many[i]] for i in run]):
                            hit = run
                            break
                    if hit:
                        break
                if hit:
                    used_one.add(j)
                    used_many.update(hit)
                    out.append(((j,), tuple(hit)) if a_is_one else (tuple(hit), (j,)))
        # then 1:1 by (type, shape), then by type
        for keyed in (True, False) if not codes_a.isdisjoint(codes_b) else ():
            waiting: dict[tuple[int, int], list[int]] = {}
            for j in ib:
                if j not in used_b:
                    waiting.setdefault((b[j], sb[j] if keyed else -1), []).append(j)
            for i in ia:
                if i in used_a:
                    continue
                queue = waiting.get((a[i], sa[i] if keyed else -1))
                if queue:
                    j = queue.pop(0)
                    used_a.add(i)
                    used_b.add(j)
                    out.append(((i,), (j,)))
        out.extend(((i,), ()) for i in ia if i not in used_a)
        out.extend(((), (j,)) for j in ib if j not in used_b)
        return out


def _fused_from(side: Side) -> dict[str, tuple[str, ...]]:
    """op type -> the op types it replaced, from the profile's `fused_from` column (runs of ours)."""
    ops = side.profile.ops
    if "fused_from" not in ops.column_names or ops.column("fused_from").null_count == ops.num_rows:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    types = ops.column("op_type").to_pylist()
    for t, ff in zip(types, ops.column("fused_from").to_pylist(), strict=True):
        if ff and t not in out:
            out[t] = tuple(ff)
    return out


def match_aligned(
    base: Side, new: Side, name_map: dict[str, str], relabel: tuple[dict[str, str], dict[str, str]] | None = None
) -> Matching:
    """`relabel`: each side's op type -> the label to align on (a cross-vendor diff aligns kernels by their role,
    not their library's name)."""
    vocab = _Vocab()
    b_codes, b_names = base.codes("op_type")
    n_codes, n_names = new.codes("op_type")
    label_b, label_n = relabel or ({}, {})
    b_lut = np.array(
        [vocab.get(label_b.get(t, name_map.get(t, t))) for t in b_names] + [vocab.get("(unknown)")], dtype=np.int64
    )
    n_lut = np.array([vocab.get(label_n.get(t, t)) for t in n_names] + [vocab.get("(unknown)")], dtype=np.int64)
    bt, nt = b_lut[b_codes], n_lut[n_codes]
    if not np.intersect1d(bt, nt).size and len(bt) and len(nt):
        raise InputError(
            f"{base.profile.source} and {new.profile.source} have no op type in common: they are not runs of one "
            "model on comparable software. If kernels were renamed, map them with --map OLD=NEW"
        )
    shapes = _Vocab()
    sb_codes, sb_names = base.codes("input_shapes")
    sn_codes, sn_names = new.codes("input_shapes")
    sb_lut = np.array([shapes.get(s) for s in sb_names] + [-1], dtype=np.int64)
    sn_lut = np.array([shapes.get(s) for s in sn_names] + [-1], dtype=np.int64)
    b_shape, n_shape = sb_lut[sb_codes], sn_lut[sn_codes]
    pairs, how = pair_frames(base.charges.frame_step, new.charges.frame_step, base.frame_phase, new.frame_phase)
    # fused kernels of either side (a base kernel that the new side splits is one of the base's)
    aligner = _Aligner(vocab, _fused_from(base) | _fused_from(new))
    base_group = np.full(len(bt), -1, dtype=np.int64)
    new_group = np.full(len(nt), -1, dtype=np.int64)
    b_stream, n_stream = base.per_op("stream_id"), new.per_op("stream_id")
    b_bounds = np.append(base.op_arrays().charges.frame_starts, len(bt))
    n_bounds = np.append(new.op_arrays().charges.frame_starts, len(nt))
    # per-op facts as Python lists, read once per group template (not per op and step)
    types = (bt.tolist(), nt.tolist())
    layers = (base.per_op("layer", fill=-2).tolist(), new.per_op("layer", fill=-2).tolist())
    cats = (base.op_arrays().category.tolist(), new.op_arrays().category.tolist())
    shape_of = ([*sb_names, ""], [*sn_names, ""])
    shape_code = (sb_codes.tolist(), sn_codes.tolist())
    (rb_codes, rb_names), (rn_codes, rn_names) = base.codes("role"), new.codes("role")
    role_of = ([*rb_names, ""], [*rn_names, ""])
    role_code = (rb_codes.tolist(), rn_codes.tolist())
    has_roles = bool(rb_names or rn_names)

    def info(at_b: list[int], at_n: list[int]) -> GroupInfo:
        """What a new group is: types, layer/category of its last op, roles and shape of its first op."""
        btypes = tuple(vocab.names[types[0][i]] for i in at_b)
        ntypes = tuple(vocab.names[types[1][i]] for i in at_n)
        side, last = (0, at_b[-1]) if at_b else (1, at_n[-1])
        first = (0, at_b[0]) if at_b else (1, at_n[0])
        sides = (
            [
                "+".join(dict.fromkeys(role_of[s][role_code[s][i]] for i in at if role_code[s][i] >= 0))
                for s, at in ((0, at_b), (1, at_n))
            ]
            if has_roles
            else ["", ""]
        )
        same = sides[0] == sides[1] or not (sides[0] and sides[1])
        return GroupInfo(
            base_types=btypes,
            new_types=ntypes,
            structure=structure_of(btypes, ntypes),
            rule="",
            layer=int(layers[side][last]),
            roles=(sides[0] or sides[1]) if same else f"{sides[0]} -> {sides[1]}",
            category=CATEGORY_NAMES[int(cats[side][last])],
            shape=shape_of[first[0]][shape_code[first[0]][first[1]]],
        )

    # groups of identical make-up (the same op types, layer, category, roles and first shape) share one GroupInfo:
    # its key is a few integers, much cheaper than building the strings again for each of thousands of steps
    made: dict[tuple[object, ...], GroupInfo] = {}

    def interned(at_b: list[int], at_n: list[int]) -> GroupInfo:
        side, last = (0, at_b[-1]) if at_b else (1, at_n[-1])
        first = (0, at_b[0]) if at_b else (1, at_n[0])
        key = (
            tuple(types[0][i] for i in at_b),
            tuple(types[1][j] for j in at_n),
            layers[side][last],
            cats[side][last],
            first[0],
            shape_code[first[0]][first[1]],
            (tuple(role_code[0][i] for i in at_b), tuple(role_code[1][j] for j in at_n)) if has_roles else (),
        )
        found = made.get(key)
        if found is None:
            found = made[key] = info(at_b, at_n)
        return found

    # the same facts as arrays, one sentinel last (index -1: no op on that side)
    facts = tuple(
        {
            "type": np.append(t, -1),
            "layer": np.append(np.asarray(lay, dtype=np.int64), -2),
            "cat": np.append(np.asarray(cat, dtype=np.int64), -1),
            "shape": np.append(shp, -1),
            "role": np.append(rc if has_roles else np.full(len(rc), -2, dtype=np.int64), -2),
        }
        for t, lay, cat, shp, rc in (
            (bt, layers[0], cats[0], sb_codes, rb_codes),
            (nt, layers[1], cats[1], sn_codes, rn_codes),
        )
    )

    def template(
        locals_: list[_Local], oa: np.ndarray, ob: np.ndarray, lens_b: np.ndarray, lens_n: np.ndarray
    ) -> list[GroupInfo]:
        """The GroupInfo of each group of one alignment (ops at `oa` / `ob`, `lens_*` ops a side per group): groups
        of at most one op a side (nearly all) keyed by a row of integers, interned by unique rows; the others one by
        one."""
        out: list[GroupInfo | None] = [None] * len(locals_)
        single = np.flatnonzero((lens_b <= 1) & (lens_n <= 1))
        if len(single):
            # the global op of each side (-1: none), then the side whose op names layer, category and shape
            first_b = np.full(len(locals_), -1, dtype=np.int64)
            first_n = np.full(len(locals_), -1, dtype=np.int64)
            has_b, has_n = np.flatnonzero(lens_b == 1), np.flatnonzero(lens_n == 1)
            first_b[has_b] = oa[[locals_[k][0][0] for k in has_b.tolist()]]
            first_n[has_n] = ob[[locals_[k][1][0] for k in has_n.tolist()]]
            gb, gn = first_b[single], first_n[single]
            side = (gb < 0).astype(np.int64)
            fact_b, fact_n = facts
            rows = np.stack(
                [
                    np.where(gb >= 0, fact_b["type"][gb], -1),
                    np.where(gn >= 0, fact_n["type"][gn], -1),
                    np.where(side == 0, fact_b["layer"][gb], fact_n["layer"][gn]),
                    np.where(side == 0, fact_b["cat"][gb], fact_n["cat"][gn]),
                    side,
                    np.where(side == 0, fact_b["shape"][gb], fact_n["shape"][gn]),
                    np.where(gb >= 0, fact_b["role"][gb], -2),
                    np.where(gn >= 0, fact_n["role"][gn], -2),
                ],
                axis=1,
            )
            uniq, first, inverse = _unique_rows(rows)
            infos = []
            for row, k in zip(uniq.tolist(), single[first].tolist(), strict=True):
                key = ("single", *row)
                found = made.get(key)
                if found is None:
                    bl, nl = locals_[k]
                    found = made[key] = info([int(oa[i]) for i in bl], [int(ob[j]) for j in nl])
                infos.append(found)
            for k, u in zip(single.tolist(), inverse.reshape(-1).tolist(), strict=True):
                out[k] = infos[u]
        oa_l, ob_l = oa.tolist(), ob.tolist()
        for k in np.flatnonzero((lens_b > 1) | (lens_n > 1)).tolist():
            bl, nl = locals_[k]
            out[k] = interned([oa_l[i] for i in bl], [ob_l[j] for j in nl])
        return out  # type: ignore[return-value]

    # a template per distinct alignment: its groups get consecutive ids; every step using it scatters them
    offsets: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    groups: list[GroupInfo] = []
    for fa, fb in pairs.tolist():
        ra = np.arange(b_bounds[fa], b_bounds[fa + 1])
        rb = np.arange(n_bounds[fb], n_bounds[fb + 1])
        for pa_, pb_ in _stream_pairs(b_stream[ra], n_stream[rb]):
            oa, ob = ra[pa_], rb[pb_]
            aid, locals_ = aligner.align(bt[oa], nt[ob], b_shape[oa], n_shape[ob])
            if aid not in offsets:
                start = len(groups)
                lens_b = np.fromiter(map(len, map(_BASE, locals_)), dtype=np.int64, count=len(locals_))
                lens_n = np.fromiter(map(len, map(_NEW, locals_)), dtype=np.int64, count=len(locals_))
                groups.extend(template(locals_, oa, ob, lens_b, lens_n))
                offsets[aid] = (
                    start,
                    np.fromiter(chain.from_iterable(map(_BASE, locals_)), dtype=np.int64, count=int(lens_b.sum())),
                    np.repeat(np.arange(len(locals_), dtype=np.int64), lens_b),
                    np.fromiter(chain.from_iterable(map(_NEW, locals_)), dtype=np.int64, count=int(lens_n.sum())),
                    np.repeat(np.arange(len(locals_), dtype=np.int64), lens_n),
                )
            start, pos_b, k_b, pos_n, k_n = offsets[aid]
            base_group[oa[pos_b]] = start + k_b
            new_group[ob[pos_n]] = start + k_n
    notes = (f"steps paired {how}", f"{len(aligner.cache)} distinct step alignments")
    return Matching("alignment", base_group, new_group, groups, pairs, notes)


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(rows, axis=0, return_index=True, return_inverse=True), by one integer per row (the columns' value
    ranks in mixed radix, first column most significant) where that fits in 63 bits: sorting void rows costs ~10x."""
    key = np.zeros(len(rows), dtype=np.int64)
    radix = 1
    for col in rows.T:
        values, code = np.unique(col, return_inverse=True)
        radix *= max(len(values), 1)
        if radix >= 1 << 62:
            uniq, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
            return uniq, first, inverse.reshape(-1)
        key = key * len(values) + code.reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return rows[first], first, inverse.reshape(-1)


def _stream_pairs(sa: np.ndarray, sb: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Positions per stream, paired: streams with the same id, then the rest by op count (busiest first)."""
    ids_a, counts_a = np.unique(sa, return_counts=True)
    ids_b, counts_b = np.unique(sb, return_counts=True)
    common = [int(s) for s in np.intersect1d(ids_a, ids_b)]
    rest_a = [
        int(s)
        for s, _ in sorted(zip(ids_a.tolist(), counts_a.tolist(), strict=True), key=lambda x: -x[1])
        if s not in common
    ]
    rest_b = [
        int(s)
        for s, _ in sorted(zip(ids_b.tolist(), counts_b.tolist(), strict=True), key=lambda x: -x[1])
        if s not in common
    ]
    out = [(np.flatnonzero(sa == s), np.flatnonzero(sb == s)) for s in common]
    out += [(np.flatnonzero(sa == x), np.flatnonzero(sb == y)) for x, y in zip(rest_a, rest_b, strict=False)]
    out += [(np.flatnonzero(sa == x), np.zeros(0, np.int64)) for x in rest_a[len(rest_b) :]]
    out += [(np.zeros(0, np.int64), np.flatnonzero(sb == y)) for y in rest_b[len(rest_a) :]]
    return out
