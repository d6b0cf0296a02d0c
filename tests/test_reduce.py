"""Reductions across threads: ``T[p] = T[p] op X`` (+, acc.max, acc.min) with its summed loop
bound to THREAD_X, combined by warp shuffles and a shared element a warp, against the float64
reference in the emulator (every op, types, lanes below, at and above a warp, partial tiles,
rows a block), through the text check and NVRTC, on the GPU; and every refusal with its reason."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.errors import PlanError
from schedc.ir.kernel import ThreadReduce
from schedc.ir.walk import walk_statements
from schedc.lower.wellformed import problems
from schedc.package.compile import nvrtc_compile
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .kit import rewrite
from .plans import H100, T, build, compile_function_plan, compile_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
import gemv  # noqa: E402
import layernorm  # noqa: E402
import softmax  # noqa: E402


def rows(M=8, N=1000, lanes=256, op="+", dtype=T.float32, per_block=1, target_dtype=None):
    """S[i] op= X[i, j]: a block of ``per_block`` rows (THREAD_Y), ``lanes`` threads a row (THREAD_X)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=target_dtype or dtype, shape=(M,))
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        if op == "+":
            S[i] += X[i, j]
        else:
            S[i] = (acc.max if op == "max" else acc.min)(S[i], X[i, j])

    s = nest.create_schedule()
    jj, ii = s.split(j, lanes), s.split(i, per_block)
    s.reorder(i, ii, j, jj)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.THREAD_Y, jj: H100.GridUnit.THREAD_X})
    return plan, (X, S)


def _passed(reports) -> None:
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


CASES = {
    "sum, 256 lanes": {},
    "max, 256 lanes": {"op": "max"},
    "min, 16 lanes, 4 rows a block": {"op": "min", "lanes": 16, "per_block": 4},
    "sum, 32 lanes, rows past M": {"lanes": 32, "M": 5, "per_block": 2},
    "fp16 sum in float32, 128 lanes": {"dtype": T.float16, "lanes": 128},
    "int8 max, 64 lanes": {"dtype": T.int8, "op": "max", "lanes": 64},
    "bf16 min, 1024 lanes": {"dtype": T.bfloat16, "op": "min", "lanes": 1024, "N": 3000},
    "int32 sum, 8 lanes, a partial last tile": {"dtype": T.int32, "lanes": 8, "N": 21},
    "e4m3 max, 64 lanes": {"dtype": T.float8_e4m3, "op": "max", "lanes": 64},
    "e5m2 into a float32 sum, 32 lanes": {"dtype": T.float8_e5m2, "target_dtype": T.float32, "lanes": 32},
}


@pytest.mark.parametrize("name", CASES)
def test_reduction_across_threads_matches_the_reference(name):
    plan, args = rows(**CASES[name])
    model, fn = compile_function_plan(plan, args)
    combines = [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, ThreadReduce)]
    assert len(combines) == 1 and combines[0].lanes == CASES[name].get("lanes", 256)
    _passed(emulate_function(model, fn, None, seed=2))
    nvrtc_compile(emit_source([fn], "// reduce"), "reduce", "sm_80")


def test_partials_of_16_bit_floats_are_float32():
    plan, args = rows(dtype=T.float16, lanes=64)
    _, fn = compile_function_plan(plan, args)
    (combine,) = [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, ThreadReduce)]
    assert combine.dtype is T.float32 and combine.scratch == "_partials_float32"


def test_the_combine_reaches_every_thread():
    """A guard around the combine (threads of a partial row skipping it) is malformed IR: the
    shuffles need every lane."""
    plan, args = rows(lanes=64)
    _, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[-1]
    from schedc.ir.kernel import Binary, Const, If, Var

    body = rewrite(kernel.body, lambda s: If(Binary("<", Var("jj"), Const(3)), (s,)) if isinstance(s, ThreadReduce)
                   else s)
    broken = dataclasses.replace(kernel, body=body)
    assert any("ThreadReduce" in p and "not reached by every thread" in p for p in problems(broken))


@pytest.mark.parametrize("change, message", [
    ({"lanes": 48}, r"THREAD_X has 48 threads; the combine halves them: make it a power of two \(split the reduced "
                    r"loop by a power of two, at most 32,"),
])
def test_refused_reductions(change, message):
    plan, args = rows(**change)
    with pytest.raises(PlanError, match=message):
        compile_function_plan(plan, args)


