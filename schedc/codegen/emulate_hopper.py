"""The emulator's Hopper: mbarriers with phases and transaction bytes, TMA copies, wgmma on
matrix descriptors, and warp roles that run concurrently, with a race detector for them.

Roles run as coroutines (one Python thread each, exactly one running at a time): a role runs
until an mbarrier wait whose phase has not completed, then the next role that can go on runs.
When none can, the block is deadlocked and that is reported with what each role waits for.

Races are found by happens-before, with vector clocks: each role, the TMA engine and each
role's wgmma products are *agents*; an mbarrier phase gathers the clocks of what arrived on it
(arrivals, the TMA copies that completed bytes on it) and hands them to the threads that wait
for it; ``wgmma.wait_group`` hands a role the clock of its completed products. Every element of
a shared buffer remembers who last wrote it and who read it when; reported, with block, role,
element and loop iteration:

- a wgmma reading a tile before the phase that brings its copy has been waited for;
- a TMA copy overwriting a tile that products of an earlier tile may still read (the stage
  was released before ``wait_group`` finished them, or not released at all);
- an accumulator read, written or stored while a wgmma on it is still in flight, or a wgmma on
  an accumulator written since the warpgroup's last ``wgmma.fence``;
- an mbarrier used before it is set up, or arrived on by more threads than its phase expects;
- a wgmma read or TMA copy (the async proxy) of an element a thread wrote with a plain store
  (the generic proxy) and did not follow with ``fence.proxy.async`` (``SharedMemory``);
- a TMA store of a tile other threads wrote with no barrier between, a write of a tile a TMA
  store may still be reading (its bulk group not waited for with ``.read``), and a block that
  ends with TMA stores unfinished.

Addresses are the hardware's: a TMA box lands at the shared address of its target swizzled by
the address bits (16-byte chunk ^= the 128-byte line, as the tensor map says), and wgmma finds
each operand element by its descriptor's canonical layout (PTX ISA, "Shared Memory Matrix
Layout") swizzled alike, so a wrong descriptor field or tile layout is a wrong result here.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import tma
from ..instructions import WARPGROUP, column_elements, descriptor, operand_k_major, swizzled, wgmma_accumulator
from ..ir.kernel import (
    BulkCommit,
    BulkWait,
    ClusterSync,
    Fence,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    Role,
    Roles,
    StructParam,
    SyncScope,
    TmaLoad,
    TmaStore,
    WarpgroupCommit,
    WarpgroupFence,
    WarpgroupWait,
    facts_of,
)
from ..ir.numeric import converted
from ..ir.types import is_float_dtype
from ..ir.walk import walk_statements
from .emulate_tensor import EXECUTORS as TENSOR_EXECUTORS
from .emulate_tensor import TILE_STATEMENTS, Executor, multiply

SWIZZLE_MASKS = {0: 0, 32: 1, 64: 3, 128: 7}  # address bits 7.. XORed into the 16-byte chunk bits 4..

Clock = dict[str, int]


def _join(a: Clock, b: Clock) -> Clock:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, -1) < v:
            out[k] = v
    return out


def hardware_swizzle(address: np.ndarray, swizzle: int) -> np.ndarray:
    """A shared-memory byte address as TMA and wgmma swizzle it: bits 4.. (the 16-byte chunk)
    XOR bits 7.. (the 128-byte line), 3, 2 or 1 bits for 128-, 64- and 32-byte rows."""
    mask = SWIZZLE_MASKS[swizzle]
    return address ^ (((address >> 7) & mask) << 4)


@dataclass
class _Mbarrier:
    count: int
    pending: int
    tx: int = 0
    phase: int = 0  # phases completed
    gathered: Clock = field(default_factory=dict)
    completed: list[Clock] = field(default_factory=list)  # the clock each phase handed on


@dataclass
class _Group:
    time: int
    fragments: set[str]


class Cluster:
    """What the blocks of a thread block cluster share in the emulator: the agents' clocks (a
    lone block is a cluster of one), the turns of their coroutines, and the cluster barrier."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self.members: list[Hopper | None] = [None] * size  # by rank
        self.clocks: dict[str, Clock] = {}
        self.agents: list[str] = []
        self.tma_time = 0
        self.turns: _Turns | None = None
        self.arrivals: list[set[int]] = []  # per use of the cluster barrier: the ranks arrived
        self.released: list[Clock] = []  # per use: what the arrivals knew
        self.uses: dict[int, int] = {}  # rank -> uses of the cluster barrier so far

    def member(self, rank: int, b) -> Hopper:
        if not 0 <= rank < self.size or self.members[rank] is None:
            raise b.error("cluster", f"rank {rank} is not a block of this cluster of {self.size}", [0], "-", rank)
        return self.members[rank]


