"""schedc tune: enumeration, pruning by the analysis, the database, the early stop, the sampled
search, shapes, faults, Ctrl-C, the plot, the Dask path and the command line, with pretend GPUs
(``FakeTiming``: seconds from the point's values); on a GPU, a real tune of a small grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from schedc.cli import main
from schedc.errors import LaunchError, TuneError
from schedc.package.loader import load
from schedc.tuning import FakeTiming, Options, Status, tune
from schedc.tuning.collect import parse_shape
from schedc.tuning.report import plot, summary

from .conftest import has_gpu, require_gpu

# a SIMT product (its plan shared with SIZED below) whose block tile and stages are searched; BM=64 x BN=64 is 4096 threads a block,
# which the analysis refuses (1024 at most); the shape M is a parameter of the arrays
PRODUCT = """
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, 64))
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(64, 64))
C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, 64))
nest = acc.Nest((M, 64, 64))
i, j, k = nest.get_indices()

@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]

s = nest.create_schedule()
ii, jj, kk = s.tile({i: BM, j: BN, k: 16})
plan = s.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_Y,
           jj: target.GridUnit.THREAD_X})
"""
SCRIPT = """
import schedc as acc
target = acc.Target(acc.Target.Model.NVIDIA_H100)
M, BM, BN, ST = acc.create_parameters()
""" + PRODUCT + """plan.cache(A, index=kk, location=target.MemorySpace.SHARED, stages=ST)
grid = acc.create_parameter_grid({M: [64], BM: %(bm)s, BN: [16, 32, 64], ST: [1, 2]})
package = acc.Package()
package.add(plan, args=(A, B, C), base_name="mm", parameters=grid)
package.build("small", output_dir="out")
"""


def write(tmp_path: Path, bm=(8, 16, 64)) -> Path:
    path = tmp_path / "small.py"
    path.write_text(SCRIPT % {"bm": list(bm)})
    return path


def seconds(values: dict, shape: str) -> float:
    """Fastest at BM=16, BN=32, two stages; M scales it."""
    m = int(shape.split("=")[1]) if shape else 64
    return 1e-5 * (m / 64) * (1 + abs(values["BM"] - 16) / 16 + abs(values["BN"] - 32) / 32) * (
        1.0 if values["ST"] == 2 else 1.1)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    """One compile cache for the module's tunes (keyed by source: each kernel compiled once)."""
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def options(tmp_path: Path, kernels: Path) -> Options:
    return Options(db=str(tmp_path / "tune.sqlite"), cache=str(kernels), output_dir=str(tmp_path / "out"),
                   jobs=2, progress=False, write=False)  # tests of the package written ask for it


def test_the_winner_is_the_fastest_point_and_its_package_says_so(tmp_path, options):
    import dataclasses

    options = dataclasses.replace(options, write=True)
    outcome = tune(write(tmp_path), options, FakeTiming(seconds))
    counts = outcome.counts()
    assert len(outcome.points) == 18
    assert counts[Status.REFUSED] == 4  # BM=64 with BN 32 or 64: more than 1024 threads a block
    assert outcome.refusals() == {"# threads per block (block # x # x #); NVIDIA H100 allows #": 4}
    assert all(p.checked.directory == "" for p in outcome.points if p.status is Status.REFUSED)  # never built
    (winner,) = outcome.winners.values()
    assert winner.values == {"BM": 16, "BN": 32, "ST": 2}
    assert winner.median == min(p.median for p in outcome.points if p.median is not None)
    hat = Path(options.output_dir) / "small" / "small.hat"
    assert outcome.written == [hat]
    fn = load(hat).functions["mm"]  # the tuned function takes the grid's base name
    assert fn.parameters == {"M": 64, "BM": 16, "BN": 32, "ST": 2}
    assert fn.tuning["point"] == fn.parameters and fn.tuning["device"] == "fake"
    assert fn.tuning["median_seconds"] == pytest.approx(1e-5)
    assert fn.tuning["timed"] == 14 and fn.tuning["points"] == 18
    ups = fn.tuning["runners_up"]
    assert [u["median_seconds"] for u in ups] == sorted(u["median_seconds"] for u in ups)
    assert ups[0] == {"median_seconds": pytest.approx(1.1e-5), "stopped_early": False, "BM": 16, "BN": 32, "ST": 1}
    text = summary(outcome)
    assert "18 points: 4 refused" in text and "refused    4 x  # threads per block" in text


