"""The statement printer of the CUDA backend: one emitter per kernel-IR node class (``EMITTERS``,
the Hopper and tensor-core families register theirs) and expressions with C++'s precedence,
literals and narrow-type promotion. ``cuda.py`` assembles kernels from it; ``text_check.py``
parses its output back.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..ir.functions import cuda_name
from ..ir.kernel import (
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
    Call,
    Cast,
    Const,
    Expr,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    If,
    Kernel,
    LaneReduce,
    Let,
    Load,
    Loop,
    PrivateArray,
    StageLoad,
    StageStore,
    Staging,
    Stmt,
    Store,
    ThreadReduce,
    Unary,
    Var,
)
from ..ir.numeric import constant
from ..ir.registry import Registry
from ..ir.types import ScalarType
from .cuda_tensor import EMITTERS as TENSOR_EMITTERS
from .cuda_tensor import family_of

INDENT = "    "
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


EMITTERS = Registry("CUDA emitter")


def _c_div(a: int, b: int) -> int:
    """C's integer division: toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# index operations on literals alone, folded where the index is 64-bit (C computes them in int)
_FOLDED = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _c_div,
           "%": lambda a, b: a - _c_div(a, b) * b}


def _literal(e: Expr) -> int | None:
    """The value of an index expression of integer literals alone (C's operations), else None."""
    if isinstance(e, Const) and e.dtype is None and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if not (isinstance(e, Binary) and e.dtype is None and e.op in _FOLDED):
        return None
    lhs, rhs = _literal(e.lhs), _literal(e.rhs)
    if lhs is None or rhs is None or (e.op in "/%" and rhs == 0):
        return None
    return _FOLDED[e.op](lhs, rhs)


