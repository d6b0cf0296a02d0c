"""What ``schedc emulate`` says it ran for a function of several kernels: every block of each
kernel before the last (a SIMT split-K's clear and partial kernels), the sample of the last (its
combine), each named, not the combine kernel's grid alone."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import schedc as acc
from schedc.cli import main

from .plans import H100, T

ROWS, K, PART = 16, 256, 16  # k in 16 parts of 16 on BLOCK_Z: 16 partial blocks, one combine block of 16 rows


@pytest.fixture(scope="module")
def split_sums(tmp_path_factory):
    """A package of ``sums``: ``S[i] += A[i, k]`` with k split in 16 parts bound to BLOCK_Z and
    i on THREAD_X (16 blocks that clear the partial sums, 16 partial blocks, a combine kernel of one block)."""
    A = acc.Array(role=acc.Role.INPUT, element_type=T.float32, shape=(ROWS, K), name="A")
    S = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=T.float32, shape=(ROWS,), name="S")
    nest = acc.Nest(shape=(ROWS, K))
    i, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        S[i] += A[i, k]

    s = nest.create_schedule()
    s.split(k, PART)
    plan = s.create_plan(H100)
    plan.bind({k: H100.GridUnit.BLOCK_Z, i: H100.GridUnit.THREAD_X})
    package = acc.Package()
    package.add(plan, args=(A, S), base_name="sums")
    return package.build("sums", format=acc.Package.Format.HAT_SOURCE, output_dir=str(tmp_path_factory.mktemp("sums")))


def test_emulate_names_every_block_of_the_partial_kernel(split_sums):
    result = CliRunner().invoke(main, ["emulate", str(split_sums)])
    assert result.exit_code == 0, result.output
    first, title = result.stdout.splitlines()[0], next(x for x in result.stdout.splitlines() if x.startswith("emulated"))
    assert first == ("emulating sums on all 16 blocks of the clear kernel, all 16 blocks of the partial kernel and "
                     "all 1 block of the combine kernel (a grid this small is emulated whole)"), result.stdout
    assert title == ("emulated sums (16 of 16 blocks of the clear kernel, 16 of 16 blocks of the partial kernel and "
                     "1 of 1 block of the combine kernel)"), result.stdout
    assert ": ok: relative error" in result.stdout


def test_emulate_blocks_option_samples_the_combine_kernel_after_every_partial_block(split_sums):
    result = CliRunner().invoke(main, ["emulate", str(split_sums), "--blocks", "3"])
    assert result.exit_code == 0, result.output
    assert "all 16 blocks of the partial kernel and all 1 block of the combine kernel (--blocks 3, but the grid " \
           "has only 1 block)" in result.stdout, result.stdout
