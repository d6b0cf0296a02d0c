"""The fast path of a call on CUDA torch tensors (``schedc.package.fastcall``): taken exactly
where every check passes, its results the general path's; every other call still meets the
general path's checks and messages. CPU parts: the parameter buffer's bytes, the overlap rule,
a stand-in torch module; GPU parts: single kernels, split-K functions (workspaces, dependent
launches) and Hopper functions (tensor maps) through it."""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import schedc
from schedc.errors import LaunchError
from schedc.ir.kernel import Buffer, Kernel, ScalarParam
from schedc.ir.types import ScalarType
from schedc.package import fastcall

from .conftest import require_gpu
from .kit import hopper_matmul
from .plans import build, simt_matmul


def test_the_parameter_buffer_holds_each_pointer_and_value_where_the_driver_reads_it():
    a = Buffer("A", ScalarType.float32, (4,), (1,), "param", "input")
    c = Buffer("C", ScalarType.float32, (4,), (1,), "param", "output")
    kernel = Kernel("k", (a, c), (1, 1, 1), (32, 1, 1), (), values=(ScalarParam("alpha", ScalarType.float32),))
    slots = fastcall._Slots(kernel)
    slots.fill({"A": 0x7F0000001000, "C": 0x7F0000002000}, {"alpha": np.float32(2.5).tobytes()})
    addresses = (ctypes.c_void_p * 3).from_address(slots.address)
    assert ctypes.c_uint64.from_address(addresses[0]).value == 0x7F0000001000
    assert ctypes.c_uint64.from_address(addresses[1]).value == 0x7F0000002000
    assert ctypes.c_float.from_address(addresses[2]).value == 2.5 and addresses[2] % 64 == 0


def test_overlap_refuses_a_written_array_sharing_memory_only():
    spec = fastcall._Array
    read, written = (spec(n, None, (4,), (), (1,), True, 16, 1, w) for n, w in (("A", False), ("C", True)))
    assert fastcall._pairs((read, written, read)) == ((0, 1), (1, 2))
    assert fastcall._overlaps([0x1000, 0x1008], (read, written), ((0, 1),))
    assert not fastcall._overlaps([0x1000, 0x1010], (read, written), ((0, 1),))
    assert not fastcall._overlaps([0x1000, 0x1008], (read, read), fastcall._pairs((read, read)))


def test_a_stand_in_torch_module_leaves_the_call_to_the_general_path(tmp_path, monkeypatch):
    fn = schedc.load(build(*simt_matmul(32, 32, 16, block=(16, 16)), "standin", tmp_path)).standin
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=None))
    with pytest.raises(LaunchError, match=r"standin\(A, B, C\): expected 3 arrays, got 1"):
        fn(np.zeros((32, 16), np.float32))
    assert fn._plan is not None and not fn._plan.enabled


# -- the C part (fastlaunch.c), on the CPU: a stand-in torch, the driver's calls as callbacks ----


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class _Tensor:
    """What the fast path reads of a torch tensor, set by hand."""

    def __init__(self, dtype, shape, strides, pointer, device=0, fails=None) -> None:
        self.dtype, self.shape, self._strides, self._pointer, self._device = dtype, tuple(shape), tuple(strides), \
            pointer, device
        self.fails = fails

    def get_device(self) -> int:
        return self._device

    def stride(self) -> tuple:
        return self._strides

    def is_contiguous(self) -> bool:
        expected, step = [], 1
        for n in reversed(self.shape):
            expected.insert(0, step)
            step *= n
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self._strides, expected))

    def data_ptr(self) -> int:
        if self.fails is not None:
            raise self.fails
        return self._pointer


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _Driver:
    """cuLaunchKernel and cuCtxSetCurrent as C callbacks: each launch's function, grid, block,
    shared bytes, stream and pointers recorded; ``results`` the codes the next launches return."""

    def __init__(self, arrays: int, values: int = 0) -> None:
        self.launched, self.contexts, self.results, self.values = [], [], [], []

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointers = [ctypes.c_uint64.from_address(params[n]).value for n in range(arrays)]
            self.launched.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, pointers))
            self.values.append([ctypes.string_at(params[arrays + v], 128) for v in range(values)])
            self.aligned = all(params[arrays + v] % 64 == 0 for v in range(values))  # as CUtensorMap's type is
            return self.results.pop(0) if self.results else 0

        def set_current(context):
            self.contexts.append(context)
            return 0
        self.cuLaunchKernel, self.cuCtxSetCurrent = _LAUNCH(launch), _SET(set_current)


