"""PRIVATE caches of SIMT nests: each thread's register tile, its copies in and out, the
loops unrolled over it, the checks, and the emulator catching a broken tile."""

from __future__ import annotations

import dataclasses
import runpy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_kernel
from schedc.ir.kernel import Const, If, Load, Loop, PrivateArray, Store
from schedc.ir.walk import walk_statements
from schedc.verify import emulate_function

from .conftest import ROOT
from .plans import VARIANTS, T, compile_plan, matmul_arrays, simt_register_tile, tensor_matmul
from .test_pipelines import broken, emulates

PRIVATE = acc.MemorySpace.PRIVATE


def statements(kernel, kind):
    return [s for s in walk_statements(kernel.body) if isinstance(s, kind)]


def copies(kernel, array):
    """The element stores of a tile's copies: (into the tile, back to the array)."""
    stores = statements(kernel, Store)
    inward = [s for s in stores if s.buffer == f"{array}_private" and isinstance(s.value, Load)
              and s.value.buffer == array]
    outward = [s for s in stores if s.buffer == array and isinstance(s.value, Load)
               and s.value.buffer == f"{array}_private"]
    return inward, outward


def test_a_register_tile_per_thread():
    _, kernel = compile_plan(*VARIANTS["simt_register_tile"][0]())
    (tile,) = statements(kernel, PrivateArray)
    assert (tile.name, tile.shape) == ("C_private", (4, 4))
    inward, outward = copies(kernel, "C")
    assert len(inward) == len(outward) == 1
    loops = {s.var: s for s in statements(kernel, Loop)}
    assert loops["iii"].unroll and loops["jjj"].unroll and not loops["kk"].unroll, "only the tile's loops"
    assert loops["C_p0"].unroll and loops["C_p1"].unroll
    top = [s.var for s in kernel.body if isinstance(s, Loop)]
    assert top == ["C_p0", "k", "C_p0"], "the tile is loaded before k's loop and stored after it"
    k_loop = kernel.body[[getattr(s, "var", None) for s in kernel.body].index("k")]
    products = [s for s in walk_statements(k_loop.body) if isinstance(s, Store)]
    assert [s.buffer for s in products] == ["C_private"]
    source = emit_kernel(kernel)
    assert "float C_private[16];  // this thread's tile float32[4, 4], in registers" in source
    assert "C_private[iii * 4 + jjj] = C_private[iii * 4 + jjj] + A_shared[" in source


def test_written_only_tiles_are_not_loaded():
    A2 = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(32, 32))
    C = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(32, 32))
    out = acc.Nest(shape=(32, 32))
    x, y = out.get_indices()

    @out.iteration_logic
    def _():
        C[x, y] = A2[x, y] * 2.0

    s = out.create_schedule()
    xx, yy = s.split(x, 8), s.split(y, 8)
    xxx = s.split(xx, 2)
    s.reorder(x, y, xx, yy, xxx)
    plan = s.create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))
    g = acc.Target(acc.Target.Model.NVIDIA_H100).GridUnit
    plan.bind({x: g.BLOCK_Y, y: g.BLOCK_X, xx: g.THREAD_Y, yy: g.THREAD_X})
    plan.cache(C, index=xxx, location=PRIVATE)
    model, kernel = compile_plan(plan, (A2, C))  # the script's own names, A2 and C
    inward, outward = copies(kernel, "C")
    assert not inward and len(outward) == 1
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))


def test_read_only_tiles_are_not_stored():
    plan, (A, B, C) = matmul_arrays_plan_with_private_a()
    model, kernel = compile_plan(plan, (A, B, C))
    inward, outward = copies(kernel, "A")
    assert len(inward) == 1 and not outward
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))


def matmul_arrays_plan_with_private_a():
    """Each thread's row of A for 8 values of k in registers, C one element per thread."""
    nest, args = matmul_arrays(32, 32, 32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 16), s.split(j, 16), s.split(k, 8)
    s.reorder(i, j, ii, jj, k, kk)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    plan.cache(args[0], index=kk, location=PRIVATE)
    return plan, args


def test_partial_tiles_guard_the_copies():
    _, kernel = compile_plan(*VARIANTS["simt_register_tile_partial_async"][0]())
    inward, outward = copies(kernel, "C")
    guarded = [s for s in statements(kernel, If) if s.comment == "the part of the tile inside C"]
    assert len(guarded) == 2 and inward[0] in guarded[0].body and outward[0] in guarded[1].body


def test_whole_tiles_copy_without_guards():
    _, kernel = compile_plan(*VARIANTS["simt_register_tile"][0]())
    assert not [s for s in statements(kernel, If) if s.comment == "the part of the tile inside C"]


