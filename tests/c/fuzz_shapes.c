/* Seeded, reproducible shape fuzzer: random valid descriptors x random chains.
 *
 *   fuzz_shapes [--backend cpu|cuda] [--count N] [--seed S] [--case K] [--max-macs M] [--wide | --convt-s2]
 *               [--verbose]
 *
 * Case K of seed S is a pure function of (S, K): `--seed S --case K` re-runs exactly the case a failure
 * names. Each case draws a descriptor (conv2d or conv_transpose2d, kernels 1-7, strides 1-3, dilations 1-3,
 * padding, PyTorch-valid output_padding, N 1-8, C_in 1-40, C_out 1-300, H/W 1-20, bias or not), shrunk until
 * its multiply-adds fit --max-macs, and a chain of 0-5 ops from the whole op list (batch_norm training or
 * inference with random momentum or cumulative, optional gamma/beta/running stats, scalars, channel vectors).
 * Inputs are uniform in [-1, 1) (never 0; weights scaled by 1/sqrt(fan_in) as torch.nn initialises them),
 * dst is poisoned with NaN and followed by a canary region that must survive.
 *
 *   --backend cpu   the CPU backend against an independent float64 oracle written here with naive loops
 *                   (a gather formula for conv_transpose2d; the library scatters): |got - want| <= 1e-6 + 1e-5|want|.
 *   --backend cuda  the CUDA backend against the CPU backend, math drawn per case:
 *                   CF_MATH_STRICT_F32, or CF_MATH_DEFAULT with batch_norm/affine (3xTF32): atol = rtol = 1e-4;
 *                   CF_MATH_DEFAULT otherwise (TF32 products): atol = rtol = 5e-3; atol times the chain's gain
 *                   (product of |mul_scalar| > 1 and gelu's 1.13). Exit 77 if CUDA is unavailable.
 *
 *   --wide          wide rows: W 24-264 (a multiple of 4 and stride 1 in 7 of 10 cases, so the input patch and
 *                   its TMA copies serve them), H 1-12: rows longer than a 64-pixel warpgroup tile, which the
 *                   default sizes (H/W 1-20) never reach. A failure's reproducer names --wide.
 *   --convt-s2      the stride-2 transposed-conv kernel's family (src/cuda/convt_s2.cuh): kernel 4, stride 2,
 *                   padding 1, output_padding 0/1, W a multiple of 4 (often of 64: the extra column), C_in 1-64,
 *                   C_out 1-128, TF32 products (CF_MATH_DEFAULT), chains without batch_norm/affine_channel (whose
 *                   3xTF32 products go to the implicit GEMM). A failure's reproducer names --convt-s2.
 *
 * Plans refused with CF_STATUS_NOT_SUPPORTED are counted and printed, not failures. BatchNorm running stats
 * and num_batches_tracked are compared too. Exit: 0 ok, 1 a case failed, 2 usage, 77 backend unavailable. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "convfuse.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CF_TEST_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_FUZZ_OPS 5
#define CANARY 64
static const float canary_value = -7777.25f;

/* ---------------------------------------------------------------------------------------------------------- */
/* PRNG: splitmix64; a case's stream is seeded from (seed, index) alone.                                      */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rng_next(rng_t *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return splitmix64(r->s);
}

