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

plus one latency α per collective.  The bus bandwidth of a group inside one domain is the achieved
scale-up rate; a group spanning several domains with ``k`` members in each is limited by
``min(scale-up, k · NIC)`` — k members of a domain drive k NICs in parallel, which is how a DGX A100
reaches 192 GB/s all-reduce bus bandwidth on 8 × 25 GB/s HDR (NVIDIA, nccl issue #812).

Hardware columns are *achieved* rates (link rate × the generation's measured efficiency, see
:func:`dse.hardware.catalog.achieved`).  Masks are float 0/1 arrays so that selection is arithmetic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dse.cost import constants as K

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)


class GroupLinks(NamedTuple):
    """Achieved bus bandwidths (bytes/s) and latency (s) of one communication group."""

    ring_bw: Array  #: reduce-scatter, all-gather, send/recv
    allreduce_bw: Array  #: all-reduce (may use in-switch reduction inside a domain)
    latency: Array
    across: Array  #: 1.0 where the group spans scale-up domains


def members_per_domain(stride: Array, size: Array, scaleup_gpus: Array) -> Array:
    """How many members of a group sit in one scale-up domain: clip(⌊D / stride⌋, 1, size)."""
    return np.minimum(np.maximum(np.floor(scaleup_gpus / stride), 1.0), size)


def spans_domains(stride: Array, size: Array, scaleup_gpus: Array) -> Array:
    """1.0 where the group needs the scale-out network (stride · size > D and more than one member)."""
    return ((stride * size > scaleup_gpus) & (size > 1)).astype(stride.dtype)


def group_links(stride: Array, size: Array, hw: dict[str, Array]) -> GroupLinks:
    """Bus bandwidth of a group: the scale-up rate inside a domain, else min(scale-up, k · NIC)."""
    across = spans_domains(stride, size, hw["scaleup_gpus"])
    nics = members_per_domain(stride, size, hw["scaleup_gpus"]) * hw["scaleout_bw"]
    ring = hw["scaleup_ring_bw"] - across * np.maximum(hw["scaleup_ring_bw"] - nics, 0.0)
    allreduce = hw["scaleup_allreduce_bw"] - across * np.maximum(hw["scaleup_allreduce_bw"] - nics, 0.0)
    return GroupLinks(ring, allreduce, link_latency(across, hw), across)


def engine_tp_links(size: Array, hw: dict[str, Array]) -> GroupLinks:
    """The tensor-parallel group of an inference engine: inside a scale-up domain its all-reduce runs the engine's
    own kernels (TensorRT-LLM's, vLLM's and SGLang's custom all-reduce) at the message sizes of its iterations
    (tens of KB to tens of MB), which reach a lower bus bandwidth than NCCL's large-message (NVLink SHARP) rate:
    ``infer_allreduce_bw`` and ``infer_allreduce_latency_s``, fitted per generation on measured kernel tables
    (dse/hardware/efficiency.csv).  A group that spans domains keeps :func:`group_links`' network bound."""
    links = group_links(np.ones_like(size), size, hw)
    inside = 1.0 - links.across
    allreduce = links.allreduce_bw + inside * (hw["infer_allreduce_bw"] - links.allreduce_bw)
    latency = links.latency + inside * (hw["infer_allreduce_latency_s"] - links.latency)
    return GroupLinks(links.ring_bw, allreduce, latency, links.across)


def engine_ep_links(size: Array, hw: dict[str, Array]) -> GroupLinks:
    """The expert-parallel group of an inference engine that exchanges its MoE tokens by all-gather and
    reduce-scatter (TensorRT-LLM's attention DP, :func:`dse.cost.serving.expert_parallel_terms`): inside a scale-up
    domain they run NCCL's ring kernels at the message sizes of an iteration, ``infer_allgather_bw`` and
    ``infer_allgather_latency_s``, fitted per generation on measured NCCL tables (dse/hardware/efficiency.csv); a
    group that spans domains keeps :func:`group_links`' network bound (at least 1 B/s, as :func:`two_link_time`:
    a system without a NIC is slow across nodes, not undefined)."""
    links = group_links(np.ones_like(size), size, hw)
    inside = 1.0 - links.across
    ring = np.maximum(links.ring_bw + inside * (hw["infer_allgather_bw"] - links.ring_bw), 1.0)
    latency = links.latency + inside * (hw["infer_allgather_latency_s"] - links.latency)
    return GroupLinks(ring, links.allreduce_bw, latency, links.across)