@pytest.fixture(scope="module")
def native_package(tmp_path_factory):
    """C[64, 48] += A[64, 32] @ B[32, 48], built once for the tests of the C part."""
    from schedc.package import native

    if native.fast_launch() is None:
        pytest.skip(f"the C part did not build: {native.reason()}")
    return build(*simt_matmul(64, 48, 32, block=(16, 16)), "native", tmp_path_factory.mktemp("native"))


@pytest.fixture
def native_plan(native_package, monkeypatch):
    """A CallPlan of ``native_package``'s function under a stand-in torch, its C launch, the
    driver's stand-in and the stand-in's float32."""
    fn = schedc.load(native_package).native
    float32 = _Dtype("float32")
    stand_in = types.SimpleNamespace(Tensor=_Tensor, float32=float32, float16=_Dtype("float16"),
                                     _C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda ordinal: 0x5000))
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    plan = fastcall.CallPlan(fn)
    plan.handles, plan.context = [0xF00], 0xC0
    library = _Driver(3)
    plan.native = fastcall.native_plan(plan, library)
    return plan, library, float32


def test_the_c_launch_encodes_the_tensor_maps_again_only_when_an_address_changes(tmp_path, monkeypatch):
    """A wgmma function's kernel takes TMA tensor maps after the arrays: the C launch has them
    encoded at the first call and where an address changed, and passes them by value."""
    from schedc.package import native

    if native.fast_launch() is None:
        pytest.skip(f"the C part did not build: {native.reason()}")
    fn = schedc.load(build(*hopper_matmul.matmul(128, 256, 128, stages=2), "tma", tmp_path)).tma
    float16, float32 = _Dtype("float16"), _Dtype("float32")
    stand_in = types.SimpleNamespace(Tensor=_Tensor, float32=float32, float16=float16,
                                     _C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda ordinal: 0x5000))
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    plan = fastcall.CallPlan(fn)
    plan.handles, plan.context = [0xF00], 0xC0
    count = len(fn.function.kernels[0].values)
    assert fastcall.launchable_in_c(fn.function) and count == 3  # A's, B's and C's maps
    library, encoded = _Driver(3, count), []

    def encode(*addresses):
        encoded.append(addresses)
        return [bytes([len(encoded), v]) * 64 for v in range(count)]
    plan.native = fastcall.native_plan(plan, library, encode=encode)
    a, b = _Tensor(float16, (128, 128), (128, 1), 0x10000), _Tensor(float16, (128, 256), (256, 1), 0x20000)
    c, moved = (_Tensor(float32, (128, 256), (256, 1), address) for address in (0x40000, 0x80000))
    assert [plan.native.call(args) for args in ((a, b, c), (a, b, c), (a, b, moved))] == [0, 0, 0]
    assert encoded == [(0x10000, 0x20000, 0x40000), (0x10000, 0x20000, 0x80000)]
    first, second = ([bytes([n, v]) * 64 for v in range(count)] for n in (1, 2))
    assert library.values == [first, first, second] and library.aligned
    assert [launch[-1] for launch in library.launched] == [[0x10000, 0x20000, 0x40000]] * 2 + [[0x10000, 0x20000,
                                                                                                0x80000]]


