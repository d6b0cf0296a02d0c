"""Accera's Hello MatMul GPU tutorial: one thread per element of C."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_A100)
schedule, A, B, C = gen.create_matmul_schedule(16, 16)
i, ii, j, jj, k = schedule.get_indices()
schedule.reorder(i, j, ii, jj, k)
plan = schedule.create_plan(target)
plan.bind(mapping={i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
                   ii: target.GridUnit.THREAD_Y, jj: target.GridUnit.THREAD_X})
gen.build(plan, A, B, C, "hello_matmul_gpu")
