"""The lazy mixed-radix grid (:class:`dse.grid.Grid`) and spec resolution (:func:`dse.spec.resolve_spec`).

Contract (``dse/grid.py``, ``dse/spec.py``): a sub-grid is the Cartesian product of its axes sorted by name, the
last varying fastest; sub-grids follow each other in the spec's order; ``len`` is known before any decoding;
``grid[i:j]`` decodes only those points into float64 columns (codes for categorical axes) plus ``point``, the
global index; an axis missing from a sub-grid decodes as NaN.
"""

from __future__ import annotations

import copy
import itertools
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest

from dse.codes import PRECISION, RECOMPUTE
from dse.grid import Grid
from dse.hardware.catalog import system_names
from dse.spec import Spec, SpecError, resolve_spec


def base(**axes: Any) -> dict[str, Any]:
    grid: dict[str, Any] = {"model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096,
                            "global_batch": 64}
    grid.update(axes)
    return grid


def spec_of(*grids: dict[str, Any], **top: Any) -> Spec:
    doc: dict[str, Any] = {"name": "t", **top}
    if len(grids) == 1:
        doc["grid"] = grids[0]
    else:
        doc["grids"] = list(grids)
    return resolve_spec(doc, "<test>")


def code(vocabulary: tuple[str, ...], name: str) -> float:
    return float(vocabulary.index(name))


#: A multi-axis sub-grid (categorical and integer axes, given in an unsorted order).
MULTI = base(tp=[1, 2, 4], model=["llama3-8b", "llama3-70b"], recompute=["none", "full"], pp=[1, 2],
             system=["h100-sxm-80gb", "a100-sxm-80gb"], global_batch=[64, 128])
#: A second sub-grid with an axis the first lacks (cp) and lacking one the first has (recompute).
SECOND = base(model="llama3-70b", tp=[4, 8], cp=[1, 2, 4], pp=2, precision=["bf16", "fp8"])


def expected_rows(raw: dict[str, Any], spec: Spec) -> tuple[list[str], list[tuple[float, ...]]]:
    """The points of one sub-grid written out by hand: itertools.product over the axes in sorted-name order."""
    names = sorted(raw)
    values = []
    for name in names:
        v = raw[name] if isinstance(raw[name], list) else [raw[name]]
        if name == "model":
            v = [code(spec.model_names, x) for x in v]
        elif name == "system":
            v = [code(system_names(), x) for x in v]
        elif name == "recompute":
            v = [code(RECOMPUTE, x) for x in v]
        elif name == "precision":
            v = [code(PRECISION, x) for x in v]
        values.append([float(x) for x in v])
    return names, list(itertools.product(*values))


def table(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in cols.items()}


def assert_columns_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # NaN == NaN here


# ---------------------------------------------------------------------------------------------------------
# Size
# ---------------------------------------------------------------------------------------------------------


def test_len_is_the_product_of_axis_lengths_before_any_decoding(monkeypatch):
    spec = spec_of(MULTI)
    monkeypatch.setattr(Grid, "decode", lambda *a, **k: pytest.fail("len() must not decode"))
    grid = Grid(spec)
    assert len(grid) == 3 * 2 * 2 * 2 * 2 * 2 == spec.size == spec.grids[0].size
    assert [len(a) for a in spec.grids[0].axes] == [2, 1, 2, 2, 2, 1, 2, 3]  # sorted by name


def test_len_of_a_grids_list_is_the_sum_over_sub_grids(monkeypatch):
    spec = spec_of(MULTI, SECOND, base(tp=1, pp=1))
    monkeypatch.setattr(Grid, "decode", lambda *a, **k: pytest.fail("len() must not decode"))
    grid = Grid(spec)
    assert [g.size for g in spec.grids] == [96, 12, 1]
    assert len(grid) == 96 + 12 + 1 == spec.size
    assert list(grid.offsets) == [0, 96, 108, 109]


def test_axes_are_sorted_by_name_and_single_values_are_axes_of_one():
    spec = spec_of(MULTI)
    names = [a.name for a in spec.grids[0].axes]
    assert names == sorted(MULTI) == ["global_batch", "gpus", "model", "pp", "recompute", "seq_len", "system",
                                      "tp"]


# ---------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------


