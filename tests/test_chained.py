"""A chain of two tensor-core products in one kernel (``lower/chained.py``): the back-to-back
GEMM E = (A @ B) @ D of ``samples/b2b_gemm.py``, the first product's float32 result converted to
16 bits in the registers and fed to the second wgmma as its A. Emulated against the reference
(with the Hopper race detectors), compiled by NVRTC for sm_90a, run on the GPU; the IR's new
pieces (register A tiles, FragmentConvert) in the verifier and the emulator; each refusal."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.emulate import EmulationError
from schedc.errors import CacheError, PlanError
from schedc.ir.kernel import (
    Binary,
    Fragment,
    FragmentConvert,
    FragmentMma,
    LaneReduce,
    MbarrierWait,
    PrivateArray,
    WarpgroupFence,
)
from schedc.ir.walk import walk_statements
from schedc.lower.wellformed import problems
from schedc.verify import emulate_function, run_function

from . import kit
from .conftest import require_gpu
from .plans import T, build, compile_function_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
import b2b_gemm  # noqa: E402


def _passed(reports) -> None:
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


CASES = {
    "fp16_128": dict(M=256, N1=128, K=128, N2=128),
    "fp16_64": dict(M=256, N1=64, K=64, N2=64),
    "fp16_mixed": dict(M=192, N1=64, K=192, N2=128, rows=64, stages=2),
    "bf16_128": dict(M=256, N1=128, K=128, N2=128, dtype=T.bfloat16),
    "not_persistent": dict(M=256, N1=64, K=128, N2=64, persistent=False),
    "one_role": dict(M=256, N1=128, K=256, N2=64, producer=False),
    "one_stage": dict(M=128, N1=64, K=64, N2=64, stages=1, producer=False, persistent=False),
    "b_streamed": dict(M=256, N1=128, K=192, N2=64, b_resident=False),
    "b_streamed_one_role": dict(M=192, N1=64, K=128, N2=128, rows=64, b_resident=False, producer=False),
    # S's columns in two tiles (a serial loop j inside the block): E's accumulator kept across j, D's rows
    # of each tile copied for it (its own full and empty barriers)
    "carried": dict(M=256, N1=256, K=64, N2=128, n1_tile=128, rows=64, stages=2, b_resident=False),
    "carried_one_role": dict(M=192, N1=128, K=64, N2=64, n1_tile=64, rows=128, stages=2, b_resident=False,
                             producer=False),
    "carried_two_groups": dict(M=256, N1=128, K=128, N2=128, n1_tile=64, stages=3, b_resident=False),
    # D's rows through a ring of their own: the next tile's copied while this one's are multiplied
    "carried_d_ring": dict(M=256, N1=384, K=64, N2=64, n1_tile=64, rows=64, stages=2, b_resident=False,
                           d_stages=2),
    "carried_d_ring_one_role": dict(M=192, N1=192, K=64, N2=64, n1_tile=64, rows=64, stages=2, b_resident=False,
                                    d_stages=3, producer=False),
}


def _plan(M, N1, K, N2, **options):
    return b2b_gemm.b2b_gemm(M, N1, K, N2, **options)


def test_an_activation_between_the_products_runs_on_the_registers():
    """E = relu(A @ B + bias) @ D: the bias and the ReLU on the first product's float32 registers
    (a fused nest between the two), before they are converted into the second's A."""
    model, fn = compile_function_plan(*b2b_gemm.relu_mlp(256, 64))
    _passed(emulate_function(model, fn, None, seed=3))
    body = list(walk_statements(fn.kernels[0].body))
    maps = [n for n, s in enumerate(body) if type(s).__name__ == "FragmentMap"]
    converts = [n for n, s in enumerate(body) if isinstance(s, FragmentConvert)]
    assert maps and max(maps) < min(converts)


