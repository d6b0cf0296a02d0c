#!/usr/bin/env python3
"""Row softmax and layer normalisation (samples/softmax.py, samples/layernorm.py) against PyTorch
on the GPU, in one run: each function checked against torch first, then it and torch's own
(``torch.softmax``, ``torch.nn.functional.layer_norm``) timed with ``triton.testing.do_bench``
(median, L2 flushed between calls). GB/s counts X read and Y written once.

Usage (on the GPU, repository root): python benchmarks/softmax.py [PACKAGES_DIR]
(builds the samples into hat_packages unless they are there).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from built import sample_package  # noqa: E402


def main() -> None:
    import torch

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "hat_packages"
    packages = {sample: sample_package(sample, out) for sample in ("softmax", "layernorm")}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, fn in sorted(packages["softmax"].functions.items()):
        report(name, *softmax_times(fn))
    for name, fn in sorted(packages["layernorm"].functions.items()):
        report(name, *layernorm_times(fn))


def report(name: str, ours: float, theirs: float, moved: int) -> None:
    print(f"{name}: schedc {ours * 1e3:.1f} us ({moved / ours / 1e6:.0f} GB/s), torch {theirs * 1e3:.1f} us "
          f"({moved / theirs / 1e6:.0f} GB/s): {theirs / ours:.3f}x torch")


def _tensors(fn):
    import torch

    x = fn.model.buffers[0]
    dtype = {"float16": torch.float16, "float32": torch.float32}[x.dtype.value]
    M, N = x.shape
    torch.manual_seed(0)
    return torch.randn(M, N, device="cuda", dtype=dtype), dtype, M, N


def softmax_times(fn) -> tuple[float, float, int]:
    import torch
    from triton.testing import do_bench

    x, dtype, M, N = _tensors(fn)
    y = torch.empty_like(x)
    fn(x, y)
    want = torch.softmax(x.float(), dim=1)
    assert (y.float() - want).abs().max().item() < 1e-2 * want.abs().max().item(), f"{fn.name}: wrong result"
    ours = do_bench(lambda: fn(x, y), return_mode="median")
    theirs = do_bench(lambda: torch.softmax(x, dim=1), return_mode="median")
    return ours, theirs, 2 * x.numel() * x.element_size()


def layernorm_times(fn) -> tuple[float, float, int]:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from triton.testing import do_bench

    x, dtype, M, N = _tensors(fn)
    gamma = torch.randn(N, device="cuda", dtype=dtype)
    beta = torch.randn(N, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    fn(x, gamma, beta, y)
    want = F.layer_norm(x.float(), (N,), gamma.float(), beta.float())
    assert (y.float() - want).abs().max().item() < 2e-2 * want.abs().max().item(), f"{fn.name}: wrong result"
    ours = do_bench(lambda: fn(x, gamma, beta, y), return_mode="median")
    theirs = do_bench(lambda: F.layer_norm(x, (N,), gamma, beta), return_mode="median")
    return ours, theirs, 2 * x.numel() * x.element_size()


if __name__ == "__main__":
    main()
