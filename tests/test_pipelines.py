"""Cache pipelines: register double buffers and cp.async rings, their shape in the kernel IR,
the emulator catching each way to break them, and the checks on ``plan.cache``'s arguments."""

from __future__ import annotations

import dataclasses

import pytest

import schedc as acc
from schedc.codegen.emulate import EmulationError
from schedc.errors import CacheError
from schedc.ir.kernel import AsyncCommit, AsyncWait, Barrier, BlockCopy, If, Let, Loop, StageLoad, StageStore
from schedc.verify import emulate_function

from .plans import REGISTERS, VARIANTS, T, compile_plan, simt_matmul, tensor_matmul

SHARED = acc.MemorySpace.SHARED


def kernel_of(variant):
    model, kernel = compile_plan(*VARIANTS[variant][0]())
    return model, kernel


def carrier(kernel) -> Loop:
    """The pipelined k loop (the serial loop that holds the copies or waits)."""
    return next(s for s in kernel.body if isinstance(s, Loop))


def rewrite(body, change):
    """``body`` with each statement replaced by ``change(statement)`` (a tuple), recursively."""
    out = []
    for s in body:
        if isinstance(s, Loop | If):
            s = dataclasses.replace(s, body=rewrite(s.body, change))
        out.extend(change(s))
    return tuple(out)


def broken(model, kernel, change):
    return model, dataclasses.replace(kernel, body=rewrite(kernel.body, change))


def emulates(model, kernel):
    reports = emulate_function(model, kernel, blocks=None, seed=3)
    return all(r.passed for r in reports)


# -- the structure -------------------------------------------------------------------------------


def test_a_ring_of_three_stages():
    model, kernel = kernel_of("fp16_async_3_stages")
    assert [b.shape for b in kernel.shared] == [(3, 32, 32), (3, 32, 32)]
    top = kernel.body
    commits = [s for s in top if isinstance(s, AsyncCommit)]
    assert len(commits) == 2, "the prologue requests two stages"
    loop = carrier(kernel)
    assert loop.var == "k"
    head = loop.body[:5]
    assert isinstance(head[0], Let) and head[0].name == "k_stage"
    assert head[1] == AsyncWait(1) and isinstance(head[2], Barrier)
    assert isinstance(head[3], If) and all(c.asynchronous for c in head[3].body)
    assert isinstance(head[4], AsyncCommit)
    assert AsyncWait(0) in top, "no copy outlives the loop"


def test_register_double_buffer_has_one_shared_buffer_and_two_barriers_per_step():
    model, kernel = kernel_of("fp16_registers_double_buffer")
    assert [b.shape for b in kernel.shared] == [(32, 64), (64, 32)]
    loop = carrier(kernel)
    kinds = [type(s).__name__ for s in loop.body]
    assert kinds[0] == "If" and all(isinstance(s, StageLoad) for s in loop.body[0].body)
    assert kinds[-3:] == ["Barrier", "If", "Barrier"]
    assert all(isinstance(s, StageStore) for s in loop.body[-2].body)


def test_tensor_operand_tiles_are_padded_or_swizzled_against_bank_conflicts():
    plan = tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, cache_c=0, pipeline=REGISTERS,
                         instruction=acc.Instruction.WMMA)
    a, b = compile_plan(*plan)[1].shared
    assert a.strides == (72, 1) and b.strides == (40, 1)  # 144 and 80 bytes: odd 16-byte units
    a, b = kernel_of("fp16_registers_double_buffer")[1].shared  # ldmatrix: dense rows, chunks XORed
    assert (a.strides, a.swizzle, b.strides, b.swizzle) == ((64, 1), 128, (32, 1), 64)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if "async" in v or "registers" in v])
def test_pipelines_emulate_against_the_reference(variant):
    assert emulates(*kernel_of(variant))


# -- the emulator catches broken pipelines -------------------------------------------------------


def test_wait_that_lets_this_iterations_tile_pending():
    model, kernel = kernel_of("fp16_async_3_stages")
    mutant = broken(model, kernel, lambda s: (AsyncWait(2),) if s == AsyncWait(1) else (s,))
    with pytest.raises(EmulationError, match=r"async: thread \d+ (reads|copies asynchronously into) an "
                                             r"element whose asynchronous copy \(group \d+\) has not been "
                                             r"waited for at .*[AB]_shared\[\d+\], iteration \(k=\d+"):
        emulates(*mutant)


def test_missing_barrier_before_refilling_the_ring():
    model, kernel = kernel_of("fp16_async_3_stages")
    loop = carrier(kernel)
    head_barrier = loop.body[2]
    mutant = broken(model, kernel, lambda s: () if s is head_barrier else (s,))
    with pytest.raises(EmulationError, match=r"(race|async): .* [AB]_shared\[\d+\], iteration \(k="):
        emulates(*mutant)


