"""Checks run when a plan is compiled: launch limits, races, roles, tensorization."""

from __future__ import annotations

import pytest

import schedc as acc
from schedc import PackageError, PlanError, TargetError
from schedc.ir.kernel import FragmentLoad
from schedc.ir.walk import walk_statements
from schedc.verify import emulate_function

from .plans import FIRST, H100, LAST, T, compile_plan, matmul_arrays, simt_matmul, tensor_matmul

G = H100.GridUnit


def simt(M=64, N=64, K=64, bind=None, order=None, splits=(16, 16)):
    nest, args = matmul_arrays(M, N, K)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, splits[0]), s.split(j, splits[1])
    names = {"i": i, "j": j, "k": k, "ii": ii, "jj": jj}
    s.reorder(*(names[n] for n in (order or ("i", "j", "ii", "jj", "k"))))
    plan = s.create_plan(H100)
    plan.bind({names[n]: unit for n, unit in (bind or {"i": G.BLOCK_Y, "j": G.BLOCK_X,
                                                          "ii": G.THREAD_Y, "jj": G.THREAD_X}).items()})
    return plan, args


def test_threads_per_block_limit():
    plan, args = simt(M=64, N=64, splits=(64, 32))
    with pytest.raises(PlanError, match=r"2048 threads per block \(block 32 x 64 x 1\); NVIDIA H100 allows 1024"):
        compile_plan(plan, args)


def test_block_dimension_limit():
    plan, args = simt(M=256, N=4, splits=(128, 2),
                      bind={"i": G.BLOCK_X, "ii": G.THREAD_Z, "jj": G.THREAD_X})
    with pytest.raises(PlanError, match="block dimension z is 128; NVIDIA H100 allows 64"):
        compile_plan(plan, args)


def test_grid_dimension_limit():
    plan, args = simt(M=2**17, N=16, K=1, splits=(1, 16),
                      bind={"i": G.BLOCK_Y, "jj": G.THREAD_X})
    with pytest.raises(PlanError, match="grid dimension y is 131072 blocks; NVIDIA H100 allows 65535"):
        compile_plan(plan, args)


def test_binding_a_reduction_loop_with_serial_targets_is_refused():
    """k on threads reduces across them, but each thread would need a partial per element of C
    its serial loops (j, ii, jj) visit: refused with the loop."""
    plan, args = simt(bind={"i": G.BLOCK_Y, "k": G.THREAD_X})
    with pytest.raises(PlanError, match=r"a reduction across threads \(k\): C's element changes with the serial "
                                        r"loop j, and each thread keeps one partial"):
        compile_plan(plan, args)


def test_read_write_race_between_threads():
    """B[i] = B[i + 1] + 1 with i on threads: a thread reads what its neighbour writes."""
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(65,), name="B")
    nest = acc.Nest(64)
    (i,) = nest.get_indices()
    nest.iteration_logic(lambda: B.__setitem__(i, B[i + 1] + 1.0))
    plan = nest.create_schedule().create_plan(H100)
    plan.bind({i: G.THREAD_X})
    with pytest.raises(PlanError, match=r"iterations \(i=0\) and \(i=1\) run concurrently \(THREAD_X i=0 vs 1\) and one writes what the other reads: B\[1\]"):
        compile_plan(plan, (B,))


def _wavefront():
    """A[i + 1, j] = A[i, j + 1] * 0.5: iteration (i + 1, j) needs (i, j + 1) first."""
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(9, 9), name="A")
    nest = acc.Nest(8, 8)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: A.__setitem__((i + 1, j), A[i, j + 1] * 0.5))
    return nest, (A,), i, j


def test_reorder_that_breaks_a_dependence():
    nest, args, i, j = _wavefront()
    s = nest.create_schedule()
    s.reorder(j, i)
    with pytest.raises(acc.ScheduleError, match=r"reorder\(j, i\): statement 1 at \(j=0, i=1\) reads A\[1, 1\], which statement 1 at \(j=1, i=0\) writes earlier in the nest; the schedule runs them the other way round"):
        compile_plan(s.create_plan(H100), args)
    nest, args, i, j = _wavefront()
    compile_plan(nest.create_schedule().create_plan(H100), args)  # the nest's own order is fine


