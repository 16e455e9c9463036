/* The problems (KernelBench level 2 #91 and #73) and their seeded inputs.
 *
 * Inputs come from a counter-based PRNG (splitmix64 of seed, stream, index), so `python -m convfuse run ...`
 * (python/convfuse/__main__.py) builds the same tensors bit for bit and prints the same checksum. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes are KernelBench's current ones (level 2, after the 2025-07 resize). */
const problem_t cli_problems[] = {
    {"kb2-91", "ConvTranspose2d(64->128, k4, s2, p1, op1) -> softmax(dim=1) -> +bias -> *2 -> sigmoid",
     CF_CONV_TRANSPOSE_2D, 128, 64, 64, 64, 128, 4, 2, 1, 1, 2.0, 0},
    {"kb2-73", "Conv2d(8->64, k3) -> BatchNorm2d(64) -> *2", CF_CONV_2D, 128, 8, 128, 128, 64, 3, 1, 0, 0, 2.0, 1},
};
const int cli_problem_count = (int)(sizeof cli_problems / sizeof cli_problems[0]);

const problem_t *cli_problem_find(const char *name)
{
    for (int i = 0; i < cli_problem_count; ++i)
        if (!strcmp(name, cli_problems[i].name))
            return &cli_problems[i];
    return NULL;
}

static uint64_t splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t cli_rng_bits(uint64_t seed, uint64_t stream, uint64_t i)
{
    const uint64_t key = splitmix64(seed ^ (stream * 0xD1B54A32D192ED03ull));
    return splitmix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

/* Uniform in [0, 1) with 24 random bits: exact in float and in double. */
double cli_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return (double)(cli_rng_bits(seed, stream, i) >> 40) * 0x1p-24;
}

/* torch.rand-like: uniform [0, 1). */
static void fill_rand(float *p, int64_t count, uint64_t seed, uint64_t stream)
{
    for (int64_t i = 0; i < count; ++i)
        p[i] = (float)cli_rng_uniform(seed, stream, (uint64_t)i);
}

/* PyTorch's default conv init: uniform in (-bound, bound), bound = 1 / sqrt(fan_in). */
static void fill_uniform_bound(float *p, int64_t count, uint64_t seed, uint64_t stream, int64_t fan_in)
{
    const double bound = 1.0 / sqrt((double)fan_in);
    for (int64_t i = 0; i < count; ++i)
        p[i] = (float)((2.0 * cli_rng_uniform(seed, stream, (uint64_t)i) - 1.0) * bound);
}

/* torch.randn-like: Irwin-Hall sum of 12 uniforms minus 6 (mean 0, variance 1), exact in double. */
static void fill_randn_like(float *p, int64_t count, uint64_t seed, uint64_t stream)
{
    for (int64_t i = 0; i < count; ++i) {
        double s = 0.0;
        for (int j = 0; j < 12; ++j)
            s += cli_rng_uniform(seed, stream, (uint64_t)(12 * i + j));
        p[i] = (float)(s - 6.0);
    }
}

static float *alloc_floats(int64_t count)
{
    return count > 0 ? calloc((size_t)count, sizeof(float)) : NULL;
}

int cli_workload_init(workload_t *w, const problem_t *p, int64_t n, int64_t c_in, int64_t h, int64_t w_, uint64_t seed,
                      cf_bn_mode_t mode)
{
    memset(w, 0, sizeof *w);
    w->p = p;
    w->seed = seed;
    w->bn_mode = mode;
    cf_conv_desc_init(&w->desc, p->kind, n, c_in, h, w_, p->c_out, p->k, p->k);
    w->desc.stride_h = w->desc.stride_w = p->stride;
    w->desc.pad_h = w->desc.pad_w = p->pad;
    w->desc.out_pad_h = w->desc.out_pad_w = p->out_pad;
    if (cf_conv_desc_output_dims(&w->desc, &w->oh, &w->ow) != CF_STATUS_SUCCESS)
        return -2;
    const int64_t c_out = p->c_out;
    w->src_n = n * c_in * h * w_;
    w->wei_n = c_in * c_out * p->k * p->k;
    w->dst_n = n * c_out * w->oh * w->ow;
    w->src = alloc_floats(w->src_n);
    w->wei = alloc_floats(w->wei_n);
    w->bia = alloc_floats(c_out);
    if (!w->src || !w->wei || !w->bia)
        return -1;
    /* PyTorch computes fan_in from weight.size(1): C_in for Conv2d, C_out for ConvTranspose2d. */
    const int64_t fan_in = (p->kind == CF_CONV_2D ? c_in : c_out) * p->k * p->k;
    fill_rand(w->src, w->src_n, seed, STREAM_X);
    fill_uniform_bound(w->wei, w->wei_n, seed, STREAM_WEI, fan_in);
    fill_uniform_bound(w->bia, c_out, seed, STREAM_BIA, fan_in);
    if (p->batch_norm) {
        w->gamma = alloc_floats(c_out);
        w->beta = alloc_floats(c_out);
        w->rmean = alloc_floats(c_out);
        w->rvar = alloc_floats(c_out);
        if (!w->gamma || !w->beta || !w->rmean || !w->rvar)
            return -1;
        for (int64_t c = 0; c < c_out; ++c) { /* nn.BatchNorm2d's initial state */
            w->gamma[c] = 1.0f;
            w->rvar[c] = 1.0f;
        }
    } else {
        w->vec = alloc_floats(c_out);
        if (!w->vec)
            return -1;
        fill_randn_like(w->vec, c_out, seed, STREAM_CHANNEL);
    }
    return 0;
}

void cli_workload_free(workload_t *w)
{
    free(w->src);
    free(w->wei);
    free(w->bia);
    free(w->vec);
    free(w->gamma);
    free(w->beta);
    free(w->rmean);
    free(w->rvar);
    memset(w, 0, sizeof *w);
}

cf_status_t cli_workload_chain(const workload_t *w, cf_chain_t *chain)
{
    cf_status_t st = cf_chain_create(chain);
    if (st != CF_STATUS_SUCCESS)
        return st;
    if (w->p->batch_norm) {
        if ((st = cf_chain_append_batch_norm(*chain, w->bn_mode, CLI_BN_EPS, CLI_BN_MOMENTUM)) != CF_STATUS_SUCCESS)
            return st;
        return cf_chain_append_mul_scalar(*chain, w->p->scale);
    }
    if ((st = cf_chain_append_softmax_channels(*chain)) != CF_STATUS_SUCCESS ||
        (st = cf_chain_append_add_channel(*chain)) != CF_STATUS_SUCCESS ||
        (st = cf_chain_append_mul_scalar(*chain, w->p->scale)) != CF_STATUS_SUCCESS)
        return st;
    return cf_chain_append_sigmoid(*chain);
}

void cli_workload_args(const workload_t *w, cf_args_t *args, const float *src, const float *wei, const float *bia,
                       float *dst, const float *vec, const float *gamma, const float *beta, float *rmean, float *rvar,
                       int64_t *nbt)
{
    memset(args, 0, sizeof *args);
    args->src = src;
    args->wei = wei;
    args->bia = bia;
    args->dst = dst;
    if (w->p->batch_norm) {
        args->ops[0].channel_a = gamma;
        args->ops[0].channel_b = beta;
        args->ops[0].running_mean = rmean;
        args->ops[0].running_var = rvar;
        args->ops[0].num_batches_tracked = nbt;
    } else {
        args->ops[1].channel_a = vec;
    }
}
