#!/usr/bin/env python3
"""Accera's Hello MatMul on GPU: C += A @ B in float32, one thread per element of C.

M=2048, N=1024, K=2048; 32x32 blocks of threads; the k loop runs in each thread.
Build with ``schedc build samples/hello_matmul.py`` (writes hat_packages/hello_matmul/).
"""

import schedc as acc

M, N, K = 2048, 1024, 2048
block_x, block_y = 32, 32

A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, K))
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(K, N))
C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
ii = schedule.split(i, block_x)
jj = schedule.split(j, block_y)
schedule.reorder(i, j, ii, jj, k)

target = acc.Target(acc.Target.Model.NVIDIA_H100)
plan = schedule.create_plan(target)
plan.bind({
    i: target.GridUnit.BLOCK_Y,
    j: target.GridUnit.BLOCK_X,
    ii: target.GridUnit.THREAD_Y,
    jj: target.GridUnit.THREAD_X,
})

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="hello_matmul")
package.build("hello_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/hello_matmul")
