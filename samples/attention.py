"""Attention forward on Hopper: O = softmax(scale * Q @ K^T) @ V in one kernel, over batches and
heads, grouped-query heads included.

The script writes one head's attention as a whole row's softmax between two products, each a nest,
fused over the heads, the query rows i and the key columns j (``acc.fuse``), each product
tensorized on wgmma (``row`` is the query's row of Q: its batch and head's rows in turn):

    S[row, j] += Q[row, k] * K[kv_row, k]                  the scores, a float32 TEMP
    peak[row] = -inf; total[row] = 0                       row vectors
    S[row, j] = cap * fast_tanh(S[row, j] * (scale / cap)) with softcap=cap (then scale is 1 below)
    S[row, j] = select(j <= i, S[row, j], -inf)            causal only
    peak[row] = max(peak[row], S[row, j])
    S[row, j] = fast_exp((S[row, j] - peak[row]) * scale)
    total[row] += S[row, j]
    L[row] = peak[row] * scale + log(total[row])           with lse=True
    S[row, j] = S[row, j] / total[row]
    O[row, l] += cast(S[row, j], float16) * V[kv_row, l]

The keys come in tiles of ``kv_tile`` columns (j split, the fusing index inside its loop): each tile
of S goes on into the second product as it is made, O's accumulator kept across the tiles. The
analysis proves the online form of the softmax over them (``schedc/lower/online.py``): the row's
maximum and sum live in the registers of the threads that hold the row across the whole loop, the
sum and O's accumulator are multiplied by ``exp(scale * (old - new))`` as the maximum grows, and O is
divided by the sum after the last tile. ``fast_exp`` is computed base two, log2(e) folded into the
scale: ``exp2(S * scale * log2(e) + peak * (-scale * log2(e)))``, the row's term once a tile. S
never leaves the registers: each tile's scores are converted to 16 bits in place and fed to the
second wgmma as its A operand; each tile's ``P @ V`` is issued after the next tile's ``Q @ K^T``
and runs under its softmax (``plan.overlap``). Q's rows of the block are copied once a work item
(cached at j, outside the tiles of keys), K's tiles come through a TMA ring fed by a producer
warpgroup, V's rows of each tile through a ring of their own; two consumer warpgroups take 64
query rows each and take turns at issuing their products, one's softmax under the other's
(``plan.alternate``, where not causal); a persistent grid takes the (batch and K/V head, query
head of its group, block of queries) work items.

The functions (``FUNCTIONS``; the arrays are the contiguous (batch, heads, seq, d) tensors' memory unless
BSHD):

- ``attention_fp16_b8h16_4096x128``: float16, batch 8, 16 heads, 4096 queries and keys, d = 128;
- ``attention_bf16_b8h16_4096x128``: bfloat16;
- ``attention_fp16_b8h32_4096x64``: d = 64, 32 heads;
- ``attention_fp16_b2h16_16384x128``: 16384 queries and keys, batch 2;
- ``attention_bf16_b8h16_4096x256``: d = 256, in tiles of 64 keys, K's ring 4 stages deep (a
  tile's d: the warpgroups take turns), 240 registers a consumer thread;
- ``attention_bf16_b4h64kv8_8192x128``: grouped-query attention, 64 query heads over 8 K/V heads;
- ``attention_bf16_bshd_b8h16_4096x128``: the bfloat16 function on (batch, seq, heads, d) tensors
  (``layout="BSHD"``: a head's rows 16 x 128 elements apart);
- ``..._causal``: each query sees the keys up to its own position (torch's ``is_causal``), the
  tiles of keys past a block's last query skipped;
- ``attention_bf16_decode_b16h32kv8_{8192,32768}x128`` (``DECODE``): one query for each of 32 heads
  of 16 sequences against 8 K/V heads of 8192 or 32768 keys: a K/V head's 4 query heads are its
  4 query rows (a 64-row tile; the rows past them, the next heads' queries, are computed and never
  stored), one block a K/V head of a sequence, K and V read once;
- ``attention_bf16_decode_b1h32kv8_32768x128_split16``: one sequence of 32768 keys, the keys split
  between blocks (flash-decoding, ``splits=16``): each of the 8 K/V heads' 16 blocks takes 2048
  keys, and a combine kernel weighs the blocks' outputs by their rows' maxima and sums.

``attention`` builds the plan for any sizes the chain allows (``benchmarks/attention.py`` times it
against torch's scaled_dot_product_attention on the same tensors).
"""

