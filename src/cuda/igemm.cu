/* Host side of the fused implicit GEMM: plan -> kernel parameters, variant choice, launches, and the
 * batch-norm statistics finalize kernel. Dispatch entries live in backend.cu. */
#include "bn_gram.cuh"
#include "bn_gram_host.h"
#include "igemm_kernel.cuh"
#include "igemm_host.h"
#include "pdl.cuh"
#include "stages_host.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

/* Measured choice between the two training batch-norm paths (docs/kb2_73.md). */
#define CF_IG_BN_INPLACE_DEFAULT false
/* Cluster pacing interval (tiles); CONVFUSE_IG_PACE overrides it for measurement. */
#define CF_IG_PACE_DEFAULT 1


/* ---- variants: NT (n8 tiles per channel chunk) x products (1 = TF32, 3 = 3xTF32, 2 = 2xTF32 statistics) ---- */

typedef void (*ig_kernel_fn)(const cf_ig_params);

struct ig_variant {
    int nt, passes, stats, wg, patch, split;
    ig_kernel_fn fn;
};

/* One CTA per SM, every variant takes the full register file. */
#define CF_IG_VARIANT(nt, pa, st, wg, pk, sp) {nt, pa, st, wg, pk, sp, cf::cf_ig_kernel<nt, pa, st, wg, pk, sp>}
#define CF_IG_VARIANTS_S(st, wg, pk)                                                                              \
    CF_IG_VARIANT(4, 1, st, wg, pk, false), CF_IG_VARIANT(8, 1, st, wg, pk, false),                              \
        CF_IG_VARIANT(16, 1, st, wg, pk, false), CF_IG_VARIANT(4, 3, st, wg, pk, false),                         \
        CF_IG_VARIANT(8, 3, st, wg, pk, false), CF_IG_VARIANT(16, 3, st, wg, pk, false)
#define CF_IG_VARIANTS(wg, pk) CF_IG_VARIANTS_S(false, wg, pk), CF_IG_VARIANTS_S(true, wg, pk)
/* the batch-norm statistics pass on wgmma with the input patch: 2xTF32 (cf_ig_stats_products) */
#define CF_IG_VARIANTS_2(pk)                                                                                       \
    CF_IG_VARIANT(4, 2, true, true, pk, false), CF_IG_VARIANT(8, 2, true, true, pk, false),                        \
        CF_IG_VARIANT(16, 2, true, true, pk, false)
/* mma.sync (8 warps x 32 pixels, any B), wgmma (CF_IG_WGS warpgroups x 64 pixels, B resident) with the per-thread
 * gather, and wgmma with the input patch by cp.async or by TMA (own variants: the other feeds' registers are compiled
 * out; the NT=16 body is at the 128-register cap, where every live value costs a spill), each with and without the
 * batch-norm statistics epilogue */
static const ig_variant ig_variants[] = {CF_IG_VARIANTS(false, 0),
                                         CF_IG_VARIANTS(true, 0),
                                         CF_IG_VARIANTS(true, 1),
                                         CF_IG_VARIANTS(true, 2),
                                         CF_IG_VARIANTS_2(1),
                                         CF_IG_VARIANTS_2(2),
                                         /* split mode (igemm.cuh): 64 channels per CTA, TF32, the patch */
                                         CF_IG_VARIANT(8, 1, false, true, 1, true),
                                         CF_IG_VARIANT(8, 1, false, true, 2, true)};
#define CF_IG_MAX_BLOCKS_PER_SM 2

static ig_kernel_fn ig_pick(int nt, int passes, int stats, int wg, int patch, int split)
{
    for (size_t i = 0; i < sizeof ig_variants / sizeof ig_variants[0]; ++i)
        if (ig_variants[i].nt == nt && ig_variants[i].passes == passes && ig_variants[i].stats == stats &&
            ig_variants[i].wg == wg && ig_variants[i].patch == patch && ig_variants[i].split == split)
            return ig_variants[i].fn;
    return NULL;
}

/* ---- geometry ------------------------------------------------------------------------------------------ */

static int ig_taps_host(int transposed, int q, int stride, int pad, int dil, int k)
{
    int n = 0;
    for (int kk = 0; kk < k; ++kk) {
        if (transposed) {
            const int num = q + pad - kk * dil;
            if (((num % stride) + stride) % stride == 0)
                ++n;
        } else {
            ++n;
        }
    }
    return n;
}

int cf_env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    const int x = atoi(v);
    return x < lo ? lo : x > hi ? hi : x;
}

/* Offsets c of the taps of phase q along one dimension (input index = a*j + c), as ig_taps_1d on the device. */
static int ig_tap_offsets_host(int transposed, int q, int stride, int pad, int dil, int k, int *cmin, int *cmax)
{
    int n = 0;
    for (int kk = 0; kk < k; ++kk) {
        int c;
        if (transposed) {
            const int num = q + pad - kk * dil;
            if (((num % stride) + stride) % stride != 0)
                continue;
            c = num / stride;
        } else {
            c = kk * dil - pad;
        }
        *cmin = n == 0 ? c : (c < *cmin ? c : *cmin);
        *cmax = n == 0 ? c : (c > *cmax ? c : *cmax);
        ++n;
    }
    return n;
}

/* Whether TMA boxes can carry the patch stages: contiguous rows (a_h = 1), 16-byte row strides in the tensor map
 * (W a multiple of 4), at most 256 elements per box dimension */
static bool ig_patch_tma_possible(const cf_ig_params *p)
{
    return (p->transposed || p->stride_h == 1) && p->w % 4 == 0 && p->pk_ld <= 256 && p->pk_rows <= 256;
}

/* Input-patch geometry (see ig_patch_feed): row stride, column gap and floats per stage buffer. False when the
 * shape does not suit it: strided columns (conv2d stride_w > 1), or a column halo wider than 64. */
