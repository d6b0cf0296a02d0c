"""What ``schedc check`` tells a newcomer, held to the checker: advice recommends only changes the
checker accepts (a recurrence's arrays, a plan without ``bind``), the refusal of batched operands
on wgmma says what the script wrote and the ways that build, and the footprints of a fused
schedule's parts are those of each part's own accesses."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import schedc as acc
from schedc import poly
from schedc.cli import main
from schedc.errors import CacheError
from schedc.frontend.freeze import freeze
from schedc.lower.advice import advise
from schedc.package.build import name_arrays
from schedc.show import footprints
from schedc.verify import emulate_function

from .plans import compile_function_plan, compile_plan

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
F16, F32 = acc.ScalarType.float16, acc.ScalarType.float32
UNIT = acc.GridUnit
LAST = acc.Array.Layout.LAST_MAJOR


def notes(plan, args) -> list[str]:
    model, kernel = compile_plan(plan, args)
    return [str(n) for n in advise(kernel, model, H100.spec)]


def model_of(plan, args):
    name_arrays("f", plan, args)
    return freeze(plan, "f", args)


# -- advice on a recurrence (a running sum along each row) ---------------------------------------


def running_sums(layout=acc.Array.Layout.FIRST_MAJOR, cache_x_at: str = ""):
    """Y[i, j + 1] = Y[i, j] + X[i, j + 1]: a thread a row (i on BLOCK_X and THREAD_X), j serial."""
    X = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(256, 256), layout=layout)
    Y = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(256, 256), layout=layout)
    nest = acc.Nest((256, 255))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i, j + 1] = Y[i, j] + X[i, j + 1]

    s = nest.create_schedule()
    ii = s.split(i, 32)
    plan = s.create_plan(H100)
    plan.bind({i: UNIT.BLOCK_X, ii: UNIT.THREAD_X})
    if cache_x_at:
        plan.cache(X, index={"ii": ii, "j": j}[cache_x_at], location=acc.MemorySpace.SHARED)
    return plan, (X, Y), (ii, j)


def test_the_advice_for_a_running_sum_recommends_no_cache_or_binding_the_checker_refuses():
    plan, args, _ = running_sums()
    found = notes(plan, args)
    assert found and not [n for n in found if "plan.cache(Y" in n or "bind the loop along Y" in n
                          or "bind the loop along X" in n]
    (written,) = [n for n in found if n.startswith("advice (coalescing): Y [0, 1]")]
    assert written.endswith("give Y the other layout (Array(..., layout=Array.Layout.LAST_MAJOR)): j may not run on "
                            "threads (two of its iterations touch Y[0, 1], one writing it)")
    (read,) = [n for n in found if n.startswith("advice (coalescing): Y [0, 0]")]
    assert ("no shared tile of Y is built (a statement touches Y[i, j], Y[i, j + 1]: a tile written back must hold "
            "only the elements the block writes") in read


@pytest.mark.parametrize("index", ["ii", "j"])
def test_the_checker_refuses_the_cache_of_y_the_advice_leaves_out(index):
    plan, args, (ii, j) = running_sums()
    plan.cache(args[1], index={"ii": ii, "j": j}[index], location=acc.MemorySpace.SHARED)
    with pytest.raises(CacheError, match=r"a statement touches Y\[i, j\], Y\[i, j \+ 1\]"):
        compile_plan(plan, args)


def test_the_changes_the_running_sums_advice_names_are_accepted_and_remove_it():
    plan, args, _ = running_sums(cache_x_at="j")  # X's note: a shared tile of X
    assert not [n for n in notes(plan, args) if n.startswith("advice (coalescing): X ")]
    plan, args, _ = running_sums(layout=LAST)  # Y's notes: the other layout
    assert not [n for n in notes(plan, args) if "coalescing" in n]


# -- a plan without bind --------------------------------------------------------------------------


def scaled(shape, bind=None, schedule=None):
    """Y = 2 X over ``shape`` (1-D or 2-D); ``schedule(s, indices)`` returns extra indices by name,
    ``bind(indices)`` the plan's bindings (None: no bind)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=shape)
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=shape)
    nest = acc.Nest(shape)
    indices = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[indices] = X[indices] * 2.0

    s = nest.create_schedule()
    names = dict(zip("ij", indices)) | (schedule(s, indices) if schedule else {})
    plan = s.create_plan(H100)
    if bind is not None:
        plan.bind(bind(names))
    return plan, (X, Y)


