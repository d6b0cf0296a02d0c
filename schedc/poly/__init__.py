"""The polyhedral model: the only module that imports islpy.

The schedule's iteration domain and every statement's access relation are isl objects; callers
get plain values (loop ranges, guards, affine subscripts) addressed by index name. Sizes are
constants in the constraints, so the cost does not grow with the problem size.

>>> facts = analyze_domain(
...     loops=(("i", 0, 1000, 32), ("ii", 0, 32, 1)), groups=((0, 1000, ("i", "ii")),))
>>> [(lp.name, lp.first, lp.last, lp.extent) for lp in facts.loops]
[('i', 0, 992, 32), ('ii', 0, 31, 32)]
>>> facts.guards  # the partial last tile: 999 - i - ii >= 0
(Guard(affine=Affine(terms=(('i', -1), ('ii', -1)), const=999), equality=False),)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir.affine import Affine
from ..ir.kernel import register
from ..ir.sizes import when
from . import sets
from .footprint import (
    Footprint,
    FootprintError,
    first_outside,
    footprint,
    padding_witness,
    reach,
    stored_past_edge,
    writes_whole_box,
)
from .legality import (
    Conflict,
    EarlyRead,
    find_order_violation,
    find_race,
    read_before_written,
    unwritten_element,
    written_box,
)
from .sets import Access


@register
@dataclass(frozen=True)
class LoopFacts:
    """A loop's first and last values over every value of the run-time sizes; ``last`` is None
    for a loop that runs to a run-time size (its ``end``, the size's Affine)."""

    name: str
    first: int
    last: int | None
    step: int
    end: Affine | None = None

    def __repr__(self) -> str:
        end = f", end={self.end}" if self.end is not None else ""
        return f"LoopFacts(name={self.name!r}, first={self.first}, last={self.last}, step={self.step}{end})"

    @property
    def fixed(self) -> bool:
        return self.end is None

    @property
    def extent(self) -> int:
        if self.end is not None:
            raise TypeError(f"loop {self.name} runs to the run-time size {self.end}: its count has no fixed value")
        return (self.last - self.first) // self.step + 1

    def stop(self, end: int | Affine) -> int | Affine:
        """An exclusive bound for a C loop: the schedule's ``end`` where it runs the same
        iterations (any stop in (last, last + step] does), else ``last + 1``."""
        if self.end is not None:
            return self.end
        return end if not isinstance(end, Affine) and self.last < end <= self.last + self.step else self.last + 1


@register
@dataclass(frozen=True)
class Guard:
    """``affine >= 0`` (or ``== 0``): a domain constraint the loop ranges do not imply."""

    affine: Affine
    equality: bool


@dataclass(frozen=True)
class DomainFacts:
    loops: tuple[LoopFacts, ...]
    guards: tuple[Guard, ...]


@dataclass(frozen=True)
class AccessFacts:
    """One array access of a statement: its subscripts as affine functions of schedule loops."""

    statement: int
    array: str
    subscripts: tuple[Affine, ...]
    is_write: bool


@dataclass(frozen=True)
class PolyFacts:
    loops: tuple[LoopFacts, ...]
    guards: tuple[Guard, ...]
    accesses: tuple[Access, ...]

    def loop(self, name: str) -> LoopFacts:
        return next(lp for lp in self.loops if lp.name == name)


def analyze(model) -> PolyFacts:
    """Domain facts and access relations of a frozen Model."""
    loops = tuple((lp.name, lp.begin, lp.end, lp.step) for lp in model.loops)
    groups = tuple((g.begin, g.end, g.weighted) for g in model.groups)
    domain = analyze_domain(loops, groups)
    names = [lp.name for lp in model.loops]
    accesses = tuple(
        dataclasses.replace(a, subscripts=_read_subscripts(a.relation(names), names))
        for a in sets.accesses(model)
    )
    return PolyFacts(domain.loops, domain.guards, accesses)


def analyze_domain(
    loops: Sequence[tuple[str, int, int, int]],
    groups: Sequence[tuple[int, int, Sequence[str]]],
) -> DomainFacts:
    """Loop ranges (first/last value actually taken) and the guards partial tiles need."""
    names = [name for name, *_ in loops]
    box = sets.box(loops)
    domain = box.intersect(sets.group_set(names, groups))
    if domain.is_empty():
        raise ValueError("the iteration domain is empty")
    facts = []
    for pos, (name, _begin, end, step) in enumerate(loops):
        first, last = domain.dim_min(pos).min_val(), domain.dim_max(pos).max_val()
        if not first.is_int():
            raise ValueError(f"loop {name} has no first value: {domain}")
        if isinstance(end, Affine) and last.is_int():
            raise ValueError(f"loop {name} runs to the run-time size {end} but has a last value {last}")
        facts.append(LoopFacts(name, first.to_python(), last.to_python() if last.is_int() else None, step,
                               end if isinstance(end, Affine) else None))
    return DomainFacts(tuple(facts), _guards(domain.gist(box), names))


def _guards(gist: isl.Set, names: Sequence[str]) -> tuple[Guard, ...]:
    basic_sets = gist.get_basic_sets()
    if len(basic_sets) != 1:
        raise ValueError(f"partial tiles need a non-convex guard: {gist}")
    out = []
    bset = basic_sets[0]
    for c in bset.get_constraints():
        if c.involves_dims(isl.dim_type.div, 0, bset.dim(isl.dim_type.div)):
            raise ValueError(f"a guard needs a stride condition: {c}")
        terms = {
            name: c.get_coefficient_val(isl.dim_type.set, pos).to_python()
            for pos, name in enumerate(names)
        }
        for pos in range(bset.dim(isl.dim_type.param)):  # run-time sizes
            size = bset.get_dim_name(isl.dim_type.param, pos).removeprefix(sets.PREFIX)
            terms[size] = c.get_coefficient_val(isl.dim_type.param, pos).to_python()
        out.append(Guard(Affine.make(terms, c.get_constant_val().to_python()), c.is_equality()))
    return tuple(sorted(out, key=lambda g: (g.affine.terms, g.affine.const)))


def _read_subscripts(relation: isl.Map, names: Sequence[str]) -> tuple[Affine, ...]:
    """The affine subscripts of an access relation, read back from isl."""
    pma = isl.PwMultiAff.from_map(relation)
    out = []
    for d in range(pma.dim(isl.dim_type.out)):
        ((_, aff),) = pma.get_pw_aff(d).get_pieces()
        terms = {
            name: aff.get_coefficient_val(isl.dim_type.in_, pos).to_python()
            for pos, name in enumerate(names)
        }
        out.append(Affine.make(terms, aff.get_constant_val().to_python()))
    return tuple(out)


__all__ = [
    "Access", "Conflict", "DomainFacts", "EarlyRead", "Footprint", "FootprintError", "Guard", "LoopFacts",
    "PolyFacts", "analyze", "analyze_domain", "find_order_violation", "find_race", "first_outside", "footprint",
    "padding_witness", "reach", "read_before_written", "stored_past_edge", "unwritten_element", "when", "written_box",
    "writes_whole_box",
]
