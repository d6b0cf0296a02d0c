"""Split-K: a loop of the reduction dimension bound to blocks, combined by a second kernel.

The emulator runs every kernel of the function in order; the reference is the plan's own nest,
so each test compares the combined C with ``C + A @ B`` (the prologue and epilogue ops once).
GPU tests (``gpu`` mark) build and compile on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc.errors import PlanError
from schedc.lower import split
from schedc.verify import emulate_function

from . import kit
from .conftest import require_gpu
from .plans import compile_function_plan, matmul_arrays, simt_matmul, tensor_matmul

T = acc.ScalarType
OPS = acc.MMAFragmentOp
WMMA, MMA_SYNC = acc.Instruction.WMMA, acc.Instruction.MMA_SYNC


def emulated(plan, args, blocks=None):
    model, function = compile_function_plan(plan, args)
    reports = emulate_function(model, function, blocks=blocks, seed=4)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    return function


def k_on_blocks(logic, *arrays, rows: int = 16, k: int = 64, part: int = 16):
    """The plan and args of a nest over (i, k) whose ``logic(i, k)`` writes ``arrays``: k split
    in parts of ``part`` with the outer loop on BLOCK_Z, i on threads."""
    nest = acc.Nest(shape=(rows, k))
    i, j = nest.get_indices()  # j: the dimension the statements sum over
    nest.iteration_logic(lambda: logic(i, j))
    s = nest.create_schedule()
    s.split(j, part)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({j: target.GridUnit.BLOCK_Z, i: target.GridUnit.THREAD_X})
    return plan, arrays


def f32(name: str, *shape):
    return acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=shape, name=name)


PLANS = {
    "simt": (lambda: simt_matmul(48, 64, 96, block=(16, 16), splits=3), 3),
    "simt_shared_fp16": (lambda: simt_matmul(32, 32, 128, block=(16, 16), dtype=T.float16, shared_k=16,
                                             splits=2), 3),
    "wmma_relu": (lambda: tensor_matmul(64, 64, 128, splits=4, epilogue_op=OPS.ReLU, instruction=WMMA), 2),
    "wmma_set_scale_fp16_c": (lambda: tensor_matmul(32, 64, 96, result=T.float16, splits=3, prologue_op=OPS.SET,
                                                    prologue_arg=0.5, epilogue_op=OPS.SCALE, epilogue_arg=2.0), 2),
    "mma_sync_shared_cached_c": (lambda: tensor_matmul(64, 32, 256, splits=2, k_split=32, shared_ab=True, cache_c=0,
                                                       instruction=MMA_SYNC), 2),
    "int8": (lambda: tensor_matmul(32, 32, 128, operand=T.int8, result=T.int32, splits=4,
                                   epilogue_op=OPS.SCALE, epilogue_arg=3.0), 2),
    "wgmma": (lambda: kit.hopper_matmul.matmul(128, 128, 512, block=(128, 128, 64), stages=2,
                                               output=T.float16, splits=4), 2),
    "wgmma_persistent_relu": (lambda: kit.hopper_matmul.matmul(256, 128, 384, block=(128, 128, 64), stages=2,
                                                               splits=3, persistent={"group": 2},
                                                               epilogue=(OPS.ReLU, 0.0)), 2),
    # each block's parts taken in turn by three consumer teams
    "wgmma_three_teams": (lambda: kit.hopper_matmul.matmul(192, 256, 384, block=(64, 128, 64), stages=3,
                                                           output=T.float16, splits=2, teams=3,
                                                           persistent={"group": 2, "blocks": 3}), 2),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_split_k_emulates_correctly(name):
    """Every kernel runs, the combined C equals the reference; SIMT plans clear the workspace
    first, tensorized ones start their accumulators at zero."""
    make, kernels = PLANS[name]
    function = emulated(*make())
    assert len(function.kernels) == kernels
    assert [k.name.split("__")[1] for k in function.kernels][-2:] == ["partial", "combine"]
    (space,) = function.workspaces
    assert space.kind == split.WORKSPACE and space.name == "C__partial"
    assert [p.name for p in function.caller_params] == ["A", "B", "C"]


def test_each_block_of_the_split_sums_its_part_of_k():
    """The partial kernel's blocks along z sum disjoint quarters of k into their own slices."""
    plan, args = simt_matmul(16, 16, 64, block=(16, 16), splits=4)
    model, function = compile_function_plan(plan, args)
    partial = function.kernels[1]
    assert partial.grid == (1, 1, 4)
    space = next(b for b in partial.params if b.kind == split.WORKSPACE)
    assert space.shape == (4, 16, 16) and space.dtype is T.float32
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((64, 16)).astype(np.float32)
    from schedc.codegen.emulate import emulate_sequence

    storage = {"A": a.ravel(), "B": b.ravel(), "C": np.zeros(256, np.float32)}
    run = emulate_sequence(function, storage)
    slices = run.storage["C__partial"].reshape(4, 16, 16)
    for z in range(4):
        np.testing.assert_allclose(slices[z], a[:, 16 * z:16 * z + 16] @ b[16 * z:16 * z + 16], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run.storage["C"].reshape(16, 16), a @ b, rtol=1e-5, atol=1e-5)


