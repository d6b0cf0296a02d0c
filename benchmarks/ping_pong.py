#!/usr/bin/env python3
"""Cooperative against ping-pong Hopper plans (samples/hopper_matmul.py), built for one device run
that verifies and times them side by side against cuBLAS.

Cooperative (``coop``): two consumer warpgroups share each 128 x 256 tile (64 rows each), and both
stop multiplying while they store it. Ping-pong (``pp``, ``warp_specialize(teams=2)``): two
consumer teams of one warpgroup take the persistent block's tiles in turn, each holding a whole
tile (128 x 128 as two register-blocked 64-row parts, or 64 x 256), so that one team stores its
tile while the other multiplies.

A variant is named ``<operand>_<M>_<coop|pp>_b<m>x<n>x<k>_s<stages>_p<group>``; C has the operands'
type (bfloat16 for the 8-bit floats), read and written (``C += A @ B``), accumulated in float32.

Usage: python benchmarks/ping_pong.py [OUTPUT_DIR] [--only SUBSTRING]   (hat_packages unless
given), then on the GPU
    schedc bench hat_packages/ping_pong/ping_pong.hat --compare cublas --time-in-ms
"""

from __future__ import annotations

from variants import acc, build, hopper_matmul

F16, BF16, E4M3 = acc.ScalarType.float16, acc.ScalarType.bfloat16, acc.ScalarType.float8_e4m3
SHORT = {F16: "fp16", BF16: "bf16", E4M3: "e4m3"}
COOP, PP = 1, 2

# (operand, size, teams, block (m, n, k), stages, group)
VARIANTS = [
    (F16, (2048, 1024, 2048), PP, (128, 128, 64), 4, 8),  # small: for the sanitizers
    (F16, (4096,) * 3, COOP, (128, 256, 64), 3, 4),  # the sample's plan
    (F16, (4096,) * 3, PP, (128, 128, 64), 4, 8),
    (F16, (4096,) * 3, PP, (128, 128, 64), 5, 8),
    (F16, (4096,) * 3, PP, (128, 128, 64), 4, 4),
    (F16, (4096,) * 3, PP, (64, 256, 64), 4, 8),
    (F16, (4096,) * 3, PP, (128, 128, 32), 8, 8),
    (BF16, (4096,) * 3, COOP, (128, 256, 64), 3, 8),
    (BF16, (4096,) * 3, PP, (128, 128, 64), 4, 8),
    (F16, (8192,) * 3, COOP, (128, 256, 64), 3, 16),
    (F16, (8192,) * 3, PP, (128, 128, 64), 4, 8),
    (F16, (8192,) * 3, PP, (128, 128, 64), 4, 16),
    (F16, (8192,) * 3, PP, (64, 256, 64), 4, 16),
    (E4M3, (4096,) * 3, COOP, (128, 256, 128), 3, 8),
    (E4M3, (4096,) * 3, PP, (128, 128, 128), 4, 8),
    (E4M3, (4096,) * 3, PP, (64, 256, 128), 4, 8),
    (E4M3, (8192,) * 3, COOP, (128, 256, 128), 3, 16),
    (E4M3, (8192,) * 3, PP, (128, 128, 128), 4, 16),
]


def name_of(operand, size, teams, block, stages, group) -> str:
    dims = "x".join(map(str, size)) if len(set(size)) > 1 else str(size[0])
    kind = "coop" if teams == COOP else "pp"
    return f"{SHORT[operand]}_{dims}_{kind}_b{'x'.join(map(str, block))}_s{stages}_p{group}"


def plan_of(operand, size, teams, block, stages, group) -> tuple:
    b_layout = acc.Array.Layout.LAST_MAJOR if operand is E4M3 else acc.Array.Layout.FIRST_MAJOR
    return hopper_matmul.matmul(*size, operand=operand, block=block, stages=stages,
                                output=BF16 if operand is E4M3 else operand, b_layout=b_layout,
                                persistent={"group": group}, teams=teams)


if __name__ == "__main__":
    build(__doc__, "ping_pong", ((name_of(*v), lambda v=v: plan_of(*v)) for v in VARIANTS))
