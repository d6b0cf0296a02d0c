"""Thread block clusters: blocks that share an operand tile copy it once, by TMA multicast.

The emulated results of clustered plans are in test_hopper.py's PLANS (``cluster*``); here: the
kernel's shape (cluster dims, multicast parts, cluster-wide empty barriers, cluster barriers),
the PTX, the refusals with their numbers, and hand-broken kernels the emulator must catch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import EmulationError, emulate
from schedc.errors import CacheError, PlanError
from schedc.ir.kernel import Barrier, ClusterSync, If, MbarrierArrive, MbarrierInit, TmaLoad
from schedc.ir.walk import walk_statements
from schedc.lower import wellformed
from schedc.package.compile import nvrtc_compile

from .kit import F16, emulate_broken, hopper_matmul, kernel, lower, rewrite, run
from .plans import tensor_matmul

Y, X = acc.GridUnit.BLOCK_Y, acc.GridUnit.BLOCK_X


def _guards(k) -> list:
    """The statements that hold an arrival on an empty barrier."""
    return [s for s in walk_statements(k.body) if isinstance(s, If) and len(s.body) == 1
            and isinstance(s.body[0], MbarrierArrive) and s.body[0].barrier == "empty"]


def _copies(k) -> list[TmaLoad]:
    return [s for s in walk_statements(k.body) if isinstance(s, TmaLoad)]


def test_kernel_shape_boxes_of_b_shared_out():
    k = kernel(256, 512, 256, cluster=2)
    assert (k.grid, k.cluster) == ((2, 2, 1), (1, 2, 1))
    copies = _copies(k)
    assert {s.tensor_map: s.multicast for s in copies} == {"A_map": 0, "B_map": 0b11, "C_map": 0}
    assert sum(s.tensor_map == "B_map" for s in copies) == 2  # 2 of B's 4 boxes per block
    inits = {s.barrier: s.count for s in walk_statements(k.body) if isinstance(s, MbarrierInit)}
    assert inits == {"full": 1, "empty": 8 * 2, "C_full": 1}  # a thread of each consumer warp of both blocks frees a stage
    frees = [s for s in walk_statements(k.body) if isinstance(s, MbarrierArrive) and s.barrier == "empty"]
    assert frees and all(s.cluster == 2 for s in frees)
    assert all(isinstance(s, If) and s.body == (f,) for s, f in zip(_guards(k), frees))
    syncs = [s for s in k.body if isinstance(s, ClusterSync)]
    assert len(syncs) == 2 and k.body[-1] is syncs[-1]
    assert not any(isinstance(s, Barrier) for s in k.body)


def test_rows_of_each_box_shared_out_when_boxes_do_not_divide():
    k = kernel(512, 256, 200, block=(128, 128, 64), cluster=4)
    assert k.cluster == (1, 4, 1)
    b_map = next(v for v in k.values if v.name == "B_map")
    assert b_map.spec.box == (16, 64)  # 64 rows of k over 4 blocks, 64-column boxes
    parts = [s for s in _copies(k) if s.tensor_map == "B_map"]
    assert len(parts) == 2 and all(s.multicast == 0b1111 for s in parts)


def test_a_cluster_of_one_block_is_no_cluster():
    """plan.cluster(1) (a parameter grid's way to leave clusters out) gives the unclustered kernel."""
    import hopper_matmul

    from .kit import lower

    plan, args = hopper_matmul.matmul(256, 512, 256)
    plan.cluster(2, Y)
    plan.cluster(1, Y)
    assert plan.clustering is None
    assert lower(plan, args) == kernel(256, 512, 256)


def test_persistent_grid_in_whole_clusters():
    k = kernel(512, 512, 192, block=(128, 128, 64), stages=3, cluster=2, persistent={"group": 2})
    assert k.cluster == (2, 1, 1) and k.grid[0] % 2 == 0 and k.grid[0] == 16  # 16 tiles
    k = kernel(2048, 2048, 64, block=(128, 128, 64), cluster=2, persistent={"group": 8})
    assert k.grid == (132, 1, 1)  # the H100's 132 multiprocessors: 66 clusters


def test_ptx_has_multicast_copies_and_cluster_barriers():
    k = kernel(256, 512, 256, cluster=2)
    source = emit_source([k], "// cluster")
    assert "__cluster_dims__(1, 2, 1)" in source
    ptx = nvrtc_compile(source, "cluster", "sm_90a").ptx
    for instruction in ("multicast::cluster", "mapa.shared::cluster", "mbarrier.arrive.shared::cluster",
                        "barrier.cluster.arrive", "barrier.cluster.wait", "%cluster_ctarank", ".reqnctapercluster"):
        assert instruction in ptx, instruction
    assert emit_source([kernel(256, 512, 256, cluster=2)], "// cluster") == source  # deterministic


def test_a_sampled_block_runs_with_its_cluster():
    k = kernel(256, 512, 256, cluster=2)
    rng = np.random.default_rng(0)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in k.params}
    result = emulate(k, storage, blocks=[(1, 1, 0)])
    assert sorted(result.blocks) == [(1, 0, 0), (1, 1, 0)]


def _clustered(size=2, unit=Y, M=256, N=512, K=256, **options):
    plan, args = hopper_matmul.matmul(M, N, K, **options)
    plan.cluster(size, unit)
    return plan, args