def test_sample_at_a_small_size():
    make = runpy.run_path(str(ROOT / "samples" / "simt_register_tile.py"), run_name="schedc_test")["register_tile"]
    model, kernel = compile_plan(*make(128, 192, 64), name="register_tile")
    reports = emulate_function(model, kernel, blocks=None, seed=6)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    assert [b.shape for b in kernel.shared] == [(2, 64, 16), (2, 16, 64)]
    assert statements(kernel, PrivateArray)[0].shape == (4, 4)


# -- the emulator catches a broken tile ----------------------------------------------------------


def _without(kind):
    def change(s):
        if isinstance(s, Loop) and s.var == "C_p0" and any(
                isinstance(x, Store) and x.buffer == kind for x in walk_statements(s.body)):
            return ()
        return (s,)
    return change


def test_a_tile_never_stored_leaves_c_unchanged():
    model, kernel = compile_plan(*VARIANTS["simt_register_tile"][0]())
    assert not emulates(*broken(model, kernel, _without("C")))


def test_a_tile_never_loaded_reads_uninitialised_registers():
    model, kernel = compile_plan(*VARIANTS["simt_register_tile"][0]())
    assert not emulates(*broken(model, kernel, _without("C_private")))


def test_the_emulator_keeps_one_tile_per_thread():
    """Thread-private storage: if every thread shared one tile, the sums would mix."""
    model, kernel = compile_plan(*VARIANTS["simt_register_tile_no_shared"][0]())

    def shared_tile(s):
        if isinstance(s, Store) and s.buffer == "C_private":
            return (dataclasses.replace(s, index=tuple(Const(0) for _ in s.index)),)
        return (s,)

    assert not emulates(*broken(model, kernel, shared_tile))


# -- checks -----------------------------------------------------------------------------------------


def test_private_cache_checks():
    plan, args = tensor_matmul(64, 64, 64, k_split=32)
    plan.cache(args[2], index=plan.schedule.order[2], location=PRIVATE)
    with pytest.raises(acc.CacheError, match="PRIVATE caches are register tiles of SIMT nests; a tensorized plan "
                                             "keeps its accumulator in MMA_FRAGMENT"):
        compile_plan(plan, args)
    plan, args = simt_register_tile(64, 64, 32, index="k")
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=k, location=PRIVATE\): C is already cached"):
        plan.cache(args[2], index=plan.schedule.order[4], location=PRIVATE)
    with pytest.raises(acc.CacheError, match="strategy does not apply to an PRIVATE cache"):
        plan.cache(args[0], index=plan.schedule.order[4], location=PRIVATE, strategy=acc.CacheStrategy.STRIPED)
    with pytest.raises(acc.CacheError, match="double buffers and stages apply to SHARED caches"):
        plan.cache(args[0], index=plan.schedule.order[4], location=PRIVATE, stages=2)


def test_a_tile_over_the_register_budget_is_kept_in_local_memory():
    """16x16 floats a thread (256 registers, over the 128 a tile may take): the tile lives in the
    thread's local memory, its loops not unrolled, and the result is the same; 32x32 a thread
    (4 KiB, over the 2 KiB kept there) is refused."""
    model, kernel = compile_plan(*simt_register_tile(64, 64, 32, block=(32, 32), per_thread=(16, 16), shared=False))
    tile = next(s for s in walk_statements(kernel.body) if isinstance(s, PrivateArray))
    assert (tile.local, tile.registers) == (True, 0)
    assert "C_private[256];  // this thread's tile float32[16, 16], in local memory" in emit_kernel(kernel)
    assert emulates(model, kernel)
    plan, args = simt_register_tile(256, 256, 32, block=(64, 64), per_thread=(32, 32), shared=False)
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=k, location=PRIVATE\): each thread's tile "
                                             r"C\[i \+ ii, j \+ jj\] \+ \[32 x 32\] is 1024 elements: 4096 bytes "
                                             r"per thread, over the 2048 schedc keeps"):
        compile_plan(plan, args)


def test_a_thread_bound_index_places_the_tile_at_the_next_serial_loop():
    """Accera's caching at a thread-bound loop: each thread's tile over the loops at and inside
    it that the thread runs, copied around the first of them (here k): the kernel of index=k."""
    sources = {}
    for index in ("ii", "jj", "k"):
        model, kernel = compile_plan(*simt_register_tile(64, 64, 32, index=index))
        assert emulates(model, kernel), index
        sources[index] = emit_kernel(kernel)
    assert sources["ii"] == sources["jj"] == sources["k"]


