"""Issue 21: commodity 8-GPU servers as measured — the host as part of a system, collectives through host memory,
ZeRO-Offload on the host's cores, eager HF kernels, optimizer layouts and memory as frameworks report it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.cost import constants as K
from dse.cost.eager import KERNELS_PER_LAYER
from dse.frame import evaluate, evaluate_train
from dse.hardware import catalog as hwcat

BASE = {"model": "llama2-7b", "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 8,
        "seq_len": 350, "recompute": "none", "precision": "bf16"}


def train(**changes) -> pd.Series:
    return evaluate_train(pd.DataFrame([{**BASE, **changes}])).iloc[0]


def hw(name: str) -> dict[str, float]:
    cols = hwcat.hardware_columns(hwcat.system_codes(np.array([name])))
    return {k: float(v[0]) for k, v in cols.items()}


def test_collectives_without_peer_to_peer_are_bound_by_the_host_dram():
    """GeForce cards have no PCIe peer-to-peer: every byte goes through host DRAM (written, then read), shared by
    the node's GPUs.  Two servers whose bound is the DRAM differ by their DRAM bandwidth; a server with
    peer-to-peer keeps its NVLink or PCIe rate."""
    sysf = hwcat.systems()
    r4090, r3090 = hw("rtx4090"), hw("rtx3090")
    assert sysf.loc["rtx4090", "p2p"] == 0 and sysf.loc["rtx3090", "p2p"] == 0
    ratio = sysf.loc["rtx4090", "host_mem_gbps"] / sysf.loc["rtx3090", "host_mem_gbps"]
    assert r4090["scaleup_ring_bw"] / r3090["scaleup_ring_bw"] == pytest.approx(ratio, rel=1e-9)
    assert r4090["scaleup_ring_bw"] == pytest.approx(
        hwcat.HOST_STAGED_EFFICIENCY * sysf.loc["rtx4090", "host_mem_gbps"] * 1e9 / (2 * 8), rel=1e-9)
    a100 = hw("a100-sxm-80gb")
    assert a100["scaleup_ring_bw"] == pytest.approx(300e9 * 0.767, rel=1e-9)


def test_cpu_adam_runs_on_each_ranks_share_of_the_host():
    """Each rank's CPU Adam updates its partition on cores / GPUs of the node at the per-core rate of DeepSpeed's
    measurement (11.6B parameters in 8.2 s on 48 cores), unless the DRAM bound is lower."""
    sysf = hwcat.systems()
    for name in ("a800-sxm-80gb", "rtx4090", "rtx3090"):
        cores = sysf.loc[name, "host_cores"] / sysf.loc[name, "node_gpus"]
        dram = sysf.loc[name, "host_mem_gbps"] * 1e9 / sysf.loc[name, "node_gpus"] / hwcat.CPU_ADAM_BYTES_PER_PARAM
        assert hw(name)["cpu_adam_rate"] == pytest.approx(min(cores * 11.6e9 / 8.2 / 48, dram), rel=2e-3)
    # the offload step on the A800 server: its ranks' CPU Adam is the largest offload term
    row = train(system="a800-sxm-80gb", zero=2, offload="optimizer", stack="deepspeed-2023")
    partition = row["params_total"] / 8
    assert row["time_offload_s"] >= partition / hw("a800-sxm-80gb")["cpu_adam_rate"]


def test_offload_copies_are_deepspeeds_pageable_copies():
    """DeepSpeed 0.9-0.12 offload copies through pageable host memory, each copy of a partition 4.5x the pinned
    fp32 copy (PR 5301); ZeRO-1/2 copy the gradients once and the weights back once, ZeRO-3 copies the gradients
    three times (stage3.py partition_grads) and, with the weights on the host, writes them there in the step."""
    from dse.cost import host

    p = 1e9
    assert host.offload_gradient_bytes(p, 0.0) == pytest.approx(4.5 * 4.0 * p)
    assert host.offload_gradient_bytes(p, 1.0) == pytest.approx(3 * 4.5 * 4.0 * p)
    assert host.offload_parameter_bytes(p) == pytest.approx(4.5 * 4.0 * p)
    # A800 (host path = its link share): ZeRO-2 offload = CPU Adam + the two copies, nothing hidden at batch 1
    row = train(system="a800-sxm-80gb", zero=2, offload="optimizer", stack="deepspeed-2023")
    a800 = hw("a800-sxm-80gb")
    partition = row["params_total"] / 8
    expect = partition / a800["cpu_adam_rate"] + 2 * 4.5 * 4.0 * partition / a800["host_bw"]
    assert row["time_offload_s"] == pytest.approx(expect, rel=0.05)


def test_offload_copies_without_peer_to_peer_take_the_staged_host_path():
    """On the GeForce servers (no GPU peer-to-peer) an offload copy crosses the host path the staged collectives
    measure once: at most HOST_STAGED_EFFICIENCY x DRAM / node GPUs, below their links; the A800 keeps its link."""
    sysf = hwcat.systems()
    for name in ("rtx4090", "rtx3090", "rtx3090-nvlink"):
        staged = hwcat.HOST_STAGED_EFFICIENCY * sysf.loc[name, "host_mem_gbps"] * 1e9 / sysf.loc[name, "node_gpus"]
        assert hw(name)["host_bw"] == pytest.approx(staged, rel=1e-6)
        assert hw(name)["host_bw"] == pytest.approx(2 * hw(name)["scaleup_ring_bw"], rel=1e-6)
    link = sysf.loc["a800-sxm-80gb", "host_gbps"] * 1e9 * hwcat.HOST_LINK_EFFICIENCY / 2
    assert hw("a800-sxm-80gb")["host_bw"] == pytest.approx(link, rel=1e-6)


def test_deepspeed_zero3_keeps_weights_reused_within_the_reuse_distance():
    """stage3_max_reuse_distance (1e9): a Llama-2 7B layer (0.2e9 parameters) recomputed is not gathered again, so
    full recomputation adds no gather; the forward's last 0.5e9 parameters are not gathered for the backward."""
    from dse.cost.training import zero3_regathered_share, zero3_reused_share

    assert zero3_regathered_share(2.0e8) == 0.0
    assert zero3_regathered_share(1.8e9) == pytest.approx(1.0 - 1e9 / 3.6e9)
    assert zero3_reused_share(6.74e9) == pytest.approx(0.5e9 / 6.74e9)
    plain = train(system="a800-sxm-80gb", zero=3, stack="deepspeed-2023")
    full = train(system="a800-sxm-80gb", zero=3, stack="deepspeed-2023", recompute="full")
    assert full["time_dp_comm_s"] == pytest.approx(plain["time_dp_comm_s"], rel=1e-6)


