"""Warp specialization and software pipelining: passes over a wgmma plan's tile program.

``hopper.lower_warpgroups`` writes each operand tile's *fill* where the tile is used: in the
consumers' loop, thread 0 waits until the tile's stage is free, expects its bytes on the stage's
full barrier and issues its TMA boxes; the consumers wait for it, multiply, wait for their products
(``wgmma.wait_group 0``) and free the stage. A fill is an ``If`` whose body expects bytes on a
fill barrier (``FILLS``). Two passes make that program fast:

- ``specialize`` (warp specialization): a producer warpgroup runs the *slice* of the consumers'
  program that issues fills (its loops, the lets they read, the fills, in the consumers' order)
  while the consumers keep the rest; ``setmaxnreg`` moves registers between the two roles.
  Before → after::

      for k: lets; [fill k]; wait full; products; wait 0; free k
        →  producer: for k: lets; fill k          consumers: for k: lets; wait full; products; wait 0; free k

- ``pipeline`` (a ring of ``stages``): the consumers keep one group of products in flight
  (``wait_group 1``) and free the stage of the tile before, the last stage after the pass; fills
  still in the consumers' loop (no producer) are issued ``stages - 1`` tiles ahead, the first
  ones before the pass (the prologue). A fill of a one-stage buffer (a chain's second B) moves to
  the start of its loop's iteration, the earliest point its stage is free. Before → after::

      for k: lets; fill k; wait full; products; wait 0; free k
        →  fill 0 .. S-2;  for k: lets; wait full; products; wait 1; free k-1; fill k+S-1;  wait 0; free last

  Products issued right after the pass under a condition (a chain's second product of the tile
  before, ``plan.overlap``) stay in flight: the pass's last wait joins them, ``wait 1`` where they
  were issued, ``wait 0`` where not.
"""

from __future__ import annotations

import dataclasses

from ..ir.kernel import (
    WORK,
    Barrier,
    Binary,
    ClusterSync,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Loop,
    MbarrierArrive,
    MbarrierWait,
    NamedBarrier,
    Role,
    Roles,
    Stmt,
    TmaLoad,
    Var,
    WarpgroupCommit,
    WarpgroupWait,
)
from ..ir.walk import exprs, map_all_exprs, map_bodies, map_stmt, substitute, variables, walk_statements
from . import chained, hopper
from .launch import WARPGROUP, Launch, persistent_loop
from .registers import PRODUCER_THREADS

FILLS = (hopper.FULL, chained.FULL, hopper.ITEM_FULL)  # the barriers whose phases a fill's bytes complete


def is_fill(s: Stmt, barriers: tuple[str, ...] = FILLS) -> bool:
    """Whether ``s`` is a tile's fill: an ``If`` that expects bytes on one of ``barriers``."""
    return isinstance(s, If) and any(isinstance(x, MbarrierArrive) and x.transaction_bytes and x.barrier in barriers
                                     for x in s.body)


# -- warp specialization -------------------------------------------------------------------------


def specialize(kernel: Kernel, launch: Launch, producer_registers: int, consumer_registers: int) -> Kernel:
    """The producer warpgroup issues every fill, the consumers run the rest (module docstring)."""
    setup = _setup_length(kernel.body)
    tail = 1 if kernel.body and isinstance(kernel.body[-1], ClusterSync) and setup < len(kernel.body) - 1 else 0
    consumer = kernel.body[setup:len(kernel.body) - tail]
    if len(consumer) == 1 and isinstance(consumer[0], Roles):  # teams: the consumers' role
        consumer = consumer[0].roles[0].body
    consumers = kernel.block[0]
    issuing = _slice(consumer, launch)
    producer = (If(Binary("==", Binary("%", Var("threadIdx.x"), Const(WARPGROUP)), Const(0)), issuing,
                   "one thread of the producer warpgroup issues every copy"),)
    roles = Roles((Role("producer", consumers, PRODUCER_THREADS, producer_registers, producer),
                   Role("consumers", 0, consumers, consumer_registers,
                        map_stmt(consumer, lambda s: () if is_fill(s) else s), launch.teams)))
    body = (*kernel.body[:setup], roles, *kernel.body[len(kernel.body) - tail:])
    # ptxas allocates the code after setmaxnreg within its count only where __launch_bounds__ names
    # the blocks a multiprocessor (measured with nvcc 13.0 for sm_90a: 200 values kept across a loop
    # spill past 168 registers in a 384-thread kernel under __launch_bounds__(384), and fit the 232
    # of setmaxnreg under __launch_bounds__(384, 1))
    moved = producer_registers or consumer_registers
    return dataclasses.replace(kernel, body=body, block=(consumers + PRODUCER_THREADS, 1, 1),
                               min_blocks=kernel.min_blocks or (1 if moved else 0))


