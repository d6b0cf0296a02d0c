"""The float64 numpy reference of a nest: what the statements mean, independent of any plan.

Values are computed in float64 (int64 for integer arrays); explicit casts to integer types
truncate as in C, casts between float types are exact, except that in a nest without tensor
cores an element-wise operation or cast whose type is float16 or bfloat16 rounds to that type
(a tensorized plan's fused epilogue computes in its accumulator's type, so it does not),
as the kernel's arithmetic does (up to fused multiply-adds; its error can exceed the type's
tolerance relative to a result much smaller than the operands, as in ``i - (A[i] + i)``); a
conversion to an 8-bit float always rounds (saturating), as no operation computes in one; a
contraction ``C[p] += X`` sums in float64. A statement ``C[p] += X`` is evaluated as one
contraction (einsum, BLAS for products of two arrays) over the dimensions its subscripts do not
use, then added into C: where the subscripts mix dimensions (``C[b * M + i, j]``, ``C[i + k]``),
the points that write one element add first. An 8-bit float array without tensor cores is the
exception (the kernel rounds the sum at each step); it and other statements run vectorised over
the written dimensions and sequentially over the rest, in nest order. A tensorized plan's
prologue/epilogue ops are part of its meaning, applied once to each element:
``C = epilogue(prologue(C) + A @ B)``.

The reference can be restricted to the nest points one block of a plan covers, so that a
sampled emulation compares only what it computed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass

import numpy as np

from .errors import InternalError
from .ir.affine import Affine, mixed_radix
from .ir.functions import evaluate
from .ir.kernel import Binary, Call, Cast, Const, Expr, Load, Store, Unary, Var, to_plain
from .ir.numeric import binary, rounded, saturate, to_float8
from .ir.patterns import accumulated, strip_float_casts
from .ir.types import ScalarType
from .ir.walk import loads, operands
from .targets import MMAFragmentOp


@dataclass(frozen=True)
class Tensor:
    """Values over some nest dimensions (axes in ``dims`` order)."""

    data: np.ndarray
    dims: tuple[str, ...]

    def aligned(self, dims: tuple[str, ...]) -> np.ndarray:
        """The data broadcastable over ``dims``; axes outside ``dims`` must have length 1 (a
        dimension fixed to one value)."""
        extra = tuple(n for n, d in enumerate(self.dims) if d not in dims)
        data, own = self.data, self.dims
        if extra:
            if any(data.shape[n] != 1 for n in extra):
                raise ValueError(f"cannot drop dimensions {[own[n] for n in extra]} of length > 1")
            data = data.squeeze(axis=extra)
            own = tuple(d for d in own if d in dims)
        shape = [data.shape[own.index(d)] if d in own else 1 for d in dims]
        order = [own.index(d) for d in dims if d in own]
        return np.transpose(data, order).reshape(shape)


def reference(model, arrays: dict[str, np.ndarray], dims: dict[str, np.ndarray] | None = None):
    """Run the nest on ``arrays`` (logical arrays by name). Returns ``(values, touched)``:
    float64/int64 copies of every array after the nest, and a mask per written array of the
    elements it wrote. ``dims`` restricts each nest dimension to the given values. A fused nest's
    parts run one after the other (``Model.parts``): the plan's checks let a part touch another's
    elements only at the same fused point, where the parts run in turn."""
    values, touched = arrays, {}
    try:
        for part in model.parts:  # a fused nest's parts in turn (each touches its own elements of the others')
            extents = dict(part.dims)
            state = _State(part, values, {d: v for d, v in (dims or {}).items() if extents[d] > 1},
                           wide=model.tensorize is not None)
            if _accumulates(part) and not _rounds_each_step(part, model):
                state.contract(part.statements[0])
            else:
                state.sequential()
            values = state.values
            for name, mask in state.touched.items():
                touched[name] = touched[name] | mask if name in touched else mask
    except Exception as error:  # noqa: BLE001 - the reference must understand every accepted nest
        raise InternalError("the float64 reference", f"{type(error).__name__}: {error}") from error
    unsigned = {b.name for b in model.buffers if b.dtype is ScalarType.uint64}
    values = {name: v.astype(np.uint64) if name in unsigned and v.dtype == np.int64 else v  # int64 holds its bits
              for name, v in values.items()}
    return values, touched


def reference_key(model) -> str:
    """A digest of what ``reference`` reads of a Model: its arrays, nest, statements, fused parts
    and the tensor-core prologue and epilogue; not the schedule, which does not change the result.
    Two points of a parameter grid over tiles and stages have the same key, so a tuner computes
    their reference once."""
    t = model.tensorize
    ops = None if t is None else (t.prologue_op.name, t.prologue_arg, t.epilogue_op.name, t.epilogue_arg)
    fused = None if model.fusion is None else [to_plain(p) for p in model.parts]
    what = [to_plain(model.buffers), model.dims, to_plain(model.statements), model.sizes, ops, fused]
    return hashlib.sha256(json.dumps(what, default=str, sort_keys=True).encode()).hexdigest()


def _rounds_each_step(part, model) -> bool:
    """A sum into an 8-bit float array off the tensor cores: the kernel stores (rounds) it at each
    step of its loops, which a contraction (rounding once) would not reproduce within tolerance;
    the sequential evaluation rounds where the kernel does. (Tensor cores keep the sum in float32
    fragments and round once.)"""
    target = part.buffer(part.statements[0].buffer).dtype
    return target.arithmetic is not target and model.tensorize is None


def _accumulates(model) -> bool:
    """One reduction ``T[p] += X`` (X does not read T): its terms add in any order."""
    return len(model.statements) == 1 and accumulated(model.statements[0]) is not None


def _distinct(store: Store) -> bool:
    """Whether the store's subscripts write distinct elements at distinct values of the
    dimensions they use, whatever their extents (full rank: not ``C[b * M + i, j]``)."""
    affines = [Affine.of(i) for i in store.index]
    return _independent(affines, tuple(dict.fromkeys(d for a in affines for d in a.variables())))


class _State:
    def __init__(self, model, arrays, dims, wide: bool = False) -> None:
        self.model = model
        self.wide = wide  # 16-bit operations not rounded: the statements compute in a tensor plan's accumulator
        self.order = tuple(name for name, _ in model.dims)
        self.dims = {name: np.arange(n) for name, n in model.dims}
        if dims:
            self.dims.update({k: np.asarray(v, dtype=np.int64) for k, v in dims.items()})
        self.values = {}
        for b in model.buffers:
            wide = np.int64 if (b.dtype.is_integer or b.dtype is ScalarType.bool) else np.float64
            if b.name in arrays:
                copy = b.name in {s.buffer for s in model.statements}  # inputs are only read
                self.values[b.name] = np.array(arrays[b.name], dtype=wide, copy=copy or None)
            elif b.kind == "const":
                bits = np.array(b.data, dtype=np.dtype(f"u{b.dtype.size}")).view(b.dtype.numpy)
                offsets = sum(g * s for g, s in zip(np.indices(b.shape), b.strides))
                self.values[b.name] = bits[offsets].astype(wide)
            else:
                self.values[b.name] = np.full(b.shape, np.nan if wide is np.float64 else 0, dtype=wide)
        written = {s.buffer for s in model.statements}
        self.touched = {name: np.zeros(self.values[name].shape, dtype=bool) for name in written}

    # -- evaluation ----------------------------------------------------------------------------

    def evaluate(self, e: Expr, dims: dict[str, np.ndarray]) -> Tensor:
        if isinstance(e, Var):
            return Tensor(dims[e.name].astype(np.float64), (e.name,))
        if isinstance(e, Const):
            if isinstance(e.value, float):  # the constant's value in its type, as the kernel's (numeric.constant)
                return Tensor(self.narrow(np.array(e.value, dtype=np.float64), e.dtype), ())
            return Tensor(np.array(e.value, dtype=np.int64), ())
        if isinstance(e, Load):
            return self.gather(e.buffer, e.index, dims)
        if isinstance(e, Cast):
            inner = self.evaluate(e.operand, dims)
            source = getattr(e.operand, "dtype", None)
            floating = source is not None and source.is_float
            data = inner.data
            if floating and e.dtype.is_integer and source is ScalarType.float32:
                data = data.astype(np.float32).astype(np.float64)  # the float32 value the kernel truncates
            return Tensor(self.narrow(_cast(data, e.dtype, floating), e.dtype), inner.dims)
        if isinstance(e, Unary):
            inner = self.evaluate(e.operand, dims)
            return Tensor(_wrap(-inner.data, e.dtype), inner.dims)
        if isinstance(e, Binary):
            lhs, rhs = self.evaluate(e.lhs, dims), self.evaluate(e.rhs, dims)
            out = tuple(d for d in self.order if d in lhs.dims or d in rhs.dims)
            value = _wrap(binary(e.op, lhs.aligned(out), rhs.aligned(out), e.dtype), e.dtype)
            return Tensor(self.narrow(value, e.dtype), out)
        if isinstance(e, Call):
            args = [self.evaluate(a, dims) for a in e.args]
            out = tuple(d for d in self.order if any(d in a.dims for a in args))
            value = _wrap(evaluate(e.function, tuple(a.aligned(out) for a in args), e.dtype, wide=True), e.dtype)
            return Tensor(self.narrow(value, e.dtype), out)
        raise TypeError(f"unknown expression {e!r}")

    def narrow(self, data, dtype: ScalarType | None):
        """``data`` rounded to a 16-bit float ``dtype`` (module docstring) or, always, to an 8-bit
        float one (a conversion to it: no operation computes in it), else as it is."""
        if dtype is not None and dtype.arithmetic is not dtype:
            return to_float8(data, dtype).astype(np.float64)
        if dtype not in (ScalarType.float16, ScalarType.bfloat16) or self.wide:
            return data
        return rounded(data, dtype).astype(np.float64)

    def subscripts(self, index: tuple[Expr, ...], dims: dict[str, np.ndarray]):
        """Subscripts of ``index`` over ``dims`` and the dimensions their result spans, in its
        axis order: slices (a view, no copy) where each subscript is one dimension plus a
        constant over consecutive values, else broadcasting integer arrays."""
        affines = [Affine.of(i) for i in index]
        direct = _slices(affines, dims)
        return direct if direct is not None else self.open_grid(affines, dims)

    def open_grid(self, affines: list[Affine], dims: dict[str, np.ndarray]):
        """Subscripts as integer arrays that broadcast against each other over the dimensions
        they use (nest order), and those dimensions."""
        used = tuple(d for d in self.order if any(a.coeff(d) for a in affines))
        grids = np.meshgrid(*(dims[d] for d in used), indexing="ij", sparse=True) if used else []
        axes = dict(zip(used, grids))
        subs = [a.const + sum(c * axes[d] for d, c in a.terms) for a in affines]
        return tuple(np.asarray(s) for s in subs), used

    def gather(self, buffer: str, index, dims) -> Tensor:
        subs, used = self.subscripts(index, dims)
        return Tensor(self.values[buffer][subs], used)

    def scatter(self, store: Store, result: Tensor, dims) -> None:
        subs, used = self.subscripts(store.index, dims)
        data = np.broadcast_to(result.aligned(used), tuple(len(dims[d]) for d in used))
        self.values[store.buffer][subs] = data
        self.touched[store.buffer][subs] = True

    # -- statements ----------------------------------------------------------------------------

    def contract(self, store: Store) -> None:
        """``T[p] += X`` with every other dimension summed: one contraction."""
        term = accumulated(store)
        _, written = self.subscripts(store.index, self.dims)
        factors = _product_factors(term)
        if factors is not None:
            tensors = [self.evaluate(f, self.dims) for f in factors]
            letters = {d: chr(ord("a") + n) for n, d in enumerate(self.order)}
            spec = ",".join("".join(letters[d] for d in t.dims) for t in tensors)
            present = tuple(d for d in written if any(d in t.dims for t in tensors))  # others broadcast
            spec += "->" + "".join(letters[d] for d in present)
            total = Tensor(np.einsum(spec, *(t.data for t in tensors), optimize=True), present)
        else:
            full = self.evaluate(term, self.dims)
            summed = tuple(n for n, d in enumerate(full.dims) if d not in written)
            keep = tuple(d for d in full.dims if d in written)
            total = Tensor(full.data.sum(axis=summed), keep)
        # dimensions the term does not depend on still repeat it
        for d in self.order:
            if d not in written and d not in _depends_on(term):
                total = Tensor(total.data * len(self.dims[d]), total.dims)
        if _distinct(store):
            old = self.gather(store.buffer, store.index, self.dims)
            self.scatter(store, Tensor(self.finished(store, old.aligned(written), total.aligned(written)), written),
                         self.dims)
        else:
            self.add_by_element(store, total)

    def add_by_element(self, store: Store, total: Tensor) -> None:
        """Add ``total`` (over the dimensions the store's subscripts use) into the elements it
        writes, for subscripts that may write one element at several points (not of full rank:
        ``C[b * M + i, j]``, ``C[i + k]``): those points' terms summed first, then each element
        finished once."""
        subs, used = self.open_grid([Affine.of(i) for i in store.index], self.dims)
        shape = tuple(len(self.dims[d]) for d in used)
        array = self.values[store.buffer]
        flat = np.ravel_multi_index(tuple(np.broadcast_to(s, shape) for s in subs), array.shape).ravel()
        elements, which = np.unique(flat, return_inverse=True)
        terms = np.broadcast_to(total.aligned(used), shape).ravel()
        array.flat[elements] = self.finished(store, array.flat[elements], _sum_by(which, terms, len(elements)))
        self.touched[store.buffer].flat[elements] = True

    def finished(self, store: Store, old: np.ndarray, total: np.ndarray) -> np.ndarray:
        """An element's value after its sum: ``epilogue(prologue(old) + total)`` with a
        tensorized plan's fragment ops, wrapped at an integer type's width as each step's sum."""
        new = _prologue(self.model, old) + total
        return _wrap(_epilogue(self.model, new), self.model.buffer(store.buffer).dtype)

    def sequential(self) -> None:
        """Vectorised over dimensions that carry no dependence (see ``_vector_dims``), in nest
        order over the rest."""
        common = set(self.order)
        for s in self.model.statements:
            common &= {d for i in s.index for d in Affine.of(i).variables()}
        common = _vector_dims(self.model, tuple(d for d in self.order if d in common))
        rest = [d for d in self.order if d not in common]
        for point in itertools.product(*(self.dims[d] for d in rest)):
            dims = dict(self.dims)
            dims.update({d: np.array([v]) for d, v in zip(rest, point)})
            for s in self.model.statements:
                self.scatter(s, self.evaluate(s.value, dims), dims)


def _vector_dims(model, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """The largest subset V of ``candidates`` over which the statements may run as one vector
    operation each: two iterations that touch one element of a written array (one writing it)
    always agree on V, so running V at once, the rest in nest order, keeps every dependence
    (a recurrence ``C[i + 1] = C[i] * 2`` runs over ``i`` in order)."""
    written = {s.buffer for s in model.statements}
    accesses: dict[str, list[list[Affine]]] = {}
    for s in model.statements:
        for buffer, index in [(s.buffer, s.index), *((e.buffer, e.index) for e in loads(s.value))]:
            if buffer in written:
                accesses.setdefault(buffer, []).append([Affine.of(i) for i in index])
    for size in range(len(candidates), 0, -1):
        for subset in itertools.combinations(reversed(candidates), size):  # inner dimensions first
            vector = tuple(d for d in candidates if d in subset)
            if all(_separates(forms, vector, dict(model.dims)) for forms in accesses.values()):
                return vector
    return ()


def _separates(forms: list[list[Affine]], vector: tuple[str, ...], extents: dict) -> bool:
    """Whether equal elements imply equal values of ``vector``: the subscripts that involve
    those dimensions are the same in every access, involve nothing else, and determine them."""
    rows = [n for n in range(len(forms[0])) if any(f[n].variables() & set(vector) for f in forms)]
    if any(f[n] != forms[0][n] or not f[n].variables() <= set(vector) for f in forms for n in rows):
        return False
    subscripts = [forms[0][n] for n in rows]
    return _independent(subscripts, vector) or mixed_radix(subscripts, vector, extents)


def _independent(affines: list[Affine], dims: tuple[str, ...]) -> bool:
    """Whether the subscripts take distinct values at distinct points of ``dims`` (full rank)."""
    if not dims:
        return True
    matrix = np.array([[a.coeff(d) for d in dims] for a in affines], dtype=np.float64).reshape(-1, len(dims))
    return bool(np.linalg.matrix_rank(matrix) == len(dims)) if matrix.size else False


def _slices(affines: list[Affine], dims: dict[str, np.ndarray]):
    """``(slices, dimensions)`` when subscript n is ``d_n + c_n`` for distinct ``d_n`` that take
    consecutive values starting at or after ``-c_n``; None otherwise."""
    subs, used = [], []
    for a in affines:
        if len(a.terms) != 1 or a.terms[0][1] != 1 or a.terms[0][0] in used:
            return None
        values = dims[a.terms[0][0]]
        start = a.const + int(values[0]) if len(values) else -1
        if start < 0 or int(values[-1]) - int(values[0]) + 1 != len(values) or np.any(np.diff(values) != 1):
            return None
        subs.append(slice(start, start + len(values)))
        used.append(a.terms[0][0])
    return tuple(subs), tuple(used)


def _sum_by(which: np.ndarray, terms: np.ndarray, count: int) -> np.ndarray:
    """The sum of ``terms`` per group ``which`` (``count`` groups): float64, or int64 for integers."""
    if terms.dtype.kind == "f":
        return np.bincount(which, weights=terms, minlength=count)
    sums = np.zeros(count, dtype=terms.dtype)
    np.add.at(sums, which, terms)
    return sums


def _depends_on(term: Expr) -> set[str]:
    """Nest dimensions an expression depends on."""
    if isinstance(term, Var):
        return {term.name}
    if isinstance(term, Load):
        return {d for i in term.index for d in Affine.of(i).variables()}
    return set().union(*(_depends_on(x) for x in operands(term)))


def _product_factors(term: Expr) -> list[Expr] | None:
    """The two factors of ``X * Y`` (float casts aside), for a contraction by einsum."""
    term = strip_float_casts(term)
    if isinstance(term, Binary) and term.op == "*":
        return [term.lhs, term.rhs]
    return None


def _prologue(model, c: np.ndarray) -> np.ndarray:
    t = model.tensorize
    if t is None or t.prologue_op is MMAFragmentOp.NONE:
        return c
    return _fragment_op(t.prologue_op, t.prologue_arg, c, _accumulator(model))


def _epilogue(model, c: np.ndarray) -> np.ndarray:
    t = model.tensorize
    if t is None or t.epilogue_op is MMAFragmentOp.NONE:
        return c
    return _fragment_op(t.epilogue_op, t.epilogue_arg, c, _accumulator(model))


def _accumulator(model) -> ScalarType:
    return model.buffer(model.statements[0].buffer).dtype


def _fragment_op(op: MMAFragmentOp, arg: float, c: np.ndarray, dtype: ScalarType) -> np.ndarray:
    if op is MMAFragmentOp.SET:  # the accumulator's type holds the value (integers truncate)
        return np.full_like(c, np.trunc(arg) if dtype.is_integer else arg, dtype=np.float64)
    if op is MMAFragmentOp.SCALE:
        if dtype.is_integer:  # tensor cores scale integer accumulators in float32, then truncate
            return np.trunc(c.astype(np.float32) * np.float32(arg)).astype(np.int64)
        return arg * c
    return np.where(c > 0, c, 0)


def _cast(data: np.ndarray, dtype: ScalarType, floating: bool = False) -> np.ndarray:
    """``data`` (of a floating-point type where ``floating``) converted to ``dtype``: floating
    point to integers saturates, integers wrap (as the kernels convert)."""
    if dtype is ScalarType.bool:
        return (data != 0).astype(np.int64)
    if dtype.is_integer and floating:
        return saturate(data, dtype).astype(np.int64)
    if dtype.is_integer:
        return _wrap(np.trunc(data).astype(np.int64), dtype)
    return data.astype(np.float64)


def _wrap(data: np.ndarray, dtype: ScalarType | None) -> np.ndarray:
    """Integer arithmetic wraps at its type's width, as the kernel's does (int64 holds every
    narrower integer type; 64-bit types wrap in int64 itself)."""
    if dtype is None or not dtype.is_integer or dtype.size >= 8:
        return data
    return np.asarray(data).astype(np.int64).astype(dtype.numpy).astype(np.int64)


# -- what one block covers ---------------------------------------------------------------------


def block_dims(model, facts, block: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """For each nest dimension, the values the given block's iterations take."""
    fixed = _block_loop_values(model, facts, block)
    out = {}
    for dim, (name, extent) in enumerate(model.dims):
        pieces = [lp for lp in model.loops if lp.dim == dim]
        choices = []
        for lp in pieces:
            if lp.name in fixed:
                choices.append(np.array([fixed[lp.name]]))
            else:
                f = facts.loop(lp.name)
                choices.append(np.arange(f.first, f.last + 1, f.step))
        grid = np.stack([g.ravel() for g in np.meshgrid(*choices, indexing="ij")], axis=1)
        keep = np.ones(len(grid), dtype=bool)
        names = [lp.name for lp in pieces]
        for g in model.groups:
            if set(g.members) <= set(names):
                total = sum(grid[:, names.index(m)] * w for m, w in g.weighted)
                keep &= (total >= g.begin) & (total < g.end)
        values = np.unique(grid[keep].sum(axis=1))
        out[name] = values[(values >= 0) & (values < extent)]
    return out


def _block_loop_values(model, facts, block) -> dict[str, int]:
    values = {}
    for binding in model.bindings:
        if binding.unit.level != "block":
            continue
        coordinate = block["xyz".index(binding.unit.axis)]
        inner = 1
        for name in reversed(binding.loops):
            f = facts.loop(name)
            values[name] = f.first + f.step * ((coordinate // inner) % f.extent)
            inner *= f.extent
    return values
