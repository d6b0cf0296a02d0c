"""``Package``: collect planned functions and build a HAT package (Accera's ``acc.Package``).

``hat_packages/<name>/`` receives ``<name>.hat``, ``<name>.cu``, ``<name>.cubin`` (NVRTC for
the target's sm), ``<name>.schedc.json`` (the kernel IR and model, for ``schedc emulate`` and
``schedc verify``) and, when nvcc is present, ``lib<name>.so`` with C-callable launchers.
``Package.add_function`` takes a function given as kernel IR (``HostFunction``: several
kernels launched in order, scalar and struct parameters).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__, tma
from ..codegen.cuda import emit_source
from ..errors import InternalError, PackageError, SchedcError
from ..frontend import names
from ..frontend.array import Array, Role
from ..frontend.dimension import Dimension
from ..frontend.freeze import freeze
from ..frontend.parameters import (
    Parameter,
    ParameterValue,
    Replay,
    deferred,
    describe,
    parameters_in,
    show_value,
    typed_value,
)
from ..frontend.plan import Plan
from ..instructions import FAMILIES
from ..ir.kernel import (
    Fragment,
    HostFunction,
    Kernel,
    StructParam,
    buffers_in_vectors,
    tile_of,
    to_plain,
)
from ..ir.model import Model
from ..ir.walk import walk_statements
from ..lower import compile_function, verifying, wellformed
from ..targets import Target
from . import compile as compilers
from . import hat, refusals


class Format(enum.Flag):
    """What ``Package.build`` writes (Accera's flags; they combine with ``|``).

    Every package has its ``.hat``, ``.cu`` (the CUDA source), ``.cubin`` and ``.schedc.json``.
    DYNAMIC_LIBRARY (in HAT_DYNAMIC, MLIR_DYNAMIC) requires ``lib<name>.so`` (nvcc);
    STATIC_LIBRARY (HAT_STATIC, MLIR_STATIC) builds ``lib<name>.a`` instead; neither (DEFAULT,
    HAT_SOURCE, SOURCE, CPP, CUDA) adds the .so when nvcc is present. schedc makes no MLIR: MLIR
    writes each function's kernel IR beside the package (``<name>.ir/<function>.txt``) and
    MLIR_VERBOSE the IR after every lowering pass (``<function>.<n>_<pass>.txt``), and the build
    says so once.

    >>> Format.HAT_SOURCE | Format.MLIR == Format.MLIR_SOURCE
    True
    """

    DYNAMIC_LIBRARY = enum.auto()
    STATIC_LIBRARY = enum.auto()
    HAT_PACKAGE = enum.auto()
    MLIR = enum.auto()
    MLIR_VERBOSE = enum.auto()
    SOURCE = enum.auto()
    CPP = enum.auto()
    CUDA = enum.auto()
    DEFAULT = enum.auto()
    HAT_DYNAMIC = HAT_PACKAGE | DYNAMIC_LIBRARY
    HAT_STATIC = HAT_PACKAGE | STATIC_LIBRARY
    HAT_SOURCE = HAT_PACKAGE | SOURCE
    MLIR_DYNAMIC = HAT_DYNAMIC | MLIR
    MLIR_STATIC = HAT_STATIC | MLIR
    MLIR_SOURCE = HAT_SOURCE | MLIR


class Mode(enum.Enum):
    RELEASE = "RELEASE"
    DEBUG = "DEBUG"  # device code with -G and line info, for cuda-gdb and compute-sanitizer


class Platform(enum.Enum):
    HOST = "HOST"
    LINUX = "LINUX"


@dataclass
class BuildSession:
    """What a ``schedc build``/``show`` run collects: packages built (or, with show_only, the
    functions that would be)."""

    show_only: bool = False
    output_dir: Path | None = None  # overrides the scripts' output_dir
    built: list[Path] = field(default_factory=list)
    shown: list[tuple[str, Model, Kernel, str]] = field(default_factory=list)  # name, model, kernel, source
    added: list[Model] = field(default_factory=list)  # every function Package.add took, built or not
    observe: Callable | None = None  # observe(pass, ir) after each lowering pass (schedc show --after)
    verify_ir: bool = False  # check the kernel IR after every pass (--verify-ir)
    collect: Collected | None = None  # schedc tune: grids and builds recorded, nothing compiled or written


@dataclass(frozen=True)
class GridAdd:
    """A ``Package.add(..., parameters=[...])`` that ``schedc tune`` searches: the points of the
    grid and where the chosen one goes in its package (``position`` among its functions)."""

    package: Package
    position: int
    source: Plan
    args: tuple
    base_name: str
    points: tuple[dict, ...]


@dataclass(frozen=True)
class BuildCall:
    """A ``Package.build`` of a tuned script, with its arguments, to repeat with the winners."""

    package: Package
    name: str
    kwargs: dict


@dataclass
class Collected:
    """What a script run by ``schedc tune`` adds and builds, in order."""

    grids: list[GridAdd] = field(default_factory=list)
    builds: list[BuildCall] = field(default_factory=list)


_SESSION: contextvars.ContextVar[BuildSession | None] = contextvars.ContextVar("schedc_build", default=None)


def run_script(path: Path) -> None:
    """Run the schedule script at ``path`` as ``python SCRIPT`` would: as ``__main__``, its folder
    importable, ``sys.argv`` the script alone (not the schedc command that runs it). A script
    that calls ``sys.exit()`` (status 0) ends there; another status is a PackageError."""
    import runpy
    import sys

    if Path(path).suffix == ".hat":
        raise PackageError(str(path), "a package, not a schedule script: emulate it with schedc emulate, run it on "
                                      "the GPU with schedc verify or bench")
    folder = str(Path(path).resolve().parent)
    argv, sys.argv = sys.argv, [str(path)]
    sys.path.insert(0, folder)
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:  # the script ended itself: what it built so far is reported, unless it failed
        if isinstance(e.code, str):  # sys.exit("why"): Python prints it and exits 1
            raise PackageError(str(path), f"the script exited: {e.code}") from None
        if e.code not in (None, 0):
            raise PackageError(str(path), f"the script exited with status {e.code}") from None
    finally:
        sys.argv = argv
        if folder in sys.path:  # (the script may have taken it out itself)
            sys.path.remove(folder)


@contextlib.contextmanager
def session(show_only: bool = False, output_dir: str | Path | None = None, observe: Callable | None = None,
            verify_ir: bool = False, collect: Collected | None = None) -> Iterator[BuildSession]:
    s = BuildSession(show_only, Path(output_dir) if output_dir is not None else None, observe=observe,
                     verify_ir=verify_ir, collect=collect)
    token = _SESSION.set(s)
    try:
        yield s
    finally:
        _SESSION.reset(token)


@dataclass(frozen=True)
class _Added:
    model: Model | None  # None: a function given as kernel IR (Package.add_function)
    description: str
    function: HostFunction | None = None  # given as kernel IR; else compiled from the model
    parameters: dict[str, ParameterValue] = field(default_factory=dict)  # the values it was added with
    compiled: HostFunction | None = None  # a grid point's kernels, compiled when it was added
    tuning: dict = field(default_factory=dict)  # schedc tune's record of how the point was chosen (the .hat's)

    @property
    def name(self) -> str:
        return self.model.function if self.model is not None else self.function.name


class Function(str):
    """What ``Package.add`` returns: the function's name (a ``str``), with Accera's ``.name``
    and the ``.parameters`` it was added with (parameter name: value, as the .hat lists them:
    numbers as numbers, other values as text)."""

    def __new__(cls, name: str, parameters: dict[str, ParameterValue]) -> Function:
        made = super().__new__(cls, name)
        made.parameters = dict(parameters)
        return made

    @property
    def name(self) -> str:
        return str(self)


def _digest(base_name: str, target: Target, values: dict[str, str], args: tuple) -> str:
    """Accera's function-name suffix: 16 hex digits of a stable hash of what makes the function."""
    signature = [(a.role.value, a.element_type.value, [str(n) for n in a.shape], list(a.strides))
                 if isinstance(a, Array) else ("size", a.name) for a in args if isinstance(a, Array | Dimension)]
    text = json.dumps([base_name, target.name, sorted(values.items()), signature])
    return hashlib.md5(text.encode()).hexdigest()[:16]


class Package:
    """A collection of functions built together into one HAT package."""

    Format = Format
    Mode = Mode
    Platform = Platform

    def __init__(self) -> None:
        self._functions: list[_Added] = []
        self._grids: list[GridFunctions] = []  # each grid added, with its refused points
        self._target: Target | None = None
        self._description: dict = {}

    def add(self, source: Plan, args: tuple[Array, ...], base_name: str = "",
            parameters: dict | list[dict] | None = None) -> Function | list[Function]:
        """Add a function named ``base_name`` running ``source`` (a Plan) on ``args``.

        Arrays and loops take the names of the script's variables for them (``name_arrays``);
        unnamed arrays are otherwise named by their position in ``args``: A, B, C, ...

        Every check runs here, the lowering included: a plan ``add`` accepts builds, and a
        refused one raises its SchedcError here, never at ``build``.

        ``parameters`` (Accera's): a dict giving each parameter the plan uses a value, or a list
        of such dicts (a grid: ``create_parameter_grid``), one function per dict. The plan's
        recorded calls are replayed with the values and every check runs on the result. A dict
        the checks refuse raises its error with its values; a grid keeps the points the checks
        accept and names the refused ones by cause when the package is built (as ``schedc tune
        --dry-run`` counts them), raising a PackageError only where it accepts none. Such a
        function is named as Accera names it, ``<base_name>_<16 hex digits>`` (a hash of the name,
        the target, the values and the arguments), and the .hat lists its values
        (``auxiliary.accera.parameters``).

        Returns the function (a ``str``, its name, with ``.name`` and ``.parameters``), or for a
        grid the list of the accepted points' functions (``GridFunctions``: ``.refused`` holds
        each refused point with its error, ``.points`` the grid's size)."""
        where = f"Package.add({base_name or '...'})"
        if not isinstance(source, Plan):
            raise PackageError(
                where, "schedc builds GPU plans: pass schedule.create_plan(Target(...)), "
                f"not a {type(source).__name__}"
            )
        why = names.unusable_launcher(base_name)
        if why is not None:
            raise PackageError(where, f"base_name: {why}")
        compilers.check_buildable(source.target)
        args = tuple(args) if isinstance(args, tuple | list) else (args,)
        current = _SESSION.get()
        if isinstance(parameters, list | tuple) and current is not None and current.collect is not None:
            return self._collect(where, current.collect, source, args, base_name, tuple(parameters))
        if isinstance(parameters, list | tuple):
            return self._add_grid(where, source, args, base_name, tuple(parameters))
        if parameters:
            return self._add_point(where, source, args, base_name, parameters)
        if deferred(source) or any(deferred(a) for a in args):
            missing = ", ".join(p.name for p in parameters_in(source, args))
            raise PackageError(where, f"the plan uses parameters ({missing}) and no values are given: "
                                      "Package.add(..., parameters={...})")
        return self._add_concrete(where, source, args, base_name, {})

    def _collect(self, where: str, collected: Collected, source: Plan, args: tuple, base_name: str,
                 points: tuple) -> list[Function]:
        """schedc tune: record the grid (checked, compiled and timed point by point by the tuner); the
        Functions its points add, as Package.add names them, returned as they are outside tune."""
        if not points:
            raise PackageError(where, "parameters is an empty list: the grid has no points")
        for point in points:
            _check_point(where, point)
        name_arrays(where, source, args, base_name)
        collected.grids.append(GridAdd(self, len(self._functions), source, args, base_name, points))
        return [self._named_point(source, args, base_name, point)[0] for point in points]

    def _add_grid(self, where: str, source: Plan, args: tuple, base_name: str, points: tuple) -> GridFunctions:
        """Add the function of each point the checks accept; the refused ones are kept with their
        errors (named by cause when the package is built). A PackageError where none is accepted."""
        if not points:
            raise PackageError(where, "parameters is an empty list: the grid has no points")
        for point in points:
            _check_point(where, point)
        accepted, refused = [], []
        for point in points:
            try:
                accepted.append(self._add_point(where, source, args, base_name, point))
            except InternalError:
                raise
            except SchedcError as e:
                refused.append(refusals.Refusal(describe(point), e))
        if not accepted:
            raise _nothing_accepted(where, len(points), refused)
        functions = GridFunctions(accepted, base_name, len(points), tuple(refused))
        self._grids.append(functions)
        return functions

    @staticmethod
    def _named_point(source: Plan, args: tuple, base_name: str, point: object):
        """The Function a grid's point adds (its name ``<base_name>_<digest>`` and values), and
        the replay that resolves it."""
        replay = Replay(point)
        concrete = replay.resolve(args)
        resolved = {p.name: replay.resolve(v) for p, v in point.items()}
        values = {name: typed_value(v) for name, v in resolved.items()}
        shown_values = {name: show_value(v) for name, v in resolved.items()}  # the digest's, as ever
        name = f"{base_name}_{_digest(base_name, source.target, shown_values, concrete)}"
        return Function(name, values), replay, concrete

    def _add_point(self, where: str, source: Plan, args: tuple, base_name: str, point: object,
                   name: str | None = None, tuning: dict | None = None) -> Function:
        """Add the function of one point of a grid, named ``<base_name>_<digest>`` (or ``name``)."""
        _check_point(where, point)
        shown = describe(point)
        name_arrays(where, source, args, base_name)  # the script's names, which replayed objects keep
        try:
            named, replay, concrete = self._named_point(source, args, base_name, point)
            plan = replay.resolve(source)
            return self._add_concrete(f"{where} at {shown}", plan, concrete, name or str(named), named.parameters,
                                      tuning or {})
        except SchedcError as e:
            if str(e).startswith(f"{where} at {shown}"):  # _add_concrete's own: located already
                raise
            raise _located(e, f"{where} at {shown}") from None

    def _add_concrete(self, where: str, source: Plan, args: tuple, name: str,
                      values: dict[str, ParameterValue], tuning: dict | None = None) -> Function:
        if any(f.name == name for f in self._functions):
            raise PackageError(where, f"the package already has a function {name}")
        _check_args(where, args)
        name_arrays(where, source, args, name)
        if self._target is not None and self._target.model != source.target.model:
            raise PackageError(where, f"the package targets {self._target.name}, this plan {source.target.name}")
        self._target = source.target
        model = freeze(source, name, args)
        description = "; ".join(str(s) for s in source.schedule.nest.statements)
        compiled = _lowered(model, located=not values)  # every refusal reaches the script here, not at build
        self._functions.append(_Added(model, description, parameters=values, compiled=compiled, tuning=tuning or {}))
        if (current := _SESSION.get()) is not None:
            current.added.append(model)
        return Function(name, values)

    def _say_refused(self, show_only: bool) -> None:
        """Each grid with refused points: how many were built (accepted, under ``schedc check`` and
        ``show``) and the refusals by cause, on stderr as the build's other notes."""
        for grid in self._grids:
            if grid.refused:
                print(f"schedc: {grid.summary('accepted' if show_only else 'built')}", file=sys.stderr)

    def add_description(self, author: str | None = None, license: str | None = None, other: dict | None = None,
                        version: str | None = None) -> None:
        """Descriptive metadata for the package's .hat (its ``[description]`` table), as Accera's:
        ``author``, ``license`` (a URL), ``version``; ``other`` merges into ``auxiliary`` (a
        key set to None is removed). Values must be strings (``other``'s: TOML strings, numbers
        or booleans)."""
        where = "Package.add_description"
        for key, value in (("author", author), ("license", license), ("version", version)):
            if value is not None and not isinstance(value, str):
                raise PackageError(where, f"{key} must be a string, not {value!r}")
        if other is not None:
            if not isinstance(other, dict) or not all(isinstance(k, str) for k in other):
                raise PackageError(where, f"other must be a dict with string keys, not {other!r}")
            bad = [k for k, v in other.items() if v is not None and not isinstance(v, str | int | float | bool)]
            if bad:
                raise PackageError(where, f"other[{bad[0]!r}] = {other[bad[0]]!r}: values are strings, numbers or "
                                          "booleans")
            auxiliary = {**self._description.get("auxiliary", {}), **other}
            self._description["auxiliary"] = {k: v for k, v in auxiliary.items() if v is not None}
        for key, value in (("author", author), ("license_url", license), ("version", version)):
            if value is not None:
                self._description[key] = value

    def add_function(self, function: HostFunction, target: Target, description: str = "") -> str:
        """Add a function given as kernel IR: its kernels, launched in order (a workspace clear,
        then a reduction, ...). It is checked by the IR verifier; it has no schedule, so
        ``schedc verify``/``emulate``/``bench`` (which compare with the nest's reference) refuse it."""
        where = f"Package.add_function({getattr(function, 'name', '...')})"
        if not isinstance(function, HostFunction):
            raise PackageError(where, f"expected a HostFunction, not a {type(function).__name__}")
        problems = wellformed.function_problems(function)
        if problems:
            raise PackageError(where, "the function's kernel IR is malformed: " + "; ".join(problems))
        if any(f.name == function.name for f in self._functions):
            raise PackageError(where, f"the package already has a function {function.name}")
        if self._target is not None and self._target.model != target.model:
            raise PackageError(where, f"the package targets {self._target.name}, this function {target.name}")
        self._target = target
        kernels = ", ".join(k.name for k in function.kernels)
        self._functions.append(_Added(None, description or f"launches {kernels}", function))
        return function.name

    def build(self, name: str, format: Format = Format.HAT_SOURCE, mode: Mode = Mode.RELEASE,
              platform: Platform = Platform.HOST, tolerance: float | None = None,
              output_dir: str | Path | None = None, config_file: object = None, _quiet: bool = True,
              fail_on_error: bool = False) -> Path | None:
        """Compile every function and write the package into ``output_dir`` (by default the
        current directory) as Accera does: ``<output_dir>/<name>.hat`` beside ``<name>.cu``,
        ``<name>.cubin``, ``lib<name>.so`` and ``<name>.schedc.json``; returns the .hat path.
        ``schedc build --output-dir D`` puts each package in its own folder ``D/<name>/``
        instead. Under ``schedc show`` nothing is written.

        Accera's other arguments: ``fail_on_error`` and ``_quiet`` change nothing (every error is
        raised; schedc prints only what it must say), ``config_file`` must be None (schedc reads
        no configuration file)."""
        where = f"Package.build({name!r})"
        if not isinstance(name, str) or not name.isascii() or not name.isidentifier():
            raise PackageError(where, "the package name must be a C identifier (ASCII letters, digits and _)")
        if (current := _SESSION.get()) is not None and current.collect is not None:  # schedc tune: built later
            current.collect.builds.append(BuildCall(self, name, dict(
                format=format, mode=mode, platform=platform, tolerance=tolerance, output_dir=output_dir,
                config_file=config_file)))
            return None
        if not self._functions:
            raise PackageError(where, "the package has no functions; call add() first")
        if not isinstance(format, Format) or not isinstance(mode, Mode):
            raise PackageError(where, "format must be Package.Format and mode Package.Mode")
        if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, int | float)
                                      or not math.isfinite(tolerance) or tolerance < 0):
            raise PackageError(where, f"tolerance={tolerance!r}: a relative error bound is a finite number >= 0 "
                                      "(None: by the types the functions compute in)")
        if Format.DYNAMIC_LIBRARY in format and Format.STATIC_LIBRARY in format:
            raise PackageError(where, f"format {format!r} asks for a dynamic and a static library; pick one")
        record = _IRRecord(Format.MLIR_VERBOSE in format) if format & (Format.MLIR | Format.MLIR_VERBOSE) else None
        functions = _compile(self._functions, _SESSION.get(), record)
        source = _emit(functions, _banner(name, self._target, self._functions))
        current = _SESSION.get()
        self._say_refused(current is not None and current.show_only)
        if current is not None and current.show_only:
            for f, fn in zip(self._functions, functions):
                if f.model is not None:
                    current.shown.append((name, f.model, fn, source))
            return None
        if config_file is not None:
            raise PackageError(where, f"config_file={config_file!r}: schedc reads no configuration file; pass None")
        if current is not None and current.output_dir is not None:
            directory = Path(current.output_dir) / name  # schedc build --output-dir: a folder per package
            if directory / f"{name}.hat" in current.built:
                raise PackageError(where, f"a package {name} is already built into {directory} in this run: with "
                                          "--output-dir each package goes to DIR/<name>/, so give the packages "
                                          "names of their own")
        else:
            directory = Path(output_dir) if output_dir is not None else Path.cwd()
        path = _write(name, directory, self._target, self._functions, functions, source,
                      format, mode, tolerance, self._description)
        if record is not None:
            record.write(path.parent / f"{name}.ir", format)
        if current is not None:
            current.built.append(path)
        return path


