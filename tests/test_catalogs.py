"""Tests of the data catalogs: dse/hardware/systems.csv, dse/hardware/efficiency.csv, dse/models/models.csv.

The files are read twice: raw (every cell as text, so "empty" means an empty cell) to check provenance and
presence, and through the package's loaders (:mod:`dse.hardware.catalog`, :mod:`dse.models.catalog`) to check
the numbers the cost model actually uses.
"""

from __future__ import annotations

import math
import re
from importlib import resources

import numpy as np
import pandas as pd
import pytest

from dse.codes import MLP
from dse.cost.transformer import total_params
from dse.hardware import catalog as hwcat
from dse.models import catalog as modelcat
from dse.models.catalog import parameter_counts
from tests.conftest import REPO

SHARED_SPECS = REPO.parent / "shared" / "hardware_specs.csv"


def _raw(package: str, name: str) -> pd.DataFrame:
    """A catalog file with every cell as text; empty cells are ''."""
    with resources.files(package).joinpath(name).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


SYSTEMS_RAW = _raw("dse.hardware", "systems.csv")
EFFICIENCY_RAW = _raw("dse.hardware", "efficiency.csv")
MODELS_RAW = _raw("dse.models", "models.csv")


def _present(cell: str) -> bool:
    return cell.strip() != ""


# ---------------------------------------------------------------------------------------------------------
# systems.csv
# ---------------------------------------------------------------------------------------------------------

#: Numeric columns of systems.csv; the first five are required for every system, the rest may be empty
#: (no fp8/fp4 tensor cores, no NIC on a consumer card, ...).
REQUIRED_SYSTEM_NUMBERS = ("tensor_fp16_tflops", "hbm_gb", "hbm_tbps", "scaleup_gpus", "scaleup_gbps")
OPTIONAL_SYSTEM_NUMBERS = ("tensor_fp8_tflops", "tensor_fp4_tflops", "vector_fp32_tflops", "scaleout_gbit",
                           "tdp_w")


def test_systems_catalog_loads_and_names_are_unique():
    names = list(SYSTEMS_RAW["name"])
    assert len(names) == len(set(names))
    assert hwcat.system_names() == tuple(names)
    assert all(n == n.strip().lower() for n in names), "names are lower-case (lookups lower-case their input)"


#: Systems the shared spec table does not have, sourced in systems.csv itself (issue 10: serving GPUs).
SOURCED_HERE = {"rtx-pro-6000", "h100-sxm-96gb"}
#: Servers of a GPU the shared table has, with another GPU interconnect (issue 21): their GPU numbers are that row's.
VARIANT_OF = {"rtx3090-nvlink": "rtx3090"}


def test_every_system_has_a_source():
    missing = [r["name"] for _, r in SYSTEMS_RAW.iterrows() if not _present(r["source"])]
    assert not missing, f"systems.csv rows without a source: {missing}"
    # each row says which row of the shared spec table it was derived from, or (systems the shared table lacks)
    # cites its own vendor sources
    for _, r in SYSTEMS_RAW.iterrows():
        if r["name"] in SOURCED_HERE:
            assert "https://www.nvidia.com" in r["source"] and "DERIVED" in r["notes"], r["name"]
        else:
            assert f"shared/hardware_specs.csv row {VARIANT_OF.get(r['name'], r['name'])}" in r["source"], r["name"]


def test_system_numbers_positive_where_present():
    problems = []
    for _, r in SYSTEMS_RAW.iterrows():
        for col in REQUIRED_SYSTEM_NUMBERS + OPTIONAL_SYSTEM_NUMBERS:
            cell = r[col]
            if not _present(cell):
                if col in REQUIRED_SYSTEM_NUMBERS:
                    problems.append(f"{r['name']}.{col} is empty")
                continue
            value = float(cell)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{r['name']}.{col} = {cell!r}")
    assert not problems, problems