def moments(M=8, N=1000, lanes=256, dtype=T.float32, reads_sum=False):
    """A row's sum, sum of squares and maximum, three reductions in one nest over the same loop
    on THREAD_X (``reads_sum``: the second statement reads the sum, which is refused)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    S, Q, P = (acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(M,)) for _ in range(3))
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        x = acc.cast(X[i, j], T.float32)
        S[i] += x
        Q[i] += x * (S[i] if reads_sum else x)
        P[i] = acc.max(P[i], x)

    s = nest.create_schedule()
    jj = s.split(j, lanes)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, jj: H100.GridUnit.THREAD_X})
    return plan, (X, S, Q, P)


@pytest.mark.parametrize("lanes, dtype", [(256, T.float32), (32, T.float16), (1024, T.bfloat16)])
def test_several_reductions_in_one_nest_match_the_reference(lanes, dtype):
    plan, args = moments(N=3000 if lanes == 1024 else 1000, lanes=lanes, dtype=dtype)
    model, fn = compile_function_plan(plan, args)
    combines = [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, ThreadReduce)]
    assert [(c.op, c.array) for c in combines] == [("+", "_partial"), ("+", "_partial_s1"), ("max", "_partial_s2")]
    _passed(emulate_function(model, fn, None, seed=4))
    nvrtc_compile(emit_source([fn], "// moments"), "moments", "sm_90")


def test_a_reduction_reading_another_reductions_target_is_refused():
    plan, args = moments(reads_sum=True)
    with pytest.raises(PlanError, match=r"Q's \+ reads S, which this nest reduces across threads: each thread would "
                                        "read a partial value"):
        compile_function_plan(plan, args)


def _row_sum(N=64, overwrite=False):
    """S[i] += X[i, j] over 8 rows (``overwrite``: S[i] = X[i, j], no reduction): the nest's
    schedule, its indices and arrays."""
    X = acc.Array(role=acc.Role.INPUT, shape=(8, N))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8,))
    nest = acc.Nest(8, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        if overwrite:
            S[i] = X[i, j]
        else:
            S[i] += X[i, j]

    return nest.create_schedule(), (i, j), (X, S)


def test_reduced_loop_on_thread_y_is_refused():
    s, (i, j), args = _row_sum()
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.THREAD_X, j: H100.GridUnit.THREAD_Y})
    with pytest.raises(PlanError, match="combines the threads of a row: bind the reduced loop\\(s\\), and only them, "
                                        "to THREAD_X"):
        compile_function_plan(plan, args)


def test_a_target_changing_with_a_serial_loop_is_refused():
    s, (i, j), args = _row_sum()
    s.reorder(j, i)
    plan = s.create_plan(H100)
    plan.bind({j: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="S's element changes with the serial loop i, and each thread keeps one "
                                        "partial"):
        compile_function_plan(plan, args)


def test_a_write_that_is_no_reduction_is_still_a_race():
    s, (i, j), args = _row_sum(overwrite=True)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="a race"):
        compile_function_plan(plan, args)


def test_split_k_and_threads_together_are_refused():
    s, (i, j), args = _row_sum(N=1024)
    jj = s.split(j, 64)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.BLOCK_Y, jj: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="splits the sum over j between blocks and jj between threads"):
        compile_function_plan(plan, args)


def test_gemv_sample_emulates():
    plan, args = gemv.gemv(64, 4096)
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, 3, seed=5))
    nvrtc_compile(emit_source([fn], "// gemv"), "gemv", "sm_90")


# -- rows: fused parts reducing across threads ---------------------------------------------

ROWS = {
    "softmax fp16, 256 threads, its statistics in workspaces": lambda: softmax.softmax(6, 3000, T.float16, 256,
                                                                                        scratch=False),
    "softmax fp32, 1024 threads": lambda: softmax.softmax(3, 5000, T.float32, 1024),
    "softmax fp32, 32 threads, X uncached, workspaces": lambda: softmax.softmax(4, 700, T.float32, 32, cache=False,
                                                                                 scratch=False),
    "softmax fp16 fast (fast_exp), workspaces": lambda: softmax.softmax(5, 2000, T.float16, 128, fast=True,
                                                                         scratch=False),
    "softmax fp16, the exponentials kept in a scratch row, workspaces": lambda: softmax.softmax(
        6, 3000, T.float16, 256, keep=True, scratch=False),
    "layernorm fp16, workspaces": lambda: layernorm.layernorm(5, 3000, T.float16, 256, scratch=False),
    "layernorm fp16 in one pass (two reductions in one part), workspaces": lambda: layernorm.layernorm(
        5, 3000, T.float16, 128, one_pass=True, scratch=False),
    "softmax fp16 fast, the row's maximum and sum in scratch tiles": lambda: softmax.softmax(
        5, 2000, T.float16, 128, fast=True),
    "softmax fp32, every TEMP array in a scratch tile, X uncached": lambda: softmax.softmax(
        4, 700, T.float32, 32, cache=False, keep=True),
    "layernorm fp16 in one pass, its sums in scratch tiles": lambda: layernorm.layernorm(
        5, 3000, T.float16, 128, one_pass=True),
    "layernorm fp16 in two passes, its sums in scratch tiles": lambda: layernorm.layernorm(5, 3000, T.float16, 256),
}


@pytest.mark.parametrize("name", ROWS)
def test_fused_row_kernels_match_the_reference(name):
    plan, args = ROWS[name]()
    model, fn = compile_function_plan(plan, args)
    body = list(walk_statements(fn.kernels[-1].body))
    assert sum(isinstance(s, ThreadReduce) for s in body) == 2  # two parts reduce across threads (or one part twice)
    _passed(emulate_function(model, fn, None, seed=8))
    nvrtc_compile(emit_source([fn], "// rows"), "rows", "sm_90")


def test_a_temp_row_the_parts_share_in_shared_memory_is_scratch_without_global_memory():
    """softmax(keep=True): E's row, cached in SHARED at the row's loop, is written by one part and
    read by two later ones: neither filled nor written back, and no workspace (the kernel does not
    take E); X's row is still filled. The exponentials are computed once (one exp a row element)."""
    from schedc.ir.kernel import BlockCopy, Call, Load, Store
    from schedc.ir.walk import subexpressions
    from schedc.lower.scratch import scratch

    plan, args = softmax.softmax(4, 1000, T.float32, 128, keep=True)
    model, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[-1]
    assert scratch(model, "E") and not scratch(model, "X")
    assert "E" not in [b.name for b in kernel.buffers] and "E" not in [p.name for p in fn.params]
    assert "E_shared" in [b.name for b in kernel.shared]
    body = list(walk_statements(kernel.body))
    copies = [s for s in body if isinstance(s, BlockCopy)]
    assert [c.source for c in copies] == ["X"]  # X filled; E neither filled nor written back
    assert not any(isinstance(s, Store) and s.buffer == "E" for s in body)
    calls = [e for s in body if isinstance(s, Store) for e in subexpressions(s.value) if isinstance(e, Call)]
    assert len(calls) == 1  # exp once, into the scratch row
    assert not any(isinstance(e, Load) and e.buffer == "E" for s in body if isinstance(s, Store)
                   for e in subexpressions(s.value))


