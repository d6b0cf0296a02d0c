"""The statement recorder that ``@nest.iteration_logic`` opens while the user's function runs."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..errors import NestError
from .expr import Assign

_RECORDER: contextvars.ContextVar[list[Assign] | None] = contextvars.ContextVar(
    "schedc_iteration_logic", default=None
)


@contextlib.contextmanager
def recording() -> Iterator[list[Assign]]:
    """Collect the statements assigned while the block runs."""
    statements: list[Assign] = []
    token = _RECORDER.set(statements)
    try:
        yield statements
    finally:
        _RECORDER.reset(token)


def record(where: str, statement: Assign) -> None:
    statements = _RECORDER.get()
    if statements is None:
        raise NestError(where, "array elements can only be assigned inside @nest.iteration_logic")
    statements.append(statement)
