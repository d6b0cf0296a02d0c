"""Hopper plans: wgmma on TMA tiles in mbarrier rings, warp-specialized or not.

Each plan is emulated against numpy (the emulator runs the roles as coroutines, TMA and wgmma
at the hardware's swizzled addresses), compiled for sm_90a, and refused where it cannot run;
hand-broken kernels show that the race detector finds each kind of misuse.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import schedc as acc
from schedc import verify
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import EmulationError, emulate
from schedc.codegen.emulate_hopper import hardware_swizzle
from schedc.errors import CacheError, PlanError
from schedc.instructions import swizzle_column
from schedc.ir.kernel import (
    WARPGROUP_INDEX,
    Binary,
    Const,
    Fragment,
    FragmentAdd,
    FragmentLoad,
    FragmentStore,
    If,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    Roles,
    TmaLoad,
    TmaStore,
    Var,
    WarpgroupFence,
    WarpgroupWait,
)
from schedc.ir.walk import walk_statements
from schedc.lower import wellformed
from schedc.package.compile import arch_for, nvrtc_compile

from .conftest import build_sample, require_gpu
from .kit import BF16, COL, F16, F32, emulate_broken, hopper_matmul, kernel, lower, rewrite, run
from .plans import build, compile_function_plan

PLANS = {
    "fp16_specialized": ((256, 512, 256), {}),
    "fp16_one_thread_issues": ((256, 512, 256), {"specialize": False}),
    "bf16_2_stages": ((256, 512, 256), {"operand": BF16, "stages": 2}),
    "tf32_column_major_b": ((256, 256, 128), {"operand": F32, "block": (128, 128, 32), "b_layout": COL}),
    "partial_tiles": ((200, 304, 136), {"block": (128, 128, 64)}),
    "four_warpgroups": ((256, 256, 256), {"block": (128, 256, 64), "warpgroup_n": 128}),
    "more_tiles_than_stages": ((128, 128, 512), {"block": (128, 128, 64), "stages": 3, "specialize": False}),
    "k_tile_of_two_chunks": ((128, 256, 256), {"block": (128, 256, 128), "stages": 2}),
    "column_major_b_fp16": ((128, 256, 128), {"block": (128, 128, 64), "b_layout": COL}),
    "one_stage": ((128, 128, 256), {"block": (128, 128, 64), "stages": 1}),
    "one_stage_one_thread_issues": ((128, 128, 256), {"block": (128, 128, 64), "stages": 1, "specialize": False}),
    "fp16_output": ((256, 512, 256), {"output": F16}),
    "bf16_output_partial_tiles": ((200, 304, 136), {"operand": BF16, "output": BF16, "block": (128, 128, 64)}),
    "persistent": ((384, 512, 192), {"block": (128, 128, 64), "stages": 3, "output": F16,
                                     "persistent": {"blocks": 5, "group": 2}}),
    "persistent_one_thread_issues": ((256, 512, 256), {"specialize": False, "persistent": {"blocks": 3}}),
    "persistent_one_stage": ((384, 384, 192), {"block": (128, 128, 64), "stages": 1,
                                               "persistent": {"blocks": 2, "group": 3}}),
    # clusters of blocks along BLOCK_Y share B's tile by TMA multicast (B's boxes, or rows of them)
    "cluster": ((256, 512, 256), {"cluster": 2}),
    "cluster_one_thread_issues": ((256, 512, 256), {"cluster": 2, "specialize": False}),
    "cluster_persistent": ((512, 512, 192), {"block": (128, 128, 64), "stages": 3, "output": F16, "cluster": 2,
                                             "persistent": {"blocks": 4, "group": 2}}),
    "cluster_of_four_rows_partial_k": ((512, 256, 200), {"block": (128, 128, 64), "cluster": 4}),
    # two consumer teams taking a persistent block's tiles in turn (ping-pong): 12 tiles on 5 blocks
    # (teams with unequal counts), partial tiles and a partial stage of k, one team a cluster's
    "ping_pong": ((384, 512, 192), {"block": (128, 128, 64), "stages": 3, "output": F16, "teams": 2,
                                    "persistent": {"blocks": 5, "group": 2}}),
    "ping_pong_partial_tiles": ((200, 304, 136), {"block": (128, 128, 64), "stages": 2, "teams": 2,
                                                  "persistent": {"blocks": 2}}),
    "ping_pong_cluster": ((512, 512, 192), {"block": (64, 256, 64), "stages": 4, "output": F16, "cluster": 2,
                                            "teams": 2, "persistent": {"blocks": 4, "group": 2}}),
    "three_teams": ((448, 384, 384), {"block": (64, 128, 64), "stages": 3, "output": F16, "teams": 3,
                                      "persistent": {"blocks": 4, "group": 2}}),
    # tiles whose rows are not whole 128-byte chunks: B's last box partly read, C's last columns
    # through unswizzled boxes of their own (loaded and stored; stored only; float32 C; ping-pong
    # teams holding two accumulators each), A's k-tile part of a box
    "partial_chunks": ((200, 504, 128), {"block": (128, 232, 64), "stages": 3, "output": F16, "cluster": 2,
                                         "persistent": {"blocks": 4, "group": 2}}),
    "partial_chunks_stored_only": ((200, 504, 128), {"block": (128, 232, 64), "stages": 2, "output": F16,
                                                     "prologue": (acc.MMAFragmentOp.SET, 0.0)}),
    "partial_chunks_float32_c": ((256, 400, 192), {"operand": BF16, "block": (128, 200, 64), "stages": 2}),
    "partial_chunks_ping_pong": ((200, 312, 128), {"block": (128, 104, 64), "stages": 2, "teams": 2,
                                                   "persistent": {"blocks": 2}}),
    "k_stage_part_of_a_chunk": ((256, 256, 192), {"block": (128, 256, 48), "stages": 2}),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_emulated_plans_match_numpy(name):
    (M, N, K), options = PLANS[name]
    op, arg = options.get("prologue", (None, None))
    got, expected, written = run(kernel(M, N, K, **options), start=arg if op is acc.MMAFragmentOp.SET else None)
    tolerance = 2e-2 * np.sqrt(K) if options.get("operand") is F32 else 1e-3
    output = options.get("output", F32)
    if output is not F32:  # C rounded to its 16-bit type: half a unit in the last place
        tolerance += np.abs(expected).max() * 2.0 ** -{F16: 11, BF16: 8}[output]
    assert written.all()
    assert np.abs(got - expected).max() < tolerance


@pytest.mark.parametrize("name", ["fp16_specialized", "fp16_one_thread_issues", "tf32_column_major_b"])
def test_compiles_for_sm90a_with_wgmma_and_tma(name):
    (M, N, K), options = PLANS[name]
    k = kernel(M, N, K, **options)
    source = emit_source([k], "// hopper")
    assert arch_for("sm_90", [k]) == "sm_90a"
    ptx = nvrtc_compile(source, "hopper", "sm_90a").ptx
    for instruction in ("wgmma.mma_async", "cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity",
                        "wgmma.wait_group", "wgmma.commit_group"):
        assert instruction in ptx, instruction
    assert ("setmaxnreg" in ptx) == options.get("specialize", True)
    assert emit_source([kernel(M, N, K, **options)], "// hopper") == source  # deterministic


def test_kernel_shape():
    k = kernel(256, 512, 256)
    assert k.block == (384, 1, 1)  # 2 consumer warpgroups and a producer
    roles = next(s for s in k.body if isinstance(s, Roles))
    assert [(r.name, r.first, r.threads, r.registers) for r in roles.roles] == [
        ("producer", 256, 128, 40), ("consumers", 0, 256, 232)]
    # A 128x64, B in 64-column boxes, C stored in 64x32 boxes (float32: 128-byte rows)
    assert [v.spec.box for v in k.values] == [(128, 64), (64, 64), (64, 32)]
    assert {b.name: b.swizzle for b in k.shared} == {"A_shared": 128, "B_shared": 128, "full": 0, "empty": 0,
                                                     "C_out": 128, "C_full": 0}


@pytest.mark.parametrize("pitch", [32, 64, 128])
def test_tma_swizzle_is_the_tile_swizzle(pitch):
    """The hardware's address-bit swizzle of a row-pitch tile at a 1024-byte aligned base is
    schedc's swizzle_column (the layout ldmatrix tiles use)."""
    size = 2
    rows, per_row = 16, pitch // size
    r, c = np.meshgrid(np.arange(rows), np.arange(per_row), indexing="ij")
    address = 4096 + (r * per_row + c) * size
    ours = 4096 + (r * per_row + swizzle_column(r, c, pitch, size)) * size
    assert (hardware_swizzle(address, pitch) == ours).all()


