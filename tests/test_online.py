"""The online softmax: a chain's row vectors kept across the tiles of its first C's columns
(``schedc/lower/online.py``). The script writes the softmax of a whole row; the reference runs it
so; the kernel takes S's columns a tile at a time, corrects the sums and E's accumulator as the
row's maximum grows, and divides E by the sums after the last tile."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc as acc
from schedc.codegen.cuda import emit_kernel
from schedc.errors import PlanError, SchedcError
from schedc.ir.functions import Function
from schedc.ir.kernel import (
    Binary,
    Call,
    Const,
    Fragment,
    FragmentConvert,
    FragmentMap,
    FragmentMma,
    If,
    Loop,
    PrivateArray,
    Store,
    Var,
    WarpgroupWait,
)
from schedc.ir.walk import subexpressions, walk_statements
from schedc.lower import online
from schedc.targets import MMAFragmentOp
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .plans import T, build, compile_function_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
import attention  # noqa: E402
import b2b_gemm  # noqa: E402

TILED = dict(rows=64, stages=2, b_resident=False)
CASES = {
    "fp16_two_tiles": dict(M=128, N=128, scale=0.5, n1_tile=64, **TILED),
    "bf16_three_tiles_d_ring": dict(M=192, N=192, scale=0.125, n1_tile=64, d_stages=2, dtype=T.bfloat16, **TILED),
    "one_role": dict(M=128, N=128, n1_tile=64, producer=False, persistent=False, **TILED),
    "two_warpgroups": dict(M=256, N=128, scale=0.25, n1_tile=64, rows=128, stages=3, b_resident=False),
}


def _passed(reports) -> None:
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def _softmax(case: str):
    options = dict(CASES[case])
    return b2b_gemm.softmax_b2b(options.pop("M"), options.pop("N"), **options)


@pytest.mark.parametrize("case", CASES)
def test_a_softmax_over_tiles_of_s_matches_the_whole_row_softmax(case):
    """Every block emulated against the float64 reference, which takes each step over the whole
    row (the maximum of all of it before any exponential)."""
    model, fn = compile_function_plan(*_softmax(case))
    _passed(emulate_function(model, fn, None, seed=5))


def _steps(M: int, *extra, start_total: float = 0.0, exponential=acc.exp, divide: bool = True, argument=None):
    """softmax_steps with the exponential (of ``argument(S, peak, i, j)``, ``(S - peak) * 0.5``
    unless given), the sum's start and the division chosen, and more steps (``extra``: each
    ``step(S, peak, total, i, j)``) after the sum."""
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(M,)) for _ in range(2))

    def start(S, i, j):
        peak[i] = -math.inf
        total[i] = start_total

    def maximum(S, i, j):
        peak[i] = acc.max(peak[i], S[i, j])

    def add(S, i, j):
        total[i] += S[i, j]

    argument = argument or (lambda S, peak, i, j: (S[i, j] - peak[i]) * 0.5)
    steps = [start, maximum, lambda S, i, j: exponential(argument(S, peak, i, j)), add]
    steps += [lambda S, i, j, step=step: step(S, peak, total, i, j) for step in extra]
    if divide:
        steps.append(lambda S, i, j: S[i, j] / total[i])
    return steps


def _plan(steps, M: int = 128, N: int = 128, **options):
    return b2b_gemm.b2b_gemm(M, N, N, N, between=steps, n1_tile=64, **TILED, **options)


@pytest.mark.parametrize("exponential", [acc.exp, acc.fast_exp], ids=["exp", "fast_exp"])
@pytest.mark.parametrize("divide", [True, False], ids=["divided", "unnormalised"])
def test_the_exponential_and_the_division_are_the_scripts(exponential, divide):
    """``fast_exp`` is the same identity; without the division E is the sum of exponentials times
    D, corrected to the row's final maximum."""
    model, fn = compile_function_plan(*_plan(_steps(128, exponential=exponential, divide=divide)))
    _passed(emulate_function(model, fn, None, seed=3))


def _calls(fn, function) -> list:
    return [e for s in walk_statements(fn.kernels[0].body) for e in _expressions(s)
            if isinstance(e, Call) and e.function is function]


def _expressions(s) -> list:
    from schedc.ir.walk import exprs

    return [x for e in exprs(s) for x in subexpressions(e)]


def test_fast_exp_is_computed_base_two_with_log2_e_folded_into_its_constants():
    """fast_exp((S - peak) * 0.5) in the kernel: fast_exp2(S * 0.5 log2(e) + used), the row's
    used = peak * (-0.5 log2(e)) once a tile, the correction fast_exp2(-0.5 log2(e) * (new - old))."""
    model, fn = compile_function_plan(*_plan(_steps(128, exponential=acc.fast_exp)))
    assert not _calls(fn, Function.FAST_EXP)
    source = emit_kernel(fn.kernels[0])
    assert re.search(r"_c_0\[elem\] = schedc::fast_exp2\(_c_0\[elem\] \* 0\.72134\d*f \+ _peak_used_0\[", source)
    assert re.search(r"_peak_used_0\[0\] = schedc::select\(.*, 0\.0f, _peak_rows_0\[0\] \* -0\.72134\d*f\);", source)
    assert re.search(r"schedc::fast_exp2\(-0\.72134\d*f \* \(_peak_rows_0\[0\] - _peak_prev_0\[0\]\)\)", source)
    _passed(emulate_function(model, fn, None, seed=4))


@pytest.mark.parametrize("argument", [
    lambda S, peak, i, j: (S[i, j] - peak[i]) * 0.5 + 0.25,
    lambda S, peak, i, j: 0.25 * S[i, j] - 1.0 - peak[i] / 4.0,
    lambda S, peak, i, j: -(peak[i] - S[i, j]) * 0.125 + acc.cast(j, T.float32) * 0.0625,
], ids=["constant", "divided", "negated_with_an_index_term"])
def test_a_folded_exponential_keeps_every_term_of_its_argument(argument):
    """The fold scales each term of g and its constant: the kernel's E (the sum of exponentials
    times D, undivided: a constant factor shows) matches the reference's."""
    steps = _steps(128, exponential=acc.fast_exp, divide=False, argument=argument)
    model, fn = compile_function_plan(*_plan(steps))
    assert _calls(fn, Function.FAST_EXP2) and not _calls(fn, Function.FAST_EXP)
    _passed(emulate_function(model, fn, None, seed=6))


def test_a_script_may_write_its_exponentials_base_two():
    """fast_exp2 is an exponential of the proof: exp2(a S + b M) with b < 0."""
    model, fn = compile_function_plan(*_plan(_steps(128, exponential=lambda x: acc.fast_exp2(x * 1.4426950408889634))))
    assert online.derive(model).function is Function.FAST_EXP2
    _passed(emulate_function(model, fn, None, seed=8))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # select computes both: exp(-inf - -inf)