def test_reductions_may_be_reordered():
    """The sum over k moved outermost: only the order of its additions changes, so the plan is
    accepted and computes C + A @ B (within float32 rounding)."""
    nest, args = matmul_arrays(16, 16, 16)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    kk = s.split(k, 4)
    s.reorder(k, i, j, kk)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, j: G.THREAD_X})
    model, kernel = compile_plan(plan, args)
    assert [lp.name for lp in model.loops][0] == "k"
    reports = emulate_function(model, kernel, blocks=None)
    assert reports and all(r.passed for r in reports)


def test_warps_need_tensorize():
    plan, args = simt(bind={"i": G.BLOCK_Y, "ii": G.WARP_Y, "jj": G.WARP_X})
    with pytest.raises(PlanError, match="WARP_X binds warps, whose 32 lanes would repeat the same iterations"):
        compile_plan(plan, args)


def test_unrolling_a_bound_loop():
    plan, args = simt()
    plan.unroll(plan.schedule.order[2])
    with pytest.raises(PlanError, match=r"unroll\(ii\): ii is bound to THREAD_Y"):
        compile_plan(plan, args)


def test_output_role_cannot_be_read():
    nest, args = matmul_arrays(64, 64, 64, c_role=acc.Role.OUTPUT)
    s = nest.create_schedule()
    i, j, k = nest.get_indices()
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, j: G.THREAD_X})
    with pytest.raises(PlanError, match=r"statement 1: C is Role.OUTPUT but the nest reads C\[0, 0\] \(at i = 0, j = 0, k = 0\) "
                                        r"before any iteration writes it"):
        compile_plan(plan, args)
    # with prologue SET the product does not read C first
    plan, args = tensor_matmul(64, 64, 64, c_role=acc.Role.OUTPUT, prologue_op=acc.MMAFragmentOp.SET)
    compile_plan(plan, args)


# -- tensorize ---------------------------------------------------------------------------------


def tensorized(order=None, tile=(16, 16, 16), mma=acc.MMAShape.M16xN16xK16_B1, bind=None,
               M=64, N=64, K=64, operand=T.float16, result=T.float32, target=H100, b_layout=FIRST):
    nest, args = matmul_arrays(M, N, K, operand, result, b_layout=b_layout)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, 32), s.split(j, 32)
    iii, jjj, kk = s.tile({ii: tile[0], jj: tile[1], k: tile[2]})
    names = {"i": i, "j": j, "k": k, "ii": ii, "jj": jj, "iii": iii, "jjj": jjj, "kk": kk}
    s.reorder(*(names[n] for n in (order or ("i", "j", "k", "ii", "jj", "iii", "jjj", "kk"))))
    plan = s.create_plan(target)
    g = target.GridUnit
    plan.bind({names[n]: u for n, u in (bind or {"i": g.BLOCK_Y, "j": g.BLOCK_X, "ii": g.WARP_Y,
                                                  "jj": g.WARP_X}).items()})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=mma)
    return plan, args


def test_tensorize_innermost():
    plan, args = tensorized(order=("i", "j", "ii", "jj", "iii", "k", "jjj", "kk"))
    with pytest.raises(PlanError, match=r"iii, jjj, kk must be the innermost three loops; the order is \(i, j, ii, jj, iii, k"):
        compile_plan(plan, args)


def test_a_cache_inside_the_tensorized_tile_is_refused_with_the_loops_outside_it():
    plan, args = tensorized(order=("i", "j", "k", "ii", "jj", "iii", "jjj", "kk"))
    plan.cache(args[0], index=plan.schedule.order[-2], location=acc.MemorySpace.SHARED)  # jjj
    with pytest.raises(acc.CacheError, match=r"jjj is a loop of the tensorized tile \(tensorize\(indices=\(iii, "
                                             r"jjj, kk\)\)\): .* cache at iii \(the whole tile\) or a loop outside "
                                             r"it \(k\)$"):
        compile_plan(plan, args)


def test_a_tile_that_is_not_innermost_is_said_before_a_cache_inside_it():
    """Tensorized loops that are not the innermost three: that is the error, not the cache placed
    at one of them (whose 'loops outside the tile' would then include loops inside it)."""
    plan, args = tensorized(order=("i", "j", "ii", "jj", "iii", "k", "jjj", "kk"))
    plan.cache(args[0], index=plan.schedule.order[-2], location=acc.MemorySpace.SHARED)  # jjj
    with pytest.raises(PlanError, match=r"iii, jjj, kk must be the innermost three loops"):
        compile_plan(plan, args)