def test_scaleup_gpus_is_a_whole_number():
    for _, r in SYSTEMS_RAW.iterrows():
        assert float(r["scaleup_gpus"]).is_integer(), r["name"]


@pytest.mark.parametrize("name", list(SYSTEMS_RAW["name"]))
def test_low_precision_peaks_follow_the_generation(name):
    """Ampere has no fp8 tensor cores, Hopper/Ada add fp8, Blackwell (datacenter and GB202) adds fp4."""
    r = SYSTEMS_RAW.set_index("name").loc[name]
    fp8, fp4 = _present(r["tensor_fp8_tflops"]), _present(r["tensor_fp4_tflops"])
    generation = r["generation"]
    if generation == "ampere":
        assert not fp8 and not fp4
    elif generation in ("hopper", "ada"):
        assert fp8 and not fp4
    elif generation in ("blackwell", "blackwell-sm120"):
        assert fp8 and fp4
    else:
        pytest.fail(f"generation {generation!r} of {name} has no expectation in this test; add one")
    # a lower precision never has a lower peak than a higher one
    if fp8:
        assert float(r["tensor_fp8_tflops"]) >= float(r["tensor_fp16_tflops"])
    if fp4:
        assert float(r["tensor_fp4_tflops"]) >= float(r["tensor_fp8_tflops"])


# NVIDIA datasheet dense (no 2:4 sparsity) FP16/BF16 tensor-core peaks: A100 312, H100 SXM 989 (datasheet
# 1,979 "with sparsity" halved), HGX B200 2,250 TFLOP/s.  These are the vendor values recorded in
# ../shared/hardware_specs.csv (column dense_fp16_bf16_tflops), from which systems.csv is derived.
DENSE_FP16_TFLOPS = {"a100-sxm-80gb": 312.0, "h100-sxm-80gb": 989.0, "b200": 2250.0}


@pytest.mark.parametrize("name,tflops", sorted(DENSE_FP16_TFLOPS.items()))
def test_dense_fp16_peaks(name, tflops):
    assert hwcat.systems().loc[name, "tensor_fp16_tflops"] == tflops
    # and the kernels see the same peak, in FLOP/s
    hw = hwcat.hardware_columns(hwcat.system_codes([name]))
    assert hw["tensor_fp16_flops"][0] == pytest.approx(tflops * 1e12, rel=1e-12)


@pytest.mark.skipif(not SHARED_SPECS.exists(), reason="../shared/hardware_specs.csv not beside this checkout")
def test_peaks_match_shared_hardware_specs():
    """Compute peaks and memory of every catalogued system equal the shared spec table they come from."""
    shared = pd.read_csv(SHARED_SPECS).set_index("catalog_name")
    for name, tflops in DENSE_FP16_TFLOPS.items():
        assert shared.loc[name, "dense_fp16_bf16_tflops"] == tflops
    pairs = {"tensor_fp16_tflops": "dense_fp16_bf16_tflops", "tensor_fp8_tflops": "dense_fp8_tflops",
             "tensor_fp4_tflops": "dense_fp4_tflops", "hbm_gb": "hbm_capacity_gb",
             "hbm_tbps": "hbm_bandwidth_tbps"}
    cat = hwcat.systems()
    missing = sorted(set(cat.index) - set(shared.index) - SOURCED_HERE - set(VARIANT_OF))
    assert not missing, f"systems without a row in shared/hardware_specs.csv: {missing}"
    for name in set(cat.index) - SOURCED_HERE:
        for ours, theirs in pairs.items():
            a, b = cat.loc[name, ours], shared.loc[VARIANT_OF.get(name, name), theirs]
            assert (np.isnan(a) and pd.isna(b)) or a == b, f"{name}: {ours}={a} vs shared {theirs}={b}"


# ---------------------------------------------------------------------------------------------------------
# efficiency.csv
# ---------------------------------------------------------------------------------------------------------

