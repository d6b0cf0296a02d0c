#!/usr/bin/env python3
"""Where a kernel's warps wait, a SASS instruction a row: the summary of ncu's source page.

``python benchmarks/ncu_source.py SOURCE.csv [TOP]`` reads what ``ncu -i REPORT --page source --csv
--print-source sass`` prints (``benchmarks/device_session.sh attention NCU_SOURCE=...`` writes it as
``source_FN.csv``) and prints the stall samples by opcode (the share of all samples each takes) and
the ``TOP`` instructions (30 unless given) that took the most, with their addresses, so that the
loop they sit in can be found in the SASS beside them. Where the columns are not found, it names
the ones it read.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"  # the column of every sample taken at the instruction


def rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows (after any lines ncu prints before its header)."""
    lines = path.read_text(errors="replace").splitlines()
    start = next((n for n, line in enumerate(lines) if SAMPLES in line or '"Address"' in line), 0)
    return list(csv.DictReader(lines[start:]))


def number(text: str | None) -> float:
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0


def summary(table: list[dict[str, str]], top: int) -> str:
    """Stall samples by opcode and the instructions that took the most."""
    if not table:
        return "no rows"
    columns = list(table[0])
    samples = next((c for c in columns if c.startswith(SAMPLES)), None)
    source = next((c for c in columns if c.strip() == "Source"), None)
    if samples is None or source is None:
        return "columns not found (want '" + SAMPLES + "' and 'Source'); read: " + ", ".join(columns)
    address = next((c for c in columns if c.strip() == "Address"), None)
    total = sum(number(r[samples]) for r in table) or 1.0
    by_opcode: Counter[str] = Counter()
    for r in table:
        by_opcode[_opcode(r[source])] += number(r[samples])
    out = [f"{total:.0f} samples; by opcode:"]
    out += [f"  {op:<14} {n / total:6.1%}" for op, n in by_opcode.most_common(15)]
    out.append(f"the {top} instructions with the most:")
    ranked = sorted(table, key=lambda r: number(r[samples]), reverse=True)[:top]
    out += [f"  {number(r[samples]) / total:6.1%}  {r[address] if address else '':>8}  {r[source].strip()}"
            for r in ranked]
    return "\n".join(out)


def _opcode(sass: str) -> str:
    """The instruction's opcode without its predicate and modifiers: ``@P0 HGMMA.64x128x16...`` → HGMMA."""
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.splitlines()[0] + "\nusage: ncu_source.py SOURCE.csv [TOP]", file=sys.stderr)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 30
    print(summary(rows(Path(sys.argv[1])), top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
