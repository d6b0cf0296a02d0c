"""Where lowering places the guards of partial tiles: the serial-loop depth each one wraps.

Shared by lowering (which places them) and the checks that must know which guards enclose a
copy (a PRIVATE tile's store-back).
"""

from __future__ import annotations

from ..poly import Guard


def guard_levels(model, guards, serial, barriers: bool) -> dict[int, list[Guard]]:
    """The serial-loop depth each guard goes at: inside the deepest loop it names. With barriers
    in the kernel, guards on thread or warp coordinates wrap the statements only, so that every
    thread of the block still reaches every barrier."""
    depth = {lp.name: n + 1 for n, lp in enumerate(serial)}
    levels: dict[int, list[Guard]] = {}
    for guard in guards:
        names = guard.affine.variables()
        level = max((depth.get(v, 0) for v in names), default=0)
        units = [model.binding_of(v) for v in names]
        if barriers and any(u is not None and u.level != "block" for u in units):
            level = len(serial)
        levels.setdefault(level, []).append(guard)
    return levels
