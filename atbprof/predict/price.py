"""Price every kernel of an op table with the device model: one node per distinct kernel signature, one array pass.

Pure: an op table in, a prices table out (`PRICES_SCHEMA`); the input is never changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from atbprof.device.kernels import KernelCosts, evaluate_costs
from atbprof.device.spec import DeviceSpec
from atbprof.graph.expr import basis_values
from atbprof.graph.nodes import Node
from atbprof.predict.kernel_work import Unpriceable, kernel_node
from atbprof.predict.passes import PASSES, kernel_passes
from atbprof.predict.provenance import node_provenance
from atbprof.predict.recipes import Recipes, load_recipes
from atbprof.predict.shapes import ShapeError, parse_tensors

PRICES_SCHEMA = pa.schema(
    [
        pa.field("op_index", pa.int64(), nullable=False),
        pa.field("op_type", pa.string(), nullable=False),
        pa.field("measured_ns", pa.int64(), nullable=False, metadata={"doc": "the profile's Duration"}),
        pa.field("predicted_ns", pa.float64(), nullable=True, metadata={"doc": "the device model; null: unpriced"}),
        pa.field("communication", pa.bool_(), nullable=False, metadata={"doc": "an HCCL kernel (listed only)"}),
        pa.field("why", pa.string(), nullable=True, metadata={"doc": "why the kernel is unpriced"}),
        pa.field("pass", pa.string(), nullable=False, metadata={"doc": "forward | backward | optimizer"}),
        pa.field("family", pa.string(), nullable=False, metadata={"doc": "gemm, attention, norm, rope, ..."}),
        pa.field(
            "provenance",
            pa.string(),
            nullable=True,
            metadata={
                "doc": "published | fitted | calibrated | unstated: the weakest of its parameters; null: unpriced"
            },
        ),
        pa.field(
            "parameters",
            pa.string(),
            nullable=True,
            metadata={"doc": "the device parameters that set its predicted time, ';'-separated"},
        ),
    ]
)
COMMUNICATION_WHY = "communication: listed, not priced (HCCL is modelled by the parallelism work)"
_SIGNATURE = (
    "op_type",
    "task_type",
    "block_dim",
    "mix_block_dim",
    "input_shapes",
    "input_dtypes",
    "output_shapes",
    "output_dtypes",
)


def _caps(task_type: str | None, block_dim: int | None, mix: int | None, spec: DeviceSpec) -> tuple[float, float]:
    """The cores a measured kernel ran on, as (cube, vector) limits for the model's tiling."""
    cube, vec = float(spec.cores.aic), float(spec.cores.aiv)
    bd = float(block_dim) if block_dim else None
    if bd is None:
        return cube, vec
    if task_type == "MIX_AIC":
        return bd, float(mix) if mix else 2 * bd
    if task_type == "MIX_AIV":
        return max(bd / 2, 1.0), bd  # Block Dim counts the vector blocks; one cube serves two
    if task_type == "AI_VECTOR_CORE":
        return cube, bd
    if task_type == "AI_CORE" and spec.cores.split:
        return bd, vec
    return bd, bd  # coupled cores (910A): one Block Dim for both units


@dataclass(frozen=True)
class KernelSet:
    """An op table's kernels as model nodes, built once (calibrate prices the same set with many specs)."""

    keys: np.ndarray  # row -> signature
    nodes: list[Node]  # one per priceable signature
    caps: np.ndarray  # (nodes, 2) cube / vector core limits from the recorded Block Dims
    node_of: np.ndarray  # signature -> node index, -1 when unpriced
    communication: np.ndarray  # per signature
    why: list[str | None]  # per signature
    family: list[str]  # per signature