@pytest.mark.parametrize("make, error, message", [
    (lambda: _clustered(M=384), PlanError, r"BLOCK_Y has 3 blocks \(i\), not a multiple of 2"),
    (lambda: _clustered(unit=acc.GridUnit.BLOCK_Z), PlanError, "no loop is bound to BLOCK_Z"),
    (lambda: _clustered(unit=X, persistent={"group": 8}), PlanError, "cluster along BLOCK_Y"),
    (lambda: _clustered(persistent={"group": 3}), PlanError, r"persistent\(group=3\): clusters of 2 blocks"),
    (lambda: _clustered(persistent={"blocks": 3}), PlanError, "3 blocks do not make whole clusters of 2"),
    (lambda: _clustered(size=8, M=1024, N=128, block=(128, 64, 32)), CacheError,
     r"B's tile is 1 box\(es\) of 32 rows; 8 blocks share it out .* groups of 8 rows"),
    (lambda: _cluster_simt(), PlanError, "tensorize with a wgmma shape"),
])
def test_refusals(make, error, message):
    with pytest.raises(error, match=message):
        lower(*make())


def _cluster_simt():
    plan, args = tensor_matmul(64, 64, 64)
    plan.cluster(2, Y)
    return plan, args


@pytest.mark.parametrize("call, error, message", [
    (lambda p: p.cluster(3), PlanError, "size must be 2, 4 or 8"),
    (lambda p: p.cluster(2, acc.GridUnit.WARP_X), PlanError, "unit must be BLOCK_X, BLOCK_Y or BLOCK_Z, not WARP_X"),
])
def test_arguments(call, error, message):
    plan, _ = hopper_matmul.matmul(256, 512, 256)
    with pytest.raises(error, match=message):
        call(plan)


def test_clusters_need_sm90():
    plan, _ = tensor_matmul(64, 64, 64, target=acc.Target(acc.Target.Model.NVIDIA_A100))
    with pytest.raises(PlanError, match="thread block clusters need sm_90; NVIDIA A100 is sm_80"):
        plan.cluster(2)


def test_row_split_result_matches_numpy():
    got, expected, written = run(kernel(512, 256, 200, block=(128, 128, 64), cluster=4), blocks=[(0, 2, 0)])
    assert written.sum() == 4 * 128 * 128  # the sampled block's whole cluster
    assert np.abs(got - expected).max() < 1e-3


# -- hand-broken kernels ---------------------------------------------------------------------------


def _broken(change, **options):
    k = kernel(256, 256, 256, block=(128, 128, 64), stages=2, cluster=2, **options)
    return dataclasses.replace(k, body=rewrite(k.body, change))


def test_peer_copies_into_a_block_before_its_barriers_are_set_up():
    first = []

    def change(s):
        if isinstance(s, ClusterSync) and not first:
            first.append(s)
            return (Barrier("the block's barriers only"),)
        return (s,)

    k = _broken(change)
    with pytest.raises(EmulationError, match=r"a TMA copy completing on full\[0\] of the cluster's block 1 before it "
                                             r"is set up"):
        emulate_broken(k)


def test_stage_refilled_while_a_peer_block_still_reads_it():
    def change(s):  # each block's consumers free only their own block's stage
        if isinstance(s, MbarrierArrive) and s.cluster:
            return (dataclasses.replace(s, cluster=0),)
        if isinstance(s, MbarrierInit) and s.barrier == "empty":
            return (dataclasses.replace(s, count=s.count // 2),)
        return (s,)

    with pytest.raises(EmulationError, match=r"a TMA copy overwrites B_shared\[\d+\] \(stage \d\), which a wgmma of "
                                             "the consumers role of the cluster's block 1 may still read"):
        emulate_broken(_broken(change))


def test_copy_sent_to_one_block_only_leaves_the_other_waiting():
    def change(s):
        if isinstance(s, TmaLoad) and s.multicast:
            return (dataclasses.replace(s, multicast=1),)
        return (s,)

    with pytest.raises(EmulationError, match=r"no role can go on: .*the consumers role of the cluster's block 1 waits "
                                             r"for full\[0\] to complete its phase of parity 0 \(0 phase\(s\) completed, 0 "
                                             r"arrival\(s\) and 16384 byte\(s\) outstanding\)"):
        emulate_broken(_broken(change))


def test_ir_verifier_rules():
    k = kernel(256, 512, 256, cluster=2)
    assert wellformed.problems(k) == []
    no_exit = dataclasses.replace(k, body=k.body[:-1])
    assert any("ends without a cluster barrier" in p for p in wellformed.problems(no_exit))
    alone = dataclasses.replace(k, cluster=(1, 1, 1), body=rewrite(k.body, lambda s: (
        dataclasses.replace(s, multicast=0) if isinstance(s, TmaLoad) else s,)))
    found = wellformed.problems(alone)
    assert any("cluster barrier in a kernel launched without clusters" in p for p in found)
    assert any("in 2 blocks of a cluster of 1" in p for p in found)


def test_same_result_as_without_the_cluster():
    plain, _, _ = run(kernel(256, 512, 256, output=F16), seed=4)
    clustered, _, _ = run(kernel(256, 512, 256, output=F16, cluster=2), seed=4)
    assert np.array_equal(plain, clustered)