def test_a_call_made_while_another_asks_for_its_stream_lends_it_no_tensor_maps(tmp_path, monkeypatch):
    """Asking torch for the stream runs Python, where another thread's call may come between (here:
    made from the stream's function itself): each launch still gets the maps of its own addresses."""
    from schedc.package import native

    if native.fast_launch() is None:
        pytest.skip(f"the C part did not build: {native.reason()}")
    fn = schedc.load(build(*hopper_matmul.matmul(128, 256, 128, stages=2), "tma", tmp_path)).tma
    float16, float32 = _Dtype("float16"), _Dtype("float32")
    a, b = _Tensor(float16, (128, 128), (128, 1), 0x10000), _Tensor(float16, (128, 256), (256, 1), 0x20000)
    c, moved = (_Tensor(float32, (128, 256), (256, 1), address) for address in (0x40000, 0x80000))
    between = []

    def stream(ordinal):
        if between:
            plan.native.call((a, b, between.pop()))
        return 0x5000
    stand_in = types.SimpleNamespace(Tensor=_Tensor, float32=float32, float16=float16,
                                     _C=types.SimpleNamespace(_cuda_getCurrentRawStream=stream))
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    plan = fastcall.CallPlan(fn)
    plan.handles, plan.context = [0xF00], 0xC0
    library = _Driver(3, 3)
    plan.native = fastcall.native_plan(plan, library, encode=lambda *addresses: [
        addresses[2].to_bytes(8, "little") * 16] * 3)
    assert plan.native.call((a, b, c)) == 0
    between.append(moved)
    assert plan.native.call((a, b, c)) == 0  # the maps of c were kept, and the call between encodes moved's
    for (*_, pointers), values in zip(library.launched, library.values):
        assert values == [pointers[2].to_bytes(8, "little") * 16] * 3
    assert [launch[-1][2] for launch in library.launched] == [0x40000, 0x80000, 0x40000]


def test_a_function_launched_in_c_with_tensor_maps_is_freed_when_dropped(tmp_path, monkeypatch):
    """The launch in C holds the structs' encoder, which holds the function only weakly: the
    function, its plan and its launch make no cycle the collector cannot see (Plan is no GC type)."""
    import gc
    import weakref

    from schedc.package import native

    if native.fast_launch() is None:
        pytest.skip(f"the C part did not build: {native.reason()}")
    fn = schedc.load(build(*hopper_matmul.matmul(128, 256, 128, stages=2), "tma", tmp_path)).tma
    stand_in = types.SimpleNamespace(Tensor=_Tensor, float32=_Dtype("float32"), float16=_Dtype("float16"),
                                     _C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda ordinal: 0x5000))
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    fn._plan = fastcall.CallPlan(fn)
    fn._plan.handles, fn._plan.context = [0xF00], 0xC0
    fn._plan.native = fastcall.native_plan(fn._plan, _Driver(3, 3))
    assert fn._plan.native is not None
    held = weakref.ref(fn)
    del fn
    gc.collect()
    assert held() is None


def _arguments(float32, base=0x10000):
    return (_Tensor(float32, (64, 32), (32, 1), base), _Tensor(float32, (32, 48), (48, 1), base + 0x4000),
            _Tensor(float32, (64, 48), (48, 1), base + 0x8000))


def test_the_c_launch_passes_the_kernel_its_grid_and_the_tensors_addresses(native_plan):
    plan, library, float32 = native_plan
    args = _arguments(float32)
    assert plan.call(args, None)
    kernel = plan.kernels[0]
    assert library.launched == [(0xF00, kernel.grid, kernel.block, kernel.dynamic_shared_bytes, 0x5000,
                                 [0x10000, 0x14000, 0x18000])]


def test_the_c_launch_sets_the_functions_context_where_a_launch_fails_and_reports_a_second_failure(native_plan,
                                                                                                   monkeypatch):
    plan, library, float32 = native_plan
    library.results = [201]  # CUDA_ERROR_INVALID_CONTEXT, then success
    assert plan.call(_arguments(float32), None)
    assert library.contexts == [0xC0] and len(library.launched) == 2
    library.results = [201, 201]
    assert plan.native.call(_arguments(float32)) == 201
    failures = []
    monkeypatch.setattr(fastcall, "launch_failed", lambda result, stream: failures.append((result, stream)))
    library.results = [201, 201]
    plan.call(_arguments(float32), None)
    assert failures == [(201, 0x5000)]


