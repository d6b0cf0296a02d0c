#!/usr/bin/env python3
"""A 1-D memcpy through shared memory with cp.async (Gluon's memcpy tutorial): B = A, 2^28 floats.

Each block copies 4096 elements: its 256 threads request them with cp.async (16 bytes each per
copy), wait, and write them from shared memory to B (a warp writes 128 contiguous bytes).
"""

import schedc as acc

N = 1 << 28
target = acc.Target(acc.Target.Model.NVIDIA_H100)


def memcpy(N: int = N):
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(N,))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(N,))

    nest = acc.Nest(shape=(N,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] = A[i]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 4096)  # a block's elements
    iii = schedule.split(ii, 256)  # one per thread, 16 times

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, iii: target.GridUnit.THREAD_X})
    plan.cache(A, index=ii, location=target.MemorySpace.SHARED, stages=1)
    return plan, (A, B)


if __name__ == "__main__":
    package = acc.Package()
    package.add(*memcpy(), base_name="gluon_memcpy")
    package.build("gluon_memcpy", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/gluon_memcpy")
