"""schedc check's advice: uncoalesced global accesses, shared-memory bank conflicts, local memory
and occupancy, each with its numbers and the change that removes it; none for plans without
such a problem (the samples)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import schedc as acc
from schedc.cli import main
from schedc.ir.kernel import Buffer, Const, Kernel, Load, PrivateArray, SharedBuffer, Store, Var
from schedc.ir.types import ScalarType
from schedc.lower.advice import advise
from schedc.targets import Target

from .conftest import ROOT
from .plans import compile_plan

H100 = Target(Target.Model.NVIDIA_H100)
F32 = ScalarType.float32
TX = Var("threadIdx.x")


def gemv(layout=acc.Array.Layout.FIRST_MAJOR):
    """y[i] += A[i, k] * x[k], a thread per row of A (i on THREAD_X, k serial)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(1024, 1024), layout=layout)
    x = acc.Array(role=acc.Role.INPUT, element_type=F32, shape=(1024,))
    y = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=F32, shape=(1024,))
    nest = acc.Nest((1024, 1024))
    i, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        y[i] += A[i, k] * x[k]

    schedule = nest.create_schedule()
    ii = schedule.split(i, 128)
    plan = schedule.create_plan(H100)
    plan.bind({i: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_X})
    return plan, (A, x, y)


def notes(plan, args):
    model, kernel = compile_plan(plan, args)
    return [str(n) for n in advise(kernel, model, H100.spec)]


def test_a_gemv_whose_threads_each_read_a_row_is_not_coalesced():
    (note,) = notes(*gemv())
    assert note == ("advice (coalescing): A [0, 0] then [1, 0]: a warp reads 32 elements in 32 sectors of 32 bytes "
                    "(1024 bytes moved for 128 used, 12%; block 128x1x1: threadIdx.x moves it 1 along dimension 0 "
                    "(stride 1024)); bind the loop along A's contiguous dimension 1 (along k, which the statement "
                    "sums: a reduction across threads) to THREAD_X, or read A through a "
                    "shared tile (plan.cache(A, index=..., location=SHARED), whose copy is coalesced)")


def test_the_same_gemv_of_a_column_major_a_is_coalesced():
    assert notes(*gemv(acc.Array.Layout.LAST_MAJOR)) == []


def _kernel(*body, shared=(), block=(32, 1, 1), dynamic=0) -> Kernel:
    A = Buffer("A", F32, (64, 64), (64, 1), "param", "input_output")
    return Kernel("k", (A,), (1, 1, 1), block, tuple(body), shared=tuple(shared), dynamic_shared_bytes=dynamic)


def test_a_reductions_total_gets_no_coalescing_advice():
    """S[i] += X[i, j], two rows a block on THREAD_Y and 16 threads along j: each row's first thread
    reads and writes S[i] once after the combine, so the warp's two totals in one sector are no
    access to coalesce (binding S's dimension to THREAD_X would take the reduced loop's place)."""
    X = acc.Array(role=acc.Role.INPUT, element_type=ScalarType.float16, shape=(64, 1024))
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=ScalarType.float16, shape=(64,))
    nest = acc.Nest(64, 1024)
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[i] += X[i, j]

    s = nest.create_schedule()
    ii, jj = s.split(i, 2), s.split(j, 16)
    s.reorder(i, ii, j, jj)
    plan = s.create_plan(H100)
    plan.bind({i: acc.GridUnit.BLOCK_X, ii: acc.GridUnit.THREAD_Y, jj: acc.GridUnit.THREAD_X})
    assert not [n for n in notes(plan, (X, S)) if "S [" in n]


def test_a_tile_read_down_its_columns_has_bank_conflicts_and_a_padded_one_not():
    read = Store("A", (TX, Const(0)), Load("A_shared", (TX, Const(0)), F32))
    dense = SharedBuffer("A_shared", F32, (32, 32), (32, 1))
    (note,) = [str(n) for n in advise(_kernel(read, shared=(dense,)), None, H100.spec) if "bank" in str(n)]
    assert "a warp reads it in 32 words of one bank (32-way bank conflicts" in note
    assert "threadIdx.x moves it 1 along dimension 0 (stride 32)" in note
    padded = SharedBuffer("A_shared", F32, (32, 33), (33, 1))
    assert not [n for n in advise(_kernel(read, shared=(padded,)), None, H100.spec) if n.topic == "bank conflicts"]
    two_way = SharedBuffer("A_shared", F32, (32, 32), (2, 1))  # 2 words a bank: below what check reports
    assert not [n for n in advise(_kernel(read, shared=(two_way,)), None, H100.spec) if n.topic == "bank conflicts"]


