"""The comparison of outputs with the reference (``verify.compare``'s tallies): the short path for
whole, finite, in-range chunks gives exactly the general path's sums, counts and worst element."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from schedc import verify


def _general(out, ref, mask, written=None):
    plain = verify._plain
    verify._plain = lambda *args: False
    try:
        return verify._tally(out, ref, mask, written)
    finally:
        verify._plain = plain


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), seed=st.integers(0, 2**31),
       damage=st.sampled_from(["none", "nan", "inf", "beyond", "mask", "written"]),
       dtype=st.sampled_from([np.float16, np.float32]))
def test_the_short_path_tallies_as_the_general_one(rows, cols, seed, damage, dtype):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((rows, cols)) * 100
    out = (ref + rng.standard_normal((rows, cols)) * 1e-2).astype(dtype)
    mask = np.ones((rows, cols), bool)
    written = None
    at = (rng.integers(rows), rng.integers(cols))
    if damage == "nan":
        out[at] = np.nan
    elif damage == "inf":
        out[at] = np.inf
    elif damage == "beyond":
        ref[at] = 1e6 if dtype is np.float16 else 1e40
    elif damage == "mask":
        mask[at] = False
    elif damage == "written":
        written = np.ones((rows, cols), bool)
    assert verify._tally(out, ref, mask, written) == _general(out, ref, mask, written)


def test_the_short_path_is_taken_for_a_whole_finite_chunk(monkeypatch):
    calls = []
    plain = verify._plain
    monkeypatch.setattr(verify, "_plain", lambda *a: calls.append(plain(*a)) or calls[-1])
    ref = np.arange(12.0).reshape(3, 4)
    t = verify._tally(ref.astype(np.float32) + 0.5, ref, np.ones((3, 4), bool), None)
    assert calls == [True] and t.compared == 12 and t.err2 == 12 * 0.25 and t.worst == (0, 0)
