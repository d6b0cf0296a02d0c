"""Arrays and loops take the names of the script's variables: in messages, the Model, the CUDA
and ``schedc check``; explicit names win; unusable or clashing names fall back to positions."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import schedc as acc
from schedc.cli import main
from schedc.package.build import session
from schedc.verify import emulate_function

from .plans import H100, compile_plan

# A batched product written as a script at module level: by position its arrays would be A, B,
# C and its loops i, j, k, l, jj, kk (the nest's i is its second dimension).
SCRIPT = '''
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
In = acc.Array(role=acc.Role.INPUT, shape=(4, 64, 32))
W = acc.Array(role=acc.Role.INPUT, shape=(32, 48))
Out = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4, 64, 48))

nest = acc.Nest(shape=(4, 64, 48, 32))
b, i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    Out[b, i, j] += In[b, i, k] * W[k, j]


schedule = nest.create_schedule()
ii, jj = schedule.split(i, 16), schedule.split(j, 16)
schedule.reorder(b, i, j, ii, jj, k)
plan = schedule.create_plan(target)
g = target.GridUnit
plan.bind({b: g.BLOCK_Z, i: g.BLOCK_Y, j: g.BLOCK_X, ii: g.THREAD_Y, jj: g.THREAD_X})
# extra
package = acc.Package()
package.add(plan, args=(In, W, Out), base_name="batched")
package.build("batched", output_dir="unused")
'''

BAD_CACHE = "plan.cache(Out, index=i, location=acc.MemorySpace.SHARED, double_buffer=True)  # Out is written"


def write(tmp_path: Path, extra: str = "", rename: dict[str, str] | None = None, text: str = SCRIPT) -> Path:
    """The script with ``extra`` before Package.add and variables renamed (whole words)."""
    text = text.replace("# extra", extra)
    for old, new in (rename or {}).items():
        text = re.sub(rf"\b{old}\b", new, text)
    path = tmp_path / "batched.py"
    path.write_text(text)
    return path


def show(path: Path):
    """(model, function, source) of the script's function, as ``schedc show`` gets them."""
    with session(show_only=True) as built:
        runpy.run_path(str(path), run_name="__main__")
    ((_, model, function, source),) = built.shown
    return model, function, source


def loop_names(model) -> list[str]:
    return [lp.name for lp in model.loops]


def test_script_names_reach_the_model_and_the_cuda(tmp_path):
    model, _, source = show(write(tmp_path))
    assert [b.name for b in model.buffers] == ["In", "W", "Out"]
    assert model.dims == (("b", 4), ("i", 64), ("j", 48), ("k", 32))
    assert loop_names(model) == ["b", "i", "j", "ii", "jj", "k"]
    assert [(b.unit.name, b.loops) for b in model.bindings][-2:] == [("THREAD_X", ("jj",)), ("THREAD_Y", ("ii",))]
    assert "// batched: Out[b, i, j] += In[b, i, k] * W[k, j]" in source
    assert "(const float* __restrict__ In, const float* __restrict__ W, float* __restrict__ Out)" in source
    assert "const int b = blockIdx.z;" in source and "const int ii = threadIdx.y;" in source
    assert "In[b * 2048 + (i + ii) * 32 + k] * W[k * 48 + j + jj]" in source


def test_bad_cache_index_names_the_script_variables(tmp_path):
    path = write(tmp_path, BAD_CACHE)
    message = r"^cache\(Out, index=i, location=SHARED\): the nest writes Out: its tile is filled once and written back"
    with pytest.raises(acc.CacheError, match=message):
        show(path)
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1
    assert "error: cache(Out, index=i, location=SHARED): the nest writes Out" in result.output
    assert re.search(r"for i in range\(0, 64, 16\): +# BLOCK_Y, 4 iterations +<-- here", result.output)
    assert "Out[b, i + ii, j + jj] = Out[b, i + ii, j + jj] + In[b, i + ii, k] * W[k, j + jj]" in result.output


