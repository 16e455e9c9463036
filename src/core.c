/* The public API's front door: status strings, the thread-local last error, descriptor and chain
 * validation, plans and argument checks. Everything that computes lives behind cf_impl_t. */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CF_BUILD_FLAGS
#define CF_BUILD_FLAGS "unknown build"
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Version, status strings, last error                                                             */

int cf_version(void)
{
    return CF_VERSION;
}

#define CF_STR2(x) #x
#define CF_STR(x) CF_STR2(x)

const char *cf_version_string(void)
{
    return CF_STR(CF_VERSION_MAJOR) "." CF_STR(CF_VERSION_MINOR) "." CF_STR(CF_VERSION_PATCH) " (" CF_BUILD_FLAGS ")";
}

const char *cf_status_string(cf_status_t status)
{
    switch (status) {
    case CF_STATUS_SUCCESS: return "CF_STATUS_SUCCESS";
    case CF_STATUS_INVALID_ARGUMENT: return "CF_STATUS_INVALID_ARGUMENT";
    case CF_STATUS_INVALID_SHAPE: return "CF_STATUS_INVALID_SHAPE";
    case CF_STATUS_NOT_SUPPORTED: return "CF_STATUS_NOT_SUPPORTED";
    case CF_STATUS_BACKEND_UNAVAILABLE: return "CF_STATUS_BACKEND_UNAVAILABLE";
    case CF_STATUS_WORKSPACE_TOO_SMALL: return "CF_STATUS_WORKSPACE_TOO_SMALL";
    case CF_STATUS_OUT_OF_MEMORY: return "CF_STATUS_OUT_OF_MEMORY";
    case CF_STATUS_CUDA_ERROR: return "CF_STATUS_CUDA_ERROR";
    case CF_STATUS_INTERNAL_ERROR: return "CF_STATUS_INTERNAL_ERROR";
    case CF_STATUS_COUNT: break;
    }
    return "CF_STATUS_UNKNOWN";
}

/* Long enough for a dispatch refusal list (one line per implementation). */
#define CF_ERROR_BUF_SIZE 2048
static _Thread_local char cf_last_error_buf[CF_ERROR_BUF_SIZE];

cf_status_t cf_error(cf_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cf_last_error_buf, sizeof cf_last_error_buf, fmt, ap);
    va_end(ap);
    return status;
}

const char *cf_last_error(void)
{
    return cf_last_error_buf;
}

bool cf_verbose(const char *what)
{
    const char *env = getenv("CONVFUSE_VERBOSE");
    if (env == NULL || what == NULL)
        return false;
    size_t want = strlen(what);
    for (const char *p = env; *p != '\0';) {
        while (*p == ',' || *p == ' ')
            p++;
        const char *end = p;
        while (*end != '\0' && *end != ',')
            end++;
        size_t len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if ((len == want && strncmp(p, what, len) == 0) || (len == 3 && strncmp(p, "all", 3) == 0))
            return true;
        p = end;
    }
    return false;
}

/* ---------------------------------------------------------------------------------------------- */
/* Convolution descriptor                                                                          */

static const char *conv_kind_name(cf_conv_kind_t kind)
{
    switch (kind) {
    case CF_CONV_2D: return "conv2d";
    case CF_CONV_TRANSPOSE_2D: return "conv_transpose2d";
    }
    return NULL;
}

