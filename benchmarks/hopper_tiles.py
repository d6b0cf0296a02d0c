#!/usr/bin/env python3
"""Other tiles of the Hopper plan (samples/hopper_matmul.py), so that one device run times them
side by side: ``fp16_<M>_b<m>x<n>x<k>_wn<n>_s<stages>[_nows]`` (``_nows``: without warp
specialization).

Usage: python benchmarks/hopper_tiles.py [OUTPUT_DIR]   (hat_packages unless given), then on the GPU
    schedc bench hat_packages/hopper_tiles/hopper_tiles.hat --compare cublas --time-in-ms
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import hopper_matmul  # noqa: E402

import schedc as acc  # noqa: E402

# (block m, n, k), warpgroup n, stages, warp-specialized
TILES = [((128, 256, 64), 256, 3, True), ((128, 256, 64), 256, 4, False), ((128, 128, 64), 128, 4, True),
         ((128, 128, 64), 128, 6, True), ((256, 128, 64), 128, 4, True), ((128, 256, 32), 256, 6, True)]


def main() -> None:
    output = sys.argv[1] if len(sys.argv) > 1 else "hat_packages"
    package = acc.Package()
    for size in (4096, 8192):
        for block, wn, stages, ws in TILES:
            name = f"fp16_{size}_b{'x'.join(map(str, block))}_wn{wn}_s{stages}{'' if ws else '_nows'}"
            plan, args = hopper_matmul.matmul(size, size, size, block=block, stages=stages, specialize=ws,
                                              warpgroup_n=wn)
            package.add(plan, args, base_name=name)
    package.build("hopper_tiles", format=acc.Package.Format.HAT_SOURCE, output_dir=output)


if __name__ == "__main__":
    main()
