"""Issue 10: the in-flight batching model (task: serve) — its laws, its limits, its reasons, and the shared
TensorRT-LLM 0.10.0 measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from dse import codes
from dse.cli import main
from dse.frame import InputError, evaluate, evaluate_infer, evaluate_serve
from dse.validation.validate import summarize, validate_file

BASE = {"model": "llama2-70b", "system": "h100-sxm-80gb", "tp": 4, "input_len": 512, "output_len": 256,
        "precision": "fp8"}


def serve(**changes) -> pd.Series:
    return evaluate_serve(pd.DataFrame([{**BASE, **changes}])).iloc[0]


def test_light_load_batch_one_meets_the_static_batch_model():
    """At request_rate -> 0 with batch 1 a request is alone in the engine: its TTFT and TPOT are the static
    batch-1 model's prefill and decode step.  (With batch 1 the engine is an M/D/1 queue whose mean wait,
    rho * S / 2, vanishes only with the rate: at 1e-4 requests/s it is still 0.7 ms of 37, hence 1e-6.)"""
    s = serve(batch=1, request_rate=1e-6)
    i = evaluate_infer(pd.DataFrame([{**BASE, "batch": 1}])).iloc[0]
    assert s["ttft_s"] == pytest.approx(i["ttft_s"], rel=1e-3)
    assert s["tpot_s"] == pytest.approx(i["tpot_s"], rel=1e-3)


@pytest.mark.parametrize("rate", [0.5, 2.0, 6.0])
def test_littles_law_at_steady_state(rate):
    """Concurrency = arrival rate x time in system (TTFT + (output_len - 1) x TPOT), within the fixed point's
    tolerance; what is offered is what is served."""
    s = serve(request_rate=rate)
    assert s["requests_per_s"] == pytest.approx(rate, rel=1e-6)
    in_system = s["ttft_s"] + (BASE["output_len"] - 1) * s["tpot_s"]
    assert s["running_requests"] == pytest.approx(rate * in_system, rel=0.03)
    assert s["tokens_per_s_per_user"] == pytest.approx(1.0 / s["tpot_s"])


def test_concurrency_never_exceeds_batch_or_kv_capacity():
    rows = pd.DataFrame([{**BASE, "batch": b, "input_len": i, "output_len": o, "max_num_tokens": n}
                         for b in (8, 64, 2048, None) for i, o in ((128, 128), (2048, 2048)) for n in (2048, None)])
    out = evaluate_serve(rows)
    cap = np.minimum(pd.to_numeric(rows["batch"]).fillna(np.inf), out["kv_capacity_requests"])
    assert (out["running_requests"] <= cap * (1 + 1e-9)).all()
    assert (out["kv_cache_utilization"] <= 1.0 + 1e-9).all()
    assert set(out["limit"]) <= {"batch", "kv_memory", "tokens"}  # maximum load: a cap binds


def test_overload_is_a_reason_not_a_number():
    s = serve(request_rate=1e6)
    assert s["infeasible_reason"] == "overloaded" and not s["fits"] and np.isnan(s["ttft_s"])
    capacity = serve()["requests_per_s"]
    assert serve(request_rate=0.9 * capacity)["infeasible_reason"] == ""
    assert serve(request_rate=1.01 * capacity)["infeasible_reason"] == "overloaded"


def test_a_model_too_big_for_the_gpu_has_a_reason():
    s = serve(model="llama3.1-405b", tp=1)
    assert s["infeasible_reason"] == "exceeds_hbm" and not s["fits"]


def test_pipeline_stages_raise_throughput_not_token_latency():
    one = serve(tp=4, pp=1, system="a100-sxm-80gb", precision="fp16")
    two = serve(tp=2, pp=2, system="a100-sxm-80gb", precision="fp16", batch=int(one["running_requests"]))
    assert two["tpot_s"] > 0.5 * one["tpot_s"]  # a token crosses every stage


def test_bad_serve_inputs_are_refused():
    for bad in ("fast", -1, 0):
        with pytest.raises(InputError, match="request_rate"):
            evaluate_serve(pd.DataFrame([{**BASE, "request_rate": bad}]))
    with pytest.raises(InputError, match="max_num_tokens"):
        evaluate_serve(pd.DataFrame([{**BASE, "max_num_tokens": 0}]))
    out = evaluate(pd.DataFrame([{**BASE, "task": "serve"}]))
    assert out["output_tokens_per_s_per_gpu"].notna().all()


def test_explain_serve_prints_limit_latencies_and_breakdown(capsys):
    argv = ["explain", "--task", "serve", "--model", "llama3-70b", "--system", "h100-sxm-80gb", "--tp", "4",
            "--input-len", "2048", "--output-len", "128", "--precision", "fp8", "--stack", "tensorrt-llm-0.10.0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for text in ("binding limit:", "time to first token", "time per output token", "decode attention (KV reads)",
                 "KV cache capacity", "ceiling: KV reads at peak HBM"):
        assert text in out, text
    assert len(out.splitlines()) <= 40  # one screen


def test_explain_serve_names_the_expert_width_factor(capsys):
    """A MoE model's serving explanation says how wide its routed experts are on one GPU and the fraction of their
    grouped-GEMM rate that width gives (Qwen3-30B-A3B: 768 wide, 768 / MOE_GEMM_FULL_WIDTH); a dense model's
    does not have the line."""
    from dse.cost import constants as K

    base = ["explain", "--task", "serve", "--system", "b200", "--tp", "1", "--input-len", "1000",
            "--output-len", "1000"]
    assert main([*base, "--model", "qwen3-30b-a3b", "--precision", "fp4"]) == 0
    out = capsys.readouterr().out
    assert f"routed experts 768 wide per GPU: grouped GEMMs at {768 / K.MOE_GEMM_FULL_WIDTH:.2f}" in out
    assert main([*base, "--model", "llama3-8b"]) == 0
    assert "routed experts" not in capsys.readouterr().out


def test_explain_serve_names_the_gpus_measured_moe_kernel_rates(capsys):
    """The serving explanation of NVFP4 routed experts states the fractions the kernel applies: the GPU's measured
    MoE kernel columns where its efficiency row has them (RTX PRO 6000: blackwell-sm120's moe_fp4_gemm_eff and
    moe_fp4_stream_eff), B200's constants elsewhere."""
    from dse.cost import constants as K
    from dse.hardware import catalog as hwcat

    eff = hwcat.efficiency().loc["blackwell-sm120"]
    base = ["explain", "--task", "serve", "--tp", "1", "--model", "qwen3-30b-a3b", "--precision", "fp4",
            "--input-len", "1000", "--output-len", "1000"]
    for system, (g, s) in (("rtx-pro-6000", (eff["moe_fp4_gemm_eff"], eff["moe_fp4_stream_eff"])),
                           ("b200", (K.MOE_NVFP4_GEMM_FRACTION, K.MOE_NVFP4_STREAM_FRACTION))):
        assert main([*base, "--system", system]) == 0
        out = capsys.readouterr().out
        assert f"grouped GEMMs at {g:.3f} of the dense GEMM rate, their weights streamed at {s:.3f}" in out, system


def test_explain_prints_the_kv_read_ceiling_of_the_configuration(capsys):
    """dse explain (serve and infer) sets the output rate against decode_hbm_bound, the same bound dse validate
    checks measurements against: the rate it predicts stays below it."""
    from dse.explain import HBM_BOUND, explain_row
    from dse.frame import evaluate_decode_bound

    config = {"task": "infer", "model": "llama2-70b", "system": "a100-sxm-80gb", "tp": 4, "batch": 64,
              "input_len": 512, "output_len": 512, "precision": "fp16"}
    row = explain_row(config)
    assert row[HBM_BOUND] == pytest.approx(evaluate_decode_bound(pd.DataFrame([config]), "infer")[0])
    assert row["output_tokens_per_s_per_gpu"] < row[HBM_BOUND]
    argv = ["explain", *[a for k, v in config.items() for a in (f"--{k.replace('_', '-')}", str(v))]]
    assert main(argv) == 0
    assert "ceiling: KV reads at peak HBM" in capsys.readouterr().out


def test_trtllm_0_10_serve_file(ref):
    """The shared in-flight batching measurements: every row is predicted (MoE included) but the one above the
    HBM bound of its configuration (GPT-J 6B FP8 128/2048, 4.3x), MAPE within issue 22's target of 10 %.
    Measured with the shipped constants: 9.41 % (10.03 % with that row scored; 18.1 % before the decode kernels
    of that release were modelled as issue-bound; see the README for the rows the model does not explain)."""
    results = validate_file(ref / "trtllm_0.10.0_serve_a100_h100.csv")
    (summary,) = summarize(results)
    print(f"\nserve MAPE {summary['mape_pct']:.2f} % over {summary['n']} rows")
    assert summary["skipped"] == 1 and summary["n"] == 122
    (skipped,) = [r for r in results if r.skipped is not None]
    assert "gptj-6b-tp1pp1-in128-out2048-fp8" in skipped.case and "HBM bound" in skipped.skipped
    assert summary["mape_pct"] <= 10.0


def test_held_out_tensorrt_llm_1_0_llama33_70b():
    """Out of sample (nothing fitted on it): TensorRT-LLM 1.0 Llama-3.3 70B max-load throughput on H100, H200,
    B200, GB200 and the RTX PRO 6000 (tests/cases).  Measured: MAPE 12.8 % over 42 runs (11.8 % before CUDA graphs
    and the KV reservation to completion were modelled; 13.7 % before the fp4 GEMM efficiency was scaled from
    kernel benchmarks); Hopper FP8 within ~15 % per run; Blackwell FP4 -9 .. +24 %.
    The bounds are regression bounds, not claims of accuracy."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "trtllm_1.0_llama33_70b_serve.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 42 and summary["mape_pct"] <= 15.0
    hopper = [abs(r.error_pct) for r in results if "h100" in r.case or "h200" in r.case]
    # 16.5 % since the decode passes of TensorRT-LLM 1.0 (CUDA graphs on by default) pay the graph-replay
    # overhead fitted on NIM 1.8 instead of the 2024 eager one: the worst Hopper row went 15.9 -> 16.5 %; 17.6 %
    # since prompt attention runs at TensorRT-LLM's measured context-attention rate (infer_attention_eff) and the
    # inference constants were refitted with it (Hopper's fp8 GEMM efficiency 0.674 -> 0.658; the file 12.1 -> 11.7 %)
    assert max(hopper) <= 18.0


def test_held_out_tensorrt_llm_1_0_dense_rest():
    """Out of sample (nothing fitted on it): the rest of TensorRT-LLM 1.0's dense perf-overview tables (tests/cases,
    104 runs: Llama 3.1 8B and 405B, Llama 3.3 70B at three more lengths and on 2- and 4-stage RTX PRO 6000
    pipelines).  Measured: MAPE 9.4 %, every row predicted (405B's 126 layers over 8 stages split 16/.../15 as the
    engine splits them).  Regression bounds, not claims of accuracy."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "trtllm_1.0_dense_serve_more.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 104 and summary["skipped"] == 0 and summary["mape_pct"] <= 10.0


