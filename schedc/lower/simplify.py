"""Constant folding of index arithmetic, so the CUDA text reads as a person would write it.

>>> from schedc.ir.kernel import Binary, Const, Var
>>> fold(Binary("+", Binary("*", Var("i"), Const(1)), Const(0)))
Var(name='i')
"""

from __future__ import annotations

import dataclasses

from ..ir.kernel import (
    Binary,
    Cast,
    Const,
    Expr,
    FragmentLoad,
    FragmentStore,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Stmt,
    Store,
    Unary,
)

_FOLD = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def fold(expr: Expr) -> Expr:
    if isinstance(expr, Binary):
        lhs, rhs = fold(expr.lhs), fold(expr.rhs)
        if expr.dtype is None:  # index arithmetic only: data keeps its rounding
            folded = _fold_index(expr.op, lhs, rhs)
            if folded is not None:
                return folded
        return dataclasses.replace(expr, lhs=lhs, rhs=rhs)
    if isinstance(expr, Unary | Cast):
        return dataclasses.replace(expr, operand=fold(expr.operand))
    if isinstance(expr, Load):
        return dataclasses.replace(expr, index=tuple(fold(i) for i in expr.index))
    return expr


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
    return dataclasses.replace(kernel, body=_body(kernel.body))


def _body(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    return tuple(_statement(s) for s in body)


def _statement(s: Stmt) -> Stmt:
    if isinstance(s, Store):
        return dataclasses.replace(s, index=tuple(fold(i) for i in s.index), value=fold(s.value))
    if isinstance(s, Let):
        return dataclasses.replace(s, value=fold(s.value))
    if isinstance(s, Loop):
        return dataclasses.replace(s, start=fold(s.start), stop=fold(s.stop), body=_body(s.body))
    if isinstance(s, If):
        return dataclasses.replace(s, cond=fold(s.cond), body=_body(s.body), orelse=_body(s.orelse))
    if isinstance(s, FragmentLoad | FragmentStore):
        edge = s.edge and dataclasses.replace(s.edge, rows=fold(s.edge.rows), cols=fold(s.edge.cols))
        return dataclasses.replace(s, origin=tuple(fold(i) for i in s.origin), edge=edge)
    changes = {name: tuple(fold(i) for i in getattr(s, name))
               for name in ("source_origin", "target_origin", "valid") if hasattr(s, name)}
    return dataclasses.replace(s, **changes) if changes else s
