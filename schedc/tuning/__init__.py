"""``schedc tune``: from a script's parameter grids to the fastest kernel that passes every check.

``tune(script, Options(...))`` runs the script with its grids recorded, checks each point with
the analysis and the resource model (refused points counted by cause, never compiled), builds the
others in a process pool, verifies each once on the GPU and times it (stopping early one clearly
slower than the best so far), keeps every result in a SQLite database and writes the best point
of each function and shape as a package whose .hat records the choice.
"""

from .results import Checked, Measured, Status, Task
from .runners import DaskCluster, FakeTiming, LocalGPUs
from .tuner import Options, Outcome, Point, tune

__all__ = ["Checked", "DaskCluster", "FakeTiming", "LocalGPUs", "Measured", "Options", "Outcome", "Point",
           "Status", "Task", "tune"]