cf_status_t cf_conv_desc_init(cf_conv_desc_t *desc, cf_conv_kind_t kind, int64_t n, int64_t c_in, int64_t h,
                              int64_t w, int64_t c_out, int64_t kh, int64_t kw)
{
    if (desc == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_conv_desc_init: desc is NULL");
    if (conv_kind_name(kind) == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_conv_desc_init: kind = %d is not a cf_conv_kind_t", (int)kind);
    memset(desc, 0, sizeof *desc);
    desc->kind = kind;
    desc->n = n;
    desc->c_in = c_in;
    desc->h = h;
    desc->w = w;
    desc->c_out = c_out;
    desc->kh = kh;
    desc->kw = kw;
    desc->stride_h = desc->stride_w = 1;
    desc->pad_h = desc->pad_w = 0;
    desc->out_pad_h = desc->out_pad_w = 0;
    desc->dil_h = desc->dil_w = 1;
    desc->groups = 1;
    desc->has_bias = 1;
    desc->dtype = CF_DTYPE_F32;
    return CF_STATUS_SUCCESS;
}

/* Overflow-checked arithmetic on non-negative int64 values. */
static bool mul_ok(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b > INT64_MAX / a)
        return false;
    *r = a * b;
    return true;
}

static bool add_ok(int64_t a, int64_t b, int64_t *r)
{
    if (b > INT64_MAX - a)
        return false;
    *r = a + b;
    return true;
}

/* Largest tensor, in bytes of its float32 elements: 2^48 B = 256 TiB, beyond the user address space of
 * x86-64 and arm64 with 4-level paging (and CUDA's 49-bit unified addresses); no buffer that large can
 * exist, so such a descriptor is a mistake (a garbage size), refused before any arithmetic on it. */
#define CF_MAX_TENSOR_BYTES ((int64_t)1 << 48)

/* Product of four non-negative values, also small enough that the tensor's float32 bytes stay within
 * CF_MAX_TENSOR_BYTES (so counts of doubles and byte offsets never overflow an int64 either). */
static bool elems_ok(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *r)
{
    int64_t ab, abc, abcd;
    if (!mul_ok(a, b, &ab) || !mul_ok(ab, c, &abc) || !mul_ok(abc, d, &abcd))
        return false;
    if (abcd > CF_MAX_TENSOR_BYTES / (int64_t)sizeof(float))
        return false;
    *r = abcd;
    return true;
}

/* Output size along one axis; `axis` is "h" or "w" for messages. */
static cf_status_t output_size(const cf_conv_desc_t *d, const char *axis, int64_t in, int64_t k, int64_t stride,
                               int64_t pad, int64_t out_pad, int64_t dil, int64_t *out)
{
    int64_t span, two_pad;
    /* dil*(k-1): the kernel's reach beyond its first tap. */
    if (!mul_ok(dil, k - 1, &span) || !mul_ok(pad, 2, &two_pad))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc: %s sizes overflow int64 (k%s = %lld, dil_%s = %lld, pad_%s = %lld)",
                        axis, axis, (long long)k, axis, (long long)dil, axis, (long long)pad);
    if (d->kind == CF_CONV_2D) {
        int64_t padded;
        if (!add_ok(in, two_pad, &padded))
            return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc: %s + 2*pad_%s overflows int64 (%s = %lld, pad_%s = %lld)",
                            axis, axis, axis, (long long)in, axis, (long long)pad);
        if (padded - 1 < span) /* (not padded < span + 1: span may be INT64_MAX) */
            return cf_error(CF_STATUS_INVALID_SHAPE,
                            "desc: conv2d output %s would be empty: %s + 2*pad_%s = %lld < dil_%s*(k%s-1)+1 = %llu",
                            axis[0] == 'h' ? "height" : "width", axis, axis, (long long)padded, axis, axis,
                            (unsigned long long)span + 1u);
        *out = (padded - 1 - span) / stride + 1;
        return CF_STATUS_SUCCESS;
    }
    /* conv_transpose2d: (in-1)*stride - 2*pad + dil*(k-1) + out_pad + 1 */
    int64_t grown, full;
    if (!mul_ok(in - 1, stride, &grown) || !add_ok(grown, span, &full) || !add_ok(full, out_pad + 1, &full))
        return cf_error(CF_STATUS_INVALID_ARGUMENT,
                        "desc: conv_transpose2d output %s overflows int64 (%s = %lld, stride_%s = %lld, k%s = %lld, dil_%s = %lld)",
                        axis, axis, (long long)in, axis, (long long)stride, axis, (long long)k, axis, (long long)dil);
    if (full - two_pad < 1)
        return cf_error(CF_STATUS_INVALID_SHAPE,
                        "desc: conv_transpose2d output %s would be %lld (< 1): pad_%s = %lld is too large",
                        axis[0] == 'h' ? "height" : "width", (long long)(full - two_pad), axis, (long long)pad);
    *out = full - two_pad;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_conv_desc_output_dims(const cf_conv_desc_t *desc, int64_t *oh, int64_t *ow)
{
    if (desc == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc is NULL");
    if (oh == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "oh is NULL");
    if (ow == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "ow is NULL");
    const char *kind = conv_kind_name(desc->kind);
    if (kind == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc.kind = %d is not a cf_conv_kind_t", (int)desc->kind);

    const struct {
        const char *name;
        int64_t value, min;
    } fields[] = {
        {"n", desc->n, 1},           {"c_in", desc->c_in, 1},         {"h", desc->h, 1},
        {"w", desc->w, 1},           {"c_out", desc->c_out, 1},       {"kh", desc->kh, 1},
        {"kw", desc->kw, 1},         {"stride_h", desc->stride_h, 1}, {"stride_w", desc->stride_w, 1},
        {"dil_h", desc->dil_h, 1},   {"dil_w", desc->dil_w, 1},       {"pad_h", desc->pad_h, 0},
        {"pad_w", desc->pad_w, 0},   {"out_pad_h", desc->out_pad_h, 0}, {"out_pad_w", desc->out_pad_w, 0},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].value < fields[i].min)
            return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc.%s = %lld: must be >= %lld", fields[i].name,
                            (long long)fields[i].value, (long long)fields[i].min);

    if (desc->kind == CF_CONV_2D) {
        if (desc->out_pad_h != 0 || desc->out_pad_w != 0)
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "desc.out_pad_%s = %lld: output padding is for conv_transpose2d only (must be 0 for conv2d)",
                            desc->out_pad_h != 0 ? "h" : "w",
                            (long long)(desc->out_pad_h != 0 ? desc->out_pad_h : desc->out_pad_w));
    } else {
        /* PyTorch: "output padding must be smaller than either stride or dilation". */
        if (desc->out_pad_h >= desc->stride_h && desc->out_pad_h >= desc->dil_h)
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "desc.out_pad_h = %lld: must be smaller than stride_h = %lld or dil_h = %lld",
                            (long long)desc->out_pad_h, (long long)desc->stride_h, (long long)desc->dil_h);
        if (desc->out_pad_w >= desc->stride_w && desc->out_pad_w >= desc->dil_w)
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "desc.out_pad_w = %lld: must be smaller than stride_w = %lld or dil_w = %lld",
                            (long long)desc->out_pad_w, (long long)desc->stride_w, (long long)desc->dil_w);
    }
    if (desc->has_bias != 0 && desc->has_bias != 1)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc.has_bias = %d: must be 0 or 1", desc->has_bias);
    switch (desc->dtype) {
    case CF_DTYPE_F32: break;
    case CF_DTYPE_F16:
    case CF_DTYPE_BF16:
        return cf_error(CF_STATUS_NOT_SUPPORTED, "desc.dtype = %s: only CF_DTYPE_F32 is implemented",
                        desc->dtype == CF_DTYPE_F16 ? "CF_DTYPE_F16" : "CF_DTYPE_BF16");
    default:
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc.dtype = %d is not a cf_dtype_t", (int)desc->dtype);
    }
    if (desc->groups != 1)
        return cf_error(CF_STATUS_NOT_SUPPORTED, "desc.groups = %lld: only groups = 1 is implemented",
                        (long long)desc->groups);

    int64_t out_h, out_w;
    cf_status_t st = output_size(desc, "h", desc->h, desc->kh, desc->stride_h, desc->pad_h, desc->out_pad_h,
                                 desc->dil_h, &out_h);
    if (st != CF_STATUS_SUCCESS)
        return st;
    st = output_size(desc, "w", desc->w, desc->kw, desc->stride_w, desc->pad_w, desc->out_pad_w, desc->dil_w, &out_w);
    if (st != CF_STATUS_SUCCESS)
        return st;

    int64_t elems;
    if (!elems_ok(desc->n, desc->c_in, desc->h, desc->w, &elems))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc: src has too many elements (n*c_in*h*w = %lld*%lld*%lld*%lld; "
                        "one tensor may hold at most 2^46 floats, 2^48 bytes)",
                        (long long)desc->n, (long long)desc->c_in, (long long)desc->h, (long long)desc->w);
    if (!elems_ok(desc->c_out, desc->c_in, desc->kh, desc->kw, &elems))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc: wei has too many elements (c_out*c_in*kh*kw = %lld*%lld*%lld*%lld; "
                        "one tensor may hold at most 2^46 floats, 2^48 bytes)",
                        (long long)desc->c_out, (long long)desc->c_in, (long long)desc->kh, (long long)desc->kw);
    if (!elems_ok(desc->n, desc->c_out, out_h, out_w, &elems))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "desc: dst has too many elements (n*c_out*oh*ow = %lld*%lld*%lld*%lld; "
                        "one tensor may hold at most 2^46 floats, 2^48 bytes)",
                        (long long)desc->n, (long long)desc->c_out, (long long)out_h, (long long)out_w);
    *oh = out_h;
    *ow = out_w;
    return CF_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- */
