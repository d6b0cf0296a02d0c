"""What kernel-IR operators compute, on numpy values, with C's semantics.

Shared by the emulator (in the kernel's element types) and the reference (in float64/int64):
integer division truncates toward zero, ``%`` keeps the dividend's sign, and max/min are C's
``b > a ? b : a``.

>>> import numpy as np
>>> binary("/", np.array([-7, 7]), np.array([2, -2]), None)
array([-3, -3])
>>> binary("/", np.array([-128, -127], dtype=np.int8), np.array([2, 2], dtype=np.int8), None)
array([-64, -63], dtype=int8)
>>> binary("%", np.array([-7, 7]), np.array([2, -2]), None)
array([-1,  1])
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from .types import FloatFormat, ScalarType, is_float_dtype

_SIMPLE = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "%": np.fmod, "<": np.less,
    "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
    "&&": np.logical_and, "||": np.logical_or,
}


def binary(op: str, a, b, dtype: ScalarType | None):
    """``a op b``; ``dtype`` is the operation's type (None: index arithmetic)."""
    if op in _SIMPLE:
        return _SIMPLE[op](a, b)
    if op == "/":
        if dtype is not None and dtype.is_float:
            with np.errstate(divide="ignore", invalid="ignore"):  # inf and NaN, as on the GPU
                return a / b
        quotient = np.floor_divide(a, b)  # no abs(): |MIN| does not fit its type
        inexact = (a - quotient * b) != 0
        return (quotient + (inexact & ((a < 0) != (b < 0)))).astype(np.result_type(a, b))
    if op == "max":
        return np.where(b > a, b, a)
    if op == "min":
        return np.where(b < a, b, a)
    raise TypeError(f"unknown operator {op}")


def saturate(x, dtype: ScalarType) -> np.ndarray:
    """Floating-point values converted to an integer type as the kernels convert them: toward
    zero, clamped to the type's range, NaN to 0 (cvt.rzi; C++ leaves values out of range
    undefined).

    >>> saturate(np.array([1e10, -1e10, -2.7, np.nan]), ScalarType.int32).tolist()
    [2147483647, -2147483648, -2, 0]
    >>> saturate(np.array([300.0, -1.0]), ScalarType.uint8).tolist()
    [255, 0]
    """
    info = np.iinfo(dtype.numpy)
    t = np.trunc(np.asarray(x, dtype=np.float64))
    high, low = t >= float(info.max), t <= float(info.min)
    inside = np.where(high | low | np.isnan(t), 0.0, t).astype(dtype.numpy)
    top, bottom = dtype.numpy.type(info.max), dtype.numpy.type(info.min)
    return np.where(high, top, np.where(low, bottom, inside)).astype(dtype.numpy)


def round_exact(x: Fraction, form: FloatFormat) -> float:
    """The exact real ``x`` rounded once to the nearest value of ``form``, ties to even (IEEE's
    roundTiesToEven, as C++ rounds literals and CUDA converts a double: ``__double2bfloat16``,
    ``__double2half``, ``cvt.rn``); past the largest finite value, infinity (NaN for a format
    without infinities). schedc's rule for what a constant means in a type; ``rounded`` is its
    fast form for arrays of doubles.

    >>> round_exact(Fraction(1) + Fraction(1, 2**8), ScalarType.bfloat16.float_format)  # a tie: to even
    1.0
    >>> round_exact(Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**30), ScalarType.bfloat16.float_format)
    1.0078125
    """
    if x == 0:
        return 0.0
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    ulp = Fraction(2) ** (max(e, form.min_exponent) - form.precision + 1)
    n, rest = divmod(a, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2):
        n += 1
    value = n * ulp
    if value > Fraction(form.largest):
        return math.copysign(math.inf, x) if form.infinities else math.nan
    return -float(value) if x < 0 else float(value)  # a negative value that rounds to zero: -0.0


def rounded(x, dtype: ScalarType) -> np.ndarray:
    """Real values (floats or integers) rounded once to the float type ``dtype`` by
    ``round_exact``'s rule, as an array of ``dtype``: NaN stays NaN, zeros keep their sign,
    infinities stay (NaN in float8_e4m3). The emulator's stores and casts, the constants of the
    kernel IR and the reference all round by it, whatever numpy or ml_dtypes do with a double.

    >>> rounded(np.array([1 + 2**-8, 1 + 2**-8 + 2**-30, -1e39, 500.0]), ScalarType.bfloat16).tolist()
    [1.0, 1.0078125, -inf, 500.0]
    >>> rounded(np.array([464.0, 480.0]), ScalarType.float8_e4m3).astype(float).tolist()
    [448.0, nan]
    """
    x = np.asarray(x)
    if (is_float_dtype(x.dtype) and x.dtype.itemsize <= 4) or dtype.size >= 4:
        return _from_float32(x, dtype)  # one rounding: float32 values (or narrower), or into float32 or double
    return _from_float32(_odd_float32(np.asarray(x, dtype=np.float64)), dtype)


