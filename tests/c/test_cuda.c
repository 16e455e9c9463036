/* CUDA against the CPU reference on a few small random chains. Exits 77 (ctest: skipped) when the CUDA
 * backend is not available here, printing why. */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

#ifdef CF_TEST_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* Why CUDA cannot run: the plan-creation message says (not compiled in, no device, ...). */
static void print_unavailable_reason(void)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 3, 3, 1, 3, 3);
    cf_plan_t plan;
    cf_status_t st = cf_plan_create(&plan, &d, NULL, CF_BACKEND_CUDA, CF_MATH_DEFAULT);
    if (st == CF_STATUS_SUCCESS) {
        cf_plan_destroy(plan);
        printf("test_cuda: skipped: CUDA backend reported unavailable\n");
    } else {
        printf("test_cuda: skipped: %s: %s\n", cf_status_string(st), cf_last_error());
    }
}

#ifdef CF_TEST_WITH_CUDA

static uint32_t lcg_state = 20240607u;
/* Uniform [0, 1). */
static float lcg_uniform(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)(lcg_state >> 8) / 16777216.0f;
}

static float *host_random(int64_t count, float scale, float shift)
{
    float *p = malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++)
        p[i] = lcg_uniform() * scale + shift;
    return p;
}

static int cuda_ok(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, line, what, cudaGetErrorString(e));
    return 0;
}
#define CUDA_OK(call) cuda_ok((call), #call, __LINE__)

static float *to_device(const float *host, int64_t count)
{
    void *p = NULL;
    if (host == NULL)
        return NULL;
    if (!CUDA_OK(cudaMalloc(&p, sizeof(float) * (size_t)count)))
        return NULL;
    CUDA_OK(cudaMemcpy(p, host, sizeof(float) * (size_t)count, cudaMemcpyHostToDevice));
    return p;
}

typedef struct {
    const char *line; /* what the case is, for the failure message */
    cf_conv_kind_t kind;
    int64_t n, c_in, h, w, c_out, k, stride, pad, out_pad;
    int has_bias;
    const char *ops; /* one letter per op: c add_channel, m mul_scalar, a add_scalar, f affine_channel,
                        T bn training (running stats), I bn inference, s softmax, g sigmoid, r relu, t tanh, e gelu */
} cuda_case_t;

static const cuda_case_t cases[] = {
    {"n4c8h9w9 -> c16 k4s2p1op1 (transposed): softmax,add_c,mul_s,sigmoid", CF_CONV_TRANSPOSE_2D, 4, 8, 9, 9, 16, 4,
     2, 1, 1, 1, "scmg"},
    {"n2c8h16w16 -> c16 k3: relu,add_s,tanh", CF_CONV_2D, 2, 8, 16, 16, 16, 3, 1, 0, 0, 1, "rat"},
    {"n3c4h12w10 -> c8 k3s2p1: bn_train,gelu", CF_CONV_2D, 3, 4, 12, 10, 8, 3, 2, 1, 0, 1, "Te"},
    /* statistics from the input Gram (src/cuda/bn_gram.cu): TMA bands (W 36), the copy path (W 19) */
    {"n3c8h21w36 -> c32 k3: add_c,bn_train,mul_s", CF_CONV_2D, 3, 8, 21, 36, 32, 3, 1, 0, 0, 1, "cTm"},
    {"n2c5h14w19 -> c24 k3 (no bias): bn_train", CF_CONV_2D, 2, 5, 14, 19, 24, 3, 1, 0, 0, 0, "T"},
    {"n2c6h7w7 -> c12 k3s2p1op1 (transposed, no bias): affine,bn_infer,relu", CF_CONV_TRANSPOSE_2D, 2, 6, 7, 7, 12,
     3, 2, 1, 1, 0, "fIr"},
    {"n2c5h8w8 -> c7 k1: (empty chain)", CF_CONV_2D, 2, 5, 8, 8, 7, 1, 1, 0, 0, 1, ""},
};

static int refused_count;

