"""Lowering: a frozen Model and its polyhedral facts become kernel IR.

``compile_function`` runs the function's passes around the kernels' (``split``: its kernels'
Models; ``link``: the kernels chained into the function); ``compile_model`` runs ``PASSES`` for
one kernel in order (schedc/lower/passes.py: each a function from the ``Lowering`` IR to the next,
with a one-line docstring saying what it adds). ``schedc show --after PASS`` prints what a pass
attached; under ``verifying()`` (the tests, ``--verify-ir``) the kernel IR is checked after every
pass that made or rewrote it (schedc/lower/wellformed.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator

from ..errors import InternalError, SchedcError
from ..ir.kernel import HostFunction, Kernel
from . import wellformed
from .passes import LINK, PASSES, SPLIT, FunctionLowering, Lowering, Pass

_VERIFY: contextvars.ContextVar[bool] = contextvars.ContextVar("schedc_verify_ir", default=False)

Observer = Callable[[Pass, Lowering | FunctionLowering], None]


@contextlib.contextmanager
def verifying(on: bool = True) -> Iterator[None]:
    """Check the kernel IR after every pass that makes or rewrites it, while inside."""
    token = _VERIFY.set(on)
    try:
        yield
    finally:
        _VERIFY.reset(token)


def compile_model(model, observe: Observer | None = None) -> Kernel:
    """Model → Kernel: the passes in order. A SchedcError raised on the way carries ``model``;
    ``observe(pass, ir)`` sees the IR after each pass."""
    try:
        ir = Lowering(model)
        for step in PASSES:
            ir = _run(step, ir)
            if observe is not None:
                observe(step, ir)
        return ir.kernel
    except SchedcError as error:
        error.model = error.model or model
        raise


def compile_function(model, observe: Observer | None = None) -> HostFunction:
    """Model → the function's kernels: ``split`` (one kernel, or a reduction split between blocks,
    ``schedc.lower.split``: a clear, the partial sums and their combine), each kernel through the
    passes, then ``link``."""
    try:
        ir = _run(SPLIT, FunctionLowering(model))
    except SchedcError as error:
        error.model = error.model or model
        raise
    if observe is not None:
        observe(SPLIT, ir)
    ir = _run(LINK, dataclasses.replace(ir, kernels=tuple(compile_model(m, observe) for m in ir.parts)))
    if observe is not None:
        observe(LINK, ir)
    return _in_argument_order(model, ir.function)


def _in_argument_order(model, function: HostFunction) -> HostFunction:
    """The function's parameters with its run-time sizes where ``Package.add``'s args put them
    (the C launcher takes them there); the kernels' own signatures keep sizes after the arrays."""
    if not model.sizes:
        return function
    sizes = {p.name: p for p in function.sizes}
    rest = [p for p in function.params if p.name not in sizes]
    arrays = [p for p in rest if p in function.arrays]
    ordered = []
    for position in range(len(arrays) + len(sizes)):
        named = [name for name, at in model.sizes if at == position]
        ordered.append(sizes[named[0]] if named else arrays.pop(0))
    return dataclasses.replace(function, params=(*ordered, *(p for p in rest if p not in function.arrays)))


def pass_names() -> tuple[str, ...]:
    """Every pass a function goes through, in order: its own around each kernel's."""
    return (SPLIT.name, *(p.name for p in PASSES), LINK.name)


def _run(step: Pass, ir):
    """One pass; an exception that is not a SchedcError, or a malformed kernel it leaves, is a
    bug in schedc, reported as an InternalError naming the pass."""
    try:
        out = step.run(ir)
    except SchedcError:
        raise
    except Exception as error:  # noqa: BLE001 - every other failure is ours
        raise InternalError(f"pass {step.name}", f"{type(error).__name__}: {error}") from error
    if _VERIFY.get() and getattr(out, "kernel", None) is not None and out.kernel is not ir.kernel:
        problems = wellformed.problems(out.kernel)
        if problems:
            raise InternalError(f"pass {step.name}", "the kernel IR it made is malformed: " + "; ".join(problems))
    return out
