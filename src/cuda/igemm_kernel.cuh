/* Kernel body of the fused implicit GEMM (see igemm.cuh for the mapping). Included once by igemm.cu,
 * which instantiates a few (NT, PASSES) variants. */
#ifndef CONVFUSE_CUDA_IGEMM_KERNEL_CUH
#define CONVFUSE_CUDA_IGEMM_KERNEL_CUH

#include "igemm.cuh"
#include "epilogue.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace cf {

__device__ __forceinline__ uint32_t tf32_rna(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

/* d += a * b, m16n8k8, TF32 operands, fp32 accumulation. */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Shared-memory carve-up, identical to cf_ig_smem_bytes(). */
struct ig_smem {
    float *b;
    float2 *tab;
    int *tap_dh, *tap_dw, *tap_widx;
    float *warp_part; /* [warp][8*NT][2]: mean, M2 of the warp's 32 pixels */
    int *warp_cnt;    /* [warp] */
    float *cta_mean, *cta_m2;
    int *cta_cnt;
};

template <int NT>
__device__ __forceinline__ ig_smem ig_carve(const cf_ig_params &p, float *base)
{
    ig_smem s;
    s.b = base;
    s.tab = reinterpret_cast<float2 *>(base + p.b_floats);
    s.tap_dh = reinterpret_cast<int *>(s.tab + p.ntables * p.nt_total * 8);
    s.tap_dw = s.tap_dh + CF_IG_MAX_TAPS;
    s.tap_widx = s.tap_dw + CF_IG_MAX_TAPS;
    s.warp_part = reinterpret_cast<float *>(s.tap_widx + CF_IG_MAX_TAPS);
    s.warp_cnt = reinterpret_cast<int *>(s.warp_part + CF_IG_WARPS * 8 * NT * 2);
    s.cta_mean = reinterpret_cast<float *>(s.warp_cnt + CF_IG_WARPS);
    s.cta_m2 = s.cta_mean + p.nt_total * 8;
    s.cta_cnt = reinterpret_cast<int *>(s.cta_m2 + p.nt_total * 8);
    return s;
}

/* Taps of phase (qh, qw): for transposed conv, kh is a tap of row phase qh iff
 * (qh + pad - kh*dil) is a multiple of stride, and then ih = j + (qh + pad - kh*dil) / stride. */
__device__ __forceinline__ int ig_taps_1d(int transposed, int q, int stride, int pad, int dil, int k, int *ks,
                                          int *cs)
{
    int n = 0;
    for (int kk = 0; kk < k; ++kk) {
        if (transposed) {
            int num = q + pad - kk * dil;
            if (((num % stride) + stride) % stride != 0)
                continue;
            ks[n] = kk;
            cs[n] = num / stride; /* exact: num is a multiple of stride */
        } else {
            ks[n] = kk;
            cs[n] = kk * dil - pad;
        }
        ++n;
    }
    return n;
}

/* B element (k = (tap, ci), co) in fragment order: fragment e of the whole phase is
 * [ks][nt][lane][j] with ci = kc*8 + (lane&3) + 4j, co = nt*8 + (lane>>2). */
__device__ __forceinline__ float ig_wei(const cf_ig_params &p, int widx, int ci, int co)
{
    if (ci >= p.cin || co >= p.cout)
        return 0.f;
    const int64_t khw = (int64_t)p.kh * p.kw;
    const int64_t idx = p.transposed ? ((int64_t)ci * p.cout + co) * khw + widx : ((int64_t)co * p.cin + ci) * khw + widx;
    return __ldg(p.wei + idx);
}

template <int PASSES>
__device__ void ig_load_b(const cf_ig_params &p, const ig_smem &s, int ks0, int nks, int nt0, int nnt)
{
    const int total = nks * nnt * 64;
    for (int e = threadIdx.x; e < total; e += CF_IG_THREADS) {
        const int j = e & 1, lane = (e >> 1) & 31, rest = e >> 6;
        const int nt = rest % nnt, ks = ks0 + rest / nnt;
        const int tap = ks / p.kc, kcc = ks - tap * p.kc;
        const int ci = kcc * 8 + (lane & 3) + 4 * j, co = (nt0 + nt) * 8 + (lane >> 2);
        const float v = ig_wei(p, s.tap_widx[tap], ci, co);
        /* TF32 mode stores operands pre-rounded; 3xTF32 keeps fp32 and splits at use. */
        s.b[e] = PASSES == 1 ? __uint_as_float(tf32_rna(v)) : v;
    }
}

/* Per-thread pixel bookkeeping: 4 pixels = 2 m16 tiles x rows (g, g+8). Kept small: it lives in
 * registers next to the accumulators. */
struct ig_pixels {
    int img[4];            /* image index, -1 past the end of the phase */
    int ihb[4], iwb[4];    /* a_h*j, a_w*i */
    int dst_off[4];        /* oh*OW + ow inside the image plane */
    const float *a_ptr[4]; /* current tap: src + img*C_in*H*W + ih*W + iw, or NULL if outside */
};

template <int NT, int PASSES>
__device__ __forceinline__ void ig_load_a(const cf_ig_params &p, const ig_pixels &px, int ks, int lane,
                                          float (&av)[2][4])
{
    const int kcc = ks % p.kc;
    const int ci0 = kcc * 8 + (lane & 3);
    const int hw = p.h * p.w;
    const bool ok0 = ci0 < p.cin, ok1 = ci0 + 4 < p.cin;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float *ptr = px.a_ptr[mt * 2 + half];
            /* a0/a1 = rows g/g+8 at k = t; a2/a3 = rows g/g+8 at k = t+4 */
            av[mt][half] = (ptr && ok0) ? __ldg(ptr + (int64_t)ci0 * hw) : 0.f;
            av[mt][2 + half] = (ptr && ok1) ? __ldg(ptr + (int64_t)(ci0 + 4) * hw) : 0.f;
        }
    }
}