import math

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def attention(M: int, N: int, d: int, dtype=acc.ScalarType.float16, kv_tile: int | None = None, rows: int = 128,
              k_tile: int = 64, stages: int | None = None, v_stages: int = 2, scale: float | None = None,
              exponential=acc.fast_exp, producer: bool = True, persistent: bool | None = None, batch: int = 1,
              heads: int = 1, kv_heads: int | None = None, causal: bool = False, lse: bool = False,
              overlap: bool = True, softcap: float | None = None, alternate: bool | None = None,
              layout: str = "BHSD", registers: tuple[int, int] | None = None, splits: int = 1):
    """The plan of attention over ``batch`` x ``heads`` heads of M queries and N keys of dimension d
    (all ``dtype``) and its arrays (Q, K, V, O). The arrays are the 4-D tensors' memory as 2-D
    row-major arrays: with ``layout="BHSD"`` (batch, heads, seq, d: torch's) Q and O
    ``(batch * heads * M, d)``, K and V ``(batch * kv_heads * N, d)``; with ``"BSHD"`` (batch, seq,
    heads, d: FlashAttention's, a projection's output as it is) Q and O ``(batch * M, heads * d)``,
    K and V ``(batch * N, kv_heads * d)``, a head's rows ``heads * d`` elements apart;
    ``kv_heads`` (``heads`` unless given) divides ``heads``: each K/V head serves
    ``heads / kv_heads`` query heads in turn (grouped-query attention). The blocks take (batch and
    K/V head, query head of the group, ``rows`` queries), BSHD (batch, K/V head and query head of
    the group, ``rows`` queries). ``kv_tile``: the keys of one tile of S
    (128 up to d = 128, else 64: a consumer thread holds S's tile, its 16-bit copy and O's tile at
    once; a last tile past N has its columns past N set to 0 before P @ V, where they would meet
    the next head's keys); ``rows``: the block's queries (64 per consumer warpgroup); ``k_tile``: the columns of K
    in one stage of its ring (``stages`` deep: 2, or 4 past d = 128); ``v_stages``: the stages of V's ring
    (none where the keys are one tile of one K/V head: V's tile is copied once);
    ``scale``: 1/sqrt(d) unless given; ``exponential``: ``acc.fast_exp`` (computed as the ex2
    instruction, log2(e) folded into the scale: one multiply-add an element) or ``acc.exp``; ``causal``:
    query i sees keys j <= i alone (a step sets the others' scores to -inf, torch's ``is_causal``):
    the blocks skip the tiles of keys past their last query (``schedc/lower/online.py``), which
    takes one work item a block (``persistent``: off by default when causal, on otherwise), the
    blocks of each head's queries in reverse (the longest first);
    ``lse``: also each row's log-sum-exp of the scaled scores, ``L = scale * max + log(sum)``, a
    float32 OUTPUT of ``batch * heads * M`` (after O in the arrays), which a backward pass reads;
    ``overlap``: each tile's ``P @ V`` issued under the next tile's ``Q @ K^T`` and softmax
    (``plan.overlap``); ``softcap``: the scaled scores capped, ``softcap * tanh(scale * S /
    softcap)``, before the mask and the softmax (Gemma 2's attention logit soft-capping; the
    ``tanh.approx`` instruction, ``acc.fast_tanh``, with ``acc.fast_exp``); ``alternate``: the two
    consumer warpgroups take turns at issuing their products, one's softmax under the other's
    (``plan.alternate``; by default where not causal, with a producer and a ring of K that holds a
    tile's d: on an H100 it gained 1-5% without the mask and lost about 1% with it); ``registers``:
    the producer's and each consumer thread's registers after ``setmaxnreg`` (the default's 40 and
    an equal share of the rest, (24, 240) past d = 128; three consumer warpgroups, ``rows=192``,
    hold a 128-key tile at d = 64 with (24, 160)); ``splits``: the keys split between blocks, each
    block taking ``N / splits`` of them rounded up to whole tiles, the last part fewer
    (flash-decoding, for few queries against many keys): ``js = split(j, part)``, j bound to blocks
    with the query blocks, compiled as a partial kernel and a combine (``schedc/lower/split_keys.py``)."""
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    factor = 1.0 if softcap else scale  # the scale of the exponentials' argument (the capped scores are scaled)
    tanh = acc.fast_tanh if exponential is acc.fast_exp else acc.tanh
    kv_tile = kv_tile or (128 if d <= 128 else 64)
    stages = stages or (2 if d <= 128 else 4)  # past d = 128 K's ring holds a tile's d: the turns are allowed
    # d = 256: O's tile alone is 128 registers a consumer thread
    registers = registers or ((24, 240) if d > 128 and producer else None)
    kv_heads = kv_heads or heads
    persistent = not causal if persistent is None else persistent
    if alternate is None:  # where the turns are allowed: a producer, and K's ring holding a tile of S's k
        alternate = not causal and producer and -(-d // k_tile) <= stages
    B, H, G = batch, kv_heads, heads // kv_heads  # batches, K/V heads, query heads of a K/V head's group
    if layout not in ("BHSD", "BSHD"):
        raise ValueError(f"layout is 'BHSD' or 'BSHD', not {layout!r}")
    bhsd = layout == "BHSD"

    def q_at(b, h, g, i, k):  # query i of head h * G + g of batch b, its element k (of Q, of O)
        return (((b * H + h) * G + g) * M + i, k) if bhsd else (b * M + i, (h * G + g) * d + k)

    def kv_at(b, h, j, k):  # key j of K/V head h of batch b, its element k (of K, of V)
        return ((b * H + h) * N + j, k) if bhsd else (b * N + j, h * d + k)

    rows_of = (B * H * G * M, d) if bhsd else (B * M, H * G * d)
    Q = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=rows_of)
    K = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(B * H * N, d) if bhsd else (B * N, H * d))
    V = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=K.shape)
    O = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=rows_of)
    # S and the row vectors live in registers alone: their rows (a head's queries in turn) are ours to choose
    S = acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(B * H * G * M, N))
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(B * H * G * M,))
                   for _ in range(2))
    L = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(B * H * G * M,))

    scores = acc.Nest(shape=(B, H, G, M, N, d))
    b, h, g, i, j, k = scores.get_indices()

    @scores.iteration_logic
    def _():
        S[((b * H + h) * G + g) * M + i, j] += Q[q_at(b, h, g, i, k)] * K[kv_at(b, h, j, k)]

    def step(logic):
        nest = acc.Nest(shape=(B, H, G, M, N))
        b1, h1, g1, i1, j1 = nest.get_indices()
        nest.iteration_logic(lambda: logic(((b1 * H + h1) * G + g1) * M + i1, i1, j1))
        return nest.create_schedule()

    def start(row, i1, j1):
        peak[row] = -math.inf
        total[row] = 0.0

    def mask(row, i1, j1):  # query i1 sees the keys up to itself
        S[row, j1] = acc.select(j1 <= i1, S[row, j1], -math.inf)

    def capped(row, i1, j1):  # the scaled scores held within (-softcap, softcap)
        S[row, j1] = softcap * tanh(S[row, j1] * (scale / softcap))

    def maximum(row, i1, j1):
        peak[row] = acc.max(peak[row], S[row, j1])

    def exponentials(row, i1, j1):
        S[row, j1] = exponential((S[row, j1] - peak[row]) * factor)

    def add(row, i1, j1):
        total[row] += S[row, j1]

    def divide(row, i1, j1):
        S[row, j1] = S[row, j1] / total[row]

    def log_sum_exp(row, i1, j1):  # the row's sum and maximum are whole: the kernel sets L after the last tile
        L[row] = peak[row] * factor + acc.log(total[row])

    output = acc.Nest(shape=(B, H, G, M, N, d))
    b2, h2, g2, i2, j2, l2 = output.get_indices()

    @output.iteration_logic
    def _():
        row = ((b2 * H + h2) * G + g2) * M + i2
        O[q_at(b2, h2, g2, i2, l2)] += acc.cast(S[row, j2], dtype) * V[kv_at(b2, h2, j2, l2)]

    steps = [step(logic) for logic in (start, *((capped,) if softcap else ()), *((mask,) if causal else ()),
                                       maximum, exponentials, add,
                                       *((log_sum_exp,) if lse else ()), divide)]
    schedule = acc.fuse((scores.create_schedule(), *steps, output.create_schedule()), partial=5)
    f, b, h, g, i, j, k, l = schedule.get_indices()
    ii = schedule.split(i, rows)
    iii = schedule.split(ii, 64)  # one consumer warpgroup's queries
    kk = schedule.split(k, k_tile)
    part = kv_tile * -(-N // (splits * kv_tile))  # the keys of a block: whole tiles, the last part fewer
    js = schedule.split(j, part) if splits > 1 else j  # j is the loop over the parts
    jt = schedule.split(js, kv_tile)  # the keys of one tile of S: js is the loop over the tiles
    shape1 = acc.MMAShape[f"M64xN{kv_tile}xK16_B1"]
    shape2 = acc.MMAShape[f"M64xN{d}xK16_B1"]
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape1)
    iiii, jj, kkk = schedule.tile({iii: m, jt: n, kk: mk})
    ll = schedule.split(l, d)
    schedule.reorder(b, h, g, i, ii, *((j,) if splits > 1 else ()), js, jt, f, k, kk, l, iii, iiii, jj, ll, kkk)

    plan = schedule.create_plan(target)
    # BHSD: a batch's K/V heads in turn on BLOCK_Z, so that the query heads of one share K and V in L2
    heads_bound = {(b, h): target.GridUnit.BLOCK_Z, g: target.GridUnit.BLOCK_Y} if bhsd else \
        {b: target.GridUnit.BLOCK_Z, (h, g): target.GridUnit.BLOCK_Y}
    plan.bind({**heads_bound, ((i, j) if splits > 1 else i): target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y})
    start_at_zero = dict(prologue_op=acc.MMAFragmentOp.SET, prologue_arg=0.0)
    plan.tensorize(indices=(iiii, jj, kkk), mma_shape=shape1, **start_at_zero)
    plan.tensorize(indices=(iiii, ll, jj), mma_shape=shape2, num_total_passes=kv_tile // 16, **start_at_zero)
    # Q's rows of the block once a work item (cached at j, outside the tiles of keys), K through the ring
    plan.cache(Q, index=js, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA)
    plan.cache(K, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    # one tile of keys of one K/V head: V's tile is the kernel's only one, copied once
    ring = v_stages > 1 and ((part if splits > 1 else N) > kv_tile or B * H > 1)
    plan.cache(V, index=l, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA,
               **({"stages": v_stages} if ring else {}))
    plan.cache(S, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    plan.cache(O, index=l, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(producer, *(registers or ()))
    if persistent:
        plan.persistent()
    if overlap:
        plan.overlap()
    if alternate:
        plan.alternate()
    return plan, (Q, K, V, O, *((L,) if lse else ()))


F16, BF16 = acc.ScalarType.float16, acc.ScalarType.bfloat16
FUNCTIONS = {  # name: attention's arguments
    "attention_fp16_b8h16_4096x128": dict(M=4096, N=4096, d=128, batch=8, heads=16),
    "attention_bf16_b8h16_4096x128": dict(M=4096, N=4096, d=128, batch=8, heads=16, dtype=BF16),
    "attention_fp16_b8h32_4096x64": dict(M=4096, N=4096, d=64, batch=8, heads=32),
    "attention_fp16_b2h16_16384x128": dict(M=16384, N=16384, d=128, batch=2, heads=16),
    "attention_bf16_b8h16_4096x256": dict(M=4096, N=4096, d=256, batch=8, heads=16, dtype=BF16),
    "attention_bf16_b4h64kv8_8192x128": dict(M=8192, N=8192, d=128, batch=4, heads=64, kv_heads=8, dtype=BF16),
    "attention_fp16_b8h16_4096x128_causal": dict(M=4096, N=4096, d=128, batch=8, heads=16, causal=True),
    "attention_bf16_b4h64kv8_8192x128_causal": dict(M=8192, N=8192, d=128, batch=4, heads=64, kv_heads=8,
                                                    dtype=BF16, causal=True),
    "attention_bf16_bshd_b8h16_4096x128": dict(M=4096, N=4096, d=128, batch=8, heads=16, dtype=BF16, layout="BSHD"),
}

# decode: one query a head against a long K/V cache; a K/V head's query heads (32 over 8: 4) are its
# M query rows, which Q's (batch, heads, 1, d) memory holds in turn; one block a K/V head of a sequence
DECODE = {  # name: attention's arguments
    "attention_bf16_decode_b16h32kv8_8192x128": dict(M=4, N=8192, d=128, batch=16, heads=8, dtype=BF16, rows=64,
                                                     stages=4),
    "attention_bf16_decode_b16h32kv8_32768x128": dict(M=4, N=32768, d=128, batch=16, heads=8, dtype=BF16, rows=64,
                                                      stages=4),
    # one sequence: its 8 K/V heads' blocks alone would leave the GPU idle, so each takes 16 parts of the keys
    "attention_bf16_decode_b1h32kv8_32768x128_split16": dict(M=4, N=32768, d=128, batch=1, heads=8, dtype=BF16,
                                                             rows=64, stages=4, splits=16),
}

if __name__ == "__main__":
    package = acc.Package()
    for name, arguments in {**FUNCTIONS, **DECODE}.items():
        package.add(*attention(**arguments), base_name=name)
    package.build("attention", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/attention")
