/* Stride-2 transposed convolution + chain (convt_s2.cuh): the kernel, then the host side (supports, launch). */
#include "convt_s2.cuh"
#include "convt_s2_host.h"
#include "epilogue.cuh"
#include "igemm_host.h"
#include "stages_host.h"
#include "tf32.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mutex>

namespace cf {

/* ---- small PTX helpers ------------------------------------------------------------------------------------ */

__device__ __forceinline__ uint32_t ct_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ct_sts128(uint32_t addr, float a, float b, float c, float d)
{
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

/* the four values rounded to nearest TF32 (the tensor core would truncate them: an error biased toward zero that adds
 * up over the K sum; large softmax logits showed it) */
__device__ __forceinline__ void ct_sts128_rn(uint32_t addr, float a, float b, float c, float d)
{
    ct_sts128(addr, cf_tf32_rna_f(a), cf_tf32_rna_f(b), cf_tf32_rna_f(c), cf_tf32_rna_f(d));
}

__device__ __forceinline__ void ct_sts32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void ct_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void ct_arrive(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* named barrier over `threads` threads (warp multiples); id 0 is __syncthreads' */
__device__ __forceinline__ void ct_bar(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t ct_cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void ct_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* this CTA's shared address as seen from CTA `rank` of the cluster */
__device__ __forceinline__ uint32_t ct_mapa(uint32_t addr, uint32_t rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

/* ---- shared memory ---------------------------------------------------------------------------------------- */

struct ct_smem {
    uint32_t b;     /* B tiles: [column phase][row tap a][column tap b][k8 step] x 2 KB */
    uint32_t ring;  /* slot 0 of the input-row ring */
    uint32_t slot;  /* bytes per slot */
    float *stg;     /* per-warp staging, consumer warps 0..4*ncw-1 */
    float2 *xch;    /* softmax exchange [warpgroup][slot][129] */
    float *ext;     /* extra column: raw conv values [warpgroup][64 channels] */
    float2 *tab;    /* affine tables [ntables][64 channels] */
    uint32_t full;  /* mbarriers: ring slot filled (4), ring slot free (4), exchange slot [warpgroup][2] */
    uint32_t empty;
    uint32_t xbar;
};

__device__ __forceinline__ ct_smem ct_carve(const cf_ct_params &p, unsigned char *base)
{
    ct_smem s;
    unsigned char *q = base;
    s.b = ct_smem_u32(q);
    q += cf_ct_b_bytes(&p);
    s.ring = ct_smem_u32(q);
    s.slot = (uint32_t)cf_ct_slot_bytes(&p);
    q += CF_CT_SLOTS * cf_ct_slot_bytes(&p);
    s.stg = reinterpret_cast<float *>(q);
    q += CF_CT_STG_BYTES(p.ncw);
    s.xch = reinterpret_cast<float2 *>(q);
    q += CF_CT_XCH_BYTES(p.ncw);
    s.ext = reinterpret_cast<float *>(q);
    q += CF_CT_EXT_BYTES(p.ncw);
    s.tab = reinterpret_cast<float2 *>(q);
    q += (size_t)p.ntables * 64 * 8;
    s.full = ct_smem_u32(q);
    s.empty = s.full + 8 * CF_CT_SLOTS;
    s.xbar = s.empty + 8 * CF_CT_SLOTS;
    return s;
}

/* ---- producer: input rows into the ring ------------------------------------------------------------------- */

/* Fill ring load rho with input row r of segment seg of image n: position p of plane g holds channels 4g..4g+3 of
 * column seg*64 - 1 + p (zero outside the image and past C_in). A thread copies 4 channels x 4 columns per task
 * (four 16-byte loads, transposed in registers into four 16-byte writes): lanes 0-7 take 8 consecutive planes of
 * one column group, so each quarter-warp's writes land in 8 distinct bank groups (CF_CT_PLANE = 4 mod 32 words).
 * Values are rounded to nearest TF32 on the way (ct_sts128_rn), after all loads are issued: rounding at the load
 * made ptxas wait for each load in turn (the producer then bound the kernel: 1.63 ms against 1.15 at KB2-91). */
__device__ __forceinline__ void ct_fill(const cf_ct_params &p, const ct_smem &s, int rho, int n, int seg, int r)
{
    const int tid = threadIdx.x & 127, g4 = p.cp >> 2;
    const uint32_t slot = (uint32_t)rho % CF_CT_SLOTS;
    if (rho >= CF_CT_SLOTS)
        ig_mbar_wait(s.empty + 8 * slot, (uint32_t)(rho / CF_CT_SLOTS - 1) & 1u);
    const uint32_t base = s.ring + slot * s.slot;
    const bool row_ok = r >= 0 && r < p.h;
    const int hw = p.h * p.w, col0 = seg * CF_CT_SEG;
    const float *xr = p.src + ((int64_t)n * p.cin * p.h + (row_ok ? r : 0)) * p.w;
    float4 v[2][4];
#pragma unroll
    for (int it = 0; it < 2; ++it) {
        const int task = tid + 128 * it, g = task % g4, q = task / g4, col = col0 + 4 * q;
        const bool ok = row_ok && q < 16 && col < p.w;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int ci = 4 * g + m;
            v[it][m] = (CF_CT_ABLATE & 2) ? make_float4(1.f, 1.f, 1.f, 1.f)
                       : ok && ci < p.cin ? __ldg(reinterpret_cast<const float4 *>(xr + (int64_t)ci * hw + col))
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    /* the halo columns: positions 0 (column seg*64 - 1) and 65 (seg*64 + 64) */
    float hv[4] = {0.f, 0.f, 0.f, 0.f};
    int hpos = -1, hg = 0;
    if (tid < 2 * g4) {
        hg = tid % g4;
        const int side = tid / g4, col = side ? col0 + CF_CT_SEG : col0 - 1;
        hpos = side ? CF_CT_POS - 1 : 0;
        if (row_ok && col >= 0 && col < p.w)
#pragma unroll
            for (int m = 0; m < 4; ++m)
                if (4 * hg + m < p.cin)
                    hv[m] = __ldg(xr + (int64_t)(4 * hg + m) * hw + col);
    }
#pragma unroll
    for (int it = 0; it < 2; ++it) {
        const int task = tid + 128 * it, g = task % g4, q = task / g4;
        if (q < 16) {
            const uint32_t a = base + (uint32_t)(g * CF_CT_PLANE + 1 + 4 * q) * 16u;
            ct_sts128_rn(a, v[it][0].x, v[it][1].x, v[it][2].x, v[it][3].x);
            ct_sts128_rn(a + 16, v[it][0].y, v[it][1].y, v[it][2].y, v[it][3].y);
            ct_sts128_rn(a + 32, v[it][0].z, v[it][1].z, v[it][2].z, v[it][3].z);
            ct_sts128_rn(a + 48, v[it][0].w, v[it][1].w, v[it][2].w, v[it][3].w);
        }
    }
    if (hpos >= 0)
        ct_sts128_rn(base + (uint32_t)(hg * CF_CT_PLANE + hpos) * 16u, hv[0], hv[1], hv[2], hv[3]);
    fence_proxy_async(); /* the wgmma read the slot through the async proxy */
    ct_arrive(s.full + 8 * slot);
}

/* The producer walks the CTA's tiles in order: a tile needs input rows j + qh - 1 and j + qh; the first tile of a
 * strip (image, segment) loads both, every later one only the second (the first was its predecessor's). */
__device__ void ct_producer(const cf_ct_params &p, const ct_smem &s, int qh, int k0, int k1)
{
    const int tid = threadIdx.x & 127, g4 = p.cp >> 2;
    /* positions 66..72 of every plane are read by the extra column's n8 tile and ignored: keep them finite */
    for (int i = tid; i < CF_CT_SLOTS * g4 * (CF_CT_PLANE - CF_CT_POS); i += 128) {
        const int sl = i / (g4 * (CF_CT_PLANE - CF_CT_POS)), rem = i % (g4 * (CF_CT_PLANE - CF_CT_POS));
        const int g = rem / (CF_CT_PLANE - CF_CT_POS), pos = CF_CT_POS + rem % (CF_CT_PLANE - CF_CT_POS);
        ct_sts128(s.ring + (uint32_t)sl * s.slot + (uint32_t)(g * CF_CT_PLANE + pos) * 16u, 0.f, 0.f, 0.f, 0.f);
    }
    const int ph = p.ph[qh];
    int j = k0 % ph, seg = (k0 / ph) % p.nseg, n = k0 / ph / p.nseg, rho = 0;
    for (int k = k0; k < k1; ++k) {
        if (k == k0 || j == 0)
            ct_fill(p, s, rho++, n, seg, j + qh - 1);
        ct_fill(p, s, rho++, n, seg, j + qh);
        if (++j == ph) {
            j = 0;
            if (++seg == p.nseg) {
                seg = 0;
                ++n;
            }
        }
    }
}

/* ---- consumers: set-up -------------------------------------------------------------------------------------- */

/* B tile (k8 step, qw, a, b) for channels c0..c0+63: 64 channels x 8 k in core matrices of 8 channels x 4 k
 * (k-core at +128 B, 8-channel group at +256 B), TF32-rounded. One 16-byte load of the weights holds the 4 kw of a
 * (ci, co, kh): kw = 3 - qw - 2b spreads them over the four (qw, b) tiles. */
__device__ void ct_load_b(const cf_ct_params &p, const ct_smem &s, int qh, int c0, int ctid)
{
    for (int idx = ctid; idx < p.cp * 64 * 2; idx += 128 * p.ncw) {
        const int nn = idx & 63, a = (idx >> 6) & 1, ci = idx >> 7, co = c0 + nn, kh = 3 - qh - 2 * a;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ci < p.cin && co < p.cout)
            v = __ldg(reinterpret_cast<const float4 *>(p.wei + ((int64_t)(ci * p.cout + co) * 4 + kh) * 4));
        const int ks = ci >> 3, k = ci & 7;
        const uint32_t off = (uint32_t)((k >> 2) * 128 + (nn >> 3) * 256 + (nn & 7) * 16 + (k & 3) * 4);
        const uint32_t tile = 2048u; /* [k8 step][(qw, a, b)]: tile (qw, a, b) of step ks at 2048 (8 ks + 4 qw + 2 a + b) */
        const uint32_t t00 = s.b + (uint32_t)(8 * ks + 2 * a) * 2048u + off; /* (qw 0, a, b 0) */
        ct_sts32(t00, cf_tf32_rna(v.w));            /* kw 3: qw 0, b 0 */
        ct_sts32(t00 + tile, cf_tf32_rna(v.y));     /* kw 1: qw 0, b 1 */
        ct_sts32(t00 + 4 * tile, cf_tf32_rna(v.z)); /* kw 2: qw 1, b 0 */
        ct_sts32(t00 + 5 * tile, cf_tf32_rna(v.x)); /* kw 0: qw 1, b 1 */
    }
}

/* The AFFINE stages' per-channel (a, b) for this CTA's channels, folded in double (cf_epi_fold_affine). */
__device__ void ct_build_tables(const cf_ct_params &p, const ct_smem &s, int c0, int ctid)
{
    for (int st = 0; st < p.nstage; ++st) {
        const cf_ig_stage &sg = p.stage[st];
        if (sg.kind != CF_IG_AFFINE && sg.kind != CF_IG_AFFINE_SIGMOID)
            continue;
        const double pre = sg.kind == CF_IG_AFFINE_SIGMOID ? -1.4426950408889634 : 1.0;
        for (int c = ctid; c < 64; c += 128 * p.ncw) {
            const int co = c0 + c;
            double a = 1.0, b = 0.0;
            if (co < p.cout) {
                if (sg.with_bias && p.bia)
                    b = p.bia[co];
                for (int o = sg.op_begin; o < sg.op_end; ++o)
                    cf_epi_fold_affine(p.op[o], co, &a, &b);
            }
            s.tab[sg.table * 64 + c] = make_float2((float)(a * pre), (float)(b * pre));
        }
    }
}

/* ---- consumers: the epilogue ------------------------------------------------------------------------------ */

/* Stages [st0, st1) over a warpgroup's accumulators acc[column phase][4*nt + e]: channel 8nt + 2t + (e & 1). */
__device__ __forceinline__ void ct_apply(const cf_ct_params &p, const float2 *tab, int st0, int st1,
                                         float (&acc)[2][32], int t)
{
    for (int st = st0; st < st1; ++st) {
        const int kind = p.stage[st].kind;
        if (kind == CF_IG_AFFINE || kind == CF_IG_AFFINE_SIGMOID) {
            const float2 *tb = tab + p.stage[st].table * 64 + 2 * t;
            const bool sig = kind == CF_IG_AFFINE_SIGMOID;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float2 t0 = tb[8 * nt], t1 = tb[8 * nt + 1];
#pragma unroll
                for (int qw = 0; qw < 2; ++qw)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        acc[qw][4 * nt + e] = fmaf(acc[qw][4 * nt + e], (e & 1) ? t1.x : t0.x, (e & 1) ? t1.y : t0.y);
            }
            if (sig) /* the table is prescaled by -log2(e): sigmoid = 1 / (1 + 2^x) */
#pragma unroll
                for (int qw = 0; qw < 2; ++qw)
#pragma unroll
                    for (int i = 0; i < 32; ++i)
                        acc[qw][i] = cf_rcp(1.f + cf_ex2(acc[qw][i]));
        } else {
#define CT_MAP(fn)                                                                                                     \
    _Pragma("unroll") for (int qw = 0; qw < 2; ++qw) _Pragma("unroll") for (int i = 0; i < 32; ++i) acc[qw][i] =       \
        fn(acc[qw][i])
            if (kind == CF_IG_SIGMOID)
                CT_MAP(cf_sigmoid);
            else if (kind == CF_IG_RELU)
                CT_MAP(cf_relu);
            else if (kind == CF_IG_TANH)
                CT_MAP(cf_tanh);
            else if (kind == CF_IG_GELU)
                CT_MAP(cf_gelu);
#undef CT_MAP
        }
    }
}

/* The same stages for one value of local channel c (the extra column). */
__device__ __forceinline__ float ct_apply1(const cf_ct_params &p, const float2 *tab, int st0, int st1, float v, int c)
{
    for (int st = st0; st < st1; ++st) {
        const int kind = p.stage[st].kind;
        if (kind == CF_IG_AFFINE || kind == CF_IG_AFFINE_SIGMOID) {
            const float2 tt = tab[p.stage[st].table * 64 + c];
            v = fmaf(v, tt.x, tt.y);
            if (kind == CF_IG_AFFINE_SIGMOID)
                v = cf_rcp(1.f + cf_ex2(v));
        } else if (kind == CF_IG_SIGMOID) {
            v = cf_sigmoid(v);
        } else if (kind == CF_IG_RELU) {
            v = cf_relu(v);
        } else if (kind == CF_IG_TANH) {
            v = cf_tanh(v);
        } else if (kind == CF_IG_GELU) {
            v = cf_gelu(v);
        }
    }
    return v;
}

/* Softmax statistics over this CTA's channels for the thread's 4 pixels (r = 2*qw + half: position 16w + g + 8 half);
 * acc becomes exp(x - max). fmaxf drops a NaN from the max, but the NaN's exp makes the sum and so every output of
 * the pixel NaN, and +inf gives inf - inf = NaN: both as torch.softmax. Padded channels (past C_out) take -inf. */
__device__ __forceinline__ void ct_softmax_stats(const cf_ct_params &p, int c0, int t, float (&acc)[2][32],
                                                 float (&m)[4], float (&l)[4])
{
    if (c0 + 64 > p.cout)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (c0 + 8 * nt + 2 * t + (e & 1) >= p.cout) {
                    acc[0][4 * nt + e] = -INFINITY;
                    acc[1][4 * nt + e] = -INFINITY;
                }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int qw = r >> 1, half = r & 1;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
            mx = fmaxf(mx, fmaxf(acc[qw][4 * nt + 2 * half], acc[qw][4 * nt + 2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float off = -mx * CF_LOG2E;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float x = cf_ex2(fmaf(acc[qw][4 * nt + 2 * half + e], CF_LOG2E, off));
                acc[qw][4 * nt + 2 * half + e] = x;
                sum += x;
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        m[r] = mx;
        l[r] = sum;
    }
}

/* The factor that turns this CTA's exp(x - m) into the softmax over both CTAs' channels, given the peer's (m', l'). */
__device__ __forceinline__ float ct_combine(float m, float l, float2 o)
{
    const float mm = fmaxf(m, o.x), own = cf_ex2((m - mm) * CF_LOG2E);
    return own * cf_rcp(l * own + o.y * cf_ex2((o.x - mm) * CF_LOG2E));
}

/* The pair's exchange of per-pixel (max, sum): lane t = 0 of each quad writes its 4 pixels into the peer's slot with
 * st.async, completing bytes on the peer's barrier; the extra column's pair (warp 0) goes as entry 128. One thread per
 * warpgroup arms its own slot for the bytes it expects, and every thread waits for them. Two slots used in turn (kwg,
 * the warpgroup's tile count): the peer writes a slot again only after it received this warpgroup's next message,
 * which leaves after this warpgroup's reads of the slot. */
template <bool EXTRA>
__device__ __forceinline__ void ct_exchange(const ct_smem &s, int cw, uint32_t rank, int kwg, const float (&m)[4],
                                            const float (&l)[4], float me, float le, float2 (&o)[4], float2 &oe)
{
    const int wtid = threadIdx.x & 127, w = wtid >> 5, lane = wtid & 31, g = lane >> 2;
    const uint32_t xs = (uint32_t)kwg & 1u, bar = s.xbar + 8u * (2u * cw + xs);
    float2 *xb = s.xch + (2 * cw + xs) * 129;
    if (wtid == 0)
        ig_mbar_expect(bar, (128u + (EXTRA ? 1u : 0u)) * 8u);
    if ((lane & 3) == 0) {
        const uint32_t rx = ct_mapa(ct_smem_u32(xb), rank ^ 1u), rbar = ct_mapa(bar, rank ^ 1u);
#pragma unroll
        for (int r = 0; r < 4; ++r)
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
                             rx + 8u * ((r >> 1) * 64 + 16 * w + g + 8 * (r & 1))),
                         "f"(m[r]), "f"(l[r]), "r"(rbar)
                         : "memory");
        if (EXTRA && wtid == 0)
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
                             rx + 8u * 128u),
                         "f"(me), "f"(le), "r"(rbar)
                         : "memory");
    }
    ig_mbar_wait(bar, ((uint32_t)kwg >> 1) & 1u);
#pragma unroll
    for (int r = 0; r < 4; ++r)
        o[r] = xb[(r >> 1) * 64 + 16 * w + g + 8 * (r & 1)];
    if (EXTRA)
        oe = xb[128];
}

__device__ __forceinline__ float ct_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float ct_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- consumers: one tile ---------------------------------------------------------------------------------- */

/* Tile (n, seg, j) on rows in ring loads rho and rho + 1. ns: rho is this tile's alone (first of its strip), last:
 * so is rho + 1; the ring slot of a row is free once both of its tiles, or its single tile twice, have arrived. */
template <bool PAIR, bool EXTRA>
__device__ __forceinline__ void ct_tile(const cf_ct_params &p, const ct_smem &s, int qh, int c0, uint32_t rank,
                                        int n, int seg, int j, int rho, bool ns, bool last, int kwg)
{
    const int cw = (threadIdx.x >> 7) - 1, wtid = threadIdx.x & 127, w = wtid >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t sa = (uint32_t)rho % CF_CT_SLOTS, sb = (uint32_t)(rho + 1) % CF_CT_SLOTS;
    ig_mbar_wait(s.full + 8 * sa, (uint32_t)(rho / CF_CT_SLOTS) & 1u);
    ig_mbar_wait(s.full + 8 * sb, (uint32_t)((rho + 1) / CF_CT_SLOTS) & 1u);

    /* descriptors as 32-bit halves: lo = start >> 4 | LBO >> 4 << 16, hi = SBO >> 4. A (ring): K-adjacent core
     * matrices are planes apart, M-adjacent 128 B; B: K-adjacent 128 B, N-adjacent 256 B. The start field is 14
     * bits: in a cluster a CTA's shared::cta addresses carry its rank above bit 17 (they are its shared::cluster
     * addresses), which unmasked would land in LBO - rank 1 of a pair computed garbage that way. */
    const uint32_t a_lo[2] = {(((s.ring + sa * s.slot) >> 4) & 0x3fffu) | (uint32_t)CF_CT_PLANE << 16,
                              (((s.ring + sb * s.slot) >> 4) & 0x3fffu) | (uint32_t)CF_CT_PLANE << 16};
    const uint32_t b_lo = ((s.b >> 4) & 0x3fffu) | 8u << 16;
    float acc[2][32], ax[4];
    if (CF_CT_ABLATE & 64)
        ax[0] = ax[1] = ax[2] = ax[3] = 0.f;
    wgmma_fence();
    const int ksteps = (CF_CT_ABLATE & 16) ? 1 : p.ksteps;
    /* unrolled by the largest step count (C_in <= 64): ptxas puts a warpgroup.arrive at the head of a wgmma loop
     * (C7519), which closed a wgmma group every k8 step; unrolled, a tile's wgmma are one group */
#pragma unroll 8
    for (int ks = 0; ks < ksteps; ++ks) {
#pragma unroll
        for (int qw = 0; qw < 2; ++qw)
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < 2; ++b) /* column tap b at position 1 + (qw - 1 + b) */
                    wgmma_ss_m64n64k8_tf32(acc[qw], a_lo[a] + (uint32_t)(2 * ks * CF_CT_PLANE + qw + b), 8u,
                                           b_lo + (uint32_t)((8 * ks + (qw * 2 + a) * 2 + b) * 128), 16u,
                                           ks | a | b);
        if (EXTRA && !(CF_CT_ABLATE & 64)) /* channels x position 64 (column W - 1), tap kw = 3 of column phase 0 */
#pragma unroll
            for (int a = 0; a < 2; ++a)
                wgmma_ss_m64n8k8_tf32(ax, b_lo + (uint32_t)((8 * ks + 2 * a) * 128), 16u,
                                      a_lo[a] + (uint32_t)(2 * ks * CF_CT_PLANE + CF_CT_SEG), 8u, ks | a);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(acc[0]);
    wgmma_pin(acc[1]);
    if (EXTRA)
        wgmma_pin(ax);
    ct_bar(1 + cw, 128); /* every warp's wgmma are done with the two rows */
    if (wtid == 0) {
        ct_arrive(s.empty + 8 * sa, ns ? 2u : 1u);
        ct_arrive(s.empty + 8 * sb, last ? 2u : 1u);
    }

    const int sm = p.softmax_stage, pre_end = sm >= 0 ? sm : p.nstage;
    float *ext = s.ext + cw * 64;
    if (EXTRA && t == 0) {
        ext[16 * w + g] = ax[0];
        ext[16 * w + g + 8] = ax[2];
    }
    float e0 = 0.f, e1 = 0.f; /* extra column, warp 0: channels lane and lane + 32 */
    const bool math = !(CF_CT_ABLATE & 8);
    if (math)
        ct_apply(p, s.tab, 0, pre_end, acc, t);
    if (math && sm >= 0) {
        float m[4], l[4], f[4], me = 0.f, le = 0.f;
        ct_softmax_stats(p, c0, t, acc, m, l);
        if (EXTRA) {
            ct_bar(1 + cw, 128);
            if (w == 0) {
                e0 = ct_apply1(p, s.tab, 0, pre_end, ext[lane], lane);
                e1 = ct_apply1(p, s.tab, 0, pre_end, ext[lane + 32], lane + 32);
                if (c0 + lane >= p.cout)
                    e0 = -INFINITY;
                if (c0 + lane + 32 >= p.cout)
                    e1 = -INFINITY;
                me = ct_warp_max(fmaxf(e0, e1));
                e0 = cf_ex2((e0 - me) * CF_LOG2E);
                e1 = cf_ex2((e1 - me) * CF_LOG2E);
                le = ct_warp_sum(e0 + e1);
            }
        }
        float fe = 0.f;
        if (PAIR && !(CF_CT_ABLATE & 4)) {
            float2 o[4], oe = make_float2(0.f, 0.f);
            ct_exchange<EXTRA>(s, cw, rank, kwg, m, l, me, le, o, oe);
#pragma unroll
            for (int r = 0; r < 4; ++r)
                f[r] = ct_combine(m[r], l[r], o[r]);
            if (EXTRA)
                fe = ct_combine(me, le, oe);
        } else {
#pragma unroll
            for (int r = 0; r < 4; ++r)
                f[r] = cf_rcp(l[r]);
            fe = cf_rcp(le);
        }
#pragma unroll
        for (int qw = 0; qw < 2; ++qw)
#pragma unroll
            for (int i = 0; i < 32; ++i)
                acc[qw][i] *= f[2 * qw + ((i >> 1) & 1)];
        ct_apply(p, s.tab, sm + 1, p.nstage, acc, t);
        if (EXTRA && w == 0) {
            e0 = ct_apply1(p, s.tab, sm + 1, p.nstage, e0 * fe, lane);
            e1 = ct_apply1(p, s.tab, sm + 1, p.nstage, e1 * fe, lane + 32);
        }
    } else if (math && EXTRA) {
        ct_bar(1 + cw, 128);
        if (w == 0) {
            e0 = ct_apply1(p, s.tab, 0, p.nstage, ext[lane], lane);
            e1 = ct_apply1(p, s.tab, 0, p.nstage, ext[lane + 32], lane + 32);
        }
    }

    /* Store: per 8-channel slab the warp interleaves its two column phases (float2 writes: position i gives output
     * columns 2i, 2i + 1) into an 8 x 32 staging block, and each channel's 32 consecutive columns leave with one
     * store instruction (lane = column). */
    const int plane = p.oh * p.ow, row = 2 * j + qh, col = 128 * seg + 32 * w + lane;
    float *stg = s.stg + (cw * 4 + w) * 8 * CF_CT_STG_LD;
    float *dst = p.dst + ((int64_t)n * p.cout + c0) * plane + (int64_t)row * p.ow;
    const bool col_ok = col < p.ow && !(CF_CT_ABLATE & 1);
    /* the lane's column of channel c0 + 8nt, a store at q + c * plane (one IMAD.WIDE each; c * plane < 2^31 by
     * ct_geometry): indexing dst per store had cost ~7 instructions (the 64-bit index, the base reloaded from the
     * parameters, the channel guard, now only in a CTA's partial last channel half) */
    float *q = dst + col;
    const int nch = p.cout - c0 < 64 ? p.cout - c0 : 64; /* channels this CTA writes: 64 unless the last half */
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        float v[8];
        if (CF_CT_STG128) {
            /* column-major block: column c's 8 channels at word 8c, its two 16-byte halves swapped where bit 2 of c
             * is set, so the lane's two LDS.128 of its column are conflict-free per quarter-warp. A float2 write
             * holds channels (2t, 2t + 1) of one column; write i takes column phase ((g >> 1) & 1) ^ i, so that
             * the 16 lanes of a half-warp cover columns of 4 different residues mod 4: all 32 banks. */
            const int sw = (g >> 1) & 1;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int qw = sw ^ i, c = 2 * (g + 8 * h) + qw;
                    const float x0 = qw ? acc[1][4 * nt + 2 * h] : acc[0][4 * nt + 2 * h];
                    const float x1 = qw ? acc[1][4 * nt + 2 * h + 1] : acc[0][4 * nt + 2 * h + 1];
                    *reinterpret_cast<float2 *>(&stg[8 * c + ((2 * t) ^ (4 * sw))]) = make_float2(x0, x1);
                }
            __syncwarp();
            const int sr = (lane >> 2) & 1;
            const float4 lo = *reinterpret_cast<const float4 *>(&stg[8 * lane + 4 * sr]);
            const float4 hi = *reinterpret_cast<const float4 *>(&stg[8 * lane + 4 * (sr ^ 1)]);
            v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
            v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                *reinterpret_cast<float2 *>(&stg[(2 * t + (e & 1)) * CF_CT_STG_LD + 2 * (g + 8 * (e >> 1))]) =
                    make_float2(acc[0][4 * nt + e], acc[1][4 * nt + e]);
            __syncwarp();
#pragma unroll
            for (int c = 0; c < 8; ++c)
                v[c] = stg[c * CF_CT_STG_LD + lane];
        }
        __syncwarp();
        if (col_ok) {
            if (nch == 64) {
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    q[c * plane] = v[c];
            } else {
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    if (8 * nt + c < nch)
                        q[c * plane] = v[c];
            }
        }
        q += 8 * plane;
    }
    if (EXTRA && w == 0 && seg == p.nseg - 1 && !(CF_CT_ABLATE & 1)) { /* position 64 is column W - 1 only in the last segment */
        if (c0 + lane < p.cout)
            dst[(int64_t)lane * plane + p.ow - 1] = e0;
        if (c0 + lane + 32 < p.cout)
            dst[(int64_t)(lane + 32) * plane + p.ow - 1] = e1;
    }
}

