"""A function's kernels launched back to back on one stream, overlapped where the target can.

On sm_90 and newer (``Target.has_dependent_launch``) each kernel after the first is launched as a
programmatic dependent of the one before (``Kernel.dependent_launch``): its blocks may be
scheduled while that kernel's last blocks run, and wait for it to finish (its writes visible) in a
GridDependencyWait before anything else; each kernel before the last runs LaunchDependents first,
so that the next one may be scheduled as soon as all of its blocks have started. The kernels'
results are those of plain stream order; only the launch gap between them goes.
"""

from __future__ import annotations

import dataclasses

from ..ir.kernel import GridDependencyWait, Kernel, LaunchDependents
from ..targets import Target


def chain(kernels: tuple[Kernel, ...], target: Target) -> tuple[Kernel, ...]:
    """``kernels`` (in launch order) overlapped as the module docstring says, or as they are."""
    if len(kernels) < 2 or not target.has_dependent_launch:
        return kernels
    last = len(kernels) - 1
    out = []
    for n, kernel in enumerate(kernels):
        body = kernel.body
        if n < last:
            body = (LaunchDependents(f"{kernels[n + 1].name} may start its blocks"), *body)
        if n > 0:
            body = (GridDependencyWait(f"{kernels[n - 1].name} has finished: its writes are visible"), *body)
        out.append(dataclasses.replace(kernel, body=body, dependent_launch=n > 0))
    return tuple(out)
