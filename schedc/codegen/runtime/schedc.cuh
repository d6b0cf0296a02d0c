// schedc runtime: conversions, min/max and warp-tile helpers used by generated kernels.
// Inlined into every generated .cu so that any NVRTC compiles it with the CUDA headers alone.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

namespace schedc {

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

template <typename T> struct is_16bit_float { static constexpr bool value = false; };
template <> struct is_16bit_float<__half> { static constexpr bool value = true; };
template <> struct is_16bit_float<__nv_bfloat16> { static constexpr bool value = true; };

// Value conversion with C++ semantics; 16-bit floats convert through float (exact for them),
// except from double, which rounds once.
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
    if constexpr (is_16bit_float<To>::value && !is_16bit_float<From>::value) {
        if constexpr (same_type<From, double>::value) {
            return To(static_cast<double>(x));
        } else {
            return To(static_cast<float>(x));
        }
    } else if constexpr (is_16bit_float<From>::value) {
        return static_cast<To>(static_cast<float>(x));
    } else {
        return static_cast<To>(x);
    }
}

template <typename T>
__device__ __forceinline__ T max(T a, T b) { return b > a ? b : a; }

template <typename T>
__device__ __forceinline__ T min(T a, T b) { return b < a ? b : a; }

// Round a float operand fragment to tf32, as the tensor cores expect (round to nearest).
template <typename Fragment>
__device__ __forceinline__ void to_tf32(Fragment& f) {
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) {
        f.x[t] = nvcuda::wmma::__float_to_tf32(f.x[t]);
    }
}

// Accumulator fragment element-wise operations (prologue and epilogue ops).
template <typename Fragment>
__device__ __forceinline__ void scale(Fragment& f, float factor) {
    using Element = typename Fragment::storage_element_type;
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) {
        f.x[t] = convert<Element>(convert<float>(f.x[t]) * factor);
    }
}

template <typename Fragment>
__device__ __forceinline__ void relu(Fragment& f) {
    using Element = typename Fragment::storage_element_type;
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) {
        f.x[t] = f.x[t] > Element(0) ? f.x[t] : Element(0);
    }
}

// ---- block copies: all THREADS threads of a block copy a ROWS x COLS box --------------------
// Rows are cut into vectors of VEC elements; STRIPED gives vector v to thread v % THREADS,
// otherwise each thread copies one contiguous run of vectors. ld: elements between rows.
// All sizes are compile-time constants, so each thread's loop unrolls completely.

template <int BYTES> struct vector_type;
template <> struct vector_type<1> { using type = unsigned char; };
template <> struct vector_type<2> { using type = unsigned short; };
template <> struct vector_type<4> { using type = unsigned int; };
template <> struct vector_type<8> { using type = uint2; };
template <> struct vector_type<16> { using type = uint4; };

template <int ROWS, int COLS, int VEC, int THREADS> struct box_split {
    static_assert(COLS % VEC == 0, "a row holds whole vectors");
    static constexpr int per_row = COLS / VEC;
    static constexpr int vectors = ROWS * per_row;
    static constexpr int per_thread = (vectors + THREADS - 1) / THREADS;
};

template <int ROWS, int COLS, int VEC, bool STRIPED, int THREADS>
__device__ __forceinline__ void vector_position(int thread, int n, bool& valid, int& row, int& col) {
    using split = box_split<ROWS, COLS, VEC, THREADS>;
    const int v = STRIPED ? thread + n * THREADS : thread * split::per_thread + n;
    valid = split::vectors % THREADS == 0 || v < split::vectors;
    row = v / split::per_row;
    col = (v % split::per_row) * VEC;
}

// Calls f(n, row, col) for the n-th vector of a ROWS x COLS box this thread copies (unrolled:
// for copies that keep every vector in flight, cp.async and register staging).
template <int ROWS, int COLS, int VEC, bool STRIPED, int THREADS, typename F>
__device__ __forceinline__ void for_each_vector(int thread, F&& f) {
#pragma unroll
    for (int n = 0; n < box_split<ROWS, COLS, VEC, THREADS>::per_thread; ++n) {
        bool valid; int row, col;
        vector_position<ROWS, COLS, VEC, STRIPED, THREADS>(thread, n, valid, row, col);
        if (valid) f(n, row, col);
    }
}

// A synchronous copy moves one vector per thread at a time through a register: not unrolled, so
// that the copy does not hold the whole box in registers (which costs occupancy).
// BOUNDED copies take a tile at the edge of its array: only the first rows_in rows and cols_in
// columns of the source lie inside it (cols_in a multiple of VEC); the rest of the box gets zeros.
template <typename T, int ROWS, int COLS, int VEC, bool STRIPED, int THREADS, bool BOUNDED = false>
__device__ __forceinline__ void block_copy(T* dst, int dst_ld, const T* src, int src_ld, int thread,
                                           int rows_in = ROWS, int cols_in = COLS) {
    using V = typename vector_type<VEC * sizeof(T)>::type;
#pragma unroll 1
    for (int n = 0; n < box_split<ROWS, COLS, VEC, THREADS>::per_thread; ++n) {
        bool valid; int row, col;
        vector_position<ROWS, COLS, VEC, STRIPED, THREADS>(thread, n, valid, row, col);
        if (!valid) continue;
        V* target = reinterpret_cast<V*>(dst + row * dst_ld + col);
        if (!BOUNDED || (row < rows_in && col < cols_in)) {
            *target = *reinterpret_cast<const V*>(src + row * src_ld + col);
        } else {
            *target = V{};
        }
    }
}

