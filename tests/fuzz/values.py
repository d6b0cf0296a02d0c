"""Types and value ranges of generated expressions, so that every generated statement means
the same thing on the emulator, on the GPU and in the float64 reference.

Types follow schedc's rules (``schedc.frontend.expr``: weak constants and indices take the other
operand's type, a float constant with an integer makes float32; ``schedc.frontend.convert``: weak
parts take the type of the operation or array around them). ``bounds`` raises ``Unsafe`` where
the kernel's arithmetic and the reference's could differ for reasons that are not bugs:
integer overflow (the reference computes in int64), unsigned results below zero, division by a
value that may be zero, arithmetic on bool, float16 overflow, and a float value truncated to an
integer when it was rounded on the way (float32 and float64 may truncate differently).

>>> from tests.fuzz.program import Bin, Const, Ref, Subscript
>>> a = Ref("A", (Subscript("i"),))
>>> static_type(Bin("*", a, Const(0.5)), {"A": ScalarType.int8})
<ScalarType.float32: 'float32'>
>>> bounds(Bin("*", a, Const(40)), None, {"A": Interval(-4, 4, 1)}, {"A": ScalarType.int8}, {"i": 8})
Traceback (most recent call last):
...
tests.fuzz.values.Unsafe: int8 result in [-160, 160]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from schedc.ir.types import ScalarType, promote

from .program import Bin, Cast, Cmp, Const, Expr, Fn, IndexValue, Neg, Ref, expr_children

FLOAT_LIMITS = {"float8_e4m3": 400.0, "float8_e5m2": 5.0e4, "float16": 6.0e4, "bfloat16": 1e30, "float32": 1e30,
                "float64": math.inf}


class Unsafe(Exception):
    """The expression's value may differ between the kernel and the reference (not a bug)."""


@dataclass(frozen=True)
class Interval:
    """Values in [lo, hi]; every value at least ``min_abs`` away from zero."""

    lo: float
    hi: float
    min_abs: float = 0.0
    exact: bool = True  # the kernel stores the values the reference holds (float64, unrounded)

    def union(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi), min(self.min_abs, other.min_abs),
                        self.exact and other.exact)


def initial_interval(dtype: ScalarType) -> Interval:
    """The values schedc.data.random_array draws for an input of ``dtype``."""
    if dtype is ScalarType.bool:
        return Interval(0, 1)
    if dtype.is_integer:
        return Interval(-4, 4, 1) if dtype.is_signed else Interval(1, 4, 1)
    return Interval(-1, 1, 0.0625)


def type_range(dtype: ScalarType) -> tuple[float, float]:
    """The values ``dtype`` holds (float16 kept below its overflow)."""
    if dtype is ScalarType.bool:
        return 0, 1
    if dtype.is_float:
        limit = FLOAT_LIMITS[dtype.value]
        return -limit, limit
    bits = 8 * dtype.size
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if dtype.is_signed else (0, 2 ** bits - 1)


def static_type(e: Expr, dtypes: dict[str, ScalarType]) -> ScalarType | None:
    """The expression's type as schedc's front end computes it (None: weakly typed)."""
    if isinstance(e, Ref):
        return dtypes[e.array]
    if isinstance(e, Const | IndexValue):
        return None
    if isinstance(e, Neg):
        return static_type(e.operand, dtypes)
    if isinstance(e, Cast):
        return ScalarType(e.dtype)
    if isinstance(e, Cmp):
        return ScalarType.bool
    if isinstance(e, Fn):
        values = e.args[1:] if e.name == "select" else e.args
        return static_type(values[0], dtypes) if len(values) == 1 else _result_type(*values, dtypes)
    return _result_type(e.lhs, e.rhs, dtypes)


def _result_type(a: Expr, b: Expr, dtypes) -> ScalarType | None:
    ta, tb = static_type(a, dtypes), static_type(b, dtypes)
    if ta is None and tb is None:
        return None
    if ta is None:
        return _absorb_weak(a, tb)
    if tb is None:
        return _absorb_weak(b, ta)
    return promote(ta, tb)


def _absorb_weak(weak: Expr, strong: ScalarType) -> ScalarType:
    if isinstance(weak, Const) and isinstance(weak.value, float) and not strong.is_float:
        return ScalarType.float32
    return strong


def effective_type(e: Expr, context: ScalarType | None, dtypes) -> ScalarType:
    """The type the kernel computes ``e`` in (schedc.frontend.convert.value_expr)."""
    own = static_type(e, dtypes)
    dtype = own if own is not None else (context or ScalarType.int64)
    return dtype.arithmetic if not isinstance(e, Ref | Cast) else dtype  # 8-bit float operations: float32


