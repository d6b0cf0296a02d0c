"""Every kernel-IR node is handled everywhere: the node list comes from the unions of
schedc/ir/kernel.py, so a statement class without a CUDA emitter, an emulator executor, a
verifier rule, a text-check rule (where it holds expressions), its declared facts (buffers read,
written and moved in vectors, architecture, registers) or a place in the JSON table is named
here, and the text check refuses to pass over one with expressions. The consumers of the facts
(the architecture a package compiles for, ``__restrict__``, alignments, the register estimate)
read them: changing a class's declaration changes their answer."""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from unittest import mock

import pytest

import schedc as acc
from schedc.codegen.cuda import handed_over
from schedc.codegen.cuda_printer import EMITTERS
from schedc.codegen.emulate import EXECUTORS
from schedc.codegen.text_check import CHECKS, UNCHECKED, check_kernel, expression_fields, unchecked
from schedc.errors import InternalError
from schedc.ir import kernel as ir
from schedc.ir.walk import walk_statements
from schedc.lower import resources
from schedc.lower.wellformed import RULES
from schedc.package.build import alignments
from schedc.package.compile import arch_for

from . import kit, plans

STATEMENTS = typing.get_args(ir.Stmt)
A100 = acc.Target(acc.Target.Model.NVIDIA_A100)


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


def undeclared(classes) -> list[str]:
    """The classes that do not declare their own ``Facts`` (``kernel.declares``)."""
    return [cls.__name__ for cls in classes if not isinstance(vars(cls).get("facts"), ir.Facts)]


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


# -- declared facts ------------------------------------------------------------------------------


def test_every_statement_class_declares_its_facts():
    assert undeclared(STATEMENTS) == []


def test_a_statement_class_without_declared_facts_is_named():
    assert undeclared((ir.Barrier, Probe, Silent)) == ["Probe", "Silent"]
    with pytest.raises(InternalError, match=r"kernel IR: .*Silent declares no facts"):
        ir.required_arch(Silent(0))


def test_a_declared_buffer_that_is_no_field_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match=r"Silent declares buffers in \['source'\], which are not its fields"):
        ir.declares(reads=("source",))(Silent)


def test_the_buffers_a_statement_names_come_from_its_declaration():
    copy = ir.BlockCopy("A", (ir.Const(0),), "A_shared", (ir.Const(0),), (16,))
    assert (ir.buffers_read(copy), ir.buffers_written(copy)) == (("A",), ("A_shared",))
    load = ir.FragmentLoad("a", "A", (ir.Const(0),), 16, 1)
    assert (ir.buffers_read(load), ir.buffers_written(load)) == (("A",), ())
    edge = ir.TileEdge(ir.Var("rows"), ir.Const(16), "C_edge")
    store = ir.FragmentStore("C", (ir.Const(0),), "c", 16, 1, edge=edge)
    assert (ir.buffers_read(store), ir.buffers_written(store)) == (("C_edge",), ("C", "C_edge"))
    assert ir.buffers_read(ir.ThreadReduce("p", "+", ir.ScalarType.float32, 32)) == ()  # a warp's: no scratch
    assert ir.buffers_written(ir.Store("Y", (ir.Var("i"),), ir.Const(1.0))) == ("Y",)


def test_the_architecture_a_statement_needs_comes_from_its_declaration_and_family():
    def fragment(family: str) -> ir.Fragment:
        return ir.Fragment("c", "accumulator", 64, 64, 16, ir.ScalarType.float32, "float32", family=family)

    assert [ir.required_arch(fragment(f)) for f in ("wmma", "mma_sync", "wgmma")] == [None, None, "sm_90a"]
    assert ir.required_arch(ir.Roles(())) == ir.required_arch(ir.WarpgroupFence()) == "sm_90a"
    assert ir.required_arch(ir.Barrier()) is ir.required_arch(ir.AsyncWait(0)) is None


