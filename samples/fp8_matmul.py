#!/usr/bin/env python3
"""FP8 matrix products on Hopper: ``C = (A @ B) * scale_a * scale_b`` with A and B of
``float8_e4m3`` (or ``float8_e5m2``) and C of bfloat16, as inference stacks run their GEMMs.

wgmma multiplies 8-bit floats 32 values of k at a time (``M64xN256xK32_B1``) and reads operand
tiles whose k is contiguous: A row-major (M x K) and B column-major (K x N stored as N x K, as
``torch._scaled_mm`` takes it). The products accumulate in float32 fragments; the per-tensor
scales are float32 arrays of one element (device tensors, as torch passes them) applied in a fused
epilogue (``acc.fuse``) on the fragments before C leaves by TMA, rounded once to bfloat16. The plan
is ``samples/fused_gemm.py``'s ``fused_matmul`` (hopper_matmul's): 128 x 256 block tiles of 128
values of k (128 bytes a row), 3 stages, a producer warpgroup and two consumer warpgroups, a
persistent grid.

- ``fp8_e4m3_<M>``: at 4096^3 and 8192^3;
- ``fp8_e4m3_<M>_unscaled``: the product alone (C = A @ B), what ``schedc bench --compare cublas``
  measures against ``torch._scaled_mm``;
- ``fp8_e4m3_4096_rowwise``: per-row scales of A and per-column scales of B
  (``C[i, j] = (A @ B)[i, j] * scale_a[i] * scale_b[j]``).
"""

from fused_gemm import fused_matmul

import schedc as acc


def fp8_matmul(M: int, N: int, K: int, operand=acc.ScalarType.float8_e4m3, output=acc.ScalarType.bfloat16,
               block=(128, 256, 128), stages: int = 3, group: int = 8, scaled: bool = True, rowwise: bool = False):
    """The plan and its arrays (A, B, C, scale_a, scale_b; without ``scaled``: A, B, C). The
    scales are per tensor (one element each), or with ``rowwise`` one per row of A (M) and one per
    column of B (N)."""
    shapes = ((M,), (N,)) if rowwise else ((1,), (1,))
    scales = tuple(acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=shape, name=name)
                   for name, shape in zip(("scale_a", "scale_b"), shapes))

    def scale(c, i, j):
        if rowwise:
            return acc.cast(c * scales[0][i] * scales[1][j], output)
        return acc.cast(c * (scales[0][0] * scales[1][0]), output)
    return fused_matmul(M, N, K, scale if scaled else None, scales if scaled else (), operand, output,
                        acc.Array.Layout.LAST_MAJOR, block, stages, group)


if __name__ == "__main__":
    package = acc.Package()
    for size in (4096, 8192):
        package.add(*fp8_matmul(size, size, size), base_name=f"fp8_e4m3_{size}")
        package.add(*fp8_matmul(size, size, size, scaled=False), base_name=f"fp8_e4m3_{size}_unscaled")
    package.add(*fp8_matmul(4096, 4096, 4096, rowwise=True), base_name="fp8_e4m3_4096_rowwise")
    package.build("fp8_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/fp8_matmul")