def test_row_statistics_in_scratch_tiles_leave_the_function_without_workspaces(tmp_path):
    """softmax(scratch=True): the row's maximum and sum (TEMP arrays set by the first part, reduced
    across threads by later ones, read by the last) live in shared memory: the reductions' totals
    go there, the loaded function allocates nothing and takes the C launch (one kernel of the
    caller's arrays); without the caches it has two workspaces."""
    from schedc.ir.kernel import Store
    from schedc.package.fastcall import launchable_in_c

    plan, args = softmax.softmax(4, 1000, T.float32, 128, scratch=True)
    model, fn = compile_function_plan(plan, args)
    assert {"mx_shared", "sm_shared"} <= {b.name for b in fn.kernels[-1].shared}
    assert not [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, Store) and s.buffer in ("mx", "sm")]
    loaded = acc.load(build(plan, args, "rows", tmp_path)).rows
    assert loaded.function.workspaces == () and launchable_in_c(loaded.function)
    plain = acc.load(build(*softmax.softmax(4, 1000, T.float32, 128, scratch=False), "plain", tmp_path)).plain
    assert [b.name for b in plain.function.workspaces] == ["mx", "sm"] and not launchable_in_c(plain.function)


def _set_then_read(where: str):
    """T[i] (TEMP) set by part 0, read by part 1's loop over the row; T cached at ``where``."""
    X = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(4, 64))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(4, 64))
    Tm = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(4,))
    first, second = acc.Nest(shape=(4,)), acc.Nest(shape=(4, 64))
    (i0,) = first.get_indices()
    i1, j1 = second.get_indices()

    @first.iteration_logic
    def _():
        Tm[i0] = X[i0, 0] * 2.0

    @second.iteration_logic
    def _():
        Y[i1, j1] = X[i1, j1] + Tm[i1]

    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
    f, i, b = s.get_indices()
    ii, bb = s.split(i, 1), s.split(b, 32)
    s.reorder(i, ii, f, b, bb)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, bb: H100.GridUnit.THREAD_X})
    plan.cache(Tm, index={"i": i, "ii": ii, "b": b}[where], location=acc.MemorySpace.SHARED)
    return plan, (X, Y)


@pytest.mark.parametrize("where, scratch_tile", [("ii", True), ("i", True), ("b", False)])
def test_a_tile_filled_inside_one_part_is_no_scratch(where, scratch_tile):
    """A cache whose fill point is one part's loop (b, part 1's) serves that part alone: the part
    before writes T itself, so the tile is filled and written back as any output tile, and T keeps
    its workspace. Filled before the fusing index (at ii, or at the block-bound i: the first loop
    its threads run is ii), it is scratch. Each emulates to the reference (a scratch tile filled
    in one part once read values nothing wrote: NaN)."""
    plan, args = _set_then_read(where)
    model, fn = compile_function_plan(plan, args)
    assert ("Tm" not in [b.name for b in fn.kernels[-1].buffers]) is scratch_tile
    _passed(emulate_function(model, fn, None, seed=4))


