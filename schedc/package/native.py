"""The fast path's native parts, built at their first use once per machine
(``$SCHEDC_CACHE/native/<hash>/``, or ``~/.cache/schedc``) and loaded:

- ``fast_launch()``: ``fastlaunch.c``, built with the system's C compiler against this Python's
  headers; without it the fast path launches through ctypes.
- ``torch_ops()``: ``torchop.cpp``, an operator's boxed C++ kernel (``schedc.torch.custom_op``),
  built with the system's C++ compiler against the installed torch (a CUDA build; one build per
  torch version); without it the operators' kernels are Python functions.

Without a compiler or the headers, or with ``SCHEDC_NATIVE=0``, each is None and ``reason()``
says why.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("fastlaunch.c")
MODULE = "_schedc_fastlaunch"
TORCH_SOURCE = Path(__file__).with_name("torchop.cpp")
TORCH_MODULE = "_schedc_torchop"
_WHY: dict[str, str] = {}  # module -> why it is None


def cache_root() -> Path:
    """Where schedc keeps what it builds once per machine (the tuner's database and candidates,
    this module): ``$SCHEDC_CACHE`` or ``~/.cache/schedc``."""
    return Path(os.environ.get("SCHEDC_CACHE") or Path.home() / ".cache" / "schedc")


@functools.cache
def fast_launch() -> ModuleType | None:
    """The built module (its ``Plan``), or None (``reason()`` says why)."""
    return _module(MODULE, SOURCE, "", lambda output: compile_command(SOURCE, output))


def reason(module: str = MODULE) -> str:
    """Why ``fast_launch()`` (or the module named: ``TORCH_MODULE`` for ``torch_ops()``) is None
    ("" where it is not)."""
    return _WHY.get(module, "")


@functools.cache
def torch_ops() -> ModuleType | None:
    """The built operator module (its ``register_kernel``), or None (``reason()`` says why): torch
    must be imported, a CUDA build, with its headers."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(torch.version, "cuda", None) is None:
        return _without(TORCH_MODULE, "torch is not imported, or is not a CUDA build")
    return _module(TORCH_MODULE, TORCH_SOURCE, torch.__version__ + str(Path(torch.__file__).parent),
                   lambda output: torch_compile_command(TORCH_SOURCE, output, torch))


def _module(name: str, source: Path, extra: str, command) -> ModuleType | None:
    """The extension module ``name`` built from ``source`` by ``command(output)`` (cached by the
    source, this Python and ``extra``), loaded; or None."""
    if os.environ.get("SCHEDC_NATIVE", "1") == "0":
        return _without(name, "SCHEDC_NATIVE=0")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(source.read_bytes() + sys.version.encode() + suffix.encode() + extra.encode())
    path = cache_root() / "native" / key.hexdigest()[:24] / f"{name}{suffix}"
    if not path.exists():
        failure = _build(path, command)
        if failure:
            return _without(name, failure)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as error:
        return _without(name, f"{path} does not load: {error}")
    return module


def _without(module: str, why: str) -> None:
    _WHY[module] = why
    return None


def compile_command(source: Path, output: Path) -> list[str] | None:
    """The compiler's command line building ``output`` from ``source``, or None without a
    compiler or this Python's headers."""
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not compiler or shutil.which(compiler[0]) is None:
        compiler = ["cc"]
    include = sysconfig.get_paths().get("include")
    if shutil.which(compiler[0]) is None or not include or not (Path(include) / "Python.h").exists():
        return None
    return [*compiler, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{include}", str(source), "-o", str(output)]


def torch_compile_command(source: Path, output: Path, torch) -> list[str] | None:
    """The C++ compiler's command line building the operator module against ``torch``: its headers
    and libraries, its C++ ABI and pybind11 flags, the CUDA toolkit's headers; None without a
    compiler or headers."""
    compiler = shlex.split(os.environ.get("CXX") or "c++")
    root = Path(torch.__file__).parent
    include, cuda = sysconfig.get_paths().get("include"), _cuda_include()
    if shutil.which(compiler[0]) is None or not include or not (Path(include) / "Python.h").exists() \
            or cuda is None or not (root / "include" / "torch" / "library.h").exists():
        return None
    flags = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for flag in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, f"_PYBIND11_{flag}", None)
        if value:
            flags.append(f'-DPYBIND11_{flag}="{value}"')
    lib = root / "lib"
    return [*compiler, "-O2", "-shared", "-fPIC", "-std=c++17", "-w", *flags, f"-I{root / 'include'}",
            f"-I{root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}", f"-I{cuda}", f"-I{include}",
            str(source), "-o", str(output), f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-lc10_cuda", "-ltorch",
            "-ltorch_cpu", "-ltorch_python"]


def _cuda_include() -> Path | None:
    """The CUDA runtime's headers (cuda_runtime_api.h): $CUDA_HOME's, the pip wheel's
    (nvidia/cuda_runtime) beside torch, nvcc's, /usr/local/cuda's."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    found = [Path(home) / "include"] if home else []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found.append(Path(root) / "cuda_runtime" / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(Path(nvcc).resolve().parent.parent / "include")
    found.append(Path("/usr/local/cuda/include"))
    return next((path for path in found if (path / "cuda_runtime_api.h").exists()), None)


def _build(path: Path, make_command) -> str:
    """Compile into ``path`` with ``make_command(output)`` (another process may be doing the same:
    each writes a file of its own and renames it into place); "" on success, else why not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        output = Path(scratch) / path.name
        command = make_command(output)
        if command is None:
            return f"no compiler or no headers for {path.name}"
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{command[0]} failed: {error}"
        if done.returncode:
            return f"{' '.join(command)} failed:\n{done.stderr.strip()}"
        os.replace(output, path)
    return ""