/* Chains                                                                                          */

cf_status_t cf_chain_create(cf_chain_t *chain)
{
    if (chain == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_create: chain is NULL");
    *chain = calloc(1, sizeof **chain);
    if (*chain == NULL)
        return cf_error(CF_STATUS_OUT_OF_MEMORY, "cf_chain_create: could not allocate %zu bytes", sizeof **chain);
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_chain_destroy(cf_chain_t chain)
{
    free(chain);
    return CF_STATUS_SUCCESS;
}

static cf_status_t chain_push(cf_chain_t chain, const char *fn, cf_op_t op)
{
    if (chain == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "%s: chain is NULL", fn);
    if (chain->length >= CF_CHAIN_MAX_OPS)
        return cf_error(CF_STATUS_NOT_SUPPORTED, "%s: the chain already holds CF_CHAIN_MAX_OPS = %d ops", fn,
                        CF_CHAIN_MAX_OPS);
    chain->ops[chain->length++] = op;
    return CF_STATUS_SUCCESS;
}

static cf_status_t push_plain(cf_chain_t chain, const char *fn, cf_op_kind_t kind)
{
    cf_op_t op = {.kind = kind};
    return chain_push(chain, fn, op);
}

static cf_status_t push_scalar(cf_chain_t chain, const char *fn, cf_op_kind_t kind, double s)
{
    if (chain != NULL && !isfinite(s))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "%s: s = %g is not finite", fn, s);
    cf_op_t op = {.kind = kind, .scalar = s};
    return chain_push(chain, fn, op);
}

cf_status_t cf_chain_append_add_channel(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_add_channel", CF_OP_ADD_CHANNEL);
}

cf_status_t cf_chain_append_mul_scalar(cf_chain_t chain, double s)
{
    return push_scalar(chain, "cf_chain_append_mul_scalar", CF_OP_MUL_SCALAR, s);
}

cf_status_t cf_chain_append_add_scalar(cf_chain_t chain, double s)
{
    return push_scalar(chain, "cf_chain_append_add_scalar", CF_OP_ADD_SCALAR, s);
}

cf_status_t cf_chain_append_affine_channel(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_affine_channel", CF_OP_AFFINE_CHANNEL);
}

cf_status_t cf_chain_append_batch_norm(cf_chain_t chain, cf_bn_mode_t mode, double eps, double momentum)
{
    const char *fn = "cf_chain_append_batch_norm";
    if (chain == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "%s: chain is NULL", fn);
    if (mode != CF_BN_TRAINING && mode != CF_BN_INFERENCE)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "%s: mode = %d is not a cf_bn_mode_t", fn, (int)mode);
    if (!(eps > 0) || !isfinite(eps))
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "%s: eps = %g must be finite and > 0", fn, eps);
    if (momentum != CF_BN_MOMENTUM_CUMULATIVE && !(momentum >= 0 && momentum <= 1))
        return cf_error(CF_STATUS_INVALID_ARGUMENT,
                        "%s: momentum = %g must be in [0, 1] or CF_BN_MOMENTUM_CUMULATIVE (-1)", fn, momentum);
    cf_op_t op = {.kind = CF_OP_BATCH_NORM, .bn_mode = mode, .eps = eps, .momentum = momentum};
    return chain_push(chain, fn, op);
}

