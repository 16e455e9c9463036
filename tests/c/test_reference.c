/* The CPU reference on small cases checked by hand (expected values written out, or computed by
 * PyTorch 2.x in float64 where the arithmetic is long), plus a naive direct-formula cross-check of the
 * optimised conv loops over strides, paddings and dilations. */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

/* Runs desc + chain on the CPU with op buffers `ops` (may be NULL); dst is poisoned with NaN first. */
static cf_status_t run_cpu(const cf_conv_desc_t *d, const_cf_chain_t chain, const float *src, const float *wei,
                           const float *bia, float *dst, const cf_op_args_t *ops)
{
    int64_t oh, ow;
    if (cf_conv_desc_output_dims(d, &oh, &ow) == CF_STATUS_SUCCESS)
        for (int64_t i = 0; i < d->n * d->c_out * oh * ow; i++)
            dst[i] = NAN;
    cf_args_t args;
    memset(&args, 0, sizeof args);
    args.src = src;
    args.wei = wei;
    args.bia = bia;
    args.dst = dst;
    if (ops != NULL)
        memcpy(args.ops, ops, sizeof args.ops);
    return cf_run(d, chain, CF_BACKEND_CPU, CF_MATH_DEFAULT, &args, NULL, 0, NULL);
}

/* A 1x1 conv whose weights are the identity: dst = src, so chains see src's values directly. */
static cf_conv_desc_t identity_desc(int64_t n, int64_t c, int64_t h, int64_t w, float *wei)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_2D, n, c, h, w, c, 1, 1);
    d.has_bias = 0;
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < c; j++)
            wei[i * c + j] = i == j ? 1.0f : 0.0f;
    return d;
}

static void test_identity_conv(void)
{
    float src[2 * 3 * 4 * 5], wei[9], dst[2 * 3 * 4 * 5];
    const float bia[3] = {0.5f, -1.0f, 2.0f};
    for (int i = 0; i < 120; i++)
        src[i] = (float)(i * 37 % 23) * 0.25f - 2.0f;
    cf_conv_desc_t d = identity_desc(2, 3, 4, 5, wei);
    d.has_bias = 1;
    CHECK_STATUS(run_cpu(&d, NULL, src, wei, bia, dst, NULL), CF_STATUS_SUCCESS);
    int exact = 1;
    for (int i = 0; i < 120; i++)
        exact &= dst[i] == src[i] + bia[(i / 20) % 3];
    CHECK(exact);
}

