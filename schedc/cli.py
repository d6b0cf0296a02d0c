"""The ``schedc`` command line: build, check, show, emulate, verify, bench, tune."""

from __future__ import annotations

import csv
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import __version__
from .codegen.cuda import emit_source, without_runtime
from .errors import SchedcError
from .lower import pass_names

if TYPE_CHECKING:
    from .codegen.emulate import Block
    from .ir.kernel import HostFunction
    from .ir.model import Model
    from .package.build import BuildSession
    from .package.loader import Function
    from .verify import Report


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _run_script(script: str, show_only: bool, output_dir: str | None = None, **options):
    from .package.build import run_script, session

    path = Path(script)
    if not path.is_file():
        _fail(f"{script}: no such script")
    try:
        with session(show_only=show_only, output_dir=output_dir, **options) as built:
            run_script(path)
    except SchedcError as e:
        _fail(str(e) + (f"\n{e.detail}" if e.detail else ""))
    except Exception as e:  # noqa: BLE001 (the script's own error: its frames alone)
        _script_failed(script, e)
    return built


def _script_failed(script: str, error: Exception) -> None:
    """An exception the script raised itself (its innermost frame outside schedc): its traceback
    without the frames of schedc, click and runpy that ran it. One raised inside schedc (a bug)
    keeps its whole traceback."""
    import traceback

    runners = (Path(__file__).resolve().parent, Path(click.__file__).resolve().parent)  # schedc's and click's
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if not any(r in Path(f.filename).resolve().parents for r in runners)
            and not f.filename.endswith(("runpy.py", "<frozen runpy>"))]
    if not frames or not mine or frames[-1] is not mine[-1]:
        raise error
    text = "".join(traceback.format_list(mine)) + "".join(traceback.format_exception_only(error))
    _fail(f"{script} raised {type(error).__name__}:\nTraceback (the script's frames):\n{text.rstrip()}")


def _load(package: str):
    from .package.loader import load

    try:
        return load(package)
    except SchedcError as e:
        _fail(str(e))


def _functions(pkg, name: str | None):
    if name is None:
        return list(pkg.functions.values())
    if name not in pkg.functions:
        _fail(f"{pkg.name} has no function {name}; it has {', '.join(pkg.functions)}")
    return [pkg.functions[name]]


def _checkable(fn) -> None:
    """Refuse a function the reference cannot check (given as kernel IR, or taking scalars)."""
    from .verify import checkable

    try:
        checkable(fn.name, fn.model, fn.function)
    except SchedcError as e:
        _fail(str(e))


def _need_gpu(command: str) -> None:
    from .package import driver

    if driver.device_count() == 0:
        _fail(f"schedc {command} needs an NVIDIA GPU; none is available (try `schedc emulate`)")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="schedc")
def main() -> None:
    """schedc: compile loop-schedule scripts into verified CUDA kernels in HAT packages."""


_VERIFY_IR = click.option("--verify-ir", is_flag=True,
                          help="Check the kernel IR after every lowering pass (an InternalError names the pass).")


@main.command()
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--output-dir", default=None, type=click.Path(file_okay=False),
              help="Write each package into its own folder DIR/<name>/ instead of the script's output_dir.")
@_VERIFY_IR
def build(script: str, output_dir: str | None, verify_ir: bool) -> None:
    """Run SCRIPT, which builds its packages (Package.build), and list the files written."""
    built = _run_script(script, show_only=False, output_dir=output_dir, verify_ir=verify_ir)
    if not built.built:
        _fail(f"{script} built no package (does it call Package.build?)")
    for hat_path in built.built:
        name = hat_path.stem
        files = sorted(p.name for p in hat_path.parent.iterdir() if p.name.split(".")[0] in (name, f"lib{name}"))
        click.echo(f"built {hat_path}  ({', '.join(files)})")


@main.command()
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--function", "function", default=None,
              help="Show only this function (with --after: each of its kernels, e.g. a split-K's partial and combine).")
