"""Handlers per IR node class: one CUDA emitter, one emulator executor per kind of statement.

A backend declares its handlers with ``@REGISTRY.handles(NodeClass)`` and asks the registry,
before it starts, which node classes of a kernel have none (every one is listed at once, rather
than failing halfway through a kernel).

>>> from schedc.ir.kernel import Barrier, Loop, Const
>>> emitters = Registry("CUDA emitter")
>>> @emitters.handles(Barrier)
... def barrier(printer, node):
...     return "__syncthreads();"
>>> emitters.missing((Loop("i", Const(0), Const(4), 1, (Barrier(),)),))
['Loop']
>>> emitters.add(Barrier, lambda printer, node: "")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
schedc.errors.InternalError: ... two CUDA emitters of Barrier: barrier and <lambda>
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InternalError
from .kernel import Stmt
from .walk import walk_statements


class Registry:
    """The handlers of one backend, keyed by IR node class."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.handlers: dict[type, Callable] = {}

    def handles(self, *classes: type) -> Callable[[Callable], Callable]:
        """Decorator: the function handles nodes of these classes."""
        def decorate(function: Callable) -> Callable:
            for cls in classes:
                self.add(cls, function)
            return function
        return decorate

    def add(self, cls: type, function: Callable) -> None:
        """``function`` handles nodes of ``cls``; a second handler of one class is refused (a
        silent overwrite would leave one backend's behaviour to import order)."""
        if cls in self.handlers and self.handlers[cls] is not function:
            raise InternalError(self.backend, f"two {self.backend}s of {cls.__name__}: "
                                              f"{self.handlers[cls].__qualname__} and {function.__qualname__}")
        self.handlers[cls] = function

    def handler(self, node: object) -> Callable:
        return self.handlers[type(node)]

    def missing(self, body: tuple[Stmt, ...]) -> list[str]:
        """The node classes in ``body`` that have no handler, sorted."""
        return sorted({type(s).__name__ for s in walk_statements(body) if type(s) not in self.handlers})

    def require(self, body: tuple[Stmt, ...], kernel: str) -> None:
        """An InternalError listing every node class of ``body`` without a handler."""
        missing = self.missing(body)
        if missing:
            raise InternalError(self.backend, f"kernel {kernel} has IR nodes with no {self.backend}: "
                                              f"{', '.join(missing)}")