def test_a_candidate_clearly_slower_than_the_best_stops_early(tmp_path, options):
    outcome = tune(write(tmp_path), options, FakeTiming(seconds))
    slower = [p for p in outcome.points if p.status is Status.SLOWER]
    assert slower, "no candidate was stopped early"
    best = outcome.winners[(0, "M=64")].median
    assert all(p.median > best * 1.25 for p in slower)
    assert all(p.measured.batches == 3 for p in slower)  # the probe's batches only


def test_a_rerun_reuses_the_database_and_a_grown_grid_times_only_its_new_points(tmp_path, options):
    first = tune(write(tmp_path, bm=(8, 16)), options, FakeTiming(seconds))
    timed = sum(1 for p in first.points if p.median is not None)
    calls = []
    again = tune(write(tmp_path, bm=(8, 16)), options, FakeTiming(lambda v, s: calls.append(v) or seconds(v, s)))
    assert calls == [] and again.reused == timed and again.build_seconds == 0.0
    assert again.winners[(0, "M=64")].values == first.winners[(0, "M=64")].values
    grown = tune(write(tmp_path, bm=(8, 16, 32)), options, FakeTiming(lambda v, s: calls.append(v) or seconds(v, s)))
    assert {v["BM"] for v in calls} == {32} and grown.reused == timed


def test_a_budget_samples_the_grid_with_optuna(tmp_path, options):
    import dataclasses

    sampled = dataclasses.replace(options, budget_points=4, seed=3)
    outcome = tune(write(tmp_path), sampled, FakeTiming(seconds))
    sent = [p for p in outcome.points if p.checked.status is Status.COMPILED]
    assert len(sent) == 4  # refused points are tried too, but do not count against the budget
    assert len(outcome.points) < 18
    again = tune(write(tmp_path), dataclasses.replace(sampled, db=str(Path(options.db).with_name("other.sqlite"))),
                 FakeTiming(seconds))
    assert [p.key for p in again.points] == [p.key for p in outcome.points]  # seeded: the same points
    calls = []
    rerun = tune(write(tmp_path), sampled, FakeTiming(lambda v, s: calls.append(v) or seconds(v, s)))
    assert calls == [] and rerun.reused == 4  # the study starts from the database's points
    assert rerun.winners[(0, "M=64")].values == outcome.winners[(0, "M=64")].values
    more = tune(write(tmp_path), dataclasses.replace(sampled, budget_points=6),
                FakeTiming(lambda v, s: calls.append(v) or seconds(v, s)))
    fresh = [p for p in more.points if p.checked.status is Status.COMPILED and not p.reused]
    assert len(fresh) == 2 and more.reused == 4  # a larger budget times only the points it adds


def test_shapes_give_one_winner_each_named_by_shape(tmp_path, options):
    shapes = (parse_shape("M=64"), parse_shape("M=128"))
    import dataclasses

    outcome = tune(write(tmp_path), dataclasses.replace(options, shapes=shapes, write=True), FakeTiming(seconds))
    assert set(outcome.winners) == {(0, "M=64"), (0, "M=128")}
    package = load(outcome.written[0])
    functions = package.functions
    assert set(functions) == {"mm_M64", "mm_M128"}
    assert functions["mm_M128"].parameters["M"] == 128 and functions["mm_M128"].tuning["shape"] == "M=128"
    import numpy as np

    arrays = [np.zeros((128, 64), np.float32), np.zeros((64, 64), np.float32), np.zeros((128, 64), np.float32)]
    assert package.mm.select(*arrays) is functions["mm_M128"]  # pkg.mm calls the one tuned for the shapes
    with pytest.raises(LaunchError, match=r"mm: no function was tuned for arrays of shapes \(96, 64\), .*; tuned: "
                                          r"mm_M64: \(64, 64\), \(64, 64\), \(64, 64\); mm_M128"):
        package["mm"](np.zeros((96, 64), np.float32), *arrays[1:])


