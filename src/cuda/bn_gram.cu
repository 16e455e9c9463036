/* Training batch-norm statistics from the input's moments: kernels and host side (bn_gram.cuh has the method). */
#include "bn_gram.cuh"
#include "bn_gram_host.h"
#include "epilogue.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#define CF_CUDA_TRY(call)                                                                                   \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess)                                                                              \
            return cf_error(CF_STATUS_CUDA_ERROR, "%s: %s (%s)", #call, cudaGetErrorString(e_),             \
                            cudaGetErrorName(e_));                                                          \
    } while (0)

namespace cf {

constexpr int GKH = CF_GRAM_KH, GKW = CF_GRAM_KW, GEO = CF_GRAM_EO, GNCC = 2 * CF_GRAM_KW - 1;

/* index of the offset (oy, ox) among the EO offsets */
__host__ __device__ constexpr int gram_oidx(int oy, int ox)
{
    return oy == 0 ? ox : GKW + (oy - 1) * (2 * GKW - 1) + ox + GKW - 1;
}

__device__ __forceinline__ float gram_q(const float4 &q, int k)
{
    return k == 0 ? q.x : k == 1 ? q.y : k == 2 ? q.z : q.w;
}

/* The shift s_c: the mean of channel c's first input row (of image 0), by warp c in a fixed order, so every kernel
 * gets the same bits. Against the spread of x, E[x - s] is then small, which keeps the accumulated second moments
 * near the covariance (a guard term, see cf_gram_stats_kernel). */
__device__ void gram_shifts(const cf_gram_params &p, float *shift)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < p.cin) {
        const float *row = p.src + (size_t)warp * p.h * p.w;
        float s = 0.f;
        for (int v = lane; v < p.w; v += 32)
            s += __ldg(row + v);
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            shift[warp] = s / (float)p.w;
    }
    __syncthreads();
}

/* A thread's sums: second moments of its 2 x 2 channel pairs over the EO offsets, first moments of its 2 rows'
 * channels. fp32 over at most a few rows of products; the CTA and class sums are in double. */
struct gram_acc {
    float s[2][2][GEO];
    float f[2];
};

/* One 4-column chunk of a row: the windows hold the partner rows' quads at chunk c-1 (P), c (C) and c+1 (X). */
template <int P, int C, int X>
__device__ __forceinline__ void gram_chunk(gram_acc &acc, float4 (&win)[2][GKH][3], const float *a0, const float *a1,
                                           const float *b, int cs, int ls, int c, bool edge, int ow)
{
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int oy = 0; oy < GKH; ++oy)
            win[j][oy][X] = *reinterpret_cast<const float4 *>(b + j * cs + oy * ls + 4 * (c + 1));
    float4 a[2] = {*reinterpret_cast<const float4 *>(a0 + 4 * c), *reinterpret_cast<const float4 *>(a1 + 4 * c)};
    if (edge) { /* only the core columns [kw-1, OW) belong to this class */
        const int v = 4 * c;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            a[i].x = (v + 0 >= GKW - 1 && v + 0 < ow) ? a[i].x : 0.f;
            a[i].y = (v + 1 >= GKW - 1 && v + 1 < ow) ? a[i].y : 0.f;
            a[i].z = (v + 2 >= GKW - 1 && v + 2 < ow) ? a[i].z : 0.f;
            a[i].w = (v + 3 >= GKW - 1 && v + 3 < ow) ? a[i].w : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float av = gram_q(a[i], e);
            acc.f[i] += av;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
                    for (int ox = oy == 0 ? 0 : -(GKW - 1); ox < GKW; ++ox) {
                        const int k = 4 + e + ox; /* position in the 12-float window P|C|X */
                        const float bv = k < 4 ? gram_q(win[j][oy][P], k)
                                               : k < 8 ? gram_q(win[j][oy][C], k - 4) : gram_q(win[j][oy][X], k - 8);
                        acc.s[i][j][gram_oidx(oy, ox)] = fmaf(av, bv, acc.s[i][j][gram_oidx(oy, ox)]);
                    }
        }
}

/* Main CTA: core rows of one image, bands of rb rows staged (shifted) in shared memory, each row slot walking
 * its rows chunk by chunk with register windows rotated through three slots (no moves). */