def test_a_nest_between_the_products_writing_another_array_is_refused():
    """The middle nest writes Y at S's element: the registers would hold Y's values, not S's."""
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(128, 64))

    def middle(S, i, j):
        Y[i, j] = S[i, j] * 2.0

    with pytest.raises(PlanError, match=r"fused schedule 1 writes Y; between the products of a chain the nests are "
                                        r"element-wise on S, the registers the second product reads"):
        compile_function_plan(*_script(middle=middle, extra=(Y,)))


SOFTMAX = {
    "fp16_64": dict(M=256, N=64),
    "bf16_128_scaled": dict(M=192, N=128, scale=0.125, dtype=T.bfloat16, rows=64),
    "one_role": dict(M=256, N=64, producer=False, persistent=False),
}


@pytest.mark.parametrize("case", SOFTMAX)
def test_a_row_softmax_between_the_products_matches_the_reference(case):
    """E = softmax(A @ B) @ D: the row's maximum and sum in row vectors held by the threads of
    the row (each thread's partial over its elements, combined over the row's four lanes by
    shuffles), the exponentials and the division on S's registers; every block emulated against
    the float64 reference, no race."""
    options = dict(SOFTMAX[case])
    model, fn = compile_function_plan(*b2b_gemm.softmax_b2b(options.pop("M"), options.pop("N"), **options))
    _passed(emulate_function(model, fn, None, seed=5))


def test_row_vectors_live_in_registers_and_meet_by_shuffles():
    """No row vector is an argument or a buffer: each is a thread array of the rows it holds (rows
    r and r + 8 of a warpgroup's tile), its reductions combined over lanes 1 and 2 apart."""
    model, fn = compile_function_plan(*b2b_gemm.softmax_b2b(256, 64))
    kernel = fn.kernels[0]
    body = list(walk_statements(kernel.body))
    assert {p.name for p in kernel.params} == {"A", "B", "D", "E"}
    arrays = {s.name: s.shape for s in body if isinstance(s, PrivateArray) and "_rows" in s.name}
    assert len(arrays) == 2 and set(arrays.values()) == {(9,)}
    reduces = [s for s in body if isinstance(s, LaneReduce)]
    assert [(r.op, r.slots, r.distances) for r in reduces] == [("max", (0, 8), (1, 2)), ("+", (0, 8), (1, 2))]


def _row_script(step):
    """The b2b plan with one step between the products (``step(S, R, i, j)``, R a TEMP row vector)."""
    R = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(256,))
    return b2b_gemm.b2b_gemm(256, 64, 64, 64, between=[lambda S, i, j: step(S, R, i, j)])


def test_a_row_vector_read_before_written_is_refused():
    def step(S, R, i, j):
        R[i] = acc.max(R[i], S[i, j])

    with pytest.raises(PlanError, match=r"\w+ is Role.TEMP .* the nest reads \w+\[0\] .* before any "
                                        r"iteration writes it"):
        compile_function_plan(*_row_script(step))


def test_a_row_vector_taking_a_value_that_changes_along_the_row_is_refused():
    def step(S, R, i, j):
        R[i] = S[i, j] * 2.0

    with pytest.raises(PlanError, match=r"row vector \w+\[i\] from values that change along the row: a row "
                                        r"vector takes a value the same for every column"):
        compile_function_plan(*_row_script(step))


@pytest.mark.parametrize("case", CASES)
def test_back_to_back_gemm_matches_the_reference_in_the_emulator(case):
    """Every block of every shape: E within the 16-bit tolerance of the float64 reference, which
    rounds S to the operand type as the cast says; no race between the ring, D's tile, the
    conversion and the two products."""
    model, fn = compile_function_plan(*_plan(**CASES[case]))
    _passed(emulate_function(model, fn, None, seed=5))


def test_a_moving_second_b_takes_its_stages_in_turn():
    """D's rows of each tile of S through a ring of two stages: two full and two empty barriers,
    D's buffer two tiles deep, the tile of C number t in stage t % 2 with parity (t / 2) % 2."""
    model, fn = compile_function_plan(*_plan(**CASES["carried_d_ring"]))
    kernel = fn.kernels[0]
    shared = {b.name: b.shape for b in kernel.shared}
    assert shared["chain_full"] == shared["chain_empty"] == (2,) and shared["D_shared"][0] == 2
    waits = [s for s in walk_statements(kernel.body) if isinstance(s, MbarrierWait) and s.barrier == "chain_full"]
    assert len(waits) == 1 and isinstance(waits[0].index, Binary) and waits[0].index.op == "%"


