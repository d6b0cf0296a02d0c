"""The kernel IR verifier: rules every kernel obeys, checked between passes.

``problems(kernel)`` lists what is wrong, one line each (empty: well formed):

- *declared*: every buffer, private array, staging, fragment and variable is declared before
  it is used, in scope;
- *types*: a load has its buffer's element type; a store's value converts implicitly to the
  buffer's type; arithmetic operands have the operation's type, compared values one type; a
  function's arguments have its signature's types (``functions.SIGNATURES``);
- *uniform*: the statements whose declared scope is the block or the cluster (``Facts.scope``:
  barriers, block copies, async commits/waits, roles) are reached by every thread of the block
  (not under a condition, nor in a loop whose bounds, vary between threads);
- *async*: every cp.async copy is committed before a wait and before the kernel ends, a
  ``wait_group N`` first runs after more than N commits, and nothing is in flight at the end;
- *fragments*: a product's operands are a matrix_a, a matrix_b and two accumulators of one
  shape and one instruction family, loads and stores move tiles of the fragment's element
  type; a family in the table (schedc.instructions) has the fragment's shape and precision;
  a load's path is one its family has ("" for wmma; "ldmatrix" or "elements" for families with
  lane layouts, ldmatrix only from shared memory) and its vector divides the lane's elements;
- *hopper*: mbarrier operations name a declared uint64 shared buffer; a TMA copy reads a tensor
  map parameter into a shared buffer whose tile and swizzle are the map's box and swizzle, and
  completes on an mbarrier; fences are of a known kind; roles are whole, disjoint warpgroups
  of the block with register counts setmaxnreg takes, and block-level operations (barriers,
  block copies) stay outside them;
- *swizzle*: a swizzled shared buffer is written by block copies or staging stores of whole
  tiles and read by tile loads only;
- *bounds*: constant subscripts and constant copy boxes lie inside their buffers;
- *params*: parameter and buffer names are unique; scalar parameters (read as ``Var(name)``)
  are not redefined by a loop or local and have their type in arithmetic (index arithmetic
  takes scalars of the kernel's index type only); a struct's builder is known and its spec fits the
  array it describes (a tensor map: rank 1 to 5, box sides 1 to 256, rows of a multiple of 16
  bytes, within the swizzle span).

``function_problems(function)`` checks a function of several kernels: unique kernel names,
every kernel parameter declared alike by the function, and each kernel's own problems.

>>> from schedc.ir.kernel import Buffer, Const, Kernel, Load, Store
>>> from schedc.ir.types import ScalarType
>>> a = Buffer("A", ScalarType.float32, (4,), (1,), "param", "input_output")
>>> problems(Kernel("k", (a,), (1, 1, 1), (1, 1, 1), (Store("A", (Const(4),), Const(1.0, ScalarType.float32)),)))
['bounds: A[4] is outside its shape (4,)']
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .. import tma
from ..instructions import FAMILIES, WARPGROUP, column_elements, wgmma_accumulator
from ..ir.functions import SIGNATURES, Function
from ..ir.kernel import (
    ELEMENT,
    UNIFORM_SCOPES,
    WARPGROUP_INDEX,
    WARPGROUP_THREADS,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    BlockCopy,
    Buffer,
    BulkCommit,
    BulkWait,
    Call,
    Cast,
    ClusterSync,
    Const,
    Expr,
    Fence,
    Fragment,
    FragmentAdd,
    FragmentApply,
    FragmentConvert,
    FragmentFill,
    FragmentLoad,
    FragmentMap,
    FragmentMma,
    FragmentStore,
    GridDependencyWait,
    HostFunction,
    If,
    Kernel,
    LaneReduce,
    LaunchDependents,
    Let,
    Load,
    Loop,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    PrivateArray,
    Roles,
    ScalarParam,
    SharedBuffer,
    StageLoad,
    StageStore,
    Staging,
    Stmt,
    Store,
    StructParam,
    ThreadReduce,
    TmaLoad,
    TmaStore,
    Unary,
    Var,
    WarpgroupCommit,
    WarpgroupFence,
    WarpgroupWait,
    facts_of,
    launch_registers,
    roles_fit,
)
from ..ir.registry import Registry
from ..ir.types import ScalarType, converts_implicitly
from ..ir.walk import operands, walk_statements

SPECIAL = {f"{register}.{axis}" for register in ("threadIdx", "blockIdx", "blockDim", "gridDim") for axis in "xyz"}
_COMPARISONS = {"<", "<=", ">", ">=", "==", "!=", "&&", "||"}


@dataclass
class _Scope:
    """What is declared where a statement runs, and whether threads may disagree there."""

    arrays: dict[str, object]
    variables: set[str]
    varying: set[str]  # variables whose value differs between threads of a block
    fragments: dict[str, Fragment] = field(default_factory=dict)
    stagings: set[str] = field(default_factory=set)
    divergent: str = ""  # why threads may not all reach this point ("" when they all do)
    scalars: dict[str, ScalarType] = field(default_factory=dict)  # scalar parameters (read as Var)

    def inner(self, divergent: str = "") -> _Scope:
        return _Scope(dict(self.arrays), set(self.variables), set(self.varying), dict(self.fragments),
                      set(self.stagings), self.divergent or divergent, self.scalars)


def problems(kernel: Kernel) -> list[str]:
    """Every rule the kernel breaks, one line each."""
    checker = _Checker(kernel.index_type)
    arrays = {b.name: b for b in (*kernel.buffers, *kernel.shared)}
    scalars = {v.name: v.dtype for v in kernel.values if isinstance(v, ScalarParam)}
    clustered = {"cluster_rank"} if kernel.cluster != (1, 1, 1) else set()
    # the warpgroup index is defined (a shuffle from each warp's first lane) for blocks of whole
    # warpgroups along x alone, where a warp's threads are one warpgroup's
    grouped = {WARPGROUP_INDEX.name} if kernel.block[0] % WARPGROUP_THREADS == 0 and kernel.block[1:] == (1, 1) \
        else set()
    scope = _Scope(arrays, set(SPECIAL) | set(scalars) | clustered | grouped,
                   {"threadIdx.x", "threadIdx.y", "threadIdx.z", *grouped}, scalars=scalars)
    checker.params(kernel)
    checker.cluster = math.prod(kernel.cluster)
    checker.structs = {v.name: v for v in kernel.values if isinstance(v, StructParam)}
    checker.threads = kernel.threads_per_block
    checker.min_blocks = kernel.min_blocks
    checker.dependent = kernel.dependent_launch
    _check_dependent_start(checker, kernel)
    checker.body(kernel.body, scope)
    checker.finish()
    if kernel.cluster != (1, 1, 1) and not (kernel.body and isinstance(kernel.body[-1], ClusterSync)):
        checker.report("hopper", "a kernel launched in clusters ends without a cluster barrier: a block could leave "
                                 "while its peers still copy into it or arrive on its barriers")
    return checker.found


def _check_dependent_start(checker: _Checker, kernel: Kernel) -> None:
    """A kernel launched as a dependent of the one before waits for it before anything else."""
    if not kernel.dependent_launch:
        return
    first = next((s for s in kernel.body if not isinstance(s, LaunchDependents)), None)
    if not isinstance(first, GridDependencyWait):
        checker.report("dependent", "a kernel launched as a dependent of the one before (dependent_launch) starts with "
                                    f"{type(first).__name__ if first else 'nothing'}, not GridDependencyWait: it could "
                                    "read what that kernel has not written yet")


def function_problems(function: HostFunction) -> list[str]:
    """Every rule a function of several kernels breaks: its own, then each kernel's."""
    found = []
    names = [p.name for p in function.params]
    if not function.name.isidentifier():
        found.append(f"params: function name {function.name!r} is not a C identifier")
    if not function.kernels:
        found.append(f"params: function {function.name} launches no kernel")
    found += [f"params: {function.name} has two parameters named {n}" for n in _repeated(names)]
    found += [f"params: {function.name} launches two kernels named {n}"
              for n in _repeated([k.name for k in function.kernels])]
    declared = {p.name: p for p in function.params}
    if function.kernels and function.kernels[0].dependent_launch:
        found.append(f"dependent: {function.kernels[0].name}, the first kernel of {function.name}, is launched as a "
                     "dependent, with no kernel before it")
    for k in function.kernels:
        found += [f"params: kernel {k.name}'s parameter {p.name} is not {function.name}'s "
                  f"{declared.get(p.name, 'parameter')}" for p in k.arguments if not _same(declared.get(p.name), p)]
        found += [f"kernel {k.name}: {problem}" for problem in problems(k)]
    return found


