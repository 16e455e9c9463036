/* Kernel body of the fused implicit GEMM (see igemm.cuh for the mapping). Included once by igemm.cu,
 * which instantiates a few (NT, PASSES) variants. */
#ifndef CONVFUSE_CUDA_IGEMM_KERNEL_CUH
#define CONVFUSE_CUDA_IGEMM_KERNEL_CUH

#include "igemm.cuh"
#include "udiv.h"
#include "epilogue.cuh"
#include "tma.cuh"
#include "pdl.cuh"
#include "tf32.cuh"
#include "wgmma.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

/* Timing ablations for development only (bench/ablate.sh builds them; the results are wrong on purpose). A mask:
 * 1 no global stores (staging kept), 2 no staging and no stores, 4 no wgmma (operands still loaded),
 * 8 no epilogue math (softmax, affine, sigmoid), 16 TMA store boxes rewritten without waiting for the previous bulk
 * copies to read them, 32 TMA patch boxes of half the rows (the L2 read traffic of the patch halved). Kept values feed
 * a never-taken store so nothing is dead code. */
#ifndef CF_IG_ABLATE
#define CF_IG_ABLATE 0
#endif

namespace cf {


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
    float *a; /* [CF_IG_A_STAGES][4*MT][threads] (= 8 x 256): each thread's own A fragments */
    float2 *tab;
    int *tap_dh, *tap_dw, *tap_widx;
    uint64_t *pk_bar; /* TMA patch: mbarriers [warpgroup][ring slot] (static shared) */
    int2 *step_off; /* patch mode: per k8 step of a stage, the byte offsets (lo, hi) of its two channel-row halves
                       in a patch buffer; odd hi = that half is zero (see ig_patch_feed) */
    float *run_mean, *run_m2; /* [warp][C_out padded]: the warp's running statistics over its tiles */
    int *run_cnt;             /* [warp] */
    float *stage; /* [warp][8 channels][CF_IG_STAGE_LD or CF_IG_SPLIT_LD]: fragment -> row-major transpose for
                     coalesced stores */
    float2 *xch;  /* split mode: softmax (max, sum) per pixel, written by the peer CTA (CF_IG_XCH_FLOAT2) */
    float *ostage; /* TMA store: [warpgroup][box][8*NT channel rows][32 pixels], 128-byte swizzled, 1 KB-aligned */
};

template <int NT>
__device__ __forceinline__ ig_smem ig_carve(const cf_ig_params &p, float *base)
{
    ig_smem s;
    /* B starts 1 KB-aligned in the dynamic window (wgmma descriptors address it; cf_ig_smem_bytes adds 1 KB) */
    /* pointer arithmetic on the shared array itself: a round trip through an integer loses the address
     * space, and every access then becomes a generic LD/ST (measured: the staging reads stalled the stores) */
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(base) & 1023u;
    s.b = base + ((1024u - mis) & 1023u) / 4;
    s.a = s.b + p.b_floats;
    s.tab = reinterpret_cast<float2 *>(s.a + p.a_floats);
    s.tap_dh = reinterpret_cast<int *>(s.tab + p.ntables * p.nt_total * 8);
    s.tap_dw = s.tap_dh + CF_IG_MAX_TAPS;
    s.tap_widx = s.tap_dw + CF_IG_MAX_TAPS;
    s.step_off = reinterpret_cast<int2 *>(s.tap_widx + CF_IG_MAX_TAPS);
    /* same order as cf_ig_smem_bytes: staging before the statistics, which exist only in stats mode */
    s.stage = reinterpret_cast<float *>(s.step_off + CF_IG_MAX_TAPS);
    s.xch = reinterpret_cast<float2 *>(s.stage + CF_IG_MAX_WARPS * 8 * (p.split ? CF_IG_SPLIT_LD : CF_IG_STAGE_LD));
    s.run_mean = reinterpret_cast<float *>(s.xch + (p.split ? CF_IG_XCH_FLOAT2 : 0));
    s.run_m2 = s.run_mean + CF_IG_MAX_WARPS * p.nt_total * 8;
    s.run_cnt = reinterpret_cast<int *>(s.run_m2 + CF_IG_MAX_WARPS * p.nt_total * 8);
    /* after everything else (cf_ig_smem_bytes adds it last, with 1 KB of alignment slack) */
    float *end = p.stats_mode ? reinterpret_cast<float *>(s.run_cnt + CF_IG_MAX_WARPS) : s.run_mean;
    const uint32_t emis = (uint32_t)__cvta_generic_to_shared(end) & 1023u;
    s.ostage = end + ((1024u - emis) & 1023u) / 4;
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
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int j = e & 1, lane = (e >> 1) & 31, rest = e >> 6;
        const int nt = rest % nnt, ks = ks0 + rest / nnt;
        const int tap = ks / p.kc, kcc = ks - tap * p.kc;
        const int ci = kcc * 8 + (lane & 3) + 4 * j, co = (nt0 + nt) * 8 + (lane >> 2);
        const float v = ig_wei(p, s.tap_widx[tap], ci, co);
        /* TF32 mode stores operands pre-rounded; 3xTF32 keeps fp32 and splits at use. */
        s.b[e] = PASSES == 1 ? __uint_as_float(cf_tf32_rna(v)) : v;
    }
}

/* A-ring stride in threads: mma.sync 8 warps x two m16 tiles each; wgmma up to 4 warpgroups x one m16 tile per warp */
__host__ __device__ constexpr int ig_threads(int mt) { return mt == 2 ? CF_IG_THREADS : 2 * CF_IG_THREADS; }

/* Per-thread pixel bookkeeping: 2*MT pixels = MT m16 tiles x rows (g, g+8). Kept small: it lives in
 * registers next to the accumulators. */
template <int MT>
struct ig_pixels {
    int img[2 * MT];            /* image index, -1 past the end of the phase */
    int ihb[2 * MT], iwb[2 * MT]; /* a_h*j, a_w*i */
    float *st_ptr;              /* store side: dst at (img, channel 0, oh, ow) of pixel lane % (16*MT) */
    bool st_ok;
    const float *src_img[2 * MT]; /* src at (img, channel 0) */
    int a_off[2 * MT];            /* current tap: ih*W + iw, or 0 if outside (in bounds, never read: size 0) */
    unsigned a_ok;           /* bit r: pixel r's current tap lies inside the image */
};

/* Issue this thread's 8 A elements of one k8 step into stage `slot` (4-byte cp.async; zero-filled where
 * the tap falls outside the image or ci >= C_in, so padding costs no branch in the MMA loop).
 * `ci0` = kcc*8 + t is this thread's first channel; `koff` = ci0*H*W. Element order e = mt*4 + q with
 * q = 0..3 the m16n8k8 A registers: a0 = (row g, k t), a1 = (row g+8, k t), a2 = (g, t+4), a3 = (g+8, t+4). */
template <int MT>
__device__ __forceinline__ void ig_issue_a(const cf_ig_params &p, const ig_smem &s, const ig_pixels<MT> &px, int ci0,
                                           int koff, int slot)
{
    constexpr int THREADS = ig_threads(MT);
    const int hw4 = 4 * p.h * p.w; /* C_in*H*W < 2^31 per image (host check): 32-bit offsets */
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(s.a + slot * 4 * MT * THREADS + threadIdx.x);
    /* C_in a multiple of 8 (the usual case) needs no channel test */
    const bool all_ci = p.cin_pad == p.cin;
    const bool ok_lo = all_ci || ci0 < p.cin, ok_hi = all_ci || ci0 + 4 < p.cin;
#pragma unroll
    for (int e = 0; e < 4 * MT; ++e) {
        const int mt = e >> 2, q = e & 3, r = mt * 2 + (q & 1);
        const bool ok = ((px.a_ok >> r) & 1) && ((q >> 1) ? ok_hi : ok_lo);
        /* With C_in a multiple of 8, src_img + a_off + koff stays inside src even for an outside tap (a_off = 0,
         * koff < C_in*H*W); padded channels could point past it, so they read from p.src (never read: size 0). */
        const float *src = px.src_img[r] + (px.a_off[r] + koff + ((q >> 1) ? hw4 : 0));
        if (!all_ci && !ok)
            src = p.src;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(base + e * THREADS * 4), "l"(src),
                     "r"(ok ? 4 : 0));
    }
}

__device__ __forceinline__ void ig_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void ig_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int MT>
__device__ __forceinline__ void ig_set_tap(const cf_ig_params &p, const ig_smem &s, ig_pixels<MT> &px, int tap)
{
    const int dh = s.tap_dh[tap], dw = s.tap_dw[tap];
    px.a_ok = 0;
#pragma unroll
    for (int i = 0; i < 2 * MT; ++i) {
        const int ih = px.ihb[i] + dh, iw = px.iwb[i] + dw;
        const bool in = px.img[i] >= 0 && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
        px.a_off[i] = in ? ih * p.w + iw : 0;
        px.a_ok |= (unsigned)in << i;
    }
}

/* The issue side of the A ring: walks the k8 steps (tap-major, channel-minor) S-1 steps ahead of the MMAs.
 * Each call issues one step's copies (or nothing past the end) and commits one group, so the consumer's
 * cp.async.wait_group count stays fixed. Shared by the mma.sync and wgmma main loops. */
template <int MT>
struct ig_a_feed {
    int tap = 0, kc = 0, ks = 0, koff, nks;
    __device__ __forceinline__ ig_a_feed(const cf_ig_params &p, const ig_smem &s, ig_pixels<MT> &px, int nks_)
        : koff((threadIdx.x & 3) * p.h * p.w), nks(nks_)
    {
        ig_set_tap<MT>(p, s, px, 0);
    }
    __device__ __forceinline__ void issue(const cf_ig_params &p, const ig_smem &s, ig_pixels<MT> &px)
    {
        if (ks < nks) {
            const int t = threadIdx.x & 3;
            ig_issue_a<MT>(p, s, px, kc * 8 + t, koff, ks % CF_IG_A_STAGES);
            koff += 8 * p.h * p.w;
            if (++kc == p.kc && ks + 1 < nks) {
                kc = 0;
                koff = t * p.h * p.w;
                ig_set_tap<MT>(p, s, px, ++tap);
            }
        }
        ++ks;
        ig_commit();
    }
};

/* acc = conv of this thread's 4 pixels x chunk's channels. */
/* acc = f(acc) for every accumulator (the epilogue: each pointwise op gets its own unrolled loop). */
template <int NT, int MT, int NB = 0, int NE = NT, typename F>
__device__ __forceinline__ void ig_map(float (&acc)[MT][NT][4], F f)
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = NB; nt < NE; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[mt][nt][e] = f(acc[mt][nt][e]);
}

