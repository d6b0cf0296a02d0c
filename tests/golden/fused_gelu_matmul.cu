// a GEMM with a fused GELU epilogue (tests/test_fuse.py)

// (schedc runtime header inlined here)

using namespace nvcuda;

extern "C" __global__ void __launch_bounds__(128)
gelu_matmul__gpu__(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, const __half* __restrict__ bias, const __half* __restrict__ D)
{
    const int lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    // schedule loop i (BLOCK_Y): range(0, 64, 32)
    const int i = blockIdx.y * 32;
    // schedule loop j (BLOCK_X): range(0, 64, 32)
    const int j = blockIdx.x * 32;
    // schedule loop ii (WARP_Y): range(0, 32, 16)
    const int ii = threadIdx.y * 16;
    // schedule loop jj (WARP_X): range(0, 32, 16)
    const int jj = threadIdx.x / 32 * 16;
    alignas(16) float _c[8];  // accumulator 16x16: 8 element(s) per lane (mma_sync layout)
    #pragma unroll
    for (int elem = 0; elem < 8; elem += 2) {
        schedc::load_converted<2>(&_c[elem], &C[(i + ii) * 64 + j + jj] + (lane / 4 + 8 * (elem % 4 / 2)) * 64 + 2 * (lane % 4) + elem % 2 + 8 * (elem / 4 % 2));
    }
    // schedule loop k: range(0, 32, 16)
    for (int k = 0; k < 32; k += 16) {
        alignas(16) __half _a0[8];  // matrix_a 16x16: 8 element(s) per lane (mma_sync layout)
        alignas(16) __half _b0[8];  // matrix_b 16x16: 8 element(s) per lane (mma_sync layout)
        #pragma unroll
        for (int elem = 0; elem < 8; elem += 2) {
            *reinterpret_cast<schedc::vector_type<4>::type*>(&_a0[elem]) = *reinterpret_cast<const schedc::vector_type<4>::type*>(&A[(i + ii) * 32 + k] + (lane / 4 + 8 * (elem / 2 % 2)) * 32 + 2 * (lane % 4) + elem % 2 + 8 * (elem / 4));
        }
        #pragma unroll
        for (int elem = 0; elem < 8; elem += 1) {
            _b0[elem] = *(&B[k * 64 + j + jj] + (2 * (lane % 4) + elem % 2 + 8 * (elem % 4 / 2)) * 64 + lane / 4 + 8 * (elem / 4 % 2));
        }
        schedc::mma_m16n8k16(&_c[0], &_a0[0], &_b0[0]);
        schedc::mma_m16n8k16(&_c[4], &_a0[0], &_b0[4]);
    }
    #pragma unroll
    for (int elem = 0; elem < 8; elem += 1) {
        const int iii = lane / 4 + 8 * (elem % 4 / 2);  // the element's row in the tile
        const int jjj = 2 * (lane % 4) + elem % 2 + 8 * (elem / 4 % 2);  // and its column
        _c[elem] = 0.5f * (_c[elem] + schedc::convert<float>(bias[j + jj + jjj])) * (1.0f + schedc::erf((_c[elem] + schedc::convert<float>(bias[j + jj + jjj])) * 0.70710677f));
    }
    #pragma unroll
    for (int elem = 0; elem < 8; elem += 2) {
        schedc::store_converted<2>(&C[(i + ii) * 64 + j + jj] + (lane / 4 + 8 * (elem % 4 / 2)) * 64 + 2 * (lane % 4) + elem % 2 + 8 * (elem / 4 % 2), &_c[elem]);
    }
}

#if !defined(__CUDACC_RTC__)
// Host launchers: C-callable; they return the launch's cudaError_t (0 on success).
extern "C" int gelu_matmul(const __half* A, const __half* B, __half* C, const __half* bias, const __half* D)
{
    gelu_matmul__gpu__<<<dim3(2, 2, 1), dim3(64, 2, 1), 0>>>(A, B, C, bias, D);
    return (int)cudaGetLastError();
}

#endif  // !defined(__CUDACC_RTC__)
