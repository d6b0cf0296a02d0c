"""Accera's parameters on a GPU plan: the block tile, the k step, the cache's index and the loop
order are parameters; a grid of them, pruned by ``filter_func``, gives one function per point
(named ``matmul_<16 hex digits>`` as Accera names them)."""
import schedc as acc

M, N, K = 256, 128, 256
P_BLOCK_M, P_BLOCK_N, P_K_STEP, P_CACHE_INDEX, P_ORDER = acc.create_parameters()

A = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, K))
B = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(K, N))
C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


target = acc.Target(acc.Target.Model.NVIDIA_A100)
schedule = nest.create_schedule()
ii, jj, kk = schedule.tile({i: P_BLOCK_M, j: P_BLOCK_N, k: P_K_STEP})
iii, jjj, kkk = schedule.tile({ii: 16, jj: 16, kk: 16})
schedule.reorder(P_ORDER)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
plan.tensorize(indices=(iii, jjj, kkk), mma_shape=acc.MMAShape.M16xN16xK16_B1)
plan.cache(A, index=P_CACHE_INDEX, location=target.MemorySpace.SHARED)
plan.cache(B, index=P_CACHE_INDEX, location=target.MemorySpace.SHARED)

orders = [(i, j, k, ii, jj, kk, iii, jjj, kkk), (i, j, ii, jj, k, kk, iii, jjj, kkk)]
parameters = acc.create_parameter_grid(
    {P_BLOCK_M: [32, 64], P_BLOCK_N: [32, 64], P_K_STEP: [32, 64], P_CACHE_INDEX: [k, kk], P_ORDER: orders},
    # the warps' block is at most 16 warps, and the caches sit inside the loops bound to warps
    filter_func=lambda m, n, step, index, order: m * n // 256 <= 16 and (index is kk or order is orders[0]),
    sample=6, seed=1)

package = acc.Package()
functions = package.add(plan, args=(A, B, C), base_name="matmul", parameters=parameters)
assert len(functions) == len(parameters) == 6
package.build("parameter_grid", format=acc.Package.Format.HAT_SOURCE, output_dir="build")