@click.option("--no-source", is_flag=True, help="Leave out the CUDA source.")
@click.option("--after", "after", default=None, type=click.Choice(pass_names()),
              help="Also print what this lowering pass attached (the kernel IR after lower and simplify), for "
                   "each kernel of each function.")
@_VERIFY_IR
def show(script: str, function: str | None, no_source: bool, after: str | None, verify_ir: bool) -> None:
    """Show SCRIPT's functions: the loop nest after scheduling, the launch and the CUDA source,
    without writing any file."""
    from . import show as views

    def observe(step, ir) -> None:
        if step.name == after and (function is None or ir.model.function.split("__")[0] == function):
            click.echo(f"== {ir.model.function} after {step.name} ({step.summary})")
            click.echo(views.attached(ir.attached(step.shows)) + "\n")

    built = _run_script(script, show_only=True, observe=observe if after else None, verify_ir=verify_ir)
    shown = [s for s in built.shown if function is None or s[1].function == function]
    shown += [(package, model, fn, None) for package, model, fn in _unbuilt(built, function, observe if after else None,
                                                                            verify_ir)]
    if not shown:
        _fail(f"{script} adds no function{' ' + function if function else ''} to a package")
    sources = {}
    for package, model, fn, source in shown:
        click.echo(f"== {package}.{model.function} for {model.gpu.name} (sm_{model.gpu.sm})")
        click.echo(views.loop_nest(model))
        click.echo(views.launches(model, fn) + "\n")
        if source is None or function is not None:  # unbuilt, or the one function asked for: its own kernels
            package, source = f"{package}.{model.function}", emit_source([fn], f"// {model.function}")
        sources[package] = source
    if not no_source:
        for package, source in sources.items():
            click.echo(f"== {package}.cu\n{without_runtime(source)}")


@main.command()
@click.argument("script", type=click.Path(dir_okay=False))
@_VERIFY_IR
def check(script: str, verify_ir: bool) -> None:
    """Check SCRIPT's plans without building: every function it adds to a package (built or
    not), with the scheduled loop nest, launch, footprints of each array inside each loop,
    resources and occupancy, advice (uncoalesced accesses, bank conflicts, local memory, low
    occupancy, each with the plan change that removes it), and every error, with the nest marked."""
    from . import show as views
    from .package.build import run_script, session

    path = Path(script)
    if not path.is_file():
        _fail(f"{script}: no such script")
    try:
        with session(show_only=True, verify_ir=verify_ir) as built:
            run_script(path)
    except SchedcError as e:
        _check_failed(e)
    except Exception as e:  # noqa: BLE001 (the script's own error: its frames alone)
        _script_failed(script, e)
    checked = [(package, model, function) for package, model, function, _ in built.shown] + _unbuilt(
        built, verify_ir=verify_ir)
    if not checked:
        _fail(f"{script} adds no function to a package")
    for package, model, function in checked:
        click.echo(views.report(package, model, function))
    click.echo("checks passed: launch limits, bounds, races, loop order" +
               (", tensorization" if any(m.tensorize for _, m, _ in checked) else ""))


_UNBUILT = "(unbuilt)"  # the package name shown for functions of a package never built


def _unbuilt(built: BuildSession, function: str | None = None, observe=None,
             verify_ir: bool = False) -> list[tuple[str, Model, HostFunction]]:
    """Functions the script added to a package but never built (only ``function``, if named),
    compiled (and so checked) here, each pass ``observe``d and the IR verified as asked."""
    from .lower import compile_function, verifying

    shown = [model for _, model, _, _ in built.shown]
    models = [m for m in built.added if all(m is not s for s in shown) and function in (None, m.function)]
    if models:
        names = ", ".join(m.function for m in models)
        click.echo(f"note: {names}: added to a package the script never builds (Package.build); "
                   "checked as added")
    try:
        with verifying(verify_ir):
            return [(_UNBUILT, m, compile_function(m, observe)) for m in models]
    except SchedcError as e:
        _check_failed(e)


