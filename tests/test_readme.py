"""The README's examples are real: the spec example resolves, the documented defaults match the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dse.defaults import DEFAULTS_DOC
from dse.spec import resolve_spec

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_spec_example_resolves():
    section = README[README.index("### Spec format"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    spec = resolve_spec(yaml.safe_load(block), "README.md")
    assert spec.size > 0 and len(spec.grids) == 2 and len(spec.filters) == 2


def test_every_default_is_documented():
    table = README[README.index("## Inputs, defaults"):README.index("## The cost model")]
    for key in DEFAULTS_DOC:
        name = key.split(" ")[0].rstrip(",")
        assert f"`{name}`" in table, name


def _section(start: str, end: str) -> str:
    return README[README.index(start):README.index(end, README.index(start))]


def test_output_tables_name_every_output_and_nothing_else():
    """Issue 11: the README's output tables match the kernels' output columns."""
    from dse.cost.inference import INFER_METRICS
    from dse.cost.serving import SERVE_METRICS
    from dse.cost.training import TRAIN_METRICS
    from dse.sweep import COST_COLUMN

    table = _section("## Outputs (per configuration)", "## Hardware and efficiency constants")
    named = set(re.findall(r"`([a-z0-9_]+)`", table))
    for col in (*TRAIN_METRICS, *INFER_METRICS, *SERVE_METRICS, COST_COLUMN, "fits", "infeasible_reason", "limit"):
        assert col in named, col
    unknown = {c for c in named if c.endswith(("_s", "_ms", "_bytes", "_j", "_usd"))} - {
        *TRAIN_METRICS, *INFER_METRICS, *SERVE_METRICS, COST_COLUMN}
    assert not unknown, unknown


def test_dataset_columns_section_names_every_written_column():
    from dse.spec import resolve_spec
    from dse.sweep import schema

    section = _section("### Dataset columns", "## Pareto fronts")
    named = set(re.findall(r"`([a-z0-9_]+)`", section))
    for task, grid in (("train", {"model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096,
                                  "global_batch": 64}),
                       ("infer", {"model": "llama3-8b", "system": "h100-sxm-80gb", "batch": 1, "input_len": 8,
                                  "output_len": 8})):
        spec = resolve_spec({"name": "x", "task": task, "grid": grid}, "<readme>")
        inputs = [f.name for f in schema(spec)]
        outputs_named_elsewhere = set(re.findall(r"`([a-z0-9_]+)`", _section("## Outputs", "## Hardware")))
        for col in inputs:
            assert col in named or col in outputs_named_elsewhere, (task, col)


def test_every_infeasible_reason_is_documented():
    from dse.codes import REASONS

    section = _section("### Infeasible reasons", "## Pareto fronts")
    for reason in REASONS[1:]:
        assert f"`{reason}`" in section, reason


def test_case_file_section_matches_the_reader():
    from dse.frame import OPTIONAL_KNOBS
    from dse.stacks import STACKS
    from dse.validation.validate import METRICS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TASKS

    section = _section("## Case files", "## Validation")
    named = set(re.findall(r"`([a-z0-9_.\-]+)`", section))
    # issue 24: every column the reader accepts, the knobs included (prefill_gpus, decode_kv_reads, ... were not)
    for col in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *OPTIONAL_KNOBS, *METRICS, *TASKS, *STACKS):
        assert col in named, col
    assert not [c for c in named if c.startswith(("nemo-", "megatron-", "tensorrt-", "deepspeed-")) and c not in STACKS]


def test_python_example_runs_in_a_fresh_clone(monkeypatch):
    """The README's Python examples (dse.evaluate, validate_table) read files of this repository only."""
    section = _section("## Python API", "## Inputs, defaults and optional knobs")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    for block in blocks:
        assert "shared/" not in block
        exec(compile(block, "README.md", "exec"), {})


def test_stack_profile_table_matches_the_profiles():
    from dse.stacks import STACKS, profile

    section = _section("## Software stacks", "*Serving engines*")  # the training table
    keys = ("attention", "tp_overlap", "dp_overlap", "pp_overlap", "sp", "recompute", "zero")
    for stack in STACKS:
        pr = profile(stack)
        line = next((ln for ln in section.splitlines() if ln.startswith(f"| `{stack}` |")), None)
        if not any(k in pr for k in keys):
            assert line is None, stack
            continue
        assert line == "| `{}` | {} |".format(stack, " | ".join(pr.get(k, "-") for k in keys)), stack


