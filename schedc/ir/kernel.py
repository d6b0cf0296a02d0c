"""The kernel IR: frozen dataclasses with tuple fields, one node per concept.

Expressions are shared with the frozen Model's statements: there ``Var`` names nest
dimensions; in a kernel it names loop variables, locals, scalar parameters and the special
registers ``threadIdx.x``, ``blockIdx.y``, .... Subscripts stay multi-dimensional; the CUDA backend
linearises them with the buffer's strides. Change a node with ``dataclasses.replace``.

>>> x = Binary("+", Var("i"), Const(1))
>>> x
Binary(op='+', lhs=Var(name='i'), rhs=Const(value=1, dtype=None), dtype=None)
>>> from_json(to_json(x)) == x
True
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass

from .functions import SIGNATURES, Function
from .types import ScalarType

# -- expressions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    """A named integer value: loop variable, local, nest dimension or special register."""

    name: str


@dataclass(frozen=True)
class Const:
    value: int | float | bool
    dtype: ScalarType | None = None  # None: an index (integer) constant


@dataclass(frozen=True)
class Binary:
    """Arithmetic (+ - * / % max min), comparisons (< <= > >= == !=) and logic (&& ||)."""

    op: str
    lhs: Expr
    rhs: Expr
    dtype: ScalarType | None = None  # None: index arithmetic (or a comparison of indices); bool: a test


COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
LOGIC = frozenset({"&&", "||"})


@dataclass(frozen=True)
class Unary:
    op: str  # "-"
    operand: Expr
    dtype: ScalarType | None = None


@dataclass(frozen=True)
class Cast:
    operand: Expr
    dtype: ScalarType


@dataclass(frozen=True)
class Call:
    """An element-wise function of ``args`` (``functions.SIGNATURES``): math in ``dtype``,
    ``logical_not`` of a bool, ``select(cond, a, b)`` (both values computed, as every access)."""

    function: Function
    args: tuple[Expr, ...]
    dtype: ScalarType

    def __post_init__(self) -> None:
        object.__setattr__(self, "function", Function(self.function))
        if len(self.args) != SIGNATURES[self.function].arity:
            raise ValueError(f"{self.function.value} takes {SIGNATURES[self.function].arity} arguments, "
                             f"not {len(self.args)}")


@dataclass(frozen=True)
class Load:
    """Element ``buffer[index]`` of a global array (multi-dimensional subscript)."""

    buffer: str
    index: tuple[Expr, ...]
    dtype: ScalarType


Expr = Var | Const | Binary | Unary | Cast | Call | Load

# -- kinds (a node's field of one of these takes the string too, and is checked when made) --------


class FragmentUse(enum.StrEnum):
    """What a tensor-core tile holds."""

    MATRIX_A = "matrix_a"
    MATRIX_B = "matrix_b"
    ACCUMULATOR = "accumulator"


class AccumulatorOp(enum.StrEnum):
    """An element-wise op on an accumulator tile (``FragmentApply``): ``x * arg``, ``max(x, 0)``, ``arg``."""

    SCALE = "scale"
    RELU = "relu"
    SET = "set"


class TilePath(enum.StrEnum):
    """How a family moves a tile between memory and a fragment (``FragmentLoad.path``)."""

    ONLY = ""  # the family's only way (wmma)
    LDMATRIX = "ldmatrix"  # mma.sync: ldmatrix from shared memory
    ELEMENTS = "elements"  # each lane its own elements
    DESCRIPTOR = "descriptor"  # wgmma: the tile stays in shared memory, read through a descriptor


class CopyStrategy(enum.StrEnum):
    """How a block copy splits its vectors between threads (``BlockCopy.strategy``)."""

    STRIPED = "striped"
    BLOCKED = "blocked"


class FenceKind(enum.StrEnum):
    MBARRIER_INIT = "mbarrier_init"
    PROXY_ASYNC = "proxy_async"


class SyncScope(enum.StrEnum):
    """Which threads a statement makes meet, or must run together (``Facts.scope``)."""

    THREAD = "thread"  # none: each thread that runs it, on its own
    WARP = "warp"  # the threads of a warp, converged
    WARPGROUP = "warpgroup"  # the four warps of a warpgroup (wgmma's fence, commit and wait)
    NAMED = "named"  # the threads that run it with the same barrier id (``bar.sync id, count``)
    MBARRIER = "mbarrier"  # the threads (and copies) that arrive on one mbarrier's phase
    BLOCK = "block"  # every thread of the block: reached by all of them, never under a divergent branch
    CLUSTER = "cluster"  # every thread of every block of the cluster


# the scopes whose statements every thread of the block reaches (the verifier's *uniform* rule)
UNIFORM_SCOPES = frozenset({SyncScope.BLOCK, SyncScope.CLUSTER})


class BufferKind(enum.StrEnum):
    """Who owns a global array (``Buffer.kind``)."""

    PARAM = "param"  # the caller passes it
    CONST = "const"  # embedded data
    WORKSPACE = "workspace"  # a function's scratch the loader allocates and passes to its kernels


def _kinds(node, **fields: type) -> None:
    """Check and convert a frozen node's kind fields given as strings (ValueError: not a kind)."""
    for name, kind in fields.items():
        object.__setattr__(node, name, kind(getattr(node, name)))


# -- what each statement class declares once, for every consumer -------------------------------


@dataclass(frozen=True)
class Facts:
    """What a statement class says once about its nodes (``declares``), read by every consumer
    instead of a list of classes: the architecture a package compiles for, ``__restrict__``,
    base-address alignments, the register estimate. Buffers are named by field: a dotted path
    reaches into a record, and a None or an empty name on the way names nothing. A nested body's
    statements speak for themselves, and a TMA copy's global array is named by its tensor map (a
    by-value parameter), not here. A fact given as a function is a function of the node."""

    reads: tuple[str, ...] = ()  # the buffers (global or shared) it reads, besides its expressions' loads
    writes: tuple[str, ...] = ()  # the buffers it writes
    # the buffers it moves ``vector`` elements at a time (its ``vector`` field), or as tiles of the
    # fragment its ``tile`` field names, whose family's operand alignment then applies
    vectors: tuple[str, ...] | Callable[[typing.Any], tuple[str, ...]] = ()
    tile: str = ""
    # the architecture-specific target it needs (sm_90a: wgmma, setmaxnreg, TMA loads); None where
    # the target's own architecture runs it (the target and instruction tables refuse the rest)
    min_arch: str | None | Callable[[typing.Any], str | None] = None
    registers: int | Callable[[typing.Any], int] = 0  # 32-bit registers a thread holds for what it declares
    scope: SyncScope = SyncScope.THREAD  # the threads it makes meet, or that must run it together