def link_latency(crosses_domain: Array, hw: dict[str, Array]) -> Array:
    """α of a transfer: the scale-up link's, or the scale-out network's where it leaves the domain
    (``crosses_domain`` a 0/1 mask or boolean)."""
    return hw["scaleup_latency_s"] + crosses_domain * (hw["scaleout_latency_s"] - hw["scaleup_latency_s"])


def two_link_time(local_bytes: Array, remote_bytes: Array, remote: Array, size: Array,
                  hw: dict[str, Array]) -> Array:
    """A rank's exchange with the peers of its group: ``local_bytes`` over the scale-up links and
    ``remote_bytes`` over its NIC at once, t = max(local / up, remote / NIC) + α, α the network's where it has
    ``remote`` peers; zero for a group of one.  A GPU without a NIC (0 B/s) only fails where it has remote
    peers; 1 B/s keeps 0/0 out of the rest."""
    t_local = local_bytes / hw["scaleup_ring_bw"]
    t_remote = remote_bytes / np.maximum(hw["scaleout_bw"], 1.0)
    return (size > 1) * (np.maximum(t_local, t_remote) + link_latency(remote > 0, hw))


def allreduce_terms(size: Array, links: GroupLinks) -> tuple[Array, Array]:
    """(seconds per byte, α) of an all-reduce over ``size`` ranks, 2(n−1)/n / busbw and α, for a group of more
    than one (:func:`allreduce_time` puts them together; the serving iteration keeps them apart)."""
    return 2.0 * (size - 1.0) / size / links.allreduce_bw, links.latency


def allreduce_time(nbytes: Array, size: Array, links: GroupLinks) -> Array:
    """All-reduce of ``nbytes`` over ``size`` ranks: S·2(n−1)/n / busbw + α; zero for a group of one."""
    per_byte, latency = allreduce_terms(size, links)
    return (size > 1) * (nbytes * per_byte + latency)


def reduce_scatter_time(nbytes: Array, size: Array, links: GroupLinks) -> Array:
    """Reduce-scatter whose full (input) size is ``nbytes``: S·(n−1)/n / busbw + α."""
    return (size > 1) * (nbytes * (size - 1.0) / size / links.ring_bw + links.latency)


def allgather_time(nbytes: Array, size: Array, links: GroupLinks) -> Array:
    """All-gather whose full (output) size is ``nbytes``: S·(n−1)/n / busbw + α."""
    return reduce_scatter_time(nbytes, size, links)


def alltoall_time(nbytes: Array, stride: Array, size: Array, hw: dict[str, Array]) -> Array:
    """All-to-all in which every rank sends ``nbytes`` in total (1/n of it to each peer).

    The part for peers inside the domain goes over scale-up links, the rest over the rank's own NIC; both
    proceed at once, so t = max(S·(k−1)/n / up, S·(n−k)/n / NIC) + α.
    """
    k = members_per_domain(stride, size, hw["scaleup_gpus"])
    remote = np.maximum(size - k, 0.0)
    return two_link_time(nbytes * (k - 1.0) / size, nbytes * remote / size, remote, size, hw)


def expected_distinct_holders(experts: Array, top_k: Array, holders: Array) -> Array:
    """Expected number of distinct holders (GPUs, or nodes) among a token's ``top_k`` experts, with the E experts
    split evenly over ``holders`` and the k experts drawn uniformly without replacement (routing forced to balance
    with random logits, Megatron-core's ``moe_router_force_load_balancing``):

        H · (1 − C(E − E/H, k) / C(E, k)),   C(E − m, k) / C(E, k) = Π_{i<k} (E − m − i) / (E − i)

    (each holder is missed when all k experts fall among the other E − E/H).  Without replacement because top-k
    picks k different experts; the with-replacement form H·(1 − (1 − 1/H)^k) over-counts by ~1 % at E = 128,
    k = 8.  Group- or node-limited routing (DeepSeek-V3 §2.1.2: at most 4 nodes) is not modelled."""
    e = np.maximum(experts, 1.0)
    m = e / np.maximum(holders, 1.0)
    miss = np.ones_like(m * top_k)  # the inputs' float dtype (the kernel runs in float32)
    for i in range(int(np.max(top_k))):  # over a token's routed copies (at most top_k), not over configurations
        miss = miss * np.where(i < top_k, np.maximum(e - m - i, 0.0) / np.maximum(e - i, 1.0), 1.0)
    return holders * (1.0 - miss)


