"""Run-time sizes (``acc.create_dimensions``): the script, the analysis for every value of the
sizes, the kernels (SIMT, tensor cores, Hopper) emulated at several values, the package and the
loader that reads the sizes from the arrays."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import schedc as acc
from schedc.errors import LaunchError, NestError, PackageError, PlanError, ScheduleError
from schedc.ir.kernel import ScalarParam
from schedc.package import hat
from schedc.verify import at_sizes, default_sizes, emulate_function
from tests.plans import H100, build, compile_function_plan, tensor_matmul

from .conftest import require_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))

G = acc.GridUnit
T = acc.ScalarType


def _scale(rows_per_block=4, columns=64, bind_rows=True, args_first=False):
    """B[i, j] += 2 A[i, j] over (M, columns), M a run-time size; i split by ``rows_per_block``."""
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M, columns))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, columns))
    nest = acc.Nest(M, columns)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] += 2.0 * A[i, j]

    s = nest.create_schedule()
    ii, jj = s.tile({i: rows_per_block, j: 32})
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X, ii: G.THREAD_Y, jj: G.THREAD_X} if bind_rows
              else {j: G.BLOCK_X, jj: G.THREAD_X})
    return plan, ((M, A, B) if args_first else (A, B, M))


def _passes(model, fn, sizes):
    for m in sizes:
        reports = emulate_function(model, fn, None, sizes={"M": m})
        assert reports and all(r.passed for r in reports), (m, [str(r) for r in reports])
        assert reports[0].compared > 0


# -- the script ------------------------------------------------------------------------------


def test_create_dimensions_names_its_sizes_after_the_variables():
    M, N = acc.create_dimensions()
    K = acc.create_dimensions()
    assert (M.name, N.name, K.name) == ("M", "N", "K")
    A = acc.Array(role=acc.Role.INPUT, shape=(M, 8))
    assert A.shape == (M, 8) and A.strides == (8, 1) and A.display_name.endswith("[M, 8] array>")
    L = acc.Array(role=acc.Role.INPUT, shape=(8, N), layout=acc.Array.Layout.LAST_MAJOR)
    assert L.strides == (1, 8)
    with pytest.raises(NestError, match="assign the result to variables"):
        print(acc.create_dimensions())
    with pytest.raises(NestError, match="only input sizes"):
        acc.create_dimensions(acc.Role.OUTPUT)


def test_a_run_time_size_is_the_slowest_dimension_of_a_caller_array():
    M = acc.create_dimensions()
    with pytest.raises(NestError, match=r"^X = Array\(role=Role.INPUT\): shape \(8, M\): a run-time size may be the "
                                        r"array's first dimension"):  # named by the variable it is assigned to
        X = acc.Array(role=acc.Role.INPUT, shape=(8, M))  # noqa: F841
    with pytest.raises(NestError, match="may be the array's slowest dimension"):
        acc.Array(role=acc.Role.INPUT, shape=(M, 8), layout=(1, 16))
    with pytest.raises(NestError, match="takes no part in arithmetic"):
        acc.Nest(M + 1)
    with pytest.raises(NestError, match="has no value before the function runs"):
        range(M)


def test_package_add_takes_every_size_the_nest_uses_from_args():
    plan, (A, B, M) = _scale()
    with pytest.raises(PlanError, match=r"M is a run-time size the nest uses: pass it in args"):
        acc.Package().add(plan, args=(A, B), base_name="f")
    N = acc.create_dimensions()
    with pytest.raises(PlanError, match="args has the run-time size N, which no array or nest of the function uses"):
        acc.Package().add(plan, args=(A, B, M, N), base_name="f")
    with pytest.raises(PackageError, match=r"args\[2\] and args\[3\] are the same run-time size M: each appears once"):
        acc.Package().add(plan, args=(A, B, M, M), base_name="f")


def test_a_size_no_argument_array_has_cannot_be_read_at_the_call():
    M = acc.create_dimensions()
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8,))
    nest = acc.Nest(M, 8)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[j] += 1.0

    with pytest.raises(PlanError, match="the run-time size M is the extent of no argument array's dimension"):
        acc.Package().add(nest.create_plan(H100), args=(S, M), base_name="f")


def test_out_of_bounds_for_some_size_names_the_size():
    M, N = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(N, 4))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 4))
    nest = acc.Nest(M, 4)
    i, j = nest.get_indices()
    with pytest.raises(NestError, match=r"reads A\[1, 0\] outside its shape \(N, 4\) when M = 2, N = 1"):
        @nest.iteration_logic
        def _():
            B[i, j] += A[i, j]


def test_out_of_bounds_for_every_size_names_the_element_at_the_smallest():
    """A[i + 1, j] over M rows of A is outside for every M (the last row reads one past): shown
    at M = 1, the smallest size; a bound that names one size shows that size alone."""
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M, 4))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 4))
    nest = acc.Nest(M, 4)
    i, j = nest.get_indices()
    with pytest.raises(NestError, match=r"iteration \(i=0, j=0\) reads A\[1, 0\] outside its shape \(M, 4\) for every M "
                                        r"\(shown at M = 1\)"):
        @nest.iteration_logic
        def _():
            B[i, j] += A[i + 1, j]
    M, N = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(N,))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 4))
    nest = acc.Nest(M, 4)
    i, j = nest.get_indices()
    with pytest.raises(NestError, match=r"reads A\[3\] outside its shape \(N\) when N = 1$"):
        @nest.iteration_logic
        def _():
            B[i, j] += A[3]


# -- the analysis holds for every size --------------------------------------------------------


def test_a_race_at_some_sizes_is_refused_with_a_witness():
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M, 32))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 32))
    nest = acc.Nest(M, 32)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[i, j]
        B[0, j] = A[i, j]  # every block writes row 0: blocks race once there are two (M >= 2)

    plan = nest.create_plan(H100)
    plan.bind({i: G.BLOCK_X, j: G.THREAD_X})
    with pytest.raises(PlanError, match=r"both write B\[0, 0\] when M = 2: a race"):
        compile_function_plan(plan, (A, B, M))


def test_an_output_the_nest_leaves_unwritten_for_some_size_is_refused():
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(8,))
    B = acc.Array(role=acc.Role.OUTPUT, shape=(M, 8))
    nest = acc.Nest(M, 4)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[j]

    with pytest.raises(PlanError, match=r"no iteration writes B\[0, 4\] when M = 1; use Role.INPUT_OUTPUT"):
        compile_function_plan(nest.create_plan(H100), (A, B, M))


def test_a_fixed_output_written_at_every_size_is_accepted():
    """Its coverage is checked for sizes >= 1 only (at M = 0 no iteration would write it)."""
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M,))
    B = acc.Array(role=acc.Role.OUTPUT, shape=(1,))
    nest = acc.Nest(M, 1)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[j] = A[i]

    model, fn = compile_function_plan(nest.create_plan(H100), (A, B, M))
    _passes(model, fn, (1, 3))


def _column_sums(columns: int):
    """S[j] += A[i, j] over M run-time rows: the schedule (j before i), its indices and arrays."""
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT, shape=(M, columns))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(columns,))
    nest = acc.Nest(M, columns)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[j] += A[i, j]

    s = nest.create_schedule()
    s.reorder(j, i)
    return s, (i, j), (A, S, M)


def test_a_cache_whose_tile_grows_with_the_size_is_refused():
    s, (i, j), args = _column_sums(32)
    plan = s.create_plan(H100)
    plan.bind({j: G.THREAD_X})
    plan.cache(args[0], index=i, location=acc.MemorySpace.SHARED)
    with pytest.raises(acc.SchedcError, match="grows with the run-time size M"):
        compile_function_plan(plan, args)


def _increment(columns: int):
    """A[i, j] += 1 over (M, columns): the nest, its indices and (A, M)."""
    M = acc.create_dimensions()
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, columns))
    nest = acc.Nest(M, columns)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        A[i, j] += 1.0

    return nest, (i, j), (A, M)


def test_the_loop_of_a_size_is_bound_to_blocks_only():
    nest, (i, j), (A, M) = _increment(32)
    plan = nest.create_plan(H100)
    plan.bind({i: G.THREAD_Y, j: G.THREAD_X})
    with pytest.raises(PlanError, match="i runs to the run-time size M; a block's threads are fixed"):
        compile_function_plan(plan, (A, M))
    plan = nest.create_plan(H100)
    plan.bind({(j, i): G.BLOCK_X})
    with pytest.raises(PlanError, match="outermost loop of its binding only"):
        compile_function_plan(plan, (A, M))


def test_split_k_with_a_run_time_size_is_refused():
    M = acc.create_dimensions()
    plan, args = tensor_matmul(M, 64, 64, shared_ab=True, splits=2)
    with pytest.raises(PlanError, match=r"split-K's workspace and combine are built for fixed sizes only"):
        compile_function_plan(plan, (*args, M))
    A = acc.Array(role=acc.Role.INPUT, shape=(M,))
    B = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(1,))
    nest = acc.Nest(M)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[0] += A[i]

    plan = nest.create_plan(H100)
    plan.bind({i: G.BLOCK_X})  # the sum over M rows split between M blocks
    with pytest.raises(PlanError, match=r"i splits a reduction between blocks, and the function has run-time sizes"):
        compile_function_plan(plan, (A, B, M))


# -- kernels ----------------------------------------------------------------------------------


def test_simt_kernel_takes_the_size_and_guards_its_partial_tiles():
    plan, args = _scale()
    model, fn = compile_function_plan(plan, args)
    kernel = fn.kernels[0]
    assert [v.name for v in kernel.values] == ["M"] and kernel.values[0].size
    assert not isinstance(kernel.grid[1], int)  # (M + 3) / 4 blocks, at each launch
    from schedc.codegen.cuda import emit_source

    source = emit_source([fn], "// sizes")
    assert "int M)" in source and "if (i + ii <= M - 1)" in source
    assert "dim3(2, (unsigned)((((long long)M + 3LL) / 4LL)), 1)" in source  # 64-bit: M + 3 cannot overflow
    assert "if (M < 1) return (int)cudaErrorInvalidValue;" in source
    _passes(model, fn, (1, 3, 4, 5, 9, 17))
    assert default_sizes(model) == {"M": 9}


@pytest.mark.parametrize("pipeline", [{"stages": 3}, {"double_buffer": True},
                                      {"double_buffer": True, "double_buffer_location": acc.MemorySpace.PRIVATE}],
                         ids=["cp.async ring", "double buffer", "register double buffer"])
def test_pipelines_along_a_loop_to_the_size(pipeline):
    """Tiles of 4 rows prefetched along the loop over M's tiles: the ring's first stages exist
    where M reaches them, each prefetch where the next tile does."""
    s, (i, j), args = _column_sums(64)
    ii = s.split(i, 4)
    jj = s.split(j, 32)
    s.reorder(j, jj, i, ii)
    plan = s.create_plan(H100)
    plan.bind({j: G.BLOCK_X, jj: G.THREAD_X})
    plan.cache(args[0], index=ii, location=acc.MemorySpace.SHARED, **pipeline)
    model, fn = compile_function_plan(plan, args)
    _passes(model, fn, (1, 3, 4, 5, 13))


def test_serial_loop_to_the_size():
    s, (i, j), args = _column_sums(64)
    jj = s.split(j, 32)
    plan = s.create_plan(H100)
    plan.bind({j: G.BLOCK_X, jj: G.THREAD_X})
    model, fn = compile_function_plan(plan, args)
    from schedc.codegen.cuda import emit_source

    assert "for (int i = 0; i < M; i += 1)" in emit_source([fn], "")
    _passes(model, fn, (1, 2, 7))


@pytest.mark.parametrize("options", [
    {"shared_ab": True},
    {"shared_ab": True, "instruction": acc.Instruction.WMMA},
    {"shared_ab": True, "result": T.float16, "cache_c": 0, "k_split": 32, "pipeline": {"double_buffer": True}},
], ids=["mma.sync", "wmma", "f16 C in a fragment, double buffer"])
def test_tensor_core_plan_takes_any_m(options):
    M = acc.create_dimensions()
    plan, args = tensor_matmul(M, 64, 64, **options)
    model, fn = compile_function_plan(plan, (*args, M))
    _passes(model, fn, (1, 7, 16, 33))


def test_tensor_core_operand_outside_for_some_m_names_it():
    M = acc.create_dimensions()
    plan, args = tensor_matmul(M, 64, 64)
    with pytest.raises(PlanError, match=r"reads A\[1, 0\] \(operand A\) outside A\[M, 64\] when M = 1\. Cache A"):
        compile_function_plan(plan, (*args, M))


def test_hopper_persistent_plan_takes_any_m():
    from hopper_matmul import matmul

    M = acc.create_dimensions()
    plan, args = matmul(M, 256, 128, block=(128, 128, 64), stages=2, output=T.float16,
                        persistent={"group": 8})
    model, fn = compile_function_plan(plan, (*args, M))
    kernel = fn.kernels[0]
    assert kernel.persistent.blocks == 132  # one a multiprocessor; fewer launched where there are fewer tiles
    from schedc.codegen.cuda import emit_source

    assert "(((long long)M + 127LL) / 128LL) * 2LL) < 132LL ?" in emit_source([fn], "")
    for m in (1, 100, 129):
        reports = emulate_function(model, fn, 4, sizes={"M": m})
        assert all(r.passed for r in reports), [str(r) for r in reports]


def test_fused_parts_keep_the_guards_of_a_run_time_size():
    """A sum across THREAD_X then a use of it, M rows two a block: each part guards its rows
    against M (the guard names M and the part's loops)."""
    from .test_reduce import _sum_then_use

    M = acc.create_dimensions()
    s, (f, i, a, b), (X, S, Y) = _sum_then_use(M, 64)
    ii = s.split(i, 2)
    aa, bb = s.split(a, 32), s.split(b, 32)
    s.reorder(i, ii, f, a, aa, b, bb)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, ii: G.THREAD_Y, aa: G.THREAD_X, bb: G.THREAD_X})
    model, fn = compile_function_plan(plan, (X, S, Y, M))
    _passes(model, fn, (1, 2, 3, 5))


