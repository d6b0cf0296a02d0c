"""C's tiles stored by TMA in wgmma plans: each consumer warpgroup writes a column chunk of its
accumulator into one of its two swizzled slots, fences it for the async proxy, meets at its named
barrier, and one thread stores the slot as a box. Emulated against numpy (partial tiles clipped
by the box), compiled for sm_90a, the direct stores kept where the slots do not fit or C's rows
are not contiguous, and hand-broken kernels caught by the emulator. Where two slots a warpgroup
fit, C comes in by TMA too, a chunk per slot (refilled once its store has read it), and is added
after the products."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import EmulationError
from schedc.ir.kernel import (
    Binary,
    BulkWait,
    Const,
    Fence,
    FragmentAdd,
    FragmentLoad,
    FragmentStore,
    If,
    MbarrierWait,
    NamedBarrier,
    TmaLoad,
    TmaStore,
)
from schedc.ir.walk import walk_statements
from schedc.lower.wellformed import problems
from schedc.package.compile import nvrtc_compile

from .conftest import require_gpu
from .kit import BF16, F16, F32, emulate_broken, kernel, rewrite, run

COL = acc.Array.Layout.LAST_MAJOR
SET = (acc.MMAFragmentOp.SET, 0.0)  # the products start from zero: C is not read, only stored


def _of(k, kind):
    return [s for s in walk_statements(k.body) if isinstance(s, kind)]


@pytest.mark.parametrize("output, chunk", [(F32, 32), (F16, 64)])
def test_chunks_of_128_byte_rows_through_two_slots_per_warpgroup(output, chunk):
    k = kernel(256, 512, 256, output=output, prologue=SET)  # 128x256 blocks: two 64x256 consumer warpgroups
    out = next(b for b in k.shared if b.name == "C_out")
    assert (out.shape, out.swizzle, out.align) == ((2, 2, 64, chunk), 128, 1024)
    assert next(v.spec for v in k.values if v.name == "C_map").box == (64, chunk)
    stores = _of(k, TmaStore)
    assert len(stores) == 256 // chunk  # every chunk of the warpgroup's 256 columns
    assert [s.source_origin[1] for s in stores] == [Const(n % 2) for n in range(len(stores))]
    windows = [s.columns for s in _of(k, FragmentStore)]
    assert windows == [(c, c + chunk) for c in range(0, 256, chunk)]
    waits = [(s.pending, s.read) for s in _of(k, BulkWait)]
    assert waits == [(0, True)] + [(1, True)] * (len(stores) - 1) + [(0, False)]  # last: before the exit


def test_ptx_stores_by_tma_and_the_source_is_deterministic():
    k = kernel(256, 512, 256, output=F16)
    source = emit_source([k], "// store")
    ptx = nvrtc_compile(source, "store", "sm_90a").ptx
    for instruction in ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", "cp.async.bulk.commit_group",
                        "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta", "bar.sync"):
        assert instruction in ptx, instruction
    assert emit_source([kernel(256, 512, 256, output=F16)], "// store") == source


SHAPES = [
    ((200, 304, 136), {"block": (128, 128, 64), "output": F16}),  # boxes clipped at C's edges
    ((136, 200, 64), {"block": (128, 128, 64)}),  # float32 C, partial along both
    ((128, 96, 64), {"block": (128, 96, 64), "output": F16, "b_layout": COL}),  # 192-byte rows: stored directly
    ((128, 32, 64), {"block": (128, 32, 64), "output": F16}),  # 32 columns of fp16: one 64-byte box
]


def _close(shape, options, got, expected) -> bool:
    """Emulated C against numpy's, within the operands' and C's rounding."""
    tolerance = 2e-2 * np.sqrt(shape[2]) if options.get("operand") is F32 else 1e-3
    if options.get("output") in (F16, BF16):
        tolerance += np.abs(expected).max() * 2.0 ** -{F16: 11, BF16: 8}[options["output"]]
    return np.abs(got - expected).max() < tolerance


