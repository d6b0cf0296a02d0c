"""The CUDA backend: every kernel compiles for sm_80 and sm_90, the PTX holds the intended
instructions, key samples match golden files, and builds are byte-identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedc.codegen.cuda import emit_source, runtime_header, without_runtime
from schedc.ir.kernel import BlockCopy, Fragment
from schedc.ir.walk import walk_statements
from schedc.package.compile import nvrtc_compile

from .conftest import LARGE_SAMPLES, SAMPLES, build_sample, show_sample
from .plans import VARIANTS, compile_plan

GOLDEN = Path(__file__).parent / "golden"


def _sources():
    for sample in SAMPLES + LARGE_SAMPLES:
        functions = show_sample(sample)
        yield sample, [(model, fn.kernels[0]) for _, model, fn, _ in functions], functions[0][3]
    for name, (make, _) in sorted(VARIANTS.items()):
        model, kernel = compile_plan(*make(), name=name)
        yield name, [(model, kernel)], emit_source([kernel], f"// {name}")


@pytest.mark.parametrize("name, models, source", list(_sources()), ids=lambda x: x if isinstance(x, str) and "\n" not in x else "")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_with_nvrtc(name, models, source, arch):
    compiled = nvrtc_compile(source, name, arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    ptx = compiled.ptx
    assert f".target {arch}" in ptx
    for model, kernel in models:
        _check_ptx(model, kernel, _entry(ptx, f"{model.function}__gpu__"))


def _entry(ptx: str, name: str) -> str:
    """The PTX of one kernel: from its .entry to the next one."""
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:] if end < 0 else ptx[start:end]


def _check_ptx(model, kernel, ptx: str) -> None:
    """The instructions the plan asks for are in the kernel's PTX: its tensor-core family's,
    ldmatrix where tiles are loaded with it, cp.async where copies are asynchronous."""
    statements = list(walk_statements(kernel.body))
    families = {s.family for s in statements if isinstance(s, Fragment)}
    assert bool(families) == (model.tensorize is not None)
    if "wmma" in families:
        assert "wmma.mma.sync" in ptx and "wmma.load.a.sync" in ptx and "wmma.store.d.sync" in ptx
    if "mma_sync" in families:
        assert "mma.sync.aligned.m16n8k" in ptx and "wmma" not in ptx
        assert ("ldmatrix.sync.aligned" in ptx) == any(getattr(s, "path", "") == "ldmatrix" for s in statements)
    if model.tensorize is not None and model.tensorize.mma_shape.name == "M16xN16xK8_B1":
        assert ".tf32" in ptx and "cvt.rna.tf32.f32" in ptx
    if not families:
        assert "wmma" not in ptx and "mma.sync" not in ptx
    shared = [c for c in model.caches if c.location.name == "SHARED"]
    if shared:
        assert "bar.sync" in ptx
    asynchronous = any(isinstance(s, BlockCopy) and s.asynchronous for s in statements)
    if asynchronous:
        assert "cp.async.c" in ptx and "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx
    else:
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