def test_a_shape_parameter_the_script_lacks_is_refused(tmp_path, options):
    import dataclasses

    with pytest.raises(TuneError, match=r"--shapes Q=4: mm has no parameter Q \(its parameters: BM, BN, M, ST\)"):
        tune(write(tmp_path), dataclasses.replace(options, shapes=(parse_shape("Q=4"),)), FakeTiming(seconds))
    with pytest.raises(TuneError, match="'M4' is not NAME=INTEGER"):
        parse_shape("M4")


def test_a_script_without_a_grid_is_refused(tmp_path, options):
    path = tmp_path / "plain.py"
    path.write_text("import schedc as acc\n")
    with pytest.raises(TuneError, match="adds no parameter grid"):
        tune(path, options, FakeTiming(seconds))


def test_without_a_gpu_the_tuner_says_so(tmp_path, options):
    if has_gpu():
        pytest.skip("this host has a GPU")
    with pytest.raises(TuneError, match="needs an NVIDIA GPU to time the candidates and this host has none"):
        tune(write(tmp_path), options)


def test_errors_cross_process_boundaries_whole():
    """A worker's error reaches the tuner with its fields (a process pool pickles it)."""
    import pickle

    from schedc.errors import InternalError, LaunchError

    error = pickle.loads(pickle.dumps(LaunchError("cuda", "no device", loops=("i",))))
    assert (type(error), error.where, error.what, error.loops, str(error)) == (
        LaunchError, "cuda", "no device", ("i",), "cuda: no device")
    assert str(pickle.loads(pickle.dumps(InternalError("pass", "x")))) == str(InternalError("pass", "x"))


def test_a_fault_is_recorded_and_the_search_goes_on(tmp_path, options):
    def faulty(values, shape):
        if values["BN"] == 16:
            raise RuntimeError("an illegal memory access was encountered")
        return seconds(values, shape)

    outcome = tune(write(tmp_path), options, FakeTiming(faulty))
    faults = [p for p in outcome.points if p.status is Status.FAULT]
    assert len(faults) == 6 and all(p.values["BN"] == 16 for p in faults)
    assert outcome.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}
    assert "BUG (fault) mm" in summary(outcome)


def test_ctrl_c_keeps_the_results_measured_so_far(tmp_path, options):
    calls = []

    def interrupted(values, shape):
        calls.append(values)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return seconds(values, shape)

    import dataclasses

    outcome = tune(write(tmp_path), dataclasses.replace(options, write=True), FakeTiming(interrupted))
    assert outcome.interrupted and outcome.written == []
    assert not (Path(options.output_dir) / "small").exists()
    assert "interrupted: the results so far are in the database" in summary(outcome)  # points still pending too
    from schedc.tuning.db import Database

    assert len(Database(options.db).rows()) == 4


def test_the_plot_draws_every_timed_point(tmp_path, options):
    outcome = tune(write(tmp_path), options, FakeTiming(seconds))
    png = plot(outcome, tmp_path / "tune.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_dask_path_finds_the_same_winner(tmp_path, options):
    distributed = pytest.importorskip("distributed")
    from schedc.tuning import DaskCluster

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        outcome = tune(write(tmp_path), options, DaskCluster(client, timing=seconds))
    assert outcome.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}
    assert outcome.counts()[Status.REFUSED] == 4


def test_a_dask_cluster_without_gpu_workers_is_refused():
    distributed = pytest.importorskip("distributed")
    from schedc.tuning import DaskCluster

    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, pytest.raises(TuneError, match="no worker has a GPU resource"):
        DaskCluster(client)


