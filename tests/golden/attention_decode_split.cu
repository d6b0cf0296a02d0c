// decode, the keys in two parts between blocks (tests/test_split_keys.py)

// (schedc runtime header inlined here)

using namespace nvcuda;

#if defined(__CUDACC_RTC__)
// CUtensorMap as cuda.h declares it: 128 opaque bytes, made by cuTensorMapEncodeTiled
typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;
#else
#include <cuda.h>
#endif

// d (64x128, f32) += a (64x16) * b (16x128), bf16: a k-major, b k-major, from matrix descriptors
__device__ __forceinline__ void schedc_wgmma_m64n128k16_float32_bf16_00(float (&d)[64], unsigned long long a, unsigned long long b) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(1) : "memory");
#else
    __trap();
#endif
}

// d (64x128, f32) += a (64x16, registers) * b (16x128), bf16: b n-major, from a matrix descriptor
__device__ __forceinline__ void schedc_wgmma_m64n128k16_float32_bf16_r1(float (&d)[64], const unsigned (&a)[4], unsigned long long b) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1) : "memory");
#else
    __trap();
#endif
}

// two float32 values as bfloat16, packed into one register (the first in the low half)
__device__ __forceinline__ unsigned schedc_pack2_bfloat16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

extern "C" __global__ void __launch_bounds__(256, 1)
decode_split__partial__gpu__(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K, const __nv_bfloat16* __restrict__ V, float* __restrict__ O__split, float* __restrict__ peak__split, float* __restrict__ total__split, const __grid_constant__ CUtensorMap Q_map, const __grid_constant__ CUtensorMap K_map, const __grid_constant__ CUtensorMap V_map)
{
    extern __shared__ __align__(1024) unsigned char schedc_shared[];
    // shared buffer Q_shared: bfloat16[1, 2, 64, 64], 16384 bytes
    __nv_bfloat16* Q_shared = reinterpret_cast<__nv_bfloat16*>(schedc_shared + 0);
    // shared buffer K_shared: bfloat16[4, 1, 128, 64], 65536 bytes
    __nv_bfloat16* K_shared = reinterpret_cast<__nv_bfloat16*>(schedc_shared + 16384);
    // shared buffer full: uint64[4], 32 bytes
    unsigned long long* full = reinterpret_cast<unsigned long long*>(schedc_shared + 81920);
    // shared buffer empty: uint64[4], 32 bytes
    unsigned long long* empty = reinterpret_cast<unsigned long long*>(schedc_shared + 82048);
    // shared buffer item_full: uint64[1], 8 bytes
    unsigned long long* item_full = reinterpret_cast<unsigned long long*>(schedc_shared + 82176);
    // shared buffer item_empty: uint64[1], 8 bytes
    unsigned long long* item_empty = reinterpret_cast<unsigned long long*>(schedc_shared + 82304);
    // shared buffer V_shared: bfloat16[2, 2, 128, 64], 65536 bytes
    __nv_bfloat16* V_shared = reinterpret_cast<__nv_bfloat16*>(schedc_shared + 82944);
    // shared buffer chain_full: uint64[2], 16 bytes
    unsigned long long* chain_full = reinterpret_cast<unsigned long long*>(schedc_shared + 148480);
    // shared buffer chain_empty: uint64[2], 16 bytes
    unsigned long long* chain_empty = reinterpret_cast<unsigned long long*>(schedc_shared + 148608);
    const int thread = threadIdx.x + 256 * (threadIdx.y + 1 * threadIdx.z);
    const int wg_lane = threadIdx.x % 128;
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // the thread's warpgroup, one value a warp
    asm volatile("griddepcontrol.launch_dependents;");  // decode_split__combine__gpu__ may start its blocks
    // one thread sets up the stages' barriers
    if (threadIdx.x == 0) {
        schedc::mbarrier_init(&full[0], 1);
        schedc::mbarrier_init(&full[1], 1);
        schedc::mbarrier_init(&full[2], 1);
        schedc::mbarrier_init(&full[3], 1);
        schedc::mbarrier_init(&empty[0], 128);
        schedc::mbarrier_init(&empty[1], 128);
        schedc::mbarrier_init(&empty[2], 128);
        schedc::mbarrier_init(&empty[3], 128);
        schedc::mbarrier_init(&chain_full[0], 1);
        schedc::mbarrier_init(&chain_full[1], 1);
        schedc::mbarrier_init(&chain_empty[0], 128);
        schedc::mbarrier_init(&chain_empty[1], 128);
        schedc::mbarrier_init(&item_full[0], 1);
        schedc::mbarrier_init(&item_empty[0], 128);
        schedc::fence_mbarrier_init();
    }
    __syncthreads();  // the barriers are set up
    // warp specialization: producer = threads 128..255; consumers = threads 0..127
    if (threadIdx.x >= 128 && threadIdx.x < 256) {  // producer
        schedc::setmaxnreg_dec<40>();
        // one thread of the producer warpgroup issues every copy
        if (threadIdx.x % 128 == 0) {
            // persistent: 4 resident blocks take the 4 tiles in turn
            for (int work = blockIdx.x; work < 4; work += 4) {
                // planes of tiles one after another
                const int tile_z = work / 2;
                // column by column
                const int tile_x = work % 2 % 16 / schedc::min(1 - work % 2 / 16 * 8, 8);
                // schedule loop h (BLOCK_Z): range(0, 2, 1)
                const int h = tile_z;
                // schedule loop j (BLOCK_X): range(0, 2, 1)
                const int j = tile_x;
                schedc::mbarrier_wait(&item_empty[0], 1 - work / 4 % 2);  // the work item before has read its Q to the end
                schedc::mbarrier_arrive_expect_tx(&item_full[0], 16384);  // the bytes of this work item's Q
                // TMA: Q (this work item's): box 1 of 2
                schedc::tma_load_2d(&Q_shared[0], &Q_map, 0, h * 4, &item_full[0]);
                // TMA: Q (this work item's): box 2 of 2
                schedc::tma_load_2d(&Q_shared[1 * 4096], &Q_map, 64, h * 4, &item_full[0]);
                // schedule loop js: range(0, 256, 128)
                for (int js = 0; js < 256; js += 128) {
                    // schedule loop jt: range(0, 128, 128)
                    for (int jt = 0; jt < 128; jt += 128) {
                        // schedule loop k: range(0, 128, 64)
                        for (int k = 0; k < 128; k += 64) {
                            // this tile's number in the ring
                            const int tile = (work / 4 * 2 + js / 128 + jt / 128) * 2 + k / 64;
                            // its stage
                            const int stage = tile % 4;
                            // the parity of its use of the stage
                            const int parity = tile / 4 % 2;
                            schedc::mbarrier_wait(&empty[stage], 1 - parity);  // the stage is free: its previous tile's consumers released it
                            schedc::mbarrier_arrive_expect_tx(&full[stage], 16384);  // the bytes this tile's copies bring
                            // TMA: K
                            schedc::tma_load_2d(&K_shared[stage * 8192], &K_map, k, h * 512 + j * 256 + js, &full[stage]);
                        }
                        schedc::mbarrier_wait(&chain_empty[(work / 4 * 2 + js / 128 + jt / 128) % 2], 1 - (work / 4 * 2 + js / 128 + jt / 128) / 2 % 2);  // the tile before's products have read V's tile
                        schedc::mbarrier_arrive_expect_tx(&chain_full[(work / 4 * 2 + js / 128 + jt / 128) % 2], 32768);  // the bytes of V's tile
                        // TMA: V: box 1 of 2
                        schedc::tma_load_2d(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384], &V_map, 0, h * 512 + j * 256 + js, &chain_full[(work / 4 * 2 + js / 128 + jt / 128) % 2]);
                        // TMA: V: box 2 of 2
                        schedc::tma_load_2d(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 1 * 8192], &V_map, 64, h * 512 + j * 256 + js, &chain_full[(work / 4 * 2 + js / 128 + jt / 128) % 2]);
                    }
                }
            }
        }
    } else {  // consumers
        schedc::setmaxnreg_dec<232>();
        // schedule loop ii (WARPGROUP_Y): range(0, 64, 64)
        const int ii = warpgroup * 64;
        // persistent: 4 resident blocks take the 4 tiles in turn
        for (int work = blockIdx.x; work < 4; work += 4) {
            // planes of tiles one after another
            const int tile_z = work / 2;
            // grouped order: 8 rows of tiles
            const int tile_y = work % 2 / 16 * 8 + work % 2 % 16 % schedc::min(1 - work % 2 / 16 * 8, 8);
            // column by column
            const int tile_x = work % 2 % 16 / schedc::min(1 - work % 2 / 16 * 8, 8);
            // schedule loop b (BLOCK_Z): range(0, 1, 1)
            const int b = tile_z / 2;
            // schedule loop h (BLOCK_Z): range(0, 2, 1)
            const int h = tile_z;
            // schedule loop g (BLOCK_Y): range(0, 1, 1)
            const int g = tile_y;
            // schedule loop i (BLOCK_X): range(0, 4, 64)
            const int i = tile_x / 2 * 64;
            // schedule loop j (BLOCK_X): range(0, 2, 1)
            const int j = tile_x;
            schedc::mbarrier_wait(&item_full[0], work / 4 % 2);  // this work item's Q have landed
            alignas(16) float _e[64];  // 64x128 tile: 64 element(s) per thread (wgmma accumulator layout)
            schedc::fill(_e, 0.0f);
            float _peak_rows_0[9];  // this thread's tile float32[9], in registers
            float _total_rows_0[9];  // this thread's tile float32[9], in registers
            _peak_rows_0[0] = (float)-__longlong_as_double(0x7ff0000000000000ll);
            _peak_rows_0[8] = (float)-__longlong_as_double(0x7ff0000000000000ll);
            _total_rows_0[0] = 0.0f;
            _total_rows_0[8] = 0.0f;
            unsigned _p0[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p1[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p2[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p3[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p4[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p5[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p6[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            unsigned _p7[4];  // 64x16 A tile in registers: 8 bfloat16 element(s) per thread, two to a register
            // schedule loop js: range(0, 256, 128)
            for (int js = 0; js < 256; js += 128) {
                // schedule loop jt: range(0, 128, 128)
                for (int jt = 0; jt < 128; jt += 128) {
                    alignas(16) float _c_0[64];  // 64x128 tile: 64 element(s) per thread (wgmma accumulator layout)
                    schedc::fill(_c_0, 0.0f);
                    // schedule loop k: range(0, 128, 64)
                    for (int k = 0; k < 128; k += 64) {
                        // this tile's number in the ring
                        const int tile = (work / 4 * 2 + js / 128 + jt / 128) * 2 + k / 64;
                        // its stage
                        const int stage = tile % 4;
                        // the parity of its use of the stage
                        const int parity = tile / 4 % 2;
                        schedc::mbarrier_wait(&full[stage], parity);  // this tile's copies have landed
                        schedc::wgmma_fence();
                        const unsigned long long _a0_0 = schedc::wgmma_descriptor(&Q_shared[k / 64 * 4096 + (b * 8 + g * 4 + i + ii) * 64], 16, 1024, 1);
                        const unsigned long long _b0 = schedc::wgmma_descriptor(&K_shared[stage * 8192 + (b * 1024 + jt) * 64], 16, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_00(_c_0, _a0_0, _b0);
                        const unsigned long long _a1_0 = schedc::wgmma_descriptor(&Q_shared[k / 64 * 4096 + (b * 8 + g * 4 + i + ii) * 64 + 16], 16, 1024, 1);
                        const unsigned long long _b1 = schedc::wgmma_descriptor(&K_shared[stage * 8192 + (b * 1024 + jt) * 64 + 16], 16, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_00(_c_0, _a1_0, _b1);
                        const unsigned long long _a2_0 = schedc::wgmma_descriptor(&Q_shared[k / 64 * 4096 + (b * 8 + g * 4 + i + ii) * 64 + 32], 16, 1024, 1);
                        const unsigned long long _b2 = schedc::wgmma_descriptor(&K_shared[stage * 8192 + (b * 1024 + jt) * 64 + 32], 16, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_00(_c_0, _a2_0, _b2);
                        const unsigned long long _a3_0 = schedc::wgmma_descriptor(&Q_shared[k / 64 * 4096 + (b * 8 + g * 4 + i + ii) * 64 + 48], 16, 1024, 1);
                        const unsigned long long _b3 = schedc::wgmma_descriptor(&K_shared[stage * 8192 + (b * 1024 + jt) * 64 + 48], 16, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_00(_c_0, _a3_0, _b3);
                        schedc::wgmma_commit();
                        schedc::wgmma_wait<1>();
                        if (k != 0) {
                            schedc::mbarrier_arrive(&empty[(tile - 1 + 4) % 4]);  // the previous tile's products are done: its stage is free
                        }
                    }
                    // the tile before's second product, under this tile's first; the pass's products done
                    if (js != 0 || jt != 0) {
                        schedc::mbarrier_wait(&chain_full[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2], (work / 4 * 2 + js / 128 + jt / 128 - 1) / 2 % 2);  // the tile before's V has landed
                        schedc::wgmma_fence();
                        const unsigned long long _d0 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p0, _d0);
                        const unsigned long long _d1 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 16 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p1, _d1);
                        const unsigned long long _d2 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 32 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p2, _d2);
                        const unsigned long long _d3 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 48 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p3, _d3);
                        const unsigned long long _d4 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 64 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p4, _d4);
                        const unsigned long long _d5 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 80 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p5, _d5);
                        const unsigned long long _d6 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 96 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p6, _d6);
                        const unsigned long long _d7 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2 * 16384 + 0 / 64 * 8192 + 112 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p7, _d7);
                        schedc::wgmma_commit();
                        schedc::wgmma_wait<1>();
                    } else {
                        schedc::wgmma_wait<0>();
                    }
                    schedc::mbarrier_arrive(&empty[((work / 4 * 2 + js / 128 + jt / 128) * 2 + 64 / 64) % 4]);  // the pass's last stage is free
                    float _peak_prev_0[9];  // this thread's tile float32[9], in registers
                    float _peak_part2_0[72];  // this thread's tile float32[72], in registers
                    float _peak_corr_0[9];  // this thread's tile float32[9], in registers
                    float _peak_used_0[9];  // this thread's tile float32[9], in registers
                    float _total_part4_0[72];  // this thread's tile float32[72], in registers
                    // the tile crosses S's last column: its elements past it are -inf (nothing to the softmax)
                    if (256 - (js + jt) < 128) {
                        #pragma unroll
                        for (int elem = 0; elem < 64; elem += 1) {
                            const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                            const int jj = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                            _c_0[elem] = schedc::select(jj < 256 - (js + jt), _c_0[elem], (float)-__longlong_as_double(0x7ff0000000000000ll));
                        }
                    }
                    _peak_prev_0[0] = _peak_rows_0[0];
                    _peak_prev_0[8] = _peak_rows_0[8];
                    _peak_part2_0[0] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[9] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[36] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[45] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[26] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[35] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[62] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    _peak_part2_0[71] = (float)-__longlong_as_double(0x7ff0000000000000ll);
                    #pragma unroll
                    for (int elem = 0; elem < 64; elem += 1) {
                        const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                        const int jj = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                        _peak_part2_0[8 * (elem / 2 % 2) + 9 * (elem % 8)] = schedc::max(_peak_part2_0[8 * (elem / 2 % 2) + 9 * (elem % 8)], _c_0[elem]);
                    }
                    _peak_part2_0[0] = schedc::max(schedc::max(_peak_part2_0[0], _peak_part2_0[9]), schedc::max(_peak_part2_0[36], _peak_part2_0[45]));
                    _peak_part2_0[8] = schedc::max(schedc::max(_peak_part2_0[26], _peak_part2_0[35]), schedc::max(_peak_part2_0[62], _peak_part2_0[71]));
                    // the lanes of each row combine their partials (max, shfl.xor 1, 2); each gets the row's total
                    _peak_part2_0[0] = schedc::Max()(_peak_part2_0[0], __shfl_xor_sync(0xffffffffu, _peak_part2_0[0], 1));
                    _peak_part2_0[0] = schedc::Max()(_peak_part2_0[0], __shfl_xor_sync(0xffffffffu, _peak_part2_0[0], 2));
                    _peak_part2_0[8] = schedc::Max()(_peak_part2_0[8], __shfl_xor_sync(0xffffffffu, _peak_part2_0[8], 1));
                    _peak_part2_0[8] = schedc::Max()(_peak_part2_0[8], __shfl_xor_sync(0xffffffffu, _peak_part2_0[8], 2));
                    _peak_rows_0[0] = schedc::max(_peak_rows_0[0], _peak_part2_0[0]);
                    _peak_rows_0[8] = schedc::max(_peak_rows_0[8], _peak_part2_0[8]);
                    _peak_corr_0[0] = schedc::select(_peak_rows_0[0] == _peak_prev_0[0], 1.0f, schedc::fast_exp2(-0.12751743f * (_peak_rows_0[0] - _peak_prev_0[0])));
                    _peak_used_0[0] = schedc::select(_peak_rows_0[0] == (float)-__longlong_as_double(0x7ff0000000000000ll), 0.0f, _peak_rows_0[0] * -0.12751743f);
                    _total_rows_0[0] = _total_rows_0[0] * _peak_corr_0[0];
                    _peak_corr_0[8] = schedc::select(_peak_rows_0[8] == _peak_prev_0[8], 1.0f, schedc::fast_exp2(-0.12751743f * (_peak_rows_0[8] - _peak_prev_0[8])));
                    _peak_used_0[8] = schedc::select(_peak_rows_0[8] == (float)-__longlong_as_double(0x7ff0000000000000ll), 0.0f, _peak_rows_0[8] * -0.12751743f);
                    _total_rows_0[8] = _total_rows_0[8] * _peak_corr_0[8];
                    #pragma unroll
                    for (int elem = 0; elem < 64; elem += 1) {
                        const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                        const int jj = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                        _c_0[elem] = schedc::fast_exp2(_c_0[elem] * 0.12751743f + _peak_used_0[8 * (elem / 2 % 2)]);
                    }
                    _total_part4_0[0] = 0.0f;
                    _total_part4_0[9] = 0.0f;
                    _total_part4_0[36] = 0.0f;
                    _total_part4_0[45] = 0.0f;
                    _total_part4_0[26] = 0.0f;
                    _total_part4_0[35] = 0.0f;
                    _total_part4_0[62] = 0.0f;
                    _total_part4_0[71] = 0.0f;
                    #pragma unroll
                    for (int elem = 0; elem < 64; elem += 1) {
                        const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                        const int jj = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                        _total_part4_0[8 * (elem / 2 % 2) + 9 * (elem % 8)] = _total_part4_0[8 * (elem / 2 % 2) + 9 * (elem % 8)] + _c_0[elem];
                    }
                    _total_part4_0[0] = _total_part4_0[0] + _total_part4_0[9] + (_total_part4_0[36] + _total_part4_0[45]);
                    _total_part4_0[8] = _total_part4_0[26] + _total_part4_0[35] + (_total_part4_0[62] + _total_part4_0[71]);
                    // the lanes of each row combine their partials (+, shfl.xor 1, 2); each gets the row's total
                    _total_part4_0[0] = schedc::Plus()(_total_part4_0[0], __shfl_xor_sync(0xffffffffu, _total_part4_0[0], 1));
                    _total_part4_0[0] = schedc::Plus()(_total_part4_0[0], __shfl_xor_sync(0xffffffffu, _total_part4_0[0], 2));
                    _total_part4_0[8] = schedc::Plus()(_total_part4_0[8], __shfl_xor_sync(0xffffffffu, _total_part4_0[8], 1));
                    _total_part4_0[8] = schedc::Plus()(_total_part4_0[8], __shfl_xor_sync(0xffffffffu, _total_part4_0[8], 2));
                    _total_rows_0[0] = _total_rows_0[0] + _total_part4_0[0];
                    _total_rows_0[8] = _total_rows_0[8] + _total_part4_0[8];
                    schedc::wgmma_wait<0>();
                    if (js != 0 || jt != 0) {
                        schedc::mbarrier_arrive(&chain_empty[(work / 4 * 2 + js / 128 + jt / 128 - 1) % 2]);  // the tile before's products have read V's tile
                    }
                    // _p0 = _c_0's columns 0..15 as bfloat16
                    _p0[0] = schedc_pack2_bfloat16(_c_0[0], _c_0[1]);
                    _p0[1] = schedc_pack2_bfloat16(_c_0[2], _c_0[3]);
                    _p0[2] = schedc_pack2_bfloat16(_c_0[4], _c_0[5]);
                    _p0[3] = schedc_pack2_bfloat16(_c_0[6], _c_0[7]);
                    // _p1 = _c_0's columns 16..31 as bfloat16
                    _p1[0] = schedc_pack2_bfloat16(_c_0[8], _c_0[9]);
                    _p1[1] = schedc_pack2_bfloat16(_c_0[10], _c_0[11]);
                    _p1[2] = schedc_pack2_bfloat16(_c_0[12], _c_0[13]);
                    _p1[3] = schedc_pack2_bfloat16(_c_0[14], _c_0[15]);
                    // _p2 = _c_0's columns 32..47 as bfloat16
                    _p2[0] = schedc_pack2_bfloat16(_c_0[16], _c_0[17]);
                    _p2[1] = schedc_pack2_bfloat16(_c_0[18], _c_0[19]);
                    _p2[2] = schedc_pack2_bfloat16(_c_0[20], _c_0[21]);
                    _p2[3] = schedc_pack2_bfloat16(_c_0[22], _c_0[23]);
                    // _p3 = _c_0's columns 48..63 as bfloat16
                    _p3[0] = schedc_pack2_bfloat16(_c_0[24], _c_0[25]);
                    _p3[1] = schedc_pack2_bfloat16(_c_0[26], _c_0[27]);
                    _p3[2] = schedc_pack2_bfloat16(_c_0[28], _c_0[29]);
                    _p3[3] = schedc_pack2_bfloat16(_c_0[30], _c_0[31]);
                    // _p4 = _c_0's columns 64..79 as bfloat16
                    _p4[0] = schedc_pack2_bfloat16(_c_0[32], _c_0[33]);
                    _p4[1] = schedc_pack2_bfloat16(_c_0[34], _c_0[35]);
                    _p4[2] = schedc_pack2_bfloat16(_c_0[36], _c_0[37]);
                    _p4[3] = schedc_pack2_bfloat16(_c_0[38], _c_0[39]);
                    // _p5 = _c_0's columns 80..95 as bfloat16
                    _p5[0] = schedc_pack2_bfloat16(_c_0[40], _c_0[41]);
                    _p5[1] = schedc_pack2_bfloat16(_c_0[42], _c_0[43]);
                    _p5[2] = schedc_pack2_bfloat16(_c_0[44], _c_0[45]);
                    _p5[3] = schedc_pack2_bfloat16(_c_0[46], _c_0[47]);
                    // _p6 = _c_0's columns 96..111 as bfloat16
                    _p6[0] = schedc_pack2_bfloat16(_c_0[48], _c_0[49]);
                    _p6[1] = schedc_pack2_bfloat16(_c_0[50], _c_0[51]);
                    _p6[2] = schedc_pack2_bfloat16(_c_0[52], _c_0[53]);
                    _p6[3] = schedc_pack2_bfloat16(_c_0[54], _c_0[55]);
                    // _p7 = _c_0's columns 112..127 as bfloat16
                    _p7[0] = schedc_pack2_bfloat16(_c_0[56], _c_0[57]);
                    _p7[1] = schedc_pack2_bfloat16(_c_0[58], _c_0[59]);
                    _p7[2] = schedc_pack2_bfloat16(_c_0[60], _c_0[61]);
                    _p7[3] = schedc_pack2_bfloat16(_c_0[62], _c_0[63]);
                    #pragma unroll
                    for (int elem = 0; elem < 64; elem += 1) {
                        const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                        const int ll = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                        _e[elem] = _e[elem] * _peak_corr_0[8 * (elem / 2 % 2)];
                    }
                    // the last tile's second product
                    if (js == 128 && jt == 0) {
                        schedc::mbarrier_wait(&chain_full[(work / 4 * 2 + js / 128 + jt / 128) % 2], (work / 4 * 2 + js / 128 + jt / 128) / 2 % 2);  // this tile's V has landed
                        schedc::wgmma_fence();
                        const unsigned long long _d0 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p0, _d0);
                        const unsigned long long _d1 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 16 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p1, _d1);
                        const unsigned long long _d2 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 32 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p2, _d2);
                        const unsigned long long _d3 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 48 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p3, _d3);
                        const unsigned long long _d4 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 64 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p4, _d4);
                        const unsigned long long _d5 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 80 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p5, _d5);
                        const unsigned long long _d6 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 96 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p6, _d6);
                        const unsigned long long _d7 = schedc::wgmma_descriptor(&V_shared[(work / 4 * 2 + js / 128 + jt / 128) % 2 * 16384 + 0 / 64 * 8192 + 112 * 64], 16384, 1024, 1);
                        schedc_wgmma_m64n128k16_float32_bf16_r1(_e, _p7, _d7);
                        schedc::wgmma_commit();
                        schedc::wgmma_wait<0>();
                        schedc::mbarrier_arrive(&chain_empty[(work / 4 * 2 + js / 128 + jt / 128) % 2]);  // this tile's products have read V's tile
                    }
                }
            }
            #pragma unroll
            for (int elem = 0; elem < 64; elem += 1) {
                const int iiii = 16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2);  // the element's row in the tile
                const int ll = 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2;  // and its column
                _e[elem] = _e[elem] / _total_rows_0[8 * (elem / 2 % 2)];
            }
            float _peak__split_rows_0[9];  // this thread's tile float32[9], in registers
            _peak__split_rows_0[0] = _peak_rows_0[0];
            _peak__split_rows_0[8] = _peak_rows_0[8];
            // the thread's lane in the tile
            const int _peak__split_lane_0 = threadIdx.x % 128;
            // one lane of each row's stores its peak__split
            if (_peak__split_lane_0 % 2 == 0 && _peak__split_lane_0 / 2 % 2 == 0) {
                // the row lies inside C
                if (16 * (_peak__split_lane_0 / 32) + _peak__split_lane_0 % 32 / 4 < schedc::min(16 - (h * 4 + j * 8), 4)) {
                    peak__split[j * 8 + h * 4 + 16 * (_peak__split_lane_0 / 32) + _peak__split_lane_0 % 32 / 4] = _peak__split_rows_0[0];
                }
                // the row lies inside C
                if (16 * (_peak__split_lane_0 / 32) + _peak__split_lane_0 % 32 / 4 + 8 < schedc::min(16 - (h * 4 + j * 8), 4)) {
                    peak__split[j * 8 + h * 4 + 16 * (_peak__split_lane_0 / 32) + _peak__split_lane_0 % 32 / 4 + 8] = _peak__split_rows_0[8];
                }
            }
            float _total__split_rows_0[9];  // this thread's tile float32[9], in registers
            _total__split_rows_0[0] = _total_rows_0[0];
            _total__split_rows_0[8] = _total_rows_0[8];
            // the thread's lane in the tile
            const int _total__split_lane_0 = threadIdx.x % 128;
            // one lane of each row's stores its total__split
            if (_total__split_lane_0 % 2 == 0 && _total__split_lane_0 / 2 % 2 == 0) {
                // the row lies inside C
                if (16 * (_total__split_lane_0 / 32) + _total__split_lane_0 % 32 / 4 < schedc::min(16 - (h * 4 + j * 8), 4)) {
                    total__split[j * 8 + h * 4 + 16 * (_total__split_lane_0 / 32) + _total__split_lane_0 % 32 / 4] = _total__split_rows_0[0];
                }
                // the row lies inside C
                if (16 * (_total__split_lane_0 / 32) + _total__split_lane_0 % 32 / 4 + 8 < schedc::min(16 - (h * 4 + j * 8), 4)) {
                    total__split[j * 8 + h * 4 + 16 * (_total__split_lane_0 / 32) + _total__split_lane_0 % 32 / 4 + 8] = _total__split_rows_0[8];
                }
            }
            #pragma unroll
            for (int elem = 0; elem < 64; elem += 2) {
                if (16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2) < schedc::min(16 - (h * 4 + j * 8), 4) && 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2 < 128) *reinterpret_cast<schedc::vector_type<8>::type*>(&O__split[(h * 4 + j * 8) * 128] + (16 * (wg_lane / 32) + wg_lane % 32 / 4 + 8 * (elem / 2 % 2)) * 128 + 8 * (elem / 4) + 2 * (wg_lane % 4) + elem % 2) = *reinterpret_cast<schedc::vector_type<8>::type*>(&_e[elem]);
            }
            schedc::mbarrier_arrive(&item_empty[0]);  // this work item's products have read its Q
        }
    }
}