def test_workspace_is_float32_for_16_bit_c():
    plan, args = tensor_matmul(32, 32, 64, result=T.bfloat16, operand=T.bfloat16, splits=2)
    _, function = compile_function_plan(plan, args)
    (space,) = function.workspaces
    assert space.dtype is T.float32 and space.shape == (2, 32, 32)


def test_the_combine_applies_the_ops_once_after_the_sum():
    """ReLU of the partial sums would differ from ReLU of their total: the partial kernel has
    no epilogue, the combine applies it."""
    plan, args = tensor_matmul(32, 32, 64, splits=2, epilogue_op=OPS.ReLU)
    _, function = compile_function_plan(plan, args)
    from schedc.ir.kernel import FragmentApply
    from schedc.ir.walk import walk_statements

    partial, combine = function.kernels
    assert not any(isinstance(s, FragmentApply) and s.op == "relu" for s in walk_statements(partial.body))
    assert "max" in repr(combine.body)


def test_refused_when_the_statement_is_not_a_reduction():
    A, C = f32("A", 16, 64), f32("C", 16)

    def logic(i, k):
        C[i] = C[i] * A[i, k]

    with pytest.raises(PlanError, match=r"statement 1 \(C = \.\.\.\) is not a reduction C \+= \.\.\."):
        compile_function_plan(*k_on_blocks(logic, A, C))


def test_refused_when_the_split_does_not_divide_k():
    with pytest.raises(PlanError, match="k has 100 values, not a multiple of k's step 33"):
        compile_function_plan(*simt_matmul(16, 16, 100, block=(16, 16), splits=3))


def test_refused_when_an_inner_loop_of_k_is_bound():
    nest, args = matmul_arrays(16, 16, 64)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    kk = s.split(k, 16)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({kk: target.GridUnit.BLOCK_Z, i: target.GridUnit.THREAD_Y, j: target.GridUnit.THREAD_X})
    with pytest.raises(PlanError, match="bind the outer loop of a split of k"):
        compile_function_plan(plan, args)


def test_refused_when_two_arrays_accumulate():
    A, C, D = f32("A", 16, 64), f32("C", 16), f32("D", 16)

    def logic(i, k):
        C[i] += A[i, k]
        D[i] += A[i, k] * 2.0

    with pytest.raises(PlanError, match="accumulate into C, D"):
        compile_function_plan(*k_on_blocks(logic, A, C, D))


def test_refused_when_the_writes_leave_holes_in_their_box():
    A, C = f32("A", 32, 64), f32("C", 64)

    def logic(i, k):
        C[2 * i] += A[i, k]

    with pytest.raises(PlanError, match=r"C\[1\] is not written"):
        compile_function_plan(*k_on_blocks(logic, A, C, rows=32))


def test_a_row_sum_split_between_blocks():
    """A reduction that is not a product: s[i] += A[i, k]^2 over k split in 4 blocks."""
    A, S = f32("A", 40, 256), f32("S", 40)

    def logic(i, k):
        S[i] += A[i, k] * A[i, k]

    function = emulated(*k_on_blocks(logic, A, S, rows=40, k=256, part=64))
    assert function.kernels[-1].grid == (1, 1, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["simt", "wmma_relu", "wgmma", "wgmma_persistent_relu", "wgmma_three_teams"])
