/* Every status path of the public API, and that cf_last_error() names the bad argument and its value. */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include "check.h"
#include "internal.h" /* white-box: a plan's workspace size, cf_verbose */

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef __STDC_NO_THREADS__
#include <threads.h>
#endif

static cf_conv_desc_t small_conv(void)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_2D, 2, 3, 8, 8, 4, 3, 3);
    return d;
}

static cf_conv_desc_t small_tconv(void)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_TRANSPOSE_2D, 2, 3, 5, 5, 4, 3, 3);
    d.stride_h = d.stride_w = 2;
    return d;
}

static void test_status_and_version(void)
{
    CHECK(strcmp(cf_last_error(), "") == 0); /* nothing failed yet on this thread */
    const char *names[] = {
        "CF_STATUS_SUCCESS",           "CF_STATUS_INVALID_ARGUMENT",    "CF_STATUS_INVALID_SHAPE",
        "CF_STATUS_NOT_SUPPORTED",     "CF_STATUS_BACKEND_UNAVAILABLE", "CF_STATUS_WORKSPACE_TOO_SMALL",
        "CF_STATUS_OUT_OF_MEMORY",     "CF_STATUS_CUDA_ERROR",          "CF_STATUS_INTERNAL_ERROR",
    };
    CHECK(sizeof names / sizeof names[0] == CF_STATUS_COUNT);
    for (int s = 0; s < CF_STATUS_COUNT; s++)
        CHECK(strcmp(cf_status_string((cf_status_t)s), names[s]) == 0);
    CHECK(strcmp(cf_status_string(CF_STATUS_COUNT), "CF_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(cf_status_string((cf_status_t)-1), "CF_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(cf_status_string((cf_status_t)1000), "CF_STATUS_UNKNOWN") == 0);

    CHECK(cf_version() == CF_VERSION);
    CHECK(CF_VERSION == 100);
    CHECK(strncmp(cf_version_string(), "0.1.0 (", 7) == 0);
#ifndef CF_TEST_WITH_CUDA
    CHECK(strstr(cf_version_string(), "cpu-only") != NULL);
#endif

    for (int k = 0; k < CF_OP_COUNT; k++)
        CHECK(cf_op_kind_name((cf_op_kind_t)k) != NULL);
    CHECK(strcmp(cf_op_kind_name(CF_OP_SOFTMAX_CHANNELS), "softmax_channels") == 0);
    CHECK(strcmp(cf_op_kind_name(CF_OP_ADD_CHANNEL), "add_channel") == 0);
    CHECK(strcmp(cf_op_kind_name(CF_OP_GELU), "gelu") == 0);
    CHECK(cf_op_kind_name(CF_OP_COUNT) == NULL);
    CHECK(cf_op_kind_name((cf_op_kind_t)-1) == NULL);
}

static void test_desc(void)
{
    cf_conv_desc_t d;
    CHECK_ERROR(cf_conv_desc_init(NULL, CF_CONV_2D, 1, 1, 1, 1, 1, 1, 1), CF_STATUS_INVALID_ARGUMENT, "desc is NULL");
    CHECK_ERROR(cf_conv_desc_init(&d, (cf_conv_kind_t)7, 1, 1, 1, 1, 1, 1, 1), CF_STATUS_INVALID_ARGUMENT, "kind = 7");
    CHECK_STATUS(cf_conv_desc_init(&d, CF_CONV_TRANSPOSE_2D, 1, 2, 3, 4, 5, 6, 7), CF_STATUS_SUCCESS);
    CHECK(d.kind == CF_CONV_TRANSPOSE_2D && d.n == 1 && d.c_in == 2 && d.h == 3 && d.w == 4 && d.c_out == 5);
    CHECK(d.kh == 6 && d.kw == 7 && d.stride_h == 1 && d.stride_w == 1 && d.pad_h == 0 && d.pad_w == 0);
    CHECK(d.out_pad_h == 0 && d.out_pad_w == 0 && d.dil_h == 1 && d.dil_w == 1 && d.groups == 1);
    CHECK(d.has_bias == 1 && d.dtype == CF_DTYPE_F32);

    int64_t oh = -1, ow = -1;
    d = small_conv();
    CHECK_ERROR(cf_conv_desc_output_dims(NULL, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc is NULL");
    CHECK_ERROR(cf_conv_desc_output_dims(&d, NULL, &ow), CF_STATUS_INVALID_ARGUMENT, "oh is NULL");
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, NULL), CF_STATUS_INVALID_ARGUMENT, "ow is NULL");
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    CHECK(oh == 6 && ow == 6);

    /* Each size field below its minimum, for both kinds. */
    struct {
        const char *needle;
        size_t offset;
        int64_t bad;
    } fields[] = {
        {"desc.n = 0", offsetof(cf_conv_desc_t, n), 0},
        {"desc.c_in = -3", offsetof(cf_conv_desc_t, c_in), -3},
        {"desc.h = 0", offsetof(cf_conv_desc_t, h), 0},
        {"desc.w = 0", offsetof(cf_conv_desc_t, w), 0},
        {"desc.c_out = 0", offsetof(cf_conv_desc_t, c_out), 0},
        {"desc.kh = 0", offsetof(cf_conv_desc_t, kh), 0},
        {"desc.kw = -1", offsetof(cf_conv_desc_t, kw), -1},
        {"desc.stride_h = 0", offsetof(cf_conv_desc_t, stride_h), 0},
        {"desc.stride_w = -2", offsetof(cf_conv_desc_t, stride_w), -2},
        {"desc.dil_h = 0", offsetof(cf_conv_desc_t, dil_h), 0},
        {"desc.dil_w = 0", offsetof(cf_conv_desc_t, dil_w), 0},
        {"desc.pad_h = -1", offsetof(cf_conv_desc_t, pad_h), -1},
        {"desc.pad_w = -5", offsetof(cf_conv_desc_t, pad_w), -5},
        {"desc.out_pad_h = -1", offsetof(cf_conv_desc_t, out_pad_h), -1},
        {"desc.out_pad_w = -1", offsetof(cf_conv_desc_t, out_pad_w), -1},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        for (int kind = 0; kind < 2; kind++) {
            d = kind == 0 ? small_conv() : small_tconv();
            memcpy((char *)&d + fields[i].offset, &fields[i].bad, sizeof(int64_t));
            CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, fields[i].needle);
        }
    }

    d = small_conv();
    d.kind = (cf_conv_kind_t)3;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.kind = 3");

    /* output_padding: conv2d must have 0; transposed must be < stride or < dilation (PyTorch's rule). */
    d = small_conv();
    d.out_pad_h = 1;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.out_pad_h = 1");
    d = small_conv();
    d.stride_w = 2;
    d.out_pad_w = 1;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.out_pad_w = 1");
    d = small_tconv(); /* stride 2, dilation 1 */
    d.out_pad_h = 1;
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    d.out_pad_h = 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.out_pad_h = 2");
    d = small_tconv();
    d.out_pad_w = 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.out_pad_w = 2");
    d = small_tconv();
    d.stride_w = 1;
    d.dil_w = 3;
    d.out_pad_w = 2; /* < dilation: allowed */
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    d.out_pad_w = 3;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "dil_w = 3");

    d = small_conv();
    d.groups = 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_NOT_SUPPORTED, "desc.groups = 2");
    d.groups = 0;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_NOT_SUPPORTED, "desc.groups = 0");
    d = small_conv();
    d.dtype = CF_DTYPE_F16;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_NOT_SUPPORTED, "desc.dtype = CF_DTYPE_F16");
    d.dtype = CF_DTYPE_BF16;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_NOT_SUPPORTED, "desc.dtype = CF_DTYPE_BF16");
    d.dtype = (cf_dtype_t)9;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.dtype = 9");
    d = small_conv();
    d.has_bias = 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "desc.has_bias = 2");

    /* Empty outputs. */
    d = small_conv();
    d.kh = 9; /* 8 < 9 */
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE, "height");
    d = small_conv();
    d.dil_w = 4; /* 8 < 4*2+1 */
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE, "width");
    d = small_conv();
    d.dil_w = 4;
    d.pad_w = 1; /* 10 >= 9: one column */
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    CHECK(ow == 2);
    d = small_tconv(); /* OH = 4*2 + 2 + 1 = 11 - 2*pad */
    d.pad_h = 6;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE, "pad_h = 6");
    d.pad_h = 5;
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    CHECK(oh == 1);

    /* int64 overflow guards. */
    d = small_conv();
    d.h = INT64_MAX / 2;
    d.pad_h = INT64_MAX / 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "overflow");
    d = small_conv();
    d.dil_h = INT64_MAX / 2; /* dil*(k-1) = INT64_MAX - 1: no overflow, just an empty output */
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE, "height");
    d.dil_h = INT64_MAX;
    d.kh = 2;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE, "9223372036854775808");
    d.kh = 3;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "overflow");
    d = small_tconv();
    d.stride_h = INT64_MAX / 2;
    d.h = 4;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "overflow");
    d = small_conv();
    d.n = (int64_t)1 << 40;
    d.c_in = (int64_t)1 << 20;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "src has too many elements");
    d = small_conv();
    d.c_out = (int64_t)1 << 40;
    d.c_in = (int64_t)1 << 20;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "wei has too many elements");
    d = small_conv();
    d.n = (int64_t)1 << 28;
    d.c_out = (int64_t)1 << 28;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "dst has too many elements");
}

