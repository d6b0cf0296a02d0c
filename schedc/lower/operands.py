"""A fused epilogue's reads of arrays that depend on the element's column alone (``bias[j]``, a
column scale), loaded into the thread's registers when its tile starts instead of from global
memory after the tile's last product, where their latency would stop the epilogue.

Before (the epilogue of a wgmma tile, after ``wgmma.wait_group 0``)::

    for (int elem = 0; elem < 32; elem += 1) {
        const int jjjj = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;
        _c[elem] = _c[elem] + convert<float>(bias[j + jjjj]);      // a global load per element
    }

After (the loads issued at the tile's start, landing while the products run)::

    __half _bias_cols[...];                                       // one per column of the lane's
    _bias_cols[0] = bias[j + 2 * (threadIdx.x % 128 % 4)];         // elements
    _bias_cols[1] = bias[j + 2 * (threadIdx.x % 128 % 4) + 1];  ...
    ...
    for (int elem = 0; elem < 32; elem += 1)
        _c[elem] = _c[elem] + convert<float>(_bias_cols[8 * (elem / 4) + elem % 2]);

This holds for lane layouts whose column is a part of the element plus a part of the lane
(``col(lane, e) = col(0, e) + col(lane, 0) - col(0, 0)``: wgmma's and mma.sync's accumulators):
the thread's array is indexed by ``col(0, e)``, every subscript a constant after unrolling, so
the array lives in registers (the gaps of the index are never touched and take none). A read
qualifies when its subscript reads the map's column variable and nothing that changes within
the tile's elements (the row, the element, the body's own names), from an array the kernel
never writes, in a map without an edge guard (a ragged tile's columns past C's edge would be
read). The arrays of a tile take at most the registers the consumers have left over.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..instructions import LaneLayout, Sym
from ..ir.kernel import ELEMENT, Const, Expr, FragmentMap, If, Let, Load, PrivateArray, Stmt, Store, Var
from ..ir.walk import map_all_exprs, subexpressions, substitute, variables, walk_statements

_COLUMN = "__column__"  # the map's column variable in a read's key (reads of every map compare alike)
LANE = "_lane"  # the thread's lane, a signed index (so that the reads' subscripts stay in int arithmetic)


def hoisted(before: tuple[Stmt, ...], after: tuple[Stmt, ...], layout: LaneLayout, lanes: int, lane: Expr,
            read_only: set[str], registers: int) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """``before`` (the tile's set-up) and ``after`` (its epilogue) with the qualifying reads of
    ``after``'s maps moved into thread arrays filled at the end of ``before`` (module docstring).
    ``lanes``: the threads that share the layout; ``lane``: the thread's among them;
    ``read_only``: the arrays the kernel never writes; ``registers``: 32-bit registers to spend."""
    columns = _columns(layout, lanes)
    if columns is None:
        return before, after
    arrays: dict[Load, PrivateArray] = {}  # a read's key -> its thread array
    fills: list[Stmt] = [Let(LANE, lane, "the thread's lane in the accumulator's layout")]

    def rewrite(m: FragmentMap) -> FragmentMap:
        def replaced(e: Expr) -> Expr:
            nonlocal registers
            if not (isinstance(e, Load) and _qualifies(e, m, read_only)):
                return e
            key = Load(e.buffer, tuple(substitute(i, {m.col: Var(_COLUMN)}) for i in e.index), e.dtype)
            if key not in arrays:
                cost = len(columns) * -(-e.dtype.size // 4)
                if cost > registers:
                    return e
                registers -= cost
                arrays[key] = array = PrivateArray(f"_{e.buffer}_cols{len(arrays) or ''}", e.dtype,
                                                   (max(columns) + 1,))
                fills.extend((array, *_fill(array, key, columns, layout, Var(LANE))))
            index = layout.col(0, Sym(ELEMENT)).expr
            return Load(arrays[key].name, (index,), e.dtype)

        return replace(m, body=tuple(map_all_exprs(s, replaced) for s in m.body))

    after = tuple(rewrite(s) if isinstance(s, FragmentMap) and not _guarded(s) else s for s in after)
    return ((*before, *fills), after) if arrays else (before, after)


def _columns(layout: LaneLayout, lanes: int) -> dict[int, int] | None:
    """``col(0, e)`` -> the first element ``e`` at it, where the layout's column is a part of the
    element plus a part of the lane; None where it is not."""
    lane, e = np.arange(lanes)[:, None], np.arange(layout.elements)[None, :]
    col = np.broadcast_to(layout.col(lane, e), (lanes, layout.elements))
    if not (col - col[:, :1] == col[:1, :] - col[0, 0]).all():
        return None
    first: dict[int, int] = {}
    for element, c in enumerate(col[0].tolist()):
        first.setdefault(int(c), element)
    return first


def _qualifies(e: Load, m: FragmentMap, read_only: set[str]) -> bool:
    names = set().union(*(variables(i) for i in e.index)) if e.index else set()
    varying = {m.row, ELEMENT.name} | _defined(m.body)
    return e.buffer in read_only and e.buffer != m.fragment and m.col in names and not names & varying \
        and not any(isinstance(x, Load) for i in e.index for x in subexpressions(i))


def _defined(body: tuple[Stmt, ...]) -> set[str]:
    return {getattr(s, "name", None) or getattr(s, "var", "") for s in walk_statements(body)} - {""}


def _guarded(m: FragmentMap) -> bool:
    return any(isinstance(s, If) for s in walk_statements(m.body))


def _fill(array: PrivateArray, key: Load, columns: dict[int, int], layout: LaneLayout,
          lane: Expr) -> list[Stmt]:
    """One store a column of the lane: the read at the column of the first element there."""
    stores = []
    for slot, element in sorted(columns.items()):
        column = layout.col(Sym(lane), element)
        column = column.expr if isinstance(column, Sym) else Const(int(column))
        index = tuple(substitute(i, {_COLUMN: column}) for i in key.index)
        stores.append(Store(array.name, (Const(slot),), Load(key.buffer, index, key.dtype)))
    return stores


__all__ = ["hoisted"]