def test_offload_beyond_the_host_memory_is_a_reason_not_a_time():
    """13B with ZeRO-3 offload on the 128 GB RTX 3090 host: 16 bytes per offloaded parameter plus the 16-bit
    weights (about 234 GB for the node) do not fit; 7B (about 121 GB) does.  The row keeps its GPU memory."""
    big = train(model="llama2-13b", system="rtx3090", zero=3, offload="all", stack="deepspeed-2023")
    assert big["infeasible_reason"] == "host_memory_exceeded" and not big["fits"]
    assert np.isnan(big["step_time_s"]) and np.isfinite(big["peak_memory_gb"])
    small = train(system="rtx3090", zero=3, offload="all", stack="deepspeed-2023")
    assert small["infeasible_reason"] == "" and np.isfinite(small["step_time_s"])
    roomy = train(model="llama2-13b", system="rtx4090", zero=3, offload="all", stack="deepspeed-2023")
    assert roomy["infeasible_reason"] == ""


def test_torch_adamw_on_a_16bit_model_peaks_in_its_step():
    """torch's foreach AdamW on a bf16 model keeps 2 + 2 + 4 bytes per parameter and allocates a 2-byte copy of
    every variance in its step: with few activations the step sets the peak, 10 bytes per parameter plus the
    runtime reserve; its step moves ADAM_16BIT_BYTES_PER_PARAM per parameter at the HBM rate."""
    row = train(system="a800-sxm-80gb", zero=0, optimizer="adam_16bit")
    p = row["params_total"]
    assert row["mem_step_extra_bytes"] > 0
    assert row["mem_total_bytes"] == pytest.approx(10.0 * p + K.RUNTIME_RESERVED_BYTES, rel=1e-5)
    assert row["time_optimizer_s"] == pytest.approx(p * K.ADAM_16BIT_BYTES_PER_PARAM / hw("a800-sxm-80gb")[
        "memory_rate"], rel=1e-5)
    mixed = train(system="a800-sxm-80gb", zero=0)
    assert mixed["mem_step_extra_bytes"] == 0 and mixed["mem_optimizer_bytes"] == pytest.approx(12.0 * p, rel=1e-6)


def test_memory_report_gib_divides_by_two_to_the_30():
    gb = train(system="a800-sxm-80gb", zero=2)
    gib = train(system="a800-sxm-80gb", zero=2, memory_report="gib")
    assert gib["peak_memory_gb"] == pytest.approx(gb["peak_memory_gb"] * 1e9 / 2**30, rel=1e-6)