__device__ __forceinline__ void ig_set_tap(const cf_ig_params &p, const ig_smem &s, ig_pixels &px, int tap)
{
    const int dh = s.tap_dh[tap], dw = s.tap_dw[tap];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int ih = px.ihb[i] + dh, iw = px.iwb[i] + dw;
        const bool in = px.img[i] >= 0 && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
        px.a_ptr[i] = in ? p.src + (int64_t)px.img[i] * p.cin * p.h * p.w + (ih * p.w + iw) : nullptr;
    }
}

/* acc = conv of this thread's 4 pixels x chunk's channels. */
template <int NT, int PASSES>
__device__ __forceinline__ void ig_mainloop(const cf_ig_params &p, const ig_smem &s, ig_pixels &px, int ntaps,
                                            int chunk, float (&acc)[2][NT][4])
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[mt][nt][e] = 0.f;

    const int nks = ntaps * p.kc;
    if (nks == 0)
        return;
    float an[2][4];
    int tap_next = 0, kc_next = 0;
    ig_set_tap(p, s, px, 0);
    ig_load_a<NT, PASSES>(p, px, 0, lane, an);
    for (int ks = 0; ks < nks; ++ks) {
        if (!p.resident && ks % p.kblk == 0) {
            __syncthreads();
            const int nb = min(p.kblk, nks - ks);
            ig_load_b<PASSES>(p, s, ks, nb, chunk * NT, NT);
            __syncthreads();
        }
        float ac[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                ac[mt][e] = an[mt][e];
        /* prefetch the next k8 step's A while this one's MMAs run */
        if (ks + 1 < nks) {
            if (++kc_next == p.kc) {
                kc_next = 0;
                ig_set_tap(p, s, px, ++tap_next);
            }
            ig_load_a<NT, PASSES>(p, px, ks + 1, lane, an);
        }
        uint32_t abig[2][4], asmall[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                abig[mt][e] = tf32_rna(ac[mt][e]);
                if (PASSES == 3)
                    asmall[mt][e] = tf32_rna(ac[mt][e] - __uint_as_float(abig[mt][e]));
            }
        const float2 *bp = p.resident
                               ? reinterpret_cast<const float2 *>(s.b) + ((size_t)ks * p.nt_total + chunk * NT) * 32 + lane
                               : reinterpret_cast<const float2 *>(s.b) + (size_t)(ks % p.kblk) * NT * 32 + lane;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float2 bv = bp[nt * 32];
            if (PASSES == 1) {
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    mma_tf32(acc[mt][nt], abig[mt], __float_as_uint(bv.x), __float_as_uint(bv.y));
            } else {
                /* 3xTF32: small*big + big*small first, then big*big (the largest term last). */
                const uint32_t b0 = tf32_rna(bv.x), b1 = tf32_rna(bv.y);
                const uint32_t s0 = tf32_rna(bv.x - __uint_as_float(b0)), s1 = tf32_rna(bv.y - __uint_as_float(b1));
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    mma_tf32(acc[mt][nt], asmall[mt], b0, b1);
                    mma_tf32(acc[mt][nt], abig[mt], s0, s1);
                    mma_tf32(acc[mt][nt], abig[mt], b0, b1);
                }
            }
        }
    }
}

