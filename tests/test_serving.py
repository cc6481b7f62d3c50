"""Issue 10: the in-flight batching model (task: serve) — its laws, its limits, its reasons, and the shared
TensorRT-LLM 0.10.0 measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.cli import main
from dse.frame import InputError, evaluate, evaluate_infer, evaluate_serve
from dse.validation.validate import summarize, validate_file

BASE = {"model": "llama2-70b", "system": "h100-sxm-80gb", "tp": 4, "input_len": 512, "output_len": 256,
        "precision": "fp8"}


def serve(**changes) -> pd.Series:
    return evaluate_serve(pd.DataFrame([{**BASE, **changes}])).iloc[0]


def test_light_load_batch_one_meets_the_static_batch_model():
    """At request_rate -> 0 with batch 1 a request is alone in the engine: its TTFT and TPOT are the static
    batch-1 model's prefill and decode step."""
    s = serve(batch=1, request_rate=1e-4)
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
    assert s["concurrency"] == pytest.approx(rate * in_system, rel=0.03)
    assert s["tokens_per_s_per_user"] == pytest.approx(1.0 / s["tpot_s"])


def test_concurrency_never_exceeds_batch_or_kv_capacity():
    rows = pd.DataFrame([{**BASE, "batch": b, "input_len": i, "output_len": o, "max_num_tokens": n}
                         for b in (8, 64, 2048, None) for i, o in ((128, 128), (2048, 2048)) for n in (2048, None)])
    out = evaluate_serve(rows)
    cap = np.minimum(pd.to_numeric(rows["batch"]).fillna(np.inf), out["kv_capacity_requests"])
    assert (out["concurrency"] <= cap * (1 + 1e-9)).all()
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
    two = serve(tp=2, pp=2, system="a100-sxm-80gb", precision="fp16", batch=int(one["concurrency"]))
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
                 "KV cache capacity"):
        assert text in out, text
    assert len(out.splitlines()) <= 40  # one screen


def test_trtllm_0_10_serve_file(ref):
    """The shared in-flight batching measurements: every row is predicted (MoE included), MAPE reported.
    Measured with the shipped constants: 18.1 % (the issue's target is 15 %; see the README for the rows the
    model does not explain)."""
    results = validate_file(ref / "trtllm_0.10.0_serve_a100_h100.csv")
    (summary,) = summarize(results)
    print(f"\nserve MAPE {summary['mape_pct']:.2f} % over {summary['n']} rows")
    assert summary["skipped"] == 0 and summary["n"] == 123
    assert summary["mape_pct"] <= 19.0


def test_held_out_tensorrt_llm_1_0_llama33_70b():
    """Out of sample (nothing fitted on it): TensorRT-LLM 1.0 Llama-3.3 70B max-load throughput on H100, H200,
    B200, GB200 and the RTX PRO 6000 (tests/cases).  Measured: MAPE 11.8 % over 42 runs (13.7 % before the fp4
    GEMM efficiency was scaled from kernel benchmarks); Hopper FP8 within ~15 % per run; Blackwell FP4 -9 .. +24 %.
    The bounds are regression bounds, not claims of accuracy."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "trtllm_1.0_llama33_70b_serve.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 42 and summary["mape_pct"] <= 15.0
    hopper = [abs(r.error_pct) for r in results if "h100" in r.case or "h200" in r.case]
    assert max(hopper) <= 16.0


def test_held_out_tensorrt_llm_0_10_h200_l40s():
    """Out of sample (nothing fitted on it): the H200 FP8 and L40S FP8/FP16 columns of the same TensorRT-LLM
    0.10.0 table whose A100/H100 columns are the shared serve file (tests/cases, 108 runs).  Measured:
    MAPE 24.3 % (H200 27.2 %, L40S FP8 19.8 %, FP16 23.0 %), worse than the shared file's 18.1 %: the bound
    below records today's figure so a change that makes it worse is seen; it is not a claim of accuracy
    (README "Serving" says which terms are off)."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "trtllm_0.10.0_serve_h200_l40s.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 108 and summary["skipped"] == 0
    assert summary["mape_pct"] <= 25.0


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

    from dse.bench import random_serve_configs
    from dse.cost import serving
    from dse.hardware import catalog as hwcat

    x, systems = random_serve_configs(4000, seed=3)
    dense = (x["experts"] <= 1) & ~np.isnan(x["request_rate"]) & np.isnan(x["prefill_gpus"])
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