EFF_FRACTIONS = tuple(c for c in hwcat.EFFICIENCY_COLUMNS if "eff" in c)
EFF_LATENCIES = tuple(c for c in hwcat.EFFICIENCY_COLUMNS if c.endswith("_us"))
EFF_PER_CLOCK = tuple(c for c in hwcat.EFFICIENCY_COLUMNS if c.endswith("_per_clk"))
EFF_RATIOS = tuple(c for c in hwcat.EFFICIENCY_COLUMNS if c.startswith("moe_routing_skew"))


def test_every_generation_in_systems_has_efficiency_row():
    generations = set(SYSTEMS_RAW["generation"])
    rows = list(EFFICIENCY_RAW["generation"])
    assert len(rows) == len(set(rows)), "one efficiency row per generation"
    assert generations <= set(rows), f"no efficiency row for {sorted(generations - set(rows))}"


def test_efficiencies_in_range():
    eff = hwcat.efficiency()
    kinds = set(EFF_FRACTIONS) | set(EFF_LATENCIES) | set(EFF_PER_CLOCK) | set(EFF_RATIOS)
    assert kinds == set(hwcat.EFFICIENCY_COLUMNS)
    assert EFF_PER_CLOCK == hwcat.PER_CLOCK_COLUMNS
    assert EFF_RATIOS == hwcat.RATIO_COLUMNS
    for gen, r in eff.iterrows():
        for col in EFF_FRACTIONS:
            v = r[col]
            if np.isnan(v):
                continue
            # 1.2 leaves room for NVLink SHARP all-reduce, whose bus bandwidth exceeds the line rate
            assert 0.0 < v <= 1.2 == hwcat.constant_upper_bound(col), f"{gen}.{col} = {v}"
        for col in EFF_LATENCIES:
            assert r[col] > 0, f"{gen}.{col} = {r[col]}"
        # routing skew: the MoE layer under real routing is no faster than balanced at one rank, and grows with
        # the ranks (every generation has both, measured or carried)
        assert 1.0 <= r["moe_routing_skew"] <= hwcat.constant_upper_bound("moe_routing_skew") == 4.0, gen
        assert 0.0 <= r["moe_routing_skew_per_doubling"] <= 4.0, gen
        # element rates per SM and clock: an SM issues 4 warp instructions per clock (32 lanes each), so an
        # element that costs at least one lane-instruction cannot go faster than 128 per SM-clock; masked MHA
        # is needed by every generation (decode_kv_reads = per_query_head); XQA's fraction of HBM bandwidth
        # (among the fractions above) only where the kernel exists
        assert hwcat.constant_upper_bound("mmha_elements_per_clk") == 128.0
        assert 0.0 < r["mmha_elements_per_clk"] <= 128.0, f"{gen}.mmha_elements_per_clk"
        # the 16-bit constants are needed by every generation
        for col in ("matmul_eff_fp16", "attention_eff", "memory_eff", "scaleup_ring_eff",
                    "scaleup_allreduce_eff", "scaleout_eff"):
            assert not np.isnan(r[col]), f"{gen}.{col} is empty"


def test_low_precision_efficiency_present_where_a_peak_is():
    """A system with an fp8 (fp4) peak needs its generation's fp8 (fp4) matmul efficiency, else its achieved
    rate would silently be 0."""
    eff = hwcat.efficiency()
    sysf = hwcat.systems()
    for prec in ("fp8", "fp4"):
        for name, r in sysf.iterrows():
            if not np.isnan(r[f"tensor_{prec}_tflops"]):
                assert not np.isnan(eff.loc[r["generation"], f"matmul_eff_{prec}"]), (name, prec)


#: Words in an efficiency row's ``source`` that cover several constants at once.
_GROUP_WORDS: dict[str, tuple[str, ...]] = {
    "every constant": hwcat.EFFICIENCY_COLUMNS,
    "latencies": ("scaleup_latency_us", "scaleout_latency_us"),
    "16-bit": ("matmul_eff_fp16", "attention_eff"),
    "memory": ("memory_eff",),
    "fp8": ("matmul_eff_fp8",),
    "fp4": ("matmul_eff_fp4",),
}
#: A clause is "sourced" when it cites something checkable.
_CITATION = re.compile(r"arXiv|paper|issues? \d|https?://|github", re.IGNORECASE)