def test_bounds_error_names_the_nest_indices(tmp_path):
    """The iteration logic's own check runs before Package.add: the indices are named already
    (the arrays get their names at Package.add)."""
    path = write(tmp_path, text=SCRIPT.replace("In[b, i, k]", "In[b, i + 1, k]"))
    with pytest.raises(acc.NestError, match=r"iteration \(b=0, i=63, j=0, k=0\) reads .*\[0, 64, 0\] outside"):
        show(path)


def test_split_variables_name_the_split_loops(tmp_path):
    model, _, source = show(write(tmp_path, rename={"ii": "rows", "jj": "cols"}))
    assert loop_names(model) == ["b", "i", "j", "rows", "cols", "k"]
    assert "const int rows = threadIdx.y;" in source and "const int cols = threadIdx.x;" in source
    shared = "plan.cache(Out, index=ii, location=acc.MemorySpace.SHARED, stages=2)"
    path = write(tmp_path, shared, rename={"ii": "rows", "jj": "cols"})
    with pytest.raises(acc.CacheError, match=r"^cache\(Out, index=rows, location=SHARED\): the nest writes Out"):
        show(path)


@pytest.mark.parametrize("extra, message", [
    ("plan.bind({rows: g.THREAD_X})", r"^bind\(\{rows: THREAD_X\}\): rows is already bound to THREAD_Y"),
    ("plan.cache(In, index=rows, location=acc.MemorySpace.SHARED, layout=5)",
     r"^cache\(In, index=rows, location=SHARED\): layout must be"),
    ("schedule.split(rows, 3)", r"^split\(rows, 3\): the schedule already has a plan"),
])
def test_calls_before_package_add_name_split_loops_as_the_script_does(tmp_path, extra, message):
    """A split's index is bound to its variable only after ``split`` returns; the calls after it
    (which raise before ``Package.add`` names anything) call it by that variable, not ``ii``."""
    path = write(tmp_path, extra, rename={"ii": "rows", "jj": "cols"})
    with pytest.raises(acc.SchedcError, match=message):
        show(path)


def test_explicit_name_wins(tmp_path):
    text = SCRIPT.replace("shape=(4, 64, 32))", "shape=(4, 64, 32), name='X')")
    model, _, source = show(write(tmp_path, text=text))
    assert [b.name for b in model.buffers] == ["X", "W", "Out"]
    assert "const float* __restrict__ X," in source


@pytest.mark.parametrize("name, reason", [
    ("int", "int is a C/C++ keyword"),
    ("thread", "thread is a name the generated CUDA uses"),
    ("A_shared", "ends like a name schedc derives"),
    ("A_slice0", "ends like a name schedc derives"),  # a rank-3 tile's slice loop
    ("B_element", "ends like a name schedc derives"),  # an output tile's write-back loop
    ("work", "work is a name the generated CUDA uses"),  # a persistent kernel's loop over tiles
    ("a__b", "contains __"),
])
def test_explicit_names_must_be_usable_in_cuda(name, reason):
    with pytest.raises(acc.NestError, match=rf"^Array\(name='{name}', role=.*\): name .*{re.escape(reason)}"):
        acc.Array(role=acc.Role.INPUT, shape=(4,), name=name)


@pytest.mark.parametrize("name", ["norm", "exp", "max", "erff", "printf"])
def test_a_function_named_as_a_library_function_is_refused_at_add(name):
    """The C launcher ``extern "C" int norm(...)`` collides with CUDA's math library's ``norm``
    (nvcc refused it at build); Package.add says so first. Arrays and loops may take such names
    (they are the kernel's locals)."""
    from schedc.errors import PackageError
    from tests.plans import simt_matmul

    plan, args = simt_matmul(16, 16, 16, block=(16, 16))
    with pytest.raises(PackageError, match=rf"base_name: {name} is a function of CUDA's math or the C library: "
                                           rf"the C launcher {name}\(\) would collide with it"):
        acc.Package().add(plan, args=args, base_name=name)
    assert acc.Array(role=acc.Role.INPUT, shape=(4,), name=name).name == name


