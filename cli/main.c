/*
 * convfuse: the command-line tool. Runs the library's main jobs (KernelBench level-2 problems 91 and 73) on seeded
 * inputs and prints the implementation, the time and a checksum.
 *
 *   convfuse run kb2-91                 ConvTranspose2d -> softmax(C) -> +bias -> *2 -> sigmoid
 *   convfuse run kb2-73 --mode train    Conv2d -> BatchNorm2d -> *2
 *
 * Inputs come from a counter-based PRNG (splitmix64 of seed, stream, index), so `python -m convfuse run ...`
 * (python/convfuse/__main__.py) builds the same tensors bit for bit and prints the same checksum.
 *
 * Exit codes: 0 ok; 1 run error or failed output check; 2 usage error.
 *
 * Plain C11 without CUDA headers: it cannot allocate device memory yet, so it runs the CPU backend even where
 * CUDA is available, and says so. (The CUDA run is the lead's to add.)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "convfuse.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_OK = 0, EXIT_RUN_ERROR = 1, EXIT_USAGE = 2 };

#define CLI_REDUCED_BATCH 2 /* CPU runs default to this batch: the full shapes take minutes on the reference */

/* ---------------------------------------------------------------------------------------------------------- */
/* The problems. Sizes are KernelBench's current ones (level 2, after the 2025-07 resize). */

typedef struct problem {
    const char *name;
    const char *title;
    cf_conv_kind_t kind;
    int64_t n, c_in, h, w, c_out, k, stride, pad, out_pad;
    double scale;
    int batch_norm; /* 0: kb2-91 chain; 1: kb2-73 chain */
} problem_t;

static const problem_t problems[] = {
    {"kb2-91", "ConvTranspose2d(64->128, k4, s2, p1, op1) -> softmax(dim=1) -> +bias -> *2 -> sigmoid",
     CF_CONV_TRANSPOSE_2D, 128, 64, 64, 64, 128, 4, 2, 1, 1, 2.0, 0},
    {"kb2-73", "Conv2d(8->64, k3) -> BatchNorm2d(64) -> *2", CF_CONV_2D, 128, 8, 128, 128, 64, 3, 1, 0, 0, 2.0, 1},
};
#define N_PROBLEMS ((int)(sizeof problems / sizeof problems[0]))

/* ---------------------------------------------------------------------------------------------------------- */
/* Seeded inputs. Counter-based so that any element can be produced independently (and vectorised in Python). */

enum { STREAM_X = 1, STREAM_WEI = 2, STREAM_BIA = 3, STREAM_CHANNEL = 4 };

static uint64_t splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits: exact in float and in double. */
static double rng_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    const uint64_t key = splitmix64(seed ^ (stream * 0xD1B54A32D192ED03ull));
    return (double)(splitmix64(key + (i + 1) * 0x9E3779B97F4A7C15ull) >> 40) * 0x1p-24;
}

/* torch.rand-like: uniform [0, 1). */
static void fill_rand(float *p, int64_t count, uint64_t seed, uint64_t stream)
{
    for (int64_t i = 0; i < count; ++i)
        p[i] = (float)rng_uniform(seed, stream, (uint64_t)i);
}

/* PyTorch's default conv init: uniform in (-bound, bound), bound = 1 / sqrt(fan_in). */
static void fill_uniform_bound(float *p, int64_t count, uint64_t seed, uint64_t stream, int64_t fan_in)
{
    const double bound = 1.0 / sqrt((double)fan_in);
    for (int64_t i = 0; i < count; ++i)
        p[i] = (float)((2.0 * rng_uniform(seed, stream, (uint64_t)i) - 1.0) * bound);
}

