"""The schedc command line, through click's test runner."""

from __future__ import annotations

import json

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
    assert "MISMATCH" in result.output


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


def test_check_marks_the_offending_loop(tmp_path):
    script = tmp_path / "racy.py"
    script.write_text(
        "import schedc as acc\n"
        "A = acc.Array(role=acc.Role.INPUT, shape=(64, 64))\n"
        "C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64,))\n"
        "nest = acc.Nest(64, 64)\n"
        "i, j = nest.get_indices()\n"
        "nest.iteration_logic(lambda: C.__setitem__(i, C[i] + A[i, j]))\n"
        "target = acc.Target(acc.Target.Model.NVIDIA_H100)\n"
        "plan = nest.create_schedule().create_plan(target)\n"
        "plan.bind({i: target.GridUnit.BLOCK_X, j: target.GridUnit.THREAD_X})\n"
        "p = acc.Package()\n"
        "p.add(plan, args=(A, C), base_name='rowsum')\n"
        "p.build('rowsum')\n"
    )
    result = CliRunner().invoke(main, ["check", str(script)])
    assert result.exit_code == 1
    assert "  for j in range(0, 64, 1):" in result.output and "THREAD_X, 64 iterations   <-- here" in result.output
    assert "error: bind({i: BLOCK_X, j: THREAD_X}): iterations (i=0, j=0) and (i=0, j=1) run concurrently" in result.output
