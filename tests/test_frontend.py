"""Front-end API: every primitive rejects bad input with its own class and message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc import NestError, PlanError, ScheduleError, TargetError

from .plans import H100, matmul_arrays

T = acc.ScalarType


def matmul_schedule(M=64, N=64, K=64):
    nest, args = matmul_arrays(M, N, K)
    return nest, nest.create_schedule(), args


# -- arrays ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(role="input", shape=(2,)), "role must be a Role"),
        (dict(role=acc.Role.INPUT), "shape is required"),
        (dict(role=acc.Role.INPUT, shape=(2, 0)), "positive integers"),
        (dict(role=acc.Role.INPUT, shape=(2.0, 3)), "positive integers"),
        (dict(role=acc.Role.INPUT, shape=(2,), element_type="float32"), "must be a ScalarType"),
        (dict(role=acc.Role.INPUT, shape=(2,), data=np.ones(2)), "data is only for Role.CONST"),
        (dict(role=acc.Role.CONST), "needs data"),
        (dict(role=acc.Role.CONST, data=np.ones((2, 2)), shape=(2, 3)), r"differs from the data's \(2, 2\)"),
        (dict(role=acc.Role.INPUT, shape=(4, 4), layout=(1, 2)), "overlap"),
        (dict(role=acc.Role.INPUT, shape=(4, 4), layout=(1,)), "must be 2 positive integers"),
        (dict(role=acc.Role.INPUT, shape=(4,), name="a-b"), "C identifier"),
    ],
)
def test_array_rejects(kwargs, message):
    with pytest.raises(NestError, match=message):
        acc.Array(**kwargs)


def test_array_layouts_and_const_data():
    A = acc.Array(role=acc.Role.INPUT, shape=(3, 5), layout=acc.Array.Layout.LAST_MAJOR)
    assert A.strides == (1, 3) and A.size == 15
    B = acc.Array(role=acc.Role.INPUT, shape=(3, 5), layout=(8, 1))
    assert B.size == 21
    K = acc.Array(role=acc.Role.CONST, data=np.arange(6, dtype=np.int16).reshape(2, 3))
    assert K.element_type is T.int16 and K.shape == (2, 3)


# -- nests and iteration logic ---------------------------------------------------------------


def test_nest_shape_errors():
    with pytest.raises(NestError, match="non-empty tuple of positive integers"):
        acc.Nest(shape=())
    with pytest.raises(NestError, match="non-empty tuple of positive integers"):
        acc.Nest(shape=(4, -1))
    assert acc.Nest(3, 4).shape == (3, 4)


@pytest.mark.parametrize(
    "statement, error, message",
    [
        (lambda A, B, i, j: B.__setitem__((i,), A[i, j]), NestError, "1 subscripts for an array of rank 2"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i * j, j]), NestError, "index times index"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i + 1, j]), NestError, r"iteration \(i=7, j=0\) reads A\[8, 0\] outside its shape \(8, 8\)"),
        (lambda A, B, i, j: B.__setitem__((7 - i - j, j), A[i, j]), NestError, r"iteration \(i=7, j=7\) writes B\[-7, 7\] outside"),
        (lambda A, B, i, j: A.__setitem__((i, j), B[i, j]), NestError, "Role.INPUT and cannot be written"),
        (lambda A, B, i, j: B.__setitem__((i, j), acc.cast(A[i, j], T.float16) + 1.0), NestError, None),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i, j] if A[i, j] else 0), NestError, "no truth value"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i, "j"]), NestError, "cannot use a str"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i // 2, j]), NestError,
         r"i // 2: '//' is not built in schedc's iteration logic: '/' of integers divides as C does"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i % 4, j]), NestError,
         r"i % 4: '%' is not built .* a - b \* \(a / b\)"),
        (lambda A, B, i, j: B.__setitem__((i, j), 9 % A[i, j]), NestError, r"9 % A\[i, j\]: '%' is not built"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i, j] << 1), NestError, "'<<' is not built .* bitwise"),
        (lambda A, B, i, j: B.__setitem__((i, j), 1 >> A[i, j]), NestError, "'>>' is not built"),
        (lambda A, B, i, j: B.__setitem__((i, j), A[i, j] ^ A[j, i]), NestError, "'\\^' is not built"),
    ],
)
def test_iteration_logic_rejects(statement, error, message):
    A = acc.Array(role=acc.Role.INPUT, shape=(8, 8))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, 8), element_type=T.float64)
    nest = acc.Nest(8, 8)
    i, j = nest.get_indices()
    if message is None:  # float16 widens implicitly to float64: accepted
        nest.iteration_logic(lambda: statement(A, B, i, j))
        return
    with pytest.raises(error, match=message):
        nest.iteration_logic(lambda: statement(A, B, i, j))


def test_narrowing_assignment_needs_cast():
    A = acc.Array(role=acc.Role.INPUT, shape=(4,))
    B = acc.Array(role=acc.Role.OUTPUT, shape=(4,), element_type=T.float16)
    nest = acc.Nest(4)
    (i,) = nest.get_indices()
    with pytest.raises(NestError, match="float32 value does not convert implicitly to float16; use cast"):
        nest.iteration_logic(lambda: B.__setitem__(i, A[i]))
    nest.iteration_logic(lambda: B.__setitem__(i, acc.cast(A[i], T.float16)))


def test_statement_outside_logic_and_foreign_index():
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,))
    nest, other = acc.Nest(4), acc.Nest(4)
    with pytest.raises(NestError, match="only be assigned inside @nest.iteration_logic"):
        A[nest.get_indices()[0]] = 1.0
    (k,) = other.get_indices()
    with pytest.raises(NestError, match=r"\[k\] = 1.0: index k does not belong to this nest \(it is another nest's\)"):
        nest.iteration_logic(lambda: A.__setitem__(k, 1.0))  # named as the script names it (its nest said i)
    with pytest.raises(NestError, match="assigned no array element"):
        nest.iteration_logic(lambda: None)
    with pytest.raises(NestError, match="no iteration logic yet"):
        acc.Nest(3).create_schedule()


# -- schedules -------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0, -4, 2.5, True, "8"])
def test_split_factor_must_be_positive_integer(factor):
    nest, s, _ = matmul_schedule()
    i = nest.get_indices()[0]
    with pytest.raises(ScheduleError, match=rf"^split\(i, {factor!r}\): factor must be a positive integer$"):
        s.split(i, factor)


def test_split_factor_limits():
    nest, s, _ = matmul_schedule(M=64)
    i = nest.get_indices()[0]
    ii = s.split(i, 16)
    assert s.split(i, 64) is not None  # the outer index steps by 16: 64 is a multiple
    with pytest.raises(ScheduleError, match="factor must be a multiple of i's step 64"):
        s.split(i, 48)
    assert ii.name == "ii"


def test_split_of_foreign_or_stale_index():
    nest, s, _ = matmul_schedule()
    other_nest, other, _ = matmul_schedule()
    with pytest.raises(ScheduleError, match="index i belongs to another nest"):
        s.split(other_nest.get_indices()[0], 4)
    s2 = nest.create_schedule()
    ii = s2.split(nest.get_indices()[0], 4)
    with pytest.raises(ScheduleError, match="not an index of this schedule"):
        s.split(ii, 2)
    with pytest.raises(ScheduleError, match="is not an index"):
        s.split("i", 2)


def test_reorder_rules():
    nest, s, _ = matmul_schedule()
    i, j, k = nest.get_indices()
    ii = s.split(i, 16)
    with pytest.raises(ScheduleError, match="not a permutation of the schedule's indices: ii missing"):
        s.reorder(i, j, k)
    with pytest.raises(ScheduleError, match="i appears more than once"):
        s.reorder(i, i, j, k, ii)
    with pytest.raises(ScheduleError, match="ii was split from i and must come after it"):
        s.reorder(ii, i, j, k)
    s.reorder((k, i, j, ii))
    assert [x.name for x in s.get_indices()] == ["k", "i", "j", "ii"]


def test_tile_orders_outer_before_inner():
    nest, s, _ = matmul_schedule()
    i, j, k = nest.get_indices()
    ii, jj = s.tile({i: 16, j: 8})
    assert [x.name for x in s.get_indices()] == ["i", "j", "ii", "jj", "k"]
    with pytest.raises(ScheduleError, match="non-empty dict"):
        s.tile({})


def test_schedule_is_closed_after_create_plan():
    nest, s, _ = matmul_schedule()
    s.create_plan(H100)
    with pytest.raises(ScheduleError, match="already has a plan"):
        s.split(nest.get_indices()[0], 8)


# -- plans -----------------------------------------------------------------------------------


def planned():
    nest, s, args = matmul_schedule()
    i, j, k = nest.get_indices()
    ii, jj = s.split(i, 16), s.split(j, 16)
    s.reorder(i, j, ii, jj, k)
    return s.create_plan(H100), (i, j, k, ii, jj)


def test_bind_errors():
    g = H100.GridUnit
    plan, (i, j, k, ii, jj) = planned()
    with pytest.raises(PlanError, match="is not a GridUnit"):
        plan.bind({i: "BLOCK_X"})
    with pytest.raises(PlanError, match=r"BLOCK_X is bound twice \(to i and to j\)"):
        plan.bind({i: g.BLOCK_X, j: g.BLOCK_X})
    plan.bind({i: g.BLOCK_Y})
    with pytest.raises(PlanError, match="i is already bound to BLOCK_Y"):
        plan.bind({i: g.BLOCK_X})
    plan.bind({ii: g.THREAD_Y})
    with pytest.raises(PlanError, match="THREAD_\\* and WARP_\\* bindings cannot be mixed"):
        plan.bind({jj: g.WARP_X})
    with pytest.raises(PlanError, match="empty tuple"):
        plan.bind({(): g.BLOCK_Z})
    with pytest.raises(PlanError, match=r"^bind\(\(k, jj\), grid=\(BLOCK_Z,\)\): bind\(indices, grid=units\) takes "
                                        "two tuples of the same length"):
        plan.bind((k, jj), grid=(g.BLOCK_Z,))


def test_tensorize_argument_errors():
    plan, (i, j, k, ii, jj) = planned()
    shape = acc.MMAShape.M16xN16xK16_B1
    with pytest.raises(PlanError, match="tuple of three indices"):
        plan.tensorize(indices=(ii, jj), mma_shape=shape)
    with pytest.raises(PlanError, match="must be distinct"):
        plan.tensorize(indices=(ii, ii, k), mma_shape=shape)
    with pytest.raises(PlanError, match="must be an MMAShape"):
        plan.tensorize(indices=(ii, jj, k), mma_shape="M16xN16xK16_B1")
    with pytest.raises(PlanError, match="num_total_passes must be a positive integer, not 0"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, num_total_passes=0)
    with pytest.raises(PlanError, match="num_fused_passes 3 must divide num_total_passes 4"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, num_total_passes=4, num_fused_passes=3)
    with pytest.raises(PlanError, match="epilogue_op SET would discard the product"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, epilogue_op=acc.MMAFragmentOp.SET)
    with pytest.raises(PlanError, match="prologue_arg must be a number"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, prologue_op=acc.MMAFragmentOp.SCALE,
                       prologue_arg="2")
    with pytest.raises(PlanError, match="use_static_offsets is an AMD optimization"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, use_static_offsets=True)
    with pytest.raises(PlanError, match="scheduling_policy must be an MMASchedulingPolicy"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape, scheduling_policy="BLOCK_ORDER")
    plan.tensorize(indices=(ii, jj, k), mma_shape=shape)
    with pytest.raises(PlanError, match="already tensorized"):
        plan.tensorize(indices=(ii, jj, k), mma_shape=shape)


def test_unroll_errors():
    plan, (i, j, k, ii, jj) = planned()
    plan.unroll(k)
    with pytest.raises(PlanError, match="k is already unrolled"):
        plan.unroll(k)
    other, _ = planned()
    with pytest.raises(PlanError, match="belongs to another nest"):
        other.unroll(k)


def test_targets(v100):
    with pytest.raises(TargetError, match="unknown GPU model; known: NVIDIA_V100"):
        acc.Target("NVIDIA Z9")
    assert acc.Target("NVIDIA H200").arch == "sm_90"
    a100 = acc.Target(acc.Target.Model.NVIDIA_A100)
    assert (v100.has_async_copy, a100.has_async_copy, H100.has_async_copy) == (False, True, True)
    assert (a100.has_wgmma, H100.has_wgmma) == (False, True)
    assert acc.Target("nvidia_a100").shared_memory_max == 166912
    info = H100.tensor_core_info
    with pytest.raises(TargetError, match="num_total_passes must be a positive integer"):
        info.compute_tensor_splits(acc.MMAShape.M16xN16xK16_B1, 0)
    assert info.compute_tensor_splits(acc.MMAShape.M32xN8xK16_B1) == (32, 8, 16)
    with pytest.raises(TargetError, match="NVIDIA V100 tensor cores have no M16xN16xK8_B1"):
        v100.tensor_core_info.compute_tensor_splits(acc.MMAShape.M16xN16xK8_B1)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(-2, 2), st.integers(-2, 2), st.integers(-3, 3),
       st.integers(1, 12))
def test_bounds_verdict_matches_enumeration(M, N, a, b, c, size):
    """A[a*i + b*j + c] is accepted exactly when every iteration stays inside A."""
    A = acc.Array(role=acc.Role.INPUT, shape=(size,))
    B = acc.Array(role=acc.Role.OUTPUT, shape=(M, N))
    nest = acc.Nest(M, N)
    i, j = nest.get_indices()
    inside = all(0 <= a * x + b * y + c < size for x in range(M) for y in range(N))
    if inside:
        nest.iteration_logic(lambda: B.__setitem__((i, j), A[a * i + b * j + c]))
    else:
        with pytest.raises(NestError, match="outside its shape"):
            nest.iteration_logic(lambda: B.__setitem__((i, j), A[a * i + b * j + c]))


def test_an_arrays_errors_name_its_role_as_the_script_writes_it():
    with pytest.raises(NestError, match=r"^Array\(role=Role.INPUT\): element_type must be a ScalarType, not "
                                        r"'float32'"):
        acc.Array(role=acc.Role.INPUT, element_type="float32", shape=(2,))


def test_a_subscript_that_reads_an_array_is_refused_as_a_gather():
    idx = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.int32, shape=(64,), name="idx")
    E = acc.Array(role=acc.Role.INPUT, shape=(1000, 32), name="E")
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(64, 32), name="Y")
    nest = acc.Nest(64, 32)
    i, j = nest.get_indices()
    with pytest.raises(NestError, match=r"E\[idx\[i\], j\]: the subscript idx\[i\] reads an array: .*a gather, a "
                                        r"scatter, an embedding lookup\) are not built yet"):
        nest.iteration_logic(lambda: Y.__setitem__((i, j), E[idx[i], j]))
    with pytest.raises(NestError, match=r"Y\[idx\[i\], j\]: the subscript idx\[i\] reads an array"):
        nest.iteration_logic(lambda: Y.__setitem__((idx[i], j), E[i, j]))