def test_split_k_on_the_gpu_is_correct_and_deterministic(name, tmp_path):
    """The GPU's C matches the reference and the emulator's; two calls on the same inputs give
    the same bits (the partial sums are added in one order)."""
    from schedc.verify import compare_with_emulator, run_function

    make, _ = PLANS[name]
    package = acc.Package()
    package.add(*make(), base_name=name)
    path = package.build(name, format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    fn = acc.load(path).functions[name]
    for reports in (run_function(fn, seed=5), compare_with_emulator(fn, seed=5)):
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    arrays = assert_the_same_bits_twice(fn, seed=6)
    first = fn.workspace_pointers()
    fn(*arrays)
    assert fn.workspace_pointers() == first  # allocated once


def assert_the_same_bits_twice(fn, seed: int) -> list:
    """Two calls of ``fn`` (A, B, C) on the same inputs give C's same bits; the inputs."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(p.shape).astype(p.dtype.numpy) for p in fn.function.arrays]
    results = []
    for _ in range(2):
        c = arrays[2].copy()
        fn(arrays[0], arrays[1], c)
        results.append(c)
    assert results[0].tobytes() == results[1].tobytes()
    return arrays


# -- programmatic dependent launch between the kernels ---------------------------------------------


def test_on_sm90_the_combine_starts_while_the_partial_sums_end():
    """Each kernel after the first is a dependent launch that waits first; each before the last
    lets the next start; the launcher launches it with the attribute."""
    from schedc.codegen.cuda import emit_launcher
    from schedc.ir.kernel import GridDependencyWait, LaunchDependents

    _, function = compile_function_plan(*simt_matmul(32, 32, 64, block=(16, 16), splits=2))
    clear, partial, combine = function.kernels
    assert [k.dependent_launch for k in function.kernels] == [False, True, True]
    assert isinstance(clear.body[0], LaunchDependents)
    assert isinstance(partial.body[0], GridDependencyWait) and isinstance(partial.body[1], LaunchDependents)
    assert isinstance(combine.body[0], GridDependencyWait)
    assert not any(isinstance(s, LaunchDependents) for s in combine.body)
    launcher = emit_launcher(function)
    assert launcher.count("cudaLaunchAttributeProgrammaticStreamSerialization") == 2
    assert f"cudaLaunchKernelEx(&config, {combine.name}, C, C__partial);" in launcher


def test_before_sm90_the_kernels_run_in_stream_order():
    target = acc.Target(acc.Target.Model.NVIDIA_A100)
    _, function = compile_function_plan(*simt_matmul(32, 32, 64, block=(16, 16), splits=2, target=target))
    from schedc.ir.kernel import GridDependencyWait, LaunchDependents
    from schedc.ir.walk import walk_statements

    assert not any(k.dependent_launch for k in function.kernels)
    assert not any(isinstance(s, GridDependencyWait | LaunchDependents) for k in function.kernels
                   for s in walk_statements(k.body))


def test_the_verifier_requires_a_dependent_kernel_to_wait_first():
    import dataclasses

    from schedc.ir.kernel import GridDependencyWait
    from schedc.lower.wellformed import function_problems, problems

    _, function = compile_function_plan(*simt_matmul(32, 32, 64, block=(16, 16), splits=2))
    clear, partial, combine = function.kernels
    assert function_problems(function) == []
    late = dataclasses.replace(combine, body=(*combine.body[1:], combine.body[0]))
    assert any("starts with Let, not GridDependencyWait" in p for p in problems(late))
    plain = dataclasses.replace(clear, body=(GridDependencyWait(), *clear.body))
    assert any("not launched as a dependent" in p for p in problems(plain))
    first = dataclasses.replace(function, kernels=(dataclasses.replace(clear, dependent_launch=True), partial,
                                                   combine))
    assert any("is launched as a dependent, with no kernel before it" in p for p in function_problems(first))


def test_refused_when_tensor_tiles_would_cross_into_the_next_part():
    """Parts of 48 values of k with 32-wide k steps: a whole tile would add the next part's values."""
    with pytest.raises(PlanError, match="each block's part of k is 48 values, which kk's steps of 32 do not divide"):
        compile_function_plan(*tensor_matmul(32, 32, 96, splits=2, k_split=32, shared_ab=True))


@pytest.mark.gpu
def test_the_sample_builds_and_verifies(tmp_path):
    """samples/split_k_matmul.py: two functions of two kernels each, the combine a dependent
    launch; compiled for sm_90a here, verified against the reference on the GPU."""
    from schedc.verify import run_function

    from .conftest import build_sample

    path = build_sample("split_k_matmul", tmp_path)
    package = acc.load(path)
    assert sorted(package.names) == ["matmul_bf16_1024x1024x14336", "matmul_bf16_1024x1024x14336_adds",
                                     "matmul_fp16_1024x1024x14336", "matmul_fp16_1024x1024x14336_adds"]
    for name in package.names:
        kernels = package[name].function.kernels
        if name.endswith("_adds"):  # one kernel: its blocks add into C
            assert [k.name.split("__")[1] for k in kernels] == ["partial"] and kernels[0].grid == (4, 8, 4)
            continue
        assert [k.name.split("__")[1] for k in kernels] == ["partial", "combine"]
        assert [k.dependent_launch for k in kernels] == [False, True] and kernels[0].grid[0] == 128
    require_gpu()
    for name in package.names:
        reports = run_function(package[name], seed=2)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


# -- split_k(deterministic=False): the blocks add their tiles into C by TMA reductions ---------


def adding(out=T.float16, prologue=None, epilogue=None, splits=4, block=(128, 128, 64), stages=2, **options):
    operand = T.bfloat16 if out is T.bfloat16 else T.float16
    plan, args = kit.hopper_matmul.matmul(256, 128, 512, operand, block=block, stages=stages, output=out,
                                          splits=splits, prologue=prologue, epilogue=epilogue, **options)
    plan.split_k(deterministic=False)
    return plan, args


ADDING = {
    "fp16": lambda: adding(),
    "f32_set": lambda: adding(T.float32, prologue=(OPS.SET, 0.0)),
    "bf16_scale_persistent": lambda: adding(T.bfloat16, prologue=(OPS.SCALE, 0.5), persistent={"group": 2}),
    # 104 columns: a 64-column box, then 40 columns through the tail's own boxes, added as well
    "fp16_partial_chunks": lambda: adding(block=(128, 104, 64)),
    # without a split: each block adds its tiles' whole sums into C, which it never loads
    "one_part_fp16_persistent": lambda: adding(splits=1, persistent={"group": 2}),
    "one_part_bf16_scale_partial_chunks": lambda: adding(T.bfloat16, prologue=(OPS.SCALE, 0.5), splits=1,
                                                         block=(128, 104, 64)),
    "one_part_f32_cluster": lambda: adding(T.float32, splits=1, block=(64, 128, 64), cluster=2,
                                           persistent={"group": 2}),
}


@pytest.mark.parametrize("name", sorted(ADDING))
def test_order_free_split_adds_tiles_into_c(name):
    """No workspace and no combine: the partial sums' TMA stores add into C (after a kernel that
    applies the prologue op to C, where there is one); the emulator adds as the TMA unit does."""
    from schedc.ir.kernel import TmaStore
    from schedc.ir.walk import walk_statements

    function = emulated(*ADDING[name]())
    assert not function.workspaces
    *before, partial = function.kernels
    assert [k.name.split("__")[1] for k in before] == (["prologue"] if "_set" in name or "_scale" in name else [])
    stores = [s for s in walk_statements(partial.body) if isinstance(s, TmaStore)]
    assert stores and all(s.adds for s in stores)


def test_order_free_split_is_refused_with_an_epilogue_op():
    with pytest.raises(PlanError, match=r"split_k\(deterministic=False\): the epilogue op ReLU needs each element's "
                                        "whole sum"):
        compile_function_plan(*adding(epilogue=(OPS.ReLU, 0.0)))


def test_order_free_split_is_refused_without_tma_tiles_of_c():
    plan, args = tensor_matmul(32, 32, 64, splits=2)
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match="each block adds its tiles into C by TMA reductions, from a wgmma plan whose A "
                                        "and B come through TMA rings; this plan has mma_sync tiles"):
        compile_function_plan(plan, args)
    simt, args = simt_matmul(32, 32, 64, block=(16, 16), splits=2)
    simt.split_k(deterministic=False)
    with pytest.raises(PlanError, match="from a wgmma plan's tiles; this plan is not tensorized"):
        compile_function_plan(simt, args)