static void test_chain(void)
{
    CHECK_ERROR(cf_chain_create(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_STATUS(cf_chain_destroy(NULL), CF_STATUS_SUCCESS);

    CHECK_ERROR(cf_chain_append_add_channel(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_mul_scalar(NULL, 1.0), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_add_scalar(NULL, 1.0), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_affine_channel(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_batch_norm(NULL, CF_BN_TRAINING, 1e-5, 0.1), CF_STATUS_INVALID_ARGUMENT,
                "chain is NULL");
    CHECK_ERROR(cf_chain_append_softmax_channels(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_sigmoid(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_relu(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_tanh(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_append_gelu(NULL), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");

    cf_chain_t chain = NULL;
    CHECK_STATUS(cf_chain_create(&chain), CF_STATUS_SUCCESS);
    int len = -1;
    CHECK_STATUS(cf_chain_length(chain, &len), CF_STATUS_SUCCESS);
    CHECK(len == 0);

    CHECK_ERROR(cf_chain_append_mul_scalar(chain, NAN), CF_STATUS_INVALID_ARGUMENT, "s = nan");
    CHECK_ERROR(cf_chain_append_mul_scalar(chain, INFINITY), CF_STATUS_INVALID_ARGUMENT, "s = inf");
    CHECK_ERROR(cf_chain_append_add_scalar(chain, -INFINITY), CF_STATUS_INVALID_ARGUMENT, "s = -inf");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, (cf_bn_mode_t)2, 1e-5, 0.1), CF_STATUS_INVALID_ARGUMENT, "mode = 2");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 0.0, 0.1), CF_STATUS_INVALID_ARGUMENT, "eps = 0");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, -1e-5, 0.1), CF_STATUS_INVALID_ARGUMENT,
                "eps = -1e-05");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, NAN, 0.1), CF_STATUS_INVALID_ARGUMENT, "eps = nan");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, INFINITY, 0.1), CF_STATUS_INVALID_ARGUMENT,
                "eps = inf");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 1.5), CF_STATUS_INVALID_ARGUMENT,
                "momentum = 1.5");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, -0.5), CF_STATUS_INVALID_ARGUMENT,
                "momentum = -0.5");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_INFERENCE, 1e-5, NAN), CF_STATUS_INVALID_ARGUMENT,
                "momentum = nan");
    CHECK_STATUS(cf_chain_length(chain, &len), CF_STATUS_SUCCESS);
    CHECK(len == 0); /* refused appends add nothing */

    CHECK_STATUS(cf_chain_append_add_channel(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_mul_scalar(chain, -2.5), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_add_scalar(chain, DBL_MAX), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_affine_channel(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 0.0), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 1.0), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-3, CF_BN_MOMENTUM_CUMULATIVE), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_batch_norm(chain, CF_BN_INFERENCE, 1e-5, 0.1), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_softmax_channels(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_sigmoid(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_relu(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_tanh(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_append_gelu(chain), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_chain_length(chain, &len), CF_STATUS_SUCCESS);
    CHECK(len == 13);
    while (len < CF_CHAIN_MAX_OPS) {
        CHECK_STATUS(cf_chain_append_relu(chain), CF_STATUS_SUCCESS);
        len++;
    }
    CHECK_ERROR(cf_chain_append_relu(chain), CF_STATUS_NOT_SUPPORTED, "CF_CHAIN_MAX_OPS = 16");
    CHECK_ERROR(cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 0.1), CF_STATUS_NOT_SUPPORTED,
                "CF_CHAIN_MAX_OPS");
    CHECK_STATUS(cf_chain_length(chain, &len), CF_STATUS_SUCCESS);
    CHECK(len == CF_CHAIN_MAX_OPS);

    cf_op_kind_t kind;
    CHECK_STATUS(cf_chain_op_kind(chain, 0, &kind), CF_STATUS_SUCCESS);
    CHECK(kind == CF_OP_ADD_CHANNEL);
    CHECK_STATUS(cf_chain_op_kind(chain, 8, &kind), CF_STATUS_SUCCESS);
    CHECK(kind == CF_OP_SOFTMAX_CHANNELS);
    CHECK_STATUS(cf_chain_op_kind(chain, 12, &kind), CF_STATUS_SUCCESS);
    CHECK(kind == CF_OP_GELU);
    CHECK_ERROR(cf_chain_op_kind(chain, CF_CHAIN_MAX_OPS, &kind), CF_STATUS_INVALID_ARGUMENT, "index = 16");
    CHECK_ERROR(cf_chain_op_kind(chain, -1, &kind), CF_STATUS_INVALID_ARGUMENT, "index = -1");
    CHECK_ERROR(cf_chain_op_kind(NULL, 0, &kind), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_op_kind(chain, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "kind is NULL");
    CHECK_ERROR(cf_chain_length(NULL, &len), CF_STATUS_INVALID_ARGUMENT, "chain is NULL");
    CHECK_ERROR(cf_chain_length(chain, NULL), CF_STATUS_INVALID_ARGUMENT, "length is NULL");
    CHECK_STATUS(cf_chain_destroy(chain), CF_STATUS_SUCCESS);
}

static void test_plan(void)
{
    cf_conv_desc_t d = small_conv();
    cf_plan_t plan = (cf_plan_t)&d; /* must be reset to NULL on failure */
    CHECK_ERROR(cf_plan_create(NULL, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "plan is NULL");
    CHECK_ERROR(cf_plan_create(&plan, NULL, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "desc is NULL");
    CHECK(plan == NULL);
    d.stride_h = 0;
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "desc.stride_h = 0");
    d = small_conv();
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, (cf_backend_t)5, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "backend = 5");
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, (cf_math_t)-1), CF_STATUS_INVALID_ARGUMENT,
                "math = -1");

    int cuda = -1;
    CHECK_STATUS(cf_backend_available(CF_BACKEND_CUDA, &cuda), CF_STATUS_SUCCESS);
    CHECK(cuda == 0 || cuda == 1);
    if (!cuda) {
        CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CUDA, CF_MATH_DEFAULT), CF_STATUS_BACKEND_UNAVAILABLE);
        CHECK(plan == NULL);
