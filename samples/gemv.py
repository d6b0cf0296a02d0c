"""A matrix-vector product, y = y + A @ x, with the sum of each row across a block's threads.

The rows of A go to blocks, ``rows`` of them a block (THREAD_Y); each row's dot product is split
among the 256 threads along THREAD_X: each thread sums its columns of A in a float32 partial (A's
tile comes into shared memory through a cp.async pipeline, 16 bytes a copy), then the row's
threads combine their partials (warp shuffles, one shared element per warp) and one writes y.
The reduction across threads is what schedc proves legal here: the threads that differ only in
the summed loop meet on y's element through the combine.

- ``gemv_fp16_<M>``: float16 A (M x M), x and y, at M = 8192, 4 rows of 256 threads a block
  (cuBLAS's half gemv is ``torch.mv`` on the same tensors: ``benchmarks/gemv.py``);
  ``gemv_fp16_8192_r<rows>_t<threads>``: other shapes of the block.
"""

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)


def gemv(M: int, N: int, dtype=acc.ScalarType.float16, rows: int = 4, threads: int = 256, tile: int = 2048,
         stages: int = 3):
    """The plan and its arrays (A, x, y): ``rows`` rows a block, ``threads`` threads a row, A's
    tiles of ``rows`` x ``tile`` elements through ``stages`` shared buffers."""
    A = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(M, N))
    x = acc.Array(role=acc.Role.INPUT, element_type=dtype, shape=(N,))
    y = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=dtype, shape=(M,))

    nest = acc.Nest(shape=(M, N))
    i, j = nest.get_indices()

    @nest.iteration_logic
    def _():
        y[i] += A[i, j] * x[j]

    schedule = nest.create_schedule()
    ii = schedule.split(i, rows)
    jj = schedule.split(j, tile)
    jjj = schedule.split(jj, threads)
    schedule.reorder(i, ii, j, jj, jjj)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_X, ii: target.GridUnit.THREAD_Y, jjj: target.GridUnit.THREAD_X})
    plan.cache(A, index=jj, location=target.MemorySpace.SHARED, stages=stages)
    return plan, (A, x, y)


VARIANTS = ((4, 256, 2048), (2, 512, 4096), (8, 128, 1024), (1, 1024, 8192))  # rows, threads, tile

if __name__ == "__main__":
    package = acc.Package()
    package.add(*gemv(8192, 8192), base_name="gemv_fp16_8192")
    for rows, threads, tile in VARIANTS[1:]:
        package.add(*gemv(8192, 8192, rows=rows, threads=threads, tile=tile, stages=3 if rows * tile <= 4096 else 2),
                    base_name=f"gemv_fp16_8192_r{rows}_t{threads}")
    package.build("gemv", format=acc.Package.Format.HAT_SOURCE, output_dir="hat_packages/gemv")
