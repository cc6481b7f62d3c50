"""Issue 11: a sweep dataset survives faults.  Every run here ends with the same dataset as an uninterrupted run
(compared by content hash) or with a clean exit 2 that names the problem and leaves nothing behind:
kill -9 at random moments, concurrent writers, truncated or empty parts, a changed spec, and the option and
input errors a new user makes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dse import runner
from dse.cli import main
from dse.spec import resolve_spec
from tests.test_runner import SMALL, content_hash

REPO = Path(__file__).resolve().parents[1]
SPEC = dict(SMALL, name="faults")
OTHER = dict(SMALL, name="other", grid={**SMALL["grid"], "gpus": [32]})


def _cmd(spec_path: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dse.cli", "run", str(spec_path), "-o", str(out), "--jobs", "1",
            "--chunk-size", "100", "-q", *extra]


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("specs")
    out = {}
    for name, data in (("faults", SPEC), ("other", OTHER)):
        p = d / f"{name}.yaml"
        p.write_text(yaml.safe_dump(data))
        out[name] = p
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory, specs) -> dict[str, str]:
    """Content hashes of uninterrupted runs of both specs."""
    d = tmp_path_factory.mktemp("reference")
    hashes = {}
    for name in ("faults", "other"):
        res = subprocess.run(_cmd(specs[name], d / name), cwd=REPO, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        hashes[name] = content_hash(d / name)
    return hashes


def _listing(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.exists() else set()


def kill_then_resume(cmd: Callable[..., list[str]], out: Path, seconds: float) -> subprocess.CompletedProcess:
    """Start ``cmd()`` (a dse run into ``out``), kill -9 its process group after ``seconds``, then run
    ``cmd("--resume")`` (plain ``cmd()`` when the kill came before the spec file) to the end."""
    proc = subprocess.Popen(cmd(), cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    extra = ("--resume",) if (out / "_spec.yaml").exists() else ()
    return subprocess.run(cmd(*extra), cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_at_a_random_moment_then_resume_gives_the_uninterrupted_dataset(tmp_path, specs, reference, seed):
    out = tmp_path / "killed"
    # before, during or after the first parts
    res = kill_then_resume(lambda *extra: _cmd(specs["faults"], out, *extra), out,
                           random.Random(seed).uniform(0.3, 2.5))
    assert res.returncode == 0, res.stderr
    assert not list(out.glob(".part-*")), "temporary files are cleaned up"
    assert content_hash(out) == reference["faults"]


def test_concurrent_writers_one_wins_the_other_exits_2(tmp_path, specs, reference):
    out = tmp_path / "shared"
    procs = [subprocess.Popen(_cmd(specs[n], out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in ("faults", "other")]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "another `dse run` is writing here" in loser or "already holds results" in loser
    winner = ("faults", "other")[[code for code, _ in results].index(0)]
    assert content_hash(out) == reference[winner], "the dataset is the winner's, whole and unmixed"


def test_resume_while_another_run_writes_exits_2_naming_it(tmp_path, specs, reference):
    out = tmp_path / "busy"
    first = subprocess.Popen(_cmd(specs["faults"], out), cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("part-*.parquet")):
        time.sleep(0.01)
    second = subprocess.run(_cmd(specs["faults"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert first.wait(timeout=120) == 0, first.stderr.read()
    first.stderr.close()
    if second.returncode == 2:  # it found the first one still writing
        assert f"process {first.pid}" in second.stderr
    else:  # the first had finished: resuming a complete run evaluates nothing
        assert second.returncode == 0
    assert content_hash(out) == reference["faults"]


def test_truncated_and_empty_parts_are_named_then_recomputed(tmp_path, specs, reference, capsys):
    out = tmp_path / "damaged"
    subprocess.run(_cmd(specs["faults"], out), cwd=REPO, check=True, capture_output=True, timeout=120)
    part12, part13 = out / "part-00012.parquet", out / "part-00013.parquet"
    part12.write_bytes(part12.read_bytes()[: part12.stat().st_size // 2])
    part13.write_bytes(b"")
    assert main(["info", str(out)]) == 2
    assert "part-00012.parquet: bad part" in capsys.readouterr().err
    res = subprocess.run(_cmd(specs["faults"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "part-00012.parquet" in res.stderr and "part-00013.parquet: empty (0 bytes)" in res.stderr
    assert "2 part(s)" in res.stdout
    assert content_hash(out) == reference["faults"]


def test_a_part_of_another_spec_is_recomputed(tmp_path, specs, reference):
    out, other = tmp_path / "mine", tmp_path / "theirs"
    subprocess.run(_cmd(specs["faults"], out), cwd=REPO, check=True, capture_output=True, timeout=120)
    subprocess.run(_cmd(specs["other"], other), cwd=REPO, check=True, capture_output=True, timeout=120)
    (out / "part-00003.parquet").write_bytes((other / "part-00003.parquet").read_bytes())
    res = subprocess.run(_cmd(specs["faults"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "of another spec" in res.stderr
    assert content_hash(out) == reference["faults"]


def test_a_changed_spec_is_refused_and_the_dataset_is_untouched(tmp_path, specs, reference):
    out = tmp_path / "changed"
    subprocess.run(_cmd(specs["faults"], out), cwd=REPO, check=True, capture_output=True, timeout=120)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    res = subprocess.run(_cmd(specs["other"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "different spec" in res.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert content_hash(out) == reference["faults"]


# ---- clean failures: exit 2, a message naming the problem, nothing left behind -------------------------------
@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    return tmp_path


@pytest.mark.parametrize("argv,fragment", [
    (["--jobs", "0"], "--jobs: value 0 is not allowed; allowed: -1 (all cores) or 1.."),
    (["--jobs", "1000"], "--jobs: value 1000 is not allowed"),
    (["--chunk-size", "10**12"], "--chunk-size: value 10**12 is not allowed; allowed: an integer in 1..2,097,152"),
    (["--max-points", "1e60"], "--max-points: value 1e60 is not allowed"),
    (["-o", "afile/sub"], "afile is a file"),
    (["-o", "/proc/foo"], "/proc/foo: cannot"),
])
def test_bad_run_options_exit_2_and_write_nothing(cwd, capsys, argv, fragment):
    (cwd / "afile").write_text("not a directory\n")
    before = _listing(cwd)
    assert main(["run", "spec.yaml", *argv]) == 2
    assert fragment in capsys.readouterr().err
    assert _listing(cwd) == before


def test_unreachable_dask_scheduler_exits_2_and_writes_nothing(cwd, capsys):
    pytest.importorskip("distributed")
    before = _listing(cwd)
    assert main(["run", "spec.yaml", "-o", "out", "--backend", "dask", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err
    assert _listing(cwd) == before


def test_garbage_spec_file_in_results_exits_2(cwd, capsys):
    assert main(["run", "spec.yaml", "-o", "out", "-q"]) == 0
    (cwd / "out" / "_spec.yaml").write_text("garbage: [\n")
    for argv in (["info", "out"], ["run", "spec.yaml", "-o", "out", "--resume"], ["plot", "out", "-o", "figs"],
                 ["pareto", "out", "--objectives", "step_time_s:min", "gpus:min"]):
        assert main(argv) == 2, argv
        assert "_spec.yaml" in capsys.readouterr().err, argv


def test_huge_or_deep_filters_and_huge_specs_exit_2(cwd, capsys):
    cases = {
        "long": {**SPEC, "constraints": {"filters": ["tp" + " + tp" * 20000 + " > 0"]}},
        "deep": {**SPEC, "constraints": {"filters": ["(" * 300 + "tp" + ")" * 300 + " > 0"]}},
        "chain": {**SPEC, "constraints": {"filters": ["tp" + " < tp" * 400]}},
    }
    for name, data in cases.items():
        (cwd / f"{name}.yaml").write_text(yaml.safe_dump(data))
        assert main(["run", f"{name}.yaml", "-o", name]) == 2, name
        assert "constraints.filters[0]" in capsys.readouterr().err
        assert not (cwd / name).exists()
    big = dict(SPEC, grid={**SPEC["grid"], "global_batch": list(range(1, 200_001))})
    (cwd / "big.yaml").write_text(yaml.safe_dump(big))
    assert main(["run", "big.yaml", "-o", "big"]) == 2
    assert "allowed: at most 262,144" in capsys.readouterr().err


def test_a_grid_that_keeps_nothing_is_decided_in_bounded_work(cwd, capsys, monkeypatch):
    """The probe evaluates at most PROBE_POINTS points, whatever the grid size: exact below, sampled above."""
    evaluated = []
    real = runner.evaluate_points

    def counting(spec, grid, start, stop, feasible_only=False):
        evaluated.append(stop - start)
        return real(spec, grid, start, stop, feasible_only)

    monkeypatch.setattr(runner, "evaluate_points", counting)
    small = dict(SPEC, constraints={"filters": ["tp > 1000"]})
    with pytest.raises(runner.RunError, match="all fail the constraints"):
        runner.prepare(resolve_spec(small, "small.yaml"), cwd / "s")
    assert sum(evaluated) == resolve_spec(small, "small.yaml").size
    evaluated.clear()
    huge = dict(small, grid={**SPEC["grid"], "global_batch": {"start": 1, "stop": 1_000_000},
                             "seq_len": [1024, 2048, 4096, 8192]})
    spec = resolve_spec(huge, "huge.yaml")
    assert spec.size > 10**9 // 4
    runner.prepare(spec, cwd / "h", max_points=10**11)
    assert sum(evaluated) <= runner.PROBE_POINTS
    assert "no point of a" in capsys.readouterr().err
    assert not (cwd / "h").exists()


def test_calibrate_output_checked_before_the_fit(cwd, capsys):
    cases = REPO / "tests" / "reference" / "llama2_inference_a100.csv"
    (cwd / "x.csv").write_bytes(cases.read_bytes())
    (cwd / "adir").mkdir()
    for out, fragment in (("x.csv", "suffix '.csv' is not allowed"), ("adir", "is a directory"),
                          ("missing/c.yaml", "does not exist")):
        assert main(["calibrate", "x.csv", "-o", out, "--no-loo"]) == 2
        assert fragment in capsys.readouterr().err
    assert (cwd / "x.csv").read_bytes() == cases.read_bytes()


def test_a_case_file_given_twice_counts_once(cwd, capsys):
    cases = REPO / "tests" / "reference" / "llama2_inference_a100.csv"
    (cwd / "x.csv").write_bytes(cases.read_bytes())
    assert main(["validate", "x.csv", "./x.csv", "--json"]) == 0
    captured = capsys.readouterr()
    import json

    payload = json.loads(captured.out)
    assert len(payload["cases"]) == 11 and "read once" in captured.err


# ---- issue 24: a full disk, Ctrl-C: one line, no traceback, no temporary part ---------------------------------
def test_a_full_disk_exits_2_with_one_line_and_leaves_no_temporary_part(cwd, capsys, monkeypatch, reference):
    import errno

    import pyarrow.parquet as pq

    real = pq.write_table
    calls = []

    def full_disk(table, where, **kw):
        calls.append(where)
        if len(calls) <= 5:
            return real(table, where, **kw)
        Path(where).write_bytes(b"PAR1 half a part")  # the disk filled up mid-write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full_disk)
    assert main(["run", "spec.yaml", "-o", "out", "--jobs", "1", "--chunk-size", "100", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "cannot write the dataset: No space left on device [ENOSPC] (5 of 70 parts written by this run are " \
           "kept); allowed: free space" in err, err
    assert "`dse run spec.yaml -o out --resume --chunk-size 100`" in err
    assert sorted(p.name for p in (cwd / "out").iterdir()) == [
        ".dse.lock", "_spec.yaml", *(f"part-{i:05d}.parquet" for i in range(5))], "no temporary part, no mark"
    monkeypatch.setattr(pq, "write_table", real)
    assert main(["run", "spec.yaml", "-o", "out", "--jobs", "1", "--chunk-size", "100", "-q", "--resume"]) == 0
    assert content_hash(cwd / "out") == reference["faults"]


def test_a_file_size_limit_in_loky_workers_is_one_line_not_a_worker_traceback(cwd, specs):
    """The real thing across processes: the workers inherit RLIMIT_FSIZE (and SIGXFSZ ignored), so their
    writes fail with EFBIG, as they would with ENOSPC; the error crosses joblib as one line."""
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (48000, 48000)); from dse.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    res = subprocess.run([sys.executable, "-c", script, "run", str(specs["faults"]), "-o", str(cwd / "out"), "--jobs",
                          "2", "--chunk-size", "1000", "-q"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert "cannot write the dataset: File too large [EFBIG]" in res.stderr
    left = {p.name for p in (cwd / "out").iterdir()} if (cwd / "out").exists() else set()
    assert left - {".dse.lock", "_spec.yaml"} == {p for p in left if p.startswith("part-")}, left


def _shm_entries_of(pid: int, wait_s: float = 10.0) -> list[str]:
    """/dev/shm entries named after process ``pid`` (loky: sem.loky-PID-*, joblib: joblib_memmapping_folder_PID_*)
    still there after up to ``wait_s`` (loky's resource tracker removes them just after the process exits)."""
    shm = Path("/dev/shm")
    deadline = time.monotonic() + wait_s
    while True:
        left = [p.name for p in shm.glob("*") if f"-{pid}-" in p.name or f"_{pid}_" in p.name] if shm.is_dir() else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_during_a_run_exits_130_with_one_line_and_resume_finishes_it(tmp_path, specs, reference, jobs):
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(_cmd(specs["faults"], out)[:-5] + ["--jobs", jobs, "--chunk-size", "100", "-q"],
                            cwd=REPO, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and len(list(out.glob("part-*.parquet"))) < 3:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the run finished before the interrupt")
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"dse run: interrupted: {out}: ") and "parts written by this run are kept" in err, err
    assert "--resume --chunk-size 100`" in err
    assert not list(out.glob(".*.tmp-*")) and not (out / "_complete.yaml").exists()
    assert _shm_entries_of(proc.pid) == [], "loky's semaphores and joblib's memmap folder are cleaned up"
    res = subprocess.run(_cmd(specs["faults"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert content_hash(out) == reference["faults"]


def test_tiny_chunks_warn_and_absurd_part_counts_are_refused(cwd, capsys):
    """Issue 24: --chunk-size 1 silently wrote one Parquet file (~20 KB of schema and footer) per point."""
    spec = resolve_spec(SPEC, "spec.yaml")
    runner.prepare(spec, cwd / "tiny", part_size=5)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("--chunk-size: warning: 1,383 parts of 5 point(s) each"), err
    runner.prepare(spec, cwd / "fine", part_size=100)
    assert capsys.readouterr().err == ""
    (cwd / "wide.yaml").write_text(yaml.safe_dump(dict(SPEC, grid={**SPEC["grid"],
                                                                   "global_batch": {"start": 1, "stop": 20}})))
    assert main(["run", "wide.yaml", "-o", "wide", "--chunk-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "--chunk-size: value 1 splits the 138,240 points into 138,240 parts (one Parquet file each); allowed: " \
           "at most 100,000 parts of fewer than 1,000 points, a --chunk-size of at least 2 (default 262,144)" \
           in err, err
    assert sorted(p.name for p in cwd.iterdir()) == ["spec.yaml", "wide.yaml"]


def test_a_run_removes_the_shm_entries_a_killed_run_left(cwd, tmp_path):
    """Issue 24: kill -9 of a run (and of its resource tracker) leaves sem.loky-PID-* and
    joblib_memmapping_folder_PID_* in /dev/shm; the next run removes those of dead processes of this user, and
    nothing else."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    shm = tmp_path / "shm"
    shm.mkdir()
    names = {"stale_sem": f"sem.loky-{dead.pid}-abc123", "stale_dir": f"joblib_memmapping_folder_{dead.pid}_ab_cd",
             "live_sem": f"sem.loky-{os.getpid()}-xyz", "other": f"sem.mp-{dead.pid}-q", "odd": "sem.loky-x-1"}
    for key, name in names.items():
        if key == "stale_dir":
            (shm / name).mkdir()
            (shm / name / "a.pkl").write_bytes(b"x")
        else:
            (shm / name).write_bytes(b"")
    assert sorted(runner.remove_stale_shm(shm)) == sorted([names["stale_sem"], names["stale_dir"]])
    assert sorted(p.name for p in shm.iterdir()) == sorted([names["live_sem"], names["other"], names["odd"]])


def test_kill_9_of_the_process_group_then_a_run_leaves_no_shm_entry_of_the_killed_run(tmp_path, specs):
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(specs["faults"], out)[:-5] + ["--jobs", "2", "--chunk-size", "100", "-q"],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and len(list(out.glob("part-*.parquet"))) < 3:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = subprocess.run(_cmd(specs["faults"], out, "--resume"), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert _shm_entries_of(proc.pid, wait_s=0) == []