@pytest.mark.parametrize("variable", ["int", "thread", "threadIdx", "In_shared", "_In", "cudaIn", "batched"])
def test_unusable_variables_fall_back_to_positions(tmp_path, variable):
    """C++ keywords, names the CUDA uses or derives, and the function's own name."""
    model, _, _ = show(write(tmp_path, rename={"In": variable}))
    assert [b.name for b in model.buffers] == ["A", "W", "Out"]


def test_unusable_index_variable_falls_back_and_its_clashes_too(tmp_path):
    """``thread`` (a name the CUDA uses) keeps the third index's position name k, which the
    fourth index's variable k then shares: the fourth falls back to l."""
    model, _, _ = show(write(tmp_path, rename={"j": "thread"}))
    assert loop_names(model) == ["b", "i", "k", "ii", "jj", "l"]


def test_one_index_under_two_variables_keeps_its_position(tmp_path):
    """``row = i`` binds the nest's second index twice: it keeps j, and the indices whose
    variables then clash with position names fall back too."""
    model, _, _ = show(write(tmp_path, text=SCRIPT.replace("b, i, j, k = nest.get_indices()\n",
                                                          "b, i, j, k = nest.get_indices()\nrow = i\n")))
    assert loop_names(model) == ["b", "j", "k", "ii", "jj", "l"]


def test_one_variable_for_two_arrays_keeps_their_positions():
    """Two logics whose closures call different arrays ``source``: neither is named so."""
    first, second = (acc.Array(role=acc.Role.INPUT, shape=(64,)) for _ in range(2))
    total = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64,))
    nest = acc.Nest(64)
    (x,) = nest.get_indices()

    def add(source):
        return lambda: total.__setitem__(x, total[x] + source[x])

    nest.iteration_logic(add(first))
    nest.iteration_logic(add(second))
    schedule = nest.create_schedule()
    xx = schedule.split(x, 32)
    plan = schedule.create_plan(H100)
    plan.bind({x: H100.GridUnit.BLOCK_X, xx: H100.GridUnit.THREAD_X})
    model, _ = compile_plan(plan, (first, second, total))
    assert [b.name for b in model.buffers] == ["A", "B", "total"]
    assert loop_names(model) == ["x", "xx"]


def test_array_variable_clashing_with_a_loop_name_falls_back():
    """A logic's closure calls an array ``ii``, the name the split of ``i`` gets."""
    nest = acc.Nest(8)
    (i,) = nest.get_indices()
    ii = acc.Array(role=acc.Role.OUTPUT, shape=(8,))
    nest.iteration_logic(lambda: ii.__setitem__(i, 1.0))
    schedule = nest.create_schedule()
    schedule.split(i, 4)  # bound to no variable: the split keeps the name it gets
    plan = schedule.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, schedule.get_indices()[1]: H100.GridUnit.THREAD_X})
    model, _ = compile_plan(plan, (ii,))
    assert [b.name for b in model.buffers] == ["A"] and loop_names(model) == ["i", "ii"]


def test_loops_of_a_plan_built_in_a_function_take_its_variables():
    """The iteration logic sees the nest's indices, not the loops a function binds while it plans:
    the scheduling calls' own scope names them (``row``, ``part``; a fused schedule's fusing
    index ``every``), in messages after Package.add as before it."""
    def plan_rows():
        X = acc.Array(role=acc.Role.INPUT, shape=(8, 64))
        Y = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, 64))
        first, second = acc.Nest(8, 64), acc.Nest(8, 64)
        i0, j0 = first.get_indices()
        i1, j1 = second.get_indices()
        first.iteration_logic(lambda: Y.__setitem__((i0, j0), X[i0, j0] * 2.0))
        second.iteration_logic(lambda: Y.__setitem__((i1, j1), Y[i1, j1] + 1.0))
        fused = acc.fuse((first.create_schedule(), second.create_schedule()), partial=1)
        every, row, left, right = fused.get_indices()
        part = fused.split(left, 32)
        fused.reorder(row, every, left, part, right)
        plan = fused.create_plan(H100)
        plan.bind({row: H100.GridUnit.BLOCK_X, part: H100.GridUnit.BLOCK_Y})
        return plan, (X, Y)

    plan, args = plan_rows()
    with pytest.raises(acc.PlanError, match=r"bind\(\{row: BLOCK_X, part: BLOCK_Y\}\): part is a loop of an unfused "
                                        r"dimension of a fused schedule, bound to BLOCK_Y"):
        compile_plan(plan, args)


