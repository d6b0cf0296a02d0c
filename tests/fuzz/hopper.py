"""Random Hopper programs: ``C[i, j] += A[i, k] * B[k, j]`` on wgmma, in the plan of
``samples/hopper_matmul.py`` with every knob drawn: wgmma shapes of 8 to 256 columns a warpgroup,
1 to 8 consumer warpgroups, 1 to 8 stages of 16 to 128 values of k, sizes below one tile and
below one stage or ragged, layouts, persistent grids, clusters along either block axis,
``_blocks_per_SM``, warp specialization on and off with register counts, prologue and epilogue
ops, C as OUTPUT or INPUT_OUTPUT and of 16-bit types accumulated in float32 fragments; operands
of every wgmma type (16-bit, tf32, the 8-bit floats).

>>> import random
>>> p = hopper_program(random.Random(1), "NVIDIA_H100")
>>> p.tensorize.mma.startswith("M64xN"), p.caches[0].array, p.caches[0].location
(True, 'A', 'SHARED')
"""

from __future__ import annotations

import random
from dataclasses import replace

from schedc.targets import TENSOR_CORE_MODES

from .nest import choose
from .program import Binding, CacheDirective, Program, Split, Tensorize, Tile
from .tensor import _statement, product_arrays

# consumer warpgroups (rows, columns): at most 4 rows (a TMA box has at most 256 rows) and 8 in all
GROUPS = {(1, 1): 30, (2, 1): 30, (1, 2): 10, (2, 2): 8, (3, 1): 5, (4, 1): 6, (4, 2): 4, (2, 4): 3, (1, 4): 4}


