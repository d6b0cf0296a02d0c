"""Fused schedules (Accera's ``acc.fuse``): several nests' work in one iteration space.

``acc.fuse((schedule0, schedule1), partial=2)`` fuses the first two dimensions of each schedule
(in its loop order). The fused schedule's indices are, in order, the *fusing index* ``f``
(one value per schedule), the fused indices, then each schedule's unfused indices. At every
point of the fused indices, schedule0's work (over all its unfused indices) runs before
schedule1's, however the fused schedule is split or reordered; ``f`` must stay before every
unfused index. A GEMM with its epilogue, before → after ``reorder(i, j, f, k)``::

    for i: for j: for k:                       for i: for j:
        C[i, j] += A[i, k] * B[k, j]       →       for k: C[i, j] += A[i, k] * B[k, j]   # f = 0
    for i: for j:                                  C[i, j] = acc.max(C[i, j] + bias[j], 0)  # f = 1
        C[i, j] = acc.max(C[i, j] + bias[j], 0)

>>> import schedc as acc
>>> A, B = (acc.Array(role=acc.Role.INPUT, shape=(8, 4)), acc.Array(role=acc.Role.INPUT, shape=(4, 8)))
>>> C, bias = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, 8)), acc.Array(role=acc.Role.INPUT, shape=(8,))
>>> gemm = acc.Nest(shape=(8, 8, 4)); i0, j0, k0 = gemm.get_indices()
>>> @gemm.iteration_logic
... def _():
...     C[i0, j0] += A[i0, k0] * B[k0, j0]
>>> epilogue = acc.Nest(shape=(8, 8)); i1, j1 = epilogue.get_indices()
>>> @epilogue.iteration_logic
... def _():
...     C[i1, j1] = acc.max(C[i1, j1] + bias[j1], 0.0)
>>> schedule = acc.fuse((gemm.create_schedule(), epilogue.create_schedule()), partial=2)
>>> f, i, j, k = schedule.get_indices()
>>> [x.name for x in (f, i, j, k)], schedule.get_fusing_index() is f  # named by position, until used
(['f', 'i0', 'j0', 'k0'], True)
>>> schedule.reorder(i, j, f, k)  # a call names them after the script's variables
>>> schedule.reorder(i, j, k, f)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
schedc.errors.ScheduleError: reorder(i, j, k, f): the fusing index f must come before the unfused index k ...
"""

from __future__ import annotations

from ..errors import ScheduleError
from .expr import Index
from .parameters import deferred
from .schedule import Schedule


class FusedNest:
    """The fused iteration space: ``indices`` are (f, fused..., unfused of each part...).

    ``parts`` are the fused nests in order; ``dims[p]`` maps each dimension of part ``p``'s
    nest to its dimension here."""

    def __init__(self, schedules: tuple[Schedule, ...], partial: int) -> None:
        self.parts = tuple(s.nest for s in schedules)
        self.partial = partial
        orders = [[s.pieces[index].dim for index in s.order] for s in schedules]
        first = self.parts[0]
        fusing = Index(_fresh("f", [ix.name for n in self.parts for ix in n.indices]), self)
        fused = [Index(first.indices[orders[0][d]].name, self) for d in range(partial)]
        self.dims: list[dict[int, int]] = []
        indices, shape = [fusing, *fused], [len(schedules), *(first.shape[orders[0][d]] for d in range(partial))]
        for nest, order in zip(self.parts, orders):
            mapping = {order[d]: 1 + d for d in range(partial)}
            for d in order[partial:]:
                taken = [ix.name for ix in indices]
                mapping[d] = len(indices)
                indices.append(Index(_fresh(nest.indices[d].name, taken), self))
                shape.append(nest.shape[d])
            self.dims.append(mapping)
        self.indices = tuple(indices)
        self.shape = tuple(shape)
        self.logic = [logic for nest in self.parts for logic in nest.logic]

    @property
    def fusing(self) -> Index:
        return self.indices[0]

    @property
    def statements(self) -> list:
        return [s for nest in self.parts for s in nest.statements]

    def arrays(self) -> list:
        found: list = []
        for nest in self.parts:
            found += [a for a in nest.arrays() if all(a is not b for b in found)]
        return found

    def renames(self, part: int) -> dict[str, str]:
        """Part ``part``'s index names → the fused schedule's."""
        nest = self.parts[part]
        return {nest.indices[d].name: self.indices[mine].name for d, mine in self.dims[part].items()}

    def owner_of(self, dim: int) -> int | None:
        """The part whose unfused dimension ``dim`` is (None: the fusing or a fused dimension)."""
        return next((p for p in range(len(self.parts)) if dim in self.unfused(p)), None)

    def unfused(self, part: int) -> tuple[int, ...]:
        """The fused schedule's dimensions only part ``part`` iterates."""
        return tuple(mine for mine in self.dims[part].values() if mine > self.partial)