// The same copy with cp.async (sm_80+): global to shared without registers. The data is in
// shared memory after async_wait<N>() completes the copy's commit group. BOUNDED: vectors past
// the array are zero-filled by cp.async itself (a source size of 0 bytes reads nothing).
template <typename T, int ROWS, int COLS, int VEC, bool STRIPED, int THREADS, bool BOUNDED = false>
__device__ __forceinline__ void block_copy_async(T* dst, int dst_ld, const T* src, int src_ld, int thread,
                                                 int rows_in = ROWS, int cols_in = COLS) {
    constexpr int bytes = VEC * sizeof(T);
    static_assert(bytes == 4 || bytes == 8 || bytes == 16, "cp.async moves 4, 8 or 16 bytes");
    for_each_vector<ROWS, COLS, VEC, STRIPED, THREADS>(thread, [&](int, int row, int col) {
        const unsigned target = static_cast<unsigned>(__cvta_generic_to_shared(dst + row * dst_ld + col));
        const T* source = src + row * src_ld + col;
        if constexpr (BOUNDED) {
            const bool inside = row < rows_in && col < cols_in;
            const int size = inside ? bytes : 0;
            source = inside ? source : src;
            if constexpr (bytes == 16) {
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(target), "l"(source), "r"(size));
            } else {
                asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
                             :: "r"(target), "l"(source), "n"(bytes), "r"(size));
            }
        } else if constexpr (bytes == 16) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(target), "l"(source));
        } else {
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"(target), "l"(source), "n"(bytes));
        }
    });
}

// A block copy staged in registers (register double buffering): load() reads this thread's
// vectors of the box from global memory (zeros past rows_in / cols_in when BOUNDED), store()
// writes them to shared memory later.
template <typename T, int ROWS, int COLS, int VEC, bool STRIPED, int THREADS>
struct staged {
    using V = typename vector_type<VEC * sizeof(T)>::type;
    V v[box_split<ROWS, COLS, VEC, THREADS>::per_thread];

    template <bool BOUNDED = false>
    __device__ __forceinline__ void load(const T* src, int src_ld, int thread, int rows_in = ROWS,
                                         int cols_in = COLS) {
        for_each_vector<ROWS, COLS, VEC, STRIPED, THREADS>(thread, [&](int n, int row, int col) {
            if (!BOUNDED || (row < rows_in && col < cols_in)) {
                v[n] = *reinterpret_cast<const V*>(src + row * src_ld + col);
            } else {
                v[n] = V{};
            }
        });
    }

    __device__ __forceinline__ void store(T* dst, int dst_ld, int thread) const {
        for_each_vector<ROWS, COLS, VEC, STRIPED, THREADS>(thread, [&](int n, int row, int col) {
            *reinterpret_cast<V*>(dst + row * dst_ld + col) = v[n];
        });
    }
};

// ---- accumulator tiles at the edge of C ----------------------------------------------------
// A whole M x N tile (rows_in >= M and cols_in >= N) moves with one wmma operation; a partial
// one goes through the warp's M x N slice of scratch (shared memory), element by element, so
// that nothing outside the array is read or written. rows_in / cols_in are warp-uniform.
// STAGED sends every tile through the scratch: C's rows are not aligned for wmma in place.

template <int M, int N, typename T>
__device__ __forceinline__ int edge_offset(int e, int ld, nvcuda::wmma::layout_t layout) {
    const int row = e / N, col = e % N;
    return layout == nvcuda::wmma::mem_row_major ? row * ld + col : col * ld + row;
}

template <int M, int N, bool STAGED = false, typename T, typename Fragment>
__device__ __forceinline__ void store_edge(T* dst, const Fragment& f, int ld, nvcuda::wmma::layout_t layout,
                                           int rows_in, int cols_in, T* scratch, int thread) {
    if (!STAGED && rows_in >= M && cols_in >= N) {
        nvcuda::wmma::store_matrix_sync(dst, f, ld, layout);
        return;
    }
    T* mine = scratch + (thread / 32) * (M * N);
    nvcuda::wmma::store_matrix_sync(mine, f, N, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = thread % 32; e < M * N; e += 32) {
        if (e / N < rows_in && e % N < cols_in) dst[edge_offset<M, N, T>(e, ld, layout)] = mine[e];
    }
    __syncwarp();
}

template <int M, int N, bool STAGED = false, typename T, typename Fragment>
__device__ __forceinline__ void load_edge(Fragment& f, const T* src, int ld, nvcuda::wmma::layout_t layout,
                                          int rows_in, int cols_in, T* scratch, int thread) {
    if (!STAGED && rows_in >= M && cols_in >= N) {
        nvcuda::wmma::load_matrix_sync(f, src, ld, layout);
        return;
    }
    T* mine = scratch + (thread / 32) * (M * N);
    for (int e = thread % 32; e < M * N; e += 32) {
        const bool inside = e / N < rows_in && e % N < cols_in;
        mine[e] = inside ? src[edge_offset<M, N, T>(e, ld, layout)] : convert<T>(0.0f);
    }
    __syncwarp();
    nvcuda::wmma::load_matrix_sync(f, mine, N, nvcuda::wmma::mem_row_major);
    __syncwarp();
}

__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING)); }

}  // namespace schedc
