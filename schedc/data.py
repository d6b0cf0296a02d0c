"""Test data: random inputs (never zeros), poisoned outputs, storage layouts, tolerances.

>>> tolerance_for(["tf32"])
0.002
"""

from __future__ import annotations

import math

import numpy as np

from .ir.affine import Affine
from .ir.functions import relative_error
from .ir.kernel import Binary, Buffer, Call, Cast, Expr
from .ir.numeric import strided_view
from .ir.patterns import accumulated
from .ir.types import ScalarType
from .ir.walk import loads, subexpressions

# Relative error ||out - ref|| / ||ref|| allowed per arithmetic precision (the lowest wins).
TOLERANCES = {
    "float64": 1e-12,
    "float32": 1e-5,
    "tensor_float32": 1e-4,  # fp16/bf16 products accumulated in float32 by tensor cores
    # 8-bit float products: wgmma keeps fewer bits of their sums than float32 (about 14 of 24)
    "tensor_float8": 1e-3,
    "tf32": 2e-3,
    "float16": 5e-3,
    "bfloat16": 3e-2,
    "float8_e4m3": 1.3e-1,  # results rounded to 3 mantissa bits: one unit is 2^-3 of the value
    "float8_e5m2": 2.5e-1,
    "exact": 0.0,
}


def tolerance_for(precisions: list[str | float]) -> float:
    """The largest tolerance of ``precisions``: names of TOLERANCES, or relative errors
    themselves (a function's on the GPU, ``functions.relative_error``)."""
    return max((p if isinstance(p, float) else TOLERANCES[p]) for p in precisions) if precisions else 0.0


def precisions(model, output: str | None = None) -> list[str | float]:
    """The arithmetic precisions a model's results depend on: the types it computes in, and for
    each element-wise function in float32 or a 16-bit type, its documented error on the GPU
    (several units in the last place: beyond float32's tolerance for fast_exp) times a margin
    of 8 for the operations after it. With ``output``, those of that array alone: the statements
    that write it and, through the arrays they read, the statements those depend on (an int8
    result beside a bfloat16 one is still checked exactly)."""
    found: list[str | float] = []
    t = model.tensorize
    statements = model.statements if output is None else _feeding(model, output)
    for b in model.buffers:
        if b.name in {s.buffer for s in statements}:
            found.append(_name(b.dtype))
    if t is not None:
        product = model.statements[model.fusion.parts[0][0] if model.fusion is not None else 0]
        operand = next(x.dtype for x in loads(product.value) if x.buffer != product.buffer)
        if operand.is_float:
            found.append("tf32" if operand is ScalarType.float32 else
                         "tensor_float8" if operand.arithmetic is not operand else "tensor_float32")
        found += [_name(e.dtype) for s in statements for e in _rounding_casts(s)]  # a chained product's A
        return found + [error for s in statements for error in _function_errors(s)]  # a fused epilogue's
    for s in statements:
        found.extend(_name(dt) for dt in _arithmetic_types(s.value))
        found.extend(_function_errors(s))
        found.extend(_long_sum(model, s))
    return found


def _rounding_casts(store) -> list[Cast]:
    """The casts of a statement that round a computed value to a narrower float (the kernel's value
    and the reference's may round apart where their sums before differ in the last bits)."""
    return [e for e in subexpressions(store.value) if isinstance(e, Cast) and e.dtype.is_float
            and getattr(e.operand, "dtype", None) is not None and e.operand.dtype.size > e.dtype.size]


def _function_errors(store) -> list[float]:
    """The documented errors of the element-wise functions a statement calls, with a margin of 8
    for the operations after them."""
    return [8 * relative_error(e.function) for e in subexpressions(store.value)
            if isinstance(e, Call) and e.dtype is not ScalarType.float64]


def _feeding(model, output: str) -> list:
    """The statements whose results reach ``output``: those writing it, and transitively those
    writing an array one of them reads (in the model's order)."""
    wanted, grown = {output}, True
    while grown:
        reads = {x.buffer for s in model.statements if s.buffer in wanted for x in loads(s.value)}
        grown = not reads <= wanted
        wanted |= reads
    return [s for s in model.statements if s.buffer in wanted]


