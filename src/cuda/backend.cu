/* The CUDA backend's dispatch table: ordered, fastest first; each entry says why it refuses a plan. */
#include "convt_s2_host.h"
#include "igemm_host.h"

#include <cuda_runtime.h>
#include <stdio.h>

int cf_cuda_device_ok(int *sm_count, char *reason, size_t reason_size)
{
    int count = 0, dev = 0, major = 0, sms = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(reason, reason_size, "no CUDA device (%s)", e == cudaSuccess ? "none found" : cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        return 0;
    }
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        snprintf(reason, reason_size, "cannot query CUDA device %d", dev);
        cudaGetLastError();
        return 0;
    }
    if (major < 9) {
        snprintf(reason, reason_size, "CUDA device %d has compute capability %d.x; convfuse's kernels need 9.0+", dev, major);
        return 0;
    }
    if (sm_count)
        *sm_count = sms;
    return 1;
}

/* The implicit-GEMM kernel in four named paths: products (TF32 | 3xTF32) x channel softmax served in one
 * visit (all of C_out in one chunk, or no softmax) or in two visits over channel chunks. */
#define CF_IG_IMPL(ident, label, products, chunked)                                                         \
    static bool ident##_supports(const struct cf_plan *plan, char *why, size_t n)                          \
    {                                                                                                       \
        return cf_ig_supports(plan, products, chunked, why, n);                                             \
    }                                                                                                       \
    static const cf_impl_t ident = {label, CF_BACKEND_CUDA, ident##_supports, cf_ig_workspace_bytes, cf_ig_execute};

CF_IG_IMPL(ig_tf32, "cuda_igemm_tf32", 1, false)
CF_IG_IMPL(ig_3xtf32, "cuda_igemm_3xtf32", 3, false)
CF_IG_IMPL(ig_tf32_chunked, "cuda_igemm_tf32_chunked_softmax", 1, true)
CF_IG_IMPL(ig_3xtf32_chunked, "cuda_igemm_3xtf32_chunked_softmax", 3, true)

/* Stride-2 transposed convolutions (k4 s2 p1, KB2-91's) on the warp-specialised kernel, convt_s2.cuh. */
static const cf_impl_t ct_tf32 = {"cuda_convt_s2_tf32", CF_BACKEND_CUDA, cf_ct_supports, cf_ct_workspace_bytes,
                                  cf_ct_execute};

extern "C" const cf_impl_t *const cf_cuda_impls[] = {&ct_tf32, &ig_tf32, &ig_3xtf32, &ig_tf32_chunked, &ig_3xtf32_chunked, NULL};
