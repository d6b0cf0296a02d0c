"""Loop-nest lowering: serial loops in schedule order, guards for partial tiles, and the
per-thread statements (or the tensorized tile) at the innermost point."""

from __future__ import annotations

import copy as copy_module
import dataclasses

from ..ir.affine import Affine, affine_expr, extent_expr
from ..ir.kernel import (
    Barrier,
    Binary,
    Const,
    Expr,
    If,
    Kernel,
    Loop,
    SharedBuffer,
    Stmt,
    Var,
    all_of,
)
from ..ir.patterns import buffers_read
from ..poly import Guard, PolyFacts
from . import cache, private, reduce, tensor
from .fused import in_loops
from .guards import guard_levels
from .launch import Launch, assemble, persistent_loop, split_coordinates
from .scratch import arrays as scratch_arrays


def lower_loops(model, facts: PolyFacts, launch: Launch, tiles: tensor.TensorMatch | None,
                shared: tuple[cache.SharedCache, ...] = (), scratch: SharedBuffer | None = None,
                registers: tuple[private.PrivateCache, ...] = ()) -> Kernel:
    serial = [model.loop(name) for name in model.serial_loops]
    order = [lp.name for lp in model.loops]
    as_expr = lambda a: affine_expr(a, order)  # noqa: E731
    cached_at, around, blocked = None, ((), ()), ()
    if tiles is not None:
        cached_at, blocked = tensor.accumulator_cache(model, tiles)
        serial = serial[:len(serial) - len(blocked)]  # unrolled into several fragments
    guards = list(tiles.kept_guards(facts) if tiles else facts.guards)
    if tiles is not None:
        before, products, after = tensor.tensor_body(model, facts, tiles, as_expr, cached_at, blocked)
        innermost = products if cached_at else before + products + after
        around = (before, after)
    else:
        innermost = _statements(model, model.statements, shared, registers, as_expr)
    scratch_tiles = scratch_arrays(model)  # the arrays a reduction may write in a scratch tile
    across = reduce.find(model, scratch=scratch_tiles) if tiles is None and model.fusion is None else ()
    if across:  # each thread's partials: the statements add into them
        innermost = tuple(reduce.partial_update(r, s) for r, s in zip(across, innermost, strict=True))
    unrolled = private.unrolled(registers)
    # a cache placed before a loop that is unrolled into fragments is filled at the innermost level
    shared = tuple(c if c.at in {lp.name for lp in serial} else dataclasses.replace(c, at=None) for c in shared)
    parted = []
    if model.fusion is not None and tiles is None:
        parted = [r for part in model.parts for r in reduce.find(part, model.outside_fusion, scratch=scratch_tiles)]
    combine = reduce.scratches((*across, *parted), launch.block)
    nest = _Nest(model, facts, launch, shared, registers, unrolled, cached_at, around, as_expr,
                 barriers=bool(shared) or bool(combine) or bool(threaded_units(model)))
    if across:
        body = _across_threads(model, nest, across, serial, innermost, guards)
    elif model.fusion is None or tiles is not None:
        body = nest.levels(serial, innermost, guards)
    else:
        body = _fused(model, nest, serial, guards)

    buffers = tuple(c.buffer for c in shared) + ((scratch,) if scratch is not None else ()) \
        + combine + cache.tma_buffers(shared)
    if launch.persistent is None:
        body = (*launch.coordinates, *body)
    else:
        block_lets, group_lets = split_coordinates(model, launch)
        body = (*group_lets, *persistent_loop(launch, (*block_lets, *body)))
    body = (*cache.tma_setup(shared), *body)
    return assemble(model, launch, body, buffers, tuple(c.tma for c in shared if c.tma is not None))


def _statements(model, stores, shared, registers, as_expr) -> tuple[Stmt, ...]:
    """The statements over schedule loops, reading and writing the caches in place of arrays
    (register tiles first: a register tile filled from a shared one is read in its place)."""
    return tuple(
        cache.redirect_store(dataclasses.replace(s, value=cache.redirect(s.value, shared, as_expr)), shared, as_expr)
        for s in (private.redirect(in_loops(model, st), registers, as_expr) for st in stores)
    )


