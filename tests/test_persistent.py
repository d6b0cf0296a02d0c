"""Persistent grids (``plan.persistent``) and accumulators of another type than C
(``plan.cache(C, ..., MMA_FRAGMENT, element_type=)``), on every kind of plan.

A persistent plan launches fewer blocks that loop over the tiles in grouped order: each tile
is computed once, whatever the block count and group, and the results match numpy. A float16
or bfloat16 C accumulated in float32 fragments is converted when loaded and rounded when stored.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import emulate
from schedc.errors import CacheError, PlanError
from schedc.ir.kernel import Let, Loop
from schedc.ir.walk import walk_statements
from schedc.lower.launch import Launch, Persistent, persistent_loop
from schedc.package.compile import nvrtc_compile

from .plans import compile_plan, simt_matmul, tensor_matmul

T = acc.ScalarType
MMA_SYNC, WMMA = acc.Instruction.MMA_SYNC, acc.Instruction.WMMA


def product(plan, args, seed=0):
    """Emulate the plan on random inputs: (C computed, C + A @ B in float64)."""
    _, k = compile_plan(plan, args)
    rng = np.random.default_rng(seed)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in k.params}
    (M, K), N = args[0].shape, args[1].shape[1]
    a, b, c = (storage[n].astype(np.float64) for n in "ABC")
    expected = c.reshape(M, N) + a.reshape(M, K) @ b.reshape(K, N)
    result = emulate(k, dict(storage))
    assert result.written["C"].all()
    return result.storage["C"].astype(np.float64).reshape(M, N), expected, k


PLANS = {
    "simt_partial_tiles": lambda: simt_matmul(100, 70, 33),
    "simt_shared_pipeline": lambda: simt_matmul(64, 96, 64, shared_k=16, pipeline={"stages": 3}),
    "wmma_pipeline": lambda: tensor_matmul(96, 64, 64, shared_ab=True, k_split=32, pipeline={"stages": 2}),
    "mma_sync_partial_tiles": lambda: tensor_matmul(50, 70, 48, cache_c=0, instruction=MMA_SYNC, shared_ab=True),
}


@pytest.mark.parametrize("name", list(PLANS))
@pytest.mark.parametrize("persistent", [{"blocks": 2, "group": 2}, {"blocks": 5, "group": 1}, {"group": 3}])
def test_persistent_plans_match_numpy(name, persistent):
    plan, args = PLANS[name]()
    plan.persistent(**persistent)
    got, expected, k = product(plan, args)
    assert k.grid[1:] == (1, 1) and k.grid[0] <= persistent.get("blocks", k.grid[0])
    assert np.abs(got - expected).max() < 1e-3
    loops = [s for s in walk_statements(k.body) if isinstance(s, Loop) and s.var == "work"]
    assert len(loops) == 1 and loops[0].step == k.grid[0]


def test_default_blocks_fill_the_multiprocessors():
    plan, args = simt_matmul(4096, 4096, 64, block=(32, 32))
    plan.persistent()
    _, k = compile_plan(plan, args)
    assert k.grid == (acc.Target(acc.Target.Model.NVIDIA_H100).spec.sm_count, 1, 1)
    plan, args = simt_matmul(64, 64, 64, block=(32, 32))  # 4 tiles: never more blocks than tiles
    plan.persistent()
    assert compile_plan(plan, args)[1].grid == (4, 1, 1)


def _order(tiles, blocks, group):
    """The tiles each block visits, from the lowered loop (evaluated in Python)."""
    launch = Launch((blocks, 1, 1), (1, 1, 1), (), Persistent(tiles, blocks, group))
    (loop,) = persistent_loop(launch, ())
    lets = [s for s in loop.body if isinstance(s, Let)]
    seen = []
    for block in range(blocks):
        for work in range(block, loop.stop.value, loop.step):
            env = {"work": work, "blockIdx.x": block}
            for let in lets:
                env[let.name] = _evaluate(let.value, env)
            seen.append((env["tile_x"], env["tile_y"], env.get("tile_z", 0), work))
    return seen


def _evaluate(e, env):
    if hasattr(e, "value"):
        return e.value
    if hasattr(e, "name"):
        return env[e.name]
    operations = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__, "%": int.__mod__,
                  "min": min}
    return operations[e.op](_evaluate(e.lhs, env), _evaluate(e.rhs, env))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 3), st.integers(1, 40), st.integers(1, 10))
def test_every_tile_once_in_grouped_order(gx, gy, gz, blocks, group):
    blocks = min(blocks, gx * gy * gz)
    seen = _order((gx, gy, gz), blocks, group)
    tiles = sorted(t[:3] for t in seen)
    assert tiles == sorted((x, y, z) for x in range(gx) for y in range(gy) for z in range(gz))
    by_work = {t[3]: t[:3] for t in seen}
    for w in range(gx * gy * gz - 1):  # within a band of `group` rows, a column at a time
        (x0, y0, z0), (x1, y1, z1) = by_work[w], by_work[w + 1]
        if z0 == z1 and y0 // group == y1 // group:
            assert (x1, y1) in ((x0, y0 + 1), (x0 + 1, (y0 // group) * group))


@pytest.mark.parametrize("call, message", [
    ({"group": 0}, "group must be a positive integer, not 0"),
    ({"blocks": -1}, "blocks must be a positive integer, not -1"),
    ({"group": True}, "group must be a positive integer, not True"),
    ({"blocks": 2.5}, "blocks must be a positive integer, not 2.5"),
])
def test_persistent_arguments(call, message):
    plan, _ = simt_matmul(64, 64, 64)
    with pytest.raises(PlanError, match=message):
        plan.persistent(**call)


# -- accumulators of another type --------------------------------------------------------------


@pytest.mark.parametrize("instruction", [WMMA, MMA_SYNC])
@pytest.mark.parametrize("c_type", [T.float16, T.bfloat16])
@pytest.mark.parametrize("size", [(64, 64, 64), (50, 70, 48)])
def test_16_bit_c_in_float32_fragments(instruction, c_type, size):
    plan, args = tensor_matmul(*size, operand=c_type, result=c_type, cache_c=0, fragment_type=T.float32,
                               instruction=instruction, shared_ab=True)
    got, expected, k = product(plan, args)
    half_ulp = 2.0 ** -{T.float16: 11, T.bfloat16: 8}[c_type]
    assert np.abs(got - expected).max() <= np.abs(expected).max() * half_ulp + 1e-3
    source = emit_source([k], "// 16-bit C")
    if instruction is WMMA:  # wmma converts no tile in place: every tile goes through the scratch
        assert "load_edge<16, 16, true>" in source and "store_edge<16, 16, true>" in source
    else:
        assert "schedc::load_converted<2>" in source or "schedc::convert<float>" in source
    ptx = nvrtc_compile(source, "c16", "sm_90").ptx
    assert "cvt.rn." + ("f16" if c_type is T.float16 else "bf16") + ".f32" in ptx


def test_float16_accumulators_need_no_conversion():
    plan, args = tensor_matmul(64, 64, 64, result=T.float16, cache_c=0, fragment_type=T.float16,
                               instruction=MMA_SYNC, shared_ab=True)
    source = emit_source([compile_plan(plan, args)[1]], "//")
    assert "convert" not in source.split("__global__")[1]


@pytest.mark.parametrize("location, element_type, message", [
    (acc.MemorySpace.SHARED, T.float32, "only MMA_FRAGMENT caches convert"),
    (acc.MemorySpace.MMA_FRAGMENT, T.int32, "fragments convert between floating-point types only"),
    (acc.MemorySpace.MMA_FRAGMENT, "float32", "element_type must be a ScalarType"),
])
def test_element_type_refusals(location, element_type, message):
    plan, args = tensor_matmul(64, 64, 64, result=T.float16)
    index = plan.schedule.nest.get_indices()[2]
    with pytest.raises(CacheError, match=message):
        plan.cache(args[2], index=index, location=location, element_type=element_type)


def test_fragments_the_tensor_cores_cannot_accumulate_in_are_refused():
    plan, args = tensor_matmul(64, 64, 64, result=T.float32, cache_c=0, fragment_type=T.bfloat16,
                               instruction=MMA_SYNC, shared_ab=True)
    with pytest.raises(PlanError, match="bfloat16"):
        compile_plan(plan, args)


def test_check_shows_the_persistent_launch():
    from schedc.show import launch

    plan, args = simt_matmul(256, 256, 64, block=(32, 32))
    plan.persistent(group=4, blocks=10)
    model, k = compile_plan(plan, args)
    assert launch(model, k).startswith("grid (10, 1, 1) x block (32, 32, 1): 10 blocks (persistent: they take the "
                                       "64 tiles of a (8, 8, 1) grid in turn, in groups of 4 rows) of 1024 threads")


@pytest.mark.parametrize("planes", [1, 3])
def test_block_z_planes(planes):
    """BLOCK_Z bound (one plane or several: tiles then go plane by plane), found by the random
    tester: a single plane has no tile_z."""
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(planes, 6, 8))
    nest = acc.Nest(shape=(planes, 6, 8))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        A[i, j, k] = A[i, j, k] * 2.0

    schedule = nest.create_schedule()
    jj, kk = schedule.split(j, 2), schedule.split(k, 4)
    schedule.reorder(i, j, k, jj, kk)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = schedule.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Z, j: g.BLOCK_Y, k: g.BLOCK_X, jj: g.THREAD_Y, kk: g.THREAD_X})
    plan.persistent(group=2, blocks=4)
    _, kernel = compile_plan(plan, (A,))
    storage = {"A": np.arange(A.shape[0] * 48, dtype=np.float32)}
    result = emulate(kernel, dict(storage))
    assert np.array_equal(result.storage["A"], storage["A"] * 2)
    assert ("tile_z" in emit_source([kernel], "//")) == (planes > 1)
