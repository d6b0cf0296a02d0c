"""Tensorization: match ``C += A * B`` over the three tensor loops and emit warp tile ops.

The operands' tiles come from the access relations (poly): a fragment's element (r, c) lies at
``origin + r * row_stride + c * col_stride`` in the array's storage, where the strides are the
linear-offset coefficients of the tensor loops.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass

from .. import poly
from ..errors import CacheError, PlanError
from ..instructions import FAMILIES, WARPGROUP, Family, family_for, vector_width, wgmma_accumulator
from ..ir.affine import Affine, extent_expr
from ..ir.kernel import (
    Binary,
    Cast,
    Const,
    Expr,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentFill,
    FragmentLoad,
    FragmentMma,
    FragmentStore,
    If,
    Load,
    PrivateArray,
    SharedBuffer,
    Stmt,
    Store,
    TileEdge,
    Var,
    all_of,
)
from ..ir.types import ScalarType
from ..poly import Guard, PolyFacts
from ..targets import MemorySpace, MMAFragmentOp
from . import fused, rows


@dataclass(frozen=True)
class Operand:
    """One matrix of the product: where its tile starts and how it is laid out."""

    buffer: str
    subscripts: tuple[Affine, ...]  # the tile's first element (tile loops at their first value)
    row_stride: int  # storage elements between rows (m for A and C, k for B)
    col_stride: int
    pass_shift: tuple[Affine, ...] = ()  # subscript change from one pass to the next (A, B)
    subscripts_over_loops: tuple[Affine, ...] = ()  # the access's subscripts, every loop free
    ldmatrix: bool = False  # in shared memory, aligned for ldmatrix (families with lane layouts)
    row_phase: int | None = None  # in a swizzled tile: every tile's first stored row mod 8, if one


@dataclass(frozen=True)
class TensorMatch:
    a: Operand
    b: Operand
    c: Operand
    precision: str
    operand_type: ScalarType
    accumulator_type: ScalarType
    reductions: tuple[str, ...]  # serial loops outside the tile that C does not depend on
    # Partial tiles (a split that does not divide its dimension): the guards the loops still
    # obey, or None when every tile is whole. The other guards are dropped: whole tiles are
    # computed, operands padded with zeros in shared memory, C stored inside its bounds only.
    guards: tuple[Guard, ...] | None = None
    # an element of C inside its bounds that a whole tile holds past the nest's edge and another tile
    # stores (poly.stored_past_edge: another head's rows), or None; then the rows (columns) of a tile
    # inside the nest, from its origin (Affines of the loops outside the tile), which C's stores keep to
    c_past: tuple[int, ...] | None = None
    c_limits: tuple[tuple[Affine, ...], tuple[Affine, ...]] = ((), ())
    c_axes: tuple[int, int] | None = None  # C's dimensions of a tile's rows and columns, at edges
    # one past the last element of C the nest writes, per dimension (poly.reach; a run-time size's Affine)
    c_bounds: tuple[int | Affine, ...] = ()
    # why C's tiles cannot be loaded and stored by tensor cores in place (then every tile goes
    # through the warp's slice of shared memory, element by element), or None
    c_staged: str | None = None
    family: str = "wmma"  # the instruction family (schedc.instructions) that multiplies the tiles

    @property
    def instructions(self) -> Family:
        return FAMILIES[self.family]

    def kept_guards(self, facts: PolyFacts) -> tuple[Guard, ...]:
        return facts.guards if self.guards is None else self.guards


def where(model) -> str:
    t = model.tensorize
    return f"tensorize(indices=({', '.join(t.loops)}), mma_shape={t.mma_shape.name})"


def match(model, facts: PolyFacts, target) -> TensorMatch:
    """Check the tensorized loops and statement; describe the three tiles."""
    try:
        return _match(model, facts, target)
    except PlanError as error:
        error.loops = error.loops or model.tensorize.loops
        raise


def _match(model, facts: PolyFacts, target) -> TensorMatch:
    t = model.tensorize
    here = where(model)
    _check_loops(model, facts, here)
    epilogue = fused.epilogue_statements(model, here)
    if len(model.statements) != 1 + len(epilogue):
        raise PlanError(
            here, f"a tensorized nest has one statement C += A * B, not {len(model.statements)} (an epilogue after "
                  "the product is a nest of its own, fused: acc.fuse((product, epilogue), partial=2))"
        )
    m, n, k = t.loops
    a_load, b_load, c_buffer = _match_statement(here, model.statements[0])
    a_sub, b_sub, c_sub = (
        _subscripts(facts, x) for x in (a_load.buffer, b_load.buffer, c_buffer)
    )
    if _uses(a_sub, n) or not _uses(a_sub, m):
        a_load, b_load = b_load, a_load
        a_sub, b_sub = b_sub, a_sub
    roles = {"C": (c_sub, (m, n), k), "A": (a_sub, (m, k), n), "B": (b_sub, (k, n), m)}
    _check_roles(here, roles, {"C": c_buffer, "A": a_load.buffer, "B": b_load.buffer})
    operand_type = a_load.dtype
    if b_load.dtype != operand_type:
        raise PlanError(
            here,
            f"A is {operand_type.value} but B is {b_load.dtype.value}; the operands must have one type",
        )
    accumulator = fragment_type(model, c_buffer)
    fused.check_held(model, here, (model.statements[0], *epilogue), accumulator)
    try:
        target.tensor_core_info.mode_for(operand_type, accumulator, t.mma_shape)
        family = family_for(target, operand_type, accumulator, t.mma_shape, t.instruction, placed=bool(epilogue))
    except LookupError as reason:
        raise PlanError(here, str(reason)) from None
    precision = family.mode(operand_type, accumulator, t.mma_shape).precision
    mma_k = t.mma_shape.mnk[2]
    a = _operand(here, model, facts, "A", a_load.buffer, a_sub, (m, k), k, mma_k)
    b = _operand(here, model, facts, "B", b_load.buffer, b_sub, (k, n), k, mma_k)
    c = _operand(here, model, facts, "C", c_buffer, c_sub, (m, n), None, 0)
    reductions = tuple(name for name in model.serial_loops if not _uses(c_sub, name))
    staged = global_problem(model, "C", c, family) if family.edge_scratch else None
    if family.edge_scratch and accumulator is not model.buffer(c_buffer).dtype and staged is None:
        staged = (f"{c_buffer} is {model.buffer(c_buffer).dtype.value} and its fragments {accumulator.value} "
                  f"(element_type): {family.name} converts no tile in place")
    tm = TensorMatch(a, b, c, precision, operand_type, accumulator, reductions, c_staged=staged,
                     family=family.name)
    return _edges(here, model, facts, tm)


def _edges(here: str, model, facts: PolyFacts, tm: TensorMatch) -> TensorMatch:
    """Partial tiles: guards on the tile, on register-blocked loops or on warps are dropped
    (whole tiles, padded); guards on serial loops and blocks stay, except in a wgmma plan on
    the loops at and inside its operands' cache index, whose every value the products unroll."""
    _, blocked = accumulator_cache(model, tm)
    padded = {*model.tensorize.loops, *blocked}
    padded |= {b for binding in model.bindings if binding.unit.level != "block" for b in binding.loops}
    if tm.instructions.issued_by == "warpgroup":
        padded |= set(unrolled_steps(model))
    kept = tuple(g for g in facts.guards if not g.affine.variables() & padded)
    if len(kept) != len(facts.guards):
        tm = dataclasses.replace(tm, guards=kept)
    tm = dataclasses.replace(tm, c_bounds=poly.reach(model, tm.c.buffer))
    partial = len(kept) != len(facts.guards) and poly.first_outside(model, tm.c.buffer, kept, tm.c_bounds) is not None
    past = poly.stored_past_edge(model, tm.c.buffer, kept, tm.c_bounds, padded) if len(kept) != len(facts.guards) \
        else None
    if past is not None:
        tm = dataclasses.replace(tm, c_past=past, c_limits=_nest_limits(here, model, facts, kept))
        partial = True
    if not partial and tm.c_staged is None:
        return tm
    axes = []
    for loop in model.tensorize.loops[:2]:
        dims = [d for d, sub in enumerate(tm.c.subscripts_over_loops) if sub.coeff(loop)]
        if len(dims) != 1 or tm.c.subscripts_over_loops[dims[0]].coeff(loop) != 1:
            why = "last tiles are partial" if partial else "tiles go through shared memory"
            raise PlanError(here, f"{tm.c.buffer}'s {why}, which needs {loop} to step "
                                  f"through one dimension of {tm.c.buffer} by 1")
        axes.append(dims[0])
    return dataclasses.replace(tm, c_axes=tuple(axes))