def test_held_out_tensorrt_llm_0_10_h200_l40s():
    """Out of sample (nothing fitted on it): the H200 FP8 and L40S FP8/FP16 columns of the same TensorRT-LLM
    0.10.0 table whose A100/H100 columns are the shared serve file (tests/cases, 108 runs).  Measured:
    MAPE 24.4 % (27.7 % before the KV reservation to completion); before it, H200 18.5 % (27.2 % before the
    issue-bound decode kernels; Hopper's constants were fitted on H100 rows only), L40S FP8 38.5 % and FP16
    36.2 % (19.8 / 23.0 % before: Ada's per-clock rate is an ASSUMPTION, the Hopper value, and the L40S rows say
    it is 2-10x too fast).  The bounds record today's
    figures so a change that makes them worse is seen; they are not claims of accuracy (README "Serving")."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "trtllm_0.10.0_serve_h200_l40s.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 108 and summary["skipped"] == 0
    assert summary["mape_pct"] <= 28.5
    h200 = [abs(r.error_pct) for r in results if "h200" in r.case]
    assert np.mean(h200) <= 19.5


SPACE = {"name": "s", "task": "serve", "grid": {
    "model": "llama3.3-70b", "system": ["h100-sxm-80gb", "b200"], "tp": [2, 4], "batch": [16, 256],
    "input_len": 1000, "output_len": 1000, "precision": ["fp8"], "request_rate": [0.5, 4.0, 1000.0],
    "stack": "tensorrt-llm-1.0"}, "constraints": {"divisible": False}}


def test_serve_sweep_rows_equal_the_table_path():
    """One code path: a serve sweep's rows are what dse.evaluate gives for the same configurations."""
    from dse.grid import Grid
    from dse.spec import resolve_spec
    from dse.sweep import evaluate_points

    spec = resolve_spec(SPACE, "<test>")
    swept = evaluate_points(spec, Grid(spec), 0, spec.size).to_pandas()
    assert len(swept) == spec.size and (swept["infeasible_reason"] == "overloaded").any()
    table = evaluate(swept[["model", "system", "tp", "batch", "input_len", "output_len", "precision", "request_rate",
                            "stack"]].astype(object).assign(task="serve"))
    ok = swept["fits"].to_numpy()
    np.testing.assert_allclose(swept.loc[ok, "output_tokens_per_s_per_gpu"],
                               table.loc[ok, "output_tokens_per_s_per_gpu"], rtol=2e-3)
    assert list(swept["infeasible_reason"].astype(str)) == list(table["infeasible_reason"].astype(str))


@pytest.mark.parametrize("grid,fragment", [
    ({"request_rate": -2.0}, "request_rate"),
    ({"request_rate": "fast"}, "request_rate"),
    ({"max_num_tokens": 0}, "max_num_tokens"),
    ({"global_batch": 64}, "global_batch"),
    ({"stack": "vllm-9"}, "stack"),
    ({"decode_kv_reads": "sometimes"}, "decode_kv_reads"),
    ({"spec_acceptance": 1.5}, "spec_acceptance"),
    ({"spec_acceptance": 0}, "spec_acceptance"),
    ({"spec_method": "medusa"}, "spec_method"),
    ({"spec_method": "eagle", "spec_tokens": 2}, "spec_acceptance"),  # an EAGLE head's rate has no default
])
def test_malformed_serve_specs_exit_2(tmp_path, capsys, grid, fragment):
    import yaml

    spec = {**SPACE, "grid": {**SPACE["grid"], **grid}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "-o", str(tmp_path / "out")]) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_serving_space_plots_its_frontier(tmp_path):
    from pathlib import Path

    from dse.plots import draw_standard_figures

    space = Path(__file__).resolve().parents[1] / "spaces" / "serve-llama3.3-70b.yaml"
    assert main(["run", str(space), "-o", str(tmp_path / "res"), "--jobs", "1", "-q"]) == 0
    written = draw_standard_figures(tmp_path / "res", tmp_path / "fig")
    assert (tmp_path / "fig" / "pareto_throughput_interactivity.png") in written


def test_kv_transfer_is_its_bytes_over_the_placement_link():
    """Disaggregated pair: one request's KV (input_len x layers x 2 x kv_heads x head_dim x bytes) crosses
    NVLink when both pools fit one scale-up domain, else the NICs, over min(prefill tp, decode tp*pp) pairs."""
    from dse.cost.serving import kv_transfer
    from dse.frame import serve_inputs
    from dse.hardware import catalog as hwcat

    rows = pd.DataFrame([{**BASE, "tp": 4, "dp": 1, "prefill_gpus": 4, "prefill_tp": 4, "input_len": 4000},
                         {**BASE, "tp": 4, "dp": 2, "prefill_gpus": 8, "prefill_tp": 2, "input_len": 4000}])
    x, systems = serve_inputs(rows)
    hw = hwcat.hardware_columns(systems)
    nbytes, bw, t = kv_transfer({**x, **hw})
    expected = 4000 * 80 * 2 * 8 * 128 * 1.0  # llama2-70b, fp8 math -> 1-byte KV
    np.testing.assert_allclose(nbytes, expected)
    assert bw[0] == pytest.approx(4 * hw["scaleup_ring_bw"][0])  # 4 + 4 GPUs: one NVLink domain of 8
    assert bw[1] == pytest.approx(2 * hw["scaleout_bw"][1])  # 8 + 8 GPUs: across servers, 2 NIC pairs
    np.testing.assert_allclose(t, nbytes / bw + np.where([True, False], hw["scaleup_latency_s"],
                                                          hw["scaleout_latency_s"]))


def test_disaggregation_trades_throughput_for_token_latency():
    """Same 8 GPUs: under a moderate load a separate prefill pool removes prompt chunks from the decode passes
    (lower TPOT); at maximum load the aggregated engine serves more (the prefill pool binds)."""
    agg = {**BASE, "model": "llama3.3-70b", "tp": 4, "dp": 2, "input_len": 4000, "output_len": 500}
    dis = {**agg, "dp": 1, "prefill_gpus": 4, "prefill_tp": 2}
    loaded = evaluate_serve(pd.DataFrame([{**agg, "request_rate": 2.0}, {**dis, "request_rate": 2.0}]))
    assert loaded["tpot_s"][1] < loaded["tpot_s"][0]
    full = evaluate_serve(pd.DataFrame([agg, dis]))
    assert full["output_tokens_per_s_per_gpu"][0] > full["output_tokens_per_s_per_gpu"][1]
    assert full["limit"][1] == "prefill_pool"
    bad = evaluate_serve(pd.DataFrame([{**dis, "prefill_gpus": 3}])).iloc[0]
    assert bad["infeasible_reason"] == "prefill pool does not divide"


def test_closed_form_fixed_point_is_exact_for_dense_models():
    """Dense rows skip the refinement steps: their iteration time is affine in the requests, so the closed
    form already is the fixed point X = min(λ·t(X), cap) (checked against the iterated solution)."""
    import numpy as np

    from dse.bench.kernels import random_serve_configs
    from dse.cost import serving
    from dse.hardware import catalog as hwcat

    x, systems = random_serve_configs(4000, seed=3)
    dense = (x["experts"] <= 1) & ~np.isnan(x["request_rate"]) & np.isnan(x["prefill_gpus"]) & ~serving.curved_host(x)
    xs = {k: v[dense] for k, v in x.items()}
    hw = hwcat.hardware_columns(systems[dense])
    xk = {**xs, **{k: np.asarray(v, dtype=np.float64) for k, v in hw.items()}}
    _, rate, act, wb = serving._rates(xk)
    lam, cap = xk["request_rate"] / xk["dp"], np.full(int(dense.sum()), 1e9)
    with np.errstate(all="ignore"):  # rows without a rate at their precision (fp8 on A100) give inf / NaN
        terms = serving._iteration_terms(xk, rate, act, wb)
    t_of = lambda v: serving._iteration(terms, v)[0]  # noqa: E731
    with np.errstate(all="ignore"):
        closed = serving._fixed_point(t_of, lam, cap, affine=True)
        iterated = serving._fixed_point(t_of, lam, cap, affine=False)
        ok = np.isfinite(closed) & (lam * t_of(closed + 1.0) < closed + 1.0)  # below capacity
    assert ok.sum() > 100
    np.testing.assert_allclose(closed[ok], iterated[ok], rtol=1e-6)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(closed[ok], lam[ok] * t_of(closed)[ok], rtol=1e-6)


def _decode_attention(system: str, model: str, precision: str, reads: int, tp: int = 1, ctx: float = 2048.0):
    """Seconds of one decode token's attention in one layer, from the kernel function itself."""
    from dse.cost.architecture import ARCHITECTURE_COLUMNS
    from dse.cost.inference import decode_attention_time, kv_bytes_per_value
    from dse.hardware import catalog as hwcat
    from dse.models.catalog import models

    m = models().loc[model]
    hw = hwcat.hardware_columns(hwcat.system_codes([system]))
    x = {k: np.asarray(v, dtype=np.float64) for k, v in hw.items()}
    x.update(hidden=np.float64(m["hidden"]), heads=np.float64(m["heads"]), kv_heads=np.float64(m["kv_heads"]),
             tp=np.float64(tp), decode_kv_reads=np.float64(reads))
    for k in ("layers", "ffn_hidden", "experts", "top_k"):
        x[k] = np.float64(m[k])
    x["mlp"] = np.float64(m["mlp_code"])
    x.update({k: np.float64(0.0) for k in ARCHITECTURE_COLUMNS})  # a plain GQA model
    kv_b = kv_bytes_per_value(np.float64(0), np.float64(codes_precision(precision)))
    kvh = np.maximum(x["kv_heads"] / tp, 1.0)
    t, kv_bytes = decode_attention_time(np.float64(ctx), x, kvh, kv_b)
    return float(t[0]), float(kv_bytes), x


def codes_precision(name: str) -> int:
    from dse import codes

    return codes.PRECISION.index(name)


def test_flash_style_decode_reads_the_kv_once_at_the_roofline():
    """decode_kv_reads = per_kv_head: 4·ctx·h/tp FLOPs at the attention rate plus ctx·2·kv_heads·d·bytes at the
    HBM rate (the serial roofline every other inference op uses)."""
    t, kv_bytes, x = _decode_attention("h100-sxm-80gb", "llama3-70b", "fp16", reads=0, tp=4)
    d = 8192 / 64
    assert kv_bytes == pytest.approx(2048 * 2 * 2 * d * 2)
    assert t == pytest.approx(4 * 2048 * 8192 / 4 / x["attention_rate"][0] + kv_bytes / x["memory_rate"][0])


