"""Statement templates and whole random nests: element-wise maps (several per nest, reading
each other's results), reductions, matrix products and recurrences."""

from __future__ import annotations

import math
import random

from schedc.ir.types import ScalarType

from .nest import DTYPES, WIDE, Nest, NestBuilder, choose
from .program import ArrayDecl, Bin, Const, Ref, Statement, Subscript, refs
from .values import FEW, ROUNDED, Interval, sum_rounds_coarsely

KINDS = {"elementwise": 34, "reduction": 16, "matmul": 14, "recurrence": 10, "multi": 26}


def map_statement(b: NestBuilder) -> None:
    """``T[...] = value`` over all (or some) nest indices; sometimes an update of an earlier
    target at the same element (``C[i] = C[i] * 2`` after ``C[i] = ...``)."""
    again = [t for n, t in b.written().items() if b.arrays[n].role == "INPUT_OUTPUT"]
    if again and b.rng.random() < 0.2:
        target = b.rng.choice(again)
        dtype = b.arrays[target.array].dtype
        value = b.value(dtype, outputs=_outputs(b, target))
        b.add(Statement(target, value), b.interval_of(value, dtype))
        return
    rank = len(b.names) if b.rng.random() < 0.85 else b.rng.randint(1, len(b.names))
    indices = b.rng.sample(b.names, rank)
    dtype = b.narrow_for(choose(b.rng, DTYPES), math.prod(b.extents[n] for n in indices))
    role = "OUTPUT" if b.rng.random() < 0.45 else "INPUT_OUTPUT"
    value = b.value(dtype, outputs=math.prod(b.extents[n] for n in indices))
    name = b.new_array(role, dtype, rank)
    b.add(Statement(Ref(name, b.target(indices, exact=role == "OUTPUT")), value), b.interval_of(value, dtype))


def reduction_statement(b: NestBuilder, kept: list[str] | None = None) -> list[str]:
    """``T[kept] += value``, summed over the other nest indices (``C[0] += ...`` when none is
    kept): products of two reads, a constant times a read, or any value. Returns ``kept`` (a
    second reduction over the same indices: several reductions in one nest)."""
    kept = b.rng.sample(b.names, b.rng.randint(0, len(b.names) - 1)) if kept is None else kept
    terms = math.prod(b.extents[n] for n in b.names if n not in kept)
    few = math.prod(b.extents[n] for n in kept) < FEW
    half = b.rng.choice(("float16", "bfloat16"))
    dtype = half if not few and b.rng.random() < 0.2 else b.rng.choice(WIDE)
    if sum_rounds_coarsely(ScalarType(dtype), terms) or (few and ScalarType(dtype) in ROUNDED):
        dtype = b.rng.choice(("float64", "int32", "int64"))
    subs = b.target(kept, exact=False) if kept else (Subscript(None, 1, 0),)
    start = Interval(-4, 4)
    value = _summand(b, dtype, terms, start, math.prod(b.extents[n] for n in kept))
    name = b.new_array("INPUT_OUTPUT", dtype, len(subs))
    got = b.interval_of(value, dtype)
    b.add(Statement(Ref(name, subs), value, accumulate=True), Interval(-4 + terms * got.lo, 4 + terms * got.hi))
    return kept


def _outputs(b: NestBuilder, target: Ref) -> int:
    return math.prod(b.extents[x.index] for x in target.subscripts if x.index)


def _summand(b: NestBuilder, dtype: str, terms: int, start: Interval, outputs: int):
    r = b.rng.random()
    for _ in range(10):
        saved = dict(b.arrays), dict(b.env)
        if r < 0.55:
            value = b.conform(Bin("*", b.array_leaf(dtype, broadcast=0.5), b.array_leaf(dtype, broadcast=0.5)), dtype,
                              accumulate=True)
        elif r < 0.7:  # a constant times a read that some nest indices do not index
            value = b.conform(Bin("*", Const(b.rng.choice((0.5, -2.0, 3))), b.array_leaf(dtype, broadcast=0.7)), dtype,
                              accumulate=True)
        else:
            value = b.value(dtype, b.rng.choice((1, 2)), terms, start, outputs)
        if b.safe(value, dtype, terms, start, outputs):
            return value
        b.arrays, b.env = saved
    return b.read(b.new_array("INPUT", dtype, len(b.names)))


def matmul_statement(b: NestBuilder) -> None:
    """``C[m, n] += A[m, k] * B[k, n]`` with the nest indices in any roles, operands maybe
    transposed, operand types maybe narrower than C's."""
    m, n, k = b.rng.sample(b.names, 3)
    few = b.extents[m] * b.extents[n] < FEW
    small = b.extents[k] <= 32 and not few  # half precision stays in tolerance
    acc = b.rng.choice(("float64", "int32") if few else ("float32", "float32", "float64", "int32",
                                                          *(("float16",) if small else ())))
    narrower = {"float32": "float16" if small else "float32", "int32": "int8", "float64": "float32",
                "float16": "float16"}[acc]
    operand = narrower if b.rng.random() < 0.4 and not few else acc
    a = b.new_array("INPUT", operand, 2)
    c_subs = [Subscript(m), Subscript(n)]
    a_ref = Ref(a, (Subscript(m), Subscript(k)) if b.rng.random() < 0.75 else (Subscript(k), Subscript(m)))
    bb = b.new_array("INPUT", operand, 2)
    b_ref = Ref(bb, (Subscript(k), Subscript(n)) if b.rng.random() < 0.75 else (Subscript(n), Subscript(k)))
    c = b.new_array("INPUT_OUTPUT", acc, 2)
    value = b.conform(Bin("*", a_ref, b_ref), acc, accumulate=True)
    got = b.interval_of(value, acc)
    terms = b.extents[k]
    b.add(Statement(Ref(c, tuple(c_subs[::-1] if b.rng.random() < 0.15 else c_subs)), value, accumulate=True),
          Interval(-4 + terms * got.lo, 4 + terms * got.hi))


