"""Accera's test-suite pattern: caches at indices bound to threads (the block's tile of A and B
for each step of k, filled just inside k and double-buffered along it; each thread's element of
C in a register across kk), named by index, level and max_elements; the older
tile(indices, sizes) and bind(indices, grid=) forms."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)
schedule, A, B, C = gen.create_matmul_schedule(16, 16)
i, ii, j, jj, k = schedule.get_indices()
(kk,) = schedule.tile((k,), (16,))
schedule.reorder(i, j, k, ii, jj, kk)
plan = schedule.create_plan(target, _dynamic_shared_memory_size=8192)
plan.bind((i, j, ii, jj), grid=(target.GridUnit.BLOCK_Y, target.GridUnit.BLOCK_X,
                                target.GridUnit.THREAD_Y, target.GridUnit.THREAD_X))
plan.cache(A, index=ii, location=target.MemorySpace.SHARED, double_buffer=True)
plan.cache(B, max_elements=256, location=target.MemorySpace.SHARED, double_buffer=True)
plan.cache(C, index=jj, location=target.MemorySpace.PRIVATE)
gen.build(plan, A, B, C, "thread_bound_cache")
