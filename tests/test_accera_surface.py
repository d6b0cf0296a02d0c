"""Accera's names that schedc keeps (issue 14): MMAShape's members, the nearest NVIDIA shape in
the refusal of an AMD one, ``mma_shape_to_tuple``, the target's shared-memory limits."""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc import PlanError, TargetError

from .plans import matmul_arrays

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
ACCERA_SHAPES = ("M64xN64xK1_B4", "M64xN64xK1_B2", "M32xN32xK2_B1", "M16xN16xK4_B1", "M64xN64xK2_B4",
                 "M64xN64xK2_B2", "M32xN32xK4_B1", "M16xN16xK8_B1", "M64xN64xK4_B4", "M64xN64xK4_B2",
                 "M32xN32xK8_B1", "M16xN16xK16_B1", "M32xN8xK16_B1", "M8xN32xK16_B1")


def test_every_accera_mma_shape_is_a_member():
    names = {s.name for s in acc.MMAShape}
    assert set(ACCERA_SHAPES) <= names
    assert names - set(ACCERA_SHAPES) == {f"M64xN{n}xK{k}_B1" for n in range(8, 257, 8) for k in (16, 8, 32)} | {
        "M16xN16xK32_B1"}  # wgmma, and mma.sync's 8-bit floats (sm_89)
    assert acc.MMAShape.M64xN64xK1_B4.mnk == (64, 64, 1) and acc.MMAShape.M64xN64xK1_B4.blocks == 4


@pytest.mark.parametrize("shape", [s for s in ACCERA_SHAPES if getattr(acc.MMAShape, s) not in
                                   H100.tensor_core_info.supported_shapes])
def test_amd_shapes_are_refused_with_the_nearest_nvidia_shape(shape):
    mma = getattr(acc.MMAShape, shape)
    message = rf"NVIDIA H100 tensor cores have no {shape} \(an AMD MFMA shape\); the nearest shapes it has: M\w+ for float16"
    with pytest.raises(TargetError, match=message):
        H100.tensor_core_info.compute_tensor_splits(mma)
    nest, _ = matmul_arrays(64, 64, 64, acc.ScalarType.float16, acc.ScalarType.float32)
    i, j, k = nest.get_indices()
    schedule = nest.create_schedule()
    ii, jj, kk = schedule.tile({i: 16, j: 16, k: 16})
    plan = schedule.create_plan(H100)
    with pytest.raises(PlanError, match=message):
        plan.tensorize(indices=(ii, jj, kk), mma_shape=mma)


def test_the_nearest_shape_is_the_closest_in_m_n_and_k_for_each_operand_type(v100):
    info = v100.tensor_core_info  # no tf32 shape before sm_80
    assert info.missing(acc.MMAShape.M16xN16xK8_B1).endswith("the nearest shapes it has: M16xN16xK16_B1 for float16")
    assert H100.tensor_core_info.missing(acc.MMAShape.M16xN16xK4_B1).endswith(
        "M16xN16xK16_B1 for float16, bfloat16, int8 and uint8; M16xN16xK8_B1 for float32 (tf32); "
        "M16xN16xK32_B1 for float8_e4m3 and float8_e5m2")


def test_mma_shape_to_tuple():
    assert H100.tensor_core_info.mma_shape_to_tuple(acc.MMAShape.M32xN8xK16_B1) == (32, 8, 16)
    with pytest.raises(TargetError, match="mma_shape must be an MMAShape"):
        H100.tensor_core_info.mma_shape_to_tuple("M32xN8xK16_B1")


def test_shared_memory_limits_per_block():
    assert (H100.max_shared_memory_per_block, H100.max_static_shared_memory_per_block) == (232448, 49152)
    a100 = acc.Target(acc.Target.Model.NVIDIA_A100)
    assert a100.max_shared_memory_per_block == 166912


