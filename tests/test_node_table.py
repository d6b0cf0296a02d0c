"""Every kernel-IR node is handled everywhere: the node list comes from the unions of
schedc/ir/kernel.py, so a statement class without a CUDA emitter, an emulator executor, a
verifier rule, a text-check rule (where it holds expressions) or a place in the JSON table is
named here, and the text check refuses to pass over one with expressions."""

from __future__ import annotations

import dataclasses
import typing
from unittest import mock

import pytest

from schedc.codegen.cuda_printer import EMITTERS
from schedc.codegen.emulate import EXECUTORS
from schedc.codegen.text_check import CHECKS, UNCHECKED, check_kernel, expression_fields, unchecked
from schedc.errors import InternalError
from schedc.ir import kernel as ir
from schedc.lower.wellformed import RULES

from . import kit

STATEMENTS = typing.get_args(ir.Stmt)


def missing_handlers(classes) -> dict[str, list[str]]:
    """For each class that lacks one, what it lacks: the three backends' handlers, and a text-check
    rule (or a reason in ``text_check.UNCHECKED``) where its fields hold expressions."""
    backends = {"CUDA emitter": EMITTERS.handlers, "emulator executor": EXECUTORS.handlers,
                "IR rule": RULES.handlers}
    missing = {}
    for cls in classes:
        lacks = [name for name, handlers in backends.items() if cls not in handlers]
        lacks += ["text-check rule"] * bool(unchecked((cls,)))
        if lacks:
            missing[cls.__name__] = lacks
    return missing


@dataclasses.dataclass(frozen=True)
class Probe:
    """A statement class none of the backends knows, with an expression."""

    index: ir.Expr
    edge: ir.TileEdge | None = None


@dataclasses.dataclass(frozen=True)
class Silent:
    """A statement class without expressions: it needs no text-check rule."""

    pending: int


def test_every_statement_class_has_an_emitter_an_executor_a_verifier_rule_and_a_text_check():
    assert missing_handlers(STATEMENTS) == {}


def test_a_statement_class_without_handlers_is_named_with_what_it_lacks():
    assert missing_handlers((Probe, Silent)) == {
        "Probe": ["CUDA emitter", "emulator executor", "IR rule", "text-check rule"],
        "Silent": ["CUDA emitter", "emulator executor", "IR rule"]}
    with mock.patch.dict(CHECKS.handlers, {Probe: lambda self, s, lines: None}):
        assert missing_handlers((Probe,)) == {"Probe": ["CUDA emitter", "emulator executor", "IR rule"]}
    with mock.patch.dict(UNCHECKED, {Probe: "its expression is not printed"}):
        assert "text-check rule" not in missing_handlers((Probe,))["Probe"]


def test_expression_fields_come_from_the_declared_types():
    assert expression_fields(Probe) == ("index", "edge")  # an Expr, and a record that holds them
    assert expression_fields(Silent) == expression_fields(ir.Roles) == ()  # roles hold bodies, not expressions
    assert expression_fields(ir.TmaLoad) == ("target_origin", "coords", "index")
    assert expression_fields(ir.NamedBarrier) == ("id",)
    assert expression_fields(ir.If) == ("cond",)  # not its bodies
    with_expressions = {cls.__name__ for cls in STATEMENTS if expression_fields(cls)}
    assert {"MbarrierInit", "MbarrierArrive", "MbarrierWait", "TmaLoad", "TmaStore", "NamedBarrier"} <= with_expressions
    assert with_expressions <= {cls.__name__ for cls in CHECKS.handlers}


def test_the_text_check_refuses_a_statement_with_expressions_and_no_rule():
    k = ir.Kernel("k__gpu__", (), (1, 1, 1), (32, 1, 1), (Probe(ir.Var("threadIdx.x")),))
    printed = {Probe: lambda p, s, pad, depth: [f"{pad}probe({p.expr(s.index)});"]}
    with mock.patch.dict(EMITTERS.handlers, printed):
        with pytest.raises(InternalError, match=r"cuda text: .*k__gpu__: Probe holds expressions \(index, edge\) "
                                                r"and has no text-check rule"):
            check_kernel(k)
        with mock.patch.dict(UNCHECKED, {Probe: "its expression is not printed"}):
            assert check_kernel(k) == 0


# -- the JSON table -----------------------------------------------------------------------------


def test_the_json_table_holds_every_expression_and_statement_class():
    missing = [cls.__name__ for cls in (*typing.get_args(ir.Expr), *STATEMENTS) if ir._NODES.get(cls.__name__) is not cls]
    assert missing == []


def test_the_json_table_holds_the_records_the_fields_declare():
    for record in (ir.TileEdge, ir.Role, ir.Buffer, ir.SharedBuffer, ir.ScalarParam, ir.StructParam, ir.TensorMap,
                   ir.Persistent, ir.Kernel, ir.HostFunction):
        assert ir._NODES[record.__name__] is record


def test_a_new_statement_and_its_records_are_found_from_the_declared_types():
    found = ir.node_classes(Probe)
    assert found["Probe"] is Probe and found["TileEdge"] is ir.TileEdge and found["Var"] is ir.Var
    with mock.patch.dict(ir._NODES, found):
        probe = Probe(ir.Binary("+", ir.Var("i"), ir.Const(1)), ir.TileEdge(ir.Var("m"), ir.Const(4), "scratch"))
        assert ir.from_json(ir.to_json(probe)) == probe


def test_two_node_classes_of_one_name_are_refused():
    other = type("Var", (), {"__annotations__": {"name": "str"}})
    other = dataclasses.dataclass(frozen=True)(other)
    with pytest.raises(TypeError, match="two node classes named Var"):
        ir.node_classes(ir.Var, other)


def test_a_hopper_kernel_reads_back_from_json():
    k = kit.kernel(256, 512, 256, cluster=2)
    assert ir.from_json(ir.to_json(k)) == k
