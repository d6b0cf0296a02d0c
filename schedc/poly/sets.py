"""isl objects of a Model: the iteration domain over schedule loops and the access relations.

Loop names are prefixed (``x_i``) to keep them clear of isl keywords; callers outside poly never
see isl objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir import sizes
from ..ir.affine import Affine
from ..ir.kernel import Store
from ..ir.patterns import reduction as reduction_of
from ..ir.walk import loads

PREFIX = "x_"


def space(names: Sequence[str]) -> str:
    return "[" + ", ".join(PREFIX + n for n in names) + "]"


def extent(e: int | Affine) -> str:
    """An extent (a number, or an Affine of run-time sizes) in isl's terms."""
    return isl_affine(e) if isinstance(e, Affine) else str(e)


def sized_set(names: Sequence[str], body: str) -> isl.Set:
    """``{ body }`` with the run-time sizes ``names`` as parameters, each at least 1."""
    text = "{ " + body + " }"
    if names:
        text = "[" + ", ".join(PREFIX + n for n in names) + "] -> " + text
    out = isl.Set(text)
    for name in names:  # every size is at least 1
        out = out.intersect_params(isl.Set(f"[{PREFIX}{name}] -> {{ : {PREFIX}{name} >= 1 }}"))
    return out


def box(loops) -> isl.Set:
    """Each loop in its own range: ``begin <= x < end``, ``x = begin + step * t``."""
    names = [name for name, *_ in loops]
    parts = []
    for name, begin, end, step in loops:
        v = PREFIX + name
        parts.append(f"{begin} <= {v} < {extent(end)}")
        if step > 1:
            parts.append(f"({v} - {begin}) mod {step} = 0")
    return sized_set(sizes.names(end for *_, end, _ in loops), space(names) + " : " + " and ".join(parts))


def group_set(names: Sequence[str], groups) -> isl.Set:
    """The split constraints ``(begin, end, members)``: a member a loop's name, or (name, weight)."""
    parts = [
        f"{begin} <= {' + '.join(_weighted(m) for m in members)} < {extent(end)}"
        for begin, end, members in groups
    ]
    where = " : " + " and ".join(parts) if parts else ""
    return sized_set(sizes.names(end for _, end, _ in groups), space(names) + where)


def _weighted(member) -> str:
    name, weight = (member, 1) if isinstance(member, str) else member
    return f"{weight}*{PREFIX}{name}" if weight != 1 else PREFIX + name


def array_box(name: str, shape, every: Sequence[str] = ()) -> isl.Set:
    """The elements of an array of ``shape`` (extents may be run-time sizes) as ``name[e0, ...]``,
    over the sizes ``every`` too (each at least 1: a difference with it never holds sizes below 1)."""
    elements = ", ".join(f"e{d}" for d in range(len(shape)))
    bounds = " and ".join(f"0 <= e{d} < {extent(n)}" for d, n in enumerate(shape))
    names = list(dict.fromkeys([*every, *sizes.names(shape)]))
    return sized_set(names, f"{name}[{elements}] : {bounds}")


def domain(model, guards=None) -> isl.Set:
    """The iteration domain; with ``guards`` (a sequence of Guard), the *padded* domain instead:
    every loop over its whole range, cut only by those guards (whole tiles at the edges)."""
    loops = [(lp.name, lp.begin, lp.end, lp.step) for lp in model.loops]
    names = [lp.name for lp in model.loops]
    if guards is not None:
        parts = [f"{isl_affine(g.affine)} {'=' if g.equality else '>='} 0" for g in guards]
        cut = sized_set(model.size_names, space(names) + (" : " + " and ".join(parts) if parts else ""))
        return box(loops).intersect(cut)
    groups = [(g.begin, g.end, g.weighted) for g in model.groups]
    return box(loops).intersect(group_set(names, groups))


def counters(model) -> dict[str, Affine]:
    """Each loop's value over its iteration counter: ``x = begin + step * t`` (``t`` named as ``x``)."""
    return {lp.name: Affine.make({lp.name: lp.step}, lp.begin) for lp in model.loops}


