"""Builds the unfused eager op graph of a whole model (one decode/prefill step), as torch_npu issues it.

Every op here is one kernel launch of Hugging Face's LlamaForCausalLM in eager mode on an NPU: the RMSNorm chain
(Cast, Pows, ReduceMean, Add, Rsqrt, Mul, Cast, Mul), separate Q/K/V MatMulV2, rotate_half RoPE, the KV-cache
write, eager attention (BatchMatMulV2, Mul, Add mask, Cast, SoftmaxV2, Cast, BatchMatMulV2), SwiGLU as
gate/Swish/up/Mul/down, the residual Adds, embedding, final norm, LM head and greedy sampling. Fusion passes
rewrite this graph; they never build a second model by hand.
"""

from __future__ import annotations

from functools import lru_cache

from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import EXPERT_SCALE, KVL, ONE, SQ, ZERO, B, Lin, T
from atbprof.graph.nodes import Edge, Graph, Node, Tensor, Unit, Work
from atbprof.parallel.sharding import tensor_parallel_rules

_API = {
    "Cast": "Cast",
    "Pows": "PowTensorScalar",
    "ReduceMean": "Mean",
    "Add": "Add",
    "Adds": "Adds",
    "Sub": "Sub",
    "Rsqrt": "Rsqrt",
    "Mul": "Mul",
    "MatMulV2": "Matmul",
    "BatchMatMulV2": "BatchMatMul",
    "Slice": "Slice",
    "Neg": "Neg",
    "ConcatD": "Cat",
    "SoftmaxV2": "Softmax",
    "Swish": "Silu",
    "Gelu": "Gelu",
    "Transpose": "Permute",
    "ScatterUpdate": "IndexCopy",
    "BroadcastTo": "Expand",
    "GatherV2": "Embedding",
    "Cos": "Cos",
    "Sin": "Sin",
    "ArgMaxV2": "ArgMax",
    "DynamicQuant": "DynamicQuant",
    "QuantBatchMatmulV3": "QuantMatmulV4",
    # vLLM's apply_top_k_top_p in PyTorch (the sampler's path without the fused kernel)
    "Sort": "Sort",
    "GatherElements": "Gather",
    "Less": "LtTensor",
    "LessEqual": "LeTensor",
    "MaskedFill": "InplaceMaskedFillScalar",
    "Cumsum": "Cumsum",
    "ScatterElements": "Scatter",
    "RealDiv": "Div",
    # Hugging Face's MixtralSparseMoeBlock in eager mode
    "TopKV2": "Topk",
    "ReduceSum": "ReduceSum",
    "OneHot": "OneHot",
    "NonZero": "Nonzero",
    "Index": "Index",
    "InplaceIndexAdd": "InplaceIndexAdd",
    "ZerosLike": "InplaceZero",
}
QUANT_MATMUL = "QuantBatchMatmulV3"  # int8 x int8 -> the model dtype, per-token and per-channel scales applied
INT8 = "DT_INT8"
FP32 = "DT_FLOAT"


def kernel_name(op_type: str) -> str:
    """aclnn kernel naming: aclnn<Api>_<Impl>_<OpType> (ascend_profiling_formats.md section 3.1)."""
    api = _API.get(op_type, op_type)
    impl = {"MatMulV2": "MatMulCommon", "BatchMatMulV2": "BatchMatMulCommon", QUANT_MATMUL: QUANT_MATMUL}.get(
        op_type, f"{op_type}AiCore"
    )
    if op_type == "Adds":
        return "aclnnAdds_AddAiCore_Add"
    return f"aclnn{api}_{impl}_{op_type}"