def test_a_tuple_binding_with_the_size_loop_outermost():
    from tests.plans import simt_matmul

    M = acc.create_dimensions()
    plan, args = simt_matmul(M, 64, 64, block=(16, 16), tuple_grid=True)  # {(i, j): BLOCK_X}
    model, fn = compile_function_plan(plan, (*args, M))
    _passes(model, fn, (1, 15, 17, 40))


def test_sizes_are_distinct_and_not_generated_names():
    def size():
        M = acc.create_dimensions()
        return M

    M, other = size(), size()
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, 8))
    B = acc.Array(role=acc.Role.INPUT, shape=(other, 8))
    nest = acc.Nest(M, 8)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        A[i, j] += 1.0

    with pytest.raises(PlanError, match="two different run-time sizes are named M"):
        acc.Package().add(nest.create_plan(H100), args=(A, B, M, other), base_name="f")
    for name in ("work", "tile_x", "A_map"):
        with pytest.raises(NestError, match=f"a run-time size is named after its variable: {name}"):
            exec(f"{name} = acc.create_dimensions()", {"acc": acc})


def test_parameter_grids_with_a_run_time_size(tmp_path):
    P = acc.create_parameters()
    nest, (i, j), (A, M) = _increment(64)
    s = nest.create_schedule()
    ii = s.split(i, P)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_X, ii: G.THREAD_Y, j: G.THREAD_X})
    package = acc.Package()
    functions = package.add(plan, args=(A, M), base_name="p", parameters=[{P: 4}, {P: 3}])
    loaded = acc.load(package.build("p", output_dir=tmp_path))
    assert len({f.name for f in functions}) == 2
    for f in functions:
        fn = loaded.functions[f.name]
        for m in (1, 5):
            assert all(r.passed for r in emulate_function(fn.model, fn.function, None, sizes={"M": m}))


