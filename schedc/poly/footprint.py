"""Footprints: the elements of an array that the loops at and inside an index touch, for fixed
values of the outer loops, as a box with an affine origin and constant extents.

The outer loops become isl parameters; the box comes from ``dim_min``/``dim_max`` of the image
of the domain under the access relations. It is exact when every element of the box (inside
the array) is touched; otherwise it over-approximates (strided or skewed accesses).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import islpy as isl

from ..ir import sizes
from ..ir.affine import Affine
from . import sets


class FootprintError(ValueError):
    """The footprint is not a box with one affine origin (or the loops do not access the array);
    the message says why, in the user's names."""


@dataclass(frozen=True)
class Footprint:
    array: str
    index: str  # the loop the footprint is taken at
    outer: tuple[str, ...]  # loops the origin depends on (the loops outside ``index``)
    origin: tuple[Affine, ...]  # first element, per array dimension
    extents: tuple[int, ...]
    exact: bool
    inside: bool = True  # the box stays inside ``bounds`` for every value of the fixed loops
    starts_inside: bool = True  # the box never starts before the array's first element
    bounds: tuple[int, ...] = ()  # ``reach``: one past the last element the nest touches, per dimension

    @property
    def elements(self) -> int:
        return math.prod(self.extents)

    @property
    def box(self) -> str:
        """The box as text: ``A[i, 0] + [16 x 32]``."""
        origin = ", ".join(str(a) for a in self.origin)
        return f"{self.array}[{origin}] + [{' x '.join(str(e) for e in self.extents)}]"

    def __str__(self) -> str:
        note = "" if self.exact else " (over-approximation: not every element is touched)"
        return f"{self.box}{note}"


def footprint(model, array: str, index: str, fixed: tuple[str, ...] | None = None,
              guards=None) -> Footprint:
    """The footprint inside ``index``. ``fixed`` names the loops held fixed (default: the loops
    outside ``index``); every other loop varies, wherever it sits in the order. With ``guards``,
    over the padded domain (``sets.domain``): the whole tiles a tensorized plan computes."""
    names = [lp.name for lp in model.loops]
    if index not in names:
        raise KeyError(f"no loop {index}")
    outer = [n for n in names if n in fixed] if fixed is not None else names[: names.index(index)]
    # over iteration counters (no strides: no existential variables), the fixed loops' counters
    # as parameters; the origin is turned back into loop values at the end
    values = sets.counters(model)
    accesses = [a for a in sets.accesses(model) if a.array == array]
    relations = [a.relation(names, values) for a in accesses]
    if not relations:
        raise FootprintError(f"the nest does not access {array}")
    relation = relations[0]
    for r in relations[1:]:
        relation = relation.union(r)
    counted = sets.counter_domain(model, guards)
    domain, relation = _with_params(counted, relation, outer)
    image = domain.apply(relation)
    rank = image.dim(isl.dim_type.set)
    origin, extents = [], []
    for d in range(rank):
        low, high = image.dim_min(d), image.dim_max(d)
        apart = functools.partial(_apart, accesses, relations, counted, outer, d)  # only for a message
        origin.append(_affine(low, outer, array, d, index, model, apart))
        extent = high.sub(low).max_val()
        if not extent.is_int():
            raise FootprintError(f"{array}'s footprint inside {index} along dimension {d} grows with the run-time "
                                 f"size{'s' * (len(model.sizes) > 1)} {', '.join(model.size_names)}: place the cache "
                                 "inside the loops over the size's tiles")
        extents.append(extent.to_python() + 1)
    exact = _is_exact(model, array, image, outer, origin, extents)
    bounds = reach(model, array)
    inside = _is_inside(image, outer, origin, extents, bounds)
    starts = inside or _is_inside(image, outer, origin, extents, bounds, low_only=True)
    origin = [_loop_values(model, a, array, d, index) for d, a in enumerate(origin)]
    return Footprint(array, index, tuple(outer), tuple(origin), tuple(extents), exact, inside, starts, bounds)