def _check_failed(e: SchedcError) -> None:
    """Print the nest an error is about, its loops marked, and exit 1 with the error."""
    from . import show as views

    if e.model is not None:
        click.echo(f"== {e.model.function} for {e.model.gpu.name}")
        click.echo(views.loop_nest(e.model, marked=e.loops))
    _fail(str(e))


class _Sizes(click.ParamType):
    """--sizes: values of run-time sizes, ``M=100,N=7``."""

    name = "NAME=N,..."

    def convert(self, value, param, ctx) -> dict[str, int]:
        if isinstance(value, dict):
            return value
        out = {}
        for item in str(value).split(","):
            name, _, number = item.partition("=")
            if not name.strip().isidentifier() or not number.strip().isdigit() or int(number) < 1:
                self.fail(f"{item!r} is not NAME=N with N a positive integer (as in M=100,N=7)", param, ctx)
            if name.strip() in out:
                self.fail(f"{name.strip()} is given twice ({name.strip()}={out[name.strip()]} and {item.strip()})",
                          param, ctx)
            out[name.strip()] = int(number)
        return out


_SIZES = click.option("--sizes", type=_Sizes(), default=None,
                      help="Values of the functions' run-time sizes (create_dimensions), as M=100,N=7. Default: "
                           "two whole tiles and one element more of each.")


def _run_options(command):
    """--function, --seed, --tolerance and --sizes, shared by emulate and verify."""
    command = _SIZES(command)
    command = click.option("--tolerance", type=click.FloatRange(min=0.0), default=None,
                           help="Relative error allowed, at least 0 (default: by type).")(command)
    command = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Random input seed.")(command)
    return click.option("--function", "function", default=None, help="Only this function.")(command)


def _report(title: str, run) -> bool:
    """Print one function's comparison; whether it passed."""
    try:
        reports = run()
    except SchedcError as e:
        _fail(str(e))
    click.echo(title)
    for report in reports:
        click.echo(f"  {report}")
    return all(r.passed for r in reports)


class _BlockCount(click.ParamType):
    """--blocks: a positive number of blocks, or ``all``."""

    name = "N|all"

    def convert(self, value, param, ctx) -> int | str:
        if isinstance(value, int) and value >= 1 or value == "all":
            return value
        text = str(value).strip().lower()
        if text == "all":
            return text
        if not text.isdigit() or int(text) < 1:
            self.fail(f"{value!r} is neither a positive number of blocks nor 'all'", param, ctx)
        return int(text)


@dataclass(frozen=True)
class _Blocks:
    """The blocks to emulate (None: every block), how many of how many, and why those."""

    blocks: list[Block] | None
    count: int
    total: int
    why: str


def _choose_blocks(grid: tuple[int, int, int], wanted: int | str | None, persistent: bool = False) -> _Blocks:
    from .codegen.emulate import default_blocks, grid_corners, sample_blocks

    total = grid[0] * grid[1] * grid[2]
    if wanted == "all":
        return _Blocks(None, total, total, "--blocks all")
    if isinstance(wanted, int):
        if wanted >= total:
            return _Blocks(None, total, total, f"--blocks {wanted}, but the grid has only {_plural(total, 'block')}")
        return _Blocks(sample_blocks(grid, wanted), wanted, total,
                       "spread over the grid, first and last included; --blocks all for every block")
    chosen = default_blocks(grid)
    if len(chosen) == total:
        return _Blocks(None, total, total, "a grid this small is emulated whole")
    corners = len(grid_corners(grid))
    if persistent:  # each resident block loops over tiles all over the plan's grid
        return _Blocks(chosen, len(chosen), total, "the first and last resident block and some between, each with "
                                                   "every tile it computes; --blocks N for another sample, --blocks "
                                                   "all for every block")
    return _Blocks(chosen, len(chosen), total,
                   f"the grid's {corners} corners, where partial tiles lie, and {len(chosen) - corners} spread "
                   "over it; --blocks N for another sample, --blocks all for every block")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class _Progress:
    """Blocks emulated so far, on stderr: one line redrawn in place on a terminal; elsewhere a
    line for the first and last block and at most one every few seconds between."""

    def __init__(self, name: str) -> None:
        self.name, self.start, self.shown, self.open = name, time.monotonic(), 0.0, False
        self.terminal = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done not in (1, total) and now - self.shown < (0.2 if self.terminal else 5.0):
            return
        self.shown = now
        elapsed = now - self.start
        left = elapsed / done * (total - done)
        line = f"  {self.name}: {done}/{_plural(total, 'block')} emulated, {elapsed:.1f} s"
        line += f", about {left:.0f} s left" if left >= 1 else ""
        if self.terminal:
            click.echo(f"\r{line}\x1b[K", nl=done == total, err=True)
            self.open = done < total
        else:
            click.echo(line, err=True)

    def close(self) -> None:
        """End a line left open on the terminal (when emulation stops early)."""
        if self.open:
            click.echo("", err=True)
            self.open = False


