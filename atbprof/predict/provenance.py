"""Which device parameters priced each kernel, and where they came from (`DeviceSpec.provenance`).

A kernel's time is set by the pipe or term that bounds it (`KernelCosts.bound`): a compute-bound GEMM by the cube
rate and its MAC/MTE2 overlap, a memory-bound one by the HBM streaming rate, a vector kernel by the vector or
elementwise-traffic rate, a launch-bound one by the static cost; FlashAttention also by its scalar block cycles.
Its provenance is the weakest of those parameters' kinds: calibrated (from the user's own profile) over fitted
(on a named sample) over unstated (a spec that does not say) over published (a spec sheet or measurement).
"""

from __future__ import annotations

import numpy as np

from atbprof.device.kernels import BOUND_NAMES, TASK_TYPES, KernelCosts
from atbprof.device.spec import DeviceSpec
from atbprof.graph.nodes import Node

_RANK = {"published": 0, "unstated": 1, "fitted": 2, "calibrated": 3}
_STATIC = {"AI_CORE": "cube", "AI_VECTOR_CORE": "vector", "MIX_AIC": "mix", "AI_CPU": "aicpu"}


def kernel_parameters(node: Node, bound: str, task_type: str, spec: DeviceSpec) -> list[str]:
    """The spec parameters (dotted names) that set the kernel's predicted time."""
    static = f"static_cost_us.{_STATIC.get(task_type, 'vector')}"
    has_mm = any(w.mm is not None for w in node.work)
    has_vec = any(w.unit == "vector" for w in node.work)
    if bound == "launch":
        names = [static]
    elif has_mm and has_vec:
        names = ["efficiency.cube", "efficiency.mac_mte2_overlap", "efficiency.vector", "efficiency.mix_overlap"]
        if node.op_type in spec.block_scalar_cycles:
            names.append(f"block_scalar_cycles.{node.op_type}")
    elif has_mm:
        if bound == "compute":
            names = ["efficiency.cube", "efficiency.mac_mte2_overlap"]
        else:
            nd = any(w.kind == "MatMulV2" for w in node.work)
            names = ["efficiency.gemv_nd" if nd else "efficiency.hbm_stream"]
    elif bound == "compute":
        names = ["efficiency.vector"]
    else:
        fill = not node.inputs and not node.params
        names = ["efficiency.hbm_stream" if fill else "efficiency.vector_hbm"]
    if node.op_type in spec.op_time_scale:
        names.append(f"op_time_scale.{node.op_type}")
    return names if static in names else [*names, static]


def provenance_kind(names: list[str], spec: DeviceSpec) -> str:
    """The weakest kind among the parameters `names`."""
    kinds = [spec.provenance[n].kind if n in spec.provenance else "unstated" for n in names]
    return max(kinds, key=_RANK.__getitem__)


def node_provenance(nodes: list[Node], costs: KernelCosts, spec: DeviceSpec) -> tuple[list[str], list[str]]:
    """Per node: its provenance kind and its parameters (';'-joined)."""
    kinds: list[str] = []
    params: list[str] = []
    bound = np.asarray(costs.bound)[:, 0]
    for i, node in enumerate(nodes):
        names = kernel_parameters(node, BOUND_NAMES[int(bound[i])], TASK_TYPES[int(costs.task_type[i])], spec)
        kinds.append(provenance_kind(names, spec))
        params.append(";".join(names))
    return kinds, params
