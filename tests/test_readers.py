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


@pytest.fixture
def read_only_dir(tmp_path, monkeypatch) -> Path:
    """A directory nobody may write (mode 555; for root, who may, os.access is told so as it would be for
    anyone else)."""
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr("dse.outputs.os.access", lambda p, mode: Path(p) != ro and real(p, mode))
    yield ro
    ro.chmod(0o755)


OBJ = ["--objectives", "step_time_s:min", "gpus:min"]


@pytest.mark.parametrize("argv,fragment", [
    (["pareto", "{res}", *OBJ, "-o", "{ro}/front.csv"], "dse pareto: error: -o {ro}/front.csv: cannot write there "
                                                          "({ro} is not writable); allowed: a writable path"),
    (["pareto", "{res}", *OBJ, "--figure", "{ro}/f.png"], "dse pareto: error: --figure {ro}/f.png: cannot write "
                                                            "there ({ro} is not writable)"),
    (["plot", "{res}", "-o", "{ro}/figs"], "dse plot: error: -o {ro}/figs: cannot write there ({ro} is not "
                                           "writable)"),
    (["plot", "{res}", "-o", "{ro}"], "dse plot: error: -o {ro}: cannot write there ({ro} is not writable)"),
    (["pareto", "{res}", *OBJ, "-o", "/proc/dse-nosuch/front.csv"], "dse pareto: error: -o /proc/dse-nosuch/front"
                                                                    ".csv: cannot write /proc/dse-nosuch: "),
    (["plot", "{res}", "-o", "/proc/dse-nosuch"], "dse plot: error: -o /proc/dse-nosuch: cannot write "),
])
def test_outputs_that_cannot_be_written_exit_2_with_one_line(small_results, read_only_dir, capsys, argv, fragment):
    """Issue 24: `dse plot -o` / `dse pareto -o` on a read-only directory ended in a traceback."""
    capsys.readouterr()
    fill = {"res": str(small_results), "ro": str(read_only_dir)}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(fragment.format(**fill)), err
    assert list(read_only_dir.iterdir()) == []


def test_a_write_that_fails_midway_leaves_no_half_file(small_results, tmp_path, capsys, monkeypatch):
    import errno

    from matplotlib.figure import Figure

    def read_only(self, fname, **kw):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(errno.EROFS, "Read-only file system", str(fname))

    monkeypatch.setattr(Figure, "savefig", read_only)
    for argv in (["pareto", str(small_results), *OBJ, "-o", str(tmp_path / "p" / "front.csv")],
                 ["plot", str(small_results), "-o", str(tmp_path / "figs")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ": Read-only file system; allowed: a writable directory" in err, err
    left = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert not [n for n in left if ".tmp-" in n or n.endswith(".png")], left


@pytest.mark.parametrize("argv", [["info", "{res}", "--top", "0"], ["info", "{res}", "--top", "-2", "--by", ""],
                                  ["pareto", "{res}", *OBJ, "--top", "0"]])
def test_top_below_one_exits_2(small_results, capsys, argv):
    """Issue 24: `dse info --top 0` printed an empty table; --top -2 printed all rows but the last two."""
    capsys.readouterr()
    assert main([a.format(res=small_results) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--top: value " in err and "allowed: an integer >= 1" in err, err


def test_pareto_does_not_replace_a_figure_it_did_not_draw(small_results, tmp_path, capsys):
    """Issue 24: `dse pareto -o front.csv` overwrote an unrelated front.png without a word."""
    from PIL import Image

    mine = tmp_path / "front.png"
    Image.new("RGB", (4, 4), "red").save(mine)
    before = mine.read_bytes()
    capsys.readouterr()
    assert main(["pareto", str(small_results), *OBJ, "-o", str(tmp_path / "front.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"would replace {mine}, which dse did not draw" in err, err
    assert "allowed: --figure PATH to draw it elsewhere" in err
    assert mine.read_bytes() == before and not (tmp_path / "front.csv").exists()
    assert main(["pareto", str(small_results), *OBJ, "-o", str(tmp_path / "front.csv"), "--figure",
                 str(tmp_path / "drawn.png")]) == 0
    assert mine.read_bytes() == before
    mine.unlink()
    for _ in range(2):  # its own figure beside the table is redrawn
        assert main(["pareto", str(small_results), *OBJ, "-o", str(tmp_path / "front.csv")]) == 0
    assert Image.open(mine).info["Software"].startswith("dse ")


@pytest.mark.parametrize("argv,fragment", [
    (["--model", "nosuch"], "--model: value 'nosuch' is not a model of {res}; allowed: llama3-8b, mixtral-8x7b"),
    (["--system", "b200"], "--system: value 'b200' is not a system of {res}; allowed: a100-sxm-80gb, h100-sxm-80gb"),
])
def test_plot_names_an_unknown_model_or_system_before_drawing(small_results, tmp_path, capsys, argv, fragment):
    """Issue 24: `dse plot --model nosuch` said "no feasible row", after drawing half the figures."""
    capsys.readouterr()
    assert main(["plot", str(small_results), "-o", str(tmp_path / "figs"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment.format(res=small_results) in err, err
    assert not (tmp_path / "figs").exists()


def test_plot_with_only_a_model_picks_a_system_that_has_it(small_results, tmp_path, capsys):
    assert main(["plot", str(small_results), "-o", str(tmp_path / "figs"), "--model", "llama3-8b"]) == 0
    assert len(list((tmp_path / "figs").glob("heatmap_tp_pp_llama3-8b_*.png"))) == 1