def declares(**facts) -> Callable[[type], type]:
    """Attach ``Facts(**facts)`` to a statement class (decorator above its ``@dataclass``); a
    buffer path that starts with no field of the class is a TypeError when the class is made."""

    def attach(cls: type) -> type:
        declared = Facts(**facts)
        names = {f.name for f in dataclasses.fields(cls)}
        paths = (*declared.reads, *declared.writes, *_paths(declared.vectors), declared.tile)
        unknown = [path for path in paths if path and path.split(".")[0] not in names]
        if unknown:
            raise TypeError(f"{cls.__name__} declares buffers in {unknown}, which are not its fields")
        cls.facts = declared
        return cls

    return attach


def facts_of(s: object) -> Facts:
    """What statement ``s``'s class declares; an InternalError names a class that declares nothing."""
    facts = getattr(type(s), "facts", None)
    if not isinstance(facts, Facts):
        from ..errors import InternalError

        raise InternalError("kernel IR", f"{type(s).__name__} declares no facts (schedc.ir.kernel.declares)")
    return facts


def _paths(declared: tuple[str, ...] | Callable) -> tuple[str, ...]:
    return () if callable(declared) else declared


def _named(node: object, path: str) -> str:
    """The buffer name at dotted ``path`` of ``node`` ("" where a record on the way is None)."""
    for name in path.split("."):
        node = getattr(node, name)
        if node is None:
            return ""
    return node


def _names(node: object, paths: tuple[str, ...]) -> tuple[str, ...]:
    names = (_named(node, path) for path in paths)
    return tuple(name for name in names if name)


def buffers_read(s: object) -> tuple[str, ...]:
    """The buffers statement ``s`` reads by name (its ``Facts.reads``), not counting its expressions' loads."""
    return _names(s, facts_of(s).reads)


def buffers_written(s: object) -> tuple[str, ...]:
    """The buffers statement ``s`` writes (its ``Facts.writes``)."""
    return _names(s, facts_of(s).writes)


def buffers_in_vectors(s: object) -> tuple[str, ...]:
    """The buffers statement ``s`` moves in vectors or tiles (its ``Facts.vectors``)."""
    vectors = facts_of(s).vectors
    return vectors(s) if callable(vectors) else _names(s, vectors)


def tile_of(s: object) -> str:
    """The fragment whose tiles statement ``s`` moves (its ``Facts.tile``), or ""."""
    field = facts_of(s).tile
    return _named(s, field) if field else ""


def required_arch(s: object) -> str | None:
    """The architecture-specific target statement ``s`` needs (``Facts.min_arch``), or None."""
    arch = facts_of(s).min_arch
    return arch(s) if callable(arch) else arch


def registers_held(s: object) -> int:
    """The 32-bit registers each thread holds for what statement ``s`` declares (``Facts.registers``)."""
    held = facts_of(s).registers
    return held(s) if callable(held) else held


# What a tile's instruction family says about it, by name: ``arch`` (the architecture-specific
# target it needs, or None) and ``registers`` (what each thread holds), filled by
# ``schedc.instructions`` where the family table lives (the IR does not import that table).
FAMILY_FACTS: dict[str, Callable[[Fragment], object]] = {}


def _fragment_arch(f: Fragment) -> str | None:
    """sm_90a for a wgmma tile: its family's row says whether it is architecture-specific."""
    return FAMILY_FACTS["arch"](f)


def _fragment_registers(f: Fragment) -> int:
    return FAMILY_FACTS["registers"](f)


def _unstaged_tile(s: FragmentLoad | FragmentStore) -> tuple[str, ...]:
    """A tile's buffer, moved as tiles unless every tile goes through the edge's scratch."""
    return () if s.edge is not None and s.edge.staged else (s.buffer,)


def _private_registers(a: PrivateArray) -> int:
    return a.registers


# -- statements --------------------------------------------------------------------------------


@declares(writes=("buffer",))
@dataclass(frozen=True)
class Store:
    buffer: str
    index: tuple[Expr, ...]
    value: Expr


@declares()
@dataclass(frozen=True)
class Let:
    """A per-thread local: ``const int name = value;`` (index values)."""

    name: str
    value: Expr
    comment: str = ""


WORK = "work"  # the variable of a persistent kernel's loop over tiles (plan.persistent)
WARPGROUP_THREADS = 128
# the thread's warpgroup, threadIdx.x / 128. The C++ defines it once (``warpgroup_definition``)
# by a shuffle from the warp's first lane, so that the compiler knows it is one value a warp:
# what derives from it (a warpgroup's tile offsets, wgmma descriptors, a team's work items)
# stays in uniform registers instead of being computed by every thread and moved into them.
WARPGROUP_INDEX = Var("warpgroup")


def warpgroup_definition(index: ScalarType) -> str:
    """The C++ line that defines ``WARPGROUP_INDEX`` in a kernel of ``index`` type indices."""
    return (f"const {index.c_type} {WARPGROUP_INDEX.name} = __shfl_sync(0xffffffffu, threadIdx.x / "
            f"{WARPGROUP_THREADS}, 0);  // the thread's warpgroup, one value a warp")


@declares()
@dataclass(frozen=True)
class Loop:
    var: str
    start: Expr
    stop: Expr
    step: int
    body: tuple[Stmt, ...]
    unroll: bool = False
    comment: str = ""


@declares()
@dataclass(frozen=True)
class If:
    cond: Expr
    body: tuple[Stmt, ...]
    comment: str = ""
    orelse: tuple[Stmt, ...] = ()


