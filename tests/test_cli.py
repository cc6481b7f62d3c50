"""Tests of the ``dse`` command line: ``validate``, ``explain``, ``models``, ``systems``.

Most tests call :func:`dse.cli.main` in-process and read its output with ``capsys``; a few run the installed
console script in a subprocess to check the real exit status.  The exit-status contract (``dse/cli.py``):
0 success, 1 a validated file is over ``--max-mape``, 2 bad input with one message naming the file, the
row or key, the bad value and what is allowed.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dse.cli import EXPLAIN_OPTIONS, main
from dse.codes import PRECISION, RECOMPUTE
from dse.hardware.catalog import system_names
from dse.models.catalog import model_names
from dse.validation.validate import METRICS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TASKS
from tests.conftest import REPO

KORTHIKANTI_REL = "tests/reference/megatron_korthikanti2022_table4.csv"
INFERENCE_REL = "tests/reference/llama2_inference_a100.csv"
KORTHIKANTI = REPO / KORTHIKANTI_REL
INFERENCE = REPO / INFERENCE_REL


def _console_script() -> Path | None:
    """The installed ``dse`` entry point of this virtualenv (or the one beside the running interpreter)."""
    for candidate in (REPO / ".venv" / "bin" / "dse", Path(sys.executable).parent / "dse"):
        if candidate.exists():
            return candidate
    found = shutil.which("dse")
    return Path(found) if found else None


DSE = _console_script()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``dse ARGV`` in-process; return (exit status, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def error_line(err: str, command: str = "validate") -> str:
    """The single error message on stderr (fails unless there is exactly one)."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected exactly one error message on stderr, got:\n{err}"
    assert lines[0].startswith(f"dse {command}: error: "), lines[0]
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# dse validate: the shipped reference files
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the checkout so the relative paths of the brief (tests/reference/...) resolve."""
    monkeypatch.chdir(REPO)
    return REPO


def test_validate_text_lists_every_case_and_a_mape_summary(capsys, in_repo):
    code, out, err = run(capsys, "validate", KORTHIKANTI_REL)
    assert code == 0
    assert err == ""
    _, rows = read_rows(KORTHIKANTI)
    assert len(rows) == 5
    lines = out.splitlines()
    for row in rows:
        (line,) = [ln for ln in lines if ln.split() and ln.split()[0] == row["case"]]
        assert "layer_time_ms" in line
        assert re.search(r"[+-]\d+\.\d\d%$", line), f"case line has no signed error percentage: {line!r}"
        assert "skipped" not in line
    header = [ln for ln in lines if ln.startswith("file") and "MAPE %" in ln]
    assert len(header) == 1, out
    summary = [ln for ln in lines if ln.startswith("megatron_korthikanti2022_table4.csv")]
    assert len(summary) == 1, out
    m = re.fullmatch(r"megatron_korthikanti2022_table4\.csv\s+layer_time_ms\s+5\s+"
                     r"(\d+\.\d\d)\s+(\d+\.\d\d)\s+0", summary[0].strip())
    assert m, f"summary line not as expected: {summary[0]!r}"
    mape, max_err = float(m.group(1)), float(m.group(2))
    assert 0.0 <= mape <= max_err


def test_validate_json_schema_and_summary_consistency(capsys, in_repo):
    code, out, err = run(capsys, "validate", "--json", KORTHIKANTI_REL)
    assert code == 0
    assert err == ""
    payload = json.loads(out)
    assert set(payload) == {"cases", "summary"}
    _, rows = read_rows(KORTHIKANTI)
    cases = payload["cases"]
    assert [c["case"] for c in cases] == [r["case"] for r in rows]
    for case, row in zip(cases, rows, strict=True):
        assert {"case", "file", "metric", "measured"} <= set(case)
        assert case["file"] == "megatron_korthikanti2022_table4.csv"
        assert case["metric"] == row["metric"] == "layer_time_ms"
        assert case["measured"] == pytest.approx(float(row["measured"]))
        # every Table 4 case is modelled: predicted + error, no skip
        assert "skipped" not in case
        assert case["predicted"] > 0
        assert case["error_pct"] == pytest.approx((case["predicted"] / case["measured"] - 1.0) * 100.0)
    (summary,) = payload["summary"]
    assert {"file", "metric", "n", "mape_pct", "max_abs_error_pct"} <= set(summary)
    assert summary["file"] == "megatron_korthikanti2022_table4.csv"
    assert summary["metric"] == "layer_time_ms"
    assert summary["n"] == 5
    errors = [abs(c["error_pct"]) for c in cases]
    assert summary["mape_pct"] == pytest.approx(sum(errors) / len(errors))
    assert summary["max_abs_error_pct"] == pytest.approx(max(errors))


def test_validate_max_mape_exceeded_exits_1(capsys, in_repo):
    code, out, err = run(capsys, "validate", "--max-mape", "0.001", KORTHIKANTI_REL)
    assert code == 1
    assert "megatron_korthikanti2022_table4.csv" in err
    assert "--max-mape" in err
    assert "MAPE %" in out, "the report is still printed when the limit is exceeded"


def test_validate_max_mape_met_exits_0(capsys, in_repo):
    code, _, err = run(capsys, "validate", "--max-mape", "1000", KORTHIKANTI_REL)
    assert code == 0
    assert err == ""


def test_validate_inference_file_compares_every_case(capsys, in_repo):
    code, out, err = run(capsys, "validate", INFERENCE_REL)
    assert code == 0
    assert err == ""
    _, rows = read_rows(INFERENCE)
    assert rows and all(r["task"] == "infer" for r in rows)
    lines = out.splitlines()
    for row in rows:
        (line,) = [ln for ln in lines if ln.split() and ln.split()[0] == row["case"]]
        assert "skipped" not in line and line.rstrip().endswith("%")
    summary = [ln for ln in lines if ln.startswith("llama2_inference_a100.csv")]
    assert len(summary) == 1
    assert summary[0].split()[2] == str(len(rows))


def test_validate_skips_moe_inference_with_a_reason(capsys, in_repo):
    code, out, _ = run(capsys, "validate", "--json", "tests/reference/trtllm_0.9.0_a100_h100.csv")
    assert code == 0
    payload = json.loads(out)
    skipped = [c for c in payload["cases"] if "skipped" in c]
    assert skipped and all("mixtral" in c["case"] for c in skipped)
    assert all("mixture-of-experts" in c["skipped"] for c in skipped)


def test_validate_inference_file_json_and_max_mape(capsys, in_repo):
    code, out, _ = run(capsys, "validate", "--json", "--max-mape", "0.001", INFERENCE_REL)
    assert code == 1  # every case is compared, and no model is exact to 0.001 %
    payload = json.loads(out)
    for case in payload["cases"]:
        assert "skipped" not in case
        assert {"case", "file", "metric", "measured", "predicted", "error_pct"} <= set(case)
    (summary,) = payload["summary"]
    assert summary["n"] == len(payload["cases"]) == 11
    assert summary["mape_pct"] > 0


# ---------------------------------------------------------------------------------------------------------
# dse validate: malformed case files
# ---------------------------------------------------------------------------------------------------------

_HEADER, _KROWS = read_rows(KORTHIKANTI)
_, _IROWS = read_rows(INFERENCE)
assert [c for c in _HEADER if c not in OPTIONAL_COLUMNS] == list(REQUIRED_COLUMNS), \
    "the corpus below is written with the schema's column order"


def train_row(i: int = 1, **changes: str) -> dict[str, str]:
    """A valid training case (Korthikanti Table 4, no recompute) under a neutral id; ``changes`` break it.

    The id matches none of the globs in the package's reference_assumptions.yaml, so no cell is filled in.
    """
    row = dict(_KROWS[0])
    row["case"] = f"corpus-{i}"
    row.update(changes)
    return row


def infer_row(i: int = 1, **changes: str) -> dict[str, str]:
    row = dict(_IROWS[0])
    row["case"] = f"corpus-infer-{i}"
    row.update(changes)
    return row


def write_cases(path: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> Path:
    columns = list(_HEADER) if columns is None else columns
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    return path


@dataclass
class Bad:
    """One malformed case file and what its error message must name."""

    make: Callable[[Path], Path]        # writes the file into the given directory, returns its path
    row: int | None = None              # 1-based line number in the file (header = 1)
    column: str | None = None
    value: str | None = None
    allowed: tuple[str, ...] = ()       # fragments that must appear (allowed values, or the kind of problem)
    marks: tuple = field(default_factory=tuple)


def _one(name: str, **changes: str) -> Callable[[Path], Path]:
    extra = [c for c in changes if c not in _HEADER]
    return lambda d: write_cases(d / f"{name}.csv", [train_row(1, **changes)], [*_HEADER, *extra] if extra else None)


def _without(column: str) -> Callable[[Path], Path]:
    return lambda d: write_cases(d / f"no_{column}.csv", [train_row(1)], [c for c in _HEADER if c != column])


def _with_extra(d: Path) -> Path:
    return write_cases(d / "extra.csv", [train_row(1, colour="blue")], [*_HEADER, "colour"])


def _bytes(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / name
        p.write_bytes(data)
        return p
    return make


def _directory(d: Path) -> Path:
    p = d / "a_directory.csv"
    p.mkdir()
    return p


def _ragged(d: Path) -> Path:
    p = write_cases(d / "ragged.csv", [train_row(1)])
    with p.open("a", encoding="utf-8") as fh:
        fh.write(",".join(["x"] * (len(_HEADER) + 5)) + "\n")
    return p


_ALL_SYSTEMS = ", ".join(system_names())
#: A PNG-like header followed by bytes that are not valid UTF-8.
_GARBAGE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(128, 256))

CORPUS: dict[str, Bad] = {
    "missing_required_column": Bad(_without("seq_len"), column="seq_len", allowed=("missing column",)),
    "unknown_extra_column": Bad(_with_extra, column="colour",
                                allowed=("unknown column", *REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)),
    "empty_file": Bad(_bytes("empty.csv", b""), allowed=("empty file",)),
    "header_only": Bad(lambda d: write_cases(d / "header_only.csv", []), allowed=("no cases",)),
    "duplicate_case_id": Bad(lambda d: write_cases(d / "dup.csv", [train_row(1), train_row(1, measured="2")]),
                             row=3, column="case", value=None, allowed=("duplicate case id", "'corpus-1'")),
    "unknown_task": Bad(_one("task", task="pretrain"), row=2, column="task", value="pretrain",
                        allowed=(", ".join(TASKS),)),
    "request_rate_zero": Bad(_one("rate", request_rate="0"), row=2, column="request_rate", value="0",
                             allowed=("a positive finite number",)),
    "max_num_tokens_fraction": Bad(_one("mnt", max_num_tokens="2048.5"), row=2, column="max_num_tokens",
                                   value="2048.5", allowed=("an integer >= 1",)),
    "unknown_metric": Bad(_one("metric", metric="mfu"), row=2, column="metric", value="mfu",
                          allowed=(", ".join(METRICS),)),
    "measured_not_numeric": Bad(_one("measured_text", measured="fast"), row=2, column="measured",
                                value="fast", allowed=("a positive finite number",)),
    "measured_negative": Bad(_one("measured_neg", measured="-19.6"), row=2, column="measured", value="-19.6",
                             allowed=("a positive finite number",)),
    "measured_empty": Bad(_one("measured_empty", measured=""), row=2, column="measured",
                          allowed=("a positive finite number",)),
    "unknown_system": Bad(_one("system", system="tpu-v9"), row=2, column="system", value="tpu-v9",
                          allowed=(_ALL_SYSTEMS,)),
    "offload_on_an_inference_row": Bad(
        lambda d: write_cases(d / "offload_infer.csv", [infer_row(1, offload="optimizer")], [*_HEADER, "offload"]),
        row=2, column="offload", value="optimizer", allowed=("empty", "task train")),
    "tp_not_integer": Bad(_one("tp_frac", tp="2.5"), row=2, column="tp", value="2.5",
                          allowed=("an integer >= 1",)),
    "tp_zero": Bad(_one("tp_zero", tp="0"), row=2, column="tp", value="0", allowed=("an integer >= 1",)),
    "recompute_unknown": Bad(_one("recompute", recompute="sometimes"), row=2, column="recompute",
                             value="sometimes", allowed=(", ".join(RECOMPUTE),)),
    "precision_unknown": Bad(_one("precision", precision="fp64"), row=2, column="precision", value="fp64",
                             allowed=(", ".join(PRECISION),)),
    "sp_two": Bad(_one("sp", sp="2"), row=2, column="sp", value="2", allowed=("an integer in 0..1",)),
    "zero_five": Bad(_one("zero", zero="5"), row=2, column="zero", value="5",
                     allowed=("an integer in 0..3",)),
    "layers_text": Bad(_one("layers", layers="forty-eight"), row=2, column="layers", value="forty-eight",
                       allowed=("an integer >= 1",)),
    "dp_and_gpus_empty": Bad(_one("dp_gpus", dp="", gpus=""), row=2, column="dp",
                             allowed=("'gpus'", "both empty", "give at least one")),
    "bad_value_in_second_row": Bad(
        lambda d: write_cases(d / "second.csv", [train_row(1), train_row(2, tp="0")]),
        row=3, column="tp", value="0", allowed=("corpus-2", "an integer >= 1")),
    "bad_train_row_after_infer_row": Bad(
        lambda d: write_cases(d / "mixed.csv", [infer_row(1), train_row(2, system="tpu-v9")]),
        row=3, column="system", value="tpu-v9", allowed=("corpus-2", _ALL_SYSTEMS),
        ),
    "measured_infinite": Bad(_one("measured_inf", measured="inf"), row=2, column="measured", value="inf",
                             allowed=("a positive finite number",)),
    "bad_system_in_inference_row": Bad(
        lambda d: write_cases(d / "infer_bad.csv", [infer_row(1, system="tpu-v9")]),
        row=2, column="system", value="tpu-v9", allowed=(_ALL_SYSTEMS,)),
    "file_does_not_exist": Bad(lambda d: d / "no_such_cases.csv", allowed=("no such file",)),
    "binary_garbage": Bad(_bytes("garbage.csv", _GARBAGE),
                          allowed=("not a readable CSV",)),
    "ragged_row": Bad(_ragged, allowed=("not a readable CSV",)),
    "directory_not_file": Bad(_directory, allowed=("not a readable CSV",)),
}


@pytest.fixture
def workdirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(directory holding the case files, empty working directory the command runs in)."""
    cases = tmp_path / "cases"
    cwd = tmp_path / "cwd"
    cases.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cases, cwd


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_corpus_base_rows_are_valid(capsys, workdirs):
    """Control: the corpus's unbroken rows validate cleanly, so each error comes from the break."""
    cases, _ = workdirs
    good = write_cases(cases / "good.csv", [infer_row(1), train_row(2), train_row(3)])
    code, out, err = run(capsys, "validate", "--no-assume", str(good))
    assert (code, err) == (0, "")
    assert "corpus-2" in out and "corpus-3" in out
    code, _, err = run(capsys, "validate", str(good))
    assert (code, err) == (0, "")


