"""Loaded functions as PyTorch operators (``schedc.torch.custom_op``): the schema from the
function's parameters (CPU), and on the GPU the operator eagerly, inside
``torch.compile(fullgraph=True)`` and in a replayed CUDA graph, against the function's own call."""

from __future__ import annotations

import itertools

import pytest

import schedc as acc
from schedc import torch as schedc_torch

from .conftest import require_gpu
from .plans import build, simt_matmul, vector_add

N = 4096
_names = itertools.count()


def _vadd(directory):
    """c = a + tanh(b) over N floats, loaded."""
    return acc.load(build(*vector_add(N, acc.tanh), "vadd", directory)).vadd


def test_custom_op_without_pytorch_says_so(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
        return real(name, *args, **kwargs)

    vadd = _vadd(tmp_path / "vadd")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(acc.PackageError, match=r"custom_op\(vadd, 'my::vadd'\): needs PyTorch, which is not "
                                               r"installed \(pip install torch\)"):
        schedc_torch.custom_op(vadd, "my::vadd")


def test_schemas_are_functional_for_outputs_and_mutating_for_input_outputs(tmp_path):
    vadd = _vadd(tmp_path / "vadd")
    matmul = acc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "mm", tmp_path / "mm")).mm
    assert schedc_torch.schema(vadd, "vadd") == "vadd(Tensor a, Tensor b) -> Tensor"
    assert schedc_torch.schema(matmul, "mm") == "mm(Tensor A, Tensor B, Tensor(a!) C) -> ()"


def test_an_operator_name_needs_a_namespace(tmp_path):
    pytest.importorskip("torch")
    with pytest.raises(acc.PackageError, match="the name must be 'namespace::op'"):
        schedc_torch.custom_op(_vadd(tmp_path), "vadd")


@pytest.mark.gpu
def test_a_functional_operator_eagerly_compiled_and_in_a_cuda_graph(tmp_path):
    vadd = _vadd(tmp_path)
    require_gpu()
    torch = pytest.importorskip("torch")
    op = schedc_torch.custom_op(vadd, f"schedc_test::vadd{next(_names)}")
    a, b = torch.rand(N, device="cuda"), torch.rand(N, device="cuda")
    expected = a + torch.tanh(b)
    assert torch.allclose(op(a, b), expected, rtol=1e-6)

    def model(x, y):
        return op(x, y) * 2.0

    compiled = torch.compile(model, fullgraph=True)
    assert torch.allclose(compiled(a, b), 2.0 * expected, rtol=1e-6)
    static_a, static_b = a.clone(), b.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(static_a, static_b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(static_a, static_b)
    static_a.copy_(b)
    static_b.copy_(a)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, b + torch.tanh(a), rtol=1e-6)


