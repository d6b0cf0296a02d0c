"""Which points to try next: every point in order (``Exhaustive``), or, for spaces larger than
the budget, optuna's TPE sampler over each parameter's values (``Sampled``: one study per
function and shape, refused points told as failed trials, so that the sampler learns where the
analysis says no)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from ..errors import TuneError
from .collect import Grid
from .results import Task

Group = tuple[int, str]  # (grid, shape): one best point each


def groups(grids: tuple[Grid, ...]) -> dict[Group, list[int]]:
    """Each grid's points by problem shape, in the grid's order."""
    out: dict[Group, list[int]] = {}
    for g, grid in enumerate(grids):
        for p in range(len(grid.points)):
            out.setdefault((g, grid.shape(p)), []).append(p)
    return out


First = tuple[dict[str, str], ...]  # points to try before the others: parameter names to values as text


def leading(grids: tuple[Grid, ...], first: First) -> dict[Group, list[int]]:
    """Each group's points that ``first`` names (every parameter a dict names has the value it
    gives, as ``str`` writes the value: ``GROUP=8``, ``SPECIALIZE=True``), in ``first``'s order;
    a TuneError for a name no tuned grid searches or a dict no point of any group matches."""
    found: dict[Group, list[int]] = {}
    for wanted in first:
        shown = ",".join(f"{k}={v}" for k, v in wanted.items())
        names = {n for grid in grids for p in range(len(grid.points)) for n in grid.searched(p)}
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise TuneError(f"--first {shown}", f"{', '.join(unknown)}: not a parameter the tuned grids search "
                                                f"(they search {', '.join(sorted(names))})")
        matched = False
        for group, points in groups(grids).items():
            grid = grids[group[0]]
            for p in points:
                values = grid.searched(p)
                if all(n in values and _text(values[n]) == _text(v) for n, v in wanted.items()):
                    matched = True
                    if p not in found.setdefault(group, []):
                        found[group].append(p)
        if not matched:
            raise TuneError(f"--first {shown}", "no point of the tuned grids has these values (the grid's filter "
                                                "may leave it out)")
    return found


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) or str(value).lower() in ("true", "false") else str(value)


class Exhaustive:
    """Every point of every group in turn (the first ``budget`` of each, where one is given),
    those ``first`` names before the others."""

    def __init__(self, grids: tuple[Grid, ...], budget: int | None = None, first: First = ()) -> None:
        early = leading(grids, first)
        self.order = [Task(g, p) for (g, shape), points in groups(grids).items()
                      for p in _ahead(early.get((g, shape), []), points)[:budget]]
        self.total = len(self.order)
        self._next: Iterator[Task] = iter(self.order)
        self.finished = False

    def next(self) -> Task | None:
        task = next(self._next, None)
        self.finished = task is None
        return task

    def tell(self, task: Task, value: float | None, counted: bool = True) -> None:
        pass

    def done(self) -> bool:
        return self.finished


class Sampled:
    """optuna's TPE sampler (seeded) over each searched parameter's values, one study per group,
    until ``budget`` points of each group passed the checks and were sent to the GPU (or the
    group's points ran out). A parameter whose value the others determine in the grid (an MMA
    shape tied to the tile's width by the grid's filter) is not searched; a combination the
    filter left out, or a point tried already, is a failed trial, and after ``STUCK`` of them in a
    row an untried point of the grid is enqueued (optuna's ``enqueue_trial``). Points the
    database knows are added to the study first (``known``), so that a rerun times nothing again;
    the points ``first`` names are enqueued before the sampler proposes any."""

    MISSES = 2000  # proposals that find no new point: the group is exhausted (all its points are tried first)
    STUCK = 8

    def __init__(self, grids: tuple[Grid, ...], budget: int, seed: int = 0, in_flight: int = 4,
                 first: First = ()) -> None:
        try:
            import optuna
        except ImportError:
            raise TuneError("schedc tune", "a search of more points than the budget needs optuna: "
                                           "pip install 'schedc[tune]'") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.grids, self.budget, self.in_flight = grids, budget, in_flight
        self.studies = {}
        self.choices: dict[Group, list[tuple[str, list[str]]]] = {}
        self.index: dict[Group, dict[tuple, int]] = {}
        self.random = random.Random(seed)
        for n, (group, points) in enumerate(groups(grids).items()):
            grid = grids[group[0]]
            names = _free(grid, points)
            values = {name: list(dict.fromkeys(json.dumps(grid.searched(p)[name]) for p in points)) for name in names}
            self.choices[group] = [(name, values[name]) for name in names]
            self.index[group] = {tuple(values[name].index(json.dumps(grid.searched(p)[name])) for name in names): p
                                 for p in points}
            sampler = optuna.samplers.TPESampler(seed=seed + n, constant_liar=True)
            self.studies[group] = optuna.create_study(direction="minimize", sampler=sampler)
        self.sent = dict.fromkeys(self.studies, 0)  # points proposed that passed the checks (or are being checked)
        self.exhausted: set[Group] = set()
        self.seen: dict[Group, set[int]] = {g: set() for g in self.studies}
        self.trials: dict[Task, tuple[Group, object]] = {}
        self.total = sum(min(budget, len(points)) for points in groups(grids).values())
        self.where = {Task(g[0], p): (g, key) for g, index in self.index.items() for key, p in index.items()}
        for group, points in leading(grids, first).items():  # asked before the sampler proposes
            names = [name for name, _ in self.choices[group]]
            for p in points:
                self.studies[group].enqueue_trial(dict(zip(names, self.where[Task(group[0], p)][1])))

    def next(self) -> Task | None:
        for group in self.studies:
            if group in self.exhausted or self.sent[group] >= self.budget:
                continue
            if sum(1 for g, _ in self.trials.values() if g == group) >= self.in_flight:
                continue
            task = self._propose(group)
            if task is not None:
                return task
        return None

    def _distributions(self, group: Group) -> dict:
        return {name: self.optuna.distributions.CategoricalDistribution(list(range(len(values))))
                for name, values in self.choices[group]}

    def _propose(self, group: Group) -> Task | None:
        study = self.studies[group]
        distributions = self._distributions(group)
        misses = 0
        for _ in range(self.MISSES):
            if len(self.seen[group]) == len(self.index[group]):
                break
            if misses and misses % self.STUCK == 0:  # the sampler keeps to tried points: give it a new one
                untried = [key for key, p in self.index[group].items() if p not in self.seen[group]]
                study.enqueue_trial(dict(zip(distributions, self.random.choice(untried))))
            trial = study.ask(distributions)
            key = tuple(trial.params[name] for name in distributions)
            point = self.index[group].get(key)
            if point is None or point in self.seen[group]:
                study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                misses += 1
                continue
            self.seen[group].add(point)
            self.sent[group] += 1
            task = Task(group[0], point)
            self.trials[task] = (group, trial)
            return task
        self.exhausted.add(group)
        return None

    def known(self, task: Task, value: float | None, sent: bool) -> None:
        """Add a point the database knows to its group's study: its time (None: refused or
        failed, a failed trial); ``sent``: it passed the checks (it counts against the budget)."""
        group, key = self.where[task]
        distributions = self._distributions(group)
        params = dict(zip(distributions, key))
        state = self.optuna.trial.TrialState
        trial = self.optuna.trial.create_trial(params=params, distributions=distributions, value=value,
                                               state=state.COMPLETE if value is not None else state.FAIL)
        self.studies[group].add_trial(trial)
        self.seen[group].add(task.point)
        self.sent[group] += int(sent)

    def tell(self, task: Task, value: float | None, counted: bool = True) -> None:
        """The point's time (seconds), or None where it was refused or failed (then it does not
        count against the budget: ``counted`` False)."""
        group, trial = self.trials.pop(task)
        if value is None:
            self.studies[group].tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.studies[group].tell(trial, value)
        if not counted:
            self.sent[group] -= 1

    def done(self) -> bool:
        return not self.trials and all(g in self.exhausted or self.sent[g] >= self.budget for g in self.studies)


def _ahead(early: list[int], points: list[int]) -> list[int]:
    return early + [p for p in points if p not in early]


def _free(grid: Grid, points: list[int]) -> list[str]:
    """The searched parameters left when each one the others determine among ``points`` is
    dropped, last first (an MMA shape the filter ties to the tile's width goes; the width stays)."""
    values = [grid.searched(p) for p in points]
    free = list(values[0]) if values else []
    for name in reversed(list(free)):
        others = [n for n in free if n != name]
        seen: dict[str, str] = {}
        if all(seen.setdefault(json.dumps([v[n] for n in others]), json.dumps(v[name])) == json.dumps(v[name])
               for v in values):
            free.remove(name)
    return free
