"""Parameters (Accera's create_parameters / create_parameter_grid / Package.add(parameters=)):
recorded calls replayed with each point's values, every check run on the concrete plan."""

from __future__ import annotations

import re

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.emulate import emulate
from schedc.errors import SchedcError
from schedc.frontend.parameters import ParameterError
from schedc.lower import compile_model


def simt_plan(shape=None, tile=None):
    """C += A @ B on blocks of tile x tile threads; shape and tile may be parameters."""
    M, N, K = shape or (64, 64, 32)
    A = acc.Array(role=acc.Role.INPUT, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    tile = 16 if tile is None else tile
    ii = schedule.split(i, tile)
    jj = schedule.split(j, tile)
    schedule.reorder(i, j, k, ii, jj)
    plan = schedule.create_plan(acc.Target(acc.Target.Model.NVIDIA_H100))
    plan.bind({i: acc.GridUnit.BLOCK_Y, j: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y,
               jj: acc.GridUnit.THREAD_X})
    return plan, (A, B, C)


def check_function(package: acc.Package, name: str, shape: tuple[int, int, int]) -> None:
    """The function named ``name`` emulates to C + A @ B at ``shape``."""
    added = next(f for f in package._functions if f.name == name)
    kernel = compile_model(added.model)
    M, N, K = shape
    rng = np.random.default_rng(0)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in kernel.params}
    expected = storage["C"].reshape(M, N) + storage["A"].reshape(M, K) @ storage["B"].reshape(K, N)
    result = emulate(kernel, {n: v.copy() for n, v in storage.items()})
    np.testing.assert_allclose(result.storage["C"].reshape(M, N), expected, rtol=1e-4, atol=1e-4)


def test_parameters_are_named_after_their_variables():
    m, n, k = acc.create_parameters()
    tile = acc.create_parameters()
    assert [p.name for p in (m, n, k, tile)] == ["m", "n", "k", "tile"]
    assert str(2 * tile + m // 4) == "2 * tile + m // 4"
    assert [p.name for p in acc.create_parameters(2)] == ["P0", "P1"]  # Accera's older form
    with pytest.raises(ParameterError, match="assign the result to variables"):
        print(acc.create_parameters())


def test_a_parameter_has_no_truth_value():
    p = acc.create_parameters()
    with pytest.raises(ParameterError, match="cannot decide an if"):
        if p > 3:
            pass


def test_grid_is_the_product_filtered_and_sampled():
    a, b = acc.create_parameters()
    grid = acc.create_parameter_grid({a: [1, 2, 3], b: [10, 20]})
    assert [(p[a], p[b]) for p in grid] == [(1, 10), (1, 20), (2, 10), (2, 20), (3, 10), (3, 20)]
    kept = acc.create_parameter_grid({a: [1, 2, 3], b: [10, 20]}, filter_func=lambda x, y: x * 10 < y)
    assert [(p[a], p[b]) for p in kept] == [(1, 20)]
    as_tuple = acc.create_parameter_grid({a: [1, 2, 3], b: 10}, filter_func=lambda point: point[0] != 2)
    assert [(p[a], p[b]) for p in as_tuple] == [(1, 10), (3, 10)]  # Accera's older filters take one tuple
    sampled = [acc.create_parameter_grid({a: range(20), b: [0]}, sample=5, seed=s) for s in (3, 3, None)]
    assert len(sampled[0]) == 5 and sampled[0] == sampled[1]
    assert sampled[2] == acc.create_parameter_grid({a: range(20), b: [0]}, sample=5)  # seed 0: deterministic


def test_a_tuple_of_indices_is_a_loop_order():
    order, index = acc.create_parameters()
    i, j, k = acc.Nest(shape=(4, 4, 4)).get_indices()
    orders = acc.create_parameter_grid({order: (i, j, k)})
    assert len(orders) == 6 and {tuple(x.name for x in p[order]) for p in orders} >= {("i", "j", "k"), ("k", "j", "i")}
    choices = acc.create_parameter_grid({index: [i, k]})
    assert [p[index] for p in choices] == [i, k]


def test_grid_functions_are_named_as_accera_and_compute_c(tmp_path):
    M, tile = acc.create_parameters()
    plan, args = simt_plan((M, 64, 32), tile)
    package = acc.Package()
    functions = package.add(plan, args, base_name="mm", parameters=acc.create_parameter_grid({M: [64, 96],
                                                                                            tile: [8, 16]}))
    assert [f.parameters for f in functions] == [{"M": m, "tile": t} for m in (64, 96) for t in (8, 16)]
    assert all(re.fullmatch("mm_[0-9a-f]{16}", f) and f.name == f for f in functions)
    assert len(set(functions)) == 4
    for f in functions:
        check_function(package, f, (f.parameters["M"], 64, 32))
    hat = package.build("grid", output_dir=tmp_path)
    text = hat.read_text()
    assert f"[functions.{functions[3]}.auxiliary.accera.parameters]" in text
    assert "M = 96" in text and "tile = 16" in text  # numbers as numbers
    loaded = acc.load(hat)
    assert [loaded[f].parameters for f in functions] == [f.parameters for f in functions]
    again = acc.Package()
    again.add(plan, args, base_name="mm", parameters=acc.create_parameter_grid({M: [64, 96], tile: [8, 16]}))
    assert again.build("grid", output_dir=tmp_path / "again").with_suffix(".cu").read_text() \
        == hat.with_suffix(".cu").read_text()


def test_parameter_arithmetic_and_values_in_the_logic():
    half, alpha = acc.create_parameters()
    A = acc.Array(role=acc.Role.INPUT, shape=(64, 64))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64, 64))
    nest = acc.Nest(shape=(64, 64))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += alpha * A[i, j]

    schedule = nest.create_schedule()
    jj = schedule.split(j, 2 * half)
    plan = schedule.create_plan()
    plan.bind({i: acc.GridUnit.BLOCK_Y, j: acc.GridUnit.BLOCK_X, jj: acc.GridUnit.THREAD_X})
    package = acc.Package()
    f = package.add(plan, (A, C), base_name="scale", parameters={half: 16, alpha: 0.5})
    model = package._functions[0].model
    assert model.loop("jj").end == 32 and "0.5 * A[i, j]" in package._functions[0].description
    assert f.parameters == {"half": 16, "alpha": 0.5}


