"""A measured kernel as a graph node of the device model: its work read from its recorded shapes by its recipe.

The node is what a run's graph would hold for that kernel (graph/nodes.py), so `evaluate_costs` prices a real
kernel with exactly the code that prices a simulated one.
"""

from __future__ import annotations

from math import ceil, prod

from atbprof.graph.expr import Lin
from atbprof.graph.nodes import Edge, Node, Tensor, Work
from atbprof.predict.recipes import Recipe
from atbprof.predict.shapes import TensorShape

ATTENTION_BLOCK = 128
"""FlashAttention's query/key block: a causal kernel skips the blocks above the diagonal, computes the others."""
DEFAULT_HEAD_DIM = 128
"""Head size assumed when a profile records no softmax statistics to count the heads (only tiling depends on it)."""


class Unpriceable(ValueError):
    """The recorded shapes do not give this recipe's work (the message says why)."""


def _tensor(t: TensorShape) -> Tensor:
    return Tensor(tuple(Lin(one=d) for d in t.dims), t.dtype, Lin(one=t.nbytes))


def _node(
    op_type: str, inputs: list[TensorShape], outputs: list[TensorShape], work: list[Work], **extra: object
) -> Node:
    return Node(
        id=0,
        op_type=op_type,
        op_name=op_type,
        role="",
        layer=-1,
        inputs=[Edge(-1, _tensor(t)) for t in inputs],
        outputs=[_tensor(t) for t in outputs],
        params=[],
        work=work,
        **extra,  # type: ignore[arg-type]
    )


def kernel_node(
    op_type: str, recipe: Recipe, inputs: list[TensorShape | None], outputs: list[TensorShape | None]
) -> Node:
    ins = [t for t in inputs if t is not None]
    outs = [t for t in outputs if t is not None]
    if not ins and not outs:
        raise Unpriceable("no Input/Output Shapes recorded (capture with record_shapes=True)")
    if recipe.recipe == "gemm":
        return _gemm(op_type, ins, outs)
    if recipe.recipe == "attention":
        return _attention(op_type, recipe, inputs, outs)
    return _vector(op_type, recipe, inputs, ins, outs)


def gemm_dims(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, int, int, int, bool]:
    """(batch, M, K, N, A transposed) of a matrix product; the output fixes M and N. Raises Unpriceable."""
    if len(out) < 2 or len(a) < 2 or len(b) < 2:
        raise Unpriceable("a matrix product needs 2-D operands and output")
    m, n = out[-2], out[-1]
    if a[-2] == m:
        k, trans_a = a[-1], False
    elif a[-1] == m:
        k, trans_a = a[-2], True
    else:
        raise Unpriceable(f"operand {a} has no dimension M = {m} of the output {out}")
    if not ({b[-2], b[-1]} >= {k, n} or (k == n and k in (b[-2], b[-1]))):
        raise Unpriceable(f"operand {b} is not K x N = {k} x {n}")
    return prod(out[:-2]) or 1, m, k, n, trans_a


def _gemm(op_type: str, ins: list[TensorShape], outs: list[TensorShape]) -> Node:
    if len(ins) < 2 or not outs:
        raise Unpriceable("a matrix product needs two operand shapes and an output shape")
    batch, m, k, n, _ = gemm_dims(ins[0].dims, ins[1].dims, outs[0].dims)
    work = Work("cube", mm=(Lin(one=batch), Lin(one=m), Lin(one=k), Lin(one=n)), kind=op_type)
    return _node(op_type, ins, outs[:1], [work])


def _softmax_stats(tensors: list[TensorShape]) -> tuple[int, int, int] | None:
    """(batch, heads, Sq) from FlashAttention's softmax max/sum, [B, N, Sq, 8] fp32, when the profile has them."""
    for t in tensors:
        if len(t.dims) == 4 and t.dims[-1] == 8 and t.is_float32:
            return t.dims[0], t.dims[1], t.dims[2]
    return None


