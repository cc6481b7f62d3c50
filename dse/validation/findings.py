"""The findings of Zhang et al. 2023 (arXiv 2311.03687) as ratios of its measured runs, and the same ratios as dse
predicts them (issue 21: "a README table of the paper's findings, generated from dse and tested").

A finding compares runs that differ in one thing (ZeRO stage, offload, server, method).  Its ratio is the
geometric mean, over the pairs of runs of ``tests/reference/zhang2023_train_bs1_lora7b.csv`` that show it, of
numerator / denominator throughput (tokens/s/GPU); dse's ratio is the same over its predictions of those runs.
A direction is reproduced when both ratios are on the same side of 1.

``python -m dse.validation.findings [CASES.csv]`` prints the table the README holds.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.validation.validate import CaseResult, validate_file

#: The case file the findings are read from (the vendored copy of the shared reference).
CASES = Path(__file__).resolve().parents[2] / "tests" / "reference" / "zhang2023_train_bs1_lora7b.csv"
_P = "zhang2023-"


@dataclass(frozen=True)
class Finding:
    text: str
    pairs: tuple[tuple[str, str], ...]  #: (numerator case, denominator case), ids without the "zhang2023-" prefix


def _t3(model: str, tail: str) -> str:
    return f"t3-llama2-{model}-{tail}-bs1"


def _variants(model: str, server: str, num: str, den: str) -> tuple[tuple[str, str], ...]:
    """Pairs over the four attention/recompute variants of Table III: -, r, f, f-r (naive: '', 'r', 'f', 'r-f')."""
    out = []
    for v in ("", "r-", "f-", "f-r-"):
        n = _t3(model, f"{server}-{v}{num}")
        base = {"": "naive", "r-": "r", "f-": "f", "f-r-": "r-f"}[v] if den == "naive" else f"{v}{den}"
        out.append((n, _t3(model, f"{server}-{base}")))
    return tuple(out)


def _servers(model: str, a: str, b: str, method: str) -> tuple[tuple[str, str], ...]:
    return tuple((_t3(model, f"{a}-{v}{method}"), _t3(model, f"{b}-{v}{method}")) for v in ("", "r-", "f-", "f-r-"))


FINDINGS: tuple[Finding, ...] = (
    Finding("ZeRO-2 against no ZeRO at batch size 1 (A800, 7B)", _variants("7b", "a800", "z2", "naive")),
    Finding("ZeRO-3 against ZeRO-2 (A800, 13B)", _variants("13b", "a800", "z3", "z2")),
    Finding("ZeRO-2 + optimizer offload against ZeRO-2 (A800, 7B)", _variants("7b", "a800", "z2-o", "z2")),
    Finding("ZeRO-3 + offload against ZeRO-3 (A800, 7B)", _variants("7b", "a800", "z3-o", "z3")),
    Finding("recomputation against none (A800, 7B, no ZeRO)", ((_t3("7b", "a800-r"), _t3("7b", "a800-naive")),)),
    Finding("FlashAttention against unfused attention (A800, 7B, no ZeRO)",
            ((_t3("7b", "a800-f"), _t3("7b", "a800-naive")),)),
    Finding("RTX 4090 server against RTX 3090 server (7B, ZeRO-3)", _servers("7b", "rtx4090", "rtx3090-pcie", "z3")),
    Finding("RTX 4090 server against RTX 3090 server (7B, ZeRO-2 + offload)",
            _servers("7b", "rtx4090", "rtx3090-pcie", "z2-o")),
    Finding("RTX 3090 with NVLink bridges against without (7B, ZeRO-3)",
            _servers("7b", "rtx3090-nvlink", "rtx3090-pcie", "z3")),
    Finding("RTX 3090 with NVLink bridges against without (7B, ZeRO-3 + offload)",
            _servers("7b", "rtx3090-nvlink", "rtx3090-pcie", "z3-o")),
    Finding("A800 server against RTX 4090 server (7B, ZeRO-3)", _servers("7b", "a800", "rtx4090", "z3")),
    Finding("A800 server against RTX 3090 server (7B, ZeRO-3)", _servers("7b", "a800", "rtx3090-pcie", "z3")),
    Finding("LoRA against full training (A800, 7B, no ZeRO)",
            (("t9-llama2-7b-a800-l-bs1", _t3("7b", "a800-naive")),)),
    Finding("QLoRA against LoRA (A800, 7B, no ZeRO)", (("t9-llama2-7b-a800-ql-bs1", "t9-llama2-7b-a800-l-bs1"),)),
    Finding("LoRA + ZeRO-3 against LoRA + ZeRO-2 (7B, every server)",
            tuple((f"t9-llama2-7b-{s}-l-z3-bs1", f"t9-llama2-7b-{s}-l-z2-bs1")
                  for s in ("a800", "rtx4090", "rtx3090-pcie", "rtx3090-nvlink"))),
    Finding("LoRA + ZeRO-2 + offload against LoRA + ZeRO-2 (7B, every server)",
            tuple((f"t9-llama2-7b-{s}-l-z2-o-bs1", f"t9-llama2-7b-{s}-l-z2-bs1")
                  for s in ("a800", "rtx4090", "rtx3090-pcie", "rtx3090-nvlink"))),
    Finding("LoRA against QLoRA on the RTX 4090 server (7B, no ZeRO)",
            (("t9-llama2-7b-rtx4090-l-bs1", "t9-llama2-7b-rtx4090-ql-bs1"),)),
)


def finding_ratios(results: list[CaseResult]) -> list[dict[str, object]]:
    """Per finding: the paper's ratio, dse's ratio (None when a run of it has no prediction) and whether the
    direction is reproduced."""
    by_case = {r.case: r for r in results}
    rows = []
    for f in FINDINGS:
        measured, predicted = [], []
        for num, den in f.pairs:
            a, b = by_case[_P + num], by_case[_P + den]
            measured.append(np.log(a.measured / b.measured))
            if a.predicted is not None and b.predicted is not None:
                predicted.append(np.log(a.predicted / b.predicted))
        paper = float(np.exp(np.mean(measured)))
        ours = float(np.exp(np.mean(predicted))) if len(predicted) == len(measured) else None
        same = ours is not None and (paper - 1.0) * (ours - 1.0) > 0
        rows.append({"finding": f.text, "paper": paper, "dse": ours, "direction": same})
    return rows


def findings_table(path: str | Path = CASES) -> str:
    """The README's table of the paper's findings (markdown), from dse's predictions of ``path``."""
    rows = finding_ratios(validate_file(path))
    lines = ["| finding | paper | dse | direction |", "|---|---|---|---|"]
    for r in rows:
        ours = "–" if r["dse"] is None else f"{r['dse']:.3g}×"
        lines.append(f"| {r['finding']} | {r['paper']:.3g}× | {ours} | {'yes' if r['direction'] else 'no'} |")
    hits = sum(bool(r["direction"]) for r in rows)
    lines.append("")
    lines.append(f"Directions reproduced: {hits} of {len(rows)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(findings_table(args[0] if args else CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
