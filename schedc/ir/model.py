"""The frozen Model: everything the compiler needs from a plan, as plain values.

``schedc.frontend.freeze.freeze(plan, name, args)`` is the only place front-end objects (Array, Index,
Plan) are read; every later stage works on the Model. Statements use the kernel IR's expressions, with ``Var``
naming nest dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..instructions import Instruction
from ..targets import MODELS, CacheStrategy, CopyEngine, GPUModel, GridUnit, MemorySpace, MMAFragmentOp, MMAShape
from ..targets import Model as TargetModel
from . import kernel as k
from .types import ScalarType


@k.register
@dataclass(frozen=True)
class LoopSpec:
    """A schedule index: piece of nest dimension ``dim`` taking range(begin, end, step)."""

    name: str
    dim: int
    begin: int
    end: int
    step: int

    @property
    def extent(self) -> int:
        return -(-(self.end - self.begin) // self.step)


@k.register
@dataclass(frozen=True)
class GroupSpec:
    """A split constraint: begin <= sum of ``members`` < end."""

    begin: int
    end: int
    members: tuple[str, ...]


@k.register
@dataclass(frozen=True)
class BindingSpec:
    unit: GridUnit
    loops: tuple[str, ...]


@k.register
@dataclass(frozen=True)
class TensorizeSpec:
    loops: tuple[str, str, str]  # m, n, k
    mma_shape: MMAShape
    passes: int
    fused_passes: int
    prologue_op: MMAFragmentOp
    prologue_arg: float
    epilogue_op: MMAFragmentOp
    epilogue_arg: float
    instruction: Instruction = Instruction.AUTO
    block_order: bool = False  # MMASchedulingPolicy.BLOCK_ORDER: a tile's passes together


@k.register
@dataclass(frozen=True)
class CacheSpec:
    array: str
    index: str
    location: MemorySpace
    strategy: CacheStrategy = CacheStrategy.AUTO
    pipeline: str = "sync"  # sync: copy between barriers; registers: register double buffer;
    stages: int = 1  # async: a ring of ``stages`` shared buffers filled with cp.async
    automatic: bool = False  # async chosen by AUTO: a register double buffer where cp.async cannot copy
    engine: CopyEngine = CopyEngine.AUTO  # what fills the tile: threads, TMA, or AUTO
    element_type: ScalarType | None = None  # MMA_FRAGMENT: the fragments' type, if not the array's
    max_elements: int = 0  # index "": the outermost loop whose footprint has at most this many elements
    order: tuple[int, ...] = ()  # SHARED: the tile's dimensions slowest first, when not the array's (transposed)
    from_shared: bool = False  # PRIVATE: filled from the array's SHARED cache (a cache of a cache)
    trigger: str = ""  # trigger_index other than index: the loop the cache is filled at
    vectorize: bool = True  # SHARED: copies in vectors where alignment allows (False: element by element)


@k.register
@dataclass(frozen=True)
class Model:
    function: str
    target: TargetModel
    buffers: tuple[k.Buffer, ...]  # params first, in call order; then const and temp arrays
    dims: tuple[tuple[str, int], ...]  # nest dimensions (name, extent)
    statements: tuple[k.Store, ...]  # over nest dimensions, in program order
    loops: tuple[LoopSpec, ...]  # schedule order, outermost first
    groups: tuple[GroupSpec, ...]
    bindings: tuple[BindingSpec, ...]
    tensorize: TensorizeSpec | None
    unrolled: tuple[str, ...]
    caches: tuple[CacheSpec, ...] = ()
    blocks_per_sm: int = 0  # create_plan(_blocks_per_SM=): blocks a multiprocessor should hold (0: any)
    dynamic_shared: int = 0  # create_plan(_dynamic_shared_memory_size=): bytes per block (0: what caches need)
    # plan.warp_specialize(enabled, producer registers, consumer registers); None: AUTO
    specialization: tuple[bool, int, int] | None = None
    persistence: tuple[int, int] | None = None  # plan.persistent: (group, blocks; 0 = one per multiprocessor)
    clustering: tuple[GridUnit, int] | None = None  # plan.cluster: (the block unit, blocks along it)
    split_deterministic: bool = True  # plan.split_k: a split reduction's sums added in a fixed order
    adds_into: str = ""  # split-K in any order: the array the statements' stores add into (TMA reductions)

    @property
    def gpu(self) -> GPUModel:
        return MODELS[self.target]

    def buffer(self, name: str) -> k.Buffer:
        return next(b for b in self.buffers if b.name == name)

    def loop(self, name: str) -> LoopSpec:
        return next(lp for lp in self.loops if lp.name == name)

    def binding_of(self, loop: str) -> GridUnit | None:
        for b in self.bindings:
            if loop in b.loops:
                return b.unit
        return None

    @property
    def serial_loops(self) -> tuple[str, ...]:
        """The loops each thread runs itself, in schedule order: neither bound nor tensorized."""
        tile = self.tensorize.loops if self.tensorize else ()
        return tuple(lp.name for lp in self.loops if lp.name not in tile and self.binding_of(lp.name) is None)