static void test_conv2d_by_hand(void)
{
    const float src[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    float dst[16];
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 1, 3, 3, 1, 3, 3);
    d.has_bias = 0;
    d.pad_h = d.pad_w = 1; /* 3x3 neighbourhood sums */
    CHECK_STATUS(run_cpu(&d, NULL, src, ones, NULL, dst, NULL), CF_STATUS_SUCCESS);
    const float sums[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
    for (int i = 0; i < 9; i++)
        CHECK(dst[i] == sums[i]);

    d.stride_h = d.stride_w = 2; /* the four corners of the above */
    CHECK_STATUS(run_cpu(&d, NULL, src, ones, NULL, dst, NULL), CF_STATUS_SUCCESS);
    CHECK(dst[0] == 12 && dst[1] == 16 && dst[2] == 24 && dst[3] == 28);

    d.stride_h = d.stride_w = 1;
    d.dil_h = d.dil_w = 2;
    d.pad_h = d.pad_w = 2; /* taps 2 apart: (0,0) sees the corners 1+3+7+9, the centre only itself */
    CHECK_STATUS(run_cpu(&d, NULL, src, ones, NULL, dst, NULL), CF_STATUS_SUCCESS);
    CHECK(dst[0] == 20 && dst[4] == 5 && dst[1] == 4 + 6 && dst[8] == 20);

    /* bias and two input channels: channel 1 is src*10, weights 1 and 0.5 at the centre tap only */
    float src2[18], wei2[18] = {0}, bia2[1] = {-1};
    for (int i = 0; i < 9; i++) {
        src2[i] = src[i];
        src2[9 + i] = src[i] * 10;
    }
    wei2[4] = 1.0f;
    wei2[9 + 4] = 0.5f;
    cf_conv_desc_init(&d, CF_CONV_2D, 1, 2, 3, 3, 1, 3, 3);
    d.pad_h = d.pad_w = 1;
    CHECK_STATUS(run_cpu(&d, NULL, src2, wei2, bia2, dst, NULL), CF_STATUS_SUCCESS);
    for (int i = 0; i < 9; i++)
        CHECK(dst[i] == src[i] * 6 - 1);
}

static void test_transposed_by_hand(void)
{
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 10, 100, 1000};
    float dst[16];
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, CF_CONV_TRANSPOSE_2D, 1, 1, 2, 2, 1, 2, 2);
    d.has_bias = 0;
    /* stride 1: out[oh][ow] = sum x[ih][iw] * w[oh-ih][ow-iw] */
    CHECK_STATUS(run_cpu(&d, NULL, x, w, NULL, dst, NULL), CF_STATUS_SUCCESS);
    const float full[9] = {1, 12, 20, 103, 1234, 2040, 300, 3400, 4000};
    for (int i = 0; i < 9; i++)
        CHECK(dst[i] == full[i]);

    /* stride 2: no overlap, out[2ih+kh][2iw+kw] = x[ih][iw] * w[kh][kw] */
    d.stride_h = d.stride_w = 2;
    CHECK_STATUS(run_cpu(&d, NULL, x, w, NULL, dst, NULL), CF_STATUS_SUCCESS);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            CHECK(dst[r * 4 + c] == x[(r / 2) * 2 + c / 2] * w[(r % 2) * 2 + c % 2]);

    /* stride 2, pad 1, out_pad 1: OH = 2 - 2 + 1 + 1 + 1 = 3, the stride-2 grid without its first row/col */
    d.pad_h = d.pad_w = 1;
    d.out_pad_h = d.out_pad_w = 1;
    d.has_bias = 1;
    const float b[1] = {0.5f};
    CHECK_STATUS(run_cpu(&d, NULL, x, w, b, dst, NULL), CF_STATUS_SUCCESS);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            CHECK(dst[r * 3 + c] == x[((r + 1) / 2) * 2 + (c + 1) / 2] * w[((r + 1) % 2) * 2 + (c + 1) % 2] + 0.5f);
}

/* Direct formulas, one output element at a time (gather form for the transposed conv too). */
static double naive_at(const cf_conv_desc_t *d, const float *src, const float *wei, const float *bia, int64_t n,
                       int64_t co, int64_t oh, int64_t ow)
{
    double acc = bia != NULL ? bia[co] : 0.0;
    for (int64_t ci = 0; ci < d->c_in; ci++)
        for (int64_t kh = 0; kh < d->kh; kh++)
            for (int64_t kw = 0; kw < d->kw; kw++) {
                int64_t ih, iw;
                double w;
                if (d->kind == CF_CONV_2D) {
                    ih = oh * d->stride_h - d->pad_h + kh * d->dil_h;
                    iw = ow * d->stride_w - d->pad_w + kw * d->dil_w;
                    w = wei[((co * d->c_in + ci) * d->kh + kh) * d->kw + kw];
                } else {
                    int64_t th = oh + d->pad_h - kh * d->dil_h, tw = ow + d->pad_w - kw * d->dil_w;
                    if (th < 0 || tw < 0 || th % d->stride_h != 0 || tw % d->stride_w != 0)
                        continue;
                    ih = th / d->stride_h;
                    iw = tw / d->stride_w;
                    w = wei[((ci * d->c_out + co) * d->kh + kh) * d->kw + kw];
                }
                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w)
                    continue;
                acc += w * src[((n * d->c_in + ci) * d->h + ih) * d->w + iw];
            }
    return acc;
}

static uint32_t lcg_state = 12345u;
static float lcg_uniform(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)(lcg_state >> 8) / 16777216.0f;
}

