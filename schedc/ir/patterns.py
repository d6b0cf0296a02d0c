"""Statement shapes several stages recognise.

>>> from schedc.ir.kernel import Binary, Load, Store, Var
>>> c = Load("C", (Var("i"),), None)
>>> accumulated(Store("C", (Var("i"),), Binary("+", c, Load("A", (Var("i"),), None))))
Load(buffer='A', index=(Var(name='i'),), dtype=None)
"""

from __future__ import annotations

from .kernel import Binary, Cast, Expr, Load, Store
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
    value = strip_float_casts(store.value)
    if not (isinstance(value, Binary) and value.op == "+"):
        return None
    for acc, other in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        acc = strip_float_casts(acc)
        same = isinstance(acc, Load) and acc.buffer == store.buffer and acc.index == store.index
        if same and store.buffer not in buffers_read(other):
            return other
    return None