static bool ig_patch_geometry(cf_ig_params *p)
{
    const int a_h = p->transposed ? 1 : p->stride_h, a_w = p->transposed ? 1 : p->stride_w;
    if (a_w != 1)
        return false;
    /* cp.async copies of 16 bytes where rows allow (W a multiple of 4), else 8 or 4: an odd width took the
     * per-thread gather (H100: KB2-73 eval at 130x130 input, 0.455 ms against 0.30 at 128x128).
     * CONVFUSE_IG_PATCH_VEC=1|2|4 narrows the copies (testing). */
    p->pk_vec = p->w % 4 == 0 ? 4 : p->w % 2 == 0 ? 2 : 1;
    const int vec_env = cf_env_int("CONVFUSE_IG_PATCH_VEC", 4, 1, 4);
    while (p->pk_vec > vec_env)
        p->pk_vec /= 2;
    int left = 0, right = 0, nr_max = 0;
    for (int q = 0; q < p->nphase; ++q) {
        const int qh = q / p->sw, qw = q % p->sw;
        int hmin = 0, hmax = 0, wmin = 0, wmax = 0;
        const int nh = ig_tap_offsets_host(p->transposed, qh, p->stride_h, p->pad_h, p->dil_h, p->kh, &hmin, &hmax);
        const int nw = ig_tap_offsets_host(p->transposed, qw, p->stride_w, p->pad_w, p->dil_w, p->kw, &wmin, &wmax);
        if (nh == 0 || nw == 0)
            continue; /* no taps: the main loop reads nothing */
        const int ph = (p->oh - qh + p->sh - 1) / p->sh;
        const int pw = p->cluster > 1 ? p->pw_pairs : (p->ow - qw + p->sw - 1) / p->sw;
        if (-wmin > left)
            left = -wmin;
        if (pw - 1 + wmax - (p->w - 1) > right)
            right = pw - 1 + wmax - (p->w - 1);
        const int rows = hmax - hmin + 1, ss = a_h < rows ? a_h : rows;
        int slots = 63 / pw + 2; /* phase rows a run of 64 consecutive pixels can touch */
        if (slots > ph)
            slots = ph;
        const int nr = (slots - 1) * ss + rows;
        if (nr > nr_max)
            nr_max = nr;
    }
    int gap = (left > right ? left : right);
    gap = (gap + 3) / 4 * 4;
    if (gap > 64)
        return false;
    /* Channels per stage: 8 (a k8 step = one tap, channels 2t and 2t+1 of a thread in adjacent rows) with one
     * ring slot, or 4 (a k8 step = two taps, channel t) with two slots in the same shared memory, so that the
     * next stage lands while this one is multiplied. The two-slot ring measured slower (H100: KB2-91 2.23 against
     * 1.99 ms on TMA, 2.05 against 1.84 on cp.async; KB2-73 eval 0.395 against 0.358): the per-stage wait was
     * not what bounds these blocks, and it doubles the stages. 8 by default; CONVFUSE_IG_PATCH_CPS=4 for the ring. */
    p->pk_cps = cf_env_int("CONVFUSE_IG_PATCH_CPS", 8, 4, 8) == 4 ? 4 : 8;
    p->pk_kc = (p->cin + p->pk_cps - 1) / p->pk_cps;
    /* CONVFUSE_IG_PATCH_SLOTS=2 gives 8-channel stages a second ring slot too (next stage in flight during this one) */
    p->pk_stages = p->pk_cps == 4 ? 2 : cf_env_int("CONVFUSE_IG_PATCH_SLOTS", 1, 1, 2);
    /* a warp's A reads (8 pixels x channel rows 2t, or t) hit 32 distinct banks when the rows of its 4 lanes t
     * are 8 banks apart: ld = 4 or 12 mod 16 with 8 channels per stage, 8 mod 16 with 4. The gap grows in steps of
     * the copy width, which keeps every row's copies aligned (and reaches those ld from any W: pk_vec divides W) */
    while (p->pk_cps == 8 ? (p->w + gap) % 8 != 4 : (p->w + gap) % 16 != 8)
        gap += p->pk_vec;
    p->pk_gap = gap;
    p->pk_ld = p->w + gap;
    p->pk_drr = 128 / (p->w / p->pk_vec);
    p->pk_dch = 128 % (p->w / p->pk_vec);
    /* stage buffers 128-byte aligned (TMA destinations); the gap after the last row stays zero */
    p->pk_stage = (int)(((int64_t)gap + (int64_t)nr_max * p->pk_cps * p->pk_ld + 31) / 32 * 32);
    p->pk_rows = nr_max;
    /* TMA (ig_patch_tma_possible). By default TMA only
     * where a tile's patch is one stage (C_in <= channels per stage): the next tile's stage then starts
     * during this tile's epilogue (KB2-73 eval 0.455 -> 0.358 ms). With several stages per tile, each one's
     * wait is exposed, and there the 16-byte cp.async copies measured faster (KB2-91: 1.84 against 1.97 ms, H100).
     * CONVFUSE_IG_TMA=0|1 forces it. */
    const int tma_env = cf_env_int("CONVFUSE_IG_TMA", -1, -1, 1);
    p->pk_tma = ig_patch_tma_possible(p) && (tma_env < 0 ? p->pk_kc == 1 : tma_env == 1);
    p->pk_prefetch = cf_env_int("CONVFUSE_IG_PREFETCH", 1, 0, 1);
    return nr_max > 0 && (int64_t)gap + (int64_t)nr_max * p->pk_cps * p->pk_ld < (1 << 20);
}

int cf_ig_products(const struct cf_plan *plan)
{
    if (plan->math == CF_MATH_STRICT_F32)
        return 3;
    if (plan->math == CF_MATH_TF32)
        return 1;
    /* Default: TF32 like PyTorch's convolutions, except batch-norm / per-channel affine chains, whose
     * division by the batch std amplifies TF32 product rounding past 1e-4 (docs/kb2_73.md). */
    for (int i = 0; i < plan->chain.length; ++i)
        if (plan->chain.ops[i].kind == CF_OP_BATCH_NORM || plan->chain.ops[i].kind == CF_OP_AFFINE_CHANNEL)
            return 3;
    return 1;
}

/* Products of the batch-norm statistics pass (recompute path). Under CF_MATH_DEFAULT, where the chain took 3xTF32
 * for its output, the statistics take 2xTF32 on the wgmma patch path: A rounded to nearest, B split. Its rounding
 * error is unbiased and uncorrelated with the output, so the mean and variance stay at fp32 accuracy (measured in
 * docs/kb2_73.md). Strict fp32 keeps 3xTF32 everywhere; CONVFUSE_BN_STATS_PRODUCTS=3 forces it for comparison. */
static int cf_ig_stats_products(const struct cf_plan *plan, const cf_ig_params *p, int passes)
{
    /* The dropped product's error averages out over the values of a channel, so only where there are many: at
     * N*OH*OW = 105 (3x5x9x8 input, k3) 2xTF32 statistics put the output 3.6e-4 off float64, 3xTF32 4.6e-6
     * (H100, tests/gpu/test_modules_cuda.py's small shape). From 2^16 values on, 2xTF32: the error falls as
     * 1/sqrt(count), ~1.4e-5 at KB2-73's 2.0 M. */
    const int64_t count = (int64_t)p->n * p->oh * p->ow;
    if (passes != 3 || plan->math == CF_MATH_STRICT_F32 || !p->wg || !p->patch || count < 65536)
        return passes;
    const char *env = getenv("CONVFUSE_BN_STATS_PRODUCTS");
    return env && strcmp(env, "3") == 0 ? 3 : 2;
}

