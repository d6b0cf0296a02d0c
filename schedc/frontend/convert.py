"""Front-end expression trees to kernel-IR expressions, with every type made concrete.

Weak constants take the type of the operation they are in (or of the array they are stored
to); index values used as data are cast to that type.
"""

from __future__ import annotations

import numpy as np

from ..errors import NestError
from ..ir import kernel as k
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
        return k.Const(_convert_constant(node.value, dtype), dtype)
    if isinstance(node, fe.Access):
        return k.Load(node.array.name, tuple(index_expr(i) for i in node.indices), dtype)
    if isinstance(node, fe.Cast):
        inner = node.operand.dtype if node.operand.dtype is not None else dtype
        return k.Cast(value_expr(node.operand, inner), dtype)
    if isinstance(node, fe.Unary):
        return k.Unary(node.op, value_expr(node.operand, dtype), dtype)
    if isinstance(node, fe.Binary):
        lhs, rhs = value_expr(node.lhs, dtype), value_expr(node.rhs, dtype)
        return k.Binary(node.op, _as(lhs, dtype), _as(rhs, dtype), dtype)
    raise TypeError(f"not an expression: {node!r}")


def _as(expr: k.Expr, dtype: ScalarType) -> k.Expr:
    return expr if _dtype(expr) == dtype else k.Cast(expr, dtype)


def _dtype(expr: k.Expr) -> ScalarType | None:
    return getattr(expr, "dtype", None)


def _convert_constant(value, dtype: ScalarType):
    if dtype.is_float:
        return float(value)
    if dtype is ScalarType.bool:
        return bool(value)
    limits = np.iinfo(dtype.numpy)
    if not limits.min <= int(value) <= limits.max:
        raise OverflowError(f"the constant {value} does not fit {dtype.value} ({limits.min}..{limits.max}), "
                            f"the type of the operation it is in; cast an operand to a wider type")
    return int(value)
