"""Sizes known only at run time (Accera's ``acc.create_dimensions``).

A ``Dimension`` stands for a size the caller's arrays give when the function runs: it may be an
array's slowest dimension (``shape=(M, K)``) and a nest's extent (``Nest(M, N, K)``), and it is
one of the function's arguments (``Package.add(plan, args=(A, B, C, M))``: the C launcher takes
it there, a Python caller passes the arrays only and the loader reads it from their shapes). The
analysis proves the plan for every value >= 1 (the sizes are isl parameters) and partial tiles
are guarded.

>>> import schedc as acc
>>> M, N = acc.create_dimensions()
>>> M, N
(Dimension(M), Dimension(N))
>>> A = acc.Array(role=acc.Role.INPUT, shape=(M, 64))
>>> A.shape, A.strides
((Dimension(M), 64), (64, 1))
"""

from __future__ import annotations

import sys

from ..errors import NestError
from ..ir.affine import Affine
from .names import unusable
from .parameters import _ASSIGN, assigned_names, one_per_name


class Dimension:
    """A run-time size, named after the script's variable for it (``M = create_dimensions()``)."""

    def __init__(self, name: str) -> None:
        why = unusable(name)
        if why is not None:
            raise NestError("create_dimensions()", f"a run-time size is named after its variable: {why}")
        self.name = name

    @property
    def affine(self) -> Affine:
        """The size as an affine expression of the sizes (the Model's form)."""
        return Affine(((self.name, 1),))

    def __repr__(self) -> str:
        return f"Dimension({self.name})"

    def __str__(self) -> str:
        return self.name

    def __bool__(self) -> bool:
        return True  # a size is at least 1

    def _refuse(self, *_args):
        raise NestError(self.name, "a run-time size names an array's or nest's extent and is an argument of the "
                                   "function; it takes no part in arithmetic or comparisons in schedc")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __floordiv__ = __truediv__ = __mod__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse

    def __index__(self) -> int:
        raise NestError(self.name, "a run-time size has no value before the function runs; it may be an array's or "
                                   "a nest's extent, not a number")


def create_dimensions(role: object = None) -> Dimension | tuple[Dimension, ...]:
    """Run-time sizes named after the variables the call is assigned to: ``M, N =
    create_dimensions()`` (one variable: one Dimension). ``role`` (Accera's): INPUT, the only
    role built (an OUTPUT size, set by the function, is refused)."""
    if role is not None and getattr(role, "name", None) != "INPUT":  # Role.INPUT
        raise NestError(f"create_dimensions({role!r})", "only input sizes (given by the caller's arrays) are built: "
                                                        "a size the function sets (Role.OUTPUT) is not")
    names = assigned_names(sys._getframe(1))
    return one_per_name(names, Dimension, NestError("create_dimensions()", _ASSIGN.format(
        example="M, N = acc.create_dimensions()", what="sizes")))


def as_extent(value: int | Dimension) -> int | Affine:
    """An extent in the Model's terms: an int, or the size as an Affine."""
    return value.affine if isinstance(value, Dimension) else value
