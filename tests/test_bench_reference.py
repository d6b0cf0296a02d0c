"""The references ``schedc bench --compare`` times run on the values the function is timed on (at
a GPU's power cap the clock depends on the bits multiplied): each reference's input tensors hold
the bench's input sets bit for bit, in the arrays' layouts, and its launch computes their result."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import schedc as acc
from schedc.bench import Bench
from schedc.bench_reference import reference_launcher

from .conftest import require_gpu
from .plans import FIRST, LAST, build, rows_of_threads, tensor_matmul

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
from hopper_matmul import matmul  # noqa: E402

T = acc.ScalarType


def _bench(plan, args, name, tmp_path) -> Bench:
    fn = getattr(acc.load(build(plan, args, name, tmp_path)), name)
    require_gpu()
    pytest.importorskip("torch")
    return Bench(fn, seed=3)


def _host(tensor, dtype) -> np.ndarray:
    """A device tensor's logical values as ``dtype`` (float64 through float32 for 8-bit floats)."""
    return tensor.float().cpu().numpy().astype(dtype) if tensor.element_size() == 1 else \
        tensor.double().cpu().numpy().astype(dtype)


def _same_inputs(reference, bench, names) -> None:
    for i, arrays in enumerate(bench.inputs):
        for name in names:
            want = arrays[name].astype(np.float64)
            assert np.array_equal(_host(reference.tensors[i][name], np.float64), want), (reference.name, i, name)


@pytest.mark.gpu
@pytest.mark.parametrize("operand, result, b_layout, k, role", [
    (T.float16, T.float16, FIRST, 16, acc.Role.INPUT_OUTPUT), (T.bfloat16, T.float32, LAST, 16, acc.Role.INPUT_OUTPUT),
    (T.float32, T.float32, LAST, 8, acc.Role.INPUT_OUTPUT), (T.float16, T.float16, FIRST, 16, acc.Role.OUTPUT)])
def test_cublas_multiplies_the_bench_input_sets(tmp_path, operand, result, b_layout, k, role):
    mma = acc.MMAShape.M16xN16xK8_B1 if k == 8 else acc.MMAShape.M16xN16xK16_B1
    bench = _bench(*tensor_matmul(64, 96, 64, operand=operand, result=result, b_layout=b_layout, mma=mma,
                                  c_role=role, **({"prologue_op": acc.MMAFragmentOp.SET, "prologue_arg": 0.0}
                                                  if role is acc.Role.OUTPUT else {})), "mm", tmp_path)
    import torch

    A, B, C = (b.name for b in bench.model.buffers[:3])
    before = torch.backends.cuda.matmul.allow_tf32
    with reference_launcher("cublas", bench.model, bench.inputs) as reference:
        assert torch.backends.cuda.matmul.allow_tf32 is (operand is T.float32)  # tf32 exactly for tf32 plans
        _runs_on_the_sets(reference, bench, operand, result, (A, B, C))
    assert torch.backends.cuda.matmul.allow_tf32 is before  # put back: later float32 products stay exact


def _runs_on_the_sets(reference, bench, operand, result, names) -> None:
    import torch

    A, B, C = names
    assert len(bench.inputs) >= 2 and len(reference.tensors) == len(bench.inputs)  # small: sets rotate
    accumulates = "addmm" in reference.name  # into C (float32 C too, on a torch with out_dtype), or the product
    # an OUTPUT C is written, not read (torch.mm); a torch without addmm's out_dtype gives matmul alone
    assert accumulates is (bench.model.buffers[2].role == "input_output") or "matmul" in reference.name
    _same_inputs(reference, bench, (A, B, C) if accumulates else (A, B))
    for i, arrays in enumerate(bench.inputs):
        reference.launch(i)
        torch.cuda.synchronize()
        product = arrays[A].astype(np.float64) @ arrays[B].astype(np.float64)
        want = product + arrays[C] if accumulates else product
        got = _host(reference.tensors[i][C], np.float64)
        assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max(), (reference.name, i)


@pytest.mark.gpu
def test_scaled_mm_multiplies_the_bench_input_sets(tmp_path):
    plan, args = matmul(256, 256, 512, operand=T.float8_e4m3, output=T.bfloat16, block=(128, 128, 128), stages=2,
                        b_layout=acc.Array.Layout.LAST_MAJOR, persistent={"group": 2})
    bench = _bench(plan, args, "fp8mm", tmp_path)
    import torch

    A, B, C = (b.name for b in bench.model.buffers[:3])
    reference = reference_launcher("cublas", bench.model, bench.inputs)  # changes no setting: no close needed
    assert "_scaled_mm" in reference.name
    _same_inputs(reference, bench, (A, B))
    reference.launch(0)
    torch.cuda.synchronize()
    a, b = (bench.inputs[0][x].astype(ml_dtypes.float8_e4m3fn).astype(np.float64) for x in (A, B))
    want = a @ b
    got = _host(reference.tensors[0][C], np.float64)
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


@pytest.mark.gpu
def test_the_torch_reference_adds_the_bench_input_sets(tmp_path):
    """``C = A + B`` (row-major float16) through torch on the bench's values."""
    A_ = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(64, 64))
    B_ = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(64, 64))
    C_ = acc.Array(role=acc.Role.OUTPUT, element_type=T.float16, shape=(64, 64))
    nest = acc.Nest(64, 64)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C_[i, j] = A_[i, j] + B_[i, j]

    bench = _bench(rows_of_threads(nest), (A_, B_, C_), "vadd", tmp_path)
    import torch

    reference = reference_launcher("torch", bench.model, bench.inputs)
    A, B, C = (b.name for b in bench.model.buffers[:3])
    _same_inputs(reference, bench, (A, B))
    reference.launch(1)
    torch.cuda.synchronize()
    arrays = bench.inputs[1 % len(bench.inputs)]
    want = (arrays[A].astype(np.float32) + arrays[B].astype(np.float32)).astype(np.float16)
    assert np.array_equal(_host(reference.tensors[1 % len(bench.inputs)][C], np.float16), want)