#ifndef CF_TEST_WITH_CUDA
        CHECK(strstr(cf_last_error(), "built without CUDA") != NULL);
#endif
    }
    int cpu = -1;
    CHECK_STATUS(cf_backend_available(CF_BACKEND_CPU, &cpu), CF_STATUS_SUCCESS);
    CHECK(cpu == 1);
    CHECK_ERROR(cf_backend_available(CF_BACKEND_CPU, NULL), CF_STATUS_INVALID_ARGUMENT, "available is NULL");
    CHECK_ERROR(cf_backend_available((cf_backend_t)3, &cpu), CF_STATUS_INVALID_ARGUMENT, "backend = 3");

    /* BatchNorm training needs more than one value per channel (PyTorch raises). */
    cf_chain_t bn;
    cf_chain_create(&bn);
    cf_chain_append_batch_norm(bn, CF_BN_TRAINING, 1e-5, 0.1);
    cf_conv_desc_t one;
    cf_conv_desc_init(&one, CF_CONV_2D, 1, 3, 3, 3, 4, 3, 3); /* 1x1 output, N = 1 */
    CHECK_ERROR(cf_plan_create(&plan, &one, bn, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_SHAPE,
                "more than 1 value per channel");
    one.n = 2;
    CHECK_STATUS(cf_plan_create(&plan, &one, bn, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);
    cf_chain_destroy(bn);
    cf_chain_create(&bn);
    cf_chain_append_batch_norm(bn, CF_BN_INFERENCE, 1e-5, 0.1);
    one.n = 1;
    CHECK_STATUS(cf_plan_create(&plan, &one, bn, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);
    cf_chain_destroy(bn);

    /* A good plan and its getters. */
    CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_STRICT_F32), CF_STATUS_SUCCESS);
    const char *name = NULL;
    CHECK_STATUS(cf_plan_impl_name(plan, &name), CF_STATUS_SUCCESS);
    CHECK(name != NULL && strcmp(name, "cpu_reference") == 0);
    int64_t oh = 0, ow = 0;
    CHECK_STATUS(cf_plan_output_dims(plan, &oh, &ow), CF_STATUS_SUCCESS);
    CHECK(oh == 6 && ow == 6);
    size_t ws = 99;
    CHECK_STATUS(cf_plan_workspace_size(plan, &ws), CF_STATUS_SUCCESS);
    CHECK(ws == 0);
    CHECK(cf_plan_src_elems(plan) == 2 * 3 * 8 * 8);
    CHECK(cf_plan_wei_elems(plan) == 4 * 3 * 3 * 3);
    CHECK(cf_plan_dst_elems(plan) == 2 * 4 * 6 * 6);
    CHECK_ERROR(cf_plan_impl_name(NULL, &name), CF_STATUS_INVALID_ARGUMENT, "plan is NULL");
    CHECK_ERROR(cf_plan_impl_name(plan, NULL), CF_STATUS_INVALID_ARGUMENT, "name is NULL");
    CHECK_ERROR(cf_plan_output_dims(NULL, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "plan is NULL");
    CHECK_ERROR(cf_plan_output_dims(plan, NULL, &ow), CF_STATUS_INVALID_ARGUMENT, "oh is NULL");
    CHECK_ERROR(cf_plan_output_dims(plan, &oh, NULL), CF_STATUS_INVALID_ARGUMENT, "ow is NULL");
    CHECK_ERROR(cf_plan_workspace_size(NULL, &ws), CF_STATUS_INVALID_ARGUMENT, "plan is NULL");
    CHECK_ERROR(cf_plan_workspace_size(plan, NULL), CF_STATUS_INVALID_ARGUMENT, "bytes is NULL");
    CHECK_STATUS(cf_plan_destroy(plan), CF_STATUS_SUCCESS);
    CHECK_STATUS(cf_plan_destroy(NULL), CF_STATUS_SUCCESS);
}

static void test_execute(void)
{
    cf_conv_desc_t d = small_conv(); /* 2x3x8x8 -> 2x4x6x6 */
    float src[2 * 3 * 8 * 8], wei[4 * 3 * 3 * 3], bia[4], dst[2 * 4 * 6 * 6];
    float va[4] = {1, 2, 3, 4}, vb[4] = {0, 0, 0, 0}, rm[4] = {0}, rv[4] = {1, 1, 1, 1};
    int64_t nbt = 0;
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++)
        src[i] = (float)(i % 7) * 0.125f;
    for (size_t i = 0; i < sizeof wei / sizeof wei[0]; i++)
        wei[i] = (float)(i % 5) * 0.25f - 0.5f;
    memset(bia, 0, sizeof bia);

    cf_chain_t chain;
    cf_chain_create(&chain);
    cf_chain_append_relu(chain);                                           /* 0 */
    cf_chain_append_add_channel(chain);                                    /* 1 */
    cf_chain_append_affine_channel(chain);                                 /* 2 */
    cf_chain_append_batch_norm(chain, CF_BN_INFERENCE, 1e-5, 0.1);         /* 3 */
    cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, CF_BN_MOMENTUM_CUMULATIVE); /* 4 */
    cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 0.1);          /* 5 */
    cf_plan_t plan;
    CHECK_STATUS(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_chain_destroy(chain); /* the plan holds its own copy */

    cf_args_t args;
    memset(&args, 0, sizeof args);
    CHECK_ERROR(cf_plan_execute(NULL, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "plan is NULL");
    CHECK_ERROR(cf_plan_execute(plan, NULL, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args is NULL");
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.src is NULL");
    args.src = src;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.wei is NULL");
    args.wei = wei;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.dst is NULL");
    args.dst = dst;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.bia is NULL");
    args.bia = bia;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[1].channel_a is NULL (add_channel needs its C_out vector)");
    args.ops[1].channel_a = va;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.ops[2].channel_a is NULL");
    args.ops[2].channel_a = va;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.ops[2].channel_b is NULL");
    args.ops[2].channel_b = vb;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[3].running_mean is NULL");
    args.ops[3].running_mean = rm;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[3].running_var is NULL");
    args.ops[3].running_var = rv;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[4].num_batches_tracked is NULL");
    args.ops[4].num_batches_tracked = &nbt;
    /* op 4 with no running stats at all is fine; op 5 with only one of them is not */
    args.ops[5].running_mean = rm;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[5].running_var is NULL but running_mean is not");
    args.ops[5].running_mean = NULL;
    args.ops[5].running_var = rv;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.ops[5].running_mean is NULL but running_var is not");
    args.ops[5].running_var = NULL;
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
        dst[i] = NAN;
    CHECK_STATUS(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_SUCCESS);
    CHECK(nbt == 1);
    int all_finite = 1;
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
        all_finite &= isfinite(dst[i]) ? 1 : 0;
    CHECK(all_finite);

    /* Workspace checks (white-box: pretend the plan needs 64 bytes). */
    char workspace[64];
    plan->workspace_bytes = 64;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 64, NULL), CF_STATUS_WORKSPACE_TOO_SMALL, "workspace is NULL");
    CHECK_ERROR(cf_plan_execute(plan, &args, workspace, 63, NULL), CF_STATUS_WORKSPACE_TOO_SMALL,
                "workspace_size = 63");
    CHECK_STATUS(cf_plan_execute(plan, &args, workspace, 64, NULL), CF_STATUS_SUCCESS);
    plan->workspace_bytes = 0;
    CHECK_STATUS(cf_plan_execute(plan, &args, workspace, 0, NULL), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);

    /* Bias given although the descriptor has none. */
    d.has_bias = 0;
    CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_args_t plain;
    memset(&plain, 0, sizeof plain);
    plain.src = src;
    plain.wei = wei;
    plain.dst = dst;
    plain.bia = bia;
    CHECK_ERROR(cf_plan_execute(plan, &plain, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.bia is not NULL");
    plain.bia = NULL;
    CHECK_STATUS(cf_plan_execute(plan, &plain, NULL, 0, NULL), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);

    /* cf_run: success, and a failure of each stage passes through. */
    CHECK_STATUS(cf_run(&d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT, &plain, NULL, 0, NULL), CF_STATUS_SUCCESS);
    plain.dst = NULL;
    CHECK_ERROR(cf_run(&d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT, &plain, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.dst is NULL");
    d.pad_w = -1;
    CHECK_ERROR(cf_run(&d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT, &plain, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "desc.pad_w = -1");
}

/* Chains corrupted behind the API's back (a struct filled by hand, a stale handle): a status, never a read
 * past the op array. White-box: writes struct cf_chain directly. */
static void test_malformed_chain(void)
{
    cf_conv_desc_t d = small_conv();
    cf_plan_t plan = NULL;
    cf_chain_t chain;
    CHECK_STATUS(cf_chain_create(&chain), CF_STATUS_SUCCESS);
    /* an empty chain is valid: the conv alone */
    CHECK_STATUS(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);

    chain->length = CF_CHAIN_MAX_OPS + 1;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "chain is malformed: length = 17");
    CHECK(plan == NULL);
    chain->length = -1;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "length = -1");
    chain->length = 0;
    cf_chain_append_relu(chain);
    cf_chain_append_mul_scalar(chain, 2.0);
    cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, 0.1);
    chain->ops[0].kind = (cf_op_kind_t)99;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "chain op 0 is malformed: kind = 99");
    chain->ops[0].kind = CF_OP_COUNT;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "kind = 10");
    chain->ops[0].kind = CF_OP_RELU;
    chain->ops[1].scalar = NAN;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "chain op 1 (mul_scalar) is malformed: s = nan");
    chain->ops[1].scalar = 2.0;
    chain->ops[2].eps = 0.0;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "chain op 2 (batch_norm) is malformed");
    chain->ops[2].eps = 1e-5;
    chain->ops[2].bn_mode = (cf_bn_mode_t)5;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "mode = 5");
    chain->ops[2].bn_mode = CF_BN_TRAINING;
    chain->ops[2].momentum = 2.0;
    CHECK_ERROR(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "momentum = 2");
    chain->ops[2].momentum = CF_BN_MOMENTUM_CUMULATIVE;
    CHECK_STATUS(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);
    cf_chain_destroy(chain);
}

