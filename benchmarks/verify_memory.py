#!/usr/bin/env python3
"""Peak host memory of `schedc verify` on samples/gluon_add.py's add (CPU only).

Runs ``schedc.verify.run_function`` (random inputs, the launch, the float64 reference, the
comparison) with numpy standing in for the GPU launch, and reports the peak of traced
allocations in units of one float32 array of the problem: what a 32768x32768 verify needs is
that many times 4 GiB.

Usage: python benchmarks/verify_memory.py [N]   (N x N arrays, 4096 unless given)
"""

from __future__ import annotations

import sys
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import gluon_add  # noqa: E402

from schedc.verify import run_function  # noqa: E402
from tests.plans import compile_plan  # noqa: E402


@dataclass
class NumpyLaunch:
    """A loaded function's interface, computed by numpy: C = A + B."""

    model: object
    kernel: object

    def __call__(self, A, B, C) -> None:
        C[...] = A + B


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    fn = NumpyLaunch(*compile_plan(*gluon_add.add(None, n, n), "add"))
    tracemalloc.start()
    reports = run_function(fn)
    _, peak = tracemalloc.get_traced_memory()
    print("\n".join(map(str, reports)))
    print(f"{n}x{n} float32: peak {peak / 2**20:.0f} MiB = {peak / (n * n * 4):.1f} arrays")


if __name__ == "__main__":
    main()