template <int NT, int PASSES, int MT>
__device__ __forceinline__ void ig_mainloop(const cf_ig_params &p, const ig_smem &s, ig_pixels<MT> &px, int ntaps,
                                            int chunk, float (&acc)[MT][NT][4])
{
    const int lane = threadIdx.x & 31;
    ig_map<NT, MT>(acc, [](float) { return 0.f; });

    const int nks = ntaps * p.kc;
    if (nks == 0)
        return;
    constexpr int S = CF_IG_A_STAGES;
    ig_a_feed<MT> feed(p, s, px, nks);
    for (int i = 0; i < S - 1; ++i)
        feed.issue(p, s, px);
    for (int ks = 0; ks < nks; ++ks) {
        if (!p.resident && ks % p.kblk == 0) {
            __syncthreads();
            const int nb = min(p.kblk, nks - ks);
            ig_load_b<PASSES>(p, s, ks, nb, chunk * NT, NT);
            __syncthreads();
        }
        ig_wait<S - 2>(); /* step ks has landed (this thread's own copies: no CTA barrier needed) */
        float ac[MT][4];
        const float *sa = s.a + (ks % S) * 4 * MT * ig_threads(MT) + threadIdx.x;
#pragma unroll
        for (int e = 0; e < 4 * MT; ++e)
            ac[e >> 2][e & 3] = sa[e * ig_threads(MT)];
        feed.issue(p, s, px);
        uint32_t abig[MT][4], asmall[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                abig[mt][e] = cf_tf32_rna(ac[mt][e]);
                if (PASSES == 3)
                    asmall[mt][e] = cf_tf32_rna(ac[mt][e] - __uint_as_float(abig[mt][e]));
            }
        const float2 *bp = p.resident
                               ? reinterpret_cast<const float2 *>(s.b) + ((size_t)ks * p.nt_total + chunk * NT) * 32 + lane
                               : reinterpret_cast<const float2 *>(s.b) + (size_t)(ks % p.kblk) * NT * 32 + lane;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float2 bv = bp[nt * 32];
            if (PASSES == 1) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    mma_tf32(acc[mt][nt], abig[mt], __float_as_uint(bv.x), __float_as_uint(bv.y));
            } else {
                /* 3xTF32: small*big + big*small first, then big*big (the largest term last). */
                const uint32_t b0 = cf_tf32_rna(bv.x), b1 = cf_tf32_rna(bv.y);
                const uint32_t s0 = cf_tf32_rna(bv.x - __uint_as_float(b0)), s1 = cf_tf32_rna(bv.y - __uint_as_float(b1));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_tf32(acc[mt][nt], asmall[mt], b0, b1);
                    mma_tf32(acc[mt][nt], abig[mt], s0, s1);
                    mma_tf32(acc[mt][nt], abig[mt], b0, b1);
                }
            }
        }
    }
}


/* wgmma variant, B resident in the core-matrix layout wgmma reads without swizzle: per (k8 step, channel
 * chunk) a block of 8*NT x 8 values, core matrix (n/8, k/4) of 8 rows x 16 bytes at ((n/8)*2 + k/4) * 128 B
 * (descriptor lbo = 128, sbo = 256; dev/wgmma_probe.cu checks this on the device). 3xTF32 keeps the small
 * parts in a second copy b_floats/2 further. */
/* B for the wgmma main loops: nnt n8 tiles of channels from n_base (split mode: the CTA's half; else all) in
 * nchunks chunks of NT */
template <int NT, int PASSES>
__device__ void ig_load_b_wg(const cf_ig_params &p, const ig_smem &s, int ntaps, int nks, int n_base, int nnt,
                             int nchunks)
{
    const int per_ks = nnt * 64, half = p.b_floats / 2;
    for (int e = threadIdx.x; e < nks * per_ks; e += blockDim.x) {
        const int ks = e / per_ks, rem = e - ks * per_ks, n = rem >> 3, k = rem & 7;
        float v;
        if (p.patch) {
            /* patch feed: k8 steps stage-major. 8 channels per stage: step = tap, row k is channel 2k (k < 4) or
             * 2(k-4)+1, so a thread's two A values of a pixel are adjacent patch rows. 4 channels per stage:
             * step = taps 2st (k < 4) and 2st+1 (k >= 4, zero past the last tap), channel k & 3 (ig_patch_feed) */
            const int nsteps = cf_ig_patch_steps(p.pk_cps, ntaps);
            const int kb = ks / nsteps, st = ks - kb * nsteps;
            if (p.pk_cps == 8) {
                v = ig_wei(p, s.tap_widx[st], kb * 8 + (k < 4 ? 2 * k : 2 * (k - 4) + 1), n_base + n);
            } else {
                const int tap = 2 * st + (k >> 2);
                v = tap < ntaps ? ig_wei(p, s.tap_widx[tap], kb * 4 + (k & 3), n_base + n) : 0.f;
            }
        } else {
            const int tap = ks / p.kc, kcl = ks - tap * p.kc; /* k8 steps are tap-major, channel-minor */
            v = ig_wei(p, s.tap_widx[tap], kcl * 8 + k, n_base + n);
        }
        const int c = n / (8 * NT), nl = n - c * 8 * NT;
        const int off = (ks * nchunks + c) * NT * 64 + ((nl >> 3) * 2 + (k >> 2)) * 32 + (nl & 7) * 4 + (k & 3);
        const uint32_t big = cf_tf32_rna(v);
        s.b[off] = __uint_as_float(big);
        if (PASSES >= 2)
            s.b[half + off] = __uint_as_float(cf_tf32_rna(v - __uint_as_float(big)));
    }
}

template <int NT>
__device__ __forceinline__ void ig_wgmma(float (&acc)[1][NT][4], const uint32_t (&a)[4], uint64_t desc)
{
    float(&d)[NT * 4] = *reinterpret_cast<float(*)[NT * 4]>(&acc[0][0][0]);
    if constexpr ((CF_IG_ABLATE & 4) != 0) {
        asm volatile("" ::"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
        wgmma_pin(d);
        return;
    }
    if constexpr (NT == 16)
        wgmma_m64n128k8_tf32<1>(d, a, desc);
    else if constexpr (NT == 8)
        wgmma_m64n64k8_tf32<1>(d, a, desc);
    else
        wgmma_m64n32k8_tf32<1>(d, a, desc);
}

/* Two B descriptors from their low words and the common high word, in one asm statement, so that both are final
 * before the wgmma fence (an ordinary instruction defining a wgmma input after it serialises the pipeline, C7513) */
__device__ __forceinline__ void ig_desc_pair(uint32_t d0, uint32_t d1, uint32_t dh, uint64_t &e0, uint64_t &e1)
{
    asm volatile("mov.b64 %0, {%2, %4};\nmov.b64 %1, {%3, %4};" : "=l"(e0), "=l"(e1) : "r"(d0), "r"(d1), "r"(dh));
}

/* Two TF32 k8 steps as one wgmma group (every input final before the fence, or ptxas serialises, C7513). The B
 * descriptors as their low words d0, d1 (start address and leading offset: the address field never carries, B lies in
 * the first 256 KB of shared memory) and the common high word dh: 32-bit address steps instead of 64-bit adds. */
template <int NT>
__device__ __forceinline__ void ig_wg_pair(float (&acc)[1][NT][4], uint32_t (&a0)[4], uint32_t (&a1)[4], uint32_t d0,
                                           uint32_t d1, uint32_t dh)
{
    uint64_t e0, e1;
    ig_desc_pair(d0, d1, dh, e0, e1);
    wgmma_pin(a0);
    wgmma_pin(a1);
    wgmma_fence();
    ig_wgmma<NT>(acc, a0, e0);
    ig_wgmma<NT>(acc, a1, e1);
    wgmma_commit();
}

/* One 3xTF32 (P = 3) or 2xTF32 (P = 2) k8 step on the tensor core: A (this thread's 4 fragment values) from
 * registers, B (big and small parts) by descriptor.
 * P = 3: A splits exactly into big = x with the low 13 bits cleared and small = x - big; small is rounded to TF32
 * by adding half a TF32 ulp to its bits (the tensor core ignores the low 13 bits): 3 integer/FP instructions per
 * value where cf_tf32_rna would take 3 for each of the two roundings. Products big*big + big*small + small*big.
 * P = 2 (the batch-norm statistics pass): A rounded to nearest TF32 (cf_tf32_rna: NaN-safe), B split:
 * x_r*big + x_r*small. The error x - x_r is unbiased and uncorrelated with the output, so the channel mean and
 * variance keep fp32 accuracy (docs/kb2_73.md); truncating A instead would bias the mean by ~2^-11. */
template <int NT, int P = 3>
__device__ __forceinline__ void ig_wg_step3(const float (&av)[4], uint32_t dbig, uint32_t dsmall, uint32_t dh,
                                            uint32_t (&abig)[4], uint32_t (&asmall)[4], float (&acc)[1][NT][4])
{
    static_assert(P == 2 || P == 3, "3xTF32 or 2xTF32");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        if constexpr (P == 3) {
            abig[q] = __float_as_uint(av[q]) & 0xffffe000u;
            asmall[q] = __float_as_uint(av[q] - __uint_as_float(abig[q])) + 0x1000u;
        } else {
            abig[q] = cf_tf32_rna(av[q]);
        }
    }
    /* every wgmma input is final before the fence: ptxas serialises the wgmma pipeline (C7513) when an ordinary
     * instruction defines one of them between the fence and the wgmma. Descriptors as 32-bit words: the address
     * field never carries into the high word (ig_mainloop_patch), and 64-bit adds cost a carry chain per step. */
    uint64_t eb, es;
    ig_desc_pair(dbig, dsmall, dh, eb, es);
    wgmma_pin(abig);
    if constexpr (P == 3)
        wgmma_pin(asmall);
    wgmma_fence();
    if constexpr (P == 3)
        ig_wgmma<NT>(acc, asmall, eb); /* small*big + big*small, then big*big */
    ig_wgmma<NT>(acc, abig, es);
    ig_wgmma<NT>(acc, abig, eb);
    wgmma_commit();
    wgmma_wait<1>(); /* the previous step's A registers are free again (double buffer) */
}

/* A operand feeds of the wgmma main loop. prime() starts the copies; fetch(av) returns this thread's four
 * fragment values of the next k8 step (a0 = row g k t, a1 = row g+8 k t, a2 = row g k t+4, a3 = row g+8 k t+4).
 *
 * ig_ring_feed: the per-thread 4-byte cp.async gather (any shape; ~100 instructions per k8 step). */
struct ig_ring_feed {
    const cf_ig_params &p;
    const ig_smem &s;
    ig_pixels<1> &px;
    ig_a_feed<1> f;
    int ks = 0;
    __device__ __forceinline__ ig_ring_feed(const cf_ig_params &p_, const ig_smem &s_, ig_pixels<1> &px_, int nks)
        : p(p_), s(s_), px(px_), f(p_, s_, px_, nks)
    {
    }
    __device__ __forceinline__ void prime()
    {
        for (int i = 0; i < CF_IG_A_STAGES - 1; ++i)
            f.issue(p, s, px);
    }
    __device__ __forceinline__ void fetch(float (&av)[4])
    {
        ig_wait<CF_IG_A_STAGES - 2>();
        const float *sa = s.a + (ks % CF_IG_A_STAGES) * 4 * ig_threads(1) + threadIdx.x;
#pragma unroll
        for (int q = 0; q < 4; ++q)
            av[q] = sa[q * ig_threads(1)];
        f.issue(p, s, px);
        ++ks;
    }
};

__device__ __forceinline__ void ig_wg_bar(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(wg + 1) : "memory"); }

/* one 32-bit shared-memory load, as float (3xTF32 splits it) or as raw bits (TF32 by truncation) */
template <typename T>
__device__ __forceinline__ T ig_ld(uint32_t addr);
template <>
__device__ __forceinline__ float ig_ld<float>(uint32_t addr)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
    return v;
}
template <>
__device__ __forceinline__ uint32_t ig_ld<uint32_t>(uint32_t addr)
{
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}