def _attention(op_type: str, recipe: Recipe, inputs: list[TensorShape | None], outs: list[TensorShape]) -> Node:
    if len(inputs) < 3 or any(t is None for t in inputs[:3]):
        raise Unpriceable("attention needs the query, key and value shapes (inputs 0-2)")
    q, k = inputs[0], inputs[1]
    assert q is not None and k is not None
    if len(q.dims) != len(k.dims) or len(q.dims) not in (3, 4):
        raise Unpriceable(f"query {q.dims} / key {k.dims}: not a BSH, SBH, BNSD or BSND layout")
    present = [t for t in inputs if t is not None]
    stats = _softmax_stats(present + outs)
    if len(q.dims) == 3:
        if stats and q.dims[0] == stats[2] and q.dims[1] == stats[0]:  # SBH (MindSpeed's layout)
            batch, sq, skv = q.dims[1], q.dims[0], k.dims[0]
        else:  # BSH, torch_npu's default for Prompt/IncreFlashAttention
            batch, sq, skv = q.dims[0], q.dims[1], k.dims[1]
        width = q.dims[2]
    elif stats and q.dims[1] == stats[2] and q.dims[2] == stats[1]:  # BSND
        batch, sq, skv, width = q.dims[0], q.dims[1], k.dims[1], q.dims[2] * q.dims[3]
    else:  # BNSD
        batch, sq, skv, width = q.dims[0], q.dims[2], k.dims[2], q.dims[1] * q.dims[3]
    heads = stats[1] if stats else max(width // DEFAULT_HEAD_DIM, 1)
    head_dim = max(width // heads, 1)
    masked = any(t.dtype in ("BOOL", "DT_BOOL") and len(t.dims) >= 2 for t in present[3:])
    blocks = ceil(sq / ATTENTION_BLOCK)
    # LLM attention masks are causal: with Sq = Skv only the blocks on and below the diagonal are computed
    frac = (blocks + 1) / (2 * blocks) if masked and sq == skv and blocks > 1 else 1.0
    groups = batch * heads * frac
    scores = groups * sq * skv
    work = [
        Work(
            "cube",
            mm=(
                Lin(one=groups),
                Lin(one=sq),
                Lin(one=head_dim if p % 2 == 0 else skv),
                Lin(one=skv if p % 2 == 0 else head_dim),
            ),
            kind="BatchMatMulV2",
        )
        for p in range(recipe.products)
    ]
    work.append(
        Work(
            "vector",
            vec_bytes=Lin(one=scores * 4 * recipe.score_passes),
            vec_flops=Lin(one=scores * recipe.score_passes),
            kind=op_type,
        )
    )
    # the scores cross between cube and vector once per product (through L2 on split-core 910B, as in a run)
    handoff = [Lin(one=scores * 2)] * recipe.products
    return _node(op_type, present, outs, work, handoff=handoff)


def _vector(
    op_type: str, recipe: Recipe, inputs: list[TensorShape | None], ins: list[TensorShape], outs: list[TensorShape]
) -> Node:
    if not outs and recipe.inplace:  # an in-place update records no outputs: it writes the inputs it updates
        outs = [t for i, t in enumerate(inputs) if i in recipe.inplace and t is not None]
    if recipe.fills and outs:
        ins = []
    if recipe.reads_output_only and ins and outs:
        # what it reads is what it writes, in the source's dtype (the rest of the source is never touched)
        source = ins[0].dtype
        ins = [TensorShape(t.dims, source) for t in outs] + [t for t in ins[1:] if t.nbytes < ins[0].nbytes]
    biggest = max(t.nbytes for t in ins + outs)
    per_byte = 0.25 if outs and outs[0].is_float32 else 0.5  # as GraphBuilder.vec: fp32 elements are 4 B
    work = Work(
        "vector",
        vec_bytes=Lin(one=biggest * recipe.passes),
        vec_flops=Lin(one=biggest * recipe.passes * per_byte),
        kind=op_type,
    )
    return _node(op_type, ins, outs, [work])
