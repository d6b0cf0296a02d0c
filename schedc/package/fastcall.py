"""The fast path of a call on CUDA torch tensors: what does not depend on the call's arguments
is computed once per function, and a call is a few attribute reads and comparisons per tensor
and one ``cuLaunchKernel`` per kernel, with a parameter buffer prepared once. A function of one
kernel whose parameters are the caller's arrays (and their TMA tensor maps, encoded again only
where an address changed: ``launchable_in_c``) makes its checks and launch in C
(``fastlaunch.c``, ``native.py``: 0.6 of the ctypes launch's time); any other through ctypes.

The fast path makes the same checks as the general one (count, dtype, shape, strides, device,
alignment, null pointers, overlap of a written array, the stream to launch on) and takes a call
only where every one passes: any other call (numpy arrays, cupy, DLPack, a wrong argument) goes
the general way (``loader.Function``), which explains what is wrong with the same message as
before. Where the microseconds went before (H200, 2026-11-26, ``benchmarks/call_overhead.py
--profile``): ``__cuda_array_interface__`` and DLPack re-exports per tensor, the current stream
asked of torch per tensor, the function's parameter lists rebuilt per call, messages' names
formatted before any check failed, and cuda-python's conversions around each driver call.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..ir.kernel import Buffer, Kernel, ScalarParam, StructParam
from ..ir.layout import row_major_strides
from ..ir.sizes import nbytes_at
from ..ir.specialize import grid_at, grids_fit
from . import driver, native


@dataclass(frozen=True)
class _Array:
    """What a caller's array must be: torch dtype, shape, the strides of its dims longer than 1."""

    name: str
    torch_dtype: object
    shape: tuple[int, ...]
    strides: tuple[tuple[int, int], ...]  # (dimension, stride in elements) of the dims longer than 1
    all_strides: tuple[int, ...]  # every dimension's (a tensor with these strides passes at once)
    row_major: bool  # the strides are row-major: torch's is_contiguous() says it (dims of 1 aside, as here)
    nbytes: int  # a run-time size's array: 0 (its bytes are the call's)
    alignment: int
    written: bool
    sized: tuple[tuple[int, str], ...] = ()  # (dimension, size) of a run-time size's dimension (shape: 0 there)
    itemsize: int = 0


