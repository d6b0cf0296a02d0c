"""The lowering passes: each takes the ``Lowering`` IR and returns it with what it adds.

A function's own passes wrap them (``FunctionLowering``): ``split`` makes the function's kernels'
Models (one, or a split reduction's clear, partial sums and combine), each goes through
``PASSES``, and ``link`` chains the kernels into the function.

``Lowering`` starts as the frozen Model alone; the first passes attach typed facts (polyhedral
facts, the launch, tensor-core tiles, cache plans) and ``lower`` attaches the kernel, which later
passes rewrite. Passes read only what earlier passes attached: a new pass (a TMA pipeline, a
split-K epilogue) slots in between two of them by reading and attaching fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .. import poly
from ..errors import PlanError
from ..ir.kernel import HostFunction, Kernel, SharedBuffer
from ..ir.model import Model
from ..targets import Target
from . import (
    cache,
    chained,
    check,
    epilogue,
    hopper,
    launch,
    loops,
    pipeline,
    private,
    simplify,
    split,
    split_keys,
    tensor,
)
from . import chain as linked


@dataclass(frozen=True)
class Lowering:
    """One function on its way to a kernel: the Model, what each pass attached, the kernel."""

    model: Model
    facts: poly.PolyFacts | None = None  # analyze
    launch: launch.Launch | None = None  # launch
    tiles: tensor.TensorMatch | None = None  # tensorize (None: a SIMT plan)
    scratch: SharedBuffer | None = None  # tensorize: C's partial tiles pass through it
    shared: tuple[cache.SharedCache, ...] = ()  # shared_caches
    registers: tuple[private.PrivateCache, ...] = ()  # private_caches
    tma: tuple[hopper.TmaCache, ...] = ()  # shared_caches, for wgmma plans: TMA tiles
    roles: hopper.WarpRoles | None = None  # roles (wgmma plans): producer warpgroup, registers
    output: epilogue.TmaOutput | None = None  # epilogue (wgmma plans): C's tiles through shared slots
    chain: chained.Chain | None = None  # chain: a second product fed by the first's C (its tiles, its B's tile)
    kernel: Kernel | None = None  # lower, then rewritten

    def attached(self, field: str):
        """What a pass attached, for ``schedc show --after`` (None: nothing)."""
        return getattr(self, field) if field else None


@dataclass(frozen=True)
class FunctionLowering:
    """One function on its way to its kernels: the Model, its kernels' Models (``split``), their
    kernels (``PASSES`` once each), the function that launches them (``link``)."""

    model: Model
    # split: the reduction (or a chain's keys) split between blocks (None: one kernel)
    split: split.Split | split_keys.KeySplit | None = None
    parts: tuple[Model, ...] = ()  # split: each kernel's Model, in launch order
    kernels: tuple[Kernel, ...] = ()  # PASSES, once per part
    function: HostFunction | None = None  # link

    def attached(self, field: str):
        """What a pass attached, for ``schedc show --after`` (None: nothing)."""
        return getattr(self, field) if field else None


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable
    shows: str  # the field of Lowering that the pass adds or rewrites ("": it attaches nothing)

    @property
    def summary(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


def normalize(ir: Lowering) -> Lowering:
    """The plan's open choices made: cache indices (max_elements, triggers), register blocking's order.

    The Model after it is what every later pass reads: ``schedc show --after normalize``."""
    return dataclasses.replace(ir, model=tensor.blocked_innermost(cache.choose_indices(ir.model)))


def analyze(ir: Lowering) -> Lowering:
    """Polyhedral facts: loop ranges, the guards of partial tiles, access relations."""
    return dataclasses.replace(ir, facts=poly.analyze(ir.model))


def launch_shape(ir: Lowering) -> Lowering:
    """Grid and block shape, and each bound loop's coordinate."""
    return dataclasses.replace(ir, launch=launch.launch_shape(ir.model, ir.facts))


def check_plan(ir: Lowering) -> Lowering:
    """Launch limits, roles, races and loop order: refuses a plan, attaches nothing."""
    check.check_plan(ir.model, ir.facts, ir.launch)
    return ir