def provenance(source: str) -> dict[str, set[str]]:
    """For each efficiency constant, the statuses the ``source`` text gives it: FITTED, ASSUMPTION or sourced.

    The text is a list of ``constant(s): status ...`` clauses separated by ';'.  A clause classifies every
    constant it names (or names through a group word above); its status is FITTED or ASSUMPTION when that
    word appears in it, else 'sourced' when it cites a paper, an issue or a URL.
    """
    out: dict[str, set[str]] = {c: set() for c in hwcat.EFFICIENCY_COLUMNS}
    for clause in (c.strip() for c in source.split(";")):
        named = {c for c in hwcat.EFFICIENCY_COLUMNS if re.search(rf"\b{c}\b", clause)}
        for word, cols in _GROUP_WORDS.items():
            if re.search(rf"(?<![\w-]){re.escape(word)}\b", clause):  # a whole word, not infer_matmul_eff_fp8's tail
                named |= set(cols)
        status = ("FITTED" if "FITTED" in clause else "ASSUMPTION" if "ASSUMPTION" in clause
                  else "sourced" if _CITATION.search(clause) else None)
        for c in named:
            out[c].add(status or "unclassified")
    return out


@pytest.mark.parametrize("generation", [
    g for g in EFFICIENCY_RAW["generation"]
])
def test_efficiency_source_classifies_every_constant(generation):
    raw = EFFICIENCY_RAW.set_index("generation").loc[generation]
    assert _present(raw["source"])
    assert any(word in raw["source"] for word in ("FITTED", "ASSUMPTION")) or _CITATION.search(raw["source"])
    statuses = provenance(raw["source"])
    unclassified = []
    for col in hwcat.EFFICIENCY_COLUMNS:
        if not _present(raw[col]):
            continue    # empty: the generation lacks that precision (see the notes column)
        if not statuses[col] or statuses[col] == {"unclassified"}:
            unclassified.append(col)
    assert not unclassified, \
        f"{generation}: source does not say FITTED / sourced / ASSUMPTION for {unclassified}"


def test_fitted_constants_name_the_fitter():
    """FITTED constants say what they were fitted on and with what, so the fit can be rerun: the shared files by
    dse.validation.fit, or published runs under tests/cases by `dse calibrate` (test_calibrate reruns it)."""
    for _, r in EFFICIENCY_RAW.iterrows():
        for clause in r["source"].split(";"):
            if "FITTED" in clause:
                on_shared = "shared/reference" in clause and "dse.validation.fit" in clause
                # or on published runs kept in tests/cases, by `dse calibrate` (a test reruns that fit)
                on_cases = "tests/cases" in clause and "dse calibrate --params" in clause
                assert on_shared or on_cases, clause


def test_provenance_parser_on_known_rows():
    """The parser above reads the ampere and blackwell rows as their text says."""
    amp = provenance(EFFICIENCY_RAW.set_index("generation").loc["ampere", "source"])
    assert amp["matmul_eff_fp16"] == {"FITTED"} and amp["memory_eff"] == {"FITTED"}
    assert amp["attention_eff"] == {"sourced"} and amp["scaleout_eff"] == {"sourced"}
    assert amp["scaleup_latency_us"] == {"ASSUMPTION"}
    bw = provenance(EFFICIENCY_RAW.set_index("generation").loc["blackwell", "source"])
    derived = {"matmul_eff_fp4", "infer_matmul_eff_fp16", "infer_matmul_eff_fp8", "infer_matmul_eff_fp4",
               "infer_attention_eff", "infer_attention_eff_fp8", "infer_allreduce_eff", "infer_allreduce_latency_us",
               "moe_routing_skew", "moe_routing_skew_per_doubling", "infer_allgather_eff", "infer_allgather_latency_us",
               "infer_mla_decode_eff", "infer_mla_decode_eff_fp8"}
    assert all(bw[c] == {"ASSUMPTION"} for c in hwcat.EFFICIENCY_COLUMNS if c not in derived)
    assert all("sourced" in bw[c] for c in derived)  # kernel benchmarks / TensorRT-LLM's GEMM tables


