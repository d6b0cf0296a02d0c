"""Nests: an iteration space and the statements run at each point (Accera's ``acc.Nest``).

>>> import schedc as acc
>>> A = acc.Array(role=acc.Role.INPUT, shape=(4, 2))
>>> B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4, 2))
>>> nest = acc.Nest(shape=(4, 2))
>>> i, j = nest.get_indices()
>>> @nest.iteration_logic
... def _():
...     B[i, j] += 2.0 * A[i, j]
>>> print(nest.statements[0])  # arrays by the variables the logic sees them as
B[i, j] += 2.0 * A[i, j]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import NestError
from ..ir import sizes
from ..ir.affine import Affine
from . import capture
from .dimension import Dimension, as_extent
from .expr import Access, Assign, Const, Index, affine_terms, walk
from .names import bound_names, name_arrays_in_scope, name_indices, variables
from .parameters import Call, Parameter, Recording, deferred, has_parameter, recorded

INDEX_NAMES = "ijklmnpqrstuvw"


class Nest:
    """A perfectly nested loop over ``shape``: ``Nest(shape=(M, N, K))`` or ``Nest(M, N, K)``."""


    def __getattr__(self, name: str):  # Accera's methods schedc does not have: the reason
        from ..accera_names import refuse_method

        if name.startswith("__"):
            raise AttributeError(name)
        return refuse_method("Nest", name)
    def __init__(self, shape: tuple[int, ...] | int | None = None, *more: int) -> None:
        dims = (shape, *more) if isinstance(shape, int | np.integer | Parameter | Dimension) else shape
        where = f"Nest(shape={dims!r})"
        if dims is None or isinstance(dims, str) or not hasattr(dims, "__len__") or not dims:
            raise NestError(where, "shape must be a non-empty tuple of positive integers")
        self._recording = Recording(Call("__init__", (tuple(dims),), {}), deferred=has_parameter(dims))
        if any(isinstance(n, bool) or not isinstance(n, int | np.integer | Parameter | Dimension)
               or (isinstance(n, int | np.integer) and n < 1) for n in dims):
            raise NestError(where, "shape must be a non-empty tuple of positive integers")
        self.shape = tuple(n if isinstance(n, Parameter | Dimension) else int(n) for n in dims)
        names = [
            INDEX_NAMES[d] if d < len(INDEX_NAMES) else f"i{d}" for d in range(len(self.shape))
        ]
        self.indices = tuple(Index(name, self) for name in names)
        self.statements: list[Assign] = []
        self.logic: list[Callable[[], object]] = []  # its scopes name arrays and indices

    def get_indices(self) -> tuple[Index, ...]:
        """The nest's indices, outermost first, named i, j, k, l, ... until the iteration logic
        names them after the script's variables (``schedc.frontend.names``)."""
        return self.indices

    def iteration_logic(self, logic: Callable[[], object]) -> Callable[[], object]:
        """Decorator: run ``logic`` once, recording each array assignment as a statement.

        Statements run in the order written, at every point of the iteration space. The nest's
        indices take the names of the variables bound to them where ``logic`` runs (its globals
        and closure), so that messages and splits (``ii`` from ``i``) follow the script.
        """
        name_indices(list(self.indices), [*self.logic, logic])
        _show_array_variables(logic)
        with capture.recording() as statements:
            logic()
        nodes = [node for s in statements for node in [*walk(s.target), *walk(s.value)]]
        if any(isinstance(n, Access) and deferred(n.array) or isinstance(n, Const) and has_parameter(n.value)
               for n in nodes):
            self._recording.deferred = True  # parameters in shapes or values: checked at Package.add
        self._add_statements(tuple(statements), logic)
        return logic

    def _add_placeholder(self, statements: tuple[Assign, ...], logic: Callable[[], object]) -> None:
        self.statements.extend(statements)
        self.logic.append(logic)

    @recorded(_add_placeholder)
    def _add_statements(self, statements: tuple[Assign, ...], logic: Callable[[], object]) -> None:
        where = f"@iteration_logic {getattr(logic, '__name__', 'logic')}"
        if not statements:
            raise NestError(where, "the logic assigned no array element")
        for statement in statements:
            self._check_statement(statement, logic)
        self._add_placeholder(statements, logic)

    @classmethod
    def _replayed(cls, replay, shape: tuple[int, ...]) -> Nest:
        return cls(shape)

    def _replay_made(self, replay, concrete: Nest) -> None:
        """A replayed nest's indices stand for this one's and keep their names."""
        for mine, its in zip(self.indices, concrete.indices):
            replay.remember(mine, its)

    def _check_statement(self, statement: Assign, logic: Callable[[], object]) -> None:
        nodes = [*walk(statement.target), *walk(statement.value)]
        for node in nodes:  # before the bounds, which are over this nest's indices
            if isinstance(node, Index) and node not in self.indices:
                name_indices([*self.indices, node], [logic])  # the message in the script's names
                raise NestError(
                    str(statement), f"index {node.name} does not belong to this nest (it is another nest's)"
                )
        for node in nodes:
            if isinstance(node, Access):
                try:
                    _check_in_bounds(statement, node, self)
                except NestError:
                    raise _named(statement, self, logic) from None

    def get_shape(self) -> tuple[int, ...]:
        """The nest's extents, outermost first (Accera's ``nest.get_shape()``)."""
        return self.shape

    def arrays(self) -> list:
        """The arrays the statements use, in order of first appearance."""
        found: list = []
        for s in self.statements:
            for node in [*walk(s.target), *walk(s.value)]:
                if isinstance(node, Access) and all(node.array is not a for a in found):
                    found.append(node.array)
        return found

    def create_schedule(self):
        """A schedule over this nest, in the nest's loop order."""
        from .schedule import Schedule

        if not self.statements:
            raise NestError("create_schedule()", "the nest has no iteration logic yet")
        schedule = Schedule(self)
        schedule._recording = Recording(Call("create_schedule", (), {}), self, deferred=deferred(self))
        return schedule

    def create_plan(self, target=None):
        """Shorthand for ``create_schedule().create_plan(target)``."""
        return self.create_schedule().create_plan(target)