bool cf_ig_bn_inplace(const struct cf_plan *plan)
{
    /* "store, then normalise in place" needs every op after the batch norm to be per element */
    const int bn = cf_ig_bn_train_index(plan);
    for (int i = bn + 1; i < plan->chain.length; ++i)
        if (plan->chain.ops[i].kind == CF_OP_SOFTMAX_CHANNELS)
            return false;
    const char *env = getenv("CONVFUSE_BN_PATH");
    if (env && strcmp(env, "inplace") == 0)
        return true;
    if (env && strcmp(env, "recompute") == 0)
        return false;
    return CF_IG_BN_INPLACE_DEFAULT;
}

int cf_ig_bn_train_index(const struct cf_plan *plan)
{
    for (int i = 0; i < plan->chain.length; ++i)
        if (plan->chain.ops[i].kind == CF_OP_BATCH_NORM && plan->chain.ops[i].bn_mode == CF_BN_TRAINING)
            return i;
    return -1;
}

/* 10*major + minor of the current device: the wgmma variant is sm_90a code, run only on 9.0 */
static int device_cc_major_minor(void)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    return 10 * major + minor;
}

/* Dynamic shared memory a kernel variant may ask for: the opt-in limit minus the kernel's static shared
 * arrays (the same in every variant). Without the subtraction, shapes whose streamed B filled the window
 * exactly failed to launch (cudaFuncSetAttribute: invalid argument; fuzz seed 1, C_out 270-290). */
static int smem_optin_bytes(void)
{
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 48 * 1024;
    /* queried once: cudaFuncGetAttributes per execute cost ~1 ms of host time (KB2-73 eval went 0.56 -> 1.55 ms).
     * The largest over the variants: the TMA ones carry their mbarriers (fuzz: launch failures near the limit when
     * only the first variant's size was subtracted). */
    static const int static_bytes = [] {
        int most = 0;
        for (size_t i = 0; i < sizeof ig_variants / sizeof ig_variants[0]; ++i) {
            cudaFuncAttributes fa;
            if (cudaFuncGetAttributes(&fa, (const void *)ig_variants[i].fn) != cudaSuccess)
                return -1;
            most = (int)fa.sharedSizeBytes > most ? (int)fa.sharedSizeBytes : most;
        }
        return most;
    }();
    if (static_bytes < 0)
        return 48 * 1024;
    return v - static_bytes;
}

