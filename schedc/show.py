"""Human-readable views of a compiled function: the scheduled loop nest and its launch."""

from __future__ import annotations

from . import poly
from .codegen.cuda import Printer
from .ir.kernel import Cast, Kernel
from .lower.launch import launch_shape
from .lower.loops import in_loops


def loop_nest(model) -> str:
    """The loop nest after scheduling, each loop marked with its binding or role."""
    facts = poly.analyze(model)
    tile = model.tensorize.loops if model.tensorize else ()
    lines = []
    for depth, spec in enumerate(model.loops):
        f = facts.loop(spec.name)
        marks = []
        unit = model.binding_of(spec.name)
        if unit is not None:
            marks.append(unit.name)
        if spec.name in tile:
            role = "mnk"[tile.index(spec.name)]
            marks.append(f"tensorized {model.tensorize.mma_shape.name} ({role})")
        if spec.name in model.unrolled:
            marks.append("unrolled")
        marks.append(f"{f.extent} iterations")
        head = f"{'  ' * depth}for {spec.name} in range({spec.begin}, {spec.end}, {spec.step}):"
        lines.append(f"{head:<48} # {', '.join(marks)}")
    pad = "  " * len(model.loops)
    for statement in _statements(model):
        lines.append(pad + statement)
    if facts.guards:
        lines.append(f"{pad}(partial tiles guarded by {len(facts.guards)} condition(s))")
    return "\n".join(lines)


def _statements(model) -> list[str]:
    printer = _NestPrinter(Kernel("nest", model.buffers, (1, 1, 1), (1, 1, 1), ()))
    out = []
    for s in (in_loops(model, s) for s in model.statements):
        subscripts = ", ".join(printer.expr(i) for i in s.index)
        out.append(f"{s.buffer}[{subscripts}] = {printer.expr(s.value)}")
    return out


class _NestPrinter(Printer):
    """Statements as the nest states them: subscripts per dimension, casts by type name."""

    def offset(self, buffer: str, index: tuple) -> str:
        return ", ".join(self.expr(i) for i in index)

    def expr(self, e, parent: int = 0) -> str:
        if isinstance(e, Cast):
            return f"{e.dtype.value}({self.expr(e.operand)})"
        return super().expr(e, parent)


def launch(model, kernel: Kernel) -> str:
    shape = launch_shape(model, poly.analyze(model))
    threads = shape.threads
    warps = -(-threads // model.gpu.warp_size)
    grid = shape.grid[0] * shape.grid[1] * shape.grid[2]
    return (
        f"grid {shape.grid} x block {shape.block}: {grid} blocks of {threads} threads "
        f"({warps} warps), {kernel.dynamic_shared_bytes} bytes of dynamic shared memory, "
        f"{kernel.index_type} indexing"
    )
