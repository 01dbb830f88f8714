"""The import contract: every input (our runs, msprof, torch_npu, Kineto) becomes a `Profile`.

`ops` has the op table schema (atbprof/optable/schema.py); columns a source lacks are null. `framework` holds the
framework-level ops (aten::*, npu::*, cpu_op events of Kineto / trace_view.json) when the source records them;
`steps` the step table of our runs (STEPS_SCHEMA); `step_frames` one row per step for every kind of input
(STEP_FRAMES_SCHEMA: ProfilerStep#N ranges, or the span of the step's ops when only `Step Id` is known).
External names are mapped to ours here, once.

All times are int64 ns relative to the profile's first event; `meta["origin_ns"]` holds that event's absolute time
(epoch ns for real profiles, so `origin_ns + task_start_ns` is the time the profiler wrote, to the ns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from atbprof.optable.schema import SCHEMA_VERSION

FRAMEWORK_SCHEMA = pa.schema(
    [
        pa.field("index", pa.int64(), nullable=False, metadata={"doc": "event position in the source"}),
        pa.field("name", pa.string(), nullable=False, metadata={"doc": "e.g. aten::pow, aten::rms_norm"}),
        pa.field("start_ns", pa.int64(), nullable=False, metadata={"doc": "relative to the profile start"}),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("pid", pa.int64(), nullable=True),
        pa.field("tid", pa.int64(), nullable=True),
        pa.field("depth", pa.int32(), nullable=False, metadata={"doc": "nesting depth on its thread (0 = top)"}),
        pa.field("parent", pa.int64(), nullable=True, metadata={"doc": "index of the enclosing op on its thread"}),
        pa.field("step", pa.int32(), nullable=True, metadata={"doc": "ProfilerStep#N it falls in"}),
        pa.field("input_shapes", pa.string(), nullable=True),
    ],
    metadata={"atbprof.table": "framework", "atbprof.schema_version": SCHEMA_VERSION},
)


STEP_FRAMES_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False, metadata={"doc": "relative to the profile start"}),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("op_count", pa.int64(), nullable=False, metadata={"doc": "op table rows with this step"}),
        pa.field("first_op_index", pa.int64(), nullable=True, metadata={"doc": "first op row of the step"}),
        pa.field(
            "frame",
            pa.string(),
            nullable=False,
            metadata={
                "doc": "what the frame is: ProfilerStep (host ProfilerStep#N range), ops (first op start to last op "
                "end, when only the op table names the step), run (atbprof host start to token synced)"
            },
        ),
    ],
    metadata={"atbprof.table": "step_frames", "atbprof.schema_version": SCHEMA_VERSION},
)


HOST_CALLS_SCHEMA = pa.schema(
    [
        pa.field(
            "kind",
            pa.string(),
            nullable=False,
            metadata={
                "doc": "sync (the host waits for the device: importers/host_calls.yaml) | runtime (launches, "
                "queries) | python (a Python function the host ran)"
            },
        ),
        pa.field("name", pa.string(), nullable=False, metadata={"doc": "the call or function, as recorded"}),
        pa.field("start_ns", pa.int64(), nullable=False, metadata={"doc": "relative to the profile start"}),
        pa.field("dur_ns", pa.int64(), nullable=False),
    ],
    metadata={"atbprof.table": "host_calls", "atbprof.schema_version": SCHEMA_VERSION},
)
"""The host's runtime calls (Kineto cuda_runtime / cuda_driver), which say why the device sat idle."""


@dataclass(frozen=True)
class Profile:
    kind: str  # atbprof-run | kernel_details | op_summary | ascend_pt | msprof | trace_view | kineto
    source: str  # what was read (path), for reports
    ops: pa.Table  # OPS_SCHEMA
    framework: pa.Table | None = None  # FRAMEWORK_SCHEMA
    steps: pa.Table | None = None  # STEPS_SCHEMA (our runs) when known
    meta: dict[str, object] = field(default_factory=dict)  # device, run.json summary, profiler level, ...
    step_frames: pa.Table | None = None  # STEP_FRAMES_SCHEMA, any input kind, when steps are known
    host_calls: pa.Table | None = None  # HOST_CALLS_SCHEMA, where the profile records runtime calls (Kineto)


def import_warnings(profile: Profile) -> list[str]:
    """What the importer repaired or could not read (dropped rows, unreadable side files), one line each."""
    found = profile.meta.get("warnings")
    return [str(w) for w in found] if isinstance(found, list) else []
