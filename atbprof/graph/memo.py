"""Results remembered per graph node sequence, by node identity.

Fused graphs are remembered and shared between runs (fusion/passes.py), so the runs of a sweep keep building
their per-node arrays from the same node objects; what is derived from the nodes alone (signatures, working-set
coefficients, per-node columns) is computed once. The key is the nodes' ids, and the entry keeps the nodes
themselves, so an id can never be another node's while its entry lives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from atbprof.graph.nodes import Node

T = TypeVar("T")


class NodeMemo(Generic[T]):
    def __init__(self, build: Callable[[Sequence[Node]], T], limit: int = 64) -> None:
        self._build = build
        self._limit = limit
        self._entries: dict[tuple[int, ...], tuple[tuple[Node, ...], T]] = {}
        self._lock = threading.Lock()

    def __call__(self, nodes: Sequence[Node]) -> T:
        key = tuple(map(id, nodes))
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None:
            return hit[1]
        value = self._build(nodes)
        with self._lock:
            if len(self._entries) >= self._limit:
                self._entries.clear()
            self._entries[key] = (tuple(nodes), value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