def _long_sum(model, store) -> list[float]:
    """A sum kept in a 16-bit float array (off the tensor cores) rounds at each of its steps, so
    its error grows with the number of terms, about as their square root (errors of either sign):
    the type's tolerance times sqrt(terms / 64) past 64 terms (fp16: 5e-3 over 64 terms, 4e-2 over
    4096). The reference sums exactly; only the kernel rounds each step."""
    target = model.buffer(store.buffer).dtype
    if target not in (ScalarType.float16, ScalarType.bfloat16) or accumulated(store) is None:
        return []
    written = {d for i in store.index for d in Affine.of(i).variables()}
    terms = math.prod(n for name, n in model.dims if name not in written)
    return [TOLERANCES[target.value] * math.sqrt(terms / 64)] if terms > 64 else []


def _name(dtype: ScalarType) -> str:
    return dtype.value if dtype.is_float else "exact"


def _arithmetic_types(e: Expr):
    """The types ``e``'s operations compute in (a load is exact: a float16 array read into float32
    arithmetic adds float32's error, not float16's; an 8-bit float computes in float32)."""
    for x in subexpressions(e):
        if isinstance(x, Binary | Call) and x.dtype is not None and x.dtype.arithmetic is x.dtype:
            yield x.dtype


def random_array(buffer: Buffer, rng: np.random.Generator) -> np.ndarray:
    """Values in [-1, 1] away from zero (integers in -4..4 without 0), in the element type."""
    dtype = buffer.dtype
    if dtype is ScalarType.bool:
        return rng.integers(0, 2, buffer.shape).astype(bool)
    if dtype.is_integer:
        low = 1 if not dtype.is_signed else -4
        values = rng.integers(low, 5, buffer.shape)
        values[values == 0] = 1
        return values.astype(dtype.numpy)
    values = rng.random(buffer.shape, dtype=np.float32)  # in place: one array of temporaries
    values *= np.float32(0.9375)
    values += np.float32(0.0625)
    np.negative(values, out=values, where=rng.integers(0, 2, buffer.shape, dtype=np.int8) == 0)
    return values.astype(dtype.numpy, copy=False)


def poison(buffer: Buffer) -> np.ndarray:
    """An OUTPUT array filled with NaN (or 0x5A bytes for integers) to expose unwritten elements."""
    if buffer.dtype.is_float:
        return np.full(buffer.shape, np.nan, dtype=buffer.dtype.numpy)
    return np.full(buffer.shape, 0x5A5A5A5A5A5A5A5A, dtype=np.uint64).astype(buffer.dtype.numpy)


def inputs(buffers, seed: int) -> dict[str, np.ndarray]:
    """Arrays for every parameter, in the parameter's layout: random inputs, poisoned outputs."""
    rng = np.random.default_rng(seed)
    out = {}
    for b in buffers:
        if b.kind != "param":
            continue
        values = poison(b) if b.role == "output" else random_array(b, rng)
        out[b.name] = copy(b, values)
    return out


def to_storage(buffer: Buffer, array: np.ndarray) -> np.ndarray:
    """The flat storage of a logical array in the buffer's layout."""
    flat = np.zeros(buffer.size, dtype=buffer.dtype.numpy)
    _view(buffer, flat)[...] = array
    return flat


def copy(buffer: Buffer, array: np.ndarray) -> np.ndarray:
    """A copy of a logical array, in the buffer's layout."""
    return _view(buffer, to_storage(buffer, array))


def from_storage(buffer: Buffer, flat: np.ndarray) -> np.ndarray:
    """The logical array stored in ``flat`` (a copy)."""
    return _view(buffer, flat).copy()


def _view(buffer: Buffer, flat: np.ndarray) -> np.ndarray:
    return strided_view(flat, buffer.shape, tuple(s * flat.itemsize for s in buffer.strides))
