"""A matrix product whose number of rows M is known only at run time (``acc.create_dimensions``):
one function serves a decode step (M = 1), a small batch and a whole prefill (M = 4096).

C = A @ B in fp16 with N = K = 4096 on the Hopper plan of ``hopper_matmul.py`` (128 x 256 tiles, 3
stages, a producer warpgroup, a persistent grid): the analysis proves it for every M >= 1, the
launcher computes the grid from M at each call (as many resident blocks as there are tiles, one a
multiprocessor at most), TMA reads zeros past the last row and stores nothing there. A Python
caller passes the arrays only (``gemm_m(A, B, C)``: M is read from their shapes); the C launcher
takes M where ``args`` puts it, first: ``gemm_m(M, A, B, C)``.

- ``gemm_m``: run-time M;
- ``gemm_4096``: the same plan at M = 4096 fixed (benchmarks/runtime_m.py compares the two);
- ``gemm_m_decode``: run-time M on a plan for few rows (64 x 64 tiles, 8 stages of 64 values of k,
  one consumer warpgroup, 64 blocks along N however small M is; the best of the plans
  benchmarks/decode_plans.py times): which plan serves which M is the caller's choice here (a
  tuner's dispatch, in time);
- ``rows_m``: a SIMT kernel (``B = relu(A) * 2`` over rows of 1024) with run-time rows, 8 rows a block;
- ``softmax_m``, ``layernorm_m``: ``samples/softmax.py``'s fast softmax and ``samples/layernorm.py``'s
  one-pass layer norm over M rows of 4096 float16 values: their row maxima and sums are TEMP arrays
  of M elements kept in global memory here (``scratch=False``; the samples' default keeps them in
  shared memory), which the loader allocates for the call's M (a C caller passes them, sized by
  the .hat's formula).
"""

from hopper_matmul import matmul
from layernorm import layernorm
from softmax import softmax

import schedc as acc

N = K = 4096
PLAN = {"block": (128, 256, 64), "stages": 3, "output": acc.ScalarType.float16, "persistent": {"group": 8}}
DECODE = {"block": (64, 64, 64), "stages": 8, "output": acc.ScalarType.float16}  # benchmarks/decode_plans.py


def rows_plan(M, columns: int = 1024):
    """``B[i, j] = max(A[i, j], 0) * 2`` over M rows: 8 rows x 128 columns a block of 256 threads."""
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, columns))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float16, shape=(M, columns))
    nest = acc.Nest(M, columns)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = acc.max(A[i, j], 0.0) * 2.0

    schedule = nest.create_schedule()
    ii, jj = schedule.tile({i: 8, j: 128})
    schedule.split(jj, 4)  # each thread: 4 consecutive columns
    plan = schedule.create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))
    plan.bind({i: acc.GridUnit.BLOCK_Y, j: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y,
               jj: acc.GridUnit.THREAD_X})
    return plan, (A, B)


M = acc.create_dimensions()
package = acc.Package()
plan, (A, B, C) = matmul(M, N, K, **PLAN)
package.add(plan, args=(M, A, B, C), base_name="gemm_m")
plan, args = matmul(4096, N, K, **PLAN)
package.add(plan, args=args, base_name="gemm_4096")
plan, (A, B, C) = matmul(M, N, K, **DECODE)
package.add(plan, args=(M, A, B, C), base_name="gemm_m_decode")
plan, (X, Y) = rows_plan(M)
package.add(plan, args=(X, Y, M), base_name="rows_m")
plan, (X, Y) = softmax(M, 4096, acc.ScalarType.float16, 256, fast=True, scratch=False)
package.add(plan, args=(M, X, Y), base_name="softmax_m")
plan, (X, gamma, beta, Y) = layernorm(M, 4096, acc.ScalarType.float16, 256, one_pass=True, scratch=False)
package.add(plan, args=(M, X, gamma, beta, Y), base_name="layernorm_m")
package.build("runtime_m", output_dir="hat_packages")
