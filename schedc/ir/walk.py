"""The kernel IR's one traversal: every pass and backend walks statements and expressions here.

A node declares its fields once, as a frozen dataclass; what a field holds says how it is
walked, so a new node is covered everywhere without an edit here:

- an *expression* (``Var``, ``Const``, ``Binary``, ``Unary``, ``Cast``, ``Call``, ``Load``) or a tuple of
  them (subscripts, origins, valid extents) is one of the statement's own expressions;
- a *body* (a tuple of statements: ``Loop.body``, ``If.body``/``orelse``) holds nested statements;
- a *record* (``TileEdge``, ``Role``, a tuple of roles) is walked field by field the same way.

``map_expr`` rewrites an expression bottom-up; ``map_exprs`` a statement's own expressions;
``map_stmt`` every statement of a body, innermost first (Exo's ``LoopIR_Rewrite``);
``walk_statements`` and ``exprs`` visit (Exo's ``LoopIR_Do``).

>>> from schedc.ir.kernel import Binary, Const, If, Loop, Store, Var
>>> store = Store("C", (Var("i"),), Const(1.0))
>>> body = (Loop("i", Const(0), Const(4), 1, (If(Binary("<", Var("i"), Var("n")), (store,)),)),)
>>> [type(s).__name__ for s in walk_statements(body)]
['Loop', 'If', 'Store']
>>> renamed = map_stmt(body, lambda s: map_all_exprs(s, lambda e: Var("j") if e == Var("i") else e))
>>> sorted({v for s in walk_statements(renamed) for e in exprs(s) for v in variables(e)})
['j', 'n']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import get_args

from .kernel import Binary, Call, Cast, Expr, Load, Stmt, Unary, Var

EXPRESSIONS = get_args(Expr)
ExprRewrite = Callable[[Expr], Expr]
StmtRewrite = Callable[[Stmt], "Stmt | tuple[Stmt, ...]"]


def is_expr(value: object) -> bool:
    return isinstance(value, EXPRESSIONS)


def is_stmt(value: object) -> bool:
    return isinstance(value, get_args(Stmt))


# -- expressions -------------------------------------------------------------------------------


def operands(e: Expr) -> tuple[Expr, ...]:
    """An expression's direct sub-expressions (a load's subscripts)."""
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Unary | Cast):
        return (e.operand,)
    if isinstance(e, Load):
        return e.index
    if isinstance(e, Call):
        return e.args
    return ()


def map_expr(e: Expr, fn: ExprRewrite) -> Expr:
    """``fn`` applied bottom-up: to each operand's rewrite, then to the node rebuilt from them."""
    if isinstance(e, Binary):
        lhs, rhs = map_expr(e.lhs, fn), map_expr(e.rhs, fn)
        e = e if (lhs, rhs) == (e.lhs, e.rhs) else dataclasses.replace(e, lhs=lhs, rhs=rhs)
    elif isinstance(e, Unary | Cast):
        operand = map_expr(e.operand, fn)
        e = e if operand is e.operand else dataclasses.replace(e, operand=operand)
    elif isinstance(e, Load):
        index = tuple(map_expr(i, fn) for i in e.index)
        e = e if index == e.index else dataclasses.replace(e, index=index)
    elif isinstance(e, Call):
        args = tuple(map_expr(a, fn) for a in e.args)
        e = e if args == e.args else dataclasses.replace(e, args=args)
    return fn(e)


def subexpressions(e: Expr) -> Iterator[Expr]:
    """``e`` and every expression inside it, parents first."""
    yield e
    for operand in operands(e):
        yield from subexpressions(operand)


# -- a statement's own expressions, its bodies -------------------------------------------------


def _fields(node) -> Iterator[tuple[str, object]]:
    bodies = _body_fields(type(node))
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        yield f.name, (_Body(value) if f.name in bodies else value)


class _Body(tuple):
    """A field declared ``tuple[Stmt, ...]``: nested statements, whatever their classes."""


@functools.cache
def _body_fields(cls: type) -> frozenset[str]:
    """The fields a node class declares as statement bodies."""
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if str(f.type).replace(" ", "") in ("tuple[Stmt,...]", "tuple[Stmt]"))


def _is_body(value: object) -> bool:
    return isinstance(value, _Body)