def test_the_command_line_tunes_shows_and_exports(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDC_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent))
    script = write(tmp_path)
    run = CliRunner().invoke(main, ["tune", str(script), "--fake-timing", "tests.test_tune:seconds", "--no-progress",
                                    "--output-dir", str(tmp_path / "pkg"), "--top", "2", "--plot",
                                    str(tmp_path / "p.png")])
    assert run.exit_code == 0, run.output
    assert "mm at M=64: 14 timed" in run.output and (tmp_path / "pkg" / "small" / "small.hat").is_file()
    assert (tmp_path / "p.png").is_file()
    shown = CliRunner().invoke(main, ["tune", "--show", str(script)])
    assert shown.exit_code == 0 and "14 measurements" in shown.output
    exported = CliRunner().invoke(main, ["tune", str(script), "--json", str(tmp_path / "t.json")])
    rows = json.loads((tmp_path / "t.json").read_text())
    assert exported.exit_code == 0 and len(rows) == 14 and rows[0]["status"] == "timed"
    bad = CliRunner().invoke(main, ["tune", str(script), "--gpus", "0,0"])
    assert bad.exit_code == 2 and "distinct GPU ordinals" in bad.output
    missing = tmp_path / "no" / "such.sqlite"  # reading a database never makes one
    bad = CliRunner().invoke(main, ["tune", "--show", "--db", str(missing)])
    assert bad.exit_code == 1 and "no results database there" in bad.output and not missing.parent.exists()


@pytest.mark.gpu
def test_a_tune_on_the_gpu_verifies_times_and_writes_the_winner(tmp_path, options):
    """On a GPU: every candidate verified against the reference and timed; the winner's package
    loads and verifies. Without one, the same points are checked and compiled (pretend timing)."""
    import dataclasses

    from schedc.tuning.measure import Settings

    quick = dataclasses.replace(options, write=True, settings=Settings(min_time=0.02, batches=3, iterations=5))
    if not has_gpu():
        outcome = tune(write(tmp_path), quick, FakeTiming(seconds))
        assert outcome.counts()[Status.REFUSED] == 4
        require_gpu()
    outcome = tune(write(tmp_path), quick)
    counts = outcome.counts()
    assert counts[Status.REFUSED] == 4 and not any(counts[s] for s in Status if s.bug), summary(outcome)
    assert counts[Status.TIMED] + counts[Status.SLOWER] == 14
    from schedc.verify import run_function

    fn = load(outcome.written[0]).functions["mm"]
    assert all(r.passed for r in run_function(fn))
    assert fn.tuning["device"] == outcome.device["device"]





def test_the_sampler_leaves_out_parameters_the_others_determine():
    """In the Hopper sample's grid the MMA shape is tied to BN by the filter and BK has one value:
    the sampler searches the other seven."""
    from schedc.tuning import collect
    from schedc.tuning.search import _free, groups

    root = Path(__file__).resolve().parent.parent
    source = collect.Source.of(root / "samples" / "tune_matmul.py", [{"M": 256, "N": 256, "K": 256}],
                               ("matmul_fp16",))
    script = collect.run(source)
    ((group, points),) = groups(script.grids).items()
    assert len(points) == 2016
    assert _free(script.grids[0], points) == ["BM", "BN", "STAGES", "GROUP", "CLUSTER", "SPECIALIZE", "TEAMS", "DETERMINISTIC"]
    with pytest.raises(TuneError, match=r"--function mm: .* has no grid of that name \(its grids: matmul_fp16, "):
        collect.run(collect.Source.of(source.path, functions=("mm",)))


def test_the_finalists_are_timed_again_and_a_lucky_first_time_does_not_win(tmp_path, options):
    lucky = []

    def noisy(values, shape):
        if values == {"BM": 8, "BN": 16, "ST": 1}:
            lucky.append(1)
            return 5e-6 if len(lucky) == 1 else 5e-5  # fast once (a cooler GPU, another one), then not
        return seconds(values, shape)

    outcome = tune(write(tmp_path), options, FakeTiming(noisy))
    assert len(lucky) == 2  # timed in the search, then again as a finalist
    winner = outcome.winners[(0, "M=64")]
    assert winner.values == {"BM": 16, "BN": 32, "ST": 2} and winner.measured.confirmed
    finalists = [p for p in outcome.points if p.measured is not None and p.measured.confirmed]
    assert len(finalists) == 3