def test_a_reduced_temp_cached_inside_one_part_is_refused():
    """A row's maximum cached at the loop of the part that reduces it (not before the fusing index)
    is no scratch tile, and a reduction across threads writes no cached array: refused."""
    X = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(4, 64))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(4, 64))
    mx = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(4,))
    init, peak, out = acc.Nest(shape=(4,)), acc.Nest(shape=(4, 64)), acc.Nest(shape=(4, 64))
    (i0,) = init.get_indices()
    i1, j1 = peak.get_indices()
    i2, j2 = out.get_indices()

    @init.iteration_logic
    def _():
        mx[i0] = -1e30

    @peak.iteration_logic
    def _():
        mx[i1] = acc.max(mx[i1], X[i1, j1])

    @out.iteration_logic
    def _():
        Y[i2, j2] = X[i2, j2] - mx[i2]

    s = acc.fuse(tuple(n.create_schedule() for n in (init, peak, out)), partial=1)
    f, i, a, b = s.get_indices()
    ii, aa, bb = s.split(i, 1), s.split(a, 32), s.split(b, 32)
    s.reorder(i, ii, f, a, aa, b, bb)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, aa: H100.GridUnit.THREAD_X, bb: H100.GridUnit.THREAD_X})
    plan.cache(mx, index=a, location=acc.MemorySpace.SHARED)
    with pytest.raises(PlanError, match="mx is a TEMP array each pass writes before it reads it, but its SHARED cache "
                                        "at a is filled inside a fused part"):
        compile_function_plan(plan, (X, Y))


def test_a_temp_tile_read_before_it_is_written_is_no_scratch():
    """Only a TEMP array whose one writer runs before every read of the pass is scratch: one
    accumulated into (``E += ...`` reads the tile first), one only read, or a caller's array keep
    their global memory, fill and write-back."""
    from schedc.ir.kernel import Binary, Load
    from schedc.ir.walk import loads
    from schedc.lower.scratch import scratch

    model, _ = compile_plan(*softmax.softmax(4, 1000, T.float32, 128, keep=True))
    assert scratch(model, "E")
    accumulated = dataclasses.replace(model, statements=tuple(
        dataclasses.replace(s, value=Binary("+", Load(s.buffer, s.index, T.float32), s.value, T.float32))
        if s.buffer == "E" else s for s in model.statements))
    assert not scratch(accumulated, "E")
    never_written = dataclasses.replace(model, statements=tuple(
        dataclasses.replace(s, buffer="Y") if s.buffer == "E" else s for s in model.statements))
    assert not scratch(never_written, "E")
    assert not scratch(model, "Y")  # the caller's array
    assert scratch(model, "mx") and scratch(model, "sm")  # set by the first part, then at the same element
    uninitialised = dataclasses.replace(model, statements=tuple(
        dataclasses.replace(s, buffer="Y", index=(s.index[0], s.index[0])) if s.buffer == "mx" and not any(
            ld.buffer == "mx" for ld in loads(s.value)) else s for s in model.statements))
    assert not scratch(uninitialised, "mx")  # its first access, the reduction, reads it


@pytest.mark.parametrize("one_pass", [False, True], ids=["two passes", "one pass, shifted"])
def test_layernorm_holds_rows_whose_mean_is_large_beside_their_spread(one_pass):
    """Rows of float32 values near 10^4 with a spread of 1: E[x^2] - E[x]^2 would cancel every digit
    (float32 keeps 7); the one-pass form sums the values less the row's first, so it holds."""
    import numpy as np

    from schedc.codegen.emulate import emulate_sequence
    from schedc.data import from_storage, to_storage

    plan, args = layernorm.layernorm(4, 2048, T.float32, 128, one_pass=one_pass)
    _, fn = compile_function_plan(plan, args)
    rng = np.random.default_rng(0)
    x = (1e4 + rng.standard_normal((4, 2048))).astype(np.float32)
    gamma, beta = np.ones(2048, np.float32), np.zeros(2048, np.float32)
    arrays = {"X": x, "gamma": gamma, "beta": beta, "Y": np.zeros_like(x)}
    params = {b.name: b for b in fn.arrays}
    run = emulate_sequence(fn, {name: to_storage(params[name], a) for name, a in arrays.items()})
    y = from_storage(params["Y"], run.storage["Y"])
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    assert np.abs(y - want).max() < 1e-2


def test_some_blocks_of_a_function_with_temporary_arrays_emulate():
    """``schedc emulate`` samples blocks of a large grid: the reference of those blocks holds the
    TEMP arrays (the row's sums) beside the parameters, which are compared alone."""
    plan, args = layernorm.layernorm(40, 512, T.float16, 64, one_pass=True)
    model, fn = compile_function_plan(plan, args)
    reports = emulate_function(model, fn, 3, seed=2)
    assert [r.array for r in reports] == ["Y"]
    _passed(reports)


