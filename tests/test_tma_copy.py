"""engine=TMA for tiles the block's threads read (sm_90): one thread asks the tensor memory
accelerator for the whole tile, every thread waits on the tile's mbarrier (its phase counted per
thread), a barrier before the next fill. Emulated against numpy, compiled for sm_90a, refused
where TMA cannot copy the tile, and hand-broken kernels caught by the emulator."""

from __future__ import annotations

import dataclasses
import runpy

import pytest

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.codegen.emulate import EmulationError
from schedc.errors import CacheError
from schedc.ir.kernel import Barrier, MbarrierWait, TmaLoad
from schedc.ir.walk import walk_statements
from schedc.package.compile import arch_for, nvrtc_compile
from schedc.verify import emulate_function

from .conftest import ROOT, require_gpu
from .kit import emulate_broken, rewrite
from .plans import compile_plan, tensor_matmul

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
F16, F32 = acc.ScalarType.float16, acc.ScalarType.float32
TMA = acc.CopyEngine.TMA


def tiled_copy_tma(M, N):
    return runpy.run_path(str(ROOT / "samples" / "tiled_copy.py"), run_name="schedc_test")["tiled_copy"](
        M, N, engine=TMA)


def row_blocks(M, N, tile=(32, 64), dtype=F32, **cache):
    """B = A + A: blocks own columns of tiles, each walks its column's row tiles in a loop,
    refilling the cache (the phase counter toggles). Threads: 2 rows of one per column of the
    tile, each over half the tile's rows."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))
    nest = acc.Nest(shape=(M, N))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A[i, j] + A[i, j]

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, tile[0]), schedule.split(j, tile[1])
    iii = schedule.split(ii, max(tile[0] // 2, 1))
    schedule.reorder(j, i, ii, jj, iii)
    plan = schedule.create_plan(H100)
    plan.bind({j: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y, jj: acc.GridUnit.THREAD_X})
    plan.cache(A, index=iii, location=acc.MemorySpace.SHARED, engine=TMA, **cache)
    return plan, (A, B)


def _emulated(plan, args, name="f"):
    model, kernel = compile_plan(plan, args, name=name)
    reports = emulate_function(model, kernel, blocks=None, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    return kernel


@pytest.mark.parametrize("M, N", [(128, 256), (200, 136)])  # whole tiles; partial ones (zeros past the array)
def test_tiled_copy_sample_with_tma(M, N):
    kernel = _emulated(*tiled_copy_tma(M, N))
    copies = [s for s in walk_statements(kernel.body) if isinstance(s, TmaLoad)]
    assert len(copies) == 1 and [v.spec.box for v in kernel.values] == [(64, 128)]
    assert any(isinstance(s, MbarrierWait) for s in walk_statements(kernel.body))
    source = emit_source([kernel], "// tma copy")
    assert arch_for("sm_90", [kernel]) == "sm_90a"
    ptx = nvrtc_compile(source, "tma_copy", "sm_90a").ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx


@pytest.mark.parametrize("dtype, tile", [(F32, (32, 64)), (F16, (16, 256)), (acc.ScalarType.int8, (8, 32))])
def test_refills_in_a_loop_count_their_phases(dtype, tile):
    _emulated(*row_blocks(96, 256, tile, dtype))


def test_column_major_array():
    plan, (A, B) = row_blocks(64, 128)
    A2 = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(64, 128), layout=acc.Array.Layout.LAST_MAJOR)
    nest = acc.Nest(shape=(64, 128))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i, j] = A2[i, j] + A2[i, j]

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, 32), schedule.split(j, 64)
    iii = schedule.split(ii, 16)
    schedule.reorder(j, i, ii, jj, iii)
    plan = schedule.create_plan(H100)
    plan.bind({j: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y, jj: acc.GridUnit.THREAD_X})
    plan.cache(A2, index=iii, location=acc.MemorySpace.SHARED, engine=TMA)
    _emulated(plan, (A2, B))


def _tensor_with_tma():
    plan, args = tensor_matmul(64, 64, 64)
    plan.cache(args[0], index=plan.schedule.order[-4], location=acc.MemorySpace.SHARED, engine=TMA)
    return plan, args


@pytest.mark.parametrize("make, message", [
    (lambda: row_blocks(96, 256, stages=2), r"one tile at a time \(stages=1"),
    (lambda: row_blocks(96, 256, double_buffer=True), r"one tile at a time"),
    (lambda: row_blocks(96, 100, (32, 50), F16), r"rows are 200 bytes apart; TMA needs a multiple of 16"),
    (lambda: row_blocks(96, 256, (32, 4), F16), r"the tile's rows are 4 element\(s\) \(8 bytes\)"),
    (lambda: row_blocks(1024, 64, (512, 4)), r"the tile is 512x4; a TMA box has at most 256"),
    (_tensor_with_tma, "wmma and mma.sync read padded or XOR-swizzled tiles"),
])
def test_refusals(make, message):
    with pytest.raises(CacheError, match=message):
        compile_plan(*make())


def _broken(change):
    _, kernel = compile_plan(*row_blocks(96, 256))
    return dataclasses.replace(kernel, body=rewrite(kernel.body, change))


def test_reading_before_waiting_for_the_tile():
    kernel = _broken(lambda s: () if isinstance(s, MbarrierWait) else (s,))
    with pytest.raises(EmulationError, match=r"reads an element a TMA copy brings before it has waited for the "
                                             r"phase of A_full\[0\]"):
        emulate_broken(kernel)


def test_refilling_while_threads_still_read_the_previous_tile():
    kernel = _broken(lambda s: () if isinstance(s, Barrier) and "no longer read" in s.comment else (s,))
    with pytest.raises(EmulationError, match="a TMA copy issued by thread 0 overwrites an element .* read since the "
                                             "last barrier"):
        emulate_broken(kernel)


@pytest.mark.gpu
def test_on_the_gpu(tmp_path):
    from schedc.verify import run_function

    package = acc.Package()
    package.add(*tiled_copy_tma(200, 136), base_name="copy")
    package.add(*row_blocks(96, 256, (16, 256), F16), base_name="rows")
    path = package.build("tma_copy", format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path))
    require_gpu()
    functions = acc.load(path).functions
    for name in ("copy", "rows"):
        reports = run_function(functions[name], seed=3)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
