"""What the scripts that build variants of the Hopper sample share (``hopper_tiles.py``,
``split_k.py``, ``ping_pong.py``): the repository and its samples importable (``hopper_matmul``
and ``acc`` imported here), the command line ``[OUTPUT_DIR] [--only SUBSTRING]``, and one
package of the variants' plans."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import hopper_matmul  # noqa: E402

import schedc as acc  # noqa: E402

__all__ = ["acc", "build", "hopper_matmul"]


def build(doc: str, name: str, variants: Iterable[tuple[str, Callable[[], tuple]]]) -> None:
    """Read the command line (``doc``'s first line its description); add each ``(function name,
    make)`` whose name holds ``--only``'s substring, ``make()`` giving its plan and arrays; build
    the package ``name`` into ``OUTPUT_DIR/name`` (hat_packages unless given)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("output", nargs="?", default="hat_packages")
    parser.add_argument("--only", default="", help="build only the variants whose name contains this")
    options = parser.parse_args()
    package = acc.Package()
    for base, make in variants:
        if options.only in base:
            package.add(*make(), base_name=base)
    package.build(name, format=acc.Package.Format.HAT_SOURCE, output_dir=f"{options.output}/{name}")