class GraphBuilder:
    def __init__(self, dims: ModelDims) -> None:
        self.d = dims
        self.nodes: list[Node] = []
        self.dt = dims.msprof_dtype
        self.ds = dims.dsize
        self.shard = tensor_parallel_rules()
        self.quantized: dict[tuple[int, int], tuple[int, Tensor]] = {}  # (producer, width) -> its DynamicQuant
        # the rows of the residual stream: each rank's share of the tokens with sequence parallelism
        self.rows: Lin = T * (1 / dims.tp) if dims.sp else T

    # -- tensors -------------------------------------------------------------------------------------------------
    def act(self, width: int, dtype: str | None = None, tokens: Lin = T) -> Tensor:
        """[B, Sq, width] activation."""
        dt = dtype or self.dt
        size = 4 if dt == FP32 else 2
        shape = (B, SQ, Lin(one=width)) if tokens is T else (tokens, Lin(one=width))
        return Tensor(shape, dt, tokens * (width * size))

    def heads(self, n: int, length: Lin, nbytes_per: Lin, dtype: str | None = None) -> Tensor:
        """[B, n, length, head_dim]; nbytes given as the per-head-dim linear size."""
        dt = dtype or self.dt
        return Tensor((B, Lin(one=n), length, Lin(one=self.d.head_dim)), dt, nbytes_per)

    def weight(self, k: int, n: int) -> Tensor:
        return Tensor((Lin(one=k), Lin(one=n)), self.dt, Lin(one=k * n * self.ds))

    # -- ops -----------------------------------------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        role: str,
        layer: int,
        inputs: list[tuple[int, Tensor]],
        out: Tensor,
        work: Work,
        params: list[Tensor] | None = None,
        writes_params: Lin = ZERO,
    ) -> int:
        nid = len(self.nodes)
        self.nodes.append(
            Node(
                id=nid,
                op_type=op_type,
                op_name=kernel_name(op_type),
                role=role,
                layer=layer,
                inputs=[Edge(p, t) for p, t in inputs],
                outputs=[out],
                params=params or [],
                work=[work],
                writes_params=writes_params,
            )
        )
        return nid

    def out(self, nid: int) -> tuple[int, Tensor]:
        return nid, self.nodes[nid].outputs[0]

    def vec(
        self,
        op_type: str,
        role: str,
        layer: int,
        inputs: list[tuple[int, Tensor]],
        out: Tensor,
        passes: float = 1.0,
        params: list[Tensor] | None = None,
        unit: Unit = "vector",
    ) -> int:
        """An elementwise/reduction vector kernel: its vector unit streams the larger of inputs and output."""
        biggest = max([t.nbytes for _, t in inputs] + [out.nbytes], key=lambda e: e.coef.sum())
        flops_per_byte = 0.25 if out.dtype == FP32 else 0.5
        work = Work(unit, vec_bytes=biggest * passes, vec_flops=biggest * (passes * flops_per_byte), kind=op_type)
        return self.op(op_type, role, layer, inputs, out, work, params)

    def matmul(self, role: str, layer: int, x: tuple[int, Tensor], k: int, n: int, tokens: Lin = T) -> int:
        """The linear of `role` whose full weight is k x n, as one tensor-parallel rank holds it."""
        k, n = self.shard.linear(self.d, role, k, n)
        if self.d.quant == "w8a8" and layer >= 0:
            return self._quant_matmul(role, layer, x, k, n, tokens)
        w = self.weight(k, n)
        out = self.act(n, tokens=tokens)
        work = Work("cube", mm=(ONE, tokens, Lin(one=k), Lin(one=n)), stream_bytes=w.nbytes, kind="MatMulV2")
        return self.op("MatMulV2", role, layer, [x], out, work, params=[w])

    def _quant_matmul(self, role: str, layer: int, x: tuple[int, Tensor], k: int, n: int, tokens: Lin) -> int:
        """W8A8: the activation quantised to int8 per token once (DynamicQuant: int8 values and an fp32 scale per
        token; the Q, K, V or gate and up projections of one input share it), then an int8 GEMM whose weight is one
        byte per element, stored NZ (vllm-ascend casts W8A8 weights to FRACTAL_NZ when it loads them)."""
        key = (x[0], k)
        if key not in self.quantized:
            q = Tensor(x[1].shape, INT8, tokens * (k + 4))  # int8 values + one fp32 scale per token
            nid = self.vec("DynamicQuant", f"{role.split('.')[0]}.quant", layer, [x], q, passes=2.0)
            self.quantized[key] = self.out(nid)
        w = Tensor((Lin(one=k), Lin(one=n)), INT8, Lin(one=k * n))
        out = self.act(n, tokens=tokens)
        work = Work("cube", mm=(ONE, tokens, Lin(one=k), Lin(one=n)), stream_bytes=w.nbytes, kind=QUANT_MATMUL)
        return self.op(QUANT_MATMUL, role, layer, [self.quantized[key]], out, work, params=[w])

    # -- blocks --------------------------------------------------------------------------------------------------
    def rms_norm(
        self, role: str, layer: int, x: tuple[int, Tensor], tokens: Lin = T, width: int = 0
    ) -> tuple[int, Tensor]:
        """LlamaRMSNorm over the last `width` elements (default: the hidden size) of `tokens` rows."""
        h = width or self.d.hidden
        f32 = self.act(h, FP32, tokens)
        col = Tensor((B, SQ, ONE) if tokens is T else (tokens, ONE), FP32, tokens * 4)
        gamma = Tensor((Lin(one=h),), self.dt, Lin(one=h * self.ds))
        c = self.vec("Cast", role, layer, [x], f32)
        p = self.vec("Pows", role, layer, [self.out(c)], f32)
        m = self.vec("ReduceMean", role, layer, [self.out(p)], col)
        a = self.vec("Adds", role, layer, [self.out(m)], col)
        self.nodes[a].op_type = "Add"  # aclnnAdds launches the Add kernel (Type Add)
        r = self.vec("Rsqrt", role, layer, [self.out(a)], col)
        mu = self.vec("Mul", role, layer, [self.out(c), self.out(r)], f32)
        c2 = self.vec("Cast", role, layer, [self.out(mu)], self.act(h, tokens=tokens))
        y = self.vec("Mul", role, layer, [self.out(c2)], self.act(h, tokens=tokens), params=[gamma])
        return self.out(y)

    def layer_norm(self, role: str, layer: int, x: tuple[int, Tensor], tokens: Lin = T) -> tuple[int, Tensor]:
        h = self.d.hidden
        f32 = self.act(h, FP32, tokens)
        col = Tensor((B, SQ, ONE) if tokens is T else (tokens, ONE), FP32, tokens * 4)
        gamma = Tensor((Lin(one=h),), self.dt, Lin(one=h * self.ds))
        c = self.vec("Cast", role, layer, [x], f32)
        mean = self.vec("ReduceMean", role, layer, [self.out(c)], col)
        sub = self.vec("Sub", role, layer, [self.out(c), self.out(mean)], f32)
        p = self.vec("Pows", role, layer, [self.out(sub)], f32)
        var = self.vec("ReduceMean", role, layer, [self.out(p)], col)
        a = self.vec("Adds", role, layer, [self.out(var)], col)
        self.nodes[a].op_type = "Add"
        r = self.vec("Rsqrt", role, layer, [self.out(a)], col)
        mu = self.vec("Mul", role, layer, [self.out(sub), self.out(r)], f32)
        c2 = self.vec("Cast", role, layer, [self.out(mu)], self.act(h, tokens=tokens))
        g = self.vec("Mul", role, layer, [self.out(c2)], self.act(h, tokens=tokens), params=[gamma])
        y = self.vec("Add", role, layer, [self.out(g)], self.act(h, tokens=tokens), params=[gamma])
        return self.out(y)

    def norm(self, role: str, layer: int, x: tuple[int, Tensor], tokens: Lin = T) -> tuple[int, Tensor]:
        if self.d.architecture == "gpt":
            return self.layer_norm(role, layer, x, tokens)
        return self.rms_norm(role, layer, x, tokens)

    def rope(self, role: str, layer: int, x: tuple[int, Tensor], n_heads: int) -> tuple[int, Tensor]:
        """HF rotate_half: x*cos + cat(-x2, x1)*sin, in the op order msprof-analyze's RotaryMul pattern lists."""
        d = self.d.head_dim
        full = x[1]
        half = Tensor((B, Lin(one=n_heads), SQ, Lin(one=d // 2)), self.dt, full.nbytes * 0.5)
        mul_cos = self.vec("Mul", role, layer, [x], full)
        s1 = self.vec("Slice", role, layer, [x], half)
        neg = self.vec("Neg", role, layer, [self.out(s1)], half)
        s2 = self.vec("Slice", role, layer, [x], half)
        cat = self.vec("ConcatD", role, layer, [self.out(neg), self.out(s2)], full)
        mul_sin = self.vec("Mul", role, layer, [self.out(cat)], full)
        add = self.vec("Add", role, layer, [self.out(mul_cos), self.out(mul_sin)], full)
        return self.out(add)

    def attention(self, layer: int, x: tuple[int, Tensor]) -> tuple[int, Tensor]:
        d = self.d
        hd, nh, nkv = d.head_dim, d.heads_local, d.kv_local  # this rank's heads
        q = self.matmul("attn.q", layer, x, d.hidden, d.heads * hd)
        if d.qk_norm:  # Qwen3Attention: q_norm on the query heads, issued before the next projection
            q = self.rms_norm("attn.q_norm", layer, self.out(q), tokens=T * nh, width=hd)[0]
        k = self.matmul("attn.k", layer, x, d.hidden, d.kv_heads * hd)
        if d.qk_norm:
            k = self.rms_norm("attn.k_norm", layer, self.out(k), tokens=T * nkv, width=hd)[0]
        v = self.matmul("attn.v", layer, x, d.hidden, d.kv_heads * hd)
        q_heads = (q, self.heads(nh, SQ, T * (nh * hd * self.ds)))
        k_heads = (k, self.heads(nkv, SQ, T * (nkv * hd * self.ds)))
        if d.architecture == "llama":
            q_r = self.rope("attn.rope", layer, q_heads, nh)
            k_r = self.rope("attn.rope", layer, k_heads, nkv)
        else:  # GPT: learned absolute positions, no rotary embedding
            q_r, k_r = q_heads, k_heads
        # fixed-size KV cache updated in place (the TorchAir "fixed KV cache" step); the cache is a parameter
        # eager attention reads the cache over its attended length L (the KV length, or a fixed cache's size)
        # an int8 cache holds one byte per element (model.kv_cache_dtype: int8)
        cs, cdt = (1, INT8) if d.kv_int8 else (self.ds, self.dt)
        cache_bytes = Lin(BL=nkv * hd * cs)
        # K and V caches are distinct tensors of one shape (params are told apart by identity, not value)
        k_cache = Tensor((B, Lin(one=nkv), KVL, Lin(one=hd)), cdt, cache_bytes)
        v_cache = Tensor((B, Lin(one=nkv), KVL, Lin(one=hd)), cdt, cache_bytes)
        written = Tensor(k_cache.shape, cdt, ZERO)  # in place: only the new rows are written (writes_params)
        new = T * (nkv * hd * cs)
        sources = [k_r, (v, k_heads[1])]
        if d.kv_int8:  # the new K and V rows quantised first (one AscendQuant each), then written
            rows = Tensor(k_heads[1].shape, INT8, new)
            sources = [self.out(self.vec("AscendQuant", "attn.kv_quant", layer, [src], rows)) for src in sources]
        for src in sources:
            w = Work("vector", vec_bytes=new, kind="ScatterUpdate")
            self.op("ScatterUpdate", "attn.kv_write", layer, [src], written, w, params=[], writes_params=new)
        # eager attention reads an int8 cache through a dequantised copy of it (AscendAntiQuant per K and V);
        # a fused attention kernel reads the int8 cache itself (the flash_attention rule absorbs the copies)
        plain: list[tuple[int, Tensor]] = []
        if d.kv_int8:
            full = Tensor(k_cache.shape, self.dt, Lin(BL=nkv * hd * self.ds))
            for cache in (k_cache, v_cache):
                work = Work("vector", vec_bytes=full.nbytes, stream_bytes=cache_bytes, kind="AscendAntiQuant")
                plain.append(self.out(self.op("AscendAntiQuant", "attn.kv_dequant", layer, [], full, work, [cache])))
        k_all: tuple[int, Tensor] = plain[0] if plain else (-1, k_cache)
        v_all: tuple[int, Tensor] = plain[1] if plain else (-1, v_cache)
        if nkv != nh:  # HF repeat_kv materialises the GQA groups
            rep = Tensor((B, Lin(one=nh), KVL, Lin(one=hd)), self.dt, Lin(BL=nh * hd * self.ds))
            copies = []
            for source, cache in ((k_all, k_cache), (v_all, v_cache)):
                if plain:  # copies of the dequantised cache
                    work = Work("vector", vec_bytes=rep.nbytes, kind="BroadcastTo")
                    copies.append(self.op("BroadcastTo", "attn.repeat_kv", layer, [source], rep, work))
                else:
                    work = Work("vector", vec_bytes=rep.nbytes, stream_bytes=cache_bytes, kind="BroadcastTo")
                    copies.append(self.op("BroadcastTo", "attn.repeat_kv", layer, [], rep, work, [cache]))
            k_all, v_all = self.out(copies[0]), self.out(copies[1])
        gqa = nkv != nh or bool(plain)  # the products read activations (copies), not the cache itself
        scores = Tensor((B, Lin(one=nh), SQ, KVL), self.dt, Lin(TL=nh * self.ds))
        scores32 = Tensor((B, Lin(one=nh), SQ, KVL), FP32, Lin(TL=nh * 4))
        kv_stream = Lin(BL=nh * hd * self.ds) if nkv != nh else cache_bytes
        bmm = Work(
            "cube",
            mm=(Lin(B=nh), SQ, Lin(one=hd), KVL),
            stream_bytes=ZERO if gqa else kv_stream,
            kind="BatchMatMulV2",
        )
        qk_in = [q_r] + ([k_all] if gqa else [])
        s = self.op("BatchMatMulV2", "attn.score", layer, qk_in, scores, bmm, params=[] if gqa else [k_cache])
        sc = self.vec("Mul", "attn.score", layer, [self.out(s)], scores)
        mask = Tensor((B, ONE, SQ, KVL), self.dt, Lin(TL=self.ds))
        mk = self.vec("Add", "attn.score", layer, [self.out(sc), (-1, mask)], scores)
        c1 = self.vec("Cast", "attn.softmax", layer, [self.out(mk)], scores32)
        sm = self.vec("SoftmaxV2", "attn.softmax", layer, [self.out(c1)], scores32, passes=3.0)
        c2 = self.vec("Cast", "attn.softmax", layer, [self.out(sm)], scores)
        ctx = Tensor((B, Lin(one=nh), SQ, Lin(one=hd)), self.dt, T * (nh * hd * self.ds))
        bmm2 = Work(
            "cube",
            mm=(Lin(B=nh), SQ, KVL, Lin(one=hd)),
            stream_bytes=ZERO if gqa else kv_stream,
            kind="BatchMatMulV2",
        )
        pv_in = [self.out(c2)] + ([v_all] if gqa else [])
        o = self.op("BatchMatMulV2", "attn.context", layer, pv_in, ctx, bmm2, params=[] if gqa else [v_cache])
        tr = self.vec("Transpose", "attn.context", layer, [self.out(o)], self.act(nh * hd))
        return self.out(self.matmul("attn.o", layer, self.out(tr), d.heads * hd, d.hidden))

    def mlp(self, layer: int, x: tuple[int, Tensor]) -> tuple[int, Tensor]:
        d = self.d
        if d.experts:
            return self.moe(layer, x)
        if d.architecture == "gpt":
            up = self.matmul("ffn.up", layer, x, d.hidden, d.inter)
            act = self.vec("Gelu", "ffn.act", layer, [self.out(up)], self.act(d.inter_local), passes=2.0)
            return self.out(self.matmul("ffn.down", layer, self.out(act), d.inter, d.hidden))
        gate = self.matmul("ffn.gate", layer, x, d.hidden, d.inter)
        act = self.vec("Swish", "ffn.act", layer, [self.out(gate)], self.act(d.inter_local), passes=2.0)
        up = self.matmul("ffn.up", layer, x, d.hidden, d.inter)
        mul = self.vec("Mul", "ffn.act", layer, [self.out(act), self.out(up)], self.act(d.inter_local))
        return self.out(self.matmul("ffn.down", layer, self.out(mul), d.inter, d.hidden))

    def moe(self, layer: int, x: tuple[int, Tensor]) -> tuple[int, Tensor]:
        """Hugging Face's MixtralSparseMoeBlock in eager mode: the router's logits, softmax in fp32, top-k,
        renormalised, a one-hot expert mask; then for every expert, whether any token reached it or not, the
        positions routed to it (NonZero), their rows, the expert's SwiGLU FFN, the routing weights and an index_add
        into the output. Routing is taken as balanced (graph/expr.py: active_experts): each expert gets T k / E
        tokens and streams its weights in the steps it gets any, with probability A / E."""
        d = self.d
        n_exp, k, h = d.experts, d.experts_per_token, d.hidden
        logits = self.matmul("moe.router", layer, x, h, n_exp)
        probs = self.act(n_exp, FP32)
        c = self.vec("Cast", "moe.gating", layer, [self.out(logits)], probs)
        sm = self.vec("SoftmaxV2", "moe.gating", layer, [self.out(c)], probs, passes=3.0)
        top = self.vec("TopKV2", "moe.gating", layer, [self.out(sm)], self.act(k, FP32))
        chosen = Tensor((B, SQ, Lin(one=k)), "DT_INT64", T * (k * 8))
        self.nodes[top].outputs.append(chosen)
        total = self.vec("ReduceSum", "moe.gating", layer, [self.out(top)], self.act(1, FP32))
        norm = self.vec("RealDiv", "moe.gating", layer, [self.out(top), self.out(total)], self.act(k, FP32))
        weights = self.out(self.vec("Cast", "moe.gating", layer, [self.out(norm)], self.act(k)))
        mask = Tensor((Lin(one=n_exp), Lin(one=k), T), "DT_INT64", T * (n_exp * k * 8))
        hot = self.vec("OneHot", "moe.mask", layer, [(top, chosen)], mask)
        per_expert = self.out(self.vec("Transpose", "moe.mask", layer, [self.out(hot)], mask))
        acc = self.out(self.vec("ZerosLike", "moe.combine", layer, [], self.act(h)))
        routed = T * (k / n_exp)  # tokens per expert, balanced
        for e in range(n_exp):
            last = e == n_exp - 1
            pos = Tensor((routed, Lin(one=2)), "DT_INT64", routed * 16)
            work = Work("vector", vec_bytes=T * (k * 8) + routed * 16, kind="NonZero")  # its slice of the mask
            nz = self.out(self.op("NonZero", "moe.dispatch", layer, [per_expert], pos, work))
            rows = self.act(h, tokens=routed)
            work = Work("vector", vec_bytes=rows.nbytes * 2, kind="GatherV2")
            picked = self.out(self.op("GatherV2", "moe.dispatch", layer, [x, nz], rows, work))
            gate = self.expert_matmul("moe.gate", layer, picked, h, d.expert_inter, routed)
            width = self.d.expert_inter_local
            act = self.vec("Swish", "moe.act", layer, [self.out(gate)], self.act(width, tokens=routed), passes=2.0)
            up = self.expert_matmul("moe.up", layer, picked, h, d.expert_inter, routed)
            mul = self.vec("Mul", "moe.act", layer, [self.out(act), self.out(up)], self.act(width, tokens=routed))
            down = self.expert_matmul("moe.down", layer, self.out(mul), d.expert_inter, h, routed)
            w = self.vec("Index", "moe.combine", layer, [weights, nz], self.act(1, tokens=routed))
            scaled = self.vec("Mul", "moe.combine", layer, [self.out(down), self.out(w)], rows)
            # index_add_ in place: reads and writes only the routed rows of the output
            work = Work("vector", vec_bytes=rows.nbytes * 3, kind="InplaceIndexAdd")
            role = "moe.output" if last else "moe.combine"
            added = self.op("InplaceIndexAdd", role, layer, [acc, self.out(scaled), nz], self.act(h), work)
            acc = self.out(added)
        return acc

    def expert_matmul(self, role: str, layer: int, x: tuple[int, Tensor], k: int, n: int, tokens: Lin) -> int:
        """One expert's linear: `tokens` rows (T k / E), its weight held whole but streamed only in the steps a
        token reaches the expert (A / E of them)."""
        k, n = self.shard.linear(self.d, role, k, n)
        w = self.weight(k, n)
        stream = Lin(A=k * n * self.ds / (self.d.experts * EXPERT_SCALE))
        work = Work("cube", mm=(ONE, tokens, Lin(one=k), Lin(one=n)), stream_bytes=stream, kind="MatMulV2")
        return self.op("MatMulV2", role, layer, [x], self.act(n, tokens=tokens), work, params=[w])

    def gather(self, ids: Tensor, table: Tensor) -> tuple[int, Tensor]:
        """Embedding lookup: one row of `table` per token."""
        row = T * (self.d.hidden * self.ds)
        work = Work("vector", vec_bytes=row, stream_bytes=row, kind="GatherV2")
        return self.out(self.op("GatherV2", "head.embed", -1, [(-1, ids)], self.act(self.d.hidden), work, [table]))

    def build(self) -> Graph:
        d = self.d
        h = d.hidden
        ids = Tensor((B, SQ), "DT_INT64", T * 8)
        rows = self.shard.embedding_rows(d, d.vocab)  # a vocab-parallel rank holds its share of the table
        table = Tensor((Lin(one=rows), Lin(one=h)), self.dt, Lin(one=rows * h * self.ds))
        x = self.gather(ids, table)
        if d.architecture == "llama":
            # HF LlamaRotaryEmbedding: inv_freq x positions -> cat -> cos, sin (once per step)
            half = Tensor((B, SQ, Lin(one=d.head_dim // 2)), FP32, T * (d.head_dim * 2))
            full = Tensor((B, SQ, Lin(one=d.head_dim)), FP32, T * (d.head_dim * 4))
            f = self.vec("Mul", "head.rope_table", -1, [(-1, ids)], half)
            cat = self.vec("ConcatD", "head.rope_table", -1, [self.out(f)], full)
            self.vec("Cos", "head.rope_table", -1, [self.out(cat)], full)
            self.vec("Sin", "head.rope_table", -1, [self.out(cat)], full)
        else:
            pos = Tensor((Lin(one=4096), Lin(one=h)), self.dt, Lin(one=4096 * h * self.ds))
            x = self.out(self.vec("Add", "head.embed", -1, [x, self.gather(ids, pos)], self.act(h)))
        r = self.rows
        for layer in range(d.layers):
            a_in = self.norm("attn.norm", layer, x, tokens=r)
            attn = self.attention(layer, a_in)
            h1 = self.out(self.vec("Add", "attn.residual", layer, [x, attn], self.act(h, tokens=r)))
            f_in = self.norm("ffn.norm", layer, h1, tokens=r)
            mlp = self.mlp(layer, f_in)
            x = self.out(self.vec("Add", "ffn.residual", layer, [h1, mlp], self.act(h, tokens=r)))
        # logits only for the last position of each sequence (HF num_logits_to_keep); with sequence parallelism each
        # rank slices its share and an AllGather joins them (parallel.yaml)
        kept = B * (1 / d.tp) if d.sp else B
        last = self.out(self.vec("Slice", "head.norm", -1, [x], self.act(h, tokens=kept)))
        normed = self.norm("head.norm", -1, last, tokens=B)
        logits = self.matmul("head.lm_head", -1, normed, h, d.vocab, tokens=B)
        lf = self.out(self.vec("Cast", "head.sample", -1, [self.out(logits)], self.act(d.vocab, FP32, tokens=B)))
        if d.sampling == "top_k_top_p":
            lf = self.random_sample(self.top_k_top_p(lf))
        self.vec("ArgMaxV2", "head.sample", -1, [lf], Tensor((B,), "DT_INT64", B * 8))
        return Graph(self.nodes)

    def top_k_top_p(self, logits: tuple[int, Tensor]) -> tuple[int, Tensor]:
        """vLLM's apply_top_k_top_p in PyTorch (vllm/v1/sample/ops/topk_topp_sampler.py; vllm-ascend falls back to
        it where npu_top_k_top_p does not run): sort each row, mask below the k-th largest, softmax, cumulative sum,
        mask beyond p, scatter back to vocabulary order. Every step is a pass over the [B, vocab] fp32 rows."""
        v = self.d.vocab
        row = self.act(v, FP32, tokens=B)
        mask = Tensor(row.shape, "DT_BOOL", B * v)
        # values and int64 indices out: one read and three row-widths written (a lower bound: a sort of a row
        # larger than the Unified Buffer passes over it more than once)
        srt = self.vec("Sort", "head.sample", -1, [logits], row, passes=4.0)
        idx = Tensor(row.shape, "DT_INT64", B * (v * 8))
        self.nodes[srt].outputs.append(idx)
        sv = self.out(srt)
        kth = self.vec("GatherElements", "head.sample", -1, [sv], Tensor((B, ONE), FP32, B * 4))
        lt = self.vec("Less", "head.sample", -1, [sv, self.out(kth)], mask)
        top_k = self.vec("MaskedFill", "head.sample", -1, [sv, self.out(lt)], row)
        probs = self.vec("SoftmaxV2", "head.sample", -1, [self.out(top_k)], row, passes=3.0)
        cum = self.vec("Cumsum", "head.sample", -1, [self.out(probs)], row)
        le = self.vec("LessEqual", "head.sample", -1, [self.out(cum)], mask)
        top_p = self.vec("MaskedFill", "head.sample", -1, [self.out(top_k), self.out(le)], row)
        back = self.vec("ScatterElements", "head.sample", -1, [self.out(top_p), (srt, idx)], row)
        return self.out(back)

    def random_sample(self, logits: tuple[int, Tensor]) -> tuple[int, Tensor]:
        """vLLM's random_sample: softmax, divided by exponential noise, argmax (the Gumbel-max draw). vllm-ascend
        draws the noise on a side stream ahead of time (AscendSampler's async exponential): it is an input here."""
        row = self.act(self.d.vocab, FP32, tokens=B)
        probs = self.vec("SoftmaxV2", "head.sample", -1, [logits], row, passes=3.0)
        return self.out(self.vec("RealDiv", "head.sample", -1, [self.out(probs), (-1, row)], row))


@lru_cache(maxsize=8)
def build_graph(dims: ModelDims) -> Graph:
    """The unfused eager graph of one step (prefill and decode share it; sizes depend on B, Sq, Skv).

    Cached per model: callers (the fusion passes) never mutate it, they build new node lists."""
    return GraphBuilder(dims).build()
