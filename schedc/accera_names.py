"""Accera's top-level names that schedc has no counterpart for. A script that reaches for one
gets a SchedcError saying why (never an AttributeError):

>>> import schedc as acc
>>> acc.fuse
Traceback (most recent call last):
...
schedc.errors.ScheduleError: acc.fuse: fusing schedules is not built in schedc: write the statements in one nest
"""

from __future__ import annotations

from .errors import NestError, PackageError, ScheduleError, TargetError

_ELEMENTWISE = ("abs", "ceil", "floor", "sqrt", "exp", "fast_exp", "fast_exp_mlas", "log", "log10", "log2", "sin",
                "cos", "tan", "sinh", "cosh", "tanh", "logical_and", "logical_or", "logical_not", "round",
                "remainderf")
_RUNTIME_SIZES = "sizes known only at run time are not built in schedc: arrays and nests have fixed shapes"

REFUSED: dict[str, tuple[type, str]] = {
    **{name: (NestError, "the iteration logic has + - * /, unary minus, acc.max, acc.min and acc.cast; "
                         f"{name} is not built in schedc") for name in _ELEMENTWISE},
    "fuse": (ScheduleError, "fusing schedules is not built in schedc: write the statements in one nest"),
    "FusedSchedule": (ScheduleError, "fusing schedules is not built in schedc: write the statements in one nest"),
    "create_dimensions": (NestError, _RUNTIME_SIZES),
    "k_dynamic_size": (NestError, _RUNTIME_SIZES),
    "logic_function": (NestError, "schedc takes a nest's statements from @nest.iteration_logic"),
    "LogicFunction": (NestError, "schedc takes a nest's statements from @nest.iteration_logic"),
    "AllocateFlags": (NestError, "schedc allocates no arrays of its own: every array is an argument"),
    "CompilerOptions": (PackageError, "schedc compiles with NVRTC for the plan's target; Package.build takes "
                                      "format, mode and output_dir"),
    **{name: (TargetError, "schedc's GPUs are Target.Model's members (NVIDIA only); CPUs are not targets")
       for name in ("KNOWN_DEVICES", "KNOWN_CPUS", "KNOWN_GPUS")},
}


def refuse(name: str):
    """Raise the reason ``name`` is not in schedc (AttributeError for names Accera lacks too)."""
    if name in REFUSED:
        kind, why = REFUSED[name]
        raise kind(f"acc.{name}", why)
    raise AttributeError(f"module 'schedc' has no attribute {name!r}")