/* dst aliasing an input: refused, naming the input (the header says dst must not overlap the inputs). */
static void test_dst_overlap(void)
{
    cf_conv_desc_t d = small_conv(); /* src 384, wei 108, dst 288 floats */
    static float buf[2048];
    float va[4] = {1, 2, 3, 4};
    cf_chain_t chain;
    cf_chain_create(&chain);
    cf_chain_append_add_channel(chain);
    cf_plan_t plan;
    CHECK_STATUS(cf_plan_create(&plan, &d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_args_t args;
    memset(&args, 0, sizeof args);
    args.src = buf;           /* [0, 384) */
    args.wei = buf + 384;     /* [384, 492) */
    args.bia = buf + 492;     /* [492, 496) */
    args.ops[0].channel_a = va;
    args.dst = buf + 383;     /* last src element */
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.dst overlaps args.src");
    args.dst = buf + 200;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.dst overlaps args.src");
    args.src = buf + 1024;    /* away from dst [200, 488): now it covers wei */
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.dst overlaps args.wei");
    args.dst = buf + 496;     /* [496, 784): touches nothing */
    args.ops[0].channel_a = buf + 783;
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT,
                "args.dst overlaps args.ops[0].channel_a");
    args.ops[0].channel_a = buf + 784; /* adjacent, not overlapping */
    CHECK_STATUS(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_SUCCESS);
    args.bia = buf + 495 + 288; /* inside dst (ignored only when has_bias = 0) */
    CHECK_ERROR(cf_plan_execute(plan, &args, NULL, 0, NULL), CF_STATUS_INVALID_ARGUMENT, "args.dst overlaps args.bia");
    cf_plan_destroy(plan);
    cf_chain_destroy(chain);
}

/* Tensors past 2^31 elements plan fine on the CPU backend (64-bit sizes throughout; not executed here: the
 * double intermediate alone would be 32 GiB); sizes no address space can hold are refused with a message. */
static void test_large_tensors(void)
{
    cf_conv_desc_t d;
    cf_plan_t plan = NULL;
    /* conv_transpose2d 64x256x256x256 -> 64x256x512x512: 2^32 output elements (16 GiB of float) */
    cf_conv_desc_init(&d, CF_CONV_TRANSPOSE_2D, 64, 256, 256, 256, 256, 4, 4);
    d.stride_h = d.stride_w = 2;
    d.pad_h = d.pad_w = 1;
    CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    if (plan != NULL) {
        int64_t oh = 0, ow = 0;
        CHECK_STATUS(cf_plan_output_dims(plan, &oh, &ow), CF_STATUS_SUCCESS);
        CHECK(oh == 512 && ow == 512);
        CHECK(cf_plan_dst_elems(plan) == (int64_t)1 << 32);
        CHECK(cf_plan_dst_elems(plan) > INT32_MAX);
        CHECK(cf_plan_src_elems(plan) == (int64_t)1 << 30);
        const char *name = NULL;
        CHECK_STATUS(cf_plan_impl_name(plan, &name), CF_STATUS_SUCCESS);
        CHECK(name != NULL && strcmp(name, "cpu_reference") == 0);
        cf_plan_destroy(plan);
    }
    /* a single output plane past 2^31 (OH*OW = 2^32): 1x1 conv on 65536x65536 */
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 65536, 65536, 1, 1, 1);
    CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
    cf_plan_destroy(plan);

    /* The per-tensor limit, 2^48 bytes = 2^46 floats: exactly at it passes, one plane more does not. */
    cf_conv_desc_init(&d, CF_CONV_2D, (int64_t)1 << 20, 1, 1024, 1024, 64, 1, 1); /* dst = 2^46 */
    int64_t oh, ow;
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    d.c_out = 65;
    CHECK_ERROR(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_ARGUMENT, "dst has too many elements");
    CHECK(strstr(cf_last_error(), "2^48 bytes") != NULL);

    /* Absurd sizes: n = 2^40 with a small image. */
    cf_conv_desc_init(&d, CF_CONV_2D, (int64_t)1 << 40, 3, 8, 8, 4, 3, 3);
    plan = (cf_plan_t)&d;
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "desc: src has too many elements (n*c_in*h*w = 1099511627776*3*8*8");
    CHECK(plan == NULL);
    cf_conv_desc_init(&d, CF_CONV_TRANSPOSE_2D, 1, 1, (int64_t)1 << 40, 1, 1, 1, 1);
    d.stride_h = (int64_t)1 << 20; /* OH = (2^40-1)*2^20 + 1: overflows no int64, but no tensor is that big */
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "dst has too many elements");
    d.stride_h = (int64_t)1 << 40; /* (2^40-1)*2^40 overflows int64 */
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "overflows int64");
    cf_conv_desc_init(&d, CF_CONV_2D, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, 1, 1);
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "too many elements");
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 8, 8, 1, INT64_MAX, 1);
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_SHAPE, "height");
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 8, 8, 1, 3, 3);
    d.pad_w = INT64_MAX;
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "overflow");
    d.pad_w = INT64_MIN;
    CHECK_ERROR(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_INVALID_ARGUMENT,
                "desc.pad_w = -9223372036854775808");

    /* Valid but extreme: stride INT64_MAX, padding 2^31 (found by fuzz_api: the CPU loop bounds overflowed).
     * OW = (1 + 2^32 - 5) / INT64_MAX + 1 = 1, and every tap lands in the padding: dst = bias. */
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 1, 1, 1, 1, 5);
    d.stride_w = INT64_MAX;
    d.pad_w = (int64_t)1 << 31;
    d.stride_h = INT64_MAX;
    d.pad_h = INT64_MAX / 4;
    const float one = 1.0f, w5[5] = {1, 1, 1, 1, 1}, b = 0.25f;
    float out = NAN;
    cf_args_t args;
    memset(&args, 0, sizeof args);
    args.src = &one;
    args.wei = w5;
    args.bia = &b;
    args.dst = &out;
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
    CHECK(oh == 1 && ow == 1);
    CHECK_STATUS(cf_run(&d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT, &args, NULL, 0, NULL), CF_STATUS_SUCCESS);
    CHECK(out == 0.25f);
}

