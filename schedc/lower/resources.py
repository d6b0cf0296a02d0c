"""Per-block resources of a kernel and the occupancy they allow, from the target table.

Registers are an estimate (ptxas decides): a base for indices and addresses, each tensor-core
fragment's registers (its family's table entry) and register tile's, and two per value a
statement stores or loads, for the statements live at once (``_live``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.kernel import Kernel, Load, Roles, Store, registers_held
from ..ir.walk import bodies, walk_statements

BASE_REGISTERS = 24
MAX_REGISTERS_WARNING = 255


@dataclass(frozen=True)
class Resources:
    threads: int
    shared_bytes: int
    registers: int  # per thread, estimated
    blocks_per_sm: int
    limited_by: str

    def warnings(self, gpu) -> list[str]:
        out = []
        if self.registers > gpu.max_registers_per_thread:
            out.append(f"about {self.registers} registers per thread (estimate) exceed the "
                       f"{gpu.max_registers_per_thread} a thread can have: values will spill to local memory")
        if self.blocks_per_sm == 0:
            out.append("no block fits on a multiprocessor")
        return out


def registers(kernel: Kernel) -> int:
    """The estimate; for a kernel of warp roles, what each thread holds at launch (the roles
    pass fitted each role's registers within it, ``setmaxnreg`` moving them between roles)."""
    if any(isinstance(s, Roles) for s in walk_statements(kernel.body)):
        return min(kernel.registers_at_launch, MAX_REGISTERS_WARNING)  # a thread holds 255 at most
    declared = sum(registers_held(s) for s in walk_statements(kernel.body))
    return BASE_REGISTERS + declared + _live(kernel.body)


def _live(body) -> int:
    """The registers of the values the statements of ``body`` hold at once: two per value a
    statement stores or loads, summed over a body's own statements (an unrolled body's may
    interleave) plus the largest of its nested bodies (a loop's values are dead after it: a
    fused schedule's parts run one after another).

    >>> from schedc.ir.kernel import Const, Load, Loop, Store, Var
    >>> two = Store("Y", (Var("i"),), Load("X", (Var("i"),), None))
    >>> _live((Loop("i", Const(0), Const(8), 1, (two, two)), Loop("j", Const(0), Const(8), 1, (two,))))
    8
    """
    own = sum(2 * (1 + _loads(s.value)) for s in body if isinstance(s, Store))
    return own + max((_live(b) for s in body for b in bodies(s)), default=0)


def _loads(expr) -> int:
    if isinstance(expr, Load):
        return 1
    return sum(_loads(getattr(expr, f)) for f in ("lhs", "rhs", "operand") if hasattr(expr, f))


def estimate(kernel: Kernel, gpu) -> Resources:
    threads = kernel.threads_per_block
    warps = -(-threads // gpu.warp_size)
    regs = registers(kernel)
    shared = kernel.dynamic_shared_bytes
    limits = {
        f"blocks per SM ({gpu.max_blocks_per_sm})": gpu.max_blocks_per_sm,
        f"threads per SM ({gpu.max_threads_per_sm})": gpu.max_threads_per_sm // (warps * gpu.warp_size),
        f"registers per SM ({gpu.registers_per_sm})": gpu.registers_per_sm // (min(regs, 255) * warps * gpu.warp_size),
    }
    if shared:
        limits[f"shared memory per SM ({gpu.shared_memory_per_sm} bytes)"] = gpu.shared_memory_per_sm // shared
    reason, blocks = min(limits.items(), key=lambda item: item[1])
    return Resources(threads, shared, regs, blocks, reason)