def test_decoding_everything_is_itertools_product_in_sorted_name_order_last_fastest():
    spec = spec_of(MULTI)
    grid = Grid(spec)
    cols = grid[:]
    names, rows = expected_rows(MULTI, spec)
    assert len(rows) == len(grid)
    got = list(zip(*(cols[n].tolist() for n in names), strict=True))
    assert got == rows
    np.testing.assert_array_equal(cols["point"], np.arange(len(grid)))
    assert cols["point"].dtype == np.int64
    assert all(cols[n].dtype == np.float64 for n in names)
    # the last axis (tp) varies fastest, the first (global_batch) slowest
    assert cols["tp"][:4].tolist() == [1, 2, 4, 1]
    assert cols["global_batch"].tolist() == [64] * 48 + [128] * 48


def test_decoding_a_grids_list_concatenates_sub_grids_with_nan_for_missing_axes():
    spec = spec_of(MULTI, SECOND)
    grid = Grid(spec)
    cols = grid[:]
    assert set(cols) == {"point", *MULTI, *SECOND}
    n1 = spec.grids[0].size
    for raw, rows_slice in ((MULTI, slice(0, n1)), (SECOND, slice(n1, len(grid)))):
        names, rows = expected_rows(raw, spec)
        got = list(zip(*(cols[n][rows_slice].tolist() for n in names), strict=True))
        assert got == rows
        for missing in set(cols) - set(raw) - {"point"}:
            assert np.isnan(cols[missing][rows_slice]).all(), missing
    assert np.isnan(cols["recompute"][n1:]).all() and not np.isnan(cols["recompute"][:n1]).any()
    assert np.isnan(cols["cp"][:n1]).all() and cols["cp"][n1:].tolist() == [1] * 4 + [2] * 4 + [4] * 4
    np.testing.assert_array_equal(cols["point"], np.arange(len(grid)))


@pytest.mark.parametrize("i,j", [(0, 109), (90, 100), (95, 97), (96, 97), (95, 96), (100, 109), (107, 109),
                                 (0, 1), (50, 108), (108, 109), (3, 3), (100, 500), (-5, None), (-20, -3)])
def test_slices_across_sub_grid_boundaries_equal_slicing_the_full_decode(i, j):
    spec = spec_of(MULTI, SECOND, base(tp=1, pp=1, zero=3))
    grid = Grid(spec)
    full = grid[:]
    part = grid[i:j]
    expected = {k: v[i:j] for k, v in full.items()}
    assert_columns_equal(table(part), expected)
    lo, hi, _ = slice(i, j).indices(len(grid))
    np.testing.assert_array_equal(part["point"], np.arange(lo, max(lo, hi)))


def test_every_one_point_slice_matches_the_full_decode():
    spec = spec_of(MULTI, SECOND)
    grid = Grid(spec)
    full = grid[:]
    for k in range(len(grid)):
        one = grid[k:k + 1]
        assert_columns_equal(table(one), {c: v[k:k + 1] for c, v in full.items()})


def test_grid_is_indexed_by_contiguous_slices_only():
    grid = Grid(spec_of(MULTI))
    with pytest.raises(TypeError):
        grid[3]  # noqa: B018
    with pytest.raises(TypeError):
        grid[0:10:2]  # noqa: B018


def test_grid_with_one_axis_entry_equals_grids_list_of_one():
    a, b = spec_of(MULTI), resolve_spec({"name": "t", "grids": [MULTI]}, "<other>")
    assert a.digest() == b.digest()
    assert_columns_equal(table(Grid(a)[:]), table(Grid(b)[:]))


# ---------------------------------------------------------------------------------------------------------
# A grid of more than 1e9 points
# ---------------------------------------------------------------------------------------------------------

#: 8 axes of 16 values each (2**32 points), each axis with its own values so a mix-up shows.
HUGE_AXES = {name: [100 * i + 1 + v for v in range(16)]
             for i, name in enumerate(("cp", "ep", "global_batch", "micro_batch", "pp", "seq_len", "tp", "vpp"))}