def _nest_limits(here: str, model, facts: PolyFacts, kept) -> tuple[tuple[Affine, ...], tuple[Affine, ...]]:
    """The rows and columns of a tile inside the nest, counted from its origin, where its padding
    lies inside C (its rows past the nest are another head's): from each dropped guard that bounds
    the tile's row (column) loop from above, ``g >= 0`` with the loop's coefficient -1, the guard
    at the loop's first value, plus one (the tile keeps the smallest)."""
    limits = []
    for loop in model.tensorize.loops[:2]:
        found = []
        for g in facts.guards:
            if g in kept or not g.affine.coeff(loop):
                continue
            if g.equality or g.affine.coeff(loop) != -1 or model.loop(loop).step != 1:
                raise PlanError(here, f"the tiles past the nest's edge hold elements of {model.tensorize.loops} "
                                      f"that other tiles store, and the edge ({g.affine} >= 0) is not an upper "
                                      f"bound of {loop} alone: split the loops by sizes that divide the nest",
                                loops=model.tensorize.loops)
            found.append(g.affine.substitute({loop: Affine((), 0)}).plus(Affine((), 1)))
        limits.append(tuple(found))
    return limits[0], limits[1]


def unrolled_steps(model) -> tuple[str, ...]:
    """A wgmma plan's serial loops at and inside its operands' SHARED cache index: each tile
    of the ring is every value of them (the products are unrolled over their whole ranges)."""
    index = next((c.index for c in model.caches if c.location is MemorySpace.SHARED), None)
    serial = list(model.serial_loops)
    return tuple(serial[serial.index(index):]) if index in serial else ()


def fragment_type(model, c_buffer: str) -> ScalarType:
    """The accumulator's type: an MMA_FRAGMENT cache's ``element_type``, else C's own."""
    for cache in model.caches:
        if cache.location is MemorySpace.MMA_FRAGMENT and cache.array == c_buffer and cache.element_type:
            return cache.element_type
    return model.buffer(c_buffer).dtype


