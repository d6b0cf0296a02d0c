"""The seeded generator: program ``index`` of campaign ``seed`` is the same on every machine
(``random.Random`` seeded by both), so a failure is replayed from its two numbers.

>>> generate(0, 3) == generate(0, 3)
True
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from .chain import chain_program
from .epilogue import fusable, with_epilogue
from .hopper import hopper_program
from .nest import choose
from .program import (
    Bin,
    CacheDirective,
    Program,
    Statement,
    loop_extents,
    refs,
    runtime_dims,
    schedule_indices,
    with_array_names,
)
from .schedules import ScheduleBuilder
from .statements import KINDS, build_nest
from .tensor import tensor_program

TARGETS = {"NVIDIA_H100": 55, "NVIDIA_A100": 14, "NVIDIA_H200": 5, "NVIDIA_RTX_A6000": 7, "NVIDIA_L4": 6,
           "NVIDIA_RTX_4090": 4}
# no NVIDIA_V100: NVRTC 13 cannot build sm_70, so Target refuses it when made (tests/test_checks.py)
PROGRAM_KINDS = {**KINDS, "tensor": 16, "hopper": 10, "chain": 4}
HOPPER_TARGETS = {"NVIDIA_H100": 80, "NVIDIA_H200": 20}  # sm_90: wgmma and TMA
EMULATED_STEPS = 3000  # block-steps of the emulator (iterations / threads per block), times statements
REFERENCE_POINTS = 4000  # points of the reference's sequential loop


def generate(seed: int, index: int, kind: str | None = None) -> Program:
    """Program ``index`` of the campaign ``seed``: random, and cheap enough to emulate; with
    ``kind``, of that kind only (a key of ``PROGRAM_KINDS``)."""
    key = f"schedc-fuzz/{seed}/{index}" + (f"/{kind}" if kind else "")
    rng = random.Random(key)
    while True:
        program = _with_temp(random.Random(f"{key}/temp"), _attempt(rng, kind))  # its own draws: the rest unchanged
        if affordable(program):
            return program


def _with_temp(rng: random.Random, program: Program) -> Program:
    """Sometimes an array that one statement writes (``=``) before any reads it, and that later
    statements read only at that statement's subscripts, becomes a TEMP array: scratch the caller
    does not pass (a workspace when the first dimension is a run-time size, preferred then). One
    with a sync SHARED cache may be chosen too: the tile is scratch then, and the array has no
    global memory."""
    chance = 0.5 if program.runtime else 0.2  # a run-time size's TEMP array is a workspace: draw it more
    if program.tensorize is not None or program.epilogue or program.order_free or rng.random() >= chance:
        return program
    cached = {c.array for c in program.caches if not (c.location == "SHARED" and c.pipeline == "sync"
                                                      and not c.layout and rng.random() < 0.5)}
    written = [s.target.array for s in program.statements]
    candidates = [a.name for a in program.arrays if a.role != "INPUT" and a.name not in cached
                  and written.count(a.name) == 1 and _temporary(program.statements, a.name)
                  and any(w != a.name for w in written)]
    dims = (runtime_dims(program) or {}) if program.runtime else {}
    # a call reads the run-time size from an argument's shape: one array of it stays an argument
    candidates = [name for name in candidates
                  if name not in dims or any(a != name and program.array(a).role != "TEMP" for a in dims)]
    if not candidates:
        return program
    sized = [name for name in candidates if name in dims]
    chosen = rng.choice(sized or candidates)
    program = replace(program, arrays=tuple(replace(a, role="TEMP") if a.name == chosen else a for a in program.arrays))
    shared = [c for c in program.caches if c.location == "SHARED" and c.pipeline == "sync" and not c.of_shared]
    if shared and chosen not in {c.array for c in program.caches} and rng.random() < 0.5:
        # its tile in shared memory at another tile's loop: scratch where it is written before it is read
        program = replace(program, caches=(*program.caches, CacheDirective(chosen, rng.choice(shared).index, "SHARED")))
    return program


def _temporary(statements, name: str) -> bool:
    """Whether array ``name`` is written (``=``, not reading itself) before any statement reads it,
    and read after only at the subscripts written."""
    (first,) = [n for n, s in enumerate(statements) if s.target.array == name]
    store = statements[first]
    if store.accumulate or any(r.array == name for s in statements[:first + 1] for r in refs(s)):
        return False
    return all(r.subscripts == store.target.subscripts for s in statements[first + 1:] for r in refs(s)
               if r.array == name)


def _attempt(rng: random.Random, only: str | None = None) -> Program:
    target = choose(rng, TARGETS)
    kind = only or choose(rng, PROGRAM_KINDS)
    if kind == "hopper":  # draws its own persistent grid, cluster and warp specialization
        return _fused(rng, hopper_program(rng, choose(rng, HOPPER_TARGETS)))
    if kind == "chain":  # two products, the first's result the second's A in registers
        return chain_program(rng, choose(rng, HOPPER_TARGETS))
    program = _fused(rng, _program(rng, target, kind))
    if rng.random() < 0.15:  # resident blocks over the tiles: a few, or one per multiprocessor
        program = replace(program, persistent=(rng.choice((1, 2, 3, 8)), rng.choice((0, 1, 2, 3, 5))))
    if rng.random() < (0.3 if program.tensorize is not None else 0.03):  # blocks sharing tiles by TMA multicast
        program = replace(program, cluster=(rng.choice((2, 2, 4)), rng.choice(("BLOCK_Y", "BLOCK_Y", "BLOCK_X"))))
    if rng.random() < 0.03:  # split-K by TMA reductions: only wgmma plans with C's tiles by TMA take it
        program = replace(program, order_free=True)
    if rng.random() < 0.4 and runtime_dims(program):  # the first dimension known only at run time
        program = replace(program, runtime=True)
    return program


def _fused(rng: random.Random, program: Program) -> Program:
    """A product (tensor cores or SIMT), sometimes with an epilogue fused after it (not with
    split-K: k's blocks would be a bound loop of an unfused dimension)."""
    if not fusable(program) or program.order_free or rng.random() >= (0.25 if program.tensorize else 0.2):
        return program
    _, root = schedule_indices(program)
    if any(b.unit.startswith("BLOCK") and any(root.get(n) == "k" for n in b.indices) for b in program.bindings):
        return program
    return with_epilogue(rng, program)


def _program(rng: random.Random, target: str, kind: str) -> Program:
    if kind == "tensor":
        return tensor_program(rng, target)
    nest = build_nest(rng, kind)
    base = Program(target, nest.arrays, nest.dims, nest.statements)
    builder = ScheduleBuilder(rng, nest, base.nest_indices)
    builder.splits()
    builder.bind()
    builder.thread_reduce()
    builder.split_k()
    builder.reorder()
    builder.unroll()
    builder.cache(base)
    plan = builder.plan
    arrays = base.arrays + ((builder.extra,) if builder.extra else ())
    program = replace(base, arrays=arrays, steps=tuple(plan.steps), order=plan.order, bindings=tuple(plan.bindings),
                      unrolls=tuple(plan.unrolls), caches=tuple(plan.caches))
    if len(program.statements) == 1 and program.statements[0].accumulate and rng.random() < 0.2:
        program = replace(program, statements=(_as_max_or_min(rng, program.statements[0]),))
    return with_array_names(program)


def _as_max_or_min(rng: random.Random, s: Statement) -> Statement:
    """``T += X`` as ``T = acc.max(T, X)`` or ``acc.min``: the other reductions."""
    return Statement(s.target, Bin(rng.choice(("max", "min")), s.target, s.value))


def emulated_steps(program: Program) -> int:
    """The emulator's work: loop iterations per thread of a block, over all blocks."""
    extents = loop_extents(program)
    threads = math.prod(extents[n] for b in program.bindings if b.unit.startswith("THREAD") for n in b.indices)
    return math.prod(extents.values()) // max(1, threads) * len(program.statements)


def reference_points(program: Program) -> int:
    """Points the reference visits one at a time (it vectorises over the indices every
    statement writes; a single ``+=`` statement is one contraction)."""
    if len(program.statements) == 1 and program.statements[0].accumulate:
        return 1
    common = set(program.nest_indices)
    for s in program.statements:
        common &= {x.index for x in s.target.subscripts}
    return math.prod(n for name, n in zip(program.nest_indices, program.dims) if name not in common)


def affordable(program: Program) -> bool:
    if program.tensorize is not None:
        return True
    return emulated_steps(program) <= EMULATED_STEPS and reference_points(program) <= REFERENCE_POINTS