def chain(ir: Lowering) -> Lowering:
    """A chain of products (two tensorize calls): the first's Model (and facts) go on, the second is attached."""
    model, second = chained.split(ir.model)
    if second is None:
        has = "one product" if ir.model.tensorize is not None else "none"
        if ir.model.overlap:
            raise PlanError("overlap()", "overlap issues a chain's second product under the next tile's first: it "
                                         "takes a fused schedule of two tensorized products, the first's C the "
                                         f"second's A (lower/chained.py); this plan has {has}")
        if ir.model.alternate:
            raise PlanError("alternate()", "alternate hands the consumer warpgroups turns at issuing a chain's "
                                           "products, a tile of the first's columns at a time: it takes a fused "
                                           "schedule of two tensorized products, the first's C the second's A "
                                           f"(lower/chained.py); this plan has {has}")
        return ir
    return dataclasses.replace(ir, model=model, facts=poly.analyze(model), chain=second)


def tensorize(ir: Lowering) -> Lowering:
    """Tensor-core tiles (operands, accumulator, partial edges) and C's edge scratch."""
    if ir.model.tensorize is None:
        return ir
    target = Target.known(ir.model.target)
    tiles = tensor.match(ir.model, ir.facts, target)
    second = ir.chain and chained.match(ir.chain, target, ir.model, tiles)
    if second is not None:
        second = dataclasses.replace(second, zero_past=chained.zero_past(second))
    return dataclasses.replace(ir, tiles=tiles, scratch=tensor.edge_scratch(ir.model, tiles, ir.launch.threads),
                               chain=second)


def shared_caches(ir: Lowering) -> Lowering:
    """SHARED caches: footprints, buffers, copies, pipelines and the shared-memory budget."""
    if hopper.is_warpgroup_plan(ir.tiles):
        second = ir.chain and chained.plan_tile(ir.chain, hopper.plan_one)
        tma = hopper.plan_tma(ir.model, ir.facts, ir.tiles, held=second is not None)
        if second is not None:
            hopper.check_chain_budget(ir.model, tma, second)
        return dataclasses.replace(ir, tma=tma, chain=second)
    if ir.model.specialization is not None and ir.model.specialization[0]:
        enabled, producer, consumer = ir.model.specialization
        arguments = [f"producer_registers={producer}, consumer_registers={consumer}"] if producer else []
        arguments += [f"teams={ir.model.teams}"] if ir.model.teams > 1 else []
        call = f"warp_specialize({', '.join(arguments)})"
        kind = "a SIMT plan" if ir.tiles is None else f"{ir.tiles.family} tiles"
        raise PlanError(call, f"a producer warpgroup issues the TMA copies of a wgmma plan's SHARED caches, and this "
                              f"plan ({kind}) has none: tensorize with a wgmma shape (M64xN*xK16_B1) and cache A and B "
                              "in SHARED with TMA, or leave warp_specialize out")
    if ir.model.clustering is not None:
        raise PlanError(hopper.cluster_where(ir.model), "the blocks of a cluster share operand tiles through TMA "
                                                        "multicast: tensorize with a wgmma shape (M64xN*xK16_B1, "
                                                        "M64xN*xK8_B1) and cache A and B in SHARED with TMA")
    shared = cache.plan_shared(ir.model, ir.launch.threads, ir.tiles, ir.scratch)
    tiles = cache.rebase_tiles(ir.model, ir.tiles, shared) if ir.tiles is not None else None
    return dataclasses.replace(ir, shared=shared, tiles=tiles)


def private_caches(ir: Lowering) -> Lowering:
    """PRIVATE caches: each thread's register tile, its copies in and out."""
    return dataclasses.replace(ir, registers=private.plan_private(ir.model, ir.facts, bool(ir.shared)))


def warp_roles(ir: Lowering) -> Lowering:
    """wgmma plans: a producer warpgroup or not, and each role's registers (setmaxnreg)."""
    if not ir.tma:
        return ir
    return dataclasses.replace(ir, roles=hopper.plan_roles(ir.model, ir.tiles, ir.tma, ir.launch))


def epilogue_slots(ir: Lowering) -> Lowering:
    """wgmma plans: C's tiles through shared slots by TMA (stores, and loads where C is read), or not."""
    if not ir.tma:
        if ir.model.adds_into:
            kind = "a SIMT plan" if ir.tiles is None else f"{ir.tiles.family} tiles"
            raise PlanError("split_k(deterministic=False)", f"each block adds its tiles into {ir.model.adds_into} by "
                                                            "TMA reductions, from a wgmma plan whose A and B come "
                                                            f"through TMA rings; this plan has {kind}: "
                                                            f"{split.instead(bool(ir.model.split_sums))}")
        return ir
    second = ir.chain and hopper.plan_chain_output(ir.chain, ir.tma, ir.launch, ir.roles)
    return dataclasses.replace(ir, output=hopper.plan_epilogue(ir.model, ir.tiles, ir.tma, ir.launch, ir.roles),
                               chain=second)


