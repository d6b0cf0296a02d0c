"""Points of a parameter grid that the checks refuse, counted by cause: one home for the counting
that ``Package.add`` (a grid's refused points, named when the package is built) and ``schedc tune``
(``--dry-run`` and its summary) both print.

>>> kind("shared memory: the plan needs 245760 bytes, the H100 has 232448")
'shared memory: the plan needs # bytes, the H100 has #'
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import SchedcError


def kind(text: str) -> str:
    """A refusal's message with numbers and names in brackets blanked, its first line: refusals
    of one cause at different sizes count together.

    >>> kind("2 tile(s) of 64x192 float32 (mma_shape M64xN128xK16)")
    '# tile(s) of #x# float32 (mma_shape M64xN128xK16)'
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    return re.sub(r"(?<=#x)\d+", "#", re.sub(r"(?<![A-Za-z_\d])\d+", "#", first))  # 64x192: #x#


def by_cause(kinds: Iterable[str]) -> collections.Counter[str]:
    """How many refusals each cause (a ``kind``) has."""
    return collections.Counter(kinds)


@dataclass(frozen=True)
class Refusal:
    """One point of a grid the checks refused: its values as messages show them, and the error."""

    point: str  # "BM=256, BN=256, STAGES=5"
    error: SchedcError

    @property
    def cause(self) -> str:
        return kind(self.error.what)


def summary(base_name: str, points: int, refused: Sequence[Refusal], verb: str = "built") -> str:
    """``matmul_fp16: 1379 of 2016 points built; 637 refused:``, then a line per cause (most
    refused first) with its count and the first point refused for it."""
    head = f"{base_name}: {points - len(refused)} of {points} points {verb}"
    if not refused:
        return head
    return "\n".join([f"{head}; {len(refused)} refused:", *causes(refused)])


def causes(refused: Sequence[Refusal]) -> list[str]:
    """A line per cause of ``refused``: ``  412 x  <cause> (first at <point>)``."""
    first: dict[str, Refusal] = {}
    for refusal in refused:
        first.setdefault(refusal.cause, refusal)
    return [f"  {n:>4} x  {cause} (first at {first[cause].point})"
            for cause, n in by_cause(r.cause for r in refused).most_common()]