def test_a_tensor_that_cannot_say_its_address_goes_the_general_way_but_an_interrupt_is_raised(native_plan):
    plan, library, float32 = native_plan
    a, b, c = _arguments(float32)
    assert plan.native.call((a, b, _Tensor(float32, c.shape, c._strides, 0x18000, fails=RuntimeError("meta")))) == -1
    with pytest.raises(KeyboardInterrupt):
        plan.native.call((a, b, _Tensor(float32, c.shape, c._strides, 0x18000, fails=KeyboardInterrupt())))
    assert library.launched == []


_SHAPES = {"A": (64, 32), "B": (32, 48), "C": (64, 48)}
_CHANGES = ("dtype", "wider", "fewer dimensions", "more dimensions", "cpu", "other device", "column-major",
            "padded rows", "misaligned", "null", "overlapping", "not a tensor")


@st.composite
def _calls(draw):
    """The function's arguments, most of them right, up to two of them changed: another dtype,
    shape, device or layout, an address misaligned, null or shared with another array, or not a
    tensor; or the call has another count."""
    changes = [(draw(st.integers(0, 2)), draw(st.sampled_from(_CHANGES))) for _ in range(draw(st.integers(0, 2)))]
    count = draw(st.sampled_from([3] * 8 + [2, 4]))
    return _with_changes(changes, count)


def _with_changes(changes: list, count: int = 3) -> tuple:
    """The function's arguments with ``changes`` [(argument, change)] made in turn, ``count`` of them."""
    float32 = _Dtype("float32")
    args = [_Tensor(float32, shape, _row_major(shape), 0x100000 * (n + 1)) for n, shape in enumerate(_SHAPES.values())]
    for n, change in changes:
        value, (rows, columns) = args[n], list(_SHAPES.values())[n]
        if not isinstance(value, _Tensor):
            continue
        if change == "dtype":
            value.dtype = _Dtype("float16")
        elif change in ("wider", "fewer dimensions", "more dimensions"):
            value.shape = {"wider": (rows, columns + 1), "fewer dimensions": (rows * columns,),
                           "more dimensions": (rows, columns, 1)}[change]
            value._strides = _row_major(value.shape)
        elif change in ("cpu", "other device"):
            value._device = -1 if change == "cpu" else 1
        elif change in ("column-major", "padded rows"):
            value._strides = (1, rows) if change == "column-major" else (columns + 8, 1)
        elif change in ("misaligned", "null"):
            value._pointer = value._pointer + 2 if change == "misaligned" else 0
        elif change == "overlapping":
            other = args[(n + 1) % 3]
            value._pointer = (other._pointer if isinstance(other, _Tensor) else 0x100000 * ((n + 1) % 3 + 1)) + 64
        else:
            args[n] = np.zeros(value.shape, np.float32)
    return (*args, None)[:count]


def _row_major(shape: tuple) -> tuple:
    return tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))


def _stand_in_dtypes(args, float32):
    """The drawn arguments with the fixture's float32 (dtype singletons are compared by identity)."""
    for value in args:
        if isinstance(value, _Tensor) and value.dtype.name == "float32":
            value.dtype = float32
    return args


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(_with_changes([(1, "not a tensor"), (0, "overlapping")]))
@given(_calls())
def test_the_c_checks_take_exactly_the_calls_the_python_checks_take(native_plan, args):
    plan, library, float32 = native_plan
    args = _stand_in_dtypes(args, float32)
    library.launched.clear()
    expected = plan.pointers(args)
    assert (plan.native.call(args) == 0) == (expected is not None)
    assert [launch[-1] for launch in library.launched] == ([expected] if expected is not None else [])


# -- on the GPU ----------------------------------------------------------------------------------


