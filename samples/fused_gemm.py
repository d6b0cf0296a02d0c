"""A GEMM with its epilogue fused: C = gelu(A @ B + bias) in one Hopper kernel.

Two nests, as Accera writes a layer: the product ``C += A @ B`` (C's fragments start at zero:
``prologue_op=SET``, so C is only written) and the epilogue ``C = gelu(C + bias[j])`` (the erf
form, as ``torch.nn.functional.gelu``), fused over their first two dimensions with ``acc.fuse``.
The fused schedule is tiled and planned as ``samples/hopper_matmul.py`` plans the product alone
(128 x 256 x 64 tiles, 3 stages, a producer warpgroup and two consumer warpgroups, a persistent
grid); the epilogue runs on each consumer's float32 accumulator in registers after the tile's last
product, before C leaves by TMA: C is written once, never read back from global memory.

- ``gelu_fp16_<M>x<N>x<K>``: float16 A, B, bias and C at 4096^3 and 8192 x 4096 x 2048;
- ``gelu_tanh_fp16_<M>x<N>x<K>``: GELU's tanh form (``F.gelu(x, approximate="tanh")``, cuBLASLt's
  GELU epilogue) with ``acc.fast_tanh``, the GPU's one-instruction tanh: an epilogue of some ten
  instructions an element where the erf form takes about 27;
- ``relu_fp16_<M>x<N>x<K>``: C = relu(A @ B + bias), an epilogue of a few instructions an element;
- ``matmul_fp16_<M>x<N>x<K>``: the same plan without the epilogue (what the fused kernels are
  measured against in ``benchmarks/fused_gemm.py``);
- ``gelu_into_fp16_<M>x<N>x<K>``: ``Y = gelu(A @ B + bias)`` into another array Y, the product a
  float32 TEMP C held in registers alone (arguments A, B, bias, Y; Y leaves by TMA);
- ``gelu_keep_fp16_<M>x<N>x<K>``: ``C = A @ B + bias`` stored (by TMA) and ``Y = gelu(C)`` beside it
  (the pre-activation a training step keeps), two epilogue statements, one kernel;
- ``gelu_pp_fp16_<M>x<N>x<K>``, ``matmul_pp_fp16_<M>x<N>x<K>``: the ping-pong plan
  (``warp_specialize(teams=2)``, 128 x 128 x 64 tiles, 4 stages) with and without the epilogue:
  one consumer warpgroup runs a tile's epilogue and stores it while the other multiplies the next.

``fused_matmul`` builds the plan for any epilogue, operand and output type
(``samples/fp8_matmul.py`` scales FP8 products with it).
"""

import math

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


WGMMA_K = {acc.ScalarType.float8_e4m3: 32, acc.ScalarType.float8_e5m2: 32, acc.ScalarType.float32: 8}  # else 16


def fused_matmul(M: int, N: int, K: int, epilogue=None, inputs: tuple = (), operand=acc.ScalarType.float16,
                 output=None, b_layout=acc.Array.Layout.FIRST_MAJOR, block=(128, 256, 64), stages: int = 3,
                 group: int = 8, accumulate: bool = False, teams: int = 1, blocks: int | None = None,
                 into: acc.Array | None = None, keep: bool = True, before=None):
    """The Hopper plan of ``C += A @ B`` fused with the epilogue nest ``C[i, j] = epilogue(C[i, j], i, j)``
    (None: the product alone), and its arrays (A, B, C, then ``inputs``, the arrays the epilogue
    reads). A and B of ``operand``, C of ``output`` (default: the operand's type) accumulated in
    float32 fragments; ``accumulate``: C is read (``C = epilogue(C + A @ B)``), else only written;
    ``teams``: 2 for ping-pong (two consumer warpgroups take the block's tiles in turn, each holding
    a whole tile as 64-row parts, so that one runs its epilogue and stores while the other
    multiplies), 1 for cooperative (they share each tile, 64 rows each); ``group``, ``blocks``: the
    persistent grid's (``plan.persistent``).

    ``into``: an (M, N) array the epilogue writes instead (``into[i, j] = epilogue(C[i, j], i, j)``,
    in its own type), last of the arrays; C is stored too unless ``keep`` is False, where C is a
    float32 TEMP array held in registers alone (not an argument); ``before``: a statement on C
    first (``C[i, j] = before(C[i, j], i, j)``)."""
    bm, bn, bk = block
    shape = acc.MMAShape[f"M64xN{bn}xK{WGMMA_K.get(operand, 16)}_B1"]
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N), layout=b_layout)
    role = acc.Role.INPUT_OUTPUT if accumulate else acc.Role.OUTPUT if keep or into is None else acc.Role.TEMP
    C = acc.Array(role=role, element_type=acc.ScalarType.float32 if role is acc.Role.TEMP else output or operand,
                  shape=(M, N))
    target_array = C if into is None else into

    product = acc.Nest(shape=(M, N, K))
    i, j, k = product.get_indices()

    @product.iteration_logic
    def _():
        if operand.is_float:
            C[i, j] += A[i, k] * B[k, j]
        else:  # 8-bit integers multiplied in C's type, as the tensor cores do (in their own they would wrap)
            C[i, j] += acc.cast(A[i, k], C.element_type) * acc.cast(B[k, j], C.element_type)

    schedule = product.create_schedule()
    if epilogue is not None:
        after = acc.Nest(shape=(M, N))
        i1, j1 = after.get_indices()

        @after.iteration_logic
        def _():
            if before is not None:
                C[i1, j1] = before(C[i1, j1], i1, j1)
            value = epilogue(C[i1, j1], i1, j1)
            target_array[i1, j1] = value if into is None else acc.cast(value, into.element_type)

        schedule = acc.fuse((schedule, after.create_schedule()), partial=2)
        f, i, j, k = schedule.get_indices()
    ii, jj, kk = schedule.split(i, bm), schedule.split(j, bn), schedule.split(k, bk)
    iii, jjj = schedule.split(ii, 64), schedule.split(jj, bn)  # one warpgroup's tile of C
    m, n, mk = target.tensor_core_info.compute_tensor_splits(shape)
    iiii, jjjj, kkk = schedule.tile({iii: m, jjj: n, kk: mk})
    fusing = (f,) if epilogue is not None else ()
    if teams == 1:  # the block's warpgroups share its tile: 64 rows each
        schedule.reorder(i, j, *fusing, ii, jj, k, kk, iii, jjj, iiii, jjjj, kkk)
    else:  # each team's warpgroup holds the whole tile, 64 rows at a time
        schedule.reorder(i, j, *fusing, jj, k, kk, ii, iii, jjj, iiii, jjjj, kkk)

    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               **({ii: target.GridUnit.WARPGROUP_Y} if teams == 1 else {}), jj: target.GridUnit.WARPGROUP_X})
    first = acc.MMAFragmentOp.NONE if accumulate else acc.MMAFragmentOp.SET  # SET: C's fragments start at 0
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=shape, prologue_op=first, prologue_arg=0.0)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=stages, engine=acc.CopyEngine.TMA)
    plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(True, teams=teams)
    plan.persistent(group=group, blocks=blocks)
    kept = (C,) if role is not acc.Role.TEMP else ()
    return plan, (A, B, *kept, *inputs, *((into,) if into is not None else ()))


