/*
 * convfuse: the command-line tool. Runs the library's main jobs (KernelBench level-2 problems 91 and 73) on seeded
 * inputs, checks the fused output against an independent float64 reference, times it and prints a short table.
 *
 *   convfuse run kb2-91                 ConvTranspose2d -> softmax(C) -> +bias -> *2 -> sigmoid
 *   convfuse run kb2-73 --mode train    Conv2d -> BatchNorm2d -> *2
 *   convfuse list                       representative chains and the implementation that serves each
 *   convfuse info                       device, library version, build flags
 *
 * Exit codes: 0 ok; 1 output check failed; 2 usage error; 3 runtime or CUDA error. docs/cli.md has the details.
 * This file: commands, options and printing. Inputs: workload.c; float64 check: check.c; CUDA: cuda.c.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define DEFAULT_SAMPLES 10000      /* sampled check: pixels, every channel of each */
#define DEFAULT_FLOOR_GBS 3000.0   /* memory floor bandwidth (H100 SXM HBM3 is ~3.35 TB/s peak) */
#define FULL_CHECK_MAX_MACS 4.0e9  /* CUDA runs up to this many conv MACs are checked on the full tensor */
#define MAX_TENSOR_ELEMS (1ll << 32)

static const char *EXIT_CODES = "exit codes: 0 ok, 1 output check failed, 2 usage error, 3 runtime or CUDA error.\n";

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
            "  run <problem> [options]   run a problem on seeded inputs: check against float64, time, print a table\n"
            "  list                      representative chains and the implementation that serves each (or why none)\n"
            "  info                      CUDA device, library version, build flags, available backends\n"
            "\n"
            "problems:\n");
    for (int i = 0; i < cli_problem_count; ++i)
        fprintf(f, "  %-8s %s\n", cli_problems[i].name, cli_problems[i].title);
    fprintf(f, "\n%s`convfuse <command> --help` describes each command; docs/cli.md has the details.\n", EXIT_CODES);
}

static void print_run_help(FILE *f, const problem_t *p)
{
    if (p)
        fprintf(f, "usage: convfuse run %s [options]\n\n%s\nfull shape: N=%lld, C_in=%lld, H=W=%lld, C_out=%lld\n\n",
                p->name, p->title, (long long)p->n, (long long)p->c_in, (long long)p->h, (long long)p->c_out);
    else
        fprintf(f, "usage: convfuse run <kb2-91|kb2-73> [options]\n\n");
    fprintf(f,
            "Builds seeded inputs, runs the fused path once on NaN-poisoned output, checks it against a float64\n"
            "reference, times it and prints: time, achieved GB/s, %% of the memory floor, max abs error.\n"
            "\n"
            "options:\n"
            "  --device D         cuda or cpu (default: cuda when available, else cpu at a reduced shape)\n"
            "  --shape N,C,H,W    input shape (C = input channels; C_out is the problem's). Default: the full\n"
            "                     shape on CUDA, N=%d on the CPU backend\n"
            "  --batch N          change only N\n"
            "  --strict-fp32      fp32-grade products (CF_MATH_STRICT_F32, 3xTF32) instead of the default\n"
            "  --math M           default, tf32 or strict (--strict-fp32 = --math strict)\n"
            "  --iters N          timed runs, median reported (default 20 on CUDA, 1 on the CPU backend)\n"
            "  --warmup N         untimed runs first (default 3 on CUDA, 0 on the CPU backend)\n"
            "  --check C          auto (default), full or sample: see below\n"
            "  --samples K        pixels in the sampled check, every channel of each (default %d)\n"
            "  --tol T            pass if |got - ref| <= T + T*|ref| everywhere (default: 1e-4 for fp32-grade\n"
            "                     products, 5e-3 for TF32, 1e-5 for the CPU backend)\n"
            "  --bw GBS           memory-floor bandwidth in GB/s (default %.0f)\n"
            "  --no-flush         do not flush L2 between timed CUDA runs\n"
            "  --seed S           input seed (default 0)\n"
            "  --json             print one JSON object instead of the table\n"
            "  --backend B        auto, cpu or cuda (older spelling of --device); --repeat R = --iters R\n",
            CLI_REDUCED_BATCH, DEFAULT_SAMPLES, DEFAULT_FLOOR_GBS);
    if (!p || p->batch_norm)
        fprintf(f, "  --mode train|eval  kb2-73: BatchNorm in training (batch statistics, default) or eval mode\n");
    fprintf(f,
            "\n"
            "check: 'full' compares every output value: on CUDA with the CPU backend (float64 accumulation), on\n"
            "the CPU backend with the CLI's own direct float64 formula at every pixel. 'sample' evaluates the\n"
            "direct float64 formula at K seeded pixels (every channel of each: >= 10,000 values). For training\n"
            "BatchNorm the batch mean/variance are computed exactly in float64 over the whole batch, and the\n"
            "running statistics after one call are compared too. 'auto': full on CUDA up to %.0e conv MACs,\n"
            "else sample.\n"
            "time: CUDA events, median after warm-up, L2 flushed before each run. bytes = input + output +\n"
            "weights; floor = bytes / bandwidth; %% of floor = floor / time.\n"
            "\n"
            "Inputs are uniform [0,1) like torch.rand; conv weights and bias uniform in +-1/sqrt(fan_in) like\n"
            "PyTorch's default init; kb2-91's channel bias is randn-like; BatchNorm starts as nn.BatchNorm2d does.\n"
            "%s",
            FULL_CHECK_MAX_MACS, EXIT_CODES);
}

