"""The float64 reference against plain Python loops, and poly's facts against enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc import data, poly
from schedc.ir.affine import Affine
from schedc.reference import block_dims, reference

from .plans import H100, T, compile_plan, elementwise, matmul_arrays, simt_matmul


def _model(nest, args, bind=None):
    plan = nest.create_schedule().create_plan(H100)
    i = nest.get_indices()[0]
    plan.bind(bind or {i: H100.GridUnit.BLOCK_X})
    return compile_plan(plan, args)[0]


def test_contraction_matches_loops():
    nest, args = matmul_arrays(5, 7, 3)
    model = _model(nest, args)
    arrays = data.inputs(model.buffers, seed=3)
    values, touched = reference(model, arrays)
    A, B, C = (np.asarray(arrays[n], dtype=np.float64) for n in "ABC")
    for i, j in itertools.product(range(5), range(7)):
        for k in range(3):
            C[i, j] += A[i, k] * B[k, j]
    assert np.allclose(values["C"], C) and touched["C"].all()


def test_sequential_statements_and_last_write():
    """Several statements run in order at each point; ``=`` over a reduction keeps the last."""
    A = acc.Array(role=acc.Role.INPUT, shape=(4, 6), name="A")
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,), name="S")
    L = acc.Array(role=acc.Role.OUTPUT, shape=(4,), element_type=T.int32, name="L")
    nest = acc.Nest(4, 6)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[i] += A[i, j] * S[i]
        L[i] = acc.cast(A[i, j] * 10.0, T.int32)

    model = _model(nest, (A, S, L))
    arrays = data.inputs(model.buffers, seed=4)
    values, _ = reference(model, arrays)
    a, s = np.asarray(arrays["A"], np.float64), np.asarray(arrays["S"], np.float64)
    last = np.zeros(4)
    for i_, j_ in itertools.product(range(4), range(6)):
        s[i_] += a[i_, j_] * s[i_]
        last[i_] = np.trunc(a[i_, j_] * 10.0)
    assert np.allclose(values["S"], s) and np.array_equal(values["L"], last)


def test_an_integer_sum_wraps_at_its_types_width_as_each_step_does():
    """C[i, j] += A[i, k] * B[k, j] in int8, sums far past int8's range: the contraction's result
    is what adding and wrapping at each step gives."""
    nest, args = matmul_arrays(4, 5, 300, operand=T.int8, result=T.int8)
    model = _model(nest, args)
    arrays = data.inputs(model.buffers, seed=6)
    values, _ = reference(model, arrays)
    A, B, C = (np.asarray(arrays[n], dtype=np.int8) for n in "ABC")
    expected = C.copy()
    for k in range(300):
        expected = (expected.astype(np.int64) + A[:, k:k + 1].astype(np.int64) * B[k].astype(np.int64)) \
            .astype(np.int8)
    assert np.abs(values["C"]).max() <= 128 and np.array_equal(values["C"], expected)


def test_a_float32_value_truncated_to_an_integer_is_the_float32_one():
    """cast(X * 300.0, int16) with X = -0.76f: float32's product is -228.0 exactly (what the kernel
    truncates), float64's -227.9999971...: the reference truncates the float32 value."""
    X = acc.Array(role=acc.Role.INPUT, shape=(2,), name="X")
    Q = acc.Array(role=acc.Role.OUTPUT, shape=(2,), element_type=T.int16, name="Q")
    nest = acc.Nest(2)
    (i,) = nest.get_indices()
    nest.iteration_logic(lambda: Q.__setitem__(i, acc.cast(X[i] * 300.0, T.int16)))
    model = _model(nest, (X, Q))
    values, _ = reference(model, {"X": np.array([-0.76, 0.5], dtype=np.float32), "Q": np.zeros(2, np.int16)})
    assert values["Q"].tolist() == [-228, 150]


def test_terms_independent_of_a_summed_dimension_repeat():
    A = acc.Array(role=acc.Role.INPUT, shape=(3,), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(3,), name="C")
    nest = acc.Nest(3, 5)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__(i, C[i] + A[i]))
    model = _model(nest, (A, C))
    arrays = data.inputs(model.buffers, seed=5)
    values, _ = reference(model, arrays)
    assert np.allclose(values["C"], np.asarray(arrays["C"], np.float64) + 5 * np.asarray(arrays["A"], np.float64))


def test_elementwise_reference_and_block_coverage():
    model, kernel = compile_plan(*elementwise(40, 96))
    facts = poly.analyze(model)
    dims = block_dims(model, facts, (2, 4, 0))  # the grid is (3, 5): block x=2 is the last one
    assert list(dims["i"]) == list(range(32, 40)) and list(dims["j"]) == list(range(64, 96))


@st.composite
def split_chains(draw):
    extent = draw(st.integers(1, 40))
    sizes = []
    step = 1
    for _ in range(draw(st.integers(0, 3))):
        size = draw(st.integers(1, 8)) * step
        if size > extent:
            break
        sizes.append(size)
        step = size
    return extent, sizes


