"""A tensor-core plan whose caches sit at the warp-bound index (Accera's test suite): the
block's tiles of A and B for each step of k, in a 3-stage cp.async ring along k."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
schedule, A, B, C = gen.create_matmul_schedule(64, 64, element_type=acc.ScalarType.float16)
i, ii, j, jj, k = schedule.get_indices()
mma_shape = acc.MMAShape.M16xN16xK16_B1
kk = schedule.split(k, 32)
iii, jjj, kkk = schedule.tile({ii: 16, jj: 16, kk: 16})
schedule.reorder(i, j, k, ii, jj, kk, iii, jjj, kkk)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
plan.tensorize(indices=(iii, jjj, kkk), mma_shape=mma_shape)
plan.cache(A, index=ii, location=target.MemorySpace.SHARED, stages=3)
plan.cache(B, index=ii, location=target.MemorySpace.SHARED, stages=3)
gen.build(plan, A, B, C, "warp_bound_cache")
