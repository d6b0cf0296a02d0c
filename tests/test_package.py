"""Packages: hatlib reads our .hat files, C includes them, and the loader checks arguments."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import schedc
from schedc import LaunchError, PackageError
from schedc.ir.kernel import from_json, to_json
from schedc.package.compile import find_nvcc

from .conftest import SAMPLES, build_sample, has_gpu
from .plans import VARIANTS, compile_plan


@functools.cache
def hatlib_hat_file():
    """hatlib's hat_file module. hatlib 0.0.41 cannot be imported on Python >= 3.11 (its
    dataclasses have mutable defaults), so its file is loaded with hashable dataclasses; the
    parsing code that runs is hatlib's own."""
    import dataclasses as real

    spec = importlib.util.find_spec("hatlib")
    if spec is None:
        pytest.skip("hatlib is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "hat_file.py")
    shim = types.ModuleType("dataclasses")
    shim.__dict__.update(real.__dict__)

    def dataclass(cls=None, **kw):
        kw.setdefault("unsafe_hash", True)
        return real.dataclass(cls, **kw) if cls is not None else functools.partial(real.dataclass, **kw)

    shim.dataclass = dataclass
    saved = sys.modules["dataclasses"]
    sys.modules["dataclasses"] = shim
    try:
        module_spec = importlib.util.spec_from_file_location("hatlib_hat_file", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    finally:
        sys.modules["dataclasses"] = saved
    return module


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("packages")
    return {sample: build_sample(sample, root) for sample in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES)
def test_hatlib_reads_the_hat_file(packages, sample):
    hat = hatlib_hat_file().HATFile.Deserialize(str(packages[sample]))
    package = schedc.load(packages[sample])
    assert sorted(hat.function_map) == sorted(package.functions)
    for name, loaded in package.functions.items():
        fn = hat.function_map[name]
        device = hat.device_function_map[f"{name}__gpu__"]
        assert fn.launches == device.name and device.provider == f"{sample}.cu"
        assert list(device.launch_parameters) == [*loaded.kernel.grid, *loaded.kernel.block]
        assert device.dynamic_shared_mem_bytes == loaded.kernel.dynamic_shared_bytes
        assert [a.name for a in fn.arguments] == [b.name for b in loaded.kernel.params]
        assert [list(a.shape) for a in fn.arguments] == [list(b.shape) for b in loaded.kernel.params]
        assert f"int {name}(" in hat.declaration.code
    assert hat.target.required.gpu.instruction_set_version == "sm_90"
    shared = max(f.kernel.dynamic_shared_bytes for f in package.functions.values())
    assert hat.target.required.gpu.min_shared_memory_KB == -(-shared // 1024)  # what the largest block needs


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_c_includes_the_hat_file_without_warnings(packages, tmp_path):
    main = tmp_path / "main.c"
    includes = "".join(f'#include "{packages[s]}"\n' for s in SAMPLES)
    main.write_text(includes + "typedef int (*launcher)(const float*, const float*, float*);\n"
                    "int main(void) { launcher f = hello_matmul; return f ? 0 : 1; }\n")
    result = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-c",
                             str(main), "-o", str(tmp_path / "main.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_package_files(packages):
    directory = packages["tensor_matmul"].parent
    names = {p.name for p in directory.iterdir()}
    assert {"tensor_matmul.hat", "tensor_matmul.cu", "tensor_matmul.cubin", "tensor_matmul.schedc.json"} <= names
    if find_nvcc():
        assert "libtensor_matmul.so" in names
        symbols = subprocess.run(["nm", "-D", str(directory / "libtensor_matmul.so")],
                                 capture_output=True, text=True).stdout
        assert " T tensor_matmul" in symbols


def test_ir_round_trips_through_json(packages):
    fn = schedc.load(packages["tensor_matmul"]).tensor_matmul
    assert from_json(to_json(fn.kernel)) == fn.kernel
    assert from_json(to_json(fn.model)) == fn.model


def test_load_errors(packages, tmp_path):
    with pytest.raises(PackageError, match="no such package file"):
        schedc.load(tmp_path / "missing.hat")
    bad = tmp_path / "bad.hat"
    bad.write_text("[functions\n")
    with pytest.raises(PackageError, match="not a HAT file"):
        schedc.load(bad)
    copy = tmp_path / "copy"
    shutil.copytree(packages["hello_matmul"].parent, copy)
    (copy / "hello_matmul.schedc.json").unlink()
    with pytest.raises(PackageError, match="hello_matmul.schedc.json: missing: rebuild the package"):
        schedc.load(copy / "hello_matmul.hat")
    pkg = schedc.load(packages["hello_matmul"].parent)  # a directory works too
    with pytest.raises(AttributeError, match="has no function nope"):
        pkg.nope  # noqa: B018


class FakeDeviceArray:
    """Something with __cuda_array_interface__ (no GPU is touched by argument checks)."""

    def __init__(self, shape, typestr, pointer, readonly=False, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, readonly),
                                         "strides": strides, "version": 3}


class CpuDLPack:
    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_loader_argument_errors(packages):
    fn = schedc.load(packages["tensor_matmul"]).tensor_matmul
    A = np.ones((4096, 4096), np.float16)
    B = np.ones((4096, 4096), np.float16)
    C = np.zeros((4096, 4096), np.float32)
    cases = [
        ((A, B), "expected 3 arrays, got 2"),
        ((A.astype(np.float32), B, C), "argument A: dtype float32, expected float16"),
        ((A, B, C[:, :2048]), r"argument C: shape \(4096, 2048\), expected \(4096, 4096\)"),
        ((A, B, np.asfortranarray(C)), r"argument C: element strides \(1, 4096\), expected \(4096, 1\)"),
        ((A, B, [1, 2]), "argument C: a list is not an array"),
        ((A, B, np.ones((4096, 4096), np.float64)), "dtype float64, expected float32"),
    ]
    readonly = C.copy()
    readonly.flags.writeable = False
    cases.append(((A, B, readonly), "argument C: read-only, but the function writes it"))
    for args, message in cases:
        with pytest.raises(LaunchError, match=message):
            fn.check_arguments(args)
    fake_a = FakeDeviceArray((4096, 4096), "<f2", 0x7f0000000000)
    fake_b = FakeDeviceArray((4096, 4096), "<f2", 0x7f1000000001)
    fake_c = FakeDeviceArray((4096, 4096), "<f4", 0x7f2000000000, readonly=True)
    with pytest.raises(LaunchError, match="argument B: device address 0x7f1000000001 is not 2-byte aligned"):
        fn.check_arguments((fake_a, fake_b, C))
    fake_c8 = FakeDeviceArray((4096, 4096), "<f4", 0x7f2000000004)  # C moves in pairs of floats (mma.sync)
    with pytest.raises(LaunchError, match="argument C: device address 0x7f2000000004 is not 8-byte aligned"):
        fn.check_arguments((fake_a, FakeDeviceArray((4096, 4096), "<f2", 0x7f1000000000), fake_c8))
    with pytest.raises(LaunchError, match="argument C: read-only, but the function writes it"):
        fn.check_arguments((fake_a, FakeDeviceArray((4096, 4096), "<f2", 0x7f1000000000), fake_c))
    overlapping = FakeDeviceArray((4096, 4096), "<f4", 0x7f0000000000)
    with pytest.raises(LaunchError, match="arguments A and C overlap in memory, and one is written"):
        fn.check_arguments((fake_a, FakeDeviceArray((4096, 4096), "<f2", 0x7f1000000000), overlapping))
    with pytest.raises(LaunchError, match="argument A: dtype int32, expected float16"):
        fn.check_arguments((FakeDeviceArray((4096, 4096), "<i4", 0x7f0000000000), B, C))
    views = fn.check_arguments((CpuDLPack(A), B, C))  # a CPU DLPack tensor is used like numpy
    assert not views[0].on_device


def test_strided_numpy_argument_span():
    """An explicit layout with gaps: the whole storage span travels, gaps included."""
    from schedc.ir.kernel import Buffer
    from schedc.ir.types import ScalarType
    from schedc.package.arrays import describe

    buffer = Buffer("A", ScalarType.float32, (3, 4), (8, 1), "param", "output")
    storage = np.arange(20, dtype=np.float32)
    array = np.lib.stride_tricks.as_strided(storage, (3, 4), (32, 4))
    view = describe("f(A)", buffer, array, 4)
    assert view.read and view.array.shape == (20,) and view.array[9] == 9


@pytest.mark.skipif(has_gpu(), reason="checks the message shown without a GPU")
def test_calling_without_a_gpu(packages):
    fn = schedc.load(packages["hello_matmul"]).hello_matmul
    args = [np.ones(b.shape, b.dtype.numpy) for b in fn.kernel.params]
    with pytest.raises(LaunchError, match="no CUDA device is available"):
        fn(*args)


def test_repr_names_the_signature(packages):
    fn = schedc.load(packages["hello_matmul"]).hello_matmul
    assert repr(fn) == "<schedc function hello_matmul(A: float32[2048, 2048], B: float32[2048, 1024], C: float32[2048, 1024])>"
    assert dataclasses.is_dataclass(fn.info)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_generated_inputs_fit_the_parameters(variant):
    """verify/bench inputs come in each parameter's layout (column-major included)."""
    from schedc import data
    from schedc.package.arrays import describe

    model, kernel = compile_plan(*VARIANTS[variant][0]())
    arrays = data.inputs(kernel.buffers, seed=0)
    for b in (p for p in kernel.params if p.kind == "param"):  # not workspaces: the loader allocates them
        view = describe("f", b, arrays[b.name], 1)
        assert view.array.size == b.size


# -- Package.Format (Accera's flags) ------------------------------------------------------------


def _small_package():
    import schedc as acc

    plan, args = VARIANTS["fp16_acc_fp16"][0]()
    package = acc.Package()
    package.add(plan, args=args, base_name="small")
    return package


def test_formats_are_accera_flags():
    F = schedc.Package.Format
    assert F.HAT_SOURCE | F.MLIR == F.MLIR_SOURCE and F.MLIR_DYNAMIC == F.HAT_DYNAMIC | F.MLIR
    assert {f.name for f in F} >= {"DYNAMIC_LIBRARY", "STATIC_LIBRARY", "HAT_PACKAGE", "MLIR", "MLIR_VERBOSE",
                                   "SOURCE", "DEFAULT"}
    assert F.DYNAMIC_LIBRARY in F.MLIR_DYNAMIC and F.STATIC_LIBRARY not in F.HAT_SOURCE


def test_conflicting_or_foreign_formats_are_refused(tmp_path):
    F = schedc.Package.Format
    with pytest.raises(PackageError, match="asks for a dynamic and a static library; pick one"):
        _small_package().build("small", format=F.HAT_DYNAMIC | F.HAT_STATIC, output_dir=tmp_path)
    with pytest.raises(PackageError, match="format must be Package.Format"):
        _small_package().build("small", format="HAT_SOURCE", output_dir=tmp_path)


@pytest.mark.parametrize("format_name, files", [
    ("MLIR_SOURCE", ["small.txt"]),
    ("MLIR_VERBOSE", ["small.0_split.txt", "small.1_normalize.txt", "small.2_analyze.txt", "small.3_launch.txt",
                      "small.4_check.txt", "small.5_chain.txt", "small.6_tensorize.txt", "small.7_shared.txt",
                      "small.8_private.txt", "small.9_roles.txt", "small.10_epilogue.txt", "small.11_lower.txt",
                      "small.12_specialize.txt", "small.13_pipeline.txt", "small.14_reserve.txt",
                      "small.15_simplify.txt", "small.16_link.txt"]),
])
def test_mlir_formats_write_the_kernel_ir_and_say_so_once(format_name, files, tmp_path, capsys, monkeypatch):
    from schedc.package import build

    monkeypatch.setattr(build._IRRecord, "said", False)
    format = getattr(schedc.Package.Format, format_name)
    path = _small_package().build("small", format=format | schedc.Package.Format.HAT_SOURCE, output_dir=tmp_path)
    directory = path.parent / "small.ir"
    assert sorted(p.name for p in directory.iterdir()) == sorted(files)
    kernel = next(name for name in files if name.endswith("simplify.txt") or name == "small.txt")
    assert "== small after simplify" in (directory / kernel).read_text()
    assert "Kernel(name='small__gpu__'" in (directory / kernel).read_text()
    assert path.with_suffix(".cu").exists() and path.with_suffix(".cubin").exists()
    _small_package().build("small", format=format, output_dir=tmp_path / "again")
    said = capsys.readouterr().err
    assert said.count("asks for MLIR, which schedc does not make") == 1


def test_library_formats_need_nvcc(tmp_path, monkeypatch):
    from schedc.package import compile as compilers

    monkeypatch.setattr(compilers, "find_nvcc", lambda: None)
    for format in (schedc.Package.Format.HAT_STATIC, schedc.Package.Format.MLIR_DYNAMIC):
        with pytest.raises(PackageError, match="needs nvcc, which is not installed"):
            _small_package().build("small", format=format, output_dir=tmp_path)
    assert _small_package().build("small", format=schedc.Package.Format.DEFAULT, output_dir=tmp_path).exists()


def test_a_build_that_fails_leaves_the_package_as_it_was(tmp_path, monkeypatch):
    """The package built, then again for another size where the library cannot be made: every
    file is still the first build's (no new kernel beside the old description), and no staging
    folder is left."""
    from schedc.package import compile as compilers

    from .plans import vector_add

    first = schedc.Package()
    first.add(*vector_add(64), base_name="v")
    path = first.build("v", output_dir=tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr(compilers, "find_nvcc", lambda: None)
    second = schedc.Package()
    second.add(*vector_add(128), base_name="v")
    with pytest.raises(PackageError, match=r"Package.build\('v', format=HAT_STATIC\): needs nvcc"):
        second.build("v", format=schedc.Package.Format.HAT_STATIC, output_dir=tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before and path.exists()


def test_a_library_an_earlier_build_left_is_removed(tmp_path):
    """A static library of an earlier build beside a package built without one would be listed
    with it and linked against another kernel: the build removes it."""
    from .plans import vector_add

    (tmp_path / "libv.a").write_bytes(b"an earlier build's library")
    package = schedc.Package()
    package.add(*vector_add(64), base_name="v")
    package.build("v", output_dir=tmp_path)
    assert not (tmp_path / "libv.a").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".v.")]


@pytest.mark.skipif(find_nvcc() is None, reason="the libraries need nvcc")
@pytest.mark.parametrize("format", ["HAT_DYNAMIC", "HAT_STATIC"])
def test_the_same_package_built_twice_is_byte_identical(tmp_path, format):
    """Every file, the library too (nvcc's temporaries named after the object, the host compiler's
    seed fixed, no folder name in it), in two folders."""
    from .plans import vector_add

    for folder in ("one", "two"):
        package = schedc.Package()
        package.add(*vector_add(64), base_name="v")
        package.build("v", format=getattr(schedc.Package.Format, format), output_dir=tmp_path / folder)
    one, two = ({p.name: p.read_bytes() for p in (tmp_path / f).iterdir()} for f in ("one", "two"))
    assert one == two and any(name.startswith("libv.") for name in one)


def test_an_output_dir_that_cannot_be_made_is_named(tmp_path):
    from .plans import vector_add

    (tmp_path / "file").write_text("in the way")
    package = schedc.Package()
    package.add(*vector_add(64), base_name="v")
    with pytest.raises(PackageError, match=r"Package.build\('v'\): output_dir '.*file/sub': cannot make the "
                                               r"folder: Not a directory"):
        package.build("v", output_dir=tmp_path / "file" / "sub")


def test_a_package_of_another_schedc_version_says_rebuild(packages, tmp_path):
    """An IR file this schedc cannot read (a kind it no longer has: TEMP buffers became
    workspaces) is a PackageError that names the file and says to rebuild, not a traceback."""
    source = packages["hello_matmul"].parent
    copy = shutil.copytree(source, tmp_path / "old")
    ir = next(copy.glob("*.schedc.json"))
    ir.write_text(ir.read_text().replace('"param"', '"temp"', 1))
    with pytest.raises(PackageError, match=r"schedc\.json: function \w+'s IR is not this schedc's .*'temp' is not a "
                                           r"valid BufferKind.*rebuild the package"):
        assert schedc.load(next(copy.glob("*.hat"))).functions is None