def test_without_a_split_each_block_adds_its_tiles_into_c_and_never_loads_it():
    """One kernel of the function's own name, accumulators from zero, no TMA load of C and every
    store of C a TMA reduction; the emulator adds as the TMA unit does."""
    from schedc.ir.kernel import TmaLoad, TmaStore
    from schedc.ir.walk import walk_statements

    function = emulated(*adding(splits=1, persistent={"group": 2}))
    (kernel,) = function.kernels
    assert kernel.name.removesuffix("__gpu__") == function.name and not function.workspaces
    body = list(walk_statements(kernel.body))
    stores = [s for s in body if isinstance(s, TmaStore)]
    assert stores and all(s.adds for s in stores)
    maps = {s.tensor_map for s in body if isinstance(s, TmaLoad)}
    assert maps and not any(m.startswith("C") for m in maps), maps  # C is not read


def test_without_a_split_it_is_refused_for_plans_other_than_wgmma():
    simt, args = simt_matmul(32, 32, 64, block=(16, 16))
    simt.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"this plan is not tensorized: leave split_k\(deterministic=False\) out"):
        compile_function_plan(simt, args)
    plan, args = tensor_matmul(32, 32, 64)
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"this plan has mma_sync tiles: leave split_k\(deterministic=False\) out"):
        compile_function_plan(plan, args)


