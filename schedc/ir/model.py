"""The frozen Model: everything the compiler needs from a plan, as plain values.

``schedc.frontend.freeze.freeze(plan, name, args)`` is the only place front-end objects (Array, Index,
Plan) are read; every later stage works on the Model. Statements use the kernel IR's expressions, with ``Var``
naming nest dimensions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..instructions import Instruction
from ..targets import MODELS, CacheStrategy, CopyEngine, GPUModel, GridUnit, MemorySpace, MMAFragmentOp, MMAShape
from ..targets import Model as TargetModel
from . import kernel as k
from . import sizes
from .affine import Affine
from .types import ScalarType
from .walk import loads


@k.register
@dataclass(frozen=True)
class LoopSpec:
    """A schedule index: piece of nest dimension ``dim`` taking range(begin, end, step)."""

    name: str
    dim: int
    begin: int
    end: int | Affine  # a run-time size's Affine for the outer loop of its dimension
    step: int

    @property
    def extent(self) -> int:
        """Iterations of a loop of fixed range."""
        if isinstance(self.end, Affine):
            raise TypeError(f"loop {self.name} runs to the run-time size {self.end}: its count has no fixed value")
        return -(-(self.end - self.begin) // self.step)

    @property
    def fixed(self) -> bool:
        return not isinstance(self.end, Affine)


@k.register
@dataclass(frozen=True)
class GroupSpec:
    """A split constraint: begin <= sum of ``members`` < end, each member's value times its weight
    in ``scaled`` (1 where it has none: a split keys' part loop counts parts of so many keys)."""

    begin: int
    end: int | Affine
    members: tuple[str, ...]
    scaled: tuple[tuple[str, int], ...] = ()

    @property
    def weighted(self) -> tuple[tuple[str, int], ...]:
        """Each member with its weight."""
        weights = dict(self.scaled)
        return tuple((m, weights.get(m, 1)) for m in self.members)


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
class FusionSpec:
    """Accera's ``fuse`` of schedules: the statements fall into ``parts`` (one per fused
    schedule, in order; each a tuple of positions in ``Model.statements``), and at each point of
    the fused dimensions part 0's work runs whole before part 1's, and so on. ``unfused`` lists
    per part the nest dimensions (positions in ``Model.dims``) only its statements iterate: the
    other parts run at their first value. The fusing index sits before ``loops[at]``: loops before
    it run once for every part, loops after it once per part (a part skips the loops of the
    others' unfused dimensions)."""

    at: int
    parts: tuple[tuple[int, ...], ...]
    unfused: tuple[tuple[int, ...], ...]
    name: str = "f"  # the fusing index, as the script names it

    def part_of(self, statement: int) -> int:
        return next(p for p, members in enumerate(self.parts) if statement in members)

    def foreign(self, part: int) -> frozenset[int]:
        """The dimensions part ``part`` does not iterate: the other parts' unfused ones."""
        return frozenset(d for q, dims in enumerate(self.unfused) if q != part for d in dims)


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
    teams: int = 1  # warp_specialize(teams=): consumer teams taking a persistent grid's tiles in turn
    persistence: tuple[int, int] | None = None  # plan.persistent: (group, blocks; 0 = one per multiprocessor)
    clustering: tuple[GridUnit, int] | None = None  # plan.cluster: (the block unit, blocks along it)
    split_deterministic: bool = True  # plan.split_k: a split reduction's sums added in a fixed order
    overlap: bool = False  # plan.overlap: a chain's second product of a tile under the next tile's first
    alternate: bool = False  # plan.alternate: the consumer warpgroups issue a chain's tiles' products in turn
    adds_into: str = ""  # split-K in any order: the array the statements' stores add into (TMA reductions)
    fusion: FusionSpec | None = None  # acc.fuse: the statements in parts, run in turn per fused point
    # a second tensorize of a fused schedule: fused part 1's product, its A the first product's C
    # (a chain of products: lower/chained.py)
    chained: TensorizeSpec | None = None
    # run-time sizes (create_dimensions): (name, position in Package.add's args); dims, loop and group
    # ends and the buffers' shapes hold them as Affines of the sizes
    sizes: tuple[tuple[str, int], ...] = ()

    @property
    def gpu(self) -> GPUModel:
        return MODELS[self.target]

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.sizes)

    def at(self, values: dict[str, int]) -> Model:
        """The Model for the run-time sizes ``values``: every extent a number (itself when fixed)."""
        if not self.sizes:
            return self
        fix = lambda e: sizes.at(e, values)  # noqa: E731
        return dataclasses.replace(
            self, sizes=(),
            dims=tuple((name, fix(n)) for name, n in self.dims),
            loops=tuple(dataclasses.replace(lp, end=fix(lp.end)) for lp in self.loops),
            groups=tuple(dataclasses.replace(g, end=fix(g.end)) for g in self.groups),
            buffers=tuple(dataclasses.replace(b, shape=tuple(fix(n) for n in b.shape)) for b in self.buffers))

    def buffer(self, name: str) -> k.Buffer:
        return next(b for b in self.buffers if b.name == name)

    def loop(self, name: str) -> LoopSpec:
        return next(lp for lp in self.loops if lp.name == name)

    def binding_of(self, loop: str) -> GridUnit | None:
        for b in self.bindings:
            if loop in b.loops:
                return b.unit
        return None

    def part(self, number: int) -> Model:
        """Part ``number`` of a fused Model as a Model of its own: its statements, its loops (the
        others' unfused dimensions have extent 1 and no loop); a tensorized product is the first
        part, the others element-wise statements in C's type, or a chained product the second. The
        Model itself when unfused."""
        if self.fusion is None:
            return self
        foreign = self.fusion.foreign(number)
        dims = tuple((name, 1 if d in foreign else n) for d, (name, n) in enumerate(self.dims))
        loops = tuple(lp for lp in self.loops if lp.dim not in foreign)
        kept = {lp.name for lp in loops}
        return dataclasses.replace(
            self, dims=dims, statements=tuple(self.statements[s] for s in self.fusion.parts[number]), loops=loops,
            groups=tuple(g for g in self.groups if set(g.members) <= kept),
            bindings=tuple(b for b in self.bindings if set(b.loops) <= kept), fusion=None,
            tensorize=self.tensorize if number == 0 else self.chained if number == self._chained_part else None,
            chained=None)

    @property
    def _chained_part(self) -> int:
        """The part a chained product is (the last), or -1."""
        return len(self.fusion.parts) - 1 if self.chained is not None and self.fusion is not None else -1

    def head(self, count: int) -> Model:
        """The first ``count`` parts of a fused Model, still fused (part 0 alone when ``count`` is 1):
        a chain's first product with the element-wise parts on its C before the second."""
        if count == 1:
            return self.part(0)
        fusion = self.fusion
        foreign = frozenset(d for dims in fusion.unfused[count:] for d in dims)
        dims = tuple((name, 1 if d in foreign else n) for d, (name, n) in enumerate(self.dims))
        loops = tuple(lp for lp in self.loops if lp.dim not in foreign)
        kept = {lp.name for lp in loops}
        order = [n for members in fusion.parts[:count] for n in members]
        position = {n: p for p, n in enumerate(order)}
        parts = tuple(tuple(position[n] for n in members) for members in fusion.parts[:count])
        return dataclasses.replace(
            self, dims=dims, statements=tuple(self.statements[n] for n in order), loops=loops,
            groups=tuple(g for g in self.groups if set(g.members) <= kept),
            bindings=tuple(b for b in self.bindings if set(b.loops) <= kept),
            fusion=dataclasses.replace(fusion, parts=parts, unfused=fusion.unfused[:count]), chained=None)

    @property
    def outside_fusion(self) -> frozenset[str]:
        """The loops before a fused schedule's fusing index: every part runs inside them (none
        when unfused)."""
        return frozenset(lp.name for lp in self.loops[:self.fusion.at]) if self.fusion is not None else frozenset()

    @property
    def parts(self) -> tuple[Model, ...]:
        """The Model's parts in the order they run (itself alone when unfused)."""
        if self.fusion is None:
            return (self,)
        return tuple(self.part(p) for p in range(len(self.fusion.parts)))

    @property
    def split_sums(self) -> tuple[tuple[GridUnit, str], ...]:
        """The block-bound loops of dimensions no statement's written element depends on (each
        splits the statements' sums between blocks: split-K), with their units."""
        return tuple((b.unit, name) for b in self.bindings if b.unit.level == "block" for name in b.loops
                     if self.sums_over(self.loop(name).dim))

    def sums_over(self, dim: int) -> bool:
        """Whether no statement's written element depends on nest dimension ``dim``."""
        name = self.dims[dim][0]
        return all(name not in Affine.of(i).coeffs for s in self.statements for i in s.index)

    @property
    def serial_loops(self) -> tuple[str, ...]:
        """The loops each thread runs itself, in schedule order: neither bound nor tensorized."""
        tile = self.tensorize.loops if self.tensorize else ()
        return tuple(lp.name for lp in self.loops if lp.name not in tile and self.binding_of(lp.name) is None)

    def first_serial(self, index: str) -> str | None:
        """``index`` if each thread runs its loop, else the first such loop after it in the
        schedule's order (None: none follows): where a block fills a cache kept across ``index``."""
        serial = self.serial_loops
        if index in serial:
            return index
        names = [lp.name for lp in self.loops]
        after = [n for n in serial if names.index(n) > names.index(index)]
        return after[0] if after else None

    @property
    def undefined_reads(self) -> tuple[str, ...]:
        """The arrays the statements read that start undefined, OUTPUT and TEMP ones, so that each
        read must follow a write of its element; not a tensorized C whose fragments start at a value
        (``prologue_op=SET``), which the product does not read (nor a chained product's C)."""
        products = ((self.tensorize, 0), (self.chained, self.fusion.parts[-1][0] if self.chained else 0))
        starts = {self.statements[n].buffer for t, n in products
                  if t is not None and t.prologue_op is MMAFragmentOp.SET}
        read = dict.fromkeys(ld.buffer for s in self.statements for ld in loads(s.value))
        return tuple(a for a in read if a not in starts and self.buffer(a).role in ("output", "temp"))
