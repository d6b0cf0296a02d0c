#!/usr/bin/env python3
"""Variants of the row kernels (samples/softmax.py, samples/layernorm.py): threads a block and
rows, built into one package and timed against torch in one run (benchmarks/softmax.py's checks
and timings, GB/s counting X read and Y written once).

A variant is named ``<softmax|softmax_fast|layernorm|layernorm_one_pass>_<type>_<M>x<N>_t<threads>[_keep][_s]``
(``layernorm_one_pass``: the sums of X and of its squares in one pass, ``layernorm(one_pass=True)``;
``_keep``: the exponentials computed once into a scratch row in shared memory, ``softmax(keep=True)``;
``_s``: the row's statistics in shared memory too, ``scratch=True``: no workspace).

Usage: python benchmarks/row_variants.py build [OUTPUT_DIR]   (hat_packages unless given), then on
the GPU: python benchmarks/row_variants.py time [OUTPUT_DIR]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]
sys.path.append(str(ROOT / "benchmarks"))  # after samples/: its softmax.py is the sample's

import layernorm  # noqa: E402
import softmax  # noqa: E402

import schedc as acc  # noqa: E402

F16, F32 = acc.ScalarType.float16, acc.ScalarType.float32
SHORT = {F16: "fp16", F32: "fp32"}
# (type, fast, M, N, threads, keep, scratch): keep without scratch lost to both (BENCHMARKS.md); a float32
# row of 32768 and its exponentials would need 256 KB of shared memory
SOFTMAX = [*((dtype, fast, 8192, 4096, threads, keep, scratch) for dtype in (F16, F32) for fast in (True, False)
             for threads in (128, 256) for keep, scratch in ((False, False), (False, True), (True, True))),
           *((dtype, fast, 4096, 32768, threads, keep, scratch) for dtype, threads in ((F16, 512), (F32, 1024))
             for fast in (True, False) for keep, scratch in ((False, False), (False, True), (True, True))
             if not (keep and dtype is F32))]
LAYERNORM = [(8192, 4096, 256, True, scratch) for scratch in (False, True)]


def variants():
    for dtype, fast, M, N, threads, keep, scratch in SOFTMAX:
        name = (f"softmax{'_fast' if fast else ''}_{SHORT[dtype]}_{M}x{N}_t{threads}{'_keep' if keep else ''}"
                + ("_s" if scratch else ""))
        yield name, lambda d=dtype, f=fast, m=M, n=N, t=threads, k=keep, s=scratch: softmax.softmax(
            m, n, d, t, fast=f, keep=k, scratch=s)
    for M, N, threads, one_pass, scratch in LAYERNORM:
        yield (f"layernorm{'_one_pass' if one_pass else ''}_fp16_{M}x{N}_t{threads}{'_s' if scratch else ''}",
               lambda m=M, n=N, t=threads, o=one_pass, s=scratch: layernorm.layernorm(m, n, F16, t, one_pass=o,
                                                                                      scratch=s))


def main() -> None:
    command, out = sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else "hat_packages")
    if command == "build":
        package = acc.Package()
        for name, make in variants():
            package.add(*make(), base_name=name)
        package.build("row_variants", format=acc.Package.Format.HAT_SOURCE, output_dir=out / "row_variants")
        return
    import torch

    spec = importlib.util.spec_from_file_location("softmax_times", ROOT / "benchmarks" / "softmax.py")
    timing = importlib.util.module_from_spec(spec)  # the benchmark's checks and timings (samples/ has a softmax too)
    spec.loader.exec_module(timing)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, fn in sorted(acc.load(out / "row_variants" / "row_variants.hat").functions.items()):
        times = timing.layernorm_times if name.startswith("layernorm") else timing.softmax_times
        timing.report(name, *times(fn))


if __name__ == "__main__":
    main()