# ---------------------------------------------------------------------------------------------------------
# models.csv
# ---------------------------------------------------------------------------------------------------------

MODELS = modelcat.models()


def test_every_model_has_a_source():
    missing = [r["name"] for _, r in MODELS_RAW.iterrows() if not _present(r["source"])]
    assert not missing, missing
    assert MODELS_RAW["name"].is_unique


@pytest.mark.parametrize("name", list(MODELS.index))
def test_model_dimensions_consistent(name):
    r = MODELS.loc[name]
    for col in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k"):
        assert r[col] >= 1, col
    assert r["hidden"] % r["heads"] == 0, "heads divide hidden"
    assert r["heads"] % r["kv_heads"] == 0, "kv_heads divide heads"
    assert r["experts"] >= r["top_k"]
    assert r["mlp"] in ("gelu", "swiglu", "relu2") and r["mlp"] in MLP
    assert r["tied_embeddings"] in (0, 1) and r["linear_bias"] in (0, 1)


#: A row whose notes say "MISMATCH>3%" explains why its published count is further from the formula
#: (a rounded size label; e.g. nemotron-8b: "'8B' is a size label ... implies ~8.5B", computed 8.54B).
MISMATCH_NOTE = "MISMATCH>3%"
WITHIN = 0.03
WITHIN_EXPLAINED = 0.08

_WITH_PUBLISHED = [n for n in MODELS.index if not pd.isna(MODELS.loc[n, "params_published_b"])]


def _computed_params(r: pd.Series) -> float:
    return float(parameter_counts(r.to_frame().T)[0][0])


@pytest.mark.parametrize("name", _WITH_PUBLISHED)
def test_parameter_formula_matches_published_count(name):
    """The package's parameter count of each catalogued shape is close to the count its authors published.

    ``total_params`` is the standard count 12·L·h² + V·h (Narayanan et al. 2021 Eq. 2 without biases)
    generalised to GQA (K/V width g·h/a), gated FFNs (3 matrices for swiglu), MoE (E experts + router) and
    untied output embeddings; biases, norms and learned position embeddings are left out (< 0.1 % at these
    sizes).  The published counts come from the model authors (papers, model cards, configs), not from this
    package, so agreement checks both the formula and the transcription of every dimension in models.csv: a
    wrong layer count, width or vocabulary moves the count by far more than 3 %.
    """
    r = MODELS.loc[name]
    computed = _computed_params(r) / 1e9
    published = float(r["params_published_b"])
    assert published > 0
    rel = abs(computed / published - 1.0)
    notes = str(r["notes"])
    if MISMATCH_NOTE in notes:
        # the note must explain the mismatch, and the mismatch must still be moderate
        explanation = notes.split(MISMATCH_NOTE, 1)[1]
        assert len(explanation.strip(" :")) > 20, f"{name}: the {MISMATCH_NOTE} note gives no explanation"
        assert rel <= WITHIN_EXPLAINED, f"{name}: computed {computed:.2f}B vs published {published}B"
        assert rel > WITHIN, f"{name}: within {WITHIN:.0%} now; drop the stale {MISMATCH_NOTE} note"
    else:
        assert rel <= WITHIN, f"{name}: computed {computed:.2f}B vs published {published}B ({rel:+.1%}); " \
                              f"explain a larger mismatch with a '{MISMATCH_NOTE}' note"


def test_nemotron_8b_mismatch_is_explained():
    r = MODELS.loc["nemotron-8b"]
    assert MISMATCH_NOTE in r["notes"] and "size label" in r["notes"]
    assert _computed_params(r) / 1e9 == pytest.approx(8.54, abs=0.005)
    assert r["params_published_b"] == 8


