"""What ``schedc check`` advises before anything runs, read off a kernel as lowered: the
addresses one warp (the block's first 32 threads) computes for each global or shared access
of its statements, and the resources the kernel holds.

- **coalescing**: a global access whose warp moves more than four times the bytes it uses in
  32-byte sectors (a GEMV whose threads each read a row of A);
- **bank conflicts**: a shared tile read or written by a warp in ``CONFLICTS`` (4) or more words
  of one bank (a tile read down its columns; schedc lays tiles out and pads them against most);
- **local memory**: registers beyond what a thread may hold (ptxas spills them);
- **occupancy**: a SIMT kernel (no tensor-core tiles, which want registers more than warps) that
  keeps a quarter of a multiprocessor's warps or fewer;
- **one thread**: blocks of one thread (a plan without ``bind``: the whole nest on one thread),
  with the loops to bind, a change compiled before it is advised (``unbound``);
- **tile stores**: a wgmma plan's output tiles stored by the threads because TMA's shared slots do
  not fit beside its ring (fewer stages make room).

Each note says what it found, with the numbers, and the plan change that removes it. The warp's
addresses come from the kernel's own index expressions (loop counters and block indices at 0),
so the advice covers what the CUDA text will do, for every plan kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import poly
from ..ir.affine import Affine
from ..ir.kernel import (
    Binary,
    Buffer,
    Cast,
    Const,
    Fragment,
    FragmentStore,
    If,
    Kernel,
    Let,
    PrivateArray,
    Roles,
    SharedBuffer,
    Store,
    ThreadReduce,
    Unary,
    Var,
)
from ..ir.patterns import reduction
from ..ir.walk import bodies, loads, walk_statements
from . import cache, resources, unbound
from .launch import WARPGROUP

SECTOR = 32  # bytes a global memory transaction moves
BANKS = 32  # 4-byte banks of shared memory
CONFLICTS = 4  # words of one bank a warp's access touches from which check says so


@dataclass(frozen=True)
class Note:
    """One piece of advice: its topic and what to change, with the numbers."""

    topic: str
    text: str

    def __str__(self) -> str:
        return f"advice ({self.topic}): {self.text}"


def advise(kernel: Kernel, model, gpu) -> list[Note]:
    """The notes for ``kernel`` of ``model`` on ``gpu`` (none where nothing is amiss)."""
    warp = _Warp(kernel)
    notes: list[Note] = []
    seen: set = set()
    for buffer, index, write in _accesses(kernel):
        note = warp.note(buffer, index, write, model)
        if note is not None and (note.topic, note.text) not in seen:
            seen.add((note.topic, note.text))
            notes.append(note)
    alone = unbound.advice(kernel, model)
    return ([Note("one thread", alone)] if alone else []) + notes + _resources(kernel, gpu) + _tile_stores(kernel, gpu)


def _accesses(kernel: Kernel):
    """(buffer, index, written) of every element access of the kernel's statements, but those of
    a reduction's total, which one thread a row reads and writes after the combine (the warp's
    pattern says nothing there)."""
    yield from _body_accesses(kernel.body)


def _body_accesses(body: tuple):
    combined = False
    for s in body:
        if combined and isinstance(s, If):  # the row's first thread writes the total (reduce.around)
            combined = False
            continue
        combined = isinstance(s, ThreadReduce)
        if isinstance(s, Store):
            yield s.buffer, s.index, True
        for load in loads(s):
            yield load.buffer, load.index, False
        for inner in bodies(s):
            yield from _body_accesses(inner)


class _Warp:
    """The first warp of a block: its lanes' thread indices, and the values of the kernel's
    per-thread locals (``Let``) for them; anything else (loop counters, block indices) is 0."""

    def __init__(self, kernel: Kernel) -> None:
        bx, by, _ = kernel.block
        lanes = np.arange(min(32, kernel.threads_per_block))
        self.lanes = len(lanes)
        self.threads = {"threadIdx.x": lanes % bx, "threadIdx.y": (lanes // bx) % by,
                        "threadIdx.z": lanes // (bx * by)}
        self.lets = {s.name: s.value for s in walk_statements(kernel.body) if isinstance(s, Let)}
        self.buffers: dict[str, Buffer | SharedBuffer] = {b.name: b for b in (*kernel.buffers, *kernel.shared)}
        self.block = kernel.block

    def values(self, exprs: tuple) -> list[np.ndarray]:
        """Each expression's value in each lane."""
        env: dict[str, np.ndarray] = dict(self.threads)
        return [self._value(e, env, 0) for e in exprs]

    def _value(self, e, env: dict, depth: int) -> np.ndarray:
        if isinstance(e, Const):
            number = int(e.value) if isinstance(e.value, int | bool) else 0
            return np.full(self.lanes, number, dtype=np.int64)
        if isinstance(e, Var):
            if e.name not in env and e.name in self.lets and depth < 64:
                env[e.name] = self._value(self.lets[e.name], env, depth + 1)
            return env.get(e.name, np.zeros(self.lanes, dtype=np.int64))
        if isinstance(e, Binary):
            return _binary(e.op, self._value(e.lhs, env, depth + 1), self._value(e.rhs, env, depth + 1))
        if isinstance(e, Unary) and e.op == "-":
            return -self._value(e.operand, env, depth + 1)
        if isinstance(e, Cast):
            return self._value(e.operand, env, depth + 1)
        return np.zeros(self.lanes, dtype=np.int64)  # data, not an index: no address of its own

    def note(self, name: str, index: tuple, write: bool, model) -> Note | None:
        buffer = self.buffers.get(name)
        if buffer is None or len(index) != len(buffer.strides) or self.lanes < 2:
            return None
        if isinstance(buffer, SharedBuffer) and buffer.swizzle:
            return None  # tile loads address swizzled tiles; the family's layout is conflict-free
        subscripts = self.values(index)
        address = sum(s * stride for s, stride in zip(subscripts, buffer.strides))
        if np.all(address == address[0]):
            return None  # one element for the warp: a broadcast
        moving = _moving(subscripts, buffer.strides, self.block)
        if isinstance(buffer, SharedBuffer):  # each iteration's access is its own: its banks alone
            return _banks(buffer, subscripts, address, write, model, moving)
        return _sectors(buffer, subscripts, address, write, moving, self.block,
                        lambda: _coalescing_change(model, buffer, write, subscripts))


