"""Shared-memory caches: the footprint of an array for the loops at and inside the cache index
is copied into shared memory, and those loops read the copy.

The footprint comes from poly (the elements the loops at and inside the index touch, with the
serial loops outside it and the block coordinates fixed, and the warp/thread coordinates free).

Three ways to fill the copy (``CacheSpec.pipeline``):

- *sync* (Accera's sequential caching): barrier, copy, barrier before the index's loop;
  ``async`` with one stage is the same with cp.async and a wait for all copies;
- *registers* (register double buffering): the enclosing loop (the *carrier*) loads the next
  tile into registers while it computes on shared memory, then stores them between barriers;
- *async* with N >= 2 stages: a ring of N buffers; N-1 tiles are requested before the carrier,
  and each iteration waits for its own, then requests the one N-1 iterations ahead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import poly, tma
from ..errors import CacheError
from ..instructions import ldmatrix_plan, swizzle_pitch
from ..ir.affine import Affine, extent_expr
from ..ir.kernel import (
    SHARED_ALIGN,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Const,
    Expr,
    Fence,
    If,
    Let,
    Load,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    PrivateArray,
    SharedBuffer,
    StageLoad,
    StageStore,
    Staging,
    Stmt,
    Store,
    StructParam,
    TensorMap,
    TmaLoad,
    Var,
    all_of,
    shared_layout,
)
from ..ir.patterns import buffers_read
from ..ir.types import ScalarType
from ..ir.walk import loads, map_expr
from ..targets import CacheStrategy, CopyEngine, MemorySpace, Target
from . import tensor
from .scratch import tile as scratch_tile


@dataclass(frozen=True)
class SharedCache:
    array: str
    index: str
    buffer: SharedBuffer
    origin: tuple[Affine, ...]  # the footprint's first element, over the fixed loops
    vector: int
    strategy: str
    pipeline: str = "sync"
    stages: int = 1
    carrier: str | None = None  # the serial loop around ``index`` that a pipeline runs along
    limits: tuple[int | Affine, ...] = ()  # the nest's reach of the array when the tile may pass it (zeros there)
    axes: tuple[int, ...] = ()  # the tile's dimensions slowest first, as in the array; () in order
    # a sequential cache whose copies use cp.async (sm_80+, 4-byte vectors): every vector of
    # the tile in flight at once, then a wait for all of them, instead of one per thread at a time
    copy_async: bool = False
    # where the copy runs: before this serial loop, or (None) at the innermost level, just
    # inside the serial loops around ``index`` (an index bound to threads or warps, or
    # tensorized, has no loop of its own: the block fills the cache where its loop would be)
    at: str | None = None
    tma: StructParam | None = None  # engine=TMA: the tensor map of the one box the tile is
    # layout= other than the array's: the tile's contiguous dimension is not the array's (the
    # copy reads vectors along the array's, and writes their elements one by one)
    transposed: bool = False
    # the nest writes the array: the tile goes back to it after the loops (an output cache)
    written: bool = False
    # an output cache of an array no statement reads: the tile is written whole before it goes
    # back (writes_whole_box), so it is not copied in
    unread: bool = False
    # a TEMP array's tile that each pass over the tile writes before it reads it (``scratch``):
    # neither filled nor written back, so the array needs no global memory at all
    scratch: bool = False

    @property
    def barrier(self) -> str:
        """engine=TMA: the mbarrier the tile's bytes complete on."""
        return f"{self.array}_full"

    @property
    def phase(self) -> str:
        """engine=TMA: each thread's count (mod 2) of the fills it has waited for."""
        return f"{self.array}_phase"

    @property
    def ring(self) -> int:
        """Buffers in shared memory: the stages of an async pipeline, else one."""
        return self.stages if self.pipeline == "async" else 1

    @property
    def tile_shape(self) -> tuple[int, ...]:
        return self.buffer.shape[1:] if self.ring > 1 else self.buffer.shape


def plan_shared(model, threads: int, tiles: tensor.TensorMatch | None = None,
                scratch: SharedBuffer | None = None) -> tuple[SharedCache, ...]:
    """Check every SHARED cache and describe its buffer and copy. ``tiles``: the tensorized
    plan's partial-tile guards (footprints over whole tiles); ``scratch``: other shared memory
    the kernel needs (C's edge tiles), counted in the budget. Tiles are padded against bank
    conflicts unless ``create_plan(_dynamic_shared_memory_size=N)`` leaves no room for it: then
    they are dense (Accera's sizes count the dense tiles)."""
    caches = _plan_all(model, threads, tiles, scratch, pad=True)
    wanted = model.dynamic_shared
    extra = ([scratch] if scratch is not None else []) + list(tma_buffers(caches))
    if wanted and shared_layout([c.buffer for c in caches] + extra)[1] > wanted:
        caches = _plan_all(model, threads, tiles, scratch, pad=False)
    return caches


def _plan_all(model, threads: int, tiles: tensor.TensorMatch | None, scratch: SharedBuffer | None,
              pad: bool) -> tuple[SharedCache, ...]:
    guards = tiles.guards if tiles is not None else None
    specs = [spec for spec in model.caches if spec.location is MemorySpace.SHARED]
    caches = [_plan(model, spec, guards, threads, tiles, pad) for spec in specs]
    # double_buffer=True (AUTO) where cp.async cannot copy a tile: every AUTO cache at that
    # index takes the register double buffer instead, so that they share one pipeline
    narrow = {c.at for c, spec in zip(caches, specs) if spec.automatic and not _async_fits(c)}
    if narrow:
        specs = [dataclasses.replace(s, pipeline="registers", stages=1) if s.automatic and c.at in narrow
                 else s for c, s in zip(caches, specs)]
        caches = [_plan(model, spec, guards, threads, tiles, pad) if c.at in narrow else c
                  for c, spec in zip(caches, specs)]
    for c in caches:
        _check_async(c, model.buffer(c.array).strides)
    _check_pipelines(caches)
    caches = _sequential_async(model, caches)
    _check_blocks_per_sm(model, caches, scratch)
    extra = [scratch] if scratch is not None else []
    _, total = shared_layout([c.buffer for c in caches] + extra)
    gpu = model.gpu
    if total > gpu.shared_memory_max:
        names = ", ".join([f"{c.array} {c.buffer.nbytes}" for c in caches] + [f"{b.name} {b.nbytes}" for b in extra])
        raise CacheError(
            f"cache({caches[-1].array}, index={caches[-1].index}, location=SHARED)",
            f"the caches need {total} bytes of shared memory per block ({names}); {gpu.name} allows "
            f"{gpu.shared_memory_max} (with the opt-in attribute; {gpu.shared_memory_static} without)",
            loops=tuple(c.index for c in caches),
        )
    return tuple(caches)


