"""Accera's manual, section 4 (partial fusing): a fully-connected layer with ReLU, C = relu(C + A @ B),
two nests fused over their first two dimensions, the ReLU after each element's last product
(``reorder(i, j, f, k0)``), on a GPU: rows on blocks, columns on threads."""
import schedc as acc

A = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float32, shape=(64, 32))
B = acc.Array(role=acc.Array.Role.INPUT, element_type=acc.ScalarType.float32, shape=(32, 48))
C = acc.Array(role=acc.Array.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(64, 48))

nest0 = acc.Nest(shape=(64, 48, 32))
i0, j0, k0 = nest0.get_indices()


@nest0.iteration_logic
def _():
    C[i0, j0] += A[i0, k0] * B[k0, j0]


schedule0 = nest0.create_schedule()

nest1 = acc.Nest(shape=(64, 48))
i1, j1 = nest1.get_indices()


@nest1.iteration_logic
def _():
    C[i1, j1] = acc.max(C[i1, j1], 0.0)


schedule1 = nest1.create_schedule()

schedule = acc.fuse((schedule0, schedule1), partial=2)
f, i, j, k0 = schedule.get_indices()
schedule.reorder(i, j, f, k0)

target = acc.Target(acc.Target.Model.NVIDIA_A100)
plan = schedule.create_plan(target)
plan.bind({i: target.GridUnit.BLOCK_X, j: target.GridUnit.THREAD_X})

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="fused_relu")
package.build("fused_relu", format=acc.Package.Format.HAT_SOURCE, output_dir="build")
