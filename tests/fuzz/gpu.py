"""GPU mode (``python -m tests.fuzz --gpu``), for a machine with an NVIDIA GPU.

*** GPU PATH: not run in CI, and not testable without a device. ***

Each program is first run as on the CPU (``run.run_program``: emulation and NVRTC); an accepted
program is then built into a package in a temporary folder, loaded with ``schedc.load`` and
each function run on the device on random inputs and compared with the float64 reference
(``schedc.verify.run_function``, what ``schedc verify`` does). A mismatch is ``wrong`` with a
signature that says GPU; a failure to build, load or launch accepted code is ``internal``.
Programs are retargeted to the GPU's model (by its sm) first. Workers are forked before any
CUDA call in the parent, so each creates its own context. A
kernel that faults leaves its worker's context unusable: later programs in that worker then
fail as ``internal`` too (rerun them alone: ``--replay FILE --gpu``).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace

from .program import Program
from .render import render
from .run import Outcome, build_into, run_program


def run_programs_on_gpu(programs: list[Program], target: str) -> list[Outcome]:
    """``run_program_on_gpu`` of each program (a pool task)."""
    return [run_program_on_gpu(p, target) for p in programs]


def run_program_on_gpu(program: Program, target: str) -> Outcome:
    """The CPU outcome of ``program`` retargeted to the GPU here (``target``, a Target.Model
    name), then, if accepted, the GPU comparison."""
    start = time.perf_counter()
    program = replace(program, target=target)
    outcome = run_program(program)
    if outcome.kind != "correct":
        return outcome
    return replace(compare_on_device(render(program)), seconds=time.perf_counter() - start)


def compare_on_device(text: str) -> Outcome:
    """Build the script into a temporary folder, run its functions on the GPU, compare."""
    import schedc
    from schedc.verify import run_function

    with tempfile.TemporaryDirectory(prefix="schedc-fuzz-") as directory:
        try:
            (path,) = build_into(text, directory)
            functions = schedc.load(path).functions.values()
            reports = [r for fn in functions for r in run_function(fn, seed=0)]
        except Exception as error:  # noqa: BLE001 - accepted code must build, load and run
            return Outcome("internal", f"internal: GPU: {type(error).__name__}", f"{type(error).__name__}: {error}")
    bad = [r for r in reports if not r.passed]
    if bad:
        return Outcome("wrong", "wrong: GPU values differ from the reference", "\n".join(map(str, reports)))
    return Outcome("correct", "correct")


def device_target() -> str | None:
    """The Target.Model name of GPU 0 (the first model of its sm), or None without a GPU or
    for an sm schedc has no model of. Asked in a spawned child, so that the parent, which
    forks the workers, never creates a CUDA context."""
    import multiprocessing

    from schedc.targets import MODELS

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        sm = pool.apply(_device_sm)
    return next((model.name for model, spec in MODELS.items() if spec.sm == sm), None)


def _device_sm() -> int:
    from schedc.package import driver

    return driver.device().sm if driver.device_count() > 0 else 0
