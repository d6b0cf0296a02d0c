"""Split-K: a reduction loop bound to blocks, lowered as several kernels.

A plan that binds a loop of a dimension the statements sum over (``k`` of ``C[i, j] += A[i, k] *
B[k, j]``) to a grid unit splits the sum between blocks, which would race on C's elements. Every
statement is a reduction ``T += X``, so schedc combines the blocks' partial sums instead, in a
fixed order (the same bits every run):

1. *partial*: the plan as written, with ``T`` replaced by a float32 (for 16-bit floats; else
   ``T``'s own type) workspace ``T__partial`` with one slice per block of the split; tensorized
   plans start the accumulators at zero (``prologue_op=SET``, 0), others run after a *clear*
   kernel that zeroes the workspace;
2. *combine*: one thread an element of ``T``: ``T = epilogue(prologue(T) + slice 0 + slice 1 +
   ...)``, so the tensorized plan's prologue and epilogue ops apply once, after the sum.

Before → after (``ko, ki = schedule.split(k, 512)``; ``plan.bind({ko: BLOCK_Z, ...})``, K = 2048)::

    C[i, j] += A[i, k] * B[k, j]            C__partial[ko, i, j] += A[i, 512*ko + ki] * B[...]
                                            C[i, j] = C[i, j] + C__partial[0, i, j] + ... [3, i, j]

The workspace is a parameter of every kernel that the loader allocates once per function (C
callers of the launcher pass it: the .hat gives its size).

``split_k(deterministic=False)`` (wgmma plans whose C leaves by TMA) has no workspace and no
combine: each block's tiles of sums are added into ``T`` by TMA reductions, in any order, after a
kernel that applies the prologue op to ``T`` where there is one (``adding_models``). Without a
split the same is a split of one part (``Split.loop`` empty): the plan as it is, its accumulators
from zero, each tile added into ``T`` once instead of loaded before the products and stored after.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import poly
from ..errors import PlanError
from ..ir.kernel import Binary, Buffer, Cast, Const, Expr, Load, Store, Var
from ..ir.layout import row_major_strides
from ..ir.model import BindingSpec, GroupSpec, LoopSpec, Model
from ..ir.patterns import accumulated, buffers_read, widened
from ..ir.types import ScalarType
from ..ir.walk import substitute
from ..targets import GridUnit, MMAFragmentOp
from . import check

WORKSPACE = "workspace"  # Buffer.kind of a function's scratch array the loader allocates
COMBINE_THREADS = 256  # threads of a combine or clear block, along the last dimension
ELEMENTS_PER_THREAD = 4  # elements of a combine or clear thread (COMBINE_THREADS apart)


@dataclass(frozen=True)
class Split:
    """A plan's split of a reduction between blocks: ``loop`` (bound to ``unit``) takes ``splits``
    values ``step`` apart along nest dimension ``dim``; the statements accumulate into ``target``,
    whose written elements are the box at ``origin`` of ``extents`` (empty: run-time sizes). One
    part (``loop`` empty, ``unit`` None): ``split_k(deterministic=False)`` without a split, each
    block adding its tiles' whole sums into ``target``."""

    loop: str
    unit: GridUnit | None
    dim: int
    splits: int
    step: int
    target: str
    origin: tuple[int, ...]
    extents: tuple[int, ...]


def find(model: Model) -> Split | None:
    """The plan's split of a reduction between blocks, or None (no block-bound loop leaves the
    statements' written elements unchanged); PlanError for a split schedc cannot combine."""
    if model.fusion is not None:  # a fused schedule's loops on blocks are its fused ones (check_plan says so)
        if not model.split_deterministic:
            raise PlanError("split_k(deterministic=False)", "the schedule is fused (acc.fuse): its later statements "
                                                            "need each element's whole value, which TMA reductions "
                                                            "make in L2, out of the block's reach; leave "
                                                            "split_k(deterministic=False) out")
        return None
    found = model.split_sums
    if not found:
        return None if model.split_deterministic else _whole(model)
    if len(found) > 1 or any(b.unit.level == "block" and len(b.loops) > 1 for b in model.bindings
                             if any(name in b.loops for _, name in found)):
        names = ", ".join(name for _, name in found)
        raise PlanError(_render(found), f"{names} split reductions between blocks; bind one loop of one dimension "
                                        "the statements sum over to a grid unit (split-K), alone")
    unit, name = found[0]
    return _split(model, unit, name)