def test_rows_masked_in_their_first_tiles_start_from_zero():
    """Row i keeps columns j >= i (the rest -inf before the maximum): rows past 64 see a first tile
    of -inf alone, whose maximum stays -inf. Their exponentials there are 0 (the maximum used is 0,
    not -inf: no NaN), and the correction from -inf is 0."""
    M = 128
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(M,)) for _ in range(2))

    def start(S, i, j):
        peak[i] = -math.inf
        total[i] = 0.0

    def mask(S, i, j):
        return acc.select(j >= i, S[i, j], -math.inf)

    def maximum(S, i, j):
        peak[i] = acc.max(peak[i], S[i, j])

    def add(S, i, j):
        total[i] += S[i, j]

    steps = [start, mask, maximum, lambda S, i, j: acc.exp(S[i, j] - peak[i]), add,
             lambda S, i, j: S[i, j] / total[i]]
    model, fn = compile_function_plan(*_plan(steps, M))
    _passed(emulate_function(model, fn, None, seed=11))


def test_the_kernel_corrects_e_in_the_loop_and_divides_it_after():
    """The row vectors are set before the loop over S's tiles; inside it E's accumulator is
    multiplied by the correction before each second product; after it E is divided by the sum."""
    model, fn = compile_function_plan(*_softmax("fp16_two_tiles"))
    body = fn.kernels[0].body
    loop = next(s for s in walk_statements(body) if isinstance(s, Loop) and s.var == "j" and any(
        isinstance(x, FragmentMap) for x in walk_statements(s.body)))  # the consumers' (the producer's copies)
    inside = list(walk_statements(loop.body))
    corrected = [s for s in inside if isinstance(s, FragmentMap) and s.fragment == "_e"]
    assert len(corrected) == 1 and "_corr" in str(corrected[0].body)
    sets = [s for s in walk_statements(body) if isinstance(s, Store) and "_rows" in s.buffer and s not in inside
            and not any(s is x for x in inside)]
    assert {s.buffer.split("_rows")[0] for s in sets} >= {f"_{v}" for v in _vectors(model)}
    divided = [s for s in walk_statements(body) if isinstance(s, FragmentMap) and s.fragment == "_e"
               and "/" in str(s.body) and not any(s is x for x in inside)]
    assert divided
    assert not any(isinstance(s, PrivateArray) and "_rows" in s.name and "_part" not in s.name for s in inside)


def _vectors(model) -> tuple[str, ...]:
    return online.derive(model).carried


def test_the_proof_names_what_it_keeps():
    model, _ = compile_function_plan(*_softmax("fp16_two_tiles"))
    kept = online.derive(model)
    peak, total = kept.carried
    assert kept.peak == peak and kept.rescaled == (total,) and kept.divisors == (total,)
    assert kept.scaled and kept.slope == -0.5 and kept.function.value == "exp"


def test_without_tiles_of_s_nothing_is_kept_across():
    model, _ = compile_function_plan(*b2b_gemm.softmax_b2b(128, 64))
    assert online.derive(model) is None


REFUSED = {
    "the maximum outside an exponential": (
        lambda S, peak, total, i, j: S[i, j] - peak[i], r"reads \w+\[i\], the running maximum of the row, which is "
                                                         r"whole only after the last tile"),
    "the sum outside a division": (
        lambda S, peak, total, i, j: S[i, j] - total[i], r"reads \w+\[i\], the sum of the row, which is whole only "
                                                          r"after the last tile"),
    "a product of exponentials": (
        lambda S, peak, total, i, j: S[i, j] * S[i, j], r"computes a value that is not linear in the exponentials"),
    "an exponential of an exponential": (
        lambda S, peak, total, i, j: acc.exp(S[i, j] - peak[i]), r"not linear in the exponentials"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_step_that_reads_a_row_vector_before_it_is_whole_is_refused(case):
    step, message = REFUSED[case]
    with pytest.raises(PlanError, match=r"S's columns come in tiles .* \(the online softmax, lower/online.py\): "
                                        r"the step \d+ between the products .*" + message):
        compile_function_plan(*_plan(_steps(128, step)))


def test_an_exponential_whose_argument_is_not_affine_in_the_maximum_is_refused():
    with pytest.raises(PlanError, match=r"not linear in the exponentials of the running maximum"):
        compile_function_plan(*_plan(_steps(128, exponential=lambda x: acc.exp(x * x))))


def test_a_sum_of_exponentials_that_does_not_start_at_zero_is_refused():
    with pytest.raises(PlanError, match=r"adds exponentials into \w+, which starts at a value other than 0"):
        compile_function_plan(*_plan(_steps(128, start_total=1.0)))


def test_a_row_vector_reduced_twice_is_refused():
    def again(S, peak, total, i, j):
        total[i] += S[i, j]

    with pytest.raises(PlanError, match=r"writes \w+\[i\] again: a row vector kept across the tiles is set once"):
        compile_function_plan(*_plan(_steps(128, again, divide=False)))


def test_a_maximum_of_exponentials_is_refused():
    other = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,))

    def start(S, peak, total, i, j):
        other[i] = -math.inf

    def maximum(S, peak, total, i, j):
        other[i] = acc.max(other[i], S[i, j])

    with pytest.raises(PlanError, match=r"takes the maximum of values relative to the running maximum"):
        compile_function_plan(*_plan(_steps(128, start, maximum)))


def test_a_sum_of_divided_values_is_refused():
    other = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,))

    def start(S, peak, total, i, j):
        other[i] = 0.0

    def divide(S, peak, total, i, j):
        return S[i, j] / total[i]

    def add(S, peak, total, i, j):
        other[i] += S[i, j]

    with pytest.raises(PlanError, match=r"adds values divided by \w+, whole only after the last tile"):
        compile_function_plan(*_plan(_steps(128, start, divide, add, divide=False)))


def test_a_second_product_onto_e_as_it_is_is_refused():
    """The kernel corrects and divides E's accumulator: E must start at zero."""
    model, _ = compile_function_plan(*_softmax("fp16_two_tiles"))
    kept = dataclasses.replace(model.chained, prologue_op=MMAFragmentOp.NONE)
    with pytest.raises(PlanError, match=r"prologue_op=NONE\); the kernel corrects \w+'s accumulator .* starts at "
                                        r"zero"):
        online.derive(dataclasses.replace(model, chained=kept))