def test_stages_of_a_second_b_copied_once_are_refused():
    """D's whole tile is the same for every tile of the kernel: copied once, it has no stages to turn."""
    with pytest.raises(PlanError, match=r"cache\(D, index=l, location=SHARED, stages=2\).*copied once, at its "
                                        r"start: leave stages out"):
        compile_function_plan(*_plan(256, 64, 64, 64, d_stages=2))


def test_the_intermediate_never_leaves_the_registers():
    """S is TEMP: not an argument, no buffer, no store; the second product's A tiles are registers
    converted from the first's accumulator, every pass of its k one 16-column window."""
    model, fn = compile_function_plan(*_plan(256, 128, 128, 128))
    kernel = fn.kernels[0]
    assert [p.name for p in kernel.params if p.name in "ABDES"] == ["A", "B", "D", "E"]
    body = list(walk_statements(kernel.body))
    converts = [s for s in body if isinstance(s, FragmentConvert)]
    assert [c.first for c in converts] == list(range(0, 128, 16))
    registers = {s.name for s in body if isinstance(s, Fragment) and s.in_registers}
    assert {c.fragment for c in converts} == registers
    chained = [s for s in body if isinstance(s, FragmentMma) and s.a in registers]
    assert len(chained) == 8 and {s.d for s in chained} == {"_e"}
    assert not any(getattr(s, "buffer", "") == "S" for s in body)


def test_the_second_wgmma_reads_its_a_from_registers_in_the_cuda_text(tmp_path):
    """The CUDA: the register form of wgmma (four 32-bit A registers, B from a descriptor),
    the packing of two float32 elements into one register, compiled by NVRTC for sm_90a."""
    build(*_plan(256, 64, 64, 64), "b2b", tmp_path)
    source = (tmp_path / "b2b.cu").read_text()
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in source
    assert "const unsigned (&a)[4], unsigned long long b" in source
    assert "_p3[3] = schedc_pack2_float16(_c_0[30], _c_0[31]);" in source
    assert (tmp_path / "b2b.cubin").exists()


def test_the_same_script_gives_the_same_cuda(tmp_path):
    for n in (1, 2):
        build(*_plan(256, 64, 64, 64), "b2b", tmp_path / str(n))
    assert (tmp_path / "1" / "b2b.cu").read_bytes() == (tmp_path / "2" / "b2b.cu").read_bytes()


def test_a_chained_wgmma_without_a_fence_after_the_conversion_is_a_race():
    """The conversion writes the A registers: the emulator reports a wgmma on them without a
    wgmma.fence between (the fence the lowering puts after E's accumulator is set up is removed)."""
    model, fn = compile_function_plan(*_plan(128, 64, 64, 64, rows=64, persistent=False))
    kernel = fn.kernels[0]
    seen = []

    def drop(s):
        previous = seen[-1] if seen else None
        seen.append(s)
        after_fill = type(previous).__name__ == "FragmentFill" and previous.fragment == "_e"
        return () if isinstance(s, WarpgroupFence) and after_fill else (s,)

    broken = dataclasses.replace(kernel, body=kit.rewrite(kernel.body, drop))
    assert len(list(walk_statements(broken.body))) == len(list(walk_statements(kernel.body))) - 1
    with pytest.raises(EmulationError, match=r"race: a wgmma on the (accumulator _e|A tile _p0), written since the "
                                             r"warpgroup's last wgmma.fence"):
        emulate_function(model, dataclasses.replace(fn, kernels=(broken,)), 1, seed=0)


