"""Extents that may be run-time sizes: an ``int``, or an ``Affine`` whose variables are sizes
(``create_dimensions``). Every size is at least 1.

>>> M = Affine((("M", 1),))
>>> at(M.plus(Affine((), -1)), {"M": 5}), at(7, {"M": 5})
(4, 7)
>>> negative_for(M.plus(Affine((), -3)))  # M - 3 < 0 for M = 1
{'M': 1}
>>> negative_for(Affine((("M", -2),), 9))  # 9 - 2M < 0 for M = 5
{'M': 5}
>>> negative_for(M) is None
True
"""

from __future__ import annotations

from .affine import Affine

Extent = int | Affine


def affine(extent: Extent) -> Affine:
    return extent if isinstance(extent, Affine) else Affine((), int(extent))


def at(extent: Extent, sizes: dict[str, int]) -> int:
    """The extent's value for the run-time ``sizes``."""
    return extent if not isinstance(extent, Affine) else extent.evaluate(sizes)


def names(extents) -> list[str]:
    """The sizes ``extents`` name, in order of first appearance."""
    found: list[str] = []
    for e in extents:
        for name, _ in (e.terms if isinstance(e, Affine) else ()):
            if name not in found:
                found.append(name)
    return found


def negative_for(f: Affine) -> dict[str, int] | None:
    """Sizes (each >= 1) for which the affine ``f`` of sizes is negative, or None when it is
    never negative: the smallest sizes where they make it so, else one size grown past where
    its negative coefficient turns ``f`` negative."""
    ones = {name: 1 for name in f.variables()}
    base = f.evaluate(ones)
    if base < 0:
        return ones
    falling = [(name, c) for name, c in f.terms if c < 0]
    if not falling:
        return None
    name, c = falling[0]
    return {**ones, name: 1 + base // -c + 1}


def when(values: dict[str, int]) -> str:
    """`` when M = 33, N = 1`` for run-time sizes, by name (empty for none)."""
    return " when " + ", ".join(f"{k} = {v}" for k, v in sorted(values.items())) if values else ""


def largest(buffers, limit: int = 2**31 - 1) -> dict[str, int]:
    """The largest value of each run-time size for which every array of ``buffers`` that has it
    spans at most ``limit`` elements (32-bit indexing: the loader refuses calls past it).

    >>> from .kernel import Buffer
    >>> from .types import ScalarType
    >>> largest([Buffer("A", ScalarType.float32, (Affine((("M", 1),)), 64), (64, 1), "param", "input")])
    {'M': 33554431}
    """
    out: dict[str, int] = {}
    for b in buffers:
        size = span(b)
        if isinstance(size, Affine):
            for name, c in size.terms:  # one size an array (its slowest dimension)
                out[name] = min(out.get(name, limit), (limit - size.const) // c)
    return out


def nbytes_at(buffer, sizes: dict[str, int]) -> int:
    """The bytes a Buffer spans for the run-time ``sizes`` (a workspace's allocation)."""
    return at(span(buffer), sizes) * buffer.dtype.size


def span(buffer) -> int | Affine:
    """The elements a Buffer spans: an Affine of the run-time sizes where it has one."""
    total = Affine((), 1)
    for n, stride in zip(buffer.shape, buffer.strides):
        total = total.plus(affine(n).plus(Affine((), -1)).scale(stride))
    return total if total.terms else total.const