class Hopper:
    """A block's mbarriers, async agents and shared-memory history (shared by its roles)."""

    def __init__(self, block, cluster: Cluster | None = None, rank: int = 0) -> None:
        self.b = block
        self.cluster = cluster or Cluster()
        self.rank = rank
        self.cluster.members[rank] = self
        self.main = f"{rank}/block" if self.cluster.size > 1 else "block"
        self.clocks.setdefault(self.main, {self.main: 0})
        self.barriers: dict[tuple[str, int], _Mbarrier] = {}
        self.wgmma_time: dict[str, int] = {}
        self.open: dict[str, _Group] = {}  # per role: the products since its last commit
        self.groups: dict[str, list[_Group]] = {}  # per role: committed, oldest first
        self.in_flight: dict[tuple[str, str], int] = {}  # (agent, fragment) -> the product time it waits for
        self.dirty: dict[str, set[str]] = {}  # per role: accumulators written since its wgmma.fence
        self.writes: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # buffer -> (agent id, time)
        self.reads: dict[str, dict[str, np.ndarray]] = {}  # buffer -> agent -> last read time
        kernel = block.kernel
        self.bulk_open: dict[int, list[int]] = {}  # per thread: its TMA stores not yet committed
        self.bulk_reading: dict[int, list[list[int]]] = {}  # per thread: groups maybe still reading, oldest first
        self.bulk_writing: dict[int, list[list[int]]] = {}  # per thread: groups maybe still writing
        self.bulk_next = 0
        self.base = dict(zip((s.name for s in kernel.shared), kernel.shared_offsets()))
        self.maps = {v.name: v.spec for v in kernel.values if isinstance(v, StructParam)}
        self.named: dict[int, _Named] = {}  # named barriers by id: their phase in progress

    # -- what the cluster shares --

    @property
    def clocks(self) -> dict[str, Clock]:
        return self.cluster.clocks

    @property
    def agents(self) -> list[str]:
        return self.cluster.agents

    @property
    def turns(self) -> _Turns | None:
        return self.cluster.turns

    @turns.setter
    def turns(self, value: _Turns | None) -> None:
        self.cluster.turns = value

    @property
    def tma_time(self) -> int:
        return self.cluster.tma_time

    @tma_time.setter
    def tma_time(self, value: int) -> None:
        self.cluster.tma_time = value

    # -- clocks --

    def clock(self, agent: str) -> Clock:
        return self.clocks.setdefault(agent, {agent: 0})

    def tick(self, agent: str) -> None:
        c = self.clock(agent)
        c[agent] = c.get(agent, 0) + 1

    def agent_id(self, agent: str) -> int:
        if agent not in self.agents:
            self.agents.append(agent)
        return self.agents.index(agent)

    # -- shared-memory history --

    def _history(self, buffer: str):
        if buffer not in self.writes:
            size = self.b.buffers[buffer].size
            self.writes[buffer] = (np.full(size, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64))
            self.reads[buffer] = {}
        return self.writes[buffer], self.reads[buffer]

    def check_write(self, who: str, buffer: str, elements: np.ndarray, known: Clock, what: str) -> None:
        (agents, times), reads = self._history(buffer)
        for agent, read in reads.items():
            late = (read[elements] >= 0) & (read[elements] > known.get(agent, -1))
            if late.any():
                n = int(np.argmax(late))
                raise self.b.error("race", f"{what} overwrites {self.place(buffer, int(elements[n]))}, which "
                                   f"{_name(agent)} may still read: nothing orders that read before this write "
                                   "(free the stage after wgmma.wait_group has finished its products)",
                                   [0], buffer, int(elements[n]))
        self._ordered_after_write(buffer, elements, known, "overwrites", who)

    def check_read(self, who: str, buffer: str, elements: np.ndarray, known: Clock) -> None:
        self._ordered_after_write(buffer, elements, known, "reads", who)

    def _ordered_after_write(self, buffer, elements, known: Clock, verb: str, who: str) -> None:
        (agents, times), _ = self._history(buffer)
        written = times[elements] >= 0
        if not written.any():
            return
        late = np.zeros(len(elements), dtype=bool)
        for a in np.unique(agents[elements][written]):
            name = self.agents[int(a)]
            late |= written & (agents[elements] == a) & (times[elements] > known.get(name, -1))
        if late.any():
            n = int(np.argmax(late))
            writer = self.agents[int(agents[elements][n])]
            raise self.b.error("race", f"{_name(who)} {verb} {self.place(buffer, int(elements[n]))} before "
                               f"{_name(writer)}'s write of it is known to have completed (wait for the mbarrier "
                               "phase that the write completes, and free a stage only after its readers are done)",
                               [0], buffer, int(elements[n]))

    def record_write(self, agent: str, buffer: str, elements: np.ndarray, time: int) -> None:
        (agents, times), reads = self._history(buffer)
        agents[elements], times[elements] = self.agent_id(agent), time
        for read in reads.values():
            read[elements] = -1

    def record_read(self, agent: str, buffer: str, elements: np.ndarray, time: int) -> None:
        _, reads = self._history(buffer)
        read = reads.setdefault(agent, np.full(self.b.buffers[buffer].size, -1, dtype=np.int64))
        read[elements] = time

    def place(self, buffer: str, element: int) -> str:
        spec = self.b.buffers[buffer]
        if len(spec.shape) == 4:  # a TMA ring: (stage, chunk, row, column)
            return f"{buffer}[{element}] (stage {element // spec.strides[0]})"
        return f"{buffer}[{element}]"

    def locate(self, addresses: np.ndarray) -> tuple[str, np.ndarray]:
        """The shared buffer that holds these byte addresses and their element offsets in it."""
        first = int(addresses.min())
        for name, base in self.base.items():
            spec = self.b.buffers[name]
            if base <= first < base + spec.nbytes:
                size = spec.dtype.size
                offsets = (addresses - base) // size
                if (addresses < base).any() or (offsets >= spec.size).any() or ((addresses - base) % size).any():
                    raise self.b.error("out of bounds", f"a tile at shared address {first} leaves {name}",
                                       [0], name, int(offsets.max()))
                return name, offsets
        raise self.b.error("out of bounds", f"shared address {first} is in no shared buffer", [0], "-", first)

    # -- mbarriers --

    def barrier(self, name: str, index: int, what: str) -> _Mbarrier:
        bar = self.barriers.get((name, index))
        if bar is None:
            where = f" of the cluster's block {self.rank}" if self.cluster.size > 1 else ""
            raise self.b.error("mbarrier", f"{what} on {name}[{index}]{where} before it is set up (mbarrier.init)",
                               [0], name, index)
        return bar

    def arrive(self, agent: str, bar: _Mbarrier, name: str, index: int, count: int, tx: int) -> None:
        if count > bar.pending:
            raise self.b.error("mbarrier", f"{count} thread(s) arrive on {name}[{index}], whose phase "
                               f"{bar.phase} expects {bar.pending} more arrival(s)", [0], name, index)
        bar.gathered = _join(bar.gathered, self.clock(agent))
        self.tick(agent)
        bar.pending -= count
        bar.tx += tx
        self._complete(bar)

    def complete_tx(self, bar: _Mbarrier, nbytes: int, clock: Clock) -> None:
        bar.tx -= nbytes
        bar.gathered = _join(bar.gathered, clock)
        self._complete(bar)

    @staticmethod
    def _complete(bar: _Mbarrier) -> None:
        if bar.pending == 0 and bar.tx == 0:
            bar.completed.append(bar.gathered)
            bar.phase += 1
            bar.pending, bar.gathered = bar.count, {}

    @staticmethod
    def done(bar: _Mbarrier, parity: int) -> bool:
        """The phase of this parity has completed: the current phase has the other parity."""
        return bar.phase % 2 != parity


