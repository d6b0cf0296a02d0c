#!/usr/bin/env python3
"""A Hopper matrix product to tune: ``schedc tune samples/tune_matmul.py``.

C = A @ B (float16 or bfloat16 operands and C of their type; or float8_e4m3 operands, B
column-major, and C of bfloat16; float32 accumulators) as in ``samples/hopper_matmul.py``: wgmma
on TMA-filled rings of shared tiles, warpgroups of 64 rows of the block's tile, a persistent grid.
What ``hopper_matmul`` fixes by hand is a parameter here:

- ``BM`` x ``BN``: the block's tile of C (``BM / 64`` consumer warpgroups, each 64 x ``BN``); a
  ``BN`` of 192 suits some ragged shapes, and where a width between (``fitted_width``, any
  multiple of 8) fills the waves better the grid has it too (5000 x 3000 x 4000: 520 tiles of
  128 x 232 fill 3.94 waves of 132 multiprocessors, 640 of 128 x 192 4.85, 480 of 128 x 256 3.64);
- ``BK``: values of k per stage, ``STAGES``: the ring's depth;
- ``GROUP``: rows of blocks per group of the persistent grid's tile order;
- ``CLUSTER``: blocks of a column sharing B's tile by TMA multicast (1: none);
- ``SPECIALIZE``: a producer warpgroup issuing the copies, or every warpgroup computing;
- ``TEAMS``: 2 gives the block two teams of ``BM / 64`` consumer warpgroups that take its tiles in
  turn (ping-pong: one team stores its tile while the other multiplies; warp-specialized only);
- ``DETERMINISTIC``: False adds each tile's sums into C by TMA reductions instead of loading C's
  tile and storing it (``plan.split_k(deterministic=False)`` without a split: C's sum rounded
  twice; faster where C's traffic is a large share, as with a short k).

``matmul_split_<type>`` is the same product with k split between blocks (split-K, for shapes
with few tiles of C and a long k: 1024 x 1024 x 14336 has 64 tiles of 128 x 128 for 132
multiprocessors): ``SPLITS`` blocks along BLOCK_Z each sum ``K / SPLITS`` values of k, and
``DETERMINISTIC`` chooses how their sums meet (a float32 workspace added by a second kernel in
a fixed order, or TMA reductions into C in any order: ``plan.split_k``); one block a tile.

``M, N, K`` are the problem's shape: ``schedc tune --shapes M=4096,N=4096,K=4096`` tunes one
shape (and names the winner ``matmul_fp16``), several ``--shapes`` give one winner each. Points
that cannot run (shared memory beyond the multiprocessor's, a cluster that does not divide the
grid, a tile wider than the matrix) are refused by the analysis, counted by cause and never
compiled. ``schedc build`` of this script builds every point of the grid.
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
M, N, K, BM, BN, BK, STAGES, GROUP, CLUSTER, SPECIALIZE, TEAMS, SHAPE = acc.create_parameters()
SPLITS, DETERMINISTIC = acc.create_parameters()
TILE_N = (64, 128, 192, 256)
WGMMA = {n: acc.MMAShape[f"M64xN{n}xK16_B1"] for n in TILE_N}
MULTIPROCESSORS = 132  # an H100 SXM's or an H200's: the persistent grid's waves


def filled(m: int, n: int, width: int, rows: int = 128) -> float:
    """The share of the waves' tile area that holds C's elements, with tiles of ``rows`` x ``width``.

    >>> round(filled(5000, 3000, 192), 3), round(filled(5000, 3000, 232), 3)
    (0.925, 0.957)
    """
    tiles = -(-m // rows) * -(-n // width)
    return m * n / (-(-tiles // MULTIPROCESSORS) * MULTIPROCESSORS * rows * width)


def fitted_width(m: int, n: int) -> int | None:
    """A block tile width (a multiple of 8 from 136 to 248, its last 128-byte chunk partial) whose
    128-row tiles fill the waves better than every width of ``TILE_N`` by more than 1%: 232 at
    5000 x 3000 (520 tiles, 3.94 waves); None where ``TILE_N`` has one as good.

    >>> fitted_width(5000, 3000), fitted_width(4096, 4096)
    (232, None)
    """
    best = max(range(136, 256, 8), key=lambda w: filled(m, n, w))
    return best if filled(m, n, best) > max(filled(m, n, w) for w in TILE_N) + 0.01 else None


def matmul(operand: acc.ScalarType, split: bool = False):
    """The plan and its arrays, every choice a parameter (8-bit floats: B column-major, as wgmma
    reads them k-contiguous, and C of bfloat16). ``split``: k split between ``SPLITS`` blocks."""
    fp8 = operand.arithmetic is not operand
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N),
                  layout=acc.Array.Layout.LAST_MAJOR if fp8 else acc.Array.Layout.FIRST_MAJOR)
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.bfloat16 if fp8 else operand, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ks = schedule.split(k, K // SPLITS) if split else k  # k: the blocks' parts of the sum
    ii, jj, kk = schedule.split(i, BM), schedule.split(j, BN), schedule.split(ks, BK)
    iii, jjj = schedule.split(ii, 64), schedule.split(jj, BN)  # one warpgroup's 64 rows
    iiii, jjjj, kkk = schedule.tile({iii: 64, jjj: BN, kk: 32 if fp8 else 16})
    schedule.reorder(*((k,) if split else ()), i, j, ii, jj, ks, kk, iii, jjj, iiii, jjjj, kkk)

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y,
               jj: target.GridUnit.WARPGROUP_X, **({k: target.GridUnit.BLOCK_Z} if split else {})})
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=SHAPE)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=STAGES, engine=acc.CopyEngine.TMA)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=STAGES, engine=acc.CopyEngine.TMA)
    plan.cache(C, index=ks, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(SPECIALIZE, teams=TEAMS)
    plan.split_k(DETERMINISTIC)
    if not split:
        plan.persistent(group=GROUP)
        plan.cluster(CLUSTER, target.GridUnit.BLOCK_Y)
    return plan, (A, B, C)


def grid(m: int, n: int, k: int, fp8: bool = False) -> list[dict]:
    """The points searched at one shape (``--shapes`` replaces M, N and K): the widths of
    ``TILE_N`` and, where one fills the waves better, ``fitted_width``'s."""
    fitted = fitted_width(m, n)
    widths = [*TILE_N, *((fitted,) if fitted else ())]
    shapes = {w: acc.MMAShape[f"M64xN{w}xK{32 if fp8 else 16}_B1"] for w in widths}  # 8-bit floats: k 32
    return acc.create_parameter_grid(
        {M: [m], N: [n], K: [k], BM: [64, 128, 256], BN: widths, BK: [64, 128] if fp8 else [64],
         STAGES: [2, 3, 4, 5, 6] if fp8 else [2, 3, 4, 5], GROUP: [1, 4, 8, 16], CLUSTER: [1, 2],
         SPECIALIZE: [True, False], TEAMS: [1, 2], DETERMINISTIC: [True, False], SHAPE: list(shapes.values())},
        filter_func=lambda m, n, k, bm, bn, bk, stages, group, cluster, specialize, teams, deterministic, shape:
            shape is shapes[bn] and group % cluster == 0 and (specialize or teams == 1))