def test_tensorize_extents():
    plan, args = tensorized(tile=(16, 16, 32))
    with pytest.raises(PlanError, match="kk has 32 iterations; M16xN16xK16_B1 with 1 pass\\(es\\) needs 16"):
        compile_plan(plan, args)


def test_tensorize_with_thread_bindings():
    plan, args = tensorized(bind={"i": G.BLOCK_Y, "j": G.BLOCK_X, "ii": G.THREAD_Y})
    with pytest.raises(PlanError, match="THREAD_Y is bound to ii; tensorized plans bind warps and blocks"):
        compile_plan(plan, args)


def test_tensorize_partial_tiles_need_shared_operands():
    plan, args = tensorized(M=72)
    with pytest.raises(PlanError, match=r"the last tiles are partial, and tensor cores compute whole 16x16x16 tiles: "
                                        r"iteration \(i=64, j=0, k=0, ii=0, jj=0, iii=8, jjj=0, kk=0\) of a whole tile "
                                        r"reads A\[72, 0\] \(operand A\) outside A\[72, 64\]. Cache A in shared memory, "
                                        r"where the copy pads its tiles with zeros: plan.cache\(A, index=k, location=SHARED\)"):
        compile_plan(plan, args)


@pytest.mark.parametrize("logic, message", [
    (lambda A, C, i, j, k: C.__setitem__((i, j), C[i, j] + A[i, k] + A[k, j]), "must be C\\[m, n\\] \\+= A\\[m, k\\] \\* B\\[k, n\\]"),
    (lambda A, C, i, j, k: C.__setitem__((i, j), A[i, k] * A[k, j]), "must be C\\[m, n\\] \\+= A"),
])
def test_tensorize_statement_pattern(logic, message):
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(16, 16))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(16, 16))
    nest = acc.Nest(16, 16, 16)
    i, j, k = nest.get_indices()
    nest.iteration_logic(lambda: logic(A, C, i, j, k))
    plan = nest.create_schedule().create_plan(H100)
    plan.tensorize(indices=(i, j, k), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    with pytest.raises(PlanError, match=message):
        compile_plan(plan, (A, C))


def test_tensorize_needs_one_statement():
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(16, 16))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(16, 16))
    nest = acc.Nest(16, 16, 16)
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * A[k, j]
        C[i, j] += 1.0

    plan = nest.create_schedule().create_plan(H100)
    plan.tensorize(indices=(i, j, k), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    with pytest.raises(PlanError, match="a tensorized nest has one statement C \\+= A \\* B, not 2"):
        compile_plan(plan, (A, C))


def test_tensorize_wrong_roles():
    nest, args = matmul_arrays(32, 32, 16, T.float16)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, 16), s.split(j, 16)
    s.reorder(i, j, ii, jj, k)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X})
    plan.tensorize(indices=(ii, k, jj), mma_shape=acc.MMAShape.M16xN16xK16_B1)  # n is the sum
    with pytest.raises(PlanError, match="C \\(C\\) does not depend on k; C must be indexed by ii and k"):
        compile_plan(plan, args)


def test_tensorize_type_support(v100):
    plan, args = tensorized(operand=T.float64, result=T.float64)
    with pytest.raises(PlanError, match="tensor cores do not multiply float64 operands"):
        compile_plan(plan, args)
    plan, args = tensorized(result=T.float64)
    with pytest.raises(PlanError, match="float16 operands accumulate into float32, float16, not float64"):
        compile_plan(plan, args)
    plan, args = tensorized(operand=T.bfloat16, target=v100)
    with pytest.raises(PlanError, match=r"NVIDIA V100 \(sm_70\) tensor cores do not support bfloat16 operands \(needs sm_80"):
        compile_plan(plan, args)


def test_tensorize_mixed_operand_types():
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float16, shape=(32, 32))
    B = acc.Array(role=acc.Role.INPUT, element_type=T.bfloat16, shape=(32, 32))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(32, 32))
    nest = acc.Nest(32, 32, 32)
    i, j, k = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i, j), C[i, j] + A[i, k] * B[k, j]))
    s = nest.create_schedule()
    iii, jjj, kk = s.tile({i: 16, j: 16, k: 16})
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    with pytest.raises(PlanError, match="A is float16 but B is bfloat16"):
        compile_plan(plan, (A, B, C))


