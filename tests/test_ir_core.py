"""The kernel IR's core: one traversal that reaches every statement and expression whatever the
node, and kinds that are enums checked when a node is made."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedc.ir.affine import Affine, mixed_radix
from schedc.ir.kernel import (
    AccumulatorOp,
    Binary,
    Buffer,
    BufferKind,
    Const,
    Expr,
    Fence,
    Fragment,
    FragmentApply,
    FragmentLoad,
    FragmentUse,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Role,
    Roles,
    ScalarType,
    Stmt,
    Store,
    TileEdge,
    Var,
    from_json,
    to_json,
)
from schedc.ir.walk import children, exprs, loads, map_all_exprs, map_exprs, map_stmt, substitute, walk_statements
from schedc.lower.simplify import simplify

I = Var("i")
C = Buffer("C", ScalarType.float32, (8,), (1,), "param", "input_output")


def kernel(*body: Stmt) -> Kernel:
    return Kernel("k", (C,), (1, 1, 1), (32, 1, 1), tuple(body))


ONE = Const(1.0)


def _store(value: Expr = ONE) -> Store:
    return Store("C", (I,), value)


def test_map_stmt_reaches_else_branches_and_roles():
    """The walks the issue named as missing them: If.orelse and the bodies of warp roles."""
    body = (If(Binary("<", I, Const(4)), (_store(),), orelse=(_store(),)),
            Roles((Role("producer", 0, 128, 40, (_store(),)), Role("consumer", 128, 128, 232, (_store(),)))))
    seen = []
    map_stmt(body, lambda s: seen.append(type(s).__name__) or s)
    assert seen.count("Store") == 4
    assert [type(s).__name__ for s in walk_statements(body)].count("Store") == 4
    assert len(children(body[1])) == 2


def test_expressions_of_records_are_walked():
    """A tile load's edge (a record inside the statement) holds expressions too."""
    load = FragmentLoad("a", "A", (I, Const(0)), 16, 1, edge=TileEdge(Binary("-", Var("n"), I), Const(16), "s"))
    found = list(exprs(load))
    assert Binary("-", Var("n"), I) in found and Const(16) in found
    renamed = map_all_exprs(load, lambda e: Var("j") if e == I else e)
    assert renamed.origin == (Var("j"), Const(0)) and renamed.edge.rows == Binary("-", Var("n"), Var("j"))


def test_a_new_node_class_is_walked_without_an_edit():
    """A statement class the traversal has never seen: its body and expressions are reached
    because it declares them (``tuple[Stmt, ...]``, ``Expr``)."""

    @dataclasses.dataclass(frozen=True)
    class Repeat:
        count: Expr
        body: tuple[Stmt, ...]

    body = (Repeat(Binary("+", I, Const(0)), (Let("x", Binary("*", I, Const(1))),)),)
    assert [type(s).__name__ for s in walk_statements(body)] == ["Repeat", "Let"]
    renamed = map_stmt(body, lambda s: map_all_exprs(s, lambda e: Var("k") if e == I else e))
    assert renamed[0].count == Binary("+", Var("k"), Const(0))
    assert renamed[0].body[0].value == Binary("*", Var("k"), Const(1))


def test_simplify_folds_inside_roles():
    role = Role("consumer", 0, 128, 0, (Let("x", Binary("*", Const(0), Const(256))),))
    folded = simplify(kernel(Roles((role,))))
    assert folded.body[0].roles[0].body[0].value == Const(0)


def test_map_exprs_leaves_unchanged_statements_identical():
    s = _store(Binary("+", Load("A", (I,), ScalarType.float32), Const(1.0, ScalarType.float32)))
    assert map_exprs(s, lambda e: e) is s
    assert map_stmt((s,), lambda x: x)[0] is s


def test_loads_and_substitute():
    value = Binary("*", Load("A", (I,), ScalarType.float32), Load("B", (Binary("+", I, Const(1)),), ScalarType.float32))
    assert [x.buffer for x in loads(value)] == ["A", "B"]
    assert substitute(value, {"i": Var("j")}).rhs.index == (Binary("+", Var("j"), Const(1)),)


@pytest.mark.parametrize("make", [
    lambda: FragmentApply("c", "double"),
    lambda: Fragment("a", "matrix_c", 16, 16, 16, ScalarType.float16, "fp16"),
    lambda: Fence("proxy_sync"),
    lambda: FragmentLoad("a", "A", (I,), 16, 1, path="cp.async"),
])
def test_a_kind_that_is_not_one_is_refused_when_the_node_is_made(make):
    with pytest.raises(ValueError, match="is not a valid"):
        make()


def test_kinds_read_back_from_json_as_enums():
    node = Fragment("a", "accumulator", 16, 16, 16, ScalarType.float32, "float32")
    back = from_json(to_json(node))
    assert back == node and back.use is FragmentUse.ACCUMULATOR
    assert from_json(to_json(FragmentApply("c", "relu"))).op is AccumulatorOp.RELU
    assert kernel().buffers[0].kind is BufferKind.PARAM


def test_every_accumulator_op_has_cuda_and_an_executor():
    """The backends dispatch over the whole enum: no op falls back to another's meaning."""
    from schedc.codegen import emulate
    from schedc.codegen.cuda import emit_kernel

    assert set(emulate._ACCUMULATOR_OPS) == set(AccumulatorOp)
    frag = Fragment("c", "accumulator", 16, 16, 16, ScalarType.float32, "float32")
    texts = {op: emit_kernel(kernel(frag, FragmentApply("c", op, 2.0))) for op in AccumulatorOp}
    assert "schedc::scale(c" in texts[AccumulatorOp.SCALE] and "schedc::relu(c" in texts[AccumulatorOp.RELU]
    assert "2.0f" in texts[AccumulatorOp.SET] and "schedc::scale" not in texts[AccumulatorOp.SET]


def test_loop_bodies_are_walked_in_order():
    body = (Loop("i", Const(0), Const(2), 1, (Let("a", I), Let("b", I))),)
    assert [getattr(s, "name", None) for s in walk_statements(body)] == [None, "a", "b"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-40, 40), st.integers(1, 6)), min_size=1, max_size=3),
       st.integers(0, 3))
def test_mixed_radix_subscripts_take_distinct_values_at_distinct_points(terms, split):
    """Where ``mixed_radix`` says the subscripts tell the points apart, every two points of the
    box (each name below its extent) give different subscript values (brute force)."""
    names = [f"d{n}" for n in range(len(terms))]
    extents = {name: extent for name, (_, extent) in zip(names, terms)}
    cut = min(split, len(names))
    groups = [names[:cut], names[cut:]]
    subscripts = [Affine(tuple(sorted((name, coeff) for name, (coeff, _) in zip(names, terms) if name in group
                                      and coeff)), 3) for group in groups if group]
    if not mixed_radix(subscripts, names, extents):
        return
    seen = set()
    for point in itertools.product(*(range(extents[name]) for name in names)):
        values = dict(zip(names, point))
        key = tuple(a.const + sum(c * values[v] for v, c in a.terms) for a in subscripts)
        assert key not in seen, (subscripts, point)
        seen.add(key)


def test_mixed_radix_needs_each_coefficient_past_what_the_smaller_ones_reach():
    assert mixed_radix([Affine((("b", 128), ("i", 1)))], ["b", "i"], {"b": 4, "i": 128})
    assert not mixed_radix([Affine((("b", 127), ("i", 1)))], ["b", "i"], {"b": 4, "i": 128})
    assert not mixed_radix([Affine((("i", 1),))], ["b", "i"], {"b": 4, "i": 128})  # b not told apart
