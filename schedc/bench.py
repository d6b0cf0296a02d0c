"""Benchmark a built function on the GPU, with an optional reference timed in the same run.

Timing: CUDA events around batches of launches on the default stream, after a warm-up. Each
batch runs ``iterations`` launches; batches run until at least ``batches`` of them and at
least ``min_time`` seconds. Inputs are random (never zero) and verified against the reference
before timing; when one input set fits in twice the L2 cache, several sets are rotated.

Statistics, exactly as hatlib defines them, over the sorted per-launch means of the batches
(``means``, n of them):

- ``mean``: the mean of all batch means;
- ``median_of_means``: ``means[n // 2]``;
- ``mean_of_small_means``: the mean of the smallest ``max(1, n // 2)`` batch means;
- ``robust_mean``: the mean of ``means[n // 5 : -n // 5]`` (-1 when that slice is empty);
- ``min_of_means``: ``means[0]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import data
from .errors import LaunchError
from .ir.kernel import Binary, Call, Expr, Load, Unary
from .ir.specialize import grid_at
from .ir.walk import operands
from .package import driver
from .reference import reference
from .verify import at_sizes, checkable, compare, resolved_sizes

STATISTICS = ("mean", "median_of_means", "mean_of_small_means", "robust_mean", "min_of_means")


def statistics(batch_seconds: list[float], iterations: int) -> dict[str, float]:
    """hatlib's statistics (see the module docstring) of per-launch times, in seconds.

    >>> s = statistics([1.0, 2.0, 3.0, 4.0, 10.0], iterations=1)
    >>> s["median_of_means"], s["mean_of_small_means"], s["robust_mean"], s["min_of_means"]
    (3.0, 1.5, 3.0, 1.0)
    """
    means = np.array(sorted(batch_seconds)) / iterations
    n = len(means)
    robust = means[(n // 5):(-n // 5)]
    return {
        "mean": float(means.mean()),
        "median_of_means": float(means[n // 2]),
        "mean_of_small_means": float(means[0:max(1, n // 2)].mean()),
        "robust_mean": float(robust.mean()) if len(robust) > 0 else -1.0,
        "min_of_means": float(means[0]),
    }


@dataclass(frozen=True)
class Timing:
    name: str
    stats: dict[str, float]  # seconds per launch
    batches: int
    iterations: int
    flops: int

    @property
    def tflops(self) -> float:
        return self.flops / self.stats["median_of_means"] / 1e12


def flops(model) -> int:
    """Arithmetic operations of the nest: operations per point times the number of points."""
    points = math.prod(n for _, n in model.dims)
    return points * sum(_operations(s.value) for s in model.statements)


def _operations(e: Expr) -> int:
    """Arithmetic on data: + - * / max min, negations, and each element-wise function (one
    operation, as the roofline counts it); index arithmetic, comparisons and loads are free."""
    own = 0
    if isinstance(e, Binary):
        own = 1 if e.dtype is not None and e.op in ("+", "-", "*", "/", "max", "min") else 0
    elif isinstance(e, Unary | Call):
        own = 1
    return own + sum(_operations(x) for x in operands(e) if not isinstance(e, Load))


@dataclass(frozen=True)
class Options:
    min_time: float = 1.0
    batches: int = 10
    iterations: int = 20
    warmup: int = 5
    seed: int = 0


def time_batches(launch, options: Options, events: driver.Events) -> list[float]:
    """Seconds per batch of ``options.iterations`` calls of ``launch(i)``."""
    for i in range(options.warmup):
        launch(i)
    driver.device().synchronize()
    times: list[float] = []
    total = 0.0
    call = 0
    while len(times) < options.batches or total < options.min_time:
        events.record_start()
        for _ in range(options.iterations):
            launch(call)
            call += 1
        seconds = events.elapsed_ms() / 1e3
        times.append(seconds)
        total += seconds
        if len(times) > 100 * options.batches:
            break
    return times


def bench_function(fn, options: Options, compare_with: str | None = None, tolerance=None,
                   sizes: dict[str, int] | None = None):
    """Verify, then time ``fn`` (a loaded Function; at run-time ``sizes`` where it has them,
    default ``verify.default_sizes``) and optionally a reference. Returns (reports, timing,
    reference timing or None)."""
    dev = driver.device()
    values = resolved_sizes(fn.model, fn.name, sizes)
    model, function = at_sizes(fn.model, fn.function, values)
    checkable(fn.name, model, function)
    params = function.arrays
    arrays = data.inputs(params, options.seed)
    reports = _verify(fn, model, params, arrays, tolerance, values)
    set_bytes = sum(b.size * b.dtype.size for b in params)
    sets = 1 if set_bytes > 2 * dev.l2_bytes else min(16, -(-2 * dev.l2_bytes // set_bytes) + 1)
    memories = [_upload(params, data.inputs(params, options.seed + 1 + n)) for n in range(sets)]
    launches = [fn.launches([m.pointer for m in ms], fn.size_scalars(values)) for ms in memories]

    def launch(i: int) -> None:
        for handle, kernel, args in launches[i % sets]:
            driver.launch(handle, grid_at(kernel, values), kernel.block, kernel.dynamic_shared_bytes, args,
                          dependent=kernel.dependent_launch)

    events = driver.Events()
    times = time_batches(launch, options, events)
    timing = Timing(fn.name, statistics(times, options.iterations), len(times), options.iterations,
                    flops(model))
    reference_timing = None
    if compare_with:
        from .bench_reference import reference_launcher  # torch only when asked

        name, ref_launch = reference_launcher(compare_with, model, options.seed, sets)
        ref_times = time_batches(ref_launch, options, events)
        reference_timing = Timing(name, statistics(ref_times, options.iterations), len(ref_times),
                                  options.iterations, flops(model))
    return reports, timing, reference_timing


def _upload(params, arrays) -> list[driver.DeviceMemory]:
    out = []
    for b in params:
        memory = driver.DeviceMemory(b.size * b.dtype.size)
        memory.upload(data.to_storage(b, arrays[b.name]))
        out.append(memory)
    return out


def _verify(fn, model, params, arrays, tolerance, sizes: dict[str, int]):
    memories = _upload(params, arrays)
    for handle, kernel, args in fn.launches([m.pointer for m in memories], fn.size_scalars(sizes)):
        driver.launch(handle, grid_at(kernel, sizes), kernel.block, kernel.dynamic_shared_bytes, args,
                      dependent=kernel.dependent_launch)
    driver.device().synchronize()
    outputs = {}
    for b, memory in zip(params, memories):
        flat = np.empty(b.size, dtype=b.dtype.numpy)
        memory.download(flat)
        outputs[b.name] = data.from_storage(b, flat)
    expected, touched = reference(model, arrays)
    reports = compare(model, outputs, expected, touched, tolerance=tolerance)
    failed = [r for r in reports if not r.passed]
    if failed:
        raise LaunchError(f"bench {fn.name}", "the output does not match the reference; not timing:\n"
                          + "\n".join(str(r) for r in failed))
    return reports
