"""A Program as a standalone Accera-style schedule script (``import schedc as acc``).

>>> from tests.fuzz.program import *
>>> p = Program("NVIDIA_H100", (ArrayDecl("A", "INPUT", "float32", (8,)),
...             ArrayDecl("B", "OUTPUT", "float32", (8,))), (8,),
...             (Statement(Ref("B", (Subscript("i"),)), Neg(Neg(Ref("A", (Subscript("i", -1, 7),))))),))
>>> print(render_statement(p.statements[0]))
B[i] = -(-A[7 - i])
"""

from __future__ import annotations

import math

from .program import (
    RUNTIME_SIZE,
    Bin,
    Cast,
    Cmp,
    Const,
    Expr,
    Fn,
    IndexValue,
    Neg,
    Program,
    Ref,
    Statement,
    Subscript,
    Tile,
    expr_children,
    map_refs,
    runtime_dims,
    simulate_steps,
    with_array_names,
    with_children,
)

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_UNARY = 3
_COMPARE = 0  # below every arithmetic operator, as in Python


def render(program: Program, header: str = "") -> str:
    """The whole script; ``header`` (a docstring's text) goes first."""
    program = with_array_names(program)
    sized = runtime_dims(program) if program.runtime else None
    parts = [_docstring(header), "import schedc as acc\n",
             f"target = acc.Target(acc.Target.Model.{program.target})",
             f"{RUNTIME_SIZE} = acc.create_dimensions()" if sized else None,
             *(_array(a, (sized or {}).get(a.name)) for a in program.arrays), "",
             _nest(program), _logic(program), _schedule(program), _plan(program), _package(program)]
    return "\n".join(p for p in parts if p is not None) + "\n"


def _docstring(header: str) -> str | None:
    if not header:
        return None
    return '"""' + header.replace("\\", "\\\\").replace('"""', "'''").rstrip() + '\n"""\n'


def _array(a, sized: int | None = None) -> str:
    """The array's declaration (dimension ``sized``: the run-time size)."""
    layout = "" if a.layout == "FIRST_MAJOR" else f", layout=acc.Array.Layout.{a.layout}"
    shape = tuple(RUNTIME_SIZE if d == sized else n for d, n in enumerate(a.shape))
    return (f"{a.name} = acc.Array(role=acc.Role.{a.role}, element_type=acc.ScalarType.{a.dtype}, "
            f"shape={_tuple(shape)}{layout})")


def _dims(program: Program) -> tuple:
    """The nest's extents as the script writes them (the first the run-time size, where it is one)."""
    if program.runtime and runtime_dims(program):
        return (RUNTIME_SIZE, *program.dims[1:])
    return program.dims


def _tuple(values) -> str:
    return f"({values[0]},)" if len(values) == 1 else f"({', '.join(map(str, values))})"


def _nest(program: Program) -> str:
    names = program.nest_indices
    unpack = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
    return f"nest = acc.Nest(shape={_tuple(_dims(program))})\n{unpack} = nest.get_indices()\n"


def _logic(program: Program) -> str:
    body = "\n".join(f"    {render_statement(s)}" for s in program.statements)
    text = f"\n@nest.iteration_logic\ndef _():\n{body}\n\n"
    if program.between:  # a nest over the first two dimensions between the first and the second
        names = {"i": "i2", "j": "j2"}
        own = [Statement(_renamed(s.target, names), map_refs(s.value, lambda r: _renamed(r, names)), s.accumulate)
               for s in program.between]
        body = "\n".join(f"    {render_statement(s)}" for s in own)
        text += (f"middle = acc.Nest(shape={_tuple(_dims(program)[:2])})\ni2, j2 = middle.get_indices()\n\n"
                 f"\n@middle.iteration_logic\ndef _():\n{body}\n\n")
    for n, step in enumerate(program.row_steps):  # each a nest of its own over the first two dimensions
        names = {"i": f"i_s{n}", "j": f"j_s{n}"}
        own = [Statement(_renamed(s.target, names), _own_indices(s.value, names), s.accumulate) for s in step]
        body = "\n".join(f"    {render_statement(s)}" for s in own)
        text += (f"step{n} = acc.Nest(shape={_tuple(_dims(program)[:2])})\ni_s{n}, j_s{n} = step{n}.get_indices()\n\n"
                 f"\n@step{n}.iteration_logic\ndef _():\n{body}\n\n")
    if program.epilogue:  # the fused nest, over the first two dimensions (and "l"), with indices of its own
        names = {"i": "i1", "j": "j1", "l": "l1"}
        own = [Statement(_renamed(s.target, names), map_refs(s.value, lambda r: _renamed(r, names)), s.accumulate)
               for s in program.epilogue]
        body = "\n".join(f"    {render_statement(s)}" for s in own)
        shape = (*_dims(program)[:2], *((program.second,) if program.second else ()))
        indices = "i1, j1, l1" if program.second else "i1, j1"
        text += (f"after = acc.Nest(shape={_tuple(shape)})\n{indices} = after.get_indices()\n\n"
                 f"\n@after.iteration_logic\ndef _():\n{body}\n\n")
    return text