# -- refusals ---------------------------------------------------------------------------------


def _plan(**options):
    return hopper_matmul.matmul(256, 512, 256, **options)




@pytest.mark.parametrize("options, error, message", [
    ({"operand": F32, "block": (128, 128, 32)}, CacheError, "tf32 wgmma reads operands whose k is contiguous"),
    ({"stages": 8}, CacheError, r"8 stage\(s\) of the TMA tiles need \d+ bytes of shared memory"),
 ])
def test_refusals(options, error, message):
    with pytest.raises(error, match=message):
        lower(*_plan(**options))


@pytest.mark.parametrize("name, boxes, tail", [("partial_chunks", 4, 40), ("partial_chunks_float32_c", 4, 8),
                                                ("partial_chunks_stored_only", 4, 40), ("k_stage_part_of_a_chunk", 4, 0)])
def test_tiles_of_partial_chunks_copy_whole_boxes_and_store_the_tail_by_tma(name, boxes, tail):
    """B's tile of 232 (or 200) columns is four whole 64-column boxes (the copies' bytes count
    them all), and C's last columns leave (and, where C is read, enter) by TMA through their own
    unswizzled boxes, not by the threads."""
    (M, N, K), options = PLANS[name]
    k = kernel(M, N, K, **options)
    shared = {b.name: b for b in k.shared}
    assert shared["B_shared"].shape[1] == boxes
    maps = {p.name: p.spec for p in k.values if getattr(p, "builder", "") == "tensor_map"}
    statements = list(walk_statements(k.body))
    if tail:
        assert maps["C_tail_map"].box == (64, tail) and maps["C_tail_map"].swizzle == 0
        assert shared["C_tail"].shape[-2:] == (64, tail)
        stores = [s for s in statements if isinstance(s, TmaStore) and s.tensor_map == "C_tail_map"]
        loads = [s for s in statements if isinstance(s, TmaLoad) and s.tensor_map == "C_tail_map"]
        assert stores and bool(loads) == ("prologue" not in options)
    else:
        assert "C_tail_map" not in maps
    assert not [s for s in statements if isinstance(s, FragmentStore) and s.buffer == "C"]  # no thread stores C