/* The consumer warpgroups take every ncw-th tile of the CTA's range in turn; each follows every tile to know which ring
 * loads hold its rows (the producer's order, ct_producer). */
template <bool PAIR, bool EXTRA>
__device__ void ct_consumer(const cf_ct_params &p, const ct_smem &s, int qh, int k0, int k1, uint32_t rank)
{
    const int cw = (threadIdx.x >> 7) - 1, c0 = 64 * (int)(rank ^ (uint32_t)(CF_CT_ABLATE >> 5 & 1));
    ct_load_b(p, s, qh, c0, threadIdx.x - 128);
    ct_build_tables(p, s, c0, threadIdx.x - 128);
    fence_proxy_async(); /* B is read by the tensor cores */
    ct_bar(1 + p.ncw, 128 * p.ncw);
    const int ph = p.ph[qh];
    int j = k0 % ph, seg = (k0 / ph) % p.nseg, n = k0 / ph / p.nseg, rho_next = 0, kwg = 0;
    for (int k = k0; k < k1; ++k) {
        const bool ns = k == k0 || j == 0, last = k == k1 - 1 || j == ph - 1;
        const int rho = ns ? rho_next : rho_next - 1;
        rho_next += ns ? 2 : 1;
        if ((k - k0) % p.ncw == cw)
            ct_tile<PAIR, EXTRA>(p, s, qh, c0, rank, n, seg, j, rho, ns, last, kwg++);
        if (++j == ph) {
            j = 0;
            if (++seg == p.nseg) {
                seg = 0;
                ++n;
            }
        }
    }
}

