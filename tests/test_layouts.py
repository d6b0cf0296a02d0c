"""Shared tiles of column-major arrays keep the array's layout: copies move 16-byte vectors
along the contiguous dimension (cp.async included) and tensor cores load col_major fragments.
A tile asked for in the other layout (``layout=``) is transposed by its copy."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import copy_box, copy_threads
from schedc.ir.kernel import BlockCopy, Fragment, Staging
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile
from schedc.verify import emulate_function

from .plans import FIRST, LAST, REGISTERS, VARIANTS, compile_plan, simt_matmul, simt_register_tile, tensor_matmul


def statements(kernel, kind):
    return [s for s in walk_statements(kernel.body) if isinstance(s, kind)]


def test_column_major_tiles_keep_the_layout():
    _, kernel = compile_plan(*VARIANTS["wmma_fp16_colmajor_3_stages"][0]())
    a, b = kernel.shared
    assert (a.shape, a.strides) == ((3, 32, 32), (1280, 1, 40)), "a ring of column-major 32x32 tiles, pitch 40"
    _, kernel = compile_plan(*VARIANTS["fp16_colmajor_3_stages"][0]())  # mma.sync: dense, swizzled
    a, b = kernel.shared
    assert (a.shape, a.strides, a.swizzle) == ((3, 32, 32), (1024, 1, 32), 64)
    copies = statements(kernel, BlockCopy)
    assert copies and all(c.axes == (1, 0) and c.vector == 8 and c.asynchronous for c in copies)
    operands = [f for f in statements(kernel, Fragment) if f.use != "accumulator"]
    assert operands and all(f.layout == "col_major" for f in operands)


def test_row_major_tiles_are_unchanged():
    _, kernel = compile_plan(*VARIANTS["wmma_fp16_async_3_stages"][0]())
    assert all(c.axes == () for c in statements(kernel, BlockCopy))
    assert [b.strides for b in kernel.shared] == [(1280, 40, 1), (1280, 40, 1)]


def _offsets(kernel, copy, buffer_name, origin_values):
    """Each element's offset in ``buffer_name`` for a copy, in the order the copy moves them."""
    buffer = {b.name: b for b in (*kernel.params, *kernel.shared)}[buffer_name]
    box, _ = copy_box(copy.shape, copy.axes)
    strides = buffer.strides[len(buffer.strides) - len(copy.shape):]
    return sum((box[d] + origin_values[d]) * strides[d] for d in range(len(copy.shape)))


@pytest.mark.parametrize("name", ["fp16_colmajor_3_stages", "fp16_colmajor_b_partial_registers"])
def test_every_vector_is_contiguous_on_both_sides(name):
    """What the runtime's block copy assumes: the ``vector`` elements moved together are adjacent
    in global and in shared memory. Dropping the copy order breaks it."""
    _, kernel = compile_plan(*VARIANTS[name][0]())
    copies = [c for c in statements(kernel, BlockCopy) if c.axes]
    assert copies
    for copy in copies:
        for c in (copy, dataclasses.replace(copy, axes=())):
            vectors = [_offsets(kernel, c, n, (0,) * len(c.shape)).reshape(-1, c.vector)
                       for n in (copy.source, copy.target)]
            contiguous = all((np.diff(v, axis=1) == 1).all() for v in vectors)
            assert contiguous == (c is copy), f"{c.source}: axes {c.axes}"


def test_each_thread_copies_whole_vectors_of_a_column_major_tile():
    _, kernel = compile_plan(*VARIANTS["fp16_colmajor_3_stages"][0]())
    copy = statements(kernel, BlockCopy)[0]
    _, order = copy_box(copy.shape, copy.axes)
    threads = copy_threads(order, copy.vector, copy.strategy, kernel.threads_per_block).reshape(-1, copy.vector)
    assert (threads == threads[:, :1]).all() and len(np.unique(threads)) == kernel.threads_per_block


def test_register_staging_keeps_the_copy_order():
    _, kernel = compile_plan(*VARIANTS["fp16_colmajor_b_partial_registers"][0]())
    staged = {s.name: s for s in statements(kernel, Staging)}
    assert staged["A_staged"].axes == () and staged["B_staged"].axes == (1, 0)


def test_cuda_and_ptx_of_column_major_tiles():
    _, kernel = compile_plan(*VARIANTS["wmma_fp16_colmajor_3_stages"][0](), name="colmajor")
    source = emit_source([kernel], "// colmajor")
    # A (64 x 256, column-major): the copy's rows are A's columns (k), 64 elements apart in A
    assert "schedc::block_copy_async<__half, 32, 32, 8, true, 128>(&A_shared[0], 40, &A[i], 64, thread);" in source
    assert "wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> _a0;" in source
    assert re.search(r"wmma::load_matrix_sync\(_a0, &A_shared\[k_stage \* 1280 \+ ii \+ kk \* 40\], 40\);", source)
    ptx = nvrtc_compile(source, "colmajor", "sm_90").ptx
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16;", ptx)
    assert "wmma.load.a.sync.aligned.col" in ptx


