"""Every refusal reaches the script at ``Package.add``: a grid builds the points the checks accept
and names the refused ones by cause (as ``schedc tune --dry-run`` counts them), and a plan that
``Package.add`` accepts builds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import schedc as acc
from schedc.cli import main
from schedc.package.refusals import kind

from . import plans

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

import hopper_matmul  # noqa: E402

F32, COL = acc.ScalarType.float32, acc.Array.Layout.LAST_MAJOR


def scaled(tile):
    """C = 2 A over 8192 elements, ``tile`` threads a block (a parameter)."""
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    A = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(8192,))
    C = acc.Array(role=acc.Role.OUTPUT, element_type=F32, shape=(8192,))
    nest = acc.Nest(shape=(8192,))
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i] = A[i] * 2.0

    schedule = nest.create_schedule()
    ii = schedule.split(i, tile)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
    return plan, (A, C)


def test_a_grid_adds_the_points_the_checks_accept_and_keeps_the_refused(tmp_path, capsys):
    TILE = acc.create_parameters()
    package = acc.Package()
    functions = package.add(*scaled(TILE), base_name="scale",
                            parameters=acc.create_parameter_grid({TILE: [64, 2048, 128, 4096, 0]}))
    assert [f.parameters for f in functions] == [{"TILE": 64}, {"TILE": 128}]
    assert [f.name for f in package._functions] == list(functions)
    assert (functions.points, [r.point for r in functions.refused]) == (5, ["TILE=2048", "TILE=4096", "TILE=0"])
    assert all(r.cause == kind(r.error.what) for r in functions.refused)
    hat = package.build("scale", output_dir=tmp_path)
    assert sorted(acc.load(hat).functions) == sorted(functions)
    said = capsys.readouterr().err
    assert "schedc: scale: 2 of 5 points built; 3 refused:\n" in said
    assert re.search(r"\n     2 x  .*# threads.* \(first at TILE=2048\)\n", said), said
    assert re.search(r"\n     1 x  factor must be a positive integer \(first at TILE=0\)", said), said


def test_a_grid_without_an_accepted_point_is_refused_with_its_causes():
    TILE = acc.create_parameters()
    package = acc.Package()
    with pytest.raises(acc.PackageError, match=r"^Package.add\(scale\): none of the grid's 2 point\(s\) is accepted; "
                                               r"the first, at TILE=2048: .*threads(.|\n)*\n     2 x  .*# threads"):
        package.add(*scaled(TILE), base_name="scale", parameters=[{TILE: 2048}, {TILE: 4096}])
    with pytest.raises(acc.PackageError, match="parameters is an empty list: the grid has no points"):
        package.add(*scaled(TILE), base_name="scale", parameters=[])
    assert package._functions == [] and package._grids == []


def test_one_point_refused_is_the_scripts_error_as_ever():
    TILE = acc.create_parameters()
    with pytest.raises(acc.PlanError, match=r"^Package.add\(scale\) at TILE=2048: .*threads"):
        acc.Package().add(*scaled(TILE), base_name="scale", parameters={TILE: 2048})


GRID_SCRIPT = """
import schedc as acc
target = acc.Target(acc.Target.Model.NVIDIA_H100)
TILE = acc.create_parameters()
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(8192,))
C = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(8192,))
nest = acc.Nest(shape=(8192,))
i, = nest.get_indices()
nest.iteration_logic(lambda: C.__setitem__(i, A[i] * 2.0))
s = nest.create_schedule()
ii = s.split(i, TILE)
plan = s.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
package = acc.Package()
package.add(plan, args=(A, C), base_name="scale", parameters=acc.create_parameter_grid({TILE: [64, 2048, 0, 4096]}))
package.build("grid", output_dir="unused")
"""


def test_build_names_the_refused_points_by_cause_as_tune_counts_them(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDC_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "grid.py"
    script.write_text(GRID_SCRIPT)
    built = CliRunner().invoke(main, ["build", str(script), "--output-dir", str(tmp_path / "out")])
    assert built.exit_code == 0, built.output
    assert "schedc: scale: 1 of 4 points built; 3 refused:" in built.output
    assert f"built {tmp_path / 'out' / 'grid' / 'grid.hat'}" in built.output
    tuned = CliRunner().invoke(main, ["tune", str(script), "--dry-run", "--no-progress", "--jobs", "1",
                                      "--db", str(tmp_path / "tune.sqlite")])
    assert tuned.exit_code == 0, tuned.output
    causes = dict((c, int(n)) for n, c in re.findall(r"\n +(\d+) x  (.*) \(first at TILE=\d+\)", built.output))
    assert causes == dict((c, int(n)) for n, c in re.findall(r"refused +(\d+) x  (.*)", tuned.output))
    assert sum(causes.values()) == 3


# Plans that lowering refuses: each was accepted by Package.add and refused by Package.build.
LOWERING_REFUSES = {
    "tf32 wgmma, B row-major": (lambda: hopper_matmul.matmul(256, 256, 256, operand=F32, block=(128, 128, 32)),
                                acc.CacheError, r"tf32 wgmma reads operands whose k is contiguous; B is contiguous"),
    "TMA rows not 16 bytes apart": (lambda: hopper_matmul.matmul(256, 1002, 256, block=(128, 128, 64)),
                                    acc.CacheError, r"B's rows are 2004 bytes apart; TMA needs a multiple of 16"),
    "TMA reductions into rows of C not 16 bytes apart": (
        lambda: hopper_matmul.matmul(256, 1002, 256, block=(128, 128, 64), b_layout=COL, added=True),
        acc.PlanError, r"need C's rows a multiple of 16 bytes apart \(they are 4008\)"),
    "wmma's partial tiles of B": (lambda: plans.tensor_matmul(64, 1002, 64), acc.PlanError,
                                  r"the last tiles are partial, and tensor cores compute whole 16x16x16 tiles"),
}


@pytest.mark.parametrize("case", LOWERING_REFUSES)
def test_a_plan_lowering_refuses_is_refused_at_add(case):
    make, error, message = LOWERING_REFUSES[case]
    package = acc.Package()
    with pytest.raises(error, match=message):
        package.add(*make(), base_name="f")
    assert package._functions == []


def test_a_refused_plan_leaves_the_packages_other_functions_to_build(tmp_path):
    package = acc.Package()
    package.add(*plans.tensor_matmul(64, 64, 64), base_name="good")
    with pytest.raises(acc.CacheError, match="tf32 wgmma reads operands whose k is contiguous"):
        package.add(*LOWERING_REFUSES["tf32 wgmma, B row-major"][0](), base_name="bad")
    assert list(acc.load(package.build("pkg", output_dir=tmp_path)).functions) == ["good"]


def test_an_accepted_plan_is_compiled_once(monkeypatch, tmp_path):
    """The kernels compiled at add are the ones the build writes."""
    import schedc.package.build as build

    package = acc.Package()
    package.add(*plans.tensor_matmul(64, 64, 64), base_name="good")
    monkeypatch.setattr(build, "compile_function", lambda *_: pytest.fail("compiled again at build"))
    package.build("pkg", output_dir=tmp_path)
