"""Caches whose layout is not their array's (the cache_layouts of Accera's GPU tests and of its
GPU benchmark generator): shared tiles stored column-major (LAST_MAJOR) from row-major arrays
and the reverse, in a tensor-core plan with caches at the warp-bound index and a SIMT plan with
caches at the thread-bound one, sequential and double-buffered."""
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
FIRST, LAST = acc.Array.Layout.FIRST_MAJOR, acc.Array.Layout.LAST_MAJOR
M, N, K = 96, 64, 80


def arrays(element_type, array_layouts):
    A = acc.Array(role=acc.Array.Role.INPUT, element_type=element_type, shape=(M, K), layout=array_layouts[0])
    B = acc.Array(role=acc.Array.Role.INPUT, element_type=element_type, shape=(K, N), layout=array_layouts[1])
    C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))
    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    return nest, A, B, C


def tensor_plan(cache_layouts, array_layouts=(FIRST, FIRST), double_buffer=False):
    nest, A, B, C = arrays(acc.ScalarType.float16, array_layouts)
    i, j, k = nest.get_indices()
    schedule = nest.create_schedule()
    ii, jj, kk = schedule.split(i, 32), schedule.split(j, 32), schedule.split(k, 16)
    iii, jjj, kkk = schedule.tile({ii: 16, jj: 16, kk: 16})
    schedule.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
    for array, layout in zip((A, B), cache_layouts):
        plan.cache(array, index=ii, double_buffer=double_buffer, location=target.MemorySpace.SHARED, layout=layout)
    return plan, (A, B, C)


def simt_plan(cache_layouts, double_buffer=False):
    nest, A, B, C = arrays(acc.ScalarType.float32, (FIRST, FIRST))
    i, j, k = nest.get_indices()
    schedule = nest.create_schedule()
    ii, jj, kk = schedule.split(i, 16), schedule.split(j, 16), schedule.split(k, 16)
    schedule.reorder(i, j, k, ii, jj, kk)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               ii: target.GridUnit.THREAD_Y, jj: target.GridUnit.THREAD_X})
    for array, layout in zip((A, B), cache_layouts):
        plan.cache(array, index=ii, double_buffer=double_buffer, location=target.MemorySpace.SHARED, layout=layout)
    return plan, (A, B, C)


package = acc.Package()
package.add(*tensor_plan((FIRST, LAST)), base_name="tensor_b_transposed")
package.add(*tensor_plan((LAST, LAST), double_buffer=True), base_name="tensor_both_transposed_double_buffer")
package.add(*tensor_plan((FIRST, FIRST), array_layouts=(LAST, FIRST)), base_name="tensor_a_column_major_cached_rows")
package.add(*simt_plan((LAST, LAST)), base_name="simt_both_transposed")
package.add(*simt_plan((FIRST, LAST), double_buffer=True), base_name="simt_b_transposed_double_buffer")
package.build("cache_layouts", format=acc.Package.Format.HAT_SOURCE, output_dir="build", _quiet=True)
