"""Tiles of a chain's S a causal mask leaves empty: where a block's loop over them may end.

A step before the row's maximum that keeps S's element where an affine condition of the indices
holds and sets it to -inf elsewhere (``S[i, j] = acc.select(j <= i, S[i, j], -math.inf)``) makes a
tile wholly outside the condition add nothing, where ``online.derive`` proved that every later
step takes a masked element to nothing (``Online.masks``). ``tile_stop`` reads the block's last
such tile from the conditions: for ``column <= g`` (or ``<``), g affine in the other indices, the
block's largest g (its loops bound to blocks at their values, the others at their extremes) bounds
the tiles' first column. Before → after (rows of 128 a block, tiles of 64 keys)::

    for j in range(0, N, 64):                 for j in range(0, min(N, i + 128), 64):
"""

from __future__ import annotations

from ..ir.affine import Affine, affine_expr
from ..ir.functions import Function
from ..ir.kernel import Binary, Call, Cast, Const, Expr, Var
from ..ir.types import ScalarType
from .online import Online


def tile_stop(form: Online, model, facts, loop: str) -> Expr | None:
    """Where the loop over S's column tiles may stop for this block: a tile all of whose elements a
    mask sets to -inf (``Online.masks``) adds nothing (the maximum's identity, an exponential's 0),
    so the loop ends after the last tile that holds a kept element of the block's rows. A kept
    condition ``column <= g`` (or ``<``, or the same read the other way round), ``g`` affine in the
    other dimensions: the block's largest ``g`` (its loops bound to blocks at their values, the
    others at their extremes) bounds the tiles' first column. None where no condition takes that
    form, where a loop of the column's dimension starts below 0, or where ``loop`` is not the
    column's."""
    product = model.statements[model.fusion.parts[0][0]] if model.fusion is not None else model.statements[0]
    column = Affine.of(product.index[1])
    if len(column.terms) != 1 or column.terms[0][1] != 1:
        return None
    dim = column.terms[0][0]
    loops = [lp for lp in model.loops if model.dims[lp.dim][0] == dim]
    if loop not in {lp.name for lp in loops} or any(facts.loop(lp.name).first < 0 for lp in loops):
        return None
    stops = [s for s in (_stop(c, dim, model, facts) for c in form.masks) if s is not None]
    if not stops:
        return None
    stop: Expr = stops[0]
    for other in stops[1:]:
        stop = Binary("min", stop, other)
    return stop


def _stop(condition: Expr, column: str, model, facts) -> Expr | None:
    """One kept condition's exclusive bound on a tile's first column, for the block (``tile_stop``)."""
    bound = _upper_bound(condition)
    if bound is None:
        return None
    difference, strict = bound  # kept where difference (< or <=) 0
    if difference.coeff(column) != 1:
        return None
    largest: Expr = Const(-difference.const + (0 if strict else 1))
    for name, coeff in difference.terms:
        if name == column:
            continue
        for lp in model.loops:
            if model.dims[lp.dim][0] != name:
                continue
            lf = facts.loop(lp.name)
            unit = model.binding_of(lp.name)
            if unit is not None and unit.level == "block":
                value: Expr = Var(lp.name)
            elif lf.last is None:
                return None
            else:
                value = Const(lf.last if coeff < 0 else lf.first)
            if isinstance(value, Const) and value.value == 0:
                continue
            term = value if coeff == -1 else Binary("*", value, Const(-coeff))
            largest = Binary("+", largest, term)
    return largest


def _upper_bound(condition: Expr) -> tuple[Affine, bool] | None:
    """``condition`` as ``d < 0`` (True) or ``d <= 0`` (False), d affine in the indices."""
    if isinstance(condition, Call) and condition.function is Function.LOGICAL_NOT:
        inner = _upper_bound(condition.args[0])
        return None if inner is None else (inner[0].scale(-1), not inner[1])
    if not (isinstance(condition, Binary) and condition.op in ("<", "<=", ">", ">=")):
        return None
    try:
        lhs, rhs = Affine.of(_index(condition.lhs)), Affine.of(_index(condition.rhs))
    except TypeError:
        return None
    if condition.op in ("<", "<="):
        return lhs.plus(rhs.scale(-1)), condition.op == "<"
    return rhs.plus(lhs.scale(-1)), condition.op == ">"


def kept_whole(condition: Expr, lasts: dict[str, int], order: list[str]) -> Expr | None:
    """Where ``condition`` (an affine comparison of the indices) holds at every value ``0 ..
    lasts[v]`` of the loops ``v`` in ``lasts`` (a tile's rows and columns), the others as they are:
    its difference at the tile's extreme corner; None where it is not such a comparison. A mask
    step ``S = select(condition, S, -inf)`` leaves such a tile as it is (``fused.epilogue_maps``
    runs it on the tiles that cross the condition's edge alone: a causal attention's diagonal);
    ``order``: the loops, for the expression's terms."""
    bound = _upper_bound(condition)
    if bound is None:
        return None
    difference, strict = bound
    corner = difference.substitute({v: Affine((), last if difference.coeff(v) > 0 else 0) for v, last in lasts.items()})
    return Binary("<" if strict else "<=", affine_expr(corner, order), Const(0))


EXACT = (ScalarType.int32, ScalarType.int64, ScalarType.float64)  # hold every index exactly


def _index(e: Expr) -> Expr:
    """An index compared as a number (``acc.cast(i, float64)`` around it) as the index itself,
    where the cast keeps every index value; another cast stays (no bound is read from it)."""
    while isinstance(e, Cast) and e.dtype in EXACT:
        e = e.operand
    return e


__all__ = ["kept_whole", "tile_stop"]
