"""The float64 reference of sums whose written subscripts mix nest dimensions (a batch folded into
rows, ``C[b * M + i, j]``; a convolution, ``C[i + k]``) against numpy written out, with a tensorized
plan's prologue and epilogue ops; and the emulator of such a plan on mma.sync against it."""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc import data
from schedc.frontend.freeze import freeze
from schedc.package.build import name_arrays
from schedc.reference import _State, reference
from schedc.verify import emulate_function

from .plans import H100, T, compile_function_plan

OPS = acc.MMAFragmentOp
IN, OUT, IN_OUT = acc.Role.INPUT, acc.Role.OUTPUT, acc.Role.INPUT_OUTPUT


def batched_rows(batches: int, M: int, N: int, K: int, c_role=IN_OUT, **ops):
    """``C[b * M + i, j] += A[b * M + i, k] * B[b * K + k, j]`` (float16 A and B, float32 C): a
    batch of products folded into rows, on mma.sync in 32 x 32 blocks of 2 x 2 warps, the batch on
    BLOCK_Z, C's tile in a fragment across k; ``ops``: tensorize's prologue and epilogue ops."""
    A = acc.Array(role=IN, element_type=T.float16, shape=(batches * M, K), name="A")
    B = acc.Array(role=IN, element_type=T.float16, shape=(batches * K, N), name="B")
    C = acc.Array(role=c_role, element_type=T.float32, shape=(batches * M, N), name="C")
    nest = acc.Nest(shape=(batches, M, N, K))
    b, i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[b * M + i, j] += A[b * M + i, k] * B[b * K + k, j]

    s = nest.create_schedule()
    ii, jj = s.split(i, 32), s.split(j, 32)
    iii, jjj, kk = s.tile({ii: 16, jj: 16, k: 16})
    s.reorder(b, i, j, k, ii, jj, iii, jjj, kk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({b: g.BLOCK_Z, i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.WARP_Y, jj: g.WARP_X})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1,
                   instruction=acc.Instruction.MMA_SYNC, **ops)
    plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    return plan, (A, B, C)


def frozen(plan, args):
    """The plan's Model, as Package.add freezes it (no lowering: the reference reads the nest)."""
    name_arrays("f", plan, args)
    return freeze(plan, "f", args)


def batched_numpy(arrays, batches: int, start) -> np.ndarray:
    """``start(C) + A_b @ B_b`` for each batch ``b``, the batches stacked as rows."""
    A, B, C = (np.asarray(arrays[n], dtype=np.float64) for n in "ABC")
    rows, depth = A.shape[0] // batches, B.shape[0] // batches
    products = [A[b * rows:(b + 1) * rows] @ B[b * depth:(b + 1) * depth] for b in range(batches)]
    return start(C) + np.concatenate(products)


CASES = {  # name: (C's role, tensorize's ops, C after the products from C before and the products' sums)
    "set_output": (OUT, {"prologue_op": OPS.SET, "prologue_arg": 0.0}, lambda c, p: p),
    "set_input_output": (IN_OUT, {"prologue_op": OPS.SET, "prologue_arg": 0.5}, lambda c, p: 0.5 + p),
    "add_input_output": (IN_OUT, {}, lambda c, p: c + p),
    "scale_relu": (IN_OUT, {"prologue_op": OPS.SCALE, "prologue_arg": 2.0, "epilogue_op": OPS.ReLU},
                   lambda c, p: np.maximum(2.0 * c + p, 0.0)),
}


@pytest.fixture
def evaluations(monkeypatch) -> list:
    """The expressions the reference evaluates, in order: a sum evaluated as one contraction
    evaluates its term's few expressions once, not once per point of the nest (8 batches of 256^3
    took minutes that way)."""
    seen = []
    evaluate = _State.evaluate
    monkeypatch.setattr(_State, "evaluate", lambda self, e, dims: seen.append(e) or evaluate(self, e, dims))
    return seen


