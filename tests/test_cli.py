"""The schedc command line, through click's test runner."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from schedc.cli import main

from .conftest import ROOT, has_gpu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    result = CliRunner().invoke(main, ["build", str(ROOT / "samples" / "tensor_matmul.py"), "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    return out / "tensor_matmul" / "tensor_matmul.hat"


def test_build_lists_the_files(built):
    assert built.exists()
    assert (built.parent / "tensor_matmul.cubin").exists()


def test_show_prints_nest_launch_and_source():
    result = CliRunner().invoke(main, ["show", str(ROOT / "samples" / "hello_matmul.py")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "for k in range(0, 2048, 1):" in out and "# THREAD_X, 32 iterations" in out
    assert "launch: grid (32, 64, 1) x block (32, 32, 1): 2048 blocks of 1024 threads" in out
    assert "C[i + ii, j + jj] = C[i + ii, j + jj] + A[i + ii, k] * B[k, j + jj]" in out
    assert "hello_matmul__gpu__(" in out and "(schedc runtime header inlined here)" in out


@pytest.mark.parametrize("after, expected", [
    ("normalize", "for k in range(0, 2048, 1):"),
    ("analyze", "LoopFacts(name='k', first=0, last=2047, step=1)"),
    ("launch", "grid=(32, 64, 1)"),
    ("lower", "Loop(var='k'"),
])
def test_show_after_a_pass_prints_what_it_attached(after, expected):
    result = CliRunner().invoke(main, ["show", str(ROOT / "samples" / "hello_matmul.py"), "--after", after,
                                       "--no-source", "--verify-ir"])
    assert result.exit_code == 0, result.output
    assert f"== hello_matmul after {after} (" in result.output and expected in result.output


def test_show_after_names_the_passes():
    result = CliRunner().invoke(main, ["show", str(ROOT / "samples" / "hello_matmul.py"), "--after", "nowhere"])
    assert result.exit_code == 2
    assert ("'split', 'normalize', 'analyze', 'launch', 'check', 'chain', 'tensorize', 'shared', 'private', 'roles', "
            "'epilogue', 'lower', 'specialize', 'pipeline', 'reserve', 'simplify', 'link'") in result.output


def test_show_after_split_and_link_prints_a_functions_kernels():
    """Splitting a function into kernels is a pass: ``--after split`` shows each kernel's Model,
    ``--after link`` the launches in order with the workspace among the parameters."""
    script = str(ROOT / "samples" / "split_k_matmul.py")
    split = CliRunner().invoke(main, ["show", script, "--after", "split", "--no-source",
                                      "--function", "matmul_fp16_1024x1024x14336"])
    assert split.exit_code == 0, split.output
    assert "kernel 1 of 2: matmul_fp16_1024x1024x14336__partial" in split.output
    assert "kernel 2 of 2: matmul_fp16_1024x1024x14336__combine" in split.output
    assert "C__partial[k, i + ii + iii + iiii, j + jj + jjj + jjjj] = C__partial" in split.output
    linked = CliRunner().invoke(main, ["show", script, "--after", "link", "--no-source",
                                       "--function", "matmul_fp16_1024x1024x14336"])
    assert linked.exit_code == 0, linked.output
    assert "matmul_fp16_1024x1024x14336(A, B, C, C__partial, A_map, B_map)" in linked.output
    assert "launch 2: matmul_fp16_1024x1024x14336__combine__gpu__<<<(1, 1024, 1), (256, 1, 1)>>>(C, C__partial)" \
        in linked.output


@pytest.mark.parametrize("after, expected", [
    ("roles", "specialized=True,\n          producer_registers=40,\n          consumer_registers=232)"),
    ("epilogue", "TmaOutput(array='C'"),
])
def test_show_after_prints_the_hopper_decisions(after, expected):
    """The block's roles and registers, and C's path through shared memory, are passes of their own;
    ``--function`` names the function, all of whose kernels are shown (split-K: partial, combine)."""
    result = CliRunner().invoke(main, ["show", str(ROOT / "samples" / "hopper_matmul.py"), "--after", after,
                                       "--no-source", "--function", "matmul_fp16_2048x1024x2048"])
    assert result.exit_code == 0, result.output
    assert expected in result.output
    split = CliRunner().invoke(main, ["show", str(ROOT / "samples" / "split_k_matmul.py"), "--after", "roles",
                                      "--no-source", "--function", "matmul_bf16_1024x1024x14336"])
    assert "== matmul_bf16_1024x1024x14336__partial after roles" in split.output
    assert "== matmul_bf16_1024x1024x14336__combine after roles" in split.output


def test_verify_ir_names_the_pass_that_broke_the_kernel(monkeypatch):
    import dataclasses

    from schedc.ir.kernel import Barrier, If, Var
    from schedc.lower import passes, verifying

    def guarded_barrier(ir):
        ir = real(ir)
        body = (If(Var("threadIdx.x"), (Barrier(),)), *ir.kernel.body)
        return dataclasses.replace(ir, kernel=dataclasses.replace(ir.kernel, body=body))

    real = passes.fold
    monkeypatch.setattr("schedc.lower.PASSES", tuple(
        dataclasses.replace(p, run=guarded_barrier) if p.name == "simplify" else p for p in passes.PASSES))
    script = str(ROOT / "samples" / "hello_matmul.py")
    with verifying(False):  # the tests verify every kernel; here only the flag does
        assert CliRunner().invoke(main, ["check", script]).exit_code == 0
        result = CliRunner().invoke(main, ["check", script, "--verify-ir"])
    assert result.exit_code == 1
    assert ("pass simplify: internal error (a bug in schedc, please report it): the kernel IR it made is malformed: "
            "uniform: Barrier is not reached by every thread") in result.output


def test_emulate_reports_the_error(built):
    result = CliRunner().invoke(main, ["emulate", str(built), "--blocks", "2"])
    assert result.exit_code == 0, result.output
    assert "tensor_matmul: C: ok: relative error" in result.output


def test_emulate_fails_on_a_wrong_kernel(built, tmp_path):
    """Corrupt the stored kernel (wrong leading dimension): emulate must exit non-zero."""
    import shutil

    copy = tmp_path / "pkg"
    shutil.copytree(built.parent, copy)
    ir_path = copy / "tensor_matmul.schedc.json"
    text = ir_path.read_text().replace('"row_stride": 4096', '"row_stride": 4095', 1)
    ir_path.write_text(text)
    result = CliRunner().invoke(main, ["emulate", str(copy / "tensor_matmul.hat"), "--blocks", "1"])
    assert result.exit_code == 1, result.output
    # C's pairs of floats now start at odd offsets: the emulator's vector check stops it
    assert "MISMATCH" in result.output or "are not one aligned vector" in result.output


def test_errors_are_one_line(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import schedc as acc\nacc.Nest(shape=(0,))\n")
    result = CliRunner().invoke(main, ["build", str(script)])
    assert result.exit_code == 1
    assert result.output.strip() == "error: Nest(shape=(0,)): shape must be a non-empty tuple of positive integers"
    result = CliRunner().invoke(main, ["emulate", str(tmp_path / "none.hat")])
    assert result.exit_code == 1 and "no such package file" in result.output


@pytest.mark.skipif(has_gpu(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("command", ["verify", "bench"])
def test_gpu_commands_without_a_gpu(built, command):
    result = CliRunner().invoke(main, [command, str(built)])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: schedc {command} needs an NVIDIA GPU; none is available (try `schedc emulate`)"


def test_help_lists_commands():
    result = CliRunner().invoke(main, ["--help"])
    for command in ("build", "show", "emulate", "verify", "bench"):
        assert command in result.output
    json.dumps({})


def test_check_reports_footprints_and_resources():
    result = CliRunner().invoke(main, ["check", str(ROOT / "samples" / "tensor_matmul.py")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "inside ii     A[i, k] + [32 x 16]  (512 elements, 1024 bytes)" in out
    assert "inside jj     C[i + ii, j] + [16 x 32]  (512 elements, 2048 bytes)" in out
    assert "shared memory: 0 bytes per block (static limit 49152, opt-in limit 232448)" in out
    assert "registers: about 40 per thread (estimate)" in out  # 24 + c 8 + a 4 + b 4
    assert "occupancy: 12 block(s) of 128 threads per SM, limited by registers per SM (65536)" in out
    assert "checks passed: launch limits, bounds, races, loop order, tensorization" in out


RACY = (  # adds a racy plan (each thread of a row overwrites its C[i]: no reduction), without building it
    "import schedc as acc\n"
    "A = acc.Array(role=acc.Role.INPUT, shape=(64, 64))\n"
    "C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64,))\n"
    "nest = acc.Nest(64, 64)\n"
    "i, j = nest.get_indices()\n"
    "nest.iteration_logic(lambda: C.__setitem__(i, A[i, j] * 2.0))\n"
    "target = acc.Target(acc.Target.Model.NVIDIA_H100)\n"
    "plan = nest.create_schedule().create_plan(target)\n"
    "plan.bind({i: target.GridUnit.BLOCK_X, j: target.GridUnit.THREAD_X})\n"
    "p = acc.Package()\n"
    "p.add(plan, args=(A, C), base_name='rowsum')\n"
)


def test_check_marks_the_offending_loop(tmp_path):
    script = tmp_path / "racy.py"
    script.write_text(RACY + "p.build('rowsum')\n")
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 1
    assert "  for j in range(0, 64, 1):" in result.output and "THREAD_X, 64 iterations   <-- here" in result.output
    assert "error: bind({i: BLOCK_X, j: THREAD_X}): iterations (i=0, j=0) and (i=0, j=1) run concurrently" in result.output


SMALL = '''
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def plan(n):
    A = acc.Array(role=acc.Role.INPUT, shape=(n, n))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(n, n))
    nest = acc.Nest(n, n)
    i, j = nest.get_indices()
    nest.iteration_logic(lambda: C.__setitem__((i, j), C[i, j] + A[i, j]))
    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, 4), schedule.split(j, 4)
    schedule.reorder(i, j, ii, jj)
    plan = schedule.create_plan(target)
    unit = target.GridUnit
    plan.bind({i: unit.BLOCK_Y, j: unit.BLOCK_X, ii: unit.THREAD_Y, jj: unit.THREAD_X})
    return plan, (A, C)


package = acc.Package()
for name, n in (("edges", 30), ("one", 4)):  # 8 x 8 blocks, partial in the last row and column; 1 block
    p, args = plan(n)
    package.add(p, args=args, base_name=name)
'''


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A package of two element-wise functions: ``edges`` (30 x 30 in 4 x 4 blocks: a grid of
    8 x 8 with partial tiles in the last row and column) and ``one`` (a grid of 1 block)."""
    out = tmp_path_factory.mktemp("small")
    script = out / "small.py"
    script.write_text(SMALL + 'package.build("small")\n')
    result = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    return out / "small" / "small.hat"


