"""Kernel IR → readable CUDA C++: one line per operation, comments naming schedule loops.

The text is self-contained (the runtime header is inlined) and deterministic: the same kernel
gives byte-identical source.
"""

from __future__ import annotations

from importlib import resources

from ..ir.kernel import (
    SHARED_ALIGN,
    WARPGROUP_INDEX,
    Barrier,
    Buffer,
    Const,
    Fragment,
    HostFunction,
    Kernel,
    ScalarParam,
    StructParam,
    Var,
    buffers_read,
    buffers_written,
    warpgroup_definition,
)
from ..ir.walk import exprs, loads, variables, walk_statements
from . import cuda_hopper  # noqa: F401 - registers the Hopper statements' emitters
from .cuda_printer import EMITTERS, INDENT, Printer
from .cuda_tensor import EMITTERS as TENSOR_EMITTERS
from .text_check import check_kernel


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
            if buffer.kind == "const" and buffer.name not in seen:
                seen.add(buffer.name)
                parts.append(_constant_buffer(buffer))
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
    launcher's): pointers, scalars, and structs (``const __grid_constant__`` in a kernel).

    In a kernel with ``__syncthreads()``, the arrays it both writes and reads are not
    ``__restrict__``: its threads may hand values to each other through them across the barrier
    (a row's maximum written by one thread, read by the others in the next part), and a compiler
    may move a load through a restrict pointer that has not escaped above the barrier, reading a
    stale value."""
    shared = handed_over(owner) if isinstance(owner, Kernel) else set()
    params = []
    for p in owner.arguments if isinstance(owner, Kernel) else owner.params:
        if isinstance(p, ScalarParam):
            params.append(f"{p.dtype.c_type} {p.name}")
        elif isinstance(p, StructParam):
            grid_constant = "const __grid_constant__ " if restrict else ""
            params.append(f"{grid_constant}{STRUCT_TYPES[p.builder]} {p.name}")
        else:
            const = "const " if p.role == "input" else ""
            qualifier = " __restrict__" if restrict and p.name not in shared else ""
            params.append(f"{const}{p.dtype.c_type}*{qualifier} {p.name}")
    return ", ".join(params)


def handed_over(kernel: Kernel) -> set[str]:
    """The global arrays a kernel with ``__syncthreads()`` both writes and reads (through which its
    threads may hand values to each other across a barrier); none without a barrier."""
    body = list(walk_statements(kernel.body))
    if not any(isinstance(s, Barrier) for s in body):
        return set()
    written = {name for s in body for name in buffers_written(s)}
    read = {ld.buffer for ld in loads(kernel.body)} | {name for s in body for name in buffers_read(s)}
    return written & read & {b.name for b in kernel.buffers}


def emit_kernel(kernel: Kernel, check: bool = True) -> str:
    """One kernel's C++. With ``check``, every expression in it is parsed back and compared with
    the kernel IR (text_check), so a printer bug is an InternalError, not a wrong kernel."""
    EMITTERS.require(kernel.body, kernel.name)  # every node class has an emitter, or none is emitted
    lines = [
        f'extern "C" __global__ void __launch_bounds__({kernel.threads_per_block}'
        f'{f", {kernel.min_blocks}" if kernel.min_blocks else ""})'
        + (f" __cluster_dims__({', '.join(map(str, kernel.cluster))})" if kernel.cluster != (1, 1, 1) else ""),
        f"{kernel.name}({parameter_list(kernel, restrict=True)})",
        "{",
    ]
    printer = Printer(kernel)
    lines.extend(shared_declarations(kernel))
    lines.extend(INDENT + line for line in tensor_prelude(kernel))
    if reads_warpgroup(kernel):
        lines.append(INDENT + warpgroup_definition(kernel.index_type))
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
        check_kernel(kernel, text)
    return text


def reads_warpgroup(kernel: Kernel) -> bool:
    """Whether the kernel's statements read the thread's warpgroup (``WARPGROUP_INDEX``)."""
    return any(WARPGROUP_INDEX.name in variables(e) for s in walk_statements(kernel.body) for e in exprs(s))


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
    for size in function.sizes:
        lines.append(f"{INDENT}if ({size.name} < 1) return (int)cudaErrorInvalidValue;  // a run-time size is at "
                     "least 1")
    for n, kernel in enumerate(function.kernels):
        if n:
            lines += [f"{INDENT}{{", f"{INDENT * 2}const int status = (int)cudaGetLastError();",
                      f"{INDENT * 2}if (status != 0) return status;", f"{INDENT}}}"]
        lines += _launch_lines(kernel, n, len(function.kernels))
    lines += [f"{INDENT}return (int)cudaGetLastError();", "}\n"]
    return "\n".join(lines)


def grid_text(kernel: Kernel, blocks, host: bool = False) -> str:
    """Blocks along a grid axis as C text: a number, or an expression of run-time sizes
    (``host``: the launcher's, in 64-bit arithmetic, which ``M + 127`` cannot overflow)."""
    if isinstance(blocks, int):
        return str(blocks)
    return f"(unsigned)({_host_expr(blocks)})" if host else Printer(kernel).expr(blocks)


def _host_expr(e) -> str:
    """An expression of run-time sizes in the launcher's 64-bit arithmetic (``(M + 127LL) / 128LL``)."""
    if isinstance(e, Var):
        return f"(long long){e.name}"
    if isinstance(e, Const):
        return f"{e.value}LL"
    lhs, rhs = _host_expr(e.lhs), _host_expr(e.rhs)
    if e.op in ("min", "max"):
        return f"({lhs} {'<' if e.op == 'min' else '>'} {rhs} ? {lhs} : {rhs})"
    return f"({lhs} {e.op} {rhs})"


def _launch_lines(kernel: Kernel, n: int, count: int) -> list[str]:
    g = tuple(grid_text(kernel, n, host=True) for n in kernel.grid)
    b = kernel.block
    args = ", ".join(p.name for p in kernel.arguments)
    lines = [f"{INDENT}// kernel {n + 1} of {count}"] if count > 1 else []
    if kernel.dynamic_shared_bytes > 48 * 1024:
        lines.append(f"{INDENT}cudaFuncSetAttribute({kernel.name}, "
                     f"cudaFuncAttributeMaxDynamicSharedMemorySize, {kernel.dynamic_shared_bytes});")
    if kernel.dependent_launch:  # its blocks may start while the kernel before runs (see lower/chain.py)
        return lines + [
            f"{INDENT}{{",
            f"{INDENT * 2}cudaLaunchAttribute overlap[1];",
            f"{INDENT * 2}overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;",
            f"{INDENT * 2}overlap[0].val.programmaticStreamSerializationAllowed = 1;",
            f"{INDENT * 2}cudaLaunchConfig_t config = {{dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), "
            f"{kernel.dynamic_shared_bytes}, 0, overlap, 1}};",
            f"{INDENT * 2}cudaLaunchKernelEx(&config, {kernel.name}, {args});",
            f"{INDENT}}}"]
    lines.append(f"{INDENT}{kernel.name}<<<dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), "
                 f"{kernel.dynamic_shared_bytes}>>>({args});")
    return lines


def _constant_buffer(buffer: Buffer) -> str:
    bits = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
    width = bits[buffer.dtype.size]
    rows = []
    for start in range(0, len(buffer.data), 8):
        rows.append(INDENT + ", ".join(f"0x{v:x}" for v in buffer.data[start:start + 8]) + ",")
    return (f"// constant array {buffer.name}: {buffer.dtype.value}{list(buffer.shape)}, element bit patterns\n"
            f"__device__ const {width} {buffer.name}_bits[{buffer.size}] = {{\n"
            + "\n".join(rows) + "\n};\n")
