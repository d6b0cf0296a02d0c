"""Legality of a plan, with witnesses: races between grid coordinates and loop orders that
break a dependence. Every "no" comes with the two iterations and the element (isl lexmin).

- A *race*: two iterations on different grid coordinates (blocks, warps or threads, which run
  concurrently without synchronisation) touch the same element and one of them writes it.
- An *order violation*: on one grid coordinate, two iterations touch the same element (one
  writing), the nest runs them in one order and the schedule in the other. Updates of one
  reduction ``T = T + X`` are exempt: they may be reassociated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import islpy as isl

from ..ir.affine import Affine
from ..ir.sizes import when
from . import sets


@dataclass(frozen=True)
class Conflict:
    kind: str  # "race" or "order"
    array: str
    element: tuple[int, ...]
    first: dict[str, int]  # loop values of the iteration the nest runs first (race: either)
    second: dict[str, int]
    first_writes: bool
    second_writes: bool
    first_statement: int
    second_statement: int
    sizes: tuple[tuple[str, int], ...] = ()  # the run-time sizes where it happens

    @property
    def when(self) -> str:
        """`` when M = 33`` for a conflict at given run-time sizes ('' for fixed sizes)."""
        return when(dict(self.sizes))


def find_race(model, bound: list[str], adds: frozenset[str] = frozenset()) -> Conflict | None:
    """Two different grid coordinates touching one element, one writing; None if none. A
    reduction ``T += X`` into an array of ``adds`` adds into memory in one step (an atomic add,
    a TMA reduction): its instances may meet in any order."""
    if not bound:
        return None
    names = [lp.name for lp in model.loops]
    projection = _projection(names, bound)
    ordered = projection.apply_range(isl.Map.lex_lt(projection.range().get_space())).apply_range(projection.reverse())
    return _first_conflict(model, names, ordered, "race", exempt_reductions=False, adds=adds)


def find_order_violation(model, bound: list[str]) -> Conflict | None:
    """A dependence the schedule runs backwards on one grid coordinate; None if none."""
    names = [lp.name for lp in model.loops]
    nest = _nest_values(model, names)
    nest_before = nest.apply_range(isl.Map.lex_lt(nest.range().get_space())).apply_range(nest.reverse())
    same_place = _same_coordinates(names, bound)
    schedule_after = isl.Map.lex_gt(sets.counter_domain(model).get_space())
    pairs = nest_before.intersect(same_place).intersect(schedule_after)
    return _first_conflict(model, names, pairs, "order", exempt_reductions=True)


def _first_conflict(model, names, pairs: isl.Map, kind: str, exempt_reductions: bool,
                    adds: frozenset[str] = frozenset()) -> Conflict | None:
    # over iteration counters (no strides): the lexicographic orders and equalities of loop
    # values are those of their counters, and isl needs no existential variables
    domain, values = sets.counter_domain(model), sets.counters(model)
    pairs = pairs.intersect_domain(domain).intersect_range(domain)
    accesses = sets.accesses(model)
    found: list[Conflict] = []
    for a in accesses:
        for b in accesses:
            if a.array != b.array or not (a.is_write or b.is_write):
                continue
            if exempt_reductions and a.statement == b.statement and a.reduction and b.reduction:
                continue
            if a.array in adds and a.reduction and b.reduction:
                continue
            same_element = a.relation(names, values).apply_range(b.relation(names, values).reverse())
            conflict = pairs.intersect(same_element)
            if conflict.is_empty():
                continue
            point = sets.smallest(conflict.wrap())
            counts = sets.point_values(point, [f"{n}#1" for n in names] + [f"{n}#2" for n in names])
            first = {n: values[n].evaluate({n: counts[f"{n}#1"]}) for n in names}
            second = {n: values[n].evaluate({n: counts[f"{n}#2"]}) for n in names}
            element = tuple(s.evaluate(first) for s in a.subscripts)
            found.append(Conflict(kind, a.array, element, first, second, a.is_write, b.is_write,
                                  a.statement, b.statement, tuple(sets.size_values(point).items())))
    return min(found, key=_rank) if found else None


def _rank(c: Conflict) -> tuple:
    return (tuple(c.first.values()), tuple(c.second.values()), c.first_statement, c.second_statement)


def _projection(names, keep) -> isl.Map:
    """{ [loops] -> [the loops in ``keep``] }"""
    target = "[" + ", ".join(sets.PREFIX + n for n in keep) + "]"
    return isl.Map("{ " + sets.space(names) + " -> " + target + " }")


def _same_coordinates(names, bound) -> isl.Map:
    """{ x -> y : every bound loop equal }"""
    if not bound:
        return isl.Map.universe(isl.Map("{ " + sets.space(names) + " -> " + sets.space(names) + " }").get_space())
    projection = _projection(names, bound)
    return projection.apply_range(projection.reverse())


def _nest_values(model, names) -> isl.Map:
    """{ [loop counters] -> [nest dimension values] }: each dimension is the sum of its loops."""
    values = sets.counters(model)
    sums = []
    for dim in range(len(model.dims)):
        total = Affine.make({})
        for lp in model.loops:
            total = total.plus(values[lp.name]) if lp.dim == dim else total
        sums.append(sets.isl_affine(total))
    return isl.Map("{ " + sets.space(names) + " -> [" + ", ".join(sums) + "] }")


def unwritten_element(model, array: str) -> tuple[tuple[int, ...], dict[str, int]] | None:
    """An element of ``array`` no statement writes (the lexicographically first, at the
    smallest run-time sizes where there is one) and those sizes, or None."""
    names = [lp.name for lp in model.loops]
    domain, values = sets.counter_domain(model), sets.counters(model)
    shape = model.buffer(array).shape
    missing = sets.array_box(array, shape, model.size_names)
    for access in sets.accesses(model):
        if access.is_write and access.array == array:
            missing = missing.subtract(domain.apply(access.relation(names, values)))
    if missing.is_empty():
        return None
    point = sets.smallest(missing)
    element = tuple(point.get_coordinate_val(isl.dim_type.set, d).to_python() for d in range(len(shape)))
    return element, sets.size_values(point)


def written_box(model, array: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
    """The smallest box holding every element of ``array`` the nest writes: its first element and
    its extents, and an element of the box no iteration writes (None: the writes fill the box)."""
    names = [lp.name for lp in model.loops]
    domain, values = sets.counter_domain(model), sets.counters(model)
    image = None
    for access in sets.accesses(model):
        if access.is_write and access.array == array:
            written = domain.apply(access.relation(names, values))
            image = written if image is None else image.union(written)
    rank = len(model.buffer(array).shape)
    if model.sizes:
        raise ValueError("written_box: the written elements of a run-time size have no fixed box")
    low = tuple(image.dim_min(d).min_val().to_python() for d in range(rank))
    high = tuple(image.dim_max(d).max_val().to_python() for d in range(rank))
    elements = ", ".join(f"e{d}" for d in range(rank))
    bounds = " and ".join(f"{a} <= e{d} <= {b}" for d, (a, b) in enumerate(zip(low, high)))
    missing = isl.Set(f"{{ {array}[{elements}] : {bounds} }}").subtract(image)
    gap = None
    if not missing.is_empty():
        point = missing.lexmin().sample_point()
        gap = tuple(point.get_coordinate_val(isl.dim_type.set, d).to_python() for d in range(rank))
    return low, tuple(b - a + 1 for a, b in zip(low, high)), gap


@dataclass(frozen=True)
class EarlyRead:
    """A read of an array at an element no iteration before it has written."""

    statement: int  # in Model.statements
    element: tuple[int, ...]
    at: dict[str, int]  # the values of the dimensions the reading statement iterates
    sizes: tuple[tuple[str, int], ...] = ()


class _Timed(NamedTuple):
    statement: int
    relation: isl.Map  # { [time] -> array[element] }
    writes: bool


def read_before_written(model, array: str) -> EarlyRead | None:
    """The first read of ``array`` (in the nest's order, at the smallest run-time sizes) at an
    element that no earlier iteration has written, or None: every element read was written first.
    The nest's order takes its dimensions in turn and, at each point, its statements in program
    order; a fused schedule runs its parts one after another at each point of its fused
    dimensions. A statement's read of its own target comes before its write."""
    timed = list(_timed_accesses(model, array))
    writes = [t.relation for t in timed if t.writes]
    written = writes[0] if writes else None
    for relation in writes[1:]:
        written = written.union(relation)
    early = [(point, t) for t in timed if not t.writes for point in [_first_unwritten(t.relation, written)]
             if point is not None]
    if not early:
        return None
    point, read = min(early, key=lambda e: (tuple(sets.size_values(e[0]).values()), _time(e[0])))
    return _witness(model, array, read, point)


def _first_unwritten(read: isl.Map, written: isl.Map | None) -> isl.Point | None:
    """The first time (at the smallest sizes) at which ``read`` reads an element no earlier time
    of ``written`` wrote."""
    unwritten = read.domain()
    if written is not None:
        earlier = read.apply_range(written.reverse()).intersect(isl.Map.lex_gt(unwritten.get_space()))
        unwritten = unwritten.subtract(earlier.domain())
    return None if unwritten.is_empty() else sets.smallest(unwritten)


def _time(point: isl.Point) -> tuple[int, ...]:
    dims = point.get_space().dim(isl.dim_type.set)
    return tuple(point.get_coordinate_val(isl.dim_type.set, d).to_python() for d in range(dims))


def _witness(model, array: str, read: _Timed, point: isl.Point) -> EarlyRead:
    """The read at time ``point``: its element, and the values of the dimensions its statement
    iterates."""
    time = _time(point)
    element = read.relation.intersect_domain(isl.Set.from_point(point)).range().sample_point()
    fused, rest = _time_dims(model)
    foreign = model.fusion.foreign(model.fusion.part_of(read.statement)) if model.fusion is not None else frozenset()
    values = time[:len(fused)] + time[len(fused) + 1:-1]  # the part's number and the statement's left out
    at = {model.dims[d][0]: v for d, v in zip((*fused, *rest), values) if d not in foreign}
    rank = len(model.buffer(array).shape)
    return EarlyRead(read.statement, _time(element)[:rank], at, tuple(sets.size_values(point).items()))


def _time_dims(model) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The nest's dimensions as its order takes them: a fused schedule's fused ones (then the part),
    then the rest."""
    every = range(len(model.dims))
    if model.fusion is None:
        return tuple(every), ()
    unfused = {d for dims in model.fusion.unfused for d in dims}
    return tuple(d for d in every if d not in unfused), tuple(d for d in every if d in unfused)


def _timed_accesses(model, array: str):
    """Each access of ``array`` as a ``_Timed``: an iteration's time is its fused dimensions'
    values, its part, the other dimensions' values and its statement's number."""
    fused, rest = _time_dims(model)
    for p, part in enumerate(model.parts):
        names = [lp.name for lp in part.loops]
        domain, values = sets.counter_domain(part), sets.counters(part)
        numbers = model.fusion.parts[p] if model.fusion is not None else tuple(range(len(model.statements)))
        dims = [Affine.make({}) for _ in model.dims]
        for lp in part.loops:
            dims[lp.dim] = dims[lp.dim].plus(values[lp.name])
        for a in sets.accesses(part):
            if a.array != array:
                continue
            n = numbers[a.statement]
            time = [sets.isl_affine(dims[d]) for d in fused] + [str(p)] + [sets.isl_affine(dims[d]) for d in rest] \
                + [str(n)]
            to_time = isl.Map("{ " + sets.space(names) + " -> [" + ", ".join(time) + "] }").intersect_domain(domain)
            yield _Timed(n, to_time.reverse().apply_range(a.relation(names, values)), a.is_write)