def test_operands_must_be_cached():
    M = N = K = 256
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 64), s.split(j, 128), s.split(k, 64)
    iii, jjj, kkk = s.tile({ii: 64, jj: 128, kk: 16})
    s.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)
    target = hopper_matmul.target
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M64xN128xK16_B1)
    with pytest.raises(PlanError, match=r"wgmma reads A \(A\) from shared memory: plan.cache\(A"):
        lower(plan, (A, B, C))
    plan.cache(A, index=kk, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.THREADS)
    plan.cache(B, index=kk, location=target.MemorySpace.SHARED)
    with pytest.raises(CacheError, match="copies by the block's threads into it are not built: use engine=TMA"):
        lower(plan, (A, B, C))


def test_tma_rows_must_be_16_byte_multiples():
    with pytest.raises(CacheError, match="B's rows are 600 bytes apart; TMA needs a multiple of 16 bytes"):
        lower(*hopper_matmul.matmul(200, 300, 128, block=(128, 128, 64)))


def test_register_budget_of_the_roles():
    plan, args = hopper_matmul.matmul(256, 256, 256, block=(128, 256, 64), warpgroup_n=128)
    plan.warp_specialize(True, producer_registers=40, consumer_registers=232)
    with pytest.raises(PlanError, match=r"128 producer threads x 40 \+ 512 consumer threads x 232 = 123904 "
                                        r"registers; the block's 640 threads hold 96 each at launch \(61440 in all\)"
                                        r".*consumers may take at most 104"):
        lower(plan, args)
    plan.warp_specialize(True, producer_registers=40, consumer_registers=112)  # fits the SM, not the block
    with pytest.raises(PlanError, match="consumers may take at most 104"):
        lower(plan, args)
    plan.warp_specialize(True, producer_registers=24, consumer_registers=56)
    with pytest.raises(PlanError, match="each consumer thread holds 64 accumulator registers"):
        lower(plan, args)


@pytest.mark.parametrize("call, message", [
    (lambda p: p.warp_specialize(True, 40, 230), "consumer_registers must be a multiple of 8 from 24 to 256"),
    (lambda p: p.warp_specialize(True, teams=0), "teams must be a positive integer"),
    (lambda p: p.warp_specialize(False, teams=2), "keep enabled=True, or teams=1"),
    (lambda p: p.warp_specialize(True, 40), "give both producer_registers and consumer_registers"),
    (lambda p: p.warp_specialize("yes"), "enabled must be True or False"),
])
def test_warp_specialize_arguments(call, message):
    plan, _ = _plan()
    with pytest.raises(PlanError, match=message):
        call(plan)


