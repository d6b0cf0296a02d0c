"""Random epilogues fused after a tensor-core product (``acc.fuse((product, after), partial=2)``):
element-wise statements over C's element that add a bias by column or a scale by row, a residual
``D[i, j]``, and apply math, in C's type; the fusing index "f" placed before the first loop of k.
Integer products get integer forms (no math: schedc refuses math on integers)."""

from __future__ import annotations

import random
from dataclasses import replace

from .nest import choose
from .program import ArrayDecl, Bin, Const, Fn, Program, Ref, Statement, Subscript, schedule_indices

I, J = Subscript("i"), Subscript("j")


def with_epilogue(rng: random.Random, program: Program) -> Program:
    """``program`` (a product C += A * B with a reorder) with one or two epilogue statements."""
    c = program.array("C")
    M, N = program.dims[:2]
    floating = c.dtype.startswith(("float", "bfloat"))
    C = Ref("C", (I, J))
    terms = {"bias": Ref("bias", (J,)), "scale": Ref("scale", (I,)), "D": Ref("D", (I, J))}
    forms = _float_forms(C, terms) if floating else _integer_forms(C, terms)
    statements = [Statement(C, form) for form in rng.sample(forms, choose(rng, {1: 75, 2: 25}))]
    used = {r for s in statements for r in terms if _reads(s.value, r)}
    shapes = {"bias": (N,), "scale": (M,), "D": (M, N)}
    arrays = program.arrays + tuple(ArrayDecl(name, "INPUT", c.dtype, shapes[name]) for name in terms if name in used)
    _, root = schedule_indices(program)
    order = list(program.order)
    first_k = next(n for n, name in enumerate(order) if root.get(name) == "k")
    order.insert(first_k, "f")
    return replace(program, arrays=arrays, epilogue=tuple(statements), order=tuple(order))


def _float_forms(C, t) -> list:
    return [Bin("+", C, t["bias"]), Bin("max", Bin("+", C, t["bias"]), Const(0.0)),
            Bin("*", Fn("tanh", (C,)), t["scale"]), Bin("+", Bin("*", C, Const(0.5)), t["D"]),
            Fn("sigmoid", (Bin("-", C, t["bias"]),)), Bin("*", Bin("*", C, Const(0.5)),
                                                          Bin("+", Const(1.0), Fn("erf", (Bin("*", C, Const(0.25)),))))]


def _integer_forms(C, t) -> list:
    return [Bin("+", C, t["bias"]), Bin("max", C, Const(0)), Bin("-", Bin("*", C, Const(2)), t["D"]),
            Bin("min", Bin("+", C, t["scale"]), Const(100))]


def _reads(e, name: str) -> bool:
    from .program import walk

    return any(isinstance(n, Ref) and n.array == name for n in walk(e))