def deepep_dispatch_time(token_bytes: Array, experts: Array, top_k: Array, stride: Array, size: Array,
                         hw: dict[str, Array]) -> Array:
    """One expert-parallel dispatch (or combine) by DeepEP's normal kernels, each rank sending ``token_bytes`` of
    tokens (one copy of each, before routing).

    A token crosses the network at most once per destination node, to the GPU of the same in-node index, which
    forwards it over NVLink to the GPUs holding its experts (DeepSeek-V3 technical report, arXiv 2412.19437
    §3.2.2; github deepseek-ai/DeepEP docs/legacy.md "forwarding data from NVLink domain to RDMA domain";
    Megatron-LM megatron/core/transformer/moe/README.md @d98e8a64dd: DeepEP "removes redundant tokens during
    cross-node communication").  The combine reverses it (reduce in the node, send once per node).  With the
    ``size`` ranks in N = size / k nodes of k members (:func:`members_per_domain`) and balanced routing:

        NIC    copies per token = (N − 1)/N · H(E, top_k, N)       (distinct remote nodes)
        NVLink copies per token = (k − 1)/k · H(E, top_k, size)    (distinct GPUs not reached directly)

    with H = :func:`expected_distinct_holders`; both links run at once (one fused kernel), so
    t = max(S·NVLink / up, S·NIC / NIC rate) + α, the form of :func:`alltoall_time`, which sends all top_k copies.
    """
    k = members_per_domain(stride, size, hw["scaleup_gpus"])
    nodes = np.maximum(size / k, 1.0)
    remote_copies = (nodes - 1.0) / nodes * expected_distinct_holders(experts, top_k, nodes)
    local_copies = (k - 1.0) / k * expected_distinct_holders(experts, top_k, size)
    return two_link_time(token_bytes * local_copies, token_bytes * remote_copies, np.maximum(size - k, 0.0), size,
                         hw)


def p2p_link(crosses_domain: Array, hw: dict[str, Array]) -> tuple[Array, Array]:
    """(bytes/s, α) of a point-to-point link between neighbours: the scale-up link, or the rank's NIC when the
    transfer leaves the domain (``crosses_domain`` is a float 0/1 mask)."""
    bw = hw["scaleup_ring_bw"] + crosses_domain * (hw["scaleout_bw"] - hw["scaleup_ring_bw"])
    return bw, link_latency(crosses_domain, hw)


def p2p_time(nbytes: Array, crosses_domain: Array, hw: dict[str, Array]) -> Array:
    """One point-to-point transfer between neighbours: S / link + α (:func:`p2p_link`)."""
    bw, latency = p2p_link(crosses_domain, hw)
    return nbytes / bw + latency


def ring_latency(stride: Array, size: Array, scaleup_gpus: Array) -> Array:
    """Start-up time of one ring collective (all-gather / reduce-scatter) over ``size`` ranks: NCCL's tuning
    model, base + one hop latency per ring step, the steps inside a scale-up domain at the NVLink hop and the
    steps between domains at the network hop (``baseLat`` and ``hwLat`` of Ring/Simple in NCCL 2.x
    ``src/graph/tuning.h``: 8.4 µs, 3.4 µs, 9.6 µs; constants NCCL_*).  It grows with the group, unlike the one
    α of :class:`GroupLinks` (a tree all-reduce's): what thousands of per-parameter gathers pay at scale."""
    domains = np.maximum(np.ceil(size / members_per_domain(stride, size, scaleup_gpus)), 1.0)
    steps = np.maximum(size - 1.0, 0.0)
    inter = np.minimum(domains - 1.0, steps)
    return (size > 1) * (K.NCCL_RING_BASE_LATENCY_S + (steps - inter) * K.NCCL_RING_HOP_SCALEUP_S
                         + inter * K.NCCL_RING_HOP_SCALEOUT_S)