/* Everything about the launch that depends only on the plan (no pointers). Writes why on failure. */
static bool ig_shape(const struct cf_plan *plan, cf_ig_params *p, int *nt_out, char *why, size_t why_size,
                     bool allow_patch)
{
    const cf_conv_desc_t *d = &plan->conv;
    memset(p, 0, sizeof *p);
    const int64_t hw = d->h * d->w, ohw = plan->oh * plan->ow;
    if (d->c_in * hw >= INT32_MAX || d->c_out * ohw >= INT32_MAX || d->kh * d->kw > CF_IG_MAX_TAPS ||
        d->n > INT32_MAX || d->c_out > 4096 || d->c_in > 65536) {
        snprintf(why, why_size, "per-image sizes past the kernel's 32-bit plane offsets or tap table "
                                "(C_in*H*W, C_out*OH*OW < 2^31, KH*KW <= %d, C_out <= 4096)", CF_IG_MAX_TAPS);
        return false;
    }
    p->n = (int)d->n; p->cin = (int)d->c_in; p->h = (int)d->h; p->w = (int)d->w; p->cout = (int)d->c_out;
    p->oh = (int)plan->oh; p->ow = (int)plan->ow; p->kh = (int)d->kh; p->kw = (int)d->kw;
    p->transposed = d->kind == CF_CONV_TRANSPOSE_2D;
    p->stride_h = (int)d->stride_h; p->stride_w = (int)d->stride_w; p->pad_h = (int)d->pad_h;
    p->pad_w = (int)d->pad_w; p->dil_h = (int)d->dil_h; p->dil_w = (int)d->dil_w;
    p->sh = p->transposed ? p->stride_h : 1;
    p->sw = p->transposed ? p->stride_w : 1;
    p->nphase = p->sh * p->sw;
    if (p->nphase > CF_IG_MAX_PHASES) {
        snprintf(why, why_size, "stride %dx%d gives %d phases (> %d)", p->stride_h, p->stride_w, p->nphase,
                 CF_IG_MAX_PHASES);
        return false;
    }
    p->cin_pad = (p->cin + 7) / 8 * 8;
    p->kc = p->cin_pad / 8;
    const int nt_need = (p->cout + 7) / 8;
    int nt = nt_need <= 4 ? 4 : nt_need <= 8 ? 8 : 16;
    p->nchunk = (nt_need + nt - 1) / nt;
    p->nt_total = p->nchunk * nt;

    int max_taps = 0, split_steps = 0;
    /* Column phases of one row phase run as a cluster over the same pixel-pair tiles (see igemm.cuh). */
    p->cluster = (p->transposed && p->sw > 1 && p->sw <= 8) ? p->sw : 1;
    p->pw_pairs = (p->ow + p->sw - 1) / p->sw;
    p->ngroup = p->cluster > 1 ? p->sh : p->nphase;
    for (int q = 0; q < p->nphase; ++q) {
        const int qh = q / p->sw, qw = q % p->sw;
        const int taps = ig_taps_host(p->transposed, qh, p->stride_h, p->pad_h, p->dil_h, p->kh) *
                         ig_taps_host(p->transposed, qw, p->stride_w, p->pad_w, p->dil_w, p->kw);
        if (taps > max_taps)
            max_taps = taps;
        if (p->sw == 2 && qw == 0) { /* split mode: a row phase's taps of both column phases */
            const int both = ig_taps_host(p->transposed, qh, p->stride_h, p->pad_h, p->dil_h, p->kh) *
                             (ig_taps_host(p->transposed, 0, p->stride_w, p->pad_w, p->dil_w, p->kw) +
                              ig_taps_host(p->transposed, 1, p->stride_w, p->pad_w, p->dil_w, p->kw));
            split_steps = both > split_steps ? both : split_steps;
        }
    }

    /* stages of the full chain (the statistics pass uses a prefix, see ig_stages) */
    int softmax = 0, bn_train = 0, ntables = 0, nstage = 0;
    bool last_affine = true; /* stage 0 is always AFFINE (conv bias + leading affine ops) */
    nstage = 1;
    ntables = 1;
    for (int i = 0; i < plan->chain.length; ++i) {
        const cf_op_kind_t k = plan->chain.ops[i].kind;
        softmax += k == CF_OP_SOFTMAX_CHANNELS;
        bn_train += k == CF_OP_BATCH_NORM && plan->chain.ops[i].bn_mode == CF_BN_TRAINING;
        if (cf_ig_is_affine_op(k)) {
            if (!last_affine) {
                ++nstage;
                ++ntables;
            }
            last_affine = true;
        } else {
            ++nstage;
            last_affine = false;
        }
    }
    if (softmax > 1 || bn_train > 1) {
        snprintf(why, why_size, "the fused kernel takes at most one softmax_channels and one training batch_norm "
                                "per chain (this one has %d and %d)", softmax, bn_train);
        return false;
    }
    p->ntables = ntables;
    (void)nstage;

    /* shared memory: B resident if the largest phase fits next to the tables and statistics */
    const int passes = cf_ig_products(plan);
    const size_t limit = (size_t)smem_optin_bytes();
    p->stats_mode = bn_train > 0; /* size the statistics buffers in */
    p->b_floats = 0;
    p->a_floats = CF_IG_RING_FLOATS;
    const size_t fixed = cf_ig_smem_bytes(p, nt);
    const size_t b_full = (size_t)max_taps * p->kc * p->nt_total * 64 * 4;
    const size_t b_wg = (passes == 3 ? 2 : 1) * b_full;
    /* Tensor-core path (docs/kb2_91.md, docs/kb2_73.md): wgmma with the input patch wherever it fits (any
     * products); otherwise wgmma with the per-thread gather for 3xTF32 (KB2-73 eval 0.50 ms against 0.70 ms on
     * mma.sync) and mma.sync for plain TF32 (that gather-bound kernel was no faster on wgmma).
     * CONVFUSE_IG_MMA=wgmma|sync and CONVFUSE_IG_PATCH=0 override. */
    const char *mma_env = getenv("CONVFUSE_IG_MMA");
    const bool force_wg = mma_env && strcmp(mma_env, "wgmma") == 0, force_sync = mma_env && strcmp(mma_env, "sync") == 0;
    const bool cc90 = !force_sync && device_cc_major_minor() == 90;
    bool patched = false;
    size_t b_patch = 0; /* B in the patch's k8 order: steps of one tap (8 channels) or two taps (4 channels) */
    if (cc90 && allow_patch && cf_env_int("CONVFUSE_IG_PATCH", 1, 0, 1) && ig_patch_geometry(p)) {
        /* Split mode (igemm.cuh, docs/kb2_91.md v12): stride-2 column phases with 64 < C_out <= 128. The column-phase
         * CTAs' stores (every other word of each sector) cost KB2-91 0.66 of its 1.72 ms (bench/ablate.sh). The
         * CTA's B: both column phases' taps x its 64 channels. Tried first; CONVFUSE_IG_SPLIT=0 turns it off. */
        const bool try_split = p->cluster == 2 && nt_need > 8 && nt_need <= 16 && p->pk_cps == 8 && passes == 1 &&
                               bn_train == 0 && split_steps <= CF_IG_MAX_TAPS && cf_env_int("CONVFUSE_IG_SPLIT", 1, 0, 1);
        const int tma0 = p->pk_tma, stages0 = p->pk_stages;
        for (int split = try_split ? 1 : 0; split >= 0 && !patched; --split) {
            int steps = cf_ig_patch_steps(p->pk_cps, max_taps), b_nt = p->nt_total;
            p->split = split;
            p->pk_tma = tma0;
            p->pk_stages = stages0;
            if (split) {
                steps = split_steps;
                b_nt = 8;
                /* its patch: stages by TMA into two ring slots where they fit (H100, KB2-91: 1.44 ms with one slot by
                 * cp.async, 1.37 TMA, 1.35 two slots, 1.29 both). CONVFUSE_IG_TMA / _PATCH_SLOTS override. */
                if (!getenv("CONVFUSE_IG_TMA"))
                    p->pk_tma = ig_patch_tma_possible(p);
                if (!getenv("CONVFUSE_IG_PATCH_SLOTS"))
                    p->pk_stages = 2;
            }
            b_patch = (passes == 3 ? 2 : 1) * (size_t)steps * p->pk_kc * b_nt * 64 * 4;
            p->a_floats = CF_IG_WGS * p->pk_stages * p->pk_stage;
            if (split && p->pk_stages == 2 && cf_ig_smem_bytes(p, nt) + b_patch > limit &&
                !getenv("CONVFUSE_IG_PATCH_SLOTS")) { /* one slot, then */
                p->pk_stages = 1;
                p->a_floats = CF_IG_WGS * p->pk_stage;
            }
            if (cf_ig_smem_bytes(p, nt) + b_patch <= limit) {
                p->patch = 1;
                patched = true;
                if (split) { /* two chunks of 8 n8 tiles: chunk = the CTA's rank */
                    nt = 8;
                    p->nchunk = 2;
                }
            }
        }
        /* 4-byte copies (odd W) pay only where the patch brings split mode: H100, same run, KB2-91 at 65x65 input
         * 2.14 ms against 2.29 on the gather; KB2-73 at 129x129 eval 0.525 against 0.515, train 1.12 against 0.99.
         * 8-byte copies pay in both (KB2-91 at 66x66 1.66 against 2.32; KB2-73 at 130x130 eval 0.419 against 0.464).
         * CONVFUSE_IG_PATCH_VEC=1 keeps them everywhere (testing). */
        if (patched && p->pk_vec == 1 && !p->split && !getenv("CONVFUSE_IG_PATCH_VEC")) {
            patched = false;
            p->patch = 0;
        }
        if (!patched) {
            p->a_floats = CF_IG_RING_FLOATS;
            p->split = 0;
        }
    }
    const bool want_wg = patched || force_wg || (!force_sync && passes == 3);
    if (patched) {
        p->resident = 1;
        p->wg = 1;
        p->b_floats = (int)(b_patch / 4);
    } else if (want_wg && cc90 && fixed + b_wg <= limit) {
        p->resident = 1;
        p->wg = 1;
        p->b_floats = (int)(b_wg / 4);
    } else if (fixed + b_full <= limit) {
        p->resident = 1;
        p->b_floats = (int)(b_full / 4);
    } else {
        const size_t per_ks = (size_t)nt * 64 * 4;
        if (fixed + per_ks > limit) {
            snprintf(why, why_size, "C_out=%d needs %zu bytes of shared memory for tables and statistics (limit %zu)",
                     p->cout, fixed + per_ks, limit);
            return false;
        }
        size_t kblk = (limit - fixed) / per_ks;
        if (kblk > 32)
            kblk = 32;
        p->resident = 0;
        p->kblk = (int)kblk;
        p->b_floats = (int)(kblk * per_ks / 4);
    }
    /* TMA store (igemm.cuh, ig_store_tma): single-phase patch tiles (consecutive pixels of one image) with a channel
     * chunk of at most 64, OH*OW a multiple of 4 (16-byte strides), where the staging boxes fit.
     * CONVFUSE_IG_TMA_STORE=0 keeps the per-warp staging and 4-byte stores. */
    p->tma_store = 0;
    p->store_parts = 1;
    if (patched && p->nphase == 1 && nt <= 8 && (int64_t)p->oh * p->ow % 4 == 0 &&
        cf_env_int("CONVFUSE_IG_TMA_STORE", 1, 0, 1)) {
        p->tma_store = 1;
        /* The boxes written and copied out in two channel halves (ig_store_tma_slices) where every other channel
         * plane starts 16 bytes into a sector (OH*OW = 4 mod 8). H100, KB2-73, same runs: eval 0.300-0.314 ->
         * 0.277-0.284 ms, train 0.466-0.481 -> 0.448-0.450; four slices 0.285-0.288 / 0.460. Sector-aligned planes
         * (130x128 input) lose by it: 0.257 -> 0.263 (one slice kept there). CONVFUSE_IG_STORE_PARTS=1|2|4 overrides. */
        const int64_t plane = (int64_t)p->oh * p->ow;
        p->store_parts = nt == 8 ? cf_env_int("CONVFUSE_IG_STORE_PARTS", plane % 8 == 4 ? 2 : 1, 1, 4) : 1;
        if (p->store_parts == 3)
            p->store_parts = 2;
        if (cf_ig_smem_bytes(p, nt) > limit)
            p->tma_store = 0;
    }
    p->stats_mode = 0;
    /* Tiles, group by group; in patch mode every image starts a new tile. */
    const int tm = p->wg ? CF_IG_WG_TILE_M : CF_IG_TILE_M; /* as the kernel's TM */
    int64_t tiles = 0;
    for (int g = 0; g < p->ngroup; ++g) {
        const int qh = p->cluster > 1 ? g : g / p->sw, qw = p->cluster > 1 ? 0 : g % p->sw;
        const int64_t ph = (p->oh - qh + p->sh - 1) / p->sh;
        const int64_t pw = p->cluster > 1 ? p->pw_pairs : (p->ow - qw + p->sw - 1) / p->sw;
        p->tile_start[g] = (int)tiles;
        if (d->n * ph * pw >= INT32_MAX - CF_IG_TILE_M) {
            snprintf(why, why_size, "more than 2^31 output pixels in one stride phase (N*PH*PW = %lld)",
                     (long long)(d->n * ph * pw));
            return false;
        }
        tiles += p->patch ? d->n * ((ph * pw + tm - 1) / tm) : (d->n * ph * pw + tm - 1) / tm;
        if (tiles >= INT32_MAX - (1 << 20)) { /* room for tile + grid stride */
            snprintf(why, why_size, "more than 2^31 pixel tiles");
            return false;
        }
    }
    p->tile_start[p->ngroup] = (int)tiles;
    p->num_tiles = (int)tiles;
    /* Tile order. One phase: interleaved across the grid (cluster c takes c, c + clusters, ...), so the grid writes
     * each output plane as one advancing front (H100, KB2-73 eval 0.330 -> 0.313 ms, train 0.677 -> 0.666). Phase
     * groups: a contiguous range per cluster (interleaved, KB2-91 went 1.29 -> 1.53 ms). CONVFUSE_IG_INTERLEAVE=0|1
     * overrides. */
    p->tile_interleave = cf_env_int("CONVFUSE_IG_INTERLEAVE", p->nphase == 1, 0, 1);
    p->pace = cf_env_int("CONVFUSE_IG_PACE", CF_IG_PACE_DEFAULT, 1, 1 << 20);
    *nt_out = nt;
    return true;
}

