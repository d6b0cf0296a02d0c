"""Tensor-core instruction families as data (schedc/instructions.py): the table's lane layouts,
ldmatrix plans and swizzle, the family a plan gets, the emulator following the documented
layouts (a lane-mapping mistake is a wrong result on the CPU), and the IR rules of families."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedc as acc
from schedc import instructions
from schedc.codegen.cuda import emit_source, without_runtime
from schedc.codegen.emulate import EmulationError, emulate
from schedc.errors import PlanError
from schedc.instructions import MMA_SYNC, WMMA, Instruction, family_for, ldmatrix_plan, swizzle_column
from schedc.ir.affine import Affine
from schedc.ir.kernel import (
    Buffer,
    Const,
    Fragment,
    FragmentLoad,
    FragmentMma,
    Kernel,
    Load,
    SharedBuffer,
    Store,
)
from schedc.ir.types import ScalarType
from schedc.ir.walk import walk_statements
from schedc.lower import cache, resources, wellformed
from schedc.package import build as package_build
from schedc.verify import emulate_function

from .plans import VARIANTS, compile_function_plan, compile_plan, tensor_matmul

GOLDEN = Path(__file__).parent / "golden"
F16, F32 = ScalarType.float16, ScalarType.float32
H100 = acc.Target(acc.Target.Model.NVIDIA_H100)


# -- the table ---------------------------------------------------------------------------------


def tile_layouts():
    for mode in MMA_SYNC.modes:
        for shape in mode.shapes:
            for use in ("matrix_a", "matrix_b", "accumulator"):
                for acc_type in (mode.accumulators if use == "accumulator" else (None,)):
                    yield use, shape.mnk, mode.precision, acc_type


@pytest.mark.parametrize("use, mnk, precision, acc_type", list(tile_layouts()))
def test_every_tile_layout_holds_each_element_once(use, mnk, precision, acc_type):
    layout = MMA_SYNC.tile_layout(use, mnk, precision, acc_type)
    rows, cols = {"matrix_a": mnk[::2], "matrix_b": (mnk[2], mnk[1]), "accumulator": mnk[:2]}[use]
    cells = {(layout.row(lane, e), layout.col(lane, e)) for lane in range(32) for e in range(layout.elements)}
    assert (layout.rows, layout.cols) == (rows, cols)
    assert len(cells) == rows * cols == 32 * layout.elements
    assert layout.registers == MMA_SYNC.registers(use, mnk, precision, acc_type or F16)


def test_instruction_layouts_cover_their_tiles():
    instructions.check_layouts()
    broken = dict(instructions._MMA_SYNC_LAYOUTS)
    one = broken[("accumulator", 32)]
    broken[("accumulator", 32)] = dataclasses.replace(one, col=lambda lane, e: 2 * (lane % 4))  # drops e % 2
    with pytest.MonkeyPatch.context() as m:
        m.setattr(instructions, "_MMA_SYNC_LAYOUTS", broken)
        with pytest.raises(AssertionError, match="accumulator"):
            instructions.check_layouts()


@pytest.mark.parametrize("use, mnk, precision, strides, want", [
    ("matrix_a", (16, 16, 16), "fp16", (16, 1), [(0, 4, False)]),  # row-major A: rows of k
    ("matrix_a", (16, 16, 16), "fp16", (1, 16), [(0, 4, True)]),  # column-major A: .trans
    ("matrix_b", (16, 16, 16), "fp16", (16, 1), [(0, 4, True)]),  # row-major B: .trans
    ("matrix_b", (16, 16, 16), "fp16", (1, 16), [(0, 4, False)]),
    ("matrix_a", (32, 8, 16), "fp16", (16, 1), [(0, 4, False), (4, 4, False)]),
    ("matrix_b", (32, 8, 16), "fp16", (8, 1), [(0, 2, True)]),
    ("matrix_a", (16, 16, 8), "tf32", (8, 1), [(0, 4, False)]),
    ("matrix_a", (16, 16, 8), "tf32", (1, 16), None),  # 32-bit elements cannot be transposed
    ("matrix_b", (16, 16, 8), "tf32", (16, 1), None),
    ("matrix_b", (16, 16, 8), "tf32", (1, 8), [(0, 4, False)]),
    ("accumulator", (16, 16, 16), "fp16", (16, 1), None),  # pairs, not 8x8 blocks of rows
    ("matrix_a", (16, 16, 16), "s8", (16, 1), [(0, 2, False)]),  # 8-bit rows: 16 bytes, 4 a lane
    ("matrix_a", (16, 16, 16), "s8", (1, 16), None),  # 8-bit elements cannot be transposed
    ("matrix_b", (16, 16, 16), "u8", (1, 16), [(0, 2, False)]),
    ("matrix_b", (16, 16, 16), "u8", (16, 1), None),
])
def test_ldmatrix_plans(use, mnk, precision, strides, want):
    layout = MMA_SYNC.tile_layout(use, mnk, precision, F32 if use == "accumulator" else None)
    plan = ldmatrix_plan(layout, *strides)
    assert want == (None if plan is None else [(g.first, g.count, g.trans) for g in plan])


@pytest.mark.parametrize("use, strides", [("matrix_a", (16, 1)), ("matrix_a", (1, 16)), ("matrix_b", (16, 1))])
def test_ldmatrix_lanes_give_the_rows_of_each_register_block(use, strides):
    """Lane 8j + r addresses row r of register j's 8x8 block (rows run along memory's rows)."""
    layout = MMA_SYNC.tile_layout(use, (16, 16, 16), "fp16")
    (group,) = ldmatrix_plan(layout, *strides)
    for j in range(4):
        e = 2 * (group.first + j)  # the register's first element, in lane 0
        first = (layout.row(0, e), layout.col(0, e))
        rows = {(group.row(8 * j + r), group.col(8 * j + r)) for r in range(8)}
        memory_rows = {row * strides[0] + col * strides[1] for row, col in rows}
        assert first in rows and len(memory_rows) == 8


def test_vector_widths_follow_the_layout_and_the_strides():
    c = MMA_SYNC.tile_layout("accumulator", (16, 16, 16), "fp16", F32)
    assert instructions.vector_width(c, 64, 1, 4) == 2  # pairs of floats along a row
    assert instructions.vector_width(c, 1, 64, 4) == 1  # column-major C: a pair is 64 apart
    assert instructions.vector_width(c, 63, 1, 4) == 1  # odd rows: pairs at odd offsets
    a = MMA_SYNC.tile_layout("matrix_a", (16, 16, 16), "fp16")
    assert instructions.vector_width(a, 64, 1, 2) == 2


# -- swizzle -------------------------------------------------------------------------------------


PITCHES = st.sampled_from([32, 64, 128, 256, 384, 512])


@given(PITCHES, st.sampled_from([2, 4]), st.integers(0, 63))
def test_swizzle_permutes_the_chunks_of_each_row(pitch, size, row):
    per_row, chunk = pitch // size, 16 // size
    cols = np.array([swizzle_column(row, c, pitch, size) for c in range(per_row)])
    assert sorted(cols.tolist()) == list(range(per_row))
    assert (cols.reshape(-1, chunk) == cols.reshape(-1, chunk)[:, :1] + np.arange(chunk)).all()  # chunks whole


@given(PITCHES, st.sampled_from([2, 4]), st.integers(0, 63), st.integers(0, 63))
def test_eight_rows_at_one_column_fall_in_eight_bank_groups(pitch, size, first_row, column):
    col = column % (pitch // size) // (16 // size) * (16 // size)
    groups = {((first_row + r) * pitch + swizzle_column(first_row + r, col, pitch, size) * size) // 16 % 8
              for r in range(8)}
    assert len(groups) == 8


def test_swizzle_applies_to_rows_of_32_64_or_a_multiple_of_128_bytes():
    assert [instructions.swizzle_pitch(b) for b in (16, 32, 48, 64, 80, 128, 192, 256, 384)] == \
        [0, 32, 0, 64, 0, 128, 0, 256, 384]


# -- which family a plan gets ----------------------------------------------------------------------


@pytest.mark.parametrize("model, operand, accumulator, shape, requested, want", [
    ("NVIDIA_H100", F16, F32, acc.MMAShape.M16xN16xK16_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_A100", ScalarType.bfloat16, F32, acc.MMAShape.M32xN8xK16_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_H100", F32, F32, acc.MMAShape.M16xN16xK8_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_H100", F16, F16, acc.MMAShape.M16xN16xK16_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_H100", ScalarType.int8, ScalarType.int32, acc.MMAShape.M16xN16xK16_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_A100", ScalarType.uint8, ScalarType.int32, acc.MMAShape.M32xN8xK16_B1, Instruction.AUTO, "mma_sync"),
    ("NVIDIA_H100", ScalarType.int8, ScalarType.int32, acc.MMAShape.M8xN32xK16_B1, Instruction.AUTO, "wmma"),
    ("NVIDIA_H100", F16, F32, acc.MMAShape.M8xN32xK16_B1, Instruction.AUTO, "wmma"),
    ("NVIDIA_V100", F16, F32, acc.MMAShape.M16xN16xK16_B1, Instruction.AUTO, "wmma"),
    ("NVIDIA_H100", F16, F32, acc.MMAShape.M16xN16xK16_B1, Instruction.WMMA, "wmma"),
])
def test_auto_picks_the_fastest_family_that_can(model, operand, accumulator, shape, requested, want, request):
    target = request.getfixturevalue("v100") if model == "NVIDIA_V100" else acc.Target(getattr(acc.Target.Model, model))
    assert family_for(target, operand, accumulator, shape, requested).name == want


@pytest.mark.parametrize("model, operand, shape, message", [
    ("NVIDIA_V100", F16, acc.MMAShape.M16xN16xK16_B1, "MMA_SYNC needs sm_80 or newer; NVIDIA V100 is sm_70"),
    ("NVIDIA_H100", ScalarType.int8, acc.MMAShape.M8xN32xK16_B1,
     "MMA_SYNC multiplies float16 into float32/float16 with M16xN16xK16_B1, M32xN8xK16_B1; .* int8 into int32 "
     "with M16xN16xK16_B1, M32xN8xK16_B1; .* not int8 into int32 with M8xN32xK16_B1"),
    ("NVIDIA_H100", F16, acc.MMAShape.M8xN32xK16_B1, "not float16 into float32 with M8xN32xK16_B1"),
])
def test_an_instruction_that_cannot_is_refused_with_the_reason(model, operand, shape, message, request):
    target = request.getfixturevalue("v100") if model == "NVIDIA_V100" else acc.Target(getattr(acc.Target.Model, model))
    result = ScalarType.int32 if operand is ScalarType.int8 else F32
    plan, args = tensor_matmul(64, 64, 64, operand=operand, result=result, mma=shape, target=target,
                               block=(16, 64) if shape is acc.MMAShape.M8xN32xK16_B1 else (32, 32),
                               instruction=Instruction.MMA_SYNC)
    with pytest.raises(PlanError, match=message):
        compile_plan(plan, args)


def test_instruction_must_be_an_instruction():
    with pytest.raises(PlanError, match="instruction must be an Instruction .*AUTO, WMMA, MMA_SYNC.*not 'mma'"):
        tensor_matmul(64, 64, 64, instruction="mma")


def test_register_estimate_reads_the_table():
    for family in (WMMA, MMA_SYNC):  # 16x16 float accumulators: 8 registers either way
        assert family.registers("accumulator", (16, 16, 16), "float32", F32) == 8
    assert MMA_SYNC.registers("matrix_a", (16, 16, 8), "tf32", F32) == 4
    _, kernel = compile_plan(*VARIANTS["fp16_async_3_stages"][0]())
    fragments = [s for s in walk_statements(kernel.body) if isinstance(s, Fragment)]
    assert resources.registers(kernel) >= resources.BASE_REGISTERS + sum(
        MMA_SYNC.registers(f.use, (f.m, f.n, f.k), f.precision, f.dtype) for f in fragments)


# -- wmma plans are what they were -----------------------------------------------------------------


def test_wmma_plans_give_the_same_source_as_before():
    """samples/tilus_matmul.py on wmma: the generated part of the .cu is the golden from before
    instruction families (only AUTO changed: it picks mma.sync on sm_80+)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "samples"))
    import tilus_matmul

    package = acc.Package()
    for M, N, K, suffix in ((4096, 4096, 4096, ""), (1024, 1024, 14336, "_k14336")):
        package.add(*tilus_matmul.matmul(M, N, K, 1, instruction=Instruction.WMMA), base_name=f"matmul_v3{suffix}")
        for stages in (3, 4, 5):
            package.add(*tilus_matmul.matmul(M, N, K, stages, instruction=Instruction.WMMA),
                        base_name=f"matmul_v4_s{stages}{suffix}")
    with package_build.session(show_only=True) as shown:
        package.build("tilus_matmul", format=acc.Package.Format.HAT_SOURCE)
    assert without_runtime(shown.shown[0][3]) == (GOLDEN / "tilus_matmul_wmma.cu").read_text()


