"""Classes of failures the random-schedule tester found, each pinned by a test at its root:
analysis cost, internal errors, the reference's meaning of recurrences, AUTO pipelines."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import schedc as acc
from schedc.errors import InternalError
from schedc.frontend.freeze import freeze
from schedc.lower import compile_model
from schedc.package.build import name_arrays
from schedc.poly import legality
from schedc.reference import _vector_dims, reference
from schedc.verify import emulate_function

from .plans import H100, T, batched_cache, compile_plan, simt_matmul, write_then_read

G = H100.GridUnit


def assert_passes(reports):
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def copy_1d(n: int, outer: int, inner: int):
    """B[i] = A[i] over n elements, split ``outer`` then ``inner``, the innermost piece on threads."""
    A = acc.Array(role=acc.Role.INPUT, shape=(n,))
    B = acc.Array(role=acc.Role.OUTPUT, shape=(n,))
    nest = acc.Nest(shape=(n,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] = A[i]

    s = nest.create_schedule()
    ii = s.split(i, outer)
    iii = s.split(ii, inner)
    plan = s.create_plan(H100)
    plan.bind({iii: G.THREAD_X})
    return plan, (A, B)


@pytest.mark.parametrize("n, outer, inner", [(500, 177, 140), (500, 300, 107), (997, 331, 100), (4099, 1000, 999)])
def test_output_coverage_answers_at_once_whatever_the_sizes(n, outer, inner):
    """The OUTPUT-coverage check once ran past 20 minutes on 500/177/140 (strided loop values
    in isl need existential variables; iteration counters do not)."""
    plan, args = copy_1d(n, outer, inner)
    name_arrays("f", plan, args)
    model = freeze(plan, "f", args)
    start = time.perf_counter()
    assert legality.unwritten_element(model, "B") is None
    compile_model(model)
    assert time.perf_counter() - start < 5


def test_output_coverage_still_finds_the_first_unwritten_element():
    A = acc.Array(role=acc.Role.INPUT, shape=(500,), name="A")
    B = acc.Array(role=acc.Role.OUTPUT, shape=(500,))
    nest = acc.Nest(shape=(250,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[2 * i + 1] = A[i]

    s = nest.create_schedule()
    ii = s.split(i, 177)
    plan = s.create_plan(H100)
    plan.bind({ii: G.THREAD_X})
    with pytest.raises(acc.PlanError, match=r"B\[500\] is not fully written: no iteration writes B\[0\]"):
        compile_plan(plan, (A, B))


def test_races_are_found_over_strided_loops():
    """Over loops that step by 177 and 140: writes of one element (no reduction: the last write
    wins) with the innermost piece on threads race (refused with two iterations that write it);
    the same pieces on threads and blocks of a copy write every element once (accepted, and
    correct)."""
    A = acc.Array(role=acc.Role.INPUT, shape=(500,))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(1,))
    nest = acc.Nest(shape=(500,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[0] = A[i]

    s = nest.create_schedule()
    ii = s.split(i, 177)
    iii = s.split(ii, 140)
    racy = s.create_plan(H100)
    racy.bind({iii: G.THREAD_X})
    with pytest.raises(acc.PlanError, match=r"bind\(\{iii: THREAD_X\}\): iterations \(i=0, ii=0, iii=0\) and "
                                            r"\(i=0, ii=0, iii=1\) run concurrently \(THREAD_X iii=0 vs 1\) and both "
                                            r"write S\[0\]: a race"):
        compile_plan(racy, (A, S))
    plan, (A, B) = copy_1d(500, 177, 140)
    s = plan.schedule
    i, ii, iii = s.get_indices()
    plan = s.create_plan(H100)
    plan.bind({iii: G.THREAD_X, i: G.THREAD_Y})  # every element once
    model, kernel = compile_plan(plan, (A, B))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None))


def test_a_failing_pass_is_an_internal_error_naming_it(monkeypatch):
    plan, args = copy_1d(64, 32, 16)
    monkeypatch.setattr("schedc.lower.simplify.simplify", lambda kernel: kernel.no_such_field)
    with pytest.raises(InternalError, match=r"pass simplify: internal error \(a bug in schedc, please report "
                                            r"it\): AttributeError"):
        compile_plan(plan, args)


def test_cache_of_an_array_the_nest_does_not_access():
    plan, (A, B, C) = simt_matmul(64, 64, 64, shared_k=16)
    other = acc.Array(role=acc.Role.INPUT, shape=(64, 64), name="Other")
    k = next(x for x in plan.schedule.get_indices() if x.name == "kk")
    with pytest.raises(acc.CacheError, match=r"cache\(Other, index=kk, location=SHARED\): the nest does not access "
                                             r"Other: there is nothing to cache"):
        plan.cache(other, index=k)


def test_auto_double_buffer_falls_back_to_registers_where_cp_async_cannot_copy():
    """float16 rows of one element are 2-byte vectors: cp.async cannot move them, the register
    double buffer can; double_buffer=True (AUTO) takes it, explicit stages are still refused."""
    plan, args = simt_matmul(32, 32, 32, block=(16, 16), dtype=T.float16, shared_k=1,
                             pipeline={"double_buffer": True})
    model, kernel = compile_plan(plan, args)
    from schedc.lower import cache as lower_cache

    caches = lower_cache.plan_shared(model, kernel.threads_per_block)
    assert {(c.array, c.pipeline) for c in caches} == {("A", "registers"), ("B", "registers")}
    assert_passes(emulate_function(model, kernel, blocks=None, seed=3))
    plan, args = simt_matmul(32, 32, 32, block=(16, 16), dtype=T.float16, shared_k=1, pipeline={"stages": 2})
    with pytest.raises(acc.CacheError, match="cp.async moves 4, 8 or 16 bytes"):
        compile_plan(plan, args)


def test_auto_double_buffer_keeps_cp_async_where_it_fits():
    plan, args = simt_matmul(64, 64, 64, block=(16, 16), shared_k=16, pipeline={"double_buffer": True})
    model, kernel = compile_plan(plan, args)
    from schedc.lower import cache as lower_cache

    assert {c.pipeline for c in lower_cache.plan_shared(model, kernel.threads_per_block)} == {"async"}


# -- the reference: what a nest means ---------------------------------------------------------


def _model(nest_shape, logic, args):
    nest = acc.Nest(shape=nest_shape)
    indices = nest.get_indices()
    nest.iteration_logic(lambda: logic(*indices))
    plan = nest.create_schedule().create_plan(H100)
    name_arrays("f", plan, args)
    return freeze(plan, "f", args)


def test_reference_runs_recurrences_in_order():
    A = acc.Array(role=acc.Role.INPUT, shape=(9,), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(10,), name="C")

    def logic(i):
        C[i + 1] = C[i] * 2.0 + A[i]

    model = _model((9,), logic, (A, C))
    a, c = np.arange(9.0), np.ones(10)
    values, _ = reference(model, {"A": a, "C": c})
    expected = c.copy()
    for i in range(9):
        expected[i + 1] = expected[i] * 2 + a[i]
    np.testing.assert_array_equal(values["C"], expected)


def test_reference_vectorises_only_dimensions_without_a_dependence():
    """A recurrence along i, independent columns along j: exact, whichever order."""
    A = acc.Array(role=acc.Role.INPUT, shape=(6, 5), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(7, 5), name="C")

    def logic(i, j):
        C[i + 1, j] = C[i, j] * 0.5 + A[i, j]

    model = _model((6, 5), logic, (A, C))
    assert _vector_dims(model, ("i", "j")) == ("j",)
    rng = np.random.default_rng(0)
    a, c = rng.random((6, 5)), rng.random((7, 5))
    values, _ = reference(model, {"A": a, "C": c})
    expected = c.copy()
    for i in range(6):
        for j in range(5):
            expected[i + 1, j] = expected[i, j] * 0.5 + a[i, j]
    np.testing.assert_allclose(values["C"], expected, rtol=0, atol=0)


def test_reference_of_a_reduction_onto_overlapping_elements():
    """C[i + j] += A[i, j]: several iterations add into one element."""
    A = acc.Array(role=acc.Role.INPUT, shape=(4, 3), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(6,), name="C")

    def logic(i, j):
        C[i + j] += A[i, j]

    model = _model((4, 3), logic, (A, C))
    a = np.arange(12.0).reshape(4, 3)
    values, _ = reference(model, {"A": a, "C": np.zeros(6)})
    expected = np.zeros(6)
    for i in range(4):
        for j in range(3):
            expected[i + j] += a[i, j]
    np.testing.assert_array_equal(values["C"], expected)


def test_reference_broadcasts_a_reduction_term_over_dimensions_it_does_not_read():
    """D[i, j] += 0.5 * V[j] once failed in numpy's einsum."""
    V = acc.Array(role=acc.Role.INPUT, shape=(5,), name="V")
    D = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(3, 5), name="D")

    def logic(i, j):
        D[i, j] += 0.5 * V[j]

    model = _model((3, 5), logic, (V, D))
    v, d = np.arange(5.0), np.ones((3, 5))
    values, _ = reference(model, {"V": v, "D": d})
    np.testing.assert_array_equal(values["D"], d + 0.5 * v[None, :])