def test_serving_profile_table_matches_the_profiles():
    """Issue 22: every stack that sets an engine default (other than cuda_graphs, which training stacks record)
    has its row, in the order of STACKS, with '-' where the profile leaves the model's default."""
    from dse.stacks import STACKS, profile

    section = _section("## Software stacks", "## Case files")
    header = next(ln for ln in section.splitlines() if ln.startswith("| stack | max_batch"))
    keys = [k.strip() for k in header.strip("|").split("|")][1:]
    expected = ["| `{}` | {} |".format(stack, " | ".join(profile(stack).get(k, "-") for k in keys))
                for stack in STACKS if any(k in profile(stack) for k in keys if k != "cuda_graphs")]
    lines = section.splitlines()
    start = lines.index(header) + 3  # header, rule, generated-table comment
    assert lines[start:start + len(expected)] == expected
    assert not lines[start + len(expected)].startswith("| `")


def test_speed_table_is_the_recorded_bench_output():
    """The README's speed table is what ``make bench`` last recorded (dse/bench/figures.json), not prose."""
    from dse.bench.kernels import BEGIN, END, ORDER, load_records, render_table

    records = load_records()
    keys = {r["key"] for r in records}
    assert set(ORDER) <= keys, f"make bench has not recorded {sorted(set(ORDER) - keys)}"
    block = README.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == render_table(records)


def test_save_records_regenerates_only_the_marked_block(tmp_path):
    from dse.bench.kernels import BEGIN, END, record, save_records

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\nrest\n", encoding="utf-8")
    figures = tmp_path / "f.json"
    save_records([record("a", "bench a", "1 s")], figures, readme)
    save_records([record("b", "bench b", "2 s"), record("a", "bench a", "3 s")], figures, readme)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith(f"{END}\nrest\n")
    assert "| bench a | 3 s |" in text and "| bench b | 2 s |" in text and "old" not in text


def test_axis_and_column_tables_are_generated_from_the_code():
    """Issue 24: the README's axis list omitted finetune, lora_rank, offload, the technology axes, every serving
    axis, ...; its column list omitted max_num_tokens, request_rate, ... and called nullable columns int32 where
    pandas reads float64.  Both are now rendered from dse.spec.TASKS and dse.sweep.schema (python -m dse.docs)."""
    from dse import docs
    from dse.spec import TASKS

    assert docs.render(README) == README, "run: python -m dse.docs"
    axes = _section(docs.BEGIN_AXES, docs.END)
    for keys in TASKS.values():
        for name in keys.grid_keys:
            assert f"| `{name}` |" in axes, name
    assert "float64 when the part holds a null" in _section(docs.BEGIN_COLUMNS, docs.END)


def test_int32_columns_with_a_null_read_as_float64_as_documented(tmp_path):
    """The columns table's pandas dtypes are what pd.read_parquet gives: a nullable int32 column reads float64
    only where a null is written (layers_last_stage here), int32 otherwise, dictionaries as category."""
    import pandas as pd
    import yaml

    from dse.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "t", "task": "train", "grid": {
        "model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096, "global_batch": 64,
        "pp": 2, "layers_first_stage": 15}, "constraints": {"divisible": False}}))
    assert main(["run", str(spec), "-o", str(tmp_path / "d"), "-q"]) == 0
    df = pd.read_parquet(tmp_path / "d")
    assert str(df["layers_first_stage"].dtype) == "int32" and str(df["layers_last_stage"].dtype) == "float64"
    assert str(df["model"].dtype) == "category" and str(df["sp"].dtype) == "int8"


def test_shipped_spaces_paragraph_names_every_space():
    """Issue 24: "Shipped spaces" named 5 of the 10 files in spaces/."""
    start = README.index("Shipped spaces:")
    paragraph = README[start:README.index("\n\n", start)]
    for path in (Path(__file__).parents[1] / "spaces").glob("*.yaml"):
        assert f"`{path.name}`" in paragraph, path.name