def _compile(functions: list[_Added], current: BuildSession | None,
             record: _IRRecord | None = None) -> list[HostFunction]:
    """Each function's kernels: compiled from its model (observed and verified as the build
    session asks, recorded for MLIR formats), or as given."""
    observers = [o for o in (current.observe if current is not None else None, record) if o is not None]

    def every(step, ir) -> None:
        for o in observers:
            o(step, ir)

    observe = every if observers else None
    if current is not None and current.verify_ir:
        with verifying():
            return [_function(f, observe, reuse=False) for f in functions]
    return [_function(f, observe) for f in functions]


def _function(added: _Added, observe: Callable | None, reuse: bool = True) -> HostFunction:
    """The function's kernels: as given, as compiled when it was added, or compiled again where
    the build observes or verifies the passes (``schedc show --after``, ``--verify-ir``, MLIR)."""
    if added.function is not None:
        return added.function
    if added.compiled is not None and observe is None and reuse:
        return added.compiled
    try:
        return compile_function(added.model, observe)
    except SchedcError as e:  # accepted when added: only a pass verified now can refuse it
        raise _located(e, added.name) from None


def _lowered(model: Model, located: bool) -> HostFunction:
    """The function's kernels, compiled when it is added (the IR verified after every pass where
    the build session asks for it), so that a plan ``Package.add`` accepts builds. ``located``:
    a refusal names the function (``schedc check`` and ``show`` name it above the error)."""
    current = _SESSION.get()
    try:
        with verifying() if current is not None and current.verify_ir else contextlib.nullcontext():
            return compile_function(model)
    except SchedcError as e:
        if not located or (current is not None and current.show_only):
            raise
        raise _located(e, model.function) from None


