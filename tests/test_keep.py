"""Issue 12: ``dse run --keep`` reductions equal the same reduction of a full run (and of ``dse pareto``), also
after a kill -9 and ``--resume``, and a bad --keep value is an exit 2 that writes nothing."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dse.cli import main
from dse.dataset import read_spec_file
from dse.pareto import pareto_front
from tests.test_runner import SMALL

REPO = Path(__file__).resolve().parents[1]
SPEC = dict(SMALL, name="keep")
PARETO = "pareto:step_time_s:min,gpus:min,mem_total_bytes:min,by=model"
TOP = "top:3:tokens_per_s_per_gpu,by=model+system"


def _cmd(spec_path: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dse.cli", "run", str(spec_path), "-o", str(out), "--jobs", "1",
            "--chunk-size", "100", "-q", *extra]


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("keep") / "keep.yaml"
    p.write_text(yaml.safe_dump(SPEC))
    return p


@pytest.fixture(scope="module")
def full(tmp_path_factory, spec_path) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("full") / "all"
    assert main(["run", str(spec_path), "-o", str(out), "--jobs", "1", "--chunk-size", "100", "-q"]) == 0
    return pd.read_parquet(out)


def _points(frame: pd.DataFrame) -> list[int]:
    return sorted(frame["point"].tolist())


def _expected_top(full: pd.DataFrame, k: int, metric: str, by: list[str]) -> list[int]:
    ok = full[full["fits"] & np.isfinite(full[metric])]
    ranked = ok.sort_values(by + [metric, "point"], ascending=[True] * len(by) + [False, True], kind="stable")
    return _points(ranked.groupby(by, observed=True).head(k))


def _run(spec_path: Path, out: Path, keep: str) -> pd.DataFrame:
    assert main(["run", str(spec_path), "-o", str(out), "--jobs", "1", "--chunk-size", "100", "-q",
                 "--keep", keep]) == 0
    return pd.read_parquet(out)


def test_keep_feasible_is_the_fitting_rows(tmp_path, spec_path, full):
    kept = _run(spec_path, tmp_path / "f", "feasible")
    assert _points(kept) == _points(full[full["fits"]])


def test_keep_pareto_equals_the_front_of_a_full_run(tmp_path, spec_path, full):
    kept = _run(spec_path, tmp_path / "p", PARETO)
    objectives = ["step_time_s:min", "gpus:min", "mem_total_bytes:min"]
    assert 0 < len(kept) < full["fits"].sum()
    assert _points(kept) == _points(pareto_front(full, objectives, by="model"))
    assert read_spec_file(tmp_path / "p")["keep"] == PARETO
    # and dse pareto of the reduced dataset finds the same front
    front = tmp_path / "front.csv"
    assert main(["pareto", str(tmp_path / "p"), "--objectives", *objectives, "--by", "model", "-o", str(front)]) == 0
    assert _points(pd.read_csv(front)) == _points(kept)


def test_keep_top_equals_the_best_rows_of_a_full_run(tmp_path, spec_path, full):
    kept = _run(spec_path, tmp_path / "t", TOP)
    assert _points(kept) == _expected_top(full, 3, "tokens_per_s_per_gpu", ["model", "system"])
    assert len(kept) == 3 * full[["model", "system"]].drop_duplicates().shape[0]
    lowest = _run(spec_path, tmp_path / "t2", "top:2:step_time_s")  # no groups, min by default
    ok = full[full["fits"]].sort_values(["step_time_s", "point"])
    assert _points(lowest) == _points(ok.head(2))


@pytest.mark.parametrize("seed", [1, 2])
def test_keep_survives_kill_9_and_resume(tmp_path, spec_path, full, seed):
    from tests.test_fault_injection import kill_then_resume

    out = tmp_path / "killed"
    res = kill_then_resume(lambda *extra: _cmd(spec_path, out, "--keep", PARETO, *extra), out,
                           random.Random(seed).uniform(0.5, 2.5))
    assert res.returncode == 0, res.stderr
    front = pareto_front(full, ["step_time_s:min", "gpus:min", "mem_total_bytes:min"], by="model")
    assert _points(pd.read_parquet(out)) == _points(front)


def test_merge_is_idempotent_on_a_half_merged_dataset(tmp_path, spec_path, full):
    """A kill during the merge leaves some parts globally reduced and others only locally: resuming merges
    again and ends with the same rows."""
    from dse.runner import prepare, run
    from dse.spec import load_spec

    out = tmp_path / "half"
    spec = load_spec(spec_path)
    plan = prepare(spec, out, part_size=100, keep=TOP)
    run(plan, jobs=1, progress=False)
    once = _points(pd.read_parquet(out))
    (out / "part-00003.parquet").unlink()  # recomputed locally reduced, then merged again
    run(prepare(spec, out, part_size=100, keep=TOP, resume=True), jobs=1, progress=False)
    assert _points(pd.read_parquet(out)) == once


@pytest.mark.parametrize("value", ["pareto", "pareto:step_time_s", "pareto:nope:min", "top:0:mfu", "top:3",
                                   "top:x:mfu", "top:3:mfu:up", "best", "feasible:1", "pareto:model:min",
                                   "pareto:step_time_s:min,gpus:min,by=model,by=system"])
def test_bad_keep_values_exit_2_and_write_nothing(tmp_path, spec_path, capsys, value):
    out = tmp_path / "bad"
    assert main(["run", str(spec_path), "-o", str(out), "-q", "--keep", value]) == 2
    assert "--keep" in capsys.readouterr().err
    assert not out.exists()


def test_resume_with_another_keep_is_refused(tmp_path, spec_path):
    out = tmp_path / "r"
    assert main(["run", str(spec_path), "-o", str(out), "--jobs", "1", "-q", "--keep", "feasible"]) == 0
    assert main(["run", str(spec_path), "-o", str(out), "--jobs", "1", "-q", "--keep", TOP, "--resume"]) == 2


def test_info_of_a_serving_or_inference_dataset_needs_no_metric(tmp_path, capsys):
    """make sweep runs `dse info results/NAME` with no --metric: a serving dataset must summarize too."""
    spec = REPO / "spaces" / "serve-llama3.3-70b.yaml"
    out = tmp_path / "serve"
    keep = "top:2:output_tokens_per_s_per_gpu,by=system"
    assert main(["run", str(spec), "-o", str(out), "-q", "--jobs", "1", "--keep", keep]) == 0
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "by output_tokens_per_s_per_gpu (highest first)" in text and "every row is feasible" in text


# ---- issue 24: a run stopped before its merge is never mistaken for a complete dataset ------------------------
#: ``python -c KILL_AT MOMENT ARGV...``: dse with a kill -9 of itself at MOMENT of the run (--jobs 1 runs the
#: parts in this process): ``before_merge`` (every part written, merge not started), ``during_merge`` (after the
#: merge rewrote one part) or ``before_mark`` (merge done, completion mark not written).
KILL_AT = """
import os, signal, sys
import dse.runner as r
moment, merge, write, mark = sys.argv[1], r.merge_parts, r._write_atomic, r._write_complete_mark
merging = []
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def merge_parts(plan):
    if moment == "before_merge":
        die()
    merging.append(True)
    return merge(plan)
