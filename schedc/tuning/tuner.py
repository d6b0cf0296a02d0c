"""``schedc tune``: the points of a script's parameter grids checked by the analysis and the
resource model (refused points counted by reason, never compiled), the others built in a
process pool, verified once and timed on the GPU (stopped early when clearly slower than the
best so far), every result kept in the database, and the best point of each function and shape
written as a package.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TuneError
from ..frontend.parameters import show_value
from ..package import refusals
from ..package.build import session
from ..package.native import cache_root
from . import collect, db, measure, runners
from .results import Checked, Measured, Status, Task
from .search import Exhaustive, Group, Sampled, groups


@dataclass(frozen=True)
class Options:
    """How ``tune`` searches (see ``schedc tune --help``)."""

    shapes: tuple[collect.Shape, ...] = ()
    sizes: tuple[collect.Shape, ...] = ()  # run-time sizes to time a function of them at: a winner (bucket) each
    functions: tuple[str, ...] = ()  # the grids tuned, by base name (default: all; the others leave the package)
    db: str | None = None  # default: db.default_path()
    cache: str | None = None  # compiled candidates; default: cache_root()
    output_dir: str | None = None  # the winners' package folder (DIR/<package>/); default: the script's
    jobs: int = 0  # build processes (0: one per CPU)
    budget_points: int | None = None  # sampled: points of each function and shape sent to the GPU, at most;
    # exhaustive: the first this many points of each function and shape (refused ones among them)
    budget_seconds: float | None = None  # no new point started after this many seconds
    search: str = "auto"  # exhaustive, sampled (optuna), or auto: sampled where a group has more points than the budget
    seed: int = 0
    gpus: tuple[int, ...] | str = (0,)  # GPU ordinals of this host, or "all"
    scheduler: object = None  # a Dask scheduler's address or a distributed.Client
    timeout: float = 120.0  # seconds a candidate may run on the GPU
    compare: str | None = None  # a reference timed beside each winner: cublas, copy, torch
    finalists: int = 3  # the fastest points of each function and shape timed again, in turn on one GPU
    tie: float = 0.005  # finalists within this fraction of the fastest are a tie: the first in the grid's order wins
    settings: measure.Settings = field(default_factory=measure.Settings)
    progress: bool = True
    write: bool = True  # write the winners' package(s)
    dry_run: bool = False  # check every point and count the refusals; build and time nothing
    first: tuple[dict[str, str], ...] = ()  # points tried before the search (--first): names to values as text


@dataclass
class Point:
    """One point the tuner tried, and what became of it."""

    task: Task
    function: str  # the grid's base name
    shape: str
    values: dict  # the searched parameters' values
    key: str
    checked: Checked | None = None
    measured: Measured | None = None
    reused: bool = False  # from the database

    @property
    def status(self) -> Status:
        if self.measured is not None:
            return self.measured.status
        return self.checked.status if self.checked is not None else Status.PENDING

    @property
    def median(self) -> float | None:
        m = self.measured
        return m.median if m is not None and m.status in (Status.TIMED, Status.SLOWER) else None


@dataclass
class Outcome:
    """What a tune found: every point tried, the best of each function and shape, and where the
    time went."""

    script: collect.Script
    device: dict
    points: list[Point] = field(default_factory=list)
    winners: dict[Group, Point] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0
    build_seconds: float = 0.0  # summed over the build processes
    gpu_seconds: float = 0.0  # summed over the GPU workers
    reused: int = 0

    def counts(self) -> collections.Counter:
        return collections.Counter(p.status for p in self.points)

    def refusals(self) -> collections.Counter:
        """Refused points by cause (their messages with the numbers blanked)."""
        return refusals.by_cause(p.checked.kind for p in self.points if p.status is Status.REFUSED)

    def ranked(self, group: Group) -> list[Point]:
        """The group's timed points (and those stopped early, at their probe's time), fastest first."""
        timed = [p for p in self.points if (p.task.grid, p.shape) == group and p.median is not None]
        return sorted(timed, key=lambda p: p.median)


def tune(script: str | Path, options: Options = Options(), runner=None) -> Outcome:
    """Tune ``script``'s grids (``Options``); ``runner``: where candidates are timed (default:
    this host's GPUs, or the Dask cluster of ``options.scheduler``; ``runners.FakeTiming`` for a
    run without a GPU). Ctrl-C stops the search and keeps every result measured so far."""
    started = time.monotonic()
    source = collect.Source.of(script, list(options.shapes), options.functions, list(options.sizes))
    parsed = collect.script(source, fresh=True)
    database = db.Database(options.db or db.default_path())
    try:
        outcome = _run(source, parsed, options, database, runner)
        if options.write and not outcome.interrupted and not options.dry_run:
            outcome.written = _write(outcome, options)
    finally:
        database.close()
    outcome.seconds = time.monotonic() - started
    return outcome


def _run(source: collect.Source, parsed: collect.Script, options: Options, database: db.Database,
         runner) -> Outcome:
    """Search and pick the winners; the build pool and the GPU workers are closed whatever happens."""
    cache = str(options.cache or cache_root())
    if options.dry_run:
        runner = runners.NoTiming()
    if runner is None and options.scheduler is not None:
        runner = runners.DaskCluster(options.scheduler, timeout=options.timeout)
    dask = runner if isinstance(runner, runners.DaskCluster) else None
    if dask is not None:  # its workers may be on other hosts: the script's helper modules travel with it
        dask.bind(dataclasses.replace(source, modules=parsed.modules), cache)
    jobs = options.jobs or os.cpu_count() or 1
    builders = dask or runners.Builders(source, cache, jobs, build=not options.dry_run)  # forked first
    try:
        runner = runner or runners.LocalGPUs(_gpus(options.gpus), options.timeout)
        outcome = Outcome(parsed, runner.info)
        try:
            _Search(parsed, options, database, builders, runner, outcome).run()
            if not options.dry_run:
                _winners(outcome, options, database, runner)
        except KeyboardInterrupt:
            outcome.interrupted = True
        return outcome
    finally:
        if builders is not dask:
            builders.close()
        if runner is not None:
            runner.close()


def _gpus(gpus: tuple[int, ...] | str) -> list[int]:
    """The GPUs asked for, each of them on this host (a TuneError says what is missing)."""
    count = runners.gpu_count()
    if count == 0:
        raise TuneError("schedc tune", "needs an NVIDIA GPU to time the candidates and this host has none "
                                       "(--dry-run checks the points without one; --scheduler ADDRESS times them on "
                                       "a Dask cluster's GPUs)")
    if gpus == "all":
        return list(range(count))
    missing = [g for g in gpus if g >= count]
    if missing:
        raise TuneError(f"--gpus {','.join(map(str, gpus))}", f"this host has {count} GPU(s), ordinals 0 to "
                                                              f"{count - 1}; there is no GPU {missing[0]}")
    return list(gpus)


class _Search:
    """The tuner's loop: points proposed, checked (or found in the database), built, then timed."""

    def __init__(self, script: collect.Script, options: Options, database: db.Database, builders, runner,
                 outcome: Outcome) -> None:
        self.script, self.options, self.db = script, options, database
        self.builders, self.runner, self.outcome = builders, runner, outcome
        self.best: dict[Group, float] = {}
        self.ready: collections.deque[Point] = collections.deque()
        self.checking: dict[cf.Future, Point] = {}
        self.timing: dict[cf.Future, Point] = {}
        self.proposer = self._proposer()
        self.stopping = False
        self.counts: collections.Counter = collections.Counter()  # points ended, by status (and "compiled")
        self.bar = _progress(self.proposer.total, options.progress)
        if isinstance(self.proposer, Sampled):
            self._warm()

    def _warm(self) -> None:
        """Give the sampler every point the database knows (checked, and timed where it passed),
        so that a rerun of a sampled search times only what its budget has left."""
        for (g, shape), indices in groups(self.script.grids).items():
            grid = self.script.grids[g]
            for index in indices:
                task = Task(g, index)
                point = Point(task, grid.base_name, shape, grid.searched(index), grid.key(index))
                checked = self.db.checked(self.script.key, _check_key(point), point.key, task)
                if checked is None:
                    continue
                measured = None
                if checked.status is Status.COMPILED:
                    measured = self._timed(checked, shape)
                    if measured is None:
                        continue  # built, not timed: the sampler proposes it in turn
                    point.reused = True
                    self.outcome.reused += 1
                point.checked, point.measured = checked, measured
                self.outcome.points.append(point)
                self.proposer.known(task, point.median, sent=measured is not None)
                if measured is not None and measured.status is Status.TIMED:
                    self.best[(g, shape)] = min(self.best.get((g, shape), float("inf")), measured.median)
                self._advance(point, counted=measured is not None)

    def _proposer(self):
        sizes = [len(points) for points in groups(self.script.grids).values()]
        budget = self.options.budget_points
        if budget is not None and budget < 1:
            raise TuneError(f"--budget-points {budget}", "the budget must be at least one point")
        search = self.options.search
        if search not in ("auto", "exhaustive", "sampled"):
            raise TuneError(f"--search {search}", "choose exhaustive, sampled or auto")
        sample = search == "sampled" or (search == "auto" and budget is not None and max(sizes) > budget)
        if sample and not self.options.dry_run:  # a dry run checks every point
            slots = 2 * max(1, self.runner.slots)  # few in flight: the sampler learns from each time it is told
            return Sampled(self.script.grids, budget or max(sizes), self.options.seed, in_flight=slots,
                           first=self.options.first)
        return Exhaustive(self.script.grids, budget, self.options.first)

    def run(self) -> None:
        started = time.monotonic()
        try:
            while True:
                if self.options.budget_seconds is not None and time.monotonic() - started > self.options.budget_seconds:
                    self._stop()
                self._propose()
                self._dispatch()
                if not self.checking and not self.timing and not self.ready and (
                        self.stopping or self.proposer.done()):
                    return
                if not self.checking and not self.timing:
                    continue  # the proposer has more once it is told: nothing is in flight to wait for
                finished, _ = cf.wait([*self.checking, *self.timing], timeout=1.0,
                                      return_when=cf.FIRST_COMPLETED)
                self.runner.overdue()
                for future in finished:
                    if future in self.checking:
                        self._checked(self.checking.pop(future), future)
                    else:
                        self._measured(self.timing.pop(future), self.runner.result(future))
        finally:
            self.bar.close()

    def _stop(self) -> None:
        self.stopping = True
        self.ready.clear()
        for future in list(self.checking):
            if future.cancel():
                del self.checking[future]

    def _propose(self) -> None:
        limit = 2 * self.builders.build_slots
        while not self.stopping and len(self.checking) < limit:
            task = self.proposer.next()
            if task is None:
                return
            grid = self.script.grids[task.grid]
            point = Point(task, grid.base_name, grid.shape(task.point), grid.searched(task.point),
                          grid.key(task.point))
            self.outcome.points.append(point)
            cached = self.db.checked(self.script.key, _check_key(point), point.key, task)
            if cached is not None:
                self._checked_is(point, cached, reused=True)
            else:
                self.checking[self.builders.check(task)] = point

    def _dispatch(self) -> None:
        while self.ready and self.runner.slots > 0:
            point = self.ready.popleft()
            group = (point.task.grid, point.shape)
            future = self.runner.submit(point.checked, point.values, point.shape,
                                        _settings(self.script, point, self.options), self.best.get(group))
            self.timing[future] = point

    def _checked(self, point: Point, future: cf.Future) -> None:
        try:
            checked = future.result()
        except Exception as error:  # noqa: BLE001 - a build process died: a bug of this run, not kept for the next
            checked = Checked(point.task, Status.FAILED, f"the build process failed: {type(error).__name__}: {error}",
                              "the build process failed")
            self._checked_is(point, checked, reused=True)
            return
        self.outcome.build_seconds += checked.seconds
        self._checked_is(point, checked, reused=False)

    def _checked_is(self, point: Point, checked: Checked, reused: bool) -> None:
        point.checked = checked
        if not reused and checked.status is not Status.ACCEPTED:
            self.db.record_check(self.script.key, _check_key(point), point.key, dataclasses.replace(checked, files={}))
        if checked.status is not Status.COMPILED or self.options.dry_run:
            self.proposer.tell(point.task, None, counted=False)
            self._advance(point, counted=False)
            return
        known = self._timed(checked, point.shape)
        if known is not None:
            point.reused = True
            self.outcome.reused += 1
            self._measured_is(point, known)
        else:
            self.ready.append(point)

    def _timed(self, checked: Checked, shape: str) -> Measured | None:
        """The database's time of a built candidate on this device at ``shape``, if it has one."""
        known = self.db.measured(checked.source_hash, self.runner.info, shape)
        return known if known is not None and known.status in (Status.TIMED, Status.SLOWER) else None

    def _measured(self, point: Point, measured: Measured) -> None:
        self.outcome.gpu_seconds += measured.seconds
        self.db.record_measurement(point.checked.source_hash, self.runner.info, point.shape,
                                   self.script.source.path, point.function, point.checked.name, point.key, measured)
        self._measured_is(point, measured)

    def _measured_is(self, point: Point, measured: Measured) -> None:
        point.measured = measured
        group = (point.task.grid, point.shape)
        if measured.status is Status.TIMED and measured.median < self.best.get(group, float("inf")):
            self.best[group] = measured.median
        self.proposer.tell(point.task, point.median)
        self._advance(point, counted=True)

    def _advance(self, point: Point, counted: bool) -> None:
        """Count and show a point's end: the bar counts every point of an exhaustive search, and
        the points that count against the budget of a sampled one."""
        counts = self.counts
        counts[point.status] += 1
        counts["compiled"] += int(point.checked is not None and point.checked.status is Status.COMPILED)
        best = min(self.best.values(), default=None)
        self.bar.set_postfix_str(
            f"refused {counts[Status.REFUSED]}, compiled {counts['compiled']}, "
            f"timed {counts[Status.TIMED] + counts[Status.SLOWER]}, bugs {sum(counts[s] for s in Status if s.bug)}"
            + (f", best {best * 1e6:.1f} us" if best is not None else ""), refresh=False)
        if counted or isinstance(self.proposer, Exhaustive):
            self.bar.update(1)