def _own_indices(e, names: dict[str, str]):
    """``e`` in a nest's own indices: its subscripts' and its index values' (a mask's ``j <= i``)."""
    if isinstance(e, Ref):
        return _renamed(e, names)
    if isinstance(e, IndexValue):
        return IndexValue(names.get(e.index, e.index))
    return with_children(e, tuple(_own_indices(c, names) for c in expr_children(e)))


def _renamed(r: Ref, names: dict[str, str]) -> Ref:
    return Ref(r.array, tuple(Subscript(names.get(x.index, x.index), x.sign, x.offset) if x.index else x
                              for x in r.subscripts))


def render_statement(s: Statement) -> str:
    return f"{render_expr(s.target)} {'+=' if s.accumulate else '='} {render_expr(s.value)}"


def render_expr(e: Expr, parent: int = 0, right: bool = False) -> str:
    """Python text of ``e`` with the parentheses Python needs (and ``-(-x)`` for nested minus)."""
    if isinstance(e, Ref):
        return f"{e.array}[{', '.join(render_subscript(s) for s in e.subscripts)}]"
    if isinstance(e, Const):
        text = repr(e.value) if not (isinstance(e.value, float) and math.isinf(e.value)) else f"float('{e.value}')"
        return f"({text})" if e.value < 0 and (parent or right) else text
    if isinstance(e, IndexValue):
        return e.index
    if isinstance(e, Cast):
        return f"acc.cast({render_expr(e.operand)}, acc.ScalarType.{e.dtype})"
    if isinstance(e, Neg):
        inner = render_expr(e.operand, _UNARY)
        return f"-({inner})" if inner.startswith("-") else f"-{inner}"
    if isinstance(e, Fn):
        return f"acc.{e.name}({', '.join(render_expr(a) for a in e.args)})"
    if isinstance(e, Cmp):
        if e.op in ("==", "!="):
            return f"acc.{'equal' if e.op == '==' else 'not_equal'}({render_expr(e.lhs)}, {render_expr(e.rhs)})"
        return f"{render_expr(e.lhs, _COMPARE)} {e.op} {render_expr(e.rhs, _COMPARE, right=True)}"
    return _binary(e, parent, right)


def _binary(e: Bin, parent: int, right: bool) -> str:
    if e.op in ("max", "min"):
        return f"acc.{e.op}({render_expr(e.lhs)}, {render_expr(e.rhs)})"
    own = _PRECEDENCE[e.op]
    text = f"{render_expr(e.lhs, own)} {e.op} {render_expr(e.rhs, own, right=True)}"
    needs = own < parent or (own == parent and right)
    return f"({text})" if needs else text


def render_subscript(s: Subscript) -> str:
    if s.index is None:
        return str(s.offset)
    if s.sign < 0:
        return f"{s.offset} - {s.index}"
    return f"{s.index} + {s.offset}" if s.offset else s.index


def _schedule(program: Program) -> str:
    lines = ["schedule = nest.create_schedule()"]
    if program.epilogue:
        partial, own = (1, ", j1") if program.rows_only else (2, ", l" if program.second else "")
        middle = " middle.create_schedule()," if program.between else ""
        middle += "".join(f" step{n}.create_schedule()," for n in range(len(program.row_steps)))
        lines = [f"schedule = acc.fuse((nest.create_schedule(),{middle} after.create_schedule()), partial={partial})",
                 f"f, {', '.join(program.nest_indices)}{own} = schedule.get_indices()"]
    _, _, created = simulate_steps(program)
    for step, names in zip(program.steps, created):
        if isinstance(step, Tile):
            mapping = ", ".join(f"{n}: {size}" for n, size in step.sizes)
            lines.append(f"{', '.join(names)} = schedule.tile({{{mapping}}})")
        else:
            lines.append(f"{names[0]} = schedule.split({step.index}, {step.size})")
    if program.order is not None:
        lines.append(f"schedule.reorder({', '.join(program.order)})")
    return "\n".join(lines) + "\n"