# A tensorized script whose loops are all renamed: bindings, tiles and caches follow the names.
TENSOR_SCRIPT = '''
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
F16 = acc.ScalarType.float16
Left = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(64, 64))
Right = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(64, 64))
Acc = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64, 64))

nest = acc.Nest(shape=(64, 64, 64))
row, col, depth = nest.get_indices()


@nest.iteration_logic
def _():
    Acc[row, col] += Left[row, depth] * Right[depth, col]


schedule = nest.create_schedule()
warp_row, warp_col = schedule.split(row, 32), schedule.split(col, 32)
step = schedule.split(depth, 32)
mma = acc.MMAShape.M16xN16xK16_B1
tile_m, tile_n, tile_k = schedule.tile(dict(zip((warp_row, warp_col, step),
                                                 target.tensor_core_info.compute_tensor_splits(mma))))
schedule.reorder(row, col, depth, warp_row, warp_col, step, tile_m, tile_n, tile_k)
plan = schedule.create_plan(target)
g = target.GridUnit
plan.bind({row: g.BLOCK_Y, col: g.BLOCK_X, warp_row: g.WARP_Y, warp_col: g.WARP_X})
plan.tensorize(indices=(tile_m, tile_n, tile_k), mma_shape=mma)
plan.cache(Left, index=step, location=target.MemorySpace.SHARED, double_buffer=True)
plan.cache(Acc, index=depth, location=target.MemorySpace.MMA_FRAGMENT)
package = acc.Package()
package.add(plan, args=(Left, Right, Acc), base_name="renamed")
package.build("renamed", output_dir="unused")
'''