@pytest.fixture
def launches(monkeypatch):
    """The grids of the kernels the fast path launched (cuLaunchKernel and, for a dependent
    launch, cuLaunchKernelEx through ctypes)."""
    seen = []
    real = fastcall.libcuda

    class Counting:
        """The driver's library, its launches counted (opened at the first launch, on a GPU)."""

        def __init__(self) -> None:
            self.library = real()
            self.cuCtxSetCurrent = self.library.cuCtxSetCurrent
            self.cuLaunchKernel = self.counted(self.library.cuLaunchKernel)
            self.cuLaunchKernelEx = self.counted_ex(self.library.cuLaunchKernelEx)

        def __getitem__(self, name: str):
            return self.counted(self.library[name])

        @staticmethod
        def counted(launch):
            def counting(function, gx, gy, gz, *rest):
                seen.append(tuple(getattr(g, "value", g) for g in (gx, gy, gz)))
                return launch(function, gx, gy, gz, *rest)
            return counting

        @staticmethod
        def counted_ex(launch):
            def counting(config, *rest):
                seen.append(tuple(fastcall._LaunchConfig.from_address(config).grid))
                return launch(config, *rest)
            return counting

    def proxy():
        return Counting()
    monkeypatch.setattr(fastcall, "libcuda", proxy)
    return seen


def _torch():
    require_gpu()
    return pytest.importorskip("torch")


def _reference(torch, a, b, c):
    return c.double() + a.double() @ b.double()


