"""Random chains of two products on wgmma (``samples/b2b_gemm.py``'s plan with every knob drawn):
``S[i, j] += A[i, k] * B[k, j]`` into a float32 TEMP S held in registers, fused over (i, j) with
``E[i, l] += cast(S[i, j], t) * D[j, l]``, each tensorized. Drawn: float16 or bfloat16 operands,
S's and E's tiles of 16 to 128 columns (the sizes one tile or below it, padded), k in 1 to 3
stages of 16 to 64 or ragged, 1 or 2 consumer warpgroups, block rows, 1 to 4 stages, layouts of
A, B and D, E of the operand type or float32, read (INPUT_OUTPUT) or only written, prologue and
epilogue ops of both products, persistent grids, warp specialization on and off; S's columns in
2 or 3 tiles (a serial loop in the block, the fusing index inside it, E's accumulator kept across it),
D's rows of each tile through a ring of 1 to 3 stages, A's rows of the block at times copied once a
work item; a row softmax (or a min or sum of the row)
between them, in row vectors held by the threads of each row, over S's tiles in the online form
(a causal mask before it at times, scores growing along the row at times (so that a row's maximum
is kept or taken anew: ``Online.lazy``), the row's log-sum-exp an OUTPUT at times, the keys split
between blocks at times: two parts of two tiles each, the last at times a tile or 8 keys fewer);
an element-wise nest on S between the two (a bias and ReLU, a scale, tanh).

>>> import random
>>> p = chain_program(random.Random(3), "NVIDIA_H100")
>>> p.second > 0, p.chained.indices[2] == p.tensorize.indices[1], p.arrays[3].role
(True, True, 'TEMP')
"""

from __future__ import annotations

import math
import random

from .nest import choose
from .program import (
    ArrayDecl,
    Binding,
    CacheDirective,
    Cast,
    Cmp,
    Const,
    Fn,
    IndexValue,
    Program,
    Ref,
    Split,
    Statement,
    Subscript,
    Tensorize,
    Tile,
    walk,
)
from .program import Bin as Binary