# -- the emulator follows the documented layouts ---------------------------------------------------


def _passes(variant: str) -> bool:
    model, kernel = compile_plan(*VARIANTS[variant][0]())
    return all(r.passed for r in emulate_function(model, kernel, blocks=None, seed=3))


@pytest.mark.parametrize("variant", ["fp16_async_3_stages", "mma_fp16_colmajor_a_partial_2_stages",
                                     "mma_tf32_b_rows_async", "mma_m32n8_acc_fp16_partial",
                                     "mma_int8_16_byte_tiles", "mma_uint8_m32n8_shared"])
def test_mma_sync_plans_emulate_against_the_reference(variant):
    model, kernel = compile_plan(*VARIANTS[variant][0]())
    assert {s.family for s in walk_statements(kernel.body) if isinstance(s, Fragment)} == {"mma_sync"}
    assert _passes(variant)


def test_instructions_that_disagree_with_the_tile_layout_are_a_wrong_result_on_the_cpu():
    """Each instruction of a warp tile's product reads its registers by the instruction's own
    documented layout; a product that takes the wrong n-half of B is caught."""
    real = instructions.Family.instructions

    def crossed(self, mnk, precision, accumulator):
        steps = real(self, mnk, precision, accumulator)
        return [(a, steps[(i + 1) % len(steps)][1], c) if len(steps) > 1 else (a, b, c)
                for i, (a, b, c) in enumerate(steps)]

    assert _passes("fp16_async_3_stages")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(instructions.Family, "instructions", crossed)
        assert not _passes("fp16_async_3_stages")


