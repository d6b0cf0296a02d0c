"""Shared memory in the emulator: block copies (sync and cp.async), barriers, and the race
detector on deliberately broken kernels."""

from __future__ import annotations

import numpy as np
import pytest

from schedc.codegen.emulate import EmulationError, emulate
from schedc.ir.kernel import (
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
    Const,
    Fragment,
    FragmentLoad,
    FragmentStore,
    If,
    Kernel,
    Load,
    Loop,
    SharedBuffer,
    Store,
    Var,
)
from schedc.ir.types import ScalarType

F32 = ScalarType.float32
T = 32  # threads
TID = Var("threadIdx.x")


def _buffers():
    return (Buffer("X", F32, (4, T), (T, 1), "param", "input"), Buffer("Y", F32, (128,), (1,), "param", "output"))


def reversed_tiles(barrier_after_copy=True, barrier_after_use=True, asynchronous=False, wait=0,
                   stages=1):
    """For each 32-element tile of X: copy it to shared memory, then each thread writes the
    mirrored element to Y (so every thread reads what another thread copied)."""
    slot = Binary("%", Binary("/", Var("k"), Const(T)), Const(stages))
    tile = Binary("/", Var("k"), Const(T))
    copy = BlockCopy("X", (tile, Const(0)), "S", (slot, Const(0)), (1, T), vector=4, asynchronous=asynchronous)
    body = [copy]
    if asynchronous:
        body += [AsyncCommit(), AsyncWait(wait)]
    if barrier_after_copy:
        body.append(Barrier())
    mirrored = Binary("-", Const(T - 1), TID)
    body.append(Store("Y", (Binary("+", Var("k"), TID),), Load("S", (slot, mirrored), F32)))
    if barrier_after_use:
        body.append(Barrier())
    shared = (SharedBuffer("S", F32, (stages, T), (T, 1)),)
    return Kernel("k__gpu__", _buffers(), (1, 1, 1), (T, 1, 1), (Loop("k", Const(0), Const(128), T, tuple(body)),),
                  dynamic_shared_bytes=stages * T * 4, shared=shared)


def run(kernel):
    x = np.arange(128, dtype=np.float32)
    return emulate(kernel, {"X": x, "Y": np.full(128, np.nan, np.float32)}), x


def expected(x):
    return x.reshape(4, T)[:, ::-1].ravel()


def test_a_correct_staged_copy():
    result, x = run(reversed_tiles())
    assert np.array_equal(result.storage["Y"], expected(x))


def test_a_correct_async_copy():
    result, x = run(reversed_tiles(asynchronous=True, wait=0))
    assert np.array_equal(result.storage["Y"], expected(x))


def test_missing_barrier_after_the_copy():
    # vectors of 4: element 31 was copied by thread 7, and thread 0 reads it
    with pytest.raises(EmulationError, match=r"race: thread 0 reads what thread 7 wrote without a barrier between at block \(0, 0, 0\), thread\(s\) \[7, 0\], S\[31\], iteration \(k=0\)"):
        run(reversed_tiles(barrier_after_copy=False))


def test_missing_barrier_before_the_next_copy():
    """Without the second barrier, the next tile's copy overwrites data another thread read."""
    with pytest.raises(EmulationError, match=r"race: thread 0 writes an element thread 31 read without a barrier between at .*S\[0\], iteration \(k=32\)"):
        run(reversed_tiles(barrier_after_use=False))


def test_wait_count_off_by_one():
    with pytest.raises(EmulationError, match=r"async: thread 0 reads an element whose asynchronous copy \(group 0\) has not been waited for at .*S\[31\], iteration \(k=0\)"):
        run(reversed_tiles(asynchronous=True, wait=1))


def test_async_copy_into_a_buffer_still_being_read():
    with pytest.raises(EmulationError, match=r"race: an asynchronous copy by thread 0 overwrites an element thread 31 read since the last barrier at .*S\[0\], iteration \(k=32\)"):
        run(reversed_tiles(asynchronous=True, barrier_after_use=False))


