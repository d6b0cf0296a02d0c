"""The random-schedule differential tester (tests/fuzz): every generated schedule script must
end correct (emulated on every block against the float64 reference, compiled by NVRTC) or
refused with a SchedcError. A failure prints the outcome counts and, per failure class, the
shrunk script (a file a person can run).

CI runs ``--fuzz-count`` programs (default 800: about 100 s of CPU, plus at most 45 s
of shrinking on 2 workers) of ``--fuzz-seed`` (default 0) on 2 workers;
by hand: ``pytest -q tests/test_fuzz.py --fuzz-count 5000 --fuzz-seed 7`` or
``python -m tests.fuzz --count 5000 --seed 7 --out failures/``.
"""

from __future__ import annotations

import time

from .fuzz.campaign import Options, run_campaign
from .fuzz.features import features
from .fuzz.generate import generate
from .fuzz.pool import Lost, Pool
from .fuzz.program import Neg, walk
from .fuzz.render import render
from .fuzz.report import failure_text, write_scripts
from .fuzz.run import Outcome, build, run_program, run_programs, run_script
from .fuzz.shrink import shrink
from .fuzz.values import program_is_safe


def test_random_schedules_end_correct_or_refused(fuzz_options):
    count, seed = fuzz_options
    summary = run_campaign(Options(count=count, seed=seed, jobs=2, timeout=20.0, shrink_seconds=45.0))
    assert not summary.failed, "\n" + failure_text(summary)
    assert summary.counts["correct"] > count // 3, "the generator should mostly make programs schedc accepts"


def test_programs_are_reproducible_scripts():
    programs = [generate(3, n) for n in range(20)]
    assert programs == [generate(3, n) for n in range(20)]
    assert len({render(p) for p in programs}) == 20
    for p in programs[:5]:
        compile(render(p), "<script>", "exec")  # a standalone, valid Python script


def test_the_runner_classifies_outcomes():
    good = render(generate(0, 0))
    assert run_script(good.replace("schedule = nest.create_schedule()",
                                   "schedule = nest.create_schedule()\nschedule.split(i, 0)")).kind == "refused"
    broken = run_script(good.replace("plan = schedule.create_plan(target)", "plan = schedule.create_plan(target)\n"
                                     "raise ZeroDivisionError('not schedc')"))
    assert (broken.kind, broken.signature) == ("internal", "internal: script: ZeroDivisionError: not schedc")
    assert build(good)  # the session shows the function


def test_a_refusal_at_build_is_a_failure_of_schedc():
    """Package.add refuses what it refuses; a plan it accepted and Package.build refuses is a bug."""
    from unittest import mock

    from schedc.errors import PlanError
    from schedc.package import build as building

    good = render(generate(0, 0))
    refusing = mock.patch.object(building, "_emit", side_effect=PlanError("plan", "late refusal"))
    with refusing:
        outcome = run_script(good, compile_cuda=False)
    assert (outcome.kind, outcome.signature) == ("internal", "internal: refused at build: PlanError: late refusal")


def _all_double_minus(programs: list) -> list[Outcome]:
    return [_double_minus(p) for p in programs]


def _double_minus(program) -> Outcome:
    """A stand-in failure: any ``-(-x)`` fails."""
    double = any(isinstance(n, Neg) and isinstance(n.operand, Neg) for s in program.statements for n in walk(s.value))
    return Outcome("wrong", "wrong: fake", "") if double else Outcome("correct", "correct")


def test_the_shrinker_keeps_the_failure_and_drops_the_rest():
    program = next(p for p in (generate(0, n) for n in range(2000))
                   if "double minus" in features(p) and (p.caches or p.bindings) and p.steps)
    shrunk = shrink(program, _double_minus(program), lambda batch: [_double_minus(p) for p in batch])
    assert _double_minus(shrunk.program).signature == "wrong: fake"
    assert len(render(shrunk.program)) < len(render(program))
    p = shrunk.program
    assert (p.steps, p.bindings, p.caches, p.unrolls, len(p.statements)) == ((), (), (), (), 1)


