"""Kernel IR → readable CUDA C++: one line per operation, comments naming schedule loops.

The text is self-contained (the runtime header is inlined) and deterministic: the same kernel
gives byte-identical source.
"""

from __future__ import annotations

import math
from importlib import resources

import numpy as np

from ..ir.kernel import (
    SHARED_ALIGN,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
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
    HostFunction,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    PrivateArray,
    ScalarParam,
    StageLoad,
    StageStore,
    Staging,
    Stmt,
    Store,
    StructParam,
    Unary,
    Var,
    walk_statements,
)
from ..ir.types import ScalarType
from .cuda_tensor import EMITTERS as TENSOR_EMITTERS
from .cuda_tensor import family_of
from .registry import Registry

INDENT = "    "
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


def runtime_header() -> str:
    return resources.files("schedc.codegen").joinpath("runtime/schedc.cuh").read_text()


RUNTIME_BEGIN = "// ---- schedc runtime (schedc/codegen/runtime/schedc.cuh) ----"
RUNTIME_END = "// ---- end of schedc runtime ----"


def without_runtime(source: str) -> str:
    """The generated part of a .cu file: the inlined runtime header replaced by one line."""
    start, end = source.find(RUNTIME_BEGIN), source.find(RUNTIME_END)
    if start < 0 or end < 0:
        return source
    return source[:start] + "// (schedc runtime header inlined here)" + source[end + len(RUNTIME_END):]


def emit_source(kernels: list[Kernel | HostFunction], banner: str) -> str:
    """A whole .cu file: banner, inlined runtime, kernels and their host launchers: one per
    function (a Kernel is the function of that kernel alone)."""
    functions = [HostFunction.single(k) if isinstance(k, Kernel) else k for k in kernels]
    every = [kernel for f in functions for kernel in f.kernels]
    parts = [banner.rstrip() + "\n",
             RUNTIME_BEGIN,
             runtime_header().rstrip(),
             RUNTIME_END + "\n",
             "using namespace nvcuda;\n"]
    builders = sorted({v.builder for f in functions for v in f.params if isinstance(v, StructParam)})
    parts += [_STRUCT_DEFINITIONS[builder] for builder in builders]
    seen: set[str] = set()
    for kernel in every:
        for buffer in kernel.buffers:
            if buffer.kind != "param" and buffer.name not in seen:
                seen.add(buffer.name)
                parts.append(_global_buffer(buffer))
    parts += cuda_hopper.helpers(every)
    for kernel in every:
        parts.append(emit_kernel(kernel))
    parts.append("#if !defined(__CUDACC_RTC__)")
    parts.append("// Host launchers: C-callable; they return the launch's cudaError_t (0 on success).")
    for function in functions:
        parts.append(emit_launcher(function))
    parts.append("#endif  // !defined(__CUDACC_RTC__)")
    return "\n".join(parts) + "\n"


# C++ types of by-value structs, by builder, and their definitions (NVRTC has no cuda.h)
STRUCT_TYPES = {"tensor_map": "CUtensorMap"}
_STRUCT_DEFINITIONS = {"tensor_map": """#if defined(__CUDACC_RTC__)
// CUtensorMap as cuda.h declares it: 128 opaque bytes, made by cuTensorMapEncodeTiled
typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;
#else
#include <cuda.h>
#endif
"""}


def launcher_name(kernel: Kernel) -> str:
    return kernel.name.removesuffix("__gpu__")


def parameter_list(owner: Kernel | HostFunction, restrict: bool) -> str:
    """A kernel's parameters (``restrict``: its __global__ signature) or a function's (its host
    launcher's): pointers, scalars, and structs (``const __grid_constant__`` in a kernel)."""
    qualifier = " __restrict__" if restrict else ""
    params = []
    for p in owner.arguments if isinstance(owner, Kernel) else owner.params:
        if isinstance(p, ScalarParam):
            params.append(f"{p.dtype.c_type} {p.name}")
        elif isinstance(p, StructParam):
            grid_constant = "const __grid_constant__ " if restrict else ""
            params.append(f"{grid_constant}{STRUCT_TYPES[p.builder]} {p.name}")
        else:
            const = "const " if p.role == "input" else ""
            params.append(f"{const}{p.dtype.c_type}*{qualifier} {p.name}")
    return ", ".join(params)


