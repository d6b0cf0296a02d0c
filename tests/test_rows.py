"""Row vectors of an accumulator (``lower/rows.py``): where a thread's rows lie in each family's
lane layout, the lane reduction that combines a row's partials (its verifier rule, its emulator,
its CUDA), and what each refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedc.codegen.cuda import emit_kernel
from schedc.codegen.emulate import EmulationError, emulate
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
from schedc.lower.rows import row_layout

F32, F16 = ScalarType.float32, ScalarType.float16
TX = Var("threadIdx.x")
OUT = Buffer("out", F32, (64, 2), (2, 1), "param", "output")


@given(st.sampled_from([8, 16, 32, 64, 96, 128, 200, 256]))
def test_a_wgmma_thread_holds_rows_r_and_r_plus_8_shared_by_four_lanes(n):
    """Any width of a warpgroup's 64 x n accumulator: lane 0's rows 0 and 8, each a slot of the
    thread array, the other holders of a row lanes 1 and 2 apart (a quad)."""
    rows = row_layout(wgmma_accumulator(n), 128)
    assert rows.slots == (0, 8) and rows.distances == (1, 2) and rows.size == 9


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
