// schedc runtime: conversions, min/max, element-wise functions and warp-tile helpers used by
// generated kernels.
// Inlined into every generated .cu so that any NVRTC compiles it with the CUDA headers alone.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>

namespace schedc {

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

template <typename T> struct is_16bit_float { static constexpr bool value = false; };
template <> struct is_16bit_float<__half> { static constexpr bool value = true; };
template <> struct is_16bit_float<__nv_bfloat16> { static constexpr bool value = true; };
// 8-bit floats: stored only (no arithmetic); their conversions are explicit and saturate to the
// largest finite value (__NV_SATFINITE)
template <typename T> struct is_8bit_float { static constexpr bool value = false; };
template <> struct is_8bit_float<__nv_fp8_e4m3> { static constexpr bool value = true; };
template <> struct is_8bit_float<__nv_fp8_e5m2> { static constexpr bool value = true; };

// The range of each integer type (no standard headers under NVRTC).
template <typename T> struct int_range { static constexpr bool known = false; };
#define SCHEDC_RANGE(T, LO, HI) \
    template <> struct int_range<T> { static constexpr bool known = true; static constexpr T lo = LO, hi = HI; };
SCHEDC_RANGE(signed char, -128, 127)
SCHEDC_RANGE(unsigned char, 0, 255)
SCHEDC_RANGE(short, -32768, 32767)
SCHEDC_RANGE(unsigned short, 0, 65535)
SCHEDC_RANGE(int, -2147483647 - 1, 2147483647)
SCHEDC_RANGE(unsigned int, 0u, 4294967295u)
SCHEDC_RANGE(long long, -9223372036854775807LL - 1, 9223372036854775807LL)
SCHEDC_RANGE(unsigned long long, 0ull, 18446744073709551615ull)
#undef SCHEDC_RANGE

// A floating-point value to an integer type: toward zero, clamped to the type's range, NaN to 0
// (what cvt.rzi does; C++ leaves values out of range undefined, and a compiler may fold them).
template <typename To>
__device__ __forceinline__ To saturated(double v) {
    if (!(v == v)) return To(0);
    if (v <= static_cast<double>(int_range<To>::lo)) return int_range<To>::lo;
    if (v >= static_cast<double>(int_range<To>::hi)) return int_range<To>::hi;
    return static_cast<To>(v);
}

// Value conversion with C++ semantics, except floating point to integer, which saturates;
// 16-bit floats convert through float (exact for them), except from double, which rounds once;
// 8-bit floats convert through float, and to them from float or double, each rounding once.
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
    if constexpr (is_8bit_float<From>::value) {  // exact in float, then as from float
        return convert<To>(static_cast<float>(x));
    } else if constexpr (is_8bit_float<To>::value) {  // rounded once: from float, or from double (exact for the rest)
        if constexpr (same_type<From, float>::value) {
            return To(x);
        } else if constexpr (is_16bit_float<From>::value) {
            return To(static_cast<float>(x));
        } else {
            return To(static_cast<double>(x));
        }
    } else if constexpr (int_range<To>::known && is_16bit_float<From>::value) {
        return saturated<To>(static_cast<double>(static_cast<float>(x)));
    } else if constexpr (int_range<To>::known && (same_type<From, float>::value || same_type<From, double>::value)) {
        return saturated<To>(static_cast<double>(x));
    } else if constexpr (is_16bit_float<To>::value && !is_16bit_float<From>::value) {
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

// 8- and 16-bit integers are compared and selected as int: NVRTC 13 (sm_90) picks the wrong one of
// two shorts selected as shorts where one is a negation (min((short)-3, (short)2) gave 2).
template <typename T> struct widened { using type = T; };
template <> struct widened<signed char> { using type = int; };
template <> struct widened<unsigned char> { using type = int; };
template <> struct widened<char> { using type = int; };
template <> struct widened<short> { using type = int; };
template <> struct widened<unsigned short> { using type = int; };

template <typename T>
__host__ __device__ __forceinline__ T max(T a, T b) {
    const typename widened<T>::type x = a, y = b;
    return T(y > x ? y : x);
}

template <typename T>
__host__ __device__ __forceinline__ T min(T a, T b) {
    const typename widened<T>::type x = a, y = b;
    return T(y < x ? y : x);
}

// Reductions across threads (schedc.lower.reduce): the threads of a row of the block (the same
// threadIdx.y and .z, threadIdx.x in [0, LANES), LANES a power of two; THREADS in the block)
// combine their values and each gets the total: within a warp by shfl.xor (distance LANES/2, or
// 16, first), then across the row's warps through one shared element a warp, in warp order.
struct Plus { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct Max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return max(a, b); } };
struct Min { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return min(a, b); } };