def emit_kernel(kernel: Kernel, check: bool = True) -> str:
    """One kernel's C++. With ``check``, every expression in it is parsed back and compared with
    the kernel IR (text_check), so a printer bug is an InternalError, not a wrong kernel."""
    lines = [
        f'extern "C" __global__ void __launch_bounds__({kernel.threads_per_block}'
        f'{f", {kernel.min_blocks}" if kernel.min_blocks else ""})'
        + (f" __cluster_dims__({', '.join(map(str, kernel.cluster))})" if kernel.cluster != (1, 1, 1) else ""),
        f"{kernel.name}({parameter_list(kernel, restrict=True)})",
        "{",
    ]
    EMITTERS.require(kernel.body, kernel.name)  # every node class has an emitter, or none is emitted
    printer = Printer(kernel)
    lines.extend(shared_declarations(kernel))
    lines.extend(INDENT + line for line in tensor_prelude(kernel))
    if kernel.cluster != (1, 1, 1):
        lines.append(f"{INDENT}const int cluster_rank = schedc::cluster_rank();  // this block's rank in its cluster")
    for buffer in kernel.buffers:
        if buffer.kind == "const":
            lines.append(f"{INDENT}const {buffer.dtype.c_type}* {buffer.name} = "
                         f"reinterpret_cast<const {buffer.dtype.c_type}*>({buffer.name}_bits);")
    lines.extend(printer.body(kernel.body, 1))
    lines.append("}\n")
    text = "\n".join(lines)
    if check:
        from .text_check import check_kernel

        check_kernel(kernel, text)
    return text


def tensor_prelude(kernel: Kernel) -> list[str]:
    """What the kernel's instruction families declare once (mma.sync: the thread's lane)."""
    families = dict.fromkeys(s.family for s in walk_statements(kernel.body) if isinstance(s, Fragment))
    return [line for family in families for line in TENSOR_EMITTERS[family].prelude()]


def shared_declarations(kernel: Kernel) -> list[str]:
    if not kernel.shared:
        return []
    align = max(SHARED_ALIGN, *(b.align for b in kernel.shared))
    lines = [f"{INDENT}extern __shared__ __align__({align}) unsigned char schedc_shared[];"]
    for b, offset in zip(kernel.shared, kernel.shared_offsets()):
        lines.append(f"{INDENT}// shared buffer {b.name}: {b.dtype.value}{list(b.shape)}, {b.nbytes} bytes")
        cast = f"reinterpret_cast<{b.dtype.c_type}*>(schedc_shared + {offset})"
        lines.append(f"{INDENT}{b.dtype.c_type}* {b.name} = {cast};")
    bx, by = kernel.block[0], kernel.block[1]
    lines.append(f"{INDENT}const int thread = threadIdx.x + {bx} * (threadIdx.y + {by} * threadIdx.z);")
    return lines


def emit_launcher(function: Kernel | HostFunction) -> str:
    """The C-callable host function: its kernels launched in order on the default stream; the
    first launch that fails ends it with its error."""
    if isinstance(function, Kernel):
        function = HostFunction.single(function)
    lines = [f'extern "C" int {function.name}({parameter_list(function, restrict=False)})', "{"]
    for n, kernel in enumerate(function.kernels):
        if n:
            lines += [f"{INDENT}{{", f"{INDENT * 2}const int status = (int)cudaGetLastError();",
                      f"{INDENT * 2}if (status != 0) return status;", f"{INDENT}}}"]
        lines += _launch_lines(kernel, n, len(function.kernels))
    lines += [f"{INDENT}return (int)cudaGetLastError();", "}\n"]
    return "\n".join(lines)


def _launch_lines(kernel: Kernel, n: int, count: int) -> list[str]:
    g, b = kernel.grid, kernel.block
    args = ", ".join(p.name for p in kernel.arguments)
    lines = [f"{INDENT}// kernel {n + 1} of {count}"] if count > 1 else []
    if kernel.dynamic_shared_bytes > 48 * 1024:
        lines.append(f"{INDENT}cudaFuncSetAttribute({kernel.name}, "
                     f"cudaFuncAttributeMaxDynamicSharedMemorySize, {kernel.dynamic_shared_bytes});")
    lines.append(f"{INDENT}{kernel.name}<<<dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), "
                 f"{kernel.dynamic_shared_bytes}>>>({args});")
    return lines


def _striped(strategy: str) -> str:
    return "true" if strategy == "striped" else "false"


def _global_buffer(buffer: Buffer) -> str:
    if buffer.kind == "temp":
        return (f"// temporary array {buffer.name}: scratch storage, contents undefined on entry\n"
                f"__device__ {buffer.dtype.c_type} {buffer.name}[{buffer.size}];\n")
    bits = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
    width = bits[buffer.dtype.size]
    rows = []
    for start in range(0, len(buffer.data), 8):
        rows.append(INDENT + ", ".join(f"0x{v:x}" for v in buffer.data[start:start + 8]) + ",")
    return (f"// constant array {buffer.name}: {buffer.dtype.value}{list(buffer.shape)}, element bit patterns\n"
            f"__device__ const {width} {buffer.name}_bits[{buffer.size}] = {{\n"
            + "\n".join(rows) + "\n};\n")


