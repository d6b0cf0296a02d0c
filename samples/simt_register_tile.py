#!/usr/bin/env python3
"""Hello MatMul with register tiles: C += A @ B in float32 on the SIMT cores, each thread
computing a 4x4 tile of C that stays in registers for the whole k loop.

M=2048, N=1024, K=2048 (hello_matmul's sizes). 64x64 blocks of 16x16 threads; A's 64x16 and
B's 16x64 tiles for each 16 values of k come through shared memory, double-buffered with
cp.async; ``plan.cache(C, index=k, location=PRIVATE)`` keeps each thread's 4x4 tile of C in
registers (the loops over it, iii and jjj, are unrolled), loaded once before k and stored once
after it. Against hello_matmul (one element per thread, C read and written for every k): each
value read from shared memory feeds 4 products instead of 1.
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def register_tile(M: int = 2048, N: int = 1024, K: int = 2048):
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, 64), schedule.split(j, 64)  # a block's tile of C
    iii, jjj = schedule.split(ii, 4), schedule.split(jj, 4)  # a thread's 4x4 tile
    kk = schedule.split(k, 16)
    schedule.reorder(i, j, ii, jj, k, kk, iii, jjj)

    plan = schedule.create_plan(target)
    plan.bind({
        i: target.GridUnit.BLOCK_Y,
        j: target.GridUnit.BLOCK_X,
        ii: target.GridUnit.THREAD_Y,
        jj: target.GridUnit.THREAD_X,
    })
    plan.cache(C, index=k, location=target.MemorySpace.PRIVATE)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, double_buffer=True)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, double_buffer=True)
    return plan, (A, B, C)


if __name__ == "__main__":
    package = acc.Package()
    package.add(*register_tile(), base_name="simt_register_tile")
    package.build("simt_register_tile", format=acc.Package.Format.HAT_SOURCE,
                  output_dir="hat_packages/simt_register_tile")
