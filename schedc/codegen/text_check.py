"""Check the CUDA text against the kernel IR: every expression is parsed back and compared.

The emulator runs the kernel IR, not the text, so a precedence or promotion bug in the printer
would hide behind a passing emulation (docs/architecture.md, "Backends by registry, and the text
check"). ``check_kernel`` re-prints each statement of a kernel with the Printer (Store
subscripts and values, Let values, Loop bounds, If conditions, and the pointers and bounds of
copies and tile loads), parses the text with a recursive-descent parser of exactly the C++
subset the printer emits, types it with C++'s rules (literal types, integer promotion, usual
arithmetic conversions, the ``__half`` and ``__nv_bfloat16`` operators of
cuda_fp16.h/cuda_bf16.h, which take two operands of one type, ``schedc::max``'s template
deduction), turns it into an IR tree whose dtypes are the C++ types, and compares that tree with
the IR: same operators, operands and constants, and the same type at every node. C++'s implicit
conversions appear in the parsed tree as casts, so a promotion the IR does not have is a
mismatch. The text may convert explicitly where C++ computes in a wider type:

- ``(signed char)(a * b)``: a narrow integer (or bool) operation computed exactly in ``int`` (or,
  for unsigned short products, ``unsigned int``) and converted back means the IR's operation in
  the narrow type (the emulator's: exact result wrapped to the type);
- ``(int)((unsigned int)a * (unsigned int)b)``: int and long long + - * (and negation, ``(int)((unsigned
  int)0 - (unsigned int)a)``) computed on the unsigned type, where they wrap as the IR's do;
- ``blockIdx.y * 32``, ``k + threadIdx.x``: ``unsigned int`` arithmetic on the special registers
  (``uint3``) means the IR's index arithmetic where every unsigned value it computes provably lies
  in [0, largest index]: registers are bounded by the launch shape, index variables by their
  definitions (Let values, loop ranges; IR interval arithmetic);
- literals: ``(signed char)-5``, ``1.5f``, ``__double2half(0.1)`` are constants of their type,
  valued by exact C++ literal rounding (decimal to binary, round to nearest even); an integer
  literal converted implicitly is the constant of the type it is converted to.

Scalar parameters are variables of their own C type (``float alpha``): a promotion C++ makes
around them and the IR does not have is a mismatch.

Subscripts are linearised (``A[i * 64 + j]``): an offset is compared with the IR's
``sum(subscript * stride)`` as affine forms over its non-affine parts; + - * in the index type
(and int32/int64 data, which wraps alike) compare as affine forms too, since regrouping integer
sums cannot change them; everything else compares as a tree. A mismatch raises
``InternalError("cuda text", ...)`` naming the kernel, the statement, the IR tree and the text.

The waits (``async_wait``, ``wgmma_wait``, ``bulk_wait``) and each warp role's ``setmaxnreg``
are parsed back as ``schedc::name<argument, ...>();``: the name, and their integers (pending
groups, a flag, a register count and whether it goes up or down from the launch's share) against
the IR. The statements that print a call of the runtime header (mbarriers, TMA copies, named barriers)
are parsed back as ``schedc::name(argument, ...);``: the name the IR means, and each argument
against the IR: a pointer ``&buffer[offset]`` by its offset, a tensor map's ``&name``, an integer
field (an arrival count, transaction bytes, a multicast mask, a thread count) as a literal of its
value, an expression (a parity, a coordinate, a barrier id) as a tree. Every statement class
whose fields are declared to hold expressions (``expression_fields``) has a rule in ``CHECKS``
or a reason in ``UNCHECKED``; one with neither is an InternalError, not a statement passed over.

Not covered: statements without expressions (wmma calls, barriers, copies' template arguments
are only re-printed, their pointers and bounds are checked), overflow of signed index or int32
arithmetic (C++ leaves it undefined, the emulator wraps), and whether the IR itself is right.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
import typing
from dataclasses import dataclass
from fractions import Fraction

from .. import tma
from ..errors import InternalError
from ..ir import sizes
from ..ir.functions import SIGNATURES, Function
from ..ir.kernel import (
    GRID_LIMITS,
    WARPGROUP_INDEX,
    WARPGROUP_THREADS,
    AsyncWait,
    Binary,
    BlockCopy,
    BulkWait,
    Call,
    Cast,
    Const,
    Expr,
    FragmentLoad,
    FragmentMap,
    FragmentStore,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    PrivateArray,
    Roles,
    ScalarParam,
    StageLoad,
    StageStore,
    Stmt,
    Store,
    StructParam,
    TmaLoad,
    TmaStore,
    Unary,
    Var,
    WarpgroupWait,
)
from ..ir.numeric import constant, round_exact
from ..ir.registry import Registry
from ..ir.specialize import evaluate
from ..ir.types import ScalarType
from ..ir.walk import EXPRESSIONS, map_expr, variables, walk_statements
from .cuda_printer import Printer, _literal
from .cuda_tensor import swizzle_base, swizzle_geometry

# -- C++ types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CType:
    kind: str  # bool, int, uint, float, half (a 16-bit float class of cuda_fp16.h/cuda_bf16.h)
    bits: int
    rank: int  # integer conversion rank, or float rank


_CTYPES = {
    "bool": _CType("bool", 1, 0), "signed char": _CType("int", 8, 1), "unsigned char": _CType("uint", 8, 1),
    "short": _CType("int", 16, 2), "unsigned short": _CType("uint", 16, 2), "int": _CType("int", 32, 3),
    "unsigned int": _CType("uint", 32, 3), "long": _CType("int", 64, 4), "unsigned long": _CType("uint", 64, 4),
    "long long": _CType("int", 64, 5), "unsigned long long": _CType("uint", 64, 5),
    "float": _CType("float", 32, 1), "double": _CType("float", 64, 2),
    "__half": _CType("half", 16, 0), "__nv_bfloat16": _CType("half", 16, 0),
    "__nv_fp8_e4m3": _CType("fp8", 8, 0), "__nv_fp8_e5m2": _CType("fp8", 8, 0),  # cuda_fp8.h: no operators
}
_SPELLINGS = {"unsigned": "unsigned int", **{name: name for name in _CTYPES}}
_TYPE_WORDS = {"signed", "unsigned", "char", "short", "int", "long", "bool", "float", "double", "__half",
               "__nv_bfloat16", "__nv_fp8_e4m3", "__nv_fp8_e5m2"}
_KEYWORDS = {"const", "for", "if", "else", "return", "sizeof", "this", "new", "delete", "auto", "void",
             "nullptr", "static_cast", "reinterpret_cast", "const_cast", "dynamic_cast"}
_UNSIGNED = {"int": "unsigned int", "long": "unsigned long", "long long": "unsigned long long"}
_SCALAR = {t.c_type: t for t in ScalarType}
_COMPARISONS = {"<", "<=", ">", ">=", "==", "!="}
_LOGIC = {"&&", "||"}
_ARITHMETIC = {"+", "-", "*", "/", "%"}


def _info(ctype: str) -> _CType:
    return _CTYPES[ctype]


def _is_integer(ctype: str) -> bool:
    return _info(ctype).kind in ("bool", "int", "uint")


def _range(ctype: str) -> tuple[int, int]:
    info = _info(ctype)
    if info.kind == "bool":
        return 0, 1
    if info.kind == "int":
        return -(1 << (info.bits - 1)), (1 << (info.bits - 1)) - 1
    return 0, (1 << info.bits) - 1


def _holds(outer: str, inner: str) -> bool:
    """Whether every value of the integer type ``inner`` is a value of ``outer``."""
    lo, hi = _range(inner)
    olo, ohi = _range(outer)
    return olo <= lo and hi <= ohi


def _promote(ctype: str) -> str:
    info = _info(ctype)
    if info.kind == "bool" or (info.kind in ("int", "uint") and info.bits < 32):
        return "int"
    return ctype


def _usual(a: str, b: str) -> str | None:
    """C++'s usual arithmetic conversions; None where no built-in or fp16 operator applies."""
    ia, ib = _info(a), _info(b)
    if "fp8" in (ia.kind, ib.kind):
        return None  # cuda_fp8.h: conversions only
    if "half" in (ia.kind, ib.kind):
        return a if a == b else None  # cuda_fp16.h: operators of two __half (mixing is ambiguous)
    if ia.kind == "float" or ib.kind == "float":
        floats = [t for t in (a, b) if _info(t).kind == "float"]
        return max(floats, key=lambda t: _info(t).rank)
    a, b = _promote(a), _promote(b)
    ia, ib = _info(a), _info(b)
    if a == b:
        return a
    if ia.kind == ib.kind:
        return a if ia.rank > ib.rank else b
    unsigned, signed = (a, b) if ia.kind == "uint" else (b, a)
    if _info(unsigned).rank >= _info(signed).rank:
        return unsigned
    return signed if _holds(signed, unsigned) else _UNSIGNED[signed]


