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