def test_finalists_within_the_tie_margin_go_to_the_first_in_the_grid(tmp_path, options):
    import dataclasses

    def close(values, shape):
        return 1.002e-5 if values == {"BM": 8, "BN": 32, "ST": 2} else seconds(values, shape)

    tied = tune(write(tmp_path), options, FakeTiming(close))
    assert tied.winners[(0, "M=64")].values == {"BM": 8, "BN": 32, "ST": 2}  # 0.2% slower, first in the grid
    exact = tune(write(tmp_path), dataclasses.replace(options, tie=0.0, db=str(tmp_path / "exact.sqlite")),
                 FakeTiming(close))
    assert exact.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}


SIZED = """
import schedc as acc
target = acc.Target(acc.Target.Model.NVIDIA_H100)
BM, BN = acc.create_parameters()
M = acc.create_dimensions()
""" + PRODUCT + """package = acc.Package()
package.add(plan, args=(M, A, B, C), base_name="mm", parameters=acc.create_parameter_grid({BM: [8, 16], BN: [16, 32]}))
package.build("sized", output_dir="out")
"""


def test_a_function_of_run_time_sizes_is_tuned_in_buckets_and_dispatched_by_the_call_sizes(tmp_path, options):
    import dataclasses

    import numpy as np

    path = tmp_path / "sized.py"
    path.write_text(SIZED)
    calls = []

    def counted(values, shape):  # narrow tiles win for few rows, wide ones for many
        calls.append((values, shape))
        rows = int(shape.split("=")[1])
        return 1e-5 * (values["BM"] / values["BN"] if rows > 64 else values["BN"] / values["BM"])

    buckets = dataclasses.replace(options, sizes=({"M": 16}, {"M": 4096}), write=True)
    outcome = tune(path, buckets, FakeTiming(counted))
    assert outcome.winners[(0, "M=16")].values == {"BM": 16, "BN": 16}
    assert outcome.winners[(0, "M=4096")].values == {"BM": 8, "BN": 32}
    assert {s for _, s in calls} == {"M=16", "M=4096"}  # each candidate timed at each bucket's sizes
    from schedc.tuning.db import Database

    assert {r["shape"] for r in Database(options.db).rows()} == {"M=16", "M=4096"}
    package = load(outcome.written[0])
    assert set(package.functions) == {"mm_M16", "mm_M4096"}
    assert package.functions["mm_M16"].tuning["sizes"] == {"M": 16}

    def arrays(m):  # a Python call passes the arrays; M is read from their shapes
        return np.zeros((m, 64), np.float32), np.zeros((64, 64), np.float32), np.zeros((m, 64), np.float32)

    assert package.mm.select(*arrays(7)).name == "mm_M16"
    assert package.mm.select(*arrays(16)).name == "mm_M16"
    assert package.mm.select(*arrays(17)).name == "mm_M4096"
    assert package.mm.select(*arrays(9000)).name == "mm_M4096"  # past the largest bucket: the largest
    with pytest.raises(TuneError, match=r"--sizes N=4: give each run-time size of mm a value \(its run-time sizes: M\)"):
        tune(path, dataclasses.replace(options, sizes=({"N": 4},)), FakeTiming(counted))