/* Runs one case on CPU and CUDA with `math`; compares dst (and BN running stats) within abs + rel*|ref|. */
static void run_case(const cuda_case_t *c, cf_math_t math, double tol)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, c->kind, c->n, c->c_in, c->h, c->w, c->c_out, c->k, c->k);
    d.stride_h = d.stride_w = c->stride;
    d.pad_h = d.pad_w = c->pad;
    d.out_pad_h = d.out_pad_w = c->out_pad;
    d.has_bias = c->has_bias;
    int64_t oh, ow;
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);

    cf_chain_t chain;
    cf_chain_create(&chain);
    int nops = (int)strlen(c->ops);
    for (int i = 0; i < nops; i++) {
        switch (c->ops[i]) {
        case 'c': cf_chain_append_add_channel(chain); break;
        case 'm': cf_chain_append_mul_scalar(chain, 2.0); break;
        case 'a': cf_chain_append_add_scalar(chain, 0.5); break;
        case 'f': cf_chain_append_affine_channel(chain); break;
        case 'T': cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 0.1); break;
        case 'I': cf_chain_append_batch_norm(chain, CF_BN_INFERENCE, 1e-5, 0.1); break;
        case 's': cf_chain_append_softmax_channels(chain); break;
        case 'g': cf_chain_append_sigmoid(chain); break;
        case 'r': cf_chain_append_relu(chain); break;
        case 't': cf_chain_append_tanh(chain); break;
        case 'e': cf_chain_append_gelu(chain); break;
        default: CHECK(!"unknown op letter in test case");
        }
    }

    cf_plan_t gpu_plan;
    cf_status_t st = cf_plan_create(&gpu_plan, &d, chain, CF_BACKEND_CUDA, math);
    if (st == CF_STATUS_NOT_SUPPORTED) {
        printf("  refused (math %d): %s: %s\n", (int)math, c->line, cf_last_error());
        refused_count++;
        cf_chain_destroy(chain);
        return;
    }
    CHECK_STATUS(st, CF_STATUS_SUCCESS);
    if (st != CF_STATUS_SUCCESS) {
        cf_chain_destroy(chain);
        return;
    }

    const int64_t K = c->c_in * c->k * c->k, ns = c->n * c->c_in * c->h * c->w;
    const int64_t nw = c->c_out * K, nd = c->n * c->c_out * oh * ow;
    const float wscale = 2.0f / sqrtf((float)K);
    float *src = host_random(ns, 1, 0), *wei = host_random(nw, wscale, -wscale / 2);
    float *bia = c->has_bias ? host_random(c->c_out, 1, -0.5f) : NULL;
    float *vec_a = host_random(c->c_out, 1, 0.5f), *vec_b = host_random(c->c_out, 1, -0.5f);
    float *rmean = host_random(c->c_out, 0.2f, -0.1f), *rvar = host_random(c->c_out, 1, 0.5f);
    float *ref = malloc(sizeof(float) * (size_t)nd), *got = malloc(sizeof(float) * (size_t)nd);
    float *cpu_rm = malloc(sizeof(float) * (size_t)c->c_out), *cpu_rv = malloc(sizeof(float) * (size_t)c->c_out);
    memcpy(cpu_rm, rmean, sizeof(float) * (size_t)c->c_out);
    memcpy(cpu_rv, rvar, sizeof(float) * (size_t)c->c_out);
    for (int64_t i = 0; i < nd; i++)
        got[i] = NAN;

    float *d_src = to_device(src, ns), *d_wei = to_device(wei, nw), *d_bia = to_device(bia, c->c_out);
    float *d_a = to_device(vec_a, c->c_out), *d_b = to_device(vec_b, c->c_out);
    float *d_rm = to_device(rmean, c->c_out), *d_rv = to_device(rvar, c->c_out);
    float *d_dst = to_device(got, nd); /* poisoned with NaN */

    cf_args_t cpu_args, gpu_args;
    memset(&cpu_args, 0, sizeof cpu_args);
    memset(&gpu_args, 0, sizeof gpu_args);
    cpu_args.src = src, cpu_args.wei = wei, cpu_args.bia = bia, cpu_args.dst = ref;
    gpu_args.src = d_src, gpu_args.wei = d_wei, gpu_args.bia = d_bia, gpu_args.dst = d_dst;
    for (int i = 0; i < nops; i++) {
        const char o = c->ops[i];
        if (o == 'c' || o == 'f') {
            cpu_args.ops[i].channel_a = vec_a, gpu_args.ops[i].channel_a = d_a;
        }
        if (o == 'f') {
            cpu_args.ops[i].channel_b = vec_b, gpu_args.ops[i].channel_b = d_b;
        }
        if (o == 'T' || o == 'I') {
            cpu_args.ops[i].channel_a = vec_a, gpu_args.ops[i].channel_a = d_a;
            cpu_args.ops[i].channel_b = vec_b, gpu_args.ops[i].channel_b = d_b;
            cpu_args.ops[i].running_mean = cpu_rm, gpu_args.ops[i].running_mean = d_rm;
            cpu_args.ops[i].running_var = cpu_rv, gpu_args.ops[i].running_var = d_rv;
        }
    }

    CHECK_STATUS(cf_run(&d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT, &cpu_args, NULL, 0, NULL), CF_STATUS_SUCCESS);
    size_t ws_bytes = 0;
    cf_plan_workspace_size(gpu_plan, &ws_bytes);
    void *ws = NULL;
    if (ws_bytes > 0)
        CUDA_OK(cudaMalloc(&ws, ws_bytes));
    const char *impl = "?";
    cf_plan_impl_name(gpu_plan, &impl);
    CHECK_STATUS(cf_plan_execute(gpu_plan, &gpu_args, ws, ws_bytes, NULL), CF_STATUS_SUCCESS);
    CHECK(CUDA_OK(cudaDeviceSynchronize()));
    CUDA_OK(cudaMemcpy(got, d_dst, sizeof(float) * (size_t)nd, cudaMemcpyDeviceToHost));

    double worst = 0;
    int64_t bad = 0, worst_at = 0;
    for (int64_t i = 0; i < nd; i++) {
        const double err = fabs((double)got[i] - (double)ref[i]);
        const double excess = err - (tol + tol * fabs((double)ref[i]));
        if (!(excess <= 0)) {
            bad++;
            const double e = isnan(err) ? INFINITY : err;
            if (bad == 1 || e > worst) {
                worst = e;
                worst_at = i;
            }
        }
    }
    CHECK(bad == 0);
    if (bad != 0)
        fprintf(stderr, "    %s [math %d, %s]: %lld of %lld outside tolerance %g; worst at %lld: got %.8g, ref %.8g\n",
                c->line, (int)math, impl, (long long)bad, (long long)nd, tol, (long long)worst_at,
                (double)got[worst_at], (double)ref[worst_at]);
    else
        printf("  ok (math %d, %s): %s\n", (int)math, impl, c->line);

    if (strchr(c->ops, 'T') != NULL) {
        float *grm = malloc(sizeof(float) * (size_t)c->c_out), *grv = malloc(sizeof(float) * (size_t)c->c_out);
        CUDA_OK(cudaMemcpy(grm, d_rm, sizeof(float) * (size_t)c->c_out, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(grv, d_rv, sizeof(float) * (size_t)c->c_out, cudaMemcpyDeviceToHost));
        for (int64_t ch = 0; ch < c->c_out; ch++) {
            CHECK_NEAR(grm[ch], cpu_rm[ch], tol + tol * fabs(cpu_rm[ch]));
            CHECK_NEAR(grv[ch], cpu_rv[ch], tol + tol * fabs(cpu_rv[ch]));
        }
        free(grm);
        free(grv);
    }

    cudaFree(ws);
    cudaFree(d_src), cudaFree(d_wei), cudaFree(d_bia), cudaFree(d_a), cudaFree(d_b);
    cudaFree(d_rm), cudaFree(d_rv), cudaFree(d_dst);
    free(src), free(wei), free(bia), free(vec_a), free(vec_b), free(rmean), free(rvar);
    free(ref), free(got), free(cpu_rm), free(cpu_rv);
    cf_plan_destroy(gpu_plan);
    cf_chain_destroy(chain);
}
#endif

