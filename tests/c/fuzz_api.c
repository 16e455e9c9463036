/* libFuzzer target over descriptor + chain validation, plan creation and (tiny) plan execution on the CPU
 * backend. Built only with clang and -DCONVFUSE_LIBFUZZER=ON (tests/fuzz_api.sh does it all), with
 * -fsanitize=fuzzer,address,undefined; the library is compiled with coverage and the same sanitizers.
 *
 * The input bytes are a little program (missing bytes read as 0, i.e. small valid values):
 *   kind                       1 byte: %3 -> conv2d, conv_transpose2d, invalid (7)
 *   15 int64 fields            n c_in h w c_out kh kw stride_h stride_w pad_h pad_w out_pad_h out_pad_w dil_h dil_w,
 *                              each take_i64(): byte b < 0xC0 -> b%12 - 1 (-1..10); b < 0xF0 -> interesting[b%16];
 *                              else the next 8 bytes, little endian
 *   groups, has_bias, dtype    1 byte each: groups (b < 0xF0 -> 1, else interesting), has_bias b%3, dtype b%4
 *   backend, math              1 byte each: backend {cpu,cpu,cpu,cuda,9}[b%5]; math b%4 (3 is invalid)
 *   chain header               1 byte: bit0 NULL chain, bits1-2 white-box corruption (length, kind, bn fields),
 *                              then 1 byte: number of appends (%20, past CF_CHAIN_MAX_OPS on purpose)
 *   each append                1 byte op (%11; 10 = append to a NULL chain), then for scalar ops take_double(),
 *                              for batch_norm mode (b%3), eps and momentum (take_double each)
 *   execution                  1 byte of flags: bit0 execute (only if every tensor is <= 4096 floats), bits1-6 drop
 *                              src/wei/dst/op buffers or flip the bias, bit7 alias dst with src; rest: input values
 *
 * Invariants (abort() = a finding): every status is a known code and never CF_STATUS_INTERNAL_ERROR; every
 * failure leaves a non-empty cf_last_error(); a failed cf_plan_create() leaves *plan NULL; a plan's output dims
 * are >= 1 and equal cf_conv_desc_output_dims(); chain lengths count the successful appends. Buffers are malloc'd
 * at their exact sizes from cf_plan_output_dims(), so AddressSanitizer sees any out-of-bounds access.
 * CF_FUZZ_TRACE=1 prints the plan and execute statuses (for replaying one input by hand). */
#include "convfuse.h"
#include "internal.h" /* white-box: corrupt a chain's fields */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p;
    size_t n, i;
} reader_t;

static uint8_t take_u8(reader_t *r)
{
    return r->i < r->n ? r->p[r->i++] : 0;
}