def test_check_an_added_function_never_built(tmp_path):
    script = tmp_path / "unbuilt.py"
    script.write_text(SMALL)  # adds two functions, never calls Package.build
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 0, result.output
    assert "note: edges, one: added to a package the script never builds (Package.build)" in result.output
    assert "== (unbuilt).edges for NVIDIA H100 (sm_90)" in result.output
    assert "launch: grid (8, 8, 1) x block (4, 4, 1): 64 blocks of 16 threads" in result.output
    assert "== (unbuilt).one for NVIDIA H100 (sm_90)" in result.output
    assert "checks passed: launch limits, bounds, races, loop order" in result.output


def test_check_finds_errors_in_functions_never_built(tmp_path):
    script = tmp_path / "racy.py"
    script.write_text(RACY)
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 1
    assert "THREAD_X, 64 iterations   <-- here" in result.output
    assert "error: bind({i: BLOCK_X, j: THREAD_X}): iterations (i=0, j=0) and (i=0, j=1) run concurrently" in result.output


def test_check_a_script_that_adds_nothing(tmp_path):
    script = tmp_path / "nothing.py"
    script.write_text("import schedc as acc\nacc.Package()\n")
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {script} adds no function to a package"


def test_emulate_samples_corners_and_spread_by_default(small):
    result = CliRunner().invoke(main, ["emulate", str(small), "--function", "edges"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        "emulating edges on 8 of 64 blocks (the grid's 4 corners, where partial tiles lie, and 4 spread "
        "over it; --blocks N for another sample, --blocks all for every block)",
        "  blocks (x, y, z): (0, 0, 0) (7, 0, 0) (5, 1, 0) (1, 3, 0) (6, 4, 0) (2, 6, 0) (0, 7, 0) (7, 7, 0)",
        "emulated edges (8 of 64 blocks)",
    ]
    # 5 whole blocks of 16 elements, 2 edge blocks of 8 and the corner block of 4
    assert ": ok: relative error" in result.stdout and "100 elements compared" in result.stdout


def test_emulate_all_blocks(small):
    result = CliRunner().invoke(main, ["emulate", str(small), "--function", "edges", "--blocks", "all"])
    assert result.exit_code == 0, result.output
    assert "emulating edges on all 64 blocks (--blocks all)" in result.stdout
    assert "emulated edges (64 of 64 blocks)" in result.stdout
    assert "900 elements compared" in result.stdout  # all of B, 30 x 30


def test_emulate_counts_the_blocks_of_a_small_grid(small):
    result = CliRunner().invoke(main, ["emulate", str(small), "--function", "one", "--blocks", "5"])
    assert result.exit_code == 0, result.output
    assert "emulating one on all 1 block (--blocks 5, but the grid has only 1 block)" in result.stdout
    assert "emulated one (1 of 1 block)" in result.stdout
    assert "sampled" not in result.output and "5 of" not in result.output


def test_emulate_shows_progress_on_stderr(small):
    result = CliRunner().invoke(main, ["emulate", str(small), "--blocks", "all"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()  # not a terminal: whole lines, the first and last block at least
    assert lines[0].startswith("  edges: 1/64 blocks emulated, ")
    assert any(line.startswith("  edges: 64/64 blocks emulated, ") for line in lines)
    assert lines[-1].startswith("  one: 1/1 block emulated, ")
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    assert "blocks emulated" not in result.stdout


def test_emulate_rejects_a_bad_block_count(small):
    for bad in ("0", "some"):
        result = CliRunner().invoke(main, ["emulate", str(small), "--blocks", bad])
        assert result.exit_code == 2
        assert f"'{bad}' is neither a positive number of blocks nor 'all'" in result.output


def test_emulate_help_names_the_default_and_all():
    result = CliRunner().invoke(main, ["emulate", "--help"])
    text = " ".join(result.output.split())
    assert "--blocks N|all" in text and "or all of them" in text
    assert "Default: the grid's corners, where partial tiles lie, and a few spread over it" in text


@pytest.mark.parametrize("command", ["show", "check"])
def test_a_script_sees_its_own_command_line_not_schedcs(tmp_path, command):
    script = tmp_path / "argv_script.py"
    seen = tmp_path / "argv.txt"
    source = (ROOT / "samples" / "hello_matmul.py").read_text()
    script.write_text(f"import sys\nopen({str(seen)!r}, 'w').write(repr(sys.argv))\n" + source)
    before = list(sys.argv)
    result = CliRunner().invoke(main, [command, str(script)])
    assert result.exit_code == 0, result.output
    assert seen.read_text() == repr([str(script)]) and sys.argv == before


def test_a_package_given_for_a_script_and_a_negative_tolerance_are_refused(built):
    hat = str(built)
    result = CliRunner().invoke(main, ["check", hat])
    assert result.exit_code != 0 and "a package, not a schedule script: emulate it with schedc emulate" \
        in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(main, ["emulate", hat, "--tolerance", "-1"])
    assert result.exit_code != 0 and "-1.0 is not in the range x>=0.0" in result.output


def test_a_zero_tolerance_is_kept_and_a_negative_seed_refused(small):
    result = CliRunner().invoke(main, ["emulate", str(small), "--function", "one", "--tolerance", "0"])
    assert "(tolerance 0.0e+00)" in result.output
    result = CliRunner().invoke(main, ["emulate", str(small), "--seed", "-1"])
    assert result.exit_code == 2 and "-1 is not in the range x>=0" in result.output and "Traceback" not in result.output


def test_a_scripts_own_error_shows_its_frames_alone(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text("def f():\n    raise ValueError('boom')\n\n\nf()\n")
    for command in ("build", "check", "show"):
        result = CliRunner().invoke(main, [command, str(script)])
        assert result.exit_code == 1, result.output
        assert f"error: {script} raised ValueError:" in result.output and "raise ValueError('boom')" in result.output
        assert "ValueError: boom" in result.output and "runpy" not in result.output and "click" not in result.output


def test_a_script_that_exits_ends_there(tmp_path):
    """sys.exit() (status 0) after building: the build is reported; another status is an error."""
    script = tmp_path / "exits.py"
    script.write_text(SMALL + 'package.build("small")\nimport sys\nsys.exit(0)\n')
    result = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0 and "built " in result.output, result.output
    script.write_text("import sys\nsys.exit(3)\n")
    result = CliRunner().invoke(main, ["build", str(script)])
    assert result.exit_code == 1 and result.output.strip() == f"error: {script}: the script exited with status 3"
    script.write_text("import sys\nsys.exit('no GPU plan for this size')\n")
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 1 and "the script exited: no GPU plan for this size" in result.output


def test_show_function_prints_that_functions_kernels_alone(tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL + 'package.build("small")\n')
    result = CliRunner().invoke(main, ["show", str(script), "--function", "one"])
    assert result.exit_code == 0, result.output
    assert "one__gpu__(" in result.output and "edges__gpu__(" not in result.output
    script.write_text(SMALL)  # added, never built: shown as check shows it
    result = CliRunner().invoke(main, ["show", str(script)])
    assert result.exit_code == 0 and "== (unbuilt).edges for NVIDIA H100" in result.output, result.output


def test_build_lists_each_packages_own_files_and_refuses_two_of_a_name(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(SMALL + 'package.build("v")\npackage.build("vv")\n')
    result = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("built") and "/v.hat" in x)
    assert "vv" not in line and "v.cu" in line
    script.write_text(SMALL + 'package.build("v", output_dir="a")\npackage.build("v", output_dir="b")\n')
    result = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(tmp_path / "same")])
    assert result.exit_code == 1 and "a package v is already built into" in result.output


def test_a_function_refused_by_the_lowering_is_named(tmp_path):
    """Two functions, the second's THREAD_X of 40 threads refused by the lowering (which runs when
    it is added): the error names it."""
    script = tmp_path / "rows.py"
    script.write_text(
        "import schedc as acc\n"
        "H = acc.Target(acc.Target.Model.NVIDIA_H100)\n"
        "def rows(N, lanes):\n"
        "    X = acc.Array(role=acc.Role.INPUT, shape=(4, N))\n"
        "    S = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(4,))\n"
        "    n = acc.Nest(4, N); i, j = n.get_indices()\n"
        "    n.iteration_logic(lambda: S.__setitem__(i, S[i] + X[i, j]))\n"
        "    s = n.create_schedule(); jj = s.split(j, lanes)\n"
        "    plan = s.create_plan(H); plan.bind({i: H.GridUnit.BLOCK_X, jj: H.GridUnit.THREAD_X})\n"
        "    return plan, (X, S)\n"
        "pkg = acc.Package()\n"
        "pkg.add(*rows(1000, 64), base_name='good')\n"
        "pkg.add(*rows(40, 64), base_name='bad')\n"
        "pkg.build('rows')\n")
    result = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.output.startswith("error: bad: a reduction across threads (jj): THREAD_X "
                                                              "has 40 threads"), result.output


def test_emulate_samples_blocks_of_a_persistent_grid_adding_into_c(tmp_path):
    """split_k(deterministic=False) without a split: no split-K parts to gather, so --blocks 3
    emulates 3 of the persistent grid's blocks (it emulated all of them, "with every split-K part")."""
    import schedc as acc

    from . import kit

    plan, args = kit.hopper_matmul.matmul(512, 512, 64, acc.ScalarType.float16, block=(128, 128, 64), stages=2,
                                          output=acc.ScalarType.float16, persistent={"group": 2, "blocks": 8},
                                          added=True)
    package = acc.Package()
    package.add(plan, args, base_name="added")
    path = package.build("added", format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    result = CliRunner().invoke(main, ["emulate", str(path), "--blocks", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("emulating added on 3 of 8 blocks (spread over the grid"), result.stdout
    assert "split-K part" not in result.stdout and ": ok: relative error" in result.stdout
