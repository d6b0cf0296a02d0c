"""The CUDA text is parsed back and compared with the kernel IR (schedc/codegen/text_check.py):
printer bugs the emulator cannot see (it runs the IR) are InternalErrors, and the fixed printer's
text means what the IR means, in C++'s types."""

from __future__ import annotations

import collections
import dataclasses
import functools
import random
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedc.codegen.cuda import emit_kernel, emit_source, runtime_header
from schedc.codegen.cuda_printer import _PRECEDENCE, EMITTERS, Printer
from schedc.codegen.text_check import CHECKS, UNCHECKED, check_kernel
from schedc.errors import InternalError, PackageError
from schedc.ir.kernel import (
    Binary,
    Buffer,
    BulkWait,
    Cast,
    Const,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    Roles,
    Store,
    TmaLoad,
    TmaStore,
    Unary,
    Var,
    WarpgroupWait,
)
from schedc.ir.numeric import constant
from schedc.ir.types import ScalarType
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile

from . import kit
from .plans import compile_function_plan

S = ScalarType
TYPES = list(ScalarType)
COMPUTABLE = [t for t in TYPES if t.arithmetic is t]  # the 8-bit floats are stored only
FLOATS = [t for t in TYPES if t.is_float]
I, J = Var("i"), Var("j")
SUBSCRIPTS = ((I, J), (Binary("+", I, Const(1)), J), (Const(0), Binary("-", Const(15), J)),
              (Binary("/", Binary("+", I, J), Const(3)), Binary("%", J, Const(5))))


def _a(t: ScalarType, index=(I, J)) -> Load:
    return Load(f"A_{t.value}", index, t)


def _b(t: ScalarType) -> Load:
    return Load(f"B_{t.value}", (I, J), t)


def _kernel(values: dict[ScalarType, list], index_type: ScalarType = ScalarType.int32) -> Kernel:
    """Loops over i < 8, j < 16 storing each value into C_<type>[i, j] (one row per value)."""
    buffers, stores = [], []
    for t in TYPES:
        buffers += [Buffer(f"A_{t.value}", t, (9, 16), (16, 1), "param", "input"),
                    Buffer(f"B_{t.value}", t, (9, 16), (16, 1), "param", "input")]
        rows = max(1, len(values.get(t, ())))
        buffers.append(Buffer(f"C_{t.value}", t, (rows, 8, 16), (128, 16, 1), "param", "output"))
        stores += [Store(f"C_{t.value}", (Const(n), I, J), v) for n, v in enumerate(values.get(t, ()))]
    body = (Loop("i", Const(0), Const(8), 1, (Loop("j", Const(0), Const(16), 1, tuple(stores)),)),)
    return Kernel("k__gpu__", tuple(buffers), (1, 1, 1), (32, 1, 1), body, index_type=index_type)


def _store_lines(kernel: Kernel) -> list[str]:
    return [line.strip() for line in emit_kernel(kernel).splitlines() if line.strip().startswith("C_")]


def _old_expr(self, e, parent=0):
    """Printer.expr before the fix: `-` pasted onto its operand, C++'s int promotion left alone."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return self.constant(e.value, e.dtype)
    if isinstance(e, Load):
        return f"{e.buffer}[{self.offset(e.buffer, e.index)}]"
    if isinstance(e, Cast):
        return f"schedc::convert<{e.dtype.c_type}>({self.expr(e.operand)})"
    if isinstance(e, Unary):
        return f"-{self.expr(e.operand, 7)}"
    if e.op in ("max", "min"):
        return f"schedc::{e.op}({self.expr(e.lhs)}, {self.expr(e.rhs)})"
    prec = _PRECEDENCE[e.op]
    right = prec + 1 if e.op in ("-", "/", "%") or prec < 5 else prec
    text = f"{self.expr(e.lhs, prec)} {e.op} {self.expr(e.rhs, right)}"
    return f"({text})" if prec < parent else text


def _old_printer():
    return mock.patch.object(Printer, "expr", _old_expr)


_binary, _constant = Printer.binary, Printer.constant  # the fixed ones, for patches that wrap them


def _compile(kernel: Kernel, arch: str = "sm_80", check: bool = True):
    source = (emit_source([kernel], "// text check") if check else
              "\n".join([runtime_header(), "using namespace nvcuda;", emit_kernel(kernel, check=False)]))
    return nvrtc_compile(source, "text_check", arch)


# -- the two printer bugs ------------------------------------------------------------------------


@pytest.mark.parametrize("t", [S.float32, S.int8, S.float16])
def test_a_double_negation_is_not_a_decrement(t):
    kernel = _kernel({t: [Unary("-", Unary("-", _a(t), t), t)]})
    (line,) = _store_lines(kernel)
    assert "-(-A_" in line or "-(signed char)-A_" in line, line
    assert "--" not in line
    assert check_kernel(kernel) == 6  # 2 loops (start, stop) and the store (offset, value)
    with _old_printer(), pytest.raises(InternalError, match=r"cuda text: .*'--' \(an increment or decrement"):
        check_kernel(kernel)


def test_the_old_double_negation_compiled_into_a_decrement():
    """On a writable array NVRTC took `--X[i]`: the kernel decremented X and stored X - 1."""
    x = Buffer("X", S.float32, (64,), (1,), "param", "input_output")
    store = Store("X", (Var("threadIdx.x"),), Unary("-", Unary("-", Load("X", (Var("threadIdx.x"),), S.float32),
                                                               S.float32), S.float32))
    kernel = Kernel("k__gpu__", (x,), (1, 1, 1), (64, 1, 1), (store,))
    assert "X[threadIdx.x] = -(-X[threadIdx.x]);" in emit_kernel(kernel)
    with _old_printer():
        assert "X[threadIdx.x] = --X[threadIdx.x];" in emit_kernel(kernel, check=False)
        assert _compile(kernel, check=False).cubin[:4] == b"\x7fELF"


def test_a_negated_negative_constant_keeps_its_sign():
    kernel = _kernel({S.float32: [Unary("-", Const(-2.5, S.float32), S.float32)],
                      S.int32: [Binary("-", _a(S.int32), Unary("-", Const(-7, S.int32), S.int32), S.int32)]})
    lines = _store_lines(kernel)
    assert "= -(-2.5f);" in lines[-1] and "--" not in lines[0], lines
    assert "((int)((unsigned int)0 - (unsigned int)-7))" in lines[0], lines  # int32 wraps: on unsigned int
    check_kernel(kernel)
    with _old_printer(), pytest.raises(InternalError, match="'--'"):
        check_kernel(kernel)


def test_int32_and_int64_arithmetic_wraps_through_their_unsigned_types():
    """A * 2 / 2 in int32: C++'s signed overflow is undefined (NVVM folded it to A), so + - * and
    negation are printed on the unsigned type and converted back, which the text check reads as
    the IR's wrapping operation."""
    for t, unsigned in ((S.int32, "unsigned int"), (S.int64, "unsigned long long")):
        kernel = _kernel({t: [Binary("/", Binary("*", _a(t), Const(2, t), t), Const(2, t), t),
                              Unary("-", _a(t), t)]})
        lines = _store_lines(kernel)
        assert f"(({t.c_type})(({unsigned})A_{t.value}[i * 16 + j] * ({unsigned})" in lines[0], lines
        assert f"(({t.c_type})(({unsigned})0 - ({unsigned})A_{t.value}[i * 16 + j]))" in lines[1], lines
        check_kernel(kernel)


