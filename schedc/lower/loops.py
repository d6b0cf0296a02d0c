"""Loop-nest lowering: serial loops in schedule order, guards for partial tiles, and the
per-thread statements (or the tensorized tile) at the innermost point."""

from __future__ import annotations

import dataclasses

from ..ir.affine import Affine
from ..ir.kernel import (
    Binary,
    Const,
    Expr,
    If,
    Kernel,
    Loop,
    SharedBuffer,
    Stmt,
    Store,
    Var,
    all_of,
)
from ..ir.walk import substitute
from ..poly import Guard, PolyFacts
from . import cache, private, tensor
from .guards import guard_levels
from .launch import Launch, assemble, persistent_loop, split_coordinates


def lower_loops(model, facts: PolyFacts, launch: Launch, tiles: tensor.TensorMatch | None,
                shared: tuple[cache.SharedCache, ...] = (), scratch: SharedBuffer | None = None,
                registers: tuple[private.PrivateCache, ...] = ()) -> Kernel:
    serial = [model.loop(name) for name in model.serial_loops]
    order = [lp.name for lp in model.loops]
    cached_at, around, blocked = None, ((), ()), ()
    if tiles is not None:
        cached_at, blocked = tensor.accumulator_cache(model, tiles)
        serial = serial[:len(serial) - len(blocked)]  # unrolled into several fragments
    guards_at = guard_levels(model, tiles.kept_guards(facts) if tiles else facts.guards, serial, bool(shared))
    if tiles is not None:
        before, products, after = tensor.tensor_body(
            model, facts, tiles, lambda a: affine_expr(a, order), cached_at, blocked
        )
        innermost = products if cached_at else before + products + after
        around = (before, after)
    else:
        as_expr = lambda a: affine_expr(a, order)  # noqa: E731
        # register tiles first: a register tile filled from a shared one is read in its place
        innermost = tuple(
            cache.redirect_store(dataclasses.replace(s, value=cache.redirect(s.value, shared, as_expr)), shared,
                                 as_expr)
            for s in (private.redirect(in_loops(model, st), registers, as_expr) for st in model.statements)
        )
    unrolled = private.unrolled(registers)
    # a cache placed before a loop that is unrolled into fragments is filled at the innermost level
    shared = tuple(c if c.at in {lp.name for lp in serial} else dataclasses.replace(c, at=None) for c in shared)

    def level(n: int) -> tuple[Stmt, ...]:
        if n == len(serial):
            tile_in, tile_out = private.around(registers, None, lambda a: affine_expr(a, order), shared)
            body = (*tile_in, *innermost, *tile_out)
        else:
            as_expr = lambda a: affine_expr(a, order)  # noqa: E731
            pipe = cache.pipeline(shared, serial[n], facts, as_expr)
            loop = _loop(model, facts, serial[n], (*pipe.head, *level(n + 1), *pipe.tail), unrolled)
            fill = cache.fill(shared, serial[n].name, as_expr)
            # C's fragment kept across the cached loop: set up before it, stored after it
            before, after = around if serial[n].name == cached_at else ((), ())
            tile_in, tile_out = private.around(registers, serial[n].name, as_expr, shared)
            drain = cache.drain(shared, serial[n].name, launch.block, as_expr)
            body = (*before, *tile_in, *fill, *pipe.before, loop, *pipe.after, *drain, *tile_out, *after)
        guards = guards_at.get(n, [])
        if guards:
            body = (If(_conjunction(guards, order), body, "partial tile: stay inside the iteration space"),)
        if n == len(serial):  # caches filled at the innermost level: every thread reaches the barriers
            as_expr = lambda a: affine_expr(a, order)  # noqa: E731
            body = (*cache.fill(shared, None, as_expr), *body, *cache.drain(shared, None, launch.block, as_expr))
        return body

    buffers = tuple(c.buffer for c in shared) + ((scratch,) if scratch is not None else ()) + cache.tma_buffers(shared)
    if launch.persistent is None:
        body = (*launch.coordinates, *level(0))
    else:
        block_lets, group_lets = split_coordinates(model, launch)
        body = (*group_lets, *persistent_loop(launch, (*block_lets, *level(0))))
    body = (*cache.tma_setup(shared), *body)
    return assemble(model, launch, body, buffers, tuple(c.tma for c in shared if c.tma is not None))


def _loop(model, facts: PolyFacts, spec, body: tuple[Stmt, ...], unrolled: set[str]) -> Loop:
    lf = facts.loop(spec.name)
    comment = f"schedule loop {spec.name}: range({spec.begin}, {spec.end}, {spec.step})"
    return Loop(spec.name, Const(lf.first), Const(lf.stop(spec.end)), spec.step, body,
                spec.name in model.unrolled or spec.name in unrolled, comment)


def in_loops(model, store: Store) -> Store:
    """The statement over schedule loops: each nest dimension is the sum of its loops."""
    values: dict[str, Expr] = {}
    for dim, (name, _extent) in enumerate(model.dims):
        pieces = [Var(lp.name) for lp in model.loops if lp.dim == dim]
        total: Expr = pieces[0]
        for piece in pieces[1:]:
            total = Binary("+", total, piece)
        values[name] = total
    return Store(store.buffer, tuple(substitute(i, values) for i in store.index),
                 substitute(store.value, values))


def affine_expr(a: Affine, order: list[str]) -> Expr:
    """An Affine as a readable expression, terms in loop order."""
    rank = {name: n for n, name in enumerate(order)}
    expr: Expr | None = None
    for name, c in sorted(a.terms, key=lambda t: rank.get(t[0], len(rank))):
        term: Expr = Var(name) if abs(c) == 1 else Binary("*", Var(name), Const(abs(c)))
        if expr is None:
            expr = term if c > 0 else Binary("-", Const(0), term)
        else:
            expr = Binary("+" if c > 0 else "-", expr, term)
    if expr is None:
        return Const(a.const)
    if a.const:
        expr = Binary("+" if a.const > 0 else "-", expr, Const(abs(a.const)))
    return expr


def _conjunction(guards: list[Guard], order: list[str]) -> Expr:
    return all_of(_guard_expr(g, order) for g in guards)


def _guard_expr(g: Guard, order: list[str]) -> Expr:
    """``a >= 0`` as ``negative terms <= positive terms + const``, the usual way round."""
    negative = Affine.make({n: -c for n, c in g.affine.terms if c < 0})
    positive = Affine.make({n: c for n, c in g.affine.terms if c > 0}, g.affine.const)
    lhs, rhs = affine_expr(negative, order), affine_expr(positive, order)
    if g.equality:
        return Binary("==", lhs, rhs)
    if not positive.terms:
        return Binary("<", lhs, Const(positive.const + 1))
    return Binary("<=", lhs, rhs)