int main(void)
{
    int available = 0;
    CHECK_STATUS(cf_backend_available(CF_BACKEND_CUDA, &available), CF_STATUS_SUCCESS);
    if (!available) {
        print_unavailable_reason();
        return 77;
    }
#ifdef CF_TEST_WITH_CUDA
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], CF_MATH_STRICT_F32, 1e-4); /* fp32-grade products: the tight tolerance */
        run_case(&cases[i], CF_MATH_DEFAULT, 5e-3);    /* TF32 products: about 2^-11 relative per product */
    }
    /* The library caches launch facts per kernel variant (the shared-memory attribute among them); a device reset
     * clears the attribute, and the next launches must still go through. */
    CHECK(CUDA_OK(cudaDeviceReset()));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], CF_MATH_DEFAULT, 5e-3);
    const int runs = (int)(3 * sizeof cases / sizeof cases[0]);
    if (refused_count > 0)
        printf("test_cuda: %d of %d runs refused by the CUDA backend (not failures)\n", refused_count, runs);
    CHECK(refused_count < runs); /* a backend that serves none of these is not tested at all */
    return check_summary("test_cuda");
#else
    /* The library says CUDA is available although these tests were built without the CUDA runtime. */
    printf("test_cuda: skipped: built without CF_TEST_WITH_CUDA\n");
    return 77;
#endif
}