@pytest.mark.gpu
def test_buckets_of_run_time_sizes_on_the_gpu_compute_the_product(tmp_path, options):
    """On a GPU: candidates timed at each bucket's sizes; the dispatcher's call at M = 50 (the
    second bucket) matches numpy. Without one, the same candidates are built (pretend timing)."""
    import dataclasses

    import numpy as np

    from schedc.tuning.measure import Settings

    path = tmp_path / "sized.py"
    path.write_text(SIZED)
    quick = dataclasses.replace(options, sizes=({"M": 16}, {"M": 100}), write=True,
                                settings=Settings(min_time=0.02, batches=3, iterations=5))
    if not has_gpu():
        pretend = FakeTiming(lambda values, shape: 1e-5 * values["BM"] / values["BN"])
        assert set(tune(path, quick, pretend).winners) == {(0, "M=16"), (0, "M=100")}
        require_gpu()
    outcome = tune(path, quick)
    assert not any(p.status.bug for p in outcome.points), summary(outcome)
    package = load(outcome.written[0])
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    c = np.zeros((50, 64), np.float32)
    package.mm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert package.mm.select(a, b, c).name == "mm_M100"


def test_schedc_tune_from_python_takes_the_options_as_keywords(tmp_path, kernels):
    import schedc

    outcome = schedc.tune(write(tmp_path), db=str(tmp_path / "t.sqlite"), cache=str(kernels), jobs=2, progress=False,
                          write=False, shapes=[{"M": 64}], runner=FakeTiming(seconds))
    assert outcome.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}
    with pytest.raises(TypeError, match="not both"):
        schedc.tune(write(tmp_path), Options(), budget_points=3)


def test_two_grids_of_one_name_in_two_packages_keep_their_own_checks(tmp_path, options):
    """Packages each adding a grid named mm (float32 and float64): each grid's candidates are its
    own, in this run and from the database in the next."""
    script = tmp_path / "twice.py"
    text = SCRIPT % {"bm": [8, 16]}
    text = text.replace("package.build(\"small\", output_dir=\"out\")", "package.build(\"small\", output_dir=\"out\")\n"
                        + text.split("package = acc.Package()")[0].split("import schedc as acc")[1]
                        .replace("float32", "float64") + "package = acc.Package()\n"
                        "package.add(plan, args=(A, B, C), base_name=\"mm\", parameters=grid)\n"
                        "package.build(\"wide\", output_dir=\"out\")\n")
    script.write_text("import schedc as acc\n" + text.split("import schedc as acc", 1)[1])
    for _ in range(2):  # the second run: checks from the database
        outcome = tune(script, options, FakeTiming(seconds))
        names = [{p.checked.name for p in outcome.points if p.task.grid == g and p.checked.name} for g in (0, 1)]
        assert names[0] and names[1] and not names[0] & names[1]


def test_a_function_of_run_time_sizes_needs_the_sizes_to_time_it_at(tmp_path, options):
    path = tmp_path / "sized.py"
    path.write_text(SIZED)
    with pytest.raises(TuneError, match=r"mm: takes run-time sizes \(M\): give the sizes to time it at, --sizes M=4096"):
        tune(path, options, FakeTiming(seconds))


def test_a_database_of_an_older_schedc_gains_the_columns_it_lacks(tmp_path):
    import sqlite3

    from schedc.tuning import db

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    columns = [f"{n} {t}" for n, t in db._TABLES["measurements"] if n != "confirmed"]
    old.execute(f"CREATE TABLE measurements ({', '.join(columns)}, PRIMARY KEY (source_hash, device, driver, schedc, "
                "shape))")
    old.commit()
    old.close()
    database = db.Database(path)
    assert database.rows() == []
    assert "confirmed" in {row[1] for row in database.connection.execute("PRAGMA table_info(measurements)")}


def hangs_once(values: dict, shape: str) -> float:
    """Pretend timing on a Dask worker: the point BM=8, BN=16, ST=1 hangs."""
    if values == {"BM": 8, "BN": 16, "ST": 1}:
        import time

        time.sleep(60)  # past the test's 15-second timeout; without one, a slow point only
    return seconds(values, shape)


def test_a_candidate_that_hangs_on_a_dask_worker_is_stopped_and_the_search_goes_on(tmp_path, options):
    distributed = pytest.importorskip("distributed")
    from schedc.tuning import DaskCluster

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        # (15 s from when a worker takes the candidate: a machine loaded by the other test workers
        # starts a worker's first candidate in several seconds)
        outcome = tune(write(tmp_path), options, DaskCluster(client, timing=hangs_once, timeout=15))
    faults = [(p.values, p.measured.reason) for p in outcome.points if p.status is Status.FAULT]
    assert faults == [({"BM": 8, "BN": 16, "ST": 1}, "ran past 15 s and was stopped")], faults
    assert outcome.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}


