/* Training batch-norm statistics from the input's moments: kernels and host side (bn_gram.cuh has the method). */
#include "bn_gram.cuh"
#include "bn_gram_host.h"
#include "igemm_host.h"
#include "epilogue.cuh"
#include "pdl.cuh"
#include "tma.cuh"
#include "wgmma.cuh" /* fence_proxy_async */

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>


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

/* A thread's sums: second moments of its channel pair (ci = 2*cig + i, cj) over the EO offsets, for i = 0, 1, and
 * first moments of its two ci. fp32 over a few rows of products; the CTA and class sums are in double. */
struct gram_acc {
    float s[2][GEO];
    float f[2];
};

__device__ __forceinline__ void gram_zero(gram_acc &acc)
{
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        acc.f[i] = 0.f;
#pragma unroll
        for (int o = 0; o < GEO; ++o)
            acc.s[i][o] = 0.f;
    }
}

/* One 4-column chunk of a row: win[oy] holds the partner row's quads at chunk c-1 (P), c (C) and c+1 (X, loaded
 * here). 2 x 4 x 13 = 104 FFMA against 2 + 3 LDS.128, each one wavefront: a warp is one row slot, its a rows are 4
 * addresses and its b rows 8 addresses in distinct banks (cf_gram_params::cs). */
template <int P, int C, int X, bool EDGE>
__device__ __forceinline__ void gram_chunk(gram_acc &acc, float4 (&win)[GKH][3], const float *a0, const float *a1,
                                           const float *b, int ls, int c, int ow)
{
#pragma unroll
    for (int oy = 0; oy < GKH; ++oy)
        win[oy][X] = *reinterpret_cast<const float4 *>(b + oy * ls + 4 * (c + 1));
    float4 a[2] = {*reinterpret_cast<const float4 *>(a0 + 4 * c), *reinterpret_cast<const float4 *>(a1 + 4 * c)};
    if (EDGE) { /* only the core columns [kw-1, OW) belong to this class */
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
            for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
                for (int ox = oy == 0 ? 0 : -(GKW - 1); ox < GKW; ++ox) {
                    const int k = 4 + e + ox; /* position in the 12-float window P|C|X */
                    const float bv = k < 4 ? gram_q(win[oy][P], k)
                                           : k < 8 ? gram_q(win[oy][C], k - 4) : gram_q(win[oy][X], k - 8);
                    acc.s[i][gram_oidx(oy, ox)] = fmaf(av, bv, acc.s[i][gram_oidx(oy, ox)]);
                }
        }
}

