"""Run kernel IR on the CPU with numpy: block by block, threads of a block in lock-step.

Per-thread values are arrays over the block's threads; warp-collective tile operations run per
warp on (warps, rows, cols) arrays. Element types are modelled: float16/bfloat16 arithmetic
rounds as on the GPU, tf32 operands are rounded to tf32, accumulators keep their type. The
emulator doubles as a checker: an out-of-bounds access, two threads storing one element in the
same step, a warp split by a branch before a tile operation, or lanes disagreeing on a tile's
origin raise ``EmulationError`` naming block, thread(s), buffer, element and loop iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import SchedcError
from ..instructions import column_elements, swizzled
from ..ir.functions import evaluate
from ..ir.kernel import (
    ELEMENT,
    WARPGROUP_INDEX,
    WARPGROUP_THREADS,
    WORK,
    AccumulatorOp,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
    Call,
    Cast,
    Const,
    Expr,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    GridDependencyWait,
    HostFunction,
    If,
    Kernel,
    LaneReduce,
    LaunchDependents,
    Let,
    Load,
    Loop,
    PrivateArray,
    ScalarParam,
    StageLoad,
    StageStore,
    Staging,
    Stmt,
    Store,
    SyncScope,
    ThreadReduce,
    Unary,
    Var,
    facts_of,
)
from ..ir.numeric import binary, constant, converted, round_tf32
from ..ir.registry import Registry
from ..ir.types import ScalarType
from .emulate_tensor import EXECUTORS as TENSOR_EXECUTORS
from .shared import SharedError, SharedMemory

WARP = 32


class EmulationError(SchedcError):
    """The emulated kernel did something the GPU would not do correctly."""

    def __init__(self, kind: str, what: str, block, threads, buffer, element, iteration) -> None:
        self.kind, self.block, self.threads = kind, block, threads
        self.buffer, self.element, self.iteration = buffer, element, iteration
        place = f"block {block}, thread(s) {threads}, {buffer}[{element}]"
        loops = ", ".join(f"{k}={v}" for k, v in iteration.items()) or "no loop"
        super().__init__(f"emulate: {kind}", f"{what} at {place}, iteration ({loops})")


@dataclass
class Emulation:
    """Storage (flat, in each buffer's layout) after the run, and which elements were stored."""

    storage: dict[str, np.ndarray]
    written: dict[str, np.ndarray]
    blocks: list[tuple[int, int, int]]


Block = tuple[int, int, int]
Progress = Callable[[int, int], None]  # called after each block: blocks done, blocks to run
DEFAULT_SAMPLE = 8  # blocks in the default sample, at least (more on a grid with 8 corners)


def sample_blocks(grid: tuple[int, int, int], count: int | None) -> list[Block]:
    """``count`` blocks spread over the grid, first and last included (all when None)."""
    return [_coordinates(grid, b) for b in _spread(_total(grid), count)]


def default_blocks(grid: tuple[int, int, int]) -> list[Block]:
    """A quick sample: the grid's corners (the first and last block along each axis, where
    partial tiles lie), then blocks spread over the grid, ``DEFAULT_SAMPLE`` in all or the
    corners and 4 more, whichever is more (every block of a smaller grid)."""
    corners, total = grid_corners(grid), _total(grid)
    target = max(DEFAULT_SAMPLE, len(corners) + 4)
    if total <= target:
        return sample_blocks(grid, None)
    spread = target - len(corners)
    while True:  # interior points of an even spread, more where some fall on corners
        chosen = {*corners, *(_coordinates(grid, b) for b in _spread(total, spread + 2)[1:-1])}
        if len(chosen) >= target:
            return sorted(chosen, key=lambda block: block[::-1])  # in launch order: x fastest
        spread += 1


def grid_corners(grid: tuple[int, int, int]) -> list[Block]:
    """The grid's distinct corners: each coordinate 0 or its axis's last."""
    axes = [sorted({0, n - 1}) for n in grid]
    return [(x, y, z) for z in axes[2] for y in axes[1] for x in axes[0]]


def _total(grid: tuple[int, int, int]) -> int:
    return grid[0] * grid[1] * grid[2]


def _spread(total: int, count: int | None) -> list[int]:
    if count is None or count >= total:
        return list(range(total))
    return sorted({int(round(x)) for x in np.linspace(0, total - 1, max(count, 1))})


def _coordinates(grid: tuple[int, int, int], b: int) -> Block:
    return (b % grid[0], (b // grid[0]) % grid[1], b // (grid[0] * grid[1]))


def emulate(kernel: Kernel, storage: dict[str, np.ndarray], blocks: int | list[Block] | None = None,
            progress: Progress | None = None, scalars: dict[str, object] | None = None,
            tiles: int | None = None) -> Emulation:
    """Run ``kernel`` over copies of ``storage`` (flat arrays per parameter), on all blocks,
    a sample of ``blocks`` of them, or the listed blocks; ``progress(done, total)`` after each.
    ``scalars`` gives each scalar parameter its value (checked as a launch checks it).
    ``tiles``: in a persistent kernel, each block runs only its first ``tiles`` tiles (a sample,
    as ``blocks`` is; stopping early keeps the state of the ones run exact)."""
    return emulate_sequence(HostFunction.single(kernel), storage, blocks, progress, scalars, tiles)


def emulate_sequence(function: HostFunction, storage: dict[str, np.ndarray],
                     blocks: int | list[Block] | None = None, progress: Progress | None = None,
                     scalars: dict[str, object] | None = None, tiles: int | None = None) -> Emulation:
    """Run a function's kernels in order over one memory (copies of ``storage``; temporary
    arrays of one name are one array), as its launcher runs them on one stream.

    Every block of each kernel but the last runs, since a later kernel may read anything an
    earlier one wrote; the last kernel runs on ``blocks`` as ``emulate`` does, and the result's
    ``blocks`` are its blocks. ``written`` marks what any of the kernels stored."""
    for kernel in function.kernels:
        EXECUTORS.require(kernel.body, kernel.name)  # every node class has an executor, or nothing runs
    values = _scalar_values(function, scalars or {})
    memory: dict[str, np.ndarray] = {}
    for b in (b for kernel in function.kernels for b in kernel.buffers):
        if b.name not in memory:
            memory[b.name] = _initial(b, storage)
    written = {name: np.zeros(len(array), dtype=bool) for name, array in memory.items()}
    last = len(function.kernels) - 1
    plan = [(k, clusters_of(k, _chosen(k.grid, blocks if n == last else None))) for n, k in enumerate(function.kernels)]
    total, done = sum(len(group) for _, chosen in plan for group in chosen), 0
    for kernel, chosen in plan:
        scalars_of_kernel = {v.name: values[v.name] for v in kernel.values if isinstance(v, ScalarParam)}
        owners: dict[str, np.ndarray] = {}  # per array: the block of this kernel that stored each element
        for group in chosen:
            runs = [_Block(kernel, memory, written, block, env=dict(scalars_of_kernel),
                           tiles=tiles if kernel is plan[-1][0] else None, owners=owners) for block in group]
            if len(runs) == 1:
                runs[0].run()
            else:  # a cluster's blocks run together
                for rank, run in enumerate(runs):
                    run.env["cluster_rank"] = np.int64(rank)
                emulate_hopper.run_cluster(runs, len(runs))
            done += len(runs)
            if progress is not None:
                progress(done, total)
    return Emulation(memory, written, [block for group in plan[-1][1] for block in group])


def clusters_of(kernel: Kernel, blocks: list[Block]) -> list[list[Block]]:
    """The blocks to run, in groups that run together: each block alone, or (a kernel launched
    in clusters) the whole cluster of every chosen block, its blocks in rank order."""
    cx, cy, cz = kernel.cluster
    if (cx, cy, cz) == (1, 1, 1):
        return [[b] for b in blocks]
    groups: dict[Block, list[Block]] = {}
    for x, y, z in blocks:
        origin = (x - x % cx, y - y % cy, z - z % cz)
        if origin not in groups:
            groups[origin] = [(origin[0] + r % cx, origin[1] + r // cx % cy, origin[2] + r // (cx * cy))
                              for r in range(cx * cy * cz)]
    return list(groups.values())


def _scalar_values(function: HostFunction, scalars: dict[str, object]) -> dict[str, np.generic]:
    """Each scalar parameter's value as its numpy type; LaunchError where one is missing, left
    over or not a value of its type."""
    from ..errors import LaunchError

    where = f"emulate {function.name}"
    params = {p.name: p for p in function.scalars}
    for name in params:
        if name not in scalars:
            raise LaunchError(where, f"no value for scalar {name} ({params[name].dtype.value})")
    for name in scalars:
        if name not in params:
            raise LaunchError(where, f"{name} is not a scalar parameter (they are: {', '.join(params) or 'none'})")
    return {name: p.value(scalars[name], where) for name, p in params.items()}


def _chosen(grid: tuple[int, int, int], blocks: int | list[Block] | None) -> list[Block]:
    if blocks is None or isinstance(blocks, int):
        return sample_blocks(grid, blocks)
    chosen = [tuple(int(c) for c in b) for b in blocks]
    outside = [b for b in chosen if not all(0 <= c < n for c, n in zip(b, grid))]
    if outside or any(len(b) != 3 for b in chosen):
        raise ValueError(f"blocks {outside or chosen} are not blocks of the grid {grid}")
    return chosen


def _initial(buffer: Buffer, storage: dict[str, np.ndarray]) -> np.ndarray:
    if buffer.kind == "param":
        array = np.asarray(storage[buffer.name])
        if array.shape != (buffer.size,) or array.dtype != buffer.dtype.numpy:
            raise ValueError(f"{buffer.name}: expected flat {buffer.dtype.value}[{buffer.size}] storage")
        return array.copy()
    if buffer.kind == "const":
        bits = np.array(buffer.data, dtype=np.dtype(f"u{buffer.dtype.size}"))
        return bits.view(buffer.dtype.numpy).copy()
    return np.full(buffer.size, _poison(buffer.dtype), dtype=buffer.dtype.numpy)


def _scale(x: np.ndarray, arg: float, dtype: np.dtype) -> np.ndarray:
    scaled = x.astype(np.float32) * np.float32(arg)  # integer accumulators: scaled in float32, truncated
    return np.trunc(scaled).astype(dtype) if dtype.kind == "i" else scaled.astype(dtype)


# each accumulator op on a fragment's values (as the tensor cores' epilogues compute it)
_ACCUMULATOR_OPS = {AccumulatorOp.SCALE: _scale,
                    AccumulatorOp.RELU: lambda x, arg, dtype: np.where(x > 0, x, dtype.type(0)),
                    AccumulatorOp.SET: lambda x, arg, dtype: np.full_like(x, dtype.type(arg))}


def _poison(dtype: ScalarType):
    return np.nan if dtype.is_float else 0


EXECUTORS = Registry("emulator executor")


@dataclass
class _Block:
    kernel: Kernel
    memory: dict[str, np.ndarray]
    written: dict[str, np.ndarray]
    block: tuple[int, int, int]
    env: dict[str, object] = field(default_factory=dict)
    fragments: dict[str, np.ndarray] = field(default_factory=dict)
    specs: dict[str, Fragment] = field(default_factory=dict)
    iteration: dict[str, int] = field(default_factory=dict)
    staged: dict[str, tuple[Staging, np.ndarray | None]] = field(default_factory=dict)
    private: dict[str, np.ndarray] = field(default_factory=dict)  # per thread: (threads, size)
    tiles: int | None = None  # persistent kernels: the tiles each block runs (None: all)
    owners: dict[str, np.ndarray] = field(default_factory=dict)  # the kernel's blocks' stores, per element

    def mark_written(self, buffer: str, offsets: np.ndarray, adds: bool = False) -> None:
        """Global elements this block stored (``adds``: added into, as a reduction, in any order).
        Two blocks of one kernel storing one element race: which value stays depends on their
        order (a whole tile stored past the nest's edge onto another block's elements, say)."""
        self.written[buffer][offsets] = True
        if adds:
            return
        gx, gy, _ = self.kernel.grid
        me = self.block[0] + gx * (self.block[1] + gy * self.block[2])
        owner = self.owners.setdefault(buffer, np.full(len(self.written[buffer]), -1, dtype=np.int64))
        prior = owner[offsets]
        clash = (prior >= 0) & (prior != me)
        if clash.any():
            n = int(np.argmax(clash))
            other = int(prior[n])
            block = (other % gx, other // gx % gy, other // (gx * gy))
            raise self.error("race", f"block {block} stored this element too: two blocks of the kernel store it, "
                             "and which value stays depends on their order", [0], buffer, int(offsets[n]))
        owner[offsets] = me

    def run(self) -> None:
        bx, by, bz = self.kernel.block
        t = np.arange(bx * by * bz, dtype=np.int64)
        self.threads = len(t)
        axes = {"threadIdx.x": t % bx, "threadIdx.y": (t // bx) % by, "threadIdx.z": t // (bx * by)}
        # an axis of one thread is one value for all: a scalar, which keeps what derives from it scalar
        extents = {"threadIdx.x": bx, "threadIdx.y": by, "threadIdx.z": bz}
        self.env.update({name: np.int64(0) if extents[name] == 1 else ids for name, ids in axes.items()})
        # the warpgroup of the warp's first lane, as the C++ shuffles it from there (WARPGROUP_INDEX)
        first_lane = t - t % 32
        group = first_lane % bx // WARPGROUP_THREADS
        self.env[WARPGROUP_INDEX.name] = np.int64(0) if bx <= WARPGROUP_THREADS else group
        self.env.update({
            "blockIdx.x": np.int64(self.block[0]), "blockIdx.y": np.int64(self.block[1]),
            "blockIdx.z": np.int64(self.block[2]),
        })
        self.buffers = {b.name: b for b in (*self.kernel.buffers, *self.kernel.shared)}
        self.shared = SharedMemory({b.name: b for b in self.kernel.shared}, threads=len(t))
        self.thread_ids = t
        try:
            self.body(self.kernel.body, np.ones(len(t), dtype=bool))
            emulate_hopper.finish(self)
        except SharedError as e:
            raise self.error(e.kind, e.what, e.threads, e.buffer, e.element) from None

    # -- statements ----------------------------------------------------------------------------

    def body(self, body: tuple[Stmt, ...], mask: np.ndarray) -> None:
        for s in body:
            self.statement(s, mask)

    def statement(self, s: Stmt, mask: np.ndarray) -> None:
        self.mask = mask  # loads check bounds for the threads that run this statement only
        EXECUTORS.handler(s)(self, s, mask)

    @EXECUTORS.handles(Let)
    def let(self, s: Let, mask: np.ndarray) -> None:
        value = self.expr(s.value)
        old = self.env.get(s.name, 0)
        self.env[s.name] = value if mask.all() else np.where(mask, value, old)

    @EXECUTORS.handles(GridDependencyWait, LaunchDependents)
    def dependent_launch(self, s, mask: np.ndarray) -> None:
        """Nothing to do: a function's kernels run one after another here, every block of one
        before any of the next (the verifier checks that a dependent kernel waits first)."""

    @EXECUTORS.handles(If)
    def branch(self, s: If, mask: np.ndarray) -> None:
        cond = np.broadcast_to(self.expr(s.cond), mask.shape)
        taken, other = mask & cond, mask & ~cond
        if taken.any():
            self.body(s.body, taken)
        if s.orelse and other.any():
            self.body(s.orelse, other)
        self.mask = mask

    @EXECUTORS.handles(Staging)
    def staging(self, s: Staging, mask: np.ndarray) -> None:
        self.staged[s.name] = (s, None)

    @EXECUTORS.handles(PrivateArray)
    def private_array(self, s: PrivateArray, mask: np.ndarray) -> None:
        """The declaring threads' arrays start undefined; the other threads' keep theirs (a
        consumer team declares its arrays while the other team still reads its own)."""
        self.buffers[s.name] = s
        held = self.private.get(s.name)
        if held is None or held.shape != (self.threads, s.size) or held.dtype != s.dtype.numpy:
            self.private[s.name] = np.full((self.threads, s.size), _poison(s.dtype), dtype=s.dtype.numpy)
        else:
            held[mask] = _poison(s.dtype)

    @EXECUTORS.handles(Loop)
    def loop(self, s: Loop, mask: np.ndarray) -> None:
        start, stop = self.expr(s.start), self.expr(s.stop)
        if np.ndim(start) == 0 and np.ndim(stop) == 0:
            values = range(int(start), int(stop), s.step)
            if s.var == WORK and self.tiles is not None:
                values = values[:self.tiles]
            for value in values:
                self.env[s.var] = np.int64(value)
                self.iteration[s.var] = value
                self.body(s.body, mask)
        else:  # bounds differ between threads: run until every thread is done
            var = np.broadcast_to(start, mask.shape).astype(np.int64)
            while True:
                active = mask & (var < stop)
                if not active.any():
                    break
                self.env[s.var] = var
                self.iteration[s.var] = int(var[active].min())
                self.body(s.body, active)
                var = var + s.step
        self.iteration.pop(s.var, None)

    @EXECUTORS.handles(LaneReduce)
    def lane_reduce(self, s: LaneReduce, mask: np.ndarray) -> None:
        """The lanes of each row combine their partials as ``__shfl_xor_sync`` does: each active
        lane takes ``op`` of its value and lane ``lane ^ d``'s, for each distance in turn. Every
        lane of a warp that runs it must run it (a shuffle from a lane that does not is undefined)."""
        warps = self.thread_ids // WARP
        running = np.isin(warps, np.unique(warps[mask]))
        if not mask[running].all():
            raise self.error("divergent shuffle", f"the lanes of a warp combine {s.array} by shuffles with part "
                             "of the warp", np.flatnonzero(running & ~mask)[:4].tolist(), s.array, "-")
        values = self.private[s.array]
        for slot in s.slots:
            v = values[:, slot].copy()
            for d in s.distances:
                v = binary(s.op, v, v[self.thread_ids ^ d], s.dtype)
            values[mask, slot] = v[mask]

    @EXECUTORS.handles(ThreadReduce)
    def thread_reduce(self, s: ThreadReduce, mask: np.ndarray) -> None:
        """Each row's partials combined as the runtime's ``allreduce_x`` does: xor butterflies
        within warps (distance lanes/2 first, at most 16), then the row's warps folded in order."""
        if not mask.all():
            raise self.error("divergent reduction", "a reduction across threads runs on part of the block",
                             np.flatnonzero(~mask)[:4].tolist(), s.array, "-")
        bx = self.kernel.block[0]
        if bx != s.lanes:
            raise self.error("reduction", f"threadIdx.x has {bx} values, the reduction combines {s.lanes}",
                             [0], s.array, "-")
        v = self.private[s.array][:, 0].copy()
        x = self.thread_ids % bx
        width = min(s.lanes, 32)
        d = width // 2
        while d:
            v = binary(s.op, v, v[self.thread_ids - x + (x ^ d)], s.dtype)
            d //= 2
        if s.lanes > 32:
            warps = s.lanes // 32
            rows = v.reshape(-1, s.lanes)[:, ::32]  # each warp's total (lane 0's), per row
            total = rows[:, 0]
            for w in range(1, warps):
                total = binary(s.op, total, rows[:, w], s.dtype)
            v = np.repeat(total, s.lanes)
        self.private[s.array][:, 0] = v.astype(self.private[s.array].dtype)

    @EXECUTORS.handles(Store)
    def store(self, s: Store, mask: np.ndarray) -> None:
        offset = np.broadcast_to(self.offset(s.buffer, s.index, mask), mask.shape)
        value = np.broadcast_to(self.expr(s.value), mask.shape)
        if s.buffer in self.private:
            self.private[s.buffer][self.thread_ids[mask], offset[mask]] = value[mask]
            return
        if s.buffer in self.shared.buffers:
            self.shared.write(s.buffer, offset[mask], value[mask], self.thread_ids[mask])
            return
        where = offset[mask]
        unique, counts = np.unique(where, return_counts=True)
        if len(unique) != len(where):
            element = int(unique[counts > 1][0])
            threads = np.flatnonzero(mask & (offset == element)).tolist()
            raise self.error("race", "threads store the same element in one step", threads, s.buffer, element)
        self.memory[s.buffer][where] = value[mask]
        self.mark_written(s.buffer, where)

    # -- warp tiles ----------------------------------------------------------------------------

    @EXECUTORS.handles(Fragment, FragmentFill, FragmentApply, FragmentAdd, FragmentConvert, FragmentMma, FragmentLoad,
                      FragmentStore, FragmentMap)
    def tile(self, s: Stmt, mask: np.ndarray) -> None:
        warps = mask.reshape(-1, WARP)
        whole = facts_of(s).scope is not SyncScope.THREAD  # a map: each thread's own elements, on any lanes
        partial = warps.any(axis=1) & ~warps.all(axis=1)
        if partial.any() and whole:
            w = int(np.flatnonzero(partial)[0])
            raise self.error("divergent warp", "a tile operation runs on part of a warp",
                             np.flatnonzero(warps[w]).tolist(), getattr(s, "buffer", "-"), "-")
        active = warps.all(axis=1) if whole else warps.any(axis=1)
        name = s.name if isinstance(s, Fragment) else s.d if isinstance(s, FragmentMma) else s.fragment
        family = s.family if isinstance(s, Fragment) else self.specs[name].family
        TENSOR_EXECUTORS[family](self).run(s, mask, active)

    def map_elements(self, s: FragmentMap, mask: np.ndarray, layout, lanes: int) -> None:
        """A fused epilogue: the body once per element of the threads' fragments (``layout``,
        over ``lanes`` threads), with the element's row and column bound and the fragment seen
        as each thread's own array (a view: the body's stores land in the fragment)."""
        view = self.fragments[s.fragment].reshape(self.threads, -1)
        first, end = column_elements(layout, lanes, *s.columns) if s.columns else (0, layout.elements)
        lane = self.thread_ids % lanes
        self.private[s.fragment], self.buffers[s.fragment] = view, PrivateArray(s.fragment, s.dtype, (view.shape[1],))
        try:
            for e in range(first, end):
                self.env[ELEMENT.name] = np.int64(e)
                self.env[s.row], self.env[s.col] = layout.row(lane, e), layout.col(lane, e)
                self.body(s.body, mask)
        finally:
            del self.private[s.fragment], self.buffers[s.fragment]
        self.mask = mask

    def tile_offsets(self, buffer, origin, row_stride, col_stride, mask, active, shape, edge=None):
        """Each active warp's tile elements as storage offsets, and which of them lie inside the
        array (all, unless the tile has an ``edge``)."""
        if edge is None:
            start = self.offset(buffer, origin, mask)
        else:  # an edge tile's origin may itself lie past the array
            spec = self.buffers[buffer]
            start = sum((self.expr(sub) * stride for sub, stride in zip(origin, spec.strides)), np.int64(0))
        lanes = self._uniform(start, mask, active, buffer)
        rows = np.arange(shape[0])[:, None] * row_stride
        cols = np.arange(shape[1])[None, :] * col_stride
        index = lanes[:, None, None] + rows + cols
        inside = np.ones(index.shape, dtype=bool)
        if edge is not None:
            rows_in = self._uniform(self.expr(edge.rows), mask, active, buffer)
            cols_in = self._uniform(self.expr(edge.cols), mask, active, buffer)
            inside = ((np.arange(shape[0])[None, :, None] < rows_in[:, None, None])
                      & (np.arange(shape[1])[None, None, :] < cols_in[:, None, None]))
        size = self.buffers[buffer].size
        bad = ((index < 0) | (index >= size)) & inside
        if bad.any():
            w = int(np.flatnonzero(active)[np.argwhere(bad)[0][0]])
            raise self.error("out of bounds", f"a tile reaches outside {buffer} (size {size})",
                             [w * WARP], buffer, int(index[bad][0]))
        return index, inside

    def _uniform(self, value, mask, active, buffer) -> np.ndarray:
        """A warp-uniform value per active warp (lane 0's), checked equal across the lanes."""
        lanes = np.broadcast_to(value, mask.shape).reshape(-1, WARP)[active]
        if (lanes != lanes[:, :1]).any():
            w = int(np.flatnonzero(active)[np.flatnonzero((lanes != lanes[:, :1]).any(axis=1))[0]])
            raise self.error("non-uniform tile", "lanes of a warp disagree on a tile's origin or edge",
                             [w * WARP + n for n in range(WARP)], buffer, int(lanes[0, 0]))
        return lanes[:, 0]

    def tile_load(self, s: FragmentLoad, mask, active) -> None:
        frag, spec = self.fragments[s.fragment], self.specs[s.fragment]
        index, inside = self.tile_offsets(s.buffer, s.origin, s.row_stride, s.col_stride, mask, active,
                                          frag.shape[1:], s.edge)
        if s.edge is None:
            values = self._tile_values(s.buffer, index, active)
        else:  # edge tiles are global (C): zeros past the array
            values = np.zeros(index.shape, dtype=self.buffers[s.buffer].dtype.numpy)
            values[inside] = self.memory[s.buffer][index[inside]]
        if spec.precision == "tf32":
            values = round_tf32(values.astype(np.float32))
        frag[active] = values.astype(frag.dtype)

    def tile_store(self, s: FragmentStore, mask, active) -> None:
        frag = self.fragments[s.fragment]
        index, inside = self.tile_offsets(s.buffer, s.origin, s.row_stride, s.col_stride, mask, active,
                                          frag.shape[1:], s.edge)
        flat = index[inside]
        unique, counts = np.unique(flat, return_counts=True)
        if len(unique) != len(flat):
            element = int(unique[counts > 1][0])
            warps = np.flatnonzero(active)[np.flatnonzero(((index == element) & inside).any(axis=(1, 2)))]
            raise self.error("race", "warps store the same element in one step",
                             [int(w) * WARP for w in warps], s.buffer, element)
        values = frag[active][inside]
        if s.buffer in self.shared.buffers:
            owners = self._tile_owners(index, active)[inside.ravel()]
            self.shared.write(s.buffer, flat, converted(values, self.buffers[s.buffer].dtype), owners, same=_warp)
            return
        memory = self.memory[s.buffer]
        memory[flat] = converted(values, self.buffers[s.buffer].dtype)
        self.mark_written(s.buffer, flat)

    def _tile_values(self, buffer: str, index: np.ndarray, active) -> np.ndarray:
        if buffer not in self.shared.buffers:
            return self.memory[buffer][index]
        owners = self._tile_owners(index, active)
        return self.shared.read(buffer, index.ravel(), owners, same=_warp).reshape(index.shape)

    @staticmethod
    def _tile_owners(index: np.ndarray, active) -> np.ndarray:
        """The first thread of the warp that touches each element of a tile operation."""
        warps = np.flatnonzero(active) * WARP
        return np.repeat(warps, index[0].size)

    def add(self, s: FragmentAdd, active) -> None:
        """``fragment += source`` on the active warps' (or warpgroups') tiles, in the fragment's type."""
        frag = self.fragments[s.fragment]
        frag[active] = frag[active] + self.fragments[s.source][active].astype(frag.dtype)

    def apply(self, s: FragmentApply, active) -> None:
        frag = self.fragments[s.fragment]
        frag[active] = _ACCUMULATOR_OPS[s.op](frag[active], s.arg, frag.dtype)

    # -- expressions ---------------------------------------------------------------------------

    def offset(self, buffer: str, index: tuple[Expr, ...], mask: np.ndarray):
        spec = self.buffers[buffer]
        offset = np.int64(0)
        for sub, stride, extent in zip(index, spec.strides, spec.shape):
            value = self.expr(sub)
            if np.ndim(value) == 0 and 0 <= value < extent:  # one value for every thread, inside
                offset = offset + value * stride
                continue
            every = value if np.shape(value) == mask.shape else np.broadcast_to(value, mask.shape)
            live = every[mask]
            if live.size and (live.min() < 0 or live.max() >= extent):
                bad = np.flatnonzero(mask & ((every < 0) | (every >= extent)))
                raise self.error("out of bounds", f"a subscript leaves 0..{extent - 1}",
                                 bad[:4].tolist(), buffer, int(every[bad[0]]))
            offset = offset + value * stride
        return offset

    def expr(self, e: Expr):
        kind = type(e)
        if kind is Binary:
            return binary(e.op, self.expr(e.lhs), self.expr(e.rhs), e.dtype)
        if kind is Var:
            return self.env[e.name]
        if kind is Const:
            return np.int64(e.value) if e.dtype is None else constant(e.value, e.dtype)
        if kind is Load:
            return self.load(e)
        if kind is Cast:
            return converted(self.expr(e.operand), e.dtype)
        if kind is Unary:
            return -self.expr(e.operand)
        if kind is Call:
            return evaluate(e.function, tuple(self.expr(a) for a in e.args), e.dtype)
        raise TypeError(f"unknown expression {e!r}")

    def load(self, e: Load):
        offset = self.offset(e.buffer, e.index, self.mask)
        alone = self.threads == 1 and np.ndim(offset) == 0 and self.mask[0]  # one thread: scalars
        if e.buffer in self.private:
            if alone:
                return self.private[e.buffer][0, offset]
            offset = np.where(self.mask, np.broadcast_to(offset, self.mask.shape), 0)
            return self.private[e.buffer][self.thread_ids, offset]
        if alone and e.buffer in self.shared.buffers:
            return self.shared.read(e.buffer, np.array([offset]), self.thread_ids)[0]
        if e.buffer in self.shared.buffers:
            offset = np.broadcast_to(offset, self.mask.shape)
            values = np.zeros(self.mask.shape, dtype=self.buffers[e.buffer].dtype.numpy)
            values[self.mask] = self.shared.read(e.buffer, offset[self.mask], self.thread_ids[self.mask])
            return values
        if np.ndim(offset) and not self.mask.all():
            offset = np.where(self.mask, offset, 0)
        return self.memory[e.buffer][offset]

    # -- block-level operations -----------------------------------------------------------------

    @EXECUTORS.handles(Barrier, BlockCopy, AsyncCommit, AsyncWait, StageLoad, StageStore)
    def block_level(self, s, mask: np.ndarray) -> None:
        if not mask.all():
            inactive = np.flatnonzero(~mask)[:4].tolist()
            name = type(s).__name__
            raise self.error("divergence", f"{name} needs every thread of the block, but threads "
                             f"{inactive}... skip it", inactive, getattr(s, "target", "-"), "-")
        if isinstance(s, Barrier):
            self.shared.barrier()
        elif isinstance(s, AsyncCommit):
            self.shared.commit()
        elif isinstance(s, AsyncWait):
            self.shared.wait(s.pending)
        elif isinstance(s, StageLoad | StageStore):
            self.stage(s, mask)
        else:
            self.block_copy(s, mask)

    def stage(self, s: StageLoad | StageStore, mask: np.ndarray) -> None:
        """Register double buffering: the box's elements into each thread's registers, and later
        from there into shared memory (the same thread stores what it loaded)."""
        spec, values = self.staged[s.staging]
        box, order = copy_box(spec.shape, spec.axes)
        threads = copy_threads(order, spec.vector, spec.strategy, self.threads)
        if isinstance(s, StageLoad):
            inside = self._inside(s.valid, box, mask)
            source = self._box_offsets(s.source, s.source_origin, box[:, inside], mask)
            loaded = np.zeros(box.shape[1], dtype=spec.dtype.numpy)
            loaded[inside] = self.memory[s.source][source]
            self.staged[s.staging] = (spec, loaded)
            return
        if values is None:
            raise self.error("uninitialized", f"{s.staging} is stored before any load", [0], s.target, "-")
        target = self._box_offsets(s.target, s.target_origin, box, mask)
        self.shared.write(s.target, target, values, threads)

    def block_copy(self, s: BlockCopy, mask: np.ndarray) -> None:
        """Elements of the box, the thread that copies each, then read and write (a bounded
        copy reads only the elements inside the source and writes zeros for the rest)."""
        box, order = copy_box(s.shape, s.axes)
        inside = self._inside(s.valid, box, mask)
        source = self._box_offsets(s.source, s.source_origin, box[:, inside], mask)
        target = self._box_offsets(s.target, s.target_origin, box, mask)
        threads = copy_threads(order, s.vector, s.strategy, self.threads)
        if s.source in self.shared.buffers:
            read = self.shared.read(s.source, source, threads[inside])
        else:
            read = self.memory[s.source][source]
        values = np.zeros(box.shape[1], dtype=read.dtype)
        values[inside] = read
        if s.target in self.shared.buffers:
            values = values.astype(self.buffers[s.target].dtype.numpy)
            if s.asynchronous:
                self.shared.copy_async(s.target, target, values, threads)
            else:
                self.shared.write(s.target, target, values, threads)
        else:
            self.memory[s.target][target] = values
            self.mark_written(s.target, target)

    def _inside(self, valid: tuple[Expr, ...], box: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Which elements of a box lie inside the source: all, or those below ``valid``."""
        inside = np.ones(box.shape[1], dtype=bool)
        for axis, expr in enumerate(valid):
            limit = np.broadcast_to(self.expr(expr), mask.shape)
            if (limit != limit[0]).any():
                raise self.error("non-uniform copy", "threads disagree on a block copy's bounds",
                                 np.flatnonzero(limit != limit[0])[:4].tolist(), "-", "-")
            inside &= box[axis] < int(limit[0])
        return inside

    def _box_offsets(self, buffer: str, origin, box: np.ndarray, mask: np.ndarray) -> np.ndarray:
        spec = self.buffers[buffer]
        if not len(origin) == len(spec.shape) >= len(box):
            raise ValueError(f"block copy on {buffer}: box rank {len(box)}, origin rank {len(origin)}, "
                             f"array rank {len(spec.shape)} must agree")
        # a box of lower rank lies in the last dimensions (e.g. one buffer of a ring)
        box = np.concatenate([np.zeros((len(origin) - len(box), box.shape[1]), dtype=box.dtype), box])
        offsets = np.zeros(box.shape[1], dtype=np.int64)
        for axis, (expr, stride, extent) in enumerate(zip(origin, spec.strides, spec.shape)):
            start = np.broadcast_to(self.expr(expr), mask.shape)
            if (start != start[0]).any():
                raise self.error("non-uniform copy", "threads disagree on a block copy's origin",
                                 np.flatnonzero(start != start[0])[:4].tolist(), buffer, "-")
            index = int(start[0]) + box[axis]
            if (index < 0).any() or (index >= extent).any():
                bad = int(index[(index < 0) | (index >= extent)][0])
                raise self.error("out of bounds", f"a block copy's subscript {axis} reaches {bad}, "
                                 f"outside 0..{extent - 1}", [0], buffer, bad)
            offsets += index * stride
        return swizzled(offsets, spec)

    def error(self, kind, what, threads, buffer, element) -> EmulationError:
        return EmulationError(kind, what, self.block, threads, buffer, element, dict(self.iteration))


def copy_box(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """A copy's elements in the order it moves them, as one column of box subscripts each, and
    the box's shape in that order (``axes``: its dimensions slowest first; () in order).

    >>> box, order = copy_box((2, 3), (1, 0))
    >>> order, box.T.tolist()
    ((3, 2), [[0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]])
    """
    axes = axes or tuple(range(len(shape)))
    order = tuple(shape[a] for a in axes)
    moved = np.indices(order).reshape(len(shape), -1)
    box = np.empty_like(moved)
    box[list(axes)] = moved
    return box, order


def copy_threads(shape: tuple[int, ...], vector: int, strategy: str, threads: int) -> np.ndarray:
    """Which thread copies each element of a block copy's box (C order), as the runtime's
    block_copy does: the last dimension is cut into vectors of ``vector`` elements; *striped*
    gives vector v to thread v % threads, *blocked* gives each thread one contiguous run.

    >>> copy_threads((2, 4), 2, "striped", 3).tolist()
    [0, 0, 1, 1, 2, 2, 0, 0]
    >>> copy_threads((2, 4), 2, "blocked", 3).tolist()
    [0, 0, 0, 0, 1, 1, 1, 1]
    """
    last = shape[-1]
    flat = np.arange(int(np.prod(shape)))
    vector_id = (flat // last) * -(-last // vector) + (flat % last) // vector
    if strategy == "striped":
        return vector_id % threads
    vectors = int(vector_id.max()) + 1 if len(vector_id) else 0
    return vector_id // -(-vectors // threads)


def _warp(threads: np.ndarray) -> np.ndarray:
    return threads // WARP


from . import emulate_hopper  # noqa: E402 - the Hopper statements' executors

emulate_hopper.register(EXECUTORS)
