"""Shared-memory caches (Accera's sequential caching): before the cache index's loop the block
copies the footprint of the array into shared memory between two barriers, and the loops at and
inside the index read the copy.

The footprint comes from poly (the elements the loops at and inside the index touch, with the
serial loops outside it and the block coordinates fixed, and the warp/thread coordinates free).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import poly
from ..errors import CacheError
from ..ir.affine import Affine
from ..ir.kernel import Barrier, BlockCopy, Const, Expr, Load, SharedBuffer, Stmt, shared_layout
from ..targets import WMMA_LEADING_BYTES, WMMA_POINTER_ALIGN, CacheStrategy, MemorySpace
from . import tensor


@dataclass(frozen=True)
class SharedCache:
    array: str
    index: str
    buffer: SharedBuffer
    origin: tuple[Affine, ...]  # the footprint's first element, over the fixed loops
    vector: int
    strategy: str


def plan_shared(model) -> tuple[SharedCache, ...]:
    """Check every SHARED cache and describe its buffer and copy."""
    caches = []
    for spec in model.caches:
        if spec.location is MemorySpace.SHARED:
            caches.append(_plan(model, spec))
    _, total = shared_layout([c.buffer for c in caches])
    gpu = model.gpu
    if total > gpu.shared_memory_max:
        names = ", ".join(f"{c.array} {c.buffer.nbytes}" for c in caches)
        raise CacheError(
            f"cache({caches[-1].array}, index={caches[-1].index}, location=SHARED)",
            f"the caches need {total} bytes of shared memory per block ({names}); {gpu.name} allows "
            f"{gpu.shared_memory_max} (with the opt-in attribute; {gpu.shared_memory_static} without)",
            loops=tuple(c.index for c in caches),
        )
    return tuple(caches)


def _plan(model, spec) -> SharedCache:
    here = f"cache({spec.array}, index={spec.index}, location=SHARED)"
    tile = set(model.tensorize.loops) if model.tensorize else set()
    unit = model.binding_of(spec.index)
    if unit is not None or spec.index in tile:
        role = f"bound to {unit.name}" if unit is not None else "tensorized"
        raise CacheError(here, f"{spec.index} is {role}; cache at a loop that runs in every thread",
                         loops=(spec.index,))
    if any(s.buffer == spec.array for s in model.statements):
        raise CacheError(here, f"the nest writes {spec.array}; shared caches of written arrays are not "
                               "built yet (cache the accumulator in MMA_FRAGMENT)", loops=(spec.index,))
    names = [lp.name for lp in model.loops]
    position = names.index(spec.index)
    fixed = tuple(
        n for i, n in enumerate(names)
        if (i < position and (model.binding_of(n) is None or model.binding_of(n).level == "block"))
        or (model.binding_of(n) is not None and model.binding_of(n).level == "block")
    )
    fp = poly.footprint(model, spec.array, spec.index, fixed)
    if not fp.inside:
        raise CacheError(
            here,
            f"the footprint {fp} reaches outside {spec.array}{list(model.buffer(spec.array).shape)} in the "
            "last tiles (a split does not divide the array); partial tiles in shared memory are not "
            "built yet",
            loops=(spec.index,),
        )
    global_buffer = model.buffer(spec.array)
    strides = _row_major(fp.extents)
    buffer = SharedBuffer(f"{spec.array}_shared", global_buffer.dtype, fp.extents, strides)
    vector = _vector(model, global_buffer, fp, strides)
    strategy = "blocked" if spec.strategy is CacheStrategy.BLOCKED else "striped"
    return SharedCache(spec.array, spec.index, buffer, fp.origin, vector, strategy)


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _vector(model, global_buffer, fp, shared_strides) -> int:
    """Elements per copy vector: up to 16 bytes, when every vector is aligned on both sides."""
    size = global_buffer.dtype.size
    if global_buffer.strides[-1] != 1:
        return 1
    linear = Affine((), 0)
    for stride, origin in zip(global_buffer.strides, fp.origin):
        linear = linear.plus(origin.scale(stride))
    moves = [c * model.loop(n).step for n, c in linear.terms]
    moves.append(linear.const + sum(c * model.loop(n).begin for n, c in linear.terms))
    for candidate in (16 // size, 8 // size, 4 // size, 1):
        if candidate < 1 or fp.extents[-1] % candidate:
            continue
        rows = [*global_buffer.strides[:-1], *shared_strides[:-1]]
        if all(x % candidate == 0 for x in (*moves, *rows)):
            return candidate
    return 1


# -- using the caches ----------------------------------------------------------------------------


def fill(caches: tuple[SharedCache, ...], index: str, as_expr) -> tuple[Stmt, ...]:
    """Barrier, the copies of the caches kept across ``index``, barrier."""
    here = [c for c in caches if c.index == index]
    if not here:
        return ()
    copies = [
        BlockCopy(c.array, tuple(as_expr(o) for o in c.origin), c.buffer.name,
                  tuple(Const(0) for _ in c.origin), c.buffer.shape, c.vector, c.strategy,
                  comment=f"cache of {c.array} for the loops at and inside {index}")
        for c in here
    ]
    return (Barrier("the previous tiles are no longer read"), *copies,
            Barrier(f"the cached tiles of {', '.join(c.array for c in here)} are in shared memory"))


def redirect(expr: Expr, caches: tuple[SharedCache, ...], as_expr) -> Expr:
    """Reads of cached arrays go to the shared copies, subscripts relative to the footprint."""
    by_array = {c.array: c for c in caches}

    def visit(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in by_array:
            c = by_array[e.buffer]
            index = tuple(as_expr(Affine.of(i).plus(o.scale(-1))) for i, o in zip(e.index, c.origin))
            return Load(c.buffer.name, index, e.dtype)
        return e

    return _map(expr, visit)


def _map(expr: Expr, visit) -> Expr:
    if hasattr(expr, "lhs"):
        expr = dataclasses.replace(expr, lhs=_map(expr.lhs, visit), rhs=_map(expr.rhs, visit))
    elif hasattr(expr, "operand"):
        expr = dataclasses.replace(expr, operand=_map(expr.operand, visit))
    return visit(expr)


def rebase_tiles(model, tm: tensor.TensorMatch, caches: tuple[SharedCache, ...]) -> tensor.TensorMatch:
    """Tensor-core operands read from their shared copies: origins relative to the footprint,
    strides of the shared buffer; the tiles must stay aligned for wmma."""
    by_array = {c.array: c for c in caches}
    changes = {}
    for role in ("a", "b"):
        operand = getattr(tm, role)
        if operand.buffer in by_array:
            changes[role] = _rebase(model, role.upper(), operand, by_array[operand.buffer])
    return dataclasses.replace(tm, **changes) if changes else tm


def _rebase(model, role, operand: tensor.Operand, cache: SharedCache) -> tensor.Operand:
    here = f"cache({cache.array}, index={cache.index}, location=SHARED)"
    strides = cache.buffer.strides
    over_loops = tuple(s.plus(o.scale(-1)) for s, o in zip(operand.subscripts_over_loops, cache.origin))
    origin = tuple(s.plus(o.scale(-1)) for s, o in zip(operand.subscripts, cache.origin))
    m, n, k = model.tensorize.loops
    rows, cols = (m, k) if role == "A" else (k, n)

    def linear(loop: str) -> int:
        return sum(st * sub.coeff(loop) for st, sub in zip(strides, over_loops)) * model.loop(loop).step

    row_stride, col_stride = linear(rows), linear(cols)
    size = cache.buffer.dtype.size
    ld = row_stride if col_stride == 1 else col_stride
    if 1 not in (row_stride, col_stride) or (ld * size) % WMMA_LEADING_BYTES:
        raise CacheError(here, f"tiles of {cache.array} in shared memory have strides {row_stride} and "
                               f"{col_stride}; tensor-core loads need one of 1 and the other a multiple of "
                               f"{WMMA_LEADING_BYTES} bytes", loops=(cache.index,))
    linear_origin = Affine((), 0)
    for stride, sub in zip(strides, origin):
        linear_origin = linear_origin.plus(sub.scale(stride))
    moves = [c * model.loop(name).step for name, c in linear_origin.terms]
    start = linear_origin.const + sum(c * model.loop(name).begin for name, c in linear_origin.terms)
    if any((x * size) % WMMA_POINTER_ALIGN for x in (*moves, start)):
        raise CacheError(here, f"tiles of {cache.array} in shared memory start at offsets that are not "
                               f"{WMMA_POINTER_ALIGN}-byte aligned", loops=(cache.index,))
    return dataclasses.replace(operand, buffer=cache.buffer.name, subscripts=origin, row_stride=row_stride,
                               col_stride=col_stride, subscripts_over_loops=over_loops)
