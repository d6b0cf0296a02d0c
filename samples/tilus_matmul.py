#!/usr/bin/env python3
"""Pipelined fp16 matrix products in the style of Tilus' MatmulV3 and MatmulV4: C = A @ B with
float16 A and B and float32 C, 128x128 block tiles, 32 values of k per step.

Eight warps (2 x 4) each compute a 64x32 tile of C as 4 x 2 tensor-core tiles kept in
fragments across the whole k loop (register blocking). A's 128x32 and B's 32x128 tiles come
through shared memory with cp.async:

- ``matmul_v3``: one stage: request the tiles, wait for all, compute (Tilus MatmulV3);
- ``matmul_v4_s3/s4/s5``: a ring of 3, 4 or 5 stages (Tilus MatmulV4): the copies of the
  next tiles overlap the products on this one.

Each is built at 4096^3 and at M=N=1024, K=14336. ``matmul`` also takes bfloat16 and float32
operands (tf32 tensor cores, 16x16x8), sizes the tiles do not divide (samples/odd_sizes.py), a
column-major B (benchmarks/layouts.py) and the tensor-core instruction family
(benchmarks/families.py: wmma or ldmatrix + mma.sync; AUTO picks mma.sync on sm_80+) and
the block and warp tiles and the blocks each multiprocessor should hold.
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
MMA_SHAPES = {acc.ScalarType.float16: acc.MMAShape.M16xN16xK16_B1,
              acc.ScalarType.bfloat16: acc.MMAShape.M16xN16xK16_B1,
              acc.ScalarType.float32: acc.MMAShape.M16xN16xK8_B1}  # tf32
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
WARP_M, WARP_N = 64, 32


def matmul(M: int, N: int, K: int, stages: int, operand=acc.ScalarType.float16,
           b_layout=acc.Array.Layout.FIRST_MAJOR, instruction=acc.Instruction.AUTO, warp=(WARP_M, WARP_N),
           block=(BLOCK_M, BLOCK_N, BLOCK_K), blocks_per_sm=None):
    mma_shape = MMA_SHAPES[operand]
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N), layout=b_layout)
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii, jj, kk = schedule.split(i, block[0]), schedule.split(j, block[1]), schedule.split(k, block[2])
    iii, jjj = schedule.split(ii, warp[0]), schedule.split(jj, warp[1])  # a warp's tile of C
    m, n, mk = target.tensor_core_info.compute_tensor_splits(mma_shape)
    iiii, jjjj, kkk = schedule.tile({iii: m, jjj: n, kk: mk})  # one tensor-core tile
    schedule.reorder(i, j, ii, jj, k, kk, iii, jjj, iiii, jjjj, kkk)

    plan = schedule.create_plan(target, _blocks_per_SM=blocks_per_sm)
    plan.bind({
        i: target.GridUnit.BLOCK_Y,
        j: target.GridUnit.BLOCK_X,
        ii: target.GridUnit.WARP_Y,
        jj: target.GridUnit.WARP_X,
    })
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=mma_shape, instruction=instruction)
    plan.unroll(kk)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=stages)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=stages)
    plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)  # 4 x 2 fragments per warp
    return plan, (A, B, C)


if __name__ == "__main__":
    package = acc.Package()
    for M, N, K, suffix in ((4096, 4096, 4096, ""), (1024, 1024, 14336, "_k14336")):
        package.add(*matmul(M, N, K, 1), base_name=f"matmul_v3{suffix}")
        for stages in (3, 4, 5):
            plan, args = matmul(M, N, K, stages)
            package.add(plan, args=args, base_name=f"matmul_v4_s{stages}{suffix}")
    package.build("tilus_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tilus_matmul")