ATTENTION = {"decode": {**attention.DECODE["attention_bf16_decode_b16h32kv8_8192x128"], "N": 512, "batch": 2,
                        "heads": 2},
             "bshd": dict(M=128, N=256, d=64, batch=2, heads=2, layout="BSHD"),
             "bshd_gqa_causal": dict(M=192, N=192, d=128, batch=2, heads=4, kv_heads=2, causal=True, rows=64,
                                     layout="BSHD", alternate=True),
             "d64": dict(M=256, N=384, d=64), "d128_bf16": dict(M=128, N=192, d=128, dtype=T.bfloat16),
             "gqa_causal": dict(M=192, N=192, d=128, batch=2, heads=2, kv_heads=1, causal=True, rows=64, kv_tile=64),
             "d128_kv128_exp": dict(M=128, N=384, d=128, kv_tile=128, exponential=acc.exp),
             "d64_serial": dict(M=256, N=384, d=64, overlap=False),
             "keys_in_one_tile": dict(M=256, N=100, d=64)}  # V's tile copied once, at the start


@pytest.mark.parametrize("case", ATTENTION)
def test_the_attention_sample_emulates_at_a_reduced_size(case):
    """samples/attention.py's plan (Q, K and V row-major, the scores scaled by 1/sqrt(d)) with
    queries and keys of a few tiles, every block emulated."""
    model, fn = compile_function_plan(*attention.attention(**ATTENTION[case]))
    _passed(emulate_function(model, fn, None, seed=2))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ATTENTION)
def test_the_attention_sample_on_the_gpu(case, tmp_path):
    build(*attention.attention(**ATTENTION[case]), "att", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "att.hat").functions["att"], seed=7))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["bf16_three_tiles_d_ring", "two_warpgroups"])
def test_a_softmax_over_tiles_of_s_on_the_gpu(case, tmp_path):
    build(*_softmax(case), "online", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "online.hat").functions["online"], seed=7))


def test_an_intermediate_held_in_registers_alone_leaves_the_offsets_32_bit():
    """S of 128 heads x 4096 x 4096 float32 (2^31 elements) is never in memory: the kernel's
    offsets stay 32-bit."""
    model, fn = compile_function_plan(*attention.attention(4096, 4096, 128, batch=8, heads=16))
    assert model.buffer("S").size >= 2 ** 31 and fn.kernels[0].index_type is T.int32


def test_a_chain_over_arrays_past_two_to_the_31_prints_its_literals_as_64_bit_values():
    """Q of 2^24 rows of 128: 64-bit offsets, where C++ computes literals alone in int (``0 / 64 *
    4096``, ``schedc::min(x, 8)`` of a long long x): the text check parses every line back."""
    _, fn = compile_function_plan(*attention.attention(1 << 24, 256, 128))
    kernel = fn.kernels[0]
    assert kernel.index_type is T.int64
    text = emit_kernel(kernel)  # raises where a line does not mean its IR
    assert "0 * 4096" not in text and not re.search(r"schedc::min\([^()]*, \d+\)", text)


def _tile_loops(fn) -> list[Loop]:
    return [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, Loop) and s.var == "j"]


def test_a_causal_attention_skips_the_tiles_past_its_last_query():
    """Two heads of 256 queries in blocks of 128: the producer's and the consumers' loops over the
    tiles of keys end at the block's last query (tiles past it are all -inf: nothing to add), and O
    is still the whole rows' softmax of the kept keys."""
    model, fn = compile_function_plan(*attention.attention(256, 256, 64, heads=2, causal=True))
    loops = _tile_loops(fn)
    assert len(loops) == 2 and all(isinstance(lp.stop, Binary) and lp.stop.op == "min" for lp in loops)
    assert "i" in {v.name for lp in loops for v in subexpressions(lp.stop) if isinstance(v, Var)}
    _passed(emulate_function(model, fn, None, seed=4))


def test_a_persistent_causal_attention_runs_every_tile():
    """A persistent block counts its ring's tiles over its work items: it runs them all (masked)."""
    model, fn = compile_function_plan(*attention.attention(256, 256, 64, causal=True, persistent=True))
    assert all(isinstance(lp.stop, Const) for lp in _tile_loops(fn))
    _passed(emulate_function(model, fn, None, seed=4))


def test_a_mask_whose_minus_infinity_is_summed_skips_nothing():
    """A sum of the masked scores themselves (-inf where masked) would not be what it is without
    the tile: the proof keeps no mask beside it, and the loop runs every tile."""
    raw = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,))
    start, *rest = _steps(128)
    mask = lambda S, i, j: acc.select(j <= i, S[i, j], -math.inf)  # noqa: E731
    model, _ = compile_function_plan(*_plan([start, mask, *rest], persistent=False))
    assert online.derive(model).masks  # the plain causal mask is kept ...
    summed = [start, lambda S, i, j: _set(raw, i, 0.0), mask, lambda S, i, j: _add(raw, i, S[i, j]), *rest]
    model, fn = compile_function_plan(*_plan(summed, persistent=False))
    assert online.derive(model).masks == ()  # ... not beside a sum of the -inf themselves
    assert all(isinstance(lp.stop, Const) for lp in _tile_loops(fn))


def _set(array, i, value):
    array[i] = value


def _add(array, i, value):
    array[i] += value


@pytest.mark.parametrize("options", [dict(M=128, N=256, d=64), dict(M=192, N=192, d=128, heads=2, causal=True, rows=64)],
                         ids=["tiles", "causal_heads"])
def test_the_log_sum_exp_of_each_row_is_an_output(options):
    """L = scale * max + log(sum), set from the row vectors once they are whole (after the last
    tile) and stored by one lane of each row's four: against the reference's whole-row values."""
    model, fn = compile_function_plan(*attention.attention(**options, lse=True))
    reports = emulate_function(model, fn, None, seed=5)
    _passed(reports)
    assert {r.array for r in reports} == {"O", "L"}


def test_a_row_output_beside_one_tile_of_s_is_stored_after_the_steps():
    """Without tiles of S (no loop to keep the vectors across) the OUTPUT row vector is set and
    stored in the epilogue of the one tile."""
    lse = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(128,))
    steps = _steps(128, lambda S, peak, total, i, j: _set(lse, i, peak[i] * 0.5 + acc.log(total[i])))
    model, fn = compile_function_plan(*b2b_gemm.b2b_gemm(128, 64, 64, 64, between=steps, inputs=(lse,)))
    assert online.derive(model) is None
    _passed(emulate_function(model, fn, None, seed=6))


def test_a_step_reading_a_row_output_is_refused():
    lse = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(128,))
    steps = _steps(128, lambda S, peak, total, i, j: _set(lse, i, acc.log(total[i])),
                   lambda S, peak, total, i, j: S[i, j] * lse[i], divide=False)
    with pytest.raises(PlanError, match=r"reads \w+\[i\], an OUTPUT row vector, which the kernel sets after the "
                                        r"last tile"):
        compile_function_plan(*_plan(steps, inputs=(lse,)))


