"""Inputs a fuzzing pass over the CLI found to end in an internal error (exit 70) or to be accepted silently: each now
exits 2 with one message naming the key, the value and what is allowed, writes nothing, or (the prefill pool's
tensor parallelism) gets the default the README states."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from dse.cli import main

REPO = Path(__file__).resolve().parents[1]
GRID = {"model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096, "global_batch": 64,
        "tp": [1, 2]}
SERVE_GRID = {"model": "llama3-8b", "system": "h100-sxm-80gb", "tp": 1, "input_len": 512, "output_len": 128}


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _listing(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_a_prefill_pool_without_prefill_tp_takes_the_decode_tp(capsys):
    """README (column prefill_tp): empty means tp.  The text report used to fail on the empty value (exit 70)
    and the model used 1."""
    base = ["explain", "--task", "serve", "--model", "llama3-70b", "--system", "h100-sxm-80gb", "--tp", "8",
            "--input-len", "1024", "--output-len", "128", "--prefill-gpus", "8"]
    assert main(base) == 0
    default = capsys.readouterr().out
    assert "prefill pool 8 GPUs in replicas of tp=8" in default
    assert main([*base, "--prefill-tp", "8"]) == 0
    assert capsys.readouterr().out == default


@pytest.mark.parametrize("text,operand", [("not tp", "'tp'"), ("tp and pp", "'tp'"), ("step_time_s or 1",
                                                                                     "'step_time_s'"),
                                          ("not mfu", "'mfu'"), ("tp <= 2 and model", "'model'")])
def test_and_or_not_of_a_bare_column_is_a_spec_error(cwd, capsys, text, operand):
    (cwd / "f.yaml").write_text(yaml.safe_dump({"name": "f", "grid": GRID, "constraints": {"filters": [text]}}))
    assert main(["run", "f.yaml", "-o", "out"]) == 2
    err = capsys.readouterr().err
    assert "constraints.filters[0]" in err and f"combine comparisons, not {operand}" in err
    assert not (cwd / "out").exists()


def test_comparisons_joined_by_and_or_not_still_filter(cwd, capsys):
    (cwd / "f.yaml").write_text(yaml.safe_dump({"name": "f", "grid": GRID,
                                                "constraints": {"filters": ["tp <= 1 or not tp == 2"]}}))
    assert main(["run", "f.yaml", "-o", "out", "-q"]) == 0


@pytest.mark.parametrize("task", [["train"], {"train": 1}, 3])
def test_a_task_that_is_not_a_name_is_a_spec_error(cwd, capsys, task):
    (cwd / "t.yaml").write_text(yaml.safe_dump({"name": "t", "task": task, "grid": GRID}))
    assert main(["run", "t.yaml", "-o", "out"]) == 2
    assert "task: value" in capsys.readouterr().err and not (cwd / "out").exists()


@pytest.mark.parametrize("field,value", [("num_hidden_layers", 0), ("num_hidden_layers", 1.5),
                                         ("num_hidden_layers", True), ("hidden_size", -1),
                                         ("n_routed_experts", math.nan), ("n_routed_experts", []),
                                         ("moe_layer_freq", {}), ("vocab_size", 10**30),
                                         ("tie_word_embeddings", 3)])
def test_a_config_field_that_is_not_a_size_exits_2_naming_it(cwd, capsys, field, value):
    config = json.loads((REPO / "tests" / "hf_configs" / "deepseek-v3.json").read_text())
    config[field] = value
    (cwd / "c.json").write_text(json.dumps(config))
    assert main(["models", "import", "c.json"]) == 2
    err = capsys.readouterr().err
    assert f"field {field!r}: value" in err and "allowed:" in err


@pytest.mark.parametrize("name,change", [("gpt-oss-120b", {"layer_types": 0}),
                                         ("gpt-oss-120b", {"intermediate_size": None}),
                                         ("llama4-scout", {"text_config": 5})])
def test_a_config_missing_or_misshaping_a_field_exits_2(cwd, capsys, name, change):
    config = json.loads((REPO / "tests" / "hf_configs" / f"{name}.json").read_text())
    for key, value in change.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    (cwd / "c.json").write_text(json.dumps(config))
    assert main(["models", "import", "c.json"]) == 2
    assert f"'{next(iter(change))}'" in capsys.readouterr().err


def test_a_config_with_a_byte_order_mark_is_read(cwd, capsys):
    config = (REPO / "tests" / "hf_configs" / "qwen3-32b.json").read_text()
    (cwd / "c.json").write_text(config, encoding="utf-8-sig")
    assert main(["models", "import", "c.json"]) == 0


def test_an_objective_column_given_twice_exits_2_and_writes_nothing(cwd, capsys):
    (cwd / "s.yaml").write_text(yaml.safe_dump({"name": "s", "grid": GRID}))
    assert main(["run", "s.yaml", "-o", "res", "-q"]) == 0
    capsys.readouterr()
    before = _listing(cwd)
    for objectives in (["step_time_s:min", "step_time_s:max"], ["step_time_s:min,gpus:min", "step_time_s:min"]):
        assert main(["pareto", "res", "--objectives", *objectives, "-o", "front.csv"]) == 2
        assert "objective column 'step_time_s' is given twice" in capsys.readouterr().err
        assert _listing(cwd) == before


def test_calibrate_on_cases_the_model_gives_no_value_for_exits_2(cwd, capsys):
    """Every row FP4 on an A100: the rows load, the model answers none of them; the fit used to print NaN MAPE
    and write the YAML."""
    lines = (REPO / "tests" / "reference" / "megatron_narayanan2021_table1.csv").read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("precision")
    import csv
    import io
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    for row in rows[1:]:
        row[col] = "fp4"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (cwd / "fp4.csv").write_text(out.getvalue())
    assert main(["calibrate", "fp4.csv", "--no-loo", "-o", "cal.yaml"]) == 2
    assert "no case the model predicts" in capsys.readouterr().err
    assert not (cwd / "cal.yaml").exists()


@pytest.mark.parametrize("grid,fragment", [
    ({**SERVE_GRID, "request_rate": 1.0e300}, "request_rate: value 1e+300 is not allowed"),
    ({**SERVE_GRID, "concurrency": 4, "think_time_s": 1.0e30}, "think_time_s: value 1e+30 is not allowed"),
    ({**SERVE_GRID, "request_rate": 2.0, "concurrency": 4}, "request_rate and concurrency are both given"),
])
def test_serve_load_axes_out_of_range_or_both_exit_2(cwd, capsys, grid, fragment):
    (cwd / "v.yaml").write_text(yaml.safe_dump({"name": "v", "task": "serve", "grid": grid}))
    assert main(["run", "v.yaml", "-o", "out"]) == 2
    assert fragment in capsys.readouterr().err and not (cwd / "out").exists()


def test_a_moe_imbalance_beyond_the_float32_range_exits_2(cwd, capsys):
    grid = {**GRID, "model": "mixtral-8x7b", "ep": 8, "gpus": 8, "tp": 1, "moe_imbalance": 1.0e300}
    (cwd / "m.yaml").write_text(yaml.safe_dump({"name": "m", "grid": grid}))
    assert main(["run", "m.yaml", "-o", "out"]) == 2
    assert "moe_imbalance: value 1e+300 is not allowed" in capsys.readouterr().err


def test_a_key_given_twice_in_a_yaml_file_exits_2_naming_it(cwd, capsys):
    """Plain YAML keeps the last of two equal keys: a spec would sweep the second value without a word."""
    (cwd / "d.yaml").write_text("name: d\ngrid: {model: llama3-8b, system: h100-sxm-80gb, gpus: 8, seq_len: 4096, "
                                "global_batch: 64, tp: 1}\nconstraints:\n  divisible: true\n  divisible: false\n")
    assert main(["run", "d.yaml", "-o", "out"]) == 2
    assert "found the key 'divisible' twice" in capsys.readouterr().err and not (cwd / "out").exists()
    (cwd / "e.yaml").write_text("model: llama3-8b\nmodel: llama3-70b\nsystem: h100-sxm-80gb\n")
    assert main(["explain", "-f", "e.yaml"]) == 2
    assert "found the key 'model' twice" in capsys.readouterr().err


@pytest.mark.parametrize("value", [".nan", "true"])
def test_explain_config_numbers_that_are_not_numbers_exit_2(cwd, capsys, value):
    """YAML's .nan read as an empty cell (the default) and true as 1."""
    (cwd / "g.yaml").write_text(f"model: llama3-8b\nsystem: h100-sxm-80gb\ntp: {value}\n")
    assert main(["explain", "-f", "g.yaml"]) == 2
    assert "key 'tp': value" in capsys.readouterr().err


