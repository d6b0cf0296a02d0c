"""Accera's scheduling policy: each warp computes 2x2 tiles (register blocking) in 2 passes,
tile by tile (BLOCK_ORDER)."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(category=acc.Target.Category.GPU, runtime=acc.Target.Runtime.CUDA,
                    known_name=acc.Target.Model.NVIDIA_H100)
schedule, A, B, C = gen.create_matmul_schedule(64, 64, element_type=acc.ScalarType.float16)
i, ii, j, jj, k = schedule.get_indices()
mma_shape = acc.MMAShape.M16xN16xK16_B1
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
gen.build(plan, A, B, C, "scheduling_policy")
