"""The launcher of loaded functions: which arrays may be passed together, and on which stream the
kernel runs. The argument checks and the choice of stream run here on fake arrays (no GPU is
touched); gpu-marked tests run the same rules against torch on the device."""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pytest

import schedc
from schedc import LaunchError
from schedc.package import driver
from schedc.package.loader import Function

from .conftest import require_gpu
from .plans import T, build, simt_matmul, tensor_matmul

M, N, K = 64, 48, 32  # f(A: float32[64, 32], B: float32[32, 48], C: float32[64, 48]), C += A @ B
MIX = "pass all arrays on one device, or all as numpy arrays"
SLEEP_CYCLES = 1_000_000_000  # torch.cuda._sleep: about half a second of a busy stream


@pytest.fixture(scope="module")
def fn(tmp_path_factory):
    path = build(*simt_matmul(M, N, K, block=(16, 16)), "rt_simt", tmp_path_factory.mktemp("runtime"))
    return schedc.load(path).rt_simt


class TorchDevice:
    """torch.device's shape: ``type`` and ``index``."""

    def __init__(self, index):
        self.type, self.index = "cuda", index


class CupyDevice:
    """cupy.cuda.Device's shape: ``id``."""

    def __init__(self, index):
        self.id = index


class FakeDeviceArray:
    """``__cuda_array_interface__`` (v3), with the device given by ``device`` or
    ``__dlpack_device__`` (``dlpack=index``) or not at all; no GPU is touched."""

    def __init__(self, shape, pointer, typestr="<f4", device=None, dlpack=None, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, False),
                                         "strides": None, "version": 3, "stream": stream}
        if device is not None:
            self.device = device
        if dlpack is not None:
            self.__dlpack_device__ = lambda: (2, dlpack)


class FakeTensor(FakeDeviceArray):
    """A torch CUDA tensor to the launcher, with ``fake_torch`` in place of torch."""

    def __init__(self, shape, pointer, index=0):
        super().__init__(shape, pointer, device=TorchDevice(index))


class CpuTensor:
    """A CPU tensor seen through DLPack only, as a torch CPU tensor is."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None, **versions):
        return self.array.__dlpack__(**versions)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def host_arrays():
    return (np.full((M, K), 2, np.float32), np.full((K, N), 3, np.float32), np.zeros((M, N), np.float32))


def device_arrays(make=FakeDeviceArray, base=0x7F0000000000, **kw):
    """A, B, C 16 MiB apart, so that they do not overlap."""
    return tuple(make(shape, base + n * (1 << 24), **kw) for n, shape in enumerate(((M, K), (K, N), (M, N))))


# which arrays may be passed together


def test_host_arrays_with_device_arrays_are_refused(fn):
    a, b, c = host_arrays()
    da, db, dc = device_arrays(device=TorchDevice(0))
    cases = [
        ((da, b, dc), f"rt_simt(A, B, C): B is on cpu but A is on cuda:0; {MIX}"),
        ((a, db, c), f"rt_simt(A, B, C): B is on cuda:0 but A is on cpu; {MIX}"),
        ((da, db, CpuTensor(c)), f"C is on cpu but A is on cuda:0; {MIX}"),  # a torch CPU tensor
        ((CpuTensor(a), FakeDeviceArray((K, N), 0x7F1000000000), c), f"B is on cuda but A is on cpu; {MIX}"),
    ]
    for args, message in cases:
        with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
            fn.check_arguments(args)


def test_arrays_on_two_devices_are_refused(fn):
    a = FakeDeviceArray((M, K), 0x7F0000000000, device=TorchDevice(0))
    b = FakeDeviceArray((K, N), 0x7F1000000000, dlpack=1)
    c = FakeDeviceArray((M, N), 0x7F2000000000, device=CupyDevice(0))
    with pytest.raises(LaunchError, match=f"B is on cuda:1 but A is on cuda:0; {MIX}"):
        fn.check_arguments((a, b, c))
    unknown = FakeDeviceArray((M, K), 0x7F0000000000)  # no device reported: compared with the others
    with pytest.raises(LaunchError, match=f"C is on cuda:0 but B is on cuda:1; {MIX}"):
        fn.check_arguments((unknown, b, c))


def test_accepted_combinations(fn):
    a, b, c = host_arrays()
    views = fn.check_arguments((a, b, c))
    assert [v.location for v in views] == ["cpu"] * 3 and not any(v.on_device for v in views)
    views = fn.check_arguments((CpuTensor(a), b, CpuTensor(c)))  # CPU tensors are host arrays
    assert [v.location for v in views] == ["cpu"] * 3
    views = fn.check_arguments(device_arrays(dlpack=2))
    assert [v.location for v in views] == ["cuda:2"] * 3 and all(v.on_device for v in views)
    da, db, dc = device_arrays()
    views = fn.check_arguments((da, FakeTensor((K, N), 0x7F1000000000), dc))  # the launch asks the driver
    assert [v.location for v in views] == ["cuda", "cuda:0", "cuda"]


# the stream of the launch, with the driver replaced by a recorder


class Recorder:
    """Stands in for the driver calls of a launch: records them, in order."""

    def __init__(self, monkeypatch, pointer_device=0):
        self.calls = []
        device = types.SimpleNamespace(ordinal=0, make_current=lambda: None)
        monkeypatch.setattr(driver, "device", lambda ordinal=0: device)
        monkeypatch.setattr(driver, "launch", lambda *a, **k: self.calls.append(("launch", a[-1])))
        monkeypatch.setattr(driver, "wait_for", lambda s, p: self.calls.append(("wait", s, p)))
        monkeypatch.setattr(driver, "synchronize_stream", lambda s: self.calls.append(("sync", s)))
        monkeypatch.setattr(driver, "pointer_device", lambda pointer: pointer_device)
        monkeypatch.setattr(driver, "DeviceMemory", self.memory)
        monkeypatch.setattr(Function, "handle", lambda fn: "kernel")

    def memory(self, nbytes):
        calls = self.calls
        return types.SimpleNamespace(
            pointer=0x1000, upload=lambda array, stream: calls.append(("upload", stream)),
            download=lambda array, stream: calls.append(("download", stream)))


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch module whose current stream on device 0 is 0x77."""
    stream = types.SimpleNamespace(cuda_stream=0x77)
    cuda = types.SimpleNamespace(current_stream=lambda device: stream if device == 0 else None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, Tensor=FakeTensor))
    return stream


