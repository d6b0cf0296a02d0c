"""Tensor-core instruction families as data, beside the target table.

A family is how a warp multiplies tiles on the tensor cores: which operand types, accumulators
and shapes it takes, the architecture it needs, where its operands may come from, and (where
the hardware documents it) which lane holds which element of each operand: its *lane layout*.
Matching, checks, resource estimates, the CUDA emitters and the emulator read this table; a
new family is one entry here, one emitter, one executor and their tests.

A lane layout is a pair of functions ``(lane, e) -> row`` and ``(lane, e) -> col`` written with
``+ * // %`` only, so that one definition serves three readers: the emulator evaluates it on
numpy arrays of lanes, the CUDA emitter on symbolic values (``Sym``) that build kernel-IR
expressions, and ldmatrix planning on plain integers.

>>> a = MMA_SYNC.tile_layout("matrix_a", (16, 16, 16), "fp16")
>>> a.elements, [(a.row(5, e), a.col(5, e)) for e in range(4)]
(8, [(1, 2), (1, 3), (9, 2), (9, 3)])
>>> from schedc.targets import Model
>>> family_for(Target(Model.NVIDIA_H100), ScalarType.float16, ScalarType.float32,
...            MMAShape.M16xN16xK16_B1, Instruction.AUTO).name
'mma_sync'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import PlanError
from .ir.kernel import FAMILY_FACTS, Binary, Const, Expr
from .ir.types import ScalarType
from .targets import WGMMA_16, WGMMA_FP8, WGMMA_INT8, WGMMA_TF32, Instruction, MMAShape, Target

# -- lane layouts ------------------------------------------------------------------------------

Index = Callable[[object, object], object]  # (lane, e) -> row or column, on ints, arrays or Sym


@dataclass(frozen=True)
class LaneLayout:
    """Element ``e`` (0 <= e < elements) of lane ``lane`` holds the tile's element
    ``(row(lane, e), col(lane, e))``; ``bits`` is the width of one element in its register."""

    rows: int
    cols: int
    elements: int
    row: Index
    col: Index
    bits: int

    @property
    def per_register(self) -> int:
        return 32 // self.bits

    @property
    def registers(self) -> int:
        return self.elements // self.per_register


def column_elements(layout: LaneLayout, lanes: int, first: int, last: int) -> tuple[int, int]:
    """The elements ``e0 .. e1 - 1`` that hold a tile's columns ``first .. last - 1`` in every
    lane; ValueError when those columns are not one such run of elements.

    >>> column_elements(wgmma_accumulator(256), 128, 64, 128)
    (32, 64)
    """
    import numpy as np

    lane, e = np.arange(lanes)[:, None], np.arange(layout.elements)[None, :]
    inside = (layout.col(lane, e) >= first) & (layout.col(lane, e) < last)
    runs = {tuple(np.flatnonzero(row)) for row in inside}
    run = runs.pop() if len(runs) == 1 else ()
    if not run or list(run) != list(range(run[0], run[-1] + 1)):
        raise ValueError(f"columns {first}..{last - 1} are not one run of every lane's elements")
    return int(run[0]), int(run[-1]) + 1


def _a16(lane, e):
    return lane // 4 + 8 * ((e // 2) % 2), 2 * (lane % 4) + e % 2 + 8 * (e // 4)


def _b16(lane, e):
    return 2 * (lane % 4) + e % 2 + 8 * (e // 2), lane // 4


def _a32(lane, e):
    return lane // 4 + 8 * (e % 2), lane % 4 + 4 * (e // 2)


def _b32(lane, e):
    return lane % 4 + 4 * e, lane // 4


def _a8(lane, e):
    return lane // 4 + 8 * (e // 4), 4 * (lane % 4) + e % 4


def _b8(lane, e):
    return 4 * (lane % 4) + e, lane // 4


def _a8k32(lane, e):
    return lane // 4 + 8 * ((e // 4) % 2), 4 * (lane % 4) + e % 4 + 16 * (e // 8)


def _b8k32(lane, e):
    return 4 * (lane % 4) + e % 4 + 16 * (e // 4), lane // 4


def _c(lane, e):
    return lane // 4 + 8 * (e // 2), 2 * (lane % 4) + e % 2


def _wgmma_c(n: int):
    """wgmma's accumulator of a 64 x n tile over the warpgroup's 128 threads: warp w holds rows
    16w..16w+15, each 8-column block laid out as mma.sync's accumulator."""
    def f(lane, e):
        return 16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), 8 * (e // 4) + 2 * (lane % 4) + e % 2
    return f


def _layout(rows, cols, elements, f, bits) -> LaneLayout:
    return LaneLayout(rows, cols, elements, lambda lane, e: f(lane, e)[0], lambda lane, e: f(lane, e)[1], bits)


# one mma.sync instruction's operands (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8";
# 8-bit integers: "... for mma.m16n8k16 with integer type"; 8-bit floats: "... for mma.m16n8k32")
_MMA_SYNC_LAYOUTS = {
    **{("matrix_a", p): _layout(16, 32, 16, _a8k32, 8) for p in ("e4m3", "e5m2")},
    **{("matrix_b", p): _layout(32, 8, 8, _b8k32, 8) for p in ("e4m3", "e5m2")},
    ("matrix_a", 8): _layout(16, 16, 8, _a8, 8),
    ("matrix_b", 8): _layout(16, 8, 4, _b8, 8),
    ("matrix_a", 16): _layout(16, 16, 8, _a16, 16),
    ("matrix_b", 16): _layout(16, 8, 4, _b16, 16),
    ("matrix_a", 32): _layout(16, 8, 4, _a32, 32),
    ("matrix_b", 32): _layout(8, 8, 2, _b32, 32),
    ("accumulator", 32): _layout(16, 8, 4, _c, 32),
    ("accumulator", 16): _layout(16, 8, 4, _c, 16),
}


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """Operands of one type multiplied into one of ``accumulators``; ``precision`` is what the
    hardware multiplies in; ``mnk`` the instruction's own shape."""

    operand: ScalarType
    accumulators: tuple[ScalarType, ...]
    precision: str
    shapes: tuple[MMAShape, ...]  # warp tiles (plan.tensorize's mma_shape) the family builds
    mnk: tuple[int, int, int]
    transposes: bool = True  # reads operand tiles whose m or n is contiguous (wgmma's tf32 and fp8: k only)
    min_sm: int = 0  # a mode newer than its family (mma.sync's 8-bit floats: sm_89)


@dataclass(frozen=True)
class Family:
    """One row of the instruction table."""

    name: str
    instruction: Instruction
    summary: str
    issued_by: str  # "warp" (a warpgroup family will say so)
    min_sm: int
    modes: tuple[Mode, ...]
    speed: int  # AUTO prefers the higher
    operand_align: int  # bytes a tile's first element needs in memory (0: any element)
    leading_bytes: int  # a tile's leading dimension is a multiple of this (0: any)
    edge_scratch: bool  # partial accumulator tiles go through the warp's slice of shared memory
    swizzles: bool  # shared operand tiles are XOR-swizzled (False: rows padded)
    layouts: dict | None = None  # (use, bits) -> LaneLayout of one instruction; None: opaque
    opaque: bool = False  # which lane holds which accumulator element is not said (a fused epilogue cannot run)
    arch_specific: bool = False  # needs sm_<min_sm>a, the architecture-specific target (wgmma: sm_90a)

    def mode(self, operand: ScalarType, accumulator: ScalarType, shape: MMAShape) -> Mode | None:
        for mode in self.modes:
            if mode.operand == operand and accumulator in mode.accumulators and shape in mode.shapes:
                return mode
        return None

    def transposes(self, precision: str) -> bool:
        """Whether the family's instructions of ``precision`` read m- or n-major operand tiles."""
        return all(m.transposes for m in self.modes if m.precision == precision)

    def tile_layout(self, use: str, mnk: tuple[int, int, int], precision: str,
                    accumulator: ScalarType | None = None) -> LaneLayout:
        """The lane layout of a whole warp tile: instructions side by side (A along m, B along
        n, C row by row of instructions), each instruction's elements consecutive."""
        one = self.instruction_layout(use, precision, accumulator)
        im, in_, _ = self.instruction_shape(precision, mnk[2])
        m, n, _ = mnk
        if use == "matrix_a":
            return _stacked(one, m // im, 1)
        if use == "matrix_b":
            return _stacked(one, 1, n // in_)
        return _stacked(one, m // im, n // in_)

    def instruction_layout(self, use: str, precision: str, accumulator: ScalarType | None = None) -> LaneLayout:
        """One instruction's layout of ``use``: the precision's own (mma.sync's k32 8-bit floats),
        else by the element's width."""
        if use != "accumulator" and (use, precision) in self.layouts:
            return self.layouts[use, precision]
        bits = (accumulator.size * 8 if accumulator is not None else 32) if use == "accumulator" \
            else OPERAND_BITS.get(precision, 16)
        return self.layouts[use, bits]

    def instruction_shape(self, precision: str, k: int = 0) -> tuple[int, int, int]:
        """The instruction's shape for operands of ``precision`` (an accumulator's fragment
        names its own type: then the mode whose k is ``k``)."""
        return next(mode.mnk for mode in self.modes if mode.precision == precision or mode.mnk[2] == k)

    def instructions(self, mnk: tuple[int, int, int], precision: str, accumulator: ScalarType):
        """The warp tile's product as instructions: for each, the first element of A, B and C
        that it reads (its registers follow), in the order the tile layouts number them."""
        im, in_, _ = self.instruction_shape(precision)
        m, n, _ = mnk
        a, b, c = (self.instruction_layout(u, precision, accumulator).elements
                   for u in ("matrix_a", "matrix_b", "accumulator"))
        return [(i * a, j * b, (i * (n // in_) + j) * c) for i in range(m // im) for j in range(n // in_)]

    def registers(self, use: str, mnk: tuple[int, int, int], precision: str, dtype: ScalarType) -> int:
        """32-bit registers per lane for one fragment."""
        if self.issued_by == "warpgroup":  # accumulators in registers; operands read from shared memory
            return mnk[0] * mnk[1] * dtype.size // (4 * WARPGROUP) if use == "accumulator" else 2
        if self.layouts is None:  # opaque: the warp's share of the tile
            rows, cols = {"matrix_a": mnk[::2], "matrix_b": mnk[:0:-1], "accumulator": mnk[:2]}[use]
            size = 4 if precision == "tf32" else dtype.size
            return -(-rows * cols * size // (32 * 4))
        layout = self.tile_layout(use, mnk, precision, dtype if use == "accumulator" else None)
        return layout.registers


def _stacked(one: LaneLayout, down: int, across: int) -> LaneLayout:
    """``down`` x ``across`` instruction tiles, numbered row by row; each one's elements are
    consecutive (element e is element e % per of tile e // per)."""
    if down * across == 1:
        return one
    per = one.elements

    def row(lane, e):
        tile = e // per
        return one.row(lane, e % per) + (one.rows * (tile // across) if down > 1 else 0)

    def col(lane, e):
        tile = e // per
        return one.col(lane, e % per) + (one.cols * (tile % across) if across > 1 else 0)

    return LaneLayout(one.rows * down, one.cols * across, per * down * across, row, col, one.bits)


# bits of an operand element by precision (others: 16)
OPERAND_BITS = {"tf32": 32, "s8": 8, "u8": 8, "e4m3": 8, "e5m2": 8}
_WMMA_16 = (MMAShape.M16xN16xK16_B1, MMAShape.M32xN8xK16_B1, MMAShape.M8xN32xK16_B1)
_MMA_16 = (MMAShape.M16xN16xK16_B1, MMAShape.M32xN8xK16_B1)
_F32, _F16, _BF16 = ScalarType.float32, ScalarType.float16, ScalarType.bfloat16

WMMA = Family(
    "wmma", Instruction.WMMA, "wmma.load/mma/store (CUDA's nvcuda::wmma)", "warp", 70,
    (Mode(_F16, (_F32, _F16), "fp16", _WMMA_16, (16, 16, 16)),
     Mode(_BF16, (_F32,), "bf16", _WMMA_16, (16, 16, 16)),
     Mode(_F32, (_F32,), "tf32", (MMAShape.M16xN16xK8_B1,), (16, 16, 8)),
     Mode(ScalarType.int8, (ScalarType.int32,), "s8", _WMMA_16, (16, 16, 16)),
     Mode(ScalarType.uint8, (ScalarType.int32,), "u8", _WMMA_16, (16, 16, 16))),
    speed=1, operand_align=32, leading_bytes=16, edge_scratch=True, swizzles=False, opaque=True,
)

MMA_SYNC = Family(
    "mma_sync", Instruction.MMA_SYNC, "ldmatrix + mma.sync.aligned.m16n8k16 / m16n8k8 / m16n8k32 (8-bit floats, sm_89)",
    "warp", 80,
    (Mode(_F16, (_F32, _F16), "fp16", _MMA_16, (16, 8, 16)),
     Mode(_BF16, (_F32,), "bf16", _MMA_16, (16, 8, 16)),
     Mode(_F32, (_F32,), "tf32", (MMAShape.M16xN16xK8_B1,), (16, 8, 8)),
     Mode(ScalarType.int8, (ScalarType.int32,), "s8", _MMA_16, (16, 8, 16)),
     Mode(ScalarType.uint8, (ScalarType.int32,), "u8", _MMA_16, (16, 8, 16)),
     Mode(ScalarType.float8_e4m3, (_F32,), "e4m3", (MMAShape.M16xN16xK32_B1,), (16, 8, 32), min_sm=89),
     Mode(ScalarType.float8_e5m2, (_F32,), "e5m2", (MMAShape.M16xN16xK32_B1,), (16, 8, 32), min_sm=89)),
    speed=2, operand_align=0, leading_bytes=0, edge_scratch=False, swizzles=True,
    layouts=_MMA_SYNC_LAYOUTS,
)

WGMMA = Family(
    "wgmma", Instruction.WGMMA, "wgmma.mma_async.m64nNk16 / m64nNk8 / m64nNk32 (8-bit floats and integers; sm_90a), "
    "operands in shared memory",
    "warpgroup", 90,
    (Mode(_F16, (_F32,), "fp16", WGMMA_16, (64, 0, 16)),
     Mode(_BF16, (_F32,), "bf16", WGMMA_16, (64, 0, 16)),
     Mode(_F32, (_F32,), "tf32", WGMMA_TF32, (64, 0, 8), transposes=False),
     Mode(ScalarType.float8_e4m3, (_F32,), "e4m3", WGMMA_FP8, (64, 0, 32), transposes=False),
     Mode(ScalarType.float8_e5m2, (_F32,), "e5m2", WGMMA_FP8, (64, 0, 32), transposes=False),
     Mode(ScalarType.int8, (ScalarType.int32,), "s8", WGMMA_INT8, (64, 0, 32), transposes=False),
     Mode(ScalarType.uint8, (ScalarType.int32,), "u8", WGMMA_INT8, (64, 0, 32), transposes=False)),
    speed=3, operand_align=0, leading_bytes=0, edge_scratch=False, swizzles=True, arch_specific=True,
)
WARPGROUP = 128  # threads that issue one wgmma


def wgmma_accumulator(n: int, dtype: ScalarType = _F32) -> LaneLayout:
    """The per-thread layout of a warpgroup's 64 x n accumulator (n/2 elements per thread)."""
    return _layout(64, n, n // 2, _wgmma_c(n), dtype.size * 8)


FAMILIES: dict[str, Family] = {f.name: f for f in (WMMA, MMA_SYNC, WGMMA)}


def _fragment_arch(f) -> str | None:
    """The architecture-specific target a tile of ``f``'s family needs (sm_90a for wgmma), or None."""
    family = FAMILIES[f.family]
    return f"sm_{family.min_sm}a" if family.arch_specific else None


def _fragment_registers(f) -> int:
    return FAMILIES[f.family].registers(f.use, (f.m, f.n, f.k), f.precision, f.dtype)


FAMILY_FACTS.update(arch=_fragment_arch, registers=_fragment_registers)
BY_INSTRUCTION: dict[Instruction, Family] = {f.instruction: f for f in FAMILIES.values()}


def family_for(target: Target, operand: ScalarType, accumulator: ScalarType, shape: MMAShape,
               requested: Instruction, placed: bool = False) -> Family:
    """The family that multiplies ``operand`` into ``accumulator`` tiles of ``shape`` on the
    target: the one requested, or with AUTO the fastest that can; LookupError says why none.
    ``placed``: the plan needs to know where each accumulator element lies (a fused epilogue),
    which a family with an opaque tile (wmma) does not say."""
    wanted = list(FAMILIES.values()) if requested is Instruction.AUTO else [BY_INSTRUCTION[requested]]
    def runs(f: Family) -> bool:
        mode = f.mode(operand, accumulator, shape)
        return mode is not None and target.spec.sm >= max(f.min_sm, mode.min_sm)

    usable = [f for f in wanted if runs(f)]
    if placed and usable and all(f.opaque for f in usable):
        names = ", ".join(f.name for f in FAMILIES.values() if not f.opaque)
        raise LookupError(f"a fused epilogue computes in the accumulator's registers, and {usable[0].name} does "
                          f"not say which element each lane holds: use an instruction with lane layouts ({names}) "
                          "with one of its shapes")
    usable = [f for f in usable if not (placed and f.opaque)]
    if usable:
        return max(usable, key=lambda f: f.speed)
    if requested is Instruction.AUTO:
        raise LookupError(f"no tensor-core instruction multiplies {operand.value} into {accumulator.value} "
                          f"with {shape.name}")
    family = wanted[0]
    mode = family.mode(operand, accumulator, shape)
    need = max(family.min_sm, mode.min_sm if mode is not None else 0)
    if target.spec.sm < need:
        what = f" with {operand.value} operands" if mode is not None and mode.min_sm > family.min_sm else ""
        raise LookupError(f"{requested.name}{what} needs sm_{need} or newer; {target.name} is sm_{target.spec.sm}")
    modes = "; ".join(f"{m.operand.value} into {'/'.join(a.value for a in m.accumulators)} with "
                      f"{', '.join(s.name for s in m.shapes)}" for m in family.modes)
    raise LookupError(f"{requested.name} multiplies {modes}; not {operand.value} into {accumulator.value} with "
                      f"{shape.name} (use Instruction.AUTO or another instruction)")


def check_instruction(where: str, instruction: object) -> Instruction:
    if not isinstance(instruction, Instruction):
        raise PlanError(where, f"instruction must be an Instruction ({', '.join(i.name for i in Instruction)}), "
                               f"not {instruction!r}")
    return instruction


# -- symbolic lanes: one layout definition, printed as CUDA and evaluated by the emulator -------


@dataclass(frozen=True)
class Sym:
    """A kernel-IR index expression that layouts compute with (``+ * // %`` and integers)."""

    expr: Expr

    def _join(self, op: str, other, swap: bool = False):
        other = other.expr if isinstance(other, Sym) else Const(int(other))
        lhs, rhs = (other, self.expr) if swap else (self.expr, other)
        return Sym(Binary(op, lhs, rhs))

    def __add__(self, other):
        return self if _is(other, 0) else self._join("+", other)

    def __radd__(self, other):
        return self if _is(other, 0) else self._join("+", other, swap=True)

    def __sub__(self, other):
        return self if _is(other, 0) else self._join("-", other)

    def __mul__(self, other):
        return other if _is(other, 0) else self if _is(other, 1) else self._join("*", other)

    def __rmul__(self, other):
        return other if _is(other, 0) else self if _is(other, 1) else self._join("*", other, swap=True)

    def __floordiv__(self, other):  # lanes and elements are never negative: C's / is floor here
        return self if _is(other, 1) else self._join("/", other)

    def __mod__(self, other):
        inner = self.expr
        if (isinstance(inner, Binary) and inner.op == "%" and isinstance(inner.rhs, Const)
                and not isinstance(other, Sym) and inner.rhs.value % other == 0):
            return Sym(inner.lhs) % other  # (x % 4) % 2 == x % 2
        return self._join("%", other)


def _is(value, n: int) -> bool:
    return not isinstance(value, Sym) and value == n


# -- ldmatrix: 8x8 matrices of 16-byte rows, one row address per lane ---------------------------


@dataclass(frozen=True)
class Ldmatrix:
    """One ``ldmatrix.x{count}[.trans]``: registers ``first .. first+count-1`` of a fragment;
    lane ``l`` gives the address of the tile element ``(row(l), col(l))`` (lanes past 8*count
    repeat the first ones)."""

    first: int
    count: int
    trans: bool
    row: Callable
    col: Callable


def ldmatrix_plan(layout: LaneLayout, row_stride: int, col_stride: int) -> tuple[Ldmatrix, ...] | None:
    """How ldmatrix loads a fragment of ``layout`` from a tile with these strides, or None when
    it cannot (each register must hold a row pair of an 8x8 block whose 16-byte rows are
    contiguous: without .trans along the pair, with .trans (16-bit only) across it)."""
    blocks = [_block(layout, q) for q in range(layout.registers)]
    if any(b is None for b in blocks):
        return None
    trans = set()
    for _, minor, major in blocks:
        along_minor = minor[0] * row_stride + minor[1] * col_stride
        along_major = major[0] * row_stride + major[1] * col_stride
        if along_minor == 1:
            trans.add(False)
        elif along_major == 1 and layout.bits == 16:
            trans.add(True)
        else:
            return None
    if len(trans) != 1:
        return None
    flipped = trans.pop()
    plans, q = [], 0
    while q < len(blocks):
        count = next(c for c in (4, 2, 1) if q + c <= len(blocks) and _bit_affine(blocks[q:q + c]))
        plans.append(_group(blocks[q:q + count], q, flipped))
        q += count
    return tuple(plans)


def _block(layout: LaneLayout, q: int):
    """Register q's 8x8 block: (origin, minor step, major step), or None if it is not one."""
    per = layout.per_register
    e0 = q * per

    def at(lane, h=0):
        return layout.row(lane, e0 + h), layout.col(lane, e0 + h)

    origin = at(0)
    minor = _diff(at(1), origin) if per == 1 else _diff(at(0, 1), origin)
    major = _diff(at(4), origin)
    if sorted((minor, major)) != [(0, 1), (1, 0)]:
        return None
    for lane in range(32):
        for h in range(per):
            along = (lane % 4) * per + h
            want = (origin[0] + (lane // 4) * major[0] + along * minor[0],
                    origin[1] + (lane // 4) * major[1] + along * minor[1])
            if at(lane, h) != want:
                return None
    return origin, minor, major


def _diff(p, q) -> tuple[int, int]:
    return p[0] - q[0], p[1] - q[1]


def _bit_affine(blocks) -> bool:
    """The blocks' origins are O0 + bit0(j) * d1 + bit1(j) * d2 (so lanes can compute theirs)."""
    if len({b[1:] for b in blocks}) != 1:
        return False
    if len(blocks) < 4:
        return True
    o = [b[0] for b in blocks]
    return all(o[3][i] == o[1][i] + o[2][i] - o[0][i] for i in range(2))


def _group(blocks, first: int, trans: bool) -> Ldmatrix:
    origin, minor, major = blocks[0]
    step = minor if trans else major  # the direction in which the 8 row addresses advance
    d1 = _diff(blocks[1][0], origin) if len(blocks) > 1 else (0, 0)
    d2 = _diff(blocks[2][0], origin) if len(blocks) > 2 else (0, 0)
    count = len(blocks)

    def position(lane, axis: int):
        j = (lane // 8) % count if count > 1 else 0
        r = lane % 8
        return origin[axis] + r * step[axis] + (j % 2) * d1[axis] + (j // 2) * d2[axis]

    return Ldmatrix(first, count, trans, lambda lane: position(lane, 0), lambda lane: position(lane, 1))


def vector_width(layout: LaneLayout, row_stride: int, col_stride: int, size: int, lanes: int = 32) -> int:
    """The most consecutive elements of a lane (2 or 4, at most 16 bytes) that lie side by side
    in memory at offsets that are multiples of their count, for every lane (1: none)."""
    for width in (4, 2):
        if width * size > 16 or layout.elements % width:
            continue
        if all(_run(layout, lane, e, width, row_stride, col_stride)
               for lane in range(lanes) for e in range(0, layout.elements, width)):
            return width
    return 1


def _run(layout: LaneLayout, lane: int, e: int, width: int, row_stride: int, col_stride: int) -> bool:
    offsets = [layout.row(lane, e + t) * row_stride + layout.col(lane, e + t) * col_stride for t in range(width)]
    return offsets[0] % width == 0 and offsets == list(range(offsets[0], offsets[0] + width))


# -- shared-memory swizzle -----------------------------------------------------------------------


def swizzle_pitch(row_bytes: int) -> int:
    """The row pitch (bytes) of an XOR-swizzled tile, or 0 when rows of this length are not
    swizzled: they must be 32 or 64 bytes, or a multiple of 128."""
    return row_bytes if row_bytes in (32, 64) or (row_bytes > 0 and row_bytes % 128 == 0) else 0


def swizzle_column(row, col, pitch: int, size: int):
    """Where element ``col`` of stored row ``row`` lives in a tile swizzled at ``pitch`` bytes
    per row: its 16-byte chunk is XORed with the row's line index (a line is 128 bytes, or one
    row if longer), so that 8 consecutive rows read at one column hit 8 different bank groups
    (ldmatrix without conflicts). Chunks stay whole and stay in their row. Works on ints and
    numpy arrays; rows count from the tile's (or its ring slot's) first row.

    >>> [swizzle_column(r, 0, 64, 2) // 8 for r in range(8)]  # 64-byte rows: chunks of 8 halves
    [0, 0, 1, 1, 2, 2, 3, 3]
    """
    chunk = 16 // size
    rows_per_line = max(1, 128 // pitch)
    lines = min(pitch // 16, 8)
    return col ^ (((row // rows_per_line) % lines) * chunk)


def swizzled(offsets, buffer):
    """Physical element offsets of logical ``offsets`` in a shared buffer (its ``swizzle``
    pitch, 0: none): the stored row is the dimension whose stride is the pitch."""
    pitch = getattr(buffer, "swizzle", 0)
    if not pitch:
        return offsets
    size = buffer.dtype.size
    row_elements = pitch // size
    row_dim = buffer.strides.index(row_elements)
    col = offsets % row_elements
    row = (offsets // row_elements) % buffer.shape[row_dim]
    return offsets - col + swizzle_column(row, col, pitch, size)


def check_layouts() -> None:
    """Every lane layout of the table covers its tile once (each element held by one lane)."""
    for (use, bits), layout in _MMA_SYNC_LAYOUTS.items():
        seen = {(layout.row(lane, e), layout.col(lane, e)) for lane in range(32) for e in range(layout.elements)}
        if len(seen) != 32 * layout.elements or len(seen) != layout.rows * layout.cols:
            raise AssertionError(f"mma_sync {use} ({bits}-bit) does not cover its "
                                 f"{layout.rows}x{layout.cols} tile once")



# -- wgmma matrix descriptors ---------------------------------------------------------------------

SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}  # a descriptor's layout type for rows of 128, 64, 32 bytes


@dataclass(frozen=True)
class Descriptor:
    """How wgmma finds an operand tile in a swizzled TMA tile (``SharedBuffer`` of shape
    (stages, chunks, rows, chunk), rows of ``swizzle`` bytes): ``k_major`` when k runs along the
    rows; ``lbo`` (leading byte offset: the distance between chunks along m or n for tiles whose
    m or n runs along the rows; unused when k does), ``sbo`` (the distance between groups of 8
    rows) and the layout ``mode`` of the descriptor."""

    k_major: bool
    lbo: int
    sbo: int
    mode: int
    swizzle: int


def descriptor(buffer, k_major: bool) -> Descriptor:
    """The descriptor fields of tiles in ``buffer`` (what the emitter encodes and the emulator
    decodes; the start address is the tile's first element)."""
    pitch = buffer.swizzle
    lbo = 16 if k_major else buffer.strides[1] * buffer.dtype.size
    return Descriptor(k_major, lbo, 8 * pitch, SWIZZLE_MODES[pitch], pitch)


def operand_k_major(use: str, layout: str) -> bool:
    """A row-major A (m rows, k along them) and a column-major B are k-major."""
    return (layout == "row_major") == (use == "matrix_a")