# -- exact numbers -----------------------------------------------------------------------------


def _round_float(x: Fraction, ctype: str) -> float:
    """``x`` rounded to the nearest value of a binary float type (ties to even), as C++ rounds
    literals and conversions."""
    return round_exact(x, _SCALAR[ctype].float_format)


def _convert_value(value, source: str, target: str):
    """A constant converted from one C++ type to another (integers wrap, as C++20 defines)."""
    kind = _info(target).kind
    if kind == "bool":
        return value != 0
    if kind in ("int", "uint"):
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _TextError(f"{value} does not convert to {target}")
            value = math.trunc(value)
            lo, hi = _range(target)
            if not lo <= value <= hi:
                raise _TextError(f"{value} is outside {target}: the conversion is undefined")
            return value
        bits = _info(target).bits
        value = int(value) & ((1 << bits) - 1)
        return value - (1 << bits) if kind == "int" and value >> (bits - 1) else value
    value = float(value) if isinstance(value, bool) else value
    if isinstance(value, float) and (value == 0 or not math.isfinite(value)):
        return value  # zeros keep their sign, infinities and NaN stay
    return _round_float(Fraction(value), target)


def _ir_value(value, dtype: ScalarType | None):
    """What an IR constant means: the emulator's ``numeric.constant``."""
    if dtype is None:
        return int(value)
    if dtype.is_float:
        return float(constant(value, dtype))
    return int(value)


def _value_key(value) -> object:
    if isinstance(value, float):
        return repr(value)  # -0.0 and nan are values of their own
    return int(value)


# -- the parsed C++ tree -------------------------------------------------------------------------


class _TextError(Exception):
    """The text is outside the subset, does not type, or differs from the IR."""


@dataclass(frozen=True)
class _Node:
    """A typed C++ expression: ``kind`` var, lit, load, neg, conv, bin or call; ``data`` the
    name, value, operator, conversion form (implicit, cast, convert) or runtime function."""

    kind: str
    ctype: str
    args: tuple[_Node, ...] = ()
    data: object = None


_TOKEN = re.compile(r"""\s*(?:
    (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|\d+[eE][-+]?\d+[fF]?)
  | (?P<int>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>\+\+|--|\+=|::|&&|\|\||==|!=|<=|>=|[-+*/%<>()\[\],=;{}.!&~^|?:])
)""", re.VERBOSE)

_INT_SUFFIXES = {"": ("int", "long", "long long"), "u": ("unsigned int", "unsigned long", "unsigned long long"),
                 "l": ("long", "long long"), "ul": ("unsigned long", "unsigned long long"),
                 "ll": ("long long",), "ull": ("unsigned long long",)}
_HEX_SUFFIXES = {"": ("int", "unsigned int", "long", "unsigned long", "long long", "unsigned long long"),
                 "u": ("unsigned int", "unsigned long", "unsigned long long"),
                 "l": ("long", "unsigned long", "long long", "unsigned long long"),
                 "ul": ("unsigned long", "unsigned long long"), "ll": ("long long", "unsigned long long"),
                 "ull": ("unsigned long long",)}