def test_huge_grid_slice_near_the_end_decodes_quickly_without_materializing_the_grid():
    spec = resolve_spec({"name": "huge", "grid": base(**HUGE_AXES)}, "<huge>")
    grid = Grid(spec)
    assert len(grid) == 16**8 == 4_294_967_296 > 10**9

    tracemalloc.start()
    t0 = time.perf_counter()
    i, j = len(grid) - 1_000_003, len(grid) - 999_993
    cols = grid[i:j]
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 1_000_000, f"decoding 10 points allocated {peak:,} bytes"
    assert all(len(v) == 10 for v in cols.values())
    np.testing.assert_array_equal(cols["point"], np.arange(i, j))

    # one index by hand: mixed radix over the axes in sorted-name order, the last fastest
    names = sorted(base(**HUGE_AXES))
    sizes = [len(HUGE_AXES.get(n, [None])) for n in names]
    k = i + 7
    digits = []
    rest = k
    for size in reversed(sizes):
        digits.append(rest % size)
        rest //= size
    digits.reverse()
    assert rest == 0
    # all varying radices are 16, so the varying digits are the hexadecimal digits of k
    varying = [d for d, s in zip(digits, sizes, strict=True) if s == 16]
    assert varying == [int(h, 16) for h in f"{k:08x}"]
    for name, d in zip(names, digits, strict=True):
        if name in HUGE_AXES:
            assert cols[name][7] == HUGE_AXES[name][d], name
    assert cols["gpus"][7] == 8 and cols["seq_len"][7] == HUGE_AXES["seq_len"][digits[names.index("seq_len")]]
    # the very last point is the last value of every axis
    last = grid[len(grid) - 1:]
    assert {n: last[n][0] for n in HUGE_AXES} == {n: float(v[-1]) for n, v in HUGE_AXES.items()}
    assert last["point"][0] == len(grid) - 1


# ---------------------------------------------------------------------------------------------------------
# Ranges
# ---------------------------------------------------------------------------------------------------------


def axis_values(spec: Spec, name: str, sub: int = 0) -> list[float]:
    (axis,) = [a for a in spec.grids[sub].axes if a.name == name]
    return axis.values.tolist()


def test_pow2_range_gives_the_powers_of_two_including_stop():
    spec = spec_of(base(tp={"start": 1, "stop": 64, "pow2": True}))
    assert axis_values(spec, "tp") == [1, 2, 4, 8, 16, 32, 64]
    assert spec.resolved["grids"][0]["tp"] == [1, 2, 4, 8, 16, 32, 64]


def test_pow2_range_keeps_only_powers_of_two_between_start_and_stop():
    spec = spec_of(base(gpus={"start": 3, "stop": 100, "pow2": True}))
    assert axis_values(spec, "gpus") == [4, 8, 16, 32, 64]


def test_step_range_includes_stop():
    spec = spec_of(base(tp={"start": 2, "stop": 10, "step": 4}))
    assert axis_values(spec, "tp") == [2, 6, 10]
    spec = spec_of(base(tp={"start": 2, "stop": 11, "step": 4}))
    assert axis_values(spec, "tp") == [2, 6, 10]
    spec = spec_of(base(tp={"start": 5, "stop": 5}))
    assert axis_values(spec, "tp") == [5]
    spec = spec_of(base(tp={"start": 1, "stop": 4}))
    assert axis_values(spec, "tp") == [1, 2, 3, 4]


def test_range_and_list_resolve_to_the_same_spec():
    a = spec_of(base(tp={"start": 2, "stop": 10, "step": 4}))
    b = spec_of(base(tp=[2, 6, 10]))
    assert a.digest() == b.digest() and a.resolved == b.resolved


# ---------------------------------------------------------------------------------------------------------
# Digest
# ---------------------------------------------------------------------------------------------------------


def test_digest_is_stable_for_equal_specs():
    doc = {"name": "t", "grid": MULTI, "constraints": {"filters": ["tp * pp <= 8"]}}
    a = resolve_spec(copy.deepcopy(doc), "<a>")
    b = resolve_spec(copy.deepcopy(doc), "<b>")  # another file label does not change the results
    reordered = {"constraints": doc["constraints"], "grid": dict(reversed(list(MULTI.items()))), "name": "t"}
    c = resolve_spec(reordered, "<c>")
    assert a.digest() == b.digest() == c.digest() == a.digest()
    assert len(a.digest()) == 16
    # a single value and a list of one are the same axis; defaults written out equal the defaults
    d = resolve_spec({**doc, "grid": {**MULTI, "gpus": [8]},
                      "constraints": {**doc["constraints"], "divisible": True, "tp_within_scaleup": True}}, "<d>")
    assert d.digest() == a.digest()


@pytest.mark.parametrize("change", [
    {"tp": [1, 2, 8]}, {"tp": [1, 4, 2]}, {"gpus": 16}, {"recompute": ["none", "selective"]},
    {"model": ["llama3-8b", "llama3.1-8b"]},
])
def test_digest_changes_when_an_axis_value_changes(change):
    a = spec_of(MULTI)
    b = spec_of({**MULTI, **change})
    assert a.digest() != b.digest()


