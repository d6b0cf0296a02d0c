#!/usr/bin/env python3
"""Every GEMM shape the issues name, beside cuBLAS and Triton on the same values, in one run.

``build [OUTPUT_DIR] [--only S[,S...]] [--sweep]``: a package of Hopper plans (``samples/hopper_matmul.py``'s
``matmul``, ``samples/fp8_matmul.py``'s ``fp8_matmul``) at 4096³, 6144³, 8192³, 8192x4096x2048,
2048x14336x4096, 5000x3000x4000, 1024x1024x14336 (split-K) and 512³ in fp16 and bf16, with
float32 C, tf32 and FP8 e4m3 at 4096³ and 8192³; each shape in a few persistent groups.
A function is named ``<type>_<M>x<N>x<K>_b<m>x<n>_s<stages>_p<group>[_x<cluster>][_k<splits>][_c32][_a]``
(``_a``: C added into by TMA reductions, ``plan.split_k(deterministic=False)`` without a split).
``--sweep`` builds other plans at the shapes that ran below cuBLAS instead (``SWEEP``).

``time PACKAGE.hat [--seconds S] [--only S[,S...]]`` (GPU): each function verified against float64 once
(``schedc.bench.Bench``; the functions of one shape share their inputs), then timed, then
cuBLAS (``schedc bench --compare cublas``'s reference) and Triton (``benchmarks/triton_matmul.py``'s
kernel, autotuned, C of the function's type, or bfloat16 for FP8) on the same input values, each
for ``--seconds`` of batches while ``nvidia-smi`` samples the SM clock. Prints a table (medians,
ms; MHz) and, per type, the geometric mean over shapes of the best function's ratio to cuBLAS.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from variants import ROOT, acc, hopper_matmul  # noqa: E402

F16, BF16, F32, E4M3 = acc.ScalarType.float16, acc.ScalarType.bfloat16, acc.ScalarType.float32, \
    acc.ScalarType.float8_e4m3
SHORT = {F16: "fp16", BF16: "bf16", F32: "tf32", E4M3: "e4m3"}
WIDE = (128, 256, 64)

# (operand, (M, N, K), block, stages, groups, cluster, splits, float32 C[, C added into by TMA reductions])
BIG = ((4096,) * 3, (6144,) * 3, (8192,) * 3, (8192, 4096, 2048), (2048, 14336, 4096))
PLANS = [
    *((t, size, WIDE, 3, (4, 8, 16), 1, 1, False) for t in (F16, BF16)
      for size in BIG),
    *((t, size, WIDE, 3, (4, 8), 1, 1, False, True) for t in (F16, BF16) for size in BIG),
    (F16, (5000, 3000, 4000), WIDE, 3, (8,), 2, 1, False),
    # 13 x 40 = 520 tiles of 128 x 232 fill 3.94 waves of 132 (3000 columns = 12 x 232 + 216)
    *((t, (5000, 3000, 4000), (128, 232, 64), 3, (2, 4), 2, 1, False) for t in (F16, BF16)),
    *((t, (5000, 3000, 4000), (128, 232, 64), 3, (4,), 2, 1, False, True) for t in (F16, BF16)),
    *((t, (1024, 1024, 14336), (128, 256, 64), 4, (0,), 1, 4, False) for t in (F16, BF16)),
    *((t, (512,) * 3, (128, 128, 64), 4, (8,), 1, 1, False) for t in (F16, BF16)),
    (F16, (4096,) * 3, WIDE, 3, (8,), 1, 1, True),
    (F16, (4096,) * 3, WIDE, 3, (8,), 1, 1, True, True),
    (F32, (4096,) * 3, (128, 256, 32), 3, (8,), 1, 1, True),  # samples/hopper_matmul.py's tf32 plan
    (F32, (4096,) * 3, (128, 256, 32), 3, (8,), 1, 1, True, True),
]
FP8 = [(4096, 8), (8192, 8)]  # (size, group) of fp8_matmul's per-tensor scaled plan
# ``build --sweep``: other plans at the shapes below 1.0 of cuBLAS in PLANS' run (BENCHMARKS.md)
SHORT_K, RAGGED = (8192, 4096, 2048), (5000, 3000, 4000)
SWEEP = [
    *((t, SHORT_K, WIDE, 3, (1, 2), 1, 1, False) for t in (F16, BF16)),
    *((t, SHORT_K, WIDE, 4, (4,), 1, 1, False) for t in (F16, BF16)),
    *((t, SHORT_K, (256, 128, 64), 4, (8,), 1, 1, False) for t in (F16, BF16)),
    (F16, SHORT_K, WIDE, 3, (8,), 2, 1, False),
    (F16, RAGGED, WIDE, 3, (4, 16), 2, 1, False),
    (F16, RAGGED, WIDE, 4, (8,), 2, 1, False),
    (F16, RAGGED, (128, 128, 64), 4, (8,), 1, 1, False),
    (F16, RAGGED, (256, 128, 64), 3, (8,), 1, 1, False),
    *((F16, RAGGED, (128, 192, 64), 4, groups, cluster, 1, False) for groups, cluster in (((4, 8, 16), 2), ((8,), 4))),
    (F16, RAGGED, WIDE, 3, (8,), 4, 1, False),
    (F32, (4096,) * 3, (128, 256, 32), 3, (8,), 1, 1, True),
    (F32, (4096,) * 3, (128, 128, 32), 5, (4, 16), 1, 1, True),
    (F32, (4096,) * 3, (128, 128, 64), 3, (8,), 1, 1, True),
    (F16, (4096,) * 3, WIDE, 3, (4, 16), 1, 1, True),
    (F16, (4096,) * 3, WIDE, 4, (8,), 1, 1, True),
    (F16, (4096,) * 3, (128, 128, 64), 4, (8,), 1, 1, True),
    # C added into by TMA reductions: its two slots a warpgroup leave room for a fourth stage
    *((t, SHORT_K, WIDE, 4, (4, 8), 1, 1, False, True) for t in (F16, BF16)),
    *((t, SHORT_K, WIDE, 3, (4,), 2, 1, False, True) for t in (F16, BF16)),
    *((t, (2048, 14336, 4096), WIDE, 4, (8,), 1, 1, False, True) for t in (F16, BF16)),
    (F16, (4096,) * 3, WIDE, 4, (4,), 1, 1, False, True),
    (F16, (8192,) * 3, WIDE, 4, (8,), 1, 1, False, True),
]


def name_of(operand, size, block, stages, group, cluster, splits, wide_c, adds=False) -> str:
    return (f"{SHORT[operand]}_{'x'.join(map(str, size))}_b{block[0]}x{block[1]}_s{stages}_p{group}"
            + (f"_x{cluster}" if cluster > 1 else "") + (f"_k{splits}" if splits > 1 else "")
            + ("_c32" if wide_c and operand is not F32 else "") + ("_a" if adds else ""))


def plan_of(operand, size, block, stages, group, cluster, splits, wide_c, adds=False) -> tuple:
    plan, args = hopper_matmul.matmul(
        *size, operand=operand, block=block, stages=stages, output=F32 if wide_c else operand,
        b_layout=acc.Array.Layout.LAST_MAJOR if operand is F32 else acc.Array.Layout.FIRST_MAJOR,
        persistent={"group": group} if group else None, cluster=cluster, splits=splits,
        added=splits > 1 or adds)  # TMA reductions into C (split-K: BENCHMARKS.md, 1.06x at 1024x1024x14336)
    return plan, args


def variants(plans=PLANS):
    for operand, size, block, stages, groups, cluster, splits, wide_c, *adds in plans:
        for group in groups:
            v = (operand, size, block, stages, group, cluster, splits, wide_c, *adds)
            yield name_of(*v), lambda v=v: plan_of(*v)
    if plans is not PLANS:
        return
    from fp8_matmul import fp8_matmul

    for size, group in FP8:
        yield f"e4m3_{size}x{size}x{size}_b128x256_s3_p{group}", \
            lambda size=size, group=group: fp8_matmul(size, size, size, group=group)


def build(output: str, only: str, sweep: bool) -> None:
    package = acc.Package()
    for name, make in variants(SWEEP if sweep else PLANS):
        if chosen(name, only):
            package.add(*make(), base_name=name)
    package.build("shapes", format=acc.Package.Format.HAT_SOURCE, output_dir=f"{output}/shapes")


def chosen(name: str, only: str) -> bool:
    """Whether ``name`` holds one of ``only``'s comma-separated parts (all names for "")."""
    return any(part in name for part in only.split(","))


