"""The emulator against the float64 reference, and the emulator's own checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc import data
from schedc.codegen.emulate import EmulationError, emulate, sample_blocks
from schedc.ir.kernel import (
    Binary,
    Buffer,
    Const,
    Fragment,
    FragmentFill,
    FragmentLoad,
    FragmentStore,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Store,
    Var,
)
from schedc.ir.numeric import round_tf32
from schedc.ir.types import ScalarType
from schedc.verify import emulate_function

from .conftest import SAMPLES, show_sample
from .plans import H100, VARIANTS, T, compile_plan, matmul_arrays


def assert_passes(reports):
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_emulates(sample):
    functions = show_sample(sample)
    for _, model, kernel, _ in functions:  # one block each for packages of several functions
        assert_passes(emulate_function(model, kernel, blocks=3 if len(functions) == 1 else 1, seed=1))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_emulates_every_block(variant):
    make, blocks = VARIANTS[variant]
    model, kernel = compile_plan(*make())
    assert_passes(emulate_function(model, kernel, blocks=blocks, seed=2))


def test_swapped_tile_roles_compute_the_transpose():
    """tensorize(indices=(n, m, k)) computes C^T = B^T A^T with column-major tiles."""
    nest, args = matmul_arrays(32, 48, 32, T.float16, T.float32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.tile({i: 16, j: 16, k: 16})
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.BLOCK_Y})
    plan.tensorize(indices=(jj, ii, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    model, kernel = compile_plan(plan, args)
    assert "col_major" in repr(kernel.body)
    assert_passes(emulate_function(model, kernel, blocks=None))


@st.composite
def simt_schedules(draw):
    M, N, K = draw(st.integers(1, 24)), draw(st.integers(1, 40)), draw(st.integers(1, 12))
    bi, bj = draw(st.integers(1, M)), draw(st.integers(1, N))
    split_k = draw(st.integers(1, K))
    order_seed = draw(st.integers(0, 1000))
    return M, N, K, bi, bj, split_k, order_seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(simt_schedules())
def test_random_simt_schedules_match_the_reference(params):
    """Random splits (dividing or not), loop orders and bindings: same result as the nest."""
    M, N, K, bi, bj, split_k, order_seed = params
    nest, args = matmul_arrays(M, N, K)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, bi), s.split(j, bj), s.split(k, split_k)
    rng = np.random.default_rng(order_seed)
    serial = [k, kk] if rng.integers(2) else [kk, k]
    if serial[0] is kk:
        serial = [k, kk]  # kk was split from k: it must come after
    outer = [i, j] if rng.integers(2) else [j, i]
    s.reorder(*outer, ii, jj, *serial)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    if rng.integers(2):
        plan.unroll(kk)
    model, kernel = compile_plan(plan, args)
    assert_passes(emulate_function(model, kernel, blocks=None, seed=order_seed))


# -- the emulator catches broken kernels -------------------------------------------------------


def _buffer(name, size, role="input_output", dtype=ScalarType.float32):
    return Buffer(name, dtype, (size,), (1,), "param", role)


def _kernel(body, block=(32, 1, 1), buffers=None):
    buffers = buffers or (_buffer("X", 64),)
    return Kernel("k__gpu__", buffers, (1, 1, 1), block, tuple(body))


def _run(kernel):
    storage = {b.name: np.ones(b.size, dtype=b.dtype.numpy) for b in kernel.params}
    return emulate(kernel, storage)


def test_out_of_bounds_is_reported():
    body = [Store("X", (Binary("+", Var("threadIdx.x"), Const(40)),), Const(1.0, ScalarType.float32))]
    with pytest.raises(EmulationError, match=r"out of bounds: a subscript leaves 0..63 at block \(0, 0, 0\), thread\(s\) \[24, 25, 26, 27\], X\[64\]"):
        _run(_kernel(body))


def test_two_blocks_storing_one_element_race():
    """Blocks run one after another in the emulator, so the last block's value would stay; on the
    GPU either may: a store of another block's element is reported (a whole tile stored past the
    nest's edge onto another head's rows was such a store)."""
    index = Binary("+", Binary("*", Var("blockIdx.x"), Const(16)), Var("threadIdx.x"))
    kernel = dataclasses.replace(_kernel([Store("X", (index,), Const(1.0, ScalarType.float32))]), grid=(2, 1, 1))
    # 32 threads a block, blocks 16 elements apart: blocks 0 and 1 both store X[16..31]
    with pytest.raises(EmulationError, match=r"race: block \(0, 0, 0\) stored this element too: two blocks of the "
                                             r"kernel store it.* at block \(1, 0, 0\), thread\(s\) \[0\], X\[16\]"):
        _run(kernel)


def test_blocks_storing_their_own_elements_do_not_race():
    index = Binary("+", Binary("*", Var("blockIdx.x"), Const(32)), Var("threadIdx.x"))
    kernel = dataclasses.replace(_kernel([Store("X", (index,), Const(1.0, ScalarType.float32))]), grid=(2, 1, 1))
    assert _run(kernel).written["X"].all()


def test_out_of_bounds_inside_a_guard_is_not_reported():
    index = Binary("+", Var("threadIdx.x"), Const(40))
    body = [If(Binary("<", index, Const(64)), (Store("X", (index,), Load("X", (Var("threadIdx.x"),), ScalarType.float32)),))]
    run = _run(_kernel(body))
    assert run.written["X"][40:].all() and not run.written["X"][:40].any()


def test_race_is_reported_with_loop_iteration():
    body = [Loop("k", Const(0), Const(3), 1, (
        Store("X", (Binary("/", Var("threadIdx.x"), Const(2)),), Const(2.0, ScalarType.float32)),))]
    with pytest.raises(EmulationError, match=r"race: threads store the same element in one step at block \(0, 0, 0\), thread\(s\) \[0, 1\], X\[0\], iteration \(k=0\)"):
        _run(_kernel(body))


def _tile(frag="c"):
    return Fragment(frag, "accumulator", 16, 16, 16, ScalarType.float32, "float32")


def test_divergent_warp_before_a_tile_operation():
    body = [_tile(), If(Binary("<", Var("threadIdx.x"), Const(16)), (FragmentFill("c", 0.0),))]
    with pytest.raises(EmulationError, match="divergent warp: a tile operation runs on part of a warp"):
        _run(_kernel(body, buffers=(_buffer("X", 256),)))


def test_fragment_statements_take_whole_warps_but_the_map():
    """The emulator reads which statements run on whole warps from their declared scope: every
    fragment statement but the map (each thread's own elements, run under a branch that a row's
    lanes take apart: the online softmax's correction where a row's maximum moved)."""
    from schedc.ir import kernel as k

    whole = (k.Fragment, k.FragmentFill, k.FragmentLoad, k.FragmentStore, k.FragmentMma, k.FragmentApply,
             k.FragmentAdd, k.FragmentConvert)
    assert all(c.facts.scope is k.SyncScope.WARP for c in whole)
    assert k.FragmentMap.facts.scope is k.SyncScope.THREAD


def test_lanes_disagreeing_on_a_tile_origin():
    body = [_tile(), FragmentLoad("c", "X", (Var("threadIdx.x"),), 16, 1)]
    with pytest.raises(EmulationError, match="non-uniform tile: lanes of a warp disagree"):
        _run(_kernel(body, buffers=(_buffer("X", 512),)))


def test_warps_storing_one_tile():
    body = [Let("w", Binary("/", Var("threadIdx.x"), Const(32))), _tile(), FragmentFill("c", 1.0),
            FragmentStore("X", (Const(0),), "c", 16, 1)]
    with pytest.raises(EmulationError, match="race: warps store the same element"):
        _run(_kernel(body, block=(64, 1, 1), buffers=(_buffer("X", 256),)))


def test_a_broken_lowering_is_caught():
    """Drop the prologue's fill: the emulated result no longer matches the reference."""
    make, _ = VARIANTS["bf16_set_scale"]
    model, kernel = compile_plan(*make())

    def without_fill(body):
        out = []
        for s in body:
            if isinstance(s, If) and any(isinstance(x, FragmentFill) for x in s.body):
                out.extend(s.orelse)
            elif isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=without_fill(s.body)))
            else:
                out.append(s)
        return tuple(out)

    broken = dataclasses.replace(kernel, body=without_fill(kernel.body))
    reports = emulate_function(model, broken, blocks=None)
    assert not all(r.passed for r in reports)


def test_tf32_rounding():
    x = np.array([1.0, 1 + 2**-11, 1 + 2**-10 + 2**-11, -(1 + 2**-11), np.inf], dtype=np.float32)
    expected = np.array([1.0, 1 + 2**-10, 1 + 2**-9, -(1 + 2**-10), np.inf], dtype=np.float32)
    assert np.array_equal(round_tf32(x), expected)


def test_sample_blocks_spread_over_the_grid():
    assert sample_blocks((4, 2, 1), 3) == [(0, 0, 0), (0, 1, 0), (3, 1, 0)]  # blocks 0, 4, 7
    assert len(sample_blocks((4, 2, 1), None)) == 8


def test_storage_layout_round_trip():
    b = Buffer("A", ScalarType.float16, (3, 4), (1, 5), "param", "input")
    values = data.random_array(b, np.random.default_rng(0))
    assert np.array_equal(data.from_storage(b, data.to_storage(b, values)), values)
    assert not (values == 0).any()
