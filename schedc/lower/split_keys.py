"""Split keys: a chain's online softmax with its keys split between blocks (flash-decoding).

A chain whose row softmax is kept online across the tiles of S's columns (``lower/online.py``)
may bind a loop of those columns, the keys, to a grid unit: ``js = schedule.split(j, 2048)`` and
``plan.bind({(i, j): BLOCK_X})`` give each block 2048 of the keys, so that a few query rows
against a long sequence of keys (decoding) fill the GPU. No block sees a whole row, so schedc
lowers the plan as two kernels (three with OUTPUT row vectors, such as a log-sum-exp):

1. *partial*: the plan as written over the block's keys, with O (the second product's C) in a
   float32 workspace with one slice per block of the split, and the row's running maximum ``M``
   and sum ``T`` after its last tile stored into workspaces of their own. Every TEMP array (S
   and the row vectors) gets a slice per part too: the parts never share one.
2. *combine*, one thread an element of O: the whole row's maximum ``m = max_p M_p``, each part's
   weight ``w_p = T_p exp(b (m - M_p))`` (``b`` the slope of the exponentials' argument in the
   maximum: ``-scale`` for ``exp((S - M) * scale)``; 0 for a part whose sum is 0, its keys all masked),
   and ``O = sum_p w_p O_p / sum_p w_p`` (the second product's epilogue op applied to it) in O's
   type: the parts' outputs, each divided by its own
   sum, weighted by their sums made relative to the whole row's maximum, in a fixed order (the
   same bits every run).
3. *rows* (with OUTPUT row vectors): one thread a row, ``m`` and the whole sum ``sum_p w_p``
   as above, then each OUTPUT statement with the running maximum and the sum replaced by them.

Before → after (``js = split(j, 2048)``, ``bind({(i, j): BLOCK_X})``, N = 8192: 4 parts)::

    peak[r] = max(peak[r], S[r, j])          peak[p R + r] = max(..., S[p R + r, 2048 p + j])
    ...                                      peak__split[p R + r] = peak[p R + r]   (after the last tile)
    O[r, l] += S[r, j] * V[j, l]             O__split[p R + r, l] += S[..] * V[2048 p + j, l]
                                             O[r, l] = sum_p w_p O__split[p R + r, l] / sum_p w_p

The workspaces are parameters of every kernel that the loader allocates once per function
(split-K's, ``lower/split.py``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import reduce

from ..errors import PlanError
from ..ir.affine import Affine
from ..ir.functions import Function
from ..ir.kernel import Binary, Buffer, Call, Cast, Const, Expr, Load, Store, Var
from ..ir.layout import row_major_strides
from ..ir.model import LoopSpec, Model
from ..ir.patterns import accumulated
from ..ir.types import ScalarType
from ..ir.walk import map_expr, substitute
from ..targets import GridUnit, MMAFragmentOp
from . import online
from .split import WORKSPACE, element_model

F32 = ScalarType.float32


@dataclass(frozen=True)
class KeySplit:
    """A chain's keys split between blocks: ``loop`` (bound to ``unit``) takes ``splits`` parts of
    ``step`` keys (the last one fewer where they do not divide the keys) along nest dimension
    ``dim``; ``target`` is the second product's C, ``peak`` and
    ``total`` the row's running maximum and the sum of its exponentials (``slope``: b of their
    argument ``g + b * peak`` in base e, a base-two exponential's times ln 2), ``outputs`` the
    OUTPUT row vectors the rows kernel sets."""

    loop: str
    unit: GridUnit
    dim: int
    splits: int
    step: int
    target: str
    peak: str
    total: str
    slope: float
    outputs: tuple[Store, ...] = ()


def find(model: Model) -> KeySplit | None:
    """The plan's split of a chain's keys between blocks, or None (no block-bound loop of S's
    columns); PlanError for a split schedc cannot combine."""
    if model.fusion is None or model.chained is None:
        return None
    product = model.statements[model.fusion.parts[0][0]]
    if len(product.index) != 2:
        return None
    columns = _variables(product.index[1])
    bound = [(b.unit, name) for b in model.bindings if b.unit.level == "block" for name in b.loops
             if model.dims[model.loop(name).dim][0] in columns and _several(model.loop(name))]
    if not bound:
        return None
    where = "bind({" + ", ".join(f"{_loops(b.loops)}: {b.unit.name}" for b in model.bindings
                                 if any(name in b.loops for _, name in bound)) + "})"
    if len(bound) > 1:
        raise PlanError(where, "several loops of the keys are bound to blocks; bind one loop of the key dimension (the "
                               "outer loop of its split) to split the keys between blocks")
    unit, name = bound[0]
    return _checked(model, unit, name, where)


def _checked(model: Model, unit: GridUnit, name: str, where: str) -> KeySplit:
    loop = model.loop(name)
    dim_name, extent = model.dims[loop.dim]
    if model.sizes:
        raise PlanError(where, f"{name} splits the keys ({dim_name}) between blocks, and the function has run-time "
                               f"sizes ({', '.join(model.size_names)}): the split's workspaces and combine are built "
                               "for fixed sizes only")
    if (loop.begin, loop.end) != (0, extent):
        raise PlanError(where, f"{name} takes {dim_name} {loop.begin}..{loop.end - 1} in steps of {loop.step}: bind "
                               f"the outer loop of a split of {dim_name}, so that the blocks take all its {extent} "
                               "keys, a part each")
    for inner in model.loops:
        if inner.dim == loop.dim and inner.name != name and loop.step % inner.step:
            raise PlanError(where, f"each block's part of {dim_name} is {loop.step} keys, which {inner.name}'s steps "
                                   f"of {inner.step} do not divide: a tile of S padded past the part would take the "
                                   f"next part's keys; split {dim_name} into parts of a multiple of {inner.step}")
    tiles = [lp for lp in model.loops if lp.dim == loop.dim and lp.name != name and lp.name in model.outside_fusion
             and model.binding_of(lp.name) is None and _several(lp)]
    if not tiles:
        raise PlanError(where, f"each block's part of {dim_name} ({loop.step} keys) is one tile of S: the combine "
                               "weighs the blocks' softmax kept online across the tiles of a part; take parts of "
                               f"several tiles (at most {extent // (2 * loop.step) or 1} parts of {2 * loop.step} "
                               "keys), or bind no loop of the keys")
    second = model.chained
    if (second.prologue_op, second.prologue_arg) != (MMAFragmentOp.SET, 0.0):
        raise PlanError(where, f"{name} splits the keys between blocks, whose outputs the combine weighs and adds: "
                               "the second product starts at zero (prologue_op=SET, prologue_arg=0)")
    form = online.derive(model)
    if form is None or form.peak is None or not form.scaled or form.rescaled != form.divisors or \
            len(form.divisors) != 1 or set(form.carried) != {form.peak, form.divisors[0]}:
        raise PlanError(where, f"{name} splits the keys between blocks: the combine of the blocks' outputs is built "
                               "for the softmax kept online (a running maximum read by exponentials, one sum of them, "
                               "the division by that sum, the second product of the exponentials and no other row "
                               "vector kept across the tiles)")
    target = model.statements[model.fusion.parts[-1][0]].buffer
    if model.buffer(target).role != "output" or len(model.buffer(target).shape) != 2:
        raise PlanError(where, f"{target}, the second product's C, is not a 2-D OUTPUT array: the combine writes the "
                               "whole row softmax's product into it")
    # the slope in base e: a base-two exponential's 2^(b M) is e^(b ln(2) M)
    slope = form.slope * math.log(2.0) if form.function is Function.FAST_EXP2 else form.slope
    return KeySplit(name, unit, loop.dim, -(-extent // loop.step), loop.step, target, form.peak, form.divisors[0],
                    slope, form.outputs)


def _loops(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _variables(e: Expr) -> set[str]:
    try:
        return set(Affine.of(e).variables())
    except TypeError:
        return set()


def _several(lp: LoopSpec) -> bool:
    return not isinstance(lp.end, int) or lp.end - lp.begin > lp.step


# -- the kernels' models ---------------------------------------------------------------------------


def models(model: Model, keys: KeySplit) -> tuple[Model, ...]:
    """The function's kernels as models, in launch order: partial, combine (, rows)."""
    spaces = workspaces(model, keys)
    partial = partial_model(model, keys, spaces)
    read = {name: dataclasses.replace(b, role="input") for name, b in spaces.items()}
    out = [partial, combine_model(model, keys, read)]
    if keys.outputs:
        out.append(rows_model(model, keys, read))
    return tuple(out)


