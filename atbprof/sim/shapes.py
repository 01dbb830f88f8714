"""msprof shape strings ("1,1,4096;4096,4096") for graph nodes, per step, as dictionary-encoded columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.graph.expr import BASIS
from atbprof.graph.nodes import Node, Tensor

# everything but `one` and `B` changes between steps
_VARYING = np.array([0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=bool)


def _spec(tensors: list[Tensor]) -> tuple[tuple[tuple[float, ...], ...], ...]:
    return tuple(t.dims_key() for t in tensors)


class _Template:
    """A shape spec as a format string: constant dims inlined, step-dependent dims as `{}` fields."""

    fmt: str
    coef: np.ndarray

    @classmethod
    def for_batch(cls, spec: tuple[tuple[tuple[float, ...], ...], ...], batch: int) -> _Template:
        t = cls.__new__(cls)
        fields: list[tuple[float, ...]] = []
        tensors = []
        for dims in spec:
            parts = []
            for d in dims:
                if np.asarray(d)[_VARYING].any():
                    parts.append("{}")
                    fields.append(d)
                else:  # only `one` and `B` terms: constant for the run
                    parts.append(str(round(d[0] + d[1] * batch)))
            tensors.append(",".join(parts))
        t.fmt = ";".join(tensors)
        t.coef = np.array(fields, dtype=np.float64).reshape(len(fields), len(BASIS))
        return t

    def render(self, values: np.ndarray) -> list[str]:
        """Strings for each column of `values` (BASIS x steps)."""
        if not len(self.coef):
            return [self.fmt] * values.shape[1]
        dims = np.rint(self.coef @ values).astype(np.int64).T.tolist()
        return [self.fmt.format(*row) for row in dims]


class ShapeColumns:
    """Input/output shape and dtype strings of a phase graph; `column(...)` builds one batch's array."""

    def __init__(self, nodes: list[Node]) -> None:
        self.specs: dict[str, list[tuple[tuple[tuple[float, ...], ...], ...]]] = {"in": [], "out": []}
        self.index: dict[str, np.ndarray] = {}
        for kind in ("in", "out"):
            lookup: dict[tuple[tuple[tuple[float, ...], ...], ...], int] = {}
            idx = np.empty(len(nodes), dtype=np.int32)
            for i, n in enumerate(nodes):
                tensors = [e.tensor for e in n.inputs] + n.params if kind == "in" else n.outputs
                key = _spec(tensors)
                idx[i] = lookup.setdefault(key, len(lookup))
            self.specs[kind] = list(lookup)
            self.index[kind] = idx
        self.varies = {
            kind: np.array([any(np.asarray(d)[_VARYING].any() for dims in spec for d in dims) for spec in specs])
            for kind, specs in self.specs.items()
        }
        self._templates: dict[tuple[str, int], list[_Template]] = {}
        self.dtypes = {
            "in": [";".join([e.tensor.dtype for e in n.inputs] + [p.dtype for p in n.params]) for n in nodes],
            "out": [";".join(t.dtype for t in n.outputs) for n in nodes],
        }
        assert len(BASIS) == len(_VARYING)

    def column(self, kind: str, values: np.ndarray, n_steps: int) -> pa.DictionaryArray:
        """Shapes for rows laid out step-major (n_steps x nodes); `values` is (BASIS, n_steps)."""
        specs = self.specs[kind]
        varies = self.varies[kind]
        strings: list[str] = []
        offset = np.empty(len(specs), dtype=np.int64)
        batch = int(values[1, 0])
        templates = self._templates.setdefault((kind, batch), [_Template.for_batch(spec, batch) for spec in specs])
        for s, tmpl in enumerate(templates):
            offset[s] = len(strings)
            strings.extend(tmpl.render(values if varies[s] else values[:, :1]))
        idx = self.index[kind]
        step_off = np.arange(n_steps)[:, None] * varies[idx][None, :]
        indices = (offset[idx][None, :] + step_off).ravel().astype(np.int32)
        # unique dictionary values: Parquet's dictionary pages are only byte-reproducible without duplicates
        first: dict[str, int] = {}
        remap = np.array([first.setdefault(v, len(first)) for v in strings], dtype=np.int32)
        return pa.DictionaryArray.from_arrays(pa.array(remap[indices]), pa.array(list(first), pa.string()))

    def dtype_column(self, kind: str, n_steps: int) -> pa.DictionaryArray:
        values = self.dtypes[kind]
        uniq = sorted(set(values))
        pos = {v: i for i, v in enumerate(uniq)}
        idx = np.tile(np.array([pos[v] for v in values], dtype=np.int32), n_steps)
        return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(uniq, pa.string()))