@pytest.mark.gpu
def test_simt_functions_take_the_fast_path_and_compute_the_same(tmp_path, launches):
    fn = schedc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "fast_simt", tmp_path)).fast_simt
    torch = _torch()
    a, b, c = torch.rand(64, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(64, 48, device="cuda")
    expected = _reference(torch, a, b, c)
    fn(a, b, c)
    torch.cuda.synchronize()
    assert launches == [fn.kernel.grid]
    assert torch.allclose(c.double(), expected, rtol=1e-5)


@pytest.mark.gpu
def test_wrong_arguments_meet_the_general_paths_messages(tmp_path, launches):
    fn = schedc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "fast_checks", tmp_path)).fast_checks
    torch = _torch()
    a, b, c = torch.rand(64, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(64, 48, device="cuda")
    cases = [((a.double(), b, c), "argument A: dtype float64, expected float32"),
             ((a[:32], b, c), r"argument A: shape \(32, 32\), expected \(64, 32\)"),
             ((a.t().contiguous().t(), b, c), "argument A: element strides"),
             ((a, b.cpu(), c), "B is on cpu but A is on cuda:0"),
             ((a, b, c[:, :32]), r"argument C: shape"),
             ((a, b), "expected 3 arrays, got 2")]
    for args, message in cases:
        with pytest.raises(LaunchError, match=message):
            fn(*args)
    flat = torch.rand(64 * 48 + 64 * 32, device="cuda")
    with pytest.raises(LaunchError, match="overlap in memory"):
        fn(flat[:64 * 32].view(64, 32), b, flat[64 * 32 - 48:64 * 32 - 48 + 64 * 48].view(64, 48))
    assert launches == []


@pytest.mark.gpu
def test_split_k_functions_launch_every_kernel_with_their_workspace(tmp_path, launches):
    plan, args = simt_matmul(64, 64, 256, block=(16, 16), splits=2)
    fn = schedc.load(build(plan, args, "fast_split", tmp_path)).fast_split
    torch = _torch()
    a, b, c = torch.rand(64, 256, device="cuda"), torch.rand(256, 64, device="cuda"), torch.rand(64, 64, device="cuda")
    expected = _reference(torch, a, b, c)
    for _ in range(3):  # the workspace reused
        c2 = c.clone()
        fn(a, b, c2)
    torch.cuda.synchronize()
    grids = [k.grid for k in fn.function.kernels]
    assert len(fn.function.kernels) >= 2 and any(k.dependent_launch for k in fn.function.kernels)
    assert launches == grids * 3  # the dependent ones through cuLaunchKernelEx, its config made once
    assert torch.allclose(c2.double(), expected, rtol=1e-5)


@pytest.mark.gpu
def test_hopper_functions_rebuild_their_tensor_maps_for_new_tensors(tmp_path, launches):
    plan, args = hopper_matmul.matmul(128, 256, 128, block=(128, 256, 64), stages=2)
    fn = schedc.load(build(plan, args, "fast_hopper", tmp_path)).fast_hopper
    torch = _torch()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a")
    for _ in range(2):  # new tensors each time: new addresses, new tensor maps
        a = torch.rand(128, 128, device="cuda").half()
        b = torch.rand(128, 256, device="cuda").half()
        c = torch.rand(128, 256, device="cuda")
        expected = _reference(torch, a, b, c)
        fn(a, b, c)
        torch.cuda.synchronize()
        assert torch.allclose(c.double(), expected, rtol=1e-3, atol=1e-3)
    assert launches == [fn.kernel.grid] * 2


@pytest.mark.gpu
def test_hopper_functions_launch_in_c_with_their_tensor_maps_kept_per_address(tmp_path):
    from schedc.package import native

    plan, args = hopper_matmul.matmul(128, 256, 128, block=(128, 256, 64), stages=2)
    fn = schedc.load(build(plan, args, "c_hopper", tmp_path)).c_hopper
    torch = _torch()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a")
    for _ in range(3):  # new tensors each time, each called twice: the maps encoded anew, then kept
        a = torch.rand(128, 128, device="cuda").half()
        b = torch.rand(128, 256, device="cuda").half()
        c = torch.rand(128, 256, device="cuda")
        expected, original = _reference(torch, a, b, c), c.clone()
        fn(a, b, c)
        first = c.clone()
        c.copy_(original)
        fn(a, b, c)  # the same addresses: the maps kept
        torch.cuda.synchronize()
        assert torch.allclose(first.double(), expected, rtol=1e-3, atol=1e-3) and torch.equal(c, first)
    assert (fn._plan.native is not None) == (native.fast_launch() is not None), native.reason()


@pytest.mark.gpu
def test_a_thread_without_a_current_context_still_launches(tmp_path, launches):
    """A new thread has no current context until a CUDA call makes one: the launch sets the
    function's and tries again."""
    import threading

    fn = schedc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "fast_thread", tmp_path)).fast_thread
    torch = _torch()
    a, b, c = torch.rand(64, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(64, 48, device="cuda")
    expected = _reference(torch, a, b, c)
    failures = []

    def call():
        try:
            fn(a, b, c)
        except Exception as error:  # noqa: BLE001 - reported by the test
            failures.append(error)
    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    assert not failures and launches
    assert torch.allclose(c.double(), expected, rtol=1e-5)


@pytest.mark.gpu
def test_a_column_major_array_passes_in_its_layout_only(tmp_path, launches):
    from .plans import LAST

    fn = schedc.load(build(*simt_matmul(64, 48, 32, block=(16, 16), b_layout=LAST), "fast_cols", tmp_path)).fast_cols
    torch = _torch()
    a, c = torch.rand(64, 32, device="cuda"), torch.rand(64, 48, device="cuda")
    b = torch.rand(48, 32, device="cuda").t()  # 32 x 48, column-major
    expected = _reference(torch, a, b, c)
    fn(a, b, c)
    torch.cuda.synchronize()
    assert launches == [fn.kernel.grid] and torch.allclose(c.double(), expected, rtol=1e-5)
    with pytest.raises(LaunchError, match="argument B: element strides"):
        fn(a, b.contiguous(), c)


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 2], ids=["one kernel", "split-K with a workspace"])
def test_cuda_graphs_capture_and_replay_a_call(tmp_path, splits):
    """A call on device tensors neither synchronizes nor allocates outside torch's allocator, so
    torch.cuda.graph captures it; replays with new inputs match eager calls."""
    plan, args = simt_matmul(64, 64, 128, block=(16, 16), splits=splits)
    fn = schedc.load(build(plan, args, "graphed", tmp_path)).graphed
    torch = _torch()
    a, b, c = torch.rand(64, 128, device="cuda"), torch.rand(128, 64, device="cuda"), torch.zeros(64, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch asks
        fn(a, b, c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, c)
    for seed in range(3):
        torch.manual_seed(seed)
        a.copy_(torch.rand_like(a))
        b.copy_(torch.rand_like(b))
        c.zero_()
        graph.replay()
        replayed = c.clone()
        c.zero_()
        fn(a, b, c)
        torch.cuda.synchronize()
        assert torch.allclose(replayed, c, rtol=1e-5) and torch.allclose(c.double(), a.double() @ b.double(),
                                                                         rtol=1e-5)


@pytest.mark.gpu
def test_the_c_launch_serves_a_function_of_the_callers_arrays_and_leaves_wrong_calls_to_the_general_path(tmp_path):
    from schedc.package import native

    from .plans import vector_add

    fn = schedc.load(build(*vector_add(4096), "fast_native", tmp_path)).fast_native
    torch = _torch()
    a, b, c = torch.rand(4096, device="cuda"), torch.rand(4096, device="cuda"), torch.empty(4096, device="cuda")
    fn(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
    assert (fn._plan.native is not None) == (native.fast_launch() is not None), native.reason()
    with pytest.raises(LaunchError, match="argument a: dtype float64, expected float32"):
        fn(a.double(), b, c)
    with pytest.raises(LaunchError, match="overlap in memory"):
        fn(a, b, a)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the current stream, asked of torch at each call
        fn(b, b, c)
    side.synchronize()
    assert torch.equal(c, b + b)


@pytest.mark.gpu
def test_threads_calling_at_once_launch_their_own_tensors(tmp_path):
    """One parameter buffer per function: threads take turns filling it and launching."""
    import threading

    from .plans import vector_add

    fn = schedc.load(build(*vector_add(4096), "fast_threads", tmp_path)).fast_threads
    torch = _torch()
    work = [tuple(torch.rand(4096, device="cuda") for _ in range(2)) + (torch.empty(4096, device="cuda"),)
            for _ in range(8)]
    torch.cuda.synchronize()
    failures = []

    def call(a, b, c):
        try:
            for _ in range(200):
                fn(a, b, c)
        except Exception as error:  # noqa: BLE001 - reported by the test
            failures.append(error)
    threads = [threading.Thread(target=call, args=args) for args in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.synchronize()
    assert not failures
    assert all(torch.equal(c, a + b) for a, b, c in work)


@pytest.mark.gpu
def test_run_time_sizes_take_the_fast_path_with_their_grid(tmp_path, launches):
    M = schedc.create_dimensions()
    plan, args = hopper_matmul.matmul(M, 256, 128, block=(128, 256, 64), stages=2, persistent={"group": 8})
    fn = schedc.load(build(plan, (*args, M), "fast_sized", tmp_path)).fast_sized
    simt, simt_args = simt_matmul(M, 48, 32, block=(16, 16))
    rows = schedc.load(build(simt, (*simt_args, M), "fast_rows", tmp_path / "rows")).fast_rows
    torch = _torch()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a")
    grids = []
    for m in (1, 200, 300):  # new sizes: new grids, new tensor maps
        a, b = torch.rand(m, 128, device="cuda").half(), torch.rand(128, 256, device="cuda").half()
        c = torch.rand(m, 256, device="cuda")
        expected = _reference(torch, a, b, c)
        fn(a, b, c)
        x, y, z = torch.rand(m, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(m, 48, device="cuda")
        want = _reference(torch, x, y, z)
        rows(x, y, z)
        torch.cuda.synchronize()
        assert torch.allclose(c.double(), expected, rtol=1e-3, atol=1e-3)
        assert torch.allclose(z.double(), want, rtol=1e-5)
        grids += [(min(-(-m // 128), 132), 1, 1), (3, -(-m // 16), 1)]
    assert launches == grids  # every call launched by the fast path, at its own sizes
    with pytest.raises(LaunchError, match=r"A.shape\[0\] = 5 but C.shape\[0\] = 6: both are the run-time size M"):
        rows(torch.rand(5, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(6, 48, device="cuda"))
    assert len(launches) == len(grids)