bool cf_ig_supports(const struct cf_plan *plan, int products, bool chunked, char *why, size_t why_size)
{
    cf_ig_params p;
    int nt = 0;
    if (!ig_shape(plan, &p, &nt, why, why_size, true))
        return false;
    if (cf_ig_products(plan) != products) {
        snprintf(why, why_size, "math mode resolves to %s products", cf_ig_products(plan) == 3 ? "3xTF32" : "TF32");
        return false;
    }
    bool softmax = false;
    for (int i = 0; i < plan->chain.length; ++i)
        softmax |= plan->chain.ops[i].kind == CF_OP_SOFTMAX_CHANNELS;
    const bool needs_chunks = softmax && p.nchunk > 1 && !p.split; /* split mode: one chunk per CTA */
    if (needs_chunks != chunked) {
        snprintf(why, why_size, needs_chunks ? "C_out=%d spans %d channel chunks: the two-visit softmax path serves it"
                                             : "C_out=%d fits one channel chunk (%d): the single-visit path serves it",
                 p.cout, p.nchunk);
        return false;
    }
    return true;
}

size_t cf_ig_workspace_bytes(const struct cf_plan *plan)
{
    if (cf_ig_bn_train_index(plan) < 0)
        return 0;
    cf_ig_params p;
    int nt = 0;
    char why[256];
    if (!ig_shape(plan, &p, &nt, why, sizeof why, true))
        return 0;
    const size_t cpad = (size_t)p.nt_total * 8;
    const size_t blocks = (size_t)plan->device_sm_count * CF_IG_MAX_BLOCKS_PER_SM;
    /* sized whether or not the Gram path runs at execution (CONVFUSE_BN_PATH / CONVFUSE_BN_STATS may change) */
    const size_t gram = cf_gram_workspace_bytes(plan, cf_ig_bn_train_index(plan));
    return (blocks * cpad * 3 + 2 * cpad) * sizeof(float) + (gram ? 16 + gram : 0);
}

/* Channel c of a training batch norm from its batch statistics over n values (mean, m2 = sum of squared
 * deviations): scale/shift of x*scale + shift, and the running statistics (unbiased variance), as
 * torch.nn.BatchNorm2d. g, b: gamma and beta; rmc, rvc: the running statistics before this batch. */