def split_grid(m: int, n: int, k: int) -> list[dict]:
    """The split-K points searched at one shape: 128-row tiles, warp-specialized, one team."""
    return acc.create_parameter_grid(
        {M: [m], N: [n], K: [k], BM: [128], BN: [128, 256], BK: [64], STAGES: [3, 4, 5], SPLITS: [2, 4, 8],
         DETERMINISTIC: [False, True], SPECIALIZE: [True], TEAMS: [1], SHAPE: list(WGMMA.values())},
        filter_func=lambda m, n, k, bm, bn, bk, stages, splits, deterministic, specialize, teams, shape:
            shape is WGMMA[bn] and k % (splits * bk) == 0)


if __name__ == "__main__":
    package = acc.Package()
    for operand, name in ((acc.ScalarType.float16, "fp16"), (acc.ScalarType.bfloat16, "bf16")):
        package.add(*matmul(operand), base_name=f"matmul_{name}", parameters=grid(4096, 4096, 4096))
        package.add(*matmul(operand, split=True), base_name=f"matmul_split_{name}",
                    parameters=split_grid(1024, 1024, 14336))
    package.add(*matmul(acc.ScalarType.float8_e4m3), base_name="matmul_fp8",
                parameters=grid(4096, 4096, 4096, fp8=True))
    package.build("tune_matmul", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tune_matmul")
