"""The comparison of a run's outputs with the reference: counts, norms and the worst element,
the same whether the arrays are compared whole or a block of rows at a time."""

from __future__ import annotations

import numpy as np
import pytest

import schedc.verify as verify
from schedc import data
from schedc.reference import reference

from .plans import compile_plan, elementwise


def _case():
    model, kernel = compile_plan(*elementwise(40, 96))
    arrays = data.inputs(kernel.buffers, seed=1)
    expected, touched = reference(model, arrays)
    return model, expected, touched


def test_counts_norms_and_worst_element():
    model, expected, touched = _case()
    out = expected["C"].astype(np.float32)
    out[3, 5] += 0.5  # the worst difference
    out[30, 7] += 0.25
    written = np.ones(out.shape, dtype=bool)
    written[1, 1] = False  # never written
    mask = touched["C"].copy()
    mask[39, 95] = False  # written by the run outside the reference
    report, = verify.compare(model, {"C": out}, expected, {"C": mask}, {"C": written}, tolerance=1e-5)
    ref = expected["C"]
    diff = np.where(mask, out - ref, 0.0)
    assert report.compared == mask.sum() == 40 * 96 - 1
    assert report.unwritten == 1 and report.extra == 1
    assert report.relative_error == pytest.approx(np.linalg.norm(diff[mask]) / np.linalg.norm(ref[mask]))
    assert report.max_abs_error == pytest.approx(0.5, abs=1e-6) and report.worst == (3, 5)
    assert not report.passed


def test_nan_outputs_count_as_unwritten():
    model, expected, touched = _case()
    out = expected["C"].astype(np.float32)
    out[20, 40] = np.nan
    report, = verify.compare(model, {"C": out}, expected, touched, tolerance=1e-5)
    assert report.unwritten == 1 and np.isnan(report.relative_error) and report.worst == (20, 40)
    assert report.max_abs_error == np.inf and not report.passed


def test_overflow_of_the_element_type_compares_as_infinity():
    model, expected, touched = _case()
    expected = {"C": expected["C"].copy()}
    expected["C"][2, 3], expected["C"][4, 5] = 1e60, -1e60  # beyond float32: the type holds +-inf
    expected["C"][6, 7] = 1e60
    with np.errstate(over="ignore"):
        out = expected["C"].astype(np.float32)
    assert np.isinf(out[2, 3]) and np.isinf(out[4, 5])
    written = np.ones(out.shape, dtype=bool)
    report, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert report.passed and report.overflow == 3 and report.unwritten == report.nonfinite == 0
    assert "3 elements infinite in the reference or beyond the element type's range" in str(report)
    out[6, 7] = 3e38  # finite where the type overflows: wrong
    report, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert not report.passed and report.relative_error == np.inf


def test_a_nan_reference_is_reported_as_nan_not_overflow():
    """log of a negative: NaN in the reference and in the run agree, counted as NaN."""
    model, expected, touched = _case()
    expected = {"C": expected["C"].copy()}
    expected["C"][1, 2] = expected["C"][3, 4] = np.nan
    out = expected["C"].astype(np.float32)
    written = np.ones(out.shape, dtype=bool)
    report, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert report.passed and (report.undefined, report.overflow) == (2, 0)
    assert "2 elements NaN in the reference (compared as NaN)" in str(report) and "overflow" not in str(report)
    out[1, 2] = 1.0  # a number where the reference has none: wrong
    report, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert not report.passed


def test_written_infinities_are_not_reported_as_unwritten():
    model, expected, touched = _case()
    out = expected["C"].astype(np.float32)
    out[9, 9], out[10, 10] = np.inf, np.nan
    written = np.ones(out.shape, dtype=bool)
    report, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert (report.unwritten, report.nonfinite) == (0, 2) and not report.passed
    assert "2 elements NaN or infinite where the reference is finite" in str(report)


@pytest.mark.parametrize("chunk", [1, 7, 96, 97 * 5])
def test_blocks_of_rows_give_the_whole_arrays_answer(monkeypatch, chunk):
    model, expected, touched = _case()
    rng = np.random.default_rng(2)
    out = (expected["C"] + rng.normal(0, 1e-3, expected["C"].shape)).astype(np.float32)
    out[35, 2] = 1e3  # the worst element, after several equal-size blocks
    written = rng.random(out.shape) > 0.01
    whole, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    monkeypatch.setattr(verify, "_CHUNK", chunk)
    parts, = verify.compare(model, {"C": out}, expected, touched, {"C": written}, tolerance=1e-5)
    assert whole.worst == parts.worst == (35, 2) and whole.unwritten == parts.unwritten > 0
    assert parts.relative_error == pytest.approx(whole.relative_error, rel=1e-12)
    assert (parts.compared, parts.extra, parts.max_abs_error) == (whole.compared, whole.extra, whole.max_abs_error)