class _Slots:
    """One kernel's ``void**`` parameter buffer, allocated once: a 64-bit slot per pointer and
    a 64-byte aligned buffer per value; a call writes the values in place."""

    def __init__(self, kernel: Kernel) -> None:
        self.pointer_names = [b.name for b in kernel.params]
        self.value_names = [v.name for v in kernel.values]
        self.pointers = (ctypes.c_uint64 * max(len(self.pointer_names), 1))()
        self.buffers = [ctypes.create_string_buffer(_value_size(v) + 64) for v in kernel.values]
        self.value_addresses = [(ctypes.addressof(b) + 63) // 64 * 64 for b in self.buffers]
        addresses = [ctypes.addressof(self.pointers) + 8 * n for n in range(len(self.pointer_names))]
        self.array = (ctypes.c_void_p * max(len(addresses) + len(self.buffers), 1))(
            *addresses, *self.value_addresses)
        self.address = ctypes.addressof(self.array)

    def fill(self, pointers: dict[str, int], values: dict[str, bytes]) -> None:
        for n, name in enumerate(self.pointer_names):
            self.pointers[n] = pointers[name]
        for name, address in zip(self.value_names, self.value_addresses):
            data = values[name]
            ctypes.memmove(address, data, len(data))


class _LaunchAttribute(ctypes.Structure):
    """The driver's ``CUlaunchAttribute``: an id, padding, a 64-byte union of values."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    """The driver's ``CUlaunchConfig``: grid, block, dynamic shared bytes, stream, attributes."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


class _Dependent:
    """One kernel's ``cuLaunchKernelEx`` as a programmatic dependent of the kernel before it on the
    stream, its config made once (a call sets the stream and, for run-time sizes, the grid)."""

    def __init__(self, kernel: Kernel) -> None:
        self.attribute = _LaunchAttribute(id=driver.programmatic_serialization_id())
        self.attribute.value[0] = 1  # programmaticStreamSerializationAllowed
        self.config = _LaunchConfig(grid=(ctypes.c_uint * 3)(*kernel.grid), block=(ctypes.c_uint * 3)(*kernel.block),
                                    shared=kernel.dynamic_shared_bytes, attrs=ctypes.pointer(self.attribute), count=1)
        self.address = ctypes.addressof(self.config)

    def at(self, grid: tuple[int, int, int], stream: int) -> int:
        """The config's address for a launch of ``grid`` on ``stream``."""
        config = self.config
        config.grid[0], config.grid[1], config.grid[2] = grid
        config.stream = stream or None
        return self.address


def _value_size(value: ScalarParam | StructParam) -> int:
    return value.dtype.size if isinstance(value, ScalarParam) else 128  # a CUtensorMap: 128 bytes


class CallPlan:
    """A function's call on CUDA torch tensors, prepared once (``Function.__call__`` builds it)."""

    def __init__(self, function) -> None:
        torch = sys.modules["torch"]
        self.function = function
        self.native = None  # a function of one kernel of the caller's arrays: its launch in C, where it builds
        # a stand-in module (a test's, a stub) has no tensors to take: the general path serves
        self.enabled = isinstance(getattr(torch, "Tensor", None), type) and hasattr(torch, "_C") \
            and hasattr(torch, "float32")
        if not self.enabled:
            return
        host = function.function
        params = host.caller_params
        self.arity = len(params)
        self.positions = tuple((n, _array_spec(p, function.info.alignments.get(p.name, 1), torch))
                               for n, p in enumerate(params) if isinstance(p, Buffer))
        self.arrays = tuple(spec for _, spec in self.positions)
        self.pairs = _pairs(self.arrays)
        self.scalars = tuple((n, p) for n, p in enumerate(params) if isinstance(p, ScalarParam))
        self.structs = any(isinstance(v, StructParam) for k in host.kernels for v in k.values)
        self.workspaces = bool(host.workspaces)
        self.sizes = host.sizes  # run-time sizes: read from the tensors' shapes at each call
        self.index_limit = 2**31 - 1 if all(k.index_type.size == 4 for k in host.kernels) else 2**63 - 1
        self.kernels = host.kernels
        self.slots = [_Slots(k) for k in host.kernels]
        self.stream = _current_stream_function(torch)
        self.tensor = torch.Tensor
        self._struct_cache: tuple[tuple[int, ...], dict[str, bytes]] | None = None
        # made by _prepare at the first launch (CUDA calls): handles, context, entry points
        self.context: int | None = None
        self.driver_handles: list = []
        self.handles: list[int] = []
        self.dependents: list[_Dependent | None] = []  # a dependent launch's config, made once
        self.lean: _Slots | None = None  # a function of one kernel whose parameters are the caller's arrays
        self.lean_launch: tuple = ()
        self.lean_params: tuple = ()
        self.stream_objects: dict[int, ctypes.c_void_p] = {}  # the streams launched on, as ctypes values
        self.lock = threading.Lock()
        self.workspace_tensors: dict[tuple[int, bool], dict[str, object]] = {}  # by (stream, capturing)

    def pointers(self, args: tuple) -> list[int] | None:
        """The device addresses of the call's tensors where every check passes, else None."""
        if len(args) != self.arity:
            return None
        tensor = self.tensor
        pointers = []
        for position, spec in self.positions:
            value = args[position]
            if not isinstance(value, tensor) or value.dtype is not spec.torch_dtype or value.shape != spec.shape \
                    or value.get_device() != 0:  # -1: a CPU tensor
                return None
            if not (spec.row_major and value.is_contiguous()):  # else the strides, one by one
                strides = value.stride()
                if strides != spec.all_strides and any(strides[d] != s for d, s in spec.strides):
                    return None
            pointer = value.data_ptr()
            if pointer % spec.alignment or (not pointer and spec.nbytes):
                return None
            pointers.append(pointer)
        return None if _overlaps(pointers, self.arrays, self.pairs) else pointers

    def sized_pointers(self, args: tuple) -> tuple[list[int], dict[str, int]] | None:
        """``pointers`` for a function of run-time sizes: each size read from the tensors' shapes
        (the same in each, at least 1, within the kernels' index type), and the sizes; None where
        a check fails (the general path explains it)."""
        if len(args) != self.arity:
            return None
        tensor, sizes, pointers, spans = self.tensor, {}, [], []
        for position, spec in self.positions:
            value = args[position]
            if not isinstance(value, tensor) or value.dtype is not spec.torch_dtype or value.get_device() != 0:
                return None
            shape = value.shape
            if len(shape) != len(spec.shape):
                return None
            for d, name in spec.sized:
                if sizes.setdefault(name, shape[d]) != shape[d] or shape[d] < 1:
                    return None
            if any(n and shape[d] != n for d, n in enumerate(spec.shape)):
                return None
            if not (spec.row_major and value.is_contiguous()):
                strides = value.stride()
                if strides != spec.all_strides and any(strides[d] != s for d, s in spec.strides):
                    return None
            elements = 1 + sum((n - 1) * s for n, s in zip(shape, spec.all_strides))
            if elements > self.index_limit:
                return None
            pointer = value.data_ptr()
            if pointer % spec.alignment or not pointer:
                return None
            pointers.append(pointer)
            spans.append(elements * spec.itemsize)
        for a, b in self.pairs:
            if pointers[a] < pointers[b] + spans[b] and pointers[b] < pointers[a] + spans[a]:
                return None
        return pointers, sizes

    def call(self, args: tuple, stream: object) -> bool:
        """Launch on ``args`` and return True, or return False (the general path takes the call)."""
        native = self.native
        if native is not None and stream is None:
            result = native.call(args)
            if result > 0:
                launch_failed(result, self.stream(0))
            return result == 0
        if not self.enabled:
            return False
        if self.sizes:
            found = self.sized_pointers(args)
            if found is None or not grids_fit(self.function.function, found[1]):
                return False
            if self.context is None:
                self._prepare()
            with self.lock:
                self._launch_all(args, *found, stream)
            return True
        pointers = self.pointers(args)
        if pointers is None:
            return False
        if self.context is None:
            self._prepare()
        if self.lean is not None and stream is None:  # one kernel of the caller's arrays alone
            stream = self.stream(0)
            handle = self.stream_objects.get(stream) or self._stream_object(stream)
            with self.lock:  # one parameter buffer: threads calling at once take turns filling it
                slots = self.lean.pointers
                for n, pointer in enumerate(pointers):
                    slots[n] = pointer
                result = self.raw_launch(*self.lean_launch, handle, *self.lean_params)
                if result:  # no context, or another one, current on this thread: the function's, then again
                    self.set_current(self.context)
                    result = self.raw_launch(*self.lean_launch, handle, *self.lean_params)
            if result:
                launch_failed(result, stream)
            return True
        with self.lock:
            self._launch_all(args, pointers, {}, stream)
        return True

    def _stream_object(self, stream: int) -> ctypes.c_void_p:
        if len(self.stream_objects) > 64:  # streams come and go: keep a few
            self.stream_objects.clear()
        self.stream_objects[stream] = ctypes.c_void_p(stream or None)
        return self.stream_objects[stream]

    def _prepare(self) -> None:
        """What the first launch needs: the kernels' handles (loading the module), the context,
        the driver's entry points, and for a function of one kernel whose parameters are the
        caller's arrays in order, its ready parameter buffer."""
        fn = self.function
        self.driver_handles = fn.handles()
        self.handles = [int(h) for h in self.driver_handles]
        library = libcuda()
        self.cu_launch, self.set_current = library.cuLaunchKernel, library.cuCtxSetCurrent
        self.dependents = [_Dependent(k) if k.dependent_launch else None for k in self.kernels]
        if any(self.dependents):
            self.cu_launch_ex = library.cuLaunchKernelEx
        kernel = self.kernels[0]
        if lean(self.function.function):
            # ctypes objects made once: a call converts none of its arguments (raw_launch has no argtypes)
            self.lean = self.slots[0]
            self.lean_launch = (ctypes.c_void_p(self.handles[0]), *map(ctypes.c_uint, (*kernel.grid, *kernel.block)),
                                ctypes.c_uint(kernel.dynamic_shared_bytes))
            self.lean_params = (ctypes.c_void_p(self.lean.address), ctypes.c_void_p(None))
            self.raw_launch = library["cuLaunchKernel"]  # a function object of its own, without argtypes
            self.raw_launch.restype = ctypes.c_int
        self.context = int(driver.device().context)
        if launchable_in_c(self.function.function) and not self.sizes \
                and isinstance(library, ctypes.CDLL):  # a stand-in library: ctypes
            self.native = native_plan(self, library)

    def native_arrays(self) -> list[tuple]:
        """The arrays' checks as ``fastlaunch.c``'s Plan takes them: (position, dtype, shape,
        strides, which strides are fixed, row-major, bytes, alignment)."""
        fixed = [{d for d, _ in spec.strides} for spec in self.arrays]
        return [(position, spec.torch_dtype, spec.shape, spec.all_strides,
                 [d in fixed[n] for d in range(len(spec.shape))], spec.row_major, spec.nbytes, spec.alignment)
                for n, (position, spec) in enumerate(self.positions)]

    def _launch_all(self, args: tuple, pointers: list[int], sizes: dict[str, int], stream: object) -> None:
        """Every kernel of the function, its scalars, run-time ``sizes``, workspaces and structs,
        on ``stream``."""
        fn = self.function
        producer = self.stream(0)
        handle = producer if stream is None else driver.stream_handle(stream, f"{fn.where}: stream")
        scalars = {p.name: p.value(args[n], fn.where).tobytes() for n, p in self.scalars}
        if sizes:
            scalars.update(fn.size_scalars(sizes))
        self.set_current(self.context)
        if handle != producer:
            driver.wait_for(handle, producer)
        named = dict(zip((a.name for a in self.arrays), pointers))
        if self.workspaces:
            named.update(self._workspaces(handle, sizes))
        if self.structs:
            scalars.update(self._structs(named, sizes))
        for kernel, slots, function, dependent in zip(self.kernels, self.slots, self.handles, self.dependents):
            grid = grid_at(kernel, sizes) if sizes else kernel.grid
            slots.fill(named, scalars)
            if dependent is not None:  # cuLaunchKernelEx with its attribute, the config made once
                result = self.cu_launch_ex(dependent.at(grid, handle), function, slots.address, None)
            else:
                result = self.cu_launch(function, *grid, *kernel.block, kernel.dynamic_shared_bytes,
                                        handle or None, slots.address, None)
            if result:
                launch_failed(result, handle)

    def _workspaces(self, stream: int, sizes: dict[str, int]) -> dict[str, int]:
        """The function's workspaces for calls on ``stream``, allocated by torch's allocator at
        the first such call: so a first call inside a CUDA graph capture takes them from the
        graph's memory pool (a driver allocation would end the capture), and the graph's replays
        keep them. Calls captured on one stream share a workspace with the other captures there
        (replay those graphs one after another), not with eager calls. A workspace of a run-time
        size is allocated again where the call's ``sizes`` need more than it has."""
        torch = sys.modules["torch"]
        found = self.workspace_tensors.setdefault((stream, torch.cuda.is_current_stream_capturing()), {})
        for b in self.function.function.workspaces:
            need = max(nbytes_at(b, sizes), 1)
            if b.name not in found or found[b.name].numel() < need:
                found[b.name] = torch.empty(need, dtype=torch.uint8, device="cuda")
        return {name: tensor.data_ptr() for name, tensor in found.items()}

    def _structs(self, named: dict[str, int], sizes: dict[str, int]) -> dict[str, bytes]:
        """By-value structs (tensor maps) of the arrays at these addresses and sizes: encoded
        again only when an address or a size changed since the last call."""
        key = (*named.values(), *sizes.values())
        if self._struct_cache is None or self._struct_cache[0] != key:
            self._struct_cache = (key, self.function._structs(named, sizes))
        return self._struct_cache[1]


MAX_ARRAYS, MAX_STRUCTS = 32, 16  # what fastlaunch.c and torchop.cpp hold of a launch


def launchable_in_c(host) -> bool:
    """Whether the host function is one kernel whose parameters are the caller's arrays, in order,
    then by-value structs made of their addresses (TMA tensor maps), launched plainly, with no
    scalars, run-time sizes or workspaces: its launch in C has the structs encoded per address."""
    kernel = host.kernels[0]
    arrays = [p.name for p in host.caller_params if isinstance(p, Buffer)]
    return len(host.kernels) == 1 and not kernel.dependent_launch and not host.sizes and not host.workspaces \
        and len(arrays) == len(host.caller_params) and [b.name for b in kernel.params] == arrays \
        and all(isinstance(v, StructParam) for v in kernel.values) \
        and len(arrays) <= MAX_ARRAYS and len(kernel.values) <= MAX_STRUCTS


def lean(host) -> bool:
    """A ``launchable_in_c`` function whose kernel takes no by-value structs: its ctypes launch too
    is made once."""
    return launchable_in_c(host) and not host.kernels[0].values


def encoder(function) -> Callable[..., list[bytes]]:
    """``(*addresses) -> the kernel's by-value structs`` for the function's arrays at those
    addresses (in the kernel's order), as ``launchable_in_c`` functions' launches in C take them.
    It holds the function weakly: the function holds its launch in C, which holds this."""
    host = function.function
    names = [p.name for p in host.caller_params]
    values = [v.name for v in host.kernels[0].values]
    held = weakref.ref(function)

    def encode(*addresses: int) -> list[bytes]:
        structs = held()._structs(dict(zip(names, addresses)), {})
        return [structs[name] for name in values]
    return encode


def native_plan(plan: CallPlan, library: ctypes.CDLL, ordinal: int = 0, encode: Callable | None = None):
    """``plan``'s launch in C (a function of one kernel whose parameters are the caller's arrays,
    and their tensor maps, encoded by ``encode`` or ``encoder``'s), or None where the C part did
    not build (``native.reason()``)."""
    module = native.fast_launch()
    if module is None:
        return None
    values = len(plan.kernels[0].values)
    return module.Plan(plan.tensor, plan.stream, ordinal, plan.arity, plan.native_arrays(), plan.pairs,
                       *launch_parts(plan, library), values, (encode or encoder(plan.function)) if values else None)


def prepared_launch(plan: CallPlan) -> tuple:
    """``launch_parts`` of ``plan`` through libcuda, preparing it first (at its first launch)."""
    if plan.context is None:
        plan._prepare()
    return launch_parts(plan, libcuda())


def launch_parts(plan: CallPlan, library: ctypes.CDLL) -> tuple:
    """What a launch in C takes of a prepared ``launchable_in_c`` plan: cuLaunchKernel's and
    cuCtxSetCurrent's addresses, the context, the kernel's handle, its grid, block and dynamic
    shared bytes."""
    kernel = plan.kernels[0]
    address = ctypes.cast(library.cuLaunchKernel, ctypes.c_void_p).value
    set_current = ctypes.cast(library.cuCtxSetCurrent, ctypes.c_void_p).value
    return (address, set_current, plan.context, plan.handles[0], tuple(kernel.grid), tuple(kernel.block),
            kernel.dynamic_shared_bytes)


def operator_arrays(plan: CallPlan, returned: set[str]) -> list[tuple]:
    """The arrays' checks as ``torchop.cpp``'s kernel takes them, in the parameters' order: (dtype,
    shape, strides, which strides are fixed, row-major, returned (allocated by the operator),
    bytes, alignment)."""
    return [(dtype, shape, strides, fixed, row_major, plan.arrays[n].name in returned, nbytes, alignment)
            for n, (_, dtype, shape, strides, fixed, row_major, nbytes, alignment)
            in enumerate(plan.native_arrays())]


def _array_spec(buffer: Buffer, alignment: int, torch) -> _Array:
    dtype = getattr(torch, buffer.dtype.torch_name, None)  # None: a torch without the type
    sized = tuple((d, str(n)) for d, n in enumerate(buffer.shape) if not isinstance(n, int))
    shape = tuple(n if isinstance(n, int) else 0 for n in buffer.shape)  # 0: a run-time size
    long = tuple(n or 2 for n in shape)  # a run-time size's dimension counts as longer than 1: its stride is fixed
    strides = _longer_than_one(long, buffer.strides)
    row_major = strides == _longer_than_one(long, row_major_strides(long))
    nbytes = buffer.size * buffer.dtype.size if not sized else 0
    return _Array(buffer.name, dtype, shape, strides, tuple(buffer.strides), row_major, nbytes, alignment,
                  buffer.role in ("input_output", "output"), sized, buffer.dtype.size)


def _longer_than_one(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(dimension, stride) of the dimensions longer than 1: the only strides a layout fixes."""
    return tuple((d, s) for d, (n, s) in enumerate(zip(shape, strides)) if n > 1)


def _pairs(arrays: tuple[_Array, ...]) -> tuple[tuple[int, int], ...]:
    """The pairs of arrays that may not share memory: one of them is written."""
    return tuple((a, b) for a in range(len(arrays)) for b in range(a + 1, len(arrays))
                 if arrays[a].written or arrays[b].written)


def _overlaps(pointers: list[int], arrays: tuple[_Array, ...], pairs: tuple[tuple[int, int], ...]) -> bool:
    for a, b in pairs:
        if pointers[a] < pointers[b] + arrays[b].nbytes and pointers[b] < pointers[a] + arrays[a].nbytes:
            return True
    return False


def _current_stream_function(torch):
    """``ordinal -> the raw CUstream`` torch launches on: its C accessor where torch has it (a
    fraction of a microsecond), else the public API."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return lambda ordinal: raw(ordinal) or 0
    return lambda ordinal: int(torch.cuda.current_stream(ordinal).cuda_stream) or 0


# -- the driver through ctypes: no conversions around the two calls made per launch --------------

_LIBCUDA: list = []


def libcuda():
    if not _LIBCUDA:
        library = ctypes.CDLL("libcuda.so.1")
        library.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 6, ctypes.c_uint, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_void_p]
        library.cuLaunchKernel.restype = ctypes.c_int
        library.cuLaunchKernelEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        library.cuLaunchKernelEx.restype = ctypes.c_int
        library.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        library.cuCtxSetCurrent.restype = ctypes.c_int
        _LIBCUDA.append(library)
    return _LIBCUDA[0]


def launch_failed(result: int, stream: int) -> None:
    """Raise the driver's error for a launch on ``stream`` that returned ``result``."""
    where = "cuLaunchKernel" if not stream else f"cuLaunchKernel on stream 0x{stream:x}"
    driver.check(driver.result_code(result), where)


def torch_loaded() -> bool:
    """Whether torch is imported (a call can only hold torch tensors then)."""
    return "torch" in sys.modules
