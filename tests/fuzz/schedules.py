"""Random SIMT schedules and plans for a generated nest: splits (dividing or not, nested,
sometimes as tiles), a reorder, bindings to blocks and threads, unrolls, and SHARED / PRIVATE
caches with pipelines. Mostly legal (dependence-carrying indices stay serial), sometimes not,
so that refusals are exercised too."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .nest import Nest, choose
from .program import ArrayDecl, Binding, CacheDirective, Split, Tile, arrays_read, arrays_written, fresh_name
from .program import Program as _Program

PIPELINES = {"sync": 45, "double_buffer": 20, "registers": 15, "stages": 20}


@dataclass
class Piece:
    """A schedule index while the schedule is built: range(0, span, step) of nest index root."""

    name: str
    root: str
    span: int
    step: int = 1
    parent: str | None = None

    @property
    def extent(self) -> int:
        return -(-self.span // self.step)


@dataclass
class Plan:
    """The schedule and plan parts of a Program."""

    steps: list = field(default_factory=list)
    order: tuple[str, ...] | None = None
    bindings: list[Binding] = field(default_factory=list)
    unrolls: list[str] = field(default_factory=list)
    caches: list[CacheDirective] = field(default_factory=list)


class ScheduleBuilder:
    def __init__(self, rng: random.Random, nest: Nest, names: tuple[str, ...]) -> None:
        self.rng, self.nest = rng, nest
        self.pieces = {n: Piece(n, n, extent) for n, extent in zip(names, nest.dims)}
        self.by_root = {n: [n] for n in names}  # outer to inner
        self.taken = set(names)
        self.order = list(names)  # schedc's default order as steps are applied
        self.plan = Plan()
        self.extra: ArrayDecl | None = None  # an array in args that the nest does not use

    # -- splits -------------------------------------------------------------------------------

    def split(self, name: str, size: int) -> str:
        """Split like schedc (same new name, same place in the order); the new index."""
        piece = self.pieces[name]
        inner = Piece(fresh_name(name, piece.root, self.taken), piece.root, size, piece.step, name)
        piece.step = size
        self.pieces[inner.name] = inner
        chain = self.by_root[piece.root]
        chain.insert(chain.index(name) + 1, inner.name)
        self.order.insert(self.order.index(name) + 1, inner.name)
        return inner.name

    def split_size(self, span: int, step: int) -> int | None:
        """A size for splitting range(0, span, step): a power of two, a divisor or anything;
        rarely one past the range (one partial tile, as Accera allows)."""
        choices = [s for s in range(step, span + 1, step)]
        if len(choices) < 2:
            return None
        if self.rng.random() < 0.03:
            return self.rng.choice(range(span + step, 2 * span + 1, step))
        r = self.rng.random() + (0.3 if span > 70 else 0.0)  # long ranges: mostly sizes that do not divide
        powers = [s for s in choices if s & (s - 1) == 0 and s < span]
        divisors = [s for s in choices if span % s == 0 and s < span]
        if r < 0.45 and powers:
            return self.rng.choice(powers)
        if r < 0.65 and divisors:
            return self.rng.choice(divisors)
        return self.rng.choice(choices[:-1] if self.rng.random() < 0.9 else choices)

    def splits(self) -> None:
        """0 to 2 levels per nest index; the second levels sometimes as one tile()."""
        second: list[tuple[str, int]] = []
        for root in list(self.by_root):
            long = self.pieces[root].span > 70  # long 1-D copies: two levels that may not divide
            levels = choose(self.rng, {0: 10, 1: 30, 2: 60} if long else {0: 30, 1: 45, 2: 25})
            name = root
            for level in range(levels):
                piece = self.pieces[name]
                size = self.split_size(piece.span, piece.step)
                if size is None:
                    break
                if level == 1 and self.rng.random() < 0.4:
                    second.append((name, size))
                    break
                self.plan.steps.append(Split(name, size))
                name = self.split(name, size)
            if self.rng.random() < 0.05:
                self._split_outer_again(root)
        if second:
            self._tile(second)

    def _split_outer_again(self, root: str) -> None:
        piece = self.pieces[root]
        sizes = [s for s in range(2 * piece.step, piece.span, piece.step)]
        if piece.step > 1 and sizes:
            size = self.rng.choice(sizes)
            self.plan.steps.append(Split(root, size))
            self.split(root, size)

    def _tile(self, pairs: list[tuple[str, int]]) -> None:
        if len(pairs) == 1 or self.rng.random() < 0.3:
            for name, size in pairs:
                self.plan.steps.append(Split(name, size))
                self.split(name, size)
            return
        self.plan.steps.append(Tile(tuple(pairs)))
        inners = [self.split(name, size) for name, size in pairs]
        rest = [n for n in self.order if n not in inners]
        cut = max(rest.index(n) for n, _ in pairs) + 1
        self.order = rest[:cut] + inners + rest[cut:]

    # -- bindings -----------------------------------------------------------------------------

    def bind(self) -> None:
        """Outer pieces of parallel indices to blocks, inner pieces to threads (at most 1024)."""
        parallel = [n for n in self.by_root if n not in self.nest.carried or self.rng.random() < 0.07]
        self.rng.shuffle(parallel)
        blocks = self.rng.sample(("BLOCK_X", "BLOCK_Y", "BLOCK_Z"), 3)
        threads = self.rng.sample(("THREAD_X", "THREAD_Y", "THREAD_Z"), 3)
        block_names, budget = [], 1024
        for root in parallel:
            chain = self.by_root[root]
            if len(chain) > 1 and blocks and self.rng.random() < 0.7:
                block_names.append(chain[0])
            inner = chain[-1] if len(chain) < 3 or self.rng.random() < 0.7 else chain[1]
            take = 0.8 if len(chain) > 1 else 0.25
            extent = self.pieces[inner].extent
            if threads and extent <= budget and inner not in block_names and self.rng.random() < take:
                self.plan.bindings.append(Binding((inner,), threads.pop()))
                budget //= extent
            elif len(chain) == 1 and blocks and self.rng.random() < 0.3:
                block_names.append(chain[0])
        self._bind_blocks(block_names, blocks)
        if self.rng.random() < 0.02:
            self._bind_warp()

    def thread_reduce(self) -> None:
        """A reduction across threads, sometimes: the inner piece of a summed index (along which
        no statement writes) bound to THREAD_X in place of what was there (refused unless its
        threads are a power of two, every statement of the nest is a reduction none of the others
        reads, ...)."""
        written = {x.index for s in self.nest.statements for x in s.target.subscripts}
        roots = [n for n in self.by_root if n not in written and len(self.by_root[n]) > 1]
        chance = 0.3 if all(s.accumulate for s in self.nest.statements) else 0.02
        if not roots or self.rng.random() >= chance:
            return
        inner = self.by_root[self.rng.choice(roots)][-1]
        if self.pieces[inner].extent > 1024:
            return
        self.plan.bindings = [b for b in self.plan.bindings if b.unit != "THREAD_X" and inner not in b.indices]
        self.plan.bindings.append(Binding((inner,), "THREAD_X"))

    def split_k(self) -> None:
        """Split-K, sometimes: the outer piece of a reduction index (one along which no statement
        writes) bound to a free block unit; schedc sums the blocks' parts in a workspace and adds
        them in a second kernel (refused where a statement is not ``+=`` or the split is uneven)."""
        statements = self.nest.statements
        written = {x.index for s in statements for x in s.target.subscripts}
        roots = [n for n in self.by_root if n not in written and len(self.by_root[n]) > 1]
        even = [n for n in roots if self.pieces[n].span % self.pieces[n].step == 0]
        chance = 0.25 if all(s.accumulate for s in statements) else 0.03
        if not roots or self.rng.random() >= chance:
            return
        outer = self.by_root[self.rng.choice(even if even and self.rng.random() < 0.85 else roots)][0]
        bound = self.bound()
        free = [u for u in ("BLOCK_X", "BLOCK_Y", "BLOCK_Z") if u not in bound.values()]
        if outer not in bound and free:
            self.plan.bindings.append(Binding((outer,), self.rng.choice(free)))

    def _bind_blocks(self, names: list[str], units: list[str]) -> None:
        if len(names) >= 2 and self.rng.random() < 0.1:
            names = [tuple(names[:2]), *names[2:]]  # (i, j): BLOCK_X enumerates pairs on one axis
        for name in names[:len(units)]:
            self.plan.bindings.append(Binding(name if isinstance(name, tuple) else (name,), units.pop()))

    def _bind_warp(self) -> None:
        """A warp binding without tensorize: refused."""
        free = [n for n in self.pieces if n not in self.bound()]
        if free:
            self.plan.bindings.append(Binding((self.rng.choice(free),), "WARP_X"))

    def bound(self) -> dict[str, str]:
        return {n: b.unit for b in self.plan.bindings for n in b.indices}

    # -- order, unrolls, caches ----------------------------------------------------------------

    def reorder(self) -> None:
        """Blocks, then threads, then serial loops (each in a random order), or any order that
        keeps split pieces after their parents."""
        bound = self.bound()
        canonical = self.rng.random() < 0.6
        rank = {n: (0 if bound.get(n, "").startswith("BLOCK") else 1 if n in bound else 2) if canonical else 0
                for n in self.pieces}
        placed: list[str] = []
        while len(placed) < len(self.pieces):
            ready = [n for n, p in self.pieces.items() if n not in placed and (p.parent is None or p.parent in placed)]
            best = min(rank[n] for n in ready)
            placed.append(self.rng.choice([n for n in ready if rank[n] == best]))
        if placed != self.order or self.rng.random() < 0.5:
            self.plan.order = tuple(placed)
        self.order = placed

    def unroll(self) -> None:
        """Unroll a few short serial loops (with what they enclose, at most 64 iterations:
        NVRTC takes seconds over large unrolled bodies), rarely a bound one (refused)."""
        bound = self.bound()
        for at, name in enumerate(self.order):
            inside = math.prod(self.pieces[n].extent for n in self.order[at:] if n not in bound)
            small = inside <= 64 and name not in bound
            if (small and self.rng.random() < 0.15) or self.rng.random() < 0.01:
                self.plan.unrolls.append(name)
            if len(self.plan.unrolls) == 2:
                return

    def cache(self, program: _Program) -> None:
        """SHARED caches of read-only arrays at serial loops, or at loops bound to threads or
        blocks (Accera's: filled where the first serial loop after them starts; one pipeline per
        such place), sometimes a SHARED cache of a written array (written back after the loops)
        or a PRIVATE cache (at a serial or a bound loop), rarely a request schedc must refuse."""
        bound = self.bound()
        serial = [n for n in self.order if n not in bound]
        if not serial:
            return
        read_only = sorted(arrays_read(program) - arrays_written(program))
        pipelines: dict[str | None, tuple[str, int]] = {}
        # with few threads each copies much: register pipelines of hundreds of elements per
        # thread take NVRTC many seconds, so such plans are rare
        chance = 0.3 if self.threads() >= 32 else 0.06
        threaded = [n for n in self.order if bound.get(n, "").startswith("THREAD")]
        blocks = [n for n in self.order if bound.get(n, "").startswith("BLOCK")]
        for array in read_only:
            if self.rng.random() < chance and len(self.plan.caches) < 3:
                draw = self.rng.random()
                index = self.rng.choice(threaded if threaded and draw < 0.25 else
                                        blocks if blocks and draw < 0.35 else serial)
                at = self.order.index(index)
                place = next((n for n in self.order[at:] if n in serial), None)
                carried = any(n in serial for n in self.order[:at]) or self.rng.random() < 0.1
                pipeline = pipelines.setdefault(place, self._pipeline() if carried else ("sync", 0))
                self.plan.caches.append(CacheDirective(array, index, "SHARED", *pipeline, layout=layout(self.rng)))
        written = sorted(arrays_written(program))
        if written and self.rng.random() < chance / 3 and len(self.plan.caches) < 3:
            index = self.rng.choice(self.order)
            place = next((n for n in self.order[self.order.index(index):] if n in serial), None)
            if pipelines.setdefault(place, ("sync", 0)) == ("sync", 0):
                self.plan.caches.append(CacheDirective(self.rng.choice(written), index, "SHARED", "sync", 0,
                                                       layout=layout(self.rng)))
        shared = [c for c in self.plan.caches if c.location == "SHARED"]
        if shared and self.rng.random() < 0.3:
            self._register_tile_of(self.rng.choice(shared), serial)
        elif self.rng.random() < 0.25:
            self._private(program, serial)
        if self.rng.random() < 0.05:
            self._odd_cache(program, serial)

    def _pipeline(self) -> tuple[str, int]:
        kind = choose(self.rng, PIPELINES)
        return (kind, self.rng.randint(1, 4)) if kind == "stages" else (kind, 0)

    def _private(self, program: _Program, serial: list[str]) -> None:
        written = sorted(arrays_written(program))
        pool = written if written and self.rng.random() < 0.6 else sorted(arrays_read(program) | set(written))
        free = [a for a in pool if all(c.array != a for c in self.plan.caches)]
        if free:
            # sometimes at a loop bound to the grid (the thread's tile over the serial loops inside it)
            bound = sorted(self.bound())
            index = self.rng.choice(bound if bound and self.rng.random() < 0.3 else serial)
            self.plan.caches.append(CacheDirective(self.rng.choice(free), index, "PRIVATE"))

    def _register_tile_of(self, cache: CacheDirective, serial: list[str]) -> None:
        """A cache of a cache (Accera's hierarchical caching): each thread's register tile filled
        from the block's SHARED tile, at a serial loop inside the one where the block fills it
        (rarely at one outside: schedc must refuse that)."""
        at = self.order.index(cache.index)
        place = next((n for n in self.order[at:] if n in serial), None)
        inside = [n for n in serial if place is not None and self.order.index(n) > self.order.index(place)]
        choices = inside if inside and self.rng.random() < 0.9 else serial
        self.plan.caches.append(CacheDirective(cache.array, self.rng.choice(choices), "PRIVATE", of_shared=True))

    def _odd_cache(self, program: _Program, serial: list[str]) -> None:
        """Requests schedc must refuse: a register cache of a SIMT nest, a shared cache of a
        written array, a cache of an array the nest does not use (passed in args all the same)."""
        free = [a.name for a in program.arrays if all(c.array != a.name for c in self.plan.caches)]
        location = self.rng.choice(("MMA_FRAGMENT", "SHARED", "PRIVATE"))
        if self.rng.random() < 0.5:
            self.extra = ArrayDecl("Z", "INPUT", "float32", tuple(self.rng.randint(1, 8) for _ in program.dims))
            free = ["Z"]
        if free:
            self.plan.caches.append(CacheDirective(self.rng.choice(free), self.rng.choice(serial), location))

    def threads(self) -> int:
        bound = self.bound()
        return math.prod(self.pieces[n].extent for n, u in bound.items() if u.startswith("THREAD"))

    def iterations(self) -> int:
        return math.prod(p.extent for p in self.pieces.values())


def layout(rng) -> str:
    """Mostly none; sometimes a layout= (a transposed tile where it is not the array's)."""
    return rng.choice(("FIRST_MAJOR", "LAST_MAJOR")) if rng.random() < 0.15 else ""
