"""Validation against the measured cases in shared/reference, with the tolerances issue 2 names."""

from __future__ import annotations

import filecmp

import pytest

from dse.validation.fit import default_assumptions_path
from dse.validation.validate import load_assumptions, summarize, validate_file
from tests.conftest import SHARED, VENDORED

TARGETS = {
    "megatron_narayanan2021_table1.csv": 5.0,
    "megatron_korthikanti2022_table4.csv": 8.0,
    "nemo_h100_24.07.csv": 10.0,
    "llama2_inference_a100.csv": 10.0,
}
#: TensorRT-LLM 0.9.0: MAPE <= 15 % per metric over the dense-model rows (mixture-of-experts rows are skipped,
#: see the reason in dse/validation/validate.py).
TRTLLM = "trtllm_0.9.0_a100_h100.csv"


@pytest.fixture(scope="module")
def assumptions():
    return load_assumptions(default_assumptions_path())


@pytest.mark.parametrize("name,limit", sorted(TARGETS.items()))
def test_mape_within_target(ref, assumptions, name, limit):
    results = validate_file(ref / name, assumptions)
    (summary,) = summarize(results)
    print(f"\n{name}: n={summary['n']} MAPE={summary['mape_pct']:.2f}% max|err|={summary['max_abs_error_pct']:.2f}% "
          f"skipped={summary['skipped']}")
    for r in results:
        print(f"  {r.case:48s} measured {r.measured:10.4g} predicted {r.predicted:10.4g} ({r.error_pct:+6.2f}%)")
    assert summary["skipped"] == 0, "every training case of this file is supported"
    assert summary["mape_pct"] <= limit


@pytest.mark.parametrize("metric", ["output_tokens_per_s_per_gpu", "ttft_s"])
def test_trtllm_mape_within_target(ref, assumptions, metric):
    results = [r for r in validate_file(ref / TRTLLM, assumptions) if r.metric == metric]
    compared = [r for r in results if r.error_pct is not None]
    skipped = [r for r in results if r.skipped is not None]
    mape = sum(abs(r.error_pct) for r in compared) / len(compared)
    print(f"\n{TRTLLM} {metric}: n={len(compared)} MAPE={mape:.2f}% skipped={len(skipped)}")
    for r in results:
        tail = f"({r.error_pct:+6.2f}%)" if r.error_pct is not None else "skipped (MoE)"
        print(f"  {r.case:60s} measured {r.measured:10.4g} predicted {r.predicted or float('nan'):10.4g} {tail}")
    assert all("mixtral" in r.case for r in skipped)
    assert len(compared) >= 20
    assert mape <= 15.0


def test_korthikanti_variant_ordering(ref, assumptions):
    """Table 4 orders the five variants none+sp < none < selective+sp < selective < full."""
    results = {r.case.rsplit("layer-", 1)[1]: r.predicted
               for r in validate_file(ref / "megatron_korthikanti2022_table4.csv", assumptions)}
    order = ["none-sp", "none", "selective-sp", "selective", "full"]
    assert [results[k] for k in order] == sorted(results[k] for k in order)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference not present beside this checkout")
def test_reference_copy_matches_shared():
    names = sorted(p.name for p in SHARED.iterdir() if p.suffix in (".csv", ".md"))
    match, mismatch, errors = filecmp.cmpfiles(SHARED, VENDORED, names, shallow=False)
    assert not mismatch and not errors, f"tests/reference differs from ../shared/reference: {mismatch + errors}"


def test_every_shared_file_reads_and_names_its_stack(ref):
    """Every shared file carries the `stack` column (schema of tests/reference/README.md) and each value is a
    known stack; every `serve` row is predicted, but the one measured above the HBM bound of its configuration."""
    from dse.stacks import stack_names
    from dse.validation.validate import read_cases

    for path in sorted(ref.glob("*.csv")):
        frame = read_cases(path)
        assert frame["stack"].isin(stack_names()).all(), path.name
    serve = validate_file(ref / "trtllm_0.10.0_serve_a100_h100.csv")
    assert len(serve) == 123
    assert all(r.skipped is None and r.predicted > 0 for r in serve if "HBM bound" not in (r.skipped or ""))
    assert sum(r.skipped is not None for r in serve) == 1


def test_readme_validation_table_is_the_validate_output(ref, assumptions):
    """The README's "Validation (shared/reference)" table (cases, MAPE, max abs error) is what `dse validate`
    measures today, one row per file and metric, every reference file present."""
    import re

    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Validation (shared/reference)"):]
    section = section[:section.index("\n\n", section.index("| file | metric"))]
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (\d+)[^|]*\| ([\d.]+) % \| ([\d.]+) % \|", section, re.M)
    seen = set()
    for name, metric, n, mape, worst in rows:
        (summary,) = [s for s in summarize(validate_file(ref / name, assumptions)) if s["metric"] == metric]
        assert summary["n"] == int(n), (name, metric)
        assert float(mape) == pytest.approx(summary["mape_pct"], abs=0.006), (name, metric)
        assert float(worst) == pytest.approx(summary["max_abs_error_pct"], abs=0.06), (name, metric)
        seen.add(name)
    assert seen == {p.name for p in ref.glob("*.csv")}