def test_plan_print_shows_the_size(capsys):
    plan, _ = _scale()
    plan.print()
    assert "for i in range(0, M, 4):                         # BLOCK_Y, ceil(M / 4) iterations" in capsys.readouterr().out
    with pytest.raises(PlanError, match="i runs to the run-time size M: the grid is computed at each call"):
        plan._calc_block_grid_dim()


# -- the package ------------------------------------------------------------------------------


def test_package_records_the_size_and_takes_it_where_args_put_it(tmp_path):
    plan, args = _scale(args_first=True)
    package = acc.Package()
    package.add(plan, args=args, base_name="scale")
    path = package.build("scale", output_dir=tmp_path)
    source = (tmp_path / "scale.cu").read_text()
    assert 'extern "C" int scale(int M, const float* A, float* B)' in source
    table = hat.read(path)
    arguments = table["functions"]["scale"]["arguments"]
    assert [a["name"] for a in arguments] == ["M", "A", "B"]
    assert arguments[1]["shape"] == ["M", 64]
    assert "run-time size (int32): the extent A.shape[0], B.shape[0]" in arguments[0]["description"]
    assert table["device_functions"]["scale__gpu__"]["launch_parameters"][:3] == [2, "(M + 3) / 4", 1]
    assert "int scale(int32_t M, const float* A, float* B);" in (tmp_path / "scale.hat").read_text()
    again = acc.Package()
    plan, args = _scale(args_first=True)
    again.add(plan, args=args, base_name="scale")
    other = tmp_path / "again"
    again.build("scale", output_dir=other)
    assert (other / "scale.cu").read_bytes() == (tmp_path / "scale.cu").read_bytes()
    assert (other / "scale.hat").read_bytes() == path.read_bytes()


