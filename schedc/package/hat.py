"""HAT files: TOML metadata inside a C header (hatlib's schema).

The TOML sits between ``#ifdef TOML`` and ``#endif // TOML``, so C sees only the declarations,
which the ``[declaration]`` table's code string opens to the preprocessor (as Accera's files do). The text depends only
on the functions, so the same script gives a byte-identical file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

import tomli_w

from ..errors import PackageError
from ..ir.kernel import Buffer, Kernel

DEVICE_SUFFIX = "__gpu__"


@dataclass(frozen=True)
class HatFunction:
    """One function of a package: its kernel and a one-line description."""

    kernel: Kernel
    description: str
    alignments: dict[str, int]  # bytes each parameter's base address must be aligned to


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


def _parameter(b: Buffer) -> dict:
    return {
        "name": b.name,
        "description": f"{b.role} array {b.dtype.value}{list(b.shape)}",
        "logical_type": "affine_array",
        "declared_type": f"{b.dtype.hat_type}*",
        "element_type": b.dtype.hat_type,
        "usage": b.role,
        "shape": list(b.shape),
        "affine_map": list(b.strides),
        "affine_offset": 0,
    }


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
        k = f.kernel
        name = k.name.removesuffix(DEVICE_SUFFIX)
        args = [_parameter(b) for b in k.params]
        hosts[name] = {
            "name": name,
            "description": f.description,
            "calling_convention": "cdecl",
            "arguments": args,
            "launches": k.name,
            "return": _status(),
            "auxiliary": {"schedc": {"ir": f"{info.package}.schedc.json",
                                     "alignment": dict(sorted(f.alignments.items()))}},
        }
        devices[k.name] = {
            "name": k.name,
            "description": f"kernel of {name}",
            "calling_convention": "devicecall",
            "arguments": args,
            "launch_parameters": [*k.grid, *k.block],
            "dynamic_shared_mem_bytes": k.dynamic_shared_bytes,
            "provider": f"{info.package}.cu",
            "runtime": "CUDA",
            "return": _void(),
        }
    threads = max((f.kernel.threads_per_block for f in functions), default=0)
    deploy = [f"{info.package}.cu", f"{info.package}.cubin", f"{info.package}.schedc.json"]
    document = {
        "description": {
            "comment": f"schedc package {info.package} for {info.target_name}",
            "author": "schedc",
            "version": info.version,
            "license_url": "",
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
                    "min_shared_memory_KB": 0,
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


def declarations(functions: list[HatFunction], package: str) -> str:
    lines = [
        f"// C declarations of the host launchers in lib{package}.so",
        "#include <stdint.h>",
        "#ifndef SCHEDC_HALF_TYPES",
        "#define SCHEDC_HALF_TYPES",
        "typedef uint16_t float16_t;  // IEEE binary16 bits",
        "typedef uint16_t bfloat16_t;  // bfloat16 bits",
        "#endif",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for f in functions:
        k = f.kernel
        params = ", ".join(
            f"{'const ' if b.role == 'input' else ''}{b.dtype.hat_type}* {b.name}" for b in k.params
        )
        lines.append(f"// {f.description}; device pointers; returns the launch's cudaError_t")
        lines.append(f"int {k.name.removesuffix(DEVICE_SUFFIX)}({params});")
    lines += ["#ifdef __cplusplus", "}", "#endif"]
    return "\n".join(lines) + "\n"


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