class GridFunctions(list):
    """What ``Package.add`` returns for a grid: the functions of the points the checks accepted
    (a list of ``Function``), with ``.refused``, the other points and their errors, and
    ``.points``, how many points the grid has."""

    def __init__(self, functions: list[Function], base_name: str, points: int,
                 refused: tuple[refusals.Refusal, ...]) -> None:
        super().__init__(functions)
        self.base_name = base_name
        self.points = points
        self.refused = refused

    def summary(self, verb: str = "built") -> str:
        """``mm: 3 of 4 points built; 1 refused:`` and a line per cause."""
        return refusals.summary(self.base_name, self.points, self.refused, verb)


def _nothing_accepted(where: str, points: int, refused: list[refusals.Refusal]) -> PackageError:
    """The error of a grid whose every point is refused: the causes counted, the first in full
    (its model and loops kept, for ``schedc check`` to mark)."""
    first = refused[0]
    message = str(first.error).removeprefix(f"{where} at ")  # the point's values, then where and what
    counted = "\n".join(refusals.causes(refused))
    error = PackageError(where, f"none of the grid's {points} point(s) is accepted; the first, at {message}\n"
                                f"{counted}", first.error.detail, first.error.loops)
    error.model = first.error.model
    return error


def _check_point(where: str, point: object) -> None:
    if not isinstance(point, dict) or not all(isinstance(p, Parameter) and not p.op for p in point):
        raise PackageError(where, "parameters must be a dict of parameter: value (or a list of them), with "
                                  "parameters made by create_parameters()")