template <int LANES, int THREADS, typename T, typename Op>
__device__ __forceinline__ T allreduce_x(T v, T* scratch, Op op) {
    constexpr int WIDTH = LANES < 32 ? LANES : 32;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    // the lanes of this warp that exist (a block of THREADS threads may end in a partial warp)
    const unsigned lanes = THREADS % 32 && t / 32 == THREADS / 32 ? (1u << (THREADS % 32)) - 1u : 0xffffffffu;
#pragma unroll
    for (int d = WIDTH / 2; d > 0; d /= 2) v = op(v, __shfl_xor_sync(lanes, v, d));
    if constexpr (LANES > 32) {
        __syncthreads();  // a combine before has read the scratch
        if (t % 32 == 0) scratch[t / 32] = v;
        __syncthreads();
        const T* row = scratch + (t / 32 - threadIdx.x / 32);
        v = row[0];
#pragma unroll
        for (int w = 1; w < LANES / 32; ++w) v = op(v, row[w]);
    }
    return v;
}

// Element-wise functions of the iteration logic (schedc.ir.functions), overloaded per element
// type: float and double call CUDA's accurate functions (fast_exp: __expf; fast_exp2 and fast_tanh:
// the ex2.approx and tanh.approx instructions, for float), 16-bit floats are
// computed in float and rounded to nearest once.
#define SCHEDC_FLOAT_FUNCTION(NAME, F32, F64)                                                       \
    __device__ __forceinline__ float NAME(float x) { return F32(x); }                             \
    __device__ __forceinline__ double NAME(double x) { return F64(x); }                           \
    __device__ __forceinline__ __half NAME(__half x) { return __float2half_rn(F32(__half2float(x))); } \
    __device__ __forceinline__ __nv_bfloat16 NAME(__nv_bfloat16 x) {                               \
        return __float2bfloat16_rn(F32(__bfloat162float(x)));                                     \
    }
__device__ __forceinline__ float fast_tanh_f(float x) {  // MUFU.TANH: relative error < 2^-10.987
#if __CUDA_ARCH__ >= 750
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return ::tanhf(x);
#endif
}
__device__ __forceinline__ float fast_exp2_f(float x) {  // MUFU.EX2: 2^x, subnormal results flushed to 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + ::expf(-x)); }
__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + ::exp(-x)); }
SCHEDC_FLOAT_FUNCTION(sqrt, ::sqrtf, ::sqrt)
SCHEDC_FLOAT_FUNCTION(exp, ::expf, ::exp)
SCHEDC_FLOAT_FUNCTION(fast_exp, ::__expf, ::exp)
SCHEDC_FLOAT_FUNCTION(fast_exp2, fast_exp2_f, ::exp2)
SCHEDC_FLOAT_FUNCTION(log, ::logf, ::log)
SCHEDC_FLOAT_FUNCTION(log2, ::log2f, ::log2)
SCHEDC_FLOAT_FUNCTION(log10, ::log10f, ::log10)
SCHEDC_FLOAT_FUNCTION(sin, ::sinf, ::sin)
SCHEDC_FLOAT_FUNCTION(cos, ::cosf, ::cos)
SCHEDC_FLOAT_FUNCTION(tan, ::tanf, ::tan)
SCHEDC_FLOAT_FUNCTION(sinh, ::sinhf, ::sinh)
SCHEDC_FLOAT_FUNCTION(cosh, ::coshf, ::cosh)
SCHEDC_FLOAT_FUNCTION(tanh, ::tanhf, ::tanh)
SCHEDC_FLOAT_FUNCTION(fast_tanh, fast_tanh_f, ::tanh)
SCHEDC_FLOAT_FUNCTION(sigmoid, sigmoid_f, sigmoid_d)
SCHEDC_FLOAT_FUNCTION(erf, ::erff, ::erf)
SCHEDC_FLOAT_FUNCTION(floor, ::floorf, ::floor)
SCHEDC_FLOAT_FUNCTION(ceil, ::ceilf, ::ceil)
SCHEDC_FLOAT_FUNCTION(round, ::roundf, ::round)
SCHEDC_FLOAT_FUNCTION(abs, ::fabsf, ::fabs)
#undef SCHEDC_FLOAT_FUNCTION