def test_loader_reads_the_sizes_from_the_arrays(tmp_path):
    plan, args = _scale()
    package = acc.Package()
    package.add(plan, args=args, base_name="scale")
    fn = acc.load(package.build("scale", output_dir=tmp_path)).scale
    assert repr(fn) == "<schedc function scale(A: float32[M, 64], B: float32[M, 64])>"
    assert [p.name for p in fn.function.caller_params] == ["A", "B"]
    a, b = np.ones((7, 64), np.float32), np.zeros((7, 64), np.float32)
    views, scalars = fn.check_call((a, b))
    assert np.frombuffer(scalars["M"], np.int32)[0] == 7 and views[0].array.size == 7 * 64
    with pytest.raises(LaunchError, match=r"A.shape\[0\] = 7 but B.shape\[0\] = 8: both are the run-time size M"):
        fn.check_call((a, np.zeros((8, 64), np.float32)))
    with pytest.raises(LaunchError, match=r"A.shape\[0\] = 0: the run-time size M is at least 1"):
        fn.check_call((np.ones((0, 64), np.float32), np.ones((0, 64), np.float32)))
    with pytest.raises(LaunchError, match="64"):  # the fixed dimension is still checked
        fn.check_call((np.ones((7, 32), np.float32), np.ones((7, 32), np.float32)))


