"""Features of a program: what a shrunk failure still uses (a hint at where the bug is), and
coarse features counted over a campaign (what it covered, what schedc accepted)."""

from __future__ import annotations

from schedc.ir.types import ScalarType

from .program import (
    Bin,
    Cast,
    Const,
    Fn,
    IndexValue,
    Neg,
    Program,
    Tile,
    loop_spans,
    refs,
    runtime_dims,
    simulate_steps,
    walk,
)


def features(p: Program) -> list[str]:
    """What a (shrunk) program still uses: a hint at where the bug is."""
    found = []
    if p.tensorize is not None:
        found.append(f"tensorize {p.tensorize.mma} ({p.tensorize.instruction})")
    if p.chained is not None:
        found.append(f"chained product {p.chained.mma} over {p.chained.passes} pass(es)"
                     + (", an element-wise nest between" if p.between else "")
                     + (", its accumulator kept across S's column tiles" if "jjj" in (p.order or ()) else ""))
    if p.epilogue:
        found.append(f"fused epilogue of {len(p.epilogue)} statement(s)"
                     + (" over the rows alone (partial=1)" if p.rows_only else ""))
        found += sorted({f"acc.{n.name} (epilogue)" for s in p.epilogue for n in walk(s.value) if isinstance(n, Fn)})
        target = p.statements[0].target.array
        if any(s.target.array != target for s in p.epilogue):
            found.append("fused epilogue writing another array at C's element")
    found += [f"{c.location} cache of {c.array} at {c.index}" + (f" ({c.pipeline})" if c.pipeline != "sync" else "")
              + (f" in {c.element_type}" if c.element_type else "") for c in p.caches]
    if p.persistent is not None:
        found.append(f"persistent (group {p.persistent[0]}, blocks {p.persistent[1] or 'default'})")
    if p.cluster is not None:
        found.append(f"cluster of {p.cluster[0]} along {p.cluster[1]}")
    if p.blocks_per_sm:
        found.append(f"_blocks_per_SM={p.blocks_per_sm}")
    if p.specialize is not None:
        found.append("warp_specialize" + str(p.specialize))
    if p.teams > 1:
        found.append(f"{p.teams} consumer teams taking tiles in turn")
    found += [f"{', '.join(b.indices)} on {b.unit}" for b in p.bindings]
    found += ["split-K (a reduction's loop on blocks)"] if split_k(p) else []
    found += ["split_k(deterministic=False)"] if p.order_free else []
    found += ["overlap()"] if p.overlap else []
    found += ["alternate()"] if p.alternate else []
    found += ["the keys split between blocks"] if keys_split(p) else []
    found += ["run-time size (acc.create_dimensions) of the first dimension"] if p.runtime else []
    found += [f"unroll {u}" for u in p.unrolls]
    if loop_spans(p)[1]:
        found.append("partial tiles")
    if any(isinstance(n, Neg) and isinstance(n.operand, Neg) for s in p.statements for n in walk(s.value)):
        found.append("double minus")
    if any(s.accumulate for s in p.statements):
        found.append("+= (reduction)")
    found += sorted({f"acc.{n.name}" for s in p.statements for n in walk(s.value) if isinstance(n, Fn)})
    if len(p.statements) > 1:
        found.append(f"{len(p.statements)} statements")
    found.append("types " + "/".join(sorted({a.dtype for a in p.arrays})))
    return found