def _located(e: SchedcError, prefix: str) -> SchedcError:
    """``e`` (its type and loops kept) with ``prefix`` before where it happened."""
    e.where = f"{prefix}: {e.where}" if e.where else prefix
    e.args = (f"{e.where}: {e.what}",)
    return e


class _IRRecord:
    """The kernel IR of each function after every lowering pass (verbose) or after the last,
    for the MLIR formats: schedc's nearest honest thing to Accera's MLIR dumps."""

    said = False  # the build says once per process what it writes instead of MLIR

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.texts: dict[str, list[tuple[str, str]]] = {}

    def __call__(self, step, ir) -> None:
        from ..show import attached

        if not self.verbose and not hasattr(ir, "kernel"):  # a function's own pass (split, link): the kernel's last
            return

        text = f"== {ir.model.function} after {step.name} ({step.summary})\n{attached(ir.attached(step.shows))}\n"
        passes = self.texts.setdefault(ir.model.function, [])
        if self.verbose:
            passes.append((step.name, text))
        else:
            passes[:] = [(step.name, text)]

    def write(self, directory: Path, format: Format) -> None:
        made(directory, "Package.build: output_dir")
        for function, passes in self.texts.items():
            for n, (step, text) in enumerate(passes):
                name = f"{function}.{n}_{step}.txt" if self.verbose else f"{function}.txt"
                (directory / name).write_text(text)
        if not _IRRecord.said:
            _IRRecord.said = True
            what = "after every lowering pass" if self.verbose else "of each function"
            print(f"schedc: Package.Format {format!r} asks for MLIR, which schedc does not make; the kernel IR "
                  f"{what} is in {directory}", file=sys.stderr)


