"""Helpers the Hopper tests share: the sample's plans lowered and emulated, and kernels broken
on purpose (a statement rewritten) for the emulator's detectors to find."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import schedc as acc
from schedc.codegen.emulate import emulate
from schedc.frontend.freeze import freeze
from schedc.ir.walk import map_stmt
from schedc.lower import compile_model, verifying
from schedc.package.build import name_arrays

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

import hopper_matmul  # noqa: E402

F16, BF16, F32 = acc.ScalarType.float16, acc.ScalarType.bfloat16, acc.ScalarType.float32
COL = acc.Array.Layout.LAST_MAJOR


def lower(plan, args):
    """The kernel of ``plan`` (named as Package.add names it, function ``mm``), the IR verified
    after each pass."""
    name_arrays("test", plan, args, "mm")
    with verifying():
        return compile_model(freeze(plan, "mm", args))


def kernel(M, N, K, **options):
    """The kernel of ``hopper_matmul.matmul(M, N, K, **options)``."""
    return lower(*hopper_matmul.matmul(M, N, K, **options))


def run(k, blocks=None, seed=0, start=None):
    """Emulate ``k`` on random inputs; the written part of C and numpy's C + A @ B there (or
    ``start`` + A @ B: a plan whose prologue SETs the accumulators)."""
    rng = np.random.default_rng(seed)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in k.params}
    result = emulate(k, storage, blocks=blocks)
    arrays = {}
    for b in k.params:
        flat = storage[b.name].astype(np.float64)
        arrays[b.name] = np.lib.stride_tricks.as_strided(flat, b.shape, [s * 8 for s in b.strides])
    expected = (arrays["C"] if start is None else start) + arrays["A"] @ arrays["B"]
    c = next(b for b in k.params if b.name == "C")
    got = result.storage["C"].reshape(c.shape)
    written = result.written["C"].reshape(c.shape)
    return got[written], expected[written], written


def rewrite(body, change):
    """``body`` with ``change(stmt)`` (a tuple of statements) in place of each statement, at any
    depth (loops, branches, roles)."""
    return map_stmt(body, change)


def emulate_broken(k):
    """Emulate a (broken) kernel on random inputs: its detectors raise what they find."""
    rng = np.random.default_rng(0)
    storage = {b.name: rng.standard_normal(b.size).astype(b.dtype.numpy) for b in k.params}
    emulate(k, storage)
