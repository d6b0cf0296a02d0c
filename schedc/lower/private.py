"""PRIVATE caches of SIMT nests: register tiles.

``plan.cache(C, index=k, location=PRIVATE)`` gives each thread its own copy of the elements of C
that the loops at and inside ``k`` touch, for fixed outer loops and grid coordinates (a box from
poly, like a shared cache's footprint but per thread). The copy is loaded before ``k``'s loop
(when the nest reads C), the loops inside read and write it, and it is stored after the loop
(when the nest writes C). The loops inside ``k`` that index the tile are unrolled, so that every
subscript of the copy is a constant and the compiler keeps it in registers.

At an index bound to the grid (Accera's caching at a thread-bound loop), each thread sees one
value of every bound loop, so its tile is its footprint over the loops at and inside the index
that it runs itself: the copies go before the first of those loops after the index, or around
the statements when none follows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import poly
from ..errors import CacheError
from ..ir.affine import Affine, extent_expr
from ..ir.kernel import Binary, Const, Expr, If, Load, Loop, PrivateArray, Stmt, Store, Var, all_of
from ..ir.patterns import buffers_read
from ..ir.walk import map_expr, map_stmt
from ..targets import MemorySpace
from .cache import MAX_TILE_REGISTERS, footprint, placement, redirect_store, relative
from .cache import redirect as redirect_shared
from .guards import guard_levels


@dataclass(frozen=True)
class PrivateCache:
    array: str
    index: str
    buffer: PrivateArray
    origin: tuple[Affine, ...]  # the tile's first element, over outer loops and grid coordinates
    load: bool  # the nest reads the array: copy it in before the loop
    store: bool  # the nest writes it: copy it out after the loop
    limits: tuple[int, ...] = ()  # the array's shape when the tile may reach past it (copies guarded)
    unrolled: tuple[str, ...] = ()  # loops inside ``index`` that index the tile
    before_start: bool = False  # the tile may also start before the array (reversed accesses): guard that end too
    from_shared: bool = False  # filled from the array's SHARED tile (a cache of a cache), not from global memory
    at: str | None = None  # the serial loop the copies surround: ``index`` or the first after it (None: the statements)


# a tile over the registers' share lives in local memory, up to this per thread (Accera's 16x16
# tiles of float32 or float64); larger ones are refused: their copies dominate the thread's work
MAX_LOCAL_BYTES = 2048


def plan_private(model, facts: poly.PolyFacts, barriers: bool) -> tuple[PrivateCache, ...]:
    """Check every PRIVATE cache and describe its register tile (``barriers``: the kernel has
    some, which moves guards on thread coordinates around the statements)."""
    return tuple(_plan(model, facts, spec, barriers) for spec in model.caches
                 if spec.location is MemorySpace.PRIVATE)


def _plan(model, facts, spec, barriers: bool) -> PrivateCache:
    here = f"cache({spec.array}, index={spec.index}, location=PRIVATE)"
    if model.tensorize is not None:
        raise CacheError(here, "PRIVATE caches are register tiles of SIMT nests; a tensorized plan keeps "
                               "its accumulator in MMA_FRAGMENT", loops=(spec.index,))
    at = model.first_serial(spec.index)
    names = [lp.name for lp in model.loops]
    position = names.index(spec.index)
    fixed = tuple(n for i, n in enumerate(names) if i < position or model.binding_of(n) is not None)
    inside = [n for n in names[position:] if model.binding_of(n) is None]
    # over every loop's whole range: threads past a partial tile run the copies too (guarded)
    fp = footprint(model, spec, here, fixed, guards=())
    buffer = PrivateArray(f"{spec.array}_private", model.buffer(spec.array).dtype, fp.extents)
    local = buffer.registers > MAX_TILE_REGISTERS  # kept in local memory, as Accera's would be
    if local and buffer.size * buffer.dtype.size > MAX_LOCAL_BYTES:
        raise CacheError(here, f"each thread's tile {fp} is {math.prod(fp.extents)} elements: "
                               f"{buffer.size * buffer.dtype.size} bytes per thread, over the {MAX_LOCAL_BYTES} "
                               "schedc keeps in a thread's local memory; cache at a loop further in, or give each "
                               "thread fewer elements", loops=(spec.index,))
    buffer = dataclasses.replace(buffer, local=local)
    accesses = [a for a in facts.accesses if a.array == spec.array]
    unrolled = () if local else tuple(n for n in inside if any(sub.coeff(n) for a in accesses
                                                              for sub in a.subscripts))
    reads = any(spec.array in buffers_read(s.value) for s in model.statements)
    writes = any(s.buffer == spec.array for s in model.statements)
    # the guards lowering places around the copies (at the cache index's depth or outside)
    serial = [model.loop(n) for n in model.serial_loops]
    depth = len(serial) if at is None else model.serial_loops.index(at)
    levels = guard_levels(model, facts.guards, serial, barriers)
    enclosing = tuple(g for level, guards in levels.items() if level <= depth for g in guards)
    if writes and not poly.writes_whole_box(model, fp, enclosing):
        raise CacheError(here, f"each thread's tile {fp} holds elements the thread does not write (its elements "
                               "are strided, e.g. a split whose inner piece is bound to threads, or the nest covers "
                               f"only part of {spec.array}); storing the tile back would overwrite elements other "
                               "threads own: cache at a loop inside which each thread writes a whole box",
                         loops=(spec.index,))
    limits = () if fp.inside else fp.bounds
    if spec.from_shared:
        _check_inside_shared(model, spec, at, here)
    return PrivateCache(spec.array, spec.index, buffer, fp.origin, reads, writes, limits, unrolled,
                        not fp.starts_inside, spec.from_shared, at)


def _check_inside_shared(model, spec, placed: str | None, here: str) -> None:
    """A register tile filled from a shared tile: the shared cache is kept across a loop outside
    the register tile's (then each register tile is part of the block's shared one: it ranges
    over fewer loops, with more of them fixed)."""
    shared = next(c for c in model.caches if c.array == spec.array and c.location is MemorySpace.SHARED)
    names = [lp.name for lp in model.loops]
    at = placement(model, shared.index)
    inner = len(names) if placed is None else names.index(placed)
    if at is None or inner <= names.index(at):
        where = (f"before {at}'s loop" if at is not None else "at the innermost level, inside every loop")
        raise CacheError(here, f"the register tile is filled from {spec.array}'s shared tile, which the block fills "
                               f"{where} (kept across {shared.index}): cache at a serial loop inside "
                               f"{at or shared.index} (the schedule's order is {', '.join(names)})",
                         loops=(spec.index, shared.index))


def unrolled(caches: tuple[PrivateCache, ...]) -> set[str]:
    return {n for c in caches for n in c.unrolled}


def around(caches: tuple[PrivateCache, ...], index: str | None, as_expr,
           shared: tuple = ()) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """(before, after) ``index``'s loop (None: the statements): each tile placed there declared
    and loaded (from its shared tile, for a cache of a cache: ``shared`` are the kernel's
    SharedCaches), then stored."""
    before: list[Stmt] = []
    after: list[Stmt] = []
    for c in caches:
        if c.at != index:
            continue
        before.append(c.buffer)
        if c.load:
            source = next((s for s in shared if s.array == c.array), None) if c.from_shared else None
            copy = _copy(c, as_expr, inward=True, within=source)
            if source is not None:
                copy = map_loads(copy, lambda e: redirect_shared(e, shared, as_expr))
            before.append(copy)
        if c.store:  # into the array's shared tile, for a cache of a cache (the block writes that back)
            source = next((s for s in shared if s.array == c.array), None) if c.from_shared else None
            copy = _copy(c, as_expr, inward=False, within=source)
            if source is not None:
                copy = map_stores(copy, lambda st: redirect_store(st, shared, as_expr))
            after.append(copy)
    return tuple(before), tuple(after)


def _copy(c: PrivateCache, as_expr, inward: bool, within=None) -> Stmt:
    """Unrolled loops over the tile: global → tile (``inward``) or tile → global, each element
    guarded where the tile may reach past the array; filled from a shared tile (``within``,
    a SharedCache), only the elements inside that tile (a register tile over a loop's whole
    range reaches past a partial shared tile; what lies past it is never read)."""
    points = tuple(Var(f"{c.array}_p{d}") for d in range(len(c.buffer.shape)))
    element = tuple(Binary("+", as_expr(o), p) for o, p in zip(c.origin, points))
    dtype = c.buffer.dtype
    if inward:
        body: Stmt = Store(c.buffer.name, points, Load(c.array, element, dtype))
    else:
        body = Store(c.array, element, Load(c.buffer.name, points, dtype))
    tests: list[Expr] = []
    if c.limits:
        tests = [Binary("<", e, extent_expr(n)) for e, n in zip(element, c.limits)]
        if c.before_start:
            tests = [*(Binary("<=", Const(0), e) for e in element), *tests]
    if within is not None:
        extents = within.buffer.shape[-len(points):]
        starts = [o.plus(w.scale(-1)) for o, w in zip(c.origin, within.origin)]
        offsets = [Binary("+", as_expr(d), p) for d, p in zip(starts, points)]
        tests += [Binary("<", e, Const(n)) for e, n in zip(offsets, extents)]
        # a padded thread's tile may start before the shared tile (a subscript that runs backwards)
        tests += [Binary("<=", Const(0), e) for e, d in zip(offsets, starts)
                  if d.const < 0 or any(coefficient < 0 for _, coefficient in d.terms)]
    if tests:
        inside = all_of(tests)
        body = If(inside, (body,), f"the part of the tile inside {c.array}"
                  + ("'s shared tile" if within is not None else ""))
    for d in reversed(range(len(points))):
        comment = "" if d else (f"{c.array}'s tile: into registers" if inward else f"{c.array}'s tile: back to "
                                                                                    "global memory")
        body = Loop(points[d].name, Const(0), Const(c.buffer.shape[d]), 1, (body,), True, comment)
    return body


def redirect(store: Store, caches: tuple[PrivateCache, ...], as_expr) -> Store:
    """Reads and writes of cached arrays go to the threads' tiles, relative to the tile's origin."""
    by_array = {c.array: c for c in caches}

    def visit(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in by_array:
            c = by_array[e.buffer]
            return Load(c.buffer.name, relative(e.index, c.origin, as_expr), e.dtype)
        return e

    value = map_expr(store.value, visit)
    if store.buffer in by_array:
        c = by_array[store.buffer]
        return Store(c.buffer.name, relative(store.index, c.origin, as_expr), value)
    return Store(store.buffer, store.index, value)


def map_stores(s: Stmt, visit) -> Stmt:
    """``visit`` applied to every Store inside ``s``."""
    (out,) = map_stmt((s,), lambda st: visit(st) if isinstance(st, Store) else st)
    return out


def map_loads(s: Stmt, visit) -> Stmt:
    """``visit`` applied to the value of every Store inside ``s``."""
    (out,) = map_stmt((s,), lambda st: dataclasses.replace(st, value=visit(st.value)) if isinstance(st, Store) else st)
    return out
