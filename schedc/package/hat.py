"""HAT files: TOML metadata inside a C header (hatlib's schema).

The TOML sits between ``#ifdef TOML`` and ``#endif // TOML``, so C sees only the declarations,
which the ``[declaration]`` table's code string opens to the preprocessor (as Accera's files do). The text depends only
on the functions, so the same script gives a byte-identical file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field

import tomli_w

from ..codegen.cuda import STRUCT_TYPES, grid_text
from ..errors import PackageError
from ..ir import sizes
from ..ir.kernel import Buffer, HostFunction, Param, ScalarParam, StructParam

DEVICE_SUFFIX = "__gpu__"


@dataclass(frozen=True)
class HatFunction:
    """One function of a package: what it launches and a one-line description."""

    function: HostFunction
    description: str
    alignments: dict[str, int]  # bytes each array parameter's base address must be aligned to
    parameters: dict[str, int | float | bool | str] = field(default_factory=dict)  # Package.add's values
    tuning: dict = field(default_factory=dict)  # schedc tune: how the point was chosen (auxiliary.schedc.tuning)


@dataclass(frozen=True)
class BuildInfo:
    package: str
    target_name: str
    arch: str
    sm_count: int
    compiler: str
    flags: str
    library: str  # lib<name>.so, or "" when none was built
    version: str
    described: dict = field(default_factory=dict)  # Package.add_description: what replaces the defaults


def _shape(b: Buffer) -> list:
    """The shape for the .hat: numbers, and a run-time size by its name."""
    return [n if isinstance(n, int) else str(n) for n in b.shape]


def _bytes(b: Buffer) -> str:
    """A workspace's bytes: ``64 bytes``, or a formula of the run-time sizes (``4*M bytes``)."""
    span = sizes.span(b)
    return f"{span * b.dtype.size if isinstance(span, int) else span.scale(b.dtype.size)} bytes"


def _parameter(b: Buffer) -> dict:
    workspace = b.kind == "workspace"
    shown = "[" + ", ".join(map(str, _shape(b))) + "]"
    what = (f"workspace {b.dtype.value}{shown} ({_bytes(b)} of device memory the caller allocates "
            f"{'for the largest sizes it calls with' if b.sized else 'once'}; contents undefined between calls)") \
        if workspace else f"{b.role} array {b.dtype.value}{shown}"
    return {
        "name": b.name,
        "description": what,
        "logical_type": "affine_array",
        "declared_type": f"{b.dtype.hat_type}*",
        "element_type": b.dtype.hat_type,
        "usage": "input_output" if workspace else b.role,
        "shape": _shape(b),
        "affine_map": list(b.strides),
        "affine_offset": 0,
    }


def _argument(p: Param, arrays: tuple[Buffer, ...] = ()) -> dict:
    if isinstance(p, Buffer):
        return _parameter(p)
    if isinstance(p, ScalarParam):
        what = f"scalar {p.dtype.value}"
        if p.size:
            where = ", ".join(f"{b.name}.shape[{d}]" for b in arrays for d, n in enumerate(b.shape) if str(n) == p.name)
            what = f"run-time size ({p.dtype.value}): the extent {where}; a Python call reads it from the arrays"
        return {"name": p.name, "description": what, "logical_type": "element",
                "declared_type": p.dtype.hat_type, "element_type": p.dtype.hat_type, "usage": "input"}
    return {"name": p.name, "description": f"{p.builder} of {p.spec.array}, passed by value "
                                           f"({p.size} bytes, built by the loader; {_encoding(p.spec)})",
            "logical_type": "element", "declared_type": STRUCT_TYPES[p.builder],
            "element_type": STRUCT_TYPES[p.builder], "usage": "input"}


def _void() -> dict:
    return {"name": "", "description": "", "logical_type": "void", "declared_type": "void",
            "element_type": "void", "usage": "output"}


def _status() -> dict:
    return {"name": "status", "description": "cudaError_t of the launch (0: success)",
            "logical_type": "element", "declared_type": "int32_t", "element_type": "int32_t",
            "usage": "output"}