/* Fold the AFFINE stages into per-channel (a, b) tables, in double, once per CTA. */
__device__ void ig_build_tables(const cf_ig_params &p, const ig_smem &s)
{
    const int cpad = p.nt_total * 8;
    for (int st = 0; st < p.nstage; ++st) {
        const cf_ig_stage &sg = p.stage[st];
        if (sg.kind != CF_IG_AFFINE)
            continue;
        for (int c = threadIdx.x; c < cpad; c += CF_IG_THREADS) {
            double a = 1.0, b = 0.0;
            if (c < p.cout) {
                if (sg.with_bias && p.bia)
                    b = p.bia[c];
                for (int o = sg.op_begin; o < sg.op_end; ++o)
                    cf_epi_fold_affine(p.op[o], c, &a, &b);
            }
            s.tab[sg.table * cpad + c] = make_float2((float)a, (float)b);
        }
    }
}

template <int NT>
__device__ __forceinline__ void ig_apply_stages(const cf_ig_params &p, const ig_smem &s, int st_begin, int st_end,
                                                int chunk, float (&acc)[2][NT][4])
{
    const int t = threadIdx.x & 3;
    const int cpad = p.nt_total * 8;
    for (int st = st_begin; st < st_end; ++st) {
        const int kind = p.stage[st].kind;
        if (kind == CF_IG_AFFINE) {
            const float2 *tab = s.tab + p.stage[st].table * cpad + chunk * NT * 8 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const float2 t0 = tab[nt * 8], t1 = tab[nt * 8 + 1];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    acc[mt][nt][0] = fmaf(acc[mt][nt][0], t0.x, t0.y);
                    acc[mt][nt][1] = fmaf(acc[mt][nt][1], t1.x, t1.y);
                    acc[mt][nt][2] = fmaf(acc[mt][nt][2], t0.x, t0.y);
                    acc[mt][nt][3] = fmaf(acc[mt][nt][3], t1.x, t1.y);
                }
            }
        } else {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        acc[mt][nt][e] = cf_epi_pointwise(kind, acc[mt][nt][e]);
        }
    }
}

/* Max and sum of exp over this chunk's channels for each of the thread's 4 pixel rows (quad-reduced). */
template <int NT>
__device__ __forceinline__ void ig_chunk_softmax_stats(const cf_ig_params &p, int chunk, const float (&acc)[2][NT][4],
                                                       float (&m)[4], float (&l)[4])
{
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int mt = r >> 1, half = r & 1;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int c = (chunk * NT + nt) * 8 + 2 * t + j;
                if (c < p.cout)
                    mx = cf_max_nan(mx, acc[mt][nt][half * 2 + j]);
            }
        mx = cf_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = cf_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int c = (chunk * NT + nt) * 8 + 2 * t + j;
                if (c < p.cout)
                    sum += __expf(acc[mt][nt][half * 2 + j] - mx);
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        m[r] = mx;
        l[r] = sum;
    }
}

template <int NT>
__device__ __forceinline__ void ig_softmax_apply(const float (&m)[4], const float (&l)[4], float (&acc)[2][NT][4])
{
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int mt = r >> 1, half = r & 1;
        const float inv = __frcp_rn(l[r]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                acc[mt][nt][half * 2 + j] = __expf(acc[mt][nt][half * 2 + j] - m[r]) * inv;
    }
}

template <int NT>
__device__ __forceinline__ void ig_store(const cf_ig_params &p, const ig_pixels &px, int chunk,
                                         const float (&acc)[2][NT][4])
{
    const int t = threadIdx.x & 3;
    const int64_t plane = (int64_t)p.oh * p.ow;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int c = (chunk * NT + nt) * 8 + 2 * t + j;
            if (c >= p.cout)
                continue;
#pragma unroll
            for (int r = 0; r < 4; ++r)
                if (px.img[r] >= 0)
                    p.dst[(int64_t)px.img[r] * p.cout * plane + c * plane + px.dst_off[r]] = acc[r >> 1][nt][(r & 1) * 2 + j];
        }
}

