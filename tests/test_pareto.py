"""Pareto fronts: the vectorized mask against an O(n²) brute force, directions, groups, feasibility, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.dataset import load_results
from dse.pareto import front_mask, pareto_front, pareto_mask, parse_objectives
from dse.pareto_report import format_front, run_pareto, write_table


def brute_force(values: np.ndarray, directions: list[str], groups: np.ndarray | None = None) -> np.ndarray:
    """A row is on the front iff it has no NaN and no row (of its group, without NaN) is <= in every objective
    and < in one."""
    v = np.asarray(np.where(np.array(directions) == "max", -values, values), dtype=np.float64)
    ok = np.asarray(~np.isnan(v).any(axis=1), dtype=bool)
    le = (v[:, None, :] <= v[None, :, :]).all(axis=2)
    lt = (v[:, None, :] < v[None, :, :]).any(axis=2)
    dominates = le & lt & ok[:, None] & ok[None, :]
    if groups is not None:
        dominates &= groups[:, None] == groups[None, :]
    return np.asarray(ok & ~dominates.any(axis=0), dtype=bool)


def random_values(rng: np.random.Generator, n: int, k: int, kind: str) -> np.ndarray:
    if kind == "ties":  # few distinct values: many ties and exact duplicates
        v = rng.integers(0, 5, (n, k)).astype(np.float64)
    elif kind == "anti":  # most points on the front
        x = rng.random((n, k - 1))
        v = np.column_stack([x, k - 1 - x.sum(axis=1) + 0.05 * rng.random(n)])
    else:
        v = rng.random((n, k))
    if n > 10:
        v[rng.integers(0, n, n // 10)] = v[rng.integers(0, n, n // 10)]  # exact duplicate rows
        v[rng.random((n, k)) < 0.03] = np.nan
    return v


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["uniform", "ties", "anti"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mask_matches_brute_force(k: int, kind: str, seed: int) -> None:
    rng = np.random.default_rng(1000 * seed + 10 * k + len(kind))
    n = [7, 300, 2000][seed]
    values = random_values(rng, n, k, kind)
    directions = list(rng.choice(["min", "max"], k))
    expected = brute_force(values, directions)
    assert np.array_equal(pareto_mask(values, directions), expected)
    # small blocks exercise the block boundaries and the score-tie re-check of the k >= 3 path
    assert np.array_equal(pareto_mask(values, directions, block_size=17), expected)


@pytest.mark.parametrize("seed", range(4))
def test_groups_match_brute_force_per_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 1500, 2 + seed % 3
    values = random_values(rng, n, k, "ties" if seed % 2 else "uniform")
    groups = rng.choice(np.array(["a", "b", "c", "d", "e"]), n)
    directions = ["min"] * (k - 1) + ["max"]
    expected = brute_force(values, directions, groups)
    assert np.array_equal(pareto_mask(values, directions, groups), expected)
    for label in np.unique(groups):  # the same as one front per group
        sel = groups == label
        assert np.array_equal(pareto_mask(values[sel], directions), expected[sel])


@pytest.mark.parametrize("seed", range(3))
def test_infinities_on_large_inputs(seed: int) -> None:
    """Large enough for the binned pre-filter of k <= 2 (n >= 128) and the pivot of k >= 3."""
    rng = np.random.default_rng(50 + seed)
    n = 1500
    for k in (1, 2, 3):
        values = rng.integers(0, 30, (n, k)).astype(np.float64)
        values[rng.random((n, k)) < 0.03] = np.inf
        values[rng.random((n, k)) < 0.01] = -np.inf
        values[rng.random((n, k)) < 0.02] = np.nan
        directions = list(rng.choice(["min", "max"], k))
        groups = rng.integers(0, 3, n) if seed else None
        assert np.array_equal(pareto_mask(values, directions, groups), brute_force(values, directions, groups))


def test_infinities_nan_and_duplicates() -> None:
    v = np.array([[1.0, 5.0], [1.0, 5.0], [np.nan, 0.0], [0.0, np.inf], [2.0, -np.inf], [3.0, -np.inf],
                  [1.0, 6.0], [np.inf, np.inf]])
    assert pareto_mask(v, ["min", "min"]).tolist() == [True, True, False, True, True, False, False, False]
    assert not pareto_mask(np.full((3, 2), np.nan), "min").any()
    assert pareto_mask(np.array([[np.inf, np.inf]]), "min").tolist() == [True]
    assert pareto_mask(np.empty((0, 3)), "min").shape == (0,)


def test_directions() -> None:
    v = np.array([[1.0, 1.0], [2.0, 2.0], [1.0, 2.0], [2.0, 1.0]])
    assert pareto_mask(v, ["min", "min"]).tolist() == [True, False, False, False]
    assert pareto_mask(v, ["max", "max"]).tolist() == [False, True, False, False]
    assert pareto_mask(v, ["min", "max"]).tolist() == [False, False, True, False]
    assert pareto_mask(v, ["max", "min"]).tolist() == [False, False, False, True]
    assert pareto_mask(np.array([3, 1, 1, 2]), "min").tolist() == [False, True, True, False]  # one objective


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="2 directions for 3"):
        pareto_mask(np.zeros((4, 3)), ["min", "min"])
    with pytest.raises(ValueError, match="'up' is not allowed; allowed: min, max"):
        pareto_mask(np.zeros((4, 2)), ["min", "up"])
    with pytest.raises(ValueError, match="shape"):
        pareto_mask(np.zeros((2, 2, 2)), "min")


def test_parse_objectives() -> None:
    assert parse_objectives(["step_time_s:min", "gpus:MIN", " tokens_per_s_per_gpu : max "]) == [
        ("step_time_s", "min"), ("gpus", "min"), ("tokens_per_s_per_gpu", "max")]
    assert parse_objectives("step_time_s:min,mem_total_bytes:min") == [("step_time_s", "min"),
                                                                        ("mem_total_bytes", "min")]
    for bad in ["step_time_s", "step_time_s:fast", ":min", "step_time_s:", ""]:
        with pytest.raises(ValueError, match=r"objective .* is not allowed.*one of min, max") as err:
            parse_objectives([bad])
        assert repr(bad.strip()) in str(err.value)
    with pytest.raises(ValueError, match="no objective"):
        parse_objectives([])


def sweep_like(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "model": pd.Categorical(rng.choice(["m1", "m2"], n)),
        "system": pd.Categorical(rng.choice(["s1", "s2", "s3"], n)),
        "gpus": rng.choice([64, 128, 256], n).astype(np.int32),
        "step_time_s": rng.random(n).astype(np.float32),
        "mem_total_bytes": (rng.random(n) * 80e9).astype(np.float32),
        "tokens_per_s_per_gpu": (rng.random(n) * 4000).astype(np.float32),
        "fits": rng.random(n) < 0.7,
    })


def test_pareto_front_feasible_groups_and_order() -> None:
    df = sweep_like()
    objectives = ["tokens_per_s_per_gpu:max", "mem_total_bytes:min"]
    front = pareto_front(df, objectives, by=["model", "system"])
    feasible = df[df["fits"]]
    groups = feasible.groupby(["model", "system"], observed=True).ngroup().to_numpy()
    values = feasible[["tokens_per_s_per_gpu", "mem_total_bytes"]].to_numpy(dtype=np.float64)
    expected = feasible.index[brute_force(values, ["max", "min"], groups)]
    assert sorted(front.index) == sorted(expected)
    assert front["fits"].all()
    # sorted by group then the first objective, best first
    for _, part in front.groupby(["model", "system"], observed=True):
        assert part["tokens_per_s_per_gpu"].is_monotonic_decreasing
    # without the feasibility filter infeasible rows may enter; without `fits` every row counts
    everything = pareto_front(df, objectives, feasible_only=False)
    expected_all = brute_force(df[["tokens_per_s_per_gpu", "mem_total_bytes"]].to_numpy(np.float64), ["max", "min"])
    assert sorted(everything.index) == sorted(df.index[expected_all])
    assert sorted(pareto_front(df.drop(columns="fits"), objectives).index) == sorted(everything.index)
    # pairs and one `by` string are accepted
    same = pareto_front(df, [("tokens_per_s_per_gpu", "max"), ("mem_total_bytes", "min")], by="model")
    assert set(same["model"]) <= {"m1", "m2"} and len(same) > 0


def test_front_mask_is_positional() -> None:
    df = sweep_like(seed=5)
    objectives = ["step_time_s:min", "mem_total_bytes:min"]
    expected = df.index.isin(pareto_front(df, objectives, by="system").index)
    repeated = df.set_axis(np.zeros(len(df), dtype=int))  # a repeated index
    assert np.array_equal(front_mask(repeated, objectives, by="system"), expected)
    assert not front_mask(repeated, objectives)[~df["fits"].to_numpy()].any()


def test_pareto_front_three_objectives_and_errors() -> None:
    df = sweep_like(seed=3)
    front = pareto_front(df, ["step_time_s:min", "gpus:min", "mem_total_bytes:min"], by="model")
    feasible = df[df["fits"]]
    v = feasible[["step_time_s", "gpus", "mem_total_bytes"]].to_numpy(np.float64)
    expected = feasible.index[brute_force(v, ["min"] * 3, feasible["model"].to_numpy())]
    assert sorted(front.index) == sorted(expected)
    with pytest.raises(ValueError, match="column 'nope' is not in the data"):
        pareto_front(df, ["nope:min"])
    with pytest.raises(ValueError, match="column 'cluster' is not in the data"):
        pareto_front(df, ["step_time_s:min"], by="cluster")
    with pytest.raises(ValueError, match="'model' is not numeric"):
        pareto_front(df, ["model:min"])
    with pytest.raises(ValueError, match="is not allowed"):
        pareto_front(df, ["step_time_s:lowest"])
    assert pareto_front(df.iloc[:0], ["step_time_s:min"]).empty


def test_large_input_is_fast_and_right() -> None:
    rng = np.random.default_rng(7)
    n = 200_000
    x = rng.random(n)
    v = np.column_stack([x, 1.0 - x + 0.001 * rng.random(n)])  # thousands of front points
    mask = pareto_mask(v, ["min", "min"])
    front = v[mask]
    order = np.argsort(front[:, 0])
    assert np.all(np.diff(front[order, 1]) < 0)  # a front of two minimised objectives is a falling staircase
    # every other point is dominated by a front point: check with the running minimum of the front
    fx, fy = front[order, 0], front[order, 1]
    j = np.searchsorted(fx, v[~mask, 0], side="right") - 1
    assert np.all(j >= 0) and np.all(fy[j] <= v[~mask, 1])
    v3 = rng.random((300_000, 3))
    assert 10 < pareto_mask(v3, "min").sum() < 2000
    sphere = np.abs(rng.normal(size=(100_000, 3)))
    sphere /= np.linalg.norm(sphere, axis=1)[:, None]  # every point of the positive octant's sphere is on the front
    assert pareto_mask(sphere, "max").all()
    inside = np.vstack([sphere, 0.999 * sphere[:1000]])  # ... and points just inside it are not
    assert pareto_mask(inside, "max").sum() == 100_000


def test_agrees_with_paretoset() -> None:
    paretoset = pytest.importorskip("paretoset").paretoset
    rng = np.random.default_rng(11)
    for k, kind in [(2, "uniform"), (2, "ties"), (3, "anti"), (3, "ties"), (4, "uniform")]:
        values = random_values(rng, 3000, k, kind)
        values = values[~np.isnan(values).any(axis=1)]  # paretoset leaves NaN to the caller
        directions = list(rng.choice(["min", "max"], k))
        ours = pareto_mask(values, directions)
        theirs = np.asarray(paretoset(values, sense=directions, distinct=False, use_numba=False))
        assert np.array_equal(ours, theirs), (k, kind, directions)


def test_run_pareto_writes_the_front_and_its_figure(tmp_path: Path) -> None:
    df = sweep_like(seed=9)
    results = tmp_path / "results" / "demo"
    results.mkdir(parents=True)
    df.to_parquet(results / "part-00000.parquet")
    (results / "notes.txt").write_text("a directory of Parquet files, not written by `dse run`\n")
    objectives = parse_objectives(["tokens_per_s_per_gpu:max", "mem_total_bytes:min"])
    front, written = run_pareto(results, objectives, by=["system"], output=tmp_path / "front.parquet")
    expected = pareto_front(df, objectives, by="system")
    assert len(front) == len(expected)
    assert np.allclose(front["mem_total_bytes"].to_numpy(), expected["mem_total_bytes"].to_numpy())
    assert [p.name for p in written] == ["front.parquet", "front.png", "front.plot-data.parquet"]
    assert len(pd.read_parquet(tmp_path / "front.parquet")) == len(front)
    assert (tmp_path / "front.png").stat().st_size > 2000
    front_csv, written_csv = run_pareto(results, objectives, output=tmp_path / "out" / "front.csv", figure=None)
    assert len(pd.read_csv(tmp_path / "out" / "front.csv")) == len(front_csv)
    assert [p.name for p in written_csv] == ["front.csv", "front.png", "front.plot-data.parquet"]
    assert not (tmp_path / "out" / "front.parquet").exists(), "-o front.csv writes no front.parquet"
    three = parse_objectives("step_time_s:min,gpus:min,mem_total_bytes:min")
    front3, written3 = run_pareto(results, three, by=["model", "system"], figure=tmp_path / "f3" / "front3.png")
    assert len(front3) == int(front_mask(df, three, by=["model", "system"]).sum())
    assert [p.name for p in written3] == ["front3.png", "front3.plot-data.parquet"]
    assert "model · system" in pd.read_parquet(written3[1]).columns  # one panel per group
    text = format_front(front, objectives, by=["system"], top=3)
    assert text.startswith("Pareto front of tokens_per_s_per_gpu (max), mem_total_bytes (min) per system:")
    assert "mem_total_GB" in text
    assert len(load_results(results)) == int(df["fits"].sum())
    assert len(load_results(results, feasible_only=False)) == len(df)
    with pytest.raises(ValueError, match=r"suffix '.txt' is not allowed; allowed: .parquet, .csv"):
        run_pareto(results, objectives, output=tmp_path / "front.txt")
    with pytest.raises(ValueError, match="no such results directory"):
        load_results(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no Parquet part"):
        load_results(tmp_path / "empty")
    (results / "notes.png").write_bytes(b"not a table")  # only the Parquet parts of a directory are read
    assert len(load_results(results)) == int(df["fits"].sum())
    with pytest.raises(ValueError, match="suffix"):
        write_table(df, tmp_path / "x")


def test_front_table_shows_every_input_that_varies(tmp_path: Path) -> None:
    """Issue 11: a front mixing sequence lengths (or inference batches) shows those columns."""
    df = sweep_like(seed=3)
    df["seq_len"] = np.where(np.arange(len(df)) % 2, 8192, 32768)
    results = tmp_path / "mixed"
    results.mkdir()
    df.to_parquet(results / "part-00000.parquet")
    objectives = parse_objectives(["step_time_s:min", "mem_total_bytes:min", "gpus:min"])
    front, _ = run_pareto(results, objectives)
    header = format_front(front, objectives).splitlines()[1].split()
    assert "seq_len" in header


def test_front_computation_sits_below_plotting() -> None:
    """Issue 12: dse.pareto computes fronts without importing the plotting or the command-line layers."""
    import subprocess
    import sys

    code = ("import sys, dse.pareto; bad = [m for m in sys.modules if m.startswith(('dse.plots', 'dse.pareto_report', "
            "'matplotlib'))]; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
