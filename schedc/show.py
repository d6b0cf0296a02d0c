"""Human-readable views of a compiled function: the scheduled loop nest and its launch."""

from __future__ import annotations

import pprint

from . import poly
from .codegen.cuda import grid_text
from .codegen.cuda_printer import Printer
from .ir.kernel import Cast, FragmentStore, HostFunction, Kernel
from .ir.model import Model
from .ir.walk import loads, walk_statements
from .lower import advice, resources
from .lower.loops import in_loops


def loop_nest(model, marked: tuple[str, ...] = ()) -> str:
    """The loop nest after scheduling, each loop annotated with its binding or role; loops in
    ``marked`` (those an error is about) get an arrow. A fused schedule shows each part's loops
    under its value of the fusing index."""
    facts = poly.analyze(model)
    lines: list[str] = []
    if model.fusion is None:
        _loops(model, facts, model.loops, 0, marked, lines)
        depth = len(model.loops)
        lines += ["  " * depth + s for s in _statements(model)]
    else:
        fusion = model.fusion
        outer = model.loops[:fusion.at]
        _loops(model, facts, outer, 0, marked, lines)
        for number, part in enumerate(model.parts):
            lines.append(f"{'  ' * len(outer)}# {fusion.name} = {number}")
            inner = [lp for lp in part.loops if lp not in outer]
            _loops(model, facts, inner, len(outer), marked, lines)
            lines += ["  " * (len(outer) + len(inner)) + s for s in _statements(part)]
        depth = len(outer)
    pad = "  " * depth
    if facts.guards and model.tensorize is not None:
        lines.append(f"{pad}(partial tiles: whole tensor-core tiles over zero-padded operands, C stored inside "
                     "its bounds)")
    elif facts.guards:
        lines.append(f"{pad}(partial tiles guarded by {len(facts.guards)} condition(s))")
    return "\n".join(lines)


