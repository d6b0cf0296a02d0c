"""What ``schedc tune`` searches: a script run once with its grids recorded and nothing compiled
(``Package.add(..., parameters=grid)`` and ``Package.build`` under a collecting session), each
grid's points with the problem shapes asked for (``--shapes``), and a key of the script's text.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import TuneError
from ..frontend.dimension import Dimension
from ..frontend.parameters import Parameter, ParameterValue, parameters_in, show_value, typed_value
from ..package.build import BuildCall, Collected, GridAdd, run_script, session

Shape = dict[str, int]  # problem-size parameters by name: {"M": 4096, "N": 4096, "K": 4096}


@dataclass(frozen=True)
class Source:
    """A tuned script as a worker process receives it: its path, its text (run from a copy where
    the path holds another text, e.g. on another host) and the shapes asked for."""

    path: str
    text: str
    shapes: tuple[tuple[tuple[str, int], ...], ...] = ()
    functions: tuple[str, ...] = ()  # the grids tuned, by base name (all when empty)
    sizes: tuple[tuple[tuple[str, int], ...], ...] = ()  # run-time sizes to time at: one bucket each
    modules: tuple[tuple[str, str], ...] = ()  # the local modules it imports (path beside it, text), for other hosts

    @staticmethod
    def of(path: str | Path, shapes: list[Shape] | None = None, functions: tuple[str, ...] = (),
           sizes: list[Shape] | None = None) -> Source:
        file = Path(path)
        if not file.is_file():
            raise TuneError(str(path), "no such script")
        return Source(str(file.resolve()), file.read_text(), tuple(tuple(s.items()) for s in shapes or ()),
                      tuple(functions), tuple(tuple(s.items()) for s in sizes or ()))


@dataclass(frozen=True)
class Grid:
    """One tuned ``Package.add``: its points (with the asked shapes), the parameters that set the
    arrays' shapes, and the function name the winner takes."""

    add: GridAdd
    points: tuple[dict[Parameter, object], ...]
    shape_parameters: tuple[Parameter, ...]
    sizes: tuple[tuple[tuple[str, int], ...], ...] = ()  # each point's run-time sizes (--sizes), or none

    @property
    def base_name(self) -> str:
        return self.add.base_name

    def values(self, index: int) -> dict[str, ParameterValue]:
        """The point's values by parameter name, as the .hat keeps them."""
        return {p.name: typed_value(v) for p, v in self.points[index].items()}

    def key(self, index: int) -> str:
        """The point as text, the same in every run of the script (the database's key)."""
        return json.dumps([[p.name, show_value(v)] for p, v in self.points[index].items()]
                          + [[name, value] for name, value in self.run_sizes(index).items()])

    def run_sizes(self, index: int) -> dict[str, int]:
        """The run-time sizes the point is timed at ({} for a function without any, or default ones)."""
        return dict(self.sizes[index]) if self.sizes else {}

    def shape(self, index: int) -> str:
        """The point's problem shape: its shape parameters' values and its run-time sizes
        (``M=4096, N=4096``), or ""."""
        point = self.points[index]
        return ", ".join([*(f"{p.name}={show_value(point[p])}" for p in self.shape_parameters if p in point),
                          *(f"{name}={value}" for name, value in self.run_sizes(index).items())])

    def searched(self, index: int) -> dict[str, ParameterValue]:
        """The point's values of the parameters searched (all but the shape's)."""
        return {p.name: typed_value(v) for p, v in self.points[index].items() if p not in self.shape_parameters}


@dataclass(frozen=True)
class Script:
    """A script run by ``schedc tune``: its grids, its builds and a key of its text, of the local
    modules it imported and of schedc's own source (a point checked under one key is checked)."""

    source: Source
    grids: tuple[Grid, ...]
    builds: tuple[BuildCall, ...]
    key: str
    modules: tuple[tuple[str, str], ...] = ()  # the modules beside the script it imported: (relative path, text)