def _check_key(point: Point) -> str:
    """A point's grid in the checks' table: its place among the script's grids and its name (two
    packages may each add a grid of one base name)."""
    return f"{point.task.grid}:{point.function}"


def _progress(total: int, shown: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        shown = False
    if not shown:
        return _Quiet()
    return tqdm(total=total, unit="point", desc="tuning", dynamic_ncols=True)


class _Quiet:
    def set_postfix_str(self, *args, **kwargs) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _winners(outcome: Outcome, options: Options, database: db.Database, runner) -> None:
    """The fastest point of each function and shape, among its ``finalists`` fastest (those
    stopped early by their probe's time) timed again one after the other on one GPU (beside the
    reference, where one is asked for): the search spread candidates over GPUs and time, and its
    order is not a fair race. Finalists within ``tie`` of the fastest are as fast as the timing can
    tell: the first of them in the grid's order wins, so that reruns pick the same point."""
    for group in groups(outcome.script.grids):
        finalists = outcome.ranked(group)[:max(1, options.finalists)]  # a point stopped early by a lucky best too
        referenced = not options.compare or all(p.measured.reference for p in finalists)
        if not all(p.measured.confirmed for p in finalists) or not referenced:
            for point in finalists:
                _confirm(outcome, point, options, database, runner)
        timed = [p for p in finalists if p.status is Status.TIMED]
        if timed:
            best = min(p.median for p in timed)
            tied = [p for p in timed if p.median <= best * (1 + options.tie)]
            outcome.winners[group] = min(tied, key=lambda p: p.task.point)  # a rerun's winner, whatever the noise


def _settings(script: collect.Script, point: Point, options: Options) -> measure.Settings:
    """How the point is timed: at its run-time sizes, where it has any."""
    sizes = script.grids[point.task.grid].run_sizes(point.task.point)
    return dataclasses.replace(options.settings, sizes=tuple(sizes.items())) if sizes else options.settings


def _confirm(outcome: Outcome, point: Point, options: Options, database: db.Database, runner) -> None:
    while runner.slots < 1:
        time.sleep(0.05)
    future = runner.submit(point.checked, point.values, point.shape, _settings(outcome.script, point, options), None,
                           options.compare)
    while not future.done():  # a hung finalist is stopped as the search's candidates are
        cf.wait([future], timeout=1.0)
        runner.overdue()
    measured = dataclasses.replace(runner.result(future), confirmed=True)
    outcome.gpu_seconds += measured.seconds
    point.measured = measured
    database.record_measurement(point.checked.source_hash, runner.info, point.shape, outcome.script.source.path,
                                point.function, point.checked.name, point.key, measured)


def function_name(grid: collect.Grid, shape: str, shapes: int) -> str:
    """The winner's name: the grid's base name, with its shape where the grid has several
    (``matmul_M4096_N4096_K4096``)."""
    if shapes < 2 or not shape:
        return grid.base_name
    return grid.base_name + "".join(f"_{part.replace('=', '').replace(' ', '')}" for part in shape.split(","))


def _write(outcome: Outcome, options: Options) -> list[Path]:
    """Each package the script builds, its grids replaced by their winners (named by
    ``function_name``; the .hat records the point, its time, the device and the runners-up)."""
    script = outcome.script
    written = []
    missing = [(script.grids[g].base_name, shape) for g, shape in groups(script.grids)
               if (g, shape) not in outcome.winners]
    if missing:
        shown = "; ".join(f"{name} at {shape}" if shape else name for name, shape in missing)
        counts = outcome.counts()
        tally = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "none tried"
        raise TuneError(script.source.path, f"no point was timed for {shown} (points: {tally}); `schedc tune "
                                            "--dry-run` lists the refusals by cause; no package written")
    for build in script.builds:
        package = build.package
        inserted = 0
        for g, grid in enumerate(script.grids):
            if grid.add.package is not package:
                continue
            shapes = [shape for gg, shape in groups(script.grids) if gg == g]
            for shape in shapes:
                point = outcome.winners[(g, shape)]
                name = function_name(grid, shape, len(shapes))
                package._add_point(f"Package.add({grid.base_name})", grid.add.source, grid.add.args, grid.base_name,
                                   grid.points[point.task.point], name=name, tuning=_record(outcome, (g, shape)))
                package._functions.insert(grid.add.position + inserted, package._functions.pop())
                inserted += 1
        with session(output_dir=options.output_dir):
            path = package.build(build.name, **build.kwargs)
        if path is not None:
            written.append(path)
    return written


def _record(outcome: Outcome, group: Group) -> dict:
    """What the winner's .hat says of its choice (``auxiliary.schedc.tuning``)."""
    winner = outcome.winners[group]
    grid = outcome.script.grids[group[0]]
    ranked = outcome.ranked(group)
    record = {
        "point": dict(grid.values(winner.task.point)),
        "median_seconds": winner.median,
        "device": outcome.device["device"],
        "driver": outcome.device["driver"],
        "points": len([p for p in outcome.points if (p.task.grid, p.shape) == group]),
        "timed": len(ranked),
        "runners_up": [{"median_seconds": p.median, "stopped_early": p.status is Status.SLOWER,
                        **{k: show_value(v) if not isinstance(v, int | float | bool | str) else v
                           for k, v in p.values.items()}} for p in ranked[1:6]],
    }
    if winner.shape:
        record["shape"] = winner.shape
    if sum(1 for g, _ in outcome.winners if g == group[0]) > 1:
        record["dispatch"] = grid.base_name  # the loaded package's pkg.<base_name> picks by the arrays' shapes
    if grid.run_sizes(winner.task.point):
        record["sizes"] = grid.run_sizes(winner.task.point)  # the bucket: calls up to these sizes
    if winner.measured.reference:
        record["reference"] = winner.measured.reference
        record["reference_median_seconds"] = winner.measured.reference_median
    return record