def test_without_a_split_it_is_refused_where_c_has_no_slots_beside_the_ring():
    """4 stages of 256 x 128 tiles take 192 KiB: two slots for each of four warpgroups do not fit
    (a plan that loads C lets its threads store it instead; one that adds must use TMA)."""
    with pytest.raises(PlanError, match=r"which need two slots a warpgroup for C's chunks beside the operand ring: "
                                        r"263168 bytes of shared memory \(the ring 196864\) where a block has 232448 "
                                        r"\(fewer stages or a smaller tile leave room\): leave "
                                        r"split_k\(deterministic=False\) out"):
        compile_function_plan(*adding(splits=1, block=(256, 128, 64), stages=4))


def test_adding_is_refused_for_a_c_that_tma_reductions_cannot_add():
    """float8 C (float32 fragments rounded to it) is not a type TMA reductions add; a column-major
    C's tiles do not run along its rows."""
    plan, args = kit.hopper_matmul.matmul(256, 128, 512, T.float8_e4m3, block=(128, 128, 128), stages=2,
                                          output=T.float8_e4m3, b_layout=acc.Array.Layout.LAST_MAJOR)
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"which add float32, float16, bfloat16 and 32-bit integers \(C is "
                                        r"float8_e4m3\): leave split_k\(deterministic=False\) out"):
        compile_function_plan(plan, args)
    plan, args = column_major_c()
    emulated(plan, args)  # C loaded and stored by the threads: correct
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"which need C's tiles along its rows \(its columns are 256 elements "
                                        r"apart\)"):
        compile_function_plan(plan, args)


def column_major_c():
    """fp16 C[256, 128] (column-major) += A @ B on 128 x 128 wgmma tiles, C's fragments outside k."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(256, 512))
    B = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(512, 128))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float16, shape=(256, 128),
                  layout=acc.Array.Layout.LAST_MAJOR)
    nest = acc.Nest(shape=(256, 128, 512))
    i, j, k = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i, j), C[i, j] + A[i, k] * B[k, j]))
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 128), s.split(j, 128), s.split(k, 64)
    iii = s.split(ii, 64)
    iiii, jjj, kkk = s.tile({iii: 64, jj: 128, kk: 16})
    s.reorder(i, j, ii, jj, k, kk, iii, iiii, jjj, kkk)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y})
    plan.tensorize(indices=(iiii, jjj, kkk), mma_shape=acc.MMAShape.M64xN128xK16_B1)
    for operand in (A, B):
        plan.cache(operand, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT, element_type=T.float32)
    return plan, (A, B, C)


def k_in_passes(c_role=acc.Role.INPUT_OUTPUT, on_blocks: bool = False):
    """A wgmma plan of fp16 C[256, 128] += A @ B (K = 512) whose k's outer loop takes 4 passes,
    serial or (``on_blocks``) on BLOCK_Z, outside the loop C's fragments are cached at."""
    nest, (A, B, C) = matmul_arrays(256, 128, 512, T.float16, T.float16, c_role=c_role)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ks = s.split(k, 128)
    ii, jj, kk = s.split(i, 128), s.split(j, 128), s.split(ks, 64)
    iii = s.split(ii, 64)
    iiii, jjj, kkk = s.tile({iii: 64, jj: 128, kk: 16})
    s.reorder(k, i, j, ii, jj, ks, kk, iii, iiii, jjj, kkk)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARPGROUP_Y,
               **({k: target.GridUnit.BLOCK_Z} if on_blocks else {})})
    plan.tensorize(indices=(iiii, jjj, kkk), mma_shape=acc.MMAShape.M64xN128xK16_B1)
    for operand in (A, B):
        plan.cache(operand, index=kk, location=target.MemorySpace.SHARED, stages=2, engine=acc.CopyEngine.TMA)
    plan.cache(C, index=ks, location=target.MemorySpace.MMA_FRAGMENT, element_type=T.float32)
    return plan, (A, B, C)


