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

}  // namespace schedc
