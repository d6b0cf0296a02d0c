#!/usr/bin/env python3
"""K-heavy products on Hopper with and without split-K (samples/hopper_matmul.py, ``splits``):
the blocks along BLOCK_Z each sum a part of k into a float32 workspace and a second kernel adds
the parts into C, so a product with few output tiles (1024 x 1024: 64 tiles of 128 x 128 for
132 multiprocessors) still fills the GPU.

A variant is named ``<operand>_<M>x<N>x<K>_b<m>x<n>_s<stages>_k<splits>[_p<group>][_add]``: C of
the operand's type, accumulated in float32 fragments; ``_k1`` is the plan without split-K,
``_p<group>`` a persistent grid, ``_add`` the split combined by TMA reductions into C in any order
(``plan.split_k(deterministic=False)``: no workspace, no second kernel).

Usage: python benchmarks/split_k.py [OUTPUT_DIR] [--only SUBSTRING]   (hat_packages unless
given), then on the GPU
    schedc bench hat_packages/split_k/split_k.hat --compare cublas --time-in-ms
"""

from __future__ import annotations

from variants import acc, build, hopper_matmul

F16, BF16 = acc.ScalarType.float16, acc.ScalarType.bfloat16
SHORT = {F16: "fp16", BF16: "bf16"}

# (operand, (M, N, K), block (m, n, k), stages, splits, persistent group or 0[, deterministic])
VARIANTS = [
    (F16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 8, False),
    (F16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 0, False),
    (F16, (1024, 1024, 14336), (128, 256, 64), 4, 4, 0, False),
    (BF16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 8, False),
    (BF16, (1024, 1024, 14336), (128, 256, 64), 4, 4, 0, False),
    (F16, (512, 4096, 14336), (128, 256, 64), 4, 2, 0, False),
    (BF16, (512, 4096, 14336), (128, 256, 64), 4, 2, 0, False),
    (F16, (512, 4096, 14336), (128, 128, 64), 5, 2, 8, False),
    (F16, (2048, 2048, 16384), (128, 256, 64), 4, 2, 8, False),
    (BF16, (2048, 2048, 16384), (128, 256, 64), 4, 2, 8, False),
    (F16, (1024, 1024, 14336), (128, 128, 64), 4, 1, 8),
    (F16, (1024, 1024, 14336), (128, 128, 64), 4, 2, 0),
    (F16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 0),
    (F16, (1024, 1024, 14336), (128, 128, 64), 4, 4, 0),
    (F16, (1024, 1024, 14336), (128, 256, 64), 3, 4, 0),
    (F16, (1024, 1024, 14336), (128, 256, 64), 4, 4, 0),
    (F16, (1024, 1024, 14336), (128, 128, 64), 4, 2, 8),
    (F16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 8),
    (F16, (1024, 1024, 14336), (128, 128, 64), 6, 2, 8),
    (F16, (1024, 1024, 14336), (128, 256, 64), 4, 4, 8),
    (BF16, (1024, 1024, 14336), (128, 128, 64), 4, 1, 8),
    (BF16, (1024, 1024, 14336), (128, 128, 64), 4, 2, 0),
    (BF16, (1024, 1024, 14336), (128, 256, 64), 4, 4, 0),
    (BF16, (1024, 1024, 14336), (128, 128, 64), 5, 2, 8),
    (F16, (2048, 2048, 16384), (128, 256, 64), 3, 1, 8),
    (F16, (2048, 2048, 16384), (128, 256, 64), 4, 1, 0),
    (F16, (2048, 2048, 16384), (128, 128, 64), 4, 2, 0),
    (F16, (2048, 2048, 16384), (128, 256, 64), 4, 2, 0),
    (BF16, (2048, 2048, 16384), (128, 256, 64), 4, 1, 0),
    (F16, (2048, 2048, 16384), (128, 256, 64), 4, 1, 8),
    (F16, (2048, 2048, 16384), (128, 256, 64), 3, 1, 4),
    (F16, (2048, 2048, 16384), (128, 256, 64), 3, 1, 16),
    (BF16, (2048, 2048, 16384), (128, 256, 64), 3, 1, 8),
    (F16, (512, 4096, 14336), (128, 256, 64), 3, 1, 8),
    (F16, (512, 4096, 14336), (128, 256, 64), 4, 2, 0),
    (F16, (512, 4096, 14336), (128, 128, 64), 4, 1, 0),
    (F16, (512, 4096, 14336), (128, 128, 64), 4, 2, 0),
    (BF16, (512, 4096, 14336), (128, 256, 64), 4, 2, 0),
    (F16, (512, 4096, 14336), (128, 128, 64), 5, 1, 8),
    (F16, (512, 4096, 14336), (128, 128, 64), 6, 1, 0),
    (BF16, (512, 4096, 14336), (128, 128, 64), 5, 1, 8),
    (BF16, (512, 4096, 14336), (128, 128, 64), 4, 1, 0),
]


def name_of(operand, size, block, stages, splits, group, deterministic=True) -> str:
    return (f"{SHORT[operand]}_{'x'.join(map(str, size))}_b{block[0]}x{block[1]}_s{stages}_k{splits}"
            + (f"_p{group}" if group else "") + ("" if deterministic else "_add"))


def plan_of(operand, size, block, stages, splits, group, deterministic=True) -> tuple:
    plan, args = hopper_matmul.matmul(*size, operand=operand, block=block, stages=stages, output=operand,
                                      splits=splits, persistent={"group": group} if group else None)
    if not deterministic:
        plan.split_k(deterministic=False)
    return plan, args


if __name__ == "__main__":
    build(__doc__, "split_k", ((name_of(*v), lambda v=v: plan_of(*v)) for v in VARIANTS))
