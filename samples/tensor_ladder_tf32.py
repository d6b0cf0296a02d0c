#!/usr/bin/env python3
"""Accera's caching ladder on tf32 tensor cores: float32 A, B and C, M=2048 N=1024 K=2048.

One package, one function per step, each adding one cache to the one before:

1. ``tensor_matmul_tf32``: warps read A and B from global memory, C per product;
2. ``tensor_input_cache_tf32``: A's and B's tiles for 128 values of k in shared memory
   (sequential: barrier, copy, barrier) -- 16 KiB each, as 256 values of fp16;
3. ``tensor_input_double_buffer_cache_tf32``: the same tiles double-buffered with cp.async;
4. ``tensor_input_output_cache_tf32``: plus each warp's tile of C in a fragment across k.
"""

import schedc as acc

M, N, K = 2048, 1024, 2048
block_x, block_y = 32, 32
target = acc.Target(acc.Target.Model.NVIDIA_H100)
mma_shape = acc.MMAShape.M16xN16xK8_B1
SHARED, FRAGMENT = target.MemorySpace.SHARED, target.MemorySpace.MMA_FRAGMENT


def step(input_cache: bool = False, double_buffer: bool = False, output_cache: bool = False):
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, block_x), schedule.split(j, block_y)
    kk = schedule.split(k, 128)
    m, n, mk = target.tensor_core_info.compute_tensor_splits(mma_shape)
    iii, jjj, kkk = schedule.tile({ii: m, jj: n, kk: mk})
    schedule.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)

    plan = schedule.create_plan(target)
    plan.bind({
        i: target.GridUnit.BLOCK_Y,
        j: target.GridUnit.BLOCK_X,
        ii: target.GridUnit.WARP_Y,
        jj: target.GridUnit.WARP_X,
    })
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=mma_shape)
    if input_cache:
        plan.cache(A, index=kk, location=SHARED, double_buffer=double_buffer)
        plan.cache(B, index=kk, location=SHARED, double_buffer=double_buffer)
    if output_cache:
        plan.cache(C, index=k, location=FRAGMENT)
    return plan, (A, B, C)


package = acc.Package()
package.add(*step(), base_name="tensor_matmul_tf32")
package.add(*step(input_cache=True), base_name="tensor_input_cache_tf32")
package.add(*step(input_cache=True, double_buffer=True), base_name="tensor_input_double_buffer_cache_tf32")
package.add(*step(input_cache=True, double_buffer=True, output_cache=True),
            base_name="tensor_input_output_cache_tf32")
package.build("tensor_ladder_tf32", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tensor_ladder_tf32")