def chain_program(rng: random.Random, target: str) -> Program:
    """A back-to-back product for an sm_90 ``target``."""
    operand = rng.choice(("float16", "bfloat16"))
    n1, n2 = (choose(rng, {16: 15, 32: 20, 64: 35, 128: 30}) for _ in range(2))
    groups = choose(rng, {1: 60, 2: 40})
    rows = 64 * groups
    k_stage = rng.choice((16, 32, 64))
    M = _size(rng, rows * rng.randint(1, 2))
    N1, N2 = (n if rng.random() < 0.7 else rng.randint(1, n // 8) * 8 for n in (n1, n2))
    K = k_stage * rng.randint(1, 3) if rng.random() < 0.7 else rng.randint(1, 3 * k_stage // 8) * 8
    tiles_of_s = rng.random() < 0.3  # S's columns in 2 or 3 tiles: a serial loop j, E kept across it
    if tiles_of_s:
        N1 = n1 * rng.randint(2, 3)
    layouts = [choose(rng, {"FIRST_MAJOR": 70, "LAST_MAJOR": 30}) for _ in range(3)]
    output = operand if rng.random() < 0.7 else "float32"
    # a row softmax over S's tiles (the online form, lower/online.py): E starts at zero, corrected as it goes
    online = tiles_of_s and rng.random() < 0.35
    # the keys split between blocks (flash-decoding, lower/split_keys.py): 2 parts of 2 tiles, j on the grid with i
    parts = 2 if online and rng.random() < 0.4 else 1
    if parts > 1:  # at times a last part of fewer keys: one tile fewer, or 8 keys fewer
        N1 = n1 * 2 * parts - (rng.choice((8, n1)) if rng.random() < 0.4 else 0)
    read = not online and rng.random() < 0.3  # E += ... onto E's values: INPUT_OUTPUT, its fragments start from them
    arrays = (ArrayDecl("A", "INPUT", operand, (M, K), layouts[0]), ArrayDecl("B", "INPUT", operand, (K, N1), layouts[1]),
              ArrayDecl("D", "INPUT", operand, (N1, N2), layouts[2]), ArrayDecl("S", "TEMP", "float32", (M, N1)),
              ArrayDecl("E", "INPUT_OUTPUT" if read else "OUTPUT", output, (M, N2)))
    i, j, k, l_ = (Subscript(n) for n in "ijkl")
    first = Statement(Ref("S", (i, j)), Binary("*", Ref("A", (i, k)), Ref("B", (k, j))), accumulate=True)
    second = Statement(Ref("E", (i, l_)), Binary("*", Cast(Ref("S", (i, j)), operand), Ref("D", (j, l_))),
                       accumulate=True)
    tiles = "j"  # the loop over the tiles of S's columns
    if parts > 1:
        steps = (Split("i", rows), Split("ii", 64), Split("k", k_stage), Split("j", 2 * n1), Split("jj", n1),
                 Tile((("iii", 64), ("jjj", n1), ("kk", 16))), Split("l", n2))
        order = ("i", "ii", "j", "jj", "jjj", "f", "k", "kk", "l", "iii", "iiii", "jjjj", "ll", "kkk")
        s_tile, tiles = "jjjj", "jj"
    elif tiles_of_s:
        steps = (Split("i", rows), Split("ii", 64), Split("k", k_stage), Split("j", n1),
                 Tile((("iii", 64), ("jj", n1), ("kk", 16))), Split("l", n2))
        order = ("i", "ii", "j", "jj", "f", "k", "kk", "l", "iii", "iiii", "jjj", "ll", "kkk")
        s_tile = "jjj"
    else:
        steps = (Split("i", rows), Split("ii", 64), Split("k", k_stage), Tile((("iii", 64), ("j", n1), ("kk", 16))),
                 Split("l", n2))
        order = ("i", "f", "ii", "j", "k", "kk", "l", "iii", "iiii", "jj", "ll", "kkk")
        s_tile = "jj"
    block = rng.choice(("BLOCK_X", "BLOCK_Y"))
    bindings = (Binding(("i", "j") if parts > 1 else ("i",), block), Binding(("ii",), "WARPGROUP_Y"))
    ops = {"NONE": 60, "SCALE": 25, "ReLU": 15}
    tensorize = Tensorize(("iiii", s_tile, "kkk"), f"M64xN{n1}xK16_B1", 1, None, "SET",
                          rng.choice((0.0, 0.0, 1.5, -1.0)), choose(rng, ops), rng.choice((0.5, 2.0, -1.0)))
    chained = Tensorize(("iiii", "ll", s_tile), f"M64xN{n2}xK16_B1", n1 // 16, None, "NONE" if read else "SET", 0.0,
                        choose(rng, ops), rng.choice((0.5, 2.0, -1.0)))
    stages = choose(rng, {1: 15, 2: 35, 3: 25, 4: 25})
    pipeline = ("stages", stages) if stages > 1 else ("sync", 0)
    fragments = "float32" if output != "float32" or rng.random() < 0.5 else ""
    d_stages = choose(rng, {1: 50, 2: 35, 3: 15}) if tiles_of_s else 1  # D moves with j: a ring of its own
    d_pipeline = ("stages", d_stages) if d_stages > 1 else ()
    # over tiles of S, A's rows of the block at times copied once a work item (a query block's Q)
    a_once = tiles_of_s and rng.random() < 0.3
    caches = (CacheDirective("A", tiles, "SHARED") if a_once else CacheDirective("A", "kk", "SHARED", *pipeline),
              CacheDirective("B", "kk", "SHARED", *pipeline),
              CacheDirective("D", "l", "SHARED", *d_pipeline), CacheDirective("S", "k", "MMA_FRAGMENT"),
              CacheDirective("E", "l", "MMA_FRAGMENT", element_type=fragments))
    between: tuple[Statement, ...] = ()
    if rng.random() < 0.3:  # element-wise on S's registers before the second product reads them
        S = Ref("S", (i, j))
        bias = Ref("chain_bias", (j,))
        value = rng.choice((Binary("max", Binary("+", S, bias), Const(0.0)), Binary("*", S, Const(0.5)),
                            Fn("tanh", (Binary("*", S, Const(0.25)),))))
        between = (Statement(S, value),)
        if any(isinstance(n, Ref) and n.array == "chain_bias" for n in walk(value)):
            arrays += (ArrayDecl("chain_bias", "INPUT", operand, (N1,)),)
    row_steps: tuple[tuple[Statement, ...], ...] = ()
    if online or not tiles_of_s and rng.random() < 0.25:  # a row softmax (or its kin) in row vectors between
        row_steps = _row_steps(rng, i, j, online)
        arrays += (ArrayDecl("chain_peak", "TEMP", "float32", (M,)), ArrayDecl("chain_total", "TEMP", "float32", (M,)))
        if online and rng.random() < 0.3:  # the row's log-sum-exp as an OUTPUT, set once the vectors are whole
            peak, total = Ref("chain_peak", (i,)), Ref("chain_total", (i,))
            lse = Statement(Ref("chain_lse", (i,)), Binary("+", peak, Fn("log", (total,))))
            at = next(n for n, step in enumerate(row_steps) if any(s.accumulate and s.target.array == "chain_total"
                                                                   for s in step)) + 1
            row_steps = (*row_steps[:at], (lse,), *row_steps[at:])
            arrays += (ArrayDecl("chain_lse", "OUTPUT", "float32", (M,)),)
    program = Program(target, arrays, (M, N1, K), (first,), steps, order, bindings, (), caches, tensorize,
                      epilogue=(second,), second=N2, chained=chained, between=between, row_steps=row_steps)
    if rng.random() < 0.5:
        program = _replace(program, persistent=(rng.choice((1, 2, 8)), rng.choice((0, 1, 2, 3))))
    if rng.random() < (0.5 if tiles_of_s else 0.1):  # the second product under the next tile's first
        program = _replace(program, overlap=True)
    if rng.random() < (0.4 if tiles_of_s else 0.1):  # the consumer warpgroups issuing their products in turn
        program = _replace(program, alternate=True)
    kind = choose(rng, {"auto": 50, "off": 30, "registers": 20})
    if kind == "off":
        program = _replace(program, specialize=(False, 0, 0))
    elif kind == "registers":
        program = _replace(program, specialize=(True, rng.choice((24, 40)), rng.choice((200, 232, 240))))
    if online and rng.random() < 0.3:  # scores that grow along the row: a row's maximum kept, or taken anew
        S = Ref("S", (i, j))  # (drawn last: the other draws of a seed stay as they were)
        grow = Statement(S, Binary("+", S, Binary("*", IndexValue("j"), Const(rng.choice((0.01, 0.2, 2.0))))))
        program = _replace(program, row_steps=(program.row_steps[0], (grow,), *program.row_steps[1:]))
    return program


def _row_steps(rng: random.Random, i: Subscript, j: Subscript, online: bool = False
               ) -> tuple[tuple[Statement, ...], ...]:
    """A row softmax's steps on S, each a nest of its own: row vectors set, S's row reduced into
    one (max, min or a sum), S's elements shifted by it (exp or not), summed, divided. ``online``:
    S's columns come in tiles, so the softmax itself (a maximum, exponentials of S minus it, their
    sum, the division or not), which the kernel keeps across the tiles (``lower/online.py``)."""
    S, peak, total = Ref("S", (i, j)), Ref("chain_peak", (i,)), Ref("chain_total", (i,))
    op = "max" if online else choose(rng, {"max": 60, "min": 20, "+": 20})
    start = {"max": -1.0e30, "min": 1.0e30, "+": 0.0}[op]
    reduce = Statement(peak, S, accumulate=True) if op == "+" else Statement(peak, Binary(op, peak, S))
    shifted = Binary("*", Binary("-", S, peak), Const(rng.choice((1.0, 0.125, 0.5))))
    if online and rng.random() < 0.3:  # a constant term: fast_exp's fold to base two scales it too
        shifted = Binary("+", shifted, Const(rng.choice((0.25, -1.5))))
    steps = [(Statement(peak, Const(start)), Statement(total, Const(0.0))), (reduce,),
             (Statement(S, Fn(rng.choice(("exp", "fast_exp", "fast_exp2")) if online else "exp", (shifted,)) if op == "max"
                        else shifted),),
             (Statement(total, Fn("abs", (S,)) if op != "max" else S, accumulate=True),)]
    if online and rng.random() < 0.4:  # a causal mask before the maximum (tiles wholly past it skipped)
        keep = Cmp("<=", IndexValue(j.index), Binary("+", IndexValue(i.index), Const(rng.choice((0, 5, 64)))))
        steps.insert(1, (Statement(S, Fn("select", (keep, S, Const(-math.inf)))),))
    if op == "max" and (not online or rng.random() < 0.8):  # a sum of exponentials is positive: divide by it
        steps.append((Statement(S, Binary("/", S, total)),))
    return tuple(steps)


def _replace(program: Program, **changes) -> Program:
    from dataclasses import replace

    return replace(program, **changes)


def _size(rng: random.Random, whole: int) -> int:
    """Whole blocks of rows, or ragged (a multiple of 8)."""
    return whole if rng.random() < 0.6 else rng.randint(1, whole // 8) * 8
