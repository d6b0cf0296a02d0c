#!/usr/bin/env python3
"""What the GPU's clocks and power do while a function and its reference run back to back.

Each function of a package is verified once (``schedc.bench.Bench``), then it and its cuBLAS
reference are timed in turn for ``--seconds`` each, ``--rounds`` times, while ``nvidia-smi``
samples the SM clock, the power drawn and the active clock-limit reasons every 50 ms. For each
run it prints the median time, clock and power, and the time scaled to one clock (ms x MHz):
where schedc and cuBLAS differ in time but not in clock-scaled time, the difference is the clock
the GPU keeps (power), not the cycles the kernel takes.

Usage (device machine): python3 benchmarks/clocks.py PACKAGE.hat [--function F ...] [--seconds 3]
[--reference cublas|none]  (none: the functions alone, e.g. a fused kernel beside its plain plan)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

QUERY = "clocks.sm,power.draw,clocks_event_reasons.active"


def sampled(run) -> tuple[object, list[tuple[float, float, str]]]:
    """``run()``'s result and the (MHz, W, reasons) samples nvidia-smi took meanwhile."""
    smi = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    try:
        result = run()
    finally:
        smi.terminate()
        out, _ = smi.communicate()
    rows = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append((float(parts[0]), float(parts[1]), parts[2]))
        except (ValueError, IndexError):
            continue
    return result, rows[3:-2] or rows  # the samples while the kernel ran, not the edges


def line(name: str, ms: float, rows) -> str:
    mhz = statistics.median(r[0] for r in rows)
    watts = statistics.median(r[1] for r in rows)
    reasons = sorted({r[2] for r in rows})
    return (
        f"  {name:<44} {ms:8.4f} ms  {mhz:6.0f} MHz  {watts:6.1f} W  {ms * mhz:8.1f} ms*MHz"
        f"  reasons {','.join(reasons)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--function", action="append")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reference", default="cublas", help="the reference timed beside each function "
                        "(a name `schedc bench --compare` takes), or none")
    args = parser.parse_args()
    from schedc.bench import Bench, Options
    from schedc.package.loader import load

    package = load(args.package)
    names = args.function or list(package.functions)
    options = Options(min_time=args.seconds, batches=10, iterations=50)
    for name in names:
        bench = Bench(package.functions[name])
        print(f"{name}:")
        for _ in range(args.rounds):
            timing, rows = sampled(lambda b=bench: b.time(options))
            print(line("schedc", timing.stats["median_of_means"] * 1e3, rows))
            if args.reference != "none":
                timing, rows = sampled(lambda b=bench: b.time_reference(args.reference, options))
                print(line(f"reference ({timing.name})", timing.stats["median_of_means"] * 1e3, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
