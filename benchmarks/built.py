"""The samples' packages the benchmarks time: built by ``schedc build`` where they are missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import schedc as acc

ROOT = Path(__file__).resolve().parent.parent


def sample_package(sample: str, output_dir: Path):
    """``output_dir/<sample>/<sample>.hat`` loaded, after building ``samples/<sample>.py`` there
    if it is not."""
    hat = output_dir / sample / f"{sample}.hat"
    if not hat.exists():
        subprocess.run([sys.executable, "-m", "schedc", "build", str(ROOT / "samples" / f"{sample}.py"),
                        "--output-dir", str(output_dir)], check=True)
    return acc.load(hat)