@pytest.mark.parametrize("argv,fragment", [
    (["--model", "llama3-8b", "--system", "h100-sxm-80gb", "--gpus", "8", "--global-batch", "8"],
     "--seq-len is required"),
    (["--model", "llama3-8b", "--system", "h100-sxm-80gb", "--seq-len", "4096", "--global-batch", "8"],
     "--gpus or --dp is required"),
    (["--task", "serve", "--model", "llama3-8b", "--system", "h100-sxm-80gb", "--input-len", "10",
      "--output-len", "10"], "--tp is required for task 'serve'"),
])
def test_explain_names_the_missing_flag(capsys, argv, fragment):
    assert main(["explain", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Case files" not in err


@pytest.mark.parametrize("source,stack", [("megatron_narayanan2021_table1.csv", "vllm-0.11"),
                                          ("trtllm_0.10.0_serve_a100_h100.csv", "nemo-24.07")])
def test_a_case_row_with_a_stack_of_the_other_task_says_so(cwd, capsys, source, stack):
    """A case row took a training stack on a serving configuration (and the reverse) and predicted with the
    defaults without a word.  As for a release with no profile (issue 21: never refuse the whole file for a
    stack), validate predicts the row with the defaults and says why in stack_note; dse.evaluate, explain and
    specs, where the user types the stack, refuse it."""
    import csv

    import pandas as pd

    import dse
    from dse.frame import InputError

    with open(REPO / "tests" / "reference" / source, newline="") as f:
        rows = list(csv.DictReader(f))[:2]
    for row in rows:
        row["stack"] = stack
    with open(cwd / "c.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["validate", "c.csv", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert all(c["predicted"] is not None and f"stack {stack!r} is a" in c["stack_note"]
               and "predicted with the defaults" in c["stack_note"] for c in cases)
    frame = pd.DataFrame(rows).drop(columns=["case", "metric", "measured", "source"])
    with pytest.raises(InputError, match=f"value {stack!r} is not allowed on a"):
        dse.evaluate(frame)


@pytest.mark.parametrize("argv,fragment", [
    (["--task", "infer", "--model", "llama3-8b", "--system", "h100-sxm-80gb", "--tp", "1", "--batch", "8",
      "--input-len", "100", "--output-len", "100", "--offload", "optimizer"],
     "--offload (value 'optimizer') is not allowed with task 'infer': it is a setting of task train"),
    (["--task", "serve", "--model", "llama3-8b", "--system", "h100-sxm-80gb", "--tp", "1", "--input-len", "100",
      "--output-len", "100", "--recompute", "full"], "--recompute (value 'full') is not allowed with task 'serve'"),
    (["--model", "llama3-8b", "--system", "h100-sxm-80gb", "--gpus", "8", "--seq-len", "4096", "--global-batch",
      "8", "--request-rate", "2"], "--request-rate (value '2') is not allowed with task 'train'"),
])
def test_explain_refuses_a_setting_only_another_task_reads(capsys, argv, fragment):
    """Issue 21's rule for case rows (an offload value on an inference row exits 2) holds for explain's flags:
    the other task's settings were ignored without a word."""
    assert main(["explain", *argv]) == 2
    assert fragment in capsys.readouterr().err