__device__ __forceinline__ void gram_cp16(float *dst, const float *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

/* Main CTA: core rows of one image, bands of rb core rows (+ kh-1 partner rows) staged in shared memory, then
 * shifted in place; each row slot (a warp) walks its rows chunk by chunk with register windows rotated through three
 * slots (no moves). Two CTAs per SM: one stages while the other computes. */
/* The edge columns of a band's rows (the frame classes core row x column 0, 1, OW, OW+1), from the staged band:
 * slot g takes edge column g % 4 and every (slots/4)-th row from g / 4; its sums persist in shared memory (es,
 * 2 x (EO + 1) floats per thread) across the bands. */
__device__ __forceinline__ void gram_edges(const cf_gram_params &p, const float *smb, float *es, int g, int cig, int cj,
                                           int ub, int ue)
{
    constexpr int NE_T = 2 * (GEO + 1); /* a thread's sums: 2 x EO second moments, 2 first moments */
    if (g >= p.slots - p.slots % 4)
        return;
    const int e = g % 4, v = e < GKW - 1 ? e : p.ow + e - (GKW - 1);
    float t[NE_T];
#pragma unroll
    for (int i = 0; i < NE_T; ++i)
        t[i] = es[i * CF_GRAM_THREADS + threadIdx.x];
    for (int u = ub + g / 4; u < ue; u += p.slots / 4) {
        const int r = u - ub;
        float a[2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
            a[i] = smb[(size_t)(2 * cig + i) * p.cs + r * p.ls + 4 + v];
        const float *b = smb + (size_t)cj * p.cs + r * p.ls + 4 + v;
#pragma unroll
        for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
            for (int ox = oy == 0 ? 0 : -(GKW - 1); ox < GKW; ++ox) {
                const float bv = b[oy * p.ls + ox]; /* outside the image: never in a window with this position */
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    t[i * GEO + gram_oidx(oy, ox)] = fmaf(a[i], bv, t[i * GEO + gram_oidx(oy, ox)]);
            }
#pragma unroll
        for (int i = 0; i < 2; ++i)
            t[2 * GEO + i] += a[i];
    }
#pragma unroll
    for (int i = 0; i < NE_T; ++i)
        es[i * CF_GRAM_THREADS + threadIdx.x] = t[i];
}

__device__ void gram_main(const cf_gram_params &p, float *sm, float *es, uint32_t bar, const float *shift, int m, int g,
                          int cig, int cj, gram_acc &acc)
{
    const int core_rows = p.oh - (GKH - 1);
    const long long rows = (long long)p.n * core_rows;
    const int r_end = (int)(rows * (m + 1) / p.main_ctas);
    const size_t hw = (size_t)p.h * p.w;
    const bool vec = (p.w % 4 == 0) && ((uintptr_t)p.src % 16 == 0);
    const int nq = (p.w + 3) / 4, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
    /* chunks wholly inside the core columns [kw-1, OW) take no mask */
    const int cin0 = (GKW - 1 + 3) / 4, cin1 = (p.ow - 4) / 4;
    /* this CTA's share of the batch's core rows, in bands of at most rb rows within one image */
    const int r_begin = (int)(rows * m / p.main_ctas);
    const size_t buf_floats = (size_t)p.cinp * p.cs;
    auto issue = [&](int rr, int buf) { /* one box: rows [ub, ub + rb + kh - 1) of every channel, columns [-4, ls - 4),
                                           zeros outside the image; coordinates in the map's order x, row, channel, n */
        const int n = rr / core_rows, ub = GKH - 1 + rr - n * core_rows;
        ig_tma_load(&p.tmap, (uint32_t)__cvta_generic_to_shared(sm + buf * buf_floats), bar + 8 * buf,
                    (uint32_t)(p.ls * p.box_rows * p.cin * 4), -4, ub, 0, n);
    };
    if (p.tma && threadIdx.x == 0 && r_begin < r_end)
        issue(r_begin, 0);
    uint32_t phases = 0; /* bit b: the parity to wait for on buffer b */
    for (int rr = r_begin, bi = 0; rr < r_end; ++bi) {
        const int n = rr / core_rows, row0 = rr - n * core_rows;
        const int cnt = min(p.rb, min(core_rows - row0, r_end - rr));
        rr += cnt;
        const float *img = p.src + (size_t)n * p.cin * hw;
        const int ub = GKH - 1 + row0, ue = ub + cnt, nrows = cnt + GKH - 1;
        const int buf = p.tma && p.bufs == 2 ? bi & 1 : 0;
        float *smb = sm + buf * buf_floats;
        if (p.tma) {
            /* double buffered: this band landed while the last one was computed; the next is issued below */
            if (p.bufs == 1 && bi > 0) {
                fence_proxy_async(); /* this thread's accesses of the buffer (last band) -> the copy into it */
                __syncthreads();
                if (threadIdx.x == 0)
                    issue(rr - cnt, 0);
            }
            ig_mbar_wait(bar + 8 * buf, phases >> buf & 1);
            phases ^= 1u << buf;
            /* the shift: every staged value, the zeros outside the image too (a product with one of those always
               has a masked, zero, first factor: only the core columns are first factors) */
            const int per = nrows * p.ls / 4;
            for (int c = 0; c < p.cin; ++c) {
                const float s = shift[c];
                float4 *row = reinterpret_cast<float4 *>(smb + (size_t)c * p.cs);
                for (int i = threadIdx.x; i < per; i += blockDim.x) {
                    float4 x = row[i];
                    x.x -= s;
                    x.y -= s;
                    x.z -= s;
                    x.w -= s;
                    row[i] = x;
                }
            }
            fence_proxy_async(); /* this thread's accesses of the other buffer (last band) -> the copy into it */
            __syncthreads();
            if (p.bufs == 2 && threadIdx.x == 0 && rr < r_end)
                issue(rr, buf ^ 1);
        } else {
            __syncthreads(); /* the previous band's rows are read */
            /* the rows' data quads (columns [0, 4 nq)); the guard quads around them stay zero (set at CTA start) */
            for (int c = 0; c < p.cin; ++c)
                for (int r = warp; r < nrows; r += nwarp) {
                    float *dst = smb + (size_t)c * p.cs + r * p.ls + 4;
                    const float *src = img + (size_t)c * hw + (size_t)(ub + r) * p.w;
                    if (vec) {
                        for (int q = lane; q < nq; q += 32)
                            gram_cp16(dst + 4 * q, src + 4 * q);
                    } else { /* by quads as well: the shift below reads each quad in the lane that wrote it */
                        for (int q = lane; q < nq; q += 32)
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                dst[4 * q + e] = 4 * q + e < p.w ? __ldg(src + 4 * q + e) : 0.f;
                    }
                }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
            /* the shift, on the values this thread copied (its own copies are complete and visible to it) */
            for (int c = 0; c < p.cin; ++c) {
                const float s = shift[c];
                for (int r = warp; r < nrows; r += nwarp) {
                    float *dst = smb + (size_t)c * p.cs + r * p.ls + 4;
                    for (int q = lane; q < nq; q += 32) {
                        float4 x = *reinterpret_cast<float4 *>(dst + 4 * q);
                        const int v = 4 * q;
                        x.x -= s;
                        x.y = v + 1 < p.w ? x.y - s : 0.f;
                        x.z = v + 2 < p.w ? x.z - s : 0.f;
                        x.w = v + 3 < p.w ? x.w - s : 0.f;
                        *reinterpret_cast<float4 *>(dst + 4 * q) = x;
                    }
                }
            }
            __syncthreads();
        }
        if (g >= p.slots || (p.debug & 2))
            continue;
        gram_edges(p, smb, es, g, cig, cj, ub, ue);
        for (int u = ub + g; u < ue; u += p.slots) {
            const int r = u - ub;
            const float *a0 = smb + (size_t)(2 * cig) * p.cs + r * p.ls + 4, *a1 = a0 + p.cs;
            const float *b = smb + (size_t)cj * p.cs + r * p.ls + 4;
            float4 win[GKH][3];
            auto start = [&](int c) { /* the windows' quads c-1 and c into slots 0 and 1 */
#pragma unroll
                for (int oy = 0; oy < GKH; ++oy) {
                    win[oy][0] = *reinterpret_cast<const float4 *>(b + oy * p.ls + 4 * (c - 1));
                    win[oy][1] = *reinterpret_cast<const float4 *>(b + oy * p.ls + 4 * c);
                }
            };
            auto masked = [&](int c) {
                start(c);
                gram_chunk<0, 1, 2, true>(acc, win, a0, a1, b, p.ls, c, p.ow);
            };
            if (cin0 > cin1) { /* no chunk inside the core: all masked */
                for (int c = p.c0; c <= p.c1; ++c)
                    masked(c);
                continue;
            }
            for (int c = p.c0; c < cin0; ++c) /* the masked chunks at both ends */
                masked(c);
            for (int c = cin1 + 1; c <= p.c1; ++c)
                masked(c);
            start(cin0);
            for (int c = cin0;;) {
                gram_chunk<0, 1, 2, false>(acc, win, a0, a1, b, p.ls, c, p.ow);
                if (++c > cin1)
                    break;
                gram_chunk<1, 2, 0, false>(acc, win, a0, a1, b, p.ls, c, p.ow);
                if (++c > cin1)
                    break;
                gram_chunk<2, 0, 1, false>(acc, win, a0, a1, b, p.ls, c, p.ow);
                if (++c > cin1)
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

/* Frame CTA: the positions of one frame class in a slice of the batch, straight from global memory (the frame is
 * ~6% of the pixels). Each warp walks a contiguous run of positions: along a row for the border rows' core columns,
 * down a column for the core rows' edge columns, so one step loads only the partners that enter the window. */
/* Frame job f: its class's rows [u0, u1) and columns [v0, v1), and its slice [c0, c1) of the class's positions over
 * the batch (position t: image t / per, then row-major in the class); false if f is no frame job. */
struct gram_job {
    int u0, u1, v0, v1, nc, per, c0, c1;
};
__device__ __forceinline__ bool gram_frame_job(const cf_gram_params &p, int f, gram_job &j)
{
    int k = 0;
    while (k < CF_GRAM_NCLS && !(f >= p.cls_first[k] && f < p.cls_first[k] + p.cls_count[k] && k != CF_GRAM_CORE))
        ++k;
    if (k == CF_GRAM_NCLS)
        return false;
    gram_class_range(k / GNCC, GKH, p.oh, &j.u0, &j.u1);
    gram_class_range(k % GNCC, GKW, p.ow, &j.v0, &j.v1);
    j.nc = j.v1 - j.v0;
    j.per = (j.u1 - j.u0) * j.nc;
    const int total = j.per * p.n, slice = f - p.cls_first[k];
    j.c0 = (int)((long long)total * slice / p.cls_count[k]);
    j.c1 = (int)((long long)total * (slice + 1) / p.cls_count[k]);
    return true;
}

__device__ void gram_frame(const cf_gram_params &p, const float *shift, int f, int cig, int cj, gram_acc &acc)
{
    /* f: the frame job, a slice of one class */
    gram_job j;
    const int warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
    if (!gram_frame_job(p, f, j))
        return;
    const int u0 = j.u0, u1 = j.u1, v0 = j.v0, v1 = j.v1, nc = j.nc, per = j.per, c0 = j.c0, c1 = j.c1;
    /* this warp's part of the slice (lanes beyond p.lanes, when a warp holds several row slots, take none) */
    const int t0 = c0 + (int)((long long)(c1 - c0) * warp / nwarp), t1 = c0 + (int)((long long)(c1 - c0) * (warp + 1) / nwarp);
    if (threadIdx.x % 32 >= p.lanes && p.lanes < 32)
        return;
    if (t0 >= t1)
        return;
    const int hw = p.h * p.w; /* C_in * H * W < 2^31: offsets within an image are 32-bit */
    const bool cj_in = cj < p.cin;
    const float sj = cj_in ? shift[cj] : 0.f;
    float bw[GKH][2 * GKW - 1]; /* partners x'(cj, u + oy, v + ox - (kw-1)) */
    int n = t0 / per, rem = t0 - n * per, u = u0 + rem / nc, v = v0 + rem % nc;
    const float *img = p.src + (size_t)n * p.cin * hw;
    int slide = 0; /* 0: load the window, 1: one column on, 2: one row on */
    for (int t = t0; t < t1; ++t) {
        const float *bj = img + cj * hw;
        auto load = [&](int uu, int vv) {
            return (cj_in && uu < p.h && vv >= 0 && vv < p.w) ? __ldg(bj + uu * p.w + vv) - sj : 0.f;
        };
        if (slide == 1) {
#pragma unroll
            for (int oy = 0; oy < GKH; ++oy) {
#pragma unroll
                for (int x = 0; x < 2 * GKW - 2; ++x)
                    bw[oy][x] = bw[oy][x + 1];
                bw[oy][2 * GKW - 2] = load(u + oy, v + GKW - 1);
            }
        } else if (slide == 2) {
#pragma unroll
            for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
                for (int x = 0; x < 2 * GKW - 1; ++x)
                    bw[oy][x] = oy + 1 < GKH ? bw[oy + 1][x] : load(u + oy, v + x - (GKW - 1));
        } else {
#pragma unroll
            for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
                for (int x = 0; x < 2 * GKW - 1; ++x)
                    bw[oy][x] = load(u + oy, v + x - (GKW - 1));
        }
        float a[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int ci = 2 * cig + i;
            a[i] = ci < p.cin ? __ldg(img + ci * hw + u * p.w + v) - shift[ci] : 0.f;
            acc.f[i] += a[i];
        }
#pragma unroll
        for (int oy = 0; oy < GKH; ++oy)
#pragma unroll
            for (int ox = oy == 0 ? 0 : -(GKW - 1); ox < GKW; ++ox)
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    acc.s[i][gram_oidx(oy, ox)] = fmaf(a[i], bw[oy][ox + GKW - 1], acc.s[i][gram_oidx(oy, ox)]);
        /* the next position: along the row, then down the class's rows, then the next image */
        if (++v < v1) {
            slide = 1;
        } else {
            v = v0;
            slide = nc == 1 ? 2 : 0;
            if (++u == u1) {
                u = u0;
                slide = 0;
                img += (size_t)p.cin * hw;
            }
        }
    }
}

/* The CTA's sums as row `row` of the partials: each slot's values in shared memory, then per entry over the slots in
 * double; the thread sums start again from zero. */
__device__ void gram_flush(const cf_gram_params &p, float *sm, int g, int cig, int cj, gram_acc &acc, int row)
{
    __syncthreads();
    if (g < p.slots) {
        float *red = sm + (size_t)g * p.ne;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int o = 0; o < GEO; ++o)
                red[((2 * cig + i) * p.cinp + cj) * GEO + o] = acc.s[i][o];
            if (cj == 0)
                red[p.cinp * p.cinp * GEO + 2 * cig + i] = acc.f[i];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < p.ne; e += blockDim.x) {
        double s = 0;
        for (int gg = 0; gg < p.slots; ++gg)
            s += sm[(size_t)gg * p.ne + e];
        p.part[(size_t)e * p.nrows + row] = (float)s; /* entry-major: the sum kernel reads an entry's rows in a run */
    }
    gram_zero(acc);
}

__global__ void __launch_bounds__(CF_GRAM_THREADS, 2) cf_gram_kernel(const __grid_constant__ cf_gram_params p)
{
    extern __shared__ float4 gram_smem_raw[];
    /* 128-byte aligned (the TMA destination), by an offset from the shared array itself: a pointer rebuilt from an
     * integer loses its address space, and the loads through it were generic LD instead of LDS */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(gram_smem_raw);
    float4 *gram_smem = gram_smem_raw + ((128 - (raw & 127)) & 127) / 16;
    float *sm = reinterpret_cast<float *>(gram_smem);
    __shared__ float shift[CF_GRAM_MAX_CIN];
    gram_shifts(p, shift);
    const int cg = p.cinp / 2, lane = threadIdx.x % p.lanes, g = threadIdx.x / p.lanes;
    const int cig = lane % cg, cj = lane / cg;
    gram_acc acc;
    gram_zero(acc);
    const int b = blockIdx.x;
    __shared__ alignas(8) uint64_t bar_mem[2]; /* one per staging buffer */
    const uint32_t bar = (uint32_t)__cvta_generic_to_shared(bar_mem);
    if (p.tma) {
        if (threadIdx.x == 0) {
            ig_mbar_init(bar, 1);
            ig_mbar_init(bar + 8, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        for (int buf = 0; buf < p.bufs; ++buf) /* the padding channel (odd C_in), which the boxes do not cover */
            for (int i = p.cin * p.cs / 4 + threadIdx.x; i < p.cinp * p.cs / 4; i += blockDim.x)
                gram_smem[buf * p.cinp * p.cs / 4 + i] = make_float4(0.f, 0.f, 0.f, 0.f);
    } else { /* the guard quads, rows past the data and the padding channel stay zero */
        for (int i = threadIdx.x; i < p.cinp * p.cs / 4; i += blockDim.x)
            gram_smem[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float *es = sm + p.es_off; /* the edge columns' sums, [value][thread], past the staging and the flush area */
    for (int i = threadIdx.x; i < 2 * (GEO + 1) * CF_GRAM_THREADS; i += blockDim.x)
        es[i] = 0.f;
    __syncthreads();
    /* the core rows (their edge columns on the side), then this CTA's frame job: each class summed into its own row
       of partials: [0, M) core, [M (1 + e), M (2 + e)) edge column e, then the frame jobs */
    /* The second half of the grid (the second CTA on each SM, as the blocks are handed out) takes its frame job
     * first: the frame's global loads are latency-bound and the core rows' products FMA-bound, so the two CTAs of
     * an SM overlap them instead of both waiting on their frame loads at the end. The partial rows are the same. */
    const bool frame_first = p.frame_first && b >= (int)gridDim.x / 2 && b < p.frame_jobs;
    if (frame_first) {
        if (!(p.debug & 1))
            gram_frame(p, shift, b, cig, cj, acc);
        gram_flush(p, sm, g, cig, cj, acc, 5 * p.main_ctas + b);
        /* the flush read its area, which is the staging buffer the first band's copy (async proxy) and shift write:
         * every thread's reads first (racecheck found the shift's writes racing them without this barrier) */
        fence_proxy_async();
        __syncthreads();
    }
    gram_main(p, sm, es, bar, shift, b, g, cig, cj, acc);
    gram_flush(p, sm, g, cig, cj, acc, b);
    for (int e = 0; e < 4; ++e) {
        const bool mine = g < p.slots - p.slots % 4 && g % 4 == e;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int o = 0; o < GEO; ++o)
                acc.s[i][o] = mine ? es[(i * GEO + o) * CF_GRAM_THREADS + threadIdx.x] : 0.f;
            acc.f[i] = mine ? es[(2 * GEO + i) * CF_GRAM_THREADS + threadIdx.x] : 0.f;
        }
        gram_flush(p, sm, g, cig, cj, acc, p.main_ctas * (1 + e) + b);
    }
    if (b < p.frame_jobs && !frame_first) {
        if (!(p.debug & 1))
            gram_frame(p, shift, b, cig, cj, acc);
        gram_flush(p, sm, g, cig, cj, acc, 5 * p.main_ctas + b);
    }
    /* the sum kernel's blocks may be scheduled once every CTA is here (PDL, pdl.cuh). Released at the start instead,
     * the chain measured 0.444 against 0.438 ms without PDL; released here, 0.430 against 0.440 (docs/kb2_73.md) */
    cf_grid_release();
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
 * over the CTAs (independent loads), then a fixed butterfly (deterministic). Four warps per entry (its rows split
 * four ways, no class table) measured slower: 13.8 against 11.5 us. */
__global__ void __launch_bounds__(256) cf_gram_sum_kernel(const __grid_constant__ cf_gram_params p)
{
    cf_grid_release();
    __shared__ short windows_of[CF_GRAM_MAX_ROWS]; /* per row of partials: the windows of its class */
    const int nblocks = p.nrows;
    for (int k = 0; k < CF_GRAM_NCLS; ++k) {
        const int mask = gram_class_windows(k);
        for (int j = p.cls_first[k] + threadIdx.x; j < p.cls_first[k] + p.cls_count[k]; j += blockDim.x)
            windows_of[(k == CF_GRAM_CORE ? 0 : 5 * p.main_ctas) + j] = (short)mask;
    }
    for (int e = 0; e < 4; ++e) { /* the main CTAs' edge-column classes: core row, column 0, 1, OW, OW+1 */
        const int cc = e < GKW - 1 ? e : GKW + e - (GKW - 1);
        const int mask = gram_class_windows((GKH - 1) * GNCC + cc);
        for (int j = threadIdx.x; j < p.main_ctas; j += blockDim.x)
            windows_of[p.main_ctas * (1 + e) + j] = (short)mask;
    }
    __syncthreads();
    cf_grid_wait(); /* the partials of the Gram kernel */
    if (blockIdx.x == 0 && threadIdx.x == 0) { /* the stats kernel's flags (it runs next) */
        p.ok[0] = 1;
        p.ok[1] = 0;
    }
    const int lane = threadIdx.x & 31, e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e >= p.ne)
        return;
    double acc[GKH * GKW];
#pragma unroll
    for (int d = 0; d < GKH * GKW; ++d)
        acc[d] = 0;
    /* The rows come class by class (core, the four edge columns, the frame jobs in class order), so a lane's rows
     * b = lane + 32 i change windows only a few times: sum a run of equal windows in one accumulator and add it to
     * the nine window sums where the run ends (a masked add per window and row was ~40 instructions per row). */
    double run = 0;
    int run_mask = nblocks > lane ? windows_of[lane] : 0;
    auto end_run = [&]() {
#pragma unroll
        for (int d = 0; d < GKH * GKW; ++d)
            acc[d] += (run_mask >> d & 1) ? run : 0.0;
    };
#pragma unroll 4
    for (int b = lane; b < nblocks; b += 32) {
        const double v = p.part[(size_t)e * nblocks + b];
        const int mask = windows_of[b];
        if (mask != run_mask) {
            end_run();
            run = 0;
            run_mask = mask;
        }
        run += v;
    }
    end_run();
    double mine = 0;
#pragma unroll
    for (int d = 0; d < GKH * GKW; ++d) {
        for (int o = 16; o > 0; o >>= 1)
            acc[d] += __shfl_xor_sync(0xffffffffu, acc[d], o);
        if (lane == d)
            mine = acc[d];
    }
    if (lane >= GKH * GKW)
        return;
    /* lane d: the entry over window d is one element of the Gram matrix G (and its mirror), or of the first moments */
    const int taps = GKH * GKW, K = p.cin * taps, dy = lane / GKW, dx = lane % GKW;
    const int second = p.cinp * p.cinp * GEO;
    if (e >= second) {
        const int ci = e - second;
        if (ci < p.cin)
            p.s1[ci * taps + lane] = mine;
        return;
    }
    const int ci = e / GEO / p.cinp, cj = e / GEO % p.cinp, oi = e % GEO;
    const int oy = oi < GKW ? 0 : 1 + (oi - GKW) / (2 * GKW - 1), ox = oi < GKW ? oi : (oi - GKW) % (2 * GKW - 1) - (GKW - 1);
    const int ey = dy + oy, ex = dx + ox;
    if (ci >= p.cin || cj >= p.cin || ey >= GKH || ex < 0 || ex >= GKW)
        return;
    const int k = ci * taps + lane, l = cj * taps + ey * GKW + ex;
    p.gram[(size_t)k * K + l] = mine;
    if (oy != 0 || ox != 0) /* at o = 0 the pair (cj, ci) has its own entry: each element is written once */
        p.gram[(size_t)l * K + k] = mine;
}

/* One block per channel c: the quadratic form w^T G w, the first moments and the guard, straight from G in global
 * memory (it is 41 KB: every block reads it from L2), written as channel c of one (count, mean, M2) block.
 *     E[y'] = w . s1 / M,   var_c = (w^T G w - (w . s1)^2 / M) / M   (y' = w . x', in double),
 * the same covariance form as Cov = (G - s1 s1^T / M) / M, without building Cov. The guard's bound needs E[x'_k^2],
 * which is G_kk / M. The flags are fire-and-forget atomics (p.ok: [0] all channels passed, set to 1 by the sum
 * kernel; [1] the largest ratio); the finalize kernel, next but one on the stream, finishes the batch norm from
 * this block when p.ok[0] stands. No ticket, no block waits on another: 5.9 us, where 4 blocks of 16 channels that
 * built Cov in shared memory and finished the batch norm in the last block (a ticket) took 16 us. */
__global__ void __launch_bounds__(256) cf_gram_stats_kernel(const __grid_constant__ cf_gram_params p)
{
    constexpr int KMAX = CF_GRAM_MAX_CIN * GKH * GKW;
    __shared__ double w[KMAX], s1[KMAX];
    __shared__ float shift[CF_GRAM_MAX_CIN];
    __shared__ double red[4][8];
    const int taps = GKH * GKW, K = p.cin * taps, c = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const double count = (double)p.n * p.oh * p.ow, inv_count = 1.0 / count;
    cf_grid_release();
    /* before the wait: the input rows of the shifts and the weights, which no kernel of this chain writes */
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        w[k] = (double)p.wei[(size_t)c * K + k];
    gram_shifts(p, shift); /* ends with a barrier */
    cf_grid_wait(); /* G and s1 from the sum kernel */
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        s1[k] = p.s1[k];
    double q = 0, ws = 0, wshift = 0, bound = 0;
    __syncthreads(); /* s1 */
    /* w^T G w: a warp per row k of G, its lanes along the row (coalesced; no index division) */
#pragma unroll 3
    for (int k = warp; k < K; k += blockDim.x >> 5) {
        double r = 0;
#pragma unroll
        for (int i = 0; i < (KMAX + 31) / 32; ++i) {
            const int l = lane + 32 * i;
            if (l < K)
                r = fma(w[l], p.gram[(size_t)k * K + l], r);
        }
        q = fma(w[k], r, q);
    }
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        ws += w[k] * s1[k];
        wshift += w[k] * (double)shift[k / taps];
        bound += fabs(w[k]) * sqrt(fmax(p.gram[(size_t)k * K + k], 0.0) * inv_count); /* sqrt(E[x'^2]) */
    }
    double v[4] = {q, ws, wshift, bound};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        for (int o = 16; o > 0; o >>= 1)
            v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
        if (lane == 0)
            red[i][warp] = v[i];
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int i = 0; i < 4; ++i) { /* the warps in order: deterministic */
        v[i] = red[i][0];
        for (int ww = 1; ww < (int)(blockDim.x >> 5); ++ww)
            v[i] += red[i][ww];
    }
    const double mc = v[1] * inv_count + v[2], qc = (v[0] - v[1] * v[1] * inv_count) * inv_count, bc = v[3];
    double a = 1.0, b = p.bia ? (double)p.bia[c] : 0.0; /* the bias and the affine ops before the batch norm */
    for (int o = 0; o < p.bn; ++o)
        cf_epi_fold_affine(p.op[o], c, &a, &b);
    const double mean = a * mc + b, var = a * a * qc;
    const bool ok = qc > 0 && bc * bc <= CF_GRAM_KAPPA * qc && isfinite(mean) && isfinite(var);
    if (!ok)
        atomicAnd(&p.ok[0], 0);
    const float ratio = qc > 0 ? (float)(bc * bc / qc) : INFINITY; /* positive: ordered as int bits */
    atomicMax(&p.ok[1], __float_as_int(ratio != ratio ? INFINITY : ratio));
    float *st = p.stats + (size_t)c * 3;
    st[0] = __int_as_float((int)count);
    st[1] = (float)mean;
    st[2] = (float)(var * count);
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
    p->lanes = (p->cinp / 2) * p->cinp;
    p->slots = CF_GRAM_THREADS / p->lanes;
    p->c0 = (CF_GRAM_KW - 1) / 4;
    p->c1 = (p->ow - 1) / 4;
    /* Two CTAs per SM (cf_gram_kernel's launch bounds): each stages a band while the other computes. The shared
     * layout [channel][row][ls] needs a channel stride of 4 mod 8 floats, so that a warp's 4 first-factor rows and 8
     * partner rows fall in distinct banks. With TMA (W a multiple of 4) the box lands dense: ls = 4m with m odd and
     * an odd number of rows (rb + kh - 1) give it; otherwise the stride is padded. */
    const size_t limit = 113 * 1024 - 2 * (CF_GRAM_EO + 1) * CF_GRAM_THREADS * 4 - 256; /* staging, with the edge sums */
    const int ls_min = 4 * (p->c1 + 3); /* guard quad, the chunks, the last chunk's next quad */
    int ls_tma = ls_min + ((ls_min / 4) % 2 == 0 ? 4 : 0);
    p->tma_geometry = p->w % 4 == 0 && ls_tma <= 256;
    /* TMA: rb core rows + kh - 1 partner rows per band, the box's rows made odd; one buffer (two CTAs per SM: one
     * stages while the other computes) or two (CONVFUSE_GRAM_BUFS=2: the next band lands during this one's products) */
    p->bufs = cf_env_int("CONVFUSE_GRAM_BUFS", 1, 1, 2);
    if (p->tma_geometry) {
        p->ls = ls_tma;
        for (p->rb = cf_env_int("CONVFUSE_GRAM_RB", 16, 1, 64);; p->rb = (p->rb + 1) / 2) {
            p->box_rows = (p->rb + CF_GRAM_KH - 1) | 1;
            p->cs = p->box_rows * p->ls;
            if ((size_t)p->bufs * p->cinp * p->cs * 4 <= (p->bufs == 2 ? 2 : 1) * limit || p->rb == 1)
                break;
        }
        if ((size_t)p->bufs * p->cinp * p->cs * 4 > (p->bufs == 2 ? 2 : 1) * limit)
            p->tma_geometry = 0;
    }
    if (!p->tma_geometry) {
        p->ls = 4 + 4 * (p->c1 + 2);
        for (p->rb = 16;; p->rb /= 2) {
            p->cs = (p->rb + CF_GRAM_KH - 1) * p->ls;
            p->cs += (4 - p->cs % 16 + 16) % 16;
            if ((size_t)p->cinp * p->cs * 4 <= limit || p->rb == 1)
                break;
        }
    }
    if ((size_t)p->cinp * p->cs * 4 > limit) {
        snprintf(why, why_size, "statistics from the input Gram: rows of %d floats do not fit shared memory", p->w);
        return false;
    }
    /* about one wave of main CTAs (two per SM), each a share of the batch's core rows and one frame job */
    const int core_rows = p->oh - (CF_GRAM_KH - 1);
    const long long rows = (long long)p->n * core_rows;
    const long long want = 2LL * (plan->device_sm_count > 0 ? plan->device_sm_count : 132);
    p->main_ctas = (int)(rows < want * 4 ? (rows + 3) / 4 : want); /* at least ~4 rows each */
    if (p->main_ctas < CF_GRAM_NCLS - 1)
        p->main_ctas = CF_GRAM_NCLS - 1; /* every frame class takes one job at least */
    /* frame jobs: slices of one class each, as many as fit one per main CTA (the smallest slice size that does) */
    long long frame_total = 0, per_class[CF_GRAM_NCLS];
    for (int k = 0; k < CF_GRAM_NCLS; ++k) {
        const int rc = k / (2 * CF_GRAM_KW - 1), cc = k % (2 * CF_GRAM_KW - 1);
        const long long r = rc == CF_GRAM_KH - 1 ? core_rows : 1, c = cc == CF_GRAM_KW - 1 ? p->ow - (CF_GRAM_KW - 1) : 1;
        /* the core rows' classes (the core and the edge columns) are the main CTAs'; the frame jobs take the rest */
        per_class[k] = rc == CF_GRAM_KH - 1 ? 0 : r * c * p->n;
        frame_total += per_class[k];
    }
    long long q = frame_total / p->main_ctas + 1; /* grows to the largest class at most, where jobs = classes */
    for (;; q += q / 8 + 1) {
        long long jobs = 0;
        for (int k = 0; k < CF_GRAM_NCLS; ++k)
            jobs += (per_class[k] + q - 1) / q;
        if (jobs <= p->main_ctas)
            break;
    }
    int next = 0;
    for (int k = 0; k < CF_GRAM_NCLS; ++k) {
        p->cls_first[k] = next;
        p->cls_count[k] = (int)((per_class[k] + q - 1) / q);
        next += p->cls_count[k];
    }
    p->frame_jobs = next;
    p->nrows = 5 * p->main_ctas + p->frame_jobs;
    if (p->frame_jobs + 5 * p->main_ctas > CF_GRAM_MAX_ROWS) {
        snprintf(why, why_size, "statistics from the input Gram: %d rows of partial sums (at most %d)",
                 p->frame_jobs + 5 * p->main_ctas, CF_GRAM_MAX_ROWS);
        return false;
    }
    p->cls_first[CF_GRAM_CORE] = 0;
    p->cls_count[CF_GRAM_CORE] = p->main_ctas;
    return true;
}

/* Dynamic shared memory: the staging buffers (their start is also the flush area, which can be the larger), then
 * the edge columns' sums at es_off, which this sets. */
static size_t gram_smem_layout(cf_gram_params *p)
{
    const size_t stage = (size_t)(p->tma_geometry ? p->bufs : 1) * p->cinp * p->cs, red = (size_t)p->slots * p->ne;
    p->es_off = (int)(stage > red ? stage : red);
    const size_t edges = (size_t)2 * (CF_GRAM_EO + 1) * CF_GRAM_THREADS;
    return 128 + (p->es_off + edges) * 4; /* + the alignment of the TMA destination */
}

size_t cf_gram_workspace_bytes(const struct cf_plan *plan, int bn)
{
    cf_gram_params p;
    char why[256];
    if (bn < 0 || !gram_geometry(plan, bn, &p, why, sizeof why))
        return 0;
    const size_t K = (size_t)p.cin * CF_GRAM_KH * CF_GRAM_KW;
    const size_t part_bytes = ((size_t)(p.frame_jobs + 5 * p.main_ctas) * p.ne * sizeof(float) + 7) & ~(size_t)7;
    return part_bytes + (K * K + K) * sizeof(double) + 2 * sizeof(int);
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
                                     224 * 1024));
    gram_attr_dev = dev;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_gram_launch(const struct cf_plan *plan, const cf_args_t *args, int bn, const struct cf_ig_op *ops,
                           void *workspace, float *stats, cudaStream_t stream, int **ok_out)
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
    p.part = (float *)workspace;
    const int K = p.cin * CF_GRAM_KH * CF_GRAM_KW;
    const size_t part_bytes = ((size_t)(p.frame_jobs + 5 * p.main_ctas) * p.ne * sizeof(float) + 7) & ~(size_t)7;
    p.gram = (double *)((char *)workspace + part_bytes);
    p.s1 = p.gram + (size_t)K * K;
    p.ok = (int *)(p.s1 + K);
    p.stats = stats;
    p.debug = cf_env_int("CONVFUSE_GRAM_DEBUG", 0, 0, 3); /* timing only: 1 no frame jobs, 2 no core products */
    p.frame_first = cf_env_int("CONVFUSE_GRAM_FRAME_FIRST", 1, 0, 1);
    if (p.debug)
        fprintf(stderr, "convfuse: CONVFUSE_GRAM_DEBUG=%d skips part of the Gram statistics: the batch norm's output "
                        "is WRONG (for timing the parts only)\n", p.debug);
    p.tma = 0;
    if (p.tma_geometry && (uintptr_t)p.src % 16 == 0) {
        const cuuint64_t dim[4] = {(cuuint64_t)p.w, (cuuint64_t)p.h, (cuuint64_t)p.cin, (cuuint64_t)p.n};
        const cuuint64_t stride[3] = {(cuuint64_t)p.w * 4, (cuuint64_t)p.h * p.w * 4, (cuuint64_t)p.cin * p.h * p.w * 4};
        const cuuint32_t box[4] = {(cuuint32_t)p.ls, (cuuint32_t)p.box_rows, (cuuint32_t)p.cin, 1};
        p.tma = cf_tmap_f32(&p.tmap, p.src, 4, dim, stride, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    }
    const size_t smem = gram_smem_layout(&p);
    cf_status_t st = gram_set_attr(false);
    if (st != CF_STATUS_SUCCESS)
        return st;
    const int grid = p.main_ctas;
    cf::cf_gram_kernel<<<grid, CF_GRAM_THREADS, smem, stream>>>(p);
    if (cudaGetLastError() != cudaSuccess) { /* e.g. a cudaDeviceReset cleared the attribute: set it, once more */
        st = gram_set_attr(true);
        if (st != CF_STATUS_SUCCESS)
            return st;
        cf::cf_gram_kernel<<<grid, CF_GRAM_THREADS, smem, stream>>>(p);
        CF_CUDA_TRY(cudaGetLastError());
    }
    const bool pdl = cf_pdl_enabled();
    CF_CUDA_TRY(cf::cf_launch(cf::cf_gram_sum_kernel, dim3((unsigned)((p.ne + 7) / 8)), dim3(256), 0, stream, pdl, p));
    CF_CUDA_TRY(cf::cf_launch(cf::cf_gram_stats_kernel, dim3((unsigned)p.cout), dim3(256), 0, stream, pdl, p));
    if (cf_verbose("launch"))
        fprintf(stderr,
                "convfuse: launch: batch-norm statistics from the input Gram (CTAs=%d, bands of %d rows staged by %s, "
                "frame jobs=%d, smem=%zu); the direct statistics pass runs only if the device-side guard refuses them\n",
                p.main_ctas, p.rb, p.tma ? "TMA" : "copies", p.frame_jobs, smem);
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