def _reversed_pair_plan(cache: bool):
    """B[i, j] = A[i, j] + A[7 - i, j]: the two reads of A move in opposite directions."""
    A = acc.Array(role=acc.Role.INPUT, shape=(8, 16), name="A")
    B = acc.Array(role=acc.Role.OUTPUT, shape=(8, 16), name="B")
    nest = acc.Nest(shape=(8, 16))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[i, j] + A[7 - i, j]

    s = nest.create_schedule()
    ii = s.split(i, 2)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, j: G.THREAD_X})
    if cache:
        plan.cache(A, index=ii, location=acc.MemorySpace.SHARED)
    return plan, (A, B)


def test_a_footprint_without_one_origin_is_refused_by_name():
    plan, args = _reversed_pair_plan(cache=True)
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=ii, location=SHARED\): the first element of A's "
                                             r"footprint inside ii along dimension 0 is -i \+ 6 or i, depending on "
                                             r"the outer loops"):
        compile_plan(plan, args)


def test_check_reports_footprints_without_a_box_and_arrays_left_alone():
    from schedc.show import footprints

    plan, (A, B) = _reversed_pair_plan(cache=False)
    unused = acc.Array(role=acc.Role.INPUT, shape=(3,), name="Unused")
    model, _ = compile_plan(plan, (A, B, unused))
    text = "\n".join(footprints(model))
    assert "inside ii     no box: the first element of A's footprint inside ii along dimension 0" in text
    assert "(the nest does not access Unused)" in text