def test_renamed_tensorized_plan_compiles_and_emulates(tmp_path):
    model, function, source = show(write(tmp_path, text=TENSOR_SCRIPT))
    assert loop_names(model) == ["row", "col", "depth", "warp_row", "warp_col", "step", "tile_m", "tile_n",
                                 "tile_k"]
    assert model.tensorize.loops == ("tile_m", "tile_n", "tile_k")
    assert [(c.array, c.index) for c in model.caches] == [("Left", "step"), ("Acc", "depth")]
    assert "Left_shared" in source and "const int depth_stage = depth / 32 % 2;" in source
    reports = emulate_function(model, function, blocks=1, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_names_like_schedc_fragments_are_the_scripts_own(tmp_path):
    """schedc's fragments are _c, _a0, _b0: a tensorized script's index may be called c and its
    array a0, and the kernel keeps them (it once renamed them by position)."""
    text = TENSOR_SCRIPT.replace("col", "c").replace("Left", "a0")
    model, function, source = show(write(tmp_path, text=text))
    assert "c" in loop_names(model) and model.buffers[0].name == "a0"
    assert " _c[" in source and " _a0[" in source  # the fragments, beside the index c and the array a0
    reports = emulate_function(model, function, blocks=1, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_names_are_deterministic(tmp_path):
    """The same script gives the same CUDA, in one process and under other string hashes (the
    script binds one index twice, so a choice among its variables would show)."""
    text = SCRIPT.replace("b, i, j, k = nest.get_indices()\n", "b, i, j, k = nest.get_indices()\nrow = i\n")
    path = write(tmp_path, rename={"ii": "rows"}, text=text)
    assert show(path)[2] == show(path)[2]
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-m", "schedc", "show", str(path)], capture_output=True, text=True,
                             env=env, check=True)
        outputs.add(run.stdout)
    (output,) = outputs
    assert "const int rows = threadIdx.y;" in output and "const int j = blockIdx.y * 16;" in output


# A Hopper script whose loop over the block's warpgroup rows is called ``warpgroup``, the name of
# the kernel's own warpgroup index.
WARPGROUP_SCRIPT = '''
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(256, 256))
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float16, shape=(256, 256))
C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(256, 256))
nest = acc.Nest(shape=(256, 256, 256))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
warpgroup, jj, kk = schedule.split(i, 128), schedule.split(j, 128), schedule.split(k, 64)
iii, jjj = schedule.split(warpgroup, 64), schedule.split(jj, 128)
shape = acc.MMAShape.M64xN128xK16_B1
m, n, mk = target.tensor_core_info.compute_tensor_splits(shape)
iiii, jjjj, kkk = schedule.tile({iii: m, jjj: n, kk: mk})
schedule.reorder(i, j, warpgroup, jj, k, kk, iii, jjj, iiii, jjjj, kkk)
plan = schedule.create_plan(target)
g = acc.GridUnit
plan.bind({i: g.BLOCK_Y, j: g.BLOCK_X, warpgroup: g.WARPGROUP_Y, jj: g.WARPGROUP_X})
plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=shape)
plan.cache(A, index=kk, location=acc.MemorySpace.SHARED, stages=3, engine=acc.CopyEngine.TMA)
plan.cache(B, index=kk, location=acc.MemorySpace.SHARED, stages=3, engine=acc.CopyEngine.TMA)
plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT, element_type=acc.ScalarType.float32)
plan.warp_specialize(True)
package = acc.Package()
package.add(plan, args=(A, B, C), base_name="rows")
package.build("rows", output_dir="unused")
'''


def test_an_index_named_like_the_kernels_warpgroup_is_renamed(tmp_path):
    """The kernel defines ``warpgroup`` (the thread's, by a shuffle): a loop of that name would
    shadow it (its own definition reading itself); the loop is given another name."""
    model, function, source = show(write(tmp_path, text=WARPGROUP_SCRIPT))
    assert "warpgroup" not in loop_names(model)
    assert source.count("const int warpgroup = ") == 1
    reports = emulate_function(model, function, blocks=1, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def _library_nest(epilogue, inputs):
    """A library's nest (as samples/fused_gemm.py's): its logic applies the caller's epilogue,
    whose arrays only the caller's scope names."""
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, 16))
    nest = acc.Nest(8, 16)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = epilogue(C[i, j], i, j)

    return nest, (C, *inputs)


def test_arrays_read_by_a_callers_function_are_named_by_the_caller():
    """An error inside a library's nest names the caller's arrays by the caller's variables
    (the scopes of the functions the logic calls), not as ``<float32[16] array>``; so does the
    built function."""
    bias = acc.Array(role=acc.Role.INPUT, shape=(16,))
    residual = acc.Array(role=acc.Role.INPUT, shape=(8, 16))
    with pytest.raises(acc.NestError, match=r"C\[i, j\] \+ bias\[j\] \+ residual\[i, j \+ 1\]: iteration \(i=0, "
                                            r"j=15\) reads residual\[0, 16\] outside its shape"):
        _library_nest(lambda c, i, j: c + bias[j] + residual[i, j + 1], (bias, residual))
    scale = acc.Array(role=acc.Role.INPUT, shape=(8,))
    nest, args = _library_nest(lambda c, i, j: c * scale[i], (scale,))
    model, _ = compile_plan(nest.create_schedule().create_plan(H100), args)
    assert [b.name for b in model.buffers] == ["C", "scale"]


def test_a_comprehension_variable_names_no_loop():
    """``samples/softmax.py`` splits each part's row loop in ``[schedule.split(j, threads) for j in
    rows]``, which binds ``j`` to each loop in turn: it names none of them (the comprehension's
    frame is passed over), while the function's own ``i`` and ``ii`` name theirs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
    import softmax

    model, _ = compile_plan(*softmax.softmax(4, 1000, acc.ScalarType.float32, 128, keep=True))
    names = loop_names(model)
    assert names[:2] == ["i", "ii"] and not {"j", "jj"} & set(names) and len(set(names)) == len(names), names