def test_device_memory_in_use_keeps_the_activations_beside_the_step_temporaries():
    """memory_report = gib_in_use (torch.cuda.mem_get_info, the caching allocator's segments): the optimizer step's
    temporaries that no cached activation block can hold take new segments, so the reading adds the activations
    and the step's temporaries where allocated memory takes the larger (memory.phase_peak_bytes).  ZeRO-2's flat
    fp32 gradient partition: always; torch AdamW's per-parameter temporaries: only while a micro-batch's tokens
    are fewer than the hidden size (an h x f temporary is then larger than any tokens x f activation).  The model
    states are the same in both readings, and gib_in_use is in GiB."""
    for kw in ({"zero": 2, "stack": "deepspeed-2023"}, {"zero": 0, "optimizer": "adam_16bit"}):
        alloc = train(system="a800-sxm-80gb", memory_report="gib", **kw)
        used = train(system="a800-sxm-80gb", memory_report="gib_in_use", **kw)
        states = alloc["mem_weights_bytes"] + alloc["mem_grads_bytes"] + alloc["mem_optimizer_bytes"] + alloc[
            "mem_buffers_bytes"]
        step = alloc["mem_activations_bytes"] + alloc["mem_step_extra_bytes"]  # max(A, S) = S here (the step peaks)
        assert alloc["mem_step_extra_bytes"] > 0
        assert used["mem_total_bytes"] == pytest.approx(states + alloc["mem_activations_bytes"] + step, rel=1e-6)
        assert used["peak_memory_gb"] == pytest.approx(used["mem_total_bytes"] / 2**30, rel=1e-6)
        assert used["step_time_s"] == alloc["step_time_s"]
    # at tokens >= hidden the activation blocks hold torch's per-parameter temporaries: the larger of the two again
    big = dict(zero=0, optimizer="adam_16bit", micro_batch=16, global_batch=128)
    assert 16 * BASE["seq_len"] >= 4096
    alloc = train(system="a800-sxm-80gb", memory_report="gib", **big)
    used = train(system="a800-sxm-80gb", memory_report="gib_in_use", **big)
    assert used["mem_total_bytes"] == pytest.approx(alloc["mem_total_bytes"], rel=1e-6)


def test_a_setting_per_zero_stage_follows_the_row():
    """deepspeed-2023's dp_overlap 1/0/0/1 (DeepSpeed's overlap_comm default, stage 3 only; DDP at stage 0) and
    its optimizer (torch AdamW without ZeRO, DeepSpeed's fp32 partitions with it), in tables and in sweeps."""
    from dse.grid import Grid
    from dse.spec import resolve_spec
    from dse.sweep import evaluate_points

    frame = pd.DataFrame([{**BASE, "system": "a800-sxm-80gb", "zero": z, "stack": "deepspeed-2023"}
                          for z in (0, 1, 2, 3)])
    out = evaluate(frame)
    assert list(out["dp_overlap"]) == [1, 0, 0, 1]
    assert list(out["optimizer"].astype(str)) == ["adam_16bit", "adam_mixed", "adam_mixed", "adam_mixed"]
    grid = {**{k: v for k, v in BASE.items() if k not in ("recompute", "dp")}, "system": "a800-sxm-80gb",
            "zero": [0, 1, 2, 3], "stack": ["deepspeed-2023"]}
    swept = evaluate_points(resolve_spec({"name": "s", "grid": grid}, "<test>"),
                            Grid(resolve_spec({"name": "s", "grid": grid}, "<test>")), 0, 4).to_pandas()
    assert list(swept["dp_overlap"]) == [1, 0, 0, 1]
    np.testing.assert_allclose(swept["step_time_s"], out["step_time_s"], rtol=1e-5)


def test_eager_kernels_cost_their_bytes_and_a_fixed_time_each():
    """HF's eager modules run slower than fused kernels: the difference per layer is at least the fixed time of
    the extra kernels, and the unfused attention's batched matmuls run at EAGER_BMM_EFFICIENCY."""
    fused = train(system="a800-sxm-80gb", zero=0, attention="standard")
    eager = train(system="a800-sxm-80gb", zero=0, attention="standard", kernels="eager")
    assert eager["layer_elementwise_ms"] > fused["layer_elementwise_ms"]
    assert (eager["layer_elementwise_ms"] * 1e-3 >= sum(KERNELS_PER_LAYER) * K.EAGER_KERNEL_S)
    assert eager["layer_attention_ms"] > fused["layer_attention_ms"]


def test_lora_adapters_in_fp32_send_and_update_twice_the_bytes():
    base = {"system": "rtx4090", "zero": 2, "finetune": "lora", "lora_rank": 64}
    half, full = train(**base), train(**base, adapter_precision="fp32")
    assert full["mem_grads_bytes"] == pytest.approx(2.0 * half["mem_grads_bytes"], rel=1e-6)
    assert full["time_dp_comm_s"] > 1.9 * half["time_dp_comm_s"]