def test_eight_byte_elements_conflict_per_half_warp():
    """A warp's 8-byte accesses run in two phases of 16 lanes: a column of doubles is 16-way."""
    f64 = ScalarType.float64
    read = Store("A", (TX, Const(0)), Load("D_shared", (TX, Const(0)), f64))
    column = SharedBuffer("D_shared", f64, (32, 32), (32, 1))
    (note,) = [str(n) for n in advise(_kernel(read, shared=(column,)), None, H100.spec) if "bank" in str(n)]
    assert "(16-way bank conflicts" in note
    rows = SharedBuffer("D_shared", f64, (32, 32), (1, 32))  # along the row: conflict-free
    assert not [n for n in advise(_kernel(read, shared=(rows,)), None, H100.spec) if n.topic == "bank conflicts"]


def test_a_register_tile_in_local_memory_is_named():
    tile = PrivateArray("C_private", F32, (64, 64), local=True)
    (note,) = [str(n) for n in advise(_kernel(tile), None, H100.spec)]
    assert note.startswith("advice (local memory): the register tile C_private (64x64 float32) is too large for "
                           "registers and lives in the thread's local memory")


def test_a_simt_kernel_of_few_warps_is_told_what_limits_them():
    (note,) = [str(n) for n in advise(_kernel(block=(64, 1, 1), dynamic=150_000), None, H100.spec)]
    assert note == ("advice (occupancy): 1 block(s) of 64 threads a multiprocessor keep 2 of its 64 warps, limited "
                    "by shared memory per SM (233472 bytes): fewer stages or smaller shared tiles let more blocks in")


@pytest.mark.parametrize("sample", ["hello_matmul", "tensor_matmul", "gemv", "softmax", "layernorm", "hopper_matmul",
                                    "tensor_input_cache", "gluon_add"])
def test_the_samples_get_no_advice(sample):
    run = CliRunner().invoke(main, ["check", str(ROOT / "samples" / f"{sample}.py")])
    assert run.exit_code == 0, run.output
    assert "advice" not in run.output


def test_check_prints_the_advice(tmp_path):
    script = tmp_path / "rows.py"
    script.write_text(
        "import schedc as acc\n"
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.test_advice import gemv\n"
        "plan, args = gemv()\n"
        "package = acc.Package()\n"
        "package.add(plan, args=args, base_name='gemv')\n"
        "package.build('rows', output_dir='out')\n")
    run = CliRunner().invoke(main, ["check", str(script)])
    assert run.exit_code == 0, run.output
    assert "advice (coalescing): A [0, 0] then [1, 0]: a warp reads 32 elements in 32 sectors" in run.output


@pytest.mark.parametrize("stages, advised", [(6, True), (4, False)])
def test_output_tiles_stored_by_the_threads_for_want_of_shared_memory_are_advised(stages, advised):
    """samples/b2b_gemm.py with B through the ring: at 6 stages E's two TMA slots a warpgroup no
    longer fit beside it and its tiles are stored by the threads (0.93x torch against 1.6x on the
    H100: BENCHMARKS.md); check says so with the bytes; at 4 stages they fit and nothing is said."""
    import sys

    sys.path.insert(0, str(ROOT / "samples"))
    import b2b_gemm

    from .plans import compile_function_plan

    model, fn = compile_function_plan(*b2b_gemm.b2b_gemm(65536, 128, 128, 128, stages=stages, b_resident=False))
    notes = [str(n) for n in advise(fn.kernels[0], model, model.gpu) if n.topic == "tile stores"]
    assert bool(notes) == advised
    if advised:
        assert notes == ["advice (tile stores): E's tiles are stored by the threads from their registers (two "
                         "elements a store), not by TMA through two shared slots a warpgroup: those 32768 bytes "
                         "beside the kernel's 230400 make 263168, past the 232448 a block may hold; fewer stages "
                         "or smaller tiles leave room for them"]
