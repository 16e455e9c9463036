/* The CPU reference: any valid descriptor and chain, with PyTorch's semantics, in double precision.
 *
 * Design: the conv output is materialised as a double tensor (N, C_out, OH, OW); each chain op is then
 * applied to the whole tensor in order, in double; the result is rounded once into dst. Being the oracle
 * every other backend is compared with, it favours obviously-right over fast, but loops are ordered so
 * the KernelBench shapes finish in seconds to minutes on a few cores:
 *   - threads own whole (n, c_out) output planes, so no two threads write the same element;
 *   - conv2d runs (ci, kh, kw) outside and a contiguous output row inside, with the weight a scalar;
 *   - conv_transpose2d scatters each input row into the output row it lands on, per (ci, kh, kw).
 * Products of two floats are exact in double, so only the order of the sums differs from an exact
 * result (about 1e-16 relative). */
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef _OPENMP
#define CF_OMP_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define CF_OMP_PARALLEL_FOR
#endif

static int64_t ceil_div_nonneg(int64_t a, int64_t b)
{
    /* not (a + b - 1) / b: that overflows for strides near INT64_MAX (found by tests/c/fuzz_api.c) */
    return a / b + (a % b != 0);
}

/* Indices i in [0, count) with 0 <= i*stride + offset < limit, as [*lo, *hi) (empty if *lo >= *hi). */
static void valid_range(int64_t count, int64_t stride, int64_t offset, int64_t limit, int64_t *lo, int64_t *hi)
{
    *lo = offset >= 0 ? 0 : ceil_div_nonneg(-offset, stride);
    if (limit - 1 - offset < 0) {
        *hi = 0;
        return;
    }
    int64_t last = (limit - 1 - offset) / stride;
    *hi = last + 1 < count ? last + 1 : count;
}

/* One (n, co) output plane of conv2d:
 * out[oh, ow] = bia[co] + sum_{ci,kh,kw} x[n, ci, oh*s - p + kh*d, ow*s - p + kw*d] * w[co, ci, kh, kw] */
static void conv2d_plane(const struct cf_plan *plan, const float *src, const float *wei, const float *bia, int64_t n,
                         int64_t co, double *out)
{
    const cf_conv_desc_t *d = &plan->conv;
    const int64_t OH = plan->oh, OW = plan->ow;
    const double b = bia != NULL ? (double)bia[co] : 0.0;
    for (int64_t i = 0; i < OH * OW; i++)
        out[i] = b;
    for (int64_t ci = 0; ci < d->c_in; ci++) {
        const float *x = src + (n * d->c_in + ci) * d->h * d->w;
        for (int64_t kh = 0; kh < d->kh; kh++) {
            const int64_t off_h = kh * d->dil_h - d->pad_h;
            int64_t oh_lo, oh_hi;
            valid_range(OH, d->stride_h, off_h, d->h, &oh_lo, &oh_hi);
            for (int64_t kw = 0; kw < d->kw; kw++) {
                const int64_t off_w = kw * d->dil_w - d->pad_w;
                int64_t ow_lo, ow_hi;
                valid_range(OW, d->stride_w, off_w, d->w, &ow_lo, &ow_hi);
                const double wv = wei[((co * d->c_in + ci) * d->kh + kh) * d->kw + kw];
                const int64_t sw = d->stride_w;
                for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                    const float *xr = x + (oh * d->stride_h + off_h) * d->w;
                    double *orow = out + oh * OW;
                    if (sw == 1) {
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++)
                            orow[ow] += wv * xr[ow + off_w];
                    } else {
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++)
                            orow[ow] += wv * xr[ow * sw + off_w];
                    }
                }
            }
        }
    }
}

/* One (n, co) output plane of conv_transpose2d: every input pixel (ih, iw) of channel ci adds
 * x * w[ci, co, kh, kw] to out[ih*s - p + kh*d, iw*s - p + kw*d] (dropped when outside). */
static void conv_transpose2d_plane(const struct cf_plan *plan, const float *src, const float *wei, const float *bia,
                                   int64_t n, int64_t co, double *out)
{
    const cf_conv_desc_t *d = &plan->conv;
    const int64_t OH = plan->oh, OW = plan->ow;
    const double b = bia != NULL ? (double)bia[co] : 0.0;
    for (int64_t i = 0; i < OH * OW; i++)
        out[i] = b;
    for (int64_t ci = 0; ci < d->c_in; ci++) {
        const float *x = src + (n * d->c_in + ci) * d->h * d->w;
        for (int64_t kh = 0; kh < d->kh; kh++) {
            const int64_t off_h = kh * d->dil_h - d->pad_h;
            int64_t ih_lo, ih_hi;
            valid_range(d->h, d->stride_h, off_h, OH, &ih_lo, &ih_hi);
            for (int64_t kw = 0; kw < d->kw; kw++) {
                const int64_t off_w = kw * d->dil_w - d->pad_w;
                int64_t iw_lo, iw_hi;
                valid_range(d->w, d->stride_w, off_w, OW, &iw_lo, &iw_hi);
                const double wv = wei[((ci * d->c_out + co) * d->kh + kh) * d->kw + kw];
                const int64_t sw = d->stride_w;
                for (int64_t ih = ih_lo; ih < ih_hi; ih++) {
                    const float *xr = x + ih * d->w;
                    double *orow = out + (ih * d->stride_h + off_h) * OW;
                    for (int64_t iw = iw_lo; iw < iw_hi; iw++)
                        orow[iw * sw + off_w] += wv * xr[iw];
                }
            }
        }
    }
}