def test_hf_lora_adapters_are_counted_module_by_module():
    """HF's Llama has separate q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj Linears
    (transformers modeling_llama.py), each wrapped by PEFT with its own lora_A (r x d_in) and lora_B (d_out x r).
    Llama-2-7B (h 4096, FFN 11008, 32 layers) at rank 64 on all seven holds
    32 * 64 * (4 * (4096 + 4096) + 3 * (4096 + 11008)) = 159,907,840 adapter parameters: PEFT's
    print_trainable_parameters reports that beside 6,898,323,456 parameters in all (the model's 6,738,415,616 plus
    the adapters).  Megatron/NeMo fuse q, k, v (linear_qkv) and gate, up (linear_fc1), one adapter each:
    32 * 64 * ((4096 + 12288) + (4096 + 4096) + (4096 + 22016) + (11008 + 4096)) = 134,742,016."""
    hf = train(system="a800-sxm-80gb", finetune="lora", lora_rank=64, kernels="eager")
    fused = train(system="a800-sxm-80gb", finetune="lora", lora_rank=64, kernels="fused")
    assert hf["params_trainable"] == 32 * 64 * (4 * (4096 + 4096) + 3 * (4096 + 11008)) == 159_907_840
    assert fused["params_trainable"] == 32 * 64 * ((4096 + 12288) + (4096 + 4096) + (4096 + 22016)
                                                   + (11008 + 4096)) == 134_742_016
    # the model's count without its 65 RMSNorm weight vectors (2 per layer and the final one), which dse leaves out
    assert hf["params_total"] == 6_738_415_616 - (2 * 32 + 1) * 4096


def test_module_profile_of_the_a800_step():
    """Zhang et al. 2023 Table V (tests/reference/zhang2023_module_profiles.md): 7B, Naive, batch 2 per GPU on the
    A800 server: forward 75.0 ms, backward 250.0 ms (38.8 ms of it exposed communication), optimizer 193.9 ms.
    Issue 21 asks each within 25 %.  Forward and backward are dse explain's module table summed: the 32 layers, the
    embedding, the output layer and loss, and (backward) the exposed data-parallel sync; the backward holds DDP's
    bucket copies (dp_reduce = ddp_copy, the deepspeed-2023 profile for ZeRO 0), without which it was 30 % short."""
    from dse.explain import explain_row, explain_table
    row = explain_row({**BASE, "system": "a800-sxm-80gb", "zero": 0, "micro_batch": 2, "global_batch": 16,
                       "stack": "deepspeed-2023", "attention": "standard"})
    mods = explain_table(row)["modules"]
    assert mods["fwd_ms"].sum() == pytest.approx(75.0, rel=0.25)
    assert mods["bwd_ms"].sum() == pytest.approx(250.0, rel=0.25)
    assert row["time_optimizer_s"] * 1e3 == pytest.approx(193.9, rel=0.25)


def test_recomputed_step_at_batch_32_of_the_a800_profile():
    """Zhang et al. 2023 Table VII (tests/reference/zhang2023_module_profiles.md): the same 7B step with full
    recomputation at the largest batch it allows, 32 per GPU (11,200 tokens, 16x the Table V step): forward 900.8 ms,
    backward with the recomputed forward 2651.8 ms, optimizer 187.7 ms.  A check of the larger-batch regime the
    issue's held-back runs are in, not a fit (nothing was fitted on Table VII): dse gives +12 %, +14 % and -5 %, each
    within the 25 % issue 21 asks of the profiled step."""
    from dse.explain import explain_row, explain_table
    row = explain_row({**BASE, "system": "a800-sxm-80gb", "zero": 0, "micro_batch": 32, "global_batch": 256,
                       "stack": "deepspeed-2023", "attention": "standard", "recompute": "full"})
    mods = explain_table(row)["modules"]
    assert bool(row["fits"])
    assert mods["fwd_ms"].sum() == pytest.approx(900.8, rel=0.25)
    assert mods["bwd_ms"].sum() == pytest.approx(2651.8, rel=0.25)
    assert row["time_optimizer_s"] * 1e3 == pytest.approx(187.7, rel=0.25)


