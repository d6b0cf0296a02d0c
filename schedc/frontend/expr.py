"""Expression trees of iteration logic, captured by operator overloading.

``C[i, j] += A[i, k] * B[k, j]`` evaluates ``C[i, j] + A[i, k] * B[k, j]`` as a tree and hands
it to ``C.__setitem__``, which records one ``Assign`` statement in the nest being defined.

>>> from schedc.frontend.nest import Nest
>>> i, j = Nest((4, 8)).get_indices()
>>> print(2 * i + j - 1)
2 * i + j - 1
>>> affine_terms(2 * (i + 3) - j)
({'i': 2, 'j': -1}, 6)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import NestError
from ..ir.types import ScalarType, promote
from .parameters import Logic, Parameter, has_parameter

Number = int | float | bool

_PRECEDENCE = {"max": 9, "min": 9, "*": 5, "/": 5, "%": 5, "+": 4, "-": 4}


class Storage(Protocol):
    """What an access needs of its array (an ``array.Array``)."""

    @property
    def element_type(self) -> ScalarType: ...

    @property
    def display_name(self) -> str: ...


class Expr(Logic):
    """Base of every expression node: arithmetic operators build larger trees."""

    dtype: ScalarType | None  # None: a weakly typed constant or index value

    def __add__(self, other: object) -> Expr:
        return binary("+", self, other)

    def __radd__(self, other: object) -> Expr:
        return binary("+", other, self)

    def __sub__(self, other: object) -> Expr:
        return binary("-", self, other)

    def __rsub__(self, other: object) -> Expr:
        return binary("-", other, self)

    def __mul__(self, other: object) -> Expr:
        return binary("*", self, other)

    def __rmul__(self, other: object) -> Expr:
        return binary("*", other, self)

    def __truediv__(self, other: object) -> Expr:
        return binary("/", self, other)

    def __rtruediv__(self, other: object) -> Expr:
        return binary("/", other, self)

    def __neg__(self) -> Expr:
        _no_bool_arithmetic("-", self.dtype, f"-({render(self)})")
        return Unary("-", self, self.dtype)

    def __pos__(self) -> Expr:
        return self

    def __bool__(self) -> bool:
        raise NestError(
            str(self),
            "a symbolic expression has no truth value; use schedc.max/schedc.min instead of "
            "Python's max/min or comparisons",
        )

    def __str__(self) -> str:
        return render(self)


class Index(Expr):
    """A loop index handle. In iteration logic it stands for the nest dimension's value.

    Handles compare by identity: ``split`` returns a new handle and the split index keeps its
    own, as in Accera. ``name`` becomes the script's variable for the handle when one is found
    (``schedc.frontend.names``); ``default_name`` is the name schedc gave it, by position in the nest
    (i, j, k, ...) or from the split index (ii, jj, ...).
    """

    dtype = None

    def __init__(self, name: str, owner: object) -> None:
        self.name = name
        self.default_name = name
        self.owner = owner  # the Nest whose dimension (or split piece) this handle names

    def __repr__(self) -> str:
        return f"Index({self.name})"

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Number
    dtype: ScalarType | None = None


@dataclass(frozen=True, eq=False)
class Access(Expr):
    array: Storage
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> ScalarType:  # type: ignore[override]
        return self.array.element_type


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str  # + - * / max min
    lhs: Expr
    rhs: Expr
    dtype: ScalarType | None = None


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str  # "-"
    operand: Expr
    dtype: ScalarType | None = None


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    operand: Expr
    dtype: ScalarType | None = None


@dataclass(frozen=True, eq=False)
class Assign(Logic):
    """One statement: ``target = value`` (``+=`` arrives as ``target = target + value``)."""

    target: Access
    value: Expr

    def __str__(self) -> str:
        value = self.value
        if (
            isinstance(value, Binary)
            and value.op in "+-*"
            and same_access(value.lhs, self.target)
        ):
            return f"{render(self.target)} {value.op}= {render(value.rhs)}"
        return f"{render(self.target)} = {render(value)}"


def same_access(expr: Expr, access: Access) -> bool:
    """Whether ``expr`` reads exactly the element ``access`` names (same array, same subscripts)."""
    if not isinstance(expr, Access) or expr.array is not access.array:
        return False
    return all(affine_key(a) == affine_key(b) for a, b in zip(expr.indices, access.indices))


def affine_key(expr: Expr) -> tuple:
    terms, const = affine_terms(expr)
    return tuple(sorted(terms.items())), const


def as_expr(value: object) -> Expr:
    """Wrap Python numbers as weak constants; pass expressions through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool | int | float):
        return Const(value)
    if isinstance(value, Parameter):  # a number known at Package.add (the nest is deferred)
        return Const(value)
    raise NestError(repr(value), f"cannot use a {type(value).__name__} in iteration logic")


def binary(op: str, lhs: object, rhs: object) -> Binary:
    left, right = as_expr(lhs), as_expr(rhs)
    dtype = _result_type(left, right)
    if op in "+-*/":
        _no_bool_arithmetic(op, dtype, f"{render(left)} {op} {render(right)}")
    return Binary(op, left, right, dtype)


