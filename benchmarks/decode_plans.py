#!/usr/bin/env python3
"""Plans for few rows (decode shapes) of the run-time-M GEMM of samples/runtime_m.py (fp16,
N = K = 4096): Hopper plans with 64-row tiles of several widths, depths of k and stages, each built
once with M a run-time size, checked against torch and timed at M = 1, 16, 64 against cuBLAS
(``torch.mm``); ``triton.testing.do_bench`` medians in ms, the kernels launched through prepared
arguments (as benchmarks/runtime_m.py does).

Usage (on the GPU, repository root): python benchmarks/decode_plans.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT), str(ROOT / "samples")]  # benchmarks/runtime_m.py, not the sample

from hopper_matmul import matmul  # noqa: E402
from runtime_m import check, prepared  # noqa: E402

import schedc as acc  # noqa: E402

N = K = 4096
PLANS = {"64x32x64_s6": ((64, 32, 64), 6), "64x16x64_s8": ((64, 16, 64), 8), "64x32x128_s4": ((64, 32, 128), 4),
         "64x64x64_s6": ((64, 64, 64), 6), "64x64x64_s8": ((64, 64, 64), 8), "64x64x128_s4": ((64, 64, 128), 4),
         "64x128x64_s6": ((64, 128, 64), 6), "64x128x64_s4": ((64, 128, 64), 4)}


def main() -> None:
    import torch
    from triton.testing import do_bench

    package = acc.Package()
    M = acc.create_dimensions()
    for name, (block, stages) in PLANS.items():
        plan, (A, B, C) = matmul(M, N, K, block=block, stages=stages, output=acc.ScalarType.float16)
        package.add(plan, args=(M, A, B, C), base_name=f"decode_{name}")
    loaded = acc.load(package.build("decode_plans", output_dir=tempfile.mkdtemp()))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'plan':>16} " + " ".join(f"{f'M={m}':>9} {'x cuBLAS':>9}" for m in (1, 16, 64)))
    for name in PLANS:
        fn = loaded.functions[f"decode_{name}"]
        cells = []
        for m in (1, 16, 64):
            check(fn, None, m)
            a = torch.randn(m, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = torch.zeros(m, N, device="cuda", dtype=torch.float16)
            mine = do_bench(prepared(fn, (a, b, c), {"M": m}), return_mode="median")
            ref = do_bench(lambda a=a, b=b: torch.mm(a, b), return_mode="median")
            cells.append(f"{mine:9.4f} {ref / mine:9.3f}")
        print(f"{name:>16} " + " ".join(cells))


if __name__ == "__main__":
    main()