_REGISTERS = {f"{r}.{a}": (r, "xyz".index(a)) for r in ("threadIdx", "blockIdx") for a in "xyz"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.rstrip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise _TextError(f"unexpected character {text[at:].lstrip()[:1]!r} at column {at}")
        kind = match.lastgroup
        token = match.group(kind)
        if token in ("++", "--"):
            raise _TextError(f"'{token}' (an increment or decrement, not two signs) at column {at}")
        out.append((kind, token))
        at = match.end()
    return [*out, ("end", "")]


def _int_literal(token: str) -> _Node:
    """An integer literal typed as C++ types it (LP64): the first type of its list that holds it."""
    body = token.rstrip("uUlL")
    suffix = token[len(body):].lower()
    suffix = "u" * suffix.count("u") + suffix.replace("u", "")  # lu, llu: ul, ull
    hexadecimal = body[:2].lower() == "0x"
    if suffix not in _INT_SUFFIXES or (not hexadecimal and len(body) > 1 and body.startswith("0")):
        raise _TextError(f"integer literal {token} is outside the printer's subset")
    value = int(body, 16) if hexadecimal else int(body)
    for ctype in (_HEX_SUFFIXES if hexadecimal else _INT_SUFFIXES)[suffix]:
        if _range(ctype)[0] <= value <= _range(ctype)[1]:
            return _Node("lit", ctype, data=value)
    raise _TextError(f"integer literal {token} has no type")


def _float_literal(token: str) -> _Node:
    single = token[-1] in "fF"
    ctype = "float" if single else "double"
    return _Node("lit", ctype, data=_round_float(Fraction(token.rstrip("fF")), ctype))


@dataclass(frozen=True)
class _Pointer:
    """An argument ``&buffer[offset]``: in the IR the element at ``at`` (subscripts), parsed the
    offset's tree."""

    buffer: str
    at: tuple[Expr, ...] | _Node


@dataclass(frozen=True)
class _StructRef:
    """An argument ``&name``: the address of a by-value struct parameter (a tensor map)."""

    name: str


@dataclass
class _Env:
    """What the text may name: buffers (their element types), the index type, and bounds of the
    special registers (from the launch shape) and of index variables (from their definitions)."""

    index: str
    buffers: dict[str, str]
    bounds: dict[str, tuple[int, int]]
    scalars: dict[str, str] = dataclasses.field(default_factory=dict)  # scalar parameters' C types
    structs: frozenset[str] = frozenset()  # by-value struct parameters: no values of the subset


class _Parser:
    """Recursive descent over the printer's subset of C++, typing as it goes."""

    def __init__(self, text: str, env: _Env) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.env = env

    # -- tokens --

    def peek(self, ahead: int = 0) -> str:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)][1]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.at]
        if token[0] == "end":
            raise _TextError("the text ends early")
        self.at += 1
        return token

    def expect(self, *words: str) -> None:
        for word in words:
            kind, token = self.take()
            if token != word:
                raise _TextError(f"expected {word!r}, found {token!r}")

    def name(self) -> str:
        kind, token = self.take()
        if kind != "name":
            raise _TextError(f"expected a name, found {token!r}")
        return token

    def done(self) -> None:
        if self.tokens[self.at][0] != "end":
            raise _TextError(f"unexpected {self.peek()!r} after the expression")

    def type_name(self) -> str:
        words = []
        while self.peek() in _TYPE_WORDS:
            words.append(self.take()[1])
        spelling = " ".join(words)
        if spelling not in _SPELLINGS:
            raise _TextError(f"not a type the printer emits: {spelling or self.peek()!r}")
        return _SPELLINGS[spelling]

    # -- statements --

    def store(self) -> tuple[str, _Node, _Node]:
        buffer = self.name()
        self.expect("[")
        offset = self.expr()
        self.expect("]", "=")
        value = self.expr()
        self.expect(";")
        self.done()
        return buffer, offset, value

    def let(self) -> tuple[str, str, _Node]:
        self.expect("const")
        ctype = self.type_name()
        name = self.name()
        self.expect("=")
        value = self.expr()
        self.expect(";")
        self.done()
        return ctype, name, value

    def loop(self) -> tuple[str, str, _Node, _Node, str, int]:
        self.expect("for", "(")
        ctype = self.type_name()
        var = self.name()
        self.expect("=")
        start = self.expr()
        self.expect(";")
        cond = self.expr()
        self.expect(";")
        stepped = self.name()
        self.expect("+=")
        kind, step = self.take()
        if kind != "int":
            raise _TextError(f"loop step {step!r}")
        self.expect(")", "{")
        self.done()
        return ctype, var, start, cond, stepped, int(step)

    def runtime_statement(self) -> tuple[str, list[_Node | _Pointer | _StructRef]]:
        """``schedc::name(argument, ...);``: the runtime function's name and its arguments."""
        self.expect("schedc", "::")
        function = self.name()
        self.expect("(")
        arguments = [self.argument()]
        while self.peek() == ",":
            self.take()
            arguments.append(self.argument())
        self.expect(")", ";")
        self.done()
        return function, arguments

    def argument(self) -> _Node | _Pointer | _StructRef:
        """A value, ``&buffer[offset]`` or ``&struct``."""
        if self.peek() != "&":
            return self.expr()
        self.take()
        name = self.name()
        if name in self.env.structs:
            return _StructRef(name)
        if name not in self.env.buffers:
            raise _TextError(f"&{name}: no buffer or struct parameter of the kernel")
        self.expect("[")
        offset = self.expr()
        self.expect("]")
        if not _is_integer(offset.ctype) or offset.ctype == "bool":
            raise _TextError(f"subscript of type {offset.ctype}")
        return _Pointer(name, offset)

    def branch(self) -> _Node:
        self.expect("if", "(")
        cond = self.expr()
        self.expect(")", "{")
        self.done()
        return cond

    # -- expressions, by C++ precedence --

    def expr(self) -> _Node:
        return self.binary(0)

    _LEVELS = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> _Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            node = _arithmetic(op, node, self.binary(level + 1))
        return node

    def unary(self) -> _Node:
        if self.peek() == "-":
            self.take()
            return _negate(self.unary())
        if self.peek() == "(" and self.peek(1) in _TYPE_WORDS:
            self.take()
            ctype = self.type_name()
            self.expect(")")
            return _Node("conv", ctype, (self.unary(),), "cast")
        if self.peek() in ("+", "!", "~", "&", "*"):
            raise _TextError(f"unary {self.peek()!r} is outside the printer's subset")
        return self.postfix()

    def postfix(self) -> _Node:
        kind, token = self.take()
        if kind == "int":
            return _int_literal(token)
        if kind == "float":
            return _float_literal(token)
        if token == "(":
            node = self.expr()
            self.expect(")")
            return node
        if kind != "name":
            raise _TextError(f"unexpected {token!r}")
        if token in ("true", "false"):
            return _Node("lit", "bool", data=token == "true")
        if token == "schedc":
            return self.runtime_call()
        if token in ("__double2half", "__double2bfloat16", "__longlong_as_double"):
            return self.intrinsic(token)
        return self.variable(token)

    def variable(self, name: str) -> _Node:
        if self.peek() == ".":
            self.take()
            name = f"{name}.{self.name()}"
            if name not in _REGISTERS:
                raise _TextError(f"member access {name} is outside the printer's subset")
            return _Node("var", "unsigned int", data=name)  # threadIdx and blockIdx are uint3
        if self.peek() == "[":
            if name not in self.env.buffers:
                raise _TextError(f"subscript of {name}, which is no buffer of the kernel")
            self.take()
            offset = self.expr()
            self.expect("]")
            if not _is_integer(offset.ctype) or offset.ctype == "bool":
                raise _TextError(f"subscript of type {offset.ctype}")
            return _Node("load", self.env.buffers[name], (offset,), name)
        if name in self.env.buffers or name in self.env.structs or name in _TYPE_WORDS or name in _KEYWORDS:
            raise _TextError(f"{name} used as a value")
        return _Node("var", self.env.scalars.get(name, self.env.index), data=name)

    def runtime_call(self) -> _Node:
        self.expect("::")
        function = self.name()
        if function == "convert":
            self.expect("<")
            ctype = self.type_name()
            self.expect(">", "(")
            operand = self.expr()
            self.expect(")")
            return _Node("conv", ctype, (operand,), "convert")
        if function in _FUNCTIONS:
            return self.function_call(_FUNCTIONS[function])
        if function not in ("max", "min"):
            raise _TextError(f"schedc::{function} is outside the printer's subset")
        self.expect("(")
        a = self.expr()
        self.expect(",")
        b = self.expr()
        self.expect(")")
        if a.ctype != b.ctype:  # template <typename T> T max(T a, T b): T deduced from both
            raise _TextError(f"schedc::{function}({a.ctype}, {b.ctype}): template argument deduction fails")
        return _Node("bin", a.ctype, (a, b), function)

    def function_call(self, function: Function) -> _Node:
        """``schedc::exp(x)``, ``schedc::select(c, a, b)``, ...: the runtime header's overloads."""
        self.expect("(")
        args = [self.expr()]
        while self.peek() == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        return _Node("call", _call_type(function, [a.ctype for a in args]), tuple(args), function)

    def intrinsic(self, function: str) -> _Node:
        self.expect("(")
        operand = self.expr()
        self.expect(")")
        if function == "__longlong_as_double":
            if operand.kind != "lit" or not _is_integer(operand.ctype):
                raise _TextError("__longlong_as_double of a non-literal")
            bits = _convert_value(operand.data, operand.ctype, "long long") & ((1 << 64) - 1)
            return _Node("lit", "double", data=_from_bits(bits))
        target = "__half" if function == "__double2half" else "__nv_bfloat16"
        return _Node("conv", target, (_implicit(operand, "double"),), "cast")


def _from_bits(bits: int) -> float:
    import struct

    return struct.unpack("<d", bits.to_bytes(8, "little"))[0]


_FUNCTIONS = {f.value: f for f in Function}
_FLOAT_OVERLOADS = ("float", "double", "__half", "__nv_bfloat16")
_ABS_OVERLOADS = (*_FLOAT_OVERLOADS, "signed char", "short", "int", "long long", "unsigned char", "unsigned short",
                  "unsigned int", "unsigned long long")


def _call_type(function: Function, ctypes: list[str]) -> str:
    """The type of a runtime function's call on arguments of ``ctypes``, as overload resolution
    (an exact match; the printer converts explicitly) or template deduction (select) gives it."""
    signature = SIGNATURES[function]
    where = f"schedc::{function.value}({', '.join(ctypes)})"
    if len(ctypes) != signature.arity:
        raise _TextError(f"{where}: {signature.arity} arguments expected")
    if function is Function.SELECT:
        if ctypes[0] != "bool" or ctypes[1] != ctypes[2]:
            raise _TextError(f"{where}: select(bool, T, T) does not match")
        return ctypes[1]
    if function is Function.LOGICAL_NOT:
        if ctypes[0] != "bool":
            raise _TextError(f"{where}: logical_not takes a bool")
        return "bool"
    overloads = _ABS_OVERLOADS if function is Function.ABS else _FLOAT_OVERLOADS
    if ctypes[0] not in overloads or len(set(ctypes)) != 1:
        raise _TextError(f"{where}: no overload matches exactly")
    return ctypes[0]


