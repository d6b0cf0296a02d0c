"""What a person sees of a tune: the counts, the refusals by cause, the top points of each
function and shape, where the time went, and a PNG of every timed point."""

from __future__ import annotations

from pathlib import Path

from .results import Status
from .search import groups
from .tuner import Outcome


def summary(outcome: Outcome, top: int = 10) -> str:
    """The tune in text: counts, refusals by cause, bugs, then each group's top points."""
    counts = outcome.counts()
    dry = outcome.device["device"] == "none"
    how = "checked (a dry run)" if dry else \
        f"tuned on {outcome.device['device']} (driver {outcome.device['driver']})"
    lines = [f"{how} {outcome.script.source.path}: "
             f"{len(outcome.points)} points: " + ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s])
             + (f" ({outcome.reused} from the database)" if outcome.reused else "")]
    lines.append(f"time: {outcome.seconds:.1f} s in all; building {outcome.build_seconds:.1f} s and timing "
                 f"{outcome.gpu_seconds:.1f} s summed over the workers")
    if outcome.interrupted:
        lines.append("interrupted: the results so far are in the database; no package written")
    for kind, n in outcome.refusals().most_common():
        lines.append(f"  refused {n:>4} x  {kind}")
    for p in outcome.points:
        if p.status.bug:
            why = ((p.measured.reason if p.measured is not None else p.checked.reason) or "").strip()
            why = why.splitlines()[0] if why else "(no message)"
            lines.append(f"  BUG ({p.status.value}) {p.function} {p.key}: {why}")
    for group in groups(outcome.script.grids) if not dry else ():
        lines += _table(outcome, group, top)
    for path in outcome.written:
        lines.append(f"wrote {path}")
    return "\n".join(lines)


def _table(outcome: Outcome, group, top: int) -> list[str]:
    grid = outcome.script.grids[group[0]]
    ranked = outcome.ranked(group)
    title = grid.base_name + (f" at {group[1]}" if group[1] else "")
    if not ranked:
        return [f"{title}: no point timed"]
    winner = outcome.winners.get(group)
    names = list(ranked[0].values)
    lines = [f"{title}: {len(ranked)} timed"]
    if winner is not None and winner.measured.reference:
        ratio = winner.measured.reference_median / winner.median
        lines[-1] += (f"; best {winner.median * 1e6:.2f} us against {winner.measured.reference} "
                      f"{winner.measured.reference_median * 1e6:.2f} us: {ratio:.3f}x")
    lines.append(f"  {'rank':>4} {'median us':>11} {'TFLOP/s':>8}  " + "  ".join(names))
    for n, p in enumerate(ranked[:top], 1):
        tflops = p.measured.flops / p.median / 1e12 if p.measured.flops else 0.0
        mark = " (stopped early)" if p.status is Status.SLOWER else ""
        mark += " (winner)" if p is winner else ""
        lines.append(f"  {n:>4} {p.median * 1e6:>11.2f} {tflops:>8.1f}  "
                     + "  ".join(str(p.values[k]) for k in names) + mark)
    return lines


def plot(outcome: Outcome, path: str | Path) -> Path | None:
    """A PNG: for each function and shape, each timed point's time (fastest first), coloured by
    each searched parameter in turn, the winner marked and the reference's time drawn where it was
    measured. None when nothing was timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []  # (group, ranked points, parameter): one per parameter that takes several values
    for group in groups(outcome.script.grids):
        ranked = outcome.ranked(group)
        names = [n for n in (ranked[0].values if ranked else {}) if len({str(p.values[n]) for p in ranked}) > 1]
        panels += [(group, ranked, name) for name in names or [""]] if ranked else []
    if not panels:
        return None
    columns = min(4, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for n, ax in enumerate(axes.flat):
        if n >= len(panels):
            ax.axis("off")
            continue
        group, ranked, name = panels[n]
        _panel(ax, outcome, group, ranked, name)
    figure.suptitle(f"schedc tune on {outcome.device['device']}: each point's time, coloured by a parameter",
                    fontsize=10)
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=110)
    plt.close(figure)
    return target


def _panel(ax, outcome: Outcome, group, ranked: list, name: str) -> None:
    """One parameter's panel: every timed point of the group, fastest first, by its value."""
    times = [p.median * 1e6 for p in ranked]
    values = [str(p.values.get(name, "")) for p in ranked]
    for value in dict.fromkeys(values):
        xs = [n for n, v in enumerate(values) if v == value]
        ax.scatter(xs, [times[n] for n in xs], s=10, label=f"{name}={value}" if name else None)
    ax.scatter([0], [times[0]], marker="*", s=160, color="black", label="winner")
    winner = outcome.winners.get(group)
    if winner is not None and winner.measured.reference:
        ax.axhline(winner.measured.reference_median * 1e6, linestyle="--", color="gray",
                   label=winner.measured.reference)
    ax.set_yscale("log")
    ax.set_xlabel("points, fastest first")
    ax.set_ylabel("median us per call")
    grid = outcome.script.grids[group[0]]
    ax.set_title(f"{grid.base_name} {group[1]}".strip() + (f": by {name}" if name else ""), fontsize=8)
    ax.legend(fontsize=6)
