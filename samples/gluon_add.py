#!/usr/bin/env python3
"""Element-wise addition C = A + B of 32768x32768 float32 arrays (Gluon's pipelining tutorial).

Each block walks one row in steps of 1024 elements; 256 threads, each adding 4 elements per
step (a warp reads and writes 128 contiguous bytes at a time). Four plans of one schedule:

- ``add_plain``: threads read A and B from global memory;
- ``add_async``: each step's 1024 elements of A and B come through shared memory with cp.async
  (request, wait for all, compute);
- ``add_pipelined_2`` / ``add_pipelined_3``: a ring of 2 or 3 buffers, the next steps' elements
  requested while this step computes.
"""

import schedc as acc

M = N = 32768
target = acc.Target(acc.Target.Model.NVIDIA_H100)


def add(stages: int | None, M: int = M, N: int = N):
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    C = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

    nest = acc.Nest(shape=(M, N))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = A[i, j] + B[i, j]

    schedule = nest.create_schedule()
    jj = schedule.split(j, 1024)  # one step of the row
    jjj = schedule.split(jj, 256)  # one element per thread, 4 times per step

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, jjj: target.GridUnit.THREAD_X})
    if stages is not None:
        plan.cache(A, index=jj, location=target.MemorySpace.SHARED, stages=stages)
        plan.cache(B, index=jj, location=target.MemorySpace.SHARED, stages=stages)
    return plan, (A, B, C)


PLANS = {"add_plain": None, "add_async": 1, "add_pipelined_2": 2, "add_pipelined_3": 3}

if __name__ == "__main__":
    package = acc.Package()
    for name, stages in PLANS.items():
        package.add(*add(stages), base_name=name)
    package.build("gluon_add", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/gluon_add")
