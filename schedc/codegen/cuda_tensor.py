"""CUDA text of tensor-core tile statements, one emitter per instruction family.

The Printer (cuda.py) hands every Fragment* statement to the emitter of the family that owns
the fragment (``Fragment.family``, a name in ``schedc.instructions.FAMILIES``). An emitter
returns the statement's lines; it reads the family's table entry for shapes and lane layouts.
"""

from __future__ import annotations

from ..instructions import MMA_SYNC, LaneLayout, Sym, column_elements, ldmatrix_plan
from ..ir.kernel import (
    AccumulatorOp,
    Binary,
    Const,
    Expr,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    PrivateArray,
    Stmt,
    TileEdge,
    Var,
)
from ..ir.registry import Registry
from ..ir.types import ScalarType

_WMMA_TYPES = {"fp16": "__half", "bf16": "__nv_bfloat16", "tf32": "wmma::precision::tf32",
               "s8": "signed char", "u8": "unsigned char"}


def family_of(printer, s: Stmt) -> str:
    """The family of the fragment a statement works on."""
    if isinstance(s, Fragment):
        return s.family
    name = s.d if isinstance(s, FragmentMma) else s.fragment
    return printer.fragments[name].family


TILE_STATEMENTS = Registry("tile statement emitter")  # one method of Emitter per tile statement class


class Emitter:
    """What every family's emitter does alike: it dispatches a tile statement; a family supplies
    ``declare``, ``fill``, ``load``, ``store`` and ``mma`` (prologue and epilogue ops are shared)."""

    @staticmethod
    def prelude() -> list[str]:
        return []

    def __init__(self, printer) -> None:
        self.p = printer

    def statement(self, s: Stmt) -> list[str]:
        return TILE_STATEMENTS.handler(s)(self, s)

    @TILE_STATEMENTS.handles(Fragment)
    def _declared(self, s: Fragment) -> list[str]:
        self.p.fragments[s.name] = s
        return self.declare(s)

    @TILE_STATEMENTS.handles(FragmentFill)
    def _filled(self, s: FragmentFill) -> list[str]:
        return [self.fill(s.fragment, self.p.constant(s.value, self.p.fragments[s.fragment].dtype))]

    @TILE_STATEMENTS.handles(FragmentApply)
    def _applied(self, s: FragmentApply) -> list[str]:
        return apply(self.p, s, self)

    @TILE_STATEMENTS.handles(FragmentMap)
    def _mapped(self, s: FragmentMap) -> list[str]:
        return self.map(s)

    @TILE_STATEMENTS.handles(FragmentConvert)
    def _converted(self, s: FragmentConvert) -> list[str]:
        return self.convert(s)

    def convert(self, s: FragmentConvert) -> list[str]:
        raise ValueError(f"{type(self).__name__} holds no A tile in registers: {s.source} cannot feed {s.fragment}")

    def map(self, s: FragmentMap) -> list[str]:
        raise ValueError(f"{type(self).__name__} tiles are opaque: a fused epilogue cannot place the elements of "
                         f"{s.fragment}")

    @TILE_STATEMENTS.handles(FragmentLoad, FragmentStore, FragmentMma, FragmentAdd)
    def _moved(self, s) -> list[str]:
        """The family's own ``load``, ``store``, ``mma`` or ``add``."""
        method = {FragmentLoad: self.load, FragmentStore: self.store, FragmentMma: self.mma, FragmentAdd: self.add}
        return method[type(s)](s)

    def add(self, s: FragmentAdd) -> list[str]:
        raise ValueError(f"{type(self).__name__} tiles are opaque: {s.source} cannot be added to {s.fragment}")