def test_a_worker_on_another_host_runs_the_script_with_its_helper_modules(tmp_path):
    """A Dask worker whose disk lacks the script runs a copy of it beside copies of the modules it
    imports from its folder: the same grids, the same key."""
    import dataclasses

    from schedc.tuning import collect

    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "sizes.py").write_text("ROWS = [8, 16]\n")
    script = tmp_path / "with_helper.py"
    script.write_text("from helpers.sizes import ROWS\n" + (SCRIPT % {"bm": "ROWS"}))
    here = collect.run(collect.Source.of(script))
    assert sorted(p for p, _ in here.modules) == ["helpers/__init__.py", "helpers/sizes.py"]
    elsewhere = dataclasses.replace(here.source, path=str(tmp_path / "gone" / "with_helper.py"), modules=here.modules)
    import sys

    for name in [n for n in sys.modules if n == "helpers" or n.startswith("helpers.")]:
        del sys.modules[name]  # as a fresh worker process has not imported them
    there = collect.run(elsewhere)
    assert len(there.grids[0].points) == len(here.grids[0].points) == 12 and there.key == here.key


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_sample_split_k_grid_emulates_each_combine(deterministic):
    """``matmul_split_fp16``'s points compute C += A @ B with k split between blocks, in either
    combine (a workspace and a second kernel, or TMA reductions into C)."""
    import sys

    import schedc as acc
    from schedc import verify
    from schedc.frontend.parameters import Replay

    from .plans import compile_function_plan

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
    import tune_matmul as t

    values = {t.M: 256, t.N: 256, t.K: 1024, t.BM: 128, t.BN: 128, t.BK: 64, t.STAGES: 3, t.SPLITS: 2,
              t.DETERMINISTIC: deterministic, t.SPECIALIZE: True, t.TEAMS: 1, t.SHAPE: t.WGMMA[128]}
    replay = Replay(values)  # the values in the plan, as Package.add gives them
    plan, args = t.matmul(acc.ScalarType.float16, split=True)
    model, function = compile_function_plan(replay.resolve(plan), replay.resolve(args))
    assert len(function.kernels) == (2 if deterministic else 1)  # the combine kernel, or none
    reports = verify.emulate_function(model, function, blocks=2, seed=1)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("search", ["sampled", "exhaustive"])
def test_first_points_are_timed_before_the_search(tmp_path, options, search):
    """``--first BM=16,BN=32,ST=2`` (the best point, last but one in the grid's order): timed first,
    within a budget of one point, so it wins whichever way the grid is searched."""
    import dataclasses

    order = []
    first = dataclasses.replace(options, budget_points=1, search=search, first=({"BM": "16", "BN": "32", "ST": "2"},))
    outcome = tune(write(tmp_path), first, FakeTiming(lambda v, s: order.append(dict(v)) or seconds(v, s)))
    assert order[0] == {"BM": 16, "BN": 32, "ST": 2}
    assert outcome.winners[(0, "M=64")].values == {"BM": 16, "BN": 32, "ST": 2}
    plain = tune(write(tmp_path), dataclasses.replace(options, budget_points=1, search=search,
                                                      db=str(tmp_path / "other.sqlite")), FakeTiming(seconds))
    assert plain.winners[(0, "M=64")].values != {"BM": 16, "BN": 32, "ST": 2}  # without it, another point


def test_a_first_point_of_unknown_names_or_values_is_refused(tmp_path, options):
    import dataclasses

    with pytest.raises(TuneError, match=r"--first BX=16: BX: not a parameter the tuned grids search \(they search "
                                        r"BM, BN, ST\)"):
        tune(write(tmp_path), dataclasses.replace(options, first=({"BX": "16"},)), FakeTiming(seconds))
    with pytest.raises(TuneError, match=r"--first BM=12: no point of the tuned grids has these values"):
        tune(write(tmp_path), dataclasses.replace(options, first=({"BM": "12"},)), FakeTiming(seconds))


