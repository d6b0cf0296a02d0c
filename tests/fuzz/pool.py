"""Worker processes that run tasks (batches of programs) with a time limit each.

A worker past its limit is killed (it is our own child process, ended by its object) and
replaced; its item's result is ``Lost`` with a ``hang`` outcome. A worker that dies on its own
(a crash in a native library, memory) gives ``Lost`` with an ``internal`` outcome. Workers are
forked where the platform allows, so schedc and islpy are imported once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait

from .run import Outcome, run_programs


@dataclass(frozen=True)
class Lost:
    """An item without a result: the outcome for each of its programs (hang, worker died)."""

    outcome: Outcome


def _serve(connection, task: Callable) -> None:
    """A worker's loop: (key, item) in, (key, outcome) out, until None or the pipe closes."""
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        key, item = message
        connection.send((key, task(item)))


class _Worker:
    def __init__(self, context, task: Callable) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, task), daemon=True)
        self.process.start()
        child.close()
        self.key = None
        self.started = 0.0

    def send(self, key, item) -> None:
        self.key, self.started = key, time.monotonic()
        self.connection.send((key, item))

    def stop(self, kill: bool = False) -> None:
        """End the worker: ask it to (or kill it), then wait for it."""
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.connection.send(None)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


class Pool:
    """``jobs`` workers running ``task`` (default: run_programs, a list of programs to a list of
    outcomes) on items, with ``timeout`` seconds for each item."""

    def __init__(self, jobs: int = 2, timeout: float = 30.0, task: Callable = run_programs) -> None:
        methods = multiprocessing.get_all_start_methods()
        self.context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.timeout, self.task = timeout, task
        self.workers = [_Worker(self.context, task) for _ in range(max(1, jobs))]

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop(kill=worker.key is not None)
        self.workers = []

    def run(self, items: Iterable) -> Iterator[tuple[object, object]]:
        """Run (key, item) pairs; yield (key, result or Lost) as they finish."""
        pending = deque(items)
        while pending or any(w.key is not None for w in self.workers):
            for worker in self.workers:
                if worker.key is None and pending:
                    worker.send(*pending.popleft())
            yield from self._collect()

    def map(self, items: list) -> list:
        """Results (or Lost) of ``items`` (no keys), in order."""
        found = dict(self.run(enumerate(items)))
        return [found[n] for n in range(len(items))]

    def _collect(self) -> Iterator[tuple[object, object]]:
        busy = [w for w in self.workers if w.key is not None]
        now = time.monotonic()
        soonest = min(w.started + self.timeout for w in busy) - now
        for connection in wait([w.connection for w in busy], timeout=max(0.0, soonest)):
            worker = next(w for w in busy if w.connection is connection)
            yield self._receive(worker)
        for worker in busy:
            if worker.key is not None and time.monotonic() - worker.started > self.timeout:
                yield self._replace(worker, Lost(Outcome("hang", "hang", f"no result within {self.timeout:g} s",
                                                         self.timeout)))

    def _receive(self, worker: _Worker) -> tuple[object, object]:
        try:
            key, result = worker.connection.recv()
        except (EOFError, OSError):
            code = worker.process.exitcode
            return self._replace(worker, Lost(Outcome("internal", f"internal: worker died (exit code {code})",
                                                      f"the worker process ended with exit code {code}")))
        worker.key = None
        return key, result

    def _replace(self, worker: _Worker, outcome: Lost) -> tuple[object, Lost]:
        key, worker.key = worker.key, None
        worker.stop(kill=True)
        self.workers[self.workers.index(worker)] = _Worker(self.context, self.task)
        return key, outcome
