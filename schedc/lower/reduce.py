"""Reductions across threads: a statement ``T[p] = T[p] op X`` (op ``+``, ``max``, ``min``)
whose loop bound to ``THREAD_X`` does not index T.

Each thread keeps its own partial (a one-element register array, starting at op's identity:
0, -inf or +inf), adds its values of X to it in its serial loops, the threads of a row of the
block combine their partials (``ThreadReduce``: shuffles within a warp, one shared element per
warp across warps), and the row's first thread writes ``T[p] = T[p] op total``. The race check
accepts exactly this: threads that differ only in the reduced loop meet on T's element through
the combine, and nowhere else. A nest may reduce several arrays over the same loop (a row's sum
and sum of squares): every statement is then such a reduction, each with its own partial and
combine, and none reads another's T (it would read a partial value). A 16-bit float T sums in
float32 and narrow integers in int32 (rounded or wrapped once, when T is written).

Before → after, a row sum with 256 threads along j::

    for i (BLOCK_X):                          for i (BLOCK_X):
      for jj (THREAD_X, 256):                   jj = threadIdx.x; _partial[0] = 0
        for j (serial, step 256):       →       for j: _partial[0] = _partial[0] + X[i, j + jj]
          S[i] = S[i] + X[i, j + jj]            _partial[0] = total of the row's 256 partials
                                                if jj == 0: S[i] = S[i] + _partial[0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import PlanError
from ..ir.affine import Affine
from ..ir.kernel import (
    Binary,
    Cast,
    Const,
    Expr,
    If,
    Load,
    PrivateArray,
    SharedBuffer,
    Stmt,
    Store,
    ThreadReduce,
    Var,
    all_of,
)
from ..ir.patterns import buffers_read, reduction, widened
from ..ir.types import ScalarType
from ..targets import GridUnit

PARTIAL = "_partial"  # each thread's partial (schedc's names start with an underscore)
SCRATCH = "_partials"  # the warps' totals, in shared memory


@dataclass(frozen=True)
class ThreadReduction:
    op: str
    loops: tuple[str, ...]  # the reduced loops, bound to THREAD_X
    dtype: ScalarType  # the partials' type
    name: str = PARTIAL  # the partial's array (a fused schedule's parts each have their own)

    def identity(self) -> Const:
        if self.op == "+":
            return Const(0.0 if self.dtype.is_float else 0, self.dtype)
        if self.dtype.is_float:
            return Const(-math.inf if self.op == "max" else math.inf, self.dtype)
        limits = np.iinfo(self.dtype.numpy)
        return Const(int(limits.min if self.op == "max" else limits.max), self.dtype)


def reduced_loops(model) -> tuple[str, ...]:
    """The thread-bound loops that no statement's target depends on (reduced across threads)."""
    bound = [n for b in model.bindings if b.unit.level in ("thread", "warp") for n in b.loops]
    reduced = []
    for name in bound:
        dim = model.dims[model.loop(name).dim][0]
        if all(dim not in {v for i in s.index for v in Affine.of(i).variables()} for s in model.statements):
            reduced.append(name)
    return tuple(reduced)


def find(model, enclosing: frozenset[str] = frozenset(), base: str = PARTIAL,
         tensorized: bool = False, scratch: frozenset[str] = frozenset(),
         inside_parts: frozenset[str] = frozenset()) -> tuple[ThreadReduction, ...]:
    """The plan's reductions across threads, checked, one per statement (each with a partial of
    its own, named after ``base``), or none (no thread-bound loop is reduced, or a statement is no
    reduction: the race check then says why). ``enclosing``: serial loops around the whole
    reduction (a fused schedule's loops before its fusing index), which may move T's element:
    each of their iterations reduces anew. ``tensorized``: the model is a part of a fused
    schedule whose product is tensorized (the part itself says so only for the product).
    ``scratch``: the arrays whose SHARED caches are scratch tiles (``scratch.arrays`` of the whole
    Model: a part alone cannot tell), which a reduction may write; ``inside_parts``: those that
    would be but for where their caches are filled (``scratch.inside_parts``)."""
    loops = reduced_loops(model)
    if not loops or model.fusion is not None:
        return ()
    if any(reduction(s) is None for s in model.statements):
        return ()
    where = f"a reduction across threads ({', '.join(loops)})"
    units = {model.binding_of(n) for n in loops}
    x = next((b for b in model.bindings if b.unit is GridUnit.THREAD_X), None)
    first = model.statements[0]
    if model.tensorize is not None or tensorized:
        raise PlanError("a tensorized plan", f"{first.buffer}'s {reduction(first)[0]} combines elements that several "
                                             "of its threads hold: the tensor cores multiply its tiles, and a fused "
                                             "epilogue applies element-wise statements to C's elements only. Reduce "
                                             f"{first.buffer} in a nest of its own, with its own plan", loops=loops)
    if units != {GridUnit.THREAD_X} or set(x.loops) != set(loops):
        raise PlanError(where, f"{first.buffer}'s {reduction(first)[0]} over {', '.join(loops)} combines the threads "
                               "of a row: bind the reduced loop(s), and only them, to THREAD_X (the rows' other "
                               "loops to THREAD_Y, THREAD_Z or blocks)", loops=loops)
    targets = {s.buffer for s in model.statements}
    found = []
    for number, store in enumerate(model.statements):
        read = sorted(buffers_read(reduction(store)[1]) & targets)
        if read:
            raise PlanError(where, f"{store.buffer}'s {reduction(store)[0]} reads {read[0]}, which this nest "
                                   "reduces across threads: each thread would read a partial value. Reduce it in a "
                                   "nest before this one (acc.fuse runs them in turn)", loops=loops)
        found.append(_checked(model, store, loops, enclosing, where, partial_name(base, number), scratch,
                              inside_parts))
    return tuple(found)