def coverage_features(p: Program) -> set[str]:
    """Coarse features of a program, for counting what a campaign covered."""
    found = {f"nest rank {len(p.dims)}", f"target {p.target}", f"{len(p.statements)} statement(s)"}
    found |= {f"type {a.dtype}" for a in p.arrays} | {f"role {a.role}" for a in p.arrays}
    found |= {f"layout {a.layout}" for a in p.arrays}
    if p.runtime and any(a.role == "TEMP" and a.name in (runtime_dims(p) or {}) for a in p.arrays):
        found.add("TEMP array of a run-time size (a workspace)")
    temporary = {a.name for a in p.arrays if a.role == "TEMP"}
    if any(c.array in temporary and c.location == "SHARED" for c in p.caches):
        found.add("SHARED cache of a TEMP array (scratch where written before read)")
    outputs = {a.name for a in p.arrays if a.role == "OUTPUT"}
    targets: dict = {}
    for s in p.statements:  # each array's first target: the generator reads "elsewhere" against it
        if s.target.array in outputs:
            targets.setdefault(s.target.array, s.target.subscripts)
    if any(r.array in targets and r.subscripts != targets[r.array] for s in p.statements for r in refs(s)):
        found.add("OUTPUT read at an element an earlier iteration wrote")
    found |= {f"{c.location} cache" + (f" ({c.pipeline})" if c.pipeline != "sync" else "") for c in p.caches}
    found |= {f"bind {b.unit.split('_')[0]}" + (" (tuple)" if len(b.indices) > 1 else "") for b in p.bindings}
    found |= {"unroll"} if p.unrolls else set()
    found |= {"persistent"} if p.persistent is not None else set()
    found |= {"cluster"} if p.cluster is not None else set()
    found |= {"_blocks_per_SM"} if p.blocks_per_sm else set()
    found |= {f"warp_specialize({p.specialize[0]})"} if p.specialize is not None else set()
    found |= {"consumer teams"} if p.teams > 1 else set()
    found |= {"fragments of another type"} if any(c.element_type for c in p.caches) else set()
    found |= {"split-K"} if split_k(p) else set()
    found |= {"fused epilogue"} if p.epilogue and p.chained is None else set()
    found |= {"chained product"} if p.chained is not None else set()
    found |= {"chained product, a nest between"} if p.between else set()
    found |= {"chained product, row vectors between"} if p.row_steps else set()
    found |= {"chained product over tiles of the intermediate"} if p.chained and "jjj" in (p.order or ()) else set()
    found |= {"online softmax over tiles of the intermediate"} if p.row_steps and "jjj" in (p.order or ()) else set()
    found |= {"online softmax, fast_exp folded to base two"} if p.row_steps and "jjj" in (p.order or ()) and any(
        isinstance(n, Fn) and n.name == "fast_exp" for step in p.row_steps for s in step for n in walk(s.value)) \
        else set()
    found |= {"overlapped chain (plan.overlap)"} if p.overlap else set()
    found |= {"consumer warpgroups taking turns (plan.alternate)"} if p.alternate else set()
    found |= {"the keys split between blocks (flash-decoding)"} if keys_split(p) else set()
    found |= {"chained product, an OUTPUT row vector"} if any(a.name == "chain_lse" for a in p.arrays) else set()
    found |= {"chained product, its B in a ring of stages"} if p.chained and any(
        c.array == "D" and c.stages > 1 for c in p.caches) else set()
    found |= {"fused over the rows alone"} if p.rows_only else set()
    found |= {"an operand's tile once a work item"} if p.chained and any(
        c.location == "SHARED" and c.array == "A" and c.index == "j" for c in p.caches) else set()
    if p.epilogue and any(s.target.array != p.statements[0].target.array for s in p.epilogue):
        found.add("fused epilogue writing another array" + (" (tensor cores)" if p.tensorize else ""))
    found |= {"split-K by TMA reductions" if split_k(p) else "C added into by TMA reductions, no split"} \
        if p.order_free else set()
    found |= {"run-time size"} if p.runtime else set()
    found |= {"reorder"} if p.order is not None else set()
    found |= {"split or tile"} if p.steps else set()
    found |= {"tile()"} if any(isinstance(s, Tile) for s in p.steps) else set()
    found |= {"partial tiles"} if loop_spans(p)[1] else set()
    found |= {f"tensorize {p.tensorize.mma}", f"instruction {p.tensorize.instruction}"} if p.tensorize else set()
    found |= {"wgmma tile rows of partial 128-byte chunks"} if partial_chunks(p) else set()
    found |= _expression_features(p)
    return found


def partial_chunks(p: Program) -> bool:
    """A wgmma tile whose rows in some array are longer than one 128-byte chunk but not whole
    chunks (B's last box partly read, C's last columns through a tail box)."""
    if p.tensorize is None or not p.tensorize.mma.startswith("M64xN"):
        return False
    n = int(p.tensorize.mma.split("xN")[1].split("x")[0])
    return any(n * ScalarType(a.dtype).size > 128 and n * ScalarType(a.dtype).size % 128 for a in p.arrays)


def split_k(p: Program) -> bool:
    """Whether a loop bound to blocks splits an index along which no statement writes."""
    _, root, _ = simulate_steps(p)
    written = {x.index for s in p.statements for x in s.target.subscripts}
    return any(b.unit.startswith("BLOCK") and root.get(n, n) not in written for b in p.bindings for n in b.indices)


def _expression_features(p: Program) -> set[str]:
    found = set()
    for s in p.statements:
        nodes = list(walk(s.value))
        found |= {f"op {n.op}" for n in nodes if isinstance(n, Bin)}
        found |= {"cast" for n in nodes if isinstance(n, Cast)}
        found |= {f"acc.{n.name}" for n in nodes if isinstance(n, Fn)}
        found |= {"unary minus" for n in nodes if isinstance(n, Neg)}
        found |= {"double minus" for n in nodes if isinstance(n, Neg) and isinstance(n.operand, Neg)}
        found |= {"negative constant" for n in nodes if isinstance(n, Const) and n.value < 0}
        found |= {"index as value" for n in nodes if isinstance(n, IndexValue)}
        subscripts = [x for r in (s.target, *refs(s)) for x in r.subscripts]
        found |= {"shifted subscript" for x in subscripts if x.index and x.sign > 0 and x.offset}
        found |= {"reversed subscript" for x in subscripts if x.index and x.sign < 0}
        found |= {"constant subscript" for x in subscripts if x.index is None}
        found |= {"+= (reduction)"} if s.accumulate else set()
        found |= {"recurrence"} if any(r.array == s.target.array and r != s.target for r in refs(s)) else set()
        found |= {"OUTPUT read"} if any(p.array(r.array).role == "OUTPUT" for r in refs(s)) else set()
        found |= {"transposed access"} if any(_transposed(r) for r in refs(s)) else set()
    return found


def _transposed(r) -> bool:
    order = [x.index for x in r.subscripts if x.index]
    return order != sorted(order)


def coverage_text(generated: dict[str, int], accepted: dict[str, int]) -> str:
    """Per feature: programs that had it, and how many of those schedc accepted."""
    lines = ["coverage (programs with the feature: generated / accepted):"]
    for name in sorted(generated):
        lines.append(f"  {name:<36} {generated[name]:>6} / {accepted.get(name, 0)}")
    return "\n".join(lines)


def keys_split(p: Program) -> bool:
    """Whether a chain binds its loop over the parts of S's columns to blocks (with the rows')."""
    return p.chained is not None and any("j" in b.indices and b.unit.startswith("BLOCK") for b in p.bindings)