def _fused(model, nest: _Nest, serial: list, guards: list[Guard]) -> tuple[Stmt, ...]:
    """A fused schedule's loops: those before the fusing index once; inside it each part's own
    loops (the others' unfused dimensions left out) around its statements, part after part. A
    guard goes with the loops it names: outside when all of them are, else in each part that
    iterates them all. Where parts run their own loops on the block's threads, a barrier
    separates the parts, a part without a loop on a thread axis runs on its first thread only,
    and a part that reduces across threads combines them (``_across_threads``)."""
    outside = model.outside_fusion
    scratch_tiles = scratch_arrays(model)
    outer = [lp for lp in serial if lp.name in outside]
    inner = {lp.name for lp in serial} - outside
    threaded = threaded_units(model)
    parts: list[Stmt] = []
    for number, part in enumerate(model.parts):
        mine = {lp.name for lp in part.loops} | set(model.size_names)  # a guard may name run-time sizes too
        loops = [lp for lp in serial if lp.name in mine and lp.name not in outside]
        kept = [g for g in guards if g.affine.variables() & inner and g.affine.variables() <= mine
                or nest.thread_guard(g) and g.affine.variables() <= mine]
        own = nest.for_part(part, outside, {lp.name for lp in loops})
        statements = _statements(model, part.statements, own.shared, own.registers, nest.as_expr)
        across = reduce.find(part, outside, base=f"{reduce.PARTIAL}_{number}", scratch=scratch_tiles)
        if across:
            statements = tuple(reduce.partial_update(r, st) for r, st in zip(across, statements, strict=True))
        idle = [Binary("==", Var(f"threadIdx.{u.axis}"), Const(0)) for u in sorted(threaded, key=str)
                if all(b.unit is not u for b in part.bindings)]
        if idle:  # the part's instances lie at the others' first thread (Accera's padding)
            statements = (If(all_of(idle), statements, "this part runs on the first thread of the axis"),)
        if threaded and number:
            parts.append(Barrier("the part before has written what this one reads"))
        if across:
            parts += _across_threads(part, own, across, loops, statements, kept, tuple(idle))
        else:
            parts += own.levels(loops, statements, kept)
    top = [g for g in guards if not g.affine.variables() & inner and not nest.thread_guard(g)]
    return nest.levels(outer, tuple(parts), top, parts=True)


def _across_threads(model, nest: _Nest, across: tuple[reduce.ThreadReduction, ...], serial: list, innermost,
                    guards, idle: tuple[Expr, ...] = ()):
    """Reductions across threads (one a statement of the nest or part): the partials set before
    the serial loops, the combines after them (every thread of the block reaches them: no guard
    wraps them), each total written by the row's first thread where the row's own guards hold
    (and ``idle``: a fused schedule's part runs on the first thread of the axes it has no loop
    on)."""
    serial_names = {lp.name for lp in serial}
    row = [g for g in guards if not g.affine.variables() & (serial_names | set(across[0].loops))]
    conditions = [*([_conjunction(row, [lp.name for lp in model.loops])] if row else []), *idle]
    kept = all_of(conditions) if conditions else None
    first = {name: nest.facts.loop(name).first for name in across[0].loops}
    before, combines, writes = [], [], []
    for reduction, store in zip(across, model.statements, strict=True):
        # over the whole schedule's loops (a fused schedule's part), in its scratch tile where it has one
        target = cache.redirect_store(in_loops(model, store), nest.shared, nest.as_expr)
        start, (combine, write) = reduce.around(reduction, target, model.buffer(store.buffer).dtype,
                                                nest.launch.block, kept, first)
        before += start
        combines.append(combine)
        writes.append(write)
    return (*before, *nest.levels(serial, innermost, guards), *combines, *writes)


def threaded_units(model) -> set:
    """The thread axes a fused schedule's parts run their own loops on."""
    if model.fusion is None:
        return set()
    unfused = {model.dims[d][0] for dims in model.fusion.unfused for d in dims}
    return {b.unit for b in model.bindings if b.unit.level == "thread"
            and any(model.dims[model.loop(n).dim][0] in unfused for n in b.loops)}


