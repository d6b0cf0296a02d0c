// hopper ping-pong

// (schedc runtime header inlined here)

using namespace nvcuda;

#if defined(__CUDACC_RTC__)
// CUtensorMap as cuda.h declares it: 128 opaque bytes, made by cuTensorMapEncodeTiled
typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;
#else
#include <cuda.h>
#endif

// d (64x128, f32) += a (64x16) * b (16x128), f16: a k-major, b n-major, from matrix descriptors
__device__ __forceinline__ void schedc_wgmma_m64n128k16_float32_fp16_01(float (&d)[64], unsigned long long a, unsigned long long b) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(1) : "memory");
#else
    __trap();
#endif
}

extern "C" __global__ void __launch_bounds__(384, 1)
mm__gpu__(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, const __grid_constant__ CUtensorMap A_map, const __grid_constant__ CUtensorMap B_map, const __grid_constant__ CUtensorMap C_map)
{
    extern __shared__ __align__(1024) unsigned char schedc_shared[];
    // shared buffer A_shared: float16[3, 1, 128, 64], 49152 bytes
    __half* A_shared = reinterpret_cast<__half*>(schedc_shared + 0);
    // shared buffer B_shared: float16[3, 2, 64, 64], 49152 bytes
    __half* B_shared = reinterpret_cast<__half*>(schedc_shared + 49152);
    // shared buffer full: uint64[3], 24 bytes
    unsigned long long* full = reinterpret_cast<unsigned long long*>(schedc_shared + 98304);
    // shared buffer empty: uint64[3], 24 bytes
    unsigned long long* empty = reinterpret_cast<unsigned long long*>(schedc_shared + 98432);
    // shared buffer turn: uint64[2], 16 bytes
    unsigned long long* turn = reinterpret_cast<unsigned long long*>(schedc_shared + 98560);
    // shared buffer C_out: float16[2, 4, 64, 64], 65536 bytes
    __half* C_out = reinterpret_cast<__half*>(schedc_shared + 99328);
    // shared buffer C_full: uint64[8], 64 bytes
    unsigned long long* C_full = reinterpret_cast<unsigned long long*>(schedc_shared + 164864);
    const int thread = threadIdx.x + 384 * (threadIdx.y + 1 * threadIdx.z);
    const int wg_lane = threadIdx.x % 128;
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // the thread's warpgroup, one value a warp
    // one thread sets up the stages' barriers
    if (threadIdx.x == 0) {
        schedc::mbarrier_init(&full[0], 1);
        schedc::mbarrier_init(&full[1], 1);
        schedc::mbarrier_init(&full[2], 1);
        schedc::mbarrier_init(&empty[0], 128);
        schedc::mbarrier_init(&empty[1], 128);
        schedc::mbarrier_init(&empty[2], 128);
        schedc::mbarrier_init(&turn[0], 128);
        schedc::mbarrier_init(&turn[1], 128);
        schedc::mbarrier_init(&C_full[0], 1);
        schedc::mbarrier_init(&C_full[1], 1);
        schedc::mbarrier_init(&C_full[2], 1);
        schedc::mbarrier_init(&C_full[3], 1);
        schedc::mbarrier_init(&C_full[4], 1);
        schedc::mbarrier_init(&C_full[5], 1);
        schedc::mbarrier_init(&C_full[6], 1);
        schedc::mbarrier_init(&C_full[7], 1);
        schedc::fence_mbarrier_init();
    }
    __syncthreads();  // the barriers are set up
    // warp specialization: producer = threads 256..383; consumers = threads 0..255 (2 teams of 128 taking tiles in turn)
    if (threadIdx.x >= 256 && threadIdx.x < 384) {  // producer
        schedc::setmaxnreg_dec<40>();
        // one thread of the producer warpgroup issues every copy
        if (threadIdx.x % 128 == 0) {
            // persistent: 5 resident blocks take the 12 tiles in turn
            for (int work = blockIdx.x; work < 12; work += 5) {
                // grouped order: 2 rows of tiles
                const int tile_y = work / 8 * 2 + work % 8 % schedc::min(3 - work / 8 * 2, 2);
                // column by column
                const int tile_x = work % 8 / schedc::min(3 - work / 8 * 2, 2);
                // schedule loop i (BLOCK_Y): range(0, 384, 128)
                const int i = tile_y * 128;
                // schedule loop j (BLOCK_X): range(0, 512, 128)
                const int j = tile_x * 128;
                // schedule loop k: range(0, 192, 64)
                for (int k = 0; k < 192; k += 64) {
                    // this tile's number in the ring
                    const int tile = work / 5 * 3 + k / 64;
                    // its stage
                    const int stage = tile % 3;
                    // the parity of its use of the stage
                    const int parity = tile / 3 % 2;
                    schedc::mbarrier_wait(&empty[stage], 1 - parity);  // the stage is free: its previous tile's consumers released it
                    schedc::mbarrier_arrive_expect_tx(&full[stage], 32768);  // the bytes this tile's copies bring
                    // TMA: A
                    schedc::tma_load_2d(&A_shared[stage * 8192], &A_map, k, i, &full[stage]);
                    // TMA: B: box 1 of 2
                    schedc::tma_load_2d(&B_shared[stage * 8192], &B_map, j, k, &full[stage]);
                    // TMA: B: box 2 of 2
                    schedc::tma_load_2d(&B_shared[stage * 8192 + 1 * 4096], &B_map, j + 64, k, &full[stage]);
                }
            }
        }
    } else {  // consumers
        schedc::setmaxnreg_inc<232>();
        // schedule loop jj (WARPGROUP_X): range(0, 128, 128)
        const int jj = 0;
        // persistent: 5 resident blocks take the 12 tiles in turn, and the 2 teams of a block take its tiles in turn
        for (int work = blockIdx.x + warpgroup * 5; work < 12; work += 10) {
            // grouped order: 2 rows of tiles
            const int tile_y = work / 8 * 2 + work % 8 % schedc::min(3 - work / 8 * 2, 2);
            // column by column
            const int tile_x = work % 8 / schedc::min(3 - work / 8 * 2, 2);
            // schedule loop i (BLOCK_Y): range(0, 384, 128)
            const int i = tile_y * 128;
            // schedule loop j (BLOCK_X): range(0, 512, 128)
            const int j = tile_x * 128;
            alignas(16) __half C_in[64];  // 64x128 tile: 64 element(s) per thread (wgmma accumulator layout)
            alignas(16) float _c_0_0_0[64];  // 64x128 tile: 64 element(s) per thread (wgmma accumulator layout)
            schedc::fill(_c_0_0_0, 0.0f);
            alignas(16) float _c_1_0_0[64];  // 64x128 tile: 64 element(s) per thread (wgmma accumulator layout)
            schedc::fill(_c_1_0_0, 0.0f);
            // one thread of the warpgroup copies its tile of C
            if (threadIdx.x % 128 == 0) {
                schedc::bulk_wait<0, true>();  // the tile before's stores have read the slots
                schedc::mbarrier_arrive_expect_tx(&C_full[warpgroup * 4], 8192);  // the bytes of chunk 0 of the warpgroup's tile of C
                // TMA: C: columns 0..63 of a warpgroup's tile
                schedc::tma_load_2d(&C_out[warpgroup * 16384], &C_map, j + jj, i, &C_full[warpgroup * 4]);
                schedc::mbarrier_arrive_expect_tx(&C_full[warpgroup * 4 + 1], 8192);  // the bytes of chunk 1 of the warpgroup's tile of C
                // TMA: C: columns 64..127 of a warpgroup's tile
                schedc::tma_load_2d(&C_out[warpgroup * 16384 + 1 * 4096], &C_map, j + jj + 64, i, &C_full[warpgroup * 4 + 1]);
                schedc::mbarrier_arrive_expect_tx(&C_full[warpgroup * 4 + 2], 8192);  // the bytes of chunk 2 of the warpgroup's tile of C
                // TMA: C: columns 0..63 of a warpgroup's tile
                schedc::tma_load_2d(&C_out[warpgroup * 16384 + 2 * 4096], &C_map, j + jj, i + 64, &C_full[warpgroup * 4 + 2]);
                schedc::mbarrier_arrive_expect_tx(&C_full[warpgroup * 4 + 3], 8192);  // the bytes of chunk 3 of the warpgroup's tile of C
                // TMA: C: columns 64..127 of a warpgroup's tile
                schedc::tma_load_2d(&C_out[warpgroup * 16384 + 3 * 4096], &C_map, j + jj + 64, i + 64, &C_full[warpgroup * 4 + 3]);
            }
            // the block's first work item goes first
            if (work >= 5) {
                schedc::mbarrier_wait(&turn[work / 5 % 2], (work / 5 - 1) / 2 % 2);  // the team before has issued the products of the block's work item before
            }
            // schedule loop k: range(0, 192, 64)
            for (int k = 0; k < 192; k += 64) {
                // this tile's number in the ring
                const int tile = work / 5 * 3 + k / 64;
                // its stage
                const int stage = tile % 3;
                // the parity of its use of the stage
                const int parity = tile / 3 % 2;
                schedc::mbarrier_wait(&full[stage], parity);  // this tile's copies have landed
                schedc::wgmma_fence();
                const unsigned long long _a0_0_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192], 16, 1024, 1);
                const unsigned long long _a0_1_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 64 * 64], 16, 1024, 1);
                const unsigned long long _b0_0 = schedc::wgmma_descriptor(&B_shared[stage * 8192 + jj / 64 * 4096], 8192, 1024, 1);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_0_0_0, _a0_0_0, _b0_0);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_1_0_0, _a0_1_0, _b0_0);
                const unsigned long long _a1_0_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 16], 16, 1024, 1);
                const unsigned long long _a1_1_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 64 * 64 + 16], 16, 1024, 1);
                const unsigned long long _b1_0 = schedc::wgmma_descriptor(&B_shared[stage * 8192 + jj / 64 * 4096 + 16 * 64], 8192, 1024, 1);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_0_0_0, _a1_0_0, _b1_0);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_1_0_0, _a1_1_0, _b1_0);
                const unsigned long long _a2_0_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 32], 16, 1024, 1);
                const unsigned long long _a2_1_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 64 * 64 + 32], 16, 1024, 1);
                const unsigned long long _b2_0 = schedc::wgmma_descriptor(&B_shared[stage * 8192 + jj / 64 * 4096 + 32 * 64], 8192, 1024, 1);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_0_0_0, _a2_0_0, _b2_0);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_1_0_0, _a2_1_0, _b2_0);
                const unsigned long long _a3_0_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 48], 16, 1024, 1);
                const unsigned long long _a3_1_0 = schedc::wgmma_descriptor(&A_shared[stage * 8192 + 64 * 64 + 48], 16, 1024, 1);
                const unsigned long long _b3_0 = schedc::wgmma_descriptor(&B_shared[stage * 8192 + jj / 64 * 4096 + 48 * 64], 8192, 1024, 1);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_0_0_0, _a3_0_0, _b3_0);
                schedc_wgmma_m64n128k16_float32_fp16_01(_c_1_0_0, _a3_1_0, _b3_0);
                schedc::wgmma_commit();
                schedc::wgmma_wait<1>();
                if (k != 0) {
                    schedc::mbarrier_arrive(&empty[(tile - 1 + 3) % 3]);  // the previous tile's products are done: its stage is free
                }
            }
            schedc::mbarrier_arrive(&turn[(work / 5 + 1) % 2]);  // this work item's products are issued: the next team's turn
            schedc::wgmma_wait<0>();
            schedc::mbarrier_arrive(&empty[(work / 5 * 3 + 128 / 64) % 3]);  // the pass's last stage is free
            schedc::mbarrier_wait(&C_full[warpgroup * 4], work / 5 / 2 % 2);  // chunk 0 of the warpgroup's tile of C has landed
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 2) {
                *reinterpret_cast<schedc::vector_type<4>::type*>(&C_in[elem]) = *reinterpret_cast<const schedc::vector_type<4>::type*>(&C_out[warpgroup * 16384] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2));
            }
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 1) _c_0_0_0[elem] += schedc::convert<float>(C_in[elem]);
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 2) {
                schedc::store_converted<2>(&C_out[warpgroup * 16384] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2), &_c_0_0_0[elem]);
            }
            schedc::fence_proxy_async();
            schedc::named_barrier(warpgroup + 1, 128);  // the warpgroup's chunk is written
            // one thread of the warpgroup stores the chunk
            if (threadIdx.x % 128 == 0) {
                // TMA store: C: columns 0..63 of the warpgroup's tile
                schedc::tma_store_2d(&C_map, j + jj, i, &C_out[warpgroup * 16384]);
                schedc::bulk_commit();
            }
            schedc::mbarrier_wait(&C_full[warpgroup * 4 + 1], work / 5 / 2 % 2);  // chunk 1 of the warpgroup's tile of C has landed
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 2) {
                *reinterpret_cast<schedc::vector_type<4>::type*>(&C_in[elem]) = *reinterpret_cast<const schedc::vector_type<4>::type*>(&C_out[warpgroup * 16384 + 1 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2 - 64));
            }
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 1) _c_0_0_0[elem] += schedc::convert<float>(C_in[elem]);
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 2) {
                schedc::store_converted<2>(&C_out[warpgroup * 16384 + 1 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2 - 64), &_c_0_0_0[elem]);
            }
            schedc::fence_proxy_async();
            schedc::named_barrier(warpgroup + 1, 128);  // the warpgroup's chunk is written
            // one thread of the warpgroup stores the chunk
            if (threadIdx.x % 128 == 0) {
                // TMA store: C: columns 64..127 of the warpgroup's tile
                schedc::tma_store_2d(&C_map, j + jj + 64, i, &C_out[warpgroup * 16384 + 1 * 4096]);
                schedc::bulk_commit();
            }
            schedc::mbarrier_wait(&C_full[warpgroup * 4 + 2], work / 5 / 2 % 2);  // chunk 2 of the warpgroup's tile of C has landed
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 2) {
                *reinterpret_cast<schedc::vector_type<4>::type*>(&C_in[elem]) = *reinterpret_cast<const schedc::vector_type<4>::type*>(&C_out[warpgroup * 16384 + 2 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2));
            }
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 1) _c_1_0_0[elem] += schedc::convert<float>(C_in[elem]);
            #pragma unroll
            for (int elem = 0; elem < 32; elem += 2) {
                schedc::store_converted<2>(&C_out[warpgroup * 16384 + 2 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2), &_c_1_0_0[elem]);
            }
            schedc::fence_proxy_async();
            schedc::named_barrier(warpgroup + 1, 128);  // the warpgroup's chunk is written
            // one thread of the warpgroup stores the chunk
            if (threadIdx.x % 128 == 0) {
                // TMA store: C: columns 0..63 of the warpgroup's tile
                schedc::tma_store_2d(&C_map, j + jj, i + 64, &C_out[warpgroup * 16384 + 2 * 4096]);
                schedc::bulk_commit();
            }
            schedc::mbarrier_wait(&C_full[warpgroup * 4 + 3], work / 5 / 2 % 2);  // chunk 3 of the warpgroup's tile of C has landed
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 2) {
                *reinterpret_cast<schedc::vector_type<4>::type*>(&C_in[elem]) = *reinterpret_cast<const schedc::vector_type<4>::type*>(&C_out[warpgroup * 16384 + 3 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2 - 64));
            }
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 1) _c_1_0_0[elem] += schedc::convert<float>(C_in[elem]);
            #pragma unroll
            for (int elem = 32; elem < 64; elem += 2) {
                schedc::store_converted<2>(&C_out[warpgroup * 16384 + 3 * 4096] + schedc::swizzle<128, __half>(0 + 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2), 0 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2 - 64), &_c_1_0_0[elem]);
            }
            schedc::fence_proxy_async();
            schedc::named_barrier(warpgroup + 1, 128);  // the warpgroup's chunk is written
            // one thread of the warpgroup stores the chunk
            if (threadIdx.x % 128 == 0) {
                // TMA store: C: columns 64..127 of the warpgroup's tile
                schedc::tma_store_2d(&C_map, j + jj + 64, i + 64, &C_out[warpgroup * 16384 + 3 * 4096]);
                schedc::bulk_commit();
            }
        }
        if (threadIdx.x % 128 == 0) {
            schedc::bulk_wait<0, false>();  // the tile stores are done before the block exits
        }
    }
}

#if !defined(__CUDACC_RTC__)
// Host launchers: C-callable; they return the launch's cudaError_t (0 on success).
extern "C" int mm(const __half* A, const __half* B, __half* C, CUtensorMap A_map, CUtensorMap B_map, CUtensorMap C_map)
{
    cudaFuncSetAttribute(mm__gpu__, cudaFuncAttributeMaxDynamicSharedMemorySize, 164992);
    mm__gpu__<<<dim3(5, 1, 1), dim3(384, 1, 1), 164992>>>(A, B, C, A_map, B_map, C_map);
    return (int)cudaGetLastError();
}

#endif  // !defined(__CUDACC_RTC__)
