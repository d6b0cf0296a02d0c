"""CUDA text of the Hopper statements: mbarriers, TMA copies, fences, wgmma groups and warp
roles (emitters registered with cuda.py's registry), the wgmma family's tile statements, and
the per-shape wgmma helpers a source file defines before its kernels."""

from __future__ import annotations

from .. import tma
from ..instructions import WARPGROUP, WGMMA, column_elements, descriptor, operand_k_major, wgmma_accumulator
from ..ir.kernel import (
    BulkCommit,
    BulkWait,
    ClusterSync,
    Fence,
    Fragment,
    FragmentConvert,
    FragmentMma,
    GridDependencyWait,
    Kernel,
    LaunchDependents,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    Roles,
    Stmt,
    TmaLoad,
    TmaStore,
    Var,
    WarpgroupCommit,
    WarpgroupFence,
    WarpgroupWait,
)
from ..ir.walk import walk_statements
from .cuda_printer import EMITTERS, INDENT
from .cuda_tensor import EMITTERS as TENSOR_EMITTERS
from .cuda_tensor import MmaSync


def _barrier(p, name: str, index) -> str:
    return f"&{name}[{p.offset(name, (index,))}]"


@EMITTERS.handles(MbarrierInit)
def _init(p, s: MbarrierInit, pad: str, depth: int) -> list[str]:
    return [f"{pad}schedc::mbarrier_init({_barrier(p, s.barrier, s.index)}, {s.count});"]


@EMITTERS.handles(MbarrierArrive)
def _arrive(p, s: MbarrierArrive, pad: str, depth: int) -> list[str]:
    comment = f"  // {s.comment}" if s.comment else ""
    if s.transaction_bytes:
        return [f"{pad}schedc::mbarrier_arrive_expect_tx({_barrier(p, s.barrier, s.index)}, "
                f"{s.transaction_bytes});{comment}"]
    if s.cluster:
        return [f"{pad}schedc::mbarrier_arrive_cluster({_barrier(p, s.barrier, s.index)}, {s.cluster});{comment}"]
    return [f"{pad}schedc::mbarrier_arrive({_barrier(p, s.barrier, s.index)});{comment}"]


@EMITTERS.handles(MbarrierWait)
def _wait(p, s: MbarrierWait, pad: str, depth: int) -> list[str]:
    comment = f"  // {s.comment}" if s.comment else ""
    return [f"{pad}schedc::mbarrier_wait({_barrier(p, s.barrier, s.index)}, {p.expr(s.parity)});{comment}"]


def _coords(p, s: TmaLoad | TmaStore) -> str:
    """A TMA copy's coordinates, innermost first (the tensor map's order)."""
    spec = next(v.spec for v in p.kernel.values if v.name == s.tensor_map)
    array = p.buffers[spec.array]
    order = tma.dimension_order(array.strides)[::-1]  # innermost first, as the loader encodes the map
    if len(order) != 2:
        raise ValueError(f"TMA copies of {len(order)}-D arrays are not emitted")
    return ", ".join(p.expr(s.coords[d]) for d in order)


@EMITTERS.handles(TmaLoad)
def _tma(p, s: TmaLoad, pad: str, depth: int) -> list[str]:
    coords = _coords(p, s)
    comment = [f"{pad}// TMA: {s.comment}"] if s.comment else []
    multicast = "_multicast" if s.multicast else ""
    mask = f", {s.multicast:#x}" if s.multicast else ""
    return [*comment, f"{pad}schedc::tma_load_2d{multicast}(&{s.target}[{p.offset(s.target, s.target_origin)}], "
                      f"&{s.tensor_map}, {coords}, {_barrier(p, s.barrier, s.index)}{mask});"]


@EMITTERS.handles(TmaStore)
def _tma_store(p, s: TmaStore, pad: str, depth: int) -> list[str]:
    comment = [f"{pad}// TMA store: {s.comment}"] if s.comment else []
    helper = "tma_add_2d" if s.adds else "tma_store_2d"
    return [*comment, f"{pad}schedc::{helper}(&{s.tensor_map}, {_coords(p, s)}, "
                      f"&{s.source}[{p.offset(s.source, s.source_origin)}]);"]


