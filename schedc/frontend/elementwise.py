"""Accera's element-wise functions of the iteration logic: ``acc.exp(A[i])``,
``acc.select(A[i] > 0, A[i], 0.0)``, ``acc.logical_and(...)``.

Math takes floating-point values (16-bit floats are computed in float32 and rounded, as CUDA's
half functions do; integers must be cast first); ``abs`` takes any number. Comparisons are the
operators ``<``, ``<=``, ``>``, ``>=`` and the functions ``equal``/``not_equal`` (Python's ``==``
compares objects); conditions combine with ``logical_and``/``logical_or``/``logical_not`` (or
``&``, ``|``, ``~`` on conditions). ``select(cond, a, b)`` computes both values and keeps one per
element. ``fast_exp`` is CUDA's ``__expf`` (faster, 2 + 1.17|x| ulps), ``fast_exp2`` the ``ex2.approx``
instruction (2^x) and ``fast_tanh`` the
``tanh.approx.f32`` instruction (one instruction, relative error below 2^-10.987: half a
float16 step); every other function is CUDA's accurate one.

>>> import numpy as np
>>> import schedc as acc
>>> A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(8,))
>>> B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(8,))
>>> nest = acc.Nest(shape=(8,))
>>> i, = nest.get_indices()
>>> @nest.iteration_logic
... def _():
...     B[i] = acc.select(A[i] > 0.0, acc.exp(A[i]), acc.tanh(A[i]) * 2.0)
>>> str(nest.statements[0])
'B[i] = select(A[i] > 0.0, exp(A[i]), tanh(A[i]) * 2.0)'
>>> acc.exp(acc.cast(i, acc.ScalarType.int32))
Traceback (most recent call last):
...
schedc.errors.NestError: acc.exp(cast(i, int32)): acc.exp takes floating-point values, not int32: cast them first, ...
"""

from __future__ import annotations

from ..ir.functions import Function
from .expr import Expr, call, compare, logical


def abs(x: object) -> Expr:  # noqa: A001 - Accera's acc.abs
    """|x| of any number (integers: as C's, the most negative value stays itself)."""
    return call(Function.ABS, x)


def sqrt(x: object) -> Expr:
    return call(Function.SQRT, x)


def exp(x: object) -> Expr:
    return call(Function.EXP, x)


def fast_exp(x: object) -> Expr:
    """e^x by CUDA's fast intrinsic ``__expf`` (error 2 + floor(1.173 |x|) ulps)."""
    return call(Function.FAST_EXP, x)


def fast_exp2(x: object) -> Expr:
    """2^x by the GPU's ``ex2.approx.ftz.f32`` instruction (exp2f's 2 ulps; results below float32's
    normal range are 0). An online softmax's ``fast_exp`` is computed with it, log2(e) folded into
    the constants of its argument (``schedc/lower/online.py``)."""
    return call(Function.FAST_EXP2, x)


def fast_tanh(x: object) -> Expr:
    """tanh(x) by the GPU's ``tanh.approx.f32`` instruction (relative error below 2^-10.987, about
    4100 float32 ulps: for values leaving as 16-bit floats, or a GELU's ``tanh`` form)."""
    return call(Function.FAST_TANH, x)


def log(x: object) -> Expr:
    return call(Function.LOG, x)


def log2(x: object) -> Expr:
    return call(Function.LOG2, x)


def log10(x: object) -> Expr:
    return call(Function.LOG10, x)


def sin(x: object) -> Expr:
    return call(Function.SIN, x)


def cos(x: object) -> Expr:
    return call(Function.COS, x)


def tan(x: object) -> Expr:
    return call(Function.TAN, x)


def sinh(x: object) -> Expr:
    return call(Function.SINH, x)


def cosh(x: object) -> Expr:
    return call(Function.COSH, x)


def tanh(x: object) -> Expr:
    return call(Function.TANH, x)


def sigmoid(x: object) -> Expr:
    """1 / (1 + e^-x)."""
    return call(Function.SIGMOID, x)


def erf(x: object) -> Expr:
    return call(Function.ERF, x)


def floor(x: object) -> Expr:
    return call(Function.FLOOR, x)


def ceil(x: object) -> Expr:
    return call(Function.CEIL, x)


def round(x: object) -> Expr:  # noqa: A001 - Accera's acc.round
    """To the nearest integer value, halves away from zero (C's round), in x's type."""
    return call(Function.ROUND, x)


def pow(x: object, y: object) -> Expr:  # noqa: A001 - Accera's acc.pow
    """x^y (also written ``x ** y``)."""
    return call(Function.POW, x, y)


def select(condition: object, a: object, b: object) -> Expr:
    """``a`` where ``condition`` holds, else ``b`` (C's ``condition ? a : b``; both are computed)."""
    return call(Function.SELECT, condition, a, b)


def logical_and(a: object, b: object) -> Expr:
    return logical("&&", a, b)


def logical_or(a: object, b: object) -> Expr:
    return logical("||", a, b)


def logical_not(a: object) -> Expr:
    return call(Function.LOGICAL_NOT, a)


def equal(a: object, b: object) -> Expr:
    """``a == b`` as a condition (Python's ``==`` compares the objects themselves)."""
    return compare("==", a, b)


def not_equal(a: object, b: object) -> Expr:
    return compare("!=", a, b)