def test_device_arrays_launch_on_their_frameworks_current_stream(fn, monkeypatch, fake_torch):
    calls = Recorder(monkeypatch).calls
    fn(*device_arrays(FakeTensor))
    assert calls == [("launch", 0x77)]


def test_cuda_array_interface_streams(fn, monkeypatch, fake_torch):
    calls = Recorder(monkeypatch).calls
    fn(*device_arrays(stream=0x55))  # __cuda_array_interface__ v3 names the producer's stream
    fn(*device_arrays(stream=1))  # CU_STREAM_LEGACY
    fn(*device_arrays())  # no stream named: the legacy default stream
    assert calls == [("launch", 0x55), ("launch", 0), ("launch", 0)]
    calls.clear()
    a, b, c = device_arrays(FakeTensor)
    fn(a, FakeDeviceArray((K, N), 0x7F1000000000, stream=0x55), c)  # the first array's stream, after B's
    assert calls == [("wait", 0x77, 0x55), ("launch", 0x77)]


@pytest.mark.parametrize("form", ["int", "cuda_stream", "ptr", "CUstream", "__cuda_stream__"])
def test_explicit_stream_waits_for_the_producers(fn, monkeypatch, fake_torch, form):
    calls = Recorder(monkeypatch).calls
    stream = {"int": 0x99, "cuda_stream": types.SimpleNamespace(cuda_stream=0x99),
              "ptr": types.SimpleNamespace(ptr=0x99), "CUstream": driver._driver().CUstream(0x99),
              "__cuda_stream__": types.SimpleNamespace(__cuda_stream__=lambda: (0, 0x99))}[form]
    fn(*device_arrays(FakeTensor), stream=stream)
    assert calls == [("wait", 0x99, 0x77), ("launch", 0x99)]


def test_host_arrays_run_synchronously_on_the_stream(fn, monkeypatch):
    calls = Recorder(monkeypatch).calls
    fn(*host_arrays(), stream=0x99)
    # A, B and C are read (C += ...); C is written; the call returns after the stream's sync
    assert calls == [("upload", 0x99)] * 3 + [("launch", 0x99), ("download", 0x99), ("sync", 0x99)]
    calls.clear()
    fn(*host_arrays())
    assert calls == [("upload", 0)] * 3 + [("launch", 0), ("download", 0), ("sync", 0)]


def test_devices_the_arrays_do_not_report(fn, monkeypatch):
    Recorder(monkeypatch, pointer_device=1)
    with pytest.raises(LaunchError, match="argument A: is on device 1, the function runs on device 0"):
        fn(*device_arrays())
    Recorder(monkeypatch, pointer_device=None)
    with pytest.raises(LaunchError, match="argument A: address 0x7f0000000000 is not device memory of any GPU"):
        fn(*device_arrays())


def test_stream_handles():
    assert driver.stream_handle(0) == 0 and driver.stream_handle(types.SimpleNamespace(ptr=5)) == 5
    cases = [("s", "a str is not a stream"), (True, "a bool is not a stream"),
             (types.SimpleNamespace(ptr=None), "a SimpleNamespace is not a stream"),
             (-3, "stream handle -3 is negative")]
    for value, message in cases:
        with pytest.raises(LaunchError, match=message):
            driver.stream_handle(value)


def test_a_bad_stream_is_refused_before_any_cuda_call(fn, monkeypatch):
    monkeypatch.setattr(driver, "device", lambda ordinal=0: pytest.fail("a CUDA call"))
    with pytest.raises(LaunchError, match=r"rt_simt\(A, B, C\): stream: a str is not a stream"):
        fn(*host_arrays(), stream="s")


