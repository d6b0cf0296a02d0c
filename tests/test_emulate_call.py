"""``fn.emulate(*arrays)``: a loaded function run on the CPU on the caller's own arrays, as a call
on the GPU runs it, the written arrays updated in place."""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc.errors import LaunchError

from .plans import H100, T, build, simt_matmul, tensor_matmul, vector_add

G = acc.GridUnit


def _loaded(plan, args, name, tmp_path):
    build(plan, args, name, tmp_path)
    return acc.load(tmp_path / f"{name}.hat").functions[name]


def test_emulate_writes_the_nests_result_into_the_callers_arrays(tmp_path):
    fn = _loaded(*vector_add(300, b_function=acc.exp), "vadd", tmp_path)
    a, b = np.linspace(-1, 1, 300, dtype=np.float32), np.linspace(0, 2, 300, dtype=np.float32)
    c = np.full(300, np.nan, dtype=np.float32)
    fn.emulate(a, b, c)
    np.testing.assert_allclose(c, a + np.exp(b), rtol=1e-6)


def test_emulate_runs_a_tensor_core_plan_and_keeps_the_inputs(tmp_path):
    fn = _loaded(*tensor_matmul(64, 32, 48), "mm", tmp_path)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 48)).astype(np.float16)
    b = rng.standard_normal((48, 32)).astype(np.float16)
    c0 = rng.standard_normal((64, 32)).astype(np.float32)
    a_before, c = a.copy(), c0.copy()
    fn.emulate(a, b, c)
    np.testing.assert_allclose(c, c0 + a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(a, a_before)  # an input is never written back


def test_emulate_runs_every_kernel_of_a_split_k(tmp_path):
    fn = _loaded(*simt_matmul(48, 64, 96, block=(16, 16), splits=3), "split", tmp_path)
    assert len(fn.function.kernels) > 1
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((48, 96)).astype(np.float32), rng.standard_normal((96, 64)).astype(np.float32)
    c0 = rng.standard_normal((48, 64)).astype(np.float32)
    c = c0.copy()
    fn.emulate(a, b, c)
    np.testing.assert_allclose(c, c0 + a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_emulate_reads_run_time_sizes_from_the_shapes(tmp_path):
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M, 64))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 64))
    nest = acc.Nest(M, 64)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] += 2.0 * A[i, j]

    s = nest.create_schedule()
    ii, jj = s.tile({i: 4, j: 32})
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X, ii: G.THREAD_Y, jj: G.THREAD_X})
    fn = _loaded(plan, (A, B, M), "scale", tmp_path)
    for rows in (1, 7):
        a, b = np.arange(rows * 64, dtype=np.float32).reshape(rows, 64), np.ones((rows, 64), np.float32)
        fn.emulate(a, b)
        np.testing.assert_array_equal(b, 1 + 2 * a)


def test_emulate_checks_the_arguments_as_a_call_does(tmp_path):
    fn = _loaded(*vector_add(300), "vadd", tmp_path)
    a = np.zeros(300, np.float32)
    with pytest.raises(LaunchError, match=r"vadd\(a, b, c\): expected 3 arrays"):
        fn.emulate(a, a)
    with pytest.raises(LaunchError, match="c: .*float64.*float32|c: .*float32.*float64"):
        fn.emulate(a, a, np.zeros(300))
    with pytest.raises(LaunchError, match="shape"):
        fn.emulate(a, a, np.zeros(299, np.float32))
    assert T.float32  # the arrays above are float32, as the nest's