def build_kernel_set(ops: pa.Table, spec: DeviceSpec, recipes: Recipes | None = None) -> KernelSet:
    recipes = recipes or load_recipes()
    cols = {c: ops.column(c).to_pylist() for c in _SIGNATURE}
    index: dict[tuple[object, ...], int] = {}
    keys = np.empty(ops.num_rows, dtype=np.int64)
    for row, key in enumerate(zip(*(cols[c] for c in _SIGNATURE), strict=True)):
        keys[row] = index.setdefault(key, len(index))
    nodes: list[Node] = []
    caps: list[tuple[float, float]] = []
    node_of = np.full(len(index), -1, dtype=np.int64)
    why: list[str | None] = [None] * len(index)
    family = ["other"] * len(index)
    communication = np.zeros(len(index), dtype=bool)
    for key, sig in index.items():
        op_type, task_type, block_dim, mix, in_shapes, in_types, out_shapes, out_types = key
        if recipes.is_communication(str(op_type), task_type):  # type: ignore[arg-type]
            communication[sig], why[sig], family[sig] = True, COMMUNICATION_WHY, "communication"
            continue
        recipe = recipes.op_types.get(str(op_type))
        if recipe is not None:
            family[sig] = recipe.kernel_family
        if recipe is None:
            why[sig] = "op type not in the device model's recipes (atbprof/data/predict_recipes.yaml)"
            continue
        try:
            node = kernel_node(
                str(op_type),
                recipe,
                parse_tensors(in_shapes, in_types),  # type: ignore[arg-type]
                parse_tensors(out_shapes, out_types),  # type: ignore[arg-type]
            )
        except (Unpriceable, ShapeError) as err:
            why[sig] = str(err)
            continue
        node_of[sig] = len(nodes)
        nodes.append(node)
        caps.append(_caps(task_type, block_dim, mix, spec))  # type: ignore[arg-type]
    return KernelSet(keys, nodes, np.array(caps).reshape(-1, 2), node_of, communication, why, family)


def node_costs(kernels: KernelSet, spec: DeviceSpec) -> KernelCosts:
    """The device model's costs of each node (the distinct priceable kernels), one step of constant sizes."""
    values = basis_values(1, np.array([1]), np.array([1]))  # every size is a constant
    return evaluate_costs(kernels.nodes, spec, values, block_caps=kernels.caps)


def node_durations(kernels: KernelSet, spec: DeviceSpec) -> np.ndarray:
    """Predicted ns of each node (the distinct priceable kernels)."""
    if not kernels.nodes:
        return np.zeros(0)
    return np.asarray(node_costs(kernels, spec).dur[:, 0])


def row_predictions(kernels: KernelSet, durations: np.ndarray) -> np.ndarray:
    """Per op-table row: the node's duration, NaN where unpriced."""
    per_sig = np.full(kernels.node_of.size, np.nan)
    priced = kernels.node_of >= 0
    per_sig[priced] = durations[kernels.node_of[priced]]
    return per_sig[kernels.keys]


def price_kernels(ops: pa.Table, spec: DeviceSpec, recipes: Recipes | None = None) -> pa.Table:
    kernels = build_kernel_set(ops, spec, recipes)
    if kernels.nodes:
        costs = node_costs(kernels, spec)
        durations = np.asarray(costs.dur[:, 0])
        kinds, params = node_provenance(kernels.nodes, costs, spec)
    else:
        durations, kinds, params = np.zeros(0), [], []
    predicted = row_predictions(kernels, durations)
    rows = pa.array(kernels.keys)  # per row: its signature; per-signature facts are taken from there
    of_sig = kernels.node_of.tolist()
    kind_of_sig = pa.array([kinds[n] if n >= 0 else None for n in of_sig], pa.string())
    params_of_sig = pa.array([params[n] if n >= 0 else None for n in of_sig], pa.string())
    return pa.table(
        {
            "op_index": ops.column("op_index"),
            "op_type": ops.column("op_type").cast(pa.string()),
            "measured_ns": ops.column("task_dur_ns"),
            "predicted_ns": pa.array(predicted, pa.float64(), mask=np.isnan(predicted)),
            "communication": pa.array(kernels.communication[kernels.keys]),
            "why": pa.array(kernels.why, pa.string()).take(rows),
            "pass": pa.array(PASSES, pa.string()).take(pa.array(kernel_passes(ops))),
            "family": pa.array(kernels.family, pa.string()).take(rows),
            "provenance": kind_of_sig.take(rows),
            "parameters": params_of_sig.take(rows),
        },
        schema=PRICES_SCHEMA,
    )