@pytest.mark.parametrize("name", [n for n in MODELS.index
                                  if "check: computed" in str(MODELS.loc[n, "notes"])])
def test_notes_record_the_computed_count(name):
    """The 'check: computed X.XXB' figure written in the notes is what the formula gives today."""
    r = MODELS.loc[name]
    noted = float(re.search(r"check: computed ([0-9.]+)B", r["notes"]).group(1))
    assert _computed_params(r) / 1e9 == pytest.approx(noted, abs=0.0051)


def test_gpt3_175b_parameter_count():
    """Docstring example of total_params: 12·L·h² + V·h = 174.6e9 for GPT-3 175B."""
    r = MODELS.loc["gpt3-175b"]
    L, h, V = r["layers"], r["hidden"], r["vocab"]
    assert _computed_params(r) == pytest.approx(12 * L * h**2 + V * h, rel=1e-12)
    assert _computed_params(r) == pytest.approx(174.56e9, rel=1e-4)


# ---------------------------------------------------------------------------------------------------------
# catalog lookups
# ---------------------------------------------------------------------------------------------------------


def test_system_codes_lookup():
    codes = hwcat.system_codes(["h100-sxm-80gb"])
    assert codes.shape == (1,)
    assert np.issubdtype(codes.dtype, np.integer)
    assert hwcat.system_names()[int(codes[0])] == "h100-sxm-80gb"
    # case and surrounding blanks do not matter; order is kept
    both = hwcat.system_codes([" H100-SXM-80GB ", "a100-sxm-80gb"])
    assert [hwcat.system_names()[int(c)] for c in both] == ["h100-sxm-80gb", "a100-sxm-80gb"]


def test_system_codes_unknown_name_lists_allowed():
    with pytest.raises(ValueError) as exc:
        hwcat.system_codes(["h100-sxm-80gb", "tpu-v9"])
    msg = str(exc.value)
    assert "'tpu-v9'" in msg
    for name in hwcat.system_names():
        assert name in msg


def test_model_row_unknown_name_lists_known():
    assert modelcat.model_row(" GPT3-175B ")["layers"] == 96
    with pytest.raises(KeyError) as exc:
        modelcat.model_row("gpt5-10t")
    msg = str(exc.value)
    assert "gpt5-10t" in msg
    for name in modelcat.model_names():
        assert name in msg


def test_architecture_record_reduces_to_the_standard_count():
    """For every catalog row without architecture columns, the model record's count (what the kernels use) is
    the standard formula of ``total_params`` exactly: the new columns change nothing where they are empty."""
    plain = MODELS[MODELS["attention_kind"].isna() & MODELS["moe_ffn_hidden"].isna() & MODELS["head_dim"].isna()]
    assert len(plain) > 20
    got = parameter_counts(plain)[0]
    want = total_params(plain["layers"].to_numpy(float), plain["hidden"].to_numpy(float),
                        plain["heads"].to_numpy(float), plain["kv_heads"].to_numpy(float),
                        plain["ffn_hidden"].to_numpy(float), plain["vocab"].to_numpy(float),
                        plain["mlp_code"].to_numpy(float), plain["experts"].to_numpy(float),
                        plain["tied_embeddings"].to_numpy(float))
    np.testing.assert_allclose(got, want, rtol=1e-12)


TODAYS_MODELS = ("deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b", "gpt-oss-120b",
                 "gpt-oss-20b", "llama4-scout", "llama4-maverick")


def _allowed(published: float) -> float:
    """1 %, or one unit of the published figure's last digit when it is given coarser than that: model cards
    round or truncate ('3.3B' for Qwen3-30B-A3B's 3.35B active, '37B' for DeepSeek-V3's 37.5B), so the figure
    says only that the count lies within a unit of it."""
    text = f"{published:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    unit = 10.0 ** -decimals
    if decimals == 0:  # trailing zeros of an integer count are not significant ('400', '1000')
        stripped = text.rstrip("0")
        unit = 10.0 ** (len(text) - len(stripped))
    return max(0.01, unit / published)


