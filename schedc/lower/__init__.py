"""Lowering: a frozen Model and its polyhedral facts become kernel IR.

``compile_model`` is the whole pipeline, one named pass per line. ``SCHEDC_DUMP=<pass>``
(or ``all``) prints the result of that pass to stderr.
"""

from __future__ import annotations

import os
import pprint
import sys

from .. import poly
from ..errors import SchedcError
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
    facts = _dump("analyze", poly.analyze(model))  # 1. domain, loop ranges, guards, accesses
    shape = _dump("launch", launch.launch_shape(model, facts))  # 2. grid, block, coordinates
    check.check_plan(model, facts, shape)  # 3. launch limits, roles, races
    _dump("check", "ok")
    tiles = None  # 4. the tensor-core tiles, if tensorized
    if model.tensorize is not None:
        tiles = _dump("tensorize", tensor.match(model, facts, target))
    scratch = tensor.edge_scratch(model, tiles, shape.threads)  # C's partial tiles pass through it
    shared = _dump("cache", cache.plan_shared(model, tiles, scratch))  # 5. shared caches: footprints, budget
    if tiles is not None:
        tiles = cache.rebase_tiles(model, tiles, shared)
    registers = _dump("cache", private.plan_private(model, facts))  # register tiles of SIMT nests
    kernel = _dump("lower", loops.lower_loops(model, facts, shape, tiles, shared, scratch, registers))  # 6. loops
    return _dump("simplify", simplify.simplify(kernel))  # 7. constant folding


def _dump(name: str, value):
    wanted = os.environ.get("SCHEDC_DUMP", "")
    if wanted and (wanted == "all" or name in wanted.split(",")):
        print(f"== after {name} ==\n{pprint.pformat(value, width=110, compact=True)}", file=sys.stderr)
    return value