def _whole(model: Model) -> Split:
    """``split_k(deterministic=False)`` without a split: one part, each block adding its tiles'
    whole sums into the target by TMA reductions instead of loading and storing them."""
    where = "split_k(deterministic=False)"
    target = _target(model, where, "each block adds its sums into the array they accumulate into by TMA reductions",
                     "the blocks add the sums of one array", "a TMA reduction can only add to its elements")
    if model.sizes:
        if model.tensorize is not None and model.tensorize.prologue_op is not MMAFragmentOp.NONE:
            raise PlanError(where, f"the prologue op {model.tensorize.prologue_op.name} would run as a kernel over "
                                   f"{target}'s written box, which run-time sizes ({', '.join(model.size_names)}) "
                                   "leave unknown; drop the prologue op or split_k(deterministic=False)")
        return Split("", None, -1, 1, 0, target, (), ())
    origin, extents, gap = poly.written_box(model, target)
    if gap is not None and model.tensorize is not None and model.tensorize.prologue_op is not MMAFragmentOp.NONE:
        raise PlanError(where, f"the nest writes {target} only partly in the box {_box(origin, extents)} "
                               f"({target}[{', '.join(map(str, gap))}] is not written): the prologue op's kernel "
                               "runs over a whole box")
    return Split("", None, -1, 1, 0, target, origin, extents)


def _target(model: Model, where: str, why: str, one: str, because: str) -> str:
    """The one array every statement accumulates into (``T += X``), or PlanError."""
    for n, s in enumerate(model.statements):
        if accumulated(s) is None:
            raise PlanError(where, f"{why}, but statement {n + 1} ({s.buffer} = ...) is not a reduction "
                                   f"{s.buffer} += ...: {because}")
    targets = sorted({s.buffer for s in model.statements})
    if len(targets) > 1:
        raise PlanError(where, f"the statements accumulate into {', '.join(targets)}; {one}")
    return targets[0]