def write_atomic(plan, i, table):
    write(plan, i, table)
    if merging and moment == "during_merge":
        die()
def write_complete_mark(plan):
    if moment == "before_mark":
        die()
    mark(plan)
r.merge_parts, r._write_atomic, r._write_complete_mark = merge_parts, write_atomic, write_complete_mark
from dse.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _killed_at(moment: str, spec_path: Path, out: Path, keep: str) -> None:
    import subprocess

    res = subprocess.run([sys.executable, "-c", KILL_AT, moment, *_cmd(spec_path, out, "--keep", keep)[3:]],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == -9, res.stderr


@pytest.mark.parametrize("moment", ["before_merge", "during_merge"])
@pytest.mark.parametrize("keep", [TOP, PARETO])
def test_a_run_killed_before_its_merge_is_refused_until_resumed(tmp_path, spec_path, full, capsys, moment, keep):
    from dse.dataset import COMPLETE_FILE, DatasetError, load_results
    from dse.runner import read_results

    out = tmp_path / "killed"
    _killed_at(moment, spec_path, out, keep)
    n_parts = read_spec_file(out)["parts"]
    assert len(list(out.glob("part-*.parquet"))) == n_parts, "every part is there: it looks complete"
    assert not (out / COMPLETE_FILE).exists()
    objectives = ["step_time_s:min", "gpus:min"]
    for argv in (["info", str(out)], ["info", str(out), "--metric", "step_time_s"],
                 ["pareto", str(out), "--objectives", *objectives, "-o", str(tmp_path / "front.csv")],
                 ["plot", str(out), "-o", str(tmp_path / "figs")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "incomplete" in err and f"--keep {keep}" in err, err
        assert f"run with --resume to finish it: `dse run {spec_path} -o {out} --resume" in err, err
    assert not (tmp_path / "front.csv").exists() and not (tmp_path / "figs").exists()
    with pytest.raises(ValueError, match="run with --resume"):
        load_results(out)
    with pytest.raises(DatasetError, match="run with --resume"):
        list(read_results(out))
    assert main(_cmd(spec_path, out, "--keep", keep, "--resume")[3:]) == 0
    capsys.readouterr()
    assert (out / COMPLETE_FILE).exists()
    assert _points(load_results(out, feasible_only=False)) == _points(_expected(full, keep))
    assert main(["info", str(out)]) == 0


def _expected(full: pd.DataFrame, keep: str) -> pd.DataFrame:
    if keep == TOP:
        return full[full["point"].isin(_expected_top(full, 3, "tokens_per_s_per_gpu", ["model", "system"]))]
    return pareto_front(full, ["step_time_s:min", "gpus:min", "mem_total_bytes:min"], by="model")


def test_a_merged_dataset_without_the_mark_reads_as_complete(tmp_path, spec_path, full, capsys):
    """Killed after the merge, before the mark (or written by a dse without marks): its rows are their own
    reduction, which is exactly what the merge makes, so the readers accept it."""
    from dse.dataset import COMPLETE_FILE, load_results

    out = tmp_path / "merged"
    _killed_at("before_mark", spec_path, out, TOP)
    assert not (out / COMPLETE_FILE).exists()
    assert _points(load_results(out, feasible_only=False)) == _points(_expected(full, TOP))
    assert main(["info", str(out)]) == 0
    assert capsys.readouterr().err == ""


def test_a_partial_keep_all_dataset_is_read_with_a_warning(tmp_path, spec_path, capsys):
    """Rows of a keep-all run are right even when parts are missing: the readers warn (one line, naming the
    resume command) and go on."""
    from dse.dataset import COMPLETE_FILE, IncompleteDatasetWarning, load_results

    out = tmp_path / "partial"
    assert main(["run", str(spec_path), "-o", str(out), "--jobs", "1", "--chunk-size", "100", "-q"]) == 0
    capsys.readouterr()
    assert (out / COMPLETE_FILE).exists()
    (out / "part-00004.parquet").unlink()
    assert main(["info", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dse info: warning: {out}: incomplete: ") and "--resume" in err
    with pytest.warns(IncompleteDatasetWarning, match="run with --resume"):
        load_results(out)
    assert main(_cmd(spec_path, out, "--resume")[3:]) == 0
    assert main(["info", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_resume_that_changes_a_part_removes_the_mark_first(tmp_path, spec_path, monkeypatch):
    """A --resume that recomputes a bad part is incomplete until it marks the dataset again."""
    from dse import runner
    from dse.dataset import COMPLETE_FILE
    from dse.spec import load_spec

    out = tmp_path / "redo"
    spec = load_spec(spec_path)
    runner.run(runner.prepare(spec, out, part_size=100, keep=TOP), jobs=1, progress=False)
    (out / "part-00002.parquet").write_bytes(b"")

    def stop(plan, i, created, feasible_only):
        assert not (out / COMPLETE_FILE).exists()
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "write_part", stop)
    with pytest.raises(KeyboardInterrupt):
        runner.run(runner.prepare(spec, out, part_size=100, keep=TOP, resume=True), jobs=1, progress=False)
    assert not (out / COMPLETE_FILE).exists()


def test_keep_by_given_twice_is_refused_not_the_last_one_kept(tmp_path, spec_path, capsys):
    """Issue 24: ``by=model,by=system`` kept one front per system while _spec.yaml recorded both."""
    assert main(["run", str(spec_path), "-o", str(tmp_path / "o"), "-q", "--keep",
                 "top:3:mfu,by=model,by=system"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gives 'by=' twice; allowed: one by= naming every column, joined by '+' " \
        "(by=model+system)" in err, err
    assert not (tmp_path / "o").exists()
