"""Hopper plans at the edges, where the CPU checks and the hardware once disagreed: sizes below
one stage or one tile, nests over part of their arrays, blocks and register budgets past what
the launch and ptxas accept.

Each emulated plan is compared with numpy over every block; the same plans run on the GPU
(``gpu`` mark) and compile for sm_90a on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.emulate import emulate
from schedc.errors import PlanError
from schedc.frontend.freeze import freeze
from schedc.lower import compile_model
from schedc.package.build import name_arrays

from .conftest import require_gpu
from .kit import hopper_matmul, lower

F16, F32 = acc.ScalarType.float16, acc.ScalarType.float32
COL = acc.Array.Layout.LAST_MAJOR
H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
UNIT, SPACE = H100.GridUnit, H100.MemorySpace


def emulated_error(kernel, nest: tuple[int, int, int]) -> tuple[float, np.ndarray]:
    """Emulate every block on random inputs: the largest error against numpy's C + A @ B over
    the nest (and C unchanged elsewhere), and which elements of C were written."""
    M, N, K = nest
    rng = np.random.default_rng(0)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in kernel.params}
    arrays = {b.name: np.lib.stride_tricks.as_strided(storage[b.name].astype(np.float64), b.shape,
                                                      [s * 8 for s in b.strides]) for b in kernel.params}
    result = emulate(kernel, storage)
    expected = arrays["C"].copy()
    expected[:M, :N] += arrays["A"][:M, :K] @ arrays["B"][:K, :N]
    c = next(b for b in kernel.params if b.name == "C")
    got = result.storage["C"].reshape(c.shape).astype(np.float64)
    return float(np.abs(got - expected).max()), result.written["C"].reshape(c.shape)


# (M, N, K) below one stage's k or one block's tile, and the sample's options
EDGES = {
    "k_below_one_stage": ((128, 128, 32), {"block": (128, 128, 64), "stages": 3}),
    "k_below_one_stage_one_thread_issues": ((128, 128, 32), {"block": (128, 128, 64), "stages": 1,
                                                              "specialize": False}),
    "k_below_one_stage_persistent": ((256, 128, 32), {"block": (128, 128, 64), "persistent": {"blocks": 1}}),
    "k_of_half_a_two_chunk_stage": ((128, 256, 64), {"block": (128, 256, 128), "stages": 2}),
    "tf32_k_below_one_stage": ((128, 128, 16), {"operand": F32, "block": (128, 128, 32), "b_layout": COL}),
    "m_below_one_tile": ((100, 128, 128), {"block": (128, 128, 64)}),
    "m_below_one_warpgroup": ((40, 128, 128), {"block": (128, 128, 64), "stages": 1}),
    "m_below_a_256_row_block": ((160, 128, 128), {"block": (256, 128, 64)}),
    "n_below_a_block_of_two_warpgroup_columns": ((128, 192, 128), {"block": (128, 256, 64), "warpgroup_n": 128}),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_edges_emulate_correctly(name):
    """The TMA tile is the whole tile the wgmmas read (the box past the array filled with
    zeros), so the emulator runs the kernel the GPU runs."""
    (M, N, K), options = EDGES[name]
    error, written = emulated_error(lower(*hopper_matmul.matmul(M, N, K, **options)), (M, N, K))
    assert written.all()
    assert error < (2e-2 * np.sqrt(K) if options.get("operand") is F32 else 1e-3)


def test_tma_box_covers_the_tile_the_wgmmas_read():
    """K = 32 below a 64-wide stage: A's box is 128 x 64 and B's 64 x 128 (boxes of 64 columns),
    the tensor maps' global size the nest's (TMA fills zeros past it)."""
    kernel = lower(*hopper_matmul.matmul(128, 128, 32, block=(128, 128, 64)))
    maps = {v.spec.array: v.spec for v in kernel.values}
    assert maps["A"].box == (128, 64) and maps["A"].bounds == (128, 32)
    assert maps["B"].box == (64, 64) and maps["B"].bounds == (32, 128)
    a_shared = next(b for b in kernel.shared if b.name == "A_shared")
    assert a_shared.shape[1:] == (1, 128, 64)


def part_product(nest: tuple[int, int, int], shapes: tuple[int, int, int], wgmma: bool, cached=("A", "B")):
    """C[i, j] += A[i, k] * B[k, j] over a nest smaller than its arrays (A is shapes[0] x
    shapes[1], B shapes[1] x shapes[2]), on wgmma with TMA rings or on mma.sync with
    shared caches of the arrays in ``cached``."""
    M, N, K = nest
    am, ak, bn = shapes
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(am, ak))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(ak, bn))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(am, bn))
    n = acc.Nest(shape=(M, N, K))
    i, j, k = n.get_indices()

    @n.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    s = n.create_schedule()
    plan = None
    if wgmma:
        ii, jj, kk = s.split(i, 128), s.split(j, 128), s.split(k, 64)
        iii = s.split(ii, 64)
        iiii, jjj, kkk = s.tile({iii: 64, jj: 128, kk: 16})
        s.reorder(i, j, ii, jj, k, kk, iii, iiii, jjj, kkk)
        plan = s.create_plan(H100)
        plan.bind({i: UNIT.BLOCK_Y, j: UNIT.BLOCK_X, ii: UNIT.WARPGROUP_Y})
        plan.tensorize(indices=(iiii, jjj, kkk), mma_shape=acc.MMAShape.M64xN128xK16_B1)
        for array in (A, B):
            plan.cache(array, index=kk, location=SPACE.SHARED, stages=2, engine=acc.CopyEngine.TMA)
        plan.cache(C, index=k, location=SPACE.MMA_FRAGMENT)
    else:
        ii, jj, kk = s.split(i, 32), s.split(j, 32), s.split(k, 32)
        iii, jjj, kkk = s.tile({ii: 16, jj: 16, kk: 16})
        s.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
        plan = s.create_plan(H100)
        plan.bind({i: UNIT.BLOCK_Y, j: UNIT.BLOCK_X, ii: UNIT.WARP_Y, jj: UNIT.WARP_X})
        plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
        for array in (A, B):
            if array.name in cached or {A: "A", B: "B"}[array] in cached:
                plan.cache(array, index=k, location=SPACE.SHARED)
    return plan, (A, B, C)


@pytest.mark.parametrize("wgmma", [False, True], ids=["mma_sync", "wgmma"])
@pytest.mark.parametrize("nest, shapes", [((64, 64, 40), (64, 48, 64)), ((40, 64, 64), (64, 64, 64)),
                                          ((100, 128, 40), (128, 64, 160))], ids=["k", "m", "m_k_n"])
def test_nest_over_part_of_its_arrays(wgmma, nest, shapes):
    """Whole tiles past the nest's edge read zeros and write nothing there though the arrays go
    on: the copies and the TMA maps stop at what the nest reaches, C's edge stores too."""
    if wgmma:
        nest = tuple(max(n, 64) if d == 2 else n for d, n in enumerate(nest))
        shapes = (shapes[0], max(shapes[1], nest[2] + 8), shapes[2])
    kernel = lower(*part_product(nest, shapes, wgmma))
    error, written = emulated_error(kernel, nest)
    assert error < 1e-3
    M, N, _ = nest
    assert written[:M, :N].all() and written.sum() == M * N


