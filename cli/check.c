/* The CLI's independent float64 check: the conv and both chains written directly from PyTorch's definitions
 * (no code shared with the library), evaluated at seeded output pixels, all channels of each (channel softmax
 * needs them all anyway). Training BatchNorm needs the batch statistics: they are computed exactly, in float64, over
 * the whole batch with a multithreaded direct loop (one conv output plane at a time, merged in a fixed order). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* conv2d:            y[n,co,oh,ow] = b[co] + sum_{ci,kh,kw} x[n,ci,oh*s-p+kh*d, ow*s-p+kw*d] * w[co,ci,kh,kw]
 * conv_transpose2d:  y[n,co,oh,ow] = b[co] + sum over (ci,kh,kw,ih,iw) with oh = ih*s-p+kh*d (same for w)
 *                                          of x[n,ci,ih,iw] * w[ci,co,kh,kw] */
static double conv_at(const workload_t *w, int64_t n, int64_t co, int64_t oh, int64_t ow)
{
    const cf_conv_desc_t *d = &w->desc;
    const int64_t C = d->c_in, H = d->h, W = d->w, K = d->c_out, KH = d->kh, KW = d->kw;
    double acc = d->has_bias ? (double)w->bia[co] : 0.0;
    for (int64_t ci = 0; ci < C; ++ci) {
        const float *x = w->src + (n * C + ci) * H * W;
        for (int64_t kh = 0; kh < KH; ++kh) {
            int64_t ih;
            if (d->kind == CF_CONV_2D) {
                ih = oh * d->stride_h - d->pad_h + kh * d->dil_h;
            } else {
                const int64_t t = oh + d->pad_h - kh * d->dil_h;
                if (t < 0 || t % d->stride_h)
                    continue;
                ih = t / d->stride_h;
            }
            if (ih < 0 || ih >= H)
                continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t iw;
                if (d->kind == CF_CONV_2D) {
                    iw = ow * d->stride_w - d->pad_w + kw * d->dil_w;
                } else {
                    const int64_t t = ow + d->pad_w - kw * d->dil_w;
                    if (t < 0 || t % d->stride_w)
                        continue;
                    iw = t / d->stride_w;
                }
                if (iw < 0 || iw >= W)
                    continue;
                const float wv = d->kind == CF_CONV_2D ? w->wei[((co * C + ci) * KH + kh) * KW + kw]
                                                       : w->wei[((ci * K + co) * KH + kh) * KW + kw];
                acc += (double)x[ih * W + iw] * (double)wv;
            }
        }
    }
    return acc;
}

/* One conv2d output plane (n, co) in float64: acc += w * x-row, contiguous (vectorisable) for stride 1. */
static void conv2d_plane(const workload_t *w, int64_t n, int64_t co, double *acc)
{
    const cf_conv_desc_t *d = &w->desc;
    const int64_t C = d->c_in, H = d->h, W = d->w, KH = d->kh, KW = d->kw, OH = w->oh, OW = w->ow;
    const double b = d->has_bias ? (double)w->bia[co] : 0.0;
    for (int64_t i = 0; i < OH * OW; ++i)
        acc[i] = b;
    for (int64_t ci = 0; ci < C; ++ci) {
        const float *x = w->src + (n * C + ci) * H * W;
        for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
                const double wv = w->wei[((co * C + ci) * KH + kh) * KW + kw];
                const int64_t off = kw * d->dil_w - d->pad_w; /* iw = ow*s + off */
                int64_t lo = 0, hi = OW;                      /* ow in [lo, hi) keeps iw in [0, W) */
                while (lo < hi && lo * d->stride_w + off < 0)
                    ++lo;
                while (hi > lo && (hi - 1) * d->stride_w + off >= W)
                    --hi;
                for (int64_t oh = 0; oh < OH; ++oh) {
                    const int64_t ih = oh * d->stride_h - d->pad_h + kh * d->dil_h;
                    if (ih < 0 || ih >= H)
                        continue;
                    const float *xr = x + ih * W + off;
                    double *ar = acc + oh * OW;
                    if (d->stride_w == 1)
                        for (int64_t ow = lo; ow < hi; ++ow)
                            ar[ow] += wv * (double)xr[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ++ow)
                            ar[ow] += wv * (double)xr[ow * d->stride_w];
                }
            }
    }
}

