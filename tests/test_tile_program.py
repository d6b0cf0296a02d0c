"""The tile program of a wgmma plan and the passes that make it fast: ``lower`` writes each operand
tile's fill where the tile is used, ``specialize`` moves the fills to a producer warpgroup,
``pipeline`` overlaps the ring's stages. Each pass leaves a kernel that computes C."""

from __future__ import annotations

import numpy as np
import pytest

from schedc.frontend.freeze import freeze
from schedc.ir.kernel import If, Let, Loop, MbarrierWait, Roles, TmaLoad, WarpgroupWait
from schedc.ir.walk import walk_statements
from schedc.lower import compile_model, verifying
from schedc.lower.pipeline import FILLS, is_fill
from schedc.package.build import name_arrays

from .kit import F16, hopper_matmul, run

SHAPE = (128, 128, 256)  # four tiles of k per tile of C
PLANS = {
    "producer": {"block": (128, 128, 64), "stages": 3},
    "no_producer": {"block": (128, 128, 64), "stages": 3, "specialize": False},
    "one_stage": {"block": (128, 128, 64), "stages": 1, "specialize": False},
    "ping_pong": {"block": (64, 64, 64), "stages": 2, "teams": 2, "persistent": {"blocks": 2}},
    "f16_c_loaded": {"block": (128, 128, 64), "stages": 4, "output": F16},
}


def after_each_pass(**options) -> dict[str, object]:
    """The kernel after each pass that makes or rewrites it (the IR verified after each)."""
    plan, args = hopper_matmul.matmul(*SHAPE, **options)
    name_arrays("test", plan, args, "mm")
    kernels: dict[str, object] = {}
    with verifying():
        compile_model(freeze(plan, "mm", args), lambda step, ir: kernels.__setitem__(step.name, ir.kernel))
    return kernels


def statements(kernel, kind) -> list:
    return [s for s in walk_statements(kernel.body) if isinstance(s, kind)]


@pytest.fixture(scope="module")
def stages():
    return {name: after_each_pass(**options) for name, options in PLANS.items()}


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("after", ["lower", "specialize", "pipeline"])
def test_each_pass_leaves_a_kernel_that_computes_c(stages, plan, after):
    got, expected, written = run(stages[plan][after])
    tolerance = 1e-3 + (np.abs(expected).max() * 2.0 ** -11 if "output" in PLANS[plan] else 0)
    assert written.all() and np.abs(got - expected).max() < tolerance


def test_the_tile_program_fills_each_tile_where_it_is_used(stages):
    k = stages["producer"]["lower"]
    assert not statements(k, Roles) and k.block == (256, 1, 1), "one role: the consumers"
    step = next(s for s in walk_statements(k.body) if isinstance(s, Loop) and any(is_fill(x) for x in s.body))
    kinds = [type(s).__name__ for s in step.body]
    assert kinds[:5] == ["Let", "Let", "Let", "If", "MbarrierWait"], "the tile's lets, its fill, the wait for it"
    assert [s.pending for s in statements(k, WarpgroupWait)] == [0], "each tile's products finish before its stage is freed"


def test_specialize_moves_every_fill_to_the_producer(stages):
    before, after = stages["producer"]["lower"], stages["producer"]["specialize"]
    roles = statements(after, Roles)[0]
    producer, consumers = roles.roles
    assert after.block == (384, 1, 1) and (producer.name, producer.first, producer.registers) == ("producer", 256, 40)
    copies = lambda body: [s for s in walk_statements(body) if isinstance(s, TmaLoad) and s.barrier in FILLS]  # noqa: E731
    assert copies(producer.body) == copies(before.body) and not copies(consumers.body)
    assert not any(is_fill(s) for s in walk_statements(consumers.body))
    lets = [s.name for s in walk_statements(producer.body) if isinstance(s, Let)]
    assert lets == ["tile", "stage", "parity"], "only the lets the copies read"
    assert {"ii", "tile"} <= {s.name for s in walk_statements(consumers.body) if isinstance(s, Let)}


def test_specialize_leaves_a_plan_without_a_producer_alone(stages):
    assert stages["no_producer"]["specialize"] is stages["no_producer"]["lower"]


def test_ping_pong_producer_takes_every_work_item(stages):
    roles = statements(stages["ping_pong"]["specialize"], Roles)[0]
    loops = {r.name: next(s for s in r.body[0].body if isinstance(s, Loop)) if r.name == "producer" else
             next(s for s in walk_statements(r.body) if isinstance(s, Loop)) for r in roles.roles}
    assert loops["producer"].step == 2 and loops["consumers"].step == 4, "2 blocks; the 2 teams take turns"
    assert "teams" not in loops["producer"].comment


def test_pipeline_keeps_a_group_in_flight_and_frees_the_tile_before(stages):
    k = stages["producer"]["pipeline"]
    assert [s.pending for s in statements(k, WarpgroupWait)] == [1, 0], "one group in flight, then the pass's last"
    frees = [s for s in statements(k, If) if "previous tile's products are done" in str(s.body)]
    assert len(frees) == 1


def test_pipeline_issues_fills_ahead_without_a_producer(stages):
    k = stages["no_producer"]["pipeline"]
    ifs = statements(k, If)
    prologue = [s for s in ifs if s.comment == "thread 0 copies the first 2 tile(s) of the pass"]
    ahead = [s for s in ifs if s.comment == "thread 0 copies the tile 2 ahead"]
    assert len(prologue) == 1 and len(ahead) == 1
    assert len([s for s in prologue[0].body if isinstance(s, MbarrierWait)]) == 2
    assert [s for s in walk_statements(k.body) if is_fill(s)] == [*prologue, *ahead], "every fill issued ahead"


def test_one_stage_keeps_the_fill_where_it_is_used(stages):
    assert stages["one_stage"]["pipeline"] is stages["one_stage"]["lower"] or \
        stages["one_stage"]["pipeline"].body == stages["one_stage"]["lower"].body