def _binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("/", "%"):
        safe = np.where(b == 0, 1, b)
        return a // safe if op == "/" else a % safe
    if op == "max":
        return np.maximum(a, b)
    if op == "min":
        return np.minimum(a, b)
    return np.zeros_like(a)  # a comparison or logic: not part of an address


def _moving(subscripts: list[np.ndarray], strides: tuple[int, ...], block) -> str:
    """Along which dimensions (and strides) the next thread along x, and along y where the warp
    spans several rows of threads, moves the access."""
    parts = []
    for axis, lane in (("x", 1), ("y", block[0])):
        if lane >= len(subscripts[0]) or (axis == "y" and block[0] >= 32):
            continue
        moved = [f"{int(sub[lane] - sub[0])} along dimension {d} (stride {s})"
                 for d, (sub, s) in enumerate(zip(subscripts, strides)) if sub[lane] != sub[0]]
        parts.append(f"threadIdx.{axis} moves it {' and '.join(moved)}" if moved
                     else f"threadIdx.{axis} leaves it in place")
    return "; ".join(parts)


def _summed_along(model, name: str, buffer) -> list[str]:
    """The nest dimensions in the subscript of ``name``'s contiguous dimension that a statement
    reading it sums over (binding them to threads makes a reduction across threads)."""
    if not buffer.strides:
        return []
    contiguous = int(np.argmin(buffer.strides))
    found: list[str] = []
    for s in getattr(model, "statements", ()):
        kept = {d for i in s.index for d in Affine.of(i).variables()}
        for x in loads(s.value):
            if x.buffer == name and len(x.index) > contiguous:
                found += [d for d in sorted(Affine.of(x.index[contiguous]).variables() - kept) if d not in found]
    return found


