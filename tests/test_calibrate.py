"""``dse calibrate``: recovers known constants from synthetic cases, and its result flows into
``dse validate``, ``dse explain`` and ``dse run`` through ``--calibration``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from dse.cli import main
from dse.frame import InputError
from dse.validation.calibrate import CaseSet, calibrate, default_parameters, load_calibration, parse_params
from dse.validation.fit import default_assumptions_path
from dse.validation.validate import load_assumptions, validate_file

#: Constants deliberately away from the shipped ones (0.681 / 0.956, 0.797 / 135.5 µs).
TRUTH_TRAIN = {("ampere", "matmul_eff_fp16"): 0.60, ("ampere", "memory_eff"): 0.85}
TRUTH_INFER = {("ampere", "infer_matmul_eff_fp16"): 0.70, ("ampere", "layer_overhead_us"): 90.0}


def synthetic(ref, name: str, truth: dict, out) -> str:
    """A copy of a reference file whose 'measured' column is the model's own prediction under ``truth``:
    a world where the model is exact and the constants are known, so a calibration must find them."""
    assumptions = load_assumptions(default_assumptions_path())
    predicted = {r.case: r.predicted for r in validate_file(ref / name, assumptions, truth)}
    frame = pd.read_csv(ref / name, dtype=str, keep_default_na=False)
    frame = frame[frame["case"].map(lambda c: predicted.get(c) is not None)]
    frame["measured"] = [repr(predicted[c]) for c in frame["case"]]
    path = out / name
    frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def assumptions():
    return load_assumptions(default_assumptions_path())


def test_recovers_training_constants(ref, tmp_path, assumptions):
    path = synthetic(ref, "megatron_narayanan2021_table1.csv", TRUTH_TRAIN, tmp_path)
    cases = CaseSet.load([path], assumptions)
    assert set(default_parameters(cases)) == set(TRUTH_TRAIN)
    result = calibrate(cases, list(TRUTH_TRAIN), leave_one_out=False)
    for key, value in TRUTH_TRAIN.items():
        assert result["constants"][key] == pytest.approx(value, rel=0.01), key
    assert result["mape_before_pct"] > 5.0  # the shipped constants are visibly off in this world ...
    assert result["mape_after_pct"] < 0.5  # ... and the fitted ones reproduce it


def test_recovers_inference_constants(ref, tmp_path, assumptions):
    """TensorRT-LLM throughput runs reach large batches, where the GEMMs are compute-bound: both constants
    are pinned down."""
    path = synthetic(ref, "trtllm_0.9.0_a100_h100.csv", TRUTH_INFER, tmp_path)
    result = calibrate(CaseSet.load([path], assumptions), list(TRUTH_INFER), leave_one_out=False)
    for key, value in TRUTH_INFER.items():
        assert result["constants"][key] == pytest.approx(value, rel=0.01), key


def test_weakly_constrained_constant_is_flagged_and_loo_stays_small(ref, tmp_path, assumptions):
    """The Llama-2 latency runs are small-batch decode (memory-bound): they fix the per-layer overhead but hardly
    the GEMM efficiency, and the uncertainty report says so instead of pretending otherwise."""
    path = synthetic(ref, "llama2_inference_a100.csv", TRUTH_INFER, tmp_path)
    cases = CaseSet.load([path], assumptions)
    result = calibrate(cases, list(TRUTH_INFER), leave_one_out=True)
    overhead, gemm = ("ampere", "layer_overhead_us"), ("ampere", "infer_matmul_eff_fp16")
    assert result["constants"][overhead] == pytest.approx(90.0, rel=0.01)
    # noise-free data: leaving a case out changes little, so the held-out error stays as small as the fit's
    assert result["mape_leave_one_out_pct"] < 0.5
    # with ±5 % measurement noise the standard errors tell the two constants apart
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    noise = np.random.default_rng(0).normal(0.0, 0.05, len(frame))
    frame["measured"] = [repr(float(m) * float(np.exp(e))) for m, e in zip(frame["measured"], noise, strict=True)]
    frame.to_csv(path, index=False)
    noisy = CaseSet.load([path], assumptions)
    fitted = calibrate(noisy, list(TRUTH_INFER), leave_one_out=False)
    unc = fitted["uncertainty_pct"]
    assert unc[overhead] < 10.0 < unc[gemm]


def test_leave_one_out_exposes_error_the_fit_hides(ref, tmp_path, assumptions):
    """With noise, each held-out case is predicted worse than (or as well as) when it was fitted on."""
    path = synthetic(ref, "megatron_narayanan2021_table1.csv", TRUTH_TRAIN, tmp_path)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    noise = [1.08, 0.93, 1.05, 0.97, 1.10, 0.90, 1.02, 0.96, 1.04, 0.95]
    frame["measured"] = [repr(float(m) * noise[i % len(noise)]) for i, m in enumerate(frame["measured"])]
    frame.to_csv(path, index=False)
    result = calibrate(CaseSet.load([path], assumptions), list(TRUTH_TRAIN), leave_one_out=True)
    assert result["mape_leave_one_out_pct"] >= result["mape_after_pct"] > 1.0


def test_cli_writes_a_file_that_validate_explain_and_run_use(ref, tmp_path, capsys):
    path = synthetic(ref, "megatron_narayanan2021_table1.csv", TRUTH_TRAIN, tmp_path)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", path, "-o", str(out), "--no-loo"]) == 0
    text = capsys.readouterr().out
    assert "MAPE with the fitted constants" in text and "matmul_eff_fp16" in text
    fitted = load_calibration(out)
    assert fitted[("ampere", "matmul_eff_fp16")] == pytest.approx(0.60, rel=0.01)

    # validate: near-zero error with the calibration, the synthetic offset without
    assert main(["validate", path, "--json", "--calibration", str(out)]) == 0
    with_cal = yaml.safe_load(capsys.readouterr().out)["summary"][0]["mape_pct"]
    assert main(["validate", path, "--json"]) == 0
    without = yaml.safe_load(capsys.readouterr().out)["summary"][0]["mape_pct"]
    assert with_cal < 0.5 < without

    # explain: a lower GEMM efficiency means a longer step
    args = ["explain", "--model", "gpt3-175b", "--system", "a100-sxm-80gb", "--gpus", "1024", "--tp", "8", "--pp",
            "16", "--micro-batch", "1", "--global-batch", "1536", "--seq-len", "2048", "--json"]
    assert main(args) == 0
    base = yaml.safe_load(capsys.readouterr().out)["configuration"]["step_time_s"]
    assert main([*args, "--calibration", str(out)]) == 0
    calibrated = yaml.safe_load(capsys.readouterr().out)["configuration"]["step_time_s"]
    assert calibrated > base * 1.05

    # run: the constants are recorded with the results, and change them
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "grid": {"model": "gpt3-175b", "system": "a100-sxm-80gb",
                                                          "gpus": 1024, "tp": 8, "pp": 16, "micro_batch": 1,
                                                          "global_batch": 1536, "seq_len": 2048}}))
    assert main(["run", str(spec), "-o", str(tmp_path / "r0"), "--jobs", "1", "-q"]) == 0
    assert main(["run", str(spec), "-o", str(tmp_path / "r1"), "--jobs", "1", "-q", "--calibration", str(out)]) == 0
    r0 = pd.read_parquet(tmp_path / "r0")["step_time_s"].iloc[0]
    r1 = pd.read_parquet(tmp_path / "r1")["step_time_s"].iloc[0]
    assert r1 == pytest.approx(calibrated, rel=1e-5) and r0 == pytest.approx(base, rel=1e-5)
    meta = pq.read_schema(next((tmp_path / "r1").glob("*.parquet"))).metadata[b"dse.spec"]
    assert b"matmul_eff_fp16" in meta and str(out).encode() in meta
    capsys.readouterr()


def test_bad_calibration_file_and_params_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"constants": [{"generation": "ampere", "constant": "warp_speed", "value": 1}]}))
    with pytest.raises(InputError, match=r"bad\.yaml: constants\[0\].*warp_speed.*allowed"):
        load_calibration(bad)
    assert main(["validate", "x.csv", "--calibration", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml: no such file" in capsys.readouterr().err
    with pytest.raises(InputError, match="--params: value 'ampere:nope'.*allowed"):
        parse_params("ampere:nope")
    assert parse_params("ampere:memory_eff, hopper:matmul_eff_fp8") == [("ampere", "memory_eff"),
                                                                        ("hopper", "matmul_eff_fp8")]


@pytest.mark.parametrize("constant,value,bound", [("matmul_eff_fp16", 5.0, "1.2"), ("layer_overhead_us", 5000, "1000"),
                                                   ("mmha_elements_per_clk", 500, "128"), ("memory_eff", True, "1.2")])
def test_a_calibration_value_beyond_the_fit_bound_exits_2(tmp_path, capsys, constant, value, bound):
    """Issue 24: a hand-edited efficiency of 5.0 (5 x the peak) was used without a word."""
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"constants": [{"generation": "ampere", "constant": constant, "value": value}]}))
    with pytest.raises(InputError, match=rf"cal\.yaml: constants\[0\]: ampere:{constant} value .* is not allowed; "
                                         rf"allowed: a positive number at most {bound} \(the bound"):
        load_calibration(cal)
    assert main(["explain", "--model", "llama3-8b", "--system", "a100-sxm-80gb", "--gpus", "8", "--tp", "1", "--pp",
                 "1", "--seq-len", "2048", "--global-batch", "64", "--calibration", str(cal)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    cal.write_text(yaml.safe_dump({"constants": [{"generation": "ampere", "constant": constant, "value": 0.9}]}))
    assert load_calibration(cal) == {("ampere", constant): 0.9}


def test_a_constant_the_files_cannot_pin_is_flagged(ref, assumptions):
    """Issue 11: on the shared cases Hopper memory_eff moves 0.956 -> ~0.82 with the MAPE unchanged; its
    standard error must say so (>= 10 %, the CLI's 'weakly constrained' flag).  The cluster-robust estimate
    counts a file's cases as correlated, which they are (one software stack, one machine)."""
    from dse.validation.calibrate import uncertainty

    # the training and static-inference files (the serving files' decode KV reads also pin memory_eff)
    files = sorted(str(p) for p in ref.glob("*.csv")
                   if "serve" not in set(pd.read_csv(p, usecols=["task"])["task"]))
    cases = CaseSet.load(files, assumptions)
    params = default_parameters(cases)
    result = calibrate(cases, params, leave_one_out=False)
    unc, _ = uncertainty(cases, params, result["constants"])
    assert unc[("hopper", "memory_eff")] >= 10.0
    moved = abs(result["constants"][("hopper", "memory_eff")] / result["shipped"][("hopper", "memory_eff")] - 1)
    assert moved * 100 < 2.5 * unc[("hopper", "memory_eff")], "the move is within the reported uncertainty"


#: The published H100 BF16 training runs Hopper's 16-bit GEMM efficiency is fitted on (efficiency.csv, hopper
#: row): each file's rows with precision bf16 on an H100; the files' other rows do not involve the constant
#: (A100 rows, memory rows) or mix in FP8 GEMMs (Float8 rows).  Runs whose micro-batch, interleaving or
#: recomputation the source leaves unstated are kept out (meta2024_llama3_405b_h100.csv: its micro-batch;
#: megatron_core_r0.8_h100_gpt.csv; MaxText's single XLA program).
HOPPER_BF16_FIT_FILES = ("llmfoundry_2023_h100_a100_bf16.csv", "torchtitan_2024-12_h100.csv",
                         "torchtitan_2024-08_a100_h100.csv", "dgxc_nemo_24.12_h100.csv")


def test_hopper_bf16_gemm_efficiency_is_the_fit_on_published_runs(tmp_path):
    """The shipped hopper matmul_eff_fp16 is what `dse calibrate --params hopper:matmul_eff_fp16` finds on the
    published BF16 H100 runs of tests/cases (39 runs; the fit gives 0.5623, shipped 0.5623): rerunning the fit
    reproduces it, so the constant is not tuned by hand.  The blackwell rows copy it (ASSUMPTION, as their
    source says for every constant)."""
    from pathlib import Path

    from dse.hardware import catalog as hwcat
    cases_dir = Path(__file__).parent / "cases"
    files = []
    for name in HOPPER_BF16_FIT_FILES:
        frame = pd.read_csv(cases_dir / name, dtype=str, keep_default_na=False)
        keep = (frame["precision"] == "bf16") & frame["system"].str.startswith("h100") & \
               (frame["metric"] != "peak_memory_gb")
        frame.loc[keep].to_csv(tmp_path / name, index=False)
        files.append(str(tmp_path / name))
    result = calibrate(CaseSet.load(files), [("hopper", "matmul_eff_fp16")], leave_one_out=False)
    assert result["cases"] == 39
    fitted = result["constants"][("hopper", "matmul_eff_fp16")]
    eff = hwcat.efficiency()
    assert eff.loc["hopper", "matmul_eff_fp16"] == pytest.approx(fitted, abs=0.002)
    assert eff.loc["blackwell", "matmul_eff_fp16"] == eff.loc["hopper", "matmul_eff_fp16"]
    assert eff.loc["blackwell-sm120", "matmul_eff_fp16"] == eff.loc["hopper", "matmul_eff_fp16"]
    assert result["mape_after_pct"] <= result["mape_before_pct"] + 1e-9  # the shipped value is the optimum


def test_calibrate_fits_serving_rows_and_recovers_a_known_rate(ref, tmp_path, assumptions):
    """`task: serve` rows go through the serving kernel, as `dse validate` evaluates them: synthetic measurements
    made with a known Hopper masked-MHA rate (the TensorRT-LLM 0.10 file's H100 rows) are fitted back to it."""
    truth = {("hopper", "mmha_elements_per_clk"): 9.0}
    path = synthetic(ref, "trtllm_0.10.0_serve_a100_h100.csv", truth, tmp_path)
    result = calibrate(CaseSet.load([path], assumptions), list(truth), leave_one_out=False)
    assert result["constants"][("hopper", "mmha_elements_per_clk")] == pytest.approx(9.0, rel=0.01)
    assert result["mape_after_pct"] < 0.5


def test_ada_decode_rate_is_the_fit_on_published_l40s_runs():
    """The shipped ada mmha_elements_per_clk is what `dse calibrate --params ada:mmha_elements_per_clk` finds on
    the published TensorRT-LLM 0.10.0 L40S runs of tests/cases (the same file's H200 rows do not depend on it), so
    the constant is not tuned by hand; it sits below the Ampere and Hopper rates fitted on shared/reference."""
    from pathlib import Path

    from dse.hardware import catalog as hwcat
    path = Path(__file__).parent / "cases" / "trtllm_0.10.0_serve_h200_l40s.csv"
    result = calibrate(CaseSet.load([path], load_assumptions(default_assumptions_path())),
                       [("ada", "mmha_elements_per_clk")], leave_one_out=False)
    eff = hwcat.efficiency()
    fitted = result["constants"][("ada", "mmha_elements_per_clk")]
    assert eff.loc["ada", "mmha_elements_per_clk"] == pytest.approx(fitted, abs=0.02)
    assert fitted < min(eff.loc["ampere", "mmha_elements_per_clk"], eff.loc["hopper", "mmha_elements_per_clk"])
