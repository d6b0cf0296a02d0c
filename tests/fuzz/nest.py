"""Random nests: arrays and statements — element-wise maps, reductions, matrix products and
recurrences — typed by schedc's rules and bounded so that kernel and reference agree
(``values.py``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from schedc.ir.types import ScalarType, converts_implicitly

from .program import (
    ArrayDecl,
    Bin,
    Cast,
    Cmp,
    Const,
    Expr,
    Fn,
    IndexValue,
    Neg,
    Ref,
    Statement,
    Subscript,
    fold,
    nest_index_names,
    walk,
)
from .values import (
    FEW,
    ROUNDED,
    Interval,
    Unsafe,
    bounds,
    initial_interval,
    rounds_coarsely,
    static_type,
    stored_exactly,
    type_range,
)

FUNCTIONS = {"exp": 3, "tanh": 3, "sigmoid": 2, "erf": 1, "sqrt": 2, "log": 2, "abs": 3, "sin": 1, "cos": 1,
             "fast_exp": 1, "fast_exp2": 1, "log2": 1, "log10": 1, "tan": 1, "sinh": 1, "cosh": 1, "floor": 1, "ceil": 1,
             "round": 1, "pow": 1, "select": 5, "fast_tanh": 1}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
DTYPES = {"float32": 30, "float16": 10, "bfloat16": 7, "float64": 8, "int8": 6, "int16": 5, "int32": 9,
          "int64": 5, "uint8": 6, "bool": 4, "float8_e4m3": 3, "float8_e5m2": 2}
INTEGERS = ("int8", "int16", "int32", "int64", "uint8")
WIDE = ("float32", "float64", "int32", "int64")  # accumulators of long sums
CONSTANTS = (0.5, 2.0, -1.5, 0.25, -0.125, 3.0, 1.0, -2.0, 2, 3, -1, -3, 1)
OPERATORS = {"+": 25, "-": 20, "*": 25, "/": 8, "max": 11, "min": 11}
MAX_ARRAYS = 6


@dataclass(frozen=True)
class Nest:
    """A generated nest: the arrays (with shapes) and statements; ``carried`` lists the nest
    indices that carry a dependence or a reduction (binding them races)."""

    arrays: tuple[ArrayDecl, ...]
    dims: tuple[int, ...]
    statements: tuple[Statement, ...]
    carried: frozenset[str]


def choose(rng: random.Random, weights: dict):
    return rng.choices(list(weights), weights=list(weights.values()))[0]


class NestBuilder:
    """Builds statements one at a time, creating arrays as the expressions need them."""

    def __init__(self, rng: random.Random, dims: tuple[int, ...]) -> None:
        self.rng = rng
        self.dims = dims
        self.names = nest_index_names(len(dims))
        self.extents = dict(zip(self.names, dims))
        self.arrays: dict[str, ArrayDecl] = {}  # shapes are filled in by finish()
        self.env: dict[str, Interval] = {}
        self.statements: list[Statement] = []

    # -- arrays -------------------------------------------------------------------------------

    def dtypes(self) -> dict[str, ScalarType]:
        return {name: ScalarType(a.dtype) for name, a in self.arrays.items()}

    def new_array(self, role: str, dtype: str, rank: int) -> str:
        name = next(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in self.arrays)
        layout = "LAST_MAJOR" if rank > 1 and self.rng.random() < 0.25 else "FIRST_MAJOR"
        self.arrays[name] = ArrayDecl(name, role, dtype, (0,) * rank, layout)
        self.env[name] = initial_interval(ScalarType(dtype))
        return name

    def written(self) -> dict[str, Ref]:
        """Each written array's first target."""
        out: dict[str, Ref] = {}
        for s in self.statements:
            out.setdefault(s.target.array, s.target)
        return out

    # -- subscripts ---------------------------------------------------------------------------

    def subscript(self, index: str) -> Subscript:
        """A read subscript: plain, shifted, reversed or constant."""
        n, r = self.extents[index], self.rng.random()
        if r < 0.64:
            return Subscript(index)
        if r < 0.78:
            return Subscript(index, 1, self.rng.randint(1, 3))
        if r < 0.93:
            return Subscript(index, -1, n - 1 + self.rng.choice((0, 0, 1, 2)))
        return Subscript(None, 1, self.rng.randint(0, 2))

    def read(self, name: str) -> Ref:
        """A read of ``name``: written arrays at their written element (mostly; elsewhere only
        float32/float64 ones, whose values may then feed back across iterations without
        overflowing as integers would). An OUTPUT array is read elsewhere only where an earlier
        iteration wrote the element: its written subscripts with some of their indices at their
        first value, 0 (the nest's order reaches that iteration first)."""
        target = self.written().get(name)
        wide = self.arrays[name].dtype in ("float32", "float64")
        output = self.arrays[name].role == "OUTPUT"
        if target is not None and (not wide or self.rng.random() < (0.6 if output else 0.85)):
            return target
        if target is not None and output:
            indices = sorted({x.index for x in target.subscripts if x.index is not None})
            first = set(self.rng.sample(indices, self.rng.randint(1, len(indices)))) if indices else set()
            return Ref(name, tuple(Subscript(None, 1, x.offset) if x.index in first else x for x in target.subscripts))
        rank = len(self.arrays[name].shape)
        picks = self._indices(rank)
        return Ref(name, tuple(self.subscript(i) for i in picks))

    def _indices(self, rank: int) -> list[str]:
        if rank <= len(self.names) and self.rng.random() < 0.85:
            return self.rng.sample(self.names, rank)
        return [self.rng.choice(self.names) for _ in range(rank)]

    def target(self, indices: list[str], exact: bool) -> tuple[Subscript, ...]:
        """Target subscripts over ``indices``; ``exact``: covering 0..n-1 (OUTPUT arrays)."""
        subs = []
        for index in indices:
            n, r = self.extents[index], self.rng.random()
            if r < 0.75:
                subs.append(Subscript(index))
            elif r < 0.9 or exact:
                subs.append(Subscript(index, -1, n - 1))
            else:
                subs.append(Subscript(index, 1, self.rng.randint(1, 2)))
        return tuple(subs)

    # -- expressions --------------------------------------------------------------------------

    def dtype_near(self, want: str) -> str:
        """A leaf array's type: mostly the statement's, else any that is likely to fit."""
        if self.rng.random() < 0.55:
            return want
        if want in INTEGERS or want == "bool":
            return self.rng.choice((*INTEGERS, "bool", "float16", "float32"))
        return choose(self.rng, DTYPES)

    def leaf(self, want: str) -> Expr:
        """A read, a constant or an index value."""
        r = self.rng.random()
        if r < 0.66:
            return self.array_leaf(want)
        if r < 0.9 and want != "bool":
            return Const(self.rng.choice(CONSTANTS))
        if r < 0.96 and want != "bool":
            return IndexValue(self.rng.choice(self.names))
        return self.array_leaf(want)

    def array_leaf(self, want: str, broadcast: float = 0.3) -> Ref:
        """A read of an existing array, or of a new input (of lower rank with probability
        ``broadcast``: the same element for several iterations)."""
        readable = [n for n, a in self.arrays.items() if a.role != "OUTPUT" or n in self.written()]
        if readable and (self.rng.random() < 0.5 or len(self.arrays) >= MAX_ARRAYS):
            return self.read(self.rng.choice(readable))
        lower = len(self.names) > 1 and self.rng.random() < broadcast
        rank = self.rng.randint(1, len(self.names) - 1) if lower else len(self.names)
        role = "INPUT_OUTPUT" if self.rng.random() < 0.1 else "INPUT"
        return self.read(self.new_array(role, self.dtype_near(want), rank))

    def divisor(self, want: str) -> Expr:
        """A value that is never zero: an input's element (inputs avoid 0) or a constant."""
        inputs = [n for n, a in self.arrays.items() if a.role == "INPUT" and a.dtype != "bool"]
        if self.rng.random() < 0.3:
            return Const(self.rng.choice((2, -4, 0.5, 3.0, -2.0)))
        if inputs and self.rng.random() < 0.5:
            return self.read(self.rng.choice(inputs))
        dtype = self.dtype_near(want)
        return self.read(self.new_array("INPUT", "float32" if dtype == "bool" else dtype, len(self.names)))

    def expr(self, depth: int, want: str) -> Expr:
        """A random expression tree of ``depth`` levels at most (minus, casts, + - * / max min)."""
        if depth == 0 or self.rng.random() < 0.2:
            return self.leaf(want)
        r = self.rng.random()
        if r < 0.1:
            inner = self.expr(depth - 1, want)
            return Neg(Neg(inner) if self.rng.random() < 0.35 else inner)
        if r < 0.17:
            return self.cast(self.expr(depth - 1, want), want)
        if r < 0.3:
            return self.function(depth, want)
        op = choose(self.rng, OPERATORS)
        lhs = self.expr(depth - 1, want)
        rhs = self.divisor(want) if op == "/" else self.expr(depth - 1, want)
        if isinstance(lhs, Const | IndexValue) and isinstance(rhs, Const | IndexValue):
            return self.array_leaf(want)  # Python would fold two constants before schedc sees them
        return Bin(op, lhs, rhs)

    def function(self, depth: int, want: str) -> Fn:
        """``acc.<function>(x)`` of a floating-point value (log and sqrt of ``abs(x) + 0.5``),
        ``acc.pow(x, 2 or 3)``, or ``acc.select(a < b, x, y)`` comparing reads or exact constants."""
        name = choose(self.rng, FUNCTIONS)
        if name == "select":
            other = self.array_leaf(want) if self.rng.random() < 0.6 else Const(self.rng.choice((0.0, 0.5, -0.25)))
            cond = Cmp(self.rng.choice(COMPARISONS), self.array_leaf(want), other)
            return Fn(name, (cond, self.expr(depth - 1, want), self.expr(depth - 1, want)))
        arg = self.expr(depth - 1, want)
        own = static_type(arg, self.dtypes())
        if own is None or not own.is_float and (name != "abs" or own is ScalarType.bool):
            arg = Cast(arg, want if ScalarType(want).is_float else "float32")
        if name in ("sqrt", "log", "log2", "log10"):
            arg = Bin("+", Fn("abs", (arg,)), Const(0.5))
        if name == "pow":
            return Fn(name, (arg, Const(self.rng.choice((2.0, 3.0)))))
        return Fn(name, (arg,))

    def cast(self, operand: Expr, want: str) -> Cast:
        """A cast that rounds nothing the comparison's tolerance does not cover: to float64, to
        float32 from narrower types, or to the statement's own type."""
        own = static_type(operand, self.dtypes())
        wider = own is None or own.value != "float64"
        return Cast(operand, self.rng.choice(("float64", "float32" if wider else "float64", want)))

    def conform(self, value: Expr, dtype: str, accumulate: bool = False) -> Expr:
        """``value`` as Python hands it to schedc (constants folded), cast to ``dtype`` where
        schedc would not convert it (or, for ``+=``, the target plus it) implicitly."""
        value = fold(value)
        dtypes = {**self.dtypes(), "<target>": ScalarType(dtype)}
        total = Bin("+", Ref("<target>", ()), value) if accumulate else value
        own = static_type(total, dtypes)
        if own is None or converts_implicitly(own, ScalarType(dtype)):
            return value
        return Cast(value, dtype)

    def narrow_for(self, dtype: str, outputs: int) -> str:
        """``dtype``, or float64 or an integer type where few elements are written (rounded
        arithmetic over them is not compared reliably: values.rounds_coarsely)."""
        if outputs < FEW and ScalarType(dtype) in ROUNDED and self.rng.random() < 0.8:
            return self.rng.choice(("float64", "float64", "int32", "int16"))
        return dtype

    def value(self, dtype: str, depth: int | None = None, scale: int = 1, start: Interval | None = None,
              outputs: int = 1) -> Expr:
        """A random value for an array of ``dtype`` that is safe to compare; a sum of
        ``scale`` such values (plus ``start``: ``+=``) must fit too. ``outputs``: elements written."""
        for _ in range(30):
            saved = dict(self.arrays), dict(self.env)
            value = self.conform(self.expr(depth or self.rng.choice((1, 2, 2, 3)), dtype), dtype, start is not None)
            reads = any(isinstance(n, Ref) for n in walk(value))
            if (reads or self.rng.random() < 0.1) and self.safe(value, dtype, scale, start, outputs):
                return value
            self.arrays, self.env = saved
        return self.read(self.new_array("INPUT", dtype, len(self.names)))

    def safe(self, value: Expr, dtype: str, scale: int = 1, start: Interval | None = None,
             outputs: int = 1) -> bool:
        """Whether ``value`` (summed ``scale`` times onto ``start``) compares reliably."""
        if outputs < FEW and rounds_coarsely(value, ScalarType(dtype), self.dtypes()):
            return False
        try:
            got = bounds(value, ScalarType(dtype), self.env, self.dtypes(), self.extents)
        except Unsafe:
            return False
        lo, hi = type_range(ScalarType(dtype))
        base = start or Interval(0, 0)
        return lo <= base.lo + scale * min(got.lo, 0) and base.hi + scale * max(got.hi, 0) <= hi

    def add(self, statement: Statement, interval: Interval) -> None:
        """Append ``statement``; its target now holds values in ``interval`` too."""
        name = statement.target.array
        target = ScalarType(self.arrays[name].dtype)
        kept = stored_exactly(statement.value, target, self.dtypes(), self.env) and not (
            statement.accumulate and target.is_float)
        old = self.env[name]
        fresh = self.arrays[name].role == "OUTPUT" and name not in self.written()
        self.env[name] = replace(interval if fresh else old.union(interval), min_abs=0.0)
        self.env[name] = replace(self.env[name], exact=self.env[name].exact and kept)
        self.statements.append(statement)

    def interval_of(self, value: Expr, dtype: str) -> Interval:
        return bounds(value, ScalarType(dtype), self.env, self.dtypes(), self.extents)