def test_arrays_threads_hand_values_through_are_not_restrict():
    """In a kernel with __syncthreads(), the arrays it writes and reads (the row's maximum, written
    by one thread and read by the others after the barrier) are not __restrict__: a compiler may
    hoist a load through a restrict pointer that has not escaped above a barrier. Inputs and
    arrays only written keep it, and so does a kernel without barriers."""
    from schedc.codegen.cuda import parameter_list

    M = acc.create_dimensions()  # mx and sm of M rows: workspaces, the kernel's parameters
    plan, (X, Y) = softmax.softmax(M, 700, T.float32, 64, cache=False, scratch=False)
    _, fn = compile_function_plan(plan, (M, X, Y))
    signature = parameter_list(fn.kernels[-1], restrict=True)
    assert signature.startswith("const float* __restrict__ X, float* __restrict__ Y, float* mx, float* sm")
    _, plain = compile_function_plan(*rows(lanes=32))  # one reduction within a warp: no barrier
    assert parameter_list(plain.kernels[-1], restrict=True) == "const float* __restrict__ X, float* __restrict__ S"


def test_parts_on_threads_meet_at_barriers():
    """A part reads what the part before wrote from another thread (the row's maximum, written by
    its first thread): a barrier separates each two parts, reached by every thread. The emulator
    runs a block's threads in lock step and follows global memory in program order, so it is the
    kernel's structure that says so."""
    from schedc.ir.kernel import Barrier, If

    plan, args = softmax.softmax(4, 1000, T.float32, 128)
    _, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[-1]
    between = [s for s in walk_statements(kernel.body) if isinstance(s, Barrier) and "part before" in s.comment]
    assert len(between) == 4  # five parts
    guarded = [s for s in walk_statements(kernel.body) if isinstance(s, If)
               for inner in walk_statements(s.body) if inner in between]
    assert not guarded


def test_a_reducing_part_writes_once_where_another_part_uses_more_threads():
    """The second part runs on THREAD_X and THREAD_Y, the first (a sum across THREAD_X) on
    threadIdx.y == 0 only: its total is written by one thread, not by each row of threads."""
    s, (f, i, a, b), args = _sum_then_use(6, 200)
    aa, bb = s.split(a, 32), s.split(b, 64)
    bbb = s.split(bb, 32)
    s.reorder(i, f, a, aa, b, bb, bbb)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, aa: H100.GridUnit.THREAD_X})
    plan.bind({bbb: H100.GridUnit.THREAD_X, bb: H100.GridUnit.THREAD_Y})
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, None, seed=4))


def test_parts_reducing_in_two_types_each_have_their_warps_totals():
    """A float64 sum and an int32 maximum, each part across 64 threads: one shared buffer of the
    warps' totals per type."""
    X = acc.Array(role=acc.Role.INPUT, shape=(4, 256), element_type=T.float64)
    Z = acc.Array(role=acc.Role.INPUT, shape=(4, 256), element_type=T.int32)
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,), element_type=T.float64)
    R = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,), element_type=T.int32)
    first, second = acc.Nest(4, 256), acc.Nest(4, 256)
    i0, j0 = first.get_indices()
    i1, k1 = second.get_indices()

    @first.iteration_logic
    def _():
        S[i0] += X[i0, j0]

    @second.iteration_logic
    def _():
        R[i1] = acc.max(R[i1], Z[i1, k1])

    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
    f, i, j, k = s.get_indices()
    jj, kk = s.split(j, 64), s.split(k, 64)
    s.reorder(i, f, j, jj, k, kk)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, jj: H100.GridUnit.THREAD_X, kk: H100.GridUnit.THREAD_X})
    model, fn = compile_function_plan(plan, (X, Z, S, R))
    assert {b.name for b in fn.kernels[-1].shared} >= {"_partials_float64", "_partials_int32"}
    _passed(emulate_function(model, fn, None, seed=6))
    nvrtc_compile(emit_source([fn], "// two types"), "two", "sm_90")


def _sum_then_use(M: int, N: int):
    """S[i] += X[i, j], then Y[i, j] = X[i, j] * S[i], fused over the rows: the schedule, its
    (f, i, j of the sum, j of the use) and the arrays (X, S, Y)."""
    X = acc.Array(role=acc.Role.INPUT, shape=(M, N))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M,))
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(M, N))
    first, second = acc.Nest(M, N), acc.Nest(M, N)
    i1, j1 = first.get_indices()
    i2, j2 = second.get_indices()

    @first.iteration_logic
    def _():
        S[i1] += X[i1, j1]

    @second.iteration_logic
    def _():
        Y[i2, j2] = X[i2, j2] * S[i2]

    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
    return s, s.get_indices(), (X, S, Y)


def _two_parts(bind_second):
    s, (f, i, a, b), args = _sum_then_use(4, 64)
    aa, bb = s.split(a, 32), s.split(b, 16)
    s.reorder(i, f, a, aa, b, bb)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, aa: H100.GridUnit.THREAD_X})
    bind_second(plan, b, bb)
    return plan, args


def test_parts_on_threads_need_equal_counts():
    plan, args = _two_parts(lambda plan, b, bb: plan.bind({bb: H100.GridUnit.THREAD_X}))
    with pytest.raises(PlanError, match="THREAD_X runs aa \\(32 threads\\) in one part and bb \\(16\\) in another"):
        compile_function_plan(plan, args)


