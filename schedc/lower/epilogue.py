"""C's tiles of a wgmma plan through shared memory: stored by TMA, and loaded by TMA where at
least two slots a warpgroup (a number that divides its chunks) fit beside the operand ring.

Stored (``TmaOutput.loads`` false): each consumer warpgroup writes ``chunk`` columns of its
accumulator at a time into one of its two swizzled slots, fences them for the async proxy, meets
at its named barrier, and one of its threads stores the slot as a TMA box while the warpgroup
goes on; a slot is rewritten once the store before last has read it. C, where the plan reads it,
is then loaded by the threads from global memory before the products.

Where a fused epilogue goes on to write another array at C's element (``fused``), that array's
tiles leave the same way through two slots of their own (``TmaOutput.then``), after C's: each
chunk's statements of the other array run in the registers once C's chunks are stored (where C
is loaded by TMA too, the threads store the other array themselves, after each part's C).

Loaded too (``loads``): the warpgroup's tile of C passes in chunks through ``slots`` slots (its
whole tile where it fits, else the most that divide its chunks), chunk ``j`` in slot
``j % slots``, each slot with its own ``<C>_full`` mbarrier. At a tile's start one thread of each
warpgroup waits until its stores of the tile before have read the slots, copies the first
``slots`` chunks into them by TMA (landing while the products run).
The accumulators start at zero; after the products the warpgroup, chunk by chunk, waits for the
chunk's slot, reads C, adds it to the accumulator's columns (then the epilogue op), writes the
result back into the same slot (each thread the elements it read) and stores the slot by TMA;
once that store has read the slot, the issuing thread refills it with the chunk ``slots`` later.

A tile whose rows are longer than one 128-byte chunk but not whole chunks (``TmaOutput.tail``):
its whole chunks pass as above, its last columns through unswizzled boxes of their own (a second
tensor map), one slot for each of the warpgroup's accumulators (and, loaded, one mbarrier each,
filled once a tile at its start).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import tma
from ..errors import PlanError
from ..ir.kernel import (
    WARPGROUP_INDEX,
    Binary,
    BulkCommit,
    BulkWait,
    Const,
    Expr,
    Fence,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentStore,
    If,
    LaneReduce,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    PrivateArray,
    SharedBuffer,
    Stmt,
    StructParam,
    TensorMap,
    TmaLoad,
    TmaStore,
    Var,
    shared_layout,
)
from ..ir.types import ScalarType
from ..targets import MMAFragmentOp
from . import fused, split, tensor
from .launch import WARPGROUP, Launch

GROUP = WARPGROUP_INDEX  # the thread's warpgroup
# element types a TMA reduction adds into global memory
REDUCIBLE = frozenset({ScalarType.float32, ScalarType.float16, ScalarType.bfloat16, ScalarType.int32,
                       ScalarType.uint32})
ISSUER = Binary("==", Binary("%", Var("threadIdx.x"), Const(WARPGROUP)), Const(0))  # a warpgroup's first thread


@dataclass(frozen=True)
class TmaOutput:
    """How C's tiles pass through shared memory (module docstring): ``buffer`` is
    (warpgroups, slots, 64 rows, chunk) of ``swizzle``-byte rows, two slots a warpgroup, or
    with ``loads`` as many as fit, C's copies completing on ``barrier`` (one per slot)."""

    array: str
    buffer: SharedBuffer
    map: StructParam
    chunk: int
    loads: bool = False
    barrier: SharedBuffer | None = None  # loads: one mbarrier per slot of each consumer warpgroup
    adds: bool = False  # the stores add into C (TMA reductions: split_k(deterministic=False))
    # the other array a fused epilogue writes after C, through slots of its own (stores only)
    then: TmaOutput | None = None
    # a tile's last columns where they are not a whole chunk: unswizzled boxes of their own, one
    # slot (and, with ``loads``, one mbarrier) for each of the warpgroup's accumulators
    tail: TmaOutput | None = None

    @property
    def slots(self) -> int:
        return self.buffer.shape[1]

    @property
    def shared(self) -> tuple[SharedBuffer, ...]:
        return (self.buffer, *((self.barrier,) if self.barrier is not None else ()),
                *(self.tail.shared if self.tail is not None else ()),
                *(self.then.shared if self.then is not None else ()))

    @property
    def maps(self) -> tuple[StructParam, ...]:
        """The tensor maps of the arrays that leave by TMA."""
        return (self.map, *(self.tail.maps if self.tail is not None else ()),
                *(self.then.maps if self.then is not None else ()))

    @property
    def box_bytes(self) -> int:
        return self.buffer.shape[2] * self.chunk * self.buffer.dtype.size

    def setup(self) -> tuple[Stmt, ...]:
        """The barriers' set-up (by one thread, with the ring's): one arrival, the issuer's."""
        own = () if self.barrier is None else \
            tuple(MbarrierInit(self.barrier.name, Const(g), 1) for g in range(self.barrier.shape[0]))
        return own + (self.tail.setup() if self.tail is not None else ())

    def pieces(self, n: int) -> list[tuple[int, TmaOutput]]:
        """An accumulator's ``n`` columns as (first column, the output whose slots take them):
        whole chunks, then the tail's columns."""
        whole = n - (self.tail.chunk if self.tail is not None else 0)
        return [(first, self) for first in range(0, whole, self.chunk)] + \
            ([(whole, self.tail)] if self.tail is not None else [])


