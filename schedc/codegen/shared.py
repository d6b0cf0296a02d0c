"""Shared memory for the emulator, with a race detector.

Per element of each shared buffer it remembers, since the last barrier, the thread that wrote it
and the thread(s) that read it, and whether an asynchronous copy is still on its way to it.
It reports (as ``SharedError``, turned into EmulationError by the emulator):

- a read of an element another thread wrote since the last barrier (read after write);
- a write of an element another thread read or wrote since the last barrier;
- a read of, or write to, an element whose cp.async has not been waited for;
- an asynchronous copy into an element another thread read since the last barrier (the
  buffer is overwritten while still being read);
- a TMA store of elements another thread wrote with no barrier between, and a write of an
  element a TMA store may still be reading (its bulk group not waited for with ``.read``).

Asynchronous copies land when an AsyncWait completes their commit group; the landing thread
counts as the element's writer, so other threads need a barrier before they read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.kernel import SharedBuffer

NONE, MANY = -1, -2


class SharedError(Exception):
    def __init__(self, kind: str, what: str, threads: list[int], buffer: str, element: int) -> None:
        super().__init__(what)
        self.kind, self.what, self.threads, self.buffer, self.element = kind, what, threads, buffer, element


@dataclass
class _Pending:
    buffer: str
    elements: np.ndarray
    values: np.ndarray
    threads: np.ndarray


@dataclass
class SharedMemory:
    buffers: dict[str, SharedBuffer]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    writer: dict[str, np.ndarray] = field(default_factory=dict)
    reader: dict[str, np.ndarray] = field(default_factory=dict)
    pending: dict[str, np.ndarray] = field(default_factory=dict)  # group id on its way, or NONE
    open_group: list[_Pending] = field(default_factory=list)
    groups: list[tuple[int, list[_Pending]]] = field(default_factory=list)  # committed, oldest first
    next_group: int = 0
    # the thread whose generic-proxy write of an element no fence.proxy.async of it has followed
    # yet (the async proxy, wgmma and TMA, must not touch the element until one has), or NONE
    unfenced: dict[str, np.ndarray] = field(default_factory=dict)
    # TMA copies read by the block's threads: the copy that brought an element (an index into
    # ``landings``: its mbarrier and the phase it completes), or NONE; and per mbarrier the phases
    # each thread has seen complete (by waiting on them)
    landed: dict[str, np.ndarray] = field(default_factory=dict)
    landings: list[tuple[tuple[str, int], int]] = field(default_factory=list)
    seen: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    # the TMA store (a token) that may still be reading an element, or NONE
    reading: dict[str, np.ndarray] = field(default_factory=dict)
    threads: int = 0

    def __post_init__(self) -> None:
        for name, b in self.buffers.items():
            poison = np.nan if b.dtype.is_float else 0
            self.values[name] = np.full(b.size, poison, dtype=b.dtype.numpy)
            self.writer[name] = np.full(b.size, NONE, dtype=np.int64)
            self.reader[name] = np.full(b.size, NONE, dtype=np.int64)
            self.pending[name] = np.full(b.size, NONE, dtype=np.int64)
            self.unfenced[name] = np.full(b.size, NONE, dtype=np.int64)
            self.landed[name] = np.full(b.size, NONE, dtype=np.int64)
            self.reading[name] = np.full(b.size, NONE, dtype=np.int64)

    # -- accesses ------------------------------------------------------------------------------

    def read(self, buffer: str, elements: np.ndarray, threads: np.ndarray, same=None) -> np.ndarray:
        """Values of ``elements`` read by ``threads`` (equal-length arrays)."""
        self._not_pending(buffer, elements, threads, "reads")
        self._landed(buffer, elements, threads)
        writer = self.writer[buffer][elements]
        other = (writer != NONE) & ~_same(writer, threads, same)
        if other.any():
            n = int(np.argmax(other))
            raise SharedError("race", f"thread {int(threads[n])} reads what thread {int(writer[n])} "
                              "wrote without a barrier between", [int(writer[n]), int(threads[n])],
                              buffer, int(elements[n]))
        reader = self.reader[buffer]
        previous = reader[elements]
        reader[elements] = np.where((previous == NONE) | _same(previous, threads, same), threads, MANY)
        if len(elements) > 1:
            reader[_read_by_many(elements, threads if same is None else same(threads))] = MANY
        return self.values[buffer][elements]

    def write(self, buffer: str, elements: np.ndarray, values: np.ndarray, threads: np.ndarray, same=None) -> None:
        self._not_pending(buffer, elements, threads, "writes")
        self._not_being_read(buffer, elements, threads)
        self._no_other(buffer, elements, threads, same, "writes")
        self.values[buffer][elements] = values
        self.writer[buffer][elements] = threads
        self.unfenced[buffer][elements] = threads

    def tma_write(self, buffer: str, elements: np.ndarray, values: np.ndarray, issuer: int,
                  barrier: tuple[str, int], phase: int) -> None:
        """A TMA copy issued by thread ``issuer`` lands in ``elements``, completing ``phase`` of
        ``barrier``: refused where another thread read them since the last barrier; a thread
        that reads them later must have seen that phase complete."""
        self._unread(buffer, elements, np.full(len(elements), issuer), f"a TMA copy issued by thread {issuer}")
        self._not_being_read(buffer, elements, np.full(len(elements), issuer))
        self.values[buffer][elements] = values
        self.reader[buffer][elements] = NONE  # earlier reads are ordered before the copy (checked above)
        self.writer[buffer][elements] = NONE  # its readers wait for the phase instead
        self.landings.append((barrier, phase))
        self.landed[buffer][elements] = len(self.landings) - 1

    def observe(self, barrier: tuple[str, int], phases: int, threads: np.ndarray) -> None:
        """``threads`` waited on ``barrier`` and know its first ``phases`` phases completed."""
        seen = self.seen.setdefault(barrier, np.zeros(max(self.threads, int(threads.max(initial=0)) + 1), np.int64))
        seen[threads] = np.maximum(seen[threads], phases)

    def _landed(self, buffer: str, elements: np.ndarray, threads: np.ndarray) -> None:
        if not self.landings:  # no TMA copy has landed in this block
            return
        tokens = self.landed[buffer][elements]
        for token in np.unique(tokens[tokens != NONE]):
            barrier, phase = self.landings[int(token)]
            seen = self.seen.get(barrier)
            mine = tokens == token
            known = seen[threads[mine]] if seen is not None else np.zeros(int(mine.sum()), np.int64)
            late = known <= phase
            if late.any():
                n = int(np.flatnonzero(mine)[int(np.argmax(late))])
                raise SharedError("race", f"thread {int(threads[n])} reads an element a TMA copy brings before it "
                                  f"has waited for the phase of {barrier[0]}[{barrier[1]}] that the copy completes",
                                  [int(threads[n])], buffer, int(elements[n]))

    def async_read(self, buffer: str, elements: np.ndarray, issuer: int, token: int) -> np.ndarray:
        """A TMA store issued by thread ``issuer`` (``token``) reads ``elements``: refused where
        another thread wrote them since the last barrier; they count as being read until the
        store's bulk group is waited for (``release``)."""
        writer = self.writer[buffer][elements]
        other = (writer != NONE) & (writer != issuer)
        if other.any():
            n = int(np.argmax(other))
            raise SharedError("race", f"a TMA store issued by thread {issuer} reads what thread {int(writer[n])} "
                              "wrote without a barrier between", [int(writer[n]), issuer], buffer, int(elements[n]))
        self.reading[buffer][elements] = token
        return self.values[buffer][elements]

    def release(self, tokens: list[int], issuer: int) -> None:
        """The TMA stores ``tokens`` issued by ``issuer`` have finished reading: their elements
        count as read by the issuer (other threads need a barrier after its wait to rewrite them)."""
        for name, reading in self.reading.items():
            done = np.isin(reading, tokens)
            if done.any():
                reading[done] = NONE
                reader = self.reader[name]
                reader[done] = np.where((reader[done] == NONE) | (reader[done] == issuer), issuer, MANY)

    def still_read(self) -> tuple[str, int] | None:
        """An element a TMA store may still be reading (buffer, element), or None."""
        for name, reading in self.reading.items():
            if (reading != NONE).any():
                return name, int(np.argmax(reading != NONE))
        return None

    def barrier_among(self, threads: np.ndarray) -> None:
        """A named barrier of ``threads``: what they wrote and read before is ordered before
        what they do after (accesses by other threads are not)."""
        for name in self.buffers:
            for track in (self.writer[name], self.reader[name]):
                track[np.isin(track, threads)] = NONE

    def proxy_fence(self, threads: np.ndarray) -> None:
        """``fence.proxy.async`` by ``threads``: their generic writes so far are visible to the
        async proxy."""
        for unfenced in self.unfenced.values():
            unfenced[np.isin(unfenced, threads)] = NONE

    def check_async_proxy(self, buffer: str, elements: np.ndarray, what: str) -> None:
        """The async proxy (``what``: a wgmma read, a TMA copy) touches ``elements``: refused
        where a generic write of them was not followed by its thread's fence.proxy.async."""
        writer = self.unfenced[buffer][elements]
        late = writer != NONE
        if late.any():
            n = int(np.argmax(late))
            raise SharedError("race", f"{what} (the async proxy) touches an element thread {int(writer[n])} wrote "
                              "through the generic proxy with no fence.proxy.async between: the write may not "
                              "be visible to it", [int(writer[n])], buffer, int(elements[n]))

    def copy_async(self, buffer: str, elements: np.ndarray, values: np.ndarray, threads: np.ndarray) -> None:
        """An asynchronous copy issued by ``threads`` into ``elements``."""
        self._not_pending(buffer, elements, threads, "copies asynchronously into")
        self._not_being_read(buffer, elements, threads)
        self._unread(buffer, elements, threads, "an asynchronous copy by thread {}")
        self.unfenced[buffer][elements] = threads  # cp.async writes through the generic proxy
        self.pending[buffer][elements] = self.next_group
        self.open_group.append(_Pending(buffer, elements.copy(), values.copy(), threads.copy()))

    def commit(self) -> None:
        self.groups.append((self.next_group, self.open_group))
        self.open_group = []
        self.next_group += 1

    def wait(self, pending: int) -> None:
        """Complete every committed group but the ``pending`` most recent."""
        done = self.groups[: max(len(self.groups) - pending, 0)]
        self.groups = self.groups[len(done):]
        for _, copies in done:
            for c in copies:
                self.values[c.buffer][c.elements] = c.values
                self.pending[c.buffer][c.elements] = NONE
                self.writer[c.buffer][c.elements] = c.threads

    def barrier(self) -> None:
        for name in self.buffers:
            self.writer[name][:] = NONE
            self.reader[name][:] = NONE

    # -- checks --------------------------------------------------------------------------------

    def _unread(self, buffer: str, elements: np.ndarray, threads: np.ndarray, what: str) -> None:
        """An asynchronous write by ``threads`` (``what``, ``{}`` for the thread) must not
        overwrite an element another thread read since the last barrier."""
        reader = self.reader[buffer][elements]
        other = (reader != NONE) & (reader != threads)
        if other.any():
            n = int(np.argmax(other))
            who = "several threads" if reader[n] == MANY else f"thread {int(reader[n])}"
            raise SharedError("race", f"{what.format(int(threads[n]))} overwrites an element {who} read since the "
                              "last barrier", [int(threads[n])], buffer, int(elements[n]))

    def _not_being_read(self, buffer: str, elements: np.ndarray, threads: np.ndarray) -> None:
        reading = self.reading[buffer][elements]
        busy = reading != NONE
        if busy.any():
            n = int(np.argmax(busy))
            raise SharedError("race", f"thread {int(threads[n])} overwrites an element a TMA store may still be "
                              "reading (wait for its bulk group with cp.async.bulk.wait_group.read, then a barrier)",
                              [int(threads[n])], buffer, int(elements[n]))

    def _not_pending(self, buffer, elements, threads, verb) -> None:
        pending = self.pending[buffer][elements]
        waiting = pending != NONE
        if waiting.any():
            n = int(np.argmax(waiting))
            raise SharedError("async", f"thread {int(threads[n])} {verb} an element whose asynchronous "
                              f"copy (group {int(pending[n])}) has not been waited for",
                              [int(threads[n])], buffer, int(elements[n]))

    def _no_other(self, buffer, elements, threads, same, verb) -> None:
        for track, what in ((self.writer, "wrote"), (self.reader, "read")):
            previous = track[buffer][elements]
            other = (previous != NONE) & ~_same(previous, threads, same)
            if other.any():
                n = int(np.argmax(other))
                who = "several threads" if previous[n] == MANY else f"thread {int(previous[n])}"
                raise SharedError("race", f"thread {int(threads[n])} {verb} an element {who} {what} "
                                  "without a barrier between", [int(threads[n])], buffer, int(elements[n]))
        unique, counts = np.unique(elements, return_counts=True)
        if (counts > 1).any():
            e = int(unique[counts > 1][0])
            writers = sorted(set(threads[elements == e].tolist()))
            if len(writers) > 1:
                raise SharedError("race", f"threads {writers} write the same element in one step",
                                  writers, buffer, e)


def _read_by_many(elements: np.ndarray, owners: np.ndarray) -> np.ndarray:
    """The elements that more than one owner reads (each distinct (element, owner) pair once)."""
    span = int(owners.max()) + 1
    pairs = np.unique(elements * span + owners)
    unique, counts = np.unique(pairs // span, return_counts=True)
    return unique[counts > 1]


def _same(previous: np.ndarray, threads: np.ndarray, same) -> np.ndarray:
    """Whether the earlier access counts as the same thread (``same`` maps thread ids to a
    group, e.g. a warp, for warp-collective tile operations)."""
    if same is None:
        return previous == threads
    valid = previous >= 0
    out = np.zeros(previous.shape, dtype=bool)
    out[valid] = same(previous[valid]) == same(threads[valid])
    return out