def bounds(e: Expr, context: ScalarType | None, env: dict[str, Interval], dtypes, extents) -> Interval:
    """The values of ``e`` computed in ``context``; Unsafe where kernel and reference may differ."""
    dtype = effective_type(e, context, dtypes)
    result = _bounds(e, dtype, env, dtypes, extents)
    _check_range(result, dtype)
    return result


def _bounds(e: Expr, dtype: ScalarType, env, dtypes, extents) -> Interval:
    if isinstance(e, Ref):
        return env[e.array]
    if isinstance(e, Const):
        value = e.value if dtype.is_float else int(e.value)
        return Interval(value, value, abs(value))
    if isinstance(e, IndexValue):
        return Interval(0, extents[e.index] - 1)
    if isinstance(e, Cast):
        return _cast_bounds(e, env, dtypes, extents)
    if isinstance(e, Fn):
        return _function_bounds(e, dtype, env, dtypes, extents)
    if isinstance(e, Cmp):
        raise Unsafe("a condition used as a value")
    if dtype is ScalarType.bool and not (isinstance(e, Bin) and e.op in ("max", "min")):
        raise Unsafe("arithmetic on bool")
    if isinstance(e, Neg):
        inner = bounds(e.operand, dtype, env, dtypes, extents)
        return Interval(-inner.hi, -inner.lo, inner.min_abs)
    lhs = bounds(e.lhs, dtype, env, dtypes, extents)
    rhs = bounds(e.rhs, dtype, env, dtypes, extents)
    return _binary_bounds(e.op, lhs, rhs, dtype)


# Math functions: the values each takes on an interval (monotone ones by their ends), and the
# arguments where the kernel and the float64 reference may disagree for reasons that are not
# bugs: outside the function's domain, near overflow, or rounding a value that was rounded.
_INCREASING = {"exp": math.exp, "fast_exp": math.exp, "fast_exp2": lambda x: 2.0 ** x, "sinh": math.sinh, "tanh": math.tanh, "fast_tanh": math.tanh,
               "erf": math.erf,
               "sqrt": math.sqrt, "log": math.log, "log2": math.log2, "log10": math.log10,
               "sigmoid": lambda x: 0.5 * (1 + math.tanh(x / 2)), "tan": math.tan}
_POSITIVE = {"exp", "fast_exp", "fast_exp2", "sigmoid"}  # never zero: may divide


def _function_bounds(e: Fn, dtype: ScalarType, env, dtypes, extents) -> Interval:
    if e.name == "select":
        cond, a, b = e.args
        if not all(exact(x, dtypes, env) for x in expr_children(cond)):
            raise Unsafe("a comparison of rounded values (the reference may take the other branch)")
        return bounds(a, dtype, env, dtypes, extents).union(bounds(b, dtype, env, dtypes, extents))
    args = [bounds(a, dtype, env, dtypes, extents) for a in e.args]
    x = args[0]
    name = e.name
    if name in ("sqrt", "log", "log2", "log10") and x.lo < (0 if name == "sqrt" else 0.25):
        raise Unsafe(f"{name} of values down to {_show(x.lo)}")
    if name in ("exp", "fast_exp", "fast_exp2", "sinh", "cosh") and max(-x.lo, x.hi) > 10:
        raise Unsafe(f"{name} of values up to {_show(max(-x.lo, x.hi))}")
    if name == "tan" and max(-x.lo, x.hi) > 1.5:
        raise Unsafe("tan near its poles")
    if name in ("floor", "ceil", "round"):
        if not exact(e.args[0], dtypes, env):
            raise Unsafe(f"{name} of a rounded value")
        return Interval(math.floor(x.lo), math.ceil(x.hi))
    if name in _INCREASING:
        f = _INCREASING[name]
        low, high = f(x.lo), f(x.hi)
        return Interval(low, high, min(abs(low), abs(high)) if name in _POSITIVE else 0.0, exact=False)
    if name in ("sin", "cos"):
        return Interval(-1, 1, exact=False)
    if name == "cosh":
        return Interval(1, math.cosh(max(-x.lo, x.hi)), 1, exact=False)
    if name == "abs":
        top = max(-x.lo, x.hi)
        return Interval(0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi)), top, x.min_abs, x.exact)
    if name == "pow":  # a small integer power (the generator's): x^2 or x^3
        power = int(e.args[1].value)
        ends = [x.lo ** power, x.hi ** power] + ([0.0] if x.lo <= 0 <= x.hi else [])
        return Interval(min(ends), max(ends), x.min_abs ** power, exact=False)
    raise Unsafe(f"no bounds for {name}")