def test_corpus_has_at_least_twelve_files():
    assert len(CORPUS) >= 12


@pytest.mark.parametrize("name", [pytest.param(n, marks=b.marks) for n, b in CORPUS.items()])
def test_malformed_case_file_exits_2_with_one_precise_message(name, capsys, workdirs):
    bad = CORPUS[name]
    cases, cwd = workdirs
    path = bad.make(cases)
    before = _listing(cwd)
    code, out, err = run(capsys, "validate", str(path))
    assert code == 2
    assert out == "", "nothing is reported on stdout for a malformed file"
    msg = error_line(err)
    assert str(path) in msg, "the message names the file"
    if bad.row is not None:
        assert re.search(rf"\brow {bad.row}\b", msg), f"message does not name row {bad.row}: {msg}"
    if bad.column is not None:
        assert f"'{bad.column}'" in msg, f"message does not name column {bad.column!r}: {msg}"
    if bad.value is not None:
        assert repr(bad.value) in msg, f"message does not show the bad value {bad.value!r}: {msg}"
    for fragment in bad.allowed:
        assert fragment in msg, f"message lacks {fragment!r}: {msg}"
    assert _listing(cwd) == before == [], "validate must not create files in the working directory"


# ---------------------------------------------------------------------------------------------------------
# The installed console script: real exit statuses
# ---------------------------------------------------------------------------------------------------------


