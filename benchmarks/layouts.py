#!/usr/bin/env python3
"""Build the Tilus MatmulV4 plan (samples/tilus_matmul.py, 3 stages, fp16 4096^3) with B
row-major and with B column-major (C = A @ B where B is stored as its transpose, the "NT"
product): shared tiles keep each array's layout, so both copy 16-byte vectors with cp.async.

Usage: python benchmarks/layouts.py [OUTPUT_DIR]   (hat_packages unless given), then on the GPU
    schedc verify hat_packages/layouts/layouts.hat
    schedc bench hat_packages/layouts/layouts.hat --compare cublas --time-in-ms --min-time 0.5
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import tilus_matmul  # noqa: E402

import schedc as acc  # noqa: E402


def main() -> None:
    output = sys.argv[1] if len(sys.argv) > 1 else "hat_packages"
    package = acc.Package()
    for layout, suffix in ((acc.Array.Layout.FIRST_MAJOR, "nn"), (acc.Array.Layout.LAST_MAJOR, "nt")):
        package.add(*tilus_matmul.matmul(4096, 4096, 4096, 3, b_layout=layout), base_name=f"matmul_v4_s3_{suffix}")
    print(package.build("layouts", format=acc.Package.Format.HAT_SOURCE, output_dir=f"{output}/layouts"))


if __name__ == "__main__":
    main()