/* Per-channel statistics of this tile (count, mean, M2), merged into the CTA's running values (Chan). */
template <int NT>
__device__ __forceinline__ void ig_tile_stats(const cf_ig_params &p, const ig_smem &s, const ig_pixels &px, int chunk,
                                              const float (&acc)[2][NT][4])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    int cnt = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r)
        cnt += px.img[r] >= 0;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)
        cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float sum = 0.f;
#pragma unroll
            for (int r = 0; r < 4; ++r)
                sum += px.img[r] >= 0 ? acc[r >> 1][nt][(r & 1) * 2 + j] : 0.f;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            const float mean = cnt ? sum / cnt : 0.f;
            float m2 = 0.f;
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float d = acc[r >> 1][nt][(r & 1) * 2 + j] - mean;
                m2 += px.img[r] >= 0 ? d * d : 0.f;
            }
#pragma unroll
            for (int o = 4; o < 32; o <<= 1)
                m2 += __shfl_xor_sync(0xffffffffu, m2, o);
            if (lane < 4) {
                const int cl = nt * 8 + 2 * t + j;
                s.warp_part[(warp * NT * 8 + cl) * 2] = mean;
                s.warp_part[(warp * NT * 8 + cl) * 2 + 1] = m2;
            }
        }
    if (lane == 0)
        s.warp_cnt[warp] = cnt;
    __syncthreads();
    for (int cl = threadIdx.x; cl < NT * 8; cl += CF_IG_THREADS) {
        const int c = chunk * NT * 8 + cl;
        int na = s.cta_cnt[c];
        float ma = s.cta_mean[c], qa = s.cta_m2[c];
        for (int w = 0; w < CF_IG_WARPS; ++w) {
            const int nb = s.warp_cnt[w];
            if (nb == 0)
                continue;
            const float mb = s.warp_part[(w * NT * 8 + cl) * 2], qb = s.warp_part[(w * NT * 8 + cl) * 2 + 1];
            const int n = na + nb;
            const float d = mb - ma;
            ma += d * ((float)nb / n);
            qa += qb + d * d * ((float)na * (float)nb / n);
            na = n;
        }
        s.cta_cnt[c] = na;
        s.cta_mean[c] = ma;
        s.cta_m2[c] = qa;
    }
    __syncthreads();
}

