"""Fused schedules (acc.fuse): the front end's indices and rules, the reference's order of the
parts, SIMT plans (each part's loops after the fusing index), and epilogues fused into
tensor-core products (mma.sync and wgmma: computed on the accumulator's registers before the
store), against the float64 reference in the emulator, through the text check and NVRTC, and on
the GPU; every refusal with its reason."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.cuda import emit_source, without_runtime
from schedc.errors import PlanError, ScheduleError
from schedc.ir.kernel import FragmentMap, FragmentStore, Load, PrivateArray, Store, ThreadReduce, TmaStore
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile
from schedc.reference import reference
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .plans import H100, T, build, compile_function_plan, matmul_arrays, simt_matmul, tensor_matmul

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
import fused_gemm  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"


def _bias_tanh(c, bias, d, i, j):
    return acc.tanh(c + bias)


def _residual_relu(c, bias, d, i, j):
    return acc.max(c * 0.5 + d + bias, 0.0)


def _gelu(c, bias, d, i, j):
    x = c + bias
    return 0.5 * x * (1.0 + acc.erf(x * 0.7071067811865476))


def _passed(reports) -> None:
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def _nests(M=8, N=8, K=4):
    A = acc.Array(role=acc.Role.INPUT, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, N))
    bias = acc.Array(role=acc.Role.INPUT, shape=(N,))
    product = acc.Nest(M, N, K)
    i0, j0, k0 = product.get_indices()

    @product.iteration_logic
    def _():
        C[i0, j0] += A[i0, k0] * B[k0, j0]

    epilogue = acc.Nest(M, N)
    i1, j1 = epilogue.get_indices()

    @epilogue.iteration_logic
    def _():
        C[i1, j1] = acc.max(C[i1, j1] + bias[j1], 0.0)

    return product, epilogue, (A, B, C, bias)


# -- the front end ---------------------------------------------------------------------------


def test_fused_indices_are_fusing_then_fused_then_unfused():
    product, epilogue, _ = _nests()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    assert [x.name for x in (f, i, j, k)] == ["f", "i0", "j0", "k0"]
    assert s.get_fusing_index() is f
    assert s.get_fused_indices() == (i, j) and s.get_unfused_indices() == (k,)
    ii = s.split(i, 4)
    s.reorder(i, j, f, ii, k)
    assert s.get_fused_indices() == (i, j, ii)


@pytest.mark.parametrize("call, message", [
    (lambda s0, s1: acc.fuse((s0,), partial=1), "two or more schedules"),
    (lambda s0, s1: acc.fuse((s0, s1), partial=3), "partial must be an integer from 0 to 2"),
    (lambda s0, s1: acc.fuse(s0, s1), "full fusing needs schedules of the same dimensions, got \\[3, 2\\]"),
    (lambda s0, s1: acc.fuse((s0, s0), partial=2), "a nest appears twice"),
])
def test_fuse_refuses(call, message):
    product, epilogue, _ = _nests()
    with pytest.raises(ScheduleError, match=message):
        call(product.create_schedule(), epilogue.create_schedule())


def test_a_parameter_in_a_fused_schedule_is_refused_as_such():
    product, epilogue, _ = _nests()
    P = acc.create_parameters()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    with pytest.raises(ScheduleError, match=r"split\(i, P\): a fused schedule takes no parameters: give the split a "
                                            "number"):
        s.split(i, P)


def test_fuse_refuses_split_schedules_and_unequal_extents():
    product, epilogue, _ = _nests()
    s0 = product.create_schedule()
    s0.split(s0.get_indices()[0], 4)
    with pytest.raises(ScheduleError, match="schedule0 is split already"):
        acc.fuse((s0, epilogue.create_schedule()), partial=2)
    product, _, _ = _nests()
    _, other, _ = _nests(M=4)
    with pytest.raises(ScheduleError, match="fused dimension 0 has different extents \\(i0 of schedule0: 8, i1 of "
                                            "schedule1: 4\\)"):
        acc.fuse((product.create_schedule(), other.create_schedule()), partial=2)


def test_fusing_index_stays_before_unfused_ones_and_is_not_split_or_bound():
    product, epilogue, args = _nests()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    kk = s.split(k, 2)
    with pytest.raises(ScheduleError, match="fusing index f must come before the unfused index k "):
        s.reorder(i, j, k, f, kk)
    with pytest.raises(ScheduleError, match="the fusing index runs its schedules in turn and cannot be split"):
        s.split(f, 1)
    s.reorder(i, j, f, k, kk)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, f: H100.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="the fusing index f runs its schedules in turn: it cannot be bound"):
        compile_function_plan(plan, args)


def test_unfused_loops_cannot_be_bound_to_blocks():
    with pytest.raises(ScheduleError, match="fusing index f must come before the unfused index k"):
        simt_matmul(64, 64, 64, splits=2, epilogue=_bias_tanh)  # k's blocks (BLOCK_Z) before f
    product, epilogue, args = _nests()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, k: H100.GridUnit.BLOCK_Y})
    with pytest.raises(PlanError, match="k is a loop of an unfused dimension of a fused schedule, bound to BLOCK_Y: "
                                        "a part runs its own loops on the block's threads"):
        compile_function_plan(plan, args)


def test_parts_share_an_array_only_element_by_element():
    """The epilogue reads C transposed: the order of the parts holds at one fused point only, so
    C[j, i] may not be final yet (it belongs to another point): refused, with both accesses."""
    product, _, (A, B, C, bias) = _nests()
    after = acc.Nest(8, 8)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        C[x, y] = C[y, x] + bias[y]

    s = acc.fuse((product.create_schedule(), after.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    s.reorder(i, j, f, k)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.THREAD_X})
    with pytest.raises(ScheduleError, match=r"statement 2 \(schedule 1\) reads C\[j, i\] and statement 1 writes "
                                            r"C\[i, j\]: fused schedules run in turn only at each point"):
        compile_function_plan(plan, (A, B, C, bias))


def test_loop_nest_shows_each_part_under_the_fusing_index():
    plan, args = simt_matmul(32, 32, 16, block=(8, 8), epilogue=_bias_tanh)
    model, _ = compile_function_plan(plan, args)
    from schedc.show import loop_nest

    text = loop_nest(model)
    assert "# f = 0" in text and "# f = 1" in text
    assert text.index("# f = 0") < text.index("for k ") < text.index("# f = 1") < text.index("tanh")


# -- the reference ---------------------------------------------------------------------------


def test_reference_runs_the_parts_in_turn():
    product, epilogue, args = _nests()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    s.reorder(i, j, f, k)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, j: H100.GridUnit.THREAD_X})
    model, _ = compile_function_plan(plan, args)
    rng = np.random.default_rng(1)
    a, b, c, bias = (rng.standard_normal(shape) for shape in ((8, 4), (4, 8), (8, 8), (8,)))
    values, touched = reference(model, {"A": a, "B": b, "C": c, "bias": bias})
    np.testing.assert_allclose(values["C"], np.maximum(c + a @ b + bias, 0.0), rtol=1e-12)
    assert touched["C"].all()


# -- SIMT plans ------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    {"M": 100, "N": 70, "K": 33, "block": (16, 16)},
    {"M": 64, "N": 96, "K": 64, "block": (16, 32), "shared_k": 16, "pipeline": {"double_buffer": True}},
], ids=["partial tiles", "shared caches"])
@pytest.mark.parametrize("epilogue", [_bias_tanh, _residual_relu], ids=["tanh", "residual"])
def test_simt_fused_epilogue_matches_the_reference(options, epilogue):
    options = dict(options)
    plan, args = simt_matmul(options.pop("M"), options.pop("N"), options.pop("K"), epilogue=epilogue, **options)
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, None, seed=3))
    nvrtc_compile(emit_source([fn], "// fused"), "fused", "sm_80")


# -- tensor-core epilogues -------------------------------------------------------------------

TENSOR = {
    "mma.sync f32 C": {"M": 64, "N": 64, "K": 64},
    "mma.sync partial tiles": {"M": 100, "N": 70, "K": 40, "block": (32, 32), "shared_ab": True, "k_split": 16},
    "mma.sync f16 C, f32 fragments": {"M": 64, "N": 64, "K": 64, "operand": T.float16, "result": T.float16,
                                      "cache_c": 0, "fragment_type": T.float32, "k_split": 32},
    "bf16, C cached across k": {"M": 64, "N": 64, "K": 64, "operand": T.bfloat16, "cache_c": 0, "k_split": 16},
}


@pytest.mark.parametrize("name", TENSOR)
@pytest.mark.parametrize("epilogue", [_bias_tanh, _residual_relu, _gelu], ids=["tanh", "residual", "gelu"])
def test_tensor_fused_epilogue_runs_on_the_accumulator(name, epilogue):
    options = dict(TENSOR[name])
    plan, args = tensor_matmul(options.pop("M"), options.pop("N"), options.pop("K"), epilogue=epilogue, **options)
    model, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[-1]
    maps = [s for s in walk_statements(kernel.body) if isinstance(s, FragmentMap)]
    assert maps and all(m.fragment.startswith("_c") for m in maps)
    statements = list(walk_statements(kernel.body))
    stores = [n for n, s in enumerate(statements) if isinstance(s, FragmentStore) and s.buffer == "C"]
    assert statements.index(maps[0]) < stores[-1]  # in registers, before C leaves
    _passed(emulate_function(model, fn, None, seed=4))
    nvrtc_compile(emit_source([fn], "// fused"), "fused", "sm_80")


def test_wmma_cannot_place_the_elements_of_its_tiles():
    plan, args = tensor_matmul(64, 64, 64, epilogue=_bias_tanh, instruction=acc.Instruction.WMMA)
    with pytest.raises(PlanError, match="a fused epilogue computes in the accumulator's registers, and wmma does not "
                                        "say which element each lane holds"):
        compile_function_plan(plan, args)
    plan, args = tensor_matmul(64, 64, 64, epilogue=_bias_tanh)  # AUTO: a family that places them
    model, fn = compile_function_plan(plan, args)
    assert {m.fragment for m in walk_statements(fn.kernels[-1].body) if isinstance(m, FragmentMap)}


def test_adding_into_c_by_tma_reductions_is_refused_for_a_fused_schedule():
    plan, args = tensor_matmul(64, 64, 64, epilogue=_bias_tanh)
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"split_k\(deterministic=False\): the schedule is fused \(acc.fuse\): its "
                                        "later statements need each element's whole value"):
        compile_function_plan(plan, args)


def _into(role=acc.Role.INPUT_OUTPUT, statements="tanh", M=32, N=32, K=32, D_layout=None):
    """C (float32) += A @ B (float16) and an epilogue writing D (float16) at C's element: "tanh"
    ``D = tanh(C + bias[y])``; "both" ``C = C + bias[y]``, ``D = tanh(C)``, ``D = D * scale[x]``.
    The nests, C, and the arrays the caller passes (a TEMP C is not one)."""
    nest, (A, B, C) = matmul_arrays(M, N, K, T.float16, T.float32, c_role=role)
    D = acc.Array(role=acc.Role.OUTPUT, element_type=T.float16, shape=(M, N),
                  **({"layout": D_layout} if D_layout is not None else {}))
    bias = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(N,))
    scale = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(M,))
    after = acc.Nest(M, N)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        if statements == "tanh":
            D[x, y] = acc.cast(acc.tanh(C[x, y] + bias[y]), T.float16)
        else:
            C[x, y] = C[x, y] + bias[y]
            D[x, y] = acc.cast(acc.tanh(C[x, y]), T.float16)
            D[x, y] = acc.cast(D[x, y] * scale[x], T.float16)

    passed = tuple(a for a in (A, B, C, bias, scale, D) if a.role is not acc.Role.TEMP)
    return nest, after, C, passed


@pytest.mark.parametrize("statements", ["tanh", "both"])
@pytest.mark.parametrize("mode", ["C stored", "C in registers", "C a TEMP between passes"])
def test_tensor_epilogue_writes_another_array(mode, statements):
    """D at C's element, computed in the accumulator's registers once C's statements are done:
    C stored first (its final value), then D's statements, then D stored from the registers. A
    TEMP C whose fragment spans the k loop (cached at k, its first product SET) is stored nowhere
    and has no workspace; one reloaded each pass keeps its workspace between the passes."""
    role = acc.Role.INPUT_OUTPUT if mode == "C stored" else acc.Role.TEMP
    nest, after, C, args = _into(role, statements)
    kept = mode == "C in registers"
    plan = _warp_tiled(nest, after, fragment=C if kept else None, prologue_op=acc.MMAFragmentOp.SET)
    model, fn = compile_function_plan(plan, args)
    body = list(walk_statements(fn.kernels[-1].body))
    stores = {s.buffer: n for n, s in enumerate(body) if isinstance(s, FragmentStore)}
    maps = [n for n, s in enumerate(body) if isinstance(s, FragmentMap)]
    assert "D" in stores and max(maps) < stores["D"]
    buffers = {b.name for b in fn.kernels[-1].buffers}
    if kept:
        assert "C" not in stores and "C" not in buffers
    else:
        assert stores["C"] < stores["D"] and "C" in buffers
        assert statements == "tanh" or min(maps) < stores["C"] < max(maps)
    _passed(emulate_function(model, fn, None, seed=5))
    nvrtc_compile(emit_source([fn], "// fused into D"), "fused", "sm_80")


@pytest.mark.parametrize("into", ["registers", "kept"])
def test_wgmma_epilogue_writes_another_array(into):
    """The sample's GELU into Y on the Hopper plan: with C in registers alone Y leaves by TMA,
    chunk by chunk beside its epilogue; with C kept, C leaves by TMA through its slots, then Y
    through slots of its own, each chunk's statements beside its store."""
    plan, args = fused_gemm.gelu_matmul(256, 512, 128, blocks=3, into=into)
    model, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[-1]
    body = list(walk_statements(kernel.body))
    maps = [s for s in body if isinstance(s, FragmentMap)]
    names = [a.name for a in kernel.buffers]
    y = args[-1].name
    stored = [s.tensor_map for s in body if isinstance(s, TmaStore)]
    assert all(m.columns is not None for m in maps)  # chunk by chunk, beside the stores
    if into == "registers":
        assert "C" not in names and set(stored) == {f"{y}_map"}
    else:
        assert "C" in names and stored.index(f"{y}_map") > max(n for n, m in enumerate(stored) if m == "C_map")
    _passed(emulate_function(model, fn, 2, seed=6))
    nvrtc_compile(emit_source([fn], "// fused into Y"), "fused", "sm_90a")