def _setup_length(body: tuple[Stmt, ...]) -> int:
    """The statements that set up the barriers: through the first block or cluster barrier."""
    return next(n for n, s in enumerate(body) if isinstance(s, Barrier | ClusterSync)) + 1


def _slice(body: tuple[Stmt, ...], launch: Launch) -> tuple[Stmt, ...]:
    """What issues the fills of ``body``: its fills' statements, the loops around them and the
    lets they read, in order; a persistent loop dealt out to teams takes every work item."""
    out: list[Stmt] = []
    for s in body:
        if is_fill(s):
            out += s.body
        elif isinstance(s, Loop | If):
            inner = _slice(s.body, launch)
            if not any(isinstance(x, TmaLoad) for x in walk_statements(inner)):
                continue
            if isinstance(s, If):
                out.append(dataclasses.replace(s, body=inner, orelse=()))
            elif s.var == WORK and launch.teams > 1:
                every = persistent_loop(launch, ())[0]
                out.append(dataclasses.replace(s, start=every.start, step=every.step, comment=every.comment,
                                               body=inner))
            else:
                out.append(dataclasses.replace(s, body=inner))
        elif isinstance(s, Let):
            out.append(s)
    return _read_lets(tuple(out))


def _read_lets(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``body`` without the lets nothing after them reads."""
    kept: list[Stmt] = []
    read: set[str] = set()
    for s in reversed(body):
        if isinstance(s, Let) and s.name not in read:
            continue
        kept.append(s)
        for x in walk_statements((s,)):
            for e in exprs(x):
                read |= variables(e)
    return tuple(reversed(kept))


# -- software pipelining -------------------------------------------------------------------------


def pipeline(kernel: Kernel, ring: hopper.Ring) -> Kernel:
    """The ring's stages overlapped and one-stage fills hoisted (module docstring), in the consumers' part."""

    def consumers(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        return _hoist_single(_rewrite_pass(body, ring)) if ring.stages > 1 else _hoist_single(body)

    roles = next((s for s in kernel.body if isinstance(s, Roles)), None)
    if roles is None:
        return dataclasses.replace(kernel, body=consumers(kernel.body))
    parts = tuple(dataclasses.replace(r, body=consumers(r.body)) if r.name == "consumers" else r for r in roles.roles)
    return dataclasses.replace(kernel, body=tuple(Roles(parts) if s is roles else s for s in kernel.body))


def _rewrite_pass(body: tuple[Stmt, ...], ring: hopper.Ring) -> tuple[Stmt, ...]:
    """The list holding the pipelined loops (or, without them, the tile's step) rewritten."""
    names = ring.shape.pipelined
    if names:
        at = next((n for n, s in enumerate(body) if isinstance(s, Loop) and s.var == names[0]), None)
        span = (at, at + 1) if at is not None else None
    else:
        at = next((n for n, s in enumerate(body) if isinstance(s, Let) and s.name == "tile"), None)
        span = (at, _step_end(body, at) + 1) if at is not None else None
    if span is None:
        return tuple(map_bodies(s, lambda inner: _rewrite_pass(inner, ring)) for s in body)
    first, last = span
    region = body[first:last]
    found: list[Stmt] = []
    region = (_innermost(region[0], lambda step: _step(step, ring, found)),) if names else _step(region, ring, found)
    start = first - 1 if first and _turn(body[first - 1], MbarrierWait) else first
    end = last + 1 if last < len(body) and _turn(body[last], MbarrierArrive) else last
    prologue = _prologue(found[0], ring) if found else ()
    issued = body[end] if end < len(body) and _issued(body[end]) else None
    rest = end + (issued is not None)
    passed = body[rest:rest + 1] if rest < len(body) and _passes_turn(body[rest]) else ()
    rest += len(passed)  # the turn handed on before the waits: the next warpgroup issues while this one waits
    finish: tuple[Stmt, ...] = (*passed, WarpgroupWait(0), _release_last(ring))
    if issued is not None:  # products issued after the pass stay in flight past its wait
        # (one If for both: ptxas serializes wgmma where a path it cannot rule out races)
        finish = (If(issued.cond, (*issued.body, *passed, WarpgroupWait(1)),
                     issued.comment + "; the pass's products done", (*passed, WarpgroupWait(0))), _release_last(ring))
    return (*body[:start], *prologue, *body[start:first], *region, *body[last:end], *finish, *body[rest:])


def _issued(s: Stmt) -> bool:
    """Whether ``s`` issues products under a condition and leaves them in flight (a chain's second
    product of the tile before, ``plan.overlap``): an If whose body ends with their commit."""
    return isinstance(s, If) and bool(s.body) and isinstance(s.body[-1], WarpgroupCommit) and not s.orelse


def _passes_turn(s: Stmt) -> bool:
    """Whether ``s`` hands the turn to the next consumer warpgroup (``plan.alternate``)."""
    return isinstance(s, NamedBarrier) and s.arrive


def _step_end(body: tuple[Stmt, ...], start: int) -> int:
    """The index of the free that ends the tile's step begun at ``start`` (after its wait for the products)."""
    return next(n for n in range(start, len(body)) if isinstance(body[n], WarpgroupWait)) + 1


def _innermost(loop: Loop, fn) -> Loop:
    """``loop`` with the body of its innermost nested loop (a loop alone in its body) rewritten."""
    if len(loop.body) == 1 and isinstance(loop.body[0], Loop):
        return dataclasses.replace(loop, body=(_innermost(loop.body[0], fn),))
    return dataclasses.replace(loop, body=fn(loop.body))


def _turn(s: Stmt, kind: type) -> bool:
    """Whether ``s`` waits for (``MbarrierWait``) or hands on (``MbarrierArrive``) a team's turn."""
    return any(isinstance(x, kind) and x.barrier == hopper.TURN for x in walk_statements((s,)))


def _step(step: tuple[Stmt, ...], ring: hopper.Ring, found: list[Stmt]) -> tuple[Stmt, ...]:
    """One tile's step with a group of products left in flight and the tile before's stage freed
    (where there are pipelined loops); its fill (collected in ``found``) issued ``stages - 1`` ahead."""
    out: list[Stmt] = []
    end = _step_end(step, 0)
    for n, s in enumerate(step):
        if is_fill(s, (hopper.FULL,)):
            found.append(s)
        elif isinstance(s, WarpgroupWait):
            out.append(WarpgroupWait(1))
        elif n == end:
            if ring.shape.pipelined:
                out.append(_release_previous(ring))
        else:
            out.append(s)
    if found and ring.shape.pipelined:
        out += _ahead(found[0], ring, ring.stages - 1)
    return tuple(out)


def _release_previous(ring: hopper.Ring) -> Stmt:
    released = Binary("%", Binary("+", Binary("-", Var("tile"), Const(1)), Const(ring.stages)), Const(ring.stages))
    free = ring.free(released, "the previous tile's products are done: its stage is free")
    first = ring.first_pipelined()
    return free if first is None else If(_not(first), (free,))


def _not(cond: Expr) -> Expr:
    """The negation of a conjunction of equalities: a disjunction of inequalities."""
    if isinstance(cond, Binary) and cond.op == "&&":
        return Binary("||", _not(cond.lhs), _not(cond.rhs))
    return Binary("!=", cond.lhs, cond.rhs)


def _release_last(ring: hopper.Ring) -> Stmt:
    """After the pass: the last tile's stage is free too."""
    last = {n: Const(ring.facts.loop(n).last) for n in ring.shape.pipelined}
    t = substitute(ring.counter(), last)
    return ring.free(Binary("%", t, Const(ring.stages)), "the pass's last stage is free")


def _at(fill: If, values: dict[str, Expr], wait_comment: str = "") -> tuple[Stmt, ...]:
    """A fill's statements for another tile: ``values`` of its stage, parity and loops."""
    wait, arrive, *copies = fill.body

    def put(s: Stmt) -> Stmt:
        return map_all_exprs(s, lambda e: values.get(e.name, e) if isinstance(e, Var) else e)

    return (dataclasses.replace(put(wait), comment=wait_comment), dataclasses.replace(put(arrive), comment=""),
            *(put(c) for c in copies))


def _ahead(fill: If, ring: hopper.Ring, distance: int) -> tuple[Stmt, ...]:
    """Thread 0 issues the fill of the tile ``distance`` ahead of the current one (in the same pass
    of the pipelined loops), after its stage is free."""
    names = ring.shape.pipelined
    ahead = Binary("+", ring.counter(names), Const(distance))
    values: dict[str, Expr] = {}
    rest: Expr = Var("ahead")
    for name in reversed(names):  # decode the tile ahead into loop values, innermost fastest
        lf, spec = ring.facts.loop(name), ring.model.loop(name)
        digit = Binary("%", rest, Const(lf.extent)) if name != names[0] else rest
        values[name] = Binary("+", Binary("*", digit, Const(spec.step)), Const(lf.first))
        rest = Binary("/", rest, Const(lf.extent))
    tile = Binary("+", Var("tile"), Const(distance))
    values["stage"] = Var("ahead_stage")
    values["parity"] = Binary("%", Binary("/", tile, Const(ring.stages)), Const(2))
    issue = (Let("ahead_stage", Binary("%", tile, Const(ring.stages)), f"the stage of the tile {distance} ahead"),
             *_at(fill, values, "its previous tile's consumers released it"))
    return (Let("ahead", ahead, f"the tile {distance} ahead in this pass"),
            If(Binary("&&", Binary("==", Var("threadIdx.x"), Const(0)), Binary("<", Var("ahead"), Const(ring.trips()))),
               issue, f"thread 0 copies the tile {distance} ahead"))


def _prologue(fill: If, ring: hopper.Ring) -> tuple[Stmt, ...]:
    """Without a producer: the first ``stages - 1`` tiles of a pass, before its loop."""
    names = ring.shape.pipelined
    count = min(ring.stages - 1, ring.trips())
    firsts = {n: Const(ring.facts.loop(n).first) for n in names}
    base = substitute(ring.counter(), firsts)
    out: list[Stmt] = []
    for d in range(count):
        values: dict[str, Expr] = dict(firsts)
        rest = d
        for name in reversed(names):
            lf, spec = ring.facts.loop(name), ring.model.loop(name)
            values[name] = Const(lf.first + (rest % lf.extent) * spec.step)
            rest //= lf.extent
        t = Binary("+", base, Const(d))
        values["stage"] = Binary("%", t, Const(ring.stages))
        values["parity"] = Binary("%", Binary("/", t, Const(ring.stages)), Const(2))
        out += _at(fill, values)
    return (If(Binary("==", Var("threadIdx.x"), Const(0)), tuple(out),
               f"thread 0 copies the first {count} tile(s) of the pass"),) if out else ()


def _hoist_single(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """A one-stage fill (a chain's second B) at the start of its loop's iteration: its stage is
    free from there (the tile before's products are done), so its copy overlaps the first product."""
    single = [s for s in body if is_fill(s, (chained.FULL,))]
    if single:
        return (*single, *(s for s in body if not is_fill(s, (chained.FULL,))))
    return tuple(map_bodies(s, _hoist_single) for s in body)