template <int NT, int PASSES, int MINB>
__global__ void __launch_bounds__(CF_IG_THREADS, MINB) cf_ig_kernel(const __grid_constant__ cf_ig_params p)
{
    extern __shared__ float4 smem_raw[];
    __shared__ int sh_ntaps, sh_nt[2], sh_k[2][CF_IG_MAX_TAPS], sh_c[2][CF_IG_MAX_TAPS];
    const ig_smem s = ig_carve<NT>(p, reinterpret_cast<float *>(smem_raw));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;

    ig_build_tables(p, s);
    if (p.stats_mode)
        for (int c = threadIdx.x; c < p.nt_total * 8; c += CF_IG_THREADS) {
            s.cta_cnt[c] = 0;
            s.cta_mean[c] = 0.f;
            s.cta_m2[c] = 0.f;
        }

    const int t_begin = (int)((int64_t)blockIdx.x * p.num_tiles / gridDim.x);
    const int t_end = (int)((int64_t)(blockIdx.x + 1) * p.num_tiles / gridDim.x);
    int q = -1, ntaps = 0, ph = 0, pw = 0, qh = 0, qw = 0;
    const int a_h = p.transposed ? 1 : p.stride_h, a_w = p.transposed ? 1 : p.stride_w;

    for (int tile = t_begin; tile < t_end; ++tile) {
        if (q < 0 || tile >= p.tile_start[q + 1]) {
            while (tile >= p.tile_start[q + 1])
                ++q;
            qh = q / p.sw;
            qw = q - qh * p.sw;
            ph = (p.oh - qh + p.sh - 1) / p.sh;
            pw = (p.ow - qw + p.sw - 1) / p.sw;
            __syncthreads(); /* everyone is done with the previous phase's taps and B */
            if (threadIdx.x == 0) {
                sh_nt[0] = ig_taps_1d(p.transposed, qh, p.stride_h, p.pad_h, p.dil_h, p.kh, sh_k[0], sh_c[0]);
                sh_nt[1] = ig_taps_1d(p.transposed, qw, p.stride_w, p.pad_w, p.dil_w, p.kw, sh_k[1], sh_c[1]);
                sh_ntaps = sh_nt[0] * sh_nt[1];
            }
            __syncthreads();
            for (int tp = threadIdx.x; tp < sh_ntaps; tp += CF_IG_THREADS) {
                const int a = tp / sh_nt[1], b = tp - a * sh_nt[1];
                s.tap_dh[tp] = sh_c[0][a];
                s.tap_dw[tp] = sh_c[1][b];
                s.tap_widx[tp] = sh_k[0][a] * p.kw + sh_k[1][b];
            }
            __syncthreads();
            ntaps = sh_ntaps;
            if (p.resident) {
                ig_load_b<PASSES>(p, s, 0, ntaps * p.kc, 0, p.nt_total);
                __syncthreads();
            }
        }

        /* this thread's 4 pixels */
        ig_pixels px;
        const int64_t m0 = (int64_t)(tile - p.tile_start[q]) * CF_IG_TILE_M + warp * 32;
        const int64_t mq = (int64_t)p.n * ph * pw;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int64_t m = m0 + (r >> 1) * 16 + (r & 1) * 8 + g;
            const int64_t mm = m < mq ? m : 0;
            const int img = (int)(mm / ((int64_t)ph * pw));
            const int rem = (int)(mm - (int64_t)img * ph * pw);
            const int j = rem / pw, i = rem - (rem / pw) * pw;
            px.img[r] = m < mq ? img : -1;
            px.ihb[r] = a_h * j;
            px.iwb[r] = a_w * i;
            px.dst_off[r] = (qh + p.sh * j) * p.ow + (qw + p.sw * i);
        }

        float acc[2][NT][4];
        const int pre_end = p.softmax_stage >= 0 ? p.softmax_stage : p.nstage;
        if (p.softmax_stage >= 0 && p.nchunk > 1) {
            /* all channels do not fit one chunk: online max/sum over the chunks, then recompute and write */
            float m[4], l[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                m[r] = -INFINITY;
                l[r] = 0.f;
            }
            for (int chunk = 0; chunk < p.nchunk; ++chunk) {
                ig_mainloop<NT, PASSES>(p, s, px, ntaps, chunk, acc);
                ig_apply_stages<NT>(p, s, 0, pre_end, chunk, acc);
                float cm[4], cl[4];
                ig_chunk_softmax_stats<NT>(p, chunk, acc, cm, cl);
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float nm = cf_max_nan(m[r], cm[r]);
                    l[r] = (m[r] == -INFINITY ? 0.f : l[r] * __expf(m[r] - nm)) + cl[r] * __expf(cm[r] - nm);
                    m[r] = nm;
                }
            }
            for (int chunk = 0; chunk < p.nchunk; ++chunk) {
                ig_mainloop<NT, PASSES>(p, s, px, ntaps, chunk, acc);
                ig_apply_stages<NT>(p, s, 0, pre_end, chunk, acc);
                ig_softmax_apply<NT>(m, l, acc);
                ig_apply_stages<NT>(p, s, pre_end + 1, p.nstage, chunk, acc);
                if (p.stats_mode)
                    ig_tile_stats<NT>(p, s, px, chunk, acc);
                else
                    ig_store<NT>(p, px, chunk, acc);
            }
        } else {
            for (int chunk = 0; chunk < p.nchunk; ++chunk) {
                ig_mainloop<NT, PASSES>(p, s, px, ntaps, chunk, acc);
                ig_apply_stages<NT>(p, s, 0, pre_end, chunk, acc);
                if (p.softmax_stage >= 0) {
                    float m[4], l[4];
                    ig_chunk_softmax_stats<NT>(p, chunk, acc, m, l);
                    ig_softmax_apply<NT>(m, l, acc);
                    ig_apply_stages<NT>(p, s, pre_end + 1, p.nstage, chunk, acc);
                }
                if (p.stats_mode)
                    ig_tile_stats<NT>(p, s, px, chunk, acc);
                else
                    ig_store<NT>(p, px, chunk, acc);
            }
        }
    }

    if (p.stats_mode) {
        __syncthreads();
        float *out = p.stats + (size_t)blockIdx.x * p.nt_total * 8 * 3;
        for (int c = threadIdx.x; c < p.nt_total * 8; c += CF_IG_THREADS) {
            out[c * 3] = __int_as_float(s.cta_cnt[c]);
            out[c * 3 + 1] = s.cta_mean[c];
            out[c * 3 + 2] = s.cta_m2[c];
        }
    }
}

} // namespace cf

#endif
