"""One point checked and built, in a worker process: the analysis and the resource model (every
check ``Package.add`` runs), then the CUDA source, compiled by NVRTC once per source (a cache
keyed by the source's hash). Nothing here touches a GPU."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from ..errors import InternalError, SchedcError
from ..package.build import Package, emit_package, write_emitted
from ..package.refusals import kind
from . import collect
from .results import Checked, Status, Task

_FILES = (".hat", ".cu", ".cubin", ".schedc.json")


def check_point(source: collect.Source, task: Task, cache: str, inline: bool = False, build: bool = True) -> Checked:
    """Check and build ``task``'s point of the script; ``inline``: return the package's files
    (for a worker on another host) besides its folder in ``cache``; ``build`` False: check only."""
    started = time.perf_counter()
    grid = collect.script(source).grids[task.grid]
    add = grid.add
    package = Package()
    try:
        name = package._add_point(f"Package.add({add.base_name})", add.source, add.args, add.base_name,
                                  grid.points[task.point])
    except InternalError as e:
        return Checked(task, Status.FAILED, str(e), kind(e.what), seconds=time.perf_counter() - started)
    except SchedcError as e:
        return Checked(task, Status.REFUSED, str(e), kind(e.what), seconds=time.perf_counter() - started)
    if not build:
        return Checked(task, Status.ACCEPTED, name=str(name), seconds=time.perf_counter() - started)
    try:
        emitted = emit_package(package, str(name))
        digest = hashlib.sha256(emitted.source.encode()).hexdigest()
        directory = Path(cache) / "kernels" / digest[:32]
        if not (directory / f"{name}.hat").is_file():
            _write(emitted, directory)
    except SchedcError as e:
        return Checked(task, Status.FAILED, str(e), kind(e.what), name=str(name),
                       seconds=time.perf_counter() - started)
    files = files_of(str(directory)) if inline else {}
    return Checked(task, Status.COMPILED, name=str(name), source_hash=digest, directory=str(directory),
                   files=files, seconds=time.perf_counter() - started)


def _write(emitted, directory: Path) -> None:
    """Write the package beside its final folder, then move it there (workers build at once)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=directory.parent))
    try:
        write_emitted(emitted, scratch)
        try:
            os.rename(scratch, directory)
        except OSError:  # another worker built the same source first
            if not directory.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def files_of(directory: str) -> dict[str, bytes]:
    """A built candidate's files (for a worker that does not share this disk)."""
    folder = Path(directory)
    return {f.name: f.read_bytes() for f in folder.iterdir() if f.name.endswith(_FILES)} if folder.is_dir() else {}


def unpack(files: dict[str, bytes]) -> Path:
    """A package's files written into a fresh folder (a worker that does not share the cache)."""
    folder = Path(tempfile.mkdtemp(prefix="schedc-candidate-"))
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder
