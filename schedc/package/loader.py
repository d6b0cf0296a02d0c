"""Load a built package and call its functions from Python.

``schedc.load(path)`` returns a package whose functions take numpy arrays (copied to the device
and back) or device arrays (``__cuda_array_interface__`` or DLPack: torch, cupy, ...). Every
argument is checked before anything is launched: count, dtype, shape, layout, writability,
device, alignment and overlap, each with a message naming the argument and the numbers.
``Function``'s docstring says which arrays may be passed together and on which stream the
kernel runs.

>>> import schedc
>>> schedc.load("no/such/package.hat")
Traceback (most recent call last):
...
schedc.errors.PackageError: no/such/package.hat: no such package file
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import LaunchError, PackageError
from ..ir.kernel import GRID_LIMITS, Buffer, HostFunction, Kernel, ScalarParam, StructParam, from_plain
from ..ir.model import Model
from ..ir.sizes import nbytes_at
from ..ir.specialize import buffer_at, grid_at
from . import driver, hat
from .arrays import ArgumentView, describe
from .fastcall import CallPlan, torch_loaded


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    model: Model | None  # None: the function was given as kernel IR (no schedule to compare with)
    function: HostFunction
    alignments: dict[str, int]

    @property
    def kernel(self) -> Kernel:
        """The function's kernel; a PackageError where it launches several."""
        if len(self.function.kernels) != 1:
            names = ", ".join(k.name for k in self.function.kernels)
            raise PackageError(self.name, f"launches {len(self.function.kernels)} kernels ({names}); "
                                          "use .function.kernels")
        return self.function.kernels[0]


Builder = Callable[[StructParam, Buffer, int], bytes]
BUILDERS: dict[str, Builder] = {}  # by-value struct builders, by name


def builder(name: str) -> Callable[[Builder], Builder]:
    """Decorator: ``function(param, array, address)`` makes the bytes of structs built by ``name``
    from the array parameter the struct describes and its device address."""
    def register(function: Builder) -> Builder:
        BUILDERS[name] = function
        return function
    return register


@builder("tensor_map")
def _tensor_map(param: StructParam, array: Buffer, address: int) -> bytes:
    spec = param.spec
    return driver.encode_tensor_map(address, spec.dtype, spec.extent(array.shape), array.strides, spec.box,
                                     spec.swizzle)


class Function:
    """A callable function of a loaded package: ``fn(A, B, C)`` or ``fn(A, B, C, stream=s)``.

    Arguments come in the function's parameter order: arrays, and scalars (Python or numpy
    numbers, checked against the parameter's type and range). By-value structs (a TMA
    descriptor) are not passed: the loader builds them from the call's arrays. A function of
    several kernels launches them in order on one stream; its workspaces (a split-K's partial
    sums) are allocated at its first call on a stream and reused by every later call on that
    stream (calls on one stream run one after another; calls on different streams have their own).

    The arrays of one call are either all host arrays (numpy, or CPU tensors through DLPack) or
    all device arrays on one device; a mix is refused with a LaunchError naming the arguments and
    their devices (as torch refuses tensors on two devices).

    - Device arrays are used in place and the call returns at once: the kernel is queued on
      ``stream=`` when given (an int ``CUstream`` handle, an object with ``.cuda_stream`` (torch)
      or ``.ptr`` (cupy), or a cuda-python ``CUstream``), else on the current stream of the
      arrays' framework on their device (torch: ``torch.cuda.current_stream(device)``; cupy:
      ``cupy.cuda.get_current_stream()``; other ``__cuda_array_interface__`` v3 arrays: the
      stream they name; otherwise the legacy default stream). It runs after the work queued so
      far on that stream; where another array's stream differs from the launch stream (say
      ``stream=`` is not torch's current stream), the launch stream first waits for that work
      (an event, the host does not wait), and DLPack tensors are exported for the launch stream.
      Work queued later on other streams is not ordered after the kernel: synchronize, or wait
      on ``stream=`` (torch: ``torch.cuda.current_stream().wait_stream(s)``).
    - Host arrays are copied in, the kernel runs, written arrays are copied out, all on
      ``stream=`` when given, else on the legacy default stream, and the call returns once that
      stream is synchronized.
    """

    def __init__(self, package: LoadedPackage, info: FunctionInfo) -> None:
        self.package = package
        self.info = info
        self.name = info.name
        self._kernel_handle = None
        self._plan: CallPlan | None = None  # the fast path (CUDA torch tensors), made at a call with torch loaded
        self._workspaces: dict[int, dict[str, driver.DeviceMemory]] = {}  # by stream

    @property
    def kernel(self) -> Kernel:
        """The kernel of a function of one kernel (``.function.kernels`` for all)."""
        return self.info.kernel

    @property
    def function(self) -> HostFunction:
        return self.info.function

    @property
    def parameters(self) -> dict[str, int | float | bool | str]:
        """The parameter values the function was added with (``Package.add(parameters=)``; Accera's
        ``auxiliary.accera.parameters`` of the .hat): numbers as numbers, other values as text."""
        table = self.package.hat.get("functions", {}).get(self.name, {})
        return dict(table.get("auxiliary", {}).get("accera", {}).get("parameters", {}))

    @property
    def tuning(self) -> dict:
        """How ``schedc tune`` chose this function ({} for one not tuned): its point, its time, the
        device it was timed on and the runners-up (``auxiliary.schedc.tuning`` of the .hat)."""
        table = self.package.hat.get("functions", {}).get(self.name, {})
        return dict(table.get("auxiliary", {}).get("schedc", {}).get("tuning", {}))

    @property
    def model(self) -> Model:
        return self.info.model

    def __repr__(self) -> str:
        params = ", ".join(_shown(p) for p in self.function.caller_params)
        return f"<schedc function {self.name}({params})>"

    @property
    def where(self) -> str:
        """``name(A, B, C)``: how messages name this function."""
        return f"{self.name}({', '.join(p.name for p in self.function.caller_params)})"

    def check_arguments(self, args: tuple) -> list[ArgumentView]:
        """Validate the call's arrays without a CUDA call; LaunchError on the first problem."""
        return self.check_call(args)[0]

    def check_call(self, args: tuple) -> tuple[list[ArgumentView], dict[str, bytes]]:
        """The array views and the scalars' bytes of a call (the run-time sizes' too, read from
        the arrays' shapes), checked without a CUDA call."""
        params = self.function.caller_params
        if len(args) != len(params):
            raise LaunchError(self.where, f"expected {_counted(params)}, got {len(args)}")
        arrays = [(p, a) for p, a in zip(params, args) if isinstance(p, Buffer)]
        sizes = read_sizes(self.where, self.function, arrays)
        views = [describe(self.where, buffer_at(b, sizes), a, self.info.alignments.get(b.name, 1)) for b, a in arrays]
        scalars = {p.name: p.value(a, self.where).tobytes() for p, a in zip(params, args)
                   if isinstance(p, ScalarParam)}
        scalars.update(self.size_scalars(sizes))
        check_devices(self.where, views)
        _check_overlap(self.where, views)
        return views, scalars

    def __call__(self, *args, stream: object = None) -> None:
        """Run the function on ``args`` (see the class docstring for devices and streams)."""
        plan = self._plan
        if plan is None and torch_loaded():
            plan = self._plan = CallPlan(self)
        if plan is not None and plan.call(args, stream):
            return
        views, scalars = self.check_call(args)
        handle = None if stream is None else driver.stream_handle(stream, f"{self.where}: stream")
        dev = driver.device()
        dev.make_current()
        if views and views[0].on_device:
            self._run_on_device(views, scalars, dev, handle)
        else:
            self._run_on_host(views, scalars, 0 if handle is None else handle)

    def emulate(self, *args) -> None:
        """Run the function on the CPU on host arrays, as a call on the GPU runs it: each kernel's
        IR on every block, in the element types (the emulator of ``schedc emulate``, with its race
        and bounds detectors), the written arrays updated in place. To see, without a GPU, what a
        nest computes on one's own values: ``fn.emulate(a, b, c)``, then compare ``c`` with numpy.

        The arguments are checked as a call checks them (count, types, shapes, layouts; scalars
        and run-time sizes too); device arrays are refused. Emulating is slow: keep the arrays
        small (a few blocks' worth)."""
        from ..codegen.emulate import emulate_sequence
        from ..ir.specialize import function_at

        views, scalars = self.check_call(args)
        on_device = [v.name for v in views if v.on_device]
        if on_device:
            raise LaunchError(self.where, f"emulate runs on the CPU: {on_device[0]} is a device array; pass numpy "
                                          f"arrays (tensor.cpu().numpy())")
        function = function_at(self.function, self._sizes(scalars))
        values = {p.name: a for p, a in zip(self.function.caller_params, args) if isinstance(p, ScalarParam)}
        run = emulate_sequence(function, {v.name: v.array for v in views}, scalars=values)
        for view in views:
            if view.written:
                view.array[...] = run.storage[view.name]

    def _run_on_device(self, views: list[ArgumentView], scalars: dict[str, bytes], dev: driver.Device,
                       handle: int | None) -> None:
        _resolve_devices(self.where, views, dev.ordinal)
        producers = _producer_streams(views, dev.ordinal)
        stream = handle if handle is not None else next(iter(producers), 0)
        for producer in producers:
            if producer != stream:
                driver.wait_for(stream, producer)
        for view in views:
            if view.keepalive is not None:
                view.keepalive = _export_for(view, stream)
        self._launch([v.pointer for v in views], scalars, stream)

    def _run_on_host(self, views: list[ArgumentView], scalars: dict[str, bytes], stream: int) -> None:
        memories = [driver.DeviceMemory(v.array.nbytes) for v in views]
        for view, memory in zip(views, memories):
            if view.read:
                memory.upload(view.array, stream)
        self._launch([m.pointer for m in memories], scalars, stream)
        for view, memory in zip(views, memories):
            if view.written:
                memory.download(view.array, stream)
        driver.synchronize_stream(stream)

    def size_scalars(self, sizes: dict[str, int]) -> dict[str, bytes]:
        """The bytes of the run-time sizes' parameters (``launches``' scalars) for ``sizes``."""
        return {p.name: p.value(sizes[p.name], self.where).tobytes() for p in self.function.sizes}

    def _sizes(self, scalars: dict[str, bytes] | None) -> dict[str, int]:
        """The run-time sizes of a call, from the bytes ``check_call`` made of them."""
        return {p.name: int.from_bytes(scalars[p.name], "little", signed=True) for p in self.function.sizes}

    def _launch(self, pointers: list[int], scalars: dict[str, bytes], stream: int) -> None:
        sizes = self._sizes(scalars)
        for handle, kernel, args in self.launches(pointers, scalars, stream):
            driver.launch(handle, grid_at(kernel, sizes), kernel.block, kernel.dynamic_shared_bytes, args, stream,
                          dependent=kernel.dependent_launch)

    def launches(self, pointers: list[int], scalars: dict[str, bytes] | None = None, stream: int = 0) -> list[Launch]:
        """Each kernel's handle and arguments, in launch order, for the arrays at ``pointers``
        (device addresses, in the order of the function's arrays), the scalars' bytes and the
        workspaces of the calls on ``stream``; by-value structs are built here (a CUDA call: the
        driver encodes tensor maps)."""
        arrays = dict(zip((b.name for b in self.function.arrays), pointers))
        arrays.update(self.workspace_pointers(stream, self._sizes(scalars)))
        values = {**(scalars or {}), **self._structs(arrays, self._sizes(scalars))}
        handles = [self.handle()] if len(self.function.kernels) == 1 else self.handles()
        return [(handle, kernel, driver.LaunchArgs([*(arrays[b.name] for b in kernel.params),
                                                    *(values[v.name] for v in kernel.values)]))
                for handle, kernel in zip(handles, self.function.kernels)]

    def workspace_pointers(self, stream: int = 0, sizes: dict[str, int] | None = None) -> dict[str, int]:
        """The device address of each workspace of the calls on ``stream``: allocated at the first
        such call, then reused (two calls on different streams may overlap: each has its own); a
        workspace of a run-time size is allocated again where the call's ``sizes`` need more."""
        kept = self._workspaces.setdefault(stream, {})
        for b in self.function.workspaces:
            need = nbytes_at(b, sizes or {})
            if b.name not in kept or kept[b.name].nbytes < need:
                kept[b.name] = driver.DeviceMemory(need)
        return {name: memory.pointer for name, memory in kept.items()}

    def _structs(self, pointers: dict[str, int], sizes: dict[str, int]) -> dict[str, bytes]:
        declared = {b.name: buffer_at(b, sizes) for b in (*self.function.arrays, *self.function.workspaces)}
        structs = {}
        for p in self.function.params:
            if isinstance(p, StructParam):
                if p.builder not in BUILDERS:
                    raise LaunchError(self.where, f"no builder {p.builder!r} for {p.name} "
                                                  f"(known: {', '.join(sorted(BUILDERS))})")
                structs[p.name] = BUILDERS[p.builder](p, declared[p.spec.array], pointers[p.spec.array])
        return structs

    def handles(self) -> list:
        """The driver's function handle of each kernel, in launch order (loading the module)."""
        if self._kernel_handle is None:
            module = self.package.module()
            self._kernel_handle = [module.function(k.name, k.dynamic_shared_bytes) for k in self.function.kernels]
        return self._kernel_handle

    def handle(self):
        """The handle of a function of one kernel (a PackageError where it launches several)."""
        self.info.kernel  # noqa: B018 - raises for a function of several kernels
        return self.handles()[0]


Launch = tuple[object, Kernel, "driver.LaunchArgs"]


def read_sizes(where: str, function: HostFunction, arrays: list[tuple[Buffer, object]]) -> dict[str, int]:
    """The run-time sizes of a call, from its arrays' shapes: each the same in every array that
    has it, at least 1, with arrays a 32-bit index reaches (where the kernels index so) and grids
    CUDA can launch."""
    if not function.sizes:
        return {}
    found: dict[str, tuple[int, str]] = {}
    for b, a in arrays:
        shape = getattr(a, "shape", None)
        if not b.sized:
            continue
        if shape is None or len(shape) != len(b.shape):
            expected = "(" + ", ".join(map(str, b.shape)) + ")"
            what = f"shape {tuple(shape)}" if shape is not None else f"a {type(a).__name__}"
            raise LaunchError(f"{where}: argument {b.name}", f"{what}, expected an array of shape {expected} (its "
                                                             "run-time sizes read from it)")
        for d, n in enumerate(b.shape):
            if isinstance(n, int):
                continue
            name, got = str(n), int(shape[d])
            seen = found.setdefault(name, (got, f"{b.name}.shape[{d}]"))
            if seen[0] != got:
                raise LaunchError(where, f"{seen[1]} = {seen[0]} but {b.name}.shape[{d}] = {got}: both are the "
                                         f"run-time size {name}")
    sizes = {name: value for name, (value, _) in found.items()}
    for name, (value, seen) in found.items():
        if value < 1:
            raise LaunchError(where, f"{seen} = {value}: the run-time size {name} is at least 1")
    shown = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    if all(k.index_type.size == 4 for k in function.kernels):
        for b, _ in arrays:
            elements = buffer_at(b, sizes).size
            if elements > 2**31 - 1:
                raise LaunchError(where, f"{b.name} spans {elements} elements at {shown}: the function indexes with "
                                         "32-bit integers (2^31 - 1 elements at most)")
    for kernel in function.kernels:
        for axis, blocks, limit in zip("xyz", grid_at(kernel, sizes), GRID_LIMITS):
            if blocks > limit:
                raise LaunchError(where, f"{blocks} blocks along {axis} at {shown}; CUDA launches at most {limit}")
    return sizes



def _shown(p: Buffer | ScalarParam) -> str:
    if isinstance(p, ScalarParam):
        return f"{p.name}: {p.dtype.value}"
    return f"{p.name}: {p.dtype.value}[{', '.join(map(str, p.shape))}]"


def _counted(params) -> str:
    arrays = sum(isinstance(p, Buffer) for p in params)
    scalars = len(params) - arrays
    text = f"{arrays} array{'s' * (arrays != 1)}"
    if not scalars:
        return text
    return f"{text} and {scalars} scalar{'s' * (scalars != 1)} ({', '.join(p.name for p in params)})"


def check_devices(where: str, views: list[ArgumentView]) -> None:
    """All host arrays, or all device arrays on one device (as far as the arrays report it)."""
    if not views:
        return
    first = views[0]
    for view in views[1:]:
        if view.on_device != first.on_device:
            _refuse_mix(where, view, first)
    known = [v for v in views if v.ordinal is not None]
    for view in known[1:]:
        if view.ordinal != known[0].ordinal:
            _refuse_mix(where, view, known[0])


def _refuse_mix(where: str, view: ArgumentView, other: ArgumentView) -> None:
    raise LaunchError(where, f"{view.name} is on {view.location} but {other.name} is on {other.location}; "
                             "pass all arrays on one device, or all as numpy arrays")