/* Cluster c < groups0 takes row phase 0, the rest row phase 1; each a contiguous range of its phase's tiles. */
template <bool PAIR, bool EXTRA>
__global__ void __launch_bounds__(CF_CT_THREADS_MAX, 1) cf_ct_kernel(const __grid_constant__ cf_ct_params p)
{
    extern __shared__ __align__(128) unsigned char ct_dyn[];
    const ct_smem s = ct_carve(p, ct_dyn);
    const uint32_t rank = PAIR ? ct_cluster_rank() : 0u;
    const int cid = PAIR ? (int)(blockIdx.x >> 1) : (int)blockIdx.x;
    const int qh = cid < p.groups0 ? 0 : 1;
    const int gi = qh ? cid - p.groups0 : cid, ng = qh ? p.groups - p.groups0 : p.groups0;
    const int64_t tiles = p.tiles[qh];
    const int k0 = (int)(tiles * gi / ng), k1 = (int)(tiles * (gi + 1) / ng);
    if (threadIdx.x == 0) {
        for (int i = 0; i < CF_CT_SLOTS; ++i) {
            ig_mbar_init(s.full + 8 * i, 128);
            ig_mbar_init(s.empty + 8 * i, 2);
        }
        for (int i = 0; i < 2 * p.ncw; ++i)
            ig_mbar_init(s.xbar + 8 * i, 1);
        if (PAIR)
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (PAIR)
        ct_cluster_sync(); /* the peer's exchange barriers exist before the first st.async */
    if (threadIdx.x < 128)
        ct_producer(p, s, qh, k0, k1);
    else
        ct_consumer<PAIR, EXTRA>(p, s, qh, k0, k1, rank);
    if (PAIR)
        ct_cluster_sync(); /* no CTA leaves while its peer may still write into it */
}

} // namespace cf