/* x[c] -> exp(x[c] - max) / sum over C_out at each pixel. Like torch.softmax: a NaN anywhere in the
 * pixel, a +inf (inf - inf), or all -inf make the whole pixel NaN; the max propagates NaN on purpose
 * (fmax would drop it) and IEEE arithmetic does the rest. */
#define CF_SOFTMAX_BLOCK 256
static void softmax_channels(double *acc, int64_t N, int64_t C, int64_t HW)
{
    const int64_t blocks = (HW + CF_SOFTMAX_BLOCK - 1) / CF_SOFTMAX_BLOCK;
    CF_OMP_PARALLEL_FOR
    for (int64_t nb = 0; nb < N * blocks; nb++) {
        const int64_t n = nb / blocks, p0 = (nb % blocks) * CF_SOFTMAX_BLOCK;
        const int64_t len = HW - p0 < CF_SOFTMAX_BLOCK ? HW - p0 : CF_SOFTMAX_BLOCK;
        double m[CF_SOFTMAX_BLOCK], s[CF_SOFTMAX_BLOCK];
        double *base = acc + n * C * HW + p0;
        for (int64_t p = 0; p < len; p++) {
            m[p] = -INFINITY;
            s[p] = 0.0;
        }
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < len; p++) {
                const double x = base[c * HW + p];
                if (isnan(x) || x > m[p])
                    m[p] = isnan(m[p]) ? m[p] : x;
            }
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < len; p++) {
                const double e = exp(base[c * HW + p] - m[p]);
                base[c * HW + p] = e;
                s[p] += e;
            }
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < len; p++)
                base[c * HW + p] /= s[p];
    }
}

/* BatchNorm2d over the conv output, as torch.nn.functional.batch_norm. */
static cf_status_t batch_norm(const cf_op_t *op, const cf_op_args_t *a, double *acc, int64_t N, int64_t C,
                              int64_t HW)
{
    double *stats = malloc((size_t)C * 2 * sizeof(double));
    if (stats == NULL)
        return cf_error(CF_STATUS_OUT_OF_MEMORY, "cpu_reference: could not allocate %zu bytes for batch_norm statistics",
                        (size_t)C * 2 * sizeof(double));
    double *mean = stats, *invstd = stats + C;
    if (op->bn_mode == CF_BN_TRAINING) {
        const int64_t M = N * HW;
        double *var = invstd; /* biased variance, turned into invstd below */
        CF_OMP_PARALLEL_FOR
        for (int64_t c = 0; c < C; c++) {
            /* Two passes (mean, then squared deviations): no cancellation for large means. */
            double sum = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const double *x = acc + (n * C + c) * HW;
                for (int64_t i = 0; i < HW; i++)
                    sum += x[i];
            }
            const double mu = sum / (double)M;
            double sq = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const double *x = acc + (n * C + c) * HW;
                for (int64_t i = 0; i < HW; i++)
                    sq += (x[i] - mu) * (x[i] - mu);
            }
            mean[c] = mu;
            var[c] = sq / (double)M;
        }
        if (a->num_batches_tracked != NULL)
            *a->num_batches_tracked += 1;
        if (a->running_mean != NULL && a->running_var != NULL) {
            const double f =
                op->momentum == CF_BN_MOMENTUM_CUMULATIVE ? 1.0 / (double)*a->num_batches_tracked : op->momentum;
            const double unbias = (double)M / (double)(M - 1);
            for (int64_t c = 0; c < C; c++) {
                a->running_mean[c] = (float)((1.0 - f) * a->running_mean[c] + f * mean[c]);
                a->running_var[c] = (float)((1.0 - f) * a->running_var[c] + f * var[c] * unbias);
            }
        }
        for (int64_t c = 0; c < C; c++)
            invstd[c] = 1.0 / sqrt(var[c] + op->eps);
    } else {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = a->running_mean[c];
            invstd[c] = 1.0 / sqrt((double)a->running_var[c] + op->eps);
        }
    }
    CF_OMP_PARALLEL_FOR
    for (int64_t plane = 0; plane < N * C; plane++) {
        const int64_t c = plane % C;
        const double g = a->channel_a != NULL ? (double)a->channel_a[c] : 1.0;
        const double b = a->channel_b != NULL ? (double)a->channel_b[c] : 0.0;
        double *x = acc + plane * HW;
        for (int64_t i = 0; i < HW; i++)
            x[i] = (x[i] - mean[c]) * invstd[c] * g + b;
    }
    free(stats);
    return CF_STATUS_SUCCESS;
}

/* Applies chain op `op` (position i) to the whole tensor. Every op kind is a case and there is no
 * default, so -Wswitch points here when CF_OP_LIST grows. */