def _bound_outside(order: str, index: str):
    """C[32, 32] += A @ B with i split by 16 into a block-bound i and a thread-bound ii, loops in
    ``order`` (letters), C cached PRIVATE at ``index``."""
    nest, args = matmul_arrays(32, 32, 32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii = s.split(i, 16)
    loops = {"i": i, "ii": ii, "j": j, "k": k}
    s.reorder(*(loops[n] for n in order.split()))
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
    plan.cache(args[2], index=loops[index], location=PRIVATE)
    return compile_plan(plan, args)


def test_a_bound_index_with_no_serial_loop_after_it():
    """No loop the thread runs follows ii: the tile (one element) is copied around the statement."""
    model, kernel = _bound_outside("i j k ii", "ii")
    (tile,) = statements(kernel, PrivateArray)
    assert tile.shape == (1, 1)
    k_loop = next(s for s in statements(kernel, Loop) if s.var == "k")
    kinds = [type(s).__name__ for s in k_loop.body]
    assert kinds == ["PrivateArray", "Loop", "Store", "Loop"], "declared, loaded, updated, stored inside k"
    inward, outward = copies(kernel, "C")
    assert len(inward) == len(outward) == 1
    assert emulates(model, kernel)


@pytest.mark.parametrize("order, index, shape", [
    ("i ii j k", "i", (1, 32)),  # bound to blocks: the thread's row of C over j and k
    ("i ii j k", "ii", (1, 32)),
    ("i j ii k", "ii", (1, 1)),
])
def test_a_bound_index_tile_is_the_threads_footprint(order, index, shape):
    model, kernel = _bound_outside(order, index)
    (tile,) = statements(kernel, PrivateArray)
    assert tile.shape == shape
    assert emulates(model, kernel)


# -- property: random sizes against numpy ------------------------------------------------------------


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(8, 40), st.integers(8, 40), st.integers(2, 24), st.sampled_from([(2, 2), (4, 1), (1, 4)]),
       st.sampled_from(["ii", "jj", "k", "kk", "iii"]), st.booleans())
def test_register_tiles_match_numpy(M, N, K, per_thread, index, shared):
    block = (8, 8)
    plan, args = simt_register_tile(M, N, K, block=block, per_thread=per_thread, k_split=min(4, K),
                                    shared=shared, index=index)
    model, kernel = compile_plan(plan, args)
    reports = emulate_function(model, kernel, blocks=None, seed=M * N + K)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))


def test_a_register_tile_past_a_partial_shared_tile():
    """B's shared tile at jj covers j's 10 values; the register tile at jjj (8 a step of jj)
    reaches past it at jj = 8: only the part inside the shared tile is copied (found by the
    random tester: reading past it was out of bounds)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(22, 14))
    B = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(14, 6))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(22, 6))
    nest = acc.Nest(shape=(6, 14, 22))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[k, i] += A[k, j] * B[j, i]

    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 2), s.split(j, 10), s.split(k, 2)
    jjj = s.split(jj, 8)
    s.reorder(k, i, ii, kk, j, jj, jjj)
    target = acc.Target(acc.Target.Model.NVIDIA_A100)
    plan = s.create_plan(target)
    plan.bind({ii: target.GridUnit.THREAD_Y, k: target.GridUnit.BLOCK_Z, i: target.GridUnit.BLOCK_X})
    shared = plan.cache(B, index=jj, location=acc.MemorySpace.SHARED)
    plan.cache(shared, index=jjj, location=PRIVATE)
    model, kernel = compile_plan(plan, (A, B, C))
    assert "the part of the tile inside B's shared tile" in [s.comment for s in statements(kernel, If)]
    assert emulates(model, kernel)


def test_a_register_tile_of_a_shared_tile_read_backwards_stays_inside_it():
    """B[i, j] = A[5 - j, i], A's shared tile at j, each thread's element in a register at i:
    in the last, partial tile of j the padded thread's element lies before the shared tile, and
    its copy must skip it (the random tester's seed 998, #186, read A_shared[-1])."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(6, 1), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(1, 5), name="B")
    nest = acc.Nest(shape=(1, 5))
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: B.__setitem__((i, j), A[5 - j, i]))
    s = nest.create_schedule()
    jj = s.split(j, 2)
    s.reorder(j, jj, i)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({jj: target.GridUnit.THREAD_Y})
    tile = plan.cache(A, index=j, location=target.MemorySpace.SHARED)
    plan.cache(tile, index=i, location=target.MemorySpace.PRIVATE)
    model, kernel = compile_plan(plan, (A, B))
    reports = emulate_function(model, kernel, blocks=None, seed=1)
    assert all(r.passed for r in reports), "\n".join(map(str, reports))
