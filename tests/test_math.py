"""Element-wise functions, comparisons and selects in the iteration logic (acc.exp, acc.select,
...): every function in every type it takes, through the emulator against the float64
reference, through NVRTC and the text check, and on the GPU; the errors a user meets."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest

import schedc as acc
from schedc import data
from schedc.codegen import cuda_printer
from schedc.codegen.text_check import check_kernel
from schedc.errors import InternalError
from schedc.ir.functions import SIGNATURES, Domain, Function, evaluate
from schedc.ir.kernel import Call, Load
from schedc.ir.walk import map_all_exprs, map_expr
from schedc.lower.wellformed import problems
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .kit import rewrite
from .plans import T, build, compile_function_plan, rows_of_threads

FLOATS = (T.float32, T.float16, T.bfloat16, T.float64)
MATH = [f for f, s in SIGNATURES.items() if s.domain is Domain.FLOAT]
POSITIVE = {Function.SQRT, Function.LOG, Function.LOG2, Function.LOG10}  # called on |x| + 0.5


def elementwise(dtype, body, shape=(16, 64), out=None):
    """C[i, j] = body(A[i, j], B[i, j], i, j): 8 x 32 threads a block."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=shape)
    B = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=shape)
    C = acc.Array(role=acc.Role.OUTPUT, element_type=out or dtype, shape=shape)
    nest = acc.Nest(*shape)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = body(A[i, j], B[i, j], i, j)

    return rows_of_threads(nest), (A, B, C)


def _apply(function: Function):
    name = function.value
    if function is Function.POW:
        return lambda a, b, i, j: acc.pow(acc.abs(a) + 0.5, b * 2.0)
    if function in POSITIVE:
        return lambda a, b, i, j: getattr(acc, name)(acc.abs(a) + 0.5)
    return lambda a, b, i, j: getattr(acc, name)(a * 2.0)


def _emulated(plan, args, name):
    model, function = compile_function_plan(plan, args, name)
    reports = emulate_function(model, function, None)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    return model, function


def every_function(dtype, shape=(16, 64)):
    """One nest: OUT<n>[i, j] = the n-th function of MATH (of A, B) for each n, in ``dtype``."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=shape)
    B = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=shape)
    outputs = [acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=shape) for _ in MATH]
    nest = acc.Nest(*shape)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        for out, function in zip(outputs, MATH):
            out[i, j] = _apply(function)(A[i, j], B[i, j], i, j)

    return rows_of_threads(nest), (A, B, *outputs)


def _passed(reports) -> None:
    """Every output within tolerance; a failure names the function it holds."""
    assert len(reports) == len(MATH)
    failed = [f"{MATH[n].value}: {r}" for n, r in enumerate(reports) if not r.passed]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_every_function_in_every_float_type_matches_the_reference_and_compiles(dtype, tmp_path):
    """The emulator against the float64 reference; NVRTC compiles the runtime's overloads and
    the text check parses each call back to the IR's function, argument and type."""
    plan, args = every_function(dtype)
    model, fn = compile_function_plan(plan, args, f"math_{dtype.value}")
    _passed(emulate_function(model, fn, None))
    calls = {(c.function, c.dtype) for s in fn.kernels[0].body for c in _calls(s)}
    assert {(f, dtype) for f in MATH} <= calls
    source = build(plan, args, f"math_{dtype.value}", tmp_path).with_suffix(".cu").read_text()
    assert all(f"schedc::{f.value}(" in source for f in MATH)


def _calls(stmt):
    from schedc.ir.walk import exprs, subexpressions, walk_statements

    return [e for s in walk_statements((stmt,)) for x in exprs(s) for e in subexpressions(x) if isinstance(e, Call)]


def test_integer_abs_compiles_and_matches(tmp_path):
    plan, args = elementwise(T.int8, lambda a, b, i, j: acc.abs(a - b) + abs(acc.cast(i - j, acc.ScalarType.int8)))
    _emulated(plan, args, "abs_int8")
    build(plan, args, "abs_int8", tmp_path)


def test_the_text_check_catches_a_wrong_function():
    plan, args = elementwise(T.float32, lambda a, b, i, j: acc.exp(a) + acc.tanh(b))
    _, fn = compile_function_plan(plan, args)
    (kernel,) = fn.kernels
    assert check_kernel(kernel) > 0
    swapped = {Function.EXP: "schedc::tanh", Function.TANH: "schedc::exp"}
    with mock.patch.object(cuda_printer, "cuda_name", lambda f: swapped.get(f, f"schedc::{f.value}")), \
            pytest.raises(InternalError, match=r"cuda text: .*\(exp float32"):
        check_kernel(kernel)


