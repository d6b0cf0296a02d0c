"""Shrinking: simplify a failing program while it still fails the same way.

Greedy and deterministic: from the current program, try simpler variants in a fixed order
(drop the tensorization, caches, bindings, unrolls, the reorder, statements, splits; smaller
sizes; simpler expressions, subscripts, types, layouts, roles, target) and keep the first whose
outcome has the same signature; repeat until no variant fails or the budget is spent. Variants
are made consistent first (``normalize``) and skipped when their values could differ from the
reference for reasons that are not bugs (``values.program_is_safe``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from .program import (
    ArrayDecl,
    Const,
    Expr,
    Program,
    Ref,
    Split,
    Statement,
    Subscript,
    Tile,
    expr_children,
    fold,
    loop_spans,
    parents,
    refs,
    simulate_steps,
    with_children,
)
from .render import render
from .run import Outcome
from .values import program_is_safe


@dataclass(frozen=True)
class Shrunk:
    program: Program
    outcome: Outcome
    tried: int  # variants run
    accepted: int  # variants that kept the failure


def shrink(program: Program, outcome: Outcome, evaluate: Callable[[list[Program]], list[Outcome]],
           batch: int = 2, attempts: int = 120, seconds: float = 120.0) -> Shrunk:
    """The smallest program found that fails with ``outcome``'s signature. ``evaluate`` runs a
    batch of programs (in parallel) and returns their outcomes in order."""
    deadline = time.monotonic() + seconds
    current, tried, accepted = program, 0, 0
    seen = {render(program)}
    while tried < attempts and time.monotonic() < deadline:
        found, runs = _first_failing(current, outcome.signature, evaluate, batch, seen, attempts - tried, deadline)
        tried += runs
        if found is None:
            break
        (current, outcome), accepted = found, accepted + 1
    return Shrunk(current, outcome, tried, accepted)


def _first_failing(program, signature, evaluate, batch, seen, budget, deadline):
    """((variant, outcome) of the first variant failing with ``signature``, or None; runs)."""
    tried, group = 0, []
    for candidate in _fresh(program, seen):
        group.append(candidate)
        if len(group) < batch:
            continue
        hit = _hit(group, evaluate, signature)
        tried += len(group)
        if hit is not None or tried >= budget or time.monotonic() > deadline:
            return hit, tried
        group = []
    if group:
        tried += len(group)
        return _hit(group, evaluate, signature), tried
    return None, tried


def _hit(group, evaluate, signature):
    for candidate, outcome in zip(group, evaluate(group)):
        if outcome.signature == signature:
            return candidate, outcome
    return None


def _fresh(program: Program, seen: set[str]) -> Iterator[Program]:
    for candidate in variants(program):
        candidate = normalize(candidate)
        if candidate is None or not program_is_safe(candidate):
            continue
        text = render(candidate)
        if text not in seen:
            seen.add(text)
            yield candidate


# -- variants, simplest first -------------------------------------------------------------------


def variants(p: Program) -> Iterator[Program]:
    """Simpler programs than ``p``, the biggest simplifications first."""
    yield from _plan_variants(p)
    yield from _statement_variants(p)
    yield from _size_variants(p)  # early: every later run is faster on a smaller nest
    yield from _step_variants(p)
    yield from _expression_variants(p)
    yield from _array_variants(p)
    if p.target != "NVIDIA_H100":
        yield replace(p, target="NVIDIA_H100")


def _without(items: tuple, n: int) -> tuple:
    return items[:n] + items[n + 1:]


def _plan_variants(p: Program) -> Iterator[Program]:
    if p.runtime:
        yield replace(p, runtime=False)
    if p.epilogue:
        yield replace(p, epilogue=(), rows_only=False, order=tuple(n for n in p.order if n not in ("f", "j1")))
        for n in range(len(p.epilogue)) if len(p.epilogue) > 1 else ():
            yield replace(p, epilogue=_without(p.epilogue, n))
    if p.tensorize is not None:
        yield replace(p, tensorize=None)
    for n in range(len(p.caches)):
        yield replace(p, caches=_without(p.caches, n))
    for n in range(len(p.bindings)):
        yield replace(p, bindings=_without(p.bindings, n))
    for n in range(len(p.unrolls)):
        yield replace(p, unrolls=_without(p.unrolls, n))
    if p.order is not None:
        yield replace(p, order=None)
    if p.persistent is not None:
        yield replace(p, persistent=None)
    if p.cluster is not None:
        yield replace(p, cluster=None)
    if p.blocks_per_sm:
        yield replace(p, blocks_per_sm=0)
    if p.specialize is not None:
        yield replace(p, specialize=None)
    if p.teams > 1:
        yield replace(p, teams=1)
    if p.order_free:
        yield replace(p, order_free=False)
    if p.overlap:
        yield replace(p, overlap=False)
    if p.alternate:
        yield replace(p, alternate=False)
    for n, c in enumerate(p.caches):
        if c.pipeline != "sync":
            yield replace(p, caches=p.caches[:n] + (replace(c, pipeline="sync", stages=0),) + p.caches[n + 1:])
        if c.layout:
            yield replace(p, caches=p.caches[:n] + (replace(c, layout=""),) + p.caches[n + 1:])
    for n, b in enumerate(p.bindings):
        if len(b.indices) > 1:
            yield replace(p, bindings=p.bindings[:n] + (replace(b, indices=b.indices[:1]),) + p.bindings[n + 1:])
    if p.tensorize is not None:
        yield from _tensorize_variants(p)


def _tensorize_variants(p: Program) -> Iterator[Program]:
    t = p.tensorize
    simpler = (replace(t, prologue="NONE"), replace(t, epilogue="NONE"), replace(t, fused=None))
    for s in simpler:
        if s != t:
            yield replace(p, tensorize=s)


def _statement_variants(p: Program) -> Iterator[Program]:
    if len(p.statements) > 1:
        for n in range(len(p.statements)):
            yield replace(p, statements=_without(p.statements, n))


def _step_variants(p: Program) -> Iterator[Program]:
    for n in reversed(range(len(p.steps))):
        step = p.steps[n]
        yield replace(p, steps=_without(p.steps, n))
        if isinstance(step, Tile):
            for m in range(len(step.sizes)):
                rest = _without(step.sizes, m)
                yield replace(p, steps=p.steps[:n] + ((Tile(rest) if len(rest) > 1 else Split(*rest[0])),)
                              + p.steps[n + 1:])


def _size_variants(p: Program) -> Iterator[Program]:
    for d, n in enumerate(p.dims):
        for smaller in sorted({1, n // 2, n - 1} - {n, 0}):
            yield resize(p, d, smaller)
    for n, step in enumerate(p.steps):
        if isinstance(step, Split) and step.size > 1:
            yield replace(p, steps=p.steps[:n] + (Split(step.index, step.size // 2),) + p.steps[n + 1:])


def resize(p: Program, dim: int, extent: int) -> Program:
    """Nest dimension ``dim`` cut to ``extent``; reversed subscripts keep their distance from
    the end (``7 - i`` becomes ``3 - i`` at extent 4), so OUTPUT arrays stay covered."""
    name, delta = p.nest_indices[dim], p.dims[dim] - extent

    def shift(r: Ref) -> Ref:
        return Ref(r.array, tuple(Subscript(s.index, s.sign, s.offset - delta) if s.index == name and s.sign < 0
                                  else s for s in r.subscripts))

    statements = tuple(Statement(shift(s.target), _map_refs(s.value, shift), s.accumulate) for s in p.statements)
    dims = p.dims[:dim] + (extent,) + p.dims[dim + 1:]
    return replace(p, dims=dims, statements=statements)


def _expression_variants(p: Program) -> Iterator[Program]:
    for n, s in enumerate(p.statements):
        for value in _simpler_exprs(s.value):
            yield _with_statement(p, n, replace(s, value=value))
        for target in _simpler_refs(s.target):
            yield _with_statement(p, n, replace(s, target=target))
        if s.accumulate:
            yield _with_statement(p, n, replace(s, accumulate=False))


def _with_statement(p: Program, n: int, s: Statement) -> Program:
    return replace(p, statements=p.statements[:n] + (s,) + p.statements[n + 1:])


def _simpler_exprs(e: Expr) -> Iterator[Expr]:
    """``e`` with one node replaced by one of its children, a constant, or a simpler read."""
    for child in expr_children(e):
        yield child
    if isinstance(e, Ref):
        yield from _simpler_refs(e)
    if isinstance(e, Const):
        if e.value not in (1, 1.0):
            yield Const(1.0 if isinstance(e.value, float) else 1)
    else:
        yield Const(2.0)
    for n, child in enumerate(expr_children(e)):
        for simpler in _simpler_exprs(child):
            yield _replace_child(e, n, simpler)


def _replace_child(e: Expr, n: int, child: Expr) -> Expr:
    children = list(expr_children(e))
    children[n] = child
    return with_children(e, tuple(children))


def _simpler_refs(r: Ref) -> Iterator[Ref]:
    for n, s in enumerate(r.subscripts):
        if s.index is not None and (s.sign, s.offset) != (1, 0):
            yield Ref(r.array, r.subscripts[:n] + (Subscript(s.index),) + r.subscripts[n + 1:])


def _array_variants(p: Program) -> Iterator[Program]:
    written = {s.target.array for s in p.statements}
    for n, a in enumerate(p.arrays):
        simpler = [replace(a, layout="FIRST_MAJOR"), replace(a, dtype="float32"), replace(a, shape=(0,) * len(a.shape))]
        if a.role == "INPUT_OUTPUT" and a.name not in written:
            simpler.append(replace(a, role="INPUT"))
        if a.role == "OUTPUT":
            simpler.append(replace(a, role="INPUT_OUTPUT"))
        for b in simpler:
            if b != a:
                yield replace(p, arrays=p.arrays[:n] + (b,) + p.arrays[n + 1:])


# -- consistency ------------------------------------------------------------------------------


def normalize(p: Program) -> Program | None:
    """Make a variant consistent: steps on indices that exist (sizes within range), plan
    directives on existing indices and arrays, a complete order, arrays the script uses with
    shapes that hold every access (a zero shape asks for the smallest), constants folded."""
    p = replace(p, statements=tuple(Statement(s.target, fold(s.value), s.accumulate) for s in p.statements))
    p = _valid_steps(p)
    names, _ = simulate_steps(p)[:2]
    known = set(names)
    bindings = tuple(b for b in p.bindings if set(b.indices) <= known)
    caches = tuple(c for c in p.caches if c.index in known)
    tensorize = p.tensorize if p.tensorize is None or set(p.tensorize.indices) <= known else None
    p = replace(p, bindings=bindings, unrolls=tuple(u for u in p.unrolls if u in known), caches=caches,
                tensorize=tensorize, order=_complete_order(p, names))
    return _fit_arrays(p)


def _valid_steps(p: Program) -> Program:
    kept = []
    for step in p.steps:
        trial = replace(p, steps=(*kept, step))
        pairs = step.sizes if isinstance(step, Tile) else ((step.index, step.size),)
        names = set(simulate_steps(replace(p, steps=tuple(kept)))[0])
        if all(index in names for index, _ in pairs) and _sizes_fit(trial, kept, pairs):
            kept.append(step)
    return replace(p, steps=tuple(kept))


def _sizes_fit(trial: Program, kept: list, pairs) -> bool:
    """Each split size is a multiple of its index's step and within its range."""
    spans = loop_spans(replace(trial, steps=tuple(kept)))[0]
    return all(size >= 1 and size % spans[i][1] == 0 and size <= spans[i][0] for i, size in pairs)