def _binary_bounds(op: str, a: Interval, b: Interval, dtype: ScalarType) -> Interval:
    if op == "+":
        return Interval(a.lo + b.lo, a.hi + b.hi)
    if op == "-":
        return Interval(a.lo - b.hi, a.hi - b.lo)
    if op == "*":
        products = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Interval(min(products), max(products), a.min_abs * b.min_abs)
    if op == "max":
        return Interval(max(a.lo, b.lo), max(a.hi, b.hi))
    if op == "min":
        return Interval(min(a.lo, b.lo), min(a.hi, b.hi))
    if b.min_abs <= 0:
        raise Unsafe("a divisor that may be zero")
    largest = max(abs(a.lo), abs(a.hi)) / (1 if dtype.is_integer else b.min_abs)
    return Interval(-largest if a.lo < 0 or b.lo < 0 else 0, largest)


def _cast_bounds(e: Cast, env, dtypes, extents) -> Interval:
    target = ScalarType(e.dtype)
    inner_type = effective_type(e.operand, target, dtypes)
    inner = bounds(e.operand, inner_type, env, dtypes, extents)
    if target.is_float:
        return inner
    if inner_type.is_float and not (exact(e.operand, dtypes, env) and max(-inner.lo, inner.hi) <= 2048):
        raise Unsafe(f"a rounded {inner_type.value} value truncated to {target.value}")
    if target is ScalarType.bool:
        return Interval(0, 1)
    result = Interval(math.trunc(inner.lo), math.trunc(inner.hi))
    _check_range(result, target)
    return result


def _check_range(value: Interval, dtype: ScalarType) -> None:
    lo, hi = type_range(dtype)
    if value.lo < lo or value.hi > hi:
        raise Unsafe(f"{dtype.value} result in [{_show(value.lo)}, {_show(value.hi)}]")