class Printer:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.buffers = {b.name: b for b in (*kernel.buffers, *kernel.shared)}
        self.fragments: dict[str, Fragment] = {}
        self.stagings: dict[str, Staging] = {}
        self.index_type = kernel.index_type.c_type

    def body(self, body: tuple[Stmt, ...], depth: int) -> list[str]:
        lines: list[str] = []
        for stmt in body:
            lines.extend(self.statement(stmt, depth))
        return lines

    def statement(self, s: Stmt, depth: int) -> list[str]:
        return EMITTERS.handler(s)(self, s, INDENT * depth, depth)

    @EMITTERS.handles(Let)
    def _let(self, s: Let, pad: str, depth: int) -> list[str]:
        comment = [f"{pad}// {s.comment}"] if s.comment else []
        return [*comment, f"{pad}const {self.index_type} {s.name} = {self.expr(s.value)};"]

    @EMITTERS.handles(Loop)
    def _loop(self, s: Loop, pad: str, depth: int) -> list[str]:
        start, stop = self.expr(s.start), self.expr(s.stop)
        head = f"for ({self.index_type} {s.var} = {start}; {s.var} < {stop}; {s.var} += {s.step}) {{"
        lines = [f"{pad}// {s.comment}"] if s.comment else []
        if s.unroll:
            lines.append(f"{pad}#pragma unroll")
        return [*lines, pad + head, *self.body(s.body, depth + 1), pad + "}"]

    @EMITTERS.handles(If)
    def _if(self, s: If, pad: str, depth: int) -> list[str]:
        lines = [f"{pad}// {s.comment}"] if s.comment else []
        lines += [f"{pad}if ({self.expr(s.cond)}) {{", *self.body(s.body, depth + 1)]
        if s.orelse:
            lines += [f"{pad}}} else {{", *self.body(s.orelse, depth + 1)]
        return [*lines, pad + "}"]

    @EMITTERS.handles(Store)
    def _store(self, s: Store, pad: str, depth: int) -> list[str]:
        return [f"{pad}{s.buffer}[{self.offset(s.buffer, s.index)}] = {self.expr(s.value)};"]

    @EMITTERS.handles(Barrier)
    def _barrier(self, s: Barrier, pad: str, depth: int) -> list[str]:
        return [f"{pad}__syncthreads();" + (f"  // {s.comment}" if s.comment else "")]

    @EMITTERS.handles(AsyncCommit)
    def _commit(self, s: AsyncCommit, pad: str, depth: int) -> list[str]:
        return [f"{pad}schedc::async_commit();"]

    @EMITTERS.handles(AsyncWait)
    def _wait(self, s: AsyncWait, pad: str, depth: int) -> list[str]:
        return [f"{pad}schedc::async_wait<{s.pending}>();"]

    @EMITTERS.handles(BlockCopy)
    def _block_copy(self, s: BlockCopy, pad: str, depth: int) -> list[str]:
        return [pad + line for line in self.block_copy(s)]

    @EMITTERS.handles(Staging, StageLoad, StageStore)
    def _staging(self, s: Stmt, pad: str, depth: int) -> list[str]:
        return [pad + line for line in self.staging(s)]

    @EMITTERS.handles(ThreadReduce)
    def _thread_reduce(self, s: ThreadReduce, pad: str, depth: int) -> list[str]:
        op = {"+": "Plus", "max": "Max", "min": "Min"}[s.op]
        scratch = s.scratch or f"static_cast<{s.dtype.c_type}*>(nullptr)"
        threads = self.kernel.block[0] * self.kernel.block[1] * self.kernel.block[2]
        return [f"{pad}// the row's {s.lanes} threads combine their partials ({s.op}); each gets the total",
                f"{pad}{s.array}[0] = schedc::allreduce_x<{s.lanes}, {threads}>({s.array}[0], {scratch}, "
                f"schedc::{op}());"]

    @EMITTERS.handles(LaneReduce)
    def _lane_reduce(self, s: LaneReduce, pad: str, depth: int) -> list[str]:
        op = {"+": "Plus", "max": "Max", "min": "Min"}[s.op]
        lines = [f"{pad}// the lanes of each row combine their partials ({s.op}, shfl.xor "
                 f"{', '.join(map(str, s.distances))}); each gets the row's total"]
        for slot in s.slots:
            for d in s.distances:
                lines.append(f"{pad}{s.array}[{slot}] = schedc::{op}()({s.array}[{slot}], "
                             f"__shfl_xor_sync(0xffffffffu, {s.array}[{slot}], {d}));")
        return lines

    @EMITTERS.handles(PrivateArray)
    def _private(self, s: PrivateArray, pad: str, depth: int) -> list[str]:
        self.buffers[s.name] = s
        return [f"{pad}{s.dtype.c_type} {s.name}[{s.size}];  // this thread's tile "
                f"{s.dtype.value}{list(s.shape)}, in {'local memory' if s.local else 'registers'}"]

    @EMITTERS.handles(Fragment, FragmentFill, FragmentLoad, FragmentStore, FragmentMma, FragmentApply, FragmentAdd,
                      FragmentConvert, FragmentMap)
    def _fragment(self, s: Stmt, pad: str, depth: int) -> list[str]:
        """Tile statements: the emitter of the fragment's instruction family writes them."""
        emitter = TENSOR_EMITTERS[family_of(self, s)](self)
        return [pad + line for line in emitter.statement(s)]

    def block_copy(self, s: BlockCopy) -> list[str]:
        shape, lds = self.box(s.shape, s.axes, (s.target, s.source))
        step = self.column_step(s.shape, s.axes, s.source)
        if step != 1 and s.vector != 1:
            raise ValueError(f"block copy from {s.source}: vectors of {s.vector} along a dimension of stride {step}")
        element = self.buffers[s.target].dtype.c_type
        function = "block_copy_async" if s.asynchronous else "block_copy"
        comment = [f"// {s.comment}"] if s.comment else []
        bounded, bounds = self.bounds(s.valid, s.axes)
        swizzle = self.swizzle(s.target, s.target_origin)
        transposed = self.transposed(s.shape, s.axes, s.target)
        if transposed and s.asynchronous:
            raise ValueError(f"cp.async cannot transpose into {s.target}")
        if swizzle or transposed or step != 1:  # rows XOR-swizzled (addressed from the tile's first row), the box
            bounded = f"{bounded or ', false'}, {swizzle}"  # transposed, or the source's columns strided
            if not s.asynchronous and (transposed or step != 1):
                bounded += ", true" if transposed else ", false"
            bounded += f", {step}" if step != 1 else ""
        return [*comment,
                f"schedc::{function}<{element}, {shape[0]}, {shape[1]}, {s.vector}, {_striped(s.strategy)}, "
                f"{self.kernel.threads_per_block}{bounded}>("
                f"&{s.target}[{self.offset(s.target, s.target_origin)}], {lds[0]}, "
                f"&{s.source}[{self.offset(s.source, s.source_origin)}], {lds[1]}, thread{bounds});"]

    def bounds(self, valid: tuple[Expr, ...], axes: tuple[int, ...]) -> tuple[str, str]:
        """The template flag and arguments of a bounded copy: rows and columns inside the array."""
        if not valid:
            return "", ""
        valid = tuple(valid[a] for a in axes) if axes else valid
        rows, cols = (Const(1), *valid) if len(valid) == 1 else valid
        return ", true", f", {self.expr(rows)}, {self.expr(cols)}"

    def box(self, shape: tuple[int, ...], axes: tuple[int, ...],
            buffers: tuple[str, ...]) -> tuple[tuple[int, int], list[int]]:
        """A copy's box as (rows, columns) in copy order (``axes``: the box's dimensions slowest
        first; a column-major tile copies its columns as rows) and each buffer's elements
        between those rows. The box lies in a buffer's last dimensions (a ring's slot first)."""
        axes = axes or tuple(range(len(shape)))
        box = (1, shape[0]) if len(shape) == 1 else tuple(shape[a] for a in axes)
        if len(box) != 2:
            raise ValueError(f"block copies of rank {len(shape)} are not emitted (rank 1 or 2)")
        lds = []
        for n, name in enumerate(buffers):
            b = self.buffers[name]
            dims = [len(b.strides) - len(shape) + a for a in axes]
            if n == 0 and self.transposed(shape, axes, name):  # the target's columns are the box's rows
                lds.append(b.strides[dims[-1]])
                continue
            if b.strides[dims[-1]] != 1 and not (n and isinstance(b, Buffer)):  # a global source: column_step
                raise ValueError(f"block copy: {name}'s dimension {dims[-1]} is not contiguous")
            lds.append(b.strides[dims[-2]] if len(dims) > 1 else 0)
        return box, lds

    def column_step(self, shape: tuple[int, ...], axes: tuple[int, ...], source: str) -> int:
        """Elements between a copy's columns in its source: 1, or where a slice of a tile of rank
        over 2 runs along no contiguous dimension of its array, that dimension's stride."""
        b = self.buffers[source]
        last = (axes or tuple(range(len(shape))))[-1]
        return b.strides[len(b.strides) - len(shape) + last] if isinstance(b, Buffer) else 1

    def transposed(self, shape: tuple[int, ...], axes: tuple[int, ...], target: str) -> bool:
        """Whether a 2-D copy's target holds the box transposed: contiguous along the box's
        rows instead of its columns."""
        axes = axes or tuple(range(len(shape)))
        b = self.buffers.get(target)
        if b is None or len(axes) != 2:
            return False
        dims = [len(b.strides) - len(shape) + a for a in axes]
        return b.strides[dims[-1]] != 1 and b.strides[dims[-2]] == 1

    def staging(self, s: Stmt) -> list[str]:
        if isinstance(s, Staging):
            self.stagings[s.name] = s
            (rows, cols), _ = self.box(s.shape, s.axes, ())
            return [f"schedc::staged<{s.dtype.c_type}, {rows}, {cols}, {s.vector}, {_striped(s.strategy)}, "
                    f"{self.kernel.threads_per_block}> {s.name};  // next tiles, in registers"]
        if isinstance(s, StageLoad):
            spec = self.stagings[s.staging]
            _, (ld,) = self.box(spec.shape, spec.axes, (s.source,))
            pointer = f"&{s.source}[{self.offset(s.source, s.source_origin)}]"
            bounded, bounds = self.bounds(s.valid, spec.axes)
            template = "<true>" if bounded else ""
            return [f"{s.staging}.load{template}({pointer}, {ld}, thread{bounds});"]
        spec = self.stagings[s.staging]
        _, (ld,) = self.box(spec.shape, spec.axes, (s.target,))
        pointer = f"&{s.target}[{self.offset(s.target, s.target_origin)}]"
        swizzle = self.swizzle(s.target, s.target_origin)
        if self.transposed(spec.shape, spec.axes, s.target):
            return [f"{s.staging}.store<{swizzle}, true>({pointer}, {ld}, thread);"]
        if swizzle:
            return [f"{s.staging}.store<{swizzle}>({pointer}, {ld}, thread);"]
        return [f"{s.staging}.store({pointer}, {ld}, thread);"]

    def swizzle(self, buffer: str, origin: tuple[Expr, ...]) -> int:
        """A copy target's swizzle pitch (0: none); a swizzled tile is copied whole, from its first
        row (the XOR pattern counts rows from there)."""
        swizzle = getattr(self.buffers[buffer], "swizzle", 0)
        if swizzle and any(not (isinstance(sub, Const) and sub.value == 0) for sub in origin[-2:]):
            raise ValueError(f"a copy into the swizzled {buffer} starts inside the tile")
        return swizzle

    def offset(self, buffer: str, index: tuple[Expr, ...]) -> str:
        """Multi-dimensional subscripts, linearised with the buffer's strides."""
        strides = self.buffers[buffer].strides
        terms: list[str] = []
        for sub, stride in zip(index, strides):
            if isinstance(sub, Const) and sub.value == 0:
                continue
            if stride == 1:
                terms.append(self.expr(sub, _PRECEDENCE["+"]))
            elif self.index_type != "int" and _literal(sub) is not None:  # literals alone compute in int: the value
                terms.append(self.expr(Binary("*", sub, Const(stride)), _PRECEDENCE["+"]))
            else:
                terms.append(f"{self.expr(sub, _PRECEDENCE['*'])} * {stride}")
        return " + ".join(terms) if terms else "0"

    def expr(self, e: Expr, parent: int = 0) -> str:
        if isinstance(e, Var):
            return self.variable(e.name)
        if isinstance(e, Const):
            return self.constant(e.value, e.dtype)
        if isinstance(e, Load):
            return f"{e.buffer}[{self.offset(e.buffer, e.index)}]"
        if isinstance(e, Cast):
            return f"schedc::convert<{e.dtype.c_type}>({self.expr(e.operand)})"
        if isinstance(e, Unary):
            operand = self.expr(e.operand, _UNARY)
            if e.dtype in _WRAPPING:  # -INT_MIN wraps, as the kernel IR means (C++ leaves it undefined)
                unsigned = _WRAPPING[e.dtype]
                return f"(({e.dtype.c_type})(({unsigned})0 - ({unsigned}){operand}))"
            if operand.startswith("-"):  # never `--x` (a decrement) nor `- -5`
                operand = f"({operand})"
            return _narrowed(f"-{operand}", e.dtype)
        if isinstance(e, Binary):
            if e.op in ("max", "min"):  # a template of one type: an index literal takes the index type
                lhs, rhs = (f"({self.index_type}){self.expr(x)}" if e.dtype is None and isinstance(x, Const)
                            and self.index_type != "int" else self.expr(x) for x in (e.lhs, e.rhs))
                return f"schedc::{e.op}({lhs}, {rhs})"
            return self.binary(e, parent)
        if isinstance(e, Call):
            return f"{cuda_name(e.function)}({', '.join(self.expr(a) for a in e.args)})"
        raise TypeError(f"unknown expression {e!r}")

    def variable(self, name: str) -> str:
        """Special registers are unsigned int: with 64-bit indexing they widen first, so that
        ``blockIdx.x * 4096`` cannot wrap at 2^32."""
        if name.startswith(_REGISTERS) and self.index_type != "int":
            return f"({self.index_type}){name}"
        return name

    def binary(self, e: Binary, parent: int) -> str:
        value = _literal(e) if self.index_type != "int" else None
        if value is not None:  # literals alone compute in int, which a 64-bit index may pass: their value
            return str(value) if value >= 0 else f"({value})"
        prec = _PRECEDENCE[e.op]
        # C++ groups `a + b + c` as (a + b) + c: a right operand of the same precedence keeps its
        # parentheses unless regrouping cannot change the value (exact index arithmetic)
        exact = e.dtype is None and (e.op == "+" or (e.op == "*" and getattr(e.rhs, "op", "") == "*"))
        right = prec if exact else prec + 1
        if e.dtype in _WRAPPING and e.op in ("+", "-", "*"):
            # signed overflow is undefined in C++ (NVVM folds A * 2 / 2 to A): the kernel IR means
            # it wraps, so the operation runs on the unsigned type and converts back
            unsigned = _WRAPPING[e.dtype]
            return (f"(({e.dtype.c_type})(({unsigned}){self.expr(e.lhs, _UNARY)} {e.op} "
                    f"({unsigned}){self.expr(e.rhs, _UNARY)}))")
        if e.dtype is ScalarType.uint16 and e.op == "*":  # 65535 * 65535 overflows int
            lhs = f"(unsigned int){self.expr(e.lhs, _UNARY)}"
        else:
            lhs = self.expr(e.lhs, prec)
        text = f"{lhs} {e.op} {self.expr(e.rhs, right)}"
        if e.dtype in _NARROW and e.op in _ARITHMETIC:
            return _narrowed(f"({text})", e.dtype)
        return f"({text})" if prec < parent else text

    def constant(self, value, dtype: ScalarType | None) -> str:
        if dtype is None:
            return str(int(value))
        if dtype is ScalarType.bool:
            return "true" if value else "false"
        if dtype.is_integer:
            value = int(value)
            if dtype is ScalarType.int32 and -2**31 < value < 2**31:
                return str(value)  # an int literal
            literal = str(value) if abs(value) < 2**63 else f"{'-' if value < 0 else ''}{abs(value)}u"
            return f"({dtype.c_type}){literal}"
        return _float_literal(float(value), dtype)


