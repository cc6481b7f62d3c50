"""Malformed sweep specs: ``dse run`` exits 2 with one precise message and writes nothing.

Each entry of :data:`CORPUS` is a tiny spec (one model, one system, 8 GPUs, sequence 4096, global batch 64, a
couple of axes) broken in one way, written to ``tmp_path`` as YAML text.  ``dse.cli.main(["run", ...])`` is
called in-process from an empty working directory; the contract (``dse/spec.py``, ``dse/runner.py``,
``dse/cli.py``): exit status 2, no "rows written" on stdout, exactly one ``dse run: error:`` line on stderr
naming the spec file, the key, the bad value and what is allowed, and no file or directory created anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from dse.cli import main

PREFIX = "dse run: error:"


# ---------------------------------------------------------------------------------------------------------
# Building tiny specs
# ---------------------------------------------------------------------------------------------------------


def base_grid(**axes: Any) -> dict[str, Any]:
    """The tiny valid sub-grid; keyword ``None`` removes an axis."""
    grid: dict[str, Any] = {"model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096,
                            "global_batch": 64, "tp": [1, 2], "pp": [1, 2]}
    for k, v in axes.items():
        if v is None:
            grid.pop(k, None)
        else:
            grid[k] = v
    return grid


#: A tiny valid serving sub-grid.
SERVE_GRID: dict[str, Any] = {"model": "llama3-8b", "system": "h100-sxm-80gb", "tp": 1, "input_len": 1000,
                              "output_len": 100}


def dump(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def spec_text(grid: dict[str, Any] | None = None, **top: Any) -> str:
    """YAML text of a spec: ``grid`` (default: the tiny grid) plus top-level keys (``None`` removes one)."""
    doc: dict[str, Any] = {"name": "tiny", "grid": base_grid() if grid is None else grid}
    for k, v in top.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    return dump(doc)


def with_filters(*filters: object, **constraints: Any) -> str:
    return spec_text(constraints={"filters": list(filters), **constraints})


CUSTOM = {"layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000}


@dataclass(frozen=True)
class Bad:
    """One malformed spec and what its error message must contain."""

    text: str | None  #: YAML text written to the spec file; None = the file does not exist
    key: tuple[str, ...] = ()  #: fragments naming the offending key
    value: tuple[str, ...] = ()  #: fragments showing the bad value (repr or text)
    allowed: tuple[str, ...] = ()  #: fragments of what is allowed
    args: tuple[str, ...] = ()  #: extra command-line arguments
    #: fragments that may sit on continuation lines of a multi-line message (YAML parser locations)
    elsewhere: tuple[str, ...] = ()
    one_line: bool = True  #: stderr is exactly one line
    marks: tuple[Any, ...] = field(default_factory=tuple)


CORPUS: dict[str, Bad] = {
    # ---- the file and its top level -------------------------------------------------------------------
    "invalid_yaml_syntax": Bad(
        "name: tiny\ngrid: {model: llama3-8b, tp: [1, 2\n", allowed=("not valid YAML",),
        elsewhere=("line 2",), one_line=False),
    "top_level_is_a_list": Bad(dump([base_grid()]), value=("list",), allowed=("must be a mapping", "grids")),
    "empty_file": Bad("", value=("empty spec",), allowed=("expected a mapping with keys", "grid")),
    "comments_only": Bad("# nothing here\n", value=("empty spec",), allowed=("expected a mapping with keys",)),
    "unknown_top_level_key": Bad(spec_text(sweep="fast"), key=("'sweep'",),
                                 allowed=("allowed keys:", "name, description, task, grid, grids")),
    "both_grid_and_grids": Bad(spec_text(grids=[base_grid()]), key=("'grid'", "'grids'"), value=("both",),
                               allowed=("exactly one of",)),
    "neither_grid_nor_grids": Bad(dump({"name": "tiny", "constraints": {"divisible": True}}),
                                  key=("'grid'", "'grids'"), value=("neither",), allowed=("exactly one of",)),
    "grids_not_a_list": Bad(dump({"name": "tiny", "grids": base_grid()}),
                            key=("grids",), value=("'model': 'llama3-8b'",), allowed=("a non-empty list",)),
    "grids_empty_list": Bad(dump({"name": "tiny", "grids": []}), key=("grids",), value=("[]",),
                            allowed=("a non-empty list",)),
    "grids_entry_not_a_mapping": Bad(dump({"name": "tiny", "grids": [base_grid(), 5]}), key=("grids[1]",),
                                     value=("5",), allowed=("a mapping of axis name to values",)),
    "unknown_grid_key": Bad(spec_text(base_grid(tensor_parallel=2)), key=("grid", "'tensor_parallel'"),
                            allowed=("allowed keys:", "micro_batch")),
    "missing_model": Bad(spec_text(base_grid(model=None)), key=("grid", "'model'"), value=("missing key",),
                         allowed=("required: model, system, global_batch, seq_len",)),
    "missing_seq_len": Bad(spec_text(base_grid(seq_len=None)), key=("grid", "'seq_len'"), value=("missing key",),
                           allowed=("required: model, system, global_batch, seq_len",)),
    "both_gpus_and_dp": Bad(spec_text(base_grid(dp=2)), key=("grid", "'gpus'", "'dp'"), value=("both",),
                            allowed=("exactly one of",)),
    "neither_gpus_nor_dp": Bad(spec_text(base_grid(gpus=None)), key=("grid", "'gpus'", "'dp'"), value=("neither",),
                               allowed=("exactly one of",)),
    # ---- axis values ------------------------------------------------------------------------------------
    "unknown_model": Bad(spec_text(base_grid(model="gpt5-10t")), key=("grid.model",), value=("'gpt5-10t'",),
                         allowed=("llama3-8b", "gpt3-175b")),
    "unknown_model_in_list": Bad(spec_text(base_grid(model=["llama3-8b", "llama9"])), key=("grid.model",),
                                 value=("'llama9'",), allowed=("llama3-70b",)),
    "unknown_system": Bad(spec_text(base_grid(system="tpu-v9")), key=("grid.system",), value=("'tpu-v9'",),
                          allowed=("h100-sxm-80gb", "a100-sxm-80gb")),
    "tp_not_a_number": Bad(spec_text(base_grid(tp="abc")), key=("grid.tp",), value=("'abc'",),
                           allowed=("integers >= 1",)),
    "tp_float": Bad(spec_text(base_grid(tp=2.5)), key=("grid.tp",), value=("2.5",), allowed=("integers >= 1",)),
    "tp_bool": Bad(spec_text(base_grid(tp=True)), key=("grid.tp",), value=("True",), allowed=("integers >= 1",)),
    "tp_zero": Bad(spec_text(base_grid(tp=0)), key=("grid.tp",), value=("0",), allowed=("integers >= 1",)),
    "pp_negative": Bad(spec_text(base_grid(pp=-2)), key=("grid.pp",), value=("-2",), allowed=("integers >= 1",)),
    "tp_empty_list": Bad(spec_text(base_grid(tp=[])), key=("grid.tp",), value=("[]",),
                         allowed=("a non-empty list",)),
    "tp_duplicate_values": Bad(spec_text(base_grid(tp=[2, 2])), key=("grid.tp",), value=("[2, 2]",),
                               allowed=("distinct values",)),
    "range_step_zero": Bad(spec_text(base_grid(tp={"start": 1, "stop": 8, "step": 0})), key=("grid.tp.step",),
                           value=("0",), allowed=("a positive integer",)),
    "range_start_after_stop": Bad(spec_text(base_grid(tp={"start": 8, "stop": 2})), key=("grid.tp",),
                                  value=("'start': 8", "'stop': 2"), allowed=("start <= stop",)),
    "range_unknown_key": Bad(spec_text(base_grid(tp={"start": 1, "stop": 8, "by": 2})), key=("grid.tp",),
                             value=("'by': 2",), allowed=("{start, stop, step}", "['by']")),
    "range_float_stop": Bad(spec_text(base_grid(tp={"start": 1, "stop": 8.5})), key=("grid.tp.stop",),
                            value=("8.5",), allowed=("integers >= 1",)),
    "range_step_and_pow2": Bad(spec_text(base_grid(tp={"start": 1, "stop": 8, "step": 2, "pow2": True})),
                               key=("grid.tp",), value=("'pow2': True",), allowed=("either step or pow2",)),
    "pow2_range_without_power_of_two": Bad(
        spec_text(base_grid(tp={"start": 3, "stop": 3, "pow2": True})), key=("grid.tp",),
        value=("'start': 3", "'stop': 3"), allowed=("contains a power of two",)),
    "range_too_long": Bad(spec_text(base_grid(micro_batch={"start": 1, "stop": 1_000_001})),
                          key=("grid.micro_batch",), value=("'stop': 1000001",), allowed=("at most 1,000,000",)),
    "range_of_1e15_values": Bad(
        spec_text(base_grid(micro_batch={"start": 1, "stop": 10**15})), key=("grid.micro_batch",),
        value=(f"'stop': {10**15}",), allowed=("at most 1,000,000",)),
    "sp_out_of_range": Bad(spec_text(base_grid(sp=2)), key=("grid.sp",), value=("2",), allowed=("0..1",)),
    "zero_out_of_range": Bad(spec_text(base_grid(zero=5)), key=("grid.zero",), value=("5",), allowed=("0..3",)),
    "unknown_recompute": Bad(spec_text(base_grid(recompute=["none", "partial"])), key=("grid.recompute",),
                             value=("'partial'",), allowed=("none, selective, full",)),
    "unknown_precision": Bad(spec_text(base_grid(precision="int3")), key=("grid.precision",), value=("'int3'",),
                             allowed=("fp16, bf16, fp8, fp4",)),
    "unknown_cross_entropy": Bad(spec_text(base_grid(cross_entropy=["fused", "fp64"])), key=("grid.cross_entropy",),
                                 value=("'fp64'",), allowed=("fused, fp32_copy, 16bit",)),
    "error_in_second_subgrid": Bad(dump({"name": "tiny", "grids": [base_grid(), base_grid(tp=[4, 3.0])]}),
                                   key=("grids[1].tp",), value=("3.0",), allowed=("integers >= 1",)),
    # ---- name, task ---------------------------------------------------------------------------------------
    "task_unknown": Bad(spec_text(task="finetune"), key=("task",), value=("'finetune'",),
                        allowed=("train, infer, serve",)),
    "training_key_in_inference_grid": Bad(spec_text(task="infer"), key=("grid",),
                                          allowed=("task 'infer'", "batch, input_len, output_len")),
    "training_stack_on_serve_spec": Bad(spec_text(SERVE_GRID | {"stack": "megatron-lm-2021"}, task="serve"),
                                        key=("grid.stack",), value=("'megatron-lm-2021'", "a training stack"),
                                        allowed=("tensorrt-llm-1.0, tensorrt-llm-1.1, vllm-0.11",)),
    "serving_stack_on_train_spec": Bad(spec_text(base_grid(stack=["nemo-24.07", "vllm-0.11"])), key=("grid.stack",),
                                       value=("'vllm-0.11'", "an inference stack"),
                                       allowed=("megatron-lm-2021", "nemo-24.07")),
    "prefill_tp_without_prefill_gpus": Bad(spec_text(SERVE_GRID | {"prefill_tp": [1, 2]}, task="serve"),
                                           key=("grid.prefill_tp", "grid.prefill_gpus"),
                                           allowed=("prefill_gpus with it (disaggregated prefill), or neither",)),
    "name_escapes_results": Bad(spec_text(name="../x"), key=("name",), value=("'../x'",),
                                allowed=("letters, digits",)),
    "description_not_text": Bad(spec_text(description=["a", "b"]), key=("description",), value=("['a', 'b']",),
                                allowed=("text",)),
    # ---- constraints ----------------------------------------------------------------------------------------
    "constraints_not_a_mapping": Bad(spec_text(constraints=["divisible"]), key=("constraints",),
                                     value=("['divisible']",), allowed=("a mapping with keys", "filters")),
    "constraints_empty_list": Bad(spec_text(constraints=[]), key=("constraints",), value=("[]",),
                                  allowed=("a mapping with keys",)),
    "filter_huge_exponent": Bad(with_filters("tp > 9**9**9"), key=("constraints.filters[0]",),
                                value=("'tp > 9**9**9'",), allowed=("an exponent must be a number between",)),
    "filter_number_beyond_float": Bad(with_filters("tp < " + "9" * 1900), key=("constraints.filters[0]",),
                                      value=("1,900 digits",), allowed=("numbers of magnitude at most 1.798e+308",)),
    "constraints_unknown_key": Bad(spec_text(constraints={"fits": True}), key=("constraints", "'fits'"),
                                   allowed=("divisible, tp_within_scaleup, filters",)),
    "divisible_not_a_bool": Bad(spec_text(constraints={"divisible": "yes please"}), key=("constraints.divisible",),
                                value=("'yes please'",), allowed=("true or false",)),
    "filters_not_a_list": Bad(spec_text(constraints={"filters": {"tp": 2}}), key=("constraints.filters",),
                              value=("{'tp': 2}",), allowed=("a list of expression strings",)),
    "filter_not_a_string": Bad(with_filters(3), key=("constraints.filters[0]",), value=("3",),
                               allowed=("a non-empty expression string",)),
    "filter_syntax_error": Bad(with_filters("tp <= (8"), key=("constraints.filters[0]",), value=("'tp <= (8'",),
                               allowed=("not valid syntax", "comparisons")),
    "filter_import_call": Bad(with_filters("__import__('os').system('ls')"), key=("constraints.filters[0]",),
                              value=("\"__import__('os').system('ls')\"",), allowed=("'Call'", "not allowed")),
    "filter_open_call": Bad(with_filters("tp > 1", "open('x')"), key=("constraints.filters[1]",),
                            value=("\"open('x')\"",), allowed=("'Call'", "not allowed")),
    "filter_dunder_name": Bad(with_filters("__builtins__ == 1"), key=("constraints.filters[0]",),
                              value=("'__builtins__'",), allowed=("not a column", "step_time_s")),
    "filter_attribute": Bad(with_filters("tp.__class__ == 1"), key=("constraints.filters[0]",),
                            value=("'tp.__class__ == 1'",), allowed=("'Attribute'", "not allowed")),
    "filter_unknown_column": Bad(with_filters("tensor_parallel <= 4"), key=("constraints.filters[0]",),
                                 value=("'tensor_parallel <= 4'", "'tensor_parallel'"),
                                 allowed=("not a column", "mem_total_bytes")),
    "filter_unknown_category": Bad(with_filters("recompute == 'partial'"), key=("constraints.filters[0]",),
                                   value=("\"recompute == 'partial'\"", "'partial'"),
                                   allowed=("none, selective, full",)),
    "filter_quoted_name_on_numeric_column": Bad(with_filters("tp == 'full'"), key=("constraints.filters[0]",),
                                                value=("'full'",), allowed=("only categorical columns",)),
    "filter_leaves_no_point": Bad(with_filters("tp > 64"), key=("constraints",), value=("'tp > 64'",),
                                  allowed=("all fail the constraints", "at least one point")),
    # ---- limits ---------------------------------------------------------------------------------------------
    "grid_over_max_points": Bad(spec_text(base_grid(micro_batch=[1, 2, 4])), args=("--max-points", "10"),
                                value=("12 points",), key=("--max-points",), allowed=("a smaller grid",)),
    # ---- custom models -------------------------------------------------------------------------------------
    "custom_model_missing_hidden": Bad(
        spec_text(base_grid(model="tiny-lm"), models={"tiny-lm": {k: v for k, v in CUSTOM.items() if k != "hidden"}}),
        key=("models.tiny-lm", "'hidden'"), value=("missing key",),
        allowed=("required: layers, hidden, heads, vocab",)),
    "custom_model_hidden_not_multiple_of_heads": Bad(
        spec_text(base_grid(model="tiny-lm"), models={"tiny-lm": {**CUSTOM, "hidden": 1000, "heads": 48}}),
        key=("models.tiny-lm.hidden",), value=("1000",), allowed=("a multiple of heads (48)",)),
    "custom_model_unknown_key": Bad(
        spec_text(base_grid(model="tiny-lm"), models={"tiny-lm": {**CUSTOM, "depth": 4}}),
        key=("models.tiny-lm", "'depth'"), allowed=("allowed keys: layers, hidden, heads",)),
    "custom_model_shadows_catalog": Bad(
        spec_text(models={"llama3-8b": CUSTOM}), key=("models.llama3-8b",), value=("'llama3-8b'",),
        allowed=("not already in the catalog",)),
    # ---- the file itself -------------------------------------------------------------------------------------
    "spec_file_does_not_exist": Bad(None, allowed=("no such file",)),
}


# ---------------------------------------------------------------------------------------------------------
# Running dse run in-process
# ---------------------------------------------------------------------------------------------------------


def listing(root: Path) -> set[str]:
    """Every file and directory under ``root`` (relative paths)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory inside tmp_path (so results/<name> would show up in the listing)."""
    d = tmp_path / "cwd"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


def dse_run(capsys: pytest.CaptureFixture[str], spec: Path, out: Path, *args: str) -> tuple[int, str, str]:
    code = main(["run", str(spec), "-o", str(out), "-q", *args])
    stdout, stderr = capsys.readouterr()
    return code, stdout, stderr


def the_error_line(stderr: str, one_line: bool = True) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(PREFIX)]
    assert len(errors) == 1, f"expected exactly one {PREFIX!r} line, got:\n{stderr}"
    if one_line:
        assert lines == errors, f"expected the message on one line, got:\n{stderr}"
    return errors[0]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 34


@pytest.mark.parametrize("name", [pytest.param(n, marks=b.marks, id=n) for n, b in CORPUS.items()])
def test_malformed_spec_exits_2_with_one_precise_message_and_writes_nothing(name, tmp_path, cwd, capsys):
    bad = CORPUS[name]
    spec = tmp_path / f"{name}.yaml"
    if bad.text is not None:
        spec.write_text(bad.text, encoding="utf-8")
    out = tmp_path / "out" / "x"
    before = listing(tmp_path)

    code, stdout, stderr = dse_run(capsys, spec, out, *bad.args)

    assert code == 2, f"exit status {code}; stderr:\n{stderr}"
    assert "rows written" not in stdout
    msg = the_error_line(stderr, bad.one_line)
    assert str(spec) in msg, f"message does not name the spec file: {msg}"
    for kind, fragments in (("key", bad.key), ("value", bad.value), ("allowed", bad.allowed)):
        for fragment in fragments:
            assert fragment in msg, f"message lacks the {kind} {fragment!r}: {msg}"
    for fragment in bad.elsewhere:
        assert fragment in stderr, f"stderr lacks {fragment!r}:\n{stderr}"
    assert listing(tmp_path) == before, "dse run created files for a malformed spec"
    assert not out.exists() and not out.parent.exists()
    assert listing(cwd) == set()


def test_unbroken_tiny_specs_run_cleanly(tmp_path, cwd, capsys):
    """Control: the unbroken tiny spec (and its custom-model variant) run cleanly with the same command."""
    for i, text in enumerate((spec_text(), spec_text(base_grid(model="tiny-lm"), models={"tiny-lm": CUSTOM}))):
        spec = tmp_path / f"good{i}.yaml"
        spec.write_text(text, encoding="utf-8")
        code, stdout, stderr = dse_run(capsys, spec, tmp_path / f"ok{i}", "--jobs", "1")
        assert (code, stderr) == (0, ""), stderr
        assert "rows written" in stdout


# ---------------------------------------------------------------------------------------------------------
# A valid run, and --resume
# ---------------------------------------------------------------------------------------------------------


def test_valid_spec_writes_spec_file_and_parts_then_refuses_to_overwrite_without_resume(tmp_path, cwd, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(spec_text(base_grid(micro_batch=[1, 2]), constraints={"filters": ["tp * pp <= 2"]}),
                    encoding="utf-8")
    out = tmp_path / "out" / "x"

    code, stdout, stderr = dse_run(capsys, spec, out, "--jobs", "1", "--chunk-size", "3")
    assert (code, stderr) == (0, ""), stderr
    assert "rows written" in stdout
    files = sorted(p.name for p in out.iterdir())
    assert "_spec.yaml" in files
    parts = [f for f in files if f.startswith("part-") and f.endswith(".parquet")]
    assert parts == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]  # 8 points, 3 a part
    assert set(files) == {"_spec.yaml", "_complete.yaml", ".dse.lock", *parts}, "no temporary files are left behind"
    doc = yaml.safe_load((out / "_spec.yaml").read_text(encoding="utf-8"))
    assert doc["points"] == 8 and doc["part_size"] == 3 and doc["parts"] == 3
    assert doc["spec"]["constraints"]["filters"] == ["tp * pp <= 2"]
    rows = [r for p in parts for r in pq.read_table(out / p).to_pylist()]
    assert {(r["tp"], r["pp"]) for r in rows} == {(1, 1), (1, 2), (2, 1)}, "the filter was applied"
    assert all(r["tp"] * r["pp"] * r["dp"] == 8 for r in rows)
    assert listing(cwd) == set(), "with -o nothing goes to results/ in the working directory"
    listing_after_first = listing(tmp_path)

    code, stdout, stderr = dse_run(capsys, spec, out, "--jobs", "1", "--chunk-size", "3")
    assert code == 2
    assert "rows written" not in stdout
    msg = the_error_line(stderr)
    assert str(out) in msg and "--resume" in msg and "already holds results" in msg
    assert listing(tmp_path) == listing_after_first

    (out / "part-00001.parquet").unlink()
    code, stdout, stderr = dse_run(capsys, spec, out, "--jobs", "1", "--chunk-size", "3", "--resume")
    assert (code, stderr) == (0, ""), stderr
    assert "1 part(s)" in stdout and "3 points evaluated" in stdout
    assert listing(tmp_path) == listing_after_first

    code, stdout, stderr = dse_run(capsys, spec, out, "--jobs", "1", "--chunk-size", "3", "--resume")
    assert (code, stderr) == (0, ""), stderr
    assert "0 part(s)" in stdout


def test_resume_with_a_different_spec_exits_2(tmp_path, cwd, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(spec_text(), encoding="utf-8")
    out = tmp_path / "out" / "x"
    assert dse_run(capsys, spec, out, "--jobs", "1")[0] == 0
    spec.write_text(spec_text(base_grid(tp=[1, 2, 4])), encoding="utf-8")
    before = listing(tmp_path)
    code, _, stderr = dse_run(capsys, spec, out, "--jobs", "1", "--resume")
    assert code == 2
    msg = the_error_line(stderr)
    assert str(out) in msg and "different spec" in msg
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------------------------------------
# Bugs found while writing the corpus
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["tp >= 1 and pp == 1", "tp == 2 or pp == 2", "not tp > 1", "1 <= tp < 2"])
def test_filter_with_boolean_operators_runs(expression, tmp_path, cwd, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(with_filters(expression), encoding="utf-8")
    code, stdout, stderr = dse_run(capsys, spec, tmp_path / "out" / "x", "--jobs", "1")
    assert (code, stderr) == (0, "")
    assert "rows written" in stdout


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_grid_without_pp_is_refused_or_defaults_to_one(tmp_path, cwd, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(spec_text(base_grid(pp=None), constraints={"divisible": False}), encoding="utf-8")
    out = tmp_path / "out" / "x"
    code, _, stderr = dse_run(capsys, spec, out, "--jobs", "1")
    if code == 2:
        assert "'pp'" in the_error_line(stderr) or "grid.pp" in stderr
        assert not out.exists()
        return
    assert code == 0
    rows = [r for p in sorted(out.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert rows and all(r["pp"] == 1 and r["dp"] >= 1 for r in rows)
    assert all(r["infeasible_reason"] != "nonpositive_size" for r in rows)