def test_a_row_output_reduced_over_the_row_is_refused():
    lse = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(128,))
    steps = _steps(128, lambda S, peak, total, i, j: _set(lse, i, 0.0), lambda S, peak, total, i, j: _add(lse, i, S[i, j]))
    with pytest.raises(PlanError, match=r"writes \w+\[i\], an OUTPUT row vector: one statement sets it from the row "
                                        r"vectors kept across the tiles"):
        compile_function_plan(*_plan(steps, inputs=(lse,)))


def _mask(S, i, j):
    return acc.select(j <= i, S[i, j], -math.inf)


def _softmax_steps(M: int = 128, exponential=None, start_peak: float = -math.inf, reduce=acc.max, before=(),
                   between=(), dtype=T.float32):
    """[start, *before, maximum, *between, exponential, add, divide] with the row vectors named."""
    peak = acc.Array(role=acc.Role.TEMP, element_type=dtype, shape=(M,))
    total = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(M,))

    def start(S, i, j):
        _set(peak, i, start_peak)
        _set(total, i, 0.0)

    def maximum(S, i, j):
        _set(peak, i, reduce(peak[i], S[i, j] if dtype is T.float32 else acc.cast(S[i, j], dtype)))

    exponential = exponential or (lambda S, peak, i, j: acc.exp((S[i, j] - peak[i]) * 0.5))
    return [start, *before, maximum, *between, lambda S, i, j: exponential(S, peak, i, j),
            lambda S, i, j: _add(total, i, S[i, j]), lambda S, i, j: S[i, j] / total[i]], peak, total


def _refused_cases():
    cases = {}
    steps, peak, total = _softmax_steps()
    steps[-1] = lambda S, i, j, total=total: S[i, j] * 0.5 / total[i]
    cases["a division whose numerator is more than the element"] = (steps, r"reads \w+\[i\], the sum of the row")
    cases["a positive slope of the maximum"] = (_softmax_steps(exponential=lambda S, p, i, j: acc.exp(
        (p[i] - S[i, j]) * 0.5))[0], r"b < 0, and S's element, a > 0")
    cases["a running minimum in the exponentials"] = (_softmax_steps(start_peak=math.inf, reduce=acc.min)[0],
                                                      r"takes a running maximum, b < 0")
    steps, peak, _ = _softmax_steps(start_peak=0.0)
    steps.insert(1, lambda S, i, j, peak=peak: S[i, j] + peak[i])
    cases["the maximum read before its reduction"] = (steps, r"reads \w+\[i\] between its start and its reduction")
    bias = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(128,))
    cases["an exponential of the maximum without the element"] = (_softmax_steps(
        exponential=lambda S, p, i, j: acc.exp((S[i, j] - p[i]) * 0.5) + acc.exp((bias[j] - p[i]) * 0.5))[0],
        r"not linear in the exponentials .* a > 0")
    cases["a float16 maximum"] = (_softmax_steps(dtype=T.float16)[0], r"\w+ is float16: the row vectors the kernel "
                                                                      r"corrects as the maximum grows .* are float32")
    return cases, (bias,)


REFUSED_FORMS, REFUSED_INPUTS = _refused_cases()


@pytest.mark.parametrize("case", REFUSED_FORMS)
def test_forms_the_online_proof_cannot_make_whole_are_refused(case):
    steps, message = REFUSED_FORMS[case]
    with pytest.raises(PlanError, match=r"the online softmax, lower/online.py\): .*" + message):
        compile_function_plan(*_plan(steps, inputs=REFUSED_INPUTS))


def _lost_masks():
    count = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,))
    steps, _, _ = _softmax_steps(before=[_mask])
    counted = [steps[0], lambda S, i, j: _set(count, i, 0.0), *steps[1:-1], lambda S, i, j: _add(count, i, 1.0),
               lambda S, i, j: S[i, j] / count[i]]
    summed = acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,))
    steps, _, _ = _softmax_steps()
    before = [steps[0], lambda S, i, j: _set(summed, i, 0.0), lambda S, i, j: _add(summed, i, S[i, j]), _mask,
              *steps[1:-1], lambda S, i, j: S[i, j] / summed[i]]
    exponential_first = _softmax_steps(before=[_mask, lambda S, i, j: acc.exp(S[i, j])])[0]
    return {"a count of the row's elements": counted, "a sum taken before the mask": before,
            "an exponential before the maximum": exponential_first}


LOST = _lost_masks()


@pytest.mark.parametrize("case", LOST)
def test_a_mask_whose_tiles_would_still_add_something_skips_nothing(case):
    """Steps that make a masked element count (a count of the elements, a sum before the mask, an
    exponential before the maximum: a masked element is then 0 before the maximum, not -inf):
    the proof keeps no mask, every tile runs, and E is the reference's."""
    model, fn = compile_function_plan(*_plan(LOST[case], persistent=False))
    assert online.derive(model).masks == ()
    assert all(isinstance(lp.stop, Const) for lp in _tile_loops(fn))
    _passed(emulate_function(model, fn, None, seed=3))


def test_an_element_replaced_after_the_division_is_not_divided():
    bias = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(128,))
    steps, _, _ = _softmax_steps()
    model, fn = compile_function_plan(*_plan([*steps, lambda S, i, j: bias[j]], inputs=(bias,)))
    assert online.derive(model).divisors == () and not online.derive(model).scaled
    _passed(emulate_function(model, fn, None, seed=3))


# -- plan.overlap: each tile's second product under the next tile's first ---------------------------


def _softmax_one_role(**changes):
    options = {**CASES["one_role"], **changes}
    return b2b_gemm.softmax_b2b(options.pop("M"), options.pop("N"), **options)


def _overlapped(plan_and_args):
    plan, args = plan_and_args
    plan.overlap()
    return plan, args


OVERLAPPED = {**{f"softmax_{c}": (lambda c=c: _softmax(c)) for c in ("fp16_two_tiles", "bf16_three_tiles_d_ring",
                                                                   "two_warpgroups")},
              "softmax_one_role_d_ring": lambda: _softmax_one_role(d_stages=2),
              **{f"attention_{c}": (lambda c=c: attention.attention(**ATTENTION[c])) for c in ATTENTION
                 if "serial" not in c}}