def test_accera_target_fields():
    """Accera's GPU targets fill family and max_registers_per_block and leave its CPU fields at
    their defaults; what it has no value for is refused with the reason, not an AttributeError."""
    a100 = acc.Target(acc.Target.Model.NVIDIA_A100)
    assert (a100.family, H100.family, a100.max_registers_per_block) == ("Ampere", "Hopper", 65536)
    assert (a100.architecture, a100.cache_sizes, a100.num_threads, a100.vector_bytes, a100.vector_registers) == \
        (None, [], 0, 0, 1)
    a100.extensions.append("x")
    assert a100.extensions == []  # each read a fresh default
    with pytest.raises(TargetError, match=r"Target\(NVIDIA_A100\).default_block_size: Accera's documentation names"):
        _ = a100.default_block_size
    with pytest.raises(TargetError, match="frequency_GHz: schedc's targets carry no clock frequency"):
        _ = a100.frequency_GHz
    with pytest.raises(AttributeError):
        _ = a100.not_a_field


ACCERA_EXPORTS = [  # accera/__init__.py, its Constants and lang at 0319f5a
    "Target", "KNOWN_DEVICES", "KNOWN_CPUS", "KNOWN_GPUS", "DelayedParameter", "create_parameters",
    "create_parameter_grid", "Package", "CompilerOptions", "ScalarType", "AllocateFlags", "Role", "abs", "max",
    "min", "ceil", "floor", "sqrt", "exp", "fast_exp", "fast_exp_mlas", "log", "log10", "log2", "sin", "cos", "tan",
    "sinh", "cosh", "tanh", "logical_and", "logical_or", "logical_not", "cast", "round", "remainderf",
    "type_size_bytes", "MMAShape", "MMASchedulingPolicy", "MMAFragmentOp", "CacheStrategy", "NativeArray", "Array",
    "Nest", "Schedule", "FusedSchedule", "fuse", "Plan", "Cache", "Function", "logic_function", "LogicFunction",
    "LoopIndex", "create_dimensions", "inf", "AUTO", "k_dynamic_size",
]


@pytest.mark.parametrize("name", ACCERA_EXPORTS)
def test_every_accera_export_is_here_or_refused_with_the_reason(name):
    try:
        value = getattr(acc, name)
    except acc.SchedcError as e:
        assert str(e).startswith(f"acc.{name}: ") and "schedc" in str(e), str(e)
        return
    assert value is not None


def test_accera_aliases_are_schedc_objects():
    assert (acc.AUTO, acc.NativeArray, acc.LoopIndex, acc.DelayedParameter) == \
        (acc.Constants.AUTO, acc.Array, acc.Index, acc.Parameter)
    assert [acc.type_size_bytes(t) for t in (acc.ScalarType.int8, acc.ScalarType.bfloat16, acc.ScalarType.float64)] \
        == [1, 2, 8]
    with pytest.raises(acc.NestError, match=r"acc.remainderf: remainderf is not built in schedc"):
        _ = acc.remainderf
    with pytest.raises(AttributeError):
        _ = acc.not_an_accera_name


# -- Target's keywords, Constants.AUTO, tensor_core_info.supports ---------------------------------

def test_target_category_runtime_and_cores():
    t = acc.Target(category=acc.Target.Category.GPU, runtime=acc.Target.Runtime.CUDA)
    assert (t.model, t.category, t.runtime, t.num_cores) == (acc.Target.Model.NVIDIA_H100, acc.Target.Category.GPU,
                                                             acc.Target.Runtime.CUDA, 132)
    assert acc.Target(known_name="NVIDIA A100").num_cores == 108
    with pytest.raises(TargetError, match="category=CPU: schedc builds for NVIDIA GPUs only"):
        acc.Target(category=acc.Target.Category.CPU)
    with pytest.raises(TargetError, match=r"runtime=ROCM: schedc's kernels run on CUDA \(Runtime.CUDA\)"):
        acc.Target(acc.Target.Model.NVIDIA_H100, runtime=acc.Target.Runtime.ROCM)
    with pytest.raises(TargetError, match="frequency_GHz, num_threads: schedc describes a GPU by its model only"):
        acc.Target(num_threads=8, frequency_GHz=2.0)