static void test_verbose(void)
{
    setenv("CONVFUSE_VERBOSE", "plans, dispatch ,x", 1);
    CHECK(cf_verbose("dispatch"));
    CHECK(cf_verbose("plans"));
    CHECK(!cf_verbose("disp"));
    CHECK(!cf_verbose("dispatcher"));
    setenv("CONVFUSE_VERBOSE", "", 1);
    CHECK(!cf_verbose("dispatch"));
    unsetenv("CONVFUSE_VERBOSE");
    CHECK(!cf_verbose("dispatch"));
}

#ifndef __STDC_NO_THREADS__
static int other_thread(void *arg)
{
    (void)arg;
    if (strcmp(cf_last_error(), "") != 0)
        return 1;
    cf_chain_create(NULL);
    return strstr(cf_last_error(), "cf_chain_create") != NULL ? 0 : 2;
}

static void test_thread_local_error(void)
{
    cf_chain_length(NULL, NULL);
    thrd_t t;
    int rc = -1;
    CHECK(thrd_create(&t, other_thread, NULL) == thrd_success);
    CHECK(thrd_join(t, &rc) == thrd_success);
    CHECK(rc == 0);
    CHECK(strstr(cf_last_error(), "cf_chain_length") != NULL);
}
#endif

int main(void)
{
    test_status_and_version();
    test_desc();
    test_chain();
    test_plan();
    test_execute();
    test_malformed_chain();
    test_dst_overlap();
    test_large_tensors();
    test_verbose();
#ifndef __STDC_NO_THREADS__
    test_thread_local_error();
#endif
    return check_summary("test_api");
}