/* ig_patch_feed: the warpgroup's input patch. Its 64 pixels (consecutive in one image of the phase grid) span
 * `slots` phase rows j_first.. ; slot s reads input rows a_h*(j_first + s) + c_min + tr, tr < rows (the phase's
 * row-tap span). Patch row R holds input row iy0 + a_h*(R / ss) + R % ss (ss = min(a_h, rows): consecutive
 * slots share rows when the taps overlap), for C = pk_cps channels: buffer row R*C + ci at gap + (R*C + ci)*ld,
 * the zero gap between rows being the column halo. A pixel's value for tap (c_h, c_w) and channel ci is at
 * gap + ((slot*ss + c_h - c_min)*C + ci)*ld + i + c_w: the per-pixel part is computed once per tile, the tap
 * part comes from a table (bytes).
 *
 * A k8 step is one tap (C = 8: a thread's k = t, t+4 are channels 2t, 2t+1, adjacent rows) or two taps (C = 4:
 * k = t is channel t of the first tap, k = t+4 channel t of the second; an odd last tap pairs with zeros). Each
 * step's two row offsets (lo, hi) come from the step table, so a step is 4 LDS. A stage (C channels, all taps)
 * is one TMA box, or 16-byte cp.async by the whole warpgroup (zero-filled outside the image).
 *
 * The ring: one slot (C = 8) or two (C = 4). With two, stage k+1 is issued as soon as every warp is done with
 * stage k-1, and runs on across tiles: the last stage of a tile issues the next tile's first (TMA; same phase
 * group). With one slot the next tile's stage is issued after the main loop, to land during the epilogue. */
template <bool TMA>
struct ig_patch_feed {
    /* Few members on purpose: the NT=16 variant runs at the 128-register cap, and every value kept here across
     * the main loop spilled something else (measured: KB2-91 1.77 -> 2.0 ms with 7 more members). What is needed
     * once per stage (buffer and barrier addresses, input rows) is derived again from kernel-level values. */
    const cf_ig_params &p;
    const ig_smem &s;
    uint32_t &ring;    /* bits 0-1: the parity ring slot sl waits for next (TMA); bit 2: the slot of the next stage */
    const int2 &first; /* cp.async: this thread's first (patch row, copy chunk), from ig_patch_first */
    int img, c_min, rows, nsteps;
    int j_first, nrows; /* first phase row of the warpgroup's pixels; patch rows (R*C + ci) this tile needs */
    uint32_t a0, a1;    /* byte offsets of pixels g and g+8, channel row of lane t, tap origin */
    bool pre;           /* TMA: this tile's first stage was issued during the previous tile */
    int nx_img, nx_iy0; /* TMA: the next tile's image and first input row (nx_img < 0: no next tile to start) */

    __device__ __forceinline__ ig_patch_feed(const cf_ig_params &p_, const ig_smem &s_, int img_, int m_base, int ph,
                                             int pw, cf_udiv_t dpw, int c_min_, int rows_, int nsteps_,
                                             const int2 &first_, uint32_t &ring_, bool pre_, int nx_img_, int nx_iy0_)
        : p(p_), s(s_), ring(ring_), first(first_), img(img_), c_min(c_min_), rows(rows_), nsteps(nsteps_),
          pre(pre_), nx_img(nx_img_), nx_iy0(nx_iy0_)
    {
        const int lim = ph * pw, ss = min(p.transposed ? 1 : p.stride_h, rows), C = p.pk_cps;
        /* a warpgroup wholly past the end of the image (last tile) works on copies of the last pixel: its first row
         * must be that pixel's, or the A offsets go negative (racecheck: reads below the warpgroup's buffer) */
        const int mb = min(m_base, lim - 1);
        j_first = (int)cf_udiv((uint32_t)mb, dpw);
        nrows = (((int)cf_udiv((uint32_t)min(mb + 63, lim - 1), dpw) - j_first) * ss + rows) * C;
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const int r0 = ((threadIdx.x >> 5) & 3) * 16 + g, crow = C == 8 ? 2 * t : t;
        uint32_t off[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = min(m_base + r0 + 8 * h, lim - 1); /* pixels past the end read a valid one (not stored) */
            const int j = (int)cf_udiv((uint32_t)m, dpw), i = m - j * pw;
            off[h] = (uint32_t)(((j - j_first) * ss * C + crow) * p.pk_ld + p.pk_gap + i) * 4u;
        }
        a0 = off[0];
        a1 = off[1];
    }

    __device__ __forceinline__ static int wg() { return threadIdx.x >> 7; }
    __device__ __forceinline__ uint32_t buf(int sl) const
    {
        return (uint32_t)__cvta_generic_to_shared(s.a) + (uint32_t)((wg() * p.pk_stages + sl) * p.pk_stage) * 4u;
    }
    __device__ __forceinline__ uint32_t bar(int sl) const
    {
        return (uint32_t)__cvta_generic_to_shared(s.pk_bar) + 8u * (uint32_t)(wg() * 2 + sl);
    }

    /* TMA: stage k of the patch whose first input row is iy0, image im, into slot sl (one thread) */
    __device__ __forceinline__ void issue_tma(int k, int sl, int iy0, int im) const
    {
        if ((threadIdx.x & 127) == 0) /* one box: pk_rows rows x C channels x pk_ld columns from x = -gap */
            ig_tma_load(&p.tmap, buf(sl), bar(sl),
                        (uint32_t)((CF_IG_ABLATE & 32) ? (p.pk_rows + 1) / 2 : p.pk_rows) * (uint32_t)p.pk_cps *
                            (uint32_t)p.pk_ld * 4u,
                        -p.pk_gap, k * p.pk_cps, iy0, im);
    }

    /* copy stage `k` (channels C*k..) of this tile into ring slot `sl` */
    __device__ __forceinline__ void issue(int k, int sl)
    {
        const int a_h = p.transposed ? 1 : p.stride_h, ss = min(a_h, rows);
        const int iy0 = a_h * j_first + c_min; /* input row of patch row 0 */
        if constexpr (TMA) {
            issue_tma(k, sl, iy0, img);
            return;
        }
        const float *src_img = p.src + (int64_t)img * p.cin * p.h * p.w;
        const int vec = p.pk_vec, chunks = p.w / vec, drr = p.pk_drr, dch = p.pk_dch; /* 128 = drr rows + dch */
        const int C = p.pk_cps, lc = C == 8 ? 3 : 2;
        const uint32_t dst0 = buf(sl) + (uint32_t)p.pk_gap * 4u;
        int rr = first.x, ch = first.y;
        while (rr < nrows) {
            const int R = rr >> lc, c = k * C + (rr & (C - 1));
            const int iy = ss == a_h ? iy0 + R : iy0 + a_h * (R / ss) + R % ss;
            const bool ok = (unsigned)iy < (unsigned)p.h && c < p.cin;
            const float *g = ok ? src_img + ((c * p.h + iy) * p.w + ch * vec) : p.src;
            const uint32_t d = dst0 + (uint32_t)(rr * p.pk_ld + ch * vec) * 4u;
            if (vec == 4) /* .cg (L2 only) takes 16 bytes only; the narrower copies of odd widths go through L1 */
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(g), "r"(ok ? 16 : 0));
            else if (vec == 2)
                asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(g), "r"(ok ? 8 : 0));
            else
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(g), "r"(ok ? 4 : 0));
            rr += drr;
            ch += dch;
            if (ch >= chunks) {
                ch -= chunks;
                ++rr;
            }
        }
        ig_commit();
    }

    /* the stage in slot sl has landed and is visible to every thread that waited */
    __device__ __forceinline__ void wait(int sl)
    {
        if constexpr (TMA) {
            ig_mbar_wait(bar(sl), (ring >> sl) & 1u);
            ring ^= 1u << sl;
        } else {
            ig_wait<0>();
            ig_wg_bar(wg());
        }
    }

    /* Before the main loop: this tile's first stage in flight, unless the previous tile started it. */
    __device__ __forceinline__ void prime()
    {
        if (pre)
            return;
        if (p.pk_stages == 1)
            ig_wg_bar(wg()); /* every warp is done reading the slot */
        /* two slots: the next slot was last read by the stage before the previous one, which every warp left
         * before the barrier of the previous stage */
        issue(0, (ring >> 2) & 1);
    }

    /* Stage kb has landed for the whole warpgroup; the next one is on its way when the ring has room. Returns the
     * shared address of its buffer. Once per stage, so the ring work stays out of the taps. */
    __device__ __forceinline__ uint32_t stage(int kb)
    {
        if (p.pk_stages == 1) {
            if (kb > 0) {
                ig_wg_bar(wg()); /* every warp is done reading the previous stage */
                issue(kb, 0);
            }
            wait(0);
            return buf(0);
        }
        const int sl = (ring >> 2) & 1;
        wait(sl);
        ig_wg_bar(wg()); /* every warp is done with the previous stage: its slot takes the next one */
        if (kb + 1 < p.pk_kc)
            issue(kb + 1, sl ^ 1);
        else if (TMA && nx_img >= 0)
            issue_tma(0, sl ^ 1, nx_iy0, nx_img);
        ring ^= 4u;
        return buf(sl);
    }

    /* One slot: the main loop is done reading; start the next tile's first stage (lands during the epilogue). */
    __device__ __forceinline__ void after()
    {
        if (TMA && p.pk_stages == 1 && nx_img >= 0) {
            ig_wg_bar(wg());
            issue_tma(0, 0, nx_iy0, nx_img);
        }
    }

    /* 8 channels per stage: hi is always lo + one patch row (no zero half, no select), so a stage's four fragment
     * addresses less the step's tap offset are fixed: q = base + {a0, a1, a0 + row, a1 + row}, once per stage */
    __device__ __forceinline__ void bases8(uint32_t base, uint32_t (&q)[4]) const
    {
        const uint32_t row = (uint32_t)p.pk_ld * 4u;
        q[0] = base + a0;
        q[1] = base + a1;
        q[2] = q[0] + row;
        q[3] = q[1] + row;
    }
    template <typename T>
    __device__ __forceinline__ void load8(T (&av)[4], const uint32_t (&q)[4], int st) const
    {
        const uint32_t o = (uint32_t)s.step_off[st].x;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            av[i] = ig_ld<T>(q[i] + o);
    }
    /* this thread's four fragment values of k8 step `st` in the stage at `base` (hi = 0: that half is zero) */
    template <typename T>
    __device__ __forceinline__ void load(T (&av)[4], uint32_t base, int st) const
    {
        const int2 o = s.step_off[st];
        const uint32_t lo = base + (uint32_t)o.x, hi = base + (uint32_t)(o.y & ~1);
        av[0] = ig_ld<T>(lo + a0);
        av[1] = ig_ld<T>(lo + a1);
        const T v2 = ig_ld<T>(hi + a0), v3 = ig_ld<T>(hi + a1); /* a read inside the buffer either way */
        av[2] = (o.y & 1) ? T(0) : v2; /* odd hi: no second tap (4 channels per stage, odd tap count) */
        av[3] = (o.y & 1) ? T(0) : v3;
    }
};

/* This thread's first copy of a patch stage: (row, 16-byte chunk) of its index in the warpgroup (once per kernel:
 * the divisions cost ~30 instructions). */
__device__ __forceinline__ int2 ig_patch_first(const cf_ig_params &p)
{
    const int wt = threadIdx.x & 127, chunks = max(p.w / p.pk_vec, 1);
    return make_int2(wt / chunks, wt % chunks);
}

/* TF32 k8 steps [st0, st0 + n) of the patch stage at `base` into acc; d is the B descriptor of step st0, returned
 * advanced past the last step. Steps in pairs, one wgmma group each, A in two register sets used in turn: the next
 * pair is read into the free set while the group runs, and the group is waited for before its set is refilled.
 * Overwriting A registers of a group still in flight (wait_group 1) made ptxas serialise every wgmma (C7513); one
 * set copied into the operands cost 8 moves per pair. TF32 operands by truncation: the tensor core reads the top 19
 * bits of the fp32 values as they are (cvt.rna.tf32 compiled to 4 instructions per value; error still ~1e-6 at the
 * KB2-91 shape). */