static void test_against_naive(void)
{
    /* kind, h, w, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw */
    const int64_t cases[][13] = {
        {0, 9, 7, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1}, {0, 9, 7, 3, 2, 2, 3, 1, 2, 0, 0, 1, 1},
        {0, 11, 8, 3, 3, 1, 2, 2, 1, 0, 0, 2, 3}, {0, 5, 5, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1},
        {1, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1}, {1, 4, 3, 3, 2, 3, 1, 1, 0, 2, 0, 1, 2},
        {1, 3, 5, 3, 3, 1, 2, 2, 1, 1, 1, 2, 2}, {1, 6, 2, 5, 1, 2, 1, 3, 0, 0, 0, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t *c = cases[k];
        cf_conv_desc_t d;
        cf_conv_desc_init(&d, c[0] == 0 ? CF_CONV_2D : CF_CONV_TRANSPOSE_2D, 2, 3, c[1], c[2], 4, c[3], c[4]);
        d.stride_h = c[5], d.stride_w = c[6], d.pad_h = c[7], d.pad_w = c[8];
        d.out_pad_h = c[9], d.out_pad_w = c[10], d.dil_h = c[11], d.dil_w = c[12];
        int64_t oh, ow;
        CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
        const int64_t ns = d.n * d.c_in * d.h * d.w, nw = d.c_in * d.c_out * d.kh * d.kw, nd = d.n * d.c_out * oh * ow;
        float *src = malloc(sizeof(float) * (size_t)ns), *wei = malloc(sizeof(float) * (size_t)nw);
        float *dst = malloc(sizeof(float) * (size_t)nd), bia[4];
        for (int64_t i = 0; i < ns; i++)
            src[i] = lcg_uniform() * 2 - 1;
        for (int64_t i = 0; i < nw; i++)
            wei[i] = lcg_uniform() * 2 - 1;
        for (int i = 0; i < 4; i++)
            bia[i] = lcg_uniform();
        CHECK_STATUS(run_cpu(&d, NULL, src, wei, bia, dst, NULL), CF_STATUS_SUCCESS);
        double worst = 0;
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t co = 0; co < d.c_out; co++)
                for (int64_t y = 0; y < oh; y++)
                    for (int64_t x = 0; x < ow; x++) {
                        double want = (float)naive_at(&d, src, wei, bia, n, co, y, x);
                        double err = fabs(dst[((n * d.c_out + co) * oh + y) * ow + x] - want);
                        worst = err > worst || isnan(err) ? err : worst;
                    }
        CHECK(worst <= 1e-6);
        if (!(worst <= 1e-6))
            fprintf(stderr, "    naive case %zu: max error %g\n", k, worst);
        free(src);
        free(wei);
        free(dst);
    }
}

