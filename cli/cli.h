/* The convfuse command-line tool's internal interface: the problems and their seeded inputs (workload.c), the
 * independent float64 check (check.c), the progress line (progress.c) and the CUDA run (cuda.c). */
#ifndef CONVFUSE_CLI_H
#define CONVFUSE_CLI_H

#include "convfuse.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes, documented in --help and docs/cli.md. */
enum { EXIT_OK = 0, EXIT_CHECK_FAILED = 1, EXIT_USAGE = 2, EXIT_RUNTIME = 3 };

#define CLI_REDUCED_BATCH 2 /* CPU runs default to this batch: the full shapes take minutes on the reference */

/* ---------------------------------------------------------------------------------------------------------- */
/* Problems and their inputs (workload.c) */

typedef struct problem {
    const char *name;
    const char *title;
    cf_conv_kind_t kind;
    int64_t n, c_in, h, w, c_out, k, stride, pad, out_pad;
    double scale;
    int batch_norm; /* 0: kb2-91 chain (softmax, add_channel, mul_scalar, sigmoid); 1: kb2-73 (batch_norm, mul_scalar) */
} problem_t;

extern const problem_t cli_problems[];
extern const int cli_problem_count;
const problem_t *cli_problem_find(const char *name);

#define CLI_BN_EPS 1e-5
#define CLI_BN_MOMENTUM 0.1

/* One problem at one shape with its host inputs. BatchNorm starts as nn.BatchNorm2d does. */
typedef struct workload {
    const problem_t *p;
    cf_conv_desc_t desc;
    int64_t oh, ow;
    cf_bn_mode_t bn_mode;
    uint64_t seed;
    int64_t src_n, wei_n, dst_n;
    float *src, *wei, *bia;
    float *vec;                        /* kb2-91: the channel bias (randn-like) */
    float *gamma, *beta, *rmean, *rvar; /* kb2-73 */
} workload_t;

/* Fills @p w (inputs from the counter-based PRNG). Returns 0 on success, -1 when out of host memory. */
int cli_workload_init(workload_t *w, const problem_t *p, int64_t n, int64_t c_in, int64_t h, int64_t w_, uint64_t seed,
                      cf_bn_mode_t mode);
void cli_workload_free(workload_t *w);
/* The problem's chain. Returns the failing status (message in cf_last_error()). */
cf_status_t cli_workload_chain(const workload_t *w, cf_chain_t *chain);
/* Args pointing at the given buffers (host or device copies of the workload's), in the chain's op slots. */
void cli_workload_args(const workload_t *w, cf_args_t *args, const float *src, const float *wei, const float *bia,
                       float *dst, const float *vec, const float *gamma, const float *beta, float *rmean, float *rvar,
                       int64_t *nbt);

/* The PRNG (splitmix64 of seed, stream, index): uniform in [0, 1) with 24 random bits, and raw 64 bits. */
double cli_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i);
uint64_t cli_rng_bits(uint64_t seed, uint64_t stream, uint64_t i);
enum { STREAM_X = 1, STREAM_WEI = 2, STREAM_BIA = 3, STREAM_CHANNEL = 4, STREAM_SAMPLE = 5 };

/* ---------------------------------------------------------------------------------------------------------- */
/* Progress line (progress.c): a ticker thread redraws "\r<label>: 42% (3.1 s)" on stderr once the job has taken
 * more than a second; workers only bump an atomic counter. */

typedef struct progress progress_t;
progress_t *progress_begin(const char *label, int64_t total); /* total 0: show elapsed time only */
void progress_add(progress_t *pr, int64_t done);               /* thread-safe; NULL ignored */
void progress_end(progress_t *pr);                             /* NULL ignored */

/* ---------------------------------------------------------------------------------------------------------- */
/* The independent float64 check (check.c): direct formulas, written from the PyTorch definitions without the
 * library's code. */

typedef struct check_result {
    int64_t positions; /* output values compared */
    int64_t pixels;    /* (n, oh, ow) positions, all channels each */
    int64_t bad;       /* outside atol + rtol * |ref|, or non-finite */
    double max_abs_err;
    int64_t worst_index; /* flat NCHW index of the largest error */
    double worst_got, worst_ref;
    double stats_err; /* BN training: max |running stat - reference| (0 otherwise) */
} check_result_t;

/* Exact per-channel batch mean and biased variance of the conv output (+bias) over (N, OH, OW), multithreaded. */
int cli_bn_batch_stats(const workload_t *w, double *mean, double *var);
/* Compares dst with the direct formula at @p pixels seeded pixels (all of them when there are fewer), every channel
 * of each. bn_mean/bn_var: cli_bn_batch_stats() output for BN training, else NULL. rm/rv: running stats after one
 * training call (else NULL). */
void cli_check_sample(const workload_t *w, const float *dst, int64_t pixels, double atol, double rtol,
                      const double *bn_mean, const double *bn_var, const float *rm, const float *rv,
                      check_result_t *res);
/* Compares dst with a full reference tensor (the CPU backend's output). */
void cli_check_full(const workload_t *w, const float *dst, const float *ref, double atol, double rtol,
                    check_result_t *res);

/* ---------------------------------------------------------------------------------------------------------- */
/* CUDA (cuda.c; stubs without CONVFUSE_WITH_CUDA). Every CUDA call is checked; failures print the call and the
 * CUDA error text and return -1. */

typedef struct cuda_timing {
    int warmup, iters;
    int flush_l2; /* overwrite a 256 MiB buffer before each timed run */
} cuda_timing_t;

/* Uploads the workload, runs @p plan once on NaN-poisoned output and copies dst (and the BN running statistics
 * after that one call) back, then times `iters` runs after `warmup` with CUDA events: times_ms[iters]. */
int cli_cuda_run(const workload_t *w, const_cf_plan_t plan, const cuda_timing_t *t, float *dst_host, float *rm_host,
                 float *rv_host, int64_t *nbt_host, double *times_ms);
/* "NVIDIA H100 80GB HBM3", compute capability, SM count of the current device. Returns -1 when none. */
int cli_cuda_describe(char *name, size_t name_size, int *major, int *minor, int *sm_count, char *why, size_t why_size);
/* 1 when the tool was built with the CUDA runtime. */
int cli_cuda_compiled(void);

#endif /* CONVFUSE_CLI_H */
