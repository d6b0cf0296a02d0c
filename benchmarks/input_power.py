#!/usr/bin/env python3
"""Does the data change the clock? A matrix product and cuBLAS timed on the *same* tensors, for
several input distributions, while ``nvidia-smi`` samples the SM clock and the power.

At the H200's power cap the clock follows the energy a launch takes, and a tensor core's energy
depends on the bits it multiplies. ``schedc bench`` times its function on values in
±[1/16, 1] (random signs) and, before this script, cuBLAS on ``torch.rand + 1/16`` (all positive):
this script times both on each of

- ``signed``: ±[1/16, 1], random signs (``schedc.data.random_array``'s values);
- ``positive``: [1/16, 17/16] (``torch.rand + 1/16``);
- ``normal``: ``torch.randn`` (B scaled by 1/sqrt(K)).

Each pair runs in turn for ``--seconds`` each, ``--rounds`` times: the median time, clock, power
and the time scaled to one clock (ms x MHz) of each.

Usage (device machine): python3 benchmarks/input_power.py PACKAGE.hat [--function F ...]
(functions ``C += A @ B`` of 16-bit A, B and C, as ``samples/hopper_matmul.py`` builds)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from clocks import sampled  # noqa: E402


def tensors(kind: str, M: int, N: int, K: int, dtype):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)

    def signed(shape):
        v = torch.rand(shape, device="cuda", generator=g) * 0.9375 + 0.0625
        sign = torch.randint(0, 2, shape, device="cuda", generator=g) * 2 - 1
        return (v * sign).to(dtype)

    def positive(shape):
        return (torch.rand(shape, device="cuda", generator=g) + 0.0625).to(dtype)

    def normal(shape, scale=1.0):
        return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)

    if kind == "signed":
        return signed((M, K)), signed((K, N)), signed((M, N))
    if kind == "positive":
        return positive((M, K)), positive((K, N)), positive((M, N))
    return normal((M, K)), normal((K, N), K ** -0.5), normal((M, N))


def timed(launch, seconds: float) -> float:
    """Milliseconds a launch: batches of 50 between CUDA events for ``seconds``, the median."""
    import time

    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        launch()
    torch.cuda.synchronize()
    batches, stop = [], time.monotonic() + seconds
    while time.monotonic() < stop:
        start.record()
        for _ in range(50):
            launch()
        end.record()
        end.synchronize()
        batches.append(start.elapsed_time(end) / 50)
    return statistics.median(batches)


def line(name: str, ms: float, rows) -> tuple[str, float]:
    mhz = statistics.median(r[0] for r in rows)
    watts = statistics.median(r[1] for r in rows)
    return f"    {name:<8} {ms:8.4f} ms  {mhz:6.0f} MHz  {watts:6.1f} W  {ms * mhz:8.1f} ms*MHz", ms


def pairs(fn, a, b, c, args) -> list[float]:
    """Each round: the function, then cuBLAS's ``c.addmm_(a, b)``, timed and sampled; their ratios."""
    ratios = []
    for _ in range(args.rounds):
        text, ours = line("schedc", *sampled(lambda: timed(lambda: fn(a, b, c), args.seconds)))
        print(text)
        text, theirs = line("cuBLAS", *sampled(lambda: timed(lambda: c.addmm_(a, b), args.seconds)))
        print(text)
        ratios.append(theirs / ours)
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--function", action="append")
    parser.add_argument("--seconds", type=float, default=2.5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default="signed,positive,normal")
    args = parser.parse_args()
    import torch

    from schedc.package.loader import load

    package = load(args.package)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in args.function or list(package.functions):
        fn = package.functions[name]
        a_buf, b_buf, c_buf = fn.model.buffers[:3]
        (M, K), N = a_buf.shape, b_buf.shape[1]
        dtype = getattr(torch, {"float16": "float16", "bfloat16": "bfloat16"}[a_buf.dtype.value])
        print(f"{name} ({M}x{N}x{K}):")
        for kind in args.kinds.split(","):
            a, b, c = tensors(kind, M, N, K, dtype)
            want = c.float() + a.float() @ b.float()
            fn(a, b, c)
            torch.cuda.synchronize()
            error = ((c.float() - want).abs().max() / want.abs().max()).item()
            print(f"  {kind} (checked: max relative error {error:.1e})")
            assert error < 1e-2, f"{name}: wrong result on {kind} inputs"
            print(f"    x cuBLAS: {', '.join(f'{r:.3f}' for r in pairs(fn, a, b, c, args))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