def _private_plan(array_cols: int, nest_cols: int, split: int, strided: bool):
    """C[i, j] = A[i, j] * 2 with C's tile in registers; ``strided``: the inner piece of j is on
    threads and the tile is taken at the outer piece, so a thread's elements are ``split`` apart."""
    A = acc.Array(role=acc.Role.INPUT, shape=(8, array_cols), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, array_cols), name="C")
    nest = acc.Nest(shape=(8, nest_cols))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = A[i, j] * 2.0

    s = nest.create_schedule()
    jj = s.split(j, split)
    plan = s.create_plan(H100)
    if strided:
        plan.bind({i: G.BLOCK_X, jj: G.THREAD_X})
        plan.cache(C, index=j, location=acc.MemorySpace.PRIVATE)
    else:
        plan.bind({i: G.THREAD_X})
        plan.cache(C, index=jj, location=acc.MemorySpace.PRIVATE)
    return plan, (A, C)


@pytest.mark.parametrize("array_cols, nest_cols, split, strided", [(36, 36, 9, True), (20, 18, 4, False)])
def test_register_tiles_with_elements_the_thread_does_not_write_are_refused(array_cols, nest_cols, split, strided):
    plan, args = _private_plan(array_cols, nest_cols, split, strided)
    with pytest.raises(acc.CacheError, match=r"location=PRIVATE\): each thread's tile C\[.*holds elements the "
                                             r"thread does not write"):
        compile_plan(plan, args)


def test_register_tiles_written_whole_are_kept():
    plan, args = _private_plan(20, 20, 4, strided=False)
    model, kernel = compile_plan(plan, args)
    assert_passes(emulate_function(model, kernel, blocks=None, seed=4))


def test_an_output_read_after_the_same_iteration_wrote_it():
    model, kernel = compile_plan(*write_then_read(16, 32))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=5))


def test_an_output_read_before_it_is_written_is_refused():
    A = acc.Array(role=acc.Role.INPUT, shape=(16, 32), name="A")
    C = acc.Array(role=acc.Role.OUTPUT, shape=(16, 32), name="C")
    D = acc.Array(role=acc.Role.OUTPUT, shape=(16, 32), name="D")
    nest = acc.Nest(shape=(16, 32))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        D[i, j] = C[i, j] * 2.0
        C[i, j] = A[i, j] + 1.0

    plan = nest.create_schedule().create_plan(H100)
    with pytest.raises(acc.PlanError, match=r"statement 1: C is Role.OUTPUT but the nest reads C\[0, 0\] \(at i = 0, "
                                            r"j = 0\) before any iteration writes it"):
        compile_plan(plan, (A, C, D))