def _refused_into(body, match, D_layout=None):
    nest, (A, B, C) = matmul_arrays(32, 32, 32, T.float16, T.float32)
    D = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(32, 32),
                  **({"layout": D_layout} if D_layout is not None else {}))
    E = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(32, 32))
    after = acc.Nest(32, 32)
    x, y = after.get_indices()
    after.iteration_logic(lambda: body(C, D, E, x, y))
    with pytest.raises(PlanError, match=match):
        compile_function_plan(_warp_tiled(nest, after), (A, B, C, D, E))


def _two_arrays(C, D, E, x, y):
    D[x, y] = C[x, y]
    E[x, y] = C[x, y]


def _c_after_d(C, D, E, x, y):
    D[x, y] = C[x, y]
    C[x, y] = C[x, y] * 2.0
    E[x, y] = C[x, y]


def _c_read_after_d(C, D, E, x, y):
    D[x, y] = C[x, y]
    D[x, y] = D[x, y] + C[x, y]
    E[x, y] = C[x, y]


def _elsewhere(C, D, E, x, y):
    D[y, x] = C[x, y]
    E[x, y] = C[x, y]


def _d_alone(C, D, E, x, y):
    D[x, y] = acc.tanh(C[x, y])
    E[x, y] = C[x, y]


@pytest.mark.parametrize("body, match, layout", [
    (_two_arrays, "fused schedule 1 writes E and an earlier statement wrote D: an epilogue of a tensorized product "
                  "writes C and at most one other array", None),
    (_c_after_d, "fused schedule 1 writes C after an earlier statement wrote D: the registers hold D's element from "
                 "then on, so C's epilogue statements come first", None),
    (_c_read_after_d, r"fused schedule 1 writes D and reads C\[i, j\] after an earlier statement wrote D", None),
    (_elsewhere, r"fused schedule 1 writes D\[j, i\], not at C's element C\[i, j\]", None),
    (_d_alone, r"fused schedule 1 writes D, of shape \[32, 32\] and strides \[1, 32\], where C has \[32, 32\] "
               r"and \[32, 1\]", acc.Array.Layout.LAST_MAJOR),
], ids=["two other arrays", "C after D", "C read after D", "another element", "another layout"])
def test_tensor_epilogue_into_another_array_refusals(body, match, layout):
    """Each arrangement the registers cannot hold, refused with what to write instead."""
    _refused_into(body, match, layout)


