"""Plans: how a schedule runs on a GPU (Accera's ``acc.Plan``): bind, tensorize, unroll.

Arguments are checked here, when the primitive is called; checks that need the whole plan
(launch limits, the tensorized pattern, types) run when the plan is compiled.
"""

from __future__ import annotations

import enum
import inspect
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import CacheError, PlanError
from ..instructions import Instruction, check_instruction
from ..ir.affine import Affine
from ..ir.types import ScalarType
from ..targets import (
    CacheStrategy,
    Constants,
    CopyEngine,
    GridUnit,
    MemorySpace,
    MMAFragmentOp,
    MMASchedulingPolicy,
    MMAShape,
    Target,
)
from .array import Role
from .dimension import Dimension
from .expr import Index
from .names import name_in_use
from .parameters import recorded


@dataclass(frozen=True)
class CacheRequest:
    """A ``plan.cache`` request, as given."""

    source: object  # the Array
    index: Index
    location: MemorySpace
    strategy: CacheStrategy = CacheStrategy.AUTO
    pipeline: str = "sync"  # sync | registers | async
    stages: int = 1  # shared buffers in the ring (async)
    automatic: bool = False  # double_buffer=True with AUTO location: registers where cp.async cannot copy
    engine: CopyEngine = CopyEngine.AUTO
    element_type: ScalarType | None = None  # MMA_FRAGMENT: the fragments' type, when not the array's
    max_elements: int = 0  # index None: the outermost loop whose footprint has at most this many elements
    order: tuple[int, ...] = ()  # SHARED: the tile's dimensions slowest first, when not the array's (transposed)
    from_shared: bool = False  # PRIVATE: filled from the array's SHARED cache (a cache of a cache)
    trigger: Index | None = None  # trigger_index other than index: the loop the cache is filled at
    vectorize: bool = True  # SHARED: copies in vectors where alignment allows (False: element by element)


@dataclass(frozen=True)
class Tensorization:
    """A ``plan.tensorize`` request, as given."""

    indices: tuple[Index, Index, Index]
    mma_shape: MMAShape
    num_total_passes: int
    num_fused_passes: int
    prologue_op: MMAFragmentOp
    prologue_arg: float
    epilogue_op: MMAFragmentOp
    epilogue_arg: float
    instruction: Instruction = Instruction.AUTO
    block_order: bool = False  # MMASchedulingPolicy.BLOCK_ORDER


@dataclass(frozen=True)
class Cache:
    """What ``plan.cache`` returns (Accera's cache handle): the array, its index and location."""

    array: object
    index: Index | None
    location: MemorySpace


def _later(plan, *args, **kwargs) -> None:
    """A call on a plan that parameters reach: checked and applied at Package.add."""


def _cache_later(plan, *args, **kwargs) -> Cache:
    """The handle of a cache whose call waits for its parameters' values: its arguments bound as
    ``Plan.cache`` binds them (one home for their order), defaults applied."""
    bound = inspect.signature(Plan.cache).bind(plan, *args, **kwargs)
    bound.apply_defaults()
    return Cache(bound.arguments["source"], bound.arguments["index"], bound.arguments["location"])


