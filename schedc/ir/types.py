"""Scalar element types: one table maps each to numpy, CUDA C++ and HAT names.

>>> ScalarType.float16.c_type, ScalarType.float16.hat_type, ScalarType.float16.size
('__half', 'float16_t', 2)
>>> promote(ScalarType.float16, ScalarType.float32)
<ScalarType.float32: 'float32'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class _TypeInfo:
    numpy: np.dtype
    c_type: str
    hat_type: str
    rank: int  # promotion order within its kind
    kind: str  # "bool", "int", "uint", "float"
    torch: str = ""  # torch's name where it is not schedc's
    stored_only: bool = False  # no arithmetic in CUDA C++: operations on it compute in float32


_INFO: dict[str, _TypeInfo] = {
    "bool": _TypeInfo(np.dtype(np.bool_), "bool", "bool", 0, "bool"),
    "int8": _TypeInfo(np.dtype(np.int8), "signed char", "int8_t", 1, "int"),
    "uint8": _TypeInfo(np.dtype(np.uint8), "unsigned char", "uint8_t", 1, "uint"),
    "int16": _TypeInfo(np.dtype(np.int16), "short", "int16_t", 2, "int"),
    "uint16": _TypeInfo(np.dtype(np.uint16), "unsigned short", "uint16_t", 2, "uint"),
    "int32": _TypeInfo(np.dtype(np.int32), "int", "int32_t", 3, "int"),
    "uint32": _TypeInfo(np.dtype(np.uint32), "unsigned int", "uint32_t", 3, "uint"),
    "int64": _TypeInfo(np.dtype(np.int64), "long long", "int64_t", 4, "int"),
    "uint64": _TypeInfo(np.dtype(np.uint64), "unsigned long long", "uint64_t", 4, "uint"),
    "float8_e4m3": _TypeInfo(np.dtype(ml_dtypes.float8_e4m3fn), "__nv_fp8_e4m3", "float8_e4m3_t", 0, "float",
                             "float8_e4m3fn", True),
    "float8_e5m2": _TypeInfo(np.dtype(ml_dtypes.float8_e5m2), "__nv_fp8_e5m2", "float8_e5m2_t", 0, "float",
                             "float8_e5m2", True),
    "float16": _TypeInfo(np.dtype(np.float16), "__half", "float16_t", 1, "float"),
    "bfloat16": _TypeInfo(np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16", "bfloat16_t", 1, "float"),
    "float32": _TypeInfo(np.dtype(np.float32), "float", "float", 2, "float"),
    "float64": _TypeInfo(np.dtype(np.float64), "double", "double", 3, "float"),
}


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: what rounding a real value into it needs."""

    precision: int  # significand bits, the leading one included
    min_exponent: int  # the exponent of the smallest normal value (below it, subnormals)
    max_exponent: int  # the exponent of the largest finite value
    largest: float  # the largest finite value
    infinities: bool  # False: a value past ``largest`` becomes NaN (float8_e4m3 has no infinities)


# one home for the formats: rounding constants and conversions (ir/numeric.py) and the text
# check's literals read this table, never a library's own rounding
_FORMATS: dict[str, FloatFormat] = {
    "float8_e4m3": FloatFormat(4, -6, 8, 448.0, False),
    "float8_e5m2": FloatFormat(3, -14, 15, 57344.0, True),
    "float16": FloatFormat(11, -14, 15, 65504.0, True),
    "bfloat16": FloatFormat(8, -126, 127, (2 - 2**-7) * 2.0**127, True),
    "float32": FloatFormat(24, -126, 127, (2 - 2**-23) * 2.0**127, True),
    "float64": FloatFormat(53, -1022, 1023, (2 - 2**-52) * 2.0**1023, True),
}


