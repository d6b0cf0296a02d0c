"""``python -m tests.fuzz --count N --seed S --jobs 2 [--out DIR]``: run a campaign, print the
outcome counts, the time and the failure classes, and write each class's shrunk script to DIR.

``--replay FILE ...`` runs schedule scripts (e.g. written by --out) and prints their outcome;
``--show N`` prints program N of the seed; ``--gpu`` also runs accepted programs on the GPU
(retargeted to its model), in a campaign or a replay; ``--kind hopper`` draws Hopper programs only.
Exit status: 0 when every program ended correct or refused, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from .campaign import Options, run_campaign
from .features import coverage_text
from .generate import PROGRAM_KINDS, generate
from .render import render
from .report import summary_text, write_scripts
from .run import run_script


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300, help="programs to run (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per program before it is a hang")
    parser.add_argument("--out", type=Path, default=None, help="write each failure class's shrunk script here")
    parser.add_argument("--shrink-seconds", type=float, default=300.0, help="time for shrinking, all classes")
    parser.add_argument("--shrink-attempts", type=int, default=150, help="variants tried per class (0: none)")
    parser.add_argument("--gpu", action="store_true", help="also run accepted programs on the GPU")
    parser.add_argument("--kind", choices=sorted(PROGRAM_KINDS), default=None,
                        help="only programs of this kind (e.g. hopper: wgmma plans with every Hopper knob drawn)")
    parser.add_argument("--replay", type=Path, nargs="+", default=None, help="run these scripts and stop")
    parser.add_argument("--show", type=int, default=None, help="print program N of the seed and stop")
    parser.add_argument("--coverage", action="store_true", help="also print how often each feature was "
                        "generated and accepted")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    args = parse(argv)
    if args.show is not None:
        print(render(generate(args.seed, args.show, args.kind)), end="")
        return 0
    if args.replay:
        return replay(args.replay, args.gpu)
    options = Options(args.count, args.seed, args.jobs, args.timeout, args.shrink_attempts, args.shrink_seconds,
                      kind=args.kind)
    if args.gpu:
        options = _gpu_options(options)
    summary = run_campaign(options, _progress(args.count))
    print(summary_text(summary))
    if args.coverage:
        print(coverage_text(summary.generated, summary.accepted))
    if args.out is not None and summary.classes:
        for path in write_scripts(summary, args.out):
            print(f"wrote {path}")
    return 1 if summary.failed else 0


def _progress(count: int):
    """A callback printing the outcome counts every 50 programs (to stderr)."""
    tally: Counter = Counter()

    def progress(done: int, result) -> None:
        tally[result.outcome.kind] += 1
        if done % 50 == 0 or done == count:
            print(f"  {done}/{count}: " + ", ".join(f"{k} {n}" for k, n in sorted(tally.items())),
                  file=sys.stderr, flush=True)

    return progress


def _gpu_options(options: Options) -> Options:
    from dataclasses import replace
    from functools import partial

    from .gpu import device_target, run_programs_on_gpu

    target = device_target()
    if target is None:
        sys.exit("python -m tests.fuzz --gpu: no NVIDIA GPU of a model schedc knows here")
    print(f"GPU mode: every program retargeted to {target}", file=sys.stderr)
    return replace(options, task=partial(run_programs_on_gpu, target=target), batch=1)


def replay(paths: list[Path], gpu: bool = False) -> int:
    """Run schedule scripts (on the GPU too with ``gpu``) and print each outcome; 1 if one failed."""
    failed = False
    for path in paths:
        outcome = run_script(path.read_text())
        if gpu:
            from .gpu import on_device

            outcome = on_device(outcome, path.read_text())
        failed |= outcome.failed
        print(f"{path}: {outcome.signature}\n  " + outcome.message.strip().replace("\n", "\n  "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