def _loops(model, facts, loops, first: int, marked: tuple[str, ...], lines: list[str]) -> None:
    tile = model.tensorize.loops if model.tensorize else ()
    for depth, spec in enumerate(loops, first):
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
        span = f"{f.end}" if f.fixed or not f.first else f"({f.end} - {f.first})"
        marks.append(f"{f.extent} iterations" if f.fixed else f"ceil({span} / {f.step}) iterations" if f.step > 1
                     else f"{span} iterations")
        head = f"{'  ' * depth}for {spec.name} in range({spec.begin}, {spec.end}, {spec.step}):"
        arrow = "   <-- here" if spec.name in marked else ""
        lines.append(f"{head:<48} # {', '.join(marks)}{arrow}")


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
    """A kernel's grid and block, its threads, shared memory and index type."""
    threads = kernel.threads_per_block  # with a producer warpgroup, if any
    warps = -(-threads // model.gpu.warp_size)
    fixed = all(isinstance(n, int) for n in kernel.grid)
    shown = str(kernel.grid) if fixed else "(" + ", ".join(grid_text(kernel, n) for n in kernel.grid) + ")"
    grid = kernel.grid[0] * kernel.grid[1] * kernel.grid[2] if fixed else "a run-time number of"
    persistent = ""
    if kernel.persistent is not None:
        p = kernel.persistent
        if all(isinstance(n, int) for n in p.tiles):
            tiles = f"{p.count} tiles of a {p.tiles}"
        else:
            tiles = "tiles of a (" + ", ".join(grid_text(kernel, n) for n in p.tiles) + ")"
        persistent = f" (persistent: they take the {tiles} grid in turn, in groups of {p.group} rows)"
        if model.teams > 1:
            persistent = persistent[:-1] + f"; {model.teams} teams of consumer warpgroups take a block's tiles in turn)"
    return (
        f"grid {shown} x block {kernel.block}: {grid} blocks{persistent} of {threads} threads "
        f"({warps} warps), {kernel.dynamic_shared_bytes} bytes of dynamic shared memory, "
        f"{kernel.index_type.c_type} indexing"
    )


def launches(model, function: HostFunction) -> str:
    """``launch: ...`` of a function's kernel, or one line a kernel, in launch order."""
    if len(function.kernels) == 1:
        return f"launch: {launch(model, function.kernels[0])}"
    count = len(function.kernels)
    return "\n".join(f"launch {n + 1} of {count} ({k.name}): {launch(model, k)}"
                     for n, k in enumerate(function.kernels))


def attached(value) -> str:
    """What a lowering pass attached, readable: a kernel as its IR tree, other facts pretty-printed."""
    if value is None:
        return "(nothing attached: the pass checks or leaves this plan as it is)"
    if isinstance(value, Model):  # the loop nest as the later passes see it, and its caches
        return loop_nest(value) + "\n" + pprint.pformat(value.caches, width=110, compact=True)
    if isinstance(value, HostFunction):  # its parameters and kernels, in launch order
        params = ", ".join(p.name for p in value.params)
        return "\n".join([f"{value.name}({params})", *(f"  launch {n + 1}: {k.name}<<<{_dims(k, k.grid)}, {k.block}>>>("
                                                         f"{', '.join(p.name for p in k.arguments)})"
                                                         for n, k in enumerate(value.kernels))])
    if isinstance(value, tuple) and value and all(isinstance(v, Model) for v in value):  # a function's kernels
        return "\n".join(f"kernel {n + 1} of {len(value)}: {v.function}\n{attached(v)}" for n, v in enumerate(value))
    return pprint.pformat(value, width=110, compact=True)


def _dims(kernel: Kernel, grid) -> str:
    return "(" + ", ".join(grid_text(kernel, g) for g in grid) + ")"


def footprints(model) -> list[str]:
    """Each array's footprint inside each loop (tile loops excepted), for fixed outer loops. In a
    fused schedule, inside a loop that the parts run each on its own (after the fusing index), the
    footprint is that of the part's statements, one line a part that runs the loop."""
    tile = set(model.tensorize.loops) if model.tensorize else set()
    scopes = [scope for spec in model.loops if spec.name not in tile for scope in _inside(model, spec.name)]
    width = max([6, *(len(label) for _, label, _ in scopes)]) if model.fusion is not None else 6
    lines = []
    for buffer in model.buffers:
        lines.append(f"  {buffer.name} {buffer.dtype.value}[{', '.join(map(str, buffer.shape))}]:")
        if not any(buffer.name in (s.buffer, *(x.buffer for x in loads(s.value))) for s in model.statements):
            lines.append(f"    (the nest does not access {buffer.name})")  # an argument the nest leaves alone
            continue
        lines += [f"    inside {label:<{width}} {_footprint(where, buffer, loop)}" for where, label, loop in scopes]
    return lines


def _inside(model, loop: str) -> list[tuple[Model, str, str]]:
    """The statements that run inside ``loop`` (as a Model), how the line names it, and the loop:
    the whole nest, or each part of a fused schedule that runs ``loop`` on its own (``tb (f = 3)``)."""
    if model.fusion is None or loop in model.outside_fusion:
        return [(model, loop, loop)]
    return [(part, f"{loop} ({model.fusion.name} = {number})", loop) for number, part in enumerate(model.parts)
            if any(lp.name == loop for lp in part.loops)]


def _footprint(model, buffer, loop: str) -> str:
    try:
        fp = poly.footprint(model, buffer.name, loop)
    except poly.FootprintError as error:
        if "does not access" in str(error):  # a part that leaves the array alone
            return "not accessed"
        return f"no box: {error}"
    return f"{fp}  ({fp.elements} elements, {fp.elements * buffer.dtype.size} bytes)"


def _tile_paths(kernel: Kernel) -> list[str]:
    """How accumulator tiles reach their array: in place, or through shared memory."""
    edges = {s.buffer: s.edge for s in walk_statements(kernel.body) if isinstance(s, FragmentStore) and s.edge}
    lines = []
    for buffer, edge in sorted(edges.items()):
        if not edge.scratch:  # a family with lane layouts: each lane stores its own elements
            lines.append(f"{buffer}'s tiles: each lane's elements in place; at the edges only those inside "
                         f"{buffer}")
        elif edge.staged:
            lines.append(f"{buffer}'s tiles: every tile through shared memory ({edge.scratch}), element by element: "
                         f"{buffer}'s rows are not aligned for tensor-core stores in place (slower)")
        else:
            lines.append(f"{buffer}'s tiles: whole tiles in place; partial tiles at the edges through shared "
                         f"memory ({edge.scratch}), element by element")
    return lines


def report(package: str, model, function: HostFunction | Kernel) -> str:
    """What ``schedc check`` prints for one function (resources: of its heaviest kernel; a
    Kernel is the function of that kernel alone)."""
    gpu = model.gpu
    if isinstance(function, Kernel):
        function = HostFunction.single(function)
    kernel = max(function.kernels, key=lambda k: (k.dynamic_shared_bytes, k.threads_per_block))
    use = resources.estimate(kernel, gpu)
    lines = [
        f"== {package}.{model.function} for {gpu.name} (sm_{gpu.sm})",
        loop_nest(model),
        launches(model, function),
        "footprints (elements touched inside each loop, outer loops fixed):",
        *footprints(model),
        f"shared memory: {use.shared_bytes} bytes per block (static limit {gpu.shared_memory_static}, "
        f"opt-in limit {gpu.shared_memory_max})",
        f"registers: about {use.registers} per thread (estimate)",
        f"occupancy: {use.blocks_per_sm} block(s) of {use.threads} threads per SM, limited by {use.limited_by}",
    ]
    lines += _tile_paths(kernel)
    notes = list(dict.fromkeys(str(n) for k in function.kernels for n in advice.advise(k, model, gpu)))
    spill = any(n.startswith("advice (local memory)") for n in notes)
    lines += [f"warning: {w}" for w in use.warnings(gpu) if not (spill and "spill" in w)]
    lines += notes
    return "\n".join(lines) + "\n"
