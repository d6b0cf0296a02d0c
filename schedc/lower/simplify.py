"""Constant folding of index arithmetic, so the CUDA text reads as a person would write it.

>>> from schedc.ir.kernel import Binary, Const, Var
>>> fold(Binary("+", Binary("*", Var("i"), Const(1)), Const(0)))
Var(name='i')
"""

from __future__ import annotations

import dataclasses

from ..ir.kernel import Binary, Const, Expr, Kernel
from ..ir.walk import map_expr, map_exprs, map_stmt

_FOLD = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def fold(expr: Expr) -> Expr:
    """Index arithmetic with constants folded, bottom-up (data keeps its rounding)."""
    return map_expr(expr, _fold_node)


def _fold_node(e: Expr) -> Expr:
    if isinstance(e, Binary) and e.dtype is None:
        folded = _fold_index(e.op, e.lhs, e.rhs)
        if folded is not None:
            return folded
    return e


def _fold_index(op: str, lhs: Expr, rhs: Expr) -> Expr | None:
    lc = lhs.value if isinstance(lhs, Const) else None
    rc = rhs.value if isinstance(rhs, Const) else None
    if lc is not None and rc is not None and op in _FOLD:
        return Const(_FOLD[op](lc, rc))
    if op == "+" and lc == 0:
        return rhs
    if op in "+-" and rc == 0:
        return lhs
    if op == "*" and (lc == 1 or rc == 1):
        return rhs if lc == 1 else lhs
    if op == "/" and rc == 1:
        return lhs
    return None


def simplify(kernel: Kernel) -> Kernel:
    """Every expression of every statement folded (``fold``), at any depth (roles included)."""
    return dataclasses.replace(kernel, body=map_stmt(kernel.body, lambda s: map_exprs(s, fold)))