def counter_domain(model, guards=None) -> isl.Set:
    """The iteration domain over iteration counters (see ``counters``); with ``guards``, the
    padded domain as ``domain`` makes it. Unlike ``domain`` it has no stride (``mod``)
    constraints, so isl needs no existential variables: checks that project or subtract images
    (OUTPUT coverage, footprints) stay fast whatever the sizes' arithmetic."""
    names = [lp.name for lp in model.loops]
    values = counters(model)
    parts = [f"0 <= {PREFIX}{lp.name} < {lp.extent}" if lp.fixed
             else f"0 <= {PREFIX}{lp.name} and {lp.begin} + {lp.step}*{PREFIX}{lp.name} < {extent(lp.end)}"
             for lp in model.loops]
    if guards is not None:
        parts += [f"{isl_affine(g.affine.substitute(values))} {'=' if g.equality else '>='} 0" for g in guards]
    else:
        for g in model.groups:
            total = Affine.make({})
            for member, weight in g.weighted:
                total = total.plus(values[member].scale(weight))
            parts.append(f"{g.begin} <= {isl_affine(total)} < {extent(g.end)}")
    return sized_set(model.size_names, space(names) + " : " + " and ".join(parts))


def isl_affine(a: Affine) -> str:
    terms = [f"{c}*{PREFIX}{name}" for name, c in a.terms]
    return " + ".join([*terms, str(a.const)])


@dataclass(frozen=True)
class Access:
    """One access of a statement, with its subscripts over schedule loops."""

    statement: int
    array: str
    subscripts: tuple[Affine, ...]
    is_write: bool
    reduction: bool  # the target's read or write in a reduction ``T = T + X``

    def relation(self, names: Sequence[str], values: dict[str, Affine] | None = None) -> isl.Map:
        """{ loops -> array[subscripts] }; with ``values`` (``counters``), over iteration counters."""
        subscripts = [s.substitute(values) for s in self.subscripts] if values else self.subscripts
        subs = ", ".join(isl_affine(s) for s in subscripts)
        return isl.Map("{ " + space(names) + f" -> {self.array}[{subs}] }}")


def accesses(model) -> list[Access]:
    """Every access of every statement (the write first), in schedule-loop terms."""
    pieces: dict[str, Affine] = {}
    for dim, (dim_name, _extent) in enumerate(model.dims):
        pieces[dim_name] = Affine.make({lp.name: 1 for lp in model.loops if lp.dim == dim})
    out = []
    for n, statement in enumerate(model.statements):
        reduction = reduction_of(statement) is not None  # T = T + X, max(T, X), min(T, X)
        for array, index, is_write in _statement_accesses(statement):
            subscripts = tuple(Affine.of(e).substitute(pieces) for e in index)
            target = array == statement.buffer and index == statement.index
            out.append(Access(n, array, subscripts, is_write, reduction and target))
    return out


def _statement_accesses(statement: Store):
    yield statement.buffer, statement.index, True
    for load in loads(statement.value):
        yield load.buffer, load.index, False


def point_values(point: isl.Point, names: Sequence[str], dim_type=None) -> dict[str, int]:
    kind = isl.dim_type.set if dim_type is None else dim_type
    return {n: point.get_coordinate_val(kind, pos).to_python() for pos, n in enumerate(names)}


def size_values(point: isl.Point) -> dict[str, int]:
    """The run-time sizes of a point of a set with size parameters."""
    space = point.get_space()
    return {space.get_dim_name(isl.dim_type.param, p).removeprefix(PREFIX):
            point.get_coordinate_val(isl.dim_type.param, p).to_python()
            for p in range(space.dim(isl.dim_type.param))}


def smallest(found: isl.Set) -> isl.Point:
    """A point of a non-empty set: at the smallest run-time sizes that have one (sizes in
    order, each as small as it goes), its lexicographically first element there."""
    for p in range(found.dim(isl.dim_type.param)):
        values = found.params().move_dims(isl.dim_type.set, 0, isl.dim_type.param, p, 1)
        found = found.intersect_params(_fix(found, p, values.dim_min_val(0).to_python()))
    return found.lexmin().sample_point()


def _fix(found: isl.Set, p: int, value: int) -> isl.Set:
    name = found.get_dim_name(isl.dim_type.param, p)
    return isl.Set(f"[{name}] -> {{ : {name} = {value} }}")
