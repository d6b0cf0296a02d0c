#!/usr/bin/env python3
"""tensor_matmul with Accera's output caching: each warp keeps its 16x16 tile of C in a
tensor-core fragment across the whole k loop (loaded once, stored once) instead of reading and
writing C in global memory at every k step.

float16 A and B, float32 C, 4096^3; 32x32 blocks of 2x2 warps; two M16xN16xK16 passes per k step.
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
passes = 2
tensor_splits = target.tensor_core_info.compute_tensor_splits(mma_shape, passes)
iii, jjj, kk = schedule.tile({ii: tensor_splits[0], jj: tensor_splits[1], k: tensor_splits[2]})
schedule.reorder(i, j, k, ii, jj, iii, jjj, kk)

plan = schedule.create_plan(target)
plan.bind({
    i: target.GridUnit.BLOCK_Y,
    j: target.GridUnit.BLOCK_X,
    ii: target.GridUnit.WARP_Y,
    jj: target.GridUnit.WARP_X,
})
plan.tensorize(indices=(iii, jjj, kk), mma_shape=mma_shape, num_total_passes=passes)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="tensor_matmul_output_cache")
package.build("tensor_matmul_output_cache", format=acc.Package.Format.HAT_SOURCE,
              output_dir="hat_packages/tensor_matmul_output_cache")
