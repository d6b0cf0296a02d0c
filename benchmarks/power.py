#!/usr/bin/env python3
"""Hopper plans that differ in what they move, not in what they multiply: with and without
clusters of two blocks that share B's tile by TMA multicast (half of B's reads from L2), C read or
not (``_set``: the products start from zero and C is only written), tiles in groups of 1 to 16
rows (L2's reuse, DRAM's traffic), 3 or 4 stages; for ``benchmarks/clocks.py``, which times each
beside cuBLAS while sampling the GPU's clock and power.

At 4096^3 both schedc's plans and cuBLAS run at the H200's power cap, so the one that spends less
energy a tile keeps the higher clock (BENCHMARKS.md, 2026-11-27).

A variant is named ``<operand>_<M>_b<m>x<n>x<k>_s<stages>_p<group>_x<cluster>[_set]``; C of the
operands' type (bfloat16 for 8-bit floats), read and written (only written with ``_set``),
accumulated in float32.

Usage: python benchmarks/power.py [OUTPUT_DIR] [--only SUBSTRING], then on the GPU
    python3 benchmarks/clocks.py hat_packages/power/power.hat
"""

from __future__ import annotations

from variants import acc, build, hopper_matmul

F16, BF16, E4M3 = acc.ScalarType.float16, acc.ScalarType.bfloat16, acc.ScalarType.float8_e4m3
SHORT = {F16: "fp16", BF16: "bf16", E4M3: "e4m3"}

# (operand, size, block (m, n, k), stages, group, cluster[, C not read])
VARIANTS = [
    (F16, (4096,) * 3, (128, 256, 64), 3, 4, 1),
    (F16, (4096,) * 3, (128, 256, 64), 3, 4, 1, True),
    (F16, (4096,) * 3, (128, 256, 64), 3, 1, 1),
    (F16, (4096,) * 3, (128, 256, 64), 3, 16, 1),
    (F16, (4096,) * 3, (128, 256, 64), 4, 4, 1),
    (F16, (4096,) * 3, (128, 256, 64), 3, 4, 2),
    (F16, (4096,) * 3, (128, 256, 64), 3, 8, 2),
    (F16, (4096,) * 3, (128, 256, 64), 4, 4, 2),
    (F16, (8192,) * 3, (128, 256, 64), 3, 16, 1),
    (F16, (8192,) * 3, (128, 256, 64), 3, 16, 2),
    (E4M3, (4096,) * 3, (128, 256, 128), 3, 8, 1),
    (E4M3, (4096,) * 3, (128, 256, 128), 3, 8, 2),
]


def name_of(operand, size, block, stages, group, cluster, unread=False) -> str:
    return f"{SHORT[operand]}_{size[0]}_b{'x'.join(map(str, block))}_s{stages}_p{group}_x{cluster}" \
        + ("_set" if unread else "")


def plan_of(operand, size, block, stages, group, cluster, unread=False) -> tuple:
    b_layout = acc.Array.Layout.LAST_MAJOR if operand is E4M3 else acc.Array.Layout.FIRST_MAJOR
    return hopper_matmul.matmul(*size, operand=operand, block=block, stages=stages,
                                output=BF16 if operand is E4M3 else operand, b_layout=b_layout,
                                persistent={"group": group}, cluster=cluster,
                                prologue=(acc.MMAFragmentOp.SET, 0.0) if unread else None)


if __name__ == "__main__":
    build(__doc__, "power", ((name_of(*v), lambda v=v: plan_of(*v)) for v in VARIANTS))
