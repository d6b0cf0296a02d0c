"""Statements over schedule loops, and a fused schedule's epilogue on tensor-core tiles.

A tensorized fused schedule (``acc.fuse((product, epilogue), partial=2)``) has the product
``C += A * B`` as its first part and element-wise statements over C's elements as the rest.
They run in the accumulator registers after the tile's last product, before its store: each
statement is a ``FragmentMap`` over the thread's elements of the fragment, C's element read and
written in place, the other arrays read at the element's row and column. The statements compute
in the accumulator's type (a 16-bit float C's in float32, its other operands converted up, as
``widened`` does), and the result is rounded to C's type once, when C is stored. Before → after,
for ``C = tanh(C + bias[j])`` on a 16x16 tile::

    C[i+ii+iii, j+jj+jjj] = tanh(C[..] + bias[j+jj+jjj])     for elem in the lane's elements:
                                                        →        iii, jjj = the element's row, col
                                                                 _c[elem] = tanh(_c[elem] + bias[j+jj+jjj])
"""

from __future__ import annotations

from ..errors import PlanError
from ..ir.kernel import (
    ELEMENT,
    Binary,
    Cast,
    Const,
    Expr,
    FragmentMap,
    If,
    Load,
    Stmt,
    Store,
    TileEdge,
    Var,
    all_of,
)
from ..ir.patterns import widened
from ..ir.types import ScalarType
from ..ir.walk import map_expr, substitute


def in_loops(model, store: Store) -> Store:
    """The statement over schedule loops: each nest dimension is the sum of its loops."""
    values: dict[str, Expr] = {}
    for dim, (name, _extent) in enumerate(model.dims):
        pieces = [Var(lp.name) for lp in model.loops if lp.dim == dim]
        if not pieces:  # a dimension of another part of a fused schedule: this one's statements do not name it
            continue
        total: Expr = pieces[0]
        for piece in pieces[1:]:
            total = Binary("+", total, piece)
        values[name] = total
    return Store(store.buffer, tuple(substitute(i, values) for i in store.index),
                 substitute(store.value, values))


def epilogue_statements(model, where: str) -> tuple[Store, ...]:
    """The statements a tensorized fused schedule runs after its product (its later parts),
    checked: each writes the product's C at the product's own element (``check`` proved that an
    array two parts share is shared element by element) over the fused dimensions alone."""
    fusion = model.fusion
    if fusion is None:
        return ()
    k = model.loop(model.tensorize.loops[2]).dim
    if k not in fusion.unfused[0]:
        raise PlanError(where, f"the tensorized product C += A * B is fused schedule "
                               f"{next(p for p, dims in enumerate(fusion.unfused) if k in dims)}: it must be the first "
                               "(acc.fuse((product, epilogue), ...)), the epilogue after it")
    product = model.statements[fusion.parts[0][0]]
    if len(fusion.parts[0]) != 1:
        raise PlanError(where, f"the tensorized schedule (the first fused one) has one statement C += A * B, not "
                               f"{len(fusion.parts[0])}")
    out: list[Store] = []
    for number, members in enumerate(fusion.parts[1:], 1):
        if fusion.unfused[number]:
            names = ", ".join(model.dims[d][0] for d in fusion.unfused[number])
            raise PlanError(where, f"fused schedule {number} has loops of its own ({names}): after a tensorized "
                                   "product, a fused schedule is element-wise over the product's C (fuse every one of "
                                   "its dimensions)")
        for n in members:
            s = model.statements[n]
            if s.buffer != product.buffer:
                raise PlanError(where, f"fused schedule {number} writes {s.buffer}: an epilogue of a tensorized "
                                       f"product computes in its accumulator and writes {product.buffer} (write "
                                       f"{s.buffer} in a nest of its own)")
            out.append(s)
    return tuple(out)


def _unrounded(e: Expr) -> Expr:
    """C's element converted to its 16-bit type and back to float32 (the script's
    ``acc.cast(C[i, j], float32)``) is the accumulator's value itself: C is rounded once, when
    stored."""
    if isinstance(e, Cast) and isinstance(e.operand, Cast) and e.dtype.is_float and e.operand.dtype.is_float:
        inner = e.operand.operand
        if isinstance(inner, Load) and inner.index == (ELEMENT,) and inner.dtype == e.dtype \
                and e.operand.dtype.size < e.dtype.size:
            return inner
    return e


def epilogue_maps(model, statements: tuple[Store, ...], fragment: str, accumulator: ScalarType,
                  combo: dict[str, int], edge: TileEdge | None, columns: tuple[int, int] | None = None,
                  ) -> tuple[FragmentMap, ...]:
    """Each epilogue statement (over nest dimensions) as a map over ``fragment``'s elements: the
    register-blocked loops at their values in ``combo``, C's element the fragment's, other
    arrays read at the element's row and column (the tensorized m and n loops); at C's edge,
    only the elements inside it."""
    t = model.tensorize
    row, col = t.loops[0], t.loops[1]
    for name in (row, col):
        lp = model.loop(name)
        if (lp.begin, lp.step) != (0, 1):
            raise PlanError(f"tensorize(indices=({', '.join(t.loops)}))",
                            f"{name} takes range({lp.begin}, {lp.end}, {lp.step}); a fused epilogue places a tile's "
                            "elements by loops that count its rows and columns from 0 by 1")
    fixed = {name: Const(value) for name, value in combo.items()}
    maps = []
    for s in statements:
        s = in_loops(model, s)

        def local(e: Expr, s=s) -> Expr:
            if isinstance(e, Load) and e.buffer == s.buffer and e.index == s.index:
                value = Load(fragment, (ELEMENT,), accumulator)
                return value if e.dtype is accumulator else Cast(value, e.dtype)
            return e

        value = substitute(map_expr(map_expr(s.value, local), _unrounded), fixed)
        if accumulator.is_float and value.dtype.is_float and value.dtype.size < accumulator.size:
            value = widened(value, accumulator)  # 16-bit C: computed in float32, rounded once when stored
        body: tuple[Stmt, ...] = (Store(fragment, (ELEMENT,), value if value.dtype is accumulator
                                        else Cast(value, accumulator)),)
        if edge is not None:
            inside = all_of((Binary("<", Var(row), edge.rows), Binary("<", Var(col), edge.cols)))
            body = (If(inside, body, "the element lies inside C"),)
        maps.append(FragmentMap(fragment, accumulator, row, col, body, columns))
    return tuple(maps)


__all__ = ["epilogue_maps", "epilogue_statements", "in_loops"]
