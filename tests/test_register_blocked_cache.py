"""SHARED caches inside register blocking: a warp holds several tiles of C (``iii``, ``jjj``
unrolled into fragments) and A or B is cached at a loop inside those (the tensorized tile, or a
blocked loop). The blocked loops have no loop of their own to fill the cache in, so one fill
holds every fragment's tile, and each fragment reads its own part of it."""

from __future__ import annotations

import numpy as np
import pytest

import schedc as acc
from schedc.codegen.cuda import emit_source
from schedc.ir.kernel import Fragment, FragmentLoad
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile
from schedc.verify import run_function

from .conftest import require_gpu
from .kit import F16, lower, run
from .plans import H100, REGISTERS, build

MMA_SYNC, WMMA = acc.Instruction.MMA_SYNC, acc.Instruction.WMMA
G = H100.GridUnit


def blocked_plan(cached=("A",), at="iiii", fragments=(2, 2), instruction=MMA_SYNC, sizes=(128, 128, 64),
                 pipeline=None):
    """C += A @ B in float16 (float32 C) on 2 x 2 warps, each holding ``fragments`` 16x16 tiles
    of C in fragments across k (``iii = split(ii, 32)`` then ``tile({iii: 16, ...})`` for 2 x 2),
    the ``cached`` operands in SHARED at loop ``at`` with ``pipeline`` (cache arguments)."""
    M, N, K = sizes
    A = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(M, K))
    B = acc.Array(role=acc.Role.INPUT, element_type=F16, shape=(K, N))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    s = nest.create_schedule()
    mma = acc.MMAShape.M16xN16xK16_B1
    m, n, step = H100.tensor_core_info.compute_tensor_splits(mma)
    ii, jj = s.split(i, 2 * fragments[0] * m), s.split(j, 2 * fragments[1] * n)
    iii, jjj = s.split(ii, fragments[0] * m), s.split(jj, fragments[1] * n)
    kk = s.split(k, 32)
    iiii, jjjj, kkk = s.tile({iii: m, jjj: n, kk: step})
    s.reorder(i, j, k, ii, jj, kk, iii, jjj, iiii, jjjj, kkk)
    plan = s.create_plan(H100)
    plan.bind({i: G.BLOCK_Y, j: G.BLOCK_X, ii: G.WARP_Y, jj: G.WARP_X})
    plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=mma, instruction=instruction)
    plan.cache(C, index=k, location=acc.MemorySpace.MMA_FRAGMENT)
    loops = {"iii": iii, "jjj": jjj, "iiii": iiii}
    arrays = {"A": A, "B": B}
    for name in cached:
        plan.cache(arrays[name], index=loops[at], location=acc.MemorySpace.SHARED, **(pipeline or {}))
    return plan, (A, B, C)


def _compiles_and_matches(kernel) -> None:
    """The kernel compiles with NVRTC for sm_80 and sm_90, and every block's C, emulated, is
    numpy's C + A @ B."""
    source = emit_source([kernel], "// register-blocked tiles from a shared cache")
    for arch in ("sm_80", "sm_90"):
        assert nvrtc_compile(source, kernel.name, arch).cubin[:4] == b"\x7fELF"
    got, expected, written = run(kernel, seed=3)
    assert written.all()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_a_cached_at_the_tile_holds_both_row_tiles_and_each_has_its_own_fragment():
    kernel = lower(*blocked_plan())
    statements = list(walk_statements(kernel.body))
    (tile,) = kernel.shared
    assert tile.name == "A_shared" and tile.shape == (64, 16), "the block's 64 rows of A: 2 warps x 2 row tiles"
    a_fragments = sorted(s.name for s in statements if isinstance(s, Fragment) and s.use == "matrix_a")
    assert a_fragments == ["_a0_0", "_a0_1"]
    a_loads = [s for s in statements if isinstance(s, FragmentLoad) and s.fragment.startswith("_a")]
    assert [s.buffer for s in a_loads] == ["A_shared", "A_shared"]
    assert a_loads[0].origin != a_loads[1].origin
    _compiles_and_matches(kernel)


@pytest.mark.parametrize("instruction", [MMA_SYNC, WMMA], ids=lambda x: x.name)
@pytest.mark.parametrize("cached, fragments", [
    (("A",), (2, 2)), (("B",), (2, 2)), (("A", "B"), (2, 2)), (("A", "B"), (2, 1)), (("A", "B"), (1, 2)),
], ids=lambda x: "x".join(map(str, x)) if isinstance(x[0], int) else "+".join(x))
def test_operands_cached_at_the_tile_of_blocked_fragments(cached, fragments, instruction):
    _compiles_and_matches(lower(*blocked_plan(cached, fragments=fragments, instruction=instruction)))


@pytest.mark.parametrize("options", [
    {"at": "jjj"},  # at a blocked loop: the fill would sit inside iii, which is unrolled
    {"cached": ("A", "B"), "pipeline": {"stages": 2}},  # the ring runs along kk, not a blocked loop
    {"cached": ("A", "B"), "pipeline": REGISTERS},
    {"cached": ("A", "B"), "sizes": (100, 72, 88)},  # partial tiles: zeros past A's and B's edges
], ids=["at_blocked_loop", "two_stages", "registers_double_buffer", "partial_tiles"])
def test_blocked_caches_at_other_loops_pipelines_and_edges(options):
    _compiles_and_matches(lower(*blocked_plan(**options)))


@pytest.mark.gpu
@pytest.mark.parametrize("instruction", [MMA_SYNC, WMMA], ids=lambda x: x.name)
def test_register_blocked_cache_on_gpu(instruction, tmp_path):
    plan, args = blocked_plan(("A", "B"), instruction=instruction, sizes=(256, 128, 128))
    hat_path = build(plan, args, "register_blocked_cache", tmp_path)
    require_gpu()
    for function in acc.load(hat_path).functions.values():
        reports = run_function(function, seed=7)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