def _emit(functions: list[HostFunction], banner: str) -> str:
    """The CUDA source; a failure of the backend on an accepted plan is a bug in schedc."""
    try:
        return emit_source(functions, banner)
    except SchedcError:
        raise
    except Exception as error:  # noqa: BLE001 - every other failure is ours
        raise InternalError("CUDA backend", f"{type(error).__name__}: {error}") from error


def _check_args(where: str, args: tuple) -> None:
    for n, array in enumerate(args):
        if isinstance(array, Dimension):
            continue
        if not isinstance(array, Array):
            raise PackageError(where, f"args[{n}] is a {type(array).__name__}, not an Array (or a run-time size)")
        if array.role in (Role.CONST, Role.TEMP):
            raise PackageError(
                where, f"args[{n}] is Role.{array.role.name}; such arrays belong to the package, not the caller"
            )
    if len({id(a) for a in args}) != len(args):
        twice = next(a for a in args if sum(b is a for b in args) > 1)
        at = " and ".join(f"args[{n}]" for n, b in enumerate(args) if b is twice)
        name = getattr(twice, "name", None)
        kind = "run-time size" if isinstance(twice, Dimension) else "array"
        raise PackageError(where, f"{at} are the same {kind}{f' {name}' if isinstance(name, str) and name else ''}: "
                                  "each appears once in args")