def test_the_command_line_reads_first_points():
    for text in ("GROUP", "8=GROUP", "GROUP="):
        result = CliRunner().invoke(main, ["tune", "x.py", "--first", f"STAGES=3,{text}"])
        assert result.exit_code == 2 and f"'{text}' is not NAME=VALUE" in result.output, result.output


GRID_SCRIPT = """
import schedc as acc
N, TILE = acc.create_parameters()
target = acc.Target(acc.Target.Model.NVIDIA_H100)
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(N,))
C = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(N,))
nest = acc.Nest(shape=(N,))
i, = nest.get_indices()
nest.iteration_logic(lambda: C.__setitem__(i, A[i] * 2.0))
s = nest.create_schedule()
ii = s.split(i, TILE)
plan = s.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
package = acc.Package()
fns = package.add(plan, args=(A, C), base_name="scale",
                  parameters=acc.create_parameter_grid({N: [1000], TILE: [64, 128]}))
open(%(names)r, "a").write(repr([(str(f), f.parameters) for f in fns]) + "\\n")
package.build("grid", output_dir=%(out)r)
"""


def test_a_grids_functions_are_the_same_under_tune(tmp_path, monkeypatch):
    """Package.add returns a grid's Functions (names and values) under schedc tune as outside it,
    so a script that uses them runs the same."""
    monkeypatch.setenv("SCHEDC_CACHE", str(tmp_path / "cache"))
    names = tmp_path / "names.txt"
    script = tmp_path / "grid.py"
    script.write_text(GRID_SCRIPT % {"names": str(names), "out": str(tmp_path / "out")})
    built = CliRunner().invoke(main, ["build", str(script)])
    assert built.exit_code == 0, built.output
    tuned = CliRunner().invoke(main, ["tune", str(script), "--dry-run", "--no-progress"])
    assert tuned.exit_code == 0, tuned.output
    outside, under = names.read_text().splitlines()
    assert outside == under and "'TILE': 64" in outside


def test_the_hopper_grid_adds_a_width_fitted_to_the_waves():
    """At 5000 x 3000 the grid has 232-wide tiles too (520 tiles of 128 x 232 are 3.94 waves of
    132 multiprocessors, 640 of 128 x 192 are 4.85); at 4096² none fills them better. A 232-wide
    point lowers and emulates: B's last box partly read, C's last 40 columns through the tail."""
    import sys

    import schedc as acc
    from schedc import verify
    from schedc.frontend.parameters import Replay

    from .plans import compile_function_plan

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
    import tune_matmul as t

    assert (t.fitted_width(5000, 3000), t.fitted_width(4096, 4096)) == (232, None)
    ragged, square = t.grid(5000, 3000, 4000), t.grid(4096, 4096, 4096)
    assert (len(ragged), len(square)) == (2520, 2016)
    assert {p[t.BN] for p in ragged} == {64, 128, 192, 232, 256}
    values = {t.M: 200, t.N: 504, t.K: 128, t.BM: 128, t.BN: 232, t.BK: 64, t.STAGES: 3, t.GROUP: 2, t.CLUSTER: 2,
              t.SPECIALIZE: True, t.TEAMS: 1, t.SHAPE: acc.MMAShape.M64xN232xK16_B1}
    for deterministic in (True, False):  # C loaded and stored, or added into by TMA reductions
        replay = Replay({**values, t.DETERMINISTIC: deterministic})
        plan, args = t.matmul(acc.ScalarType.float16)
        model, function = compile_function_plan(replay.resolve(plan), replay.resolve(args))
        assert "C_tail_map" in {p.name for p in function.kernels[-1].values}  # the last 40 columns by TMA
        reports = verify.emulate_function(model, function, blocks=None, seed=1)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
