"""Statement shapes several stages recognise.

>>> from schedc.ir.kernel import Binary, Load, Store, Var
>>> c = Load("C", (Var("i"),), None)
>>> accumulated(Store("C", (Var("i"),), Binary("+", c, Load("A", (Var("i"),), None))))
Load(buffer='A', index=(Var(name='i'),), dtype=None)
"""

from __future__ import annotations

from .functions import Function
from .kernel import COMPARISONS, LOGIC, Binary, Call, Cast, Const, Expr, Load, Store, Unary
from .types import ScalarType
from .walk import loads


def strip_float_casts(e: Expr) -> Expr:
    while isinstance(e, Cast) and e.dtype.is_float:
        e = e.operand
    return e


def buffers_read(e: Expr) -> set[str]:
    """The arrays an expression loads from."""
    return {load.buffer for load in loads(e)}


def accumulated(store: Store) -> Expr | None:
    """X when the statement is the reduction ``T = T + X`` (float casts aside) and X does not
    read T's array: its instances may run in any order (up to rounding)."""
    found = reduction(store)
    return found[1] if found is not None and found[0] == "+" else None


REDUCTIONS = ("+", "max", "min")  # the associative, commutative updates of a reduction


def reduction(store: Store) -> tuple[str, Expr] | None:
    """(op, X) when the statement is ``T = T op X`` for op in ``REDUCTIONS`` (``acc.max(T, X)``
    too; float casts aside) and X does not read T's array."""
    value = strip_float_casts(store.value)
    if not (isinstance(value, Binary) and value.op in REDUCTIONS):
        return None
    for acc, other in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        acc = strip_float_casts(acc)
        same = isinstance(acc, Load) and acc.buffer == store.buffer and acc.index == store.index
        if same and store.buffer not in buffers_read(other):
            return value.op, other
    return None


def widened(expr: Expr, dtype: ScalarType) -> Expr:
    """``expr`` computed in ``dtype`` (float32 for a 16-bit float target): its operations in
    ``dtype``, its loads and index values converted to it, conversions between float types
    dropped (split-K's partial sums, a fused epilogue on a float32 accumulator)."""
    have = getattr(expr, "dtype", None)
    if have == dtype:
        return expr
    if isinstance(expr, Binary | Call) and have is ScalarType.bool:
        return _test_widened(expr, dtype)
    if not (dtype.is_float and have is not None and have.is_float):
        return Cast(expr, dtype)
    if isinstance(expr, Binary):
        return Binary(expr.op, widened(expr.lhs, dtype), widened(expr.rhs, dtype), dtype)
    if isinstance(expr, Call) and expr.function is Function.SELECT:
        return Call(expr.function, (widened(expr.args[0], dtype), *(widened(a, dtype) for a in expr.args[1:])),
                    dtype)
    if isinstance(expr, Call):  # the function computed in dtype (16-bit ones are, in float32)
        return Call(expr.function, tuple(widened(a, dtype) for a in expr.args), dtype)
    if isinstance(expr, Unary):
        return Unary(expr.op, widened(expr.operand, dtype), dtype)
    if isinstance(expr, Const):
        return Const(expr.value, dtype)
    if isinstance(expr, Cast):
        return widened(expr.operand, dtype) if getattr(expr.operand, "dtype", None) is not None \
            and expr.operand.dtype.is_float else Cast(expr.operand, dtype)
    return Cast(expr, dtype)


def _test_widened(expr: Expr, dtype: ScalarType) -> Expr:
    """A condition whose comparisons of float values compare them in ``dtype`` (a fused
    epilogue's ``C > 1.0`` on the float32 accumulator, not on C rounded to its 16-bit type)."""
    if isinstance(expr, Binary) and expr.op in LOGIC:
        return Binary(expr.op, _test_widened(expr.lhs, dtype), _test_widened(expr.rhs, dtype), expr.dtype)
    if isinstance(expr, Call) and expr.function is Function.LOGICAL_NOT:
        return Call(expr.function, (_test_widened(expr.args[0], dtype),), expr.dtype)
    if isinstance(expr, Binary) and expr.op in COMPARISONS:
        sides = (expr.lhs, expr.rhs)
        if all(getattr(x, "dtype", None) is not None and x.dtype.is_float for x in sides):
            return Binary(expr.op, *(widened(x, dtype) for x in sides), expr.dtype)
    return expr