def _scaled_into(dtype, M=64, N=64, K=32):
    """C (float32) += A @ B, then ``Y = cast(C * 1000, dtype)`` and ``Y = cast(Y * 0.001, dtype)``
    (for integers: one statement ``Y = cast(C, dtype)``), on mma.sync warps; (plan, args)."""
    nest, (A, B, C) = matmul_arrays(M, N, K, T.float16, T.float32, c_role=acc.Role.OUTPUT)
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))
    after = acc.Nest(M, N)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        if dtype.is_float:
            Y[x, y] = acc.cast(C[x, y] * 1000.0, dtype)
            Y[x, y] = acc.cast(Y[x, y] * 0.001, dtype)
        else:
            Y[x, y] = acc.cast(C[x, y], dtype)

    return _warp_tiled(nest, after, fragment=C, prologue_op=acc.MMAFragmentOp.SET), (A, B, C, Y)


@pytest.mark.parametrize("dtype", [T.float8_e4m3, T.float16, T.int8])
def test_another_arrays_result_is_held_as_its_type_between_statements(dtype):
    """Y = cast(C * 1000, e4m3) saturates at 448 before the next statement scales it back, as the
    nest's order has it (the registers held the unrounded float32 value before: 1000 times C, not
    448); an int8 Y from float32 registers passes the IR check (each element converted)."""
    plan, args = _scaled_into(dtype)
    model, fn = compile_function_plan(plan, args)
    reports = emulate_function(model, fn, None, seed=2)
    _passed(reports)
    if dtype is T.float8_e4m3:
        assert next(r for r in reports if r.array == "Y").relative_error == 0.0
    nvrtc_compile(emit_source([fn], "// held as Y's type"), "fused", "sm_80")


