"""A back-to-back GEMM in one Hopper kernel: E = (A @ B) @ D, the intermediate never in memory.

Two nests, fused over the first product's C dimensions (``acc.fuse``), each tensorized on wgmma
(two ``plan.tensorize`` calls): ``S += A @ B`` into a float32 TEMP array S that lives in the
consumer warpgroups' registers alone, then ``E += float16(S) @ D``, whose A operand is S's
accumulator converted to 16 bits in place (wgmma's A from registers). Each block takes 128 rows
of A (two consumer warpgroups of 64 rows), A comes through a TMA ring fed by a producer
warpgroup, B's and D's tiles (the same for every block) are copied once at the kernel's start,
and E leaves by TMA through shared slots.

    S[i, j] += A[i, k] * B[k, j]                     (M, N1, K)
    E[i, l] += cast(S[i, j], float16) * D[j, l]      (M, N1, N2)

Against two ``torch.mm`` calls the kernel saves S's round trip through global memory (a write
and a read of M x N1 16-bit values): ``benchmarks/b2b_gemm.py`` times both on the same tensors.

- ``b2b_fp16_<M>x<N>``: float16, M rows and the three other dimensions N (64, 128 or 256: at 256 the
  intermediate in tiles of 128 columns, each multiplied into E as it is made, ``WIDE``);
- ``b2b_bf16_<M>x<N>``: bfloat16;
- ``mlp_relu_fp16_<M>x<N>``: ``E = relu(A @ B + bias) @ D`` (two layers of an MLP), the bias and the
  ReLU applied to the intermediate in registers between the products;
- ``softmax_fp16_<M>x<N>``: ``E = softmax(A @ B) @ D`` by rows (attention over one tile of N keys):
  the row's maximum and sum of exponentials in row vectors, held by the threads of each row.

``b2b_gemm`` builds the plan for any sizes and types the chain allows: N1 one wgmma tile (the
warpgroup holds S's row of the block before the second product starts), or several with
``n1_tile`` (each tile of S goes on into the second product as it is made); N2 one wgmma tile.
"""

import math

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def b2b_gemm(M: int, N1: int, K: int, N2: int, dtype=acc.ScalarType.float16, rows: int = 128, k_tile: int = 64,
             stages: int = 6, persistent: bool = True, producer: bool = True, b_resident: bool = True,
             between=None, inputs: tuple = (), n1_tile: int | None = None, d_stages: int = 1):
    """The plan of ``E = (A @ B) @ D`` (A: M x K, B: K x N1, D: N1 x N2, all ``dtype``; E: M x N2
    of ``dtype``) and its arrays (A, B, D, E). ``rows``: the block's rows of A (64 per consumer
    warpgroup); ``k_tile``: the columns of A in one stage of the ring; ``producer``: a producer
    warpgroup issues the copies (else thread 0 of the consumers, ahead of them); ``b_resident``: B's
    whole tile (K x N1, the same for every block) copied once at the kernel's start (else B's
    k_tile rows stream through the ring beside A's); ``between``: an element-wise nest on the
    intermediate before the second product, ``S[i, j] = between(S, i, j)`` (a fused nest between the
    two: ``E = act(A @ B) @ D``, computed on the float32 registers), or a list of steps, each a nest
    of its own that returns S's new element or writes row vectors itself (``softmax_steps``), reading
    the arrays ``inputs`` (passed after E); ``n1_tile``: S's columns in tiles of this many (a serial loop over
    them, each tile of S multiplied into E as it is made: E's accumulator kept across that loop, D's
    rows of the tile copied for each), else one tile of all N1; ``d_stages``: with ``n1_tile``, the
    stages of D's ring (the producer copies the next tile's rows of D while the consumers multiply by
    this one's)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(K, N1), layout=acc.Array.Layout.FIRST_MAJOR)
    D = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N1, N2), layout=acc.Array.Layout.FIRST_MAJOR)
    S = acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(M, N1))
    E = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N2))

    first = acc.Nest(shape=(M, N1, K))
    i, j, k = first.get_indices()

    @first.iteration_logic
    def _():
        S[i, j] += A[i, k] * B[k, j]

    second = acc.Nest(shape=(M, N1, N2))
    i2, j2, l2 = second.get_indices()

    @second.iteration_logic
    def _():
        E[i2, l2] += acc.cast(S[i2, j2], dtype) * D[j2, l2]

    nests = [first.create_schedule()]
    for step in (between if isinstance(between, list | tuple) else [between] if between is not None else []):
        nests.append(_step(M, N1, S, step))
    schedule = acc.fuse((*nests, second.create_schedule()), partial=2)
    f, i, j, k, l = schedule.get_indices()
    ii = schedule.split(i, rows)
    iii = schedule.split(ii, 64)  # one consumer warpgroup's rows
    kk = schedule.split(k, k_tile)
    width = n1_tile or N1  # the columns of S a warpgroup holds at once
    shape1 = acc.MMAShape[f"M64xN{width}xK16_B1"]
    shape2 = acc.MMAShape[f"M64xN{N2}xK16_B1"]
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape1)
    if width < N1:  # S's columns in tiles (the serial loop j): the fusing index inside j, E kept across it
        jt = schedule.split(j, width)
        iiii, jj, kkk = schedule.tile({iii: m, jt: n, kk: mk})
        ll = schedule.split(l, N2)
        schedule.reorder(i, ii, j, jt, f, k, kk, l, iii, iiii, jj, ll, kkk)
    else:
        iiii, jj, kkk = schedule.tile({iii: m, j: n, kk: mk})
        ll = schedule.split(l, N2)
        schedule.reorder(i, f, ii, j, k, kk, l, iii, iiii, jj, ll, kkk)

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y})
    start = acc.MMAFragmentOp.SET  # the accumulators start at zero: S and E are only written
    plan.tensorize(indices=(iiii, jj, kkk), mma_shape=shape1, prologue_op=start, prologue_arg=0.0)
    plan.tensorize(indices=(iiii, ll, jj), mma_shape=shape2, num_total_passes=width // 16, prologue_op=start,
                   prologue_arg=0.0)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    if b_resident:
        plan.cache(B, index=j, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA)
    else:
        plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(D, index=l, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA,
               **({"stages": d_stages} if d_stages > 1 else {}))
    plan.cache(S, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    plan.cache(E, index=l, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(producer)
    if persistent:
        plan.persistent()
    return plan, (A, B, D, E, *inputs)


def _step(M: int, N1: int, S, step):
    """One step between the products: a nest over S's elements, fused with the others."""
    middle = acc.Nest(shape=(M, N1))
    i1, j1 = middle.get_indices()

    @middle.iteration_logic
    def _():
        value = step(S, i1, j1)
        if value is not None:  # an element-wise step gives S's new element
            S[i1, j1] = value

    return middle.create_schedule()


