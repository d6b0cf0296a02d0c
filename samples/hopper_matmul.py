#!/usr/bin/env python3
"""Hopper matrix products: wgmma on operand tiles that TMA copies into a ring of shared
buffers, a producer warpgroup and consumer warpgroups meeting at mbarriers.

C = A @ B with 128 x 256 block tiles and 64 values of k (32 for tf32) per stage: two consumer
warpgroups each keep a 64 x 256 tile of C in registers (``M64xN256xK16_B1``: one wgmma per 16
values of k) while a producer warpgroup issues the TMA
copies of A's 128 x 64 and B's 64 x 256 tiles, ``stages`` tiles ahead.

- ``matmul_<type>_<M>``: float16 / bfloat16 operands and C of the same type, accumulated in
  float32 fragments (``plan.cache(C, ..., location=MMA_FRAGMENT, element_type=float32)`` as
  Accera writes it), at 4096^3 and 8192^3; ``matmul_<type>_<M>_f32c``: float32 C;
- ``matmul_tf32_4096``: float32 operands (tf32 tensor cores, ``M64xN256xK8_B1``) with a
  column-major B (tf32 wgmma reads k-contiguous operands); 128 x 256 tiles with 3 stages of 32
  values of k (1.006x cuBLAS on the H200, against 0.922 with 128 x 128 tiles: BENCHMARKS.md);
- ``matmul_fp16_2048x1024x2048``: Accera's tutorial shape (128 x 128 tiles, float16 C);
- ``matmul_fp16_8192x4096x2048_added``: a short k, where C's traffic is a large share: each block
  adds its tiles' sums into C by TMA reductions instead of loading C and storing it
  (``plan.split_k(deterministic=False)`` without a split; the sum rounded to C's type before the
  addition), 1.00-1.02x cuBLAS on the H200 against 0.98 loading C (BENCHMARKS.md).

Every function runs on a persistent grid (``plan.persistent(group=8)``; ``GROUPS`` names the
float16-C functions measured faster with another group): one block per
multiprocessor loops over the tiles, so that the producer copies the next tile's operands while
the consumers store C. The 128 x 256 functions keep 3 stages: beside them the two warpgroups'
whole 64 x 256 tiles of 16-bit C fit in shared memory (of float32 C, four of each tile's eight
64 x 32 chunks, a slot refilled once its chunk has left), so C comes in by TMA while the products
run and leaves by TMA from the same slots; the 128 x 128 ones keep 4. (Clusters of two blocks
sharing B's tile by multicast, ``cluster=2``, are slower on these plans: BENCHMARKS.md.) ``matmul``
takes the sizes, the operand type, the tile, the stages, whether the plan is warp-specialized,
C's type, the persistent grid's arguments, the cluster size and whether C is added into.
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
SHAPES = {acc.ScalarType.float16: "M64xN{n}xK16_B1", acc.ScalarType.bfloat16: "M64xN{n}xK16_B1",
          acc.ScalarType.float32: "M64xN{n}xK8_B1", acc.ScalarType.float8_e4m3: "M64xN{n}xK32_B1",
          acc.ScalarType.float8_e5m2: "M64xN{n}xK32_B1", acc.ScalarType.int8: "M64xN{n}xK32_B1",
          acc.ScalarType.uint8: "M64xN{n}xK32_B1"}


def matmul(M: int, N: int, K: int, operand=acc.ScalarType.float16, block=(128, 256, 64), stages: int = 4,
           specialize: bool = True, b_layout=acc.Array.Layout.FIRST_MAJOR, warpgroup_n: int | None = None,
           output=acc.ScalarType.float32, persistent: dict | None = None, cluster: int = 1,
           epilogue: tuple | None = None, prologue: tuple | None = None, a_layout=acc.Array.Layout.FIRST_MAJOR,
           splits: int = 1, teams: int = 1, added: bool = False):
    """The plan and its arrays. ``block`` = (m, n, k) of a block's tile; each consumer
    warpgroup computes 64 rows x ``warpgroup_n`` (default: the block's n) columns; C has
    the type ``output`` and is accumulated in float32 fragments; ``persistent``: the arguments of
    ``plan.persistent`` (resident blocks looping over the tiles), or None for one block a tile;
    ``cluster``: blocks of a column of tiles (BLOCK_Y) that share B's tile by TMA multicast;
    ``epilogue``: an ``(MMAFragmentOp, argument)`` applied to each result before it is stored;
    ``prologue``: one applied to C's fragments before the products (``SET``: they start from the
    argument and C is not read); ``a_layout``, ``b_layout``: the operands' layouts; ``splits``: blocks
    along BLOCK_Z that each sum ``K / splits`` values of k (split-K: schedc adds the partial sums in a
    second kernel); ``teams``: with 2 (ping-pong, persistent grids), two consumer warpgroups take the
    block's tiles in turn, each holding a whole block tile (its 64-row parts register-blocked), so
    that one stores C while the other multiplies; ``added``: each block adds its tiles' sums into C by
    TMA reductions (``plan.split_k(deterministic=False)``; with ``splits`` the parts' sums)."""
    bm, bn, bk = block
    wn = warpgroup_n or bn
    shape = acc.MMAShape[SHAPES[operand].format(n=wn)]
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K), layout=a_layout)
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N), layout=b_layout)
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=output, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        if operand.is_float:
            C[i, j] += A[i, k] * B[k, j]
        else:  # 8-bit integers multiplied in int32, as the tensor cores do (in int8 they would wrap)
            C[i, j] += acc.cast(A[i, k], output) * acc.cast(B[k, j], output)

    schedule = nest.create_schedule()
    ks = schedule.split(k, K // splits) if splits > 1 else k  # k: the blocks' parts of the sum
    ii, jj, kk = schedule.split(i, bm), schedule.split(j, bn), schedule.split(ks, bk)
    iii, jjj = schedule.split(ii, 64), schedule.split(jj, wn)  # one warpgroup's tile of C
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape)
    iiii, jjjj, kkk = schedule.tile({iii: m, jjj: n, kk: mk})
    outer = (k, i, j) if splits > 1 else (i, j)
    if teams == 1:  # the block's warpgroups share its tile: 64 rows each
        schedule.reorder(*outer, ii, jj, ks, kk, iii, jjj, iiii, jjjj, kkk)
    else:  # each team's warpgroup holds the whole tile, 64 rows at a time
        schedule.reorder(*outer, jj, ks, kk, ii, iii, jjj, iiii, jjjj, kkk)

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               **({ii: target.GridUnit.WARPGROUP_Y} if teams == 1 else {}), jj: target.GridUnit.WARPGROUP_X,
               **({k: target.GridUnit.BLOCK_Z} if splits > 1 else {})})
    op, arg = epilogue or (acc.MMAFragmentOp.NONE, 0.0)
    first_op, first_arg = prologue or (acc.MMAFragmentOp.NONE, 0.0)
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=shape, prologue_op=first_op, prologue_arg=first_arg,
                   epilogue_op=op, epilogue_arg=arg)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    integer = operand in (acc.ScalarType.int8, acc.ScalarType.uint8)  # int32 fragments; floats' in float32
    plan.cache(C, index=ks, location=target.MemorySpace.MMA_FRAGMENT,
               element_type=acc.ScalarType.int32 if integer else acc.ScalarType.float32)
    plan.warp_specialize(specialize, teams=teams)
    if persistent is not None:
        plan.persistent(**persistent)
    if cluster > 1:
        plan.cluster(cluster, target.GridUnit.BLOCK_Y)
    if added:
        plan.split_k(deterministic=False)
    return plan, (A, B, C)


