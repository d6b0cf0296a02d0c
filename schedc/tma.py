"""The tensor memory accelerator's rules (sm_90), beside the target table: one home for what
the planning of TMA tiles (``lower/cache.py``, ``lower/hopper.py``, ``lower/epilogue.py``), the IR
verifier, the emulator and the loader read. Plain data and arithmetic: no compiler, no IR.

>>> swizzle_for(128), swizzle_for(256), swizzle_for(64), swizzle_for(96)
(128, 128, 64, 0)
>>> dimension_order((64, 1)), dimension_order((1, 64)), dimension_order((1,))
((0, 1), (1, 0), (0,))
"""

from __future__ import annotations

BOX_LIMIT = 256  # elements along each dimension of a box
SWIZZLES = (128, 64, 32)  # bytes of a swizzled row, widest first
GLOBAL_ALIGN = 16  # bytes: the array's address and every row pitch (cuTensorMapEncodeTiled)


def swizzle_for(row_bytes: int) -> int:
    """The swizzle of a tile whose rows are ``row_bytes`` long: 128 for multiples of 128 bytes
    (several 128-byte chunks), 64 or 32 for rows of exactly that; 0 where none fits."""
    return next((s for s in SWIZZLES if row_bytes % s == 0 and (s == 128 or row_bytes == s)), 0)


def dimension_order(strides: tuple[int, ...]) -> tuple[int, ...]:
    """An array's dimensions from the slowest to the fastest varying (its layout): the order a
    tensor map lists them in reverse, and a copy's vectors run along the last."""
    return tuple(sorted(range(len(strides)), key=lambda d: -strides[d]))
