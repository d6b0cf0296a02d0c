#!/usr/bin/env python3
"""One head's attention forward (samples/attention.py) against torch's scaled_dot_product_attention
on the same tensors, on the GPU, in one run.

For each function of the sample (and, with ``--variants``, the plan at other key tiles, stages,
with ``acc.exp``, without ``plan.overlap``, and decode at other batches, lengths and splits of the
keys between blocks): on (batch, heads, seq, d) tensors, O is checked against torch's own SDPA
first (relative to O's largest value), then schedc and each of torch's backends (cuDNN,
FlashAttention-2, memory-efficient; those that take the tensors on the device) are timed with
``triton.testing.do_bench`` (medians in ms), the median of ``ROUNDS`` rounds that time each in
turn. TFLOP/s counts 4·batch·heads·M·N·d, halved when causal (FlashAttention's count); decode
counts K's and V's bytes over the time (TB/s) and also times schedc's call replayed in a CUDA graph
(``graph ms``: without the host's launches); ``x best`` is the fastest backend's time over
schedc's (> 1: schedc faster).

``--ncu``: no timing; one launch of each (and of cuDNN's) in an NVTX range, for Nsight Compute.
``--before DIR``: each function also as built by another compiler (``DIR``: an output directory of
``attention`` and/or ``attention_variants`` packages, or one .hat), timed right after it on the same
tensors, named ``NAME:before``.

Usage (on the GPU, repository root):
    python benchmarks/attention.py [--variants] [--only PREFIX[,PREFIX...]] [--ncu] [--before DIR]
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

import attention  # noqa: E402
from built import sample_package  # noqa: E402

import schedc as acc  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402

ROUNDS = 3
VARIANTS = {  # name: attention's arguments (float16 unless dtype)
    "v_b8h32_4096x64_kv128_serial": dict(M=4096, N=4096, d=64, batch=8, heads=32, kv_tile=128, overlap=False),
    "v_b8h16_4096x128_kv128": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=128),
    "v_b8h16_4096x128_kv128_serial": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=128, overlap=False),
    "v_b8h16_4096x128_kv64_serial": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=64, overlap=False),
    "v_b8h16_4096x128_kv128_exp": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=128, exponential=acc.exp),
    "v_b8h16_4096x128_kv128_s3": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=128, stages=3),
    "v_b8h16_4096x128_kv128_causal": dict(M=4096, N=4096, d=128, batch=8, heads=16, kv_tile=128, causal=True),
    "v_b8h16_4096x256_kv64": dict(M=4096, N=4096, d=256, batch=8, heads=16, kv_tile=64, stages=2),
    "v_b8h16_4096x256_kv80": dict(M=4096, N=4096, d=256, batch=8, heads=16, kv_tile=80, stages=2),
    "v_b8h16_4096x256_kv80_s4_alt": dict(M=4096, N=4096, d=256, batch=8, heads=16, kv_tile=80, stages=4,
                                         alternate=True),
    "v_b8h16_4096x256_kv64_s4_alt": dict(M=4096, N=4096, d=256, batch=8, heads=16, kv_tile=64, stages=4,
                                         alternate=True),
    "v_b2h16_16384x256_bf16": dict(M=16384, N=16384, d=256, batch=2, heads=16, dtype=acc.ScalarType.bfloat16),
    "v_b2h16_16384x256_kv80_bf16": dict(M=16384, N=16384, d=256, batch=2, heads=16, kv_tile=80, stages=2,
                                        dtype=acc.ScalarType.bfloat16),
    "v_b8h16_4000x128_bf16": dict(M=4000, N=4000, d=128, batch=8, heads=16, dtype=acc.ScalarType.bfloat16),
    "v_b2h16_16384x128_kv128": dict(M=16384, N=16384, d=128, batch=2, heads=16, kv_tile=128),
    "v_b8h16_4096x128_alt": dict(M=4096, N=4096, d=128, batch=8, heads=16, alternate=True),
    "v_b8h16_4096x128_alt_k128": dict(M=4096, N=4096, d=128, batch=8, heads=16, alternate=True, k_tile=128),
    "v_b8h16_4096x128_k128": dict(M=4096, N=4096, d=128, batch=8, heads=16, k_tile=128),
    "v_b8h16_4096x128_alt_bf16": dict(M=4096, N=4096, d=128, batch=8, heads=16, alternate=True,
                                      dtype=acc.ScalarType.bfloat16),
    "v_b8h16_4096x128_alt_causal": dict(M=4096, N=4096, d=128, batch=8, heads=16, alternate=True, causal=True),
    "v_b8h32_4096x64_alt": dict(M=4096, N=4096, d=64, batch=8, heads=32, alternate=True),
    "v_b8h32_4096x64_r192": dict(M=4096, N=4096, d=64, batch=8, heads=32, rows=192, registers=(24, 160)),
    "v_b8h32_4096x64_r192_kv64": dict(M=4096, N=4096, d=64, batch=8, heads=32, rows=192, kv_tile=64),
    "v_b2h16_16384x128_alt": dict(M=16384, N=16384, d=128, batch=2, heads=16, alternate=True),
    "v_b4h64kv8_8192x128_alt_bf16": dict(M=8192, N=8192, d=128, batch=4, heads=64, kv_heads=8, alternate=True,
                                         dtype=acc.ScalarType.bfloat16),
    "v_bshd_b4h64kv8_8192x128_alt_bf16_causal": dict(M=8192, N=8192, d=128, batch=4, heads=64, kv_heads=8,
                                                     alternate=True, causal=True, dtype=acc.ScalarType.bfloat16,
                                                     layout="BSHD"),
    "v_b4h64kv8_8192x128_alt_bf16_causal": dict(M=8192, N=8192, d=128, batch=4, heads=64, kv_heads=8,
                                                alternate=True, causal=True, dtype=acc.ScalarType.bfloat16),
}
# decode (``vd_``): the sample's decode plan at other batches, key lengths and splits of the keys between blocks
_DECODE = dict(M=4, d=128, heads=8, dtype=acc.ScalarType.bfloat16, rows=64, stages=4)
VARIANTS |= {f"vd_b{batch}h32kv8_{n}x128_s{splits}": dict(_DECODE, N=n, batch=batch, splits=splits)
             for batch, n, splits in ((16, 8192, 2), (16, 8192, 4), (16, 32768, 4), (16, 32768, 16), (1, 32768, 1),
                                      (1, 32768, 16), (1, 32768, 64), (2, 131072, 32))}
BACKENDS = ("cudnn", "flash", "efficient")


def main() -> None:
    import torch

    package = sample_package("attention", ROOT / "hat_packages")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    functions = [(name, fn, attention.FUNCTIONS[name]) for name, fn in package.functions.items()
                 if name in attention.FUNCTIONS]
    decode = [(name, fn, attention.DECODE[name]) for name, fn in package.functions.items() if name in attention.DECODE]
    if "--variants" in sys.argv:
        for found in variants():  # the decode variants timed as decode
            (decode if found[0].startswith("vd_") else functions).append(found)
    if "--only" in sys.argv:
        prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(","))
        functions = [f for f in functions if f[0].startswith(prefixes)]
        decode = [f for f in decode if f[0].startswith(prefixes)]
    if "--before" in sys.argv:  # each function of another build beside this one's, named NAME:before
        functions, decode = (beside(found, Path(sys.argv[sys.argv.index("--before") + 1])) for found in (functions,
                                                                                                      decode))
    print(f"{'function':>34} {'schedc ms':>9} {'TFLOP/s':>8} "
          + " ".join(f"{b + ' ms (TFLOP/s)':>19}" for b in BACKENDS) + f" {'x best':>7} {'error':>9}")
    if "--ncu" in sys.argv:  # one launch each, under Nsight Compute
        for name, fn, arguments in functions + decode:
            profile(fn, arguments, decode=(name, fn, arguments) in decode)
        return
    for name, fn, arguments in functions:
        rounds = [measure(fn, arguments) for _ in range(ROUNDS)]
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        flops = 4 * math.prod(arguments.get(key, 1) for key in ("batch", "heads", "M", "N", "d"))
        flops //= 2 if arguments.get("causal") else 1
        best = min((t[b] for b in BACKENDS if b in t), default=float("nan"))
        cells = " ".join(f"{t[b]:10.3f} ({flops / t[b] / 1e9:5.0f})" if b in t else f"{'-':>19}" for b in BACKENDS)
        print(f"{name:>34} {t['schedc']:9.3f} {flops / t['schedc'] / 1e9:8.0f} {cells} {best / t['schedc']:7.3f} "
              f"{t['error']:9.2e}")
    if decode:
        print(f"decode: {'function':>42} {'schedc ms':>9} {'TB/s':>5} {'graph ms':>8} "
              + " ".join(f"{b + ' ms (TB/s)':>16}" for b in BACKENDS) + f" {'x best':>7} {'error':>9}")
    for name, fn, arguments in decode:  # one query a head: K and V's bytes over the time
        rounds = [measure(fn, arguments, decode=True) for _ in range(ROUNDS)]
        t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        read = 2 * 2 * math.prod(arguments.get(key, 1) for key in ("batch", "heads", "N", "d"))
        best = min((t[b] for b in BACKENDS if b in t), default=float("nan"))
        cells = " ".join(f"{t[b]:8.3f} ({read / t[b] / 1e9:5.2f})" if b in t else f"{'-':>16}" for b in BACKENDS)
        print(f"{name:>50} {t['schedc']:9.3f} {read / t['schedc'] / 1e9:5.2f} {t['graph']:8.3f} {cells} "
              f"{best / t['schedc']:7.3f} {t['error']:9.2e}")


def beside(found: list, before: Path) -> list:
    """``found`` with each function that ``before`` (a .hat, or an output directory of the
    attention and attention_variants packages) also holds right after it, as ``NAME:before``: a
    change to the compiler timed against the build before it, on the same tensors, in the same call."""
    def package(name: str):
        hat = before if before.suffix == ".hat" else before / name / f"{name}.hat"
        return acc.load(hat).functions if hat.exists() else {}

    packages = {where: package(where) for where in ("attention", "attention_variants")}
    out = []
    for name, fn, arguments in found:
        out.append((name, fn, arguments))
        old = next((p[name] for p in packages.values() if name in p), None)
        if old is not None:
            out.append((f"{name}:before", old, arguments))
    return out


def variants():
    """The plan at other tiles and options, built into ``hat_packages/attention_variants`` where it
    is not (delete it to rebuild; a plan the compiler refuses is named with its reason and left out)."""
    out = ROOT / "hat_packages" / "attention_variants"
    hat = out / "attention_variants.hat"
    if not hat.exists():
        package = acc.Package()
        for name, arguments in VARIANTS.items():
            try:
                package.add(*attention.attention(**arguments), base_name=name)
            except SchedcError as error:
                print(f"{name}: refused: {error}")
        package.build("attention_variants", output_dir=out)
    prefixes = tuple(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv else ("",)
    return [(name, fn, VARIANTS[name]) for name, fn in acc.load(hat).functions.items()
            if name in VARIANTS and name.startswith(prefixes)]


def measure(fn, arguments: dict, decode: bool = False) -> dict[str, float]:
    """schedc's O and each backend's on the same (batch, heads, seq, d) tensors (``tensors``), timed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    arrays, (q, k, v, o), sdpa_arguments = tensors(fn, arguments, decode)
    error = check(fn, arrays, (q, k, v, o), bool(arguments.get("causal")))
    times = {"schedc": do_bench(lambda: fn(*arrays), return_mode="median"), "error": error}
    if decode:  # a call of tens of microseconds: its replay in a CUDA graph, without the host's launches
        times["graph"] = _in_graph(lambda: fn(*arrays))
    for name, backend in zip(BACKENDS, (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                                        SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                sdpa(q, k, v, **sdpa_arguments)
                times[name] = do_bench(lambda: sdpa(q, k, v, **sdpa_arguments), return_mode="median")
        except RuntimeError:  # the backend does not take these tensors on this device
            pass
    return times


def check(fn, arrays: tuple, views: tuple, causal: bool) -> float:
    """schedc's O (in ``views``' o) against torch's FlashAttention on the same tensors: the largest
    error relative to O's largest value (asserted below 2e-2)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v, o = views
    fn(*arrays)
    group = q.shape[1] // k.shape[1]  # the reference on K and V repeated for each query head of a group
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        want = sdpa(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                    is_causal=causal).float()
    error = ((o.float() - want).abs().max() / want.abs().max()).item()
    assert error < 2e-2, f"{fn.name}: relative error {error:.3e}"
    return error


def profile(fn, arguments: dict, decode: bool = False) -> None:
    """One launch of schedc's function in the NVTX range ``schedc:NAME`` and one of cuDNN's SDPA
    in ``cudnn:NAME``, on the same tensors, for Nsight Compute (``--ncu``: benchmarks/device_session.sh
    attention with NCU=...); each warmed up outside its range."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    arrays, (q, k, v, o), sdpa_arguments = tensors(fn, arguments, decode)
    calls = [("schedc", lambda: fn(*arrays))]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        try:
            sdpa(q, k, v, **sdpa_arguments)
            calls.append(("cudnn", lambda: sdpa(q, k, v, **sdpa_arguments)))
        except RuntimeError:
            pass
        for label, call in calls:
            call()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(f"{label}:{fn.name}")
            call()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()


def tensors(fn, arguments: dict, decode: bool = False) -> tuple:
    """The function's arrays, torch's (q, k, v, o) views of the same memory and SDPA's keyword
    arguments, on seeded random values: (batch, heads, seq, d) tensors (BSHD functions on (batch,
    seq, heads, d) tensors, torch on their transposed views). ``decode``: Q is (batch, heads * M,
    1, d), M query heads a K/V head, each with one query (the same memory as the function's
    (batch, heads, M, d))."""
    import torch

    batch, heads, M, N, d = (arguments.get(key, 1) for key in ("batch", "heads", "M", "N", "d"))
    kv_heads = arguments.get("kv_heads") or heads
    dtype = torch.bfloat16 if arguments.get("dtype") is acc.ScalarType.bfloat16 else torch.float16
    torch.manual_seed(0)
    if arguments.get("layout") == "BSHD":  # (batch, seq, heads, d) memory; torch takes the BHSD views of it
        q = torch.randn(batch, M, heads, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(batch, N, kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
        o = torch.empty_like(q)
        arrays = tuple(t.view(t.shape[0] * t.shape[1], -1) for t in (q, k, v, o))
        q, k, v, o = (t.transpose(1, 2) for t in (q, k, v, o))
    else:
        q = torch.randn(batch, heads, M, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(batch, kv_heads, N, d, device="cuda", dtype=dtype) for _ in range(2))
        if decode:
            q, heads = q.view(batch, heads * M, 1, d), heads * M
        o = torch.empty_like(q)
        arrays = (q.view(-1, d), k.view(-1, d), v.view(-1, d), o.view(-1, d))
    gqa = {"enable_gqa": True} if kv_heads != heads else {}
    gqa |= {"is_causal": True} if arguments.get("causal") else {}
    return arrays, (q, k, v, o), gqa


def _in_graph(call) -> float:
    """``call`` captured in a CUDA graph (after a warm-up on a side stream), its replay timed."""
    import torch
    from triton.testing import do_bench

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return do_bench(graph.replay, return_mode="median")


if __name__ == "__main__":
    main()