def test_ring_refilling_the_buffer_in_use():
    """Slot arithmetic off by one: the copy ahead lands in the buffer this iteration reads."""
    model, kernel = kernel_of("fp16_async_3_stages")

    def change(s):  # (k_stage + 2) % 3 -> k_stage
        if isinstance(s, If) and s.body and isinstance(s.body[0], BlockCopy):
            body = tuple(dataclasses.replace(c, target_origin=(c.target_origin[0].lhs.lhs, *c.target_origin[1:]))
                         for c in s.body)
            return (dataclasses.replace(s, body=body),)
        return (s,)

    with pytest.raises(EmulationError, match=r"async: .* has not been waited for at .*_shared"):
        emulates(*broken(model, kernel, change))


def test_register_double_buffer_without_the_barrier_after_compute():
    model, kernel = kernel_of("fp16_registers_double_buffer")
    loop = carrier(kernel)
    first_tail_barrier = loop.body[-3]
    mutant = broken(model, kernel, lambda s: () if s is first_tail_barrier else (s,))
    with pytest.raises(EmulationError, match=r"race: thread \d+ writes an element (thread \d+|several threads) "
                                             r"read without a barrier between at .*[AB]_shared\[\d+\], "
                                             r"iteration \(k=0\)"):
        emulates(*mutant)


def test_register_double_buffer_without_the_barrier_after_the_store():
    model, kernel = kernel_of("simt_registers_double_buffer")
    loop = carrier(kernel)
    last = loop.body[-1]
    assert isinstance(last, Barrier)
    mutant = broken(model, kernel, lambda s: () if s is last else (s,))
    with pytest.raises(EmulationError, match=r"race: thread \d+ reads what thread \d+ wrote without a barrier"):
        emulates(*mutant)


# -- argument checks -----------------------------------------------------------------------------


def _cache(**kwargs):
    plan, (A, B, C) = tensor_matmul(64, 64, 256, k_split=64)
    kk = next(i for i in plan.schedule.pieces if i.name == "kk")
    plan.cache(A, index=kk, location=kwargs.pop("location", SHARED), **kwargs)
    return plan, (A, B, C)


@pytest.mark.parametrize("kwargs, message", [
    ({"stages": 0}, r"stages must be an integer from 1 to 8, not 0"),
    ({"stages": 9}, r"stages must be an integer from 1 to 8, not 9"),
    ({"stages": True}, r"stages must be an integer from 1 to 8, not True"),
    ({"double_buffer": 1}, r"double_buffer must be True or False, not 1"),
    ({"double_buffer": True, "double_buffer_location": acc.MemorySpace.GLOBAL},
     r"double_buffer_location must be PRIVATE, SHARED or AUTO \(None\), not GLOBAL"),
    ({"double_buffer_location": SHARED}, r"double_buffer_location needs double_buffer=True"),
    ({"double_buffer": True, "stages": 3}, r"double_buffer=True means 2 stages, not 3; give stages alone"),
    ({"stages": 3, "double_buffer_location": acc.MemorySpace.PRIVATE, "double_buffer": True},
     r"stages are shared buffers filled with cp.async; a PRIVATE double buffer has one shared buffer"),
    ({"location": acc.MemorySpace.MMA_FRAGMENT, "stages": 2}, r"double buffers and stages apply to SHARED caches"),
])
def test_pipeline_argument_checks(kwargs, message):
    with pytest.raises(CacheError, match=r"cache\(.*, index=kk, location=\w+\): " + message):
        _cache(**kwargs)


def test_no_cp_async_before_sm80(v100):
    plan, (A, B, C) = tensor_matmul(64, 64, 256, k_split=64, target=v100)
    kk = next(i for i in plan.schedule.pieces if i.name == "kk")
    with pytest.raises(CacheError, match=r"NVIDIA V100 \(sm_70\) has no cp.async \(sm_80\+\); use "
                                         r"double_buffer_location=PRIVATE"):
        plan.cache(A, index=kk, location=SHARED, stages=2)
    plan.cache(A, index=kk, location=SHARED, double_buffer=True)  # AUTO: registers on sm_70
    assert plan.caches[-1].pipeline == "registers"


def test_auto_double_buffer_is_async_on_sm80_and_newer():
    plan, _ = _cache(double_buffer=True)
    assert (plan.caches[-1].pipeline, plan.caches[-1].stages) == ("async", 2)


def test_pipeline_needs_an_enclosing_serial_loop():
    plan, (A, B, C) = tensor_matmul(64, 64, 64)
    k = next(i for i in plan.schedule.pieces if i.name == "k")
    plan.cache(A, index=k, location=SHARED, stages=2)
    with pytest.raises(CacheError, match=r"cache\(A, index=k, location=SHARED\): no serial loop encloses k, "
                                         r"so there is no next tile to copy while computing"):
        compile_plan(plan, (A, B, C))


