#!/usr/bin/env python3
"""Wall time per call from PyTorch: a schedc function ``fn(a, b, c)`` on torch tensors of 4096
floats (``c = a + b``), beside torch's own add and a Triton kernel, in the same run; the same
function as a ``torch.library`` operator (``schedc.torch.custom_op``) eagerly, inside
``torch.compile`` (a graph of one call, and the difference a call makes in a graph of eight, its
kernel in C++ and in Python; the same graphs with inductor's C++ wrapper and without its size and
alignment asserts) and in CUDA graphs, beside torch's allocating add in the same graphs;
a small wgmma product whose kernel takes TMA tensor maps, directly and as an operator; the function
in a replayed CUDA graph beside its kernel's time; then where a schedc call spends its microseconds
(cProfile, by function).

The kernel itself takes a few microseconds; every figure is dominated by the host: the median
of ``--repeats`` runs of ``--calls`` calls each (after a warm-up), wall time divided by calls,
with a synchronize at the end of each run (the launches queue asynchronously, as in a model).

Usage (on the GPU): python3 benchmarks/call_overhead.py [--calls 2000] [--repeats 7] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import schedc as acc  # noqa: E402
from schedc import torch as schedc_torch  # noqa: E402
from schedc.package import native as schedc_native  # noqa: E402
from tests.plans import vector_add  # noqa: E402

N = 4096


def build(directory: Path) -> Path:
    """c[i] = a[i] + b[i] over 4096 floats: 32 blocks of 128 threads."""
    package = acc.Package()
    package.add(*vector_add(N), base_name="add")
    return package.build("add", output_dir=directory)


def build_gemm(directory: Path) -> Path:
    """A small wgmma product whose kernel takes TMA tensor maps: 256 x 512 x 256 float16,
    ``C += A @ B`` (the Hopper sample's plan, 2 stages, a persistent grid)."""
    sys.path.insert(0, str(ROOT / "samples"))
    import hopper_matmul

    package = acc.Package()
    package.add(*hopper_matmul.matmul(256, 512, 256, stages=2, output=acc.ScalarType.float16,
                                      persistent={"group": 2}), base_name="gemm")
    return package.build("gemm", output_dir=directory)


def gemm_rows(directory: Path, options) -> list[tuple[str, float]]:
    """The small wgmma product called directly, as an operator (C++ kernel: its tensor maps kept
    while the addresses are the same) and as one whose kernel is Python."""
    import torch

    fn = acc.load(build_gemm(directory)).gemm
    a, b = (torch.randn(*s, device="cuda", dtype=torch.float16) for s in ((256, 256), (256, 512)))
    c = torch.zeros(256, 512, device="cuda", dtype=torch.float16)
    op = schedc_torch.custom_op(fn, "schedc_bench::gemm")
    python_op = schedc_torch.custom_op(fn, "schedc_bench::gemm_python", native=False)
    c.zero_()
    op(a, b, c)
    torch.cuda.synchronize()
    assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.5, rtol=1e-2), "the gemm operator is wrong"
    return [("wgmma 256x512x256 fn(a, b, c)", per_call(lambda: fn(a, b, c), options.calls, options.repeats)),
            (f"  as an operator ({schedc_torch.kernel_of('schedc_bench::gemm')} kernel)",
             per_call(lambda: op(a, b, c), options.calls, options.repeats)),
            ("  as an operator, Python kernel", per_call(lambda: python_op(a, b, c), options.calls, options.repeats))]


