"""Accera's multi-pass tensorization: 4 passes of the MMA shape per tile, fused 2 at a time."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, kk, _ = gen.tensorize_plan(target, num_total_passes=4, num_fused_passes=2)
plan.cache(A, index=kk, location=target.MemorySpace.SHARED)
plan.cache(B, index=kk, location=target.MemorySpace.SHARED)
gen.build(plan, A, B, C, "multi_pass")
