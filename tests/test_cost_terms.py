"""Each cost term against the equation of the paper it comes from (values derived from the papers, not
from this code's output)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.cost import memory, network, pipeline, transformer
from dse.cost.compute import gemm_flops, roofline_time
from dse.cost.select import divides, pick


def _close(a, b, rel=1e-12):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rel)


# ---- Korthikanti et al. 2022, Table 2 (activation bytes per layer) -----------------------------------------
S, B_, H, A, T_ = 2048.0, 4.0, 6144.0, 64.0, 8.0  # the 22B model of Table 3: s, b, h, a, t


def _act(sp, standard, selective, full, tp=T_):
    return memory.activation_bytes_per_layer(
        tokens=B_ * S, micro_batch=B_, seq_len=S, hidden=H, heads=A, kv_width=H, ffn_hidden=4 * H, mlp=0,
        top_k=1.0, tp=tp, sp=sp, standard_attention=standard, selective=selective, full=full,
        gemm_input_bytes=2.0)


def test_activation_memory_tensor_parallel():
    sbh = S * B_ * H
    _close(_act(0, 1, 0, 0), sbh * (10 + 24 / T_ + 5 * A * S / (H * T_)))


def test_activation_memory_sequence_parallel():
    sbh = S * B_ * H
    _close(_act(1, 1, 0, 0), sbh * (34 / T_ + 5 * A * S / (H * T_)))


def test_activation_memory_selective():
    sbh = S * B_ * H
    _close(_act(0, 1, 1, 0), sbh * (10 + 24 / T_))
    _close(_act(1, 1, 1, 0), sbh * 34 / T_)


def test_activation_memory_full_recompute():
    sbh = S * B_ * H
    _close(_act(0, 1, 0, 1), 2 * sbh)
    _close(_act(1, 1, 0, 1), 2 * sbh / T_)  # Korthikanti §5: "can be further reduced to 2sbhL/t"


def test_activation_memory_no_parallelism():
    sbh = S * B_ * H
    _close(_act(0, 1, 0, 0, tp=1.0), sbh * (34 + 5 * A * S / H))  # Eq. (1)


def test_flash_attention_drops_the_score_term():
    """FlashAttention stores no s×s tensor: with flash, no recompute equals selective recompute."""
    _close(_act(1, 0, 0, 0), _act(1, 1, 1, 0))


def test_interleaved_inflight_factor():
    """Korthikanti §4.2.3: the first stage holds L·(1 + (p−1)/(p·v)) layers of activations (m ≥ p)."""
    L, p, v, m = 96.0, 8.0, 3.0, 64.0
    _close(pipeline.inflight_layer_microbatches(m, p, v, L), L * (1 + (p - 1) / (p * v)))
    _close(pipeline.inflight_layer_microbatches(m, p, 1.0, L), L)  # 1F1B: p micro-batches of L/p layers
    _close(pipeline.inflight_layer_microbatches(2.0, p, 1.0, L), 2 * L / p)  # only m in flight when m < p


# ---- Rajbhandari et al. 2020 (ZeRO), §5 worked example: Ψ = 7.5B, N_d = 64 ---------------------------------
@pytest.mark.parametrize("stage,expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_model_states(stage, expected_gb):
    psi, nd = 7.5e9, 64.0
    total = (memory.weight_bytes(psi, nd, stage) + memory.gradient_bytes(psi, nd, stage)
             + memory.optimizer_bytes(psi, nd, stage))
    assert total / 1e9 == pytest.approx(expected_gb, abs=0.06)


# ---- Narayanan et al. 2021 Eq. (2), (3); Korthikanti et al. 2022 Eq. (7) -----------------------------------
def test_gpt3_parameter_count():
    """GPT-3 175B: 12·L·h² + V·h (Eq. 2 without biases and position embeddings) = 174.6e9."""
    L, h, V = 96.0, 12288.0, 50257.0
    p = transformer.total_params(L, h, 96.0, 96.0, 4 * h, V, 0, 1.0, 1)
    _close(p, 12 * L * h * h + V * h)
    assert p / 1e9 == pytest.approx(174.6, abs=0.05)


def test_model_flops_match_korthikanti_eq7():
    L, h, V, s = 96.0, 12288.0, 51200.0, 2048.0
    active = transformer.active_matmul_params_per_layer(h, 96.0, 96.0, 4 * h, 0, 1.0, 1.0)
    per_token = transformer.model_flops_per_token(L, active, s, h, V)
    _close(per_token, 72 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)))


def test_full_recompute_flops_match_narayanan_eq3():
    """Eq. (3), 96·B·s·l·h²·(1 + s/6h + V/16lh), counts one recomputed forward of every layer."""
    L, h, V, s = 128.0, 25600.0, 51200.0, 2048.0
    active = transformer.active_matmul_params_per_layer(h, 160.0, 160.0, 4 * h, 0, 1.0, 1.0)
    total = (transformer.model_flops_per_token(L, active, s, h, V)
             + transformer.recompute_flops_per_token(L, active, s, h, full=1.0, selective=0.0))
    _close(total, 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)))


def test_selective_recompute_flops_count_the_attention_core_once():
    """Selective recomputation re-runs QKᵀ and attention-over-values, 2·B·s²·h FLOPs each, per layer
    (Korthikanti 2022 §5).  Its Eq. (8) writes 72·B·L·s·h²·(1 + s/3h + V/12hL), i.e. 12·B·s²·h per layer,
    three times that operation count (the "2.7 % overhead" of §5 is the same s/6h); we count the operations
    actually re-executed, 4·B·s²·h per layer."""
    L, h, s = 96.0, 12288.0, 2048.0
    active = transformer.active_matmul_params_per_layer(h, 96.0, 96.0, 4 * h, 0, 1.0, 1.0)
    extra = transformer.recompute_flops_per_token(L, active, s, h, full=0.0, selective=1.0)
    _close(extra, L * (2 * s * h + 2 * s * h))


def test_gqa_and_swiglu_parameters():
    """Llama-2 70B layer: Q,O 2·h² + K,V 2·h·(g·h/a) + 3·h·f (Touvron et al. 2023 architecture)."""
    h, a, g, f = 8192.0, 64.0, 8.0, 28672.0
    got = transformer.layer_params(h, a, g, f, 1, 1.0)
    _close(got, 2 * h * h + 2 * h * (g * h / a) + 3 * h * f)


def test_moe_active_parameters():
    """Mixtral 8x7B: a token visits top_k = 2 of 8 experts; the router adds h·E."""
    h, f, E, k = 4096.0, 14336.0, 8.0, 2.0
    full = transformer.layer_params(h, 32.0, 8.0, f, 1, E)
    active = transformer.active_matmul_params_per_layer(h, 32.0, 8.0, f, 1, E, k)
    attn = transformer.attention_params(h, 32.0, 8.0)
    _close(full - attn, E * 3 * h * f + h * E)
    _close(active - attn, k * 3 * h * f + h * E)


# ---- NCCL bus bandwidth (nccl-tests doc/PERFORMANCE.md) -----------------------------------------------------
def _hw(**kw):
    base = dict(scaleup_gpus=8.0, scaleup_ring_bw=230e9, scaleup_allreduce_bw=230e9, scaleout_bw=24e9,
                scaleup_latency_s=0.0, scaleout_latency_s=0.0)
    base.update(kw)
    return {k: np.asarray(v) for k, v in base.items()}


def test_allreduce_inside_a_node():
    hw = _hw()
    links = network.group_links(np.asarray(1.0), np.asarray(8.0), hw)
    _close(network.allreduce_time(1e9, np.asarray(8.0), links), 1e9 * 2 * 7 / 8 / 230e9)
    _close(network.reduce_scatter_time(1e9, np.asarray(8.0), links), 1e9 * 7 / 8 / 230e9)


def test_allreduce_across_nodes_uses_k_nics():
    """32 ranks, stride 1: 8 per node drive 8 NICs, busbw = min(NVLink, 8·NIC) = 192 GB/s."""
    hw = _hw()
    links = network.group_links(np.asarray(1.0), np.asarray(32.0), hw)
    _close(links.allreduce_bw, 8 * 24e9)
    _close(network.allreduce_time(1e9, np.asarray(32.0), links), 1e9 * 2 * 31 / 32 / (8 * 24e9))


def test_group_with_one_member_per_node():
    """Data parallel behind tp = 8: one member per node, one NIC each."""
    hw = _hw()
    links = network.group_links(np.asarray(8.0), np.asarray(16.0), hw)
    _close(links.ring_bw, 24e9)


def test_group_of_one_costs_nothing():
    hw = _hw(scaleup_latency_s=1e-5)
    links = network.group_links(np.asarray(1.0), np.asarray(1.0), hw)
    assert network.allreduce_time(1e9, np.asarray(1.0), links) == 0.0


# ---- Pipeline (Narayanan 2021 §2.2) and roofline -----------------------------------------------------------
def test_bubble_fraction():
    """Uniform stages: t = (m + (p−1)/v)·t_mb, i.e. a bubble of (p−1)/(v·m) of the ideal time."""
    m, p, v, t_mb = 64.0, 8.0, 2.0, 0.1
    _close(pipeline.pipeline_time(m, p, v, t_mb, t_mb), (m + (p - 1) / v) * t_mb)
    _close(pipeline.pipeline_bubble_time(p, v, t_mb) / (m * t_mb), (p - 1) / (v * m))


def test_roofline():
    _close(roofline_time(gemm_flops(4096.0, 4096.0, 4096.0), 1.0, 1e14, 1e12), 2 * 4096.0**3 / 1e14)
    _close(roofline_time(1.0, 1e9, 1e14, 1e12), 1e-3)


def test_select_helpers():
    m = np.array([1.0, 0.0, 1.0])
    _close(pick(m, np.array([1.0, 2.0, 3.0]), np.array([9.0, 8.0, 7.0])), [1.0, 8.0, 3.0])
    assert list(divides(np.array([3.0, 4.0, 7.0]), np.array([12.0, 10.0, 49.0]))) == [True, False, True]


def test_columns_on_rows_equals_the_term_on_every_row():
    """columns_on_rows computes a term on some rows only: on those rows it equals the term computed on every row,
    elsewhere 0; the lazy view (RowsOf) takes only the columns the term reads, and passes scalars."""
    from dse.cost.select import RowsOf, columns_on_rows

    cols = {"a": np.array([1.0, 2.0, 3.0, 4.0]), "b": np.array([10.0, 20.0, 30.0, 40.0]), "unread": np.zeros(4),
            "s": 5.0}

    def term(c):
        return c["a"] * c["b"] + c["s"], c["a"] - 1.0

    rows = np.array([False, True, False, True])
    full = term(cols)
    got = columns_on_rows(rows, term, cols, cols["a"], 2)
    for g, f in zip(got, full, strict=True):
        np.testing.assert_array_equal(g, np.where(rows, f, 0.0))
    every = columns_on_rows(np.ones(4, dtype=bool), term, cols, cols["a"], 2)
    for g, f in zip(every, full, strict=True):
        np.testing.assert_array_equal(g, f)
    view = RowsOf(cols, np.flatnonzero(rows))
    term(view)
    assert set(view) == {"a", "b", "s"}  # "unread" was never taken


def test_ring_latency_counts_nccl_hops():
    """NCCL's tuning model (Ring/Simple): base 8.4 µs, 3.4 µs per step inside a scale-up domain, 9.6 µs per step
    between domains.  1536 ranks in 192 domains of 8: 1344 NVLink steps and 191 network steps."""
    import numpy as np

    from dse.cost.network import ring_latency

    got = ring_latency(np.array([1.0, 1.0, 1.0]), np.array([1536.0, 8.0, 1.0]), np.array([8.0, 8.0, 8.0]))
    np.testing.assert_allclose(got, [(8.4 + 1344 * 3.4 + 191 * 9.6) * 1e-6, (8.4 + 7 * 3.4) * 1e-6, 0.0])


def test_cp_allgather_hides_under_the_local_block_only():
    """cp_allgather_exposed: max(AG − t_attn/cp, 0); 40 s of attention over 8 ranks leaves a 5 s local block."""
    from dse.cost.parallel import cp_allgather_exposed, cp_grad_ring_exposed

    assert cp_allgather_exposed(10.0, 40.0, 8.0) == pytest.approx(5.0)
    assert cp_allgather_exposed(4.0, 40.0, 8.0) == 0.0
    # the KV-gradient ring: cp transfers; the first cp − 1 each under one of the non-local steps' backward, the
    # last one waited for after the loop with nothing left to hide it
    assert cp_grad_ring_exposed(3.0, 8.0, 4.0) == pytest.approx(3.0 * 3.0 - 8.0 * 3.0 / 4.0 + 3.0)
    assert cp_grad_ring_exposed(1.0, 8.0, 4.0) == pytest.approx(1.0)
    np.testing.assert_allclose(cp_allgather_exposed(np.array([10.0, 4.0]), 40.0, 8.0), [5.0, 0.0])


def test_cp_ring_bookkeeping_bytes_count_the_passes_of_pytorchs_ring():
    """PyTorch's ring attention, per element of the local chunk: forward 20 + 46·(cp − 1) bytes (contiguous K, V;
    a K,V cat per send; each step's fp32 cast and three-pass merge; the cast back), backward 84 + 60·(cp − 1)
    (zeroed fp32 grads, contiguous K, V, per step the dK,dV cat for the send and the dQ add, half-size dK,dV adds
    with a full cat after the first step, the casts back); linear in the elements, arrays broadcast."""
    from dse.cost.parallel import cp_ring_backward_bytes, cp_ring_forward_bytes

    assert cp_ring_forward_bytes(1.0, 2.0) == pytest.approx(8 + 8 + 6 * 2 + 32 + 6)
    assert cp_ring_backward_bytes(1.0, 2.0) == pytest.approx(12 + 8 + 8 + 20 + 26 + 2 * (16 + 10) + 18)
    np.testing.assert_allclose(cp_ring_forward_bytes(np.array([1.0, 3.0]), np.array([8.0, 8.0])),
                               [342.0, 1026.0])
    np.testing.assert_allclose(cp_ring_backward_bytes(2.0, np.array([4.0, 8.0])), [2 * 264.0, 2 * 504.0])


def test_expected_distinct_holders_matches_enumeration():
    """H·(1 − C(E − E/H, k)/C(E, k)): the mean number of distinct holders of k different experts drawn uniformly
    from E split evenly over H holders, checked against every draw of a small case; arrays and scalars alike."""
    from itertools import combinations

    for experts, k, holders in ((8, 2, 4), (12, 3, 3), (16, 4, 2), (8, 1, 8), (6, 6, 3)):
        per = experts // holders
        draws = list(combinations(range(experts), k))
        mean = sum(len({x // per for x in d}) for d in draws) / len(draws)
        got = network.expected_distinct_holders(float(experts), float(k), float(holders))
        assert float(got) == pytest.approx(mean, rel=1e-12)
    many = network.expected_distinct_holders(np.array([256.0, 256.0, 128.0]), np.array([8.0, 8.0, 8.0]),
                                             np.array([1.0, 8.0, 128.0]))
    assert many[0] == pytest.approx(1.0)
    assert 1.0 < many[1] < 8.0  # DeepSeek-V3 over 8 nodes: 5.27 nodes per token
    assert many[2] == pytest.approx(8.0)  # one expert per holder: every copy to its own holder


def test_deepep_sends_a_token_once_per_remote_node():
    """DeepEP's dispatch puts fewer bytes on the NIC than an all-to-all of every routed copy when a token's experts
    share nodes, the NVLink carries the forwarding, and one node has no NIC traffic at all."""
    hw = {"scaleup_gpus": np.array(8.0), "scaleup_ring_bw": np.array(370e9), "scaleout_bw": np.array(46e9),
          "scaleup_latency_s": np.array(0.0), "scaleout_latency_s": np.array(0.0)}
    token_bytes, experts, k = 4096 * 7168 * 2.0, 256.0, 8.0
    a2a = network.alltoall_time(token_bytes * k, np.array(1.0), np.array(64.0), hw)
    deepep = network.deepep_dispatch_time(token_bytes, experts, k, np.array(1.0), np.array(64.0), hw)
    remote_nodes = 7.0 / 8.0 * network.expected_distinct_holders(experts, k, 8.0)
    assert deepep == pytest.approx(token_bytes * remote_nodes / 46e9)
    assert a2a == pytest.approx(token_bytes * k * 56.0 / 64.0 / 46e9)
    one_node = network.deepep_dispatch_time(token_bytes, experts, k, np.array(1.0), np.array(8.0), hw)
    gpus = network.expected_distinct_holders(experts, k, 8.0)
    assert one_node == pytest.approx(token_bytes * gpus * 7.0 / 8.0 / 370e9)