__device__ static void cf_bn_finish_channel(int c, double n, double mean, double m2, double factor, double eps, float g,
                                            float b, float rmc, float rvc, float *rm, float *rv, float *scale,
                                            float *shift)
{
    const double var = m2 / n;
    const double inv = 1.0 / sqrt(var + eps);
    const double sc = (double)g * inv;
    scale[c] = (float)sc;
    shift[c] = (float)((double)b - mean * sc);
    if (rm && rv) {
        rm[c] = (float)((1.0 - factor) * rmc + factor * mean);
        rv[c] = (float)((1.0 - factor) * rvc + factor * (n > 1 ? m2 / (n - 1) : NAN));
    }
}

/* Merge per-CTA (count, mean, M2) in fixed order, in double (deterministic); fold gamma/beta into
 * scale/shift; update the running statistics as torch.nn.BatchNorm2d does. One block, channels in chunks of its
 * threads: a warp per channel merges the partials (lanes over the CTAs, then a fixed butterfly) into shared memory,
 * then thread c finishes channel c with the parameters it loaded before the merge (one channel after another per
 * warp, each load waiting on the previous store, took ~17 us for 64 channels). Where the Gram statistics stood
 * (*single), block 0 is the Gram's and holds each channel's whole statistics: no merge. */
__global__ void __launch_bounds__(1024) cf_bn_finalize_kernel(const float *stats, int nblocks, const int *single,
                                                              int cpad, int cout, double eps, double momentum,
                                                              const float *gamma, const float *beta, float *rm,
                                                              float *rv, int64_t *nbt, float *scale, float *shift)
{
    __shared__ double part[3][1024]; /* this chunk's merged (n, mean, m2) */
    __shared__ double factor;
    cf::cf_grid_release();
    int64_t batches = 0; /* num_batches_tracked: no kernel of this chain before this one writes it */
    if (threadIdx.x == 0 && nbt)
        batches = *nbt;
    cf::cf_grid_wait();
    const bool gram = single && *single;
    if (threadIdx.x == 0) { /* the running statistics' factor: momentum, or 1/count for a cumulative average */
        double f = momentum;
        if (nbt) {
            *nbt = batches + 1;
            if (momentum < 0)
                f = 1.0 / (double)(batches + 1);
        }
        factor = f;
    }
    const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
    for (int c0 = 0; c0 < cout; c0 += blockDim.x) {
        const int c = c0 + threadIdx.x;
        float g = 1.f, b = 0.f, rmc = 0.f, rvc = 0.f;
        if (c < cout) {
            g = gamma ? gamma[c] : 1.f;
            b = beta ? beta[c] : 0.f;
            if (rm && rv) {
                rmc = rm[c];
                rvc = rv[c];
            }
        }
        if (!gram) {
            for (int cc = c0 + (threadIdx.x >> 5); cc < min(cout, c0 + (int)blockDim.x); cc += nwarp) {
                double n = 0, mean = 0, m2 = 0;
                for (int blk = lane; blk < nblocks; blk += 32) {
                    const float *s = stats + ((size_t)blk * cpad + cc) * 3;
                    const double nb = (double)__float_as_int(s[0]);
                    if (nb == 0)
                        continue;
                    const double mb = s[1], qb = s[2];
                    const double nn = n + nb, delta = mb - mean;
                    mean += delta * nb / nn;
                    m2 += qb + delta * delta * n * nb / nn;
                    n = nn;
                }
                for (int o = 1; o < 32; o <<= 1) {
                    const double nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o),
                                 qb = __shfl_xor_sync(0xffffffffu, m2, o);
                    /* both partners combine (lower lane first) so every lane ends with the same bits */
                    const bool low = (lane & o) == 0;
                    const double n1 = low ? n : nb, m1 = low ? mean : mb, q1 = low ? m2 : qb;
                    const double n2 = low ? nb : n, mm2 = low ? mb : mean, q2 = low ? qb : m2;
                    const double nn = n1 + n2;
                    if (nn > 0) {
                        const double delta = mm2 - m1;
                        mean = m1 + delta * (n2 / nn);
                        m2 = q1 + q2 + delta * delta * (n1 * n2 / nn);
                    } else {
                        mean = 0;
                        m2 = 0;
                    }
                    n = nn;
                }
                if (lane == 0) {
                    part[0][cc - c0] = n;
                    part[1][cc - c0] = mean;
                    part[2][cc - c0] = m2;
                }
            }
        }
        __syncthreads(); /* the merged statistics, and the factor */
        if (c < cout) {
            double n, mean, m2;
            if (gram) {
                const float *s = stats + (size_t)c * 3;
                n = (double)__float_as_int(s[0]);
                mean = s[1];
                m2 = s[2];
            } else {
                n = part[0][threadIdx.x];
                mean = part[1][threadIdx.x];
                m2 = part[2][threadIdx.x];
            }
            cf_bn_finish_channel(c, n, mean, m2, factor, eps, g, b, rmc, rvc, rm, rv, scale, shift);
        }
        __syncthreads(); /* before the next chunk's merge overwrites part */
    }
}

/* What a launch needs to know about its kernel variant at one dynamic shared-memory size on one device: how many
 * clusters (CTAs when cluster = 1) fit the device at once. Queried once per (variant, smem, cluster, device): the
 * occupancy queries and cudaFuncSetAttribute, on every call, were host time that a batch-1 call spends before its
 * kernel starts (bench/latency.py). The first fact of a variant on a device sets its shared-memory attribute to the
 * most any launch may ask for (smem_optin_bytes), so every later size is launchable without setting it again. */
struct ig_launch_fact {
    ig_kernel_fn fn;
    int dev, cluster, clusters;
    size_t smem;
};
static std::mutex ig_facts_mu;
static ig_launch_fact ig_facts[256];
static int ig_nfacts;

/* Drop what is cached for a variant on a device (a launch failed: e.g. cudaDeviceReset cleared its attribute) */
static void ig_launch_forget(ig_kernel_fn fn, int dev)
{
    std::lock_guard<std::mutex> lock(ig_facts_mu);
    for (int i = 0; i < ig_nfacts; ++i)
        if (ig_facts[i].fn == fn && ig_facts[i].dev == dev)
            ig_facts[i--] = ig_facts[--ig_nfacts];
}