def per_call(call, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the wall time per call, in microseconds."""
    import torch

    for _ in range(50):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


INDUCTOR = (("inductor's C++ wrapper", {"cpp_wrapper": True}),
            ("no size or alignment asserts", {"size_asserts": False, "alignment_asserts": False}))


def chain(op, count: int):
    """``(p, q) -> op(...op(op(p, q), q)..., q)``, ``count`` calls."""
    def run(p, q):
        for _ in range(count):
            p = op(p, q)
        return p
    return run


def chained(op, x, y, options, check: bool = True, inductor: dict | None = None) -> list[tuple[str, float]]:
    """The operator's cost inside a compiled graph: a function of 8 chained calls against one of 1,
    the difference per call (the compiled function's own entry cost falls out); and the same
    graph of 8 calls compiled with CUDA graphs (mode="reduce-overhead"), per call. ``inductor``:
    inductor options of the two graphs (then only the first row)."""
    import torch

    torch._dynamo.reset()  # each chain's code is compiled anew: dynamo counts recompilations per code object
    one, eight = (torch.compile(chain(op, n), fullgraph=True, options=inductor) for n in (1, 8))
    result = eight(x, y)
    assert not check or torch.allclose(result, x + 8 * y), "the chained operator is wrong"
    one(x, y)
    first, last = (per_call(lambda f=f: f(x, y), options.calls, options.repeats) for f in (one, eight))
    if inductor:
        return [("op in a compiled graph, each of 8", (last - first) / 7)]
    graphs = torch.compile(chain(op, 8), fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        graphs(x, y)
    replayed = per_call(lambda: graphs(x, y), options.calls, options.repeats) / 8
    return [("op in a compiled graph, each of 8", (last - first) / 7),
            ("  the same graph, CUDA graphs, each", replayed)]


def graphed(fn, x, y, out, options) -> list[tuple[str, float]]:
    """``fn`` captured 100 times in a CUDA graph and replayed: per call (the kernel's own time and
    the replay's share), beside the kernel's time alone (CUDA events around 100 eager calls)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(x, y, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(100):
            fn(x, y, out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + y), "the replayed graph is wrong"
    replay = per_call(graph.replay, max(options.calls // 100, 20), options.repeats) / 100
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(options.repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 100)
    return [("fn in a replayed CUDA graph", replay),
            ("  GPU time per call there (events)", statistics.median(times))]


def floor(x, y, options) -> list[tuple[str, float]]:
    """What any operator implemented in Python costs: one that only allocates its result
    (``torch.empty_like``), eagerly and as a call among 8 in a compiled graph."""
    import torch

    library = torch.library.Library("schedc_floor", "FRAGMENT")
    library.define("nothing(Tensor a, Tensor b) -> Tensor")
    library.impl("nothing", lambda a, b: torch.empty_like(a), "CUDA")
    torch.library.register_fake("schedc_floor::nothing", lambda a, b: torch.empty_like(a), lib=library)
    op = torch.ops.schedc_floor.nothing
    eager = per_call(lambda: op(x, y), options.calls, options.repeats)
    rows = chained(op, x, y, options, check=False)
    return [("a Python operator that only allocates", eager), ("  in a compiled graph, each of 8", rows[0][1]),
            ("  the same graph, CUDA graphs, each", rows[1][1])]


def triton_add():
    """A Triton kernel for the same add, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)

    def run(x, y, out):
        add_kernel[(N // 1024,)](x, y, out, N, BLOCK=1024)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of schedc's call")
    options = parser.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as directory:
        fn = acc.load(build(Path(directory))).add
        x, y = torch.rand(N, device="cuda"), torch.rand(N, device="cuda")
        out = torch.empty(N, device="cuda")
        fn(x, y, out)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y), "the schedc add is wrong"
        plan = fn._plan
        native = plan.native
        rows = [("schedc fn(a, b, c)", per_call(lambda: fn(x, y, out), options.calls, options.repeats))]
        plan.native = None  # the same call launched through ctypes (the fast path without its C part)
        rows.append(("  the same, ctypes launch", per_call(lambda: fn(x, y, out), options.calls, options.repeats)))
        plan.native = native
        rows.append(("torch.add(a, b, out=c)", per_call(lambda: torch.add(x, y, out=out), options.calls,
                                                         options.repeats)))
        op = schedc_torch.custom_op(fn, "schedc_bench::add")  # functional: allocates its output
        compiled = torch.compile(lambda p, q: op(p, q), fullgraph=True)
        assert torch.equal(compiled(x, y), x + y), "the compiled operator is wrong"
        rows += [("torch.ops op(a, b) (allocates c)", per_call(lambda: op(x, y), options.calls, options.repeats)),
                 ("torch.add(a, b) (allocates c)", per_call(lambda: torch.add(x, y), options.calls, options.repeats)),
                 ("op inside torch.compile", per_call(lambda: compiled(x, y), options.calls, options.repeats))]
        compiled_add = torch.compile(lambda p, q: torch.add(p, q), fullgraph=True)
        rows.append(("torch.add inside torch.compile", per_call(lambda: compiled_add(x, y), options.calls,
                                                                 options.repeats)))
        rows += chained(op, x, y, options)
        for label, inductor in INDUCTOR:
            try:
                rows += [(f"  the same, {label}", chained(op, x, y, options, inductor=inductor)[0][1])]
            except Exception as error:  # noqa: BLE001 - an inductor mode this torch lacks is a row's note
                print(f"{label}: {type(error).__name__}: {str(error)[:300]}")
        python_op = schedc_torch.custom_op(fn, "schedc_bench::add_python", native=False)
        rows += [(f"  the same, the op's kernel in Python, {name.strip().removeprefix('op ')}", us)
                 for name, us in chained(python_op, x, y, options)[:1]]
        rows += [(f"torch.add, {name.strip().removeprefix('op ')}", us)
                 for name, us in chained(torch.add, x, y, options)]
        rows += gemm_rows(Path(directory) / "gemm", options)
        rows += graphed(fn, x, y, out, options)
        rows += floor(x, y, options)
        triton = triton_add()
        if triton is not None:
            rows.append(("Triton add[grid](a, b, c, n)", per_call(lambda: triton(x, y, out), options.calls,
                                                                  options.repeats)))
        print(f"{torch.cuda.get_device_name()}: wall time per call, median of {options.repeats} x {options.calls}"
              f" (C launch: {'yes' if native is not None else 'no, ' + schedc_native.reason()};"
              f" the op's kernel: {schedc_torch.kernel_of('schedc_bench::add')})")
        for name, us in rows:
            print(f"  {name:<32} {us:8.2f} us")
        if options.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(options.calls):
                fn(x, y, out)
            profiler.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
            compiled_chain = torch.compile(chain(op, 8), fullgraph=True)
            compiled_chain(x, y)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(options.calls // 8):
                compiled_chain(x, y)
            profiler.disable()
            torch.cuda.synchronize()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
            print(text.getvalue())


if __name__ == "__main__":
    main()