static void print_list_help(FILE *f)
{
    fprintf(f,
            "usage: convfuse list\n"
            "\n"
            "Creates plans for representative chains on the CPU backend and, when available, on the CUDA backend\n"
            "(default and strict math) and prints the implementation each chose (cf_plan_impl_name), or the\n"
            "refusal message. Touches no device memory.\n"
            "Line format: n<N>c<C_in>h<H>w<W>k<C_out>r<kernel>s<stride>p<pad>[op<out_pad>][g<groups>][t = transposed]\n"
            "%s",
            EXIT_CODES);
}

static void print_info_help(FILE *f)
{
    fprintf(f,
            "usage: convfuse info\n"
            "\n"
            "Prints the library version (cf_version_string), the build flags of the library and of this tool, the\n"
            "CUDA device (name, compute capability, SM count) when there is one, and the available backends.\n"
            "%s",
            EXIT_CODES);
}

static int is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Small helpers. */

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

static int parse_double(const char *s, const char *what, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "convfuse: %s: expected a number in [%g, %g], got '%s'\n", what, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

/* "N,C,H,W": four integers in [1, 2^20]. */
static int parse_shape(const char *s, int64_t dims[4])
{
    const char *q = s;
    for (int i = 0; i < 4; ++i) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(q, &end, 10);
        const char want = i < 3 ? ',' : '\0';
        if (errno || end == q || *end != want || v < 1 || v > (1 << 20)) {
            fprintf(stderr, "convfuse run: --shape: expected N,C,H,W (four integers in [1, %d]), got '%s'\n", 1 << 20,
                    s);
            return 0;
        }
        dims[i] = v;
        q = end + 1;
    }
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

static int threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static const char *math_name(cf_math_t m)
{
    return m == CF_MATH_DEFAULT ? "default" : m == CF_MATH_TF32 ? "tf32" : "strict";
}

/* A JSON number, or null for NaN/inf (JSON has neither). */
static void json_num(FILE *f, const char *key, double v, int last)
{
    if (isfinite(v))
        fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
    else
        fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

static void json_str(FILE *f, const char *key, const char *v, int last)
{
    fprintf(f, "\"%s\": \"", key);
    for (const char *c = v; *c; ++c) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            fprintf(f, "\\u%04x", (unsigned)*c);
        else
            fputc(*c, f);
    }
    fprintf(f, "\"%s", last ? "" : ", ");
}

/* Is CUDA usable? If not, why (the library's own message). */
static int cuda_usable(char *why, size_t why_size)
{
    int avail = 0;
    cf_backend_available(CF_BACKEND_CUDA, &avail);
    if (avail)
        return 1;
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 3, 3, 1, 3, 3);
    cf_plan_t plan = NULL;
    cf_status_t st = cf_plan_create(&plan, &d, NULL, CF_BACKEND_CUDA, CF_MATH_DEFAULT);
    if (st == CF_STATUS_SUCCESS) {
        cf_plan_destroy(plan);
        snprintf(why, why_size, "the library reports the CUDA backend unavailable");
    } else {
        snprintf(why, why_size, "%s", cf_last_error());
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* info */

static int cmd_info(int argc, char **argv)
{
    if (argc > 0) {
        if (is_help(argv[0])) {
            print_info_help(stdout);
            return EXIT_OK;
        }
        fprintf(stderr, "convfuse info: unexpected argument '%s' (see convfuse info --help)\n", argv[0]);
        return EXIT_USAGE;
    }
    printf("convfuse %s\n", cf_version_string());
    printf("library version %d (header %d)%s\n", cf_version(), CF_VERSION,
           cf_version() == CF_VERSION ? "" : "  WARNING: header/library mismatch");
    const char *flags = strchr(cf_version_string(), '(');
    printf("build flags: library %s; tool: %s, %s (%d threads)\n", flags ? flags : "(none)",
           cli_cuda_compiled() ? "CUDA runtime linked" : "cpu-only",
#ifdef _OPENMP
           "openmp",
#else
           "no openmp",
#endif
           threads());
    char name[256] = "", why[512] = "";
    int major = 0, minor = 0, sms = 0;
    if (cli_cuda_describe(name, sizeof name, &major, &minor, &sms, why, sizeof why) == 0)
        printf("cuda device: %s, compute capability %d.%d, %d SMs\n", name, major, minor, sms);
    else
        printf("cuda device: none (%s)\n", why);
    if (cuda_usable(why, sizeof why))
        printf("backends: cpu, cuda\n");
    else
        printf("backends: cpu (cuda unavailable: %s)\n", why);
    return EXIT_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* list */

typedef struct list_entry {
    const char *what;
    cf_conv_kind_t kind;
    int64_t n, c_in, h, w, c_out, k, stride, pad, out_pad, groups;
    const char *ops; /* op names (cf_op_kind_name), ',' separated; batch_norm:train|eval, mul_scalar:<s> */
} list_entry_t;

static const list_entry_t list_entries[] = {
    {"kb2-91", CF_CONV_TRANSPOSE_2D, 128, 64, 64, 64, 128, 4, 2, 1, 1, 1,
     "softmax_channels,add_channel,mul_scalar:2,sigmoid"},
    {"kb2-73 train", CF_CONV_2D, 128, 8, 128, 128, 64, 3, 1, 0, 0, 1, "batch_norm:train,mul_scalar:2"},
    {"kb2-73 eval", CF_CONV_2D, 128, 8, 128, 128, 64, 3, 1, 0, 0, 1, "batch_norm:eval,mul_scalar:2"},
    {"conv only", CF_CONV_2D, 8, 64, 56, 56, 64, 3, 1, 1, 0, 1, ""},
    {"conv + relu", CF_CONV_2D, 8, 64, 56, 56, 64, 3, 1, 1, 0, 1, "relu"},
    {"conv + bias + gelu", CF_CONV_2D, 8, 64, 56, 56, 128, 3, 2, 1, 0, 1, "add_channel,gelu"},
    {"conv + affine + tanh", CF_CONV_2D, 8, 32, 64, 64, 64, 1, 1, 0, 0, 1, "affine_channel,tanh"},
    {"convT + add + sigmoid", CF_CONV_TRANSPOSE_2D, 8, 64, 32, 32, 32, 4, 2, 1, 0, 1, "add_scalar:0.5,sigmoid"},
    {"wide softmax (C_out 1024)", CF_CONV_2D, 4, 64, 32, 32, 1024, 3, 1, 1, 0, 1, "softmax_channels,mul_scalar:2"},
    {"two softmaxes", CF_CONV_2D, 4, 16, 32, 32, 32, 3, 1, 1, 0, 1, "softmax_channels,softmax_channels"},
    {"softmax over C_out 8192", CF_CONV_2D, 1, 16, 16, 16, 8192, 1, 1, 0, 0, 1, "softmax_channels"},
    {"grouped conv (groups 2)", CF_CONV_2D, 4, 16, 32, 32, 32, 3, 1, 1, 0, 2, "relu"},
};
#define N_LIST_ENTRIES ((int)(sizeof list_entries / sizeof list_entries[0]))

_Static_assert(CF_OP_COUNT == 10, "a new chain op needs a case in append_op()");

/* Appends op "name[:arg]"; the name is matched against the library's op table (CF_OP_LIST). */
static cf_status_t append_op(cf_chain_t chain, const char *tok, size_t len)
{
    char buf[64];
    if (len >= sizeof buf)
        return CF_STATUS_INVALID_ARGUMENT;
    memcpy(buf, tok, len);
    buf[len] = '\0';
    char *arg = strchr(buf, ':');
    if (arg)
        *arg++ = '\0';
    for (int k = 0; k < CF_OP_COUNT; ++k) {
        if (strcmp(buf, cf_op_kind_name((cf_op_kind_t)k)))
            continue;
        const double s = arg ? atof(arg) : 1.0;
        switch ((cf_op_kind_t)k) {
        case CF_OP_ADD_CHANNEL: return cf_chain_append_add_channel(chain);
        case CF_OP_MUL_SCALAR: return cf_chain_append_mul_scalar(chain, s);
        case CF_OP_ADD_SCALAR: return cf_chain_append_add_scalar(chain, s);
        case CF_OP_AFFINE_CHANNEL: return cf_chain_append_affine_channel(chain);
        case CF_OP_BATCH_NORM:
            return cf_chain_append_batch_norm(chain, arg && !strcmp(arg, "eval") ? CF_BN_INFERENCE : CF_BN_TRAINING,
                                              CLI_BN_EPS, CLI_BN_MOMENTUM);
        case CF_OP_SOFTMAX_CHANNELS: return cf_chain_append_softmax_channels(chain);
        case CF_OP_SIGMOID: return cf_chain_append_sigmoid(chain);
        case CF_OP_RELU: return cf_chain_append_relu(chain);
        case CF_OP_TANH: return cf_chain_append_tanh(chain);
        case CF_OP_GELU: return cf_chain_append_gelu(chain);
        case CF_OP_COUNT: break;
        }
    }
    return CF_STATUS_INVALID_ARGUMENT;
}

/* The implementation a plan picks, or "refused: <status>: <message>" into @p out. Returns 1 when served. */
static int plan_name(const cf_conv_desc_t *d, const_cf_chain_t chain, cf_backend_t b, cf_math_t m, char *out,
                     size_t size)
{
    cf_plan_t plan = NULL;
    cf_status_t st = cf_plan_create(&plan, d, chain, b, m);
    if (st != CF_STATUS_SUCCESS) {
        snprintf(out, size, "refused: %s: %s", cf_status_string(st), cf_last_error());
        return 0;
    }
    const char *name = "?";
    cf_plan_impl_name(plan, &name);
    snprintf(out, size, "%s", name);
    cf_plan_destroy(plan);
    return 1;
}

static int cmd_list(int argc, char **argv)
{
    if (argc > 0) {
        if (is_help(argv[0])) {
            print_list_help(stdout);
            return EXIT_OK;
        }
        fprintf(stderr, "convfuse list: unexpected argument '%s' (see convfuse list --help)\n", argv[0]);
        return EXIT_USAGE;
    }
    char why[512] = "";
    const int cuda = cuda_usable(why, sizeof why);
    printf("ops: ");
    for (int k = 0; k < CF_OP_COUNT; ++k)
        printf("%s%s", cf_op_kind_name((cf_op_kind_t)k), k + 1 < CF_OP_COUNT ? ", " : "\n");
    if (!cuda)
        printf("cuda: unavailable here (%s): CPU plans only\n", why);
    printf("\n");
    int rc = EXIT_OK;
    for (int i = 0; i < N_LIST_ENTRIES; ++i) {
        const list_entry_t *e = &list_entries[i];
        cf_conv_desc_t d;
        cf_conv_desc_init(&d, e->kind, e->n, e->c_in, e->h, e->w, e->c_out, e->k, e->k);
        d.stride_h = d.stride_w = e->stride;
        d.pad_h = d.pad_w = e->pad;
        d.out_pad_h = d.out_pad_w = e->out_pad;
        d.groups = e->groups;
        cf_chain_t chain = NULL;
        cf_status_t st = cf_chain_create(&chain);
        for (const char *t = e->ops; st == CF_STATUS_SUCCESS && *t;) {
            const size_t len = strcspn(t, ",");
            st = append_op(chain, t, len);
            t += len + (t[len] == ',');
        }
        printf("%s\n  n%lldc%lldh%lldw%lldk%lldr%llds%lldp%lld", e->what, (long long)e->n, (long long)e->c_in,
               (long long)e->h, (long long)e->w, (long long)e->c_out, (long long)e->k, (long long)e->stride,
               (long long)e->pad);
        if (e->out_pad)
            printf("op%lld", (long long)e->out_pad);
        if (e->groups != 1)
            printf("g%lld", (long long)e->groups);
        printf("%s:%s\n", e->kind == CF_CONV_TRANSPOSE_2D ? "t" : "", e->ops[0] ? e->ops : "(empty chain)");
        if (st != CF_STATUS_SUCCESS) {
            printf("  chain: %s: %s\n", cf_status_string(st), cf_last_error());
            rc = EXIT_RUNTIME;
            cf_chain_destroy(chain);
            continue;
        }
        char buf[2048];
        plan_name(&d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT, buf, sizeof buf);
        printf("  cpu:          %s\n", buf);
        if (cuda) {
            plan_name(&d, chain, CF_BACKEND_CUDA, CF_MATH_DEFAULT, buf, sizeof buf);
            printf("  cuda default: %s\n", buf);
            plan_name(&d, chain, CF_BACKEND_CUDA, CF_MATH_STRICT_F32, buf, sizeof buf);
            printf("  cuda strict:  %s\n", buf);
        }
        cf_chain_destroy(chain);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* run */

typedef enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA } device_t;
typedef enum { CHECK_AUTO, CHECK_FULL, CHECK_SAMPLE } check_kind_t;

typedef struct run_options {
    const problem_t *p;
    int64_t shape[4]; /* N, C_in, H, W; shape[0] == 0: default */
    int has_shape;
    int64_t batch; /* 0: default */
    device_t device;
    cf_math_t math;
    uint64_t seed;
    int iters, warmup; /* -1: default */
    cf_bn_mode_t bn_mode;
    check_kind_t check;
    int64_t samples;
    double tol; /* < 0: default */
    double bw_gbs;
    int flush, json;
} run_options_t;

typedef struct run_report {
    const char *device, *impl, *reference, *bn_stats, *note;
    double t_median, t_p20, t_p80, t_min;
    double bytes, gbs, floor_ms, pct_floor, atol, rtol;
    double sum, asum, rm_sum, rv_sum;
    int64_t nbt;
    check_result_t chk;
    int pass;
} run_report_t;

static void print_json(const run_options_t *o, const workload_t *w, const run_report_t *r)
{
    const cf_conv_desc_t *d = &w->desc;
    printf("{");
    json_str(stdout, "problem", o->p->name, 0);
    json_str(stdout, "title", o->p->title, 0);
    printf("\"shape\": {\"n\": %lld, \"c_in\": %lld, \"h\": %lld, \"w\": %lld, \"c_out\": %lld, \"oh\": %lld, "
           "\"ow\": %lld}, ",
           (long long)d->n, (long long)d->c_in, (long long)d->h, (long long)d->w, (long long)d->c_out,
           (long long)w->oh, (long long)w->ow);
    json_str(stdout, "device", r->device, 0);
    json_str(stdout, "impl", r->impl, 0);
    json_str(stdout, "math", math_name(o->math), 0);
    if (o->p->batch_norm)
        json_str(stdout, "mode", o->bn_mode == CF_BN_TRAINING ? "train" : "eval", 0);
    json_str(stdout, "note", r->note, 0);
    printf("\"seed\": %llu, \"iters\": %d, \"warmup\": %d, ", (unsigned long long)o->seed, o->iters, o->warmup);
    printf("\"time_ms\": {");
    json_num(stdout, "median", r->t_median, 0);
    json_num(stdout, "p20", r->t_p20, 0);
    json_num(stdout, "p80", r->t_p80, 0);
    json_num(stdout, "min", r->t_min, 1);
    printf("}, ");
    json_num(stdout, "bytes", r->bytes, 0);
    json_num(stdout, "gbs", r->gbs, 0);
    json_num(stdout, "floor_bw_gbs", o->bw_gbs, 0);
    json_num(stdout, "floor_ms", r->floor_ms, 0);
    json_num(stdout, "pct_of_floor", r->pct_floor, 0);
    printf("\"check\": {");
    json_str(stdout, "reference", r->reference, 0);
    if (r->bn_stats)
        json_str(stdout, "bn_stats", r->bn_stats, 0);
    printf("\"positions\": %lld, \"pixels\": %lld, \"bad\": %lld, ", (long long)r->chk.positions,
           (long long)r->chk.pixels, (long long)r->chk.bad);
    json_num(stdout, "max_abs_err", r->chk.max_abs_err, 0);
    if (o->p->batch_norm && o->bn_mode == CF_BN_TRAINING)
        json_num(stdout, "running_stats_err", r->chk.stats_err, 0);
    json_num(stdout, "atol", r->atol, 0);
    json_num(stdout, "rtol", r->rtol, 0);
    printf("\"pass\": %s}, ", r->pass ? "true" : "false");
    printf("\"checksum\": {");
    json_num(stdout, "sum", r->sum, 0);
    json_num(stdout, "abs_sum", r->asum, 1);
    printf("}, \"exit_code\": %d}\n", r->pass ? EXIT_OK : EXIT_CHECK_FAILED);
}

static void print_table(const run_options_t *o, const workload_t *w, const run_report_t *r)
{
    const cf_conv_desc_t *d = &w->desc;
    printf("x (%lld, %lld, %lld, %lld) -> y (%lld, %lld, %lld, %lld)\n", (long long)d->n, (long long)d->c_in,
           (long long)d->h, (long long)d->w, (long long)d->n, (long long)d->c_out, (long long)w->oh, (long long)w->ow);
    printf("backend %s, impl %s, math %s%s\n", r->device, r->impl, math_name(o->math),
           o->p->batch_norm ? (o->bn_mode == CF_BN_TRAINING ? ", batch_norm train" : ", batch_norm eval") : "");
    printf("time %.4f ms (median of %d after %d warm-up; p20 %.4f, p80 %.4f)\n", r->t_median, o->iters, o->warmup,
           r->t_p20, r->t_p80);
    printf("checksum sum=%.10e sum|y|=%.10e\n", r->sum, r->asum);
    if (o->p->batch_norm && o->bn_mode == CF_BN_TRAINING)
        printf("running stats sum(mean)=%.10e sum(var)=%.10e num_batches_tracked=%lld\n", r->rm_sum, r->rv_sum,
               (long long)r->nbt);
    printf("reference: %s\n", r->reference);
    if (r->bn_stats)
        printf("bn statistics: %s\n", r->bn_stats);
    printf("bytes %.4g (input + output + weights); floor %.4f ms at %.0f GB/s\n", r->bytes, r->floor_ms, o->bw_gbs);
    printf("\n%-34s %10s %9s %8s %12s\n", "impl", "time_ms", "GB/s", "%floor", "max_abs_err");
    printf("%-34s %10.4f %9.1f %8.1f %12.3e\n\n", r->impl, r->t_median, r->gbs, r->pct_floor, r->chk.max_abs_err);
}

static int run_problem(run_options_t *o)
{
    const problem_t *p = o->p;
    char why[512] = "";
    const int cuda = cuda_usable(why, sizeof why);
    if (o->device == DEVICE_CUDA && !cuda) {
        fprintf(stderr, "convfuse: --device cuda: %s\n", why);
        return EXIT_RUNTIME;
    }
    const int on_cuda = o->device == DEVICE_CUDA || (o->device == DEVICE_AUTO && cuda);
    if (o->iters < 0)
        o->iters = on_cuda ? 20 : 1;
    if (o->warmup < 0)
        o->warmup = on_cuda ? 3 : 0;
    int64_t n = on_cuda ? p->n : CLI_REDUCED_BATCH, c_in = p->c_in, h = p->h, wd = p->w;
    if (o->has_shape) {
        n = o->shape[0];
        c_in = o->shape[1];
        h = o->shape[2];
        wd = o->shape[3];
    }
    if (o->batch)
        n = o->batch;

    /* shape sanity before allocating: the output must exist and fit in host memory */
    cf_conv_desc_t probe;
    cf_conv_desc_init(&probe, p->kind, n, c_in, h, wd, p->c_out, p->k, p->k);
    probe.stride_h = probe.stride_w = p->stride;
    probe.pad_h = probe.pad_w = p->pad;
    probe.out_pad_h = probe.out_pad_w = p->out_pad;
    int64_t poh = 0, pow_ = 0;
    if (cf_conv_desc_output_dims(&probe, &poh, &pow_) != CF_STATUS_SUCCESS) {
        fprintf(stderr, "convfuse run %s: shape N=%lld C=%lld H=%lld W=%lld: %s\n", p->name, (long long)n,
                (long long)c_in, (long long)h, (long long)wd, cf_last_error());
        return EXIT_USAGE;
    }
    if ((double)n * c_in * h * wd > (double)MAX_TENSOR_ELEMS || (double)n * p->c_out * poh * pow_ > (double)MAX_TENSOR_ELEMS) {
        fprintf(stderr, "convfuse run %s: shape N=%lld C=%lld H=%lld W=%lld: a tensor would exceed 2^32 elements\n",
                p->name, (long long)n, (long long)c_in, (long long)h, (long long)wd);
        return EXIT_USAGE;
    }

    char note[256];
    if (on_cuda)
        snprintf(note, sizeof note, "CUDA backend");
    else if (o->device == DEVICE_AUTO)
        snprintf(note, sizeof note, "no CUDA device: CPU backend");
    else
        snprintf(note, sizeof note, "CPU backend (--device cpu)");
    if (n != p->n || c_in != p->c_in || h != p->h || wd != p->w) {
        const size_t l = strlen(note);
        if (n != p->n && c_in == p->c_in && h == p->h && wd == p->w)
            snprintf(note + l, sizeof note - l, " at reduced shape N=%lld (full shape N=%lld)", (long long)n,
                     (long long)p->n);
        else
            snprintf(note + l, sizeof note - l, " at shape %lld,%lld,%lld,%lld (full shape %lld,%lld,%lld,%lld)",
                     (long long)n, (long long)c_in, (long long)h, (long long)wd, (long long)p->n, (long long)p->c_in,
                     (long long)p->h, (long long)p->w);
    } else {
        const size_t l = strlen(note);
        snprintf(note + l, sizeof note - l, " at the full shape");
    }
    if (!o->json)
        printf("convfuse run %s: %s\nnote: %s\n", p->name, p->title, note);
    fflush(stdout);

    int rc = EXIT_RUNTIME;
    workload_t w;
    cf_chain_t chain = NULL;
    cf_plan_t plan = NULL, ref_plan = NULL;
    float *dst = NULL, *ref = NULL, *rm = NULL, *rv = NULL, *ref_rm = NULL, *ref_rv = NULL;
    double *times = NULL, *bn_mean = NULL, *bn_var = NULL;
    int64_t nbt = 0, ref_nbt = 0;
    run_report_t r;
    memset(&r, 0, sizeof r);
    r.note = note;
    r.device = on_cuda ? "cuda" : "cpu";

    progress_t *pr = progress_begin("building seeded inputs", 0);
    const int wst = cli_workload_init(&w, p, n, c_in, h, wd, o->seed, o->bn_mode);
    progress_end(pr);
    if (wst != 0) {
        fprintf(stderr, "convfuse: out of host memory for the inputs\n");
        goto done;
    }
    const int64_t K = p->c_out;
    dst = calloc((size_t)w.dst_n, sizeof *dst);
    times = calloc((size_t)o->iters, sizeof *times);
    rm = calloc((size_t)K, sizeof *rm);
    rv = calloc((size_t)K, sizeof *rv);
    if (!dst || !times || !rm || !rv) {
        fprintf(stderr, "convfuse: out of host memory for the output\n");
        goto done;
    }

    cf_status_t st = cli_workload_chain(&w, &chain);
    if (st == CF_STATUS_SUCCESS)
        st = cf_plan_create(&plan, &w.desc, chain, on_cuda ? CF_BACKEND_CUDA : CF_BACKEND_CPU, o->math);
    if (st != CF_STATUS_SUCCESS) {
        fprintf(stderr, "convfuse: cf_plan_create: %s: %s\n", cf_status_string(st), cf_last_error());
        goto done;
    }
    cf_plan_impl_name(plan, &r.impl);

    /* ---- the fused run: one checked call, then the timed ones */
    if (on_cuda) {
        const cuda_timing_t t = {o->warmup, o->iters, o->flush};
        if (cli_cuda_run(&w, plan, &t, dst, rm, rv, &nbt, times) != 0)
            goto done;
    } else {
        float *crm = calloc((size_t)K, sizeof *crm), *crv = calloc((size_t)K, sizeof *crv);
        if (!crm || !crv) {
            free(crm);
            free(crv);
            goto done;
        }
        if (w.rmean) {
            memcpy(crm, w.rmean, sizeof(float) * (size_t)K);
            memcpy(crv, w.rvar, sizeof(float) * (size_t)K);
        }
        int64_t cnbt = 0;
        cf_args_t args;
        cli_workload_args(&w, &args, w.src, w.wei, w.bia, dst, w.vec, w.gamma, w.beta, crm, crv, &cnbt);
        for (int64_t i = 0; i < w.dst_n; ++i) /* poison: a run that skips elements cannot pass the check */
            dst[i] = NAN;
        pr = progress_begin("fused run on the CPU backend", o->warmup + o->iters);
        for (int i = 0; i < o->warmup + o->iters && st == CF_STATUS_SUCCESS; ++i) {
            const double t0 = now_ms();
            st = cf_plan_execute(plan, &args, NULL, 0, NULL);
            if (i >= o->warmup)
                times[i - o->warmup] = now_ms() - t0;
            if (i == 0) { /* running statistics after one call, for the check */
                memcpy(rm, crm, sizeof(float) * (size_t)K);
                memcpy(rv, crv, sizeof(float) * (size_t)K);
                nbt = cnbt;
            }
            progress_add(pr, 1);
        }
        progress_end(pr);
        free(crm);
        free(crv);
        if (st != CF_STATUS_SUCCESS) {
            fprintf(stderr, "convfuse: cf_plan_execute: %s: %s\n", cf_status_string(st), cf_last_error());
            goto done;
        }
    }
    qsort(times, (size_t)o->iters, sizeof *times, cmp_double);
    r.t_median = o->iters % 2 ? times[o->iters / 2] : 0.5 * (times[o->iters / 2 - 1] + times[o->iters / 2]);
    r.t_p20 = times[o->iters / 5];
    r.t_p80 = times[(4 * o->iters) / 5 < o->iters ? (4 * o->iters) / 5 : o->iters - 1];
    r.t_min = times[0];
    r.bytes = 4.0 * (double)(w.src_n + w.dst_n + w.wei_n);
    r.gbs = r.bytes / (r.t_median * 1e-3) / 1e9;
    r.floor_ms = r.bytes / (o->bw_gbs * 1e9) * 1e3;
    r.pct_floor = 100.0 * r.floor_ms / r.t_median;
    for (int64_t i = 0; i < w.dst_n; ++i) {
        r.sum += dst[i];
        r.asum += fabs((double)dst[i]);
    }
    const int bn_train = p->batch_norm && o->bn_mode == CF_BN_TRAINING;
    if (bn_train)
        for (int64_t c = 0; c < K; ++c) {
            r.rm_sum += rm[c];
            r.rv_sum += rv[c];
        }
    r.nbt = nbt;

    /* ---- the check */
    if (o->tol >= 0)
        r.atol = r.rtol = o->tol;
    else if (!on_cuda)
        r.atol = r.rtol = 1e-5;
    else
        r.atol = r.rtol = (o->math == CF_MATH_STRICT_F32 || strstr(r.impl, "3xtf32")) ? 1e-4 : 5e-3;
    const double macs = (double)w.dst_n * (double)c_in * (double)(p->k * p->k) /
                        (p->kind == CF_CONV_TRANSPOSE_2D ? (double)(p->stride * p->stride) : 1.0);
    check_kind_t ck = o->check;
    if (ck == CHECK_AUTO)
        ck = on_cuda && macs <= FULL_CHECK_MAX_MACS ? CHECK_FULL : CHECK_SAMPLE;
    static char ref_desc[256];
    if (ck == CHECK_FULL && on_cuda) {
        ref = calloc((size_t)w.dst_n, sizeof *ref);
        ref_rm = calloc((size_t)K, sizeof *ref_rm);
        ref_rv = calloc((size_t)K, sizeof *ref_rv);
        if (!ref || !ref_rm || !ref_rv) {
            fprintf(stderr, "convfuse: out of host memory for the reference\n");
            goto done;
        }
        if (w.rmean) {
            memcpy(ref_rm, w.rmean, sizeof(float) * (size_t)K);
            memcpy(ref_rv, w.rvar, sizeof(float) * (size_t)K);
        }
        st = cf_plan_create(&ref_plan, &w.desc, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT);
        if (st == CF_STATUS_SUCCESS) {
            cf_args_t args;
            cli_workload_args(&w, &args, w.src, w.wei, w.bia, ref, w.vec, w.gamma, w.beta, ref_rm, ref_rv, &ref_nbt);
            pr = progress_begin("reference: CPU backend (float64 accumulation, full tensor)", 0);
            st = cf_plan_execute(ref_plan, &args, NULL, 0, NULL);
            progress_end(pr);
        }
        if (st != CF_STATUS_SUCCESS) {
            fprintf(stderr, "convfuse: CPU reference: %s: %s\n", cf_status_string(st), cf_last_error());
            goto done;
        }
        cli_check_full(&w, dst, ref, r.atol, r.rtol, &r.chk);
        if (bn_train) { /* the running statistics after one call from the same state */
            for (int64_t c = 0; c < K; ++c) {
                const double e1 = fabs((double)rm[c] - ref_rm[c]), e2 = fabs((double)rv[c] - ref_rv[c]);
                if (!(e1 <= r.atol + r.rtol * fabs(ref_rm[c])) || !(e2 <= r.atol + r.rtol * fabs(ref_rv[c])))
                    ++r.chk.bad;
                r.chk.stats_err = fmax(r.chk.stats_err, fmax(isfinite(e1) ? e1 : INFINITY, isfinite(e2) ? e2 : INFINITY));
            }
            r.bn_stats = "from the CPU backend's run (full batch); running statistics compared after one call";
        }
        snprintf(ref_desc, sizeof ref_desc, "CPU backend cpu_reference (float64 accumulation), full tensor, %lld values",
                 (long long)r.chk.positions);
    } else {
        if (bn_train) {
            bn_mean = calloc((size_t)K, sizeof *bn_mean);
            bn_var = calloc((size_t)K, sizeof *bn_var);
            if (!bn_mean || !bn_var || cli_bn_batch_stats(&w, bn_mean, bn_var) != 0) {
                fprintf(stderr, "convfuse: out of host memory for the BN statistics\n");
                goto done;
            }
            r.bn_stats = "exact float64 over the whole batch (direct multithreaded loop); running statistics compared "
                         "after one call";
        }
        const int64_t pixels = ck == CHECK_FULL ? INT64_MAX : o->samples;
        cli_check_sample(&w, dst, pixels, r.atol, r.rtol, bn_mean, bn_var, bn_train ? rm : NULL,
                         bn_train ? rv : NULL, &r.chk);
        const int every = r.chk.pixels == w.desc.n * w.oh * w.ow;
        snprintf(ref_desc, sizeof ref_desc,
                 "direct float64 formula (the CLI's own), %s%lld pixels x %lld channels = %lld values%s",
                 every ? "every pixel: " : "seeded sample of ", (long long)r.chk.pixels, (long long)K,
                 (long long)r.chk.positions, every ? "" : " (first and last pixel included)");
    }
    r.reference = ref_desc;
    r.pass = r.chk.bad == 0;

    if (o->json) {
        print_json(o, &w, &r);
    } else {
        print_table(o, &w, &r);
        if (r.pass)
            printf("check: PASS (%lld values within %g + %g*|ref|%s)\n", (long long)r.chk.positions, r.atol, r.rtol,
                   bn_train ? "; running statistics too" : "");
        else
            printf("check: FAIL\n");
    }
    if (!r.pass) {
        const cf_conv_desc_t *d = &w.desc;
        const int64_t i = r.chk.worst_index, OW = w.ow, OH = w.oh, C = d->c_out;
        fprintf(stderr,
                "convfuse: check failed: %lld of %lld values outside %g + %g*|ref|%s; worst at (n %lld, c %lld, "
                "y %lld, x %lld): got %.9g, ref %.9g\n",
                (long long)r.chk.bad, (long long)r.chk.positions, r.atol, r.rtol,
                bn_train ? " (running statistics included)" : "", (long long)(i / (C * OH * OW)),
                (long long)(i / (OH * OW) % C), (long long)(i / OW % OH), (long long)(i % OW), r.chk.worst_got,
                r.chk.worst_ref);
        fprintf(stderr, "reproduce: convfuse run %s --shape %lld,%lld,%lld,%lld --device %s --math %s --seed %llu%s\n",
                p->name, (long long)d->n, (long long)d->c_in, (long long)d->h, (long long)d->w, r.device,
                math_name(o->math), (unsigned long long)o->seed,
                p->batch_norm ? (o->bn_mode == CF_BN_TRAINING ? " --mode train" : " --mode eval") : "");
        rc = EXIT_CHECK_FAILED;
    } else {
        rc = EXIT_OK;
    }

done:
    cf_plan_destroy(plan);
    cf_plan_destroy(ref_plan);
    cf_chain_destroy(chain);
    cli_workload_free(&w);
    free(dst);
    free(ref);
    free(rm);
    free(rv);
    free(ref_rm);
    free(ref_rv);
    free(times);
    free(bn_mean);
    free(bn_var);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 1 || is_help(argv[0])) {
        print_run_help(argc < 1 ? stderr : stdout, NULL);
        return argc < 1 ? EXIT_USAGE : EXIT_OK;
    }
    run_options_t o;
    memset(&o, 0, sizeof o);
    o.p = cli_problem_find(argv[0]);
    if (!o.p) {
        fprintf(stderr, "convfuse run: unknown problem '%s' (kb2-91, kb2-73)\n", argv[0]);
        return EXIT_USAGE;
    }
    o.device = DEVICE_AUTO;
    o.math = CF_MATH_DEFAULT;
    o.iters = o.warmup = -1;
    o.bn_mode = CF_BN_TRAINING;
    o.check = CHECK_AUTO;
    o.samples = DEFAULT_SAMPLES;
    o.tol = -1.0;
    o.bw_gbs = DEFAULT_FLOOR_GBS;
    o.flush = 1;
    const char *name = o.p->name;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (is_help(a)) {
            print_run_help(stdout, o.p);
            return EXIT_OK;
        }
        if (!strcmp(a, "--json")) {
            o.json = 1;
            continue;
        }
        if (!strcmp(a, "--strict-fp32")) {
            o.math = CF_MATH_STRICT_F32;
            continue;
        }
        if (!strcmp(a, "--no-flush")) {
            o.flush = 0;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "convfuse run %s: unknown option or missing value: '%s' (see --help)\n", name, a);
            return EXIT_USAGE;
        }
        const char *v = argv[++i];
        long long num = 0;
        if (!strcmp(a, "--batch")) {
            if (!parse_int(v, "--batch", 1, 1 << 20, &num))
                return EXIT_USAGE;
            o.batch = num;
        } else if (!strcmp(a, "--shape")) {
            if (!parse_shape(v, o.shape))
                return EXIT_USAGE;
            o.has_shape = 1;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int(v, "--seed", 0, INT64_MAX, &num))
                return EXIT_USAGE;
            o.seed = (uint64_t)num;
        } else if (!strcmp(a, "--iters") || !strcmp(a, "--repeat")) {
            if (!parse_int(v, a, 1, 100000, &num))
                return EXIT_USAGE;
            o.iters = (int)num;
        } else if (!strcmp(a, "--warmup")) {
            if (!parse_int(v, "--warmup", 0, 100000, &num))
                return EXIT_USAGE;
            o.warmup = (int)num;
        } else if (!strcmp(a, "--samples")) {
            if (!parse_int(v, "--samples", 1, 1ll << 40, &num))
                return EXIT_USAGE;
            o.samples = num;
        } else if (!strcmp(a, "--tol")) {
            if (!parse_double(v, "--tol", 0.0, 1e6, &o.tol))
                return EXIT_USAGE;
        } else if (!strcmp(a, "--bw")) {
            if (!parse_double(v, "--bw", 1e-3, 1e7, &o.bw_gbs))
                return EXIT_USAGE;
        } else if (!strcmp(a, "--device") || !strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu"))
                o.device = DEVICE_CPU;
            else if (!strcmp(v, "cuda"))
                o.device = DEVICE_CUDA;
            else if (!strcmp(v, "auto"))
                o.device = DEVICE_AUTO;
            else {
                fprintf(stderr, "convfuse run: %s: expected cuda, cpu or auto, got '%s'\n", a, v);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--check")) {
            if (!strcmp(v, "auto"))
                o.check = CHECK_AUTO;
            else if (!strcmp(v, "full"))
                o.check = CHECK_FULL;
            else if (!strcmp(v, "sample"))
                o.check = CHECK_SAMPLE;
            else {
                fprintf(stderr, "convfuse run: --check: expected auto, full or sample, got '%s'\n", v);
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
        } else if (!strcmp(a, "--mode") && o.p->batch_norm) {
            if (!strcmp(v, "train"))
                o.bn_mode = CF_BN_TRAINING;
            else if (!strcmp(v, "eval"))
                o.bn_mode = CF_BN_INFERENCE;
            else {
                fprintf(stderr, "convfuse run: --mode: expected train or eval, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "convfuse run %s: unknown option '%s' (see --help)\n", name, a);
            return EXIT_USAGE;
        }
    }
    return run_problem(&o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_main_help(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (is_help(cmd) || !strcmp(cmd, "help")) {
        print_main_help(stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("convfuse %d.%d.%d (library %s)\n", CF_VERSION_MAJOR, CF_VERSION_MINOR, CF_VERSION_PATCH,
               cf_version_string());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "list"))
        return cmd_list(argc - 2, argv + 2);
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    fprintf(stderr, "convfuse: unknown command '%s' (see convfuse --help)\n", cmd);
    return EXIT_USAGE;
}
