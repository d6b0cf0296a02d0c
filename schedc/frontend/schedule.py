"""Schedules: split, tile and reorder the loops of a nest (Accera's ``acc.Schedule``).

Each schedule index is a *piece* of one nest dimension and takes offset values, as in
Accera: after ``ii = split(i, 32)``, ``i`` runs over 0, 32, 64, ... and ``ii`` over 0..31, and
the nest's ``i`` is ``i + ii``.

>>> import schedc as acc
>>> A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64, 8))
>>> nest = acc.Nest(shape=(64, 8))
>>> i, j = nest.get_indices()
>>> @nest.iteration_logic
... def _():
...     A[i, j] += 1.0
>>> schedule = nest.create_schedule()
>>> ii = schedule.split(i, 32)
>>> print(schedule)
for i in range(0, 64, 32):
  for ii in range(0, 32, 1):
    for j in range(0, 8, 1):
>>> schedule.reorder(i, j, ii)
>>> [index.name for index in schedule.get_indices()]
['i', 'j', 'ii']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..errors import ScheduleError
from ..ir.affine import Affine
from .dimension import as_extent
from .expr import Index
from .names import name_in_use, unusable
from .parameters import Call, Recording, deferred, has_parameter, recorded


class Scheduled(Protocol):
    """What a schedule reads of its nest (a ``schedc.Nest``, which makes it: ``create_schedule``)."""

    indices: tuple[Index, ...]
    shape: tuple[int, ...]


@dataclass
class Piece:
    """A schedule index: a part of nest dimension ``dim`` taking values range(begin, end, step).

    ``groups`` lists the split groups it belongs to (see ``SplitGroup``).
    """

    index: Index
    dim: int
    begin: int
    end: int | Affine  # a run-time size (create_dimensions) as an Affine
    step: int
    groups: list[int] = field(default_factory=list)

    @property
    def extent(self) -> int | Affine:
        """Number of iterations (a run-time size's own loop: the size)."""
        if isinstance(self.end, Affine):
            if self.step != 1 or self.begin:
                raise ScheduleError(self.index.name, f"{self.index.name} runs range({self.begin}, {self.end}, "
                                                     f"{self.step}): its count is known at run time only")
            return self.end
        return -(-(self.end - self.begin) // self.step)


@dataclass(frozen=True)
class SplitGroup:
    """The value an index carried before a split: the sum of its pieces stays in [begin, end)."""

    begin: int
    end: int


class Schedule:
    """The loop order and splits of a nest. Create with ``nest.create_schedule()``."""


    def print(self) -> None:
        """Print the loop nest in the schedule's order (Accera's ``schedule.print()``): each
        loop with its range and iteration count, then the statements."""
        self.create_plan().print()

    def __getattr__(self, name: str):  # Accera's methods schedc does not have: the reason
        from ..accera_names import refuse_method

        if name.startswith("__"):
            raise AttributeError(name)
        return refuse_method("Schedule", name)
    def __init__(self, nest: Scheduled) -> None:
        self.nest = nest
        self.pieces: dict[Index, Piece] = {
            index: Piece(index, d, 0, as_extent(n), 1) for d, (index, n) in enumerate(zip(nest.indices, nest.shape))
        }
        self.order: list[Index] = list(nest.indices)
        self.groups: list[SplitGroup] = []
        self.splits: list[tuple[Index, Index]] = []  # (outer, inner) of every split
        self._plan_created = False

    # -- queries -----------------------------------------------------------------------------

    def get_indices(self) -> tuple[Index, ...]:
        """The schedule's indices in loop order, outermost first."""
        if getattr(self, "_order_is_parameter", False):
            raise ScheduleError("get_indices()", "the loop order is a parameter (reorder(order=...)); it has a "
                                                 "value only at Package.add")
        return tuple(self.order)

    def piece(self, index: Index) -> Piece:
        return self.pieces[index]

    def _name_indices(self, arguments: object, scope: dict | None = None) -> None:
        """Before a call (``recorded``): the indices named as the script's variables name them now."""
        name_in_use(list(self.pieces), self.nest.logic, arguments, Index, scope)

    def __str__(self) -> str:
        lines = []
        for depth, index in enumerate(self.order):
            p = self.pieces[index]
            lines.append(f"{'  ' * depth}for {index.name} in range({p.begin}, {p.end}, {p.step}):")
        return "\n".join(lines)

    # -- transformations ---------------------------------------------------------------------

    def _split_placeholder(self, index: Index, size: int) -> Index:
        """A split whose factor is a parameter (or of a deferred schedule): the new index, in
        place; the factor is checked when the parameters have values."""
        where = f"split({_name(index)}, {size!r})"
        piece = self._resolve(where, index)
        if not has_parameter(size) and (isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1):
            raise ScheduleError(where, "factor must be a positive integer")
        self._check_open(where)
        inner = Index(self._fresh_name(index), self.nest)
        self.pieces[inner] = Piece(inner, piece.dim, 0, size, piece.step)
        self.splits.append((index, inner))
        self.order.insert(self.order.index(index) + 1, inner)
        return inner

    @recorded(_split_placeholder)
    def split(self, index: Index, size: int) -> Index:
        """Split ``index`` into an outer loop stepping by ``size`` and a new inner loop.

        **Requires:** ``index`` is an index of this schedule; ``size`` is a positive multiple of
        the index's step (a size that does not divide the range leaves a partial last tile,
        guarded in the generated code; a size past the range, as Accera allows, one partial tile).

        Returns the new inner index, placed right after ``index``. Before → after::

            for i in range(0, 64, 1):          for i in range(0, 64, 32):
                ...                    →           for ii in range(0, 32, 1):
        """
        where = f"split({_name(index)}, {size!r})"
        piece = self._resolve(where, index)
        if has_parameter(size):  # a schedule recording its steps takes the placeholder path: a fused one does not
            raise ScheduleError(where, "a fused schedule takes no parameters: give the split a number (build one "
                                       "package function a value, in a loop over them)")
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
            raise ScheduleError(where, "factor must be a positive integer")
        size = int(size)
        if size % piece.step:
            raise ScheduleError(
                where, f"factor must be a multiple of {index.name}'s step {piece.step}"
            )
        self._check_open(where)
        self.groups.append(SplitGroup(piece.begin, piece.end))
        group = len(self.groups) - 1
        inner = Index(self._fresh_name(index), self.nest)
        inner_piece = Piece(inner, piece.dim, 0, size, piece.step, [*piece.groups, group])
        piece.groups.append(group)
        piece.step = size
        self.pieces[inner] = inner_piece
        self.splits.append((index, inner))
        self.order.insert(self.order.index(index) + 1, inner)
        return inner

    @recorded()
    def tile(self, shape: Mapping[Index, int] | tuple[Index, ...],
             sizes: tuple[int, ...] | None = None) -> tuple[Index, ...]:
        """Split each index of ``shape`` by its size; outer indices keep their places and the
        new inner indices follow the last of them, in the mapping's order. Accera's older form
        ``tile((i, j), (8, 4))`` (indices, then sizes) is the same as ``tile({i: 8, j: 4})``.

        Returns the inner indices. Before → after for ``tile({i: 8, j: 4})``::

            for i: for j: ...    →    for i (step 8): for j (step 4): for ii: for jj: ...
        """
        if sizes is not None:
            where = f"tile({shape!r}, {sizes!r})"
            if not isinstance(shape, tuple | list) or not isinstance(sizes, tuple | list) or len(shape) != len(sizes):
                raise ScheduleError(where, "tile(indices, sizes) takes two tuples of the same length")
            shape = dict(zip(shape, sizes, strict=True))
        where = f"tile({_render_mapping(shape)})"
        if not isinstance(shape, Mapping) or not shape:
            raise ScheduleError(where, "shape must be a non-empty dict of index: size")
        for index in shape:
            self._resolve(where, index)
        inners = [self.split(index, size) for index, size in shape.items()]
        rest = [index for index in self.order if index not in inners]
        cut = max(rest.index(index) for index in shape) + 1
        self.order = rest[:cut] + inners + rest[cut:]
        return tuple(inners)

    def _reorder_placeholder(self, order, *more) -> None:
        if has_parameter((order, more)):
            self._order_is_parameter = True  # known at Package.add
        else:
            Schedule.reorder.__wrapped__(self, order, *more)

    @recorded(_reorder_placeholder)
    def reorder(self, order: Index | tuple[Index, ...] | list[Index], *more: Index) -> None:
        """Set the loop order: ``reorder(k, i, j)`` or ``reorder((k, i, j))``.

        **Requires:** a permutation of all the schedule's indices in which each split's outer
        index comes before its inner index. Reduction loops (indices that only an
        accumulation sums over) may move freely: sums are reassociated, which changes
        floating-point rounding only.
        """
        indices = (*order, *more) if isinstance(order, tuple | list) else (order, *more)
        where = f"reorder({', '.join(_name(i) for i in indices)})"
        for index in indices:
            self._resolve(where, index)
        if len(set(indices)) != len(indices):
            twice = sorted({i.name for i in indices if indices.count(i) > 1})
            raise ScheduleError(where, f"{', '.join(twice)} appears more than once")
        missing = [i.name for i in self.order if i not in indices]
        if missing:
            raise ScheduleError(
                where, f"not a permutation of the schedule's indices: {', '.join(missing)} missing"
            )
        self._check_split_order(where, indices)
        self._check_open(where)
        self.order = list(indices)

    def create_plan(self, target=None, _blocks_per_SM: int | None = None,  # noqa: N803 - Accera's name
                    _dynamic_shared_memory_size: int | None = None):
        """A plan for running this schedule on ``target`` (default: NVIDIA H100).

        ``_blocks_per_SM`` (Accera's name): the blocks each multiprocessor should hold at once;
        the compiler then keeps each thread's registers within the share that allows
        (``__launch_bounds__(threads, blocks)``). The plan is refused if the blocks' threads or
        shared memory cannot fit on one multiprocessor. ``_dynamic_shared_memory_size`` (Accera's
        name): the bytes of dynamic shared memory each block is launched with, at least what the
        caches need (refused, with both numbers, when they need more) and at most the target's
        opt-in limit; by default exactly what they need. 0 leaves either unset, as in Accera."""
        from ..targets import Target
        from .plan import Plan

        options = {"_blocks_per_SM": _blocks_per_SM, "_dynamic_shared_memory_size": _dynamic_shared_memory_size}
        later = deferred(self) or has_parameter((target, options))
        if later:  # checked when the parameters have values
            plan = Plan(self, target if isinstance(target, Target) else Target())
        else:
            plan = Plan(self, target if target is not None else Target(), blocks_per_sm=_blocks_per_SM,
                        dynamic_shared=_dynamic_shared_memory_size)
        plan._recording = Recording(Call("create_plan", (target,), options), self, deferred=later)
        return plan

    def _create_tensorizable_plan(self, target, block_indices, warp_indices, tensor_indices, outer_nest_order,
                                  dynamic_shared_memory_size: int = 0, blocks_per_SM: int = 0):  # noqa: N803
        """Accera's helper for a tensorized plan (its GPU tests and GEMM benchmarker use it):
        the loops in ``outer_nest_order`` then the three ``tensor_indices``; a plan on
        ``target`` (a size of 0: unset) with ``block_indices`` (i, j) bound to BLOCK_Y,
        BLOCK_X and ``warp_indices`` (ii, jj) to WARP_Y, WARP_X. Returns the plan and the tensor
        indices, to pass to ``plan.tensorize``.

        >>> import schedc as acc
        >>> nest = acc.Nest((64, 64, 64)); i, j, k = nest.get_indices()
        >>> A, B, C = (acc.Array(role=r, element_type=acc.ScalarType.float16, shape=(64, 64))
        ...            for r in (acc.Role.INPUT, acc.Role.INPUT, acc.Role.INPUT_OUTPUT))
        >>> @nest.iteration_logic
        ... def _():
        ...     C[i, j] += A[i, k] * B[k, j]
        >>> s = nest.create_schedule()
        >>> ii, jj, kk = s.tile({i: 32, j: 32, k: 16})
        >>> iii, jjj = s.tile({ii: 16, jj: 16})
        >>> plan, tensor = s._create_tensorizable_plan(acc.Target(acc.Target.Model.NVIDIA_A100), (i, j), (ii, jj),
        ...                                            (iii, jjj, kk), (i, j, k, ii, jj))
        >>> [x.name for x in tensor], [x.name for x in s.order]
        (['iii', 'jjj', 'kk'], ['i', 'j', 'k', 'ii', 'jj', 'iii', 'jjj', 'kk'])
        """
        from ..targets import GridUnit

        i, j = block_indices
        ii, jj = warp_indices
        iii, jjj, kk = tensor_indices
        self.reorder(*outer_nest_order, iii, jjj, kk)
        plan = self.create_plan(target, _dynamic_shared_memory_size=dynamic_shared_memory_size or None,
                                _blocks_per_SM=blocks_per_SM or None)
        plan.bind({i: GridUnit.BLOCK_Y, j: GridUnit.BLOCK_X, ii: GridUnit.WARP_Y, jj: GridUnit.WARP_X})
        return plan, tuple(tensor_indices)

    # -- helpers -----------------------------------------------------------------------------

    def _resolve(self, where: str, index: object) -> Piece:
        if not isinstance(index, Index):
            raise ScheduleError(where, f"{index!r} is not an index")
        if index.owner is not self.nest:
            raise ScheduleError(where, f"index {index.name} belongs to another nest")
        if index not in self.pieces:
            raise ScheduleError(
                where, f"index {index.name} is not an index of this schedule (made by another one)"
            )
        return self.pieces[index]

    def _check_open(self, where: str) -> None:
        if self._plan_created:
            raise ScheduleError(
                where, "the schedule already has a plan; transform it before create_plan()"
            )

    def _check_split_order(self, where: str, indices: tuple[Index, ...]) -> None:
        position = {index: n for n, index in enumerate(indices)}
        for outer, inner in self.splits:
            if position[inner] < position[outer]:
                raise ScheduleError(
                    where, f"{inner.name} was split from {outer.name} and must come after it"
                )

    def _fresh_name(self, index: Index) -> str:
        """The split of ``i`` is ``ii``, of ``ii`` ``iii``: the index's name and its dimension's
        initial, numbered where taken (by a name or default name of this schedule, or C)."""
        root = self.nest.indices[self.pieces[index].dim].name
        name = index.name + root[0]
        pieces = self.pieces.values()
        taken = {p.index.name for p in pieces} | {p.index.default_name for p in pieces}
        suffix = 1
        candidate = name
        while candidate in taken or unusable(candidate) is not None:
            suffix += 1
            candidate = f"{name}{suffix}"
        return candidate


def _name(index: object) -> str:
    return index.name if isinstance(index, Index) else repr(index)


def _render_mapping(shape: object) -> str:
    if not isinstance(shape, Mapping):
        return repr(shape)
    return "{" + ", ".join(f"{_name(k)}: {v!r}" for k, v in shape.items()) + "}"
