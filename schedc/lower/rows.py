"""Row vectors of an accumulator tile: a fused epilogue's statements on a TEMP array of one element
per row of C (``R[i]``), held in the registers of the threads that hold the row.

A schedule fused over C's rows (the fusing index inside the row loop, outside the columns' loops:
each part runs over the block's whole tile in turn) may write row vectors between the product and
C's store: ``R[i] = v`` with ``v`` the same for every column (a constant, row vectors, arrays read at
the row) and reductions ``R[i] = op(R[i], x)`` (``op`` +, max or min; ``x`` reading C's element and
arrays at its row and column); C's element-wise statements may read ``R[i]``. Each thread holds R
for the rows it holds elements of: a thread array indexed by ``row(0, e)`` (where the layout's row
is a part of the lane plus a part of the element: wgmma's and mma.sync's accumulators), every
subscript a constant after unrolling, so the array lives in registers. A reduction is each
thread's partial over its elements, combined over the lanes that hold the row by ``shfl.xor``
(``LaneReduce``), then folded into R. Before → after (wgmma, a warpgroup's 64 x n tile; a thread
holds rows ``r`` and ``r + 8``)::

    R[i] = -inf                          _R_rows[0] = -inf; _R_rows[8] = -inf
    R[i] = max(R[i], S[i, j])            _R_part[0 + 9 w] = -inf, w = 0, 1, 4, 5 (the ways of row 0:
                                           element % 8); _R_part[8 + 9 w] = -inf, w = 2, 3, 6, 7
                                         for elem: _R_part[row0 + 9 (elem % 8)] = max(that, _c[elem])
                                         _R_part[s] = max of the row's ways, pairwise
                                         _R_part[s] = max(_R_part[s], shfl_xor(_R_part[s], 1)), then 2
                                         _R_rows[s] = max(_R_rows[s], _R_part[s])
    S[i, j] = exp(S[i, j] - R[i])        for elem: _c[elem] = exp(_c[elem] - _R_rows[row0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import PlanError
from ..instructions import LaneLayout, Sym
from ..ir.functions import Function
from ..ir.kernel import (
    ELEMENT,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    FragmentMap,
    If,
    LaneReduce,
    Let,
    Load,
    PrivateArray,
    Stmt,
    Store,
    Var,
    all_of,
)
from ..ir.types import ScalarType
from ..ir.walk import map_expr, subexpressions, substitute

# a thread's partial of a row reduction: up to this many registers a row (its elements' subscripts
# modulo WAYS), folded together before the lanes combine: chains of a few dependent operations
# instead of one of every element (the softmax's maximum and sum of a 128-column tile: 8 long, not 32)
WAYS = 8


@dataclass(frozen=True)
class RowLayout:
    """Where a thread's rows of an accumulator lie: ``slots`` (the rows ``row(0, e)`` of lane 0,
    each the thread's array index of its row), the first element of each, the lanes that share the
    layout and the ``shfl.xor`` distances between the lanes that hold one row."""

    layout: LaneLayout
    lanes: int
    first: dict[int, int]  # slot -> the first element in it
    distances: tuple[int, ...]

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(sorted(self.first))

    @property
    def size(self) -> int:
        return max(self.first) + 1

    def index(self) -> Expr:
        """The slot of the element ``ELEMENT`` (a FragmentMap's), as an expression of it."""
        row = self.layout.row(0, Sym(ELEMENT))
        return row.expr if isinstance(row, Sym) else Const(int(row))

    def ways(self, slot: int) -> tuple[int, ...]:
        """The ways (``element % WAYS``) of the thread's elements in row ``slot``: a reduction's
        partial keeps one register a way, independent chains that the SM issues back to back."""
        elements = np.arange(self.layout.elements)
        row = np.broadcast_to(self.layout.row(0, elements), elements.shape)
        return tuple(sorted({int(e) % WAYS for e in elements[row == slot]}))

    def partial_index(self) -> Expr:
        """The partial's subscript of the element ``ELEMENT``: its slot and its way."""
        way = Binary("%", ELEMENT, Const(WAYS))
        return Binary("+", self.index(), Binary("*", Const(self.size), way))

    def row(self, slot: int, lane: Expr | None = None) -> Expr:
        """The thread's row in the tile at ``slot`` (``lane``: the thread's lane, where a signed
        value of it is at hand; else from threadIdx.x)."""
        lane = Sym(lane if lane is not None else Binary("%", Var("threadIdx.x"), Const(self.lanes)))
        row = self.layout.row(lane, self.first[slot])
        return row.expr if isinstance(row, Sym) else Const(int(row))


def row_layout(layout: LaneLayout, lanes: int) -> RowLayout | None:
    """The rows of ``layout`` over ``lanes`` threads, where the row is a part of the lane plus a
    part of the element and the lanes of one row differ in bits of the lane below 32; else None."""
    lane, e = np.arange(lanes)[:, None], np.arange(layout.elements)[None, :]
    row = np.broadcast_to(layout.row(lane, e), (lanes, layout.elements))
    if not (row - row[:, :1] == row[:1, :] - row[0, 0]).all():
        return None
    first: dict[int, int] = {}
    for element, r in enumerate(row[0].tolist()):
        first.setdefault(int(r), element)
    distances = tuple(d for d in (1, 2, 4, 8, 16) if d < lanes and (row[lane[:, 0] ^ d] == row).all())
    holders = {int(r): int(np.sum(row[:, 0] == r)) for r in np.unique(row[:, 0])}
    if any(count != 2 ** len(distances) for count in holders.values()):
        return None
    return RowLayout(layout, lanes, first, distances)


def is_row_vector(model, s: Store, product: Store) -> bool:
    """Whether ``s`` writes a row vector of the product's C: a TEMP or OUTPUT array of rank 1 at
    C's row (an OUTPUT one, a row's log-sum-exp, is also stored into its array: ``stored``)."""
    return (s.buffer != product.buffer and len(s.index) == 1 and s.index[0] == product.index[0]
            and model.buffer(s.buffer).role in ("temp", "output"))


def stored(vector: str, dtype: ScalarType, rows: RowLayout, fragment: str, row_of, inside: Expr | None = None
           ) -> list[Stmt]:
    """An OUTPUT row vector written into its array: of the lanes that hold a row, the one whose
    bits at the row's shuffle distances are 0 stores the thread's value of each row it holds
    (``row_of(slot, lane)``: the row's subscript in the array; ``inside``: how many of the tile's rows
    lie inside C, where it has an edge)."""
    lane = Var(f"_{vector}_lane{fragment.removeprefix('_c')}")  # a signed index: rows compare with edges
    first = all_of(Binary("==", Binary("%", Binary("/", lane, Const(d)), Const(2)), Const(0)) for d in rows.distances)
    stores: tuple[Stmt, ...] = ()
    for slot in rows.slots:
        store: Stmt = Store(vector, (row_of(slot, lane),), Load(array_name(vector, fragment), (Const(slot),), dtype))
        if inside is not None:
            store = If(Binary("<", rows.row(slot, lane), inside), (store,), "the row lies inside C")
        stores += (store,)
    let = Let(lane.name, Binary("%", Var("threadIdx.x"), Const(rows.lanes)), "the thread's lane in the tile")
    return [let, *([If(first, stores, f"one lane of each row's stores its {vector}")] if first is not None
                   else stores)]


def array_name(vector: str, fragment: str) -> str:
    """The thread array of ``vector`` for the rows of accumulator ``fragment`` (one per tile a
    thread holds: register-blocked tiles hold rows of their own)."""
    return f"_{vector}_rows{fragment.removeprefix('_c')}"


def reads(value: Expr, vectors: set[str], at: Expr, fragment: str) -> Expr:
    """``value`` with its reads of the row vectors ``vectors`` at the thread's slot ``at``."""
    def put(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in vectors:
            return Load(array_name(e.buffer, fragment), (at,), e.dtype)
        return e
    return map_expr(value, put)


def identity(op: str, dtype: ScalarType) -> Const:
    """The value ``op`` leaves the other operand as: 0, the type's least (max) or greatest (min)."""
    if op == "+":
        return Const(0.0 if dtype.is_float else 0, dtype)
    if dtype.is_float:
        return Const(-math.inf if op == "max" else math.inf, dtype)
    info = np.iinfo(dtype.numpy)
    return Const(int(info.min) if op == "max" else int(info.max), dtype)


def declared(vector: str, dtype: ScalarType, rows: RowLayout, fragment: str) -> PrivateArray:
    return PrivateArray(array_name(vector, fragment), dtype, (rows.size,))


def per_slot(s: Store, value: Expr, rows: RowLayout, row_var: str, vectors: set[str], fragment: str) -> list[Stmt]:
    """A row-wise statement (the same value for every column): one store per row the thread holds,
    its row variable at that row."""
    out: list[Stmt] = []
    for slot in rows.slots:
        at = substitute(reads(value, vectors, Const(slot), fragment), {row_var: rows.row(slot)})
        out.append(Store(array_name(s.buffer, fragment), (Const(slot),), at))
    return out


def reduced(s: Store, op: str, partial: str, dtype: ScalarType, rows: RowLayout, fragment: str) -> list[Stmt]:
    """After the map that folded the thread's elements into ``partial`` (``partial_index``): each
    row's ways folded into its slot, pairwise; the lanes of each row combine their partials, and R
    takes the row's total."""
    out: list[Stmt] = []
    for slot in rows.slots:
        ways = [Load(partial, (Const(slot + rows.size * w),), dtype) for w in rows.ways(slot)]
        while len(ways) > 1:
            ways = [Binary(op, a, b, dtype) for a, b in zip(ways[::2], ways[1::2])] + ways[len(ways) // 2 * 2:]
        if ways[0] != Load(partial, (Const(slot),), dtype):  # a row of one way: already there
            out.append(Store(partial, (Const(slot),), ways[0]))
    out.append(LaneReduce(partial, op, dtype, rows.slots, rows.distances))
    mine = array_name(s.buffer, fragment)
    for slot in rows.slots:
        here = (Const(slot),)
        out.append(Store(mine, here, Binary(op, Load(mine, here, dtype), Load(partial, here, dtype), dtype)))
    return out


def start_partial(partial: str, op: str, dtype: ScalarType, rows: RowLayout) -> list[Stmt]:
    """A reduction's partial (``partial_index``), each way of each row at the identity."""
    return [PrivateArray(partial, dtype, (rows.size * WAYS,)),
            *(Store(partial, (Const(slot + rows.size * w),), identity(op, dtype))
              for slot in rows.slots for w in rows.ways(slot))]


def column_free(value: Expr, col_var: str, held: str) -> bool:
    """Whether ``value`` is the same for every column: it reads neither C's element nor the column."""
    return not any(isinstance(e, Var) and e.name == col_var or isinstance(e, Load) and e.buffer == held
                   for e in subexpressions(value))


def refuse(where: str, vector: str, why: str) -> PlanError:
    return PlanError(where, f"the epilogue writes the row vector {vector}[i] {why}: a row vector takes a value "
                            f"the same for every column ({vector}[i] = v) or a reduction over the row's columns "
                            f"({vector}[i] = {vector}[i] + x, max or min)")


def converted(value: Expr, dtype: ScalarType) -> Expr:
    return value if value.dtype is dtype else Cast(value, dtype)


__all__ = ["RowLayout", "is_row_vector", "row_layout"]


def past_columns(fragment: str, dtype: ScalarType, row: str, col: str, inside: Expr, n: int, fill: float,
                 comment: str, columns: tuple[int, int] | None = None) -> Stmt:
    """On a tile of ``n`` columns of which ``inside`` lie inside its array, the elements of the
    accumulator ``fragment`` past them set to ``fill``; nothing on a tile they all lie inside."""
    element = Load(fragment, (ELEMENT,), dtype)
    kept = Call(Function.SELECT, (Binary("<", Var(col), inside, ScalarType.bool), element, Const(fill, dtype)),
                dtype)
    return If(Binary("<", inside, Const(n), ScalarType.bool),
              (FragmentMap(fragment, dtype, row, col, (Store(fragment, (ELEMENT,), kept),), columns),), comment)