def _written_then_read(reads, extent: int = 4):
    """Two nests fused over the rows: Y[i, j] = 2 X[i, j], then Z[i, j] = Y[reads(i, j)] + 1 (Y OUTPUT);
    the rows on blocks, each part's columns on the block's threads."""
    X = acc.Array(role=acc.Role.INPUT, shape=(extent, 64), name="X")
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(extent, 64), name="Y")
    Z = acc.Array(role=acc.Role.OUTPUT, shape=(extent, 64), name="Z")
    first, then = acc.Nest(shape=(extent, 64)), acc.Nest(shape=(extent, 64))  # 64 columns: two warps a part
    i0, j0 = first.get_indices()
    i1, j1 = then.get_indices()

    @first.iteration_logic
    def _():
        Y[i0, j0] = X[i0, j0] * 2.0

    @then.iteration_logic
    def _():
        Z[i1, j1] = Y[reads(i1, j1)] + 1.0

    schedule = acc.fuse((first.create_schedule(), then.create_schedule()), partial=1)
    f, i, ja, jb = schedule.get_indices()
    schedule.reorder(i, f, ja, jb)
    plan = schedule.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, ja: H100.GridUnit.THREAD_X, jb: H100.GridUnit.THREAD_X})
    return plan, (X, Y, Z)


def test_an_output_one_part_writes_and_a_later_part_reads_is_accepted():
    """The second part reads the row the first wrote at the same point of the fused rows (at
    another column: another thread's element, after the barrier between the parts)."""
    from schedc.verify import emulate_function

    from .plans import compile_function_plan

    plan, args = _written_then_read(lambda i, j: (i, 63 - j))
    model, fn = compile_function_plan(plan, args)
    reports = emulate_function(model, fn, None, seed=1)
    assert reports and all(r.passed and r.early == 0 for r in reports)


@pytest.mark.gpu
def test_an_output_one_part_writes_and_a_later_part_reads_on_the_gpu(tmp_path):
    """The same on the GPU, 300 rows: the barrier between the parts makes the first part's stores
    to global memory visible to the other threads of the block."""
    from schedc.verify import run_function

    from .conftest import require_gpu
    from .plans import build

    plan, args = _written_then_read(lambda i, j: (i, 63 - j), extent=300)
    build(plan, args, "rows", tmp_path)
    require_gpu()
    reports = run_function(acc.load(tmp_path / "rows.hat").functions["rows"], seed=4)
    assert reports and all(r.passed for r in reports)


def test_an_output_a_later_part_reads_before_its_row_is_written_is_refused_with_the_element():
    """The second part reads the next row, which the first part writes at the next point only."""
    plan, args = _written_then_read(lambda i, j: (3 - i, j))
    with pytest.raises(acc.PlanError, match=r"statement 2 \(schedule 1\): Y is Role.OUTPUT but the nest reads Y\[3, 0\] "
                                            r"\(at i = 0, jb = 0\) before any iteration writes it; use Role.INPUT_OUTPUT$"):
        compile_plan(plan, args)


def test_an_output_read_at_an_earlier_iteration_of_a_sequential_nest_is_accepted():
    """Z[i, j] = Y[i, 0] + 1 after Y[i, j] = ...: (i, 0) wrote it, in this iteration or before."""
    from schedc.verify import emulate_function

    from .plans import compile_function_plan

    X = acc.Array(role=acc.Role.INPUT, shape=(4, 64), name="X")
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(4, 64), name="Y")
    Z = acc.Array(role=acc.Role.OUTPUT, shape=(4, 64), name="Z")
    nest = acc.Nest(shape=(4, 64))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i, j] = X[i, j] * 2.0
        Z[i, j] = Y[i, 0] + 1.0

    model, fn = compile_function_plan(nest.create_schedule().create_plan(H100), (X, Y, Z))
    reports = emulate_function(model, fn, None, seed=2)
    assert reports and all(r.passed and r.early == 0 for r in reports)


def test_the_first_early_read_in_the_nests_order_is_the_witness():
    """Statement 4 reads Y[16] unwritten at (0, 0), before statement 3's first early read at (0, 1)."""
    X = acc.Array(role=acc.Role.INPUT, shape=(2, 8), name="X")
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(17,), name="Y")
    Z = acc.Array(role=acc.Role.OUTPUT, shape=(2, 8), name="Z")
    W = acc.Array(role=acc.Role.OUTPUT, shape=(2, 8), name="W")
    nest = acc.Nest(shape=(2, 8))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i + 2 * j + 1] = X[i, j] * 2.0
        Y[0] = X[0, 0] * 1.0
        Z[i, j] = Y[2 * j] + 1.0
        W[i, j] = Y[16] + 1.0

    with pytest.raises(acc.PlanError, match=r"statement 4: Y is Role.OUTPUT but the nest reads Y\[16\] \(at i = 0, "
                                            r"j = 0\)"):
        compile_plan(nest.create_schedule().create_plan(H100), (X, Y, Z, W))