def workspaces(model: Model, keys: KeySplit) -> dict[str, Buffer]:
    """The parts' outputs (float32, a slice of C's shape a part) and their rows' maxima and sums."""
    o = model.buffer(keys.target)
    rows = model.buffer(keys.peak).shape[0]
    shapes = {"outputs": (keys.splits * o.shape[0], o.shape[1]), "peaks": (keys.splits * rows,),
              "totals": (keys.splits * rows,)}
    names = {"outputs": f"{keys.target}__split", "peaks": f"{keys.peak}__split", "totals": f"{keys.total}__split"}
    return {what: Buffer(names[what], F32, shape, row_major_strides(shape), WORKSPACE, "output")
            for what, shape in shapes.items()}


def partial_model(model: Model, keys: KeySplit, spaces: dict[str, Buffer]) -> Model:
    """The plan over each block's part of the keys: a dimension of its own numbers the parts
    (the bound loop runs over it), every TEMP array and C take a slice a part, the user's OUTPUT
    row vectors are left to the rows kernel, and the rows' maxima and sums are stored after the
    last tile (an OUTPUT row vector statement of their own, before the second product)."""
    dim_name = model.dims[keys.dim][0]
    part = Var(f"{dim_name}__split")
    dims = list(model.dims)
    dims[keys.dim] = (dim_name, keys.step)
    dims.append((part.name, keys.splits))
    rejoin = {dim_name: Binary("+", Binary("*", Const(keys.step), part), Var(dim_name))}
    loops = tuple(LoopSpec(lp.name, len(dims) - 1, 0, keys.splits, 1) if lp.name == keys.loop else lp
                  for lp in model.loops)
    temps = {b.name: b.shape[0] for b in model.buffers if b.role == "temp"}
    o = model.buffer(keys.target)

    local = {dim_name: Var(f"{dim_name}__part")}  # a TEMP array's key within the part, kept through the rejoin

    def index(buffer: str, subscripts: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """A TEMP array's subscripts in the part's slice, at the part's own key."""
        if buffer not in temps:
            return subscripts
        subscripts = tuple(substitute(i, local) for i in subscripts)
        return (_at(part, temps[buffer], subscripts[0]), *subscripts[1:])

    def sliced(s: Store) -> Store:
        value = map_expr(s.value, lambda e: Load(e.buffer, index(e.buffer, e.index), e.dtype)
                         if isinstance(e, Load) else e)
        back = {f"{dim_name}__part": Var(dim_name)}
        s = Store(s.buffer, tuple(substitute(substitute(i, rejoin), back) for i in index(s.buffer, s.index)),
                  substitute(substitute(value, rejoin), back))
        if s.buffer != keys.target:
            return s
        at = (_at(part, o.shape[0], s.index[0]), s.index[1])
        space = spaces["outputs"]
        return Store(space.name, at, Binary("+", Load(space.name, at, F32), _as(accumulated(s), F32), F32))

    fusion = model.fusion
    dropped = {n for n, s in enumerate(model.statements) if s in keys.outputs}
    start = next(s for s in model.statements if s.buffer == keys.peak)
    at = sliced(start).index
    stores = tuple(Store(spaces[what].name, at, Load(vector, at, F32))
                   for what, vector in (("peaks", keys.peak), ("totals", keys.total)))
    statements, parts, unfused = [], [], []
    for number, members in enumerate(fusion.parts):
        if number == len(fusion.parts) - 1:  # the rows' maxima and sums, a part before the second product
            parts.append(tuple(range(len(statements), len(statements) + len(stores))))
            unfused.append(())
            statements += stores
        kept = [n for n in members if n not in dropped]
        if not kept:
            continue
        parts.append(tuple(range(len(statements), len(statements) + len(kept))))
        unfused.append(fusion.unfused[number])
        statements += [sliced(model.statements[n]) for n in kept]
    buffers = [_sliced_buffer(b, keys.splits) if b.name in temps else b for b in model.buffers
               if b.name != keys.target and not any(s.buffer == b.name for s in keys.outputs)]
    buffers += list(spaces.values())
    caches = tuple(dataclasses.replace(c, array=spaces["outputs"].name) if c.array == keys.target else c
                   for c in model.caches)
    # a last part of fewer keys: the loop over the parts counts ``step`` keys a part in the split's sums
    groups = tuple(dataclasses.replace(g, scaled=(*g.scaled, (keys.loop, keys.step))) if keys.loop in g.members
                   else g for g in model.groups)
    return dataclasses.replace(
        model, function=f"{model.function}__partial", buffers=tuple(buffers), dims=tuple(dims),
        statements=tuple(statements), loops=loops, groups=groups, caches=caches,
        chained=dataclasses.replace(model.chained, epilogue_op=MMAFragmentOp.NONE, epilogue_arg=0.0),
        fusion=dataclasses.replace(fusion, parts=tuple(parts), unfused=tuple(unfused)))


def _at(part: Var, rows: int, index: Expr) -> Expr:
    return Binary("+", Binary("*", part, Const(rows)), index)


def _sliced_buffer(b: Buffer, splits: int) -> Buffer:
    shape = (splits * b.shape[0], *b.shape[1:])
    return dataclasses.replace(b, shape=shape, strides=row_major_strides(shape))


def _weights(keys: KeySplit, spaces: dict[str, Buffer], rows: int, row: Expr, top: Expr,
             outputs: list[Expr] | None = None) -> list[Expr]:
    """Each part's weight at row ``row`` relative to the row's maximum ``top``: its sum times
    ``exp(b (top - M_p))`` (times ``outputs[p]``, the part's output, where given), 0 where the part
    saw no key (its sum 0, its output 0 / 0, its maximum the start)."""
    out = []
    for p in range(keys.splits):
        at = (Binary("+", Const(p * rows), row),)
        peak, total = Load(spaces["peaks"].name, at, F32), Load(spaces["totals"].name, at, F32)
        grown = Call(Function.EXP, (Binary("*", Const(keys.slope, F32), Binary("-", top, peak, F32), F32),), F32)
        weight = Binary("*", total, grown, F32)
        if outputs is not None:
            weight = Binary("*", weight, outputs[p], F32)
        empty = Binary("==", total, Const(0.0, F32), ScalarType.bool)
        out.append(Call(Function.SELECT, (empty, Const(0.0, F32), weight), F32))
    return out


def _maximum(keys: KeySplit, spaces: dict[str, Buffer], rows: int, row: Expr) -> Expr:
    peaks = [Load(spaces["peaks"].name, (Binary("+", Const(p * rows), row),), F32) for p in range(keys.splits)]
    return reduce(lambda a, b: Binary("max", a, b, F32), peaks)


def _sum(terms: list[Expr]) -> Expr:
    return reduce(lambda a, b: Binary("+", a, b, F32), terms)


def _domain(model: Model, *indices: Expr) -> tuple[tuple[str, int], ...]:
    """The nest dimensions the subscripts read, in the nest's order, with their extents."""
    used = set().union(*(_variables(i) for i in indices))
    return tuple((name, n) for name, n in model.dims if name in used)


def combine_model(model: Model, keys: KeySplit, spaces: dict[str, Buffer]) -> Model:
    """One thread an element of C: the row's maximum and whole sum (each kept in an element-sized
    float32 workspace, written and read by the thread alone), then C's element."""
    o = model.buffer(keys.target)
    second = model.statements[model.fusion.parts[-1][0]]
    start = next(s for s in model.statements if s.buffer == keys.peak)
    rows, row = model.buffer(keys.peak).shape[0], start.index[0]
    dims = _domain(model, *second.index)
    if not _variables(row) <= {name for name, _ in dims}:
        raise PlanError(f"bind({{...{keys.loop}...: {keys.unit.name}}})",
                        f"the rows of {keys.peak} are not rows of {keys.target}: the combine takes each row's "
                        "maximum and sum for the elements of C in it")
    top, whole = (Buffer(f"{keys.target}__{what}", F32, o.shape, row_major_strides(o.shape), WORKSPACE, "output")
                  for what in ("top", "whole"))
    here = second.index
    at_top, at_whole = Load(top.name, here, F32), Load(whole.name, here, F32)
    outputs = [Load(spaces["outputs"].name, (Binary("+", Const(p * o.shape[0]), here[0]), here[1]), F32)
               for p in range(keys.splits)]
    value = _epilogue(model, Binary("/", _sum(_weights(keys, spaces, rows, row, at_top, outputs)), at_whole, F32))
    statements = (Store(top.name, here, _maximum(keys, spaces, rows, row)),
                  Store(whole.name, here, _sum(_weights(keys, spaces, rows, row, at_top))),
                  Store(o.name, here, value if o.dtype is F32 else Cast(value, o.dtype)))
    return element_model(model, f"{model.function}__combine", dims,
                         (o, spaces["outputs"], spaces["peaks"], spaces["totals"], top, whole), statements,
                         together=True)


def _epilogue(model: Model, value: Expr) -> Expr:
    """The second product's epilogue op on C's whole value (the partial kernel leaves it out)."""
    op, arg = model.chained.epilogue_op, model.chained.epilogue_arg
    if op is MMAFragmentOp.SCALE:
        return Binary("*", value, Const(float(arg), F32), F32)
    if op is MMAFragmentOp.ReLU:
        return Binary("max", value, Const(0.0, F32), F32)
    if op is MMAFragmentOp.SET:
        return Const(float(arg), F32)
    return value


def rows_model(model: Model, keys: KeySplit, spaces: dict[str, Buffer]) -> Model:
    """One thread a row: its maximum and whole sum, then each OUTPUT row vector's statement with
    the running maximum and the sum read from them."""
    start = next(s for s in model.statements if s.buffer == keys.peak)
    rows, row = model.buffer(keys.peak).shape[0], start.index[0]
    dims = _domain(model, row)
    top, whole = (Buffer(f"{keys.peak}__{what}", F32, (rows,), (1,), WORKSPACE, "output") for what in ("top", "whole"))
    at_top, at_whole = Load(top.name, (row,), F32), Load(whole.name, (row,), F32)
    whole_rows = {keys.peak: at_top, keys.total: at_whole}
    outputs = tuple(Store(s.buffer, s.index, map_expr(s.value, lambda e: whole_rows.get(e.buffer, e)
                                                      if isinstance(e, Load) else e)) for s in keys.outputs)
    statements = (Store(top.name, (row,), _maximum(keys, spaces, rows, row)),
                  Store(whole.name, (row,), _sum(_weights(keys, spaces, rows, row, at_top))), *outputs)
    buffers = (*(model.buffer(s.buffer) for s in keys.outputs), spaces["peaks"], spaces["totals"], top, whole)
    return element_model(model, f"{model.function}__rows", dims, buffers, statements, together=True)


def _as(e: Expr, dtype: ScalarType) -> Expr:
    return e if getattr(e, "dtype", None) == dtype else Cast(e, dtype)