def lower(ir: Lowering) -> Lowering:
    """The kernel: serial loops, guards, cache copies and the statements (or tensor-core tiles)."""
    if ir.tma:
        kernel = hopper.lower_warpgroups(ir.model, ir.facts, ir.launch, ir.tiles, ir.tma, ir.roles, ir.output,
                                         ir.chain)
        return dataclasses.replace(ir, kernel=kernel)
    kernel = loops.lower_loops(ir.model, ir.facts, ir.launch, ir.tiles, ir.shared, ir.scratch, ir.registers)
    return dataclasses.replace(ir, kernel=kernel)


def specialize(ir: Lowering) -> Lowering:
    """Warp specialization: a producer warpgroup issues every fill of the tile program, the consumers compute."""
    if ir.roles is None or not ir.roles.specialized:
        return ir
    kernel = pipeline.specialize(ir.kernel, ir.launch, ir.roles.producer_registers, ir.roles.consumer_registers)
    return dataclasses.replace(ir, kernel=kernel)


def pipeline_ring(ir: Lowering) -> Lowering:
    """Software pipelining: a ring's fills issued stages ahead, a group of products kept in flight."""
    if ir.roles is None:
        return ir
    ring = hopper.make_ring(ir.model, ir.facts, ir.launch, ir.roles, ir.tma)
    return dataclasses.replace(ir, kernel=pipeline.pipeline(ir.kernel, ring))


def reserve_shared(ir: Lowering) -> Lowering:
    """create_plan(_dynamic_shared_memory_size=N): the block is launched with N bytes, which
    must hold what the kernel needs."""
    wanted = ir.model.dynamic_shared
    if not wanted:
        return ir
    need = ir.kernel.dynamic_shared_bytes
    if need > wanted:
        raise PlanError(f"create_plan(_dynamic_shared_memory_size={wanted})",
                        f"the kernel's shared memory needs {need} bytes per block, more than {wanted}")
    return dataclasses.replace(ir, kernel=dataclasses.replace(ir.kernel, dynamic_shared_bytes=wanted))


def fold(ir: Lowering) -> Lowering:
    """Constant folding of index arithmetic and of guards that always hold."""
    return dataclasses.replace(ir, kernel=simplify.simplify(ir.kernel))


def split_function(ir: FunctionLowering) -> FunctionLowering:
    """The function's kernels as Models: the plan's own, or a split sum's or split keys' partials and combine."""
    keys = split_keys.find(ir.model)
    if keys is not None:
        return dataclasses.replace(ir, split=keys, parts=split_keys.models(ir.model, keys))
    found = split.find(ir.model)
    parts = (ir.model,) if found is None else split.models(ir.model, found)
    return dataclasses.replace(ir, split=found, parts=parts)


def link(ir: FunctionLowering) -> FunctionLowering:
    """The function: its kernels in launch order (each after the one before) and their parameters."""
    model = ir.model
    if ir.split is None:
        return dataclasses.replace(ir, function=HostFunction.single(ir.kernels[0]))
    kernels = linked.chain(ir.kernels, Target.known(model.target))
    values = {v.name: v for k in kernels for v in k.values}
    caller = tuple(b for b in model.buffers if b.kind == "param")
    spaces = {b.name: dataclasses.replace(b, role="input_output")  # each kernel reads or writes it
              for k in kernels for b in k.params if b.kind == split.WORKSPACE}
    function = HostFunction(model.function, (*caller, *spaces.values(), *values.values()), kernels)
    return dataclasses.replace(ir, kernels=kernels, function=function)


SPLIT = Pass("split", split_function, "parts")
LINK = Pass("link", link, "function")

PASSES: tuple[Pass, ...] = (
    Pass("normalize", normalize, "model"),
    Pass("analyze", analyze, "facts"),
    Pass("launch", launch_shape, "launch"),
    Pass("check", check_plan, ""),
    Pass("chain", chain, "chain"),
    Pass("tensorize", tensorize, "tiles"),
    Pass("shared", shared_caches, "shared"),
    Pass("private", private_caches, "registers"),
    Pass("roles", warp_roles, "roles"),
    Pass("epilogue", epilogue_slots, "output"),
    Pass("lower", lower, "kernel"),
    Pass("specialize", specialize, "kernel"),
    Pass("pipeline", pipeline_ring, "kernel"),
    Pass("reserve", reserve_shared, "kernel"),
    Pass("simplify", fold, "kernel"),
)
