"""The fast path's C part (``fastlaunch.c``): built with the system's C compiler against this
Python's headers at its first use, once per machine (``$SCHEDC_CACHE/native/<hash>/``, or
``~/.cache/schedc``), and loaded. Without a compiler or the headers, or with
``SCHEDC_NATIVE=0``, ``fast_launch()`` is None and the fast path launches through ctypes;
``reason()`` says why.
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
_WHY: list[str] = []


def cache_root() -> Path:
    """Where schedc keeps what it builds once per machine (the tuner's database and candidates,
    this module): ``$SCHEDC_CACHE`` or ``~/.cache/schedc``."""
    return Path(os.environ.get("SCHEDC_CACHE") or Path.home() / ".cache" / "schedc")


@functools.cache
def fast_launch() -> ModuleType | None:
    """The built module (its ``Plan``), or None (``reason()`` says why)."""
    if os.environ.get("SCHEDC_NATIVE", "1") == "0":
        return _without("SCHEDC_NATIVE=0")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + sys.version.encode() + suffix.encode()).hexdigest()[:24]
    path = cache_root() / "native" / key / f"{MODULE}{suffix}"
    if not path.exists():
        failure = _build(path)
        if failure:
            return _without(failure)
    try:
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as error:
        return _without(f"{path} does not load: {error}")
    return module


def reason() -> str:
    """Why ``fast_launch()`` is None ("" where it is not)."""
    return _WHY[-1] if _WHY else ""


def _without(why: str) -> None:
    _WHY.append(why)
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


def _build(path: Path) -> str:
    """Compile into ``path`` (another process may be doing the same: each writes a file of its own
    and renames it into place); "" on success, else why not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        output = Path(scratch) / path.name
        command = compile_command(SOURCE, output)
        if command is None:
            return "no C compiler or no Python.h"
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{command[0]} failed: {error}"
        if done.returncode:
            return f"{' '.join(command)} failed:\n{done.stderr.strip()}"
        os.replace(output, path)
    return ""