__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
__device__ __forceinline__ __half pow(__half x, __half y) {
    return __float2half_rn(::powf(__half2float(x), __half2float(y)));
}
__device__ __forceinline__ __nv_bfloat16 pow(__nv_bfloat16 x, __nv_bfloat16 y) {
    return __float2bfloat16_rn(::powf(__bfloat162float(x), __bfloat162float(y)));
}

// |x| of integers wraps as the emulator's: the most negative value stays itself; unsigned: x.
__device__ __forceinline__ signed char abs(signed char x) { return (signed char)(x < 0 ? -(int)x : (int)x); }
__device__ __forceinline__ short abs(short x) { return (short)(x < 0 ? -(int)x : (int)x); }
__device__ __forceinline__ int abs(int x) { return x < 0 ? (int)(0u - (unsigned int)x) : x; }
__device__ __forceinline__ long long abs(long long x) {
    return x < 0 ? (long long)(0ull - (unsigned long long)x) : x;
}
__device__ __forceinline__ unsigned char abs(unsigned char x) { return x; }
__device__ __forceinline__ unsigned short abs(unsigned short x) { return x; }
__device__ __forceinline__ unsigned int abs(unsigned int x) { return x; }
__device__ __forceinline__ unsigned long long abs(unsigned long long x) { return x; }

template <typename T>
__device__ __forceinline__ T select(bool condition, T a, T b) { return condition ? a : b; }

__device__ __forceinline__ bool logical_not(bool x) { return !x; }

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

// ---- XOR-swizzled shared tiles (schedc.instructions.swizzle_column) -------------------------
// In a tile of PITCH-byte rows, each row's 16-byte chunks are XORed with its 128-byte line's
// index (a line is one row if rows are longer), so that ldmatrix's 8 rows at one column hit 8
// bank groups. Returns the offset of stored element (row, col) from the tile's first element.
template <int PITCH, typename T>
__device__ __forceinline__ int swizzle(int row, int col) {
    constexpr unsigned chunk = 16 / sizeof(T);
    constexpr unsigned rows_per_line = PITCH >= 128 ? 1 : 128 / PITCH;
    constexpr unsigned lines = PITCH / 16 < 8 ? PITCH / 16 : 8;
    const unsigned r = static_cast<unsigned>(row);
    return static_cast<int>(r * (PITCH / sizeof(T)) + (static_cast<unsigned>(col) ^ (r / rows_per_line % lines * chunk)));
}

template <int PITCH, typename T>
__device__ __forceinline__ int box_offset(int row, int col, int ld) {
    if constexpr (PITCH == 0) {
        return row * ld + col;
    } else {
        return swizzle<PITCH, T>(row, col);
    }
}

