"""HCCL collectives as alpha-beta costs over the device's topology (device spec `topology`).

A group of `p` consecutive ranks is placed on as few meshes and servers as it fits; HCCL's algorithm then follows
the placement (HCCL docs: the intra-server algorithm is picked by topology, the inter-server one by server count):

- inside one full mesh (910B's 8-card HCCS mesh, a 910A 4-card group): **mesh** - every step sends to all peers at
  once, one link each; AllReduce = ReduceScatter + AllGather = 2 steps of n/p per link;
- across the meshes of one server (910A 8 cards): **ring** through all cards, each step as slow as the slowest
  link it crosses (PCIe between the groups); AllReduce = 2(p-1) steps of n/p;
- across servers: hierarchical - the intra-server part on the whole tensor, the inter-server part (ring, or
  recursive halving-doubling for a power-of-two server count) on each card's 1/p0 lane of it.

Each step costs `latency + bytes / (bandwidth x efficiency)`; a collective adds the device's static cost of a
communication task. Sizes: AllReduce / ReduceScatter / AllToAll take their input bytes, AllGather its output bytes,
Send / Receive / Broadcast the message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atbprof.device.spec import Link, Topology
from atbprof.errors import ConfigError

COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "Send", "Receive")
OP_TYPES = {
    "AllReduce": "hcom_allReduce_",
    "AllGather": "hcom_allGather_",
    "ReduceScatter": "hcom_reduceScatter_",
    "AllToAll": "hcom_alltoall_",
    "Broadcast": "hcom_broadcast_",
    "Send": "hcom_send_",
    "Receive": "hcom_receive_",
}
"""msprof / torch_npu op types of HCCL tasks (ascend_profiling_formats.md section 3)."""


@dataclass(frozen=True)
class Level:
    algorithm: str  # mesh | ring | halving_doubling
    parties: int
    link: Link


@dataclass(frozen=True)
class CollectiveGroup:
    """`size` consecutive ranks on the topology, as HCCL's levels see them (level 0 first)."""

    size: int
    levels: tuple[Level, ...]

    @property
    def transport(self) -> str:
        """The transport of the slowest level (what msprof's bandwidth table leads with)."""
        if not self.levels:
            return ""
        return min(self.levels, key=lambda lv: lv.link.bandwidth_gbps).link.transport


NO_GROUP = CollectiveGroup(1, ())


@dataclass(frozen=True)
class CommGroups:
    """What one rank's communication runs over: its tensor-parallel group for the collectives, and its links to
    the next and the previous pipeline stage for Send and Receive."""

    tp: CollectiveGroup
    send: CollectiveGroup = NO_GROUP
    receive: CollectiveGroup = NO_GROUP

    def of(self, kind: str) -> CollectiveGroup:
        return self.send if kind == "Send" else self.receive if kind == "Receive" else self.tp


def require_topology(topology: Topology | None, devices: int, device: str) -> Topology | None:
    """The topology, which a deployment of more than one device needs (ConfigError without it)."""
    if devices > 1 and topology is None:
        raise ConfigError(
            f"parallel: device {device} has no `topology` in its spec, so it can not be used with {devices} ranks; "
            "add a topology section (see atbprof/data/devices/910B2.yaml) or use parallel tp/pp/dp 1"
        )
    return topology


def place_group(topology: Topology | None, size: int, device: str) -> CollectiveGroup:
    """Where a group of `size` consecutive ranks sits and which algorithm HCCL runs at each level."""
    if size == 1:
        return CollectiveGroup(1, ())
    t = require_topology(topology, size, device)
    assert t is not None  # size > 1: require_topology raised otherwise
    in_server = min(size, t.server_devices)
    if in_server <= t.mesh_devices:
        level0 = Level("mesh", in_server, t.mesh)
    else:
        slow = t.between_meshes or t.mesh
        level0 = Level("ring", in_server, slow if slow.bandwidth_gbps < t.mesh.bandwidth_gbps else t.mesh)
    if size <= t.server_devices:
        return CollectiveGroup(size, (level0,))
    servers = -(-size // t.server_devices)
    algo = t.server_algorithm
    if algo == "auto":  # HCCL_ALGO docs: ring for a non-power-of-2 server count, else halving-doubling
        algo = "halving_doubling" if servers & (servers - 1) == 0 else "ring"
    return CollectiveGroup(size, (level0, Level(algo, servers, t.between_servers)))


def place_pair(topology: Topology | None, a: int, b: int, device: str) -> CollectiveGroup:
    """The point-to-point link between global ranks `a` and `b` (a pipeline stage's Send to the next): a direct
    link inside a full mesh, else the link between meshes of a server, else the one between servers."""
    t = require_topology(topology, 2, device)
    assert t is not None
    if a // t.server_devices != b // t.server_devices:
        link = t.between_servers
    elif a // t.mesh_devices != b // t.mesh_devices:
        link = t.between_meshes or t.mesh
    else:
        link = t.mesh
    return CollectiveGroup(2, (Level("p2p", 2, link),))


def _step(link: Link, nbytes: np.ndarray) -> np.ndarray:
    """ns of one algorithm step moving `nbytes` over one link."""
    return link.latency_us * 1e3 + nbytes / (link.bandwidth_gbps * link.efficiency)


def _level_ns(kind: str, lv: Level, n: np.ndarray) -> np.ndarray:
    p = lv.parties
    if p == 1:
        return np.zeros_like(n)
    if kind in ("Send", "Receive", "Broadcast"):
        return _step(lv.link, n)
    phases = 2 if kind == "AllReduce" else 1  # AllReduce = ReduceScatter + AllGather
    if lv.algorithm == "mesh":
        return phases * _step(lv.link, n / p)
    if lv.algorithm == "ring":
        return phases * (p - 1) * _step(lv.link, n / p)
    # recursive halving-doubling: log2(p) steps of n/2, n/4, ... per phase
    rounds = int(np.ceil(np.log2(p)))
    return phases * (
        rounds * lv.link.latency_us * 1e3 + (p - 1) / p * n / (lv.link.bandwidth_gbps * lv.link.efficiency)
    )


def collective_ns(kind: str, group: CollectiveGroup, nbytes: np.ndarray) -> np.ndarray:
    """Transfer time in ns of one collective over `group` (static device cost not included)."""
    n = np.asarray(nbytes, dtype=np.float64)
    if not group.levels:
        return np.zeros_like(n)
    total = _level_ns(kind, group.levels[0], n)
    if len(group.levels) > 1:  # hierarchical: the inter-server level moves each card's lane of the tensor
        lane = n if kind in ("Send", "Receive", "Broadcast", "AllToAll") else n / group.levels[0].parties
        total = total + _level_ns(kind, group.levels[1], lane)
    return total


def transit_bytes(kind: str, group: CollectiveGroup, nbytes: np.ndarray) -> np.ndarray:
    """Bytes one rank sends over its links (msprof's Transit Size): (p-1)/p of the tensor per phase."""
    n = np.asarray(nbytes, dtype=np.float64)
    p = group.size
    if p == 1:
        return np.zeros_like(n)
    if kind in ("Send", "Receive", "Broadcast"):
        return n
    return (2 if kind == "AllReduce" else 1) * (p - 1) / p * n
