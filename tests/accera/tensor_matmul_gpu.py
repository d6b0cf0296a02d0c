"""Accera's Tensor MatMul GPU tutorial (tf32 tensor cores for float32 arrays on NVIDIA)."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan, A, B, C, _, _ = gen.tensorize_plan(target)
gen.build(plan, A, B, C, "tensor_matmul_gpu")
