"""Describe call arguments: numpy arrays, ``__cuda_array_interface__`` objects and DLPack
tensors, each checked against the parameter it is passed for. No CUDA call is made here.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from ..errors import LaunchError
from ..ir.array import row_major_strides
from ..ir.kernel import Buffer
from ..ir.types import ScalarType, from_numpy

_TYPESTR = {
    "f2": ScalarType.float16, "f4": ScalarType.float32, "f8": ScalarType.float64,
    "i1": ScalarType.int8, "i2": ScalarType.int16, "i4": ScalarType.int32, "i8": ScalarType.int64,
    "u1": ScalarType.uint8, "u2": ScalarType.uint16, "u4": ScalarType.uint32, "u8": ScalarType.uint64,
    "b1": ScalarType.bool,
}
# DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
_DLPACK = {(0, 8): ScalarType.int8, (0, 16): ScalarType.int16, (0, 32): ScalarType.int32,
           (0, 64): ScalarType.int64, (1, 8): ScalarType.uint8, (1, 16): ScalarType.uint16,
           (1, 32): ScalarType.uint32, (1, 64): ScalarType.uint64, (2, 16): ScalarType.float16,
           (2, 32): ScalarType.float32, (2, 64): ScalarType.float64, (4, 16): ScalarType.bfloat16,
           (6, 8): ScalarType.bool}
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

    @property
    def device(self) -> int | None:
        from . import driver

        return driver.pointer_device(self.pointer) if self.on_device else None


def describe(where: str, buffer: Buffer, value: object, alignment: int) -> ArgumentView:
    label = f"{where}: argument {buffer.name}"
    read = buffer.role in ("input", "input_output")
    written = buffer.role in ("input_output", "output")
    if isinstance(value, np.ndarray):
        return _numpy(label, buffer, value, read, written)
    interface = _cuda_array_interface(value)
    if interface is not None and interface.get("typestr", "")[1:2] == "V" and hasattr(value, "__dlpack__"):
        interface = None  # an opaque element type (torch's bfloat16): DLPack names it
    if interface is not None:
        return _device_interface(label, buffer, interface, read, written, alignment)
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device_type, _ = value.__dlpack_device__()
        if int(device_type) == _DLPACK_CPU:
            return _numpy(label, buffer, np.from_dlpack(value), read, written)
        if int(device_type) == _DLPACK_CUDA:
            return _dlpack(label, buffer, value, read, written, alignment)
        raise LaunchError(label, f"DLPack device type {int(device_type)} is neither CPU nor CUDA")
    raise LaunchError(label, f"a {type(value).__name__} is not an array (numpy, or a device array "
                             "with __cuda_array_interface__ or DLPack)")


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
    span = np.lib.stride_tricks.as_strided(array, (buffer.size,), (array.itemsize,))
    gaps = buffer.size != array.size
    return ArgumentView(buffer.name, False, array.ctypes.data, buffer.size * array.itemsize,
                        read or gaps, written, span)


def _cuda_array_interface(value: object) -> dict | None:
    try:
        return getattr(value, "__cuda_array_interface__", None)
    except (TypeError, AttributeError, RuntimeError):
        return None  # e.g. torch bfloat16 tensors: use DLPack instead


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
    return _pointer_view(label, buffer, int(pointer), read, written, alignment)


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
