"""Op types derived from kernel names, for sources that do not record a type.

Ascend (docs/ascend_profiling_formats.md §3.1): at torch_npu Level0 `Type` is N/A and trace JSON never carries a
type, but kernel names follow a few conventions:
  aclnn<Api>_<KernelImpl>_<OpType>     aclnnInplaceRelu_Relu_Relu -> Relu (last capitalised token)
  Inner<Op>_<Op>_<Op>                  InnerPromptFlashAttention_..._PromptFlashAttention -> PromptFlashAttention
  trans_<OpType>_<n>                   trans_TransData_0 -> TransData (numeric tokens are counters)
  <GE op name><counter>                Conv2D1 -> Conv2D, ReduceSum7 -> ReduceSum, MatMulV21 -> MatMulV2
  <anything>_MemSet                    the atomic clean before a kernel -> MemSet
  hcom_<op>__<ids>                     hcom_allReduce__868_0_1 -> hcom_allReduce_ (the Type msprof writes)
  RmsNorm, SwiGlu, PpMatMulF16Kernel   bare names (fused ops, ATB kernels) -> the name itself
A variant the name spells is kept (LayerNormV390 -> LayerNormV3, ReduceSumD147 -> ReduceSumD, aclnn..._LayerNormV3).
GE names of the acl_op path carry the framework op's name, not the type GE chose when it compiled the node:
LayerNorm90 ran as a LayerNormV3, ReduceSum147 as a ReduceSumD, StridedSlice195 as a StridedSliceD (the typed
kernel_details of the same sample say so), and nothing in a Level0 profile records the choice (trace_view's
Dequeue@ and task args neither), so such rows keep the family name - the norm patterns treat LayerNorm and
LayerNormV3 alike. On the real typed samples the rules agree with the recorded Type on 97% of rows (tests pin it).

GPU (Kineto `kernel` events): the function name without `void`, namespaces, template arguments and parameters
(`void at::native::vectorized_elementwise_kernel<4, ...>(...)` -> vectorized_elementwise_kernel); a generic
wrapper (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`) is named by its first template argument; Triton's
trailing counter is dropped (`triton_poi_fused_add_0` -> triton_poi_fused_add).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

_HCOM = re.compile(r"^(hcom_[A-Za-z0-9]+_)_")
_COUNTER = re.compile(r"^(.*?)(\d+)$")
_ACLNN_LIKE = ("aclnn", "Inner")


AICORE_SUFFIX = r"^(.+)AiCore$"
"""CANN names some Types after the core they run on (`AddAiCore`, `CastAiCore`): the base Type is the op."""


def base_ascend_types(types: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Ascend Types with the `*AiCore` suffix normalised to their base Type (`AddAiCore` -> `Add`), at the importer
    boundary, so patterns and diffs see one name per op whichever release wrote the profile."""
    return pc.replace_substring_regex(types, AICORE_SUFFIX, r"\1")


def is_hccl_type(op_type: str) -> bool:
    """An HCCL collective's task Type (hcom_allReduce_, HcomAllGather, hccl...), not a kernel's."""
    return op_type.lower().startswith(("hcom", "hccl"))


def ascend_op_type(name: str) -> str:
    return re.sub(AICORE_SUFFIX, r"\1", _ascend_op_type(name))


def _ascend_op_type(name: str) -> str:
    if name.startswith("hcom_"):
        match = _HCOM.match(name)
        return match.group(1) if match else name
    if name.startswith("atomic_memset"):
        return "MemSet"
    tokens = name.split("_")
    if len(tokens) > 1 and (tokens[0].startswith(_ACLNN_LIKE) or tokens[0] == "trans"):
        for token in reversed(tokens[1:]):
            if token[:1].isupper():  # skips counters ("0") and lower-case tags ("varlen")
                return token
        return name
    if len(tokens) > 1:
        return "MemSet" if tokens[-1] == "MemSet" else name
    head = name.split("/", 1)[0]  # GE scope suffix: StatelessDropOutGenMask23/DSASTATELESSGENBITMASK
    match = _COUNTER.match(head)
    if not match or not match.group(1):
        return head
    base, digits = match.groups()
    # a version suffix (MatMulV2) is part of the type: MatMulV21 = MatMulV2 + counter 1
    return base + digits[0] if base.endswith("V") else base


_ANON = re.compile(r"\(anonymous namespace\)::")
_TRAILING_COUNTER = re.compile(r"_\d+$")
_GENERIC = {"Kernel", "Kernel2", "kernel", "device_kernel", "kentry"}
"""Wrappers that name nothing: the kernel is their first template argument (cutlass::Kernel<Op>, ck_tile::kentry)."""
_CLOSE = {")": "(", ">": "<"}
_BRACKET_OR_SPACE = re.compile(r"[()<> ]")


def _function_name(text: str) -> str:
    """The qualified function name of a demangled signature, template arguments included: what stands before the
    parameter list, after the return type (`std::enable_if<(a > b), void>::type ns::f<T>(...)` -> `ns::f<T>`). A
    `>` inside parentheses is a comparison, not the end of a template argument list."""
    stack: list[str] = []
    start = 0
    for m in _BRACKET_OR_SPACE.finditer(text):  # only these characters matter: names run to thousands of others
        i, ch = m.start(), m.group()
        if ch in "(<":
            if ch == "(" and not stack:
                return text[start:i].strip()
            stack.append(ch)
        elif ch in _CLOSE and stack and stack[-1] == _CLOSE[ch]:
            stack.pop()
        elif ch == " " and not stack:
            start = i + 1
    return text[start:].strip()


