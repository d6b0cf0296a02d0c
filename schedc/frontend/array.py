"""Arrays: the data a nest reads and writes (Accera's ``acc.Array`` and ``acc.Role``).

>>> A = Array(role=Role.INPUT, element_type=ScalarType.float32, shape=(4, 3),
...           layout=Array.Layout.LAST_MAJOR)
>>> A.strides
(1, 4)
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence

import numpy as np

from ..errors import NestError
from ..ir.layout import row_major_strides
from ..ir.types import ScalarType, converts_implicitly, from_numpy
from . import capture
from .dimension import Dimension
from .expr import Access, Assign, affine_terms, as_expr, holds_parameter, render, walk
from .names import unusable
from .parameters import Call, Recording, assigned_names, has_parameter


class Role(enum.Enum):
    """How a function uses an array."""

    INPUT = "input"  # read only, passed by the caller
    INPUT_OUTPUT = "input_output"  # read and written, passed by the caller
    OUTPUT = "output"  # written only (every element), passed by the caller
    CONST = "const"  # contents known when building, embedded in the package
    TEMP = "temp"  # scratch storage owned by the package


class Layout(enum.Enum):
    """Memory order: FIRST_MAJOR is row-major (C order), LAST_MAJOR column-major (Fortran)."""

    FIRST_MAJOR = "FIRST_MAJOR"
    LAST_MAJOR = "LAST_MAJOR"


class Array:
    """An n-dimensional array of scalars.

    Parameters: ``role`` (Role), ``element_type`` (ScalarType, default float32), ``shape``
    (positive integers; the slowest dimension may be a run-time size, ``create_dimensions``),
    ``layout`` (Layout or explicit element strides), ``data`` (CONST only),
    ``name`` (optional; otherwise ``Package.add`` names it after the script's variable for it, or
    by its position in ``args``: see ``schedc.frontend.names``).
    """

    Layout = Layout
    Role = Role  # Accera: acc.Array.Role.INPUT

    def __init__(
        self,
        role: Role,
        element_type: ScalarType | None = None,
        shape: Sequence[int] | None = None,
        layout: Layout | Sequence[int] = Layout.FIRST_MAJOR,
        data: np.ndarray | None = None,
        name: str | None = None,
    ) -> None:
        shown = f"{type(role).__name__}.{role.name}" if isinstance(role, enum.Enum) else repr(role)
        where = "Array(" + (f"name={name!r}, " if name else "") + f"role={shown})"
        assigned = assigned_names(sys._getframe(1)) if name is None else None
        if assigned is not None and len(assigned) == 1:
            where = f"{assigned[0]} = {where}"  # the script's variable, in messages about the array
        arguments = {"role": role, "element_type": element_type, "shape": shape, "layout": layout, "data": data,
                     "name": name}
        self._recording = Recording(Call("__init__", (), arguments), deferred=has_parameter(arguments))
        if self._recording.deferred:  # made at Package.add, with the parameters' values
            self._placeholder(where, role, element_type, shape, layout, name)
            return
        if not isinstance(role, Role):
            raise NestError(where, "role must be a Role (INPUT, INPUT_OUTPUT, OUTPUT, CONST, TEMP)")
        self.role = role
        self.data = None
        if role is Role.CONST:
            element_type, shape = self._const_data(where, data, element_type, shape)
        elif data is not None:
            raise NestError(where, "data is only for Role.CONST arrays")
        if element_type is None:
            element_type = ScalarType.float32
        if not isinstance(element_type, ScalarType):
            raise NestError(where, f"element_type must be a ScalarType, not {element_type!r}")
        self.element_type = element_type
        self.shape = _check_shape(where, shape)
        self.strides = _strides(where, self.shape, layout)
        if self.sized and role is Role.CONST:
            raise NestError(where, f"a Role.{role.name} array has a fixed size: its shape {_shown(self.shape)} has "
                                   "a run-time size")
        self.layout = layout if isinstance(layout, Layout) else tuple(layout)
        if name is not None and unusable(name) is not None:
            raise NestError(where, f"name {unusable(name)}")
        self.explicit_name = name  # always the array's name; see schedc.frontend.names otherwise
        self.name = name
        self.variable: str | None = None  # the script's variable for it, in messages before Package.add names it
        if self.data is not None:
            self.data = np.ascontiguousarray(self.data.astype(self.element_type.numpy))

    def _placeholder(self, where, role, element_type, shape, layout, name) -> None:
        """An array whose shape, type or layout is a parameter: its rank is known now (the
        iteration logic may subscript it); the rest when the parameters have values."""
        if shape is None or not isinstance(shape, tuple | list) or not shape:
            raise NestError(where, "a shape given by parameters is a tuple of them (and numbers): "
                                   "shape=(m, k)")
        self.role, self.element_type, self.data = role, element_type or ScalarType.float32, None
        self.shape, self.strides, self.layout = tuple(shape), None, layout
        self.explicit_name = self.name = name
        self.variable = None

    @classmethod
    def _replayed(cls, replay, **arguments) -> Array:
        return cls(**arguments)

    def _const_data(self, where, data, element_type, shape):
        if data is None:
            raise NestError(where, "a Role.CONST array needs data")
        data = np.asarray(data)
        if element_type is None:
            try:
                element_type = from_numpy(data.dtype)
            except KeyError:
                raise NestError(where, f"data of dtype {data.dtype} has no ScalarType") from None
        if shape is not None and tuple(shape) != data.shape:
            raise NestError(where, f"shape {tuple(shape)} differs from the data's {data.shape}")
        self.data = data
        return element_type, data.shape

    @property
    def sized(self) -> bool:
        """Whether a dimension of the array is a run-time size."""
        return any(isinstance(n, Dimension) for n in self.shape)

    @property
    def size(self) -> int:
        """Elements of storage the array spans (largest offset + 1); fixed shapes only."""
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))

    @property
    def display_name(self) -> str:
        shape = _shown(self.shape)[1:-1]
        return self.name or self.variable or f"<{self.element_type.value}[{shape}] array>"

    def __repr__(self) -> str:
        return f"Array({self.display_name}, {self.role.name}, {self.element_type.value})"

    @property
    def requested_layout(self):
        """The layout the Array was made with (Accera's name; schedc keeps it as given)."""
        return self.layout

    def __getattr__(self, name: str):  # Accera's Array methods schedc does not have: the reason
        from ..accera_names import refuse_method

        if name.startswith("_"):
            raise AttributeError(name)
        return refuse_method("Array", name)

    def __getitem__(self, key: object) -> Access:
        indices = key if isinstance(key, tuple) else (key,)
        exprs = tuple(as_expr(i) for i in indices)
        where = f"{self.display_name}[{', '.join(render(e) for e in exprs)}]"
        if len(exprs) != len(self.shape):
            raise NestError(where, f"{len(exprs)} subscripts for an array of rank {len(self.shape)}")
        for e in exprs:
            if any(isinstance(node, Access) for node in walk(e)):
                raise NestError(where, f"the subscript {render(e)} reads an array: subscripts that read arrays (a "
                                       "gather, a scatter, an embedding lookup) are not built yet; subscripts are "
                                       "affine expressions of indices and integers")
            if not holds_parameter(e):  # with a parameter: checked once its value is known (Package.add)
                affine_terms(e)  # raises unless affine in the indices
        return Access(self, exprs)

    def __setitem__(self, key: object, value: object) -> None:
        target = self[key]
        value = as_expr(value)
        where = f"{render(target)} = {render(value)}"
        if self.role in (Role.INPUT, Role.CONST):
            raise NestError(where, f"{self.display_name} is Role.{self.role.name} and cannot be written")
        if value.dtype is not None and not converts_implicitly(value.dtype, self.element_type):
            raise NestError(
                where,
                f"a {value.dtype.value} value does not convert implicitly to "
                f"{self.element_type.value}; use cast(value, ScalarType.{self.element_type.value})",
            )
        capture.record(where, Assign(target, value))

    # Python evaluates ``C[i, j] += x`` as ``C[i, j] = C[i, j] + x``: no __iadd__ is needed.


def _shown(shape: tuple) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ")"


def _check_shape(where: str, shape: Sequence[int] | None) -> tuple[int | Dimension, ...]:
    if shape is None:
        raise NestError(where, "shape is required")
    shape = tuple(shape)
    fixed = [n for n in shape if not isinstance(n, Dimension)]
    if not shape or any(isinstance(n, bool) or not isinstance(n, int | np.integer) for n in fixed):
        raise NestError(where, f"shape must be a tuple of positive integers (or run-time sizes), not {shape!r}")
    if any(n < 1 for n in fixed):
        raise NestError(where, f"shape must be a tuple of positive integers, not {shape!r}")
    return tuple(n if isinstance(n, Dimension) else int(n) for n in shape)


def _strides(where: str, shape: tuple[int | Dimension, ...], layout: Layout | Sequence[int]) -> tuple[int, ...]:
    sized = [d for d, n in enumerate(shape) if isinstance(n, Dimension)]
    if sized:
        slowest = 0 if layout is Layout.FIRST_MAJOR else len(shape) - 1 if layout is Layout.LAST_MAJOR else None
        if slowest is None or sized != [slowest]:
            order = "first" if layout is Layout.FIRST_MAJOR else "last" if layout is Layout.LAST_MAJOR else "slowest"
            raise NestError(where, f"shape {_shown(shape)}: a run-time size may be the array's {order} dimension "
                                   "only (the one no stride depends on), one per array")
        shape = tuple(1 if isinstance(n, Dimension) else n for n in shape)
    if layout is Layout.FIRST_MAJOR:
        return row_major_strides(shape)
    if layout is Layout.LAST_MAJOR:
        return row_major_strides(shape[::-1])[::-1]
    if isinstance(layout, Sequence) and not isinstance(layout, str):
        strides = tuple(layout)
        if len(strides) != len(shape) or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in strides
        ):
            raise NestError(where, f"layout strides {strides!r} must be {len(shape)} positive integers")
        _check_no_overlap(where, shape, strides)
        return strides
    raise NestError(where, f"layout must be Array.Layout or a tuple of strides, not {layout!r}")


def _check_no_overlap(where: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
    """Distinct elements must have distinct offsets: each stride clears the span inside it."""
    span = 1
    for stride, n in sorted(zip(strides, shape)):
        if n > 1 and stride < span:
            raise NestError(where, f"layout strides {strides} make elements overlap")
        span = stride * n if n > 1 else span