def test_the_verifier_checks_a_conversion():
    """A conversion into a tile that is not a register A tile, or past the accumulator's columns."""
    _, fn = compile_function_plan(*_plan(128, 64, 64, 64, rows=64, persistent=False))
    kernel = fn.kernels[0]
    assert not problems(kernel)

    def shifted(s):
        return (dataclasses.replace(s, first=64),) if isinstance(s, FragmentConvert) and s.first == 48 else (s,)

    def in_shared(s):
        return (dataclasses.replace(s, in_registers=False),) if isinstance(s, Fragment) and s.name == "_p0" else (s,)

    for change, message in ((shifted, "columns 64..79 of a 64-column tile"),
                            (in_shared, "a wgmma A tile from a wgmma accumulator")):
        found = problems(dataclasses.replace(kernel, body=kit.rewrite(kernel.body, change)))
        assert any(message in p for p in found), found


def _script(second_value=None, s_role=acc.Role.TEMP, second_loops=None, passes=None, fuse=True, teams=1,
            e_type=T.float16, middle=None, extra=(), j_tile=None, first_op=acc.MMAFragmentOp.SET, k_extent=64):
    """The b2b plan of 128 x 64 x 64 x 64 with one thing changed (``k_extent``: the first nest's k
    over the first ``k_extent`` columns of A and rows of B)."""
    F16 = T.float16
    N = 64
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(128, N))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(N, N), layout=acc.Array.Layout.FIRST_MAJOR)
    D = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(N, N), layout=acc.Array.Layout.FIRST_MAJOR)
    S = acc.Array(role=s_role, element_type=T.float32, shape=(128, N))
    E = acc.Array(role=acc.Role.OUTPUT, element_type=e_type, shape=(128, N))
    first = acc.Nest(shape=(128, N, k_extent))
    i, j, k = first.get_indices()

    @first.iteration_logic
    def _():
        S[i, j] += A[i, k] * B[k, j]

    second = acc.Nest(shape=(128, N, N))
    i2, j2, l2 = second.get_indices()

    @second.iteration_logic
    def _():
        E[i2, l2] += (second_value or (lambda S, D, i, j, l: acc.cast(S[i, j], F16) * D[j, l]))(S, D, i2, j2, l2)

    shape = acc.MMAShape.M64xN64xK16_B1
    target = b2b_gemm.target
    if not fuse:
        schedule = first.create_schedule()
        i, j, k = schedule.get_indices()
        ii = schedule.split(i, 64)
        iii, jj, kk = schedule.tile({ii: 64, j: 64, k: 16})
        plan = schedule.create_plan(target)
        plan.tensorize(indices=(iii, jj, kk), mma_shape=shape)
        plan.tensorize(indices=(iii, jj, kk), mma_shape=shape)
        return plan, (A, B, S)
    nests = [first.create_schedule()]
    if middle is not None:
        between = acc.Nest(shape=(128, N))
        i1, j1 = between.get_indices()

        @between.iteration_logic
        def _():
            middle(S, i1, j1)

        nests.append(between.create_schedule())
    schedule = acc.fuse((*nests, second.create_schedule()), partial=2)
    f, i, j, k, l = schedule.get_indices()
    ii = schedule.split(i, 64)
    kk = schedule.split(k, 32)
    if j_tile:  # S's columns in tiles of j_tile, the fusing index still outside j: refused
        shape = acc.MMAShape[f"M64xN{j_tile}xK16_B1"]
        jt = schedule.split(j, j_tile)
        iii, jj, kkk = schedule.tile({ii: 64, jt: j_tile, kk: 16})
        ll = schedule.split(l, 64)
        schedule.reorder(i, f, ii, j, jt, k, kk, l, iii, jj, ll, kkk)
    else:
        iii, jj, kkk = schedule.tile({ii: 64, j: 64, kk: 16})
        ll = schedule.split(l, 64)
        schedule.reorder(i, f, ii, j, k, kk, l, iii, jj, ll, kkk)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X})
    start = acc.MMAFragmentOp.SET
    plan.tensorize(indices=(iii, jj, kkk), mma_shape=shape, prologue_op=first_op)
    loops = second_loops((iii, jj, kkk, ll)) if second_loops else (iii, ll, jj)
    second_shape = acc.MMAShape.M64xN64xK16_B1
    plan.tensorize(indices=loops, mma_shape=second_shape, num_total_passes=passes or (j_tile or 64) // 16,
                   prologue_op=start)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(D, index=l, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA)
    plan.cache(S, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    plan.cache(E, index=l, location=target.MemorySpace.MMA_FRAGMENT, element_type=T.float32)
    plan.warp_specialize(True, teams=teams)
    if teams > 1:
        plan.persistent()
    args = (A, B, D, E) if s_role is acc.Role.TEMP else (A, B, D, E, S)
    return plan, (*args, *extra)


def test_the_refusal_script_builds_as_written():
    """The scripts the refusals below change are a plan that builds and emulates."""
    model, fn = compile_function_plan(*_script())
    _passed(emulate_function(model, fn, None, seed=2))


def test_a_first_product_over_fewer_columns_than_its_arrays_emulates():
    """k over 40 of A's 64 columns, in steps of 16: the last step's columns past 40 lie inside A and
    B but outside the nest's footprint, which the copies' tensor maps end at (zeros past it)."""
    model, fn = compile_function_plan(*_script(k_extent=40))
    _passed(emulate_function(model, fn, None, seed=2))


def test_a_second_tensorize_outside_a_fused_schedule_is_refused():
    with pytest.raises(PlanError, match=r"the plan is already tensorized: a second product is tensorized in a fused "
                                        r"schedule"):
        _script(fuse=False)


def test_a_chained_intermediate_that_is_an_argument_is_refused():
    with pytest.raises(PlanError, match=r"S is Role.INPUT_OUTPUT: a chain keeps the first product's result in "
                                        r"registers alone; make S Role.TEMP"):
        compile_function_plan(*_script(s_role=acc.Role.INPUT_OUTPUT))


def test_a_chained_product_without_the_cast_is_refused():
    with pytest.raises(PlanError, match=r"write acc.cast\(S\[...\], float16\): the tensor cores take it as a 16-bit "
                                        r"A tile"):
        compile_function_plan(*_script(second_value=lambda S, D, i, j, l: S[i, j] * D[j, l], e_type=T.float32))


def test_a_chained_product_over_other_loops_is_refused():
    """The second product's k must be the first's n (here its n is the first's n instead)."""
    with pytest.raises(PlanError, match=r"they must be the first's m and n loops \(iii, jj\)"):
        compile_function_plan(*_script(second_loops=lambda x: (x[0], x[1], x[3])))


def test_a_chained_product_with_too_few_passes_is_refused():
    with pytest.raises(PlanError, match=r"jj has 64 iterations; M64xN64xK16_B1 with 2 pass\(es\) needs 32"):
        compile_function_plan(*_script(passes=2))


def test_tiles_of_the_intermediate_before_the_fusing_index_are_refused():
    """j in two tiles of 32 with the fusing index outside j: the schedule computes S's 64 columns
    before the second product, which a warpgroup's 32-column tile cannot hold."""
    with pytest.raises(PlanError, match=r"j takes several values after the fusing index: the schedule computes S over "
                                        r"all of them before the second product reads it"):
        compile_function_plan(*_script(j_tile=32))


def test_a_carried_accumulator_is_set_up_once_and_stored_once():
    """With S in two tiles, E's fragment is declared and stored outside the loop over them, and D's
    tile is copied once per tile of S through its own barriers."""
    _, fn = compile_function_plan(*_plan(**CASES["carried"]))
    body = list(walk_statements(fn.kernels[0].body))
    loops = [s for s in body if type(s).__name__ == "Loop" and s.var == "j"]
    assert len(loops) == 2  # the consumers' and the producer's
    inside = list(walk_statements(loops[0].body)) + list(walk_statements(loops[1].body))
    assert not any(isinstance(s, Fragment) and s.name == "_e" for s in inside)
    assert any(isinstance(s, Fragment) and s.name == "_e" for s in body)
    assert any(getattr(s, "barrier", "") == "chain_full" for s in inside if type(s).__name__ == "TmaLoad")


def test_a_chain_with_ping_pong_teams_is_refused():
    with pytest.raises(PlanError, match=r"warp_specialize\(teams=2\) with a chain of products is not built"):
        compile_function_plan(*_script(teams=2))


GPU_CASES = ("fp16_128", "fp16_mixed", "bf16_128", "b_streamed", "one_role", "carried", "carried_one_role",
             "carried_d_ring", "carried_d_ring_one_role")


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(SOFTMAX))
def test_a_row_softmax_between_the_products_on_the_gpu(case, tmp_path):
    options = dict(SOFTMAX[case])
    build(*b2b_gemm.softmax_b2b(options.pop("M"), options.pop("N"), **options), "b2b", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "b2b.hat").functions["b2b"], seed=7))