/* ---- host ----------------------------------------------------------------------------------------------------- */

typedef void (*ct_kernel_fn)(const cf_ct_params);

static ct_kernel_fn ct_pick(bool pair, bool extra)
{
    return pair ? (extra ? cf::cf_ct_kernel<true, true> : cf::cf_ct_kernel<true, false>)
                : (extra ? cf::cf_ct_kernel<false, true> : cf::cf_ct_kernel<false, false>);
}

/* The plan's geometry as the kernel sees it (no CUDA calls); false with a reason where the kernel does not apply. */
static bool ct_geometry(const struct cf_plan *plan, size_t smem_limit, cf_ct_params *p, bool *pair, bool *extra,
                        char *why, size_t n)
{
    const cf_conv_desc_t *d = &plan->conv;
    memset(p, 0, sizeof *p);
    if (d->kind != CF_CONV_TRANSPOSE_2D || d->kh != 4 || d->kw != 4 || d->stride_h != 2 || d->stride_w != 2 ||
        d->pad_h != 1 || d->pad_w != 1 || d->dil_h != 1 || d->dil_w != 1) {
        snprintf(why, n, "serves conv_transpose2d with kernel 4x4, stride 2, padding 1, dilation 1 only");
        return false;
    }
    if (d->c_in > 64 || d->c_out > 128) {
        snprintf(why, n, "C_in=%lld, C_out=%lld: serves C_in <= 64 and C_out <= 128 (B resident)", (long long)d->c_in,
                 (long long)d->c_out);
        return false;
    }
    if (d->w % 4 != 0) {
        snprintf(why, n, "W=%lld is not a multiple of 4 (16-byte row loads)", (long long)d->w);
        return false;
    }
    if (cf_ig_products(plan) != 1) {
        snprintf(why, n, "math mode resolves to 3xTF32 products (TF32 only)");
        return false;
    }
    int softmax = 0;
    for (int i = 0; i < plan->chain.length; ++i) {
        softmax += plan->chain.ops[i].kind == CF_OP_SOFTMAX_CHANNELS;
        if (plan->chain.ops[i].kind == CF_OP_BATCH_NORM && plan->chain.ops[i].bn_mode == CF_BN_TRAINING) {
            snprintf(why, n, "training batch_norm needs a statistics pass (the implicit GEMM serves it)");
            return false;
        }
    }
    if (softmax > 1) {
        snprintf(why, n, "more than one softmax_channels in the chain");
        return false;
    }
    const int64_t chw = d->c_in * d->h * d->w, ohw = plan->oh * plan->ow;
    p->n = (int)d->n; p->cin = (int)d->c_in; p->h = (int)d->h; p->w = (int)d->w; p->cout = (int)d->c_out;
    p->oh = (int)plan->oh; p->ow = (int)plan->ow;
    p->cp = (p->cin + 7) / 8 * 8;
    p->ksteps = p->cp / 8;
    p->nseg = (p->w + CF_CT_SEG - 1) / CF_CT_SEG;
    p->ph[0] = (p->oh + 1) / 2;
    p->ph[1] = p->oh / 2;
    const int64_t t0 = d->n * p->nseg * p->ph[0];
    if (chw >= INT32_MAX || d->c_out * ohw >= INT32_MAX || d->n >= INT32_MAX || t0 >= INT32_MAX) {
        snprintf(why, n, "per-image sizes or tile count past 32 bits (C_in*H*W, C_out*OH*OW, N*segments*rows < 2^31)");
        return false;
    }
    p->tiles[0] = (int)t0;
    p->tiles[1] = (int)(d->n * p->nseg * p->ph[1]);
    *pair = p->cout > 64;
    *extra = plan->ow % 2 == 1 && p->w % CF_CT_SEG == 0; /* ow = 2W: one position past the last segment */
    cf_args_t none;
    memset(&none, 0, sizeof none);
    cf_ig_fill_stages(plan, &none, 0, plan->chain.length, NULL, NULL, p); /* sizes the tables */
    /* consumer warpgroups: 3 by default (a third epilogue in flight; docs/kb2_91.md), 2 where the third's staging
     * and exchange slots (7 KB) pass the shared memory a block may opt in to (smem_limit; 0: unknown, keep 3) */
    p->ncw = cf_env_int("CONVFUSE_CT_WGS", CF_CT_MAX_WGS, 2, CF_CT_MAX_WGS);
    if (p->ncw > 2 && smem_limit > 0 && cf_ct_smem_bytes(p) > smem_limit)
        p->ncw = 2;
    return true;
}