int cli_bn_batch_stats(const workload_t *w, double *mean, double *var)
{
    const int64_t N = w->desc.n, K = w->desc.c_out, P = w->oh * w->ow;
    double *pm = calloc((size_t)(N * K), sizeof *pm), *pq = calloc((size_t)(N * K), sizeof *pq);
    if (!pm || !pq) {
        free(pm);
        free(pq);
        return -1;
    }
    progress_t *pr = progress_begin("BN batch statistics (float64, whole batch)", N * K);
    int failed = 0;
#pragma omp parallel
    {
        double *plane = malloc(sizeof(double) * (size_t)P);
        if (!plane) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < N * K; ++item) {
            if (!plane)
                continue;
            const int64_t n = item / K, co = item % K;
            if (w->desc.kind == CF_CONV_2D) {
                conv2d_plane(w, n, co, plane);
            } else {
                for (int64_t i = 0; i < P; ++i)
                    plane[i] = conv_at(w, n, co, i / w->ow, i % w->ow);
            }
            double s = 0.0;
            for (int64_t i = 0; i < P; ++i)
                s += plane[i];
            const double m = s / (double)P;
            double q = 0.0;
            for (int64_t i = 0; i < P; ++i)
                q += (plane[i] - m) * (plane[i] - m);
            pm[item] = m;
            pq[item] = q;
            progress_add(pr, 1);
        }
        free(plane);
    }
    progress_end(pr);
    /* Chan et al.'s pairwise merge of (count, mean, M2), in image order: deterministic. */
    for (int64_t co = 0; co < K; ++co) {
        double cnt = 0.0, m = 0.0, q = 0.0;
        for (int64_t n = 0; n < N; ++n) {
            const double nb = (double)P, mb = pm[n * K + co], qb = pq[n * K + co], tot = cnt + nb, delta = mb - m;
            m += delta * nb / tot;
            q += qb + delta * delta * cnt * nb / tot;
            cnt = tot;
        }
        mean[co] = m;
        var[co] = q / cnt;
    }
    free(pm);
    free(pq);
    return failed ? -1 : 0;
}

/* The chain at one pixel, from the conv values z[0..K). */
static void chain_at(const workload_t *w, const double *bn_mean, const double *bn_var, double *z)
{
    const int64_t K = w->desc.c_out;
    const double s = w->p->scale;
    if (!w->p->batch_norm) { /* sigmoid((softmax_c(z) + vec[c]) * s) */
        double m = z[0], sum = 0.0;
        for (int64_t c = 1; c < K; ++c)
            m = z[c] > m ? z[c] : m;
        for (int64_t c = 0; c < K; ++c)
            sum += (z[c] = exp(z[c] - m));
        for (int64_t c = 0; c < K; ++c)
            z[c] = 1.0 / (1.0 + exp(-((z[c] / sum + (double)w->vec[c]) * s)));
        return;
    }
    for (int64_t c = 0; c < K; ++c) { /* s * (gamma * (z - mean) / sqrt(var + eps) + beta) */
        const double mu = bn_mean ? bn_mean[c] : (double)w->rmean[c];
        const double v = bn_var ? bn_var[c] : (double)w->rvar[c];
        z[c] = s * ((double)w->gamma[c] * (z[c] - mu) / sqrt(v + CLI_BN_EPS) + (double)w->beta[c]);
    }
}

typedef struct acc {
    int64_t bad, worst;
    double max_err, got, ref;
} acc_t;

static void acc_add(acc_t *a, int64_t index, double got, double ref, double atol, double rtol)
{
    const double err = fabs(got - ref);
    if (!isfinite(got) || !(err <= atol + rtol * fabs(ref)))
        ++a->bad;
    const double e = isfinite(got) ? err : INFINITY;
    if (a->worst < 0 || e > a->max_err || (e == a->max_err && index < a->worst)) {
        a->max_err = e;
        a->worst = index;
        a->got = got;
        a->ref = ref;
    }
}