@pytest.mark.parametrize("dtype", [T.float8_e4m3, T.int8])
def test_an_epilogues_narrow_output_saturates_where_it_is_stored(dtype):
    """Y = cast(C * 1000, Y's type) in one statement: the float32 registers convert when stored,
    saturating past 448 (e4m3) or 127 (int8) as the GPU's conversion and the reference do (the
    emulator made NaN of e4m3 values past its range, and wrapped integers)."""
    nest, (A, B, C) = matmul_arrays(64, 64, 32, T.float16, T.float32, c_role=acc.Role.OUTPUT)
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(64, 64))
    after = acc.Nest(64, 64)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        Y[x, y] = acc.cast(C[x, y] * 1000.0, dtype)

    plan = _warp_tiled(nest, after, fragment=C, prologue_op=acc.MMAFragmentOp.SET)
    model, fn = compile_function_plan(plan, (A, B, C, Y))
    reports = emulate_function(model, fn, None, seed=2)
    _passed(reports)
    assert next(r for r in reports if r.array == "Y").relative_error == 0.0


def test_ping_pong_teams_with_c_read_write_another_array_from_every_part():
    """Each team's tile is two 64-row parts; with C read by TMA, the other array's statements and
    store follow each part's C (they were dropped for all but the last part)."""
    F16 = T.float16
    bias = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(512,))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F16, shape=(256, 512))
    plan, args = fused_gemm.fused_matmul(256, 512, 128, lambda c, i, j: acc.tanh(c), (bias,), F16, accumulate=True,
                                         into=Y, blocks=3, group=2, before=lambda c, i, j: c + bias[j],
                                         **fused_gemm.PING_PONG)
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, None, seed=3))


@pytest.mark.parametrize("into", [None, "registers"])
def test_each_part_of_a_team_tile_alternates_its_arrays_slots_over_the_tile(into):
    """Ping-pong teams of 128 x 64 tiles: two 64-row parts a team, one 64-column chunk each. The
    chunks alternate the array's two slots across the tile (the second part's chunk went into slot
    0 again, which the first's store may still be reading: a race the emulator reports)."""
    plan, args = fused_gemm.gelu_matmul(256, 384, 128, block=(128, 64, 64), stages=4, teams=2, blocks=2, group=2,
                                        into=into)
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, 2, seed=1))


