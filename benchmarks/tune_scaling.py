#!/usr/bin/env python3
"""A tuning script for the tuner's own benchmark (benchmarks/tune_gpus.py): the fp16 Hopper
product of samples/tune_matmul.py at 4096^3 over a grid near its best points (block tiles of 128
or 256 rows and 64, 128 or 256 columns, 2 to 5 stages, groups 4, 8, 16, with and without clusters;
144 points, about 110 of them past the analysis)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

import tune_matmul as t  # noqa: E402

import schedc as acc  # noqa: E402

grid = acc.create_parameter_grid(
    {t.M: [4096], t.N: [4096], t.K: [4096], t.BM: [128, 256], t.BN: [64, 128, 256], t.BK: [64], t.STAGES: [2, 3, 4, 5],
     t.GROUP: [4, 8, 16], t.CLUSTER: [1, 2], t.SPECIALIZE: [True], t.TEAMS: [1],
     t.SHAPE: list(t.WGMMA.values())},
    filter_func=lambda m, n, k, bm, bn, bk, stages, group, cluster, specialize, teams, shape: shape is t.WGMMA[bn])

if __name__ == "__main__":
    package = acc.Package()
    package.add(*t.matmul(acc.ScalarType.float16), base_name="matmul_fp16", parameters=grid)
    package.build("tune_scaling", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/tune_scaling")