def test_sm90_features_refused_on_older_targets():
    target = acc.Target(acc.Target.Model.NVIDIA_A100)
    nest = acc.Nest(shape=(64,))
    i, = nest.get_indices()
    A = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(64,))

    @nest.iteration_logic
    def _():
        A[i] += 1.0

    plan = nest.create_schedule().create_plan(target)
    with pytest.raises(CacheError, match="engine=TMA needs sm_90 .*; NVIDIA A100 is sm_80"):
        plan.cache(A, index=i, location=target.MemorySpace.SHARED, engine=acc.CopyEngine.TMA)
    with pytest.raises(PlanError, match="warp specialization with TMA producers needs sm_90"):
        plan.warp_specialize()


@pytest.mark.parametrize("call, shown", [({}, r"warp_specialize\(\)"), ({"teams": 2}, r"warp_specialize\(teams=2\)")])
def test_warp_specialization_is_refused_without_a_tma_ring(call, shown):
    from .plans import compile_plan, tensor_matmul

    plan, args = tensor_matmul(64, 64, 64)
    plan.persistent()
    plan.warp_specialize(True, **call)
    with pytest.raises(PlanError, match=shown + r": a producer warpgroup issues the TMA copies of a wgmma plan's "
                                               r"SHARED caches, and this plan \(mma_sync tiles\) has none"):
        compile_plan(plan, args)


def test_warpgroups_and_warps_are_not_mixed():
    plan, _ = _plan()
    s = plan.schedule
    free = [x for x in s.order if x not in {i for g in plan.bindings.values() for i in g}]
    with pytest.raises(PlanError, match=r"WARP_\* and WARPGROUP_\* bindings cannot be mixed"):
        plan.bind({free[0]: acc.GridUnit.WARP_X})


# -- the race detector on hand-broken kernels ---------------------------------------------------




def _broken(change, **options):
    k = kernel(128, 256, 512, block=(128, 256, 64), **{"stages": 2, **options})
    return dataclasses.replace(k, body=rewrite(k.body, change))




def test_consumer_reading_before_the_full_barrier():
    k = _broken(lambda s: () if isinstance(s, MbarrierWait) and s.barrier == "full" else (s,))
    with pytest.raises(EmulationError, match=r"a wgmma of the consumers role reads [AB]_shared\[\d+\] \(stage \d\) before a TMA copy's write"):
        emulate_broken(k)


def test_producer_refilling_a_stage_before_it_is_released():
    k = _broken(lambda s: () if isinstance(s, MbarrierWait) and s.barrier == "empty" else (s,))
    with pytest.raises(EmulationError, match=r"a TMA copy overwrites [AB]_shared\[\d+\] \(stage \d\)"):
        emulate_broken(k)


def test_stage_released_before_wait_group_finishes_its_products():
    k = _broken(lambda s: (WarpgroupWait(2),) if isinstance(s, WarpgroupWait) and s.pending == 1 else (s,))
    with pytest.raises(EmulationError, match="which a wgmma of the consumers role may still read"):
        emulate_broken(k)


def test_accumulator_stored_while_a_wgmma_is_in_flight():
    k = _broken(lambda s: () if isinstance(s, WarpgroupWait) and s.pending == 0 else (s,),
                prologue=(acc.MMAFragmentOp.SET, 0.0))  # C not read: the accumulator is stored as is
    with pytest.raises(EmulationError, match="FragmentStore of the accumulator _c_0_0 while a wgmma on it is in flight"):
        emulate_broken(k)


def test_wgmma_on_accumulators_written_without_a_fence():
    k = _broken(lambda s: () if isinstance(s, WarpgroupFence) else (s,))
    with pytest.raises(EmulationError, match="written since the warpgroup's last wgmma.fence"):
        emulate_broken(k)


def test_deadlock_is_reported_with_what_each_role_waits_for():
    def change(s):
        if isinstance(s, MbarrierInit) and s.barrier == "full":
            return (dataclasses.replace(s, count=2),)  # the producer's one arrival never completes a phase
        return (s,)

    with pytest.raises(EmulationError, match=r"no role can go on: the producer role waits for empty\[0\].*; the consumers role waits for full\[0\]"):
        emulate_broken(_broken(change))


def test_too_many_arrivals():
    def change(s):
        if isinstance(s, MbarrierInit) and s.barrier == "empty":
            return (dataclasses.replace(s, count=128),)
        return (s,)

    with pytest.raises(EmulationError, match=r"256 thread\(s\) arrive on empty\[\d\], whose phase 0 expects 128"):
        emulate_broken(_broken(change))


def test_barrier_used_before_it_is_set_up():
    k = _broken(lambda s: () if isinstance(s, MbarrierInit) else (s,))
    with pytest.raises(EmulationError, match=r"on (full|empty)\[0\] before it is set up"):
        emulate_broken(k)


