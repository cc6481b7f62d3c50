"""Issue 12: dse.evaluate evaluates repeated rows once; the result is the same as row by row and errors still
name the first bad row of the caller's frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.frame import InputError, _distinct_rows, _evaluate, evaluate

REF = Path(__file__).parent / "reference" / "megatron_narayanan2021_table1.csv"


def _big(n: int = 5000) -> pd.DataFrame:
    cases = pd.read_csv(REF)
    cols = [c for c in cases.columns if c not in ("case", "metric", "measured", "source", "task")]
    big = cases[cols].sample(n, replace=True, random_state=1)
    big["micro_batch"] = np.random.default_rng(1).choice([1, 2, 4], n)
    big.index = pd.Index([f"r{i}" for i in range(n)])  # labels, not positions
    return big


@pytest.mark.parametrize("text", [False, True], ids=["typed", "text"])
def test_repeated_rows_give_the_row_by_row_result(text):
    """Same values, dtypes, column order and index, whether the cells are typed (pd.read_csv) or text (as
    the case reader gives them: Arrow strings)."""
    big = _big()
    if text:
        big = big.astype(str).astype("string[pyarrow]")
    assert _distinct_rows(big) is not None  # the fast path runs
    fast = evaluate(big)
    slow = pd.concat([big, _evaluate(big)], axis=1)  # every row evaluated (_evaluate gives the added columns)
    pd.testing.assert_frame_equal(fast, slow)
    assert list(fast.index) == list(big.index)


def test_error_names_the_first_bad_row_of_the_callers_frame():
    big = _big()
    big["tp"] = big["tp"].astype(object)
    big.iloc[3210, big.columns.get_loc("tp")] = "seven"
    big.iloc[4000, big.columns.get_loc("tp")] = "eight"
    with pytest.raises(InputError, match=r"row index 'r3210'.*column 'tp': value 'seven'"):
        evaluate(big)


def test_distinct_rows_are_in_order_of_first_appearance():
    frame = pd.DataFrame({"a": [3, 1, 3, 2, 1] * 400, "b": ["x", "y", "x", "z", "y"] * 400})
    first, inverse = _distinct_rows(frame)
    assert list(first) == [0, 1, 3]
    assert (frame.iloc[first].iloc[inverse].to_numpy() == frame.to_numpy()).all()


def test_validate_of_a_large_file_prints_the_worst_cases_not_every_line(tmp_path, capsys):
    from dse.cli import CASE_LINES, WORST_CASES, main

    cases = pd.read_csv(REF, dtype=str, keep_default_na=False)
    n = CASE_LINES + 500
    big = cases.sample(n, replace=True, random_state=0).reset_index(drop=True)
    big["case"] = [f"c{i}" for i in range(n)]
    path = tmp_path / "big.csv"
    big.to_csv(path, index=False)
    assert main(["validate", str(path), "--no-assume"]) == 0
    out = capsys.readouterr().out
    assert f"{n:,} cases: the {WORST_CASES} largest errors" in out
    assert len(out.splitlines()) < WORST_CASES + 20


@pytest.mark.parametrize("backend", ["numpy_nullable", "pyarrow"])
def test_nullable_and_arrow_backed_numbers_read_like_numpy_ones(backend):
    """A frame read with pandas' nullable or Arrow dtypes gives the same outputs, and <NA> is an empty cell
    (the documented default), not a bad value."""
    plain = pd.read_csv(REF).drop(columns=["case", "metric", "measured", "source"])
    other = pd.read_csv(REF, dtype_backend=backend).drop(columns=["case", "metric", "measured", "source"])
    np.testing.assert_array_equal(evaluate(other)["step_time_s"].astype(float), evaluate(plain)["step_time_s"])
    other.loc[0, "vpp"] = pd.NA
    plain.loc[0, "vpp"] = 1  # the default
    assert float(evaluate(other)["step_time_s"].iloc[0]) == float(evaluate(plain)["step_time_s"].iloc[0])


def test_validate_names_why_a_case_is_skipped(tmp_path):
    """Skip messages (formatted once per distinct reason, not once per case) still say, per case, why."""
    from dse.validation.validate import validate_file

    cases = pd.read_csv(REF, dtype=str, keep_default_na=False)
    rows = pd.concat([cases.iloc[[0]]] * 3, ignore_index=True)
    rows["case"] = ["fits", "wrong-metric", "does-not-divide"]
    rows.loc[1, "metric"] = "ttft_s"  # an inference metric on a training row
    rows.loc[2, "gpus"] = str(int(rows.loc[2, "gpus"]) + 1)  # no longer tp·pp·cp·dp
    path = tmp_path / "cases.csv"
    rows.to_csv(path, index=False)
    by_case = {r.case: r.skipped for r in validate_file(path)}
    assert by_case["fits"] is None
    assert by_case["wrong-metric"] == "metric 'ttft_s' does not belong to task 'train'"
    assert by_case["does-not-divide"] == "model gives no value: tp*pp*cp*dp != gpus"


@pytest.mark.parametrize("typed", [False, True], ids=["text", "typed"])
def test_mostly_distinct_rows_give_the_row_by_row_result(typed):
    """Issue 24: a table of mostly distinct rows is evaluated with each text column as its distinct cells
    (checked, parsed and looked up once per cell); its values, dtypes and column order are those of the plain
    path, and a bad cell is still named by its first row."""
    from dse.bench.kernels import distinct_table
    from dse.cells import factorized

    big = distinct_table(6000, typed=typed)
    assert _distinct_rows(big) is None  # mostly distinct: the factorized path runs
    assert any(isinstance(t, pd.CategoricalDtype) for t in factorized(big).dtypes)
    fast = evaluate(big)
    slow = pd.concat([big, _evaluate(big)], axis=1)  # plain path: no factorized cells
    pd.testing.assert_frame_equal(fast, slow)
    # row by row: each row alone (one-row frames, below any tile or de-duplication) gives the same values
    picks = np.random.default_rng(1).choice(len(big), 40, replace=False)
    alone = pd.concat([evaluate(big.iloc[[i]]) for i in picks])
    pd.testing.assert_frame_equal(fast.iloc[picks], alone, check_dtype=False, check_categorical=False)
    bad = big.astype({"tp": object})
    bad.iloc[4321, bad.columns.get_loc("tp")] = "seven"
    with pytest.raises(InputError, match=r"row index 4321.*column 'tp': value 'seven'"):
        evaluate(bad)


def test_stacks_does_not_import_frame():
    """Issue 24: the import circle dse.frame <-> dse.stacks is gone (both read cells through dse.cells)."""
    import ast

    tree = ast.parse((Path(__file__).parents[1] / "dse" / "stacks.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "dse.frame" not in imported and "dse.cells" in imported


def test_benchmark_modules_live_together_apart_from_the_model_code():
    """Issue 24: bench.py, bench_pareto.py and bench_figures.json lived among the model's modules; they are one
    package, dse/bench/, and no module outside it imports it (the model never depends on its benchmarks)."""
    import ast

    root = Path(__file__).parents[1] / "dse"
    assert {p.name for p in (root / "bench").iterdir()} >= {"__init__.py", "__main__.py", "kernels.py", "pareto.py",
                                                           "figures.json"}
    assert not [p.name for p in root.glob("bench*") if p.name != "bench"]
    for path in root.rglob("*.py"):
        if "bench" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert not {m for m in imported if m == "dse.bench" or m.startswith("dse.bench.")}, path


def test_validate_table_is_validate_file_as_columns():
    """dse validate's columnar results (one row per case, no Python step per case) are the per-case results of
    validate_file, and its per-file summary is summarize's, on a shared file with assumptions and a stack."""
    from dse.validation.fit import default_assumptions_path
    from dse.validation.validate import (
        case_results,
        file_mape,
        file_mape_table,
        load_assumptions,
        summarize,
        summarize_table,
        validate_file,
        validate_table,
    )

    assumptions = load_assumptions(default_assumptions_path())
    for name in ("megatron_narayanan2021_table1.csv", "zhang2023_train_bs1_lora7b.csv"):
        path = REF.parent / name
        table = validate_table(path, assumptions)
        results = validate_file(path, assumptions)
        assert case_results(table) == results
        columnar, per_case = summarize_table(table), summarize(results)
        assert [{**s, "mape_pct": None} for s in columnar] == [{**s, "mape_pct": None} for s in per_case]
        assert [s["mape_pct"] for s in columnar] == pytest.approx([s["mape_pct"] for s in per_case], rel=1e-12)
        assert file_mape_table(table) == pytest.approx(file_mape(results))
        assert any(r.assumed for r in results) or any(r.from_stack for r in results)


@pytest.mark.parametrize("pattern", ["narayanan2021-t1-*", "*-bs1-*", "zhang2023-t?-*", "a[bc]*", "a[!bc]*",
                                     "a[]]b", "a[!]]b", "[^a]*", "a[b-", "*.*", "a\\b*", "[z-a]x", "", "**"])
def test_assumption_globs_match_as_fnmatch_does(pattern):
    """The assumptions' case globs are matched by Arrow in one pass over the case ids (an RE2 translation); the
    rows are those fnmatch.fnmatchcase selects, sets and odd brackets included."""
    import fnmatch

    import pyarrow as pa

    from dse.validation.validate import glob_rows

    names = ["narayanan2021-t1-gpt-1.7b", "zhang2023-t3-llama2-7b-a800-z2-bs1", "ab", "ad", "a]b", "a!b", "^x",
             "ax", "a[b-", "a.b", "a\\bc", "ax", "x", "", "a[b", "zx", "[x"]
    want = [fnmatch.fnmatchcase(n, pattern) for n in names]
    assert glob_rows(pa.array(names, type=pa.string()), pattern).tolist() == want