def check_operands(model, tm: TensorMatch, cached: set[str]) -> None:
    """Operands read from global memory: the family's layout rules, and with partial tiles, whole
    tiles that stay inside the array (else the operand must come through shared memory, where
    the copy pads the tile with zeros); then ``check_padding``."""
    for role, operand in (("A", tm.a), ("B", tm.b)):
        if operand.buffer in cached:
            continue
        check_global(model, role, operand, tm.instructions)
        if tm.guards is None:
            continue
        outside = poly.first_outside(model, operand.buffer, tm.guards)
        if outside is not None:
            iteration, element, sizes = outside
            point = ", ".join(f"{n}={v}" for n, v in iteration.items())
            shape = "[" + ", ".join(map(str, model.buffer(operand.buffer).shape)) + "]"
            serial = model.serial_loops
            index = (serial[0] if len(serial) == 1 else f"<one of {', '.join(serial)}>" if serial
                     else "<a serial loop outside the tile: split k and use its outer loop>")
            raise PlanError(
                where(model),
                f"the last tiles are partial, and tensor cores compute whole "
                f"{'x'.join(map(str, model.tensorize.mma_shape.mnk))} tiles: iteration ({point}) of a whole "
                f"tile reads {operand.buffer}[{', '.join(map(str, element))}] (operand {role}) outside "
                f"{operand.buffer}{shape}{poly.when(sizes)}. Cache {operand.buffer} in shared memory, where the copy "
                f"pads its tiles with zeros: plan.cache({operand.buffer}, index={index}, "
                "location=SHARED)",
                loops=model.tensorize.loops,
            )
    check_padding(model, tm, cached)


def check_padding(model, tm: TensorMatch, zero_filled: set[str]) -> None:
    """Whole tiles past the nest's edge add nothing to what is stored: where the nest covers
    only part of its arrays (a nest smaller than A, B or C), the padded iterations would read
    elements that are not zeros and write elements the nest leaves alone."""
    if tm.guards is None:
        return
    product = (tm.c.buffer, tm.a.buffer, tm.b.buffer)
    found = poly.padding_witness(model, tm.guards, product, zero_filled)
    if found is None:
        return
    point, elements = found
    c, a, b = (f"{x}[{', '.join(map(str, elements[x]))}]" for x in product)
    iteration = ", ".join(f"{n}={v}" for n, v in point.items())
    nest = "x".join(str(d) for _, d in model.dims)
    shapes = ", ".join(f"{x}{list(model.buffer(x).shape)}" for x in product)
    tile = "x".join(map(str, model.tensorize.mma_shape.mnk))
    inside = [sum(point[lp.name] for lp in model.loops if lp.dim == d) for d in range(len(model.dims))]
    if all(0 <= v < extent for v, (_, extent) in zip(inside, model.dims) if isinstance(extent, int)):
        splits = _tile_splits(model)
        raise PlanError(where(model), f"tensor cores compute whole {tile} tiles; iteration ({iteration}) of a whole "
                                      f"tile lies inside the {nest} nest but past its split's tile{splits}: it would "
                                      f"add {a} * {b} to {c} outside the split's own iterations. Split each "
                                      f"dimension by a multiple of the {tile} tile (its k by the passes' k)",
                                      loops=model.tensorize.loops)
    raise PlanError(where(model), f"tensor cores compute whole {tile} "
                                  f"tiles; iteration ({iteration}) of a whole tile lies past the {nest} nest but "
                                  f"inside the arrays ({shapes}): it would add {a} * {b} to {c}. Cache the "
                                  "operands in shared memory (their copies fill zeros past the nest's edge), or "
                                  "split by sizes that divide the nest", loops=model.tensorize.loops)


def _tile_splits(model) -> str:
    """`` (jj takes 24 values, not a multiple of 16)``: the tensorized loops' outer loops whose
    values are not whole tensor tiles, as the script split them."""
    t = model.tensorize
    m, n, k = t.mma_shape.mnk
    found = []
    for name, size in zip(t.loops, (m, n, k * t.passes)):
        lp = model.loop(name)
        outer = [o for o in model.loops if o.dim == lp.dim and o.step > lp.step and o.name != name]
        parent = min(outer, key=lambda o: o.step, default=None)
        if parent is not None and isinstance(parent.end, int) and (parent.end - parent.begin) % size:
            found.append(f"{parent.name} takes {parent.end - parent.begin} values, not a multiple of {size}")
    return f" ({'; '.join(found)})" if found else ""


def _check_loops(model, facts: PolyFacts, here: str) -> None:
    t = model.tensorize
    mma_m, mma_n, mma_k = t.mma_shape.mnk
    innermost = {lp.name for lp in model.loops[-3:]}
    if innermost != set(t.loops):
        order = ", ".join(lp.name for lp in model.loops)
        raise PlanError(
            here, f"{', '.join(t.loops)} must be the innermost three loops; the order is ({order})"
        )
    for name, want in zip(t.loops, (mma_m, mma_n, mma_k * t.passes)):
        unit = model.binding_of(name)
        if unit is not None:
            raise PlanError(
                here, f"{name} is bound to {unit.name}; tensorized loops run inside one warp"
            )
        got = facts.loop(name).extent
        if got != want and model.loop(name).extent != want:  # a split by ``want`` of fewer values: padded
            raise PlanError(
                here,
                f"{name} has {got} iterations; {t.mma_shape.name} with {t.passes} pass(es) needs "
                f"{want}: split by the sizes target.tensor_core_info.compute_tensor_splits gives (a dimension "
                f"smaller than one tile too: split it by {want}, and the tile is padded past the nest's edge)",
            )
    for b in model.bindings:
        if b.unit.level == "thread":
            raise PlanError(
                here,
                f"{b.unit.name} is bound to {', '.join(b.loops)}; tensorized plans bind warps "
                "and blocks, not threads",
            )


