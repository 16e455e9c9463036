/* Throughput probe (development only): TF32 wgmma issue rate on one SM for the shapes convt_s2 could use.
 * Each CTA (one per SM) runs `wgs` warpgroups, each issuing `reps` groups of 16 wgmma (k8 steps over 8 distinct
 * shared-memory operand blocks, 16-byte shifted A starts as convt_s2's taps), then commit and wait.
 * Prints TFLOP/s and cycles per wgmma per SM, for SS and RS, N = 64 / 128 / 256, 1-3 warpgroups.
 * Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -I src/cuda dev/wgmma_rate.cu -o wgmma_rate */
#include "wgmma.cuh"

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                                 \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* operand lists for N/2 accumulators */
#define R8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define R32(b) R8(b), R8(b + 8), R8(b + 16), R8(b + 24)

__device__ __forceinline__ void ss64(float (&d)[32], uint64_t a, uint64_t b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
                 "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1;\n"
                 : R32(0) : "l"(a), "l"(b));
}
__device__ __forceinline__ void rs64(float (&d)[32], const uint32_t (&x)[4], uint64_t b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
                 "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1;\n"
                 : R32(0) : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "l"(b));
}
__device__ __forceinline__ void ss128(float (&d)[64], uint64_t a, uint64_t b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
                 "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
                 "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
                 " %64, %65, 1, 1, 1;\n"
                 : R32(0), R32(32) : "l"(a), "l"(b));
}
__device__ __forceinline__ void rs128(float (&d)[64], const uint32_t (&x)[4], uint64_t b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
                 "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
                 "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
                 " {%64,%65,%66,%67}, %68, 1, 1, 1;\n"
                 : R32(0), R32(32) : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "l"(b));
}

/* MODE 0 SS, 1 RS; N 64 or 128 (N=256 as two n128 accumulators would need 128 registers: not tried) */
template <int MODE, int N>
__global__ void __launch_bounds__(384, 1) rate(int reps, float *out)
{
    extern __shared__ __align__(1024) unsigned char sm[];
    /* A blocks: 8 k-steps x (66 positions x 16 B per K core, 2 K cores: LBO = 1168 B as convt_s2's planes) */
    float *f = reinterpret_cast<float *>(sm);
    const int words = 96 * 1024 / 4;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
        f[i] = (float)((i * 2654435761u >> 20) & 255) / 256.f - 0.5f; /* nonzero, small */
    cf::fence_proxy_async();
    __syncthreads();
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
    const uint32_t abase = base, bbase = base + 32 * 1024;
    const int wg = threadIdx.x >> 7;
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
        d[i] = 0.f;
    uint32_t x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        x[i] = __float_as_uint(f[threadIdx.x * 4 + i]) & 0xffffe000u;
    const uint64_t hi_a = (uint64_t)(128 >> 4) << 32, hi_b = (uint64_t)(256 >> 4) << 32;
    for (int r = 0; r < reps; ++r) {
        cf::wgmma_fence();
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            const uint32_t aa = abase + (s & 7) * 2336 + 16 * ((s + wg) & 3);
            const uint32_t bb = bbase + (s & 7) * (N == 64 ? 2048 : 4096);
            const uint64_t da = (uint64_t)((aa >> 4) & 0x3fff) | (uint64_t)(1168 >> 4) << 16 | hi_a;
            const uint64_t db = (uint64_t)((bb >> 4) & 0x3fff) | (uint64_t)(128 >> 4) << 16 | hi_b;
            if constexpr (MODE == 0 && N == 64) ss64(*reinterpret_cast<float(*)[32]>(d), da, db);
            if constexpr (MODE == 1 && N == 64) rs64(*reinterpret_cast<float(*)[32]>(d), x, db);
            if constexpr (MODE == 0 && N == 128) ss128(*reinterpret_cast<float(*)[64]>(d), da, db);
            if constexpr (MODE == 1 && N == 128) rs128(*reinterpret_cast<float(*)[64]>(d), x, db);
        }
        cf::wgmma_commit();
        cf::wgmma_wait<0>();
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
        s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <int MODE, int N>
static void run(int sms, int wgs, int reps, float *out)
{
    auto k = rate<MODE, N>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    k<<<sms, 128 * wgs, 96 * 1024>>>(reps, out);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int t = 0; t < 5; ++t) {
        CK(cudaEventRecord(e0));
        k<<<sms, 128 * wgs, 96 * 1024>>>(reps, out);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms < best ? ms : best;
    }
    int clk_khz;
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    const double n_wgmma = (double)reps * 16 * wgs; /* per SM */
    const double flop = 2.0 * 64 * N * 8 * n_wgmma * sms;
    const double cyc = best * 1e-3 * clk_khz * 1e3 / n_wgmma;
    printf("%s m64n%dk8 tf32, %d warpgroup(s): %.3f ms, %.1f TFLOP/s, %.1f cycles per wgmma per SM at %d MHz "
           "(ideal at 1024 FMA/clk: %d)\n",
           MODE ? "RS" : "SS", N, wgs, best, flop / best / 1e9, cyc, clk_khz / 1000, 64 * N * 8 / 1024);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main()
{
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    float *out;
    CK(cudaMalloc(&out, (size_t)sms * 384 * sizeof(float)));
    const int reps = 4000;
    for (int wgs = 1; wgs <= 3; ++wgs) {
        run<0, 64>(sms, wgs, reps, out);
        run<1, 64>(sms, wgs, reps, out);
        run<0, 128>(sms, wgs, reps / 2, out);
        run<1, 128>(sms, wgs, reps / 2, out);
    }
    CK(cudaFree(out));
    return 0;
}