@declares(min_arch=_fragment_arch, registers=_fragment_registers, scope=SyncScope.WARP)
@dataclass(frozen=True)
class Fragment:
    """A warp's tensor-core tile: ``use`` is matrix_a, matrix_b or accumulator.

    ``dtype`` is the element type in memory; ``precision`` what the hardware multiplies in
    (fp16, bf16, tf32, s8, u8) for operands, or the accumulator's type name.
    """

    name: str
    use: FragmentUse
    m: int
    n: int
    k: int
    dtype: ScalarType
    precision: str
    layout: str = ""  # row_major / col_major for operands
    family: str = "wmma"  # the instruction family (schedc.instructions) that owns the tile
    # a wgmma A tile held in the warpgroup's registers (filled by FragmentConvert), not read from
    # shared memory through a descriptor
    in_registers: bool = False

    def __post_init__(self) -> None:
        _kinds(self, use=FragmentUse)


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentFill:
    fragment: str
    value: float


@dataclass(frozen=True)
class TileEdge:
    """A warp tile at the edge of its array: ``rows`` and ``cols`` (warp-uniform expressions,
    possibly <= 0 or over the tile's size) say how many of its rows and columns lie inside.
    Partial tiles go through the warp's slice of the shared ``scratch`` buffer."""

    rows: Expr
    cols: Expr
    scratch: str
    staged: bool = False  # every tile through the scratch (C's tiles are not aligned for wmma in place)