def _coalescing_change(model, buffer: Buffer, write: bool, subscripts) -> str:
    """The plan changes that coalesce ``buffer``'s access, only those the checker accepts: threads
    along its contiguous dimension where that dimension's iterations may run at once (or form a
    reduction across threads), a shared tile where ``buffer`` may be cached (``cache.written_refusal``
    for an array the nest writes); else, for a 2-D array, the other layout; else why neither applies."""
    name = buffer.name
    contiguous = int(np.argmin(buffer.strides)) if buffer.strides else 0
    summed = _summed_along(model, name, buffer)
    changes = []
    blocked = _unbindable(model, name, contiguous, summed)
    if blocked is None:
        along = (f" (along {', '.join(summed)}, which the statement sums: a reduction across threads)"
                 if summed and not write else "")
        changes.append(f"bind the loop along {name}'s contiguous dimension {contiguous}{along} to THREAD_X")
    refused = _uncacheable(model, name)
    if not write and refused is None:
        changes.append(f"read {name} through a shared tile (plan.cache({name}, index=..., location=SHARED), whose "
                       "copy is coalesced)")
    if changes:
        return ", or ".join(changes)
    layout = _other_layout(model, buffer, subscripts)
    why = f"{blocked}" + ("" if write else f", and no shared tile of {name} is built ({refused})")
    if layout:
        return f"give {name} the other layout (Array(..., layout=Array.Layout.{layout})): {why}"
    return f"no change of the plan removes it: {why}"


def _dims_along(model, name: str, contiguous: int) -> set[str]:
    """The nest dimensions in the subscripts of ``name``'s contiguous dimension, over every access."""
    found: set[str] = set()
    for s in getattr(model, "statements", ()):
        indices = [x.index for x in loads(s.value) if x.buffer == name] + ([s.index] if s.buffer == name else [])
        for index in indices:
            if len(index) > contiguous:
                found |= Affine.of(index[contiguous]).variables()
    return found


def _unbindable(model, name: str, contiguous: int, summed: list[str]) -> str | None:
    """Why the loops along ``name``'s contiguous dimension may not run on threads at once (as the
    plan's race check would refuse them), named by those loops; None where they may: no two of
    their iterations touch an element one of them writes, but for the sums of reductions."""
    if model is None or not hasattr(model, "parts"):
        return None
    dims = _dims_along(model, name, contiguous)
    for part in model.parts:
        reading = [s for s in part.statements if name in {x.buffer for x in loads(s.value)}]
        if summed and any(reduction(s) is None for s in reading if set(summed) & _dims_read(s, name)):
            return (f"{' and '.join(summed)} may not run on threads (a statement sums over "
                    f"{'them' if len(summed) > 1 else 'it'} and is no reduction T = T + X)")
        loops = [lp.name for lp in part.loops if part.dims[lp.dim][0] in dims - set(summed)]
        conflict = poly.find_race(part, loops) if loops else None
        if conflict is not None:
            element = f"{conflict.array}[{', '.join(map(str, conflict.element))}]"
            return (f"{' and '.join(loops)} may not run on threads (two of {'their' if len(loops) > 1 else 'its'} "
                    f"iterations touch {element}, one writing it)")
    return None


def _dims_read(statement, name: str) -> set[str]:
    return {d for x in loads(statement.value) if x.buffer == name for i in x.index for d in Affine.of(i).variables()}