def _name(agent: str) -> str:
    if agent == "tma" or agent.startswith("tma:"):  # tma:<barrier>[<index>]: the copies completing on it
        return "a TMA copy"
    if agent.startswith("wgmma:"):
        return f"a wgmma of {_name(agent[6:])}"
    if "/" in agent:  # a block of a cluster: rank/role
        rank, role = agent.split("/", 1)
        return f"the cluster's block {rank}" if role == "block" else f"{_name(role)} of the cluster's block {rank}"
    if " warpgroup " in agent:  # a warpgroup of a role that runs its warpgroups apart (_parts)
        role, group = agent.rsplit(" warpgroup ", 1)
        return f"warpgroup {group} of {_name(role)}"
    if " team " in agent:  # a team of a role (Role.parts)
        role, team = agent.rsplit(" team ", 1)
        return f"team {team} of the {role} role"
    return f"the {agent} role" if agent != "block" else "the block"


def _hopper(b) -> Hopper:
    if getattr(b, "hopper", None) is None:
        b.hopper = Hopper(b)
    return b.hopper


def _agent(b) -> str:
    return getattr(b, "agent", None) or _hopper(b).main


def _uniform_index(b, expr, mask, what: str) -> int:
    value = np.broadcast_to(b.expr(expr), mask.shape)[mask]
    if len(value) and (value != value[0]).any():
        raise b.error("non-uniform", f"threads disagree on {what}", np.flatnonzero(mask)[:4].tolist(), "-", "-")
    return int(value[0]) if len(value) else 0


# -- executors (registered with the emulator) ----------------------------------------------------


def register(executors) -> None:
    executors.add(MbarrierInit, _init)
    executors.add(MbarrierArrive, _arrive)
    executors.add(MbarrierWait, _wait)
    executors.add(TmaLoad, _tma)
    executors.add(Fence, _proxy_fence)
    executors.add(WarpgroupFence, _fence)
    executors.add(WarpgroupCommit, _commit)
    executors.add(WarpgroupWait, _wgmma_wait)
    executors.add(Roles, _roles)
    executors.add(ClusterSync, _cluster_sync)
    executors.add(TmaStore, _tma_store)
    executors.add(BulkCommit, _bulk_commit)
    executors.add(BulkWait, _bulk_wait)
    executors.add(NamedBarrier, _named_barrier)


def _proxy_fence(b, s: Fence, mask) -> None:
    """fence.proxy.async: the threads' generic writes become visible to TMA and wgmma.
    (fence.mbarrier_init orders barrier set-up, which the barriers' own checks cover.)"""
    if s.kind == "proxy_async":
        b.shared.proxy_fence(b.thread_ids[mask])


def _init(b, s: MbarrierInit, mask) -> None:
    h = _hopper(b)
    index = _uniform_index(b, s.index, mask, f"the index of {s.barrier}")
    h.barriers[s.barrier, index] = _Mbarrier(s.count, s.count)


def _arrive(b, s: MbarrierArrive, mask) -> None:
    h = _hopper(b)
    values = np.broadcast_to(b.expr(s.index), mask.shape)[mask]
    targets = [h.cluster.member(rank, b) for rank in range(s.cluster)] if s.cluster else [h]
    for index in np.unique(values):
        count = int((values == index).sum())
        for t in targets:
            bar = t.barrier(s.barrier, int(index), "arrive")
            t.arrive(_agent(b), bar, s.barrier, int(index), count, count * s.transaction_bytes)


def _wait(b, s: MbarrierWait, mask) -> None:
    """Threads wait for a phase of their barrier; threads that name different barriers of the
    array (each warpgroup its own) wait for each in turn, each with its own parity."""
    indexes = np.broadcast_to(b.expr(s.index), mask.shape)
    for value in np.unique(indexes[mask]).tolist():
        _wait_one(b, s, mask & (indexes == value))


def _wait_one(b, s: MbarrierWait, mask) -> None:
    h = _hopper(b)
    index = _uniform_index(b, s.index, mask, f"the index of {s.barrier}")
    parity = _uniform_index(b, s.parity, mask, f"the parity of {s.barrier}[{index}]")
    bar = h.barrier(s.barrier, index, "a wait")
    while not h.done(bar, parity):
        what = f"{s.barrier}[{index}] to complete its phase of parity {parity} ({bar.phase} phase(s) completed, " \
               f"{bar.pending} arrival(s) and {bar.tx} byte(s) outstanding)"
        if h.turns is None:
            raise b.error("deadlock", f"the block waits for {what}, and nothing else runs to complete it",
                          np.flatnonzero(mask)[:4].tolist(), s.barrier, index)
        h.turns.block(_agent(b), lambda: h.done(bar, parity), what, b)
    if bar.phase >= 1:
        last = bar.phase - 1  # the completed phase of this parity
        agent = _agent(b)
        h.clocks[agent] = _join(h.clock(agent), bar.completed[last])
        b.shared.observe((s.barrier, index), last + 1, b.thread_ids[mask])