_UNARY = 7  # precedence of unary minus and casts
_ARITHMETIC = frozenset({"+", "-", "*", "/", "%"})
# types C++ promotes to int before any arithmetic
_NARROW = frozenset({ScalarType.bool, ScalarType.int8, ScalarType.uint8, ScalarType.int16, ScalarType.uint16})
_REGISTERS = ("threadIdx.", "blockIdx.")
# signed types whose + - * wrap in the kernel IR: computed on their unsigned types in the CUDA text
_WRAPPING = {ScalarType.int32: "unsigned int", ScalarType.int64: "unsigned long long"}


def _narrowed(text: str, dtype: ScalarType | None) -> str:
    """``text`` (a unary or parenthesised expression) converted back to a narrow type: C++
    computed it exactly in int, the kernel IR means the result wrapped to ``dtype``."""
    return f"({dtype.c_type}){text}" if dtype in _NARROW else text


def _float_literal(value: float, dtype: ScalarType) -> str:
    """A constant of a float type: the value the kernel IR means (``numeric.constant``, as the
    emulator computes it), in a text C++ rounds to exactly that value."""
    if dtype is ScalarType.float32:  # the shortest text of the float32 value: `0.1f`, never double-rounded
        with np.errstate(over="ignore"):
            single = np.float32(value)
        if math.isfinite(single):
            return f"{_decimal(str(single))}f"
        return f"(float){_special(float(single))}"
    if dtype is ScalarType.bfloat16 or dtype.size == 1:  # its value exactly: however the conversion rounds, it keeps it
        value = float(constant(value, dtype))
    text = _decimal(repr(value)) if math.isfinite(value) else _special(value)
    if dtype is ScalarType.float64:
        return text
    if dtype.size == 1:  # the 8-bit floats: cuda_fp8.h's constructor from a double
        return f"{dtype.c_type}({text})"
    function = "__double2half" if dtype is ScalarType.float16 else "__double2bfloat16"
    return f"{function}({text})"


def _decimal(text: str) -> str:
    return text if "e" in text or "." in text else text + ".0"


def _special(value: float) -> str:
    if math.isnan(value):
        return "__longlong_as_double(0x7ff8000000000000ll)"
    return f"{'-' if value < 0 else ''}__longlong_as_double(0x7ff0000000000000ll)"


def _striped(strategy: str) -> str:
    return "true" if strategy == "striped" else "false"