def test_a_plan_without_bind_is_told_it_runs_on_one_thread_and_which_loops_to_bind():
    found = notes(*scaled((512, 256)))
    assert found[0] == ("advice (one thread): the kernel runs on one thread (grid 1x1x1, block 1x1x1): the plan binds "
                        "no loop, so the nest's 131072 iterations run one after another; plan.bind({i: BLOCK_X, j: "
                        "THREAD_X}) runs them on 512 blocks of 256 threads")
    _, kernel = compile_plan(*scaled((512, 256), bind=lambda x: {x["i"]: UNIT.BLOCK_X, x["j"]: UNIT.THREAD_X}))
    assert (kernel.grid, kernel.block) == ((512, 1, 1), (256, 1, 1))


def test_a_single_loop_without_bind_is_told_to_split_it_and_the_split_builds():
    found = notes(*scaled((100000,)))
    assert found[0].endswith("; ii = schedule.split(i, 256), then plan.bind({i: BLOCK_X, ii: THREAD_X}) runs them on "
                             "391 blocks of 256 threads")
    plan, args = scaled((100000,), schedule=lambda s, x: {"ii": s.split(x[0], 256)},
                        bind=lambda x: {x["i"]: UNIT.BLOCK_X, x["ii"]: UNIT.THREAD_X})
    model, function = compile_function_plan(plan, args)
    assert (function.kernels[0].grid, function.kernels[0].block) == ((391, 1, 1), (256, 1, 1))
    assert all(r.passed for r in emulate_function(model, function, blocks=2, seed=1))


def test_blocks_of_one_thread_are_told_which_loop_to_bind_to_threads():
    found = notes(*scaled((512, 256), bind=lambda x: {x["i"]: UNIT.BLOCK_X}))
    assert found[0] == ("advice (one thread): each block of the kernel runs one thread (grid 512x1x1, block 1x1x1): "
                        "the plan binds no loop to threads; plan.bind({j: THREAD_X}) runs them on 512 blocks of 256 "
                        "threads")


def test_a_sequential_nest_without_bind_is_told_that_no_binding_is_accepted():
    Y = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(1000,))
    nest = acc.Nest((999,))
    i, = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i + 1] = Y[i] * 0.5 + 1.0

    (found,) = notes(nest.create_schedule().create_plan(H100), (Y,))
    assert found.endswith("; none of the changes tried is accepted: ii = schedule.split(i, 256), then plan.bind({i: "
                          "BLOCK_X, ii: THREAD_X}) is refused (iterations (i=0, ii=0) and (i=0, ii=1) run concurrently "
                          "(THREAD_X ii=0 vs 1) and one writes what the other reads: Y[1]: a race)")