def test_barrier_in_divergent_code():
    body = (If(Binary("<", TID, Const(16)), (Barrier(),)),)
    kernel = Kernel("k__gpu__", _buffers(), (1, 1, 1), (T, 1, 1), body)
    with pytest.raises(EmulationError, match=r"divergence: Barrier needs every thread of the block"):
        run(kernel)


def test_tile_read_of_data_other_warps_copied():
    """Two warps copy a 16x16 tile to shared memory; each warp then loads it as a fragment:
    without a barrier the other warp's half is a race, with one it is fine."""
    def kernel(barrier: bool):
        src = Buffer("X", F32, (16, 16), (16, 1), "param", "input")
        dst = Buffer("Y", F32, (2, 16, 16), (256, 16, 1), "param", "output")
        body = [BlockCopy("X", (Const(0), Const(0)), "S", (Const(0), Const(0)), (16, 16), vector=4)]
        if barrier:
            body.append(Barrier())
        warp = Binary("/", TID, Const(32))
        body += [Fragment("c", "accumulator", 16, 16, 16, F32, "float32"),
                 FragmentLoad("c", "S", (Const(0), Const(0)), 16, 1),
                 FragmentStore("Y", (warp, Const(0), Const(0)), "c", 16, 1)]
        return Kernel("k__gpu__", (src, dst), (1, 1, 1), (64, 1, 1), tuple(body),
                      shared=(SharedBuffer("S", F32, (16, 16), (16, 1)),))

    x = np.arange(256, dtype=np.float32)
    ok = emulate(kernel(True), {"X": x, "Y": np.zeros(512, np.float32)})
    assert np.array_equal(ok.storage["Y"][:256], x) and np.array_equal(ok.storage["Y"][256:], x)
    with pytest.raises(EmulationError, match=r"race: thread 0 reads what thread 32 wrote without a barrier between"):
        emulate(kernel(False), {"X": x, "Y": np.zeros(512, np.float32)})


# -- the same kernels in CUDA: compiled here, run on the GPU when there is one ---------------------


def _compile(kernel):
    from schedc.codegen.cuda import emit_source
    from schedc.package.compile import nvrtc_compile

    return nvrtc_compile(emit_source([kernel], "// test"), "shared_test", "sm_90")


def _gpu_run(kernel, cubin: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from schedc.package import driver

    module = driver.Module(cubin)
    handle = module.function(kernel.name, kernel.dynamic_shared_bytes)
    memories = {}
    for b in kernel.params:
        memories[b.name] = driver.DeviceMemory(b.size * 4)
        memories[b.name].upload(inputs[b.name])
    driver.launch(handle, kernel.grid, kernel.block, kernel.dynamic_shared_bytes,
                  driver.LaunchArgs([memories[b.name].pointer for b in kernel.params]))
    driver.device().synchronize()
    out = {}
    for b in kernel.params:
        out[b.name] = np.empty(b.size, np.float32)
        memories[b.name].download(out[b.name])
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("asynchronous", [False, True])
def test_staged_copies_compile_and_run(asynchronous):
    from .conftest import require_gpu

    kernel = reversed_tiles(asynchronous=asynchronous, stages=2 if asynchronous else 1)
    compiled = _compile(kernel)
    assert "bar.sync" in compiled.ptx
    assert ("cp.async.cg.shared.global" in compiled.ptx) == asynchronous
    assert ("cp.async.wait_group" in compiled.ptx) == asynchronous
    x = np.arange(128, dtype=np.float32)
    inputs = {"X": x, "Y": np.full(128, np.nan, np.float32)}
    assert np.array_equal(emulate(kernel, inputs).storage["Y"], expected(x))
    require_gpu()
    assert np.array_equal(_gpu_run(kernel, compiled.cubin, inputs)["Y"], expected(x))