def _resolve_devices(where: str, views: list[ArgumentView], ordinal: int) -> None:
    """Ask the driver where arrays that do not report a device live; one device, ``ordinal``."""
    for view in views:
        if view.ordinal is None:
            found = driver.pointer_device(view.pointer)
            if found is None:
                raise LaunchError(f"{where}: argument {view.name}",
                                  f"address 0x{view.pointer:x} is not device memory of any GPU")
            view.location = f"cuda:{found}"
    check_devices(where, views)
    if views[0].ordinal != ordinal:
        raise LaunchError(f"{where}: argument {views[0].name}",
                          f"is on device {views[0].ordinal}, the function runs on device {ordinal}")


def _producer_streams(views: list[ArgumentView], ordinal: int) -> list[int]:
    """The streams the arrays' producers queue work on (their framework's current stream), first
    seen first; 1 (CU_STREAM_LEGACY) is written 0."""
    streams: list[int] = []
    for view in views:
        stream = _current_stream(view, ordinal)
        if stream is not None and (0 if stream == 1 else stream) not in streams:
            streams.append(0 if stream == 1 else stream)
    return streams


def _export_for(view: ArgumentView, stream: int) -> object:
    """Export a DLPack tensor again, naming the launch stream: its producer makes the data ready
    for that stream (DLPack writes the legacy default stream 1). Producers that take no stream
    keep the first export."""
    try:
        return view.source.__dlpack__(stream=stream or 1)
    except (TypeError, BufferError):  # no stream argument, or a stream it does not take
        return view.keepalive


def _current_stream(view: ArgumentView, ordinal: int) -> int | None:
    """The current stream of the array's framework on ``ordinal`` (torch, cupy: imported already,
    since the array is theirs), else the stream its __cuda_array_interface__ names, else None."""
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is not None and isinstance(view.source, torch.Tensor):
        return int(torch.cuda.current_stream(ordinal).cuda_stream)
    if cupy is not None and isinstance(view.source, cupy.ndarray):
        with cupy.cuda.Device(ordinal):
            return int(cupy.cuda.get_current_stream().ptr)
    return view.stream


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
        self.dispatchers = _dispatchers(self.functions)
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
            try:
                info = FunctionInfo(name, from_plain(entry["model"]), _host_function(entry),
                                    dict(aux.get("alignment", {})))
            except (ValueError, KeyError, TypeError) as error:  # an IR file of another schedc version
                raise PackageError(str(self.directory / ir_name),
                                   f"function {name}'s IR is not this schedc's ({error}): rebuild the package "
                                   f"with schedc {__version__}") from None
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
        wanted = int(arch.removeprefix("sm_").rstrip("a"))
        dev = driver.device()
        specific = arch.endswith("a")  # sm_90a code runs on sm_90 only
        if dev.sm // 10 != wanted // 10 or dev.sm < wanted or (specific and dev.sm != wanted):
            raise LaunchError(
                f"load {self.name}",
                f"the package was compiled for {arch}; this GPU ({dev.name}) is sm_{dev.sm}",
            )

    def __getattr__(self, name: str) -> Function | Dispatcher:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        if name in self.__dict__.get("dispatchers", {}):
            return self.__dict__["dispatchers"][name]
        raise AttributeError(f"package {self.__dict__.get('name')} has no function {name}")

    def __getitem__(self, name: str) -> Function | Dispatcher:
        if name in self.dispatchers and name not in self.functions:
            return self.dispatchers[name]
        if name not in self.functions:
            raise KeyError(f"package {self.name} has no function {name}; it has {', '.join(self.functions)}")
        return self.functions[name]

    @property
    def names(self) -> list[str]:
        return list(self.functions)