@pytest.mark.parametrize("case", OVERLAPPED)
def test_an_overlapped_chain_matches_the_reference(case):
    """The same products in the same order: every block emulated (the emulator reports a register
    of a product in flight read or written, and B's stage refilled while a product reads it)."""
    model, fn = compile_function_plan(*_overlapped(OVERLAPPED[case]()))
    _passed(emulate_function(model, fn, None, seed=9))


def _consumer_tile_loop(fn) -> Loop:
    return next(s for s in walk_statements(fn.kernels[0].body) if isinstance(s, Loop) and s.var == "jt"
                and any(isinstance(x, FragmentMma) and x.d == "_e" for x in walk_statements(s.body)))


def test_overlap_issues_the_tile_befores_second_product_after_the_first_products():
    """In the loop over S's tiles: the first product's pass, then (past the first tile) the tile
    before's second product with the pass's wait leaving it in flight (wait 1; wait 0 at the first
    tile), the steps between, its wait, then this tile's conversion; the last tile's second product
    at the loop's end; the A registers declared outside the loop (the warpgroups without turns)."""
    model, fn = compile_function_plan(*_overlapped(attention.attention(**ATTENTION["d64"], alternate=False)))
    body = _consumer_tile_loop(fn).body
    pass_at = next(n for n, s in enumerate(body) if isinstance(s, Loop) and s.var == "k")
    issued = body[pass_at + 1]
    assert isinstance(issued, If) and Binary("!=", Var("j"), Const(0)) in list(subexpressions(issued.cond))
    assert any(isinstance(s, FragmentMma) and s.d == "_e" for s in issued.body)
    assert issued.body[-1] == WarpgroupWait(1) and issued.orelse == (WarpgroupWait(0),)
    converts = [n for n, s in enumerate(body) if isinstance(s, FragmentConvert)]
    waits = [n for n, s in enumerate(body) if s == WarpgroupWait(0)]
    exps = [n for n, s in enumerate(body) if isinstance(s, FragmentMap) and _calls_in(s)]
    assert exps and waits and max(exps) < min(waits) < min(converts)
    last = body[-1]
    assert isinstance(last, If) and any(isinstance(s, FragmentMma) and s.d == "_e" for s in last.body)
    declared = {s.name for s in walk_statements(fn.kernels[0].body) if isinstance(s, Fragment)}
    assert {f"_p{p}" for p in range(8)} <= declared
    assert not any(isinstance(s, Fragment) and s.name.startswith("_p") for s in walk_statements(body))


def _calls_in(s) -> bool:
    return any(isinstance(e, Call) for x in walk_statements((s,)) for e in _expressions(x))


def test_without_overlap_each_tile_waits_for_its_second_product():
    """The mutation's witness: without plan.overlap no product is issued after the first's pass."""
    model, fn = compile_function_plan(*attention.attention(**ATTENTION["d64"], overlap=False, alternate=False))
    body = _consumer_tile_loop(fn).body
    pass_at = next(n for n, s in enumerate(body) if isinstance(s, Loop) and s.var == "k")
    assert body[pass_at + 1] == WarpgroupWait(0)


def test_overlap_of_one_product_is_refused():
    from hopper_matmul import matmul

    plan, args = matmul(256, 256, 128)
    plan.overlap()
    with pytest.raises(PlanError, match=r"overlap\(\): overlap issues a chain's second product under the next "
                                        r"tile's first: it takes a fused schedule of two tensorized products.*one "
                                        r"product"):
        compile_function_plan(plan, args)


def test_overlap_without_a_producer_and_one_stage_of_b_is_refused():
    """The consumers' thread 0 would wait, at the tile's start, for the tile before's second
    product to free D's one stage: overlapped, that product is done only later in the tile."""
    with pytest.raises(PlanError, match=r"overlap\(\): D's tile of one stage is copied by the consumers' thread 0 .*"
                                        r"give D's cache stages=2, or keep the producer warpgroup"):
        compile_function_plan(*_overlapped(_softmax_one_role()))


def _zeroings(fn) -> list:
    return [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, If) and "past the nest add nothing"
            in s.comment]


@pytest.mark.parametrize("overlap", [True, False])
def test_a_partial_tile_of_keys_that_would_meet_the_next_heads_is_set_to_zero(overlap):
    """Two heads of 192 keys in tiles of 128: the last tile's keys past 192 are the next head's rows
    of K and V (inside the arrays: their copies fill no zeros there), so the tile's columns past the
    nest are set to 0 before P @ V, on the last tile alone (its columns inside the nest fewer than
    128); every block emulates to the reference."""
    model, fn = compile_function_plan(*attention.attention(M=192, N=192, d=128, batch=2, heads=1, rows=64,
                                                           kv_tile=128, overlap=overlap))
    zeroing = _zeroings(fn)
    assert len(zeroing) == 1 and isinstance(zeroing[0].body[0], FragmentMap)
    assert isinstance(zeroing[0].cond, Binary) and zeroing[0].cond.rhs == Const(128)
    _passed(emulate_function(model, fn, None, seed=12))


def _guards(fn) -> tuple[list, list]:
    """The per-element guards of the steps, and the masks of a tile crossing S's last column."""
    ifs = [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, If)]
    return ([s for s in ifs if s.comment == "the element lies inside C"],
            [s for s in ifs if "crosses S's last column" in s.comment])


def test_a_tile_crossing_the_last_key_masks_it_instead_of_guarding_every_step():
    """The softmax takes -inf as nothing (as it takes a causal mask's), so a tile of S crossing the
    last key sets its elements past it to -inf, on that tile alone, and no step guards its
    elements (one branch an element a step, every tile: 0.73x cuDNN at 4000 keys, against 0.91x at
    4096, on an H100); 1000 keys in tiles of 128 emulate to the reference."""
    model, fn = compile_function_plan(*attention.attention(M=128, N=1000, d=64, heads=2, rows=128))
    guards, masks = _guards(fn)
    assert not guards and len(masks) == 1 and isinstance(masks[0].body[0], FragmentMap)
    _passed(emulate_function(model, fn, None, seed=4))


def test_steps_that_do_not_take_minus_infinity_as_nothing_keep_their_guards():
    """The maximum of 2 S is not the maximum of S's element alone, so the proof does not take a
    masked element as nothing: the tile crossing the last of 96 columns guards each step's elements
    instead, and still emulates to the reference."""
    peak, total = (acc.Array(role=acc.Role.TEMP, element_type=T.float32, shape=(128,)) for _ in range(2))

    def start(S, i, j):
        peak[i] = -math.inf
        total[i] = 0.0

    def maximum(S, i, j):
        peak[i] = acc.max(peak[i], S[i, j] * 2.0)

    def add(S, i, j):
        total[i] += S[i, j]

    steps = [start, maximum, lambda S, i, j: acc.exp((S[i, j] * 2.0 - peak[i]) * 0.25), add,
             lambda S, i, j: S[i, j] / total[i]]
    model, fn = compile_function_plan(*_plan(steps, N=96))
    guards, masks = _guards(fn)
    assert guards and not masks
    _passed(emulate_function(model, fn, None, seed=4))


