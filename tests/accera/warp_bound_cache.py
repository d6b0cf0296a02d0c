"""A tensor-core plan whose caches sit at the warp-bound index (Accera's test suite): the
block's tiles of A and B for each step of k, in a 3-stage cp.async ring along k."""
import schedc as acc

M, N, K = 128, 128, 256
target = acc.Target(acc.Target.Model.NVIDIA_H100)
A = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, K))
B = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(K, N))
C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))
nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
mma_shape = acc.MMAShape.M16xN16xK16_B1
ii, jj, kk = schedule.tile({i: 64, j: 64, k: 32})
iii, jjj, kkk = schedule.tile({ii: 16, jj: 16, kk: 16})
schedule.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
plan.tensorize(indices=(iii, jjj, kkk), mma_shape=mma_shape)
plan.cache(A, index=ii, location=target.MemorySpace.SHARED, stages=3)
plan.cache(B, index=ii, location=target.MemorySpace.SHARED, stages=3)
package = acc.Package()
package.add(plan, args=(A, B, C), base_name="warp_bound_cache")
package.build("warp_bound_cache", format=acc.Package.Format.HAT_SOURCE, output_dir="build")