def _emulate_one(model, function, chosen: _Blocks, seed: int, tolerance: float | None) -> list[Report]:
    from .verify import emulate_function

    progress = _Progress(function.name)
    try:
        return emulate_function(model, function, chosen.blocks, seed, tolerance, progress)
    finally:
        progress.close()


def _check_sizes(functions: list[Function], sizes: dict[str, int] | None) -> None:
    """Every size ``--sizes`` names is a run-time size of one of ``functions``."""
    known = {n for fn in functions if fn.model is not None for n in fn.model.size_names}
    for name in sorted(set(sizes or {}) - known):
        _fail(f"--sizes {name}={sizes[name]}: no function here has a run-time size {name} "
              f"(theirs: {', '.join(sorted(known)) or 'none'})")


def _at_sizes(fn: Function, sizes: dict[str, int] | None):
    """The function's Model and kernels at ``sizes`` (their defaults where None), and how the
    report names them (`` at M = 33``)."""
    from .verify import at_sizes, resolved_sizes

    own = {k: v for k, v in (sizes or {}).items() if fn.model is not None and k in fn.model.size_names}
    try:
        values = resolved_sizes(fn.model, fn.name, own)
        model, function = at_sizes(fn.model, fn.function, values)
    except SchedcError as e:
        _fail(str(e))
    shown = " at " + ", ".join(f"{k} = {v}" for k, v in values.items()) if values else ""
    return model, function, values, shown


@main.command()
@click.argument("package", type=click.Path())
@click.option("--blocks", type=_BlockCount(), default=None, metavar="N|all",
              help="Emulate N blocks spread over the grid (first and last included), or all of them. "
                   "Default: the grid's corners, where partial tiles lie, and a few spread over it "
                   "(at least 8 blocks, or every block of a smaller grid).")
@_run_options
def emulate(package: str, blocks: int | str | None, function: str | None, seed: int, tolerance, sizes) -> None:
    """Run PACKAGE's kernels on the CPU emulator and compare the emulated blocks' outputs with the
    float64 reference; print which blocks and, on stderr, the progress."""
    pkg = _load(package)
    ok = True
    _check_sizes(_functions(pkg, function), sizes)
    for fn in _functions(pkg, function):
        _checkable(fn)
        model, kernels, _, shown = _at_sizes(fn, sizes)
        kernel = kernels.kernels[-1]
        chosen = _choose_blocks(kernel.grid, blocks, kernel.persistent is not None)
        if model is not None and not model.split_deterministic and model.split_sums and chosen.blocks is not None:
            from .verify import every_part

            parts = every_part(kernel, chosen.blocks)  # a tile's split-K parts add into it: all of them
            count = chosen.total if parts is None else len(parts)
            chosen = _Blocks(parts, count, chosen.total, chosen.why + "; with every split-K part of their tiles")
        runs = _kernel_runs(kernels, chosen)
        _echo_choice(fn.name + shown, chosen, kernel, runs)
        limit = pkg.tolerance if tolerance is None else tolerance
        ok &= _report(f"emulated {fn.name}{shown} ({_blocks_text(runs, counted=True)})",
                      lambda m=model, f=kernels, chosen=chosen, limit=limit: _emulate_one(m, f, chosen, seed, limit))
    sys.exit(0 if ok else 1)