def test_each_output_of_a_fused_tensor_plan_is_checked_with_its_own_types():
    """C (float32, fp16 products) is compared at the tensor cores' float32 tolerance whatever D's
    type, and whichever argument comes first (the operands' type is the product's A and B, not the
    first array the nest does not write: here the float32 bias); D at float16's."""
    from schedc import data

    nest, after, C, (A, B, C, bias, scale, D) = _into(acc.Role.INPUT_OUTPUT, "both")
    model, _ = compile_function_plan(_warp_tiled(nest, after, prologue_op=acc.MMAFragmentOp.SET),
                                     (bias, scale, A, B, C, D))
    assert data.tolerance_for(data.precisions(model, "C")) == data.TOLERANCES["tensor_float32"]
    assert data.tolerance_for(data.precisions(model, "D")) == data.TOLERANCES["float16"]


@pytest.mark.parametrize("dtype", [T.int64, T.float64, T.int32])
def test_tensor_epilogue_into_a_type_its_registers_do_not_hold_is_refused(dtype):
    """D is computed in C's float32 registers: an int64, float64 or int32 D would come out
    rounded to float32's 24 bits, so it is refused with the types that fit."""
    nest, (A, B, C) = matmul_arrays(32, 32, 32, T.float16, T.float32)
    D = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(32, 32))
    after = acc.Nest(32, 32)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        D[x, y] = acc.cast(C[x, y], dtype)

    with pytest.raises(PlanError, match=rf"the epilogue writes D \({dtype.value}\) from C's float32 registers, which "
                                        rf"do not hold every {dtype.value} value: give D a type float32 holds \(int8, "
                                        r"uint8, int16, uint16, float8_e4m3, float8_e5m2, float16, bfloat16, float32\)"):
        compile_function_plan(_warp_tiled(nest, after), (A, B, C, D))


def _warp_tiled(first, second, fragment=None, **ops):
    """The two nests fused over (i, j), in 16x16 tiles on warps, tensorized by 16x16x16 tiles
    (``ops``: tensorize's prologue and epilogue ops); ``fragment``: C, its tile kept in registers
    across k (an MMA_FRAGMENT cache)."""
    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    ii, jj, kk = s.tile({i: 16, j: 16, k: 16})
    s.reorder(i, j, f, k, ii, jj, kk)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.WARP_Y, j: H100.GridUnit.WARP_X})
    plan.tensorize(indices=(ii, jj, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1, **ops)
    if fragment is not None:
        plan.cache(fragment, index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    return plan


def test_fused_tensor_golden_source(update_golden):
    plan, args = tensor_matmul(64, 64, 32, operand=T.float16, result=T.float16, cache_c=0, fragment_type=T.float32,
                               epilogue=_gelu)
    _, fn = compile_function_plan(plan, args, name="gelu_matmul")
    source = without_runtime(emit_source([fn], "// a GEMM with a fused GELU epilogue (tests/test_fuse.py)"))
    path = GOLDEN / "fused_gelu_matmul.cu"
    if update_golden:
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run pytest --update-golden"
    assert source == path.read_text(), f"the fused kernel differs from {path}; if intended, run pytest --update-golden"


@pytest.mark.parametrize("teams", [1, 2], ids=["cooperative", "ping-pong"])
@pytest.mark.parametrize("accumulate", [False, True], ids=["C written", "C read by TMA"])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_hopper_fused_gemm_sample_emulates(accumulate, teams, activation):
    plan, args = fused_gemm.gelu_matmul(256, 512, 128, accumulate=accumulate, blocks=3, activation=activation,
                                        **(fused_gemm.PING_PONG if teams == 2 else {}))
    model, fn = compile_function_plan(plan, args)
    maps = [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, FragmentMap)]
    assert maps and all(m.columns is not None for m in maps)  # chunk by chunk, beside C's TMA loads and stores
    _passed(emulate_function(model, fn, 2, seed=6))
    nvrtc_compile(emit_source([fn], "// fused"), "fused", "sm_90a")


def _bias_in_registers(M=256, N=512, K=128, block=(128, 128, 64), **options):
    """fused_gemm's GELU plan on 128 x 128 tiles: each consumer holds 64 accumulators, which
    leaves registers for the bias of its columns."""
    return fused_gemm.gelu_matmul(M, N, K, **{"block": block, "stages": 4, "blocks": 3, **options})


def test_an_epilogue_reads_its_column_vector_from_registers_filled_at_the_tile_start():
    """bias[j] (the epilogue's read of the element's column alone) is loaded into the thread's
    array once a tile, before the products, one element a column of the thread's; the epilogue
    reads the array at the element's column (module schedc.lower.operands)."""
    model, fn = compile_function_plan(*_bias_in_registers())
    body = list(walk_statements(fn.kernels[-1].body))
    (array,) = [s for s in body if isinstance(s, PrivateArray) and s.name == "_bias_cols"]
    fills = [s for s in body if isinstance(s, Store) and s.buffer == "_bias_cols"]
    assert len(fills) == 128 // 4 and all(isinstance(s.value, Load) and s.value.buffer == "bias" for s in fills)
    maps = [s for s in body if isinstance(s, FragmentMap)]
    reads = {x.buffer for m in maps for s in m.body for x in _loads(s)}
    assert "_bias_cols" in reads and "bias" not in reads
    assert body.index(fills[-1]) < min(body.index(m) for m in maps)


def test_column_vectors_stay_in_global_memory_where_registers_are_short_or_tiles_ragged():
    """The sample's 128 x 256 tiles hold 128 accumulators a thread: ptxas compiles the consumers
    in 168 registers, no room for 64 more. An epilogue guarded at C's edge (a ragged M here) keeps
    its reads under the guard."""
    for plan, args in (fused_gemm.gelu_matmul(256, 512, 128, blocks=3), _bias_in_registers(M=200)):
        model, fn = compile_function_plan(plan, args)
        assert not [s for s in walk_statements(fn.kernels[-1].body) if isinstance(s, PrivateArray)
                    and s.name.endswith("_cols")]


PING_PONG_64 = {**fused_gemm.PING_PONG, "block": (64, 128, 64)}  # a team's tile: 64 accumulators a thread


@pytest.mark.parametrize("teams", [1, 2], ids=["cooperative", "ping-pong"])
def test_an_epilogue_with_its_column_vector_in_registers_emulates(teams):
    options = PING_PONG_64 if teams == 2 else {}
    model, fn = compile_function_plan(*_bias_in_registers(**options))
    assert any(isinstance(s, PrivateArray) and s.name == "_bias_cols" for s in walk_statements(fn.kernels[-1].body))
    _passed(emulate_function(model, fn, 2, seed=4))


def _loads(s):
    from schedc.ir.walk import exprs, subexpressions

    return [x for e in exprs(s) for x in subexpressions(e) if isinstance(x, Load)]


# -- on the GPU ------------------------------------------------------------------------------

GPU_PLANS = {
    "simt": lambda: simt_matmul(100, 70, 33, block=(16, 16), epilogue=_residual_relu),
    "mma.sync": lambda: tensor_matmul(100, 70, 40, block=(32, 32), shared_ab=True, k_split=16, epilogue=_gelu),
    "mma.sync f16": lambda: tensor_matmul(128, 128, 64, operand=T.float16, result=T.float16, cache_c=0,
                                          fragment_type=T.float32, k_split=32, epilogue=_bias_tanh),
    "wgmma": lambda: fused_gemm.gelu_matmul(512, 1024, 256),
    "wgmma, C read": lambda: fused_gemm.gelu_matmul(512, 1024, 256, accumulate=True),
    "wgmma, GELU's tanh form (fast_tanh)": lambda: fused_gemm.gelu_matmul(512, 1024, 256, activation="gelu_tanh"),
    "wgmma 128x128, bias in registers": lambda: _bias_in_registers(512, 1024, 256),
    "wgmma ping-pong, bias in registers": lambda: _bias_in_registers(512, 1024, 256, **PING_PONG_64),
    # a few blocks, so that each takes several tiles and both teams work
    "attention by rows": lambda: attention_rows(M=33, N=200, D=64, threads=64),
    "wgmma ping-pong": lambda: fused_gemm.gelu_matmul(512, 1024, 256, group=2, blocks=5, **fused_gemm.PING_PONG),
    "wgmma ping-pong, C read": lambda: fused_gemm.gelu_matmul(384, 640, 192, accumulate=True, group=3, blocks=4,
                                                              **fused_gemm.PING_PONG),
    "wgmma, GELU into Y, C in registers": lambda: fused_gemm.gelu_matmul(512, 1024, 256, into="registers"),
    "wgmma, GELU into Y, C kept": lambda: fused_gemm.gelu_matmul(384, 640, 192, into="kept", group=3, blocks=4),
    "mma.sync into D, C in registers": lambda: _into_plan(acc.Role.TEMP, C_kept=True),
    "mma.sync into D, C stored": lambda: _into_plan(acc.Role.INPUT_OUTPUT),
}


def _into_plan(role, C_kept=False):
    """``_into``'s two-statement epilogue at 64 x 48 x 64, fused on warps."""
    nest, after, C, args = _into(role, "both", M=64, N=48, K=64)
    return _warp_tiled(nest, after, fragment=C if C_kept else None, prologue_op=acc.MMAFragmentOp.SET), args


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PLANS)
def test_fused_epilogues_on_the_gpu(name, tmp_path):
    plan, args = GPU_PLANS[name]()
    build(plan, args, "fused", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "fused.hat").functions["fused"], seed=7))