def gelu_matmul(M: int, N: int, K: int, dtype=acc.ScalarType.float16, block=(128, 256, 64), stages: int = 3,
                fused: bool = True, group: int = 8, accumulate: bool = False, activation: str = "gelu",
                teams: int = 1, blocks: int | None = None, into: str | None = None):
    """The plan and its arrays (A, B, C, bias; without ``fused``: A, B, C). ``accumulate``:
    C = gelu(C + A @ B + bias), C read (by TMA, chunk by chunk, the epilogue on each chunk);
    ``activation``: "gelu" (the erf form), "gelu_tanh" (the tanh form, by ``acc.fast_tanh``) or
    "relu". ``into``: the activation written into another array Y of ``dtype`` (the arrays A, B,
    [C,] bias, Y): "registers" (the product in float32 registers alone: C is no argument) or
    "kept" (C = A @ B + bias stored too, the pre-activation a training step keeps)."""
    bias = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N,))
    if into is not None:
        return _gelu_into(M, N, K, dtype, bias, into == "kept", activation, block=block, stages=stages, group=group,
                          teams=teams, blocks=blocks)

    def epilogue(c, i, j):
        x = c + bias[j]
        if activation == "gelu":
            return 0.5 * x * (1.0 + acc.erf(x * (1.0 / math.sqrt(2.0))))
        if activation == "gelu_tanh":
            return 0.5 * x * (1.0 + acc.fast_tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
        return acc.max(x, 0.0)
    return fused_matmul(M, N, K, epilogue if fused else None, (bias,) if fused else (), dtype, block=block,
                        stages=stages, group=group, accumulate=accumulate, teams=teams,
                        blocks=blocks)


def _gelu_into(M: int, N: int, K: int, dtype, bias, kept: bool, activation: str, **plan):
    """``Y = gelu(A @ B + bias)`` into Y of ``dtype``; ``kept``: C = A @ B + bias stored too (two
    epilogue statements: C's, then Y's from C's element)."""
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))

    def epilogue(c, i, j):
        x = c if kept else c + bias[j]
        if activation == "gelu_tanh":
            return 0.5 * x * (1.0 + acc.fast_tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
        return 0.5 * x * (1.0 + acc.erf(x * (1.0 / math.sqrt(2.0))))
    return fused_matmul(M, N, K, epilogue, (bias,), dtype, into=Y, keep=kept,
                        before=(lambda c, i, j: c + bias[j]) if kept else None, **plan)


SHAPES = ((4096, 4096, 4096), (8192, 4096, 2048))
PING_PONG = {"block": (128, 128, 64), "stages": 4, "teams": 2}  # the ping-pong plan's tiles and stages

if __name__ == "__main__":
    package = acc.Package()
    for M, N, K in SHAPES:
        package.add(*gelu_matmul(M, N, K), base_name=f"gelu_fp16_{M}x{N}x{K}")
        package.add(*gelu_matmul(M, N, K, activation="gelu_tanh"), base_name=f"gelu_tanh_fp16_{M}x{N}x{K}")
        package.add(*gelu_matmul(M, N, K, activation="relu"), base_name=f"relu_fp16_{M}x{N}x{K}")
        package.add(*gelu_matmul(M, N, K, fused=False), base_name=f"matmul_fp16_{M}x{N}x{K}")
        package.add(*gelu_matmul(M, N, K, into="registers"), base_name=f"gelu_into_fp16_{M}x{N}x{K}")
        package.add(*gelu_matmul(M, N, K, into="kept"), base_name=f"gelu_keep_fp16_{M}x{N}x{K}")
        for name, fused in (("gelu", True), ("matmul", False)):  # ping-pong: an epilogue beside products
            package.add(*gelu_matmul(M, N, K, fused=fused, **PING_PONG), base_name=f"{name}_pp_fp16_{M}x{N}x{K}")
    package.build("fused_gemm", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/fused_gemm")