@dataclass(frozen=True)
class _KernelRun:
    """The blocks emulated of one kernel of a function: ``count`` of the ``total`` of its grid;
    ``part``: the kernel's part of the function (``partial``, ``combine``: ``schedc.lower.split``),
    empty for a function of one kernel."""

    part: str
    count: int
    total: int


def _kernel_runs(function: HostFunction, chosen: _Blocks) -> list[_KernelRun]:
    """Per kernel, in launch order, the blocks emulated: every block of each kernel but the last
    (a later kernel may read anything an earlier one wrote: split-K's clear and partial sums), the
    chosen blocks of the last."""
    *earlier, last = function.kernels
    runs = [_KernelRun(_part(function, k), _grid_blocks(k), _grid_blocks(k)) for k in earlier]
    return [*runs, _KernelRun(_part(function, last) if earlier else "", chosen.count, chosen.total)]


def _part(function: HostFunction, kernel) -> str:
    """The kernel's name without its function's and the ``__gpu__`` suffix (``partial`` of
    ``f__partial__gpu__``); its whole name where it is not ``<function>__<part>__gpu__``."""
    name = kernel.name.removesuffix("__gpu__")
    return name.removeprefix(f"{function.name}__") if name.startswith(f"{function.name}__") else name


def _grid_blocks(kernel) -> int:
    x, y, z = kernel.grid
    return x * y * z


def _blocks_text(runs: list[_KernelRun], counted: bool = False) -> str:
    """``8 of 64 blocks``, or per kernel ``all 16 blocks of the partial kernel and 8 of 32 blocks
    of the combine kernel``; a whole grid ``all N``, or ``N of N`` where ``counted``."""
    texts = []
    for run in runs:
        some = "all" if run.count == run.total and not counted else f"{run.count} of"
        kernel = f" of the {run.part} kernel" if run.part else ""
        texts.append(f"{some} {_plural(run.total, 'block')}{kernel}")
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


def _echo_choice(name: str, chosen: _Blocks, kernel, runs: list[_KernelRun]) -> None:
    from .verify import computed_tiles

    click.echo(f"emulating {name} on {_blocks_text(runs)} ({chosen.why})")
    if chosen.blocks is not None and len(chosen.blocks) <= 16:
        of = f" of the {runs[-1].part} kernel" if runs[-1].part else ""
        click.echo(f"  blocks (x, y, z){of}: " + " ".join(f"({x}, {y}, {z})" for x, y, z in chosen.blocks))
    if chosen.blocks is not None and kernel.persistent is not None:
        tiles = computed_tiles(kernel, chosen.blocks)
        shown = " ".join(f"({x}, {y}, {z})" for x, y, z in tiles[:24]) + (" ..." if len(tiles) > 24 else "")
        click.echo(f"  tiles compared (x, y, z of the plan's {'x'.join(map(str, kernel.persistent.tiles))} grid, "
                   f"{len(tiles)} of {kernel.persistent.count}, each block's in grouped order): {shown}")