// A vector of VEC elements read at (row, col) of a box written to dst: whole, or, TRANSPOSE, its
// elements one by one down the target's column `row` (a tile whose layout is not the source's).
template <int PITCH, typename T, bool TRANSPOSE, int VEC, typename V>
__device__ __forceinline__ void put_vector(T* dst, int row, int col, int ld, const V& v) {
    if constexpr (!TRANSPOSE) {
        *reinterpret_cast<V*>(dst + box_offset<PITCH, T>(row, col, ld)) = v;
    } else {
        const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst[box_offset<PITCH, T>(col + i, row, ld)] = e[i];
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

// N elements of one aligned vector in memory to and from registers of another type (an
// accumulator of float32 for a C of float16, say), each converted.
template <int N, typename To, typename From>
__device__ __forceinline__ void load_converted(To* dst, const From* src) {
    using V = typename vector_type<N * sizeof(From)>::type;
    const V v = *reinterpret_cast<const V*>(src);
    const From* e = reinterpret_cast<const From*>(&v);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = convert<To>(e[i]);
}

template <int N, typename To, typename From>
__device__ __forceinline__ void store_converted(To* dst, const From* src) {
    using V = typename vector_type<N * sizeof(To)>::type;
    V v;
    To* e = reinterpret_cast<To*>(&v);
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = convert<To>(src[i]);
    *reinterpret_cast<V*>(dst) = v;
}

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
    constexpr int count = box_split<ROWS, COLS, VEC, THREADS>::per_thread;
    // whole when a thread has a few vectors; in steps of 8 when it has many (a tile copied by a
    // handful of threads), whose full unrolling takes the compiler minutes
#pragma unroll (count <= 32 ? count : 8)
    for (int n = 0; n < count; ++n) {
        bool valid; int row, col;
        vector_position<ROWS, COLS, VEC, STRIPED, THREADS>(thread, n, valid, row, col);
        if (valid) f(n, row, col);
    }
}

// A synchronous copy moves its vectors through registers, COPY_BATCH at a time: their loads are
// in flight together, and the copy does not hold the whole box in registers (which costs
// occupancy). BOUNDED copies take a tile at the edge of its array: only the first rows_in rows
// and cols_in columns of the source lie inside it (cols_in a multiple of VEC); the rest of the
// box gets zeros. SWIZZLE: the target is a swizzled tile (rows of SWIZZLE bytes), dst its first element.
// TRANSPOSE: the target holds the box transposed (element (r, c) at c * dst_ld + r). SRC_STEP:
// elements between the source's columns (a slice of a tile of rank over 2 whose array's contiguous
// dimension is another; VEC 1 then).
constexpr int COPY_BATCH = 4;

template <typename T, int ROWS, int COLS, int VEC, bool STRIPED, int THREADS, bool BOUNDED = false, int SWIZZLE = 0,
          bool TRANSPOSE = false, int SRC_STEP = 1>
__device__ __forceinline__ void block_copy(T* dst, int dst_ld, const T* src, int src_ld, int thread,
                                           int rows_in = ROWS, int cols_in = COLS) {
    using V = typename vector_type<VEC * sizeof(T)>::type;
    constexpr int per_thread = box_split<ROWS, COLS, VEC, THREADS>::per_thread;
#pragma unroll 1
    for (int first = 0; first < per_thread; first += COPY_BATCH) {
        V held[COPY_BATCH];
#pragma unroll
        for (int b = 0; b < COPY_BATCH; ++b) {
            bool valid; int row, col;
            vector_position<ROWS, COLS, VEC, STRIPED, THREADS>(thread, first + b, valid, row, col);
            if (first + b < per_thread && valid) {
                const bool inside = !BOUNDED || (row < rows_in && col < cols_in);
                held[b] = inside ? *reinterpret_cast<const V*>(src + row * src_ld + col * SRC_STEP) : V{};
            }
        }
#pragma unroll
        for (int b = 0; b < COPY_BATCH; ++b) {
            bool valid; int row, col;
            vector_position<ROWS, COLS, VEC, STRIPED, THREADS>(thread, first + b, valid, row, col);
            if (first + b < per_thread && valid) put_vector<SWIZZLE, T, TRANSPOSE, VEC>(dst, row, col, dst_ld, held[b]);
        }
    }
}

// The same copy with cp.async (sm_80+): global to shared without registers. The data is in
// shared memory after async_wait<N>() completes the copy's commit group. BOUNDED: vectors past
// the array are zero-filled by cp.async itself (a source size of 0 bytes reads nothing).
template <typename T, int ROWS, int COLS, int VEC, bool STRIPED, int THREADS, bool BOUNDED = false, int SWIZZLE = 0,
          int SRC_STEP = 1>
__device__ __forceinline__ void block_copy_async(T* dst, int dst_ld, const T* src, int src_ld, int thread,
                                                 int rows_in = ROWS, int cols_in = COLS) {
    constexpr int bytes = VEC * sizeof(T);
    static_assert(bytes == 4 || bytes == 8 || bytes == 16, "cp.async moves 4, 8 or 16 bytes");
    for_each_vector<ROWS, COLS, VEC, STRIPED, THREADS>(thread, [&](int, int row, int col) {
        const unsigned target =
            static_cast<unsigned>(__cvta_generic_to_shared(dst + box_offset<SWIZZLE, T>(row, col, dst_ld)));
        const T* source = src + row * src_ld + col * SRC_STEP;
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

    template <int SWIZZLE = 0, bool TRANSPOSE = false>
    __device__ __forceinline__ void store(T* dst, int dst_ld, int thread) const {
        for_each_vector<ROWS, COLS, VEC, STRIPED, THREADS>(thread, [&](int n, int row, int col) {
            put_vector<SWIZZLE, T, TRANSPOSE, VEC>(dst, row, col, dst_ld, v[n]);
        });
    }
};

// ---- accumulator tiles at the edge of C ----------------------------------------------------
// A whole M x N tile (rows_in >= M and cols_in >= N) moves with one wmma operation; a partial
// one goes through the warp's M x N slice of scratch (shared memory), element by element, so
// that nothing outside the array is read or written. rows_in / cols_in are warp-uniform.
// STAGED sends every tile through the scratch: C's rows are not aligned for wmma in place, or C's
// type is not the fragments' (the scratch has the fragments' type; elements convert on the way).

template <int M, int N, typename T>
__device__ __forceinline__ int edge_offset(int e, int ld, nvcuda::wmma::layout_t layout) {
    const int row = e / N, col = e % N;
    return layout == nvcuda::wmma::mem_row_major ? row * ld + col : col * ld + row;
}

template <int M, int N, bool STAGED = false, typename T, typename S, typename Fragment>
__device__ __forceinline__ void store_edge(T* dst, const Fragment& f, int ld, nvcuda::wmma::layout_t layout,
                                           int rows_in, int cols_in, S* scratch, int thread) {
    if constexpr (!STAGED) {
        if (rows_in >= M && cols_in >= N) {
            nvcuda::wmma::store_matrix_sync(dst, f, ld, layout);
            return;
        }
    }
    S* mine = scratch + (thread / 32) * (M * N);
    nvcuda::wmma::store_matrix_sync(mine, f, N, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = thread % 32; e < M * N; e += 32) {
        if (e / N < rows_in && e % N < cols_in) dst[edge_offset<M, N, T>(e, ld, layout)] = convert<T>(mine[e]);
    }
    __syncwarp();
}

template <int M, int N, bool STAGED = false, typename T, typename S, typename Fragment>
__device__ __forceinline__ void load_edge(Fragment& f, const T* src, int ld, nvcuda::wmma::layout_t layout,
                                          int rows_in, int cols_in, S* scratch, int thread) {
    if constexpr (!STAGED) {
        if (rows_in >= M && cols_in >= N) {
            nvcuda::wmma::load_matrix_sync(f, src, ld, layout);
            return;
        }
    }
    S* mine = scratch + (thread / 32) * (M * N);
    for (int e = thread % 32; e < M * N; e += 32) {
        const bool inside = e / N < rows_in && e % N < cols_in;
        mine[e] = inside ? convert<S>(src[edge_offset<M, N, T>(e, ld, layout)]) : convert<S>(0.0f);
    }
    __syncwarp();
    nvcuda::wmma::load_matrix_sync(f, mine, N, nvcuda::wmma::mem_row_major);
    __syncwarp();
}

// ---- mma.sync: a fragment is an array of one lane's elements --------------------------------
// Which element of the tile each lane holds is the family's lane layout (schedc.instructions);
// the generated code addresses elements with it, these helpers move whole registers.

template <typename T, int N>
__device__ __forceinline__ void fill(T (&f)[N], T value) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = value;
}

template <typename T, int N>
__device__ __forceinline__ void scale(T (&f)[N], float factor) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = convert<T>(convert<float>(f[e]) * factor);
}

template <int N, typename T>
__device__ __forceinline__ void fill_n(T* f, T value) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = value;
}