def test_tensorize_alignment():
    """wmma's M8xN32 (mma.sync has no 8-row tiles): 8-bit tiles of A move by 16 bytes along k."""
    plan, args = tensorized(operand=T.int8, result=T.int32, tile=(8, 32, 16), mma=acc.MMAShape.M8xN32xK16_B1)
    with pytest.raises(PlanError, match="tiles start at element offset .* moves by 16 elements \\(16 bytes\\); tensor-core loads need 32-byte"):
        compile_plan(plan, args)


def test_shared_tiles_alignment_names_the_shape_strides_and_a_way_out():
    """Accera's benchmarker caches a column-major A for M8xN32 (wmma: 8-row tiles 16 bytes
    apart); the row-major cache it suggests compiles and computes C."""
    def plan(**layout):
        return tensor_matmul(32, 64, 64, mma=acc.MMAShape.M8xN32xK16_B1, block=(16, 64), a_layout=LAST, k_split=32,
                             shared_ab=True, pipeline=layout)

    with pytest.raises(acc.CacheError, match=r"cache\(A, index=kk, location=SHARED\): wmma M8xN32xK16_B1: A's tiles "
                       r"in shared memory \(strides 1, 16\) start at element offset ii \+ 16\*kk, which moves by 8 "
                       r"elements \(16 bytes\); .* 32-byte aligned tiles; a layout=FIRST_MAJOR cache"):
        compile_plan(*plan())
    model, kernel = compile_plan(*plan(layout=FIRST))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))


def _strided_a(stride, instruction=acc.Instruction.WMMA):
    nest, args = matmul_arrays(64, 64, 64, T.float16, T.float32, a_layout=(stride, 1))
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    iii, jjj, kk = s.tile({i: 16, j: 16, k: 16})
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X})
    plan.tensorize(indices=(iii, jjj, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1, instruction=instruction)
    return plan, args


def test_tensorize_leading_dimension():
    compile_plan(*_strided_a(72))  # 72 halves = 144 bytes: a multiple of 16
    with pytest.raises(PlanError, match="A \\(A\\) has a leading dimension of 68 elements \\(136 bytes\\); tensor-core loads need a multiple of 16 bytes"):
        compile_plan(*_strided_a(68))
    # mma.sync loads a lane's elements itself: any leading dimension (pairs where aligned)
    _, kernel = compile_plan(*_strided_a(68, acc.Instruction.MMA_SYNC))
    loads = [s for s in walk_statements(kernel.body) if isinstance(s, FragmentLoad) and s.buffer == "A"]
    assert loads and all(s.path == "elements" and s.vector == 2 for s in loads)
    _, kernel = compile_plan(*_strided_a(67, acc.Instruction.MMA_SYNC))  # odd rows: element by element
    assert all(s.vector == 1 for s in walk_statements(kernel.body) if isinstance(s, FragmentLoad) and s.buffer == "A")


def test_simt_plans_compile():
    for make in (lambda: simt_matmul(100, 70, 33), lambda: simt_matmul(64, 64, 64, tuple_grid=True)):
        model, kernel = compile_plan(*make())
        assert kernel.threads_per_block == 1024


def test_package_add_errors(tmp_path):
    plan, args = simt_matmul(64, 64, 64)
    p = acc.Package()
    with pytest.raises(PackageError, match="pass schedule.create_plan"):
        p.add(plan.schedule, args=args, base_name="f")
    with pytest.raises(PackageError, match=r"base_name: 'my func' is not a C identifier"):
        p.add(plan, args=args, base_name="my func")
    for name, why in (("int", "int is a C/C\\+\\+ keyword"), ("f__g", "f__g contains __"),
                      ("schedc", "schedc is a name the generated CUDA uses")):  # passed, then NVRTC failed
        with pytest.raises(PackageError, match=f"Package.add\\({name}\\): base_name: {why}"):
            p.add(plan, args=args, base_name=name)
    with pytest.raises(PackageError, match=r"args\[0\] and args\[1\] are the same array"):
        p.add(plan, args=(args[0], args[0], args[2]), base_name="f")
    with pytest.raises(PackageError, match="args\\[0\\] is a int, not an Array"):
        p.add(plan, args=(1, args[1], args[2]), base_name="f")
    with pytest.raises(Exception, match="is used by the nest but is not in args"):
        p.add(plan, args=args[:2], base_name="f")
    p.add(plan, args=args, base_name="f")
    with pytest.raises(PackageError, match="already has a function f"):
        p.add(plan, args=args, base_name="f")
    with pytest.raises(PackageError, match="the package has no functions"):
        acc.Package().build("empty", output_dir=tmp_path)
    for name in ("bad name", "vädd"):
        with pytest.raises(PackageError, match=r"the package name must be a C identifier \(ASCII letters"):
            p.build(name, output_dir=tmp_path)
    with pytest.raises(PackageError, match=r"tolerance='abc': a relative error bound is a finite number >= 0"):
        p.build("f", tolerance="abc", output_dir=tmp_path)


def test_unsupported_arch_is_refused_when_a_function_is_added():
    """The target table asks no compiler; Package.add asks NVRTC before anything is lowered."""
    target = acc.Target(acc.Target.Model.NVIDIA_V100)
    nest, args = matmul_arrays(32, 32, 32)
    i, j, k = nest.get_indices()
    plan = nest.create_schedule().create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, j: target.GridUnit.THREAD_X})
    with pytest.raises(TargetError, match=r"Target\(NVIDIA V100\): NVRTC [\d.]+ compiles for sm_75 to sm_\d+; "
                                          r"the NVIDIA V100 is sm_70, which needs a CUDA toolkit"):
        acc.Package().add(plan, args=args, base_name="old")