@pytest.mark.gpu
@pytest.mark.parametrize("case", [*GPU_CASES, "relu_mlp"])
def test_back_to_back_gemm_on_the_gpu(case, tmp_path):
    build(*(b2b_gemm.relu_mlp(256, 128) if case == "relu_mlp" else _plan(**CASES[case])), "b2b", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "b2b.hat").functions["b2b"], seed=7))


def test_the_sample_emulates_at_a_reduced_size():
    """The sample's own plan at 1,024 rows (its functions are 65,536), two blocks emulated."""
    model, fn = compile_function_plan(*b2b_gemm.b2b_gemm(1024, 128, 128, 128))
    reports = emulate_function(model, fn, 2, seed=1)
    _passed(reports)
    assert np.isfinite([r.relative_error for r in reports]).all()


def test_the_widest_chain_converts_before_its_second_accumulator_is_set_up():
    """S's 64 x 256 tile (128 registers a thread), its 16-bit copy (64) and E's 64 x 256 tile (128)
    fit a thread's 255 only because S is dead once copied: the copies come before E's fragment."""
    _, fn = compile_function_plan(*_plan(128, 256, 64, 256, rows=64, stages=1))
    body = list(walk_statements(fn.kernels[0].body))
    last_convert = max(n for n, s in enumerate(body) if isinstance(s, FragmentConvert))
    e_declared = next(n for n, s in enumerate(body) if isinstance(s, Fragment) and s.name == "_e")
    assert last_convert < e_declared


