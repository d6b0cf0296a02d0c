"""Scratch tiles: a TEMP array's SHARED tile that every pass over it fills itself.

A TEMP array holds nothing before its kernel (nothing writes one before) and nothing after it
(nothing reads one after). Cached in SHARED and filled around every statement that touches it
(``around_parts``: before a fused schedule's fusing index),
its tile needs neither the fill nor the write-back of an output cache where each pass over the
tile writes every element before a statement reads it: the first statement to touch the array
(in the order the fused parts and their statements run) writes it without reading it, and

- every other access is at that statement's very subscripts (a row's maximum ``m[i]``,
  initialised by the first part, reduced by the next, read by the later ones), or
- it is the array's one writer (its tile written whole: the written cache's check) and every read
  comes in a later part, or later in its part at the element written (a row of exponentials
  ``E[i, j]`` written by one part and read by two later ones).

Then the array gets no global memory at all (``launch.assemble`` drops a workspace no kernel
names). Before → after::

    m[i] = -inf;  m[i] = max(m[i], X[i, j])          m_shared[0] = -inf;  m_shared[0] = max(...)
    E[i, j] = exp(X[i, j] - m[i])                    E_shared[j] = exp(X[i, j] - m_shared[0])
    Y[i, j] = E[i, j] / s[i]                         Y[i, j] = E_shared[j] / s_shared[0]
"""

from __future__ import annotations

from ..ir.walk import loads
from ..targets import MemorySpace


def arrays(model) -> frozenset[str]:
    """The arrays whose caches are scratch tiles."""
    return frozenset(c.array for c in model.caches if tile(model, c))


def inside_parts(model) -> frozenset[str]:
    """The arrays the module's rule makes scratch whose SHARED caches are filled inside a fused
    part, not around every part: no scratch tiles, for want of a serial loop at their index."""
    return frozenset(c.array for c in model.caches if c.location is MemorySpace.SHARED
                     and not around_parts(model, c.index) and scratch(model, c.array))


def tile(model, cache) -> bool:
    """Whether a cache (a ``CacheSpec``) is a scratch tile: SHARED, filled around every part, of an
    array the module's rule makes scratch (the cache planner's ``SharedCache.scratch``)."""
    return cache.location is MemorySpace.SHARED and around_parts(model, cache.index) and scratch(model, cache.array)


def around_parts(model, index: str) -> bool:
    """Whether a cache at ``index`` is filled around every part of a fused schedule: where the
    block fills it (the first loop each thread runs at or after ``index``) comes before the fusing
    index. A cache filled in one part's loops is that part's alone; the others use the array."""
    if model.fusion is None:
        return True
    return model.first_serial(index) in model.outside_fusion


def scratch(model, array: str) -> bool:
    """Whether ``array``'s tile is scratch (the module's rule); False for any but a TEMP array."""
    if model.buffer(array).role != "temp":
        return False
    part = model.fusion.part_of if model.fusion is not None else (lambda n: 0)
    order = sorted(range(len(model.statements)), key=lambda n: (part(n), n))  # as the statements run
    touching = [n for n in order if model.statements[n].buffer == array
                or any(ld.buffer == array for ld in loads(model.statements[n].value))]
    if not touching:
        return False
    first = model.statements[touching[0]]
    if first.buffer != array or any(ld.buffer == array for ld in loads(first.value)):
        return False
    later = [model.statements[n] for n in touching[1:]]
    if all((s.buffer != array or s.index == first.index) and all(ld.index == first.index for ld in loads(s.value)
                                                                  if ld.buffer == array) for s in later):
        return True
    if any(s.buffer == array for s in later):
        return False
    w = touching[0]
    return all(part(n) > part(w) or all(ld.index == first.index for ld in loads(model.statements[n].value)
                                        if ld.buffer == array) for n in touching[1:])