def test_an_element_shared_by_several_fused_points_is_refused():
    """S[0] is every point's (fused over i): the kernel runs the parts in turn at each i, so the
    second would read a partial sum. Refused: subscripts must tell the fused points apart."""
    X = acc.Array(role=acc.Role.INPUT, shape=(8, 4))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(1,))
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(8,))
    first, second = acc.Nest(8, 4), acc.Nest(8)
    i1, k1 = first.get_indices()
    (i2,) = second.get_indices()

    @first.iteration_logic
    def _():
        S[0] += X[i1, k1]

    @second.iteration_logic
    def _():
        Y[i2] = S[0]

    s = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
    f, i, k = s.get_indices()
    s.reorder(i, f, k)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.THREAD_X})
    with pytest.raises(ScheduleError, match=r"statement 1 writes S\[0\], one element for several points of the "
                                            r"fused indices \(i\)"):
        compile_function_plan(plan, (X, S, Y))


def test_a_row_shared_by_parts_fused_over_rows_is_accepted():
    """Fused over i alone, the product and the epilogue each run their own loop over j: C[i, j]
    moves with each part's own j, but its row is the fused point's, so the parts running in turn
    at each i compute what the two nests compute one after the other."""
    product, epilogue, args = _nests(M=6, N=40, K=5)
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=1)
    f, i, j0, k, j1 = s.get_indices()
    t0, t1 = s.split(j0, 8), s.split(j1, 8)
    s.reorder(i, f, j0, k, t0, j1, t1)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, t0: H100.GridUnit.THREAD_X, t1: H100.GridUnit.THREAD_X})
    model, fn = compile_function_plan(plan, args)
    _passed(emulate_function(model, fn, None, seed=3))