def test_default_register_budget_is_what_the_producer_releases():
    """setmaxnreg.inc only takes what setmaxnreg.dec released in the block: 4 consumer warpgroups
    (640 threads, 96 registers each at launch) rise to 104, not to the SM's share of 112."""
    roles = next(s for s in kernel(256, 256, 256, block=(128, 256, 64), warpgroup_n=128).body if isinstance(s, Roles))
    assert [(r.name, r.threads, r.registers) for r in roles.roles] == [("producer", 128, 40), ("consumers", 512, 104)]


def test_roles_are_checked_by_the_ir_verifier():
    k = kernel(128, 256, 128, block=(128, 256, 64), stages=2)
    bad = rewrite(k.body, lambda s: (Roles(tuple(dataclasses.replace(r, first=r.first + 32, registers=230)
                                                  for r in s.roles)),) if isinstance(s, Roles) else (s,))
    problems = wellformed.problems(dataclasses.replace(k, body=bad))
    assert any("are not whole warpgroups" in p for p in problems)
    assert any("setmaxnreg takes multiples of 8" in p for p in problems)
    assert wellformed.problems(k) == []
    greedy = rewrite(k.body, lambda s: (Roles(tuple(dataclasses.replace(r, registers=240 if r.name == "consumers"
                                                                             else r.registers) for r in s.roles)),)
                      if isinstance(s, Roles) else (s,))
    assert any("exceed the 384 threads x 168 registers the block holds at launch" in p
               for p in wellformed.problems(dataclasses.replace(k, body=greedy)))


def _adds(k) -> list[FragmentAdd]:
    return [s for s in walk_statements(k.body) if isinstance(s, FragmentAdd)]


# C's rows 200 bytes apart (N = 100) take no TMA box: the threads load and store C
DIRECT = {"block": (128, 96, 64), "output": F16, "b_layout": acc.Array.Layout.LAST_MAJOR}
DIRECT_N = 100


def test_c_is_loaded_before_the_products_when_registers_allow():
    """C stored by the threads (rows 200 bytes apart take no TMA box): a 64x96 fp32 accumulator (48
    registers) and C's tile in float16 (24) fit the consumers' 232: C is loaded before the k
    loop, added after it. Where C's tiles pass through shared memory it comes in by TMA instead;
    with a prologue op it is loaded into the accumulator as before."""
    early = kernel(128, DIRECT_N, 128, **DIRECT)
    assert [(s.fragment, s.source) for s in _adds(early)] == [("_c_0_0", "_c_0_0_early")]
    source = emit_source([early], "// hopper")
    source = source[source.index("// consumers"):]
    assert source.index("_c_0_0_early[elem]) = ") < source.index("for (int k = 0;") \
        < source.index("_c_0_0[elem] += schedc::convert<float>(_c_0_0_early[elem]);")
    assert _adds(kernel(128, DIRECT_N, 128, **DIRECT, prologue=(acc.MMAFragmentOp.SCALE, 2.0))) == []
    assert {s.source for s in _adds(kernel(128, 256, 128, block=(128, 256, 64), stages=4))} == {"C_in"}


def test_c_added_while_a_wgmma_is_in_flight():
    def change(s):
        return () if isinstance(s, WarpgroupWait) and s.pending == 0 else (s,)

    k = kernel(128, 256, 256, block=(128, 256, 64), stages=4, output=F16)
    with pytest.raises(EmulationError, match="FragmentAdd of the accumulator _c_0_0 while a wgmma on it is in flight"):
        emulate_broken(dataclasses.replace(k, body=rewrite(k.body, change)))


def test_fragment_add_is_checked_by_the_ir_verifier():


    k = kernel(128, DIRECT_N, 128, **DIRECT)
    assert wellformed.problems(k) == []
    bad = rewrite(k.body, lambda s: (dataclasses.replace(s, source="_c_0_0_late"),) if isinstance(s, FragmentAdd)
                   else (s,))
    assert any("fragment _c_0_0_late is used before it is declared" in p
               for p in wellformed.problems(dataclasses.replace(k, body=bad)))
    narrow = rewrite(k.body, lambda s: (dataclasses.replace(s, n=128),) if isinstance(s, Fragment)
                      and s.name == "_c_0_0_early" else (s,))
    assert any("a wgmma 64x128 tile to a wgmma 64x96 one" in p
               for p in wellformed.problems(dataclasses.replace(k, body=narrow)))


