"""A plan frozen into a Model: the only place the front end's objects (Plan, Schedule, Nest,
Array, Index) are read; every later stage works on the Model they give."""

from __future__ import annotations

import numpy as np

from ..errors import PlanError
from ..ir import kernel as k
from ..ir.kernel import Var
from ..ir.model import BindingSpec, CacheSpec, FusionSpec, GroupSpec, LoopSpec, Model, TensorizeSpec
from ..ir.walk import substitute
from . import convert
from .array import Array, Role
from .dimension import Dimension, as_extent


def freeze(plan, function: str, args: tuple[Array, ...]) -> Model:
    """Snapshot ``plan`` (a ``schedc.Plan``) as a Model for the function ``function`` taking ``args``."""
    schedule, nest = plan.schedule, plan.schedule.nest
    sizes = _sizes(function, nest, args)
    args = tuple(a for a in args if isinstance(a, Array))
    used = nest.arrays()
    internal = [a for a in used if a.role in (Role.CONST, Role.TEMP)]
    for array in used:
        if array.role not in (Role.CONST, Role.TEMP) and not any(array is a for a in args):
            raise PlanError(
                f"Package.add({function})",
                f"{array.display_name} is used by the nest but is not in args",
            )
    buffers = tuple(_buffer(a, k.BufferKind.PARAM) for a in args) + tuple(
        _buffer(a, k.BufferKind.CONST if a.role is Role.CONST else k.BufferKind.WORKSPACE) for a in internal
    )
    names = [b.name for b in buffers]
    if None in names or len(set(names)) != len(names):
        raise PlanError(f"Package.add({function})", f"arrays need distinct names, got {names}")
    fusion = None
    if _fused_nest(nest):
        statements, fusion = _fused(plan, nest)
        order = [index for index in schedule.order if index is not nest.fusing]
    else:
        statements = tuple(convert.statement(s) for s in nest.statements)
        order = schedule.order
    loops = tuple(_loop(schedule, index) for index in order)
    groups = tuple(
        GroupSpec(
            g.begin,
            g.end,
            tuple(i.name for i in order if n in schedule.pieces[i].groups),
        )
        for n, g in enumerate(schedule.groups)
    )
    bindings = tuple(
        BindingSpec(unit, tuple(i.name for i in group))
        for unit, group in sorted([*plan.bindings.items(), *plan.part_bindings], key=lambda item: item[0].value)
    )
    return Model(
        function=function,
        target=plan.target.model,
        buffers=buffers,
        dims=tuple((i.name, as_extent(n)) for i, n in zip(nest.indices, nest.shape)
                   if i is not getattr(nest, "fusing", None)),
        statements=statements,
        loops=loops,
        groups=groups,
        bindings=bindings,
        tensorize=_tensorize_spec(plan.tensorization),
        chained=_tensorize_spec(plan.chained),
        unrolled=tuple(i.name for i in plan.unrolled),
        caches=tuple(
            CacheSpec(c.source.name, c.index.name if c.index is not None else "", c.location, c.strategy,
                      c.pipeline, c.stages, c.automatic, c.engine, c.element_type, c.max_elements, c.order,
                      c.from_shared, c.trigger.name if c.trigger is not None else "", c.vectorize)
            for c in plan.caches
        ),
        blocks_per_sm=plan.blocks_per_sm,
        dynamic_shared=plan.dynamic_shared,
        specialization=plan.specialization,
        teams=plan.teams,
        persistence=plan.persistence,
        clustering=plan.clustering,
        split_deterministic=plan.split_deterministic,
        overlap=plan.overlapped,
        alternate=plan.alternated,
        fusion=fusion,
        sizes=sizes,
    )


def _sizes(function: str, nest, args: tuple) -> tuple[tuple[str, int], ...]:
    """The run-time sizes among ``args`` with their positions; refused where a size the nest or
    its arrays use is not among them, is not read from an argument array's shape, or one given
    is used by none."""
    where = f"Package.add({function})"
    given = [(a.name, n) for n, a in enumerate(args) if isinstance(a, Dimension)]
    every = {id(n): n for a in [*args, *nest.arrays()] if isinstance(a, Array) for n in a.shape
             if isinstance(n, Dimension)} | {id(n): n for n in nest.shape if isinstance(n, Dimension)} \
        | {id(a): a for a in args if isinstance(a, Dimension)}
    named = [d.name for d in every.values()]
    for name in sorted({n for n in named if named.count(n) > 1}):
        raise PlanError(where, f"two different run-time sizes are named {name}: give each size its own variable "
                               "name (create_dimensions names a size after its variable)")
    arrays = [a for a in args if isinstance(a, Array)]
    readable = {n.name for a in arrays for n in a.shape if isinstance(n, Dimension)}
    used = readable | {n.name for a in nest.arrays() for n in a.shape if isinstance(n, Dimension)} \
        | {n.name for n in nest.shape if isinstance(n, Dimension)}
    names = {name for name, _ in given}
    for name in sorted(used - names):
        raise PlanError(where, f"{name} is a run-time size the nest uses: pass it in args (the C function takes it "
                               f"there), e.g. args=(..., {name})")
    for name in sorted(names - used):
        raise PlanError(where, f"args has the run-time size {name}, which no array or nest of the function uses")
    for name in sorted(used - readable):
        raise PlanError(where, f"the run-time size {name} is the extent of no argument array's dimension: a call "
                               "reads each size from its arrays' shapes")
    taken = {a.name for a in nest.arrays()} | {i.name for i in nest.indices}
    for name in sorted(names & taken):
        raise PlanError(where, f"the run-time size {name} has the name of an array or index of the function")
    return tuple(given)


