"""A campaign: generate programs ``0 .. count-1`` of a seed, run them in worker processes,
group the failures by signature and shrink the smallest example of each class."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .features import coverage_features
from .generate import generate
from .pool import Lost, Pool
from .program import Program
from .run import OUTCOMES, Outcome, run_programs
from .shrink import Shrunk, shrink, size


@dataclass(frozen=True)
class Result:
    index: int
    program: Program
    outcome: Outcome


@dataclass(frozen=True)
class Example:
    """A failing program of a class and what shrinking made of it (None: not shrunk)."""

    result: Result
    shrunk: Shrunk | None = None


@dataclass(frozen=True)
class FailureClass:
    """The programs that failed with one signature, and examples: the smallest, and the
    smallest of another plan family (one symptom, maybe two bugs), shrunk."""

    signature: str
    results: tuple[Result, ...]
    examples: tuple[Example, ...]

    @property
    def kind(self) -> str:
        return self.results[0].outcome.kind


def plan_family(p: Program) -> tuple:
    """What kind of plan a program has: tensorized or not, and its cache locations."""
    return p.tensorize is not None, tuple(sorted({c.location for c in p.caches}))


def pick_examples(results: tuple[Result, ...], most: int) -> tuple[Example, ...]:
    """The smallest failing program of each plan family, smallest first, at most ``most``."""
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: (size(r.program), r.index)):
        chosen.setdefault(plan_family(r.program), r)
    return tuple(Example(r) for r in list(chosen.values())[:most])


@dataclass(frozen=True)
class Summary:
    seed: int
    count: int
    jobs: int
    counts: dict[str, int]  # programs per outcome kind
    classes: tuple[FailureClass, ...]
    seconds: float  # wall time of the whole campaign
    work: float  # seconds the workers spent on the programs (shrinking excluded)
    shrink_seconds: float
    generated: dict[str, int]  # programs per coverage feature
    accepted: dict[str, int]  # of those, the ones schedc accepted (correct or failing after acceptance)

    @property
    def failed(self) -> bool:
        return bool(self.classes)


@dataclass(frozen=True)
class Options:
    count: int = 300
    seed: int = 0
    jobs: int = 2
    timeout: float = 30.0  # seconds per task: a batch past it is rerun one program at a time, and a
    # program past it is a hang
    shrink_attempts: int = 150  # variants run per class
    shrink_seconds: float = 240.0  # for all classes together
    examples: int = 2  # examples shrunk per class (of different plan families)
    batch: int = 16  # programs per task (their NVRTC compiles joined: -30% CPU against one by one)
    task: Callable = run_programs  # a list of programs to a list of outcomes
    kind: str | None = None  # only programs of this kind (generate.PROGRAM_KINDS), e.g. "hopper"


def run_campaign(options: Options, progress: Callable[[int, Result], None] | None = None) -> Summary:
    """Run programs 0..count-1 of the seed, classify the failures and shrink examples of each
    class. ``progress(done, result)`` is called as each program finishes."""
    start = time.monotonic()
    with Pool(options.jobs, options.timeout, options.task) as pool:
        results = run_all(pool, options, progress)
        ran = time.monotonic()
        classes = _shrink_classes(_classify(results), pool, options)
    counts = Counter(r.outcome.kind for r in results)
    generated, accepted = _coverage(results)
    return Summary(options.seed, options.count, options.jobs, {k: counts.get(k, 0) for k in OUTCOMES},
                   classes, time.monotonic() - start, sum(r.outcome.seconds for r in results),
                   time.monotonic() - ran, generated, accepted)


def run_all(pool: Pool, options: Options, progress=None) -> list[Result]:
    """Every program's result, in batches; a batch past the time limit is run again one
    program at a time, so that a hang is one program's."""
    programs: dict[int, Program] = {}

    def batches():
        for first in range(0, options.count, options.batch):
            indices = tuple(range(first, min(options.count, first + options.batch)))
            programs.update((n, generate(options.seed, n, options.kind)) for n in indices)
            yield indices, [programs[n] for n in indices]

    results: list[Result] = []
    again: list[tuple[int, ...]] = []
    for indices, got in pool.run(batches()):
        if isinstance(got, Lost) and len(indices) > 1:
            again += [(n,) for n in indices]
            continue
        results += _record(indices, got, programs, len(results), progress)
    for indices, got in pool.run((n, [programs[n[0]]]) for n in again):
        results += _record(indices, got, programs, len(results), progress)
    return sorted(results, key=lambda r: r.index)


def _record(indices, got, programs: dict[int, Program], done: int, progress) -> list[Result]:
    outcomes = [got.outcome] * len(indices) if isinstance(got, Lost) else got
    new = [Result(n, programs[n], o) for n, o in zip(indices, outcomes)]
    for n, r in enumerate(new, 1):
        if progress is not None:
            progress(done + n, r)
    return new


def evaluate(pool: Pool, programs: list[Program]) -> list[Outcome]:
    """Outcomes of ``programs``, each a task of its own (in parallel)."""
    return [got.outcome if isinstance(got, Lost) else got[0] for got in pool.map([[p] for p in programs])]


def _coverage(results: list[Result]) -> tuple[dict[str, int], dict[str, int]]:
    generated: Counter = Counter()
    accepted: Counter = Counter()
    for r in results:
        found = coverage_features(r.program)
        generated.update(found)
        if r.outcome.kind in ("correct", "wrong", "internal") and not r.outcome.signature.startswith(
                "internal: script"):
            accepted.update(found)
    return dict(generated), dict(accepted)


def _classify(results: list[Result]) -> list[FailureClass]:
    by_signature: dict[str, list[Result]] = {}
    for r in results:
        if r.outcome.failed:
            by_signature.setdefault(r.outcome.signature, []).append(r)
    ordered = sorted(by_signature.items(), key=lambda item: (OUTCOMES.index(item[1][0].outcome.kind), -len(item[1])))
    return [FailureClass(signature, tuple(found), ()) for signature, found in ordered]


def _shrink_classes(classes: list[FailureClass], pool: Pool, options: Options) -> tuple[FailureClass, ...]:
    """Shrink each class's examples, sharing the time budget; hangs get few tries (each costs
    the whole time limit)."""
    deadline = time.monotonic() + options.shrink_seconds
    jobs = [(n, e) for n, c in enumerate(classes) for e in pick_examples(c.results, options.examples)]
    shrunk: dict[int, list[Example]] = {n: [] for n in range(len(classes))}
    for done, (n, example) in enumerate(jobs):
        left = deadline - time.monotonic()
        if left <= 0 or options.shrink_attempts <= 0:
            shrunk[n].append(example)
            continue
        attempts = min(options.shrink_attempts, 6) if classes[n].kind == "hang" else options.shrink_attempts
        r = example.result
        result = shrink(r.program, r.outcome, partial(evaluate, pool), batch=len(pool.workers),
                        attempts=attempts, seconds=left / (len(jobs) - done))
        shrunk[n].append(Example(r, result))
    return tuple(FailureClass(c.signature, c.results, tuple(shrunk[n])) for n, c in enumerate(classes))