__device__ void gram_main(const cf_gram_params &p, float *sm, const float *shift, int m, int g, int cig, int cjg,
                          gram_acc &acc)
{
    const int n = m / p.ctas_per_image, grp = m % p.ctas_per_image;
    const size_t hw = (size_t)p.h * p.w;
    const float *img = p.src + (size_t)n * p.cin * hw;
    const bool vec = (p.w % 4 == 0) && ((uintptr_t)p.src % 16 == 0);
    const int qpr = p.ls / 4;
    for (int bi = 0; bi < p.bands_per_cta; ++bi) {
        const int band = grp * p.bands_per_cta + bi;
        if (band >= p.bands)
            break;
        const int ub = GKH - 1 + band * p.rb, ue = min(ub + p.rb, p.oh), nrows = ue - ub + GKH - 1;
        __syncthreads(); /* the previous band's rows are read */
        const int total = p.cinp * nrows * qpr;
        for (int i = threadIdx.x; i < total; i += blockDim.x) {
            const int q = i % qpr, r = (i / qpr) % nrows, c = i / (qpr * nrows);
            const int v0 = 4 * q - 4;
            float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
            if (c < p.cin) {
                const float *row = img + (size_t)c * hw + (size_t)(ub + r) * p.w;
                const float s = shift[c];
                if (vec && v0 >= 0 && v0 + 3 < p.w) {
                    const float4 x = __ldg(reinterpret_cast<const float4 *>(row + v0));
                    val = make_float4(x.x - s, x.y - s, x.z - s, x.w - s);
                } else {
                    val.x = (v0 + 0 >= 0 && v0 + 0 < p.w) ? __ldg(row + v0 + 0) - s : 0.f;
                    val.y = (v0 + 1 >= 0 && v0 + 1 < p.w) ? __ldg(row + v0 + 1) - s : 0.f;
                    val.z = (v0 + 2 >= 0 && v0 + 2 < p.w) ? __ldg(row + v0 + 2) - s : 0.f;
                    val.w = (v0 + 3 >= 0 && v0 + 3 < p.w) ? __ldg(row + v0 + 3) - s : 0.f;
                }
            }
            *reinterpret_cast<float4 *>(sm + (size_t)c * p.cs + r * p.ls + 4 * q) = val;
        }
        __syncthreads();
        if (g >= p.slots)
            continue;
        for (int u = ub + g; u < ue; u += p.slots) {
            const int r = u - ub;
            const float *a0 = sm + (size_t)(2 * cig) * p.cs + r * p.ls + 4, *a1 = a0 + p.cs;
            const float *b = sm + (size_t)(2 * cjg) * p.cs + r * p.ls + 4;
            float4 win[2][GKH][3];
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int oy = 0; oy < GKH; ++oy) {
                    win[j][oy][0] = *reinterpret_cast<const float4 *>(b + j * p.cs + oy * p.ls + 4 * (p.c0 - 1));
                    win[j][oy][1] = *reinterpret_cast<const float4 *>(b + j * p.cs + oy * p.ls + 4 * p.c0);
                }
            for (int c = p.c0;;) {
                gram_chunk<0, 1, 2>(acc, win, a0, a1, b, p.cs, p.ls, c, 4 * c < GKW - 1 || 4 * c + 3 >= p.ow, p.ow);
                if (++c > p.c1)
                    break;
                gram_chunk<1, 2, 0>(acc, win, a0, a1, b, p.cs, p.ls, c, 4 * c < GKW - 1 || 4 * c + 3 >= p.ow, p.ow);
                if (++c > p.c1)
                    break;
                gram_chunk<2, 0, 1>(acc, win, a0, a1, b, p.cs, p.ls, c, 4 * c < GKW - 1 || 4 * c + 3 >= p.ow, p.ow);
                if (++c > p.c1)
                    break;
            }
        }
    }
}