class FusedSchedule(Schedule):
    """A schedule of a ``FusedNest``: Accera's ``FusedSchedule``."""

    nest: FusedNest

    def get_fusing_index(self) -> Index:
        """The fusing index ``f``: its value picks the fused schedule whose work runs."""
        return self.nest.fusing

    def get_fused_indices(self) -> tuple[Index, ...]:
        """The indices of the fused dimensions (and the indices split from them), in loop order."""
        return tuple(ix for ix in self.order if 1 <= self.pieces[ix].dim <= self.nest.partial)

    def get_unfused_indices(self) -> tuple[Index, ...]:
        """The indices only one of the fused schedules iterates, in loop order."""
        return tuple(ix for ix in self.order if self.pieces[ix].dim > self.nest.partial)

    def split(self, index: Index, size: int) -> Index:
        if index is self.nest.fusing:
            raise ScheduleError(f"split({index.name}, {size!r})", "the fusing index runs its schedules in turn and "
                                                                  "cannot be split")
        return super().split(index, size)

    def reorder(self, order, *more) -> None:
        indices = (*order, *more) if isinstance(order, tuple | list) else (order, *more)
        super().reorder(order, *more)
        where = f"reorder({', '.join(getattr(i, 'name', repr(i)) for i in indices)})"
        fusing = self.order.index(self.nest.fusing)
        early = [ix for ix in self.order[:fusing] if self.pieces[ix].dim > self.nest.partial]
        if early:
            raise ScheduleError(where, f"the fusing index {self.nest.fusing.name} must come before the unfused index "
                                       f"{early[0].name} (and every index split from one)")


def fuse(schedules, *more: Schedule, partial: int | None = None) -> FusedSchedule:
    """Fuse schedules into one (Accera's ``acc.fuse``): ``fuse(s0, s1)`` fuses every dimension,
    ``fuse((s0, s1), partial=2)`` the first two of each (in each schedule's loop order).

    **Requires:** untransformed schedules (a reorder is allowed: it picks the dimensions that
    fuse) of different nests, without parameters; the fused dimensions of equal extents.
    """
    group = tuple(schedules) if isinstance(schedules, tuple | list) else (schedules, *more)
    if isinstance(schedules, tuple | list) and more:
        raise ScheduleError("acc.fuse", "give the schedules as one tuple, or each as an argument, not both")
    where = f"acc.fuse({len(group)} schedules{'' if partial is None else f', partial={partial!r}'})"
    if len(group) < 2 or not all(isinstance(s, Schedule) for s in group):
        raise ScheduleError(where, "fuse takes two or more schedules (nest.create_schedule())")
    for n, s in enumerate(group):
        if isinstance(s, FusedSchedule):
            raise ScheduleError(where, f"schedule{n} is fused already: fuse the nests' schedules at once")
        if deferred(s):
            raise ScheduleError(where, f"schedule{n} has parameters: fused schedules take concrete sizes")
        if s.splits:
            raise ScheduleError(where, f"schedule{n} is split already: split the fused schedule instead")
        if s._plan_created:
            raise ScheduleError(where, f"schedule{n} has a plan already: fuse before create_plan()")
    if len({id(s.nest) for s in group}) != len(group):
        raise ScheduleError(where, "a nest appears twice: fuse schedules of different nests")
    ranks = [len(s.order) for s in group]
    count = min(ranks) if partial is None else partial
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= min(ranks):
        raise ScheduleError(where, f"partial must be an integer from 0 to {min(ranks)} (the smallest schedule's "
                                   "dimensions)")
    if partial is None and len(set(ranks)) != 1:
        raise ScheduleError(where, f"full fusing needs schedules of the same dimensions, got {ranks}: "
                                   "fuse a prefix with partial=")
    for d in range(count):
        extents = [s.pieces[s.order[d]].extent for s in group]
        if len(set(extents)) != 1:
            names = ", ".join(f"{s.order[d].name} of schedule{n}: {e}" for n, (s, e) in enumerate(zip(group, extents)))
            raise ScheduleError(where, f"fused dimension {d} has different extents ({names}); schedc fuses "
                                       "dimensions of equal extents")
    return FusedSchedule(FusedNest(group, count))


def _fresh(name: str, taken: list[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    return candidate