def test_module_shares_of_the_a800_step():
    """Zhang et al. 2023 Table VI (tests/reference/zhang2023_module_profiles.md): the same step's time by module,
    as shares of the forward (75.0 ms) and of the backward (250.0 ms, its exposed communication included).  Issue 21
    asks each of QKV, attention (QKᵀ + softmax + PV), MLP, RMSNorm, RoPE, the output projection and the
    communication within 5 points; dse explain's module table gives the shares of its own forward and backward.
    Every share is within 5 points (MLP's backward 4.55 points off, 5.04 before the embedding gradient's
    unhidden reduction, parallel.embedding_gradient_tail).
    The DDP bucket copies go with the module whose gradients they copy (in the profile the backward GEMM modules
    run 3.0-3.7x their forward, the LM head 2.7x)."""
    from dse.explain import explain_row, explain_table
    row = explain_row({**BASE, "system": "a800-sxm-80gb", "zero": 0, "micro_batch": 2, "global_batch": 16,
                       "stack": "deepspeed-2023", "attention": "standard"})
    mods = explain_table(row)["modules"].set_index("module")
    forward = {"qkv": 13.2, "attention": 5.8 + 3.5 + 2.9, "mlp": 38.7, "norm": 9.2, "rope": 8.9, "output": 4.5}
    backward = {"qkv": 14.5, "attention": 2.3 + 1.7 + 2.5, "mlp": 35.5, "norm": 11.0, "rope": 6.2, "output": 4.9,
                "comm": 15.5}
    for module, share in forward.items():
        assert abs(mods.loc[module, "fwd_pct"] - share) <= 5.0, (module, mods.loc[module, "fwd_pct"], share)
    for module, share in backward.items():
        assert abs(mods.loc[module, "bwd_pct"] - share) <= 5.0, (module, mods.loc[module, "bwd_pct"], share)


def test_embedding_gradient_reduction_hides_under_nothing():
    """The input embedding's gradient is the backward's last: with the gradient all-reduce overlapped (DDP, ZeRO 0)
    its share of the reduction, P_emb / P_stage, is exposed whole and only the rest costs kappa of itself:
    exposed = max(ideal, tail + kappa (M - tail)).  M is the serial all-reduce (the same row without overlap);
    Llama-2-7B's embedding is 32,000 x 4,096 of its 6.74e9 parameters on one stage (the A800 profile's step,
    batch 2, where the ideal exposure is 0: the all-reduce is shorter than the backward)."""
    from dse.cost import constants as K
    from dse.explain import explain_row
    row = {**BASE, "system": "a800-sxm-80gb", "zero": 0, "micro_batch": 2, "global_batch": 16,
           "stack": "deepspeed-2023", "attention": "standard"}
    serial = explain_row({**row, "dp_overlap": 0})
    overlapped = explain_row({**row, "dp_overlap": 1})
    M = serial["time_dp_comm_s"] - serial["detail_grad_copy_s"]
    exposed = overlapped["time_dp_comm_s"] - overlapped["detail_grad_copy_s"]
    tail = M * 32_000 * 4_096 / overlapped["params_per_gpu"]
    kappa = K.OVERLAP_COMPUTE_SLOWDOWN / (1.0 + K.OVERLAP_COMPUTE_SLOWDOWN)
    assert exposed == pytest.approx(tail + kappa * (M - tail), rel=1e-5)
    assert exposed > kappa * M  # the embedding's share no longer hides


