"""The copy and element-wise samples (tiled copy, memcpy, pipelined add): their arrays are up to
4 GiB, so here each plan is built at a small size, emulated on every block against the
reference, and checked for its pipeline; the device verifies them at full size."""

from __future__ import annotations

import runpy

import pytest

from schedc.ir.kernel import AsyncWait, BlockCopy
from schedc.ir.walk import walk_statements
from schedc.verify import emulate_function

from .conftest import ROOT
from .plans import compile_plan


def sample(name: str) -> dict:
    return runpy.run_path(str(ROOT / "samples" / f"{name}.py"), run_name="schedc_test")


SMALL = [
    ("tiled_copy", "tiled_copy", {"M": 128, "N": 256}, None),
    ("gluon_memcpy", "memcpy", {"N": 3 * 4096}, None),
    *[("gluon_add", "add", {"M": 3, "N": 4096}, stages) for stages in (None, 1, 2, 3)],
]


@pytest.mark.parametrize("name, function, sizes, stages", SMALL, ids=lambda x: str(x))
def test_small_size_emulates(name, function, sizes, stages):
    make = sample(name)[function]
    plan, args = make(stages, **sizes) if name == "gluon_add" else make(**sizes)
    model, kernel = compile_plan(plan, args, name=function)
    reports = emulate_function(model, kernel, blocks=None, seed=5)
    assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
    copies = [s for s in walk_statements(kernel.body) if isinstance(s, BlockCopy)]
    if stages is None and name == "gluon_add":
        assert not copies and not kernel.shared
        return
    size = {b.name: b.dtype.size for b in kernel.buffers}
    assert copies and all(c.asynchronous and c.vector * size[c.source] == 16 for c in copies), "16-byte cp.async"
    waits = [s.pending for s in walk_statements(kernel.body) if isinstance(s, AsyncWait)]
    assert waits[0] == max((stages or 1) - 2, 0)
    if (stages or 1) > 1:
        assert all(b.shape[0] == stages for b in kernel.shared), "one buffer per stage"


def test_pipelined_add_refills_the_buffer_freed_by_the_previous_step():
    plan, args = sample("gluon_add")["add"](3, M=2, N=8192)
    _, kernel = compile_plan(plan, args)
    assert [b.shape for b in kernel.shared] == [(3, 1, 1024), (3, 1, 1024)]