def test_unsupported_arch_for_nvrtc(tmp_path, v100, monkeypatch):
    """Past the Target (an NVRTC that claims sm_70), the compiler still names the range."""
    from schedc.package import compile as compilers

    nest, args = matmul_arrays(32, 32, 32)
    i, j, k = nest.get_indices()
    plan = nest.create_schedule().create_plan(v100)
    plan.bind({i: v100.GridUnit.BLOCK_X, j: v100.GridUnit.THREAD_X})
    p = acc.Package()
    p.add(plan, args=args, base_name="old")
    claimed = compilers.supported_archs()
    monkeypatch.setattr(compilers, "supported_archs", lambda: tuple(a for a in claimed if a != 70))
    with pytest.raises(PackageError, match=r"compiles for sm_75 to sm_\d+ only; sm_70 needs another CUDA toolkit"):
        p.build("old", output_dir=tmp_path)


def test_layout_last_major_tensorizes():
    plan, args = tensorized(b_layout=LAST)
    model, kernel = compile_plan(plan, args)
    assert "col_major" in repr(kernel.body)


def test_output_must_be_fully_written():
    A = acc.Array(role=acc.Role.INPUT, shape=(8, 8), name="A")
    C = acc.Array(role=acc.Role.OUTPUT, shape=(8, 9), name="C")
    nest = acc.Nest(8, 8)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i, j + 1), A[i, j]))
    plan = nest.create_schedule().create_plan(H100)
    plan.bind({i: G.THREAD_Y, j: G.THREAD_X})
    with pytest.raises(PlanError, match=r"Role.OUTPUT array C\[8, 9\] is not fully written: no iteration writes C\[0, 0\]"):
        compile_plan(plan, (A, C))


# -- caches --------------------------------------------------------------------------------------


def test_cache_arguments():
    plan, args = tensor_matmul(64, 64, 64)
    A, B, C = args
    k = plan.schedule.order[2]
    MF = acc.MemorySpace.MMA_FRAGMENT
    with pytest.raises(acc.CacheError, match="location must be SHARED, PRIVATE or MMA_FRAGMENT, not GLOBAL"):
        plan.cache(A, index=k, location=acc.MemorySpace.GLOBAL)
    with pytest.raises(acc.CacheError, match="double buffers and stages apply to SHARED caches"):
        plan.cache(C, index=k, location=MF, double_buffer=True)
    with pytest.raises(acc.CacheError, match="strategy does not apply to an MMA_FRAGMENT cache"):
        plan.cache(C, index=k, location=MF, strategy=acc.CacheStrategy.STRIPED)
    with pytest.raises(acc.CacheError, match="needs index="):
        plan.cache(C, location=MF)
    with pytest.raises(acc.CacheError, match="is not an Array"):
        plan.cache("C", index=k, location=MF)
    plan.cache(C, index=k, location=MF)
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=k, location=MMA_FRAGMENT\): C is already cached"):
        plan.cache(C, index=k, location=MF)


def test_cache_must_hold_the_accumulator():
    plan, (A, B, C) = tensor_matmul(64, 64, 64)
    plan.cache(A, index=plan.schedule.order[2], location=acc.MemorySpace.MMA_FRAGMENT)
    with pytest.raises(acc.CacheError, match=r"cache\(A, index=k, location=MMA_FRAGMENT\): A is not the accumulator; the tensorized statement accumulates into C"):
        compile_plan(plan, (A, B, C))