def test_tensor_core_info_supports():
    info, f16, f32 = H100.tensor_core_info, acc.ScalarType.float16, acc.ScalarType.float32
    assert info.supports(f16, f32, acc.MMAShape.M16xN16xK16_B1)
    assert info.supports(f16, f32, acc.MMAShape.M16xN16xK16_B1, num_total_passes=4, num_fused_passes=2)
    assert not info.supports(f16, f32, acc.MMAShape.M16xN16xK16_B1, num_total_passes=4, num_fused_passes=3)
    assert not info.supports(f16, f32, acc.MMAShape.M16xN16xK4_B1)  # an AMD shape
    assert not info.supports(f16, acc.ScalarType.float64, acc.MMAShape.M16xN16xK16_B1)
    assert not acc.Target(acc.Target.Model.NVIDIA_A100).tensor_core_info.supports(
        f16, f32, acc.MMAShape.M64xN128xK16_B1)  # wgmma needs sm_90


def _walk(body):
    from schedc.ir.walk import walk_statements

    return list(walk_statements(body))


def _simt_plan(target=H100, **plan_options):
    nest, args = matmul_arrays(64, 64, 64)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.tile({i: 16, j: 16})
    kk = s.split(k, 16)
    s.reorder(i, j, k, ii, jj, kk)
    plan = s.create_plan(target, **plan_options)
    g = target.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    return plan, args, (i, j, k, ii, jj, kk)


def test_cache_level_and_max_elements_name_the_index():
    from .plans import compile_plan

    plan, (A, B, C), (i, j, k, ii, jj, kk) = _simt_plan()
    plan.cache(A, level=3, location=acc.MemorySpace.SHARED, layout=acc.Constants.AUTO)  # order[6 - 3] = ii
    plan.cache(B, max_elements=256, location=acc.MemorySpace.SHARED, double_buffer_location=acc.Constants.AUTO)
    assert plan.caches[0].index is ii and plan.caches[1].index is None
    from schedc.lower.cache import choose_indices

    model, kernel = compile_plan(plan, (A, B, C))
    chosen = choose_indices(model).caches
    assert [(c.array, c.index) for c in chosen] == [("A", "ii"), ("B", "ii")]  # B at k: 64 x 16 > 256
    assert sum(type(s).__name__ == "BlockCopy" for s in _walk(kernel.body)) >= 2


@pytest.mark.parametrize("options, message", [
    ({"index": "kk", "level": 1}, "give one of index=, level= and max_elements=, not index and level"),
    ({"level": 7}, "level must be an integer from 1 .the innermost loop. to 6, not 7"),
    ({"max_elements": 0}, "max_elements must be a positive integer, not 0"),
    ({"index": "kk", "thrifty": True}, "thrifty=True .* is a CPU cache option in Accera"),
    ({"index": "kk", "_shared_memory_offset": -512}, "_shared_memory_offset must be a non-negative integer, not -512"),
    ({}, "needs index= .the loop the cached data is kept across., level= or max_elements="),
])
def test_cache_index_arguments_are_checked(options, message):
    plan, (A, _, _), indices = _simt_plan()
    if options.get("index") == "kk":
        options = {**options, "index": indices[-1]}
    with pytest.raises(acc.CacheError, match=message):
        plan.cache(A, location=acc.MemorySpace.SHARED, **options)


def test_max_elements_that_no_loop_fits_is_refused():
    from .plans import compile_plan

    plan, args, _ = _simt_plan()
    plan.cache(args[0], max_elements=8, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"cache\(A, max_elements=8, location=SHARED\): no loop's footprint of A "
                                             r"has at most 8 elements \(k: 1024, ii: 256, jj: 256, kk: 256\)"):
        compile_plan(plan, args)


def test_dynamic_shared_memory_size():
    from .plans import compile_plan

    plan, args, _ = _simt_plan(_dynamic_shared_memory_size=6000)
    plan.cache(args[0], level=3, location=acc.MemorySpace.SHARED)
    _, kernel = compile_plan(plan, args)
    assert kernel.dynamic_shared_bytes == 6000
    plan, args, _ = _simt_plan(_dynamic_shared_memory_size=512)
    plan.cache(args[0], level=3, location=acc.MemorySpace.SHARED)
    with pytest.raises(PlanError, match=r"create_plan\(_dynamic_shared_memory_size=512\): the kernel's shared memory "
                                        "needs 1024 bytes per block, more than 512"):
        compile_plan(plan, args)
    with pytest.raises(PlanError, match="NVIDIA H100 allows 232448 bytes of shared memory per block"):
        _simt_plan(_dynamic_shared_memory_size=300000)


