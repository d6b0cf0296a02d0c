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

import ml_dtypes
import numpy as np

from .types import ScalarType, is_float_dtype

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
    largest = float(ml_dtypes.finfo(dtype.numpy).max)
    return np.clip(x, -largest, largest).astype(dtype.numpy)


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