class Dispatcher:
    """A function ``schedc tune`` tuned at several shapes (``--shapes``) or run-time sizes
    (``--sizes``): one function per shape or bucket of sizes (``mm_M4096_N4096_K4096``,
    ``mm_M16``, ...), and this callable, named after the grid (``pkg.mm``), which calls the one
    tuned for the arrays' shapes, or, for run-time sizes, the one of the smallest bucket whose
    sizes are all at least the call's (the largest bucket past them)."""

    def __init__(self, name: str, functions: list[Function]) -> None:
        self.name = name
        self.functions = functions
        self.buckets = [fn for fn in functions if fn.tuning.get("sizes")]

    def select(self, *args) -> Function:
        """The function for ``args`` (arrays, and sizes where the functions take them, in the
        call's order); a LaunchError lists the tuned shapes where none matches."""
        if self.buckets:
            return self._bucket(args)
        return self._exact(args)

    def _exact(self, args) -> Function:
        for fn in self.functions:
            if _fixed_match(fn, args):
                return fn
        shown = ", ".join(str(tuple(a.shape)) for a in args if hasattr(a, "shape"))
        tuned = "; ".join(f"{fn.name}: " + ", ".join(str(tuple(p.shape)) for p in fn.function.caller_params
                                                     if isinstance(p, Buffer)) for fn in self.functions)
        raise LaunchError(self.name, f"no function was tuned for arrays of shapes {shown}; tuned: {tuned}")

    def _bucket(self, args) -> Function:
        """Among the buckets whose fixed extents are the arrays' (one per shape where the grid
        has shapes too): the smallest (by the product of its sizes) that holds the call's sizes,
        else the largest."""
        fitting = [fn for fn in self.buckets if _fixed_match(fn, args)]
        if not fitting:
            return self._exact(args)  # none of the arrays' fixed extents: refused with the tuned shapes
        arrays = [(p, a) for p, a in zip(fitting[0].function.caller_params, args) if isinstance(p, Buffer)]
        sizes = read_sizes(self.name, fitting[0].function, arrays)

        def volume(fn) -> int:
            return math.prod(fn.tuning["sizes"].values())

        holding = [fn for fn in fitting if all(sizes[n] <= v for n, v in fn.tuning["sizes"].items())]
        return min(holding, key=volume) if holding else max(fitting, key=volume)

    def __call__(self, *args, **kwargs):
        return self.select(*args)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<dispatch {self.name} over {', '.join(fn.name for fn in self.functions)}>"


def _fixed_match(fn: Function, args) -> bool:
    """Whether the arrays among ``args`` have ``fn``'s arrays' fixed extents (run-time sizes aside)."""
    arrays = [p for p in fn.function.caller_params if isinstance(p, Buffer)]
    given = [a for a in args if hasattr(a, "shape")]
    return len(given) == len(arrays) and all(
        len(a.shape) == len(b.shape) and all(not isinstance(n, int) or n == m for n, m in zip(b.shape, a.shape))
        for a, b in zip(given, arrays))


def _dispatchers(functions: dict[str, Function]) -> dict[str, Dispatcher]:
    """The tuned grids of several shapes: their functions, by the grid's name."""
    groups: dict[str, list[Function]] = {}
    for fn in functions.values():
        name = fn.tuning.get("dispatch")
        if name:
            groups.setdefault(name, []).append(fn)
    return {name: Dispatcher(name, fns) for name, fns in groups.items()}


def _host_function(entry: dict) -> HostFunction:
    """A function of the .schedc.json: a whole function, or (as schedc always wrote a function of
    one kernel) its kernel."""
    if "function" in entry:
        return from_plain(entry["function"])
    return HostFunction.single(from_plain(entry["kernel"]))


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