/* rows (or columns) of class index rc: the kh-1 top rows one by one, the core [kh-1, OH), the bottom rows */
__device__ __forceinline__ void gram_class_range(int rc, int k, int o, int *begin, int *end)
{
    if (rc < k - 1) {
        *begin = rc;
        *end = rc + 1;
    } else if (rc == k - 1) {
        *begin = k - 1;
        *end = o;
    } else {
        *begin = o + rc - k;
        *end = *begin + 1;
    }
}

/* Frame CTA: the positions of one frame class in a slice of the batch, products straight from global memory
 * (the frame is ~6% of the pixels). */
__device__ void gram_frame(const cf_gram_params &p, const float *shift, int f, int g, int cig, int cjg, gram_acc &acc)
{
    int k = 0;
    while (k < CF_GRAM_NCLS && !(f >= p.cls_first[k] && f < p.cls_first[k] + p.cls_count[k] && k != CF_GRAM_CORE))
        ++k;
    if (k == CF_GRAM_NCLS || g >= p.slots)
        return;
    int u0, u1, v0, v1;
    gram_class_range(k / GNCC, GKH, p.oh, &u0, &u1);
    gram_class_range(k % GNCC, GKW, p.ow, &v0, &v1);
    const int nc = v1 - v0;
    const long long per = (long long)(u1 - u0) * nc, total = per * p.n, slice = f - p.cls_first[k];
    const long long t0 = total * slice / p.cls_count[k], t1 = total * (slice + 1) / p.cls_count[k];
    const size_t hw = (size_t)p.h * p.w;
    for (long long t = t0 + g; t < t1; t += p.slots) {
        const int n = (int)(t / per), rem = (int)(t % per), u = u0 + rem / nc, v = v0 + rem % nc;
        const float *img = p.src + (size_t)n * p.cin * hw;
        float a[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int ci = 2 * cig + i;
            a[i] = ci < p.cin ? __ldg(img + ci * hw + (size_t)u * p.w + v) - shift[ci] : 0.f;
            acc.f[i] += a[i];
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int cj = 2 * cjg + j;
#pragma unroll
            for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
                for (int ox = oy == 0 ? 0 : -(GKW - 1); ox < GKW; ++ox) {
                    const int uu = u + oy, vv = v + ox;
                    const float bv = (cj < p.cin && uu < p.h && vv >= 0 && vv < p.w)
                                         ? __ldg(img + cj * hw + (size_t)uu * p.w + vv) - shift[cj]
                                         : 0.f;
#pragma unroll
                    for (int i = 0; i < 2; ++i)
                        acc.s[i][j][gram_oidx(oy, ox)] = fmaf(a[i], bv, acc.s[i][j][gram_oidx(oy, ox)]);
                }
        }
    }
}

__global__ void __launch_bounds__(CF_GRAM_THREADS, 1) cf_gram_kernel(const __grid_constant__ cf_gram_params p)
{
    extern __shared__ float4 gram_smem[];
    float *sm = reinterpret_cast<float *>(gram_smem);
    __shared__ float shift[CF_GRAM_MAX_CIN];
    gram_shifts(p, shift);
    const int cg = p.cinp / 2, lane = threadIdx.x % p.lanes, g = threadIdx.x / p.lanes;
    const int cig = lane % cg, cjg = lane / cg;
    gram_acc acc;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        acc.f[i] = 0.f;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int o = 0; o < GEO; ++o)
                acc.s[i][j][o] = 0.f;
    }
    const int b = blockIdx.x;
    if (b < p.frame_ctas)
        gram_frame(p, shift, b, g, cig, cjg, acc);
    else
        gram_main(p, sm, shift, b - p.frame_ctas, g, cig, cjg, acc);
    /* the CTA's sums: each slot's values in shared memory, then per entry over the slots in double */
    __syncthreads();
    if (g < p.slots) {
        float *red = sm + (size_t)g * p.ne;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int o = 0; o < GEO; ++o)
                    red[((2 * cig + i) * p.cinp + 2 * cjg + j) * GEO + o] = acc.s[i][j][o];
            if (cjg == 0)
                red[p.cinp * p.cinp * GEO + 2 * cig + i] = acc.f[i];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < p.ne; e += blockDim.x) {
        double s = 0;
        for (int gg = 0; gg < p.slots; ++gg)
            s += sm[(size_t)gg * p.ne + e];
        p.part[(size_t)b * p.ne + e] = s;
    }
}