def _blocked_plan(inner_k: bool):
    """Each warp computes a 16x64 strip of C: j (inside the cached k) picks one of 4 tiles."""
    nest, (A, B, C) = matmul_arrays(32, 64, 64, T.float16)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj = s.split(i, 16), s.split(j, 16)
    kk = s.split(k, 32)
    kkk = s.split(kk, 16)
    order = (i, k, kk, j) if inner_k else (i, k, j, kk)
    s.reorder(*order, ii, jj, kkk)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y})
    plan.tensorize(indices=(ii, jj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    return plan, (A, B, C)


def test_register_blocking_keeps_one_fragment_per_tile():
    plan, args = _blocked_plan(inner_k=True)
    model, kernel = compile_plan(plan, args)
    from schedc.ir.kernel import Fragment, FragmentLoad, FragmentMma
    from schedc.ir.walk import walk_statements

    statements = list(walk_statements(kernel.body))
    accumulators = [s.name for s in statements if isinstance(s, Fragment) and s.use == "accumulator"]
    assert accumulators == ["_c_0", "_c_1", "_c_2", "_c_3"]
    b_loads = [s for s in statements if isinstance(s, FragmentLoad) and s.fragment.startswith("_b")]
    a_loads = [s for s in statements if isinstance(s, FragmentLoad) and s.fragment.startswith("_a")]
    assert len(a_loads) == 1 and len(b_loads) == 4, "A's fragment is loaded once for the 4 tiles"
    assert [s.d for s in statements if isinstance(s, FragmentMma)] == ["_c_0", "_c_1", "_c_2", "_c_3"]
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=4))


def test_register_blocking_loops_move_innermost():
    """(i, k, j, kk) as Accera's benchmarker orders it runs as (i, k, kk, j): the same kernel.
    Where a cache sits at a loop that would move, the order stays and is refused."""
    model, kernel = compile_plan(*_blocked_plan(inner_k=False))
    assert kernel.body == compile_plan(*_blocked_plan(inner_k=True))[1].body
    assert [lp.name for lp in model.loops][:4] == ["i", "k", "j", "kk"]  # the model as written; lowering moves j
    plan, args = _blocked_plan(inner_k=False)
    kk = next(x for x in plan.schedule.order if x.name == "kk")
    plan.cache(args[0], index=kk, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=k, location=MMA_FRAGMENT\): j \(inside k\) "
                                             r"index C: each warp keeps one fragment per tile of C, and the loops "
                                             r"that choose the tile must be the innermost serial loops, but kk "
                                             r"runs inside j"):
        compile_plan(plan, args)
    plan, args = _blocked_plan(inner_k=False)  # the cache's own index would move: refused as written
    plan.caches.clear()
    plan.cache(args[2], index=next(x for x in plan.schedule.order if x.name == "j"),
               location=acc.MemorySpace.MMA_FRAGMENT)
    with pytest.raises(acc.CacheError, match=r"cache\(C, index=j, location=MMA_FRAGMENT\): j \(at and inside j\) "
                                             r"index C: .* but kk runs inside j"):
        compile_plan(plan, args)