static const int64_t interesting_i64[16] = {
    0, 1, 2, 3, -1, INT64_MAX, INT64_MIN, INT32_MAX, (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 40,
    (int64_t)1 << 46, ((int64_t)1 << 46) + 1, INT64_MAX / 2, INT64_MAX / 4 + 1, 65536,
};

static int64_t take_i64(reader_t *r)
{
    const uint8_t b = take_u8(r);
    if (b < 0xC0)
        return (int64_t)(b % 12) - 1;
    if (b < 0xF0)
        return interesting_i64[b % 16];
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)take_u8(r) << (8 * k);
    int64_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

static double take_double(reader_t *r)
{
    static const double table[16] = {0.0,     1.0,      -1.0, 2.5,      NAN,   INFINITY, -INFINITY, DBL_MAX,
                                     -DBL_MAX, 1e-300, 5e-324, 1e30, -0.0, 0.5, 0.1, 1e-5};
    return table[take_u8(r) % 16];
}

static void fail(const char *what, cf_status_t st)
{
    fprintf(stderr, "fuzz_api: invariant broken: %s (status %s = %d, last error \"%s\")\n", what,
            cf_status_string(st), (int)st, cf_last_error());
    abort();
}

/* Every status must be a known code, never INTERNAL_ERROR, and a failure must say why. */
static cf_status_t checked(cf_status_t st, const char *call)
{
    if ((int)st < 0 || (int)st >= CF_STATUS_COUNT || st == CF_STATUS_INTERNAL_ERROR)
        fail(call, st);
    if (st != CF_STATUS_SUCCESS && cf_last_error()[0] == '\0')
        fail(call, st);
    return st;
}

static float *floats(reader_t *r, int64_t count)
{
    float *p = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    if (p == NULL)
        abort();
    for (int64_t i = 0; i < count; i++) {
        const uint8_t b = take_u8(r);
        p[i] = b == 0x7F ? NAN : b == 0x7E ? INFINITY : b == 0x7D ? -INFINITY : (float)((int8_t)b) / 16.0f + 0.03125f;
    }
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader_t r = {data, size, 0};
    cf_conv_desc_t d;
    const uint8_t kind_byte = take_u8(&r) % 3;
    const cf_conv_kind_t kind = kind_byte == 2 ? (cf_conv_kind_t)7 : (cf_conv_kind_t)kind_byte;
    int64_t f[15];
    for (int k = 0; k < 15; k++)
        f[k] = take_i64(&r);
    /* byte 0 -> -1 for sizes is a boring refusal: shift sizes so that 0 bytes mean 1 */
    for (int k = 0; k < 9; k++)
        f[k] = f[k] == -1 ? 1 : f[k];
    f[13] = f[13] == -1 ? 1 : f[13];
    f[14] = f[14] == -1 ? 1 : f[14];
    cf_status_t st = cf_conv_desc_init(&d, kind, f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
    checked(st, "cf_conv_desc_init");
    if (st != CF_STATUS_SUCCESS) {
        memset(&d, 0, sizeof d);
        d.kind = kind;
    }
    d.stride_h = f[7];
    d.stride_w = f[8];
    d.pad_h = f[9] < 0 && f[9] > -2 ? 0 : f[9];
    d.pad_w = f[10] < 0 && f[10] > -2 ? 0 : f[10];
    d.out_pad_h = f[11] < 0 && f[11] > -2 ? 0 : f[11];
    d.out_pad_w = f[12] < 0 && f[12] > -2 ? 0 : f[12];
    d.dil_h = f[13];
    d.dil_w = f[14];
    const uint8_t g = take_u8(&r);
    d.groups = g < 0xF0 ? 1 : interesting_i64[g % 16];
    d.has_bias = take_u8(&r) % 3;
    d.dtype = (cf_dtype_t)(take_u8(&r) % 4);
    static const cf_backend_t backends[5] = {CF_BACKEND_CPU, CF_BACKEND_CPU, CF_BACKEND_CPU, CF_BACKEND_CUDA,
                                             (cf_backend_t)9};
    const cf_backend_t backend = backends[take_u8(&r) % 5];
    const cf_math_t math = (cf_math_t)(take_u8(&r) % 4);

    int64_t oh = -1, ow = -1;
    const cf_status_t dims_st = checked(cf_conv_desc_output_dims(&d, &oh, &ow), "cf_conv_desc_output_dims");
    if (dims_st == CF_STATUS_SUCCESS && (oh < 1 || ow < 1))
        fail("cf_conv_desc_output_dims gave an empty output", dims_st);

    /* The chain. */
    const uint8_t hdr = take_u8(&r);
    const int null_chain = hdr & 1, corrupt = (hdr >> 1) & 3;
    cf_chain_t chain = NULL;
    if (!null_chain)
        checked(cf_chain_create(&chain), "cf_chain_create");
    const int appends = take_u8(&r) % 20;
    int added = 0;
    for (int i = 0; i < appends; i++) {
        const int op = take_u8(&r) % 11;
        cf_chain_t target = op == 10 ? NULL : chain;
        switch (op == 10 ? (int)(take_u8(&r) % CF_OP_COUNT) : op) {
        case CF_OP_ADD_CHANNEL: st = cf_chain_append_add_channel(target); break;
        case CF_OP_MUL_SCALAR: st = cf_chain_append_mul_scalar(target, take_double(&r)); break;
        case CF_OP_ADD_SCALAR: st = cf_chain_append_add_scalar(target, take_double(&r)); break;
        case CF_OP_AFFINE_CHANNEL: st = cf_chain_append_affine_channel(target); break;
        case CF_OP_BATCH_NORM: {
            const cf_bn_mode_t mode = (cf_bn_mode_t)(take_u8(&r) % 3);
            const double eps = take_double(&r), momentum = take_double(&r);
            st = cf_chain_append_batch_norm(target, mode, eps, momentum);
            break;
        }
        case CF_OP_SOFTMAX_CHANNELS: st = cf_chain_append_softmax_channels(target); break;
        case CF_OP_SIGMOID: st = cf_chain_append_sigmoid(target); break;
        case CF_OP_RELU: st = cf_chain_append_relu(target); break;
        case CF_OP_TANH: st = cf_chain_append_tanh(target); break;
        default: st = cf_chain_append_gelu(target); break;
        }
        checked(st, "cf_chain_append_*");
        if (target == NULL && st == CF_STATUS_SUCCESS)
            fail("appending to a NULL chain succeeded", st);
        if (st == CF_STATUS_SUCCESS)
            added++;
    }
    if (chain != NULL) {
        int len = -1;
        checked(cf_chain_length(chain, &len), "cf_chain_length");
        if (len != added || len > CF_CHAIN_MAX_OPS)
            fail("cf_chain_length disagrees with the successful appends", CF_STATUS_SUCCESS);
        for (int i = 0; i < len; i++) {
            cf_op_kind_t k;
            checked(cf_chain_op_kind(chain, i, &k), "cf_chain_op_kind");
            if (cf_op_kind_name(k) == NULL)
                fail("a chain op has no name", CF_STATUS_SUCCESS);
        }
        /* White-box corruption: the plan must refuse it, not read past the op array. */
        if (corrupt == 1)
            chain->length = (int)take_i64(&r);
        else if (corrupt == 2 && chain->length > 0)
            chain->ops[take_u8(&r) % chain->length].kind = (cf_op_kind_t)take_i64(&r);
        else if (corrupt == 3 && chain->length > 0) {
            cf_op_t *o = &chain->ops[take_u8(&r) % chain->length];
            o->scalar = take_double(&r);
            o->eps = take_double(&r);
            o->momentum = take_double(&r);
            o->bn_mode = (cf_bn_mode_t)take_i64(&r);
        }
    }

    cf_plan_t plan = (cf_plan_t)&d; /* must come back NULL on failure */
    st = checked(cf_plan_create(&plan, &d, chain, backend, math), "cf_plan_create");
    const int trace = getenv("CF_FUZZ_TRACE") != NULL; /* replaying one input: say what happened */
    if (trace)
        fprintf(stderr, "fuzz_api: cf_plan_create: %s %s\n", cf_status_string(st), cf_last_error());
    if (st != CF_STATUS_SUCCESS) {
        if (plan != NULL)
            fail("cf_plan_create failed but left *plan non-NULL", st);
        cf_chain_destroy(chain);
        return 0;
    }
    if (dims_st != CF_STATUS_SUCCESS)
        fail("cf_plan_create accepted a descriptor cf_conv_desc_output_dims refuses", dims_st);
    const char *name = NULL;
    int64_t poh = 0, pow_ = 0;
    size_t ws = 0;
    checked(cf_plan_impl_name(plan, &name), "cf_plan_impl_name");
    checked(cf_plan_output_dims(plan, &poh, &pow_), "cf_plan_output_dims");
    checked(cf_plan_workspace_size(plan, &ws), "cf_plan_workspace_size");
    if (name == NULL || poh != oh || pow_ != ow)
        fail("plan getters disagree with the descriptor", CF_STATUS_SUCCESS);
    int len = 0;
    if (chain != NULL)
        cf_chain_length(chain, &len);
    cf_chain_destroy(chain); /* the plan keeps its own copy */

    /* Execute tiny plans with exactly-sized buffers. */
    const uint8_t flags = take_u8(&r);
    const int64_t src_n = d.n * d.c_in * d.h * d.w, wei_n = d.c_out * d.c_in * d.kh * d.kw,
                  dst_n = d.n * d.c_out * poh * pow_;
    if ((flags & 1) && backend == CF_BACKEND_CPU && src_n <= 4096 && wei_n <= 4096 && dst_n <= 4096 &&
        (double)dst_n * (double)d.c_in * (double)(d.kh * d.kw) <= (double)(1 << 20)) {
        float *src = floats(&r, src_n), *wei = floats(&r, wei_n), *bia = floats(&r, d.c_out);
        float *dst = malloc(sizeof(float) * (size_t)dst_n);
        float *vec[2 * CF_CHAIN_MAX_OPS], *stats[2 * CF_CHAIN_MAX_OPS];
        int64_t nbt[CF_CHAIN_MAX_OPS];
        cf_args_t args;
        memset(&args, 0, sizeof args);
        args.src = (flags & 2) ? NULL : src;
        args.wei = (flags & 4) ? NULL : wei;
        args.dst = (flags & 8) ? NULL : dst;
        args.bia = ((d.has_bias != 0) != ((flags & 16) != 0)) ? bia : NULL;
        if (flags & 128)
            args.dst = (float *)src; /* aliasing: must be refused */
        for (int i = 0; i < len; i++) {
            const uint8_t drop = (flags & 32) ? take_u8(&r) : 0;
            vec[2 * i] = floats(&r, d.c_out);
            vec[2 * i + 1] = floats(&r, d.c_out);
            stats[2 * i] = floats(&r, d.c_out);
            stats[2 * i + 1] = floats(&r, d.c_out);
            for (int64_t c = 0; c < d.c_out; c++)
                stats[2 * i + 1][c] = fabsf(stats[2 * i + 1][c]) + 0.5f; /* a variance */
            nbt[i] = (int64_t)(take_u8(&r) % 4);
            args.ops[i].channel_a = (drop & 1) ? NULL : vec[2 * i];
            args.ops[i].channel_b = (drop & 2) ? NULL : vec[2 * i + 1];
            args.ops[i].running_mean = (drop & 4) ? NULL : stats[2 * i];
            args.ops[i].running_var = (drop & 8) ? NULL : stats[2 * i + 1];
            args.ops[i].num_batches_tracked = (drop & 16) ? NULL : &nbt[i];
        }
        char workspace[16];
        st = checked(cf_plan_execute(plan, &args, (flags & 64) ? workspace : NULL, (flags & 64) ? sizeof workspace : 0,
                                     NULL),
                     "cf_plan_execute");
        if (trace)
            fprintf(stderr, "fuzz_api: cf_plan_execute (%lld dst floats, %d ops): %s %s\n", (long long)dst_n, len,
                    cf_status_string(st), cf_last_error());
        if ((flags & (2 | 4 | 8 | 128)) && st == CF_STATUS_SUCCESS)
            fail("cf_plan_execute accepted a NULL or aliased buffer", st);
        for (int i = 0; i < len; i++) {
            free(vec[2 * i]);
            free(vec[2 * i + 1]);
            free(stats[2 * i]);
            free(stats[2 * i + 1]);
        }
        free(src);
        free(wei);
        free(bia);
        free(dst);
    }
    checked(cf_plan_destroy(plan), "cf_plan_destroy");
    return 0;
}
