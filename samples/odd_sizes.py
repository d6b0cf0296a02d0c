#!/usr/bin/env python3
"""Tensor cores at sizes the tiles do not divide: C = A @ B at M = N = K = 1000.

The plan is Tilus' MatmulV4 with 3 stages (samples/tilus_matmul.py): 128x128 block tiles,
32 values of k per step. 1000 = 7 * 128 + 104 and 1000 = 31 * 32 + 8, so the last block row
and column and the last k step hold partial tiles. Tensor cores compute whole 16x16 tiles:
the cp.async copies fill the shared tiles with zeros past the arrays, every warp computes its
whole tiles, and the tiles of C at the edge are stored element by element (through a 1 KiB
slice of shared memory per warp), so nothing outside A, B or C is read or written.

- ``matmul_1000_fp16``: float16 A and B, float32 C;
- ``matmul_1000_tf32``: float32 A, B and C on tf32 tensor cores (16x16x8).
"""

from tilus_matmul import matmul

import schedc as acc

if __name__ == "__main__":
    package = acc.Package()
    for name, operand in (("fp16", acc.ScalarType.float16), ("tf32", acc.ScalarType.float32)):
        plan, args = matmul(1000, 1000, 1000, stages=3, operand=operand)
        package.add(plan, args=args, base_name=f"matmul_1000_{name}")
    package.build("odd_sizes", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/odd_sizes")