def _reversed_read(role):
    """Y[i] = 2 X[i], then Z[i] = Y[7 - i] + 1 (Y of ``role``): i = 0 reads Y[7], which i = 7
    writes later. The plan and its arguments (a TEMP Y is not one)."""
    X = acc.Array(role=acc.Role.INPUT, shape=(8,), name="X")
    Y = acc.Array(role=role, shape=(8,), name="Y")
    Z = acc.Array(role=acc.Role.OUTPUT, shape=(8,), name="Z")
    nest = acc.Nest(shape=(8,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i] = X[i] * 2.0
        Z[i] = Y[7 - i] + 1.0

    return nest.create_schedule().create_plan(H100), (X, Z) if role is acc.Role.TEMP else (X, Y, Z)


def test_a_temp_array_read_before_it_is_written_is_refused():
    """A TEMP array is the function's own scratch, undefined until written."""
    with pytest.raises(acc.PlanError, match=r"statement 2: Y is Role.TEMP \(the function's own scratch, undefined until "
                                            r"written\) but the nest reads Y\[7\] \(at i = 0\) before any iteration "
                                            r"writes it"):
        compile_plan(*_reversed_read(acc.Role.TEMP))


def test_the_emulation_fails_an_output_that_depends_on_a_read_before_a_write(monkeypatch):
    """With the analysis off, Z[i] = Y[7 - i] + 1 after Y[i] = 2 X[i] reads Y[7], Y[6], ... before
    i = 7, 6, ... write them: the unwritten elements are NaN in the run and the reference alike,
    and only a second reference, with another poison, tells those elements of Z apart."""
    import schedc.lower.check as check

    from .plans import compile_function_plan

    monkeypatch.setattr(check, "check_reads", lambda model: None)
    model, fn = compile_function_plan(*_reversed_read(acc.Role.OUTPUT))
    reports = {r.array: r for r in emulate_function(model, fn, None, seed=1)}
    assert reports["Y"].passed and reports["Y"].early == 0
    assert not reports["Z"].passed and reports["Z"].early == 4
    assert "4 elements depend on elements the nest read before any iteration wrote them" in str(reports["Z"])


def test_an_index_of_another_nest_is_refused():
    X = acc.Array(role=acc.Role.INPUT, shape=(4, 64), name="X")
    Z = acc.Array(role=acc.Role.OUTPUT, shape=(4, 64), name="Z")
    first, then = acc.Nest(shape=(4, 64)), acc.Nest(shape=(4, 64))
    _, j0 = first.get_indices()
    i1, j1 = then.get_indices()
    with pytest.raises(acc.NestError, match=r"Z\[i1, j1\] = X\[i1, j0\] \+ 1.0: index j0 does not belong to this nest "
                                            r"\(it is another nest's\)"):
        @then.iteration_logic
        def _():
            Z[i1, j1] = X[i1, j0] + 1.0


@pytest.mark.parametrize("pipeline", [None, {"stages": 2}, {"stages": 1}])
def test_three_dimensional_shared_tiles_are_copied_slice_by_slice(pipeline):
    """Rank-3 tiles once passed every check and failed in code generation; partial tiles in the
    leading dimension (3 batches in tiles of 2) get zero slices."""
    from schedc.codegen.cuda import emit_source
    from schedc.ir.kernel import BlockCopy, Loop
    from schedc.ir.walk import walk_statements
    from schedc.package.compile import nvrtc_compile

    model, kernel = compile_plan(*batched_cache(3, 10, pipeline))
    copies = [s for s in walk_statements(kernel.body) if isinstance(s, BlockCopy)]
    assert copies and all(len(c.shape) == 2 for c in copies)
    assert any(isinstance(s, Loop) and s.var == "A_slice0" for s in walk_statements(kernel.body))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=6))
    nvrtc_compile(emit_source([kernel], "// rank-3 tiles"), "rank3", "sm_90")


