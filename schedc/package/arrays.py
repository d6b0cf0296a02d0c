"""Describe call arguments: numpy arrays, ``__cuda_array_interface__`` objects and DLPack
tensors, each checked against the parameter it is passed for. No CUDA call is made here.

Each view says where its array lives: ``"cpu"`` (numpy, CPU DLPack tensors: copied in and out),
``"cuda:N"`` (a device array that reports its device: ``__dlpack_device__``, or a ``device``
attribute as torch and cupy have), or ``"cuda"`` (a device array that does not say which device:
the launcher asks the driver).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from ..errors import LaunchError
from ..ir.kernel import Buffer
from ..ir.layout import row_major_strides
from ..ir.numeric import strided_view
from ..ir.types import ScalarType, from_numpy

_TYPESTR = {
    "f2": ScalarType.float16, "f4": ScalarType.float32, "f8": ScalarType.float64,
    "i1": ScalarType.int8, "i2": ScalarType.int16, "i4": ScalarType.int32, "i8": ScalarType.int64,
    "u1": ScalarType.uint8, "u2": ScalarType.uint16, "u4": ScalarType.uint32, "u8": ScalarType.uint64,
    "b1": ScalarType.bool,
}
# DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, 10 float8_e4m3fn, 12 float8_e5m2
_DLPACK = {(0, 8): ScalarType.int8, (0, 16): ScalarType.int16, (0, 32): ScalarType.int32,
           (0, 64): ScalarType.int64, (1, 8): ScalarType.uint8, (1, 16): ScalarType.uint16,
           (1, 32): ScalarType.uint32, (1, 64): ScalarType.uint64, (2, 16): ScalarType.float16,
           (2, 32): ScalarType.float32, (2, 64): ScalarType.float64, (4, 16): ScalarType.bfloat16,
           (6, 8): ScalarType.bool, (10, 8): ScalarType.float8_e4m3, (12, 8): ScalarType.float8_e5m2}
_DLPACK_CUDA, _DLPACK_CPU = 2, 1


@dataclass
class ArgumentView:
    """What the launcher needs from one argument."""

    name: str
    on_device: bool
    pointer: int | None  # device pointer, or the host address of a numpy array
    nbytes: int
    read: bool
    written: bool
    array: np.ndarray | None = None  # numpy arguments: the storage span, flat
    keepalive: object = field(default=None, repr=False)  # a DLPack capsule in use
    location: str = "cpu"  # "cpu", "cuda:N", or "cuda" where the array does not say which device
    source: object = field(default=None, repr=False)  # the argument as passed (its framework's stream)
    stream: int | None = None  # the producer's stream from __cuda_array_interface__ v3, if given

    @property
    def ordinal(self) -> int | None:
        """The device ordinal the array reports, or None (host arrays, or not reported)."""
        if not self.location.startswith("cuda:"):
            return None
        return int(self.location.removeprefix("cuda:"))

    @property
    def device(self) -> int | None:
        """The device ordinal: as reported, else asked of the driver (a CUDA call)."""
        from . import driver

        if not self.on_device:
            return None
        return self.ordinal if self.ordinal is not None else driver.pointer_device(self.pointer)


def describe(where: str, buffer: Buffer, value: object, alignment: int) -> ArgumentView:
    label = f"{where}: argument {buffer.name}"
    read = buffer.role in ("input", "input_output")
    written = buffer.role in ("input_output", "output")
    view = _describe(label, buffer, value, read, written, alignment)
    view.source = value
    return view


def _describe(label, buffer: Buffer, value: object, read, written, alignment) -> ArgumentView:
    if isinstance(value, np.ndarray):
        return _numpy(label, buffer, value, read, written)
    stored_only = _torch_stored_only(value)
    if stored_only is not None:
        return _torch_tensor(label, buffer, value, stored_only, read, written, alignment)
    interface = _cuda_array_interface(value)
    if interface is not None and interface.get("typestr", "")[1:2] == "V" and hasattr(value, "__dlpack__"):
        interface = None  # an opaque element type (torch's bfloat16): DLPack names it
    if interface is not None:
        view = _device_interface(label, buffer, interface, read, written, alignment)
        view.location = _reported_device(value)
        return view
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device_type, device_id = value.__dlpack_device__()
        if int(device_type) == _DLPACK_CPU:
            return _numpy(label, buffer, np.from_dlpack(value), read, written)
        if int(device_type) == _DLPACK_CUDA:
            view = _dlpack(label, buffer, value, read, written, alignment)
            view.location = f"cuda:{int(device_id)}"
            return view
        raise LaunchError(label, f"DLPack device type {int(device_type)} is neither CPU nor CUDA")
    raise LaunchError(label, f"a {type(value).__name__} is not an array (numpy, or a device array "
                             "with __cuda_array_interface__ or DLPack)")


def _reported_device(value: object) -> str:
    """"cuda:N" from the array's ``__dlpack_device__`` or ``device`` (torch.device's ``index``,
    cupy's Device ``id``), else "cuda"."""
    try:
        if hasattr(value, "__dlpack_device__"):
            device_type, device_id = value.__dlpack_device__()
            if int(device_type) == _DLPACK_CUDA:
                return f"cuda:{int(device_id)}"
        device = getattr(value, "device", None)
        index = getattr(device, "index", getattr(device, "id", None))
    except Exception:  # a foreign object's property may raise anything
        return "cuda"
    return f"cuda:{index}" if isinstance(index, int) and not isinstance(index, bool) else "cuda"