def test_build_takes_accera_keywords(tmp_path):
    from .plans import compile_plan  # noqa: F401 - the plan compiles in build

    plan, args, _ = _simt_plan()
    package = acc.Package()
    package.add(plan, args=args, base_name="keywords")
    path = package.build("keywords", output_dir=tmp_path, fail_on_error=True, _quiet=False)
    assert path == tmp_path / "keywords.hat" and (tmp_path / "keywords.cu").exists()  # Accera's layout
    with pytest.raises(acc.PackageError, match="config_file='x.yml': schedc reads no configuration file"):
        package.build("keywords", output_dir=tmp_path, config_file="x.yml")


def test_caches_of_caches():
    """A PRIVATE register tile filled from a SHARED tile (tests/accera/hierarchical_cache.py builds
    and emulates one); the other kinds, and a register tile the block's fill would come after,
    are refused with the reason."""
    from .plans import compile_plan

    plan, (A, B, C), (i, j, k, ii, jj, kk) = _simt_plan()
    handle = plan.cache(A, index=ii, location=acc.MemorySpace.SHARED)
    assert (handle.array, handle.index, handle.location) == (A, ii, acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"cache\(<cache of .*>, index=kk, location=SHARED\): a SHARED cache "
                                             r"of .*'s SHARED cache: caches of caches are built as PRIVATE register tiles "
                                             r"filled from a SHARED tile"):
        plan.cache(handle, index=kk, location=acc.MemorySpace.SHARED)
    other, _, _ = _simt_plan()
    with pytest.raises(acc.CacheError, match="the cache handle of .* is not one of this plan's caches"):
        other.cache(handle, index=kk, location=acc.MemorySpace.PRIVATE)
    registers = plan.cache(handle, index=kk, location=acc.MemorySpace.PRIVATE)
    with pytest.raises(acc.CacheError, match=".* already has a PRIVATE cache"):
        plan.cache(handle, index=kk, location=acc.MemorySpace.PRIVATE)
    with pytest.raises(acc.CacheError, match="a PRIVATE cache of .*'s PRIVATE cache"):
        plan.cache(registers, index=kk, location=acc.MemorySpace.PRIVATE)
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=kk, location=PRIVATE\): the register tile is filled "
                                             r"from A's shared tile, which the block fills before kk's loop \(kept "
                                             r"across ii\): cache at a serial loop inside kk \(the schedule's order "
                                             r"is i, j, k, ii, jj, kk\)"):
        compile_plan(plan, (A, B, C))


