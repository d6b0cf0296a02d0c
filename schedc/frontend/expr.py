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
from ..ir.functions import SIGNATURES, Domain, Function
from ..ir.types import ScalarType, promote
from .parameters import Logic, Parameter, has_parameter

Number = int | float | bool

_PRECEDENCE = {"max": 9, "min": 9, "*": 5, "/": 5, "%": 5, "+": 4, "-": 4, "<": 3, "<=": 3, ">": 3, ">=": 3}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
_LOGIC_NAMES = {"&&": "logical_and", "||": "logical_or", "==": "equal", "!=": "not_equal"}


class Storage(Protocol):
    """What an access needs of its array (an ``array.Array``)."""

    @property
    def element_type(self) -> ScalarType: ...

    @property
    def display_name(self) -> str: ...


def _refused(op: str) -> tuple:
    """``op``'s method and its reflected one, both refusing it (``_not_built``)."""
    def forward(self, other: object):
        _not_built(op, self, other)

    def reflected(self, other: object):
        _not_built(op, other, self)
    return forward, reflected


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

    def __lt__(self, other: object) -> Expr:
        return compare("<", self, other)

    def __le__(self, other: object) -> Expr:
        return compare("<=", self, other)

    def __gt__(self, other: object) -> Expr:
        return compare(">", self, other)

    def __ge__(self, other: object) -> Expr:
        return compare(">=", self, other)

    def __abs__(self) -> Expr:
        return call(Function.ABS, self)

    def __pow__(self, other: object) -> Expr:
        return call(Function.POW, self, other)

    def __rpow__(self, other: object) -> Expr:
        return call(Function.POW, other, self)

    def __and__(self, other: object) -> Expr:
        return logical("&&", self, other, "&")

    def __rand__(self, other: object) -> Expr:
        return logical("&&", other, self, "&")

    def __or__(self, other: object) -> Expr:
        return logical("||", self, other, "|")

    def __ror__(self, other: object) -> Expr:
        return logical("||", other, self, "|")

    # operators Python has and the iteration logic does not: refused, saying what to write
    __floordiv__, __rfloordiv__ = _refused("//")
    __mod__, __rmod__ = _refused("%")
    __lshift__, __rlshift__ = _refused("<<")
    __rshift__, __rrshift__ = _refused(">>")
    __xor__, __rxor__ = _refused("^")

    def __invert__(self) -> Expr:
        if self.dtype is not ScalarType.bool:
            raise NestError(f"~{render(self)}", "'~' of a value that is not a bool: bitwise operators are not "
                                                 "built in schedc (acc.logical_not negates a condition)")
        return call(Function.LOGICAL_NOT, self)

    def __bool__(self) -> bool:
        raise NestError(
            str(self),
            "a symbolic expression has no truth value: Python's if, and, or, not, max and min need one. "
            "Use acc.select(condition, a, b) for if/else, acc.logical_and/logical_or/logical_not, "
            "acc.max/acc.min, and acc.equal/acc.not_equal for == and !=",
        )

    def __float__(self) -> float:
        raise NestError(str(self), _NO_NUMBER)

    def __int__(self) -> int:
        raise NestError(str(self), _NO_NUMBER)

    def __complex__(self) -> complex:
        raise NestError(str(self), _NO_NUMBER)

    def __round__(self, ndigits=None):
        raise NestError(f"round({self})", "Python's round() needs a number: use acc.round (halves away from zero)")

    def __trunc__(self):
        raise NestError(f"trunc({self})", _NO_NUMBER)

    def __floor__(self):
        raise NestError(f"floor({self})", "math.floor needs a number: use acc.floor")

    def __ceil__(self):
        raise NestError(f"ceil({self})", "math.ceil needs a number: use acc.ceil")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy's functions on iteration-logic values: refused, naming acc's function."""
        name = _NUMPY_NAMES.get(ufunc.__name__, ufunc.__name__)
        shown = f"np.{ufunc.__name__}({', '.join(render(x) if isinstance(x, Expr) else repr(x) for x in inputs)})"
        known = name in _ACC_FUNCTIONS
        raise NestError(shown, "numpy's functions compute on numbers, not on the iteration logic's values: "
                               + (f"use acc.{name}" if known else "use acc's functions (acc.exp, acc.sqrt, ...)"))

    def __str__(self) -> str:
        return render(self)


_NO_NUMBER = ("a symbolic value of the iteration logic has no number when the script runs: Python's float(), "
              "int() and the math module need one. Use acc.cast(x, type) to convert, and acc's functions "
              "(acc.exp, acc.sqrt, acc.floor, ...) for math")
_NUMPY_NAMES = {"maximum": "max", "minimum": "min", "absolute": "abs", "power": "pow", "rint": "round",
                "logical_and": "logical_and", "logical_or": "logical_or", "logical_not": "logical_not",
                "equal": "equal", "not_equal": "not_equal"}
_ACC_FUNCTIONS = frozenset({f.value for f in Function} | {"max", "min", "logical_and", "logical_or", "equal",
                                                        "not_equal"})


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
    op: str  # + - * / max min; comparisons and && || (of type bool)
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
class Call(Expr):
    """An element-wise function (``schedc.ir.functions``): acc.exp(x), acc.select(c, a, b), ..."""

    function: Function
    args: tuple[Expr, ...]
    dtype: ScalarType | None = None  # None: of weak arguments only, typed by where it is used


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
    dtype = result_type(left, right)
    if op in "+-*/":
        _no_bool_arithmetic(op, dtype, f"{render(left)} {op} {render(right)}")
    return Binary(op, left, right, dtype)


_NOT_BUILT = {
    "//": "'/' of integers divides as C does (toward zero); of floats, acc.floor(a / b) rounds down",
    "%": "C's remainder of integers is a - b * (a / b) ('/' of integers divides toward zero)",
    "<<": "bitwise operators are not built in schedc (multiply by a power of two)",
    ">>": "bitwise operators are not built in schedc (divide by a power of two)",
    "^": "bitwise operators are not built in schedc (acc.not_equal of two conditions is their exclusive or)",
}


def _not_built(op: str, lhs: object, rhs: object) -> None:
    """Refuse an operator Python has but schedc's iteration logic does not, saying what to write."""
    raise NestError(f"{_shown(lhs)} {op} {_shown(rhs)}", f"'{op}' is not built in schedc's iteration logic: "
                                                          f"{_NOT_BUILT[op]}")