def _int8_max_min():
    t = S.int8
    return _kernel({t: [Binary("max", Binary("*", _a(t), _b(t), t), _b(t), t),
                        Binary("min", Unary("-", _a(t), t), Binary("/", _a(t), _b(t), t), t)]})


def test_int8_max_of_a_product_computes_in_int8():
    kernel = _int8_max_min()
    lines = _store_lines(kernel)
    assert lines[0].endswith("= schedc::max((signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j]), "
                             "B_int8[i * 16 + j]);"), lines
    assert "schedc::min((signed char)-A_int8[i * 16 + j], (signed char)(A_int8[" in lines[1], lines
    check_kernel(kernel)
    with _old_printer(), pytest.raises(InternalError, match=r"schedc::max\(int, signed char\): template argument "
                                                             r"deduction fails.*IR \(max int8 \(\* int8"):
        check_kernel(kernel)


def test_an_int8_product_stored_without_conversion_is_refused():
    """Where the old text compiled (a plain store), C++ computed in int and converted on the store:
    the checker wants the conversion in the text."""
    t = S.int8
    kernel = _kernel({t: [Binary("*", _a(t), _b(t), t)]})
    check_kernel(kernel)
    with _old_printer(), pytest.raises(InternalError, match="the text denotes .*int32"):
        check_kernel(kernel)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_int8_max_min_kernel(arch):
    kernel = _int8_max_min()
    assert _compile(kernel, arch).cubin[:4] == b"\x7fELF"
    with _old_printer(), pytest.raises(PackageError, match="schedc::max"):
        _compile(kernel, arch, check=False)


def test_a_schedule_script_with_int8_max_and_a_double_negation_builds():
    """Through the front end and lowering: Accera's int8 logic prints, checks and compiles."""
    import schedc as acc
    from schedc.verify import emulate_function

    from .plans import H100, compile_plan

    A = acc.Array(role=acc.Role.INPUT, element_type=S.int8, shape=(32, 32))
    B = acc.Array(role=acc.Role.INPUT, element_type=S.int8, shape=(32, 32))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=S.int8, shape=(32, 32))
    nest = acc.Nest(shape=(32, 32, 32))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] = acc.max(C[i, j], A[i, k] * B[k, j])
        C[i, j] = acc.min(C[i, j], -(-A[i, k]))  # noqa: B002 - a double negation, on purpose

    schedule = nest.create_schedule()
    ii, jj = schedule.split(i, 16), schedule.split(j, 16)
    schedule.reorder(i, j, ii, jj, k)
    plan = schedule.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_Y, j: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.THREAD_Y,
               jj: H100.GridUnit.THREAD_X})
    model, kernel = compile_plan(plan, (A, B, C))
    source = emit_source([kernel], "// int8 max")
    assert "= schedc::max(C[(i + ii) * 32 + j + jj], (signed char)(A[(i + ii) * 32 + k] * B[k * 32 + j + jj]));" \
        in source
    assert "= schedc::min(C[(i + ii) * 32 + j + jj], (signed char)-(signed char)-A[(i + ii) * 32 + k]);" in source
    assert nvrtc_compile(source, "int8_max", "sm_90").cubin[:4] == b"\x7fELF"
    assert all(r.passed for r in emulate_function(model, kernel, blocks=1, seed=3))