template <typename T, int N>
__device__ __forceinline__ void relu(T (&f)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = f[e] > T(0) ? f[e] : T(0);
}

// float operands multiply in tf32: round to nearest (cvt.rna), as the wmma path does
template <int N>
__device__ __forceinline__ void to_tf32(float (&f)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
        unsigned bits;
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(f[e]));
        f[e] = __uint_as_float(bits);
    }
}

// COUNT 8x8 matrices of 16-byte rows into COUNT registers starting at frag; each lane passes
// the address of one row (lanes 8j..8j+7: the rows of matrix j). TRANS: 16-bit elements transposed.
template <int COUNT, bool TRANS, typename T>
__device__ __forceinline__ void ldmatrix(T* frag, const T* row) {
    unsigned* r = reinterpret_cast<unsigned*>(frag);
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    if constexpr (COUNT == 4 && TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    } else if constexpr (COUNT == 4) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    } else if constexpr (COUNT == 2 && TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    } else if constexpr (COUNT == 2) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    } else if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    }
}

// d (16x8) += a (16x16, row) * b (16x8, col): fp16 or bf16 operands, float accumulators
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float* d, const T* a, const T* b) {
    const unsigned* x = reinterpret_cast<const unsigned*>(a);
    const unsigned* y = reinterpret_cast<const unsigned*>(b);
    if constexpr (same_type<T, __half>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
    }
}

