"""Checks a plan must pass before any code is generated; each raises a PlanError with numbers."""

from __future__ import annotations

import math
from fractions import Fraction

from .. import poly
from ..errors import CacheError, PlanError, ScheduleError
from ..ir.affine import Affine, mixed_radix
from ..ir.patterns import reduction
from ..ir.walk import loads
from ..poly import PolyFacts
from ..targets import MemorySpace
from . import online, reduce, scratch
from .launch import Launch


def check_plan(model, facts: PolyFacts, launch: Launch) -> None:
    _check_caches(model)
    _check_roles(model)
    _check_unrolled(model)
    _check_warps(model)
    _check_launch(model, launch)
    _check_fusion(model)
    tiles = scratch.arrays(model)
    for part in model.parts:
        across = reduce.find(part, model.outside_fusion, tensorized=model.tensorize is not None, scratch=tiles,
                             inside_parts=scratch.inside_parts(model))
        if across:
            reduce.check_lanes(part, across[0], launch.block)
        _check_races(part, across[0].loops if across else ())
        _check_order(part)


def _check_fusion(model) -> None:
    """A fused schedule runs its parts in turn at each point of the fused dimensions, and only
    there: an array one part writes may be touched by another only at elements of the same fused
    point (``_shared_by_points``). A part's unfused loops may
    be bound to threads only (the parts run in turn on the block's threads), as many in each part
    that binds a unit."""
    fusion = model.fusion
    if fusion is None:
        return
    unfused = {model.dims[d][0] for dims in fusion.unfused for d in dims}
    threads: dict[object, tuple[int, str]] = {}  # unit: (threads, the first part's loops)
    for b in model.bindings:
        own = [loop for loop in b.loops if model.dims[model.loop(loop).dim][0] in unfused]
        if own and b.unit.level != "thread":
            raise PlanError(render_bindings(model), f"{own[0]} is a loop of an unfused dimension of a fused schedule, "
                                                    f"bound to {b.unit.name}: a part runs its own loops on the "
                                                    "block's threads (THREAD_*), in turn with the others",
                            loops=(own[0],))
        if b.unit.level != "thread":
            continue
        count = math.prod(model.loop(loop).extent for loop in b.loops)
        seen = threads.setdefault(b.unit, (count, ", ".join(b.loops)))
        if seen[0] != count:
            raise PlanError(render_bindings(model), f"{b.unit.name} runs {seen[1]} ({seen[0]} threads) in one part "
                                                    f"and {', '.join(b.loops)} ({count}) in another: the parts share "
                                                    "the block's threads, give them equal counts",
                            loops=tuple(b.loops))
    touches: dict[str, list[tuple[int, int, str, tuple[Affine, ...]]]] = {}
    for n, statement in enumerate(model.statements):
        part = fusion.part_of(n)
        accesses = [("writes", statement.buffer, statement.index)] + [("reads", ld.buffer, ld.index)
                                                                      for ld in loads(statement.value)]
        for verb, array, index in accesses:
            touches.setdefault(array, []).append((part, n, verb, tuple(Affine.of(i) for i in index)))
    fused = [name for name, _ in model.dims if name not in unfused and _per_point(model, name)]
    form = online.derive(model)  # row vectors a chain keeps across the tiles of its first C's columns
    across = online.carried_dims(model) if form is not None else frozenset()
    for array, uses in touches.items():
        written = {part for part, _, verb, _ in uses if verb == "writes"}
        if not written or len({part for part, *_ in uses}) < 2:
            continue
        points = [name for name in fused if name not in across] if form and array in form.carried else fused
        _shared_by_points(fusion.name, array, uses, unfused, points, dict(model.dims))
        moving = any({v for a in subscripts for v in a.variables()} & unfused for *_, subscripts in uses)
        cached = next((c for c in model.caches if c.array == array), None)
        if moving and cached is not None and not _around_parts(model, cached):
            raise CacheError(f"cache({array}, index={cached.index}, location={cached.location.name})",
                             f"{array} is shared by fused schedules that each run their own loops over it (the "
                             "elements of a fused point): only a SHARED cache filled before the fusing index "
                             f"{fusion.name} is built for that (the block's tile for every part: cache it at a loop "
                             f"each thread runs outside {fusion.name}, such as ii = split(i, 1) of a block-bound "
                             "i), or leave it uncached", loops=(cached.index,))


