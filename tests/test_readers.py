"""Every command that reads results (dse info, dse pareto, dse plot) works on a dataset of each task."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dse.cli import main
from tests.test_runner import SMALL

REPO = Path(__file__).resolve().parents[1]
OBJECTIVES = {"train": ["step_time_s:min", "gpus:min"],
              "infer": ["output_tokens_per_s_per_gpu:max", "ttft_s:min"],
              "serve": ["tokens_per_s_per_user:max", "output_tokens_per_s_per_gpu:max"]}


@pytest.mark.parametrize("task", ["train", "infer", "serve"])
def test_info_pareto_plot_read_a_dataset_of_each_task(tmp_path, capsys, task):
    if task == "train":
        spec = tmp_path / "small.yaml"
        spec.write_text(yaml.safe_dump(SMALL))
    else:
        spec = REPO / "spaces" / ("llama2-70b-inference.yaml" if task == "infer" else "serve-llama3.3-70b.yaml")
    out = tmp_path / "results"
    assert main(["run", str(spec), "-o", str(out), "-q", "--jobs", "1"]) == 0
    assert main(["info", str(out)]) == 0
    assert main(["pareto", str(out), "--objectives", *OBJECTIVES[task], "-o", str(tmp_path / "front.csv")]) == 0
    assert main(["plot", str(out), "-o", str(tmp_path / "figures")]) == 0
    assert list((tmp_path / "figures").glob("*.png"))
    capsys.readouterr()


@pytest.fixture(scope="module")
def small_results(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("readers")
    spec = d / "small.yaml"
    spec.write_text(yaml.safe_dump(SMALL))
    assert main(["run", str(spec), "-o", str(d / "results"), "-q", "--jobs", "1"]) == 0
    return d / "results"


@pytest.mark.parametrize("column", ["gpus", "tp", "mem_total_bytes"])
def test_info_ranks_by_an_input_column_or_a_shown_one(small_results, capsys, column):
    """Issue 24: `dse info --metric gpus` ("fewest GPUs") failed with "column label 'gpus' is not unique"."""
    capsys.readouterr()
    assert main(["info", str(small_results), "--metric", column, "--by", "", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"best 3 by {column} (lowest first):" in out
    table = out[out.index("(lowest first):"):].splitlines()[1:]
    header = table[0].split()
    name = "mem_GB" if column == "mem_total_bytes" else column
    assert header.count(name) == 1, header
    values = [float(line.split()[header.index(name)]) for line in table[1:]]
    assert values == sorted(values)


@pytest.mark.parametrize("column,fragment", [("model", "column 'model' of"), ("fits", "column 'fits' of"),
                                             ("nope", "value 'nope' is not a column of")])
def test_info_metric_that_cannot_rank_exits_2_naming_the_allowed_columns(small_results, capsys, column, fragment):
    assert main(["info", str(small_results), "--metric", column]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "allowed: a metric (step_time_s" in err
    assert "numeric input (gpus, tp," in err