def relu_mlp(M: int, N: int, **options):
    """``E = relu(A @ B + bias) @ D``, every dimension but M of ``N``: the plan and its arrays (A, B,
    D, E, bias)."""
    bias = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(N,))
    return b2b_gemm(M, N, N, N, between=lambda S, i, j: acc.max(S[i, j] + bias[j], 0.0), inputs=(bias,), **options)


def softmax_steps(M: int, scale: float = 1.0) -> list:
    """The steps of a row softmax of S between the products, each a fused nest over S's elements:
    the row's maximum and sum of exponentials in row vectors (TEMP arrays of M float32, held in
    the registers of the threads that hold the row), ``exp(scale * (S - max))`` and the division."""
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(M,)) for _ in range(2))

    def start(S, i, j):
        peak[i] = -math.inf
        total[i] = 0.0

    def maximum(S, i, j):
        peak[i] = acc.max(peak[i], S[i, j])

    def exponential(S, i, j):
        return acc.exp((S[i, j] - peak[i]) * scale)

    def add(S, i, j):
        total[i] += S[i, j]

    def divide(S, i, j):
        return S[i, j] / total[i]

    return [start, maximum, exponential, add, divide]


def softmax_b2b(M: int, N: int, scale: float = 1.0, **options):
    """``E = softmax(scale * A @ B) @ D`` by rows (attention over one tile of N keys, A the
    queries, B the keys transposed, D the values): the plan and its arrays (A, B, D, E)."""
    return b2b_gemm(M, N, N, N, between=softmax_steps(M, scale), **options)


SIZES = ((65536, 128), (65536, 64))
# N = 256: S in tiles of 128 columns (E's accumulator kept across them), one consumer warpgroup a
# block, B's rows of each tile through the ring beside A's (B and D whole would not fit beside it)
WIDE = {"n1_tile": 128, "rows": 64, "stages": 4, "b_resident": False}

if __name__ == "__main__":
    package = acc.Package()
    for M, N in SIZES:
        package.add(*b2b_gemm(M, N, N, N), base_name=f"b2b_fp16_{M}x{N}")
    package.add(*b2b_gemm(65536, 256, 256, 256, **WIDE), base_name="b2b_fp16_65536x256")
    package.add(*b2b_gemm(65536, 128, 128, 128, dtype=acc.ScalarType.bfloat16), base_name="b2b_bf16_65536x128")
    package.add(*relu_mlp(65536, 128), base_name="mlp_relu_fp16_65536x128")
    package.add(*softmax_b2b(65536, 128), base_name="softmax_fp16_65536x128")
    package.build("b2b_gemm", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/b2b_gemm")