def test_whole_tiles_of_keys_are_not_set_to_zero():
    _, fn = compile_function_plan(*attention.attention(M=192, N=256, d=128, batch=2, heads=1, rows=64, kv_tile=128))
    assert not _zeroings(fn)


def test_a_partial_tile_of_columns_past_the_arrays_emulates():
    """One head's 96 keys in tiles of 64: past 96 the copies of K and V fill zeros (nothing to set
    to zero), and the row's maximum and sum skip the columns past the nest."""
    model, fn = compile_function_plan(*_overlapped(attention.attention(M=128, N=96, d=64, kv_tile=64, rows=64)))
    assert not _zeroings(fn)
    _passed(emulate_function(model, fn, None, seed=12))


def test_overlap_takes_a_bool():
    plan, _ = attention.attention(**ATTENTION["d64"])
    with pytest.raises(PlanError, match=r"overlap\(enabled='yes'\): enabled must be True or False"):
        plan.overlap("yes")


def test_overlap_with_one_tile_of_s_is_the_plan_without_it():
    """Nothing to overlap where S's columns are one tile: the same kernel."""
    options = dict(M=128, N=64, d=64, kv_tile=64, v_stages=1)
    plain = compile_function_plan(*attention.attention(**options, overlap=False))[1]
    overlapped = compile_function_plan(*_overlapped(attention.attention(**options)))[1]
    assert emit_kernel(plain.kernels[0]) == emit_kernel(overlapped.kernels[0])


def test_a_tile_whose_rows_past_the_nest_are_another_heads_stores_its_own_rows_alone():
    """Decode: 4 query rows a K/V head in a 64-row tile; the tile's other rows are the next heads'
    queries, inside O. A TMA store of the whole tile wrote them over the other blocks' rows (wrong
    on the GPU, where blocks run together): the threads store the tile's rows inside the nest
    (at most 4 from its origin), and every block emulates to the reference (the emulator reports
    two blocks storing one element)."""
    from schedc.ir.kernel import FragmentStore, TmaStore

    model, fn = compile_function_plan(*attention.attention(**ATTENTION["decode"]))
    body = list(walk_statements(fn.kernels[0].body))
    assert not any(isinstance(s, TmaStore) for s in body)
    stores = [s for s in body if isinstance(s, FragmentStore) and s.buffer == "O"]
    assert stores and all(Const(4) in list(subexpressions(s.edge.rows)) for s in stores)
    _passed(emulate_function(model, fn, None, seed=5))


