"""Load a built package and call its functions from Python.

``schedc.load(path)`` returns a package whose functions take numpy arrays (copied to the device
and back) or device arrays (``__cuda_array_interface__`` or DLPack: torch, cupy, ...). Every
argument is checked before anything is launched: count, dtype, shape, layout, writability,
device, alignment and overlap, each with a message naming the argument and the numbers.

>>> import schedc
>>> schedc.load("no/such/package.hat")
Traceback (most recent call last):
...
schedc.errors.PackageError: no/such/package.hat: no such package file
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import LaunchError, PackageError
from ..ir.kernel import Kernel, from_plain
from ..ir.model import Model
from . import driver, hat
from .arrays import ArgumentView, describe


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    model: Model
    kernel: Kernel
    alignments: dict[str, int]


class Function:
    """A callable function of a loaded package: ``fn(A, B, C)``."""

    def __init__(self, package: LoadedPackage, info: FunctionInfo) -> None:
        self.package = package
        self.info = info
        self.name = info.name
        self._kernel_handle = None

    @property
    def kernel(self) -> Kernel:
        return self.info.kernel

    @property
    def model(self) -> Model:
        return self.info.model

    def __repr__(self) -> str:
        params = ", ".join(f"{b.name}: {b.dtype.value}{list(b.shape)}" for b in self.kernel.params)
        return f"<schedc function {self.name}({params})>"

    def check_arguments(self, args: tuple) -> list[ArgumentView]:
        """Validate the call's arguments; LaunchError on the first problem."""
        params = self.kernel.params
        names = ", ".join(b.name for b in params)
        where = f"{self.name}({names})"
        if len(args) != len(params):
            raise LaunchError(where, f"expected {len(params)} arrays, got {len(args)}")
        views = [describe(where, b, a, self.info.alignments.get(b.name, 1)) for b, a in zip(params, args)]
        _check_overlap(where, views)
        return views

    def __call__(self, *args) -> None:
        """Run the function. numpy arrays are copied in and (if written) out; device arrays
        are used in place and the launch is asynchronous on the default stream."""
        views = self.check_arguments(args)
        dev = driver.device()
        dev.make_current()
        for view in views:
            if view.on_device and view.device != dev.ordinal:
                raise LaunchError(f"{self.name}: argument {view.name}",
                                  f"is on device {view.device}, the function runs on device {dev.ordinal}")
        staged = [self._stage(v) for v in views]
        pointers = [p for p, _ in staged]
        k = self.kernel
        driver.launch(self.handle(), k.grid, k.block, k.dynamic_shared_bytes, driver.LaunchArgs(pointers))
        host = [(v, memory) for v, (_, memory) in zip(views, staged) if memory is not None]
        if host:
            dev.synchronize()
            for view, memory in host:
                if view.written:
                    memory.download(view.array)

    def handle(self):
        if self._kernel_handle is None:
            self._kernel_handle = self.package.module().function(self.kernel.name, self.kernel.dynamic_shared_bytes)
        return self._kernel_handle

    @staticmethod
    def _stage(view: ArgumentView):
        if view.on_device:
            return view.pointer, None
        memory = driver.DeviceMemory(view.array.nbytes)
        if view.read:
            memory.upload(view.array)
        return memory.pointer, memory


def _check_overlap(where: str, views: list[ArgumentView]) -> None:
    spans = [(v.pointer, v.pointer + v.nbytes, v) for v in views if v.pointer is not None]
    for n, (start, end, view) in enumerate(spans):
        for other_start, other_end, other in spans[n + 1:]:
            if start < other_end and other_start < end and (view.written or other.written):
                raise LaunchError(
                    where, f"arguments {view.name} and {other.name} overlap in memory, and one is written"
                )


class LoadedPackage:
    """A package on disk: its functions by name (``pkg.fn`` or ``pkg["fn"]``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.directory = path.parent
        self.name = path.stem
        self.hat = hat.read(path)
        self.functions = self._functions()
        self._module = None

    def _functions(self) -> dict[str, Function]:
        out = {}
        for name, table in self.hat.get("functions", {}).items():
            aux = table.get("auxiliary", {}).get("schedc", {})
            ir_name = aux.get("ir")
            if not ir_name:
                raise PackageError(str(self.path), f"function {name} was not built by schedc (no IR file)")
            ir = _read_ir(self.directory / ir_name)
            entry = ir["functions"].get(name)
            if entry is None:
                raise PackageError(str(self.directory / ir_name), f"has no function {name}")
            info = FunctionInfo(name, from_plain(entry["model"]), from_plain(entry["kernel"]),
                                dict(aux.get("alignment", {})))
            out[name] = Function(self, info)
        if not out:
            raise PackageError(str(self.path), "the package has no functions")
        return out

    @property
    def tolerance(self) -> float | None:
        ir_files = {t.get("auxiliary", {}).get("schedc", {}).get("ir") for t in self.hat["functions"].values()}
        return _read_ir(self.directory / sorted(ir_files)[0]).get("tolerance")

    def module(self) -> driver.Module:
        if self._module is None:
            cubin = self.directory / f"{self.name}.cubin"
            if not cubin.is_file():
                raise PackageError(str(cubin), "missing: rebuild the package")
            driver.device().make_current()
            self._check_device()
            self._module = driver.Module(cubin.read_bytes())
        return self._module

    def _check_device(self) -> None:
        arch = self.hat["target"]["required"]["GPU"]["instruction_set_version"]
        wanted = int(arch.removeprefix("sm_"))
        dev = driver.device()
        if dev.sm // 10 != wanted // 10 or dev.sm < wanted:
            raise LaunchError(
                f"load {self.name}",
                f"the package was compiled for {arch}; this GPU ({dev.name}) is sm_{dev.sm}",
            )

    def __getattr__(self, name: str) -> Function:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"package {self.__dict__.get('name')} has no function {name}")

    def __getitem__(self, name: str) -> Function:
        if name not in self.functions:
            raise KeyError(f"package {self.name} has no function {name}; it has {', '.join(self.functions)}")
        return self.functions[name]

    @property
    def names(self) -> list[str]:
        return list(self.functions)


def _read_ir(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError:
        raise PackageError(str(path), "missing: rebuild the package") from None
    except json.JSONDecodeError as e:
        raise PackageError(str(path), f"corrupt IR file: {e}") from None


def load(path: str | Path) -> LoadedPackage:
    """Load a package from its .hat file (or its directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / f"{path.name}.hat"
    if not path.is_file():
        raise PackageError(str(path), "no such package file")
    return LoadedPackage(path)