cf_status_t cf_chain_append_softmax_channels(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_softmax_channels", CF_OP_SOFTMAX_CHANNELS);
}

cf_status_t cf_chain_append_sigmoid(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_sigmoid", CF_OP_SIGMOID);
}

cf_status_t cf_chain_append_relu(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_relu", CF_OP_RELU);
}

cf_status_t cf_chain_append_tanh(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_tanh", CF_OP_TANH);
}

cf_status_t cf_chain_append_gelu(cf_chain_t chain)
{
    return push_plain(chain, "cf_chain_append_gelu", CF_OP_GELU);
}

cf_status_t cf_chain_length(const_cf_chain_t chain, int *length)
{
    if (chain == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_length: chain is NULL");
    if (length == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_length: length is NULL");
    *length = chain->length;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_chain_op_kind(const_cf_chain_t chain, int index, cf_op_kind_t *kind)
{
    if (chain == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_op_kind: chain is NULL");
    if (kind == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_op_kind: kind is NULL");
    if (index < 0 || index >= chain->length)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_chain_op_kind: index = %d is outside [0, %d)", index,
                        chain->length);
    *kind = chain->ops[index].kind;
    return CF_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- */
/* Plans                                                                                           */

int64_t cf_plan_src_elems(const struct cf_plan *plan)
{
    const cf_conv_desc_t *d = &plan->conv;
    return d->n * d->c_in * d->h * d->w;
}

int64_t cf_plan_wei_elems(const struct cf_plan *plan)
{
    const cf_conv_desc_t *d = &plan->conv;
    return d->c_out * d->c_in * d->kh * d->kw;
}

int64_t cf_plan_dst_elems(const struct cf_plan *plan)
{
    const cf_conv_desc_t *d = &plan->conv;
    return d->n * d->c_out * plan->oh * plan->ow;
}

/* A chain reaches cf_plan_create() as a pointer the caller may have corrupted (a stale handle, a struct
 * filled by hand): re-check what the append functions guarantee, so that a bad chain is a status, not an
 * out-of-bounds read in a backend. */
static cf_status_t check_chain(const_cf_chain_t chain)
{
    if (chain == NULL)
        return CF_STATUS_SUCCESS; /* NULL = the empty chain */
    if (chain->length < 0 || chain->length > CF_CHAIN_MAX_OPS)
        return cf_error(CF_STATUS_INVALID_ARGUMENT,
                        "chain is malformed: length = %d is outside [0, CF_CHAIN_MAX_OPS = %d] "
                        "(not a chain from cf_chain_create, or already destroyed?)",
                        chain->length, CF_CHAIN_MAX_OPS);
    for (int i = 0; i < chain->length; i++) {
        const cf_op_t *op = &chain->ops[i];
        if ((int)op->kind < 0 || (int)op->kind >= CF_OP_COUNT)
            return cf_error(CF_STATUS_INVALID_ARGUMENT, "chain op %d is malformed: kind = %d is not a cf_op_kind_t", i,
                            (int)op->kind);
        if ((op->kind == CF_OP_MUL_SCALAR || op->kind == CF_OP_ADD_SCALAR) && !isfinite(op->scalar))
            return cf_error(CF_STATUS_INVALID_ARGUMENT, "chain op %d (%s) is malformed: s = %g is not finite", i,
                            cf_op_kind_name(op->kind), op->scalar);
        if (op->kind == CF_OP_BATCH_NORM &&
            ((op->bn_mode != CF_BN_TRAINING && op->bn_mode != CF_BN_INFERENCE) || !(op->eps > 0) || !isfinite(op->eps) ||
             (op->momentum != CF_BN_MOMENTUM_CUMULATIVE && !(op->momentum >= 0 && op->momentum <= 1))))
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "chain op %d (batch_norm) is malformed: mode = %d, eps = %g, momentum = %g", i,
                            (int)op->bn_mode, op->eps, op->momentum);
    }
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_create(cf_plan_t *plan, const cf_conv_desc_t *desc, const_cf_chain_t chain, cf_backend_t backend,
                           cf_math_t math)
{
    if (plan == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_create: plan is NULL");
    *plan = NULL;
    int64_t oh, ow;
    cf_status_t st = cf_conv_desc_output_dims(desc, &oh, &ow);
    if (st != CF_STATUS_SUCCESS)
        return st;
    if (backend != CF_BACKEND_CPU && backend != CF_BACKEND_CUDA)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_create: backend = %d is not a cf_backend_t", (int)backend);
    if (math != CF_MATH_DEFAULT && math != CF_MATH_TF32 && math != CF_MATH_STRICT_F32)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_create: math = %d is not a cf_math_t", (int)math);

    st = check_chain(chain);
    if (st != CF_STATUS_SUCCESS)
        return st;
    int length = chain == NULL ? 0 : chain->length;
    for (int i = 0; i < length; i++) {
        const cf_op_t *op = &chain->ops[i];
        /* torch: "Expected more than 1 value per channel when training". */
        if (op->kind == CF_OP_BATCH_NORM && op->bn_mode == CF_BN_TRAINING && desc->n * oh * ow <= 1)
            return cf_error(CF_STATUS_INVALID_SHAPE,
                            "chain op %d (batch_norm, training): needs more than 1 value per channel, "
                            "but n*oh*ow = %lld*%lld*%lld = %lld",
                            i, (long long)desc->n, (long long)oh, (long long)ow, (long long)(desc->n * oh * ow));
    }

    struct cf_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return cf_error(CF_STATUS_OUT_OF_MEMORY, "cf_plan_create: could not allocate %zu bytes", sizeof *p);
    p->conv = *desc;
    p->oh = oh;
    p->ow = ow;
    if (chain != NULL)
        p->chain = *chain;
    p->backend = backend;
    p->math = math;
    st = cf_dispatch_select(p);
    if (st != CF_STATUS_SUCCESS) {
        free(p);
        return st;
    }
    p->workspace_bytes = p->impl->workspace_bytes != NULL ? p->impl->workspace_bytes(p) : 0;
    *plan = p;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_destroy(cf_plan_t plan)
{
    free(plan);
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_impl_name(const_cf_plan_t plan, const char **name)
{
    if (plan == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_impl_name: plan is NULL");
    if (name == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_impl_name: name is NULL");
    *name = plan->impl->name;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_output_dims(const_cf_plan_t plan, int64_t *oh, int64_t *ow)
{
    if (plan == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_output_dims: plan is NULL");
    if (oh == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_output_dims: oh is NULL");
    if (ow == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_output_dims: ow is NULL");
    *oh = plan->oh;
    *ow = plan->ow;
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_workspace_size(const_cf_plan_t plan, size_t *bytes)
{
    if (plan == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_workspace_size: plan is NULL");
    if (bytes == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_workspace_size: bytes is NULL");
    *bytes = plan->workspace_bytes;
    return CF_STATUS_SUCCESS;
}

/* The run-time buffers op i needs; the message names the missing one and why. */
static cf_status_t check_op_args(const cf_op_t *op, int i, const cf_op_args_t *a)
{
    const char *name = cf_op_kind_name(op->kind);
    switch (op->kind) {
    case CF_OP_ADD_CHANNEL:
        if (a->channel_a == NULL)
            return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.ops[%d].channel_a is NULL (%s needs its C_out vector)", i,
                            name);
        break;
    case CF_OP_AFFINE_CHANNEL:
        if (a->channel_a == NULL)
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "args.ops[%d].channel_a is NULL (%s needs its C_out scale vector)", i, name);
        if (a->channel_b == NULL)
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "args.ops[%d].channel_b is NULL (%s needs its C_out shift vector)", i, name);
        break;
    case CF_OP_BATCH_NORM:
        if (op->bn_mode == CF_BN_INFERENCE) {
            if (a->running_mean == NULL)
                return cf_error(CF_STATUS_INVALID_ARGUMENT,
                                "args.ops[%d].running_mean is NULL (batch_norm inference normalises with it)", i);
            if (a->running_var == NULL)
                return cf_error(CF_STATUS_INVALID_ARGUMENT,
                                "args.ops[%d].running_var is NULL (batch_norm inference normalises with it)", i);
        } else {
            if (op->momentum == CF_BN_MOMENTUM_CUMULATIVE && a->num_batches_tracked == NULL)
                return cf_error(CF_STATUS_INVALID_ARGUMENT,
                                "args.ops[%d].num_batches_tracked is NULL (batch_norm training with "
                                "CF_BN_MOMENTUM_CUMULATIVE uses 1/num_batches_tracked as its factor)",
                                i);
            if ((a->running_mean == NULL) != (a->running_var == NULL))
                return cf_error(CF_STATUS_INVALID_ARGUMENT,
                                "args.ops[%d].%s is NULL but %s is not (batch_norm training updates both or neither)",
                                i, a->running_mean == NULL ? "running_mean" : "running_var",
                                a->running_mean == NULL ? "running_var" : "running_mean");
        }
        break;
    case CF_OP_MUL_SCALAR:
    case CF_OP_ADD_SCALAR:
    case CF_OP_SOFTMAX_CHANNELS:
    case CF_OP_SIGMOID:
    case CF_OP_RELU:
    case CF_OP_TANH:
    case CF_OP_GELU:
    case CF_OP_COUNT:
        break;
    }
    return CF_STATUS_SUCCESS;
}

/* True if [a, a + a_bytes) and [b, b + b_bytes) share a byte (addresses compared as integers: host and
 * CUDA device pointers live in one unified address space). */
static bool ranges_overlap(const void *a, int64_t a_bytes, const void *b, int64_t b_bytes)
{
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return b != NULL && a0 < b0 + (uintptr_t)b_bytes && b0 < a0 + (uintptr_t)a_bytes;
}

/* dst must not alias an input (the header's contract): the kernels read inputs after writing dst, so an
 * aliased call would silently compute garbage. Refused with the name of the overlapping buffer. */
static cf_status_t check_dst_overlap(const struct cf_plan *plan, const cf_args_t *args)
{
    const int64_t f = (int64_t)sizeof(float), dst_bytes = cf_plan_dst_elems(plan) * f, vec = plan->conv.c_out * f;
    const struct {
        const char *name;
        int op;
        const void *p;
        int64_t bytes;
    } inputs[] = {
        {"src", -1, args->src, cf_plan_src_elems(plan) * f},
        {"wei", -1, args->wei, cf_plan_wei_elems(plan) * f},
        {"bia", -1, plan->conv.has_bias ? args->bia : NULL, vec},
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        if (ranges_overlap(args->dst, dst_bytes, inputs[i].p, inputs[i].bytes))
            return cf_error(CF_STATUS_INVALID_ARGUMENT,
                            "args.dst overlaps args.%s (dst must not alias an input: pass a separate output buffer)",
                            inputs[i].name);
    for (int i = 0; i < plan->chain.length; i++) {
        const cf_op_args_t *a = &args->ops[i];
        const struct {
            const char *name;
            const void *p;
            int64_t bytes;
        } bufs[] = {{"channel_a", a->channel_a, vec},
                    {"channel_b", a->channel_b, vec},
                    {"running_mean", a->running_mean, vec},
                    {"running_var", a->running_var, vec},
                    {"num_batches_tracked", a->num_batches_tracked, (int64_t)sizeof(int64_t)}};
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            if (ranges_overlap(args->dst, dst_bytes, bufs[j].p, bufs[j].bytes))
                return cf_error(CF_STATUS_INVALID_ARGUMENT,
                                "args.dst overlaps args.ops[%d].%s (dst must not alias an input: pass a separate "
                                "output buffer)",
                                i, bufs[j].name);
    }
    return CF_STATUS_SUCCESS;
}

cf_status_t cf_plan_execute(const_cf_plan_t plan, const cf_args_t *args, void *workspace, size_t workspace_size,
                            void *stream)
{
    if (plan == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_execute: plan is NULL");
    if (args == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_plan_execute: args is NULL");
    if (args->src == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.src is NULL (the (N, C_in, H, W) input)");
    if (args->wei == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.wei is NULL (the convolution weights)");
    if (args->dst == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.dst is NULL (the (N, C_out, OH, OW) output)");
    if (plan->conv.has_bias && args->bia == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.bia is NULL but desc.has_bias = 1");
    if (!plan->conv.has_bias && args->bia != NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "args.bia is not NULL but desc.has_bias = 0");
    for (int i = 0; i < plan->chain.length; i++) {
        cf_status_t st = check_op_args(&plan->chain.ops[i], i, &args->ops[i]);
        if (st != CF_STATUS_SUCCESS)
            return st;
    }
    cf_status_t st = check_dst_overlap(plan, args);
    if (st != CF_STATUS_SUCCESS)
        return st;
    if (plan->workspace_bytes > 0 && workspace == NULL)
        return cf_error(CF_STATUS_WORKSPACE_TOO_SMALL, "workspace is NULL but the plan (%s) needs %zu bytes",
                        plan->impl->name, plan->workspace_bytes);
    if (plan->workspace_bytes > 0 && workspace_size < plan->workspace_bytes)
        return cf_error(CF_STATUS_WORKSPACE_TOO_SMALL, "workspace_size = %zu but the plan (%s) needs %zu bytes",
                        workspace_size, plan->impl->name, plan->workspace_bytes);
    return plan->impl->execute(plan, args, workspace, stream);
}

cf_status_t cf_run(const cf_conv_desc_t *desc, const_cf_chain_t chain, cf_backend_t backend, cf_math_t math,
                   const cf_args_t *args, void *workspace, size_t workspace_size, void *stream)
{
    cf_plan_t plan;
    cf_status_t st = cf_plan_create(&plan, desc, chain, backend, math);
    if (st != CF_STATUS_SUCCESS)
        return st;
    st = cf_plan_execute(plan, args, workspace, workspace_size, stream);
    cf_plan_destroy(plan);
    return st;
}

cf_status_t cf_backend_available(cf_backend_t backend, int *available)
{
    if (available == NULL)
        return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_backend_available: available is NULL");
    switch (backend) {
    case CF_BACKEND_CPU:
        *available = 1;
        return CF_STATUS_SUCCESS;
    case CF_BACKEND_CUDA: {
#ifdef CONVFUSE_WITH_CUDA
        int sm = 0;
        char reason[256];
        *available = cf_cuda_device_ok(&sm, reason, sizeof reason) ? 1 : 0;
#else
        *available = 0;
#endif
        return CF_STATUS_SUCCESS;
    }
    }
    return cf_error(CF_STATUS_INVALID_ARGUMENT, "cf_backend_available: backend = %d is not a cf_backend_t", (int)backend);
}
