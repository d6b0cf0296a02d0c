"""Check a compiled function against the float64 reference of its nest: on the CPU emulator
(all blocks or a sample) or on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import data, poly
from .codegen.emulate import Block, Progress, emulate_sequence, sample_blocks
from .errors import PackageError
from .ir.kernel import HostFunction, Kernel
from .ir.specialize import buffer_at, function_at
from .ir.types import from_numpy, is_float_dtype
from .reference import block_dims, reference


@dataclass(frozen=True)
class Report:
    """How one written array compares with the reference."""

    function: str
    array: str
    compared: int  # elements the reference computed
    relative_error: float  # ||out - ref|| / ||ref|| over those elements
    max_abs_error: float
    worst: tuple[int, ...]  # index of the largest difference
    tolerance: float
    unwritten: int  # elements the reference wrote that the run left alone (NaN, when not known)
    extra: int  # elements the run wrote that the reference did not
    nonfinite: int = 0  # written elements NaN or infinite where the reference is finite
    overflow: int = 0  # elements whose reference overflows the element type (or is infinite): compared as infinities
    early: int = 0  # elements whose reference depends on an element the nest read before any iteration wrote it
    undefined: int = 0  # elements whose reference is NaN (log of a negative, 0 / 0): compared as NaN

    @property
    def passed(self) -> bool:
        return (
            self.unwritten == 0
            and self.early == 0
            and self.extra == 0
            and self.nonfinite == 0
            and np.isfinite(self.relative_error)
            and self.relative_error <= self.tolerance
        )

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISMATCH"
        text = (
            f"{self.function}: {self.array}: {verdict}: relative error {self.relative_error:.3e} "
            f"(tolerance {self.tolerance:.1e}), max abs error {self.max_abs_error:.3e} at "
            f"{list(self.worst)}, {self.compared} elements compared"
        )
        if self.unwritten:
            text += f"; {self.unwritten} elements never written"
        if self.nonfinite:
            text += f"; {self.nonfinite} elements NaN or infinite where the reference is finite"
        if self.overflow:
            text += (f"; {self.overflow} elements infinite in the reference or beyond the element type's range "
                     "(compared as infinities)")
        if self.undefined:
            text += f"; {self.undefined} elements NaN in the reference (compared as NaN)"
        if self.extra:
            text += f"; {self.extra} elements written outside the nest"
        if self.early:
            text += f"; {self.early} elements depend on elements the nest read before any iteration wrote them"
        return text


def checkable(name: str, model, function: HostFunction) -> None:
    """Refuse, with the reason, a function the reference cannot check: one given as kernel IR
    (no loop nest), or one with scalar parameters (the nest gives them no values)."""
    if model is None:
        raise PackageError(name, "was given as kernel IR (Package.add_function): it has no loop nest to "
                                 "compare with; call it from Python (schedc.load) and check its result there")
    if function.scalars:
        names = ", ".join(p.name for p in function.scalars)
        raise PackageError(name, f"takes scalar parameters ({names}), which the reference has no values for; "
                                 "call it from Python (schedc.load) with your values")


def default_sizes(model) -> dict[str, int]:
    """Values of a Model's run-time sizes that check its partial tiles: each size two whole
    tiles of its largest step and one element more (its loops' largest step)."""
    out = {}
    for name in model.size_names:
        steps = [lp.step for lp in model.loops if not lp.fixed and name in lp.end.variables()]
        out[name] = 2 * max(steps, default=1) + 1
    return out


EMULATED_ELEMENTS = 2**31 - 1  # the most elements an array the emulator (or the reference) allocates


def resolved_sizes(model, function: str, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """The values of the Model's run-time sizes: ``sizes`` checked (a PackageError names one
    unknown or below 1), ``default_sizes`` for those it does not give; {} for a Model without any."""
    if model is None or not model.sizes:
        return {}
    values = {**default_sizes(model), **(sizes or {})}
    unknown = sorted(set(values) - set(model.size_names))
    if unknown:
        raise PackageError(function, f"has no run-time size {unknown[0]} (its sizes: {', '.join(model.size_names)})")
    for size in model.size_names:
        if isinstance(values[size], bool) or not isinstance(values[size], int) or values[size] < 1:
            raise PackageError(function, f"run-time size {size} = {values[size]!r}: sizes are integers >= 1")
    return values


def _emulable(model, function: str, sizes: dict[str, int]) -> None:
    """Refuse arrays the CPU cannot hold (a PackageError with the array and the sizes)."""
    at = f" at {', '.join(f'{k} = {v}' for k, v in sizes.items())}" if sizes else ""
    for b in model.buffers:
        elements = buffer_at(b, sizes).size if sizes else b.size
        if elements > EMULATED_ELEMENTS:
            raise PackageError(function, f"{b.name} spans {elements} elements{at}: the CPU emulates arrays of at most "
                                         f"{EMULATED_ELEMENTS} elements (2^31 - 1); give smaller sizes")


def at_sizes(model, function: HostFunction, sizes: dict[str, int] | None = None):
    """The Model and function at run-time ``sizes`` (``resolved_sizes``); themselves when the
    function has none."""
    values = resolved_sizes(model, function.name, sizes)
    if not values:
        return model, function
    return model.at(values), function_at(function, values)


def emulate_function(model, kernel: Kernel | HostFunction, blocks: int | list[Block] | None, seed: int = 0,
                     tolerance: float | None = None, progress: Progress | None = None,
                     sizes: dict[str, int] | None = None) -> list[Report]:
    """Emulate ``kernel`` (or a function's kernels in order: every block of all but the last)
    on random inputs, on every block (None), ``blocks`` of them spread over the (last) grid, or
    the listed blocks; compare those blocks' outputs. ``progress(done, total)`` is called after
    each block. A function of run-time sizes runs at ``sizes`` (default: ``default_sizes``)."""
    function = HostFunction.single(kernel) if isinstance(kernel, Kernel) else kernel
    if model is not None:
        _emulable(model, function.name, resolved_sizes(model, function.name, sizes))
    model, function = at_sizes(model, function, sizes)
    checkable(function.name, model, function)
    if model is not None and not model.split_deterministic and model.split_sums and blocks is not None:
        # a split's parts add into C by TMA reductions: each sampled tile with all of them
        blocks = every_part(function.kernels[-1], blocks)
    arrays, outputs, written, blocks_run = _emulated(function, blocks, seed, progress)
    early = None
    if blocks is None:
        expected, touched = reference(model, arrays)
        early = early_reads(model, arrays, expected)
    elif len(function.kernels) > 1:
        # a function of several kernels: its last one's blocks are not the plan's (split-K's combine
        # runs over rows of C), so the whole reference, compared where the sampled blocks wrote
        expected, everywhere = reference(model, arrays)
        touched = {name: mask & written[name] for name, mask in everywhere.items()}
    else:
        expected, touched = _sampled_reference(model, arrays, computed_tiles(function.kernels[-1], blocks_run),
                                               whole_sums=not model.split_deterministic)
    return compare(model, outputs, expected, touched, written, tolerance, early)


def every_part(kernel: Kernel, blocks: int | list[Block]) -> list[Block] | None:
    """Sampled blocks of a split-K whose parts add into C by TMA reductions, with the other parts
    of their tiles (every BLOCK_Z of the same x and y), so that a compared tile holds its whole
    sum; every block of a persistent grid, whose resident blocks share each tile's parts."""
    if kernel.persistent is not None:
        return None
    grid = kernel.grid
    listed = sample_blocks(grid, blocks) if isinstance(blocks, int) else blocks
    return sorted({(x, y, z) for x, y, _ in listed for z in range(grid[2])}, key=lambda block: block[::-1])


def _emulated(function: HostFunction, blocks, seed: int, progress: Progress | None = None):
    """The inputs of ``seed``, the emulated outputs and what was written, and the blocks run."""
    params = function.arrays
    arrays = data.inputs(params, seed)
    storage = {b.name: data.to_storage(b, arrays[b.name]) for b in params}
    run = emulate_sequence(function, storage, blocks, progress)
    outputs = {b.name: data.from_storage(b, run.storage[b.name]) for b in params}
    written = {b.name: data.from_storage(b, run.written[b.name]) for b in params}
    return arrays, outputs, written, run.blocks


def run_function(fn, seed: int = 0, tolerance: float | None = None,
                 sizes: dict[str, int] | None = None) -> list[Report]:
    """Run a loaded function on the GPU on random inputs (numpy arrays in each parameter's
    layout, of run-time ``sizes`` where it has them); compare the whole output with the reference."""
    model, function = at_sizes(fn.model, fn.function, sizes)
    checkable(fn.name, model, function)
    arrays, outputs = _on_device(fn, seed, model, function)
    expected, touched = reference(model, arrays)
    return compare(model, outputs, expected, touched, tolerance=tolerance,
                   early=early_reads(model, arrays, expected))


def compare_with_emulator(fn, seed: int = 0, tolerance: float | None = None,
                          sizes: dict[str, int] | None = None) -> list[Report]:
    """The GPU's outputs against the emulator's (every block), element for element, on the same
    inputs, over the elements the emulated kernel wrote: where they differ, the emulator and
    the hardware disagree about the kernel (an emulator error, a race or an out-of-bounds access
    it catches, propagates)."""
    model, function = at_sizes(fn.model, fn.function, sizes)
    checkable(fn.name, model, function)
    _, device = _on_device(fn, seed, model, function)
    _, emulated, written, _ = _emulated(function, None, seed)
    stored = {s.buffer for s in model.statements}
    touched = {name: mask for name, mask in written.items() if name in stored}
    return compare(model, device, emulated, touched, tolerance=tolerance)


def _on_device(fn, seed: int, model, function: HostFunction):
    """The inputs of ``seed`` (shaped as ``function``'s arrays: the loaded function at its
    run-time sizes) and the arrays after one call of ``fn`` on them."""
    params = function.arrays
    arrays = data.inputs(params, seed)
    written = {s.buffer for s in model.statements}
    outputs = {b.name: data.copy(b, arrays[b.name]) if b.name in written else arrays[b.name]
               for b in params}  # the same values; the GPU writes the copies
    fn(*(outputs[b.name] for b in params))
    return arrays, outputs


def computed_tiles(kernel: Kernel, blocks: list[Block], limit: int | None = None) -> list[Block]:
    """The tiles (coordinates of the plan's block bindings) that ``blocks`` of ``kernel``
    compute: the blocks themselves, or on a persistent grid each block's tiles in grouped order
    (its first ``limit``)."""
    if kernel.persistent is None:
        return blocks
    return [tile for block in blocks for tile in kernel.persistent.tiles_of(block[0], limit)]


def _sampled_reference(model, arrays, blocks, whole_sums: bool = False):
    """The reference of the elements ``blocks`` compute, block by block; ``whole_sums``: the
    blocks of one tile's split-K parts (the same x and y, every z) together, as their TMA
    reductions add into one tile."""
    facts = poly.analyze(model)
    arrays = {name: np.asarray(a, dtype=_wide(a.dtype)) for name, a in arrays.items()}  # convert once
    expected = {name: np.array(a, dtype=np.float64) for name, a in arrays.items()}
    touched: dict[str, np.ndarray] = {}
    regions = [block_dims(model, facts, block) for block in blocks]
    if whole_sums:
        tiles: dict[tuple, dict] = {}
        for block, dims in zip(blocks, regions):
            tile = tiles.setdefault(block[:2], {})
            for d, v in dims.items():
                tile[d] = np.union1d(tile[d], v) if d in tile else v
        regions = list(tiles.values())
    for dims in regions:
        values, mask = reference(model, arrays, dims)
        for name, m in mask.items():  # a TEMP array (scratch, not compared) starts as the reference's own
            expected[name] = np.where(m, values[name], expected.get(name, values[name]))
            touched[name] = touched.get(name, np.zeros_like(m)) | m
    return expected, touched


def _wide(dtype: np.dtype) -> type:
    return np.float64 if is_float_dtype(dtype) else np.int64


def early_reads(model, arrays, expected) -> dict[str, np.ndarray]:
    """Per array, the elements of the reference ``expected`` (of ``arrays``) that depend on an
    element the nest reads before any iteration writes it: the reference again with another
    poison in the OUTPUT and TEMP arrays the statements read (not a tensorized C whose fragments
    start at a value), where it differs. Empty where the nest reads none (one reference only).
    The analysis refuses such nests; this catches what it would miss."""
    poisoned = [model.buffer(name) for name in model.undefined_reads]
    if not poisoned:
        return {}
    other = {**arrays, **{b.name: np.full(b.shape, 0.5 if b.dtype.is_float else 3, dtype=_wide(b.dtype.numpy))
                          for b in poisoned}}
    again, _ = reference(model, other)
    return {name: ~_same(a, again[name]) for name, a in expected.items() if name in again}


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality, NaN equal to NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if not (is_float_dtype(a.dtype) and is_float_dtype(b.dtype)):
        return a == b
    return (a == b) | (np.isnan(a) & np.isnan(b))


def compare(model, outputs, expected, touched, written=None, tolerance=None, early=None) -> list[Report]:
    """One report per written parameter: the outputs against the reference over the elements the
    reference touched (``written``, where known, the elements the run wrote); ``early``
    (``early_reads``), where known, counts the elements that depend on a read before a
    write."""
    visible = {b.name for b in model.buffers if b.kind == "param"}  # TEMP scratch is internal
    reports = []
    for name, mask in sorted(touched.items()):
        if name not in visible:
            continue
        tol = data.tolerance_for(data.precisions(model, name)) if tolerance is None else tolerance
        was_written = None if written is None else written[name]
        t = _tally(outputs[name], expected[name], mask, was_written)
        relative = float("nan") if t.bad else (t.err2 ** 0.5 / t.ref2 ** 0.5 if t.ref2 else t.err2 ** 0.5)
        unwritten = t.unwritten if was_written is not None else t.unwritten + t.bad  # NaN: the poison
        nonfinite = t.bad if was_written is not None else 0
        dependent = (early or {}).get(name)
        reports.append(Report(model.function, name, t.compared, relative, t.worst_abs, t.worst, tol,
                              unwritten, t.extra, nonfinite, t.overflow,
                              0 if dependent is None else int((dependent & mask).sum()), t.undefined))
    return reports


_CHUNK = 1 << 22  # elements compared at a time: the comparison holds a few chunks, not arrays


@dataclass
class _Tally:
    compared: int = 0
    bad: int = 0  # compared elements NaN or infinite in the output where the reference is not
    overflow: int = 0  # compared elements whose reference is beyond the output type's range (or infinite)
    undefined: int = 0  # compared elements whose reference is NaN
    unwritten: int = 0  # compared elements the run did not write
    extra: int = 0  # elements the run wrote outside the reference's
    ref2: float = 0.0  # sum of squares of the reference
    err2: float = 0.0  # sum of squares of the finite differences
    worst_abs: float = 0.0
    worst: tuple[int, ...] = ()


def _tally(out, ref, mask, written) -> _Tally:
    """Error sums of ``out`` against ``ref`` over ``mask``, a block of rows at a time (in C
    order, so that the first largest difference is the one reported)."""
    scalar = np.ndim(mask) == 0
    out, ref, mask = (np.asarray(a).reshape(np.shape(a) or (1,)) for a in (out, ref, mask))
    if written is not None:
        written = np.asarray(written).reshape(mask.shape)
    t = _Tally(worst=(0,) * mask.ndim)
    rows = max(1, _CHUNK // max(1, int(np.prod(mask.shape[1:]))))
    limit = _largest(out.dtype)
    for start in range(0, mask.shape[0], rows):
        part = slice(start, start + rows)
        m, o = mask[part], np.asarray(out[part], dtype=np.float64)
        r = np.asarray(ref[part], dtype=np.float64)
        beyond = ~(np.abs(r) <= limit)  # the reference overflows the type (or is itself NaN)
        if written is None and _plain(t, m, o, r, beyond, start):
            continue
        r = np.where(beyond & ~np.isnan(r), np.copysign(np.inf, r), r)  # as the type would hold it
        agree = beyond & ((o == r) | (np.isnan(o) & np.isnan(r)))
        finite = np.isfinite(o) | agree
        with np.errstate(invalid="ignore"):  # inf - inf where they agree: masked out
            diff = np.where(m & ~agree, o - r, 0.0)
        t.compared += int(m.sum())
        undefined = m & np.isnan(r)
        t.overflow += int((m & beyond).sum()) - int(undefined.sum())
        t.undefined += int(undefined.sum())
        t.bad += int((m & ~finite).sum())
        if written is not None:
            w = written[part]
            t.unwritten += int((m & ~w).sum())
            t.extra += int((w & ~m).sum())
        kept = r[m & ~beyond]
        t.ref2 += float(np.dot(kept, kept))
        good = diff[m & finite]
        t.err2 += float(np.dot(good, good))
        absolute = np.abs(np.where(np.isfinite(diff), diff, np.inf))
        at = int(np.argmax(absolute)) if absolute.size else 0
        if absolute.size and (absolute.flat[at] > t.worst_abs or start == 0):
            t.worst_abs = float(absolute.flat[at])
            local = np.unravel_index(at, absolute.shape)
            t.worst = (int(local[0]) + start, *(int(x) for x in local[1:]))
    if scalar:
        t.worst = ()
    return t


def _plain(t: _Tally, m, o, r, beyond, start: int) -> bool:
    """Tally a chunk where every element is compared, the reference is within the type's range
    and the output finite (the usual case) in fewer passes than the general one; False (nothing
    tallied) for any other chunk."""
    if not (m.all() and not beyond.any() and np.isfinite(o).all()):
        return False
    diff = (o - r).ravel()
    flat = r.ravel()
    t.compared += diff.size
    t.ref2 += float(np.dot(flat, flat))
    t.err2 += float(np.dot(diff, diff))
    absolute = np.abs(diff)
    at = int(np.argmax(absolute)) if absolute.size else 0
    if absolute.size and (absolute[at] > t.worst_abs or start == 0):
        t.worst_abs = float(absolute[at])
        local = np.unravel_index(at, o.shape)
        t.worst = (int(local[0]) + start, *(int(x) for x in local[1:]))
    return True


def _largest(dtype: np.dtype) -> float:
    """The largest finite value of a floating-point type (infinity for others)."""
    if is_float_dtype(dtype):
        return from_numpy(dtype).float_format.largest
    return np.inf