EMITTERS = Registry("CUDA emitter")


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

    @EMITTERS.handles(PrivateArray)
    def _private(self, s: PrivateArray, pad: str, depth: int) -> list[str]:
        self.buffers[s.name] = s
        return [f"{pad}{s.dtype.c_type} {s.name}[{s.size}];  // this thread's tile "
                f"{s.dtype.value}{list(s.shape)}, in {'local memory' if s.local else 'registers'}"]

    @EMITTERS.handles(Fragment, FragmentFill, FragmentLoad, FragmentStore, FragmentMma, FragmentApply, FragmentAdd)
    def _fragment(self, s: Stmt, pad: str, depth: int) -> list[str]:
        """Tile statements: the emitter of the fragment's instruction family writes them."""
        emitter = TENSOR_EMITTERS[family_of(self, s)](self)
        return [pad + line for line in emitter.statement(s)]

    def block_copy(self, s: BlockCopy) -> list[str]:
        shape, lds = self.box(s.shape, s.axes, (s.target, s.source))
        element = self.buffers[s.target].dtype.c_type
        function = "block_copy_async" if s.asynchronous else "block_copy"
        comment = [f"// {s.comment}"] if s.comment else []
        bounded, bounds = self.bounds(s.valid, s.axes)
        swizzle = self.swizzle(s.target, s.target_origin)
        transposed = self.transposed(s.shape, s.axes, s.target)
        if transposed and s.asynchronous:
            raise ValueError(f"cp.async cannot transpose into {s.target}")
        if swizzle or transposed:  # rows XOR-swizzled (addressed from the tile's first row), or the box transposed
            bounded = f"{bounded or ', false'}, {swizzle}" + (", true" if transposed else "")
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
            if b.strides[dims[-1]] != 1:
                raise ValueError(f"block copy: {name}'s dimension {dims[-1]} is not contiguous")
            lds.append(b.strides[dims[-2]] if len(dims) > 1 else 0)
        return box, lds

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
            if operand.startswith("-"):  # never `--x` (a decrement) nor `- -5`
                operand = f"({operand})"
            return _narrowed(f"-{operand}", e.dtype)
        if isinstance(e, Binary):
            if e.op in ("max", "min"):
                return f"schedc::{e.op}({self.expr(e.lhs)}, {self.expr(e.rhs)})"
            return self.binary(e, parent)
        raise TypeError(f"unknown expression {e!r}")

    def variable(self, name: str) -> str:
        """Special registers are unsigned int: with 64-bit indexing they widen first, so that
        ``blockIdx.x * 4096`` cannot wrap at 2^32."""
        if name.startswith(_REGISTERS) and self.index_type != "int":
            return f"({self.index_type}){name}"
        return name

    def binary(self, e: Binary, parent: int) -> str:
        prec = _PRECEDENCE[e.op]
        # C++ groups `a + b + c` as (a + b) + c: a right operand of the same precedence keeps its
        # parentheses unless regrouping cannot change the value (exact index arithmetic)
        exact = e.dtype is None and (e.op == "+" or (e.op == "*" and getattr(e.rhs, "op", "") == "*"))
        right = prec if exact else prec + 1
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


def _narrowed(text: str, dtype: ScalarType | None) -> str:
    """``text`` (a unary or parenthesised expression) converted back to a narrow type: C++
    computed it exactly in int, the kernel IR means the result wrapped to ``dtype``."""
    return f"({dtype.c_type}){text}" if dtype in _NARROW else text


def _float_literal(value: float, dtype: ScalarType) -> str:
    """A constant of a float type: the value the kernel IR means (``dtype.numpy.type(value)``,
    as the emulator computes it), in a text C++ rounds to exactly that value."""
    if dtype is ScalarType.float32:  # the shortest text of the float32 value: `0.1f`, never double-rounded
        with np.errstate(over="ignore"):
            single = np.float32(value)
        if math.isfinite(single):
            return f"{_decimal(str(single))}f"
        return f"(float){_special(float(single))}"
    if dtype is ScalarType.bfloat16:  # ml_dtypes rounds through float32: print its value exactly
        with np.errstate(over="ignore"):
            value = float(dtype.numpy.type(value))
    text = _decimal(repr(value)) if math.isfinite(value) else _special(value)
    if dtype is ScalarType.float64:
        return text
    function = "__double2half" if dtype is ScalarType.float16 else "__double2bfloat16"
    return f"{function}({text})"


def _decimal(text: str) -> str:
    return text if "e" in text or "." in text else text + ".0"


def _special(value: float) -> str:
    if math.isnan(value):
        return "__longlong_as_double(0x7ff8000000000000ll)"
    return f"{'-' if value < 0 else ''}__longlong_as_double(0x7ff0000000000000ll)"


from . import cuda_hopper  # noqa: E402 - registers the Hopper statements' emitters
