"""8-bit floats (``ScalarType.float8_e4m3``, ``float8_e5m2``): stored only, computed in float32 and
rounded once (saturating) where stored or cast; wgmma multiplies them (``M64xN{n}xK32_B1``, k-major
operands) into float32. The reference, the emulator, the text check, the package and the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import schedc as acc
from schedc import verify
from schedc.bench import flops
from schedc.bench_reference import matmul_roles
from schedc.codegen.text_check import check_kernel
from schedc.errors import CacheError, InternalError, LaunchError, NestError, TargetError
from schedc.ir.kernel import Binary, Buffer, Call, Cast, Kernel, Load, Store, Unary, Var
from schedc.ir.numeric import to_float8
from schedc.ir.types import converts_implicitly, is_float_dtype, promote
from schedc.ir.walk import subexpressions, walk_statements
from schedc.package.compile import nvrtc_compile

from .conftest import require_gpu
from .plans import H100, build, compile_function_plan

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
from fp8_matmul import fp8_matmul  # noqa: E402
from hopper_matmul import matmul  # noqa: E402

T = acc.ScalarType
E4M3, E5M2 = T.float8_e4m3, T.float8_e5m2


def test_the_types_widen_to_wider_floats_and_need_a_cast_from_them():
    assert converts_implicitly(E4M3, T.bfloat16) and converts_implicitly(E5M2, T.float32)
    assert not converts_implicitly(T.float32, E4M3) and not converts_implicitly(E4M3, E5M2)
    assert promote(E4M3, E4M3) is E4M3 and promote(E4M3, E5M2) is T.float32  # neither holds the other
    assert E4M3.arithmetic is T.float32 and T.float16.arithmetic is T.float16
    assert E4M3.torch_name == "float8_e4m3fn" and E5M2.torch_name == "float8_e5m2"
    assert is_float_dtype(np.dtype(ml_dtypes.float8_e5m2)) and is_float_dtype(np.dtype(ml_dtypes.float8_e4m3fn))
    assert not is_float_dtype(np.dtype(np.uint8))


def test_conversions_round_to_nearest_even_and_saturate():
    values = np.array([0.3, 17.0, 464.0, 1e9, -np.inf, np.nan, 2.0**-10])
    assert to_float8(values, E4M3).astype(float).tolist()[:5] == [0.3125, 16.0, 448.0, 448.0, -448.0]
    assert np.isnan(float(to_float8(values, E4M3)[5])) and float(to_float8(values, E4M3)[6]) == 0.0
    assert to_float8(np.array([1e9, 0.3]), E5M2).astype(float).tolist() == [57344.0, 0.3125]


def _elementwise(out_type, body, n=256):
    """``B[i] = body(A[i], i)`` over n values, A of e4m3 and B of ``out_type``, 128 threads a block."""
    A = acc.Array(role=acc.Role.INPUT, element_type=E4M3, shape=(n,))
    B = acc.Array(role=acc.Role.OUTPUT, element_type=out_type, shape=(n,))
    nest = acc.Nest(n)
    (i,) = nest.get_indices()

    @nest.iteration_logic
    def _():
        B[i] = body(A[i], i)

    s = nest.create_schedule()
    ii = s.split(i, 128)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_X, ii: H100.GridUnit.THREAD_X})
    return plan, (A, B)


def _emulated_outputs(plan, args):
    model, function = compile_function_plan(plan, args)
    reports = verify.emulate_function(model, function, blocks=None, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    arrays, outputs, _, _ = verify._emulated(function, None, 3)
    return function, arrays, outputs


def test_operations_compute_in_float32_and_round_once_where_stored():
    plan, args = _elementwise(E4M3, lambda a, i: a * a * 3.0 - acc.cast(i, E4M3) / 64.0)
    function, arrays, outputs = _emulated_outputs(plan, args)
    (kernel,) = function.kernels
    operations = [e for s in walk_statements(kernel.body) if isinstance(s, Store)
                  for e in subexpressions(s.value) if isinstance(e, Binary | Unary | Call) and e.dtype is not None]
    assert operations and all(e.dtype is T.float32 for e in operations)
    a = arrays["A"].astype(np.float32)
    index = to_float8(np.arange(256), E4M3).astype(np.float32)
    expected = to_float8(a * a * np.float32(3.0) - index / np.float32(64.0), E4M3)
    assert outputs["B"].view(np.uint8).tolist() == expected.view(np.uint8).tolist()


def test_a_cast_to_an_8_bit_float_saturates_in_the_emulator_and_the_reference():
    plan, args = _elementwise(T.float32, lambda a, i: acc.cast(a * 1000.0, E5M2) + acc.cast(a * 1000.0, E4M3))
    _, arrays, outputs = _emulated_outputs(plan, args)
    a = arrays["A"].astype(np.float32) * np.float32(1000.0)
    expected = to_float8(a, E5M2).astype(np.float32) + to_float8(a, E4M3).astype(np.float32)
    assert np.array_equal(outputs["B"], expected) and np.abs(to_float8(a, E4M3).astype(float)).max() == 448.0


@pytest.mark.parametrize("shared", [0, 16])
def test_a_sum_into_an_8_bit_float_array_rounds_at_each_step_in_the_reference_as_in_the_kernel(shared):
    """C (e4m3) += A * B over 64 values of k on SIMT cores: each step stores C, rounded to 3 bits;
    the reference rounds there too (summed exactly and rounded once it would be ~0.5 off)."""
    from .plans import simt_matmul

    plan, args = simt_matmul(64, 64, 64, block=(16, 16), shared_k=shared, dtype=E4M3)
    model, function = compile_function_plan(plan, args)
    (report,) = verify.emulate_function(model, function, blocks=2, seed=1)
    assert report.passed and report.relative_error == 0.0, report


def test_a_float32_value_needs_a_cast_into_an_8_bit_float_array_and_a_product_widens_into_bfloat16():
    with pytest.raises(NestError, match="a float32 value does not convert implicitly to float8_e4m3; use cast"):
        _elementwise(E4M3, lambda a, i: a * acc.cast(2.0, T.float32))
    plan, _ = _elementwise(T.bfloat16, lambda a, i: a * a)  # e4m3 * e4m3 is e4m3 for assignment
    assert plan is not None


def test_the_text_check_refuses_arithmetic_on_8_bit_floats():
    a = Buffer("A", E4M3, (32,), (1,), "param", "input")
    b = Buffer("B", E4M3, (32,), (1,), "param", "output")
    load = Load("A", (Var("threadIdx.x"),), E4M3)
    for value in (Binary("*", load, load, E4M3), Unary("-", load, E4M3)):
        kernel = Kernel("k", (a, b), (1, 1, 1), (32, 1, 1), (Store("B", (Var("threadIdx.x"),), value),))
        with pytest.raises(InternalError, match="no operator . for __nv_fp8_e4m3"):
            check_kernel(kernel)
    kernel = Kernel("k", (a, b), (1, 1, 1), (32, 1, 1),
                    (Store("B", (Var("threadIdx.x"),), Cast(Binary("*", Cast(load, T.float32), Cast(load, T.float32),
                                                                    T.float32), E4M3)),))
    check_kernel(kernel)


def test_the_ir_verifier_refuses_operations_constants_and_comparisons_of_8_bit_floats():
    from schedc.ir.kernel import Const
    from schedc.lower.wellformed import problems

    a = Buffer("A", E5M2, (32,), (1,), "param", "input")
    b = Buffer("B", T.float32, (32,), (1,), "param", "output")
    load = Load("A", (Var("threadIdx.x"),), E5M2)
    wrong = {"'*'": Cast(Binary("*", load, load, E5M2), T.float32), "const": Cast(Const(0.5, E5M2), T.float32),
             "'<'": Cast(Binary("<", load, load, T.bool), T.float32)}
    for what, value in wrong.items():
        kernel = Kernel("k", (a, b), (1, 1, 1), (32, 1, 1), (Store("B", (Var("threadIdx.x"),), value),))
        assert problems(kernel) == [f"types: store to B: a {what} of float8_e5m2 values, which have no arithmetic "
                                    "(compute in float32 and convert)"]
    right = Binary("<", Cast(load, T.float32), Cast(load, T.float32), T.bool)
    assert problems(Kernel("k", (a, b), (1, 1, 1), (32, 1, 1), (Store("B", (Var("threadIdx.x"),),
                                                                        Cast(right, T.float32)),))) == []


def _hopper(operand, output, b_layout=acc.Array.Layout.LAST_MAJOR, size=(256, 256, 512)):
    return matmul(*size, operand=operand, output=output, block=(128, 128, 128), stages=2, b_layout=b_layout,
                  persistent={"group": 2})


@pytest.mark.parametrize("operand, output", [(E4M3, T.bfloat16), (E5M2, T.float32), (E4M3, T.float16)])
def test_wgmma_multiplies_8_bit_floats_into_float32_fragments(operand, output):
    plan, args = _hopper(operand, output)
    model, function = compile_function_plan(plan, args)
    reports = verify.emulate_function(model, function, blocks=2, seed=1)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("operand, k", [(T.float16, 16), (E4M3, 32)])
def test_a_wgmma_plan_without_warpgroup_bindings_is_one_warpgroup_of_any_operand_type(operand, k):
    """No loop on WARPGROUP_*: the block is one consumer warpgroup and the producer (the 8-bit
    floats' shapes once gave it one warp)."""
    from .plans import matmul_arrays

    nest, (A, B, C) = matmul_arrays(128, 128, 256, operand, T.float32, b_layout=acc.Array.Layout.LAST_MAJOR)
    i, j, kk_ = nest.get_indices()
    s = nest.create_schedule()
    ii, jj, kk = s.split(i, 64), s.split(j, 128), s.split(kk_, 64)
    iii, jjj, kkk = s.tile({ii: 64, jj: 128, kk: k})
    s.reorder(i, j, kk_, kk, ii, jj, iii, jjj, kkk)
    plan = s.create_plan(H100)
    plan.bind({i: H100.GridUnit.BLOCK_Y, j: H100.GridUnit.BLOCK_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape[f"M64xN128xK{k}_B1"])
    for array in (A, B):
        plan.cache(array, index=kk, location=acc.MemorySpace.SHARED, stages=2)
    plan.cache(C, index=kk_, location=acc.MemorySpace.MMA_FRAGMENT)
    model, function = compile_function_plan(plan, (A, B, C))
    assert function.kernels[0].block == (256, 1, 1)
    reports = verify.emulate_function(model, function, None, seed=1)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_the_wgmma_instruction_is_k32_of_the_operands_type_without_transposes(tmp_path):
    path = build(*_hopper(E5M2, T.bfloat16), "fp8_text", tmp_path)
    text = (path.parent / "fp8_text.cu").read_text()
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2 " in text
    assert '"%64, %65, p, 1, 1;' in text  # scale-d, imm-scale-a/b and no imm-trans-a/b
    assert "typedef uint8_t float8_e5m2_t;" in (path.parent / "fp8_text.hat").read_text()


def test_an_operand_whose_k_is_not_contiguous_is_refused_with_the_layout_to_use(tmp_path):
    with pytest.raises(CacheError, match="e4m3 wgmma reads operands whose k is contiguous; B is contiguous along "
                                         "its dimension 1, not along k .* make B Array.Layout.LAST_MAJOR"):
        build(*_hopper(E4M3, T.bfloat16, b_layout=acc.Array.Layout.FIRST_MAJOR), "fp8_n_major", tmp_path)


@pytest.mark.parametrize("scaled, rowwise", [(True, False), (False, False), (True, True)])
def test_the_fp8_sample_emulates_with_its_scales_on_the_fragments(scaled, rowwise):
    plan, args = fp8_matmul(256, 512, 256, scaled=scaled, group=2, rowwise=rowwise)
    model, function = compile_function_plan(plan, args)
    reports = verify.emulate_function(model, function, blocks=2, seed=4)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    # the bench counts the epilogue once per element of C (C * scale_a * scale_b: 2 operations),
    # and compares the fused function with cuBLAS's product alone
    assert flops(model) == 2 * 256 * 512 * 256 + (2 * 256 * 512 if scaled else 0)
    assert matmul_roles(model) == {"A": ("A", False), "B": ("B", False), "C": ("C", False)}


# -- mma.sync on sm_89 and newer: m16n8k32 ------------------------------------------------------

L4 = acc.Target(acc.Target.Model.NVIDIA_L4)  # sm_89 (Ada)
K32 = acc.MMAShape.M16xN16xK32_B1
LAST = acc.Array.Layout.LAST_MAJOR


def _mma_sync(operand, target=L4, **options):
    from .plans import tensor_matmul

    return tensor_matmul(64, 64, 160, operand, mma=K32, target=target, b_layout=LAST, **options)


def test_the_k32_lane_layouts_are_ptxs():
    """PTX ISA, "Matrix fragments for mma.m16n8k32": a_i at row groupID (+8 for i % 8 >= 4),
    column threadID_in_group * 4 + i % 4 (+16 for i >= 8); b_i at row threadID_in_group * 4 + i % 4
    (+16 for i >= 4), column groupID."""
    from schedc.instructions import MMA_SYNC

    a, b = (MMA_SYNC.instruction_layout(use, "e4m3") for use in ("matrix_a", "matrix_b"))
    assert (a.rows, a.cols, a.elements, b.rows, b.cols, b.elements) == (16, 32, 16, 32, 8, 8)
    lane = 4 * 3 + 2  # groupID 3, threadID_in_group 2
    assert [(a.row(lane, i), a.col(lane, i)) for i in (0, 3, 4, 8, 13)] == [(3, 8), (3, 11), (11, 8), (3, 24), (11, 25)]
    assert [(b.row(lane, i), b.col(lane, i)) for i in (0, 3, 4, 7)] == [(8, 3), (11, 3), (24, 3), (27, 3)]
    assert MMA_SYNC.instruction_shape("e5m2") == (16, 8, 32)


@pytest.mark.parametrize("operand, options", [(E4M3, {}), (E5M2, {"shared_ab": True, "k_split": 64}),
                                              (E4M3, {"shared_ab": True, "k_split": 32, "cache_c": 0,
                                                      "fragment_type": T.float32, "result": T.bfloat16})])
def test_mma_sync_multiplies_8_bit_floats_on_ada(operand, options):
    model, function = compile_function_plan(*_mma_sync(operand, **options))
    reports = verify.emulate_function(model, function, None, seed=3)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def test_the_mma_sync_instruction_is_m16n8k32_of_the_operands_type_for_sm_89(tmp_path):
    path = build(*_mma_sync(E5M2, shared_ab=True, k_split=64), "fp8_ada", tmp_path)
    assert "schedc::mma_m16n8k32(" in (path.parent / "fp8_ada.cu").read_text()
    ptx = nvrtc_compile((path.parent / "fp8_ada.cu").read_text(), "fp8_ada", "sm_89").ptx
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx  # A's k-contiguous rows, 16 bytes at a time


def test_8_bit_float_tiles_are_refused_before_sm_89_with_the_architecture_they_need():
    with pytest.raises(TargetError, match=r"NVIDIA A100 tensor cores have no M16xN16xK32_B1 \(float8_e4m3 and "
                                        r"float8_e5m2 operands on sm_89 or newer; it is sm_80\)"):
        _mma_sync(E4M3, target=acc.Target(acc.Target.Model.NVIDIA_A100))


def test_the_cublas_reference_is_refused_where_the_nest_is_not_one_product():
    from .plans import elementwise, write_then_read

    for plan, args in (write_then_read(32, 64), elementwise(32, 64)):
        model, _ = compile_function_plan(plan, args)
        assert matmul_roles(model) is None


# -- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("out_type", [E4M3, T.float32])
def test_the_gpu_rounds_as_the_emulator_does(tmp_path, out_type):
    plan, args = _elementwise(out_type, lambda a, i: acc.cast(a * a * 3.0 - acc.cast(i, E4M3) / 64.0, out_type))
    fn = acc.load(build(plan, args, "fp8_round", tmp_path)).fp8_round
    require_gpu()
    reports = verify.compare_with_emulator(fn, seed=5, tolerance=0.0)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.gpu
def test_the_gpu_rounds_a_sum_into_an_8_bit_float_array_at_each_step_as_the_emulator(tmp_path):
    from .plans import simt_matmul

    fn = acc.load(build(*simt_matmul(64, 64, 64, block=(16, 16), shared_k=16, dtype=E5M2), "fp8_sum",
                        tmp_path)).fp8_sum
    require_gpu()
    for reports in (verify.compare_with_emulator(fn, seed=2, tolerance=0.0), verify.run_function(fn, seed=2)):
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.gpu
@pytest.mark.parametrize("operand, output", [(E4M3, T.bfloat16), (E5M2, T.float32)])
def test_fp8_wgmma_products_verify_on_the_gpu(tmp_path, operand, output):
    fn = acc.load(build(*_hopper(operand, output, size=(384, 256, 640)), "fp8_gemm", tmp_path)).fp8_gemm
    require_gpu()
    reports = verify.run_function(fn, seed=2)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.gpu
@pytest.mark.parametrize("operand", [E4M3, E5M2])
def test_fp8_mma_sync_products_verify_on_the_gpu(tmp_path, operand):
    """The same instruction on the H100 (sm_90 runs sm_89's mma.sync)."""
    fn = acc.load(build(*_mma_sync(operand, target=H100, shared_ab=True, k_split=64), "fp8_mma_sync",
                        tmp_path)).fp8_mma_sync
    require_gpu()
    reports = verify.run_function(fn, seed=2)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.gpu
def test_torch_float8_tensors_take_the_call(tmp_path):
    fn = acc.load(build(*_hopper(E4M3, T.bfloat16), "fp8_torch", tmp_path)).fp8_torch
    require_gpu()
    torch = pytest.importorskip("torch")
    a = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)  # B (512 x 256) column-major: its transpose
    c = torch.zeros(256, 256, device="cuda", dtype=torch.bfloat16)
    fn(a, b.t(), c)
    torch.cuda.synchronize()
    expected = a.double() @ b.double().t()
    # bfloat16's rounding and wgmma's sums of 8-bit products (fewer bits than float32's), norm-wise
    assert float((c.double() - expected).norm() / expected.norm()) < 1e-2
    with pytest.raises(LaunchError, match=r"argument A: shape \(128, 512\), expected \(256, 512\)"):
        fn(a[:128], b.t(), c)  # the general path (DLPack) explains a wrong 8-bit tensor too
    with pytest.raises(LaunchError, match="argument B: dtype float8_e5m2, expected float8_e4m3"):
        fn(a, b.t().to(torch.float8_e5m2), c)