def _tma(b, s: TmaLoad, mask) -> None:
    h = _hopper(b)
    spec = h.maps[s.tensor_map]
    array = b.buffers[spec.array]
    target = b.buffers[s.target]
    size = array.dtype.size
    order, grid = _box(spec, array)
    extent = spec.extent(array.shape)
    for thread in np.flatnonzero(mask):
        bar_index = int(np.broadcast_to(b.expr(s.index), mask.shape)[thread])
        coords = [int(np.broadcast_to(b.expr(c), mask.shape)[thread]) for c in s.coords]
        index = [coords[d] + grid[n] for n, d in enumerate(order)]
        inside = np.ones(grid.shape[1], dtype=bool)
        offset = np.zeros(grid.shape[1], dtype=np.int64)
        for n, d in enumerate(order):
            inside &= (index[n] >= 0) & (index[n] < extent[d])
            offset += index[n] * array.strides[d]
        values = np.zeros(grid.shape[1], dtype=target.dtype.numpy)
        values[inside] = b.memory[spec.array][offset[inside]]
        start = int(np.broadcast_to(b.offset(s.target, s.target_origin, mask), mask.shape)[thread])
        address = h.base[s.target] + start * size
        if address % 128:
            raise b.error("misaligned TMA", f"a TMA box lands at shared address {address}, not 128-byte aligned",
                          [int(thread)], s.target, start)
        physical = hardware_swizzle(address + np.arange(grid.shape[1], dtype=np.int64) * size, spec.swizzle)
        buffer, elements = h.locate(physical)
        agent = _agent(b)
        h.tma_time += 1
        # each barrier's copies are their own agent: waiting for one barrier's phase says nothing of
        # copies completing on another (they are not ordered with each other)
        writer = f"tma:{s.barrier}[{bar_index}]"
        clock = _join(h.clock(agent), {writer: h.tma_time})
        ranks = [r for r in range(h.cluster.size) if s.multicast >> r & 1] if s.multicast else [h.rank]
        for rank in ranks:  # multicast: the same box at the same offset in each block it names
            t = h.cluster.member(rank, b)
            bar = t.barrier(s.barrier, bar_index, "a TMA copy completing")
            # ordered after what its issuer knows, not after other copies (they are not ordered)
            t.check_write("tma", buffer, elements, h.clock(agent), "a TMA copy")
            t.b.shared.check_async_proxy(buffer, elements, "a TMA copy")
            t.b.shared.tma_write(buffer, elements, values, int(thread), (s.barrier, bar_index), bar.phase)
            t.record_write(writer, buffer, elements, h.tma_time)
            t.complete_tx(bar, grid.shape[1] * size, clock)


def _box(spec, array) -> tuple[list[int], np.ndarray]:
    """A tensor map's array dimensions, slowest first, and its box's elements in that order."""
    order = tma.dimension_order(array.strides)
    box = [spec.box[d] for d in order]
    return order, np.indices(box).reshape(len(box), -1)


def _tma_store(b, s: TmaStore, mask) -> None:
    """Each thread that runs it stores a box: its shared tile is read now (checked: written by
    other threads before a barrier, fenced for the async proxy) and counts as being read until
    the thread waits for the store's bulk group; elements past the array are not written."""
    h = _hopper(b)
    spec = h.maps[s.tensor_map]
    array = b.buffers[spec.array]
    size = b.buffers[s.source].dtype.size
    order, grid = _box(spec, array)
    extent = spec.extent(array.shape)
    for thread in np.flatnonzero(mask):
        start = int(np.broadcast_to(b.offset(s.source, s.source_origin, mask), mask.shape)[thread])
        address = h.base[s.source] + start * size
        if address % 128:
            raise b.error("misaligned TMA", f"a TMA store reads shared address {address}, not 128-byte aligned",
                          [int(thread)], s.source, start)
        buffer, elements = h.locate(hardware_swizzle(address + np.arange(grid.shape[1], dtype=np.int64) * size,
                                                     spec.swizzle))
        b.shared.check_async_proxy(buffer, elements, "a TMA store")
        token = h.bulk_next
        h.bulk_next += 1
        values = b.shared.async_read(buffer, elements, int(thread), token)
        coords = [int(np.broadcast_to(b.expr(c), mask.shape)[thread]) for c in s.coords]
        inside = np.ones(grid.shape[1], dtype=bool)
        offset = np.zeros(grid.shape[1], dtype=np.int64)
        for n, d in enumerate(order):
            index = coords[d] + grid[n]
            inside &= (index >= 0) & (index < extent[d])
            offset += index * array.strides[d]
        memory = b.memory[spec.array]
        if s.adds:  # in the array's type, as the TMA unit adds (the blocks run one after another here)
            wide = np.float32 if is_float_dtype(memory.dtype) else memory.dtype
            total = memory[offset[inside]].astype(wide) + values[inside].astype(wide)
            memory[offset[inside]] = total.astype(memory.dtype)
        else:
            memory[offset[inside]] = values[inside].astype(memory.dtype)
        b.mark_written(spec.array, offset[inside], adds=s.adds)
        h.bulk_open.setdefault(int(thread), []).append(token)


def _bulk_commit(b, s: BulkCommit, mask) -> None:
    h = _hopper(b)
    for thread in np.flatnonzero(mask).tolist():
        group = h.bulk_open.pop(thread, [])
        h.bulk_reading.setdefault(thread, []).append(group)
        h.bulk_writing.setdefault(thread, []).append(group)


def _bulk_wait(b, s: BulkWait, mask) -> None:
    h = _hopper(b)
    for thread in np.flatnonzero(mask).tolist():
        lists = (h.bulk_reading,) if s.read else (h.bulk_reading, h.bulk_writing)
        for groups in lists:
            mine = groups.setdefault(thread, [])
            done = mine[:max(len(mine) - s.pending, 0)]
            del mine[:len(done)]
            b.shared.release([t for group in done for t in group], thread)


@dataclass
class _Named:
    """A named barrier's phase: the threads counted so far (those that sync wait), its count."""

    count: int
    counted: int = 0
    waiting: list[int] = field(default_factory=list)
    arrived: bool = False  # a bar.arrive counted in this phase (it orders no memory)
    phase: int = 0  # phases completed