/* cfg: the launch's configuration (block, shared memory, cluster attribute); its grid is used for the query */
static cf_status_t ig_launch_clusters(ig_kernel_fn fn, cudaLaunchConfig_t cfg, int cluster, int sm_count, int nt,
                                      int *clusters_out)
{
    const int threads = (int)cfg.blockDim.x;
    const size_t smem = cfg.dynamicSmemBytes;
    int dev = 0;
    CF_CUDA_TRY(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(ig_facts_mu);
    bool attr_set = false; /* a fact of this variant on this device exists: its attribute is at the maximum */
    for (int i = 0; i < ig_nfacts; ++i) {
        if (ig_facts[i].fn != fn || ig_facts[i].dev != dev)
            continue;
        if (ig_facts[i].smem == smem && ig_facts[i].cluster == cluster) {
            *clusters_out = ig_facts[i].clusters;
            return CF_STATUS_SUCCESS;
        }
        attr_set = true;
    }
    if (!attr_set)
        CF_CUDA_TRY(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_optin_bytes()));
    /* persistent grid: as many clusters (CTAs) as can be resident at once */
    int per_sm = 0;
    CF_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)fn, threads, smem));
    if (per_sm < 1)
        return cf_error(CF_STATUS_INTERNAL_ERROR, "kernel NT=%d does not fit an SM with %zu bytes of smem", nt, smem);
    if (per_sm > CF_IG_MAX_BLOCKS_PER_SM)
        per_sm = CF_IG_MAX_BLOCKS_PER_SM;
    int clusters = sm_count * per_sm / cluster;
    if (cluster > 1) {
        cfg.gridDim = dim3((unsigned)(clusters * cluster));
        int active = 0;
        CF_CUDA_TRY(cudaOccupancyMaxActiveClusters(&active, (void *)fn, &cfg));
        if (active < 1)
            return cf_error(CF_STATUS_INTERNAL_ERROR, "no cluster of %d CTAs with %zu bytes of smem fits the device",
                            cluster, smem);
        clusters = active;
    }
    if (ig_nfacts < (int)(sizeof ig_facts / sizeof ig_facts[0]))
        ig_facts[ig_nfacts++] = {fn, dev, cluster, clusters, smem};
    *clusters_out = clusters;
    return CF_STATUS_SUCCESS;
}

/* pdl: launched with programmatic dependent launch (pdl.cuh): only a kernel that follows another of the same chain */
static cf_status_t ig_launch(const cf_ig_params *p, int nt, int passes, int sm_count, int max_grid,
                             cudaStream_t stream, int *grid_out, bool pdl = false)
{
    ig_kernel_fn fn = ig_pick(nt, passes, p->stats_mode != 0, p->wg, p->patch ? (p->pk_tma ? 2 : 1) : 0, p->split);
    const int threads = p->wg ? CF_IG_WGS * 128 : CF_IG_THREADS;
    if (!fn)
        return cf_error(CF_STATUS_INTERNAL_ERROR, "no kernel variant NT=%d products=%d", nt, passes);
    const size_t smem = cf_ig_smem_bytes(p, nt);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)p->cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cf_status_t st = ig_launch_clusters(fn, cfg, p->cluster, sm_count, nt, &clusters);
    if (st != CF_STATUS_SUCCESS)
        return st;
    /* at most one cluster per tile */
    if (max_grid > 0 && clusters * p->cluster > max_grid)
        clusters = max_grid / p->cluster;
    if (clusters > p->num_tiles)
        clusters = p->num_tiles;
    const int grid = clusters * p->cluster;
    cfg.gridDim = dim3((unsigned)grid);
    cfg.numAttrs = pdl ? 2 : 1; /* the occupancy queries above take the cluster attribute only */
    if (cudaLaunchKernelEx(&cfg, fn, *p) != cudaSuccess) {
        /* once more, the shared-memory attribute set afresh (the same grid: the device did not change) */
        (void)cudaGetLastError();
        int dev = 0, again = 0;
        CF_CUDA_TRY(cudaGetDevice(&dev));
        ig_launch_forget(fn, dev);
        const cf_status_t st2 = ig_launch_clusters(fn, cfg, p->cluster, sm_count, nt, &again);
        if (st2 != CF_STATUS_SUCCESS)
            return st2;
        CF_CUDA_TRY(cudaLaunchKernelEx(&cfg, fn, *p));
    }
    CF_CUDA_TRY(cudaGetLastError());
    if (grid_out)
        *grid_out = grid;
    if (cf_verbose("launch"))
        fprintf(stderr,
                "convfuse: launch: igemm %s%s%s%s NT=%d products=%d grid=%d cluster=%d pace=%d smem=%zu resident=%d "
                "chunks=%d stats=%d patch_stages=%dx%dch tiles=%s store_parts=%d\n",
                p->wg ? "wgmma" : "mma.sync", p->patch ? (p->pk_tma ? "+patch(tma)" : "+patch(cp.async)") : "",
                p->split ? "+split(channel halves x column phases)" : "", p->tma_store ? "+tma_store" : "", nt, passes,
                grid, p->cluster, p->pace, smem, p->resident, p->nchunk, p->stats_mode, p->pk_stages, p->pk_cps,
                p->tile_interleave ? "interleaved" : "ranges", p->tma_store ? p->store_parts : 0);
    return CF_STATUS_SUCCESS;
}

/* cuTensorMapEncodeTiled, a driver function reached through the runtime (the library links no libcuda); NULL if
 * the driver has no entry point */
/* cuTensorMapEncodeTiled, a driver function reached through the runtime (the library links no libcuda); NULL if
 * the driver has no entry point */
static PFN_cuTensorMapEncodeTiled_v12000 ig_tmap_encoder(void)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            fn = NULL;
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    return encode;
}