def _uncacheable(model, name: str) -> str | None:
    """Why no SHARED cache of ``name`` is built (None: one may be): the checker's own rule."""
    if model is None or not any(s.buffer == name for s in getattr(model, "statements", ())):
        return None
    return cache.written_refusal(model, name)


def _other_layout(model, buffer: Buffer, subscripts) -> str:
    """The layout of a 2-D array (a row-major or column-major argument of a SIMT plan, not cached)
    along whose contiguous dimension the warp's access moves, where the array has the other; ''."""
    if model is None or len(buffer.strides) != 2 or getattr(model, "tensorize", None) is not None:
        return ""
    if any(c.array == buffer.name for c in getattr(model, "caches", ())):
        return ""
    moved = [d for d, sub in enumerate(subscripts) if len(sub) > 1 and sub[1] != sub[0]]
    rows, columns = buffer.shape
    if moved == [0] and tuple(buffer.strides) == (columns, 1):
        return "LAST_MAJOR"
    if moved == [1] and tuple(buffer.strides) == (1, rows):
        return "FIRST_MAJOR"
    return ""


def _sectors(buffer: Buffer, subscripts, address: np.ndarray, write: bool, moving: str, block,
             change) -> Note | None:
    """A note where the warp's access uses less than a quarter of the bytes its sectors move, each
    instruction on its own (a thread per row of the array; a thread's 4 consecutive elements, whose
    sectors the next instructions read from L1, are not flagged). ``change()``: what removes it."""
    size = buffer.dtype.size
    elements = np.unique(address)
    sectors = np.unique(np.concatenate([(elements * size) // SECTOR, (elements * size + size - 1) // SECTOR]))
    useful = len(elements) * size
    moved = len(sectors) * SECTOR
    if useful * 4 >= moved:
        return None
    verb = "writes" if write else "reads"
    text = (f"{buffer.name} {_shown(subscripts)}: a warp {verb} {len(elements)} elements in {len(sectors)} sectors "
            f"of {SECTOR} bytes ({moved} bytes moved for {useful} used, {100 * useful // moved}%; block "
            f"{block[0]}x{block[1]}x{block[2]}: {moving}); {change()}")
    return Note("coalescing", text)


def _banks(buffer: SharedBuffer, subscripts, address: np.ndarray, write: bool, model, moving: str) -> Note | None:
    """A note where a phase of the warp's access (128 bytes of lanes: all 32 for 4-byte elements,
    16 for 8-byte ones) touches ``CONFLICTS`` or more words of one bank."""
    size = buffer.dtype.size
    lanes = max(1, 128 // max(4, size))
    ways = max(_ways(address[start:start + lanes], size) for start in range(0, len(address), lanes))
    if ways < CONFLICTS:
        return None
    array = next((c.array for c in getattr(model, "caches", ()) if buffer.name.startswith(f"{c.array}_")),
                 buffer.name)
    verb = "writes" if write else "reads"
    text = (f"{buffer.name} {_shown(subscripts)} (the shared tile of {array}): a warp {verb} it in {ways} words of one "
            f"bank ({ways}-way bank conflicts: the access takes {ways} times as long; {moving}); give the tile the "
            "other layout "
            f"(plan.cache({array}, ..., layout=...)) or bind the loop along the tile's contiguous dimension to "
            "THREAD_X")
    return Note("bank conflicts", text)


def _ways(address: np.ndarray, size: int) -> int:
    """The most distinct 4-byte words of one bank the lanes' elements touch."""
    first, last = (address * size) // 4, (address * size + size - 1) // 4
    words = np.unique(np.concatenate([first, last]))
    return int(max(np.unique(words[words % BANKS == b]).size for b in np.unique(words % BANKS)))


def _shown(subscripts) -> str:
    """The first two threads' subscripts: ``[0, 0] then [1, 0]``."""
    first = ", ".join(str(int(s[0])) for s in subscripts)
    second = ", ".join(str(int(s[1])) for s in subscripts)
    return f"[{first}] then [{second}]"


def _resources(kernel: Kernel, gpu) -> list[Note]:
    use = resources.estimate(kernel, gpu)
    roles = any(isinstance(s, Roles) for s in walk_statements(kernel.body))  # the roles pass fitted their registers
    notes = [Note("local memory", f"the register tile {s.name} ({'x'.join(map(str, s.shape))} {s.dtype.value}) is "
                                  "too large for registers and lives in the thread's local memory: a PRIVATE cache "
                                  "over fewer elements (an inner index) keeps it in registers")
             for s in walk_statements(kernel.body) if isinstance(s, PrivateArray) and s.local]
    if use.registers > gpu.max_registers_per_thread and not roles:
        notes.append(Note("local memory", f"about {use.registers} registers a thread (estimate) exceed the "
                                          f"{gpu.max_registers_per_thread} a thread can hold: ptxas spills the rest to "
                                          "local memory; give each thread fewer elements (smaller PRIVATE caches or "
                                          "MMA_FRAGMENT tiles, more threads per block)"))
    tensor = any(isinstance(s, Roles | Fragment) for s in walk_statements(kernel.body))
    warps = -(-use.threads // gpu.warp_size) * use.blocks_per_sm
    most = gpu.max_threads_per_sm // gpu.warp_size
    if use.blocks_per_sm and not tensor and warps * 4 <= most:  # tensor-core tiles want registers, not warps
        notes.append(Note("occupancy", f"{use.blocks_per_sm} block(s) of {use.threads} threads a multiprocessor "
                                       f"keep {warps} of its {most} warps, limited by {use.limited_by}: "
                                       + _remedy(use.limited_by)))
    return notes


SLOT_ROWS, SLOT_BYTES = 64, 128  # a wgmma plan's output slot: 64 rows of one 128-byte swizzled chunk


def _tile_stores(kernel: Kernel, gpu) -> list[Note]:
    """wgmma accumulators stored into global memory by the threads, element pairs at a time, where
    the two shared slots a warpgroup that TMA stores them through do not fit beside the kernel's
    shared memory (``epilogue.plan_output`` then leaves the stores to the threads)."""
    body = list(walk_statements(kernel.body))
    frags = {s.name: s for s in body if isinstance(s, Fragment)}
    roles = next((s for s in body if isinstance(s, Roles)), None)
    consumers = next((r.threads for r in roles.roles if r.name == "consumers"), 0) if roles else \
        kernel.threads_per_block
    slots = consumers // WARPGROUP * 2 * SLOT_ROWS * SLOT_BYTES
    notes, seen = [], set()
    params = {b.name for b in kernel.buffers}
    for s in body:
        frag = frags.get(getattr(s, "fragment", ""))
        if not (isinstance(s, FragmentStore) and s.buffer in params and frag is not None and frag.family == "wgmma"
                and s.buffer not in seen):
            continue
        seen.add(s.buffer)
        total = kernel.dynamic_shared_bytes + slots
        if slots and total > gpu.shared_memory_max:
            notes.append(Note("tile stores", f"{s.buffer}'s tiles are stored by the threads from their registers "
                                             f"(two elements a store), not by TMA through two shared slots a "
                                             f"warpgroup: those {slots} bytes beside the kernel's "
                                             f"{kernel.dynamic_shared_bytes} make {total}, past the "
                                             f"{gpu.shared_memory_max} a block may hold; fewer stages or smaller "
                                             "tiles leave room for them"))
    return notes


def _remedy(limit: str) -> str:
    if limit.startswith("shared"):
        return "fewer stages or smaller shared tiles let more blocks in"
    if limit.startswith("registers"):
        return "fewer elements a thread (smaller register tiles) let more blocks in"
    if limit.startswith("blocks"):
        return "more threads a block (a larger tile bound to threads) use the blocks a multiprocessor holds"
    return "more threads a block keep more warps in flight"