def test_the_second_products_columns_in_several_tiles_are_refused():
    """l in two tiles of 64 after the fusing index: E's tiles would be made one after another
    from the same tile of S, which the lowering does not build: a refusal, not an internal error."""
    plan, args = _plan_n2_tiles()
    with pytest.raises(PlanError, match=r"l takes several values after the fusing index and E depends on it: .* "
                                        r"cover E's columns with one tile of the second product"):
        compile_function_plan(plan, args)


def _plan_n2_tiles():
    """The sample's plan (M 128, N1 = K = 64, N2 = 128) with l split by 64."""
    F16 = T.float16
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(128, 64))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(64, 64))
    D = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(64, 128))
    S = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128, 64))
    E = acc.Array(role=acc.Role.OUTPUT, element_type=F16, shape=(128, 128))
    first, second = acc.Nest(shape=(128, 64, 64)), acc.Nest(shape=(128, 64, 128))
    i, j, k = first.get_indices()
    i2, j2, l2 = second.get_indices()

    @first.iteration_logic
    def _():
        S[i, j] += A[i, k] * B[k, j]

    @second.iteration_logic
    def _():
        E[i2, l2] += acc.cast(S[i2, j2], F16) * D[j2, l2]

    schedule = acc.fuse((first.create_schedule(), second.create_schedule()), partial=2)
    f, i, j, k, l = schedule.get_indices()
    ii = schedule.split(i, 64)
    kk = schedule.split(k, 32)
    iii, jj, kkk = schedule.tile({ii: 64, j: 64, kk: 16})
    ll = schedule.split(l, 64)
    schedule.reorder(i, f, ii, j, k, kk, l, iii, jj, ll, kkk)
    target = b2b_gemm.target
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X})
    plan.tensorize(indices=(iii, jj, kkk), mma_shape=acc.MMAShape.M64xN64xK16_B1, prologue_op=acc.MMAFragmentOp.SET)
    plan.tensorize(indices=(iii, ll, jj), mma_shape=acc.MMAShape.M64xN64xK16_B1, num_total_passes=4,
                   prologue_op=acc.MMAFragmentOp.SET)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(D, index=ll, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA)
    plan.cache(S, index=k, location=target.MemorySpace.MMA_FRAGMENT)
    plan.cache(E, index=l, location=target.MemorySpace.MMA_FRAGMENT, element_type=T.float32)
    return plan, (A, B, D, E)


