"""Accera's double-buffered input caching (the next tile staged in registers)."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, kk, _ = gen.tensorize_plan(target)
for array in (A, B):
    plan.cache(array, index=kk, location=target.MemorySpace.SHARED, double_buffer=True,
               double_buffer_location=target.MemorySpace.PRIVATE)
gen.build(plan, A, B, C, "double_buffer")