def _named(statement: Assign, nest: Nest, logic: Callable[[], object]) -> NestError:
    """The bounds error of ``statement`` again, its arrays and indices named after the script's
    variables first (those of the logic's scope and of the functions it calls)."""
    arrays = [n.array for n in [*walk(statement.target), *walk(statement.value)] if isinstance(n, Access)]
    unnamed = list({id(a): a for a in arrays if a.name is None}.values())
    name_arrays_in_scope(unnamed, [logic])
    name_indices(list(nest.indices), [logic])
    for node in [*walk(statement.target), *walk(statement.value)]:
        if isinstance(node, Access):
            try:
                _check_in_bounds(statement, node, nest)
            except NestError as error:
                return error
    return NestError(str(statement), "an access outside its array")


def _check_in_bounds(statement: Assign, access: Access, nest: Nest) -> None:
    """Subscripts over the whole iteration box must stay inside the array, for every value of
    the run-time sizes. The box is a nest's domain, where an affine subscript takes its extremes
    at corners: the witness is exact."""
    dims = {index.name: as_extent(n) for index, n in zip(nest.indices, nest.shape)}
    for subscript, size in zip(access.indices, access.array.shape):
        terms, const = affine_terms(subscript)
        for too_low in (True, False):
            corner = {name: (sizes.affine(dims[name]).plus(Affine((), -1)) if (c < 0) == too_low else Affine(()))
                      for name, c in terms.items()}
            value = Affine((), const)
            for name, c in terms.items():
                value = value.plus(corner[name].scale(c))
            room = value if too_low else sizes.affine(as_extent(size)).plus(value.scale(-1)).plus(Affine((), -1))
            witness = sizes.negative_for(room)
            if witness is not None:
                _outside(statement, access, dims, corner, witness)


def _outside(statement: Assign, access: Access, dims: dict, corner: dict, witness: dict[str, int]) -> None:
    """The refusal of an access outside its array at the ``corner`` of the nest, for the run-time
    sizes of ``witness`` (empty: for every size; shown at the smallest, 1)."""
    every = sizes.names([*dims.values(), *access.array.shape])
    values = {**dict.fromkeys(every, 1), **witness}  # the sizes the bound does not name: any value, 1
    point = {name: sizes.at(corner.get(name, 0), values) for name in dims}
    element = [_evaluate(s, point) for s in access.indices]
    verb = "writes" if access is statement.target else "reads"
    shown = ", ".join(f"{k}={v}" for k, v in point.items())
    if witness:
        when = sizes.when(witness)
    else:
        when = f" for every {', '.join(every)} (shown at {', '.join(f'{n} = 1' for n in every)})" if every else ""
    shape = "(" + ", ".join(str(n) for n in access.array.shape) + ")"
    raise NestError(
        str(statement),
        f"iteration ({shown}) {verb} {access.array.display_name}"
        f"[{', '.join(map(str, element))}] outside its shape {shape}{when}",
    )


def _evaluate(subscript, point: dict[str, int]) -> int:
    terms, const = affine_terms(subscript)
    return const + sum(c * point[name] for name, c in terms.items())


def _show_array_variables(logic: Callable[[], object]) -> None:
    """Arrays the logic can see are shown by their variables in messages from now on (the
    logic's own, the plan's), before ``Package.add`` names them (``schedc.frontend.names``)."""
    from .array import Array

    arrays = [value for _, value in variables(logic) if isinstance(value, Array) and value.name is None]
    found = bound_names(arrays, [logic])
    for array in arrays:
        array.variable = found.get(id(array), array.variable)