def test_a_tensor_tile_past_its_split_inside_the_nest_is_refused_as_such():
    """j split by 24 and warp tiles of 16: the second warp's whole tile reaches columns 24..31,
    the next block's, though the nest and its cached operands go on. The refusal says which
    split is not a multiple of the tile, not that the tile passes the nest."""
    from .plans import matmul_arrays

    target = acc.Target(acc.Target.Model.NVIDIA_A100)
    nest, (A, B, C) = matmul_arrays(64, 48, 32, acc.ScalarType.float16, acc.ScalarType.float32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 32), s.split(j, 24), s.split(k, 16)
    iii, jjj, kkk = s.tile({ii: 16, jj: 16, kk: 16})
    s.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X, ii: target.GridUnit.WARP_Y,
               jj: target.GridUnit.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    for array in (A, B):
        plan.cache(array, index=kk, location=target.MemorySpace.SHARED)
    with pytest.raises(PlanError, match=r"jjj=8, kkk=0\) of a whole tile lies inside the 64x48x32 nest but past its "
                                        r"split's tile \(jj takes 24 values, not a multiple of 16\): it would add "
                                        r"A\[0, 0\] \* B\[0, 24\] to C\[0, 24\]"):
        lower(plan, (A, B, C))


def test_padding_into_an_uncached_array_is_refused():
    """mma.sync reading A and B from global memory: whole tiles past K = 40 would add
    A[0, 40] * B[40, 0] (inside both 64-wide arrays) to C[0, 0]."""
    plan, args = part_product((64, 64, 40), (64, 64, 64), wgmma=False, cached=())
    with pytest.raises(PlanError, match=r"iteration \(i=0, j=0, k=32, ii=0, jj=0, kk=0, iii=0, jjj=0, kkk=8\) of a "
                                        r"whole tile lies past the 64x64x40 nest but inside the arrays \(C\[64, 64\], "
                                        r"A\[64, 64\], B\[64, 64\]\): it would add A\[0, 40\] \* B\[40, 0\] to "
                                        r"C\[0, 0\]"):
        lower(plan, args)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(EDGES))