def _script(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    if DSE is None:
        pytest.skip("the dse console script is not installed")
    return subprocess.run([str(DSE), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_script_validate_reference_exits_0():
    proc = _script(["validate", KORTHIKANTI_REL], REPO)
    assert proc.returncode == 0, proc.stderr
    assert "MAPE %" in proc.stdout


def test_script_validate_over_max_mape_exits_1():
    proc = _script(["validate", "--max-mape", "0.001", KORTHIKANTI_REL], REPO)
    assert proc.returncode == 1
    assert "megatron_korthikanti2022_table4.csv" in proc.stderr


@pytest.mark.parametrize("name", [
    "tp_not_integer",
    "empty_file",
])
def test_script_malformed_file_exits_2(name, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = CORPUS[name].make(tmp_path)
    proc = _script(["validate", str(path)], cwd)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    msg = error_line(proc.stderr)
    assert str(path) in msg
    assert _listing(cwd) == []


# ---------------------------------------------------------------------------------------------------------
# dse explain
# ---------------------------------------------------------------------------------------------------------

EXPLAIN = ["explain", "--model", "gpt3-175b", "--system", "a100-sxm-80gb", "--gpus", "1024", "--tp", "8",
           "--pp", "8", "--vpp", "2", "--micro-batch", "1", "--global-batch", "1536", "--seq-len", "2048"]
#: The same configuration as a YAML file (hyphenated and underscored keys are both accepted).
EXPLAIN_YAML = """\
model: gpt3-175b
system: a100-sxm-80gb
gpus: 1024
tp: 8
pp: 8
vpp: 2
micro-batch: 1
global_batch: 1536
seq_len: 2048
"""


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced."""
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def test_explain_text(capsys):
    code, out, err = run(capsys, *EXPLAIN)
    assert code == 0
    assert err == ""
    for heading in ("Step time", "Memory per GPU", "Bottleneck"):
        assert heading in out
    assert "gpt3-175b" in out and "a100-sxm-80gb" in out
    assert "No answer" not in out


def test_explain_names_the_optimizer_layout_and_its_bytes(capsys):
    """The memory section says what the optimizer keeps per trained parameter (dse.cost.memory
    optimizer_layout_bytes) and over how many ranks ZeRO shards it; a layout the model does not know exits 2 with
    the allowed ones."""
    code, out, _ = run(capsys, *EXPLAIN, "--optimizer", "adam_16bit_master", "--zero", "1")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("optimizer adam_16bit_master"))
    assert "2 + 2 + 6 bytes per trained parameter" in line
    dp = next(int(w.split("=")[1]) for w in out.split() if w.startswith("dp="))
    assert (f"sharded over {dp} data-parallel ranks (zero 1)" in line) == (dp > 1)
    code, _, err = run(capsys, *EXPLAIN, "--optimizer", "adam_17")
    assert code == 2 and "adam_17" in err and "adam_16bit_master" in err


def _explain_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    assert err == ""
    return json.loads(out)


def test_explain_json_time_components_sum_to_step_time(capsys):
    payload = _explain_json(capsys, *EXPLAIN)
    assert {"configuration", "time", "layer", "memory", "tables"} <= set(payload)
    step = payload["configuration"]["step_time_s"]
    assert step is not None and step > 0
    # every key starting with time_, wherever it sits in the payload
    times = {k: v for section in payload.values() if isinstance(section, dict)
             for k, v in section.items() if k.startswith("time_")}
    assert set(times) == set(payload["time"])
    assert len(times) >= 5
    assert all(v is not None and math.isfinite(v) and v >= 0 for v in times.values())
    assert math.fsum(times.values()) == pytest.approx(step, rel=1e-6)
    assert payload["configuration"]["gpus"] == 1024 and payload["configuration"]["dp"] == 16
    assert payload["configuration"]["model"] == "gpt3-175b"
    # the module table and the named parts come in their own sections, not among the configuration
    assert payload["module"] and payload["detail"]
    assert not any(k.startswith(("module_", "detail_")) for k in payload["configuration"])
    modules = payload["tables"]["modules"]
    assert {r["module"] for r in modules} >= {"qkv", "attention", "mlp", "comm"}


def test_explain_yaml_file_same_as_flags(capsys, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(EXPLAIN_YAML, encoding="utf-8")
    from_flags = _explain_json(capsys, *EXPLAIN)
    from_file = _explain_json(capsys, "explain", "-f", str(cfg))
    assert from_file == from_flags


def test_explain_flags_override_yaml_file(capsys, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(EXPLAIN_YAML + "recompute: none\n", encoding="utf-8")
    base = _explain_json(capsys, "explain", "-f", str(cfg))
    over = _explain_json(capsys, "explain", "-f", str(cfg), "--recompute", "full")
    assert base["configuration"]["recompute"] == "none"
    assert over["configuration"]["recompute"] == "full"
    assert base["time"]["time_recompute_s"] == 0
    assert over["time"]["time_recompute_s"] > 0
    assert over["configuration"]["step_time_s"] > base["configuration"]["step_time_s"]
    # the keys not overridden still come from the file
    for key in ("gpus", "tp", "pp", "vpp", "global_batch", "seq_len", "system"):
        assert over["configuration"][key] == base["configuration"][key]
    # an override that breaks divisibility shows up too
    code, out, err = run(capsys, "explain", "-f", str(cfg), "--tp", "3")
    assert code == 2 and "no answer" in err and "tp=3" in err


def test_explain_yaml_unknown_key_exits_2(capsys, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(EXPLAIN_YAML + "learning_rate: 0.0003\n", encoding="utf-8")
    code, out, err = run(capsys, "explain", "-f", str(cfg))
    assert code == 2
    assert out == ""
    msg = error_line(err, "explain")
    assert str(cfg) in msg
    assert "'learning_rate'" in msg
    assert ", ".join(EXPLAIN_OPTIONS) in msg, "all allowed keys are listed"


def test_explain_missing_yaml_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "explain", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert str(tmp_path / "nope.yaml") in error_line(err, "explain")


def test_explain_unknown_model_exits_2(capsys):
    code, out, err = run(capsys, *_with(EXPLAIN, "--model", "gpt5-10t"))
    assert code == 2
    assert out == ""
    msg = error_line(err, "explain")
    assert "'gpt5-10t'" in msg
    assert ", ".join(model_names()) in msg


def test_explain_unknown_system_exits_2(capsys):
    code, out, err = run(capsys, *_with(EXPLAIN, "--system", "tpu-v9"))
    assert code == 2
    assert out == ""
    msg = error_line(err, "explain")
    assert "'tpu-v9'" in msg
    assert ", ".join(system_names()) in msg


def test_explain_unknown_recompute_exits_2(capsys):
    code, out, err = run(capsys, *EXPLAIN, "--recompute", "bogus")
    assert code == 2
    assert out == ""
    msg = error_line(err, "explain")
    assert "'bogus'" in msg
    assert ", ".join(RECOMPUTE) in msg


def test_explain_without_system_exits_2(capsys):
    argv = list(EXPLAIN)
    i = argv.index("--system")
    del argv[i:i + 2]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "--system" in error_line(err, "explain")


def test_explain_non_integer_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(_with(EXPLAIN, "--tp", "2.5"))
    assert exc.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def test_explain_configuration_that_does_not_divide(capsys):
    """Issue 11: a layout that does not divide is bad input to explain: exit 2 with the rule and the values it
    saw (it used to print a derived dp and "No answer" with exit 0)."""
    code, out, err = run(capsys, *_with(EXPLAIN, "--tp", "3"))
    assert code == 2 and out == ""
    # 1024 GPUs / (tp 3 * pp 8) is not a whole data-parallel size
    assert "tp*pp*cp*dp != gpus" in err and "tp=3" in err and "gpus=1024" in err and "give --dp" in err
    code, out, err = run(capsys, *_with(EXPLAIN, "--tp", "3"), "--json")
    assert code == 2 and out == ""


# ---------------------------------------------------------------------------------------------------------
# dse models / dse systems
# ---------------------------------------------------------------------------------------------------------


def test_models_lists_catalog(capsys):
    code, out, err = run(capsys, "models")
    assert code == 0 and err == ""
    assert "gpt3-175b" in out
    listed = {line.split()[0] for line in out.splitlines()[1:] if line.split()}
    assert set(model_names()) <= listed


def test_systems_lists_catalog(capsys):
    code, out, err = run(capsys, "systems")
    assert code == 0 and err == ""
    assert "h100-sxm-80gb" in out
    listed = {line.split()[0] for line in out.splitlines()[1:] if line.split()}
    assert set(system_names()) <= listed


def test_pareto_and_plot_commands_on_a_small_sweep(tmp_path, capsys):
    """`dse run` → `dse pareto` (table, file, figure) → `dse plot` (PNG + Parquet per figure); bad objectives
    exit 2 naming the allowed directions."""
    import yaml

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "price_per_gpu_hour": 2.0, "grid": {
        "model": "llama3-8b", "system": ["a100-sxm-80gb", "h100-sxm-80gb"], "gpus": [8, 16, 32], "seq_len": 4096,
        "global_batch": 64, "tp": [1, 2, 4], "pp": [1, 2], "micro_batch": [1, 2], "recompute": ["none", "full"]}}))
    res = tmp_path / "res"
    assert main(["run", str(spec), "-o", str(res), "--jobs", "1", "-q"]) == 0
    front = tmp_path / "front.csv"
    assert main(["pareto", str(res), "--objectives", "step_time_s:min", "cost_per_million_tokens_usd:min",
                 "--by", "system", "-o", str(front)]) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out and front.exists() and front.with_suffix(".png").exists()
    assert main(["plot", str(res), "-o", str(tmp_path / "figs")]) == 0
    pngs = sorted((tmp_path / "figs").glob("*.png"))
    assert len(pngs) >= 5 and all(p.with_suffix(".parquet").exists() for p in pngs)
    capsys.readouterr()
    assert main(["pareto", str(res), "--objectives", "step_time_s:fastest"]) == 2
    err = capsys.readouterr().err
    assert "step_time_s:fastest" in err and "min" in err and "max" in err


@pytest.mark.parametrize("glob", ["narayanan2021*gpt-1.7b", "narayanan*gpt*1.7b*", "*t1-*-1.7?",
                                  "narayanan2021-t1-gpt-1.[7]b"])
def test_validate_assume_globs_with_several_wildcards(capsys, in_repo, tmp_path, glob):
    """Issue 24: a glob with two ``*`` became a regular expression pyarrow's RE2 refuses (a traceback)."""
    rules = tmp_path / "assume.yaml"
    rules.write_text(f'- cases: "{glob}"\n  set: {{micro_batch: 16, vpp: 1}}\n  source: test\n', encoding="utf-8")
    code, out, err = run(capsys, "validate", "--json", "--assume", str(rules),
                         "tests/reference/megatron_narayanan2021_table1.csv")
    assert (code, err) == (0, "")
    assumed = {c["case"]: c.get("assumed", {}) for c in json.loads(out)["cases"]}
    assert assumed["narayanan2021-t1-gpt-1.7b"] == {"micro_batch": 16, "vpp": 1}
    assert [c for c, a in assumed.items() if a] == ["narayanan2021-t1-gpt-1.7b"]


SERVE_ARGS = ["--task", "serve", "--model", "llama3-8b", "--system", "h100-sxm-80gb", "--tp", "1", "--input-len",
              "1000", "--output-len", "100"]


@pytest.mark.parametrize("argv,fragment", [
    ([*SERVE_ARGS, "--stack", "megatron-lm-2021"], "--stack 'megatron-lm-2021' is not allowed with task 'serve' (a "
                                                   "training stack: it sets no serving-engine setting); allowed: "),
    (["--model", "llama3-8b", "--system", "h100-sxm-80gb", "--gpus", "8", "--tp", "1", "--pp", "1", "--seq-len",
      "4096", "--global-batch", "64", "--stack", "vllm-0.11"], "--stack 'vllm-0.11' is not allowed with task "
                                                               "'train' (an inference stack"),
    ([*SERVE_ARGS, "--prefill-tp", "2"], "--prefill-tp is given without --prefill-gpus"),
])
def test_explain_refuses_what_would_silently_mean_the_defaults(capsys, argv, fragment):
    """Issue 24: a training stack on a serving configuration (and prefill_tp without a prefill pool) filled
    nothing and said nothing."""
    code, _, err = run(capsys, "explain", *argv)
    assert code == 2 and fragment in error_line(err, "explain"), err


def test_explain_serving_with_its_own_stack_and_a_prefill_pool_runs(capsys):
    code, out, err = run(capsys, "explain", *SERVE_ARGS, "--stack", "vllm-0.11")
    assert (code, err) == (0, ""), err
    code, out, err = run(capsys, "explain", *SERVE_ARGS, "--prefill-gpus", "2", "--prefill-tp", "2")
    assert (code, err) == (0, ""), err


@pytest.mark.parametrize("task,extra", [("serve", []), ("infer", ["--batch", "8"])])
def test_explain_prints_no_tpot_for_one_output_token(capsys, task, extra):
    """Issue 24: with output_len 1 explain printed a time per output token for a request that has no second
    token (the decode iteration's time)."""
    argv = [*SERVE_ARGS[2:], "--task", task, *extra]
    argv[argv.index("--output-len") + 1] = "1"
    code, out, err = run(capsys, "explain", *argv)
    assert (code, err) == (0, "")
    (line,) = [ln for ln in out.splitlines() if "time per output token" in ln]
    assert " none " in line and "output_len 1: the prefill makes the only token" in line, line
    if task == "infer":  # no decode step to split, no decode ops
        assert "decode step, split" not in out and not re.search(r"^\s*decode\s", out, re.M)
    code, out, _ = run(capsys, "explain", *argv, "--json")
    payload = json.loads(out)["configuration_and_outputs"]
    assert payload["tpot_s"] is None and payload.get("tokens_per_s_per_user") is None
    argv[argv.index("--output-len") + 1] = "2"
    code, out, _ = run(capsys, "explain", *argv)
    assert re.search(r"time per output token.*\d ms", out)


@pytest.mark.parametrize("exc,code,line", [
    (TypeError("unsupported operand"), 70, "dse models: internal error: TypeError: unsupported operand (a bug in dse: "
                                           "please report the command line; DSE_TRACEBACK=1 prints where it happened)"),
    (PermissionError(13, "Permission denied", "/data/x.parquet"), 2,
     "dse models: error: /data/x.parquet: Permission denied"),
])
def test_no_traceback_reaches_the_terminal(capsys, monkeypatch, exc, code, line):
    """Issue 24: any exception the commands do not turn into a message is one line, not a traceback."""
    import dse.cli

    def broken(args):
        raise exc

    monkeypatch.setattr(dse.cli, "cmd_models", broken)
    assert run(capsys, "models")[0:3:2] == (code, line + "\n")
    monkeypatch.setenv("DSE_TRACEBACK", "1")
    if code == 70:
        with pytest.raises(TypeError):
            main(["models"])


def test_a_closed_pipe_ends_quietly():
    """`dse validate --json ... | head -1`: a BrokenPipeError traceback before (88 kB of JSON, more than a pipe
    holds, so the writer meets the closed pipe)."""
    proc = subprocess.Popen([sys.executable, "-m", "dse.cli", "validate", "--json",
                             *map(str, sorted((REPO / "tests" / "reference").glob("*.csv")))],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert (proc.wait(timeout=60), err) == (141, "")


def test_help_names_every_task(capsys):
    """Issue 24: `dse --help` said "distributed LLM training" only; a newcomer planning serving read no further."""
    import pytest as _pytest

    from dse.cli import main

    with _pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("training", "fine-tuning", "inference", "serving"):
        assert word in text, word


def test_explain_takes_every_training_knob_a_table_takes():
    """A knob a case file or dse.evaluate accepts (frame.OPTIONAL_KNOBS) can be given to explain too, so that a
    row copied from a case file explains as it validates (decode_kv_reads is an inference knob, set per stack)."""
    from dse.frame import OPTIONAL_KNOBS

    assert [k for k in OPTIONAL_KNOBS if k not in EXPLAIN_OPTIONS] == ["decode_kv_reads"]


def test_explain_of_a_case_row_equals_its_validated_prediction(capsys, tmp_path):
    """The torchtitan 8B CP-8 case (kernels, cp_exchange from its stack, recorded columns left out): explain -f
    on its cells gives the step that dse validate predicts for it."""
    import yaml

    from dse.validation.validate import RECORDED_COLUMNS

    path = REPO / "tests" / "cases" / "torchtitan_2024-12_h100.csv"
    _, rows = read_rows(path)
    row = next(r for r in rows if r["case"] == "titan-2024.12-h100-8b-8g-fsdp1-cp8-tps")
    keep = {k: v for k, v in row.items() if v != "" and k not in ("case", "metric", "measured", "source",
                                                                 *RECORDED_COLUMNS)}
    cfg = tmp_path / "row.yaml"
    cfg.write_text(yaml.safe_dump(keep), encoding="utf-8")
    payload = _explain_json(capsys, "explain", "-f", str(cfg))
    code, out, err = run(capsys, "validate", str(path), "--json")
    assert code == 0, err
    case = next(c for c in json.loads(out)["cases"] if c["case"] == row["case"])
    tokens = payload["configuration"]["tokens_per_s_per_gpu"]
    assert math.isclose(tokens, case["predicted"], rel_tol=1e-4)


def test_explain_echoes_a_fractional_moe_imbalance(capsys):
    """moe_imbalance is a real input: the configuration shows 1.3 as given (it was once cast to the integer 1),
    and the text names it beside the layout; 1.3 slows the MoE step against balanced routing."""
    argv = ("explain", "--model", "mixtral-8x7b", "--system", "h100-sxm-80gb", "--gpus", "64", "--tp", "2",
            "--ep", "8", "--global-batch", "512", "--seq-len", "4096")
    skewed = _explain_json(capsys, *argv, "--moe-imbalance", "1.3")
    balanced = _explain_json(capsys, *argv)
    assert skewed["configuration"]["moe_imbalance"] == 1.3
    assert balanced["configuration"]["moe_imbalance"] == 1.0
    assert skewed["configuration"]["step_time_s"] > balanced["configuration"]["step_time_s"]
    code, out, _ = run(capsys, *argv, "--moe-imbalance", "1.3")
    assert code == 0 and "moe_imbalance=1.3" in out
    code, _, err = run(capsys, *argv, "--moe-imbalance", "0.5")
    assert code == 2 and "'moe_imbalance'" in error_line(err, "explain")
