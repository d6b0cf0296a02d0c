"""The kernel IR verifier: one hand-broken IR per rule, and real kernels broken the way a pass
could break them; a broken pass is an InternalError naming it."""

from __future__ import annotations

import dataclasses

import pytest

from schedc.errors import InternalError
from schedc.ir.kernel import (
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
    Cast,
    Const,
    Fragment,
    FragmentLoad,
    FragmentMma,
    FragmentStore,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    SharedBuffer,
    Stmt,
    Store,
    Var,
)
from schedc.ir.types import ScalarType
from schedc.ir.walk import walk_statements
from schedc.lower import passes, verifying, wellformed

from .plans import VARIANTS, compile_plan, simt_matmul, tensor_matmul

F32, F16, I32 = ScalarType.float32, ScalarType.float16, ScalarType.int32
A = Buffer("A", F32, (8, 8), (8, 1), "param", "input")
C = Buffer("C", F32, (8, 8), (8, 1), "param", "input_output")
H = Buffer("H", F16, (16, 16), (16, 1), "param", "input")
S = SharedBuffer("A_shared", F32, (8, 8), (8, 1))
TX = Var("threadIdx.x")


def kernel(*body: Stmt, shared=()) -> Kernel:
    return Kernel("k", (A, C, H), (1, 1, 1), (32, 1, 1), tuple(body), shared=tuple(shared))


ORIGIN = (Const(0), Const(0))


def copy(asynchronous=False, origin=ORIGIN) -> BlockCopy:
    return BlockCopy("A", origin, "A_shared", ORIGIN, (8, 8), asynchronous=asynchronous)


def only(body_kernel: Kernel, rule: str) -> list[str]:
    found = wellformed.problems(body_kernel)
    assert found and all(p.startswith(rule + ":") for p in found), found
    return found


def test_a_well_formed_kernel_has_no_problems():
    k = kernel(Loop("i", Const(0), Const(8), 1, (Store("C", (Var("i"), TX), Load("A", (Var("i"), TX), F32)),)))
    assert wellformed.problems(k) == []


@pytest.mark.parametrize("body, what", [
    ((Store("D", (Const(0), Const(0)), Const(1.0, F32)),), "D is not a declared buffer"),
    ((Store("C", (Var("i"), Const(0)), Const(1.0, F32)),), "variable i is not defined here"),
    ((Loop("i", Const(0), Const(8), 1, ()), Store("C", (Var("i"), Const(0)), Const(1.0, F32))),
     "variable i is not defined here"),
    ((FragmentMma("d", "a", "b", "c"),), "fragment a is used before it is declared"),
])
def test_declared_before_use(body, what):
    assert any(what in p for p in only(kernel(*body), "declared"))


@pytest.mark.parametrize("value, what", [
    (Load("A", (Const(0), Const(0)), F16), "a float16 load of A's float32 elements"),
    (Const(1.0, ScalarType.float64), "a float64 value into float32 elements"),
    (Binary("+", Load("A", (Const(0), Const(0)), F32), Cast(Const(1), I32), F32), "a int32 operand of a float32 '+'"),
])
def test_types_are_consistent(value, what):
    assert any(what in p for p in only(kernel(Store("C", (Const(0), Const(0)), value)), "types"))


@pytest.mark.parametrize("body", [
    (If(Binary("<", TX, Const(16)), (Barrier(),)),),
    (Let("t", Binary("+", TX, Const(1))), If(Binary("<", Var("t"), Const(4)), (copy(),))),
    (Loop("i", Const(0), TX, 1, (Barrier(),)),),
])
def test_block_level_statements_are_reached_by_every_thread(body):
    assert any("is not reached by every thread" in p for p in only(kernel(*body, shared=(S,)), "uniform"))


def test_the_uniform_rule_reads_each_class_declared_scope(monkeypatch):
    """A statement is held to the uniform rule by its declared scope, not by a list of classes:
    a cluster barrier under a divergent branch is refused, and a barrier declared thread-scoped
    would not be."""
    from schedc.ir.kernel import ClusterSync, SyncScope

    divergent = If(Binary("<", TX, Const(16)), (ClusterSync(),))
    assert any(p.startswith("uniform: ClusterSync") for p in wellformed.problems(kernel(divergent)))
    monkeypatch.setattr(Barrier, "facts", dataclasses.replace(Barrier.facts, scope=SyncScope.THREAD))
    assert wellformed.problems(kernel(If(Binary("<", TX, Const(16)), (Barrier(),)))) == []


def test_conditions_on_block_coordinates_keep_barriers_uniform():
    k = kernel(If(Binary("<", Var("blockIdx.x"), Const(1)), (Barrier(),)))
    assert wellformed.problems(k) == []


@pytest.mark.parametrize("body, what", [
    ((copy(asynchronous=True), AsyncWait(0)), "wait_group 0 before any commit_group"),
    ((copy(asynchronous=True),), "never committed"),
    ((copy(asynchronous=True), AsyncCommit()), "still in flight"),
    ((copy(asynchronous=True), AsyncCommit(), copy(asynchronous=True), AsyncWait(0)), "not yet committed"),
])
def test_async_waits_match_commits(body, what):
    assert any(what in p for p in only(kernel(*body, shared=(S,)), "async"))


