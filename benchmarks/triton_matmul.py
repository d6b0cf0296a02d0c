#!/usr/bin/env python3
"""What a user gets from Triton for the GEMMs schedc benchmarks: a plain Triton matmul kernel
(block tiles, a k loop of tl.dot, grouped block order), autotuned over a few tile shapes, timed
with CUDA events beside cuBLAS (torch.matmul) in the same run. Runs on the GPU only.

Usage: python benchmarks/triton_matmul.py [M,N,K:type ...]   (default: the sizes of
BENCHMARKS.md: 4096^3 and 8192^3 in fp16 and bf16, 4096^3 in tf32, 2048x1024x2048 in fp16;
type e4m3: FP8 operands, B column-major, bfloat16 C, beside cuBLAS's ``torch._scaled_mm``)
Prints one line per problem: Triton and cuBLAS median milliseconds and Triton / cuBLAS speed.
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in ((128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4),
                             (128, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
                             (128, 256, 32, 3, 8), (128, 256, 128, 3, 8), (128, 128, 128, 4, 8))
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * blocks_n)
    first = group * GROUP
    size = min(blocks_m - first, GROUP)
    pm = first + (pid % (GROUP * blocks_n)) % size
    pn = (pid % (GROUP * blocks_n)) // size
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None] * sam + rk[None, :] * sak
    pb = b + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(pa, mask=rk[None, :] < K - k * BK, other=0.0)
        y = tl.load(pb, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK * sak
        pb += BK * sbk
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=mask)


def triton_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def median_ms(fn, repeats: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 5)
    return statistics.median(times)


TYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "e4m3": torch.float8_e4m3fn}
DEFAULT = ["4096,4096,4096:fp16", "8192,8192,8192:fp16", "4096,4096,4096:bf16", "8192,8192,8192:bf16",
           "4096,4096,4096:tf32", "2048,1024,2048:fp16"]


def measure_fp8(M: int, N: int, K: int) -> str:
    """Triton and cuBLAS (``torch._scaled_mm``, scales of 1, fast accumulation, as schedc bench's
    reference) on e4m3 A (row-major) and B (column-major), bfloat16 C."""
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    ours = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    triton_ms = median_ms(lambda: triton_matmul(a, b, ours))
    cublas_ms = median_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
    expected = a.float() @ b.float()
    error = ((ours.float() - expected).norm() / expected.norm()).item()
    return (f"{M}x{N}x{K} e4m3: triton {triton_ms:.4f} ms, cublas {cublas_ms:.4f} ms, "
            f"triton/cublas speed {cublas_ms / triton_ms:.3f} (relative error {error:.3g})")


def measure(M: int, N: int, K: int, type_name: str) -> str:
    """Triton (float32 C) and cuBLAS (torch.matmul, C in the operands' type, as schedc bench's
    cuBLAS reference for mixed types) on the same operands."""
    if type_name == "e4m3":
        return measure_fp8(M, N, K)
    dtype = TYPES[type_name]
    a = torch.randn(M, K, device="cuda").to(dtype)
    b = torch.randn(K, N, device="cuda").to(dtype)
    ours = torch.empty(M, N, device="cuda", dtype=torch.float32)
    theirs = torch.empty(M, N, device="cuda", dtype=dtype)
    triton_ms = median_ms(lambda: triton_matmul(a, b, ours))
    cublas_ms = median_ms(lambda: torch.matmul(a, b, out=theirs))
    error = (ours - (a.float() @ b.float())).abs().max().item()
    return (f"{M}x{N}x{K} {type_name}: triton {triton_ms:.4f} ms, cublas {cublas_ms:.4f} ms, "
            f"triton/cublas speed {cublas_ms / triton_ms:.3f} (max abs error {error:.3g})")


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    print(f"{torch.cuda.get_device_name()}: triton {triton.__version__}, torch {torch.__version__}")
    for problem in sys.argv[1:] or DEFAULT:
        sizes, type_name = problem.split(":")
        M, N, K = map(int, sizes.split(","))
        print(measure(M, N, K, type_name), flush=True)


if __name__ == "__main__":
    main()
