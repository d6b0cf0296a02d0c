"""Accera's test-suite pattern (smoke test "cache block level shared mem"): C cached in shared
memory at the block-bound j. Each block fills its 16 x 16 tile of C before the k loops, its
threads accumulate into the tile, and after the loops the block writes the tile back; the
sizes leave partial tiles at the edges (their elements past C are neither read nor written)."""
import schedc as acc

M, N, K = 72, 40, 96
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(M, K))
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(K, N), layout=acc.Array.Layout.LAST_MAJOR)
C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
ii, jj, kk = schedule.tile({i: 16, j: 16, k: 32})
kkk = schedule.split(kk, 8)
schedule.reorder(i, j, k, kk, ii, jj, kkk)
target = acc.Target(acc.Target.Model.NVIDIA_H100)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_X, j: target.GridUnit.BLOCK_Y,
           ii: target.GridUnit.THREAD_X, jj: target.GridUnit.THREAD_Y})
plan.cache(C, index=j, location=target.MemorySpace.SHARED, layout=acc.Array.Layout.FIRST_MAJOR)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="shared_output_cache")
package.build("shared_output_cache", format=acc.Package.Format.HAT_SOURCE, output_dir="build")