# -- other cases where C++ disagreed with the IR -----------------------------------------------


def test_a_right_operand_keeps_its_parentheses_where_regrouping_rounds_differently():
    t = S.float32
    kernel = _kernel({t: [Binary("+", _a(t), Binary("+", _b(t), _a(t), t), t)]})
    (line,) = _store_lines(kernel)
    assert line.endswith("= A_float32[i * 16 + j] + (B_float32[i * 16 + j] + A_float32[i * 16 + j]);")
    with _old_printer(), pytest.raises(InternalError, match=r"the text denotes \(\+ float32 \(\+ float32"):
        check_kernel(kernel)


def test_index_arithmetic_may_regroup_and_integer_division_may_not():
    """`i + (j + 1)` is printed `i + j + 1` (exact); `i * (j / 2)` keeps its parentheses."""
    nested = Binary("+", I, Binary("+", J, Const(1)))
    divided = Binary("*", I, Binary("/", J, Const(2)))
    body = (Loop("i", Const(0), Const(8), 1, (Loop("j", Const(0), Const(8), 1, (
        Let("a", nested), Let("b", divided), Store("X", (Var("a"), Var("b")), Const(1.0, S.float32)))),)),)
    kernel = Kernel("k__gpu__", (Buffer("X", S.float32, (16, 64), (64, 1), "param", "output"),), (1, 1, 1),
                    (1, 1, 1), body)
    text = emit_kernel(kernel)
    assert "const int a = i + j + 1;" in text and "const int b = i * (j / 2);" in text
    with _old_printer(), pytest.raises(InternalError, match=r"const int b = i \* j / 2;"):
        check_kernel(kernel)


@pytest.mark.parametrize("t, value, text", [
    (S.int32, -2**31, "(int)-2147483648"),
    (S.int64, -2**63, "(long long)-9223372036854775808u"),
    (S.uint64, 2**64 - 1, "(unsigned long long)18446744073709551615u"),
    (S.float32, 1 + 2**-24, "1.0f"),  # numpy rounds the double (a tie) to 1.0; `1.0000000596046448f` is 1 + 2^-23
    (S.float32, 1e39, "(float)__longlong_as_double(0x7ff0000000000000ll)"),
    # schedc's rule (numeric.rounded), once, as __double2bfloat16 rounds: not through float32 (1.0)
    (S.bfloat16, 1 + 2**-8 + 2**-30, "__double2bfloat16(1.0078125)"),
    (S.bfloat16, 1 + 2**-8, "__double2bfloat16(1.0)"),  # a tie: to the even neighbour
    (S.bfloat16, 1 + 3 * 2**-8, "__double2bfloat16(1.015625)"),  # a tie: to the even neighbour, up
    (S.bfloat16, 1 + 2**-8 - 2**-40, "__double2bfloat16(1.0)"),
])
def test_constants_mean_the_irs_value_in_the_irs_type(t, value, text):
    kernel = _kernel({t: [Binary("max", _a(t), Const(value, t), t)]})
    (line,) = _store_lines(kernel)
    assert f", {text});" in line, line
    old = {S.int32: "-2147483648", S.int64: "(long long)-9223372036854775808",
           S.uint64: "(unsigned long long)18446744073709551615", S.float32: f"{value!r}f",
           S.bfloat16: f"__double2bfloat16({float(constant(value, t)) + 2**-7!r})"}[t]  # the next bfloat16
    if t is S.float32 and value > 1e38:
        return  # the old text, `1e+39f`, is out of float's range: NVRTC warns, the parser rounds it to inf
    with mock.patch.object(Printer, "constant", lambda self, v, d: old if v == value else _constant(self, v, d)), \
            pytest.raises(InternalError, match="cuda text"):
        check_kernel(kernel)


# -- special registers: unsigned int in C++ ------------------------------------------------------


def _register_kernel(value, grid=(1, 1, 1), index_type=ScalarType.int32, loop_stop=None):
    loop_stop = Const(128) if loop_stop is None else loop_stop
    body = (Loop("k", Const(0), loop_stop, 32, (Let("x", value), Store("Y", (Var("x"),), Const(1.0, S.float32)))),)
    buffer = Buffer("Y", S.float32, (2**31 - 1,), (1,), "param", "output")
    return Kernel("k__gpu__", (buffer,), grid, (32, 1, 1), body, index_type=index_type)


def test_unsigned_register_arithmetic_is_accepted_where_the_launch_bounds_it():
    tid, block = Var("threadIdx.x"), Var("blockIdx.x")
    check_kernel(_register_kernel(Binary("*", block, Const(4096)), grid=(2**19, 1, 1)))
    check_kernel(_register_kernel(Binary("+", Var("k"), tid)))  # k + threadIdx.x: k in [0, 96]
    check_kernel(_register_kernel(Binary("-", Const(31), tid)))
    with pytest.raises(InternalError, match=r"const int x = blockIdx.x \* 4096;.*uint32"):
        check_kernel(_register_kernel(Binary("*", block, Const(4096)), grid=(2**20, 1, 1)))  # reaches 2^32
    with pytest.raises(InternalError, match="uint32"):  # 30 - threadIdx.x goes below 0
        check_kernel(_register_kernel(Binary("-", Const(30), tid)))
    with pytest.raises(InternalError, match="uint32"):  # k has no bound
        check_kernel(_register_kernel(Binary("+", Var("k"), tid), loop_stop=Var("n")))