_MANGLED_ID = re.compile(r"(\d+)")
_SUBSTITUTION = re.compile(r"S[0-9A-Z]*_")


def _mangled_ids(text: str, pos: int) -> list[str]:
    """Length-prefixed identifiers (Itanium mangling) read from `pos` while they follow each other; a substitution
    (`S_`, `S0_`: a name given before) stands for one and is skipped."""
    ids: list[str] = []
    while True:
        sub = _SUBSTITUTION.match(text, pos)
        if sub:
            pos = sub.end()
            continue
        m = _MANGLED_ID.match(text, pos)
        if not m:
            return ids
        n = int(m.group(1))
        ids.append(text[m.end() : m.end() + n])
        pos = m.end() + n


def _mangled_op_type(text: str) -> str | None:
    """`_ZN5aiter24add_rmsnorm_quant_kernelI...` -> add_rmsnorm_quant_kernel; a generic wrapper
    (`_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwd...`) -> its first template argument's name (Rmsnorm2dFwd)."""
    nested = text.startswith("_ZN")
    ids = _mangled_ids(text, 3 if nested else 2)
    if not ids:
        return None
    base = ids[-1]
    if base in _GENERIC:
        args = text[text.find(base) + len(base) :]
        for m in _MANGLED_ID.finditer(args):
            at = m.start()
            if at >= 2 and args[at - 2] == "L" and args[at - 1].isalpha():
                continue  # a literal (Li1E: the int 1), not a name
            ident = args[m.end() : m.end() + int(m.group(1))]
            if len(ident) == int(m.group(1)) and re.fullmatch(r"[A-Za-z_]\w*", ident):
                return ident
    return base


def gpu_op_type(name: str) -> str:
    """The short type of a GPU kernel's name (Kineto `kernel` events): the function's name without return type,
    namespaces, template arguments or parameters, demangled or not; a generic wrapper's first template argument;
    Triton's trailing counter dropped. The full name stays in the op table's `op_name`."""
    text = _ANON.sub("", name.strip())
    if text.startswith("_Z"):
        return _TRAILING_COUNTER.sub("", _mangled_op_type(text) or text)
    qualified = _function_name(text)
    cut = qualified.find("<")
    head, args = (qualified, "") if cut < 0 else (qualified[:cut], qualified[cut + 1 :])
    base = head.rsplit("::", 1)[-1].strip()
    if base in _GENERIC and args:
        inner = re.split(r"[<>,(]", args, maxsplit=1)[0]
        base = inner.rsplit("::", 1)[-1].strip() or base
    return _TRAILING_COUNTER.sub("", base) or name


def derive_types(names: pa.Array | pa.ChunkedArray, rule: Callable[[str], str]) -> pa.Array:
    """`rule` applied once per distinct name (names repeat: a 1M-row table has a few hundred)."""
    arr = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    encoded = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
    types = pa.array([rule(v) if v is not None else "" for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(types, encoded.indices)


ELEMENTWISE_WRAPPERS = frozenset(
    {
        "vectorized_elementwise_kernel",
        "elementwise_kernel",
        "unrolled_elementwise_kernel",
        "elementwise_kernel_manual_unroll",
        "vectorized_templated_elementwise_kernel",
        "reduce_kernel",
    }
)
"""PyTorch's generic elementwise / reduction kernels (at::native): one kernel name for every aten op, the op is the
functor in its template arguments."""
_FUNCTOR = re.compile(
    r"[A-Za-z_]\w*?(?:_kernel_cuda|_kernel_impl|_kernel|Functor(?:OnSelf|OnOther)?(?:_\w+)?|Ops|_functor)\b"
)
_FUNCTOR_WRAPPERS = frozenset(
    {"gpu_kernel_impl", "gpu_kernel_impl_nocast", "BinaryFunctor", "UnaryFunctor", "AUnaryFunctor", "BUnaryFunctor"}
    | ELEMENTWISE_WRAPPERS
)


def kernel_functor(name: str) -> str | None:
    """The aten op a generic PyTorch elementwise / reduce kernel runs, as the functor its demangled name carries:
    `vectorized_elementwise_kernel<4, …pow_tensor_scalar_kernel_impl<float, float>…>` -> pow_tensor_scalar_kernel_impl,
    `reduce_kernel<512, 1, ReduceOp<float, MeanOps<…>>>` -> MeanOps, `…BinaryFunctor<…, MulFunctor<float>>` ->
    MulFunctor. None for any other kernel, or a name that carries no functor (a mangled or cut name)."""
    text = _ANON.sub("", name)
    head = text.split("<", 1)[0].rsplit("::", 1)[-1].strip()
    if head not in ELEMENTWISE_WRAPPERS:
        return None
    for m in _FUNCTOR.finditer(text, len(text.split("<", 1)[0])):
        token = m.group(0)
        if token not in _FUNCTOR_WRAPPERS:
            return token
    return None