class Plan:
    """A schedule planned for a target. Create with ``schedule.create_plan(target)``."""


    def _name_indices(self, arguments: object, scope: dict | None = None) -> None:
        """Before a call (``recorded``): the indices named as the script's variables name them now."""
        name_in_use(list(self.schedule.pieces), self.schedule.nest.logic, arguments, Index, scope)

    def print(self) -> None:
        """Print the scheduled loop nest (Accera's ``plan.print()``): each loop with its range,
        binding or tensor-core role and iteration count, then the statements."""
        from ..show import loop_nest
        from . import names
        from .freeze import freeze
        from .parameters import deferred

        if deferred(self):
            raise PlanError("plan.print()", "the plan uses parameters: print a plan of values (Package.add with "
                                            "parameters= builds each point)")
        arrays = tuple(self.schedule.nest.arrays())  # named as Package.add would with them as args
        arguments = tuple(a for a in arrays if a.role not in (Role.CONST, Role.TEMP))  # the others are the nest's
        names.name_function(list(arrays), arrays, self.schedule.order, self.schedule.nest.logic, "plan")
        sizes = {id(n): n for a in arrays for n in a.shape if isinstance(n, Dimension)}  # and the run-time sizes
        print(loop_nest(freeze(self, "plan", (*arguments, *sizes.values()))))

    def __getattr__(self, name: str):  # Accera's methods schedc does not have: the reason
        from ..accera_names import refuse_method

        if name.startswith("__"):
            raise AttributeError(name)
        return refuse_method("Plan", name)
    def __init__(self, schedule, target: Target, blocks_per_sm: int | None = None,
                 dynamic_shared: int | None = None) -> None:
        if not isinstance(target, Target):
            raise PlanError(f"create_plan({target!r})", "target must be a schedc.Target")
        self.dynamic_shared = 0
        dynamic_shared, blocks_per_sm = (None if _zero(v) else v for v in (dynamic_shared, blocks_per_sm))
        if dynamic_shared is not None:
            where = f"create_plan({target!r}, _dynamic_shared_memory_size={dynamic_shared!r})"
            self.dynamic_shared = _positive(where, "_dynamic_shared_memory_size", dynamic_shared)
            if dynamic_shared > target.shared_memory_max:
                raise PlanError(where, f"{target.name} allows {target.shared_memory_max} bytes of shared memory per "
                                       "block")
        if blocks_per_sm is not None:
            where = f"create_plan({target!r}, _blocks_per_SM={blocks_per_sm!r})"
            _positive(where, "_blocks_per_SM", blocks_per_sm)
            if blocks_per_sm > target.max_blocks_per_sm:
                raise PlanError(where, f"{target.name} holds at most {target.max_blocks_per_sm} blocks per "
                                       "multiprocessor")
        self.blocks_per_sm = blocks_per_sm or 0
        self.schedule = schedule
        self.target = target
        self.bindings: dict[GridUnit, tuple[Index, ...]] = {}
        # a fused schedule's parts binding their own loops to a unit already bound by another part
        self.part_bindings: list[tuple[GridUnit, tuple[Index, ...]]] = []
        self.tensorization: Tensorization | None = None
        self.chained: Tensorization | None = None  # a fused schedule's second product (its A the first's C)
        self.unrolled: list[Index] = []
        self.caches: list[CacheRequest] = []
        self.specialization: tuple[bool, int, int] | None = None  # warp_specialize (None: AUTO)
        self.teams = 1  # warp_specialize(teams=): consumer teams taking a persistent grid's tiles in turn
        self.persistence: tuple[int, int] | None = None  # persistent: (group, blocks; 0 = one per SM)
        self.split_deterministic = True  # split_k: a split reduction's sums added in a fixed order
        self.overlapped = False  # overlap: a chain's second product under the next tile's first
        self.alternated = False  # alternate: the consumer warpgroups issue a chain's products in turn
        self.clustering: tuple[GridUnit, int] | None = None  # cluster: (block unit, blocks along it)
        schedule._plan_created = True

    # -- bind --------------------------------------------------------------------------------

    @recorded(_later)
    def bind(self, mapping: Mapping[Index | tuple[Index, ...], GridUnit] | tuple[Index, ...],
             grid: tuple[GridUnit, ...] | None = None) -> None:
        """Run loops on the grid: each index (or tuple of indices) becomes a block, warpgroup, warp
        or thread coordinate instead of a loop.

        **Requires:** indices of this schedule, each bound once; each grid unit bound once;
        THREAD_*, WARP_* and WARPGROUP_* not mixed. A tuple ``(i, j): BLOCK_X`` enumerates the
        pairs along one axis, the last index fastest. With WARP_* bound the block is
        ``(warp_x * 32, warp_y, 1)`` threads (Accera's rule). WARPGROUP_* (a plan tensorized with
        a wgmma shape, ``M64xN{n}xK16_B1``) picks groups of 4 warps that issue a 64 x n tile
        together: the block is ``(warpgroup_x * warpgroup_y * 128, 1, 1)`` threads (plus a producer
        warpgroup when the plan is warp-specialized).

        Accera's older form ``bind((i, ii), grid=(BLOCK_Y, THREAD_Y))`` pairs the two tuples.

        Before → after for ``bind({i: BLOCK_Y, ii: THREAD_Y})``::

            for i in range(0, 2048, 32):        i = blockIdx.y * 32
              for ii in range(0, 32, 1):   →    ii = threadIdx.y
                ...                             ...
        """
        if grid is not None:  # Accera's older form: bind((i, j), grid=(BLOCK_X, BLOCK_Y))
            if not isinstance(mapping, tuple | list) or not isinstance(grid, tuple | list) or len(mapping) != len(grid):
                raise PlanError(f"bind({_render_pair(mapping)}, grid={_render_pair(grid)})",
                                "bind(indices, grid=units) takes two tuples of the same length")
            mapping = dict(zip(mapping, grid, strict=True))
        where = f"bind({_render_binding(mapping)})"
        if not isinstance(mapping, Mapping) or not mapping:
            raise PlanError(where, "mapping must be a non-empty dict of index: GridUnit")
        bound = {index: unit for unit, group in self.bindings.items() for index in group}
        bound.update({index: unit for unit, group in self.part_bindings for index in group})
        new: dict[GridUnit, tuple[Index, ...]] = {}
        parts: list[tuple[GridUnit, tuple[Index, ...]]] = []
        for key, unit in mapping.items():
            group = key if isinstance(key, tuple) else (key,)
            if not group:
                raise PlanError(where, "an empty tuple names no index")
            if not isinstance(unit, GridUnit):
                raise PlanError(where, f"{unit!r} is not a GridUnit (use target.GridUnit.BLOCK_X, ...)")
            for index in group:
                self._check_index(where, index)
                if index in bound:
                    raise PlanError(where, f"{index.name} is already bound to {bound[index].name}")
                bound[index] = unit
            if unit in self.bindings or unit in new:
                first = (self.bindings.get(unit) or new[unit])
                if not self._other_parts(unit, first, group):
                    raise PlanError(
                        where,
                        f"{unit.name} is bound twice (to {_names(first)} and to {_names(group)})",
                    )
                parts.append((unit, group))
                continue
            new[unit] = group
        levels = {unit.level for unit in (*self.bindings, *new)} - {"block"}
        if len(levels) > 1:
            names = " and ".join(f"{level.upper()}_*" for level in sorted(levels))
            raise PlanError(where, f"{names} bindings cannot be mixed in one plan")
        self.bindings.update(new)
        self.part_bindings += parts

    def _other_parts(self, unit: GridUnit, first: tuple[Index, ...], group: tuple[Index, ...]) -> bool:
        """Whether a second binding of ``unit`` is one of a fused schedule's parts running its own
        loops on the block's threads: both groups of unfused indices of different parts, each of
        one part (the parts run in turn, each on the same threads)."""
        nest = self.schedule.nest
        owners = getattr(nest, "owner_of", None)
        if owners is None or unit.level != "thread":
            return False
        def part(index: Index) -> int | None:
            return owners(self.schedule.pieces[index].dim)

        mine = {part(x) for x in group}
        theirs = {part(x) for x in first} | {part(x) for bound, g in self.part_bindings if bound is unit for x in g}
        return None not in mine | theirs and len(mine) == 1 and not mine & theirs

    # -- tensorize ---------------------------------------------------------------------------

    @recorded(_later)
    def tensorize(
        self,
        indices: tuple[Index, Index, Index],
        mma_shape: MMAShape | None = None,
        use_static_offsets: bool = False,
        num_total_passes: int = 1,
        num_fused_passes: int | None = None,
        scheduling_policy: MMASchedulingPolicy | None = None,
        prologue_op: MMAFragmentOp = MMAFragmentOp.NONE,
        prologue_arg: float = 0.0,
        epilogue_op: MMAFragmentOp = MMAFragmentOp.NONE,
        epilogue_arg: float = 0.0,
        instruction: Instruction = Instruction.AUTO,
    ) -> None:
        """Run the innermost three loops ``(m, n, k)`` of ``C[m, n] += A[m, k] * B[k, n]`` on
        the tensor cores, one warp per tile, with ``num_total_passes`` operations of
        ``mma_shape`` along k.

        **Requires:** the three indices are the innermost loops with extents
        ``target.tensor_core_info.compute_tensor_splits(mma_shape, num_total_passes)``; the
        statement is ``C += A * B`` (A indexed by m and k, B by k and n, C by m and n); the
        target's tensor cores multiply A's element type into C's; the enclosing per-thread
        loops are bound to warps or blocks. ``num_fused_passes`` passes load their operands
        together (default: all). ``prologue_op`` applies to C's tile before its first product
        (SET: C = arg, giving C = A @ B for arg 0; SCALE: C = arg * C; ReLU) and
        ``epilogue_op`` after its last (SCALE: alpha scaling; ReLU). float32 operands multiply
        in tf32 (M16xN16xK8_B1). Accera's AMD-only ``use_static_offsets`` is refused rather
        than ignored. ``scheduling_policy`` (``MMASchedulingPolicy``) orders the products of a
        warp's tiles over a pass group: PASS_ORDER (default) each pass for every tile, then the
        next pass; BLOCK_ORDER every pass for one tile, then the next tile.

        ``instruction`` picks the tensor-core instruction family (``schedc.instructions``):
        ``Instruction.AUTO`` (default) the fastest the target has for the operand types and
        shape; ``Instruction.MMA_SYNC``: ``ldmatrix`` from shared tiles (XOR-swizzled, conflict
        free) and ``mma.sync.aligned.m16n8k16`` (fp16, bf16, int8, uint8) or ``m16n8k8``
        (tf32), sm_80+, shapes M16xN16xK16_B1 and M32xN8xK16_B1 (M16xN16xK8_B1 for tf32), each
        lane holding the elements the PTX ISA assigns it (tiles need no alignment);
        ``Instruction.WMMA``: ``wmma.load/mma/store`` (sm_70+, also M8xN32xK16_B1; tiles
        32-byte aligned); ``Instruction.WGMMA`` (sm_90a, the shapes
        ``M64xN{n}xK16_B1`` for fp16 and bf16 and ``M64xN{n}xK8_B1`` for tf32, n = 8 .. 256 by
        8): one ``wgmma.mma_async`` per warpgroup tile of 64 x n, A and B read from shared memory
        through matrix descriptors (they must be cached SHARED; their caches become TMA tiles in
        an mbarrier ring, warp-specialized unless ``plan.warp_specialize(False)``), C in
        registers across the k loop; bind the loops over warpgroup tiles to WARPGROUP_X/Y. A
        family that cannot multiply the operands is refused with what it can.

        *Hardware:* fp16 on sm_70+, int8 on sm_72+, bf16 and tf32 on sm_80+; AUTO picks
        mma.sync on sm_80+ for its types and shapes, wmma otherwise, and wgmma for its shapes.

        Before → after::

            for iii in range(16):                   c[elem] = C[... lane layout ...]    (8 per lane)
              for jjj in range(16):           →     schedc::ldmatrix<4, false>(&a0[0], &A_shared[...])
                for kkk in range(16):               schedc::ldmatrix<4, true>(&b0[0], &B_shared[...])
                  C[...] += A[...] * B[...]         schedc::mma_m16n8k16(&c[0], &a0[0], &b0[0])
                                                    schedc::mma_m16n8k16(&c[4], &a0[0], &b0[4])
                                                    C[... lane layout ...] = c[elem]
                                                    (WMMA: wmma::load_matrix_sync, mma_sync, store)
        """
        shown = _names(indices) if isinstance(indices, tuple | list) else repr(indices)
        where = f"tensorize(indices=({shown}), mma_shape={_enum_name(mma_shape)})"
        if self.chained is not None or (self.tensorization is not None and not self._fused):
            raise PlanError(where, "the plan is already tensorized" + (
                "" if self._fused else ": a second product is tensorized in a fused schedule, the nest after the "
                                       "first's (acc.fuse((first, second), ...)), its A the first's C"))
        if use_static_offsets:
            raise PlanError(
                where, "use_static_offsets is an AMD optimization in Accera; NVIDIA tiles compute offsets inline"
            )
        if scheduling_policy is not None and not isinstance(scheduling_policy, MMASchedulingPolicy):
            raise PlanError(where, f"scheduling_policy must be an MMASchedulingPolicy (PASS_ORDER, BLOCK_ORDER), "
                                   f"not {scheduling_policy!r}")
        if not isinstance(indices, tuple | list) or len(indices) != 3:
            raise PlanError(where, "indices must be a tuple of three indices (m, n, k)")
        for index in indices:
            self._check_index(where, index)
        if len(set(indices)) != 3:
            raise PlanError(where, "the three indices must be distinct")
        if mma_shape is None:
            shapes = ", ".join(s.name for s in self.target.tensor_core_info.supported_shapes[:4])
            raise PlanError(where, f"mma_shape= is required: the tensor-core shape of one product ({shapes}, ...)")
        if not isinstance(mma_shape, MMAShape):
            raise PlanError(where, f"mma_shape must be an MMAShape, not {mma_shape!r}")
        if mma_shape not in self.target.tensor_core_info.supported_shapes:
            raise PlanError(where, self.target.tensor_core_info.missing(mma_shape))
        total = _positive(where, "num_total_passes", num_total_passes)
        fused = total if num_fused_passes is None else _positive(where, "num_fused_passes", num_fused_passes)
        if total % fused:
            raise PlanError(
                where, f"num_fused_passes {fused} must divide num_total_passes {total}"
            )
        for name, op in (("prologue_op", prologue_op), ("epilogue_op", epilogue_op)):
            if not isinstance(op, MMAFragmentOp):
                raise PlanError(where, f"{name} must be an MMAFragmentOp, not {op!r}")
        if epilogue_op is MMAFragmentOp.SET:
            raise PlanError(where, "epilogue_op SET would discard the product; use prologue_op")
        for name, arg in (("prologue_arg", prologue_arg), ("epilogue_arg", epilogue_arg)):
            if isinstance(arg, bool) or not isinstance(arg, int | float | np.number):
                raise PlanError(where, f"{name} must be a number, not {arg!r}")
        record = Tensorization(
            tuple(indices), mma_shape, total, fused, prologue_op, float(prologue_arg),
            epilogue_op, float(epilogue_arg), check_instruction(where, instruction),
            scheduling_policy is MMASchedulingPolicy.BLOCK_ORDER,
        )
        if self.tensorization is None:
            self.tensorization = record
        else:
            self.chained = record

    @property
    def _fused(self) -> bool:
        return getattr(self.schedule.nest, "owner_of", None) is not None

    # -- cache -------------------------------------------------------------------------------

    @recorded(_cache_later)
    def cache(
        self,
        source,
        index: Index | None = None,
        trigger_index: Index | None = None,
        trigger_level: int | None = None,
        location: MemorySpace = MemorySpace.SHARED,
        layout=None,
        strategy: CacheStrategy | None = None,
        double_buffer: bool = False,
        double_buffer_location=None,
        stages: int | None = None,
        vectorize=None,
        engine: CopyEngine = CopyEngine.AUTO,
        element_type: ScalarType | None = None,
        level: int | None = None,
        max_elements: int | None = None,
        thrifty: bool | None = None,
        _shared_memory_offset: int | None = None,
    ) -> Cache:
        """Keep the part of ``source`` the loops at and inside ``index`` touch in faster memory.

        ``location=SHARED`` (sequential caching): before ``index``'s loop the block's threads
        copy the footprint of ``source`` (the elements the loops at and inside ``index`` read, for
        the block) into shared memory, between two barriers, and those loops read it from there.
        At an ``index`` bound to the grid (blocks, warps or threads) the footprint is the block's
        (its own coordinates fixed), filled before the first serial loop after ``index``. A cache
        of an array the nest writes (Accera's output caching, SIMT plans) is read and written in
        shared memory and, after a barrier, written back by the block once the loops end; each
        statement must touch one element of the array and the block must write every element of
        its tile inside the array (so that the write-back overwrites nothing the nest leaves
        alone or another block writes), and the tile is filled once (no pipeline, no TMA).
        Copies move up to 16 bytes per thread (vectors) where alignment allows; ``strategy``
        splits them STRIPED (coalesced, the default) or BLOCKED among the threads. The tile keeps
        the array's layout unless ``layout`` names another: a column-major array gives
        column-major tiles, copied in vectors along its columns, from which tensor cores load
        col_major fragments. A 2-D tile in the other layout (``layout=LAST_MAJOR`` for a row-major
        array, Accera's cache layouts) is transposed by its copy: vectors read along the array's
        rows, their elements written down the tile's columns (by the threads, sequentially or
        through the register double buffer; cp.async and TMA copy only into the array's layout);
        tensor cores read it in its own layout (``ldmatrix``/``.trans``, wmma col_major). Tiles
        that feed tensor cores get rows (columns) padded by 16 bytes where that avoids bank
        conflicts (always in pipelines; in sequential caches where it adds at most 1/16 to the
        tile), transposed tiles always. ``layout`` on PRIVATE and MMA_FRAGMENT caches is accepted
        and changes nothing: registers have no layout.

        Pipelines overlap the copy of the next tile with the work on this one; the loop that
        encloses ``index`` is the one pipelined:

        - ``double_buffer=True, double_buffer_location=PRIVATE``: register double buffering.
          The first tile is copied before the loop; each iteration loads the next tile into
          registers, computes on shared memory, and after a barrier stores the registers into
          shared memory (one buffer of shared memory, the tile again in registers).
        - ``stages=N`` (1 to 8): a ring of N shared buffers filled with ``cp.async`` (or TMA). Before the
          loop N-1 tiles are requested; each iteration waits for its tile (``wait_group(N-2)``)
          and a barrier, requests the tile N-1 iterations ahead into the buffer freed by the
          previous iteration, and computes. ``stages=1`` requests each tile and waits for all.
        - ``double_buffer=True, double_buffer_location=SHARED`` is ``stages=2``.
        - ``double_buffer=True`` with ``double_buffer_location`` AUTO (None or NONE) picks
          SHARED (``cp.async``) on targets that have it (sm_80 and newer), PRIVATE otherwise.

        ``source`` may be what an earlier ``plan.cache`` returned (Accera's hierarchical caching):
        a PRIVATE cache of a SHARED cache fills each thread's register tile from the block's
        shared tile instead of global memory, at a serial loop inside the one before which the
        block fills the shared tile.

        ``trigger_index`` (or ``trigger_level``, counted as ``level``), Accera's: the loop at which
        the cache is filled, ``index`` or one outside it. The fill at the trigger copies what the
        loops at and inside ``index`` read over every iteration of the loops from the trigger to
        ``index`` (one box: the trigger loop's footprint), and a pipeline runs along the loop
        around the trigger.

        ``location=PRIVATE`` in a SIMT plan: a register tile. Each thread keeps its own copy of
        the elements of ``source`` that the loops at and inside ``index`` touch (for fixed outer
        loops and grid coordinates), loaded before ``index``'s loop when the nest reads
        ``source`` and stored after it when the nest writes it. The loops inside ``index`` that
        index ``source`` are unrolled, so that the copy lives in registers; a tile over 128
        registers (up to 2 KiB a thread, Accera's 16x16 tiles) is kept in the thread's local
        memory instead, its loops not unrolled.

        ``location=MMA_FRAGMENT`` on the accumulator of a tensorized plan: each warp keeps its
        tiles of C in tensor-core fragments across the loops at and inside ``index``, loaded (or
        filled by the SET prologue) once before ``index``'s loop and stored once after it
        (Accera's output caching). Serial loops inside ``index`` that index C (a warp's several
        tiles: register blocking) become the innermost loops around the tensorized ones (serial
        loops between that do not index C, such as Accera's ``kk`` after ``iii, jjj``, move
        outside them: each element of C gets the same products in the same order); they are
        unrolled, each tile getting its own fragment, and each operand fragment is loaded once per
        step and used for every tile that needs it.

        **Requires:** ``index`` is a loop that is neither bound nor tensorized. SHARED: the nest
        only reads ``source``; its footprint fits the target's shared memory (over 48 KiB the
        kernel opts in to dynamic shared memory up to the target's limit). Pipelines: a serial
        loop encloses ``index``; ``cp.async`` needs sm_80+ and tile rows of whole 4-, 8- or
        16-byte vectors; caches at one index share one pipeline. A footprint that reaches past
        the array (a split that does not divide) is copied with zeros beyond the array; a
        tensorized plan with partial tiles needs its operands cached this way (tensor cores
        compute whole tiles). MMA_FRAGMENT: a tensorized plan whose accumulator is ``source``.
        PRIVATE: a SIMT plan; each thread's tile takes at most 2 KiB (128 registers in registers).

        ``element_type`` (MMA_FRAGMENT): the fragments' type when it is not the array's, e.g.
        float16 C accumulated in float32 fragments (``element_type=ScalarType.float32``): C's
        tiles are converted to it when loaded and rounded back to C's type when stored. The
        tensor cores must accumulate in it (``tensor_core_info``). Other caches keep the array's
        type (``element_type`` may only repeat it).

        ``vectorize=False`` (Accera's): a SHARED cache's copies move one element at a time
        (AUTO, True: vectors of up to 16 bytes where alignment allows). ``_shared_memory_offset``
        (Accera's place for the tile in dynamic shared memory) is accepted and not used: schedc
        places every shared buffer itself, aligned and without overlap (the build says so once).

        ``engine``: what fills a SHARED cache. ``CopyEngine.TMA`` (sm_90; AUTO picks it for the
        operands of a wgmma plan): one thread issues ``cp.async.bulk.tensor`` for the block's
        whole tile (a tensor map the loader encodes at each call, zeros past the array),
        completed on an mbarrier; needs rows 16-byte aligned in global memory and tiles of at
        most 256 rows. For wgmma the tiles are a ring of ``stages`` swizzled by 128, 64 or 32
        bytes; for a tile the block's threads read (a plan without tensor cores) it is one dense
        2-D box, filled one tile at a time (``stages=1``), every thread waiting on its
        mbarrier before reading it. ``CopyEngine.THREADS``: the block's threads (cp.async on
        sm_80+).

        *Hardware:* shared memory and ``bar.sync``; ``cp.async`` with ``commit_group`` and
        ``wait_group`` (a sequential cache too, on sm_80+ where the tile moves 4-byte vectors:
        every vector in flight, then one wait); tensor-core fragments (registers). Without an
        MMA_FRAGMENT cache a tensorized plan still keeps C's tile in fragments across the serial
        loop around the tile when A and B come from shared memory.

        Before → after (shared)::

            for kk ...:                       __syncthreads(); block_copy(A_shared <- A[i, k]...)
              ... A[i + ii, k + kk] ...  →    __syncthreads()
                                              for kk ...: ... A_shared[ii, kk] ...
        """
        from .array import Array

        auto = Constants.AUTO
        layout, strategy, element_type = (None if v is auto else v for v in (layout, strategy, element_type))
        double_buffer_location = None if double_buffer_location is auto else double_buffer_location
        vectorize = None if vectorize is auto else vectorize
        name = f"<cache of {source.array.display_name}>" if isinstance(source, Cache) else \
            getattr(source, "display_name", repr(source))
        shown = index.name if isinstance(index, Index) else repr(index)
        where = f"cache({name}, index={shown}, location={_enum_name(location)})"
        index, max_elements = self._cache_index(where, index, level, max_elements, location)
        if thrifty:
            raise CacheError(where, "thrifty=True (skip the copy where the tile already lies as the cache would) "
                                    "is a CPU cache option in Accera; a GPU cache is what the block's threads share: "
                                    "leave thrifty unset")
        _check_offset(where, _shared_memory_offset)
        parent = source if isinstance(source, Cache) else None
        if parent is not None:
            source = self._cache_of_cache(where, parent, location)
        if not isinstance(source, Array):
            raise CacheError(where, f"{source!r} is not an Array")
        if not isinstance(location, MemorySpace):
            raise CacheError(where, f"location must be a MemorySpace, not {location!r}")
        if location not in (MemorySpace.SHARED, MemorySpace.MMA_FRAGMENT, MemorySpace.PRIVATE):
            raise CacheError(where, f"location must be SHARED, PRIVATE or MMA_FRAGMENT, not {_enum_name(location)}")
        if not isinstance(engine, CopyEngine):
            raise CacheError(where, f"engine must be a CopyEngine (AUTO, THREADS, TMA), not {engine!r}")
        if engine is CopyEngine.TMA:
            if location is not MemorySpace.SHARED:
                raise CacheError(where, f"engine=TMA fills SHARED caches, not {location.name}")
            if not self.target.has_wgmma:
                raise CacheError(where, f"engine=TMA needs sm_90 (the tensor memory accelerator); "
                                        f"{self.target.name} is sm_{self.target.spec.sm}")
        pipeline, count = self._pipeline(where, location, double_buffer, double_buffer_location, stages)
        automatic = pipeline == "async" and stages is None and double_buffer_location in (None, MemorySpace.NONE)
        trigger = self._trigger(where, index, trigger_index, trigger_level, level, location)
        order = _check_layout(where, source, location, layout, engine)
        element_type = _check_element_type(where, source, location, element_type)
        if vectorize is not None and not isinstance(vectorize, bool | np.bool_) and vectorize != "AUTO":
            raise CacheError(where, f"vectorize must be True, False or AUTO, not {vectorize!r}")
        if strategy is not None and not isinstance(strategy, CacheStrategy):
            raise CacheError(where, f"strategy must be a CacheStrategy, not {strategy!r}")
        if location in (MemorySpace.MMA_FRAGMENT, MemorySpace.PRIVATE) and strategy is not None:
            raise CacheError(where, f"strategy does not apply to an {location.name} cache (each thread or "
                                    "warp copies its own tile)")
        if index is None and not max_elements:
            raise CacheError(where, "needs index= (the loop the cached data is kept across), level= or max_elements=")
        if index is not None:
            self._check_index(where, index)
        if all(source is not a for a in self.schedule.nest.arrays()):
            raise CacheError(where, f"the nest does not access {name}: there is nothing to cache")
        if any(c.source is source and not (parent is not None and c.location is MemorySpace.SHARED)
               for c in self.caches):
            raise CacheError(where, f"{name} is already cached")
        self.caches.append(
            CacheRequest(source, index, location, strategy or CacheStrategy.AUTO, pipeline, count, automatic, engine,
                         element_type, max_elements or 0, order, parent is not None, trigger,
                         vectorize is None or vectorize == "AUTO" or bool(vectorize))
        )
        return Cache(source, index, location)

    def _trigger(self, where: str, index, trigger_index, trigger_level, level, location: MemorySpace):
        """Accera's trigger_index (or trigger_level, counted as level is): the loop at which the
        cache is filled, not after ``index`` in the schedule's order. None when it is ``index``."""
        if trigger_index is not None and trigger_level is not None:
            raise CacheError(where, "give at most one of trigger_index= and trigger_level=")
        if trigger_level is not None:
            order = self.schedule.order
            if isinstance(trigger_level, bool) or not isinstance(trigger_level, int | np.integer) \
                    or not 1 <= trigger_level <= len(order):
                raise CacheError(where, f"trigger_level must be an integer from 1 (the innermost loop) to "
                                        f"{len(order)}, not {trigger_level!r}")
            if level is not None and trigger_level < level:
                raise CacheError(where, f"trigger_level={trigger_level} is smaller than level={level}: the cache "
                                        "is filled at its level or outside it")
            trigger_index = order[len(order) - int(trigger_level)]
        if trigger_index is None or trigger_index is index:
            return None
        self._check_index(where, trigger_index)
        if location is MemorySpace.MMA_FRAGMENT:
            raise CacheError(where, "an MMA_FRAGMENT cache is loaded and stored at its index: "
                                    "leave trigger_index unset")
        if index is not None:
            order = self.schedule.order
            if order.index(trigger_index) > order.index(index):
                raise CacheError(where, f"trigger_index={trigger_index.name} comes after index={index.name} in the "
                                        f"schedule's order ({_names(order)}); the cache is filled at its index or "
                                        "outside it")
        return trigger_index

    def _cache_of_cache(self, where: str, parent: Cache, location: MemorySpace):
        """Accera's hierarchical caching: ``plan.cache(AA, ...)`` where ``AA`` is what an earlier
        ``plan.cache`` returned. Built: a PRIVATE register tile filled from a SHARED tile (each
        thread's part of the block's tile, at a loop inside the shared cache's). The array."""
        name = parent.array.display_name
        if not any(c.source is parent.array and c.location is parent.location for c in self.caches):
            raise CacheError(where, f"the cache handle of {name} is not one of this plan's caches")
        if parent.location is not MemorySpace.SHARED or location is not MemorySpace.PRIVATE:
            raise CacheError(where, f"a {_enum_name(location)} cache of {name}'s {_enum_name(parent.location)} cache: "
                                    "caches of caches are built as PRIVATE register tiles filled from a SHARED "
                                    "tile (Accera's hierarchical caching of SIMT GEMMs)")
        if any(c.source is parent.array and c.location is MemorySpace.PRIVATE for c in self.caches):
            raise CacheError(where, f"{name} already has a PRIVATE cache")
        return parent.array

    def _cache_index(self, where: str, index, level, max_elements, location: MemorySpace):
        """Accera's three ways to name a cache's loop: ``index``; ``level`` (the loop ``level``
        places from the innermost in the schedule's order: level 1 is the innermost loop);
        ``max_elements`` (the outermost loop whose footprint has at most that many elements,
        chosen when the plan is compiled). Exactly one of them."""
        given = [n for n, v in (("index", index), ("level", level), ("max_elements", max_elements)) if v is not None]
        if len(given) > 1:
            raise CacheError(where, f"give one of index=, level= and max_elements=, not {' and '.join(given)}")
        if level is not None:
            order = self.schedule.order
            if isinstance(level, bool) or not isinstance(level, int | np.integer) or not 1 <= level <= len(order):
                raise CacheError(where, f"level must be an integer from 1 (the innermost loop) to {len(order)}, "
                                        f"not {level!r}")
            return order[len(order) - int(level)], None
        if max_elements is not None:
            if isinstance(max_elements, bool) or not isinstance(max_elements, int | np.integer) or max_elements < 1:
                raise CacheError(where, f"max_elements must be a positive integer, not {max_elements!r}")
            if location is MemorySpace.MMA_FRAGMENT:
                raise CacheError(where, "an MMA_FRAGMENT cache holds C's tiles at a loop given by index=")
            return None, int(max_elements)
        return index, None

    # -- warp specialization ---------------------------------------------------------------------

    @recorded(_later)
    def warp_specialize(self, enabled: bool = True, producer_registers: int | None = None,
                        consumer_registers: int | None = None, teams: int = 1) -> None:
        """Split the block into a producer warpgroup that only issues the TMA copies of the
        SHARED caches and consumer warpgroups that only compute, meeting at a full and an empty
        mbarrier per stage of the ring (sm_90, a plan tensorized with a wgmma shape whose
        operand caches use TMA). ``setmaxnreg`` moves registers from the producer (which needs
        few) to the consumers' accumulators: each producer thread gets ``producer_registers``,
        each consumer thread ``consumer_registers`` (multiples of 8 from 24 to 256; ``setmaxnreg`` only moves the
        registers the block holds at launch, 65536 / threads per thread in units of 8, between
        its roles: 384 threads hold 168 each, so a producer at 40 lets two consumer warpgroups
        rise to 232; by default 40 for the producer and for the consumers an equal share of what
        it releases, at most 232). Without a call, AUTO: on for TMA pipelines.
        ``enabled=False``: every warpgroup computes and one thread issues the copies.

        ``teams``: the consumer warpgroups the WARPGROUP bindings name share each tile of C
        (cooperative, ``teams=1``); with ``teams=2`` (ping-pong) the block holds two such teams
        that take the persistent grid's tiles in turn (``plan.persistent`` required), so that one
        team stores its tile of C while the other multiplies. The teams issue their products in
        tile order (a turn barrier passes from one to the next after its last product of a
        tile); each team's epilogue overlaps the next team's products. Every team holds its
        own accumulators: the registers a consumer thread needs stay those of one tile.

        Before → after (2 consumer warpgroups)::

            for k ...:  wait for tile k          if warpgroup == 2:   # producer
                        wgmma on tile k            for k ...: wait until stage free; TMA tile k
                                                 else:                # consumers
                                                   for k ...: wait for tile k; wgmma; free stage
        """
        where = f"warp_specialize(enabled={enabled!r}, producer_registers={producer_registers!r}, " \
                f"consumer_registers={consumer_registers!r}" + (f", teams={teams!r})" if teams != 1 else ")")
        if not isinstance(enabled, bool):
            raise PlanError(where, f"enabled must be True or False, not {enabled!r}")
        if isinstance(teams, bool) or not isinstance(teams, int | np.integer) or teams < 1:
            raise PlanError(where, f"teams must be a positive integer (consumer teams taking tiles in turn), "
                                   f"not {teams!r}")
        if teams > 1 and not enabled:
            raise PlanError(where, "consumer teams take tiles in turn while a producer warpgroup fills the ring for "
                                   "all of them: keep enabled=True, or teams=1")
        if (producer_registers is None) != (consumer_registers is None):
            raise PlanError(where, "give both producer_registers and consumer_registers, or neither")
        for name, value in (("producer_registers", producer_registers), ("consumer_registers", consumer_registers)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 24 <= value <= 256 \
                    or value % 8:
                raise PlanError(where, f"{name} must be a multiple of 8 from 24 to 256 (setmaxnreg), not {value!r}")
        if enabled and not self.target.has_wgmma:
            raise PlanError(where, f"warp specialization with TMA producers needs sm_90; {self.target.name} is "
                                   f"sm_{self.target.spec.sm}")
        self.specialization = (enabled, int(producer_registers or 0), int(consumer_registers or 0))
        self.teams = int(teams)

    # -- overlap of a chain's products -----------------------------------------------------------

    @recorded(_later)
    def overlap(self, enabled: bool = True) -> None:
        """A chain of products whose second accumulator is kept across the tiles of the first's
        columns (attention: ``O += P @ V`` over the tiles of ``S = Q @ K^T``): each tile's second
        product is issued after the next tile's first product and left in flight under the steps
        between them (the row maximum, the exponentials, their sums), so that the tensor cores
        multiply while the warpgroup computes; its operand's registers (the 16-bit copy of the
        first's tile) live across the loop. FlashAttention-3 calls it the intra-warpgroup overlap.
        The result is the same (the same products in the same order).

        **Requires:** a wgmma chain whose second accumulator is kept across the loop over the
        first's tiles (the fusing index inside it), one team of consumers, and the registers of
        the first's tile, its 16-bit copy and the second's accumulator at once. Where the first's
        columns are one tile there is nothing to overlap: the kernel is the same as without it.

        Before → after (tile j of S; P its 16-bit copy)::

            for j:  S = Q @ K[j]; wait           for j:  S = Q @ K[j]
                    softmax(S); P = S                    if j > 0: O += P @ V[j-1]   (in flight)
                    O *= corr; O += P @ V[j]             wait for S; softmax(S)
                    wait                                 if j > 0: wait for O
                                                         P = S; O *= corr
                                                         if j is last: O += P @ V[j]; wait
        """
        if not isinstance(enabled, bool):
            raise PlanError(f"overlap(enabled={enabled!r})", "enabled must be True or False")
        self.overlapped = enabled

    @recorded(_later)
    def alternate(self, enabled: bool = True) -> None:
        """The consumer warpgroups of a chain take turns at issuing their products, one tile of
        the first's columns at a time (FlashAttention-3's ping-pong scheduling): warpgroup ``w``
        waits for its turn before the tile's first product, issues it (and, with
        ``plan.overlap``, the tile before's second product) and hands the turn to warpgroup
        ``w + 1`` (the last to the first) before it waits for them. While one warpgroup
        computes its softmax, the next one's products run on the tensor cores. The turns are
        named barriers (``bar.sync`` on the warpgroup's own, ``bar.arrive`` on the next one's,
        ids 8 and up); they order the issues alone, so the result is the same.

        **Requires:** a wgmma chain whose second accumulator is kept across the loop over the
        first's tiles (the fusing index inside it) and one team of consumers. With one consumer
        warpgroup, or where the first's columns are one tile, there is nothing to alternate: the
        kernel is the same as without it.

        Before → after (two consumer warpgroups, tile j of S)::

            for j:  S = Q @ K[j]                     for j:  wait for my turn
                    [O += P @ V[j-1]]                        S = Q @ K[j]; [O += P @ V[j-1]]
                    wait; softmax(S) ...                     hand the turn to the other warpgroup
                                                             wait; softmax(S) ...
        """
        if not isinstance(enabled, bool):
            raise PlanError(f"alternate(enabled={enabled!r})", "enabled must be True or False")
        self.alternated = enabled

    # -- persistent grid ----------------------------------------------------------------------

    @recorded(_later)
    def persistent(self, group: int = 8, blocks: int | None = None) -> None:
        """Launch only as many blocks as the multiprocessors hold at once and let each loop over
        the output tiles the grid's blocks would compute: block ``b`` takes tiles ``b``,
        ``b + blocks``, ``b + 2 * blocks``, ... (``blocks``: by default the target's
        multiprocessors times ``create_plan(_blocks_per_SM=)``, or one each; never more than
        there are tiles). Tiles are numbered in groups of ``group`` rows of blocks (BLOCK_Y),
        column (BLOCK_X) by column within a group, so that the blocks running at one time read
        the same rows of A and columns of B from L2. With a TMA pipeline the ring of stages runs
        on from one tile to the next: the producer copies the next tile's operands while the
        consumers store this one's C.

        **Requires:** ``group`` and ``blocks`` positive integers. The result is the same for
        every value (only the order of the tiles changes).

        Before → after (grid of 32 x 16 blocks, 132 blocks resident)::

            blockIdx = (x, y)                    for (work = blockIdx.x; work < 512; work += 132)
            ... tile (x, y) ...             →      (x, y) = the work-th tile in grouped order
                                                   ... tile (x, y) ...
        """
        where = f"persistent(group={group!r}, blocks={blocks!r})"
        for name, value in (("group", group), ("blocks", blocks)):
            if value is None and name == "blocks":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= 2**31 - 1:
                raise PlanError(where, f"{name} must be a positive integer, not {value!r}")
        self.persistence = (int(group), int(blocks or 0))

    # -- split-K --------------------------------------------------------------------------------

    @recorded(_later)
    def split_k(self, deterministic: bool = True) -> None:
        """How blocks that split a reduction combine their sums (split-K: a loop of a dimension
        the statements sum over, bound to a grid unit). ``deterministic`` (the default): each
        block sums into its slice of a float32 workspace and a second kernel adds the slices to
        C in a fixed order, the same bits every run. ``deterministic=False``: each block adds
        its tile of sums into C itself, in whatever order the blocks finish (TMA reductions,
        ``cp.reduce.async.bulk.tensor``): no workspace and no second kernel, but the rounding
        may differ between runs.

        ``deterministic=False`` without a split (no loop of k bound to a grid unit): each block
        adds its tiles' whole sums into C the same way, instead of loading C's tiles before the
        products and storing them after; the L2 cache adds them to C. Each element is added to
        once, so the bits are the same every run, but the sum is rounded to C's type before the
        addition (twice in all, against once when the block adds C; a prologue op's kernel
        rounds C once more). Where C's traffic is a large share of the work (short k), this is
        the faster epilogue: fp16 8192 x 4096 x 2048 on 128 x 256 tiles 2-4% (BENCHMARKS.md).

        **Requires** (``deterministic=False``): a wgmma plan whose C tiles leave by TMA (a
        row-major 2-D C of float32, float16, bfloat16 or 32-bit integers, rows 16 bytes apart,
        with two shared slots a warpgroup beside the operand ring); every statement a reduction
        ``C += ...`` of one array that they do not read otherwise; C's fragments cached at a loop
        outside every serial loop of the summed dimension (each tile added once a block); no
        epilogue op (it applies to the whole new value, which only L2 sees) and no fused
        schedule; a Role.OUTPUT C only with the SET prologue; a prologue op is applied to C by a
        kernel before the products (not with run-time sizes).

        Before → after (k in 2 parts on BLOCK_Z; without a split, one part)::

            C[i, j] += A[i, k] * B[k, j]      C_tile = A[i, part] @ B[part, j]   (each block)
                                              C[tile] += C_tile                  (TMA reduction)
        """
        if not isinstance(deterministic, bool):
            raise PlanError(f"split_k(deterministic={deterministic!r})", "deterministic must be True or False")
        self.split_deterministic = deterministic

    # -- thread block clusters ------------------------------------------------------------------

    @recorded(_later)
    def cluster(self, size: int = 2, unit: GridUnit = GridUnit.BLOCK_Y) -> None:
        """Group ``size`` blocks whose tiles are neighbours along ``unit`` (a block unit) into a
        thread block cluster (sm_90) that shares the operand tiles which do not change along
        ``unit``: each block copies ``1/size`` of such a tile with TMA *multicast*, which lands
        it in the shared memory of every block of the cluster. With ``i`` on BLOCK_Y, two
        blocks of one column of C read the same tile of B: clustered along BLOCK_Y they read
        it from L2 once instead of twice (a third less L2 traffic for 128 x 256 tiles). The
        stages of the ring are freed cluster-wide: a block refills a stage only after the
        consumers of every block in the cluster are done with it.

        ``size=1`` is no cluster (so that a parameter grid can leave clusters out).

        **Requires:** a wgmma plan whose SHARED caches are TMA tiles; ``size`` 1, 2, 4 or 8; the
        blocks along ``unit`` a multiple of ``size``; a shared tile that splits into ``size``
        parts of whole 1024-byte swizzle atoms (row chunks, or groups of 8 rows); with
        ``plan.persistent``, ``unit`` BLOCK_Y (the grouped order walks it) and a ``group`` that
        is a multiple of ``size``. The result is the same as without the cluster.

        Before → after (C tiles (x, 2c) and (x, 2c+1), B's tile read once)::

            block (x, 2c):   TMA A(2c), B(x)           cluster {(x, 2c), (x, 2c+1)}:
            block (x, 2c+1): TMA A(2c+1), B(x)    →      rank r: TMA A(2c+r), half r of B(x) to both
        """
        where = f"cluster(size={size!r}, unit={_enum_name(unit)})"
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size not in (1, 2, 4, 8):
            raise PlanError(where, f"size must be 2, 4 or 8 blocks (a portable cluster holds at most 8; 1: no "
                                   f"cluster), not {size!r}")
        if not isinstance(unit, GridUnit) or unit.level != "block":
            raise PlanError(where, f"unit must be BLOCK_X, BLOCK_Y or BLOCK_Z, not {_enum_name(unit)}")
        if size == 1:
            self.clustering = None
            return
        if not self.target.has_wgmma:
            raise PlanError(where, f"thread block clusters need sm_90; {self.target.name} is sm_{self.target.spec.sm}")
        self.clustering = (unit, int(size))

    # -- Accera's launch helpers (its GEMM benchmarker checks variants with them) -----------------

    def _calc_block_grid_dim(self) -> tuple[list[int], list[int]]:
        """([x, y, z] threads of a block, [x, y, z] blocks of the grid) as the bindings give
        them: a loop's iterations per unit (the product for a tuple of loops), a warp 32 threads
        along x, a warpgroup 128 (a warp-specialized plan adds its producer warpgroup when built).

        >>> import schedc as acc
        >>> A = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(256, 128))
        >>> nest = acc.Nest((256, 128)); i, j = nest.get_indices()
        >>> @nest.iteration_logic
        ... def _():
        ...     A[i, j] += 1.0
        >>> s = nest.create_schedule(); ii, jj = s.tile({i: 16, j: 32})
        >>> plan = s.create_plan(acc.Target(acc.Target.Model.NVIDIA_A100))
        >>> plan.bind({i: acc.GridUnit.BLOCK_Y, j: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y,
        ...            jj: acc.GridUnit.THREAD_X})
        >>> plan._calc_block_grid_dim()
        ([32, 16, 1], [4, 16, 1])
        """
        schedule = self.schedule

        def extent(index: Index) -> int:  # a split past its range has the range's values only
            p = schedule.pieces[index]
            if isinstance(p.end, Affine):
                raise PlanError("plan._calc_block_grid_dim()", f"{index.name} runs to the run-time size {p.end}: the "
                                                               "grid is computed at each call")
            span = min([p.end - p.begin, *(schedule.groups[g].end - schedule.groups[g].begin for g in p.groups)])
            return -(-span // p.step)

        def iterations(unit: GridUnit) -> int:
            return math.prod(extent(x) for x in self.bindings[unit])

        block, grid = [1, 1, 1], [1, 1, 1]
        units = {u: iterations(u) for u in self.bindings}
        warps = self.tensorization is not None or any(u.level in ("warp", "warpgroup") for u in units)
        for unit, count in units.items():
            axis = "xyz".index(unit.axis)
            if unit.level == "block":
                grid[axis] = count
            elif unit.level == "thread":
                block[axis] = count
            elif unit.level == "warp":
                block[axis] = count * (self.target.warp_size if axis == 0 else 1)
        if any(u.level == "warpgroup" for u in units):
            block = [128 * math.prod(c for u, c in units.items() if u.level == "warpgroup"), 1, 1]
        elif warps and not any(u.level == "warp" and u.axis == "x" for u in units):
            block[0] = self.target.warp_size
        return block, grid

    def _is_valid_block_dim(self, block_dims) -> bool:
        """Whether each of ``block_dims`` is within the target's ``max_block_size``."""
        return all(d <= m for d, m in zip(block_dims, self.target.max_block_size, strict=True))

    def _is_valid_block_size(self, block_dims) -> bool:
        """Whether the block's threads are within the target's ``max_threads_per_block``."""
        return math.prod(block_dims) <= self.target.max_threads_per_block

    def _pipeline(self, where, location, double_buffer, buffer_location, stages) -> tuple[str, int]:
        """(pipeline, stages) from the double-buffer arguments, AUTO resolved for the target."""
        if not isinstance(double_buffer, bool):
            raise CacheError(where, f"double_buffer must be True or False, not {double_buffer!r}")
        if buffer_location is not None and buffer_location not in (
            MemorySpace.NONE, MemorySpace.PRIVATE, MemorySpace.SHARED
        ):
            raise CacheError(where, f"double_buffer_location must be PRIVATE, SHARED or AUTO (None), "
                                    f"not {_enum_name(buffer_location)}")
        if not double_buffer and stages is None:
            if buffer_location is not None:
                raise CacheError(where, "double_buffer_location needs double_buffer=True")
            return "sync", 1
        if location is not MemorySpace.SHARED:
            raise CacheError(where, "double buffers and stages apply to SHARED caches")
        if stages is not None:
            if isinstance(stages, bool) or not isinstance(stages, int | np.integer) or not 1 <= stages <= 8:
                raise CacheError(where, f"stages must be an integer from 1 to 8, not {stages!r}")
            if buffer_location is MemorySpace.PRIVATE:
                raise CacheError(where, "stages are shared buffers filled with cp.async; a PRIVATE "
                                        "double buffer has one shared buffer and registers")
            if double_buffer and stages != 2:
                raise CacheError(where, f"double_buffer=True means 2 stages, not {stages}; give stages alone")
        async_copy = self.target.has_async_copy
        if buffer_location is MemorySpace.PRIVATE or (
            stages is None and buffer_location in (None, MemorySpace.NONE) and not async_copy
        ):
            return "registers", 1
        if not async_copy:
            raise CacheError(where, f"{self.target.name} (sm_{self.target.spec.sm}) has no cp.async "
                                    "(sm_80+); use double_buffer_location=PRIVATE")
        return "async", int(stages) if stages is not None else 2

    # -- unroll ------------------------------------------------------------------------------

    @recorded(_later)
    def unroll(self, index: Index) -> None:
        """Unroll the loop of ``index`` completely (``#pragma unroll``).

        **Requires:** an index of this schedule that is not bound to the grid.
        """
        where = f"unroll({index.name if isinstance(index, Index) else index!r})"
        self._check_index(where, index)
        if index in self.unrolled:
            raise PlanError(where, f"{index.name} is already unrolled")
        self.unrolled.append(index)

    # -- helpers -----------------------------------------------------------------------------

    def _check_index(self, where: str, index: object) -> None:
        if not isinstance(index, Index):
            raise PlanError(where, f"{index!r} is not an index")
        if index not in self.schedule.pieces:
            owner = "another nest" if index.owner is not self.schedule.nest else "another schedule"
            raise PlanError(where, f"index {index.name} belongs to {owner}")


def _zero(value: object) -> bool:
    """Accera's 0 for an unset size (an int 0, not False)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value == 0


_OFFSET_SAID = []  # the note about _shared_memory_offset is printed once per process


def _check_offset(where: str, offset: object) -> None:
    """Accera's ``_shared_memory_offset`` (where a cache lies in dynamic shared memory): a
    non-negative integer, accepted; schedc places every shared buffer itself (aligned, without
    overlap), which the kernel's results do not depend on, and says so once."""
    if offset is None:
        return
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or offset < 0:
        raise CacheError(where, f"_shared_memory_offset must be a non-negative integer, not {offset!r}")
    if offset and not _OFFSET_SAID:
        _OFFSET_SAID.append(True)
        print(f"note: {where}: _shared_memory_offset={offset}: schedc places every shared buffer itself (aligned, "
              "without overlap); the offset is not used", file=sys.stderr)


def _positive(where: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise PlanError(where, f"{name} must be a positive integer, not {value!r}")
    return int(value)


def _names(group) -> str:
    return ", ".join(i.name if isinstance(i, Index) else repr(i) for i in group)


def _enum_name(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


def _render_pair(group: object) -> str:
    """``(i, j)`` or ``(BLOCK_X,)``: an index or unit tuple of the older ``bind`` form."""
    if not isinstance(group, tuple | list):
        return _names((group,))
    items = [_enum_name(x) if isinstance(x, enum.Enum) else _names((x,)) for x in group]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _render_binding(mapping: object) -> str:
    if not isinstance(mapping, Mapping):
        return repr(mapping)
    parts = []
    for key, unit in mapping.items():
        left = f"({_names(key)})" if isinstance(key, tuple) else _names((key,))
        parts.append(f"{left}: {_enum_name(unit)}")
    return "{" + ", ".join(parts) + "}"


def _check_element_type(where: str, source, location: MemorySpace, element_type) -> ScalarType | None:
    """The fragments' type of an MMA_FRAGMENT cache, or None when it is the array's own."""
    if element_type is None or element_type is source.element_type:
        return None
    if not isinstance(element_type, ScalarType):
        raise CacheError(where, f"element_type must be a ScalarType, not {element_type!r}")
    if location is not MemorySpace.MMA_FRAGMENT:
        raise CacheError(where, f"element_type {element_type.value}: only MMA_FRAGMENT caches convert "
                                f"({source.display_name} is {source.element_type.value}); leave it unset")
    if not (element_type.is_float and source.element_type.is_float):
        raise CacheError(where, f"element_type {element_type.value} for {source.element_type.value} "
                                f"{source.display_name}: fragments convert between floating-point types only")
    return element_type


def _check_layout(where: str, source, location: MemorySpace, layout, engine: CopyEngine) -> tuple[int, ...]:
    """The dimension order (slowest first) of a SHARED tile whose ``layout`` differs from its
    array's, () otherwise. A shared tile may be transposed (the block's threads read the array
    along its rows and write the tile along its columns; a tile of rank over 2 one 2-D slice of
    its last two dimensions at a time); register tiles (PRIVATE) and fragments (MMA_FRAGMENT)
    are registers, which have no layout: any is accepted there."""
    from ..tma import dimension_order
    from .array import Array

    if layout is None:
        return ()
    if not isinstance(layout, Array.Layout):
        raise CacheError(where, f"layout must be an Array.Layout (or None: the array's own), not {layout!r}")
    order = dimension_order(source.strides)
    natural = tuple(range(len(order)))
    wanted = natural if layout is Array.Layout.FIRST_MAJOR else natural[::-1]
    if order == wanted or location is not MemorySpace.SHARED:
        return ()
    if engine is CopyEngine.TMA:
        raise CacheError(where, f"layout {layout.name}: the array has strides {list(source.strides)} (dimension "
                                f"{order[-1]} contiguous) and a TMA box keeps the array's layout: leave layout unset")
    return wanted