static int ct_device_cc(int *dev_out)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    if (dev_out)
        *dev_out = dev;
    return 10 * major + minor;
}

/* the dynamic shared memory a block may opt in to on device dev; 0 where the query fails */
static size_t ct_smem_optin(int dev)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (size_t)optin;
}

bool cf_ct_supports(const struct cf_plan *plan, char *why, size_t n)
{
    cf_ct_params p;
    bool pair = false, extra = false;
    /* CONVFUSE_CONVT_S2=0 hands its shapes to the implicit GEMM (A/B comparisons, a fallback) */
    if (!cf_env_int("CONVFUSE_CONVT_S2", 1, 0, 1)) {
        snprintf(why, n, "turned off (CONVFUSE_CONVT_S2=0)");
        return false;
    }
    int dev = 0;
    if (ct_device_cc(&dev) != 90) {
        snprintf(why, n, "needs a compute capability 9.0 device (sm_90a wgmma)");
        return false;
    }
    const size_t optin = ct_smem_optin(dev);
    if (!ct_geometry(plan, optin, &p, &pair, &extra, why, n))
        return false;
    if (cf_ct_smem_bytes(&p) > optin) {
        snprintf(why, n, "needs %zu bytes of shared memory (the device allows %zu)", cf_ct_smem_bytes(&p), optin);
        return false;
    }
    return true;
}