@main.command()
@click.argument("package", type=click.Path())
@_run_options
def verify(package: str, function: str | None, seed: int, tolerance, sizes) -> None:
    """Run PACKAGE's functions on the GPU on random inputs and compare with the reference."""
    from .verify import run_function

    _need_gpu("verify")
    pkg = _load(package)
    ok = True
    _check_sizes(_functions(pkg, function), sizes)
    for fn in _functions(pkg, function):
        _, _, values, shown = _at_sizes(fn, sizes)
        ok &= _report(f"verified {fn.name}{shown} on the GPU",
                      lambda fn=fn, values=values: run_function(
                          fn, seed, pkg.tolerance if tolerance is None else tolerance, values or None))
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("package", type=click.Path())
@click.option("--function", "function", default=None, help="Only this function.")
@click.option("--compare", "compare_with", type=click.Choice(["cublas", "copy", "torch"]), default=None,
              help="Time a reference in the same run and print the ratio: cublas (matrix products, "
                   "8-bit floats through torch._scaled_mm; a fused epilogue's product alone), copy (a device "
                   "copy of the bytes moved), torch (element-wise statements).")
@click.option("--min-time", type=float, default=1.0, show_default=True, help="Seconds of timed batches, at least.")
@click.option("--batch-size", type=click.IntRange(min=1), default=10, show_default=True, help="Batches, at least.")
@click.option("--min-iterations", type=click.IntRange(min=1), default=20, show_default=True, help="Launches per batch.")
@click.option("--time-in-ms", is_flag=True, help="Report milliseconds instead of seconds.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Append results to this CSV file.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Random input seed.")
@_SIZES
def bench(package, function, compare_with, min_time, batch_size, min_iterations, time_in_ms, csv_path,
          seed, sizes) -> None:
    """Time PACKAGE's functions on the GPU (after verifying them), with hatlib's statistics."""
    from .bench import STATISTICS, Options, bench_function

    _need_gpu("bench")
    pkg = _load(package)
    options = Options(min_time=min_time, batches=batch_size, iterations=min_iterations, seed=seed)
    scale, unit = (1e3, "ms") if time_in_ms else (1.0, "s")
    rows = []
    _check_sizes(_functions(pkg, function), sizes)
    for fn in _functions(pkg, function):
        try:
            own = {k: v for k, v in (sizes or {}).items() if fn.model is not None and k in fn.model.size_names}
            reports, timing, ref = bench_function(fn, options, compare_with, pkg.tolerance, own)
        except SchedcError as e:
            _fail(str(e))
        for report in reports:
            click.echo(f"verified: {report}")
        for t in [timing] + ([ref] if ref else []):
            row = {"function": t.name, **{k: t.stats[k] * scale for k in STATISTICS},
                   "unit": unit, "batches": t.batches, "iterations": t.iterations,
                   "TFLOP/s": t.tflops}
            rows.append(row)
        header = f"{'function':<44}" + "".join(f"{k:>20}" for k in STATISTICS) + f"{'TFLOP/s':>10}"
        click.echo(header)
        for t in [timing] + ([ref] if ref else []):
            cells = "".join(f"{t.stats[k] * scale:>20.6g}" for k in STATISTICS)
            click.echo(f"{t.name[:43]:<44}{cells}{t.tflops:>10.2f}")
        if ref:
            ratio = ref.stats["median_of_means"] / timing.stats["median_of_means"]
            click.echo(f"ratio (median, {ref.name} time / {timing.name} time): {ratio:.3f}x")
            rows[-2]["ratio_to_reference"] = ratio
    if csv_path:
        fields = ["function", *STATISTICS, "unit", "batches", "iterations", "TFLOP/s", "ratio_to_reference"]
        new = not Path(csv_path).exists()
        with open(csv_path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            if new:
                writer.writeheader()
            writer.writerows(rows)


class _Values(click.ParamType):
    """--first: ``NAME=VALUE,...``, the values as text (compared with the grid's as ``str`` shows them)."""

    name = "NAME=VALUE,..."

    def convert(self, value, param, ctx) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        out = {}
        for part in filter(None, (p.strip() for p in str(value).split(","))):
            name, equals, text = part.partition("=")
            if not equals or not name.strip().isidentifier() or not text.strip():
                self.fail(f"{part!r} is not NAME=VALUE (e.g. GROUP=8,STAGES=3)", param, ctx)
            out[name.strip()] = text.strip()
        if not out:
            self.fail("give the point as NAME=VALUE,..., e.g. GROUP=8,STAGES=3", param, ctx)
        return out


class _Gpus(click.ParamType):
    """--gpus: ``all`` or GPU ordinals ``0,1``."""

    name = "all|N,..."

    def convert(self, value, param, ctx) -> tuple[int, ...] | str:
        if isinstance(value, tuple) or value == "all":
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
            self.fail(f"{value!r} is not 'all' or distinct GPU ordinals such as 0,1", param, ctx)
        return tuple(int(p) for p in parts)


@main.command()
@click.argument("script", type=click.Path(dir_okay=False), required=False)
@click.option("--shapes", "shapes", type=_Sizes(), multiple=True,
              help="A problem shape as the script's shape parameters, M=4096,N=4096,K=4096; repeat for several "
                   "(one winner each). Default: the shapes in the script's grids.")
@click.option("--function", "functions", multiple=True,
              help="Tune only this grid (Package.add's base_name); repeat for several. The others are left out of "
                   "the package written.")
@click.option("--output-dir", default=None, type=click.Path(file_okay=False),
              help="Write the winners' package into DIR/<name>/ instead of the script's output_dir.")
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False),
              help="The results database (default: ~/.cache/schedc/tune.sqlite, or $SCHEDC_CACHE/tune.sqlite).")
