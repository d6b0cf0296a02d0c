"""Statements over schedule loops, and a fused schedule's epilogue on tensor-core tiles.

A tensorized fused schedule (``acc.fuse((product, epilogue), partial=2)``) has the product
``C += A * B`` as its first part and element-wise statements over C's elements as the rest.
They run in the accumulator registers after the tile's last product, before its store: each
statement is a ``FragmentMap`` over the thread's elements of the fragment, C's element read and
written in place, the other arrays read at the element's row and column. The statements compute
in the accumulator's type (a 16-bit float C's in float32, its other operands converted up, as
``widened`` does); a result a later statement reads is rounded to its array's type first, and the
last is rounded when it is stored. Before → after,
for ``C = tanh(C + bias[j])`` on a 16x16 tile::

    C[i+ii+iii, j+jj+jjj] = tanh(C[..] + bias[j+jj+jjj])     for elem in the lane's elements:
                                                        →        iii, jjj = the element's row, col
                                                                 _c[elem] = tanh(_c[elem] + bias[j+jj+jjj])

The statements may go on to write one other array ``D`` at C's element (``D[i, j] = gelu(C[i, j])``,
D of the same shape and layout as C, in any type): once C's statements have run, C is stored
(unless it is TEMP, held in registers alone) and D's statements compute in the same registers,
which then hold D's element, and D is stored from them. Before → after, for C TEMP::

    D[i+ii+iii, j+jj+jjj] = gelu(C[..] + bias[..])      for elem in the lane's elements:
                                                        →        _c[elem] = gelu(_c[elem] + bias[..])
                                                              store _c's tile into D (D's type)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PlanError
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
    Load,
    Stmt,
    Store,
    TileEdge,
    Var,
    all_of,
)
from ..ir.patterns import reduction, widened
from ..ir.types import ScalarType
from ..ir.walk import map_expr, subexpressions, substitute
from . import masked, rows


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
            _check_target(model, where, number, s, product, out)
            out.append(s)
    return tuple(out)


def stored_array(model, c: str) -> str | None:
    """The array a tensorized product's registers are stored into last: the other array its
    epilogue writes, or C (None for a TEMP C with no such array: nothing is stored)."""
    fusion = model.fusion
    product = model.statements[0]
    others = [] if fusion is None else [model.statements[n].buffer for members in fusion.parts[1:]
                                        for n in members if model.statements[n].buffer != c
                                        and not rows.is_row_vector(model, model.statements[n], product)]
    return others[-1] if others else None if model.buffer(c).role == "temp" else c


def _check_target(model, where: str, number: int, s: Store, product: Store, before: list[Store]) -> None:
    """An epilogue statement writes C, or one other array at C's element once C's statements are
    done, and reads C's element only while the registers hold it (module docstring)."""
    c = product.buffer
    if rows.is_row_vector(model, s, product):  # C's row vector (lower/rows.py): beside C, not instead of it
        return
    target = next((t.buffer for t in before if t.buffer != c and not rows.is_row_vector(model, t, product)), None)
    if s.buffer == c:
        if target is not None:
            raise PlanError(where, f"fused schedule {number} writes {c} after an earlier statement wrote {target}: "
                                   f"the registers hold {target}'s element from then on, so {c}'s epilogue "
                                   f"statements come first")
        return
    here = f"fused schedule {number} writes {s.buffer}"
    if target is not None and s.buffer != target:
        raise PlanError(where, f"{here} and an earlier statement wrote {target}: an epilogue of a tensorized "
                               f"product writes {c} and at most one other array (write {s.buffer} in a nest of "
                               "its own)")
    if s.index != product.index:
        raise PlanError(where, f"{here}{_subscripts(model, s.index)}, not at {c}'s element "
                               f"{c}{_subscripts(model, product.index)}: another array of an epilogue is written "
                               f"where the product's {c} is")
    array, accumulated = model.buffer(s.buffer), model.buffer(c)
    if (array.shape, array.strides) != (accumulated.shape, accumulated.strides):
        raise PlanError(where, f"{here}, of shape {list(array.shape)} and strides {list(array.strides)}, where "
                               f"{c} has {list(accumulated.shape)} and {list(accumulated.strides)}: the registers "
                               f"are stored into another array of {c}'s shape and layout")
    if target is not None and any(isinstance(e, Load) and e.buffer == c and e.index == s.index
                                  for e in subexpressions(s.value)):
        raise PlanError(where, f"{here} and reads {c}{_subscripts(model, s.index)} after an earlier statement "
                               f"wrote {target}: the registers hold {target}'s element then (read {c} in "
                               f"{target}'s first statement)")