class Wmma(Emitter):
    """nvcuda::wmma: the warp's tile is opaque; loads and stores take a pointer and a leading
    dimension (partial accumulator tiles go through the warp's shared scratch)."""

    def declare(self, s: Fragment) -> list[str]:
        return [f"wmma::fragment<{self.fragment_type(s)}> {s.name};"]

    @staticmethod
    def fill(name: str, value: str) -> str:
        return f"wmma::fill_fragment({name}, {value});"

    def mma(self, s: FragmentMma) -> list[str]:
        return [f"wmma::mma_sync({s.d}, {s.a}, {s.b}, {s.c});"]

    def store(self, s: FragmentStore) -> list[str]:
        p = self.p
        ld, layout = leading(s.row_stride, s.col_stride)
        pointer = f"&{s.buffer}[{p.offset(s.buffer, s.origin)}]"
        if s.edge is not None:
            frag = p.fragments[s.fragment]
            return [f"schedc::store_edge<{frag.m}, {frag.n}{_staged(s.edge)}>({pointer}, {s.fragment}, {ld}, "
                    f"wmma::mem_{layout}, {self.edge(s.edge)});"]
        return [f"wmma::store_matrix_sync({pointer}, {s.fragment}, {ld}, wmma::mem_{layout});"]

    def load(self, s: FragmentLoad) -> list[str]:
        p = self.p
        frag = p.fragments[s.fragment]
        pointer = f"&{s.buffer}[{p.offset(s.buffer, s.origin)}]"
        ld, layout = leading(s.row_stride, s.col_stride)
        if frag.use == "accumulator":
            if s.edge is not None:
                return [f"schedc::load_edge<{frag.m}, {frag.n}{_staged(s.edge)}>({s.fragment}, {pointer}, {ld}, "
                        f"wmma::mem_{layout}, {self.edge(s.edge)});"]
            return [f"wmma::load_matrix_sync({s.fragment}, {pointer}, {ld}, wmma::mem_{layout});"]
        lines = [f"wmma::load_matrix_sync({s.fragment}, {pointer}, {ld});"]
        if frag.precision == "tf32":
            lines.append(f"schedc::to_tf32({s.fragment});")
        return lines

    def edge(self, edge: TileEdge) -> str:
        return f"{self.p.expr(edge.rows)}, {self.p.expr(edge.cols)}, {edge.scratch}, thread"

    @staticmethod
    def fragment_type(f: Fragment) -> str:
        if f.use == "accumulator":
            return f"wmma::accumulator, {f.m}, {f.n}, {f.k}, {f.dtype.c_type}"
        return f"wmma::{f.use}, {f.m}, {f.n}, {f.k}, {_WMMA_TYPES[f.precision]}, wmma::{f.layout}"


LANE = Sym(Var("lane"))
ELEMENT = Sym(Var("elem"))