def test_masked_mha_is_issue_bound_per_query_head():
    """decode_kv_reads = per_query_head (TensorRT-LLM 0.10): the KV comes from HBM once, the kernel processes
    2·ctx·d elements per query head at (SMs x clock x the fitted rate per SM-clock).  Llama-3 8B (4 query heads
    per KV head) on H100 at FP16: the element work (4 x 2048 x 2 x 128 x 8 heads at 132 SMs x 1.98 GHz x rate)
    exceeds the KV read (2048 x 2 x 8 x 128 x 2 bytes at the HBM rate), so the issue bound is the time."""
    from dse.hardware import catalog as hwcat

    t, kv_bytes, x = _decode_attention("h100-sxm-80gb", "llama3-8b", "fp16", reads=1)
    per_clk = float(hwcat.efficiency().loc["hopper", "mmha_elements_per_clk"])
    sm_clocks = 132 * 1.98e9  # H100 SXM5: 132 SMs at 1980 MHz (67 TFLOPS FP32 = 132 x 128 lanes x 2 x 1.98 GHz)
    elements = 2048 * 2 * 128 * 32
    assert x["mmha_rate"][0] == pytest.approx(sm_clocks * per_clk, rel=2e-3)
    assert t == pytest.approx(elements / (sm_clocks * per_clk), rel=2e-3)
    assert t > kv_bytes / x["memory_rate"][0]
    # FP8 KV halves the bytes, not the elements: same time (the H100 rows show FP8 and FP16 KV alike per element)
    t8, _, _ = _decode_attention("h100-sxm-80gb", "llama3-8b", "fp8", reads=1)
    assert t8 == pytest.approx(t)
    # an MHA model (one query head per KV head) is bound by the KV read instead, as before
    t_mha, kv_mha, x = _decode_attention("h100-sxm-80gb", "llama2-7b", "fp16", reads=1)
    assert t_mha == pytest.approx(kv_mha / x["memory_rate"][0])


def test_hopper_xqa_only_for_the_shape_and_cache_it_ships():
    """TensorRT-LLM 0.10's Hopper XQA kernel: SM 90, an FP8 (E4M3) KV cache, 8 query heads per KV head, head_dim
    128 (Llama-2/3 70B).  There it streams the cache per KV head at its fraction of the HBM bandwidth, so the
    H200 (1.43x the H100's bandwidth, the same SMs and clock) runs it 1.43x faster, while the issue-bound masked
    MHA runs at H100 speed; FP16 KV, A100, Llama-3 8B (4 per KV head) and the Ada L40S keep the masked-MHA
    bound."""
    from dse.hardware import catalog as hwcat

    t, _, x = _decode_attention("h100-sxm-80gb", "llama3-70b", "fp8", reads=1, tp=4)
    eff = float(hwcat.efficiency().loc["hopper", "xqa_memory_eff"])
    assert t == pytest.approx(2048 * 2 * 128 * 2 / (3.35e12 * eff), rel=1e-6)  # 2 KV heads per GPU, 1 byte each
    t200, _, _ = _decode_attention("h200-sxm-141gb", "llama3-70b", "fp8", reads=1, tp=4)
    assert t200 == pytest.approx(t * 3.35 / 4.8, rel=1e-6)
    assert _decode_attention("h200-sxm-141gb", "llama3-8b", "fp8", reads=1)[0] == pytest.approx(
        _decode_attention("h100-sxm-80gb", "llama3-8b", "fp8", reads=1)[0], rel=1e-6)
    t16, _, _ = _decode_attention("h100-sxm-80gb", "llama3-70b", "fp16", reads=1, tp=4)
    mmha = 2048 * 2 * 128 * 16 / x["mmha_rate"][0]  # 16 query heads per GPU
    assert t16 == pytest.approx(mmha, rel=1e-6)
    for system in ("a100-sxm-80gb", "l40s"):
        assert _decode_attention(system, "llama3-70b", "fp8", reads=1, tp=4)[2]["xqa_rate"][0] == 0.0
    t8b, _, x8b = _decode_attention("h100-sxm-80gb", "llama3-8b", "fp8", reads=1)
    assert t8b == pytest.approx(2048 * 2 * 128 * 32 / x8b["mmha_rate"][0], rel=1e-6)


def test_one_issue_rate_per_sm_clock_fits_ampere_and_hopper():
    """The masked-MHA rate is fitted per generation, Ampere on the A100 rows and Hopper on the H100 rows,
    independently; they agree within 15 % (13.79 and 12.11 elements per SM-clock with the runs taken as the bursts
    of 2000 requests they were, 13.39 and 11.89 as maximum-load steady states once the GPT-J FP8 128/2048 row,
    above its HBM bound, left the fit; 13.41 and 12.24 with it, with the time per admitted request; 13.67 and
    12.24 with the time per running request instead; 13.47 and 12.24 before the
    engines' all-reduce kernels were measured, 12.86 and 12.24 before the batch manager's host time per request was
    modelled, 11.05 and 11.42 before the KV reservation to completion), which is close to what an instruction-issue
    bound predicts: both SMs issue 4 warp instructions per clock.  The H200 (held out) serves the issue-bound rows
    at H100 speed, as published (Llama-3 8B FP8 128/2048: 8 368 against 8 014 tokens/s)."""
    from dse.hardware import catalog as hwcat

    eff = hwcat.efficiency()
    a, h = float(eff.loc["ampere", "mmha_elements_per_clk"]), float(eff.loc["hopper", "mmha_elements_per_clk"])
    assert abs(a / h - 1.0) <= 0.15
    t_h100, _, _ = _decode_attention("h100-sxm-80gb", "llama3-8b", "fp8", reads=1)
    t_h200, _, _ = _decode_attention("h200-sxm-141gb", "llama3-8b", "fp8", reads=1)
    assert t_h200 == pytest.approx(t_h100)


# ---- closed loops (issue 22: `concurrency` clients, each sending its next request when its last one ends) ----

def test_closed_loop_below_capacity_runs_every_client_and_none_waits():
    """N clients below the batch limit and the KV capacity: the engine runs all N (limit `clients`), nobody
    queues, and Little's law over the closed network holds: N = requests/s x (TTFT + (output_len - 1) TPOT)."""
    s = serve(concurrency=8)
    assert s["running_requests"] == pytest.approx(8.0, rel=1e-6)
    assert s["queue_wait_s"] == 0.0 and s["limit"] == "clients"
    in_system = s["ttft_s"] + (BASE["output_len"] - 1) * s["tpot_s"]
    assert 8.0 == pytest.approx(s["requests_per_s"] * in_system, rel=0.05)


def test_closed_loop_past_the_batch_limit_queues_and_saturates():
    """Past the engine's batch limit the throughput stays at the limit's and every extra client adds
    1 / requests_per_s to the wait before admission (TTFT grows linearly with N; TPOT does not move)."""
    at, past, far = serve(batch=16, concurrency=16), serve(batch=16, concurrency=32), serve(batch=16, concurrency=64)
    assert past["output_tokens_per_s"] == pytest.approx(at["output_tokens_per_s"], rel=1e-6)
    assert past["tpot_s"] == pytest.approx(at["tpot_s"], rel=1e-6)
    assert past["limit"] == "batch" and at["queue_wait_s"] == 0.0
    assert past["queue_wait_s"] == pytest.approx(16 / past["requests_per_s"], rel=1e-6)
    assert far["ttft_s"] - past["ttft_s"] == pytest.approx(32 / past["requests_per_s"], rel=1e-6)


def test_closed_loop_is_maximum_load_limited_by_the_clients():
    """A closed loop of N clients is the maximum-load steady state of an engine whose batch limit is N."""
    closed, limited = serve(concurrency=24), serve(batch=24)
    for col in ("output_tokens_per_s", "tpot_s", "ttft_s", "running_requests"):
        assert closed[col] == pytest.approx(limited[col], rel=1e-6), col


def test_concurrency_and_request_rate_together_are_refused():
    with pytest.raises(InputError, match="'concurrency' and 'request_rate': both given"):
        serve(concurrency=4, request_rate=2.0)
    with pytest.raises(InputError, match="column 'concurrency': value 0 is not allowed"):
        serve(concurrency=0)


def test_an_overloaded_grid_is_written_and_named_with_its_capacity(tmp_path, capsys):
    """Issue 24: an all-overloaded serve grid said only "all fail the constraints": overloaded rows were dropped
    as if they did not divide.  They are answers, written with their reason; when a --keep leaves nothing, the
    message names the reason, the rates offered and the most any configuration serves."""

    spec = tmp_path / "over.yaml"
    spec.write_text(yaml.safe_dump({"name": "over", "task": "serve", "grid": {
        "model": "llama3-8b", "system": "h100-sxm-80gb", "tp": [1, 2], "input_len": 1000, "output_len": 100,
        "request_rate": [1000.0, 5000.0]}}))
    assert main(["run", str(spec), "-o", str(tmp_path / "all"), "-q", "--jobs", "1"]) == 0
    rows = pd.read_parquet(tmp_path / "all")
    assert len(rows) == 4 and set(rows["infeasible_reason"].astype(str)) == {"overloaded"}
    assert main(["info", str(tmp_path / "all")]) == 0
    assert "reasons of the others: overloaded 4" in capsys.readouterr().out
    assert main(["run", str(spec), "-o", str(tmp_path / "kept"), "-q", "--keep", "feasible"]) == 2
    err = capsys.readouterr().err
    capacity = max(serve(model="llama3-8b", system="h100-sxm-80gb", tp=tp, input_len=1000, output_len=100,
                         precision="bf16")["requests_per_s"] for tp in (1, 2))
    assert err.count("\n") == 1 and "the model's answers before them: overloaded 4 (offered 1,000 to 5,000 " \
        f"requests/s; the most any of them serves, at maximum load, is {capacity:,.3g} requests/s)" in err, err
    assert not (tmp_path / "kept").exists()


@pytest.mark.parametrize("row,fragment", [
    ({}, "missing column 'input_len' (required for task 'serve'"),
    ({"input_len": None}, "column 'input_len': empty, but a value is required for task 'serve'"),
])
def test_a_serve_row_missing_input_len_names_task_serve(row, fragment):
    """Issue 24: a serve row without input_len said "required for task 'infer'"."""
    base = {k: v for k, v in BASE.items() if k != "input_len"}
    with pytest.raises(InputError) as caught:
        evaluate_serve(pd.DataFrame([{**base, **row}]), "cases.csv")
    assert fragment in str(caught.value) and "'infer'" not in str(caught.value)


# ---- think time, bursts and latency percentiles (issue 22, items 1 and 3) -----------------------------------

ROW_COLUMNS = ("output_tokens_per_s", "requests_per_s", "ttft_s", "tpot_s", "running_requests", "queue_wait_s",
               "iteration_ms", "kv_cache_bytes", "limit", "infeasible_reason")