def test_three_dimensional_tiles_in_a_register_double_buffer_are_refused():
    pipeline = {"double_buffer": True, "double_buffer_location": acc.MemorySpace.PRIVATE}
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=bb, location=SHARED\): the tile .* has rank 3, copied "
                                             r"one 2-D slice at a time, but a register double buffer"):
        compile_plan(*batched_cache(3, 10, pipeline))


@pytest.mark.parametrize("pipeline", [None, {"double_buffer": True}], ids=["sequential", "cp.async"])
def test_three_dimensional_tiles_of_a_column_major_array_copy_strided_slices(pipeline):
    """A LAST_MAJOR (3, 10, 16) array: its contiguous dimension (the batch) is sliced, so each
    slice's columns are 3 elements apart in it: element by element, SRC_STEP 3."""
    from schedc.codegen.cuda import emit_source
    from schedc.ir.kernel import BlockCopy
    from schedc.ir.walk import walk_statements
    from schedc.package.compile import nvrtc_compile

    model, kernel = compile_plan(*batched_cache(3, 10, pipeline, acc.Array.Layout.LAST_MAJOR))
    copies = [s for s in walk_statements(kernel.body) if isinstance(s, BlockCopy)]
    assert copies and all(len(c.shape) == 2 and c.vector == 1 for c in copies)
    source = emit_source([kernel], "// strided slices")
    assert re.search(r"schedc::block_copy(_async)?<float, \d+, \d+, 1, \w+, \d+, \w+, 0, (false, )?3>\(", source)
    assert_passes(emulate_function(model, kernel, blocks=None, seed=6))
    nvrtc_compile(source, "rank3_strided", "sm_90")


@pytest.mark.parametrize("size, operand", [(1002, T.float16), (1002, T.float32)])
def test_tensor_plans_at_sizes_whose_rows_tensor_cores_cannot_store_in_place(size, operand):
    """samples/odd_sizes.py's plan at 1002^3: C's rows are 4008 bytes (not a multiple of 16), so
    every C tile goes through the warp's slice of shared memory; check says so."""
    import sys
    from pathlib import Path

    from schedc.codegen.cuda import emit_source
    from schedc.ir.kernel import FragmentStore
    from schedc.ir.walk import walk_statements
    from schedc.package.build import alignments
    from schedc.package.compile import nvrtc_compile
    from schedc.show import report

    sys.path.insert(0, str(Path(__file__).parents[1] / "samples"))
    from tilus_matmul import matmul

    model, kernel = compile_plan(*matmul(size, size, size, stages=3, operand=operand,
                                         instruction=acc.Instruction.WMMA))
    assert "C's tiles: every tile through shared memory (C_edge), element by element" in report("p", model, kernel)
    source = emit_source([kernel], "// C staged")
    assert "schedc::store_edge<16, 16, true>(" in source
    assert alignments(kernel)["C"] == 4  # element-wise stores: C needs no 32-byte alignment
    nvrtc_compile(source, "staged", "sm_90")
    assert_passes(emulate_function(model, kernel, blocks=[(0, 0, 0), (7, 7, 0), (3, 7, 0)], seed=7))
    # mma.sync: each lane's pairs of floats in place (1002 is even: every pair 8-byte aligned)
    model, kernel = compile_plan(*matmul(size, size, size, stages=3, operand=operand))
    assert "C's tiles: each lane's elements in place; at the edges only those inside C" in report("p", model, kernel)
    assert all(s.vector == 2 for s in walk_statements(kernel.body) if isinstance(s, FragmentStore))
    assert alignments(kernel)["C"] == 8
    assert_passes(emulate_function(model, kernel, blocks=[(0, 0, 0), (7, 7, 0)], seed=7))


def test_c_tiles_in_place_where_aligned():
    import sys
    from pathlib import Path

    from schedc.show import report

    sys.path.insert(0, str(Path(__file__).parents[1] / "samples"))
    from tilus_matmul import matmul

    model, kernel = compile_plan(*matmul(1000, 1000, 1000, stages=3, operand=T.float16,
                                         instruction=acc.Instruction.WMMA))
    assert "C's tiles: whole tiles in place; partial tiles at the edges through shared memory" in report("p", model, kernel)