extern "C" __global__ void __launch_bounds__(128)
decode_split__combine__gpu__(__nv_bfloat16* __restrict__ O, const float* __restrict__ O__split, const float* __restrict__ peak__split, const float* __restrict__ total__split, float* __restrict__ O__top, float* __restrict__ O__whole)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");  // decode_split__partial__gpu__ has finished: its writes are visible
    // schedule loop b (BLOCK_X): range(0, 1, 1)
    const int b = blockIdx.x / 8;
    // schedule loop h (BLOCK_X): range(0, 2, 1)
    const int h = blockIdx.x / 4;
    // schedule loop g (BLOCK_X): range(0, 1, 1)
    const int g = blockIdx.x / 4 % 1;
    // schedule loop i (BLOCK_X): range(0, 4, 1)
    const int i = blockIdx.x % 4;
    // schedule loop l (BLOCK_Y): range(0, 128, 128)
    const int l = blockIdx.y * 128;
    // schedule loop lt (THREAD_X): range(0, 128, 1)
    const int lt = threadIdx.x;
    O__top[((b * 2 + h + g) * 4 + i) * 128 + l + lt] = schedc::max(peak__split[(b * 2 + h + g) * 4 + i], peak__split[8 + (b * 2 + h + g) * 4 + i]);
    O__whole[((b * 2 + h + g) * 4 + i) * 128 + l + lt] = schedc::select(total__split[(b * 2 + h + g) * 4 + i] == 0.0f, 0.0f, total__split[(b * 2 + h + g) * 4 + i] * schedc::exp(-0.088388346f * (O__top[((b * 2 + h + g) * 4 + i) * 128 + l + lt] - peak__split[(b * 2 + h + g) * 4 + i]))) + schedc::select(total__split[8 + (b * 2 + h + g) * 4 + i] == 0.0f, 0.0f, total__split[8 + (b * 2 + h + g) * 4 + i] * schedc::exp(-0.088388346f * (O__top[((b * 2 + h + g) * 4 + i) * 128 + l + lt] - peak__split[8 + (b * 2 + h + g) * 4 + i])));
    O[((b * 2 + h + g) * 4 + i) * 128 + l + lt] = schedc::convert<__nv_bfloat16>((schedc::select(total__split[(b * 2 + h + g) * 4 + i] == 0.0f, 0.0f, total__split[(b * 2 + h + g) * 4 + i] * schedc::exp(-0.088388346f * (O__top[((b * 2 + h + g) * 4 + i) * 128 + l + lt] - peak__split[(b * 2 + h + g) * 4 + i])) * O__split[((b * 2 + h + g) * 4 + i) * 128 + l + lt]) + schedc::select(total__split[8 + (b * 2 + h + g) * 4 + i] == 0.0f, 0.0f, total__split[8 + (b * 2 + h + g) * 4 + i] * schedc::exp(-0.088388346f * (O__top[((b * 2 + h + g) * 4 + i) * 128 + l + lt] - peak__split[8 + (b * 2 + h + g) * 4 + i])) * O__split[(8 + (b * 2 + h + g) * 4 + i) * 128 + l + lt])) / O__whole[((b * 2 + h + g) * 4 + i) * 128 + l + lt]);
}

#if !defined(__CUDACC_RTC__)
// Host launchers: C-callable; they return the launch's cudaError_t (0 on success).
extern "C" int decode_split(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* O__split, float* peak__split, float* total__split, float* O__top, float* O__whole, CUtensorMap Q_map, CUtensorMap K_map, CUtensorMap V_map)
{
    // kernel 1 of 2
    cudaFuncSetAttribute(decode_split__partial__gpu__, cudaFuncAttributeMaxDynamicSharedMemorySize, 148736);
    decode_split__partial__gpu__<<<dim3(4, 1, 1), dim3(256, 1, 1), 148736>>>(Q, K, V, O__split, peak__split, total__split, Q_map, K_map, V_map);
    {
        const int status = (int)cudaGetLastError();
        if (status != 0) return status;
    }
    // kernel 2 of 2
    {
        cudaLaunchAttribute overlap[1];
        overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        overlap[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t config = {dim3(8, 1, 1), dim3(128, 1, 1), 0, 0, overlap, 1};
        cudaLaunchKernelEx(&config, decode_split__combine__gpu__, O, O__split, peak__split, total__split, O__top, O__whole);
    }
    return (int)cudaGetLastError();
}

#endif  // !defined(__CUDACC_RTC__)
