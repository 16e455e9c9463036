/* Probe: wgmma RS TF32 layouts and the no-swizzle K-major B descriptor, checked against a CPU GEMM on small
 * integers (exact in TF32). Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I src/cuda dev/wgmma_probe.cu
 * Prints max |error| for N = 128, 64, 32 and both (lbo, sbo) conventions; the right one gives 0. */
#include "wgmma.cuh"

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

/* B element (n, k) of one k8 step: core matrix (n/8, k/4), row n%8, column k%4 */
__host__ __device__ inline int boff(int n, int k, int kcore_stride, int ncore_stride)
{
    return ((n >> 3) * ncore_stride + (k >> 2) * kcore_stride) / 4 + (n & 7) * 4 + (k & 3);
}

template <int N>
__global__ void probe(const float *A, const float *B, float *D, uint32_t lbo, uint32_t sbo, int shift)
{
    __shared__ __align__(1024) float sb_raw[N * 8 + 64];
    float *sb = sb_raw + shift; /* shift floats: tests the alignment the descriptor needs */
    for (int e = threadIdx.x; e < N * 8; e += blockDim.x) {
        const int n = e / 8, k = e % 8;
        sb[boff(n, k, 128, 256)] = B[n * 8 + k]; /* stored with K-adjacent = 128 B, N-adjacent = 256 B */
    }
    cf::fence_proxy_async();
    __syncthreads();
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t a[4];
    a[0] = __float_as_uint(A[(16 * w + g) * 8 + t]);
    a[1] = __float_as_uint(A[(16 * w + g + 8) * 8 + t]);
    a[2] = __float_as_uint(A[(16 * w + g) * 8 + t + 4]);
    a[3] = __float_as_uint(A[(16 * w + g + 8) * 8 + t + 4]);
    float d[N / 2];
    for (int i = 0; i < N / 2; ++i)
        d[i] = 0.f;
    cf::wgmma_fence();
    if constexpr (N == 128)
        cf::wgmma_m64n128k8_tf32<0>(d, a, cf::wgmma_desc(sb, lbo, sbo));
    else if constexpr (N == 64)
        cf::wgmma_m64n64k8_tf32<0>(d, a, cf::wgmma_desc(sb, lbo, sbo));
    else
        cf::wgmma_m64n32k8_tf32<0>(d, a, cf::wgmma_desc(sb, lbo, sbo));
    cf::wgmma_commit();
    cf::wgmma_wait<0>();
    for (int i = 0; i < N / 8; ++i) {
        D[(16 * w + g) * N + 8 * i + 2 * t] = d[4 * i];
        D[(16 * w + g) * N + 8 * i + 2 * t + 1] = d[4 * i + 1];
        D[(16 * w + g + 8) * N + 8 * i + 2 * t] = d[4 * i + 2];
        D[(16 * w + g + 8) * N + 8 * i + 2 * t + 1] = d[4 * i + 3];
    }
}

template <int N>
static void run(uint32_t lbo, uint32_t sbo, int shift = 0)
{
    float hA[64 * 8], hB[N * 8], hD[64 * N];
    srand(7);
    for (int i = 0; i < 64 * 8; ++i)
        hA[i] = (float)(rand() % 7 - 3);
    for (int i = 0; i < N * 8; ++i)
        hB[i] = (float)(rand() % 7 - 3);
    float *A, *B, *D;
    cudaMalloc(&A, sizeof hA);
    cudaMalloc(&B, sizeof hB);
    cudaMalloc(&D, sizeof hD);
    cudaMemcpy(A, hA, sizeof hA, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hB, sizeof hB, cudaMemcpyHostToDevice);
    cudaMemset(D, 0xff, sizeof hD); /* NaN */
    probe<N><<<1, 128>>>(A, B, D, lbo, sbo, shift);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(hD, D, sizeof hD, cudaMemcpyDeviceToHost);
    double err = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < N; ++n) {
            double ref = 0;
            for (int k = 0; k < 8; ++k)
                ref += (double)hA[m * 8 + k] * hB[n * 8 + k];
            const double d = hD[m * N + n] - ref;
            err = (d != d || fabs(d) > err) ? (d != d ? 1e30 : fabs(d)) : err;
        }
    printf("wgmma m64n%dk8 tf32 RS, lbo=%u sbo=%u, B at +%d B: %s, max |err| = %g\n", N, lbo, sbo, shift * 4, cudaGetErrorString(e), err);
    cudaFree(A);
    cudaFree(B);
    cudaFree(D);
}

int main()
{
    run<128>(128, 256);
    run<128>(256, 128);
    run<64>(128, 256);
    run<32>(128, 256);
    run<128>(128, 256, 4);  /* 16-byte aligned only */
    run<128>(128, 256, 32); /* 128-byte aligned */
    run<32>(128, 256, 4);
    return 0;
}
