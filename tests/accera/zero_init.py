"""Accera's tensor tutorial with the accumulator set to 0 before the first product (C = A @ B)."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, _, k = gen.tensorize_plan(target, prologue_op=acc.MMAFragmentOp.SET, prologue_arg=0.0)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)
gen.build(plan, A, B, C, "zero_init")
