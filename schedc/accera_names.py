"""Accera's top-level names that schedc has no counterpart for. A script that reaches for one
gets a SchedcError saying why (never an AttributeError):

>>> import schedc as acc
>>> acc.k_dynamic_size  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
schedc.errors.NestError: acc.k_dynamic_size: ...
"""

from __future__ import annotations

from .errors import NestError, PackageError, PlanError, ScheduleError, TargetError

_RUNTIME_SIZES = ("a dynamic split size is not built in schedc: splits are fixed; run-time sizes of arrays and "
                  "nests are acc.create_dimensions()")

REFUSED: dict[str, tuple[type, str]] = {
    "fast_exp_mlas": (NestError, "MLAS's exponential is a CPU routine, not in schedc: acc.fast_exp is CUDA's "
                                 "fast exponential"),
    "remainderf": (NestError, "remainderf is not built in schedc: the iteration logic has + - * / % on integers, "
                              "acc.floor and the other math of schedc.frontend.elementwise"),
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


_CPU = "a CPU schedule option (vectors, threads, packing on the host); schedc schedules GPU kernels"
_QUERY = "not built in schedc: the schedule's loops are its indices in order (schedc show prints them)"
METHODS: dict[str, dict[str, tuple[type, str]]] = {
    "Plan": {
        **{name: (PlanError, _CPU) for name in ("vectorize", "parallelize", "kernelize", "pack_and_embed_buffer",
                                                "emit_runtime_init_pack")},
        "auto": (PlanError, "automatic plans are not built in schedc: bind, tensorize and cache by hand, or sweep "
                            "parameters with acc.create_parameter_grid"),
    },
    "Schedule": {
        "skew": (ScheduleError, "skewing loops is not built in schedc"),
        "pad": (ScheduleError, "padding a loop's range is not built in schedc (splits that do not divide are "
                               "guarded partial tiles)"),
        **{name: (ScheduleError, _QUERY) for name in ("interval", "num_iterations", "get_index_range",
                                                     "get_index_parent", "get_index_transform",
                                                     "is_valid_loop_order")},
    },
    "Nest": {"get_logic": (NestError, "schedc keeps a nest's statements, not its logic function")},
    "Array": {
        "sub_array": (NestError, "sub-array views are not built in schedc: pass the part as an argument of its own"),
        "deferred_layout": (NestError, "deferred layouts (a CONST array laid out like a cache) are not built in "
                                       "schedc: give the layout when the Array is made"),
        "flags": (NestError, "schedc allocates no arrays of its own: every array is an argument"),
    },
}


def refuse_method(owner: str, name: str):
    """Raise the reason ``owner.name`` (an Accera method) is not in schedc, else AttributeError."""
    if name in METHODS.get(owner, {}):
        kind, why = METHODS[owner][name]
        raise kind(f"{owner.lower()}.{name}()", why)
    raise AttributeError(f"{owner!r} object has no attribute {name!r}")