def test_edges_on_the_gpu_agree_with_the_emulator(name, tmp_path):
    """The GPU's C matches the reference and, element for element, the emulator's."""
    from schedc.verify import compare_with_emulator, run_function

    (M, N, K), options = EDGES[name]
    package = acc.Package()
    package.add(*hopper_matmul.matmul(M, N, K, **options), base_name=name)
    path = package.build(name, format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    fn = acc.load(path).functions[name]
    for reports in (run_function(fn, seed=3), compare_with_emulator(fn, seed=3)):
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


# -- blocks and registers that the launch and ptxas accept ---------------------------------------


def block_of(groups: tuple[int, int], n: int, specialize: bool = True, blocks_per_sm: int = 0):
    """A wgmma plan of ``groups`` (rows, columns) consumer warpgroups of 64 x ``n`` each."""
    rows, cols = groups
    block = (64 * rows, n * cols, 64)
    plan, args = hopper_matmul.matmul(block[0], block[1], 128, block=block, warpgroup_n=n, specialize=specialize,
                                      stages=2)
    plan.blocks_per_sm = blocks_per_sm
    return plan, args


@pytest.mark.parametrize("groups, n, specialize, blocks, message", [
    ((4, 2), 64, True, 0, r"8 consumer warpgroup\(s\) and the producer warpgroup are 1152 threads; a block of NVIDIA "
                          r"H100 has at most 1024: "),
    ((3, 1), 256, True, 0, r"3 consumer warpgroup\(s\) and the producer warpgroup are 512 threads, 1 block\(s\) a "
                           r"multiprocessor: ptxas compiles the kernel within 65536 / 512 = 128 registers a thread "
                           r"\(__launch_bounds__\), and each consumer thread holds 128 accumulator registers"),
    ((4, 2), 128, False, 0, r"65536 / 1024 = 64 registers a thread .* holds 64 accumulator registers"),
    ((2, 1), 128, True, 2, r"384 threads, 2 block\(s\) a multiprocessor: .* 65536 / 768 = 80 registers"),
    ((1, 1), 128, True, 3, r"65536 / 768 = 80 registers"),
    ((2, 1), 256, False, 2, r"2 consumer warpgroup\(s\) are 256 threads, 2 block\(s\) a multiprocessor: .* = 128 "
                            r"registers .* 128 accumulator registers"),
])
def test_blocks_and_registers_past_the_hardware_are_refused_with_ways_that_build(groups, n, specialize, blocks,
                                                                                 message):
    """Each of these once passed the checks and failed in ptxas ("Insufficient registers") or
    at the launch (CUDA_ERROR_INVALID_VALUE). Each change the refusal offers builds: ptxas
    (through NVRTC) accepts it."""
    import re

    with pytest.raises(PlanError, match=message) as refused:
        lower(*block_of(groups, n, specialize, blocks))
    ways = str(refused.value).split(": ")[-1].split("; or ")
    changed = []
    for way in ways:
        if m := re.match(r"at most (\d+) warpgroup", way):
            count = int(m[1])
            rows = min(count, 4)
            changed.append(((rows, count // rows), n, specialize, blocks))
        elif m := re.match(r"warpgroup tiles of at most 64 x (\d+)", way):
            changed.append((groups, int(m[1]), specialize, blocks))
        elif way.startswith("warp_specialize(False)"):
            changed.append((groups, n, False, blocks))
        elif way.startswith("create_plan without _blocks_per_SM"):
            changed.append((groups, n, specialize, 0))
        else:
            raise AssertionError(f"a way out the test does not know: {way}")
    assert changed
    for change in changed:
        compiles(lower(*block_of(*change)))


@pytest.mark.parametrize("groups, n, specialize, blocks, width", [
    ((2, 1), 128, True, 2, 104),  # one column of warpgroups: any multiple of 8 (a last chunk partly read)
    ((3, 1), 256, True, 0, 200),
    ((4, 2), 128, False, 0, 64),  # two columns: each warpgroup's tile starts at a chunk, whole chunks only
])
def test_narrower_warpgroup_tiles_offered_are_the_widest_that_fit(groups, n, specialize, blocks, width):
    with pytest.raises(PlanError, match=rf"warpgroup tiles of at most 64 x {width} \(mma_shape M64xN{width}xK\*"):
        lower(*block_of(groups, n, specialize, blocks))


def compiles(kernel) -> None:
    from schedc.codegen.cuda import emit_source
    from schedc.package.compile import nvrtc_compile

    nvrtc_compile(emit_source([kernel], "// edges"), "edges", "sm_90a")


@pytest.mark.parametrize("groups, n, specialize, blocks", [
    ((4, 2), 64, False, 0),  # 1024 threads of 64 registers: 32 accumulators
    ((3, 1), 192, True, 0),  # 512 threads of 128 registers: 96 accumulators
    ((1, 1), 128, True, 2),  # 256 threads, 2 blocks: 128 registers, the consumers raised from the launch's share
    ((1, 1), 256, False, 2),  # 128 threads, 2 blocks: 256 registers, 128 accumulators
])
def test_accepted_blocks_compile_for_sm90a(groups, n, specialize, blocks):
    """The neighbours of the refusals above build: ptxas (through NVRTC) accepts their registers."""
    compiles(lower(*block_of(groups, n, specialize, blocks)))


# -- sampled emulation of persistent grids ------------------------------------------------------


@pytest.mark.parametrize("M, options", [
    (384, {"persistent": {"blocks": 5, "group": 2}}),  # 3 x 4 tiles: the last band of rows is shorter
    (512, {"persistent": {"blocks": 4, "group": 2}, "cluster": 2}),
    (384, {"persistent": {"blocks": 3}, "specialize": False}),
])
def test_sampled_blocks_of_a_persistent_grid_compare_the_tiles_they_compute(M, options):
    """A resident block computes tiles all over the plan's grid in grouped order: the sampled
    reference follows it (it once compared the blocks' coordinates as tiles: "elements never
    written", "written outside the nest")."""
    from schedc.codegen.emulate import clusters_of
    from schedc.verify import computed_tiles, emulate_function

    plan, args = hopper_matmul.matmul(M, 512, 128, block=(128, 128, 64), stages=2, **options)
    name_arrays("test", plan, args, "mm")
    model = freeze(plan, "mm", args)
    kernel = compile_model(model)
    blocks = [(0, 0, 0), (kernel.grid[0] - 1, 0, 0)]
    reports = emulate_function(model, kernel, blocks)
    tiles = computed_tiles(kernel, [b for group in clusters_of(kernel, blocks) for b in group])  # whole clusters run
    assert len(tiles) > len(blocks)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    assert reports[0].compared == len(set(tiles)) * 128 * 128


def test_persistent_tile_order_is_the_kernels():
    """Persistent.tile, which the sampled reference reads, gives the tile the kernel's loop
    computes for every work item (the IR's lets evaluated)."""
    from schedc.ir.kernel import Binary, Const, Let, Loop, Persistent, Var
    from schedc.ir.walk import walk_statements
    from schedc.lower.launch import Launch, persistent_loop

    operations = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__, "%": int.__mod__,
                  "min": min}

    def value(e, env):
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Var):
            return env[e.name]
        assert isinstance(e, Binary)
        return operations[e.op](value(e.lhs, env), value(e.rhs, env))

    for tiles, group in (((3, 4, 1), 2), ((5, 7, 1), 3), ((2, 3, 2), 2), ((4, 8, 1), 8)):
        p = Persistent(tiles, 5, group)
        loop = persistent_loop(Launch((5, 1, 1), (128, 1, 1), (), p), ())[0]
        assert isinstance(loop, Loop)
        lets = {s.name: s.value for s in walk_statements(loop.body) if isinstance(s, Let)}
        for work in range(p.count):
            got = tuple(value(lets[f"tile_{a}"], {"work": work}) if f"tile_{a}" in lets else 0 for a in "xyz")
            assert got == p.tile(work)


# -- messages in the user's names, with a change that works --------------------------------------


@pytest.mark.parametrize("a_layout, b_layout, message", [
    (acc.Array.Layout.FIRST_MAJOR, acc.Array.Layout.FIRST_MAJOR,
     r"cache\(B, index=kk, location=SHARED, engine=TMA\): tf32 wgmma reads operands whose k is contiguous; B is "
     r"contiguous along its dimension 1, not along k \(its dimension 0\): make B Array.Layout.LAST_MAJOR"),
    (acc.Array.Layout.LAST_MAJOR, acc.Array.Layout.LAST_MAJOR,
     r"cache\(A, index=kk, location=SHARED, engine=TMA\): .* A is contiguous along its dimension 0, not along k \(its "
     r"dimension 1\): make A Array.Layout.FIRST_MAJOR"),
])
def test_tf32_layout_refusals_name_the_operand_and_its_layout(a_layout, b_layout, message):
    """A column-major A was told to store B transposed."""
    plan = hopper_matmul.matmul(256, 256, 256, operand=F32, block=(128, 128, 32), a_layout=a_layout, b_layout=b_layout)
    with pytest.raises(acc.CacheError, match=message):
        lower(*plan)


@pytest.mark.parametrize("tensor_cores", [False, True])
def test_warp_specialize_without_a_tma_ring_is_refused(tensor_cores):
    """It was silently ignored on mma.sync and SIMT plans."""
    from .plans import compile_plan, simt_matmul, tensor_matmul

    plan, args = tensor_matmul(64, 64, 64, shared_ab=True, k_split=32) if tensor_cores else simt_matmul(64, 64, 64)
    plan.warp_specialize()
    kind = "mma_sync tiles" if tensor_cores else "a SIMT plan"
    with pytest.raises(PlanError, match=rf"warp_specialize\(\): a producer warpgroup issues the TMA copies of a wgmma "
                                        rf"plan's SHARED caches, and this plan \({kind}\) has none"):
        compile_plan(plan, args)
    plan.warp_specialize(False)  # the same plan without the call's producer builds
    compile_plan(plan, args)


def test_messages_before_package_add_name_the_arrays_by_their_variables():
    """``<float16[256, 256] array>`` was printed where the script calls it A."""
    plan, (A, _, _) = hopper_matmul.matmul(256, 256, 256)
    with pytest.raises(acc.CacheError, match=r"^cache\(A, index=kk, location=SHARED\): stages must be an integer from 1 "
                                             r"to 8, not 9"):
        plan.cache(A, index=plan.schedule.order[5], location=SPACE.SHARED, stages=9)


def test_an_8_bit_float_c_loaded_at_a_partial_tile_compiles(tmp_path):
    """C of float8_e5m2, read (INPUT_OUTPUT) and loaded into registers before the products, its
    last tile partial (275 columns in tiles of 248): the zeros past C's edge are 8-bit float
    constants (they were printed as bfloat16, which NVRTC refused beside the fp8 element)."""
    from .plans import build

    e5m2 = acc.ScalarType.float8_e5m2
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    A = acc.Array(role=acc.Role.INPUT, element_type=e5m2, shape=(128, 128))
    B = acc.Array(role=acc.Role.INPUT, element_type=e5m2, shape=(128, 275), layout=acc.Array.Layout.LAST_MAJOR)
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=e5m2, shape=(128, 275))
    nest = acc.Nest(shape=(128, 275, 128))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii, jj, kk = schedule.split(i, 64), schedule.split(j, 248), schedule.split(k, 128)
    iii, jjj = schedule.split(ii, 64), schedule.split(jj, 248)
    iiii, jjjj, kkk = schedule.tile({iii: 64, jjj: 248, kk: 32})
    schedule.reorder(i, j, ii, jj, k, kk, iii, jjj, iiii, jjjj, kkk)
    plan = schedule.create_plan(target)
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=acc.MMAShape.M64xN248xK32_B1,
                   instruction=acc.Instruction.WGMMA)
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=3)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED, stages=3)
    plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
    plan.warp_specialize(False)
    build(plan, (A, B, C), "fp8_edge", tmp_path)
    source = (tmp_path / "fp8_edge.cu").read_text()
    assert "__nv_fp8_e5m2(0.0)" in source and "__double2bfloat16(0.0)" not in source
    assert (tmp_path / "fp8_edge.cubin").exists()