def test_check_prints_the_one_thread_advice(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(
        "import schedc as acc\n"
        "X = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(64, 64))\n"
        "Y = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(64, 64))\n"
        "nest = acc.Nest((64, 64))\n"
        "i, j = nest.get_indices()\n"
        "@nest.iteration_logic\n"
        "def _():\n"
        "    Y[i, j] = X[i, j] + 1.0\n"
        "plan = nest.create_schedule().create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))\n"
        "package = acc.Package()\n"
        "package.add(plan, args=(X, Y), base_name='alone')\n"
        "package.build('alone', output_dir='out')\n")
    run = CliRunner().invoke(main, ["check", str(script)])
    assert run.exit_code == 0, run.output
    assert ("advice (one thread): the kernel runs on one thread (grid 1x1x1, block 1x1x1): the plan binds no loop, "
            "so the nest's 4096 iterations run one after another; plan.bind({i: BLOCK_X, j: THREAD_X}) runs them on "
            "64 blocks of 64 threads") in run.output


# -- batched operands on wgmma -------------------------------------------------------------------


def batched(folded: bool, shape=acc.MMAShape.M64xN128xK16_B1, engine=None, batches=2, M=128, N=128, K=64):
    """C[b, i, j] += A[b, i, k] * B[b, k, j] (``folded``: 2-D arrays, the batch in the rows,
    ``A[b * M + i, k]``), b on BLOCK_Z, on wgmma (``shape`` M64...) or mma.sync (M16...)."""
    rows = (lambda n, m: (n * m,)) if folded else (lambda n, m: (n, m))
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(*rows(batches, M), K))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(*rows(batches, K), N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(*rows(batches, M), N))
    nest = acc.Nest((batches, M, N, K))
    b, i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        if folded:
            C[b * M + i, j] += A[b * M + i, k] * B[b * K + k, j]
        else:
            C[b, i, j] += A[b, i, k] * B[b, k, j]

    s = nest.create_schedule()
    m, n, mk = H100.tensor_core_info.compute_tensor_splits(shape)
    if m == 64:  # a warpgroup's tile
        ii, jj, kk = s.split(i, 128), s.split(j, 128), s.split(k, 64)
        iii = s.split(ii, 64)
        iiii, jjjj, kkk = s.tile({iii: m, jj: n, kk: mk})
        s.reorder(b, i, j, ii, k, kk, iii, jj, iiii, jjjj, kkk)
        units = {b: UNIT.BLOCK_Z, i: UNIT.BLOCK_Y, j: UNIT.BLOCK_X, ii: UNIT.WARPGROUP_Y}
        tile, cached = (iiii, jjjj, kkk), {"stages": 2}
    else:  # warps' tiles
        ii, jj, kk = s.split(i, 64), s.split(j, 64), s.split(k, 32)
        iii, jjj, kkk = s.tile({ii: m, jj: n, kk: mk})
        s.reorder(b, i, j, k, ii, jj, kk, iii, jjj, kkk)
        units = {b: UNIT.BLOCK_Z, i: UNIT.BLOCK_Y, j: UNIT.BLOCK_X, ii: UNIT.WARP_Y, jj: UNIT.WARP_X}
        tile, cached = (iii, jjj, kkk), {}
    plan = s.create_plan(H100)
    plan.bind(units)
    plan.tensorize(indices=tile, mma_shape=shape)
    if engine is not None:
        cached["engine"] = engine
    plan.cache(A, index=kk, location=acc.MemorySpace.SHARED, **cached)
    plan.cache(B, index=kk, location=acc.MemorySpace.SHARED, **cached)
    if m == 64:  # C's fragments kept across k
        plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT, element_type=F32)
    return plan, (A, B, C)


def test_3d_operands_on_wgmma_are_refused_in_the_scripts_words_with_the_ways_out():
    with pytest.raises(CacheError) as refused:
        compile_plan(*batched(folded=False))
    assert refused.value.where == "cache(A, index=kk, location=SHARED)"  # no engine=TMA: the script gave none
    what = refused.value.what
    assert what.startswith("TMA (no engine given: schedc fills a wgmma plan's operand tiles by TMA) copies 2-D tiles "
                           "of wgmma's operands; the footprint A[b, 0, 0] + [1 x 128 x 64] of A (2 x 128 x 64) has "
                           "rank 3")
    assert ("fold the batch into the rows (the same memory, each batch's rows in turn): C[b * 128 + i, j] of shape "
            "(256, 128), A[b * 128 + i, k] of shape (256, 64), B[b * 64 + k, j] of shape (128, 128)") in what
    assert "keep the 3-D arrays and tensorize with an mma.sync shape (mma_shape=MMAShape.M16xN16xK16_B1" in what