// fp16 accumulators: d's four halves in two registers
__device__ __forceinline__ void mma_m16n8k16(__half* d, const __half* a, const __half* b) {
    unsigned* z = reinterpret_cast<unsigned*>(d);
    const unsigned* x = reinterpret_cast<const unsigned*>(a);
    const unsigned* y = reinterpret_cast<const unsigned*>(b);
    asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, "
                 "{%0, %1};\n"
                 : "+r"(z[0]), "+r"(z[1]) : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
}

// d (16x8) += a (16x16, row) * b (16x8, col): 8-bit integers (signed or unsigned) into int32, exact
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(int* d, const T* a, const T* b) {
    const unsigned* x = reinterpret_cast<const unsigned*>(a);
    const unsigned* y = reinterpret_cast<const unsigned*>(b);
    if constexpr (same_type<T, signed char>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(x[0]), "r"(x[1]), "r"(y[0]));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(x[0]), "r"(x[1]), "r"(y[0]));
    }
}

// d (16x8) += a (16x32, row) * b (32x8, col): 8-bit floats (e4m3 or e5m2) into float32 (sm_89 and newer)
template <typename T>
__device__ __forceinline__ void mma_m16n8k32(float* d, const T* a, const T* b) {
    const unsigned* x = reinterpret_cast<const unsigned*>(a);
    const unsigned* y = reinterpret_cast<const unsigned*>(b);
    if constexpr (same_type<T, __nv_fp8_e4m3>::value) {
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
    }
}

// d (16x8) += a (16x8, row) * b (8x8, col) in tf32 (operands already rounded by to_tf32)
__device__ __forceinline__ void mma_m16n8k8(float* d, const float* a, const float* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING)); }

// ---- Hopper (sm_90a): mbarriers, TMA, wgmma, setmaxnreg ----
// The instructions exist on sm_90a only; built for another architecture these helpers trap
// (schedc compiles kernels that use them for sm_90a).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SCHEDC_SM90A 1
#endif

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// phases of COUNT arrivals each (plus the transaction bytes a phase is told to expect)
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
#if SCHEDC_SM90A
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(shared_address(bar)), "r"(count) : "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
#if SCHEDC_SM90A
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(shared_address(bar)) : "memory");
#else
    __trap();
#endif
}

// arrive, and make the current phase also wait for BYTES more bytes of TMA copies
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
#if SCHEDC_SM90A
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(shared_address(bar)), "r"(bytes) : "memory");
#else
    __trap();
#endif
}

// wait until the phase of parity PARITY has completed
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
#if SCHEDC_SM90A
    const unsigned address = shared_address(bar);
    unsigned done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(address), "r"(parity) : "memory");
    } while (!done);
#else
    __trap();
#endif
}

// ---- thread block clusters (sm_90a) ----

// this block's rank in its cluster
__device__ __forceinline__ int cluster_rank() {
#if SCHEDC_SM90A
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return static_cast<int>(rank);
#else
    __trap();
    return 0;
#endif
}

