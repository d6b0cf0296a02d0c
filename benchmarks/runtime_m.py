#!/usr/bin/env python3
"""One build, every M: samples/runtime_m.py's ``gemm_m`` (fp16 C = A @ B, N = K = 4096, M given at
run time) checked against torch at M = 1, 7, 16, 100 and 4096 (and ``gemm_m_decode``, the plan
for few rows, and ``rows_m`` at the same rows), then timed at each M against cuBLAS (``torch.mm``)
and, at M = 4096, against ``gemm_4096``, the same plan built for M = 4096 (wanted: within 3%).

Times are ``triton.testing.do_bench`` medians in ms (L2 flushed between calls), the median of
five rounds that time every form in turn. Each schedc kernel is launched through its prepared
arguments (``Function.launches``: the kernel alone, as ``schedc bench`` times it); ``call`` is the
Python call ``gemm_m(A, B, C)`` on torch tensors, which reads M from the shapes.

Usage (on the GPU, repository root): python benchmarks/runtime_m.py [PACKAGE_DIR]
(builds samples/runtime_m.py into hat_packages/runtime_m unless it is there).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

from built import sample_package  # noqa: E402

ROUNDS = 5
ROWS = (1, 7, 16, 100, 4096)
N = K = 4096


def main() -> None:
    import torch

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "hat_packages" / "runtime_m"
    package = sample_package("runtime_m", out.parent)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    gemm, rows, fixed, decode = (package.functions[n] for n in ("gemm_m", "rows_m", "gemm_4096", "gemm_m_decode"))
    for m in ROWS:
        check(gemm, rows, m)
        check(decode, rows, m)
    print(f"checked gemm_m, gemm_m_decode and rows_m against torch at M = {', '.join(map(str, ROWS))}")
    print(f"{'M':>6} {'gemm_m':>9} {'call':>9} {'cuBLAS':>9} {'x cuBLAS':>9} {'gemm_4096':>10} {'x fixed':>8} "
          f"{'decode':>9} {'x cuBLAS':>9}")
    for m in ROWS:
        rounds = [measure(gemm, fixed if m == 4096 else None, m, decode) for _ in range(ROUNDS)]
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        ratio = f"{t['fixed'] / t['sized']:8.3f}" if "fixed" in t else f"{'':>8}"
        shown = f"{t['fixed']:10.4f}" if "fixed" in t else f"{'':>10}"
        print(f"{m:>6} {t['sized']:9.4f} {t['call']:9.4f} {t['mm']:9.4f} {t['mm'] / t['sized']:9.3f} {shown} {ratio} "
              f"{t['decode']:9.4f} {t['mm'] / t['decode']:9.3f}")


def check(gemm, rows, m: int) -> None:
    """``gemm`` (and ``rows``, unless None) at M = ``m`` against torch."""
    import torch

    torch.manual_seed(m)
    a = torch.randn(m, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
    c = torch.full((m, N), float("nan"), device="cuda", dtype=torch.float16)
    gemm(a, b, torch.zeros_like(c))
    c.zero_()
    gemm(a, b, c)
    want = (a.float() @ b.float())
    error = ((c.float() - want).abs().max() / want.abs().max()).item()
    assert error < 1e-2, f"{gemm.name} at M = {m}: relative error {error:.3e}"
    if rows is None:
        return
    x = torch.randn(m, 1024, device="cuda", dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    rows(x, y)
    assert torch.equal(y, torch.relu(x) * 2), f"rows_m at M = {m}: wrong result"


def measure(gemm, fixed, m: int, decode) -> dict[str, float]:
    import torch
    from triton.testing import do_bench

    a = torch.randn(m, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros(m, N, device="cuda", dtype=torch.float16)
    times = {"sized": do_bench(prepared(gemm, (a, b, c), {"M": m}), return_mode="median"),
             "call": do_bench(lambda: gemm(a, b, c), return_mode="median"),
             "mm": do_bench(lambda: torch.mm(a, b), return_mode="median"),
             "decode": do_bench(prepared(decode, (a, b, c), {"M": m}), return_mode="median")}
    if fixed is not None:
        times["fixed"] = do_bench(prepared(fixed, (a, b, c), {}), return_mode="median")
    return times


def prepared(fn, tensors, sizes: dict[str, int]):
    """A launch of ``fn``'s kernels on ``tensors`` with every argument made once."""
    import torch

    from schedc.ir.specialize import grid_at
    from schedc.package import driver

    launches = fn.launches([t.data_ptr() for t in tensors], fn.size_scalars(sizes),
                           torch.cuda.current_stream().cuda_stream)
    stream = torch.cuda.current_stream().cuda_stream

    def run() -> None:
        for handle, kernel, args in launches:
            driver.launch(handle, grid_at(kernel, sizes), kernel.block, kernel.dynamic_shared_bytes, args, stream,
                          dependent=kernel.dependent_launch)
    return run


if __name__ == "__main__":
    main()