def test_adding_is_refused_where_k_passes_outside_the_cache_of_c():
    """k in 4 serial passes outside the loop C's fragments are cached at: each pass would add its
    tile into C on top of the passes before (it was accepted, and C summed again each pass)."""
    plan, args = k_in_passes()
    emulated(plan, args)  # C loaded and stored each pass: correct
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"k sums into C's fragments outside their cache \(plan.cache\(C, "
                                        r"index=\.\.\.\)\): each pass would add its tile into C by TMA reductions on "
                                        "top of the passes before; cache C at a loop outside k"):
        compile_function_plan(plan, args)


@pytest.mark.parametrize("on_blocks", [False, True], ids=["no split", "split"])
def test_adding_into_an_output_c_that_the_products_read_is_refused(on_blocks):
    """C of Role.OUTPUT with no SET prologue: the products would start from C's undefined values
    (it was accepted: the adds' own SET prologue hid the read from the check)."""
    plan, args = k_in_passes(acc.Role.OUTPUT, on_blocks)
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"C is Role.OUTPUT but the nest reads C\[0, 0\]"):
        compile_function_plan(plan, args)


def test_without_a_split_it_is_refused_with_an_epilogue_op():
    with pytest.raises(PlanError, match="the epilogue op ReLU applies to each element's new value, which the TMA "
                                        "reduction makes in L2"):
        compile_function_plan(*adding(epilogue=(OPS.ReLU, 0.0), splits=1))


def test_without_a_split_it_is_refused_where_the_blocks_would_not_only_add():
    def plan_of(logic):
        A, C = f32("A", 16, 64), f32("C", 16)
        nest = acc.Nest(shape=(16, 64))
        i, j = nest.get_indices()
        nest.iteration_logic(lambda: logic(A, C, i, j))
        target = acc.Target(acc.Target.Model.NVIDIA_H100)
        plan = nest.create_schedule().create_plan(target)
        plan.bind({i: target.GridUnit.THREAD_X})
        plan.split_k(deterministic=False)
        return plan, (A, C)

    def assign(A, C, i, j):
        C[i] = A[i, j]

    def reads(A, C, i, j):  # X reads C: not a reduction either
        C[i] += A[i, j] * C[i]

    def two(A, C, i, j):
        C[i] += A[i, j]
        A[i, 0] += C[i]

    with pytest.raises(PlanError, match=r"statement 1 \(C = \.\.\.\) is not a reduction C \+= \.\.\."):
        compile_function_plan(*plan_of(assign))
    with pytest.raises(PlanError, match=r"statement 1 \(C = \.\.\.\) is not a reduction"):
        compile_function_plan(*plan_of(reads))
    with pytest.raises(PlanError, match="the statements accumulate into A, C; the blocks add the sums of one array"):
        compile_function_plan(*plan_of(two))


def test_without_a_split_a_prologue_op_needs_fixed_sizes():
    M = acc.create_dimensions()
    plan, args = kit.hopper_matmul.matmul(M, 128, 256, T.float16, block=(128, 128, 64), stages=2, output=T.float16,
                                          prologue=(OPS.SCALE, 0.5))
    plan.split_k(deterministic=False)
    with pytest.raises(PlanError, match=r"the prologue op SCALE would run as a kernel over C's written box, which "
                                        r"run-time sizes \(M\) leave unknown"):
        compile_function_plan(plan, (M, *args))


