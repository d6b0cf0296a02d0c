"""A C program calls a package: it includes the .hat (TOML in a C header, with the launchers'
declarations) and links lib<name>.so. On the CPU it must compile and link, every symbol
resolved; on the GPU it runs and its result matches numpy's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from schedc.package.compile import find_nvcc

from .conftest import require_gpu
from .plans import build, vector_add

N = 4096
PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include "vadd.hat"

/* the CUDA runtime calls the program makes (libcudart), declared here to need no CUDA header */
int cudaMalloc(void **pointer, size_t bytes);
int cudaMemcpy(void *target, const void *source, size_t bytes, int kind); /* 1: to device, 2: to host */
int cudaDeviceSynchronize(void);
int cudaFree(void *pointer);

int main(void) {
    enum { N = %(n)d };
    static float a[N], b[N], c[N];
    float *da = NULL, *db = NULL, *dc = NULL;
    for (int i = 0; i < N; ++i) { a[i] = 0.5f * (float)i; b[i] = 1.0f - (float)i; }
    if (cudaMalloc((void **)&da, sizeof a) || cudaMalloc((void **)&db, sizeof b) || cudaMalloc((void **)&dc, sizeof c)) {
        printf("no device memory\n");
        return 2;
    }
    cudaMemcpy(da, a, sizeof a, 1);
    cudaMemcpy(db, b, sizeof b, 1);
    int error = vadd(da, db, dc);  /* the launcher the .hat declares: returns the launch's cudaError_t */
    if (error || cudaDeviceSynchronize()) {
        printf("launch failed: %%d\n", error);
        return 3;
    }
    cudaMemcpy(c, dc, sizeof c, 2);
    for (int i = 0; i < N; ++i) {
        if (c[i] != a[i] + b[i]) {
            printf("c[%%d] = %%f, expected %%f\n", i, c[i], a[i] + b[i]);
            return 4;
        }
    }
    cudaFree(da); cudaFree(db); cudaFree(dc);
    printf("ok\n");
    return 0;
}
"""


def _cudart() -> Path | None:
    """The directory of the toolkit's libcudart.so, if there is one."""
    nvcc = find_nvcc()
    candidates = [Path(os.environ[v]) / "lib64" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "lib64")
    candidates.append(Path("/usr/local/cuda/lib64"))
    return next((d for d in candidates if (d / "libcudart.so").exists()), None)


def _package(directory: Path) -> Path:
    return build(*vector_add(N), "vadd", directory)


@pytest.mark.gpu
@pytest.mark.links
@pytest.mark.skipif(find_nvcc() is None or shutil.which("cc") is None or _cudart() is None,
                    reason="lib<name>.so needs nvcc; the program needs cc and the toolkit's libcudart")
def test_a_c_program_links_the_package_and_on_the_gpu_matches_numpy(tmp_path):
    hat = _package(tmp_path)
    assert (tmp_path / "libvadd.so").exists()
    (tmp_path / "main.c").write_text(PROGRAM % {"n": N})
    cudart = _cudart()
    command = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(tmp_path / "main.c"), f"-I{hat.parent}",
               f"-L{tmp_path}", "-lvadd", f"-L{cudart}", "-lcudart", f"-Wl,-rpath,{tmp_path}:{cudart}",
               "-Wl,--no-undefined", "-o", str(tmp_path / "main")]
    linked = subprocess.run(command, capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr  # every symbol resolved
    require_gpu()
    ran = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "ok\n"), ran.stdout + ran.stderr
