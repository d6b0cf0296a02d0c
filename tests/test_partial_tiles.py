"""Partial tiles: splits that do not divide their dimension, in plans with shared-memory caches
and on tensor cores. Shared tiles reaching past an array are zero-filled by bounded copies;
tensorized plans compute whole tiles and store C's edge tiles inside C only."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.errors import PlanError
from schedc.ir.kernel import (
    Binary,
    BlockCopy,
    Const,
    FragmentLoad,
    FragmentStore,
    If,
    Loop,
    StageLoad,
    Var,
)
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile
from schedc.verify import emulate_function

from .conftest import show_sample
from .plans import H100, REGISTERS, VARIANTS, T, compile_plan, simt_matmul, tensor_matmul
from .test_pipelines import broken, emulates


def statements(kernel, kind):
    return [s for s in walk_statements(kernel.body) if isinstance(s, kind)]


# -- the structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("instruction", [acc.Instruction.WMMA, acc.Instruction.MMA_SYNC])
def test_bounded_copies_only_where_tiles_reach_past_the_array(instruction):
    _, kernel = compile_plan(*tensor_matmul(72, 96, 64, k_split=32, shared_ab=True,  # only M is partial
                                            instruction=instruction))
    copies = {c.source: c for c in statements(kernel, BlockCopy)}
    assert copies["A"].valid == (Binary("-", Const(72), Var("i")), Binary("-", Const(64), Var("k")))
    assert copies["B"].valid == (), "B's tiles (k, n) always lie inside B"
    stores = statements(kernel, FragmentStore)
    if instruction is acc.Instruction.WMMA:
        assert stores and all(s.edge is not None and s.edge.scratch == "C_edge" for s in stores)
        assert [b.name for b in kernel.shared] == ["A_shared", "B_shared", "C_edge"]
        assert kernel.shared[-1].shape == (4, 16, 16), "one 16x16 staging tile per warp"
    else:  # each lane stores its own elements inside C: no scratch
        assert stores and all(s.edge is not None and s.edge.scratch == "" for s in stores)
        assert [b.name for b in kernel.shared] == ["A_shared", "B_shared"]


def test_only_k_partial_pads_the_operands_and_stores_c_whole():
    _, kernel = compile_plan(*tensor_matmul(64, 64, 72, k_split=32, shared_ab=True, cache_c=0))
    copies = statements(kernel, BlockCopy)
    assert copies and all(c.valid for c in copies)
    assert all(s.edge is None for s in statements(kernel, FragmentStore) + statements(kernel, FragmentLoad))
    assert "C_edge" not in [b.name for b in kernel.shared]
    assert not statements(kernel, If), "whole tiles: no guard on the iterations"


def test_register_double_buffer_loads_are_bounded():
    _, kernel = compile_plan(*VARIANTS["fp16_partial_registers"][0]())
    loads = statements(kernel, StageLoad)
    assert loads and all(len(s.valid) == 2 for s in loads)


def test_whole_tiles_stay_unbounded():
    _, kernel = compile_plan(*tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, cache_c=0))
    assert all(c.valid == () for c in statements(kernel, BlockCopy))
    assert all(s.edge is None for s in statements(kernel, FragmentStore))
    assert [b.name for b in kernel.shared] == ["A_shared", "B_shared"]


def test_simt_thread_guards_wrap_the_statements_not_the_barriers():
    _, kernel = compile_plan(*VARIANTS["simt_partial_shared"][0]())
    top_ifs = [s for s in kernel.body if isinstance(s, If)]
    assert not top_ifs, "a guard on thread coordinates around a barrier would split the block"
    (k_loop,) = [s for s in kernel.body if isinstance(s, Loop)]
    assert any(isinstance(s, If) for s in walk_statements(k_loop.body))


def test_cuda_of_partial_tiles():
    plan = tensor_matmul(50, 40, 100, result=T.float16, k_split=32, shared_ab=True, cache_c=0,
                         pipeline={"stages": 3}, instruction=acc.Instruction.WMMA)
    _, kernel = compile_plan(*plan, name="edges")
    source = emit_source([kernel], "// edges")
    assert re.search(r"block_copy_async<__half, 32, 32, 4, true, 128, true>\(.*, thread, 50 - i, 100\);", source)
    assert re.search(r"schedc::store_edge<16, 16>\(&C\[.*\], _c, 40, wmma::mem_row_major, 50 - \(i \+ ii\), "
                     r"40 - \(j \+ jj\), C_edge, thread\);", source)
    ptx = nvrtc_compile(source, "edges", "sm_90").ptx
    # zero fill: cp.async with a source size operand
    assert re.search(r"cp\.async\.ca\.shared\.global \[%r\d+\], \[%rd\d+\], 8, %r\d+;", ptx)
    # mma.sync: each lane stores its pairs of halves that lie inside C
    _, kernel = compile_plan(*VARIANTS["fp16_partial_3_stages_acc_fp16"][0](), name="edges")
    source = emit_source([kernel], "// edges")
    assert re.search(r"if \(lane / 4 \+ 8 \* \(elem % 4 / 2\) < 50 - \(i \+ ii\) && 2 \* \(lane % 4\) \+ elem % 2 \+ "
                     r"8 \* \(elem / 4 % 2\) < 40 - \(j \+ jj\)\) \*reinterpret_cast<schedc::vector_type<4>::type\*>", source)


def test_odd_sizes_sample_pads_every_operand():
    for _, _, function, _ in show_sample("odd_sizes"):
        (kernel,) = function.kernels
        copies = statements(kernel, BlockCopy)
        assert copies and all(c.valid and c.asynchronous for c in copies)
        assert all(s.edge is not None for s in statements(kernel, FragmentStore))


# -- the emulator catches a broken edge ---------------------------------------------------------------


def _drop_bounds(s):
    if isinstance(s, BlockCopy | StageLoad):
        return (dataclasses.replace(s, valid=()),)
    return (s,)


def _drop_edges(s):
    if isinstance(s, FragmentStore | FragmentLoad) and s.edge is not None:
        return (dataclasses.replace(s, edge=None),)
    return (s,)


def _widen_edges(s):
    if isinstance(s, FragmentStore) and s.edge is not None:
        rows = Binary("+", s.edge.rows, Const(1))
        return (dataclasses.replace(s, edge=dataclasses.replace(s.edge, rows=rows)),)
    return (s,)


@pytest.mark.parametrize("variant", ["fp16_partial_sync", "fp16_partial_registers", "simt_partial_async_3_stages"])
def test_copies_without_bounds_leave_the_array(variant):
    model, kernel = compile_plan(*VARIANTS[variant][0]())
    with pytest.raises(Exception, match="out of bounds: a block copy's subscript . reaches"):
        emulates(*broken(model, kernel, _drop_bounds))


def test_edge_tiles_without_edges_leave_c():
    model, kernel = compile_plan(*VARIANTS["fp16_partial_sync"][0]())
    with pytest.raises(Exception, match="out of bounds: a (tile reaches outside C|subscript leaves)"):
        emulates(*broken(model, kernel, _drop_edges))


def test_an_edge_one_row_too_wide_is_caught():
    model, kernel = compile_plan(*tensor_matmul(72, 64, 64, k_split=32, shared_ab=True))
    with pytest.raises(Exception, match="out of bounds: a tile reaches outside C"):
        emulates(*broken(model, kernel, _widen_edges))


# -- checks ---------------------------------------------------------------------------------------


def test_partial_operand_read_from_global_is_refused():
    plan, args = tensor_matmul(64, 64, 72, k_split=32)  # K partial: A and B both reach past k = 71
    with pytest.raises(PlanError, match=r"reads A\[0, 72\] \(operand A\) outside A\[64, 72\]. Cache A in shared "
                                        r"memory.*plan.cache\(A, index=<one of k, kk>, location=SHARED\)"):
        compile_plan(plan, args)


def test_only_the_operand_that_reaches_past_needs_a_cache():
    plan, (A, B, C) = tensor_matmul(72, 64, 64, k_split=32)  # M partial: only A's tiles reach past
    plan.cache(A, index=plan.schedule.order[3], location=acc.MemorySpace.SHARED)
    model, kernel = compile_plan(plan, (A, B, C))
    assert {c.source for c in statements(kernel, BlockCopy)} == {"A"}
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=4))


def test_operand_leading_dimension_is_checked_only_in_global_memory():
    plan, args = tensor_matmul(64, 100, 64, k_split=32, instruction=acc.Instruction.WMMA)
    with pytest.raises(PlanError, match=r"B \(B\) has a leading dimension of 100 elements \(200 bytes\); tensor-core "
                                        r"loads need a multiple of 16 bytes \(or cache B in shared memory\)"):
        compile_plan(plan, args)
    model, kernel = compile_plan(*tensor_matmul(64, 100, 64, k_split=32, shared_ab=True))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=4))


def test_edge_scratch_counts_in_the_shared_budget():
    """230400 bytes of operand tiles fit at 1024^2; at 1000^2 C's 16 KiB of edge tiles do not."""
    def plan(size):
        return tensor_matmul(size, size, 1024, block=(64, 64), k_split=208, shared_ab=True, pipeline={"stages": 4},
                             instruction=acc.Instruction.WMMA)

    assert compile_plan(*plan(1024))[1].dynamic_shared_bytes == 230400
    with pytest.raises(acc.CacheError, match=r"the caches need 246784 bytes of shared memory per block \(A 110576, "
                                             r"B 119792, C_edge 16384\); NVIDIA H100 allows 232448"):
        compile_plan(*plan(1000))