def test_a_wrong_ldmatrix_address_is_a_wrong_result_on_the_cpu():
    """Lanes giving the row addresses of the wrong matrices (j's bits swapped)."""
    real = instructions._group

    def swapped(blocks, first, trans):
        group = real(blocks, first, trans)
        other = lambda lane: np.where(((lane & 24) == 8) | ((lane & 24) == 16), lane ^ 24, lane)  # noqa: E731
        return dataclasses.replace(group, row=lambda lane: group.row(other(lane)), col=lambda lane: group.col(other(lane)))

    with pytest.MonkeyPatch.context() as m:
        m.setattr(instructions, "_group", swapped)
        assert not _passes("fp16_async_3_stages")


def _one_tile(path: str, origin: int, vector: int = 1, shared: bool = True) -> Kernel:
    """A warp loading one 16x16 fp16 A tile (row stride 24) and storing nothing."""
    a = Buffer("A", F16, (32, 24), (24, 1), "param", "input")
    c = Buffer("C", F32, (16, 16), (16, 1), "param", "output")
    s = SharedBuffer("A_shared", F16, (32, 24), (24, 1))
    source = "A_shared" if shared else "A"
    body = (Fragment("a", "matrix_a", 16, 16, 16, F16, "fp16", "row_major", "mma_sync"),
            FragmentLoad("a", source, (Const(origin), Const(0)), 24, 1, path=path, vector=vector))
    return Kernel("k", (a, c), (1, 1, 1), (32, 1, 1), body, shared=(s,) if shared else ())


