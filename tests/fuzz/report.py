"""Reports of a campaign: outcome counts, time, and per failure class the shrunk script (a
file a person can run), with the features that remained after shrinking."""

from __future__ import annotations

import re
from pathlib import Path

from .campaign import Example, FailureClass, Summary
from .features import features
from .program import with_array_names
from .render import render


def summary_text(s: Summary) -> str:
    """Counts per outcome, the time, and one line per failure class."""
    counts = "  ".join(f"{kind} {n}" for kind, n in s.counts.items() if n or kind in ("correct", "refused"))
    per = s.work / max(1, s.count)
    lines = [f"schedc fuzz: {s.count} programs of seed {s.seed} on {s.jobs} worker(s) in {s.seconds:.1f} s "
             f"({per:.2f} s of work per program; shrinking {s.shrink_seconds:.1f} s)",
             f"  {counts}"]
    if s.classes:
        lines.append(f"{len(s.classes)} failure class(es):")
        lines += [class_line(n, c) for n, c in enumerate(s.classes, 1)]
    return "\n".join(lines)


def class_line(n: int, c: FailureClass) -> str:
    programs = ", ".join(f"#{r.index}" for r in c.results[:8]) + (" ..." if len(c.results) > 8 else "")
    return f"  [{n}] {c.signature}: {len(c.results)} program(s) ({programs})"


def failure_text(s: Summary, limit: int = 12) -> str:
    """Every class with its shrunk scripts (for a test failure message)."""
    parts = [summary_text(s)]
    for n, c in enumerate(s.classes[:limit], 1):
        for m, example in enumerate(c.examples, 1):
            parts.append(f"\n===== [{n}.{m}] {c.signature} =====\n{script(s, c, example)}")
    return "\n".join(parts)


def script(s: Summary, c: FailureClass, example: Example) -> str:
    """An example's shrunk script, with a docstring saying what fails and how to replay it."""
    found, shrunk = example.result, example.shrunk
    program = with_array_names(shrunk.program if shrunk else found.program)  # the names the script shows
    outcome = shrunk.outcome if shrunk else found.outcome
    how = (f"shrunk from program #{found.index} in {shrunk.tried} runs ({shrunk.accepted} simplifications)"
           if shrunk else f"program #{found.index} (not shrunk)")
    header = "\n".join([
        f"schedc fuzz failure: {c.signature}",
        f"{len(c.results)} of {s.count} programs of seed {s.seed} failed this way; {how}.",
        f"features: {', '.join(features(program)) or 'none'}",
        "replay: python -m tests.fuzz --replay THIS_FILE   (or: schedc show / schedc check THIS_FILE)",
        "",
        outcome.message.strip()[:1500],
    ])
    return render(program, header)


def write_scripts(s: Summary, directory: Path) -> list[Path]:
    """Each class's shrunk script as ``DIR/NN_<signature>.py``; the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, c in enumerate(s.classes, 1):
        slug = re.sub(r"[^a-z0-9]+", "_", c.signature.lower()).strip("_")[:60]
        for m, example in enumerate(c.examples, 1):
            path = directory / f"{n:02d}{'abcdefgh'[m - 1]}_{slug}.py"
            path.write_text(script(s, c, example))
            paths.append(path)
    return paths