@pytest.mark.parametrize("name", TODAYS_MODELS)
def test_todays_models_match_their_published_total_and_active_counts(name):
    """Issue 23: the parameter counts of every new catalog model within 1 % of the published total and active
    counts (from the model cards and reports cited in models.csv, not from this package).  Sources differ on
    whether 'active' counts the input embedding: either convention may match, and the test names which.
    Llama 4's published totals include the vision encoder, which dse does not model: its text-model count may
    fall short by up to 1.5 %, as its note says."""
    r = MODELS.loc[[name]]
    total, active, active_no_embed = (float(v[0]) / 1e9 for v in parameter_counts(r))
    pub_total = float(r["params_published_b"].iloc[0])
    tol = _allowed(pub_total) + (0.005 if "vision encoder" in str(r["notes"].iloc[0]) else 0.0)
    assert abs(total / pub_total - 1.0) <= tol, f"{name}: total {total:.2f}B vs {pub_total}B"
    pub_active = r["active_published_b"].iloc[0]
    if pd.isna(pub_active):  # dense: every parameter is active
        return
    errs = [abs(a / float(pub_active) - 1.0) for a in (active, active_no_embed)]
    assert min(errs) <= _allowed(float(pub_active)), \
        f"{name}: active {active:.2f}/{active_no_embed:.2f}B vs {pub_active}B"


def test_a_power_limit_scales_the_compute_clock_by_the_cube_root_law():
    """A part run below its rating (power_limit_w) computes at the clock the limit leaves, f ∝ P^(1/3) (dynamic
    power C·V²·f with V ∝ f along the DVFS curve).  Checked on NVIDIA's datasheets of one GH100 die at two
    ratings: H100 NVL (400 W) 835 dense BF16 TFLOP/s against H100 SXM (700 W) 989: (400/700)^(1/3) · 989 = 821,
    within 2 %.  torchtitan's H100s ran at 500 W of 700: 989 · (5/7)^(1/3) = 884, between NVL and SXM as its
    benchmark note says.  Parts at their rating are unchanged, and energy uses the power drawn (the limit)."""
    assert 989 * (400 / 700) ** (1 / 3) == pytest.approx(835, rel=0.02)
    table = hwcat.raw_table()
    code = {n: i for i, n in enumerate(hwcat.system_names())}
    capped, full = code["h100-sxm-96gb"], code["h100-sxm-80gb"]
    assert table["tensor_fp16_flops"][capped] == pytest.approx(989e12 * (500 / 700) ** (1 / 3))
    assert table["tensor_fp16_flops"][full] == pytest.approx(989e12)
    assert table["sm_clocks"][capped] / table["sm_clocks"][full] == pytest.approx((500 / 700) ** (1 / 3))
    assert table["hbm_bw"][capped] == pytest.approx(2.4e12)  # the memory clock is not the limit's
    assert table["tdp_w"][capped] == 500 and table["tdp_w"][full] == 700