def _same(declared, param) -> bool:
    """A kernel's parameter as the function declares it (a workspace in any role: each kernel
    reads or writes it)."""
    if isinstance(param, Buffer) and param.kind == "workspace" and isinstance(declared, Buffer):
        return dataclasses.replace(param, role=declared.role) == declared
    return declared == param


def _repeated(names: list[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})




RULES = Registry("IR rule")  # one rule per statement class, each a method of _Checker


class _Checker:
    def __init__(self, index_type: ScalarType = ScalarType.int32) -> None:
        self.index_type = index_type
        self.found: list[str] = []
        self.structs: dict[str, StructParam] = {}
        self.threads = 0
        self.min_blocks = 0
        self.dependent = False
        self.cluster = 1  # blocks of the kernel's cluster
        self.uncommitted = 0  # cp.async copies since the last commit
        self.in_flight = 0  # committed groups not yet waited for (upper bound)
        self.commits = 0

    def report(self, rule: str, what: str) -> None:
        if f"{rule}: {what}" not in self.found:
            self.found.append(f"{rule}: {what}")

    def finish(self) -> None:
        if self.uncommitted:
            self.report("async", f"{self.uncommitted} cp.async copy(ies) never committed")
        if self.in_flight:
            self.report("async", "cp.async groups still in flight when the kernel ends (no wait_group 0 after them)")

    # -- parameters ---------------------------------------------------------------------------

    def params(self, kernel: Kernel) -> None:
        names = [b.name for b in (*kernel.buffers, *kernel.shared, *kernel.values)]
        for name in _repeated(names):
            self.report("params", f"two parameters or buffers are named {name}")
        arrays = {b.name: b for b in kernel.params}
        for v in kernel.values:
            if isinstance(v, StructParam):
                self.struct(v, arrays)

    def struct(self, v: StructParam, arrays: dict) -> None:
        if v.builder != "tensor_map":
            self.report("params", f"struct {v.name}: no builder named {v.builder!r} (tensor_map)")
            return
        spec, array = v.spec, arrays.get(v.spec.array)
        where = f"tensor map {v.name} of {spec.array}"
        if array is None:
            self.report("params", f"{where}: {spec.array} is not an array parameter of the kernel")
            return
        if spec.dtype != array.dtype:
            self.report("params", f"{where}: {spec.dtype.value} elements, the array's are {array.dtype.value}")
        if len(spec.box) != len(array.shape) or not 1 <= len(spec.box) <= 5:
            self.report("params", f"{where}: box {list(spec.box)} for an array of rank {len(array.shape)} "
                                  "(rank 1 to 5)")
        if any(not 1 <= n <= tma.BOX_LIMIT for n in spec.box):
            self.report("params", f"{where}: box {list(spec.box)} has a side outside 1 to {tma.BOX_LIMIT}")
        inner = min(range(len(array.strides)), key=lambda d: array.strides[d]) if spec.box else 0
        row = spec.box[inner] * spec.dtype.size if len(spec.box) == len(array.shape) else 0
        if row % tma.GLOBAL_ALIGN:
            self.report("params", f"{where}: a box row is {row} bytes, not a multiple of {tma.GLOBAL_ALIGN}")
        if spec.swizzle not in (0, *tma.SWIZZLES) or (spec.swizzle and row > spec.swizzle):
            self.report("params", f"{where}: swizzle {spec.swizzle} for rows of {row} bytes "
                                  "(0, or 32, 64 or 128 and at least the row)")

    def declare(self, name: str, scope: _Scope, what: str) -> None:
        if name in scope.scalars:
            self.report("params", f"{what} {name} redefines the scalar parameter {name}")

    def dtype_of(self, e: Expr, scope: _Scope) -> ScalarType | None:
        """``e``'s type: its dtype, a scalar parameter's type, or None (index values)."""
        if isinstance(e, Var):
            return scope.scalars.get(e.name)
        return _dtype(e)

    # -- statements ---------------------------------------------------------------------------

    def body(self, body: tuple[Stmt, ...], scope: _Scope) -> None:
        for stmt in body:
            self.statement(stmt, scope)

    def statement(self, s: Stmt, scope: _Scope) -> None:
        if facts_of(s).scope in UNIFORM_SCOPES and scope.divergent:
            self.report("uniform", f"{type(s).__name__}{_label(s)} is not reached by every thread: {scope.divergent}")
        if type(s) not in RULES.handlers:
            self.report("declared", f"unknown statement {type(s).__name__}")
            return
        RULES.handler(s)(self, s, scope)

    @RULES.handles(Let)
    def _Let(self, s: Let, scope: _Scope) -> None:
        self.expr(s.value, scope, f"let {s.name}")
        self.declare(s.name, scope, "local")
        scope.variables.add(s.name)
        if self.varies(s.value, scope):
            scope.varying.add(s.name)

    @RULES.handles(Loop)
    def _Loop(self, s: Loop, scope: _Scope) -> None:
        for bound in (s.start, s.stop):
            self.expr(bound, scope, f"loop {s.var}")
        varies = self.varies(s.start, scope) or self.varies(s.stop, scope)
        inner = scope.inner(f"loop {s.var}'s bounds differ between threads" if varies else "")
        inner.variables.add(s.var)
        self.declare(s.var, scope, "loop variable")
        if varies:
            inner.varying.add(s.var)
        self.body(s.body, inner)

    @RULES.handles(If)
    def _If(self, s: If, scope: _Scope) -> None:
        self.expr(s.cond, scope, "condition")
        why = "under a condition that differs between threads" if self.varies(s.cond, scope) else ""
        self.body(s.body, scope.inner(why))
        self.body(s.orelse, scope.inner(why))

    @RULES.handles(Store)
    def _Store(self, s: Store, scope: _Scope) -> None:
        where = f"store to {s.buffer}"
        buffer = self.array(s.buffer, scope, where)
        self.expr(s.value, scope, where)
        for i in s.index:
            self.expr(i, scope, where)
        if buffer is None:
            return
        self.unswizzled(s.buffer, buffer, where)
        self.bounds(s.buffer, buffer, s.index)
        value = self.dtype_of(s.value, scope)
        if value is not None and not converts_implicitly(value, buffer.dtype):
            self.report("types", f"{where}: a {value.value} value into {buffer.dtype.value} elements")

    @RULES.handles(PrivateArray)
    def _PrivateArray(self, s: PrivateArray, scope: _Scope) -> None:
        scope.arrays[s.name] = s

    def own_array(self, s: LaneReduce | ThreadReduce, scope: _Scope, where: str) -> PrivateArray | None:
        """The thread's own array a reduction combines, of its type (None, reported: it is not)."""
        own = scope.arrays.get(s.array)
        if not isinstance(own, PrivateArray):
            self.report("declared", f"{where}: {s.array} is not a thread's own array")
        elif own.dtype is not s.dtype:
            self.report("types", f"{where}: {own.dtype.value} elements combined as {s.dtype.value}")
        else:
            return own
        return None

    @RULES.handles(LaneReduce)
    def _LaneReduce(self, s: LaneReduce, scope: _Scope) -> None:
        """A combine across the lanes of a row: of the thread's own array, in its type, at slots it
        has, by shuffles within a warp (distances 1 to 16, powers of two)."""
        where = f"lane reduction of {s.array}"
        own = self.own_array(s, scope, where)
        if own is not None and any(not 0 <= slot < own.size for slot in s.slots):
            self.report("bounds", f"{where}: slots {list(s.slots)} of an array of {own.size}")
        if s.op not in ("+", "max", "min") or not s.distances or any(
                d not in (1, 2, 4, 8, 16) for d in s.distances):
            self.report("reduction", f"{where}: {s.op} over lane distances {list(s.distances)}")

    @RULES.handles(ThreadReduce)
    def _ThreadReduce(self, s: ThreadReduce, scope: _Scope) -> None:
        """A combine across a row's threads: of the thread's own array, in its type, over a power
        of two of lanes; past a warp through a shared element a warp (every thread runs it)."""
        where = f"reduction of {s.array}"
        self.own_array(s, scope, where)
        if s.op not in ("+", "max", "min") or s.lanes < 1 or s.lanes & (s.lanes - 1):
            self.report("reduction", f"{where}: {s.op} over {s.lanes} lanes")
        if s.lanes > 32:
            scratch = scope.arrays.get(s.scratch)
            if not isinstance(scratch, SharedBuffer) or scratch.dtype is not s.dtype:
                self.report("reduction", f"{where}: {s.lanes} lanes need a shared {s.dtype.value} element a warp, "
                                         f"not {s.scratch or 'none'}")

    @RULES.handles(Staging)
    def _Staging(self, s: Staging, scope: _Scope) -> None:
        scope.stagings.add(s.name)

    @RULES.handles(StageLoad)
    def _StageLoad(self, s: StageLoad, scope: _Scope) -> None:
        self.staging(s.staging, scope)
        self.array(s.source, scope, f"stage load of {s.staging}")
        for e in (*s.source_origin, *s.valid):
            self.expr(e, scope, f"stage load of {s.staging}")

    @RULES.handles(StageStore)
    def _StageStore(self, s: StageStore, scope: _Scope) -> None:
        self.staging(s.staging, scope)
        target = self.array(s.target, scope, f"stage store of {s.staging}")
        for e in s.target_origin:
            self.expr(e, scope, f"stage store of {s.staging}")
        self.whole_tile(s.target, target, s.target_origin, f"stage store of {s.staging}")

    @RULES.handles(BlockCopy)
    def _BlockCopy(self, s: BlockCopy, scope: _Scope) -> None:
        where = f"copy {s.source} -> {s.target}"
        for name, origin in ((s.source, s.source_origin), (s.target, s.target_origin)):
            buffer = self.array(name, scope, where)
            for e in origin:
                self.expr(e, scope, where)
            bounded = bool(s.valid) and name == s.source  # reads stop at the array's end, zeros beyond
            if buffer is not None:
                self.box(name, buffer, origin, s.shape, low_only=bounded)
                if name == s.source:
                    self.unswizzled(name, buffer, where)
                else:
                    self.whole_tile(name, buffer, origin, where)
        for e in s.valid:
            self.expr(e, scope, where)
        if s.asynchronous:
            self.uncommitted += 1

    @RULES.handles(AsyncCommit)
    def _AsyncCommit(self, s: AsyncCommit, scope: _Scope) -> None:
        self.commits += 1
        self.in_flight += 1
        self.uncommitted = 0

    @RULES.handles(AsyncWait)
    def _AsyncWait(self, s: AsyncWait, scope: _Scope) -> None:
        if not self.commits:
            self.report("async", f"wait_group {s.pending} before any commit_group")
        elif self.commits <= s.pending:
            self.report("async", f"wait_group {s.pending} after {self.commits} commit_group(s) waits for none of them")
        if self.uncommitted:
            self.report("async", f"wait_group {s.pending} with {self.uncommitted} cp.async copy(ies) not yet committed")
        if s.pending == 0:
            self.in_flight = 0

    @RULES.handles(Barrier)
    def _Barrier(self, s: Barrier, scope: _Scope) -> None:
        pass

    @RULES.handles(Fragment)
    def _Fragment(self, s: Fragment, scope: _Scope) -> None:
        scope.fragments[s.name] = s
        family = FAMILIES.get(s.family)
        if family is None:
            self.report("fragments", f"fragment {s.name}: no instruction family {s.family!r}")
        elif s.use != "accumulator" and not any(
                m.precision == s.precision and (s.m, s.n, s.k) in {sh.mnk for sh in m.shapes} for m in family.modes):
            self.report("fragments", f"fragment {s.name}: {family.name} has no {s.precision} {s.m}x{s.n}x{s.k} tiles")

    @RULES.handles(FragmentFill)
    def _FragmentFill(self, s: FragmentFill, scope: _Scope) -> None:
        self.fragment(s.fragment, scope, "fill", ("accumulator",))

    @RULES.handles(FragmentApply)
    def _FragmentApply(self, s: FragmentApply, scope: _Scope) -> None:
        self.columns(s, self.fragment(s.fragment, scope, s.op, ("accumulator",)), s.op)

    @RULES.handles(FragmentMap)
    def _FragmentMap(self, s: FragmentMap, scope: _Scope) -> None:
        """A fused epilogue: an accumulator of a family that places its elements, the body run
        per element writing nothing but the element and the thread's own arrays (a row vector's
        partials); global and shared arrays it only reads."""
        frag = self.fragment(s.fragment, scope, "epilogue", ("accumulator",))
        if frag is None:
            return
        family = FAMILIES.get(frag.family)
        if family is not None and family.opaque:
            self.report("fragments", f"epilogue of {s.fragment}: {family.name} tiles are opaque")
            return
        if frag.dtype is not s.dtype:
            self.report("types", f"epilogue of {s.fragment}: its elements are {frag.dtype.value}, not {s.dtype.value}")
        self.columns(s, frag, "epilogue")
        layout = wgmma_accumulator(frag.n, frag.dtype) if family.issued_by == "warpgroup" \
            else family.tile_layout("accumulator", (frag.m, frag.n, frag.k), frag.precision, frag.dtype)
        inner = scope.inner()
        inner.arrays[s.fragment] = PrivateArray(s.fragment, s.dtype, (layout.elements,))
        for name in (ELEMENT.name, s.row, s.col):
            self.declare(name, scope, "epilogue variable")
            inner.variables.add(name)
            inner.varying.add(name)
        for stmt in walk_statements(s.body):
            if isinstance(stmt, Store) and stmt.buffer != s.fragment \
                    and not isinstance(scope.arrays.get(stmt.buffer), PrivateArray):
                self.report("fragments", f"epilogue of {s.fragment}: its body stores to {stmt.buffer}")
            elif not isinstance(stmt, Store | If | Let):
                self.report("fragments", f"epilogue of {s.fragment}: a {type(stmt).__name__} in its body")
        self.body(s.body, inner)

    @RULES.handles(FragmentAdd)
    def _FragmentAdd(self, s: FragmentAdd, scope: _Scope) -> None:
        frag = self.fragment(s.fragment, scope, "add", ("accumulator",))
        source = self.fragment(s.source, scope, f"add to {s.fragment}", ("accumulator",))
        if frag is None or source is None:
            return
        self.columns(s, frag, "add")
        if (frag.family, frag.m, frag.n) != (source.family, source.m, source.n):
            self.report("fragments", f"add of {s.source} to {s.fragment}: a {source.family} {source.m}x{source.n} "
                                     f"tile to a {frag.family} {frag.m}x{frag.n} one")
        elif frag.family in FAMILIES and FAMILIES[frag.family].layouts is None \
                and FAMILIES[frag.family].issued_by != "warpgroup":
            self.report("fragments", f"add of {s.source} to {s.fragment}: {frag.family} tiles are opaque")

    @RULES.handles(FragmentConvert)
    def _FragmentConvert(self, s: FragmentConvert, scope: _Scope) -> None:
        """A register A tile of wgmma from a window of the same family's accumulator."""
        frag = self.fragment(s.fragment, scope, "conversion", ("matrix_a",))
        source = self.fragment(s.source, scope, f"conversion into {s.fragment}", ("accumulator",))
        if frag is None or source is None:
            return
        what = f"conversion of {s.source} into {s.fragment}"
        if not frag.in_registers or frag.family != "wgmma" or source.family != "wgmma":
            self.report("fragments", f"{what}: a {frag.family} A tile{' in registers' * frag.in_registers} from a "
                                     f"{source.family} accumulator (wgmma's A in registers only)")
        elif frag.dtype.size != 2 or not frag.dtype.is_float:
            self.report("types", f"{what}: a {frag.dtype.value} A tile (16-bit floats only)")
        elif s.first % frag.k or not 0 <= s.first < s.first + frag.k <= source.n:
            self.report("fragments", f"{what}: columns {s.first}..{s.first + frag.k - 1} of a {source.n}-column "
                                     f"tile (a whole {frag.k}-column step inside it)")

    @RULES.handles(FragmentLoad)
    def _FragmentLoad(self, s: FragmentLoad, scope: _Scope) -> None:
        frag = self.tile(s.fragment, s.buffer, s.origin, scope, "load", s.edge)
        if frag is None or frag.family not in FAMILIES:
            return
        family = FAMILIES[frag.family]
        paths = (("descriptor",) if frag.use != "accumulator" else ("elements",)) if family.issued_by == "warpgroup" \
            else ("",) if family.layouts is None else ("ldmatrix", "elements")
        if s.path not in paths:
            ways = " or ".join(map(repr, paths))
            self.report("fragments", f"load of {s.fragment}: {family.name} moves tiles by {ways}, not {str(s.path)!r}")
        elif s.path in ("ldmatrix", "descriptor") and not isinstance(scope.arrays.get(s.buffer), SharedBuffer):
            self.report("fragments", f"load of {s.fragment}: {s.path} reads shared memory, {s.buffer} is not shared")
        source = scope.arrays.get(s.buffer)
        if frag.use == "accumulator" and isinstance(source, SharedBuffer) and source.swizzle:
            if family.issued_by != "warpgroup" or s.row_stride != source.swizzle // source.dtype.size \
                    or s.col_stride != 1:
                self.report("swizzle", f"load of {s.fragment} from the swizzled {s.buffer}")
            self.whole_tile(s.buffer, source, s.origin, f"load of {s.fragment}")
        self.columns(s, frag, "load")
        self.vector(s, frag)

    @RULES.handles(FragmentStore)
    def _FragmentStore(self, s: FragmentStore, scope: _Scope) -> None:
        frag = self.tile(s.fragment, s.buffer, s.origin, scope, "store", s.edge)
        if frag is not None and frag.use != "accumulator":
            self.report("fragments", f"store of {s.fragment}: a {frag.use} fragment is not stored")
        target = scope.arrays.get(s.buffer)
        wgmma = frag is not None and frag.family in FAMILIES and FAMILIES[frag.family].issued_by == "warpgroup"
        if isinstance(target, SharedBuffer) and target.swizzle:
            if not wgmma or s.row_stride != target.swizzle // target.dtype.size or s.col_stride != 1:
                self.report("swizzle", f"store of {s.fragment} into the swizzled {s.buffer}")
            self.whole_tile(s.buffer, target, s.origin, f"store of {s.fragment}")
        self.columns(s, frag, "store")
        if frag is not None and frag.family in FAMILIES:
            self.vector(s, frag)

    def columns(self, s, frag: Fragment | None, what: str) -> None:
        """A window of a warpgroup accumulator's columns: one run of every lane's elements."""
        if s.columns is None or frag is None:
            return
        first, last = s.columns
        wgmma = frag.family in FAMILIES and FAMILIES[frag.family].issued_by == "warpgroup"
        try:
            if not wgmma or frag.use != "accumulator" or not 0 <= first < last <= frag.n:
                raise ValueError(f"columns {first}..{last - 1} of a {frag.family} {frag.use} {frag.n}-column tile")
            column_elements(wgmma_accumulator(frag.n, frag.dtype), WARPGROUP, first, last)
        except ValueError as error:
            self.report("fragments", f"{what} of {s.fragment}: {error}")

    def vector(self, s, frag: Fragment) -> None:
        family = FAMILIES[frag.family]
        elements = (family.tile_layout(frag.use, (frag.m, frag.n, frag.k), frag.precision,
                                       frag.dtype if frag.use == "accumulator" else None).elements
                    if family.layouts is not None else 0)
        if family.issued_by == "warpgroup" and frag.use == "accumulator":
            elements = wgmma_accumulator(frag.n, frag.dtype).elements
        if s.vector != 1 and (not elements or elements % s.vector):
            self.report("fragments", f"{s.fragment}: vectors of {s.vector} elements in a {family.name} tile "
                                     f"of {elements or 'opaque'} element(s) per lane")

    @RULES.handles(FragmentMma)
    def _FragmentMma(self, s: FragmentMma, scope: _Scope) -> None:
        uses = {s.a: "matrix_a", s.b: "matrix_b", s.c: "accumulator", s.d: "accumulator"}
        frags = [self.fragment(name, scope, "mma", (use,)) for name, use in uses.items()]
        shapes = {(f.m, f.n, f.k) for f in frags if f is not None}
        if len(shapes) > 1:
            self.report("fragments", f"mma {s.d} = {s.a} @ {s.b} + {s.c}: fragments of shapes {sorted(shapes)}")
        families = {f.family for f in frags if f is not None}
        if len(families) > 1:
            self.report("fragments", f"mma {s.d} = {s.a} @ {s.b} + {s.c}: fragments of families {sorted(families)}")

    # -- Hopper ---------------------------------------------------------------------------------

    def mbarrier(self, name: str, index: Expr, scope: _Scope, what: str) -> None:
        spec = self.array(name, scope, what)
        if spec is not None and (not isinstance(spec, SharedBuffer) or spec.dtype is not ScalarType.uint64):
            self.report("hopper", f"{what}: {name} is not an mbarrier (a uint64 shared buffer)")
        self.expr(index, scope, what)
        if spec is not None:
            self.bounds(name, spec, (index,))

    @RULES.handles(MbarrierInit)
    def _MbarrierInit(self, s: MbarrierInit, scope: _Scope) -> None:
        self.mbarrier(s.barrier, s.index, scope, "mbarrier init")
        if s.count < 1:
            self.report("hopper", f"mbarrier init of {s.barrier}: {s.count} arrivals per phase")

    @RULES.handles(MbarrierArrive)
    def _MbarrierArrive(self, s: MbarrierArrive, scope: _Scope) -> None:
        self.mbarrier(s.barrier, s.index, scope, "mbarrier arrive")
        if s.cluster and (s.cluster > self.cluster or s.transaction_bytes):
            self.report("hopper", f"mbarrier arrive on {s.barrier} in {s.cluster} blocks of a cluster of {self.cluster}"
                        + (" with transaction bytes" if s.transaction_bytes else ""))

    @RULES.handles(GridDependencyWait)
    def _GridDependencyWait(self, s: GridDependencyWait, scope: _Scope) -> None:
        if not self.dependent:
            self.report("dependent", "GridDependencyWait in a kernel not launched as a dependent (dependent_launch): "
                                     "it waits for nothing")

    @RULES.handles(LaunchDependents)
    def _LaunchDependents(self, s: LaunchDependents, scope: _Scope) -> None:
        """Allowed anywhere: it only lets the next kernel's blocks be scheduled."""

    @RULES.handles(ClusterSync)
    def _ClusterSync(self, s: ClusterSync, scope: _Scope) -> None:
        if self.cluster == 1:
            self.report("hopper", "a cluster barrier in a kernel launched without clusters")

    @RULES.handles(MbarrierWait)
    def _MbarrierWait(self, s: MbarrierWait, scope: _Scope) -> None:
        self.mbarrier(s.barrier, s.index, scope, "mbarrier wait")
        self.expr(s.parity, scope, "mbarrier wait parity")

    def tma_copy(self, s: TmaLoad | TmaStore, tile: str, origin, scope: _Scope, what: str):
        """What a TMA copy and its shared tile ``tile`` agree on: declared names, a tensor map, a
        shared tile; returns (tile's buffer, map spec, array or None, the map's box in storage
        order, contiguous dimension last), or None where one of them is wrong."""
        target = self.array(tile, scope, what)
        for e in (*origin, *s.coords):
            self.expr(e, scope, what)
        param = self.structs.get(s.tensor_map)
        if param is None or param.builder != "tensor_map":
            self.report("hopper", f"{what}: {s.tensor_map} is not a tensor map parameter")
            return None
        if not isinstance(target, SharedBuffer):
            self.report("hopper", f"{what}: {tile} is not a shared buffer")
            return None
        spec = param.spec
        array = scope.arrays.get(spec.array)
        box = tuple(spec.box)
        if array is not None and 1 in array.strides and array.strides.index(1) == 0:
            box = box[::-1]
        return target, spec, array, box

    @RULES.handles(TmaLoad)
    def _TmaLoad(self, s: TmaLoad, scope: _Scope) -> None:
        what = f"TMA copy into {s.target}"
        self.mbarrier(s.barrier, s.index, scope, what)
        found = self.tma_copy(s, s.target, s.target_origin, scope, what)
        if found is None:
            return
        target, spec, array, box = found
        dims = tma.dimension_order(target.strides)[-len(box):]
        tile = tuple(target.shape[d] for d in dims)  # the tile in storage order, as the box
        rows = tile[0] // box[0] if box[0] and tile[0] % box[0] == 0 else 0  # a multicast part: rows of a tile
        if tile[1:] != box[1:] or not rows or (rows > 1 and not s.multicast) or target.swizzle != spec.swizzle:
            self.report("hopper", f"{what}: tiles {tile} swizzled {target.swizzle} do not take "
                                  f"{spec.array}'s boxes {box} swizzled {spec.swizzle}")
        if array is not None and len(s.coords) != len(array.shape):
            self.report("hopper", f"{what}: {len(s.coords)} coordinate(s) for the {len(array.shape)}-D {spec.array}")
        if s.multicast and (s.multicast >= 1 << self.cluster):
            self.report("hopper", f"{what}: multicast to ranks {s.multicast:#x} of a cluster of {self.cluster}")
        if rows > 1:  # the part starts at a multiple of its rows, whole 1024-byte swizzle atoms
            start = s.target_origin[-2]
            step = start.rhs if isinstance(start, Binary) and start.op == "*" else start
            if not isinstance(step, Const) or step.value % box[0] or (box[0] * target.swizzle) % 1024:
                self.report("swizzle", f"{what}: a part of {box[0]} rows starts at row {start} of the swizzled tile")
            self.whole_tile(s.target, target, (*s.target_origin[:-2], Const(0), s.target_origin[-1]), what)
        else:
            self.whole_tile(s.target, target, s.target_origin, what)

    @RULES.handles(TmaStore)
    def _TmaStore(self, s: TmaStore, scope: _Scope) -> None:
        what = f"TMA store from {s.source}"
        found = self.tma_copy(s, s.source, s.source_origin, scope, what)
        if found is None:
            return
        source, spec, array, box = found
        if array is not None and (len(s.coords) != len(array.shape) or array.dtype is not source.dtype):
            self.report("hopper", f"{what}: {len(s.coords)} coordinate(s) of {source.dtype.value} for the "
                                  f"{len(array.shape)}-D {array.dtype.value} {spec.array}")
        tile = tuple(source.shape[-len(box):])
        if tile != box or source.swizzle != spec.swizzle:
            self.report("hopper", f"{what}: tiles {tile} swizzled {source.swizzle} are not {spec.array}'s boxes "
                                  f"{box} swizzled {spec.swizzle}")
        self.whole_tile(s.source, source, s.source_origin, what)

    @RULES.handles(BulkCommit)
    def _BulkCommit(self, s: BulkCommit, scope: _Scope) -> None:
        pass

    @RULES.handles(BulkWait)
    def _BulkWait(self, s: BulkWait, scope: _Scope) -> None:
        if s.pending < 0:
            self.report("hopper", f"bulk wait_group {s.pending}")

    @RULES.handles(NamedBarrier)
    def _NamedBarrier(self, s: NamedBarrier, scope: _Scope) -> None:
        self.expr(s.id, scope, "named barrier")
        if isinstance(s.id, Const) and not 1 <= s.id.value <= 15:
            self.report("hopper", f"named barrier {s.id.value}: ids are 1..15")
        if s.threads % 32 or not 0 < s.threads <= self.threads:
            self.report("hopper", f"named barrier of {s.threads} threads in a block of {self.threads}")

    @RULES.handles(Fence)
    def _Fence(self, s: Fence, scope: _Scope) -> None:
        if s.kind not in ("mbarrier_init", "proxy_async"):
            self.report("hopper", f"unknown fence {s.kind!r}")

    @RULES.handles(WarpgroupFence)
    def _WarpgroupFence(self, s: WarpgroupFence, scope: _Scope) -> None:
        pass

    @RULES.handles(WarpgroupCommit)
    def _WarpgroupCommit(self, s: WarpgroupCommit, scope: _Scope) -> None:
        pass

    @RULES.handles(WarpgroupWait)
    def _WarpgroupWait(self, s: WarpgroupWait, scope: _Scope) -> None:
        if s.pending < 0:
            self.report("hopper", f"wgmma wait_group {s.pending}")

    @RULES.handles(Roles)
    def _Roles(self, s: Roles, scope: _Scope) -> None:
        taken: set[int] = set()
        for role in s.roles:
            threads = set(range(role.first, role.first + role.threads))
            if role.first % WARPGROUP or role.threads % WARPGROUP or not role.threads \
                    or role.first + role.threads > self.threads:
                self.report("hopper", f"role {role.name}: threads {role.first}..{role.first + role.threads - 1} "
                                      f"are not whole warpgroups of the block's {self.threads}")
            if role.teams < 1 or role.threads % (role.teams * WARPGROUP):
                self.report("hopper", f"role {role.name}: {role.threads} threads do not make {role.teams} team(s) of "
                                      "whole warpgroups")
            if threads & taken:
                self.report("hopper", f"role {role.name} shares threads with another role")
            taken |= threads
            if role.registers and (role.registers % 8 or not 24 <= role.registers <= 256):
                self.report("hopper", f"role {role.name}: setmaxnreg takes multiples of 8 from 24 to 256, not "
                                      f"{role.registers}")
            self.body(role.body, scope.inner(f"only the {role.name} role runs it"))
        if not roles_fit(s.roles, self.threads, self.min_blocks):
            self.report("hopper", "the roles' setmaxnreg budgets (" + ", ".join(
                f"{r.threads} x {r.registers}" for r in s.roles) + f") exceed the {self.threads} threads x "
                f"{launch_registers(self.threads, self.min_blocks)} registers the block holds at launch: an increase "
                "would wait forever")

    # -- names, tiles, bounds -----------------------------------------------------------------

    def array(self, name: str, scope: _Scope, where: str):
        if name not in scope.arrays:
            self.report("declared", f"{where}: {name} is not a declared buffer")
            return None
        return scope.arrays[name]

    def staging(self, name: str, scope: _Scope) -> None:
        if name not in scope.stagings:
            self.report("declared", f"staging {name} is used before it is declared")

    def fragment(self, name: str, scope: _Scope, what: str, uses: tuple[str, ...]) -> Fragment | None:
        frag = scope.fragments.get(name)
        if frag is None:
            self.report("declared", f"{what}: fragment {name} is used before it is declared")
        elif frag.use not in uses:
            self.report("fragments", f"{what}: {name} is a {frag.use} fragment, not {' or '.join(uses)}")
        return frag

    def tile(self, fragment: str, buffer: str, origin, scope: _Scope, what: str, edge=None) -> Fragment | None:
        frag = self.fragment(fragment, scope, what, ("matrix_a", "matrix_b", "accumulator"))
        spec = self.array(buffer, scope, f"{what} of {fragment}")
        for e in origin:
            self.expr(e, scope, f"{what} of {fragment}")
        if frag is not None and spec is not None and spec.dtype != frag.dtype and not self.converts(frag, spec, edge):
            self.report("fragments", f"{what} of {fragment}: {frag.dtype.value} tiles from {buffer}'s "
                                     f"{spec.dtype.value} elements")
        return frag

    @staticmethod
    def converts(frag: Fragment, spec, edge) -> bool:
        """An accumulator of another type than its array moves element by element (families with
        lane layouts: each element converted, a fused epilogue's integer array too) or, between
        floating-point types, through the staging scratch (wmma)."""
        if frag.use != "accumulator":
            return False
        family = FAMILIES.get(frag.family)
        by_elements = family is not None and (family.layouts is not None or family.issued_by == "warpgroup")
        floats = frag.dtype.is_float and spec.dtype.is_float
        return by_elements or (floats and edge is not None and edge.staged)

    def unswizzled(self, name: str, buffer, where: str) -> None:
        if getattr(buffer, "swizzle", 0):
            self.report("swizzle", f"{where}: element access to the swizzled {name} (only copies into it and "
                                   "tile loads address it)")

    def whole_tile(self, name: str, buffer, origin: tuple[Expr, ...], where: str) -> None:
        """A copy into a swizzled tile starts at its first row and column (the XOR pattern counts
        rows from there)."""
        if getattr(buffer, "swizzle", 0) and not all(isinstance(e, Const) and e.value == 0 for e in origin[-2:]):
            self.report("swizzle", f"{where}: a copy into the swizzled {name} starts inside a tile")

    def bounds(self, name: str, buffer, index: tuple[Expr, ...]) -> None:
        values = [e.value for e in index if isinstance(e, Const)]
        if len(values) == len(index) == len(buffer.shape) and any(
                not 0 <= v < n for v, n in zip(values, buffer.shape)):
            self.report("bounds", f"{name}[{', '.join(map(str, values))}] is outside its shape {tuple(buffer.shape)}")

    def box(self, name: str, buffer, origin: tuple[Expr, ...], shape: tuple[int, ...], low_only: bool) -> None:
        """A copy's box lies in the buffer's last dimensions, from a constant origin (a bounded
        copy's source only has to start inside: its reads stop at the end)."""
        dims = buffer.shape[len(buffer.shape) - len(shape):]
        starts = origin[len(origin) - len(shape):]
        if not all(isinstance(e, Const) for e in starts):
            return
        if any(e.value < 0 or (not low_only and e.value + n > d) for e, n, d in zip(starts, shape, dims)):
            self.report("bounds", f"a copy's box {list(shape)} at {[e.value for e in starts]} leaves {name}'s "
                                  f"shape {tuple(buffer.shape)}")

    # -- expressions --------------------------------------------------------------------------

    def expr(self, e: Expr, scope: _Scope, where: str) -> None:
        if isinstance(e, Var):
            if e.name not in scope.variables:
                self.report("declared", f"{where}: variable {e.name} is not defined here")
        elif isinstance(e, Load):
            buffer = self.array(e.buffer, scope, where)
            for i in e.index:
                self.expr(i, scope, where)
            if buffer is not None:
                self.bounds(e.buffer, buffer, e.index)
                self.unswizzled(e.buffer, buffer, where)
                if e.dtype is not None and e.dtype != buffer.dtype:
                    self.report("types", f"{where}: a {e.dtype.value} load of {e.buffer}'s {buffer.dtype.value} "
                                         "elements")
        elif isinstance(e, Binary):
            self.expr(e.lhs, scope, where)
            self.expr(e.rhs, scope, where)
            if e.op not in _COMPARISONS:
                for side in (e.lhs, e.rhs):
                    self.operand(e, side, self.dtype_of(side, scope), where)
            elif e.dtype is ScalarType.bool and e.op not in ("&&", "||") \
                    and self.dtype_of(e.lhs, scope) != self.dtype_of(e.rhs, scope):
                kinds = [(self.dtype_of(x, scope) or self.index_type).value for x in (e.lhs, e.rhs)]
                self.report("types", f"{where}: '{e.op}' compares a {kinds[0]} value with a {kinds[1]} value")
        elif isinstance(e, Unary | Cast):
            self.expr(e.operand, scope, where)
        elif isinstance(e, Call):
            for arg in e.args:
                self.expr(arg, scope, where)
            self.call(e, [self.dtype_of(a, scope) for a in e.args], where)
        self.computable(e, scope, where)

    def computable(self, e: Expr, scope: _Scope, where: str) -> None:
        """No operation, constant or comparison in a stored-only type (the 8-bit floats: CUDA
        C++ has conversions of them only)."""
        compared = isinstance(e, Binary) and e.op in _COMPARISONS
        types = [self.dtype_of(x, scope) for x in (e.lhs, e.rhs)] if compared else \
            [e.dtype] if isinstance(e, Binary | Unary | Call | Const) else []
        for dtype in types:
            if dtype is not None and dtype.arithmetic is not dtype:
                what = f"'{e.op}'" if isinstance(e, Binary | Unary) else type(e).__name__.lower()
                self.report("types", f"{where}: a {what} of {dtype.value} values, which have no arithmetic "
                                     f"(compute in {dtype.arithmetic.value} and convert)")

    def call(self, e: Call, types: list[ScalarType | None], where: str) -> None:
        """A function's arguments of its signature's types (``functions.SIGNATURES``)."""
        name = e.function.value
        if e.function is Function.SELECT:
            expected = [ScalarType.bool, e.dtype, e.dtype]
        elif e.function is Function.LOGICAL_NOT:
            expected = [ScalarType.bool]
        else:
            expected = [e.dtype] * len(e.args)
            if not SIGNATURES[e.function].accepts(e.dtype):
                self.report("types", f"{where}: {name} of {e.dtype.value} values")
        for n, (have, want) in enumerate(zip(types, expected)):
            if have != want:
                self.report("types", f"{where}: argument {n + 1} of a {e.dtype.value} {name} is "
                                     f"{have.value if have else 'an index'}, not {want.value}")

    def operand(self, e: Binary, side: Expr, dtype: ScalarType | None, where: str) -> None:
        """An operand's type against a typed operation's; index arithmetic takes scalar
        parameters of the index type only."""
        if e.dtype is not None and dtype is not None and dtype != e.dtype:
            self.report("types", f"{where}: a {dtype.value} operand of a {e.dtype.value} '{e.op}'")
        if e.dtype is None and isinstance(side, Var) and dtype not in (None, self.index_type):
            self.report("types", f"{where}: the {dtype.value} scalar {side.name} in {self.index_type.value} "
                                 f"index arithmetic '{e.op}'")

    def varies(self, e: Expr, scope: _Scope) -> bool:
        """Whether threads of one block may see different values of ``e``."""
        if isinstance(e, Var):
            return e.name in scope.varying
        if isinstance(e, Load):
            own = isinstance(scope.arrays.get(e.buffer), PrivateArray)  # each thread's own values
            return own or any(self.varies(i, scope) for i in e.index)
        return any(self.varies(x, scope) for x in operands(e))


def _dtype(e: Expr):
    return getattr(e, "dtype", None)


def _label(s: Stmt) -> str:
    comment = getattr(s, "comment", "")
    return f" ({comment})" if comment else ""