def test_the_emulator_checks_ldmatrix_rows_are_16_byte_aligned():
    emulate(_one_tile("ldmatrix", 0), {"A": np.zeros(768, np.float16), "C": np.zeros(256, np.float32)})
    kernel = dataclasses.replace(_one_tile("ldmatrix", 0), body=(
        _one_tile("ldmatrix", 0).body[0],
        FragmentLoad("a", "A_shared", (Const(0), Const(1)), 24, 1, path="ldmatrix")))
    with pytest.raises(EmulationError, match="misaligned ldmatrix"):
        emulate(kernel, {"A": np.zeros(768, np.float16), "C": np.zeros(256, np.float32)})


def test_the_emulator_checks_a_lanes_vectors_are_aligned():
    storage = {"A": np.zeros(768, np.float16), "C": np.zeros(256, np.float32)}
    emulate(_one_tile("elements", 2, vector=2, shared=False), storage)
    kernel = _one_tile("elements", 2, vector=2, shared=False)
    kernel = dataclasses.replace(kernel, body=(kernel.body[0], dataclasses.replace(kernel.body[1], origin=(
        Const(0), Const(1)))))
    with pytest.raises(EmulationError, match="are not one aligned vector"):
        emulate(kernel, storage)


# -- the IR rules of families ----------------------------------------------------------------------