def test_digest_changes_with_constraints_and_name():
    a = spec_of(MULTI)
    assert spec_of(MULTI, constraints={"divisible": False}).digest() != a.digest()
    assert spec_of(MULTI, constraints={"filters": ["tp <= 2"]}).digest() != a.digest()
    assert resolve_spec({"name": "other", "grid": MULTI}).digest() != a.digest()


# ---------------------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------------------


def filter_of(text: str, grid: dict[str, Any] | None = None):  # noqa: ANN201 - dse.spec.Filter
    spec = spec_of(grid or MULTI, constraints={"filters": [text]})
    (f,) = spec.filters
    return f


COLUMNS = {
    "tp": np.array([1.0, 2.0, 4.0, 8.0, 8.0, 1.0]),
    "pp": np.array([1.0, 8.0, 4.0, 2.0, 4.0, 16.0]),
    "recompute": np.array([code(RECOMPUTE, r) for r in ("full", "full", "none", "full", "full", "selective")]),
}


def test_filter_on_inputs_parses_names_and_does_not_use_outputs():
    f = filter_of("tp * pp <= 16 and recompute == 'full'")
    assert f.names == frozenset({"tp", "pp", "recompute"})
    assert f.uses_outputs is False
    assert f.text == "tp * pp <= 16 and recompute == 'full'"


def test_filter_with_and_evaluates_elementwise_on_numpy_columns():
    f = filter_of("tp * pp <= 16 and recompute == 'full'")
    got = f.evaluate(COLUMNS)
    expected = (COLUMNS["tp"] * COLUMNS["pp"] <= 16) & (COLUMNS["recompute"] == RECOMPUTE.index("full"))
    assert got.tolist() == expected.tolist() == [True, True, False, True, False, False]


def test_filter_without_boolean_operators_evaluates_on_numpy_columns():
    """The same predicate written with arithmetic on booleans (what works today)."""
    f = filter_of("(tp * pp <= 16) * (recompute == 'full')")
    assert f.names == frozenset({"tp", "pp", "recompute"}) and not f.uses_outputs
    assert f.evaluate(COLUMNS).tolist() == [True, True, False, True, False, False]
    assert filter_of("tp * pp <= 16").evaluate(COLUMNS).tolist() == [True, True, True, True, False, True]
    assert filter_of("recompute != 'full'").evaluate(COLUMNS).tolist() == [False, False, True, False, False, True]
    # a quoted name is matched case-insensitively and may sit on either side
    assert filter_of("'FULL' == recompute").evaluate(COLUMNS).tolist() == [True, True, False, True, True, False]
    out = filter_of("pp // tp >= 2").evaluate(COLUMNS)
    assert out.dtype == bool and out.tolist() == [False, True, False, False, False, True]


def test_filter_on_model_and_system_uses_their_codes():
    spec = spec_of(MULTI, constraints={"filters": ["model == 'llama3-70b'", "system != 'a100-sxm-80gb'"]})
    f_model, f_system = spec.filters
    models = np.array([code(spec.model_names, m) for m in ("llama3-8b", "llama3-70b", "llama3-70b")])
    systems = np.array([code(system_names(), s) for s in ("a100-sxm-80gb", "h100-sxm-80gb", "a100-sxm-80gb")])
    assert f_model.evaluate({"model": models}).tolist() == [False, True, True]
    assert f_system.evaluate({"system": systems}).tolist() == [False, True, False]


@pytest.mark.parametrize("text", ["mem_total_bytes < 80e9", "step_time_s * 2 < tp", "fits == 1",
                                  "mfu >= 0.4"])
def test_filter_naming_an_output_uses_outputs(text):
    f = filter_of(text)
    assert f.uses_outputs is True


def test_filter_on_outputs_evaluates():
    f = filter_of("mem_total_bytes <= 80e9")
    assert f.names == frozenset({"mem_total_bytes"})
    got = f.evaluate({"mem_total_bytes": np.array([1e9, 80e9, 81e9, np.nan])})
    assert got.tolist() == [True, True, False, False]


def test_bad_filter_is_a_spec_error_naming_its_index():
    with pytest.raises(SpecError, match=r"constraints\.filters\[1\]"):
        spec_of(MULTI, constraints={"filters": ["tp <= 4", "tp <="]})