def test_descriptor_loads_read_shared_memory():


    k = kernel(128, 256, 128, block=(128, 256, 64), stages=2)
    bad = rewrite(k.body, lambda s: (dataclasses.replace(s, path="elements"),)
                   if isinstance(s, FragmentLoad) and s.path == "descriptor" else (s,))
    assert any("wgmma moves tiles by 'descriptor'" in p for p in wellformed.problems(dataclasses.replace(k, body=bad)))
    assert all(f.family == "wgmma" for f in (s for s in _walk(k.body)) if isinstance(f, Fragment))
    assert any(isinstance(s, MbarrierArrive) and s.transaction_bytes == 128 * 64 * 2 + 64 * 256 * 2
               for s in _walk(k.body))


def _walk(body):
    from schedc.ir.walk import walk_statements

    return walk_statements(body)


# -- the sample ----------------------------------------------------------------------------------


def test_sample_functions_emulate_on_corner_blocks(tmp_path):
    """samples/hopper_matmul.py at full size: the first tile of two blocks of every function."""
    from tests.conftest import show_sample

    for _package, model, function, _source in show_sample("hopper_matmul"):
        (k,) = function.kernels
        last = tuple(n - 1 for n in k.grid)
        rng = np.random.default_rng(1)
        storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in k.params}
        result = emulate(k, storage, blocks=[(0, 0, 0), last], tiles=1)
        c = next(b for b in k.params if b.name == "C")
        A, B = (next(b for b in k.params if b.name == n) for n in "AB")
        rows = slice(0, 64)
        a = np.lib.stride_tricks.as_strided(storage["A"].astype(np.float64), A.shape, [s * 8 for s in A.strides])
        b = np.lib.stride_tricks.as_strided(storage["B"].astype(np.float64), B.shape, [s * 8 for s in B.strides])
        expected = storage["C"].reshape(c.shape)[rows, :64] + a[rows] @ b[:, :64]
        got = result.storage["C"].reshape(c.shape)[rows, :64]
        tolerance = 2.0 if A.dtype is F32 else 0.05
        if c.dtype is not F32:  # C rounded to its 16-bit type: half a unit in the last place
            tolerance += np.abs(expected).max() * 2.0 ** -{F16: 11, BF16: 8}[c.dtype]
        assert np.abs(got - expected).max() < tolerance, model.function


@pytest.mark.gpu
def test_sample_on_the_gpu(tmp_path):
    from schedc.verify import run_function

    path = build_sample("hopper_matmul", tmp_path)
    require_gpu()
    package = acc.load(path)
    for name in ("matmul_fp16_2048x1024x2048", "matmul_tf32_4096", "matmul_bf16_4096", "matmul_fp16_4096_f32c"):
        reports = run_function(package.functions[name], seed=3)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["partial_tiles", "four_warpgroups", "fp16_one_thread_issues",
                                  "column_major_b_fp16", "k_tile_of_two_chunks", "bf16_output_partial_tiles",
                                  "persistent", "persistent_one_thread_issues", "cluster", "cluster_persistent",
                                  "cluster_of_four_rows_partial_k", "ping_pong", "ping_pong_partial_tiles",
                                  "ping_pong_cluster", "three_teams", "partial_chunks", "partial_chunks_stored_only",
                                  "partial_chunks_float32_c", "partial_chunks_ping_pong", "k_stage_part_of_a_chunk"])