template <int NT, bool C8, bool TMA>
__device__ __forceinline__ uint32_t ig_patch_steps1(const ig_patch_feed<TMA> &feed, uint32_t base, int st0, int n,
                                                   uint32_t d, uint32_t dh, uint32_t dstep, float (&acc)[1][NT][4])
{
    const int np = n >> 1;
    uint32_t x0[4], x1[4], y0[4], y1[4], q[4];
    if constexpr (C8)
        feed.bases8(base, q);
    auto load = [&](uint32_t(&av)[4], int st) {
        if constexpr (C8)
            feed.load8(av, q, st);
        else
            feed.template load<uint32_t>(av, base, st);
    };
    if (np > 0) {
        load(x0, st0);
        load(x1, st0 + 1);
    }
    for (int i = 0; i < np; i += 2) {
        const bool more = i + 1 < np;
        ig_wg_pair<NT>(acc, x0, x1, d, d + dstep, dh);
        if (more) {
            load(y0, st0 + 2 * i + 2);
            load(y1, st0 + 2 * i + 3);
        }
        wgmma_wait<0>();
        wgmma_pin(x0);
        wgmma_pin(x1);
        if (more) {
            ig_wg_pair<NT>(acc, y0, y1, d + 2 * dstep, d + 3 * dstep, dh);
            if (i + 2 < np) {
                load(x0, st0 + 2 * i + 4);
                load(x1, st0 + 2 * i + 5);
            }
            wgmma_wait<0>();
            wgmma_pin(y0);
            wgmma_pin(y1);
        }
        d += more ? 4 * dstep : 2 * dstep;
    }
    if (n & 1) { /* the odd last step, paired with zeros */
        load(x0, st0 + n - 1);
#pragma unroll
        for (int q = 0; q < 4; ++q)
            x1[q] = 0u;
        ig_wg_pair<NT>(acc, x0, x1, d, d, dh);
        d += dstep;
        wgmma_wait<0>();
        wgmma_pin(x0);
        wgmma_pin(x1);
    }
    return d;
}

/* acc = conv of this warpgroup's 64 pixels x chunk's channels, A from the input patch, B resident. Stage-major,
 * step-minor k8 steps (ig_load_b_wg's order). The ring and stage work is done once per stage; a step costs its
 * 4 LDS, their addresses and its wgmma (the generic fetch had spent ~150 instructions per pair of steps on slot
 * modulo, barrier tests and address rebuilds). */
template <int NT, int PASSES, bool TMA>
__device__ __forceinline__ void ig_mainloop_patch(const cf_ig_params &p, const ig_smem &s, ig_patch_feed<TMA> &feed,
                                                  int chunk, float (&acc)[1][NT][4])
{
    ig_map<NT, 1>(acc, [](float) { return 0.f; });
    const int nsteps = feed.nsteps;
    if (nsteps == 0)
        return;
    feed.prime();
    /* B descriptors: the chunk's first k8 block, then + one block per step (address field in 16-byte units; B lies
     * in the first 256 KB of shared memory, so the 14-bit field never carries) */
    uint64_t d = wgmma_desc(s.b + chunk * NT * 64, 128, 256);
    const uint64_t dstep = (uint64_t)((uint32_t)p.nchunk * NT * 16);
    if constexpr (PASSES == 1) {
        uint32_t dl = (uint32_t)d;
        for (int kb = 0; kb < p.pk_kc; ++kb)
            dl = ig_patch_steps1<NT, false>(feed, feed.stage(kb), 0, nsteps, dl, (uint32_t)(d >> 32), (uint32_t)dstep,
                                            acc);
    } else {
        const uint32_t dsmall = (uint32_t)p.b_floats / 2 / 4; /* small parts: b_floats/2 further */
        const uint32_t dh = (uint32_t)(d >> 32), ds = (uint32_t)dstep;
        uint32_t dl = (uint32_t)d;
        uint32_t a0[4], s0[4], a1[4], s1[4];
        for (int kb = 0; kb < p.pk_kc; ++kb) {
            const uint32_t base = feed.stage(kb);
            for (int st = 0; st < nsteps; st += 2) {
                float av[4];
                feed.load(av, base, st);
                ig_wg_step3<NT, PASSES>(av, dl, dl + dsmall, dh, a0, s0, acc);
                dl += ds;
                if (st + 1 < nsteps) { /* ptxas keeps this conditional wgmma asynchronous (no C7518/C7520) */
                    feed.load(av, base, st + 1);
                    ig_wg_step3<NT, PASSES>(av, dl, dl + dsmall, dh, a1, s1, acc);
                    dl += ds;
                }
            }
            /* the register double buffer restarts at a0/s0: with an odd step count their group may still run */
            if (nsteps & 1)
                wgmma_wait<0>();
        }
    }
    feed.after();
    wgmma_wait<0>();
    wgmma_pin(*reinterpret_cast<float(*)[NT * 4]>(&acc[0][0][0]));
}

/* Split mode: acc0 / acc1 = the conv of this warpgroup's 64 pixel pairs, column phase 0 / 1, x the CTA's channels
 * (TF32). A stage's k8 steps are phase 0's taps (ns0 of them), then phase 1's; B holds them in that order. */
template <int NT, bool TMA>
__device__ __forceinline__ void ig_mainloop_split(const cf_ig_params &p, const ig_smem &s, ig_patch_feed<TMA> &feed,
                                                  int ns0, float (&acc0)[1][NT][4], float (&acc1)[1][NT][4])
{
    ig_map<NT, 1>(acc0, [](float) { return 0.f; });
    ig_map<NT, 1>(acc1, [](float) { return 0.f; });
    const int nsteps = feed.nsteps;
    if (nsteps == 0)
        return;
    feed.prime();
    const uint64_t d64 = wgmma_desc(s.b, 128, 256);
    const uint32_t dh = (uint32_t)(d64 >> 32), dstep = (uint32_t)NT * 16;
    uint32_t d = (uint32_t)d64;
    const int ns1 = nsteps - ns0;
    for (int kb = 0; kb < p.pk_kc; ++kb) {
        const uint32_t base = feed.stage(kb);
        /* one phase after the other: alternating the phases' wgmma groups under wait_group 1 (one group running
         * while the other's A set is refilled) made ptxas serialise every wgmma for want of registers (C7512) */
        d = ig_patch_steps1<NT, true>(feed, base, 0, ns0, d, dh, dstep, acc0);
        d = ig_patch_steps1<NT, true>(feed, base, ns0, ns1, d, dh, dstep, acc1);
    }
    feed.after();
    wgmma_wait<0>();
    wgmma_pin(*reinterpret_cast<float(*)[NT * 4]>(&acc0[0][0][0]));
    wgmma_pin(*reinterpret_cast<float(*)[NT * 4]>(&acc1[0][0][0]));
}

/* acc = conv of this thread's 2 pixels x chunk's channels on wgmma (B resident); k8 steps in the feed's order. */
template <int NT, int PASSES, typename Feed>
__device__ __forceinline__ void ig_mainloop_wg(const cf_ig_params &p, const ig_smem &s, Feed &feed, int nks, int chunk,
                                               float (&acc)[1][NT][4])
{
    ig_map<NT, 1>(acc, [](float) { return 0.f; });
    if (nks == 0)
        return;
    feed.prime();
    /* B descriptors: the chunk's first k8 block, then + ks blocks (address field in 16-byte units; B lies in the
     * first 256 KB of shared memory, so the 14-bit field never carries) */
    const uint64_t dbase = wgmma_desc(s.b + chunk * NT * 64, 128, 256);
    const uint32_t dstep = (uint32_t)p.nchunk * NT * 16;
    if constexpr (PASSES == 1) {
        /* Two k8 steps per wgmma group; the next pair's A values are read while the group runs, and rounded to
         * TF32 only after wait_group 0. Overwriting A registers of a group still in flight (a double buffer with
         * wait_group 1) made ptxas serialise every wgmma (C7513) and reuse the registers. */
        float av[2][4];
        feed.fetch(av[0]);
        if (nks > 1)
            feed.fetch(av[1]);
        for (int ks = 0; ks < nks; ks += 2) {
            const bool two = ks + 1 < nks;
            /* TF32 operands by truncation: the tensor core reads the top 19 bits of the fp32 values as they are
             * (cvt.rna.tf32 compiled to 4 instructions per value; error still ~1e-6 at the KB2-91 shape) */
            uint32_t a0[4], a1[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                a0[q] = __float_as_uint(av[0][q]);
                a1[q] = two ? __float_as_uint(av[1][q]) : 0u;
            }
            /* an odd last step multiplies zeros by the first step's B: a conditional wgmma made ptxas serialise
             * every wgmma of the kernel (C7520, "WG.AR in divergent path") */
            uint64_t d0 = dbase + (uint64_t)(ks * dstep);
            uint64_t d1 = dbase + (uint64_t)((two ? ks + 1 : ks) * dstep);
            asm volatile("" : "+l"(d0), "+l"(d1));
            wgmma_fence();
            ig_wgmma<NT>(acc, a0, d0);
            ig_wgmma<NT>(acc, a1, d1);
            wgmma_commit();
            if (ks + 2 < nks)
                feed.fetch(av[0]);
            if (ks + 3 < nks)
                feed.fetch(av[1]);
            wgmma_wait<0>();
            /* a0/a1 live until the group is done: without a conversion instruction they could share registers with
             * av, which the fetches above overwrite while the tensor core still reads them (measured: rare wrong
             * values, max error 5e-4 at the KB2-91 shape) */
            wgmma_pin(a0);
            wgmma_pin(a1);
        }
    } else {
        /* small parts: b_floats/2 on; descriptors as 32-bit words (the address field never carries) */
        const uint32_t dlo = (uint32_t)dbase, dslo = dlo + (uint32_t)p.b_floats / 2 / 4, dh = (uint32_t)(dbase >> 32);
        uint32_t a0[4], s0[4], a1[4], s1[4];
        for (int ks = 0; ks < nks; ks += 2) {
            float av[4];
            feed.fetch(av);
            ig_wg_step3<NT, PASSES>(av, dlo + ks * dstep, dslo + ks * dstep, dh, a0, s0, acc);
            if (ks + 1 < nks) { /* ptxas keeps this conditional wgmma asynchronous (no C7518/C7520 in -Xptxas -v) */
                feed.fetch(av);
                ig_wg_step3<NT, PASSES>(av, dlo + (ks + 1) * dstep, dslo + (ks + 1) * dstep, dh, a1, s1, acc);
            }
        }
    }
    wgmma_wait<0>();
    wgmma_pin(*reinterpret_cast<float(*)[NT * 4]>(&acc[0][0][0]));
}

/* Fold the AFFINE stages into per-channel (a, b) tables, in double, once per CTA. */
__device__ void ig_build_tables(const cf_ig_params &p, const ig_smem &s)
{
    const int cpad = p.nt_total * 8;
    for (int st = 0; st < p.nstage; ++st) {
        const cf_ig_stage &sg = p.stage[st];
        if (sg.kind != CF_IG_AFFINE && sg.kind != CF_IG_AFFINE_SIGMOID)
            continue;
        const double pre = sg.kind == CF_IG_AFFINE_SIGMOID ? -1.4426950408889634 : 1.0;
        for (int c = threadIdx.x; c < cpad; c += blockDim.x) {
            double a = 1.0, b = 0.0;
            if (c < p.cout) {
                if (sg.with_bias && p.bia)
                    b = p.bia[c];
                for (int o = sg.op_begin; o < sg.op_end; ++o)
                    cf_epi_fold_affine(p.op[o], c, &a, &b);
            }
            s.tab[sg.table * cpad + c] = make_float2((float)(a * pre), (float)(b * pre));
        }
    }
}