def test_a_chain_past_the_registers_a_consumer_thread_may_hold_is_refused():
    """S's 256-column tile (128 registers) and E's 64 x 256 accumulator (128) kept across j beside
    the 16-bit copy (64): past the 232 a consumer takes with setmaxnreg, refused at add (it failed
    in ptxas at build)."""
    with pytest.raises(PlanError, match=r"a consumer thread holds 128 registers of S's 64 x 256 tile, 64 of its 16-bit "
                                        r"copy and 128 of the second product's 64 x 256 tile \(kept across j, beside "
                                        r"both\): 320 and about 26 more, past the 232 a consumer thread may hold"):
        compile_function_plan(*_plan(256, 512, 64, 256, n1_tile=256, rows=64, stages=1, b_resident=False))


def test_a_chain_past_the_shared_memory_is_refused():
    """The sample's plan at N = 256: A's 6 stages, B and D whole (128 KB each) need 361472 bytes."""
    with pytest.raises(CacheError, match=r"D's tile \(131072 bytes\) beside the first product's TMA tiles \(A 98304, B "
                                         r"131072\) and their barriers needs 361472 bytes of shared memory per block; "
                                         r"NVIDIA H100 allows 232448"):
        compile_function_plan(*_plan(1024, 256, 256, 256))


@pytest.mark.parametrize("carried", [False, True])
def test_a_chain_over_a_run_time_number_of_rows(carried):
    """M known at run time (acc.create_dimensions): emulated at the rows the verifier picks."""
    M = acc.create_dimensions()
    options = dict(n1_tile=64, b_resident=False) if carried else {}
    plan, args = _plan(M, 128, 64, 64, rows=64, **options)
    model, fn = compile_function_plan(plan, (M, *args))
    _passed(emulate_function(model, fn, None, seed=1))


def test_an_a_tile_rewritten_while_a_wgmma_reads_it_is_a_race():
    """A conversion into _p0 right after the wgmma that reads it (before its group completes): the
    tensor cores may still read those registers."""
    model, fn = compile_function_plan(*_plan(128, 64, 64, 64, rows=64, persistent=False))
    kernel = fn.kernels[0]

    def again(s):
        if isinstance(s, FragmentMma) and s.a == "_p0":
            return (s, FragmentConvert("_p0", "_c_0", 0))
        return (s,)

    broken = dataclasses.replace(kernel, body=kit.rewrite(kernel.body, again))
    with pytest.raises(EmulationError, match=r"race: a conversion of the A tile _p0 while a wgmma on it is in flight"):
        emulate_function(model, dataclasses.replace(fn, kernels=(broken,)), 1, seed=0)


def test_a_chain_whose_first_fragments_start_undefined_is_told_to_set_them():
    """S is TEMP and the first product adds into it (prologue_op NONE): S is read before any write;
    the refusal names prologue_op=SET, the change a chain wants (not an INPUT_OUTPUT S, which a
    chain refuses)."""
    with pytest.raises(PlanError, match=r"S is Role.TEMP .* tensorize with prologue_op=MMAFragmentOp.SET"):
        compile_function_plan(*_script(first_op=acc.MMAFragmentOp.NONE))