def _is_record(value: object) -> bool:
    """A node inside a statement that is neither a statement nor an expression (TileEdge, Role)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and not is_stmt(value) \
        and not is_expr(value)


def exprs(s) -> Iterator[Expr]:
    """The top-level expressions of a statement (or record), not those of its nested bodies, in
    field order; each is whole (use ``subexpressions`` for the nodes inside)."""
    for _, value in _fields(s):
        yield from _exprs_in(value)


def _exprs_in(value: object) -> Iterator[Expr]:
    if is_expr(value):
        yield value
    elif isinstance(value, tuple) and not _is_body(value):
        for item in value:
            yield from _exprs_in(item)
    elif _is_record(value):
        yield from exprs(value)


def map_exprs(s, fn: ExprRewrite):
    """The statement (or record) with ``fn`` applied to each of its own top-level expressions
    (nested bodies untouched: ``map_stmt`` reaches their statements)."""
    changes = {}
    for name, value in _fields(s):
        new = _map_value(value, fn)
        if new is not value:
            changes[name] = new
    return dataclasses.replace(s, **changes) if changes else s


def _map_value(value, fn: ExprRewrite):
    if is_expr(value):
        new = fn(value)
        return value if new == value else new
    if isinstance(value, tuple) and value and not _is_body(value):
        items = tuple(_map_value(v, fn) for v in value)
        return value if all(a is b for a, b in zip(items, value)) else items
    if _is_record(value):
        return map_exprs(value, fn)
    return value


def map_all_exprs(s, fn: ExprRewrite):
    """``map_exprs`` with ``fn`` applied bottom-up inside each expression (``map_expr``)."""
    return map_exprs(s, lambda e: map_expr(e, fn))


def bodies(s) -> tuple[tuple[Stmt, ...], ...]:
    """The statement bodies a statement holds (a loop's, an if's two, each role's), in order."""
    found = []
    for _, value in _fields(s):
        found += _bodies_in(value)
    return tuple(found)


def _bodies_in(value) -> list[tuple[Stmt, ...]]:
    if _is_body(value):
        return [tuple(value)]
    if isinstance(value, tuple):
        return [b for item in value if _is_record(item) for b in bodies(item)]
    return list(bodies(value)) if _is_record(value) else []


def map_bodies(s, fn: Callable[[tuple[Stmt, ...]], tuple[Stmt, ...]]):
    """The statement (or record) with each nested body replaced by ``fn(body)`` (unchanged: the
    same object)."""
    changes = {}
    for name, value in _fields(s):
        new = _map_body_value(value, fn)
        if new is not value:
            changes[name] = new
    return dataclasses.replace(s, **changes) if changes else s


def _map_body_value(value, fn):
    if _is_body(value):
        new = fn(tuple(value))
        return value if len(new) == len(value) and all(a is b for a, b in zip(new, value)) else new
    if isinstance(value, tuple) and value and all(_is_record(v) for v in value):
        items = tuple(map_bodies(v, fn) for v in value)
        return value if all(a is b for a, b in zip(items, value)) else items
    return map_bodies(value, fn) if _is_record(value) else value


# -- bodies ------------------------------------------------------------------------------------


def walk_statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of ``body``, parents before their children."""
    for s in body:
        yield s
        for inner in bodies(s):
            yield from walk_statements(inner)


def children(s: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside ``s`` (every body's, in order)."""
    return tuple(inner for body in bodies(s) for inner in body)


def map_stmt(body: tuple[Stmt, ...], fn: StmtRewrite) -> tuple[Stmt, ...]:
    """Every statement rewritten innermost first: its bodies rewritten, then ``fn`` on it, which
    returns a statement or a tuple of statements (none: it is removed)."""
    out: list[Stmt] = []
    for s in body:
        new = fn(map_bodies(s, lambda inner: map_stmt(inner, fn)))
        out += list(new) if isinstance(new, tuple) else [new]
    return tuple(out)


def loads(node) -> Iterator[Load]:
    """Every Load in an expression, a statement's own expressions, or a body (at any depth)."""
    if is_expr(node):
        yield from (e for e in subexpressions(node) if isinstance(e, Load))
    elif isinstance(node, tuple):
        for s in walk_statements(node):
            yield from loads(s)
    else:
        for e in exprs(node):
            yield from loads(e)


def substitute(e: Expr, values: dict[str, Expr]) -> Expr:
    """``e`` with variables replaced by expressions."""
    return map_expr(e, lambda x: values.get(x.name, x) if isinstance(x, Var) else x)


def variables(e: Expr) -> set[str]:
    """The names of the variables an expression reads."""
    return {x.name for x in subexpressions(e) if isinstance(x, Var)}


__all__ = ["EXPRESSIONS", "bodies", "children", "exprs", "is_expr", "is_stmt", "loads", "map_all_exprs", "map_bodies",
           "map_expr", "map_exprs", "map_stmt", "operands", "subexpressions", "substitute", "variables",
           "walk_statements"]