static cf_status_t apply_op(const cf_op_t *op, int i, const cf_op_args_t *a, double *acc, int64_t N, int64_t C,
                            int64_t HW)
{
    const int64_t planes = N * C, total = N * C * HW;
    switch (op->kind) {
    case CF_OP_ADD_CHANNEL: /* x + a[c] */
        CF_OMP_PARALLEL_FOR
        for (int64_t p = 0; p < planes; p++) {
            const double v = a->channel_a[p % C];
            for (int64_t j = 0; j < HW; j++)
                acc[p * HW + j] += v;
        }
        return CF_STATUS_SUCCESS;
    case CF_OP_MUL_SCALAR: /* x * s */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] *= op->scalar;
        return CF_STATUS_SUCCESS;
    case CF_OP_ADD_SCALAR: /* x + s */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] += op->scalar;
        return CF_STATUS_SUCCESS;
    case CF_OP_AFFINE_CHANNEL: /* x * a[c] + b[c] */
        CF_OMP_PARALLEL_FOR
        for (int64_t p = 0; p < planes; p++) {
            const double s = a->channel_a[p % C], t = a->channel_b[p % C];
            for (int64_t j = 0; j < HW; j++)
                acc[p * HW + j] = acc[p * HW + j] * s + t;
        }
        return CF_STATUS_SUCCESS;
    case CF_OP_BATCH_NORM:
        return batch_norm(op, a, acc, N, C, HW);
    case CF_OP_SOFTMAX_CHANNELS:
        softmax_channels(acc, N, C, HW);
        return CF_STATUS_SUCCESS;
    case CF_OP_SIGMOID: /* 1 / (1 + exp(-x)) */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] = 1.0 / (1.0 + exp(-acc[j]));
        return CF_STATUS_SUCCESS;
    case CF_OP_RELU: /* max(x, 0), NaN stays NaN as in torch.relu */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] = acc[j] > 0.0 ? acc[j] : (isnan(acc[j]) ? acc[j] : 0.0);
        return CF_STATUS_SUCCESS;
    case CF_OP_TANH: /* tanh(x) */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] = tanh(acc[j]);
        return CF_STATUS_SUCCESS;
    case CF_OP_GELU: /* x * (1 + erf(x / sqrt(2))) / 2, the exact (not tanh) GELU */
        CF_OMP_PARALLEL_FOR
        for (int64_t j = 0; j < total; j++)
            acc[j] = 0.5 * acc[j] * (1.0 + erf(acc[j] * 0.70710678118654752440));
        return CF_STATUS_SUCCESS;
    case CF_OP_COUNT:
        break;
    }
    return cf_error(CF_STATUS_INTERNAL_ERROR, "cpu_reference: chain op %d has unknown kind %d", i, (int)op->kind);
}

static bool ref_supports(const struct cf_plan *plan, char *reason, size_t reason_size)
{
    (void)plan;
    (void)reason;
    (void)reason_size;
    return true;
}

static size_t ref_workspace_bytes(const struct cf_plan *plan)
{
    (void)plan;
    return 0;
}

static cf_status_t ref_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream)
{
    (void)workspace;
    (void)stream;
    const cf_conv_desc_t *d = &plan->conv;
    const int64_t N = d->n, C = d->c_out, HW = plan->oh * plan->ow, total = cf_plan_dst_elems(plan);
    if ((uint64_t)total > SIZE_MAX / sizeof(double))
        return cf_error(CF_STATUS_OUT_OF_MEMORY, "cpu_reference: %lld doubles of intermediate do not fit in memory",
                        (long long)total);
    const size_t bytes = (size_t)total * sizeof(double);
    double *acc = malloc(bytes);
    if (acc == NULL)
        return cf_error(CF_STATUS_OUT_OF_MEMORY,
                        "cpu_reference: could not allocate %zu bytes for the double-precision conv output", bytes);

    const float *bia = d->has_bias ? args->bia : NULL;
    if (d->kind == CF_CONV_2D) {
        CF_OMP_PARALLEL_FOR
        for (int64_t p = 0; p < N * C; p++)
            conv2d_plane(plan, args->src, args->wei, bia, p / C, p % C, acc + p * HW);
    } else {
        CF_OMP_PARALLEL_FOR
        for (int64_t p = 0; p < N * C; p++)
            conv_transpose2d_plane(plan, args->src, args->wei, bia, p / C, p % C, acc + p * HW);
    }

    for (int i = 0; i < plan->chain.length; i++) {
        cf_status_t st = apply_op(&plan->chain.ops[i], i, &args->ops[i], acc, N, C, HW);
        if (st != CF_STATUS_SUCCESS) {
            free(acc);
            return st;
        }
    }

    float *dst = args->dst;
    CF_OMP_PARALLEL_FOR
    for (int64_t j = 0; j < total; j++)
        dst[j] = (float)acc[j];
    free(acc);
    return CF_STATUS_SUCCESS;
}

const cf_impl_t cf_impl_cpu_reference = {
    .name = "cpu_reference",
    .backend = CF_BACKEND_CPU,
    .supports = ref_supports,
    .workspace_bytes = ref_workspace_bytes,
    .execute = ref_execute,
};
