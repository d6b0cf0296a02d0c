"""Shared fixtures: building samples and plans into temporary packages, GPU gating."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ("hello_matmul", "tensor_matmul", "tensor_matmul_tf32", "tensor_matmul_output_cache",
           "tensor_input_cache", "tensor_input_double_buffer_cache", "tensor_input_output_cache",
           "tilus_matmul", "tensor_ladder_tf32", "odd_sizes")
# samples too large or too long to emulate here (arrays up to 4 GiB; 16 products per thread and
# step): emulated at small sizes, built and compiled at full size, verified on the device
LARGE_SAMPLES = ("tiled_copy", "gluon_memcpy", "gluon_add", "simt_register_tile")


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="Rewrite the golden .cu files.")
    parser.addoption("--fuzz-count", type=int, default=800,
                     help="Random schedule scripts test_fuzz.py runs (default 800; thousands by hand).")
    parser.addoption("--fuzz-seed", type=int, default=0, help="Seed of test_fuzz.py's programs (default 0).")


@pytest.fixture(autouse=True)
def _verify_ir():
    """Every kernel compiled in the tests is checked by the IR verifier after each pass."""
    from schedc.lower import verifying

    with verifying():
        yield


@pytest.fixture(autouse=True)
def _kernels_alone_without_a_gpu(request, monkeypatch):
    """A gpu-marked test on a machine without a GPU compiles its kernels (NVRTC, the text check)
    and skips before running them: its packages leave out the host library (nvcc's lib<name>.so,
    most of a build's time), which only a run would load (``links``: a test that links it all the
    same)."""
    node = request.node
    if node.get_closest_marker("gpu") is not None and node.get_closest_marker("links") is None and not has_gpu():
        from schedc.package import compile as compilers

        monkeypatch.setattr(compilers, "find_nvcc", lambda: None)
    yield


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture
def fuzz_options(request) -> tuple[int, int]:
    """(count, seed) of the random-schedule campaign (tests/fuzz)."""
    return request.config.getoption("--fuzz-count"), request.config.getoption("--fuzz-seed")


def has_gpu() -> bool:
    from schedc.package import driver

    return driver.device_count() > 0


def require_gpu() -> None:
    """Skip the rest of a test (after its CPU part: building and compiling) without a GPU."""
    if not has_gpu():
        pytest.skip("no NVIDIA GPU: the kernel was compiled, not run")


def run_sample(name: str, **options):
    """Run samples/<name>.py as ``schedc build`` does (its folder importable); the session."""
    from schedc.package.build import session

    sys.path.insert(0, str(ROOT / "samples"))
    try:
        with session(**options) as built:
            runpy.run_path(str(ROOT / "samples" / f"{name}.py"), run_name="__main__")
    finally:
        sys.path.pop(0)
    return built


def build_sample(name: str, output_dir: Path) -> Path:
    """Run samples/<name>.py with its packages written under ``output_dir``."""
    (path,) = run_sample(name, output_dir=output_dir).built
    return path


def show_sample(name: str):
    """The (package, model, function, source) tuples of a sample, without writing anything."""
    return run_sample(name, show_only=True).shown


@pytest.fixture
def v100(monkeypatch):
    """The NVIDIA V100 Target with an NVRTC that claims sm_70 (the installed NVRTC 13 refuses
    the model's plans at Package.add): for checks that stop before compiling."""
    from schedc.package import compile as compilers

    archs = compilers.supported_archs()
    monkeypatch.setattr(compilers, "supported_archs", lambda: tuple(sorted({70, *archs})))
    import schedc as acc

    return acc.Target(acc.Target.Model.NVIDIA_V100)


@pytest.fixture
def device_allocations(monkeypatch) -> list[int]:
    """The loader's device allocations, in bytes, in order: ``driver.DeviceMemory`` replaced by a
    stand-in that records each size and hands out distinct addresses (no GPU needed)."""
    from schedc.package import driver

    allocated: list[int] = []

    class Memory:
        def __init__(self, nbytes: int) -> None:
            allocated.append(nbytes)
            self.pointer, self.nbytes = 0x1000 * len(allocated), nbytes

    monkeypatch.setattr(driver, "DeviceMemory", Memory)
    return allocated