# rows of blocks per group of the persistent grid, where another than 8 measured faster for
# float16 C (H200, BENCHMARKS.md 2026-11-24: 4096^3 0.2131 ms with 4 against 0.2184 with 8)
GROUPS = {("fp16", 4096): 4, ("fp16", 8192): 16}

if __name__ == "__main__":
    package = acc.Package()
    grouped = {"group": 8}  # persistent blocks, tiles in groups of 8 rows of blocks
    for operand, name in ((acc.ScalarType.float16, "fp16"), (acc.ScalarType.bfloat16, "bf16")):
        for size in (4096, 8192):
            package.add(*matmul(size, size, size, operand, output=operand, stages=3,
                                persistent={"group": GROUPS.get((name, size), 8)}),
                        base_name=f"matmul_{name}_{size}")
            package.add(*matmul(size, size, size, operand, stages=3, persistent=grouped),
                        base_name=f"matmul_{name}_{size}_f32c")
    package.add(*matmul(4096, 4096, 4096, acc.ScalarType.float32, block=(128, 256, 32), stages=3,
                        b_layout=acc.Array.Layout.LAST_MAJOR, persistent=grouped), base_name="matmul_tf32_4096")
    package.add(*matmul(2048, 1024, 2048, block=(128, 128, 64), output=acc.ScalarType.float16, persistent=grouped),
                base_name="matmul_fp16_2048x1024x2048")
    package.add(*matmul(8192, 4096, 2048, output=acc.ScalarType.float16, stages=3, persistent={"group": 4},
                        added=True), base_name="matmul_fp16_8192x4096x2048_added")
    package.build("hopper_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/hopper_matmul")