def test_64_bit_indexing_widens_registers_before_arithmetic():
    kernel = _register_kernel(Binary("*", Var("blockIdx.x"), Const(4096)), grid=(2**21, 1, 1), index_type=ScalarType.int64)
    assert "const long long x = (long long)blockIdx.x * 4096;" in emit_kernel(kernel)
    with mock.patch.object(Printer, "variable", lambda self, name: name), \
            pytest.raises(InternalError, match="uint32"):
        check_kernel(kernel)


def test_a_guard_on_a_register_compares_in_range():
    guard = If(Binary("<", Binary("+", Var("threadIdx.x"), Const(40)), Const(64)),
               (Store("Y", (Var("threadIdx.x"),), Const(1.0, S.float32)),))
    kernel = Kernel("k__gpu__", (Buffer("Y", S.float32, (64,), (1,), "param", "output"),), (1, 1, 1), (32, 1, 1),
                    (guard,))
    assert "if (threadIdx.x + 40 < 64) {" in emit_kernel(kernel)


# -- the checker finds precedence and promotion bugs in any text ----------------------------------


def test_the_message_names_the_statement_the_ir_and_the_text():
    kernel = _kernel({S.float32: [Binary("-", _a(S.float32), _b(S.float32), S.float32)]})
    swapped = lambda self, e, parent: _binary(self, dataclasses.replace(e, lhs=e.rhs, rhs=e.lhs), parent)  # noqa: E731
    with mock.patch.object(Printer, "binary", swapped), pytest.raises(InternalError) as error:
        check_kernel(kernel)
    message = str(error.value)
    assert message.startswith("cuda text: internal error (a bug in schedc, please report it): k__gpu__: "
                              "`C_float32[i * 16 + j] = B_float32[i * 16 + j] - A_float32[i * 16 + j];`")
    assert "IR (- float32 (load A_float32 float32 [i, j]) (load B_float32 float32 [i, j]))" in message
    assert "text `B_float32[i * 16 + j] - A_float32[i * 16 + j]`" in message


@pytest.mark.parametrize("text, error", [
    ("A_int8[i * 16 + j] * B_int8[i * 16 + j]", r"the text denotes \(\* int32 \(cast int32"),
    ("-(signed char)-A_int8[i * 16 + j]", r"the text denotes \(- int32"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j]) + 1", r"the text denotes \(\+ int32"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i + 16 * j])", "denotes"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j]", "expected"),
    ("(signed char)(A_int8[i * 16 + j] *+ B_int8[i * 16 + j])", "unary '\\+'"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j]) ? 1 : 2", "expected ';', found '\\?'"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j]);", "unexpected"),
    ("(signed char)(A_int8[i * 16 + j] * B_int8[i * 16 + j++])", "increment"),
    ("(signed char)(A_int8[i * 16 + j] * Q[i * 16 + j])", "no buffer"),
])
def test_hand_written_wrong_texts_are_refused(text, error):
    t = S.int8
    kernel = _kernel({t: [Binary("*", _a(t), _b(t), t)]})
    value = Printer.expr
    patched = lambda self, e, parent=0: text if isinstance(e, Binary) and e.op == "*" else value(self, e, parent)  # noqa: E731
    with mock.patch.object(Printer, "expr", patched), pytest.raises(InternalError, match=error):
        check_kernel(kernel)


def test_the_checked_lines_are_the_emitted_ones():
    kernel = _kernel({S.float32: [_a(S.float32)]})
    text = emit_kernel(kernel)
    check_kernel(kernel, text)
    with pytest.raises(InternalError, match="is not in the emitted source"):
        check_kernel(kernel, text.replace("A_float32[i * 16 + j]", "A_float32[j * 16 + i]"))


# -- random expression trees -----------------------------------------------------------------------

OPERATORS = ("+", "-", "*", "/", "max", "min")


class _Choices:
    """What a tree generator draws from: hypothesis's ``draw`` or a seeded ``random.Random``,
    and which types and operators it may use."""

    def __init__(self, draw=None, rng: random.Random | None = None, types=tuple(TYPES),
                 operators=OPERATORS, negate_bools: bool = True) -> None:
        self.draw, self.rng, self.types, self.operators = draw, rng, types, operators
        self.negate_bools = negate_bools

    def choice(self, options):
        return self.draw(st.sampled_from(options)) if self.draw else self.rng.choice(options)

    def constant(self, t: ScalarType):
        if t is S.bool:
            return self.choice((True, False))
        if t.is_integer:
            info = np.iinfo(t.numpy)
            edges = tuple(v for v in (int(info.min), int(info.max), -1, 0, 1, -5, 7) if info.min <= v <= info.max)
            if self.draw:
                return self.draw(st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max))))
            return self.rng.choice(edges + (self.rng.randint(int(info.min), int(info.max)),))
        edges = (0.0, -0.0, -1.5, 0.1, 1 + 2**-24, 1 + 2**-8 + 2**-30, 65504.0, 1e-8, -3e38, 1e300,
                 float("inf"), float("-inf"), float("nan"))
        if self.draw:
            return self.draw(st.one_of(st.sampled_from(edges), st.floats()))
        return self.rng.choice(edges + (self.rng.uniform(-1e6, 1e6),))


