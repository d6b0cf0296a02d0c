"""Hopper pipelines: wgmma products on operand tiles that TMA copies into a ring of shared
buffers, synchronised by mbarriers, optionally warp-specialized.

A plan tensorized with a wgmma shape (``M64xN{n}xK16_B1``) keeps each warpgroup's 64 x n tiles
of C in registers across the k loop and reads A and B from shared memory through matrix
descriptors. Its SHARED caches of A and B become TMA tiles (``plan_tma``): the footprint of the
block, stored as 128-, 64- or 32-byte swizzled rows (one TMA box per row chunk), in a ring of
``stages`` buffers. ``lower_warpgroups`` writes the tile program, which the ``specialize`` and
``pipeline`` passes (``pipeline.py``) turn into the kernel:

- one thread sets up a *full* and an *empty* mbarrier per stage;
- tile ``t`` of the pipelined loops lives in stage ``t % stages``; its copy waits until the
  stage's empty barrier completed the phase of the tile before it there (parity
  ``(t / stages + 1) % 2``), raises the full barrier's expected bytes and issues the boxes;
- the consumers wait for the full barrier's phase ``(t / stages) % 2``, issue the tile's
  wgmma products, commit them, wait until only this group is in flight, and free the previous
  tile's stage (arrive on its empty barrier);
- warp-specialized (``plan.warp_specialize``; AUTO: on): one extra producer warpgroup issues
  every copy while the others compute, registers moved to the consumers by ``setmaxnreg``;
  otherwise thread 0 issues the copy ``stages - 1`` tiles ahead inside the consumers' loop;
- with consumer teams (``warp_specialize(teams=T)``, persistent grids): team ``g`` takes the block's
  work items ``g``, ``g + T``, ...; a stage's empty barrier counts one team's threads, and a turn
  barrier per team makes the teams issue their products in the ring's order (``Ring.turn``);
- clustered (``plan.cluster``): a tile the cluster's blocks share is copied in parts, each block
  multicasting its part into every block's stage; one thread per consumer warp frees a stage in
  every block of the cluster; cluster barriers follow the set-up and end the kernel;
- C's tiles leave by TMA store where they can, and come in by TMA where the warpgroups' whole
  tiles fit beside the ring (``epilogue``: swizzled slots in shared memory, chunks of columns).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from .. import tma
from ..errors import CacheError, PlanError
from ..instructions import wgmma_accumulator
from ..ir.affine import Affine
from ..ir.kernel import (
    WORK,
    Barrier,
    Binary,
    ClusterSync,
    Const,
    Expr,
    Fence,
    Fragment,
    FragmentLoad,
    FragmentMma,
    If,
    Kernel,
    Let,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    Role,
    Roles,
    SharedBuffer,
    Stmt,
    StructParam,
    TensorMap,
    TmaLoad,
    Var,
    WarpgroupCommit,
    WarpgroupFence,
    WarpgroupWait,
    all_of,
    launch_registers,
    shared_layout,
)
from ..ir.types import ScalarType
from ..ir.walk import subexpressions, substitute, walk_statements
from ..targets import CopyEngine, MemorySpace
from . import batched, cache, chained, epilogue, fused, masked, operands, tensor
from .launch import WARPGROUP, Launch, Persistent, assemble, persistent_loop, split_coordinates
from .registers import PRODUCER_THREADS, role_registers

WARP = 32


@dataclass(frozen=True)
class TmaCache:
    """An operand tile that TMA copies: the block's footprint of ``array`` at ``index``, stored
    as ``chunks`` boxes of ``outer`` rows of ``chunk`` elements (``swizzle`` bytes each)."""

    array: str
    index: str
    buffer: SharedBuffer  # (stages, chunks, outer, chunk)
    origin: tuple[Affine, ...]  # the footprint's first element (array dimensions)
    inner: int  # the array dimension that is contiguous (the boxes' rows run along it)
    map: StructParam
    stages: int
    multicast: int = 1  # blocks of the cluster that share the tile; each copies 1/multicast of it
    split: str = ""  # how the tile is shared out: "chunks" (whole boxes) or "rows" (of every box)
    resident: bool = False  # the same tile for every tile of the kernel: copied once, at its start
    # the same tile for every tile of a work item (it moves with loops bound to blocks alone): copied
    # at each work item's start (``item_copies``); resident too in the operands' descriptors
    item: bool = False

    @property
    def chunks(self) -> int:
        return self.buffer.shape[1]

    @property
    def chunk(self) -> int:
        return self.buffer.shape[3]

    @property
    def outer_extent(self) -> int:
        return self.buffer.shape[2]

    @property
    def stage_bytes(self) -> int:
        return math.prod(self.buffer.shape[1:]) * self.buffer.dtype.size


def is_warpgroup_plan(tiles: tensor.TensorMatch | None) -> bool:
    return tiles is not None and tiles.instructions.issued_by == "warpgroup"


# -- the caches --------------------------------------------------------------------------------


def ring_of(caches) -> tuple[TmaCache, ...]:
    """The caches that stream through the mbarrier ring (not the resident ones)."""
    return tuple(c for c in caches if not c.resident)


def plan_tma(model, facts, tiles: tensor.TensorMatch, held: bool = False) -> tuple[TmaCache, ...]:
    """Check the SHARED caches of a wgmma plan and describe their TMA tiles: those at the
    innermost cache index stream through the ring; one at a loop outside it whose tile never
    moves is resident (copied once, at the kernel's start). ``held``: C is a chain's first
    product, in registers alone (its rows and columns past the nest, another head's, are never
    stored: only k's padding is checked here; what its padded columns meet in the second product is
    ``chained.zero_past``'s)."""
    for binding in model.bindings:
        if binding.unit.level in ("warp", "thread"):
            raise PlanError(tensor.where(model), f"{model.tensorize.mma_shape.name} is a warpgroup's tile: bind the "
                                                 f"loops over tiles to WARPGROUP_X/WARPGROUP_Y, not "
                                                 f"{binding.unit.name} ({', '.join(binding.loops)})",
                            loops=binding.loops)
    specs = [spec for spec in model.caches if spec.location is MemorySpace.SHARED]
    operands = {tiles.a.buffer: "A", tiles.b.buffer: "B"}
    for role, operand in (("A", tiles.a), ("B", tiles.b)):
        if not any(spec.array == operand.buffer for spec in specs):
            raise PlanError(tensor.where(model), f"wgmma reads {role} ({operand.buffer}) from shared memory: "
                                                 f"plan.cache({operand.buffer}, index=<the loop inside k>, "
                                                 "location=SHARED)", loops=model.tensorize.loops)
    caches = _residents(model, facts, [plan_one(model, spec, tiles, operands) for spec in specs])
    # TMA fills zeros past each operand's reach; a chain's first C lives in registers alone, its rows
    # and columns past the nest never stored (the columns set to 0 or -inf before the second product
    # reads them: chained.zero_past, fused._edge_mask): only the padding of k is checked
    tensor.check_padding(model, _held(model, facts, tiles) if held else tiles, set(operands))
    ring = ring_of(caches)
    for c in ring[1:]:
        if (c.index, c.stages) != (ring[0].index, ring[0].stages):
            raise CacheError(_here(model, c.array, c.index), f"{ring[0].array} is cached at {ring[0].index} with "
                                                      f"{ring[0].stages} stage(s) and {c.array} at {c.index} with "
                                                      f"{c.stages}: the operands of wgmma share one pipeline",
                             loops=(c.index,))
    if model.clustering is not None:
        caches = _share(model, caches)
    _check_budget(model, caches)
    return tuple(caches)


def _residents(model, facts, caches: list[TmaCache]) -> list[TmaCache]:
    """The caches at a loop outside the innermost cache index, marked resident: their tile must
    be the same for every tile of the kernel (the loops it moves with take one value each)."""
    names = [lp.name for lp in model.loops]
    index = max((c.index for c in caches), key=names.index)
    inner = next(c for c in caches if c.index == index)
    out = []
    for c in caches:
        if c.index == index:
            out.append(c)
            continue
        single = {n: Affine((), facts.loop(n).first) for n in names if facts.loop(n).fixed
                  and facts.loop(n).extent == 1}
        origin = tuple(o.substitute(single) for o in c.origin)
        moving = sorted({v for o in origin for v, _ in o.terms})
        blocks = {n for b in model.bindings if b.unit.level == "block" for n in b.loops}
        if moving and set(moving) <= blocks and c.stages == 1 and model.clustering is None and model.teams == 1:
            out.append(dataclasses.replace(c, origin=origin, resident=True, item=True))  # one tile a work item
            continue
        if moving or c.stages > 1 or model.clustering is not None:
            why = (f"its tile moves with {', '.join(moving)}" if moving else
                   f"it has {c.stages} stages" if c.stages > 1 else "the plan shares tiles in a cluster")
            raise CacheError(_here(model, c.array, c.index), f"{inner.array} is cached at {index} and {c.array} at "
                                                      f"{c.index}: the operands of wgmma share one pipeline, or one "
                                                      f"tile that never moves is copied once (resident), or one "
                                                      f"that moves with loops bound to blocks alone once a work item "
                                                      f"(one stage, one team, no cluster), and {why}: "
                                                      f"cache {c.array} at {index}", loops=(c.index,))
        out.append(dataclasses.replace(c, origin=origin, resident=True))
    return out


def _here(model, array: str, index: str) -> str:
    """The cache call as the script wrote it: with ``engine=`` only where it names one."""
    spec = next((c for c in model.caches if c.array == array and c.location is MemorySpace.SHARED), None)
    engine = "" if spec is None or spec.engine is CopyEngine.AUTO else f", engine={spec.engine.name}"
    return f"cache({array}, index={index}, location=SHARED{engine})"


def _by_tma(spec) -> str:
    """TMA, said as the script chose it: named, or the engine schedc takes where none is given."""
    if spec.engine is CopyEngine.TMA:
        return "TMA"
    return "TMA (no engine given: schedc fills a wgmma plan's operand tiles by TMA)"


def plan_one(model, spec, tiles: tensor.TensorMatch, operands: dict[str, str]) -> TmaCache:
    here = _here(model, spec.array, spec.index)
    if spec.array not in operands:
        raise CacheError(here, f"{spec.array} is not an operand of the wgmma product; with wgmma, SHARED caches "
                               f"hold A ({tiles.a.buffer}) and B ({tiles.b.buffer})", loops=(spec.index,))
    if spec.engine is CopyEngine.THREADS:
        raise CacheError(here,
                         "wgmma reads its operands in the swizzled layout TMA writes; copies by the block's "
                         "threads into it are not built: use engine=TMA (or AUTO)", loops=(spec.index,))
    if spec.order:
        raise CacheError(here, "layout= other than the array's: wgmma reads the tile as TMA copies it, in the "
                               "array's layout (a k-major or mn-major descriptor each way): leave layout unset",
                         loops=(spec.index,))
    if spec.pipeline == "registers":
        raise CacheError(here, "a register double buffer is filled by the block's threads; TMA fills a ring "
                               "of shared buffers: use stages=N", loops=(spec.index,))
    if spec.index in model.tensorize.loops or model.binding_of(spec.index) is not None:
        raise CacheError(here, f"{spec.index} is not a serial loop; cache at a loop that every thread runs",
                         loops=(spec.index,))
    names = [lp.name for lp in model.loops]
    position = names.index(spec.index)
    fixed = tuple(n for i, n in enumerate(names)
                  if (i < position and model.binding_of(n) is None)
                  or (model.binding_of(n) is not None and model.binding_of(n).level == "block"))
    fp = cache.footprint(model, spec, here, fixed, tiles.guards)  # the whole tiles the wgmmas read
    if not fp.starts_inside:
        raise CacheError(here, f"the footprint {fp} starts before the first element of {spec.array} for some "
                               "tiles", loops=(spec.index,))
    array = model.buffer(spec.array)
    if len(fp.extents) != 2:
        raise CacheError(here, f"{_by_tma(spec)} copies 2-D tiles of wgmma's operands; the footprint {fp} of "
                               f"{spec.array} ({' x '.join(map(str, array.shape))}) has rank {len(fp.extents)}. "
                               f"Instead: {batched.ways_out(model, tiles)}", loops=(spec.index,))
    size = array.dtype.size
    inner = array.strides.index(1) if 1 in array.strides else -1
    outer = 1 - inner
    if inner < 0:
        raise CacheError(here, f"{spec.array} has strides {list(array.strides)}; {_by_tma(spec)} needs one contiguous "
                               "dimension", loops=(spec.index,))
    pitch = array.strides[outer] * size
    if pitch % tma.GLOBAL_ALIGN:
        raise CacheError(here, f"{spec.array}'s rows are {pitch} bytes apart; {_by_tma(spec)} needs a multiple of "
                               f"16 bytes (pad the leading dimension to a multiple of {16 // math.gcd(16, size)} "
                               "elements)",
                         loops=(spec.index,))
    row_bytes = fp.extents[inner] * size
    swizzle = tma.swizzle_for(row_bytes) or (tma.SWIZZLES[0] if row_bytes % tma.GLOBAL_ALIGN == 0 else 0)
    if not swizzle:
        raise CacheError(here, f"the tile's rows are {fp.extents[inner]} elements ({row_bytes} bytes) along "
                               f"{spec.array}'s contiguous dimension {inner}; TMA's boxes take rows of a multiple "
                               "of 16 bytes", loops=(spec.index,))
    if fp.extents[outer] > tma.BOX_LIMIT:
        raise CacheError(here, f"the tile has {fp.extents[outer]} rows along dimension {outer}; a TMA box has at "
                               f"most {tma.BOX_LIMIT}", loops=(spec.index,))
    chunk = swizzle // size
    chunks = -(-row_bytes // swizzle)  # whole boxes: the last one's surplus columns are copied, never read
    stages = spec.stages if spec.pipeline == "async" else 1
    shape = (stages, chunks, fp.extents[outer], chunk)
    strides = (chunks * fp.extents[outer] * chunk, fp.extents[outer] * chunk, chunk, 1)
    buffer = SharedBuffer(f"{spec.array}_shared", array.dtype, shape, strides, swizzle, align=1024)
    box = (fp.extents[outer], chunk) if inner == 1 else (chunk, fp.extents[outer])
    tmap = StructParam(f"{spec.array}_map", "tensor_map", TensorMap(spec.array, box, array.dtype, swizzle, fp.bounds))
    return TmaCache(spec.array, spec.index, buffer, fp.origin, inner, tmap, stages)


def cluster_where(model) -> str:
    unit, size = model.clustering
    return f"cluster(size={size}, unit={unit.name})"


def _share(model, caches: list[TmaCache]) -> list[TmaCache]:
    """plan.cluster: the tiles the cluster's blocks have in common (their origin does not move
    along the clustered unit's loops), each split into ``size`` parts that the blocks multicast.
    (The cluster's shape against the grid is checked with the launch: ``launch.cluster_shape``.)"""
    unit, size = model.clustering
    where = cluster_where(model)
    binding = next(b for b in model.bindings if b.unit is unit)  # launch.cluster_shape checked it exists
    shared = [c for c in caches if not any(o.coeff(n) for o in c.origin for n in binding.loops)]
    if not shared:
        moving = ", ".join(f"{c.array}'s moves with " + ", ".join(n for n in binding.loops
                                                                   if any(o.coeff(n) for o in c.origin))
                           for c in caches)
        raise PlanError(where, f"no operand tile is the same for neighbouring blocks along {unit.name} ({moving}): "
                               "there is nothing to multicast; cluster along the other block unit",
                        loops=binding.loops)
    out = []
    for c in caches:
        if c not in shared:
            out.append(c)
            continue
        rows = c.outer_extent // size
        atom = 1024 // (c.chunk * c.buffer.dtype.size)  # rows of one 1024-byte swizzle atom
        if c.chunks % size == 0:
            out.append(dataclasses.replace(c, multicast=size, split="chunks"))
        elif c.outer_extent % size == 0 and rows % atom == 0:
            spec = c.map.spec
            box = (rows, spec.box[1]) if c.inner == 1 else (spec.box[0], rows)
            tmap = dataclasses.replace(c.map, spec=dataclasses.replace(spec, box=box))
            out.append(dataclasses.replace(c, multicast=size, split="rows", map=tmap))
        else:
            raise CacheError(_here(model, c.array, c.index), f"{where}: {c.array}'s tile is {c.chunks} box(es) of "
                                                      f"{c.outer_extent} rows; {size} blocks share it out by whole "
                                                      f"boxes or by groups of {atom} rows (1024-byte swizzle atoms) "
                                                      f"of each box, and neither divides by {size}",
                             loops=(c.index,))
    return out


def _check_budget(model, caches: list[TmaCache]) -> None:
    buffers = [c.buffer for c in caches] + list(_barriers(ring_of(caches)[0].stages)) + list(_turns(model.teams))
    _, total = shared_layout(buffers)
    gpu = model.gpu
    if total > gpu.shared_memory_max:
        names = ", ".join(f"{c.array} {c.buffer.nbytes}" for c in caches)
        c = caches[-1]
        raise CacheError(_here(model, c.array, c.index),
                         f"{c.stages} stage(s) of the TMA tiles need {total} bytes of shared memory per block "
                         f"({names}, barriers); {gpu.name} allows {gpu.shared_memory_max}: use fewer stages or "
                         "smaller tiles",
                         loops=(c.index,))


FULL, EMPTY = "full", "empty"  # a ring stage's barriers: its tile has landed / its consumers released it


def _barriers(stages: int) -> tuple[SharedBuffer, SharedBuffer]:
    return (SharedBuffer("full", ScalarType.uint64, (stages,), (1,)),
            SharedBuffer("empty", ScalarType.uint64, (stages,), (1,)))


TURN = "turn"  # the consumer teams' turn barriers: team g's turn completes a phase of turn[g]


def _turns(teams: int) -> tuple[SharedBuffer, ...]:
    return (SharedBuffer(TURN, ScalarType.uint64, (teams,), (1,)),) if teams > 1 else ()


# -- the kernel --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopShape:
    """The loops of a wgmma plan around its tile, outermost first."""

    outer: tuple[str, ...]  # serial loops outside the loop C is kept across (C's tiles change)
    pipelined: tuple[str, ...]  # serial loops from the one C is kept across to the carrier
    steps: tuple[str, ...]  # the cache index and the serial loops inside it (unrolled)
    blocked: tuple[str, ...]  # serial loops inside that index C (one accumulator per value)


@dataclass(frozen=True)
class WarpRoles:
    """A wgmma plan's block, as the ``roles`` pass decides it: the loops around its tile, whether a
    producer warpgroup issues the TMA copies (warp specialization), and the registers each role's
    threads hold after ``setmaxnreg`` (the producer's and the consumers')."""

    shape: LoopShape
    specialized: bool
    producer_registers: int
    consumer_registers: int


def plan_roles(model, tiles: tensor.TensorMatch, caches: tuple[TmaCache, ...], launch: Launch) -> WarpRoles:
    """The block's roles and their registers, refused with the changes that fit where the
    launch or ptxas would refuse them (``registers.role_registers``)."""
    shape = _loops(model, tiles, ring_of(caches)[0])
    return WarpRoles(shape, *role_registers(model, tiles, shape.blocked, launch))


def plan_epilogue(model, tiles: tensor.TensorMatch, caches: tuple[TmaCache, ...], launch: Launch,
                  roles: WarpRoles) -> epilogue.TmaOutput | None:
    """How C's tiles leave (and enter) the block: TMA through shared slots beside the ring, or
    None (the threads store C themselves): ``epilogue.plan_output``."""
    again = [r for r in tiles.reductions if r in roles.shape.outer]
    if model.adds_into and again:
        loops = ", ".join(again)
        raise PlanError("split_k(deterministic=False)", f"{loops} sum{'s' if len(again) == 1 else ''} into C's "
                                                        "fragments outside their cache (plan.cache(C, index=...)): "
                                                        "each pass would add its tile into C by TMA reductions on "
                                                        "top of the passes before; cache C at a loop outside "
                                                        f"{loops}")
    full, empty = _barriers(ring_of(caches)[0].stages)
    tiles_per_group = math.prod(len(tensor._values(model, b)) for b in roles.shape.blocked)
    output = epilogue.plan_output(model, tiles, launch, (*(c.buffer for c in caches), full, empty,
                                                         *_turns(launch.teams), *_resident_barrier(caches, None)),
                                  roles.shape.outer, tiles_per_group)
    if output is None:
        epilogue.not_added(model, model.adds_into, f"which this plan's tiles of {model.adds_into} cannot take")
    return output


def single_valued(as_expr, chain: chained.Chain | None):
    """``as_expr`` with the loops of a chain's second product that take one value at that value."""
    if chain is None:
        return as_expr
    single = chain.single_valued()

    def at(a: Affine) -> Expr:
        return as_expr(a.substitute(single))
    return at


def plan_chain_output(chain: chained.Chain, caches: tuple[TmaCache, ...], launch: Launch,
                      roles: WarpRoles) -> chained.Chain:
    """How a chain's second product's C leaves: by TMA through slots beside the ring and the
    second's B tile (``epilogue.plan_output``), or by the threads."""
    full, empty = _barriers(ring_of(caches)[0].stages)
    ring = (*(c.buffer for c in caches), full, empty, *_resident_barrier(caches, chain), chain.cache.buffer,
            *chained.barriers(chain))
    inner = carried_loops(chain, roles.shape, chain.facts)
    outer = tuple(n for n in roles.shape.outer if n not in inner)  # its C is stored after the carried loops
    output = epilogue.plan_output(chain.model, chain.tiles, launch, ring, outer, 1)
    if output is not None and output.loads:  # the chain loads its C by the threads (before its loop) and stores by TMA
        output = epilogue.plan_output(chain.model, chain.tiles, launch, ring, outer, 1, stores_only=True)
    return dataclasses.replace(chain, output=output)


def check_chain_budget(model, caches: tuple[TmaCache, ...], chain: chained.Chain) -> None:
    """The first product's TMA tiles, their barriers and a chain's second B tile within the
    shared memory a block may hold."""
    buffers = [*(c.buffer for c in caches), *_barriers(ring_of(caches)[0].stages), *_turns(model.teams),
               *_resident_barrier(caches, chain), chain.cache.buffer, *chained.barriers(chain)]
    _, total = shared_layout(buffers)
    if total > model.gpu.shared_memory_max:
        c = chain.cache
        raise CacheError(_here(chain.model, c.array, c.index),
                         f"{c.array}'s tile ({c.buffer.nbytes} bytes) beside the first product's TMA tiles "
                         f"({', '.join(f'{t.array} {t.buffer.nbytes}' for t in caches)}) and their barriers needs "
                         f"{total} bytes of shared memory per block; {model.gpu.name} allows "
                         f"{model.gpu.shared_memory_max}: use fewer stages, smaller tiles, or stream a resident "
                         "operand through the ring", loops=(c.index,))


def lower_warpgroups(model, facts, launch: Launch, tiles: tensor.TensorMatch, caches: tuple[TmaCache, ...],
                     roles: WarpRoles, output: epilogue.TmaOutput | None, chain: chained.Chain | None = None) -> Kernel:
    """The tile program of a wgmma plan: one thread sets up the barriers, and the consumers' loops
    around each tile of C hold, for every tile of the operands, its *fill* (thread 0 waits until
    the stage is free, expects its bytes and issues its TMA boxes), the wait until it has landed,
    the products and the release of the stage; with a ``chain``, each tile's C goes on into the
    second product (``chained``). The ``specialize`` and ``pipeline`` passes make the fills a
    producer warpgroup's or issue them ahead (module docstring)."""
    shape = roles.shape
    enabled, consumer_regs = roles.specialized, roles.consumer_registers
    order = [lp.name for lp in model.loops]

    def as_expr(a: Affine) -> Expr:
        from ..ir.affine import affine_expr

        return affine_expr(a, order)

    streamed = ring_of(caches)
    stages = streamed[0].stages
    consumers, team = launch.threads, launch.team_threads  # a stage's consumers: one team's threads
    block_lets, group_lets = split_coordinates(model, launch)
    cluster = math.prod(launch.cluster)
    ring = make_ring(model, facts, launch, roles, caches)
    # what a consumer thread may hold: ptxas allocates the code after setmaxnreg within its count
    # (pipeline.specialize); the epilogue's hoisted column vectors stay within the launch's share
    # (fused_gemm's 128 x 256 GELU plan spilled 52 bytes with 64 of them beside 128 accumulators)
    budget = consumer_regs if enabled else min(255, launch_registers(consumers, model.blocks_per_sm))
    compiled = launch_registers(consumers + (PRODUCER_THREADS if enabled else 0), model.blocks_per_sm)
    products = _Products(model, tiles, caches, as_expr, budget, output, compiled,
                         chain.online if chain is not None else None).bind(shape, ring)
    stops = _masked_tiles(chain, model, facts, launch, roles)
    block_lets = _longest_first(block_lets, stops, launch)
    parts = _chain(chain, model, shape, ring, single_valued(as_expr, chain), budget, tiles, stops, roles.specialized)
    if parts is not None and model.alternate and chain.carried and consumers // WARPGROUP > 1:
        if not enabled:
            raise PlanError("alternate()", f"the {consumers // WARPGROUP} consumer warpgroups take turns as the "
                                           "consumers' role of a warp-specialized block, a producer warpgroup filling "
                                           "the rings for all of them; this plan has no producer: keep "
                                           "warp_specialize, or leave alternate out")
        _check_turn_ring(facts, shape, streamed)
        parts = chained.alternated(parts, consumers // WARPGROUP)
    inits, copies, landed = _resident_copies(caches, chain)
    inits += chained.inits(chain, team) if chain is not None else ()
    item_shared, item_inits, item_start, item_end = item_copies(caches, ring, as_expr, team)
    inits += item_inits
    setup = (If(Binary("==", Var("threadIdx.x"), Const(0)), (
        *(MbarrierInit(FULL, Const(s), 1) for s in range(stages)),
        *(MbarrierInit(EMPTY, Const(s), team if cluster == 1 else team // WARP * cluster)
          for s in range(stages)),
        *(MbarrierInit(TURN, Const(g), team) for g in range(launch.teams if launch.teams > 1 else 0)),
        *inits,
        *(output.setup() if output is not None else ()),
        Fence("mbarrier_init"), *copies), "one thread sets up the stages' barriers"),
        ClusterSync("the barriers of every block of the cluster are set up") if cluster > 1 else
        Barrier("the barriers are set up"))
    first_turn = parts.start if parts is not None else ()
    consumer = (*group_lets, *landed, *first_turn, *persistent_loop(launch, (*block_lets, *item_start, *_consumer_body(
        model, facts, shape, ring, products, streamed, as_expr, chain=parts,
        carried=carried_loops(chain, shape, facts), stops=stops),
        *item_end), by_team=True),
        *((epilogue.stores_done(),) if output is not None or (chain and chain.output) is not None else ()))
    if launch.teams > 1:  # the teams run apart, meeting at mbarriers: a role of teams
        consumer = (Roles((Role("consumers", 0, consumers, 0, consumer, launch.teams),)),)
    body = (*setup, *consumer)
    if cluster > 1:
        body = (*body, ClusterSync("no block leaves while its peers may still copy into it or arrive on its barriers"))
    buffers = (*(c.buffer for c in caches), *_barriers(stages), *_turns(launch.teams), *item_shared,
               *(output.shared if output is not None else ()), *_resident_barrier(caches, chain),
               *((chain.cache.buffer, *chained.barriers(chain)) if chain is not None else ()),
               *(chain.output.shared if chain is not None and chain.output is not None else ()))
    values = (*(c.map for c in caches), *(output.maps if output is not None else ()),
              *((chain.cache.map,) if chain is not None else ()),
              *(chain.output.maps if chain is not None and chain.output is not None else ()))
    return assemble(model, launch, body, buffers, values, block=(consumers, 1, 1))


def _check_turn_ring(facts, shape: LoopShape, streamed: tuple[TmaCache, ...]) -> None:
    """plan.alternate: a warpgroup's turn takes every tile of the ring that one tile of the first
    product's C multiplies, and the next warpgroup frees those of its own turn before only after
    it (each stage waits for both): the ring must hold them all, or the turns deadlock."""
    if not streamed:
        return
    stages = streamed[0].stages
    loops = [facts.loop(n) for n in shape.pipelined]
    per_tile = math.prod(lp.extent for lp in loops) if all(lp.fixed for lp in loops) else None
    if per_tile is not None and per_tile <= stages:
        return
    names = [c.array for c in streamed]
    arrays = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    count = f"{per_tile} tiles" if per_tile is not None else "a run-time number of tiles"
    raise PlanError("alternate()", f"a consumer warpgroup's turn takes {count} of the ring of {arrays} "
                                   f"({', '.join(shape.pipelined)}) for each tile of the first product, and the "
                                   f"ring holds {stages}: its stages are free again only once the next warpgroup "
                                   f"has taken them in its own turn, so the turns would wait for each other; give "
                                   f"the caches of {arrays} stages={per_tile or 'its tiles'} or more, or wider tiles "
                                   "of k, or leave alternate out")


def _masked_tiles(chain: chained.Chain | None, model, facts, launch: Launch, roles: WarpRoles) -> dict[str, Expr]:
    """The carried loop over a chain's tiles of S ended at the block's last tile with a kept element
    (``masked.tile_stop``): with a producer warpgroup, which runs the same loop, and one work item a
    block (the ring's tiles are then counted from the block's start, whatever the loop's end)."""
    if chain is None or chain.online is None or not chain.online.masks or launch.persistent is not None \
            or not roles.specialized:
        return {}
    several = [n for n in chain.carried if facts.loop(n).fixed and facts.loop(n).extent > 1]
    if len(several) != 1:
        return {}
    stop = masked.tile_stop(chain.online, model, facts, several[0])
    return {several[0]: stop} if stop is not None else {}


def _longest_first(lets: tuple[Let, ...], stops: dict[str, Expr], launch: Launch) -> tuple[Let, ...]:
    """The block-bound loops a masked loop's end grows with, walked backwards over their blocks:
    the blocks with the most tiles start first and the last blocks to start are short (a causal
    attention's query blocks: its diagonal's longest rows first, FlashAttention-3's order)."""
    read = {v.name for stop in stops.values() for v in subexpressions(stop) if isinstance(v, Var)}
    axes = {f"blockIdx.{axis}": (n, launch.grid[n]) for n, axis in enumerate("xyz")}
    out = []
    for let in lets:
        units = {v.name for v in subexpressions(let.value) if isinstance(v, Var) and v.name in axes}
        if let.name in read and len(units) == 1 and isinstance(axes[next(iter(units))][1], int):
            unit = next(iter(units))
            last = Const(axes[unit][1] - 1)
            let = dataclasses.replace(let, value=substitute(let.value, {unit: Binary("-", last, Var(unit))}),
                                      comment=(let.comment + "; " if let.comment else "") +
                                      "the blocks with the most tiles first")
        out.append(let)
    return tuple(out)


def _held(model, facts, tiles: tensor.TensorMatch) -> tensor.TensorMatch:
    """``tiles`` with the nest's guards on its rows and columns kept: the padded iterations left
    are those past k's edge."""
    names = {lp.name for lp in model.loops}
    kept = {model.loop(model.tensorize.loops[0]).dim, model.loop(model.tensorize.loops[1]).dim}
    held = tuple(g for g in facts.guards if g not in (tiles.guards or ())
                 and any(model.loop(v).dim in kept for v in g.affine.variables() if v in names))
    return dataclasses.replace(tiles, guards=(*(tiles.guards or ()), *held)) if held else tiles


def make_ring(model, facts, launch: Launch, roles: WarpRoles, caches: tuple[TmaCache, ...]) -> Ring:
    """The ring of the operands' TMA tiles: its stages over the loops ``roles`` found around the tile."""
    return Ring(model, facts, roles.shape, ring_of(caches)[0].stages, launch.persistent, math.prod(launch.cluster),
                launch.teams, launch.team_threads)


RESIDENT = "resident"  # the resident tiles (copied once, at the kernel's start) have landed


def _resident_barrier(caches, chain: chained.Chain | None) -> tuple[SharedBuffer, ...]:
    if not any(c.resident and not c.item for c in (*caches, *((chain.cache,) if chain is not None else ()))):
        return ()
    return (SharedBuffer(RESIDENT, ScalarType.uint64, (1,), (1,)),)


def _resident_copies(caches, chain: chained.Chain | None) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...],
                                                                  tuple[Stmt, ...]]:
    """The tiles copied once (resident operands, a chain's second B): their barrier's set-up, the
    copies (by the thread that sets up the barriers, once they are fenced) and the consumers'
    wait for them before their first tile (the phase stays complete: no later wait blocks)."""
    tiles = [c for c in (*caches, *((chain.cache,) if chain is not None else ())) if c.resident and not c.item]
    if not tiles:
        return (), (), ()
    copies: list[Stmt] = [MbarrierArrive(RESIDENT, Const(0), sum(c.stage_bytes for c in tiles),
                                         "the bytes of the tiles copied once")]
    for c in tiles:
        copies += tile_boxes(c, Const(0), [Const(o.const) for o in c.origin], RESIDENT, Const(0), " (resident)")
    names = ", ".join(c.array for c in tiles)
    return ((MbarrierInit(RESIDENT, Const(0), 1),), tuple(copies),
            (MbarrierWait(RESIDENT, Const(0), Const(0), f"the tiles copied once ({names}) have landed"),))


ITEM_FULL, ITEM_EMPTY = "item_full", "item_empty"  # a work item's tiles have landed / were read to the end


def item_copies(caches, ring: Ring, as_expr, team: int) -> tuple[tuple[SharedBuffer, ...], tuple[Stmt, ...],
                                                                 tuple[Stmt, ...], tuple[Stmt, ...]]:
    """The tiles copied once a work item (``TmaCache.item``: Q's rows of an attention block): their
    barriers and set-up, and, around the work item's tiles, their fill (thread 0 waits until the
    item before was read to its end, expects the bytes and issues the boxes: ``specialize`` gives
    it to the producer), the consumers' wait, and their release after the item's last product.
    Item ``u`` of the block uses phase ``u % 2``."""
    tiles = [c for c in caches if c.item]
    if not tiles:
        return (), (), (), ()
    parity: Expr = Binary("%", ring.work_item(), Const(2)) if ring.persistent is not None else Const(0)
    boxes: list[Stmt] = []
    for c in tiles:
        boxes += tile_boxes(c, Const(0), [as_expr(o) for o in c.origin], ITEM_FULL, Const(0), " (this work item's)")
    names = ", ".join(c.array for c in tiles)
    fill = If(Binary("==", Var("threadIdx.x"), Const(0)), (
        MbarrierWait(ITEM_EMPTY, Const(0), Binary("-", Const(1), parity),
                     f"the work item before has read its {names} to the end"),
        MbarrierArrive(ITEM_FULL, Const(0), sum(c.stage_bytes for c in tiles),
                       f"the bytes of this work item's {names}"),
        *boxes), f"thread 0 copies this work item's {names}")
    setup = (MbarrierInit(ITEM_FULL, Const(0), 1), MbarrierInit(ITEM_EMPTY, Const(0), team))
    shared = tuple(SharedBuffer(name, ScalarType.uint64, (1,), (1,)) for name in (ITEM_FULL, ITEM_EMPTY))
    return shared, setup, (fill, MbarrierWait(ITEM_FULL, Const(0), parity, f"this work item's {names} have landed")), \
        (MbarrierArrive(ITEM_EMPTY, Const(0), 0, f"this work item's products have read its {names}"),)


def carried_loops(chain: chained.Chain | None, shape: LoopShape, facts) -> tuple[str, ...]:
    """The loops around the first product's tile from the first a chain's C is kept across, in:
    the second's accumulator is set up before them and stored after them (none without such loops)."""
    if chain is None or not chain.carried:
        return ()
    first = min(shape.outer.index(n) for n in chain.carried if n in shape.outer) \
        if any(n in shape.outer for n in chain.carried) else len(shape.outer)
    return tuple(shape.outer[first:])


def _chain(chain: chained.Chain | None, model, shape: LoopShape, ring: Ring, as_expr,
           budget: int, tiles: tensor.TensorMatch, stops: dict[str, Expr],
           specialized: bool = True) -> chained.Statements | None:
    """A chain's second product after each tile of the first (``chained``), its accumulator kept
    across the carried loops: the innermost of the loops around the first's tile (``stops``: a
    masked loop's end in the block, ``_masked_tiles``)."""
    if chain is None:
        return None
    here = chained.where_second(chain)
    blocking = tensor.Blocking(model, shape.blocked)
    combos = blocking.combos(shape.blocked)
    if len(combos) != 1:
        raise PlanError(here, f"the first product's accumulator is register-blocked into {len(combos)} tiles "
                              f"({', '.join(shape.blocked)}); a chain feeds one 64-row tile of it to the second "
                              "product")
    inner = carried_loops(chain, shape, ring.facts)
    if set(chain.carried) - set(inner) or any(ring.facts.loop(n).extent > 1 for n in set(inner) - set(chain.carried)):
        raise PlanError(here, f"the second product's accumulator is kept across {', '.join(chain.carried)}, which "
                              f"must be the innermost loops around the first's tile (they are "
                              f"{', '.join(shape.outer) or 'none'}): order the other loops outside them")
    source = blocking.name("c", shape.blocked, combos[0])
    chained.check_registers(chain, model, budget)
    second = _Products(chain.model, chain.tiles, (chain.cache,), as_expr)
    c = chain.cache
    stage, _ = chained.slot(chain, ring.c_tiles())
    copy = tile_boxes(c, stage, [as_expr(o) for o in c.origin], chained.FULL, stage)
    dtypes = {b.name: b.dtype for b in model.buffers}
    lanes = tensor.accumulator_rows(model, tiles)
    row_of = fused.row_of(model, lanes, {}) if lanes is not None else None
    edge = tensor._edge(model, tiles, as_expr, {})  # its rows do not depend on the carried loops (S's columns)
    inside = substitute(edge.rows, fused.single_valued(model)) if edge is not None else None
    columns = substitute(edge.cols, fused.single_valued(model)) if edge is not None else None
    return chained.statements(chain, source, ring.c_tiles(), second.descriptor, as_expr, tuple(copy), lanes, dtypes,
                              row_of, inside, _overlap(chain, model, inner, ring.facts, stops, specialized), columns,
                              tiles.accumulator_type)


def _overlap(chain: chained.Chain, model, carried: tuple[str, ...], facts, stops: dict[str, Expr],
             specialized: bool) -> chained.Overlap | None:
    """plan.overlap's tiles: past the first of the loops the second accumulator is kept across, and
    at their last (a masked loop's own end in the block). None where the first's columns are one
    tile (no such loops: nothing to overlap, the kernel is the plan's without it)."""
    if not model.overlap or not chain.carried:
        return None
    c = chain.cache
    if not specialized and not c.resident and c.stages == 1:
        raise PlanError("overlap()", f"{c.array}'s tile of one stage is copied by the consumers' thread 0 at the start "
                                     f"of each tile of {chain.source}, once the tile before's second product is done "
                                     "reading it; overlapped, that product is done only in the middle of this tile, "
                                     f"after the copy would wait for it: give {c.array}'s cache stages=2, or keep the "
                                     "producer warpgroup (warp_specialize)")

    def last(name: str) -> Expr:
        lf, spec = facts.loop(name), model.loop(name)
        if name in stops:
            end = Binary("min", Const(lf.stop(spec.end)), stops[name])
            return Binary(">=", Binary("+", Var(name), Const(spec.step)), end)
        return Binary("==", Var(name), Const(lf.last))

    return chained.Overlap(_not(_at(facts, carried, last=False)), all_of(last(n) for n in carried))


def _loops(model, tiles: tensor.TensorMatch, first: TmaCache) -> LoopShape:
    here = tensor.where(model)
    serial = list(model.serial_loops)
    index = first.index
    at = serial.index(index)
    cached_at, blocked = tensor.accumulator_cache(model, tiles)
    c_loops = tiles.c.subscripts_over_loops
    indexes_c = {n for n in serial if tensor._uses(c_loops, n)}
    if index in indexes_c:
        raise PlanError(here, f"the cache index {index} indexes {tiles.c.buffer}; the operands' k loop must be "
                              "the one inside the output tile", loops=(index,))
    inner = serial[at + 1:]
    if any(n in indexes_c for n in inner) and tuple(n for n in inner if n in indexes_c) != tuple(blocked):
        raise PlanError(here, f"loops inside {index} that index {tiles.c.buffer} must be register-blocked: "
                              f"plan.cache({tiles.c.buffer}, index=<a loop outside {index}>, location=MMA_FRAGMENT)",
                        loops=(index,))
    # C's tiles stay in registers across every serial loop around the index that does not index C
    outside = serial[:at]
    keep = len(outside)
    while keep > 0 and outside[keep - 1] not in indexes_c:
        keep -= 1
    if cached_at is not None and cached_at in outside and outside.index(cached_at) > keep:
        keep = outside.index(cached_at)
    steps = tuple(n for n in serial[at:] if n not in blocked)
    return LoopShape(tuple(outside[:keep]), tuple(outside[keep:]), steps, tuple(blocked))


@dataclass(frozen=True)
class Ring:
    """Which tile of the pipelined loops is which: ``t`` counts tiles over the outer and
    pipelined loops, the stage is ``t % stages``."""

    model: object
    facts: object
    shape: LoopShape
    stages: int
    persistent: Persistent | None = None
    cluster: int = 1  # blocks of the cluster: each stage is freed by the consumers of all of them
    teams: int = 1  # consumer teams taking the block's work items in turn (the producer fills all)
    team_threads: int = 0  # the threads of a team

    def free(self, index: Expr, comment: str) -> Stmt:
        """The consumers are done with a stage: arrive on its empty barrier. In a cluster, one
        thread of each consumer warp arrives on it in every block of the cluster (whose
        producers multicast into it), after its warpgroup's wgmma.wait_group."""
        if self.cluster == 1:
            return MbarrierArrive("empty", index, 0, comment)
        lane0 = Binary("==", Binary("%", Var("threadIdx.x"), Const(WARP)), Const(0))
        return If(lane0, (MbarrierArrive("empty", index, 0, comment, self.cluster),),
                  "one thread per warp frees the stage in each block of the cluster")

    def counter(self, names: tuple[str, ...] | None = None) -> Expr:
        """t at the current values of the outer and pipelined loops (or of ``names``), mixed radix;
        in a persistent kernel the block's earlier tiles come first (``work / blocks`` of them, as
        ``work = blockIdx.x + round * blocks`` with ``blockIdx.x < blocks``)."""
        if names is None:
            return self._mixed((*self.shape.outer, *self.shape.pipelined), True)
        return self._mixed(names, False)

    def c_tiles(self) -> Expr:
        """The team's tiles of C so far (the block's, with one team): its persistent rounds and
        the outer loops, mixed radix."""
        return self._mixed(self.shape.outer, True, self.teams)

    def _mixed(self, names: tuple[str, ...], rounds: bool, teams: int = 1) -> Expr:
        t: Expr = Const(0)
        if rounds and self.persistent is not None:
            t = self.work_item()
            if teams > 1:
                t = Binary("/", t, Const(teams))
        for name in names:
            lf, spec = self.facts.loop(name), self.model.loop(name)
            step: Expr = Var(name) if lf.first == 0 else Binary("-", Var(name), Const(lf.first))
            if spec.step != 1:
                step = Binary("/", step, Const(spec.step))
            t = step if isinstance(t, Const) and t.value == 0 else Binary("+", Binary("*", t, Const(lf.extent)), step)
        return t

    def work_item(self) -> Expr:
        """The block's work items before this one (``work = blockIdx.x + item * blocks``)."""
        return Binary("/", Var(WORK), Const(self.persistent.blocks))

    def turn(self, first: Expr | None, last: Expr | None) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
        """With several teams, what a team does before its first products of a work item and
        after its last (``first`` and ``last``: the conditions of those passes of the outer
        loops, None where there are none): it waits for its turn, then hands the turn on. The
        teams issue their products in the ring's order, so that no team waits on a stage's full
        barrier while a phase of another team's use of it before may still be pending (a parity
        wait would take that earlier phase for its own). Item ``u`` is team ``u % teams``'s; it
        waits for phase ``(u - 1) / teams`` of ``turn[u % teams]``, which the team of item
        ``u - 1`` completes after that item's products."""
        if self.teams == 1:
            return (), ()
        item = self.work_item()
        wait: Stmt = If(Binary(">=", Var(WORK), Const(self.persistent.blocks)), (
            MbarrierWait(TURN, Binary("%", item, Const(self.teams)),
                         Binary("%", Binary("/", Binary("-", item, Const(1)), Const(self.teams)), Const(2)),
                         "the team before has issued the products of the block's work item before"),),
            "the block's first work item goes first")
        give: Stmt = MbarrierArrive(TURN, Binary("%", Binary("+", item, Const(1)), Const(self.teams)), 0,
                                    "this work item's products are issued: the next team's turn")
        return ((wait if first is None else If(first, (wait,))),), ((give if last is None else If(last, (give,))),)

    def lets(self, prefix: str = "") -> tuple[Let, ...]:
        t = f"{prefix}tile"
        return (Let(t, self.counter(), "this tile's number in the ring"),
                Let(f"{prefix}stage", Binary("%", Var(t), Const(self.stages)), "its stage"),
                Let(f"{prefix}parity", Binary("%", Binary("/", Var(t), Const(self.stages)), Const(2)),
                    "the parity of its use of the stage"))

    def first_pipelined(self) -> Expr | None:
        """The pipelined loops at their first values (None: there are none)."""
        return all_of(Binary("==", Var(n), Const(self.facts.loop(n).first)) for n in self.shape.pipelined)

    def trips(self) -> int:
        return math.prod(self.facts.loop(n).extent for n in self.shape.pipelined)


def _nest(model, facts, names: tuple[str, ...], body: tuple[Stmt, ...], unroll: bool = False,
          stops: dict[str, Expr] | None = None) -> tuple[Stmt, ...]:
    """Loops ``names`` around ``body``; ``stops``: a loop that ends early in a block (where the
    tiles past it add nothing: ``masked.tile_stop``), at the smaller of its end and that."""
    for name in reversed(names):
        lf, spec = facts.loop(name), model.loop(name)
        stop: Expr = Const(lf.stop(spec.end))
        comment = f"schedule loop {name}: range({spec.begin}, {spec.end}, {spec.step})"
        if stops and name in stops:
            stop = Binary("min", stop, stops[name])
            comment += ", to the block's last tile with a kept element"
        body = (Loop(name, Const(lf.first), stop, spec.step, body, unroll, comment),)
    return body


def _copies(caches: tuple[TmaCache, ...], stage: Expr, as_expr, values: dict[str, Expr] | None = None) -> list[Stmt]:
    """The TMA boxes of one tile of every cache, into ``stage``."""
    out: list[Stmt] = []
    for c in caches:
        origin = [as_expr(o) for o in c.origin]
        if values:
            from ..ir.walk import substitute

            origin = [substitute(o, values) for o in origin]
        if c.multicast > 1:
            out += _multicast_copies(c, stage, origin)
            continue
        out += tile_boxes(c, stage, origin, "full", stage)
    return out


def tile_boxes(c: TmaCache, stage: Expr, origin: list[Expr], barrier: str, index: Expr,
               label: str = "") -> list[Stmt]:
    """The TMA boxes of one tile of ``c`` whose first element is ``origin`` (array coordinates),
    into ``stage``, completing on ``barrier[index]``."""
    out: list[Stmt] = []
    name = f"{c.array}{label}"
    for chunk in range(c.chunks):
        coords = list(origin)
        if chunk:
            coords[c.inner] = Binary("+", coords[c.inner], Const(chunk * c.chunk))
        out.append(TmaLoad(c.map.name, c.buffer.name, (stage, Const(chunk), Const(0), Const(0)), tuple(coords),
                           barrier, index, f"{name}: box {chunk + 1} of {c.chunks}" if c.chunks > 1 else name))
    return out


CLUSTER_RANK = Var("cluster_rank")  # the block's rank in its cluster (%cluster_ctarank)


def _multicast_copies(c: TmaCache, stage: Expr, origin: list[Expr]) -> list[Stmt]:
    """This block's part of a tile the cluster shares: its boxes (split by chunks) or its rows
    of every box (split by rows), each landing in every block of the cluster."""
    mask = (1 << c.multicast) - 1
    out: list[Stmt] = []
    if c.split == "chunks":
        per = c.chunks // c.multicast
        for n in range(per):
            chunk = Binary("+", Binary("*", CLUSTER_RANK, Const(per)), Const(n)) if n else \
                Binary("*", CLUSTER_RANK, Const(per))
            coords = list(origin)
            coords[c.inner] = Binary("+", coords[c.inner], Binary("*", chunk, Const(c.chunk)))
            out.append(TmaLoad(c.map.name, c.buffer.name, (stage, chunk, Const(0), Const(0)), tuple(coords), "full",
                               stage, f"{c.array}: this block's box {n + 1} of {per}, to the {c.multicast} blocks of "
                                      "the cluster", mask))
        return out
    rows = c.outer_extent // c.multicast
    first = Binary("*", CLUSTER_RANK, Const(rows))
    for chunk in range(c.chunks):
        coords = list(origin)
        if chunk:
            coords[c.inner] = Binary("+", coords[c.inner], Const(chunk * c.chunk))
        coords[1 - c.inner] = Binary("+", coords[1 - c.inner], first)
        out.append(TmaLoad(c.map.name, c.buffer.name, (stage, Const(chunk), first, Const(0)), tuple(coords), "full",
                           stage, f"{c.array}: this block's {rows} rows of box {chunk + 1} of {c.chunks}, to the "
                                  f"{c.multicast} blocks of the cluster", mask))
    return out


def _tile_bytes(caches) -> int:
    return sum(c.stage_bytes for c in caches)


def fill(caches: tuple[TmaCache, ...], as_expr, team: int = 0) -> Stmt:
    """A tile's fill, for the tile whose ``stage`` and ``parity`` the ring's lets name: thread 0
    (of its team, with ``team`` threads a team) waits until the stage's tile before was released,
    expects the bytes of the tile's copies on its full barrier and issues its boxes (``pipeline``
    issues fills ahead, ``specialize`` moves them to the producer warpgroup)."""
    stage, parity = Var("stage"), Var("parity")
    thread: Expr = Binary("%", Var("threadIdx.x"), Const(team)) if team else Var("threadIdx.x")
    return If(Binary("==", thread, Const(0)), (
        MbarrierWait(EMPTY, stage, Binary("-", Const(1), parity),
                     "the stage is free: its previous tile's consumers released it"),
        MbarrierArrive(FULL, stage, _tile_bytes(caches), "the bytes this tile's copies bring"),
        *_copies(caches, stage, as_expr)), "thread 0 copies this tile")


def _consumer_body(model, facts, shape: LoopShape, ring: Ring, products, caches, as_expr,
                   chain: chained.Statements | None = None, carried: tuple[str, ...] = (),
                   stops: dict[str, Expr] | None = None) -> tuple[Stmt, ...]:
    """The loops around each tile of C: every tile of the operands filled, waited for, multiplied
    and released (one stage at a time: ``pipeline`` overlaps them), C's set-up and store around them;
    a chain's second product after each tile, its B's fill after the first's tiles."""
    stage = Var("stage")
    step = (*ring.lets(), fill(caches, as_expr, ring.team_threads if ring.teams > 1 else 0),
            MbarrierWait(FULL, stage, Var("parity"), "this tile's copies have landed"),
            WarpgroupFence(), *products.statements(stage), WarpgroupCommit(), WarpgroupWait(0),
            ring.free(stage, "this tile's products are done: its stage is free"))
    pipelined = _nest(model, facts, shape.pipelined, step)
    before, after = products.accumulators(facts)
    wait, give = ring.turn(_at(facts, shape.outer, last=False), _at(facts, shape.outer, last=True))
    if chain is None:
        return _nest(model, facts, shape.outer, (*before, *wait, *pipelined, *give, *after))
    copy = (If(Binary("==", Var("threadIdx.x"), Const(0)), chain.fill, "thread 0 copies the second product's B tile"),
            ) if chain.fill else ()
    per_tile = (*before, *wait, *chain.turn, *pipelined, *chain.issued, *chain.passed, *give, *copy, *after,
                *chain.each)
    outside = shape.outer[:len(shape.outer) - len(carried)]
    return _nest(model, facts, outside, (*chain.before, *_nest(model, facts, carried, per_tile, stops=stops),
                                         *chain.after))


def _at(facts, names: tuple[str, ...], last: bool) -> Expr | None:
    """The loops ``names`` all at their first (or last) values; None where there are none."""
    return all_of(Binary("==", Var(n), Const(facts.loop(n).last if last else facts.loop(n).first)) for n in names)


def _not(cond: Expr) -> Expr:
    """The negation of a conjunction of equalities: a disjunction of inequalities."""
    if isinstance(cond, Binary) and cond.op == "&&":
        return Binary("||", _not(cond.lhs), _not(cond.rhs))
    return Binary("!=", cond.lhs, cond.rhs)


class _Products:
    """The wgmma products of one tile (every step of the cache index and the loops inside it,
    every pass, every register-blocked accumulator) and C's accumulators around the passes."""

    def __init__(self, model, tiles: tensor.TensorMatch, caches: tuple[TmaCache, ...], as_expr,
                 registers: int = 0, output: epilogue.TmaOutput | None = None, compiled: int = 0,
                 online=None) -> None:
        self.model, self.tiles, self.as_expr = model, tiles, as_expr
        self.online = online  # online.Online: row vectors of C kept across a chain's tiles
        self.registers = registers  # what each consumer thread may hold
        self.compiled = compiled or registers  # the launch's share: what hoisted column vectors fit beside
        self.output = output  # C stored by TMA (None: by the threads)
        self.caches = {c.array: c for c in caches}
        self.shape = None

    def bind(self, shape: LoopShape, ring: Ring) -> _Products:
        self.shape, self.ring = shape, ring
        return self

    def statements(self, stage: Expr) -> list[Stmt]:
        model, tm = self.model, self.tiles
        m, n, k = model.tensorize.mma_shape.mnk
        blocking = tensor.Blocking(model, self.shape.blocked)
        a_loops, b_loops = blocking.of(tm.a), blocking.of(tm.b)
        out: list[Stmt] = []
        steps = [tensor._values(model, name) for name in self.shape.steps]
        for s_n, values in enumerate(itertools.product(*steps)):
            fixed = dict(zip(self.shape.steps, values))
            passes = range(model.tensorize.passes)
            names = {}
            for p in passes:
                tag = f"{s_n}_{p}" if model.tensorize.passes > 1 else f"{s_n}"
                for prefix, role, operand, loops in (("a", "A", tm.a, a_loops), ("b", "B", tm.b, b_loops)):
                    for combo in blocking.combos(loops):
                        name = blocking.name(f"{prefix}{tag}", loops, combo)
                        names[prefix, p, tuple(sorted(combo.items()))] = name
                        out += self.descriptor(name, role, operand, p, {**fixed, **combo}, stage)
            for p, combo in tensor._product_order(model.tensorize, passes, blocking.combos(blocking.loops)):
                a = names["a", p, tuple(sorted((n_, v) for n_, v in combo.items() if n_ in a_loops))]
                b = names["b", p, tuple(sorted((n_, v) for n_, v in combo.items() if n_ in b_loops))]
                c = blocking.name("c", blocking.loops, combo)
                out.append(FragmentMma(c, a, b, c))
        return out

    def descriptor(self, name: str, role: str, operand: tensor.Operand, p: int, values: dict[str, int],
                   stage: Expr) -> list[Stmt]:
        """A matrix descriptor of one operand tile: its first element in the TMA tile's
        (stage, chunk, row, column) coordinates."""
        model, tm = self.model, self.tiles
        c = self.caches[operand.buffer]
        here = _here(model, c.array, c.index)
        subs = operand.subscripts
        if p:
            subs = tuple(s.plus(d.scale(p)) for s, d in zip(subs, operand.pass_shift))
        fixed = {n: Affine((), v) for n, v in values.items()}
        rel = [s.substitute(fixed).plus(o.substitute(fixed).scale(-1)) for s, o in zip(subs, c.origin)]
        inner, outer = rel[c.inner], rel[1 - c.inner]
        m, n, k = model.tensorize.mma_shape.mnk
        k_dim = self._k_dim(role, operand)
        k_major = k_dim == c.inner
        if not k_major and not tm.instructions.transposes(tm.precision):
            layout = "FIRST_MAJOR" if k_dim == len(operand.subscripts) - 1 else "LAST_MAJOR"
            raise CacheError(here, f"{tm.precision} wgmma reads operands whose k is contiguous; {c.array}"
                                   + (f" (operand {role})" if c.array != role else "") + " is contiguous "
                                   f"along its dimension {c.inner}, not along k (its dimension {k_dim}): make "
                                   f"{c.array} Array.Layout.{layout}", loops=(c.index,))
        extent = k if k_major else (m if role == "A" else n)
        for var, coeff in inner.terms:
            lp = model.loop(var)
            moves = not isinstance(lp.end, int) or lp.end - lp.begin > lp.step  # takes more than one value
            if (moves and (coeff * lp.step) % c.chunk) or (coeff * lp.begin) % c.chunk:
                raise CacheError(here, f"{role}'s tiles start at element {str(inner)} of a {c.chunk}-element "
                                       f"row chunk, which {var} moves by {coeff * lp.step}; wgmma tiles must start at "
                                       f"the same column of every chunk", loops=(c.index,))
        col = inner.const % c.chunk
        if (k_major and col + extent > c.chunk) or (not k_major and col):
            raise CacheError(here, f"{role}'s {extent}-element rows start at column {col} of a {c.chunk}-element "
                                   "swizzled row chunk; wgmma tiles must "
                                   + ("lie within one chunk" if k_major else "start at a chunk"), loops=(c.index,))
        terms = Affine(inner.terms, inner.const - col)
        chunk: Expr = Const(terms.const // c.chunk) if not terms.terms else \
            Binary("/", self.as_expr(terms), Const(c.chunk))
        outer_rows = outer
        for var, coeff in outer_rows.terms:
            lp = model.loop(var)
            moves = not isinstance(lp.end, int) or lp.end - lp.begin > lp.step  # takes more than one value
            if (moves and (coeff * lp.step) % 8) or (coeff * lp.begin) % 8:
                raise CacheError(here, f"{role}'s tiles start at row {str(outer_rows)} of the TMA tile, "
                                       f"which {var} moves by {coeff * lp.step}; wgmma reads rows in groups of 8",
                                 loops=(c.index,))
        if outer_rows.const % 8:
            raise CacheError(here, f"{role}'s tiles start at row {outer_rows.const} of the TMA tile; wgmma reads rows "
                                   "in groups of 8", loops=(c.index,))
        origin = (Const(0) if c.resident else stage, chunk, self.as_expr(outer_rows), Const(col))
        layout = "row_major" if (k_major == (role == "A")) else "col_major"
        use = "matrix_a" if role == "A" else "matrix_b"
        row_stride, col_stride = (c.chunk, 1) if layout == "row_major" else (1, c.chunk)
        return [Fragment(name, use, m, n, k, tm.operand_type, tm.precision, layout, tm.family),
                FragmentLoad(name, c.buffer.name, origin, row_stride, col_stride, path="descriptor")]

    def _k_dim(self, role: str, operand: tensor.Operand) -> int:
        """The array dimension the tile's k runs along."""
        k_loop = self.model.tensorize.loops[2]
        return next(d for d, s in enumerate(operand.subscripts_over_loops) if s.coeff(k_loop))

    def accumulators(self, facts) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
        """C's fragments set up before the pipelined loops and stored after them."""
        model, tm = self.model, self.tiles
        outer = set(self.shape.outer)
        reductions = tuple(r for r in tm.reductions if r in outer)
        first = tensor._condition(facts, reductions, last=False)
        last = tensor._condition(facts, reductions, last=True)
        blocking = tensor.Blocking(model, self.shape.blocked)
        before: list[Stmt] = []
        after: list[Stmt] = []
        combos = blocking.combos(self.shape.blocked)
        out = self.output
        early = _early_fits(model, tm, len(combos), self.registers) and not (out is not None and out.loads)
        for combo in combos:
            c = blocking.name("c", self.shape.blocked, combo)
            b, a = tensor._accumulator(model, tm, self.as_expr, c, combo, first, last, early, self.online)
            before += b
            after += a
        n = model.tensorize.mma_shape.mnk[1]
        if out is not None and out.loads:
            setup, stores = epilogue.loaded_by_tma(tuple(before), tuple(after), out, n, self.ring.c_tiles())
        elif out is not None:
            setup, stores = tuple(before), epilogue.stored_by_tma(tuple(after), out, n)
        else:
            setup, stores = tuple(before), tuple(after)
        return self._operands(setup, stores, len(combos))

    def _operands(self, before: tuple[Stmt, ...], after: tuple[Stmt, ...],
                  count: int) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
        """The epilogue's reads of column vectors (``bias[j]``) in registers from the tile's start
        (``operands.hoisted``), within the launch's share of the registers that
        the thread's ``count`` accumulators (and C's tiles where they are loaded into registers
        before the products) leave."""
        model, tm = self.model, self.tiles
        m, n, _ = model.tensorize.mma_shape.mnk
        early = any(isinstance(s, FragmentLoad) and s.buffer == tm.c.buffer for s in walk_statements(before))
        c_size = model.buffer(tm.c.buffer).dtype.size if early else 0
        held = count * (m * n // WARPGROUP) * (tm.accumulator_type.size + c_size) // 4
        read_only = {b.name for b in model.buffers} - {s.buffer for s in model.statements}
        lane = Binary("%", Var("threadIdx.x"), Const(WARPGROUP))
        return operands.hoisted(before, after, wgmma_accumulator(n, tm.accumulator_type), WARPGROUP, lane,
                                read_only, self.compiled - held - REGISTER_MARGIN)


# registers a consumer thread needs besides its tiles of C: descriptors, addresses, counters
REGISTER_MARGIN = 40


def _early_fits(model, tiles: tensor.TensorMatch, count: int, registers: int) -> bool:
    """Whether C can be loaded before the products (tensor._accumulator's ``early``): the
    thread's ``count`` accumulators and as many tiles of C in its own type fit ``registers``."""
    if tiles.c.buffer not in {b.name for b in model.buffers}:
        return False
    m, n, _ = model.tensorize.mma_shape.mnk
    per_tile = m * n // WARPGROUP
    stored = model.buffer(tiles.c.buffer).dtype
    needed = count * per_tile * (tiles.accumulator_type.size + stored.size) // 4
    return needed + REGISTER_MARGIN <= registers
