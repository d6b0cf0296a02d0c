"""Resident operand tiles of a wgmma plan (``hopper._residents``): an operand cached in SHARED at
a loop outside the ring's cache index, whose tile is the same for every tile of the kernel, is
copied once at the kernel's start (one mbarrier, waited for once) instead of streaming through the
ring; one whose tile moves with loops bound to blocks alone is copied once a work item; any other
that moves is refused with the loops it moves with."""

from __future__ import annotations

import pytest

import schedc as acc
from schedc.errors import CacheError
from schedc.ir.kernel import MbarrierArrive, MbarrierWait, TmaLoad
from schedc.ir.walk import walk_statements
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .plans import build, compile_function_plan

F16 = acc.ScalarType.float16
H100 = acc.Target(acc.Target.Model.NVIDIA_H100)


def _plan(M=256, N=128, K=256, b_at="j", persistent=False, producer=True, n_block=128, b_layout="FIRST_MAJOR",
          b_stages=0):
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(K, N), layout=acc.Array.Layout[b_layout])
    C = acc.Array(role=acc.Role.OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 128)
    iii = schedule.split(ii, 64)
    jj = schedule.split(j, n_block)
    kk = schedule.split(k, 64)
    shape = acc.MMAShape[f"M64xN{n_block}xK16_B1"]
    iiii, jjj, kkk = schedule.tile({iii: 64, jj: n_block, kk: 16})
    schedule.reorder(i, j, ii, jj, k, kk, iii, iiii, jjj, kkk)
    plan = schedule.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_Y, j: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.WARPGROUP_Y})
    plan.tensorize(indices=(iiii, jjj, kkk), mma_shape=shape, prologue_op=acc.MMAFragmentOp.SET)
    plan.cache(A, index=kk, location=H100.MemorySpace.SHARED, stages=3, engine=acc.CopyEngine.TMA)
    index = {"j": jj, "kk": kk}[b_at]
    plan.cache(B, index=index, location=H100.MemorySpace.SHARED, engine=acc.CopyEngine.TMA,
               **({"stages": 3} if b_at == "kk" else {"stages": b_stages} if b_stages else {}))
    plan.cache(C, index=k, location=H100.MemorySpace.MMA_FRAGMENT)
    plan.warp_specialize(producer)
    if persistent:
        plan.persistent(**({"blocks": persistent} if persistent is not True else {}))
    return plan, (A, B, C)


CASES = {
    "resident": {},
    "resident_persistent": dict(persistent=True),
    "resident_one_role": dict(producer=False),
    "resident_column_major": dict(b_layout="LAST_MAJOR"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_resident_operand_matches_the_reference(case):
    model, fn = compile_function_plan(*_plan(**CASES[case]))
    reports = emulate_function(model, fn, None, seed=4)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_a_resident_tile_is_copied_once_before_the_ring():
    """B's two boxes (its 256 x 128 tile) on the resident barrier, before any tile; the consumers
    wait for it once, outside the tile loop; A alone streams through the ring."""
    _, fn = compile_function_plan(*_plan(persistent=True))
    body = list(walk_statements(fn.kernels[0].body))
    copies = [s for s in body if isinstance(s, TmaLoad)]
    assert [s.barrier for s in copies if s.tensor_map == "B_map"] == ["resident", "resident"]
    assert {s.barrier for s in copies if s.tensor_map == "A_map"} == {"full"}
    assert sum(isinstance(s, MbarrierWait) and s.barrier == "resident" for s in body) == 1


@pytest.mark.parametrize("persistent", [False, 3], ids=["a_block_an_item", "three_blocks_eight_items"])
def test_a_tile_that_moves_with_the_blocks_is_copied_once_a_work_item(persistent):
    """B at jj over two columns of blocks: its tile moves with j (bound to blocks) alone, so it is
    copied at each work item's start on a barrier of its own, waited for once an item, and freed
    after the item's last product; the result is the reference's (a persistent block's items use
    the barrier's phases in turn)."""
    model, fn = compile_function_plan(*_plan(N=256, M=512, persistent=persistent))
    body = list(walk_statements(fn.kernels[0].body))
    copies = [s for s in body if isinstance(s, TmaLoad) and s.tensor_map == "B_map"]
    assert copies and {s.barrier for s in copies} == {"item_full"}
    assert sum(isinstance(s, MbarrierWait) and s.barrier == "item_full" for s in body) == 1
    assert any(isinstance(s, MbarrierArrive) and s.barrier == "item_empty" for s in body)
    reports = emulate_function(model, fn, None, seed=4)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_a_tile_that_moves_with_the_blocks_in_stages_is_refused():
    """Copied once a work item, a tile has one stage: with stages it would be the ring's, which
    caches at the innermost index."""
    with pytest.raises(CacheError, match=r"A is cached at kk and B at jj: the operands of wgmma share one pipeline, "
                                         r"or one tile that never moves is copied once \(resident\), or one that "
                                         r"moves with loops bound to blocks alone once a work item \(one stage, one "
                                         r"team, no cluster\), and its tile moves with j: cache B at kk"):
        compile_function_plan(*_plan(N=256, b_stages=2))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["resident", "resident_persistent"])
def test_a_resident_operand_on_the_gpu(case, tmp_path):
    build(*_plan(**CASES[case]), "resident", tmp_path)
    require_gpu()
    reports = run_function(acc.load(tmp_path / "resident.hat").functions["resident"], seed=7)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("producer", [True, False])
def test_reading_a_resident_tile_without_its_wait_is_a_race(producer):
    """The consumers' one wait for the resident barrier removed: the emulator reports the wgmma's
    read of B's tile before its copy completed (each barrier's copies are their own: the ring's
    waits say nothing of the resident copy)."""
    import dataclasses

    from schedc.codegen.emulate import EmulationError

    from . import kit

    model, fn = compile_function_plan(*_plan(producer=producer))
    kernel = fn.kernels[0]
    broken = dataclasses.replace(kernel, body=kit.rewrite(
        kernel.body, lambda s: () if isinstance(s, MbarrierWait) and s.barrier == "resident" else (s,)))
    with pytest.raises(EmulationError, match=r"race: a wgmma of the (consumers role|block) reads B_shared\[\d+\] "
                                             r"\(stage 0\) before a TMA copy's write of it is known to have completed"):
        emulate_function(model, dataclasses.replace(fn, kernels=(broken,)), 1, seed=0)
