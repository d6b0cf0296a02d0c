"""Lowering: a frozen Model and its polyhedral facts become kernel IR.

``compile_model`` is the whole pipeline, one named pass per line. ``SCHEDC_DUMP=<pass>``
(or ``all``) prints the result of that pass to stderr.
"""

from __future__ import annotations

import os
import pprint
import sys

from .. import poly
from ..errors import InternalError, SchedcError
from ..ir.kernel import Kernel
from ..targets import Target
from . import cache, check, launch, loops, private, simplify, tensor

PASSES = ("analyze", "launch", "check", "tensorize", "cache", "lower", "simplify")


def compile_model(model) -> Kernel:
    """Model → Kernel: the passes in order. A SchedcError raised on the way carries ``model``."""
    try:
        return _passes(model)
    except SchedcError as error:
        error.model = error.model or model
        raise


def _passes(model) -> Kernel:
    target = Target(model.target)
    facts = _run("analyze", poly.analyze, model)  # 1. domain, loop ranges, guards, accesses
    shape = _run("launch", launch.launch_shape, model, facts)  # 2. grid, block, coordinates
    _run("check", check.check_plan, model, facts, shape)  # 3. launch limits, roles, races
    tiles = None  # 4. the tensor-core tiles, if tensorized
    if model.tensorize is not None:
        tiles = _run("tensorize", tensor.match, model, facts, target)
    scratch = _run("tensorize", tensor.edge_scratch, model, tiles, shape.threads)  # C's partial tiles
    shared = _run("cache", cache.plan_shared, model, tiles, scratch)  # 5. shared caches: footprints, budget
    if tiles is not None:
        tiles = _run("cache", cache.rebase_tiles, model, tiles, shared)
    registers = _run("cache", private.plan_private, model, facts)  # register tiles of SIMT nests
    kernel = _run("lower", loops.lower_loops, model, facts, shape, tiles, shared, scratch, registers)  # 6. loops
    return _run("simplify", simplify.simplify, kernel)  # 7. constant folding


def _run(name: str, step, *args):
    """One pass: its result (printed when SCHEDC_DUMP names it); an exception that is not a
    SchedcError is a bug in schedc, reported as an InternalError naming the pass."""
    try:
        value = step(*args)
    except SchedcError:
        raise
    except Exception as error:  # noqa: BLE001 - every other failure is ours
        raise InternalError(f"pass {name}", f"{type(error).__name__}: {error}") from error
    _dump(name, "ok" if value is None else value)
    return value


def _dump(name: str, value):
    wanted = os.environ.get("SCHEDC_DUMP", "")
    if wanted and (wanted == "all" or name in wanted.split(",")):
        print(f"== after {name} ==\n{pprint.pformat(value, width=110, compact=True)}", file=sys.stderr)
    return value