def test_an_unfused_loop_on_blocks_is_refused():
    plan, args = _two_parts(lambda plan, b, bb: plan.bind({b: H100.GridUnit.BLOCK_Y}))
    with pytest.raises(PlanError, match="b is a loop of an unfused dimension of a fused schedule, bound to BLOCK_Y"):
        compile_function_plan(plan, args)


def test_one_part_binds_a_unit_once():
    X = acc.Array(role=acc.Role.INPUT, shape=(4, 64))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,))
    first, second = acc.Nest(4, 64), acc.Nest(4)
    i1, j1 = first.get_indices()
    (i2,) = second.get_indices()

    @first.iteration_logic
    def _():
        S[i1] += X[i1, j1]

    @second.iteration_logic
    def _():
        S[i2] = S[i2] * 2.0

    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
    f, i, j = s.get_indices()
    jj = s.split(j, 32)
    plan = s.create_plan(H100)
    plan.bind({jj: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="THREAD_X is bound twice \\(to jj and to j\\)"):
        plan.bind({j: H100.GridUnit.THREAD_X})


# -- on the GPU ------------------------------------------------------------------------------

GPU = {
    "sum 1024 lanes": lambda: rows(lanes=1024, N=5000, M=6),
    "fp16 max 128 lanes, 2 rows": lambda: rows(dtype=T.float16, op="max", lanes=128, per_block=2, M=9),
    "int8 min 16 lanes": lambda: rows(dtype=T.int8, op="min", lanes=16, per_block=8, M=20),
    "e4m3 max 64 lanes": lambda: rows(dtype=T.float8_e4m3, op="max", lanes=64, per_block=2, M=9),
    "gemv": lambda: gemv.gemv(256, 8192),
    "softmax fp16, workspaces": lambda: softmax.softmax(64, 4096, T.float16, 256, scratch=False),
    "softmax fp32 1024 threads": lambda: softmax.softmax(16, 32768, T.float32, 1024),
    "softmax fp16 fast, workspaces": lambda: softmax.softmax(64, 4096, T.float16, 256, fast=True, scratch=False),
    "softmax fp16, a scratch row, workspaces": lambda: softmax.softmax(64, 4096, T.float16, 256, keep=True,
                                                                       scratch=False),
    "softmax fp32, a scratch row, X uncached, workspaces": lambda: softmax.softmax(16, 3000, T.float32, 128,
                                                                                   cache=False, keep=True,
                                                                                   scratch=False),
    "layernorm fp16, workspaces": lambda: layernorm.layernorm(64, 4096, T.float16, 256, scratch=False),
    "layernorm fp16 in one pass, workspaces": lambda: layernorm.layernorm(64, 4096, T.float16, 128, one_pass=True,
                                                                          scratch=False),
    "softmax fp16, no workspace": lambda: softmax.softmax(64, 4096, T.float16),
    "softmax fp16 fast, no workspace": lambda: softmax.softmax(64, 4096, T.float16, fast=True),
    "softmax fp16, a scratch row, no workspace": lambda: softmax.softmax(64, 4096, T.float16, 256, keep=True),
    "layernorm fp16, no workspace": lambda: layernorm.layernorm(64, 4096, T.float16, 256),
    "layernorm fp16 in one pass, no workspace": lambda: layernorm.layernorm(64, 4096, T.float16, 128, one_pass=True),
    "sum, squares and max in one nest, bf16": lambda: moments(M=9, N=3000, lanes=512, dtype=T.bfloat16),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU)
def test_reductions_on_the_gpu(name, tmp_path):
    plan, args = GPU[name]()
    build(plan, args, "reduce", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "reduce.hat").functions["reduce"], seed=3))


def test_calls_on_two_streams_keep_their_own_scratch(tmp_path):
    """TEMP arrays are workspaces the loader allocates per stream (a ``__device__`` array would be
    shared by calls running at once): the launcher takes them, and two streams' calls of a layer
    norm (64 rows: both kernels fit the GPU at once) give each stream's own rows."""
    plan, args = layernorm.layernorm(64, 4096, T.float16, 128, one_pass=True, scratch=False)
    path = build(plan, args, "rows_norm", tmp_path)
    source = (tmp_path / "rows_norm.cu").read_text()
    assert "__device__ float" not in source
    assert "int rows_norm(const __half* X, const __half* gamma, const __half* beta, __half* Y, float* " in source
    require_gpu()
    torch = pytest.importorskip("torch")
    fn = acc.load(path).functions["rows_norm"]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    gen = torch.Generator(device="cuda").manual_seed(5)
    xs = [torch.randn(64, 4096, device="cuda", generator=gen, dtype=torch.float16) * (1 + 9 * s) + 3 * s
          for s in range(2)]
    gamma = torch.rand(4096, device="cuda", generator=gen, dtype=torch.float16) + 0.5
    beta = torch.randn(4096, device="cuda", generator=gen, dtype=torch.float16)
    ys = [torch.empty_like(x) for x in xs]
    torch.cuda.synchronize()
    for _ in range(50):
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                fn(xs[s], gamma, beta, ys[s])
    torch.cuda.synchronize()
    for x, y in zip(xs, ys):
        want = torch.nn.functional.layer_norm(x.float(), (4096,), gamma.float(), beta.float(), 1e-5)
        assert (y.float() - want).abs().max().item() < 2e-2