def test_register_blocking_fragment_budget():
    nest, (A, B, C) = matmul_arrays(16, 512, 32, T.float16)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 16), s.split(j, 16), s.split(k, 16)
    s.reorder(i, k, j, ii, jj, kk)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y})
    plan.tensorize(indices=(ii, jj, kk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    with pytest.raises(acc.CacheError, match=r"j give each warp 32 tile\(s\) of C: 256 registers per thread for "
                                             r"the fragments alone, over 128"):
        compile_plan(plan, (A, B, C))


def test_cache_needs_a_tensorized_plan():
    plan, args = simt_matmul(64, 64, 64)
    plan.cache(args[2], index=plan.schedule.order[-1], location=acc.MemorySpace.MMA_FRAGMENT)
    with pytest.raises(acc.CacheError, match="MMA_FRAGMENT caches keep a tensor-core accumulator: tensorize the plan"):
        compile_plan(plan, args)


def test_cached_accumulator_is_loaded_once():
    plan, args = tensor_matmul(64, 64, 128, cache_c=0)
    model, kernel = compile_plan(plan, args)
    from schedc.ir.kernel import FragmentLoad, Loop

    k_loop = next(s for s in kernel.body if isinstance(s, Loop))
    assert any(isinstance(s, FragmentLoad) and s.fragment == "_c" for s in kernel.body)
    assert not any(isinstance(s, FragmentLoad) and s.fragment == "_c" for s in k_loop.body)


def test_shared_cache_checks():
    plan, (A, B, C) = tensor_matmul(64, 64, 256, k_split=64)
    k = plan.schedule.order[2]
    plan.cache(C, index=k, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match="tensor cores write C from fragments: cache it in MMA_FRAGMENT"):
        compile_plan(plan, (A, B, C))
    plan, args = simt_matmul(2048, 2048, 2048, block=(32, 32), shared_k=2048)
    with pytest.raises(acc.CacheError, match=r"the caches need 524288 bytes of shared memory per block \(A 262144, B 262144\); NVIDIA H100 allows 232448 \(with the opt-in attribute; 49152 without\)"):
        compile_plan(plan, args)


def test_shared_cache_over_48k_opts_in():
    plan, args = simt_matmul(256, 256, 512, block=(32, 32), shared_k=256)  # 2 x 32 KiB
    model, kernel = compile_plan(plan, args)
    assert kernel.dynamic_shared_bytes == 65536
    from schedc.codegen.cuda import emit_launcher

    assert "cudaFuncSetAttribute(f__gpu__, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);" in emit_launcher(kernel)


def _tilus(**kw):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "samples"))
    from tilus_matmul import matmul

    return matmul(256, 256, 256, 3, **kw)


def test_blocks_per_sm_bounds_the_registers():
    from schedc.codegen.cuda import emit_source

    model, kernel = compile_plan(*_tilus(warp=(64, 64), blocks_per_sm=3))
    assert model.blocks_per_sm == kernel.min_blocks == 3
    assert 'extern "C" __global__ void __launch_bounds__(128, 3)' in emit_source([kernel], "// bounds")
    _, kernel = compile_plan(*_tilus())
    assert kernel.min_blocks == 0 and "__launch_bounds__(256)\n" in emit_source([kernel], "// bounds")


@pytest.mark.parametrize("kw, error, message", [
    ({"blocks_per_sm": -1}, PlanError, r"_blocks_per_SM must be a positive integer"),
    ({"blocks_per_sm": 2.5}, PlanError, r"_blocks_per_SM must be a positive integer"),
    ({"blocks_per_sm": 33}, PlanError, r"NVIDIA H100 holds at most 32 blocks per multiprocessor"),
    ({"blocks_per_sm": 9}, PlanError, r"create_plan\(_blocks_per_SM=9\): 9 blocks of 256 threads are 2304 threads; "
                                      r"a NVIDIA H100 multiprocessor holds 2048"),
    ({"blocks_per_sm": 5, "warp": (64, 64)}, acc.CacheError,
     r"create_plan\(_blocks_per_SM=5\): 5 blocks of 49152 bytes of shared memory need 245760 bytes; a NVIDIA H100 "
     r"multiprocessor has 233472"),
])
def test_blocks_per_sm_that_cannot_fit_is_refused(kw, error, message):
    with pytest.raises(error, match=message):
        compile_plan(*_tilus(**kw))