# -- property: odd sizes against numpy ---------------------------------------------------------------


PIPELINES = [None, REGISTERS, {"stages": 1}, {"stages": 2}, {"stages": 3}]


@st.composite
def partial_plans(draw):
    # at least one 32x32 block and one k step; rows of B hold whole 16-byte vectors
    M, N = draw(st.integers(32, 80)), draw(st.integers(4, 10)) * 8
    K = draw(st.integers(4, 12)) * 8
    return M, N, K, draw(st.sampled_from([16, 32])), draw(st.sampled_from(range(len(PIPELINES)))), draw(st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partial_plans())
def test_partial_tensor_tiles_match_numpy(case):
    M, N, K, k_split, pipeline, cache_c = case
    plan, args = tensor_matmul(M, N, K, k_split=k_split, shared_ab=True, cache_c=0 if cache_c else None,
                               pipeline=PIPELINES[pipeline])
    model, kernel = compile_plan(plan, args)
    reports = emulate_function(model, kernel, blocks=None, seed=M + N + K)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(3, 60), st.integers(3, 60), st.integers(3, 40), st.sampled_from(PIPELINES[:4]))
def test_partial_simt_shared_tiles_match_numpy(M, N, K, pipeline):
    k_split = min(8, K)
    plan, args = simt_matmul(M, N, K, block=(min(8, M), min(16, N)), shared_k=k_split, pipeline=pipeline)
    try:
        model, kernel = compile_plan(plan, args)
    except acc.CacheError as error:  # cp.async needs 4-byte vectors: rows of an odd number of floats are refused
        assert "cp.async moves 4, 8 or 16 bytes" in str(error) or "no serial loop encloses" in str(error)
        return
    reports = emulate_function(model, kernel, blocks=None, seed=M * N + K)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


def test_edge_tiles_of_c_need_unit_steps():
    """C[2 * i, j]: a partial tile of C could not be cut by counting rows."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(72, 64))
    B = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(64, 64))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(144, 64))
    nest = acc.Nest(shape=(72, 64, 64))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[2 * i, j] += A[i, k] * B[k, j]

    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 32), s.split(j, 32), s.split(k, 32)
    iii, jjj, kkk = s.tile({ii: 16, jj: 16, kk: 16})
    s.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.WARP_Y, jj: g.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    for array in (A, B):
        plan.cache(array, index=kk, location=acc.MemorySpace.SHARED)
    with pytest.raises(PlanError, match="C's last tiles are partial, which needs iii to step through one dimension "
                                        "of C by 1"):
        compile_plan(plan, (A, B, C))
