"""The framework call behind each device task, as torch_npu's profiler names it in trace_view.json (`cpu_op`).

atbprof simulates eager PyTorch on torch_npu: every task is launched by one framework call. Unfused kernels come
from aten ops (`aten::pow`, `aten::rsqrt`, ...); fused kernels from torch_npu APIs (`npu::npu_rms_norm`, ...).
msprof-analyze's "Affinity API" check matches runs of aten names (mstt `rules/timeline_fusion_ops.yaml`, e.g.
`(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}` -> torch_npu.npu_rms_norm), so the names follow what
HF LLaMA code calls: RMSNorm = to, pow, mean, add, rsqrt, mul, to, mul.
"""

from __future__ import annotations

import re

ATEN_BY_TYPE = {
    "Cast": "to",
    "Pows": "pow",
    "Pow": "pow",
    "Square": "pow",
    "ReduceMean": "mean",
    "ReduceMeanD": "mean",
    "Add": "add",
    "Adds": "add",
    "Sub": "sub",
    "Rsqrt": "rsqrt",
    "Mul": "mul",
    "Muls": "mul",
    "RealDiv": "div",
    "MatMulV2": "linear",
    "MatMulV3": "linear",
    "MatMul": "linear",
    "BatchMatMulV2": "matmul",
    "BatchMatMul": "matmul",
    "SoftmaxV2": "softmax",
    "Swish": "silu",
    "Gelu": "gelu",
    "Slice": "slice",
    "Neg": "neg",
    "ConcatD": "cat",
    "Transpose": "contiguous",
    "BroadcastTo": "expand",
    "ScatterUpdate": "index_copy_",
    "GatherV2": "embedding",
    "ArgMaxV2": "argmax",
    "Cos": "cos",
    "Sin": "sin",
    "LayerNormV3": "layer_norm",
    "LayerNorm": "layer_norm",
    "MemSet": "zero_",
    "TransData": "npu_format_cast",
}
"""Unfused CANN op type -> the aten op that launches it."""

TORCH_NPU_BY_TYPE = {
    "RmsNorm": "npu_rms_norm",
    "AddRmsNorm": "npu_add_rms_norm",
    "AddLayerNorm": "npu_add_layer_norm",
    "RotaryPositionEmbedding": "npu_rotary_mul",
    "RotaryMul": "npu_rotary_mul",
    "SwiGlu": "npu_swiglu",
    "FlashAttentionScore": "npu_fusion_attention",
    "PromptFlashAttention": "npu_prompt_flash_attention",
    "IncreFlashAttention": "npu_incre_flash_attention",
    "FusedInferAttentionScore": "npu_fused_infer_attention_score",
    "FFN": "npu_ffn",
    "ReshapeAndCache": "_npu_reshape_and_cache",
    "DynamicQuant": "npu_dynamic_quant",
    "AscendQuant": "npu_quantize",
    "AscendAntiQuant": "npu_anti_quant",
    "QuantBatchMatmulV3": "npu_quant_matmul",
    "AddRmsNormDynamicQuant": "npu_add_rms_norm_dynamic_quant",
    "DequantSwigluQuant": "npu_dequant_swiglu_quant",
    "MatmulAllReduce": "npu_mm_all_reduce_base",
}
"""Fused CANN op type -> the torch_npu API that launches it."""

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _snake(name: str) -> str:
    return "_".join(w.lower() for w in _WORD.findall(name)) or name.lower()


def framework_call(op_type: str) -> str:
    """The `cpu_op` name for a task of `op_type`.

    Fused kernels that no torch_npu API launches (atbprof's Fused*MatMul, FusedQKVAttention, ...) are ATB
    operations called from the model code: `atb::<OpType>`, which the aten-sequence checks do not read.
    """
    if op_type in ATEN_BY_TYPE:
        return f"aten::{ATEN_BY_TYPE[op_type]}"
    if op_type in TORCH_NPU_BY_TYPE:
        return f"npu::{TORCH_NPU_BY_TYPE[op_type]}"
    if op_type.startswith("Fused"):
        return f"atb::{op_type}"
    return f"aten::{_snake(op_type)}"