def test_a_cache_of_a_row_the_parts_share_is_refused():
    """C's rows are shared by the product and the epilogue, each with its own loop over j: a
    cache of C (its copies placed in one part) is not built for that, and is refused (the random
    tester found a register tile of C there racing between threads)."""
    product, epilogue, args = _nests(M=6, N=40, K=5)
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=1)
    f, i, j0, k, j1 = s.get_indices()
    t0 = s.split(j0, 8)
    s.reorder(i, f, j0, t0, k, j1)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, t0: H100.GridUnit.THREAD_X})
    plan.cache(args[2], index=k, location=acc.MemorySpace.PRIVATE)
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=k, location=PRIVATE\): C is shared by fused schedules "
                                             r"that each run their own loops over it"):
        compile_function_plan(plan, args)


def _other_row(fusing_inside: bool):
    """The epilogue reads row 7 - i of C; the fusing index inside the row loop or before it."""
    product, _, (A, B, C, bias) = _nests()
    after = acc.Nest(8, 8)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        C[x, y] = C[7 - x, y] + bias[y]

    s = acc.fuse((product.create_schedule(), after.create_schedule()), partial=1)
    f, i, j, k, y = s.get_indices()
    if fusing_inside:
        s.reorder(i, f, j, k, y)
    return s.create_plan(H100), (A, B, C, bias)


def test_a_row_of_another_fused_point_is_refused():
    """The epilogue reads row 7 - i of C, which the product writes at another fused point (after
    this one, for the first half): the parts run in turn at each row (the fusing index inside i),
    so it is refused, with both accesses."""
    plan, (A, B, C, bias) = _other_row(fusing_inside=True)
    with pytest.raises(ScheduleError, match=r"statement 2 \(schedule 1\) reads C\[-i \+ 7, y\] and statement 1 "
                                            r"writes C\[i, j\]: fused schedules run in turn only at each point.* "
                                            r"each element belongs to one point"):
        compile_function_plan(plan, (A, B, C, bias))


def test_parts_that_run_in_turn_over_the_whole_nest_may_read_any_row():
    """With the fusing index first (no fused loop outside it, none on blocks), the product runs over
    the whole nest before the epilogue starts: reading another row of C is the sequential
    schedule's meaning, accepted, and the kernel computes it."""
    plan, args = _other_row(fusing_inside=False)
    model, fn = compile_function_plan(plan, args)
    assert model.fusion.at == 0
    reports = emulate_function(model, fn, None, seed=1)
    assert reports and all(r.passed for r in reports)


def attention_rows(M=6, N=40, D=16, threads=16, dtype=T.float16):
    """softmax(Q K^T / sqrt(D)) V with one block a query row: nests fused over the rows (scores,
    their maximum and sum of exponentials as reductions across threads, the exponentials, the
    product with V, the division), sharing the row's scores S[i, :] and output sums O_[i, :] (TEMP
    arrays) between them."""
    F32 = T.float32
    Q, K, V = (acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=shape) for shape in ((M, D), (N, D), (N, D)))
    O = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, D))
    S = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M, N))
    sums = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M, D))
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,)) for _ in range(2))
    init, clear, zero = acc.Nest(M), acc.Nest(M, N), acc.Nest(M, D)
    scores, maximum, exp, add, mix, out = (acc.Nest(*shape) for shape in ((M, N, D), (M, N), (M, N), (M, N),
                                                                         (M, D, N), (M, D)))
    (i0,), (i1, j1), (i2, d2) = init.get_indices(), clear.get_indices(), zero.get_indices()
    (i3, j3, d3), (i4, j4), (i5, j5) = scores.get_indices(), maximum.get_indices(), exp.get_indices()
    (i6, j6), (i7, d7, j7), (i8, d8) = add.get_indices(), mix.get_indices(), out.get_indices()

    @init.iteration_logic
    def _():
        peak[i0] = -math.inf
        total[i0] = 0.0

    @clear.iteration_logic
    def _():
        S[i1, j1] = 0.0

    @zero.iteration_logic
    def _():
        sums[i2, d2] = 0.0

    @scores.iteration_logic
    def _():
        S[i3, j3] += acc.cast(Q[i3, d3], F32) * acc.cast(K[j3, d3], F32) * (1.0 / math.sqrt(D))

    @maximum.iteration_logic
    def _():
        peak[i4] = acc.max(peak[i4], S[i4, j4])

    @exp.iteration_logic
    def _():
        S[i5, j5] = acc.exp(S[i5, j5] - peak[i5])

    @add.iteration_logic
    def _():
        total[i6] += S[i6, j6]

    @mix.iteration_logic
    def _():
        sums[i7, d7] += S[i7, j7] * acc.cast(V[j7, d7], F32)

    @out.iteration_logic
    def _():
        O[i8, d8] = acc.cast(sums[i8, d8] / total[i8], dtype)

    nests = (init, clear, zero, scores, maximum, exp, add, mix, out)
    s = acc.fuse(tuple(n.create_schedule() for n in nests), partial=1)
    f, i, j1, d2, j3, d3, j4, j5, j6, d7, j7, d8 = s.get_indices()
    parts = [s.split(x, threads) for x in (j1, d2, j3, j4, j5, j6, d7, d8)]
    s.reorder(i, f, j1, parts[0], d2, parts[1], j3, parts[2], d3, j4, parts[3], j5, parts[4], j6, parts[5],
              j7, d7, parts[6], d8, parts[7])
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, **{t: H100.GridUnit.THREAD_X for t in parts}})
    return plan, (Q, K, V, O)


