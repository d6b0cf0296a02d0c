"""A function with run-time sizes at given values of them: every shape and grid a number, each
size a constant in the kernels' bodies. The emulator, the reference checks and ``schedc show``
run on it; the loader evaluates the grid the same way at each call (``grid_at``).

>>> from .kernel import Binary, Const, Var
>>> evaluate(Binary("/", Binary("+", Var("M"), Const(15)), Const(16)), {"M": 33})
3
"""

from __future__ import annotations

import dataclasses
import math

from .affine import Affine
from .kernel import GRID_LIMITS, Binary, Buffer, Const, Expr, HostFunction, Kernel, ScalarParam, Var
from .walk import map_all_exprs, map_stmt

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max}


def evaluate(e: Expr | int, values: dict[str, int]) -> int:
    """An index expression of the run-time sizes (non-negative operands: C's division)."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return values[e.name]
    if isinstance(e, Binary) and e.op in _OPS:
        return _OPS[e.op](evaluate(e.lhs, values), evaluate(e.rhs, values))
    raise TypeError(f"not an expression of run-time sizes: {e!r}")


def grid_at(kernel: Kernel, values: dict[str, int]) -> tuple[int, int, int]:
    return tuple(evaluate(n, values) for n in kernel.grid)


def grids_fit(function: HostFunction, values: dict[str, int]) -> bool:
    """Whether every kernel's grid at the run-time sizes ``values`` is one CUDA launches."""
    return all(blocks <= limit for kernel in function.kernels
               for blocks, limit in zip(grid_at(kernel, values), GRID_LIMITS))


def buffer_at(buffer: Buffer, values: dict[str, int]) -> Buffer:
    if not buffer.sized:
        return buffer
    return dataclasses.replace(buffer, shape=tuple(n.evaluate(values) if isinstance(n, Affine) else n
                                                   for n in buffer.shape))


def kernel_at(kernel: Kernel, values: dict[str, int]) -> Kernel:
    constants = {name: Const(v) for name, v in values.items()}
    body = map_stmt(kernel.body, lambda s: map_all_exprs(s, lambda x: constants.get(x.name, x)
                                                         if isinstance(x, Var) else x))
    persistent = kernel.persistent
    if persistent is not None:
        tiles = tuple(evaluate(n, values) for n in persistent.tiles)
        persistent = dataclasses.replace(persistent, tiles=tiles, blocks=min(persistent.blocks, math.prod(tiles)))
    return dataclasses.replace(
        kernel, buffers=tuple(buffer_at(b, values) for b in kernel.buffers), grid=grid_at(kernel, values), body=body,
        values=tuple(v for v in kernel.values if not (isinstance(v, ScalarParam) and v.size)), persistent=persistent)


def function_at(function: HostFunction, values: dict[str, int]) -> HostFunction:
    """``function`` for the run-time sizes ``values`` (itself when it has none)."""
    if not function.sizes:
        return function
    params = tuple(buffer_at(p, values) if isinstance(p, Buffer) else p for p in function.params
                   if not (isinstance(p, ScalarParam) and p.size))
    return HostFunction(function.name, params, tuple(kernel_at(k, values) for k in function.kernels))
