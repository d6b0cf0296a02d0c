"""Accera's tensor input caching: A and B tiles in shared memory for the loops inside kk."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, kk, _ = gen.tensorize_plan(target)
plan.cache(A, index=kk, location=target.MemorySpace.SHARED)
plan.cache(B, index=kk, location=target.MemorySpace.SHARED)
gen.build(plan, A, B, C, "input_cache")
