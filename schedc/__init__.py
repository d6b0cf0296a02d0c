"""schedc: a loop-schedule compiler for NVIDIA GPUs.

Accera's names, so that an Accera GPU script runs with ``import schedc as acc``.
"""

from .errors import (
    CacheError,
    InternalError,
    LaunchError,
    NestError,
    PackageError,
    PlanError,
    SchedcError,
    ScheduleError,
    TargetError,
)
from .frontend.array import Array, Role
from .frontend.dimension import Dimension, create_dimensions
from .frontend.elementwise import (  # noqa: A004 - Accera's acc.abs, acc.pow, acc.round
    abs,
    ceil,
    cos,
    cosh,
    equal,
    erf,
    exp,
    fast_exp,
    fast_exp2,
    fast_tanh,
    floor,
    log,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    not_equal,
    pow,
    round,
    select,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from .frontend.expr import Index, cast
from .frontend.expr import maximum as max  # noqa: A001 - Accera's acc.max
from .frontend.expr import minimum as min  # noqa: A001 - Accera's acc.min
from .frontend.fuse import FusedSchedule, fuse
from .frontend.grid import create_parameter_grid
from .frontend.nest import Nest
from .frontend.parameters import Parameter, create_parameters
from .frontend.plan import Plan
from .frontend.schedule import Schedule
from .instructions import Instruction
from .ir.types import ScalarType
from .targets import (
    CacheStrategy,
    Constants,
    CopyEngine,
    GridUnit,
    MemorySpace,
    MMAFragmentOp,
    MMASchedulingPolicy,
    MMAShape,
    Target,
)

__version__ = "0.1.0"

__all__ = [
    "Array", "CacheError", "CacheStrategy", "Constants", "GridUnit", "Index", "Instruction", "InternalError",
    "LaunchError",
    "MMAFragmentOp", "MMASchedulingPolicy",
    "CopyEngine", "MMAShape", "MemorySpace", "Nest", "NestError", "PackageError", "Plan", "PlanError", "Role",
    "ScalarType", "Schedule", "ScheduleError", "SchedcError", "Target", "TargetError",
    "__version__", "cast", "max", "min", "Parameter", "create_parameter_grid", "create_parameters",
    "Dimension", "create_dimensions",
    "abs", "sqrt", "exp", "fast_exp", "fast_exp2", "log", "log2", "log10", "sin", "cos", "tan", "sinh", "cosh", "tanh",
    "fast_tanh", "sigmoid", "erf", "floor", "ceil", "round", "pow", "select", "logical_and", "logical_or",
    "logical_not", "equal", "not_equal", "fuse", "FusedSchedule",
]

from .package.build import Package  # noqa: E402

__all__ += ["Package"]
from .package.loader import load  # noqa: E402

__all__ += ["load"]

# Accera's other top-level names: the same objects under its names, and a reason for the rest
from .frontend.plan import Cache  # noqa: E402
from .package.build import Function  # noqa: E402

AUTO = Constants.AUTO
inf = float("inf")
DelayedParameter = Parameter
NativeArray = Array
LoopIndex = Index


def type_size_bytes(element_type: ScalarType) -> int:
    """Bytes of one element (Accera's ``acc.type_size_bytes``).

    >>> type_size_bytes(ScalarType.float16)
    2
    """
    return element_type.size


__all__ += ["AUTO", "Cache", "DelayedParameter", "Function", "LoopIndex", "NativeArray", "inf", "type_size_bytes"]


def tune(script, options=None, runner=None, **choices):
    """``schedc tune`` from Python: search ``script``'s parameter grids and write its package
    with the winners; returns the ``schedc.tuning.Outcome`` (every point tried, the winners,
    where the time went). ``options`` is a ``schedc.tuning.Options``, or give its fields as
    keywords (``shapes=[{"M": 4096, "N": 4096, "K": 4096}], budget_points=200, compare="cublas"``);
    ``runner``: where candidates are timed (``schedc.tuning.FakeTiming`` for a run without a GPU).
    Call it under ``if __name__ == "__main__":`` (the GPU workers are started as new processes)."""
    from .tuning import Options
    from .tuning import tune as search

    if options is None:
        plain = {k: tuple(v) if isinstance(v, list) else v for k, v in choices.items()}
        options = Options(**plain)
    elif choices:
        raise TypeError("give schedc.tune an Options or its fields as keywords, not both")
    return search(script, options, runner)


__all__ += ["tune"]


def __getattr__(name: str):
    from .accera_names import refuse

    return refuse(name)