def name_arrays(where: str, plan: Plan, args: tuple[Array, ...], function: str = "") -> None:
    """Name the function's arrays and loops after the script's variables (``schedc.frontend.names``):
    an explicit ``Array(name=...)`` wins; without a usable variable, args are named by position
    (A, B, C, ...), CONST and TEMP arrays const0, temp0, ..., loops as the schedule named them.
    Names are unique among the function's arrays and loops and differ from ``function``."""
    schedule = plan.schedule
    used = schedule.nest.arrays()
    args = tuple(a for a in args if not isinstance(a, Dimension))  # a run-time size is named by its variable
    arrays = [*args, *(u for u in used if all(u is not a for a in args))]
    names.name_function(arrays, args, schedule.order, schedule.nest.logic, function)
    indices = {i.name for i in schedule.order}
    for array in arrays:
        if array.name in indices:
            raise PackageError(where, f"array name {array.name} is also an index name")
    named = [a.name for a in arrays if a.name is not None]  # None: not in args, freeze says so
    if len(set(named)) != len(named):
        raise PackageError(where, f"two arrays share a name: {sorted(named)}")


def _banner(name: str, target: Target, functions: list[_Added]) -> str:
    lines = [f"// {name}.cu: generated by schedc {__version__} for {target.name} ({target.arch})."]
    for f in functions:
        lines.append(f"// {f.name}: {f.description}")
    return "\n".join(lines)