static void acc_merge(acc_t *into, const acc_t *a)
{
    into->bad += a->bad;
    if (a->worst >= 0 && (into->worst < 0 || a->max_err > into->max_err ||
                          (a->max_err == into->max_err && a->worst < into->worst))) {
        into->max_err = a->max_err;
        into->worst = a->worst;
        into->got = a->got;
        into->ref = a->ref;
    }
}

static void result_from(check_result_t *res, const acc_t *a)
{
    res->bad = a->bad;
    res->max_abs_err = a->worst >= 0 ? a->max_err : 0.0;
    res->worst_index = a->worst;
    res->worst_got = a->got;
    res->worst_ref = a->ref;
}

void cli_check_sample(const workload_t *w, const float *dst, int64_t pixels, double atol, double rtol,
                      const double *bn_mean, const double *bn_var, const float *rm, const float *rv,
                      check_result_t *res)
{
    const int64_t K = w->desc.c_out, OH = w->oh, OW = w->ow, P = w->desc.n * OH * OW;
    const int all = pixels >= P;
    const int64_t count = all ? P : pixels;
    acc_t total = {0, -1, 0.0, 0.0, 0.0};
    memset(res, 0, sizeof *res);
    progress_t *pr = progress_begin(all ? "reference (float64, every pixel)" : "reference (float64, sampled pixels)",
                                    count);
#pragma omp parallel
    {
        acc_t a = {0, -1, 0.0, 0.0, 0.0};
        double *z = malloc(sizeof(double) * (size_t)K);
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < count; ++i) {
            if (!z)
                continue;
            /* seeded pixels; the first and the last pixel always (edges are where indexing goes wrong) */
            const int64_t pix = all ? i : i == 0 ? 0 : i == 1 ? P - 1
                                                 : (int64_t)(cli_rng_bits(w->seed, STREAM_SAMPLE, (uint64_t)i) %
                                                             (uint64_t)P);
            const int64_t n = pix / (OH * OW), oh = pix / OW % OH, ow = pix % OW;
            for (int64_t c = 0; c < K; ++c)
                z[c] = conv_at(w, n, c, oh, ow);
            chain_at(w, bn_mean, bn_var, z);
            for (int64_t c = 0; c < K; ++c) {
                const int64_t idx = ((n * K + c) * OH + oh) * OW + ow;
                acc_add(&a, idx, dst[idx], z[c], atol, rtol);
            }
            progress_add(pr, 1);
        }
        if (!z)
            ++a.bad; /* out of host memory: the check cannot pass */
#pragma omp critical
        acc_merge(&total, &a);
        free(z);
    }
    progress_end(pr);
    result_from(res, &total);
    res->pixels = count;
    res->positions = count * K;
    if (bn_mean && rm && rv) { /* running = (1 - m) * initial + m * batch; running_var takes the unbiased var */
        const double M = (double)P, m = CLI_BN_MOMENTUM;
        for (int64_t c = 0; c < K; ++c) {
            const double erm = (1.0 - m) * w->rmean[c] + m * bn_mean[c];
            const double erv = (1.0 - m) * w->rvar[c] + m * bn_var[c] * M / (M - 1.0);
            const double e1 = fabs(rm[c] - erm), e2 = fabs(rv[c] - erv);
            if (!(e1 <= atol + rtol * fabs(erm)) || !(e2 <= atol + rtol * fabs(erv)))
                ++res->bad;
            res->stats_err = fmax(res->stats_err, fmax(isfinite(e1) ? e1 : INFINITY, isfinite(e2) ? e2 : INFINITY));
        }
    }
}

void cli_check_full(const workload_t *w, const float *dst, const float *ref, double atol, double rtol,
                    check_result_t *res)
{
    acc_t total = {0, -1, 0.0, 0.0, 0.0};
    memset(res, 0, sizeof *res);
#pragma omp parallel
    {
        acc_t a = {0, -1, 0.0, 0.0, 0.0};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < w->dst_n; ++i)
            acc_add(&a, i, dst[i], ref[i], atol, rtol);
#pragma omp critical
        acc_merge(&total, &a);
    }
    result_from(res, &total);
    res->positions = w->dst_n;
    res->pixels = w->desc.n * w->oh * w->ow;
}
