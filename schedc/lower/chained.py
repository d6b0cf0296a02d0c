"""A chain of two tensor-core products in one kernel: the first's result, kept in registers, is
the second's A.

A schedule script writes the chain as two nests fused over the first product's C dimensions
(Accera's ``fuse``), each tensorized (two ``plan.tensorize`` calls); the second reads the first's
C, a TEMP array, converted to its operand type::

    S[i, j] += A[i, k] * B[k, j]                     (M, N1, K)    tensorize (iiii, jj, kkk)
    E[i, l] += cast(S[i, j], float16) * D[j, l]      (M, N1, N2)   tensorize (iiii, ll, jj), N1 / 16 passes
    acc.fuse((first, second), partial=2)            # i and j fused

The first product's m loop is the second's, and its n loop the second's k: each warpgroup holds
S's whole 64 x N1 tile when the second product starts. Before → after (wgmma, per tile)::

    for k ...: S += A·B                             S fragments over the k ring (as one product)
    for l ..., jj ...:                        →     _p{t} = S's columns 16t..16t+15 as float16
        E[...] += cast(S[...]) * D[...]             wait for D's tile; wgmma _e += _p{t} · D's tile t
                                                    store _e into E

``split`` is the legalize step (the ``chain`` pass): it checks the fused schedule holds a chain and
gives the first product's Model (the kernel's ring and loops) and the second's (``Chain``).
``match`` describes the second product's tiles, ``plan_tile`` the TMA tile of its B (one tile,
resident: copied once at the kernel's start with the first product's resident operands, as
``hopper`` copies them), ``statements`` the kernel's part of it after each tile of the first.
Its C leaves as a product's C does: by TMA through shared slots where they fit
(``hopper.plan_chain_output``), else by the threads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import poly
from ..errors import PlanError
from ..ir.affine import Affine
from ..ir.kernel import (
    WARPGROUP_INDEX,
    WARPGROUP_THREADS,
    Binary,
    Cast,
    Const,
    Expr,
    Fragment,
    FragmentConvert,
    FragmentMma,
    If,
    Load,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedBarrier,
    SharedBuffer,
    Stmt,
    WarpgroupCommit,
    WarpgroupFence,
    WarpgroupWait,
)
from ..ir.model import Model
from ..ir.types import ScalarType
from ..ir.walk import subexpressions
from ..targets import MemorySpace
from . import epilogue, online, rows, tensor

FULL, EMPTY = "chain_full", "chain_empty"  # a moving B tile of the second product: landed / free again


@dataclass(frozen=True)
class Chain:
    """The second product of a chain: its own Model (fused part 1 with its caches), and what the
    passes attach: its tiles (``tensorize``), its B operand's TMA tile (``shared``), how its C
    leaves (``epilogue``)."""

    model: Model
    source: str  # the first product's C (a TEMP array): the second's A, in registers
    facts: object = None  # poly.PolyFacts of its Model: its loops, guards and accesses
    outside: frozenset[str] = frozenset()  # the loops before the fusing index (the kernel runs both parts in them)
    # the loops its C's accumulator is kept across (serial, of the first's n outside the tile: each
    # iteration adds the product of one tile of the first's C), outermost first
    carried: tuple[str, ...] = ()
    tiles: tensor.TensorMatch | None = None
    cache: object = None  # hopper.TmaCache of the second's B: the same tile for every tile of the kernel
    output: object = None  # epilogue.TmaOutput: its C's tiles stored by TMA through shared slots (None: by the threads)
    online: online.Online | None = None  # row vectors of the first's C kept across the carried loops
    # the first's last tile of columns is partial and B's rows past the nest lie inside its array (the
    # next head's keys): the tile's columns past the nest are set to 0 before the second product reads them
    zero_past: bool = False

    def single_valued(self) -> dict[str, Affine]:
        """Its loops that take one value, at that value (its own loops have none in the kernel)."""
        return {lp.name: Affine((), self.facts.loop(lp.name).first) for lp in self.model.loops
                if self.facts.loop(lp.name).fixed and self.facts.loop(lp.name).extent == 1}



def where(model: Model) -> str:
    t = model.chained
    return f"tensorize(indices=({', '.join(t.loops)}), mma_shape={t.mma_shape.name})"


def where_second(chain: Chain) -> str:
    return tensor.where(chain.model)


def split(model: Model) -> tuple[Model, Chain | None]:
    """The first product's Model and the chain's second product, checked (module docstring);
    the Model itself and None without a second ``tensorize``. (The whole fused Model's facts
    proved the parts' order; each part is analysed again on its own.)"""
    if model.chained is None:
        return model, None
    here = where(model)
    fusion = model.fusion
    if fusion is None or len(fusion.parts) < 2 or len(fusion.parts[0]) != 1 or len(fusion.parts[-1]) != 1:
        shape = "no fused schedule" if fusion is None else \
            f"{len(fusion.parts)} fused schedules of " + ", ".join(str(len(p)) for p in fusion.parts) + " statement(s)"
        raise PlanError(here, f"a second product is tensorized in a fused schedule whose first nest is the first "
                              f"product and whose last is the second (one statement each; nests between are "
                              f"element-wise on the first's C), the first's C the second's A; the plan has {shape}")
    first, second = model.statements[fusion.parts[0][0]], model.statements[fusion.parts[-1][0]]
    source = first.buffer
    if not any(isinstance(e, Load) and e.buffer == source for e in subexpressions(second.value)):
        raise PlanError(here, f"the second product does not read {source}, the first's C: a chain of products "
                              f"feeds the first's result to the second as its A")
    if model.buffer(source).role != "temp":
        raise PlanError(here, f"{source} is Role.{model.buffer(source).role.upper()}: a chain keeps the first "
                              f"product's result in registers alone; make {source} Role.TEMP")
    for number, members in enumerate(fusion.parts[1:-1], 1):
        for n in members:
            if model.statements[n].buffer != source and not rows.is_row_vector(model, model.statements[n], first):
                raise PlanError(here, f"fused schedule {number} writes {model.statements[n].buffer}; between the "
                                      f"products of a chain the nests are element-wise on {source}, the registers "
                                      f"the second product reads, or write row vectors of it (TEMP arrays of one "
                                      f"element a row of {source})")
    if model.teams > 1 or model.clustering is not None:
        what = f"warp_specialize(teams={model.teams})" if model.teams > 1 else "plan.cluster"
        raise PlanError(here, f"{what} with a chain of products is not built: one team of consumer warpgroups, "
                              "no cluster")
    last = len(fusion.parts) - 1
    chained = _own_caches(model.part(last), source)
    return _own_caches(model.head(last)), Chain(chained, source, poly.analyze(chained), model.outside_fusion,
                                                 online=online.derive(model))


def _own_caches(part: Model, held: str = "") -> Model:
    """A part with the caches of the arrays its statements touch (not ``held``'s: the first
    product's C, whose cache is the first's)."""
    arrays = {s.buffer for s in part.statements}
    arrays |= {e.buffer for s in part.statements for e in subexpressions(s.value) if isinstance(e, Load)}
    return dataclasses.replace(part, caches=tuple(c for c in part.caches if c.array in arrays - {held}))


def match(chain: Chain, target, first_model: Model, first: tensor.TensorMatch) -> Chain:
    """The second product's tiles: A the first's accumulator in registers, B and C as a product's."""
    model, facts = chain.model, chain.facts
    t = model.tensorize
    here = tensor.where(model)
    if first.family != "wgmma":
        raise PlanError(here, f"the first product runs on {first.family} tiles; a chain feeds wgmma's A from "
                              "registers: tensorize both with wgmma shapes (M64xN*xK16_B1)", loops=t.loops)
    tensor._check_loops(model, facts, here)
    x, y, c_buffer = tensor._match_statement(here, model.statements[0])
    if y.buffer == chain.source:
        x, y = y, x
    m, n, k = t.loops
    fm, fn, _ = first_model.tensorize.loops
    if (m, k) != (fm, fn):
        raise PlanError(here, f"the second product's m and k loops are ({m}, {k}); a chain multiplies the first's "
                              f"result tile by tile: they must be the first's m and n loops ({fm}, {fn})",
                        loops=t.loops)
    operand = _converted_to(model.statements[0].value, chain.source)
    if operand is None or operand != y.dtype or operand.size != 2 or not operand.is_float:
        raise PlanError(here, f"the second product multiplies {chain.source} ({first.accumulator_type.value} in "
                              f"registers) by {y.buffer} ({y.dtype.value}); write acc.cast({chain.source}[...], "
                              f"{y.dtype.value}): the tensor cores take it as a 16-bit A tile", loops=t.loops)
    mma_k = t.mma_shape.mnk[2]  # its k loop is the first's n (checked above): the passes cover the first's n
    accumulator = tensor.fragment_type(model, c_buffer)
    mode = tensor.FAMILIES["wgmma"].mode(operand, accumulator, t.mma_shape)
    if mode is None:
        raise PlanError(here, f"wgmma does not multiply {operand.value} tiles of {t.mma_shape.name} into "
                              f"{accumulator.value}", loops=t.loops)
    d_sub, c_sub = tensor._subscripts(facts, y.buffer), tensor._subscripts(facts, c_buffer)
    tensor._check_roles(here, {"C": (c_sub, (m, n), k), "B": (d_sub, (k, n), m)}, {"C": c_buffer, "B": y.buffer})
    b = tensor._operand(here, model, facts, "B", y.buffer, d_sub, (k, n), k, mma_k)
    c = tensor._operand(here, model, facts, "C", c_buffer, c_sub, (m, n), None, 0)
    reductions = tuple(name for name in model.serial_loops if not tensor._uses(c_sub, name))
    carried = tuple(name for name in reductions if not facts.loop(name).fixed or facts.loop(name).extent > 1)
    own = [name for name in model.serial_loops if name not in chain.outside and name not in t.loops
           and tensor._uses(c_sub, name) and (not facts.loop(name).fixed or facts.loop(name).extent > 1)]
    if own:
        loop = own[0]
        raise PlanError(here, f"{loop} takes several values after the fusing index and {c_buffer} depends on it: the "
                              f"second product would make {c_buffer}'s tiles one after another from the same tile of "
                              f"{chain.source}, which is not built; cover {c_buffer}'s columns with one tile of the "
                              f"second product (at most 256 columns: split {loop} by its extent)",
                        loops=(loop,))
    for loop in carried:
        if loop not in chain.outside:
            raise PlanError(here, f"{loop} takes several values after the fusing index: the "
                                  f"schedule computes {chain.source} over all of them before the second product "
                                  f"reads it, which the registers cannot hold; put the fusing index inside {loop} "
                                  f"(each tile of {chain.source} then goes on into the second product, {c_buffer}'s "
                                  f"accumulator kept across {loop})", loops=(loop,))
    tiles = tensor.TensorMatch(first.c, b, c, mode.precision, operand, accumulator, (), family="wgmma")
    return dataclasses.replace(chain, tiles=tensor._edges(here, model, facts, tiles), carried=carried)


def zero_past(chain: Chain) -> bool:
    """Whether the first's columns past the nest must be set to 0 before the second product reads
    them. It sums over the first's columns in whole tiles: past the nest's last column its B's copy
    fills zeros where B's rows there lie past B's array, but where they lie inside it (the next
    head's, batch's or part's rows of B) the padded columns of the first's last tile (finite values:
    its own operands' copies, or other rows of them) would add their products with them into the
    second's C. (Rows past the nest are C's rows the kernel does not store: only the columns'
    padding is read here.)"""
    t, tiles, model = chain.model.tensorize, chain.tiles, chain.model
    if tiles.guards is None:
        return False
    names = {lp.name for lp in model.loops}
    column = model.loop(t.loops[2]).dim  # the second product's k: the first's columns
    rest = tuple(g for g in chain.facts.guards
                 if not any(model.loop(v).dim == column for v in g.affine.variables() if v in names))
    if len(rest) == len(chain.facts.guards):
        return False
    product = (tiles.c.buffer, chain.source, tiles.b.buffer)
    return poly.padding_witness(model, rest, product, {tiles.b.buffer}) is not None


def zeroed(chain: Chain, source: str, dtype: ScalarType, columns: Expr | None) -> tuple[Stmt, ...]:
    """The first's tile's columns past the nest (``columns``: how many of the tile's lie inside it)
    set to 0 in its accumulator ``source``, on the last tile alone (``zero_past``)."""
    if not chain.zero_past or columns is None:
        return ()
    n = chain.model.tensorize.passes * chain.model.tensorize.mma_shape.mnk[2]  # the first's tile's columns
    return (rows.past_columns(source, dtype, f"{source}_row", f"{source}_col", columns, n, 0.0,
                              "the tile's columns past the nest add nothing to the second product"),)


def _converted_to(value: Expr, source: str) -> ScalarType | None:
    """The type a statement casts its reads of ``source`` to (None: read as they are)."""
    for e in subexpressions(value):
        if isinstance(e, Cast) and isinstance(e.operand, Load) and e.operand.buffer == source:
            return e.dtype
    return None


def plan_tile(chain: Chain, plan_one) -> Chain:
    """The second product's B in a TMA tile (``plan_one``: hopper's planner of one cache): the same
    tile for every tile of the kernel (resident, one stage), or one per tile of the first product's
    C through a ring of the cache's stages (its full and empty barriers, ``slot``)."""
    model, tiles = chain.model, chain.tiles
    spec = next((c for c in model.caches if c.array == tiles.b.buffer and c.location is MemorySpace.SHARED), None)
    if spec is None:
        raise PlanError(tensor.where(model), f"wgmma reads B ({tiles.b.buffer}) from shared memory: "
                                             f"plan.cache({tiles.b.buffer}, index=<a loop outside the tile>, "
                                             "location=SHARED)", loops=model.tensorize.loops)
    cache = plan_one(model, spec, tiles, {tiles.b.buffer: "B"})
    single = chain.single_valued()
    origin = tuple(o.substitute(single) for o in cache.origin)
    # copied for each tile of C (of the carried loops, where there are any), a tile may move with the
    # block's work item too (its loops bound to blocks: a batch, a head)
    blocks = {b_ for b in model.bindings if b.unit.level == "block" for b_ in b.loops}
    moving = sorted({v for o in origin for v, _ in o.terms} - set(chain.carried) - blocks)
    if moving:
        raise PlanError(f"cache({spec.array}, index={spec.index}, location=SHARED)",
                        f"{spec.array}'s tile moves with {', '.join(moving)}; a chained product's B is copied once "
                        "(or once for each value of the loops its C is kept across"
                        + (f": {', '.join(chain.carried)}" if chain.carried else "")
                        + ", or of the loops bound to blocks): cover those loops with the tile, or bind no loop it "
                        "depends on", loops=(spec.index,))
    fixed = not any(o.terms for o in origin)
    if fixed and cache.stages > 1:
        raise PlanError(f"cache({spec.array}, index={spec.index}, location=SHARED, stages={spec.stages})",
                        f"{spec.array}'s tile is the same for every tile of the kernel and is copied once, at its "
                        "start: leave stages out", loops=(spec.index,))
    return dataclasses.replace(chain, cache=dataclasses.replace(cache, origin=origin, resident=fixed))


# registers a consumer thread holds besides its tiles (ptxas needs about 26 beyond the accumulators:
# docs/gpu-plans.md)
REGISTER_MARGIN = 26


def check_registers(chain: Chain, first_model: Model, budget: int) -> None:
    """The registers a consumer thread holds at once within ``budget`` (what it may hold after
    setmaxnreg): the first product's 64 x n1 tile (n1 / 2 a thread), its 16-bit copy (n1 / 4), and
    the second's 64 x n2 (n2 / 2) beside the copy, or, kept across a loop, beside both."""
    n1 = first_model.tensorize.mma_shape.mnk[1]
    n2 = chain.model.tensorize.mma_shape.mnk[1]
    held = n1 // 2 + n1 // 4 + n2 // 2 if chain.carried else n1 // 4 + max(n1, n2) // 2
    if held + REGISTER_MARGIN > budget:
        raise PlanError(where_second(chain), f"a consumer thread holds {n1 // 2} registers of {chain.source}'s "
                                             f"64 x {n1} tile, {n1 // 4} of its 16-bit copy and {n2 // 2} of "
                                             f"the second product's 64 x {n2} tile"
                                             + (" (kept across " + ", ".join(chain.carried) + ", beside both)"
                                                if chain.carried else " (beside the copy)")
                                             + f": {held} and about {REGISTER_MARGIN} more, past the {budget} a "
                                             "consumer thread may hold; use narrower tiles of either product",
                        loops=chain.model.tensorize.loops)


@dataclass(frozen=True)
class Statements:
    """The kernel's part of a chain: ``before`` and ``after`` the loops its C is kept across (its
    accumulator's set-up and store; empty where there are none), ``each``: after each tile of the
    first product (the conversions and the products; without carried loops, the set-up and store
    too), ``fill``: the copy of B's tile for each of them where it moves (whoever issues copies)."""

    before: tuple[Stmt, ...]
    each: tuple[Stmt, ...]
    after: tuple[Stmt, ...]
    fill: tuple[Stmt, ...]
    # overlapped (plan.overlap): the second product of the tile before, issued right after the first
    # product's tiles are issued (an If on "not the first tile"), left in flight
    issued: tuple[Stmt, ...] = ()
    # plan.alternate: before the kernel's loops (the first warpgroup's first turn), before each tile's
    # first product (a warpgroup's wait for its turn) and after the products issued at its start
    start: tuple[Stmt, ...] = ()
    turn: tuple[Stmt, ...] = ()
    passed: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Overlap:
    """Where the tiles of the first product the second is kept across start and end: ``later``
    holds past the first tile, ``last`` at the last one (a masked loop's own last, ``tile_stop``)."""

    later: Expr
    last: Expr


TURNS = 8  # the named barrier of consumer warpgroup w's turn is TURNS + w (the epilogue's are 1 + w)


def alternated(statements: Statements, warpgroups: int) -> Statements:
    """``statements`` with the consumer warpgroups' turns (``plan.alternate``): warpgroup ``w``
    syncs on barrier ``TURNS + w`` before a tile's first product and arrives on the next one's
    once the products at the tile's start are issued; the last warpgroup's arrival before the
    loops gives the first its first turn. Each barrier's phase is one warpgroup's sync and the
    one before's arrival (2 x 128 threads); every warpgroup takes the same tiles, so the turn
    goes round once a tile."""
    threads = 2 * WARPGROUP_THREADS
    group = WARPGROUP_INDEX
    start = If(Binary("==", group, Const(warpgroups - 1)),
               (NamedBarrier(Const(TURNS), threads, "the first warpgroup's first turn", arrive=True),),
               "the last warpgroup hands the first its first turn")
    turn = NamedBarrier(Binary("+", group, Const(TURNS)), threads, "this warpgroup's turn to issue its products")
    passed = NamedBarrier(Binary("+", Binary("%", Binary("+", group, Const(1)), Const(warpgroups)), Const(TURNS)),
                          threads, "its products are issued: the next warpgroup's turn", arrive=True)
    return dataclasses.replace(statements, start=(start,), turn=(turn,), passed=(passed,))


def _overlapped(chain: Chain, count: Expr, descriptor, copy: tuple[Stmt, ...], before, after, rescale,
                tiles_a: list[Stmt], converts: list[Stmt], overlap: Overlap) -> Statements:
    """The overlapped form (``plan.overlap``): the tile before's product issued under this tile's
    first (``issued``); after the steps between, its wait and B's stage freed, then this tile's A
    converted and the accumulator corrected; the last tile's product at the loop's end."""
    previous = Binary("-", count, Const(1))
    # the waits are unconditional: ptxas serializes every wgmma where some path (feasible or not)
    # reads registers a product may still write
    each = [WarpgroupWait(0), If(overlap.later, tuple(_freed(chain, previous, "the tile before's"))),
            *converts, *rescale,
            If(overlap.last, (*_issue(chain, count, descriptor), WarpgroupWait(0),
                              *_freed(chain, count, "this tile's")), "the last tile's second product")]
    issued = (If(overlap.later, tuple(_issue(chain, previous, descriptor, whose="the tile before's")),
                 "the tile before's second product, under this tile's first"),)
    return Statements((*before, *tiles_a), tuple(each), tuple(after), _fill(chain, count, copy), issued)


def _issue(chain: Chain, count: Expr, descriptor, landed: tuple[Stmt, ...] = (), whose: str = "this tile's"
           ) -> list[Stmt]:
    """The second product of the first's tile ``count``: B's tile waited for (then ``landed``), the
    products, committed."""
    t, tiles = chain.model.tensorize, chain.tiles
    stage, parity = slot(chain, count)
    out: list[Stmt] = []
    if not chain.cache.resident:
        out.append(MbarrierWait(FULL, stage, parity, f"{whose} {chain.cache.array} has landed"))
    out += [*landed, WarpgroupFence()]
    for p in range(t.passes):
        out += [*descriptor(f"_d{p}", "B", tiles.b, p, {}, stage), FragmentMma("_e", f"_p{p}", f"_d{p}", "_e")]
    return [*out, WarpgroupCommit()]


def _freed(chain: Chain, count: Expr, whose: str) -> list[Stmt]:
    """B's stage of the first's tile ``count`` freed (its products are done)."""
    if chain.cache.resident:
        return []
    stage, _ = slot(chain, count)
    return [MbarrierArrive(EMPTY, stage, 0, f"{whose} products have read {chain.cache.array}'s tile")]


def _fill(chain: Chain, count: Expr, copy: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    if chain.cache.resident:
        return ()
    stage, parity = slot(chain, count)
    return (MbarrierWait(EMPTY, stage, Binary("-", Const(1), parity),
                         f"the tile before's products have read {chain.cache.array}'s tile"),
            MbarrierArrive(FULL, stage, chain.cache.stage_bytes, f"the bytes of {chain.cache.array}'s tile"), *copy)


def barriers(chain: Chain) -> tuple[SharedBuffer, ...]:
    """B's full and empty barriers, one of each a stage, where its tile moves (a resident tile has the kernel's)."""
    if chain.cache.resident:
        return ()
    stages = chain.cache.stages
    return (SharedBuffer(FULL, ScalarType.uint64, (stages,), (1,)),
            SharedBuffer(EMPTY, ScalarType.uint64, (stages,), (1,)))


def inits(chain: Chain, consumers: int) -> tuple[Stmt, ...]:
    if chain.cache.resident:
        return ()
    stages = range(chain.cache.stages)
    return (*(MbarrierInit(FULL, Const(s), 1) for s in stages), *(MbarrierInit(EMPTY, Const(s), consumers)
                                                                   for s in stages))


def slot(chain: Chain, count: Expr) -> tuple[Expr, Expr]:
    """The stage of B's tile for the first product's tile ``count`` (the tiles of C so far) and the
    parity of that use of it: B's tiles take the stages in turn."""
    stages = chain.cache.stages
    if stages == 1:
        return Const(0), Binary("%", count, Const(2))
    return Binary("%", count, Const(stages)), Binary("%", Binary("/", count, Const(stages)), Const(2))


def statements(chain: Chain, source: str, count: Expr, descriptor, as_expr, copy: tuple[Stmt, ...],
               first_rows: rows.RowLayout | None = None, dtypes: dict | None = None, row_of=None,
               inside: Expr | None = None, overlap: Overlap | None = None, columns: Expr | None = None,
               source_type: ScalarType = ScalarType.float32) -> Statements:
    """After each tile of the first product: its accumulator ``source`` as the register A tiles of
    the second, which multiplies them into its own accumulator (set up before the loops it is kept
    across, stored after them); ``count``: the tiles of the first so far (B's barriers' phases);
    ``descriptor``: the maker of B's matrix descriptors, hopper's ``_Products.descriptor``;
    ``copy``: the TMA boxes of B's tile into its stage on its full barrier there, where it moves
    (hopper's ``tile_boxes``; the stage and parity: ``slot``). With row vectors kept across the
    loops (``chain.online``; ``first_rows``: where the first's rows lie, ``dtypes``: the vectors'
    types, ``row_of``: a row slot's subscript of the first's C, ``inside``: its tile's rows inside
    it, where it has an edge), they are set up before the loops,
    the accumulator is corrected before each product and divided by the row sums after the loops,
    and OUTPUT row vectors are stored then (``lower/online.py``). ``overlap`` (``plan.overlap``, a
    kept accumulator): the tile's product is issued after the next tile's first product instead
    (``Statements.issued``), its A registers declared before the loops, the last tile's at its end."""
    model, tiles = chain.model, chain.tiles
    t = model.tensorize
    m, n, k = t.mma_shape.mnk
    before, after = tensor._accumulator(model, tiles, as_expr, "_e", {}, None, None)
    rescale: tuple[Stmt, ...] = ()
    form = chain.online
    if form is not None:
        lanes = tensor.accumulator_rows(model, tiles)
        if lanes is None or first_rows is None or lanes.slots != first_rows.slots:
            raise PlanError(where_second(chain), "the second product's accumulator holds other rows a thread than "
                                                 "the first's: the row vectors kept across the tiles cannot "
                                                 "correct it")
        loops = (t.loops[0], t.loops[1])
        before = [*before, *form.setup(dtypes, first_rows, source)]
        rescale = form.rescale("_e", tiles.accumulator_type, lanes, loops, source)
        after = [*form.finish("_e", tiles.accumulator_type, lanes, loops, source),
                 *form.finish_rows(dtypes, first_rows, source, row_of, inside), *after]
    if chain.output is not None:
        after = list(epilogue.stored_by_tma(tuple(after), chain.output, n))
    out: list[Stmt] = []
    tiles_a = [Fragment(f"_p{p}", "matrix_a", m, n, k, tiles.operand_type, tiles.precision, "row_major", "wgmma",
                        in_registers=True) for p in range(t.passes)]
    converts = [FragmentConvert(f"_p{p}", source, p * k) for p in range(t.passes)]
    zero = zeroed(chain, source, source_type, columns)
    if overlap is not None and chain.carried:
        return _overlapped(chain, count, descriptor, copy, before, after, rescale, tiles_a, [*zero, *converts],
                           overlap)
    out += zero
    for p in range(t.passes):  # first: the source's registers are free before the second's accumulator is set up
        out += [tiles_a[p], converts[p]]
    if not chain.carried:
        out += before
    # (a resident B has landed before the first tile: hopper)
    out += [*_issue(chain, count, descriptor, landed=rescale), WarpgroupWait(0), *_freed(chain, count, "this tile's")]
    fill = _fill(chain, count, copy)
    if chain.carried:
        return Statements(tuple(before), tuple(out), tuple(after), fill)
    return Statements((), (*out, *after), (), fill)