def _implicit(node: _Node, ctype: str) -> _Node:
    return node if node.ctype == ctype else _Node("conv", ctype, (node,), "implicit")


def _arithmetic(op: str, a: _Node, b: _Node) -> _Node:
    """``a op b`` typed as C++ types it, implicit conversions made explicit."""
    if op in _LOGIC:
        return _Node("bin", "bool", (_implicit(a, "bool"), _implicit(b, "bool")), op)
    common = _usual(a.ctype, b.ctype)
    if common is None or (op == "%" and not _is_integer(common)):
        raise _TextError(f"no operator {op} for {a.ctype} and {b.ctype}")
    result = "bool" if op in _COMPARISONS else common
    return _Node("bin", result, (_implicit(a, common), _implicit(b, common)), op)


def _negate(a: _Node) -> _Node:
    if _info(a.ctype).kind == "fp8":
        raise _TextError(f"no operator - for {a.ctype}")
    ctype = a.ctype if _info(a.ctype).kind == "half" else _promote(a.ctype)
    return _Node("neg", ctype, (_implicit(a, ctype),), "-")


# -- normalisation: the explicit conversions the text may use ---------------------------------


def _normal(node: _Node, env: _Env) -> _Node:
    """The parsed tree with the conversions that keep the IR's meaning folded away (module doc)."""
    special = _unsigned_part(node, env) or _compared_unsigned(node, env)
    if special is not None:
        return special
    if node.args:
        node = _Node(node.kind, node.ctype, tuple(_normal(a, env) for a in node.args), node.data)
    return _narrow(node) or _wrapped(node) or _fold(node)


def _wrapped(node: _Node) -> _Node | None:
    """``(int)((unsigned int)a op (unsigned int)b)`` (op + - *) and ``(int)((unsigned int)0 -
    (unsigned int)a)``, for int and long long: the IR's signed operation, which wraps (C++'s own
    signed overflow is undefined, so the printer computes it on the unsigned type)."""
    if node.kind != "conv" or node.data != "cast" or node.args[0].kind != "bin":
        return None
    target, inner = node.ctype, node.args[0]
    if _UNSIGNED.get(target) != inner.ctype or inner.data not in ("+", "-", "*"):
        return None
    operands = [_as_signed(a, target) for a in inner.args]
    if any(a is None for a in operands):
        return None
    first = inner.args[0]
    if inner.data == "-" and first.kind == "lit" and first.data == 0:
        return _Node("neg", target, (operands[1],))
    return _Node("bin", target, tuple(operands), inner.data)


def _as_signed(node: _Node, target: str) -> _Node | None:
    """An operand of ``_wrapped``: a value of ``target`` converted to its unsigned type, or a
    literal of it (the value of ``target`` it stands for)."""
    if node.kind == "conv" and node.data in ("implicit", "cast") and node.args[0].ctype == target:
        return node.args[0]
    if node.kind == "lit" and _is_integer(node.ctype):
        return _Node("lit", target, data=_convert_value(node.data, node.ctype, target))
    return None


def _fold(node: _Node) -> _Node:
    """Literals: a negated or converted literal is the literal of its value and type."""
    if len(node.args) != 1 or node.args[0].kind != "lit":
        return node
    arg = node.args[0]
    if node.kind == "neg":
        value = -arg.data
        if _info(node.ctype).kind == "uint":
            value = _convert_value(value, node.ctype, node.ctype)
        elif _info(node.ctype).kind == "int" and not _range(node.ctype)[0] <= value <= _range(node.ctype)[1]:
            return node  # overflow: no constant
        return _Node("lit", node.ctype, data=value)
    if node.kind == "conv" and node.data in ("implicit", "cast"):
        return _Node("lit", node.ctype, data=_convert_value(arg.data, arg.ctype, node.ctype))
    return node


def _narrow(node: _Node) -> _Node | None:
    """``(T)(a op b)`` and ``(T)-a`` on narrow integers or bools, computed in a wider type U
    where the exact result on any T operands fits U (or U is unsigned like T and the result only
    wraps): the IR's operation in T, which wraps the exact result to T."""
    if node.kind != "conv" or node.data != "cast" or node.args[0].kind not in ("bin", "neg"):
        return None
    target, inner = node.ctype, node.args[0]
    wide = inner.ctype
    if not _is_integer(target) or not _is_integer(wide) or wide == target or not _holds(wide, target):
        return None
    op = inner.data if inner.kind == "bin" else "neg"
    if op not in _ARITHMETIC | {"neg"}:
        return None
    operands = [_operand(a, target) for a in inner.args]
    if any(a is None for a in operands) or not _exact(op, target, wide):
        return None
    return _Node(inner.kind, target, tuple(operands), inner.data)


def _operand(node: _Node, target: str) -> _Node | None:
    """``node`` as a value of ``target``: through conversions that keep every value of it."""
    while node.kind == "conv" and node.data in ("implicit", "cast") and _is_integer(node.ctype):
        inner = node.args[0]
        if inner.ctype == target:
            return inner
        if not _is_integer(inner.ctype) or not _holds(node.ctype, inner.ctype):
            return None
        node = inner
    if node.kind == "lit" and _is_integer(node.ctype):
        lo, hi = _range(target)
        return _Node("lit", target, data=node.data) if lo <= node.data <= hi else None
    return node if node.ctype == target else None


def _exact(op: str, target: str, wide: str) -> bool:
    """Whether ``op`` on values of ``target`` computed in ``wide`` and converted back gives the
    target's result: exact in ``wide``, or wrapping modulo a power of two both share."""
    if _info(wide).kind == "uint" and _info(target).kind == "uint" and op in ("+", "-", "*"):
        return True
    lo, hi = _range(target)
    most = max(-lo, hi)
    results = {"+": (2 * lo, 2 * hi), "-": (lo - hi, hi - lo), "*": (min(lo * hi, 0), max(lo * lo, hi * hi)),
               "/": (-most, most), "%": (-most, most), "neg": (-hi, -lo)}[op]
    wlo, whi = _range(wide)
    return wlo <= results[0] and results[1] <= whi


def _unsigned_part(node: _Node, env: _Env) -> _Node | None:
    """``unsigned int`` arithmetic on the special registers (and on index values the kernel
    bounds), or its conversion to the index type, as the index arithmetic it equals: where every
    unsigned value it computes provably lies in [0, largest index], it is the exact value."""
    if node.kind == "conv" and node.ctype == env.index and node.data in ("implicit", "cast"):
        inner = node.args[0]
    elif node.ctype == "unsigned int":
        inner = node
    else:
        return None
    if inner.ctype != "unsigned int" or not _mentions_variable(inner) or not _fits(inner, env):
        return None
    return _relabel(inner, env)


def _compared_unsigned(node: _Node, env: _Env) -> _Node | None:
    """A comparison in ``unsigned int`` of two values provably in [0, largest index]: the same
    comparison of index values (``threadIdx.x < 16``)."""
    if node.kind != "bin" or node.data not in _COMPARISONS:
        return None
    if any(a.ctype != "unsigned int" or not _fits(a, env) for a in node.args):
        return None
    return dataclasses.replace(node, args=tuple(_relabel(a, env) for a in node.args))


def _mentions_variable(node: _Node) -> bool:
    return node.kind == "var" or any(_mentions_variable(a) for a in node.args)