def test_plans_on_the_gpu(name, tmp_path):
    from schedc.verify import run_function

    (M, N, K), options = PLANS[name]
    package = acc.Package()
    package.add(*hopper_matmul.matmul(M, N, K, **options), base_name=name)
    path = package.build(name, format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    reports = run_function(acc.load(path).functions[name], seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_warpgroup_tiles_need_warpgroup_bindings():
    plan, args = hopper_matmul.matmul(256, 256, 256, block=(128, 128, 64))
    plan.bindings = {u: g for u, g in plan.bindings.items() if u.level != "warpgroup"}
    ii = plan.schedule.order[2]
    plan.bind({ii: acc.GridUnit.WARP_X})
    with pytest.raises(PlanError, match=r"M64xN128xK16_B1 is a warpgroup's tile: bind the loops over tiles to "
                                        r"WARPGROUP_X/WARPGROUP_Y, not WARP_X \(ii\)"):
        lower(plan, args)


def test_warpgroups_need_a_warpgroup_shape():
    import tilus_matmul

    plan, args = tilus_matmul.matmul(256, 256, 256, 1)
    plan.bindings = {u: g for u, g in plan.bindings.items() if u.level != "warp"}
    ii = plan.schedule.order[2]
    plan.bind({ii: acc.GridUnit.WARPGROUP_Y})
    with pytest.raises(PlanError, match=r"WARPGROUP_Y binds warpgroups, which issue wgmma tiles"):
        lower(plan, args)


def _generic_store_into_a_stage(fence: bool):
    """One consumer thread zeroes an element of the stage it is about to multiply, through the
    generic proxy (a plain store), with or without fence.proxy.async after it."""
    from schedc.ir.kernel import Binary, Const, Fence, Store, Var

    def change(s):
        if not (isinstance(s, MbarrierWait) and s.barrier == "full"):
            return (s,)
        store = Store("A_shared", (Var("stage"), Const(0), Const(0), Const(0)), Const(0.0))
        body = (store, Fence("proxy_async")) if fence else (store,)
        return (s, If(Binary("==", Var("threadIdx.x"), Const(0)), body))
    return _broken(change)


def test_generic_write_read_by_wgmma_without_the_proxy_fence():
    with pytest.raises(EmulationError, match=r"a wgmma \(the async proxy\) touches an element thread 0 wrote "
                                             r"through the generic proxy with no fence.proxy.async between"):
        emulate_broken(_generic_store_into_a_stage(fence=False))


def test_generic_write_then_proxy_fence_is_visible_to_wgmma():
    emulate_broken(_generic_store_into_a_stage(fence=True))


# -- consumer teams taking tiles in turn (warp_specialize(teams=2): ping-pong) ------------------


def _ping_pong(**options):
    (M, N, K), plan = PLANS["ping_pong"]
    return kernel(M, N, K, **{**plan, **options})


def test_teams_take_a_persistent_blocks_tiles_in_turn():
    k = _ping_pong()
    assert k.block == (384, 1, 1)  # two teams of one consumer warpgroup, and the producer
    consumers = next(s for s in k.body if isinstance(s, Roles)).roles[1]
    assert (consumers.name, consumers.threads, consumers.teams) == ("consumers", 256, 2)
    inits = {(s.barrier, s.index.value): s.count for s in walk_statements(k.body) if isinstance(s, MbarrierInit)}
    assert inits["empty", 0] == 128  # a stage's consumers are one team
    assert inits["turn", 0] == inits["turn", 1] == 128
    (work,) = [s for s in walk_statements(consumers.body) if isinstance(s, Loop) and s.var == "work"]
    team = WARPGROUP_INDEX  # a team is one warpgroup: its index, one value a warp
    assert (work.start, work.step) == (Binary("+", Var("blockIdx.x"), Binary("*", team, Const(5))), 10)


def test_the_warpgroup_index_is_one_value_a_warp():
    """The C++ takes the thread's warpgroup from the warp's first lane (a shuffle), so that what
    derives from it (the team's work items, the tile's offsets) stays in uniform registers."""
    from schedc.codegen.cuda import emit_kernel

    text = emit_kernel(_ping_pong())
    definition = "const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);"
    assert definition in text and text.index(definition) < text.index("// warp specialization")
    assert "for (int work = blockIdx.x + warpgroup * 5; " in text
    assert "threadIdx.x / 128" not in text.replace(definition, "")


def test_the_warpgroup_index_needs_blocks_of_whole_warpgroups():
    """Where a warp could hold threads of two warpgroups (a block not of whole warpgroups along
    x alone), no warpgroup index is defined: the IR check refuses a kernel that reads it."""
    k = _ping_pong()
    assert not [p for p in wellformed.problems(k) if "warpgroup" in p]
    for block in ((96, 4, 1), (384, 2, 1)):
        assert any("variable warpgroup is not defined" in p
                   for p in wellformed.problems(dataclasses.replace(k, block=block)))


def test_teams_wait_for_their_turn_and_hand_it_on():
    consumers = next(s for s in _ping_pong().body if isinstance(s, Roles)).roles[1]
    waits = [s for s in walk_statements(consumers.body) if isinstance(s, MbarrierWait) and s.barrier == "turn"]
    gives = [s for s in walk_statements(consumers.body) if isinstance(s, MbarrierArrive) and s.barrier == "turn"]
    item = Binary("/", Var("work"), Const(5))  # the block's work items before this one
    assert [(s.index, s.parity) for s in waits] == [
        (Binary("%", item, Const(2)), Binary("%", Binary("/", Binary("-", item, Const(1)), Const(2)), Const(2)))]
    assert [s.index for s in gives] == [Binary("%", Binary("+", item, Const(1)), Const(2))]


def test_check_says_the_teams_take_a_blocks_tiles_in_turn():
    from schedc.show import launch

    from .plans import compile_plan

    (M, N, K), options = PLANS["ping_pong"]
    model, k = compile_plan(*hopper_matmul.matmul(M, N, K, **options))
    assert "in groups of 2 rows; 2 teams of consumer warpgroups take a block's tiles in turn) of 384 threads" \
        in launch(model, k)


def test_teams_are_refused_without_a_persistent_grid():
    with pytest.raises(PlanError, match=r"warp_specialize\(teams=2\).*add plan.persistent\(\), or teams=1"):
        kernel(256, 512, 256, block=(128, 128, 64), teams=2)


def test_a_team_that_does_not_wait_for_its_turn_is_caught():
    """Without the turn, a team waits on a stage's full barrier while another team's use of the
    stage before is pending: its parity names that earlier phase."""
    k = _ping_pong()
    k = dataclasses.replace(k, body=rewrite(k.body, lambda s: () if isinstance(s, If) and any(
        isinstance(t, MbarrierWait) and t.barrier == "turn" for t in s.body) else (s,)))
    with pytest.raises(EmulationError, match="team 1 of the consumers role"):
        emulate_broken(k)


def test_the_ping_pong_kernel_is_the_golden_source(update_golden):
    """The generated part of the ping-pong kernel's .cu (tests/golden/hopper_ping_pong.cu): the
    teams' persistent loop, their turn waits and hand-overs, one team's stage frees."""
    from pathlib import Path

    from schedc.codegen.cuda import without_runtime

    source = without_runtime(emit_source([_ping_pong()], "// hopper ping-pong"))
    path = Path(__file__).parent / "golden" / "hopper_ping_pong.cu"
    if update_golden:
        path.write_text(source)
    assert source == path.read_text(), f"the ping-pong kernel differs from {path}; if intended, run pytest --update-golden"
    assert "for (int work = blockIdx.x + warpgroup * 5; work < 12; work += 10) {" in source
    assert "schedc::mbarrier_wait(&turn[work / 5 % 2], (work / 5 - 1) / 2 % 2);" in source


# -- 8-bit integers on wgmma -----------------------------------------------------------------


def _integer(operand, size=(256, 256, 512), output=acc.ScalarType.int32, block=(128, 128, 128)):
    return hopper_matmul.matmul(*size, operand=operand, output=output, block=block, stages=2,
                                b_layout=acc.Array.Layout.LAST_MAJOR, persistent={"group": 2})


@pytest.mark.parametrize("operand", [acc.ScalarType.int8, acc.ScalarType.uint8])
def test_wgmma_multiplies_8_bit_integers_into_int32_exactly(operand):
    model, function = compile_function_plan(*_integer(operand, size=(192, 384, 320)))
    reports = verify.emulate_function(model, function, None, seed=5)
    assert [r.array for r in reports] == ["C"] and all(r.passed and r.max_abs_error == 0 for r in reports), \
        "\n".join(map(str, reports))


def test_the_integer_wgmma_instruction_is_s32_k32_without_scales(tmp_path):
    path = build(*_integer(acc.ScalarType.int8), "s8_text", tmp_path)
    text = (path.parent / "s8_text.cu").read_text()
    assert "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " in text
    assert '"%64, %65, p;' in text  # scale-d only: the integer form takes no imm-scale-a/b
    assert "void schedc_wgmma_m64n128k32_int32_s8_00(int (&d)[64]," in text
    assert '"+r"(d[0])' in text


def test_integer_wgmma_takes_only_the_widths_ptxas_takes():
    """ptxas refuses m64n40k32.s32.s8 (8-bit integers take n of 8, 16, 24 and multiples of 16),
    though 8-bit floats take every multiple of 8: the plan is refused before compiling."""
    with pytest.raises(PlanError, match=r"int8 operands need one of the shapes .*M64xN\{8, 16, 24, 32..256 by "
                                        r"16\}xK32_B1, not M64xN40xK32_B1"):
        compile_function_plan(*_integer(acc.ScalarType.int8, size=(128, 80, 128), block=(64, 40, 64)))


def test_int32_fragments_of_8_bit_integers_do_not_convert_into_a_float32_c():
    with pytest.raises(CacheError, match="element_type int32 for float32 C: fragments convert between floating-point "
                                         "types only"):
        compile_function_plan(*_integer(acc.ScalarType.int8, output=acc.ScalarType.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("operand", [acc.ScalarType.int8, acc.ScalarType.uint8])
def test_integer_wgmma_products_verify_on_the_gpu(tmp_path, operand):
    fn = acc.load(build(*_integer(operand, size=(384, 256, 640)), "s8_gemm", tmp_path)).s8_gemm
    require_gpu()
    reports = verify.run_function(fn, seed=2)
    assert reports and all(r.passed and r.max_abs_error == 0 for r in reports), "\n".join(map(str, reports))