def reach(model, array: str) -> tuple[int, ...]:
    """Per dimension of ``array``, one past the last element the nest's iterations touch (at
    most the array's size). Tiles padded past the nest's edge copy zeros beyond it and store
    nothing beyond it, whether the array ends there or goes on (a nest over part of an array)."""
    names = [lp.name for lp in model.loops]
    relations = [a.relation(names) for a in sets.accesses(model) if a.array == array]
    if not relations:
        return model.buffer(array).shape
    relation = relations[0]
    for r in relations[1:]:
        relation = relation.union(r)
    image = sets.domain(model).apply(relation)
    return tuple(_reach(image, d, size, array) for d, size in enumerate(model.buffer(array).shape))


def _reach(image: isl.Set, d: int, size, array: str):
    """One past the last element along ``d`` (a run-time size's Affine where the nest reaches
    its end for every value)."""
    high = image.dim_max(d)
    if not isinstance(size, Affine):
        return min(size, high.max_val().to_python() + 1)
    params = ", ".join(sets.PREFIX + n for n in sorted(size.variables()))
    gap = isl.PwAff(f"[{params}] -> {{ [({sets.isl_affine(size)} - 1)] }}")
    gap = gap.sub(high)
    if gap.min_val().is_zero() and gap.max_val().is_zero():
        return size
    if high.max_val().is_zero():
        return 1
    raise FootprintError(f"the nest reaches part of {array}'s run-time dimension {d} ({size}): schedc tiles a run-time "
                         "size's dimension whole")


def _shown(model, a: Affine) -> Affine:
    """A counter expression in loop values where it converts (for messages)."""
    try:
        return _loop_values(model, a, "", 0, "")
    except FootprintError:
        return a