# on the GPU, with torch


def _torch():
    require_gpu()
    return pytest.importorskip("torch")


def _inputs(torch, fn, dtype=None, shapes=((M, K), (K, N), (M, N))):
    """Zeroed A, B, C on the device, every earlier write finished, and ``fn``'s module loaded
    (loading a module synchronizes the device, which would hide a launch on the wrong stream)."""
    fn.handle()
    dtype = dtype or torch.float32
    a, b = (torch.zeros(s, dtype=dtype, device="cuda") for s in shapes[:2])
    c = torch.zeros(shapes[2], dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    return a, b, c


def _produce(torch, a, b):
    """A slow producer on torch's current stream: it fills A and B after half a second."""
    torch.cuda._sleep(SLEEP_CYCLES)
    a.fill_(2)
    b.fill_(3)


@pytest.mark.gpu
def test_torch_side_stream(fn):
    """Under ``torch.cuda.stream(s)`` the kernel runs on s, after the producer's writes."""
    torch = _torch()
    a, b, c = _inputs(torch, fn)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _produce(torch, a, b)
        fn(a, b, c)
        result = c.cpu()
    assert (result == 2 * 3 * K).all(), f"C[0, 0] = {result[0, 0].item()}, expected {2 * 3 * K}"


@pytest.mark.gpu
def test_torch_side_stream_dlpack(tmp_path):
    """The same through DLPack (torch's bfloat16 tensors have no __cuda_array_interface__)."""
    shape = (64, 64, 96)
    path = build(*tensor_matmul(*shape, operand=T.bfloat16), "rt_bf16", tmp_path)
    torch = _torch()
    fn = schedc.load(path).rt_bf16
    a, b, c = _inputs(torch, fn, torch.bfloat16, ((64, 96), (96, 64), (64, 64)))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _produce(torch, a, b)
        fn(a, b, c)
        result = c.cpu()
    assert (result == 2 * 3 * 96).all(), f"C[0, 0] = {result[0, 0].item()}, expected {2 * 3 * 96}"


@pytest.mark.gpu
def test_cupy_side_stream(fn):
    """Under a cupy stream s the kernel runs on s, after the producer's writes (torch sleeps on s)."""
    torch = _torch()
    cupy = pytest.importorskip("cupy")
    fn.handle()
    a, b, c = (cupy.zeros(shape, cupy.float32) for shape in ((M, K), (K, N), (M, N)))
    a.fill(1)  # cupy loads fill's kernel at its first use (not for 0: a memset), synchronizing the device
    a.fill(0)
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        with torch.cuda.stream(torch.cuda.ExternalStream(s.ptr)):
            torch.cuda._sleep(SLEEP_CYCLES)
        a.fill(2)
        b.fill(3)
        fn(a, b, c)
        result = c.get()
    assert (result == 2 * 3 * K).all(), f"C[0, 0] = {result[0, 0]}, expected {2 * 3 * K}"


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["Stream", "int", "CUstream"])
def test_explicit_stream(fn, form):
    """``stream=s``: the kernel is queued on s, behind the producer's work there."""
    torch = _torch()
    a, b, c = _inputs(torch, fn)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _produce(torch, a, b)
    stream = {"Stream": s, "int": s.cuda_stream, "CUstream": driver._driver().CUstream(s.cuda_stream)}[form]
    fn(a, b, c, stream=stream)  # torch's current stream is the default stream here
    s.synchronize()
    assert (c == 2 * 3 * K).all(), f"C[0, 0] = {c[0, 0].item()}, expected {2 * 3 * K}"


@pytest.mark.gpu
def test_explicit_stream_waits_for_torchs_current_stream(fn):
    """``stream=s2`` while the producer writes on torch's current stream s1: s2 waits for s1."""
    torch = _torch()
    a, b, c = _inputs(torch, fn)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(s1):
        _produce(torch, a, b)
        fn(a, b, c, stream=s2)
    s2.synchronize()
    assert (c == 2 * 3 * K).all(), f"C[0, 0] = {c[0, 0].item()}, expected {2 * 3 * K}"


@pytest.mark.gpu
def test_numpy_arrays_with_a_stream_are_synchronous(fn):
    """numpy arrays and ``stream=s``: copies and kernel queue behind s's work, and the call
    returns with C copied out, s idle. (Which stream the copies use is checked without a GPU,
    in test_host_arrays_run_synchronously_on_the_stream: here freeing the call's device memory
    synchronizes the whole device.)"""
    torch = _torch()
    fn.handle()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    a, b, c = host_arrays()
    fn(a, b, c, stream=s)
    assert s.query(), f"s still busy after the call returned ({time.perf_counter() - start:.3f} s)"
    assert (c == 2 * 3 * K).all()


@pytest.mark.gpu
def test_torch_mixed_devices_are_refused(fn):
    torch = _torch()
    a, b, c = _inputs(torch, fn)
    with pytest.raises(LaunchError, match=f"B is on cpu but A is on cuda:0; {MIX}"):
        fn(a, b.cpu(), c)
