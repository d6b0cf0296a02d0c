"""Attention forward on Hopper, one head: O = softmax(scale * Q @ K^T) @ V in one kernel.

The script writes attention as a whole row's softmax between two products, each a nest, fused over
the query rows i and the key columns j (``acc.fuse``), each product tensorized on wgmma:

    S[i, j] += Q[i, k] * K[j, k]                           (M, N, d)   the scores, float32 TEMP
    peak[i] = -inf; total[i] = 0                                        row vectors
    peak[i] = max(peak[i], S[i, j])
    S[i, j] = exp((S[i, j] - peak[i]) * scale)
    total[i] += S[i, j]
    S[i, j] = S[i, j] / total[i]
    O[i, l] += cast(S[i, j], float16) * V[j, l]            (M, N, d)

The keys come in tiles of ``kv_tile`` columns (j split, the fusing index inside its loop): each tile
of S goes on into the second product as it is made, O's accumulator kept across the tiles. The
analysis proves the online form of the softmax over them (``schedc/lower/online.py``): the row's
maximum and sum live in the registers of the threads that hold the row across the whole loop, the
sum and O's accumulator are multiplied by ``exp(scale * (old - new))`` as the maximum grows, and O is
divided by the sum after the last tile. S never leaves the registers: each tile's scores are
converted to 16 bits in place and fed to the second wgmma as its A operand. Q's and K's tiles come
through a TMA ring fed by a producer warpgroup, V's rows of each tile through a ring of their own;
two consumer warpgroups take 64 query rows each.

- ``attention_fp16_<M>x<d>``: float16, M queries and M keys of head dimension d;
- ``attention_bf16_<M>x<d>``: bfloat16.

``attention`` builds the plan for any sizes the chain allows (``benchmarks/attention.py`` times it
against torch's scaled_dot_product_attention on the same tensors).
"""

import math

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def attention(M: int, N: int, d: int, dtype=acc.ScalarType.float16, kv_tile: int | None = None, rows: int = 128,
              k_tile: int = 64, stages: int = 2, v_stages: int = 2, scale: float | None = None,
              exponential=acc.exp, producer: bool = True, persistent: bool = True):
    """The plan of one head's attention (Q: M x d, K and V: N x d, O: M x d, row-major, all
    ``dtype``) and its arrays (Q, K, V, O). ``kv_tile``: the keys of one tile of S (128 up to d = 64,
    else 64: a consumer thread holds S's tile, its 16-bit copy and O's tile at once); ``rows``: the
    block's queries (64 per consumer warpgroup); ``k_tile``: the columns of Q and K in one stage of
    their ring (``stages`` deep); ``v_stages``: the stages of V's ring; ``scale``: 1/sqrt(d) unless
    given; ``exponential``: ``acc.exp`` or ``acc.fast_exp``."""
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kv_tile = kv_tile or (128 if d <= 64 else 64)
    Q = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, d))
    K = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N, d))
    V = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N, d))
    O = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, d))
    S = acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(M, N))
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(M,)) for _ in range(2))

    scores = acc.Nest(shape=(M, N, d))
    i, j, k = scores.get_indices()

    @scores.iteration_logic
    def _():
        S[i, j] += Q[i, k] * K[j, k]

    def step(logic):
        nest = acc.Nest(shape=(M, N))
        i1, j1 = nest.get_indices()
        nest.iteration_logic(lambda: logic(i1, j1))
        return nest.create_schedule()

    def start(i1, j1):
        peak[i1] = -math.inf
        total[i1] = 0.0

    def maximum(i1, j1):
        peak[i1] = acc.max(peak[i1], S[i1, j1])

    def exponentials(i1, j1):
        S[i1, j1] = exponential((S[i1, j1] - peak[i1]) * scale)

    def add(i1, j1):
        total[i1] += S[i1, j1]

    def divide(i1, j1):
        S[i1, j1] = S[i1, j1] / total[i1]

    output = acc.Nest(shape=(M, N, d))
    i2, j2, l2 = output.get_indices()

    @output.iteration_logic
    def _():
        O[i2, l2] += acc.cast(S[i2, j2], dtype) * V[j2, l2]

    steps = [step(logic) for logic in (start, maximum, exponentials, add, divide)]
    schedule = acc.fuse((scores.create_schedule(), *steps, output.create_schedule()), partial=2)
    f, i, j, k, l = schedule.get_indices()
    ii = schedule.split(i, rows)
    iii = schedule.split(ii, 64)  # one consumer warpgroup's queries
    kk = schedule.split(k, k_tile)
    jt = schedule.split(j, kv_tile)  # the keys of one tile of S: j is the loop over the tiles
    shape1 = acc.MMAShape[f"M64xN{kv_tile}xK16_B1"]
    shape2 = acc.MMAShape[f"M64xN{d}xK16_B1"]
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape1)
    iiii, jj, kkk = schedule.tile({iii: m, jt: n, kk: mk})
    ll = schedule.split(l, d)
    schedule.reorder(i, ii, j, jt, f, k, kk, l, iii, iiii, jj, ll, kkk)

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y})
    start_at_zero = dict(prologue_op=acc.MMAFragmentOp.SET, prologue_arg=0.0)
    plan.tensorize(indices=(iiii, jj, kkk), mma_shape=shape1, **start_at_zero)
    plan.tensorize(indices=(iiii, ll, jj), mma_shape=shape2, num_total_passes=kv_tile // 16, **start_at_zero)
    plan.cache(Q, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(K, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(V, index=l, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA,
               **({"stages": v_stages} if v_stages > 1 else {}))
    plan.cache(S, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    plan.cache(O, index=l, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(producer)
    if persistent:
        plan.persistent()
    return plan, (Q, K, V, O)


SIZES = ((16384, 128), (16384, 64))

if __name__ == "__main__":
    package = acc.Package()
    for M, d in SIZES:
        package.add(*attention(M, M, d), base_name=f"attention_fp16_{M}x{d}")
    package.add(*attention(16384, 16384, 128, dtype=acc.ScalarType.bfloat16), base_name="attention_bf16_16384x128")
    package.build("attention", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/attention")