def check_held(model, where: str, statements: tuple[Store, ...], accumulator: ScalarType) -> None:
    """Another array an epilogue writes is computed in the ``accumulator``'s registers: refused
    where its type has values those registers do not hold exactly (an int64 or float64 D beside
    float32 accumulators), which would come out rounded."""
    c = statements[0].buffer if statements else ""
    for s in statements:
        dtype = model.buffer(s.buffer).dtype
        if s.buffer != c and not _holds(accumulator, dtype):
            raise PlanError(where, f"the epilogue writes {s.buffer} ({dtype.value}) from {c}'s {accumulator.value} "
                                   f"registers, which do not hold every {dtype.value} value: give {s.buffer} a type "
                                   f"{accumulator.value} holds ({_held_types(accumulator)}), or write it in a nest of "
                                   "its own")


def _holds(accumulator: ScalarType, dtype: ScalarType) -> bool:
    """Whether every ``dtype`` value is an ``accumulator`` value."""
    if dtype is accumulator or dtype.value == "bool":
        return True
    if accumulator.is_float:
        big = accumulator.float_format
        if dtype.is_float:
            small = dtype.float_format
            return (small.precision <= big.precision and small.max_exponent <= big.max_exponent
                    and small.min_exponent >= big.min_exponent)
        info = np.iinfo(dtype.numpy)
        return max(-int(info.min), int(info.max)) <= 2 ** big.precision
    if dtype.is_float:
        return False
    small, big = np.iinfo(dtype.numpy), np.iinfo(accumulator.numpy)
    return int(small.min) >= int(big.min) and int(small.max) <= int(big.max)


def _held_types(accumulator: ScalarType) -> str:
    return ", ".join(t.value for t in ScalarType if t.value != "bool" and _holds(accumulator, t))