def _match_statement(here: str, store: Store) -> tuple[Load, Load, str]:
    """``C = C + A * B`` up to casts, in either operand order."""
    value = _strip(store.value)
    if isinstance(value, Binary) and value.op == "+":
        for acc, product in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
            acc, product = _strip(acc), _strip(product)
            if (
                isinstance(acc, Load)
                and acc.buffer == store.buffer
                and acc.index == store.index
                and isinstance(product, Binary)
                and product.op == "*"
            ):
                x, y = _strip(product.lhs), _strip(product.rhs)
                if isinstance(x, Load) and isinstance(y, Load):
                    _check_exact_product(here, product, value.dtype, x, y)
                    return x, y, store.buffer
    raise PlanError(here, "the statement must be C[m, n] += A[m, k] * B[k, n]")


def _check_exact_product(here: str, product: Binary, total: ScalarType | None, x: Load, y: Load) -> None:
    """Integers multiplied in a type narrower than their sum's wrap there (int8: at 127), as the
    nest says and a SIMT plan computes; the tensor cores multiply exactly into the accumulator's
    type: refused, with the casts that say what the tensor cores compute."""
    kind = product.dtype
    if kind is None or total is None or kind.is_float or total.is_float or kind.size >= total.size:
        return
    shown = (f"acc.cast({x.buffer}[...], {total.value}) * acc.cast({y.buffer}[...], {total.value})")
    raise PlanError(here, f"{x.buffer} * {y.buffer} multiplies {kind.value} values in {kind.value} (the product "
                          f"wraps past its range), and the tensor cores multiply them exactly into {total.value}: "
                          f"write the product in {total.value}, {shown}")