def test_an_integer_constant_that_does_not_fit_its_operation_is_refused():
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.int8, shape=(4,), name="A")
    nest = acc.Nest(shape=(4,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        A[i] = A[i] + 300

    plan = nest.create_schedule().create_plan(H100)
    with pytest.raises(acc.NestError, match=r"A\[i\] \+= 300: the constant 300 does not fit int8 \(-128..127\)"):
        compile_plan(plan, (A,))


def test_integer_division_truncates_at_the_type_minimum():
    """C's -128 / 2 is -64 in int8; |-128| does not fit int8, so no abs() on the way."""
    from schedc.ir.numeric import binary

    a = np.array([-128, -128, 127, -7], dtype=np.int8)
    b = np.array([2, 3, -2, 2], dtype=np.int8)
    np.testing.assert_array_equal(binary("/", a, b, T.int8), np.array([-64, -42, -63, -3], dtype=np.int8))


@pytest.mark.parametrize("make", [lambda a, b: -a, lambda a, b: a - b, lambda a, b: a + b, lambda a, b: a / b])
def test_arithmetic_on_bool_values_is_refused(make):
    A = acc.Array(role=acc.Role.INPUT, element_type=T.bool, shape=(4,), name="A")
    B = acc.Array(role=acc.Role.INPUT, element_type=T.bool, shape=(4,), name="B")
    nest = acc.Nest(shape=(4,))
    (i,) = nest.get_indices()
    with pytest.raises(acc.NestError, match=r"on bool values: cast them to an integer type first"):
        make(A[i], B[i])
    acc.max(A[i], B[i])  # or / and stay


@pytest.mark.parametrize("pipeline", [{"double_buffer": True, "double_buffer_location": acc.MemorySpace.PRIVATE},
                                      {"stages": 3}])
def test_pipelines_prefetching_past_a_partial_tile_stay_inside_the_array(pipeline):
    """Found by the random tester: the carrier jj runs 16 iterations, but only one in the last
    tile of j (33 = 2 * 16 + 1); the prefetch of jj + 1 read A[33]. Tiles that a prefetch may
    take past the domain are bounded copies now."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(33, 1), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float64, shape=(36, 9), name="B")
    nest = acc.Nest(shape=(1, 33, 1))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, k] = A[j, k]

    schedule = nest.create_schedule()
    schedule.split(j, 16)
    plan = schedule.create_plan(H100)
    plan.cache(A, index=k, location=acc.MemorySpace.SHARED, **pipeline)
    try:
        model, kernel = compile_plan(plan, (A, B))
    except acc.CacheError as error:  # cp.async needs 4-byte rows: one float is enough
        pytest.fail(str(error))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=8))


def test_register_tiles_of_reversed_accesses_guard_both_ends():
    """Found by the random tester: B[i] = A[34 - i] with A's tile in registers; the last partial
    tile's box starts before A (A[-1]): its copies are guarded at both ends now."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(35,), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(33,), name="B")
    nest = acc.Nest(shape=(33,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] = A[34 - i]

    schedule = nest.create_schedule()
    schedule.split(i, 4)
    plan = schedule.create_plan(H100)
    plan.cache(A, index=i, location=acc.MemorySpace.PRIVATE)
    model, kernel = compile_plan(plan, (A, B))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=9))


def test_the_reference_wraps_integer_arithmetic_at_its_width():
    """Found by the random tester: A[j] = A[j] * (-3 * A[j]) four times overflows int32; the kernel
    wraps, and so must the reference."""
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.int32, shape=(1,), name="A")

    def logic(i, j):
        A[j] = A[j] * ((-3) * A[j])

    model = _model((4, 1), logic, (A,))
    values, _ = reference(model, {"A": np.array([1234])})
    expected = np.array([1234], dtype=np.int32)
    with np.errstate(over="ignore"):
        for _ in range(4):
            expected = expected * (np.int32(-3) * expected)
    np.testing.assert_array_equal(values["A"], expected.astype(np.int64))