/* Which tap windows R(d) hold position class k: bit dy*kw + dx */
__host__ __device__ inline int gram_class_windows(int k)
{
    const int rc = k / GNCC, cc = k % GNCC;
    int mask = 0;
    for (int dy = 0; dy < GKH; ++dy)
        for (int dx = 0; dx < GKW; ++dx) {
            const bool rin = rc < GKH - 1 ? rc >= dy : rc == GKH - 1 || rc - GKH < dy;
            const bool cin = cc < GKW - 1 ? cc >= dx : cc == GKW - 1 || cc - GKW < dx;
            if (rin && cin)
                mask |= 1 << (dy * GKW + dx);
        }
    return mask;
}

/* Per entry and tap window, the sum over every CTA whose class lies inside the window: a warp per entry, its lanes
 * over the CTAs (independent loads), then a fixed butterfly (deterministic). */
__global__ void __launch_bounds__(256) cf_gram_sum_kernel(const __grid_constant__ cf_gram_params p)
{
    __shared__ int windows_of[CF_GRAM_NCLS]; /* per class */
    if (threadIdx.x < CF_GRAM_NCLS)
        windows_of[threadIdx.x] = gram_class_windows(threadIdx.x);
    __syncthreads();
    const int nblocks = p.frame_ctas + p.main_ctas;
    const int lane = threadIdx.x & 31, e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e >= p.ne)
        return;
    double acc[GKH * GKW];
#pragma unroll
    for (int d = 0; d < GKH * GKW; ++d)
        acc[d] = 0;
#pragma unroll 4
    for (int b = lane; b < nblocks; b += 32) {
        const double v = p.part[(size_t)b * p.ne + e];
        int k = CF_GRAM_CORE; /* the main CTAs come after the frame classes' */
        if (b < p.frame_ctas)
            for (k = 0; !(b >= p.cls_first[k] && b < p.cls_first[k] + p.cls_count[k] && k != CF_GRAM_CORE); ++k) {
            }
        const int mask = windows_of[k];
#pragma unroll
        for (int d = 0; d < GKH * GKW; ++d)
            acc[d] += (mask >> d & 1) ? v : 0.0;
    }
#pragma unroll
    for (int d = 0; d < GKH * GKW; ++d) {
        for (int o = 16; o > 0; o >>= 1)
            acc[d] += __shfl_xor_sync(0xffffffffu, acc[d], o);
        if (lane == d)
            p.sums[(size_t)d * p.ne + e] = acc[d];
    }
}

/* Sum of an entry over the window of tap offset (dy, dx) */
__device__ __forceinline__ double gram_window(const cf_gram_params &p, int entry, int dy, int dx)
{
    return p.sums[(size_t)(dy * GKW + dx) * p.ne + entry];
}