def _show(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def exact(e: Expr, dtypes, env: dict[str, Interval]) -> bool:
    """Whether floating-point evaluation of ``e`` gives the value the float64 reference holds:
    integers up to 2048, values of arrays not written with rounded values, products with powers
    of two, max/min of exact values. (The reference keeps what a statement stores in float64;
    a truncation to an integer of a rounded stored value may differ by one.)"""
    if isinstance(e, Ref):
        return env[e.array].exact
    if isinstance(e, IndexValue):
        return True
    if isinstance(e, Const):
        return float(e.value * 8).is_integer() and abs(e.value) <= 2048
    if isinstance(e, Neg):
        return exact(e.operand, dtypes, env)
    if isinstance(e, Cast):
        inner = effective_type(e.operand, ScalarType(e.dtype), dtypes)
        return exact(e.operand, dtypes, env) and _widens(inner, ScalarType(e.dtype))
    if isinstance(e, Fn):
        values = e.args[1:] if e.name == "select" else e.args
        return e.name in ("select", "abs", "floor", "ceil", "round") and all(exact(x, dtypes, env) for x in values)
    if isinstance(e, Cmp):
        return False
    if e.op in ("max", "min"):
        return exact(e.lhs, dtypes, env) and exact(e.rhs, dtypes, env)
    if e.op in ("*", "/") and _power_of_two(e.rhs):
        return exact(e.lhs, dtypes, env)
    if e.op == "*" and _power_of_two(e.lhs):
        return exact(e.rhs, dtypes, env)
    return e.op != "/" and _integral(e.lhs, dtypes) and _integral(e.rhs, dtypes)


def stored_exactly(value: Expr, target: ScalarType, dtypes, env) -> bool:
    """Whether storing ``value`` into an array of ``target`` keeps the reference's value (an
    8-bit float rounds nearly every value: never taken as exact)."""
    if target.arithmetic is not target:
        return False
    return not target.is_float or exact(value, dtypes, env)


def _integral(e: Expr, dtypes) -> bool:
    """An integer-valued expression built from integers (exact in any float type up to 2048)."""
    if isinstance(e, Ref):
        return not dtypes[e.array].is_float
    if isinstance(e, Const):
        return isinstance(e.value, int)
    if isinstance(e, IndexValue):
        return True
    if isinstance(e, Neg):
        return _integral(e.operand, dtypes)
    if isinstance(e, Cast):
        return not ScalarType(e.dtype).is_float
    if isinstance(e, Fn | Cmp):
        return False
    return e.op in ("+", "-", "*", "max", "min") and _integral(e.lhs, dtypes) and _integral(e.rhs, dtypes)


def _power_of_two(e: Expr) -> bool:
    if not isinstance(e, Const) or e.value == 0:
        return False
    return math.log2(abs(e.value)).is_integer() and abs(e.value) <= 64


def _widens(source: ScalarType, target: ScalarType) -> bool:
    """Whether converting keeps every value of ``source`` (small integers anywhere)."""
    if not source.is_float:
        return True
    if not target.is_float:
        return False
    ranks = {"float8_e4m3": 0, "float8_e5m2": 0, "float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    return source == target or ranks[source.value] < ranks[target.value]


def arithmetic_types(e: Expr, context: ScalarType | None, dtypes) -> set[ScalarType]:
    """The types the kernel computes ``e``'s operations in."""
    dtype = effective_type(e, context, dtypes)
    if isinstance(e, Bin):
        return {dtype} | arithmetic_types(e.lhs, dtype, dtypes) | arithmetic_types(e.rhs, dtype, dtypes)
    if isinstance(e, Neg):
        return {dtype} | arithmetic_types(e.operand, dtype, dtypes)
    if isinstance(e, Cast):
        return arithmetic_types(e.operand, ScalarType(e.dtype), dtypes)
    if isinstance(e, Fn):
        compared = [x for a in e.args if isinstance(a, Cmp) for x in (a.lhs, a.rhs)]
        types = {dtype} if e.name != "select" else set()
        for a in e.args:
            if not isinstance(a, Cmp):
                types |= arithmetic_types(a, dtype, dtypes)
        for x in compared:
            types |= arithmetic_types(x, None, dtypes)
        return types
    return set()


SUM_LIMITS = {"float16": 32, "bfloat16": 32, "float32": 128}  # terms of a sum kept within tolerance


def sum_rounds_coarsely(dtype: ScalarType, terms: int) -> bool:
    """Whether a sum of ``terms`` values accumulated in ``dtype`` may round by more than the
    comparison allows (a float32 sum of 800 positive terms is off by about 2e-5 > 1e-5)."""
    return terms > SUM_LIMITS.get(dtype.value, terms)


ROUNDED = {ScalarType.float16, ScalarType.bfloat16, ScalarType.float32}
FEW = 16  # outputs below which rounded arithmetic is not compared (see rounds_coarsely)


def rounds_coarsely(e: Expr, context: ScalarType, dtypes) -> bool:
    """Whether ``e`` computes in a float type narrower than float64. The comparison is
    relative to the norm of the reference: over a few elements, a result that cancels (A * B
    - C with A * B close to C) makes that norm tiny against the rounding of the operands, and
    a correct kernel fails (seen: 1.003e-5 > 1e-5 for one float32 sum of 10 values)."""
    return bool(arithmetic_types(e, context, dtypes) & ROUNDED)


def program_is_safe(program) -> bool:
    """Whether every statement of ``program`` passes ``bounds`` (and the few-elements rule),
    with inputs as drawn and written arrays widened by what is stored: a shrunk program must
    not fail for a reason that is not a bug (overflow, a rounded truncation)."""
    dtypes = {a.name: ScalarType(a.dtype) for a in program.arrays}
    extents = dict(zip(program.nest_indices, program.dims))
    env = {a.name: initial_interval(dtypes[a.name]) for a in program.arrays}
    fresh = {a.name for a in program.arrays if a.role == "OUTPUT"}  # holds nothing before its first write
    for s in program.statements:
        stored = _stored(s, env, dtypes, extents, program.tensorize is not None)
        if stored is None:
            return False
        name = s.target.array
        env[name] = stored if name in fresh else env[name].union(stored)
        fresh.discard(name)
    return True


def _stored(s, env, dtypes, extents, tensorized: bool) -> Interval | None:
    """The values statement ``s`` stores, or None when they may not compare reliably
    (tensorized sums are generated within their tolerance by construction)."""
    from .program import refs

    target = dtypes[s.target.array]
    written = {x.index for x in s.target.subscripts if x.index}
    try:
        got = bounds(s.value, target, env, dtypes, extents)
    except Unsafe:
        return None
    if math.prod(extents[n] for n in written) < FEW and (
            rounds_coarsely(s.value, target, dtypes) or (s.accumulate and target in ROUNDED)):
        return None
    terms = math.prod(n for name, n in extents.items() if name not in written)
    if s.accumulate and not tensorized and sum_rounds_coarsely(target, terms):
        return None
    old = env[s.target.array]
    stored = Interval(old.lo + terms * min(got.lo, 0), old.hi + terms * max(got.hi, 0)) if s.accumulate else got
    if any(r.array == s.target.array and r != s.target for r in refs(s)):  # feeds back across iterations
        if target.value not in ("float32", "float64"):
            return None
        stored = Interval(-1e30, 1e30, exact=False)
    lo, hi = type_range(target)
    if not target.is_float and (stored.lo < lo or stored.hi > hi):
        return None
    rounded = s.accumulate and target.is_float
    return replace(stored, exact=stored.exact and stored_exactly(s.value, target, dtypes, env) and not rounded)