@pytest.mark.parametrize("plan", [
    lambda: tensor_matmul(64, 64, 128, k_split=32, shared_ab=True, a_layout=LAST),  # sequential
    lambda: tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, cache_c=0, b_layout=LAST, pipeline=REGISTERS),
    lambda: tensor_matmul(50, 40, 100, k_split=32, shared_ab=True, cache_c=0, a_layout=LAST, b_layout=LAST,
                          pipeline={"stages": 3}),  # partial tiles: bounded 4-byte vectors along M
    lambda: simt_matmul(64, 64, 96, block=(16, 16), shared_k=16, pipeline={"stages": 2}, a_layout=LAST),
    lambda: simt_matmul(100, 70, 36, shared_k=12, pipeline=REGISTERS, a_layout=LAST, b_layout=LAST),
], ids=["tensor_sync_a", "tensor_registers_b", "tensor_partial_3_stages", "simt_2_stages_a", "simt_partial_registers"])
def test_column_major_caches_match_numpy(plan):
    model, kernel = compile_plan(*plan())
    reports = emulate_function(model, kernel, blocks=None, seed=11)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


PIPELINES = [None, REGISTERS, {"stages": 1}, {"stages": 3}]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(16, 40).map(lambda m: 2 * m), st.integers(4, 8).map(lambda n: 8 * n),
       st.integers(4, 10).map(lambda k: 8 * k), st.sampled_from([FIRST, LAST]), st.sampled_from([FIRST, LAST]),
       st.sampled_from(range(len(PIPELINES))))
def test_random_layouts_and_sizes_match_numpy(M, N, K, a_layout, b_layout, pipeline):
    plan, args = tensor_matmul(M, N, K, k_split=32 if K >= 32 else 16, shared_ab=True, cache_c=0,
                               a_layout=a_layout, b_layout=b_layout, pipeline=PIPELINES[pipeline])
    model, kernel = compile_plan(plan, args)
    reports = emulate_function(model, kernel, blocks=None, seed=M + N + K)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


def test_layout_may_name_the_arrays_own():
    for a_layout in (FIRST, LAST):
        plan, args = tensor_matmul(64, 64, 128, k_split=32, shared_ab=True, a_layout=a_layout, b_layout=a_layout,
                                   pipeline={"layout": a_layout, "stages": 2})
        _, kernel = compile_plan(plan, args)
        assert all(c.axes == ((1, 0) if a_layout is LAST else ()) for c in statements(kernel, BlockCopy))


TRANSPOSING = [None, REGISTERS, {"double_buffer": True}]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(16, 40).map(lambda m: 2 * m), st.integers(4, 8).map(lambda n: 8 * n),
       st.integers(4, 10).map(lambda k: 8 * k), st.sampled_from([FIRST, LAST]), st.sampled_from([FIRST, LAST]),
       st.sampled_from([FIRST, LAST]), st.sampled_from(range(len(TRANSPOSING))))
def test_transposed_tiles_match_numpy(M, N, K, a_layout, b_layout, layout, pipeline):
    """layout= other than the array's (Accera's cache_layouts): the tile is stored in the order
    asked for, the copy reads vectors along the array's rows and writes them down the tile's
    columns, and the tensor cores read the tile in its own layout. Sequential caches and both
    double buffers (AUTO takes the register one: cp.async cannot transpose)."""
    extra = {"layout": layout, **(TRANSPOSING[pipeline] or {})}
    plan, args = tensor_matmul(M, N, K, k_split=32 if K >= 32 else 16, shared_ab=True, cache_c=0,
                               a_layout=a_layout, b_layout=b_layout, pipeline=extra)
    model, kernel = compile_plan(plan, args)
    wanted = (0, 1) if layout is FIRST else (1, 0)
    for b in kernel.shared[:2]:
        assert tuple(sorted(range(2), key=lambda d: -b.strides[-2:][d])) == wanted, (b.name, b.strides)
    assert not any(c.asynchronous for c in statements(kernel, BlockCopy) if c.target in
                   {b.name for b in kernel.shared[:2]} and _transposes(kernel, c))
    reports = emulate_function(model, kernel, blocks=None, seed=M + N + K)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


def _transposes(kernel, copy) -> bool:
    shared = {b.name: b for b in kernel.shared}[copy.target]
    axes = copy.axes or (0, 1)
    return shared.strides[len(shared.strides) - 2 + axes[-1]] != 1


