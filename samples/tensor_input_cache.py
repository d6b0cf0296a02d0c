#!/usr/bin/env python3
"""Accera's Tensor MatMul with input caching: float16 A and B, float32 C, 4096^3.

kk = split(k, 256); before each 256-wide chunk of k the block copies its 32x256 tile of A and
256x32 tile of B into shared memory (barrier, copy, barrier) and the warps' tensor-core loads
read from there (Accera's "sequential caching").
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
kk = schedule.split(k, 256)  # the k chunk whose A and B tiles are cached

target = acc.Target(acc.Target.Model.NVIDIA_H100)
mma_shape = acc.MMAShape.M16xN16xK16_B1
tensor_splits = target.tensor_core_info.compute_tensor_splits(mma_shape)
iii, jjj, kkk = schedule.tile({ii: tensor_splits[0], jj: tensor_splits[1], kk: tensor_splits[2]})
schedule.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)

plan = schedule.create_plan(target)
plan.bind({
    i: target.GridUnit.BLOCK_Y,
    j: target.GridUnit.BLOCK_X,
    ii: target.GridUnit.WARP_Y,
    jj: target.GridUnit.WARP_X,
})
plan.tensorize(indices=(iii, jjj, kkk), mma_shape=mma_shape)
plan.cache(A, index=kk, location=target.MemorySpace.SHARED)
plan.cache(B, index=kk, location=target.MemorySpace.SHARED)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="tensor_input_cache")
package.build("tensor_input_cache", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tensor_input_cache")