@settings(max_examples=60, deadline=None)
@given(split_chains(), st.integers(1, 6))
def test_domain_facts_match_enumeration(chain, other):
    """Loop ranges and guards from isl describe exactly the points of the split nest."""
    extent, sizes = chain
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(extent, other))
    nest = acc.Nest(extent, other)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: A.__setitem__((i, j), A[i, j] + 1.0))
    s = nest.create_schedule()
    outer = i
    for size in sizes:
        s.split(outer, size)  # the outer index keeps splitting, each step coarser
    model = compile_plan(s.create_plan(H100), (A,))[0]
    facts = poly.analyze(model)
    loops = [lp for lp in model.loops]
    ranges = [range(lp.begin, lp.end, lp.step) for lp in loops]
    points = []
    for values in itertools.product(*ranges):
        env = dict(zip((lp.name for lp in loops), values))
        if all(g.affine.evaluate(env) >= 0 if not g.equality else g.affine.evaluate(env) == 0
               for g in facts.guards):
            points.append(env)
    nest_points = sorted((sum(p[lp.name] for lp in loops if lp.dim == 0),
                          sum(p[lp.name] for lp in loops if lp.dim == 1)) for p in points)
    assert nest_points == sorted(itertools.product(range(extent), range(other)))
    for lp in facts.loops:
        taken = [p[lp.name] for p in points]
        assert (lp.first, lp.last) == (min(taken), max(taken))


def test_access_relations_are_read_back_from_isl():
    model, _ = compile_plan(*simt_matmul(64, 32, 16, block=(16, 8)))
    facts = poly.analyze(model)
    a = next(x for x in facts.accesses if x.array == "A")
    assert a.subscripts == (Affine.make({"i": 1, "ii": 1}), Affine.make({"k": 1}))


@st.composite
def strided_nests(draw):
    M, K = draw(st.integers(1, 20)), draw(st.integers(1, 12))
    a, b = draw(st.integers(1, 3)), draw(st.integers(0, 2))  # A[a*i + b, k]
    bi = draw(st.integers(1, M))
    bk = draw(st.integers(1, K))
    transposed = draw(st.booleans())
    return M, K, a, b, bi, bk, transposed


@settings(max_examples=50, deadline=None)
@given(strided_nests(), st.integers(0, 3))
def test_footprints_match_enumeration(params, cut):
    """The box's origin and extents bound exactly the elements touched inside each loop, and
    "exact" means every element of the box is touched (strides leave holes)."""
    M, K, a, b, bi, bk, transposed = params
    layout = acc.Array.Layout.LAST_MAJOR if transposed else acc.Array.Layout.FIRST_MAJOR
    A = acc.Array(role=acc.Role.INPUT, shape=(a * (M - 1) + b + 1, K), layout=layout, name="A")
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M,), name="S")
    nest = acc.Nest(M, K)
    i, k = nest.get_indices()
    nest.iteration_logic(lambda: S.__setitem__(i, S[i] + A[a * i + b, k]))
    s = nest.create_schedule()
    ii, kk = s.split(i, bi), s.split(k, bk)
    s.reorder(i, k, ii, kk)
    model = compile_plan(s.create_plan(H100), (A, S))[0]
    loops = [lp.name for lp in model.loops]
    index = loops[min(cut, len(loops) - 1)]
    fp = poly.footprint(model, "A", index)
    position = loops.index(index)
    facts = poly.analyze(model)
    touched: dict[tuple, set] = {}
    for values in itertools.product(*(range(lp.begin, lp.end, lp.step) for lp in model.loops)):
        env = dict(zip(loops, values))
        if not all(g.affine.evaluate(env) >= 0 for g in facts.guards):
            continue
        outer = tuple(values[:position])
        row = a * (env[i.name] + env[ii.name]) + b
        touched.setdefault(outer, set()).add((row, env[k.name] + env[kk.name]))
    covered = []
    for outer, elements in touched.items():
        env = dict(zip(loops[:position], outer))
        origin = [o.evaluate(env) for o in fp.origin]
        assert all(origin[d] <= e[d] < origin[d] + fp.extents[d] for e in elements for d in range(2))
        box = {(r, c) for r in range(origin[0], origin[0] + fp.extents[0])
               for c in range(origin[1], origin[1] + fp.extents[1])
               if r < A.shape[0] and c < A.shape[1]}
        covered.append(box == elements)
    assert fp.exact == all(covered)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_views_and_gathers_agree(di, dj, transposed):
    """Subscripts ``d + c`` over consecutive values are read and written through slices (views);
    the same nest evaluated through integer gathers gives the same values."""
    import schedc.reference as ref

    M, N = 6, 5
    A = acc.Array(role=acc.Role.INPUT, shape=(M + di, N + dj), name="A")
    C = acc.Array(role=acc.Role.OUTPUT, shape=(N, M) if transposed else (M, N), name="C")
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        if transposed:
            C[j, i] = A[i + di, j + dj] * 2.0 + A[i, j]
        else:
            C[i, j] = A[i + di, j + dj] * 2.0 + A[i, j]

    model = _model(nest, (A, C))
    arrays = data.inputs(model.buffers, seed=6)
    through_views, touched = reference(model, arrays)
    original = ref._slices
    try:
        ref._slices = lambda affines, dims: None
        through_gathers, _ = reference(model, arrays)
    finally:
        ref._slices = original
    a = np.asarray(arrays["A"], np.float64)
    want = a[di:di + M, dj:dj + N] * 2.0 + a[:M, :N]
    assert np.array_equal(through_views["C"], want.T if transposed else want)
    assert np.array_equal(through_gathers["C"], through_views["C"]) and touched["C"].all()