@click.option("--budget-points", type=click.IntRange(min=1), default=None,
              help="Points of each function and shape sent to the GPU, at most (a larger grid is sampled by "
                   "optuna's TPE).")
@click.option("--budget-seconds", type=click.FloatRange(min=0), default=None,
              help="Start no point after this many seconds (those under way finish).")
@click.option("--first", "first", type=_Values(), multiple=True,
              help="A point to try before the search, NAME=VALUE,... of the grid's parameters (a hand-written "
                   "plan, GROUP=8,STAGES=3): every point of each shape with those values goes first, within the "
                   "budget; repeat for several.")
@click.option("--search", type=click.Choice(["auto", "exhaustive", "sampled"]), default="auto", show_default=True,
              help="exhaustive: every point (the first --budget-points of each shape); sampled: optuna's TPE; "
                   "auto: sampled where a shape has more points than --budget-points.")
@click.option("--gpus", type=_Gpus(), default="0", show_default=True,
              help="GPUs of this host that time candidates, one worker each: 'all' or ordinals such as 0,1.")
@click.option("--scheduler", default=None,
              help="A Dask scheduler's address: build on its workers and time on those with a GPU resource.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Build processes (default: one per CPU).")
@click.option("--min-time", type=float, default=0.3, show_default=True, help="Seconds of timed batches per point.")
@click.option("--sizes", type=_Sizes(), multiple=True,
              help="Run-time sizes (create_dimensions) to time a function of them at, M=4096; repeat for buckets "
                   "(M=16, M=256, M=4096): a winner each, and pkg.<base_name> calls the one of the smallest bucket "
                   "that holds the call's sizes.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds a candidate may run on the GPU before its worker is replaced.")
@click.option("--compare", "compare_with", type=click.Choice(["cublas", "copy", "torch"]), default=None,
              help="Time a reference beside each winner (as schedc bench --compare).")
@click.option("--finalists", type=click.IntRange(min=1), default=3, show_default=True,
              help="The fastest points of each shape timed again one after the other on one GPU; the fastest "
                   "of them wins.")
@click.option("--tie", type=click.FloatRange(min=0), default=0.005, show_default=True,
              help="Finalists within this fraction of the fastest tie: the first in the grid's order wins.")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Write a PNG of every timed point's time, coloured by each parameter.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Points listed per shape.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="The sampler's and the inputs' seed.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--dry-run", is_flag=True, help="Check the points (every one, or the budget's) and count the refusals "
                                              "by cause; build and time nothing (no GPU needed).")
