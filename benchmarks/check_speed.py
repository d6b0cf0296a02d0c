#!/usr/bin/env python3
"""How long the polyhedral analysis of a plan takes as the problem grows (CPU only).

Times compile_model (domain, launch, bounds/race/order/tensorize checks, lowering) plus every
footprint `schedc check` prints, for the tensorized GEMM plan of samples/tensor_matmul.py at
4096^3 and 65536^3, and the SIMT plan of samples/hello_matmul.py. Median of 7 runs.

Usage: python benchmarks/check_speed.py
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schedc import poly  # noqa: E402
from schedc.lower import compile_model  # noqa: E402
from tests.plans import compile_plan, simt_matmul, tensor_matmul  # noqa: E402


def analysis_seconds(make, n: int) -> float:
    times = []
    for _ in range(7):
        model, _ = compile_plan(*make(n))
        start = time.perf_counter()
        compile_model(model)
        for buffer in model.buffers:
            for loop in model.loops:
                if not model.tensorize or loop.name not in model.tensorize.loops:
                    poly.footprint(model, buffer.name, loop.name)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for label, make in (
        ("tensor GEMM", lambda n: tensor_matmul(n, n, n)),
        ("SIMT GEMM", lambda n: simt_matmul(n, n, n)),
    ):
        small = analysis_seconds(make, 4096)
        large = analysis_seconds(make, 65536)
        print(f"{label:<12} 4096^3: {small * 1e3:7.1f} ms   65536^3: {large * 1e3:7.1f} ms   ratio {large / small:.2f}")


if __name__ == "__main__":
    main()
