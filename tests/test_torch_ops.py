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