template <int NT, int MT, int NB = 0, int NE = NT>
__device__ __forceinline__ void ig_apply_stages(const cf_ig_params &p, const ig_smem &s, int st_begin, int st_end,
                                                int chunk, float (&acc)[MT][NT][4])
{
    const int t = threadIdx.x & 3;
    const int cpad = p.nt_total * 8;
    for (int st = st_begin; st < st_end; ++st) {
        const int kind = p.stage[st].kind;
        if (kind == CF_IG_AFFINE) {
            const float2 *tab = s.tab + p.stage[st].table * cpad + chunk * NT * 8 + 2 * t;
#pragma unroll
            for (int nt = NB; nt < NE; ++nt) {
                const float2 t0 = tab[nt * 8], t1 = tab[nt * 8 + 1];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    acc[mt][nt][0] = fmaf(acc[mt][nt][0], t0.x, t0.y);
                    acc[mt][nt][1] = fmaf(acc[mt][nt][1], t1.x, t1.y);
                    acc[mt][nt][2] = fmaf(acc[mt][nt][2], t0.x, t0.y);
                    acc[mt][nt][3] = fmaf(acc[mt][nt][3], t1.x, t1.y);
                }
            }
        } else if (kind == CF_IG_AFFINE_SIGMOID) {
            const float2 *tab = s.tab + p.stage[st].table * cpad + chunk * NT * 8 + 2 * t;
#pragma unroll
            for (int nt = NB; nt < NE; ++nt) {
                const float2 t0 = tab[nt * 8], t1 = tab[nt * 8 + 1];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float2 tt = (e & 1) ? t1 : t0;
                        acc[mt][nt][e] = cf_rcp(1.f + cf_ex2(fmaf(acc[mt][nt][e], tt.x, tt.y)));
                    }
            }
        } else if (kind == CF_IG_SIGMOID) {
            ig_map<NT, MT, NB, NE>(acc, cf_sigmoid);
        } else if (kind == CF_IG_RELU) {
            ig_map<NT, MT, NB, NE>(acc, cf_relu);
        } else if (kind == CF_IG_TANH) {
            ig_map<NT, MT, NB, NE>(acc, cf_tanh);
        } else if (kind == CF_IG_GELU) {
            ig_map<NT, MT, NB, NE>(acc, cf_gelu);
        }
    }
}

/* Max and sum of exp over this chunk's channels for each of the thread's 4 pixel rows (quad-reduced).
 * fmaxf drops NaN from the max, but a NaN logit still makes its exp, the sum and so every output of the
 * pixel NaN, and +inf gives inf - inf = NaN: both as torch.softmax. With `keep`, acc becomes exp(x - max). */
template <int NT, int MT, bool KEEP>
__device__ __forceinline__ void ig_chunk_softmax_stats(const cf_ig_params &p, int chunk, float (&acc)[MT][NT][4],
                                                       float (&m)[2 * MT], float (&l)[2 * MT])
{
    const int t = threadIdx.x & 3;
    /* padded channels (C_out not a multiple of 8*NT) take -inf: no weight in the max or the sum */
    if ((chunk + 1) * NT * 8 > p.cout)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                if ((chunk * NT + nt) * 8 + 2 * t + j >= p.cout)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        acc[mt][nt][j] = -INFINITY;
                        acc[mt][nt][2 + j] = -INFINITY;
                    }
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int mt = r >> 1, half = r & 1;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            mx = fmaxf(mx, fmaxf(acc[mt][nt][half * 2], acc[mt][nt][half * 2 + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float off = -mx * CF_LOG2E;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const float e = cf_ex2(fmaf(acc[mt][nt][half * 2 + j], CF_LOG2E, off));
                sum += e;
                if (KEEP)
                    acc[mt][nt][half * 2 + j] = e;
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        m[r] = mx;
        l[r] = sum;
    }
}

/* acc = exp(acc - m) / l (two-visit path: the logits were recomputed) */
template <int NT, int MT>
__device__ __forceinline__ void ig_softmax_apply(const float (&m)[2 * MT], const float (&l)[2 * MT], float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int mt = r >> 1, half = r & 1;
        const float inv = cf_rcp(l[r]), off = -m[r] * CF_LOG2E;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                acc[mt][nt][half * 2 + j] = cf_ex2(fmaf(acc[mt][nt][half * 2 + j], CF_LOG2E, off)) * inv;
    }
}

/* acc (already exp(x - m)) /= l */
template <int NT, int MT>
__device__ __forceinline__ void ig_softmax_scale(const float (&l)[2 * MT], float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const float inv = cf_rcp(l[r]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                acc[r >> 1][nt][(r & 1) * 2 + j] *= inv;
    }
}

/* Write the chunk: per 8-channel slab, the warp transposes its fragments through shared memory and stores
 * each channel's 16*MT consecutive pixels with one instruction. Stored straight from the fragment layout,
 * each store instruction touched 4 channels x 8 pixels = 4 cache lines, and the kernels were bound by the
 * number of L2 write requests (docs/kb2_73.md). The slab's shared-memory reads are all issued before its
 * stores, and the store address only advances by a channel stride (profiled: a per-element channel test,
 * branch and 64-bit address rebuild made the store loop 14 instructions per value, stalled on each read). */
/* Staging index of (channel row 0..7, pixel column 0..31): row r is rotated by 8*(r/2) + 16*(r%2) words. The
 * fragment writes (rows 2t + j, columns g + const) then hit banks 8t + g + const, and the reads of two rows of 16
 * pixels (wgmma: rows c, c+1 with c even) hit two disjoint halves of the banks. A plain stride of 36 words left
 * those reads 2-way conflicted (ncu: 22% of the shared wavefronts of KB2-91 were excess). */
__device__ __forceinline__ int ig_stg_idx(int row, int col)
{
    return row * CF_IG_STAGE_LD + ((col + 8 * (row >> 1) + 16 * (row & 1)) & 31);
}

template <int NT, int MT>
__device__ __forceinline__ void ig_store(const cf_ig_params &p, const ig_smem &s, const ig_pixels<MT> &px, int chunk,
                                         const float (&acc)[MT][NT][4])
{
    constexpr int PXW = 16 * MT, GROUPS = 32 / PXW, PER = 8 / GROUPS; /* channels per lane per slab */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float *stg = s.stage + (threadIdx.x >> 5) * 8 * CF_IG_STAGE_LD;
    const int plane = p.oh * p.ow; /* C_out*OH*OW < 2^31 per image (host check): 32-bit channel offsets */
    const int pl = lane % PXW, cg = lane / PXW;
    /* channels this lane writes: c0 + cg + it*GROUPS, c0 = (chunk*NT + nt)*8 */
    const int cbase = chunk * NT * 8 + cg;
    /* a chunk wholly inside C_out needs no channel test (warp-uniform); a lane past the end of the phase
     * writes nothing */
    if constexpr ((CF_IG_ABLATE & 2) != 0) {
        float k = 0.f;
#pragma unroll
        for (int i = 0; i < MT * NT * 4; ++i)
            k += (&acc[0][0][0])[i];
        if (k == 1234.5f)
            *px.st_ptr = k;
        return;
    }
    const bool whole = (chunk + 1) * NT * 8 <= p.cout;
    const int cend = px.st_ok ? p.cout : 0;
    float *dst = px.st_ptr + (int64_t)cbase * plane;
    int off[PER];
#pragma unroll
    for (int it = 0; it < PER; ++it)
        off[it] = it * GROUPS * plane;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                stg[ig_stg_idx(2 * t + (e & 1), mt * 16 + (e >> 1) * 8 + g)] = acc[mt][nt][e];
        __syncwarp();
        float v[PER];
#pragma unroll
        for (int it = 0; it < PER; ++it)
            v[it] = stg[ig_stg_idx(cg + it * GROUPS, pl)];
        __syncwarp();
        if constexpr ((CF_IG_ABLATE & 1) != 0) {
            float k = 0.f;
#pragma unroll
            for (int it = 0; it < PER; ++it)
                k += v[it];
            if (k == 1234.5f)
                dst[0] = k;
        } else if (whole) {
            if (px.st_ok)
#pragma unroll
                for (int it = 0; it < PER; ++it)
                    dst[off[it]] = v[it];
        } else {
#pragma unroll
            for (int it = 0; it < PER; ++it)
                if (cbase + nt * 8 + it * GROUPS < cend)
                    dst[off[it]] = v[it];
        }
        dst += 8 * plane;
    }
}

/* ig_store_tma's box writes and copies in PARTS channel slices, each copied out as soon as it is written (the caller
 * has waited for the previous tile's copies to read the boxes): the 32 shared stores of a tile leave in PARTS bursts
 * with a barrier and the copies of the slice before between them (cf_ig_params::store_parts). With `late` each
 * slice's epilogue (every stage: no softmax) is applied here, just before its writes. Row c (128 bytes), 16-byte
 * chunk col/4 XOR c%8: a warp's 32 writes hit 32 banks. */
template <int NT, int PARTS>
__device__ __forceinline__ void ig_store_tma_slices(const cf_ig_params &p, const ig_smem &s, int m_wg, int img,
                                                    int chunk, float (&acc)[1][NT][4], bool late)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wl = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
    constexpr int BOX = NT * 8 * 32, NP = NT / PARTS; /* floats per box; n8 tiles per slice */
    float *box = s.ostage + (wg * 2 + (wl >> 1)) * BOX;
#pragma unroll
    for (int h = 0; h < PARTS; ++h) {
        if (late) { /* this slice's epilogue math just before its writes: a burst of writes, then math (H100,
                       KB2-73 eval 0.279-0.287 -> 0.270-0.271 ms with the math of both halves first) */
            if (h == 0)
                ig_apply_stages<NT, 1, 0, NP>(p, s, 0, p.nstage, chunk, acc);
            if constexpr (PARTS >= 2) {
                if (h == 1)
                    ig_apply_stages<NT, 1, NP, 2 * NP>(p, s, 0, p.nstage, chunk, acc);
            }
            if constexpr (PARTS >= 4) {
                if (h == 2)
                    ig_apply_stages<NT, 1, 2 * NP, 3 * NP>(p, s, 0, p.nstage, chunk, acc);
                if (h == 3)
                    ig_apply_stages<NT, 1, 3 * NP, 4 * NP>(p, s, 0, p.nstage, chunk, acc);
            }
        }
#pragma unroll
        for (int nt = h * NP; nt < (h + 1) * NP; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = nt * 8 + 2 * t + (e & 1), col = 16 * (wl & 1) + g + 8 * (e >> 1);
                box[c * 32 + ((((col >> 2) ^ c) & 7) << 2) + (col & 3)] = acc[0][nt][e];
            }
        fence_proxy_async(); /* the generic-proxy writes -> the bulk copy (async proxy) */
        ig_wg_bar(wg);
        if ((threadIdx.x & 127) == 0 && (CF_IG_ABLATE & 1) == 0) { /* ablation 1: boxes written, never copied out */
            /* slice h: rows 8*NP*h.. of both boxes (1 KB-aligned: whole swizzle atoms) */
            const uint32_t b0 = (uint32_t)__cvta_generic_to_shared(s.ostage + wg * 2 * BOX) + h * (BOX / PARTS) * 4;
#pragma unroll
            for (int b = 0; b < 2; ++b)
                asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                                 &p.tmap_out),
                             "r"(b0 + (uint32_t)(b * BOX * 4)), "r"(m_wg + 32 * b), "r"(chunk * NT * 8 + 8 * NP * h),
                             "r"(img)
                             : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
}