def _on_the_gpu(shape, options, tmp_path, seed: int) -> None:
    from schedc.verify import run_function

    from .kit import hopper_matmul
    package = acc.Package()
    package.add(*hopper_matmul.matmul(*shape, **options), base_name="mm")
    path = package.build("mm", format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    reports = run_function(acc.load(path).functions["mm"], seed=seed)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("shape, options", SHAPES)
def test_emulated_results_match_numpy(shape, options):
    k = kernel(*shape, **options)
    got, expected, written = run(k)
    assert written.all()
    assert _close(shape, options, got, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, options", SHAPES)
def test_on_the_gpu(shape, options, tmp_path):
    _on_the_gpu(shape, options, tmp_path, seed=3)


def test_a_tile_of_96_fp16_columns_is_a_swizzled_box_and_a_tail_box():
    """192-byte rows: a 128-byte swizzled chunk, then 32 columns through the unswizzled tail box;
    no thread stores C."""
    k = kernel(128, 96, 64, block=(128, 96, 64), output=F16, b_layout=COL)
    assert [s.tensor_map for s in _of(k, TmaStore)] == ["C_map", "C_tail_map"]
    assert not [s for s in _of(k, FragmentStore) if s.buffer == "C"]
    got, expected, _ = run(k)
    assert np.abs(got - expected).max() < 1e-2 * np.abs(expected).max()


def test_rows_no_tma_box_takes_are_stored_directly():
    """C's rows 200 bytes apart (N = 100 float16): no tensor map describes them, the threads store."""
    k = kernel(128, 100, 64, block=(128, 96, 64), output=F16, b_layout=COL)
    assert not _of(k, TmaStore) and _of(k, FragmentStore)


def test_a_tile_of_32_fp16_columns_is_one_64_byte_box():
    k = kernel(128, 32, 64, block=(128, 32, 64), output=F16)
    out = next(b for b in k.shared if b.name == "C_out")
    assert (out.shape[-1], out.swizzle) == (32, 64)


def test_direct_stores_where_the_slots_do_not_fit():
    """Four consumer warpgroups (64x128 tiles of a 128x256 block) need 4 x 16 KB of slots: beside
    4 stages of 48 KB they do not fit the 227 KB, beside 3 they do."""
    k = kernel(256, 512, 256, block=(128, 256, 64), warpgroup_n=128, stages=4)
    fits = kernel(256, 512, 256, block=(128, 256, 64), warpgroup_n=128, stages=3)
    assert not _of(k, TmaStore) and len(_of(fits, TmaStore)) == 128 // 32
    got, expected, _ = run(k)
    assert np.abs(got - expected).max() < 1e-3


# -- the race detector on hand-broken kernels ---------------------------------------------------


def _broken(change, **options):
    """The two-slot store path (C not read), hand-broken."""
    k = kernel(128, 256, 128, block=(128, 256, 64), stages=4, output=F16, prologue=SET, **options)
    return dataclasses.replace(k, body=rewrite(k.body, change))


def test_store_of_a_slot_without_the_proxy_fence():
    k = _broken(lambda s: () if isinstance(s, Fence) and s.kind == "proxy_async" else (s,))
    with pytest.raises(EmulationError, match=r"a TMA store \(the async proxy\) touches an element thread \d+ wrote "
                                             r"through the generic proxy with no fence.proxy.async"):
        emulate_broken(k)


def test_store_of_a_slot_before_the_warpgroup_met():
    k = _broken(lambda s: () if isinstance(s, NamedBarrier) and "written" in s.comment else (s,))
    with pytest.raises(EmulationError, match=r"a TMA store issued by thread 0 reads what thread \d+ wrote without "
                                             "a barrier between"):
        emulate_broken(k)


def test_slot_rewritten_while_its_store_may_still_read_it():
    k = _broken(lambda s: (dataclasses.replace(s, pending=2),) if isinstance(s, BulkWait) and s.pending == 1
                else (s,))
    with pytest.raises(EmulationError, match=r"overwrites an element a TMA store may still be reading"):
        emulate_broken(k)


def test_slot_rewritten_before_the_issuer_told_the_warpgroup():
    k = _broken(lambda s: () if isinstance(s, NamedBarrier) and "free" in s.comment else (s,))
    with pytest.raises(EmulationError, match=r"thread \d+ writes an element thread 0 read without a barrier"):
        emulate_broken(k)


def test_block_ending_with_stores_unfinished():
    def change(s):
        if isinstance(s, If) and any(isinstance(b, BulkWait) and not b.read for b in s.body):
            return ()
        return (s,)
    with pytest.raises(EmulationError, match=r"the block ends while TMA stores issued by thread 0 may be "
                                             "unfinished"):
        emulate_broken(_broken(change))


def test_named_barrier_with_too_few_threads_is_a_deadlock():
    k = _broken(lambda s: (dataclasses.replace(s, threads=256),) if isinstance(s, NamedBarrier) else (s,))
    with pytest.raises(EmulationError, match=r"named barrier 1 to count 256 threads \(128 counted\)"):
        emulate_broken(k)


def test_the_ir_verifier_checks_tma_stores_and_named_barriers():
    k = kernel(128, 256, 128, block=(128, 256, 64), stages=2, output=F16)
    assert problems(k) == []

    def change(s):
        if isinstance(s, TmaStore):
            return (dataclasses.replace(s, source="C_out2"),)
        if isinstance(s, NamedBarrier):
            return (dataclasses.replace(s, id=Const(0), threads=48),)
        if isinstance(s, FragmentStore) and s.columns:
            return (dataclasses.replace(s, columns=(4, 12)),)
        return (s,)
    found = " ".join(problems(dataclasses.replace(k, body=rewrite(k.body, change))))
    for text in ("C_out2", "named barrier 0: ids are 1..15", "named barrier of 48 threads",
                 "columns 4..11 are not one run"):
        assert text in found, text


# -- C's tiles loaded by TMA into the slots they leave from ----------------------------------------


def test_c_is_copied_into_a_slot_per_chunk_when_the_whole_tile_fits():
    """fp16 C, 128x256 blocks: beside 3 stages of 48 KB the two warpgroups' 64x256 tiles (32 KB
    each) fit; one thread per warpgroup copies its four 64x64 chunks at the tile's start, each
    into its slot with its own barrier, and the products start from zero."""
    k = kernel(256, 512, 256, output=F16, stages=3)
    out = next(b for b in k.shared if b.name == "C_out")
    assert out.shape == (2, 4, 64, 64)
    assert next(b for b in k.shared if b.name == "C_full").shape == (8,)
    loads = [s for s in _of(k, TmaLoad) if s.tensor_map == "C_map"]
    assert [s.target_origin[1] for s in loads] == [Const(n) for n in range(4)]
    assert [s.columns for s in _of(k, FragmentAdd)] == [(c, c + 64) for c in range(0, 256, 64)]
    assert [s.columns for s in _of(k, FragmentLoad) if s.buffer == "C_out"] == [(c, c + 64) for c in range(0, 256, 64)]
    assert not any(s.buffer == "C" for s in _of(k, FragmentLoad))  # no thread reads C from global memory
    assert [(s.pending, s.read) for s in _of(k, BulkWait)] == [(0, True), (0, False)]


def test_c_is_refilled_through_two_slots_beside_four_stages():
    """Beside 4 stages only two 64x64 slots a warpgroup fit: chunks 0 and 1 are copied at the
    tile's start; once chunk j's store has read its slot, chunk j + 2 is copied into it."""
    k = kernel(256, 512, 256, output=F16, stages=4)
    assert next(b for b in k.shared if b.name == "C_out").shape == (2, 2, 64, 64)
    loads = [s for s in _of(k, TmaLoad) if s.tensor_map == "C_map"]
    assert [s.target_origin[1] for s in loads] == [Const(n % 2) for n in range(4)]
    assert [s.coords[1] for s in loads[1:]] == [Binary("+", loads[0].coords[1], Const(64 * n)) for n in (1, 2, 3)]
    assert [(s.pending, s.read) for s in _of(k, BulkWait)] == [(0, True)] * 3 + [(0, False)]
    assert [s.parity for s in _of(k, MbarrierWait) if s.barrier == "C_full"] == [Const(n // 2) for n in range(4)]
    assert not any(s.buffer == "C" for s in _of(k, FragmentLoad))


def test_ptx_copies_c_by_tma():
    """Beside 3 or 4 stages C comes in by TMA and its pairs of fp16 are read from the slots; with
    a prologue op the threads load it from global memory."""
    def ptx(**options):
        return nvrtc_compile(emit_source([kernel(256, 512, 256, output=F16, **options)], "// c"), "c",
                             "sm_90a").ptx
    copy = "cp.async.bulk.tensor.2d.shared::cluster.global"
    threads = ptx(stages=4, prologue=(acc.MMAFragmentOp.SCALE, 2.0))
    for loaded in (ptx(stages=3), ptx(stages=4)):
        assert loaded.count(copy) > threads.count(copy)
        assert "ld.shared.v2.u16" in loaded and "ld.global" not in loaded
    assert "ld.global" in threads


LOADED = [
    ((200, 304, 136), {"block": (128, 128, 64), "output": F16}),  # boxes zero-filled and clipped at C's edges
    ((136, 200, 64), {"block": (128, 128, 64), "stages": 2}),  # float32 C, partial along both
    ((384, 512, 192), {"block": (128, 128, 64), "stages": 3, "output": BF16, "operand": BF16,
                       "persistent": {"blocks": 5, "group": 2}}),  # a block's later tiles: the barrier's parity
    ((256, 256, 128), {"block": (128, 256, 64), "warpgroup_n": 128, "stages": 2, "output": F16}),  # 4 warpgroups
    ((256, 512, 256), {"output": F16, "stages": 3, "specialize": False}),  # thread 0 copies the ring too
    ((512, 512, 192), {"block": (128, 128, 64), "stages": 3, "output": F16, "cluster": 2,
                       "persistent": {"blocks": 4, "group": 2}}),
    ((256, 256, 128), {"block": (128, 128, 64), "output": F16, "epilogue": (acc.MMAFragmentOp.SCALE, -0.5)}),
    ((256, 256, 128), {"block": (128, 128, 64), "epilogue": (acc.MMAFragmentOp.ReLU, 0.0)}),
    ((256, 256, 128), {"operand": F32, "block": (128, 128, 32), "b_layout": COL, "stages": 3}),  # tf32
    ((384, 512, 128), {"output": F16, "stages": 4, "persistent": {"blocks": 2}}),  # two slots refilled, 3 tiles
    ((256, 512, 128), {"stages": 3, "persistent": {"blocks": 1}}),  # float32 C: 4 slots of its 8 chunks
]


def _expected(options, c):
    op, arg = options.get("epilogue") or (acc.MMAFragmentOp.NONE, 0.0)
    if op is acc.MMAFragmentOp.SCALE:
        return c * arg
    if op is acc.MMAFragmentOp.ReLU:
        return np.maximum(c, 0)
    return c


@pytest.mark.parametrize("shape, options", LOADED)
def test_c_loaded_by_tma_matches_numpy(shape, options):
    k = kernel(*shape, **options)
    assert [s for s in _of(k, TmaLoad) if s.tensor_map == "C_map"], "C is loaded by TMA"
    got, expected, written = run(k)
    assert written.all()
    assert _close(shape, options, got, _expected(options, expected))


@pytest.mark.gpu
@pytest.mark.parametrize("shape, options", LOADED)
def test_c_loaded_by_tma_on_the_gpu(shape, options, tmp_path):
    _on_the_gpu(shape, options, tmp_path, seed=4)


def _broken_load(change, **options):
    k = kernel(384, 512, 128, **{"block": (128, 128, 64), "stages": 3, "output": F16,
                                  "persistent": {"blocks": 2}, **options})
    return dataclasses.replace(k, body=rewrite(k.body, change))


def test_c_read_before_its_copy_landed():
    k = _broken_load(lambda s: () if isinstance(s, MbarrierWait) and s.barrier == "C_full" else (s,))
    with pytest.raises(EmulationError, match=r"reads an element a TMA copy brings before it has waited for the "
                                             r"phase of C_full\[\d\]"):
        emulate_broken(k)


def test_c_copied_while_the_tile_befores_store_may_read_its_slot():
    k = _broken_load(lambda s: () if isinstance(s, BulkWait) and s.read else (s,))
    with pytest.raises(EmulationError, match=r"overwrites an element a TMA store may still be reading"):
        emulate_broken(k)


def test_c_waited_for_with_the_wrong_parity_deadlocks():
    k = _broken_load(lambda s: (dataclasses.replace(s, parity=Const(1)),)
                     if isinstance(s, MbarrierWait) and s.barrier == "C_full" else (s,))
    with pytest.raises(EmulationError, match=r"C_full\[\d\] to complete its phase of parity 1"):
        emulate_broken(k)


def test_windows_are_checked_by_the_ir_verifier():
    k = kernel(256, 512, 256, output=F16, stages=3)
    assert problems(k) == []

    def change(s):
        if isinstance(s, FragmentAdd):
            return (dataclasses.replace(s, columns=(0, 300)),)
        if isinstance(s, FragmentLoad) and s.buffer == "C_out":
            return (dataclasses.replace(s, row_stride=256, columns=(4, 12)),)
        return (s,)
    found = " ".join(problems(dataclasses.replace(k, body=rewrite(k.body, change))))
    for text in ("add of _c_0_0: columns 0..299 of a wgmma accumulator 256-column tile",
                 "load of C_in from the swizzled C_out", "load of C_in: columns 4..11 are not one run"):
        assert text in found, text


def test_slots_filled_an_odd_number_of_times_a_tile(monkeypatch):
    """float32 C of a 64x192 warpgroup tile: six chunks; where only two slots a warpgroup fit,
    each slot is filled three times a tile, so its barrier's parity alternates from one tile to
    the next (``(tile + j // slots) % 2``): one resident block over four tiles, emulated."""
    from schedc import targets

    from .kit import hopper_matmul

    small = dataclasses.replace(hopper_matmul.target.spec, shared_memory_max=120000)  # 2 stages and 2 slots
    monkeypatch.setattr(hopper_matmul.target, "spec", small)
    monkeypatch.setitem(targets.MODELS, hopper_matmul.target.model, small)
    k = kernel(256, 384, 128, block=(128, 192, 64), stages=2, persistent={"blocks": 1})
    assert next(b for b in k.shared if b.name == "C_out").shape == (2, 2, 64, 32)
    parities = [s.parity for s in _of(k, MbarrierWait) if s.barrier == "C_full"]
    assert len(parities) == 6 and all(isinstance(p, Binary) for p in parities)
    got, expected, written = run(k)
    assert written.all() and np.abs(got - expected).max() < 1e-3
