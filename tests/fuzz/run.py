"""Run one schedule script and classify what happened.

The script runs in a ``schedc.package.build.session(show_only=True)`` (as ``schedc show``
does: every function compiled to kernel IR and CUDA, nothing written). Then each function is
emulated on every block against the float64 reference, and its CUDA source compiled with NVRTC
for the target's sm (when this NVRTC supports it). Outcomes:

- ``correct``: emulation matched, NVRTC compiled;
- ``refused``: a SchedcError (not an InternalError) while running the script, before its
  ``Package.build`` (every refusal belongs at ``Package.add``);
- ``refused_valid``: refused, and so is the same nest with no schedule or plan at all (one
  thread in nest order). The generator builds nests valid by construction (bounds, types,
  roles), so refusing the nest itself is a bug;
- ``wrong``: the emulation disagreed with the reference, or the emulator caught a race or an
  out-of-bounds access in accepted code;
- ``internal``: an InternalError or any other exception, a SchedcError from ``Package.build``
  (a plan ``Package.add`` accepted must build), NVRTC rejecting accepted code, or
  generated code the CUDA text check flags (``--x`` / ``++x``: a printer bug);
- ``hang``: past the time limit (decided by ``pool.py``, which kills the worker).

Failure *signatures* (kind plus a cause with numbers and names normalised) group failures into
classes, and the shrinker keeps a program's signature while simplifying it.
"""

from __future__ import annotations

import functools
import re
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from schedc.codegen.cuda import without_runtime
from schedc.codegen.emulate import EmulationError
from schedc.errors import InternalError, SchedcError
from schedc.package.build import Package, session
from schedc.package.compile import nvrtc_compile, supported_archs
from schedc.verify import default_sizes, emulate_function

from .program import Program
from .render import render

OUTCOMES = ("correct", "refused", "refused_valid", "wrong", "internal", "hang")
FAILURES = ("refused_valid", "wrong", "internal", "hang")


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of OUTCOMES
    signature: str  # the failure class (for correct and refused: the kind, or the error class)
    message: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def run_program(program: Program, compile_cuda: bool = True) -> Outcome:
    """Run ``program``'s script and classify it (see the module docstring)."""
    return run_programs([program], compile_cuda)[0]


def run_programs(programs: list[Program], compile_cuda: bool = True) -> list[Outcome]:
    """Run several programs; the CUDA sources of those accepted are compiled together, one
    NVRTC call per sm (its start, most of a small kernel's 0.1-0.2 s, paid once), and one by
    one only when that fails."""
    named = [replace(p, name=f"fuzz{n}") for n, p in enumerate(programs)] if len(programs) > 1 else programs
    staged = [_stage(p) for p in named]
    if compile_cuda:
        _compile_staged([s for s in staged if s.outcome is None])
    return [replace(s.outcome or Outcome("correct", "correct"), seconds=s.seconds) for s in staged]


def run_script(text: str, compile_cuda: bool = True) -> Outcome:
    """Build the script's functions, emulate each, compile each source."""
    outcome, sources = check_script(text)
    if outcome is None and compile_cuda:
        outcome = _compile_each(sources)
    return outcome or Outcome("correct", "correct")


@dataclass
class _Staged:
    """A program run up to its NVRTC compile: an outcome already, or sources to compile."""

    outcome: Outcome | None
    sources: list[tuple[str, int]]  # (CUDA source, sm)
    seconds: float


def _stage(program: Program) -> _Staged:
    start = time.perf_counter()
    outcome, sources = check_script(render(program))
    if outcome is not None and outcome.kind == "refused" and program.tensorize is None:
        outcome = _check_bare_nest(program, outcome)
    return _Staged(outcome, sources, time.perf_counter() - start)