def _tree(c: _Choices, t: ScalarType, depth: int):
    if t.arithmetic is not t:  # a stored-only type (8-bit floats): loaded, or converted to from another
        if depth == 0 or c.choice((True, False)):
            return _a(t, c.choice(SUBSCRIPTS)) if c.choice((True, False)) else _b(t)
        return Cast(_tree(c, c.choice(COMPUTABLE), depth - 1), t)
    negates = "-" in c.operators and (t is not S.bool or c.negate_bools)
    kinds = ("load", "const", "binary", "binary", "cast") + (("unary",) if negates else ())
    kind = c.choice(("load", "const") if depth == 0 else kinds)
    if kind == "load":
        return _a(t, c.choice(SUBSCRIPTS)) if c.choice((True, False)) else _b(t)
    if kind == "const":
        return Const(c.constant(t), t)
    if kind == "unary":
        return Unary("-", _tree(c, t, depth - 1), t)
    if kind == "cast":
        return Cast(_tree(c, c.choice(c.types), depth - 1), t)  # (of an 8-bit float: a load, or a cast to it)
    operators = c.operators if negates else tuple(op for op in c.operators if op != "-")
    return Binary(c.choice(operators), _tree(c, t, depth - 1), _tree(c, t, depth - 1), t)


@st.composite
def trees(draw, types=tuple(TYPES)):
    t = draw(st.sampled_from(types))
    return t, _tree(_Choices(draw, types=types), t, draw(st.integers(0, 4)))


def _walk(e):
    yield e
    for child in (getattr(e, "lhs", None), getattr(e, "rhs", None), getattr(e, "operand", None)):
        if child is not None:
            yield from _walk(child)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.sampled_from([ScalarType.int32, ScalarType.int64]))
def test_random_trees_print_and_parse_back_equal(tree, index_type):
    t, e = tree
    kernel = _kernel({t: [e]}, index_type)
    assert check_kernel(kernel, emit_kernel(kernel, check=False)) == 6
    assert "--" not in "".join(_store_lines(kernel))


def _replaced(e, target, new):
    """``e`` with the node ``target`` (by identity) replaced."""
    if e is target:
        return new
    fields = {f: _replaced(getattr(e, f), target, new) for f in ("lhs", "rhs", "operand") if hasattr(e, f)}
    return dataclasses.replace(e, **fields) if fields else e


@settings(max_examples=200, deadline=None)
@given(trees(), st.integers(0, 100))
def test_swapped_operands_of_a_minus_are_refused(tree, pick):
    """The text of one `a - b` printed as `b - a`: refused wherever the IR with that node swapped
    is another tree (integer + - * compare as affine forms: `(a - b) * 0` is no other tree)."""
    from schedc.codegen.text_check import _key, _linearised

    t, e = tree
    minus = [n for n in _walk(e) if isinstance(n, Binary) and n.op == "-"]
    if not minus:
        return
    target = minus[pick % len(minus)]
    swapped = dataclasses.replace(target, lhs=target.rhs, rhs=target.lhs)
    kernel = _kernel({t: [e]})
    strides = {b.name: b.strides for b in kernel.buffers}
    if _key(_linearised(_replaced(e, target, swapped), strides), "int") == _key(_linearised(e, strides), "int"):
        return
    patched = lambda self, n, parent: _binary(self, swapped if n is target else n, parent)  # noqa: E731
    with mock.patch.object(Printer, "binary", patched), pytest.raises(InternalError, match="cuda text"):
        check_kernel(kernel)


@settings(max_examples=200, deadline=None)
@given(trees(types=tuple(FLOATS)))
def test_dropped_parentheses_are_refused(tree):
    """Floats: every pair of parentheses the printer writes changes the grouping, and so the
    rounding (integer + - * regroup freely, modulo 2^bits)."""
    t, e = tree
    kernel = _kernel({t: [e]})
    original = _store_lines(kernel)
    bare = lambda self, n, parent: _binary(self, n, 0)  # noqa: E731
    with mock.patch.object(Printer, "binary", bare):
        if _store_lines_unchecked(kernel) != original:
            with pytest.raises(InternalError, match="cuda text"):
                check_kernel(kernel)


def test_a_load_multiplied_by_zero_still_counts():
    """``A[(i + 1) * 16 + j] * 0`` printed as ``A[i + 1 * 16 + j] * 0`` reads another element
    (maybe outside A): the product's zero must not hide the load from the check."""
    load = Load("A_int32", (Binary("+", Var("i"), Const(1)), Var("j")), S.int32)
    kernel = _kernel({S.float16: [Cast(Binary("*", load, Const(0, S.int32), S.int32), S.float16)]})
    check_kernel(kernel)
    bare = lambda self, n, parent: _binary(self, n, 0)  # noqa: E731
    with mock.patch.object(Printer, "binary", bare), pytest.raises(InternalError, match="cuda text"):
        check_kernel(kernel)


def _store_lines_unchecked(kernel):
    return [line.strip() for line in emit_kernel(kernel, check=False).splitlines() if line.strip().startswith("C_")]


# -- NVRTC agrees with the checker's C++ types -------------------------------------------------------

