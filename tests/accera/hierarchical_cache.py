"""Accera's hierarchical caching, the way SIMT GEMMs are built: the block's tiles of A and B in
shared memory for each step of k (double-buffered along k), each thread's column of A and row
of B copied from them into registers for each step of kk (``plan.cache(AA, ...)`` where AA is
the handle the shared cache returned), and each thread's 4x4 tile of C in registers across k."""
import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
M, N, K = 200, 136, 96
A = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, K))
B = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float32, shape=(K, N))
C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
ii, jj = schedule.split(i, 64), schedule.split(j, 64)
iii, jjj = schedule.split(ii, 4), schedule.split(jj, 4)
kk = schedule.split(k, 16)
schedule.reorder(i, j, ii, jj, k, kk, iii, jjj)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.THREAD_Y, jj: target.GridUnit.THREAD_X})
AA = plan.cache(A, index=kk, location=target.MemorySpace.SHARED, double_buffer=True)
BB = plan.cache(B, index=kk, location=target.MemorySpace.SHARED, double_buffer=True)
plan.cache(AA, index=iii, location=target.MemorySpace.PRIVATE)
plan.cache(BB, index=iii, location=target.MemorySpace.PRIVATE)
plan.cache(C, index=k, location=target.MemorySpace.PRIVATE)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="hierarchical_cache")
package.build("hierarchical_cache", format=acc.Package.Format.HAT_SOURCE, output_dir="build", _quiet=True)