bool cf_tmap_f32(CUtensorMap *map, const void *base, int rank, const cuuint64_t *dim, const cuuint64_t *stride,
                 const cuuint32_t *box, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = ig_tmap_encoder();
    const cuuint32_t estride[5] = {1, 1, 1, 1, 1};
    return encode && encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, (cuuint32_t)rank, (void *)base, dim, stride, box,
                            estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The input as a TMA tensor {W, C, H, N} (fastest first) with the patch box {ld, 8, rows, 1}. False: use the
 * cp.async path. */
static bool ig_encode_tmap(cf_ig_params *p)
{
    const cuuint64_t dim[4] = {(cuuint64_t)p->w, (cuuint64_t)p->cin, (cuuint64_t)p->h, (cuuint64_t)p->n};
    const cuuint64_t stride[3] = {(cuuint64_t)p->h * p->w * 4, (cuuint64_t)p->w * 4, (cuuint64_t)p->cin * p->h * p->w * 4};
    const int rows = (CF_IG_ABLATE & 32) ? (p->pk_rows + 1) / 2 : p->pk_rows; /* ablation 32: half the rows */
    const cuuint32_t box[4] = {(cuuint32_t)p->pk_ld, (cuuint32_t)p->pk_cps, (cuuint32_t)rows, 1};
    return cf_tmap_f32(&p->tmap, p->src, 4, dim, stride, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

/* The output as a TMA tensor {OH*OW, C_out, N} (fastest first) with the store box {32, 8*NT, 1}, 128-byte swizzle
 * (ig_store_tma). False: the per-warp staging stores. */
static bool ig_encode_tmap_out(cf_ig_params *p, int nt)
{
    if ((uintptr_t)p->dst % 16 != 0)
        return false;
    const cuuint64_t plane = (cuuint64_t)p->oh * p->ow;
    const cuuint64_t dim[3] = {plane, (cuuint64_t)p->cout, (cuuint64_t)p->n};
    const cuuint64_t stride[2] = {plane * 4, plane * 4 * (cuuint64_t)p->cout};
    const cuuint32_t box[3] = {32, (cuuint32_t)(nt * 8 / p->store_parts), 1};
    return cf_tmap_f32(&p->tmap_out, p->dst, 3, dim, stride, box, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

cf_status_t cf_ig_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream_ptr)
{
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    cf_ig_params p;
    int nt = 0;
    char why[256];
    if (!ig_shape(plan, &p, &nt, why, sizeof why, true))
        return cf_error(CF_STATUS_INTERNAL_ERROR, "plan no longer fits the kernel: %s", why);
    /* the patch copies are 16-byte cp.async from the input: a misaligned view takes the gathering path */
    if (p.patch && ((uintptr_t)args->src % 16 != 0) && !ig_shape(plan, &p, &nt, why, sizeof why, false))
        return cf_error(CF_STATUS_INTERNAL_ERROR, "plan no longer fits the kernel: %s", why);
    const int passes = cf_ig_products(plan);
    p.src = args->src;
    if (p.patch && p.pk_tma && !ig_encode_tmap(&p))
        p.pk_tma = 0; /* the encoder refused (or no driver entry point): the 16-byte cp.async copies */
    p.wei = args->wei;
    p.bia = plan->conv.has_bias ? args->bia : NULL;
    p.dst = args->dst;
    if (p.tma_store && !ig_encode_tmap_out(&p, nt))
        p.tma_store = 0; /* a misaligned output view, or the encoder refused */
    const int bn = cf_ig_bn_train_index(plan);
    const int cpad = p.nt_total * 8;
    float *ws_stats = (float *)workspace, *ws_scale = NULL, *ws_shift = NULL;
    if (bn >= 0) {
        const int max_blocks = plan->device_sm_count * CF_IG_MAX_BLOCKS_PER_SM;
        ws_scale = ws_stats + (size_t)max_blocks * cpad * 3;
        ws_shift = ws_scale + cpad;
        /* Two ways to train batch norm (docs/kb2_73.md): "recompute" runs the conv twice (statistics, then the
         * normalised output; nothing unnormalised in memory); "inplace" stores the conv output with its
         * statistics, then normalises in place (one conv, two more passes over the output). */
        const bool inplace = cf_ig_bn_inplace(plan);
        cf_ig_params ps = p;
        ps.tma_store = 0; /* the statistics variants store through ig_store (inplace path) or not at all */
        cf_ig_fill_stages(plan, args, 0, bn, NULL, NULL, &ps);
        ps.stats_mode = inplace ? 2 : 1;
        ps.stats = ws_stats;
        /* Statistics from the input Gram where they apply (bn_gram.cuh); the direct pass below then returns at
         * once unless the device-side guard refused them. */
        int *gram_ok = NULL;
        if (!inplace) {
            const size_t head = ((size_t)max_blocks * cpad * 3 + 2 * cpad) * sizeof(float);
            void *gram_ws = (char *)workspace + ((head + 15) & ~(size_t)15);
            const cf_status_t gs = cf_gram_launch(plan, args, bn, ps.op, gram_ws, ws_stats, stream, &gram_ok);
            if (gs != CF_STATUS_SUCCESS)
                return gs;
        }
        ps.skip_if = gram_ok;
        int grid = 0;
        /* PDL (pdl.cuh) for every kernel after the chain's first: the direct pass follows the Gram kernels where
         * they ran, the finalize the direct pass, the output pass the finalize */
        const bool pdl = cf_pdl_enabled();
        cf_status_t st = ig_launch(&ps, nt, inplace ? passes : cf_ig_stats_products(plan, &ps, passes),
                                   plan->device_sm_count, max_blocks, stream, &grid, pdl && gram_ok);
        if (st != CF_STATUS_SUCCESS)
            return st;
        const cf_op_t *o = &plan->chain.ops[bn];
        const cf_op_args_t *oa = &args->ops[bn];
        CF_CUDA_TRY(cf::cf_launch(cf_bn_finalize_kernel, dim3(1), dim3(1024), 0, stream, pdl, (const float *)ws_stats,
                                  grid, (const int *)gram_ok, cpad, p.cout, o->eps, o->momentum,
                                  (const float *)oa->channel_a, (const float *)oa->channel_b, oa->running_mean,
                                  oa->running_var, oa->num_batches_tracked, ws_scale, ws_shift));
        if (inplace) {
            cf_ig_fill_stages(plan, args, bn, plan->chain.length, ws_scale, ws_shift, &p);
            const int64_t planes = (int64_t)p.n * p.cout;
            const int blocks = (int)(planes < 8 * plan->device_sm_count ? planes : 8 * plan->device_sm_count);
            cf::cf_ig_inplace_kernel<<<blocks, 256, 0, stream>>>(p);
            CF_CUDA_TRY(cudaGetLastError());
            return CF_STATUS_SUCCESS;
        }
    }
    cf_ig_fill_stages(plan, args, 0, plan->chain.length, ws_scale, ws_shift, &p);
    return ig_launch(&p, nt, passes, plan->device_sm_count, 0, stream, NULL, bn >= 0 && cf_pdl_enabled());
}

bool cf_pdl_enabled(void)
{
    if (!cf_env_int("CONVFUSE_PDL", 1, 0, 1))
        return false;
    /* per device: 0 not asked yet, 1 sm_90 or newer, 2 older (an attribute query per launch is host time that a
       batch-1 call spends before its kernels start) */
    static std::atomic<unsigned char> capable[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return false;
    unsigned char c = capable[dev].load(std::memory_order_relaxed);
    if (c == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            return false;
        c = major >= 9 ? 1 : 2;
        capable[dev].store(c, std::memory_order_relaxed);
    }
    return c == 1;
}
