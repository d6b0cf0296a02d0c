"""What a wgmma plan over batched operands (arrays of rank 3 and more, ``C[b, i, j] += A[b, i, k] *
B[b, k, j]``) may write instead: TMA copies 2-D tiles of wgmma's operands, so the refusal names
the ways that build.

- fold the batch into the rows: 2-D arrays whose rows are each batch's rows in turn
  (``A[b * M + i, k]``, the same memory as a row-major ``A[b, i, k]``), the batch's loop bound to
  BLOCK_Z (each batch's rows a whole number of tiles: a tile across two batches is refused);
- keep the 3-D arrays on mma.sync tiles (a warp's 16-row shapes, loops over them bound to warps),
  whose shared tiles the block's threads copy, of any rank.
"""

from __future__ import annotations

import math

from ..instructions import MMA_SYNC
from ..ir.affine import Affine
from ..ir.walk import loads


def ways_out(model, tiles) -> str:
    """The changes that build, in the script's names and numbers."""
    ways = [_fold(model)]
    shape = _mma_sync_shape(model, tiles)
    if shape is not None:
        ways.append(f"keep the {_ranks(model)} arrays and tensorize with an mma.sync shape "
                    f"(mma_shape=MMAShape.{shape}, its loops over tiles bound to WARP_X/WARP_Y), whose shared tiles "
                    "the block's threads copy")
    return "; or ".join(ways)


def _product_accesses(model) -> list[tuple[str, tuple[Affine, ...]]]:
    """(array, subscripts) of the product's statement: C's, then each array it reads, once each."""
    statement = model.statements[0]
    seen: dict[str, tuple[Affine, ...]] = {statement.buffer: tuple(Affine.of(i) for i in statement.index)}
    for x in loads(statement.value):
        seen.setdefault(x.buffer, tuple(Affine.of(i) for i in x.index))
    return list(seen.items())


def _fold(model) -> str:
    """``fold the batch into the rows: 2-D arrays A (1024, 256) ... subscripted A[b * 256 + i, k]``."""
    folded, batch = [], set()
    for array, subscripts in _product_accesses(model):
        buffer = model.buffer(array)
        if len(buffer.shape) < 3:
            continue
        if not _row_major(buffer):
            return ("fold the batch into the rows of 2-D arrays (A[b * M + i, k], B[b * K + k, j], "
                    "C[b * M + i, j], each batch's rows in turn) bound to BLOCK_Z")
        index = str(subscripts[0])
        for size, s in zip(buffer.shape[1:-1], subscripts[1:-1]):
            index = f"{_scaled(index, size)} + {s}"
        folded.append(f"{array}[{index}, {subscripts[-1]}] of shape ({math.prod(buffer.shape[:-1])}, "
                      f"{buffer.shape[-1]})")
        batch |= subscripts[0].variables()
    loops = [lp.name for lp in model.loops if model.dims[lp.dim][0] in batch]
    unbound = [n for n in loops if model.binding_of(n) is None]
    where = f", and bind {unbound[0]} to BLOCK_Z" if len(unbound) == 1 and len(loops) == 1 else ""
    return (f"fold the batch into the rows (the same memory, each batch's rows in turn): {', '.join(folded)}"
            f"{where} (each batch's rows a whole number of tiles)")


def _scaled(text: str, size: int) -> str:
    return f"{text} * {size}" if text.isidentifier() else f"({text}) * {size}"


def _row_major(buffer) -> bool:
    """Whether the array's elements lie row by row (its leading dimensions fold into rows)."""
    stride = 1
    for size, have in zip(reversed(buffer.shape), reversed(buffer.strides)):
        if have != stride:
            return False
        stride *= size
    return True


def _ranks(model) -> str:
    ranks = sorted({len(model.buffer(a).shape) for a, _ in _product_accesses(model)
                    if len(model.buffer(a).shape) > 2})
    return "/".join(f"{r}-D" for r in ranks)


def _mma_sync_shape(model, tiles) -> str | None:
    """mma.sync's first shape for the product's operand and accumulator types on the target, or None."""
    sm = model.gpu.sm
    for mode in MMA_SYNC.modes:
        if mode.operand == tiles.operand_type and tiles.accumulator_type in mode.accumulators \
                and sm >= max(MMA_SYNC.min_sm, mode.min_sm):
            return mode.shapes[0].name
    return None