/* TMA store of this warpgroup's 64 pixels (from m_wg of image img) x the chunk's 8*NT channels: the fragments go
 * into two 128-byte-swizzled boxes (32 pixels each; warps 0-1 and 2-3) and one thread stores them with bulk tensor
 * copies (two per channel slice, ig_store_tma_slices), which clip pixels past the image and channels past C_out. The staging transpose then costs one
 * STS per value and no LDS/STG (ig_store: a shared round trip, then 4-byte stores of 16 pixels per channel). The
 * boxes are reused only after the previous tile's copies have read them (wait_group.read). */
template <int NT>
__device__ __forceinline__ void ig_store_tma(const cf_ig_params &p, const ig_smem &s, int m_wg, int img, int chunk,
                                             float (&acc)[1][NT][4], bool late)
{
    const int wg = threadIdx.x >> 7;
    if constexpr ((CF_IG_ABLATE & 2) != 0) { /* ablation: neither boxes nor copies (values kept alive) */
        float k = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            k += acc[0][nt][0] + acc[0][nt][1] + acc[0][nt][2] + acc[0][nt][3];
        if (k == 1234.5f)
            s.ostage[threadIdx.x & 31] = k;
        return;
    }
    /* ablation 16: boxes rewritten without waiting (races on purpose) */
    if ((threadIdx.x & 127) == 0 && (CF_IG_ABLATE & 16) == 0)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    ig_wg_bar(wg);
    if constexpr (NT == 8) {
        if (p.store_parts == 2) {
            ig_store_tma_slices<NT, 2>(p, s, m_wg, img, chunk, acc, late);
            return;
        }
        if (p.store_parts == 4) {
            ig_store_tma_slices<NT, 4>(p, s, m_wg, img, chunk, acc, late);
            return;
        }
    }
    ig_store_tma_slices<NT, 1>(p, s, m_wg, img, chunk, acc, late);
}

/* ---- split mode (igemm.cuh, cf_ig_params::split): the two CTAs of a cluster hold the two channel halves ---- */

/* this CTA's shared address `addr` as seen from CTA `rank` of the cluster */
__device__ __forceinline__ uint32_t ig_mapa(uint32_t addr, uint32_t rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

/* The channel softmax across the pair: m[2h + r], l[2h + r] are this CTA's max and sum of exp(x - max) over its
 * channels for column phase h (acc[h]) and pixel row r (pair 16*warp + g + 8r of the warpgroup), with acc already
 * exp(x - max) (ig_chunk_softmax_stats over acc as two m16 tiles). The
 * quad's lane t = 0 writes them into the peer's exchange slot with st.async, each store completing its bytes on the
 * peer's barrier (no release fence: a remote arrive with release at cluster scope had cost a MEMBAR per tile and the
 * cluster-scope acquire an L1 invalidate); one thread per warpgroup arms its own slot's barrier for the 1 KB it
 * expects. Every thread waits for the peer's values in its own slot, and acc becomes exp(x - M) / L with M, L over
 * both halves. Two slots used in turn (tile count k): the peer writes a slot again only after it has waited for this
 * CTA's next values, which this CTA sends after its reads of the slot. */
template <int NT>
__device__ __forceinline__ void ig_split_softmax(const ig_smem &s, uint32_t bars, uint32_t peer, uint32_t k,
                                                 const float (&m)[4], const float (&l)[4], float (&acc)[2][NT][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, wg = threadIdx.x >> 7, wl = (threadIdx.x >> 5) & 3;
    const uint32_t slot = k & 1u, bar = bars + 8u * (slot * CF_IG_WGS + wg);
    float2 *xb = s.xch + (slot * CF_IG_WGS + wg) * 2 * 64; /* [column phase][pair] */
    /* this CTA's slot expects the peer's 32 quads x 4 values x 8 bytes (the one arrival of its phase) */
    if ((threadIdx.x & 127) == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(32u * 4u * 8u)
                     : "memory");
    if ((lane & 3) == 0) {
        const uint32_t rx = ig_mapa((uint32_t)__cvta_generic_to_shared(xb), peer), rbar = ig_mapa(bar, peer);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
                                 rx + 8u * (h * 64 + wl * 16 + g + 8 * r)),
                             "f"(m[2 * h + r]), "f"(l[2 * h + r]), "r"(rbar)
                             : "memory");
    }
    ig_mbar_wait(bar, (k >> 1) & 1u);
    float f[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float2 o = xb[h * 64 + wl * 16 + g + 8 * r];
            const float mm = fmaxf(m[2 * h + r], o.x);
            const float own = cf_ex2((m[2 * h + r] - mm) * CF_LOG2E);
            f[h][r] = own * cf_rcp(l[2 * h + r] * own + o.y * cf_ex2((o.x - mm) * CF_LOG2E));
        }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[h][nt][e] *= f[h][e >> 1];
}

/* Split mode store: per 8-channel slab the warp interleaves its two column phases (float2 writes, pair = 2 output
 * columns) into an 8 x 32 staging block, and each channel's 32 consecutive output columns go out with one store
 * instruction (lane = column): whole sectors, where a column-phase CTA wrote every other word of each. */
template <int NT>
__device__ __forceinline__ void ig_store_split(const cf_ig_params &p, const ig_smem &s, const ig_pixels<1> &px,
                                               int chunk, const float (&acc)[2][NT][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float *stg = s.stage + (threadIdx.x >> 5) * 8 * CF_IG_SPLIT_LD;
    const int plane = p.oh * p.ow, cbase = chunk * NT * 8;
    const bool whole = (chunk + 1) * NT * 8 <= p.cout;
    float *dst = px.st_ptr + (int64_t)cbase * plane;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) /* rows 2t + (e & 1), pairs g + 8 (e >> 1): banks 8t + 2g + ... distinct */
            *reinterpret_cast<float2 *>(&stg[(2 * t + (e & 1)) * CF_IG_SPLIT_LD + 2 * (g + 8 * (e >> 1))]) =
                make_float2(acc[0][nt][e], acc[1][nt][e]);
        __syncwarp();
        float v[8];
#pragma unroll
        for (int c = 0; c < 8; ++c)
            v[c] = stg[c * CF_IG_SPLIT_LD + lane];
        __syncwarp();
        if (px.st_ok) {
            if (whole) {
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    dst[c * plane] = v[c];
            } else {
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    if (cbase + nt * 8 + c < p.cout)
                        dst[c * plane] = v[c];
            }
        }
        dst += 8 * plane;
    }
}

/* Reduce V values per lane over the 8 lanes of a quad column (lane bits 2-4) by halving: at each step a lane keeps
 * one half of its values and adds the partner's copy of that half, so 7V/8 shuffles instead of 3V. Afterwards
 * v[i], i < V/8, holds the sum of original index ig_bfly_index<V>(i, lane). */
template <int V>
__device__ __forceinline__ void ig_bfly_reduce(float (&v)[V], int lane)
{
#pragma unroll
    for (int st = 0; st < 3; ++st) {
        const int off = 16 >> st, n = V >> (st + 1);
        const bool up = lane & off;
#pragma unroll
        for (int i = 0; i < n; ++i) {
            const float send = up ? v[i] : v[i + n], keep = up ? v[i + n] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
    }
}

/* The inverse: every lane gets all V values back from the V/8 each lane holds after ig_bfly_reduce. */
template <int V>
__device__ __forceinline__ void ig_bfly_spread(float (&v)[V], int lane)
{
#pragma unroll
    for (int st = 2; st >= 0; --st) {
        const int off = 16 >> st, n = V >> (st + 1);
        const bool up = lane & off;
#pragma unroll
        for (int i = 0; i < n; ++i) {
            const float other = __shfl_xor_sync(0xffffffffu, v[i], off);
            v[i + n] = up ? v[i] : other;
            v[i] = up ? other : v[i];
        }
    }
}

template <int V>
__device__ __forceinline__ int ig_bfly_index(int i, int lane)
{
    return i + (V / 2) * ((lane >> 4) & 1) + (V / 4) * ((lane >> 3) & 1) + (V / 8) * ((lane >> 2) & 1);
}

/* Per-channel statistics of this warp's pixels of the tile (count, mean, M2), merged (Chan) into the warp's own
 * running values in shared memory: no CTA barrier per tile (a CTA-wide merge per tile made the statistics pass
 * slower than the full pass with its stores). The warps are merged once, at the end of the kernel. The sums over
 * the warp's pixels go by halving butterflies (ig_bfly_reduce): per value 7/8 of a shuffle for the sums, as many
 * to hand the means back, and 7/8 for M2 (the per-value three-shuffle reductions had made this pass slower than
 * the one that writes the output). Every lane then merges one channel per group of 8 columns. */
template <int NT, int MT>
__device__ __forceinline__ void ig_tile_stats(const cf_ig_params &p, const ig_smem &s, const ig_pixels<MT> &px, int chunk,
                                              const float (&acc)[MT][NT][4])
{
    constexpr int V = 2 * NT; /* this lane's channel columns: index nt*2 + j */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int cpad = p.nt_total * 8;
    int cnt = 0;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r)
        cnt += px.img[r] >= 0;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)
        cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
    if (cnt == 0)
        return; /* warp-uniform */
    const float inv = 1.f / cnt;
    const int na = s.run_cnt[warp];
    const float fb = (float)cnt / (na + cnt), fab = (float)na * (float)cnt / (na + cnt);
    /* in groups of 8 columns (the shuffles per value are the same as for all V at once, with fewer registers
     * live: the NT=16 variants are at the register cap) */
#pragma unroll
    for (int g8 = 0; g8 < V / 8; ++g8) {
        float v[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int k = g8 * 8 + q;
            float sum = 0.f;
#pragma unroll
            for (int r = 0; r < 2 * MT; ++r)
                sum += px.img[r] >= 0 ? acc[r >> 1][k >> 1][(r & 1) * 2 + (k & 1)] : 0.f;
            v[q] = sum;
        }
        ig_bfly_reduce<8>(v, lane);
        const float mean = v[0] * inv;
        v[0] = mean;
        ig_bfly_spread<8>(v, lane); /* v[q] = the mean of column g8*8 + q */
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int k = g8 * 8 + q;
            float m2 = 0.f;
#pragma unroll
            for (int r = 0; r < 2 * MT; ++r) {
                const float d = acc[r >> 1][k >> 1][(r & 1) * 2 + (k & 1)] - v[q];
                m2 += px.img[r] >= 0 ? d * d : 0.f;
            }
            v[q] = m2;
        }
        ig_bfly_reduce<8>(v, lane);
        const int k = g8 * 8 + ig_bfly_index<8>(0, lane);
        const int c = (chunk * NT + (k >> 1)) * 8 + 2 * t + (k & 1);
        float *ma = s.run_mean + warp * cpad + c, *qa = s.run_m2 + warp * cpad + c;
        const float d = mean - *ma;
        *ma += d * fb;
        *qa += v[0] + d * d * fab;
    }
    __syncwarp();
    if (lane == 0 && chunk == p.nchunk - 1)
        s.run_cnt[warp] = na + cnt;
    __syncwarp();
}