def run(source: Source) -> Script:
    """Run the script once with its grids recorded; the shapes asked for replace the grids'
    shape parameters (a TuneError names a shape parameter no grid has)."""
    collected = Collected()
    path = Path(source.path)
    if not path.is_file() or path.read_text() != source.text:  # another host: run a copy of the text
        path = _copy(source)
    with session(collect=collected):
        run_script(path)
    if not collected.grids:
        raise TuneError(source.path, "adds no parameter grid: schedc tune searches the points of "
                                     "Package.add(..., parameters=acc.create_parameter_grid({...}))")
    adds = collected.grids
    if source.functions:
        names = [add.base_name for add in adds]
        for name in source.functions:
            if name not in names:
                raise TuneError(f"--function {name}", f"{source.path} has no grid of that name (its grids: "
                                                      f"{', '.join(names)})")
        adds = [add for add in adds if add.base_name in source.functions]
    shapes = [dict(s) for s in source.shapes]
    grids = tuple(_sized(_grid(add, shapes), [dict(s) for s in source.sizes]) for add in adds)
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    local = sorted(f for f in files if _local(f, path.parent))  # every module beside the script, however imported
    modules = tuple((str(Path(f).resolve().relative_to(path.parent.resolve())), Path(f).read_text())
                    for f in local if Path(f).resolve() != path.resolve())
    key = _digest([source.text, source.shapes, source.sizes, source.functions, [text for _, text in modules],
                   schedc_digest()])
    return Script(source, grids, tuple(collected.builds), key, modules)


_RUN: dict[Source, Script] = {}  # this process's runs of scripts (a build process inherits the tuner's)


def script(source: Source, fresh: bool = False) -> Script:
    """``run(source)`` once per process (a worker checks many points of one script); ``fresh``:
    run it again (the tuner, whose packages receive the winners, starts from a new run)."""
    if fresh or source not in _RUN:
        _RUN[source] = run(source)
    return _RUN[source]


def _grid(add: GridAdd, shapes: list[Shape]) -> Grid:
    every = parameters_in(add.source, add.args)
    named = {p.name: p for p in every}
    shape_parameters = parameters_in(*add.args)
    for shape in shapes:
        for name in shape:
            if name not in named:
                raise TuneError(f"--shapes {_shown(shape)}", f"{add.base_name} has no parameter {name} (its "
                                f"parameters: {', '.join(sorted(named)) or 'none'})")
    for shape in shapes:
        shape_parameters += [named[n] for n in shape if all(named[n] is not p for p in shape_parameters)]
    points = list(add.points)
    if shapes:
        points = [{**point, **{named[n]: v for n, v in shape.items()}} for shape in shapes for point in add.points]
    unique: dict[str, dict] = {}
    for point in points:
        unique.setdefault(json.dumps([[p.name, show_value(v)] for p, v in point.items()]), point)
    return Grid(add, tuple(unique.values()), tuple(shape_parameters))


def _sized(grid: Grid, sizes: list[Shape]) -> Grid:
    """``grid`` with each point once per run-time sizes asked for (a bucket each); a TuneError
    names a size the function does not have."""
    names = [a.name for a in grid.add.args if isinstance(a, Dimension)]
    if names and not sizes:
        example = ",".join(f"{n}=4096" for n in names)
        raise TuneError(grid.base_name, f"takes run-time sizes ({', '.join(names)}): give the sizes to time it at, "
                                        f"--sizes {example} (repeat it for buckets of sizes, a winner each)")
    if not sizes:
        return grid
    for bucket in sizes:
        unknown = [n for n in bucket if n not in names]
        if unknown or set(bucket) != set(names):
            has = f"its run-time sizes: {', '.join(names)}" if names else "it has no run-time sizes (create_dimensions)"
            raise TuneError(f"--sizes {_shown(bucket)}", f"give each run-time size of {grid.base_name} a value ({has})")
    points = tuple(p for _ in sizes for p in grid.points)
    each = tuple(tuple((n, bucket[n]) for n in names) for bucket in sizes for _ in grid.points)
    return dataclasses.replace(grid, points=points, sizes=each)


def parse_shape(text: str) -> Shape:
    """``M=4096,N=4096`` as a shape (a TuneError for anything else)."""
    shape: Shape = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if not name.strip().isidentifier() or not value.strip().lstrip("-").isdigit():
            raise TuneError(f"--shapes {text}", f"{part!r} is not NAME=INTEGER (e.g. M=4096,N=4096,K=4096)")
        shape[name.strip()] = int(value)
    if not shape:
        raise TuneError(f"--shapes {text!r}", "give the shape's parameters as NAME=INTEGER, e.g. M=4096,N=4096")
    return shape


def _shown(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _copy(source: Source) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="schedc-tune-"))
    path = folder / Path(source.path).name
    path.write_text(source.text)
    for relative, text in source.modules:  # the helpers it imports, where it imports them from
        module = folder / relative
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(text)
    return path


def _local(file: str | None, folder: Path) -> bool:
    """A module file beside the script (or below its folder): part of what the key covers."""
    if not file or not file.endswith(".py"):
        return False
    try:
        Path(file).resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


@functools.cache
def schedc_digest() -> str:
    """A digest of schedc's version and every file of its source (a rerun after a change of the
    compiler checks and times its points again)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(__version__.encode())
    for file in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cuh")):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()