@EMITTERS.handles(BulkCommit, BulkWait)
def _bulk(p, s: BulkCommit | BulkWait, pad: str, depth: int) -> list[str]:
    if isinstance(s, BulkCommit):
        return [f"{pad}schedc::bulk_commit();"]
    comment = f"  // {s.comment}" if s.comment else ""
    return [f"{pad}schedc::bulk_wait<{s.pending}, {'true' if s.read else 'false'}>();{comment}"]


@EMITTERS.handles(NamedBarrier)
def _named_barrier(p, s: NamedBarrier, pad: str, depth: int) -> list[str]:
    comment = f"  // {s.comment}" if s.comment else ""
    name = "named_barrier_arrive" if s.arrive else "named_barrier"
    return [f"{pad}schedc::{name}({p.expr(s.id)}, {s.threads});{comment}"]


# the instruction of each statement of programmatic dependent launch (sm_90; see lower/chain.py)
_DEPENDENT_LAUNCH = {GridDependencyWait: '"griddepcontrol.wait;" ::: "memory"',
                     LaunchDependents: '"griddepcontrol.launch_dependents;"'}


@EMITTERS.handles(GridDependencyWait, LaunchDependents)
def _dependent_launch(p, s: GridDependencyWait | LaunchDependents, pad: str, depth: int) -> list[str]:
    comment = f"  // {s.comment}" if s.comment else ""
    return [f"{pad}asm volatile({_DEPENDENT_LAUNCH[type(s)]});{comment}"]


@EMITTERS.handles(ClusterSync)
def _cluster_sync(p, s: ClusterSync, pad: str, depth: int) -> list[str]:
    comment = f"  // {s.comment}" if s.comment else ""
    return [f"{pad}schedc::cluster_sync();{comment}"]


@EMITTERS.handles(Fence)
def _fence(p, s: Fence, pad: str, depth: int) -> list[str]:
    return [f"{pad}schedc::fence_{s.kind}();"]


@EMITTERS.handles(WarpgroupFence, WarpgroupCommit, WarpgroupWait)
def _wgmma_sync(p, s: Stmt, pad: str, depth: int) -> list[str]:
    if isinstance(s, WarpgroupFence):
        return [f"{pad}schedc::wgmma_fence();"]
    if isinstance(s, WarpgroupCommit):
        return [f"{pad}schedc::wgmma_commit();"]
    return [f"{pad}schedc::wgmma_wait<{s.pending}>();"]


@EMITTERS.handles(Roles)
def _roles(p, s: Roles, pad: str, depth: int) -> list[str]:
    """One branch per role on the thread's warpgroup; each first moves its register budget."""
    default = p.kernel.registers_at_launch
    lines = [f"{pad}// warp specialization: " + "; ".join(
        f"{r.name} = threads {r.first}..{r.first + r.threads - 1}"
        + (f" ({r.teams} teams of {r.threads // r.teams} taking tiles in turn)" if r.teams > 1 else "")
        for r in s.roles)]
    for n, role in enumerate(s.roles):
        cond = f"threadIdx.x >= {role.first} && threadIdx.x < {role.first + role.threads}"
        head = "if" if n == 0 else "} else if"
        lines.append(f"{pad}{head} ({cond}) {{" if n < len(s.roles) - 1 else f"{pad}}} else {{  // {role.name}")
        if n < len(s.roles) - 1:
            lines[-1] += f"  // {role.name}"
        if role.registers:
            way = "inc" if role.registers > default else "dec"
            lines.append(f"{pad}{INDENT}schedc::setmaxnreg_{way}<{role.registers}>();")
        lines += p.body(role.body, depth + 1)
    return [*lines, f"{pad}}}"]