template <int NT, int PASSES, bool STATS, bool WG, int PATCH, bool SPLIT>
__global__ void __launch_bounds__(WG ? CF_IG_WGS * 128 : CF_IG_THREADS, 1)
    cf_ig_kernel(const __grid_constant__ cf_ig_params p)
{
    /* STATS: the batch-norm statistics pass (p.stats_mode != 0) is its own variant: its code in the other variants
     * cost the NT=16 bodies, at the 128-register cap, 40 -> 200 bytes of spills (ptxas -v) */
    /* PATCH: 0 per-thread gather, 1 input patch by cp.async, 2 input patch by TMA */
    static_assert(WG || PATCH == 0, "the input patch feeds the wgmma main loop only");
    static_assert(PASSES != 2 || (WG && STATS), "2xTF32 products are for the wgmma statistics pass only");
    /* SPLIT: the cluster's two CTAs split the channels, each computing both column phases (cf_ig_params::split) */
    static_assert(!SPLIT || (WG && PATCH != 0 && PASSES == 1 && !STATS), "split mode: TF32 wgmma with the patch");
    /* mma.sync: 8 warps x 32 pixels (two m16 tiles each); wgmma: CF_IG_WGS warpgroups x 64 pixels (16 per warp) */
    constexpr int MT = WG ? 1 : 2;
    /* PDL (pdl.cuh; the training chain): the next kernel may be scheduled now; what this one reads from the kernels
     * before it (the statistics pass: the Gram flag; the output pass: the batch norm's scale/shift, in the tables)
     * it reads after the wait. The output pass sets up its shared memory first. */
    cf_grid_release();
    if constexpr (STATS)
        cf_grid_wait();
    if (STATS && p.skip_if && *p.skip_if)
        return; /* the statistics came from the input Gram (the whole grid, so every cluster, returns here) */
    extern __shared__ float4 smem_raw[];
    /* taps: [0] rows, [1] columns (split mode: of column phase 0), [2] split mode: columns of column phase 1 */
    constexpr int NTD = SPLIT ? 3 : 2;
    __shared__ int sh_ntaps, sh_ntaps0, sh_nt[NTD], sh_k[NTD][CF_IG_MAX_TAPS], sh_c[NTD][CF_IG_MAX_TAPS], sh_cmin,
        sh_rows;
    __shared__ alignas(8) uint64_t sh_pk_bar[PATCH == 2 ? 4 * 2 : 1]; /* TMA patch: [warpgroup][ring slot] */
    __shared__ alignas(8) uint64_t sh_x_bar[SPLIT ? 2 * CF_IG_WGS : 1]; /* split: the exchange, [slot][warpgroup] */
    ig_smem s = ig_carve<NT>(p, reinterpret_cast<float *>(smem_raw));
    s.pk_bar = sh_pk_bar;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;

    if (PATCH != 0) { /* the column halos between patch rows stay zero; copies only write the rows */
        for (int i = threadIdx.x; i < p.a_floats; i += blockDim.x)
            s.a[i] = 0.f;
        if (threadIdx.x == 0 && PATCH == 2) {
            for (int b = 0; b < 4 * 2; ++b)
                ig_mbar_init((uint32_t)__cvta_generic_to_shared(&sh_pk_bar[b]), 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        fence_proxy_async(); /* the zeroed halos -> the TMA (async proxy) writes next to them */
    }
    if constexpr (!STATS)
        cf_grid_wait();
    ig_build_tables(p, s);
    uint32_t x_bars = 0, x_peer = 0, x_k = 0; /* split: exchange barriers, the peer CTA, tiles done */
    if constexpr (SPLIT) {
        x_bars = (uint32_t)__cvta_generic_to_shared(sh_x_bar);
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(x_peer));
        x_peer ^= 1u;
        if (threadIdx.x == 0) {
            for (int b = 0; b < 2 * CF_IG_WGS; ++b)
                ig_mbar_init(x_bars + 8u * b, 1); /* this CTA's expect_tx; the peer's st.async complete the bytes */
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        /* both CTAs' barriers exist before either arrives on the other's */
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    }
    if (STATS) {
        for (int c = threadIdx.x; c < CF_IG_MAX_WARPS * p.nt_total * 8; c += blockDim.x) {
            s.run_mean[c] = 0.f;
            s.run_m2[c] = 0.f;
        }
        for (int w = threadIdx.x; w < CF_IG_MAX_WARPS; w += blockDim.x)
            s.run_cnt[w] = 0;
        __syncthreads();
    }

    /* Clusters take contiguous tile ranges; inside a cluster every CTA walks the same tiles, rank = column phase. */
    unsigned rank = 0;
    if (p.cluster > 1)
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int cid = blockIdx.x / p.cluster, ncl = gridDim.x / p.cluster;
    /* interleaved: cluster cid takes tiles cid, cid + ncl, ...; at any moment the grid works on neighbouring tiles,
     * so each output plane is written as one advancing front instead of one stream per CTA (contiguous ranges) */
    const int t_begin = p.tile_interleave ? cid : (int)((int64_t)cid * p.num_tiles / ncl);
    const int t_end = p.tile_interleave ? p.num_tiles : (int)((int64_t)(cid + 1) * p.num_tiles / ncl);
    const int t_step = p.tile_interleave ? ncl : 1;
    int grp = -1, q = -1, ntaps = 0, ntaps0 = 0, ph = 0, pw = 0, qh = 0, qw = 0, pk_cmin = 0, pk_rows = 0;
    constexpr int TM = WG ? CF_IG_WG_TILE_M : CF_IG_TILE_M;
    int tpi = 1; /* patch mode: tiles per image of the group */
    /* division by pw and by tpi, needed per tile: by multiply and shift (udiv.h), the magic numbers in shared
     * memory (in registers they cost the variants at the 128-register cap more spills) */
    __shared__ cf_udiv_t sh_div[2];
    const int a_h = p.transposed ? 1 : p.stride_h, a_w = p.transposed ? 1 : p.stride_w;
    const int2 pk_first = PATCH != 0 ? ig_patch_first(p) : make_int2(0, 0);
    uint32_t pk_ring = 0; /* the patch ring's slot parities and next slot (ig_patch_feed::ring) */
    bool pk_pre = false;  /* the TMA patch's first stage of this tile was issued during the previous tile */

    for (int tile = t_begin, tile_k = 0; tile < t_end; tile += t_step, ++tile_k) {
        /* Pacing only (no data crosses it, so relaxed: no membar): the pair's CTAs stay within `pace` tiles of
         * each other, so the halves of each output sector meet in L2. Split arrive/wait leaves that much slack;
         * a full barrier per tile ran every CTA's warps in lock-step. */
        if (!SPLIT && p.cluster > 1 && tile_k % p.pace == 0) {
            if (tile_k > 0)
                asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
            asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
        }
        if (grp < 0 || tile >= p.tile_start[grp + 1]) {
            while (tile >= p.tile_start[grp + 1])
                ++grp;
            q = p.cluster > 1 ? grp * p.sw + (int)rank : grp;
            qh = q / p.sw;
            qw = q - qh * p.sw;
            ph = (p.oh - qh + p.sh - 1) / p.sh;
            pw = p.cluster > 1 ? p.pw_pairs : (p.ow - qw + p.sw - 1) / p.sw;
            tpi = (ph * pw + TM - 1) / TM;
            __syncthreads(); /* everyone is done with the previous phase's taps and B */
            if (threadIdx.x == 0) {
                sh_nt[0] = ig_taps_1d(p.transposed, qh, p.stride_h, p.pad_h, p.dil_h, p.kh, sh_k[0], sh_c[0]);
                sh_nt[1] =
                    ig_taps_1d(p.transposed, SPLIT ? 0 : qw, p.stride_w, p.pad_w, p.dil_w, p.kw, sh_k[1], sh_c[1]);
                sh_ntaps = sh_ntaps0 = sh_nt[0] * sh_nt[1];
                if constexpr (SPLIT) {
                    sh_nt[NTD - 1] = ig_taps_1d(p.transposed, 1, p.stride_w, p.pad_w, p.dil_w, p.kw, sh_k[NTD - 1],
                                                sh_c[NTD - 1]);
                    sh_ntaps += sh_nt[0] * sh_nt[NTD - 1];
                }
                int cmn = 0, cmx = 0;
                for (int a = 0; a < sh_nt[0]; ++a) {
                    cmn = a == 0 ? sh_c[0][a] : min(cmn, sh_c[0][a]);
                    cmx = a == 0 ? sh_c[0][a] : max(cmx, sh_c[0][a]);
                }
                sh_cmin = cmn;
                sh_rows = cmx - cmn + 1;
                sh_div[0] = cf_udiv_make((uint32_t)max(pw, 1));
                sh_div[1] = cf_udiv_make((uint32_t)max(tpi, 1));
            }
            __syncthreads();
            /* tap tp: row tap a, column tap b (split mode: column phase 0's taps first, then phase 1's) */
            auto tap_ab = [&](int tp, int &a, int &b, int &cd) {
                cd = 1;
                if (SPLIT && tp >= sh_ntaps0) {
                    tp -= sh_ntaps0;
                    cd = NTD - 1;
                }
                a = tp / sh_nt[cd];
                b = tp - a * sh_nt[cd];
            };
            for (int tp = threadIdx.x; tp < sh_ntaps; tp += blockDim.x) {
                int a, b, cd;
                tap_ab(tp, a, b, cd);
                s.tap_dh[tp] = sh_c[0][a];
                s.tap_dw[tp] = sh_c[cd][b];
                s.tap_widx[tp] = sh_k[0][a] * p.kw + sh_k[cd][b];
            }
            if (PATCH != 0) { /* the patch main loop's step table (bytes; see ig_patch_feed) */
                const int C = p.pk_cps, ns = cf_ig_patch_steps(C, sh_ntaps);
                auto toff = [&](int tp) {
                    int a, b, cd;
                    tap_ab(tp, a, b, cd);
                    return ((sh_c[0][a] - sh_cmin) * C * p.pk_ld + sh_c[cd][b]) * 4;
                };
                for (int st = threadIdx.x; st < ns; st += blockDim.x) {
                    const int lo = toff(C == 8 ? st : 2 * st);
                    const int hi = C == 8 ? lo + p.pk_ld * 4 : 2 * st + 1 < sh_ntaps ? toff(2 * st + 1) : 1;
                    s.step_off[st] = make_int2(lo, hi);
                }
            }
            __syncthreads();
            ntaps = sh_ntaps;
            ntaps0 = sh_ntaps0;
            pk_cmin = sh_cmin;
            pk_rows = sh_rows;
            if (p.resident) {
                if constexpr (WG) {
                    ig_load_b_wg<NT, PASSES>(p, s, ntaps,
                                             PATCH != 0 ? p.pk_kc * cf_ig_patch_steps(p.pk_cps, ntaps)
                                                        : ntaps * p.kc,
                                             SPLIT ? (int)rank * NT * 8 : 0, SPLIT ? NT : p.nt_total,
                                             SPLIT ? 1 : p.nchunk);
                    fence_proxy_async(); /* generic-proxy stores -> the tensor core's async proxy */
                } else {
                    ig_load_b<PASSES>(p, s, 0, ntaps * p.kc, 0, p.nt_total);
                }
                __syncthreads();
            }
        }

        /* N*PH*PW < 2^31 per phase (checked on the host): 32-bit pixel arithmetic. Pixels run over the phase
         * grid of all images; in patch mode each image starts a new tile, and m counts within image t_img. */
        const int tl = tile - p.tile_start[grp];
        constexpr bool patch = PATCH != 0; /* the host launches these variants iff p.patch */
        const cf_udiv_t dpw = sh_div[0], dtpi = sh_div[1];
        const int t_img = patch ? (int)cf_udiv((uint32_t)tl, dtpi) : 0;
        const int m_tile = patch ? (tl - t_img * tpi) * TM : tl * TM;
        const int m0 = m_tile + warp * 16 * MT;
        const int mq = patch ? ph * pw : p.n * ph * pw;
        /* this thread's pixels. The patch main loop needs none of it: built after the main loop in the TF32 patch
         * variants, whose spills that cut at 4 warpgroups (ptxas: NT=16 76 -> 44 bytes; the 3xTF32 ones 0 -> 40). */
        constexpr bool late_px = patch && PASSES == 1;
        ig_pixels<MT> px;
        auto make_px = [&]() {
#pragma unroll
            for (int r = 0; r < 2 * MT; ++r) {
                const int m = m0 + (r >> 1) * 16 + (r & 1) * 8 + g;
                const int mm = m < mq ? m : 0;
                const int img = patch ? t_img : mm / (ph * pw);
                const int rem = mm - (patch ? 0 : img * ph * pw);
                const int j = (int)cf_udiv((uint32_t)rem, dpw), i = rem - j * pw;
                px.img[r] = (m < mq && qw + p.sw * i < p.ow) ? img : -1;
                px.ihb[r] = a_h * j;
                px.iwb[r] = a_w * i;
                px.src_img[r] = p.src + (int64_t)img * p.cin * p.h * p.w;
            }

            {   /* the pixel this lane stores: warp pixel lane % (16*MT); split mode: pair lane / 2, column phase
                   lane % 2 (ig_store_split) */
                const int m = m0 + (SPLIT ? lane >> 1 : lane % (16 * MT)), cq = SPLIT ? lane & 1 : qw;
                const int mm = m < mq ? m : 0;
                const int img = patch ? t_img : mm / (ph * pw), rem = mm - (patch ? 0 : img * ph * pw);
                const int j = (int)cf_udiv((uint32_t)rem, dpw), i = rem - j * pw;
                px.st_ok = m < mq && cq + p.sw * i < p.ow;
                px.st_ptr = p.dst + (int64_t)img * p.cout * p.oh * p.ow + ((qh + p.sh * j) * p.ow + (cq + p.sw * i));
            }
        };
        /* the TMA store takes its pixels from the tile (ig_store_tma): only the statistics need px then */
        const bool need_px = !patch || SPLIT || STATS || !p.tma_store;
        if constexpr (!late_px)
            if (need_px)
                make_px();
        /* TMA, one main loop per tile: the ring starts the next tile's first stage (same phase group, so the same
         * taps and patch geometry) during this tile */
        auto next_stage = [&](bool allowed, int &nx_img, int &nx_iy0) {
            nx_img = -1;
            nx_iy0 = 0;
            if (PATCH == 2 && allowed && p.pk_prefetch && ntaps > 0 && tile + t_step < t_end &&
                tile + t_step < p.tile_start[grp + 1]) {
                const int tn = tl + t_step;
                nx_img = (int)cf_udiv((uint32_t)tn, dtpi);
                const int mb = min((tn - nx_img * tpi) * TM + (warp >> 2) * 64, ph * pw - 1);
                nx_iy0 = a_h * (int)cf_udiv((uint32_t)mb, dpw) + pk_cmin;
            }
        };
        if constexpr (SPLIT) { /* this CTA's channel half (chunk = rank) of both column phases */
            float acc[2][NT][4]; /* column phases 0 and 1: the epilogue treats them as two m16 tiles (MT = 2) */
            int nx_img, nx_iy0;
            next_stage(true, nx_img, nx_iy0);
            ig_patch_feed<PATCH == 2> feed(p, s, t_img, m_tile + (warp >> 2) * 64, ph, pw, dpw, pk_cmin, pk_rows, ntaps,
                                           pk_first, pk_ring, pk_pre, nx_img, nx_iy0);
            ig_mainloop_split<NT, PATCH == 2>(p, s, feed, ntaps0, *reinterpret_cast<float(*)[1][NT][4]>(&acc[0]),
                                              *reinterpret_cast<float(*)[1][NT][4]>(&acc[1]));
            pk_pre = nx_img >= 0;
            make_px();
            const int chunk = (int)rank, pre_end = p.softmax_stage >= 0 ? p.softmax_stage : p.nstage;
            ig_apply_stages<NT, 2>(p, s, 0, pre_end, chunk, acc); /* one table read for both phases */
            if (p.softmax_stage >= 0) {
                float sm[4], sl[4];
                ig_chunk_softmax_stats<NT, 2, true>(p, chunk, acc, sm, sl);
                ig_split_softmax<NT>(s, x_bars, x_peer, x_k++, sm, sl, acc);
                ig_apply_stages<NT, 2>(p, s, pre_end + 1, p.nstage, chunk, acc);
            }
            ig_store_split<NT>(p, s, px, chunk, acc);
            continue;
        }
        /* One code path for both softmax cases (a second inlined copy of the main loop and epilogue
         * doubled the code). With all of C_out in one chunk the softmax uses the chunk's own max/sum;
         * otherwise visit 0 accumulates an online max/sum over the chunks and visit 1 recomputes and writes. */
        float acc[MT][NT][4];
        const int pre_end = p.softmax_stage >= 0 ? p.softmax_stage : p.nstage;
        const bool two_visits = p.softmax_stage >= 0 && p.nchunk > 1;
        float m[2 * MT], l[2 * MT];
#pragma unroll
        for (int r = 0; r < 2 * MT; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.f;
        }
        for (int visit = two_visits ? 0 : 1; visit < 2; ++visit) {
            for (int chunk = 0; chunk < p.nchunk; ++chunk) {
                if constexpr (WG) {
                    if constexpr (patch) {
                        int nx_img, nx_iy0;
                        next_stage(p.nchunk == 1 && !two_visits, nx_img, nx_iy0);
                        ig_patch_feed<PATCH == 2> feed(p, s, t_img, m_tile + (warp >> 2) * 64, ph, pw, dpw, pk_cmin, pk_rows,
                                                       cf_ig_patch_steps(p.pk_cps, ntaps), pk_first, pk_ring,
                                                       pk_pre, nx_img, nx_iy0);
                        ig_mainloop_patch<NT, PASSES, PATCH == 2>(p, s, feed, chunk, acc);
                        pk_pre = nx_img >= 0;
                        if constexpr (late_px)
                            if (need_px)
                                make_px();
                    } else {
                        ig_ring_feed feed(p, s, px, ntaps * p.kc);
                        ig_mainloop_wg<NT, PASSES>(p, s, feed, ntaps * p.kc, chunk, acc);
                    }
                } else
                    ig_mainloop<NT, PASSES, MT>(p, s, px, ntaps, chunk, acc);
                /* the TMA store without a softmax applies the epilogue slice by slice (ig_store_tma_slices) */
                const bool late = WG && NT <= 8 && !STATS && p.tma_store && p.softmax_stage < 0 && (CF_IG_ABLATE & 8) == 0;
                if ((CF_IG_ABLATE & 8) == 0 && !late)
                    ig_apply_stages<NT, MT>(p, s, 0, pre_end, chunk, acc);
                if ((CF_IG_ABLATE & 8) == 0 && p.softmax_stage >= 0) {
                    float cm[2 * MT], cl[2 * MT];
                    if (!two_visits) /* KEEP a compile-time flag: a runtime one cost an FSEL per value */
                        ig_chunk_softmax_stats<NT, MT, true>(p, chunk, acc, cm, cl);
                    else if (visit == 0)
                        ig_chunk_softmax_stats<NT, MT, false>(p, chunk, acc, cm, cl);
                    if (visit == 0) {
#pragma unroll
                        for (int r = 0; r < 2 * MT; ++r) {
                            const float nm = cf_max_nan(m[r], cm[r]);
                            l[r] = (m[r] == -INFINITY ? 0.f : l[r] * cf_ex2((m[r] - nm) * CF_LOG2E)) +
                                   cl[r] * cf_ex2((cm[r] - nm) * CF_LOG2E);
                            m[r] = nm;
                        }
                        continue;
                    }
                    if (two_visits)
                        ig_softmax_apply<NT, MT>(m, l, acc);
                    else
                        ig_softmax_scale<NT, MT>(cl, acc);
                    ig_apply_stages<NT, MT>(p, s, pre_end + 1, p.nstage, chunk, acc);
                }
                if constexpr (STATS)
                    ig_tile_stats<NT, MT>(p, s, px, chunk, acc);
                if constexpr (WG && NT <= 8 && !STATS) {
                    if (p.tma_store) {
                        ig_store_tma<NT>(p, s, m_tile + (warp >> 2) * 64, t_img, chunk, acc, late);
                        continue;
                    }
                }
                if (!STATS || p.stats_mode != 1)
                    ig_store<NT, MT>(p, s, px, chunk, acc);
            }
        }
    }

    if (p.tma_store && (threadIdx.x & 127) == 0) /* the last bulk stores are done before the CTA leaves */
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    /* split mode paces nothing: each CTA writes whole rows, and the exchange's waits order every access to the
     * peer's shared memory before either CTA can leave */
    if (!SPLIT && p.cluster > 1 && t_end > t_begin)
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");

    if (STATS) {
        __syncthreads();
        float *out = p.stats + (size_t)blockIdx.x * p.nt_total * 8 * 3;
        const int cpad = p.nt_total * 8;
        for (int c = threadIdx.x; c < cpad; c += blockDim.x) {
            int na = 0;
            float ma = 0.f, qa = 0.f;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) { /* fixed order: deterministic */
                const int nb = s.run_cnt[w];
                if (nb == 0)
                    continue;
                const float mb = s.run_mean[w * cpad + c], qb = s.run_m2[w * cpad + c];
                const int n = na + nb;
                const float d = mb - ma;
                ma += d * ((float)nb / n);
                qa += qb + d * d * ((float)na * (float)nb / n);
                na = n;
            }
            out[c * 3] = __int_as_float(na);
            out[c * 3 + 1] = ma;
            out[c * 3 + 2] = qa;
        }
    }
}

/* In-place epilogue over a stored tensor (the "store, then normalise" batch-norm path): one block per
 * (n, c) plane at a time, chain stages folded for that channel, float4 accesses when the plane allows. */
__global__ void __launch_bounds__(256) cf_ig_inplace_kernel(const __grid_constant__ cf_ig_params p)
{
    const int64_t plane = (int64_t)p.oh * p.ow, planes = (int64_t)p.n * p.cout;
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const int c = (int)(pl % p.cout);
        float2 tab[CF_CHAIN_MAX_OPS + 1];
        for (int st = 0; st < p.nstage; ++st) {
            const cf_ig_stage &sg = p.stage[st];
            double a = 1.0, b = 0.0;
            for (int o = sg.op_begin; o < sg.op_end; ++o)
                cf_epi_fold_affine(p.op[o], c, &a, &b);
            const double pre = sg.kind == CF_IG_AFFINE_SIGMOID ? -1.4426950408889634 : 1.0;
            tab[st] = make_float2((float)(a * pre), (float)(b * pre));
        }
        float *y = p.dst + pl * plane;
        auto apply = [&](float x) {
            for (int st = 0; st < p.nstage; ++st) {
                const int k = p.stage[st].kind;
                if (k == CF_IG_AFFINE)
                    x = fmaf(x, tab[st].x, tab[st].y);
                else if (k == CF_IG_AFFINE_SIGMOID)
                    x = cf_rcp(1.f + cf_ex2(fmaf(x, tab[st].x, tab[st].y)));
                else if (k == CF_IG_SIGMOID)
                    x = cf_sigmoid(x);
                else if (k == CF_IG_RELU)
                    x = cf_relu(x);
                else if (k == CF_IG_TANH)
                    x = cf_tanh(x);
                else if (k == CF_IG_GELU)
                    x = cf_gelu(x);
            }
            return x;
        };
        if (plane % 4 == 0) {
            float4 *y4 = reinterpret_cast<float4 *>(y);
            for (int64_t i = threadIdx.x; i < plane / 4; i += blockDim.x) {
                float4 v = y4[i];
                v.x = apply(v.x);
                v.y = apply(v.y);
                v.z = apply(v.z);
                v.w = apply(v.w);
                y4[i] = v;
            }
        } else {
            for (int64_t i = threadIdx.x; i < plane; i += blockDim.x)
                y[i] = apply(y[i]);
        }
    }
}

} // namespace cf

#endif
