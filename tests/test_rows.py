"""Row vectors of an accumulator (``lower/rows.py``): where a thread's rows lie in each family's
lane layout, the lane reduction that combines a row's partials (its verifier rule, its emulator,
its CUDA), and what each refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_kernel
from schedc.codegen.emulate import EmulationError, emulate
from schedc.errors import PlanError, ScheduleError
from schedc.instructions import MMA_SYNC, wgmma_accumulator
from schedc.ir.kernel import (
    Binary,
    Buffer,
    Cast,
    Const,
    If,
    Kernel,
    LaneReduce,
    Load,
    PrivateArray,
    Store,
    Var,
)
from schedc.ir.types import ScalarType
from schedc.lower import wellformed
from schedc.lower.rows import WAYS, row_layout
from schedc.verify import emulate_function

from .plans import build, compile_function_plan

F32, F16 = ScalarType.float32, ScalarType.float16
TX = Var("threadIdx.x")
OUT = Buffer("out", F32, (64, 2), (2, 1), "param", "output")


@given(st.sampled_from([8, 16, 32, 64, 96, 128, 200, 256]))
def test_a_wgmma_thread_holds_rows_r_and_r_plus_8_shared_by_four_lanes(n):
    """Any width of a warpgroup's 64 x n accumulator: lane 0's rows 0 and 8, each a slot of the
    thread array, the other holders of a row lanes 1 and 2 apart (a quad)."""
    rows = row_layout(wgmma_accumulator(n), 128)
    assert rows.slots == (0, 8) and rows.distances == (1, 2) and rows.size == 9


@given(st.sampled_from([16, 32, 64, 128, 256]))
def test_a_rows_partial_is_kept_in_several_registers(n):
    """A thread's elements of a row in up to ``WAYS`` partials (their subscripts modulo 8): each row
    of a 64 x n tile in four, every element of the row in one of them, the reduction's dependent
    chains n / 16 long (not n / 4, a thread's elements of the row)."""
    layout = wgmma_accumulator(n)
    rows = row_layout(layout, 128)
    for slot, ways in ((0, (0, 1, 4, 5)), (8, (2, 3, 6, 7))):
        assert rows.ways(slot) == ways
        elements = [e for e in range(layout.elements) if int(layout.row(0, e)) == slot]
        assert {e % WAYS for e in elements} == set(ways) and len(elements) // len(ways) == n // 16


def test_mma_sync_accumulators_have_the_same_rows():
    rows = row_layout(MMA_SYNC.tile_layout("accumulator", (32, 16, 16), "fp16", F32), 32)
    assert rows.slots == (0, 8, 16, 24) and rows.distances == (1, 2)


def _kernel(*body, threads=64) -> Kernel:
    return Kernel("k", (OUT,), (1, 1, 1), (threads, 1, 1), tuple(body))


def _sums(op="+", distances=(1, 2), guard=None):
    """Each thread's partial at slots 0 and 1 is its lane and 100 + its lane; a LaneReduce; each
    stores its two totals."""
    lane = Binary("%", TX, Const(32))
    body = [PrivateArray("p", F32, (2,)),
            Store("p", (Const(0),), Binary("*", Const(1.0, F32), _as_f32(lane), F32)),
            Store("p", (Const(1),), Binary("+", Const(100.0, F32), _as_f32(lane), F32))]
    reduce = LaneReduce("p", op, F32, (0, 1), distances)
    body.append(If(guard, (reduce,)) if guard is not None else reduce)
    body += [Store("out", (TX, Const(s)), Load("p", (Const(s),), F32)) for s in (0, 1)]
    return _kernel(*body)


def _as_f32(e):
    return Cast(e, F32)


def test_the_lanes_of_a_row_each_get_the_rows_total():
    result = emulate(_sums(), {"out": np.zeros(128, np.float32)})
    out = result.storage["out"].reshape(64, 2)
    lane = np.arange(64) % 32
    quad = lane - lane % 4
    expected = 4 * quad + 6  # the sum of the quad's lanes
    assert (out[:, 0] == expected).all() and (out[:, 1] == expected + 400).all()


def test_a_max_over_lanes_8_and_16_apart():
    result = emulate(_sums("max", (8, 16)), {"out": np.zeros(128, np.float32)})
    lane = np.arange(64) % 32
    assert (result.storage["out"].reshape(64, 2)[:, 0] == lane % 8 + 24).all()


def test_a_lane_reduction_on_part_of_a_warp_is_refused_by_the_emulator():
    with pytest.raises(EmulationError, match="divergent shuffle"):
        emulate(_sums(guard=Binary("<", TX, Const(16))), {"out": np.zeros(128, np.float32)})


@pytest.mark.parametrize("reduce, problem", [
    (LaneReduce("q", "+", F32, (0,), (1,)), "declared: lane reduction of q: q is not a thread's own array"),
    (LaneReduce("p", "+", F16, (0,), (1,)), "types: lane reduction of p: float32 elements combined as float16"),
    (LaneReduce("p", "+", F32, (2,), (1,)), "bounds: lane reduction of p: slots [2] of an array of 2"),
    (LaneReduce("p", "*", F32, (0,), (1,)), "reduction: lane reduction of p: * over lane distances [1]"),
    (LaneReduce("p", "max", F32, (0,), (3,)), "reduction: lane reduction of p: max over lane distances [3]"),
])
def test_the_verifier_checks_a_lane_reduction(reduce, problem):
    k = _kernel(PrivateArray("p", F32, (2,)), Store("p", (Const(0),), Const(0.0, F32)), reduce)
    assert problem in wellformed.problems(k)


def test_the_cuda_of_a_lane_reduction_shuffles_each_slot():
    text = emit_kernel(_sums("max", (1, 2)))
    assert "p[0] = schedc::Max()(p[0], __shfl_xor_sync(0xffffffffu, p[0], 1));" in text
    assert "p[1] = schedc::Max()(p[1], __shfl_xor_sync(0xffffffffu, p[1], 2));" in text


# -- row vectors in fused epilogues of any tensorized product; what the fusion check refuses ----------

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)