def test_without_a_split_run_time_sizes_add_into_c():
    M = acc.create_dimensions()
    plan, args = kit.hopper_matmul.matmul(M, 128, 256, T.float16, block=(128, 128, 64), stages=2, output=T.float16,
                                          persistent={"group": 2})
    plan.split_k(deterministic=False)
    model, function = compile_function_plan(plan, (M, *args))
    assert [p.name for p in function.params][:4] == ["M", "A", "B", "C"]  # Package.add's order
    for rows in (1, 200):
        reports = emulate_function(model, function, blocks=None, seed=3, sizes={"M": rows})
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_the_race_check_lets_only_adds_meet():
    """The partial model's blocks write the same elements of C: accepted as adds, refused as a
    race once the stores are plain again."""
    import dataclasses

    from schedc import poly
    from schedc.frontend.freeze import freeze
    from schedc.package.build import name_arrays

    plan, args = adding()
    name_arrays("t", plan, args, "mm")
    model = freeze(plan, "mm", args)
    (partial,) = split.models(model, split.find(model))
    bound = [n for b in partial.bindings for n in b.loops]
    assert poly.find_race(partial, bound, frozenset({"C"})) is None
    race = poly.find_race(dataclasses.replace(partial, adds_into=""), bound)
    assert race is not None and race.array == "C"


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ADDING))
def test_order_free_split_on_the_gpu(name, tmp_path):
    """The GPU's TMA reductions add every block's tile into C: C matches the reference and the
    emulator's within the tolerance (the order of the adds, and so the rounding, may differ)."""
    from schedc.verify import compare_with_emulator, run_function

    package = acc.Package()
    package.add(*ADDING[name](), base_name=name)
    path = package.build(name, format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    fn = acc.load(path).functions[name]
    for reports in (run_function(fn, seed=7), compare_with_emulator(fn, seed=7)):
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    if name.startswith("one_part"):  # each element added to once: the same bits every call
        assert_the_same_bits_twice(fn, seed=8)


def test_a_sum_split_into_parts_of_one_value():
    """B[0] += A[i] with i itself on BLOCK_Z (random tester seed 5402 #1841: an internal error):
    each block's part is one value of i, and the dimension numbers the parts."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.int64, shape=(2,))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.int64, shape=(1,))
    nest = acc.Nest(shape=(2,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[0] += A[i]

    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = nest.create_schedule().create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Z})
    function = emulated(plan, (A, B))
    assert function.kernels[1].grid == (1, 1, 2)


def test_each_stream_has_its_own_workspace(device_allocations):
    """Calls on one stream reuse their workspace (they run one after another); a call on another
    stream gets its own, so calls on two streams may overlap."""
    from schedc.package import loader

    model, function = compile_function_plan(*simt_matmul(32, 32, 64, block=(16, 16), splits=2))
    fn = loader.Function(None, loader.FunctionInfo("f", model, function, {}))
    first = fn.workspace_pointers(0)
    assert fn.workspace_pointers(0) == first and fn.workspace_pointers(0x55) != first
    assert device_allocations == [2 * 32 * 32 * 4] * 2


def test_sampled_blocks_of_a_split_k_function_are_compared_where_they_wrote():
    """The combine kernel's blocks run over rows of C, not the plan's tiles: a sample of them is
    compared with the whole reference on the elements they wrote (once a false mismatch)."""
    plan, args = kit.hopper_matmul.matmul(256, 256, 1024, block=(128, 128, 64), stages=2, output=acc.ScalarType.float16,
                                          splits=2)
    model, function = compile_function_plan(plan, args)
    (report,) = emulate_function(model, function, blocks=2, seed=1)
    assert report.passed and report.compared == 2 * 256, report


def test_a_sample_of_blocks_adding_by_tma_reductions_is_compared_with_whole_sums():
    """k in 2 parts that add into C by TMA reductions: a sampled block brings its tile's other
    part, and the tile is compared with the whole sum (it was compared part by part: a false
    mismatch)."""
    plan, args = kit.hopper_matmul.matmul(512, 256, 256, acc.ScalarType.float16, block=(128, 128, 64), stages=3,
                                          output=acc.ScalarType.float16, splits=2)
    plan.split_k(deterministic=False)
    model, fn = compile_function_plan(plan, args)
    reports = emulate_function(model, fn, [(0, 0, 0), (1, 3, 1)], seed=2)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