def _from_float32(x: np.ndarray, dtype: ScalarType) -> np.ndarray:
    """Values exact in float32, or doubles into a type of four bytes or more, rounded to the
    nearest value of ``dtype`` (numpy and ml_dtypes convert these by roundTiesToEven: the
    test of ``rounded`` holds them to it at every tie)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = x.astype(dtype.numpy)
    if dtype.size == 1:  # ml_dtypes gives +0 for a negative value that rounds to zero: the sign kept
        out = np.where((out == 0) & (x < 0), np.array(-0.0, dtype=dtype.numpy), out)
    form = dtype.float_format
    if form.infinities:
        return out
    # no infinities: past the midpoint above the largest value (whose last bit is even) is NaN
    limit = form.largest + 2.0 ** (form.max_exponent - form.precision)
    return np.where(np.abs(x.astype(np.float64)) > limit, np.nan, out).astype(dtype.numpy)


def _odd_float32(x: np.ndarray) -> np.ndarray:
    """Doubles rounded to float32 by round-to-odd: toward zero, the last bit set where the
    double was not exact. A type of at most 16 significand bits then rounds it to the double's
    own nearest value (the extra bits keep the tie and the sticky bit apart)."""
    with np.errstate(over="ignore", invalid="ignore"):
        single = x.astype(np.float32)
        back = single.astype(np.float64)
    bits = single.view(np.uint32).copy()
    bits -= (np.abs(back) > np.abs(x)).astype(np.uint32)  # rounded away from zero: one step back
    bits |= ((back != x) & ~np.isnan(x)).astype(np.uint32)
    return bits.view(np.float32)


def constant(value, dtype: ScalarType):
    """What a kernel-IR constant ``Const(value, dtype)`` means: a numpy scalar of ``dtype``,
    a float rounded by ``rounded``.

    >>> float(constant(1 + 2**-8 + 2**-30, ScalarType.bfloat16)), constant(7, ScalarType.int8)
    (1.0078125, np.int8(7))
    """
    if dtype.is_float:
        return _float_constant(float(value).hex(), dtype)  # the hex text keeps -0.0 and 0.0 apart
    return dtype.numpy.type(value)


@functools.lru_cache(maxsize=4096)
def _float_constant(text: str, dtype: ScalarType):
    """A float constant's value, computed once (the emulator evaluates a constant at every step)."""
    return rounded(float.fromhex(text), dtype)[()]


def to_float8(x, dtype: ScalarType) -> np.ndarray:
    """Values converted to an 8-bit float type as the kernels convert them (cuda_fp8.h's
    ``__NV_SATFINITE``): to nearest, ties to even, beyond the largest finite value (infinities
    too) to it; NaN stays NaN.

    >>> to_float8(np.array([1000.0, -np.inf, 0.3, np.nan]), ScalarType.float8_e4m3).astype(float).tolist()
    [448.0, -448.0, 0.3125, nan]
    """
    x = np.asarray(x)
    if x.dtype.kind != "f":  # integers, bfloat16, the 8-bit floats themselves: through float64 (exact)
        x = x.astype(np.float64)
    largest = dtype.float_format.largest
    return rounded(np.clip(x, -largest, largest), dtype)


def converted(value, dtype: ScalarType) -> np.ndarray:
    """Values converted to ``dtype`` as the kernels' ``schedc::convert`` converts them: floats to
    integers saturating (``saturate``), to 8-bit floats saturating (``to_float8``), to bool by
    != 0, the rest as C++ converts.

    >>> converted(np.array([1000.0, -3.7]), ScalarType.int8).tolist()
    [127, -3]
    """
    value = np.asarray(value)
    if dtype is ScalarType.bool:
        return value != 0
    if dtype.is_integer and is_float_dtype(value.dtype):
        return saturate(value, dtype)
    if dtype.arithmetic is not dtype:  # an 8-bit float: saturating
        return to_float8(value, dtype)
    if dtype.is_float:
        return rounded(value, dtype)
    return value.astype(dtype.numpy)


def strided_view(array: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """``np.lib.stride_tricks.as_strided`` (byte ``strides``), also for ml_dtypes' types, whose
    arrays numpy strides as their bits (it does not understand float8_e5m2's '<f1')."""
    if array.dtype.isbuiltin == 2:
        bits = np.lib.stride_tricks.as_strided(array.view(f"u{array.itemsize}"), shape, strides)
        return bits.view(array.dtype)
    return np.lib.stride_tricks.as_strided(array, shape, strides)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 → tf32 (10 mantissa bits), to nearest with ties away from zero, as cvt.rna.tf32."""
    bits = x.view(np.uint32)
    finite = np.isfinite(x)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(finite, rounded, x)
