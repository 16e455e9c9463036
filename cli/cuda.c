/* The CLI's CUDA run: device buffers (cudaMalloc/cudaMemcpy), one checked run on NaN-poisoned output, then CUDA-event
 * timings after warm-up, with L2 flushed before each timed run as bench/common.py does. Every CUDA call is checked.
 * Without CONVFUSE_WITH_CUDA (CPU-only build) the functions are stubs that say so. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#ifdef CONVFUSE_WITH_CUDA
#include <cuda_runtime.h>

int cli_cuda_compiled(void)
{
    return 1;
}

static int cuda_ok(cudaError_t e, const char *call)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "convfuse: CUDA error: %s: %s (%s)\n", call, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}
#define CK(call)                                                                                                   \
    do {                                                                                                           \
        if (!cuda_ok((call), #call))                                                                               \
            goto done;                                                                                             \
    } while (0)

/* cudaMalloc + upload of @p count floats (NULL host: NULL device, no error). */
static int upload(float **dev, const float *host, int64_t count)
{
    *dev = NULL;
    if (!host)
        return 1;
    if (!cuda_ok(cudaMalloc((void **)dev, sizeof(float) * (size_t)count), "cudaMalloc"))
        return 0;
    return cuda_ok(cudaMemcpy(*dev, host, sizeof(float) * (size_t)count, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

#define FLUSH_BYTES ((size_t)256 << 20) /* > 4x the largest L2 we run on (H200: 60 MB) */

int cli_cuda_run(const workload_t *w, const_cf_plan_t plan, const cuda_timing_t *t, float *dst_host, float *rm_host,
                 float *rv_host, int64_t *nbt_host, double *times_ms)
{
    int rc = -1;
    const int64_t K = w->desc.c_out;
    float *d_src = NULL, *d_wei = NULL, *d_bia = NULL, *d_vec = NULL, *d_gamma = NULL, *d_beta = NULL;
    float *d_rm = NULL, *d_rv = NULL, *d_dst = NULL;
    int64_t *d_nbt = NULL;
    void *ws = NULL, *flush = NULL;
    cudaStream_t stream = NULL;
    cudaEvent_t *ev = calloc((size_t)(2 * (t->iters > 0 ? t->iters : 1)), sizeof *ev);
    int nev = 0;
    size_t ws_bytes = 0;
    progress_t *pr = NULL;
    if (!ev)
        goto done;
    if (cf_plan_workspace_size(plan, &ws_bytes) != CF_STATUS_SUCCESS) {
        fprintf(stderr, "convfuse: cf_plan_workspace_size: %s\n", cf_last_error());
        goto done;
    }
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (!upload(&d_src, w->src, w->src_n) || !upload(&d_wei, w->wei, w->wei_n) || !upload(&d_bia, w->bia, K) ||
        !upload(&d_vec, w->vec, K) || !upload(&d_gamma, w->gamma, K) || !upload(&d_beta, w->beta, K) ||
        !upload(&d_rm, w->rmean, K) || !upload(&d_rv, w->rvar, K))
        goto done;
    if (w->p->batch_norm) {
        CK(cudaMalloc((void **)&d_nbt, sizeof *d_nbt));
        CK(cudaMemset(d_nbt, 0, sizeof *d_nbt));
    }
    CK(cudaMalloc((void **)&d_dst, sizeof(float) * (size_t)w->dst_n));
    if (ws_bytes > 0)
        CK(cudaMalloc(&ws, ws_bytes));
    /* poison: all-ones bytes are a NaN, so a run that skips elements cannot pass the check */
    CK(cudaMemset(d_dst, 0xFF, sizeof(float) * (size_t)w->dst_n));

    cf_args_t args;
    cli_workload_args(w, &args, d_src, d_wei, d_bia, d_dst, d_vec, d_gamma, d_beta, d_rm, d_rv, d_nbt);
    cf_status_t st = cf_plan_execute(plan, &args, ws, ws_bytes, stream);
    if (st != CF_STATUS_SUCCESS) {
        fprintf(stderr, "convfuse: cf_plan_execute: %s: %s\n", cf_status_string(st), cf_last_error());
        goto done;
    }
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(dst_host, d_dst, sizeof(float) * (size_t)w->dst_n, cudaMemcpyDeviceToHost));
    if (w->p->batch_norm) {
        CK(cudaMemcpy(rm_host, d_rm, sizeof(float) * (size_t)K, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rv_host, d_rv, sizeof(float) * (size_t)K, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(nbt_host, d_nbt, sizeof *d_nbt, cudaMemcpyDeviceToHost));
    }

    if (t->flush_l2)
        CK(cudaMalloc(&flush, FLUSH_BYTES));
    for (int i = 0; i < t->warmup; ++i)
        if ((st = cf_plan_execute(plan, &args, ws, ws_bytes, stream)) != CF_STATUS_SUCCESS) {
            fprintf(stderr, "convfuse: cf_plan_execute (warm-up): %s: %s\n", cf_status_string(st), cf_last_error());
            goto done;
        }
    for (; nev < 2 * t->iters; ++nev)
        CK(cudaEventCreate(&ev[nev]));
    pr = progress_begin("timing on CUDA", t->iters);
    for (int i = 0; i < t->iters; ++i) {
        if (flush)
            CK(cudaMemsetAsync(flush, i & 0xFF, FLUSH_BYTES, stream));
        CK(cudaEventRecord(ev[2 * i], stream));
        if ((st = cf_plan_execute(plan, &args, ws, ws_bytes, stream)) != CF_STATUS_SUCCESS) {
            fprintf(stderr, "convfuse: cf_plan_execute (timed): %s: %s\n", cf_status_string(st), cf_last_error());
            goto done;
        }
        CK(cudaEventRecord(ev[2 * i + 1], stream));
        progress_add(pr, 1);
    }
    CK(cudaStreamSynchronize(stream));
    for (int i = 0; i < t->iters; ++i) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        times_ms[i] = ms;
    }
    rc = 0;

done:
    progress_end(pr);
    if (stream)
        cudaStreamSynchronize(stream); /* nothing in flight when the buffers go (errors already reported) */
    for (int i = 0; i < nev; ++i)
        cudaEventDestroy(ev[i]);
    free(ev);
    cudaFree(d_src);
    cudaFree(d_wei);
    cudaFree(d_bia);
    cudaFree(d_vec);
    cudaFree(d_gamma);
    cudaFree(d_beta);
    cudaFree(d_rm);
    cudaFree(d_rv);
    cudaFree(d_nbt);
    cudaFree(d_dst);
    cudaFree(ws);
    cudaFree(flush);
    if (stream)
        cudaStreamDestroy(stream);
    return rc;
}

int cli_cuda_describe(char *name, size_t name_size, int *major, int *minor, int *sm_count, char *why, size_t why_size)
{
    int count = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, why_size, "no CUDA device (%s)", e == cudaSuccess ? "none found" : cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        snprintf(why, why_size, "cannot query the CUDA device: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    snprintf(name, name_size, "%s", prop.name);
    *major = prop.major;
    *minor = prop.minor;
    *sm_count = prop.multiProcessorCount;
    return 0;
}

#else /* CPU-only build */

int cli_cuda_compiled(void)
{
    return 0;
}

int cli_cuda_run(const workload_t *w, const_cf_plan_t plan, const cuda_timing_t *t, float *dst_host, float *rm_host,
                 float *rv_host, int64_t *nbt_host, double *times_ms)
{
    (void)w, (void)plan, (void)t, (void)dst_host, (void)rm_host, (void)rv_host, (void)nbt_host, (void)times_ms;
    fprintf(stderr, "convfuse: this convfuse tool was built without the CUDA runtime\n");
    return -1;
}

int cli_cuda_describe(char *name, size_t name_size, int *major, int *minor, int *sm_count, char *why, size_t why_size)
{
    (void)name, (void)name_size, (void)major, (void)minor, (void)sm_count;
    snprintf(why, why_size, "built without CUDA (nvcc not found at build time, or CONVFUSE_CUDA=OFF)");
    return -1;
}

#endif