class MmaSync(Emitter):
    """mma.sync: a fragment is an array of the lane's elements in the family's lane layout;
    operands come from shared memory with ldmatrix (or element by element), accumulators and
    operands in global memory element by element, guarded per element at the array's edge."""

    lane = Var("lane")  # the variable the prelude defines: the thread's lane
    lanes = 32  # the threads that hold a tile

    @staticmethod
    def prelude() -> list[str]:
        return ["const int lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;"]

    def layout(self, f: Fragment) -> LaneLayout:
        return fragment_layout(f)

    def declare(self, s: Fragment) -> list[str]:
        layout = fragment_layout(s)
        return [f"alignas(16) {_element_type(s)} {s.name}[{layout.elements}];  // {s.use} {layout.rows}x"
                f"{layout.cols}: {layout.elements} element(s) per lane ({MMA_SYNC.name} layout)"]

    @staticmethod
    def fill(name: str, value: str) -> str:
        return f"schedc::fill({name}, {value});"

    def store(self, s: FragmentStore) -> list[str]:
        return self.elements(s, s.fragment, store=True)

    def load(self, s: FragmentLoad) -> list[str]:
        frag = self.p.fragments[s.fragment]
        lines = self.ldmatrix(s, frag) if s.path == "ldmatrix" else self.elements(s, s.fragment, store=False)
        if frag.precision == "tf32":
            lines.append(f"schedc::to_tf32({s.fragment});")
        return lines

    def ldmatrix(self, s: FragmentLoad, frag: Fragment) -> list[str]:
        layout = fragment_layout(frag)
        plan = ldmatrix_plan(layout, s.row_stride, s.col_stride)
        if plan is None:
            raise ValueError(f"{s.fragment}: ldmatrix cannot load this {frag.use} with strides "
                             f"{s.row_stride}, {s.col_stride}")
        lines = []
        for group in plan:
            address = self.pointer(s.buffer, s.origin, s.row_stride, s.col_stride, group.row(LANE), group.col(LANE),
                                   s.row_phase)
            lines.append(f"schedc::ldmatrix<{group.count}, {'true' if group.trans else 'false'}>"
                         f"(&{s.fragment}[{group.first * layout.per_register}], {address});")
        return lines

    def pointer(self, buffer: str, origin, row_stride: int, col_stride: int, r, c, phase: int | None = None) -> str:
        """The address of the tile's element (r, c) (lane-dependent Sym values): the origin
        plus an offset, or in a swizzled buffer the tile's slot plus the swizzled (row, col) of
        the element. With a ``phase`` (the origin's row mod 8, the same for every tile), the
        origin's row moves into the base and only ``phase + r`` is swizzled: a lane's offset is
        then the same for every tile, computed once."""
        p = self.p
        spec = p.buffers[buffer]
        geometry = swizzle_geometry(spec)
        if geometry is None:
            delta = _as_expr(r * row_stride + c * col_stride)
            return f"&{buffer}[{p.offset(buffer, origin)}] + {p.expr(delta, _ADD)}"
        pitch, row_dim, col_dim = geometry
        stored = {row_stride: r, col_stride: c}
        if set(stored) != {pitch // spec.dtype.size, 1}:
            raise ValueError(f"a tile of the swizzled {buffer} with strides {row_stride}, {col_stride}")
        lane_row = _as_expr(stored[pitch // spec.dtype.size])
        row = (Binary("+", origin[row_dim], lane_row) if phase is None
               else Binary("+", Const(phase), lane_row) if phase else lane_row)
        col = Binary("+", origin[col_dim], _as_expr(stored[1]))
        return (f"&{buffer}[{p.offset(buffer, swizzle_base(spec, origin, phase))}] + "
                f"schedc::swizzle<{pitch}, {spec.dtype.c_type}>({p.expr(row)}, {p.expr(col)})")

    def elements(self, s: FragmentLoad | FragmentStore, name: str, store: bool) -> list[str]:
        """A loop over the lane's elements, ``s.vector`` at a time: each one's row and column
        from the lane layout; at C's edge only the elements inside the array."""
        p = self.p
        frag = p.fragments[name]
        layout = self.layout(frag)
        lane = Sym(self.lane)
        row, col = layout.row(lane, ELEMENT), layout.col(lane, ELEMENT)
        first, end = 0, layout.elements
        if getattr(s, "columns", None):  # a window of the tile's columns, from the target's column 0
            first, end = column_elements(layout, self.lanes, *s.columns)
            col = col - s.columns[0]
        pointer = self.pointer(s.buffer, s.origin, s.row_stride, s.col_stride, row, col, getattr(s, "row_phase", None))
        memory = f"*({pointer})"
        mine = f"{name}[elem]"
        memory_type = p.buffers[s.buffer].dtype
        converts = frag.use == "accumulator" and memory_type is not frag.dtype
        if converts and s.vector > 1:
            move = (f"schedc::store_converted<{s.vector}>({pointer}, &{name}[elem]);" if store
                    else f"schedc::load_converted<{s.vector}>(&{name}[elem], {pointer});")
        elif converts:
            target = memory_type if store else frag.dtype
            move = f"{memory if store else mine} = schedc::convert<{target.c_type}>({mine if store else memory});"
        elif s.vector > 1:
            vector = f"schedc::vector_type<{s.vector * memory_type.size}>::type"
            memory = f"*reinterpret_cast<{'' if store else 'const '}{vector}*>({pointer})"
            mine = f"*reinterpret_cast<{vector}*>(&{name}[elem])"
            move = f"{memory} = {mine};" if store else f"{mine} = {memory};"
        else:
            move = f"{memory} = {mine};" if store else f"{mine} = {memory};"
        inside = None
        if s.edge is not None:
            inside = (f"{p.expr(_as_expr(row), _LESS)} < {p.expr(s.edge.rows, _LESS + 1)} && "
                      f"{p.expr(_as_expr(col), _LESS)} < {p.expr(s.edge.cols, _LESS + 1)}")
        if store or not inside:
            body = f"if ({inside}) {move}" if inside else move
        elif s.vector == 1:
            zero = p.constant(0, frag.dtype if frag.use == "accumulator" else memory_type)
            value = f"schedc::convert<{frag.dtype.c_type}>({memory})" if converts else memory
            body = f"{mine} = {inside} ? {value} : {zero};"
        else:
            clear = (f"schedc::fill_n<{s.vector}>(&{name}[elem], {p.constant(0, frag.dtype)});" if converts
                     else f"{mine} = {{}};")
            body = f"if ({inside}) {move} else {clear}"
        step = f"elem += {s.vector}"
        return ["#pragma unroll", f"for (int elem = {first}; elem < {end}; {step}) {{", f"    {body}", "}"]

    def add(self, s: FragmentAdd) -> list[str]:
        frag = self.p.fragments[s.fragment]
        first, end = self.window(frag, s.columns)
        value = f"schedc::convert<{frag.dtype.c_type}>({s.source}[elem])"
        return ["#pragma unroll", f"for (int elem = {first}; elem < {end}; elem += 1) {s.fragment}[elem] += {value};"]

    def map(self, s: FragmentMap) -> list[str]:
        """A loop over the lane's elements (of the window's columns): the element's row and column
        from the lane layout, then the body, which reads and writes ``fragment[elem]``."""
        p = self.p
        frag = p.fragments[s.fragment]
        layout = self.layout(frag)
        first, end = self.window(frag, s.columns)
        lane = Sym(self.lane)
        row, col = _as_expr(layout.row(lane, ELEMENT)), _as_expr(layout.col(lane, ELEMENT))
        p.buffers[s.fragment] = PrivateArray(s.fragment, s.dtype, (layout.elements,))  # the body's loads and stores
        return ["#pragma unroll", f"for (int elem = {first}; elem < {end}; elem += 1) {{",
                f"    const int {s.row} = {p.expr(row)};  // the element's row in the tile",
                f"    const int {s.col} = {p.expr(col)};  // and its column",
                *p.body(s.body, 1), "}"]

    def window(self, frag: Fragment, columns: tuple[int, int] | None) -> tuple[int, int]:
        """The lane's elements that hold the tile's ``columns`` (all of them: None)."""
        layout = self.layout(frag)
        return column_elements(layout, self.lanes, *columns) if columns else (0, layout.elements)

    def mma(self, s: FragmentMma) -> list[str]:
        p = self.p
        frag = p.fragments[s.a]
        acc = p.fragments[s.c]
        mnk = (frag.m, frag.n, frag.k)
        lines = []
        if s.d != s.c:
            count = fragment_layout(acc).elements
            lines += ["#pragma unroll", f"for (int elem = 0; elem < {count}; elem += 1) {s.d}[elem] = {s.c}[elem];"]
        m, n, k = MMA_SYNC.instruction_shape(frag.precision)
        for a, b, c in MMA_SYNC.instructions(mnk, frag.precision, acc.dtype):
            lines.append(f"schedc::mma_m{m}n{n}k{k}(&{s.d}[{c}], &{s.a}[{a}], &{s.b}[{b}]);")
        return lines


def swizzle_geometry(spec) -> tuple[int, int, int] | None:
    """A swizzled buffer's pitch in bytes and its stored row and column dimensions, or None."""
    pitch = getattr(spec, "swizzle", 0)
    if not pitch:
        return None
    return pitch, spec.strides.index(pitch // spec.dtype.size), spec.strides.index(1)


def swizzle_base(spec, origin: tuple[Expr, ...], phase: int | None = None) -> tuple[Expr, ...]:
    """A tile origin in a swizzled buffer moved to its slot's first element (row and column 0),
    or with a row ``phase`` to the first column of row ``origin row - phase``."""
    _, row_dim, col_dim = swizzle_geometry(spec)
    row = Const(0) if phase is None else origin[row_dim] if phase == 0 else Binary("-", origin[row_dim], Const(phase))
    return tuple(Const(0) if d == col_dim else row if d == row_dim else sub for d, sub in enumerate(origin))


def fragment_layout(f: Fragment) -> LaneLayout:
    return MMA_SYNC.tile_layout(f.use, (f.m, f.n, f.k), f.precision, f.dtype if f.use == "accumulator" else None)


def _element_type(f: Fragment) -> str:
    if f.use == "accumulator":
        return f.dtype.c_type
    return "float" if f.precision == "tf32" else f.dtype.c_type


def _as_expr(value) -> Expr:
    return value.expr if isinstance(value, Sym) else Const(int(value))


_ADD = 5  # precedence of + in the printer: a delta after `pointer + ` keeps its parentheses as needed
_LESS = 4


def apply(p, s: FragmentApply, emitter: Emitter) -> list[str]:
    """Prologue and epilogue operations on an accumulator, for every family (the runtime's
    helpers take a wmma fragment or a lane's array)."""
    if s.columns is not None:  # a window of a lane layout's elements
        first, end = emitter.window(p.fragments[s.fragment], s.columns)
        x = f"{s.fragment}[elem]"
        ctype = p.fragments[s.fragment].dtype.c_type
        body = {AccumulatorOp.SCALE: f"{x} = schedc::convert<{ctype}>(schedc::convert<float>({x}) * "
                                     f"{p.constant(s.arg, ScalarType.float32)});",
                AccumulatorOp.RELU: f"{x} = {x} > {ctype}(0) ? {x} : {ctype}(0);",
                AccumulatorOp.SET: f"{x} = {p.constant(s.arg, p.fragments[s.fragment].dtype)};"}[s.op]
        return ["#pragma unroll", f"for (int elem = {first}; elem < {end}; elem += 1) {body}"]
    whole = {AccumulatorOp.SCALE: lambda: [f"schedc::scale({s.fragment}, {p.constant(s.arg, ScalarType.float32)});"],
             AccumulatorOp.RELU: lambda: [f"schedc::relu({s.fragment});"],
             AccumulatorOp.SET: lambda: [emitter.fill(s.fragment, p.constant(s.arg, p.fragments[s.fragment].dtype))]}
    return whole[s.op]()


def leading(row_stride: int, col_stride: int) -> tuple[int, str]:
    """Leading dimension and wmma memory layout of a tile."""
    if col_stride == 1:
        return row_stride, "row_major"
    return col_stride, "col_major"


def _staged(edge: TileEdge) -> str:
    """The template flag that sends every tile through the scratch."""
    return ", true" if edge.staged else ""


EMITTERS = {"wmma": Wmma, "mma_sync": MmaSync}