def test_loader_refuses_arguments_it_cannot_read_a_size_from(tmp_path):
    plan, args = _scale()
    package = acc.Package()
    package.add(plan, args=args, base_name="scale")
    fn = acc.load(package.build("scale", output_dir=tmp_path)).scale
    for a, said in (([[0.0] * 64] * 7, "a list"), (np.zeros(64, np.float32), r"shape \(64,\)"),
                    (None, "a NoneType")):
        with pytest.raises(LaunchError, match=f"argument A: {said}, expected an array of shape \\(M, 64\\)"):
            fn.check_call((a, np.zeros((7, 64), np.float32)))


def test_loader_refuses_grids_cuda_cannot_launch():
    from schedc.package.loader import read_sizes

    plan, args = _scale()
    _, fn = compile_function_plan(plan, args)

    class Shape:  # an argument's shape, without its memory
        shape = (262145, 64)

    with pytest.raises(LaunchError, match="65537 blocks along y at M = 262145; CUDA launches at most 65535"):
        read_sizes("scale(A, B)", fn, [(fn.arrays[0], Shape()), (fn.arrays[1], Shape())])


def test_loader_refuses_arrays_past_32_bit_indices():
    from schedc.package.loader import read_sizes

    plan, args = _scale()
    _, fn = compile_function_plan(plan, args)

    class Shape:  # an argument's shape, without its memory
        shape = (2**26, 64)

    with pytest.raises(LaunchError, match=r"A spans 4294967296 elements at M = 67108864: the function indexes with "
                                          "32-bit integers"):
        read_sizes("scale(A, B)", fn, [(fn.arrays[0], Shape()), (fn.arrays[1], Shape())])