def test_transposing_copies_in_cuda():
    """The copy into a transposed tile says so (TRANSPOSE), with the tile's column pitch; so does
    the register double buffer's store. The SIMT tile is padded (16 bytes a column) so that the
    elements of a vector land in different banks."""
    plan, args = simt_matmul(64, 64, 96, block=(16, 16), shared_k=16, b_layout=FIRST, pipeline={"layout": LAST})
    model, kernel = compile_plan(plan, args)
    source = emit_source([kernel], "// t")
    assert re.search(r"schedc::block_copy<float, 16, 16, 4, true, 256, false, 0, true>\(&B_shared\[0\], 20, ", source)
    plan, args = tensor_matmul(64, 64, 128, k_split=32, shared_ab=True, a_layout=LAST,
                               pipeline={"layout": LAST, **REGISTERS})
    source = emit_source([compile_plan(plan, args)[1]], "// t")
    assert re.search(r"B_staged\.store<\d+, true>\(&B_shared\[0\], ", source)
    assert re.search(r"A_staged\.store<\d+>\(&A_shared\[0\], ", source)  # A's array is column-major already
    nvrtc_compile(source, "t", "sm_80")


@pytest.mark.parametrize("options, b_layout, message", [
    ({"layout": LAST, "stages": 2}, FIRST,
     r"cache\(.*, index=kk, location=SHARED\): cp.async copies vectors into the same layout, but A's tile is "
     r"transposed \(layout= other than the array's\): use double_buffer=True with double_buffer_location=PRIVATE"),
    ({"layout": "FIRST_MAJOR"}, FIRST, r"layout must be an Array.Layout \(or None: the array's own\), not 'FIRST_MAJOR'"),
])
def test_transposing_refusals(options, b_layout, message):
    with pytest.raises(acc.CacheError, match=message):
        plan, args = tensor_matmul(64, 64, 128, k_split=32, shared_ab=True, b_layout=b_layout, pipeline=options)
        compile_plan(plan, args)


def test_tma_boxes_are_not_transposed_rank_3_tiles_are_by_slices():
    plan, args = simt_matmul(64, 64, 96, block=(16, 16), shared_k=16)
    kk = next(x for x in plan.schedule.get_indices() if x.name == "kk")
    with pytest.raises(acc.CacheError, match=r"layout LAST_MAJOR: the array has strides \[96, 1\] \(dimension 1 "
                                             r"contiguous\) and a TMA box keeps the array's layout: leave layout unset"):
        plan.cache(args[0], index=kk, location=acc.MemorySpace.SHARED, layout=LAST, engine=acc.CopyEngine.TMA)
    X = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(4, 8, 8))
    Y = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(4, 8, 8))
    nest = acc.Nest(shape=(4, 8, 8))
    a, b, c = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[a, b, c] += X[a, b, c]

    plan = nest.create_schedule().create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))
    plan.cache(X, index=a, location=acc.MemorySpace.SHARED, layout=LAST)  # rank 3: one 2-D slice at a time
    model, kernel = compile_plan(plan, (X, Y))
    tile = next(b for b in kernel.shared if b.name == "X_shared")
    assert tile.strides[1] == 1 and tile.strides[1] < tile.strides[2] < tile.strides[0]  # slices column-major
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=2))
    nvrtc_compile(emit_source([kernel], "// rank-3 transposed"), "rank3_transposed", "sm_90")


@pytest.mark.parametrize("location", [acc.MemorySpace.PRIVATE, acc.MemorySpace.MMA_FRAGMENT])
def test_register_caches_take_any_layout(location):
    """Accera's scripts name the layout of register caches too: registers have none, so any is
    accepted and the kernel is the same."""
    kernels = []
    for layout in (None, FIRST, LAST):
        plan, args = tensor_matmul(64, 64, 128, k_split=32, shared_ab=True) if location is \
            acc.MemorySpace.MMA_FRAGMENT else simt_register_tile(64, 64, 32, shared=False)[:2]
        if location is acc.MemorySpace.PRIVATE:
            plan, args = simt_register_tile(64, 64, 32, shared=False)
            plan.caches.pop()  # the C cache the helper made: made again with a layout
        k = next(index for index in plan.schedule.get_indices() if index.name == "k")
        plan.cache(args[2], index=k, location=location, layout=layout)
        kernels.append(emit_source([compile_plan(plan, args)[1]], "// t"))
    assert kernels[0] == kernels[1] == kernels[2]




def test_a_register_double_buffer_needs_a_contiguous_dimension():
    """An array with no unit stride (layout=(64, 2)): its tiles are copied element by element,
    which the register double buffer's row loads cannot; cp.async stages and sequential copies can."""
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(32, 32), layout=(64, 2))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(32, 32))
    nest = acc.Nest(shape=(32, 32))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[i, j] * 2.0

    def plan_with(**pipeline):
        s = nest.create_schedule()
        ii = s.split(i, 4)
        plan = s.create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))
        plan.bind({j: acc.GridUnit.THREAD_X})
        plan.cache(A, index=ii, location=acc.MemorySpace.SHARED, **pipeline)
        return plan

    with pytest.raises(acc.CacheError, match="a register double buffer loads rows of contiguous elements"):
        compile_plan(plan_with(double_buffer=True, double_buffer_location=acc.MemorySpace.PRIVATE), (A, B))
    for pipeline in ({}, {"stages": 2}):
        model, kernel = compile_plan(plan_with(**pipeline), (A, B))
        assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))
        nvrtc_compile(emit_source([kernel], "// strided"), "strided", "sm_90")