def test_readme_todays_models_table_is_the_validate_output(assumptions):
    """The README's "Today's models" table (cases, MAPE, max abs error) is what `dse validate` measures on the MoE
    case files kept in tests/cases."""
    import re

    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Today's models (issue 23)"):]
    section = section[:section.index("\n\n", section.index("| file | metric"))]
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (\d+)[^|]*\| ([\d.]+) % \| ([\d.]+) % \|", section, re.M)
    assert len(rows) == 3
    for name, metric, n, mape, worst in rows:
        (summary,) = [s for s in summarize(validate_file(REPO / "tests" / "cases" / name, assumptions))
                      if s["metric"] == metric]
        assert summary["n"] == int(n), (name, metric)
        assert float(mape) == pytest.approx(summary["mape_pct"], abs=0.006), (name, metric)
        assert float(worst) == pytest.approx(summary["max_abs_error_pct"], abs=0.06), (name, metric)


@pytest.mark.parametrize("name", ["torchtitan_2024-08_a100_h100.csv", "torchtitan_2024-12_h100.csv"])
def test_torchtitan_cases_are_all_predicted(name):
    """Issue 25: every torchtitan row has a prediction -- the pipeline-parallel FSDP2 rows included (they were the
    reason 'zero >= 2 with pp > 1 unsupported'). Their MAPE is in the README ("torchtitan"); the issue's 20 % on
    tokens/s is asserted in test_torchtitan_2024_12_throughput_meets_the_issue_target."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / name)
    assert results and all(r.skipped is None and r.predicted is not None for r in results)


def test_torchtitan_2024_12_throughput_meets_the_issue_target():
    """Issue 25: torchtitan's Dec 2024 H100 runs at <= 20 % tokens/s MAPE with every row predicted (18.39 % with
    PyTorch's ring bookkeeping and its exposed last KV-gradient hop, dse.cost.parallel)."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "torchtitan_2024-12_h100.csv")
    (summary,) = [s for s in summarize(results) if s["metric"] == "tokens_per_s_per_gpu"]
    assert summary["n"] == 18 and summary["mape_pct"] <= 20.0


def test_megatron_core_r0_8_h100_weak_scaling_is_held_out_within_its_bound():
    """Issue 25: the nine GPT runs of Megatron-LM's README (Megatron-Core r0.8.0, H100, BF16, MFU 41-49 %),
    out of sample.  Measured: 8.4 % MAPE (9.9 % before Hopper's 16-bit GEMM efficiency was refitted on NVIDIA's
    NeMo recipes, 10.4 % before the overlap cost); 1.7B +23.5 % and 7.1B +10.9 % (small models, dse too fast),
    70B-177B within -5 ... +0.2 %, 314B and 462B -13 / -12 % (one chunk per stage assumed).  The bound records today's
    figure so a change that makes it worse is seen; it is not a claim of accuracy."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "megatron_core_r0.8_h100_gpt.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 9 and summary["skipped"] == 0 and summary["mape_pct"] <= 9.0


def test_dgxc_nemo_h100_runs_are_predicted_within_their_bound():
    """Issue 25: NVIDIA's DGX Cloud benchmarking NeMo 24.12 recipes (dgxc-benchmarking @8f5cbb37: Llama 3.1 8B,
    70B, 405B and GPT-3 175B on 8-2304 H100, BF16 and FP8, no recomputation), the highest-MFU published >= 70B BF16
    Hopper runs found.  Every row is predicted (38).  Before its BF16 rows entered the fit of Hopper's 16-bit GEMM
    efficiency dse put the file at 5.37 % MAPE, every BF16 row 4-8 % too fast; then 2.83 % (BF16 rows in sample,
    FP8 rows out of sample, their constant fitted on the shared NeMo 24.07 file); 3.08 % once the residual stream's
    gradient sums were counted (constants.RESIDUAL_BWD_BYTES) and Hopper's FP8 efficiency refitted with them on the
    NeMo 24.07 file (0.470 -> 0.477), which makes the FP8 rows here faster.  The bound records the figure so a change
    that makes it worse is seen."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "dgxc_nemo_24.12_h100.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 38 and summary["skipped"] == 0 and summary["mape_pct"] <= 3.1