class _Nest:
    """The serial loops around a body: pipelines, cache fills and drains, register tiles, C's
    fragment kept across its cached loop, the guards of partial tiles at their depths."""

    def __init__(self, model, facts, launch, shared, registers, unrolled, cached_at, around, as_expr,
                 barriers: bool = False) -> None:
        self.model, self.facts, self.launch = model, facts, launch
        self.shared, self.registers, self.unrolled = shared, registers, unrolled
        self.cached_at, self.around, self.as_expr = cached_at, around, as_expr
        self.barriers = barriers  # the kernel has barriers: guards on threads wrap the statements only

    def for_part(self, part, outside: set[str], loops: set[str]) -> _Nest:
        """The nest of a fused schedule's part: the caches placed outside the fusing index, and
        those of the arrays the part's statements use placed at its own loops or at its
        statements (the other parts' are not theirs to fill or read)."""
        used = {s.buffer for s in part.statements} | {b for s in part.statements for b in buffers_read(s.value)}

        def mine(c) -> bool:
            return c.at in outside or c.array in used and (c.at is None or c.at in loops)

        copy = copy_module.copy(self)
        copy.shared = tuple(c for c in self.shared if mine(c))
        copy.registers = tuple(c for c in self.registers if mine(c))
        return copy

    def thread_guard(self, g: Guard) -> bool:
        """A guard on thread or warp coordinates, which wraps the statements only where the
        kernel has barriers (every thread of the block still reaches each one)."""
        units = [self.model.binding_of(v) for v in g.affine.variables()]
        return self.barriers and any(u is not None and u.level != "block" for u in units)

    def levels(self, serial: list, innermost: tuple[Stmt, ...], guards: list[Guard],
               parts: bool = False) -> tuple[Stmt, ...]:
        """``serial`` loops around ``innermost`` (``parts``: the parts of a fused schedule, which
        place their own innermost caches and register tiles)."""
        guards_at = guard_levels(self.model, guards, serial, self.barriers)
        order = [lp.name for lp in self.model.loops]
        as_expr, shared, registers = self.as_expr, self.shared, self.registers

        def level(n: int) -> tuple[Stmt, ...]:
            if n == len(serial):
                tile_in, tile_out = ((), ()) if parts else private.around(registers, None, as_expr, shared)
                body = (*tile_in, *innermost, *tile_out)
            else:
                pipe = cache.pipeline(shared, serial[n], self.facts, as_expr)
                loop = _loop(self.model, self.facts, serial[n], (*pipe.head, *level(n + 1), *pipe.tail), self.unrolled)
                fill = cache.fill(shared, serial[n].name, as_expr)
                # C's fragment kept across the cached loop: set up before it, stored after it
                before, after = self.around if serial[n].name == self.cached_at else ((), ())
                tile_in, tile_out = private.around(registers, serial[n].name, as_expr, shared)
                drain = cache.drain(shared, serial[n].name, self.launch.block, as_expr)
                body = (*before, *tile_in, *fill, *pipe.before, loop, *pipe.after, *drain, *tile_out, *after)
            guards = guards_at.get(n, [])
            if guards:
                body = (If(_conjunction(guards, order), body, "partial tile: stay inside the iteration space"),)
            if n == len(serial) and not parts:  # caches filled innermost: every thread reaches the barriers
                block = self.launch.block
                body = (*cache.fill(shared, None, as_expr), *body, *cache.drain(shared, None, block, as_expr))
            return body

        return level(0)


def _loop(model, facts: PolyFacts, spec, body: tuple[Stmt, ...], unrolled: set[str]) -> Loop:
    lf = facts.loop(spec.name)
    comment = f"schedule loop {spec.name}: range({spec.begin}, {spec.end}, {spec.step})"
    return Loop(spec.name, Const(lf.first), extent_expr(lf.stop(spec.end)), spec.step, body,
                spec.name in model.unrolled or spec.name in unrolled, comment)


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