static void test_softmax(void)
{
    float wei[9], dst[3 * 4];
    cf_chain_t chain;
    cf_chain_create(&chain);
    cf_chain_append_softmax_channels(chain);
    /* 4 pixels x 3 channels (NCHW: channel-major): logits [1,2,3], huge [1e30,0,-1e30], [1e30,1e30,0], NaN */
    const float src[12] = {1, 1e30f, 1e30f, NAN, 2, 0, 1e30f, 1, 3, -1e30f, 0, 2};
    cf_conv_desc_t d = identity_desc(1, 3, 2, 2, wei);
    CHECK_STATUS(run_cpu(&d, chain, src, wei, NULL, dst, NULL), CF_STATUS_SUCCESS);
    CHECK_NEAR(dst[0], 0.09003057317038045, 1e-7);
    CHECK_NEAR(dst[4], 0.2447284710547976, 1e-7);
    CHECK_NEAR(dst[8], 0.6652409557748218, 1e-7);
    CHECK(dst[1] == 1.0f && dst[5] == 0.0f && dst[9] == 0.0f);  /* huge logits stay finite */
    CHECK(dst[2] == 0.5f && dst[6] == 0.5f && dst[10] == 0.0f);
    CHECK(isnan(dst[3]) && isnan(dst[7]) && isnan(dst[11])); /* a NaN poisons its pixel only */

    /* Per-channel infinities via add_channel, as torch.softmax: +inf -> NaN pixel, all -inf -> NaN,
     * one -inf -> 0 there. */
    cf_chain_t inf_chain;
    cf_chain_create(&inf_chain);
    cf_chain_append_add_channel(inf_chain);
    cf_chain_append_softmax_channels(inf_chain);
    const float zeros[3] = {0, 0, 0};
    cf_conv_desc_t one = identity_desc(1, 3, 1, 1, wei);
    cf_op_args_t ops[CF_CHAIN_MAX_OPS];
    memset(ops, 0, sizeof ops);
    const float pinf[3] = {INFINITY, 0, 0}, ninf[3] = {-INFINITY, -INFINITY, -INFINITY}, one_ninf[3] = {-INFINITY, 0, 0};
    ops[0].channel_a = pinf;
    CHECK_STATUS(run_cpu(&one, inf_chain, zeros, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
    CHECK(isnan(dst[0]) && isnan(dst[1]) && isnan(dst[2]));
    ops[0].channel_a = ninf;
    CHECK_STATUS(run_cpu(&one, inf_chain, zeros, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
    CHECK(isnan(dst[0]) && isnan(dst[1]) && isnan(dst[2]));
    ops[0].channel_a = one_ninf;
    CHECK_STATUS(run_cpu(&one, inf_chain, zeros, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
    CHECK(dst[0] == 0.0f && dst[1] == 0.5f && dst[2] == 0.5f);
    cf_chain_destroy(inf_chain);
    cf_chain_destroy(chain);
}

static void test_activations(void)
{
    const float x[8] = {-3, -0.5f, 0, 0.5f, 3, 20, -20, NAN};
    /* torch.sigmoid / tanh / gelu (float64) at x[0..6] */
    const double sig[7] = {0.04742587317756678, 0.3775406687981454, 0.5, 0.6224593312018546,
                           0.9525741268224334, 0.9999999979388463, 2.0611536181902037e-09};
    const double th[7] = {-0.9950547536867305, -0.46211715726000974, 0.0, 0.46211715726000974,
                          0.9950547536867305, 1.0, -1.0};
    const double ge[7] = {-0.00404969409489031, -0.15426876936299344, 0.0, 0.34573123063700656,
                          2.99595030590511, 20.0, -0.0};
    const double rl[7] = {0, 0, 0, 0.5, 3, 20, 0};
    const double *want[4] = {sig, th, ge, rl};
    float wei[1], dst[8];
    cf_conv_desc_t d = identity_desc(1, 1, 2, 4, wei);
    for (int a = 0; a < 4; a++) {
        cf_chain_t chain;
        cf_chain_create(&chain);
        if (a == 0)
            cf_chain_append_sigmoid(chain);
        else if (a == 1)
            cf_chain_append_tanh(chain);
        else if (a == 2)
            cf_chain_append_gelu(chain);
        else
            cf_chain_append_relu(chain);
        CHECK_STATUS(run_cpu(&d, chain, x, wei, NULL, dst, NULL), CF_STATUS_SUCCESS);
        for (int i = 0; i < 7; i++)
            CHECK_NEAR(dst[i], want[a][i], 1e-7 * (1 + fabs(want[a][i])));
        CHECK(isnan(dst[7])); /* NaN stays NaN, relu included */
        cf_chain_destroy(chain);
    }
}

static void test_scalar_and_channel_ops(void)
{
    /* ((x + a[c]) * 2 + 1) * s[c] + t[c] on x = 1..4, two channels of two pixels */
    const float x[4] = {1, 2, 3, 4}, a[2] = {10, 20}, s[2] = {0.5f, -1}, t[2] = {3, 4};
    float wei[4], dst[4];
    cf_conv_desc_t d = identity_desc(1, 2, 1, 2, wei);
    cf_chain_t chain;
    cf_chain_create(&chain);
    cf_chain_append_add_channel(chain);
    cf_chain_append_mul_scalar(chain, 2.0);
    cf_chain_append_add_scalar(chain, 1.0);
    cf_chain_append_affine_channel(chain);
    cf_op_args_t ops[CF_CHAIN_MAX_OPS];
    memset(ops, 0, sizeof ops);
    ops[0].channel_a = a;
    ops[3].channel_a = s;
    ops[3].channel_b = t;
    CHECK_STATUS(run_cpu(&d, chain, x, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
    CHECK(dst[0] == 14.5f && dst[1] == 15.5f); /* (11*2+1)*0.5+3, (12*2+1)*0.5+3 */
    CHECK(dst[2] == -43 && dst[3] == -45);     /* -(23*2+1)+4, -(24*2+1)+4 */
    cf_chain_destroy(chain);
}

/* N=2, C=2, 1x2 pixels: channel 0 holds {1,2,3,4}, channel 1 {10,10,10,14} (times k in call k). */
static const float bn_base[8] = {1, 2, 10, 10, 3, 4, 10, 14};

static void test_batch_norm_training(void)
{
    const float gamma[2] = {2, 0.5f}, beta[2] = {1, -1};
    /* torch.nn.BatchNorm2d(2, eps=1e-5, momentum=m).train(), weight gamma, bias beta, three calls with
     * inputs base*1, base*2, base*3 (float64); y_want is the third call's output. */
    const double y_want[8] = {-1.6832803804309544, 0.10557320652301527, -1.2886750811364696, -1.2886750811364696,
                              1.894426793476985,   3.6832803804309546,  -1.2886750811364696, -0.1339747565905916};
    const double rm_want[2][2] = {{1.4025, 6.171}, {5.0, 22.0}};                /* momentum 0.1, None */
    const double rv_want[2][2] = {{2.964, 6.093}, {7.777777777777779, 18.666666666666668}};
    for (int cumulative = 0; cumulative < 2; cumulative++) {
        float wei[4], dst[8], src[8], rm[2] = {0, 0}, rv[2] = {1, 1};
        int64_t nbt = 0;
        cf_conv_desc_t d = identity_desc(2, 2, 1, 2, wei);
        cf_chain_t chain;
        cf_chain_create(&chain);
        cf_chain_append_batch_norm(chain, CF_BN_TRAINING, 1e-5, cumulative ? CF_BN_MOMENTUM_CUMULATIVE : 0.1);
        cf_op_args_t ops[CF_CHAIN_MAX_OPS];
        memset(ops, 0, sizeof ops);
        ops[0].channel_a = gamma;
        ops[0].channel_b = beta;
        ops[0].running_mean = rm;
        ops[0].running_var = rv;
        ops[0].num_batches_tracked = &nbt;
        for (int k = 1; k <= 3; k++) {
            for (int i = 0; i < 8; i++)
                src[i] = bn_base[i] * (float)k;
            CHECK_STATUS(run_cpu(&d, chain, src, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
            CHECK(nbt == k);
        }
        for (int i = 0; i < 8; i++)
            CHECK_NEAR(dst[i], y_want[i], 1e-6);
        CHECK(nbt == 3);
        for (int c = 0; c < 2; c++) {
            CHECK_NEAR(rm[c], rm_want[cumulative][c], 1e-6 * rm_want[cumulative][c]);
            CHECK_NEAR(rv[c], rv_want[cumulative][c], 1e-6 * rv_want[cumulative][c]);
        }

        /* Without running stats or gamma/beta: plain (x - mean) / sqrt(var + eps); channel 0 has mean 2.5,
         * var 1.25 (call k = 1). Momentum 0.1 needs no num_batches_tracked. */
        if (!cumulative) {
            memset(ops, 0, sizeof ops);
            CHECK_STATUS(run_cpu(&d, chain, bn_base, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
            CHECK_NEAR(dst[0], (1 - 2.5) / sqrt(1.25 + 1e-5), 1e-6);
            CHECK_NEAR(dst[5], (4 - 2.5) / sqrt(1.25 + 1e-5), 1e-6);
        }
        cf_chain_destroy(chain);
    }
}

static void test_batch_norm_inference(void)
{
    const float gamma[2] = {2, 0.5f}, beta[2] = {1, -1};
    float rm[2] = {1, 2}, rv[2] = {4, 0.25f}, wei[4], dst[8];
    /* torch.nn.BatchNorm2d(2, eps=1e-5).eval() with those running stats (float64) */
    const double want[8] = {1.0, 1.9999987500023437, 6.9998400047998395, 6.9998400047998395,
                            2.9999975000046875, 3.9999962500070314, 6.9998400047998395, 10.99976000719976};
    cf_conv_desc_t d = identity_desc(2, 2, 1, 2, wei);
    cf_chain_t chain;
    cf_chain_create(&chain);
    cf_chain_append_batch_norm(chain, CF_BN_INFERENCE, 1e-5, 0.1);
    cf_op_args_t ops[CF_CHAIN_MAX_OPS];
    memset(ops, 0, sizeof ops);
    ops[0].channel_a = gamma;
    ops[0].channel_b = beta;
    ops[0].running_mean = rm;
    ops[0].running_var = rv;
    CHECK_STATUS(run_cpu(&d, chain, bn_base, wei, NULL, dst, ops), CF_STATUS_SUCCESS);
    for (int i = 0; i < 8; i++)
        CHECK_NEAR(dst[i], want[i], 1e-6 * fabs(want[i]));
    CHECK(rm[0] == 1 && rm[1] == 2 && rv[0] == 4 && rv[1] == 0.25f); /* inference leaves them alone */
    cf_chain_destroy(chain);
}

int main(void)
{
    test_identity_conv();
    test_conv2d_by_hand();
    test_transposed_by_hand();
    test_against_naive();
    test_softmax();
    test_activations();
    test_scalar_and_channel_ops();
    test_batch_norm_training();
    test_batch_norm_inference();
    return check_summary("test_reference");
}