def hopper_program(rng: random.Random, target: str) -> Program:
    """A wgmma matrix product for an sm_90 ``target``."""
    mode = rng.choice([m for m in TENSOR_CORE_MODES if m.min_sm >= 90])
    rows, cols = choose(rng, GROUPS)
    widths = [s for s in mode.shapes if s.mnk[1] * cols <= 256]
    shape = rng.choice(widths) if rng.random() < 0.4 else \
        rng.choice([s for s in widths if s.mnk[1] in (64, 128, 256)] or widths)
    m, n, k_mma = shape.mnk
    k_stage = rng.choice([v for v in (16, 32, 64, 128) if v % k_mma == 0])
    block = (m * rows, n * cols)
    operand = mode.operand.value
    pitch = 1 if rng.random() < 0.1 else 16 // mode.operand.size  # TMA: rows 16 bytes apart (mostly drawn so)
    sizes = (_size(rng, block[0], pitch), _size(rng, block[1], pitch), _size(rng, k_stage, pitch))
    output = operand if operand != "float32" and rng.random() < 0.4 else "float32"  # C += A * B in C's type
    if mode.operand.arithmetic is not mode.operand:  # 8-bit floats: C of a 16-bit type, float32 or theirs
        output = rng.choice(("bfloat16", "float16", "float32", operand))
    integer = mode.operand.is_integer  # 8-bit integers: into int32 C and fragments (which convert floats only)
    if integer:
        output = "int32"
    role = "OUTPUT" if rng.random() < 0.25 else "INPUT_OUTPUT"
    layouts = [choose(rng, {"FIRST_MAJOR": 70, "LAST_MAJOR": 30}) for _ in range(2)]
    if mode.precision in ("tf32", "e4m3", "e5m2", "s8", "u8") and rng.random() < 0.8:  # k-contiguous operands
        layouts = ["FIRST_MAJOR", "LAST_MAJOR"]
    splits = choose(rng, {1: 80, 2: 10, 3: 5, 4: 5})
    if splits > 1:  # split-K: the blocks along BLOCK_Z each sum a part of k, mostly whole stages
        part = k_stage * rng.randint(1, 2) if rng.random() < 0.7 else _size(rng, k_stage, pitch)
        sizes = (*sizes[:2], part * splits)
    arrays = product_arrays(rng, sizes, operand, output, layouts, role, 16 // mode.operand.size)
    # k's serial loop, its loop over stages and its tensorized piece (split-K: "k" is on BLOCK_Z)
    k_serial, k_stages, k_tile = ("kk", "kkk", "kkkk") if splits > 1 else ("k", "kk", "kkk")
    steps = (Split("i", block[0]), Split("j", block[1]), *((Split("k", sizes[2] // splits),) if splits > 1 else ()),
             Split(k_serial, k_stage), Split("ii", m), Split("jj", n), Tile((("iii", m), ("jjj", n), (k_stages, k_mma))))
    order = (*(("k",) if splits > 1 else ()), "i", "j", "ii", "jj", k_serial, k_stages, "iii", "jjj", "iiii", "jjjj",
             k_tile)
    y, x = ("Y", "X") if rng.random() < 0.85 else ("X", "Y")
    bindings = (Binding(("i",), f"BLOCK_{y}"), Binding(("j",), f"BLOCK_{x}"),
                Binding(("ii",), f"WARPGROUP_{y}"), Binding(("jj",), f"WARPGROUP_{x}"),
                *((Binding(("k",), "BLOCK_Z"),) if splits > 1 else ()))
    prologue = "SET" if role == "OUTPUT" else choose(rng, {"NONE": 60, "SET": 10, "SCALE": 15, "ReLU": 15})
    epilogue = choose(rng, {"NONE": 60, "SCALE": 25, "ReLU": 15})
    tensorize = Tensorize(("iiii", "jjjj", k_tile), shape.name, 1, None, prologue, rng.choice((0.0, 1.5, -1.0, 0.5)),
                          epilogue, rng.choice((0.5, 2.0, -1.0)), rng.choice(("AUTO", "WGMMA")))
    stages = choose(rng, {1: 15, 2: 25, 3: 25, 4: 20, 6: 8, 8: 7})
    accumulator = "int32" if integer else "float32"
    fragments = accumulator if output != accumulator or rng.random() < 0.3 else ""
    caches = tuple(CacheDirective(a, k_stages, "SHARED", "stages" if stages > 1 else "sync",
                                  stages if stages > 1 else 0) for a in ("A", "B")) + \
        (CacheDirective("C", k_serial, "MMA_FRAGMENT", element_type=fragments),)
    program = Program(target, arrays, sizes, (_statement(operand, output),), steps, order, bindings, (), caches,
                      tensorize)
    if rng.random() < (0.4 if splits > 1 else 0.15):  # the sums (of each part) added into C by TMA reductions
        program = replace(program, order_free=True)
    return _extras(rng, program)


def _size(rng: random.Random, tile: int, multiple: int) -> int:
    """Below one tile, one or two whole tiles, or ragged; a multiple of ``multiple``."""
    kind = choose(rng, {"below": 30, "whole": 35, "ragged": 35})
    count = rng.randint(1, 2)
    if kind == "whole" or tile <= multiple:
        return tile * count
    part = rng.randint(1, (tile - 1) // multiple) * multiple
    return part if kind == "below" else tile * count + part


def _extras(rng: random.Random, program: Program) -> Program:
    """Persistent grids, clusters, blocks per multiprocessor and warp specialization."""
    if rng.random() < 0.35:
        program = replace(program, persistent=(rng.choice((1, 2, 3, 8)), rng.choice((0, 1, 2, 3, 5))))
    if rng.random() < 0.2:
        program = replace(program, cluster=(rng.choice((2, 2, 4)), rng.choice(("BLOCK_Y", "BLOCK_Y", "BLOCK_X"))))
    if rng.random() < 0.15:
        program = replace(program, blocks_per_sm=rng.choice((1, 2, 3)))
    kind = choose(rng, {"auto": 55, "off": 25, "registers": 20})
    if kind == "off":
        program = replace(program, specialize=(False, 0, 0))
    elif kind == "registers":
        program = replace(program, specialize=(True, rng.choice((24, 40, 56)), rng.choice((160, 200, 232, 240))))
    if kind != "off" and (program.persistent is not None or rng.random() < 0.05) and rng.random() < 0.4:
        program = _teams(rng, program)
    return program


def _teams(rng: random.Random, program: Program) -> Program:
    """Consumer teams taking the tiles in turn (ping-pong); a team's warpgroups as drawn, or one
    warpgroup holding the block's rows of warpgroup tiles register-blocked."""
    program = replace(program, teams=choose(rng, {2: 85, 3: 15}))
    if rng.random() < 0.5 and "ii" in program.order:
        order = [n for n in program.order if n != "ii"]
        order.insert(order.index("iii"), "ii")  # ii inside the k loops: register-blocked
        bindings = tuple(b for b in program.bindings if b.indices != ("ii",))
        program = replace(program, order=tuple(order), bindings=bindings)
    return program