@pytest.mark.gpu
def test_a_mutating_operator_inside_torch_compile(tmp_path):
    matmul = acc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "mm", tmp_path)).mm
    require_gpu()
    torch = pytest.importorskip("torch")
    op = schedc_torch.custom_op(matmul, f"schedc_test::mm{next(_names)}")
    a, b, c = torch.rand(64, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.rand(64, 48, device="cuda")
    expected = c + a @ b

    def model(x, y, z):
        op(x, y, z)
        return z + 1.0

    result = torch.compile(model, fullgraph=True)(a, b, c)
    torch.cuda.synchronize()
    assert torch.allclose(c, expected, rtol=1e-5) and torch.allclose(result, expected + 1.0, rtol=1e-5)


def test_kernel_of_names_only_registered_operators():
    with pytest.raises(acc.PackageError, match="custom_op registered no operator of this name"):
        schedc_torch.kernel_of("schedc_test::never_registered")


def test_a_function_of_two_kernels_keeps_its_operators_kernel_in_python(tmp_path):
    pytest.importorskip("torch")
    from .kit import hopper_matmul

    plan = hopper_matmul.matmul(128, 256, 256, stages=2, output=acc.ScalarType.float16, splits=2)
    fn = acc.load(build(*plan, "split", tmp_path)).split
    name = f"schedc_test::split{next(_names)}"
    schedc_torch.custom_op(fn, name)
    assert schedc_torch.kernel_of(name) == "Python: the function is not one kernel whose parameters are the " \
        "caller's arrays (and their tensor maps)"
    python = f"schedc_test::vadd{next(_names)}"
    schedc_torch.custom_op(_vadd(tmp_path / "vadd"), python, native=False)
    assert schedc_torch.kernel_of(python) == "Python: custom_op(native=False)"


@pytest.mark.gpu
def test_the_cpp_kernel_of_a_hopper_function_encodes_its_tensor_maps_for_each_address(tmp_path):
    """A wgmma function whose kernel takes TMA tensor maps: the C++ kernel's results match the
    function's own call, on the same tensors again (the maps kept) and on others (encoded anew)."""
    from .kit import hopper_matmul

    fn = acc.load(build(*hopper_matmul.matmul(256, 512, 256, stages=2, output=acc.ScalarType.float16,
                                              persistent={"group": 2}), "hm", tmp_path)).hm
    require_gpu()
    torch = pytest.importorskip("torch")
    name = f"schedc_test::hm{next(_names)}"
    op = schedc_torch.custom_op(fn, name)
    assert schedc_torch.kernel_of(name) == "C++"
    for _ in range(3):
        a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
        c = torch.randn(256, 512, device="cuda", dtype=torch.float16)
        direct, through = c.clone(), c.clone()
        fn(a, b, direct)
        for _ in range(2):
            op(a, b, through)
            torch.cuda.synchronize()
            assert torch.equal(through, direct)
            through.copy_(c)


def _outcome(call):
    """What a call gives: ("result", tensors) or ("error", its type and message)."""
    try:
        return "result", call()
    except Exception as error:  # noqa: BLE001 -- the outcome compared is the error itself
        return "error", (type(error).__name__, str(error))


@pytest.mark.gpu
def test_the_cpp_kernel_takes_the_call_and_hands_wrong_calls_to_the_functions_own(tmp_path):
    """The operator's kernel is C++ (torchop.cpp) and, for calls its checks refuse, does what the
    operator does with its kernel in Python: the same result, or the same error and message."""
    vadd = _vadd(tmp_path)
    require_gpu()
    torch = pytest.importorskip("torch")
    name, python = f"schedc_test::vadd{next(_names)}", f"schedc_test::vadd{next(_names)}"
    op, python_op = schedc_torch.custom_op(vadd, name), schedc_torch.custom_op(vadd, python, native=False)
    assert schedc_torch.kernel_of(name) == "C++"
    a, b = torch.rand(N, device="cuda"), torch.rand(N, device="cuda")
    assert torch.allclose(op(a, b), a + torch.tanh(b), rtol=1e-6)
    wide = torch.rand(2 * N, device="cuda")
    calls = {"short": (a[:-1], b), "float64": (a.double(), b), "on the CPU": (a.cpu(), b),
             "strided": (wide[::2], b), "misaligned": (wide[1:N + 1], b)}
    for what, args in calls.items():
        expected, through = _outcome(lambda args=args: python_op(*args)), _outcome(lambda args=args: op(*args))
        assert expected[0] == through[0], (what, expected, through)
        if expected[0] == "error":
            assert through[1] == expected[1], what
        else:
            assert through[1].device == expected[1].device and torch.equal(through[1], expected[1]), what


@pytest.mark.gpu
def test_the_cpp_kernel_of_a_mutating_operator_from_threads(tmp_path):
    """Calls from several threads at once (the dispatcher holds no GIL): each its own parameters."""
    import concurrent.futures

    matmul = acc.load(build(*simt_matmul(64, 48, 32, block=(16, 16)), "mm", tmp_path)).mm
    require_gpu()
    torch = pytest.importorskip("torch")
    name = f"schedc_test::mm{next(_names)}"
    op = schedc_torch.custom_op(matmul, name)
    assert schedc_torch.kernel_of(name) == "C++"
    sets = [(torch.rand(64, 32, device="cuda"), torch.rand(32, 48, device="cuda"), torch.zeros(64, 48, device="cuda"))
            for _ in range(16)]

    def run(n):
        for _ in range(20):
            op(*sets[n])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(run, range(16)))
    torch.cuda.synchronize()
    for a, b, c in sets:
        assert torch.allclose(c, 20 * (a @ b), rtol=1e-4)