def test_the_verifier_reports_an_argument_of_another_type():
    plan, args = elementwise(T.float32, lambda a, b, i, j: acc.exp(a))
    _, fn = compile_function_plan(plan, args)
    (kernel,) = fn.kernels
    assert problems(kernel) == []

    def narrow(e):
        if isinstance(e, Call):
            return Call(e.function, tuple(Load(a.buffer, a.index, T.float16) if isinstance(a, Load) else a
                                          for a in e.args), e.dtype)
        return e

    broken = rewrite(kernel.body, lambda s: map_all_exprs(s, lambda e: map_expr(e, narrow)))
    found = problems(kernel.__class__(**{**kernel.__dict__, "body": broken}))
    assert any("argument 1 of a float32 exp is float16, not float32" in p for p in found), found


# -- comparisons, conditions and selects ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [T.float32, T.float16, T.int8, T.uint8, T.int32, T.bool], ids=str)
def test_comparisons_and_selects_in_every_type(dtype, tmp_path):
    """Every comparison (bool and narrow integers compare as int, as C++ does) chosen per
    element by select, conditions combined with & | ~ and logical_*."""
    def body(a, b, i, j):
        tests = [a < b, a <= b, a > b, a >= b, acc.equal(a, b), acc.not_equal(a, b)]
        total = acc.cast(0, acc.ScalarType.float32)
        for n, test in enumerate(tests):
            total = total + acc.select(test, float(n + 1), -1.0)
        both = acc.logical_and(tests[0], i < j) | ~acc.logical_or(tests[2], acc.equal(j, 3))
        return total + acc.select(acc.logical_not(both), 100.0, 0.0)

    plan, args = elementwise(dtype, body, out=T.float32)
    _emulated(plan, args, f"cmp_{dtype.value}")
    build(plan, args, f"cmp_{dtype.value}", tmp_path)


def test_a_select_takes_exactly_one_value_per_element():
    plan, args = elementwise(T.float32, lambda a, b, i, j: acc.select(a > b, a, b) - acc.max(a, b))
    model, fn = compile_function_plan(plan, args)
    arrays = data.inputs(fn.kernels[0].buffers, seed=3)
    reports = emulate_function(model, fn, None, seed=3)
    assert all(r.passed for r in reports)
    from schedc.reference import reference

    values, _ = reference(model, arrays)
    assert np.all(values["C"] == 0.0)


# -- the kernel's arithmetic, value by value -------------------------------------------------------


def test_16_bit_floats_compute_in_float32_and_round_once():
    x = np.array([0.7, -3.1, 10.5], dtype=T.float16.numpy)
    got = evaluate(Function.EXP, (x,), T.float16)
    assert got.dtype == T.float16.numpy
    assert np.array_equal(got, np.exp(x.astype(np.float32)).astype(T.float16.numpy))


def test_round_takes_halves_away_from_zero_and_abs_wraps_integers():
    halves = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997], dtype=np.float32)
    assert evaluate(Function.ROUND, (halves,), T.float32).tolist() == [1, 2, 3, -1, -3, 0]
    assert evaluate(Function.ABS, (np.array([-128, -3, 5], dtype=np.int8),), T.int8).tolist() == [-128, 3, 5]


def test_fast_functions_widen_the_tolerance_and_accurate_ones_do_not():
    for function, wider in ((acc.fast_exp, True), (acc.exp, False), (acc.fast_tanh, True), (acc.tanh, False)):
        plan, args = elementwise(T.float32, lambda a, b, i, j, f=function: f(a))
        model, _ = compile_function_plan(plan, args)
        tolerance = data.tolerance_for(data.precisions(model))
        assert (tolerance > data.TOLERANCES["float32"]) == wider, (function, tolerance)


# -- what a user writes wrong ---------------------------------------------------------------------


def _error_of(body, dtype=T.float32):
    with pytest.raises(acc.SchedcError) as error:
        plan, args = elementwise(dtype, body)
        compile_function_plan(plan, args)
    return str(error.value)


@pytest.mark.parametrize("body, says", [
    (lambda a, b, i, j: a if a > b else b, "acc.select(condition, a, b) for if/else"),
    (lambda a, b, i, j: max(a, b), "acc.max/acc.min"),
    (lambda a, b, i, j: a + b if a and b else a, "acc.logical_and/logical_or/logical_not"),
    (lambda a, b, i, j: acc.exp(acc.cast(i, acc.ScalarType.int32)),
     "acc.exp takes floating-point values, not int32: cast them first"),
    (lambda a, b, i, j: acc.select(a == b, a, b), "the condition is a Python bool"),
    (lambda a, b, i, j: ~a, "'~' of a value that is not a bool"),
    (lambda a, b, i, j: a & b, "'&' of values that are not bools"),
    (lambda a, b, i, j: math.exp(a), "the math module need one. Use acc.cast(x, type) to convert, and acc's functions"),
    (lambda a, b, i, j: np.exp(a), "np.exp(A[i, j]): numpy's functions compute on numbers, not on the iteration "
                                   "logic's values: use acc.exp"),
    (lambda a, b, i, j: np.minimum(a, 1.0), "use acc.min"),
    (lambda a, b, i, j: float(a) + 1.0, "Python's float(), int() and the math module need one"),
    (lambda a, b, i, j: round(a), "Python's round() needs a number: use acc.round"),
    (lambda a, b, i, j: math.floor(a), "math.floor needs a number: use acc.floor"),
], ids=["if", "max", "and", "exp of int", "python ==", "invert", "bitwise and", "math.exp", "np.exp", "np.minimum",
        "float()", "round()", "math.floor"])