def _sleep(seconds: list[float]) -> list[Outcome]:
    time.sleep(sum(seconds))
    return [Outcome("correct", "correct", seconds=s) for s in seconds]


def test_the_pool_reports_hangs_and_goes_on():
    with Pool(jobs=2, timeout=2.0, task=_sleep) as pool:  # 2 s: the other test workers load the machine
        results = pool.map([[0.0], [5.0], [0.1, 0.1], [0.0]])
    assert isinstance(results[1], Lost) and results[1].outcome.kind == "hang"
    assert [[o.kind for o in r] for n, r in enumerate(results) if n != 1] == [["correct"], ["correct"] * 2, ["correct"]]


def test_a_campaign_reports_each_class_with_runnable_scripts(tmp_path):
    options = Options(count=40, seed=1, jobs=1, timeout=10.0, shrink_seconds=20.0, task=_all_double_minus)
    summary = run_campaign(options)
    (fake,) = summary.classes
    assert fake.signature == "wrong: fake" and summary.counts["wrong"] == len(fake.results) > 0
    text = failure_text(summary)
    assert "wrong: fake" in text and "-(-" in text
    for path in write_scripts(summary, tmp_path):
        compile(path.read_text(), str(path), "exec")  # each a standalone script


def test_docstring_examples():
    import doctest
    import importlib
    import pkgutil

    from . import fuzz

    for module in pkgutil.iter_modules(fuzz.__path__, f"{fuzz.__name__}."):
        result = doctest.testmod(importlib.import_module(module.name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.name


def test_batched_compiles_give_each_programs_outcome():
    programs = [generate(5, n) for n in range(8)]
    batched = run_programs(programs)
    assert [o.signature for o in batched] == [run_program(p).signature for p in programs]


def test_generated_programs_pass_the_shrinkers_value_checks():
    """The generator and the shrinker agree on which programs compare reliably."""
    programs = [generate(2, n) for n in range(300)]
    assert all(program_is_safe(p) for p in programs if p.tensorize is None)


def test_run_time_sizes_are_drawn_and_emulated_at_two_values(monkeypatch):
    from dataclasses import replace

    from .fuzz import run
    from .fuzz.program import RUNTIME_SIZE, runtime_dims

    runs = []
    emulate = run.emulate_function

    def recorded(*args, sizes=None, **options):
        runs.append(sizes)
        return emulate(*args, sizes=sizes, **options)

    monkeypatch.setattr(run, "emulate_function", recorded)

    drawn = [p for p in (generate(11, n) for n in range(120)) if p.runtime]
    assert drawn, "the generator draws run-time sizes"
    program = drawn[0]
    text = render(program)
    assert f"{RUNTIME_SIZE} = acc.create_dimensions()" in text and f", {RUNTIME_SIZE})" in text
    fixed = replace(program, runtime=False)
    assert RUNTIME_SIZE not in render(fixed) and runtime_dims(fixed) == runtime_dims(program)
    assert run_program(program, compile_cuda=False).kind in ("correct", "refused")
    assert any(run_program(p, compile_cuda=False).kind == "correct" for p in drawn[:6])
    ones = {RUNTIME_SIZE: 1}
    assert ones in runs and any(sizes not in (None, ones) for sizes in runs)  # the default sizes, and 1
    assert "run-time size (acc.create_dimensions) of the first dimension" in features(program)


def test_a_run_time_size_stays_the_extent_of_an_argument():
    """A call reads a run-time size from its arguments' shapes, so the array made TEMP is never the
    last argument of that size (seed 9901 #1388 made it so: a valid-looking program refused)."""
    from .fuzz.program import runtime_dims

    programs = [generate(9901, 1388), *(generate(11, n) for n in range(300))]
    sized = [p for p in programs if p.runtime]
    assert sized and any(a.role == "TEMP" for p in sized for a in p.arrays)
    for p in sized:
        assert any(p.array(name).role != "TEMP" for name in runtime_dims(p)), render(p)
