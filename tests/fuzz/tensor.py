"""Random tensor-core programs: ``C[i, j] += A[i, k] * B[k, j]`` in Accera's tensorized
schedule (blocks of C on BLOCK_*, warps on WARP_* or, for wgmma shapes, warpgroups on WARPGROUP_*,
the MMA tile innermost), with random
operand and accumulator types from schedc's table, shapes, passes, layouts, partial tiles,
prologue/epilogue ops, shared caches of A and B with pipelines and C kept in fragments."""

from __future__ import annotations

import random
from dataclasses import replace

from schedc.instructions import FAMILIES
from schedc.ir.types import ScalarType, converts_implicitly
from schedc.targets import MODELS, TENSOR_CORE_MODES
from schedc.targets import Model as TargetModel

from .nest import choose
from .program import (
    ArrayDecl,
    Bin,
    Binding,
    CacheDirective,
    Cast,
    Program,
    Ref,
    Split,
    Statement,
    Subscript,
    Tensorize,
    Tile,
    simulate_steps,
)
from .schedules import PIPELINES, layout


def tensor_program(rng: random.Random, target: str) -> Program:
    """A tensorized matrix product for ``target`` (a mode its tensor cores support)."""
    sm = MODELS[TargetModel[target]].sm
    mode = rng.choice([m for m in TENSOR_CORE_MODES if sm >= m.min_sm])
    shape = rng.choice(mode.shapes)
    m, n, k = shape.mnk
    warpgroup = mode.min_sm >= 90  # a wgmma shape: warpgroups, TMA tiles of A and B
    passes = choose(rng, {1: 60, 2: 30, 4: 10})
    warps = rng.choice((1, 2)), (1 if warpgroup else rng.choice((1, 2)))
    block = m * warps[0], n * warps[1]
    k_step = k * passes
    k_split = k_step * rng.randint(1, 2) if warpgroup or rng.random() < 0.55 else None
    sizes = (_size(rng, block[0], 0.3), _size(rng, block[1], 0.15), _size(rng, k_split or k_step, 0.15))
    accumulator = rng.choice(mode.accumulators).value
    fragments = ""  # C of a 16-bit type accumulated in float32 fragments (an MMA_FRAGMENT element_type)
    narrow = [t for t in ("float16", "bfloat16") if converts_implicitly(mode.operand, ScalarType(t))]
    if accumulator == "float32" and narrow and rng.random() < 0.25:  # (C += A * B needs no cast)
        fragments, accumulator = "float32", rng.choice(narrow)
    splits = choose(rng, {1: 85, 2: 8, 3: 4, 4: 3})
    if splits > 1:  # split-K: each block along BLOCK_Z sums a part of k, mostly of whole k tiles
        step = k_split or k_step
        part = step * rng.randint(1, 2) if rng.random() < 0.75 else _size(rng, step, 0.5)
        sizes = (*sizes[:2], part * splits)
    arrays = _arrays(rng, sizes, mode.operand.value, accumulator)
    k_root = "kk" if splits > 1 else "k"  # the serial part of k
    steps = [Split("i", block[0]), Split("j", block[1])] + ([Split("k", sizes[2] // splits)] if splits > 1 else [])
    steps += [Split(k_root, k_split)] if k_split else []
    steps.append(Tile((("ii", m), ("jj", n), (k_root + "k" if k_split else k_root, k_step))))
    program = Program(target, arrays, sizes, (_statement(mode.operand.value, accumulator),), tuple(steps))
    partial = any(size % step for size, step in zip((*sizes[:2], sizes[2] // splits), (*block, k_split or k_step)))
    able = tuple(f.instruction.name for f in FAMILIES.values()
                 if f.issued_by == "warp" and f.mode(mode.operand, ScalarType(fragments or accumulator), shape))
    return _plan(rng, program, shape.name, passes, partial, arrays[2].role, warpgroup, fragments, splits > 1, able)


def _size(rng: random.Random, tile: int, partial: float) -> int:
    """A multiple of ``tile`` up to about 70, sometimes cut short (a partial last tile)."""
    count = rng.randint(1, max(1, 72 // tile))
    if count > 1 and tile > 1 and rng.random() < partial:
        return tile * count - rng.randint(1, tile - 1)  # the split's range stays over one tile
    return tile * count


def _arrays(rng: random.Random, sizes, operand: str, accumulator: str) -> tuple[ArrayDecl, ...]:
    a_layout, b_layout = (rng.choice(("FIRST_MAJOR", "FIRST_MAJOR", "LAST_MAJOR")) for _ in range(2))
    role = "OUTPUT" if rng.random() < 0.25 else "INPUT_OUTPUT"
    return product_arrays(rng, sizes, operand, accumulator, (a_layout, b_layout), role, 8)


def product_arrays(rng: random.Random, sizes, operand: str, output: str, layouts, role: str,
                   spare: int) -> tuple[ArrayDecl, ...]:
    """A, B and C of ``C[i, j] += A[i, k] * B[k, j]`` over the nest ``sizes``; sometimes larger
    than the nest by multiples of ``spare`` elements (a nest over part of its arrays: whole tiles
    past its edge must read zeros and store nothing there). C grows only where the nest need not
    write all of it (INPUT_OUTPUT)."""
    M, N, K = sizes
    grow = rng.random() < 0.2

    def more(n: int) -> int:
        return n + (spare * rng.choice((0, 1, 2)) if grow else 0)

    c_shape = (more(M), more(N)) if role == "INPUT_OUTPUT" else (M, N)
    return (ArrayDecl("A", "INPUT", operand, (more(M), more(K)), layouts[0]),
            ArrayDecl("B", "INPUT", operand, (more(K), more(N)), layouts[1]), ArrayDecl("C", role, output, c_shape))


def _statement(operand: str, output: str) -> Statement:
    """``C[i, j] += A[i, k] * B[k, j]``; integers multiplied in C's type (``acc.cast`` of each
    operand), as the tensor cores multiply them (in their own narrower type they would wrap)."""
    i, j, k = Subscript("i"), Subscript("j"), Subscript("k")
    a, b = Ref("A", (i, k)), Ref("B", (k, j))
    if not ScalarType(operand).is_float and ScalarType(operand) != ScalarType(output):
        a, b = Cast(a, output), Cast(b, output)
    return Statement(Ref("C", (i, j)), Bin("*", a, b), accumulate=True)


def _plan(rng: random.Random, program: Program, mma: str, passes: int, partial: bool, c_role: str,
          warpgroup: bool = False, fragments: str = "", split: bool = False, able: tuple[str, ...] = ()) -> Program:
    _, _, created = simulate_steps(program)
    tile = created[-1]
    k_loops = tuple(names[0] for names in created[2:-1])  # the serial pieces of k outside the tile
    k_loops = k_loops if split else ("k", *k_loops)
    order = (*(("k",) if split else ()), "i", "j", *k_loops, "ii", "jj", *tile)
    if rng.random() < 0.1:
        order = _shuffled(rng, order, tile)
    y, x = ("Y", "X") if rng.random() < 0.8 else ("X", "Y")
    unit = "WARPGROUP" if warpgroup else "WARP"
    bindings = (Binding(("i",), f"BLOCK_{y}"), Binding(("j",), f"BLOCK_{x}"),
                Binding(("ii",), f"{unit}_{y}"), Binding(("jj",), f"{unit}_{x}"))
    bindings += (Binding(("k",), "BLOCK_Z"),) if split else ()
    tensorize = _tensorize(rng, tile, mma, passes, c_role, warpgroup, able)
    caches = _caches(rng, k_loops, partial or warpgroup, fragments, warpgroup)
    return replace(program, order=order, bindings=bindings, tensorize=tensorize, caches=caches)


def _shuffled(rng: random.Random, order: tuple[str, ...], tile: tuple[str, ...]) -> tuple[str, ...]:
    """The loops outside the tile in another order (split pieces after their parents)."""
    outer = [n for n in order if n not in tile]
    rng.shuffle(outer)
    pairs = (("ii", "i"), ("jj", "j"), ("kk", "k"), ("kkk", "kk"))
    while any(c in outer and p in outer and outer.index(c) < outer.index(p) for c, p in pairs):
        for child, parent in pairs:
            if child in outer and parent in outer and outer.index(child) < outer.index(parent):
                a, b = outer.index(child), outer.index(parent)
                outer[a], outer[b] = outer[b], outer[a]
    return (*outer, *tile)


def _tensorize(rng: random.Random, tile, mma: str, passes: int, c_role: str, warpgroup: bool = False,
               able: tuple[str, ...] = ()) -> Tensorize:
    """The tensorize call; a warp family named mostly among those that have the mode (``able``),
    sometimes any (its refusal is a case too)."""
    fused = rng.choice([None, *[f for f in (1, 2, 4) if passes % f == 0]])
    prologue = "SET" if c_role == "OUTPUT" else choose(rng, {"NONE": 55, "SET": 15, "SCALE": 15, "ReLU": 15})
    epilogue = choose(rng, {"NONE": 60, "SCALE": 25, "ReLU": 15})
    named = able if able and rng.random() < 0.9 else ("WMMA", "MMA_SYNC")
    instruction = choose(rng, {"AUTO": 50, "WGMMA": 50}) if warpgroup else \
        ("AUTO" if rng.random() < 0.5 else rng.choice(named))
    return Tensorize(tuple(tile), mma, passes, fused, prologue, rng.choice((0.0, 1.5, -1.0, 0.5)),
                     epilogue, rng.choice((0.5, 2.0, -1.0)), instruction)


def _caches(rng: random.Random, k_loops: tuple[str, ...], partial: bool, fragments: str = "",
            warpgroup: bool = False) -> tuple[CacheDirective, ...]:
    """SHARED caches of A and B, C's fragments; a wgmma plan's draws mostly what it takes (both
    operands in a ring of TMA tiles in their array's layout), sometimes what it refuses."""
    caches = []
    valid = warpgroup and rng.random() < 0.85
    if len(k_loops) == 2 and (valid or rng.random() < (0.85 if partial else 0.55)):
        kind = choose(rng, {k: w for k, w in PIPELINES.items() if k != "registers"} if valid else PIPELINES)
        stages = rng.randint(1, 4) if kind == "stages" else 0
        for array in ("A", "B") if valid or rng.random() < 0.9 else ("A",):
            caches.append(CacheDirective(array, k_loops[-1], "SHARED", kind, stages, layout="" if valid else layout(rng)))
    if fragments or rng.random() < 0.4:
        caches.append(CacheDirective("C", rng.choice(k_loops), "MMA_FRAGMENT", element_type=fragments))
    return tuple(caches)