def timed(launch, seconds: float) -> tuple[float, float]:
    """(median ms a call over batches of 50 between CUDA events for ``seconds``, median SM MHz)."""
    from clocks import sampled
    from input_power import timed as batches

    ms, rows = sampled(lambda: batches(launch, seconds))
    return ms, sorted(r[0] for r in rows)[len(rows) // 2]


def rotating(launch):
    """``launch(i)`` with i counting up: the input sets in turn (several where one fits in L2)."""
    calls = itertools.count()
    return lambda: launch(next(calls))


def shape_key(name: str) -> str:
    """The type and shape a function's name begins with: the functions compared as one shape."""
    kind, dims = name.split("_")[:2]
    return f"{kind}_{dims}" + ("_c32" if "_c32" in name else "")


def time_package(path: str, seconds: float, only: str) -> None:
    import torch

    from schedc.bench import Bench
    from schedc.bench_reference import reference_launcher
    from schedc.package.loader import load

    package = load(path)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| function | schedc ms | MHz | cuBLAS ms | MHz | x cuBLAS | Triton ms | Triton x cuBLAS |")
    print("|---|---|---|---|---|---|---|---|")
    caches: dict[str, dict] = {}
    triton_ms: dict[str, float] = {}
    best: dict[str, float] = {}
    loaded: dict[str, float] = {}  # the best of the functions that load C (no ``_a``)
    for name, fn in sorted(package.functions.items()):
        if not chosen(name, only):
            continue
        key = shape_key(name)
        bench = Bench(fn, cache=caches.setdefault(key, {}))
        ours, our_mhz = timed(rotating(bench.launch), seconds)
        with reference_launcher("cublas", bench.model, bench.inputs) as reference:
            theirs, their_mhz = timed(rotating(reference.launch), seconds)
            if key not in triton_ms:
                triton_ms[key] = triton_time(bench, reference, seconds)
        ratio = theirs / ours
        best[key] = max(best.get(key, 0.0), ratio)
        if not name.endswith("_a"):
            loaded[key] = max(loaded.get(key, 0.0), ratio)
        print(f"| {name} | {ours:.4f} | {our_mhz:.0f} | {theirs:.4f} | {their_mhz:.0f} | **{ratio:.3f}** | "
              f"{triton_ms[key]:.4f} | {theirs / triton_ms[key]:.3f} |", flush=True)
        del bench, reference
    for kind in sorted({k.split("_")[0] for k in best}):
        for label, found in (("", best), (" loading C", loaded)):
            ratios = [r for k, r in found.items() if k.split("_")[0] == kind]
            if ratios:
                print(f"{kind}: geometric mean of the best function{label} a shape x cuBLAS over {len(ratios)} "
                      f"shapes: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")


def triton_time(bench, reference, seconds: float) -> float:
    """Triton's matmul on the reference's input sets in turn, each into a fresh C of the function's
    type."""
    import torch
    from triton_matmul import triton_matmul

    A, B, C = (b.name for b in bench.model.buffers[:3])
    sets = []
    for tensors in reference.tensors:
        a, b = tensors[A], tensors[B]
        out_type = torch.bfloat16 if a.element_size() == 1 else tensors[C].dtype
        sets.append((a, b, torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=out_type)))
    triton_matmul(*sets[0])  # autotunes once a shape
    return timed(rotating(lambda i: triton_matmul(*sets[i % len(sets)])), seconds)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("build", "time"))
    parser.add_argument("path", nargs="?", default=str(ROOT / "hat_packages"))
    parser.add_argument("--only", default="")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--sweep", action="store_true", help="build SWEEP's plans instead of PLANS'")
    args = parser.parse_args()
    if args.mode == "build":
        build(args.path, args.only, args.sweep)
    else:
        time_package(args.path, args.seconds, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
