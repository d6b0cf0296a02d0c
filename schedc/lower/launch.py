"""Launch shape and grid coordinates: bound loops become block, warp or thread ids.

A bound loop with range(first, stop, step) takes ``first + step * coordinate``. A tuple of
loops bound to one axis enumerates their combinations, the last loop fastest. With WARP_*
bound (or a tensorized plan) the block is ``(warp_x * 32, warp_y, 1)`` threads; with
WARPGROUP_* bound it is ``(warpgroup_x * warpgroup_y * 128, 1, 1)``, warpgroup ``w = threadIdx.x / 128``
at (w % warpgroup_x, w / warpgroup_x). With ``warp_specialize(teams=T)`` the block holds T such
teams of consumer warpgroups (``w`` counts within the thread's team, ``threadIdx.x /
team_threads``), which take a persistent grid's tiles in turn.

A persistent plan (``plan.persistent``) launches ``blocks`` blocks that loop over the grid's
tiles (``persistent_loop``): the block coordinates are then ``tile_x``, ``tile_y``, ``tile_z``,
the work item's tile in grouped order, instead of ``blockIdx``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import PlanError
from ..ir.affine import Affine, affine_expr
from ..ir.kernel import (
    WARPGROUP_INDEX,
    WARPGROUP_THREADS,
    WORK,
    Binary,
    Const,
    Expr,
    Kernel,
    Let,
    Loop,
    Persistent,
    ScalarParam,
    Stmt,
    Var,
    shared_layout,
)
from ..ir.types import ScalarType
from ..ir.walk import is_stmt, substitute, walk_statements
from ..poly import PolyFacts
from ..targets import GridUnit


@dataclass(frozen=True)
class Launch:
    grid: tuple[int | Expr, int | Expr, int | Expr]  # an Expr of run-time sizes where a loop runs to one
    block: tuple[int, int, int]
    coordinates: tuple[Let, ...]  # one per bound loop, outermost binding first
    persistent: Persistent | None = None
    cluster: tuple[int, int, int] = (1, 1, 1)  # blocks of a thread block cluster (plan.cluster)
    teams: int = 1  # warp_specialize(teams=): teams of the block's warpgroups, taking tiles in turn

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def team_threads(self) -> int:
        """The threads of one team (all of the block's with one team)."""
        return self.threads // self.teams

    def team(self) -> Expr:
        """The thread's team: its warpgroups are the team's WARPGROUP coordinates."""
        if self.team_threads % WARPGROUP:
            return Binary("/", Var("threadIdx.x"), Const(self.team_threads))
        per_team = self.team_threads // WARPGROUP
        return WARPGROUP_INDEX if per_team == 1 else Binary("/", WARPGROUP_INDEX, Const(per_team))


_AXES = "xyz"


def launch_shape(model, facts: PolyFacts) -> Launch:
    grid, block = [1, 1, 1], [1, 1, 1]
    warps = model.tensorize is not None or any(b.unit.level == "warp" for b in model.bindings)
    if warps:
        block[0] = model.gpu.warp_size
    groups = {b.unit: math.prod(facts.loop(n).extent for n in b.loops) for b in model.bindings
              if b.unit.level == "warpgroup"}
    teams = 1
    if groups or (model.tensorize is not None and _warpgroup_family(model)):
        teams = _teams(model)
        block[0] = WARPGROUP * math.prod(groups.values()) * teams
    lets: list[Let] = []
    for binding in sorted(model.bindings, key=lambda b: _rank(b.unit)):
        _check_sized(model, facts, binding)
        extents = [facts.loop(name).extent if facts.loop(name).fixed else sized_count(facts.loop(name))
                   for name in binding.loops]
        total = _product(extents)
        axis = _AXES.index(binding.unit.axis)
        if binding.unit.level == "block":
            grid[axis] = total
        elif binding.unit.level == "thread":
            block[axis] = total
        elif binding.unit is GridUnit.WARP_X:
            block[0] = total * model.gpu.warp_size
        elif binding.unit is GridUnit.WARP_Y:
            block[1] = total
        coordinate = _coordinate(binding.unit, model.gpu.warp_size, groups.get(GridUnit.WARPGROUP_X, 1),
                                 math.prod(groups.values()) if teams > 1 else 0)
        lets.extend(_decompose(model, facts, binding, extents, coordinate))
    rank = {lp.name: n for n, lp in enumerate(model.loops)}
    lets.sort(key=lambda let: rank[let.name])
    cluster = cluster_shape(model, grid)
    if model.persistence is None:
        return Launch(tuple(grid), tuple(block), tuple(lets), cluster=cluster, teams=teams)
    group, blocks = model.persistence
    tiles = _product(grid)
    size = math.prod(cluster)
    if blocks and blocks % size:
        raise PlanError(f"persistent(group={group}, blocks={blocks})", f"{blocks} blocks do not make whole clusters "
                                                                       f"of {size}: use a multiple of {size}")
    resident = blocks or model.gpu.sm_count * max(1, model.blocks_per_sm) // size * size
    if isinstance(tiles, int):
        blocks = launched = min(tiles, resident)
    else:  # tiles of run-time sizes: as many blocks as are resident, fewer where there are fewer tiles
        blocks, launched = resident, Binary("min", tiles, Const(resident))
    tile = {f"blockIdx.{a}": Var(f"tile_{a}") for a in _AXES}
    if grid[2] == 1:  # persistent_loop defines tile_z for planes of tiles only
        tile["blockIdx.z"] = Const(0)
    lets = [Let(let.name, substitute(let.value, tile), let.comment) for let in lets]
    return Launch((launched, 1, 1), tuple(block), tuple(lets), Persistent(tuple(grid), blocks, group),
                  (size, 1, 1), teams)


def _teams(model) -> int:
    """warp_specialize(teams=): refused without a persistent grid for the teams to take turns on."""
    if model.teams > 1 and model.persistence is None:
        raise PlanError(f"warp_specialize(teams={model.teams})", f"{model.teams} consumer teams take the tiles of a "
                                                                 "persistent grid in turn, and this plan launches one "
                                                                 "block a tile: add plan.persistent(), or teams=1")
    return model.teams


def sized_count(loop) -> Expr:
    """The iterations of a loop that runs to a run-time size: ``(end - first + step - 1) / step``."""
    span = loop.end.plus(Affine((), loop.step - 1 - loop.first))
    count = affine_expr(span, [])
    return count if loop.step == 1 else Binary("/", count, Const(loop.step))


def _product(extents: list) -> int | Expr:
    fixed = math.prod(e for e in extents if isinstance(e, int))
    sized = [e for e in extents if not isinstance(e, int)]
    if not sized:
        return fixed
    out = sized[0] if fixed == 1 else Binary("*", sized[0], Const(fixed))
    for e in sized[1:]:
        out = Binary("*", out, e)
    return out


def _check_sized(model, facts, binding) -> None:
    """A loop that runs to a run-time size may be bound to blocks only, as the outermost loop of
    its binding (the grid is computed at each call); persistent and clustered grids are fixed."""
    sized = [name for name in binding.loops if not facts.loop(name).fixed]
    if not sized:
        return
    where = f"bind({{{sized[0]}: {binding.unit.name}}})"
    end = facts.loop(sized[0]).end
    if binding.unit.level != "block":
        raise PlanError(where, f"{sized[0]} runs to the run-time size {end}; a block's {binding.unit.level}s are "
                               "fixed when the kernel is built: bind it to BLOCK_* (or split it and bind the inner, "
                               "fixed loop)", loops=tuple(sized))
    if sized != [binding.loops[0]] or len(sized) > 1:
        raise PlanError(where, f"{sized[0]} runs to the run-time size {end}: it may be bound to a block axis as the "
                               "outermost loop of its binding only", loops=tuple(sized))
    if model.clustering is not None:
        raise PlanError(where, f"{sized[0]} runs to the run-time size {end}: clusters divide a grid fixed when the "
                               "kernel is built; bind fixed loops or drop plan.cluster", loops=tuple(sized))


def cluster_shape(model, grid: list[int]) -> tuple[int, int, int]:
    """plan.cluster's blocks as a cluster shape of the grid (refused, with the numbers, where
    the blocks along the unit do not make whole clusters). A persistent grid is one row of
    blocks: its clusters are consecutive blocks, which take consecutive tiles of the grouped
    order, neighbours along BLOCK_Y."""
    if model.clustering is None:
        return (1, 1, 1)
    unit, size = model.clustering
    where = f"cluster(size={size}, unit={unit.name})"
    binding = next((b for b in model.bindings if b.unit is unit), None)
    if binding is None:
        raise PlanError(where, f"no loop is bound to {unit.name}: bind the loop over the tiles that should share "
                               "operands to it")
    axis = _AXES.index(unit.axis)
    if grid[axis] % size:
        raise PlanError(where, f"{unit.name} has {grid[axis]} blocks ({', '.join(binding.loops)}), not a multiple of "
                               f"{size}: the last cluster would be partial", loops=binding.loops)
    if model.persistence is not None:
        group = model.persistence[0]
        if unit is not GridUnit.BLOCK_Y:
            raise PlanError(where, "a persistent grid's consecutive blocks take tiles that are neighbours along "
                                   "BLOCK_Y (its grouped order walks the rows of tiles): cluster along BLOCK_Y",
                            loops=binding.loops)
        if group % size:
            raise PlanError(where, f"persistent(group={group}): clusters of {size} blocks need groups of a multiple "
                                   f"of {size} rows of tiles, so that a cluster's tiles share their column",
                            loops=binding.loops)
    shape = [1, 1, 1]
    shape[axis] = size
    return tuple(shape)


def split_coordinates(model, launch: Launch) -> tuple[tuple[Let, ...], tuple[Let, ...]]:
    """The coordinates of block-bound loops, and of the others (warps, threads)."""
    lets = launch.coordinates
    block = tuple(let for let in lets if model.binding_of(let.name).level == "block")
    return block, tuple(let for let in lets if let not in block)


def persistent_loop(launch: Launch, body: tuple[Stmt, ...], by_team: bool = False) -> tuple[Stmt, ...]:
    """``body`` (which reads ``tile_x/y/z``) once per tile of a persistent launch: work item
    ``w`` of ``blockIdx.x``, ``blockIdx.x + blocks``, ... is the tile in grouped order (``group``
    rows of tiles, column by column). The loop is one more serial loop around the body: shared
    caches already wait for every thread before refilling a buffer inside an outer loop, and
    TMA rings wait on their empty barriers. ``by_team``: the block's work items are dealt out
    to the launch's teams in turn (``Launch.team``): team ``g`` takes its ``g``-th,
    ``g + teams``-th, ..."""
    p = launch.persistent
    if p is None:
        return body
    gx, gy, gz = p.tiles  # numbers, or expressions of run-time sizes
    work = Var(WORK)
    planes = not isinstance(gz, int) or gz > 1
    plane: Expr = Binary("%", work, _as_expr(_product([gx, gy]))) if planes else work
    band = _as_expr(_product([gx, p.group]))  # tiles in a band of `group` rows
    first_row = Binary("*", Binary("/", plane, band), Const(p.group))
    rows: Expr = Const(p.group) if isinstance(gy, int) and gy % p.group == 0 else \
        Binary("min", Binary("-", _as_expr(gy), first_row), Const(p.group))
    within = Binary("%", plane, band)
    lets = (Let("tile_y", Binary("+", first_row, Binary("%", within, rows)), f"grouped order: {p.group} rows of tiles"),
            Let("tile_x", Binary("/", within, rows), "column by column"))
    if planes:
        lets = (Let("tile_z", Binary("/", work, _as_expr(_product([gx, gy]))), "planes of tiles one after another"),
                *lets)
    count = _product(list(p.tiles))
    shown = count if isinstance(count, int) else "run-time number of"
    if not by_team or launch.teams == 1:
        return (Loop(WORK, Var("blockIdx.x"), _as_expr(count), p.blocks, (*lets, *body), False,
                     f"persistent: {p.blocks} resident blocks take the {shown} tiles in turn"),)
    first = Binary("+", Var("blockIdx.x"), Binary("*", launch.team(), Const(p.blocks)))
    return (Loop(WORK, first, _as_expr(count), p.blocks * launch.teams, (*lets, *body), False,
                 f"persistent: {p.blocks} resident blocks take the {shown} tiles in turn, and the "
                 f"{launch.teams} teams of a block take its tiles in turn"),)


def _as_expr(n: int | Expr) -> Expr:
    return Const(n) if isinstance(n, int) else n


def _rank(unit: GridUnit) -> int:
    return list(GridUnit).index(unit)


WARPGROUP = WARPGROUP_THREADS  # threads of a warpgroup


def _warpgroup_family(model) -> bool:
    """A tensorized plan of a warpgroup shape (wgmma's M64xN*, of any operand type): warpgroups
    issue its tiles."""
    from ..instructions import WGMMA

    return any(model.tensorize.mma_shape in mode.shapes for mode in WGMMA.modes)


def _coordinate(unit: GridUnit, warp_size: int, warpgroups_x: int = 1, per_team: int = 0) -> Expr:
    """The unit's coordinate of the thread; warpgroups count within the thread's team where the
    block holds several (``per_team`` warpgroups each)."""
    if unit.level == "block":
        return Var(f"blockIdx.{unit.axis}")
    if unit.level == "thread":
        return Var(f"threadIdx.{unit.axis}")
    if unit.level == "warpgroup":
        group: Expr = WARPGROUP_INDEX
        if per_team:
            group = Binary("%", group, Const(per_team))
        if unit is GridUnit.WARPGROUP_X:
            return Binary("%", group, Const(warpgroups_x)) if warpgroups_x > 1 else Const(0)
        return Binary("/", group, Const(warpgroups_x)) if warpgroups_x > 1 else group
    if unit is GridUnit.WARP_X:
        return Binary("/", Var("threadIdx.x"), Const(warp_size))
    return Var("threadIdx.y")


def _decompose(model, facts, binding, extents, coordinate) -> list[Let]:
    lets = []
    inner = 1
    # the outermost loop of a binding alone may run to a run-time size (then the total is unbounded)
    total = math.prod(extents) if all(isinstance(e, int) for e in extents) else None
    for position, (name, extent) in reversed(list(enumerate(zip(binding.loops, extents)))):
        part: Expr = coordinate
        if inner > 1:
            part = Binary("/", part, Const(inner))
        if position and (total is None or inner * extent < total):
            part = Binary("%", part, Const(extent))
        loop = facts.loop(name)
        value: Expr = part if loop.step == 1 else Binary("*", part, Const(loop.step))
        if loop.first:
            value = Binary("+", value, Const(loop.first))
        spec = model.loop(name)
        comment = f"schedule loop {name} ({binding.unit.name}): range({spec.begin}, {spec.end}, {spec.step})"
        lets.append(Let(name, value, comment))
        inner *= extent if position else 1
    return list(reversed(lets))


INT32_MAX = 2**31 - 1


def _used_workspaces(buffers, body: tuple[Stmt, ...], values=()) -> tuple:
    """The arrays, without the workspaces ``body`` and its by-value ``values`` (a tensor map's
    array) never name (a TEMP array whose every use went to a scratch tile in shared memory: the
    loader allocates nothing for it)."""
    named = {value for s in (*walk_statements(body), *values) for value in _strings(s)}
    return tuple(b for b in buffers if b.kind != "workspace" or b.name in named)


def _strings(node) -> Iterator[str]:
    """The names a statement and its expressions hold (their string fields but comments)."""
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if field.name != "comment":
            yield from _names_in(value)


def _names_in(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _names_in(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type) and not is_stmt(value):
        yield from _strings(value)


def assemble(model, launch: Launch, body: tuple[Stmt, ...], shared=(), values=(), block=None) -> Kernel:
    """The kernel of ``model``: its name, arrays, grid, index type (64-bit past 2^31 elements) and
    resident blocks, with ``body``, the ``shared`` buffers (laid out in order), the by-value
    ``values``, and ``block`` where the block is not the launch's (a producer warpgroup added)."""
    # a run-time size's array is checked at each call (the loader refuses one past 2^31 - 1 elements);
    # an array the kernel holds in registers alone (a chain's intermediate) has no offsets
    buffers = _used_workspaces(model.buffers, body, values)
    big = any(not b.sized and b.size > INT32_MAX for b in buffers)
    index = ScalarType.int64 if big else ScalarType.int32
    sizes = tuple(ScalarParam(name, index, size=True) for name in model.size_names)
    return Kernel(
        name=f"{model.function}__gpu__",
        buffers=buffers,
        grid=launch.grid,
        block=block or launch.block,
        body=body,
        index_type=index,
        dynamic_shared_bytes=shared_layout(shared)[1],
        shared=tuple(shared),
        values=(*sizes, *values),
        min_blocks=model.blocks_per_sm,
        cluster=launch.cluster,
        persistent=launch.persistent,
    )