class Wgmma(MmaSync):
    """wgmma: operands are matrix descriptors of swizzled TMA tiles in shared memory; the
    accumulator is each thread's n/2 elements of the warpgroup's 64 x n tile, loaded and stored
    element by element (vectors of two where aligned), guarded at C's edges."""

    lane = Var("wg_lane")
    lanes = WARPGROUP

    @staticmethod
    def prelude() -> list[str]:
        return [f"const int wg_lane = threadIdx.x % {WARPGROUP};"]

    def layout(self, f: Fragment):
        return wgmma_accumulator(f.n, f.dtype)

    def declare(self, s: Fragment) -> list[str]:
        if s.in_registers:
            return [f"unsigned {s.name}[{s.k // 4}];  // 64x{s.k} A tile in registers: {s.k // 2} {s.dtype.value} "
                    "element(s) per thread, two to a register"]
        if s.use != "accumulator":
            return []  # a descriptor, made where the tile is loaded
        layout = self.layout(s)
        return [f"alignas(16) {s.dtype.c_type} {s.name}[{layout.elements}];  // 64x{s.n} tile: "
                f"{layout.elements} element(s) per thread (wgmma accumulator layout)"]

    def load(self, s) -> list[str]:
        frag = self.p.fragments[s.fragment]
        if frag.use == "accumulator":
            return self.elements(s, s.fragment, store=False)
        spec = self.p.buffers[s.buffer]
        d = descriptor(spec, operand_k_major(frag.use, frag.layout))
        return [f"const unsigned long long {s.fragment} = schedc::wgmma_descriptor(&{s.buffer}"
                f"[{self.p.offset(s.buffer, s.origin)}], {d.lbo}, {d.sbo}, {d.mode});"]

    def mma(self, s: FragmentMma) -> list[str]:
        a, b, c = (self.p.fragments[n] for n in (s.a, s.b, s.c))
        if s.d != s.c:
            raise ValueError("wgmma accumulates in place")
        return [f"{helper_name(a, b, c)}({s.d}, {s.a}, {s.b});"]

    def convert(self, s: FragmentConvert) -> list[str]:
        """Each register of the A tile: two of the thread's accumulator elements, rounded."""
        a, source = self.p.fragments[s.fragment], self.p.fragments[s.source]
        first = column_elements(self.layout(source), WARPGROUP, s.first, s.first + a.k)[0]
        pack = f"schedc_pack2_{a.dtype.value}"
        return [f"// {s.fragment} = {s.source}'s columns {s.first}..{s.first + a.k - 1} as {a.dtype.value}",
                *(f"{s.fragment}[{q}] = {pack}({s.source}[{first + 2 * q}], {s.source}[{first + 2 * q + 1}]);"
                  for q in range(a.k // 4))]


_PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "e4m3", "e5m2": "e5m2", "s8": "s8", "u8": "u8"}
_INTEGER = ("s8", "u8")  # s32 accumulators; the instruction takes no scale or negation of a and b


def helper_name(a: Fragment, b: Fragment, c: Fragment) -> str:
    ta, tb = (0 if operand_k_major(f.use, f.layout) else 1 for f in (a, b))
    if a.in_registers:
        return f"schedc_wgmma_m64n{c.n}k{a.k}_{c.dtype.value}_{a.precision}_r{tb}"
    return f"schedc_wgmma_m64n{c.n}k{a.k}_{c.dtype.value}_{a.precision}_{ta}{tb}"


# two float32 values rounded to a 16-bit float and packed into one register, the first in the low half
_PACKS = {"float16": ("__half2", "__floats2half2_rn"), "bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn")}


def _pack_helper(dtype: str) -> str:
    pair, convert = _PACKS[dtype]
    return "\n".join([
        f"// two float32 values as {dtype}, packed into one register (the first in the low half)",
        f"__device__ __forceinline__ unsigned schedc_pack2_{dtype}(float lo, float hi) {{",
        f"    const {pair} v = {convert}(lo, hi);",
        "    return *reinterpret_cast<const unsigned*>(&v);",
        "}\n",
    ])


def helpers(kernels: list[Kernel]) -> list[str]:
    """A device function per wgmma shape, type and operand majorness the kernels use: the
    instruction with the thread's n/2 accumulators as operands."""
    seen: dict[str, str] = {}
    for kernel in kernels:
        frags = {s.name: s for s in walk_statements(kernel.body) if isinstance(s, Fragment)}
        for s in walk_statements(kernel.body):
            if isinstance(s, FragmentMma) and frags[s.a].family == "wgmma":
                a, b, c = frags[s.a], frags[s.b], frags[s.c]
                name = helper_name(a, b, c)
                if name not in seen:
                    seen[name] = _helper(name, a, b, c)
            elif isinstance(s, FragmentConvert):
                dtype = frags[s.fragment].dtype.value
                seen.setdefault(f"pack2_{dtype}", _pack_helper(dtype))
    return list(seen.values())


def _helper(name: str, a: Fragment, b: Fragment, c: Fragment) -> str:
    count = c.n // 2
    ptx = _PTX_TYPES[a.precision]
    integer = a.precision in _INTEGER
    ta, tb = (0 if operand_k_major(f.use, f.layout) else 1 for f in (a, b))
    trans = f", {ta}, {tb}" if WGMMA.transposes(a.precision) else ""  # imm-trans-a/b: 16-bit types only
    if a.in_registers:
        return _register_helper(name, a, c, tb)
    scales = "" if integer else f", 1, 1{trans}"  # imm-scale-a/b (and trans): floating-point forms only
    registers = ", ".join(f"%{n}" for n in range(count))
    outputs = ", ".join(f'"+{"r" if integer else "f"}"(d[{n}])' for n in range(count))
    d_type, element = ("s32", "int") if integer else ("f32", "float")
    return "\n".join([
        f"// d (64x{c.n}, {d_type}) += a (64x{a.k}) * b ({a.k}x{c.n}), {ptx}: a {'k' if not ta else 'm'}-major, "
        f"b {'k' if not tb else 'n'}-major, from matrix descriptors",
        f"__device__ __forceinline__ void {name}({element} (&d)[{count}], unsigned long long a, "
        "unsigned long long b) {",
        "#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)",
        '    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(count + 2) + ', 0;\\n"',
        f'        "wgmma.mma_async.sync.aligned.m64n{c.n}k{a.k}.{d_type}.{ptx}.{ptx} "',
        f'        "{{{registers}}}, "',
        f'        "%{count}, %{count + 1}, p{scales};\\n}}\\n"',
        f"        : {outputs}",
        '        : "l"(a), "l"(b), "r"(1) : "memory");',
        "#else",
        "    __trap();",
        "#endif",
        "}\n",
    ])


def _register_helper(name: str, a: Fragment, c: Fragment, tb: int) -> str:
    """The wgmma whose A is the thread's registers (four of them: 8 of the 64 x 16 tile's elements)."""
    count = c.n // 2
    ptx = _PTX_TYPES[a.precision]
    registers = ", ".join(f"%{n}" for n in range(count))
    outputs = ", ".join(f'"+f"(d[{n}])' for n in range(count))
    a_regs = ", ".join(f"%{count + n}" for n in range(4))
    return "\n".join([
        f"// d (64x{c.n}, f32) += a (64x{a.k}, registers) * b ({a.k}x{c.n}), {ptx}: b {'k' if not tb else 'n'}-major, "
        "from a matrix descriptor",
        f"__device__ __forceinline__ void {name}(float (&d)[{count}], const unsigned (&a)[4], "
        "unsigned long long b) {",
        "#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)",
        '    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(count + 5) + ', 0;\\n"',
        f'        "wgmma.mma_async.sync.aligned.m64n{c.n}k{a.k}.f32.{ptx}.{ptx} "',
        f'        "{{{registers}}}, "',
        f'        "{{{a_regs}}}, %{count + 4}, p, 1, 1, {tb};\\n}}\\n"',
        f"        : {outputs}",
        '        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1) : "memory");',
        "#else",
        "    __trap();",
        "#endif",
        "}\n",
    ])


TENSOR_EMITTERS["wgmma"] = Wgmma
