"""What the tuner learns of a point: checked (refused, failed or compiled), then measured."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(enum.Enum):
    """Where a point ended."""

    PENDING = "pending"  # proposed, its check not back (a search stopped by Ctrl-C or its time budget)
    REFUSED = "refused"  # the analysis or the resource model refused it: nothing was compiled
    ACCEPTED = "accepted"  # passed the checks; not built (a dry run)
    FAILED = "build failed"  # accepted, then the build failed (NVRTC, ptxas or schedc): a bug, the message kept
    COMPILED = "compiled"  # built, waiting for the GPU
    WRONG = "wrong"  # ran and did not match the reference: a bug
    FAULT = "fault"  # the GPU faulted, the worker died or the run hung: a bug, the message kept
    SLOWER = "slower"  # stopped early: clearly slower than the best so far (its probe's time kept)
    TIMED = "timed"

    @property
    def bug(self) -> bool:
        """A point the analysis accepted and the build or the GPU did not: schedc is wrong there."""
        return self in (Status.FAILED, Status.WRONG, Status.FAULT)


@dataclass(frozen=True)
class Task:
    """One point of one grid: ``grid`` indexes the script's grids, ``point`` the grid's points."""

    grid: int
    point: int


@dataclass(frozen=True)
class Checked:
    """A point after the analysis and the build."""

    task: Task
    status: Status
    reason: str = ""  # why refused or failed
    kind: str = ""  # the reason with its numbers blanked: how refusals are counted
    name: str = ""  # the candidate function's name
    source_hash: str = ""  # of its CUDA source (the compile cache's and the database's key)
    directory: str = ""  # the candidate package, in the compile cache
    files: dict[str, bytes] = field(default_factory=dict)  # the package's files, for a worker on another host
    seconds: float = 0.0  # spent checking and compiling


@dataclass(frozen=True)
class Measured:
    """A candidate after the GPU: verified once, then timed (or stopped early)."""

    status: Status
    median: float = 0.0  # seconds per call (median of the batch means); the probe's when SLOWER
    stats: dict[str, float] = field(default_factory=dict)  # hatlib's statistics, seconds
    batches: int = 0
    iterations: int = 0
    flops: int = 0
    reason: str = ""
    relative_error: float = 0.0  # of the verification
    reference: str = ""  # the reference timed beside it (cublas), when asked
    reference_median: float = 0.0
    seconds: float = 0.0  # spent on the GPU worker
    confirmed: bool = False  # timed again among the finalists, one after the other on one GPU