_TYPE_TRAITS = """
template <class A, class B> struct tc_same { static constexpr bool value = false; };
template <class A> struct tc_same<A, A> { static constexpr bool value = true; };
template <class T> struct tc_bare { using type = T; };
template <class T> struct tc_bare<T&> { using type = T; };
template <class T> struct tc_bare<const T&> { using type = T; };
template <class T> struct tc_bare<const T> { using type = T; };
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_random_trees_of_every_type_in_their_types(arch):
    """Every value a store writes has exactly its array's type in C++ (what the checker requires
    of the text): asserted with decltype, so NVRTC checks the checker's type rules."""
    rng = random.Random(7)
    values = {t: [_tree(_Choices(rng=rng), t, 3) for _ in range(12)] for t in TYPES}
    for t in COMPUTABLE:  # every operator once at the top, on loads
        values[t] += [Binary(op, _a(t), _b(t), t) for op in OPERATORS] + [Unary("-", Unary("-", _a(t), t), t)]
    kernel = _kernel(values)
    source = emit_source([kernel], "// random trees")
    asserts = []
    for line in _store_lines(kernel):
        target, value = line.removesuffix(";").split(" = ", 1)
        ctype = next(b.dtype.c_type for b in kernel.buffers if b.name == target.split("[")[0])
        asserts.append(f"static_assert(tc_same<typename tc_bare<decltype({value})>::type, {ctype}>::value, "
                       f"\"{target}\");")
    marker = "        for (int j = 0; j < 16; j += 1) {\n"
    assert marker in source
    source = source.replace("using namespace nvcuda;", _TYPE_TRAITS + "using namespace nvcuda;")
    source = source.replace(marker, marker + "\n".join(asserts) + "\n")
    assert nvrtc_compile(source, "random_trees", arch).cubin[:4] == b"\x7fELF"


# -- on the GPU: the text computes what the emulator computes ----------------------------------------

EXACT = (S.bool, S.int8, S.uint8, S.int16, S.uint16, S.uint32, S.uint64)  # C++ arithmetic without UB


@pytest.mark.gpu
def test_narrow_integer_arithmetic_on_the_gpu_is_the_emulators():
    """Random trees of + - * max min, negation and casts over the types whose C++ arithmetic has no
    undefined behaviour (narrow types compute exactly in int and convert back; unsigned wraps):
    the GPU's results equal the emulator's, element for element. (No division: the emulator's
    int8 -128 / 2 is 64, and a zero divisor is undefined; no bool negation: numpy refuses it.)"""
    from schedc.codegen.emulate import emulate
    from schedc.package import driver

    from .conftest import require_gpu

    rng = random.Random(11)
    choices = _Choices(rng=rng, types=EXACT, operators=("+", "-", "*", "max", "min"), negate_bools=False)
    values = {t: [_tree(choices, t, 3) for _ in range(16)] + [_int8_like(t)] for t in EXACT}
    kernel = dataclasses.replace(_kernel(values), block=(1, 1, 1))
    data = np.random.default_rng(5)
    storage = {b.name: (data.integers(0, 256, b.size * b.dtype.size, dtype=np.uint8).view(b.dtype.numpy)
                        if b.role == "input" else np.zeros(b.size, b.dtype.numpy)) for b in kernel.params}
    storage = {k: (v != 0) if v.dtype == np.bool_ else v for k, v in storage.items()}
    with np.errstate(over="ignore"):
        expected = emulate(kernel, storage).storage
    cubin = _compile(kernel, "sm_90").cubin
    require_gpu()
    if driver.device().sm != 90:
        cubin = _compile(kernel, f"sm_{driver.device().sm}").cubin
    module = driver.Module(cubin)
    memories = {}
    for b in kernel.params:
        memories[b.name] = driver.DeviceMemory(max(b.size * b.dtype.size, 1))
        memories[b.name].upload(storage[b.name])
    driver.launch(module.function(kernel.name), kernel.grid, kernel.block, 0,
                  driver.LaunchArgs([memories[b.name].pointer for b in kernel.params]))
    driver.device().synchronize()
    for b in kernel.params:
        if b.role == "output":
            out = np.empty(b.size, b.dtype.numpy)
            memories[b.name].download(out)
            assert np.array_equal(out, expected[b.name]), (b.name, np.flatnonzero(out != expected[b.name])[:8])


def _int8_like(t: ScalarType):
    """max(a * b, c) and min(-a, b): the two cases the old printer got wrong."""
    if t is S.bool:
        return Binary("max", Binary("*", _a(t), _b(t), t), _b(t), t)
    return Binary("min", Unary("-", _a(t), t), Binary("max", Binary("*", _a(t), _b(t), t), _b(t), t), t)


def test_checking_is_fast():
    """The check runs on every build: a kernel of 100 stores takes well under a second."""
    import time

    rng = random.Random(3)
    kernel = _kernel({t: [_tree(_Choices(rng=rng), t, 3) for _ in range(8)] for t in TYPES})
    start = time.perf_counter()
    assert check_kernel(kernel) == 4 + 2 * 8 * len(TYPES)
    assert time.perf_counter() - start < 1.0


def test_emit_kernel_checks_by_default():
    kernel = _kernel({S.int8: [Binary("max", Binary("*", _a(S.int8), _b(S.int8), S.int8), _b(S.int8), S.int8)]})
    with _old_printer():
        emit_kernel(kernel, check=False)
        with pytest.raises(InternalError, match="cuda text"):
            emit_kernel(kernel)
        with pytest.raises(InternalError, match="cuda text"):
            emit_source([kernel], "// banner")