def test_parameters_in_subscripts():
    """A parameter in a subscript (a shift, a stride): each point's subscripts are checked and
    bounded with its values, and every function computes its own shift."""
    off, stride = acc.create_parameters()
    A = acc.Array(role=acc.Role.INPUT, shape=(72, 64))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(64, 32))
    nest = acc.Nest(shape=(64, 32))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i + off, stride * j + 1]

    schedule = nest.create_schedule()
    jj = schedule.split(j, 16)
    plan = schedule.create_plan()
    plan.bind({i: acc.GridUnit.BLOCK_Y, j: acc.GridUnit.BLOCK_X, jj: acc.GridUnit.THREAD_X})
    package = acc.Package()
    points = ((0, 1), (8, 2), (3, 1))
    for o, st in points:
        package.add(plan, (A, C), base_name="shift", parameters={off: o, stride: st})
    rng = np.random.default_rng(0)
    for added, (o, st) in zip(package._functions, points):
        kernel = compile_model(added.model)
        storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in kernel.params}
        a, c = storage["A"].reshape(72, 64), storage["C"].reshape(64, 32)
        expected = c + a[np.arange(64)[:, None] + o, st * np.arange(32)[None, :] + 1]
        result = emulate(kernel, {n: v.copy() for n, v in storage.items()})
        np.testing.assert_allclose(result.storage["C"].reshape(64, 32), expected)
    with pytest.raises(acc.NestError, match=r"at off=9, stride=2: .*reads A\[72, 1\] outside its shape"):
        package.add(plan, (A, C), base_name="shift", parameters={off: 9, stride: 2})
    with pytest.raises(acc.NestError, match=r"at off=0.5, stride=1: .*a subscript must be an affine expression"):
        package.add(plan, (A, C), base_name="shift", parameters={off: 0.5, stride: 1})


def test_a_refused_point_names_its_values():
    M, tile = acc.create_parameters()
    plan, args = simt_plan((M, 64, 32), tile)
    package = acc.Package()
    with pytest.raises(acc.ScheduleError, match=r"Package.add\(mm\) at M=64, tile=0: split\(i, 0\): factor must be a "
                                                r"positive integer"):
        package.add(plan, args, base_name="mm", parameters={M: 64, tile: 0})
    with pytest.raises(acc.PlanError, match=r"at M=64, tile=64: .*4096 threads"):  # the analysis refuses it
        package.add(plan, args, base_name="mm", parameters={M: 64, tile: 64})
    assert package._functions == []


def test_a_plan_with_parameters_needs_their_values():
    M, tile = acc.create_parameters()
    plan, args = simt_plan((M, 64, 32), tile)
    with pytest.raises(acc.PackageError, match=r"uses parameters \(M, tile\) and no values are given"):
        acc.Package().add(plan, args, base_name="mm")
    with pytest.raises(SchedcError, match="at tile=16: parameter M: has no value"):
        acc.Package().add(plan, args, base_name="mm", parameters={tile: 16})
    with pytest.raises(acc.PackageError, match="dict of parameter: value"):
        acc.Package().add(plan, args, base_name="mm", parameters={"tile": 16})


def test_the_order_of_a_parameter_reorder_is_known_only_when_added():
    order = acc.create_parameters()
    nest = acc.Nest(shape=(8, 8))
    i, j = nest.get_indices()
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, shape=(8, 8))

    @nest.iteration_logic
    def _():
        A[i, j] += 1.0

    schedule = nest.create_schedule()
    schedule.reorder(order)
    with pytest.raises(acc.ScheduleError, match="the loop order is a parameter"):
        schedule.get_indices()
    plan = schedule.create_plan()
    plan.bind({i: acc.GridUnit.BLOCK_X, j: acc.GridUnit.THREAD_X})
    package = acc.Package()
    for point in acc.create_parameter_grid({order: (i, j)}):
        package.add(plan, (A,), base_name="inc", parameters=point)
    assert [f.model.loops[0].name for f in package._functions] == ["i", "j"]


def test_concrete_plans_are_unchanged_by_recording():
    plan, args = simt_plan()
    package = acc.Package()
    assert package.add(plan, args, base_name="mm") == "mm"
    assert package._functions[0].parameters == {}


def test_a_deferred_cache_handle_takes_its_arguments_as_plan_cache_binds_them():
    """A plan of parameters returns its cache handles before the call runs: a location given by
    position (after trigger_index and trigger_level) is the handle's location."""
    tile = acc.create_parameters()
    plan, (A, B, C) = simt_plan(tile=tile)
    k = plan.schedule.nest.get_indices()[2]
    handle = plan.cache(C, k, None, None, acc.MemorySpace.PRIVATE)
    assert (handle.array, handle.index, handle.location) == (C, k, acc.MemorySpace.PRIVATE)
    assert plan.cache(A, index=k).location is acc.MemorySpace.SHARED  # the default
