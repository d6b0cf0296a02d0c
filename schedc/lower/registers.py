"""A wgmma plan's registers: whether a producer warpgroup issues the copies (warp
specialization), what each role's threads hold after ``setmaxnreg``, and the refusals, with the
changes that fit, where the launch or ptxas would refuse the block (``role_registers``).

A block holds 65536 registers / threads at launch (``__launch_bounds__``, in units of 8);
``setmaxnreg`` only moves them between the roles. ptxas compiles each wgmma within the launch's
share: a consumer thread's accumulator tiles and about ``PTXAS_MARGIN`` more must fit it (each
role's code holds up to its ``setmaxnreg`` count only between instructions, where the kernel
names its blocks a multiprocessor: ``pipeline.specialize``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import PlanError
from ..ir.kernel import launch_registers
from ..targets import GridUnit
from . import tensor
from .launch import WARPGROUP, Launch

PRODUCER_THREADS = WARPGROUP

# registers ptxas needs in a consumer thread besides its accumulators (descriptors, addresses,
# counters): measured with NVRTC 13.0 for sm_90a, "Insufficient registers" below it at 32, 64
# and 128 accumulator registers alike
PTXAS_MARGIN = 26


def role_registers(model, tiles, blocked: tuple[str, ...], launch: Launch) -> tuple[bool, int, int]:
    """Warp specialization and the roles' setmaxnreg budgets (AUTO: on, the producer keeps 40
    and the consumers share what it releases, at most 232), refused where the block or the
    registers exceed what the launch and ptxas accept, with the changes that fit. ``blocked``: the
    register-blocked loops (an accumulator tile per value of each)."""
    enabled, producer, consumer = model.specialization or (True, 0, 0)
    consumers = launch.threads
    threads = consumers + (PRODUCER_THREADS if enabled else 0)
    blocks = max(1, model.blocks_per_sm)
    held = launch_registers(threads, blocks)
    explicit = bool(producer)
    if not explicit:
        producer = 40
        consumer = min(232, held + PRODUCER_THREADS * (held - producer) // consumers // 8 * 8)
    m, n, _ = model.tensorize.mma_shape.mnk
    per_tile = math.prod(len(tensor._values(model, b)) for b in blocked) * tiles.accumulator_type.size
    columns = math.prod(len(tensor._values(model, name)) for b in model.bindings if b.unit is GridUnit.WARPGROUP_X
                        for name in b.loops)
    budget = Budget(model, consumers, enabled, blocks, per_tile * m, tiles.operand_type.size, columns == 1)
    block = f"{consumers // WARPGROUP} consumer warpgroup(s)" + \
        (f" ({model.teams} teams of {consumers // WARPGROUP // model.teams}, warp_specialize(teams=))"
         if model.teams > 1 else "") + (" and the producer warpgroup" if enabled else "")
    gpu = model.gpu
    if threads > gpu.max_threads_per_block:
        raise PlanError(budget.where, f"{block} are {threads} threads; a block of {gpu.name} has at most "
                                      f"{gpu.max_threads_per_block}: {budget.ways(n, size=True)}",
                        loops=model.tensorize.loops)
    accumulators = budget.accumulators(n)
    need = accumulators + PTXAS_MARGIN
    count = per_tile // tiles.accumulator_type.size
    holds = (f"each consumer thread holds {accumulators} accumulator registers ({count} tile(s) of {m}x{n} "
             f"{tiles.accumulator_type.value} per warpgroup) and ptxas needs about {PTXAS_MARGIN} more")
    if need > held:
        raise PlanError(budget.where, f"{block} are {threads} threads, {blocks} block(s) a multiprocessor: ptxas "
                                      f"compiles the kernel within 65536 / {threads * blocks} = {held} registers a "
                                      f"thread (__launch_bounds__), and {holds}: {budget.ways(n)}",
                        loops=model.tensorize.loops)
    if not enabled:
        return enabled, producer, consumer
    where = (f"warp_specialize(producer_registers={producer}, consumer_registers={consumer})" if explicit else
             budget.where)
    total = producer * PRODUCER_THREADS + consumer * consumers
    if total > held * threads:
        raise PlanError(where, f"{PRODUCER_THREADS} producer threads x {producer} + {consumers} consumer threads x "
                               f"{consumer} = {total} registers; the block's {threads} threads hold {held} each at "
                               f"launch ({held * threads} in all), and setmaxnreg only moves them between roles "
                               f"(consumers may take at most "
                               f"{held + PRODUCER_THREADS * (held - producer) // consumers // 8 * 8})")
    if need > consumer:
        raise PlanError(where, f"{holds}; consumer_registers={consumer} is too few (at least {-(-need // 8) * 8})"
                        if explicit else f"the consumers' share of the registers is {consumer} (setmaxnreg), and "
                                         f"{holds}: {budget.ways(n)}")
    return enabled, producer, consumer


@dataclass(frozen=True)
class Budget:
    """The changes to a wgmma plan's block that fit the registers and the block size, for its
    refusals, in the user's calls."""

    model: object
    consumers: int  # consumer threads
    enabled: bool  # warp-specialized
    blocks: int  # _blocks_per_SM (at least 1)
    column_bytes: int  # bytes of a column of the warpgroup's accumulator tiles
    operand_size: int  # bytes of an element of A and B
    one_column: bool = False  # one column of warpgroups: a warpgroup's tile is as wide as the block's

    def accumulators(self, n: int) -> int:
        """A consumer thread's accumulator registers for warpgroup tiles ``n`` columns wide."""
        return self.column_bytes * n // (4 * WARPGROUP)

    @property
    def where(self) -> str:
        t = self.model.tensorize
        return f"tensorize(indices=({', '.join(t.loops)}), mma_shape={t.mma_shape.name})"

    def fits(self, consumers: int, enabled: bool, blocks: int, n: int) -> bool:
        threads = consumers + (PRODUCER_THREADS if enabled else 0)
        held = launch_registers(threads, blocks)
        if enabled:  # the consumers' setmaxnreg share (AUTO) bounds them too
            held = min(held, 232, held + PRODUCER_THREADS * (held - 40) // consumers // 8 * 8)
        return threads <= self.model.gpu.max_threads_per_block and self.accumulators(n) + PTXAS_MARGIN <= held

    def ways(self, n: int, size: bool = False) -> str:
        """The changes that fit, each alone: fewer warpgroups, narrower warpgroup tiles, no
        producer warpgroup, fewer blocks a multiprocessor."""
        out = []
        fewer = next((g for g in range(self.consumers // WARPGROUP - 1, 0, -1)
                      if self.fits(g * WARPGROUP, self.enabled, self.blocks, n)), 0)
        if fewer:
            out.append(f"at most {fewer} warpgroup(s) a block (a smaller block tile)")
        if not size:
            size = self.operand_size
            if self.one_column:  # the block's tile: rows of whole 16 bytes (a last 128-byte chunk partly read)
                widths = [w for w in range(n - 8, 0, -8) if w * size % 16 == 0]
            else:  # whole swizzled rows: every warpgroup tile starts at a chunk (plan_tma)
                widths = [w for w in range(n - 8, 0, -8) if w * size % 128 == 0 or w * size in (32, 64)]
            narrow = next((w for w in widths if self.fits(self.consumers, self.enabled, self.blocks, w)), 0)
            if narrow:
                out.append(f"warpgroup tiles of at most 64 x {narrow} (mma_shape M64xN{narrow}xK*, a smaller block "
                           "tile)")
        if self.enabled and self.fits(self.consumers, False, self.blocks, n):
            out.append("warp_specialize(False) (no producer warpgroup)")
        if self.blocks > 1 and self.fits(self.consumers, self.enabled, 1, n):
            out.append(f"create_plan without _blocks_per_SM={self.blocks}")
        return "; or ".join(out) if out else "no block of this tile fits: use a smaller block tile"
