"""The CUDA backend: every kernel compiles for sm_80 and sm_90, the PTX holds the intended
instructions, key samples match golden files, and builds are byte-identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedc.codegen.cuda import emit_source, runtime_header, without_runtime
from schedc.package.compile import nvrtc_compile

from .conftest import LARGE_SAMPLES, SAMPLES, build_sample, show_sample
from .plans import VARIANTS, compile_plan

GOLDEN = Path(__file__).parent / "golden"


def _sources():
    for sample in SAMPLES + LARGE_SAMPLES:
        functions = show_sample(sample)
        yield sample, [model for _, model, _, _ in functions], functions[0][3]
    for name, (make, _) in sorted(VARIANTS.items()):
        model, kernel = compile_plan(*make(), name=name)
        yield name, [model], emit_source([kernel], f"// {name}")


@pytest.mark.parametrize("name, models, source", list(_sources()), ids=lambda x: x if isinstance(x, str) and "\n" not in x else "")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_with_nvrtc(name, models, source, arch):
    compiled = nvrtc_compile(source, name, arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    ptx = compiled.ptx
    assert f".target {arch}" in ptx
    for model in models:
        _check_ptx(model, _entry(ptx, f"{model.function}__gpu__"))


def _entry(ptx: str, name: str) -> str:
    """The PTX of one kernel: from its .entry to the next one."""
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:] if end < 0 else ptx[start:end]


def _check_ptx(model, ptx: str) -> None:
    """The instructions the plan asks for are in the kernel's PTX."""
    if model.tensorize is not None:
        assert "wmma.mma.sync" in ptx and "wmma.load.a.sync" in ptx and "wmma.store.d.sync" in ptx
        if model.tensorize.mma_shape.name == "M16xN16xK8_B1":
            assert ".tf32" in ptx and "cvt.rna.tf32.f32" in ptx
    else:
        assert "wmma" not in ptx
    shared = [c for c in model.caches if c.location.name == "SHARED"]
    if shared:
        assert "bar.sync" in ptx
    if any(c.pipeline == "async" and not c.automatic for c in shared):
        assert "cp.async.c" in ptx and "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx
    elif not any(c.automatic for c in shared):  # AUTO may fall back to registers
        assert "cp.async" not in ptx


@pytest.mark.parametrize("sample", SAMPLES + LARGE_SAMPLES)
def test_golden_source(sample, update_golden):
    """The generated part of each sample's .cu (the runtime header is a source file itself)."""
    source = without_runtime(show_sample(sample)[0][3])
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