def _strip(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.operand
    return expr


def _subscripts(facts: PolyFacts, buffer: str) -> tuple[Affine, ...]:
    return next(a.subscripts for a in facts.accesses if a.array == buffer)


def _uses(subscripts: tuple[Affine, ...], loop: str) -> bool:
    return any(s.coeff(loop) for s in subscripts)


def _check_roles(here: str, roles: dict, buffers: dict) -> None:
    for role, (subscripts, needed, absent) in roles.items():
        pair = f"{needed[0]} and {needed[1]}"
        for name in needed:
            if not _uses(subscripts, name):
                raise PlanError(
                    here,
                    f"{role} ({buffers[role]}) does not depend on {name}; {role} must be indexed "
                    f"by {pair}",
                )
        if _uses(subscripts, absent):
            raise PlanError(
                here,
                f"{role} ({buffers[role]}) depends on {absent}; {role} must be indexed by {pair} only",
            )


def _operand(here, model, facts, role, buffer, subscripts, axes, k, mma_k) -> Operand:
    spec = model.buffer(buffer)
    rows, cols = axes

    def linear(loop: str) -> int:
        per_value = sum(s * sub.coeff(loop) for s, sub in zip(spec.strides, subscripts))
        return per_value * model.loop(loop).step

    row_stride, col_stride = linear(rows), linear(cols)
    if 1 not in (row_stride, col_stride):
        raise PlanError(
            here,
            f"{role} ({buffer}) has storage strides {row_stride} and {col_stride} along {rows} "
            f"and {cols}; one must be 1 for tensor-core loads",
        )
    tile = model.tensorize.loops
    firsts = {name: Affine((), facts.loop(name).first) for name in tile}
    origin = tuple(s.substitute(firsts) for s in subscripts)
    shift: tuple[Affine, ...] = ()
    if k is not None:
        shift = tuple(Affine((), sub.coeff(k) * model.loop(k).step * mma_k) for sub in subscripts)
    return Operand(buffer, origin, row_stride, col_stride, shift, subscripts)


def check_global(model, role: str, operand: Operand, family: Family) -> None:
    """A tile read from global memory: the family's leading-dimension and alignment rules."""
    problem = global_problem(model, role, operand, family)
    if problem is not None:
        raise PlanError(where(model), f"{problem} (or cache {operand.buffer} in shared memory)",
                        loops=model.tensorize.loops)


def global_problem(model, role: str, operand: Operand, family: Family) -> str | None:
    """Why the family cannot load (or store) the operand's tiles in global memory directly:
    a leading dimension that is not a multiple of its ``leading_bytes``, or tiles not
    ``operand_align``-byte aligned (wmma: 16 and 32; families that move elements: none)."""
    spec = model.buffer(operand.buffer)
    ld = operand.row_stride if operand.col_stride == 1 else operand.col_stride
    need = family.leading_bytes
    if need and (ld * spec.dtype.size) % need:
        return (f"{role} ({operand.buffer}) has a leading dimension of {ld} elements "
                f"({ld * spec.dtype.size} bytes); tensor-core loads need a multiple of {need} bytes")
    if not family.operand_align:
        return None
    return misalignment(model, f"{role} ({operand.buffer}) tiles", spec.strides, spec.dtype.size, operand.subscripts,
                        family.operand_align)


def misalignment(model, what: str, strides, size: int, origin, align: int) -> str | None:
    """Why tiles at ``origin`` are not all ``align``-byte aligned (each loop's step and the
    first offset checked), or None."""
    linear = Affine((), 0)
    for stride, sub in zip(strides, origin):
        linear = linear.plus(sub.scale(stride))
    steps = [c * model.loop(name).step for name, c in linear.terms]
    start = linear.const + sum(c * model.loop(name).begin for name, c in linear.terms)
    misaligned = [x for x in (*steps, start) if (x * size) % align]
    if not misaligned:
        return None
    return (f"{what} start at element offset {str(linear)}, which moves by "
            f"{misaligned[0]} elements ({misaligned[0] * size} bytes); tensor-core "
            f"loads need {align}-byte aligned tiles")


# -- emission ----------------------------------------------------------------------------------


def blocked_innermost(model):
    """Accera's order for register blocking, ``(k, ii, jj, iii, jjj, kk)`` with C kept in
    fragments at ``k``: the serial loops inside the MMA_FRAGMENT cache's index that index C
    (``iii``, ``jjj``: a warp's several tiles) moved inside those that do not (``kk``), right
    before the tensorized loops. Each element of C receives the same products in the same order
    (the moved loops do not index C; the loops they pass choose disjoint tiles of C). Left as
    is (``accumulator_cache`` explains) where a cache (this one included), trigger or unroll
    names a loop that would move, or the nest has more than one statement."""
    cache = next((c for c in model.caches if c.location is MemorySpace.MMA_FRAGMENT), None)
    if model.tensorize is None or cache is None or cache.index not in model.serial_loops \
            or len(model.statements) != 1:
        return model
    names = [name for name, _ in model.dims]
    c_dims = {names.index(v) for e in model.statements[0].index for v in _variables(e) if v in names}
    serial = model.serial_loops[model.serial_loops.index(cache.index):]
    blocked = [n for n in serial if model.loop(n).dim in c_dims]
    if not blocked:
        return model
    moved = [n for n in serial[serial.index(blocked[0]):] if n not in blocked]
    named = {c.index for c in model.caches if c is not cache} | {c.trigger for c in model.caches} \
        | set(model.unrolled)
    if not moved or (named | {cache.index}) & {*blocked, *moved}:
        return model
    spots = iter([*moved, *blocked])
    order = [next(spots) if lp.name in {*moved, *blocked} else lp.name for lp in model.loops]
    by_name = {lp.name: lp for lp in model.loops}
    return dataclasses.replace(model, loops=tuple(by_name[n] for n in order))


def _variables(e) -> set[str]:
    """The names of the variables an expression reads."""
    if isinstance(e, Var):
        return {e.name}
    found: set[str] = set()
    for field in dataclasses.fields(e) if dataclasses.is_dataclass(e) else ():
        value = getattr(e, field.name)
        for part in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(part):
                found |= _variables(part)
    return found


def accumulator_cache(model, tm: TensorMatch) -> tuple[str | None, tuple[str, ...]]:
    """The loop C's fragments are kept across (``plan.cache(C, index, MMA_FRAGMENT)``), checked,
    and the serial loops inside it that index C (register blocking: one fragment per value);
    without such a cache the loop ``register_promotion`` picks, or None, and ()."""
    caches = [c for c in model.caches if c.location is MemorySpace.MMA_FRAGMENT]
    if not caches:
        return register_promotion(model, tm), ()
    cache = caches[0]
    here = f"cache({cache.array}, index={cache.index}, location=MMA_FRAGMENT)"
    tile = model.tensorize.loops
    if cache.array != tm.c.buffer:
        raise CacheError(here, f"{cache.array} is not the accumulator; the tensorized statement "
                               f"accumulates into {tm.c.buffer}", loops=(cache.index,))
    if cache.index in tile:  # Accera's cache of one tile: its fragment around each product
        return register_promotion(model, tm), ()
    unit = model.binding_of(cache.index)
    if unit is not None:
        raise CacheError(here, f"{cache.index} is bound to {unit.name}; cache at a loop that runs in "
                               "each warp", loops=(cache.index,))
    serial = list(model.serial_loops[model.serial_loops.index(cache.index):])
    blocked = tuple(n for n in serial if _uses(tm.c.subscripts_over_loops, n))
    if blocked and tuple(serial[-len(blocked):]) != blocked:
        inner = next(n for n in serial[serial.index(blocked[0]):] if n not in blocked)
        raise CacheError(
            here,
            f"{', '.join(blocked)} ({'at and ' if blocked[0] == cache.index else ''}inside {cache.index}) index "
            f"{tm.c.buffer}: each warp keeps one "
            f"fragment per tile of {tm.c.buffer}, and the loops that choose the tile must be the "
            f"innermost serial loops, but {inner} runs inside {blocked[0]}; reorder so that "
            f"{', '.join(blocked)} come right before the tensorized loops",
            loops=(blocked[0], inner),
        )
    tiles = math.prod(len(_values(model, n)) for n in blocked)
    family = tm.instructions
    registers = tiles * family.registers("accumulator", model.tensorize.mma_shape.mnk, tm.precision,
                                         tm.accumulator_type)
    limit = MAX_WARPGROUP_REGISTERS if family.issued_by == "warpgroup" else MAX_FRAGMENT_REGISTERS
    if registers > limit:
        raise CacheError(here, f"{', '.join(blocked)} give each {family.issued_by} {tiles} tile(s) of "
                               f"{tm.c.buffer}: {registers} registers per thread for the fragments alone, over "
                               f"{limit}", loops=blocked)
    return cache.index, blocked


MAX_FRAGMENT_REGISTERS = 128  # accumulators may take half of a thread's 255 registers
MAX_WARPGROUP_REGISTERS = 208  # wgmma consumers: up to 232 registers with setmaxnreg, 24 for the rest


def register_promotion(model, tm: TensorMatch) -> str | None:
    """Without an MMA_FRAGMENT cache, C's tiles still stay in fragments across the serial loop
    right around the tile when nothing in that loop touches global memory: it does not index C
    and both operands come from shared memory (their copies run outside it). This is the
    promotion to registers a C++ compiler makes of such a loop when it can see that nothing else
    writes C; done here it does not hang on what the compiler can see (an ldmatrix asm hides it).
    The result is the same: only this warp touches its tile of C."""
    serial = model.serial_loops
    if not serial:
        return None
    loop = serial[-1]  # inside it only loops bound to warps and blocks, and the tile
    arrays = {b.name for b in model.buffers}
    if _uses(tm.c.subscripts_over_loops, loop) or tm.a.buffer in arrays or tm.b.buffer in arrays:
        return None
    return loop


def _values(model, name: str) -> range:
    lp = model.loop(name)
    return range(lp.begin, lp.end, lp.step)


def tensor_body(model, facts: PolyFacts, tm: TensorMatch, as_expr, cached_at: str | None = None,
                blocked: tuple[str, ...] = ()):
    """The warp's tile operations, in three parts: (before, products, after).

    Without a cache all three replace the tensor loops. With C cached at a loop, ``before``
    (C's fragments loaded or filled, prologue) and ``after`` (epilogue, store) wrap that loop and
    only the products stay innermost. ``blocked`` loops (register blocking) are unrolled: one C
    fragment per combination of their values, each operand fragment loaded once per pass and
    used by every tile that needs it. ``as_expr`` turns an Affine subscript into an expression.
    """
    names = [lp.name for lp in model.loops]
    reductions = tm.reductions
    if cached_at is not None:
        reductions = tuple(n for n in reductions if names.index(n) < names.index(cached_at))
    first = _condition(facts, reductions, last=False)
    last = _condition(facts, reductions, last=True)
    tiles = Blocking(model, blocked)
    before: list[Stmt] = []
    after: list[Stmt] = []
    for combo in tiles.combos(blocked):
        c = tiles.name("c", blocked, combo)
        c_before, c_after = _accumulator(model, tm, as_expr, c, combo, first, last)
        before += c_before
        after += c_after
    return tuple(before), tuple(_products(model, tm, as_expr, tiles)), tuple(after)


@dataclass(frozen=True)
class Blocking:
    """Register blocking: the loops unrolled into several fragments, and fragment names."""

    model: object
    loops: tuple[str, ...]

    def combos(self, loops: tuple[str, ...]) -> list[dict[str, int]]:
        values = [_values(self.model, n) for n in loops]
        return [dict(zip(loops, combo)) for combo in itertools.product(*values)]

    def name(self, prefix: str, loops: tuple[str, ...], combo: dict[str, int]) -> str:
        """``_c`` without blocking; ``_c_1_0`` for the second value of the first blocked loop.
        The leading underscore keeps fragments apart from the script's names, which start with
        a letter (an index may be called ``c``)."""
        picked = [n for n in self.loops if n in loops]
        if not picked:
            return "_" + prefix
        steps = [(combo[n] - self.model.loop(n).begin) // self.model.loop(n).step for n in picked]
        return "_" + prefix + "_" + "_".join(map(str, steps))

    def of(self, operand: Operand) -> tuple[str, ...]:
        return tuple(n for n in self.loops if _uses(operand.subscripts, n))


def _accumulator(model, tm, as_expr, c: str, combo, first, last, early: bool = False, online=None):
    """C's fragment ``c`` set up before the products and stored after them. ``early``: C is
    loaded before the products into a fragment of its own type and added after them (the
    fragment starts at zero), so the load's latency hides behind the products."""
    t = model.tensorize
    m, n, k = t.mma_shape.mnk
    acc = tm.accumulator_type
    before: list[Stmt] = [Fragment(c, "accumulator", m, n, k, acc, acc.value, family=tm.family)]
    c_origin = _origin(tm.c, 0, as_expr, combo)
    edge = _edge(model, tm, as_expr, combo)
    vector = _vector(model, tm, tm.c, "accumulator", edge)
    op, arg = t.prologue_op, t.prologue_arg
    if early and first is None and op is MMAFragmentOp.NONE:
        stored = model.buffer(tm.c.buffer).dtype
        before += [Fragment(f"{c}_early", "accumulator", m, n, k, stored, stored.value, family=tm.family),
                   FragmentLoad(f"{c}_early", tm.c.buffer, c_origin, tm.c.row_stride, tm.c.col_stride, edge,
                                path=_path(tm, tm.c), vector=vector),
                   FragmentFill(c, 0.0)]
        after: list[Stmt] = [FragmentAdd(c, f"{c}_early")]
        return before, after + _epilogue(model, tm, c, c_origin, edge, vector, last, combo, online)
    load_c = FragmentLoad(c, tm.c.buffer, c_origin, tm.c.row_stride, tm.c.col_stride, edge,
                          path=_path(tm, tm.c), vector=vector)
    if op is MMAFragmentOp.SET:
        fill = FragmentFill(c, arg)
        before.append(
            fill if first is None
            else If(first, (fill,), "prologue: the tile's first product", (load_c,))
        )
    else:
        before.append(load_c)
        if op is not MMAFragmentOp.NONE:
            apply = FragmentApply(c, op.name.lower(), arg)
            before.append(
                apply if first is None else If(first, (apply,), "prologue: the tile's first product")
            )
    return before, _epilogue(model, tm, c, c_origin, edge, vector, last, combo, online)


def _epilogue(model, tm, c: str, c_origin, edge, vector: int, last, combo, online=None) -> list[Stmt]:
    """After the products: the epilogue op, a fused schedule's epilogue (``fused.epilogue_maps``),
    the store; the first two at the tile's last product only. Where the fused schedule goes on to
    write another array at C's element, its statements follow C's store (none for a TEMP C, held
    in registers alone) in the same registers, and that array is stored from them."""
    t = model.tensorize
    ops: list[Stmt] = []
    if t.epilogue_op is not MMAFragmentOp.NONE:
        ops.append(FragmentApply(c, t.epilogue_op.name.lower(), t.epilogue_arg))
    statements = fused.epilogue_statements(model, where(model))
    product = model.statements[0]
    own = tuple(itertools.takewhile(lambda s: s.buffer == tm.c.buffer or rows.is_row_vector(model, s, product),
                                    statements))
    other = statements[len(own):]
    ops += fused.epilogue_maps(model, own, c, tm.accumulator_type, combo or {}, edge, held=tm.c.buffer,
                               then=bool(other), lanes=accumulator_rows(model, tm), online=online)

    def at_last(stmts: list[Stmt]) -> list[Stmt]:
        return stmts if last is None or not stmts else [If(last, tuple(stmts), "epilogue: the tile's last product")]

    # the row vectors' thread arrays (lower/rows.py) declared first: the statements after C's store read them too
    declared = [s for s in ops if isinstance(s, PrivateArray)]
    after = [*declared, *at_last([s for s in ops if not isinstance(s, PrivateArray)])]
    if model.buffer(tm.c.buffer).role != "temp" or last is not None:  # a TEMP C stored between passes too
        after.append(FragmentStore(tm.c.buffer, c_origin, c, tm.c.row_stride, tm.c.col_stride, edge, vector))
    if other:
        target = dataclasses.replace(tm.c, buffer=other[0].buffer)
        after += at_last([*fused.epilogue_maps(model, other, c, tm.accumulator_type, combo or {}, edge,
                                               held=tm.c.buffer, lanes=accumulator_rows(model, tm)),
                          FragmentStore(target.buffer, c_origin, c, target.row_stride, target.col_stride, edge,
                                        _vector(model, tm, target, "accumulator", edge))])
    return after


def accumulator_rows(model, tm: TensorMatch) -> rows.RowLayout | None:
    """Where a thread's rows of the accumulator lie (``lower/rows.py``); None for opaque tiles."""
    m, n, k = model.tensorize.mma_shape.mnk
    if tm.family == "wgmma":
        return rows.row_layout(wgmma_accumulator(n, tm.accumulator_type), WARPGROUP)
    if tm.instructions.layouts is None:
        return None
    return rows.row_layout(tm.instructions.tile_layout("accumulator", (m, n, k), tm.precision, tm.accumulator_type),
                           model.gpu.warp_size)


def edge_scratch(model, tm: TensorMatch | None, threads: int) -> SharedBuffer | None:
    """Each warp's M x N staging tile for C's partial tiles, if it has any and its family
    stages them (families with lane layouts guard each element instead)."""
    if tm is None or tm.c_axes is None or not tm.instructions.edge_scratch:
        return None
    m, n, _ = model.tensorize.mma_shape.mnk
    warps = threads // model.gpu.warp_size
    return SharedBuffer(f"{tm.c.buffer}_edge", tm.accumulator_type, (warps, m, n), (m * n, n, 1))


def _edge(model, tm: TensorMatch, as_expr, combo) -> TileEdge | None:
    """How many of a C tile's rows and columns lie inside C: its dimension minus the origin."""
    if tm.c_axes is None:
        return None
    subs = tm.c.subscripts
    if combo:
        subs = tuple(sub.substitute({k: Affine((), v) for k, v in combo.items()}) for sub in subs)
    rows, cols = (Binary("-", extent_expr(tm.c_bounds[d]), as_expr(subs[d])) for d in tm.c_axes)
    fixed = {k: Affine((), v) for k, v in combo.items()} if combo else {}
    rows, cols = (functools.reduce(lambda e, limit: Binary("min", e, as_expr(limit.substitute(fixed))), limits, edge)
                  for edge, limits in zip((rows, cols), tm.c_limits))
    scratch = f"{tm.c.buffer}_edge" if tm.instructions.edge_scratch else ""
    return TileEdge(rows, cols, scratch, tm.c_staged is not None)


def _products(model, tm: TensorMatch, as_expr, tiles: Blocking) -> list[Stmt]:
    t = model.tensorize
    m, n, k = t.mma_shape.mnk
    a_layout = "row_major" if tm.a.col_stride == 1 else "col_major"
    b_layout = "row_major" if tm.b.col_stride == 1 else "col_major"
    a_loops, b_loops = tiles.of(tm.a), tiles.of(tm.b)
    vectors = {"a": _vector(model, tm, tm.a, "matrix_a"), "b": _vector(model, tm, tm.b, "matrix_b")}
    fused = t.fused_passes
    out: list[Stmt] = []
    for p in range(fused):
        for combo in tiles.combos(a_loops):
            out.append(Fragment(tiles.name(f"a{p}", a_loops, combo), "matrix_a", m, n, k, tm.operand_type,
                                tm.precision, a_layout, tm.family))
        for combo in tiles.combos(b_loops):
            out.append(Fragment(tiles.name(f"b{p}", b_loops, combo), "matrix_b", m, n, k, tm.operand_type,
                                tm.precision, b_layout, tm.family))
    for group in range(t.passes // fused):
        passes = range(group * fused, (group + 1) * fused)
        for p in passes:
            for prefix, operand, loops in (("a", tm.a, a_loops), ("b", tm.b, b_loops)):
                for combo in tiles.combos(loops):
                    name = tiles.name(f"{prefix}{p % fused}", loops, combo)
                    out.append(FragmentLoad(name, operand.buffer, _origin(operand, p, as_expr, combo),
                                            operand.row_stride, operand.col_stride, path=_path(tm, operand),
                                            vector=vectors[prefix], row_phase=operand.row_phase))
        for p, combo in _product_order(t, passes, tiles.combos(tiles.loops)):
            out.append(FragmentMma(tiles.name("c", tiles.loops, combo),
                                   tiles.name(f"a{p % fused}", a_loops, combo),
                                   tiles.name(f"b{p % fused}", b_loops, combo),
                                   tiles.name("c", tiles.loops, combo)))
    return out


def _product_order(t, passes, combos) -> list[tuple[int, dict]]:
    """(pass, tile) pairs in the plan's MMASchedulingPolicy: pass by pass (PASS_ORDER) or
    tile by tile (BLOCK_ORDER)."""
    combos = list(combos)
    if t.block_order:
        return [(p, combo) for combo in combos for p in passes]
    return [(p, combo) for p in passes for combo in combos]


def _vector(model, tm: TensorMatch, operand: Operand, use: str, edge: TileEdge | None = None) -> int:
    """Elements a lane moves at once when its family loads element by element from global
    memory: runs of its consecutive elements that lie side by side and stay aligned for every
    tile (and at C's edges, never split by the edge)."""
    family = tm.instructions
    global_arrays = {b.name for b in model.buffers}
    warpgroup = family.issued_by == "warpgroup"
    if (family.layouts is None and not warpgroup) or operand.ldmatrix or operand.buffer not in global_arrays:
        return 1
    spec = model.buffer(operand.buffer)
    if warpgroup:
        if use != "accumulator":
            return 1
        layout = wgmma_accumulator(model.tensorize.mma_shape.mnk[1], tm.accumulator_type)
    else:
        layout = family.tile_layout(use, model.tensorize.mma_shape.mnk, tm.precision,
                                    tm.accumulator_type if use == "accumulator" else None)
    size = spec.dtype.size
    width = vector_width(layout, operand.row_stride, operand.col_stride, size, 128 if warpgroup else 32)
    if width == 1 or misalignment(model, "", spec.strides, size, operand.subscripts, width * size):
        return 1
    if edge is not None:
        bound = tm.c_bounds[tm.c_axes[1]]
        if isinstance(bound, Affine) or bound % width:  # a run-time size: its alignment is not known
            return 1
    return width


def _path(tm: TensorMatch, operand: Operand) -> str:
    """How an operand tile moves: wmma has one way; families with lane layouts use ldmatrix
    from aligned shared tiles and element loads elsewhere."""
    if tm.instructions.issued_by == "warpgroup":
        return "elements" if operand is tm.c else "descriptor"
    if tm.instructions.layouts is None:
        return ""
    return "ldmatrix" if operand.ldmatrix else "elements"


def _origin(operand: Operand, p: int, as_expr, combo: dict[str, int] | None = None) -> tuple[Expr, ...]:
    subs = operand.subscripts
    if p:
        subs = tuple(s.plus(d.scale(p)) for s, d in zip(subs, operand.pass_shift))
    if combo:
        fixed = {name: Affine((), value) for name, value in combo.items()}
        subs = tuple(s.substitute(fixed) for s in subs)
    return tuple(as_expr(s) for s in subs)


def _condition(facts: PolyFacts, loops: tuple[str, ...], last: bool) -> Expr | None:
    """All ``loops`` at their first (or last) iteration, or None when there are none."""
    ends = (facts.loop(name).last if last else facts.loop(name).first for name in loops)
    return all_of(Binary("==", Var(name), Const(value)) for name, value in zip(loops, ends))