def test_a_hopper_kernel_compiles_for_sm90a_and_a_tensor_core_kernel_of_a100_for_its_own_arch():
    assert arch_for("sm_90", [kit.kernel(256, 512, 256)]) == "sm_90a"
    for instruction in (plans.MMA_SYNC, plans.WMMA):
        _, on_a100 = plans.compile_plan(*plans.tensor_matmul(64, 64, 64, target=A100, instruction=instruction))
        _, on_h100 = plans.compile_plan(*plans.tensor_matmul(64, 64, 64, instruction=instruction))
        assert (arch_for("sm_80", [on_a100]), arch_for("sm_90", [on_h100])) == ("sm_80", "sm_90")
    _, simt = plans.compile_plan(*plans.simt_matmul(64, 64, 64))
    assert arch_for("sm_90", [simt]) == "sm_90"


def test_changing_a_declared_arch_changes_the_architecture_compiled_for():
    """The mutation check: the Hopper kernel needs sm_90a only through its classes' declarations."""
    k = kit.kernel(256, 512, 256)
    needing = [cls for cls in STATEMENTS if cls.facts.min_arch == "sm_90a"]
    assert {cls.__name__ for cls in needing} >= {"Roles", "TmaLoad", "WarpgroupFence"}
    with contextlib.ExitStack() as undeclared_arch:
        for cls in (*needing, ir.Fragment):
            undeclared_arch.enter_context(mock.patch.object(cls, "facts", ir.Facts()))
        assert arch_for("sm_90", [k]) == "sm_90"
    with mock.patch.object(ir.Store, "facts", dataclasses.replace(ir.Store.facts, min_arch="sm_90a")):
        _, simt = plans.compile_plan(*plans.simt_matmul(64, 64, 64))
        assert arch_for("sm_90", [simt]) == "sm_90a"


def test_the_register_estimate_reads_the_declared_registers():
    _, simt = plans.compile_plan(*plans.simt_register_tile(64, 64, 64))
    tiles = sum(s.registers for s in walk_statements(simt.body) if isinstance(s, ir.PrivateArray))
    estimate = resources.registers(simt)
    assert tiles > 0 and estimate >= resources.BASE_REGISTERS + tiles
    with mock.patch.object(ir.PrivateArray, "facts", ir.Facts()):
        assert resources.registers(simt) == estimate - tiles


def test_arrays_a_kernel_with_a_barrier_copies_into_and_reads_are_not_restrict():
    """``handed_over`` reads the declared buffers: a block copy's target written, a tile load's
    source read, both across a barrier."""
    x = ir.Buffer("X", ir.ScalarType.float16, (16, 16), (16, 1), "param", "input_output")
    y = ir.Buffer("Y", ir.ScalarType.float16, (16, 16), (16, 1), "param", "input")
    origin = (ir.Const(0), ir.Const(0))
    body = (ir.BlockCopy("Y", origin, "X", origin, (16, 16)), ir.Barrier(),
            ir.FragmentLoad("a", "X", origin, 16, 1))
    k = ir.Kernel("k__gpu__", (x, y), (1, 1, 1), (32, 1, 1), body)
    assert handed_over(k) == {"X"}
    assert handed_over(dataclasses.replace(k, body=body[:1] + body[2:])) == set()  # no barrier
    with mock.patch.object(ir.FragmentLoad, "facts", ir.Facts()):
        assert handed_over(k) == set()


def test_the_alignment_of_an_array_reads_the_declared_tiles_and_vectors():
    _, k = plans.compile_plan(*plans.tensor_matmul(64, 64, 64, instruction=plans.WMMA))
    assert alignments(k) == {"A": 32, "B": 32, "C": 32}  # wmma's tiles start 32-byte aligned
    with mock.patch.object(ir.FragmentLoad, "facts", ir.Facts()):
        assert alignments(k) == {"A": 2, "B": 2, "C": 32}  # fp16 elements; C's tiles are stored too


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