def test_maxtext_llama2_70b_h100_is_held_out_and_dse_is_not_faster_than_it():
    """Issue 25: NVIDIA's DGX Cloud benchmarking recipe for MaxText Llama 2 70B (dgxc-benchmarking
    maxtext/README_70b.md @143b90d, 64-2048 H100, FSDP, micro-batch 2, 4k tokens), out of sample: 51.5-52.6 % MFU
    by the recipe's formula (dse's counting gives the same) while recomputing most of the forward
    (remat_policy save_qkv_proj, taken as dse's full recomputation, ASSUMPTION): about 68 % hardware FLOP
    utilisation.  dse predicts every row slower than it ran: 22.1 % MAPE over the 12 rows, BF16 -22 ... -25 %
    (18.8 % and -15 ... -19 % before Hopper's 16-bit GEMM efficiency was refitted on NVIDIA's NeMo recipes, which
    dse had put 4-8 % too fast), FP8 -17 ... -28 %.  The bound records today's figure; the sign check records
    that dse is not faster than this XLA run on any BF16 row."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "maxtext_2024.12_llama2_70b_h100.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 12 and summary["skipped"] == 0 and summary["mape_pct"] <= 22.5
    bf16 = [r for r in results if "-bf16-" in r.case]
    assert len(bf16) == 6 and all(r.predicted is not None and r.predicted < r.measured for r in bf16)


def test_korthikanti_2022_table5_end_to_end_is_held_out_within_its_bound():
    """Issue 25: Korthikanti 2022 Table 5 (end-to-end iteration times of 22B, 175B, 530B and 1T on A100, full
    recomputation and sequence parallelism + selective recomputation), out of sample, with calculon's own validation
    layouts for what the paper leaves unstated (micro-batch, interleaving).  Measured: 5.0 % MAPE; 22B -2.4 / -4.4 %,
    175B +0.2 / -0.8 %, 530B +6.5 / +4.7 %, 1T +10.5 / +10.6 % (its 12 % bubble: without it dse would be within
    1 %).  Issue 25 asks 3.5 %; the bound records today's figure so that a change that makes it worse is seen."""
    from pathlib import Path

    results = validate_file(Path(__file__).parent / "cases" / "korthikanti2022_table5_a100.csv")
    (summary,) = summarize(results)
    assert summary["n"] == 8 and summary["skipped"] == 0 and summary["mape_pct"] <= 5.1


def test_every_case_file_under_tests_is_read_by_dse_validate(capsys):
    """Every measured-case file shipped under tests/ (tests/reference, tests/cases) is in the case-file schema, so a
    user can run `dse validate` on it: none is refused for its columns (exit 0; rows the model cannot answer are
    skipped with a reason, never an error)."""
    from pathlib import Path

    from dse.cli import main

    root = Path(__file__).parent
    files = sorted((root / "reference").glob("*.csv")) + sorted((root / "cases").glob("*.csv"))
    assert len(files) >= 25
    for path in files:
        assert main(["validate", str(path), "--json"]) == 0, path.name
        capsys.readouterr()


def test_a_measured_run_the_model_puts_over_its_memory_is_scored_with_a_note(tmp_path, capsys):
    """A measured run that the model predicts does not fit (exceeds_hbm) ran anyway: dse validate still scores its
    prediction and says, per case and in its printed notes, that the row leaves out a memory-saving setting or a
    memory term is missing.  Llama 3 70B without recomputation at 8 × 8192 tokens per GPU does not fit an 80 GB H100
    without tensor or pipeline parallelism."""
    import pandas as pd

    from dse.cli import main
    from dse.validation.validate import MEMORY_NOTE

    path = tmp_path / "cases.csv"
    base = {"task": "train", "model": "llama3-70b", "system": "h100-sxm-80gb", "gpus": 64, "tp": 1, "pp": 1,
            "dp": 64, "micro_batch": 8, "global_batch": 512, "seq_len": 8192, "recompute": "none", "zero": 3,
            "precision": "bf16", "metric": "tokens_per_s_per_gpu", "measured": 500, "source": "synthetic"}
    header = (VENDORED / "megatron_narayanan2021_table1.csv").read_text().splitlines()[0].split(",")
    rows = pd.DataFrame([{**base, "case": "over"}, {**base, "case": "fits", "tp": 8, "dp": 8, "micro_batch": 1,
                                                   "recompute": "full"}])
    rows.reindex(columns=header).to_csv(path, index=False)
    results = {r.case: r for r in validate_file(path)}
    assert results["over"].skipped is None and results["over"].predicted is not None
    assert results["over"].stack_note == MEMORY_NOTE and results["fits"].stack_note is None
    assert main(["validate", str(path)]) == 0
    assert f"note (1 case): {MEMORY_NOTE}" in capsys.readouterr().out
