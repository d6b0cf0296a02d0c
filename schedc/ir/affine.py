"""Affine integer expressions as plain values: ``sum(coeff * var) + const``.

>>> a = Affine.of(Binary("*", Binary("+", Var("i"), Var("ii")), Const(2048)))
>>> a
Affine(terms=(('i', 2048), ('ii', 2048)), const=0)
>>> a.evaluate({"i": 1, "ii": 2})
6144
"""

from __future__ import annotations

from dataclasses import dataclass

from .kernel import Binary, Const, Expr, Unary, Var, register


@register
@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[str, int], ...]  # sorted by name, no zero coefficients
    const: int = 0

    def __str__(self) -> str:
        """Readable text in loop names: ``i + 16*kk - 1``.

        >>> str(Affine.make({"i": 1, "kk": 16, "j": -1}, -1))
        'i + -j + 16*kk + -1'
        """
        terms = [name if c == 1 else f"-{name}" if c == -1 else f"{c}*{name}" for name, c in self.terms]
        if self.const or not terms:
            terms.append(str(self.const))
        return " + ".join(terms)

    @staticmethod
    def make(terms: dict[str, int], const: int = 0) -> Affine:
        return Affine(tuple(sorted((k, v) for k, v in terms.items() if v)), int(const))

    @staticmethod
    def of(expr: Expr) -> Affine:
        """The affine form of an index expression; TypeError if it is not affine."""
        if isinstance(expr, Var):
            return Affine(((expr.name, 1),))
        if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return Affine((), expr.value)
        if isinstance(expr, Unary) and expr.op == "-":
            return Affine.of(expr.operand).scale(-1)
        if isinstance(expr, Binary) and expr.op in "+-":
            rhs = Affine.of(expr.rhs)
            return Affine.of(expr.lhs).plus(rhs if expr.op == "+" else rhs.scale(-1))
        if isinstance(expr, Binary) and expr.op == "*":
            lhs, rhs = Affine.of(expr.lhs), Affine.of(expr.rhs)
            if lhs.terms and rhs.terms:
                raise TypeError("product of two variables")
            return lhs.scale(rhs.const) if not rhs.terms else rhs.scale(lhs.const)
        raise TypeError(f"not affine: {expr!r}")

    @property
    def coeffs(self) -> dict[str, int]:
        return dict(self.terms)

    def coeff(self, name: str) -> int:
        return self.coeffs.get(name, 0)

    def plus(self, other: Affine) -> Affine:
        out = self.coeffs
        for name, c in other.terms:
            out[name] = out.get(name, 0) + c
        return Affine.make(out, self.const + other.const)

    def scale(self, factor: int) -> Affine:
        return Affine.make({k: v * factor for k, v in self.terms}, self.const * factor)

    def substitute(self, values: dict[str, Affine]) -> Affine:
        out = Affine((), self.const)
        for name, c in self.terms:
            out = out.plus(values[name].scale(c) if name in values else Affine(((name, c),)))
        return out

    def without(self, names: set[str]) -> Affine:
        return Affine.make({k: v for k, v in self.terms if k not in names}, self.const)

    def evaluate(self, values: dict[str, int]) -> int:
        return self.const + sum(c * values[k] for k, c in self.terms)

    def variables(self) -> set[str]:
        return {k for k, _ in self.terms}


def mixed_radix(subscripts, names, extents: dict) -> bool:
    """Whether the subscripts take distinct values at distinct points of ``names`` (each in
    ``range(extents[name])``) as the digits of a mixed radix: each name in one subscript alone, and
    in each subscript every coefficient larger than what the smaller ones add up to over their
    extents (``(z * 2 + g) * 128 + i`` over g < 2, i < 128: a head's rows in turn), every name used.
    A sufficient test, beside the rank of the coefficients, which ignores the extents.

    >>> mixed_radix([Affine((("b", 128), ("i", 1)))], ["b", "i"], {"b": 4, "i": 128})
    True
    >>> mixed_radix([Affine((("b", 100), ("i", 1)))], ["b", "i"], {"b": 4, "i": 128})
    False
    >>> mixed_radix([Affine((("g", 128), ("h", 128), ("i", 1)))], ["g", "h", "i"], {"g": 2, "h": 1, "i": 128})
    True
    """
    single = {v for v in names if extents.get(v) == 1}  # a name of one value is a constant anywhere
    seen: set[str] = set(single)
    for sub in subscripts:
        used = sorted((abs(c), v) for v, c in sub.terms if v in names and v not in single)
        if seen & {v for _, v in used} or any(not isinstance(extents.get(v), int) for _, v in used):
            return False
        seen |= {v for _, v in used}
        reach = 0
        for c, v in used:
            if c <= reach:
                return False
            reach += c * (extents[v] - 1)
    return seen >= set(names)


def affine_expr(a: Affine, order: list[str]) -> Expr:
    """An Affine as a readable expression, terms in loop order."""
    rank = {name: n for n, name in enumerate(order)}
    expr: Expr | None = None
    for name, c in sorted(a.terms, key=lambda t: rank.get(t[0], len(rank))):
        term: Expr = Var(name) if abs(c) == 1 else Binary("*", Var(name), Const(abs(c)))
        if expr is None:
            expr = term if c > 0 else Binary("-", Const(0), term)
        else:
            expr = Binary("+" if c > 0 else "-", expr, term)
    if expr is None:
        return Const(a.const)
    if a.const:
        expr = Binary("+" if a.const > 0 else "-", expr, Const(abs(a.const)))
    return expr


def extent_expr(n: int | Affine) -> Expr:
    """An extent as an expression: a number, or an affine expression of run-time sizes."""
    return affine_expr(n, []) if isinstance(n, Affine) else Const(n)
