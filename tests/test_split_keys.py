"""A chain's keys split between blocks (flash-decoding, ``schedc/lower/split_keys.py``): the
partial kernel over each block's keys, the combine weighted by the parts' maxima and sums, every
block emulated against the float64 reference; the structure of the function; the refusals."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest

import schedc as acc
from schedc.errors import PlanError
from schedc.ir.kernel import Call, Load, Store
from schedc.ir.walk import subexpressions, walk_statements
from schedc.lower import split_keys
from schedc.targets import MMAFragmentOp
from schedc.verify import emulate_function, run_function

from .conftest import require_gpu
from .plans import T, build, compile_function_plan

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
import attention  # noqa: E402

DECODE = dict(M=4, N=512, d=128, batch=1, heads=2, dtype=T.bfloat16, rows=64, stages=4)
CASES = {
    "decode_two_parts": dict(DECODE, splits=2),
    "decode_bshd_lse": dict(DECODE, splits=2, layout="BSHD", lse=True),
    # a block of the first 128 queries sees none of the second part's keys: its part is all -inf
    "causal_parts_past_the_queries": dict(M=256, N=256, d=64, heads=2, causal=True, splits=2, kv_tile=64),
    "gqa_four_parts": dict(M=64, N=1024, d=64, heads=2, kv_heads=1, rows=64, splits=4, kv_tile=128),
}


def _passed(reports) -> None:
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


@pytest.mark.parametrize("case", CASES)
def test_keys_split_between_blocks_emulate_to_the_whole_softmax(case):
    """Every block of the partial kernel and of the combine emulated: O (and L) equal the float64
    reference of the plain script, whose softmax sees each row whole."""
    model, fn = compile_function_plan(*attention.attention(**CASES[case]))
    assert len(fn.kernels) >= 2
    _passed(emulate_function(model, fn, None, seed=3))


def test_the_function_is_a_partial_kernel_and_a_combine_over_workspaces():
    """Two parts of 256 keys: the partial kernel's grid takes the parts, O's slices and the rows'
    maxima and sums are float32 workspaces with a slice a part, and the combine weighs each part by
    its sum times exp(-scale (max - its maximum)), 0 where the part saw no key."""
    model, fn = compile_function_plan(*attention.attention(**CASES["decode_two_parts"]))
    partial, combine = fn.kernels
    assert partial.name.startswith("f__partial") and combine.name.startswith("f__combine")
    spaces = {b.name: b for b in fn.params if getattr(b, "kind", "") == "workspace"}
    assert spaces["O__split"].shape == (2 * 8, 128) and spaces["peak__split"].shape == (2 * 8,)
    assert all(b.dtype is T.float32 for b in spaces.values())
    assert math.prod(partial.grid) == 2 * math.prod(compile_function_plan(*attention.attention(**DECODE))[1]
                                                    .kernels[0].grid)
    stored = [s.buffer for s in walk_statements(combine.body) if isinstance(s, Store)]
    assert stored == ["O__top", "O__whole", "O"]
    calls = [e for s in walk_statements(combine.body) if isinstance(s, Store) and s.buffer == "O"
             for e in subexpressions(s.value) if isinstance(e, Call)]
    assert sum(c.function.value == "select" for c in calls) == 2  # one weight a part
    exps = [c for c in calls if c.function.value == "exp"]
    assert exps and all(-1 / math.sqrt(128) == pytest.approx(float(c.args[0].lhs.value)) for c in exps)
    peaks = {e.buffer for c in exps for e in subexpressions(c) if isinstance(e, Load)}
    assert peaks == {"O__top", "peak__split"}


def test_a_log_sum_exp_is_set_by_a_rows_kernel_from_the_whole_rows():
    model, fn = compile_function_plan(*attention.attention(**dict(DECODE, splits=2, lse=True)))
    assert [k.name.split("__")[1] for k in fn.kernels] == ["partial", "combine", "rows"]
    stored = {s.buffer for s in walk_statements(fn.kernels[2].body) if isinstance(s, Store)}
    assert "L" in stored and not any(isinstance(s, Store) and s.buffer == "L"
                                     for s in walk_statements(fn.kernels[0].body))


def test_without_a_split_the_function_is_one_kernel():
    _, fn = compile_function_plan(*attention.attention(**DECODE))
    assert len(fn.kernels) == 1


def _refused(match: str, **arguments) -> None:
    with pytest.raises(PlanError, match=match):
        compile_function_plan(*attention.attention(**arguments))


def test_a_part_of_one_tile_of_keys_is_refused_with_the_parts_that_fit():
    _refused(r"bind\(\{\(i, j\): BLOCK_X\}\): each block's part of j \(128 keys\) is one tile of S.*at most 2 "
             r"parts of 256 keys", **dict(DECODE, splits=4))


def test_parts_that_end_inside_a_tile_are_refused():
    with pytest.raises(PlanError, match=r"each block's part of j is 192 keys, which js's steps of 128 do not divide"):
        split_keys.find(_bound_model(192))


def test_a_last_part_of_fewer_keys_emulates():
    """1000 keys in parts of 512: the last part's 488 keys end inside its fourth tile (masked to
    -inf past the last key), and the loop over the parts counts 512 keys a part in the nest's
    bound on the keys."""
    model, fn = compile_function_plan(*attention.attention(**dict(DECODE, N=1000, splits=2)))
    assert [b.shape for b in fn.params if getattr(b, "kind", "") == "workspace"][0] == (2 * 8, 128)
    partial = split_keys.partial_model(model, split_keys.find(model), split_keys.workspaces(
        model, split_keys.find(model)))
    assert any(("j", 512) in g.scaled for g in partial.groups)
    _passed(emulate_function(model, fn, None, seed=6))


def _bound_model(step: int):
    """The decode plan's model with the keys' block-bound loop taking ``step`` keys a part."""
    model, _ = compile_function_plan(*attention.attention(**dict(DECODE, splits=2)))
    loops = tuple(dataclasses.replace(lp, step=step) if lp.name == "j" else lp for lp in model.loops)
    return dataclasses.replace(model, loops=loops)


def test_a_second_product_that_reads_its_c_is_refused():
    model, _ = compile_function_plan(*attention.attention(**dict(DECODE, splits=2)))
    kept = dataclasses.replace(model.chained, prologue_op=MMAFragmentOp.NONE)
    with pytest.raises(PlanError, match=r"the second product starts at zero"):
        split_keys.find(dataclasses.replace(model, chained=kept))


def test_a_row_softmax_without_its_division_is_refused():
    """The combine weighs parts that each divided by their own sum: a chain that never divides
    (its E a sum of exponentials relative to the row's maximum) is refused."""
    model, _ = compile_function_plan(*attention.attention(**dict(DECODE, splits=2)))
    divide = next(n for n, s in enumerate(model.statements) if s.buffer == "S" and any(
        isinstance(e, Load) and e.buffer == "total" for e in subexpressions(s.value)))
    fusion = model.fusion
    parts = tuple(tuple(n - (n > divide) for n in members if n != divide) for members in fusion.parts)
    keep = [p for p, members in enumerate(parts) if members]
    model = dataclasses.replace(model, statements=tuple(s for n, s in enumerate(model.statements) if n != divide),
                                fusion=dataclasses.replace(fusion, parts=tuple(parts[p] for p in keep),
                                                           unfused=tuple(fusion.unfused[p] for p in keep)))
    with pytest.raises(PlanError, match=r"built for the softmax kept online"):
        split_keys.find(model)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_keys_split_between_blocks_on_the_gpu(case, tmp_path):
    build(*attention.attention(**CASES[case]), "att", tmp_path)
    require_gpu()
    _passed(run_function(acc.load(tmp_path / "att.hat").functions["att"], seed=7))


def test_the_random_tester_draws_keys_split_between_blocks():
    """Chains over tiles of S with the online softmax bind the loop over two parts of the keys to
    blocks at times; the draw of seed 1037 (a causal mask, the maximum starting at -1e30, not -inf:
    a block whose keys are all masked ends with its sum 0 and its O 0 / 0) is correct, element for
    element with the reference (its combine once read the part's weight from its maximum being -inf)."""
    import random

    from .fuzz.chain import chain_program
    from .fuzz.features import keys_split
    from .fuzz.run import run_program

    drawn = [seed for seed in range(1000, 1400) if keys_split(chain_program(random.Random(seed), "NVIDIA_H100"))]
    assert len(drawn) >= 10
    program = chain_program(random.Random(1037), "NVIDIA_H100")
    assert keys_split(program) and any(s.value.name == "select" for step in program.row_steps for s in step
                                       if hasattr(s.value, "name"))
    outcome = run_program(program)
    assert outcome.kind == "correct", outcome.message


def test_base_two_exponentials_weigh_their_parts_in_base_two():
    """The draw of seed 1374: ``fast_exp2((S - M) * a + c)``, whose parts' weights are
    ``2^(-a (m - M_p))`` (the combine computes them as e^(-a ln(2) (m - M_p)))."""
    import random

    from .fuzz.chain import chain_program
    from .fuzz.features import keys_split
    from .fuzz.program import Fn, walk
    from .fuzz.run import run_program

    program = chain_program(random.Random(1374), "NVIDIA_H100")
    assert keys_split(program) and any(isinstance(n, Fn) and n.name == "fast_exp2" for step in program.row_steps
                                       for s in step for n in walk(s.value))
    outcome = run_program(program)
    assert outcome.kind == "correct", outcome.message


def test_split_keys_golden_source(update_golden):
    """The decode plan in two parts of the keys: the partial kernel and the combine, as emitted."""
    from schedc.codegen.cuda import emit_source, without_runtime

    _, fn = compile_function_plan(*attention.attention(**CASES["decode_two_parts"]), name="decode_split")
    source = without_runtime(emit_source([fn], "// decode, the keys in two parts between blocks (tests/test_split_keys.py)"))
    path = Path(__file__).parent / "golden" / "attention_decode_split.cu"
    if update_golden:
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run pytest --update-golden"
    assert source == path.read_text(), f"the kernels differ from {path}; if intended, run pytest --update-golden"


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["whole", "decode_two_parts"])
def test_attention_as_a_torch_operator_matches_sdpa(case, tmp_path):
    """The sample's attention (one kernel) and the decode with its keys in two parts (a partial
    kernel, a combine and their workspaces) as PyTorch operators (``schedc.torch.custom_op``),
    eagerly and inside ``torch.compile(fullgraph=True)``, against torch's SDPA on the same tensors."""
    arguments = dict(M=128, N=384, d=64, heads=2) if case == "whole" else CASES[case]
    fn = acc.load(build(*attention.attention(**arguments), "att", tmp_path)).att
    require_gpu()
    torch = pytest.importorskip("torch")
    from schedc import torch as schedc_torch

    op = schedc_torch.custom_op(fn, f"schedc_test::attention_{case}")
    batch, heads, M, N, d = (arguments.get(key, 1) for key in ("batch", "heads", "M", "N", "d"))
    dtype = torch.bfloat16 if arguments.get("dtype") is T.bfloat16 else torch.float16
    q = torch.randn(batch, heads, M, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, heads, N, d, device="cuda", dtype=dtype) for _ in range(2))
    # decode: a K/V head's M query rows are its query heads' queries (SDPA: heads * M heads of one query)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(batch, heads * M, 1, d) if M < 64 else q,
        k.repeat_interleave(M, dim=1) if M < 64 else k, v.repeat_interleave(M, dim=1) if M < 64 else v).float()
    flat = [t.reshape(-1, d) for t in (q, k, v)]
    for run in (op, torch.compile(lambda *x: op(*x), fullgraph=True)):
        got = run(*flat).float().reshape(want.shape)
        assert ((got - want).abs().max() / want.abs().max()).item() < 2e-2
