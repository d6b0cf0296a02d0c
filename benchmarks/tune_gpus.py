#!/usr/bin/env python3
"""The tuner on one GPU against all of a host's: points timed per minute and the winners.

Tunes benchmarks/tune_scaling.py (144 points, exhaustive) three times, each into a fresh database
after one pretend-timed run has compiled every candidate (so that the three time the GPUs, not
NVRTC): on GPU 0; on every GPU of the host (one worker each); on a Dask cluster of one worker
per GPU (pinned by CUDA_VISIBLE_DEVICES, as dask-cuda's LocalCUDACluster does) and CPU workers
for the builds. Prints each run's timed points per minute, its winner, and the speed-up.

Usage (on the device): python3 benchmarks/tune_gpus.py [--out DIR] [--no-dask]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from schedc.tuning import DaskCluster, FakeTiming, Options, Status, tune
from schedc.tuning.measure import Settings
from schedc.tuning.report import summary
from schedc.tuning.runners import gpu_count

SCRIPT = Path(__file__).resolve().parent / "tune_scaling.py"


def pretend(values: dict, shape: str) -> float:
    return 1e-3


def run(label: str, folder: Path, **options) -> dict:
    runner = options.pop("runner", None)
    started = time.monotonic()
    outcome = tune(SCRIPT, Options(db=str(folder / f"{label}.sqlite"), search="exhaustive", progress=False,
                                   write=False, settings=Settings(min_time=0.3), **options), runner)
    wall = time.monotonic() - started
    timed = sum(1 for p in outcome.points if p.status in (Status.TIMED, Status.SLOWER))
    (winner,) = outcome.winners.values() if outcome.winners else (None,)
    print(summary(outcome, top=3), flush=True)
    return {"label": label, "wall": wall, "timed": timed, "per_minute": 60 * timed / wall,
            "winner": winner.values if winner else None, "median": winner.median if winner else None}


def dask_gpus(gpus: int):
    from distributed import Client, Nanny, Scheduler, SpecCluster

    workers = {f"gpu{g}": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"GPU": 1},
                                                     "env": {"CUDA_VISIBLE_DEVICES": str(g)}}} for g in range(gpus)}
    cpus = max(1, (os.cpu_count() or 2) - gpus - 1)
    workers.update({f"cpu{c}": {"cls": Nanny, "options": {"nthreads": 1}} for c in range(cpus)})
    cluster = SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
    return cluster, Client(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-dask", action="store_true", help="only one GPU against all (no Dask cluster)")
    args = parser.parse_args()
    folder = Path(args.out or tempfile.mkdtemp(prefix="tune-gpus-"))
    folder.mkdir(parents=True, exist_ok=True)
    gpus = gpu_count()
    print(f"{gpus} GPUs", flush=True)
    run("build", folder, runner=FakeTiming(pretend))  # every candidate compiled into the cache
    rows = [run("one_gpu", folder, gpus=(0,)), run("all_gpus", folder, gpus="all")]
    if gpus > 1 and not args.no_dask:
        cluster, client = dask_gpus(gpus)
        try:
            rows.append(run("dask_gpus", folder, runner=DaskCluster(client)))
        finally:
            client.close()
            cluster.close()
    print(f"{'run':<10} {'wall s':>8} {'timed':>6} {'points/min':>11} {'winner us':>10}  winner")
    for r in rows:
        print(f"{r['label']:<10} {r['wall']:>8.1f} {r['timed']:>6} {r['per_minute']:>11.1f} "
              f"{(r['median'] or 0) * 1e6:>10.2f}  {r['winner']}")
    for r in rows[1:]:
        print(f"{r['label']}: {r['per_minute'] / rows[0]['per_minute']:.2f}x the points per minute of one GPU; "
              f"same winner: {r['winner'] == rows[0]['winner']}")


if __name__ == "__main__":
    main()
