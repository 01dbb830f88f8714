"""A large run of ours analysed in parts of whole steps: memory bounded by a part, not by the run.

A run of more than CHUNKED_FROM ops (~524 k) is read from ops.parquet in parts of about CHUNK_OPS ops (~131 k) that
hold whole steps (`atbprof run` writes a device's ops step by step, row group by row group;
optable/schema.step_chunks). Each part gets its view, its kernel findings (detect_parts: keyed, so the parts'
findings concatenate in the order the whole table's would have) and its attribution sums (attribute_totals: whole
nanoseconds, so they merge exactly). What depends on the whole table is settled first, from the op types and
streams of every part: whether the run's graph describes the ops (its edges then confirm the chains), and whether
patterns match across streams. The report is then built as for a table held whole (analyze/api.report_of): the
same report, byte for byte (tests/analyze/test_chunked.py).

What stays held: one part's table and its derived arrays, and the sums: of the attribution (per phase x op type)
and of the findings (analyze/digest.py: per finding, phase and rule, with its longest occurrences; the occurrences
themselves, ~300 bytes each held as a table, are not kept, so the report has no `to_arrow()` table).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.api import TableFacts, has_norm_ops, profile_notes, report_of
from atbprof.analyze.attribute import attribute_totals, breakdown_of, merge_totals
from atbprof.analyze.charges import launch_latency_ns
from atbprof.analyze.detect import detect_parts, merge_wanted
from atbprof.analyze.digest import FindingsDigest
from atbprof.analyze.graph_edges import edges_match, graph_edges, run_config
from atbprof.analyze.patterns import PatternSet, load_patterns
from atbprof.analyze.report import FINDINGS_SCHEMA, AnalysisReport
from atbprof.analyze.view import OpView, dict_codes, has_values, int_column
from atbprof.arrays import distinct
from atbprof.errors import AtbprofError, InputError
from atbprof.importers.base import Profile

CHUNK_OPS = 1 << 17
"""Ops per part (~131 k). Measured on the 4.1 M-op run, in process (peak RSS, wall): 2^16 -> 400 MB, 5.5 s;
2^17 -> 486 MB, 4.8 s; 2^18 -> 583 MB, 4.5 s; 2^19 -> 782 MB, 4.5 s: the parts' fixed costs against one part's
arrays (what else is held does not grow with the run). The 20.5 M-op TP8 run, whole process: 2^16 -> 935 MiB,
22.7 s; 2^17 -> 980 MiB, 21.6 s; 2^18 -> 1,093 MiB, 22.6 s (its ranks' what-if and cluster tables come on top)."""

CHUNKED_FROM = 1 << 19
"""Runs of more ops than this (~524 k) are analysed in parts; smaller ones whole, in one pass. Measured on the
999 k-op run: in parts 0.57-0.59 GB and 1.89-1.97 s, whole 0.72-0.76 GB and 1.75-1.78 s."""


SURVEY_COLUMNS = (
    "phase",
    "node_id",
    "op_type",
    "stream_id",
    "role",
    "host_launch_start_ns",
    "host_launch_dur_ns",
    "input_shapes",
    "bound",
)
"""What a first pass reads of every part: what the whole table records, its op types and streams, and the
(phase, node, type) triples the run's graph must describe."""


@dataclass
class _Survey:
    """What the parts say of the whole table, read before any analysis."""

    ops: int
    type_names: list[str]
    streams: set[int]
    recorded: dict[str, bool]  # column -> some part has a value in it
    edges_ok: bool  # every part's (phase, node_id, op_type) is a node of the run's graph


def analyze_input(
    path: Path,
    *,
    columns: Sequence[str],
    rank: int | None = None,
    check_other_ranks: bool = True,
    part_ops: int | None = None,
    parts_from: int | None = None,
    patterns: PatternSet | None = None,
    patterns_file: str | None = None,
    top: int = 10,
    whatif: bool = True,
    cann_version: str | None = None,
) -> AnalysisReport:
    """`analyze` of an input path: a run of ours of more than `parts_from` ops (default CHUNKED_FROM) in parts of
    whole steps of about `part_ops` ops (default CHUNK_OPS), in bounded memory; anything else read whole (`columns`
    held) and analysed in one pass."""
    from atbprof.analyze.api import analyze
    from atbprof.importers.detect import load_profile
    from atbprof.importers.ours import is_run_dir, load_run, run_in_parts

    patterns = patterns or load_patterns(patterns_file)
    profile: Profile | None = None
    if is_run_dir(path):
        planned = run_in_parts(
            path, rank, columns, part_ops or CHUNK_OPS, CHUNKED_FROM if parts_from is None else parts_from
        )
        # the what-if of a run read in parts is re-simulated from run.json: without its config and summary the
        # device model would price the ops, and it reads the whole table
        if (
            planned is not None
            and run_config(planned[0].meta) is not None
            and isinstance(planned[0].meta.get("summary"), dict)
        ):
            return analyze_run_in_parts(
                planned[0],
                path / "ops.parquet",
                planned[1],
                columns=columns,
                rank=rank,
                check_other_ranks=check_other_ranks,
                patterns=patterns,
                top=top,
                whatif=whatif,
                cann_version=cann_version,
            )
        if rank is not None:  # one rank of a run: only its row groups are read
            profile = load_run(path, rank=rank, columns=columns, check_other_ranks=check_other_ranks)
    if profile is None:
        profile = load_profile(path, columns=columns)
    return analyze(profile, patterns=patterns, top=top, whatif=whatif, cann_version=cann_version)


def analyze_run_in_parts(
    profile: Profile,
    ops_path: Path,
    chunks: list[list[int]],
    *,
    columns: Sequence[str],
    rank: int | None = None,
    check_other_ranks: bool = True,
    patterns: PatternSet | None = None,
    patterns_file: str | None = None,
    top: int = 10,
    whatif: bool = True,
    cann_version: str | None = None,
) -> AnalysisReport:
    """`analyze` of a run whose ops (`profile.ops`: empty, the schema only) are read from `ops_path` part by part:
    `chunks` (optable/schema.step_chunks) of `rank`'s row groups, `columns` held."""
    from atbprof.optable.schema import read_ops_chunks

    patterns = patterns or load_patterns(patterns_file)
    meta = profile.meta
    notes, on_release = profile_notes(profile, cann_version)

    def parts(held: Sequence[str], verify: bool = False) -> Iterator[pa.Table]:
        return read_ops_chunks(
            ops_path, chunks, columns=held, rank=rank, check_other_ranks=check_other_ranks, verify=verify
        )

    cfg = run_config(meta)
    edges, failed = None, None
    if cfg is not None:
        try:
            edges = graph_edges(cfg)
        except AtbprofError as err:
            failed = err
    survey = _survey(parts(SURVEY_COLUMNS), edges)
    if not survey.ops:
        raise InputError(f"{ops_path}: no tasks of rank {rank} in ops.parquet")
    if not survey.recorded["role"]:
        # without roles the categories come from blocks cut at the norm chains, which may run across a step's
        # edge: only the whole table gives them (runs of `atbprof run` record roles)
        from atbprof.analyze.api import analyze
        from atbprof.importers.ours import load_run

        held = load_run(ops_path.parent, rank=rank, columns=columns, check_other_ranks=check_other_ranks)
        return analyze(held, patterns=patterns, top=top, whatif=whatif, cann_version=cann_version)
    # as analyze/graph_edges.edges_for_run decides for a table held whole
    if not has_norm_ops(survey.type_names, patterns):
        edges = None
    elif cfg is None:
        notes.append("run.json has no readable config: Add->Norm and Norm->MatMul edges were inferred from shapes")
    elif failed is not None:
        notes.append(f"the run's graph could not be rebuilt ({failed}): edges were inferred from shapes")
    elif not survey.edges_ok:
        edges = None
        notes.append("the rebuilt graph does not match ops.parquet: edges were inferred from shapes")
    merge = merge_wanted(patterns.kernel, len(survey.streams), survey.type_names)
    rec = survey.recorded
    flags = (rec["role"], rec["host_launch_start_ns"] and rec["host_launch_dur_ns"], rec["bound"])
    latency = launch_latency_ns(meta)
    digest = FindingsDigest(top)  # the findings summed part by part, not held
    totals = []
    for index, part in enumerate(parts(columns, verify=True)):
        view = OpView.build(part)
        found_here = detect_parts(part, patterns, edges, view, merge)
        for key, table in found_here:
            digest.add(key, index, table)
        part_found = pa.concat_tables([t for _, t in found_here]) if found_here else FINDINGS_SCHEMA.empty_table()
        totals.append(
            attribute_totals(part, profile.steps, part_found, patterns, latency, view, profile.step_frames, flags=flags)
        )
        del view, part, part_found, found_here  # the next part's arrays replace these, not add to them
    breakdown = breakdown_of(merge_totals(totals), top, latency)
    facts = TableFacts(
        ops=survey.ops,
        streams=sorted(s for s in survey.streams if s >= 0),
        has_roles=rec["role"],
        has_launch=rec["host_launch_dur_ns"],
        has_shapes=rec["input_shapes"],
        types_of=lambda wanted: _types_of(parts(("op_index", "op_type")), wanted),
    )
    return report_of(profile, patterns, digest, breakdown, facts, notes, on_release, top, whatif, edges is not None)


def _survey(parts: Iterator[pa.Table], edges: pa.Table | None) -> _Survey:
    names: dict[str, None] = {}
    streams: set[int] = set()
    ops = 0
    recorded = dict.fromkeys(("role", "host_launch_start_ns", "host_launch_dur_ns", "input_shapes", "bound"), False)
    edges_ok = edges is not None
    for part in parts:
        ops += part.num_rows
        _, types = dict_codes(part.column("op_type"))
        names.update(dict.fromkeys(types))
        streams.update(distinct(int_column(part, "stream_id")).tolist())
        for column in recorded:
            recorded[column] |= has_values(part, column)
        if edges_ok and edges is not None:
            edges_ok = edges_match(edges, part)
    return _Survey(ops, list(names), streams, recorded, edges_ok)


def _types_of(parts: Iterator[pa.Table], wanted: np.ndarray) -> dict[int, str]:
    """The op types of the ops with these op_index values (the examples' kernels), one more pass over the parts."""
    out: dict[int, str] = {}
    if not len(wanted):
        return out
    for part in parts:
        hit = pc.is_in(part.column("op_index"), pa.array(wanted, pa.int64()))
        rows = part.filter(hit)
        if rows.num_rows:
            index = int_column(rows, "op_index")
            types = rows.column("op_type").cast(pa.string()).to_pylist()
            out.update(zip(index.tolist(), types, strict=True))
    return out