def _written_cache(logic, shape=(32, 8), c_shape=(32, 8), **cache):
    """A 2-D nest over (i, j) with i on blocks of 16 threads and j serial; C cached SHARED at i."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=shape, name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=c_shape, name="C")
    nest = acc.Nest(shape=shape)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: logic(A, C, i, j))
    s = nest.create_schedule()
    ii = s.split(i, 16)
    s.reorder(i, ii, j)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, ii: G.THREAD_X})
    plan.cache(C, index=i, location=acc.MemorySpace.SHARED, **cache)
    return plan, (A, C)


def test_a_written_shared_cache_is_written_back():
    model, kernel = compile_plan(*_written_cache(lambda A, C, i, j: C.__setitem__((i, j), C[i, j] * 2.0 + A[i, j])))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=2))


@pytest.mark.parametrize("logic, c_shape, cache, message", [
    (lambda A, C, i, j: C.__setitem__((i, j), C[i, 0] + A[i, j]), (32, 8), {},
     r"a statement touches C\[i, 0\], C\[i, j\]: a tile written back must hold only the elements the block writes"),
    (lambda A, C, i, j: C.__setitem__((i, 2 * j), A[i, j]), (32, 16), {},
     r"the block's tile C\[i, 0\] \+ \[16 x 15\] .* holds elements the block does not write \(strided elements"),
    (lambda A, C, i, j: C.__setitem__((i, j), C[i, j] + A[i, j]), (32, 8), {"stages": 2},
     r"the nest writes C: its tile is filled once and written back after the loops, without a pipeline or TMA"),
])
def test_written_shared_caches_that_cannot_be_written_back(logic, c_shape, cache, message):
    with pytest.raises(acc.CacheError, match=message):
        compile_plan(*_written_cache(logic, c_shape=c_shape, **cache))


def test_a_register_tile_of_a_written_shared_tile_goes_back_through_it():
    """C in shared memory at j (blocks), each thread's 2x2 part in registers at iii: the
    registers go back to the shared tile, which the block writes back (partial tiles at the
    edges: 40 x 24 in 16 x 8 blocks)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(40, 32), name="A")
    B = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(32, 24), name="B")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(40, 24), name="C")
    nest = acc.Nest(shape=(40, 24, 32))
    i, j, k = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i, j), C[i, j] + A[i, k] * B[k, j]))
    s = nest.create_schedule()
    ii, jj = s.split(i, 16), s.split(j, 8)
    iii, jjj = s.split(ii, 2), s.split(jj, 2)
    s.reorder(i, j, ii, jj, k, iii, jjj)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X, ii: G.THREAD_Y, jj: G.THREAD_X})
    tile = plan.cache(C, index=j, location=acc.MemorySpace.SHARED)
    plan.cache(tile, index=iii, location=acc.MemorySpace.PRIVATE)
    model, kernel = compile_plan(plan, (A, B, C))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=1))


def test_a_written_tile_that_reaches_elements_the_nest_leaves_alone_is_refused():
    """The nest writes C[0..30) of a C of 32: the last block's tile C[24..32) lies inside C, and
    writing it back would write C[30] and C[31] (the random tester's seed 4403, #187)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(30,), name="A")
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(32,), name="C")
    nest = acc.Nest(shape=(30,))
    (i,) = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i,), C[i] * 2.0 + A[i]))
    s = nest.create_schedule()
    s.split(i, 8)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X})
    plan.cache(C, index=i, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.CacheError, match=r"the block's tile C\[i\] \+ \[8\] .*the nest covers only part of C"):
        compile_plan(plan, (A, C))


def _cached_inside_the_tile(index: str, instruction):
    nest, args = matmul_arrays(64, 64, 64, T.float16, T.float32)
    i, j, k = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 32), s.split(j, 32), s.split(k, 32)
    iii, jjj, kkk = s.tile({ii: 16, jj: 16, kk: 16})
    s.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
    plan = s.create_plan(H100)
    g = H100.GridUnit
    plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.WARP_Y, jj: g.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1, instruction=instruction)
    plan.cache(args[0], index={"iii": iii, "jjj": jjj, "kkk": kkk}[index], location=H100.MemorySpace.SHARED)
    return plan, args


@pytest.mark.parametrize("instruction", [acc.Instruction.MMA_SYNC, acc.Instruction.WMMA])
@pytest.mark.parametrize("index", ["jjj", "kkk"])
def test_a_cache_inside_the_tensorized_tile_is_refused(index, instruction):
    """Was an internal error (mma.sync: "a tile of the swizzled A_shared with strides 0, 1") or
    an NVRTC failure after check passed (wmma: "identifier iii is undefined")."""
    with pytest.raises(acc.CacheError, match=rf"cache\(A, index={index}, location=SHARED\): {index} is a loop of the "
                                             r"tensorized tile \(tensorize\(indices=\(iii, jjj, kkk\)\)\): the tile is "
                                             r"one tensor-core operation, with no loop inside it to cache at; cache at "
                                             r"iii \(the whole tile\) or a loop outside it \(k, kk\)"):
        compile_plan(*_cached_inside_the_tile(index, instruction))


@pytest.mark.parametrize("instruction", [acc.Instruction.MMA_SYNC, acc.Instruction.WMMA])
def test_a_cache_of_the_whole_tensorized_tile_runs(instruction):
    model, kernel = compile_plan(*_cached_inside_the_tile("iii", instruction))
    assert all(r.passed for r in emulate_function(model, kernel, blocks=None))