def _expect(label, buffer: Buffer, dtype: ScalarType, shape: tuple, strides: tuple | None) -> None:
    """strides in elements, or None for C-contiguous."""
    if dtype != buffer.dtype:
        raise LaunchError(label, f"dtype {dtype.value}, expected {buffer.dtype.value}")
    if tuple(shape) != buffer.shape:
        raise LaunchError(label, f"shape {tuple(shape)}, expected {buffer.shape}")
    if strides is None:
        strides = row_major_strides(shape)
    relevant = [(got, want) for got, want, n in zip(strides, buffer.strides, shape) if n > 1]
    if any(got != want for got, want in relevant):
        raise LaunchError(
            label,
            f"element strides {tuple(strides)}, expected {buffer.strides} (the layout the function "
            "was compiled for); pass a contiguous copy in that layout",
        )


def _numpy(label, buffer, array: np.ndarray, read, written) -> ArgumentView:
    try:
        dtype = from_numpy(array.dtype)
    except KeyError:
        raise LaunchError(label, f"dtype {array.dtype}, expected {buffer.dtype.value}") from None
    elements = tuple(s // array.itemsize if array.itemsize else 0 for s in array.strides)
    if any(s % array.itemsize for s in array.strides):
        raise LaunchError(label, f"byte strides {array.strides} are not whole elements")
    _expect(label, buffer, dtype, array.shape, elements)
    if written and not array.flags.writeable:
        raise LaunchError(label, "read-only, but the function writes it")
    # the storage span from the first element: the layout's gaps travel too (a layout with
    # gaps is uploaded even for outputs, so the gaps come back unchanged)
    span = strided_view(array, (buffer.size,), (array.itemsize,))
    gaps = buffer.size != array.size
    return ArgumentView(buffer.name, False, array.ctypes.data, buffer.size * array.itemsize,
                        read or gaps, written, span)


def _cuda_array_interface(value: object) -> dict | None:
    try:
        return getattr(value, "__cuda_array_interface__", None)
    except (TypeError, AttributeError, RuntimeError, KeyError):
        return None  # e.g. torch bfloat16 tensors: use DLPack instead


def _torch_stored_only(value: object) -> ScalarType | None:
    """The 8-bit float type of a torch tensor of one (which neither interface exports), else None."""
    if type(value).__module__.split(".")[0] != "torch" or not hasattr(value, "data_ptr"):
        return None
    name = str(getattr(value, "dtype", "")).removeprefix("torch.")
    return next((t for t in ScalarType if t.torch_name == name and t.arithmetic is not t), None)


def _torch_tensor(label, buffer, value, dtype: ScalarType, read, written, alignment) -> ArgumentView:
    """A torch tensor of an 8-bit float type, read through its own attributes: on the GPU its
    address, else its bytes as a numpy array of ml_dtypes' type."""
    if value.device.type != "cuda":
        import torch

        return _numpy(label, buffer, value.view(torch.uint8).numpy().view(dtype.numpy), read, written)
    _expect(label, buffer, dtype, tuple(value.shape), tuple(value.stride()))
    view = _pointer_view(label, buffer, value.data_ptr(), read, written, alignment)  # (view.source keeps it)
    view.location = f"cuda:{value.device.index or 0}"
    return view


def _device_interface(label, buffer, interface: dict, read, written, alignment) -> ArgumentView:
    typestr = interface.get("typestr", "")
    dtype = _TYPESTR.get(typestr[1:])
    if dtype is None or typestr[0] == ">":
        raise LaunchError(label, f"device array type {typestr!r}, expected {buffer.dtype.value}")
    shape = tuple(interface["shape"])
    byte_strides = interface.get("strides")
    strides = None if byte_strides is None else tuple(s // dtype.size for s in byte_strides)
    _expect(label, buffer, dtype, shape, strides)
    pointer, readonly = interface["data"]
    if written and readonly:
        raise LaunchError(label, "read-only, but the function writes it")
    view = _pointer_view(label, buffer, int(pointer), read, written, alignment)
    stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
    view.stream = None if stream is None else int(stream)
    return view


def _pointer_view(label, buffer, pointer: int, read, written, alignment, keepalive=None) -> ArgumentView:
    if pointer == 0 and buffer.size:
        raise LaunchError(label, "null device pointer")
    if pointer % alignment:
        raise LaunchError(label, f"device address 0x{pointer:x} is not {alignment}-byte aligned, "
                                 "which this function's tensor-core tiles need")
    return ArgumentView(buffer.name, True, pointer, buffer.size * buffer.dtype.size, read, written,
                        keepalive=keepalive)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _dlpack(label, buffer, value, read, written, alignment) -> ArgumentView:
    capsule = value.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    tensor = ctypes.cast(get(capsule, b"dltensor"), ctypes.POINTER(_DLTensor)).contents
    dt = tensor.dtype
    dtype = _DLPACK.get((dt.code, dt.bits)) if dt.lanes == 1 else None
    if dtype is None:
        raise LaunchError(label, f"DLPack type (code {dt.code}, {dt.bits} bits, {dt.lanes} lanes), "
                                 f"expected {buffer.dtype.value}")
    shape = tuple(tensor.shape[d] for d in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(tensor.strides[d] for d in range(tensor.ndim))
    _expect(label, buffer, dtype, shape, strides)
    pointer = int(tensor.data or 0) + int(tensor.byte_offset)
    return _pointer_view(label, buffer, pointer, read, written, alignment, keepalive=capsule)