def _triggered_plan():
    """Order (i, j, k, ii, jj, kk, kkk): i/j on blocks, ii/jj on threads, k, kk and kkk serial."""
    nest, args = matmul_arrays(64, 64, 96)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.tile({i: 16, j: 16})
    kk = s.split(k, 32)
    kkk = s.split(kk, 8)
    s.reorder(i, j, k, ii, jj, kk, kkk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
    return plan, args, (k, kk, kkk)


def test_trigger_index_fills_the_cache_at_an_outer_loop():
    """trigger_index=kk on a cache at kkk: filled at kk with what kkk's loops read over every
    step of kk (the tile of kk's footprint, 32 columns of A instead of 8), double-buffered along
    k (the loop around the trigger); trigger_level names the same loop by level. Emulated."""
    from schedc.codegen.emulate import emulate

    from .plans import compile_plan

    plan, (A, B, C), (k, kk, kkk) = _triggered_plan()
    plan.cache(A, index=kkk, trigger_index=kk, location=acc.MemorySpace.SHARED, double_buffer=True)
    plan.cache(B, level=1, trigger_level=2, location=acc.MemorySpace.SHARED, double_buffer=True)  # kkk, kk
    plan.cache(C, index=kkk, trigger_index=k, location=acc.MemorySpace.PRIVATE)
    model, kernel = compile_plan(plan, (A, B, C))
    assert [(b.name, b.shape) for b in kernel.shared] == [("A_shared", (2, 16, 32)), ("B_shared", (2, 32, 16))]
    rng = np.random.default_rng(3)
    storage = {b.name: rng.standard_normal(b.size).astype(np.float32) for b in kernel.params}
    result = emulate(kernel, storage)
    a, b, c = (storage[n].reshape(shape) for n, shape in (("A", (64, 96)), ("B", (96, 64)), ("C", (64, 64))))
    np.testing.assert_allclose(result.storage["C"].reshape(64, 64), c + a @ b, rtol=1e-4, atol=1e-4)


def test_trigger_index_refusals():
    plan, (A, B, C), (k, kk, kkk) = _triggered_plan()
    with pytest.raises(acc.CacheError, match=r"trigger_index=kkk comes after index=kk in the schedule's order "
                                             r"\(i, j, k, ii, jj, kk, kkk\); the cache is filled at its index or "
                                             "outside it"):
        plan.cache(A, index=kk, trigger_index=kkk, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match="give at most one of trigger_index= and trigger_level="):
        plan.cache(A, index=kk, trigger_index=k, trigger_level=3, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match="trigger_level=1 is smaller than level=2"):
        plan.cache(A, level=2, trigger_level=1, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"trigger_level must be an integer from 1 \(the innermost loop\) to 7"):
        plan.cache(A, level=2, trigger_level=9, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match="an MMA_FRAGMENT cache is loaded and stored at its index"):
        plan.cache(C, index=kk, trigger_index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    plan.cache(B, index=kk, trigger_index=kk, location=acc.MemorySpace.SHARED)  # the same loop: a plain cache
    plan.cache(A, max_elements=512, trigger_index=kk, location=acc.MemorySpace.SHARED)  # chosen later: ii
    from .plans import compile_plan

    with pytest.raises(acc.CacheError, match=r"cache\(A, max_elements=512, location=SHARED\): trigger_index=kk "
                                             r"comes after the chosen index ii"):
        compile_plan(plan, (A, B, C))


def test_zero_sizes_leave_create_plan_options_unset():
    """Accera passes 0 for an unset dynamic shared memory size and blocks per multiprocessor."""
    from .plans import compile_plan

    plan, args, _ = _simt_plan(_dynamic_shared_memory_size=0, _blocks_per_SM=0)
    plan.cache(args[0], level=3, location=acc.MemorySpace.SHARED)
    model, kernel = compile_plan(plan, args)
    assert (model.dynamic_shared, model.blocks_per_sm) == (0, 0) and kernel.dynamic_shared_bytes in (0, 1024)


def test_shared_memory_offset_is_accepted_and_said_once(capsys):
    from schedc.frontend import plan as plan_module

    plan_module._OFFSET_SAID.clear()
    plan, (A, B, _), indices = _simt_plan()
    plan.cache(A, index=indices[-1], location=acc.MemorySpace.SHARED, _shared_memory_offset=0)
    assert capsys.readouterr().err == ""
    plan.cache(B, index=indices[-1], location=acc.MemorySpace.SHARED, _shared_memory_offset=8192)
    plan, (A, _, _), indices = _simt_plan()
    plan.cache(A, index=indices[-1], location=acc.MemorySpace.SHARED, _shared_memory_offset=4096)
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and "_shared_memory_offset=8192: schedc places every shared buffer itself" in err


def test_vectorize_false_copies_element_by_element():
    from schedc.ir.kernel import BlockCopy

    from .plans import compile_plan

    def vectors(vectorize):
        plan, args, indices = _simt_plan()
        plan.cache(args[0], index=indices[3], location=acc.MemorySpace.SHARED, vectorize=vectorize)
        return {s.vector for s in _walk(compile_plan(plan, args)[1].body) if isinstance(s, BlockCopy)}
    assert vectors(acc.Constants.AUTO) == vectors(True) == {4} and vectors(False) == {1}
    plan, args, indices = _simt_plan()
    for wrong in (2, 0):
        plan, args, indices = _simt_plan()
        with pytest.raises(acc.CacheError, match=f"vectorize must be True, False or AUTO, not {wrong}"):
            plan.cache(args[0], index=indices[3], location=acc.MemorySpace.SHARED, vectorize=wrong)


def test_fragment_cache_of_one_tile_is_the_plan_without_it():
    """Accera's MMA_FRAGMENT cache at a tensorized index holds one product's tile of C: the kernel
    is the one without the cache (C's fragment kept across the serial loop around the tile only
    where nothing else in it touches global memory)."""
    from .plans import compile_plan, tensor_matmul

    def body(cached):
        plan, args = tensor_matmul(64, 64, 64, k_split=32, shared_ab=True)
        if cached:
            tile = plan.tensorization.indices[0]
            plan.cache(args[2], index=tile, location=acc.MemorySpace.MMA_FRAGMENT)
        model, kernel = compile_plan(plan, args)
        return model, kernel
    (model, kernel), (_, bare) = body(True), body(False)
    assert kernel.body == bare.body
    from schedc.verify import emulate_function

    assert all(r.passed for r in emulate_function(model, kernel, blocks=2, seed=3))


def test_split_past_the_range_is_one_partial_tile():
    """Accera's boundary test: split(i, 512) of 128 values: one block of the 128 threads that
    have something to do."""
    from schedc.verify import emulate_function

    from .plans import compile_plan

    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(128,))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(128,))
    nest = acc.Nest(shape=(128,))
    i, = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] += A[i]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 512)
    plan = schedule.create_plan(H100)
    plan.bind({i: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_X})
    model, kernel = compile_plan(plan, (A, B))
    assert (kernel.grid, kernel.block) == ((1, 1, 1), (128, 1, 1))
    assert plan._calc_block_grid_dim() == ([128, 1, 1], [1, 1, 1])
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))


