#!/usr/bin/env python3
"""Build the same GEMM plans on each tensor-core instruction family (schedc.instructions):
wmma and ldmatrix + mma.sync, so that one device run times them side by side.

- ``v4_<type>_<family>``: the Tilus MatmulV4 plan (samples/tilus_matmul.py: 128x128x32 blocks,
  8 warps of 64x32, 3-stage cp.async ring, C in fragments) at 4096^3 for float16, bfloat16 and
  float32 (tf32) operands, float32 C;
- ``fp16_mma_b<M>x<N>x<K>_w<M>x<N>_s<stages>[_<n>_per_sm]``: fp16 on mma.sync with other block
  tiles, warp tiles, stages and ``create_plan(_blocks_per_SM=n)`` (``TILES``);
- ``ladder<step>_<type>_<family>``: Accera's caching ladder at its tutorial's tiles (32x32
  blocks of 2x2 warps, ``kk = split(k, 256)``, order i, j, k, kk, ii, jj, iii, jjj, kkk) at
  2048x1024x2048: 1 no cache, 2 sequential shared caches of A and B, 3 double-buffered, 4 plus
  C in fragments.

Usage: python benchmarks/families.py [OUTPUT_DIR]   (hat_packages unless given), then on the GPU
    schedc verify hat_packages/families/families.hat
    schedc bench hat_packages/families/families.hat --compare cublas --time-in-ms --min-time 0.5
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import tilus_matmul  # noqa: E402

import schedc as acc  # noqa: E402

TYPES = {"fp16": acc.ScalarType.float16, "bf16": acc.ScalarType.bfloat16, "tf32": acc.ScalarType.float32}
FAMILIES = {"wmma": acc.Instruction.WMMA, "mma": acc.Instruction.MMA_SYNC}
target = acc.Target(acc.Target.Model.NVIDIA_H100)
# other tiles of the fp16 plan: (block m, n, k), (warp m, n), stages, blocks per SM (None: any)
TILES = [((128, 128, 32), (64, 64), 3, None), ((128, 128, 32), (64, 64), 4, None), ((128, 128, 32), (64, 64), 3, 3),
         ((128, 128, 32), (64, 64), 4, 3), ((128, 128, 32), (64, 32), 3, 3), ((128, 256, 32), (64, 64), 3, None),
         ((128, 128, 32), (32, 64), 3, 4)]


def ladder(step: int, operand: acc.ScalarType, instruction: acc.Instruction, M=2048, N=1024, K=2048, k_block=256):
    """Step 1..4 of Accera's ladder (its GPU tutorial's tiles; samples/tensor_ladder_tf32.py
    takes k_block 128)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii, jj, kk = schedule.split(i, 32), schedule.split(j, 32), schedule.split(k, k_block)
    shape = tilus_matmul.MMA_SHAPES[operand]
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape)
    iii, jjj, kkk = schedule.tile({ii: m, jj: n, kk: mk})
    schedule.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=shape, instruction=instruction)
    if step >= 2:
        plan.cache(A, index=kk, location=target.MemorySpace.SHARED, double_buffer=step >= 3)
        plan.cache(B, index=kk, location=target.MemorySpace.SHARED, double_buffer=step >= 3)
    if step >= 4:
        plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    return plan, (A, B, C)


def main() -> None:
    output = sys.argv[1] if len(sys.argv) > 1 else "hat_packages"
    package = acc.Package()
    for type_name, operand in TYPES.items():
        for family_name, instruction in FAMILIES.items():
            package.add(*tilus_matmul.matmul(4096, 4096, 4096, 3, operand=operand, instruction=instruction),
                        base_name=f"v4_{type_name}_{family_name}")
    for block, warp, stages, blocks_per_sm in TILES:
        name = f"fp16_mma_b{'x'.join(map(str, block))}_w{warp[0]}x{warp[1]}_s{stages}"
        name += f"_{blocks_per_sm}_per_sm" if blocks_per_sm else ""
        package.add(*tilus_matmul.matmul(4096, 4096, 4096, stages, warp=warp, block=block, blocks_per_sm=blocks_per_sm,
                                         instruction=acc.Instruction.MMA_SYNC), base_name=name)
    for type_name in ("fp16", "tf32"):
        for family_name, instruction in FAMILIES.items():
            for step in (1, 2, 3, 4):
                package.add(*ladder(step, TYPES[type_name], instruction),
                            base_name=f"ladder{step}_{type_name}_{family_name}")
    for family_name, instruction in FAMILIES.items():
        for step in (2, 3):
            package.add(*ladder(step, TYPES["tf32"], instruction, k_block=128),
                        base_name=f"ladder{step}_tf32_k128_{family_name}")
    print(package.build("families", format=acc.Package.Format.HAT_SOURCE, output_dir=f"{output}/families"))


if __name__ == "__main__":
    main()
