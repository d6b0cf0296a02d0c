"""Front-end expression trees to kernel-IR expressions, with every type made concrete.

Weak constants take the type of the operation they are in (or of the array they are stored
to); index values used as data are cast to that type.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import NestError
from ..ir import kernel as k
from ..ir.functions import SIGNATURES, Function
from ..ir.numeric import constant
from ..ir.types import ScalarType
from . import expr as fe


def statement(assign: fe.Assign) -> k.Store:
    target = assign.target
    element = target.array.element_type
    try:
        value = value_expr(assign.value, element)
    except OverflowError as error:
        raise NestError(str(assign), str(error)) from None
    if _dtype(value) != element:
        value = k.Cast(value, element)
    return k.Store(target.array.name, tuple(index_expr(i) for i in target.indices), value)


def index_expr(node: fe.Expr) -> k.Expr:
    """An affine subscript: integers only."""
    if isinstance(node, fe.Index):
        return k.Var(node.name)
    if isinstance(node, fe.Const):
        return k.Const(int(node.value))
    if isinstance(node, fe.Unary):
        return k.Unary("-", index_expr(node.operand))
    if isinstance(node, fe.Binary):
        return k.Binary(node.op, index_expr(node.lhs), index_expr(node.rhs))
    raise TypeError(f"not a subscript: {node!r}")


def value_expr(node: fe.Expr, context: ScalarType) -> k.Expr:
    """A data value; ``context`` types the weak parts."""
    dtype = node.dtype if node.dtype is not None else context
    if isinstance(node, fe.Index):
        return k.Cast(k.Var(node.name), dtype)
    if isinstance(node, fe.Const):
        if dtype.arithmetic is not dtype:  # a stored-only type (8-bit floats): the constant rounded at run time
            return k.Cast(k.Const(_convert_constant(node.value, dtype.arithmetic), dtype.arithmetic), dtype)
        return k.Const(_convert_constant(node.value, dtype), dtype)
    if isinstance(node, fe.Access):
        return k.Load(node.array.name, tuple(index_expr(i) for i in node.indices), dtype)
    if isinstance(node, fe.Cast):
        inner = node.operand.dtype if node.operand.dtype is not None else dtype
        return k.Cast(value_expr(node.operand, inner), dtype)
    dtype = dtype.arithmetic  # an operation: of 8-bit floats computed in float32 (rounded where stored)
    if isinstance(node, fe.Unary):
        return k.Unary(node.op, _as(value_expr(node.operand, dtype), dtype), dtype)
    if isinstance(node, fe.Call):
        return _call(node, dtype)
    if isinstance(node, fe.Binary) and node.op in k.COMPARISONS:
        return _comparison(node)
    if isinstance(node, fe.Binary):
        lhs, rhs = value_expr(node.lhs, dtype), value_expr(node.rhs, dtype)
        return k.Binary(node.op, _as(lhs, dtype), _as(rhs, dtype), dtype)
    raise TypeError(f"not an expression: {node!r}")


def _comparison(node: fe.Binary) -> k.Binary:
    """Operands in their common type; two index values (or integers) compare as indices."""
    common = fe.result_type(node.lhs, node.rhs)  # as arithmetic meets them: A[i] < 2.5 in float32 for ints
    if common is None and any(_is_float_constant(x) for x in (node.lhs, node.rhs)):
        common = ScalarType.float32
    if common is None:
        return k.Binary(node.op, index_expr(node.lhs), index_expr(node.rhs), ScalarType.bool)
    common = common.arithmetic
    lhs, rhs = value_expr(node.lhs, common), value_expr(node.rhs, common)
    if common in _PROMOTED:  # C++ compares them as int: say so (every value fits, the order holds)
        common = ScalarType.int32
    return k.Binary(node.op, _as(lhs, common), _as(rhs, common), ScalarType.bool)


# types C++ converts to int before comparing them
_PROMOTED = frozenset({ScalarType.bool, ScalarType.int8, ScalarType.uint8, ScalarType.int16, ScalarType.uint16})


def _is_float_constant(node: fe.Expr) -> bool:
    return isinstance(node, fe.Const) and isinstance(node.value, float)


def _call(node: fe.Call, dtype: ScalarType) -> k.Call:
    """A function of weak arguments takes the type of where it is used (``dtype``)."""
    if node.function is Function.SELECT:
        cond, a, b = node.args
        return k.Call(node.function, (value_expr(cond, ScalarType.bool), _as(value_expr(a, dtype), dtype),
                                      _as(value_expr(b, dtype), dtype)), dtype)
    if node.function is Function.LOGICAL_NOT:
        return k.Call(node.function, (value_expr(node.args[0], ScalarType.bool),), ScalarType.bool)
    if not SIGNATURES[node.function].accepts(dtype):
        raise NestError(fe.render(node), fe.domain_error(node.function, dtype))
    return k.Call(node.function, tuple(_as(value_expr(a, dtype), dtype) for a in node.args), dtype)


def _as(expr: k.Expr, dtype: ScalarType) -> k.Expr:
    return expr if _dtype(expr) == dtype else k.Cast(expr, dtype)


def _dtype(expr: k.Expr) -> ScalarType | None:
    return getattr(expr, "dtype", None)


def _convert_constant(value, dtype: ScalarType):
    if dtype.is_float:
        value = float(value)
        if math.isfinite(value) and not math.isfinite(float(constant(value, dtype.arithmetic))):
            largest = dtype.arithmetic.float_format.largest
            raise OverflowError(f"the constant {value} does not fit {dtype.arithmetic.value} (its largest finite value "
                                f"is {largest:g}), the type of the operation it is in; cast an operand to a wider type")
        return value
    if dtype is ScalarType.bool:
        return bool(value)
    limits = np.iinfo(dtype.numpy)
    if not limits.min <= int(value) <= limits.max:
        raise OverflowError(f"the constant {value} does not fit {dtype.value} ({limits.min}..{limits.max}), "
                            f"the type of the operation it is in; cast an operand to a wider type")
    return int(value)
