"""Command line: ``dse explain``, ``dse validate``, ``dse calibrate``, ``dse run``, ``dse info``, ``dse models``,
``dse systems``.

Exit status: 0 success; 1 a validated file is over ``--max-mape``; 2 bad input or a failed read or write (the
message names the file, the row or key, the bad value and what is allowed); 70 an internal error (one line;
``DSE_TRACEBACK=1`` shows the traceback); 130 interrupted by Ctrl-C (128 + SIGINT, as a shell reports it; a
run keeps its complete parts and names the ``--resume`` command); 141 the reader of the output closed the pipe
(``| head``).  No traceback reaches the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dse import __version__, codes
from dse.cost.architecture import ARCHITECTURE_CATEGORIES, ARCHITECTURE_COLUMNS
from dse.frame import CATEGORICAL, InputError, MissingColumn, read_yaml
from dse.spec import SpecError

#: ``dse explain`` options: schema column → type shown in --help.
EXPLAIN_OPTIONS: dict[str, str] = {
    "task": "train|infer|serve",
    "model": "catalog name (see `dse models`); or give the dimensions below",
    "layers": "int", "hidden": "int", "heads": "int", "kv_heads": "int", "ffn_hidden": "int", "vocab": "int",
    "mlp": "gelu|swiglu|relu2", "experts": "int", "top_k": "int",
    "system": "catalog name (see `dse systems`)",
    "gpus": "int", "tp": "int", "pp": "int", "dp": "int", "cp": "int", "ep": "int", "vpp": "int", "sp": "0|1",
    "micro_batch": "int", "global_batch": "int", "seq_len": "int",
    "recompute": "none|selective|full", "zero": "0..3", "precision": "fp16|bf16|fp8|fp4|int8|int4",
    "attention": "flash|standard", "tp_overlap": "none|backward|full", "dp_overlap": "0|1", "pp_overlap": "0|1",
    "tied_embeddings": "0|1",
    "finetune": "full|lora|qlora", "lora_rank": "int", "lora_targets": "all|attention|qv",
    "offload": "none|optimizer|all", "zero3_fetch": "prefetch|on_demand", "zero_with_pp": "refuse|gather_once",
    "zero3_collectives": "flat|rank_lists (ZeRO-3 collectives on one buffer, or on a list of one tensor per rank)",
    "optimizer": "|".join(codes.OPTIMIZER) + " (train: what the optimizer keeps per parameter)",
    "kernels": "|".join(codes.KERNELS) + " (train: fused kernels, or eager HF modules, one kernel per op)",
    "memory_report": "|".join(codes.MEMORY_REPORT) + " (train: the unit and counter of peak_memory_gb)",
    "adapter_precision": "|".join(codes.ADAPTER_PRECISION) + " (train: the LoRA adapters' dtype)",
    "dp_reduce": "|".join(codes.DP_REDUCE) + " (train: gradient reduction)",
    "cp_exchange": "ring|allgather", "moe_gemm": "per_expert|grouped",
    "moe_imbalance": "number >= 1 (train: the busiest expert GPU's routed tokens over the mean; empty: 1)",
    "ep_dispatch": "alltoall|deepep",
    "ep_overlap": "none|1f1b (train: Megatron's combined 1F1B hides one micro-batch's expert all-to-alls under "
                  "another's compute)",
    "cross_entropy": "fused|fp32_copy|16bit (train: what the loss holds per logit at the backward's start)",
    "pipeline_split": "even|embedding_loss", "layers_first_stage": "int", "layers_last_stage": "int",
    "doc_len": "int (mean document length of packed sequences)",
    "stack": "software stack (README: Case files): its profile fills the knobs not given",
    "batch": "int", "input_len": "int", "output_len": "int", "max_num_tokens": "int", "prefill_gpus": "int",
    "prefill_tp": "int",
    "request_rate": "requests/s offered (serve; empty: maximum load)",
    "kv_precision": "auto|fp16|bf16|fp8|int8|int4",
    "concurrency": "int (serve: clients of a closed loop, or requests of a burst)",
    "think_time_s": "seconds (serve: a closed loop's think time between requests; empty: 0)",
    "arrival": "poisson|closed|burst (serve; empty: poisson with a request rate, closed with concurrency)",
    "etp": "int (expert tensor parallel; default tp)",
    "spec_tokens": "int (serve: draft tokens per decode step)",
    "spec_acceptance": "number in (0, 1] (serve: the drafter's acceptance rate; empty: 0.85 with mtp)",
    "spec_method": "mtp|eagle (serve: the drafter; empty: mtp, the model's MTP modules)",
    **{k: "|".join(ARCHITECTURE_CATEGORIES[k]) if k in ARCHITECTURE_CATEGORIES
       else "int (README: Model architecture columns)" for k in ARCHITECTURE_COLUMNS},
}


#: ``dse explain`` options that take a real number (the rest of the numeric ones take integers).
REAL_OPTIONS = ("request_rate", "think_time_s", "spec_acceptance", "moe_imbalance")


#: Exit status after Ctrl-C (128 + SIGINT), when the reader of the output went away (128 + SIGPIPE), and after
#: an internal error (EX_SOFTWARE of sysexits.h).
INTERRUPTED = 130
BROKEN_PIPE = 141
INTERNAL_ERROR = 70


class CliError(Exception):
    """Bad command-line input (exit status 2)."""


class Count(int):
    """An integer option that prints as the user wrote it (``1e60``), so range errors quote the input."""

    text: str

    def __new__(cls, value: int, text: str) -> Count:
        obj = super().__new__(cls, value)
        obj.text = text
        return obj

    def __format__(self, spec: str) -> str:
        return self.text if not spec else super().__format__(spec)

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _count(text: str) -> int:
    """A count given as 1000000, 1e6 or 10**6 (argparse type; ranges are checked by the command)."""
    t = text.strip().replace("_", "")
    try:
        if "**" in t:
            base, exp = t.split("**", 1)
            if len(exp) > 3:
                raise ValueError
            return Count(int(base) ** int(exp), text)
        if "e" in t.lower():
            value = float(t)
            if not value.is_integer():
                raise ValueError
            return Count(int(value), text)
        return Count(int(t), text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"value {text!r} is not allowed; allowed: a positive integer "
                                         "(e.g. 262144, 1e6, 10**6)") from None


def _read_config(path: str) -> dict[str, object]:
    data = read_yaml(path, "configuration keys")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of configuration keys, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in EXPLAIN_OPTIONS:
            raise CliError(f"{path}: key {key!r} is not allowed; allowed keys: {', '.join(EXPLAIN_OPTIONS)}")
        if isinstance(value, (list, dict)):
            raise CliError(f"{path}: key {key!r}: value {value!r} is not allowed; allowed: one {EXPLAIN_OPTIONS[k]}")
        numeric = EXPLAIN_OPTIONS[k].startswith(("int", "0|1", "0..3")) or k in REAL_OPTIONS
        if numeric and (isinstance(value, bool) or isinstance(value, float) and not math.isfinite(value)):
            # YAML's true/false and .nan would pass as 1/0 and as an empty cell (the default)
            raise CliError(f"{path}: key {key!r}: value {value!r} is not allowed; allowed: {EXPLAIN_OPTIONS[k]}")
        out[k] = value
    return out


def cmd_explain(args: argparse.Namespace) -> int:
    from dse.explain import explain_row, explain_table, format_explain, format_explain_infer, inference_op_table

    config: dict[str, object] = _read_config(args.config) if args.config else {}
    origin = {k: f"{args.config}: key {k!r}" for k in config}
    for key in EXPLAIN_OPTIONS:
        value = getattr(args, key)
        if value is not None:
            config[key] = value
            origin[key] = f"--{key.replace('_', '-')}"
    if "system" not in config:
        raise CliError("explain: --system is required (see `dse systems`)")
    if "model" not in config and "layers" not in config:
        raise CliError("explain: give --model NAME (see `dse models`) or the dimensions --layers --hidden --heads "
                       "--vocab ...")
    if "model" in config and "layers" not in config:
        from dse.models.catalog import model_names

        if str(config["model"]).strip().lower() not in model_names():
            raise CliError(f"explain: {origin['model']} {config['model']!r} is not in the catalog; known models: "
                           f"{', '.join(model_names())}")
    for key in CATEGORICAL:
        if key in config and str(config[key]).strip().lower() not in CATEGORICAL[key]:
            raise CliError(f"explain: {origin[key]} {config[key]!r} is not allowed; allowed: "
                           f"{', '.join(CATEGORICAL[key])}")
    task = str(config.get("task", "train")).strip().lower()
    if task not in ("train", "infer", "serve"):
        raise CliError(f"explain: {origin['task']} {config['task']!r} is not allowed; allowed: train, infer, serve")
    config["task"] = task
    _refuse_keys_of_other_tasks(config, origin, task)
    _check_serving_keys(config, origin, task)
    overrides = _calibration(args)
    try:
        row = explain_row(config, overrides)
    except MissingColumn as exc:  # a missing input is a missing flag here, not a case-file column
        flags = " or ".join(f"--{c.replace('_', '-')}" for c in exc.columns)
        raise CliError(f"explain: {flags} is required" + (f" for task {exc.task!r}" if exc.task else "")
                       + " (or its key in -f)") from exc
    _refuse_what_does_not_divide(row, "dp" in config)
    if task != "train" and args.json:
        from dse.explain import one_output_token

        if one_output_token(row):  # one output token: no time per output token (null in JSON)
            row = row.copy()
            row[[c for c in ("tpot_s", "tokens_per_s_per_user") if c in row.index]] = np.nan
    if task == "serve":
        from dse.explain import format_explain_serve

        if args.json:
            print(json.dumps({"configuration_and_outputs": {k: _jsonable(row[k]) for k in row.index}}, indent=2))
        else:
            print(format_explain_serve(row))
        return 0
    if task == "infer":
        ops = inference_op_table(config, overrides) if np.isfinite(float(row["tpot_s"])) else pd.DataFrame()
        if args.json:
            print(json.dumps({"configuration_and_outputs": {k: _jsonable(row[k]) for k in row.index},
                              "ops": ops.to_dict(orient="records")}, indent=2))
        else:
            print(format_explain_infer(row, ops))
        return 0
    if args.json:
        tables = explain_table(row) if np.isfinite(float(row["step_time_s"])) else {}
        payload = {
            "configuration": {k: _jsonable(row[k]) for k in row.index if not k.startswith(("time_", "mem_",
                                                                                           "layer_", "module_",
                                                                                           "detail_"))},
            "time": {k: _jsonable(row[k]) for k in row.index if k.startswith("time_")},
            "layer": {k: _jsonable(row[k]) for k in row.index if k.startswith("layer_")},
            "module": {k: _jsonable(row[k]) for k in row.index if k.startswith("module_")},
            "detail": {k: _jsonable(row[k]) for k in row.index if k.startswith("detail_")},
            "memory": {k: _jsonable(row[k]) for k in row.index if k.startswith("mem_")},
            "tables": {k: v.to_dict(orient="records") for k, v in tables.items()},
        }
        print(json.dumps(payload, indent=2))
    else:
        print(format_explain(row))
    return 0


def _refuse_keys_of_other_tasks(config: dict[str, object], origin: dict[str, str], task: str) -> None:
    """A setting only another task's kernel reads (``--offload`` with ``--task infer``, ``--request-rate`` with
    training) would be ignored without a word: exit 2 naming it, its value and the task that reads it."""
    from dse.cost.inference import INFER_INPUTS
    from dse.cost.serving import SERVE_INPUTS
    from dse.cost.training import TRAIN_INPUTS

    reads = {"train": set(TRAIN_INPUTS), "infer": set(INFER_INPUTS), "serve": set(SERVE_INPUTS)}
    for key, value in config.items():
        others = [t for t, inputs in reads.items() if key in inputs and t != task]
        if others and key not in reads[task]:
            raise CliError(f"explain: {origin[key]} (value {value!r}) is not allowed with task {task!r}: it is a "
                           f"setting of task {' / '.join(others)}; allowed: leave it out, or --task {others[0]}")


def _check_serving_keys(config: dict[str, object], origin: dict[str, str], task: str) -> None:
    """A stack of the other task, or prefill_tp without a prefill pool, would silently mean the defaults."""
    from dse.spec import stack_task_mismatch, stacks_for_task
    from dse.stacks import stack_names

    stack = str(config.get("stack", "")).strip().lower()
    if stack in stack_names():
        why = stack_task_mismatch(stack, task)
        if why:
            raise CliError(f"explain: {origin['stack']} {config['stack']!r} is not allowed with task {task!r} ({why}); "
                           f"allowed: {', '.join(stacks_for_task(task))}")
    if task == "serve" and "prefill_tp" in config and "prefill_gpus" not in config:
        raise CliError(f"explain: {origin['prefill_tp']} is given without --prefill-gpus, so there is no prefill pool "
                       "for it to split; allowed: --prefill-gpus with it (disaggregated prefill), or neither")


def _refuse_what_does_not_divide(row: pd.Series, dp_given: bool) -> None:
    """One configuration that does not divide (or is otherwise unsupported) is bad input to explain: exit 2
    with the rule and the values it saw.  One that divides but exceeds the GPU memory is an answer (exit 0:
    its breakdown shows by how much)."""
    import re

    reason = str(row.get("infeasible_reason", ""))
    if reason in ("", "exceeds_hbm", "nan"):
        return
    names = [n for n in dict.fromkeys(re.findall(r"[a-z_]+", reason)) if n in row.index]
    values = ", ".join(f"{n}={_jsonable(row[n])}" for n in names)
    note = ""
    if reason.startswith("layers % (pp*vpp)"):
        note = (" (uneven stages: --pipeline-split embedding_loss, or --layers-first-stage / --layers-last-stage)")
    if reason.startswith("tp*pp") and not dp_given:
        note = " (dp is derived as gpus // (tp*pp*cp): give gpus as a multiple of tp*pp*cp, or give --dp)"
    raise CliError(f"explain: this configuration has no answer: {reason}" + (f" ({values})" if values else "")
                   + note)


def _jsonable(v: object) -> object:
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if not np.isfinite(v) else float(v)
    return str(v) if not isinstance(v, (int, str)) else v


#: dse validate prints one line per case up to this many cases, else the WORST_CASES largest errors.
CASE_LINES = 1000
WORST_CASES = 25


def cmd_validate(args: argparse.Namespace) -> int:
    from dse.validation.fit import default_assumptions_path
    from dse.validation.validate import (
        case_results,
        file_mape_table,
        load_assumptions,
        summarize_table,
        validate_table,
    )

    assumptions = []
    if not args.no_assume:
        for path in args.assume or [str(default_assumptions_path())]:
            assumptions.extend(load_assumptions(path))
    tables = [validate_table(path, assumptions, _calibration(args)) for path in _distinct_files(args.files, "validate")]
    table = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    summary = summarize_table(table)
    per_file = file_mape_table(table)
    over = [f for f, m in per_file.items() if args.max_mape is not None and m is not None and m > args.max_mape]
    if args.json:
        print(json.dumps({"cases": [r.as_dict() for r in case_results(table)], "summary": summary}, indent=2))
    else:
        shown = table
        if len(table) > CASE_LINES:  # a large file: the worst cases, not a million lines
            err = table["error_pct"].abs().where(table["skipped"].isna()).fillna(-1.0).to_numpy()
            worst = np.argsort(-err, kind="stable")[:WORST_CASES]
            shown = table.iloc[worst[err[worst] >= 0]]
            print(f"{len(table):,} cases: the {len(shown)} largest errors below (every case: --json)")
        width = max((len(c) for c in shown["case"]), default=4)
        print(f"{'case':<{width}s}  {'metric':<28s} {'measured':>12s} {'predicted':>12s} {'error':>8s}")
        for r in case_results(shown):
            if r.skipped is not None:
                print(f"{r.case:<{width}s}  {r.metric:<28s} {r.measured:12.4g} {'':>12s} {'':>8s}  skipped: "
                      f"{r.skipped}")
            else:
                print(f"{r.case:<{width}s}  {r.metric:<28s} {r.measured:12.4g} {r.predicted:12.4g} "
                      f"{r.error_pct:+7.2f}%")
        counts = table["stack_note"].dropna().value_counts(sort=False)
        for note, count in counts.items():
            print(f"note ({count} case{'s' if count > 1 else ''}): {note}")
        n_assumed = int(sum(map(len, table["assumed"].to_numpy())))
        if n_assumed:
            print(f"\n{n_assumed} empty cells filled from documented assumptions "
                  f"({', '.join(args.assume or [str(default_assumptions_path())])}); --json lists them per case")
        print("\nfile                                     metric                        n   MAPE %   max|err| %  "
              "skipped")
        for s in summary:
            mape = "-" if s["mape_pct"] is None else f"{s['mape_pct']:.2f}"
            mx = "-" if s["max_abs_error_pct"] is None else f"{s['max_abs_error_pct']:.2f}"
            print(f"{s['file']:<40s} {s['metric']:<28s} {s['n']:3d} {mape:>8s} {mx:>12s} {s['skipped']:8d}")
    if over:
        print(f"dse validate: MAPE over --max-mape {args.max_mape}% in: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


def _distinct_files(files: Sequence[str], command: str) -> list[str]:
    """The case files, each once: a file named twice (or by two paths) would count its cases twice."""
    seen: dict[str, str] = {}
    out = []
    for f in files:
        key = str(Path(f).resolve())
        if key in seen:
            print(f"dse {command}: note: {f} is the same file as {seen[key]}; read once", file=sys.stderr)
            continue
        seen[key] = f
        out.append(f)
    return out


def _check_calibration_output(output: str, inputs: Sequence[str]) -> None:
    """-o of calibrate: a new or existing .yaml/.yml file, never a directory or one of the inputs (checked
    before the fit, so a long fit does not end in an error)."""
    out = Path(output)
    if out.is_dir():
        raise CliError(f"calibrate: -o {output}: is a directory; allowed: a file path ending in .yaml")
    if out.suffix.lower() not in (".yaml", ".yml"):
        raise CliError(f"calibrate: -o {output}: suffix {out.suffix or '(none)'!r} is not allowed; allowed: .yaml, "
                       ".yml (the calibration is YAML)")
    for f in inputs:
        if out.exists() and Path(f).exists() and out.resolve() == Path(f).resolve():
            raise CliError(f"calibrate: -o {output}: is one of the case files; allowed: another file")
    if not out.parent.is_dir():
        raise CliError(f"calibrate: -o {output}: directory {out.parent} does not exist; allowed: a file in an "
                       "existing directory")
    if not os.access(out.parent, os.W_OK):
        raise CliError(f"calibrate: -o {output}: directory {out.parent} is not writable")


def _calibration(args: argparse.Namespace) -> dict[tuple[str, str], float] | None:
    if getattr(args, "calibration", None) is None:
        return None
    from dse.validation.calibrate import load_calibration

    return load_calibration(args.calibration)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dse.validation.calibrate import CaseSet, calibrate, default_parameters, parse_params, write_calibration
    from dse.validation.fit import default_assumptions_path
    from dse.validation.validate import load_assumptions

    assumptions = []
    if not args.no_assume:
        for path in args.assume or [str(default_assumptions_path())]:
            assumptions.extend(load_assumptions(path))
    files = _distinct_files(args.files, "calibrate")
    _check_calibration_output(args.output, files)
    cases = CaseSet.load(files, assumptions)
    if not cases.cases():
        raise CliError(f"calibrate: {', '.join(files)}: no case the model predicts (every row is skipped)")
    params = parse_params(args.params) if args.params else default_parameters(cases)
    print(f"calibrate: {len(cases.cases())} case(s), fitting {len(params)} constant(s): "
          f"{', '.join(f'{g}:{c}' for g, c in params)}", flush=True)
    result = calibrate(cases, params, leave_one_out=not args.no_loo)
    if not np.isfinite(float(result["mape_before_pct"])):  # type: ignore[arg-type]
        raise CliError(f"calibrate: {', '.join(files)}: no case the model predicts (every row gives no value; "
                       "`dse validate` names each row's reason)")
    shipped = result["shipped"]
    assert isinstance(shipped, dict)
    constants = result["constants"]
    assert isinstance(constants, dict)
    unc, hit = result["uncertainty_pct"], result["cases_affected"]
    assert isinstance(unc, dict) and isinstance(hit, dict)
    print(f"{'generation':<12s} {'constant':<24s} {'shipped':>10s} {'fitted':>10s} {'± 1σ':>8s}  cases")
    for (g, c), v in constants.items():
        weak = "  (weakly constrained by these cases)" if not unc[(g, c)] < 10.0 else ""
        print(f"{g:<12s} {c:<24s} {shipped[(g, c)]:10.4g} {v:10.4g} {unc[(g, c)]:7.1f}%  {hit[(g, c)]:5d}{weak}")
    print(f"MAPE with the shipped constants: {result['mape_before_pct']:.2f} %")
    print(f"MAPE with the fitted constants:  {result['mape_after_pct']:.2f} %")
    if "mape_leave_one_out_pct" in result:
        print(f"leave-one-out MAPE (each case predicted by constants fitted without it): "
              f"{result['mape_leave_one_out_pct']:.2f} %")
    write_calibration(args.output, result, files)
    print(f"wrote {args.output}; use it with `dse run/explain/validate --calibration {args.output}`")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dse.runner import DEFAULT_MAX_POINTS, check_options, prepare, run
    from dse.spec import load_spec

    # loky's resource tracker (a process of its own) cleans the semaphores of workers stopped by an error or
    # Ctrl-C, and then warns on the user's terminal in four lines; the cleanup is what matters
    if "ignore:resource_tracker:UserWarning" not in sys.warnoptions:
        sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    max_points = DEFAULT_MAX_POINTS if args.max_points is None else args.max_points
    check_options(jobs=args.jobs, part_size=args.chunk_size, max_points=max_points, backend=args.backend)
    spec = load_spec(args.spec)
    overrides = _calibration(args)
    if overrides is not None:
        spec = spec.with_calibration(overrides, args.calibration)
    out = args.output or f"results/{spec.name}"
    print(f"{args.spec}: {spec.size:,} points in {len(spec.grids)} sub-grid(s) -> {out}", flush=True)
    plan = prepare(spec, out, part_size=int(args.chunk_size), max_points=int(max_points),
                   resume=args.resume, feasible_only=args.feasible_only, keep=args.keep)
    stats = run(plan, jobs=args.jobs, backend=args.backend, scheduler=args.scheduler,
                progress=None if not args.quiet else False, resume=args.resume)
    rate = stats["points"] / stats["seconds"] if stats["seconds"] > 0 else float("inf")
    kept = "" if plan.keep.kind == "all" else f" (--keep {plan.keep.text})"
    print(f"{out}: {stats['parts']} part(s), {stats['points']:,} points evaluated, {stats['rows']:,} rows "
          f"{'kept' if plan.keep.reduces else 'written'}{kept} in {stats['seconds']:.2f} s ({rate:,.0f} points/s)")
    return 0


def _check_top(top: int) -> None:
    if top < 1:
        raise CliError(f"--top: value {top} is not allowed; allowed: an integer >= 1 (rows shown)")


def cmd_info(args: argparse.Namespace) -> int:
    from dse.info import format_info

    _check_top(args.top)
    by = None if args.by is None else tuple(c for c in args.by.split(",") if c)
    print(format_info(args.results, metric=args.metric, top=args.top, by=by))
    return 0


def cmd_pareto(args: argparse.Namespace) -> int:
    from dse.pareto import parse_objectives
    from dse.pareto_report import format_front, run_pareto

    _check_top(args.top)
    targets = [(opt, path) for opt, path in (("-o", args.output), ("--figure", args.figure)) if path is not None]
    _check_writable(targets)
    try:
        objectives = parse_objectives(args.objectives)
        by = [c for c in (args.by or "").split(",") if c]
        front, written = run_pareto(args.results, objectives, by=by, output=args.output, figure=args.figure,
                                    feasible_only=not args.all_rows)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(_write_failure(targets, exc)) from exc
    print(format_front(front, objectives, by, top=args.top))
    for path in written:
        print(f"wrote {path}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from dse.plots import draw_standard_figures

    out = args.output or f"results/figures/{Path(args.results).name}"
    targets = [("-o", out)]
    _check_writable(targets, directory=True)
    try:
        written = draw_standard_figures(args.results, out, model=args.model, system=args.system)
    except (ValueError, KeyError) as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(_write_failure(targets, exc)) from exc
    for path in written:
        print(f"wrote {path} (data: {path.with_suffix('.parquet').name})")
    return 0


def _check_writable(targets: Sequence[tuple[str, str]], directory: bool = False) -> None:
    """Refuse an output option whose directory cannot be written, before any work (exit 2)."""
    from dse.outputs import unwritable

    for option, path in targets:
        folder = Path(path) if directory else Path(path).parent
        if directory and Path(path).exists() and not Path(path).is_dir():
            raise CliError(f"{option} {path}: is a file; allowed: a directory (new or existing)")
        why = unwritable(folder)
        if why is not None:
            raise CliError(f"{option} {path}: cannot write there ({why}); allowed: a writable path")


def _write_failure(targets: Sequence[tuple[str, str]], exc: OSError) -> str:
    from dse.outputs import write_error

    option, path = targets[0] if targets else ("output", "")
    return write_error(option, path, exc)


def cmd_models(args: argparse.Namespace) -> int:
    from dse.models.catalog import models

    if getattr(args, "action", None) == "import":
        return _models_import(args)
    cols = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
            "params_published_b"]
    print(models()[cols].to_string())
    return 0


def _models_import(args: argparse.Namespace) -> int:
    """``dse models import config.json``: the catalog row (CSV header and row) of a Hugging Face config."""
    import csv

    from dse.models.catalog import models
    from dse.models.hf import ConfigError, hf_to_model, read_config

    try:
        model = hf_to_model(read_config(args.config), args.config)
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    name = args.name or Path(args.config).stem.lower()
    row = {"name": name, **model, "source": f"Hugging Face config {args.config} (dse models import)"}
    header = [c for c in models().columns if not c.endswith("_code")]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(header)
    writer.writerow([row.get(c, "") for c in header])
    return 0


def cmd_systems(args: argparse.Namespace) -> int:
    from dse.hardware.catalog import systems

    cols = ["generation", "tensor_fp16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops", "hbm_gb", "hbm_tbps",
            "scaleup_gpus", "scaleup_gbps", "scaleup_link", "scaleout_gbit", "tdp_w", "power_limit_w",
            "gemm_rate_factor", "attention_rate_factor"]
    print(systems()[cols].to_string())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dse", description=(
        "Analytical performance model of LLM training, fine-tuning, inference and serving on GPU clusters: "
        "explain one configuration, sweep millions of them, validate against measured runs."))
    cal_help = "efficiency constants from `dse calibrate` (default: the shipped ones)"
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("explain", help="time and memory breakdown of one configuration "
                                        "(train, fine-tune, infer or serve)")
    ex.add_argument("-f", "--config", help="YAML file with configuration keys (flags override it)")
    for key, kind in EXPLAIN_OPTIONS.items():
        ex.add_argument(f"--{key.replace('_', '-')}", dest=key, metavar=kind.split(" ")[0].upper()
                        if kind in ("int",) else None, help=kind,
                        type=int if kind == "int" else str)
    ex.add_argument("--json", action="store_true", help="print JSON instead of text")
    ex.add_argument("--calibration", metavar="FILE", help=cal_help)
    ex.set_defaults(func=cmd_explain)

    va = sub.add_parser("validate",
                        help="compare predictions with measured cases (schema: README.md, section 'Case files')")
    va.add_argument("files", nargs="+", help="case CSV files")
    va.add_argument("--max-mape", type=float, default=None, help="exit 1 when a file's MAPE exceeds PCT")
    va.add_argument("--json", action="store_true", help="print JSON for scripts")
    va.add_argument("--assume", action="append", help="assumptions YAML for unstated inputs (repeatable; "
                    "default: the package's reference_assumptions.yaml, what the shared cases' sources say of their "
                    "runs)")
    va.add_argument("--no-assume", action="store_true", help="use the model's defaults for every empty cell")
    va.add_argument("--calibration", metavar="FILE", help=cal_help)
    va.set_defaults(func=cmd_validate)

    ca = sub.add_parser("calibrate", help="fit the efficiency constants to your own measured cases")
    ca.add_argument("files", nargs="+", help="case CSV files (schema: README.md, section 'Case files')")
    ca.add_argument("-o", "--output", required=True, help="calibration YAML to write")
    ca.add_argument("--params", help="comma-separated generation:constant to fit, e.g. "
                    "ampere:matmul_eff_fp16,ampere:memory_eff (default: those the cases constrain)")
    ca.add_argument("--no-loo", action="store_true", help="skip the leave-one-out error (one fit per case)")
    ca.add_argument("--assume", action="append", help="assumptions YAML for unstated inputs (as for validate)")
    ca.add_argument("--no-assume", action="store_true", help="use the model's defaults for every empty cell")
    ca.set_defaults(func=cmd_calibrate)

    ru = sub.add_parser("run", help="sweep a spec (spaces/*.yaml) into a Parquet dataset under results/")
    ru.add_argument("spec", help="sweep spec YAML")
    ru.add_argument("-o", "--output", help="results directory (default: results/<spec name>)")
    ru.add_argument("--jobs", type=int, default=-1, help="parallel workers (default: all cores)")
    ru.add_argument("--chunk-size", type=_count, default=262_144, metavar="N",
                    help="grid points per Parquet part (at most 2**21)")
    ru.add_argument("--backend", choices=("loky", "dask"), default="loky", help="joblib backend")
    ru.add_argument("--scheduler", help="Dask scheduler address tcp://host:port (default: a local cluster)")
    ru.add_argument("--resume", action="store_true", help="evaluate only the parts missing from -o")
    ru.add_argument("--feasible-only", action="store_true", help="write only rows that divide and fit (= --keep "
                    "feasible)")
    ru.add_argument("--keep", default=None, metavar="MODE",
                    help="what the dataset keeps: all (default), feasible, pareto:COL:min|max,COL:min|max[,by=COL+COL] "
                    "or top:K:COL[:min|max][,by=COL+COL]; each part reduces its rows, a final merge reduces across "
                    "parts")
    ru.add_argument("--max-points", type=_count, default=None, metavar="N",
                    help="refuse grids larger than this (default 1e9; 1e9, 10**9 and 1000000000 all work)")
    ru.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    ru.add_argument("--calibration", metavar="FILE", help=cal_help)
    ru.set_defaults(func=cmd_run)

    inf = sub.add_parser("info", help="summarize a results directory")
    inf.add_argument("results", help="results/NAME")
    inf.add_argument("--metric", default=None, help="rank the best rows by this column (default step_time_s for "
                     "training, output_tokens_per_s_per_gpu for inference and serving; *_per_s, mfu and hfu rank "
                     "high-first)")
    inf.add_argument("--top", type=int, default=10, help="how many best rows (without groups; with groups every "
                     "group's best row is shown)")
    inf.add_argument("--by", help="comma-separated columns: show the best row of each group (default: model,system "
                     "when the sweep has several; '' for the overall best rows)")
    inf.set_defaults(func=cmd_info)

    pa = sub.add_parser("pareto", help="Pareto front of a results directory (table and figure)")
    pa.add_argument("results", help="results/NAME")
    pa.add_argument("--objectives", nargs="+", required=True, metavar="COLUMN:min|max",
                    help="e.g. step_time_s:min gpus:min mem_total_bytes:min tokens_per_s_per_gpu:max "
                    "cost_per_million_tokens_usd:min energy_per_token_j:min")
    pa.add_argument("--by", help="comma-separated columns: one front per group (e.g. system or model,system)")
    pa.add_argument("-o", "--output", help="write the front to FILE.parquet or FILE.csv, and draw it to FILE.png")
    pa.add_argument("--figure", help="draw the front (2 or 3 objectives) to this PNG (default: beside -o)")
    pa.add_argument("--top", type=int, default=20, help="rows printed per group")
    pa.add_argument("--all-rows", action="store_true", help="include rows that do not fit (fits = false)")
    pa.set_defaults(func=cmd_pareto)

    pl = sub.add_parser("plot", help="draw the standard figures of a results directory (PNG + Parquet data)")
    pl.add_argument("results", help="results/NAME")
    pl.add_argument("-o", "--output", help="figure directory (default: results/figures/NAME)")
    pl.add_argument("--model", help="model of the tp x pp heatmap and the roofline (default: chosen)")
    pl.add_argument("--system", help="system of the tp x pp heatmap and the roofline (default: chosen)")
    pl.set_defaults(func=cmd_plot)

    mo = sub.add_parser("models", help="list the model catalog, or import a Hugging Face config.json")
    mo.set_defaults(func=cmd_models, action=None)
    mo_sub = mo.add_subparsers(dest="action")
    mi = mo_sub.add_parser("import", help="print the catalog row (CSV) of a Hugging Face config.json")
    mi.add_argument("config", help="path of a config.json")
    mi.add_argument("--name", help="catalog name of the row (default: the file's stem)")
    sy = sub.add_parser("systems", help="list the GPU system catalog")
    sy.set_defaults(func=cmd_systems)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import warnings

    from dse.dataset import IncompleteDatasetWarning

    parser = build_parser()
    args = parser.parse_args(argv)

    def say_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if issubclass(category, IncompleteDatasetWarning):
            print(f"dse {args.command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        shown = warnings.showwarning
        warnings.showwarning = say_warning
        warnings.simplefilter("default", IncompleteDatasetWarning)
        try:
            return int(args.func(args))
        except (InputError, CliError, SpecError) as exc:
            print(f"dse {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # Ctrl-C: one line, the shell's status for SIGINT
            print(f"dse {args.command}: interrupted" + (f": {exc}" if str(exc) else ""), file=sys.stderr)
            return INTERRUPTED
        except BrokenPipeError:  # `dse validate ... | head`: the reader left; say nothing more
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return BROKEN_PIPE
        except OSError as exc:  # a file the command reads or writes (permissions, a full disk, ...)
            where = f"{exc.filename}: " if exc.filename else ""
            reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())[:200]
            print(f"dse {args.command}: error: {where}{reason}", file=sys.stderr)
            return 2
        except Exception as exc:  # a bug: one line and how to see where, not a traceback
            if os.environ.get("DSE_TRACEBACK"):
                raise
            text = " ".join(str(exc).split())[:300]
            print(f"dse {args.command}: internal error: {type(exc).__name__}: {text} (a bug in dse: please report "
                  "the command line; DSE_TRACEBACK=1 prints where it happened)", file=sys.stderr)
            return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
