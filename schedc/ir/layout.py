"""Memory layouts of arrays as plain numbers (the front end, the kernel IR and the loader use them)."""

from __future__ import annotations


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-order (FIRST_MAJOR) array.

    >>> row_major_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)