def _plan(program: Program) -> str:
    blocks = f", _blocks_per_SM={program.blocks_per_sm}" if program.blocks_per_sm else ""
    lines = [f"plan = schedule.create_plan(target{blocks})"]
    if program.bindings:
        entries = ", ".join(f"{_key(b.indices)}: target.GridUnit.{b.unit}" for b in program.bindings)
        lines.append(f"plan.bind({{{entries}}})")
    lines += [f"plan.unroll({name})" for name in program.unrolls]
    if program.tensorize is not None:
        lines.append(_tensorize(program.tensorize))
    if program.chained is not None:
        lines.append(_tensorize(program.chained))
    handles = {c.array for c in program.caches if c.of_shared}  # SHARED caches other caches are of
    lines += [(f"{c.array}_cache = " if c.location == "SHARED" and c.array in handles else "") + _cache(c)
              for c in program.caches]
    if program.persistent is not None:
        group, blocks = program.persistent
        lines.append(f"plan.persistent(group={group}" + (f", blocks={blocks})" if blocks else ")"))
    if program.cluster is not None:
        size, unit = program.cluster
        lines.append(f"plan.cluster({size}, target.GridUnit.{unit})")
    if program.specialize is not None or program.teams > 1:
        enabled, producer, consumer = program.specialize or (True, 0, 0)
        registers = f", producer_registers={producer}, consumer_registers={consumer}" if producer else ""
        teams = f", teams={program.teams}" if program.teams > 1 else ""
        lines.append(f"plan.warp_specialize({enabled}{registers}{teams})")
    if program.order_free:
        lines.append("plan.split_k(deterministic=False)")
    if program.overlap:
        lines.append("plan.overlap()")
    if program.alternate:
        lines.append("plan.alternate()")
    return "\n".join(lines) + "\n"


def _key(indices: tuple[str, ...]) -> str:
    return indices[0] if len(indices) == 1 else f"({', '.join(indices)})"


def _tensorize(t) -> str:
    args = [f"indices=({', '.join(t.indices)})", f"mma_shape=acc.MMAShape.{t.mma}"]
    if t.passes != 1:
        args.append(f"num_total_passes={t.passes}")
    if t.fused is not None:
        args.append(f"num_fused_passes={t.fused}")
    for name, op, arg in (("prologue", t.prologue, t.prologue_arg), ("epilogue", t.epilogue, t.epilogue_arg)):
        if op != "NONE":
            args += [f"{name}_op=acc.MMAFragmentOp.{op}", f"{name}_arg={arg!r}"]
    if t.instruction != "AUTO":
        args.append(f"instruction=acc.Instruction.{t.instruction}")
    return f"plan.tensorize({', '.join(args)})"


def _cache(c) -> str:
    extra = {"sync": "", "double_buffer": ", double_buffer=True",
             "registers": ", double_buffer=True, double_buffer_location=target.MemorySpace.PRIVATE",
             "stages": f", stages={c.stages}"}[c.pipeline]
    if c.element_type:
        extra += f", element_type=acc.ScalarType.{c.element_type}"
    if c.layout:
        extra += f", layout=acc.Array.Layout.{c.layout}"
    source = f"{c.array}_cache" if c.of_shared else c.array
    return f"plan.cache({source}, index={c.index}, location=target.MemorySpace.{c.location}{extra})"


def _package(program: Program) -> str:
    names = [a.name for a in program.arrays if a.role != "TEMP"]  # TEMP arrays are the function's own
    names += [RUNTIME_SIZE] if program.runtime and runtime_dims(program) else []
    args = f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
    return (f"package = acc.Package()\n"
            f"package.add(plan, args={args}, base_name={program.name!r})\n"
            f"package.build({program.name!r}, format=acc.Package.Format.HAT_SOURCE, output_dir=\"hat_packages\")")