def _no_bool_arithmetic(op: str, dtype: ScalarType | None, where: str) -> None:
    """bool values take part in max/min and casts, not in arithmetic (C++ would compute it in
    int and the result's meaning as a bool is rarely what was meant)."""
    if dtype is ScalarType.bool:
        raise NestError(where, f"'{op}' on bool values: cast them to an integer type first, or use "
                               "schedc.max/schedc.min for or/and")


def maximum(a: object, b: object) -> Expr:
    """``max(a, b)`` of two expressions (schedc.max)."""
    return binary("max", a, b)


def minimum(a: object, b: object) -> Expr:
    """``min(a, b)`` of two expressions (schedc.min)."""
    return binary("min", a, b)


def cast(value: object, element_type: ScalarType) -> Expr:
    """Convert ``value`` to ``element_type`` (Accera's ``acc.cast``): integers wrap at the
    type's width; floating point to an integer rounds toward zero and saturates at the type's
    range, NaN to 0 (as the GPU's cvt.rzi)."""
    if not isinstance(element_type, ScalarType):
        raise NestError(f"cast({value}, {element_type!r})", "the type must be a ScalarType")
    return Cast(as_expr(value), element_type)


def _result_type(a: Expr, b: Expr) -> ScalarType | None:
    if a.dtype is None and b.dtype is None:
        return None
    if a.dtype is None:
        return _absorb_weak(a, b.dtype)
    if b.dtype is None:
        return _absorb_weak(b, a.dtype)
    return promote(a.dtype, b.dtype)


def _absorb_weak(weak: Expr, strong: ScalarType) -> ScalarType:
    """A weak operand takes the other side's type, except a float constant with an integer."""
    if isinstance(weak, Const) and isinstance(weak.value, float) and not strong.is_float:
        return ScalarType.float32
    return strong


def affine_terms(expr: Expr) -> tuple[dict[str, int], int]:
    """``expr`` as integer coefficients per index name and a constant, if it is affine."""
    if isinstance(expr, Index):
        return {expr.name: 1}, 0
    if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return {}, expr.value
    if isinstance(expr, Unary) and expr.op == "-":
        terms, const = affine_terms(expr.operand)
        return {k: -v for k, v in terms.items()}, -const
    if isinstance(expr, Binary) and expr.op in "+-":
        lt, lc = affine_terms(expr.lhs)
        rt, rc = affine_terms(expr.rhs)
        sign = 1 if expr.op == "+" else -1
        out = dict(lt)
        for name, coeff in rt.items():
            out[name] = out.get(name, 0) + sign * coeff
        return {k: v for k, v in out.items() if v}, lc + sign * rc
    if isinstance(expr, Binary) and expr.op == "*":
        lt, lc = affine_terms(expr.lhs)
        rt, rc = affine_terms(expr.rhs)
        if lt and rt:
            raise NestError(render(expr), "a subscript must be affine: index times index")
        scale, (terms, const) = (rc, (lt, lc)) if not rt else (lc, (rt, rc))
        return {k: v * scale for k, v in terms.items() if v * scale}, const * scale
    raise NestError(
        render(expr), "a subscript must be an affine expression of indices and integers"
    )


def holds_parameter(expr: Expr) -> bool:
    """Whether a number of ``expr`` is a parameter (known at Package.add)."""
    return any(isinstance(n, Const) and has_parameter(n.value) for n in walk(expr))


def render(expr: Expr, parent: int = 0) -> str:
    """Readable infix text with the fewest parentheses."""
    if isinstance(expr, Index):
        return expr.name
    if isinstance(expr, Const):
        return repr(expr.value) if not isinstance(expr.value, bool) else str(expr.value).lower()
    if isinstance(expr, Access):
        return f"{expr.array.display_name}[{', '.join(render(i) for i in expr.indices)}]"
    if isinstance(expr, Cast):
        return f"cast({render(expr.operand)}, {expr.dtype.value})"
    if isinstance(expr, Unary):
        return f"-{render(expr.operand, 6)}"
    if isinstance(expr, Binary):
        if expr.op in ("max", "min"):
            return f"{expr.op}({render(expr.lhs)}, {render(expr.rhs)})"
        prec = _PRECEDENCE[expr.op]
        right_prec = prec + 1 if expr.op in "-/" else prec
        text = f"{render(expr.lhs, prec)} {expr.op} {render(expr.rhs, right_prec)}"
        return f"({text})" if prec < parent else text
    raise TypeError(f"not an expression: {expr!r}")


def walk(expr: Expr):
    """Every node of ``expr``, parents before children."""
    yield expr
    if isinstance(expr, Access):
        for index in expr.indices:
            yield from walk(index)
    elif isinstance(expr, Binary):
        yield from walk(expr.lhs)
        yield from walk(expr.rhs)
    elif isinstance(expr, Unary | Cast):
        yield from walk(expr.operand)