@click.option("--show", is_flag=True, help="Print the database's measurements (of SCRIPT, if given) and exit.")
@click.option("--csv", "csv_path", default=None, type=click.Path(dir_okay=False),
              help="Write the database's measurements (of SCRIPT, if given) to this CSV file and exit.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write them to this JSON file and exit.")
@click.option("--fake-timing", default=None, hidden=True,
              help="MODULE:FUNCTION giving seconds per call from (values, shape), in place of a GPU.")
def tune(script, shapes, functions, output_dir, db_path, budget_points, budget_seconds, first, search, gpus, scheduler,
         jobs,
         min_time, sizes, timeout, compare_with, finalists, tie, plot_path, top, seed, no_progress, dry_run, show,
         csv_path, json_path, fake_timing) -> None:
    """Search SCRIPT's parameter grids for the fastest kernel: every point checked by the analysis
    (refusals counted by cause, never compiled), the others built in parallel, verified once and
    timed on the GPU, the results kept in a database, and the best point of each function and
    shape written as the script's package."""
    from .tuning import tuner
    from .tuning.report import plot, summary

    if show or csv_path or json_path:
        _tune_table(db_path, script, show, csv_path, json_path)
        return
    if script is None:
        _fail("schedc tune needs a SCRIPT (or --show)")
    runner = None
    if fake_timing:
        from .tuning.runners import FakeTiming

        runner = FakeTiming(_import(fake_timing), slots=len(gpus) if isinstance(gpus, tuple) else 1)
    from .tuning.measure import Settings

    options = tuner.Options(shapes=tuple(shapes), functions=tuple(functions), db=db_path, output_dir=output_dir,
                            jobs=jobs or 0,
                            budget_points=budget_points, budget_seconds=budget_seconds, first=tuple(first),
                            search=search, seed=seed,
                            gpus=gpus, scheduler=scheduler, timeout=timeout, compare=compare_with, finalists=finalists,
                            tie=tie,
                            sizes=tuple(sizes), settings=Settings(min_time=min_time, seed=seed),
                            progress=not no_progress,
                            dry_run=dry_run)
    try:
        outcome = tuner.tune(script, options, runner)
    except SchedcError as e:
        _fail(str(e) + (f"\n{e.detail}" if e.detail else ""))
    click.echo(summary(outcome, top))
    if plot_path:
        try:
            click.echo(f"plot: {plot(outcome, plot_path) or 'nothing timed'}")
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'schedc[tune]' (the results are in the database)")
    sys.exit(1 if outcome.interrupted else 0)


def _tune_table(db_path, script, show: bool, csv_path, json_path) -> None:
    try:
        _tune_rows(db_path, script, show, csv_path, json_path)
    except SchedcError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"cannot write {e.filename}: {e.strerror}")


def _tune_rows(db_path, script, show: bool, csv_path, json_path) -> None:
    from .tuning import db

    where = Path(db_path or db.default_path())
    if not where.is_file():  # reading: a database that is not there is not made
        _fail(f"--db {where}: no results database there (schedc tune SCRIPT makes one)")
    if script is not None and not Path(script).is_file():
        _fail(f"{script}: no such script")
    database = db.Database(where)
    path = str(Path(script).resolve()) if script else None
    if csv_path:
        click.echo(f"wrote {database.export(csv_path, path)} measurements to {csv_path}")
    if json_path:
        click.echo(f"wrote {database.export(json_path, path)} measurements to {json_path}")
    if show:
        rows = database.rows(path)
        click.echo(f"{len(rows)} measurements in {database.path}")
        for r in rows:
            median = f"{r['median'] * 1e6:10.2f} us" if r["median"] else " " * 13
            click.echo(f"{Path(r['script']).name}  {r['function']}  {r['shape'] or '-'}  {r['status']:<8}{median}  "
                       f"{r['point']}  {r['device']}")
    database.close()


def _import(spec: str):
    import importlib

    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        _fail(f"--fake-timing {spec}: {e}")


if __name__ == "__main__":
    main()