def test_launch_helpers_of_accera_benchmarker():
    plan, _, _ = _simt_plan()
    assert plan._calc_block_grid_dim() == ([16, 16, 1], [4, 4, 1])
    assert plan._is_valid_block_dim([1024, 1, 1]) and not plan._is_valid_block_dim([1, 1, 65])
    assert plan._is_valid_block_size([32, 32, 1]) and not plan._is_valid_block_size([64, 32, 1])


def test_tensorize_without_a_shape_says_it_is_required():
    nest, _ = matmul_arrays(32, 32, 32, acc.ScalarType.float16)
    i, j, k = nest.get_indices()
    plan = nest.create_schedule().create_plan(H100)
    with pytest.raises(PlanError, match=r"tensorize\(indices=\(i, j, k\), mma_shape=None\): mma_shape= is required: "
                                        r"the tensor-core shape of one product \(M16xN16xK16_B1, "):
        plan.tensorize(indices=(i, j, k))


def test_a_dynamic_shared_memory_size_of_the_dense_tiles_drops_the_padding():
    """Accera sizes ``_dynamic_shared_memory_size`` for dense tiles: a transposed tile, padded
    against bank conflicts otherwise, is then dense, and the kernel the same otherwise."""
    from schedc.ir.kernel import SharedBuffer
    from schedc.verify import emulate_function

    from .plans import compile_plan

    def kernel(size):
        plan, args, indices = _simt_plan(_dynamic_shared_memory_size=size)
        plan.cache(args[0], index=indices[3], location=acc.MemorySpace.SHARED, layout=acc.Array.Layout.LAST_MAJOR)
        return compile_plan(plan, args)
    _, padded = kernel(None)
    model, dense = kernel(1024)  # A's 16 x 16 floats at ii, transposed
    [tile] = [b for b in dense.shared if isinstance(b, SharedBuffer)]
    assert padded.dynamic_shared_bytes > 1024 and dense.dynamic_shared_bytes == 1024 and tile.nbytes == 1024
    assert all(r.passed for r in emulate_function(model, dense, blocks=2, seed=5))
    with pytest.raises(PlanError, match=r"_dynamic_shared_memory_size=1000\): the kernel's shared memory needs 1024 "):
        kernel(1000)


# -- Accera's methods: print, get_shape, add_description, and the ones refused with the reason -----

def _bound_plan():
    nest, (A, B, C) = matmul_arrays(64, 48, 32, acc.ScalarType.float32, acc.ScalarType.float32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, 16), s.split(j, 16)
    s.reorder(i, j, ii, jj, k)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_Y, j: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.THREAD_Y,
               jj: H100.GridUnit.THREAD_X})
    return nest, s, plan, (A, B, C)


