"""Collectives on a two-level network: the scale-up domain (NVLink/NVSwitch, or PCIe inside one server)
and the scale-out fabric (one NIC per GPU, rail-optimised, as in DGX/HGX clusters).

Rank placement follows Megatron-LM's default order (tensor fastest, then context, expert, data, pipeline):
a group is described by its ``size`` and the ``stride`` between consecutive members, so that
``stride · size`` consecutive ranks hold it.  Ranks fill scale-up domains of ``scaleup_gpus`` in order.

Times use the NCCL bus-bandwidth convention (nccl-tests ``doc/PERFORMANCE.md``):

* all-reduce      t = S · 2(n−1)/n / busbw
* reduce-scatter  t = S · (n−1)/n / busbw      (S = the full, gathered size)
* all-gather      t = S · (n−1)/n / busbw
* all-to-all      t = S · (n−1)/n / busbw

plus one latency α per collective.  The bus bandwidth of a group inside one domain is the scale-up link
rate times the generation's achieved fraction; a group that spans several domains with ``k`` members in
each is limited by ``min(scale-up, k · NIC)`` — k members of a domain use k NICs in parallel, which is
how a DGX A100 reaches 192 GB/s all-reduce bus bandwidth on 8 × 25 GB/s HDR (NVIDIA, nccl issue #812).
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def members_per_domain(stride: Array, size: Array, scaleup_gpus: Array) -> Array:
    """How many members of a group sit in one scale-up domain: clip(⌊D / stride⌋, 1, size)."""
    return np.clip(np.floor(scaleup_gpus / stride), 1.0, size)


def spans_domains(stride: Array, size: Array, scaleup_gpus: Array) -> Array:
    """True where the group needs the scale-out network (stride · size > D)."""
    return (stride * size > scaleup_gpus) & (size > 1)


def collective_busbw(
    stride: Array, size: Array, hw: dict[str, Array], allreduce: bool = False
) -> tuple[Array, Array]:
    """(bus bandwidth in bytes/s, latency in s) of a collective over the group.

    Inside a domain: scale-up link × ring efficiency (all-reduce may use in-switch reduction, NVLink
    SHARP on Hopper+, whose measured bus bandwidth exceeds the link rate: ``scaleup_allreduce_eff``).
    Across domains: min(scale-up, k · NIC · scale-out efficiency), k = members per domain.
    """
    up_eff = hw["scaleup_allreduce_eff"] if allreduce else hw["scaleup_ring_eff"]
    bw_up = hw["scaleup_bw"] * up_eff
    k = members_per_domain(stride, size, hw["scaleup_gpus"])
    bw_out = k * hw["scaleout_bw"] * hw["scaleout_eff"]
    across = spans_domains(stride, size, hw["scaleup_gpus"])
    busbw = np.where(across, np.minimum(bw_up, bw_out), bw_up)
    latency = np.where(across, hw["scaleout_latency_s"], hw["scaleup_latency_s"])
    return busbw, latency


def allreduce_time(nbytes: Array, stride: Array, size: Array, hw: dict[str, Array]) -> Array:
    """All-reduce of ``nbytes`` over ``size`` ranks: S·2(n−1)/n / busbw + α; zero for a group of one."""
    busbw, lat = collective_busbw(stride, size, hw, allreduce=True)
    return np.where(size > 1, nbytes * 2.0 * (size - 1.0) / size / busbw + lat, 0.0)


def reduce_scatter_time(nbytes: Array, stride: Array, size: Array, hw: dict[str, Array]) -> Array:
    """Reduce-scatter whose full (input) size is ``nbytes``: S·(n−1)/n / busbw + α."""
    busbw, lat = collective_busbw(stride, size, hw)
    return np.where(size > 1, nbytes * (size - 1.0) / size / busbw + lat, 0.0)


def allgather_time(nbytes: Array, stride: Array, size: Array, hw: dict[str, Array]) -> Array:
    """All-gather whose full (output) size is ``nbytes``: S·(n−1)/n / busbw + α."""
    return reduce_scatter_time(nbytes, stride, size, hw)


def alltoall_time(nbytes: Array, stride: Array, size: Array, hw: dict[str, Array]) -> Array:
    """All-to-all in which every rank sends ``nbytes`` in total (1/n of it to each peer).

    The part for peers inside the domain goes over scale-up links, the rest over the rank's own NIC; both
    proceed at once, so t = max(S·(k−1)/n / up, S·(n−k)/n / NIC) + α.
    """
    k = members_per_domain(stride, size, hw["scaleup_gpus"])
    up = hw["scaleup_bw"] * hw["scaleup_ring_eff"]
    out = hw["scaleout_bw"] * hw["scaleout_eff"]
    inter = np.maximum(size - k, 0.0)
    t_inter = np.where(inter > 0, nbytes * inter / size / out, 0.0)
    t = np.maximum(nbytes * (k - 1.0) / size / up, t_inter)
    lat = np.where(inter > 0, hw["scaleout_latency_s"], hw["scaleup_latency_s"])
    return np.where(size > 1, t + lat, 0.0)


def p2p_time(nbytes: Array, crosses_domain: Array, hw: dict[str, Array]) -> Array:
    """One point-to-point transfer between neighbours: S / link + α, on the NIC when it leaves the domain."""
    bw = np.where(
        crosses_domain,
        hw["scaleout_bw"] * hw["scaleout_eff"],
        hw["scaleup_bw"] * hw["scaleup_ring_eff"],
    )
    lat = np.where(crosses_domain, hw["scaleout_latency_s"], hw["scaleup_latency_s"])
    return nbytes / bw + lat
