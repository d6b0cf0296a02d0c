"""Accera's Reference (Plan/cache.md): a cache at an index bound to blocks. Each block keeps its
own part of the footprint of the loops at and inside the index (the block's rows of A, its
columns of B, over all of k), filled once before the serial loops."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
schedule, A, B, C = gen.create_matmul_schedule(16, 16)
i, ii, j, jj, k = schedule.get_indices()
schedule.reorder(i, j, ii, jj, k)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
           ii: target.GridUnit.THREAD_Y, jj: target.GridUnit.THREAD_X})
plan.cache(A, index=i, location=target.MemorySpace.SHARED)
plan.cache(B, index=j, location=target.MemorySpace.SHARED)
gen.build(plan, A, B, C, "block_bound_cache")