def _per_point(model, dim: str) -> bool:
    """Whether the parts run in turn at each value of fused dimension ``dim`` rather than each over
    all of it: it has a loop before the fusing index or bound to a grid or thread unit (the parts
    meet only where a barrier separates them), or, tensorized, a loop of several values besides the
    tile's own m and n (the epilogue runs once per accumulator tile). A part runs a dimension whose
    loops are all serial and after the fusing index (or the tile's m and n) over all of it."""
    t = model.tensorize
    tile = set(t.loops[:2]) if t is not None else set()
    for lp in model.loops:
        several = not isinstance(lp.end, int) or lp.end - lp.begin > lp.step
        if model.dims[lp.dim][0] != dim or not several:  # a loop of one value makes no points apart
            continue
        if lp.name in model.outside_fusion or model.binding_of(lp.name) is not None:
            return True
        if t is not None and lp.name not in tile:
            return True
    return False


def _around_parts(model, cached) -> bool:
    """A SHARED cache filled before the fusing index: one tile of the block for every part, its
    threads' accesses in each part separated from the next part's by the parts' barriers."""
    return cached.location is MemorySpace.SHARED and scratch.around_parts(model, cached.index)


def _shared_by_points(fusing: str, array: str, uses: list, unfused: set[str], fused: list[str],
                      extents: dict | None = None) -> None:
    """An array several parts touch, one writing it, is shared legally where each of its elements
    belongs to one point of the fused dimensions: some of its dimensions are subscripted alike
    in every access, by the fused indices only, and tell the points apart (a row ``S[i, :]`` of
    a schedule fused over ``i``; ``S[128 * b + i, :]`` over ``b`` and ``i`` of 128 values: a
    batch's rows in turn; its other subscripts may move with each part's own loops)."""
    _, n0, verb0, first = next(u for u in uses if u[2] == "writes")
    kept = [d for d in range(len(first))
            if all(sub[d] == first[d] and not (first[d].variables() & unfused) for *_, sub in uses)]
    if _rank(tuple(first[d] for d in kept), fused) == len(fused) or \
            mixed_radix(tuple(first[d] for d in kept), fused, extents or {}):
        return
    rule = ("fused schedules run in turn only at each point of the fused dimensions, so an array one of "
            "them writes may be shared only where each element belongs to one point: some of its "
            "dimensions subscripted alike in every access, by the fused indices only, a different element "
            "at each point")
    where = f"acc.fuse (fusing index {fusing})"
    candidates = [d for d in range(len(first)) if not first[d].variables() & unfused]  # of fused indices only
    for part, n, verb, subscripts in uses:
        if any(subscripts[d] != first[d] for d in candidates):
            raise ScheduleError(where, f"statement {n + 1} (schedule {part}) {verb} {array}[{_render(subscripts)}] "
                                       f"and statement {n0 + 1} {verb0} {array}[{_render(first)}]: {rule}")
    if not candidates:
        names = sorted({v for a in first for v in a.variables()} & unfused)
        raise ScheduleError(where, f"statement {n0 + 1} {verb0} {array}[{_render(first)}], which moves with its "
                                   f"own index {names[0]} in every dimension, and another fused schedule touches it: "
                                   f"{rule}")
    raise ScheduleError(where, f"statement {n0 + 1} {verb0} {array}[{_render(first)}], one element for "
                               f"several points of the fused indices ({', '.join(fused)}), and another "
                               f"fused schedule touches it: {rule}")


