#!/usr/bin/env python3
"""One head's attention forward (samples/attention.py) against torch's scaled_dot_product_attention
on the same tensors, on the GPU, in one run.

For each function of the sample (and, with ``--variants``, the plan at other key tiles, stages and
with ``acc.fast_exp``): O is checked against torch's math first (float32 softmax, relative to O's
largest value), then schedc and each of torch's backends (cuDNN, FlashAttention-2, memory-efficient;
those the device has) are timed with ``triton.testing.do_bench`` (medians in ms), the median of
``ROUNDS`` rounds that time each in turn. TFLOP/s counts 4·M·N·d; ``x best`` is the fastest
backend's time over schedc's (> 1: schedc faster). One head (batch 1): torch's kernels get the
same ``M / 128`` blocks of queries as schedc's plan.

Usage (on the GPU, repository root): python benchmarks/attention.py [--variants] [--only PREFIX[,PREFIX...]]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import attention  # noqa: E402
from built import sample_package  # noqa: E402

import schedc as acc  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402

ROUNDS = 3
VARIANTS = {  # name: (M = N, d, attention options), float16
    "v_d64_kv128_s2": (16384, 64, dict(kv_tile=128, stages=2)),
    "v_d64_kv128_s3": (16384, 64, dict(kv_tile=128, stages=3)),
    "v_d64_kv128_s2_fast": (16384, 64, dict(kv_tile=128, stages=2, exponential=acc.fast_exp)),
    "v_d64_kv64_s2": (16384, 64, dict(kv_tile=64, stages=2)),
    "v_d128_kv64_s2": (16384, 128, dict(kv_tile=64, stages=2)),
    "v_d128_kv64_s3_v3": (16384, 128, dict(kv_tile=64, stages=3, v_stages=3)),
    "v_d128_kv64_s2_fast": (16384, 128, dict(kv_tile=64, stages=2, exponential=acc.fast_exp)),
    "v_d128_kv128_rows64": (16384, 128, dict(kv_tile=128, rows=64, stages=2, producer=False)),
    "v_d64_kv128_s2_4k": (4096, 64, dict(kv_tile=128, stages=2)),
    "v_d128_kv64_s2_4k": (4096, 128, dict(kv_tile=64, stages=2)),
}


def main() -> None:
    import torch

    package = sample_package("attention", ROOT / "hat_packages")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    functions = list(package.functions.items())
    if "--variants" in sys.argv:
        functions += variants()
    if "--only" in sys.argv:
        prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(","))
        functions = [(name, fn) for name, fn in functions if name.startswith(prefixes)]
    print(f"{'function':>26} {'M':>6} {'d':>4} {'schedc ms':>9} {'TFLOP/s':>8} "
          + " ".join(f"{b:>14}" for b in BACKENDS) + f" {'x best':>7} {'error':>9}")
    for name, fn in functions:
        M, d = shape_of(name)
        rounds = [measure(fn, M, d, torch.bfloat16 if "bf16" in name else torch.float16) for _ in range(ROUNDS)]
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        flops = 4 * M * M * d
        best = min(t[b] for b in BACKENDS if b in t)
        cells = " ".join(f"{t[b]:7.3f} ({flops / t[b] / 1e9:4.0f})" if b in t else f"{'-':>14}" for b in BACKENDS)
        print(f"{name:>26} {M:>6} {d:>4} {t['schedc']:9.3f} {flops / t['schedc'] / 1e9:8.0f} {cells} "
              f"{best / t['schedc']:7.3f} {t['error']:9.2e}")


def shape_of(name: str) -> tuple[int, int]:
    if name in VARIANTS:
        return VARIANTS[name][0], VARIANTS[name][1]
    M, d = name.rsplit("_", 1)[1].split("x")
    return int(M), int(d)


def variants():
    """The float16 plan at other tiles, built into a temporary package (a plan the compiler
    refuses is named with its reason and left out)."""
    out = Path(tempfile.mkdtemp())
    package = acc.Package()
    prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv else ("",)
    for name, (M, d, options) in VARIANTS.items():
        if name.startswith(prefixes):
            try:
                package.add(*attention.attention(M, M, d, **options), base_name=name)
            except SchedcError as error:
                print(f"{name}: refused: {error}")
    package.build("attention_variants", output_dir=out)
    return list(acc.load(out / "attention_variants.hat").functions.items())


BACKENDS = ("cudnn", "flash", "efficient")


def measure(fn, M: int, d: int, dtype) -> dict[str, float]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    torch.manual_seed(0)
    q, k, v = (torch.randn(M, d, device="cuda", dtype=dtype) for _ in range(3))
    o = torch.empty(M, d, device="cuda", dtype=dtype)
    fn(q, k, v, o)
    scores = (q.float() @ k.float().T) / d ** 0.5
    want = torch.softmax(scores, dim=1) @ v.float()
    error = ((o.float() - want).abs().max() / want.abs().max()).item()
    assert error < 2e-2, f"{fn.name}: relative error {error:.3e}"
    times = {"schedc": do_bench(lambda: fn(q, k, v, o), return_mode="median"), "error": error}
    q4, k4, v4 = (x.view(1, 1, M, d) for x in (q, k, v))
    for name, backend in zip(BACKENDS, (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                                        SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                sdpa(q4, k4, v4)
                times[name] = do_bench(lambda: sdpa(q4, k4, v4), return_mode="median")
        except RuntimeError:  # the backend does not take these tensors on this device
            pass
    return times


if __name__ == "__main__":
    main()