/* torch.randn-like: Irwin-Hall sum of 12 uniforms minus 6 (mean 0, variance 1), exact in double. */
static void fill_randn_like(float *p, int64_t count, uint64_t seed, uint64_t stream)
{
    for (int64_t i = 0; i < count; ++i) {
        double s = 0.0;
        for (int j = 0; j < 12; ++j)
            s += rng_uniform(seed, stream, (uint64_t)(12 * i + j));
        p[i] = (float)(s - 6.0);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Help. */

static void print_main_help(FILE *f)
{
    fprintf(f,
            "usage: convfuse [--help] [--version] <command> [args]\n"
            "\n"
            "A convolution and the chain of ops after it, as one fused kernel.\n"
            "\n"
            "commands:\n"
            "  run <problem> [options]   run a problem on seeded inputs; print impl, time, checksum\n"
            "  info                      library version, build flags, available backends\n"
            "\n"
            "problems:\n");
    for (int i = 0; i < N_PROBLEMS; ++i)
        fprintf(f, "  %-8s %s\n", problems[i].name, problems[i].title);
    fprintf(f,
            "\n"
            "exit codes: 0 ok, 1 run error or failed output check, 2 usage error.\n"
            "`convfuse run --help` and `convfuse run <problem> --help` describe the options.\n");
}

static void print_run_help(FILE *f, const problem_t *p)
{
    if (p)
        fprintf(f, "usage: convfuse run %s [options]\n\n%s\nfull shape: N=%lld, C_in=%lld, H=W=%lld, C_out=%lld\n\n",
                p->name, p->title, (long long)p->n, (long long)p->c_in, (long long)p->h, (long long)p->c_out);
    else
        fprintf(f, "usage: convfuse run <kb2-91|kb2-73> [options]\n\n");
    fprintf(f,
            "options:\n"
            "  --batch N          batch size (default: the full shape on CUDA, N=%d on the CPU backend)\n"
            "  --backend B        auto (default: CUDA if available, else CPU), cpu, cuda\n"
            "  --math M           default, tf32, strict (CUDA products; the CPU backend accumulates in double)\n"
            "  --seed S           input seed (default 0)\n"
            "  --repeat R         timed runs (default 1); the time printed is the median\n",
            CLI_REDUCED_BATCH);
    if (!p || p->batch_norm)
        fprintf(f, "  --mode train|eval  kb2-73: BatchNorm in training (batch statistics, default) or eval mode\n");
    fprintf(f,
            "\nInputs are uniform [0,1) like torch.rand; conv weights and bias uniform in +-1/sqrt(fan_in) like\n"
            "PyTorch's default init; kb2-91's channel bias is randn-like; BatchNorm starts as nn.BatchNorm2d does.\n"
            "exit codes: 0 ok, 1 run error or failed output check, 2 usage error.\n");
}

static int print_info(void)
{
    int cuda = 0;
    cf_backend_available(CF_BACKEND_CUDA, &cuda);
    printf("convfuse %s\n", cf_version_string());
    printf("backends: cpu%s\n", cuda ? ", cuda" : " (cuda: not built in or no sm_90 device)");
    return EXIT_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* run */

typedef struct run_options {
    int64_t batch; /* 0 = default */
    cf_backend_t backend;
    int backend_auto;
    cf_math_t math;
    uint64_t seed;
    int repeat;
    cf_bn_mode_t bn_mode;
} run_options_t;

static int parse_int(const char *s, const char *what, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "convfuse: %s: expected an integer in [%lld, %lld], got '%s'\n", what, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *xcalloc(int64_t count, size_t size)
{
    return count > 0 ? calloc((size_t)count, size) : NULL;
}

#define TRY(call)                                                                                                  \
    do {                                                                                                           \
        cf_status_t st_ = (call);                                                                                  \
        if (st_ != CF_STATUS_SUCCESS) {                                                                            \
            fprintf(stderr, "convfuse: %s failed: %s: %s\n", #call, cf_status_string(st_), cf_last_error());      \
            goto done;                                                                                             \
        }                                                                                                          \
    } while (0)

static int run_problem(const problem_t *p, const run_options_t *o)
{
    int rc = EXIT_RUN_ERROR;
    cf_chain_t chain = NULL;
    cf_plan_t plan = NULL;
    float *x = NULL, *wei = NULL, *bia = NULL, *vec = NULL, *dst = NULL;
    float *gamma = NULL, *beta = NULL, *rmean = NULL, *rvar = NULL;
    int64_t nbt = 0;
    double *times = NULL;

    int cuda = 0;
    cf_backend_available(CF_BACKEND_CUDA, &cuda);
    if (!o->backend_auto && o->backend == CF_BACKEND_CUDA) {
        fprintf(stderr, "convfuse: --backend cuda: %s\n",
                cuda ? "the CLI's CUDA run is not implemented yet (use `python -m convfuse run`)"
                     : "CUDA backend unavailable (not built in, or no sm_90 device)");
        return EXIT_RUN_ERROR;
    }
    const cf_backend_t backend = CF_BACKEND_CPU;
    const int64_t n = o->batch ? o->batch : CLI_REDUCED_BATCH;

    printf("convfuse run %s: %s\n", p->name, p->title);
    if (o->backend_auto && cuda)
        printf("note: CUDA device present, but the CLI's CUDA run comes later: CPU backend");
    else if (o->backend_auto)
        printf("note: no CUDA device: CPU backend");
    else
        printf("note: CPU backend (--backend cpu)");
    if (n != p->n)
        printf(" at reduced shape N=%lld (full shape N=%lld)", (long long)n, (long long)p->n);
    printf("\n");

    cf_conv_desc_t desc;
    TRY(cf_conv_desc_init(&desc, p->kind, n, p->c_in, p->h, p->w, p->c_out, p->k, p->k));
    desc.stride_h = desc.stride_w = p->stride;
    desc.pad_h = desc.pad_w = p->pad;
    desc.out_pad_h = desc.out_pad_w = p->out_pad;
    int64_t oh = 0, ow = 0;
    TRY(cf_conv_desc_output_dims(&desc, &oh, &ow));

    TRY(cf_chain_create(&chain));
    if (p->batch_norm) {
        TRY(cf_chain_append_batch_norm(chain, o->bn_mode, 1e-5, 0.1));
        TRY(cf_chain_append_mul_scalar(chain, p->scale));
    } else {
        TRY(cf_chain_append_softmax_channels(chain));
        TRY(cf_chain_append_add_channel(chain));
        TRY(cf_chain_append_mul_scalar(chain, p->scale));
        TRY(cf_chain_append_sigmoid(chain));
    }
    TRY(cf_plan_create(&plan, &desc, chain, backend, o->math));
    const char *impl = NULL;
    TRY(cf_plan_impl_name(plan, &impl));

    const int64_t src_n = n * p->c_in * p->h * p->w, wei_n = p->c_in * p->c_out * p->k * p->k;
    const int64_t dst_n = n * p->c_out * oh * ow;
    /* PyTorch computes fan_in from weight.size(1): C_in for Conv2d, C_out for ConvTranspose2d. */
    const int64_t fan_in = (p->kind == CF_CONV_2D ? p->c_in : p->c_out) * p->k * p->k;
    x = xcalloc(src_n, sizeof *x);
    wei = xcalloc(wei_n, sizeof *wei);
    bia = xcalloc(p->c_out, sizeof *bia);
    dst = xcalloc(dst_n, sizeof *dst);
    times = xcalloc(o->repeat, sizeof *times);
    if (!x || !wei || !bia || !dst || !times) {
        fprintf(stderr, "convfuse: out of host memory for N=%lld\n", (long long)n);
        goto done;
    }
    fill_rand(x, src_n, o->seed, STREAM_X);
    fill_uniform_bound(wei, wei_n, o->seed, STREAM_WEI, fan_in);
    fill_uniform_bound(bia, p->c_out, o->seed, STREAM_BIA, fan_in);

    cf_args_t args;
    memset(&args, 0, sizeof args);
    args.src = x;
    args.wei = wei;
    args.bia = bia;
    args.dst = dst;
    if (p->batch_norm) {
        gamma = xcalloc(p->c_out, sizeof *gamma);
        beta = xcalloc(p->c_out, sizeof *beta);
        rmean = xcalloc(p->c_out, sizeof *rmean);
        rvar = xcalloc(p->c_out, sizeof *rvar);
        if (!gamma || !beta || !rmean || !rvar)
            goto done;
        for (int64_t c = 0; c < p->c_out; ++c) { /* nn.BatchNorm2d's initial state */
            gamma[c] = 1.0f;
            rvar[c] = 1.0f;
        }
        args.ops[0].channel_a = gamma;
        args.ops[0].channel_b = beta;
        args.ops[0].running_mean = rmean;
        args.ops[0].running_var = rvar;
        args.ops[0].num_batches_tracked = &nbt;
    } else {
        vec = xcalloc(p->c_out, sizeof *vec);
        if (!vec)
            goto done;
        fill_randn_like(vec, p->c_out, o->seed, STREAM_CHANNEL);
        args.ops[1].channel_a = vec;
    }

    for (int r = 0; r < o->repeat; ++r) {
        for (int64_t i = 0; i < dst_n; ++i) /* poison: a run that skips elements cannot pass the check */
            dst[i] = NAN;
        const double t0 = now_ms();
        TRY(cf_plan_execute(plan, &args, NULL, 0, NULL));
        times[r] = now_ms() - t0;
    }
    qsort(times, (size_t)o->repeat, sizeof *times, cmp_double);

    double sum = 0.0, asum = 0.0;
    int64_t bad = 0;
    for (int64_t i = 0; i < dst_n; ++i) {
        const double v = dst[i];
        sum += v;
        asum += fabs(v);
        if (!isfinite(v) || (!p->batch_norm && (v < 0.0 || v > 1.0)))
            ++bad;
    }
    printf("x (%lld, %lld, %lld, %lld) -> y (%lld, %lld, %lld, %lld)\n", (long long)n, (long long)p->c_in,
           (long long)p->h, (long long)p->w, (long long)n, (long long)p->c_out, (long long)oh, (long long)ow);
    printf("backend cpu, impl %s, math %s%s\n", impl,
           o->math == CF_MATH_DEFAULT ? "default" : o->math == CF_MATH_TF32 ? "tf32" : "strict",
           p->batch_norm ? (o->bn_mode == CF_BN_TRAINING ? ", batch_norm train" : ", batch_norm eval") : "");
    printf("time %.3f ms (median of %d)\n", times[o->repeat / 2], o->repeat);
    printf("checksum sum=%.10e sum|y|=%.10e\n", sum, asum);
    if (p->batch_norm && o->bn_mode == CF_BN_TRAINING) {
        double sm = 0.0, sv = 0.0;
        for (int64_t c = 0; c < p->c_out; ++c) {
            sm += rmean[c];
            sv += rvar[c];
        }
        printf("running stats sum(mean)=%.10e sum(var)=%.10e num_batches_tracked=%lld\n", sm, sv, (long long)nbt);
    }
    if (bad) {
        fprintf(stderr, "convfuse: check failed: %lld of %lld outputs non-finite%s\n", (long long)bad,
                (long long)dst_n, p->batch_norm ? "" : " or outside [0, 1]");
        goto done;
    }
    rc = EXIT_OK;

done:
    cf_plan_destroy(plan);
    cf_chain_destroy(chain);
    free(x);
    free(wei);
    free(bia);
    free(vec);
    free(dst);
    free(gamma);
    free(beta);
    free(rmean);
    free(rvar);
    free(times);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        print_run_help(argc < 1 ? stderr : stdout, NULL);
        return argc < 1 ? EXIT_USAGE : EXIT_OK;
    }
    const problem_t *p = NULL;
    for (int i = 0; i < N_PROBLEMS; ++i)
        if (!strcmp(argv[0], problems[i].name))
            p = &problems[i];
    if (!p) {
        fprintf(stderr, "convfuse run: unknown problem '%s' (kb2-91, kb2-73)\n", argv[0]);
        return EXIT_USAGE;
    }
    run_options_t o = {0, CF_BACKEND_CPU, 1, CF_MATH_DEFAULT, 0, 1, CF_BN_TRAINING};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_run_help(stdout, p);
            return EXIT_OK;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "convfuse run %s: unknown option or missing value: '%s' (see --help)\n", p->name, a);
            return EXIT_USAGE;
        }
        const char *v = argv[++i];
        long long num = 0;
        if (!strcmp(a, "--batch")) {
            if (!parse_int(v, "--batch", 1, 1 << 20, &num))
                return EXIT_USAGE;
            o.batch = num;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int(v, "--seed", 0, INT64_MAX, &num))
                return EXIT_USAGE;
            o.seed = (uint64_t)num;
        } else if (!strcmp(a, "--repeat")) {
            if (!parse_int(v, "--repeat", 1, 100000, &num))
                return EXIT_USAGE;
            o.repeat = (int)num;
        } else if (!strcmp(a, "--backend")) {
            o.backend_auto = !strcmp(v, "auto");
            if (!strcmp(v, "cpu"))
                o.backend = CF_BACKEND_CPU;
            else if (!strcmp(v, "cuda"))
                o.backend = CF_BACKEND_CUDA;
            else if (!o.backend_auto) {
                fprintf(stderr, "convfuse run: --backend: expected auto, cpu or cuda, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--math")) {
            if (!strcmp(v, "default"))
                o.math = CF_MATH_DEFAULT;
            else if (!strcmp(v, "tf32"))
                o.math = CF_MATH_TF32;
            else if (!strcmp(v, "strict"))
                o.math = CF_MATH_STRICT_F32;
            else {
                fprintf(stderr, "convfuse run: --math: expected default, tf32 or strict, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--mode") && p->batch_norm) {
            if (!strcmp(v, "train"))
                o.bn_mode = CF_BN_TRAINING;
            else if (!strcmp(v, "eval"))
                o.bn_mode = CF_BN_INFERENCE;
            else {
                fprintf(stderr, "convfuse run: --mode: expected train or eval, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "convfuse run %s: unknown option '%s' (see --help)\n", p->name, a);
            return EXIT_USAGE;
        }
    }
    return run_problem(p, &o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_main_help(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_main_help(stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("convfuse %d.%d.%d (library %s)\n", CF_VERSION_MAJOR, CF_VERSION_MINOR, CF_VERSION_PATCH,
               cf_version_string());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "info"))
        return argc == 2 ? print_info() : EXIT_USAGE;
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    fprintf(stderr, "convfuse: unknown command '%s' (see convfuse --help)\n", cmd);
    return EXIT_USAGE;
}