def test_cli_emulates_at_the_sizes_given(tmp_path):
    from click.testing import CliRunner

    from schedc.cli import main

    plan, args = _scale()
    package = acc.Package()
    package.add(plan, args=args, base_name="scale")
    path = package.build("scale", output_dir=tmp_path)
    result = CliRunner().invoke(main, ["emulate", str(path), "--sizes", "M=6"])
    assert result.exit_code == 0, result.output
    assert "emulated scale at M = 6" in result.output and "384 elements compared" in result.output
    result = CliRunner().invoke(main, ["emulate", str(path)])
    assert "at M = 9" in result.output
    result = CliRunner().invoke(main, ["emulate", str(path), "--sizes", "Q=6"])
    assert result.exit_code != 0 and "--sizes Q=6: no function here has a run-time size Q (theirs: M)" in result.output
    result = CliRunner().invoke(main, ["emulate", str(path), "--sizes", "M=0"])
    assert result.exit_code != 0 and "'M=0' is not NAME=N" in result.output
    result = CliRunner().invoke(main, ["emulate", str(path), "--sizes", "M=5,M=6"])
    assert result.exit_code != 0 and "M is given twice (M=5 and M=6)" in result.output
    result = CliRunner().invoke(main, ["emulate", str(path), "--sizes", "M=3000000000"])
    assert result.exit_code != 0 and "at M = 3000000000" in result.output and "A spans 192000000000 elements: the " \
                                     "CPU emulates arrays of at most 2147483647 elements" in result.output


@pytest.mark.gpu
def test_one_build_runs_at_every_size(tmp_path):
    from schedc.verify import run_function

    plan, args = _scale()
    package = acc.Package()
    package.add(plan, args=args, base_name="scale")
    fn = acc.load(package.build("scale", output_dir=tmp_path)).scale
    require_gpu()
    for m in (1, 7, 16, 100, 4096):
        reports = run_function(fn, sizes={"M": m})
        assert all(r.passed for r in reports), [str(r) for r in reports]
    a = np.random.default_rng(0).standard_normal((13, 64)).astype(np.float32)
    b = np.zeros_like(a)
    fn(a, b)
    np.testing.assert_allclose(b, 2 * a, rtol=1e-6)
    assert isinstance(fn.function.sizes[0], ScalarParam)


def test_schedule_prints_the_size():
    plan, _ = _scale()
    assert "for i in range(0, M, 4):" in str(plan.schedule)
    with pytest.raises(ScheduleError, match="its count is known at run time only"):
        plan.schedule.pieces[plan.schedule.order[0]].extent  # noqa: B018


