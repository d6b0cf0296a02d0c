#!/usr/bin/env python3
"""What programmatic dependent launch gains on a function of several kernels: each one is timed
as built (each kernel after the first launched as a dependent of the one before, its blocks
scheduled while that kernel ends) and launched in plain stream order (the same kernels: their
GridDependencyWait then returns at once), alternately, cuBLAS in the same run. Runs on the GPU.

Usage: python benchmarks/dependent_launch.py PACKAGE.hat [--only SUBSTRING] [--rounds N]
Prints per function the median milliseconds of each way and their ratio to cuBLAS.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import schedc  # noqa: E402
from schedc.bench import Options, bench_function  # noqa: E402
from schedc.package.loader import Function  # noqa: E402


def in_stream_order(fn):
    """``fn`` with every kernel launched in plain stream order."""
    kernels = tuple(dataclasses.replace(k, dependent_launch=False) for k in fn.function.kernels)
    return Function(fn.package, dataclasses.replace(fn.info, function=dataclasses.replace(fn.function,
                                                                                          kernels=kernels)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--only", default="")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    package = schedc.load(options.package)
    timing = Options(min_time=0.2)
    for name in package.names:
        fn = package[name]
        if options.only not in name or len(fn.function.kernels) < 2:
            continue
        ways = {"dependent": fn, "stream order": in_stream_order(fn)}
        medians: dict[str, list[float]] = {way: [] for way in ways}
        references = []
        for _ in range(options.rounds):
            for way, f in ways.items():
                _, ours, reference = bench_function(f, timing, compare_with="cublas")
                medians[way].append(ours.stats["median_of_means"])
                references.append(reference.stats["median_of_means"])
        cublas = statistics.median(references)
        parts = [f"{way} {statistics.median(t) * 1e3:.4f} ms ({cublas / statistics.median(t):.3f}x cuBLAS)"
                 for way, t in medians.items()]
        print(f"{name}: " + ", ".join(parts) + f"; cuBLAS {cublas * 1e3:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