def test_module_table_adds_up_to_the_step():
    """The module table splits the step's forward and backward: summed, it is the compute, recomputation, host work
    and every exposed communication of the step (all but the bubble, the optimizer and the offload), on a pipeline
    with interleaving, tensor parallelism, LoRA and an MoE model alike."""
    from dse.cost.training import MODULE_METRICS
    parts = ("time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s", "time_ep_comm_s",
             "time_host_s", "time_pp_comm_s", "time_dp_comm_s")
    rows = pd.DataFrame([
        {**BASE, "system": "a800-sxm-80gb", "zero": 0, "stack": "deepspeed-2023", "attention": "standard"},
        {**BASE, "system": "rtx4090", "zero": 2, "finetune": "lora", "lora_rank": 64, "kernels": "eager"},
        {"model": "llama2-70b", "system": "h100-sxm-80gb", "gpus": 64, "tp": 4, "pp": 4, "vpp": 5, "dp": 2, "cp": 2,
         "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "recompute": "selective", "precision": "bf16"},
        {"model": "mixtral-8x7b", "system": "h100-sxm-80gb", "gpus": 64, "tp": 2, "pp": 4, "dp": 8, "ep": 8,
         "micro_batch": 1, "global_batch": 256, "seq_len": 4096, "recompute": "full", "precision": "bf16"},
    ])
    out = evaluate_train(rows, modules=True)
    assert np.isfinite(out["step_time_s"]).all()
    np.testing.assert_allclose(out[list(MODULE_METRICS)].sum(axis=1), out[list(parts)].sum(axis=1), rtol=1e-5)
    assert (out[list(MODULE_METRICS)] >= 0).all().all()


def test_ddp_bucket_copies_cost_eight_bytes_per_trainable_parameter():
    """PyTorch DDP with gradient_as_bucket_view=False copies each 16-bit gradient into its bucket and back (read and
    write each way: 8 bytes per parameter, torch reducer.cpp copy_grad_to_bucket / copy_bucket_to_grad), on the
    compute stream: the layer's backward grows by 8 bytes per parameter of the layer at the HBM rate; ZeRO-2's
    DeepSpeed reduction and a single rank have no such copies."""
    from dse import codes
    from dse.cost.training import ddp_copy_time
    mem = hw("a800-sxm-80gb")["memory_rate"]
    p_layer = 202_383_360.0  # Llama-2-7B: 4 * 4096^2 + 3 * 4096 * 11008 weights per layer
    copy = ddp_copy_time(codes.DP_REDUCE_DDP_COPY, 0.0, 8.0, 1.0, p_layer, mem)
    assert copy == pytest.approx(K.DDP_COPY_BYTES * p_layer / mem)
    assert ddp_copy_time(codes.DP_REDUCE_DDP_COPY, 2.0, 8.0, 1.0, p_layer, mem) == 0.0
    assert ddp_copy_time(codes.DP_REDUCE_DDP_COPY, 0.0, 1.0, 1.0, p_layer, mem) == 0.0
    assert ddp_copy_time(0, 0.0, 8.0, 1.0, p_layer, mem) == 0.0
    # LoRA: the adapters' fp32 gradients only (tw = 2)
    lora = ddp_copy_time(codes.DP_REDUCE_DDP_COPY, 0.0, 8.0, 2.0, 4_997_120.0, mem)
    assert lora == pytest.approx(2.0 * K.DDP_COPY_BYTES * 4_997_120.0 / mem)
    fused = train(system="a800-sxm-80gb", zero=0, micro_batch=2, global_batch=16, stack="deepspeed-2023",
                  attention="standard", dp_reduce="reduce_scatter")
    ddp = train(system="a800-sxm-80gb", zero=0, micro_batch=2, global_batch=16, stack="deepspeed-2023",
                attention="standard")
    assert ddp["layer_bwd_ms"] - fused["layer_bwd_ms"] == pytest.approx(copy * 1e3, rel=1e-4)


def test_readme_findings_table_is_the_findings_output():
    """The README's table of Zhang et al.'s findings is what python -m dse.validation.findings prints today."""
    from dse.validation.findings import findings_table
    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- findings table: generated by python -m dse.validation.findings -->", 1)[1]
    block = block.split("<!-- /findings table -->", 1)[0].strip()
    assert block == findings_table()


@pytest.mark.parametrize("dp", [1, 8])
def test_optimizer_layouts_keep_the_bytes_per_parameter_their_sources_give(dp):
    """Issue 25: model states per parameter with bf16 weights, d data-parallel ranks sharding the optimizer
    (ZeRO 1).  Megatron-LM docs/source/api-guide/dist_optimizer.md: 'bf16 parameters, fp32 gradients' keep
    6 + 12/d bytes.  Apex DistributedFusedAdam with store_param_remainders: an int16 remainder instead of the fp32
    master weight (10 bytes of state) beside the fp32 gradient buffer: 6 + 10/d.  ZeRO §3.1: 4 + 12/d.  The same
    Apex optimizer with bf16 state (``dtype`` bf16) and a stored bf16 weight copy, bf16 gradient buffer (NeMo 24.07's
    SFT configuration with FP8 parameters): 4 + 6/d."""
    def states_per_param(optimizer: str | None) -> float:
        row = train(system="h100-sxm-80gb", tp=1, dp=dp, gpus=dp, global_batch=dp, zero=1,
                    **({"optimizer": optimizer} if optimizer else {}))
        return float((row["mem_weights_bytes"] + row["mem_grads_bytes"] + row["mem_optimizer_bytes"])
                     / row["params_total"])
    assert states_per_param("adam_fp32_grads") == pytest.approx(6.0 + 12.0 / dp, rel=2e-3)
    assert states_per_param("adam_remainders") == pytest.approx(6.0 + 10.0 / dp, rel=2e-3)
    assert states_per_param("adam_16bit_master") == pytest.approx(4.0 + 6.0 / dp, rel=2e-3)
    assert states_per_param("adam_mixed") == pytest.approx(4.0 + 12.0 / dp, rel=2e-3)
    assert states_per_param(None) == states_per_param("adam_mixed")  # the default is today's layout


def test_the_70b_sft_fits_with_the_optimizer_state_nemo_ran_and_not_with_16_bytes():
    """NeMo 24.07 SFT of Llama-2 70B on 16 GPUs (tp 4, pp 4, dp 1; tests/cases/nemo_24.07_finetune_h100.csv) ran
    NeMo-Framework-Launcher's SFT configuration: Apex DistributedFusedAdam with ``dtype`` and ``grad_sync_dtype``
    bf16 and FP8 parameters (``adam_16bit_master``: 2 + 2 + 6 = 10 bytes per parameter).  With nothing to shard over
    (d = 1) the 16-byte layouts do not fit: the remainders save on the master weight the 2 bytes Apex's fp32
    gradient buffer adds (``adam_remainders``, 16 bytes, as ``adam_mixed``).  The run fit, as the 10-byte layout
    says."""
    from pathlib import Path

    cases = pd.read_csv(Path(__file__).parent / "cases" / "nemo_24.07_finetune_h100.csv")
    row = cases[cases["case"] == "nemo-24.07-sft-llama2-70b-16g"].drop(columns=["case", "metric", "measured",
                                                                                "source"])
    assert (row["optimizer"] == "adam_16bit_master").all()
    ran = evaluate(row).iloc[0]
    remainders = evaluate(row.assign(optimizer="adam_remainders")).iloc[0]
    mixed = evaluate(row.assign(optimizer="adam_mixed")).iloc[0]
    states = ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes")
    per_param = {name: sum(r[k] for k in states) / r["params_total"] * 16
                 for name, r in (("ran", ran), ("remainders", remainders), ("mixed", mixed))}
    assert per_param["remainders"] == pytest.approx(per_param["mixed"], rel=1e-6)
    assert per_param["ran"] == pytest.approx(per_param["mixed"] * 10.0 / 16.0, rel=2e-3)
    assert ran["fits"] and not remainders["fits"] and not mixed["fits"]


def test_deepspeed_zero3_keeps_up_to_its_live_parameter_bound_gathered():
    """DeepSpeed ZeRO-3 (zero3_fetch on_demand) does not release a gathered parameter reused within
    stage3_max_reuse_distance and keeps up to stage3_max_live_parameters resident (1e9 each, DeepSpeed's
    zero/config.py defaults): 1e9 bf16 parameters = 2 GB for Llama-2 7B.  FSDP-style prefetch holds two layers:
    2 x (4 h^2 + 3 h f) = 2 x 202.4M parameters for h 4096, f 11008.  The difference is all in the buffers."""
    import pandas as pd

    from dse import evaluate

    row = {"model": "llama2-7b", "system": "a800-sxm-80gb", "gpus": 8, "global_batch": 8, "micro_batch": 1,
           "seq_len": 350, "zero": 3, "precision": "bf16"}
    out = evaluate(pd.DataFrame([{**row, "zero3_fetch": "on_demand"}, {**row, "zero3_fetch": "prefetch"}]))
    h, f = 4096, 11008
    layer = 4 * h * h + 3 * h * f
    diff = out["mem_buffers_bytes"].iloc[0] - out["mem_buffers_bytes"].iloc[1]
    assert diff == pytest.approx(2.0 * (1e9 - 2 * layer), rel=1e-3)


def test_eager_llama_layer_keeps_what_autograd_saves():
    """The bytes one eager HF Llama-2 7B layer keeps for its backward (b = 1, s = 350, h = 4096, f = 11008,
    32 heads), counted by hand from the modules and PyTorch's saving rule (an operand of a product is kept only
    when the other operand needs a gradient):
    full training, per token: two RMSNorms × (fp32 copy 4 + normalised bf16 2 + linear input 2) · h = 16h; QKᵀ keeps
    q and k (2h + 2h), PV keeps v (2h), o_proj its input (2h): 8h; SwiGLU: SiLU input, SiLU output, up, down_proj
    input: 8f.  350 · (24 · 4096 + 8 · 11008) = 65,228,800 bytes.  Scores: fp32 softmax output and bf16
    probabilities, 6 · 32 · 350² = 23,520,000.
    LoRA (frozen weights): the norms keep only the fp32 copy (4h each), no linear input is kept (o_proj's, down_proj's,
    the norms' outputs), SwiGLU keeps 6f: 350 · (8 · 4096 + 6 · 4096 + 6 · 11008) = 43,187,200 bytes; scores the same.
    QLoRA: bitsandbytes' MatMul4Bit keeps its input, so the norms' outputs, o_proj's and down_proj's come back:
    350 · ((4 + 2) · 2 · 4096 + 8 · 4096 + 8 · 11008).
    Megatron's fused layer (Korthikanti Table 2) keeps 18h + 6f per token and 5 bytes per score."""
    from dse.cost.eager import eager_activation_terms

    args = dict(tokens=350.0, micro_batch=1.0, seq_len=350.0, heads=32.0, hidden=4096.0, q_width=4096.0,
                kv_width=4096.0, o_width=4096.0, ffn_hidden=11008.0, swiglu=1.0, tp=1.0, standard_attention=1.0)
    kept, scores = eager_activation_terms(**args, frozen=0.0, quantized=0.0)
    assert (kept, scores) == (65_228_800.0, 23_520_000.0)
    kept, scores = eager_activation_terms(**args, frozen=1.0, quantized=0.0)
    assert (kept, scores) == (43_187_200.0, 23_520_000.0)
    kept, _ = eager_activation_terms(**args, frozen=1.0, quantized=1.0)
    assert kept == 350 * (12 * 4096 + 8 * 4096 + 8 * 11008)  # QLoRA: bitsandbytes keeps the 4-bit linears' inputs
    flash = eager_activation_terms(**{**args, "standard_attention": 0.0}, frozen=0.0, quantized=0.0)
    assert flash[1] == 0.0  # FlashAttention 2 keeps no score


def test_eager_activations_raise_the_step_peak_only_where_activations_set_it():
    """Issue 21: with the eager layer's saved tensors, the 7B ZeRO-3 offload run (its peak is the forward/backward,
    activations held) keeps more than Megatron's count, by the difference of the two counts over its 32 layers;
    op-level selective checkpointing (torchtitan) recomputes the element-wise ops and keeps Megatron's count."""
    base = {"system": "rtx4090", "zero": 3, "offload": "all", "stack": "deepspeed-2023"}
    eager_row = train(**base)
    fused_row = train(**base, kernels="fused")
    extra = 32 * 350 * ((24 * 4096 + 8 * 11008) - (18 * 4096 + 6 * 11008)) + 32 * 32 * 350 ** 2 * (6 - 5)
    assert eager_row["mem_activations_bytes"] - fused_row["mem_activations_bytes"] == pytest.approx(extra, rel=1e-3)
    op = {"system": "h100-sxm-80gb", "stack": "torchtitan-2024.12", "recompute": "op", "zero": 3}
    assert train(**op)["mem_activations_bytes"] == pytest.approx(train(**op, kernels="fused")["mem_activations_bytes"],
                                                                rel=1e-6)


def test_peft_adapter_outputs_take_the_query_width():
    """HF PEFT's scaling and add run over each adapted module's output features.  Qwen3-32B (hidden 5120, 64 heads of
    head_dim 128, 8 KV heads, FFN 25600; its config.json) has a q_proj of 64 x 128 = 8192 outputs, not 5120: on every
    linear the outputs are q 8192 + k 1024 + v 1024 + o 5120 + gate 25600 + up 25600 + down 5120 = 71,680 per token;
    on q and v, 9216."""
    from dse.cost.eager import adapted_outputs
    assert adapted_outputs(0, 5120.0, 8192.0, 1024.0, 25600.0, 3.0) == 8192 + 2 * 1024 + 5120 + 2 * 25600 + 5120
    assert adapted_outputs(2, 5120.0, 8192.0, 1024.0, 25600.0, 3.0) == 8192 + 1024
    assert adapted_outputs(1, 5120.0, 8192.0, 1024.0, 25600.0, 3.0) == 8192 + 2 * 1024 + 5120


def test_explain_names_launches_grad_copies_cpu_adam_and_host_copies():
    """Issue 21 asks dse explain to show the CPU optimizer step, the offload traffic and the launch overhead as named
    rows: the eager layers' kernels at EAGER_KERNEL_S each (46 forward + 83 backward per Llama layer with the unfused
    attention, 32 layers, one micro-batch), the gradient bucket copies inside the data-parallel sync, and the CPU Adam
    step and the exposed host copies that make up the offload time."""
    from dse.explain import explain_row, format_explain
    naive = explain_row({**BASE, "system": "a800-sxm-80gb", "zero": 0, "stack": "deepspeed-2023",
                         "attention": "standard"})
    assert naive["detail_kernel_launch_s"] == pytest.approx(32 * (46 + 83) * K.EAGER_KERNEL_S, rel=1e-5)
    assert 0 < naive["detail_grad_copy_s"] <= naive["time_dp_comm_s"]
    offload = explain_row({**BASE, "system": "rtx4090", "zero": 2, "offload": "optimizer",
                           "stack": "deepspeed-2023"})
    assert offload["detail_cpu_adam_s"] > 0 and offload["detail_offload_copies_s"] > 0
    assert offload["detail_cpu_adam_s"] + offload["detail_offload_copies_s"] == pytest.approx(
        offload["time_offload_s"], rel=1e-5)
    text = format_explain(offload)
    for label in ("eager kernels' fixed time", "gradient bucket copies", "CPU Adam step", "host copies (exposed)"):
        assert f"of which {label}" in text