def _row_max_less(M):
    """Y = X - the row's maximum over M rows (a run-time size) of 300, the maxima a TEMP array of M."""
    X = acc.Array(role=acc.Role.INPUT, shape=(M, 300))
    Y = acc.Array(role=acc.Role.OUTPUT, shape=(M, 300))
    peak = acc.Array(role=acc.Role.TEMP, shape=(M,))
    first, second, third = acc.Nest(M), acc.Nest(M, 300), acc.Nest(M, 300)
    (i0,), (i1, j1), (i2, j2) = first.get_indices(), second.get_indices(), third.get_indices()

    @first.iteration_logic
    def _():
        peak[i0] = -math.inf

    @second.iteration_logic
    def _():
        peak[i1] = acc.max(peak[i1], X[i1, j1])

    @third.iteration_logic
    def _():
        Y[i2, j2] = X[i2, j2] - peak[i2]

    s = acc.fuse((first.create_schedule(), second.create_schedule(), third.create_schedule()), partial=1)
    _, i, j1, j2 = s.get_indices()
    t1, t2 = s.split(j1, 64), s.split(j2, 64)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, t1: H100.GridUnit.THREAD_X, t2: H100.GridUnit.THREAD_X})
    return plan, (M, X, Y)


def test_a_temporary_array_of_a_run_time_size_is_a_workspace_of_the_calls_size(tmp_path):
    """TEMP arrays of a run-time size live in a workspace the loader allocates for the call's
    sizes (a C caller passes it: the .hat gives its bytes as a formula); the kernel emulates
    right at any size."""
    M = acc.create_dimensions()
    plan, args = _row_max_less(M)
    build(plan, args, "rowmax", tmp_path)
    fn = acc.load(tmp_path / "rowmax.hat").functions["rowmax"]
    (workspace,) = fn.function.workspaces
    assert workspace.name == "peak" and workspace.kind == "workspace"
    assert [p.name for p in fn.function.params] == ["M", "X", "Y", "peak"]
    hat = (tmp_path / "rowmax.hat").read_text()
    assert "workspace float32[M] (4*M bytes of device memory the caller allocates for the largest sizes" in hat
    assert "int rowmax(int M, const float* X, float* Y, float* peak)" in (tmp_path / "rowmax.cu").read_text()
    for m in (1, 5, 33):
        model, function = at_sizes(fn.model, fn.function, {"M": m})
        reports = emulate_function(model, function, None, seed=m)
        assert [r.array for r in reports] == ["Y"] and all(r.passed for r in reports), [str(r) for r in reports]


def test_a_workspace_of_a_run_time_size_grows_with_the_calls_sizes(device_allocations):
    """The loader allocates a run-time-sized workspace for the call's sizes, per stream, and again
    only where a call needs more than the stream's has."""
    from schedc.package import loader

    M = acc.create_dimensions()
    model, function = compile_function_plan(*_row_max_less(M))
    fn = loader.Function(None, loader.FunctionInfo("f", model, function, {}))
    first = fn.workspace_pointers(0, {"M": 50})
    assert fn.workspace_pointers(0, {"M": 7}) == first and device_allocations == [200]
    assert fn.workspace_pointers(0, {"M": 51}) != first and device_allocations == [200, 204]
    assert fn.workspace_pointers(5, {"M": 1}) and device_allocations == [200, 204, 4]


@pytest.mark.gpu
def test_runtime_m_sample_runs_at_every_m(tmp_path):
    """samples/runtime_m.py built once: the Hopper GEMM and the row kernel at several M (the
    float64 reference of a 4096-row GEMM is left to benchmarks/runtime_m.py, against torch)."""
    from schedc.verify import run_function

    from .conftest import build_sample

    package = acc.load(build_sample("runtime_m", tmp_path))
    gemm, rows, decode, softmax_m, layernorm_m = (package.functions[n] for n in (
        "gemm_m", "rows_m", "gemm_m_decode", "softmax_m", "layernorm_m"))
    assert [p.name for p in gemm.function.params[:4]] == ["M", "A", "B", "C"]
    require_gpu()
    for fn, m in [*((gemm, m) for m in (1, 7, 16, 100, 257)), *((rows, m) for m in (1, 7, 4096)),
                  *((decode, m) for m in (1, 65)), *((f, m) for f in (softmax_m, layernorm_m) for m in (1, 300, 77))]:
        reports = run_function(fn, sizes={"M": m})
        assert all(r.passed for r in reports), (fn.name, m, [str(r) for r in reports])
