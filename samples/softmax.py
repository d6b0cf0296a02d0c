"""Row softmax, Y[i, :] = exp(X[i, :] - max) / sum, in one kernel of five fused nests.

Each row is a block: ``acc.fuse`` of five nests over the rows (``partial=1``) runs, at each row,
the initialisation of the row's maximum and sum (TEMP arrays: ``mx = -inf``, ``sm = 0``), the
maximum (``mx = acc.max(mx, X)``), the sum of exponentials (``sm += exp(X - mx)``), its
reciprocal and the normalisation, in turn. Each part runs its own loop over the row on the block's threads
(THREAD_X, 128 to 1024 of them): the maximum and the sum are reductions across threads (each
thread's partial, warp shuffles, one shared element a warp), a barrier separates the parts, and
the first part runs on the row's first thread. The row itself is copied into shared memory once
(``plan.cache(X, index=ii, ...)`` at the one-row loop outside the fusing index, 16 bytes a
copy), so the three parts read X from there; the arithmetic is float32. The row's maximum and
sum are cached there too: scratch tiles that never reach global memory.

- ``softmax_<type>_<M>x<N>``: float16 and float32 rows of 4096 (8192 rows, 128 threads) and of
  32768 (4096 rows; 512 threads for float16, three 64 KB rows a multiprocessor, and 1024 for
  float32, one 128 KB row);
  ``benchmarks/softmax.py`` times them against ``torch.softmax``;
- ``softmax_fast_<type>_<M>x<N>``: the same with ``acc.fast_exp`` (the kernels are bound by
  instructions an element, not by memory).

Both forms take the reciprocal of the row's sum once (a fifth nest, on the row's first thread) and
multiply by it: a division an element costs as many instructions as the exponential.
"""

import math

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
F32 = acc.ScalarType.float32


def softmax(M: int, N: int, dtype=acc.ScalarType.float16, threads: int = 128, cache: bool = True,
            fast: bool = False, keep: bool = False, scratch: bool = True):
    """The plan and its arrays (X, Y). ``fast``: ``acc.fast_exp`` (CUDA's ``__expf``) for fewer
    instructions an element. ``keep``: the exponentials are computed once, into a TEMP row ``E``
    cached in shared memory at the row's loop (a scratch tile: written before it is read, so it
    has no global memory), and the sum and the output read them there (a sixth nest): no faster
    on the H200 (BENCHMARKS.md), and slower where the row of float32 exponentials leaves room for
    one block a multiprocessor. ``scratch`` (the default): the row's maximum and sum (TEMP arrays)
    in shared memory, cached at the row's loop: each row sets them before it reads them, so they
    are scratch tiles and the function has no workspace (it takes the C launch and the C++ torch
    operator); ``scratch=False``: they are workspaces in global memory."""
    X = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))
    mx = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,))
    sm = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,))
    E = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M, N))
    exp = acc.fast_exp if fast else acc.exp

    init = acc.Nest(shape=(M,))
    i0, = init.get_indices()

    @init.iteration_logic
    def _():
        mx[i0] = -math.inf
        sm[i0] = 0.0

    peak = acc.Nest(shape=(M, N))
    i1, j1 = peak.get_indices()

    @peak.iteration_logic
    def _():
        mx[i1] = acc.max(mx[i1], acc.cast(X[i1, j1], F32))

    exponentials = acc.Nest(shape=(M, N))
    i5, j5 = exponentials.get_indices()

    @exponentials.iteration_logic
    def _():
        E[i5, j5] = exp(acc.cast(X[i5, j5], F32) - mx[i5])

    def exponential(i, j):
        return E[i, j] if keep else exp(acc.cast(X[i, j], F32) - mx[i])

    total = acc.Nest(shape=(M, N))
    i2, j2 = total.get_indices()

    @total.iteration_logic
    def _():
        sm[i2] += exponential(i2, j2)

    inverse = acc.Nest(shape=(M,))
    i4, = inverse.get_indices()

    @inverse.iteration_logic
    def _():
        sm[i4] = 1.0 / sm[i4]

    scaled = acc.Nest(shape=(M, N))
    i3, j3 = scaled.get_indices()

    @scaled.iteration_logic
    def _():
        Y[i3, j3] = acc.cast(exponential(i3, j3) * sm[i3], dtype)

    nests = (init, peak, *((exponentials,) if keep else ()), total, inverse, scaled)
    schedule = acc.fuse(tuple(n.create_schedule() for n in nests), partial=1)
    f, i, *rows = schedule.get_indices()  # a loop over the row's columns for each nest but init and inverse
    ii = schedule.split(i, 1)  # one row: the loop its shared copy sits at
    on_threads = [schedule.split(j, threads) for j in rows]
    schedule.reorder(i, ii, f, *(loop for pair in zip(rows, on_threads) for loop in pair))
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, **dict.fromkeys(on_threads, target.GridUnit.THREAD_X)})
    if cache:
        plan.cache(X, index=ii, location=target.MemorySpace.SHARED)
    for array, wanted in ((E, keep), (mx, scratch), (sm, scratch)):
        if wanted:
            plan.cache(array, index=ii, location=target.MemorySpace.SHARED)
    return plan, (X, Y)


# rows, columns, threads a row: a float32 row of 32768 fills 128 KB of shared memory, one block a
# multiprocessor, so it takes 1024 threads; three float16 rows of 64 KB fit, 512 threads each
SHAPES = {"fp16": ((8192, 4096, 128), (4096, 32768, 512)), "fp32": ((8192, 4096, 128), (4096, 32768, 1024))}

if __name__ == "__main__":
    package = acc.Package()
    for dtype, name in ((acc.ScalarType.float16, "fp16"), (F32, "fp32")):
        for M, N, threads in SHAPES[name]:
            package.add(*softmax(M, N, dtype, threads), base_name=f"softmax_{name}_{M}x{N}")
            package.add(*softmax(M, N, dtype, threads, fast=True), base_name=f"softmax_fast_{name}_{M}x{N}")
    package.build("softmax", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/softmax")
