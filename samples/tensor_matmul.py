#!/usr/bin/env python3
"""Accera's Tensor MatMul on GPU: float16 A and B, float32 C, on the tensor cores (mma.sync on
sm_80+; ``tensorize(..., instruction=acc.Instruction.WMMA)`` for wmma).

M=N=K=4096. Each 32x32 block of C is computed by 2x2 warps, each warp one 16x16 tile with
M16xN16xK16_B1 operations; operands are read from global memory (no caches yet).
"""

import schedc as acc

M, N, K = 4096, 4096, 4096
block_x, block_y = 32, 32

A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, K))
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(K, N))
C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
ii = schedule.split(i, block_x)
jj = schedule.split(j, block_y)

target = acc.Target(acc.Target.Model.NVIDIA_H100)
mma_shape = acc.MMAShape.M16xN16xK16_B1
tensor_splits = target.tensor_core_info.compute_tensor_splits(mma_shape)
iii, jjj, kk = schedule.tile({ii: tensor_splits[0], jj: tensor_splits[1], k: tensor_splits[2]})
schedule.reorder(i, j, k, ii, jj, iii, jjj, kk)

plan = schedule.create_plan(target)
plan.bind({
    i: target.GridUnit.BLOCK_Y,
    j: target.GridUnit.BLOCK_X,
    ii: target.GridUnit.WARP_Y,
    jj: target.GridUnit.WARP_X,
})
plan.tensorize(indices=(iii, jjj, kk), mma_shape=mma_shape)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="tensor_matmul")
package.build("tensor_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tensor_matmul")