def alignments(kernel: Kernel) -> dict[str, int]:
    """Bytes each parameter's base address must be aligned to: its element size, the family's
    tile alignment for tensor-core tiles (wmma: 32), a vector's size for vectorized block copies
    and a lane's vectors of tile elements, 16 for arrays a tensor map describes."""
    sizes = {b.name: b.dtype.size for b in kernel.params}
    need = dict(sizes)
    for v in kernel.values:
        if isinstance(v, StructParam):  # a tensor map's global address
            need[v.spec.array] = max(need[v.spec.array], tma.GLOBAL_ALIGN)
    families = {s.name: FAMILIES[s.family] for s in walk_statements(kernel.body) if isinstance(s, Fragment)}
    for s in walk_statements(kernel.body):
        tile = families.get(tile_of(s))
        for name in buffers_in_vectors(s):
            if name in need:
                need[name] = max(need[name], (tile.operand_align if tile else 0) or s.vector * sizes[name])
    return need


def function_alignments(function: HostFunction) -> dict[str, int]:
    """``alignments`` of a function's arrays: the largest any of its kernels needs."""
    need: dict[str, int] = {}
    for kernel in function.kernels:
        for array, n in alignments(kernel).items():
            need[array] = max(need.get(array, 1), n)
    return need


def _ir_entry(added: _Added, function: HostFunction) -> dict:
    """A function in the .schedc.json: its model (null for kernel IR) and its one kernel, as
    schedc always wrote it, or the whole function where it is more than one kernel's."""
    model = to_plain(added.model) if added.model is not None else None
    if function == HostFunction.single(function.kernels[0]):
        return {"model": model, "kernel": to_plain(function.kernels[0])}
    return {"model": model, "function": to_plain(function)}


