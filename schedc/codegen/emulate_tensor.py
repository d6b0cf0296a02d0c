"""Emulated tensor-core tile statements, one executor per instruction family.

The emulator (emulate.py) checks that a tile statement runs on whole warps and hands it to the
executor of the fragment's family with the warps that run it. wmma's lane layout is opaque, so
its fragments are whole tiles per warp. mma.sync's fragments are per lane, as the hardware
holds them: (warps, 32 lanes, elements), filled by ldmatrix's documented row distribution and
multiplied by each instruction's documented lane layout, so that a lane-mapping mistake in the
lowering or the table gives a wrong result here, on the CPU.
"""

from __future__ import annotations

import numpy as np

from ..instructions import MMA_SYNC, LaneLayout, ldmatrix_plan, swizzled
from ..ir.kernel import (
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    Stmt,
)
from ..ir.numeric import converted, round_tf32
from ..ir.registry import Registry

WARP = 32
LANES = np.arange(WARP)


TILE_STATEMENTS = Registry("tile statement executor")  # one method of Executor per tile statement class


class Executor:
    """What every family's executor does alike: fragments declared and filled, prologue and
    epilogue ops; a family supplies ``shape`` (a fragment's array per warp), ``mma``, ``load``
    and ``store``."""

    def __init__(self, block) -> None:
        self.b = block

    def run(self, s: Stmt, mask: np.ndarray, active: np.ndarray) -> None:
        TILE_STATEMENTS.handler(s)(self, s, mask, active)

    @TILE_STATEMENTS.handles(Fragment)
    def _declared(self, s: Fragment, mask: np.ndarray, active: np.ndarray) -> None:
        self.b.specs[s.name] = s
        self.declare(s, active)

    @TILE_STATEMENTS.handles(FragmentFill)
    def _filled(self, s: FragmentFill, mask: np.ndarray, active: np.ndarray) -> None:
        frag = self.b.fragments[s.fragment]
        frag[active] = frag.dtype.type(s.value)

    @TILE_STATEMENTS.handles(FragmentApply)
    def _applied(self, s: FragmentApply, mask: np.ndarray, active: np.ndarray) -> None:
        self.apply(s, active)

    @TILE_STATEMENTS.handles(FragmentMap)
    def _mapped(self, s: FragmentMap, mask: np.ndarray, active: np.ndarray) -> None:
        layout, lanes = self.element_layout(self.b.specs[s.fragment])
        self.b.map_elements(s, mask, layout, lanes)

    def element_layout(self, spec: Fragment) -> tuple[LaneLayout, int]:
        """Where an accumulator's elements lie: the lane layout and the threads it spans."""
        raise self.b.error("opaque tile", f"{spec.family} places no element of {spec.name} in its lanes: a fused "
                           "epilogue needs a family with lane layouts", [0], spec.name, "-")

    @TILE_STATEMENTS.handles(FragmentAdd)
    def _added(self, s: FragmentAdd, mask: np.ndarray, active: np.ndarray) -> None:
        self.add(s, active)

    @TILE_STATEMENTS.handles(FragmentConvert)
    def _converted(self, s: FragmentConvert, mask: np.ndarray, active: np.ndarray) -> None:
        self.convert(s, active)

    def convert(self, s: FragmentConvert, active: np.ndarray) -> None:
        raise self.b.error("no register tile", f"{self.b.specs[s.fragment].family} holds no A tile in registers: "
                           f"{s.source} cannot feed {s.fragment}", [0], s.fragment, "-")

    @TILE_STATEMENTS.handles(FragmentMma)
    def _multiplied(self, s: FragmentMma, mask: np.ndarray, active: np.ndarray) -> None:
        self.mma(s, mask, active)

    def declare(self, s: Fragment, active: np.ndarray) -> None:
        self.b.fragments[s.name] = np.zeros((len(active), *self.shape(s)), dtype=_tile_dtype(s))

    def apply(self, s: FragmentApply, active: np.ndarray) -> None:
        self.b.apply(s, active)

    def add(self, s: FragmentAdd, active: np.ndarray) -> None:
        self.b.add(s, active)

    @TILE_STATEMENTS.handles(FragmentLoad)
    def _loaded(self, s: FragmentLoad, mask: np.ndarray, active: np.ndarray) -> None:
        self.load(s, mask, active)

    @TILE_STATEMENTS.handles(FragmentStore)
    def _stored(self, s: FragmentStore, mask: np.ndarray, active: np.ndarray) -> None:
        self.store(s, mask, active)


