"""GPU mode (``python -m tests.fuzz --gpu``), for a machine with an NVIDIA GPU.

*** GPU PATH: not run in CI, and not testable without a device. ***

Each program is first run as on the CPU (``run.run_program``: emulation and NVRTC); an accepted
program is then built into a package in a temporary folder, loaded with ``schedc.load`` and
each function run on the device on random inputs and compared with the float64 reference
(``schedc.verify.run_function``, what ``schedc verify`` does) and, element for element, with the
emulator's outputs on the same inputs (``schedc.verify.compare_with_emulator``). A mismatch is
``wrong`` with a signature that says GPU; so is a program the emulator refuses (a race, an
out-of-bounds access) that the GPU runs correctly, and one where the emulator and the GPU
disagree: the checks on the CPU must agree with the hardware. A failure to build, load or
launch accepted code is ``internal``.
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
    return replace(on_device(run_program(program), render(program)), seconds=time.perf_counter() - start)


def on_device(outcome: Outcome, text: str) -> Outcome:
    """The script's outcome once its CPU ``outcome`` is known: an accepted script compared on
    the GPU (with the reference and the emulator); one the emulator refuses run on the GPU all
    the same, where a correct result means the emulator cries wolf."""
    if outcome.kind == "wrong" and outcome.signature.startswith(EMULATOR_CAUGHT):
        if compare_on_device(text, against_emulator=False).kind == "correct":
            return Outcome("wrong", f"wrong: the emulator refuses what the GPU runs correctly: "
                                    f"{outcome.signature[len(EMULATOR_CAUGHT):].strip()}", outcome.message)
        return outcome
    if outcome.kind != "correct":
        return outcome
    return compare_on_device(text)


EMULATOR_CAUGHT = "wrong: the emulator caught"  # run._emulate's signature of an EmulationError


def compare_on_device(text: str, against_emulator: bool = True) -> Outcome:
    """Build the script into a temporary folder, run its functions on the GPU, compare with the
    reference and (``against_emulator``) with the emulator's outputs."""
    import schedc
    from schedc.verify import compare_with_emulator, run_function

    with tempfile.TemporaryDirectory(prefix="schedc-fuzz-") as directory:
        try:
            (path,) = build_into(text, directory)
            functions = list(schedc.load(path).functions.values())
            reports = [r for fn in functions for r in run_function(fn, seed=0)]
            bad = [r for r in reports if not r.passed]
            if bad:
                return Outcome("wrong", "wrong: GPU values differ from the reference", "\n".join(map(str, reports)))
            if against_emulator:
                both = [r for fn in functions for r in compare_with_emulator(fn, seed=0)]
                if not all(r.passed for r in both):
                    return Outcome("wrong", "wrong: the emulator and the GPU disagree (both within the reference's "
                                            "tolerance)", "\n".join(map(str, both)))
        except Exception as error:  # noqa: BLE001 - accepted code must build, load and run
            return Outcome("internal", f"internal: GPU: {type(error).__name__}", f"{type(error).__name__}: {error}")
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