def test_float_constants_round_as_cpp_rounds_literals():
    """The checker's literal rounding (exact decimal to binary, ties to even) against numpy's."""
    from fractions import Fraction

    from schedc.codegen.text_check import _round_float

    rng = random.Random(5)
    for _ in range(2000):
        x = rng.choice([rng.uniform(-1, 1), rng.uniform(-1e5, 1e5), rng.uniform(-1e-40, 1e-40) * 1e-5,
                        rng.uniform(-1e38, 1e38)])
        assert _round_float(Fraction(x), "float") == float(np.float32(x))
        assert _round_float(Fraction(x), "double") == x
        with np.errstate(over="ignore"):
            assert _round_float(Fraction(x), "__half") == float(np.float16(x))
        # bfloat16 from a float32 value: one rounding, so ml_dtypes agrees
        single = float(np.float32(x))
        assert _round_float(Fraction(single), "__nv_bfloat16") == float(ml_dtypes.bfloat16(single))



def test_product_keys_do_not_depend_on_hash_order():
    """Equal frozensets can iterate (and print) in different orders: 1 and 9 share a slot of a
    small hash table, so the order they were added decides the repr. The product of two
    non-constant terms ordered its parts by repr, so the text and the IR of ``2 + A[..] * A[..]``
    (int32 loads, the index type) compared unequal in some processes; the order is now canonical,
    at any depth."""
    from schedc.codegen.text_check import _canonical

    one, other = frozenset([1, 9]), frozenset([9, 1])
    assert one == other and repr(one) != repr(other)
    assert _canonical(one) == _canonical(other) == "{1, 9}"
    nested = (("load", "A", frozenset([(one, 2), ((), 5)])), 1)
    again = (("load", "A", frozenset([((), 5), (other, 2)])), 1)
    assert _canonical(nested) == _canonical(again)


# -- the runtime's calls: mbarriers, TMA copies, named barriers ------------------------------------

_PLUS_ONE = Binary("+", Var("stage"), Const(1))  # not any barrier's or tile's subscript in these kernels


@functools.cache
def _hopper(variant: str) -> Kernel:
    """A Hopper sample kernel: ``cluster`` (TMA multicast, cluster arrivals), ``plain`` (local
    arrivals) or ``added`` (C's tiles added by TMA reductions)."""
    if variant == "added":
        plan, args = kit.hopper_matmul.matmul(512, 512, 64, kit.F16, block=(128, 128, 64), stages=2, output=kit.F16,
                                              persistent={"group": 2, "blocks": 8}, added=True)
        return compile_function_plan(plan, args, "mm")[1].kernels[0]
    return kit.kernel(256, 512, 256, **({"cluster": 2} if variant == "cluster" else {}))


def _misprinted(cls: type, change):
    """The CUDA emitter of ``cls`` printing ``change(statement)`` in place of the statement."""
    original = EMITTERS.handlers[cls]
    return mock.patch.dict(EMITTERS.handlers, {cls: lambda p, s, pad, depth: original(p, change(s), pad, depth)})


def _shifted(origin: tuple) -> tuple:
    return (*origin[:-1], Binary("+", origin[-1], Const(1)))