def _named_barrier(b, s: NamedBarrier, mask) -> None:
    """bar.sync / bar.arrive id, threads: the threads that run it count towards the id's phase of
    ``threads``; a sync waits until the phase completes (threads of other roles or warpgroups
    may complete it later). A phase of syncs alone orders its threads' shared-memory accesses."""
    ids = np.broadcast_to(b.expr(s.id), mask.shape)
    h = _hopper(b)
    named = h.named
    for value in np.unique(ids[mask]).tolist():
        threads = b.thread_ids[mask & (ids == value)]
        if not 1 <= value <= 15:
            raise b.error("barrier", f"named barrier {value}: ids are 1..15 (0 is __syncthreads)",
                          threads[:4].tolist(), "-", "-")
        bar = named.setdefault(value, _Named(s.threads))
        if bar.counted and bar.count != s.threads:
            raise b.error("barrier", f"named barrier {value} is counting to {bar.count} threads and a "
                          f"{'bar.arrive' if s.arrive else 'bar.sync'} of {s.threads} joins it",
                          threads[:4].tolist(), "-", "-")
        bar.count = s.threads
        bar.counted += len(threads)
        if bar.counted > bar.count:
            raise b.error("barrier", f"named barrier {value} counts {bar.counted} threads towards its {bar.count}",
                          threads[:4].tolist(), "-", "-")
        bar.arrived |= s.arrive
        if not s.arrive:
            bar.waiting += threads.tolist()
        if bar.counted == bar.count:
            if not bar.arrived:
                b.shared.barrier_among(np.array(bar.waiting))
            bar.counted, bar.waiting, bar.arrived, bar.phase = 0, [], False, bar.phase + 1
            continue
        if s.arrive:
            continue
        phase = bar.phase
        what = f"named barrier {value} to count {bar.count} threads ({bar.counted} counted)"
        if h.turns is None:
            raise b.error("deadlock", f"the block waits for {what}, and nothing else runs to complete it",
                          threads[:4].tolist(), "-", "-")
        h.turns.block(_agent(b), lambda bar=bar, phase=phase: bar.phase > phase, what, b)


def finish(b) -> None:
    """The block ends: no TMA store of it may still be reading its shared memory or writing."""
    h = getattr(b, "hopper", None)
    if h is None:
        return
    for thread in sorted(set(h.bulk_open) | set(h.bulk_writing)):
        if h.bulk_open.get(thread) or h.bulk_writing.get(thread):
            raise b.error("race", f"the block ends while TMA stores issued by thread {thread} may be unfinished "
                          "(cp.async.bulk.wait_group 0 before the block exits)", [thread], "-", "-")


# -- wgmma ---------------------------------------------------------------------------------------


def _groups(mask: np.ndarray, b) -> np.ndarray:
    """The warpgroups that run a statement: whole ones only."""
    groups = mask.reshape(-1, WARPGROUP)
    partial = groups.any(axis=1) & ~groups.all(axis=1)
    if partial.any():
        g = int(np.flatnonzero(partial)[0])
        raise b.error("divergent warpgroup", "a wgmma statement runs on part of a warpgroup",
                      np.flatnonzero(groups[g])[:4].tolist(), "-", "-")
    return groups.all(axis=1)


def _fence(b, s, mask) -> None:
    _hopper(b).dirty.pop(_agent(b), None)


def _commit(b, s, mask) -> None:
    h = _hopper(b)
    agent = _agent(b)
    group = h.open.pop(agent, None)
    if group is not None:
        h.groups.setdefault(agent, []).append(group)


def _wgmma_wait(b, s: WarpgroupWait, mask) -> None:
    h = _hopper(b)
    agent = _agent(b)
    groups = h.groups.get(agent, [])
    done, h.groups[agent] = groups[:max(len(groups) - s.pending, 0)], groups[max(len(groups) - s.pending, 0):]
    for group in done:
        h.clocks[agent] = _join(h.clock(agent), {f"wgmma:{agent}": group.time})
        for name in group.fragments:
            if h.in_flight.get((agent, name), -1) <= group.time:
                h.in_flight.pop((agent, name), None)


# Tile statements that touch an accumulator's elements, and whether they change them: while a
# wgmma on the accumulator is in flight, any of them races with the tensor cores.
_ACCUMULATOR_USES = {FragmentFill: True, FragmentApply: True, FragmentAdd: True, FragmentLoad: True,
                     FragmentMap: True, FragmentStore: False}