def plan_output(model, tiles: tensor.TensorMatch, launch: Launch, ring: tuple[SharedBuffer, ...],
                outer: tuple[str, ...], tiles_per_group: int, stores_only: bool = False) -> TmaOutput | None:
    """C's TMA store, where its tiles can take it: C a 2-D array of rows contiguous along the
    tile's columns, 16-byte row pitch, tile rows of 32 or 64 bytes or longer ones of 16-byte
    multiples (whole 128-byte chunks, then a tail),
    each tile stored once (no reduction loop among the ``outer`` ones), the staging slots within
    the shared memory the operand ``ring`` leaves. Otherwise (None) the threads store C directly.
    C is loaded by TMA too where the plan reads it before the products (no prologue op) and a
    number of slots a warpgroup that divides its chunks, at least two (or its whole tile,
    ``tiles_per_group`` accumulators), fits; ``stores_only``: never loaded."""
    c = tiles.c
    if c.buffer not in {b.name for b in model.buffers}:
        return None
    if c.col_stride != 1:
        return not_added(model, c.buffer, f"which need {c.buffer}'s tiles along its rows (its columns are "
                                          f"{c.col_stride} elements apart)")
    target = fused.stored_array(model, c.buffer)
    if model.buffer(c.buffer).role == "temp":  # held in registers alone: the epilogue's other array leaves
        if target is None:
            return None
        c = dataclasses.replace(c, buffer=target)
    output = _planned(model, tiles, c, launch, ring, outer, tiles_per_group, stores_only)
    if output is None or target in (None, c.buffer) or output.loads or output.adds:
        return output
    then = _planned(model, tiles, dataclasses.replace(c, buffer=target), launch, (*ring, *output.shared), outer,
                    tiles_per_group, stores_only=True)
    return dataclasses.replace(output, then=then) if then is not None else output


