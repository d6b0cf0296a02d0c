"""Checks a plan must pass before any code is generated; each raises a PlanError with numbers."""

from __future__ import annotations

from ..errors import PlanError
from ..poly import PolyFacts
from ..targets import MMAFragmentOp
from .launch import Launch


def check_plan(model, facts: PolyFacts, launch: Launch) -> None:
    _check_roles(model)
    _check_unrolled(model)
    _check_warps(model)
    _check_launch(model, launch)
    _check_races(model, facts)


def render_bindings(model) -> str:
    parts = []
    for b in model.bindings:
        key = b.loops[0] if len(b.loops) == 1 else f"({', '.join(b.loops)})"
        parts.append(f"{key}: {b.unit.name}")
    return "bind({" + ", ".join(parts) + "})"


def _check_roles(model) -> None:
    t = model.tensorize
    fills = t is not None and t.prologue_op is MMAFragmentOp.SET
    for n, statement in enumerate(model.statements):
        for buffer in _reads(statement.value):
            spec = model.buffer(buffer)
            if spec.role == "output" and not fills:
                raise PlanError(
                    f"statement {n + 1}",
                    f"{buffer} is Role.OUTPUT but the nest reads it; use Role.INPUT_OUTPUT "
                    f"(or tensorize with prologue_op=MMAFragmentOp.SET)",
                )


def _reads(expr):
    from ..ir.kernel import Binary, Cast, Load, Unary

    if isinstance(expr, Load):
        yield expr.buffer
    elif isinstance(expr, Binary):
        yield from _reads(expr.lhs)
        yield from _reads(expr.rhs)
    elif isinstance(expr, Unary | Cast):
        yield from _reads(expr.operand)


def _check_unrolled(model) -> None:
    tile = set(model.tensorize.loops) if model.tensorize else set()
    for name in model.unrolled:
        unit = model.binding_of(name)
        if unit is not None:
            raise PlanError(f"unroll({name})", f"{name} is bound to {unit.name}; only loops can be unrolled")
        if name in tile:
            raise PlanError(f"unroll({name})", f"{name} is tensorized; its tile is one tensor-core operation")


def _check_warps(model) -> None:
    warp = [b for b in model.bindings if b.unit.level == "warp"]
    if warp and model.tensorize is None:
        raise PlanError(
            render_bindings(model),
            f"{warp[0].unit.name} binds warps, whose 32 lanes would repeat the same iterations; "
            "tensorize the plan or bind THREAD_* instead",
        )


def _check_launch(model, launch: Launch) -> None:
    gpu = model.gpu
    where = render_bindings(model)
    if launch.threads > gpu.max_threads_per_block:
        raise PlanError(
            where,
            f"{launch.threads} threads per block (block {launch.block[0]} x {launch.block[1]} x "
            f"{launch.block[2]}); {gpu.name} allows {gpu.max_threads_per_block}",
        )
    for axis, got, limit in zip("xyz", launch.block, gpu.max_block_dims):
        if got > limit:
            raise PlanError(where, f"block dimension {axis} is {got}; {gpu.name} allows {limit}")
    for axis, got, limit in zip("xyz", launch.grid, gpu.max_grid_dims):
        if got > limit:
            raise PlanError(where, f"grid dimension {axis} is {got} blocks; {gpu.name} allows {limit}")


def _check_races(model, facts: PolyFacts) -> None:
    """Each grid coordinate must index every array written, or its threads write one element."""
    bound = [(name, b.unit) for b in model.bindings for name in b.loops]
    for access in facts.accesses:
        if not access.is_write:
            continue
        for name, unit in bound:
            if not any(s.coeff(name) for s in access.subscripts):
                raise PlanError(
                    render_bindings(model),
                    f"{name} is bound to {unit.name} but does not index {access.array}, which "
                    f"statement {access.statement + 1} writes: the {facts.loop(name).extent} "
                    f"values of {name} would race on the same elements of {access.array}",
                )