@pytest.mark.parametrize("extra", [{"think_time_s": 0.0}, {"arrival": "closed"},
                                   {"think_time_s": 0.0, "arrival": "closed"}])
@pytest.mark.parametrize("loop", [{"concurrency": 24}, {"concurrency": 64, "batch": 16},
                                  {"concurrency": 8, "prefill_gpus": 4, "prefill_tp": 2}])
def test_no_think_time_is_the_closed_loop_of_before_exactly(loop, extra):
    """A think time of 0 (or arrival named `closed`) is the loop without one: every output bit for bit, the
    disaggregated model too."""
    plain, same = serve(**loop), serve(**loop, **extra)
    for col in (*ROW_COLUMNS, "ttft_p99_s", "tpot_p90_s"):
        assert plain[col] == same[col], col


def test_think_time_satisfies_littles_law_over_the_closed_network():
    """N clients = throughput x (time in system + Z): the response-time law the model solves (the time in
    system as TTFT + (output_len - 1) TPOT, as the closed loop without think time checks it, within 5 %)."""
    for z in (0.5, 2.0, 10.0):
        s = serve(concurrency=32, think_time_s=z)
        in_system = s["ttft_s"] + (BASE["output_len"] - 1) * s["tpot_s"]
        assert 32.0 == pytest.approx(s["requests_per_s"] * (in_system + z), rel=0.05), z
        assert s["queue_wait_s"] == 0.0 and s["limit"] == "clients"
        assert s["running_requests"] < 32.0


def test_think_time_lowers_the_load_monotonically_and_long_thinking_meets_the_asymptotic_bound():
    """Throughput falls and TPOT improves as clients think longer; for Z much longer than a request the engine is
    nearly empty and throughput tends to N / (D + Z), D the light-load time in system (Lazowska et al. 1984 §5.2)."""
    runs = [serve(concurrency=32, think_time_s=z) for z in (0.0, 1.0, 4.0, 16.0, 1000.0)]
    rates = [r["requests_per_s"] for r in runs]
    assert rates == sorted(rates, reverse=True)
    assert [r["tpot_s"] for r in runs] == sorted(r["tpot_s"] for r in runs)[::-1]
    alone = serve(concurrency=1)
    light = alone["ttft_s"] + (BASE["output_len"] - 1) * alone["tpot_s"]
    assert runs[-1]["requests_per_s"] == pytest.approx(32.0 / (light + 1000.0), rel=0.01)


def test_saturated_think_time_queues_the_clients_who_are_not_thinking():
    """With the engine at its batch limit the throughput is the limit's whatever Z; the clients neither running
    nor thinking wait: queue_wait = (N - Z R - C) / R (Little's law on the think station: Z R clients think)."""
    cap, n, z = serve(batch=16, concurrency=64), 64, 0.5
    s = serve(batch=16, concurrency=n, think_time_s=z)
    r = s["requests_per_s"]
    assert r == pytest.approx(cap["requests_per_s"], rel=1e-6) and s["limit"] == "batch"
    assert s["queue_wait_s"] == pytest.approx((n - z * r - s["running_requests"]) / r, rel=1e-6)
    assert 0.0 < s["queue_wait_s"] < cap["queue_wait_s"]


def test_a_burst_within_the_engine_is_one_wave_served_as_the_closed_loop():
    """N <= the engine's concurrency: all N admitted at t = 0, no wait; the wave runs at the steady state of N
    running, so throughput is the closed loop's of N clients."""
    burst, loop = serve(concurrency=12, arrival="burst"), serve(concurrency=12)
    assert burst["queue_wait_s"] == 0.0
    assert burst["requests_per_s"] == pytest.approx(loop["requests_per_s"], rel=1e-6)
    assert burst["tpot_s"] == pytest.approx(loop["tpot_s"], rel=1e-6)


@pytest.mark.parametrize("waves,mean_waves", [(2, 0.5), (3, 1.0), (4, 1.5)])
def test_a_burst_beyond_the_batch_runs_in_waves(waves, mean_waves):
    """k·C requests at once with a batch limit C: k full waves of T_w = C / R (R the requests/s of C running),
    wave j waits j·T_w, so the mean wait is (k - 1)/2 waves; throughput stays R; the p99 request is in the last
    wave and the p50 request waits ⌊(⌈k/2⌉·C - 1)/C⌋ waves."""
    c = 16
    full = serve(batch=c, concurrency=c)
    t_wave = c / full["requests_per_s"]
    s = serve(batch=c, concurrency=waves * c, arrival="burst")
    assert s["queue_wait_s"] == pytest.approx(mean_waves * t_wave, rel=1e-6)
    assert s["requests_per_s"] == pytest.approx(full["requests_per_s"], rel=1e-6)
    first = serve(batch=c, concurrency=c, arrival="burst")
    assert s["ttft_p99_s"] == pytest.approx(first["ttft_p99_s"] + (waves - 1) * t_wave, rel=1e-6)
    p50_wave = (-(-waves // 2) * c - 1) // c
    assert s["ttft_p50_s"] == pytest.approx(first["ttft_p50_s"] + p50_wave * t_wave, rel=1e-6)


def test_a_burst_prefills_its_wave_together():
    """The first wave's prompts arrive together: with no token budget they share one prefill pass, so the first
    token of a burst of 12 comes later than a lone request's, and a budget of one prompt per pass spreads them
    over 12 passes (mean (12 + 1)/2 of them, the last at the 12th)."""
    alone, wave = serve(concurrency=1, arrival="burst"), serve(concurrency=12, arrival="burst")
    assert wave["ttft_s"] > 4 * alone["ttft_s"]
    chunked = serve(concurrency=12, arrival="burst", max_num_tokens=BASE["input_len"])
    one_pass = serve(concurrency=1, arrival="burst", max_num_tokens=BASE["input_len"])
    assert chunked["ttft_p99_s"] == pytest.approx(12 * one_pass["ttft_p99_s"], rel=1e-6)
    assert chunked["ttft_s"] == pytest.approx(6.5 * one_pass["ttft_s"], rel=1e-6)


@pytest.mark.parametrize("load", [{}, {"request_rate": 0.5}, {"request_rate": 6.0}, {"concurrency": 48},
                                  {"concurrency": 300, "batch": 64}, {"concurrency": 48, "think_time_s": 3.0},
                                  {"concurrency": 200, "batch": 64, "arrival": "burst"},
                                  {"request_rate": 2.0, "max_num_tokens": 256},
                                  {"request_rate": 1.0, "prefill_gpus": 4, "prefill_tp": 2},
                                  {"concurrency": 40, "arrival": "burst", "prefill_gpus": 4, "prefill_tp": 2}])
def test_percentiles_are_ordered_and_bracket_the_median(load):
    s = serve(**load)
    assert s["ttft_p50_s"] <= s["ttft_p90_s"] <= s["ttft_p99_s"]
    assert s["tpot_p50_s"] <= s["tpot_p90_s"] <= s["tpot_p99_s"]
    assert s["ttft_p50_s"] > 0 and s["tpot_p50_s"] > 0


@pytest.mark.parametrize("load", [{}, {"concurrency": 48}, {"concurrency": 300, "batch": 64}])
def test_at_maximum_load_the_median_ttft_is_the_mean(load):
    """Every request waits the same (a closed loop's FIFO queue of identical requests, or none) and then a
    uniform part of twice the mean residual of the iteration in progress (serving.iteration_residual, at least
    t/2): median = mean, and p99 − p50 = 0.98 × that residual ≥ 0.49 t.  TPOT's spread is symmetric (normal): its
    median is the mean too."""
    s = serve(**load)
    assert s["ttft_p50_s"] == pytest.approx(s["ttft_s"], rel=1e-6)
    assert s["tpot_p50_s"] == pytest.approx(s["tpot_s"], rel=1e-6)
    assert s["ttft_p99_s"] - s["ttft_p50_s"] >= 0.49 * s["iteration_ms"] / 1e3 * (1 - 1e-3)  # float32 sums


def test_poisson_wait_of_one_slot_is_pollaczek_khinchine():
    """c = 1 server with fixed service S: P(W > 0) = rho and E[W] = rho S / (2 (1 - rho)) (M/D/1, exact)."""
    from dse.cost.serving import exponential_tail_quantile, poisson_admission_wait

    s, rho = 2.0, np.array([0.1, 0.5, 0.9])
    p, m = poisson_admission_wait(rho, np.ones(3), 1.0 / s)
    assert p == pytest.approx(rho)
    assert p * m == pytest.approx(rho * s / (2 * (1 - rho)))
    w = exponential_tail_quantile(p, m, 0.99)  # P(W > w) = p exp(-w / m) = 1 %
    assert p * np.exp(-w / m) == pytest.approx(0.01)
    assert exponential_tail_quantile(p, m, 0.5)[0] == 0.0  # only 10 % wait at rho 0.1


def test_poisson_tail_grows_with_the_rate_and_vanishes_at_light_load():
    light = serve(request_rate=0.01)
    assert light["queue_wait_s"] < 1e-6 * light["ttft_s"]
    cap = serve()["requests_per_s"]
    near = serve(request_rate=0.97 * cap)
    assert near["ttft_p99_s"] > near["ttft_p90_s"] > light["ttft_p99_s"]
    assert near["queue_wait_s"] > 0.0


def test_tpot_spread_by_hand():
    """One chunk of 1 ms in half the iterations on average (Poisson: Var K = 0.5), 100 steps over 100 tokens:
    sd = 1 ms · √(0.5 · 100) / 100; 2.5 chunks: Var K = 2.5."""
    from dse.cost.serving import chunks_variance, tpot_spread

    one = np.ones(2)
    var = chunks_variance(np.array([0.5, 2.5]))
    assert var == pytest.approx([0.5, 2.5])
    sd = tpot_spread(1e-3 * one, var, one, 100 * one, 100 * one)
    assert sd == pytest.approx([1e-3 * np.sqrt(50) / 100, 1e-3 * np.sqrt(250) / 100])


def test_prompts_in_prefill_iteration_by_hand():
    """2 requests/s arriving in iterations of E[T²]/E[T] = 0.25 s: 0.5 others share the prefill iteration, 1.5
    prompts in all; a budget of 1.2 prompts caps it at 1.2; a chunked prompt (n_pre 3) fills its iterations
    alone, 1/3 prompt each; at a vanishing rate a prompt is alone."""
    from dse.cost.serving import prompts_in_prefill_iteration

    got = prompts_in_prefill_iteration(np.array([2.0, 2.0, 2.0, 1e-9]), np.array([0.25, 0.25, 0.25, 0.25]),
                                       np.array([1.0, 1.0, 3.0, 1.0]), np.array([np.inf, 1.2, 0.34, np.inf]))
    assert got == pytest.approx([1.5, 1.2, 1.0 / 3.0, 1.0])


def test_prompts_share_their_prefill_iteration():
    """The prompts that arrive during one iteration are admitted together, so the mean TTFT grows with the rate
    beyond the wait for the iteration in progress, and a closed loop's with its clients; at a light rate it is
    one prompt's prefill."""
    cap = serve()["requests_per_s"]
    light, busy = serve(request_rate=0.02 * cap), serve(request_rate=0.6 * cap)
    assert busy["ttft_s"] - busy["queue_wait_s"] > light["ttft_s"] * 1.02
    few, many = serve(concurrency=2), serve(concurrency=24)
    assert many["ttft_s"] > few["ttft_s"]


def test_iteration_residual_is_the_length_biased_mean_by_hand():
    """Iterations of 20 ms, one in ten also carrying a 380 ms prompt (K in {0, 1}, Var K = 0.09): E[T] = 58 ms,
    E[T²] = 0.9·0.02² + 0.1·0.4² = 0.01636 s², so an arrival waits E[T²] / (2 E[T]) = 141 ms for the iteration in
    progress, not E[T] / 2 = 29 ms (Kleinrock 1975 §5.2).  Equal iterations (Var K = 0) give E[T] / 2."""
    from dse.cost.serving import iteration_residual

    r = iteration_residual(np.array([0.058, 0.8]), np.array([0.38, 0.38]), np.array([0.09, 0.0]))
    assert r == pytest.approx([(0.9 * 0.02**2 + 0.1 * 0.4**2) / (2 * 0.058), 0.4])


def test_disaggregated_decode_has_no_tpot_spread():
    s = serve(request_rate=1.0, prefill_gpus=4, prefill_tp=2)
    assert s["tpot_p50_s"] == s["tpot_p99_s"] == s["tpot_s"]


@pytest.mark.parametrize("row,fragment", [
    ({"concurrency": 8, "think_time_s": -1}, "column 'think_time_s': value -1 is not allowed; allowed: a finite"),
    ({"concurrency": 8, "arrival": "bursty"}, "column 'arrival': value 'bursty' is not allowed; allowed: poisson, "
                                              "closed, burst"),
    ({"arrival": "burst"}, "column 'arrival': value 'burst' is not allowed here: closed and burst need a concurrency"),
    ({"concurrency": 8, "arrival": "poisson"}, "'poisson' needs a request_rate"),
    ({"request_rate": 2.0, "think_time_s": 1.0}, "column 'think_time_s': value 1.0 is not allowed here: a think time "
                                                 "needs a closed loop"),
    ({"concurrency": 8, "arrival": "burst", "think_time_s": 1.0}, "a think time needs a closed loop"),
])
def test_bad_arrival_inputs_name_the_column_the_value_and_what_is_allowed(row, fragment):
    with pytest.raises(InputError) as caught:
        evaluate_serve(pd.DataFrame([{**BASE, **row}]), "cases.csv")
    assert fragment in str(caught.value) and "cases.csv: row 2" in str(caught.value)


def _serve_spec(tmp_path, grid: dict, filters: list | None = None):
    from dse.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "task": "serve", "grid": {
        "model": "llama3-8b", "system": "h100-sxm-80gb", "input_len": 1000, "output_len": 100, **grid},
        **({"constraints": {"filters": filters}} if filters else {})}))
    return spec, load_spec