def _fused_nest(nest) -> bool:
    """Whether ``nest`` is a fused schedule's (``schedc.frontend.fuse.FusedNest``: a fusing index)."""
    return getattr(nest, "fusing", None) is not None


def _fused(plan, nest) -> tuple[tuple[k.Store, ...], FusionSpec]:
    """A fused schedule's statements over its own indices, in parts, and where the fusing index
    is; refused where the plan asks the fusing index to be anything but a serial loop."""
    f = nest.fusing
    where = f"plan of a fused schedule ({f.name} is its fusing index)"
    if any(f in group for group in [*plan.bindings.values(), *(g for _, g in plan.part_bindings)]):
        raise PlanError(where, f"the fusing index {f.name} runs its schedules in turn: it cannot be bound to a "
                               "grid unit")
    if plan.tensorization is not None and f in plan.tensorization.indices:
        raise PlanError(where, f"the fusing index {f.name} cannot be tensorized")
    if f in plan.unrolled:
        raise PlanError(where, f"unroll({f.name}): the fusing index picks the schedule whose work runs; its values "
                               "are emitted one after another already (unroll a loop of the schedules)")
    if any(c.index is f or c.trigger is f for c in plan.caches):
        raise PlanError(where, f"a cache at the fusing index {f.name}: place it at a loop of the schedules' work")
    statements: list[k.Store] = []
    parts: list[tuple[int, ...]] = []
    for p, part in enumerate(nest.parts):
        renames = {old: Var(new) for old, new in nest.renames(p).items()}
        first = len(statements)
        statements += [_renamed(convert.statement(s), renames) for s in part.statements]
        parts.append(tuple(range(first, len(statements))))
    order = plan.schedule.order
    at = order.index(f)
    # the Model's dimensions leave out the fusing one: dimension d here is d + 1 of the fused nest
    unfused = tuple(tuple(d - 1 for d in nest.unfused(p)) for p in range(len(nest.parts)))
    return tuple(statements), FusionSpec(at, tuple(parts), unfused, f.name)


def _renamed(store: k.Store, renames: dict[str, k.Expr]) -> k.Store:
    return k.Store(store.buffer, tuple(substitute(i, renames) for i in store.index), substitute(store.value, renames))


def _buffer(array: Array, kind: k.BufferKind) -> k.Buffer:
    """The array as the kernels see it. A TEMP array is a WORKSPACE: scratch in global memory
    that the loader allocates per stream for the call's sizes (one ``__device__`` array would be
    shared by calls running at once on several streams)."""
    data: tuple[int, ...] = ()
    if array.data is not None:
        bits = array.data.view(np.dtype(f"u{array.element_type.size}") if array.element_type.size > 1 else np.uint8)
        data = tuple(int(x) for x in _storage_order(array, bits))
    shape = tuple(as_extent(n) for n in array.shape)
    return k.Buffer(array.name, array.element_type, shape, array.strides, kind, array.role.value, data)


def _storage_order(array: Array, values: np.ndarray) -> np.ndarray:
    """Elements laid out by the array's strides (gaps of explicit layouts hold zeros)."""
    out = np.zeros(array.size, dtype=values.dtype)
    grids = np.indices(array.shape)
    offsets = sum(g * s for g, s in zip(grids, array.strides))
    out[offsets.ravel()] = values.ravel()
    return out


def _loop(schedule, index) -> LoopSpec:
    p = schedule.pieces[index]
    fused = _fused_nest(schedule.nest)  # the Model's dimensions leave out the fusing one
    return LoopSpec(index.name, p.dim - fused, p.begin, p.end, p.step)


def _tensorize_spec(t) -> TensorizeSpec | None:
    if t is None:
        return None
    return TensorizeSpec(tuple(i.name for i in t.indices), t.mma_shape, t.num_total_passes, t.num_fused_passes,
                         t.prologue_op, t.prologue_arg, t.epilogue_op, t.epilogue_arg, t.instruction, t.block_order)
