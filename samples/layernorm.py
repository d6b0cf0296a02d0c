"""Layer normalisation of rows, Y = (X - mean) / sqrt(var + eps) * gamma + beta, in one kernel.

Nests fused over the rows (``acc.fuse(..., partial=1)``), as ``samples/softmax.py`` runs them:
the row's sums set to zero (TEMP arrays); the sums (reductions across the block's threads,
THREAD_X); the mean and the reciprocal standard deviation (once a row, on its first thread); the
normalised row scaled by ``gamma`` and shifted by ``beta`` (per column). The row comes into
shared memory once; the arithmetic is float32. The sums take one pass over the row or two:

- one (``one_pass=True``): the sums of ``d = X[i, j] - X[i, 0]`` and of ``d * d`` in one nest, two
  reductions across threads side by side; the variance is E[d^2] - E[d]^2, which does not cancel
  where the row's mean is large beside its spread (the shift is one of the row's own values);
- two: the sum of X, then the sum of squared deviations from the mean.

- ``layernorm_fp16_8192x4096``: float16 X, Y, gamma and beta, one pass;
  ``layernorm_two_pass_fp16_8192x4096`` the same in two (``benchmarks/softmax.py`` times them
  against ``torch.nn.functional.layer_norm``).
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
F32 = acc.ScalarType.float32


def layernorm(M: int, N: int, dtype=acc.ScalarType.float16, threads: int = 256, eps: float = 1e-5,
              one_pass: bool = False, scratch: bool = True):
    """The plan and its arrays (X, gamma, beta, Y). ``one_pass``: the sums of the row's values and
    of their squares in one pass (two reductions across threads in one nest), each value taken
    from the row's first, ``d = X[i, j] - X[i, 0]`` (the shifted-data form: the variance
    E[d^2] - E[d]^2 does not cancel where the mean is large beside the deviations), instead of a
    second pass over the deviations from the mean: one pass over the row fewer. ``scratch`` (the
    default): the row's sums (TEMP arrays) in shared memory, cached at the row's loop: each row
    sets them before it reads them, so they are scratch tiles and the function has no workspace
    (it takes the C launch and the C++ torch operator); ``scratch=False``: they are workspaces in
    global memory."""
    X = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    gamma = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N,))
    beta = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N,))
    Y = acc.Array(role=acc.Role.OUTPUT, element_type=dtype, shape=(M, N))
    total = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,))
    squares = acc.Array(role=acc.Role.TEMP, element_type=F32, shape=(M,))

    init = acc.Nest(shape=(M,))
    i0, = init.get_indices()

    @init.iteration_logic
    def _():
        total[i0] = 0.0
        squares[i0] = 0.0

    sums = acc.Nest(shape=(M, N))
    i1, j1 = sums.get_indices()

    @sums.iteration_logic
    def _():
        if one_pass:
            d = acc.cast(X[i1, j1], F32) - acc.cast(X[i1, 0], F32)
            total[i1] += d
            squares[i1] += d * d
        else:
            total[i1] += acc.cast(X[i1, j1], F32)

    deviations = acc.Nest(shape=(M, N))
    i2, j2 = deviations.get_indices()

    @deviations.iteration_logic
    def _():
        d = acc.cast(X[i2, j2], F32) - total[i2] * (1.0 / N)
        squares[i2] += d * d

    inverse = acc.Nest(shape=(M,))
    i4, = inverse.get_indices()

    @inverse.iteration_logic
    def _():  # the row's mean and 1 / standard deviation, once a row
        if one_pass:  # total and squares: of the values less the row's first
            shift = total[i4] * (1.0 / N)
            squares[i4] = 1.0 / acc.sqrt(acc.max(squares[i4] * (1.0 / N) - shift * shift, 0.0) + eps)
            total[i4] = shift + acc.cast(X[i4, 0], F32)
        else:
            total[i4] = total[i4] * (1.0 / N)
            squares[i4] = 1.0 / acc.sqrt(squares[i4] * (1.0 / N) + eps)

    scaled = acc.Nest(shape=(M, N))
    i3, j3 = scaled.get_indices()

    @scaled.iteration_logic
    def _():
        y = (acc.cast(X[i3, j3], F32) - total[i3]) * squares[i3] * acc.cast(gamma[j3], F32) + acc.cast(beta[j3], F32)
        Y[i3, j3] = acc.cast(y, dtype)

    nests = (init, sums, *(() if one_pass else (deviations,)), inverse, scaled)
    schedule = acc.fuse(tuple(n.create_schedule() for n in nests), partial=1)
    f, i, *rows = schedule.get_indices()
    ii = schedule.split(i, 1)  # one row: the loop its shared copy sits at
    parts = [schedule.split(j, threads) for j in rows]
    schedule.reorder(i, ii, f, *(index for pair in zip(rows, parts) for index in pair))
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, **{t: target.GridUnit.THREAD_X for t in parts}})
    plan.cache(X, index=ii, location=target.MemorySpace.SHARED)
    if scratch:
        for sums_of_row in (total, squares):
            plan.cache(sums_of_row, index=ii, location=target.MemorySpace.SHARED)
    return plan, (X, gamma, beta, Y)


if __name__ == "__main__":
    package = acc.Package()
    package.add(*layernorm(8192, 4096, one_pass=True), base_name="layernorm_fp16_8192x4096")
    package.add(*layernorm(8192, 4096), base_name="layernorm_two_pass_fp16_8192x4096")
    package.build("layernorm", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/layernorm")
