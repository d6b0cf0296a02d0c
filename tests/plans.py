"""Plan builders used across the tests: matrix products (SIMT and tensor cores) and
element-wise nests, with the knobs the tests vary."""

from __future__ import annotations

from pathlib import Path

import schedc as acc
from schedc.frontend.freeze import freeze
from schedc.lower import compile_function, compile_model, verifying
from schedc.package.build import name_arrays

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
T = acc.ScalarType
FIRST, LAST = acc.Array.Layout.FIRST_MAJOR, acc.Array.Layout.LAST_MAJOR
REGISTERS = {"double_buffer": True, "double_buffer_location": acc.MemorySpace.PRIVATE}


def matmul_arrays(M, N, K, operand=T.float32, result=T.float32, a_layout=FIRST, b_layout=FIRST,
                  c_role=acc.Role.INPUT_OUTPUT):
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(M, K), layout=a_layout)
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(K, N), layout=b_layout)
    C = acc.Array(role=c_role, element_type=result, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    exact = not operand.is_float and operand != result  # integers multiplied in C's type, as tensor cores do

    @nest.iteration_logic
    def _():
        if exact:
            C[i, j] += acc.cast(A[i, k], result) * acc.cast(B[k, j], result)
        else:
            C[i, j] += A[i, k] * B[k, j]

    return nest, (A, B, C)


def product_schedule(nest, args, epilogue=None):
    """The product's schedule, its (i, j, k), the fusing index (None without an ``epilogue``) and
    the arrays: ``with_epilogue``'s where there is one."""
    if epilogue is not None:
        return with_epilogue(nest, args, epilogue)
    return nest.create_schedule(), nest.get_indices(), None, args


def with_epilogue(nest, args, epilogue):
    """The product's schedule fused (``acc.fuse(..., partial=2)``) with an element-wise epilogue
    nest ``C[i, j] = epilogue(C[i, j], bias[j], D[i, j], i, j)`` over C's shape, ``bias`` (C's
    type, length N) and ``D`` (C's type and shape) two more inputs. Returns the schedule, its (i, j, k)
    and fusing index, and the arrays (A, B, C, bias, D)."""
    C = args[2]
    M, N = C.shape
    bias = acc.Array(role=acc.Role.INPUT, element_type=C.element_type, shape=(N,))
    D = acc.Array(role=acc.Role.INPUT, element_type=C.element_type, shape=(M, N))
    after = acc.Nest(shape=(M, N))
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        C[x, y] = epilogue(C[x, y], bias[y], D[x, y], x, y)

    s = acc.fuse((nest.create_schedule(), after.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    return s, (i, j, k), f, (*args, bias, D)


def simt_matmul(M, N, K, block=(32, 32), dtype=T.float32, tuple_grid=False, unroll_k=0, target=H100,
                shared_k=0, pipeline=None, a_layout=FIRST, b_layout=FIRST, splits=1, epilogue=None):
    """``splits`` > 1: k split in that many parts on BLOCK_Z (split-K); ``epilogue``: a fused
    epilogue (``with_epilogue``), its part run by each thread after its k loop."""
    nest, args = matmul_arrays(M, N, K, dtype, dtype, a_layout, b_layout)
    s, (i, j, k), f, args = product_schedule(nest, args, epilogue)
    kz, k = (k, s.split(k, K // splits)) if splits > 1 else (None, k)
    ii, jj = s.split(i, block[0]), s.split(j, block[1])
    order = [*([kz] if kz is not None else []), i, j, ii, jj, *([f] if f is not None else []), k]
    if unroll_k or shared_k:
        kk = s.split(k, unroll_k or shared_k)
        order.append(kk)
    s.reorder(*order)
    plan = s.create_plan(target)
    g = target.GridUnit
    split = {kz: g.BLOCK_Z} if kz is not None else {}
    if tuple_grid:
        plan.bind({(i, j): g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X, **split})
    else:
        plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X, **split})
    if unroll_k:
        plan.unroll(order[-1])
    if shared_k:  # A's rows and B's columns of the block, shared_k at a time, in shared memory
        for array in args[:2]:
            plan.cache(array, index=order[-1], location=acc.MemorySpace.SHARED, **(pipeline or {}))
    return plan, args


def simt_register_tile(M, N, K, block=(64, 64), per_thread=(4, 4), k_split=16, shared=True, pipeline=None,
                       dtype=T.float32, index="k", target=H100):
    """Each thread computes a per_thread tile of C kept in registers across k (PRIVATE cache),
    from A's and B's block tiles in shared memory (``shared``)."""
    nest, args = matmul_arrays(M, N, K, dtype, dtype)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, block[0]), s.split(j, block[1])
    iii, jjj = s.split(ii, per_thread[0]), s.split(jj, per_thread[1])
    kk = s.split(k, k_split)
    s.reorder(i, j, ii, jj, k, kk, iii, jjj)
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    loops = {"ii": ii, "jj": jj, "k": k, "kk": kk, "iii": iii}  # ii, jj: bound to threads
    plan.cache(args[2], index=loops[index], location=acc.MemorySpace.PRIVATE)
    if shared:
        for array in args[:2]:
            plan.cache(array, index=kk, location=acc.MemorySpace.SHARED, **(pipeline or {}))
    return plan, args


def tensor_matmul(M, N, K, operand=T.float16, result=T.float32, mma=acc.MMAShape.M16xN16xK16_B1,
                  passes=1, fused=None, block=(32, 32), a_layout=FIRST, b_layout=FIRST,
                  c_role=acc.Role.INPUT_OUTPUT, k_split=None, target=H100, cache_c=None, shared_ab=False,
                  strategy=None, pipeline=None, fragment_type=None, splits=1, epilogue=None, **ops):
    """Accera's tensorized schedule: blocks of C bound to BLOCK_*, warps to WARP_*.
    ``pipeline``: extra arguments of the A and B caches (double_buffer, stages, ...);
    ``fragment_type``: the MMA_FRAGMENT cache's element_type (with ``cache_c``); ``splits`` > 1: k
    split in that many parts on BLOCK_Z (split-K); ``epilogue``: a fused epilogue (``with_epilogue``)."""
    nest, args = matmul_arrays(M, N, K, operand, result, a_layout, b_layout, c_role)
    s, (i, j, k), f, args = product_schedule(nest, args, epilogue)
    kz, k = (k, s.split(k, K // splits)) if splits > 1 else (None, k)
    ii, jj = s.split(i, block[0]), s.split(j, block[1])
    m, n, kk_size = target.tensor_core_info.compute_tensor_splits(mma, passes)
    outer_k = [k]
    if k_split:
        outer_k.append(s.split(k, k_split))
    iii, jjj, kk = s.tile({ii: m, jj: n, outer_k[-1]: kk_size})
    s.reorder(*([kz] if kz is not None else []), i, j, *([f] if f is not None else []), *outer_k, ii, jj, iii, jjj,
              kk)
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.WARP_Y, jj: g.WARP_X, **({kz: g.BLOCK_Z} if kz is not None else {})})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=mma, num_total_passes=passes,
                   num_fused_passes=fused, **ops)
    if cache_c is not None:  # keep C's tile in a fragment across the outer (0) or inner (-1) k loop
        plan.cache(args[2], index=outer_k[cache_c], location=acc.MemorySpace.MMA_FRAGMENT,
                   element_type=fragment_type)
    if shared_ab:  # Accera's input caching: A and B tiles in shared memory for the inner k loop
        for array in args[:2]:
            plan.cache(array, index=outer_k[-1], location=acc.MemorySpace.SHARED, strategy=strategy,
                       **(pipeline or {}))
    return plan, args


def narrow_min(target=H100):
    """B[i] = min(A[i], min(-A[i], A[28 - i] - i)) in int16 (the random tester's GPU seed 4404,
    #540: selected as shorts, NVRTC 13 returned A[28] - i where -A[i] was the smaller)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.int16, shape=(29,), name="A")
    B = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(28,), name="B")
    nest = acc.Nest(28)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] = acc.min(A[i], acc.min(-A[i], A[28 - i] - i))

    s = nest.create_schedule()
    ii = s.split(i, 5)
    plan = s.create_plan(target)
    plan.bind({ii: target.GridUnit.THREAD_Z, i: target.GridUnit.BLOCK_X})
    return plan, (A, B)


def saturating_casts(target=H100):
    """Floating point to integers out of range: toward zero, clamped, NaN to 0, in the kernel,
    the emulator and the reference alike (the random tester's seed 4405 #544 doubled an int32
    through float64 past its range)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(96,), name="A")
    I = acc.Array(role=acc.Role.OUTPUT, element_type=T.int32, shape=(96,), name="I")
    S = acc.Array(role=acc.Role.OUTPUT, element_type=T.int8, shape=(96,), name="S")
    U = acc.Array(role=acc.Role.OUTPUT, element_type=T.uint16, shape=(96,), name="U")
    Z = acc.Array(role=acc.Role.OUTPUT, element_type=T.int64, shape=(96,), name="Z")
    nest = acc.Nest(96)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        I[i] = acc.cast(acc.cast(A[i], T.float64) * 6.0e9, T.int32)
        S[i] = acc.cast(A[i] * 500.0, T.int8)
        U[i] = acc.cast(A[i] * 1.0e5, T.uint16)
        Z[i] = acc.cast((A[i] - A[i]) / (A[i] - A[i]), T.int64)

    s = nest.create_schedule()
    ii = s.split(i, 32)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
    return plan, (A, I, S, U, Z)


