"""The kernel Accera's GEMM benchmarker generates for each variant, in its style: blocks of
64x64 tiles split by 32 values of k, warps on ii/jj with a thread coarsening of 2x2 (each warp
computes 2x2 tiles of C, the loops iii/jjj outside kk as the benchmarker orders them), the plan
made by Accera's ``_create_tensorizable_plan``, C kept in fragments across k, A and B cached at
ii (B unvectorized, both double-buffered), a branch-free ReLU epilogue, and the launch checked
with ``_calc_block_grid_dim`` before the package is built."""
import matmul_generator as gen

import schedc as acc

target = acc.Target(acc.Target.Model.NVIDIA_H100)  # the benchmarker takes the target as an argument
M, N, K = 256, 256, 128
A = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(M, K))
B = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float16, shape=(K, N))
C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

nest = acc.Nest(shape=(M, N, K))
i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[i, j] += A[i, k] * B[k, j]


schedule = nest.create_schedule()
ii, jj, kk = schedule.tile({i: 64, j: 64, k: 32})
mma_shape = acc.MMAShape.M16xN16xK16_B1
tensor_splits = target.tensor_core_info.compute_tensor_splits(mma_shape, 1)
coarsening = (2, 2)
iii, jjj = schedule.tile({ii: tensor_splits[0] * coarsening[0], jj: tensor_splits[1] * coarsening[1]})
iiii, jjjj, kkk = schedule.tile({iii: tensor_splits[0], jjj: tensor_splits[1], kk: tensor_splits[2]})
outer_nest_order = (i, j, k, ii, jj, iii, jjj, kk)
plan, tensor_indices = schedule._create_tensorizable_plan(
    target, block_indices=(i, j), warp_indices=(ii, jj), tensor_indices=(iiii, jjjj, kkk),
    outer_nest_order=outer_nest_order, dynamic_shared_memory_size=0)
plan.tensorize(indices=tensor_indices, mma_shape=mma_shape, num_total_passes=1, use_static_offsets=False,
               num_fused_passes=1, scheduling_policy=acc.MMASchedulingPolicy.PASS_ORDER,
               epilogue_op=acc.MMAFragmentOp.ReLU_NoConditional)
plan.cache(A, index=ii, double_buffer=True, double_buffer_location=acc.Constants.AUTO, vectorize=True,
           location=target.MemorySpace.SHARED, layout=acc.Array.Layout.FIRST_MAJOR, _shared_memory_offset=None)
plan.cache(B, index=ii, double_buffer=True, double_buffer_location=acc.Constants.AUTO, vectorize=False,
           location=target.MemorySpace.SHARED, layout=acc.Array.Layout.FIRST_MAJOR, _shared_memory_offset=None)
plan.cache(C, index=k, location=target.MemorySpace.MMA_FRAGMENT)

block_dims, grid_dims = plan._calc_block_grid_dim()
assert (block_dims, grid_dims) == ([64, 2, 1], [4, 4, 1]), (block_dims, grid_dims)  # 2x2 warps; 4x4 blocks
assert plan._is_valid_block_dim(block_dims) and plan._is_valid_block_size(block_dims)
gen.build(plan, A, B, C, "gemm_benchmarker")