@pytest.mark.parametrize("form, says", [
    ("sub", "S's statement is not T = T + X, acc.max(T, X) or acc.min(T, X) with X not reading T"),
    ("mul", "S's statement is not T = T + X"),
    ("beside", "the nest holds another statement (Y's)"),
])
def test_a_race_of_threads_on_one_element_says_why_it_is_no_reduction(form, says):
    """Threads of a row writing one element race unless the statement is a reduction they can
    combine: the race says which part is not (T -= X, T *= X, or a statement beside it)."""
    X = acc.Array(role=acc.Role.INPUT, shape=(4, 64))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,))
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(4, 64))
    nest = acc.Nest(4, 64)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        if form == "sub":
            S[i] -= X[i, j]
        elif form == "mul":
            S[i] *= X[i, j]
        else:
            S[i] += X[i, j]
            Y[i, j] = X[i, j] * 2.0

    s = nest.create_schedule()
    jj = s.split(j, 32)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, jj: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match=re.escape(f"a race. Every thread of jj writes the same element, and {says}")):
        compile_function_plan(plan, (X, S, Y) if form == "beside" else (X, S))


# -- random row programs: statistics reduced across threads, in scratch tiles or workspaces ----------

STATISTICS = {  # a row statistic: (its first value, how a row element folds into it)
    "sum": (lambda x: 0.0, lambda s, v: s + v),
    "max": (lambda x: x, lambda s, v: acc.max(s, v)),
    "min": (lambda x: x, lambda s, v: acc.min(s, v)),
}
SUMMANDS = {"x": lambda x: x, "x*x": lambda x: x * x, "abs": lambda x: acc.abs(x), "exp": lambda x: acc.exp(x * 0.25)}


def random_rows(M: int, N: int, threads: int, dtype, stats: list[tuple[str, str, bool]], cache_x: bool,
                rescale: bool, offset: bool):
    """Nests fused over the rows, as the row samples are: each statistic ``(kind, summand, scratch)``
    (a TEMP row array) set from its first value, folded over the row on the block's threads (a
    reduction across threads), ``rescale``d once a row on its first thread, then read by
    ``Y[i, j] = X * s0 (+ s1)`` (``offset``: the row's first element added too). ``scratch``: the
    statistic cached in SHARED at the one-row loop (a scratch tile), else a workspace."""
    F32 = T.float32
    X = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))
    S = [acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,)) for _ in stats]

    def x(i, j):
        return acc.cast(X[i, j], F32)

    nests = []
    for s, (kind, summand, _) in zip(S, stats):
        first, fold = STATISTICS[kind]
        init, reduce = acc.Nest(shape=(M,)), acc.Nest(shape=(M, N))
        (i0,) = init.get_indices()
        i1, j1 = reduce.get_indices()

        @init.iteration_logic
        def _(s=s, first=first, i0=i0):
            s[i0] = first(x(i0, 0))

        @reduce.iteration_logic
        def _(s=s, fold=fold, summand=summand, i1=i1, j1=j1):
            s[i1] = fold(s[i1], SUMMANDS[summand](x(i1, j1)))

        nests += [init, reduce]
    if rescale:
        once = acc.Nest(shape=(M,))
        (i2,) = once.get_indices()

        @once.iteration_logic
        def _():
            S[0][i2] = 1.0 / (acc.abs(S[0][i2]) + 1.0)

        nests.append(once)
    out = acc.Nest(shape=(M, N))
    i3, j3 = out.get_indices()

    @out.iteration_logic
    def _():
        y = x(i3, j3) * S[0][i3]
        if len(S) > 1:
            y = y + S[1][i3]
        if offset:
            y = y + x(i3, 0)
        Y[i3, j3] = acc.cast(y, dtype)

    nests.append(out)
    schedule = acc.fuse(tuple(n.create_schedule() for n in nests), partial=1)
    f, i, *columns = schedule.get_indices()
    ii = schedule.split(i, 1)
    on_threads = [schedule.split(j, threads) for j in columns]
    schedule.reorder(i, ii, f, *(loop for pair in zip(columns, on_threads) for loop in pair))
    plan = schedule.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, **dict.fromkeys(on_threads, H100.GridUnit.THREAD_X)})
    if cache_x:
        plan.cache(X, index=ii, location=H100.MemorySpace.SHARED)
    for s, (_, _, scratch) in zip(S, stats):
        if scratch:
            plan.cache(s, index=ii, location=H100.MemorySpace.SHARED)
    return plan, (X, Y)