def _problems(*body, shared=()):
    a = Buffer("A", F16, (32, 32), (32, 1), "param", "input")
    c = Buffer("C", F32, (16, 16), (16, 1), "param", "output")
    return wellformed.problems(Kernel("k", (a, c), (1, 1, 1), (32, 1, 1), tuple(body), shared=tuple(shared)))


A_FRAG = Fragment("a", "matrix_a", 16, 16, 16, F16, "fp16", "row_major", "mma_sync")
B_FRAG = Fragment("b", "matrix_b", 16, 16, 16, F16, "fp16", "row_major", "mma_sync")
C_FRAG = Fragment("c", "accumulator", 16, 16, 16, F32, "float32", family="mma_sync")
SWIZZLED = SharedBuffer("S", F16, (32, 32), (32, 1), swizzle=64)


@pytest.mark.parametrize("body, shared, problem", [
    ((dataclasses.replace(A_FRAG, family="tcgen05"),), (), "no instruction family 'tcgen05'"),
    ((dataclasses.replace(A_FRAG, precision="e4m3"),), (), "mma_sync has no e4m3 16x16x16 tiles"),
    ((A_FRAG, FragmentLoad("a", "A", (Const(0), Const(0)), 32, 1, path="")), (),
     "mma_sync moves tiles by 'ldmatrix' or 'elements', not ''"),
    ((dataclasses.replace(A_FRAG, family="wmma"), FragmentLoad("a", "A", (Const(0), Const(0)), 32, 1, path="ldmatrix")),
     (), "wmma moves tiles by '', not 'ldmatrix'"),
    ((A_FRAG, FragmentLoad("a", "A", (Const(0), Const(0)), 32, 1, path="ldmatrix")), (),
     "ldmatrix reads shared memory, A is not shared"),
    ((A_FRAG, FragmentLoad("a", "A", (Const(0), Const(0)), 32, 1, path="elements", vector=3)), (),
     "vectors of 3 elements in a mma_sync tile of 8"),
    ((A_FRAG, B_FRAG, dataclasses.replace(C_FRAG, family="wmma"), FragmentMma("c", "a", "b", "c")), (),
     "fragments of families"),
    ((Store("C", (Const(0), Const(0)), Load("S", (Const(0), Const(0)), F16)),), (SWIZZLED,),
     "element access to the swizzled S"),
])
def test_family_rules(body, shared, problem):
    found = _problems(*body, shared=shared)
    assert any(problem in p for p in found), found
    if "swizzled" not in problem:
        assert not _problems(*[dataclasses.replace(s, family="mma_sync", precision="fp16") if isinstance(s, Fragment)
                               and s.use != "accumulator" else s for s in body[:1]])


def test_mma_sync_source_names_its_instructions():
    _, kernel = compile_plan(*VARIANTS["mma_fp16_colmajor_a_partial_2_stages"][0](), name="mma")
    source = emit_source([kernel], "// mma")
    assert "schedc::ldmatrix<4, true>(&_a0[0], &A_shared[" in source  # column-major A: transposed
    assert "schedc::mma_m16n8k16(&_c[4], &_a0[0], &_b0[4]);" in source
    assert "const int lane = " in source and "wmma::" not in without_runtime(source)