@pytest.mark.parametrize("grid,fragment", [
    ({"arrival": "burst"}, "grid.arrival: value 'burst' is not allowed without grid.concurrency"),
    ({"arrival": ["poisson"], "concurrency": 4}, "grid.arrival: value 'poisson' is not allowed without "
                                                 "grid.request_rate"),
    ({"think_time_s": -1.0, "concurrency": 4}, "grid.think_time_s: value -1.0 is not allowed; allowed: finite "
                                                "numbers >= 0"),
    ({"think_time_s": 2.0, "request_rate": 1.0}, "grid.think_time_s: value 2.0 is not allowed here: a think time "
                                                 "needs a closed loop"),
    ({"arrival": "offline", "concurrency": 4}, "grid.arrival: value 'offline' is not allowed; allowed: poisson, "
                                               "closed, burst"),
    ({"concurrency": 0}, "grid.concurrency: value 0 is not allowed"),
])
def test_bad_arrival_axes_exit_2_with_the_key_and_the_allowed_values(tmp_path, capsys, grid, fragment):
    spec, _ = _serve_spec(tmp_path, grid)
    assert main(["run", str(spec), "-o", str(tmp_path / "out"), "-q", "--jobs", "1"]) == 2
    assert fragment in capsys.readouterr().err


def test_a_filter_on_a_percentile_runs_and_one_dse_does_not_compute_is_refused(tmp_path, capsys):
    grid = {"concurrency": [8, 64], "think_time_s": [0.0, 5.0], "arrival": ["closed"], "tp": [1, 2]}
    spec, load_spec = _serve_spec(tmp_path, grid, ["ttft_p99_s <= 2 and tpot_p90_s < 0.05"])
    assert main(["run", str(spec), "-o", str(tmp_path / "out"), "-q", "--jobs", "1"]) == 0
    rows = pd.read_parquet(tmp_path / "out")
    assert len(rows) and (rows["ttft_p99_s"] <= 2).all() and set(rows["think_time_s"]) <= {0.0, 5.0}
    assert set(rows["arrival"].astype(str)) == {"closed"}
    spec, _ = _serve_spec(tmp_path, grid, ["ttft_p95_s <= 2"])
    assert main(["run", str(spec), "-o", str(tmp_path / "bad"), "-q", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "ttft_p95_s" in err and "ttft_p99_s" in err and "tpot_p50_s" in err


def test_percentiles_on_random_configurations_are_finite_and_ordered():
    """Over the benchmark's random mix (Poisson, maximum load, closed loops with and without think time, bursts,
    disaggregated, MoE, speculative decoding): every answered row has finite percentiles in order and above 0, and
    a closed loop's or a burst's p99 TTFT is at least its mean wait."""
    from dse.bench.kernels import random_serve_configs
    from dse.cost.serving import serve_step
    from dse.hardware import catalog as hwcat

    x, systems = random_serve_configs(6000, seed=3)
    out = serve_step(x, hwcat.hardware_columns(systems))
    ok = out["fits"]
    assert ok.sum() > 500
    # a disaggregated row whose KV cache has no link (pools beyond one node of a system without a scale-out
    # network) gets a reason, where it was answered with 0 requests/s and an infinite TTFT
    assert (out["requests_per_s"][ok] > 0).all()
    no_link = (out["reason"] == codes.REASON_CODE["crosses nodes without scale-out network"]) & ~np.isnan(
        x["prefill_gpus"])
    assert no_link.any() and not out["fits"][no_link].any()
    for a, b, c in (("ttft_p50_s", "ttft_p90_s", "ttft_p99_s"), ("tpot_p50_s", "tpot_p90_s", "tpot_p99_s")):
        pa, pb, pc = out[a][ok], out[b][ok], out[c][ok]
        assert np.isfinite(pc).all() and (pa > 0).all()
        assert (pa <= pb * (1 + 1e-6)).all() and (pb <= pc * (1 + 1e-6)).all()
    closed = ok & ~np.isnan(x["concurrency"])
    assert (out["ttft_p99_s"][closed] >= out["queue_wait_s"][closed] * (1 - 1e-6)).all()


@pytest.mark.parametrize("key", ["request_overhead_s", "request_setup_s"])
def test_host_time_per_request_adds_to_each_iteration_and_nothing_when_unset(monkeypatch, key):
    """The engine's host time (stack settings, added to an iteration the 0.10 batch manager does not overlap):
    ``request_overhead_s`` adds r·(decode requests + prompts) and ``request_setup_s`` (TensorRT-LLM 0.10's, per
    request admitted) adds s·prompts.  At maximum load under the token budget the iteration carries the same requests
    with and without either, and its time grows by exactly that.  Set to 0 it is the model without the term."""
    from dse import stacks

    row = {**BASE, "stack": "tensorrt-llm-0.10.0", "batch": 2048, "max_num_tokens": 2048, "input_len": 128,
           "output_len": 128}

    def with_values(**values: str) -> pd.Series:
        return serve_with_profile(monkeypatch, row, **values)

    r = 5e-6 if key == "request_overhead_s" else float(stacks.profile("tensorrt-llm-0.10.0")[key])
    assert r > 0
    other = "request_setup_s" if key == "request_overhead_s" else "request_overhead_s"
    with_host = with_values(**{key: repr(r), other: "0"})
    without = with_values(request_overhead_s="0", request_setup_s="0")
    assert with_host["limit"] == without["limit"] == "tokens"
    assert with_host["iteration_tokens"] == pytest.approx(without["iteration_tokens"])
    prompts = without["iteration_tokens"] / (128 + 128 - 1)  # X prompts of 128 tokens and X·127 decode tokens
    requests = prompts * 128 if key == "request_overhead_s" else prompts
    assert with_host["iteration_ms"] - without["iteration_ms"] == pytest.approx(r * 1e3 * requests, rel=1e-3)
    # a kernel caller that does not know the input gets 0: today's numbers, bit for bit
    from dse.cost.serving import SERVE_INPUTS, serve_step
    from dse.frame import serve_inputs
    from dse.hardware import catalog as hwcat

    x, systems = serve_inputs(pd.DataFrame([row]))
    hw = hwcat.hardware_columns(systems)
    x0 = {**x, "request_overhead_s": np.zeros(1), "request_setup_s": np.zeros(1)}
    absent = {k: v for k, v in x0.items() if k != key}
    assert key in SERVE_INPUTS
    a, b = serve_step(x0, hw), serve_step(absent, hw)
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in ("iteration_ms", "tpot_s", "ttft_s"))
    assert a["iteration_ms"][0] == pytest.approx(without["iteration_ms"])


def serve_with_profile(monkeypatch, row: dict, **values: str) -> pd.Series:
    """``serve(**row)`` with the settings ``values`` of the row's stack profile overridden for the call."""
    from dse import stacks

    for key, value in values.items():
        monkeypatch.setitem(stacks.PROFILE_OVERRIDES, (row["stack"], key), value)
    stacks.serving_tables.cache_clear()
    try:
        return serve(**row)
    finally:
        monkeypatch.undo()
        stacks.serving_tables.cache_clear()


def test_overlapped_host_time_makes_the_iteration_the_longer_of_gpu_and_host(monkeypatch):
    """``host_overlap`` single_stage on one stage (TensorRT-LLM 1.x's overlap scheduler): the host work
    r·(requests) of the next iteration runs under the GPU work of this one, so an iteration takes max(GPU, host),
    not their sum.  At
    maximum load under the token budget the requests per iteration do not depend on r: the iteration is the
    GPU's where the host is shorter and exactly r·requests where it is longer.  Under a request rate (the
    iterated fixed point, since max() is not affine) Little's law still holds: X = λ·t(X)."""
    from dse import stacks

    row = {**BASE, "stack": "tensorrt-llm-1.0", "batch": 2048, "max_num_tokens": 2048, "input_len": 128,
           "output_len": 128}
    assert stacks.profile("tensorrt-llm-1.0")["host_overlap"] == "single_stage"

    def with_r(value: str) -> pd.Series:
        return serve_with_profile(monkeypatch, row, request_overhead_s=value)

    gpu = with_r("0")
    requests = gpu["iteration_tokens"] * 128 / (128 + 128 - 1)
    r_small = float(0.5 * gpu["iteration_ms"] * 1e-3 / requests)  # host half the GPU's time: hidden
    r_large = float(2.0 * gpu["iteration_ms"] * 1e-3 / requests)  # host twice the GPU's time: it sets the pace
    small, large = with_r(repr(r_small)), with_r(repr(r_large))
    assert small["iteration_ms"] == pytest.approx(gpu["iteration_ms"], rel=1e-9)
    assert large["iteration_ms"] == pytest.approx(r_large * 1e3 * requests, rel=1e-6)
    assert large["iteration_tokens"] == pytest.approx(gpu["iteration_tokens"])
    # under a rate the fixed point is iterated: the requests finishing per iteration X meet X = λ·t(X)
    rated = serve_with_profile(monkeypatch, {**row, "request_rate": 0.5 * large["output_tokens_per_s"] / 128},
                               request_overhead_s=repr(r_large))
    lam = 0.5 * large["output_tokens_per_s"] / 128
    x_iter = rated["iteration_tokens"] / (128 + 128 - 1)
    assert x_iter == pytest.approx(lam * rated["iteration_ms"] * 1e-3, rel=1e-3)


def test_pipelined_replicas_add_the_host_work_to_the_iteration(monkeypatch):
    """TensorRT-LLM's PyTorch backend overlaps its host loop with the GPU only for pp_size 1; with pipeline stages
    it runs _executor_loop_pp (py_executor.py), so host_overlap single_stage adds the host work r·(requests of the
    micro-batch) to each stage iteration: the iteration is the GPU's plus r·requests, where on one stage it was
    max(GPU, host).  A stack that always overlaps keeps max() at pp 2."""

    row = {**BASE, "stack": "tensorrt-llm-1.0", "batch": 512, "max_num_tokens": 2048, "input_len": 128,
           "output_len": 128, "tp": 2, "pp": 2, "gpus": 4}

    def with_profile(**values: str) -> pd.Series:
        return serve_with_profile(monkeypatch, row, **values)

    gpu = with_profile(request_overhead_s="0")
    requests = gpu["iteration_tokens"] * 128 / (128 + 128 - 1)
    r = float(0.5 * gpu["iteration_ms"] * 1e-3 / requests)  # host half the GPU's time
    pipelined = with_profile(request_overhead_s=repr(r))
    always = with_profile(request_overhead_s=repr(r), host_overlap="always")
    assert always["iteration_ms"] == pytest.approx(gpu["iteration_ms"], rel=1e-9)  # hidden under the GPU
    assert pipelined["iteration_tokens"] == pytest.approx(gpu["iteration_tokens"])  # the token budget binds
    assert pipelined["iteration_ms"] == pytest.approx(gpu["iteration_ms"] + r * 1e3 * requests, rel=1e-6)


def test_every_draft_accepted_gains_every_draft():
    """MTP speculation with acceptance α: a step yields 1 + Σ_{i=1..n} α^i tokens; at α = 1 that is 1 + n (the
    geometric closed form divides 0 by 0 there), and at α = 0.5, n = 2 it is 1 + 0.5 + 0.25."""
    from dse.cost.serving import speculative_terms

    x = {"spec_tokens": np.array([2.0, 2.0, 0.0, 3.0]), "spec_acceptance": np.array([1.0, 0.5, 1.0, np.nan])}
    n, gain = speculative_terms(x)
    np.testing.assert_allclose(gain[:3], [2.0, 0.75, 0.0])
    alpha = 0.85  # constants.MTP_ACCEPTANCE for an empty cell
    assert gain[3] == pytest.approx(alpha + alpha**2 + alpha**3)


# ---- speculative decoding with an EAGLE head (issue 22, item 6) -------------------------------------------------

def _eagle_rows(**extra):
    base = {"task": "serve", "model": "llama3.3-70b", "system": "h100-sxm-80gb", "gpus": 2, "tp": 2,
            "precision": "fp8", "input_len": 1000, "output_len": 256, "concurrency": 1}
    return evaluate_serve(pd.DataFrame([{**base, **extra}]))


def test_an_eagle_head_drafts_for_a_model_without_mtp_modules():
    """Llama 3.3 70B has no MTP module: drafting with it is a row with a reason; with an EAGLE head it is served."""
    mtp = _eagle_rows(spec_tokens=2)
    assert mtp["infeasible_reason"].iloc[0] == "spec_tokens needs mtp modules"
    eagle = _eagle_rows(spec_tokens=2, spec_method="eagle", spec_acceptance=0.7)
    assert bool(eagle["fits"].iloc[0]) and eagle["iter_draft_ms"].iloc[0] > 0


def test_eagle_at_full_acceptance_yields_two_tokens_per_step():
    """One draft accepted every step: each step (the target's verify pass plus one drafter pass) yields 2 tokens,
    so TPOT is half the iteration at one client."""
    out = _eagle_rows(spec_tokens=1, spec_method="eagle", spec_acceptance=1.0).iloc[0]
    assert out["tpot_s"] * 1e3 == pytest.approx(out["iteration_ms"] / 2.0, rel=1e-6)


def test_eagle_head_weights_are_one_dense_layer_and_its_fusion_projection():
    """The head's weights, worked by hand from Llama 3.3 70B's shapes (h 8192, 64 query and 8 KV heads of 128, SwiGLU
    FFN 28672): attention h(h + 2·8·128) + h·h, MLP 3·h·28672, fusion 2h·h = 989.9 M parameters, at 1 byte (fp8),
    split over tp 2."""
    h = 8192
    params = h * (h + 2 * 8 * 128) + h * h + 3 * h * 28672 + 2 * h * h
    plain = _eagle_rows().iloc[0]
    eagle = _eagle_rows(spec_tokens=2, spec_method="eagle", spec_acceptance=0.7).iloc[0]
    assert eagle["weights_bytes"] - plain["weights_bytes"] == pytest.approx(params / 2, rel=1e-6)


def test_eagle_without_an_acceptance_rate_is_refused():
    with pytest.raises(InputError, match="spec_acceptance.*spec_method eagle.*allowed"):
        _eagle_rows(spec_tokens=2, spec_method="eagle")


def test_an_ep_that_does_not_divide_the_experts_holds_redundant_slots():
    """SGLang's EPLB (lmsys.org 2025-05-05: 256 experts + 32 redundant = 288 slots on EP72) and DeepSeek-V3 §3.4:
    an ep that does not divide the experts holds ceil(E/ep) expert slots per GPU, the extra ones replicas.  DeepSeek-V3
    on EP72 holds 4 experts per GPU, as on EP64 (256/64), so its weights per GPU are EP64's; EP96 holds 3, EP128 2.
    It used to be refused (experts % ep != 0)."""
    rows = pd.DataFrame({"task": "serve", "model": "deepseek-v3", "system": "h200-sxm-141gb", "tp": 1,
                         "dp": [64, 72, 96, 128], "ep": [64, 72, 96, 128], "gpus": [64, 72, 96, 128],
                         "precision": "fp8", "input_len": 2000, "output_len": 100})
    out = evaluate(rows)
    assert (out["infeasible_reason"] == "").all() and np.isfinite(out["output_tokens_per_s_per_gpu"]).all()
    w = out["weights_bytes"].to_numpy()
    assert w[0] == w[1] and w[1] > w[2] > w[3]
    from dse.models.catalog import models
    E = float(models().loc["deepseek-v3", "experts"])
    slot = (w[2] - w[3]) / (3 - 2)  # one expert slot's bytes on every MoE layer
    assert w[1] - w[3] == pytest.approx(slot * (np.ceil(E / 72) - np.ceil(E / 128)), rel=1e-5)


def test_mtp_drafter_experts_are_split_over_expert_parallel_ranks_like_the_layers():
    """DeepSeek-V3's MTP module drafting on EP64: its routed experts sit on the expert-parallel ranks like every MoE
    layer's (4 of 256 per GPU), so the drafter adds its dense parameters plus 1/64 of its experts to a GPU's
    weights, i.e. the same routed bytes as one MoE layer of the model (one expert slot's bytes on one layer)."""
    rows = pd.DataFrame({"task": "serve", "model": "deepseek-v3", "system": "h200-sxm-141gb", "tp": 1,
                         "dp": 64, "ep": 64, "gpus": 64, "precision": "fp8", "input_len": 2000, "output_len": 100,
                         "mtp": 1, "spec_tokens": [0, 1]})
    out = evaluate(rows)
    plain, spec = out["weights_bytes"].to_numpy()
    from dse.cost.architecture import mtp_params
    from dse.models.catalog import model_record, models
    x, rec = model_record(models().loc[["deepseek-v3"]])
    routed = float((x["experts"] * rec["expert_params"])[0])
    dense = float(mtp_params(rec, x["hidden"], x["experts"], np.asarray([1.0]))[0]) - routed
    # dense parts at the FP8 checkpoint's 1 byte (+ block scales), routed experts at the same format
    assert spec - plain == pytest.approx(dense + routed / 64.0, rel=0.01)


def test_decode_only_throughput_is_the_decode_pool_capacity_aggregated_or_not():
    """decode_tokens_per_s_per_gpu (what disaggregated benchmarks of the decode pool alone report) is the decode
    replicas' capacity at their batch or KV limit: the aggregated kernel and the disaggregated one (whose decode
    pool is the row's layout) compute it on their own paths and agree; it exceeds the aggregated throughput per
    GPU, which also spends the GPUs on the prompts."""
    base = {"task": "serve", "model": "llama3.3-70b", "system": "h100-sxm-80gb", "tp": 2, "dp": 2, "gpus": 4,
            "precision": "fp8", "input_len": 2000, "output_len": 200}
    rows = pd.DataFrame([base, {**base, "prefill_gpus": 64, "prefill_tp": 8, "gpus": 68}])
    out = evaluate(rows)
    agg, dis = out["decode_tokens_per_s_per_gpu"]
    assert agg == pytest.approx(dis, rel=1e-5)
    assert agg > 2.0 * out["output_tokens_per_s_per_gpu"][0]


def test_layers_that_do_not_divide_pp_fill_the_first_stages():
    """80 layers over pp 3 run as 27 + 27 + 26 (TensorRT-LLM's Mapping.pp_layers, vLLM's and SGLang's
    get_pp_indices): the fullest stage, 27 layers, paces the pipeline and holds the most weights and KV, so the
    row serves exactly as 81 layers over pp 3 (27 each) would, and is not refused."""
    uneven = serve(tp=1, pp=3, gpus=3)
    even = serve(tp=1, pp=3, gpus=3, layers=81)
    assert uneven["fits"]
    for col in ("output_tokens_per_s", "ttft_s", "tpot_s", "running_requests"):
        assert uneven[col] == pytest.approx(even[col], rel=1e-6), col


def test_an_engine_that_sizes_windowed_layers_as_full_attention_holds_as_many_requests_as_full_attention():
    """window_kv full (TensorRT-LLM 1.1's KV cache manager: sliding-window blocks written linearly, "as many blocks as
    full attention", kvCacheManager.cpp): gpt-oss-20b's KV capacity is that of the same model with every layer
    full attention, and about half (12 of 24 layers windowed at 128 tokens) what a rolling window holds; its time
    per iteration at a fixed batch is the windowed model's (the attention still reads only the window)."""
    from dse import stacks

    row = {"model": "gpt-oss-20b", "system": "h100-sxm-80gb", "tp": 1, "precision": "bf16", "input_len": 1000,
           "output_len": 1000, "stack": "tensorrt-llm-1.1"}
    dims = {"layers": 24, "hidden": 2880, "heads": 64, "kv_heads": 8, "ffn_hidden": 2880, "vocab": 201088,
            "mlp": "swiglu", "experts": 32, "top_k": 4, "head_dim": 64, "moe_quant": "mxfp4", "tied_embeddings": 0}
    assert stacks.profile("tensorrt-llm-1.1")["window_kv"] == "full"
    full_kv = serve(**row)
    no_window = serve(**{**row, **dims, "model": "gpt-oss-20b-full-attention"})
    rolling = serve(**{**row, "stack": "tensorrt-llm-1.0"})
    assert full_kv["kv_capacity_requests"] == no_window["kv_capacity_requests"]
    assert 1.8 < rolling["kv_capacity_requests"] / full_kv["kv_capacity_requests"] < 2.0
    fixed = {**row, "batch": 256, "max_num_tokens": 2048}
    older = serve(**{**fixed, "stack": "tensorrt-llm-1.0"})
    assert serve(**fixed)["iteration_ms"] == pytest.approx(older["iteration_ms"], rel=1e-6)


# ---- measurements above the HBM bound of their configuration (dse validate) ----

def test_decode_hbm_bound_is_the_kv_read_at_peak_bandwidth():
    """decode_hbm_bound = hbm_bw / (KV bytes one GPU reads per output token of its replica): every decode token
    reads its request's K and V in every layer at the mean context input_len + output_len/2.  GPT-J 6B (28
    layers, 16 heads of 128, MHA) with an FP8 cache at 128/2048 reads 28 x 2 x 4096 x 1 byte per context token
    over 1 152 tokens; Llama-2 70B (80 layers, 8 KV heads of 128) at tp 4, pp 2 and a 16-bit cache holds 2 KV
    heads and 40 layers per GPU, and each of the 8 GPUs reads its share for every token of the replica."""
    from dse.frame import evaluate_decode_bound
    from dse.hardware import catalog as hwcat

    rows = pd.DataFrame([{"model": "gptj-6b", "system": "h100-sxm-80gb", "tp": 1, "input_len": 128,
                          "output_len": 2048, "precision": "fp8"},
                         {"model": "llama2-70b", "system": "h100-sxm-80gb", "tp": 4, "pp": 2, "input_len": 1000,
                          "output_len": 1000, "precision": "fp16"}])
    bound = evaluate_decode_bound(rows, "serve")
    bw = float(hwcat.hardware_columns(hwcat.system_codes(np.array(["h100-sxm-80gb"])))["hbm_bw"][0])
    assert bound[0] == pytest.approx(bw / (28 * 2 * 4096 * 1 * (128 + 1024)), rel=1e-9)
    assert bound[1] == pytest.approx(bw / (40 * 2 * 2 * 128 * 2 * (1000 + 500) * 8), rel=1e-9)
    # a step verifying n speculated tokens reads the cache once for at most n + 1 of them
    spec = evaluate_decode_bound(rows.assign(model="deepseek-v3", tp=8, pp=1, spec_tokens=2, mtp=1), "serve")
    plain = evaluate_decode_bound(rows.assign(model="deepseek-v3", tp=8, pp=1), "serve")
    assert spec == pytest.approx(3.0 * plain, rel=1e-9)


def test_validate_reports_a_throughput_above_the_hbm_bound_as_skipped(tmp_path):
    """A measured throughput above decode_hbm_bound cannot come from the configuration its row states (the
    TensorRT-LLM 0.10.0 perf overview's GPT-J 6B FP8 128/2048 row: 54 940 tokens/s on one H100, 4.3x the bound,
    7.5x what TensorRT-LLM 0.9.0 published for the same engine): dse validate reports it skipped, with the
    bound, and scores the rest."""
    from tests.conftest import VENDORED

    shared = pd.read_csv(VENDORED / "trtllm_0.10.0_serve_a100_h100.csv", dtype=str, keep_default_na=False)
    row = shared[shared["case"] == "trtllm-0.10.0-serve-h100-gptj-6b-tp1pp1-in128-out2048-fp8"]
    rows = pd.concat([row.assign(case="above", measured="54939.5"), row.assign(case="below", measured="7000")])
    path = tmp_path / "cases.csv"
    rows.to_csv(path, index=False)
    above, below = validate_file(path)
    assert above.error_pct is None and "4.3x the HBM bound" in above.skipped
    assert below.skipped is None and below.error_pct is not None


def test_tensorrt_llm_1_0_dense_runs_meet_issue_22s_held_back_target():
    """Issue 22 checks held-back TensorRT-LLM 1.0 serving runs against <= 8 % MAPE (aiconfigurator's 13.4 % on
    its 146 rows). The two dense TensorRT-LLM 1.0 files kept in tests/cases (146 published max-load runs, nothing
    fitted on them) stand in for them, each run the burst of requests the perf overview's method sends: 7.99 % today
    (6.32 % over the 42 Llama-3.3 70B runs, 8.67 % over the 104 others; 7.79 % when taken as endless maximum load)."""
    from pathlib import Path

    cases = Path(__file__).parent / "cases"
    errors = [abs(r.error_pct) for name in ("trtllm_1.0_dense_serve_more.csv", "trtllm_1.0_llama33_70b_serve.csv")
              for r in validate_file(cases / name) if r.error_pct is not None]
    assert len(errors) == 146
    assert sum(errors) / len(errors) <= 8.0


def test_answered_rows_give_writeable_metrics_equal_to_a_mixed_call():
    """When every row is answered, serve_step skips the blanking selects: its metrics are still fresh writeable
    arrays (a caller may fill them in place), and each row's values are those of the same row evaluated among rows
    that are not all answered (a row's values do not depend on the other rows)."""
    from dse.bench.kernels import DTYPE, _answered_only, random_serve_configs
    from dse.cost.serving import SERVE_METRICS, serve_step
    from dse.hardware import catalog as hwcat

    x, systems = random_serve_configs(3000, seed=5)
    good, good_sys = _answered_only(x, systems, serve_step, 400)
    mixed = {k: np.concatenate([good[k], x[k][:200]]) for k in x}
    mixed_sys = np.concatenate([good_sys, systems[:200]])
    out = serve_step(good, hwcat.hardware_columns(good_sys, dtype=DTYPE), out_dtype=DTYPE)
    ref = serve_step(mixed, hwcat.hardware_columns(mixed_sys, dtype=DTYPE), out_dtype=DTYPE)
    assert out["fits"].all() and not ref["fits"].all()
    for k in SERVE_METRICS:
        assert out[k].flags.writeable and out[k].shape == (400,), k
        np.testing.assert_array_equal(out[k], ref[k][:400], err_msg=k)


def _moe_row(**changes) -> dict:
    return {"task": "serve", "model": "deepseek-v3", "system": "h200-sxm-141gb", "tp": 1, "dp": 8, "ep": 8,
            "precision": "fp8", "input_len": 1000, "output_len": 1000, **changes}


def test_routing_skew_defaults_to_the_generations_measured_value_and_moe_imbalance_overrides_it():
    """Serving a MoE model without moe_imbalance times its routed GEMMs at the GPU generation's measured routing
    skew at its ep (dse.cost.inference.routing_skew: efficiency.csv moe_routing_skew + per_doubling x log2 ep,
    fitted on TensorRT-LLM's power-law / balanced MoE tables): the same as stating that value, slower than
    balanced routing (1, an expert load balancer), and the skew grows with the ranks.  Dense models are untouched."""
    from dse.hardware.catalog import efficiency

    hopper = efficiency().loc["hopper"]
    measured = float(hopper["moe_routing_skew"] + hopper["moe_routing_skew_per_doubling"] * 3.0)  # ep 8
    table = pd.DataFrame([_moe_row(), _moe_row(moe_imbalance=measured), _moe_row(moe_imbalance=1.0)])
    out = evaluate_serve(table)["output_tokens_per_s_per_gpu"].to_numpy()
    assert out[0] == pytest.approx(out[1], rel=1e-5)
    assert out[0] < 0.9 * out[2]
    small = {"model": "qwen3-30b-a3b"}  # fits one H200, so ep can start at 1
    by_ep = evaluate_serve(pd.DataFrame([_moe_row(dp=d, ep=d, **small) for d in (1, 2, 4, 8)]))["iter_gemm_ms"]
    by_ep = by_ep.to_numpy()
    balanced = evaluate_serve(pd.DataFrame([_moe_row(dp=d, ep=d, moe_imbalance=1.0, **small) for d in (1, 2, 4, 8)]))
    growth = by_ep / balanced["iter_gemm_ms"].to_numpy()
    assert np.all(np.diff(growth) > 0) and growth[0] > 1.0
    dense = {**BASE, "model": "llama3.3-70b"}
    assert evaluate_serve(pd.DataFrame([dense, {**dense, "moe_imbalance": 2.0}]))["tpot_s"].nunique() == 1


def test_explain_names_the_routing_skew_of_a_moe_serving_row(capsys):
    code = main(["explain", "--task", "serve", "--model", "deepseek-v3", "--system", "b200", "--tp", "1", "--dp",
                 "4", "--ep", "4", "--precision", "fp4", "--input-len", "1000", "--output-len", "1000"])
    out = capsys.readouterr().out
    assert code == 0
    assert "for uneven routing (the GPU's measured routing skew at ep 4" in out


def test_sglang_profiles_time_moe_layers_at_balanced_routing():
    """The sglang-0.4/0.5 profiles set moe_imbalance 1 (ASSUMPTION: EPLB, as SGLang's large-scale expert-parallel
    posts run it), so a large-EP SGLang row without the column is timed as balanced, not at the measured skew of
    unbalanced routing at its ep (2.8 on Hopper at ep 72); a row's own value still wins."""
    row = _moe_row(system="h100-sxm-80gb", dp=72, ep=72, input_len=2000, output_len=100, concurrency=256 * 72,
                   arrival="closed")
    rows = [{**row, "stack": "sglang-0.4"}, {**row, "stack": "sglang-0.4", "moe_imbalance": 1.0}, row]
    out = evaluate_serve(pd.DataFrame(rows))["iter_gemm_ms"].to_numpy()
    assert out[0] == pytest.approx(out[1], rel=1e-6)
    assert out[2] > 1.3 * out[0]


def test_explain_prints_the_routing_skew_the_kernel_used_under_a_calibration():
    """The explained routing skew is the kernel's own (dse.cost.inference.routing_skew) on the calibrated hardware
    columns: an override of Blackwell's measured skew moves the printed factor by exactly the override's change
    (at ep 4, two doublings times the per-doubling slope are added to the base)."""
    from dse.explain import ROUTING_SKEW, explain_row
    from dse.hardware.catalog import efficiency

    config = {"task": "serve", "model": "deepseek-v3", "system": "b200", "tp": 1, "dp": 4, "ep": 4,
              "precision": "fp4", "input_len": 1000, "output_len": 1000}
    slope = float(efficiency().loc["blackwell", "moe_routing_skew_per_doubling"])
    row = explain_row(config, {("blackwell", "moe_routing_skew"): 2.0})
    assert float(row[ROUTING_SKEW]) == pytest.approx(2.0 + 2.0 * slope)
    assert np.isnan(float(explain_row({**config, "model": "llama3.3-70b", "ep": 1})[ROUTING_SKEW]))


def test_expert_parallel_all_to_alls_are_their_own_part_of_the_iteration():
    """The dispatch and combine all-to-alls of wide expert parallelism (attention-DP + EP) are reported as
    ``iter_ep_comm_ms`` (the parts still sum to ``iteration_ms``), 0 without ep or without experts; with the same
    8 ranks per group, a group that leaves the 8-GPU NVLink domain of H100 servers (ep 16) moves each token slower
    than one inside it (ep 8): per iteration token, its all-to-all time is larger."""
    from dse.cost.serving import ITERATION_PARTS

    rows = [_moe_row(), _moe_row(dp=1, ep=1, model="qwen3-30b-a3b"), {**BASE, "model": "llama3.3-70b"},
            _moe_row(system="h100-sxm-80gb", dp=16, ep=16, model="qwen3-235b-a22b")]
    out = evaluate_serve(pd.DataFrame(rows))
    parts = out[list(ITERATION_PARTS)].sum(axis=1).to_numpy()
    assert parts == pytest.approx(out["iteration_ms"].to_numpy(), rel=1e-5)
    ep = out["iter_ep_comm_ms"].to_numpy()
    assert ep[0] > 0.0 and ep[1] == 0.0 and ep[2] == 0.0
    per_token = ep / out["iteration_tokens"].to_numpy()
    inside = evaluate_serve(pd.DataFrame([_moe_row(system="h100-sxm-80gb", model="qwen3-235b-a22b")]))
    assert per_token[3] > float(inside["iter_ep_comm_ms"].iloc[0] / inside["iteration_tokens"].iloc[0])


def test_fp8_context_fmha_runs_prompt_attention_at_the_measured_fp8_rate():
    """TensorRT-LLM's PyTorch flow runs the prompt attention as FP8 context FMHA when the KV cache is FP8 (paged
    context FMHA, on with the default KV-block reuse) or the GEMMs are FP8/FP4 (attentionOp.cpp mFP8ContextFMHA):
    with the stack's fp8_context_fmha on, those rows take the generation's measured FP8 context-attention rate and
    the others (BF16 cache and GEMMs, an int8 cache) the BF16 one; with the knob off every row takes the BF16 rate.
    The TensorRT-LLM 1.x profiles set it, the vLLM ones do not."""
    from dse.cost.inference import kv_bytes_per_value, prompt_attention_rate
    from dse.hardware import catalog as hwcat
    from dse.stacks import profile

    kv = np.array([codes.KV_PRECISION.index(k) for k in ("fp8", "auto", "bf16", "int8", "auto")], dtype=float)
    prec = np.array([codes.PRECISION_BF16, codes.PRECISION_FP8, codes.PRECISION_BF16, codes.PRECISION_BF16,
                     codes.PRECISION_BF16], dtype=float)
    n = len(kv)
    hw = hwcat.hardware_columns(np.full(n, hwcat.system_names().index("h100-sxm-80gb")))
    kv_b = kv_bytes_per_value(kv, prec)
    on = prompt_attention_rate({**hw, "kv_precision": kv, "precision": prec, "fp8_context_fmha": np.ones(n)}, kv_b)
    off = prompt_attention_rate({**hw, "kv_precision": kv, "precision": prec, "fp8_context_fmha": np.zeros(n)}, kv_b)
    eff = hwcat.efficiency().loc["hopper"]
    fp8, bf16 = hw["infer_attention_fp8_rate"][0], hw["infer_attention_rate"][0]
    assert fp8 / bf16 == pytest.approx(eff["infer_attention_eff_fp8"] / eff["infer_attention_eff"])
    assert list(on) == [fp8, fp8, bf16, bf16, bf16] and list(off) == [bf16] * n
    assert profile("tensorrt-llm-1.1")["fp8_context_fmha"] == profile("tensorrt-llm-1.0")["fp8_context_fmha"] == "1"
    assert "fp8_context_fmha" not in profile("vllm-0.11")


def test_trtllm_attention_dp_exchanges_moe_tokens_by_allgather_and_reducescatter():
    """TensorRT-LLM 1.x's CutlassFusedMoE with attention DP gathers every rank's quantized tokens and
    reduce-scatters the BF16 outputs, and runs an all-to-all only over a multi-node NVLink domain with more expert
    ranks than a token's experts (select_alltoall_method_type): ``ep_comm`` allgather picks those rows.  The
    exchange then moves (n−1)·(h·(a + 2) + 8k) bytes per token against the all-to-all's 2·k·h·a·(n−1)/n: at a = 2
    (BF16) n/k times as many, 8x for a top-1 model at ep 8, about 1x for top-8 at ep 8."""
    from dse.cost.serving import allgather_exchange_rows, allgather_exchange_time
    from dse.hardware import catalog as hwcat

    names = hwcat.system_names()
    systems = np.array([names.index(s) for s in ("h200-sxm-141gb", "gb200-nvl72", "gb200-nvl72", "h200-sxm-141gb",
                                                  "h200-sxm-141gb")])
    hw = hwcat.hardware_columns(systems)
    x = {**hw, "ep_comm": np.array([1.0, 1.0, 1.0, 0.0, 1.0]), "ep": np.array([8.0, 4.0, 4.0, 8.0, 1.0]),
         "top_k": np.array([1.0, 1.0, 8.0, 1.0, 1.0])}
    assert list(allgather_exchange_rows(x)) == [1.0, 0.0, 1.0, 0.0, 0.0]
    h, n = 5120.0, 8.0
    one = {**{k: v[:1] for k, v in hw.items()}, "ep": np.array([n]), "hidden": np.array([h]),
           "precision": np.array([float(codes.PRECISION_BF16)]), "moe_quant": np.zeros(1)}
    for k in (1.0, 8.0):
        per_token, _ = allgather_exchange_time({**one, "top_k": np.array([k])}, np.array([2.0]))
        bytes_moved = float(per_token[0]) * hw["infer_allgather_bw"][0] / (n - 1.0)
        assert bytes_moved == pytest.approx(h * 4.0 + 8.0 * k)
        alltoall_bytes = 2.0 * k * h * 2.0 * (n - 1.0) / n
        ratio = (n - 1.0) * bytes_moved / alltoall_bytes
        assert ratio == pytest.approx(n * (4.0 * h + 8.0 * k) / (4.0 * k * h))
        assert ratio == pytest.approx(n / k, rel=5e-3)


def test_measured_mla_decode_kernels_set_the_tensorrt_llm_mla_decode():
    """infer_mla_decode_eff(_fp8) are the measured medians of TensorRT-LLM's MLA generation kernels
    (tests/kernels/trtllm_generation_mla.csv: H100 for Hopper, B200 for Blackwell, as a fraction of the BF16 peak);
    on a DeepSeek-V3 row of a stack with mla_decode measured, one decode token's attention per layer is
    max(F / rate, B / memory_rate) with F the absorbed-MLA FLOPs, at the FP8 rate with an FP8 latent cache; the
    roofline rows (mla_decode roofline, or a GPU without a table) keep the attention-rate roofline, which is slower
    at long contexts (the tables' kernels reach 2-3x the training attention rate)."""
    from pathlib import Path

    from dse.cost.inference import decode_attention_time, kv_bytes_per_value
    from dse.frame import serve_inputs
    from dse.hardware import catalog as hwcat

    table = pd.read_csv(Path(__file__).parent / "kernels" / "trtllm_generation_mla.csv").set_index(
        ["gpu", "kv_cache_dtype"])["median_eff"]
    eff = hwcat.efficiency()
    for gen, gpu in (("hopper", "h100_sxm"), ("blackwell", "b200_sxm")):
        assert eff.loc[gen, "infer_mla_decode_eff"] == pytest.approx(table[(gpu, "bfloat16")], abs=6e-4)
        assert eff.loc[gen, "infer_mla_decode_eff_fp8"] == pytest.approx(table[(gpu, "fp8")], abs=6e-4)
    assert np.isnan(eff.loc["ampere", "infer_mla_decode_eff"])
    frame = pd.DataFrame({"task": "serve", "model": "deepseek-v3", "system": ["b200", "b200", "b200"], "gpus": 8,
                          "tp": 1, "dp": 8, "ep": 8, "precision": "fp4", "kv_precision": ["fp8", "bf16", "fp8"],
                          "input_len": 1024, "output_len": 8192,
                          "stack": ["tensorrt-llm-1.1", "tensorrt-llm-1.1", "vllm-0.11"]})
    x, systems = serve_inputs(frame, "test")
    xx = {**x, **hwcat.hardware_columns(systems)}
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    ctx = np.full(3, 4096.0)
    t, once = decode_attention_time(ctx, xx, np.ones(3), kv_b, mla_decode=x["mla_decode"])
    flops = 2.0 * 4096.0 * 128 * (2 * 512 + 64)
    b200 = hwcat.systems().loc["b200", "tensor_fp16_tflops"] * 1e12
    assert x["mla_decode"][0] == 1 and x["mla_decode"][2] == 0
    assert t[0] == pytest.approx(max(flops / (b200 * eff.loc["blackwell", "infer_mla_decode_eff_fp8"]),
                                     once[0] / xx["memory_rate"][0]), rel=1e-5)
    assert t[1] == pytest.approx(max(flops / (b200 * eff.loc["blackwell", "infer_mla_decode_eff"]),
                                     once[1] / xx["memory_rate"][1]), rel=1e-5)
    assert t[2] > 2.0 * t[0]  # the roofline at the training attention rate