@pytest.mark.parametrize("layout", ["BHSD", "BSHD"])
def test_the_attention_sample_is_attention_on_4d_tensors(layout, tmp_path):
    """The sample's function, emulated on (batch, heads, seq, d) or (batch, seq, heads, d) tensors
    of random values, against attention written with numpy alone: grouped heads (4 query heads over
    2 K/V heads, query head q reading K/V head q // 2) and the causal mask."""
    import numpy as np

    B, H, Hk, M, N, d = 2, 4, 2, 64, 128, 64
    build(*attention.attention(M=M, N=N, d=d, batch=B, heads=H, kv_heads=Hk, causal=True, rows=64,
                               kv_tile=64, layout=layout, exponential=acc.exp), "att", tmp_path)
    fn = acc.load(tmp_path / "att.hat").functions["att"]
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, n, h, d)).astype(np.float16) for n, h in ((M, H), (N, Hk), (N, Hk)))
    if layout == "BHSD":  # the same values, each tensor's memory in BHSD order
        q, k, v = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v))
        flat = lambda t: t.reshape(-1, d)  # noqa: E731
        heads_of = lambda t: t.astype(np.float64)  # noqa: E731
    else:
        flat = lambda t: t.reshape(t.shape[0] * t.shape[1], -1)  # noqa: E731
        heads_of = lambda t: t.astype(np.float64).transpose(0, 2, 1, 3)  # noqa: E731
    o = np.zeros_like(q)
    fn.emulate(flat(q), flat(k), flat(v), flat(o))
    qh, kh, vh = heads_of(q), np.repeat(heads_of(k), H // Hk, axis=1), np.repeat(heads_of(v), H // Hk, axis=1)
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores[..., np.triu(np.ones((M, N), dtype=bool), 1)] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ vh
    got = heads_of(o)
    assert np.abs(got - want).max() < 2e-3 * np.abs(want).max()


# -- plan.alternate: the consumer warpgroups issue their products in turn --------------------------


def _alternated(plan_and_args):
    plan, args = plan_and_args
    plan.alternate()
    return plan, args


ALTERNATED = {"attention_d64": lambda: attention.attention(**ATTENTION["d64"]),
              "attention_gqa_causal_128_rows": lambda: attention.attention(**{**ATTENTION["gqa_causal"], "rows": 128}),
              "attention_serial": lambda: attention.attention(**ATTENTION["d64_serial"]),
              "attention_causal_persistent": lambda: attention.attention(M=256, N=256, d=64, causal=True,
                                                                         persistent=True),
              "softmax_two_warpgroups": lambda: _softmax("two_warpgroups")}


@pytest.mark.parametrize("case", ALTERNATED)
def test_an_alternating_chain_matches_the_reference(case):
    """The consumer warpgroups run apart in the emulator (each its own coroutine), meeting at their
    turns' named barriers: every block matches the reference, and a turn handed wrong deadlocks."""
    model, fn = compile_function_plan(*_alternated(ALTERNATED[case]()))
    _passed(emulate_function(model, fn, None, seed=9))


def _named(body) -> list:
    from schedc.ir.kernel import NamedBarrier

    return [s for s in walk_statements(body) if isinstance(s, NamedBarrier) and s.threads == 256]


def test_alternate_hands_the_turn_on_after_each_tiles_first_issues():
    """Warpgroup w syncs on barrier 8 + w before the tile's first product and arrives on the next
    one's before it waits for its products (in both branches of the overlapped wait); the last
    warpgroup gives the first its first turn once, before the persistent loop."""
    model, fn = compile_function_plan(*_alternated(attention.attention(**ATTENTION["d64"])))
    kernel = fn.kernels[0]
    tile = _consumer_tile_loop(fn).body
    pass_at = next(n for n, s in enumerate(tile) if isinstance(s, Loop) and s.var == "k")
    turn = tile[pass_at - 1]
    assert _named((turn,)) == [turn] and not turn.arrive and turn.id == Binary("+", Var("warpgroup"), Const(8))
    finish = tile[pass_at + 1]
    assert isinstance(finish, If)
    nxt = Binary("+", Binary("%", Binary("+", Var("warpgroup"), Const(1)), Const(2)), Const(8))
    for branch in (finish.body, finish.orelse):
        at = next(n for n, s in enumerate(branch) if isinstance(s, WarpgroupWait))
        assert branch[at - 1].arrive and branch[at - 1].id == nxt
        assert not any(isinstance(s, FragmentMma) for s in branch[at:])
    work = next(s for s in walk_statements(kernel.body) if isinstance(s, Loop) and s.var == "work"
                and _named(s.body))
    first = [s for s in _named(kernel.body) if s.arrive and s.id == Const(8)]
    assert len(first) == 1 and not any(first[0] is s for s in walk_statements(work.body))
    assert len(_named(kernel.body)) == 4


def test_alternate_with_one_warpgroup_or_one_tile_is_the_plan_without_it():
    """Nothing to alternate with one consumer warpgroup (64 rows a block) or one tile of S's columns."""
    for options in (dict(M=128, N=256, d=64, rows=64), dict(M=256, N=64, d=64, kv_tile=64, v_stages=1)):
        plain = compile_function_plan(*attention.attention(**options))[1]
        alternated = compile_function_plan(*_alternated(attention.attention(**options)))[1]
        assert emit_kernel(plain.kernels[0]) == emit_kernel(alternated.kernels[0])


def test_alternate_of_one_product_is_refused():
    from hopper_matmul import matmul

    plan, args = matmul(256, 256, 128)
    plan.alternate()
    with pytest.raises(PlanError, match=r"alternate\(\): alternate hands the consumer warpgroups turns at issuing a "
                                        r"chain's products.*this plan has one product"):
        compile_function_plan(plan, args)


def test_alternate_without_a_producer_is_refused():
    with pytest.raises(PlanError, match=r"alternate\(\): the 2 consumer warpgroups take turns as the consumers' role "
                                        r"of a warp-specialized block.*keep warp_specialize"):
        compile_function_plan(*_alternated(attention.attention(M=256, N=384, d=64, producer=False,
                                                               persistent=False)))


def test_alternate_with_more_tiles_of_k_a_turn_than_the_ring_holds_is_refused():
    """d = 128 in tiles of 64 of k through a ring of one stage: a turn takes 2 tiles of K's ring
    for each tile of S, and the next warpgroup frees them only in its own turn (the random tester
    found the deadlock). Two stages hold them (ALTERNATED's d = 128 case emulates)."""
    with pytest.raises(PlanError, match=r"alternate\(\): a consumer warpgroup's turn takes 2 tiles of the ring of K "
                                        r"\(k\) for each tile of the first product, and the ring holds 1: .* give the "
                                        r"caches of K stages=2 or more"):
        compile_function_plan(*attention.attention(M=256, N=256, d=128, stages=1, alternate=True))


def test_alternate_takes_a_bool():
    plan, _ = attention.attention(**ATTENTION["d64"])
    with pytest.raises(PlanError, match=r"alternate\(enabled=1\): enabled must be True or False"):
        plan.alternate(1)


def test_a_turn_never_given_is_a_deadlock():
    """The emulator runs the warpgroups apart: without the first turn, each waits for the other."""
    from schedc.codegen.emulate import EmulationError
    from schedc.ir.kernel import NamedBarrier
    from schedc.ir.walk import map_stmt

    model, fn = compile_function_plan(*_alternated(attention.attention(M=256, N=256, d=64)))

    def drop(s):
        if isinstance(s, If) and any(isinstance(x, NamedBarrier) and x.arrive and x.id == Const(8) for x in s.body):
            return ()
        return s

    broken = dataclasses.replace(fn, kernels=(dataclasses.replace(fn.kernels[0],
                                                                  body=map_stmt(fn.kernels[0].body, drop)),))
    with pytest.raises(EmulationError, match=r"deadlock: no role can go on: warpgroup 0 of the consumers role waits "
                                             r"for named barrier 8 to count 256 threads \(128 counted\); warpgroup 1 "
                                             r"of the consumers role waits for named barrier 9"):
        emulate_function(model, broken, None, seed=1)


@pytest.mark.gpu
def test_an_alternating_attention_on_the_gpu(tmp_path):
    build(*_alternated(attention.attention(M=512, N=512, d=128, batch=2, heads=2, causal=True)), "alt", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "alt.hat").functions["alt"], seed=7))


# -- attention-shaped plans drawn at random ------------------------------------------------------


@st.composite
def _attention_options(draw) -> dict:
    kv_tile, rows = draw(st.sampled_from((64, 128))), draw(st.sampled_from((64, 128)))
    kv_heads = draw(st.sampled_from((1, 2)))
    N = draw(st.one_of(st.integers(1, 3).map(lambda t: kv_tile * t), st.sampled_from((96, 160, 192))))
    causal = draw(st.booleans())
    M = N if causal else draw(st.one_of(st.integers(1, 2).map(lambda t: rows * t), st.sampled_from((96, 160))))
    return dict(M=M, N=N, d=draw(st.sampled_from((64, 128))), batch=draw(st.sampled_from((1, 2))),
                heads=kv_heads * draw(st.sampled_from((1, 2))), kv_heads=kv_heads, rows=rows, kv_tile=kv_tile,
                causal=causal, lse=draw(st.booleans()), overlap=draw(st.booleans()),
                persistent=draw(st.sampled_from((None, True, False))),
                exponential=draw(st.sampled_from((acc.exp, acc.fast_exp))),
                dtype=draw(st.sampled_from((T.float16, T.bfloat16))), stages=draw(st.sampled_from((1, 2, 3))),
                v_stages=draw(st.sampled_from((1, 2))), producer=draw(st.booleans()),
                softcap=draw(st.sampled_from((None, None, 2.0))), alternate=draw(st.booleans()),
                layout=draw(st.sampled_from(("BHSD", "BSHD"))), splits=draw(st.sampled_from((1, 1, 2))))


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_attention_options())
def test_attention_plans_drawn_at_random_match_the_reference_or_are_refused(options):
    """Heads, grouped heads, causal masks, ragged queries and keys, tiles, rings, overlap, the
    exponential, soft-capping, persistence, the keys split between blocks: each plan is refused with
    a PlanError, or every block of it emulates to the float64 reference."""
    try:
        model, fn = compile_function_plan(*attention.attention(**options))
    except SchedcError:
        return
    _passed(emulate_function(model, fn, None, seed=1))