// arrive once on BAR (the same shared offset) in each of the cluster's blocks 0 .. BLOCKS-1 (the
// default .release.cta semantics: what is released is the caller's wgmma reads of the stage,
// finished by wgmma.wait_group before, not generic writes, so no cluster-scope fence is paid)
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, unsigned blocks) {
#if SCHEDC_SM90A
    const unsigned local = shared_address(bar);
    for (unsigned rank = 0; rank < blocks; ++rank) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
        asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
    }
#else
    __trap();
#endif
}

// every thread of the cluster's blocks arrives (release) and waits (acquire)
__device__ __forceinline__ void cluster_sync() {
#if SCHEDC_SM90A
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void fence_mbarrier_init() {
#if SCHEDC_SM90A
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void fence_proxy_async() {
#if SCHEDC_SM90A
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// one 2-D box of the array MAP describes, at (inner, outer) elements, into shared memory; the
// bytes complete on BAR
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int inner, int outer, unsigned long long* bar) {
#if SCHEDC_SM90A
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer),
                    "r"(shared_address(bar)) : "memory");
#else
    __trap();
#endif
}

// the same box, landing at DST and completing on BAR in every block of the cluster whose rank
// is set in MASK
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* map, int inner, int outer,
                                                      unsigned long long* bar, unsigned short mask) {
#if SCHEDC_SM90A
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer),
                    "r"(shared_address(bar)), "h"(mask) : "memory");
#else
    __trap();
#endif
}

// one 2-D box from shared memory at SRC (swizzled as MAP says) to the array MAP describes, at
// (inner, outer) elements; elements past the array are not written. Joins the thread's bulk group.
__device__ __forceinline__ void tma_store_2d(const void* map, int inner, int outer, const void* src) {
#if SCHEDC_SM90A
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(shared_address(src))
                 : "memory");
#else
    __trap();
#endif
}

// like tma_store_2d, but the box is added into the array's elements (a reduction: blocks adding
// into one element do so one at a time, in any order)
__device__ __forceinline__ void tma_add_2d(const void* map, int inner, int outer, const void* src) {
#if SCHEDC_SM90A
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(shared_address(src))
                 : "memory");
#else
    __trap();
#endif
}

// the thread's TMA stores since its last commit form a bulk group
__device__ __forceinline__ void bulk_commit() {
#if SCHEDC_SM90A
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// wait until at most PENDING of the thread's bulk groups are unfinished: with READ, only until
// the others have finished reading shared memory; without, their writes included
template <int PENDING, bool READ>
__device__ __forceinline__ void bulk_wait() {
#if SCHEDC_SM90A
    if constexpr (READ) {
        asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(PENDING) : "memory");
    } else {
        asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(PENDING) : "memory");
    }
#endif
}

// bar.sync ID, THREADS: the THREADS threads (whole warps) that run it with this ID meet
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// bar.arrive ID, THREADS: this warp counts towards the THREADS of barrier ID and goes on
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// a wgmma matrix descriptor: the tile's start, leading and stride byte offsets, swizzle mode
// (1: 128-byte, 2: 64-byte, 3: 32-byte rows)
__device__ __forceinline__ unsigned long long wgmma_descriptor(const void* p, unsigned lbo, unsigned sbo, unsigned mode) {
    const unsigned long long start = (shared_address(p) & 0x3FFFF) >> 4;
    return start | (static_cast<unsigned long long>((lbo >> 4) & 0x3FFF) << 16)
                 | (static_cast<unsigned long long>((sbo >> 4) & 0x3FFF) << 32)
                 | (static_cast<unsigned long long>(mode) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#if SCHEDC_SM90A
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if SCHEDC_SM90A
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#if SCHEDC_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(PENDING) : "memory");
#endif
}

// registers per thread of the warpgroup that runs it (a multiple of 8 from 24 to 256)
template <int REGISTERS>
__device__ __forceinline__ void setmaxnreg_inc() {
#if SCHEDC_SM90A
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGISTERS));
#endif
}

template <int REGISTERS>
__device__ __forceinline__ void setmaxnreg_dec() {
#if SCHEDC_SM90A
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGISTERS));
#endif
}

}  // namespace schedc
