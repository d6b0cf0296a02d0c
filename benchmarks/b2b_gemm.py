#!/usr/bin/env python3
"""The back-to-back GEMM E = (A @ B) @ D of samples/b2b_gemm.py against two ``torch.mm`` calls
with the intermediate in global memory, on the same tensors, on the GPU, in one run (and
``mlp_relu``: E = relu(A @ B + bias) @ D against torch's addmm, relu_ and mm).

For each function of the sample (and, with ``--variants``, the plan at other block rows, k tiles,
stages and sizes for float16, M = 65536): E is checked against torch's ``mm(mm(A, B), D)`` first
(16-bit tolerance relative to the largest value), then both are timed with
``triton.testing.do_bench`` (L2 flushed between calls, medians in ms), the median of five rounds
that time each form in turn. ``x torch`` is torch's time over schedc's (> 1: schedc faster);
``GB/s`` counts A read and E written once (B and D are small). ``softmax_*``: E = softmax(A @ B) @ D
by rows against torch's mm, softmax and mm.

Usage (on the GPU, repository root): python benchmarks/b2b_gemm.py [--variants] [--only PREFIX[,PREFIX...]]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import b2b_gemm  # noqa: E402
from built import sample_package  # noqa: E402

import schedc as acc  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402

ROUNDS = 5
VARIANTS = {  # name: (N, b2b_gemm options) at float16, M = 65536 (B resident unless "_ring")
    "rows128_k64_s4": (128, dict(rows=128, k_tile=64, stages=4)),
    "rows128_k64_s6": (128, dict(rows=128, k_tile=64, stages=6)),
    "rows128_k64_s8": (128, dict(rows=128, k_tile=64, stages=8)),
    "rows128_k32_s8": (128, dict(rows=128, k_tile=32, stages=8)),
    "rows128_k64_s6_ring": (128, dict(rows=128, k_tile=64, stages=6, b_resident=False)),
    "n64_rows128_k64_s8": (64, dict(rows=128, k_tile=64, stages=8)),
    "n256_rows64_k64_s2_ring": (256, dict(rows=64, k_tile=64, stages=2, b_resident=False)),
    "n256_rows64_k32_s3_ring": (256, dict(rows=64, k_tile=32, stages=3, b_resident=False)),
    "n256_rows128_k64_s1_ring": (256, dict(rows=128, k_tile=64, stages=1, b_resident=False)),
    # S in tiles of 128 columns (a serial loop over them, E's accumulator kept across it)
    "n256_t128_rows128_k64_s3": (256, dict(n1_tile=128, rows=128, k_tile=64, stages=3, b_resident=False)),
    "n256_t128_rows128_k64_s2": (256, dict(n1_tile=128, rows=128, k_tile=64, stages=2, b_resident=False)),
    "n256_t128_rows64_k64_s4": (256, dict(n1_tile=128, rows=64, k_tile=64, stages=4, b_resident=False)),
    "n256_t64_rows128_k64_s4": (256, dict(n1_tile=64, rows=128, k_tile=64, stages=4, b_resident=False)),
    # D's rows of each tile of S through a ring of d stages (the next tile's copied during this one's products)
    "n256_t128_rows64_k64_s3_d2": (256, dict(n1_tile=128, rows=64, k_tile=64, stages=3, b_resident=False,
                                             d_stages=2)),
    "n256_t128_rows64_k32_s4_d2": (256, dict(n1_tile=128, rows=64, k_tile=32, stages=4, b_resident=False,
                                             d_stages=2)),
    "n256_t64_rows64_k64_s4_d2": (256, dict(n1_tile=64, rows=64, k_tile=64, stages=4, b_resident=False,
                                            d_stages=2)),
    "n256_t64_rows64_k64_s4_d3": (256, dict(n1_tile=64, rows=64, k_tile=64, stages=4, b_resident=False,
                                            d_stages=3)),
}


def main() -> None:
    import torch

    package = sample_package("b2b_gemm", ROOT / "hat_packages")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'function':>28} {'schedc':>8} {'2 x mm':>8} {'x torch':>8} {'GB/s':>8} {'error':>9}")
    functions = [(name, fn) for name, fn in package.functions.items()]
    if "--variants" in sys.argv:
        functions += variants()
    if "--only" in sys.argv:  # names starting with one of these prefixes
        prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(","))
        functions = [(name, fn) for name, fn in functions if name.startswith(prefixes)]
    for name, fn in functions:
        dtype = torch.bfloat16 if "bf16" in name else torch.float16
        M, N = (65536, VARIANTS[name][0]) if name in VARIANTS else map(int, name.rsplit("_", 1)[1].split("x"))
        rounds = [measure(fn, M, N, dtype) for _ in range(ROUNDS)]
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        gbs = 2 * M * N * 2 / (t["schedc"] * 1e-3) / 1e9
        print(f"{name:>28} {t['schedc']:8.4f} {t['torch']:8.4f} {t['torch'] / t['schedc']:8.3f} {gbs:8.0f} "
              f"{t['error']:9.2e}")


def variants():
    """The float16 plan at other tiles and sizes, built into a temporary package (a plan the
    compiler refuses is named with its reason and left out)."""
    out = Path(tempfile.mkdtemp())
    package = acc.Package()
    prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv else ("",)
    for name, (n, options) in VARIANTS.items():
        if name.startswith(prefixes):
            try:
                package.add(*b2b_gemm.b2b_gemm(65536, n, n, n, **options), base_name=name)
            except SchedcError as error:
                print(f"{name}: refused: {error}")
    package.build("b2b_variants", output_dir=out)
    return list(acc.load(out / "b2b_variants.hat").functions.items())


def measure(fn, M: int, N: int, dtype) -> dict[str, float]:
    import torch
    from triton.testing import do_bench

    torch.manual_seed(0)
    a = torch.randn(M, N, device="cuda", dtype=dtype)
    b = torch.randn(N, N, device="cuda", dtype=dtype) / N ** 0.5
    d = torch.randn(N, N, device="cuda", dtype=dtype) / N ** 0.5
    e = torch.empty(M, N, device="cuda", dtype=dtype)
    s = torch.empty(M, N, device="cuda", dtype=dtype)
    if fn.name.startswith("mlp_relu"):  # E = relu(A @ B + bias) @ D: torch's addmm, relu, mm
        bias = torch.randn(N, device="cuda", dtype=dtype)
        want = torch.mm(torch.relu(torch.addmm(bias, a, b)), d).float()
        fn(a, b, d, e, bias)

        def reference():
            torch.addmm(bias, a, b, out=s)
            torch.relu_(s)
            torch.mm(s, d, out=e)

        arguments = (a, b, d, e, bias)
    elif fn.name.startswith("softmax"):  # E = softmax(A @ B) @ D by rows: torch's mm, softmax, mm
        want = torch.mm(torch.softmax(torch.mm(a, b).float(), dim=1).to(dtype), d).float()
        fn(a, b, d, e)

        def reference():
            torch.mm(a, b, out=s)
            torch.softmax(s, dim=1, out=s)
            torch.mm(s, d, out=e)

        arguments = (a, b, d, e)
    else:
        want = torch.mm(torch.mm(a, b), d).float()
        fn(a, b, d, e)

        def reference():
            torch.mm(a, b, out=s)
            torch.mm(s, d, out=e)

        arguments = (a, b, d, e)
    error = ((e.float() - want).abs().max() / want.abs().max()).item()
    assert error < 2e-2, f"{fn.name}: relative error {error:.3e}"
    return {"schedc": do_bench(lambda: fn(*arguments), return_mode="median"),
            "torch": do_bench(reference, return_mode="median"), "error": error}


if __name__ == "__main__":
    main()