def _steps(M, N, C, R, then=None):
    """Nests over C's elements: R set to -inf, R = max(R, C) over the row, C -= R, and (``then``:
    an array Y) Y = C + R after C's statements."""
    def nest(body):
        e = acc.Nest(shape=(M, N))
        x, y = e.get_indices()

        @e.iteration_logic
        def _():
            body(x, y)

        return e.create_schedule()

    def start(x, y):
        R[x] = -math.inf

    def peak(x, y):
        R[x] = acc.max(R[x], C[x, y])

    def shift(x, y):
        C[x, y] = C[x, y] - R[x]
        if then is not None:
            then[x, y] = C[x, y] + R[x]

    return [nest(start), nest(peak), nest(shift)]


def _product(M, N, K, c_role):
    """C += A @ B (float16 operands, float32 C of ``c_role``), its nest, and a row vector R of C."""
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(K, N))
    C = acc.Array(role=c_role, element_type=F32, shape=(M, N))
    R = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,))
    n = acc.Nest(shape=(M, N, K))
    i, j, k = n.get_indices()

    @n.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    return A, B, C, R, n


def _hopper(M=256, N=128, K=128, teams=1, blocks=None, accumulate=False):
    """A wgmma product whose block holds C's N columns, C's row maxima subtracted in its epilogue."""
    A, B, C, R, n = _product(M, N, K, acc.Role.INPUT_OUTPUT if accumulate else acc.Role.OUTPUT)
    s = acc.fuse((n.create_schedule(), *_steps(M, N, C, R)), partial=2)
    f, i, j, k = s.get_indices()
    ii, jj, kk = s.split(i, 128), s.split(j, N), s.split(k, 64)
    iii, jjj = s.split(ii, 64), s.split(jj, N)
    shape = acc.MMAShape[f"M64xN{N}xK16_B1"]
    m, nn, mk = H100.tensor_core_info.compute_tensor_splits(shape)
    iiii, jjjj, kkk = s.tile({iii: m, jjj: nn, kk: mk})
    if teams == 1:
        s.reorder(i, f, j, ii, jj, k, kk, iii, jjj, iiii, jjjj, kkk)
    else:
        s.reorder(i, f, j, jj, k, kk, ii, iii, jjj, iiii, jjjj, kkk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, **({ii: g.WARPGROUP_Y} if teams == 1 else {}), jj: g.WARPGROUP_X})
    start = acc.MMAFragmentOp.NONE if accumulate else acc.MMAFragmentOp.SET
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=shape, prologue_op=start, prologue_arg=0.0)
    for array in (A, B):
        plan.cache(array, index=kk, location=H100.MemorySpace.SHARED, stages=3, engine=acc.CopyEngine.TMA)
    plan.cache(C, index=k, location=H100.MemorySpace.MMA_FRAGMENT, element_type=F32)
    plan.warp_specialize(True, teams=teams)
    plan.persistent(blocks=blocks)
    return plan, (A, B, C)