def render(functions: list[HatFunction], info: BuildInfo) -> str:
    hosts, devices = {}, {}
    for f in functions:
        fn = f.function
        auxiliary = {"ir": f"{info.package}.schedc.json", "alignment": dict(sorted(f.alignments.items()))}
        if len(fn.kernels) > 1:  # hatlib's "launches" names one kernel: the first; here all, in order
            auxiliary["launches"] = [k.name for k in fn.kernels]
        if f.tuning:
            auxiliary["tuning"] = f.tuning
        hosts[fn.name] = {
            "name": fn.name,
            "description": f.description,
            "calling_convention": "cdecl",
            "arguments": [_argument(p, fn.arrays) for p in fn.params],
            "launches": fn.kernels[0].name,
            "return": _status(),
            "auxiliary": {"schedc": auxiliary, **({"accera": {"parameters": f.parameters}} if f.parameters else {})},
        }
        for n, k in enumerate(fn.kernels):
            devices[k.name] = {
                "name": k.name,
                "description": f"kernel of {fn.name}" + (f" ({n + 1} of {len(fn.kernels)})" if len(fn.kernels) > 1
                                                         else ""),
                "calling_convention": "devicecall",
                "arguments": [_argument(p, fn.arrays) for p in k.arguments],
                "launch_parameters": [*(n if isinstance(n, int) else grid_text(k, n) for n in k.grid), *k.block],
                "dynamic_shared_mem_bytes": k.dynamic_shared_bytes,
                "provider": f"{info.package}.cu",
                "runtime": "CUDA",
                "return": _void(),
            }
    threads = max((k.threads_per_block for f in functions for k in f.function.kernels), default=0)
    shared = max((k.dynamic_shared_bytes for f in functions for k in f.function.kernels), default=0)
    deploy = [f"{info.package}.cu", f"{info.package}.cubin", f"{info.package}.schedc.json"]
    document = {
        "description": {
            "comment": f"schedc package {info.package} for {info.target_name}",
            "author": "schedc",
            "version": info.version,
            "license_url": "",
            **info.described,
        },
        "functions": hosts,
        "device_functions": devices,
        "target": {
            "required": {
                "os": "linux",
                "CPU": {"architecture": "x86_64", "extensions": []},
                "GPU": {
                    "runtime": "CUDA",
                    "model": info.target_name,
                    "blocks": info.sm_count,
                    "instruction_set_version": info.arch,
                    "min_threads": threads,
                    "min_global_memory_KB": 0,
                    "min_shared_memory_KB": -(-shared // 1024),  # the most a kernel's block takes
                    "min_texture_memory_KB": 0,
                },
            },
            "optimized_for": {},
        },
        "dependencies": {
            "link_target": info.library,
            "deploy_files": deploy + ([info.library] if info.library else []),
            "dynamic": [{"name": "cudart", "version": "13", "target_file": "libcudart.so.13"}]
            if info.library else [],
        },
        "compiled_with": {"compiler": info.compiler, "flags": info.flags, "crt": "", "libraries": []},
    }
    guard = info.package.replace(".", "_")
    body = tomli_w.dumps(document).replace("*/", "* /")
    # The TOML is a skipped block for C; its string delimiters sit inside C comments that are
    # TOML comments too ("# /*" ... "# */"), so no C compiler warns about unterminated quotes.
    return (
        f"\n#ifndef __{guard}__\n#define __{guard}__\n\n#ifdef TOML\n# /*\n"
        + body
        + '\n[declaration]\ncode = """\n# */\n#endif // TOML\n'
        + declarations(functions, info.package)
        + '#ifdef TOML\n# /*\n"""\n# */\n#endif // TOML\n\n#endif // __' + guard + "__\n"
    )


_FLOAT8_TYPES = ["#ifndef SCHEDC_FLOAT8_TYPES", "#define SCHEDC_FLOAT8_TYPES",
                 "typedef uint8_t float8_e4m3_t;  // OCP E4M3 (FN) bits",
                 "typedef uint8_t float8_e5m2_t;  // OCP E5M2 bits", "#endif"]


def _has_float8(functions: list[HatFunction]) -> bool:
    """Whether any parameter is of an 8-bit float type (their typedefs are declared then only,
    so that the headers of packages without them stay as they were)."""
    return any(getattr(p, "dtype", None) is not None and p.dtype.arithmetic is not p.dtype
               for f in functions for p in f.function.params)


def declarations(functions: list[HatFunction], package: str) -> str:
    lines = [
        f"// C declarations of the host launchers in lib{package}.so",
        "#include <stdint.h>",
        *(["#include <cuda.h>  // CUtensorMap"] if _has_structs(functions) else []),
        "#ifndef SCHEDC_HALF_TYPES",
        "#define SCHEDC_HALF_TYPES",
        "typedef uint16_t float16_t;  // IEEE binary16 bits",
        "typedef uint16_t bfloat16_t;  // bfloat16 bits",
        "#endif",
        *(_FLOAT8_TYPES if _has_float8(functions) else []),
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for f in functions:
        fn = f.function
        params = ", ".join(_declaration(p) for p in fn.params)
        kernels = f"; launches {', '.join(k.name for k in fn.kernels)} in order" if len(fn.kernels) > 1 else ""
        lines.append(f"// {f.description}{kernels}; device pointers; returns the launch's cudaError_t")
        lines.append(f"int {fn.name}({params});")
    lines += ["#ifdef __cplusplus", "}", "#endif"]
    return "\n".join(lines) + "\n"


def _declaration(p: Param) -> str:
    if isinstance(p, ScalarParam):
        return f"{p.dtype.hat_type} {p.name}"
    if isinstance(p, StructParam):
        return f"{STRUCT_TYPES[p.builder]} {p.name}"
    return f"{'const ' if p.role == 'input' else ''}{p.dtype.hat_type}* {p.name}"


def _encoding(spec) -> str:
    """How a C caller encodes the tensor map (cuTensorMapEncodeTiled), in the array's order."""
    size = f"the array's first {' x '.join(map(str, spec.bounds))} elements" if spec.bounds else "the whole array"
    swizzle = f"{spec.swizzle}-byte swizzle" if spec.swizzle else "no swizzle"
    return f"{size}, boxes of {' x '.join(map(str, spec.box))}, {swizzle}"


def _has_structs(functions: list[HatFunction]) -> bool:
    return any(isinstance(p, StructParam) for f in functions for p in f.function.params)


def read(path) -> dict:
    """The TOML of a .hat file as plain Python values."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PackageError(str(path), f"cannot read: {e.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PackageError(str(path), f"not a HAT file: {e}") from None
