"""A thin layer over the CUDA driver API (cuda-python): context, memory, modules, launches.

Every failing call raises LaunchError naming the call and the driver's error string. The
primary context of the device is used, so arrays from torch or cupy are valid here. Streams are
raw ``CUstream`` handles as ints: 0 is the legacy default stream.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import struct

import numpy as np

from .. import tma
from ..errors import LaunchError
from ..ir.types import ScalarType


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - cuda-python is a dependency
        raise LaunchError("cuda", f"cuda-python is not installed: {e}") from None
    return driver


def check(result, call: str):
    """Unpack a cuda-python result tuple, raising on errors."""
    driver = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        message = text.decode() if isinstance(text, bytes) else str(err)
        raise LaunchError(call, f"{err.name}: {message}")
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


def result_code(code: int):
    """The driver's ``CUresult`` of a raw result (from a call through ctypes), for ``check``."""
    return _driver().CUresult(code)


@functools.cache
def device_count() -> int:
    """Number of CUDA devices (0 when there is no driver or no GPU)."""
    try:
        driver = _driver()
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
        return count if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:
        return 0


class Device:
    """The primary context of one GPU, made current on creation."""

    def __init__(self, ordinal: int = 0) -> None:
        driver = _driver()
        if device_count() == 0:
            raise LaunchError("cuda", "no CUDA device is available (no GPU or no driver)")
        self.ordinal = ordinal
        self.device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.make_current()
        name = check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.name = name.split(b"\0")[0].decode()
        attr = driver.CUdevice_attribute
        self.sm = 10 * self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) + self.attribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        )
        self.l2_bytes = self.attribute(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)

    def make_current(self) -> None:
        check(_driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def attribute(self, which) -> int:
        return check(_driver().cuDeviceGetAttribute(which, self.device), "cuDeviceGetAttribute")

    def synchronize(self) -> None:
        check(_driver().cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")


@functools.cache
def device(ordinal: int = 0) -> Device:
    return Device(ordinal)


class DeviceMemory:
    """An allocation freed when the object is collected."""

    def __init__(self, nbytes: int) -> None:
        device().make_current()
        self.nbytes = max(int(nbytes), 1)
        self.pointer = int(check(_driver().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes} bytes)"))

    def upload(self, array: np.ndarray, stream: int | None = None) -> None:
        """Copy ``array`` in; with a stream, queued on it (the caller synchronizes it)."""
        array = np.ascontiguousarray(array)
        driver = _driver()
        if stream is None:
            check(driver.cuMemcpyHtoD(self.pointer, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")
        else:
            check(driver.cuMemcpyHtoDAsync(self.pointer, array.ctypes.data, array.nbytes, stream),
                  f"cuMemcpyHtoDAsync on stream 0x{stream:x}")

    def download(self, array: np.ndarray, stream: int | None = None) -> None:
        """Copy out into ``array`` (contiguous); with a stream, queued on it."""
        driver = _driver()
        if stream is None:
            check(driver.cuMemcpyDtoH(array.ctypes.data, self.pointer, array.nbytes), "cuMemcpyDtoH")
        else:
            check(driver.cuMemcpyDtoHAsync(array.ctypes.data, self.pointer, array.nbytes, stream),
                  f"cuMemcpyDtoHAsync on stream 0x{stream:x}")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # the driver may be gone at interpreter exit
            _driver().cuMemFree(self.pointer)


class Module:
    """A loaded cubin and its kernels."""

    def __init__(self, cubin: bytes) -> None:
        device().make_current()
        self._cubin = cubin  # kept alive for the driver
        self.module = check(_driver().cuModuleLoadData(cubin), "cuModuleLoadData")

    def function(self, name: str, dynamic_shared_bytes: int = 0):
        driver = _driver()
        kernel = check(driver.cuModuleGetFunction(self.module, name.encode()), f"cuModuleGetFunction({name})")
        if dynamic_shared_bytes > 48 * 1024:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(driver.cuFuncSetAttribute(kernel, attr, dynamic_shared_bytes), "cuFuncSetAttribute")
        return kernel


class LaunchArgs:
    """Kernel parameters packed as the driver's ``void**``: ints are device pointers, bytes are
    values passed by value (scalars, structs), each held 64-byte aligned."""

    def __init__(self, values: list[int | bytes]) -> None:
        self.values = [_aligned(v) if isinstance(v, bytes) else ctypes.c_void_p(v) for v in values]
        self.array = (ctypes.c_void_p * len(values))(*(_address(v) for v in self.values))

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


def _aligned(data: bytes) -> tuple[ctypes.Array, int]:
    """A buffer holding ``data`` at a 64-byte aligned address, and that address."""
    storage = (ctypes.c_ubyte * (len(data) + 64))()
    address = -(-ctypes.addressof(storage) // 64) * 64
    ctypes.memmove(address, data, len(data))
    return storage, address


def _address(value) -> int:
    return ctypes.addressof(value) if isinstance(value, ctypes.c_void_p) else value[1]


_TENSOR_MAP_TYPES = {"uint8": "UINT8", "int8": "UINT8", "bool": "UINT8", "float8_e4m3": "UINT8",
                     "float8_e5m2": "UINT8", "uint16": "UINT16", "int16": "UINT16",
                     "uint32": "UINT32", "int32": "INT32", "uint64": "UINT64", "int64": "INT64",
                     "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64"}


def encode_tensor_map(address: int, dtype: ScalarType, shape: tuple[int, ...], strides: tuple[int, ...],
                      box: tuple[int, ...], swizzle: int) -> bytes:
    """The 128 bytes of a CUtensorMap (``cuTensorMapEncodeTiled``) for an array at ``address``
    of ``shape`` and ``strides`` (elements; one of them 1), copied in boxes of ``box`` elements
    (per dimension, in the array's order), ``swizzle`` bytes (0, 32, 64, 128); integers are copied as the
    unsigned type of their size."""
    driver = _driver()
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    order = tma.dimension_order(strides)  # slowest first, the contiguous last
    shape, strides, box = (tuple(x[d] for d in order) for x in (shape, strides, box))
    kind = getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TENSOR_MAP_TYPES[dtype.value]}")
    mode = getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}B" if swizzle else
                   "CU_TENSOR_MAP_SWIZZLE_NONE")
    encoded = check(driver.cuTensorMapEncodeTiled(
        kind, len(shape), address, [u64(n) for n in reversed(shape)],
        [u64(s * dtype.size) for s in reversed(strides[:-1])], [u32(n) for n in reversed(box)],
        [u32(1)] * len(shape), driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, mode,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    return struct.pack("<16Q", *(int(word) for word in encoded.opaque))


def launch(kernel, grid, block, shared: int, args: LaunchArgs, stream: int = 0, dependent: bool = False) -> None:
    """Launch ``kernel`` on ``stream``; ``dependent``: as a programmatic dependent of the kernel
    before it on the stream (its blocks may start before that kernel ends)."""
    if dependent:
        _launch_dependent(kernel, grid, block, shared, args, stream)
        return
    where = "cuLaunchKernel" if stream == 0 else f"cuLaunchKernel on stream 0x{stream:x}"
    check(_driver().cuLaunchKernel(kernel, *grid, *block, shared, stream, args.address, 0), where)


def _launch_dependent(kernel, grid, block, shared: int, args: LaunchArgs, stream: int) -> None:
    driver = _driver()
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes, config.hStream = shared, driver.CUstream(stream)
    overlap = driver.CUlaunchAttribute()
    overlap.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    overlap.value.programmaticStreamSerializationAllowed = 1
    config.attrs, config.numAttrs = [overlap], 1
    check(driver.cuLaunchKernelEx(config, kernel, args.address, 0), f"cuLaunchKernelEx on stream 0x{stream:x}")


def programmatic_serialization_id() -> int:
    """The launch attribute that lets a kernel start before the one before it on the stream ends."""
    return int(_driver().CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)


def stream_handle(stream: object, where: str = "stream") -> int:
    """The ``CUstream`` handle of ``stream`` as an int: an int itself, an object with
    ``__cuda_stream__()`` (cuda.core), ``.cuda_stream`` (torch), ``.ptr`` (cupy), or a cuda-python
    ``CUstream``. No CUDA call is made."""
    handle = _raw_stream_handle(stream)
    if handle is None:
        raise LaunchError(where, f"a {type(stream).__name__} is not a stream (expected an int handle, or an "
                                 "object with .cuda_stream or .ptr, or a cuda-python CUstream)")
    if handle < 0:
        raise LaunchError(where, f"stream handle {handle} is negative")
    return handle


def _raw_stream_handle(stream: object) -> int | None:
    if isinstance(stream, bool):
        return None
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if isinstance(stream, _driver().CUstream):
        return int(stream)
    return None


def wait_for(stream: int, producer: int) -> None:
    """Make later work on ``stream`` wait for the work queued on ``producer`` so far (an event;
    the host does not wait)."""
    driver = _driver()
    event = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(driver.cuEventRecord(event, producer), f"cuEventRecord on stream 0x{producer:x}")
        check(driver.cuStreamWaitEvent(stream, event, 0), f"cuStreamWaitEvent on stream 0x{stream:x}")
    finally:
        driver.cuEventDestroy(event)  # released once the wait is done


def synchronize_stream(stream: int) -> None:
    check(_driver().cuStreamSynchronize(stream), f"cuStreamSynchronize on stream 0x{stream:x} (a kernel failed)")


def pointer_device(pointer: int) -> int | None:
    """The device ordinal of a device pointer, or None for host or unknown memory."""
    driver = _driver()
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, ordinal = driver.cuPointerGetAttribute(attr, pointer)
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    kind_attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    err, kind = driver.cuPointerGetAttribute(kind_attr, pointer)
    if err != driver.CUresult.CUDA_SUCCESS or kind != int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE):
        return None
    return int(ordinal)


class Events:
    """A pair of CUDA events for timing on the default stream."""

    def __init__(self) -> None:
        driver = _driver()
        flags = driver.CUevent_flags.CU_EVENT_DEFAULT
        self.start = check(driver.cuEventCreate(flags), "cuEventCreate")
        self.stop = check(driver.cuEventCreate(flags), "cuEventCreate")

    def record_start(self) -> None:
        check(_driver().cuEventRecord(self.start, 0), "cuEventRecord")

    def elapsed_ms(self) -> float:
        driver = _driver()
        check(driver.cuEventRecord(self.stop, 0), "cuEventRecord")
        check(driver.cuEventSynchronize(self.stop), "cuEventSynchronize (a kernel failed)")
        return float(check(driver.cuEventElapsedTime(self.start, self.stop), "cuEventElapsedTime"))


def copy_device(target: int, source: int, nbytes: int) -> None:
    check(_driver().cuMemcpyDtoDAsync(target, source, nbytes, 0), "cuMemcpyDtoDAsync")