def _no_bool_arithmetic(op: str, dtype: ScalarType | None, where: str) -> None:
    """bool values take part in max/min and casts, not in arithmetic (C++ would compute it in
    int and the result's meaning as a bool is rarely what was meant)."""
    if dtype is ScalarType.bool:
        raise NestError(where, f"'{op}' on bool values: cast them to an integer type first, or use "
                               "acc.logical_and/acc.logical_or/acc.select")


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


def compare(op: str, lhs: object, rhs: object) -> Binary:
    """``lhs op rhs`` (< <= > >= == !=), a bool; the operands compared in their common type
    (bools as 0 and 1)."""
    left, right = as_expr(lhs), as_expr(rhs)
    return Binary(op, left, right, ScalarType.bool)


def logical(op: str, lhs: object, rhs: object, spelled: str = "") -> Binary:
    """``lhs && rhs`` or ``lhs || rhs`` of conditions (numbers are true where not zero)."""
    left, right = as_expr(lhs), as_expr(rhs)
    if spelled and ScalarType.bool not in (left.dtype, right.dtype):
        raise NestError(f"{render(left)} {spelled} {render(right)}",
                        f"'{spelled}' of values that are not bools: bitwise operators are not built in schedc "
                        f"(acc.{_LOGIC_NAMES[op]} combines conditions)")
    return Binary(op, _condition(left, _LOGIC_NAMES[op]), _condition(right, _LOGIC_NAMES[op]), ScalarType.bool)


def _condition(value: Expr, where: str) -> Expr:
    """A condition: a bool expression, or a number (true where not zero)."""
    if value.dtype is ScalarType.bool:
        return value
    if isinstance(value, Const) and isinstance(value.value, bool):
        return Const(value.value, ScalarType.bool)
    return Binary("!=", value, Const(0), ScalarType.bool)


def call(function: Function, *args: object) -> Expr:
    """``function(*args)`` with its signature's checks (``schedc.ir.functions``)."""
    where = f"acc.{function.value}({', '.join(_shown(a) for a in args)})"
    if function is Function.SELECT:
        if isinstance(args[0], bool):
            raise NestError(where, "the condition is a Python bool, fixed when the script runs: == and != "
                                   "compare objects in Python; use acc.equal/acc.not_equal")
        cond, a, b = (as_expr(x) for x in args)
        return Call(function, (_condition(cond, where), a, b), result_type(a, b))
    operands = tuple(as_expr(x) for x in args)
    if function is Function.LOGICAL_NOT:
        return Call(function, (_condition(operands[0], where),), ScalarType.bool)
    dtype = operands[0].dtype if len(operands) == 1 else result_type(*operands)
    signature = SIGNATURES[function]
    if dtype is not None and not signature.accepts(dtype):
        raise NestError(where, domain_error(function, dtype))
    return Call(function, operands, dtype)


def domain_error(function: Function, dtype: ScalarType) -> str:
    """Why ``function`` refuses values of ``dtype``, and what to write."""
    kind = SIGNATURES[function].domain.value
    fix = "cast them first, e.g. acc.cast(x, acc.ScalarType.float32)" if SIGNATURES[function].domain is Domain.FLOAT \
        else "compare them first"
    return f"acc.{function.value} takes {kind} values, not {dtype.value}: {fix}"


def _shown(value: object) -> str:
    return render(value) if isinstance(value, Expr) else repr(value)


def result_type(a: Expr, b: Expr) -> ScalarType | None:
    """The type two operands meet in (None: both weak): a weak one takes the other's type,
    except a float constant with an integer, which makes float32."""
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
    if isinstance(expr, Call):
        return f"{expr.function.value}({', '.join(render(a) for a in expr.args)})"
    if isinstance(expr, Binary):
        if expr.op in ("max", "min"):
            return f"{expr.op}({render(expr.lhs)}, {render(expr.rhs)})"
        if expr.op in _LOGIC_NAMES:
            return f"{_LOGIC_NAMES[expr.op]}({render(expr.lhs)}, {render(expr.rhs)})"
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
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from walk(arg)