def test_caches_at_one_index_share_one_pipeline():
    plan, (A, B, C) = tensor_matmul(64, 64, 256, k_split=64)
    kk = next(i for i in plan.schedule.pieces if i.name == "kk")
    plan.cache(A, index=kk, location=SHARED, stages=3)
    plan.cache(B, index=kk, location=SHARED, double_buffer=True, double_buffer_location=acc.MemorySpace.PRIVATE)
    with pytest.raises(CacheError, match=r"A and B are cached at kk with different pipelines \(cp.async with 3 "
                                         r"stage\(s\) and register double buffer\)"):
        compile_plan(plan, (A, B, C))


def test_cp_async_needs_4_byte_vectors():
    """float16 rows of 2 elements are 4 bytes, of 1 element 2 bytes: too small for cp.async."""
    plan, args = simt_matmul(32, 32, 32, block=(16, 16), dtype=T.float16, shared_k=1, pipeline={"stages": 2})
    with pytest.raises(CacheError, match=r"cp.async moves 4, 8 or 16 bytes, but A's tile allows only 2-byte "
                                         r"vectors \(1 element\(s\) of 2 bytes along its contiguous dimension 1\)"):
        compile_plan(plan, args)


def test_cp_async_refusal_names_a_row_pitch_no_vector_reaches():
    """K = 37 float16: A's rows are 74 bytes apart, so no tile row of A starts 4-byte aligned,
    however wide the tile: the refusal names the pitch and the padding that fixes it."""
    plan, args = simt_matmul(32, 32, 37, block=(16, 16), dtype=T.float16, shared_k=8, pipeline={"stages": 2})
    with pytest.raises(CacheError, match=r"allows only 2-byte vectors \(A's rows are 74 bytes apart, so its tiles' "
                                         r"rows start at addresses no 4-byte vector reaches: pad the array's rows to a "
                                         r"multiple of 8 elements\)"):
        compile_plan(plan, args)


def test_private_double_buffer_is_registers_on_every_target():
    plan, _ = _cache(double_buffer=True, double_buffer_location=acc.MemorySpace.PRIVATE)
    assert (plan.caches[-1].pipeline, plan.caches[-1].stages) == ("registers", 1)


def _copies(kernel):
    from schedc.ir.walk import walk_statements

    return [s for s in walk_statements(kernel.body) if isinstance(s, BlockCopy)]


def test_sequential_caches_copy_with_cp_async_where_they_can(v100):
    """Accera's sequential cache (barrier, copy, barrier) keeps its meaning; on sm_80+ the copy
    is cp.async with a wait for all of it, so every vector is in flight at once."""
    model, kernel = kernel_of("fp16_shared_ab")
    assert all(c.asynchronous for c in _copies(kernel)) and _copies(kernel)
    waits = [s for s in _walk(kernel) if isinstance(s, AsyncWait | AsyncCommit)]
    assert waits == [AsyncCommit(), AsyncWait(0)]
    assert emulates(model, kernel)
    # the V100 has no cp.async: the copies stay synchronous
    _, kernel = compile_plan(*tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, target=v100))
    assert _copies(kernel) and not any(c.asynchronous for c in _copies(kernel))
    # 2-byte vectors (a tile one fp16 wide): cp.async moves 4 bytes at least; the caches at that
    # index stay synchronous together
    model, kernel = compile_plan(*simt_matmul(32, 32, 32, block=(16, 16), dtype=T.float16, shared_k=1))
    assert _copies(kernel) and not any(c.asynchronous for c in _copies(kernel))
    assert emulates(model, kernel)


def _walk(kernel):
    from schedc.ir.walk import walk_statements

    return list(walk_statements(kernel.body))


def _c_loads_inside(kernel, loop: str) -> int:
    """C tile loads in the body of ``loop`` (C kept in fragments across it: none)."""
    from schedc.ir.kernel import FragmentLoad
    from schedc.ir.walk import walk_statements

    loops = [s for s in _walk(kernel) if isinstance(s, Loop) and s.var == loop]
    return sum(isinstance(s, FragmentLoad) and s.buffer == "C" for lp in loops for s in walk_statements(lp.body))


def test_accumulators_stay_in_registers_across_a_loop_that_touches_only_shared_memory():
    """Without an MMA_FRAGMENT cache, C's tile is loaded before and stored after the serial loop
    right around the tile when its operands come from shared memory (nothing else touches C)."""
    from schedc.lower.tensor import register_promotion

    model, kernel = compile_plan(*tensor_matmul(64, 64, 256, k_split=64, shared_ab=True))  # A, B cached at kk
    assert _c_loads_inside(kernel, "kk") == 0 and _c_loads_inside(kernel, "k") == 1
    assert emulates(model, kernel)
    _, kernel = compile_plan(*tensor_matmul(64, 64, 256, k_split=64))  # operands from global memory
    assert _c_loads_inside(kernel, "kk") == 1
    model, kernel = compile_plan(*tensor_matmul(64, 64, 256, k_split=64, shared_ab=True, cache_c=0))
    assert _c_loads_inside(kernel, "k") == 0  # the explicit cache at k wins
    assert register_promotion.__doc__