def test_attention_by_rows_matches_the_reference():
    plan, args = attention_rows()
    model, fn = compile_function_plan(plan, args)
    body = list(walk_statements(fn.kernels[-1].body))
    assert sum(isinstance(st, ThreadReduce) for st in body) == 2  # the row's maximum and sum
    _passed(emulate_function(model, fn, None, seed=4))
    nvrtc_compile(emit_source([fn], "// attention"), "attention", "sm_90")


def test_the_fusing_index_is_not_unrolled_and_the_product_comes_first():
    product, epilogue, args = _nests()
    s = acc.fuse((product.create_schedule(), epilogue.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    plan = s.create_plan(H100)
    plan.unroll(f)
    with pytest.raises(PlanError, match="unroll\\(f\\): the fusing index picks the schedule whose work runs"):
        compile_function_plan(plan, args)
    nest, (A, B, C) = matmul_arrays(32, 32, 32, T.float16, T.float32)
    after = acc.Nest(32, 32)
    x, y = after.get_indices()

    @after.iteration_logic
    def _():
        C[x, y] = acc.tanh(C[x, y])

    with pytest.raises(PlanError, match="the tensorized product C \\+= A \\* B is fused schedule 1: it must be the "
                                        "first"):
        compile_function_plan(_warp_tiled(after, nest), (A, B, C))


def test_a_fused_epilogues_fast_function_widens_the_tolerance_of_a_tensor_core_plan():
    """fast_tanh's error (2^-10.987) in a float32 C's epilogue: the check takes it, as on SIMT."""
    from schedc import data

    def tanh_form(c, i, j):
        return acc.fast_tanh(c)

    for function, wider in ((tanh_form, True), (lambda c, i, j: acc.tanh(c), False)):
        plan, args = fused_gemm.fused_matmul(256, 512, 128, function, output=T.float32, blocks=2)
        model, _ = compile_function_plan(plan, args)
        assert (data.tolerance_for(data.precisions(model)) > data.TOLERANCES["tensor_float32"]) == wider


def _threshold(c, bias, d, i, j):
    return acc.select(c > 1.0, 10.0, 0.0)


def _threshold_of_cast(c, bias, d, i, j):
    x = acc.cast(c, T.float32)
    return acc.cast(acc.select(acc.logical_or(x > 1.0, x < -1.0), 10.0, 0.0), T.float16)


@pytest.mark.parametrize("epilogue", [_threshold, _threshold_of_cast], ids=["C > 1.0", "cast(C, float32) > 1.0"])
def test_an_epilogue_compares_the_accumulator_not_c_rounded_to_its_type(epilogue):
    """A 16-bit C's epilogue on its float32 accumulator: a comparison of C (or of C cast to
    float32) sees the accumulator's value, as the reference does (C is rounded once, when
    stored); rounded to float16 first, sums just above 1.0 compared as 1.0 and the elements near
    the threshold took the other branch."""
    plan, args = tensor_matmul(128, 128, 64, operand=T.float16, result=T.float16, cache_c=0, fragment_type=T.float32,
                               k_split=32, epilogue=epilogue)
    model, fn = compile_function_plan(plan, args)
    source = emit_source([fn.kernels[-1]], "// threshold")
    assert "_c[elem] > 1.0f" in source and "convert<__half>(_c[elem]) >" not in source
    _passed(emulate_function(model, fn, None, seed=2))


def test_a_reduction_in_a_tensorized_products_epilogue_is_refused_as_such():
    """R[i] += C[i, j] after a tensorized product would combine the warps' elements of a row:
    the error says to reduce R in a nest of its own (not to bind THREAD_X, which the plan cannot)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(64, 64))
    B = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(64, 64))
    C = acc.Array(role=acc.Role.OUTPUT, shape=(64, 64))
    R = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64,))
    product, rows = acc.Nest(64, 64, 64), acc.Nest(64, 64)
    i0, j0, k0 = product.get_indices()
    i1, j1 = rows.get_indices()

    @product.iteration_logic
    def _():
        C[i0, j0] += A[i0, k0] * B[k0, j0]

    @rows.iteration_logic
    def _():
        R[i1] += C[i1, j1]

    s = acc.fuse((product.create_schedule(), rows.create_schedule()), partial=2)
    f, i, j, k = s.get_indices()
    ii, jj = s.split(i, 32), s.split(j, 32)
    mma = acc.MMAShape.M16xN16xK16_B1
    iii, jjj, kk = s.tile(dict(zip((ii, jj, k), H100.tensor_core_info.compute_tensor_splits(mma))))
    s.reorder(i, j, f, k, ii, jj, iii, jjj, kk)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_Y, j: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.WARP_Y,
               jj: H100.GridUnit.WARP_X})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=mma, prologue_op=acc.MMAFragmentOp.SET, prologue_arg=0.0)
    with pytest.raises(PlanError, match=r"a tensorized plan: R's \+ combines elements that several of its threads hold.*"
                                        r"Reduce R in a nest of its own"):
        compile_function_plan(plan, (A, B, C, R))
