#!/usr/bin/env python3
"""Split-K on Hopper: a K-heavy product whose output tiles are too few for the GPU.

C = A @ B at 1024 x 1024 x 14336 (fp16 and bf16, C of the operands' type) has 64 output tiles
of 128 x 128 for 132 multiprocessors. The plan of ``samples/hopper_matmul.py`` with k split in
two parts bound to BLOCK_Z (``splits=2``) runs 128 blocks: each sums 7168 values of k into its
slice of a float32 workspace, then a second kernel adds the two slices to C in a fixed order
(the same bits every run). On sm_90 the second kernel is launched as a programmatic dependent of
the first, so it starts without a launch gap.

``matmul_<type>_1024x1024x14336_adds`` lets the blocks combine in any order instead
(``plan.split_k(deterministic=False)``): k in four parts with 128 x 256 tiles, each block adds its
tile of sums into C by TMA reductions, with no workspace and no second kernel (the rounding may
differ between runs).

Written out, the split is two lines of the schedule and one binding::

    kz = k
    k = schedule.split(kz, K // 2)           # kz: 2 parts of k ...
    plan.bind({kz: BLOCK_Z, i: BLOCK_Y, ...})  # ... one on each block along z
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hopper_matmul  # noqa: E402

import schedc as acc  # noqa: E402

if __name__ == "__main__":
    package = acc.Package()
    for operand, name in ((acc.ScalarType.float16, "fp16"), (acc.ScalarType.bfloat16, "bf16")):
        plan, args = hopper_matmul.matmul(1024, 1024, 14336, operand, block=(128, 128, 64), stages=5, output=operand,
                                          splits=2, persistent={"group": 8})
        package.add(plan, args, base_name=f"matmul_{name}_1024x1024x14336")
        plan, args = hopper_matmul.matmul(1024, 1024, 14336, operand, block=(128, 256, 64), stages=4, output=operand,
                                          splits=4)
        plan.split_k(deterministic=False)
        package.add(plan, args, base_name=f"matmul_{name}_1024x1024x14336_adds")
    package.build("split_k_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/split_k_matmul")