@declares(reads=("buffer", "edge.scratch"), writes=("edge.scratch",), vectors=_unstaged_tile, tile="fragment",
          scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentLoad:
    """Load a tile whose element (r, c) lies at ``buffer[origin] + r*row_stride + c*col_stride``.

    One of the two strides is 1 (the layout); the other is the leading dimension.
    """

    fragment: str
    buffer: str
    origin: tuple[Expr, ...]
    row_stride: int
    col_stride: int
    edge: TileEdge | None = None  # the tile may reach past the array: zeros there
    path: TilePath = TilePath.ONLY  # how the family moves it
    vector: int = 1  # elements moved together ("elements": runs of a lane's consecutive elements)
    # in a swizzled buffer: the tile origin's stored row modulo the swizzle's period (8) when the
    # lowering proved it the same for every tile, else None (the whole row is swizzled)
    row_phase: int | None = None
    # only the tile's columns first..last-1, loaded from the source's column 0 (None: every column)
    columns: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        _kinds(self, path=TilePath)


@declares(reads=("edge.scratch",), writes=("buffer", "edge.scratch"), vectors=_unstaged_tile, tile="fragment",
          scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentStore:
    """Store a tile (laid out as in FragmentLoad); with an ``edge``, only its rows and columns
    inside the array."""

    buffer: str
    origin: tuple[Expr, ...]
    fragment: str
    row_stride: int
    col_stride: int
    edge: TileEdge | None = None
    vector: int = 1  # as in FragmentLoad
    # only the tile's columns first..last-1, stored from the target's column 0 (None: every column)
    columns: tuple[int, int] | None = None


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentMma:
    """``d = a @ b + c`` on one warp's tiles."""

    d: str
    a: str
    b: str
    c: str


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentApply:
    """Element-wise op on an accumulator: ``scale`` (x * arg), ``relu`` (max(x, 0)), ``set``."""

    fragment: str
    op: AccumulatorOp
    arg: float = 0.0
    columns: tuple[int, int] | None = None  # only the tile's columns first..last-1 (None: every column)

    def __post_init__(self) -> None:
        _kinds(self, op=AccumulatorOp)


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentAdd:
    """``fragment += source`` element by element, the source converted to the fragment's type.

    The source is C's tile in C's own type, loaded into registers before the products (or from
    shared memory, a window of ``columns`` at a time) and added after them (the fragment starts at
    zero), so the load's latency hides behind the products."""

    fragment: str
    source: str
    columns: tuple[int, int] | None = None  # only the tile's columns first..last-1 (None: every column)


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class FragmentConvert:
    """A wgmma A tile in registers (``fragment``: 64 x k, ``in_registers``) from the columns
    ``first .. first + k - 1`` of the same warpgroup's accumulator ``source`` (64 x n), each element
    rounded to the tile's type. Over those columns the accumulator's lane layout is the register A
    operand's, so each thread converts its own elements: a chain of products, the first's result
    the second's A without leaving the registers."""

    fragment: str
    source: str
    first: int


@declares()
@dataclass(frozen=True)
class FragmentMap:
    """A fused epilogue on an accumulator: ``body`` runs once for each of the thread's elements of
    ``fragment`` (the family's lane layout places them), with ``row`` and ``col`` bound to the
    element's row and column in the tile and the element itself the thread's array ``fragment``
    at subscript ``ELEMENT`` (read and written with Load/Store, in ``dtype``, the fragment's
    type); the body's other loads read arrays as any statement does. Its scope is the thread's:
    any of a warp's lanes may run it (the other fragment statements take whole warps).

    ``columns``: only the elements of the tile's columns first..last-1 (None: every element)."""

    fragment: str
    dtype: ScalarType
    row: str
    col: str
    body: tuple[Stmt, ...]
    columns: tuple[int, int] | None = None


ELEMENT = Var("elem")  # a FragmentMap's element: the subscript of its fragment in the body


@declares(reads=("scratch",), writes=("scratch",), scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class ThreadReduce:
    """A reduction across threads: the threads of the block with the same ``threadIdx.y`` and
    ``.z`` combine element 0 of their own array ``array`` (a PrivateArray of ``dtype``) with ``op``
    (``+``, ``max``, ``min``) over ``threadIdx.x`` in [0, ``lanes``) (a power of two); after it each
    of them holds the total there. Within a warp by shuffles (``shfl.xor``, distance lanes/2 first);
    with more than 32 lanes the warps' totals then meet in ``scratch`` (a shared buffer of one
    element per warp of the block) between two barriers, so every thread of the block runs it."""

    array: str
    op: str
    dtype: ScalarType
    lanes: int
    scratch: str = ""


@declares(scope=SyncScope.WARP)
@dataclass(frozen=True)
class LaneReduce:
    """The lanes that hold one row of an accumulator combine their partials: at each of ``slots``
    of the thread's own array ``array`` (a PrivateArray of ``dtype``), the value is combined with
    ``op`` (``+``, ``max``, ``min``) with the same element of lane ``lane ^ d`` for each of
    ``distances`` in turn (``shfl.xor`` within the warp); after it every lane of a row holds the
    row's total there. Every lane of the warp runs it (``lower/rows.py``)."""

    array: str
    op: str
    dtype: ScalarType
    slots: tuple[int, ...]
    distances: tuple[int, ...]


@declares(scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class Barrier:
    """``__syncthreads()``: every thread of the block arrives before any continues."""

    comment: str = ""


@declares(reads=("source",), writes=("target",), vectors=("source", "target"), scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class BlockCopy:
    """The block's threads together copy a box: ``target[t + d] = source[s + d]`` for every
    ``d`` in the box ``shape``, where ``s``/``t`` are the origins (multi-dimensional).

    Work is split in vectors of ``vector`` consecutive elements along the last of ``axes`` (the
    box's dimensions, slowest first; () is their own order, so vectors run along the last
    dimension): *striped* gives vector ``v`` to thread ``v % threads``; *blocked* gives each
    thread one contiguous run of vectors. *asynchronous* copies (cp.async, sm_80+) land in
    shared memory at the AsyncWait that covers their commit group.
    """

    source: str
    source_origin: tuple[Expr, ...]
    target: str
    target_origin: tuple[Expr, ...]
    shape: tuple[int, ...]
    vector: int = 1
    strategy: CopyStrategy = CopyStrategy.STRIPED
    asynchronous: bool = False
    comment: str = ""
    valid: tuple[Expr, ...] = ()  # per box dimension, the source elements inside; zeros beyond
    axes: tuple[int, ...] = ()  # copy order of the box's dimensions (column-major tiles: (1, 0))

    def __post_init__(self) -> None:
        _kinds(self, strategy=CopyStrategy)


@declares(scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class AsyncCommit:
    """Close the current group of asynchronous copies (``cp.async.commit_group``)."""


@declares(scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class AsyncWait:
    """Wait until at most ``pending`` groups of asynchronous copies are in flight
    (``cp.async.wait_group``); the completed groups' data is in shared memory."""

    pending: int


@declares()
@dataclass(frozen=True)
class Staging:
    """Per-thread registers for a block copy in two steps (register double buffering): each
    thread holds the vectors of the ``shape`` box it copies, split as a BlockCopy splits them."""

    name: str
    dtype: ScalarType
    shape: tuple[int, ...]
    vector: int
    strategy: CopyStrategy
    axes: tuple[int, ...] = ()  # as in BlockCopy

    def __post_init__(self) -> None:
        _kinds(self, strategy=CopyStrategy)


@declares(registers=_private_registers)
@dataclass(frozen=True)
class PrivateArray:
    """A thread's own array (a register tile: registers when every subscript is a constant
    after unrolling), row-major. Declared where it appears; read and written with Load/Store.
    ``local``: too large for registers, kept in the thread's local memory (its loops stay loops)."""

    name: str
    dtype: ScalarType
    shape: tuple[int, ...]
    local: bool = False

    @functools.cached_property
    def strides(self) -> tuple[int, ...]:
        from ..ir.layout import row_major_strides

        return row_major_strides(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def registers(self) -> int:
        """32-bit registers the tile takes (a narrower element still takes one; none in local memory)."""
        return 0 if self.local else self.size * max(self.dtype.size, 4) // 4


@declares(reads=("source",), scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class StageLoad:
    """The block's threads load the box at ``source_origin`` into the staging registers."""

    staging: str
    source: str
    source_origin: tuple[Expr, ...]
    comment: str = ""
    valid: tuple[Expr, ...] = ()  # as in BlockCopy


@declares(writes=("target",), scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class StageStore:
    """The block's threads store their staging registers into the box at ``target_origin``."""

    staging: str
    target: str
    target_origin: tuple[Expr, ...]
    comment: str = ""


# -- Hopper: mbarriers, TMA, warpgroup products, warp roles --------------------------------------


@declares(writes=("barrier",))
@dataclass(frozen=True)
class MbarrierInit:
    """The threads that run it (one, by convention) set up ``barrier[index]`` (a uint64 shared
    buffer) for phases of ``count`` arrivals each; phase 0 starts."""

    barrier: str
    index: Expr
    count: int


@declares(reads=("barrier",), writes=("barrier",), scope=SyncScope.MBARRIER)
@dataclass(frozen=True)
class MbarrierArrive:
    """Each thread that runs it arrives once on ``barrier[index]``'s current phase; with
    ``transaction_bytes`` (``arrive.expect_tx``) it first adds that many bytes the phase also
    waits for (the TMA copies that complete on the barrier count them down)."""

    barrier: str
    index: Expr
    transaction_bytes: int = 0
    comment: str = ""
    cluster: int = 0  # > 0: arrive on barrier[index] of each of the cluster's first ``cluster`` blocks


@declares(reads=("barrier",), scope=SyncScope.MBARRIER)
@dataclass(frozen=True)
class MbarrierWait:
    """Wait until the phase of ``barrier[index]`` whose parity is ``parity`` (0 or 1) has
    completed (``mbarrier.try_wait.parity`` in a loop): what the phase's arrivals did before
    arriving, and the bytes its copies brought, are then visible to the waiting threads."""

    barrier: str
    index: Expr
    parity: Expr
    comment: str = ""


@declares(writes=("target", "barrier"), min_arch="sm_90a")
@dataclass(frozen=True)
class TmaLoad:
    """The thread that runs it asks the tensor memory accelerator to copy one box of the array
    that the by-value ``tensor_map`` parameter describes (its ``box``, at element ``coords`` of the
    array, slowest dimension first) into ``target`` at ``target_origin``, swizzled as the map
    says; elements past the array arrive as zeros. The bytes complete on ``barrier[index]``."""

    tensor_map: str
    target: str
    target_origin: tuple[Expr, ...]
    coords: tuple[Expr, ...]
    barrier: str
    index: Expr
    comment: str = ""
    multicast: int = 0  # a mask of cluster ranks: the box lands in each of their ``target``s, at the
    # same offset, and its bytes complete on each one's barrier[index] (0: this block only)


@declares(reads=("source",))
@dataclass(frozen=True)
class TmaStore:
    """The thread that runs it asks the tensor memory accelerator to copy one box from
    ``source`` at ``source_origin`` (a shared tile swizzled as the ``tensor_map`` says) to the
    array the map describes, at element ``coords`` (slowest dimension first); elements past the
    array are not written. The copy joins the thread's open bulk group (``BulkCommit``); it reads
    the shared tile until a ``BulkWait`` with ``read`` has finished its group, and its global
    writes are done after a ``BulkWait`` without."""

    tensor_map: str
    source: str
    source_origin: tuple[Expr, ...]
    coords: tuple[Expr, ...]
    comment: str = ""
    adds: bool = False  # add the box into the array's elements instead (``cp.reduce.async.bulk.tensor .add``)


@declares()
@dataclass(frozen=True)
class BulkCommit:
    """``cp.async.bulk.commit_group``: the thread's TMA stores since its last commit form a group."""


@declares()
@dataclass(frozen=True)
class BulkWait:
    """``cp.async.bulk.wait_group[.read] pending``: wait until at most ``pending`` of the thread's
    bulk groups are unfinished: with ``read``, until their reads of shared memory are done (the
    tiles may be rewritten), otherwise until their writes are done too."""

    pending: int
    read: bool = True
    comment: str = ""


@declares(scope=SyncScope.NAMED)
@dataclass(frozen=True)
class NamedBarrier:
    """``bar.sync id, threads``: the ``threads`` threads (whole warps) that run it with the same
    ``id`` (1..15; 0 is ``__syncthreads``) arrive before any of them continues; what each wrote
    to shared memory before is visible to the others after. With ``arrive`` (``bar.arrive``) the
    threads count towards the ``threads`` without waiting: warpgroups that hand each other a turn
    (``plan.alternate``) arrive on the next one's barrier and sync on their own; no memory is
    ordered by it."""

    id: Expr
    threads: int
    comment: str = ""
    arrive: bool = False


@declares(scope=SyncScope.CLUSTER)
@dataclass(frozen=True)
class ClusterSync:
    """``barrier.cluster`` arrive (release) and wait (acquire): every thread of every block of
    the cluster arrives before any continues; what each did before is visible after (mbarrier
    set-ups before peers arrive on them, the last remote arrivals before a block exits)."""

    comment: str = ""


@declares()
@dataclass(frozen=True)
class Fence:
    """``mbarrier_init``: barrier set-ups become visible to the async proxy (TMA) and other
    threads; ``proxy_async``: the running threads' generic writes of shared memory become
    visible to async-proxy reads (wgmma descriptors, TMA stores)."""

    kind: FenceKind

    def __post_init__(self) -> None:
        _kinds(self, kind=FenceKind)


@declares(min_arch="sm_90a", scope=SyncScope.WARPGROUP)
@dataclass(frozen=True)
class WarpgroupFence:
    """``wgmma.fence``: register and shared-memory writes before it are seen by the wgmma
    products after it (needed before a warpgroup's first product on accumulators it wrote)."""


@declares(min_arch="sm_90a", scope=SyncScope.WARPGROUP)
@dataclass(frozen=True)
class WarpgroupCommit:
    """``wgmma.commit_group``: the warpgroup's products issued since the last commit form a group."""


@declares(min_arch="sm_90a", scope=SyncScope.WARPGROUP)
@dataclass(frozen=True)
class WarpgroupWait:
    """``wgmma.wait_group``: wait until at most ``pending`` groups of the warpgroup's products are
    in flight; the completed groups' accumulators may then be read and their operands reused."""

    pending: int


@dataclass(frozen=True)
class Role:
    """One part of a warp-specialized block: threads ``first`` .. ``first + threads - 1`` (whole
    warpgroups) run ``body``; ``registers`` (``setmaxnreg``, 0: unchanged) is what each of its
    threads may hold. Its threads form ``teams`` teams of ``threads / teams`` (whole warpgroups)
    that run ``body`` independently of each other, meeting only at mbarriers (the teams of
    consumers that take tiles in turn, ``warp_specialize(teams=)``)."""

    name: str
    first: int
    threads: int
    registers: int
    body: tuple[Stmt, ...]
    teams: int = 1

    @property
    def parts(self) -> tuple[tuple[str, int, int], ...]:
        """(name, first thread, threads) of each team: the role itself where it has one."""
        if self.teams == 1:
            return ((self.name, self.first, self.threads),)
        size = self.threads // self.teams
        return tuple((f"{self.name} team {g}", self.first + g * size, size) for g in range(self.teams))


@declares()
@dataclass(frozen=True)
class GridDependencyWait:
    """``griddepcontrol.wait``: in a kernel launched with ``dependent_launch``, wait until the
    function's kernel before it has finished and its writes are visible (the kernel's blocks may
    have started before); in a kernel launched in plain stream order it returns at once."""

    comment: str = ""


@declares()
@dataclass(frozen=True)
class LaunchDependents:
    """``griddepcontrol.launch_dependents``: once every block of the kernel has run it (or
    exited), the function's next kernel, launched with ``dependent_launch``, may start its blocks,
    which wait at their GridDependencyWait; it orders no memory."""

    comment: str = ""


REGISTERS_PER_SM = 65536  # every sm_90 multiprocessor


def launch_registers(threads_per_block: int, blocks: int = 1) -> int:
    """The registers each thread holds at launch (``__launch_bounds__(threads, blocks)``: the
    file's share of ``blocks`` such blocks, in the allocation's units of 8). ptxas compiles the
    whole kernel within it, and a kernel's roles move registers between them with
    ``setmaxnreg``: ``inc`` takes only what other roles of the block released with ``dec``, so
    the roles' new budgets must fit ``threads_per_block`` times this.

    >>> launch_registers(384), launch_registers(640), launch_registers(384, blocks=2)
    (168, 96, 80)
    """
    return REGISTERS_PER_SM // (threads_per_block * max(1, blocks)) // 8 * 8


def roles_fit(roles: tuple[Role, ...], threads_per_block: int, blocks: int = 1) -> bool:
    """Whether the roles' ``setmaxnreg`` budgets fit the block's registers at launch (an
    ``inc`` beyond what the others released waits for ever)."""
    held = launch_registers(threads_per_block, blocks)
    return sum(r.threads * ((r.registers or held) - held) for r in roles) <= 0


@declares(min_arch="sm_90a", scope=SyncScope.BLOCK)
@dataclass(frozen=True)
class Roles:
    """Warp specialization: the block's threads split into roles that run concurrently and
    meet only at mbarriers (e.g. a producer warpgroup issuing TMA copies, consumers issuing wgmma)."""

    roles: tuple[Role, ...]


Stmt = (
    Store | Let | Loop | If | Fragment | FragmentFill | FragmentLoad | FragmentStore | FragmentMma
    | FragmentApply | FragmentAdd | FragmentConvert | FragmentMap | ThreadReduce | LaneReduce | Barrier | BlockCopy
    | AsyncCommit
    | AsyncWait | Staging | StageLoad
    | StageStore
    | PrivateArray | MbarrierInit | MbarrierArrive | MbarrierWait | TmaLoad | Fence | WarpgroupFence
    | WarpgroupCommit | WarpgroupWait | Roles | ClusterSync | TmaStore | BulkCommit | BulkWait | NamedBarrier
    | GridDependencyWait | LaunchDependents
)

# -- kernels -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Buffer:
    """A global array the kernel reads or writes.

    ``kind``: param (passed by the caller), const (embedded data) or workspace (a function's
    scratch the loader allocates per stream and passes to its kernels: TEMP arrays, split-K sums).
    """

    name: str
    dtype: ScalarType
    shape: tuple[int, ...]  # an extent may be a run-time size (an Affine of sizes: create_dimensions)
    strides: tuple[int, ...]
    kind: BufferKind
    role: str
    data: tuple[int, ...] = ()  # const: the elements' bit patterns, in storage order

    def __post_init__(self) -> None:
        _kinds(self, kind=BufferKind)

    @property
    def sized(self) -> bool:
        """Whether an extent is a run-time size."""
        return not all(isinstance(n, int) for n in self.shape)

    @property
    def size(self) -> int:
        """Elements the array spans (fixed shapes: ``schedc.ir.sizes.span`` for a run-time size's)."""
        if self.sized:
            raise TypeError(f"{self.name} has a run-time size: its span is schedc.ir.sizes.span(buffer)")
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))


@dataclass(frozen=True)
class SharedBuffer:
    """A block's array in shared memory (``strides`` may pad rows against bank conflicts).

    ``swizzle``: 0, or the row pitch in bytes of an XOR-swizzled layout (dense rows; the stored
    row is the dimension of that stride): element ``col`` of a row lives at
    ``schedc.instructions.swizzle_column(row, col, swizzle, size)``. Only block copies into it
    and tile loads address such a buffer."""

    name: str
    dtype: ScalarType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    swizzle: int = 0
    align: int = 0  # bytes its start needs beyond SHARED_ALIGN (TMA's swizzled boxes: 1024)

    @property
    def size(self) -> int:
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.size


@dataclass(frozen=True)
class ScalarParam:
    """A number the caller passes by value; the body reads it as ``Var(name)`` (a value of
    ``dtype``: arithmetic with it is typed as ``dtype``, not as index arithmetic, unless
    ``dtype`` is the kernel's index type)."""

    name: str
    dtype: ScalarType
    # a run-time size (create_dimensions): a Python call reads it from the arrays' shapes
    size: bool = dataclasses.field(default=False, repr=False)

    def value(self, value: object, where: str):
        """``value`` as a numpy scalar of ``dtype``, or a LaunchError naming the parameter, the
        value and the type: bools for bool, integers in range for integer types, real numbers
        (finite ones that stay finite) for float types.

        >>> ScalarParam("n", ScalarType.uint8).value(256, "f")
        Traceback (most recent call last):
        ...
        schedc.errors.LaunchError: f: scalar n = 256 is outside uint8 (0 to 255)
        """
        from .numeric import constant

        return constant(_checked_scalar(self, value, where), self.dtype)


def _checked_scalar(param: ScalarParam, value: object, where: str) -> object:
    import numpy as np

    from ..errors import LaunchError
    from .numeric import constant

    dtype, kind = param.dtype, _kind_of(value)
    wanted = "bool" if dtype is ScalarType.bool else "int" if dtype.is_integer else "float"
    if kind is None or (wanted == "bool") != (kind == "bool") or (wanted == "int" and kind == "float"):
        raise LaunchError(where, f"scalar {param.name} = {value!r} ({type(value).__name__}) is not a "
                                 f"value of type {dtype.value}")
    if wanted == "int":
        info = np.iinfo(dtype.numpy)
        if not info.min <= int(value) <= info.max:
            raise LaunchError(where, f"scalar {param.name} = {value!r} is outside {dtype.value} "
                                     f"({info.min} to {info.max})")
        return int(value)
    if wanted == "float" and math.isfinite(float(value)) and not math.isfinite(float(constant(value, dtype))):
        raise LaunchError(where, f"scalar {param.name} = {value!r} overflows {dtype.value}")
    return value


def _kind_of(value: object) -> str | None:
    """bool, int or float for Python and numpy numbers; None for anything else."""
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int"
    if isinstance(value, float | np.floating) or type(value).__name__ == "bfloat16":
        return "float"
    return None


@dataclass(frozen=True)
class TensorMap:
    """What the ``tensor_map`` builder encodes (``cuTensorMapEncodeTiled``) for TMA copies of
    the array parameter ``array``: boxes of ``box`` elements along each of the array's dimensions
    (in the array's order; the map lists them innermost first by stride) of ``dtype``, rows (along
    the contiguous dimension) swizzled by ``swizzle`` bytes (0: none, 32, 64 or 128). The map's
    global size is ``bounds`` (what the nest reaches of the array, ``poly.reach``; () the whole
    array): TMA fills zeros past it and stores nothing past it, so tiles padded past the nest's
    edge read zeros and write nothing there, whether the array ends there or goes on."""

    array: str
    box: tuple[int, ...]
    dtype: ScalarType
    swizzle: int = 0
    bounds: tuple[int, ...] = ()

    def extent(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The map's global size over an array of ``shape`` (numbers: the call's sizes; a bound
        that is a run-time size is the array's whole extent there)."""
        if not self.bounds:
            return tuple(shape)
        return tuple(min(n, b) if isinstance(b, int) else n for n, b in zip(shape, self.bounds))


# bytes and alignment of each by-value struct, by the name of the builder that makes it
STRUCT_LAYOUTS = {"tensor_map": (128, 64)}


@dataclass(frozen=True)
class StructParam:
    """A struct passed by value (``const __grid_constant__``: the kernel reads it in place,
    it may take its address) whose bytes the loader's builder ``builder`` makes at each call
    from ``spec`` and the call's arrays; C callers of the launcher pass the struct."""

    name: str
    builder: str
    spec: TensorMap

    @property
    def size(self) -> int:
        return STRUCT_LAYOUTS[self.builder][0]

    @property
    def align(self) -> int:
        return STRUCT_LAYOUTS[self.builder][1]


ValueParam = ScalarParam | StructParam
Param = Buffer | ScalarParam | StructParam


@dataclass(frozen=True)
class Persistent:
    """Resident blocks looping over a grid of tiles in grouped order (``plan.persistent``):
    block ``b`` takes work items ``b``, ``b + blocks``, ...; item ``w`` is the tile ``tile(w)``.
    The kernel's loop computes the same order (``lower.launch.persistent_loop``)."""

    tiles: tuple[int, int, int]  # the grid the plan's block bindings describe
    blocks: int  # blocks launched (at most the number of tiles)
    group: int  # rows of tiles (y) swept column by column

    @property
    def count(self) -> int:
        return self.tiles[0] * self.tiles[1] * self.tiles[2]

    def tile(self, work: int) -> tuple[int, int, int]:
        """The tile of work item ``work``: planes one after another, each in bands of ``group``
        rows (the last band may be shorter) swept column by column.

        >>> [Persistent((3, 4, 1), 5, 2).tile(w) for w in range(7)]
        [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0), (2, 0, 0), (2, 1, 0), (0, 2, 0)]
        """
        gx, gy, _ = self.tiles
        plane, z = work % (gx * gy), work // (gx * gy)
        band = gx * self.group
        first_row = plane // band * self.group
        rows = min(gy - first_row, self.group)
        within = plane % band
        return within // rows, first_row + within % rows, z

    def tiles_of(self, block: int, limit: int | None = None) -> list[tuple[int, int, int]]:
        """The tiles block ``block`` computes, in order (its first ``limit``)."""
        return [self.tile(w) for w in range(block, self.count, self.blocks)][:limit]


GRID_LIMITS = (2**31 - 1, 65535, 65535)  # blocks a launch may have along x, y, z (every GPU schedc targets)


@dataclass(frozen=True)
class Kernel:
    """One ``__global__`` function and how to launch it. Its parameters are the param buffers
    (pointers, in order), then ``values`` (passed by value, in order)."""

    name: str
    buffers: tuple[Buffer, ...]
    grid: tuple[int, int, int]  # an axis may be an Expr of run-time sizes (computed at each launch)
    block: tuple[int, int, int]
    body: tuple[Stmt, ...]
    index_type: ScalarType = ScalarType.int32  # type of index arithmetic: int64 for arrays over 2^31 elements
    dynamic_shared_bytes: int = 0
    shared: tuple[SharedBuffer, ...] = ()  # carved out of the dynamic shared memory, in order
    values: tuple[ValueParam, ...] = ()  # scalars and structs passed by value, after the pointers
    min_blocks: int = 0  # blocks per multiprocessor the register budget must allow (0: any)
    cluster: tuple[int, int, int] = (1, 1, 1)  # blocks of a thread block cluster (``cluster_rank`` in it)
    persistent: Persistent | None = None  # the tiles each block computes, where it loops over them
    # launched as a programmatic dependent of the function's kernel before it (sm_90): its blocks may
    # start before that kernel ends and wait for it at a GridDependencyWait
    dependent_launch: bool = False

    @property
    def params(self) -> tuple[Buffer, ...]:
        """The array parameters (pointers), in order: the caller's arrays and workspaces."""
        return tuple(b for b in self.buffers if b.kind in ("param", "workspace"))

    @property
    def arguments(self) -> tuple[Param, ...]:
        """Every parameter in signature order: the arrays, then the values."""
        return (*self.params, *self.values)

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def registers_at_launch(self) -> int:
        """What each thread holds at launch (``launch_registers``), ``min_blocks`` blocks a
        multiprocessor."""
        return launch_registers(self.threads_per_block, self.min_blocks)

    def shared_offsets(self) -> tuple[int, ...]:
        """Byte offset of each shared buffer in the block's dynamic shared memory."""
        return shared_layout(self.shared)[0]


SHARED_ALIGN = 128  # bytes between shared buffers: more than any vector or tile access needs


def shared_layout(buffers) -> tuple[tuple[int, ...], int]:
    """Offsets of shared buffers laid out in order, SHARED_ALIGN apart, and the bytes in all."""
    offsets, at = [], 0
    for b in buffers:
        align = max(SHARED_ALIGN, getattr(b, "align", 0))
        at = -(-at // align) * align
        offsets.append(at)
        at += -(-b.nbytes // SHARED_ALIGN) * SHARED_ALIGN
    return tuple(offsets), at


@dataclass(frozen=True)
class HostFunction:
    """A package function: its caller-visible parameters and the kernels it launches, in
    order, on one stream (a workspace clear, then a split-K reduction, ...). Each kernel takes
    some of the parameters, declared alike, by name; a later kernel sees an earlier one's writes.

    >>> x = Buffer("X", ScalarType.float32, (4,), (1,), "param", "input_output")
    >>> k = Kernel("scale__gpu__", (x,), (1, 1, 1), (4, 1, 1), (), values=(ScalarParam("a", ScalarType.float32),))
    >>> f = HostFunction.single(k)
    >>> f.name, [p.name for p in f.params], [p.name for p in f.caller_params]
    ('scale', ['X', 'a'], ['X', 'a'])
    """

    name: str
    params: tuple[Param, ...]
    kernels: tuple[Kernel, ...]

    @staticmethod
    def single(kernel: Kernel) -> HostFunction:
        """The function of one kernel: its launcher's name and the kernel's parameters."""
        return HostFunction(kernel.name.removesuffix("__gpu__"), kernel.arguments, (kernel,))

    @property
    def arrays(self) -> tuple[Buffer, ...]:
        """The caller's arrays, in order."""
        return tuple(p for p in self.params if isinstance(p, Buffer) and p.kind == "param")

    @property
    def workspaces(self) -> tuple[Buffer, ...]:
        """Scratch arrays the loader allocates once and passes to the kernels (C callers pass them)."""
        return tuple(p for p in self.params if isinstance(p, Buffer) and p.kind == "workspace")

    @property
    def scalars(self) -> tuple[ScalarParam, ...]:
        """The numbers a caller passes (not the run-time sizes, which the arrays give)."""
        return tuple(p for p in self.params if isinstance(p, ScalarParam) and not p.size)

    @property
    def sizes(self) -> tuple[ScalarParam, ...]:
        """The run-time sizes (create_dimensions): C callers pass them, Python's are read from the arrays."""
        return tuple(p for p in self.params if isinstance(p, ScalarParam) and p.size)

    @property
    def caller_params(self) -> tuple[Buffer | ScalarParam, ...]:
        """What a Python caller passes, in order: arrays and scalars (structs are built, workspaces
        allocated, run-time sizes read from the arrays' shapes)."""
        return tuple(p for p in self.params
                     if isinstance(p, ScalarParam) and not p.size or (isinstance(p, Buffer) and p.kind == "param"))


# -- building expressions ------------------------------------------------------------------------


def all_of(tests) -> Expr | None:
    """``t0 && t1 && ...`` of the given conditions, or None when there are none."""
    cond: Expr | None = None
    for test in tests:
        cond = test if cond is None else Binary("&&", cond, test)
    return cond


# -- JSON (packages carry the kernel IR so the emulator can run a built package) ---------------

def node_classes(*declared: object) -> dict[str, type]:
    """The dataclasses that the ``declared`` types name (classes, unions, tuples of them), and
    those their fields' declared types name in turn, by class name: every node a value of those
    types may hold.

    >>> sorted(node_classes(TmaLoad))
    ['Binary', 'Call', 'Cast', 'Const', 'Load', 'TmaLoad', 'Unary', 'Var']
    """
    found: dict[str, type] = {}
    pending = list(declared)
    while pending:
        item = pending.pop()
        if not (isinstance(item, type) and dataclasses.is_dataclass(item)):
            pending += typing.get_args(item)
        elif item.__name__ not in found:
            found[item.__name__] = item
            pending += typing.get_type_hints(item).values()
        elif found[item.__name__] is not item:
            raise TypeError(f"two node classes named {item.__name__}: {found[item.__name__]} and {item}")
    return dict(sorted(found.items()))


# every node a kernel or a function of kernels holds: the expression and statement unions and the
# records their fields declare (TileEdge, Role, buffers, parameters); ``register`` adds others
_NODES = node_classes(Expr, Stmt, HostFunction)


def register(cls: type) -> type:
    """Make a frozen dataclass serialisable by ``to_json``/``from_json`` (decorator)."""
    _NODES[cls.__name__] = cls
    return cls


def to_plain(node: object) -> object:
    if dataclasses.is_dataclass(node):
        out: dict[str, object] = {"node": type(node).__name__}
        for f in dataclasses.fields(node):
            out[f.name] = to_plain(getattr(node, f.name))
        return out
    if isinstance(node, tuple | list):
        return [to_plain(x) for x in node]
    if isinstance(node, enum.Enum):
        return {"enum": type(node).__name__, "value": node.value}
    return node


def from_plain(data: object) -> object:
    if isinstance(data, dict) and "node" in data:
        cls = _NODES[data["node"]]
        fields = {f.name: from_plain(data[f.name]) for f in dataclasses.fields(cls) if f.name in data}
        if cls is Kernel and isinstance(fields.get("index_type"), str):  # packages of schedc <= 0.1.0
            fields["index_type"] = ScalarType.int64 if fields["index_type"] == "long long" else ScalarType.int32
        return cls(**fields)
    if isinstance(data, dict) and "enum" in data:
        return _enum_value(data["enum"], data["value"])
    if isinstance(data, list):
        return tuple(from_plain(x) for x in data)
    return data


def _enum_value(name: str, value: str) -> enum.Enum:
    from .. import targets

    enums = {"Instruction": targets.Instruction, "ScalarType": ScalarType, "MMAShape": targets.MMAShape,
             "FragmentUse": FragmentUse, "AccumulatorOp": AccumulatorOp, "TilePath": TilePath,
             "CopyStrategy": CopyStrategy, "FenceKind": FenceKind, "BufferKind": BufferKind,
             "MMAFragmentOp": targets.MMAFragmentOp, "GridUnit": targets.GridUnit,
             "Model": targets.Model, "MemorySpace": targets.MemorySpace,
             "CacheStrategy": targets.CacheStrategy, "CopyEngine": targets.CopyEngine, "Function": Function}
    return enums[name](value)


def to_json(node: object) -> str:
    """Deterministic JSON text of an IR node (sorted keys, no whitespace variance)."""
    return json.dumps(to_plain(node), sort_keys=True, separators=(",", ":"))


def from_json(text: str) -> object:
    return from_plain(json.loads(text))