def test_fragment_shapes_and_uses():
    a = Fragment("a", "matrix_a", 16, 16, 16, F16, "fp16", "row_major")
    b = Fragment("b", "matrix_b", 16, 16, 16, F16, "fp16", "row_major")
    c = Fragment("c", "accumulator", 32, 8, 16, F32, "float32")
    load = FragmentLoad("a", "C", (Const(0), Const(0)), 8, 1)
    store = FragmentStore("C", (Const(0), Const(0)), "a", 8, 1)
    found = only(kernel(a, b, c, FragmentMma("c", "a", "b", "c"), FragmentMma("b", "a", "b", "c"), load, store),
                 "fragments")
    assert any("fragments of shapes" in p for p in found)
    assert any("b is a matrix_b fragment, not accumulator" in p for p in found)
    assert any("float16 tiles from C's float32 elements" in p for p in found)
    assert any("a matrix_a fragment is not stored" in p for p in found)


def test_constant_indices_stay_in_range():
    found = only(kernel(Store("C", (Const(8), Const(0)), Const(1.0, F32)),
                        copy(origin=(Const(1), Const(0))), shared=(S,)), "bounds")
    assert any("C[8, 0] is outside its shape (8, 8)" in p for p in found)
    assert any("a copy's box [8, 8] at [1, 0] leaves A's shape (8, 8)" in p for p in found)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_is_well_formed(variant):
    make, _ = VARIANTS[variant]
    _, k = compile_plan(*make())
    assert wellformed.problems(k) == []


def _mutate(k: Kernel, match, replace) -> Kernel:
    """The kernel with the first statement ``match`` accepts replaced (in every body)."""
    done = []

    def body(stmts):
        out = []
        for s in stmts:
            if not done and match(s):
                done.append(s)
                out.extend(replace(s))
                continue
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=body(s.body))
            elif isinstance(s, If):
                s = dataclasses.replace(s, body=body(s.body), orelse=body(s.orelse))
            out.append(s)
        return tuple(out)

    new = dataclasses.replace(k, body=body(k.body))
    assert done, "nothing to mutate"
    return new


def test_a_real_pipeline_without_a_commit_is_caught():
    _, k = compile_plan(*tensor_matmul(64, 64, 256, k_split=32, shared_ab=True, pipeline={"stages": 3}))
    broken = _mutate(k, lambda s: isinstance(s, AsyncCommit), lambda s: ())
    assert any("wait_group 1 after 1 commit_group(s) waits for none of them" in p
               for p in wellformed.problems(broken))


def test_a_real_barrier_under_a_thread_guard_is_caught():
    _, k = compile_plan(*simt_matmul(100, 70, 33, shared_k=8))
    guard = Binary("<", Var("threadIdx.x"), Const(16))
    broken = _mutate(k, lambda s: isinstance(s, Barrier), lambda s: (If(guard, (s,)),))
    assert any(p.startswith("uniform:") for p in wellformed.problems(broken))


def test_a_pass_that_breaks_the_kernel_is_named(monkeypatch):
    plan, args = simt_matmul(64, 64, 64, shared_k=16)
    real = passes.fold

    def broken_fold(ir):
        ir = real(ir)
        stores = [s for s in walk_statements(ir.kernel.body) if isinstance(s, Store)]
        assert stores
        return dataclasses.replace(ir, kernel=dataclasses.replace(
            ir.kernel, body=(*ir.kernel.body, Store("Nowhere", stores[0].index, stores[0].value))))

    monkeypatch.setattr(passes, "PASSES", tuple(
        dataclasses.replace(p, run=broken_fold) if p.name == "simplify" else p for p in passes.PASSES))
    monkeypatch.setattr("schedc.lower.PASSES", passes.PASSES)
    with verifying(), pytest.raises(InternalError, match=r"pass simplify: internal error \(a bug in schedc, please "
                                                         r"report it\): the kernel IR it made is malformed: declared: "
                                                         r"store to Nowhere: Nowhere is not a declared buffer"):
        compile_plan(plan, args)
    with verifying(False):
        compile_plan(*simt_matmul(64, 64, 64, shared_k=16))  # unverified: the backend would see it


def test_backends_list_every_node_without_a_handler_before_starting():
    """A node class neither backend knows: both refuse up front, naming it, before any output."""
    from schedc.codegen.cuda import EMITTERS, emit_kernel
    from schedc.codegen.emulate import EXECUTORS, emulate

    @dataclasses.dataclass(frozen=True)
    class Mystery:
        comment: str = ""

    k = kernel(Loop("i", Const(0), Const(8), 1, (Mystery(), Barrier())))
    assert EMITTERS.missing(k.body) == EXECUTORS.missing(k.body) == ["Mystery"]
    with pytest.raises(InternalError, match="kernel k has IR nodes with no CUDA emitter: Mystery"):
        emit_kernel(k)
    with pytest.raises(InternalError, match="kernel k has IR nodes with no emulator executor: Mystery"):
        emulate(k, {})


def test_a_bounded_copy_may_read_past_its_source():
    """Bounded copies stop at the array's end and fill zeros: their box may leave the source."""
    bounded = dataclasses.replace(copy(origin=(Const(1), Const(0))), valid=(Const(7), Const(8)))
    assert wellformed.problems(kernel(bounded, shared=(S,))) == []


def test_a_bounded_copy_must_still_start_inside_its_source():
    early = dataclasses.replace(copy(origin=(Const(-2), Const(0))), valid=(Const(7), Const(8)))
    assert any("leaves A's shape" in p for p in only(kernel(early, shared=(S,)), "bounds"))
