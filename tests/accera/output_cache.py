"""Accera's input and output caching: double-buffered A and B, C kept in MMA fragments across k."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, kk, k = gen.tensorize_plan(target)
for array in (A, B):
    plan.cache(array, index=kk, location=target.MemorySpace.SHARED, double_buffer=True,
               double_buffer_location=acc.Constants.AUTO)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)
gen.build(plan, A, B, C, "output_cache")