def check_script(text: str) -> tuple[Outcome | None, list[tuple[str, int]]]:
    """Build and emulate a script: its outcome if decided, else the sources to compile."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # lanes past a partial tile compute junk
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_script(text)


def _check_script(text: str) -> tuple[Outcome | None, list[tuple[str, int]]]:
    try:
        shown = build(text)
    except InternalError as error:
        return _internal("script", error), []
    except SchedcError as error:
        if _raised_in(error, Package.build):  # Package.add accepted the plan: it must build
            return _internal("refused at build", error), []
        return Outcome("refused", f"refused: {type(error).__name__}", _text(error)), []
    except Exception as error:  # noqa: BLE001 - anything else is a bug in schedc
        return _internal("script", error), []
    if not shown:
        return Outcome("internal", "internal: script: the session shows no function", ""), []
    for _, model, kernel, source in shown:
        outcome = _emulate(model, kernel) or _check_text(source)
        if outcome:
            return outcome, []
    return None, list(dict.fromkeys((source, model.gpu.sm) for _, model, _, source in shown))


def build(text: str) -> list:
    """Run a script as ``schedc show`` does; the (package, model, kernel, source) it shows."""
    code = compile(text, "<schedule script>", "exec")
    with session(show_only=True) as built:
        exec(code, {"__name__": "__main__"})
    return built.shown


def build_into(text: str, directory: str) -> list:
    """Run a script as ``schedc build --output-dir directory`` does; the .hat paths written."""
    code = compile(text, "<schedule script>", "exec")
    with session(output_dir=directory) as built:
        exec(code, {"__name__": "__main__"})
    return built.built


def _check_bare_nest(program: Program, refused: Outcome) -> Outcome:
    bare = replace(program, steps=(), order=None, bindings=(), unrolls=(), caches=(), tensorize=None, persistent=None,
                   cluster=None, order_free=False, overlap=False,
                   alternate=False)
    try:
        build(render(bare))
    except SchedcError as error:
        message = f"the nest itself is refused (no schedule, no plan): {_text(error)}"
        return Outcome("refused_valid", f"refused_valid: {type(error).__name__}: {normalize(error.what)}", message)
    except Exception:  # noqa: BLE001 - the bare nest failing otherwise is not this program's class
        return refused
    return refused


def _emulate(model, kernel) -> Outcome | None:
    """Every block emulated against the reference; a function of run-time sizes at two values
    of them: its default (two tiles and a partial one) and 1."""
    runs = [default_sizes(model), {name: 1 for name in model.size_names}] if model.sizes else [None]
    try:
        reports = [r for sizes in runs for r in emulate_function(model, kernel, blocks=None, seed=0, sizes=sizes)]
    except EmulationError as error:  # what it caught, up to the place (block, threads, element)
        return Outcome("wrong", f"wrong: the emulator caught {error.kind}: {normalize(error.what)}", _text(error))
    except Exception as error:  # noqa: BLE001 - the emulator or the reference failed
        return _internal("emulate", error)
    bad = [r for r in reports if not r.passed]
    if not bad:
        return None
    first = bad[0]
    cause = "never-written elements" if first.unwritten else "writes outside the nest" if first.extra \
        else "NaN or infinite results" if first.nonfinite else "values differ"
    return Outcome("wrong", f"wrong: {cause}", "\n".join(str(r) for r in reports))


def _compile_staged(staged: list[_Staged]) -> None:
    """Compile the staged programs' sources, those of one sm together; set the outcome of each
    program NVRTC rejects (found one by one when the joint compile fails)."""
    by_sm: dict[int, list[_Staged]] = {}
    for s in staged:
        for _, sm in s.sources:
            by_sm.setdefault(sm, []).append(s)
    for sm, group in by_sm.items():
        sources = [source for s in group for source, at in s.sources if at == sm]
        start = time.perf_counter()
        together = len(group) > 1 and _compiles_together(sources, sm)
        for s in group:
            s.outcome = s.outcome or (None if together else _compile_each([(x, at) for x, at in s.sources if at == sm]))
            s.seconds += (time.perf_counter() - start) / len(group)


def _compiles_together(sources: list[str], sm: int) -> bool:
    """One NVRTC call for several generated sources (the runtime header kept once; kernel
    names differ, since each program has its own function name)."""
    if sm not in supported_archs():
        return True
    joined = "\n".join([sources[0], *(without_runtime(source) for source in sources[1:])])
    try:
        nvrtc_compile(joined, "fuzz_batch", f"sm_{sm}")
    except SchedcError:
        return False
    return True


def _compile_each(sources: list[tuple[str, int]]) -> Outcome | None:
    for source, sm in sources:
        outcome = _compile(source, sm)
        if outcome:
            return outcome
    return None


def _compile(source: str, sm: int) -> Outcome | None:
    if sm not in supported_archs():
        return None  # e.g. sm_70: this NVRTC does not build it (emulated only)
    try:
        _nvrtc(source, f"sm_{sm}")
    except SchedcError as error:
        log = str(error)
        first = next((line for line in log.splitlines() if "error" in line and "NVRTC" not in line), log)
        cause = normalize(first.split("error:", 1)[-1])
        return Outcome("internal", f"internal: NVRTC rejects the source: {cause}", log[:3000])
    return None


@functools.lru_cache(maxsize=256)
def _nvrtc(source: str, arch: str) -> None:
    """Compile once per source (a shrinker tries many programs with the same code)."""
    nvrtc_compile(source, "fuzz", arch)


_INCREMENT = re.compile(r"(--|\+\+)\s*[\w(]")


def _check_text(source: str) -> Outcome | None:
    """Generated code has no ``--``/``++``: one is a misprinted double minus or plus."""
    for line in without_runtime(source).splitlines():
        code = line.split("//", 1)[0]
        if _INCREMENT.search(code):
            return Outcome("internal", "internal: CUDA source has a '--'/'++' (misprinted unary operators)",
                           line.strip())
    return None


def _raised_in(error: BaseException, function) -> bool:
    """Whether ``error`` was raised inside a call of ``function`` (its frames)."""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is function.__code__:
            return True
        tb = tb.tb_next
    return False


def _internal(stage: str, error: BaseException) -> Outcome:
    cause = f"{type(error).__name__}: {normalize(getattr(error, 'what', str(error)))}"
    return Outcome("internal", f"internal: {stage}: {cause}", _text(error))


def _text(error: BaseException) -> str:
    detail = getattr(error, "detail", "")
    return f"{type(error).__name__}: {error}" + (f"\n{detail}" if detail else "")


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")
_ARRAY = re.compile(r"\b[A-H](_shared|_private)?\b")
_INDEX = re.compile(r"\b[ijk]{1,4}\d?\b")
_DETAIL = re.compile(r":? [\[{(]|->|,? at (block|iteration|\()")  # where isl sets, witnesses, places begin


def normalize(message: str) -> str:
    """A message's first line up to any isl set or witness, with numbers, array names and
    index names replaced, so that one bug gives one signature."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    first = first.replace("internal error (a bug in schedc, please report it): ", "")
    first = _DETAIL.split(first, maxsplit=1)[0]
    first = _INDEX.sub("<i>", _ARRAY.sub("<A>", _NUMBER.sub("N", first)))
    return first[:160]
