"""Accera's scheduling policy: each warp computes 2x2 tiles (register blocking) in 2 passes,
tile by tile (BLOCK_ORDER)."""
import schedc as acc

M, N, K = 128, 128, 128
target = acc.Target(category=acc.Target.Category.GPU, runtime=acc.Target.Runtime.CUDA,
                    known_name=acc.Target.Model.NVIDIA_H100)
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
ii, jj = schedule.tile({i: 64, j: 64})
kk = schedule.split(k, 32)
iii, jjj = schedule.tile({ii: 32, jj: 32})
m, n, k_tile = target.tensor_core_info.compute_tensor_splits(mma_shape, num_total_passes=2)
iiii, jjjj, kkk = schedule.tile({iii: m, jjj: n, kk: k_tile})
schedule.reorder(i, j, k, ii, jj, kk, iii, jjj, iiii, jjjj, kkk)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
plan.tensorize(indices=(iiii, jjjj, kkk), mma_shape=mma_shape, num_total_passes=2,
               scheduling_policy=acc.MMASchedulingPolicy.BLOCK_ORDER)
plan.cache(A, index=kk, location=target.MemorySpace.SHARED)
plan.cache(B, index=kk, location=target.MemorySpace.SHARED)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)
package = acc.Package()
package.add(plan, args=(A, B, C), base_name="scheduling_policy")
package.build("scheduling_policy", format=acc.Package.Format.HAT_SOURCE, output_dir="build")
