"""``schedc check``'s advice for a kernel whose blocks run one thread each: a plan that binds no
loop to threads (without any ``bind``, the whole nest runs on one thread, grid 1 x 1 x 1).

The advice names the loops to bind and the units, with a split first where one loop must give
both the blocks and the threads. Each change is tried before it is advised: the nest with it is
compiled as ``Package.add`` compiles it, and only a change that compiles is named.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import SchedcError
from ..ir.model import BindingSpec, GroupSpec, LoopSpec
from ..targets import GridUnit
from . import compile_function

THREADS = 256  # threads a block the advice splits a loop for
FEWEST = 32  # a loop of fewer iterations is no block's threads (less than a warp)
TRIES = 8  # changes compiled at most, before saying that none was found
_BLOCKS = (GridUnit.BLOCK_X, GridUnit.BLOCK_Y, GridUnit.BLOCK_Z)


@dataclass(frozen=True)
class Change:
    """A split (loop, its new inner loop, the size), or None, then loops bound to units."""

    split: tuple[str, str, int] | None
    bindings: tuple[tuple[str, GridUnit], ...]

    def __str__(self) -> str:
        bind = "plan.bind({" + ", ".join(f"{loop}: {unit.name}" for loop, unit in self.bindings) + "})"
        if self.split is None:
            return bind
        loop, inner, size = self.split
        return f"{inner} = schedule.split({loop}, {size}), then {bind}"


def advice(kernel, model) -> str | None:
    """What to say of ``kernel`` of ``model`` where its blocks run one thread each (None: they run
    more, or the nest has one iteration)."""
    if model is None or kernel.threads_per_block > 1 or model.tensorize is not None or _iterations(model) == 1:
        return None
    if any(b.unit.level != "block" for b in model.bindings):
        return None  # threads bound to loops of one iteration: the plan chose its block
    grid = "x".join(map(str, kernel.grid)) if all(isinstance(n, int) for n in kernel.grid) else "of run-time size"
    if all(n == 1 for n in kernel.grid):
        found = (f"the kernel runs on one thread (grid {grid}, block 1x1x1): the plan binds no loop, so the nest's "
                 f"{_shown_iterations(model)} run one after another")
    else:
        found = (f"each block of the kernel runs one thread (grid {grid}, block 1x1x1): the plan binds no loop "
                 "to threads")
    changes = _changes(model)
    refusals = []
    for change in changes[:TRIES]:
        launched = _launch(model, change)
        if isinstance(launched, str):
            return f"{found}; {change} runs them {launched}"
        refusals.append(launched)
    if not changes:
        return f"{found}; no loop is left to bind to threads"
    return f"{found}; none of the changes tried is accepted: {changes[0]} is refused ({refusals[0].what})"


def _iterations(model) -> int | None:
    """The nest's iterations, each part's of a fused one (None: a run-time size's)."""
    if not all(lp.fixed for lp in model.loops):
        return None
    return sum(math.prod(lp.extent for lp in part.loops) for part in model.parts)


def _shown_iterations(model) -> str:
    count = _iterations(model)
    return f"{count} iterations" if count is not None else "iterations (a run-time number)"


def _changes(model) -> list[Change]:
    """The changes to try, likeliest first: two loops the plan has (blocks along the outer,
    threads along the inner of at least a warp's iterations); a loop split into both; one loop's
    threads alone."""
    free = [lp for lp in model.loops if model.binding_of(lp.name) is None and (not lp.fixed or lp.extent > 1)]
    blocked = any(b.unit.level == "block" for b in model.bindings)
    block, thread = _unit(model, "BLOCK"), _unit(model, "THREAD")
    if thread is None or (block is None and not blocked):
        return []
    threads = sorted(free, key=lambda lp: (_summed(model, lp), -model.loops.index(lp)))
    fit = [lp for lp in threads if lp.fixed and FEWEST <= lp.extent <= model.gpu.max_threads_per_block]
    out = []
    for t in fit:
        outer = [lp for lp in free if model.loops.index(lp) < model.loops.index(t) and not _summed(model, lp)]
        out += [Change(None, ((t.name, thread),))] if blocked else [
            Change(None, ((b.name, block), (t.name, thread))) for b in outer]
    splittable = [lp for lp in model.loops if (lp in free or model.binding_of(lp.name) in _BLOCKS)
                  and (not lp.fixed or lp.extent > 1)]
    for lp in sorted(splittable, key=lambda lp: _summed(model, lp)):
        keeps = blocked and lp in free  # the blocks stay as they are: the loop may go to threads whole
        size = THREADS if not lp.fixed else min(THREADS, 2 ** int(math.log2(lp.extent if keeps else lp.extent // 2)))
        if size >= FEWEST:
            inner = _fresh(model, lp)
            bound = ((inner, thread),) if blocked else ((lp.name, block), (inner, thread))
            out.append(Change((lp.name, inner, size * lp.step), bound))
    out += [Change(None, ((t.name, thread),)) for t in threads
            if t.fixed and t.extent <= model.gpu.max_threads_per_block]
    return out


def _summed(model, loop: LoopSpec) -> bool:
    """Whether no statement writes an element that moves with ``loop`` (a sum along it)."""
    return model.sums_over(loop.dim)


def _unit(model, level: str) -> GridUnit | None:
    """The first unit of ``level`` (BLOCK, THREAD) along x, y, z that the plan does not bind."""
    used = {b.unit for b in model.bindings}
    return next((GridUnit[f"{level}_{axis}"] for axis in "XYZ" if GridUnit[f"{level}_{axis}"] not in used), None)


def _fresh(model, loop: LoopSpec) -> str:
    """A split's inner loop named as ``schedule.split`` names it: ``ii`` for ``i``, numbered if taken."""
    taken = {lp.name for lp in model.loops}
    name = loop.name + model.dims[loop.dim][0][0]
    candidate, suffix = name, 1
    while candidate in taken:
        suffix += 1
        candidate = f"{name}{suffix}"
    return candidate


def _launch(model, change: Change) -> str | SchedcError:
    """``on 512 blocks of 256 threads`` where the nest with ``change`` compiles (as ``Package.add``
    compiles it); the refusal where it does not."""
    changed = _bound(_split(model, change.split) if change.split else model, change.bindings)
    try:
        function = compile_function(changed)
    except SchedcError as refused:
        return refused
    kernel = max(function.kernels, key=lambda k: k.threads_per_block)
    blocks = math.prod(kernel.grid) if all(isinstance(n, int) for n in kernel.grid) else None
    count = f"{blocks} block{'s' * (blocks != 1)}" if blocks is not None else "a run-time number of blocks"
    return f"on {count} of {kernel.threads_per_block} threads"


def _bound(model, bindings: tuple[tuple[str, GridUnit], ...]):
    added = tuple(BindingSpec(unit, (loop,)) for loop, unit in bindings)
    return dataclasses.replace(model, bindings=tuple(sorted((*model.bindings, *added), key=lambda b: b.unit.value)))


def _split(model, split: tuple[str, str, int]):
    """The Model with ``schedule.split(loop, size)`` applied: ``loop`` steps by ``size``, the new
    ``inner`` loop right after it, in every split group of ``loop`` and a group of its own."""
    name, inner, size = split
    loop = model.loop(name)
    loops: list[LoopSpec] = []
    for lp in model.loops:
        loops += [dataclasses.replace(lp, step=size), LoopSpec(inner, lp.dim, 0, size, lp.step)] \
            if lp.name == name else [lp]
    order = [lp.name for lp in loops]

    def ordered(members) -> tuple[str, ...]:
        return tuple(sorted(members, key=order.index))

    groups = tuple(dataclasses.replace(g, members=ordered((*g.members, inner))) if name in g.members else g
                   for g in model.groups)
    groups += (GroupSpec(loop.begin, loop.end, (name, inner)),)
    fusion = model.fusion
    if fusion is not None and model.loops.index(loop) < fusion.at:
        fusion = dataclasses.replace(fusion, at=fusion.at + 1)
    return dataclasses.replace(model, loops=tuple(loops), groups=groups, fusion=fusion)