def test_a_register_double_buffer_too_big_for_registers_is_refused():
    """Found by the random tester: one thread staging a 32x33 float64 tile (1056 elements in
    registers) made NVRTC run for minutes."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float64, shape=(36, 32), name="A",
                  layout=acc.Array.Layout.LAST_MAJOR)
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float64, shape=(1,), name="B")
    nest = acc.Nest(shape=(1, 32))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[0] += acc.min(A[i, j], A[j + 1, 0])

    schedule = nest.create_schedule()
    schedule.reorder(j, i)
    plan = schedule.create_plan(H100)
    plan.cache(A, index=i, location=acc.MemorySpace.SHARED, double_buffer=True,
               double_buffer_location=acc.MemorySpace.PRIVATE)
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=i, location=SHARED\): a register double buffer holds "
                                             r"each thread's share of the next tile: 1056 element\(s\) of the 33x32 "
                                             r"tile for each of 1 thread\(s\), 2112 registers, over 128"):
        compile_plan(plan, (A, B))


def test_the_reference_scales_integer_accumulators_as_tensor_cores_do():
    """Found on the GPU by the random tester: SCALE 0.5 on an int32 accumulator truncates the
    float32 product (C's conversion); the reference kept the half."""
    from .plans import tensor_matmul

    plan, args = tensor_matmul(48, 32, 64, operand=T.uint8, result=T.int32, mma=acc.MMAShape.M32xN8xK16_B1,
                               block=(32, 8), passes=2, b_layout=acc.Array.Layout.LAST_MAJOR, k_split=64,
                               shared_ab=True, cache_c=0, prologue_op=acc.MMAFragmentOp.SCALE, prologue_arg=0.5)
    model, kernel = compile_plan(plan, args)
    assert_passes(emulate_function(model, kernel, blocks=None, seed=0))


def test_the_reference_sets_integer_accumulators_to_their_type():
    """Found by the random tester: prologue SET 1.5 on an int32 accumulator fills 1."""
    from .plans import tensor_matmul

    plan, args = tensor_matmul(8, 32, 32, operand=T.int8, result=T.int32, mma=acc.MMAShape.M8xN32xK16_B1,
                               block=(8, 32), passes=2, b_layout=acc.Array.Layout.LAST_MAJOR,
                               prologue_op=acc.MMAFragmentOp.SET, prologue_arg=1.5)
    model, kernel = compile_plan(plan, args)
    assert_passes(emulate_function(model, kernel, blocks=None, seed=0))


def test_copies_at_loops_a_partial_tile_leaves_empty_stay_inside_the_array():
    """Found by the random tester: at i = 34 only ii = 0 runs (35 = 34 + 1), but the copy before
    iii runs for every ii and read A[52]; SIMT tiles are bounded by the loops' whole ranges now."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(52,), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(1,), name="B")
    nest = acc.Nest(shape=(35, 1))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[j] = A[i]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 34)
    iii = schedule.split(ii, 2)
    plan = schedule.create_plan(H100)
    plan.cache(A, index=iii, location=acc.MemorySpace.SHARED)
    model, kernel = compile_plan(plan, (A, B))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=10))


def test_register_tiles_of_idle_threads_under_their_guard_are_accepted():
    """Threads past the nest (i + ii >= 40) hold their tile under the guard lowering puts around
    them, so they store nothing: the plan is valid (the first check refused it)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(64, 18), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(64, 18), name="C")
    nest = acc.Nest(shape=(40, 18))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = A[i, j] + 1.0

    schedule = nest.create_schedule()
    ii = schedule.split(i, 32)
    schedule.reorder(i, ii, j)
    plan = schedule.create_plan(H100)
    plan.bind({i: G.BLOCK_X, ii: G.THREAD_X})
    plan.cache(C, index=j, location=acc.MemorySpace.PRIVATE)
    model, kernel = compile_plan(plan, (A, C))
    assert_passes(emulate_function(model, kernel, blocks=None, seed=11))


def test_a_footprint_origin_with_fractional_coefficients_is_refused_by_name():
    """Found by the random tester: A[i, 2] and A[2 - i, j] over a loop of step 2 gave isl an
    origin with a rational coefficient (an internal ValueError); refused like other origins."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.int8, shape=(3, 3), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(1,), name="B")
    nest = acc.Nest(shape=(3, 1))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[0] = acc.max(A[i, 2], A[2 - i, j])

    schedule = nest.create_schedule()
    schedule.split(i, 2)
    jj = schedule.split(j, 1)
    plan = schedule.create_plan(H100)
    plan.cache(A, index=jj, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=jj, location=SHARED\): the first element of A's "
                                             r"footprint inside jj along dimension 0"):
        compile_plan(plan, (A, B))


def test_footprints_answer_at_once_whatever_the_sizes():
    """Found by the random tester: B's footprint at i with i split 123 then 70 (313 elements)
    ran for minutes over loop values; over iteration counters it answers at once."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.int8, shape=(313,), name="A")
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.int8, shape=(315,), name="B")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.int8, shape=(316,), name="C")
    nest = acc.Nest(shape=(313,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i] = A[i] * B[i]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 123)
    schedule.split(ii, 70)
    plan = schedule.create_plan(H100)
    plan.cache(B, index=i, location=acc.MemorySpace.SHARED)
    start = time.perf_counter()
    model, kernel = compile_plan(plan, (A, B, C))
    assert time.perf_counter() - start < 5
    assert_passes(emulate_function(model, kernel, blocks=None, seed=12))