@dataclass(frozen=True)
class Emitted:
    """A package's functions compiled to kernel IR and its CUDA source, not yet written."""

    name: str
    target: Target
    added: tuple[_Added, ...]
    functions: tuple[HostFunction, ...]
    source: str


def emit_package(package: Package, name: str) -> Emitted:
    """``package``'s functions (grid points: compiled when added) and its source, named ``name``."""
    functions = _compile(package._functions, None)
    source = _emit(functions, _banner(name, package._target, package._functions))
    return Emitted(name, package._target, tuple(package._functions), tuple(functions), source)


def write_emitted(emitted: Emitted, directory: Path) -> Path:
    """Write an emitted package into ``directory`` without a C library (NVRTC only): the .hat,
    .cu, .cubin and .schedc.json that ``schedc.load`` reads. Returns the .hat path."""
    return _write(emitted.name, directory, emitted.target, emitted.added, emitted.functions, emitted.source,
                  Format.HAT_SOURCE, Mode.RELEASE, None, library=False)


def made(directory: Path, where: str) -> Path:
    """``directory``, made with its parents where missing; a PackageError naming it where it
    cannot be (a file in the way, no permission)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PackageError(f"{where} {str(directory)!r}",
                           f"cannot make the folder: {error.strerror or error}"
                           + (f" ({error.filename})" if error.filename and str(error.filename) != str(directory)
                              else "")) from None
    return directory


def _write(name, directory: Path, target: Target, added, functions, source, format, mode, tolerance,
           description: dict | None = None, library: bool = True) -> Path:
    """The package's files, written into a folder of this build's own beside ``directory``'s and
    moved in once every one is made (a library an earlier build left, which this one does not make,
    removed): a build that fails (NVRTC, nvcc, the disk) leaves the package as it was, never a new
    kernel beside an old description."""
    made(directory, f"Package.build({name!r}): output_dir")
    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".building", dir=directory))
        _write_files(name, staging, target, added, functions, source, format, mode, tolerance, description,
                     library)
        produced = {f.name for f in staging.iterdir()}
        for made_file in sorted(staging.iterdir()):
            os.replace(made_file, directory / made_file.name)
        for stale in (f"lib{name}.so", f"lib{name}.a"):
            if stale not in produced:
                (directory / stale).unlink(missing_ok=True)
    except OSError as e:
        raise PackageError(f"Package.build({name!r})", f"cannot write into {directory}: {e.strerror or e}") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return directory / f"{name}.hat"


def _write_files(name, directory: Path, target: Target, added, functions, source, format, mode, tolerance,
                 description: dict | None, library: bool) -> Path:
    debug = mode is Mode.DEBUG
    arch = compilers.arch_for(target.arch, [k for f in functions for k in f.kernels])
    compiled = compilers.nvrtc_compile(source, name, arch, debug=debug)
    (directory / f"{name}.cu").write_text(source)
    (directory / f"{name}.cubin").write_bytes(compiled.cubin)
    library = _library(name, directory, arch, format, debug) if library else ""
    ir = {
        "schedc": __version__,
        "tolerance": tolerance,
        "functions": {a.name: _ir_entry(a, f) for a, f in zip(added, functions)},
    }
    (directory / f"{name}.schedc.json").write_text(json.dumps(ir, sort_keys=True, indent=1) + "\n")
    info = hat.BuildInfo(name, target.name, arch, target.sm_count, compiled.compiler,
                         compiled.flags, library, __version__, dict(description or {}))
    entries = [hat.HatFunction(f, a.description, function_alignments(f), a.parameters, a.tuning)
               for a, f in zip(added, functions)]
    path = directory / f"{name}.hat"
    path.write_text(hat.render(entries, info))
    return path


def _library(name: str, directory: Path, arch: str, format: Format, debug: bool) -> str:
    static = Format.STATIC_LIBRARY in format
    filename = f"lib{name}.a" if static else f"lib{name}.so"
    if compilers.find_nvcc() is None:
        if static or Format.DYNAMIC_LIBRARY in format:
            raise PackageError(f"Package.build({name!r}, format={format.name})", "needs nvcc, which is not installed")
        print(f"schedc: nvcc not found; {name} has no {filename} (the .cubin and .cu are complete)",
              file=sys.stderr)
        return ""
    compilers.nvcc_library(directory / f"{name}.cu", directory / filename, arch, static, debug)
    return filename
