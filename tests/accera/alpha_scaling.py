"""Accera's alpha scaling: C = 2.5 * (C + A @ B), the scale applied after the last product."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, _, k = gen.tensorize_plan(target, epilogue_op=acc.MMAFragmentOp.SCALE, epilogue_arg=2.5)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)
gen.build(plan, A, B, C, "alpha_scaling")