def test_a_causal_attention_runs_its_longest_query_blocks_first():
    """The query blocks (BLOCK_X in the sample) walked backwards: block 0 takes the last queries,
    whose tiles of keys are the most; the non-causal plan keeps the grid's order."""
    from schedc.ir.kernel import Let

    def lets(fn) -> list:
        return [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, Let) and s.name == "i"]

    model, fn = compile_function_plan(*attention.attention(**ATTENTION["gqa_causal"]))
    assert lets(fn) and all(Binary("-", Const(2), Var("blockIdx.x")) in list(subexpressions(s.value))
                            for s in lets(fn))
    options = {**ATTENTION["gqa_causal"], "causal": False, "persistent": False}
    model, fn = compile_function_plan(*attention.attention(**options))
    assert lets(fn) and not any(isinstance(e, Binary) and e.op == "-" for s in lets(fn)
                                for e in subexpressions(s.value))


def test_a_mask_runs_on_the_tiles_that_cross_its_edge_alone():
    """select(j <= i, S, -inf) leaves a tile whose last column is at most its first row's as it
    is: the mask's map runs under the condition that the tile's corner (its first row, last column)
    is past the edge; the kernel still matches the reference (rows past the diagonal masked)."""
    model, fn = compile_function_plan(*attention.attention(**ATTENTION["gqa_causal"]))
    guarded = [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, If)
               and any(isinstance(x, FragmentMap) and _selects(x) for x in s.body)]
    assert len(guarded) == 1
    cond = guarded[0].cond
    assert cond.op == ">" and cond.rhs == Const(0)
    assert Const(63) in list(subexpressions(cond.lhs))  # the tile's last column: jj at 63 (64 keys a tile)
    assert not any(isinstance(x, FragmentMap) and _selects(x) for x in walk_statements(fn.kernels[0].body)
                   if not any(x is y for g in guarded for y in g.body))
    _passed(emulate_function(model, fn, None, seed=13))


def _selects(s) -> bool:
    return any(isinstance(e, Call) and e.function is Function.SELECT and e.args[2] == Const(-math.inf, T.float32)
               for x in walk_statements((s,)) for e in _expressions(x))


@pytest.mark.parametrize("options", [dict(M=128, N=256, d=64, softcap=2.0, lse=True),
                                     dict(M=128, N=128, d=128, softcap=1.5, causal=True, rows=64, kv_tile=64,
                                          exponential=acc.exp)], ids=["fast", "causal_accurate"])
def test_soft_capped_scores_match_the_reference(options):
    """softcap * tanh(scale * S / softcap) before the mask and the softmax: an element-wise step on
    S before the row's maximum, the exponentials then of the capped scores as they are."""
    model, fn = compile_function_plan(*attention.attention(**options))
    tanh = Function.FAST_TANH if options.get("exponential", acc.fast_exp) is acc.fast_exp else Function.TANH
    assert _calls(fn, tanh)
    _passed(emulate_function(model, fn, None, seed=14))


@pytest.mark.parametrize("options", [
    dict(M=96, N=256, d=64, batch=2, heads=2, kv_heads=1, rows=64, lse=True),
    dict(M=4, N=512, d=128, batch=2, heads=2, rows=64),  # decode: a K/V head's 4 query heads, one query each
], ids=["ragged_queries", "decode_rows"])
def test_queries_past_the_tiles_inside_the_arrays_are_computed_and_not_stored(options):
    """A tile of 64 query rows past a head's last query reads the next head's rows of Q: S of
    those rows lives in registers alone and their O and L are not stored (every block emulated,
    every element of O and L compared)."""
    model, fn = compile_function_plan(*attention.attention(**options))
    _passed(emulate_function(model, fn, None, seed=15))


# -- the maximum kept while it grows little (Online.lazy) -----------------------------------------


def _growing(growth: float):
    """The softmax of S[i, j] + growth * j: each tile's maximum above the tile before's by about
    64 * growth (0.5 * 64 * growth in the exponentials' argument)."""
    return _softmax_steps(before=(lambda S, i, j: S[i, j] + acc.cast(j, T.float32) * growth,))[0]


def _moved(fn) -> list[If]:
    return [s for s in walk_statements(fn.kernels[0].body) if isinstance(s, If) and "maximum moved" in s.comment]


@pytest.mark.parametrize("growth", [0.0, 0.02, 2.0], ids=["flat", "kept", "taken"])
def test_the_maximum_is_kept_until_its_exponentials_would_pass_the_bound(growth):
    """Each tile's maximum 0, 0.64 (kept: its exponentials stay below 256) or 64 (taken: a kept
    one's would pass float32's range within two tiles) above the tile before's in the exponentials'
    argument: E matches the reference's whole-row softmax, and E's accumulator is corrected only
    under the test of a moved maximum."""
    model, fn = compile_function_plan(*_plan(_growing(growth)))
    assert online.derive(model).lazy
    [moved] = _moved(fn)
    assert any(isinstance(s, FragmentMap) and s.fragment == "_e" for s in walk_statements(moved.body))
    _passed(emulate_function(model, fn, None, seed=12))


def test_a_kept_maximum_only_where_no_result_depends_on_it():
    """E not divided by the sum (relative to the maximum), or an OUTPUT of the sum or of the
    maximum: the maximum is the row's, corrected each tile; a log-sum-exp is the same for any."""
    model, fn = compile_function_plan(*_plan(_steps(128, divide=False)))
    assert not online.derive(model).lazy and not _moved(fn)
    lse = attention.attention(M=128, N=256, d=64, lse=True)
    assert online.derive(compile_function_plan(*lse)[0]).lazy
    for name, (value, lazy) in KEPT_OUTPUTS.items():
        out = acc.Array(role=acc.Role.OUTPUT, element_type=T.float32, shape=(128,))
        steps, peak, total = _softmax_steps()  # exp((S - peak) * 0.5): b = -0.5
        model, fn = compile_function_plan(*_plan([*steps[:-1], _store(out, value, peak, total), steps[-1]],
                                                 inputs=(out,)))
        assert online.derive(model).lazy is lazy and bool(_moved(fn)) is lazy, name
        _passed(emulate_function(model, fn, None, seed=13))


KEPT_OUTPUTS = {  # an OUTPUT row vector (of peak, total, i) and whether the maximum may be kept beside it
    "peak": (lambda peak, total, i: peak[i], False),
    "total": (lambda peak, total, i: total[i], False),
    "lse": (lambda peak, total, i: peak[i] * 0.5 + acc.log(total[i]), True),
    "lse at another slope": (lambda peak, total, i: peak[i] * 0.25 + acc.log(total[i]), False),
}


def _store(out, value, peak, total):
    def step(S, i, j):
        out[i] = value(peak, total, i)
    return step