def _checked(model, store: Store, loops: tuple[str, ...], enclosing: frozenset[str], where: str,
             name: str, scratch: frozenset[str], inside_parts: frozenset[str] = frozenset()) -> ThreadReduction:
    """The reduction of one of the nest's statements (its partial ``name``), refused where its
    element moves with a serial loop, it is bool or it is cached (but in a scratch tile; the
    refusal of one in ``inside_parts`` says where its cache must go to be one)."""
    op, _ = reduction(store)
    written = {v for i in store.index for v in Affine.of(i).variables()}
    serial = [lp.name for lp in model.loops if model.dims[lp.dim][0] in written and model.binding_of(lp.name) is None
              and lp.name not in enclosing]
    if serial:
        raise PlanError(where, f"{store.buffer}'s element changes with the serial loop {serial[0]}, and each thread "
                               f"keeps one partial: bind the loops of {store.buffer}'s subscripts to blocks or to "
                               "threads other than THREAD_X", loops=tuple(serial))
    target = model.buffer(store.buffer).dtype
    if target is ScalarType.bool:
        raise PlanError(where, f"{store.buffer} is bool: reduce into a number type", loops=loops)
    cache = next((c for c in model.caches if c.array == store.buffer), None)
    if store.buffer not in scratch and cache is not None:
        if store.buffer in inside_parts:
            raise PlanError(where, f"{store.buffer} is a TEMP array each pass writes before it reads it, but its "
                                   f"SHARED cache at {cache.index} is filled inside a fused part (no serial loop at or "
                                   f"after {cache.index} comes before the fusing index), so it is no scratch tile: "
                                   "cache it at a serial loop before the fusing index (split a block- or thread-bound "
                                   "loop by 1 to make one there)", loops=(cache.index, *loops))
        raise PlanError(where, f"{store.buffer} is cached; its reduction across threads writes it once, from one "
                               "thread of a row: leave it uncached, or make it a TEMP array whose SHARED tile each "
                               "pass writes before it reads it (a scratch tile)", loops=loops)
    return ThreadReduction(op, loops, partial_type(target), name)


def partial_name(base: str, number: int) -> str:
    """The partial of a nest's statement ``number`` (its first keeps ``base``)."""
    return base if number == 0 else f"{base}_s{number}"


def partial_type(target: ScalarType) -> ScalarType:
    """16- and 8-bit floats sum in float32, narrow integers in int32 (shuffles move 32 or 64 bits)."""
    if target.is_float and target.size < 4:
        return ScalarType.float32
    if target.is_integer and target.size < 4:
        return ScalarType.int32
    return target


def check_lanes(model, reduction: ThreadReduction, block: tuple[int, int, int]) -> None:
    lanes = block[0]
    if lanes & (lanes - 1):
        below = 1 << (lanes.bit_length() - 1)
        raise PlanError(f"a reduction across threads ({', '.join(reduction.loops)})",
                        f"THREAD_X has {lanes} threads; the combine halves them: make it a power of two "
                        f"(split the reduced loop by a power of two, at most {below}, and bind the inner part to "
                        f"THREAD_X; a split longer than the loop's {lanes} values leaves it whole: {lanes} threads)",
                        loops=reduction.loops)


def scratch_name(dtype: ScalarType) -> str:
    """The warps' totals of partials of ``dtype`` (one buffer a type: parts may reduce in several)."""
    return f"{SCRATCH}_{dtype.value}"


def scratches(reductions, block: tuple[int, int, int]) -> tuple[SharedBuffer, ...]:
    """One element per warp of the block, per type of the ``reductions`` (None: none there),
    where a row spans several warps."""
    if block[0] <= 32:
        return ()
    warps = math.prod(block) // 32
    types = sorted({r.dtype for r in reductions if r is not None}, key=lambda t: t.value)
    return tuple(SharedBuffer(scratch_name(t), t, (warps,), (1,)) for t in types)


def partial_update(across: ThreadReduction, store: Store) -> Store:
    """The statement (over schedule loops) accumulating into the thread's partial instead of T."""
    _, term = reduction(store)
    value = Binary(across.op, Load(across.name, (Const(0),), across.dtype), widened(term, across.dtype), across.dtype)
    return Store(across.name, (Const(0),), value)


def around(reduction: ThreadReduction, store: Store, target: ScalarType, block: tuple[int, int, int],
           kept: Expr | None, first: dict[str, int]) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """(before, after) the serial loops: the partial set to op's identity; the combine, then the
    row's first thread (``first``: each reduced loop's first value) writing ``T = T op total``
    (in the partials' type, ``target`` T's), where ``kept`` (the guards of the row's own
    coordinates) holds."""
    p = reduction.dtype
    name = reduction.name
    before = (PrivateArray(name, p, (1,)), Store(name, (Const(0),), reduction.identity()))
    combine = ThreadReduce(name, reduction.op, p, block[0], scratch_name(p) if block[0] > 32 else "")
    old: Expr = Load(store.buffer, store.index, target)
    value: Expr = Binary(reduction.op, old if p is target else Cast(old, p), Load(name, (Const(0),), p), p)
    if p is not target:
        value = Cast(value, target)
    leader = all_of([Binary("==", Var(n), Const(v)) for n, v in first.items()] + ([kept] if kept is not None else []))
    write = If(leader, (Store(store.buffer, store.index, value),), "the row's first thread writes the total")
    return before, (combine, write)