def _split(model: Model, unit: GridUnit, name: str) -> Split:
    loop, where = model.loop(name), f"bind({{{name}: {unit.name}}})"
    dim_name, extent = model.dims[loop.dim]
    target = _target(model, where, f"{name} splits the sum over {dim_name} between blocks",
                     "a split between blocks combines the partial sums of one array",
                     "the blocks would race on its elements")
    across = [n for b in model.bindings if b.unit.level in ("thread", "warp") for n in b.loops
              if model.sums_over(model.loop(n).dim)]
    if across:
        raise PlanError(where, f"{name} splits the sum over {dim_name} between blocks and {', '.join(across)} between "
                               "threads: a reduction across both is not built; keep one of them")
    if model.sizes:
        raise PlanError(where, f"{name} splits a reduction between blocks, and the function has run-time sizes "
                               f"({', '.join(model.size_names)}): split-K's workspace and combine are built for "
                               "fixed sizes only; bind a loop of the written elements instead")
    if (loop.begin, loop.end) != (0, extent) or loop.step >= extent:
        raise PlanError(where, f"{name} takes {dim_name} {loop.begin}..{loop.end - 1} in steps of {loop.step}; bind "
                               f"the outer loop of a split of {dim_name} (schedule.split({dim_name}, size) with size "
                               f"below {extent}) to split the sum between blocks")
    if extent % loop.step:
        raise PlanError(where, f"{dim_name} has {extent} values, not a multiple of {name}'s step {loop.step}: "
                               f"each block of the split sums an equal part; split {dim_name} by a divisor of {extent}")
    if model.tensorize is not None:
        _check_whole_tiles(model, loop, where)
    origin, extents, gap = poly.written_box(model, target)
    if gap is not None:
        raise PlanError(where, f"the nest writes {target} only partly in the box {_box(origin, extents)} "
                               f"({target}[{', '.join(map(str, gap))}] is not written): the combine of the blocks' "
                               "sums runs over a whole box")
    if len(extents) > 2:
        raise PlanError(where, f"{target} has {len(extents)} dimensions; a split between blocks combines arrays of "
                               "one or two")
    return Split(name, unit, loop.dim, extent // loop.step, loop.step, target, origin, extents)


def _check_whole_tiles(model: Model, loop: LoopSpec, where: str) -> None:
    """Tensor cores compute whole tiles: a tile padded past the end of a block's part of the sum
    would add the next part's values, so every loop inside the split takes whole steps of it."""
    dim_name = model.dims[loop.dim][0]
    if loop.name in model.tensorize.loops:
        raise PlanError(where, f"{loop.name} is tensorized: bind the outer loop of a split of {dim_name}")
    for inner in model.loops:
        if inner.dim == loop.dim and inner.name != loop.name and loop.step % inner.step:
            raise PlanError(where, f"each block's part of {dim_name} is {loop.step} values, which {inner.name}'s steps "
                                   f"of {inner.step} do not divide: tensor cores compute whole tiles, and a tile "
                                   f"padded past the part would add the next part's values; split {dim_name} into "
                                   f"parts of a multiple of {inner.step}")


def _render(found) -> str:
    return "bind({" + ", ".join(f"{name}: {unit.name}" for unit, name in found) + "})"


def _box(origin, extents) -> str:
    return "[" + ", ".join(f"{o}:{o + n}" for o, n in zip(origin, extents)) + "]"


# -- the kernels' models ---------------------------------------------------------------------------


def accumulator_type(dtype: ScalarType) -> ScalarType:
    """The workspace's element type: float32 for 16-bit floats, else the target's type."""
    return ScalarType.float32 if dtype.is_float and dtype.size < 4 else dtype


def workspace(model: Model, split: Split) -> Buffer:
    target = model.buffer(split.target)
    shape = (split.splits, *split.extents)
    role = "output" if model.tensorize is not None else "input_output"
    return Buffer(f"{split.target}__partial", accumulator_type(target.dtype), shape, row_major_strides(shape),
                  WORKSPACE, role)


def models(model: Model, split: Split) -> tuple[Model, ...]:
    """The function's kernels as models, in launch order: (clear,) partial, combine; or, with
    ``split_k(deterministic=False)``, (prologue,) partial sums added into the target."""
    if not model.split_deterministic:
        return adding_models(model, split)
    space = workspace(model, split)
    partial = partial_model(model, split, space)
    combine = combine_model(model, split, dataclasses.replace(space, role="input"))
    if model.tensorize is not None:
        return partial, combine
    return clear_model(model, split, dataclasses.replace(space, role="output")), partial, combine


def adding_models(model: Model, split: Split) -> tuple[Model, ...]:
    """Split-K in any order: each block adds its tile of sums into the target (``adds_into``,
    TMA reductions, the accumulators starting at zero), after a kernel that applies the prologue
    op to the target where there is one."""
    t = model.tensorize
    where = "split_k(deterministic=False)"
    if t is None:
        raise PlanError(where, "the blocks add their sums into C by TMA reductions from a wgmma plan's tiles; this "
                               f"plan is not tensorized: {instead(bool(split.loop))}")
    if t.epilogue_op is not MMAFragmentOp.NONE:
        if split.loop:
            raise PlanError(where, f"the epilogue op {t.epilogue_op.name} needs each element's whole sum, and each "
                                   "block adds only its part: use the deterministic split (split_k()), whose combine "
                                   "applies it")
        raise PlanError(where, f"the epilogue op {t.epilogue_op.name} applies to each element's new value, which the "
                               f"TMA reduction makes in L2, out of the block's reach: {instead(bool(split.loop))}")
    check.check_reads(model)  # an OUTPUT C is not read by the adds, but the products may read it first
    partial = partial_model(model, split, None) if split.loop else model  # one part: the plan as it is
    partial = dataclasses.replace(partial, adds_into=split.target, tensorize=dataclasses.replace(
        partial.tensorize, prologue_op=MMAFragmentOp.SET, prologue_arg=0.0))
    if t.prologue_op is MMAFragmentOp.NONE:
        return (partial,)
    target = model.buffer(split.target)
    dims, _, index = _target_elements(split)
    acc = accumulator_type(target.dtype)
    value = _as(_op(model, "prologue", _as(Load(target.name, index, target.dtype), acc), acc), target.dtype)
    prologue = element_model(model, f"{model.function}__prologue", dims, (target,),
                              (Store(target.name, index, value),))
    return prologue, partial


def instead(has_split: bool) -> str:
    """What to write instead of ``split_k(deterministic=False)`` where its TMA reductions cannot be."""
    if has_split:
        return "use the deterministic split (split_k())"
    return "leave split_k(deterministic=False) out (the blocks then load C's tiles and store them)"


def partial_model(model: Model, split: Split, space: Buffer | None) -> Model:
    """The plan with ``split.loop`` over a dimension of its own and the statements accumulating
    into the workspace's slice of the block (``space``), or into their own target (None)."""
    dim_name = model.dims[split.dim][0]
    part = f"{dim_name}__split"
    dims = list(model.dims)
    if split.step == 1:  # one value a part: the dimension itself numbers the parts
        part, rejoin, loops = dim_name, {}, model.loops
    else:
        dims[split.dim] = (dim_name, split.step)
        dims.append((part, split.splits))
        rejoin = {dim_name: Binary("+", Binary("*", Const(split.step), Var(part)), Var(dim_name))}
        loops = tuple(LoopSpec(lp.name, len(dims) - 1, 0, split.splits, 1) if lp.name == split.loop else lp
                      for lp in model.loops)
    # the split loop's sums with the loops inside it stay below the dimension's size, which it divides
    groups = tuple(g for g in model.groups if split.loop not in g.members)
    if space is None:  # the statements keep their target, over the new dimensions
        statements = tuple(dataclasses.replace(s, index=tuple(substitute(i, rejoin) for i in s.index),
                                               value=substitute(s.value, rejoin)) for s in model.statements)
        return dataclasses.replace(model, function=f"{model.function}__partial", dims=tuple(dims),
                                   statements=statements, loops=loops, groups=groups)
    statements = tuple(_partial_statement(s, split, space, rejoin, Var(part)) for s in model.statements)
    used = {space.name} | set().union(*(buffers_read(s.value) for s in statements))
    buffers = (*(b for b in model.buffers if b.name in used), space)
    caches = tuple(dataclasses.replace(c, array=space.name) if c.array == split.target else c for c in model.caches)
    tensorize = model.tensorize
    if tensorize is not None:
        tensorize = dataclasses.replace(tensorize, prologue_op=MMAFragmentOp.SET, prologue_arg=0.0,
                                        epilogue_op=MMAFragmentOp.NONE, epilogue_arg=0.0)
    return dataclasses.replace(model, function=f"{model.function}__partial", buffers=buffers, dims=tuple(dims),
                               statements=statements, loops=loops, groups=groups, caches=caches, tensorize=tensorize)


def _partial_statement(s: Store, split: Split, space: Buffer, rejoin: dict, part: Var) -> Store:
    index = (part, *(_moved(substitute(i, rejoin), -o) for i, o in zip(s.index, split.origin)))
    term = widened(substitute(accumulated(s), rejoin), space.dtype)
    value = Binary("+", Load(space.name, index, space.dtype), term, space.dtype)
    return Store(space.name, index, value)


def combine_model(model: Model, split: Split, space: Buffer) -> Model:
    """One thread an element of the written box: the target's prologue, the slices' sum in order,
    the epilogue, stored in the target's type."""
    target = model.buffer(split.target)
    dims, here, index = _target_elements(split)
    acc = space.dtype
    total: Expr = _op(model, "prologue", _as(Load(target.name, index, target.dtype), acc), acc)
    for z in range(split.splits):
        total = Binary("+", total, Load(space.name, (Const(z), *here), acc), acc)
    value = _as(_op(model, "epilogue", total, acc), target.dtype)
    return element_model(model, f"{model.function}__combine", dims, (target, space),
                          (Store(target.name, index, value),))


def clear_model(model: Model, split: Split, space: Buffer) -> Model:
    """Zeros into the workspace (plans whose statements read their partial sums)."""
    dims = (("z", split.splits), *_element_dims(split.extents))
    index = tuple(Var(name) for name, _ in dims)
    zero = Const(0.0 if space.dtype.is_float else 0, space.dtype)
    return element_model(model, f"{model.function}__clear", dims, (space,), (Store(space.name, index, zero),))


def _moved(index: Expr, by: int) -> Expr:
    """``index + by`` (``index - |by|``; ``index`` itself for 0)."""
    return index if by == 0 else Binary("+" if by > 0 else "-", index, Const(abs(by)))


def _target_elements(split: Split) -> tuple[tuple[tuple[str, int], ...], tuple[Var, ...], tuple[Expr, ...]]:
    """An element-wise nest over the target's written box: its dimensions, their variables, and
    the target's subscripts at them."""
    dims = _element_dims(split.extents)
    here = tuple(Var(name) for name, _ in dims)
    return dims, here, tuple(_moved(v, o) for v, o in zip(here, split.origin))


def _as(expr: Expr, dtype: ScalarType) -> Expr:
    return expr if getattr(expr, "dtype", None) == dtype else Cast(expr, dtype)


def _op(model: Model, which: str, x: Expr, acc: ScalarType) -> Expr:
    """The tensorized plan's prologue or epilogue op on ``x`` (as the tensor cores apply it)."""
    t = model.tensorize
    if t is None:
        return x
    op, arg = (t.prologue_op, t.prologue_arg) if which == "prologue" else (t.epilogue_op, t.epilogue_arg)
    if op is MMAFragmentOp.NONE:
        return x
    if op is MMAFragmentOp.SET:
        return Const(float(arg) if acc.is_float else int(arg), acc)
    if op is MMAFragmentOp.SCALE:
        if acc.is_integer:  # integer accumulators are scaled in float32, then truncated
            f32 = ScalarType.float32
            return Cast(Binary("*", Cast(x, f32), Const(float(arg), f32), f32), acc)
        return Binary("*", x, Const(float(arg), acc), acc)
    return Binary("max", x, Const(0.0 if acc.is_float else 0, acc), acc)


def _element_dims(extents: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((f"e{d}", n) for d, n in enumerate(extents))


def element_model(model: Model, function: str, dims, buffers, statements, together: bool = False) -> Model:
    """An element-wise nest over ``dims``: the last dimension over threads (up to
    COMBINE_THREADS a block, each thread ELEMENTS_PER_THREAD elements COMBINE_THREADS apart,
    unrolled, so that its loads are in flight together) and blocks along x, the others over
    blocks along y and z; ``together``: the others all on blocks along x (any number of them, up
    to 2^31 - 1 blocks), the last's blocks along y."""
    loops, groups, bindings = [], [], []
    units = (GridUnit.BLOCK_Y, GridUnit.BLOCK_Z)
    last = len(dims) - 1
    lead = tuple(name for name, _ in dims[:-1])
    for d, (name, n) in enumerate(dims[:-1]):
        loops.append(LoopSpec(name, d, 0, n, 1))
        if not together:
            bindings.append(BindingSpec(units[last - 1 - d], (name,)))
    name, n = dims[-1]
    threads = min(n, COMBINE_THREADS)
    each = max(1, min(ELEMENTS_PER_THREAD, n // threads))
    span, thread, serial = threads * each, f"{name}t", f"{name}s"
    loops += [LoopSpec(name, last, 0, n, span), LoopSpec(thread, last, 0, threads, 1)]
    if each > 1:
        loops.append(LoopSpec(serial, last, 0, span, threads))
    if together and lead:
        bindings += [BindingSpec(GridUnit.BLOCK_X, lead), BindingSpec(GridUnit.BLOCK_Y, (name,))]
    else:
        bindings.append(BindingSpec(GridUnit.BLOCK_X, (name,)))
    bindings.append(BindingSpec(GridUnit.THREAD_X, (thread,)))
    if n % span:
        groups.append(GroupSpec(0, n, tuple(lp.name for lp in loops if lp.dim == last)))
    bindings.sort(key=lambda b: b.unit.value)
    return Model(function=function, target=model.target, buffers=tuple(buffers), dims=tuple(dims),
                 statements=tuple(statements), loops=tuple(loops), groups=tuple(groups),
                 bindings=tuple(bindings), tensorize=None, unrolled=(serial,) if each > 1 else ())