def _rank(subscripts: tuple[Affine, ...], names: list[str]) -> int:
    """The rank of the subscripts' coefficients over ``names`` (full: distinct points, distinct elements)."""
    rows = [[Fraction(a.coeff(name)) for name in names] for a in subscripts]
    rank = 0
    for col in range(len(names)):
        pivot = next((r for r in range(rank, len(rows)) if rows[r][col]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for r in range(len(rows)):
            if r != rank and rows[r][col]:
                factor = rows[r][col] / rows[rank][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[rank])]
        rank += 1
    return rank


def _render(subscripts: tuple[Affine, ...]) -> str:
    return ", ".join(str(a) for a in subscripts)


def render_bindings(model) -> str:
    parts = []
    for b in model.bindings:
        key = b.loops[0] if len(b.loops) == 1 else f"({', '.join(b.loops)})"
        parts.append(f"{key}: {b.unit.name}")
    return "bind({" + ", ".join(parts) + "})"


def _check_roles(model) -> None:
    for buffer in model.buffers:
        if buffer.role == "output":
            missing = poly.unwritten_element(model, buffer.name)
            if missing is not None:
                element, sizes = missing
                shape = ", ".join(map(str, buffer.shape))
                raise PlanError(
                    f"{buffer.name}",
                    f"Role.OUTPUT array {buffer.name}[{shape}] is not fully written: no "
                    f"iteration writes {buffer.name}[{', '.join(map(str, element))}]{poly.when(sizes)}; use "
                    "Role.INPUT_OUTPUT to keep the elements the nest does not write",
                )
    check_reads(model)


def check_reads(model) -> None:
    """OUTPUT and TEMP arrays are read only at elements the nest's order wrote first (a tensorized
    product whose fragments start at a value, ``prologue_op=SET``, does not read its C)."""
    for array in model.undefined_reads:
        if _each_read_written_before(model, array):
            continue
        early = poly.read_before_written(model, array)
        if early is not None:
            raise PlanError(_statement(model, early.statement), _early_read(model, array, early))


def _statement(model, n: int) -> str:
    """Statement ``n`` as the messages name it (with its schedule in a fused one)."""
    return f"statement {n + 1}" + (f" (schedule {model.fusion.part_of(n)})" if model.fusion is not None else "")


def _early_read(model, array: str, early: poly.EarlyRead) -> str:
    element = f"{array}[{', '.join(map(str, early.element))}]"
    at = ", ".join(f"{k} = {v}" for k, v in early.at.items())
    reads = f"the nest reads {element} (at {at}{poly.when(dict(early.sizes))}) before any iteration writes it"
    tensor_c = model.tensorize is not None and model.statements[0].buffer == array
    if model.buffer(array).role == "temp":
        return (f"{array} is Role.TEMP (the function's own scratch, undefined until written) but {reads}: "
                + ("tensorize with prologue_op=MMAFragmentOp.SET (its fragments start at a value), " if tensor_c
                   else "") + "write it first (a statement or a fused part before), or pass it as a "
                "Role.INPUT_OUTPUT argument")
    return (f"{array} is Role.OUTPUT but {reads}; use Role.INPUT_OUTPUT"
            + (" (or tensorize with prologue_op=MMAFragmentOp.SET)" if tensor_c else ""))


def _each_read_written_before(model, array: str) -> bool:
    """Whether every read of ``array`` follows a statement of the same iteration that writes that
    element (the common case, decided without isl)."""
    return all(_written_before(model, n, ld) for n, s in enumerate(model.statements) for ld in loads(s.value)
               if ld.buffer == array)


def _written_before(model, n: int, load) -> bool:
    """Whether an earlier statement of the same iteration writes the element ``load`` reads."""
    element = [Affine.of(i) for i in load.index]
    return any(s.buffer == load.buffer and [Affine.of(i) for i in s.index] == element
               for s in model.statements[:n])


def _check_caches(model) -> None:
    tile = model.tensorize.loops if model.tensorize is not None else ()
    if tile and {lp.name for lp in model.loops[-len(tile):]} != set(tile):
        tile = ()  # not the innermost loops: the tensorize pass says so, a cache inside them is no question yet
    for cache in model.caches:
        if cache.location is MemorySpace.MMA_FRAGMENT and model.tensorize is None:
            raise CacheError(
                f"cache({cache.array}, index={cache.index}, location=MMA_FRAGMENT)",
                "MMA_FRAGMENT caches keep a tensor-core accumulator: tensorize the plan",
                loops=(cache.index,),
            )
        if cache.index in tile[1:]:
            first = min(i for i, lp in enumerate(model.loops) if lp.name in tile)
            outside = [lp.name for lp in model.loops[:first] if model.binding_of(lp.name) is None]
            way = f"{tile[0]} (the whole tile)" + (f" or a loop outside it ({', '.join(outside)})" if outside else "")
            raise CacheError(
                f"cache({cache.array}, index={cache.index}, location={cache.location.name})",
                f"{cache.index} is a loop of the tensorized tile (tensorize(indices=({', '.join(tile)}))): the tile "
                f"is one tensor-core operation, with no loop inside it to cache at; cache at {way}",
                loops=(cache.index,),
            )


def _check_unrolled(model) -> None:
    tile = set(model.tensorize.loops) if model.tensorize else set()
    for name in model.unrolled:
        unit = model.binding_of(name)
        if unit is not None:
            raise PlanError(f"unroll({name})", f"{name} is bound to {unit.name}; only loops can be unrolled",
                            loops=(name,))
        if name in tile:
            raise PlanError(f"unroll({name})", f"{name} is tensorized; its tile is one tensor-core operation",
                            loops=(name,))


def _check_warps(model) -> None:
    groups = [b for b in model.bindings if b.unit.level == "warpgroup"]
    if groups and (model.tensorize is None or model.tensorize.mma_shape.mnk[0] != 64
                   or model.tensorize.mma_shape.blocks != 1):
        raise PlanError(render_bindings(model), f"{groups[0].unit.name} binds warpgroups, which issue wgmma tiles: "
                                                "tensorize with a warpgroup shape (MMAShape.M64xN{n}xK16_B1), or bind "
                                                "WARP_* or THREAD_*", loops=groups[0].loops)
    warp = [b for b in model.bindings if b.unit.level == "warp"]
    if warp and model.tensorize is None:
        raise PlanError(
            render_bindings(model),
            f"{warp[0].unit.name} binds warps, whose 32 lanes would repeat the same iterations; "
            "tensorize the plan or bind THREAD_* instead",
        )


def _check_launch(model, launch: Launch) -> None:
    gpu = model.gpu
    where = render_bindings(model)
    bound = tuple(name for b in model.bindings for name in b.loops)
    if launch.threads > gpu.max_threads_per_block:
        raise PlanError(
            where,
            f"{launch.threads} threads per block (block {launch.block[0]} x {launch.block[1]} x "
            f"{launch.block[2]}); {gpu.name} allows {gpu.max_threads_per_block}",
            loops=bound,
        )
    for axis, got, limit in zip("xyz", launch.block, gpu.max_block_dims):
        if got > limit:
            raise PlanError(where, f"block dimension {axis} is {got}; {gpu.name} allows {limit}", loops=bound)
    for axis, got, limit in zip("xyz", launch.grid, gpu.max_grid_dims):
        if isinstance(got, int) and got > limit:  # a count of run-time sizes: checked at each call
            raise PlanError(where, f"grid dimension {axis} is {got} blocks; {gpu.name} allows {limit}", loops=bound)
    blocks = model.blocks_per_sm
    if blocks and blocks * launch.threads > gpu.max_threads_per_sm:
        raise PlanError(f"create_plan(_blocks_per_SM={blocks})",
                        f"{blocks} blocks of {launch.threads} threads are {blocks * launch.threads} threads; a "
                        f"{gpu.name} multiprocessor holds {gpu.max_threads_per_sm}", loops=bound)


def _check_races(model, reduced: tuple[str, ...] = ()) -> None:
    """Different grid coordinates must never touch an element that one of them writes, except
    threads that differ in ``reduced`` loops only: their reduction meets through a combine."""
    bound = [name for b in model.bindings for name in b.loops if name not in reduced]
    conflict = poly.find_race(model, bound, frozenset({model.adds_into} - {""}))
    if conflict is None:
        return
    units = {name: b.unit.name for b in model.bindings for name in b.loops}
    differ = [n for n in bound if conflict.first[n] != conflict.second[n]]
    where = ", ".join(f"{units[n]} {n}={conflict.first[n]} vs {conflict.second[n]}" for n in differ)
    raise PlanError(
        render_bindings(model),
        f"iterations {_point(model, conflict.first)} and {_point(model, conflict.second)} run "
        f"concurrently ({where}) and {_verbs(conflict)} {_element(conflict)}{conflict.when}: a race"
        + _no_reduction(model, conflict.array, differ),
        loops=tuple(differ),
    )


def _no_reduction(model, array: str, differ: list[str]) -> str:
    """Where the racing threads differ only in loops the raced element's statement does not
    depend on, why it is no reduction across them (``reduce.find`` takes one that is)."""
    store = next((s for s in model.statements if s.buffer == array), None)
    if store is None:
        return ""
    written = {v for i in store.index for v in Affine.of(i).variables()}
    if any(model.dims[model.loop(n).dim][0] in written for n in differ):
        return ""
    odd = [s for s in model.statements if reduction(s) is None]
    what = (f"{store.buffer}'s statement is not T = T + X, acc.max(T, X) or acc.min(T, X) with X not reading T"
            if store in odd else f"the nest holds another statement ({odd[0].buffer}'s)" if odd else "")
    if not what:
        return ""
    return (f". Every thread of {', '.join(differ)} writes the same element, and {what}: threads combine only "
            "such reductions, in a nest of their own (T -= X is T += -X; other statements go in a nest of their "
            "own, fused with acc.fuse)")


def _check_order(model) -> None:
    """The loop order must keep every dependence (reductions may be reassociated)."""
    bound = [name for b in model.bindings for name in b.loops]
    conflict = poly.find_order_violation(model, bound)
    if conflict is None:
        return
    order = ", ".join(lp.name for lp in model.loops)
    raise ScheduleError(
        f"reorder({order})",
        f"statement {conflict.second_statement + 1} at {_point(model, conflict.second)} "
        f"{'writes' if conflict.second_writes else 'reads'} {_element(conflict)}, which statement "
        f"{conflict.first_statement + 1} at {_point(model, conflict.first)} "
        f"{'writes' if conflict.first_writes else 'reads'} earlier in the nest{conflict.when}; the schedule runs "
        "them the other way round",
        loops=tuple(n for n in conflict.first if conflict.first[n] != conflict.second[n]),
    )


def _point(model, values: dict[str, int]) -> str:
    return "(" + ", ".join(f"{n}={values[n]}" for n in (lp.name for lp in model.loops)) + ")"


def _element(conflict) -> str:
    return f"{conflict.array}[{', '.join(str(e) for e in conflict.element)}]"


def _verbs(conflict) -> str:
    if conflict.first_writes and conflict.second_writes:
        return "both write"
    return "one writes what the other reads:"