def _complete_order(p: Program, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The reorder restricted to existing indices, missing ones placed after their parents."""
    if p.order is None:
        return None
    order = [n for n in p.order if n in names or n == "f" and p.epilogue or n == "j1" and p.rows_only]
    parent = parents(p)
    for name in names:
        if name not in order:
            at = order.index(parent[name]) + 1 if parent.get(name) in order else len(order)
            order.insert(at, name)
    return tuple(order)


def _fit_arrays(p: Program) -> Program | None:
    extents = dict(p.schedule_roots)
    used = {r.array for s in p.all_statements for r in (s.target, *refs(s))}
    arrays = []
    for a in p.arrays:
        if a.name not in used and all(c.array != a.name for c in p.caches):
            continue
        accesses = [r for s in p.all_statements for r in (s.target, *refs(s)) if r.array == a.name]
        arrays.append(_fit(a, accesses, extents))
    if any(a is None for a in arrays) or not p.statements:
        return None
    return replace(p, arrays=tuple(arrays))


def _fit(a: ArrayDecl, accesses: list[Ref], extents) -> ArrayDecl | None:
    shape = []
    for axis, old in enumerate(a.shape):
        ranges = [r.subscripts[axis].value_range(extents) for r in accesses]
        if any(lo < 0 for lo, _ in ranges):
            return None
        need = max((hi + 1 for _, hi in ranges), default=max(old, 1))
        shape.append(need if a.role == "OUTPUT" or old < need else old)
    return replace(a, shape=tuple(shape))


def _map_refs(e: Expr, change) -> Expr:
    from .program import map_refs

    return map_refs(e, change)


def size(p: Program) -> int:
    """How big a program is, for picking the smallest example of a class."""
    return len(render(p))
