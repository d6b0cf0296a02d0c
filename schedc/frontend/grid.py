"""Accera's parameter grids: every combination of the parameters' values, for
``Package.add(..., parameters=grid)``.

>>> import schedc as acc
>>> i, j = acc.Nest((4, 4)).get_indices()
>>> order = acc.create_parameters()
>>> [tuple(x.name for x in p[order]) for p in acc.create_parameter_grid({order: (i, j)})]
[('i', 'j'), ('j', 'i')]
"""

from __future__ import annotations

import inspect
import itertools
import random
from collections.abc import Callable, Iterable, Mapping

from .expr import Index
from .parameters import Parameter, ParameterError


def create_parameter_grid(parameter_choices: Mapping[Parameter, object], filter_func: Callable | None = None,
                          sample: int = 0, seed: int | None = None) -> list[dict[Parameter, object]]:
    """Every combination of the parameters' values (Accera's grid), as dicts for
    ``Package.add(..., parameters=grid)``. A parameter given a tuple of indices stands for a loop
    order: its choices are their permutations (a list of indices is a choice among them, e.g.
    for a cache's index). ``filter_func`` receives a combination's
    values in the dict's order and keeps it when true; ``sample`` keeps that many combinations,
    drawn at random with ``seed`` (0 unless given, so that a script builds the same package
    every time)."""
    where = "create_parameter_grid(...)"
    if not isinstance(parameter_choices, Mapping) or not parameter_choices:
        raise ParameterError(where, "parameter_choices must be a non-empty dict of parameter: values")
    keys, choices = [], []
    for key, values in parameter_choices.items():
        if not isinstance(key, Parameter) or key.op:
            raise ParameterError(where, f"{key!r} is not a parameter made by create_parameters()")
        if isinstance(values, tuple) and values and all(isinstance(v, Index) for v in values):
            values = list(itertools.permutations(values))  # a loop order: every order of the indices
        values = list(values) if isinstance(values, Iterable) and not isinstance(values, str) else [values]
        if not values:
            raise ParameterError(where, f"parameter {key.name} has no values")
        keys.append(key)
        choices.append(values)
    points = [p for p in itertools.product(*choices) if filter_func is None or _keep(filter_func, p)]
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ParameterError(where, f"sample must be a non-negative integer, not {sample!r}")
    if 0 < sample < len(points):
        points = random.Random(0 if seed is None else seed).sample(points, sample)
    return [dict(zip(keys, p)) for p in points]


def _keep(filter_func: Callable, point: tuple) -> bool:
    try:
        inspect.signature(filter_func).bind(*point)
    except (TypeError, ValueError):
        return bool(filter_func(point))  # Accera's older filters take the combination as one tuple
    return bool(filter_func(*point))
