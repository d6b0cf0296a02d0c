"""The CUDA backend: every kernel compiles for sm_80 and sm_90, the PTX holds the intended
instructions, key samples match golden files, and builds are byte-identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedc.codegen.cuda import emit_source, runtime_header, without_runtime
from schedc.package.compile import nvrtc_compile

from .conftest import SAMPLES, build_sample, show_sample
from .plans import VARIANTS, compile_plan

GOLDEN = Path(__file__).parent / "golden"


def _sources():
    for sample in SAMPLES:
        ((_, model, kernel, source),) = show_sample(sample)
        yield sample, model, source
    for name, (make, _) in sorted(VARIANTS.items()):
        model, kernel = compile_plan(*make(), name=name)
        yield name, model, emit_source([kernel], f"// {name}")


@pytest.mark.parametrize("name, model, source", list(_sources()), ids=lambda x: x if isinstance(x, str) and "\n" not in x else "")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_with_nvrtc(name, model, source, arch):
    compiled = nvrtc_compile(source, name, arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    ptx = compiled.ptx
    assert f".target {arch}" in ptx
    if model.tensorize is not None:
        assert "wmma.mma.sync" in ptx and "wmma.load.a.sync" in ptx and "wmma.store.d.sync" in ptx
        if model.tensorize.mma_shape.name == "M16xN16xK8_B1":
            assert ".tf32" in ptx and "cvt.rna.tf32.f32" in ptx
    else:
        assert "wmma" not in ptx


@pytest.mark.parametrize("sample", SAMPLES)
def test_golden_source(sample, update_golden):
    """The generated part of each sample's .cu (the runtime header is a source file itself)."""
    ((_, _, _, source),) = show_sample(sample)
    source = without_runtime(source)
    path = GOLDEN / f"{sample}.cu"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run pytest --update-golden"
    assert source == path.read_text(), f"{sample}.cu differs from {path}; if intended, run pytest --update-golden"


def test_runtime_header_is_inlined():
    ((_, _, _, source),) = show_sample("hello_matmul")
    assert runtime_header().rstrip() in source
    assert "(schedc runtime header inlined here)" in without_runtime(source)
    assert "namespace schedc" not in without_runtime(source)


def test_builds_are_byte_identical(tmp_path):
    first = build_sample("tensor_matmul", tmp_path / "one")
    second = build_sample("tensor_matmul", tmp_path / "two")
    for suffix in (".cu", ".hat", ".schedc.json", ".cubin"):
        a = first.with_suffix("").with_name(first.stem + suffix)
        b = second.with_suffix("").with_name(second.stem + suffix)
        assert a.read_bytes() == b.read_bytes(), suffix


def test_source_reads_like_the_schedule():
    ((_, _, _, source),) = show_sample("hello_matmul")
    assert "// schedule loop i (BLOCK_Y): range(0, 2048, 32)" in source
    assert "const int i = blockIdx.y * 32;" in source
    assert "for (int k = 0; k < 2048; k += 1) {" in source
    assert "C[(i + ii) * 1024 + j + jj] = C[(i + ii) * 1024 + j + jj] + A[(i + ii) * 2048 + k] * B[k * 1024 + j + jj];" in source
    assert 'extern "C" __global__ void __launch_bounds__(1024)\nhello_matmul__gpu__(' in source
    assert 'extern "C" int hello_matmul(const float* A, const float* B, float* C)' in source