/* One block: the patch covariance, then per channel mean, variance, the guard, and the (count, mean, M2) block. */
__global__ void __launch_bounds__(512) cf_gram_stats_kernel(const __grid_constant__ cf_gram_params p)
{
    extern __shared__ double gram_cov[]; /* [K][K] covariance, then [K] first-moment sums */
    __shared__ float shift[CF_GRAM_MAX_CIN];
    __shared__ int all_ok;
    const int taps = GKH * GKW, K = p.cin * taps;
    double *cov = gram_cov, *s1 = gram_cov + K * K;
    const double count = (double)p.n * p.oh * p.ow;
    __shared__ float worst;
    if (threadIdx.x == 0) {
        all_ok = 1;
        worst = 0.f;
    }
    gram_shifts(p, shift);
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        const int ci = k / taps, dy = k % taps / GKW, dx = k % GKW;
        s1[k] = gram_window(p, p.cinp * p.cinp * GEO + ci, dy, dx);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < K * K; idx += blockDim.x) {
        const int k = idx / K, l = idx % K;
        int ci = k / taps, dy = k % taps / GKW, dx = k % GKW, cj = l / taps, ey = l % taps / GKW, ex = l % GKW;
        int oy = ey - dy, ox = ex - dx;
        if (oy < 0 || (oy == 0 && ox < 0)) { /* G is symmetric: the pair from the other tap's window */
            int t = ci; ci = cj; cj = t;
            t = dy; dy = ey; ey = t;
            t = dx; dx = ex; ex = t;
            oy = -oy;
            ox = -ox;
        }
        const double g = gram_window(p, (ci * p.cinp + cj) * GEO + gram_oidx(oy, ox), dy, dx);
        cov[idx] = (g - s1[k] * s1[l] / count) / count;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
    __shared__ float wbuf[512 / 32][CF_GRAM_MAX_CIN * GKH * GKW]; /* each warp's channel of weights */
    for (int c = threadIdx.x >> 5; c < p.cout; c += nwarp) {
        float *wc = wbuf[threadIdx.x >> 5];
        __syncwarp();
        for (int k = lane; k < K; k += 32)
            wc[k] = p.wei[(size_t)c * K + k];
        __syncwarp();
        double q = 0, m = 0, bound = 0;
        for (int k = lane; k < K; k += 32) {
            const double wk = wc[k];
            double t = 0;
            for (int l = 0; l < K; ++l)
                t += cov[k * K + l] * (double)wc[l];
            q += wk * t;
            const double mk = s1[k] / count; /* E[x'] of this tap */
            m += wk * (mk + (double)shift[k / taps]);
            bound += fabs(wk) * sqrt(cov[k * K + k] + mk * mk); /* sqrt(E[x'^2]) */
        }
        for (int o = 16; o > 0; o >>= 1) {
            q += __shfl_xor_sync(0xffffffffu, q, o);
            m += __shfl_xor_sync(0xffffffffu, m, o);
            bound += __shfl_xor_sync(0xffffffffu, bound, o);
        }
        if (lane != 0)
            continue;
        double a = 1.0, b = p.bia ? (double)p.bia[c] : 0.0; /* the bias and the affine ops before the batch norm */
        for (int o = 0; o < p.bn; ++o)
            cf_epi_fold_affine(p.op[o], c, &a, &b);
        const double mean = a * m + b, var = a * a * q;
        const bool ok = q > 0 && bound * bound <= CF_GRAM_KAPPA * q && isfinite(mean) && isfinite(var);
        if (!ok)
            all_ok = 0;
        const float ratio = q > 0 ? (float)(bound * bound / q) : INFINITY; /* positive: ordered as int bits */
        atomicMax(reinterpret_cast<int *>(&worst), __float_as_int(ratio != ratio ? INFINITY : ratio));
        float *st = p.stats + (size_t)c * 3;
        st[0] = __int_as_float((int)count);
        st[1] = (float)mean;
        st[2] = (float)(var * count);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        p.ok[0] = all_ok;
        p.ok[1] = __float_as_int(worst); /* for CONVFUSE_VERBOSE=gram */
    }
}

} /* namespace cf */

/* ---- host ---- */

static int gram_env(void)
{
    const char *env = getenv("CONVFUSE_BN_STATS");
    return env && strcmp(env, "direct") == 0 ? 0 : 1;
}