@pytest.mark.parametrize("name", sorted(CASES))
def test_batch_folded_into_rows_is_numpys_products_with_the_ops_in_one_contraction(name, evaluations):
    """The reference of ``C[b * M + i, j] += ...`` is numpy's per-batch products with the prologue
    applied to C before them and the epilogue after, once per element, in one contraction."""
    role, ops, expected = CASES[name]
    model = frozen(*batched_rows(3, 16, 32, 48, c_role=role, **ops))
    arrays = data.inputs(model.buffers, seed=5)
    values, touched = reference(model, arrays)
    c = np.asarray(arrays["C"], dtype=np.float64)
    want = expected(c, batched_numpy(arrays, 3, lambda x: 0.0))
    assert touched["C"].all()
    np.testing.assert_allclose(values["C"], want, rtol=1e-12, atol=1e-12)
    assert len(evaluations) <= 4, f"{len(evaluations)} evaluations"


def test_batch_folded_into_rows_restricted_to_one_block():
    """Restricted to one batch and some rows (as for one sampled block), the reference writes only
    those rows, with the prologue SET applied (OUTPUT C: no NaN from its poison)."""
    model = frozen(*batched_rows(3, 16, 32, 48, c_role=OUT, prologue_op=OPS.SET, prologue_arg=0.0))
    arrays = data.inputs(model.buffers, seed=6)
    dims = {"b": np.array([1]), "i": np.arange(4, 12)}
    values, touched = reference(model, {**arrays, "C": np.full((48, 32), np.nan)}, dims)
    want = batched_numpy(arrays, 3, lambda x: 0.0)
    rows = np.arange(16 + 4, 16 + 12)
    assert np.array_equal(np.flatnonzero(touched["C"].any(axis=1)), rows) and touched["C"][rows].all()
    np.testing.assert_allclose(values["C"][rows], want[rows], rtol=1e-12)
    assert np.isnan(values["C"][~touched["C"]]).all()


def convolution(n: int, m: int, dtype):
    """``C[i + k] += A[i] * B[k]``: each element of C summed over the points with one ``i + k``."""
    A = acc.Array(role=IN, element_type=dtype, shape=(n,), name="A")
    B = acc.Array(role=IN, element_type=dtype, shape=(m,), name="B")
    C = acc.Array(role=IN_OUT, element_type=dtype, shape=(n + m - 1,), name="C")
    nest = acc.Nest(shape=(n, m))
    i, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i + k] += A[i] * B[k]

    return nest.create_schedule().create_plan(H100), (A, B, C)


@pytest.mark.parametrize("dtype", [T.float32, T.int32])
def test_sum_into_overlapping_elements_is_numpys_convolution_in_one_contraction(dtype, evaluations):
    """Points that write one element add their terms, then the element is finished once."""
    model = frozen(*convolution(40, 9, dtype))
    arrays = data.inputs(model.buffers, seed=7)
    values, touched = reference(model, arrays)
    A, B, C = (np.asarray(arrays[n], dtype=np.float64 if dtype.is_float else np.int64) for n in "ABC")
    assert touched["C"].all()
    if dtype.is_float:
        np.testing.assert_allclose(values["C"], C + np.convolve(A, B), rtol=1e-12)
    else:  # int32 wraps as the kernel's sums do
        assert np.array_equal(values["C"], (C + np.convolve(A, B)).astype(np.int32).astype(np.int64))
    assert len(evaluations) <= 4, f"{len(evaluations)} evaluations"


@pytest.mark.parametrize("role", [OUT, IN_OUT])
def test_emulated_batched_mma_sync_with_set_matches_the_reference(role):
    """The issue's plan: on mma.sync with prologue SET, every block of the batch folded into rows
    compares equal with the reference (it was NaN for OUTPUT C, 0.28 off for INPUT_OUTPUT)."""
    model, function = compile_function_plan(*batched_rows(2, 32, 32, 32, c_role=role, prologue_op=OPS.SET,
                                                          prologue_arg=0.0))
    reports = emulate_function(model, function, blocks=None, seed=9)
    assert reports and all(r.passed and r.undefined == 0 for r in reports), "\n".join(map(str, reports))
    sampled = emulate_function(model, function, blocks=[(0, 0, 1)], seed=9)
    assert all(r.passed and r.compared == 32 * 32 for r in sampled), "\n".join(map(str, sampled))
