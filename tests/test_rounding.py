"""schedc's own rule for rounding a real value into a float type (ir/numeric.py): to nearest,
ties to even, once, as CUDA converts a double. Constants, casts and stores in the emulator, the
reference and the CUDA text all follow it, whatever numpy or ml_dtypes do with a double (ml_dtypes
before 0.5 rounded a double to bfloat16 through float32: twice)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.ir.numeric import constant, converted, round_exact, rounded
from schedc.ir.types import ScalarType

from .conftest import require_gpu
from .plans import build

S = ScalarType
NARROW = (S.float16, S.bfloat16, S.float8_e4m3, S.float8_e5m2)


def _values(t: ScalarType) -> np.ndarray:
    """Every finite value of a type of at most 16 bits, in increasing order, from +0 up."""
    with np.errstate(invalid="ignore"):
        bits = np.arange(2 ** (8 * t.size), dtype=f"u{t.size}").view(t.numpy).astype(np.float64)
    return np.unique(np.abs(bits[np.isfinite(bits)]))  # -0 as +0


def _ties(t: ScalarType):
    """(x, expected) pairs: each midpoint between neighbours of ``t`` and the doubles just below
    and above it, with the neighbour each must round to: at the tie, the one whose last bit is even."""
    values = _values(t)
    low, high = values[:-1], values[1:]
    middle = (low + high) / 2  # exact in a double: one bit more than the type has
    low_bits = low.astype(t.numpy).view(f"u{t.size}")
    even = np.where(low_bits % 2 == 0, low, high)
    below, above = np.nextafter(middle, -np.inf), np.nextafter(middle, np.inf)
    return np.concatenate([middle, below, above]), np.concatenate([even, low, high])


def _bits(x: np.ndarray, t: ScalarType) -> np.ndarray:
    return np.asarray(x, dtype=t.numpy).view(f"u{t.size}")


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_every_tie_goes_to_the_even_neighbour_and_every_near_tie_to_the_nearer(t):
    x, expected = _ties(t)
    for sign in (1, -1):
        got = rounded(sign * x, t)
        np.testing.assert_array_equal(_bits(got, t), _bits(sign * expected, t))


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_the_exact_rule_agrees_with_the_fast_one_at_ties(t):
    x, expected = _ties(t)
    picks = np.arange(0, x.size, max(1, x.size // 600))  # Fractions are slow: a spread of the ties
    exact = np.array([round_exact(Fraction(float(v)), t.float_format) for v in x[picks]])
    np.testing.assert_array_equal(exact, expected[picks])


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_past_the_largest_value_a_tie_stays_and_beyond_is_infinite_or_nan(t):
    form = t.float_format
    half = 2.0 ** (form.max_exponent - form.precision)  # half the last step
    tie, beyond = form.largest + half, np.nextafter(form.largest + half, np.inf)
    overflow = np.inf if form.infinities else np.nan
    if form.infinities:  # the largest value's last bit is odd: its tie goes up
        assert rounded(tie, t) == np.inf and rounded(-tie, t) == -np.inf
    else:  # float8_e4m3: 448's last bit is even; 464 stays 448, past it is NaN
        assert float(rounded(tie, t)) == form.largest
    assert float(round_exact(Fraction(float(tie)), form)) == float(rounded(tie, t)) or not form.infinities
    np.testing.assert_array_equal(rounded(np.array([beyond, np.inf]), t).astype(np.float64), [overflow] * 2)
    assert math.isnan(round_exact(Fraction(float(beyond)), form)) != form.infinities


def test_zeros_keep_their_sign_and_nan_stays_nan():
    for t in NARROW:
        got = rounded(np.array([0.0, -0.0, -1e-300, np.nan]), t).astype(np.float64)
        assert [math.copysign(1, v) for v in got[:3]] == [1, -1, -1] and got[0] == got[1] == got[2] == 0
        assert math.isnan(got[3])


def test_a_bfloat16_constant_past_a_float32_tie_rounds_once():
    """1 + 2^-8 + 2^-30 lies above the tie 1 + 2^-8: to 1.0078125. Through float32 (1 + 2^-8
    exactly, then the tie to even) it would be 1.0."""
    value = 1 + 2**-8 + 2**-30
    assert float(constant(value, S.bfloat16)) == 1.0078125
    assert float(converted(np.array([value]), S.bfloat16)[0]) == 1.0078125


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(NARROW))
def test_any_double_rounds_as_the_exact_rule_says(x, t):
    exact = round_exact(Fraction(x), t.float_format)
    got = float(rounded(x, t))
    assert (math.isnan(got) and math.isnan(exact)) or (got == exact and math.copysign(1, got) == math.copysign(1, x))


@settings(max_examples=200, deadline=None)
@given(st.integers(-2**53, 2**53), st.sampled_from(NARROW))
def test_integers_round_as_the_exact_rule_says(n, t):
    exact = round_exact(Fraction(n), t.float_format)
    got = float(rounded(np.array([n], dtype=np.int64), t)[0])
    assert got == exact or (math.isnan(got) and math.isnan(exact))


def test_float32_values_round_once_into_each_narrow_type():
    """A float32 value (an accumulator stored into a 16-bit C) rounds directly: the fast path's
    conversion is held to the rule at every tie a float32 can hold."""
    rng = np.random.default_rng(3)
    singles = rng.integers(0, 2**32, 200_000, dtype=np.uint32).view(np.float32)
    singles = singles[np.isfinite(singles)]
    for t in NARROW:
        doubles = singles.astype(np.float64)
        np.testing.assert_array_equal(_bits(rounded(singles, t), t), _bits(rounded(doubles, t), t))
        x, expected = _ties(t)
        held = x == x.astype(np.float32)  # the ties a float32 holds exactly
        np.testing.assert_array_equal(_bits(rounded(x[held].astype(np.float32), t), t), _bits(expected[held], t))


# -- on the GPU: CUDA's conversions of a double are the rule ---------------------------------------


def _casts(n: int):
    """Y_<type>[i] = cast(X[i], type) for each narrow type, X float64; 32 threads a block."""
    X = acc.Array(role=acc.Role.INPUT, element_type=S.float64, shape=(n,), name="X")
    outputs = [acc.Array(role=acc.Role.OUTPUT, element_type=t, shape=(n,), name=f"Y_{t.value}") for t in NARROW]
    nest = acc.Nest(n)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        for out, t in zip(outputs, NARROW):
            out[i] = acc.cast(X[i], t)

    s = nest.create_schedule()
    ii = s.split(i, 32)
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_X})
    return plan, (X, *outputs)


@pytest.mark.gpu
def test_the_gpu_rounds_doubles_as_the_rule_does(tmp_path):
    """Ties and near-ties of bfloat16 and float16 (the 8-bit types saturate: within their range),
    cast from float64 on the GPU, give the bits ``converted`` gives."""
    ties = np.concatenate([_ties(t)[0] for t in (S.bfloat16, S.float16)])
    ties = ties[np.abs(ties) <= 448.0]
    x = np.concatenate([ties, -ties])
    n = x.size - x.size % 32
    plan, args = _casts(n)
    build(plan, args, "casts", tmp_path)
    require_gpu()
    outputs = [np.zeros(n, dtype=t.numpy) for t in NARROW]
    acc.load(tmp_path / "casts.hat").functions["casts"](x[:n], *outputs)
    for t, got in zip(NARROW, outputs):
        np.testing.assert_array_equal(_bits(got, t), _bits(converted(x[:n], t), t), err_msg=str(t))