def _fits(node: _Node, env: _Env) -> bool:
    """Every unsigned value ``node`` computes lies in [0, largest index] (its signed parts only
    need bounds: converting them checks their sign)."""
    bounds = _bounds_of(node, env)
    if bounds is None:
        return False
    if node.ctype != "unsigned int":
        return True
    limit = min((1 << 32) - 1, _range(env.index)[1])
    if bounds[0] < 0 or bounds[1] > limit or node.kind not in ("var", "lit", "conv", "bin"):
        return False
    return all(_fits(a, env) for a in node.args)


def _relabel(node: _Node, env: _Env) -> _Node:
    """An unsigned part whose values ``_fits`` proved, typed as index arithmetic."""
    if node.ctype != "unsigned int":
        return _normal(node, env)
    if node.kind == "conv":
        return _relabel(node.args[0], env)
    return _Node(node.kind, env.index, tuple(_relabel(a, env) for a in node.args), node.data)


def _bounds_of(node: _Node, env: _Env) -> tuple[int, int] | None:
    """Bounds of an integer expression's exact value, from the launch shape and the kernel's
    index variables; None where unknown."""
    if node.kind == "var":
        return env.bounds.get(node.data)
    if node.kind == "lit":
        return (node.data, node.data) if isinstance(node.data, int) and _is_integer(node.ctype) else None
    if node.kind == "conv" and node.data in ("implicit", "cast") and _is_integer(node.ctype):
        inner = _bounds_of(node.args[0], env) if _is_integer(node.args[0].ctype) else None
        lo, hi = _range(node.ctype)
        return inner if inner is not None and lo <= inner[0] and inner[1] <= hi else None
    if node.kind == "neg":
        inner = _bounds_of(node.args[0], env)
        return None if inner is None else (-inner[1], -inner[0])
    if node.kind == "bin" and node.data in _ARITHMETIC:
        a, b = (_bounds_of(x, env) for x in node.args)
        return None if a is None or b is None else _interval(node.data, a, b)
    return None