/* Uniform integer in [lo, hi]. */
static int64_t rng_int(rng_t *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Uniform in [0, 1). */
static double rng_unit(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [-1, 1), never exactly 0. */
static float rng_value(rng_t *r)
{
    for (;;) {
        float v = (float)(rng_unit(r) * 2.0 - 1.0);
        if (v != 0.0f)
            return v;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* A case                                                                                                     */

typedef struct {
    cf_op_kind_t kind;
    double scalar;     /* mul_scalar, add_scalar */
    cf_bn_mode_t mode; /* batch_norm */
    double eps, momentum;
    int has_gamma, has_beta, has_stats, has_nbt;
    int64_t nbt0;
} fop_t;

typedef struct {
    cf_conv_desc_t d;
    int64_t oh, ow;
    int nops;
    fop_t ops[MAX_FUZZ_OPS];
    cf_math_t math;
    int bn_train_too_small; /* batch_norm training with n*oh*ow == 1: the plan must refuse (INVALID_SHAPE) */
} fcase_t;

/* PyTorch's output size; < 1 means empty. */
static int64_t out_size(cf_conv_kind_t kind, int64_t in, int64_t k, int64_t s, int64_t p, int64_t op, int64_t d)
{
    if (kind == CF_CONV_2D) {
        const int64_t num = in + 2 * p - d * (k - 1) - 1;
        return num < 0 ? 0 : num / s + 1;
    }
    return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

static double case_macs(const fcase_t *c)
{
    const cf_conv_desc_t *d = &c->d;
    /* transposed: every input pixel meets every tap once */
    if (d->kind == CF_CONV_TRANSPOSE_2D)
        return (double)d->n * d->c_in * d->h * d->w * d->c_out * d->kh * d->kw;
    return (double)d->n * d->c_out * c->oh * c->ow * d->c_in * d->kh * d->kw;
}

static int64_t small_biased(rng_t *r, int64_t hi)
{
    /* half the draws in the lower quarter: small sizes find edge bugs, big ones find tiling bugs */
    return rng_unit(r) < 0.5 ? rng_int(r, 1, hi / 4 > 1 ? hi / 4 : 1) : rng_int(r, 1, hi);
}

/* which shapes a run draws: the default sizes, --wide rows, or --convt-s2 (the convt_s2 kernel's family) */
typedef enum { FAMILY_DEFAULT, FAMILY_WIDE, FAMILY_CONVT_S2 } family_t;

static void gen_case(uint64_t seed, int64_t index, double max_macs, int cuda, family_t family, fcase_t *c)
{
    rng_t r = {splitmix64(seed * 0x9E3779B97F4A7C15ull + splitmix64((uint64_t)index + 1))};
    memset(c, 0, sizeof *c);
    cf_conv_desc_t *d = &c->d;
    const double kind_draw = rng_unit(&r);
    const cf_conv_kind_t kind = family == FAMILY_CONVT_S2 ? CF_CONV_TRANSPOSE_2D : kind_draw < 0.5 ? CF_CONV_2D : CF_CONV_TRANSPOSE_2D;
    const int64_t kh = rng_int(&r, 1, 7), kw = rng_unit(&r) < 0.6 ? kh : rng_int(&r, 1, 7);
    const double cu = rng_unit(&r);
    const int64_t c_out = cu < 0.5 ? rng_int(&r, 1, 16) : cu < 0.8 ? rng_int(&r, 17, 64) : rng_int(&r, 65, 300);
    cf_conv_desc_init(d, kind, rng_int(&r, 1, 8), small_biased(&r, 40), rng_int(&r, 1, 20), rng_int(&r, 1, 20), c_out,
                      kh, kw);
    d->stride_h = rng_int(&r, 1, 3);
    d->stride_w = rng_unit(&r) < 0.6 ? d->stride_h : rng_int(&r, 1, 3);
    d->dil_h = rng_unit(&r) < 0.5 ? 1 : rng_int(&r, 1, 3);
    d->dil_w = rng_unit(&r) < 0.6 ? d->dil_h : rng_int(&r, 1, 3);
    d->pad_h = rng_int(&r, 0, d->dil_h * (d->kh - 1) / 2 + 1);
    d->pad_w = rng_int(&r, 0, d->dil_w * (d->kw - 1) / 2 + 1);
    if (kind == CF_CONV_TRANSPOSE_2D) {
        /* PyTorch: output_padding < stride or < dilation */
        d->out_pad_h = rng_int(&r, 0, (d->stride_h > d->dil_h ? d->stride_h : d->dil_h) - 1);
        d->out_pad_w = rng_int(&r, 0, (d->stride_w > d->dil_w ? d->stride_w : d->dil_w) - 1);
    }
    d->has_bias = rng_unit(&r) < 0.7;
    if (family == FAMILY_CONVT_S2) { /* drawn after the rest */
        d->kind = CF_CONV_TRANSPOSE_2D;
        d->kh = d->kw = 4;
        d->stride_h = d->stride_w = 2;
        d->pad_h = d->pad_w = 1;
        d->dil_h = d->dil_w = 1;
        d->out_pad_h = rng_int(&r, 0, 1);
        d->out_pad_w = rng_unit(&r) < 0.7 ? 1 : 0;
        d->w = rng_unit(&r) < 0.4 ? 64 * rng_int(&r, 1, 3) : 4 * rng_int(&r, 1, 40);
        d->h = rng_int(&r, 1, 16);
        d->c_in = rng_int(&r, 1, 64);
        d->c_out = rng_unit(&r) < 0.6 ? rng_int(&r, 65, 128) : rng_int(&r, 1, 64);
    } else if (family == FAMILY_WIDE) { /* drawn after the rest: the default cases stay what they were */
        d->w = rng_int(&r, 24, 264);
        d->h = rng_int(&r, 1, 12);
        if (rng_unit(&r) < 0.7) {
            d->w = (d->w + 3) / 4 * 4;
            d->stride_h = d->stride_w = 1;
            d->out_pad_h = d->out_pad_w = 0; /* PyTorch: output_padding < stride or < dilation */
        }
    }

    /* Make the output non-empty: grow H/W for conv2d, shrink the padding for the transposed conv. */
    int64_t *in[2] = {&d->h, &d->w}, *pad[2] = {&d->pad_h, &d->pad_w};
    const int64_t k[2] = {d->kh, d->kw}, s[2] = {d->stride_h, d->stride_w}, dil[2] = {d->dil_h, d->dil_w},
                  op[2] = {d->out_pad_h, d->out_pad_w};
    for (int a = 0; a < 2; a++) {
        while (out_size(kind, *in[a], k[a], s[a], *pad[a], op[a], dil[a]) < 1) {
            if (kind == CF_CONV_2D && *in[a] < 20)
                (*in[a])++;
            else if (*pad[a] > 0)
                (*pad[a])--;
            else
                (*in[a])++;
        }
    }
    /* Shrink to the budget: batch, then C_in, then H/W (keeping the output non-empty), then C_out. */
    for (int guard = 0; guard < 64; guard++) {
        c->oh = out_size(kind, d->h, d->kh, d->stride_h, d->pad_h, d->out_pad_h, d->dil_h);
        c->ow = out_size(kind, d->w, d->kw, d->stride_w, d->pad_w, d->out_pad_w, d->dil_w);
        if (case_macs(c) <= max_macs)
            break;
        if (d->n > 1) {
            d->n = (d->n + 1) / 2;
            continue;
        }
        if (d->c_in > 4) {
            d->c_in = (d->c_in + 1) / 2;
            continue;
        }
        int shrunk = 0;
        for (int a = 0; a < 2 && !shrunk; a++) {
            const int64_t smaller = (*in[a] + 1) / 2;
            if (smaller < *in[a] && out_size(kind, smaller, k[a], s[a], *pad[a], op[a], dil[a]) >= 1) {
                *in[a] = smaller;
                shrunk = 1;
            }
        }
        if (shrunk)
            continue;
        if (d->c_out > 1) {
            d->c_out = (d->c_out + 1) / 2;
            continue;
        }
        if (d->c_in > 1) {
            d->c_in = (d->c_in + 1) / 2;
            continue;
        }
        break; /* minimal: accept */
    }
    if (family == FAMILY_CONVT_S2 && d->w % 4 != 0) { /* halving may have broken W = 0 mod 4 */
        d->w = d->w < 4 ? 4 : d->w / 4 * 4;
        c->oh = out_size(kind, d->h, d->kh, d->stride_h, d->pad_h, d->out_pad_h, d->dil_h);
        c->ow = out_size(kind, d->w, d->kw, d->stride_w, d->pad_w, d->out_pad_w, d->dil_w);
    }

    c->nops = (int)rng_int(&r, 0, MAX_FUZZ_OPS);
    for (int i = 0; i < c->nops; i++) {
        fop_t *o = &c->ops[i];
        o->kind = (cf_op_kind_t)rng_int(&r, 0, CF_OP_COUNT - 1);
        if (family == FAMILY_CONVT_S2 && (o->kind == CF_OP_BATCH_NORM || o->kind == CF_OP_AFFINE_CHANNEL))
            o->kind = CF_OP_ADD_CHANNEL;
        /* multiples of 1/64: printed exactly by %g */
        o->scalar = (double)rng_int(&r, -128, 128) / 64.0;
        if (o->scalar == 0.0)
            o->scalar = 0.5;
        o->mode = rng_unit(&r) < 0.6 ? CF_BN_TRAINING : CF_BN_INFERENCE;
        const double eps[3] = {1e-5, 1e-3, 0.1};
        o->eps = eps[rng_int(&r, 0, 2)];
        o->momentum = rng_unit(&r) < 0.25 ? CF_BN_MOMENTUM_CUMULATIVE : (double)rng_int(&r, 0, 16) / 16.0;
        o->has_gamma = rng_unit(&r) < 0.7;
        o->has_beta = rng_unit(&r) < 0.7;
        o->has_stats = o->mode == CF_BN_INFERENCE || rng_unit(&r) < 0.7;
        o->has_nbt = o->momentum == CF_BN_MOMENTUM_CUMULATIVE || rng_unit(&r) < 0.5;
        o->nbt0 = rng_int(&r, 0, 5);
        if (o->kind == CF_OP_BATCH_NORM && o->mode == CF_BN_TRAINING && d->n * c->oh * c->ow <= 1)
            c->bn_train_too_small = 1;
    }
    if (cuda)
        c->math = rng_unit(&r) < 0.5 && family != FAMILY_CONVT_S2 ? CF_MATH_STRICT_F32 : CF_MATH_DEFAULT;
    else
        c->math = (cf_math_t)rng_int(&r, 0, 2); /* the CPU backend ignores it; plans must accept all */
}

#ifdef CF_TEST_WITH_CUDA
/* How much the chain can amplify an absolute error of the conv output: |s| > 1 scalars and gelu's slope
 * (<= 1.13) multiply it; every other op is 1-Lipschitz or a per-channel scale in [-1, 1]. The CUDA atol
 * is scaled by it, so that mul_scalar(2) x 5 does not turn TF32 rounding into a false failure. */
static double chain_gain(const fcase_t *c)
{
    double g = 1.0;
    for (int i = 0; i < c->nops; i++) {
        if (c->ops[i].kind == CF_OP_MUL_SCALAR && fabs(c->ops[i].scalar) > 1.0)
            g *= fabs(c->ops[i].scalar);
        else if (c->ops[i].kind == CF_OP_GELU)
            g *= 1.13;
    }
    return g;
}

static int chain_has_bn_or_affine(const fcase_t *c)
{
    for (int i = 0; i < c->nops; i++)
        if (c->ops[i].kind == CF_OP_BATCH_NORM || c->ops[i].kind == CF_OP_AFFINE_CHANNEL)
            return 1;
    return 0;
}
#endif

static const char *math_name(cf_math_t m)
{
    return m == CF_MATH_STRICT_F32 ? "strict_f32" : m == CF_MATH_TF32 ? "tf32" : "default";
}

/* The one-line descriptor, in the notation of tests/python/cf_testlib.py (Case.line). */
static void case_line(const fcase_t *c, char *buf, size_t size)
{
    const cf_conv_desc_t *d = &c->d;
    int len = snprintf(buf, size, "n%lldc%lldh%lldw%lld-k%lldx%lldc%lld-s%lldx%lldp%lldx%lldd%lldx%lldop%lldx%lld-%s%s:",
                       (long long)d->n, (long long)d->c_in, (long long)d->h, (long long)d->w, (long long)d->kh,
                       (long long)d->kw, (long long)d->c_out, (long long)d->stride_h, (long long)d->stride_w,
                       (long long)d->pad_h, (long long)d->pad_w, (long long)d->dil_h, (long long)d->dil_w,
                       (long long)d->out_pad_h, (long long)d->out_pad_w, d->kind == CF_CONV_2D ? "C" : "T",
                       d->has_bias ? "+b" : "");
    for (int i = 0; i < c->nops && len > 0 && (size_t)len < size; i++) {
        const fop_t *o = &c->ops[i];
        const char *sep = i > 0 ? "," : "";
        const char *name = cf_op_kind_name(o->kind);
        if (o->kind == CF_OP_MUL_SCALAR || o->kind == CF_OP_ADD_SCALAR) {
            len += snprintf(buf + len, size - (size_t)len, "%s%s(%.8g)", sep, name, o->scalar);
        } else if (o->kind == CF_OP_BATCH_NORM) {
            char mom[32];
            if (o->momentum == CF_BN_MOMENTUM_CUMULATIVE)
                snprintf(mom, sizeof mom, "None");
            else
                snprintf(mom, sizeof mom, "%g", o->momentum);
            len += snprintf(buf + len, size - (size_t)len, "%sbatch_norm(%s,m=%s,eps=%g%s%s%s", sep,
                            o->mode == CF_BN_TRAINING ? "train" : "eval", mom, o->eps, o->has_gamma ? ",gamma" : "",
                            o->has_beta ? ",beta" : "", o->has_stats ? ",stats" : "");
            if (o->has_nbt && len > 0 && (size_t)len < size)
                len += snprintf(buf + len, size - (size_t)len, ",nbt=%lld", (long long)o->nbt0);
            if (len > 0 && (size_t)len < size)
                len += snprintf(buf + len, size - (size_t)len, ")");
        } else {
            len += snprintf(buf + len, size - (size_t)len, "%s%s", sep, name);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Buffers                                                                                                    */

typedef struct {
    float *a, *b;         /* channel_a / channel_b (host), NULL when unused */
    float *rm, *rv;       /* running stats, initial values */
    float *rm_got, *rv_got, *rm_want, *rv_want;
    int64_t nbt_got, nbt_want;
} fbuf_t;

typedef struct {
    float *src, *wei, *bia, *dst; /* dst has CANARY extra floats */
    double *want;
    fbuf_t ops[MAX_FUZZ_OPS];
    int64_t src_n, wei_n, dst_n;
} fdata_t;

static float *alloc_values(rng_t *r, int64_t count, float scale, float shift)
{
    float *p = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    if (p != NULL)
        for (int64_t i = 0; i < count; i++)
            p[i] = rng_value(r) * scale + shift;
    return p;
}

static float *copy_floats(const float *p, int64_t count)
{
    float *q = malloc(sizeof(float) * (size_t)count);
    if (q != NULL)
        memcpy(q, p, sizeof(float) * (size_t)count);
    return q;
}

static void free_data(fdata_t *f)
{
    free(f->src);
    free(f->wei);
    free(f->bia);
    free(f->dst);
    free(f->want);
    for (int i = 0; i < MAX_FUZZ_OPS; i++) {
        fbuf_t *b = &f->ops[i];
        free(b->a);
        free(b->b);
        free(b->rm);
        free(b->rv);
        free(b->rm_got);
        free(b->rv_got);
        free(b->rm_want);
        free(b->rv_want);
    }
    memset(f, 0, sizeof *f);
}

/* Fresh inputs for case `index` (a second stream of the same seed, so the descriptor stream stays stable). */
static int make_data(uint64_t seed, int64_t index, const fcase_t *c, fdata_t *f)
{
    rng_t r = {splitmix64(~seed * 0xD1B54A32D192ED03ull + splitmix64((uint64_t)index + 7))};
    const cf_conv_desc_t *d = &c->d;
    memset(f, 0, sizeof *f);
    f->src_n = d->n * d->c_in * d->h * d->w;
    f->wei_n = d->c_out * d->c_in * d->kh * d->kw;
    f->dst_n = d->n * d->c_out * c->oh * c->ow;
    const int64_t fan_in = (d->kind == CF_CONV_2D ? d->c_in : d->c_out) * d->kh * d->kw;
    const float bound = (float)(1.0 / sqrt((double)fan_in));
    f->src = alloc_values(&r, f->src_n, 1.0f, 0.0f);
    f->wei = alloc_values(&r, f->wei_n, bound, 0.0f);
    f->bia = d->has_bias ? alloc_values(&r, d->c_out, bound, 0.0f) : NULL;
    f->dst = malloc(sizeof(float) * (size_t)(f->dst_n + CANARY));
    f->want = malloc(sizeof(double) * (size_t)f->dst_n);
    if (f->src == NULL || f->wei == NULL || (d->has_bias && f->bia == NULL) || f->dst == NULL || f->want == NULL)
        return 0;
    const int64_t C = d->c_out;
    for (int i = 0; i < c->nops; i++) {
        const fop_t *o = &c->ops[i];
        fbuf_t *b = &f->ops[i];
        switch (o->kind) {
        case CF_OP_ADD_CHANNEL:
            b->a = alloc_values(&r, C, 1.0f, 0.0f);
            break;
        case CF_OP_AFFINE_CHANNEL:
            b->a = alloc_values(&r, C, 1.0f, 0.0f);
            b->b = alloc_values(&r, C, 1.0f, 0.0f);
            break;
        case CF_OP_BATCH_NORM:
            b->a = o->has_gamma ? alloc_values(&r, C, 0.5f, 1.0f) : NULL; /* gamma in [0.5, 1.5) */
            b->b = o->has_beta ? alloc_values(&r, C, 1.0f, 0.0f) : NULL;
            if (o->has_stats) {
                b->rm = alloc_values(&r, C, 0.2f, 0.0f);
                b->rv = alloc_values(&r, C, 0.5f, 1.0f); /* > 0 */
                b->rm_got = copy_floats(b->rm, C);
                b->rv_got = copy_floats(b->rv, C);
                b->rm_want = copy_floats(b->rm, C);
                b->rv_want = copy_floats(b->rv, C);
                if (!b->rm || !b->rv || !b->rm_got || !b->rv_got || !b->rm_want || !b->rv_want)
                    return 0;
            }
            b->nbt_got = b->nbt_want = o->nbt0;
            break;
        default:
            break;
        }
    }
    return 1;
}

static void fill_args(const fcase_t *c, fdata_t *f, cf_args_t *args, float *dst)
{
    memset(args, 0, sizeof *args);
    args->src = f->src;
    args->wei = f->wei;
    args->bia = f->bia;
    args->dst = dst;
    for (int i = 0; i < c->nops; i++) {
        fbuf_t *b = &f->ops[i];
        args->ops[i].channel_a = b->a;
        args->ops[i].channel_b = b->b;
        args->ops[i].running_mean = b->rm_got;
        args->ops[i].running_var = b->rv_got;
        args->ops[i].num_batches_tracked = c->ops[i].has_nbt ? &b->nbt_got : NULL;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The float64 oracle: naive loops straight from PyTorch's definitions.                                       */

static void oracle(const fcase_t *c, fdata_t *f)
{
    const cf_conv_desc_t *d = &c->d;
    const int64_t N = d->n, CI = d->c_in, H = d->h, W = d->w, CO = d->c_out, KH = d->kh, KW = d->kw;
    const int64_t OH = c->oh, OW = c->ow, HW = OH * OW;
    double *y = f->want;
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < CO; co++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = d->has_bias ? (double)f->bia[co] : 0.0;
                    for (int64_t ci = 0; ci < CI; ci++)
                        for (int64_t ky = 0; ky < KH; ky++)
                            for (int64_t kx = 0; kx < KW; kx++) {
                                int64_t iy, ix;
                                double w;
                                if (d->kind == CF_CONV_2D) {
                                    /* out[oy] += x[oy*s - p + ky*dil] * w[co, ci, ky, kx] */
                                    iy = oy * d->stride_h - d->pad_h + ky * d->dil_h;
                                    ix = ox * d->stride_w - d->pad_w + kx * d->dil_w;
                                    w = f->wei[((co * CI + ci) * KH + ky) * KW + kx];
                                } else {
                                    /* gather: oy = iy*s - p + ky*dil  <=>  iy = (oy + p - ky*dil) / s, exact */
                                    const int64_t ty = oy + d->pad_h - ky * d->dil_h;
                                    const int64_t tx = ox + d->pad_w - kx * d->dil_w;
                                    if (ty < 0 || tx < 0 || ty % d->stride_h != 0 || tx % d->stride_w != 0)
                                        continue;
                                    iy = ty / d->stride_h;
                                    ix = tx / d->stride_w;
                                    w = f->wei[((ci * CO + co) * KH + ky) * KW + kx];
                                }
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                acc += (double)f->src[((n * CI + ci) * H + iy) * W + ix] * w;
                            }
                    y[((n * CO + co) * OH + oy) * OW + ox] = acc;
                }

    for (int i = 0; i < c->nops; i++) {
        const fop_t *o = &c->ops[i];
        fbuf_t *b = &f->ops[i];
        switch (o->kind) {
        case CF_OP_ADD_CHANNEL:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] += b->a[(j / HW) % CO];
            break;
        case CF_OP_MUL_SCALAR:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] *= o->scalar;
            break;
        case CF_OP_ADD_SCALAR:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] += o->scalar;
            break;
        case CF_OP_AFFINE_CHANNEL:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] = y[j] * b->a[(j / HW) % CO] + b->b[(j / HW) % CO];
            break;
        case CF_OP_BATCH_NORM:
            if (o->has_nbt && o->mode == CF_BN_TRAINING)
                b->nbt_want += 1;
            for (int64_t co = 0; co < CO; co++) {
                double mean, var;
                if (o->mode == CF_BN_TRAINING) {
                    const double M = (double)(N * HW);
                    double sum = 0.0, sq = 0.0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t p = 0; p < HW; p++)
                            sum += y[(n * CO + co) * HW + p];
                    mean = sum / M;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t p = 0; p < HW; p++) {
                            const double dv = y[(n * CO + co) * HW + p] - mean;
                            sq += dv * dv;
                        }
                    var = sq / M;
                    if (o->has_stats) {
                        const double m =
                            o->momentum == CF_BN_MOMENTUM_CUMULATIVE ? 1.0 / (double)b->nbt_want : o->momentum;
                        b->rm_want[co] = (float)((1.0 - m) * b->rm[co] + m * mean);
                        b->rv_want[co] = (float)((1.0 - m) * b->rv[co] + m * var * M / (M - 1.0));
                    }
                } else {
                    mean = b->rm[co];
                    var = b->rv[co];
                }
                const double g = b->a != NULL ? b->a[co] : 1.0, be = b->b != NULL ? b->b[co] : 0.0;
                for (int64_t n = 0; n < N; n++)
                    for (int64_t p = 0; p < HW; p++) {
                        double *v = &y[(n * CO + co) * HW + p];
                        *v = (*v - mean) / sqrt(var + o->eps) * g + be;
                    }
            }
            break;
        case CF_OP_SOFTMAX_CHANNELS:
            for (int64_t n = 0; n < N; n++)
                for (int64_t p = 0; p < HW; p++) {
                    double mx = -INFINITY, sum = 0.0;
                    for (int64_t co = 0; co < CO; co++)
                        mx = fmax(mx, y[(n * CO + co) * HW + p]);
                    for (int64_t co = 0; co < CO; co++)
                        sum += exp(y[(n * CO + co) * HW + p] - mx);
                    for (int64_t co = 0; co < CO; co++)
                        y[(n * CO + co) * HW + p] = exp(y[(n * CO + co) * HW + p] - mx) / sum;
                }
            break;
        case CF_OP_SIGMOID:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] = 1.0 / (1.0 + exp(-y[j]));
            break;
        case CF_OP_RELU:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] = y[j] < 0.0 ? 0.0 : y[j];
            break;
        case CF_OP_TANH:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] = tanh(y[j]);
            break;
        case CF_OP_GELU:
            for (int64_t j = 0; j < N * CO * HW; j++)
                y[j] = 0.5 * y[j] * (1.0 + erf(y[j] / sqrt(2.0)));
            break;
        case CF_OP_COUNT:
            break;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Running a backend                                                                                          */

/* Builds the chain of case c through the public API. */
static cf_status_t build_chain(const fcase_t *c, cf_chain_t *chain)
{
    cf_status_t st = cf_chain_create(chain);
    for (int i = 0; i < c->nops && st == CF_STATUS_SUCCESS; i++) {
        const fop_t *o = &c->ops[i];
        switch (o->kind) {
        case CF_OP_ADD_CHANNEL: st = cf_chain_append_add_channel(*chain); break;
        case CF_OP_MUL_SCALAR: st = cf_chain_append_mul_scalar(*chain, o->scalar); break;
        case CF_OP_ADD_SCALAR: st = cf_chain_append_add_scalar(*chain, o->scalar); break;
        case CF_OP_AFFINE_CHANNEL: st = cf_chain_append_affine_channel(*chain); break;
        case CF_OP_BATCH_NORM: st = cf_chain_append_batch_norm(*chain, o->mode, o->eps, o->momentum); break;
        case CF_OP_SOFTMAX_CHANNELS: st = cf_chain_append_softmax_channels(*chain); break;
        case CF_OP_SIGMOID: st = cf_chain_append_sigmoid(*chain); break;
        case CF_OP_RELU: st = cf_chain_append_relu(*chain); break;
        case CF_OP_TANH: st = cf_chain_append_tanh(*chain); break;
        case CF_OP_GELU: st = cf_chain_append_gelu(*chain); break;
        case CF_OP_COUNT: st = CF_STATUS_INTERNAL_ERROR; break;
        }
    }
    return st;
}

static void poison(float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = NAN;
    for (int64_t i = n; i < n + CANARY; i++)
        dst[i] = canary_value;
}

#ifdef CF_TEST_WITH_CUDA
/* Runs `plan` on the device: copies every input over, dst (poisoned, with its canary) back, and the
 * in-place BatchNorm buffers back into the *_got host arrays. */
static cf_status_t execute_cuda(const_cf_plan_t plan, const fcase_t *c, fdata_t *f, char *why, size_t why_size)
{
    const int64_t C = c->d.c_out;
    void *ptrs[4 + 5 * MAX_FUZZ_OPS + 1];
    int np = 0;
    cf_status_t st = CF_STATUS_CUDA_ERROR;
    cudaError_t e = cudaSuccess;
#define DEV_COPY(dev, host, bytes)                                                                           \
    do {                                                                                                       \
        (dev) = NULL;                                                                                          \
        if ((host) != NULL && e == cudaSuccess) {                                                              \
            e = cudaMalloc((void **)&(dev), (bytes));                                                          \
            if (e == cudaSuccess) {                                                                            \
                ptrs[np++] = (void *)(dev);                                                                    \
                e = cudaMemcpy((void *)(dev), (host), (bytes), cudaMemcpyHostToDevice);                         \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)
    float *src, *wei, *bia, *dst;
    DEV_COPY(src, f->src, sizeof(float) * (size_t)f->src_n);
    DEV_COPY(wei, f->wei, sizeof(float) * (size_t)f->wei_n);
    DEV_COPY(bia, f->bia, sizeof(float) * (size_t)C);
    DEV_COPY(dst, f->dst, sizeof(float) * (size_t)(f->dst_n + CANARY));
    cf_args_t args;
    memset(&args, 0, sizeof args);
    args.src = src;
    args.wei = wei;
    args.bia = bia;
    args.dst = dst;
    float *ra[MAX_FUZZ_OPS], *rb[MAX_FUZZ_OPS], *rm[MAX_FUZZ_OPS], *rv[MAX_FUZZ_OPS];
    int64_t *nbt[MAX_FUZZ_OPS];
    for (int i = 0; i < c->nops; i++) {
        fbuf_t *b = &f->ops[i];
        DEV_COPY(ra[i], b->a, sizeof(float) * (size_t)C);
        DEV_COPY(rb[i], b->b, sizeof(float) * (size_t)C);
        DEV_COPY(rm[i], b->rm_got, sizeof(float) * (size_t)C);
        DEV_COPY(rv[i], b->rv_got, sizeof(float) * (size_t)C);
        int64_t *nbt_host = c->ops[i].has_nbt ? &b->nbt_got : NULL;
        DEV_COPY(nbt[i], nbt_host, sizeof(int64_t));
        args.ops[i].channel_a = ra[i];
        args.ops[i].channel_b = rb[i];
        args.ops[i].running_mean = rm[i];
        args.ops[i].running_var = rv[i];
        args.ops[i].num_batches_tracked = nbt[i];
    }
#undef DEV_COPY
    size_t ws_bytes = 0;
    void *ws = NULL;
    if (e == cudaSuccess) {
        cf_plan_workspace_size(plan, &ws_bytes);
        if (ws_bytes > 0) {
            e = cudaMalloc(&ws, ws_bytes);
            if (e == cudaSuccess)
                ptrs[np++] = ws;
        }
    }
    if (e == cudaSuccess) {
        st = cf_plan_execute(plan, &args, ws, ws_bytes, NULL);
        if (st == CF_STATUS_SUCCESS) {
            e = cudaDeviceSynchronize();
            if (e == cudaSuccess)
                e = cudaMemcpy(f->dst, dst, sizeof(float) * (size_t)(f->dst_n + CANARY), cudaMemcpyDeviceToHost);
            for (int i = 0; i < c->nops && e == cudaSuccess; i++) {
                fbuf_t *b = &f->ops[i];
                if (rm[i] != NULL)
                    e = cudaMemcpy(b->rm_got, rm[i], sizeof(float) * (size_t)C, cudaMemcpyDeviceToHost);
                if (rv[i] != NULL && e == cudaSuccess)
                    e = cudaMemcpy(b->rv_got, rv[i], sizeof(float) * (size_t)C, cudaMemcpyDeviceToHost);
                if (nbt[i] != NULL && e == cudaSuccess)
                    e = cudaMemcpy(&b->nbt_got, nbt[i], sizeof(int64_t), cudaMemcpyDeviceToHost);
            }
            if (e != cudaSuccess)
                st = CF_STATUS_CUDA_ERROR;
        } else {
            snprintf(why, why_size, "%s: %s", cf_status_string(st), cf_last_error());
        }
    }
    if (e != cudaSuccess)
        snprintf(why, why_size, "CUDA: %s", cudaGetErrorString(e));
    for (int i = 0; i < np; i++)
        cudaFree(ptrs[i]);
    return e != cudaSuccess ? CF_STATUS_CUDA_ERROR : st;
}
#endif

/* ---------------------------------------------------------------------------------------------------------- */
/* Comparison                                                                                                 */

typedef struct {
    double rtol, atol;
} tol_t;

/* 1 if got matches want everywhere (NaN/Inf positions exactly); else writes the first mismatch. */
static int compare(const char *what, const float *got, const double *want, int64_t count, tol_t tol, char *why,
                   size_t why_size, int64_t *bad_count)
{
    int64_t bad = 0, first = -1;
    double worst = 0.0;
    for (int64_t i = 0; i < count; i++) {
        const double g = got[i], w = want[i];
        int ok;
        if (isnan(w) || isnan(g))
            ok = isnan(w) && isnan(g);
        else if (isinf(w) || isinf(g))
            ok = g == w;
        else
            ok = fabs(g - w) <= tol.atol + tol.rtol * fabs(w);
        if (!ok) {
            if (first < 0)
                first = i;
            bad++;
        }
        if (!isnan(g - w) && fabs(g - w) > worst)
            worst = fabs(g - w);
    }
    *bad_count = bad;
    if (bad == 0)
        return 1;
    snprintf(why, why_size, "%s: %lld of %lld elements off (max |err| %.3g); first at [%lld]: got %.9g, want %.9g "
             "(atol %g, rtol %g)",
             what, (long long)bad, (long long)count, worst, (long long)first, (double)got[first], want[first],
             tol.atol, tol.rtol);
    return 0;
}

static int compare_floats(const char *what, const float *got, const float *want, int64_t count, tol_t tol, char *why,
                          size_t why_size)
{
    double *w = malloc(sizeof(double) * (size_t)count);
    if (w == NULL) {
        snprintf(why, why_size, "out of host memory");
        return 0;
    }
    for (int64_t i = 0; i < count; i++)
        w[i] = want[i];
    int64_t bad;
    int ok = compare(what, got, w, count, tol, why, why_size, &bad);
    free(w);
    return ok;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Driver                                                                                                     */

enum { CASE_PASS, CASE_FAIL, CASE_REFUSED, CASE_INVALID_OK };

typedef struct {
    int cuda;
    uint64_t seed;
    double max_macs;
    int verbose;
    family_t family;
    int refusals_printed;
} config_t;

/* Multiply-add budget per case: the CPU oracle is naive; on CUDA the CPU backend (OpenMP) is the oracle. */
static double default_max_macs(int cuda)
{
    return cuda ? 3e7 : 4e6;
}

static void report_failure(const config_t *cfg, int64_t index, const fcase_t *c, const char *impl, const char *why)
{
    char line[512], budget[64] = "";
    case_line(c, line, sizeof line);
    if (cfg->max_macs != default_max_macs(cfg->cuda))
        snprintf(budget, sizeof budget, " --max-macs %.17g", cfg->max_macs);
    if (cfg->family != FAMILY_DEFAULT)
        strncat(budget, cfg->family == FAMILY_CONVT_S2 ? " --convt-s2" : " --wide", sizeof budget - strlen(budget) - 1);
    fprintf(stderr,
            "FAIL case %lld: %s [impl %s, math %s]\n    %s\n    reproduce: fuzz_shapes --backend %s --seed %llu "
            "--case %lld%s\n",
            (long long)index, line, impl != NULL ? impl : "(no plan)", math_name(c->math), why,
            cfg->cuda ? "cuda" : "cpu", (unsigned long long)cfg->seed, (long long)index, budget);
}

static int run_one(config_t *cfg, int64_t index, const char **impl_out)
{
    fcase_t c;
    gen_case(cfg->seed, index, cfg->max_macs, cfg->cuda, cfg->family, &c);
    char why[1024] = "";
    const char *impl = NULL;
    *impl_out = NULL;

    /* The descriptor's own arithmetic against ours. */
    int64_t oh = -1, ow = -1;
    cf_status_t st = cf_conv_desc_output_dims(&c.d, &oh, &ow);
    if (st != CF_STATUS_SUCCESS || oh != c.oh || ow != c.ow) {
        snprintf(why, sizeof why, "cf_conv_desc_output_dims: %s, %lldx%lld, want %lldx%lld (%s)", cf_status_string(st),
                 (long long)oh, (long long)ow, (long long)c.oh, (long long)c.ow, cf_last_error());
        report_failure(cfg, index, &c, impl, why);
        return CASE_FAIL;
    }

    cf_chain_t chain = NULL;
    st = build_chain(&c, &chain);
    if (st != CF_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "building the chain: %s: %s", cf_status_string(st), cf_last_error());
        report_failure(cfg, index, &c, impl, why);
        cf_chain_destroy(chain);
        return CASE_FAIL;
    }
    cf_plan_t plan = NULL;
    st = cf_plan_create(&plan, &c.d, chain, cfg->cuda ? CF_BACKEND_CUDA : CF_BACKEND_CPU, c.math);
    if (c.bn_train_too_small) {
        /* PyTorch raises "Expected more than 1 value per channel when training": so must we. */
        cf_plan_destroy(plan);
        cf_chain_destroy(chain);
        if (st == CF_STATUS_INVALID_SHAPE)
            return CASE_INVALID_OK;
        snprintf(why, sizeof why, "batch_norm training with n*oh*ow = 1: plan gave %s, want CF_STATUS_INVALID_SHAPE",
                 cf_status_string(st));
        report_failure(cfg, index, &c, impl, why);
        return CASE_FAIL;
    }
    if (st == CF_STATUS_NOT_SUPPORTED && cfg->cuda) {
        if (cfg->verbose || cfg->refusals_printed < 3) {
            char line[512];
            case_line(&c, line, sizeof line);
            printf("refused case %lld: %s: %s\n", (long long)index, line, cf_last_error());
            cfg->refusals_printed++;
        }
        cf_chain_destroy(chain);
        return CASE_REFUSED;
    }
    if (st != CF_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "cf_plan_create: %s: %s", cf_status_string(st), cf_last_error());
        report_failure(cfg, index, &c, impl, why);
        cf_chain_destroy(chain);
        return CASE_FAIL;
    }
    cf_plan_impl_name(plan, &impl);
    *impl_out = impl;

    fdata_t f;
    int result = CASE_PASS;
    if (!make_data(cfg->seed, index, &c, &f)) {
        snprintf(why, sizeof why, "out of host memory for the case's buffers");
        report_failure(cfg, index, &c, impl, why);
        free_data(&f);
        cf_plan_destroy(plan);
        cf_chain_destroy(chain);
        return CASE_FAIL;
    }
    float *src_copy = copy_floats(f.src, f.src_n), *wei_copy = copy_floats(f.wei, f.wei_n);
    tol_t tol = {1e-5, 1e-6};

    if (!cfg->cuda) {
        oracle(&c, &f);
        poison(f.dst, f.dst_n);
        cf_args_t args;
        fill_args(&c, &f, &args, f.dst);
        st = cf_plan_execute(plan, &args, NULL, 0, NULL);
        if (st != CF_STATUS_SUCCESS)
            snprintf(why, sizeof why, "cf_plan_execute: %s: %s", cf_status_string(st), cf_last_error());
    } else {
#ifdef CF_TEST_WITH_CUDA
        /* The expected values: the CPU backend on the same inputs and BatchNorm state. */
        cf_plan_t ref = NULL;
        st = cf_plan_create(&ref, &c.d, chain, CF_BACKEND_CPU, c.math);
        if (st == CF_STATUS_SUCCESS) {
            cf_args_t args;
            fill_args(&c, &f, &args, f.dst);
            for (int i = 0; i < c.nops; i++) {
                args.ops[i].running_mean = f.ops[i].rm_want;
                args.ops[i].running_var = f.ops[i].rv_want;
                args.ops[i].num_batches_tracked = c.ops[i].has_nbt ? &f.ops[i].nbt_want : NULL;
            }
            st = cf_plan_execute(ref, &args, NULL, 0, NULL);
            for (int64_t j = 0; j < f.dst_n; j++)
                f.want[j] = f.dst[j];
        }
        cf_plan_destroy(ref);
        if (st != CF_STATUS_SUCCESS) {
            snprintf(why, sizeof why, "CPU backend (the expected values): %s: %s", cf_status_string(st),
                     cf_last_error());
        } else {
            poison(f.dst, f.dst_n);
            st = execute_cuda(plan, &c, &f, why, sizeof why);
        }
        const double t = (c.math == CF_MATH_DEFAULT && !chain_has_bn_or_affine(&c)) ? 5e-3 : 1e-4;
        tol.rtol = t;
        tol.atol = t * chain_gain(&c);
#else
        st = CF_STATUS_BACKEND_UNAVAILABLE;
        snprintf(why, sizeof why, "built without CUDA");
#endif
    }

    if (st != CF_STATUS_SUCCESS) {
        result = CASE_FAIL;
    } else {
        int64_t bad = 0;
        if (!compare("dst", f.dst, f.want, f.dst_n, tol, why, sizeof why, &bad))
            result = CASE_FAIL;
        for (int64_t j = f.dst_n; j < f.dst_n + CANARY && result == CASE_PASS; j++)
            if (!(f.dst[j] == canary_value)) {
                snprintf(why, sizeof why, "wrote past the end of dst: dst[%lld] (dst has %lld elements) = %g",
                         (long long)j, (long long)f.dst_n, (double)f.dst[j]);
                result = CASE_FAIL;
            }
        if (result == CASE_PASS && (memcmp(src_copy, f.src, sizeof(float) * (size_t)f.src_n) != 0 ||
                                    memcmp(wei_copy, f.wei, sizeof(float) * (size_t)f.wei_n) != 0)) {
            snprintf(why, sizeof why, "src or wei changed by the run (they are const inputs)");
            result = CASE_FAIL;
        }
        for (int i = 0; i < c.nops && result == CASE_PASS; i++) {
            fbuf_t *b = &f.ops[i];
            if (c.ops[i].kind != CF_OP_BATCH_NORM)
                continue;
            char what[64];
            if (b->nbt_got != b->nbt_want) {
                snprintf(why, sizeof why, "op %d num_batches_tracked = %lld, want %lld", i, (long long)b->nbt_got,
                         (long long)b->nbt_want);
                result = CASE_FAIL;
            }
            if (b->rm_got != NULL && result == CASE_PASS) {
                snprintf(what, sizeof what, "op %d running_mean", i);
                if (!compare_floats(what, b->rm_got, b->rm_want, c.d.c_out, tol, why, sizeof why))
                    result = CASE_FAIL;
                snprintf(what, sizeof what, "op %d running_var", i);
                if (result == CASE_PASS &&
                    !compare_floats(what, b->rv_got, b->rv_want, c.d.c_out, tol, why, sizeof why))
                    result = CASE_FAIL;
            }
        }
    }
    if (result == CASE_FAIL)
        report_failure(cfg, index, &c, impl, why);
    else if (cfg->verbose) {
        char line[512];
        case_line(&c, line, sizeof line);
        printf("ok   case %lld: %s [%s, %s]\n", (long long)index, line, impl, math_name(c.math));
    }
    free(src_copy);
    free(wei_copy);
    free_data(&f);
    cf_plan_destroy(plan);
    cf_chain_destroy(chain);
    return result;
}

static int usage(const char *msg)
{
    if (msg != NULL)
        fprintf(stderr, "fuzz_shapes: %s\n", msg);
    fprintf(stderr, "usage: fuzz_shapes [--backend cpu|cuda] [--count N] [--seed S] [--case K] [--max-macs M] "
                    "[--wide | --convt-s2] [--verbose]\n"
                    "  --case K runs only case K of seed S (what a failure prints). Exit: 0 ok, 1 failure, 2 usage,\n"
                    "  77 backend unavailable.\n");
    return 2;
}

static int parse_i64(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || v < 0)
        return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv)
{
    config_t cfg = {0};
    int64_t count = 200, only = -1, seed = 1;
    double max_macs = -1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            cfg.verbose = 1;
        } else if (strcmp(a, "--wide") == 0) {
            cfg.family = FAMILY_WIDE;
        } else if (strcmp(a, "--convt-s2") == 0) {
            cfg.family = FAMILY_CONVT_S2;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(NULL);
            return 0;
        } else if (v == NULL) {
            return usage("missing value after an option");
        } else if (strcmp(a, "--backend") == 0) {
            if (strcmp(v, "cpu") == 0)
                cfg.cuda = 0;
            else if (strcmp(v, "cuda") == 0)
                cfg.cuda = 1;
            else
                return usage("--backend must be cpu or cuda");
            i++;
        } else if (strcmp(a, "--count") == 0) {
            if (!parse_i64(v, &count))
                return usage("--count needs a non-negative integer");
            i++;
        } else if (strcmp(a, "--seed") == 0) {
            if (!parse_i64(v, &seed))
                return usage("--seed needs a non-negative integer");
            i++;
        } else if (strcmp(a, "--case") == 0) {
            if (!parse_i64(v, &only))
                return usage("--case needs a non-negative integer");
            i++;
        } else if (strcmp(a, "--max-macs") == 0) {
            char *end = NULL;
            max_macs = strtod(v, &end);
            if (end == v || *end != '\0' || !(max_macs >= 1.0))
                return usage("--max-macs needs a number >= 1");
            i++;
        } else {
            return usage("unknown option");
        }
    }
    cfg.seed = (uint64_t)seed;
    cfg.max_macs = max_macs > 0 ? max_macs : default_max_macs(cfg.cuda);

    if (cfg.cuda) {
        int avail = 0;
        cf_backend_available(CF_BACKEND_CUDA, &avail);
        if (!avail) {
            cf_conv_desc_t d;
            cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 3, 3, 1, 3, 3);
            cf_plan_t p = NULL;
            cf_status_t st = cf_plan_create(&p, &d, NULL, CF_BACKEND_CUDA, CF_MATH_DEFAULT);
            cf_plan_destroy(p);
            printf("fuzz_shapes: skipped: CUDA backend unavailable (%s: %s)\n", cf_status_string(st), cf_last_error());
            return 77;
        }
#ifndef CF_TEST_WITH_CUDA
        printf("fuzz_shapes: skipped: this fuzz_shapes was built without CUDA\n");
        return 77;
#endif
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t counts[4] = {0, 0, 0, 0};
    const char *impls[16];
    int64_t impl_counts[16];
    int n_impls = 0;
    const int64_t first = only >= 0 ? only : 0, last = only >= 0 ? only + 1 : count;
    for (int64_t k = first; k < last; k++) {
        const char *impl = NULL;
        int r = run_one(&cfg, k, &impl);
        counts[r]++;
        if (r == CASE_PASS && impl != NULL) {
            int j = 0;
            while (j < n_impls && strcmp(impls[j], impl) != 0)
                j++;
            if (j == n_impls && n_impls < 16) {
                impls[n_impls] = impl;
                impl_counts[n_impls++] = 0;
            }
            if (j < n_impls)
                impl_counts[j]++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("fuzz_shapes: backend %s, seed %lld, cases %lld..%lld: %lld passed, %lld failed, %lld refused "
           "(NOT_SUPPORTED), %lld correctly rejected (bn training on 1 value) in %.1f s; impls:",
           cfg.cuda ? "cuda" : "cpu", (long long)seed, (long long)first, (long long)last - 1,
           (long long)counts[CASE_PASS], (long long)counts[CASE_FAIL], (long long)counts[CASE_REFUSED],
           (long long)counts[CASE_INVALID_OK], secs);
    for (int j = 0; j < n_impls; j++)
        printf(" %s=%lld", impls[j], (long long)impl_counts[j]);
    printf("\n");
    return counts[CASE_FAIL] == 0 ? 0 : 1;
}