def elementwise(M, N, dtype=T.float16, target=H100):
    """C = max(2 * A, B) - min(A, 0.25) + cast(i + j, dtype): constants, casts, index values."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    B = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N), layout=LAST)
    C = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(M, N))
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = acc.max(2.0 * A[i, j], B[i, j]) - acc.min(A[i, j], 0.25) + acc.cast(i + j, dtype) / 64.0

    return rows_of_threads(nest, target), (A, B, C)


def rows_of_threads(nest, target=H100):
    """The plan of a 2-D nest: blocks of 8 x 32 elements, a thread each."""
    i, j = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, 8), s.split(j, 32)
    s.reorder(i, j, ii, jj)
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    return plan


def const_and_temp(M=32, N=64, target=H100):
    """T = A * W[i] (W embedded in the package, T package scratch); C = T + 1."""
    import numpy as np

    W = acc.Array(role=acc.Role.CONST, data=np.linspace(-1.0, 1.0, M).astype(np.float32))
    Tmp = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(M, N))
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(M, N))
    C = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(M, N))
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        Tmp[i, j] = A[i, j] * W[i]
        C[i, j] = Tmp[i, j] + 1.0

    s = nest.create_schedule()
    jj = s.split(j, 32)
    s.reorder(i, j, jj)
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_X, jj: g.THREAD_X})
    return plan, (A, C)


def batched_cache(batches: int, rows: int, pipeline: dict | None = None, layout=FIRST):
    """B[b, i, j] = A[b, i, j] * 2 with A's tile over (bb, ii, j) in shared memory: a tile of
    rank 3, copied one 2-D slice at a time (batches in tiles of 2, rows in tiles of 4)."""
    A = acc.Array(role=acc.Role.INPUT, shape=(batches, rows, 16), name="A", layout=layout)
    B = acc.Array(role=acc.Role.OUTPUT, shape=(batches, rows, 16), name="B")
    nest = acc.Nest(shape=(batches, rows, 16))
    b, i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[b, i, j] = A[b, i, j] * 2.0

    s = nest.create_schedule()
    bb, ii = s.split(b, 2), s.split(i, 4)
    s.reorder(i, b, bb, ii, j)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_X, j: g.THREAD_X})
    plan.cache(A, index=bb, location=acc.MemorySpace.SHARED, **(pipeline or {}))
    return plan, (A, B)


def write_then_read(M, N):
    """C[i, j] = A[i, j] + 1; D[i, j] = C[i, j] * 2: an OUTPUT read after the same iteration wrote it."""
    A = acc.Array(role=acc.Role.INPUT, shape=(M, N), name="A")
    C = acc.Array(role=acc.Role.OUTPUT, shape=(M, N), name="C")
    D = acc.Array(role=acc.Role.OUTPUT, shape=(M, N), name="D")
    nest = acc.Nest(shape=(M, N))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = A[i, j] + 1.0
        D[i, j] = C[i, j] * 2.0

    plan = nest.create_schedule().create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.THREAD_X})
    return plan, (A, C, D)


def compile_plan(plan, args, name="f"):
    """(model, kernel) without writing files."""
    name_arrays(name, plan, args)  # as Package.add does
    model = freeze(plan, name, args)
    return model, compile_model(model)


def compile_function_plan(plan, args, name="f"):
    """(model, function: every kernel) without writing files, the IR verified after each pass."""
    name_arrays(name, plan, args)
    model = freeze(plan, name, args)
    with verifying():
        return model, compile_function(model)


def build(plan, args, name: str, directory: Path) -> Path:
    package = acc.Package()
    package.add(plan, args=args, base_name=name)
    return package.build(name, output_dir=directory)


# (name, builder, emulated blocks or None for all) for the variant matrix
WMMA, MMA_SYNC = acc.Instruction.WMMA, acc.Instruction.MMA_SYNC
VARIANTS = {
    "simt_tails": (lambda: simt_matmul(100, 70, 33), None),
    "simt_17x33x65": (lambda: simt_matmul(17, 33, 65, block=(8, 16), unroll_k=8), None),
    "simt_1000_cubed": (lambda: simt_matmul(1000, 1000, 1000), 3),
    "simt_tuple_grid_unroll": (lambda: simt_matmul(64, 96, 48, block=(16, 32), tuple_grid=True, unroll_k=8), None),
    "fp16_colmajor_b": (lambda: tensor_matmul(64, 96, 64, b_layout=LAST), None),
    "fp16_acc_fp16": (lambda: tensor_matmul(64, 64, 64, result=T.float16), None),
    "bf16_set_scale": (lambda: tensor_matmul(64, 64, 96, operand=T.bfloat16, prologue_op=acc.MMAFragmentOp.SET,
                                             prologue_arg=0.0, epilogue_op=acc.MMAFragmentOp.SCALE,
                                             epilogue_arg=0.5), None),
    "tf32_passes": (lambda: tensor_matmul(64, 64, 128, operand=T.float32, mma=acc.MMAShape.M16xN16xK8_B1,
                                          passes=4, fused=2), None),
    # 8-bit and n=8 tiles are 16 bytes wide: column-major B keeps every tile 32-byte aligned
    "int8": (lambda: tensor_matmul(64, 64, 64, operand=T.int8, result=T.int32, passes=2, b_layout=LAST), None),
    # 8-bit tiles 16 bytes apart in global memory (wmma needs 32): mma.sync's lanes load them
    "mma_int8_16_byte_tiles": (lambda: tensor_matmul(48, 64, 80, operand=T.int8, result=T.int32, block=(16, 32)),
                               None),
    "mma_uint8_m32n8_shared": (lambda: tensor_matmul(64, 48, 128, operand=T.uint8, result=T.int32, block=(64, 16),
                                                     mma=acc.MMAShape.M32xN8xK16_B1, k_split=32, shared_ab=True,
                                                     b_layout=LAST), None),
    "m32n8": (lambda: tensor_matmul(64, 32, 64, mma=acc.MMAShape.M32xN8xK16_B1, block=(64, 16), b_layout=LAST), None),
    "m8n32_relu": (lambda: tensor_matmul(32, 64, 64, mma=acc.MMAShape.M8xN32xK16_B1, block=(16, 64),
                                         prologue_op=acc.MMAFragmentOp.SCALE, prologue_arg=-1.0,
                                         epilogue_op=acc.MMAFragmentOp.ReLU, k_split=32), None),
    "elementwise_fp16": (lambda: elementwise(40, 96), None),
    "int16_min_of_a_negation": (narrow_min, None),
    "saturating_casts": (saturating_casts, None),
    "fp16_c_cached": (lambda: tensor_matmul(64, 64, 128, cache_c=0, k_split=32), None),
    "fp16_shared_ab": (lambda: tensor_matmul(64, 64, 256, k_split=64, shared_ab=True), None),
    "fp16_shared_ab_c_cached": (lambda: tensor_matmul(64, 96, 256, k_split=128, shared_ab=True, cache_c=0,
                                                      strategy=acc.CacheStrategy.BLOCKED), None),
    "tf32_shared_ab": (lambda: tensor_matmul(64, 64, 128, operand=T.float32, mma=acc.MMAShape.M16xN16xK8_B1,
                                             k_split=32, shared_ab=True, cache_c=0), None),
    "simt_shared_ab": (lambda: simt_matmul(64, 64, 64, block=(16, 16), shared_k=16), None),
    "bf16_c_cached_set_scale": (lambda: tensor_matmul(64, 64, 96, operand=T.bfloat16, cache_c=0,
                                                      prologue_op=acc.MMAFragmentOp.SET,
                                                      epilogue_op=acc.MMAFragmentOp.SCALE, epilogue_arg=2.0), None),
    "tf32_c_cached_inner_relu": (lambda: tensor_matmul(64, 32, 128, operand=T.float32, mma=acc.MMAShape.M16xN16xK8_B1,
                                                       k_split=32, cache_c=-1, prologue_op=acc.MMAFragmentOp.SET,
                                                       epilogue_op=acc.MMAFragmentOp.ReLU), None),
    "const_and_temp": (lambda: const_and_temp(), None),
    # pipelines: register double buffer, cp.async rings of 1 to 4 stages (more stages than tiles)
    "fp16_registers_double_buffer": (lambda: tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, cache_c=0,
                                                           pipeline=REGISTERS), None),
    "fp16_async_1_stage": (lambda: tensor_matmul(64, 64, 128, k_split=32, shared_ab=True, pipeline={"stages": 1}),
                           None),
    "fp16_async_double_buffer": (lambda: tensor_matmul(64, 96, 256, k_split=32, shared_ab=True, cache_c=0,
                                                       pipeline={"double_buffer": True}), None),
    "fp16_async_3_stages": (lambda: tensor_matmul(64, 64, 320, k_split=32, shared_ab=True, cache_c=0,
                                                  pipeline={"stages": 3}), None),
    "tf32_async_4_stages_short": (lambda: tensor_matmul(32, 64, 64, operand=T.float32,
                                                        mma=acc.MMAShape.M16xN16xK8_B1, k_split=32,
                                                        shared_ab=True, pipeline={"stages": 4}), None),
    "simt_async_2_stages": (lambda: simt_matmul(64, 64, 96, block=(16, 16), shared_k=16,
                                                pipeline={"stages": 2}), None),
    "simt_registers_double_buffer": (lambda: simt_matmul(48, 64, 80, block=(16, 16), shared_k=16,
                                                         pipeline=REGISTERS), None),
    # partial tiles: zero-padded shared tiles, C's edge tiles through per-warp scratch
    "fp16_partial_sync": (lambda: tensor_matmul(72, 100, 72, k_split=32, shared_ab=True), None),
    "fp16_partial_registers": (lambda: tensor_matmul(40, 56, 88, k_split=32, shared_ab=True, cache_c=0,
                                                     pipeline=REGISTERS), None),
    "fp16_partial_3_stages_acc_fp16": (lambda: tensor_matmul(50, 40, 100, result=T.float16,
                                                             k_split=32, shared_ab=True, cache_c=0,
                                                             pipeline={"stages": 3}), None),
    "tf32_partial_2_stages_set": (lambda: tensor_matmul(40, 56, 44, operand=T.float32, mma=acc.MMAShape.M16xN16xK8_B1,
                                                        passes=2, k_split=16, shared_ab=True, cache_c=0,
                                                        pipeline={"stages": 2}, prologue_op=acc.MMAFragmentOp.SET),
                                  None),
    "simt_partial_shared": (lambda: simt_matmul(100, 70, 33, shared_k=8), None),
    # column-major operands: shared tiles keep the array's layout, 16-byte copies along columns
    "fp16_colmajor_3_stages": (lambda: tensor_matmul(64, 96, 256, k_split=32, shared_ab=True, cache_c=0,
                                                     a_layout=LAST, b_layout=LAST, pipeline={"stages": 3}), None),
    "fp16_colmajor_b_partial_registers": (lambda: tensor_matmul(40, 56, 88, k_split=32, shared_ab=True, cache_c=0,
                                                                b_layout=LAST, pipeline=REGISTERS), None),
    "simt_colmajor_partial_2_stages": (lambda: simt_matmul(100, 70, 36, shared_k=12, pipeline={"stages": 2},
                                                           a_layout=LAST, b_layout=LAST), None),
    "simt_partial_async_3_stages": (lambda: simt_matmul(17, 33, 65, block=(8, 16), shared_k=8,
                                                        pipeline={"stages": 3}), None),
    # PRIVATE register tiles: 4x4 of C per thread across k
    "simt_register_tile": (lambda: simt_register_tile(128, 128, 64), None),
    "simt_register_tile_partial_async": (lambda: simt_register_tile(100, 72, 40, block=(32, 32), per_thread=(4, 2),
                                                                    k_split=8, pipeline={"stages": 2}), None),
    "simt_register_tile_no_shared": (lambda: simt_register_tile(64, 64, 48, block=(32, 32), shared=False), None),
    # C's rows (50 floats, 200 bytes) too narrow for wmma in place: every C tile through the scratch
    "fp16_c_staged_partial": (lambda: tensor_matmul(48, 50, 64, k_split=32, shared_ab=True, cache_c=0,
                                                    pipeline={"stages": 2}), None),
    # double_buffer=True (AUTO) on 2-byte rows: the register double buffer instead of cp.async
    "simt_fp16_auto_double_buffer_registers": (lambda: simt_matmul(32, 32, 32, block=(16, 16), dtype=T.float16,
                                                                   shared_k=1, pipeline={"double_buffer": True}),
                                               None),
    "batched_rank3_cache_2_stages": (lambda: batched_cache(3, 10, {"stages": 2}), None),
    "output_written_then_read": (lambda: write_then_read(16, 48), None),
    # the same plans on wmma (AUTO picks mma.sync on sm_80+): padded tiles, tiles at C's edges
    # through the warp's scratch, C's misaligned rows staged
    "wmma_fp16_async_3_stages": (lambda: tensor_matmul(64, 64, 320, k_split=32, shared_ab=True, cache_c=0,
                                                       pipeline={"stages": 3}, instruction=WMMA), None),
    "wmma_fp16_colmajor_3_stages": (lambda: tensor_matmul(64, 96, 256, k_split=32, shared_ab=True, cache_c=0,
                                                          a_layout=LAST, b_layout=LAST, pipeline={"stages": 3},
                                                          instruction=WMMA), None),
    "wmma_fp16_partial_sync": (lambda: tensor_matmul(72, 100, 72, k_split=32, shared_ab=True, instruction=WMMA),
                               None),
    "wmma_tf32_partial_2_stages_set": (lambda: tensor_matmul(40, 56, 44, operand=T.float32,
                                                             mma=acc.MMAShape.M16xN16xK8_B1, passes=2, k_split=16,
                                                             shared_ab=True, cache_c=0, pipeline={"stages": 2},
                                                             prologue_op=acc.MMAFragmentOp.SET, instruction=WMMA),
                                       None),
    "wmma_fp16_c_staged_partial": (lambda: tensor_matmul(48, 50, 64, k_split=32, shared_ab=True, cache_c=0,
                                                         pipeline={"stages": 2}, instruction=WMMA), None),
    "wmma_bf16_set_scale": (lambda: tensor_matmul(64, 64, 96, operand=T.bfloat16, prologue_op=acc.MMAFragmentOp.SET,
                                                  prologue_arg=0.0, epilogue_op=acc.MMAFragmentOp.SCALE,
                                                  epilogue_arg=0.5, instruction=WMMA), None),
    # mma.sync: column-major A through ldmatrix.trans, tf32 B row-major element by element from
    # a swizzled tile, M32xN8 tiles, fp16 accumulators at partial edges
    "mma_fp16_colmajor_a_partial_2_stages": (lambda: tensor_matmul(40, 56, 88, k_split=32, shared_ab=True, cache_c=0,
                                                                   a_layout=LAST, pipeline={"stages": 2},
                                                                   instruction=MMA_SYNC), None),
    "mma_tf32_b_rows_async": (lambda: tensor_matmul(64, 64, 96, operand=T.float32, mma=acc.MMAShape.M16xN16xK8_B1,
                                                    k_split=32, shared_ab=True, cache_c=0, pipeline={"stages": 2},
                                                    instruction=MMA_SYNC), None),
    "mma_m32n8_acc_fp16_partial": (lambda: tensor_matmul(72, 40, 64, result=T.float16,
                                                         mma=acc.MMAShape.M32xN8xK16_B1, block=(64, 16), k_split=32,
                                                         shared_ab=True, cache_c=0, pipeline={"stages": 2},
                                                         epilogue_op=acc.MMAFragmentOp.ReLU,
                                                         instruction=MMA_SYNC), None),
}


def vector_add(n: int, b_function=None, target=H100):
    """c[i] = a[i] + f(b[i]) over ``n`` floats (f: an acc function, or none), 128 threads a block:
    the smallest kernel, for the call path, C programs and torch operators."""
    a, b, c = (acc.Array(role=role, element_type=T.float32, shape=(n,))
               for role in (acc.Role.INPUT, acc.Role.INPUT, acc.Role.OUTPUT))
    nest = acc.Nest(n)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        c[i] = a[i] + (b_function(b[i]) if b_function is not None else b[i])

    schedule = nest.create_schedule()
    ii = schedule.split(i, 128)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
    return plan, (a, b, c)