def test_tensorize_documents_instruction():
    assert "instruction" in acc.Plan.tensorize.__doc__ and "MMA_SYNC" in acc.Plan.tensorize.__doc__



@given(PITCHES, st.sampled_from([2, 4]), st.integers(0, 40), st.integers(0, 15), st.integers(0, 63))
def test_a_tiles_row_moves_out_of_the_swizzle_in_whole_periods(pitch, size, tiles, lane_row, column):
    """What the emitter relies on with a row phase: swizzle(R0 + r, c) is (R0 - phase) rows past
    swizzle(phase + r, c) whenever R0 = phase (mod 8)."""
    phase = tiles % 8
    first_row = phase + 8 * tiles
    col = column % (pitch // size)
    whole = first_row * (pitch // size) + swizzle_column(first_row + lane_row, col, pitch, size)
    split = (first_row - phase) * (pitch // size) + phase * (pitch // size) + swizzle_column(phase + lane_row, col,
                                                                                             pitch, size)
    assert whole == split


def test_row_phases_of_operand_tiles():
    _, kernel = compile_plan(*VARIANTS["fp16_async_3_stages"][0]())
    loads = [s for s in walk_statements(kernel.body) if isinstance(s, FragmentLoad) and s.path == "ldmatrix"]
    assert loads and all(s.row_phase == 0 for s in loads)  # warp tiles at multiples of 16 rows
    model, _ = compile_plan(*VARIANTS["fp16_async_3_stages"][0]())  # loop ii steps by 16, iii by 1
    buffer = SharedBuffer("T", F16, (32, 32), (32, 1), swizzle=64)

    def phase(loop: str, const: int, shift=()):
        return cache._row_phase(model, buffer, (32, 1), (Affine(((loop, 1),), const), Affine(())), shift)

    assert (phase("ii", 0), phase("ii", 3), phase("iii", 0)) == (0, 3, None)
    assert phase("ii", 0, (Affine((), 4), Affine(()))) is None  # passes 4 rows apart
    assert cache._row_phase(model, dataclasses.replace(buffer, swizzle=0), (32, 1),
                            (Affine((), 0), Affine(())), ()) is None


def _integer_product(operand: ScalarType, exact: bool):
    """A tensorized int32 C += A * B of ``operand`` values, multiplied in int32 (``exact``) or in
    their own type."""
    target = acc.Target(acc.Target.Model.NVIDIA_H100)
    A = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(32, 32))
    B = acc.Array(role=acc.Role.INPUT, element_type=operand, shape=(32, 32))
    C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=ScalarType.int32, shape=(32, 32))
    nest = acc.Nest(32, 32, 32)
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        if exact:
            C[i, j] += acc.cast(A[i, k], ScalarType.int32) * acc.cast(B[k, j], ScalarType.int32)
        else:
            C[i, j] += A[i, k] * B[k, j]

    s = nest.create_schedule()
    mma = acc.MMAShape.M16xN16xK16_B1
    ii, jj, kk = s.tile(dict(zip((i, j, k), target.tensor_core_info.compute_tensor_splits(mma))))
    plan = s.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X})
    plan.tensorize(indices=(ii, jj, kk), mma_shape=mma)
    return plan, (A, B, C)


@pytest.mark.parametrize("operand", [ScalarType.int8, ScalarType.uint8])
def test_an_integer_product_in_its_narrow_type_is_refused_on_tensor_cores(operand):
    """int8 * int8 is an int8 product (it wraps past 127: a SIMT plan computes that); the tensor
    cores multiply exactly into int32. The uncast form is refused with the cast that says so; the
    cast form is the tensor cores' product."""
    model, fn = compile_function_plan(*_integer_product(operand, exact=True))
    assert any(isinstance(s, FragmentMma) for s in walk_statements(fn.kernels[0].body))
    with pytest.raises(PlanError, match=rf"A \* B multiplies {operand.value} values in {operand.value} .*"
                                        r"exactly into int32: write the product in int32, "
                                        r"acc.cast\(A\[...\], int32\) \* acc.cast\(B\[...\], int32\)"):
        compile_function_plan(*_integer_product(operand, exact=False))