/* The geometry of the Gram pass for this plan, or false and why. */
static bool gram_geometry(const struct cf_plan *plan, int bn, cf_gram_params *p, char *why, size_t why_size)
{
    const cf_conv_desc_t *d = &plan->conv;
    memset(p, 0, sizeof *p);
    if (d->kind != CF_CONV_2D || d->kh != CF_GRAM_KH || d->kw != CF_GRAM_KW || d->stride_h != 1 || d->stride_w != 1 ||
        d->dil_h != 1 || d->dil_w != 1 || d->pad_h != 0 || d->pad_w != 0) {
        snprintf(why, why_size, "statistics from the input Gram: conv2d 3x3, stride 1, no padding or dilation only");
        return false;
    }
    if (d->c_in > CF_GRAM_MAX_CIN || d->c_out < 4 * d->c_in) {
        snprintf(why, why_size, "statistics from the input Gram: C_in <= %d and C_out >= 4 C_in only (C_in=%lld, "
                                "C_out=%lld)", CF_GRAM_MAX_CIN, (long long)d->c_in, (long long)d->c_out);
        return false;
    }
    if (plan->oh < CF_GRAM_KH || plan->ow < CF_GRAM_KW || (double)d->n * plan->oh * plan->ow >= 2147483647.0 ||
        (double)d->c_in * d->h * d->w >= 2147483647.0) {
        snprintf(why, why_size, "statistics from the input Gram: output of %lldx%lld (needs >= 3x3, N*OH*OW < 2^31)",
                 (long long)plan->oh, (long long)plan->ow);
        return false;
    }
    for (int i = 0; i < bn; ++i) {
        const cf_op_kind_t k = plan->chain.ops[i].kind;
        if (k != CF_OP_ADD_CHANNEL && k != CF_OP_MUL_SCALAR && k != CF_OP_ADD_SCALAR && k != CF_OP_AFFINE_CHANNEL) {
            snprintf(why, why_size, "statistics from the input Gram: op %d (%s) before the batch norm is not affine", i,
                     cf_op_kind_name(k));
            return false;
        }
    }
    p->n = (int)d->n;
    p->cin = (int)d->c_in;
    p->h = (int)d->h;
    p->w = (int)d->w;
    p->cout = (int)d->c_out;
    p->oh = (int)plan->oh;
    p->ow = (int)plan->ow;
    p->bn = bn;
    p->cinp = p->cin + (p->cin & 1);
    p->ne = p->cinp * p->cinp * CF_GRAM_EO + p->cinp;
    p->lanes = (p->cinp / 2) * (p->cinp / 2);
    p->slots = CF_GRAM_THREADS / p->lanes;
    p->c0 = (CF_GRAM_KW - 1) / 4;
    p->c1 = (p->ow - 1) / 4;
    p->ls = 4 + 4 * (p->c1 + 2);
    const size_t limit = 200 * 1024;
    for (p->rb = 32;; p->rb /= 2) {
        p->cs = (p->rb + CF_GRAM_KH - 1) * p->ls;
        p->cs += (4 - p->cs % 16 + 16) % 16;
        if ((size_t)p->cinp * p->cs * 4 <= limit)
            break;
        if (p->rb == 1) {
            snprintf(why, why_size, "statistics from the input Gram: rows of %d floats do not fit shared memory", p->w);
            return false;
        }
    }
    const int core_rows = p->oh - (CF_GRAM_KH - 1);
    p->bands = (core_rows + p->rb - 1) / p->rb;
    p->bands_per_cta = p->bands >= 2 ? 2 : 1;
    p->ctas_per_image = (p->bands + p->bands_per_cta - 1) / p->bands_per_cta;
    p->main_ctas = p->n * p->ctas_per_image;
    /* frame classes: about 1024 positions per CTA */
    int next = 0;
    for (int k = 0; k < CF_GRAM_NCLS; ++k) {
        if (k == CF_GRAM_CORE)
            continue;
        const int rc = k / (2 * CF_GRAM_KW - 1), cc = k % (2 * CF_GRAM_KW - 1);
        const long long rows = rc == CF_GRAM_KH - 1 ? core_rows : 1;
        const long long cols = cc == CF_GRAM_KW - 1 ? p->ow - (CF_GRAM_KW - 1) : 1;
        const long long total = rows * cols * p->n;
        p->cls_first[k] = next;
        p->cls_count[k] = (int)((total + 1023) / 1024);
        next += p->cls_count[k];
    }
    p->frame_ctas = next;
    p->cls_first[CF_GRAM_CORE] = next;
    p->cls_count[CF_GRAM_CORE] = p->main_ctas;
    return true;
}

static size_t gram_smem_bytes(const cf_gram_params *p)
{
    const size_t stage = (size_t)p->cinp * p->cs * 4, red = (size_t)p->slots * p->ne * 4;
    return stage > red ? stage : red;
}

bool cf_gram_supported(const struct cf_plan *plan, int bn, char *why, size_t why_size)
{
    cf_gram_params p;
    char tmp[256];
    if (!why) {
        why = tmp;
        why_size = sizeof tmp;
    }
    if (bn < 0 || !gram_geometry(plan, bn, &p, why, why_size))
        return false;
    return true;
}

