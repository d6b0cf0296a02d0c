#!/usr/bin/env python3
"""samples/gemv.py's half-precision GEMV against cuBLAS's (``torch.mv``) on the same tensors,
in one run on the GPU: each function checked against torch first, then timed with
``triton.testing.do_bench`` (median, L2 flushed between calls). GB/s counts A, x and y read and
y written once.

Usage (on the GPU, repository root): python benchmarks/gemv.py [PACKAGE_DIR]
(builds samples/gemv.py into hat_packages/gemv unless it is there).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from built import sample_package  # noqa: E402


def main() -> None:
    import torch
    from triton.testing import do_bench

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "hat_packages" / "gemv"
    package = sample_package("gemv", out.parent)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, fn in sorted(package.functions.items()):
        M, N = (int(n) for n in fn.model.buffers[0].shape)
        torch.manual_seed(0)
        a = torch.randn(M, N, device="cuda", dtype=torch.float16)
        x = torch.randn(N, device="cuda", dtype=torch.float16)
        y = torch.zeros(M, device="cuda", dtype=torch.float16)
        fn(a, x, y)
        want = torch.mv(a, x).float()
        error = ((y.float() - want).abs().max() / want.abs().max()).item()
        assert error < 1e-2, f"{name}: relative error {error:.3e}"
        ours = do_bench(lambda: fn(a, x, y), return_mode="median")  # noqa: B023 - timed here
        cublas = do_bench(lambda: torch.mv(a, x), return_mode="median")  # noqa: B023
        moved = (M * N + N + 2 * M) * 2
        print(f"{name}: schedc {ours * 1e3:.1f} us ({moved / ours / 1e6:.0f} GB/s), cuBLAS {cublas * 1e3:.1f} us "
              f"({moved / cublas / 1e6:.0f} GB/s): {cublas / ours:.3f}x cuBLAS")


if __name__ == "__main__":
    main()