def test_python_control_flow_and_wrong_types_name_the_function_to_use(body, says):
    assert says in _error_of(body)


def test_a_weak_function_takes_the_type_of_its_array_and_refuses_an_integer_one():
    plan, args = elementwise(T.float16, lambda a, b, i, j: a * acc.sqrt(2.0))
    _emulated(plan, args, "weak")
    message = _error_of(lambda a, b, i, j: a + acc.sqrt(2.0), dtype=T.int32)
    assert "acc.sqrt takes floating-point values, not int32" in message


def test_an_index_in_a_function_takes_the_statements_float_type():
    """exp(i) and sqrt of a constant: the index converts to the statement's float32 (as in
    ``X[i, j] * i``), unlike an integer array's values, which need their cast."""
    plan, args = elementwise(T.float32, lambda a, b, i, j: a * 0.0 + acc.exp(i * 0.125) + acc.sqrt(j))
    _emulated(plan, args, "index")


@pytest.mark.parametrize("dtype", [T.uint64, T.int32, T.int64], ids=str)
def test_wrapping_integer_arithmetic_matches_the_reference(dtype):
    """A - B and A * B wrap at the type's width: uint64 results past 2^63 are compared as uint64
    (the reference holds them in int64: a false mismatch of 1.8e19 before), and int32/int64 are
    computed on their unsigned types in the CUDA text (signed overflow is undefined in C++)."""
    plan, args = elementwise(dtype, lambda a, b, i, j: a - b * b)
    _emulated(plan, args, "wraps")


def test_abs_and_pow_operators():
    plan, args = elementwise(T.float32, lambda a, b, i, j: abs(a) ** 2.0 - 2.0 ** b)
    model, fn = _emulated(plan, args, "ops")
    calls = {c.function for s in fn.kernels[0].body for c in _calls(s)}
    assert calls == {Function.ABS, Function.POW}


# -- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_every_function_on_the_gpu(dtype, tmp_path):
    plan, args = every_function(dtype, shape=(64, 256))
    build(plan, args, "math", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "math.hat").functions["math"], seed=5))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [T.float32, T.float16, T.int8, T.bool], ids=str)
def test_comparisons_on_the_gpu(dtype, tmp_path):
    def body(a, b, i, j):
        return acc.select(acc.logical_and(a < b, i <= j), 1.0, 0.0) + acc.select(acc.not_equal(a, b), 2.0, -2.0)

    plan, args = elementwise(dtype, body, out=T.float32)
    build(plan, args, "cmp", tmp_path)
    require_gpu()
    fn = acc.load(tmp_path / "cmp.hat").functions["cmp"]
    reports = run_function(fn, seed=5)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


# -- the numpy table against an independent oracle (the emulator and the reference share it) ------

_ORACLE = {Function.ABS: abs, Function.SQRT: math.sqrt, Function.EXP: math.exp, Function.FAST_EXP: math.exp,
           Function.FAST_EXP2: lambda x: 2.0 ** x,
           Function.LOG: math.log, Function.LOG2: math.log2, Function.LOG10: math.log10, Function.SIN: math.sin,
           Function.COS: math.cos, Function.TAN: math.tan, Function.SINH: math.sinh, Function.COSH: math.cosh,
           Function.TANH: math.tanh, Function.FAST_TANH: math.tanh, Function.SIGMOID: lambda x: 1 / (1 + math.exp(-x)), Function.ERF: math.erf,
           Function.FLOOR: math.floor, Function.CEIL: math.ceil,
           Function.ROUND: lambda x: math.copysign(math.floor(abs(x) + 0.5), x)}


@pytest.mark.parametrize("function", sorted(_ORACLE, key=str), ids=str)
def test_each_function_computes_what_python_math_does(function):
    points = [0.3, 1.7, 2.5, 0.5, 3.25]
    got = evaluate(function, (np.array(points),), T.float64, wide=True)
    assert got.tolist() == pytest.approx([_ORACLE[function](x) for x in points], rel=1e-15)
    assert evaluate(Function.POW, (np.array([1.5]), np.array([3.0])), T.float64, wide=True).tolist() == [3.375]


def test_an_integer_compared_with_a_float_constant_is_compared_in_float32():
    """A[i] < 2.5 on int32 values meets as arithmetic does (float32), not as A[i] < 2."""
    plan, args = elementwise(T.int32, lambda a, b, i, j: acc.select(a < 2.5, 1.0, 0.0), out=T.float32)
    model, fn = compile_function_plan(plan, args)
    from schedc.reference import reference

    arrays = data.inputs(fn.kernels[0].buffers, seed=2)
    values, _ = reference(model, arrays)
    assert np.array_equal(values["C"], np.where(arrays["A"] < 2.5, 1.0, 0.0))
    assert np.any(arrays["A"] == 2)  # the value that tells 2.5 from 2
