"""Random epilogues fused after a product (``acc.fuse((product, after), partial=2)``, or on SIMT
plans sometimes ``partial=1``: over the rows alone, C's rows shared by the two nests' own loops), on tensor
cores or SIMT (there, with k sometimes on THREAD_X: a reduction across threads, then the epilogue
on the first thread):
element-wise statements over C's element that add a bias by column or a scale by row, a residual
``D[i, j]``, and apply math, in C's type, the last sometimes writing another array at C's element
(C's shape and layout; then sometimes one more statement scaling it); the fusing index "f" placed
before the first loop of k.
Integer products get integer forms (no math: schedc refuses math on integers)."""

from __future__ import annotations

import random
from dataclasses import replace

from .nest import choose
from .program import ArrayDecl, Bin, Const, Fn, Program, Ref, Statement, schedule_indices


def fusable(program: Program) -> bool:
    """A 3-D nest whose one statement accumulates into C[i, j] (or C[j, i]): its product, and
    an element-wise nest over (i, j) after it, fuse over the first two indices."""
    if len(program.dims) != 3 or len(program.statements) != 1 or not program.statements[0].accumulate:
        return False
    subscripts = program.statements[0].target.subscripts
    return (len(subscripts) == 2 and {x.index for x in subscripts} == {"i", "j"}
            and all(x.sign == 1 and x.offset == 0 for x in subscripts))


def with_epilogue(rng: random.Random, program: Program) -> Program:
    """``program`` (a product C += A * B, ``fusable``) with one or two epilogue statements over
    C's element, fused after it; the fusing index before the first loop of k."""
    target = program.statements[0].target
    c = program.array(target.array)
    extents = dict(zip(program.nest_indices, program.dims))
    row, col = target.subscripts
    floating = c.dtype.startswith(("float", "bfloat"))
    C = Ref(target.array, target.subscripts)
    # named apart from the program's arrays (with_array_names renames every array by position later)
    terms = {"bias": Ref("epilogue_bias", (col,)), "scale": Ref("epilogue_scale", (row,)),
             "D": Ref("epilogue_residual", (row, col))}
    forms = _float_forms(C, terms) if floating else _integer_forms(C, terms)
    statements = [Statement(C, form) for form in rng.sample(forms, choose(rng, {1: 75, 2: 25}))]
    used = {key for s in statements for key, ref in terms.items() if _reads(s.value, ref.array)}
    shapes = {"bias": (extents[col.index],), "scale": (extents[row.index],),
              "D": (extents[row.index], extents[col.index])}
    arrays = program.arrays + tuple(ArrayDecl(terms[key].array, "INPUT", c.dtype, shapes[key]) for key in terms
                                    if key in used)
    if rng.random() < 0.3:  # the last statement writes another array at C's element, C's shape and layout
        out = Ref("epilogue_out", target.subscripts)
        statements[-1] = Statement(out, statements[-1].value)
        if rng.random() < 0.3:  # and goes on from that array's element
            statements.append(Statement(out, Bin("*", out, Const(0.5 if floating else 3))))
        covered = all(extents[x.index] == size for x, size in zip(target.subscripts, c.shape))
        arrays += (ArrayDecl(out.array, "OUTPUT" if covered else "INPUT_OUTPUT", c.dtype, c.shape, c.layout),)
    order, root = schedule_indices(program)
    order = list(program.order or order)
    if program.tensorize is None and _rows_fusable(program) and rng.random() < 0.4:
        # fused over i alone: i's loops first, then each nest's own (the epilogue's column loop last)
        rows = [name for name in order if root.get(name) == "i"]
        rest = [name for name in order if root.get(name) != "i"]
        return replace(program, arrays=arrays, epilogue=tuple(statements), order=(*rows, "f", *rest, "j1"),
                       rows_only=True)
    first_k = next(n for n, name in enumerate(order) if root.get(name) == "k")
    order.insert(first_k, "f")
    return replace(program, arrays=arrays, epilogue=tuple(statements), order=tuple(order))


def _rows_fusable(program: Program) -> bool:
    """Whether the product can be fused with its epilogue over i alone: C indexed [i, j] (its rows
    the fused points) and no loop of j or k bound to blocks or warps (a part's own loops run in
    turn on the block's threads; the epilogue's column loop stays serial, on the first thread)."""
    _, root = schedule_indices(program)
    if [x.index for x in program.statements[0].target.subscripts] != ["i", "j"]:
        return False
    return not any(root.get(n) in ("j", "k") and not b.unit.startswith("THREAD") for b in program.bindings
                   for n in b.indices)


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