class ScalarType(enum.Enum):
    """Element types of arrays and expressions (Accera's ``acc.ScalarType``)."""

    bool = "bool"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    uint16 = "uint16"
    int32 = "int32"
    uint32 = "uint32"
    int64 = "int64"
    uint64 = "uint64"
    float8_e4m3 = "float8_e4m3"  # 4 exponent bits, 3 mantissa bits, no infinities (OCP's E4M3FN)
    float8_e5m2 = "float8_e5m2"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        return _INFO[self.value].numpy

    @property
    def c_type(self) -> str:
        return _INFO[self.value].c_type

    @property
    def hat_type(self) -> str:
        return _INFO[self.value].hat_type

    @property
    def size(self) -> int:
        return _INFO[self.value].numpy.itemsize

    @property
    def is_float(self) -> bool:
        return _INFO[self.value].kind == "float"

    @property
    def float_format(self) -> FloatFormat:
        """The binary format of a float type (a KeyError for the others).

        >>> ScalarType.bfloat16.float_format.precision, ScalarType.float8_e4m3.float_format.largest
        (8, 448.0)
        """
        return _FORMATS[self.value]

    @property
    def is_integer(self) -> bool:
        return _INFO[self.value].kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return _INFO[self.value].kind in ("int", "float")

    @property
    def torch_name(self) -> str:
        """The name of torch's type (``torch.float8_e4m3fn`` for float8_e4m3)."""
        return _INFO[self.value].torch or self.value

    @property
    def arithmetic(self) -> ScalarType:
        """The type the kernels compute operations of this type in: float32 for the 8-bit floats,
        which are stored only (their values are exact in float32: the result is rounded once,
        where it is stored or cast); the type itself otherwise.

        >>> ScalarType.float8_e4m3.arithmetic, ScalarType.float16.arithmetic
        (<ScalarType.float32: 'float32'>, <ScalarType.float16: 'float16'>)
        """
        return ScalarType.float32 if _INFO[self.value].stored_only else self


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The type of a binary operation on ``a`` and ``b``: the wider one, floats over integers.

    float16 with bfloat16 gives float32, since neither holds the other. (This is the type a
    result has for the rules of assignment; the kernel computes an 8-bit float one in float32,
    ``ScalarType.arithmetic``, and rounds it once where it is stored.)
    """
    if a == b:
        return a
    ia, ib = _INFO[a.value], _INFO[b.value]
    if ia.kind == "float" and ib.kind == "float":
        if ia.rank == ib.rank:  # float16 with bfloat16
            return ScalarType.float32
        return a if ia.rank > ib.rank else b
    if ia.kind == "float":
        return a
    if ib.kind == "float":
        return b
    if ia.kind == "bool":
        return b
    if ib.kind == "bool":
        return a
    rank = max(ia.rank, ib.rank)
    signed = "int" in (ia.kind, ib.kind)
    for name, info in _INFO.items():
        if info.rank == rank and info.kind == ("int" if signed else "uint"):
            return ScalarType(name)
    raise AssertionError(f"no promotion for {a} and {b}")


def converts_implicitly(source: ScalarType, target: ScalarType) -> bool:
    """Whether assigning ``source`` to ``target`` loses nothing (Accera's implicit casts).

    Integers widen to wider integers and to floats; floats widen to wider floats. Anything
    narrower needs an explicit ``cast``.
    """
    if source == target:
        return True
    s, t = _INFO[source.value], _INFO[target.value]
    if t.kind == "float":
        if s.kind != "float":
            return True
        return s.rank < t.rank
    if s.kind == "float":
        return False
    if s.kind == "bool":
        return True
    if t.kind == "uint" and s.kind == "int":
        return False
    return s.rank < t.rank or (s.rank == t.rank and s.kind == t.kind)


def from_numpy(dtype: np.dtype) -> ScalarType:
    """The ScalarType of a numpy dtype (bfloat16 from ml_dtypes)."""
    dtype = np.dtype(dtype)
    for name, info in _INFO.items():
        if info.numpy == dtype:
            return ScalarType(name)
    raise KeyError(f"numpy dtype {dtype} has no ScalarType")


def is_float_dtype(dtype: np.dtype) -> bool:
    """Whether a numpy dtype holds floating-point values: numpy's own, and ml_dtypes' bfloat16
    and 8-bit floats (whose ``kind`` is "V" for some).

    >>> is_float_dtype(np.dtype(ml_dtypes.float8_e4m3fn)), is_float_dtype(np.dtype(np.int8))
    (True, False)
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return True
    return any(info.numpy == dtype and info.kind == "float" for info in _INFO.values())