def test_blackwell_ultra_rate_factors_are_the_measured_kernel_ratios():
    """gemm_rate_factor and attention_rate_factor (systems.csv) are what TensorRT-LLM 1.3.0rc20's measured kernel
    tables of both parts give (tests/kernels/, ai-dynamo/aiconfigurator @095f58a), not a fit: GB300 against GB200
    and B300 against B200 at the same dense 16- and 8-bit peaks, the GEMM factor the geometric mean of the BF16
    and FP8 ratios of median fractions of peak, the attention factor the BF16 context-attention ratio.  Every other
    system is empty (1): B200 and GB200 are the parts the Blackwell constants are checked on."""
    kernels = REPO / "tests" / "kernels"
    gemm = pd.read_csv(kernels / "trtllm_gemm_large_m.csv").set_index(["gpu", "dtype"])
    attn = pd.read_csv(kernels / "trtllm_context_attention.csv").set_index(["gpu", "dtype"])
    attn = attn.xs("bfloat16", level="dtype")
    sysf = hwcat.systems()
    for name, gpu, ref, ref_gpu in (("gb300-nvl72", "gb300", "gb200-nvl72", "gb200"),
                                    ("b300", "b300_sxm", "b200", "b200_sxm")):
        for dtype, col in (("bfloat16", "tensor_fp16_tflops"), ("fp8", "tensor_fp8_tflops")):
            assert gemm.loc[(gpu, dtype), "peak_tflops"] == sysf.loc[name, col] == sysf.loc[ref, col]
            assert gemm.loc[(ref_gpu, dtype), "peak_tflops"] == sysf.loc[ref, col]
        ratio = [gemm.loc[(gpu, d), "median_eff"] / gemm.loc[(ref_gpu, d), "median_eff"] for d in ("bfloat16", "fp8")]
        assert sysf.loc[name, "gemm_rate_factor"] == pytest.approx(math.sqrt(ratio[0] * ratio[1]), abs=5e-4)
        assert sysf.loc[name, "attention_rate_factor"] == pytest.approx(
            attn.loc[gpu, "median_eff"] / attn.loc[ref_gpu, "median_eff"], abs=5e-4)
    others = sysf.drop(index=["gb300-nvl72", "b300"])
    assert others["gemm_rate_factor"].isna().all() and others["attention_rate_factor"].isna().all()
    for gpu in ("b300_sxm", "gb200", "gb300"):
        assert "aiconfigurator @095f58a" in attn.loc[gpu, "source"]
        assert gemm.loc[gpu, "source"].str.contains("aiconfigurator @095f58a").all()


def test_rate_factors_scale_the_16_and_8_bit_gemms_and_attention_not_fp4():
    """GB300's achieved rates are GB200's times its factors wherever their peaks agree (training and serving
    GEMMs at 16 and 8 bits, every attention kernel); its FP4 rate is its own 1.5x peak times the generation's
    efficiency, without a factor (the measured NVFP4 tables disagree with the training runs; systems.csv notes)."""
    table = hwcat.hardware_table()
    code = {n: i for i, n in enumerate(hwcat.system_names())}
    gb3, gb2 = code["gb300-nvl72"], code["gb200-nvl72"]
    sysf = hwcat.systems()
    g, a = sysf.loc["gb300-nvl72", "gemm_rate_factor"], sysf.loc["gb300-nvl72", "attention_rate_factor"]
    for col in ("matmul_fp16_rate", "matmul_fp8_rate", "infer_matmul_fp16_rate", "infer_matmul_fp8_rate"):
        assert table[col][gb3] == pytest.approx(g * table[col][gb2]), col
    for col in ("attention_rate", "attention_fused_rate", "infer_attention_rate"):
        assert table[col][gb3] == pytest.approx(a * table[col][gb2]), col
    for col in ("matmul_fp4_rate", "infer_matmul_fp4_rate"):
        assert table[col][gb3] == pytest.approx(1.5 * table[col][gb2]), col
    assert table["memory_rate"][gb3] == pytest.approx(table["memory_rate"][gb2])


def test_a_rate_factor_that_is_not_positive_is_refused(monkeypatch, tmp_path):
    """A non-positive rate factor in systems.csv is a catalog error naming the file, the row and the column."""
    frame = SYSTEMS_RAW.copy()
    frame.loc[frame["name"] == "b300", "attention_rate_factor"] = "-1"
    path = tmp_path / "systems.csv"
    frame.to_csv(path, index=False)
    monkeypatch.setattr(hwcat, "_read_csv", lambda name: pd.read_csv(path, dtype={"name": str, "generation": str}))
    hwcat.systems.cache_clear()
    try:
        with pytest.raises(hwcat.CatalogError, match=r"systems.csv row \d+: column 'attention_rate_factor'"):
            hwcat.systems()
    finally:
        hwcat.systems.cache_clear()