def _planned(model, tiles: tensor.TensorMatch, c: tensor.Operand, launch: Launch, ring: tuple[SharedBuffer, ...],
             outer: tuple[str, ...], tiles_per_group: int, stores_only: bool = False) -> TmaOutput | None:
    """``plan_output`` for the tiles of the array ``c`` names (C, or the array an epilogue writes
    at C's element); ``stores_only``: never loaded."""
    array = model.buffer(c.buffer)
    size = array.dtype.size
    adds = model.adds_into == c.buffer

    def refused(why: str) -> None:
        return not_added(model, c.buffer, why)

    if len(array.shape) != 2 or array.strides[1] != 1 or c.row_stride != array.strides[0]:
        return refused(f"which need {c.buffer} a row-major 2-D array whose rows the tiles' rows follow "
                       f"({c.buffer} has strides {list(array.strides)})")
    if (array.strides[0] * size) % tma.GLOBAL_ALIGN:
        return refused(f"which need {c.buffer}'s rows a multiple of {tma.GLOBAL_ALIGN} bytes apart (they are "
                       f"{array.strides[0] * size})")
    if any(r in outer for r in tiles.reductions):
        return None  # C's tile is stored more than once: a later load must not race the TMA store
    if tiles.c_past is not None:
        return refused(f"which store whole tiles, and a tile past the nest's edge holds {c.buffer}"
                       f"[{', '.join(map(str, tiles.c_past))}], which another tile stores: the threads store "
                       "the nest's elements alone")
    m, n, _ = model.tensorize.mma_shape.mnk
    row_bytes = n * size
    swizzle, tail_bytes = tma.swizzle_for(row_bytes), 0
    if not swizzle and row_bytes > tma.SWIZZLES[0] and row_bytes % tma.GLOBAL_ALIGN == 0:
        swizzle = tma.SWIZZLES[0]  # whole 128-byte chunks, then the tail's own boxes
        tail_bytes = row_bytes % swizzle
    groups = launch.threads // WARPGROUP
    if not swizzle:
        return refused(f"which need a warpgroup's tile rows of {c.buffer} of 32 or 64 bytes, or longer ones of a "
                       f"multiple of {tma.GLOBAL_ALIGN} (they are {n} x {size} = {row_bytes} bytes)")
    if groups > 15:
        return refused(f"which take at most 15 warpgroups a block (it has {groups})")
    chunk, width = swizzle // size, tail_bytes // size
    tmap = StructParam(f"{c.buffer}_map", "tensor_map", TensorMap(c.buffer, (m, chunk), array.dtype, swizzle,
                                                                      tiles.c_bounds))

    def staging(slots: int) -> SharedBuffer:
        return SharedBuffer(f"{c.buffer}_out", array.dtype, (groups, slots, m, chunk),
                            (slots * m * chunk, m * chunk, chunk, 1), swizzle, align=1024)

    def tail(loads: bool) -> tuple[TmaOutput | None, tuple[SharedBuffer, ...]]:
        """The tail's output (None where the tile is whole chunks) and its shared buffers."""
        if not width:
            return None, ()
        slots = tiles_per_group
        buffer = SharedBuffer(f"{c.buffer}_tail", array.dtype, (groups, slots, m, width),
                              (slots * m * width, m * width, width, 1), 0, align=128)
        barrier = SharedBuffer(f"{c.buffer}_tail_full", ScalarType.uint64, (groups * slots,), (1,)) if loads \
            else None
        tail_map = StructParam(f"{c.buffer}_tail_map", "tensor_map",
                               TensorMap(c.buffer, (m, width), array.dtype, 0, tiles.c_bounds))
        out = TmaOutput(c.buffer, buffer, tail_map, width, loads, barrier, adds)
        return out, out.shared

    def fits(*buffers: SharedBuffer) -> bool:
        return shared_layout([*ring, *buffers])[1] <= model.gpu.shared_memory_max

    last, last_shared = tail(False)
    if adds:
        if array.dtype not in REDUCIBLE:
            return refused(f"which add float32, float16, bfloat16 and 32-bit integers ({c.buffer} is "
                           f"{array.dtype.value})")
        two = staging(2)
        if not fits(two, *last_shared):
            ring_bytes, total = shared_layout(ring)[1], shared_layout([*ring, two, *last_shared])[1]
            return refused(f"which need two slots a warpgroup for {c.buffer}'s chunks beside the operand ring: "
                           f"{total} bytes of shared memory (the ring {ring_bytes}) where a block has "
                           f"{model.gpu.shared_memory_max} (fewer stages or a smaller tile leave room)")
        return TmaOutput(c.buffer, two, tmap, chunk, adds=True, tail=last)
    if model.tensorize.prologue_op is MMAFragmentOp.NONE and not stores_only:
        chunks = tiles_per_group * (n // chunk)
        loaded, loaded_shared = tail(True)
        for slots in sorted((d for d in range(min(2, chunks), chunks + 1) if chunks % d == 0), reverse=True):
            staged = staging(slots)
            barrier = SharedBuffer(f"{c.buffer}_full", ScalarType.uint64, (groups * slots,), (1,))
            if fits(staged, barrier, *loaded_shared):
                return TmaOutput(c.buffer, staged, tmap, chunk, True, barrier, tail=loaded)
    two = staging(2)
    return TmaOutput(c.buffer, two, tmap, chunk, tail=last) if fits(two, *last_shared) else None


def not_added(model, array: str, why: str) -> None:
    """None (the threads store ``array`` instead), or, where the plan's blocks add into ``array``
    by TMA reductions, which its tiles cannot take, PlanError saying ``why`` and what to write
    instead."""
    if not model.adds_into or model.adds_into != array:
        return None
    raise PlanError("split_k(deterministic=False)", f"each block adds its tiles into {array} by TMA reductions, "
                                                    f"{why}: {split.instead(bool(model.split_sums))}")


def stored_by_tma(after: tuple[Stmt, ...], out: TmaOutput, n: int) -> tuple[Stmt, ...]:
    """The tile's stores of C as chunks through the warpgroup's two slots: the slot is free
    once the store before last has read it, the warpgroup writes it and fences it for the
    async proxy, its issuing thread stores it. A fused epilogue runs chunk by chunk before each
    chunk's store, so that its math overlaps the stores of the chunks before."""
    outputs = {o.array: o for o in (out, out.then) if o is not None}
    maps = _chunked_maps(after, out)
    moved = {id(m) for ms in maps.values() for m in ms}
    result: list[Stmt] = []
    j = 0  # the tile's chunks stored so far (all arrays: their bulk groups are the issuer's one sequence)
    used = dict.fromkeys(outputs, 0)  # each array's chunks so far: its two slots alternate over the tile
    tails = dict.fromkeys(outputs, 0)  # each array's tails so far
    for s in after:
        if id(s) in moved:
            continue
        if not (isinstance(s, FragmentStore) and s.buffer in outputs):
            result.append(s)
            continue
        o = outputs[s.buffer]
        for first, piece in o.pieces(n):
            if piece is o:  # the array's two slots alternate
                slot = (GROUP, Const(used[o.array] % 2), Const(0), Const(0))
                used[o.array] += 1
            else:  # a tail slot an accumulator's own: last used a tile before
                slot = (GROUP, Const(tails[o.array] % piece.slots), Const(0), Const(0))
                tails[o.array] += 1
            columns = (first, first + piece.chunk)
            result += [
                *(dataclasses.replace(m, columns=columns) for m in maps.get((s.fragment, o.array), ())),
                If(ISSUER, (BulkWait(0 if j == 0 else 1, True,
                                     "the slot is free: the store before last has read it"),)),
                NamedBarrier(_barrier_id(), WARPGROUP, "the warpgroup's slot is free"),
                FragmentStore(piece.buffer.name, slot, s.fragment, piece.chunk, 1, vector=s.vector, columns=columns),
                *_store_chunk(piece, s, slot, first),
            ]
            j += 1
    return tuple(result)


def loaded_by_tma(before: tuple[Stmt, ...], after: tuple[Stmt, ...], out: TmaOutput, n: int,
                  tile: Expr) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """C's tiles copied into the warpgroup's slots and added after the products, chunk by chunk,
    in the slots the results leave from (module docstring). ``before`` and ``after`` are the
    accumulators' set-up and stores when C is loaded from global memory; ``tile`` counts the
    block's tiles of C (with the refills per tile, it gives each slot barrier's phase parity)."""
    stores = [s for s in after if isinstance(s, FragmentStore) and s.buffer == out.array]
    applies = {s.fragment: s for s in after if isinstance(s, FragmentApply)}
    maps = _chunked_maps(after, out)
    used = {id(m) for ms in maps.values() for m in ms} | {id(s) for s in (*stores, *applies.values())}
    rest = [s for s in after if id(s) not in used]  # each part's epilogue of another array and its store, after C's
    parts = [(s, first) for s in stores for first, piece in out.pieces(n) if piece is out]  # chunk j: parts[j]
    slots, fills = out.slots, len(parts) // out.slots  # each slot is filled ``fills`` times a tile
    source = f"{out.array}_in"
    first_fragment = next(s for s in before if isinstance(s, Fragment))
    dtype = out.buffer.dtype
    setup: list[Stmt] = [Fragment(source, "accumulator", first_fragment.m, first_fragment.n, first_fragment.k,
                                  dtype, dtype.value, family=first_fragment.family)]
    for s in before:
        loads_c = isinstance(s, FragmentLoad) and s.buffer == out.array
        setup.append(FragmentFill(s.fragment, 0.0) if loads_c else s)

    def fill(j: int) -> list[Stmt]:
        s, first = parts[j]
        return [MbarrierArrive(out.barrier.name, _slot_barrier(out, j), out.box_bytes,
                               f"the bytes of chunk {j} of the warpgroup's tile of {out.array}"),
                TmaLoad(out.map.name, out.buffer.name, _slot(out, j), _coords(s, first), out.barrier.name,
                        _slot_barrier(out, j), f"{out.array}: columns {first}..{first + out.chunk - 1} of a "
                                               "warpgroup's tile")]

    tail = out.tail

    def fill_tail(t: int) -> list[Stmt]:
        s, first = stores[t], n - tail.chunk
        return [MbarrierArrive(tail.barrier.name, _slot_barrier(tail, t), tail.box_bytes,
                               f"the bytes of the last {tail.chunk} columns of the warpgroup's tile of {out.array}"),
                TmaLoad(tail.map.name, tail.buffer.name, _slot(tail, t), _coords(s, first), tail.barrier.name,
                        _slot_barrier(tail, t), f"{out.array}: columns {first}..{n - 1} of a warpgroup's tile")]

    copies: list[Stmt] = [BulkWait(0, True, "the tile before's stores have read the slots")]
    for j in range(slots):
        copies += fill(j)
    for t in range(len(stores) if tail is not None else 0):
        copies += fill_tail(t)

    def added(s: FragmentStore, piece: TmaOutput, slot, first: int, wait: Stmt, then: list[Stmt]) -> list[Stmt]:
        """The chunk's C read from its slot, added (and the epilogue applied), written back, stored."""
        columns, apply = (first, first + piece.chunk), applies.get(s.fragment)
        return [
            wait,
            FragmentLoad(source, piece.buffer.name, slot, piece.chunk, 1, path="elements", vector=s.vector,
                         columns=columns),
            FragmentAdd(s.fragment, source, columns),
            *((FragmentApply(apply.fragment, apply.op, apply.arg, columns),) if apply is not None else ()),
            *(dataclasses.replace(m, columns=columns) for m in maps.get((s.fragment, out.array), ())),
            FragmentStore(piece.buffer.name, slot, s.fragment, piece.chunk, 1, vector=s.vector, columns=columns),
            *_store_chunk(piece, s, slot, first, then),
        ]

    epilogue: list[Stmt] = []
    for j, (s, first) in enumerate(parts):
        turn = Binary("+", tile, Const(j // slots)) if j // slots else tile  # odd fills: the tile's parity moves
        parity = Const(j // slots % 2) if fills % 2 == 0 else Binary("%", turn, Const(2))
        refill = [BulkWait(0, True, "the chunk's store has read the slot"), *fill(j + slots)] \
            if j + slots < len(parts) else []
        wait = MbarrierWait(out.barrier.name, _slot_barrier(out, j), parity,
                            f"chunk {j} of the warpgroup's tile of {out.array} has landed")
        epilogue += added(s, out, _slot(out, j), first, wait, refill)
        if tail is not None and (j + 1 == len(parts) or parts[j + 1][0] is not s):  # the accumulator's tail
            t = stores.index(s)
            parity = Const(tile.value % 2) if isinstance(tile, Const) else Binary("%", tile, Const(2))
            wait = MbarrierWait(tail.barrier.name, _slot_barrier(tail, t), parity,
                                f"the last {tail.chunk} columns of the warpgroup's tile of {out.array} have landed")
            epilogue += added(s, tail, _slot(tail, t), n - tail.chunk, wait, [])
    setup.append(If(ISSUER, tuple(copies), f"one thread of the warpgroup copies its tile of {out.array}"))
    return tuple(setup), (*epilogue, *rest)


def _chunked_maps(after: tuple[Stmt, ...], out: TmaOutput) -> dict[tuple[str, str], list[FragmentMap]]:
    """A fused epilogue's maps, by (fragment, the array its next store fills), computed chunk by
    chunk beside that array's TMA stores: those before the fragment's store into ``out``'s array,
    and (``out.then``) those between it and the store of the epilogue's other array, which compute
    that array's element in the same registers once C's store has taken C's. Maps before a store
    the threads make themselves stay whole, and so do all of them where the epilogue reduces rows
    into row vectors (each reduction needs the row whole before what follows reads it)."""
    leaving = {o.array for o in (out, out.then) if o is not None}
    if any(isinstance(s, LaneReduce | PrivateArray) for s in after):  # row vectors (lower/rows.py): whole rows
        if out.loads:
            raise PlanError(f"cache({out.array}, ..., location=MMA_FRAGMENT)",
                            f"the epilogue reduces rows of {out.array}'s tile into row vectors, which needs the "
                            f"whole tile in registers first, and {out.array}'s tile comes in by TMA chunk by chunk "
                            f"after the products: start the accumulators from a value (prologue_op=SET) or make "
                            f"{out.array} Role.OUTPUT")
        return {}
    maps: dict[tuple[str, str], list[FragmentMap]] = {}
    pending: dict[str, list[FragmentMap]] = {}
    for s in after:
        if isinstance(s, FragmentStore) and s.buffer in leaving:
            maps.setdefault((s.fragment, s.buffer), []).extend(pending.pop(s.fragment, []))
        elif isinstance(s, FragmentStore):
            pending.pop(s.fragment, None)
        elif isinstance(s, FragmentMap) and s.columns is None:
            pending.setdefault(s.fragment, []).append(s)
    return maps


def _slot(out: TmaOutput, j: int) -> tuple[Expr, ...]:
    return GROUP, Const(j % out.slots), Const(0), Const(0)


def _slot_barrier(out: TmaOutput, j: int) -> Expr:
    """The mbarrier of chunk ``j``'s slot in the warpgroup's row of barriers."""
    row = GROUP if out.slots == 1 else Binary("*", GROUP, Const(out.slots))
    return Binary("+", row, Const(j % out.slots)) if j % out.slots else row


def stores_done() -> Stmt:
    return If(ISSUER, (BulkWait(0, False, "the tile stores are done before the block exits"),))


def _barrier_id() -> Expr:
    return Binary("+", GROUP, Const(1))


def _coords(s: FragmentStore, first: int) -> tuple[Expr, ...]:
    return (s.origin[0], Binary("+", s.origin[1], Const(first)) if first else s.origin[1])


def _store_chunk(out: TmaOutput, s: FragmentStore, slot: tuple[Expr, ...], first: int,
                 then: list[Stmt] | None = None) -> list[Stmt]:
    """The written slot fenced for the async proxy, the warpgroup met, one thread storing it
    (and doing ``then`` after)."""
    return [
        Fence("proxy_async"),
        NamedBarrier(_barrier_id(), WARPGROUP, "the warpgroup's chunk is written"),
        If(ISSUER, (TmaStore(out.map.name, out.buffer.name, slot, _coords(s, first),
                             f"{out.array}: columns {first}..{first + out.chunk - 1} of the warpgroup's tile"
                             + (", added into it" if out.adds else ""), out.adds),
                    BulkCommit(), *(then or ())), "one thread of the warpgroup stores the chunk"),
    ]
