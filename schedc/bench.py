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
from .errors import MismatchError
from .ir.kernel import Binary, Call, Expr, Load, Unary
from .ir.specialize import grid_at
from .ir.walk import operands
from .package import driver
from .reference import reference, reference_key
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
    """Arithmetic operations of the nest: each statement's operations per point times the points
    it runs at (a fused part skips the other parts' unfused dimensions: an epilogue after
    ``C += A @ B`` runs once per element of C, not per k)."""
    total = 0
    for n, s in enumerate(model.statements):
        skipped = model.fusion.foreign(model.fusion.part_of(n)) if model.fusion is not None else frozenset()
        total += math.prod(size for d, (_, size) in enumerate(model.dims) if d not in skipped) * _operations(s.value)
    return total


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
    bench = Bench(fn, options.seed, tolerance, sizes)
    timing = bench.time(options)
    reference_timing = bench.time_reference(compare_with, options) if compare_with else None
    return bench.reports, timing, reference_timing


class Bench:
    """A function verified once on random inputs (``reports``; a LaunchError where it does not
    match) and ready to time: its input sets uploaded and its launches prepared."""

    def __init__(self, fn, seed: int = 0, tolerance=None, sizes: dict[str, int] | None = None,
                 cache: dict | None = None) -> None:
        """``cache``: a dict that keeps, across the functions of one nest (a tuner's candidates),
        the random inputs and the reference's results (by ``reference_key``); each function's
        timing still starts from freshly uploaded input sets, as ``schedc bench``'s does."""
        dev = driver.device()
        self.fn = fn
        self.values = resolved_sizes(fn.model, fn.name, sizes)
        self.model, function = at_sizes(fn.model, fn.function, self.values)
        checkable(fn.name, self.model, function)
        params = function.arrays
        cache = {} if cache is None else cache
        signature = (tuple((b.name, b.dtype, b.shape, b.strides, b.role, b.kind) for b in params), seed)
        arrays = _kept(cache, ("inputs", signature), lambda: data.inputs(params, seed))
        expected = _kept(cache, ("reference", reference_key(self.model), seed), lambda: reference(self.model, arrays))
        self.reports = _verify(fn, self.model, params, arrays, tolerance, self.values, expected)
        set_bytes = sum(b.size * b.dtype.size for b in params)
        self.sets = 1 if set_bytes > 2 * dev.l2_bytes else min(16, -(-2 * dev.l2_bytes // set_bytes) + 1)
        sets = _kept(cache, ("sets", signature, self.sets), lambda: [
            data.inputs(params, seed + 1 + n) for n in range(self.sets)])
        self.inputs = sets  # the values a reference is timed on, too
        memories = [_upload(params, arrays) for arrays in sets]
        self._memories = memories  # kept alive while the launches use them
        self._launches = [fn.launches([m.pointer for m in ms], fn.size_scalars(self.values)) for ms in memories]
        self._events = driver.Events()

    def launch(self, i: int) -> None:
        for handle, kernel, args in self._launches[i % self.sets]:
            driver.launch(handle, grid_at(kernel, self.values), kernel.block, kernel.dynamic_shared_bytes, args,
                          dependent=kernel.dependent_launch)

    def time(self, options: Options) -> Timing:
        """Time the function's launches (``time_batches``) with hatlib's statistics."""
        times = time_batches(self.launch, options, self._events)
        return Timing(self.fn.name, statistics(times, options.iterations), len(times), options.iterations,
                      flops(self.model))

    def time_reference(self, compare_with: str, options: Options) -> Timing:
        """Time the reference ``compare_with`` (cublas, copy, torch) on the same input values."""
        from .bench_reference import reference_launcher  # torch only when asked

        with reference_launcher(compare_with, self.model, self.inputs) as ref:
            times = time_batches(ref.launch, options, self._events)
        return Timing(ref.name, statistics(times, options.iterations), len(times), options.iterations,
                      flops(self.model))


def _kept(cache: dict, key: tuple, make):
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _upload(params, arrays) -> list[driver.DeviceMemory]:
    out = []
    for b in params:
        memory = driver.DeviceMemory(b.size * b.dtype.size)
        memory.upload(data.to_storage(b, arrays[b.name]))
        out.append(memory)
    return out


def _verify(fn, model, params, arrays, tolerance, sizes: dict[str, int], expected=None):
    """Run ``fn`` once on ``arrays`` and compare with the reference (``expected``: the reference's
    ``(values, touched)`` for these arrays where the caller has it already)."""
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
    values, touched = expected if expected is not None else reference(model, arrays)
    reports = compare(model, outputs, values, touched, tolerance=tolerance)
    failed = [r for r in reports if not r.passed]
    if failed:
        raise MismatchError(f"bench {fn.name}", "the output does not match the reference; not timing:\n"
                          + "\n".join(str(r) for r in failed))
    return reports
