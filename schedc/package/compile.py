"""Compilers: NVRTC (from NVIDIA's wheels, or a system toolkit) for cubins, nvcc when present
for C-callable shared libraries.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackageError, TargetError

NVRTC_FLAGS = ("-std=c++17",)


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    ptx: str
    log: str
    compiler: str  # e.g. "nvrtc 13.0"
    flags: str


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Headers for NVRTC: NVIDIA's wheels first, then CUDA_HOME / CUDA_PATH, then /usr/local/cuda."""
    candidates: list[Path] = []
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("cu*/include"))
            candidates += sorted(Path(root).glob("cuda_runtime/include"))
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for directory in candidates:
        if (directory / "cuda_fp16.h").is_file() and (directory / "crt" / "mma.h").is_file():
            return (str(directory),)
    raise PackageError(
        "compile",
        "no CUDA headers found (cuda_fp16.h and crt/mma.h): install schedc's dependencies "
        "(nvidia-cuda-runtime, nvidia-cuda-crt) or set CUDA_HOME",
    )


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _check(nvrtc.nvrtcVersion()[0], "nvrtcVersion")
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


@functools.cache
def supported_archs() -> tuple[int, ...]:
    from cuda.bindings import nvrtc

    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(err, "nvrtcGetSupportedArchs")
    return tuple(archs)


def check_buildable(target) -> None:
    """The installed NVRTC must compile for the target's architecture (asked when a function is
    added to a package: the target table itself never calls a compiler)."""
    spec = target.spec
    archs = supported_archs()
    if spec.sm not in archs:
        raise TargetError(f"Target({spec.name})",
                          f"NVRTC {nvrtc_version()} compiles for sm_{min(archs)} to sm_{max(archs)}; the "
                          f"{spec.name} is sm_{spec.sm}, which needs a CUDA toolkit whose NVRTC still builds it "
                          f"(CUDA 12: the nvidia-cuda-nvrtc-cu12 wheel in place of the CUDA 13 one)")


def arch_for(arch: str, kernels) -> str:
    """The architecture to compile kernels for: ``arch``'s architecture-specific target (sm_90a:
    wgmma, setmaxnreg) where a statement needs it (``ir.kernel.required_arch``), else ``arch``."""
    from ..ir.kernel import required_arch
    from ..ir.walk import walk_statements

    specific = f"{arch}a"
    needed = any(required_arch(s) == specific for k in kernels for s in walk_statements(k.body))
    return specific if needed else arch


def nvrtc_compile(source: str, name: str, arch: str, debug: bool = False) -> Compiled:
    """Compile CUDA C++ to a cubin for ``arch`` (e.g. sm_90); PackageError with the log on failure."""
    from cuda.bindings import nvrtc

    supported = supported_archs()
    if int(arch.removeprefix("sm_").rstrip("a")) not in supported:
        raise PackageError(
            f"compile {name}.cu for {arch}",
            f"NVRTC {nvrtc_version()} compiles for sm_{min(supported)} to sm_{max(supported)} "
            f"only; {arch} needs another CUDA toolkit version",
        )
    flags = [f"--gpu-architecture={arch}", *NVRTC_FLAGS]
    if debug:
        flags += ["--device-debug", "--generate-line-info"]
    includes = [f"--include-path={d}" for d in cuda_include_dirs()]
    err, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        options = [o.encode() for o in (*flags, *includes)]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _log(nvrtc, program)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise PackageError(f"compile {name}.cu for {arch}", f"NVRTC failed:\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(program)
        _check(err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(program, cubin)[0], "nvrtcGetCUBIN")
        err, size = nvrtc.nvrtcGetPTXSize(program)
        _check(err, "nvrtcGetPTXSize")
        ptx = b" " * size
        _check(nvrtc.nvrtcGetPTX(program, ptx)[0], "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return Compiled(cubin, ptx.rstrip(b"\0").decode(), log, f"nvrtc {nvrtc_version()}", " ".join(flags))


def _log(nvrtc, program) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(program)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\0").decode(errors="replace").strip()


def _check(err, call: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise PackageError("compile", f"{call} failed: {err}")


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        path = Path(os.environ.get(var, "")) / "bin" / "nvcc"
        if os.environ.get(var) and path.is_file():
            return str(path)
    return None


def nvcc_library(source: Path, output: Path, arch: str, static: bool = False, debug: bool = False) -> str:
    """Build ``lib<name>.so`` (or ``.a``) with C-callable launchers; returns the command line."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise PackageError("build", "nvcc not found; a shared library needs the CUDA toolkit")
    mode = ["-lib"] if static else ["-shared"]
    debug_flags = ["-G", "-lineinfo"] if debug else []
    stem = source.stem
    # compiled by name in a scratch folder, its temporaries named after the object and the host
    # compiler's seed fixed: the same source gives the same library, byte for byte
    compile_flags = ["-c", "-Xcompiler", "-fPIC", f"-arch={arch}", "-std=c++17", *debug_flags,
                     "--objdir-as-tempdir", "-Xcompiler", f"-frandom-seed={stem}"]
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copyfile(source, Path(scratch) / f"{stem}.cu")
        for command in ([nvcc, *compile_flags, "-o", f"{stem}.o", f"{stem}.cu"],
                        [nvcc, *mode, f"-arch={arch}", "-o", str(output.resolve()), f"{stem}.o"]):
            result = subprocess.run(command, capture_output=True, text=True, cwd=scratch)
            if result.returncode != 0:
                raise PackageError(f"build {output.name}", f"nvcc failed:\n{result.stderr.strip()}")
    return " ".join(["nvcc", *mode, f"-arch={arch}", "-std=c++17", *debug_flags])