size_t cf_gram_workspace_bytes(const struct cf_plan *plan, int bn)
{
    cf_gram_params p;
    char why[256];
    if (bn < 0 || !gram_geometry(plan, bn, &p, why, sizeof why))
        return 0;
    return ((size_t)(p.frame_ctas + p.main_ctas) + CF_GRAM_KH * CF_GRAM_KW) * p.ne * sizeof(double) + 2 * sizeof(int);
}

static std::mutex gram_mu;
static int gram_attr_dev = -1; /* the device whose shared-memory attribute is set */

static cf_status_t gram_set_attr(bool force)
{
    int dev = 0;
    CF_CUDA_TRY(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(gram_mu);
    if (!force && gram_attr_dev == dev)
        return CF_STATUS_SUCCESS;
    CF_CUDA_TRY(cudaFuncSetAttribute((const void *)cf::cf_gram_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     208 * 1024));
    gram_attr_dev = dev;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_gram_launch(const struct cf_plan *plan, const cf_args_t *args, int bn, const struct cf_ig_op *ops,
                           void *workspace, float *stats, int cpad, cudaStream_t stream, int **ok_out)
{
    *ok_out = NULL;
    if (!gram_env())
        return CF_STATUS_SUCCESS;
    cf_gram_params p;
    char why[256];
    if (!gram_geometry(plan, bn, &p, why, sizeof why))
        return CF_STATUS_SUCCESS;
    p.src = args->src;
    p.wei = args->wei;
    p.bia = plan->conv.has_bias ? args->bia : NULL;
    for (int i = 0; i < bn; ++i)
        p.op[i] = ops[i];
    p.part = (double *)workspace;
    p.sums = p.part + (size_t)(p.frame_ctas + p.main_ctas) * p.ne;
    p.ok = (int *)(p.sums + (size_t)CF_GRAM_KH * CF_GRAM_KW * p.ne);
    p.stats = stats;
    p.cpad = cpad;
    const size_t smem = gram_smem_bytes(&p);
    cf_status_t st = gram_set_attr(false);
    if (st != CF_STATUS_SUCCESS)
        return st;
    const int grid = p.frame_ctas + p.main_ctas;
    cf::cf_gram_kernel<<<grid, CF_GRAM_THREADS, smem, stream>>>(p);
    if (cudaGetLastError() != cudaSuccess) { /* e.g. a cudaDeviceReset cleared the attribute: set it, once more */
        st = gram_set_attr(true);
        if (st != CF_STATUS_SUCCESS)
            return st;
        cf::cf_gram_kernel<<<grid, CF_GRAM_THREADS, smem, stream>>>(p);
        CF_CUDA_TRY(cudaGetLastError());
    }
    cf::cf_gram_sum_kernel<<<(unsigned)((p.ne + 7) / 8), 256, 0, stream>>>(p);
    CF_CUDA_TRY(cudaGetLastError());
    const int K = p.cin * CF_GRAM_KH * CF_GRAM_KW;
    cf::cf_gram_stats_kernel<<<1, 512, (size_t)(K * K + K) * sizeof(double), stream>>>(p);
    CF_CUDA_TRY(cudaGetLastError());
    if (cf_verbose("launch"))
        fprintf(stderr,
                "convfuse: launch: batch-norm statistics from the input Gram (main CTAs=%d x %d rows, frame CTAs=%d, "
                "smem=%zu); the direct statistics pass runs only if the device-side guard refuses them\n",
                p.main_ctas, p.rb, p.frame_ctas, smem);
    if (cf_verbose("gram")) { /* debugging only: waits for the device to report its decision */
        int flag[2] = {0, 0};
        CF_CUDA_TRY(cudaStreamSynchronize(stream));
        CF_CUDA_TRY(cudaMemcpy(flag, p.ok, sizeof flag, cudaMemcpyDeviceToHost));
        float ratio;
        memcpy(&ratio, &flag[1], sizeof ratio);
        fprintf(stderr, "convfuse: gram: statistics %s (largest cancellation ratio %.3g, bound %.0f)\n",
                flag[0] ? "stand" : "refused by the guard: the direct pass computes them", ratio, CF_GRAM_KAPPA);
    }
    *ok_out = p.ok;
    return CF_STATUS_SUCCESS;
}