size_t cf_ct_workspace_bytes(const struct cf_plan *plan)
{
    (void)plan;
    return 0;
}

/* Clusters of a variant that fit the device at once, per (variant, device, shared memory); the first query of a
 * variant on a device raises its dynamic shared-memory limit to the device's. Cached: occupancy queries and
 * cudaFuncSetAttribute on every call are host time a small batch waits on (bench/latency.py). */
struct ct_fact {
    ct_kernel_fn fn;
    int dev;
    size_t smem;
    int clusters;
};
static std::mutex ct_facts_mu;
static ct_fact ct_facts[64];
static int ct_nfacts;

static cf_status_t ct_clusters(ct_kernel_fn fn, int dev, cudaLaunchConfig_t cfg, int cluster, int sms, int *out)
{
    std::lock_guard<std::mutex> lock(ct_facts_mu);
    bool attr = false;
    for (int i = 0; i < ct_nfacts; ++i)
        if (ct_facts[i].fn == fn && ct_facts[i].dev == dev) {
            attr = true;
            if (ct_facts[i].smem == cfg.dynamicSmemBytes) {
                *out = ct_facts[i].clusters;
                return CF_STATUS_SUCCESS;
            }
        }
    if (!attr) {
        int optin = 0;
        CF_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        CF_CUDA_TRY(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    }
    int clusters = sms / cluster;
    if (cluster > 1) {
        cfg.gridDim = dim3((unsigned)(clusters * cluster));
        int active = 0;
        CF_CUDA_TRY(cudaOccupancyMaxActiveClusters(&active, (void *)fn, &cfg));
        clusters = active;
    } else {
        int per_sm = 0;
        CF_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)fn, (int)cfg.blockDim.x,
                                                                  cfg.dynamicSmemBytes));
        clusters = sms * (per_sm > 1 ? 1 : per_sm);
    }
    if (clusters < 1)
        return cf_error(CF_STATUS_INTERNAL_ERROR, "convt_s2: no cluster of %d CTAs with %zu bytes of shared memory "
                                                  "fits the device", cluster, cfg.dynamicSmemBytes);
    if (ct_nfacts < (int)(sizeof ct_facts / sizeof ct_facts[0]))
        ct_facts[ct_nfacts++] = {fn, dev, cfg.dynamicSmemBytes, clusters};
    *out = clusters;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_ct_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream_ptr)
{
    cf_ct_params p;
    bool pair = false, extra = false;
    char why[256];
    int dev = 0;
    CF_CUDA_TRY(cudaGetDevice(&dev));
    if (!ct_geometry(plan, ct_smem_optin(dev), &p, &pair, &extra, why, sizeof why))
        return cf_error(CF_STATUS_INTERNAL_ERROR, "plan no longer fits the convt_s2 kernel: %s", why);
    /* 16-byte loads of the input rows and the weights: a misaligned view takes the implicit GEMM; so does every
     * call with CONVFUSE_CONVT_S2=0 (read per call, like the implicit GEMM's knobs: plans are cached) */
    if ((uintptr_t)args->src % 16 != 0 || (uintptr_t)args->wei % 16 != 0 || !cf_env_int("CONVFUSE_CONVT_S2", 1, 0, 1))
        return cf_ig_execute(plan, args, workspace, stream_ptr);
    p.src = args->src;
    p.wei = args->wei;
    p.bia = plan->conv.has_bias ? args->bia : NULL;
    p.dst = args->dst;
    cf_ig_fill_stages(plan, args, 0, plan->chain.length, NULL, NULL, &p);
    const ct_kernel_fn fn = ct_pick(pair, extra);
    const int cluster = pair ? 2 : 1;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3((unsigned)(128 * (1 + p.ncw)));
    cfg.dynamicSmemBytes = cf_ct_smem_bytes(&p);
    cfg.stream = (cudaStream_t)stream_ptr;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cf_status_t st = ct_clusters(fn, dev, cfg, cluster, plan->device_sm_count, &clusters);
    if (st != CF_STATUS_SUCCESS)
        return st;
    /* the clusters split between the row phases by their tile counts; no more clusters than tiles */
    const int64_t t0 = p.tiles[0], t1 = p.tiles[1];
    int64_t g = clusters < t0 + t1 ? clusters : t0 + t1;
    g = g < 2 ? 2 : g; /* one cluster per row phase at least (t0, t1 >= 1) */
    int64_t g0 = (int64_t)llround((double)g * (double)t0 / (double)(t0 + t1));
    g0 = g0 < 1 ? 1 : g0 > g - 1 ? g - 1 : g0;
    g0 = g0 > t0 ? t0 : g0;
    if (g - g0 > t1)
        g = g0 + t1;
    p.groups0 = (int)g0;
    p.groups = (int)g;
    cfg.gridDim = dim3((unsigned)(g * cluster));
    CF_CUDA_TRY(cudaLaunchKernelEx(&cfg, fn, p));
    CF_CUDA_TRY(cudaGetLastError());
    if (cf_verbose("launch"))
        fprintf(stderr,
                "convfuse: launch: convt_s2 wgmma-ss tf32 %s%s cluster=%d grid=%d (row phase 0: %d clusters) "
                "consumer_wgs=%d tiles=%d+%d segments=%d smem=%zu%s\n",
                pair ? "+pair(channel halves)" : "", extra ? "+extra_column" : "", cluster, (int)(g * cluster),
                p.groups0, p.ncw, p.tiles[0], p.tiles[1], p.nseg, cfg.dynamicSmemBytes,
                CF_CT_ABLATE ? " ABLATED (built with CF_CT_ABLATE: results wrong)" : "");
    return CF_STATUS_SUCCESS;
}
