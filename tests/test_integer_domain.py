"""Issue 11, item 1: integers beyond float32's exact range are refused at the edge (spec, table, explain) or,
when the kernel derives them, written as null with a reason; never wrapped, rounded, or marked ``fits``.

The property tests check the promise the dataset makes: a row marked ``fits`` holds exactly the inputs asked
for, and they divide as the model requires (checked here with Python's exact integers, not the kernel's
float32)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.cli import main
from dse.cost.select import INT_DOMAIN_MAX
from dse.frame import InputError, evaluate
from dse.grid import Grid
from dse.spec import SpecError, resolve_spec
from dse.sweep import evaluate_points

BASE = {"model": "gpt3-175b", "system": "a100-sxm-80gb", "gpus": 1024, "tp": 8, "pp": 8, "global_batch": 1024,
        "seq_len": 2048}


def test_domain_is_float32_exact():
    """2^24 − 1 is the largest integer below float32's first gap (2^24 + 1 is not representable)."""
    import numpy as np

    assert INT_DOMAIN_MAX == 2**24 - 1
    assert float(np.float32(INT_DOMAIN_MAX)) == INT_DOMAIN_MAX
    assert float(np.float32(2**24 + 1)) != 2**24 + 1


def test_table_refuses_global_batch_past_the_domain():
    with pytest.raises(InputError) as err:
        evaluate(pd.DataFrame([{**BASE, "global_batch": 16777217}]))
    msg = str(err.value)
    assert "'global_batch'" in msg and "16777217" in msg and "16,777,215" in msg
    assert "np.int64" not in msg  # plain values in messages, not numpy reprs


@pytest.mark.parametrize("flag,value", [("--global-batch", "16777217"), ("--seq-len", "16777217"),
                                        ("--dp", "4294967296")])
def test_explain_refuses_past_the_domain(capsys, flag, value):
    argv = ["explain", "--model", "gpt3-175b", "--system", "a100-sxm-80gb", "--tp", "8", "--pp", "8", "--cp", "2",
            "--global-batch", "1024", "--seq-len", "2048"]
    argv += ["--gpus", "1024"] if flag != "--dp" else []
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err
    assert value in err and "16,777,215" in err and "exceeds_hbm" not in err


def test_spec_refuses_past_the_domain():
    spec = {"name": "big", "grid": {**BASE, "gpus": None, "dp": 4294967296,
                                    "global_batch": [16777217, 3221225472]}}
    del spec["grid"]["gpus"]
    with pytest.raises(SpecError) as err:
        resolve_spec(spec, "big.yaml")
    assert "big.yaml" in str(err.value) and "16,777,215" in str(err.value)


def test_derived_gpus_past_the_domain_is_null_with_a_reason():
    spec = resolve_spec({"name": "derived", "grid": {**{k: v for k, v in BASE.items() if k != "gpus"}, "cp": 8,
                                                      "dp": [16, 16777215], "global_batch": 16777215},
                         "constraints": {"divisible": False}}, "<test>")
    frame = evaluate_points(spec, Grid(spec), 0, spec.size).to_pandas()
    big = frame[frame["dp"] == 16777215].iloc[0]
    assert pd.isna(big["gpus"]) and not big["fits"]
    assert big["infeasible_reason"] == "size above 16777215 (exact-integer domain)"
    assert (frame["gpus"].dropna() > 0).all()


# ---- property: a row marked fits holds exactly what was asked for, and it divides --------------------------
SIZES = st.one_of(st.integers(1, 64), st.sampled_from([2**k for k in range(0, 34)]),
                  st.integers(2**24 - 3, 2**24 + 3), st.integers(1, 2**40))


def _exact_ok(row: dict) -> bool:
    """The model's divisibility rules, in exact integers."""
    t, p, c, d, b, B, s = (int(row[k]) for k in ("tp", "pp", "cp", "dp", "micro_batch", "global_batch", "seq_len"))
    return (t * p * c * d == int(row["gpus"]) and B % (d * b) == 0 and 96 % t == 0 and 96 % (p * int(row["vpp"])) == 0
            and (c == 1 or s % (2 * c) == 0))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), pp=SIZES, cp=st.sampled_from([1, 2, 3]), dp=SIZES, micro_batch=SIZES,
       global_batch=SIZES, seq_len=SIZES)
def test_table_rows_that_fit_hold_the_asked_values(tp, pp, cp, dp, micro_batch, global_batch, seq_len):
    asked = {"model": "gpt3-175b", "system": "gb200-nvl72", "tp": tp, "pp": pp, "cp": cp, "dp": dp,
             "micro_batch": micro_batch, "global_batch": global_batch, "seq_len": seq_len, "recompute": "full",
             "zero": 1}
    try:
        out = evaluate(pd.DataFrame([asked])).iloc[0]
    except InputError:
        assert max(pp, dp, micro_batch, global_batch, seq_len) > INT_DOMAIN_MAX
        return
    for key in ("tp", "pp", "cp", "dp", "micro_batch", "global_batch", "seq_len"):
        assert int(out[key]) == asked[key]
    if out["fits"]:
        assert _exact_ok(out.to_dict())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pp=st.lists(SIZES, min_size=1, max_size=3, unique=True), dp=st.lists(SIZES, min_size=1, max_size=3, unique=True),
       global_batch=st.lists(SIZES, min_size=1, max_size=3, unique=True), seq_len=SIZES, cp=st.sampled_from([1, 2]))
def test_sweep_rows_that_fit_hold_the_asked_values(pp, dp, global_batch, seq_len, cp):
    grid = {"model": "gpt3-175b", "system": "gb200-nvl72", "tp": 8, "pp": pp, "dp": dp, "cp": cp,
            "global_batch": global_batch, "seq_len": seq_len, "recompute": "full"}
    try:
        spec = resolve_spec({"name": "prop", "grid": grid, "constraints": {"divisible": False}}, "<prop>")
    except SpecError:
        assert max(*pp, *dp, *global_batch, seq_len) > INT_DOMAIN_MAX
        return
    frame = evaluate_points(spec, Grid(spec), 0, spec.size).to_pandas()
    assert len(frame) == spec.size
    assert set(frame["pp"]) <= set(pp) and set(frame["dp"]) <= set(dp)
    assert set(frame["global_batch"]) <= set(global_batch) and set(frame["seq_len"]) == {seq_len}
    fits = frame[frame["fits"]]
    for row in fits.to_dict("records"):
        assert _exact_ok(row)
