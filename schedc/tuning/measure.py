"""One candidate on the GPU, in a worker process pinned to one device: verified once against
the reference (computed once per nest and seed: the candidates of a grid share it), then timed
with the bench harness, stopped after a short probe when it is clearly slower than the best so
far."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from ..bench import Bench, Options
from ..errors import LaunchError, MismatchError, SchedcError
from ..package.loader import load
from .results import Measured, Status

_CACHE: dict = {}  # inputs, the reference's results and uploaded input sets, shared by this worker's candidates


@dataclass(frozen=True)
class Settings:
    """How each candidate is timed: the bench options, the early stop's probe and margin, and the
    reference timed beside a winner."""

    min_time: float = 0.3  # seconds of timed batches, at least
    batches: int = 10
    iterations: int = 20
    seed: int = 0
    probe_batches: int = 3  # batches of the probe that decides an early stop
    slack: float = 0.25  # stopped early where the probe is more than this fraction slower than the best
    sizes: tuple[tuple[str, int], ...] = ()  # run-time sizes to time at
    tolerance: float | None = None


def measure(package: str, function: str, settings: Settings, best: float | None = None,
            reference: str | None = None) -> Measured:
    """Verify and time ``function`` of the package at ``package`` (a .hat path); ``best``: the
    best median so far (seconds) for the early stop; ``reference``: also time it (cublas, copy)."""
    started = time.perf_counter()
    if len(_CACHE) > 12:  # another few problem shapes' inputs and references: start over
        _CACHE.clear()
    try:
        fn = load(package).functions[function]
        bench = Bench(fn, settings.seed, settings.tolerance, dict(settings.sizes), cache=_CACHE)
    except MismatchError as e:
        return Measured(Status.WRONG, reason=str(e), seconds=time.perf_counter() - started)
    except (LaunchError, SchedcError) as e:
        return Measured(Status.FAULT, reason=str(e), seconds=time.perf_counter() - started)
    error = max((r.relative_error for r in bench.reports), default=0.0)
    options = Options(min_time=settings.min_time, batches=settings.batches, iterations=settings.iterations,
                      seed=settings.seed)
    try:
        if best is not None and settings.probe_batches:
            probe = bench.time(dataclasses.replace(options, min_time=0.0, batches=settings.probe_batches))
            if probe.stats["median_of_means"] > best * (1 + settings.slack):
                return _measured(Status.SLOWER, probe, error, started)
        timing = bench.time(options)
        result = _measured(Status.TIMED, timing, error, started)
        if reference:
            ref = bench.time_reference(reference, options)
            result = dataclasses.replace(result, reference=ref.name, reference_median=ref.stats["median_of_means"])
    except (LaunchError, SchedcError) as e:
        return Measured(Status.FAULT, reason=str(e), seconds=time.perf_counter() - started)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)


def _measured(status: Status, timing, error: float, started: float) -> Measured:
    return Measured(status, timing.stats["median_of_means"], dict(timing.stats), timing.batches, timing.iterations,
                    timing.flops, relative_error=error, seconds=time.perf_counter() - started)


def device_info() -> dict[str, str]:
    """The GPU this worker times on: its name, the driver's version, its compute capability and
    its PCI bus (which tells apart the GPUs of one host)."""
    from ..package import driver

    dev = driver.device()
    cuda = driver._driver()
    version = driver.check(cuda.cuDriverGetVersion(), "cuDriverGetVersion")
    bus = driver.check(cuda.cuDeviceGetPCIBusId(32, dev.device), "cuDeviceGetPCIBusId")
    bus = bus.split(b"\0")[0].decode() if isinstance(bus, bytes) else str(bus)
    return {"device": dev.name, "driver": f"{version // 1000}.{version % 1000 // 10}", "sm": str(dev.sm), "bus": bus}


def package_path(directory: str, function: str) -> str:
    return str(Path(directory) / f"{function}.hat")