def test_3d_operands_on_wgmma_with_engine_tma_name_it():
    with pytest.raises(CacheError) as refused:
        compile_plan(*batched(folded=False, engine=acc.CopyEngine.TMA))
    assert refused.value.where == "cache(A, index=kk, location=SHARED, engine=TMA)"
    assert refused.value.what.startswith("TMA copies 2-D tiles of wgmma's operands")


@pytest.mark.parametrize("way", ["folded on wgmma", "3-D on mma.sync"])
def test_the_ways_out_of_3d_operands_on_wgmma_build_and_compute_the_product(way):
    plan, args = (batched(folded=True) if way == "folded on wgmma"
                  else batched(folded=False, shape=acc.MMAShape.M16xN16xK16_B1))
    model, function = compile_function_plan(plan, args)
    reports = emulate_function(model, function, blocks=2, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


# -- footprints of fused parts -------------------------------------------------------------------


def rms_norm():
    """RMSNorm of 64 rows of 1024: the row's sum of squares (f = 1) and the scaled row (f = 3),
    each over its own loops (ja, ta and jb, tb) after the fusing index."""
    X = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(64, 1024))
    w = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(1024,))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=(64, 1024))
    ss = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(64,))
    nests = [acc.Nest((64,)), acc.Nest((64, 1024)), acc.Nest((64,)), acc.Nest((64, 1024))]
    (i0,), (i1, j1), (i2,), (i3, j3) = (n.get_indices() for n in nests)
    nests[0].iteration_logic(lambda: ss.__setitem__(i0, 0.0))

    @nests[1].iteration_logic
    def _():
        ss[i1] += X[i1, j1] * X[i1, j1]

    nests[2].iteration_logic(lambda: ss.__setitem__(i2, 1.0 / acc.sqrt(ss[i2] * (1.0 / 1024) + 1e-6)))
    nests[3].iteration_logic(lambda: Y.__setitem__((i3, j3), X[i3, j3] * ss[i3] * w[j3]))
    schedule = acc.fuse(tuple(n.create_schedule() for n in nests), partial=1)
    f, i, ja, jb = schedule.get_indices()
    ta, tb = schedule.split(ja, 256), schedule.split(jb, 256)
    schedule.reorder(i, f, ja, ta, jb, tb)
    plan = schedule.create_plan(H100)
    plan.bind({i: UNIT.BLOCK_X, ta: UNIT.THREAD_X, tb: UNIT.THREAD_X})
    return plan, (X, w, Y)


def test_the_footprints_of_fused_parts_are_each_parts_own():
    lines = footprints(model_of(*rms_norm()))
    assert not [line for line in lines if "no box" in line or "7 - i" in line]
    x = lines[lines.index("  X float32[64, 1024]:") + 1:lines.index("  w float32[1024]:")]
    assert x == ["    inside i          X[0, 0] + [64 x 1024]  (65536 elements, 262144 bytes)",
                 "    inside ja (f = 1) X[i, 0] + [1 x 1024]  (1024 elements, 4096 bytes)",
                 "    inside ta (f = 1) X[i, ja] + [1 x 256]  (256 elements, 1024 bytes)",
                 "    inside jb (f = 3) X[i, 0] + [1 x 1024]  (1024 elements, 4096 bytes)",
                 "    inside tb (f = 3) X[i, jb] + [1 x 256]  (256 elements, 1024 bytes)"]
    assert "    inside ta (f = 1) not accessed" in lines  # Y: the sums do not touch it


def test_a_footprint_that_is_no_box_names_the_accesses_that_move_apart():
    X = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(8, 64))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=(8, 64))
    nest = acc.Nest((8, 64))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        Y[i, j] = X[i, j] + X[7 - i, j]

    s = nest.create_schedule()
    s.split(i, 4)
    plan = s.create_plan(H100)
    plan.bind({i: UNIT.BLOCK_X, j: UNIT.THREAD_X})
    with pytest.raises(poly.FootprintError) as error:
        poly.footprint(model_of(plan, (X, Y)), "X", "j")
    assert "the accesses X[i + ii, j] and X[-i + -ii + 7, j] do not move together" in str(error.value)
    assert "e.g." not in str(error.value)