def _loop_values(model, a: Affine, array: str, dim: int, index: str) -> Affine:
    """An affine expression of loop counters as one of loop values (``t = (x - begin) / step``)."""
    out = Affine((), a.const)
    for name, c in a.terms:
        loop = model.loop(name)
        if c % loop.step:
            raise FootprintError(f"the first element of {array}'s footprint inside {index} along dimension {dim} "
                                 f"moves by {c} elements per step of {name}, which steps by {loop.step}: not an "
                                 "affine expression of the outer loops' values")
        out = out.plus(Affine.make({name: c // loop.step}, -(c // loop.step) * loop.begin))
    return out


def writes_whole_box(model, fp: Footprint, enclosing=()) -> bool:
    """Whether a tile stored back whole writes only what its thread wrote: for every value of
    the fixed loops where the thread runs an iteration, the statements write every element of
    the box ``fp`` (inside its array); where it runs none but still stores (values of the padded
    domain that the ``enclosing`` guards, the guards around the copies, let through), the box
    lies outside the array. Strided elements (a thread's ``C[i, jj]``, ``C[i, jj + 9]``) or a
    nest smaller than its array leave holes."""
    names = [lp.name for lp in model.loops]
    values = sets.counters(model)  # over iteration counters, as footprint()
    writes = [a.relation(names, values) for a in sets.accesses(model) if a.array == fp.array and a.is_write]
    if not writes:
        return False
    relation = writes[0]
    for r in writes[1:]:
        relation = relation.union(r)
    domain, relation = _with_params(sets.counter_domain(model), relation, fp.outer)
    image = domain.apply(relation)
    origin = [o.substitute(values) for o in fp.origin]
    if not _is_exact(model, fp.array, image, list(fp.outer), origin, list(fp.extents)):
        return False
    stores = _with_params(sets.counter_domain(model, enclosing), None, fp.outer)[0].params()
    idle = stores.subtract(image.params())
    return _box(model, fp.array, list(fp.outer), origin, list(fp.extents)).intersect_params(idle).is_empty()


def _with_params(domain: isl.Set, relation, outer) -> tuple:
    """``domain`` and ``relation`` with the loops in ``outer`` moved to parameters, in order."""
    for n, name in enumerate(outer):
        at = domain.find_dim_by_name(isl.dim_type.set, sets.PREFIX + name)
        domain = domain.move_dims(isl.dim_type.param, n, isl.dim_type.set, at, 1)
        if isinstance(relation, isl.Map):
            at = relation.find_dim_by_name(isl.dim_type.in_, sets.PREFIX + name)
            relation = relation.move_dims(isl.dim_type.param, n, isl.dim_type.in_, at, 1)
    return domain, relation


def first_outside(model, array: str, guards=None, bounds: tuple[int, ...] | None = None
                  ) -> tuple[dict[str, int], tuple[int, ...], dict[str, int]] | None:
    """The first iteration (lexmin, at the smallest run-time sizes that have one) of the
    (padded) domain whose access to ``array`` falls outside it (or outside ``bounds``, one past
    the last element per dimension), with the element and those sizes; None when every access
    stays inside."""
    names = [lp.name for lp in model.loops]
    shape = bounds if bounds is not None else model.buffer(array).shape
    inside = sets.array_box(array, shape)
    domain = sets.domain(model, guards)
    for access in sets.accesses(model):
        if access.array != array:
            continue
        relation = access.relation(names).intersect_domain(domain)
        outside = relation.subtract_range(inside)
        if not outside.is_empty():
            point = sets.smallest(outside.wrap())
            values = sets.point_values(point, [*names, *(f"e{d}" for d in range(len(shape)))])
            return ({n: values[n] for n in names}, tuple(values[f"e{d}"] for d in range(len(shape))),
                    sets.size_values(point))
    return None


def stored_past_edge(model, array: str, guards, bounds: tuple, whole) -> tuple[int, ...] | None:
    """An element of ``array`` inside ``bounds`` (one past the last element per dimension) that a
    whole tile (the padded domain of ``guards``; ``whole``: the loops that run whole tiles) writes
    and the nest's own iterations of that tile do not: a store of whole tiles would overwrite it
    (another tile's, another head's rows inside the array); None where every such element lies
    outside ``bounds``, where the store clips it."""
    names = [lp.name for lp in model.loops]
    inside = sets.array_box(array, bounds)
    padded, own = sets.domain(model, guards), sets.domain(model)
    xs = ", ".join(sets.PREFIX + n for n in names)
    for access in sets.accesses(model):
        if access.array != array:
            continue
        # a tile: the loops outside it that choose the array's elements (not a reduction's)
        used = set().union(*(s.variables() for s in access.subscripts))
        outer = [n for n in names if n not in whole and n in used]
        tile = isl.Map(f"{{ [{xs}] -> [{', '.join(sets.PREFIX + n for n in outer)}] }}")
        relation = access.relation(names)
        pairs = tile.align_params(relation.get_space()).range_product(relation)  # x -> [tile -> element]
        extra = padded.apply(pairs).subtract(own.apply(pairs)).unwrap().intersect_range(inside)
        if not extra.is_empty():
            point = sets.smallest(extra.range())
            return tuple(sets.point_values(point, [f"e{d}" for d in range(len(bounds))]).values())
    return None


def _affine(pw: isl.PwAff, outer: list[str], array: str, dim: int, index: str, model, apart=None) -> Affine:
    """The footprint's first element along ``dim``: one affine expression of the outer loops.
    ``apart()`` names the accesses whose first elements differ, for the message where they do."""
    affines = _pieces(pw, outer, array, dim, index)
    if len(affines) != 1:
        shown = " or ".join(sorted(str(_shown(model, a)) for a in affines))
        which = apart() if apart is not None else None
        raise FootprintError(f"the first element of {array}'s footprint inside {index} along dimension {dim} is "
                             f"{shown}, depending on the outer loops: "
                             + (f"{which} do not move together" if which else "the accesses do not move together")
                             + ", so no one tile shape follows them")
    return affines.pop()


def _apart(accesses, relations, domain: isl.Set, outer: list[str], dim: int) -> str | None:
    """``the accesses X[i, ja + ta] and X[i, jb + tb]``: two of the array's accesses (in schedule
    loops) whose first elements along ``dim`` differ for the outer loops ``outer``; None where no
    two do (one access's first element alone depends on the outer loops)."""
    starts: dict[str, frozenset] = {}
    for access, relation in zip(accesses, relations):
        text = f"{access.array}[{', '.join(str(s) for s in access.subscripts)}]"
        fixed, moved = _with_params(domain, relation, outer)
        try:
            starts.setdefault(text, frozenset(_pieces(fixed.apply(moved).dim_min(dim), outer, "", dim, "")))
        except FootprintError:
            continue
    texts = list(starts)
    pair = next(((a, b) for n, a in enumerate(texts) for b in texts[n + 1:] if starts[a] != starts[b]), None)
    return f"the accesses {pair[0]} and {pair[1]}" if pair else None


def _pieces(pw: isl.PwAff, outer: list[str], array: str, dim: int, index: str) -> set[Affine]:
    """The affine expressions of the outer loops that ``pw``'s pieces take."""
    affines = set()
    for domain, aff in pw.get_pieces():
        aff = aff.gist(domain)
        values = [aff.get_coefficient_val(isl.dim_type.param, pos) for pos in range(len(outer))]
        if aff.dim(isl.dim_type.div) or not all(v.is_int() for v in [*values, aff.get_constant_val()]):
            raise FootprintError(f"the first element of {array}'s footprint inside {index} along dimension {dim} "
                                 f"is not an affine expression of the outer loops ({_isl_text(pw)})")
        moving = [aff.get_dim_name(isl.dim_type.param, p) for p in range(len(outer), aff.dim(isl.dim_type.param))
                  if not aff.get_coefficient_val(isl.dim_type.param, p).is_zero()]
        if moving:
            raise FootprintError(f"the first element of {array}'s footprint inside {index} along dimension {dim} "
                                 f"moves with the run-time size {moving[0].removeprefix(sets.PREFIX)}")
        terms = {name: v.to_python() for name, v in zip(outer, values)}
        affines.add(Affine.make(terms, aff.get_constant_val().to_python()))
    return affines


def _isl_text(pw: isl.PwAff) -> str:
    return str(pw).replace(sets.PREFIX, "")


def _is_exact(model, array, image, outer, origin, extents) -> bool:
    """Whether the box (inside the array) lies in ``image`` wherever the image is not empty."""
    return _box(model, array, outer, origin, extents).intersect_params(image.params()).is_subset(image)


def _box(model, array, outer, origin, extents) -> isl.Set:
    """The box's elements inside the array, over the fixed loops as parameters."""
    shape = model.buffer(array).shape
    parts = []
    for d, (a, extent, size) in enumerate(zip(origin, extents, shape)):
        low = sets.isl_affine(a)
        parts.append(f"{low} <= e{d} < {low} + {extent} and 0 <= e{d} < {sets.extent(size)}")
    elements = ", ".join(f"e{d}" for d in range(len(shape)))
    params = ", ".join(sets.PREFIX + n for n in [*outer, *sizes.names(shape)])
    return isl.Set(f"[{params}] -> {{ {array}[{elements}] : {' and '.join(parts)} }}")


def _is_inside(image, outer, origin, extents, shape, low_only: bool = False) -> bool:
    parts = []
    for a, extent, size in zip(origin, extents, shape):
        low = sets.isl_affine(a)
        parts.append(f"({low} < 0)" if low_only else f"({low} < 0 or {low} + {extent} > {sets.extent(size)})")
    params = ", ".join(sets.PREFIX + n for n in [*outer, *sizes.names(shape)])
    outside = isl.Set(f"[{params}] -> {{ : {' or '.join(parts)} }}").intersect_params(image.params())
    return outside.is_empty()




def padding_witness(model, guards, product: tuple[str, str, str], zero_filled: set[str]
                    ) -> tuple[dict[str, int], dict[str, tuple[int, ...]]] | None:
    """Whole tiles compute iterations past the nest (the padded domain of ``guards``): each
    such iteration of ``C += A * B`` (``product`` names C, A, B) must add nothing to an element
    that is stored, so where C's element lies inside its ``reach`` (it is stored), A's or B's
    must lie outside theirs in an operand whose copies fill zeros there (``zero_filled``). The
    first iteration that breaks this, with its elements; None when none does."""
    names = [lp.name for lp in model.loops]
    padded = sets.domain(model, guards).subtract(sets.domain(model))
    if padded.is_empty():
        return None
    c, a, b = product

    def within(array: str) -> isl.Set:
        """The iterations whose access to ``array`` lies inside its reach."""
        bounds = reach(model, array)
        box = sets.array_box(array, bounds)
        points = padded
        for access in sets.accesses(model):
            if access.array == array:
                points = points.intersect(access.relation(names).intersect_range(box).domain())
        return points

    bad = within(c)
    for operand in (a, b):
        if operand in zero_filled:
            bad = bad.intersect(within(operand))
    if bad.is_empty():
        return None
    values = sets.point_values(sets.smallest(bad), names)
    point = {n: values[n] for n in names}
    elements = {}
    for access in sets.accesses(model):
        if access.array in product:
            elements[access.array] = tuple(s.evaluate(point) for s in access.subscripts)
    return point, elements