def recurrence_statement(b: NestBuilder) -> None:
    """``C[r + 1, ...] = C[r, ...] * c + value`` (or backwards: ``C[n - 1 - r] = f(C[n - r])``)
    along one nest index, in float32 or float64."""
    r = b.rng.choice(b.names)
    n = b.extents[r]
    others = [Subscript(x) for x in b.names if x != r and b.rng.random() < 0.5]
    outputs = n * math.prod(b.extents[x.index] for x in others)
    dtype = b.rng.choice(("float32", "float64")) if outputs >= FEW else "float64"
    forward = b.rng.random() < 0.7
    write = Subscript(r, 1, 1) if forward else Subscript(r, -1, n - 1)
    read = Subscript(r, 1, 0) if forward else Subscript(r, -1, n)
    term = b.value(dtype, 1)
    c = b.new_array("INPUT_OUTPUT", dtype, 1 + len(others))
    previous = Ref(c, (read, *others))
    shape = b.rng.random()
    if shape < 0.7:
        value = Bin("+", Bin("*", previous, Const(b.rng.choice((0.5, -0.5, 2.0, 1.0, -1.0)))), term)
    elif shape < 0.85:
        value = Bin("max", previous, term)
    else:
        value = Bin("-", term, previous)
    b.add(Statement(Ref(c, (write, *others)), value), Interval(-1e30, 1e30))


def random_dims(rng: random.Random, rank: int) -> tuple[int, ...]:
    """Extents 1..70, mostly small, often multiples of 8; the product kept emulatable."""
    dims = []
    for _ in range(rank):
        r = rng.random()
        n = rng.randint(1, 16) if r < 0.45 else rng.randint(17, 48) if r < 0.85 else rng.randint(49, 70)
        if n > 8 and rng.random() < 0.35:
            n -= n % 8
        dims.append(n)
    while math.prod(dims) > 40000:
        largest = dims.index(max(dims))
        dims[largest] = max(1, dims[largest] // 2)
    return tuple(dims)


def build_nest(rng: random.Random, kind: str) -> Nest:
    """A random nest of ``kind`` (KINDS): its first statement from the kind's template, then
    sometimes element-wise statements that may read what the earlier ones wrote."""
    rank = {"matmul": 3, "recurrence": rng.choice((1, 1, 2))}.get(kind, rng.choice((1, 2, 2, 3)))
    dims = random_dims(rng, rank)
    if kind == "elementwise" and rank == 1 and rng.random() < 0.4:
        dims = (rng.randint(71, 600),)  # long 1-D copies: split pairs that do not divide
    b = NestBuilder(rng, dims)
    first = {"elementwise": map_statement, "multi": map_statement, "reduction": reduction_statement,
             "matmul": matmul_statement, "recurrence": recurrence_statement}[kind]
    kept = first(b)
    if kind == "reduction" and rng.random() < 0.15:  # a second reduction over the same indices
        reduction_statement(b, kept)
    more = {"multi": rng.choice((1, 1, 2)), "elementwise": int(rng.random() < 0.2),
            "reduction": int(rng.random() < 0.2), "recurrence": int(rng.random() < 0.3)}.get(kind, 0)
    for _ in range(more):
        map_statement(b)
    return finish(b)


def finish(b: NestBuilder) -> Nest:
    """Shapes from the accesses (with some slack past the last element read), and the nest
    indices that carry a dependence."""
    statements = tuple(b.statements)
    arrays = tuple(_shaped(b, a, statements) for a in b.arrays.values() if _used(a.name, statements))
    return Nest(arrays, b.dims, statements, frozenset(carried(statements, b.names)))


def _used(name: str, statements) -> bool:
    return any(r.array == name for s in statements for r in (s.target, *refs(s)))


def _shaped(b: NestBuilder, a: ArrayDecl, statements) -> ArrayDecl:
    accesses = [r for s in statements for r in (s.target, *refs(s)) if r.array == a.name]
    shape = []
    for axis in range(len(a.shape)):
        largest = max(r.subscripts[axis].value_range(b.extents)[1] for r in accesses)
        slack = 0 if a.role == "OUTPUT" or b.rng.random() < 0.7 else b.rng.randint(1, 3)
        shape.append(largest + 1 + slack)
    return ArrayDecl(a.name, a.role, a.dtype, tuple(shape), a.layout)


def carried(statements, names) -> set[str]:
    """Nest indices along which iterations depend on each other: those a target does not
    depend on (reductions, overwrites), and those of reads of written arrays at other elements
    than the ones written."""
    out: set[str] = set()
    targets: dict[str, set[Ref]] = {}
    for s in statements:
        targets.setdefault(s.target.array, set()).add(s.target)
        out |= set(names) - {x.index for x in s.target.subscripts}
    for s in statements:
        for r in refs(s):
            if r.array in targets and any(r != t for t in targets[r.array]):
                out |= {x.index for t in (r, *targets[r.array]) for x in t.subscripts if x.index}
    return out
