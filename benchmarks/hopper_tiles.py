#!/usr/bin/env python3
"""Variants of the Hopper plan (samples/hopper_matmul.py) that one device run times side by
side: tiles, stages, warp specialization, C's type and the persistent grid.

A variant is named ``<operand>_<M>_b<m>x<n>x<k>_wn<n>_s<stages>[_nows][_c<type>][_p<group>][_r<blocks>][_x<size>]``:
``_nows`` without warp specialization, ``_c<type>`` C's type when it is not float32 (float32
fragments either way), ``_p<group>`` a persistent grid with tiles in groups of ``group`` rows,
``_r<blocks>`` that many resident blocks (default: one per multiprocessor), ``_x<size>`` clusters
of ``size`` blocks along BLOCK_Y sharing B's tile by TMA multicast.

Usage: python benchmarks/hopper_tiles.py [OUTPUT_DIR] [--only SUBSTRING]   (hat_packages unless
given), then on the GPU
    schedc bench hat_packages/hopper_tiles/hopper_tiles.hat --compare cublas --time-in-ms
"""

from __future__ import annotations

from variants import acc, build, hopper_matmul

F16, BF16, F32 = acc.ScalarType.float16, acc.ScalarType.bfloat16, acc.ScalarType.float32
SHORT = {F16: "fp16", BF16: "bf16", F32: "tf32"}

# (operand, size (M, N, K), block (m, n, k), warpgroup n, stages, warp-specialized, C's type, group or 0
#  [, cluster size [, resident blocks or 0]])
VARIANTS = [
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F32, 0),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 0),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F32, 8),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 8),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 16),
    (F16, (4096,) * 3, (128, 256, 64), 256, 3, True, F16, 8),
    (F16, (4096,) * 3, (128, 128, 64), 128, 6, True, F16, 8),
    (F16, (4096,) * 3, (256, 128, 64), 128, 4, True, F16, 8),
    (BF16, (4096,) * 3, (128, 256, 64), 256, 4, True, BF16, 8),
    (F32, (4096,) * 3, (128, 128, 32), 128, 4, True, F32, 8),
    (F16, (2048, 1024, 2048), (128, 128, 64), 128, 4, True, F16, 8),
    (F16, (2048, 1024, 2048), (128, 256, 64), 256, 4, True, F16, 8),
    (F16, (8192,) * 3, (128, 256, 64), 256, 4, True, F16, 0),
    (F16, (8192,) * 3, (128, 256, 64), 256, 4, True, F16, 8),
    (BF16, (8192,) * 3, (128, 256, 64), 256, 4, True, BF16, 8),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 8, 2),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 16, 2),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F16, 8, 2, 128),
    (F16, (4096,) * 3, (128, 256, 64), 256, 4, True, F32, 8, 2),
    (BF16, (4096,) * 3, (128, 256, 64), 256, 4, True, BF16, 8, 2),
    (F32, (4096,) * 3, (128, 128, 32), 128, 4, True, F32, 8, 2),
    (F16, (2048, 1024, 2048), (128, 128, 64), 128, 4, True, F16, 8, 2),
    (F16, (8192,) * 3, (128, 256, 64), 256, 4, True, F16, 8, 2),
    (BF16, (8192,) * 3, (128, 256, 64), 256, 4, True, BF16, 8, 2),
    # 3 stages leave room for the warpgroups' whole tiles of 16-bit C (2 for float32 C): C comes in by TMA
    (F16, (4096,) * 3, (128, 256, 64), 256, 3, True, F16, 8, 2),
    (BF16, (4096,) * 3, (128, 256, 64), 256, 3, True, BF16, 8, 2),
    (F16, (8192,) * 3, (128, 256, 64), 256, 3, True, F16, 8, 2),
    (BF16, (8192,) * 3, (128, 256, 64), 256, 3, True, BF16, 8, 2),
    (F16, (4096,) * 3, (128, 256, 64), 256, 2, True, F32, 8, 2),
    (BF16, (4096,) * 3, (128, 256, 64), 256, 3, True, BF16, 8),
    (F16, (8192,) * 3, (128, 256, 64), 256, 3, True, F16, 8),
    (BF16, (8192,) * 3, (128, 256, 64), 256, 3, True, BF16, 8),
    # 32 values of k a stage: twice the stages in the same bytes, so the producer runs further ahead
    (F16, (4096,) * 3, (128, 256, 32), 256, 6, True, F16, 8, 2),
    (F16, (4096,) * 3, (128, 256, 32), 256, 5, True, F16, 8, 2),
    (BF16, (4096,) * 3, (128, 256, 32), 256, 6, True, BF16, 8, 2),
    (F16, (8192,) * 3, (128, 256, 32), 256, 6, True, F16, 8, 2),
    (BF16, (8192,) * 3, (128, 256, 32), 256, 6, True, BF16, 8, 2),
    (F16, (4096,) * 3, (128, 256, 32), 256, 4, True, F32, 8, 2),
    (F16, (4096,) * 3, (128, 256, 32), 256, 8, True, F32, 8, 2),
    (F16, (2048, 1024, 2048), (128, 128, 32), 128, 8, True, F16, 8),
]


def name_of(operand, size, block, wn, stages, specialize, output, group, cluster=1, blocks=0) -> str:
    dims = "x".join(map(str, size)) if len(set(size)) > 1 else str(size[0])
    name = f"{SHORT[operand]}_{dims}_b{'x'.join(map(str, block))}_wn{wn}_s{stages}"
    name += "" if specialize else "_nows"
    name += "" if output is F32 else f"_c{SHORT[output]}"
    return name + (f"_p{group}" if group else "") + (f"_r{blocks}" if blocks else "") + \
        (f"_x{cluster}" if cluster > 1 else "")


def plan_of(operand, size, block, wn, stages, specialize, output, group, cluster=1, blocks=0) -> tuple:
    layout = acc.Array.Layout.LAST_MAJOR if operand is F32 else acc.Array.Layout.FIRST_MAJOR
    return hopper_matmul.matmul(*size, operand=operand, block=block, stages=stages, specialize=specialize,
                                warpgroup_n=wn, output=output, b_layout=layout,
                                persistent={"group": group, **({"blocks": blocks} if blocks else {})}
                                if group else None, cluster=cluster)


if __name__ == "__main__":
    build(__doc__, "hopper_tiles", ((name_of(*v), lambda v=v: plan_of(*v)) for v in VARIANTS))