def _subscripts(model, index: tuple[Expr, ...]) -> str:
    """``[i, j + 1]``: a statement's subscripts over the nest's dimensions, as the script names them."""
    def text(e: Expr) -> str:
        if isinstance(e, Var | Const):
            return str(e.name if isinstance(e, Var) else e.value)
        if isinstance(e, Binary):
            return f"{text(e.lhs)} {e.op} {text(e.rhs)}"
        return "..."
    return f"[{', '.join(text(e) for e in index)}]"


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
                  *, held: str, then: bool = False, lanes: rows.RowLayout | None = None,
                  online=None) -> tuple[Stmt, ...]:
    """Each epilogue statement (over nest dimensions) as a map over ``fragment``'s elements: the
    register-blocked loops at their values in ``combo``, the element of the array the registers
    hold (``held`` before the first statement: C; another array's after its first statement) the
    fragment's, other arrays read at the element's row and
    column (the tensorized m and n loops); at C's edge, only the elements inside it. A result a
    later statement reads (``then``: statements follow these) is held as its array holds it: rounded
    to the array's type (saturated, for 8-bit floats), as the nest's order has it; the last is
    rounded where it is stored. Statements on C's row vectors (``lanes``: where the thread's rows
    lie) become the thread's row arrays, their reductions combined over the row's lanes
    (``lower/rows.py``); those a chain keeps across the tiles of C's columns (``online``, an
    ``online.Online``) are set before the loop, corrected as the row's maximum grows, and divided by
    after it (``lower/online.py``)."""
    t = model.tensorize
    row, col = t.loops[0], t.loops[1]
    for name in (row, col):
        lp = model.loop(name)
        if (lp.begin, lp.step) != (0, 1):
            raise PlanError(f"tensorize(indices=({', '.join(t.loops)}))",
                            f"{name} takes range({lp.begin}, {lp.end}, {lp.step}); a fused epilogue places a tile's "
                            "elements by loops that count its rows and columns from 0 by 1")
    fixed = {name: Const(value) for name, value in combo.items()}
    product = model.statements[0]
    vectors = {s.buffer for s in statements if rows.is_row_vector(model, s, product)}
    read = {e.buffer for s in statements for e in subexpressions(s.value) if isinstance(e, Load)} & row_vectors(model)
    if (vectors or read) and lanes is None:
        names = ", ".join(sorted(vectors | read))
        raise PlanError(where(model), f"the epilogue uses the row vector(s) {names}, held in the registers of the "
                                      "threads that hold each row: tensorize with a family whose accumulator lanes "
                                      "are known (wgmma, mma.sync)")
    maps: list[Stmt] = []
    seen: set[str] = set(online.carried) if online is not None else set()  # declared before the loop
    guards = edge  # the edge each step's elements are guarded by (None: no guard)
    if online is not None and online.edge_masked and edge is not None:
        maps.append(_edge_mask(model, fragment, accumulator, edge, columns))
        guards = None
    for number, s in enumerate(statements):
        if online is not None and online.skipped(s):
            continue
        if s.buffer in vectors:
            peak = online is not None and s.buffer == online.peak
            dtype = model.buffer(s.buffer).dtype
            maps += online.before_peak(dtype, lanes, fragment) if peak else []
            maps += _row_statement(model, in_loops(model, s), number, in_loops(model, product), fragment,
                                   accumulator, fixed, guards, columns, lanes, vectors, seen, online)
            maps += online.after_peak(dtype, lanes, fragment) if peak else []
            continue
        s = in_loops(model, s)
        read_later = then or number < len(statements) - 1

        def local(e: Expr, s=s, held=held) -> Expr:
            if isinstance(e, Load) and e.buffer == held and e.index == s.index:
                value = Load(fragment, (ELEMENT,), accumulator)
                return value if e.dtype is accumulator else Cast(value, e.dtype)
            return e

        held = s.buffer

        value = substitute(map_expr(map_expr(s.value, local), _unrounded), fixed)
        if vectors | read:
            value = rows.reads(value, vectors | read, lanes.index(), fragment)
            value = online.used(value, fragment) if online is not None else value
        if accumulator.is_float and value.dtype.is_float and value.dtype.size < accumulator.size:
            value = widened(value, accumulator)  # 16-bit C: computed in float32, rounded when stored
        stored = model.buffer(s.buffer).dtype
        if read_later and stored is not accumulator and stored.is_float and accumulator.is_float:
            value = Cast(Cast(value, stored), accumulator)  # as the array holds it, for the statements after
        body: tuple[Stmt, ...] = (Store(fragment, (ELEMENT,), value if value.dtype is accumulator
                                        else Cast(value, accumulator)),)
        if guards is not None:
            inside = all_of((Binary("<", Var(row), guards.rows), Binary("<", Var(col), guards.cols)))
            body = (If(inside, body, "the element lies inside C"),)
        mapped: Stmt = FragmentMap(fragment, accumulator, row, col, body, columns)
        whole = _kept_whole(model, value, fragment, accumulator)
        maps.append(If(_negated(whole), (mapped,), "the tile crosses the mask's edge") if whole is not None else mapped)
    later = set(online.output_vectors) if online is not None else set()
    for vector in sorted(v for v in vectors if model.buffer(v).role == "output" and v not in later):
        maps += rows.stored(vector, model.buffer(vector).dtype, lanes, fragment, row_of(model, lanes, fixed),
                            edge.rows if edge is not None else None)
    return tuple(maps)


def _edge_mask(model, fragment: str, accumulator: ScalarType, edge: TileEdge, columns) -> Stmt:
    """A chain's softmax kept online (``online.Online.edge_masked``): on a tile that crosses S's
    last column, its elements past the column set to -inf before the first step, as a causal mask
    would (the maximum takes them as nothing, their exponentials are 0), so that no step guards its
    elements (one branch an element a step, every tile). Rows past the nest need no guard: each
    row's vectors and products are its own, and such rows are never stored."""
    t = model.tensorize
    return rows.past_columns(fragment, accumulator, t.loops[0], t.loops[1], edge.cols, t.mma_shape.mnk[1], -math.inf,
                             "the tile crosses S's last column: its elements past it are -inf (nothing to the "
                             "softmax)", columns)