class Wmma(Executor):
    """Whole tiles per warp: (warps, rows, cols)."""

    @staticmethod
    def shape(f: Fragment) -> tuple[int, ...]:
        return _tile_shape(f)

    def mma(self, s: FragmentMma, mask, active) -> None:
        b = self.b
        a, x, c = (b.fragments[n][active] for n in (s.a, s.b, s.c))
        b.fragments[s.d][active] = multiply(a, x, c, b.fragments[s.d].dtype)

    def load(self, s: FragmentLoad, mask, active) -> None:
        self.b.tile_load(s, mask, active)

    def store(self, s: FragmentStore, mask, active) -> None:
        self.b.tile_store(s, mask, active)


class MmaSync(Executor):
    """Per-lane fragments: (warps, 32, elements) in the family's lane layout."""

    @staticmethod
    def shape(f: Fragment) -> tuple[int, ...]:
        return WARP, lane_layout(f).elements

    def element_layout(self, spec: Fragment) -> tuple[LaneLayout, int]:
        return lane_layout(spec), WARP

    # -- moving tiles --

    def base(self, buffer: str, origin, mask, active, edge) -> np.ndarray:
        """Each active warp's tile origin as a storage offset (warp-uniform)."""
        b = self.b
        if edge is None:
            start = b.offset(buffer, origin, mask)
        else:  # an edge tile's origin may itself lie past the array
            spec = b.buffers[buffer]
            start = sum((b.expr(sub) * stride for sub, stride in zip(origin, spec.strides)), np.int64(0))
        return b._uniform(start, mask, active, buffer)

    def positions(self, layout: LaneLayout, base: np.ndarray, row_stride: int, col_stride: int):
        """(warps, lanes, elements) offsets of the fragment's elements, and their rows and cols."""
        e = np.arange(layout.elements)[None, :]
        rows, cols = layout.row(LANES[:, None], e), layout.col(LANES[:, None], e)
        return base[:, None, None] + (rows * row_stride + cols * col_stride)[None], rows, cols

    def load(self, s: FragmentLoad, mask, active) -> None:
        b = self.b
        spec = b.specs[s.fragment]
        base = self.base(s.buffer, s.origin, mask, active, s.edge)
        if s.path == "ldmatrix":
            values = self.ldmatrix(s, spec, base, active)
        else:
            offsets, rows, cols = self.positions(lane_layout(spec), base, s.row_stride, s.col_stride)
            inside = self.inside(s, rows, cols, mask, active, offsets.shape)
            self.check_vectors(s, offsets, inside, active)
            values = self.read(s.buffer, offsets, inside, active)
        if spec.precision == "tf32":
            values = round_tf32(values.astype(np.float32))
        frag = b.fragments[s.fragment]
        frag[active] = values.astype(frag.dtype)

    def store(self, s: FragmentStore, mask, active) -> None:
        b = self.b
        spec = b.specs[s.fragment]
        base = self.base(s.buffer, s.origin, mask, active, s.edge)
        offsets, rows, cols = self.positions(lane_layout(spec), base, s.row_stride, s.col_stride)
        inside = self.inside(s, rows, cols, mask, active, offsets.shape)
        self.check_bounds(s.buffer, offsets, inside, active)
        self.check_vectors(s, offsets, inside, active)
        flat = offsets[inside]
        unique, counts = np.unique(flat, return_counts=True)
        if len(unique) != len(flat):
            element = int(unique[counts > 1][0])
            warps = np.flatnonzero(active)[np.flatnonzero(((offsets == element) & inside).any(axis=(1, 2)))]
            raise b.error("race", "two lanes or warps store the same element in one step",
                          [int(w) * WARP for w in warps], s.buffer, element)
        values = b.fragments[s.fragment][active][inside]
        if s.buffer in b.shared.buffers:
            owners = self.owners(offsets, active)[inside]
            b.shared.write(s.buffer, self.physical(s.buffer, flat), converted(values, b.buffers[s.buffer].dtype),
                           owners, same=_warp)
            return
        memory = b.memory[s.buffer]
        memory[flat] = converted(values, b.buffers[s.buffer].dtype)
        b.mark_written(s.buffer, flat)

    def inside(self, s, rows, cols, mask, active, shape) -> np.ndarray:
        """Which elements lie inside the array: all, or those within a C tile's edge."""
        inside = np.ones(shape, dtype=bool)
        if s.edge is not None:
            b = self.b
            rows_in = b._uniform(b.expr(s.edge.rows), mask, active, s.buffer)
            cols_in = b._uniform(b.expr(s.edge.cols), mask, active, s.buffer)
            inside = (rows[None] < rows_in[:, None, None]) & (cols[None] < cols_in[:, None, None])
        return inside

    def read(self, buffer: str, offsets: np.ndarray, inside: np.ndarray, active) -> np.ndarray:
        b = self.b
        self.check_bounds(buffer, offsets, inside, active)
        values = np.zeros(offsets.shape, dtype=b.buffers[buffer].dtype.numpy)
        if buffer in b.shared.buffers:
            owners = self.owners(offsets, active)[inside]
            values[inside] = b.shared.read(buffer, self.physical(buffer, offsets[inside]), owners, same=_warp)
        else:
            values[inside] = b.memory[buffer][offsets[inside]]
        return values

    def ldmatrix(self, s: FragmentLoad, spec: Fragment, base: np.ndarray, active) -> np.ndarray:
        """ldmatrix as the hardware runs it: lane 8j+r gives the address of row r of matrix j;
        without .trans lane l receives row l//4, elements 2(l%4), 2(l%4)+1 (16-bit) or l%4
        (32-bit) of each matrix; with .trans, column l//4, rows 2(l%4), 2(l%4)+1."""
        b = self.b
        layout = lane_layout(spec)
        plan = ldmatrix_plan(layout, s.row_stride, s.col_stride)
        if plan is None:
            raise b.error("ldmatrix", f"{s.fragment} cannot be loaded by ldmatrix with strides "
                          f"{s.row_stride}, {s.col_stride}", [0], s.buffer, "-")
        per_row = 128 // layout.bits  # elements in a 16-byte row
        size = b.buffers[s.buffer].dtype.size
        out = np.zeros((len(base), WARP, layout.elements), dtype=b.buffers[s.buffer].dtype.numpy)
        for group in plan:
            providers = LANES[:8 * group.count]
            starts = base[:, None] + (group.row(providers) * s.row_stride + group.col(providers) * s.col_stride)
            physical = self.physical(s.buffer, starts)
            if (physical * size % 16).any():
                w, lane = np.argwhere(physical * size % 16)[0]
                raise b.error("misaligned ldmatrix", "a row address is not 16-byte aligned",
                              [int(np.flatnonzero(active)[w]) * WARP + int(lane)], s.buffer, int(starts[w, lane]))
            logical = starts[:, :, None] + np.arange(per_row)[None, None, :]  # (warps, 8*count, per_row)
            rows = self.read(s.buffer, logical, np.ones(logical.shape, dtype=bool), active)
            rows = rows.reshape(len(base), group.count, 8, per_row)
            for j in range(group.count):
                q = group.first + j
                for h in range(layout.per_register):
                    e = q * layout.per_register + h
                    if group.trans:
                        out[:, :, e] = rows[:, j, 2 * (LANES % 4) + h, LANES // 4]
                    else:
                        out[:, :, e] = rows[:, j, LANES // 4, (LANES % 4) * layout.per_register + h]
        return out

    def check_vectors(self, s, offsets, inside, active) -> None:
        """Elements moved ``s.vector`` at a time: each run starts aligned to its width and lies
        wholly inside or wholly outside the array."""
        width = s.vector
        if width == 1:
            return
        runs = offsets.reshape(*offsets.shape[:2], -1, width)
        split = inside.reshape(runs.shape).any(axis=3) & ~inside.reshape(runs.shape).all(axis=3)
        bad = (runs[..., 0] % width != 0) | (runs != runs[..., :1] + np.arange(width)).any(axis=3) | split
        if bad.any():
            w, lane, _ = np.argwhere(bad)[0]
            raise self.b.error("misaligned vector", f"a lane's {width} elements are not one aligned vector "
                               "inside the array", [int(np.flatnonzero(active)[w]) * WARP + int(lane)],
                               s.buffer, int(runs[w, lane, np.argwhere(bad)[0][2], 0]))

    def check_bounds(self, buffer: str, offsets, inside, active) -> None:
        size = self.b.buffers[buffer].size
        bad = ((offsets < 0) | (offsets >= size)) & inside
        if bad.any():
            w = int(np.flatnonzero(active)[np.argwhere(bad)[0][0]])
            raise self.b.error("out of bounds", f"a tile reaches outside {buffer} (size {size})",
                               [w * WARP], buffer, int(offsets[bad][0]))

    def physical(self, buffer: str, offsets: np.ndarray) -> np.ndarray:
        return swizzled(offsets, self.b.buffers[buffer])

    @staticmethod
    def owners(offsets: np.ndarray, active) -> np.ndarray:
        """The first thread of the warp that reads or writes each element."""
        warps = np.flatnonzero(active) * WARP
        return np.broadcast_to(warps.reshape((-1,) + (1,) * (offsets.ndim - 1)), offsets.shape)

    # -- the product --

    def mma(self, s: FragmentMma, mask, active) -> None:
        """Each instruction on its registers, by the instruction's own lane layouts."""
        b = self.b
        a_spec, c_spec = b.specs[s.a], b.specs[s.c]
        precision, acc = a_spec.precision, c_spec.dtype
        layouts = [MMA_SYNC.instruction_layout(use, precision, acc if use == "accumulator" else None)
                   for use in ("matrix_a", "matrix_b", "accumulator")]
        a, x, c = (b.fragments[n][active] for n in (s.a, s.b, s.c))
        d = c.copy()
        for a0, b0, c0 in MMA_SYNC.instructions((a_spec.m, a_spec.n, a_spec.k), precision, acc):
            mats = [gather(frag[:, :, first:first + layout.elements], layout)
                    for frag, first, layout in zip((a, x, c), (a0, b0, c0), layouts)]
            product = multiply(*mats, b.fragments[s.d].dtype)
            d[:, :, c0:c0 + layouts[2].elements] = scatter(product, layouts[2])
        b.fragments[s.d][active] = d


def gather(lanes: np.ndarray, layout: LaneLayout) -> np.ndarray:
    """(warps, 32, elements) in a lane layout → (warps, rows, cols) matrices."""
    e = np.arange(layout.elements)[None, :]
    rows, cols = layout.row(LANES[:, None], e), layout.col(LANES[:, None], e)
    out = np.zeros((lanes.shape[0], layout.rows, layout.cols), dtype=lanes.dtype)
    out[:, rows, cols] = lanes
    return out


def scatter(matrix: np.ndarray, layout: LaneLayout) -> np.ndarray:
    e = np.arange(layout.elements)[None, :]
    return matrix[:, layout.row(LANES[:, None], e), layout.col(LANES[:, None], e)]


def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """d = a @ b + c per warp: integers exactly, floats in float32 (the tensor cores' products
    of fp16/bf16/tf32 are exact in it), rounded to the accumulator's type."""
    if np.dtype(dtype).kind == "i":
        return a.astype(np.int64) @ b.astype(np.int64) + c
    return (a.astype(np.float32) @ b.astype(np.float32) + c.astype(np.float32)).astype(dtype)


def lane_layout(f: Fragment) -> LaneLayout:
    return MMA_SYNC.tile_layout(f.use, (f.m, f.n, f.k), f.precision, f.dtype if f.use == "accumulator" else None)


def _warp(threads: np.ndarray) -> np.ndarray:
    return threads // WARP


def _tile_shape(f: Fragment) -> tuple[int, int]:
    return {"matrix_a": (f.m, f.k), "matrix_b": (f.k, f.n), "accumulator": (f.m, f.n)}[f.use]


def _tile_dtype(f: Fragment) -> np.dtype:
    if f.use == "accumulator":
        return f.dtype.numpy
    return np.dtype(np.int32) if f.precision in ("s8", "u8") else np.dtype(np.float32)


EXECUTORS = {"wmma": Wmma, "mma_sync": MmaSync}
