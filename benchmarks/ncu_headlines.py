#!/usr/bin/env python3
"""Nsight Compute beside cuBLAS: one launch of each named function and of its cuBLAS reference.

``launch PACKAGE.hat FN[,FN...]`` (under ncu, GPU): each function verified against float64
(``schedc.bench.Bench``), then launched once inside an NVTX range ``schedc:FN`` and its cuBLAS
reference (``schedc bench --compare cublas``'s, on the same input values) once inside
``cublas:FN``. Run it as ``benchmarks/device_session.sh ncu`` does: ``ncu --nvtx --nvtx-include
"schedc:*/" --nvtx-include "cublas:*/" --print-nvtx-rename kernel --csv --page raw --metrics
$(python3 benchmarks/ncu_headlines.py metrics) python3 benchmarks/ncu_headlines.py launch ...``,
so that each profiled kernel is named by its range.

``report NCU.csv`` reads that output and prints a table a kernel: ncu's own clock and cycles, the
tensor pipe's active cycles (the share of the multiprocessors' cycles the wgmma pipe is busy:
what is left between it and the tensor cores' peak at that clock), issue slots busy, instructions,
DRAM throughput, L2 hit rate, and the three largest stall reasons (warps stalled a issued
instruction).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

STALLS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
          "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected", "selected",
          "short_scoreboard", "sleeping", "tex_throttle", "wait")
# the tensor pipe's active cycles, by the names ncu versions give it (the first one measured is shown)
TENSOR = ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
COLUMNS = {  # metric: (heading, scale)
    "gpu__time_duration.sum": ("µs", 1e-3),
    "sm__cycles_elapsed.avg.per_second": ("MHz", 1e-6),
    "sm__cycles_elapsed.avg": ("k cycles", 1e-3),
    TENSOR[0]: ("tensor pipe %", 1.0),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue %", 1.0),
    "smsp__inst_executed.sum": ("M warp instr.", 1e-6),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("DRAM %", 1.0),
    "lts__t_sector_hit_rate.pct": ("L2 hit %", 1.0),
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def metrics() -> str:
    return ",".join([*COLUMNS, *TENSOR[1:], *(STALL_METRIC.format(s) for s in STALLS)])


def launch(path: str, names: list[str]) -> None:
    import torch

    from schedc.bench import Bench
    from schedc.bench_reference import reference_launcher
    from schedc.package.loader import load

    package = load(path)
    for name in names:
        bench = Bench(package.functions[name], cache={})  # verifies it
        with reference_launcher("cublas", bench.model, bench.inputs) as reference:
            reference.launch(0)  # cuBLAS's heuristics and handles, outside the ranges
            torch.cuda.synchronize()
            for label, go in (("schedc", bench.launch), ("cublas", reference.launch)):
                torch.cuda.nvtx.range_push(f"{label}:{name}")
                go(0)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()


def report(path: str) -> None:
    rows = _rows(path)
    print("| kernel | " + " | ".join(h for h, _ in COLUMNS.values()) + " | largest stalls |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for row in rows:
        row[TENSOR[0]] = next((row[m] for m in TENSOR if m in row and row[m]), "")
        values = [_number(row.get(m)) * scale for m, (_, scale) in COLUMNS.items()]
        stalls = sorted(((_number(row.get(STALL_METRIC.format(s))), s) for s in STALLS), reverse=True)[:3]
        cells = " | ".join(f"{v:.1f}" if v >= 10 else f"{v:.2f}" for v in values)
        print(f"| {_label(row['Kernel Name'])} | {cells} | " + ", ".join(f"{s} {v:.2f}" for v, s in stalls) + " |")


def _label(name: str) -> str:
    """``schedc:FN/FN__gpu__`` → ``FN``; ``cublas:FN/nvjet_...`` → ``cublas nvjet_...`` (any other
    range's label the same way: ``cudnn:FN/...`` → ``cudnn ...``)."""
    where, _, kernel = name.partition("/")
    label, _, _ = where.partition(":")
    return where.removeprefix("schedc:") if label == "schedc" else f"{label} {kernel or where}"


def _rows(path: str) -> list[dict[str, str]]:
    """ncu's raw CSV (after its own log lines): one dict a profiled kernel (the units row skipped)."""
    lines = Path(path).read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith('"ID"'))
    table = list(csv.DictReader(lines[start:]))
    return [row for row in table if row.get("ID", "").isdigit()]


def _number(text: str | None) -> float:
    try:
        return float((text or "nan").replace(",", ""))
    except ValueError:
        return float("nan")


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "metrics":
        print(metrics())
    elif mode == "launch" and len(sys.argv) == 4:
        launch(sys.argv[2], sys.argv[3].split(","))
    elif mode == "report" and len(sys.argv) == 3:
        report(sys.argv[2])
    else:
        print(__doc__.splitlines()[0] + "\nusage: ncu_headlines.py metrics | launch PACKAGE.hat FN[,FN...] | "
              "report NCU.csv", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