def _mma_sync(N=16, serial_j=False, then=False):
    """mma.sync tiles of 16 x 16, a warp a tile; Y = C + R after C's store (``then``)."""
    M, K = 32, 32
    A, B, C, R, n = _product(M, N, K, acc.Role.INPUT_OUTPUT)
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=(M, N))
    s = acc.fuse((n.create_schedule(), *_steps(M, N, C, R, Y if then else None)), partial=2)
    f, i, j, k = s.get_indices()
    ii, jj = s.split(i, 32), s.split(j, 16)
    shape = acc.MMAShape.M16xN16xK16_B1
    m, nn, mk = H100.tensor_core_info.compute_tensor_splits(shape)
    iii, jjj, kk = s.tile({ii: m, jj: nn, k: mk})
    s.reorder(i, f, j, k, ii, jj, iii, jjj, kk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, ii: g.WARP_Y, **({} if serial_j else {jj: g.WARP_X})})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=shape, instruction=acc.Instruction.MMA_SYNC)
    return plan, (A, B, C, *((Y,) if then else ()))


def _emulated(plan, args):
    model, fn = compile_function_plan(plan, args)
    reports = emulate_function(model, fn, None, seed=1)
    assert reports and all(r.passed for r in reports), reports
    return fn


@pytest.mark.parametrize("options", [{}, {"teams": 2, "blocks": 2}])
def test_a_wgmma_epilogue_subtracts_its_rows_maxima(options, tmp_path):
    """C stored by TMA after its rows' maxima were taken and subtracted (the epilogue's maps stay
    whole); with two teams each warpgroup holds two 64-row tiles, each with row arrays of its own
    (compiled by NVRTC: no name declared twice)."""
    plan, args = _hopper(**options)
    _emulated(plan, args)
    build(plan, args, "rows", tmp_path)
    assert (tmp_path / "rows.cubin").exists()


def test_rows_of_a_c_that_comes_in_by_tma_chunks_are_refused():
    with pytest.raises(PlanError, match=r"reduces rows of C's tile into row vectors, which needs the whole tile in "
                                        r"registers first, and C's tile comes in by TMA chunk by chunk"):
        compile_function_plan(*_hopper(accumulate=True))


def test_an_array_written_after_cs_store_reads_the_row_vector_in_registers():
    fn = _emulated(*_mma_sync(serial_j=True, then=True))
    assert not any(p.name == "R" for p in fn.kernels[0].params)


def test_a_row_vector_over_several_tiles_of_the_row_is_refused():
    """Two serial 16-column tiles of C a row: the epilogue runs per tile, so a row's maximum would be
    taken over half the row; refused by the fusion check."""
    with pytest.raises(ScheduleError, match=r"writes \w+\[i\], one element for several points of the fused "
                                            r"indices \(i, j\)"):
        compile_function_plan(*_mma_sync(N=32, serial_j=True))


def test_a_row_vector_shared_by_threads_of_the_row_is_refused():
    """The columns bound to THREAD_X: each part's thread writes R where the others read it, with no
    barrier between the parts for the fused loops; refused."""
    M, N = 4, 128
    X = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(M, N))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=(M, N))
    R = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(M,))
    n0, n1 = acc.Nest(shape=(M, N)), acc.Nest(shape=(M, N))
    a, b = n0.get_indices()
    c, d = n1.get_indices()

    @n0.iteration_logic
    def _():
        R[a] += X[a, b]

    @n1.iteration_logic
    def _():
        Y[c, d] = X[c, d] - R[c]

    s = acc.fuse((n0.create_schedule(), n1.create_schedule()), partial=2)
    f, i, j = s.get_indices()
    jj = s.split(j, 64)
    s.reorder(i, f, j, jj)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, jj: H100.GridUnit.THREAD_X})
    with pytest.raises(ScheduleError, match=r"writes R\[i\], one element for several points"):
        compile_function_plan(plan, (X, Y, R))


@pytest.mark.parametrize("op, dtype, value", [("max", ScalarType.int32, -2 ** 31), ("min", ScalarType.uint8, 255),
                                              ("max", ScalarType.float32, -math.inf), ("+", ScalarType.int8, 0)])
def test_a_reductions_identity_is_the_types_own(op, dtype, value):
    from schedc.lower.rows import identity

    assert identity(op, dtype).value == value
