"""Launch parameters beyond pointers (scalars, by-value structs) and functions of several kernels:
emitted C++, NVRTC, the IR verifier, the emulator, packages, the loader and (gpu) the device."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np
import pytest
from click.testing import CliRunner

import schedc
from schedc.cli import main
from schedc.codegen.cuda import EMITTERS, emit_kernel, emit_launcher, emit_source
from schedc.codegen.emulate import emulate, emulate_sequence
from schedc.errors import InternalError, LaunchError, PackageError
from schedc.ir.kernel import (
    Binary,
    Buffer,
    Const,
    HostFunction,
    Kernel,
    Let,
    Load,
    Loop,
    ScalarParam,
    Store,
    StructParam,
    TensorMap,
    Var,
    declares,
    from_json,
    register,
    to_json,
)
from schedc.ir.types import ScalarType
from schedc.lower import wellformed
from schedc.package import driver
from schedc.package.compile import nvrtc_compile

from .conftest import require_gpu

F32 = ScalarType.float32
N, K = 64, 4
X = Buffer("X", F32, (N,), (1,), "param", "input")
Y = Buffer("Y", F32, (N,), (1,), "param", "output")
ALPHA = ScalarParam("alpha", F32)
THREAD = Let("i", Binary("+", Binary("*", Var("blockIdx.x"), Const(32)), Var("threadIdx.x")))


def scale_kernel(alpha: ScalarParam = ALPHA, value=None) -> Kernel:
    """``Y[i] = X[i] * alpha`` on 2 blocks of 32 threads."""
    value = value or Binary("*", Load("X", (Var("i"),), F32), Var(alpha.name), F32)
    body = (THREAD, Store("Y", (Var("i"),), value))
    return Kernel("scale__gpu__", (X, Y), (N // 32, 1, 1), (32, 1, 1), body, values=(alpha,))


# -- a scalar parameter --------------------------------------------------------------------------


def test_scalar_parameter_in_kernel_and_launcher():
    kernel = scale_kernel()
    assert wellformed.problems(kernel) == []
    text = emit_kernel(kernel)  # the text checker parses `X[i] * alpha` back as a float product
    assert "scale__gpu__(const float* __restrict__ X, float* __restrict__ Y, float alpha)" in text
    assert "Y[i] = X[i] * alpha;" in text
    launcher = emit_launcher(kernel)
    assert 'extern "C" int scale(const float* X, float* Y, float alpha)' in launcher
    assert "scale__gpu__<<<dim3(2, 1, 1), dim3(32, 1, 1), 0>>>(X, Y, alpha);" in launcher


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_scalar_kernel_compiles_with_nvrtc(arch):
    compiled = nvrtc_compile(emit_source([scale_kernel()], "// scale"), "scale", arch)
    assert ".param .f32 scale__gpu___param_2" in compiled.ptx


def test_scalar_kernel_emulates():
    x = np.arange(N, dtype=np.float32) / 3
    run = emulate(scale_kernel(), {"X": x, "Y": np.zeros(N, np.float32)}, scalars={"alpha": 2.5})
    np.testing.assert_array_equal(run.storage["Y"], x * np.float32(2.5))


def test_integer_scalar_in_index_arithmetic():
    n = ScalarParam("n", ScalarType.int32)  # Y[i] = X[(i + n) % 64]
    shifted = Binary("%", Binary("+", Var("i"), Var("n")), Const(N))
    kernel = scale_kernel(n, Load("X", (shifted,), F32))
    assert wellformed.problems(kernel) == []
    assert "Y[i] = X[(i + n) % 64];" in emit_kernel(kernel)
    x = np.arange(N, dtype=np.float32)
    run = emulate(kernel, {"X": x, "Y": np.zeros(N, np.float32)}, scalars={"n": 5})
    np.testing.assert_array_equal(run.storage["Y"], np.roll(x, -5))


def test_scalar_parameters_round_trip_through_json():
    kernel = scale_kernel()
    assert from_json(to_json(kernel)) == kernel
    function = two_kernel_function()
    assert from_json(to_json(function)) == function
    assert from_json(to_json(tensor_map_kernel())) == tensor_map_kernel()


@pytest.mark.parametrize(("dtype", "value", "message"), [
    (F32, "2", r"scalar alpha = '2' \(str\) is not a value of type float32"),
    (F32, True, r"scalar alpha = True \(bool\) is not a value of type float32"),
    (ScalarType.float16, 1e6, "scalar alpha = 1000000.0 overflows float16"),
    (ScalarType.int32, 2.0, r"scalar alpha = 2.0 \(float\) is not a value of type int32"),
    (ScalarType.int32, 2**31, r"scalar alpha = 2147483648 is outside int32 \(-2147483648 to 2147483647\)"),
    (ScalarType.uint8, -1, r"scalar alpha = -1 is outside uint8 \(0 to 255\)"),
    (ScalarType.bool, 1, r"scalar alpha = 1 \(int\) is not a value of type bool"),
])
def test_wrong_scalar_values_are_refused(dtype, value, message):
    with pytest.raises(LaunchError, match=message):
        ScalarParam("alpha", dtype).value(value, "scale(X, Y, alpha)")


def test_scalar_values_of_each_kind_are_accepted():
    assert ScalarParam("a", ScalarType.float16).value(np.float32(1.5), "f") == np.float16(1.5)
    assert ScalarParam("a", ScalarType.int64).value(np.int8(-3), "f") == -3
    assert ScalarParam("a", ScalarType.bool).value(np.bool_(True), "f")
    assert np.isnan(ScalarParam("a", F32).value(float("nan"), "f"))


def test_emulator_checks_scalars():
    storage = {"X": np.zeros(N, np.float32), "Y": np.zeros(N, np.float32)}
    with pytest.raises(LaunchError, match=r"emulate scale: no value for scalar alpha \(float32\)"):
        emulate(scale_kernel(), storage)
    with pytest.raises(LaunchError, match=r"beta is not a scalar parameter \(they are: alpha\)"):
        emulate(scale_kernel(), storage, scalars={"alpha": 1.0, "beta": 2.0})
    with pytest.raises(LaunchError, match="scalar alpha = 'x'"):
        emulate(scale_kernel(), storage, scalars={"alpha": "x"})


@pytest.mark.parametrize(("kernel", "problem"), [
    (scale_kernel(ScalarParam("alpha", ScalarType.float64)),
     "types: store to Y: a float64 operand of a float32 '*'"),
    (scale_kernel(ALPHA, Load("X", (Binary("+", Var("i"), Var("alpha")),), F32)),
     "types: store to Y: the float32 scalar alpha in int32 index arithmetic '+'"),
    (replace(scale_kernel(), body=(Let("alpha", Const(0)), *scale_kernel().body)),
     "params: local alpha redefines the scalar parameter alpha"),
    (replace(scale_kernel(), body=(Loop("alpha", Const(0), Const(2), 1, ()), *scale_kernel().body)),
     "params: loop variable alpha redefines the scalar parameter alpha"),
    (replace(scale_kernel(), values=(ScalarParam("X", F32),)), "params: two parameters or buffers are named X"),
    (replace(scale_kernel(), values=()), "declared: store to Y: variable alpha is not defined here"),
])
def test_verifier_checks_scalar_parameters(kernel, problem):
    assert problem in wellformed.problems(kernel)


def test_text_check_types_scalars():
    """A float64 scalar in a float32 product is a promotion C++ makes and the IR does not."""
    with pytest.raises(InternalError, match="cuda text"):
        emit_kernel(scale_kernel(ScalarParam("alpha", ScalarType.float64)))


# -- a function of two kernels: clear, then accumulate -------------------------------------------

W = Buffer("W", F32, (K, N), (N, 1), "param", "input")


def two_kernel_function() -> HostFunction:
    """``Y = 0`` (kernel 1, Y only), then ``Y[i] += alpha * W[k, i]`` for each k (kernel 2)."""
    clear = Kernel("accumulate__clear__gpu__", (Y,), (N // 32, 1, 1), (32, 1, 1),
                   (THREAD, Store("Y", (Var("i"),), Const(0.0, F32))))
    term = Binary("*", Var("alpha"), Load("W", (Var("k"), Var("i")), F32), F32)
    add = Store("Y", (Var("i"),), Binary("+", Load("Y", (Var("i"),), F32), term, F32))
    total = Kernel("accumulate__sum__gpu__", (W, Y), (N // 32, 1, 1), (32, 1, 1),
                   (THREAD, Loop("k", Const(0), Const(K), 1, (add,), comment="k")), values=(ALPHA,))
    return HostFunction("accumulate", (W, Y, ALPHA), (clear, total))


def expected_sum(w: np.ndarray, alpha: float) -> np.ndarray:
    y = np.zeros(N, np.float32)
    for k in range(K):
        y = y + np.float32(alpha) * w[k]
    return y


def test_two_kernels_emulate_in_order():
    w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
    storage = {"W": w.ravel(), "Y": np.full(N, np.nan, np.float32)}  # the clear must come first
    run = emulate_sequence(two_kernel_function(), storage, scalars={"alpha": 0.5})
    np.testing.assert_array_equal(run.storage["Y"], expected_sum(w, 0.5))
    swapped = replace(two_kernel_function(), kernels=two_kernel_function().kernels[::-1])
    assert (emulate_sequence(swapped, storage, scalars={"alpha": 0.5}).storage["Y"] == 0).all()


def test_a_sample_of_the_last_kernel_runs_after_every_block_of_the_earlier():
    w = np.ones((K, N), np.float32)
    storage = {"W": w.ravel(), "Y": np.full(N, np.nan, np.float32)}
    run = emulate_sequence(two_kernel_function(), storage, blocks=[(1, 0, 0)], scalars={"alpha": 1.0})
    assert run.blocks == [(1, 0, 0)]
    assert (run.storage["Y"][:32] == 0).all() and (run.storage["Y"][32:] == K).all()
    assert run.written["Y"].all()  # the clear wrote every element


def test_two_kernel_launcher():
    text = emit_launcher(two_kernel_function())
    assert text == (
        'extern "C" int accumulate(const float* W, float* Y, float alpha)\n{\n'
        "    // kernel 1 of 2\n"
        "    accumulate__clear__gpu__<<<dim3(2, 1, 1), dim3(32, 1, 1), 0>>>(Y);\n"
        "    {\n        const int status = (int)cudaGetLastError();\n        if (status != 0) return status;\n    }\n"
        "    // kernel 2 of 2\n"
        "    accumulate__sum__gpu__<<<dim3(2, 1, 1), dim3(32, 1, 1), 0>>>(W, Y, alpha);\n"
        "    return (int)cudaGetLastError();\n}\n")


def test_function_problems():
    good = two_kernel_function()
    assert wellformed.function_problems(good) == []
    clear, total = good.kernels
    cases = [
        (replace(good, params=(W, Y)), "params: kernel accumulate__sum__gpu__'s parameter alpha is not "
                                       "accumulate's parameter"),
        (replace(good, params=(W, Y, ScalarParam("alpha", ScalarType.float64))),
         "params: kernel accumulate__sum__gpu__'s parameter alpha is not accumulate's "
         "ScalarParam(name='alpha', dtype=<ScalarType.float64: 'float64'>)"),
        (replace(good, kernels=(clear, clear)), "params: accumulate launches two kernels named accumulate__clear__gpu__"),
        (replace(good, params=(W, Y, ALPHA, ALPHA)), "params: accumulate has two parameters named alpha"),
        (replace(good, kernels=()), "params: function accumulate launches no kernel"),
        (replace(good, name="not a name"), "params: function name 'not a name' is not a C identifier"),
        (replace(good, kernels=(clear, replace(total, values=()))),
         "kernel accumulate__sum__gpu__: declared: store to Y: variable alpha is not defined here"),
    ]
    for function, problem in cases:
        assert problem in wellformed.function_problems(function)


def h100():
    return schedc.Target(schedc.Target.Model.NVIDIA_H100)


@pytest.fixture(scope="module")
def two_kernel_package(tmp_path_factory):
    package = schedc.Package()
    package.add_function(two_kernel_function(), h100(), "Y = alpha * sum(W, axis 0)")
    package.add_function(HostFunction.single(scale_kernel()), h100())
    package.add_function(HostFunction.single(copy_kernel()), h100())
    return package.build("launches", output_dir=tmp_path_factory.mktemp("packages"))


def test_package_of_two_kernels(two_kernel_package):
    path = two_kernel_package
    toml = schedc.package.hat.read(path)
    assert sorted(toml["device_functions"]) == ["accumulate__clear__gpu__", "accumulate__sum__gpu__",
                                                "copy__gpu__", "scale__gpu__"]
    host = toml["functions"]["accumulate"]
    assert host["auxiliary"]["schedc"]["launches"] == ["accumulate__clear__gpu__", "accumulate__sum__gpu__"]
    assert [a["name"] for a in host["arguments"]] == ["W", "Y", "alpha"]
    assert host["arguments"][2]["logical_type"] == "element" and host["arguments"][2]["declared_type"] == "float"
    assert [a["name"] for a in toml["device_functions"]["accumulate__clear__gpu__"]["arguments"]] == ["Y"]
    assert "int accumulate(const float* W, float* Y, float alpha);" in path.read_text()
    assert (path.parent / "launches.cubin").stat().st_size > 0  # the .cu compiled with NVRTC
    ir = json.loads((path.parent / "launches.schedc.json").read_text())["functions"]
    assert set(ir["accumulate"]) == {"model", "function"} and ir["accumulate"]["model"] is None
    assert set(ir["scale"]) == {"model", "kernel"}  # a function of one kernel is stored as before
    loaded = schedc.load(path)
    assert loaded.accumulate.function == two_kernel_function()
    assert loaded.scale.function == HostFunction.single(scale_kernel())
    with pytest.raises(PackageError, match=r"launches 2 kernels \(accumulate__clear__gpu__, accumulate__sum__gpu__\)"):
        loaded.accumulate.kernel  # noqa: B018


def test_loader_checks_scalar_arguments(two_kernel_package):
    fn = schedc.load(two_kernel_package).accumulate
    w, y = np.ones((K, N), np.float32), np.zeros(N, np.float32)
    assert repr(fn) == "<schedc function accumulate(W: float32[4, 64], Y: float32[64], alpha: float32)>"
    views, scalars = fn.check_call((w, y, 2))
    assert [v.name for v in views] == ["W", "Y"] and scalars == {"alpha": np.float32(2).tobytes()}
    with pytest.raises(LaunchError, match=r"accumulate\(W, Y, alpha\): scalar alpha = 'x' \(str\)"):
        fn.check_call((w, y, "x"))
    with pytest.raises(LaunchError, match=r"expected 2 arrays and 1 scalar \(W, Y, alpha\), got 2"):
        fn.check_call((w, y))


def copy_kernel() -> Kernel:
    return replace(scale_kernel(), name="copy__gpu__", body=(THREAD, Store("Y", (Var("i"),), Load("X", (Var("i"),), F32))),
                   values=())


def test_old_packages_without_values_still_load(two_kernel_package, tmp_path):
    """A .schedc.json written before by-value parameters: a kernel without ``values``."""
    import shutil

    directory = tmp_path / "launches"
    shutil.copytree(two_kernel_package.parent, directory)
    ir_path = directory / "launches.schedc.json"
    ir = json.loads(ir_path.read_text())
    del ir["functions"]["copy"]["kernel"]["values"]
    ir_path.write_text(json.dumps(ir))
    assert schedc.load(directory / "launches.hat").copy.function == HostFunction.single(copy_kernel())


def test_cli_refuses_functions_it_cannot_check(two_kernel_package):
    result = CliRunner().invoke(main, ["emulate", str(two_kernel_package), "--function", "accumulate"])
    assert result.exit_code != 0
    assert "was given as kernel IR (Package.add_function): it has no loop nest" in result.output


def test_add_function_refuses_malformed_ir():
    package = schedc.Package()
    broken = replace(two_kernel_function(), params=(W, Y))
    with pytest.raises(PackageError, match="the function's kernel IR is malformed: params: kernel "):
        package.add_function(broken, h100())
    package.add_function(two_kernel_function(), h100())
    with pytest.raises(PackageError, match="already has a function accumulate"):
        package.add_function(two_kernel_function(), h100())
    with pytest.raises(PackageError, match="expected a HostFunction, not a Kernel"):
        package.add_function(scale_kernel(), h100())


@pytest.mark.gpu
def test_two_kernels_run_on_the_gpu(two_kernel_package):
    require_gpu()
    pkg = schedc.load(two_kernel_package)
    w = np.random.default_rng(1).standard_normal((K, N)).astype(np.float32)
    y = np.full(N, np.nan, np.float32)
    pkg.accumulate(w, y, 0.5)
    np.testing.assert_allclose(y, expected_sum(w, 0.5), rtol=1e-6)
    x, out = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    pkg.scale(x, out, np.float32(-2))
    np.testing.assert_array_equal(out, -2 * x)


# -- a struct parameter: a TMA descriptor -------------------------------------------------------

T = Buffer("T", F32, (16, 64), (64, 1), "param", "input")
WORDS = Buffer("words", ScalarType.uint64, (16,), (1,), "param", "output")
TMAP = StructParam("tmap", "tensor_map", TensorMap("T", (8, 32), F32, swizzle=128))


@register
@declares(writes=("target",))
@dataclass(frozen=True)
class CopyWords:
    """(test) Thread 0 copies the 64-bit words of a by-value parameter into an array."""

    param: str
    target: str
    words: int


@EMITTERS.handles(CopyWords)
def _copy_words(printer, s: CopyWords, pad: str, depth: int) -> list[str]:
    source = f"reinterpret_cast<const unsigned long long*>(&{s.param})"
    return [f"{pad}if (threadIdx.x == 0) for (int w = 0; w < {s.words}; ++w) {s.target}[w] = {source}[w];"]


def tensor_map_kernel(struct: StructParam = TMAP) -> Kernel:
    return Kernel("descriptor__gpu__", (T, WORDS), (1, 1, 1), (32, 1, 1), (CopyWords("tmap", "words", 16),),
                  values=(struct,))


def test_struct_parameter_signature_compiles_for_sm90():
    kernel = tensor_map_kernel()
    text = emit_kernel(kernel)
    assert ("descriptor__gpu__(const float* __restrict__ T, unsigned long long* __restrict__ words, "
            "const __grid_constant__ CUtensorMap tmap)") in text
    assert 'extern "C" int descriptor(const float* T, unsigned long long* words, CUtensorMap tmap)' in \
        emit_launcher(kernel)
    source = emit_source([kernel], "// descriptor")
    assert "typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;" in source
    compiled = nvrtc_compile(source + "static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 64, "
                                      "\"a CUtensorMap\");\n", "descriptor", "sm_90")
    assert ".param .align 64 .b8 descriptor__gpu___param_2[128]" in compiled.ptx
    assert "CUtensorMap" not in emit_source([scale_kernel()], "// scale")  # only where a struct is passed


@pytest.mark.parametrize(("spec", "problem"), [
    (TensorMap("X", (8, 32), F32), "X is not an array parameter of the kernel"),
    (TensorMap("T", (8, 32), ScalarType.float16), "float16 elements, the array's are float32"),
    (TensorMap("T", (32,), F32), "box [32] for an array of rank 2"),
    (TensorMap("T", (512, 32), F32), "box [512, 32] has a side outside 1 to 256"),
    (TensorMap("T", (8, 3), F32), "a box row is 12 bytes, not a multiple of 16"),
    (TensorMap("T", (8, 32), F32, swizzle=64), "swizzle 64 for rows of 128 bytes"),
    (TensorMap("T", (8, 32), F32, swizzle=16), "swizzle 16 for rows of 128 bytes"),
])
def test_verifier_checks_tensor_maps(spec, problem):
    problems = wellformed.problems(tensor_map_kernel(StructParam("tmap", "tensor_map", spec)))
    assert any(problem in p for p in problems), problems


def test_verifier_knows_the_builders():
    struct = replace(TMAP, builder="texture")
    assert "params: struct tmap: no builder named 'texture' (tensor_map)" in \
        wellformed.problems(tensor_map_kernel(struct))


class _DeviceArray:
    """A device allocation seen through ``__cuda_array_interface__``."""

    def __init__(self, array: np.ndarray) -> None:
        self.memory = driver.DeviceMemory(array.nbytes)
        self.memory.upload(array)
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str,
                                         "data": (self.memory.pointer, False), "strides": None, "version": 3}


@pytest.mark.gpu
def test_tensor_map_reaches_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setitem(wellformed.RULES.handlers, CopyWords, lambda self, s, scope: None)  # a rule for the test node
    package = schedc.Package()
    package.add_function(HostFunction.single(tensor_map_kernel()), h100())
    path = package.build("descriptor", output_dir=tmp_path)
    require_gpu()
    fn = schedc.load(path).descriptor
    t = _DeviceArray(np.arange(16 * 64, dtype=np.float32).reshape(16, 64))
    words = _DeviceArray(np.zeros(16, np.uint64))
    fn(t, words)
    driver.device().synchronize()
    received = np.zeros(16, np.uint64)
    words.memory.download(received)
    expected = driver.encode_tensor_map(t.memory.pointer, F32, T.shape, T.strides, (8, 32), 128)
    assert received.tobytes() == expected
    assert received.any()