def _plan(model, spec, guards, threads: int, tiles: tensor.TensorMatch | None = None,
          padding: bool = True) -> SharedCache:
    here = f"cache({spec.array}, index={spec.index}, location=SHARED)"
    at = placement(model, spec.index)
    written = any(s.buffer == spec.array for s in model.statements)
    if written:
        _check_written(model, spec, here)
    blocked = tensor.accumulator_cache(model, tiles)[1] if tiles is not None else ()
    fixed = block_fixed(model, spec.index, blocked)
    fp = footprint(model, spec, here, fixed, guards)
    if written and not poly.writes_whole_box(model, fp):
        raise CacheError(here, f"the block's tile {fp} holds elements the block does not write (strided elements, "
                               f"or the nest covers only part of {spec.array}); writing the tile back would overwrite "
                               "elements the nest leaves alone or other blocks write: cache at a loop inside which "
                               "the block writes a whole box", loops=(spec.index,))
    global_buffer = model.buffer(spec.array)
    # the copies run wherever the loops around them run, also where a partial tile's guard
    # (inside the copy) leaves no iteration, and a pipeline prefetches its carrier's next
    # iterations: those tiles stay inside the array only if every loop's whole range does
    whole = footprint(model, spec, here, fixed, ()) if guards is None else fp
    if not (fp.starts_inside and whole.starts_inside):
        raise CacheError(
            here,
            f"the footprint {fp} starts before the first element of {spec.array}"
            f"[{', '.join(map(str, global_buffer.shape))}] for some tiles; tiles are padded at the end of an array "
            "only",
            loops=(spec.index,),
        )
    pipelined = spec.pipeline == "registers" or (spec.pipeline == "async" and spec.stages > 1)
    inside = fp.inside and whole.inside
    limits = () if inside else fp.bounds  # zeros past what the nest reaches of the array
    dtype, name = global_buffer.dtype, f"{spec.array}_shared"
    order = tma.dimension_order(global_buffer.strides)  # the copy's order: vectors along the array's rows
    columns, tile_order = _slices(global_buffer.strides, order, spec.order)
    transposed = tile_order[-1] != columns  # the copy writes its columns down the tile's
    plain, padded = (SharedBuffer(name, dtype, fp.extents, _ordered(fp.extents, tile_order, dtype.size, pad))
                     for pad in (False, True))
    # pipelines always pad tensor-core operands; sequential caches where it adds at most 1/16;
    # a transposed tile always (its copy writes the elements of a vector into consecutive rows);
    # none where the plan's dynamic shared memory size leaves no room (``padding`` false)
    pad = padding and (transposed or model.tensorize is not None
                       and (spec.pipeline != "sync" or 16 * padded.size <= 17 * plain.size))
    buffer = padded if pad else plain
    swizzle = _swizzle(tiles, spec.array, plain)
    if swizzle:
        buffer = dataclasses.replace(plain, swizzle=swizzle)
    vector = _vector(model, global_buffer, fp, None if transposed else buffer.strides, limits, order[-1]) \
        if spec.vectorize else 1
    carrier = _carrier(model, spec, here, blocked) if pipelined else None
    if spec.pipeline == "registers":
        _check_staging(spec, here, fp.extents, dtype, threads)
    if spec.pipeline == "async" and spec.stages > 1:  # a ring: one aligned tile per stage
        slot = -(-buffer.nbytes // SHARED_ALIGN) * SHARED_ALIGN // dtype.size
        buffer = SharedBuffer(name, dtype, (spec.stages, *fp.extents), (slot, *buffer.strides), buffer.swizzle)
    strategy = "blocked" if spec.strategy is CacheStrategy.BLOCKED else "striped"
    axes = order if order != tuple(range(len(order))) else ()
    if spec.engine is CopyEngine.TMA:
        if transposed:
            raise CacheError(here, "layout= other than the array's: a TMA box keeps the array's layout; leave layout "
                                   "unset or copy with the threads (engine=THREADS)", loops=(spec.index,))
        tmap = _tma_box(model, spec, here, fp.extents, global_buffer)
        buffer = dataclasses.replace(plain, align=128)
        return SharedCache(spec.array, spec.index, buffer, fp.origin, 1, strategy, spec.pipeline, spec.stages,
                           None, (), axes, at=at, tma=tmap)
    if spec.pipeline == "registers" and global_buffer.strides[columns] != 1:
        raise CacheError(here, f"a register double buffer loads rows of contiguous elements, and {spec.array}'s tile "
                               f"{fp} has none along its copy (strides {list(global_buffer.strides)}): use stages=N "
                               "or a sequential cache", loops=(spec.index,))
    if len(fp.extents) > 2 and spec.pipeline == "registers":
        raise CacheError(here, f"the tile {fp} has rank {len(fp.extents)}, copied one 2-D slice at a time, but a "
                               "register double buffer stages whole tiles of rank 1 or 2: cache at a loop further in "
                               "(a tile of rank 2), or use stages=N", loops=(spec.index,))
    rank = len(order)
    if rank > 2 and axes:  # slices of the last two dimensions, their columns along ``columns``
        axes = (1, 0) if columns == rank - 2 else ()
        if order[-1] < rank - 2:  # the array's contiguous dimension is sliced: element by element
            vector = 1
    unread = written and all(spec.array not in buffers_read(s.value) for s in model.statements)
    return SharedCache(spec.array, spec.index, buffer, fp.origin, vector, strategy,
                       spec.pipeline, spec.stages, carrier, limits, axes, at=at, transposed=transposed,
                       written=written, unread=unread and carrier is None, scratch=scratch_tile(model, spec))


def _slices(strides: tuple[int, ...], order: tuple[int, ...], wanted: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """The dimension a tile's copy runs its columns along, and the tile's dimension order
    (slowest first). A tile of rank 1 or 2 is copied along its array's rows, into the array's
    layout or ``wanted``. One of rank over 2 is copied one 2-D slice of its last two dimensions
    at a time: along the array's rows where the array is row-major, else along the nearer of those
    two dimensions (the one of smaller stride); the tile keeps the leading dimensions slowest and
    orders the last two as ``wanted`` does (by default, as the copy runs)."""
    rank = len(order)
    if rank <= 2:
        return order[-1], tuple(wanted or order)
    row_major = order == tuple(range(rank))
    columns = rank - 1 if row_major or strides[-1] < strides[-2] else rank - 2
    last = [d for d in wanted if d >= rank - 2] if wanted else [2 * rank - 3 - columns, columns]
    return columns, (*range(rank - 2), *last)


def _check_written(model, spec, here: str) -> None:
    """A SHARED cache of an array the nest writes (Accera's output caching in shared memory):
    filled like any cache, the statements read and write the tile, and after the loops the
    block writes it back (``written_refusal`` says where that cannot be); no pipeline or TMA."""
    refused = written_refusal(model, spec.array)
    if refused is not None:
        raise CacheError(here, refused, loops=(spec.index,))
    if spec.engine is CopyEngine.TMA or spec.pipeline != "sync" or spec.stages > 1:
        raise CacheError(here, f"the nest writes {spec.array}: its tile is filled once and written back after the "
                               "loops, without a pipeline or TMA (leave double_buffer, stages and engine unset)",
                         loops=(spec.index,))


def written_refusal(model, array: str) -> str | None:
    """Why no SHARED cache of ``array``, which the nest writes, is built at any index (None: one
    may be, where its tile is a box the block writes whole). Each statement must touch the array at
    one element (the one it writes), so that the tile is exactly what the block writes (other
    blocks write elsewhere: the plan's race check); tensor cores write C from fragments. ``schedc
    check``'s advice asks it before recommending such a cache."""
    if model.tensorize is not None:
        return f"tensor cores write {array} from fragments: cache it in MMA_FRAGMENT"

    def element(index) -> tuple[str, ...]:
        return tuple(str(Affine.of(i)) for i in index)

    for st in model.statements:
        reads = {element(load.index) for load in loads(st.value) if load.buffer == array}
        touched = reads | ({element(st.index)} if st.buffer == array else set())
        if len(touched) > 1:
            elements = ", ".join(f"{array}[{', '.join(t)}]" for t in sorted(touched))
            return (f"a statement touches {elements}: a tile written back must hold only the elements the block "
                    "writes, each statement reading the one it writes")
    return None


def _tma_box(model, spec, here: str, extents: tuple[int, ...], array) -> StructParam:
    """engine=TMA for a tile the block's threads read: the whole tile is one TMA box (2-D, dense,
    zeros past the array), refused with the reason where TMA cannot copy it."""
    here = here.replace("location=SHARED)", "location=SHARED, engine=TMA)")
    if model.tensorize is not None:
        raise CacheError(here, "wmma and mma.sync read padded or XOR-swizzled tiles, which TMA does not write: "
                               "engine=THREADS, or tensorize with a wgmma shape (its tiles are TMA's)",
                         loops=(spec.index,))
    if spec.pipeline == "registers" or spec.stages > 1:
        raise CacheError(here, "TMA fills the tile of the block's threads one tile at a time (stages=1, or no "
                               "double buffer); rings of TMA stages feed wgmma plans", loops=(spec.index,))
    if len(extents) != 2:
        raise CacheError(here, f"TMA copies 2-D tiles here; the footprint {'x'.join(map(str, extents))} has rank "
                               f"{len(extents)}", loops=(spec.index,))
    size = array.dtype.size
    if 1 not in array.strides:
        raise CacheError(here, f"{spec.array} has strides {list(array.strides)}; TMA needs one contiguous "
                               "dimension", loops=(spec.index,))
    inner = array.strides.index(1)
    pitch = array.strides[1 - inner] * size
    if pitch % tma.GLOBAL_ALIGN:
        raise CacheError(here, f"{spec.array}'s rows are {pitch} bytes apart; TMA needs a multiple of 16 bytes "
                               f"(pad the leading dimension to a multiple of {16 // math.gcd(16, size)} elements)",
                         loops=(spec.index,))
    if extents[inner] * size % tma.GLOBAL_ALIGN:
        raise CacheError(here, f"the tile's rows are {extents[inner]} element(s) ({extents[inner] * size} bytes) "
                               f"along {spec.array}'s contiguous dimension {inner}; a TMA box's rows are a "
                               "multiple of 16 bytes", loops=(spec.index,))
    if max(extents) > tma.BOX_LIMIT:
        raise CacheError(here, f"the tile is {'x'.join(map(str, extents))}; a TMA box has at most {tma.BOX_LIMIT} "
                               "elements along each dimension: cache at a loop further in", loops=(spec.index,))
    return StructParam(f"{spec.array}_map", "tensor_map", TensorMap(spec.array, tuple(extents), array.dtype, 0,
                                                                           poly.reach(model, spec.array)))


def _swizzle(tiles: tensor.TensorMatch | None, array: str, plain: SharedBuffer) -> int:
    """The swizzle pitch of an operand tile the family reads with ldmatrix (rank 2, rows of 32
    or 64 bytes or a multiple of 128), or 0: the tile is padded or left dense instead."""
    if tiles is None or not tiles.instructions.swizzles or array not in (tiles.a.buffer, tiles.b.buffer):
        return 0
    if len(plain.shape) != 2:
        return 0
    pitch = max(plain.strides) * plain.dtype.size
    return swizzle_pitch(pitch)


def footprint(model, spec, here: str, fixed: tuple[str, ...], guards) -> poly.Footprint:
    """The cache's footprint; one that is not a box with an affine origin is refused."""
    try:
        return poly.footprint(model, spec.array, spec.index, fixed, guards)
    except poly.FootprintError as error:
        raise CacheError(here, str(error), loops=(spec.index,)) from None


MAX_TILE_REGISTERS = 128  # a thread's share of a register tile may take half of its 255 registers


def _check_staging(spec, here: str, extents: tuple[int, ...], dtype, threads: int) -> None:
    """A register double buffer holds each thread's share of the next tile in registers."""
    per_thread = -(-math.prod(extents) // threads)
    registers = per_thread * max(dtype.size, 4) // 4
    if registers > MAX_TILE_REGISTERS:
        raise CacheError(here, f"a register double buffer holds each thread's share of the next tile: "
                               f"{per_thread} element(s) of the {'x'.join(map(str, extents))} tile for each of "
                               f"{threads} thread(s), {registers} registers, over {MAX_TILE_REGISTERS}; "
                               + ("double_buffer=True chose it because cp.async cannot copy this tile's vectors: "
                                  "use more threads or a smaller tile" if spec.automatic else
                                  "use stages=N (cp.async) or more threads"), loops=(spec.index,))


def _async_fits(c: SharedCache) -> bool:
    """cp.async moves 4, 8 or 16 bytes, the same on both sides: the tile's vectors must be that
    wide, and the tile in the array's layout."""
    return c.pipeline != "async" or c.tma is not None or (
        not c.transposed and (c.vector * c.buffer.dtype.size) % 4 == 0)


def _check_async(c: SharedCache, strides: tuple[int, ...]) -> None:
    if _async_fits(c):
        return
    if c.transposed:
        raise CacheError(f"cache({c.array}, index={c.index}, location=SHARED)",
                         f"cp.async copies vectors into the same layout, but {c.array}'s tile is transposed (layout= "
                         "other than the array's): use double_buffer=True with double_buffer_location=PRIVATE "
                         "(the register double buffer) or a sequential cache", loops=(c.index,))
    size, inner = c.buffer.dtype.size, (c.axes or range(len(c.tile_shape)))[-1]
    pitches = [s * size for d, s in enumerate(strides) if d != inner and isinstance(s, int) and (s * size) % 4]
    why = (f"{c.array}'s rows are {pitches[0]} bytes apart, so its tiles' rows start at addresses no 4-byte vector "
           f"reaches: pad the array's rows to a multiple of {16 // size} elements" if pitches and
           (c.tile_shape[inner] * size) % 4 == 0 else
           f"{c.tile_shape[inner]} element(s) of {size} bytes along its contiguous dimension {inner}")
    raise CacheError(f"cache({c.array}, index={c.index}, location=SHARED)",
                     f"cp.async moves 4, 8 or 16 bytes, but {c.array}'s tile allows only "
                     f"{c.vector * size}-byte vectors ({why})", loops=(c.index,))


def block_fixed(model, index: str, blocked: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The loops a block's cache at ``index`` holds fixed: the block's coordinates and the
    serial loops outside ``index`` (thread and warp coordinates vary: the block shares it).
    ``blocked``: register-blocked loops, unrolled into a warp's several fragments, vary too:
    they have no loop to fill the cache in, so one fill serves every fragment's tile."""
    names = [lp.name for lp in model.loops]
    position = names.index(index)

    def unit(n: str) -> str | None:
        u = model.binding_of(n)
        return u.level if u is not None else None

    return tuple(n for i, n in enumerate(names)
                 if unit(n) == "block" or (i < position and unit(n) is None and n not in blocked))


def choose_indices(model):
    """``plan.cache(..., max_elements=N)``: the outermost loop whose footprint (the block's, for
    SHARED; the thread's, for PRIVATE) has at most N elements. Then ``trigger_index=T``: the
    cache is filled at T with what the loops at and inside its index read over every iteration
    of the loops from T to the index (one box, the footprint of the loops at and inside T), so
    it is kept across T (a pipeline runs along the loop around T)."""
    if not any(c.max_elements or c.trigger for c in model.caches):
        return model
    return dataclasses.replace(model, caches=tuple(_resolve(model, c) for c in model.caches))


def _resolve(model, asked):
    spec = _choose(model, asked) if asked.max_elements else asked
    if not spec.trigger:
        return spec
    names = [lp.name for lp in model.loops]
    if names.index(spec.trigger) > names.index(spec.index):
        raise CacheError(f"cache({spec.array}, max_elements={asked.max_elements}, location={spec.location.name})",
                         f"trigger_index={spec.trigger} comes after the chosen index {spec.index} in the schedule's "
                         f"order ({', '.join(names)}); the cache is filled at its index or outside it",
                         loops=(spec.trigger, spec.index))
    return dataclasses.replace(spec, index=spec.trigger, trigger="")


def _choose(model, spec):
    here = f"cache({spec.array}, max_elements={spec.max_elements}, location={spec.location.name})"
    sizes = []
    for lp in model.loops:
        unit = model.binding_of(lp.name)
        if unit is not None and (unit.level == "block" or spec.location is not MemorySpace.SHARED):
            continue
        names = [p.name for p in model.loops]
        fixed = block_fixed(model, lp.name) if spec.location is MemorySpace.SHARED else tuple(
            n for n in names if names.index(n) < names.index(lp.name) or model.binding_of(n) is not None)
        try:
            fp = poly.footprint(model, spec.array, lp.name, fixed)
        except poly.FootprintError:
            continue
        elements = math.prod(fp.extents)
        if elements <= spec.max_elements:
            return dataclasses.replace(spec, index=lp.name, max_elements=0)
        sizes.append(f"{lp.name}: {elements}")
    raise CacheError(here, f"no loop's footprint of {spec.array} has at most {spec.max_elements} elements "
                           f"({', '.join(sizes) or 'no loop can hold the cache'})")


def placement(model, index: str) -> str | None:
    """Where the block fills a cache kept across ``index``: before ``index``'s loop when each
    thread runs it; for an index bound to the grid, or tensorized (Accera's caching at such an
    index: the block's footprint over the loops at and inside it, the block's own coordinates
    held fixed, filled cooperatively just inside the serial loops around it), before the first
    serial loop after it, or at the innermost level (None) when none follows."""
    return model.first_serial(index)


def _carrier(model, spec, here: str, blocked: tuple[str, ...] = ()) -> str:
    """The serial loop that directly encloses the cache index: the loop a pipeline runs along
    (not a register-blocked one: it is unrolled into fragments, not run)."""
    serial = tuple(n for n in model.serial_loops if n not in blocked)
    names = [lp.name for lp in model.loops]
    around = [n for n in serial if names.index(n) < names.index(spec.index)]
    if not around:
        raise CacheError(here, f"no serial loop encloses {spec.index}, so there is no next tile to "
                               f"copy while computing; cache at a loop inside another serial loop "
                               f"(the serial loops are {', '.join(serial) or 'none'})", loops=(spec.index,))
    return around[-1]


def _check_pipelines(caches: list[SharedCache]) -> None:
    """Caches kept across one loop share its pipeline."""
    for c in caches:
        for other in caches:
            if other.at == c.at and (other.pipeline, other.stages) != (c.pipeline, c.stages):
                raise CacheError(
                    f"cache({other.array}, index={other.index}, location=SHARED)",
                    f"{c.array} and {other.array} are cached at {c.index} with different pipelines "
                    f"({_describe(c)} and {_describe(other)}); caches at one index share one pipeline",
                    loops=(c.index,),
                )


def _check_blocks_per_sm(model, caches: list[SharedCache], scratch: SharedBuffer | None) -> None:
    """create_plan(_blocks_per_SM=N): N blocks' shared memory must fit on one multiprocessor."""
    blocks = model.blocks_per_sm
    if not blocks:
        return
    _, total = shared_layout([c.buffer for c in caches] + ([scratch] if scratch is not None else []))
    if blocks * total > model.gpu.shared_memory_per_sm:
        raise CacheError(f"create_plan(_blocks_per_SM={blocks})",
                         f"{blocks} blocks of {total} bytes of shared memory need {blocks * total} bytes; a "
                         f"{model.gpu.name} multiprocessor has {model.gpu.shared_memory_per_sm}")


def _sequential_async(model, caches: list[SharedCache]) -> list[SharedCache]:
    """Sequential caches copy with cp.async where the target has it and every tile filled at
    the index moves 4-byte vectors: the same barrier, copy, barrier, with the copies in flight
    together (a thread's synchronous copy waits for each vector's load before the next)."""
    if not Target.known(model.target).has_async_copy:
        return caches
    by_place: dict[str | None, list[SharedCache]] = {}
    for c in caches:
        by_place.setdefault(c.at, []).append(c)
    fits = {at for at, group in by_place.items()
            if all(c.pipeline == "sync" and not c.transposed and (c.vector * c.buffer.dtype.size) % 4 == 0
                   for c in group if not c.tma)}
    return [dataclasses.replace(c, copy_async=True) if c.at in fits else c for c in caches]


def _describe(c: SharedCache) -> str:
    if c.pipeline == "async":
        return f"cp.async with {c.stages} stage(s)"
    return "register double buffer" if c.pipeline == "registers" else "sequential"


def _row_major(shape: tuple[int, ...], size: int, padded: bool) -> tuple[int, ...]:
    """Row-major strides. ``padded``: a row pitch that is an even number of 16-byte units gets
    16 bytes more, so that the 8 rows of a tensor-core operand load (16 bytes each) fall in
    different banks. Pipelined caches of tensor-core operands are padded; sequential ones only
    where that costs at most 1/16 more shared memory, since they rely on occupancy to hide their
    copies (measured: padding a 256x32 fp16 tile cost a block per SM and 9%).

    >>> _row_major((32, 256), 2, padded=True), _row_major((32, 256), 2, padded=False)
    ((264, 1), (256, 1))
    """
    out, step = [], 1
    for n, extent in enumerate(reversed(shape)):
        out.append(step)
        step *= extent
        if n == 0 and padded and len(shape) > 1 and (step * size) % 32 == 0:
            step += 16 // size
    return tuple(reversed(out))


def _ordered(shape: tuple[int, ...], order: tuple[int, ...], size: int, padded: bool) -> tuple[int, ...]:
    """Strides of a tile laid out in ``order`` (slowest dimension first), padded as _row_major.

    >>> _ordered((32, 16), (1, 0), 2, padded=True)
    (1, 40)
    """
    dense = _row_major(tuple(shape[d] for d in order), size, padded)
    strides = [0] * len(shape)
    for d, stride in zip(order, dense):
        strides[d] = stride
    return tuple(strides)


def _vector(model, global_buffer, fp, shared_strides, limits: tuple[int, ...], inner: int) -> int:
    """Elements per copy vector along the contiguous dimension ``inner``: up to 16 bytes, when
    every vector is aligned on both sides (and, for a tile that reaches past the ``limits`` of
    its array, lies wholly inside or wholly outside them). ``shared_strides`` None: a transposed tile, whose
    elements are written one by one (vectors aligned in the array alone)."""
    size = global_buffer.dtype.size
    if global_buffer.strides[inner] != 1 or (shared_strides is not None and shared_strides[inner] != 1):
        return 1
    linear = Affine((), 0)
    for stride, origin in zip(global_buffer.strides, fp.origin):
        linear = linear.plus(origin.scale(stride))
    moves = [c * model.loop(n).step for n, c in linear.terms]
    moves.append(linear.const + sum(c * model.loop(n).begin for n, c in linear.terms))
    outer = [d for d in range(len(fp.extents)) if d != inner]
    rows = [*(global_buffer.strides[d] for d in outer), *(shared_strides[d] for d in outer if shared_strides)]
    for candidate in (16 // size, 8 // size, 4 // size, 1):
        if candidate < 1 or fp.extents[inner] % candidate or \
                (limits and (isinstance(limits[inner], Affine) or limits[inner] % candidate)):
            continue
        if all(x % candidate == 0 for x in (*moves, *rows)):
            return candidate
    return 1


# -- using the caches ----------------------------------------------------------------------------


def fill(caches: tuple[SharedCache, ...], at: str | None, as_expr) -> tuple[Stmt, ...]:
    """Before the serial loop ``at`` (None: at the innermost level), for the caches placed there
    without a carrier (but output caches of arrays no statement reads, written whole first, and
    scratch tiles):
    barrier, the copies, barrier (cp.async copies with one stage: commit and wait for all before
    the second barrier)."""
    placed = [c for c in caches if c.at == at and c.carrier is None]
    here = [c for c in placed if not (c.unread or c.scratch)]
    if not here:  # output tiles written whole: only the drain of the tile before must be done reading
        return (Barrier("the tile before is back in global memory"),) if placed else ()
    tma = [c for c in here if c.tma is not None]
    here = [c for c in here if c.tma is None]
    asynchronous = bool(here) and (here[0].pipeline == "async" or here[0].copy_async)
    copies = [_copy(c, c.origin, as_expr, asynchronous) for c in here]
    wait = (AsyncCommit(), AsyncWait(0)) if asynchronous else ()
    landed = (Barrier(f"the cached tiles of {_names(here)} are in shared memory"),) if here else ()
    return (Barrier("the previous tiles are no longer read"), *_tma_issue(tma, as_expr), *copies, *wait,
            *_tma_wait(tma), *landed)


def drain(caches: tuple[SharedCache, ...], at: str | None, block: tuple[int, int, int], as_expr) -> tuple[Stmt, ...]:
    """After the serial loop ``at`` (None: after the innermost statements), for the caches of
    written arrays placed there (but scratch tiles): a barrier, then the block writes each tile back (thread t
    the elements t, t + threads, ...; past the array's end, none)."""
    stmts: list[Stmt] = []
    for c in caches:
        if not (c.written and c.at == at) or c.scratch:
            continue
        shape = c.tile_shape
        e = Var(f"{c.array}_element")
        place = [Binary("%", Binary("/", e, Const(math.prod(shape[d + 1:]))), Const(n)) if d else
                 Binary("/", e, Const(math.prod(shape[1:]))) for d, n in enumerate(shape)]
        target = tuple(Binary("+", as_expr(o), p) for o, p in zip(c.origin, place))
        store: Stmt = Store(c.array, target, Load(c.buffer.name, tuple(place), c.buffer.dtype))
        if c.limits:
            store = If(all_of(Binary("<", t, extent_expr(n)) for t, n in zip(target, c.limits)), (store,),
                       "inside what the nest reaches of the array")
        stmts += [Barrier(f"the block's writes to {c.array}'s tile are done"),
                  Loop(e.name, flat_thread(block), Const(math.prod(shape)), math.prod(block), (store,),
                       comment=f"{c.array}'s tile back to global memory")]
    return tuple(stmts)


def flat_thread(block: tuple[int, int, int]) -> Expr:
    """The thread's number in the block (x fastest)."""
    bx, by, _ = block
    inner = Binary("+", Var("threadIdx.y"), Binary("*", Const(by), Var("threadIdx.z")))
    return Binary("+", Var("threadIdx.x"), Binary("*", Const(bx), inner))


def first_thread() -> Expr:
    """The block's thread (0, 0, 0)."""
    return Binary("&&", Binary("==", Var("threadIdx.x"), Const(0)),
                  Binary("&&", Binary("==", Var("threadIdx.y"), Const(0)), Binary("==", Var("threadIdx.z"), Const(0))))


def _tma_issue(caches: list[SharedCache], as_expr) -> tuple[Stmt, ...]:
    """One thread asks TMA for each tile (the bytes its barrier's phase then waits for)."""
    if not caches:
        return ()
    issue: list[Stmt] = []
    for c in caches:
        issue += [MbarrierArrive(c.barrier, Const(0), c.buffer.nbytes, f"the bytes of {c.array}'s tile"),
                  TmaLoad(c.tma.name, c.buffer.name, tuple(Const(0) for _ in c.origin),
                          tuple(as_expr(o) for o in c.origin), c.barrier, Const(0),
                          f"cache of {c.array} for the loops at and inside {c.index}")]
    return (If(first_thread(), tuple(issue), "one thread issues the TMA copies"),)


def _tma_wait(caches: list[SharedCache]) -> tuple[Stmt, ...]:
    """Every thread waits for the tiles' phases, then counts them."""
    out: list[Stmt] = []
    for c in caches:
        phase = Load(c.phase, (Const(0),), ScalarType.int32)
        out += [MbarrierWait(c.barrier, Const(0), phase, f"the tile of {c.array} has landed"),
                Store(c.phase, (Const(0),), Binary("-", Const(1, ScalarType.int32), phase, ScalarType.int32))]
    return tuple(out)


def tma_setup(caches: tuple[SharedCache, ...]) -> tuple[Stmt, ...]:
    """At the kernel's start, for the caches TMA fills: their barriers (one arrival and the
    tile's bytes per phase) and each thread's phase counter."""
    tma = [c for c in caches if c.tma is not None]
    if not tma:
        return ()
    init = tuple(MbarrierInit(c.barrier, Const(0), 1) for c in tma)
    counters: list[Stmt] = []
    for c in tma:
        counters += [PrivateArray(c.phase, ScalarType.int32, (1,)),
                     Store(c.phase, (Const(0),), Const(0, ScalarType.int32))]
    return (If(first_thread(), (*init, Fence("mbarrier_init")), "one thread sets up the TMA barriers"),
            *counters, Barrier("the TMA barriers are set up"))


def tma_buffers(caches: tuple[SharedCache, ...]) -> tuple[SharedBuffer, ...]:
    return tuple(SharedBuffer(c.barrier, ScalarType.uint64, (1,), (1,)) for c in caches if c.tma is not None)


def _copy(c: SharedCache, origin, as_expr, asynchronous: bool, slot: Expr | None = None,
          comment: str = "") -> Stmt:
    """The block copy of a tile; a tile of rank over 2 is copied one 2-D slice at a time (a loop
    per leading dimension), slices past the array's end filled with zeros."""
    target = (slot,) if c.ring > 1 else ()
    source = [as_expr(o) for o in origin]
    valid = list(_valid(c, origin, as_expr))
    lead = len(c.tile_shape) - 2
    inner_target = [Const(0) for _ in c.origin]
    for d in range(lead):
        p = Var(f"{c.array}_slice{d}")
        source[d], inner_target[d] = Binary("+", source[d], p), p
        if valid:  # rows of a slice past the end: 0 (min(max(valid - p, 0), 1) is 1 inside, 0 past)
            inside = Binary("min", Binary("max", Binary("-", valid[d], p), Const(0)), Const(1))
            valid[-2] = Binary("*", valid[-2], inside)
    copy: Stmt = BlockCopy(c.array, tuple(source), c.buffer.name, (*target, *inner_target),
                           c.tile_shape[max(lead, 0):], c.vector, c.strategy, asynchronous,
                           comment or f"cache of {c.array} for the loops at and inside {c.index}",
                           tuple(valid[max(lead, 0):]), c.axes)
    for d in reversed(range(lead)):
        copy = Loop(f"{c.array}_slice{d}", Const(0), Const(c.tile_shape[d]), 1, (copy,),
                    comment=f"the tile of {c.array} one 2-D slice at a time" if d == 0 else "")
    return copy


def _valid(c: SharedCache, origin: tuple[Affine, ...], as_expr) -> tuple[Expr, ...]:
    """For a tile that may reach past its array, the elements inside per dimension
    (``extent - origin``); () for tiles always inside."""
    if not c.limits:
        return ()
    return tuple(Binary("-", extent_expr(n), as_expr(o)) for n, o in zip(c.limits, origin))


def _names(caches) -> str:
    return ", ".join(c.array for c in caches)


@dataclass(frozen=True)
class Pipeline:
    """Statements a pipeline adds around its carrier loop and at the ends of its body."""

    before: tuple[Stmt, ...] = ()
    head: tuple[Stmt, ...] = ()
    tail: tuple[Stmt, ...] = ()
    after: tuple[Stmt, ...] = ()


def pipeline(caches: tuple[SharedCache, ...], carrier, facts, as_expr) -> Pipeline:
    """The pipeline (if any) that runs along the serial loop ``carrier`` (a LoopSpec)."""
    here = [c for c in caches if c.carrier == carrier.name]
    if not here:
        return Pipeline()
    loop = facts.loop(carrier.name)
    if here[0].pipeline == "registers":
        return _registers(here, carrier, loop, as_expr)
    return _ring(here, carrier, loop, as_expr)


def _shifted(c: SharedCache, carrier: str, value: Affine) -> tuple[Affine, ...]:
    """The tile's origin with the carrier loop at ``value``."""
    return tuple(o.substitute({carrier: value}) for o in c.origin)


def _ahead(carrier, distance: int, loop) -> Expr:
    """``carrier + distance * step < stop``: that iteration exists."""
    return Binary("<", Binary("+", Var(carrier.name), Const(distance * carrier.step)),
                  extent_expr(loop.stop(carrier.end)))


def _registers(caches, carrier, loop, as_expr) -> Pipeline:
    k = carrier.name
    first = Affine((), loop.first)
    next_tile = Affine(((k, 1),), carrier.step)
    before = (
        *(Staging(f"{c.array}_staged", c.buffer.dtype, c.tile_shape, c.vector, c.strategy, c.axes)
          for c in caches),
        Barrier("the previous tiles are no longer read"),
        *(_copy(c, _shifted(c, k, first), as_expr, False, comment=f"the first tile of {c.array}")
          for c in caches),
        Barrier(f"the first tiles of {_names(caches)} are in shared memory"),
    )
    head = (If(_ahead(carrier, 1, loop), tuple(
        StageLoad(f"{c.array}_staged", c.array, tuple(as_expr(o) for o in _shifted(c, k, next_tile)),
                  valid=_valid(c, _shifted(c, k, next_tile), as_expr))
        for c in caches), f"prefetch: the next tiles of {_names(caches)} into registers"),)
    tail = (
        Barrier(f"every thread is done with this iteration's tiles of {_names(caches)}"),
        If(_ahead(carrier, 1, loop), tuple(
            StageStore(f"{c.array}_staged", c.buffer.name, tuple(Const(0) for _ in c.origin))
            for c in caches), "the registers hold the next tiles: into shared memory"),
        Barrier(f"the next tiles of {_names(caches)} are in shared memory"),
    )
    return Pipeline(before, head, tail)


def stage_var(carrier: str) -> str:
    return f"{carrier}_stage"


def _ring(caches, carrier, loop, as_expr) -> Pipeline:
    k, stages = carrier.name, caches[0].stages
    stage = stage_var(k)
    before: list[Stmt] = [Barrier("the previous tiles are no longer read")]
    for s in range(stages - 1):
        at = Affine((), loop.first + s * carrier.step)
        copies = [_copy(c, _shifted(c, k, at), as_expr, True, Const(s),
                        f"stage {s}: the tile of {c.array} for {k} = {at.const}") for c in caches]
        if not loop.fixed:  # a loop to a run-time size: the stage's iteration exists where the size reaches it
            before.append(If(Binary("<", Const(at.const), extent_expr(loop.end)), tuple(copies),
                             f"{k} = {at.const} is an iteration"))
        elif at.const <= loop.last:
            before += copies
        before.append(AsyncCommit())
    iteration: Expr = Var(k) if loop.first == 0 else Binary("-", Var(k), Const(loop.first))
    if carrier.step != 1:
        iteration = Binary("/", iteration, Const(carrier.step))
    ahead = Affine(((k, 1),), (stages - 1) * carrier.step)
    slot = Binary("%", Binary("+", Var(stage), Const(stages - 1)), Const(stages))
    head = (
        Let(stage, Binary("%", iteration, Const(stages)), f"the ring buffer that holds this {k}'s tiles"),
        AsyncWait(stages - 2),
        Barrier(f"this iteration's tiles of {_names(caches)} have landed; the buffer refilled next "
                "is no longer read"),
        If(_ahead(carrier, stages - 1, loop), tuple(
            _copy(c, _shifted(c, k, ahead), as_expr, True, slot,
                  f"the tile of {c.array} {stages - 1} iteration(s) ahead") for c in caches)),
        AsyncCommit(),
    )
    return Pipeline(tuple(before), head, (), (AsyncWait(0),))


def redirect(expr: Expr, caches: tuple[SharedCache, ...], as_expr) -> Expr:
    """Reads of cached arrays go to the shared copies, subscripts relative to the footprint."""
    by_array = {c.array: c for c in caches}

    def visit(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in by_array:
            c = by_array[e.buffer]
            index = relative(e.index, c.origin, as_expr)
            if c.ring > 1:
                index = (Var(stage_var(c.carrier)), *index)
            return Load(c.buffer.name, index, e.dtype)
        return e

    return map_expr(expr, visit)


def redirect_store(store: Store, caches: tuple[SharedCache, ...], as_expr) -> Store:
    """A write of an array cached in shared memory goes to its tile."""
    for c in caches:
        if c.written and store.buffer == c.array:
            return dataclasses.replace(store, buffer=c.buffer.name, index=relative(store.index, c.origin, as_expr))
    return store


def relative(index: tuple[Expr, ...], origin: tuple[Affine, ...], as_expr) -> tuple[Expr, ...]:
    """Subscripts of an access relative to a cached tile's first element."""
    return tuple(as_expr(Affine.of(i).plus(o.scale(-1))) for i, o in zip(index, origin))


def rebase_tiles(model, tm: tensor.TensorMatch, caches: tuple[SharedCache, ...]) -> tensor.TensorMatch:
    """Tensor-core operands read from their shared copies: origins relative to the footprint,
    strides of the shared buffer; the tiles must stay aligned as the family needs (wmma), or
    are marked for ldmatrix where they are aligned for it (mma.sync)."""
    by_array = {c.array: c for c in caches}
    tensor.check_operands(model, tm, set(by_array))
    changes = {}
    for role in ("a", "b"):
        operand = getattr(tm, role)
        if operand.buffer in by_array:
            changes[role] = _rebase(model, role.upper(), operand, by_array[operand.buffer], tm)
    return dataclasses.replace(tm, **changes) if changes else tm


def _rebase(model, role, operand: tensor.Operand, cache: SharedCache, tm: tensor.TensorMatch) -> tensor.Operand:
    here = f"cache({cache.array}, index={cache.index}, location=SHARED)"
    family = tm.instructions
    strides = cache.buffer.strides[1:] if cache.ring > 1 else cache.buffer.strides
    over_loops = tuple(s.plus(o.scale(-1)) for s, o in zip(operand.subscripts_over_loops, cache.origin))
    origin = tuple(s.plus(o.scale(-1)) for s, o in zip(operand.subscripts, cache.origin))
    m, n, k = model.tensorize.loops
    rows, cols = (m, k) if role == "A" else (k, n)

    def linear(loop: str) -> int:
        return sum(st * sub.coeff(loop) for st, sub in zip(strides, over_loops)) * model.loop(loop).step

    row_stride, col_stride = linear(rows), linear(cols)
    size = cache.buffer.dtype.size
    ld = row_stride if col_stride == 1 else col_stride
    if 1 not in (row_stride, col_stride) or (family.leading_bytes and (ld * size) % family.leading_bytes):
        raise CacheError(here, f"tiles of {cache.array} in shared memory have strides {row_stride} and "
                               f"{col_stride}; tensor-core loads need one of 1 and the other a multiple of "
                               f"{family.leading_bytes} bytes", loops=(cache.index,))
    what = (f"{family.name} {model.tensorize.mma_shape.name}: {cache.array}'s tiles in shared memory "
            f"(strides {row_stride}, {col_stride})")
    why = family.operand_align and tensor.misalignment(model, what, strides, size, origin, family.operand_align)
    if why:
        other = "FIRST_MAJOR" if col_stride != 1 else "LAST_MAJOR"
        raise CacheError(here, f"{why}; a layout={other} cache or another mma_shape may align them",
                         loops=(cache.index,))
    ldmatrix = (family.layouts is not None and (ld * size) % LDMATRIX_ROW_BYTES == 0
                and not tensor.misalignment(model, "", strides, size, origin, LDMATRIX_ROW_BYTES)
                and ldmatrix_plan(_layout(model, family, tm, role), row_stride, col_stride) is not None)
    phase = _row_phase(model, cache.buffer, strides, origin, operand.pass_shift)
    shift = operand.pass_shift
    if cache.ring > 1:  # the ring buffer of this iteration comes first
        origin = (Affine(((stage_var(cache.carrier), 1),)), *origin)
        over_loops = (Affine(((stage_var(cache.carrier), 1),)), *over_loops)
        shift = (Affine(()), *shift) if shift else shift
    return dataclasses.replace(operand, buffer=cache.buffer.name, subscripts=origin, row_stride=row_stride,
                               col_stride=col_stride, subscripts_over_loops=over_loops, pass_shift=shift,
                               ldmatrix=ldmatrix, row_phase=phase)


SWIZZLE_PERIOD = 8  # rows after which a swizzled tile's XOR pattern repeats (schedc.instructions)


def _row_phase(model, buffer: SharedBuffer, strides, origin, shift) -> int | None:
    """The stored row of every tile's origin modulo the swizzle period, when it is the same for
    all tiles (then a lane's swizzled address is a constant offset from the tile's row): each
    loop moves it, and each pass shifts it, by a multiple of the period."""
    if not buffer.swizzle:
        return None
    row = origin[list(strides).index(buffer.swizzle // buffer.dtype.size)]
    moves = [c * model.loop(name).step for name, c in row.terms]
    moves += [sub.const for sub in shift[-len(origin):]] if shift else []
    if any(m % SWIZZLE_PERIOD for m in moves):
        return None
    return (row.const + sum(c * model.loop(name).begin for name, c in row.terms)) % SWIZZLE_PERIOD


LDMATRIX_ROW_BYTES = 16  # ldmatrix reads 16-byte rows at 16-byte aligned addresses


def _layout(model, family, tm: tensor.TensorMatch, role: str):
    use = "matrix_a" if role == "A" else "matrix_b"
    return family.tile_layout(use, model.tensorize.mma_shape.mnk, tm.precision)
