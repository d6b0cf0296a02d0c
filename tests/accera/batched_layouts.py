"""Accera's smoke test "cache different input layouts" (test_gpu_cache_different_input_layouts),
at smaller sizes: batched products C[b] += A[b] @ B[b] with A row-major and B column-major
(LAST_MAJOR over (S, K, N): its batch dimension is the contiguous one), both cached in shared
memory at ii in FIRST_MAJOR tiles. B's tile (1 x 32 x 16, a 2-D transpose in disguise: its unit
dimension is B's contiguous one) is copied one slice of its last two dimensions at a time, element
by element, into row-major rows."""
import schedc as acc

S, M, N, K = 4, 256, 192, 1024
A = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(S, M, K), layout=acc.Array.Layout.FIRST_MAJOR)
B = acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(S, K, N), layout=acc.Array.Layout.LAST_MAJOR)
C = acc.Array(role=acc.Role.INPUT_OUTPUT, element_type=acc.ScalarType.float32, shape=(S, M, N),
              layout=acc.Array.Layout.FIRST_MAJOR)

nest = acc.Nest(shape=(S, M, N, K))
b, i, j, k = nest.get_indices()


@nest.iteration_logic
def _():
    C[b, i, j] += A[b, i, k] * B[b, k, j]


schedule = nest.create_schedule()
ii, jj, kk = schedule.tile({i: 16, j: 16, k: 512})
kkk = schedule.split(kk, 32)
schedule.reorder(b, i, j, k, kk, ii, jj, kkk)

target = acc.Target(category=acc.Target.Category.GPU, runtime=acc.Target.Runtime.CUDA)
plan = schedule.create_plan(target=target)
plan.bind(mapping={i: target.GridUnit.BLOCK_X, j: target.GridUnit.BLOCK_Y, ii: target.GridUnit.THREAD_X,
                   jj: target.GridUnit.THREAD_Y})
plan.cache(A, index=ii, location=acc.MemorySpace.SHARED, layout=acc.Array.Layout.FIRST_MAJOR)
plan.cache(B, index=ii, location=acc.MemorySpace.SHARED, layout=acc.Array.Layout.FIRST_MAJOR)

package = acc.Package()
package.add(plan, args=(A, B, C), base_name="batched_layouts")
package.build("batched_layouts", format=acc.Package.Format.HAT_SOURCE, output_dir="build", _quiet=True)
