/* Output-size arithmetic against the sizes torch.nn.Conv2d / ConvTranspose2d give (values taken from
 * PyTorch 2.x; the first formula term is written out for a few rows). */
#include "check.h"

typedef struct {
    cf_conv_kind_t kind;
    int64_t h, w, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw;
    int64_t want_oh, want_ow;
} shape_case_t;

static const shape_case_t cases[] = {
    /* conv2d: OH = floor((H + 2p - d(k-1) - 1) / s) + 1 */
    {CF_CONV_2D, 128, 128, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 126, 126}, /* KernelBench conv */
    {CF_CONV_2D, 32, 17, 3, 5, 2, 3, 1, 2, 0, 0, 1, 1, 16, 6},       /* (32+2-3)/2+1 = 16; (17+4-5)/3+1 = 6 */
    {CF_CONV_2D, 10, 11, 3, 3, 1, 1, 0, 0, 0, 0, 2, 3, 6, 5},        /* 10-4-1+1 = 6; 11-6-1+1 = 5 */
    {CF_CONV_2D, 7, 9, 2, 4, 3, 2, 2, 1, 0, 0, 2, 1, 3, 4},          /* (7+4-2-1)/3+1 = 3 */
    {CF_CONV_2D, 5, 5, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1},
    {CF_CONV_2D, 1, 1, 1, 1, 4, 4, 0, 0, 0, 0, 1, 1, 1, 1},
    {CF_CONV_2D, 224, 224, 7, 7, 2, 2, 3, 3, 0, 0, 1, 1, 112, 112},  /* ResNet stem */
    /* conv_transpose2d: OH = (H-1)s - 2p + d(k-1) + out_pad + 1 */
    {CF_CONV_TRANSPOSE_2D, 64, 64, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 129, 129}, /* 126-2+3+1+1 = 129 */
    {CF_CONV_TRANSPOSE_2D, 5, 7, 3, 3, 2, 3, 1, 0, 1, 2, 1, 1, 10, 23},     /* 8-2+2+1+1; 18+2+2+1 */
    {CF_CONV_TRANSPOSE_2D, 6, 4, 3, 2, 1, 1, 0, 1, 0, 1, 1, 2, 8, 5},       /* out_pad_w 1 < dil_w 2 */
    {CF_CONV_TRANSPOSE_2D, 3, 3, 3, 3, 3, 3, 1, 2, 2, 0, 2, 2, 11, 7},
    {CF_CONV_TRANSPOSE_2D, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1},
    {CF_CONV_TRANSPOSE_2D, 16, 8, 5, 3, 2, 2, 2, 1, 0, 1, 3, 1, 39, 16},
};

static cf_conv_desc_t desc_of(const shape_case_t *c)
{
    cf_conv_desc_t d;
    cf_conv_desc_init(&d, c->kind, 2, 3, c->h, c->w, 5, c->kh, c->kw);
    d.stride_h = c->sh;
    d.stride_w = c->sw;
    d.pad_h = c->ph;
    d.pad_w = c->pw;
    d.out_pad_h = c->oph;
    d.out_pad_w = c->opw;
    d.dil_h = c->dh;
    d.dil_w = c->dw;
    return d;
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cf_conv_desc_t d = desc_of(&cases[i]);
        int64_t oh = -1, ow = -1;
        CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_SUCCESS);
        CHECK(oh == cases[i].want_oh);
        CHECK(ow == cases[i].want_ow);
        if (oh != cases[i].want_oh || ow != cases[i].want_ow)
            fprintf(stderr, "    case %zu: got %lldx%lld, want %lldx%lld\n", i, (long long)oh, (long long)ow,
                    (long long)cases[i].want_oh, (long long)cases[i].want_ow);

        /* The plan agrees with the descriptor. */
        cf_plan_t plan;
        CHECK_STATUS(cf_plan_create(&plan, &d, NULL, CF_BACKEND_CPU, CF_MATH_DEFAULT), CF_STATUS_SUCCESS);
        int64_t poh = -1, pow_ = -1;
        CHECK_STATUS(cf_plan_output_dims(plan, &poh, &pow_), CF_STATUS_SUCCESS);
        CHECK(poh == oh && pow_ == ow);
        cf_plan_destroy(plan);
    }

    /* Sizes PyTorch rejects as empty outputs. */
    int64_t oh, ow;
    shape_case_t too_small = {CF_CONV_2D, 2, 2, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0};
    cf_conv_desc_t d = desc_of(&too_small);
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE);
    shape_case_t over_padded = {CF_CONV_TRANSPOSE_2D, 2, 2, 3, 3, 1, 1, 3, 3, 0, 0, 1, 1, 0, 0}; /* -2 */
    d = desc_of(&over_padded);
    CHECK_STATUS(cf_conv_desc_output_dims(&d, &oh, &ow), CF_STATUS_INVALID_SHAPE);
    return check_summary("test_shapes");
}
