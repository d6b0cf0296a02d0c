"""The matmul schedule Accera's GPU tutorials start from (its hello-matmul generator), in
Accera's style: ``import schedc as acc`` is the only change besides the target."""

import schedc as acc

M, N, K = 256, 128, 256


def create_matmul_schedule(block_x: int = 32, block_y: int = 32, element_type=acc.ScalarType.float32):
    A = acc.Array(role=acc.Array.Role.INPUT, element_type=element_type, shape=(M, K))
    B = acc.Array(role=acc.Array.Role.INPUT, element_type=element_type, shape=(K, N))
    C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(M, N))

    nest = acc.Nest(shape=(M, N, K))
    i, j, k = nest.get_indices()

    @nest.iteration_logic
    def _():
        C[i, j] += A[i, k] * B[k, j]

    schedule = nest.create_schedule()
    schedule.split(i, block_x)
    schedule.split(j, block_y)
    return schedule, A, B, C


def tensorize_plan(target, mma_shape=acc.MMAShape.M16xN16xK8_B1, num_total_passes=1, num_fused_passes=None,
                   k_split=64, **tensorize_options):
    """The tensor tutorials' plan: blocks of 32x32, a k split for caching, warps on ii/jj and the
    tensor splits innermost; returns (plan, A, B, C, kk, k)."""
    schedule, A, B, C = create_matmul_schedule()
    i, ii, j, jj, k = schedule.get_indices()
    kk = schedule.split(k, k_split)
    m, n, kt = target.tensor_core_info.compute_tensor_splits(mma_shape, num_total_passes=num_total_passes)
    iii, jjj, kkk = schedule.tile({ii: m, jj: n, kk: kt})
    schedule.reorder(i, j, k, kk, ii, jj, iii, jjj, kkk)
    plan = schedule.create_plan(target)
    plan.bind({i: target.GridUnit.BLOCK_Y, j: target.GridUnit.BLOCK_X,
               ii: target.GridUnit.WARP_Y, jj: target.GridUnit.WARP_X})
    plan.tensorize(indices=(iii, jjj, kkk), mma_shape=mma_shape, num_total_passes=num_total_passes,
                   num_fused_passes=num_fused_passes, **tensorize_options)
    return plan, A, B, C, kk, k


def build(plan, A, B, C, name):
    package = acc.Package()
    package.add(plan, args=(A, B, C), base_name=name)
    package.build(name, format=acc.Package.Format.HAT_SOURCE | acc.Package.Format.MLIR, output_dir="build",
                  fail_on_error=True, _quiet=True)
