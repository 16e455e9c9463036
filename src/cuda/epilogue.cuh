/* Chain ops as device functions. Per-channel affine ops are folded into one x*a + b per stage
 * (cf_epi_fold_affine, in double, once per CTA); the rest are pointwise (cf_epi_pointwise). Adding an op:
 * one case in the fold or in the pointwise switch, and its stage kind in igemm.cu. */
#ifndef CONVFUSE_CUDA_EPILOGUE_CUH
#define CONVFUSE_CUDA_EPILOGUE_CUH

#include "igemm.cuh"

#include <math.h>

namespace cf {

/* max that propagates NaN like torch.max/softmax (fmaxf would drop it). */
__device__ __forceinline__ float cf_max_nan(float a, float b)
{
    return (b > a || b != b) ? b : a;
}

/* Compose (x -> x*a + b) with op, for channel c. */
__device__ __forceinline__ void cf_epi_fold_affine(const cf_ig_op &op, int c, double *a, double *b)
{
    double sa = 1.0, sb = 0.0; /* the op as x*sa + sb */
    switch (op.kind) {
    case CF_OP_ADD_CHANNEL: /* x + v[c] */
        sb = op.a[c];
        break;
    case CF_OP_MUL_SCALAR: /* x * s */
        sa = op.scalar;
        break;
    case CF_OP_ADD_SCALAR: /* x + s */
        sb = op.scalar;
        break;
    case CF_OP_AFFINE_CHANNEL: /* x * a[c] + b[c] */
        sa = op.a[c];
        sb = op.b[c];
        break;
    case CF_OP_BATCH_NORM:
        if (op.bn_folded) { /* training: scale/shift from the statistics pass */
            sa = op.a[c];
            sb = op.b[c];
        } else { /* inference: gamma * (x - rm) / sqrt(rv + eps) + beta */
            const double inv = 1.0 / sqrt((double)op.rv[c] + op.eps);
            sa = (op.a ? (double)op.a[c] : 1.0) * inv;
            sb = (op.b ? (double)op.b[c] : 0.0) - (double)op.rm[c] * sa;
        }
        break;
    default:
        break;
    }
    *b = *b * sa + sb;
    *a = *a * sa;
}

/* 1/x through MUFU.RCP (1 ulp; rcp(inf) = 0). __frcp_rn would add a slow-path call per element. */
__device__ __forceinline__ float cf_rcp(float x)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* 2^x through MUFU.EX2 (2 ulp); __expf adds range fix-ups we do not need around it. */
__device__ __forceinline__ float cf_ex2(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

#define CF_LOG2E 1.4426950408889634f

/* sigmoid: 1 / (1 + exp(-x)); x = -inf gives rcp(inf) = 0, NaN stays NaN. */
__device__ __forceinline__ float cf_sigmoid(float x)
{
    return cf_rcp(1.f + cf_ex2(-CF_LOG2E * x));
}

/* relu: max(x, 0), NaN stays NaN (fmaxf would drop it). */
__device__ __forceinline__ float cf_relu(float x)
{
    return x > 0.f ? x : (x != x ? x : 0.f);
}

/* tanh and gelu (x * (1 + erf(x / sqrt 2)) / 2) are called, not inlined: inlined over a 128-element
 * register tile they made the kernel 2.8 MB of SASS and instruction fetch dominated (docs/kb2_91.md). */
static __device__ __noinline__ float cf_tanh(float x)
{
    return tanhf(x);
}

static __device__ __noinline__ float cf_gelu(float x)
{
    return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}

} // namespace cf

#endif
