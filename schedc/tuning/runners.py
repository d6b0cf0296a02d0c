"""Where candidates are built and timed: a pool of CPU processes builds them; one worker
process per GPU of this host times them (``LocalGPUs``: spawned, pinned to its device, one
candidate at a time, replaced after a fault or a hang), or a Dask cluster does both
(``DaskCluster``: builds on any worker, times on workers holding a ``GPU`` resource, e.g.
dask-cuda's ``LocalCUDACluster(resources={"GPU": 1})``). ``FakeTiming`` stands in for the GPU
where it is not the point (tests, ``schedc tune --fake-timing``)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import InternalError, TuneError
from . import candidate, collect, measure
from .results import Checked, Measured, Status, Task

Timing = Callable[[dict, str], float]  # (the point's values, its shape) -> seconds per call


class Builders:
    """A pool of processes checking and building points, forked from the tuner's process once the
    script has run there (they inherit its grids) and before any other thread or CUDA starts."""

    def __init__(self, source: collect.Source, cache: str, jobs: int, build: bool = True) -> None:
        self.source, self.cache, self.build = source, cache, build
        self.pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))
        self.pool.submit(int).result()  # a fork pool starts all its processes at its first task
        self.build_slots = jobs

    def check(self, task: Task) -> cf.Future:
        """Check and build ``task``'s point in a build process."""
        try:
            return self.pool.submit(candidate.check_point, self.source, task, self.cache, False, self.build)
        except cf.process.BrokenProcessPool:  # a build process died (its point is recorded): start anew
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = cf.ProcessPoolExecutor(max_workers=self.build_slots,
                                               mp_context=multiprocessing.get_context("fork"))
            return self.pool.submit(candidate.check_point, self.source, task, self.cache, False, self.build)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class LocalGPUs:
    """One worker process per GPU of this host, each pinned to its device (CUDA_VISIBLE_DEVICES)
    and timing one candidate at a time. A worker whose candidate faults (its CUDA context is
    lost), dies or runs past ``timeout`` seconds is replaced, and the candidate recorded."""

    def __init__(self, gpus: list[int], timeout: float = 120.0) -> None:
        self.gpus, self.timeout = list(gpus), timeout
        if not gpus:
            raise TuneError("--gpus", "name at least one GPU (or 'all')")
        self.threads = max(1, (os.cpu_count() or 1) // (2 * len(gpus)))  # numpy's threads a worker: no oversubscription
        self.workers: dict[int, cf.ProcessPoolExecutor] = {}
        infos = [self._start(gpu).submit(measure.device_info) for gpu in gpus]
        self.free = list(gpus)
        self.running: dict[cf.Future, tuple[int, float]] = {}  # future -> (gpu, when started)
        self.killed: set[cf.Future] = set()
        found = [f.result(timeout=300) for f in infos]
        names = {i["device"] for i in found}
        if len({i["bus"] for i in found}) < len(found):
            raise InternalError("schedc tune", f"the workers of GPUs {gpus} see the same device ({found}): "
                                               "CUDA_VISIBLE_DEVICES did not pin them")
        if len(names) > 1:
            raise TuneError("--gpus", f"the GPUs differ ({', '.join(sorted(names))}): time on GPUs of one "
                                      "model, e.g. --gpus 0,1 of the same kind")
        self.info = {k: v for k, v in found[0].items() if k != "bus"}

    @property
    def slots(self) -> int:
        return len(self.free)

    def submit(self, checked: Checked, values: dict, shape: str, settings: measure.Settings,
               best: float | None, reference: str | None = None) -> cf.Future:
        gpu = self.free.pop(0)
        future = self.workers[gpu].submit(measure.measure, measure.package_path(checked.directory, checked.name),
                                          checked.name, settings, best, reference)
        self.running[future] = (gpu, time.monotonic())
        return future

    def result(self, future: cf.Future) -> Measured:
        """The candidate's measurement; its GPU is free again (with a fresh worker after a fault)."""
        gpu, started = self.running.pop(future)
        try:
            measured = future.result()
        except Exception as error:  # noqa: BLE001 - the worker died or was killed: recorded, then replaced
            why = (f"ran past {self.timeout:g} s and was stopped" if future in self.killed
                   else f"the worker process died ({type(error).__name__}: {error})")
            measured = Measured(Status.FAULT, reason=why, seconds=time.monotonic() - started)
        if measured.status is Status.FAULT:
            _stop(self.workers[gpu])
            self._start(gpu)
        self.free = sorted([*self.free, gpu])  # the first GPU first: the finalists are timed on one
        return measured

    def _start(self, gpu: int) -> cf.ProcessPoolExecutor:
        """A worker process for ``gpu``, started now, in an environment that pins it to its GPU and
        gives numpy's thread pools their share of the cores (the variables a process reads when it
        starts; as Dask's nannies set them for their workers)."""
        inherited = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        device = inherited[gpu] if gpu < len(inherited) else str(gpu)  # ordinals count the devices this process sees
        pinned = {"CUDA_VISIBLE_DEVICES": device, **dict.fromkeys(_THREADS, str(self.threads))}
        saved = {k: os.environ.get(k) for k in pinned}
        os.environ.update(pinned)
        try:
            self.workers[gpu] = cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
            self.workers[gpu].submit(int).result(timeout=300)  # the process starts here, with this environment
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return self.workers[gpu]

    def overdue(self) -> None:
        """Stop the workers whose candidate runs past the timeout (its future then fails)."""
        now = time.monotonic()
        for future, (gpu, started) in list(self.running.items()):
            if now - started > self.timeout and future not in self.killed:
                self.killed.add(future)
                _stop(self.workers[gpu])

    def close(self) -> None:
        for worker in self.workers.values():
            _stop(worker)  # a worker in a hung kernel would keep the interpreter from exiting


_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _stop(executor: cf.ProcessPoolExecutor) -> None:
    for process in list((executor._processes or {}).values()):
        process.kill()
    executor.shutdown(wait=False, cancel_futures=True)


def gpu_count() -> int:
    """GPUs of this host, asked in a child process (the tuner's own process never starts CUDA:
    its build pool is started from it)."""
    from ..package.driver import device_count

    with cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(device_count).result(timeout=300)


class NoTiming:
    """A dry run's: no candidate is timed (none is sent: every point is only checked)."""

    info = {"device": "none", "driver": "", "sm": ""}
    slots = 0

    def overdue(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeTiming:
    """Candidates "timed" by a function of their point (``timing(values, shape)`` seconds; an
    exception is a fault), on ``slots`` pretend GPUs: the tuner's logic without a GPU."""

    def __init__(self, timing: Timing, slots: int = 1) -> None:
        self.timing = timing
        self.info = {"device": "fake", "driver": "0", "sm": "0"}
        self.free = slots
        self.running: set[cf.Future] = set()

    @property
    def slots(self) -> int:
        return self.free

    def submit(self, checked: Checked, values: dict, shape: str, settings: measure.Settings,
               best: float | None, reference: str | None = None) -> cf.Future:
        self.free -= 1
        future: cf.Future = cf.Future()
        future.set_result(fake_measure(self.timing, values, shape, settings, best, reference))
        self.running.add(future)
        return future

    def result(self, future: cf.Future) -> Measured:
        self.running.discard(future)
        self.free += 1
        return future.result()

    def overdue(self) -> None:
        pass

    def close(self) -> None:
        pass


def fake_measure(timing: Timing, values: dict, shape: str, settings: measure.Settings, best: float | None,
                 reference: str | None = None) -> Measured:
    """A measurement from ``timing``, with the early stop the GPU's has."""
    try:
        seconds = float(timing(values, shape))
    except Exception as error:  # noqa: BLE001 - the pretend GPU's fault
        return Measured(Status.FAULT, reason=f"{type(error).__name__}: {error}")
    stats = dict.fromkeys(("mean", "median_of_means", "mean_of_small_means", "robust_mean", "min_of_means"), seconds)
    slower = best is not None and settings.probe_batches and seconds > best * (1 + settings.slack)
    status = Status.SLOWER if slower else Status.TIMED
    return Measured(status, seconds, stats, settings.probe_batches if slower else settings.batches,
                    settings.iterations, reference="fake-reference" if reference else "",
                    reference_median=seconds * 1.25 if reference else 0.0)


class DaskCluster:
    """A Dask distributed cluster (``--scheduler ADDRESS``, or a ``distributed.Client``): points
    are built on any worker (files sent back: workers need not share a disk), candidates timed on
    workers with a ``GPU`` resource, one each (dask-cuda's LocalCUDACluster pins one worker per
    GPU; give it ``resources={"GPU": 1}``). ``timing``: pretend GPUs (``FakeTiming``'s). A
    candidate that runs past ``timeout`` seconds is cancelled and its worker restarted; so is the
    worker of a candidate that faulted (its CUDA context is lost)."""

    def __init__(self, scheduler, timing: Timing | None = None, timeout: float = 120.0) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise TuneError("--scheduler", "needs Dask's distributed: pip install 'schedc[dask]'") from None
        try:
            self.client = scheduler if isinstance(scheduler, Client) else Client(scheduler, timeout=30)
        except OSError as error:
            raise TuneError(f"--scheduler {scheduler}", f"cannot reach the Dask scheduler: {error}") from None
        self.timing, self.timeout = timing, timeout
        self.source: collect.Source | None = None
        self.cache = ""
        workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        gpus = int(sum(w.get("resources", {}).get("GPU", 0) for w in workers))
        if gpus < 1:
            raise TuneError(f"--scheduler {self.client.scheduler.address}",
                            "no worker has a GPU resource: start the workers with --resources GPU=1 (one per GPU; "
                            "dask-cuda: LocalCUDACluster(resources={'GPU': 1}) or dask-cuda-worker --resources GPU=1)")
        self.free = gpus
        self.build_slots = max(1, sum(w.get("nthreads", 1) for w in workers))
        self.running: dict[cf.Future, tuple[object, float]] = {}  # future -> (Dask task, when submitted)
        self.killed: set[cf.Future] = set()
        probe = _fake_info if timing else measure.device_info
        self.info = self._wrap(self.client.submit(probe, resources={"GPU": 1}, pure=False)).result(timeout=300)

    @property
    def slots(self) -> int:
        return self.free

    def bind(self, source: collect.Source, cache: str) -> None:
        """The script whose points the workers build, and their compile cache (on their disks)."""
        self.source, self.cache = source, cache

    def check(self, task: Task) -> cf.Future:
        """Check and build ``task``'s point on any worker (its files sent back)."""
        return self._wrap(self.client.submit(candidate.check_point, self.source, task, self.cache, True, pure=False))

    def submit(self, checked: Checked, values: dict, shape: str, settings: measure.Settings,
               best: float | None, reference: str | None = None) -> cf.Future:
        self.free -= 1
        if self.timing is not None:
            task = self.client.submit(_started, fake_measure, self.timing, values, shape, settings, best, reference,
                                      resources={"GPU": 1}, pure=False)
        else:
            files = checked.files or candidate.files_of(checked.directory)  # a check from the database: its files
            task = self.client.submit(_started, _measure_files, files, checked.name, settings, best, reference,
                                      resources={"GPU": 1}, pure=False)
        future = self._wrap(task)
        self.running[future] = (task, time.monotonic())
        return future

    def result(self, future: cf.Future) -> Measured:
        task, started = self.running.pop(future)
        self.free += 1
        try:
            measured = future.result()
        except Exception as error:  # noqa: BLE001 - a worker lost or the task cancelled: recorded
            why = (f"ran past {self.timeout:g} s and was stopped" if future in self.killed
                   else f"the Dask task failed ({type(error).__name__}: {error})")
            return Measured(Status.FAULT, reason=why, seconds=time.monotonic() - started)
        if measured.status is Status.FAULT and self.timing is None:
            holders = self.client.who_has(task).get(task.key, ())
            self._restart(list(holders))
        return measured

    def overdue(self) -> None:
        """Cancel the candidates past the timeout and restart the workers running them. A
        candidate's time counts from when its worker last started it (the worker logs it:
        ``_started``), so one queued behind another on a worker, or waiting for a restarting one,
        is not charged for the wait."""
        if not self.running:
            return
        now = time.time()
        started = {message["key"]: when for when, message in self.client.get_events(STARTED)}  # the latest
        late = {task.key: future for future, (task, _) in self.running.items()
                if now - started.get(task.key, now) > self.timeout and future not in self.killed}
        if not late:
            return
        processing = self.client.processing()
        for future in late.values():
            self.killed.add(future)
            self.client.cancel(self.running[future][0], force=True)
        self._restart([w for w, keys in processing.items() if any(k in late for k in keys)])

    def _restart(self, workers: list) -> None:
        """Restart ``workers`` (waiting for them)."""
        if workers:  # a worker that does not come back is the cluster's to replace
            with contextlib.suppress(Exception):
                self.client.restart_workers(workers, timeout=120)

    def close(self) -> None:
        pass

    @staticmethod
    def _wrap(task) -> cf.Future:
        future: cf.Future = cf.Future()

        def done(t) -> None:
            try:
                future.set_result(t.result())
            except Exception as error:  # noqa: BLE001 - handed to the tuner as the future's
                future.set_exception(error)

        task.add_done_callback(done)
        return future


def _fake_info() -> dict[str, str]:
    return {"device": "fake", "driver": "0", "sm": "0"}


STARTED = "schedc-candidate-started"  # the Dask event topic of candidates starting on their workers


def _started(measure_fn: Callable, *args) -> Measured:
    """On a Dask worker: log that this task starts (the client's timeout counts from here), then
    run ``measure_fn``."""
    from distributed import get_worker

    worker = get_worker()
    worker.log_event(STARTED, {"key": worker.get_current_task()})
    return measure_fn(*args)


def _measure_files(files: dict[str, bytes], function: str, settings: measure.Settings, best: float | None,
                   reference: str | None) -> Measured:
    folder = candidate.unpack(files)
    return measure.measure(str(Path(folder) / f"{function}.hat"), function, settings, best, reference)