_statistic = st.tuples(st.sampled_from(sorted(STATISTICS)), st.sampled_from(sorted(SUMMANDS)), st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 3), N=st.integers(32, 300), threads=st.sampled_from([32, 64, 128, 256]),
       dtype=st.sampled_from([T.float32, T.float16]), stats=st.lists(_statistic, min_size=1, max_size=2),
       cache_x=st.booleans(), rescale=st.booleans(), offset=st.booleans())
def test_random_row_programs_match_the_reference(M, N, threads, dtype, stats, cache_x, rescale, offset):
    """Random row programs emulate to the reference, whichever statistics are scratch tiles: those
    leave no workspace and no global store, the others are workspaces. (A row shorter than the
    threads would leave a thread count that is no power of two, which the combine refuses.)"""
    from schedc.ir.kernel import Store

    threads = min(threads, 1 << (N.bit_length() - 1))
    plan, args = random_rows(M, N, threads, dtype, stats, cache_x, rescale, offset)
    model, fn = compile_function_plan(plan, args)
    stored = {s.buffer for s in walk_statements(fn.kernels[-1].body) if isinstance(s, Store)}
    names = [b.name for b in model.buffers if b.role == "temp"]
    workspaces = {b.name for b in fn.params if b.kind == "workspace"}
    for name, (_, _, scratch) in zip(names, stats):
        assert (name not in stored and name not in workspaces) if scratch else name in workspaces, name
    _passed(emulate_function(model, fn, None, seed=M * 1000 + N))


@pytest.mark.gpu
def test_random_row_programs_on_the_gpu(tmp_path):
    """Eight random row programs (the property test's space, larger rows) in one package, each run
    on the GPU against the reference."""
    import random

    rng = random.Random(11)
    package = acc.Package()
    for n in range(8):
        N = rng.randrange(700, 5000)
        stats = [(rng.choice(sorted(STATISTICS)), rng.choice(sorted(SUMMANDS)), rng.random() < 0.7)
                 for _ in range(rng.choice((1, 2)))]
        plan, args = random_rows(rng.randrange(1, 40), N, rng.choice((64, 128, 256, 512)),
                                 rng.choice((T.float32, T.float16)), stats, rng.random() < 0.5, rng.random() < 0.5,
                                 rng.random() < 0.5)
        package.add(plan, args, base_name=f"rows{n}")
    package.build("rows", format=acc.Package.Format.HAT_SOURCE, output_dir=tmp_path)
    require_gpu()
    functions = acc.load(tmp_path / "rows.hat").functions
    for n in range(8):
        _passed(run_function(functions[f"rows{n}"], seed=n))


def _norm_rows(split_rows: bool):
    """ss[i] = 0, ss[i] += X[i, j]^2 (threads along j), Y = X * ss: fused over rows, two rows a
    block on THREAD_Y; ss a TEMP cached in SHARED at the row loop (``split_rows``: at a one-value
    serial loop split off it, before the fusing index)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(4, 64))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(4, 64))
    ss = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(4,))
    a, b, c = acc.Nest(4), acc.Nest(4, 64), acc.Nest(4, 64)
    (i0,), (i1, j1), (i2, j2) = a.get_indices(), b.get_indices(), c.get_indices()

    @a.iteration_logic
    def _():
        ss[i0] = 0.0

    @b.iteration_logic
    def _():
        ss[i1] += X[i1, j1] * X[i1, j1]

    @c.iteration_logic
    def _():
        Y[i2, j2] = X[i2, j2] * ss[i2]

    s = acc.fuse((a.create_schedule(), b.create_schedule(), c.create_schedule()), partial=1)
    f, i, jb, jc = s.get_indices()
    ii = s.split(i, 2)
    tb, tc = s.split(jb, 32), s.split(jc, 32)
    at = s.split(ii, 1) if split_rows else ii
    s.reorder(i, ii, *((at,) if split_rows else ()), f, jb, tb, jc, tc)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.THREAD_Y, tb: H100.GridUnit.THREAD_X,
               tc: H100.GridUnit.THREAD_X})
    plan.cache(ss, index=at, location=H100.MemorySpace.SHARED)
    return plan, (X, Y)


def test_a_scratch_cache_filled_inside_a_part_is_refused_with_where_it_must_go():
    """ss at the THREAD_Y-bound row loop is filled inside the parts (no serial loop there before
    the fusing index): no scratch tile, and the refusal says so and how to make one; at a serial
    loop split off the rows by 1 it is one, and the kernel matches the reference."""
    with pytest.raises(PlanError, match=r"ss is a TEMP array each pass writes before it reads it, but its SHARED "
                                        r"cache at ii is filled inside a fused part .*split a block- or thread-bound "
                                        r"loop by 1 to make one there"):
        compile_function_plan(*_norm_rows(False))
    model, fn = compile_function_plan(*_norm_rows(True))
    _passed(emulate_function(model, fn, None, seed=4))
