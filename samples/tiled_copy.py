#!/usr/bin/env python3
"""A tiled copy through shared memory (CuTe DSL's tiled copy): B = A, 8192x8192 float16.

Each block owns a 64x128 tile. Its 512 threads request the tile with cp.async, 16 bytes per
thread per copy, wait for it, and then each thread writes 16 rows of one column of B from
shared memory (a warp writes 64 contiguous bytes per row).

``tiled_copy_tma``: the same, but one thread asks the tensor memory accelerator for the whole
tile (``engine=CopyEngine.TMA``, sm_90) and every thread waits on the tile's mbarrier.
"""

import schedc as acc

M = N = 8192
target = acc.Target(acc.Target.Model.NVIDIA_H100)


def tiled_copy(M: int = M, N: int = N, engine=acc.CopyEngine.AUTO):
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, N))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float16, shape=(M, N))

    nest = acc.Nest(shape=(M, N))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[i, j]

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, 64), schedule.split(j, 128)  # the block's tile
    iii = schedule.split(ii, 16)  # 16 rows per thread
    schedule.reorder(i, j, ii, jj, iii)

    plan = schedule.create_plan(target)
    plan.bind({
        i: target.GridUnit.BLOCK_Y,
        j: target.GridUnit.BLOCK_X,
        ii: target.GridUnit.THREAD_Y,
        jj: target.GridUnit.THREAD_X,
    })
    plan.cache(A, index=iii, location=target.MemorySpace.SHARED, stages=1, engine=engine)  # copy, then wait
    return plan, (A, B)


if __name__ == "__main__":
    package = acc.Package()
    package.add(*tiled_copy(), base_name="tiled_copy")
    package.add(*tiled_copy(engine=acc.CopyEngine.TMA), base_name="tiled_copy_tma")
    package.build("tiled_copy", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tiled_copy")