def test_print_shows_the_loop_nest(capsys):
    nest, schedule, plan, _ = _bound_plan()
    assert nest.get_shape() == (64, 48, 32)
    schedule.print()
    plan.print()
    unbound, bound = capsys.readouterr().out.split("for i in range")[1:]
    assert "for ii in range(0, 16, 1):" in unbound and "THREAD_Y" not in unbound
    assert "# BLOCK_Y, 4 iterations" in bound and "# THREAD_X, 16 iterations" in bound
    assert "] = " in bound and "for k in range(0, 32, 1):" in bound


def _with_a_temp():
    A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(64,))
    T = acc.Array(role=acc.Role.TEMP, element_type=acc.ScalarType.float32, shape=(64,))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(64,))
    first, second = acc.Nest(shape=(64,)), acc.Nest(shape=(64,))
    i, = first.get_indices()
    first.iteration_logic(lambda: T.__setitem__(i, A[i] * 2.0))
    i2, = second.get_indices()
    second.iteration_logic(lambda: B.__setitem__(i2, T[i2] + 1.0))
    schedule = acc.fuse((first.create_schedule(), second.create_schedule()))
    plan = schedule.create_plan(H100)
    plan.bind({schedule.get_indices()[1]: H100.GridUnit.THREAD_X})
    return plan, (A, T, B)


def test_print_shows_a_plan_whose_nest_holds_a_temp_array(capsys):
    """A TEMP array is the nest's own: print names it once (it was refused as a duplicate name)."""
    plan, _ = _with_a_temp()
    plan.print()
    out = capsys.readouterr().out
    assert "T[i] = A[i] * 2.0" in out and "B[i] = T[i] + 1.0" in out


@pytest.mark.parametrize("owner, method, error, message", [
    ("plan", "vectorize", PlanError, "plan.vectorize\\(\\): a CPU schedule option"),
    ("plan", "parallelize", PlanError, "plan.parallelize\\(\\): a CPU schedule option"),
    ("plan", "auto", PlanError, "plan.auto\\(\\): automatic plans are not built"),
    ("schedule", "skew", acc.ScheduleError, "schedule.skew\\(\\): skewing loops is not built"),
    ("schedule", "pad", acc.ScheduleError, "schedule.pad\\(\\): padding a loop's range is not built"),
    ("schedule", "get_index_range", acc.ScheduleError, "schedule.get_index_range\\(\\): not built in schedc"),
    ("nest", "get_logic", acc.NestError, "nest.get_logic\\(\\): schedc keeps a nest's statements"),
    ("array", "sub_array", acc.NestError, "array.sub_array\\(\\): sub-array views are not built"),
    ("array", "flags", acc.NestError, "array.flags\\(\\): schedc allocates no arrays of its own"),
])
def test_accera_methods_schedc_lacks_are_refused_with_the_reason(owner, method, error, message):
    nest, schedule, plan, args = _bound_plan()
    with pytest.raises(error, match=message):
        getattr({"plan": plan, "schedule": schedule, "nest": nest, "array": args[0]}[owner], method)
    assert args[1].requested_layout is args[1].layout
    with pytest.raises(AttributeError):
        _ = plan.no_such_method


def test_add_description_writes_the_hat_description(tmp_path):
    import tomllib

    _, _, plan, args = _bound_plan()
    package = acc.Package()
    package.add(plan, args=args, base_name="described")
    package.add_description(author="Ada", license="https://example.org/license", version="2.1",
                            other={"team": "kernels", "revision": 7, "draft": True})
    package.add_description(other={"draft": None})  # None removes a key, as in Accera
    hat = package.build("described", output_dir=tmp_path)
    description = tomllib.loads(hat.read_text())["description"]
    assert (description["author"], description["license_url"], description["version"]) == \
        ("Ada", "https://example.org/license", "2.1")
    assert description["auxiliary"] == {"team": "kernels", "revision": 7}
    assert acc.load(hat).functions  # the loader reads it
    with pytest.raises(acc.PackageError, match="Package.add_description: version must be a string, not 2"):
        package.add_description(version=2)
    with pytest.raises(acc.PackageError, match=r"other\['x'\] = \[1\]: values are strings, numbers or booleans"):
        package.add_description(other={"x": [1]})