class Wgmma(Executor):
    """The wgmma family's tile statements: descriptors, products, accumulators. Its statements
    run per warpgroup (``groups``) where the other families' run per warp."""

    def run(self, s, mask, active) -> None:
        b = self.b
        writes = _ACCUMULATOR_USES.get(type(s))
        if writes is not None and b.specs[s.fragment].use == "accumulator":
            h = _hopper(b)
            self.idle(h, s.fragment, type(s).__name__)
            if writes:
                h.dirty.setdefault(_agent(b), set()).add(s.fragment)
        thread = facts_of(s).scope is SyncScope.THREAD  # a map: each thread's own elements, on any lanes
        groups = mask.reshape(-1, WARPGROUP).any(axis=1) if thread else _groups(mask, b)
        TILE_STATEMENTS.handler(s)(self, s, mask, groups)

    def declare(self, s: Fragment, groups) -> None:
        """Zeros in the declaring warpgroups' rows (other teams' warpgroups keep theirs)."""
        shape, dtype = ((len(groups), WARPGROUP, s.n // 2), s.dtype.numpy) if s.use == "accumulator" else \
            ((len(groups), WARPGROUP, s.k // 2), s.dtype.numpy) if s.in_registers else \
            ((len(groups),), np.int64)  # each warpgroup's tile address
        held = self.b.fragments.get(s.name)
        if held is None or held.shape != shape or held.dtype != dtype:
            self.b.fragments[s.name] = np.zeros(shape, dtype=dtype)
        else:
            held[groups] = 0

    def element_layout(self, spec: Fragment):
        return wgmma_accumulator(spec.n, spec.dtype), WARPGROUP

    def apply(self, s: FragmentApply, groups) -> None:
        self.window(s, groups) if s.columns is not None else self.b.apply(s, groups)

    def add(self, s: FragmentAdd, groups) -> None:
        self.window(s, groups) if s.columns is not None else self.b.add(s, groups)

    def load(self, s: FragmentLoad, mask, groups) -> None:
        if self.b.specs[s.fragment].use == "accumulator":
            self.elements(s, mask, groups)
        else:
            self.descriptor(s, mask, groups)

    def store(self, s: FragmentStore, mask, groups) -> None:
        self.elements(s, mask, groups)

    def window(self, s: FragmentApply | FragmentAdd, groups) -> None:
        """An add or element-wise op on the elements that hold the tile's ``columns``: the
        block's own executor on a view of them."""
        b = self.b
        spec = b.specs[s.fragment]
        first, end = column_elements(wgmma_accumulator(spec.n, spec.dtype), WARPGROUP, *s.columns)
        names = (s.fragment, s.source) if isinstance(s, FragmentAdd) else (s.fragment,)
        whole = {name: b.fragments[name] for name in names}
        try:
            for name in names:
                b.fragments[name] = whole[name][:, :, first:end]
            b.add(s, groups) if isinstance(s, FragmentAdd) else b.apply(s, groups)
        finally:
            b.fragments.update(whole)

    def convert(self, s: FragmentConvert, groups) -> None:
        """The source's elements over the tile's columns, rounded: the register A tile's lanes hold
        them as the accumulator's do (``wgmma_accumulator(k)`` is the A tile's layout)."""
        b, h = self.b, _hopper(self.b)
        self.idle(h, s.source, "a conversion")
        self.idle(h, s.fragment, "a conversion", "the A tile")  # a wgmma in flight may still read its registers
        spec, source = b.specs[s.fragment], b.specs[s.source]
        first, end = column_elements(wgmma_accumulator(source.n, source.dtype), WARPGROUP, s.first, s.first + spec.k)
        b.fragments[s.fragment][groups] = converted(b.fragments[s.source][groups][:, :, first:end], spec.dtype)
        h.dirty.setdefault(_agent(b), set()).add(s.fragment)

    def registers(self, name: str, spec: Fragment, groups) -> np.ndarray:
        """A register A tile as (groups, 64, k) values, each element where its lane holds it."""
        layout = wgmma_accumulator(spec.k, spec.dtype)
        lanes, e = np.arange(WARPGROUP)[:, None], np.arange(layout.elements)[None, :]
        values = self.b.fragments[name][groups]
        out = np.zeros((values.shape[0], 64, spec.k), dtype=np.float32)
        out[:, layout.row(lanes, e), layout.col(lanes, e)] = values.astype(np.float32)
        return out

    def idle(self, h: Hopper, name: str, what: str, noun: str = "the accumulator") -> None:
        if (_agent(self.b), name) in h.in_flight:
            raise self.b.error("race", f"{what} of {noun} {name} while a wgmma on it is in flight "
                               "(wgmma.wait_group first)", [0], name, "-")

    def descriptor(self, s: FragmentLoad, mask, groups) -> None:
        b = self.b
        offset = np.broadcast_to(b.offset(s.buffer, s.origin, mask), mask.shape).reshape(-1, WARPGROUP)[groups]
        if (offset != offset[:, :1]).any():
            raise b.error("non-uniform tile", "threads of a warpgroup disagree on a tile's origin", [0], s.buffer, "-")
        size = b.buffers[s.buffer].dtype.size
        b.fragments[s.fragment][groups] = _hopper(b).base[s.buffer] + offset[:, 0] * size

    def addresses(self, frag: Fragment, starts: np.ndarray, buffer) -> np.ndarray:
        """(groups, rows, cols) byte addresses of an operand tile from its descriptor: the
        canonical layout of a k-major or m/n-major tile, swizzled by the address bits."""
        d = descriptor(buffer, operand_k_major(frag.use, frag.layout))
        size = buffer.dtype.size
        mn_extent = frag.m if frag.use == "matrix_a" else frag.n
        mn = np.arange(mn_extent)[:, None]
        k = np.arange(frag.k)[None, :]
        if d.k_major:
            offset = (mn % 8) * d.swizzle + (mn // 8) * d.sbo + k * size
        else:
            per_row = d.swizzle // size
            offset = (mn % per_row) * size + (mn // per_row) * d.lbo + (k % 8) * d.swizzle + (k // 8) * d.sbo
        if frag.use == "matrix_b":
            offset = offset.T  # (k, n)
        return hardware_swizzle(starts[:, None, None] + offset[None], d.swizzle)

    def mma(self, s: FragmentMma, mask, groups) -> None:
        b = self.b
        h = _hopper(b)
        agent = _agent(b)
        a_spec, b_spec, c_spec = (b.specs[n] for n in (s.a, s.b, s.c))
        for name in (s.c, s.a):
            if name in h.dirty.get(agent, set()):
                what = "accumulator" if name == s.c else "A tile"
                raise b.error("race", f"a wgmma on the {what} {name}, written since the warpgroup's last "
                              "wgmma.fence", [0], name, "-")
        wg_agent = f"wgmma:{agent}"
        h.wgmma_time[agent] = h.wgmma_time.get(agent, 0) + 1
        time = h.wgmma_time[agent]
        clock = _join(h.clock(agent), {wg_agent: time})
        mats = []
        for spec, name in ((a_spec, s.a), (b_spec, s.b)):
            if spec.in_registers:
                mats.append(self.registers(name, spec, groups))
                continue
            starts = b.fragments[name][groups]
            buffer, _ = h.locate(starts)
            addresses = self.addresses(spec, starts, b.buffers[buffer])
            buffer, elements = h.locate(addresses.ravel())
            h.check_read(wg_agent, buffer, elements, clock)
            b.shared.check_async_proxy(buffer, elements, "a wgmma")
            h.record_read(wg_agent, buffer, elements, time)
            values = b.shared.values[buffer][elements].reshape(addresses.shape).astype(np.float32)
            if spec.precision == "tf32":  # the tensor cores read a float32's top 19 bits
                values = (values.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
            mats.append(values)
        layout = wgmma_accumulator(c_spec.n, c_spec.dtype)
        lanes, e = np.arange(WARPGROUP)[:, None], np.arange(layout.elements)[None, :]
        rows, cols = layout.row(lanes, e), layout.col(lanes, e)
        acc = b.fragments[s.c][groups]
        c = np.zeros((acc.shape[0], 64, c_spec.n), dtype=acc.dtype)
        c[:, rows, cols] = acc
        d = multiply(mats[0], mats[1], c, acc.dtype)
        b.fragments[s.d][groups] = d[:, rows, cols]
        group = h.open.setdefault(agent, _Group(time, set()))
        group.time = time
        group.fragments.add(s.d)
        h.in_flight[agent, s.d] = time
        if a_spec.in_registers:  # the tensor cores read A's registers until the group completes
            group.fragments.add(s.a)
            h.in_flight[agent, s.a] = time

    def elements(self, s, mask, groups) -> None:
        """An accumulator from or to global memory, element by element (zeros past C's edge),
        or (some of its columns) into a shared tile."""
        b = self.b
        frag = b.fragments[s.fragment]
        spec = b.specs[s.fragment]
        layout = wgmma_accumulator(spec.n, spec.dtype)
        array = b.buffers[s.buffer]
        start = sum((np.broadcast_to(b.expr(sub), mask.shape) * stride
                     for sub, stride in zip(s.origin, array.strides)), np.zeros(mask.shape, dtype=np.int64))
        start = start.reshape(-1, WARPGROUP)[groups]
        if (start != start[:, :1]).any():
            raise b.error("non-uniform tile", "threads of a warpgroup disagree on a tile's origin", [0], s.buffer, "-")
        columns = getattr(s, "columns", None)
        first, end = column_elements(layout, WARPGROUP, *columns) if columns else (0, layout.elements)
        lanes, e = np.arange(WARPGROUP)[:, None], np.arange(first, end)[None, :]
        rows, cols = layout.row(lanes, e), layout.col(lanes, e) - (columns[0] if columns else 0)
        offsets = start[:, :1, None] + rows[None] * s.row_stride + cols[None] * s.col_stride
        if s.buffer in b.shared.buffers:
            if isinstance(s, FragmentLoad):
                self.from_shared(s, offsets, groups, first, end)
            else:
                self.to_shared(s, offsets, frag[groups][:, :, first:end], groups)
            return
        inside = np.ones(offsets.shape, dtype=bool)
        if s.edge is not None:
            edge_rows = np.broadcast_to(b.expr(s.edge.rows), mask.shape).reshape(-1, WARPGROUP)[groups][:, :1, None]
            edge_cols = np.broadcast_to(b.expr(s.edge.cols), mask.shape).reshape(-1, WARPGROUP)[groups][:, :1, None]
            inside = (rows[None] < edge_rows) & (cols[None] < edge_cols)
        bad = ((offsets < 0) | (offsets >= array.size)) & inside
        if bad.any():
            raise b.error("out of bounds", f"an accumulator tile reaches outside {s.buffer} (size {array.size})",
                          [0], s.buffer, int(offsets[bad][0]))
        if isinstance(s, FragmentLoad):
            values = np.zeros(offsets.shape, dtype=frag.dtype)
            values[inside] = b.memory[s.buffer][offsets[inside]]
            frag[groups] = values
        else:
            memory = b.memory[s.buffer]
            memory[offsets[inside]] = frag[groups][inside].astype(memory.dtype)
            b.mark_written(s.buffer, offsets[inside])


    def to_shared(self, s: FragmentStore, offsets: np.ndarray, values: np.ndarray, groups) -> None:
        """Accumulator elements into a (swizzled) shared tile, each written by its own thread."""
        b = self.b
        target = b.buffers[s.buffer]
        elements, threads = self.shared_elements(s, offsets, groups)
        b.shared.write(s.buffer, elements, converted(values, target.dtype).ravel(), threads)

    def from_shared(self, s: FragmentLoad, offsets: np.ndarray, groups, first: int, end: int) -> None:
        """Accumulator elements (some columns of them) from a (swizzled) shared tile, each read
        by its own thread: checked like any shared read (written by another thread without a
        barrier, brought by a TMA copy whose phase the thread has not waited for)."""
        b = self.b
        elements, threads = self.shared_elements(s, offsets, groups)
        values = b.shared.read(s.buffer, elements, threads).reshape(offsets.shape)
        frag = b.fragments[s.fragment]
        window = frag[groups]
        window[:, :, first:end] = values.astype(frag.dtype)
        frag[groups] = window

    def shared_elements(self, s, offsets: np.ndarray, groups) -> tuple[np.ndarray, np.ndarray]:
        """The stored elements of a tile's (swizzled) offsets in a shared buffer, and the thread
        that moves each one."""
        b = self.b
        target = b.buffers[s.buffer]
        if (offsets < 0).any() or (offsets >= target.size).any():
            bad = offsets[(offsets < 0) | (offsets >= target.size)]
            raise b.error("out of bounds", f"an accumulator tile reaches outside {s.buffer} (size {target.size})",
                          [0], s.buffer, int(bad[0]))
        threads = np.flatnonzero(groups)[:, None, None] * WARPGROUP + np.arange(WARPGROUP)[None, :, None]
        threads = np.broadcast_to(threads, offsets.shape)
        return swizzled(offsets, target).ravel(), threads.ravel()


TENSOR_EXECUTORS["wgmma"] = Wgmma


# -- warp roles ----------------------------------------------------------------------------------


class _Stop(Exception):
    """Another role failed: unwind this one."""


class _Turns:
    """Roles as coroutines: one runs at a time; a role blocked on an mbarrier hands the turn to
    the next role that can go on."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.cond = threading.Condition()
        self.current = names[0]
        self.blocked: dict[str, tuple[Callable[[], bool], str]] = {}
        self.finished: set[str] = set()
        self.failure: BaseException | None = None

    def add(self, after: str, names: list[str]) -> None:
        """More coroutines (a block's roles), next in turn after ``after``."""
        with self.cond:
            at = self.names.index(after) + 1
            self.names[at:at] = names

    def start(self, me: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.current == me or self.failure is not None)
            if self.failure is not None:
                raise _Stop

    def block(self, me: str, ready: Callable[[], bool], what: str, b) -> None:
        with self.cond:
            self.blocked[me] = (ready, what)
            self._next(me, b)
            self.cond.wait_for(lambda: self.current == me or self.failure is not None)
            self.blocked.pop(me, None)
            if self.failure is not None:
                raise _Stop

    def finish(self, me: str, b, failure: BaseException | None = None) -> None:
        with self.cond:
            self.finished.add(me)
            if failure is not None and self.failure is None:
                self.failure = failure
            if self.failure is None and len(self.finished) < len(self.names):
                self._next(me, b)
            self.cond.notify_all()

    def _next(self, me: str, b) -> None:
        order = self.names[self.names.index(me) + 1:] + self.names[:self.names.index(me) + 1]
        for name in order:
            if name in self.finished:
                continue
            waiting = self.blocked.get(name)
            if waiting is None or waiting[0]():
                self.current = name
                self.cond.notify_all()
                return
        waits = "; ".join(f"{_name(name)} waits for {what}" for name, (_, what) in self.blocked.items())
        self.failure = b.error("deadlock", f"no role can go on: {waits}", [0], "-", "-")
        self.cond.notify_all()


def _parts(role: Role) -> tuple[tuple[str, int, int], ...]:
    """The coroutines of a role: its teams (``Role.parts``), each split into its warpgroups where
    they hand each other turns (a ``bar.arrive``: one warpgroup syncs while another runs on)."""
    if not any(isinstance(s, NamedBarrier) and s.arrive for s in walk_statements(role.body)):
        return role.parts
    return tuple((f"{name} warpgroup {w}" if threads > WARPGROUP else name, first + w * WARPGROUP, WARPGROUP)
                 for name, first, threads in role.parts for w in range(threads // WARPGROUP))


def _roles(b, s: Roles, mask) -> None:
    if not mask.all():
        raise b.error("divergence", "warp roles need every thread of the block", np.flatnonzero(~mask)[:4].tolist(),
                      "-", "-")
    h = _hopper(b)
    prefix = f"{h.rank}/" if h.cluster.size > 1 else ""
    parts = [(role, prefix + name, first, threads) for role in s.roles for name, first, threads in _parts(role)]
    names = [name for _, name, _, _ in parts]
    lone = h.turns is None  # a block on its own: its roles take turns among themselves
    turns = _Turns(names) if lone else h.turns
    if lone:
        h.turns = turns
    else:
        turns.add(_agent(b), names)
    main = _agent(b)
    base = h.clock(main)
    forks = []
    for role, name, first, count in parts:  # each team of a role its own coroutine
        fork = copy.copy(b)
        fork.env, fork.iteration, fork.agent = dict(b.env), dict(b.iteration), name
        h.clocks[name] = _join(base, {name: 0})
        threads = np.zeros(b.threads, dtype=bool)
        threads[first:first + count] = True
        forks.append((name, role, fork, threads))

    def run(name, role, fork, threads) -> None:
        failure = None
        try:
            turns.start(name)
            fork.body(role.body, threads)
        except _Stop:
            pass
        except BaseException as error:  # noqa: BLE001 - handed to the block's thread
            failure = error
        turns.finish(name, fork, failure)

    workers = [threading.Thread(target=run, args=f, daemon=True) for f in forks]
    for w in workers:
        w.start()
    if not lone:  # the block's own coroutine waits for its roles while the cluster's others run
        turns.block(main, lambda: all(n in turns.finished for n in names), "its roles to finish", b)
    for w in workers:
        w.join()
    if lone:
        h.turns = None
    if turns.failure is not None:
        raise turns.failure
    for name in names:
        h.clocks[main] = _join(h.clock(main), h.clock(name))


def _cluster_sync(b, s: ClusterSync, mask) -> None:
    """barrier.cluster: every block of the cluster arrives before any goes on; each then knows
    what all of them did before arriving."""
    if not mask.all():
        raise b.error("divergence", "a cluster barrier needs every thread of the block",
                      np.flatnonzero(~mask)[:4].tolist(), "-", "-")
    b.shared.barrier()
    h = _hopper(b)
    c = h.cluster
    use = c.uses.get(h.rank, 0)
    c.uses[h.rank] = use + 1
    while len(c.arrivals) <= use:
        c.arrivals.append(set())
        c.released.append({})
    main = _agent(b)
    c.arrivals[use].add(h.rank)
    c.released[use] = _join(c.released[use], h.clock(main))
    h.tick(main)
    done = lambda: len(c.arrivals[use]) == c.size  # noqa: E731
    if not done():
        if c.turns is None:
            raise b.error("deadlock", "a cluster barrier in a block that runs alone", [0], "-", "-")
        c.turns.block(main, done, f"the cluster barrier ({len(c.arrivals[use])} of {c.size} blocks arrived)", b)
    h.clocks[main] = _join(h.clock(main), c.released[use])


def run_cluster(blocks: list, size: int) -> None:
    """Run the blocks of one cluster together (``blocks[r]`` is rank ``r``, a ``_Block`` not yet
    run): each block is a coroutine, and so are its roles; one runs at a time, handing the turn
    on where it waits (an mbarrier phase, the cluster barrier, its roles)."""
    cluster = Cluster(size)
    names = []
    for rank, block in enumerate(blocks):
        block.hopper = Hopper(block, cluster, rank)
        block.agent = None
        names.append(block.hopper.main)
    turns = _Turns(list(names))
    cluster.turns = turns

    def run(name, block) -> None:
        failure = None
        try:
            turns.start(name)
            block.run()
        except _Stop:
            pass
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            failure = error
        turns.finish(name, block, failure)

    workers = [threading.Thread(target=run, args=(n, b), daemon=True) for n, b in zip(names, blocks)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if turns.failure is not None:
        raise turns.failure
