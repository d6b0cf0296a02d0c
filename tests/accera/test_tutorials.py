"""Accera-style scripts (tests/accera/*.py: the GPU tutorial ladder and the patterns of Accera's
GPU tests) run as written: each builds its package where it says (``build/<name>.hat``, Accera's
layout), its CUDA compiles (the .cubin), and its kernel emulates correctly against numpy."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from schedc.cli import main

from ..conftest import require_gpu

HERE = Path(__file__).resolve().parent
SCRIPTS = sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("__init__", "matmul_generator")
                 and not p.stem.startswith("test_"))


def run_script(name: str, directory: Path, folder: Path = HERE) -> Path:
    """Run <folder>/<name>.py in ``directory`` (tests/accera's modules importable, as when Accera's
    scripts run from their folder); the .hat it wrote."""
    before = os.getcwd()
    sys.path.insert(0, str(HERE))
    try:
        os.chdir(directory)
        runpy.run_path(str(folder / f"{name}.py"), run_name="__main__")
    finally:
        os.chdir(before)
        sys.path.remove(str(HERE))
    hat = directory / "build" / f"{name}.hat"
    assert hat.exists(), sorted(p.name for p in (directory / "build").iterdir())
    return hat


def test_every_rung_of_the_ladder_is_here():
    assert {"hello_matmul_gpu", "tensor_matmul_gpu", "zero_init", "alpha_scaling", "multi_pass",
            "scheduling_policy", "input_cache", "double_buffer", "output_cache"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_builds_and_emulates(name, tmp_path):
    hat = run_script(name, tmp_path)
    for suffix in (".cu", ".cubin", ".schedc.json"):
        assert hat.with_suffix(suffix).exists() or (hat.parent / f"{name}{suffix}").exists(), suffix
    result = CliRunner().invoke(main, ["emulate", str(hat), "--blocks", "2"])
    assert result.exit_code == 0, result.output
    assert ": ok:" in result.output


def test_caches_at_bound_indices_fill_inside_k(tmp_path):
    """The caches at ii (threads) and at the warp-bound ii are filled at each step of k, before the
    loops inside it, and pipelined along k."""
    for name, pipelined in (("thread_bound_cache", "k_stage"), ("warp_bound_cache", "k_stage")):
        source = (run_script(name, tmp_path).parent / f"{name}.cu").read_text()
        body = source[source.index("for (int k = 0;"):]
        assert pipelined in body and "A_shared" in body and "B_shared" in body, name
        if name == "thread_bound_cache":  # C cached PRIVATE at the thread-bound jj: around kk's loop
            inner = body[body.index("C_private"):]
            assert inner.index("C's tile: into registers") < inner.index("for (int kk = 0;") \
                < inner.index("C's tile: back to global memory")


def test_caches_at_block_bound_indices_hold_the_blocks_part(tmp_path):
    """A at the block-bound i: the block's 16 rows over all of k; B at j: its 16 columns; both
    copied once, before k's loop (each block's threads share them)."""
    source = (run_script("block_bound_cache", tmp_path).parent / "block_bound_cache.cu").read_text()
    assert "A_shared: float32[16, 256]" in source and "B_shared: float32[256, 16]" in source
    body = source[source.index("__global__"):]
    assert body.index("cache of A") < body.index("cache of B") < body.index("for (int k = 0;")
    assert "block_copy" not in body[body.index("for (int k = 0;"):]


def test_shared_output_cache_is_written_back_after_the_loops(tmp_path):
    """C's tile in shared memory: filled before k, accumulated there, then a barrier and the
    block's threads write it back inside C's bounds."""
    source = (run_script("shared_output_cache", tmp_path).parent / "shared_output_cache.cu").read_text()
    body = source[source.index("__global__"):]
    assert "C_shared: float32[16, 16]" in source
    assert "C_shared[ii * 16 + jj] = C_shared[ii * 16 + jj] + A[" in body
    after = body[body.index("the block's writes to C's tile are done"):]
    assert "C's tile back to global memory" in after and "< 72 && " in after and "< 40)" in after


def test_block_order_changes_only_the_order_of_products(tmp_path):
    """BLOCK_ORDER: each tile's two passes one after the other; PASS_ORDER: each pass over
    every tile. Both emulate correctly (test_script_builds_and_emulates for BLOCK_ORDER)."""
    import re

    script = HERE / "scheduling_policy.py"
    orders = {}
    for policy in ("BLOCK_ORDER", "PASS_ORDER"):
        (tmp_path / policy).mkdir()
        text = script.read_text().replace("MMASchedulingPolicy.BLOCK_ORDER", f"MMASchedulingPolicy.{policy}")
        (tmp_path / policy / "scheduling_policy.py").write_text(text)
        source = run_script("scheduling_policy", tmp_path / policy, tmp_path / policy).with_suffix(".cu").read_text()
        calls = re.findall(r"mma_m16n8k16\(&(_c_\d_\d)\[0\], &_a(\d)_", source)
        orders[policy] = [(tile, int(p)) for tile, p in calls]
    assert orders["BLOCK_ORDER"][:4] == [("_c_0_0", 0), ("_c_0_0", 1), ("_c_0_1", 0), ("_c_0_1", 1)]
    assert orders["PASS_ORDER"][:4] == [("_c_0_0", 0), ("_c_0_1", 0), ("_c_1_0", 0), ("_c_1_1", 0)]
    assert sorted(orders["BLOCK_ORDER"]) == sorted(orders["PASS_ORDER"])


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["thread_bound_cache", "warp_bound_cache", "scheduling_policy", "cache_layouts",
                                  "hierarchical_cache", "gemm_benchmarker", "block_bound_cache",
                                  "shared_output_cache", "batched_layouts"])
def test_script_on_the_gpu(name, tmp_path):
    import schedc
    from schedc.verify import run_function

    hat = run_script(name, tmp_path)
    require_gpu()
    for fn in schedc.load(hat).functions.values():
        reports = run_function(fn, seed=5)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_register_tiles_are_filled_from_the_shared_tiles(tmp_path):
    """hierarchical_cache: each thread's tiles of A and B come from the shared tiles (the ring's
    current buffer), and the products read the registers."""
    import re

    source = (run_script("hierarchical_cache", tmp_path).parent / "hierarchical_cache.cu").read_text()
    body = source[source.index("for (int kk = 0;"):]
    for array in ("A", "B"):
        assert re.search(rf"{array}_private\[[^]]+\] = {array}_shared\[k_stage \* \d+ \+ ", body), array
    product = body[body.index("for (int iii = 0;"):]
    assert "A_private[" in product and "B_private[" in product and "_shared[" not in product
    assert "C_private[" in product and "C[" not in product.split("// C's tile: back")[0]
