"""The element-wise functions of the iteration logic (``acc.exp``, ``acc.select``, ...): one row
per function with everything each stage needs to know of it.

A function's row says how many arguments it takes, which element types it accepts, its
CUDA spelling (``schedc::<name>`` in the runtime header, overloaded per type: 16-bit floats
computed in float32, as CUDA's own half functions are), and its error on the GPU beyond a
correctly rounded result (CUDA's documented maximum ulp error of the float32 function), which
the verification's tolerance table adds. ``evaluate`` computes a function on numpy values as
the kernel does (in the element type; 16-bit floats in float32, then rounded) or, with
``wide=True``, as the float64 reference does.

>>> import numpy as np
>>> evaluate(Function.ROUND, (np.array([0.5, -2.5, 0.49999997], dtype=np.float32),), ScalarType.float32).tolist()
[1.0, -3.0, 0.0]
>>> evaluate(Function.SIGMOID, (np.array([0.0]),), ScalarType.float64, wide=True).tolist()
[0.5]
>>> SIGNATURES[Function.EXP].accepts(ScalarType.int32)
False
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from .types import ScalarType


class Function(enum.StrEnum):
    """An element-wise function (Accera's names)."""

    ABS = "abs"
    SQRT = "sqrt"
    EXP = "exp"
    FAST_EXP = "fast_exp"
    FAST_EXP2 = "fast_exp2"
    LOG = "log"
    LOG2 = "log2"
    LOG10 = "log10"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    FAST_TANH = "fast_tanh"
    SIGMOID = "sigmoid"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    POW = "pow"
    LOGICAL_NOT = "logical_not"
    SELECT = "select"


class Domain(enum.Enum):
    """The element types a function takes."""

    FLOAT = "floating-point"  # float16, bfloat16, float32, float64
    NUMBER = "numeric"  # any type but bool
    BOOL = "bool"
    SELECT = "a bool condition and two values of one type"


@dataclass(frozen=True)
class Signature:
    arity: int
    domain: Domain
    ulps: int = 0  # CUDA's maximum error of the float32 function, in units in the last place

    def accepts(self, dtype: ScalarType) -> bool:
        """Whether the function's values may be of ``dtype``."""
        if self.domain is Domain.FLOAT:
            return dtype.is_float
        if self.domain is Domain.BOOL:
            return dtype is ScalarType.bool
        return dtype is not ScalarType.bool


_FLOAT, _NUMBER = Domain.FLOAT, Domain.NUMBER
SIGNATURES: dict[Function, Signature] = {
    Function.ABS: Signature(1, _NUMBER),
    Function.SQRT: Signature(1, _FLOAT),
    Function.EXP: Signature(1, _FLOAT, 2),
    Function.FAST_EXP: Signature(1, _FLOAT, 2 + 104),  # __expf: 2 + floor(|1.173 x|) ulps; |x| < 89 (else inf)
    Function.FAST_EXP2: Signature(1, _FLOAT, 2),  # ex2.approx.ftz.f32: exp2f's 2 ulps (subnormal results flushed)
    Function.LOG: Signature(1, _FLOAT, 1),
    Function.LOG2: Signature(1, _FLOAT, 1),
    Function.LOG10: Signature(1, _FLOAT, 2),
    Function.SIN: Signature(1, _FLOAT, 2),
    Function.COS: Signature(1, _FLOAT, 2),
    Function.TAN: Signature(1, _FLOAT, 4),
    Function.SINH: Signature(1, _FLOAT, 3),
    Function.COSH: Signature(1, _FLOAT, 2),
    Function.TANH: Signature(1, _FLOAT, 2),
    # tanh.approx.f32 (sm_75 on; tanhf before): relative error below 2^-10.987 over the whole range
    Function.FAST_TANH: Signature(1, _FLOAT, 4134),
    Function.SIGMOID: Signature(1, _FLOAT, 4),  # 1 / (1 + expf(-x)): expf's error and two roundings
    Function.ERF: Signature(1, _FLOAT, 2),
    Function.FLOOR: Signature(1, _FLOAT),
    Function.CEIL: Signature(1, _FLOAT),
    Function.ROUND: Signature(1, _FLOAT),
    Function.POW: Signature(2, _FLOAT, 4),
    Function.LOGICAL_NOT: Signature(1, Domain.BOOL),
    Function.SELECT: Signature(3, Domain.SELECT),
}


def cuda_name(function: Function) -> str:
    """The runtime header's function: ``schedc::exp`` (overloads per element type)."""
    return f"schedc::{function.value}"


def relative_error(function: Function) -> float:
    """The function's error on the GPU relative to its value, in float32 (0: exact or correctly
    rounded)."""
    return SIGNATURES[function].ulps * 2.0 ** -23


# -- on numpy values ---------------------------------------------------------------------------

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _round(x):
    """Half away from zero (C's round), exact in every float type: x - trunc(x) has no error."""
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole).astype(np.asarray(x).dtype)


def _sigmoid(x):
    one = np.asarray(1, dtype=np.asarray(x).dtype)
    with np.errstate(over="ignore"):
        return one / (one + np.exp(-x))


_NUMPY = {
    Function.ABS: np.abs, Function.SQRT: np.sqrt, Function.EXP: np.exp, Function.FAST_EXP: np.exp,
    Function.FAST_EXP2: np.exp2,
    Function.LOG: np.log, Function.LOG2: np.log2, Function.LOG10: np.log10, Function.SIN: np.sin,
    Function.COS: np.cos, Function.TAN: np.tan, Function.SINH: np.sinh, Function.COSH: np.cosh,
    Function.TANH: np.tanh, Function.FAST_TANH: np.tanh, Function.SIGMOID: _sigmoid, Function.FLOOR: np.floor,
    Function.CEIL: np.ceil,
    Function.ROUND: _round, Function.POW: np.power, Function.LOGICAL_NOT: np.logical_not,
}


def evaluate(function: Function, args: tuple, dtype: ScalarType, wide: bool = False):
    """``function(*args)`` of result type ``dtype``: in that type as the kernel computes it, or
    in float64/int64 where ``wide`` (the reference)."""
    if function is Function.SELECT:
        cond, a, b = args
        return np.where(np.asarray(cond) != 0, a, b)
    if function is Function.LOGICAL_NOT:
        return np.logical_not(args[0])
    if not dtype.is_float or wide:
        compute = None if not dtype.is_float else np.float64
    else:
        compute = np.float64 if dtype is ScalarType.float64 else np.float32
    values = tuple(np.asarray(a, dtype=compute) if compute is not None else np.asarray(a) for a in args)
    with np.errstate(all="ignore"):  # NaN and infinities, as on the GPU
        out = _ERF(values[0]) if function is Function.ERF else _NUMPY[function](*values)
    if function is Function.ERF and compute is np.float32:
        out = out.astype(np.float32)
    if wide or not dtype.is_float:
        return out
    return np.asarray(out).astype(dtype.numpy)