def _kept_whole(model, value: Expr, fragment: str, accumulator: ScalarType) -> Expr | None:
    """Where a mask ``select(condition, element, other)`` keeps every element of the tile as it is
    (``masked.kept_whole`` at the tile's corner): it need not run there. None for other statements."""
    if not (isinstance(value, Call) and value.function is Function.SELECT
            and value.args[1] == Load(fragment, (ELEMENT,), accumulator)):
        return None
    t = model.tensorize
    m, n, _ = t.mma_shape.mnk
    return masked.kept_whole(value.args[0], {t.loops[0]: m - 1, t.loops[1]: n - 1}, [lp.name for lp in model.loops])


def _negated(comparison: Binary) -> Expr:
    return Binary({"<": ">=", "<=": ">"}[comparison.op], comparison.lhs, comparison.rhs)


def row_of(model, lanes: rows.RowLayout, fixed: dict[str, Expr]):
    """The subscript of C's row at a thread's row slot (``lower/rows.py``): the product's row over
    the schedule's loops, the tile's row loop at the slot's row, the loops of one value at it."""
    product = model.statements[0]
    index = in_loops(model, product).index[0]
    return lambda slot, lane=None: substitute(index, {**single_valued(model), **fixed,
                                                      model.tensorize.loops[0]: lanes.row(slot, lane)})


def single_valued(model) -> dict[str, Expr]:
    """The schedule's loops of one value, at it."""
    return {lp.name: Const(lp.begin) for lp in model.loops if isinstance(lp.end, int) and lp.end - lp.begin <= lp.step}


def row_vectors(model) -> set[str]:
    """The row vectors a tensorized fused schedule's epilogue writes (``lower/rows.py``)."""
    product = model.statements[0]
    return {s.buffer for s in model.statements[1:] if rows.is_row_vector(model, s, product)}


def where(model) -> str:
    t = model.tensorize
    return f"tensorize(indices=({', '.join(t.loops)}), mma_shape={t.mma_shape.name})"


def _row_statement(model, s: Store, number: int, product: Store, fragment: str, accumulator: ScalarType,
                   fixed: dict[str, Expr], edge: TileEdge | None, columns, lanes: rows.RowLayout,
                   vectors: set[str], seen: set[str], online=None) -> list[Stmt]:
    """A statement on a row vector ``s.buffer`` (``lower/rows.py``): the same value for every
    column, one store a row the thread holds; or a reduction over the row's columns, each
    thread's partial over its elements combined over the row's lanes."""
    t = model.tensorize
    row, col = t.loops[0], t.loops[1]
    vector, dtype = s.buffer, model.buffer(s.buffer).dtype
    out: list[Stmt] = []
    if vector not in seen:  # its first statement writes it (check.check_reads refuses a TEMP read before)
        seen.add(vector)
        out.append(rows.declared(vector, dtype, lanes, fragment))

    def element(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer == product.buffer and e.index == product.index:
            value = Load(fragment, (ELEMENT,), accumulator)
            return value if e.dtype is accumulator else Cast(value, e.dtype)
        return e

    found = reduction(s)
    if found is None:
        if not rows.column_free(s.value, col, product.buffer):
            raise rows.refuse(where(model), vector, "from values that change along the row")
        value = rows.converted(substitute(s.value, fixed), dtype)
        return out + rows.per_slot(s, value, lanes, row, vectors, fragment)
    op, x = found
    x = substitute(map_expr(map_expr(x, element), _unrounded), fixed)
    x = rows.reads(x, vectors, lanes.index(), fragment)
    x = rows.converted(online.used(x, fragment) if online is not None else x, dtype)
    partial = f"_{vector}_part{number}{fragment.removeprefix('_c')}"
    at = (lanes.partial_index(),)
    body: tuple[Stmt, ...] = (Store(partial, at, Binary(op, Load(partial, at, dtype), x, dtype)),)
    if edge is not None:
        inside = all_of((Binary("<", Var(row), edge.rows), Binary("<", Var(col), edge.cols)))
        body = (If(inside, body, "the element lies inside C"),)
    return [*out, *rows.start_partial(partial, op, dtype, lanes), FragmentMap(fragment, accumulator, row, col, body,
                                                                              columns),
            *rows.reduced(s, op, partial, dtype, lanes, fragment)]


__all__ = ["check_held", "epilogue_maps", "epilogue_statements", "in_loops", "stored_array"]
