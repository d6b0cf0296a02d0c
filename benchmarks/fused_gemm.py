#!/usr/bin/env python3
"""A GEMM with its GELU epilogue fused (samples/fused_gemm.py) against the same plan without the
epilogue and against PyTorch's forms of ``gelu(A @ B + bias)``, on the GPU, in one run.

For each shape: ``gelu_fp16_<M>x<N>x<K>`` (schedc, fused), ``relu_fp16_<M>x<N>x<K>`` (a cheap
epilogue, for scale), ``gelu_tanh_fp16_<M>x<N>x<K>`` (GELU's tanh form by ``acc.fast_tanh``,
against torch's ``gelu(addmm(...), approximate="tanh")``) and ``matmul_fp16_<M>x<N>x<K>``
(schedc, the product alone) from the sample's package, the ping-pong plans ``gelu_pp_*`` and
``matmul_pp_*``, and ``gelu_into_*`` / ``gelu_keep_*`` (the activation written into another array
Y; ``keep``: C = A @ B + bias stored beside it); torch's best eager form ``gelu(addmm(bias, A, B))``, the three ops
``gelu(mm(A, B) + bias)``, and cuBLAS's product alone (``mm``). Each schedc function is checked
against torch first (fp16 tolerance relative to the largest value). Times are
``triton.testing.do_bench`` medians (L2 flushed between calls), in ms, the median of five rounds
that time every form in turn; ``x plain`` is the fused kernel's speed relative to the plain one
(plain time / fused time, ≥ 0.97 wanted) and ``x torch`` relative to torch's addmm form (> 1:
schedc faster). The same for the ping-pong pair (``gelu_pp_*``, ``matmul_pp_*``); ``x best``: the
faster plain kernel's time over the faster fused one's.

Usage (on the GPU, repository root): python benchmarks/fused_gemm.py [PACKAGE_DIR]
(builds samples/fused_gemm.py into hat_packages/fused_gemm unless it is there).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import fused_gemm  # noqa: E402
from built import sample_package  # noqa: E402

ROUNDS = 5  # each form timed this many times, in turn; the median of them is reported


def main() -> None:
    import torch

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "hat_packages" / "fused_gemm"
    package = sample_package("fused_gemm", out.parent)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'shape':>16} {'fused':>8} {'plain':>8} {'x plain':>8} {'addmm+gelu':>10} {'3 ops':>8} "
          f"{'mm':>8} {'x torch':>8} {'relu':>8} {'x plain':>8} {'pp fused':>8} {'pp plain':>8} {'x plain':>8} "
          f"{'x torch':>8} {'x best':>8}")
    tanh_forms, others = [], []
    for M, N, K in fused_gemm.SHAPES:
        rounds = [measure(package, M, N, K) for _ in range(ROUNDS)]  # interleaved: clocks drift between runs
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        others.append(f"{f'{M}x{N}x{K}':>16} {t['into']:8.4f} {t['fused'] / t['into']:8.3f} {t['keep']:8.4f} "
                      f"{t['fused'] / t['keep']:8.3f}")
        tanh_forms.append(f"{f'{M}x{N}x{K}':>16} {t['tanh']:8.4f} {t['plain']:8.4f} {t['plain'] / t['tanh']:8.3f} "
                          f"{t['addmm_tanh']:10.4f} {t['addmm_tanh'] / t['tanh']:8.3f}")
        print(f"{f'{M}x{N}x{K}':>16} {t['fused']:8.4f} {t['plain']:8.4f} "
              f"{t['plain'] / t['fused']:8.3f} {t['addmm']:10.4f} {t['three']:8.4f} "
              f"{t['mm']:8.4f} {t['addmm'] / t['fused']:8.3f} {t['relu']:8.4f} "
              f"{t['plain'] / t['relu']:8.3f} {t['pp_fused']:8.4f} {t['pp_plain']:8.4f} "
              f"{t['pp_plain'] / t['pp_fused']:8.3f} {t['addmm'] / t['pp_fused']:8.3f} "
              f"{min(t['plain'], t['pp_plain']) / min(t['fused'], t['pp_fused']):8.3f}")
    print("GELU into another array Y: the product in registers alone (into), and C = A @ B + bias kept beside Y "
          "(keep):")
    print(f"{'shape':>16} {'into':>8} {'x fused':>8} {'keep':>8} {'x fused':>8}")
    print("\n".join(others))
    print("GELU's tanh form (acc.fast_tanh) against torch's gelu(addmm(bias, A, B), approximate='tanh'):")
    print(f"{'shape':>16} {'tanh':>8} {'plain':>8} {'x plain':>8} {'addmm+tanh':>10} {'x torch':>8}")
    print("\n".join(tanh_forms))


def measure(package, M: int, N: int, K: int) -> dict[str, float]:
    """The schedc functions checked against torch, then every form timed (ms, medians)."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from triton.testing import do_bench

    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    functions = package.functions
    fused, pp_fused = (functions[f"gelu{kind}_fp16_{M}x{N}x{K}"] for kind in ("", "_pp"))
    plain, pp_plain = (functions[f"matmul{kind}_fp16_{M}x{N}x{K}"] for kind in ("", "_pp"))
    for fn in (fused, pp_fused, plain, pp_plain):
        c.zero_()
        fn(a, b, c, bias) if fn in (fused, pp_fused) else fn(a, b, c)
        want = (F.gelu(torch.addmm(bias, a, b)) if fn in (fused, pp_fused) else a @ b).float()
        error = ((c.float() - want).abs().max() / want.abs().max()).item()
        assert error < 2e-2, f"{fn.name}: relative error {error:.3e}"
    relu, tanh = (package.functions[f"{name}_fp16_{M}x{N}x{K}"] for name in ("relu", "gelu_tanh"))
    for fn, want in ((relu, F.relu(torch.addmm(bias, a, b))),
                     (tanh, F.gelu(torch.addmm(bias, a, b), approximate="tanh"))):
        fn(a, b, c, bias)
        error = ((c.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert error < 2e-2, f"{fn.name}: relative error {error:.3e}"
    into, keep = (package.functions[f"gelu_{name}_fp16_{M}x{N}x{K}"] for name in ("into", "keep"))
    y = torch.empty_like(c)
    pre = torch.addmm(bias, a, b)
    for fn, outputs in ((into, {"y": y}), (keep, {"c": c, "y": y})):
        c.zero_(), y.zero_()
        fn(a, b, bias, y) if fn is into else fn(a, b, c, bias, y)
        for name, got in outputs.items():
            want = (pre if name == "c" else F.gelu(pre)).float()
            error = ((got.float() - want).abs().max() / want.abs().max()).item()
            assert error < 2e-2, f"{fn.name} ({name}): relative error {error:.3e}"
    return {
        "into": do_bench(lambda: into(a, b, bias, y), return_mode="median"),
        "keep": do_bench(lambda: keep(a, b, c, bias, y), return_mode="median"),
        "tanh": do_bench(lambda: tanh(a, b, c, bias), return_mode="median"),
        "addmm_tanh": do_bench(lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh"), return_mode="median"),
        "relu": do_bench(lambda: relu(a, b, c, bias), return_mode="median"),
        "fused": do_bench(lambda: fused(a, b, c, bias), return_mode="median"),
        "plain": do_bench(lambda: plain(a, b, c), return_mode="median"),
        "pp_fused": do_bench(lambda: pp_fused(a, b, c, bias), return_mode="median"),
        "pp_plain": do_bench(lambda: pp_plain(a, b, c), return_mode="median"),
        "addmm": do_bench(lambda: F.gelu(torch.addmm(bias, a, b)), return_mode="median"),
        "three": do_bench(lambda: F.gelu(torch.mm(a, b) + bias), return_mode="median"),
        "mm": do_bench(lambda: torch.mm(a, b), return_mode="median"),
    }


if __name__ == "__main__":
    main()
