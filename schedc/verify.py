"""Check a compiled function against the float64 reference of its nest: on the CPU emulator
(all blocks or a sample) or on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import data, poly
from .codegen.emulate import emulate
from .reference import block_dims, reference


@dataclass(frozen=True)
class Report:
    """How one written array compares with the reference."""

    function: str
    array: str
    compared: int  # elements the reference computed
    relative_error: float  # ||out - ref|| / ||ref|| over those elements
    max_abs_error: float
    worst: tuple[int, ...]  # index of the largest difference
    tolerance: float
    unwritten: int  # elements the reference wrote that the run left alone (or NaN)
    extra: int  # elements the run wrote that the reference did not

    @property
    def passed(self) -> bool:
        return (
            self.unwritten == 0
            and self.extra == 0
            and np.isfinite(self.relative_error)
            and self.relative_error <= self.tolerance
        )

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISMATCH"
        text = (
            f"{self.function}: {self.array}: {verdict}: relative error {self.relative_error:.3e} "
            f"(tolerance {self.tolerance:.1e}), max abs error {self.max_abs_error:.3e} at "
            f"{list(self.worst)}, {self.compared} elements compared"
        )
        if self.unwritten:
            text += f"; {self.unwritten} elements never written"
        if self.extra:
            text += f"; {self.extra} elements written outside the nest"
        return text


def emulate_function(model, kernel, blocks: int | None, seed: int = 0,
                     tolerance: float | None = None) -> list[Report]:
    """Emulate ``kernel`` on random inputs; compare the sampled blocks' outputs."""
    arrays = data.inputs(kernel.buffers, seed)
    storage = {b.name: data.to_storage(b, arrays[b.name]) for b in kernel.params}
    run = emulate(kernel, storage, blocks)
    outputs = {b.name: data.from_storage(b, run.storage[b.name]) for b in kernel.params}
    written = {b.name: data.from_storage(b, run.written[b.name]) for b in kernel.params}
    if blocks is None:
        expected, touched = reference(model, arrays)
    else:
        expected, touched = _sampled_reference(model, arrays, run.blocks)
    return compare(model, outputs, expected, touched, written, tolerance)


def run_function(fn, seed: int = 0, tolerance: float | None = None) -> list[Report]:
    """Run a loaded function on the GPU on random inputs (numpy arrays in each parameter's
    layout); compare the whole output with the reference."""
    arrays = data.inputs(fn.kernel.buffers, seed)
    outputs = data.inputs(fn.kernel.buffers, seed)  # the same values, written by the GPU
    fn(*(outputs[b.name] for b in fn.kernel.params))
    expected, touched = reference(fn.model, arrays)
    return compare(fn.model, outputs, expected, touched, tolerance=tolerance)


def _sampled_reference(model, arrays, blocks):
    facts = poly.analyze(model)
    arrays = {name: np.asarray(a, dtype=_wide(a.dtype)) for name, a in arrays.items()}  # convert once
    expected = {name: np.array(a, dtype=np.float64) for name, a in arrays.items()}
    touched: dict[str, np.ndarray] = {}
    for block in blocks:
        values, mask = reference(model, arrays, block_dims(model, facts, block))
        for name, m in mask.items():
            expected[name] = np.where(m, values[name], expected[name])
            touched[name] = touched.get(name, np.zeros_like(m)) | m
    return expected, touched


def _wide(dtype: np.dtype) -> type:
    return np.float64 if dtype.kind == "f" or dtype.name == "bfloat16" else np.int64


def compare(model, outputs, expected, touched, written=None, tolerance=None) -> list[Report]:
    tol = data.tolerance_for(data.precisions(model)) if tolerance is None else tolerance
    reports = []
    visible = {b.name for b in model.buffers if b.kind == "param"}  # TEMP scratch is internal
    for name, mask in sorted(touched.items()):
        if name not in visible:
            continue
        out = np.asarray(outputs[name]).astype(np.float64)
        ref = np.asarray(expected[name], dtype=np.float64)
        diff = np.where(mask, out - ref, 0.0)
        bad = mask & ~np.isfinite(out)
        unwritten = int(bad.sum())
        extra = 0
        if written is not None:
            unwritten += int((mask & ~written[name]).sum())
            extra = int((written[name] & ~mask).sum())
        norm = float(np.linalg.norm(ref[mask]))
        err = float(np.linalg.norm(diff[mask & np.isfinite(out)]))
        relative = err / norm if norm else err
        if bad.any():
            relative = float("nan")
        absolute = np.abs(np.where(np.isfinite(diff), diff, np.inf))
        worst = np.unravel_index(int(np.argmax(absolute)), absolute.shape)
        reports.append(Report(model.function, name, int(mask.sum()), relative,
                              float(absolute.max()) if absolute.size else 0.0,
                              tuple(int(x) for x in worst), tol, unwritten, extra))
    return reports