def test_slices_only_for_unit_steps_over_consecutive_values():
    from schedc.reference import _slices

    i, j = Affine.make({"i": 1}), Affine.make({"j": 1}, 2)
    dims = {"i": np.arange(3, 7), "j": np.arange(0, 4)}
    assert _slices([i, j], dims) == ((slice(3, 7), slice(2, 6)), ("i", "j"))
    assert _slices([j, i], dims) == ((slice(2, 6), slice(3, 7)), ("j", "i"))
    assert _slices([Affine.make({"i": 2})], dims) is None  # stride 2
    assert _slices([Affine.make({"i": 1, "j": 1})], dims) is None  # two dimensions
    assert _slices([i, i], dims) is None  # a diagonal
    assert _slices([i], {"i": np.array([0, 2, 4])}) is None  # a sampled block's values
    assert _slices([Affine.make({"i": 1}, -4)], dims) is None  # would start before the array


@pytest.mark.parametrize("dtype", [T.float16, T.bfloat16])
def test_sixteen_bit_arithmetic_rounds_as_the_kernel_does(dtype):
    """``C[i] = i - (A[i] + i)`` with float16 A: the sum is a float16 operation, rounded to it
    (spacing 1/16 near 100), so the result is not the float64 ``-A[i]`` but ``i - fp16(A[i] + i)``
    (found by the GPU random tester: a relative error of 7e-3 against float64, over float16's
    5e-3). A tensorized nest's products stay exact."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(111,), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float64, shape=(111,), name="C")
    nest = acc.Nest(111)
    i, = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i] = i - (A[i] + i)

    model = _model(nest, (A, C))
    arrays = data.inputs(model.buffers, seed=1)
    values, _ = reference(model, arrays)
    a = np.asarray(arrays["A"]).astype(dtype.numpy)
    index = np.arange(111).astype(dtype.numpy)
    expected = (index - (a + index)).astype(np.float64)
    assert np.array_equal(values["C"], expected)
    assert not np.allclose(values["C"], -a.astype(np.float64), rtol=0, atol=1e-4)


@pytest.mark.parametrize("dtype, K, expected", [
    (T.float16, 64, 5e-3), (T.float16, 4096, 4e-2), (T.bfloat16, 1024, 1.2e-1), (T.float32, 4096, 1e-5)])
def test_a_sum_kept_in_a_16_bit_float_is_allowed_an_error_growing_with_its_terms(dtype, K, expected):
    """The kernel rounds a 16-bit sum at each step (the emulator and the GPU agree), the reference
    sums exactly: the tolerance grows as the square root of the terms past 64."""
    nest, args = matmul_arrays(4, 8, K, operand=dtype, result=dtype)
    model = _model(nest, args)
    assert data.tolerance_for(data.precisions(model)) == pytest.approx(expected)


def test_each_output_is_checked_at_the_precision_of_what_computes_it():
    """One statement's bfloat16 result does not loosen another's int8 one; a float16 array read
    into float32 arithmetic is checked at float32's tolerance (the load is exact)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(8,), name="X")
    N = acc.Array(role=acc.Role.INPUT, element_type=T.int8, shape=(8,), name="N")
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(8,), name="Y")
    Q = acc.Array(role=acc.Role.OUTPUT, element_type=T.int8, shape=(8,), name="Q")
    Z = acc.Array(role=acc.Role.OUTPUT, element_type=T.bfloat16, shape=(8,), name="Z")
    nest = acc.Nest(8)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i] = acc.cast(X[i], T.float32) * 3.0
        Q[i] = N[i] * 2
        Z[i] = acc.cast(acc.cast(X[i], T.float32) * 0.5, T.bfloat16)

    model = _model(nest, (X, N, Y, Q, Z))
    tolerances = {name: data.tolerance_for(data.precisions(model, name)) for name in "YQZ"}
    assert tolerances == {"Y": 1e-5, "Q": 0.0, "Z": 3e-2}
    assert data.tolerance_for(data.precisions(model)) == 3e-2  # the whole function's, as before