def _interval(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """Bounds of ``a op b`` (C's truncating division, for non-negative dividends)."""
    if op in ("+", "-", "*"):
        f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
        values = [f(x, y) for x in a for y in b]
        return min(values), max(values)
    if a[0] < 0 or b[0] <= 0:
        return None  # a negative dividend or a divisor that may be zero or negative
    if op == "/":
        return a[0] // b[1], a[1] // b[0]
    return 0, min(a[1], b[1] - 1)


def ir_bounds(e: Expr, bounds: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    """Bounds of an IR index expression's value, given bounds of its variables."""
    if isinstance(e, Var):
        return bounds.get(e.name)
    if isinstance(e, Const):
        return (int(e.value), int(e.value)) if e.dtype is None else None
    if isinstance(e, Unary) and e.dtype is None:
        inner = ir_bounds(e.operand, bounds)
        return None if inner is None else (-inner[1], -inner[0])
    if isinstance(e, Binary) and e.dtype is None and e.op in _ARITHMETIC:
        a, b = ir_bounds(e.lhs, bounds), ir_bounds(e.rhs, bounds)
        return None if a is None or b is None else _interval(e.op, a, b)
    return None


# -- the parsed tree as an IR tree, and keys that compare trees ---------------------------------


def _to_ir(node: _Node) -> Expr:
    """The IR tree the text denotes, its dtypes the C++ types (comparisons: None)."""
    dtype = _scalar(node.ctype)
    if node.kind == "var":
        return Var(node.data)
    if node.kind == "lit":
        return Const(node.data, dtype)
    if node.kind == "load":
        return Load(node.data, (_to_ir(node.args[0]),), dtype)
    if node.kind == "neg":
        return Unary("-", _to_ir(node.args[0]), dtype)
    if node.kind == "conv":
        return Cast(_to_ir(node.args[0]), dtype)
    if node.kind == "call":
        return Call(node.data, tuple(_to_ir(a) for a in node.args), dtype)
    lhs, rhs = (_to_ir(a) for a in node.args)
    return Binary(node.data, lhs, rhs, None if node.data in _COMPARISONS | _LOGIC else dtype)


def _scalar(ctype: str) -> ScalarType:
    if ctype not in _SCALAR:
        raise _TextError(f"the text computes in C++ type {ctype}, which is no schedc type")
    return _SCALAR[ctype]


def _ctype(dtype: ScalarType | None, index: str) -> str:
    return index if dtype is None else dtype.c_type


def _key(e: Expr, index: str) -> tuple:
    """A comparable form of an IR tree: C++ type names for dtypes (index values: the kernel's
    index type), each Load's one subscript as an affine form, and + - * on the index type as
    affine forms too (integer arithmetic, exact or modulo 2^bits, which regrouping cannot change)."""
    if isinstance(e, Var) or (_ctype(getattr(e, "dtype", None), index) == index and _affine_node(e)):
        return ("affine", _affine(e, index))
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool) and (
            e.dtype is None or e.dtype.is_integer):  # a literal is its value (the operation around it has the type)
        return ("affine", _affine(e, index))
    if isinstance(e, Const):
        return ("const", _ctype(e.dtype, index), _value_key(_ir_value(e.value, e.dtype)))
    if isinstance(e, Load):
        if len(e.index) != 1:
            raise _TextError(f"{e.buffer}: a multi-dimensional subscript reached the comparison")
        return ("load", e.buffer, e.dtype.c_type, _affine(e.index[0], index))
    if isinstance(e, Unary):
        constant = _constant_of(e)
        if constant is not None:
            return _key(constant, index)
        return ("neg", _ctype(e.dtype, index), _key(e.operand, index))
    if isinstance(e, Cast):
        return ("cast", e.dtype.c_type, _key(e.operand, index))
    if isinstance(e, Call):
        return ("call", e.function.value, e.dtype.c_type, *(_key(a, index) for a in e.args))
    if isinstance(e, Binary):
        ctype = "bool" if e.op in _COMPARISONS | _LOGIC else _ctype(e.dtype, index)
        if e.op == "-" and e.dtype in (ScalarType.int32, ScalarType.int64) and isinstance(e.lhs, Const) \
                and e.lhs.value == 0:  # 0 - x prints as -x does (on the unsigned type, wrapping alike)
            return _key(Unary("-", e.rhs, e.dtype), index)
        return ("bin", e.op, ctype, _key(e.lhs, index), _key(e.rhs, index))
    raise _TextError(f"unknown expression {e!r}")


def _affine_node(e: Expr) -> bool:
    return (isinstance(e, Const | Unary) or (isinstance(e, Binary) and e.op in ("+", "-", "*"))) and \
        not isinstance(getattr(e, "value", 0), float)


def _constant_of(e: Expr) -> Const | None:
    """A constant, or a constant negated (in its type) any number of times, as one constant."""
    if isinstance(e, Const):
        return e
    inner = _constant_of(e.operand) if isinstance(e, Unary) else None
    return Const(_negated(inner), e.dtype) if inner is not None and inner.dtype == e.dtype else None


def _negated(c: Const):
    value = _ir_value(c.value, c.dtype)
    if c.dtype is None or c.dtype.is_float:
        return -value
    return _convert_value(-value, c.dtype.c_type, c.dtype.c_type)


def _affine(e: Expr, index: str) -> frozenset:
    """``e`` as {part: coefficient} (part () the constant), its non-affine parts by ``_key``."""
    return frozenset((k, c) for k, c in _terms(e, index).items() if c)


def _terms(e: Expr, index: str) -> dict:
    if isinstance(e, Var):
        return {("var", e.name): 1}
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {(): int(e.value)}  # an integer literal is its value in any index type (``0`` in a 64-bit offset)
    if _ctype(getattr(e, "dtype", None), index) != index or not _affine_node(e):
        return {_key(e, index): 1}
    if isinstance(e, Const):
        return {(): int(e.value)}
    if isinstance(e, Unary):
        return {k: -c for k, c in _terms(e.operand, index).items()}
    lhs, rhs = _terms(e.lhs, index), _terms(e.rhs, index)
    if e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        for k, c in rhs.items():
            lhs[k] = lhs.get(k, 0) + sign * c
        return lhs
    for factor, other in ((lhs, rhs), (rhs, lhs)):
        if all(k == () for k, c in factor.items() if c):
            scale = factor.get((), 0)
            kept = frozenset((k, c) for k, c in other.items() if c and k != ())
            if scale == 0 and kept:  # what a zero multiplies still counts: its loads read memory
                return {("times zero", kept): 1}
            return {k: c * scale for k, c in other.items()}
    parts = sorted((frozenset((k, c) for k, c in t.items() if c) for t in (lhs, rhs)), key=_canonical)
    return {("product", *parts): 1}


def _canonical(x) -> str:
    """A text for ordering keys that equal keys share: a frozenset's repr follows its hash table
    (string hashes differ between processes), so its elements are sorted first, at any depth."""
    if isinstance(x, frozenset):
        return "{" + ", ".join(sorted(_canonical(e) for e in x)) + "}"
    if isinstance(x, tuple):
        return "(" + ", ".join(_canonical(e) for e in x) + ")"
    return repr(x)


def _fold_literals(e: Expr) -> Expr:
    value = _literal(e) if isinstance(e, Binary) else None
    return Const(value) if value is not None else e


def _linearised(e: Expr, strides: dict[str, tuple[int, ...]]) -> Expr:
    """``e`` with each Load's subscripts replaced by one offset, sum(subscript * stride)."""
    if isinstance(e, Load):
        offset: Expr | None = None
        for sub, stride in zip(e.index, strides[e.buffer]):
            term = Binary("*", _linearised(sub, strides), Const(stride))
            offset = term if offset is None else Binary("+", offset, term)
        return Load(e.buffer, (offset if offset is not None else Const(0),), e.dtype)
    if isinstance(e, Binary):
        return dataclasses.replace(e, lhs=_linearised(e.lhs, strides), rhs=_linearised(e.rhs, strides))
    if isinstance(e, Unary | Cast):
        return dataclasses.replace(e, operand=_linearised(e.operand, strides))
    if isinstance(e, Call):
        return dataclasses.replace(e, args=tuple(_linearised(a, strides) for a in e.args))
    return e


def show(e: Expr) -> str:
    """An IR tree, compactly: ``(* int8 (load A int8 [i]) (const int8 5))``."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return f"(const {e.dtype.value if e.dtype else 'index'} {e.value!r})"
    if isinstance(e, Load):
        return f"(load {e.buffer} {e.dtype.value} [{', '.join(show(i) for i in e.index)}])"
    if isinstance(e, Unary):
        return f"(- {e.dtype.value if e.dtype else 'index'} {show(e.operand)})"
    if isinstance(e, Cast):
        return f"(cast {e.dtype.value} {show(e.operand)})"
    if isinstance(e, Binary):
        return f"({e.op} {e.dtype.value if e.dtype else 'index'} {show(e.lhs)} {show(e.rhs)})"
    if isinstance(e, Call):
        return f"({e.function.value} {e.dtype.value} {' '.join(show(a) for a in e.args)})"
    return repr(e)


# -- the kernel walk ---------------------------------------------------------------------------


def check_kernel(kernel: Kernel, source: str | None = None) -> int:
    """Check every expression the Printer emits for ``kernel`` against its IR; with ``source``
    (the emitted kernel), also that the checked lines appear in it in order. Returns how many
    expressions were checked; raises InternalError("cuda text", ...) on the first mismatch."""
    checker = _Checker(kernel)
    limit = sys.getrecursionlimit()
    # a sum of many terms (a split-K combine of 50 parts) nests as deep as its terms, and the
    # recursive-descent parser takes eight calls a level
    sys.setrecursionlimit(max(limit, DEPTH))
    try:
        for stmt in walk_statements(kernel.body):
            checker.statement(stmt)
    finally:
        sys.setrecursionlimit(limit)
    if source is not None:
        checker.appear_in(source)
    return checker.count


DEPTH = 20000  # the recursion the text check allows itself (Python's calls, not the C stack, on 3.11+)


def _blocks(extent, axis: int, largest: dict[str, int]) -> int:
    """The most blocks (or threads) along an axis: a number, or a count of run-time sizes at
    their largest values (32-bit indexing: what the loader lets through; else CUDA's limits)."""
    if isinstance(extent, int):
        return extent
    if largest and all(v in largest for v in variables(extent)):
        return min(GRID_LIMITS[axis], evaluate(extent, largest))
    return GRID_LIMITS[axis]


def _variable_bounds(kernel: Kernel) -> dict[str, tuple[int, int]]:
    """Bounds of the special registers (launch shape) and of the index variables the kernel
    defines (Let values; loop variables from start to stop - 1), over every definition of a name;
    names with an unknown bound are left out."""
    extents = {"threadIdx": kernel.block, "blockIdx": kernel.grid}
    largest = sizes.largest(kernel.buffers) if kernel.index_type.size == 4 else {}
    bounds = {name: (0, _blocks(extents[r][axis], axis, largest) - 1) for name, (r, axis) in _REGISTERS.items()}
    bounds[WARPGROUP_INDEX.name] = (0, max(1, kernel.block[0] // WARPGROUP_THREADS) - 1)
    unknown: set[str] = set()
    for s in walk_statements(kernel.body):
        if isinstance(s, Let):
            name, found = s.name, ir_bounds(s.value, bounds)
        elif isinstance(s, Loop):
            start, stop = ir_bounds(s.start, bounds), ir_bounds(s.stop, bounds)
            name, found = s.var, None if start is None or stop is None else (start[0], max(start[0], stop[1] - 1))
        else:
            continue
        if found is None or name in unknown:
            unknown.add(name)
            bounds.pop(name, None)
        else:
            old = bounds.get(name, found)
            bounds[name] = (min(old[0], found[0]), max(old[1], found[1]))
    return bounds


CHECKS = Registry("text check")  # the statements whose lines hold expressions the check parses back
# statement classes whose fields hold expressions the CUDA text does not print, and why (none today)
UNCHECKED: dict[type, str] = {}


@functools.cache
def expression_fields(cls: type) -> tuple[str, ...]:
    """The fields of a statement class whose declared types hold expressions: an ``Expr``, a
    tuple or optional of them, or a record that holds them (``TileEdge``); nested bodies do not.

    >>> expression_fields(MbarrierWait), expression_fields(Roles)
    (('index', 'parity'), ())
    """
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if _holds_expressions(hints[f.name]))


def _holds_expressions(declared: object) -> bool:
    if declared in EXPRESSIONS:
        return True
    if isinstance(declared, type) and dataclasses.is_dataclass(declared):  # a record, or a nested statement
        return declared not in typing.get_args(Stmt) and any(
            _holds_expressions(t) for t in typing.get_type_hints(declared).values())
    return any(_holds_expressions(a) for a in typing.get_args(declared))


def unchecked(classes) -> list[str]:
    """The names of the statement classes among ``classes`` whose fields hold expressions and
    that have neither a text-check rule nor a reason in ``UNCHECKED``."""
    return sorted(cls.__name__ for cls in classes
                  if expression_fields(cls) and cls not in CHECKS.handlers and cls not in UNCHECKED)


class _Checker:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.printer = Printer(kernel)
        self.count = 0
        self.lines: list[str] = []  # the statements' lines, in order
        self.line = ""  # the statement being checked
        self.strides = {b.name: b.strides for b in (*kernel.buffers, *kernel.shared)}
        buffers = {b.name: b.dtype.c_type for b in (*kernel.buffers, *kernel.shared)}
        scalars = {v.name: v.dtype.c_type for v in kernel.values if isinstance(v, ScalarParam)}
        structs = frozenset(v.name for v in kernel.values if isinstance(v, StructParam))
        self.env = _Env(kernel.index_type.c_type, buffers, _variable_bounds(kernel), scalars, structs)

    def statement(self, s: Stmt) -> None:
        if isinstance(s, PrivateArray):
            self.strides[s.name] = s.strides
            self.env.buffers[s.name] = s.dtype.c_type
        if isinstance(s, FragmentMap):  # the body reads and writes the fragment's elements as the thread's array
            self.strides[s.fragment] = (1,)
            self.env.buffers[s.fragment] = s.dtype.c_type
        if isinstance(s, Loop | If | FragmentMap):  # the head only: the body's statements come next
            s = dataclasses.replace(s, body=(), **({"orelse": ()} if isinstance(s, If) else {}))
        if isinstance(s, Roles):  # no expressions but each role's registers; its roles' statements come next
            self.roles(s)
            return
        if unchecked((type(s),)):
            raise InternalError("cuda text", f"{self.kernel.name}: {type(s).__name__} holds expressions "
                                f"({', '.join(expression_fields(type(s)))}) and has no text-check rule")
        lines = self.printer.statement(s, 0)
        self.lines += [line for line in lines if line != "}"]
        handler = CHECKS.handlers.get(type(s))  # statements without expressions: their lines appear, in order
        if handler is not None:
            handler(self, s, lines)

    # -- statements with expressions --

    @CHECKS.handles(Store)
    def store(self, s: Store, lines: list[str]) -> None:
        self.line = lines[-1]
        buffer, offset, value = self.parse(self.line, "store", s.value)
        if buffer != s.buffer:
            self.fail(f"stores to {buffer}, the IR to {s.buffer}", s.value, self.line)
        self.compare_offset(s.buffer, s.index, offset, self.printer.offset(s.buffer, s.index))
        self.compare(s.value, value, self.printer.expr(s.value))
        element = self.env.buffers[s.buffer]
        if value.ctype != element:
            self.fail(f"the value has C++ type {value.ctype}, stored into {element} implicitly", s.value,
                      self.line)

    @CHECKS.handles(Let)
    def let(self, s: Let, lines: list[str]) -> None:
        self.line = lines[-1]
        ctype, name, value = self.parse(self.line, "let", s.value)
        value = _implicit(value, ctype)  # const T name = value: copy-initialisation converts
        if (ctype, name) != (self.kernel.index_type.c_type, s.name):
            self.fail(f"declares {ctype} {name}, the IR {self.kernel.index_type.c_type} {s.name}", s.value, self.line)
        self.compare(s.value, value, self.printer.expr(s.value))

    @CHECKS.handles(Loop)
    def loop(self, s: Loop, lines: list[str]) -> None:
        self.line = next(line for line in lines if line.startswith("for ("))
        ctype, var, start, cond, stepped, step = self.parse(self.line, "loop", s.stop)
        start = _implicit(start, ctype)
        if (ctype, var, stepped, step) != (self.kernel.index_type.c_type, s.var, s.var, s.step):
            self.fail(f"loops over {ctype} {var} by {stepped} += {step}", s.stop, self.line)
        self.compare(s.start, start, self.printer.expr(s.start))
        self.compare(Binary("<", Var(s.var), s.stop), cond, f"{s.var} < {self.printer.expr(s.stop)}")

    @CHECKS.handles(If)
    def branch(self, s: If, lines: list[str]) -> None:
        self.line = next(line for line in lines if line.startswith("if ("))
        cond = self.parse(self.line, "branch", s.cond)
        self.compare(s.cond, cond, self.printer.expr(s.cond))

    @CHECKS.handles(BlockCopy, StageLoad, StageStore, FragmentLoad, FragmentStore)
    def block_level(self, s, lines: list[str]) -> None:
        """Copies and tile loads/stores: their pointers' offsets and their bounds."""
        self.line = " ".join(lines)
        pointers = {BlockCopy: (("target", "target_origin"), ("source", "source_origin")),
                    StageLoad: (("source", "source_origin"),), StageStore: (("target", "target_origin"),),
                    FragmentLoad: (("buffer", "origin"),), FragmentStore: (("buffer", "origin"),)}[type(s)]
        for buffer_field, origin_field in pointers:
            buffer, origin = getattr(s, buffer_field), getattr(s, origin_field)
            if isinstance(s, FragmentLoad | FragmentStore) and swizzle_geometry(self.printer.buffers[buffer]) \
                    and getattr(s, "path", "") != "descriptor":  # a descriptor points at the tile itself
                origin = swizzle_base(self.printer.buffers[buffer], origin,  # rows and columns are swizzled
                                      getattr(s, "row_phase", None))
            text, ir = self.printer.offset(buffer, origin), self.offset(buffer, origin)
            if f"&{buffer}[{text}]" not in self.line:
                self.fail(f"the pointer &{buffer}[{text}] is not in the statement", ir, text)
            self.compare_offset(buffer, origin, self.parse(text, "expr", ir), text)
        edge = getattr(s, "edge", None)
        bounds = (*getattr(s, "valid", ()), *((edge.rows, edge.cols) if edge is not None else ()))
        for e in bounds:
            text = self.printer.expr(e)
            if text not in self.line:
                self.fail("a bound is not in the statement", e, text)
            self.compare(e, self.parse(text, "expr", e), text)

    # -- calls of the runtime (mbarriers, TMA copies, named barriers): the name and every argument --

    @CHECKS.handles(MbarrierInit)
    def mbarrier_init(self, s: MbarrierInit, lines: list[str]) -> None:
        self.runtime_call(s, lines, "mbarrier_init", (_Pointer(s.barrier, (s.index,)), s.count))

    @CHECKS.handles(MbarrierArrive)
    def mbarrier_arrive(self, s: MbarrierArrive, lines: list[str]) -> None:
        if s.transaction_bytes and s.cluster:
            self.fail("no runtime call arrives on a cluster's barriers with transaction bytes", s, lines[-1])
        barrier = _Pointer(s.barrier, (s.index,))
        if s.transaction_bytes:
            self.runtime_call(s, lines, "mbarrier_arrive_expect_tx", (barrier, s.transaction_bytes))
        elif s.cluster:
            self.runtime_call(s, lines, "mbarrier_arrive_cluster", (barrier, s.cluster))
        else:
            self.runtime_call(s, lines, "mbarrier_arrive", (barrier,))

    @CHECKS.handles(MbarrierWait)
    def mbarrier_wait(self, s: MbarrierWait, lines: list[str]) -> None:
        self.runtime_call(s, lines, "mbarrier_wait", (_Pointer(s.barrier, (s.index,)), s.parity))

    @CHECKS.handles(TmaLoad)
    def tma_load(self, s: TmaLoad, lines: list[str]) -> None:
        coords = self.tma_coordinates(s, lines)
        function = f"tma_load_{len(coords)}d" + ("_multicast" if s.multicast else "")
        self.runtime_call(s, lines, function, (_Pointer(s.target, s.target_origin), _StructRef(s.tensor_map),
                                               *coords, _Pointer(s.barrier, (s.index,)),
                                               *((s.multicast,) if s.multicast else ())))

    @CHECKS.handles(TmaStore)
    def tma_store(self, s: TmaStore, lines: list[str]) -> None:
        coords = self.tma_coordinates(s, lines)
        function = f"tma_{'add' if s.adds else 'store'}_{len(coords)}d"
        self.runtime_call(s, lines, function, (_StructRef(s.tensor_map), *coords,
                                               _Pointer(s.source, s.source_origin)))

    @CHECKS.handles(NamedBarrier)
    def named_barrier(self, s: NamedBarrier, lines: list[str]) -> None:
        self.runtime_call(s, lines, "named_barrier_arrive" if s.arrive else "named_barrier", (s.id, s.threads))

    # -- waits and register budgets: the integers of their template arguments --

    @CHECKS.handles(AsyncWait)
    def async_wait(self, s: AsyncWait, lines: list[str]) -> None:
        self.template_call(s, lines[-1], "async_wait", (s.pending,))

    @CHECKS.handles(WarpgroupWait)
    def wgmma_wait(self, s: WarpgroupWait, lines: list[str]) -> None:
        self.template_call(s, lines[-1], "wgmma_wait", (s.pending,))

    @CHECKS.handles(BulkWait)
    def bulk_wait(self, s: BulkWait, lines: list[str]) -> None:
        self.template_call(s, lines[-1], "bulk_wait", (s.pending, s.read))

    def roles(self, s: Roles) -> None:
        """Each role that moves its registers: ``setmaxnreg`` up or down (from the launch's share)
        to its count."""
        heads = dataclasses.replace(s, roles=tuple(dataclasses.replace(r, body=()) for r in s.roles))
        calls = [line.strip() for line in self.printer.statement(heads, 0) if "setmaxnreg" in line]
        moved = [r for r in s.roles if r.registers]
        if len(calls) != len(moved):
            self.fail(f"{len(calls)} setmaxnreg calls for {len(moved)} roles that move their registers",
                      Var("setmaxnreg"), "; ".join(calls))
        default = self.kernel.registers_at_launch
        for role, line in zip(moved, calls):
            way = "inc" if role.registers > default else "dec"
            self.template_call(s, line, f"setmaxnreg_{way}", (role.registers,))

    def template_call(self, s: Stmt, line: str, function: str, expected: tuple[int | bool, ...]) -> None:
        """The line calls ``schedc::function<...>()`` with the ``expected`` template arguments:
        integer literals of those values (``true``/``false`` for flags)."""
        self.line = line
        code = line.split("//", 1)[0].strip()
        found = re.fullmatch(r"schedc::(\w+)<([^<>]*)>\(\);", code)
        if found is None or found.group(1) != function:
            self.fail(f"does not call schedc::{function}<...>()", Var(function), code)
        arguments = [a.strip() for a in found.group(2).split(",")]
        wanted = [("true" if v else "false") if isinstance(v, bool) else str(v) for v in expected]
        self.count += len(wanted)
        if arguments != wanted:
            self.fail(f"template arguments <{', '.join(arguments)}>, the IR means <{', '.join(wanted)}>",
                      Var(function), code)

    def tma_coordinates(self, s: TmaLoad | TmaStore, lines: list[str]) -> tuple[Expr, ...]:
        """A TMA copy's coordinates in the order its tensor map lists the array's dimensions:
        innermost first (the array's slowest-first order, reversed)."""
        param = next((v for v in self.kernel.values if v.name == s.tensor_map and isinstance(v, StructParam)), None)
        if param is None:
            self.fail(f"{s.tensor_map} is no tensor map parameter of the kernel", s, lines[-1])
        array = self.printer.buffers[param.spec.array]
        return tuple(s.coords[d] for d in reversed(tma.dimension_order(array.strides)))

    def runtime_call(self, s: Stmt, lines: list[str], function: str, expected: tuple) -> None:
        """The statement's line calls ``schedc::function`` with the ``expected`` arguments:
        pointers (their offsets compared as affine forms), struct addresses, integers (literals of
        that value) and expressions (trees)."""
        self.line = lines[-1]  # after a comment line, where there is one
        code = self.line.split("//", 1)[0].strip()
        name, arguments = self.parse(code, "runtime_statement", s)
        if name != function:
            self.fail(f"calls schedc::{name}, the IR means schedc::{function}", s, code)
        if len(arguments) != len(expected):
            self.fail(f"{len(arguments)} arguments, the IR means {len(expected)}", s, code)
        for want, got in zip(expected, arguments):
            self.argument(want, got, code)

    def argument(self, want, got: _Node | _Pointer | _StructRef, text: str) -> None:
        if isinstance(want, _Pointer):
            if not isinstance(got, _Pointer) or got.buffer != want.buffer:
                self.fail(f"an argument is not a pointer into {want.buffer}", self.offset(want.buffer, want.at), text)
            self.compare_offset(want.buffer, want.at, got.at, text)
        elif isinstance(want, _StructRef):
            if got != want:
                self.fail(f"an argument is not &{want.name}", Var(want.name), text)
        elif not isinstance(got, _Node):
            self.fail("a value is passed as an address", want if not isinstance(want, int) else Const(want), text)
        elif isinstance(want, int):
            self.count += 1
            if got.kind != "lit" or not _is_integer(got.ctype) or got.ctype == "bool" or got.data != want:
                self.fail(f"an argument is not the integer {want}", Const(want), text)
        else:
            self.compare(want, got, text)

    # -- parsing and comparing --

    def parse(self, text: str, what: str, ir: Expr):
        try:
            parser = _Parser(text, self.env)
            result = getattr(parser, what)() if what != "expr" else self._expr(parser)
        except _TextError as error:
            self.fail(str(error), ir, text)
        return result

    @staticmethod
    def _expr(parser: _Parser) -> _Node:
        node = parser.expr()
        parser.done()
        return node

    def compare(self, ir: Expr, node: _Node, text: str) -> None:
        self.count += 1
        index = self.kernel.index_type.c_type
        try:
            parsed = _to_ir(_normal(node, self.env))
            same = _key(parsed, index) == _key(self.folded(_linearised(ir, self.strides)), index)
        except _TextError as error:
            self.fail(str(error), ir, text)
        if not same:
            self.fail(f"the text denotes {show(parsed)}", ir, text)

    def folded(self, ir: Expr) -> Expr:
        """The IR as the printer writes it: with a 64-bit index, index operations on literals alone
        as their value (``cuda_printer._FOLDED``)."""
        if self.kernel.index_type.c_type == "int":
            return ir
        return map_expr(ir, _fold_literals)

    def offset(self, buffer: str, index: tuple[Expr, ...]) -> Expr:
        """The IR's offset of an element: sum(subscript * stride)."""
        return _linearised(Load(buffer, index, ScalarType.int32), self.strides).index[0]

    def compare_offset(self, buffer: str, index: tuple[Expr, ...], node: _Node, text: str) -> None:
        """The printed offset against the IR's sum(subscript * stride), as affine forms."""
        self.count += 1
        ir = self.offset(buffer, index)
        try:
            parsed = _to_ir(_normal(node, self.env))
            index = self.kernel.index_type.c_type
            same = _affine(parsed, index) == _affine(self.folded(ir), index)
        except _TextError as error:
            self.fail(str(error), ir, text)
        if not same:
            self.fail(f"the offset of {buffer} denotes {show(parsed)}", ir, text)

    def fail(self, reason: str, ir: Expr, text: str):
        raise InternalError("cuda text", f"{self.kernel.name}: `{self.line.strip()}`: {reason}; "
                            f"IR {show(ir)}; text `{text}`")

    def appear_in(self, source: str) -> None:
        at = 0
        for line in self.lines:
            found = source.find(line, at)
            if found < 0:
                raise InternalError("cuda text", f"{self.kernel.name}: the checked line `{line}` is not in "
                                    "the emitted source (in this order)")
            at = found