MISPRINTS = {  # statement class: (kernel, the statement as misprinted, what the check says)
    "init count": (MbarrierInit, "plain", lambda s: dataclasses.replace(s, count=s.count + 1),
                   "an argument is not the integer"),
    "init barrier": (MbarrierInit, "plain", lambda s: dataclasses.replace(s, index=_PLUS_ONE),
                     r"the offset of \w*full denotes"),
    "arrive bytes": (MbarrierArrive, "plain",
                     lambda s: dataclasses.replace(s, transaction_bytes=s.transaction_bytes and s.transaction_bytes - 2),
                     "an argument is not the integer"),
    "arrive barrier": (MbarrierArrive, "plain", lambda s: dataclasses.replace(s, index=_PLUS_ONE),
                       r"the offset of \w+ denotes"),
    "arrive cluster dropped": (MbarrierArrive, "cluster", lambda s: dataclasses.replace(s, cluster=0),
                               "calls schedc::mbarrier_arrive, the IR means schedc::mbarrier_arrive_cluster"),
    "wait parity": (MbarrierWait, "plain", lambda s: dataclasses.replace(s, parity=Binary("-", Const(1), s.parity)),
                    "the text denotes"),
    "wait barrier": (MbarrierWait, "plain", lambda s: dataclasses.replace(s, index=_PLUS_ONE),
                     r"the offset of \w+ denotes"),
    "load coordinates swapped": (TmaLoad, "plain", lambda s: dataclasses.replace(s, coords=s.coords[::-1]),
                                 "the text denotes"),
    "load tile": (TmaLoad, "plain", lambda s: dataclasses.replace(s, target_origin=_shifted(s.target_origin)),
                  r"the offset of \w+ denotes"),
    "load barrier": (TmaLoad, "plain", lambda s: dataclasses.replace(s, index=_PLUS_ONE),
                     r"the offset of \w+ denotes"),
    "load multicast mask": (TmaLoad, "cluster", lambda s: dataclasses.replace(s, multicast=s.multicast and 1),
                            "an argument is not the integer 3"),
    "store coordinates": (TmaStore, "plain", lambda s: dataclasses.replace(s, coords=_shifted(s.coords)),
                          "the text denotes"),
    "store tile": (TmaStore, "plain", lambda s: dataclasses.replace(s, source_origin=_shifted(s.source_origin)),
                   r"the offset of C_out denotes"),
    "store instead of add": (TmaStore, "added", lambda s: dataclasses.replace(s, adds=False),
                             "calls schedc::tma_store_2d, the IR means schedc::tma_add_2d"),
    "barrier threads": (NamedBarrier, "plain", lambda s: dataclasses.replace(s, threads=s.threads // 2),
                        "an argument is not the integer 128"),
    "barrier id": (NamedBarrier, "plain", lambda s: dataclasses.replace(s, id=Binary("+", s.id, Const(1))),
                   "the text denotes"),
    "barrier arrives": (NamedBarrier, "plain", lambda s: dataclasses.replace(s, arrive=True),
                        "calls schedc::named_barrier_arrive, the IR means schedc::named_barrier"),
    "wgmma wait pending": (WarpgroupWait, "plain", lambda s: dataclasses.replace(s, pending=s.pending + 1),
                           r"template arguments <\d>, the IR means <\d>"),
    "bulk wait read": (BulkWait, "plain", lambda s: dataclasses.replace(s, read=not s.read),
                       r"template arguments <\d, (true|false)>, the IR means <\d, (true|false)>"),
    "role registers": (Roles, "plain",
                       lambda s: dataclasses.replace(s, roles=tuple(dataclasses.replace(r, registers=r.registers and
                                                                                         r.registers + 8)
                                                                    for r in s.roles)),
                       r"template arguments <\d+>, the IR means <\d+>"),
}


@pytest.mark.parametrize("mistake", list(MISPRINTS))
def test_a_misprinted_runtime_call_is_refused(mistake):
    """Each of the statements that print the runtime's calls: a wrong barrier offset, count, byte
    count, parity, coordinate, tile offset, mask, thread count or function, or a wait's pending
    groups or a role's registers (template arguments), is an InternalError."""
    cls, variant, change, reason = MISPRINTS[mistake]
    kernel = _hopper(variant)
    assert check_kernel(kernel, emit_kernel(kernel, check=False)) > 0  # the sample's own text passes
    with _misprinted(cls, change), pytest.raises(InternalError, match=rf"cuda text: .* mm__gpu__: `schedc::.*{reason}"):
        check_kernel(kernel)


def test_every_runtime_call_of_the_samples_is_compared():
    """The arguments of the six statements count among the checked expressions: each pointer,
    integer and expression (a tensor map's address is only a name)."""
    kernel = _hopper("cluster")
    arguments = {MbarrierInit: 2, MbarrierWait: 2, NamedBarrier: 2, TmaStore: 3}  # the map's address: a name
    checked = {}
    for cls in (*arguments, MbarrierArrive, TmaLoad):
        with mock.patch.dict(CHECKS.handlers, {cls: lambda self, s, lines: None}), \
                mock.patch.dict(UNCHECKED, {cls: "left out to count"}):
            checked[cls] = check_kernel(kernel)
    total = check_kernel(kernel)
    statements = collections.Counter(type(s) for s in walk_statements(kernel.body))
    for cls, count in arguments.items():
        assert total - checked[cls] == count * statements[cls], cls.__name__
    arrives = [s for s in walk_statements(kernel.body) if isinstance(s, MbarrierArrive)]
    assert total - checked[MbarrierArrive] == 2 * len(arrives)  # every arrive of this kernel has bytes or a cluster
    loads = [s for s in walk_statements(kernel.body) if isinstance(s, TmaLoad)]
    assert total - checked[TmaLoad] == sum(4 + bool(s.multicast) for s in loads)


@pytest.mark.parametrize("options", [{}, {"cluster": 2}, {"specialize": False}, {"stages": 2, "output": kit.F16},
                                     {"persistent": {"blocks": 2}, "teams": 2, "block": (128, 128, 64)}])
def test_the_hopper_samples_runtime_calls_mean_their_ir(options):
    kernel = kit.kernel(256, 512, 256, **options)
    assert check_kernel(kernel, emit_kernel(kernel, check=False)) > 0


def test_a_combine_of_many_parts_is_checked(tmp_path):
    """Split-K over 47 blocks: the combine adds 47 partial sums in one expression, nested as deep
    as its terms; the text check parses it back (it ran past Python's recursion limit: found by
    the random tester)."""
    import schedc as acc

    from .plans import build

    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    I32 = acc.ScalarType.int32
    A = acc.Array(role=acc.Role.INPUT, element_type=I32, shape=(13, 51))
    B = acc.Array(role=acc.Role.INPUT, element_type=I32, shape=(12, 51))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=I32, shape=(13, 13), layout=acc.Array.Layout.LAST_MAJOR)
    nest = acc.Nest(shape=(47, 12, 13))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[k, j] += A[k, i] * B[j, i]

    schedule = nest.create_schedule()
    schedule.split(i, 1)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X})
    build(plan, (A, B, C), "combine", tmp_path)
    assert (tmp_path / "combine.cu").read_text().count("C__partial[") >= 47
