"""One hierarchy of errors. Every message names the primitive or object and the numbers.

>>> str(ScheduleError("split(i, 0)", "factor must be a positive integer"))
'split(i, 0): factor must be a positive integer'
"""


class SchedcError(Exception):
    """Base class of every error schedc raises on purpose.

    ``where`` names the primitive call or object (``split(i, 0)``, ``A``); ``what`` says what is
    wrong, with the numbers; ``detail`` is an optional longer text; ``loops`` names the schedule
    loops concerned, which ``schedc check`` marks in the loop nest.
    """

    def __init__(self, where: str, what: str, detail: str = "", loops: tuple[str, ...] = ()) -> None:
        self.where = where
        self.what = what
        self.detail = detail
        self.loops = tuple(loops)  # schedule loops the error is about (marked in the detailed form)
        self.model = None  # the frozen Model being compiled, when there is one
        super().__init__(f"{where}: {what}" if where else what)

    def __reduce__(self):
        """Pickled with its fields (a worker process's error reaches the tuner whole)."""
        return _rebuilt, (type(self), self.where, self.what, self.detail, self.loops, self.args)


def _rebuilt(cls: type, where: str, what: str, detail: str, loops: tuple, args: tuple) -> SchedcError:
    error = cls.__new__(cls)
    error.where, error.what, error.detail, error.loops, error.model = where, what, detail, tuple(loops), None
    error.args = args
    return error


class NestError(SchedcError):
    """An array, nest or iteration-logic statement is malformed."""


class ScheduleError(SchedcError):
    """A schedule transformation (split, tile, reorder) is invalid."""


class PlanError(SchedcError):
    """A plan directive (bind, tensorize, unroll) is invalid for the schedule or target."""


class CacheError(PlanError):
    """A cache directive is invalid (footprint, memory space, shared-memory budget)."""


class TargetError(SchedcError):
    """An unknown target or a feature the target does not have."""


class PackageError(SchedcError):
    """Building, compiling, writing or reading a package failed."""


class LaunchError(SchedcError):
    """A call of a loaded function has bad arguments, or the device refused the launch."""


class MismatchError(LaunchError):
    """A function ran and its output does not match the reference."""


class TuneError(SchedcError):
    """schedc tune cannot search: a script without grids, a bad shape, budget or database."""


class InternalError(SchedcError):
    """A bug in schedc, not in the script: a pass produced something it must not.

    ``where`` names the pass (or backend) that failed; the message asks for a report.
    """

    def __init__(self, where: str, what: str, detail: str = "") -> None:
        super().__init__(where, f"internal error (a bug in schedc, please report it): {what}", detail)
