/**
 * @file convfuse.h
 * @brief convfuse: a convolution and the chain of operations after it, as one fused kernel.
 *
 * The one public header. Everything is plain C11; CUDA types never appear here (a stream is passed
 * as `void *`, a `cudaStream_t` on the CUDA backend).
 *
 * Vocabulary (PyTorch's meaning for every number):
 *   - tensors are dense, contiguous NCHW float32:
 *     src (N, C_in, H, W); dst (N, C_out, OH, OW);
 *     wei (C_out, C_in, KH, KW) for conv2d and (C_in, C_out, KH, KW) for conv_transpose2d; bia (C_out).
 *   - conv2d:            OH = floor((H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h) + 1
 *   - conv_transpose2d:  OH = (H-1)*stride_h - 2*pad_h + dil_h*(KH-1) + out_pad_h + 1
 *     (same for W); out_pad must be smaller than stride or dilation, as in torch.nn.ConvTranspose2d.
 *
 * Lifecycle (plan, then run):
 * @code
 *   cf_conv_desc_t conv;
 *   cf_conv_desc_init(&conv, CF_CONV_TRANSPOSE_2D, 128, 64, 64, 64, 128, 4, 4);
 *   conv.stride_h = conv.stride_w = 2; conv.pad_h = conv.pad_w = 1; conv.out_pad_h = conv.out_pad_w = 1;
 *   cf_chain_t chain;  cf_chain_create(&chain);
 *   cf_chain_append_softmax_channels(chain);
 *   cf_chain_append_add_channel(chain);          // vector given at run time: args.ops[1].channel_a
 *   cf_chain_append_mul_scalar(chain, 2.0);
 *   cf_chain_append_sigmoid(chain);
 *   cf_plan_t plan;
 *   if (cf_plan_create(&plan, &conv, chain, CF_BACKEND_CUDA, CF_MATH_DEFAULT) != CF_STATUS_SUCCESS)
 *       fprintf(stderr, "%s\n", cf_last_error());
 *   cf_args_t args = {0};
 *   args.src = x; args.wei = w; args.bia = b; args.dst = y; args.ops[1].channel_a = bias2;
 *   cf_plan_execute(plan, &args, workspace, workspace_bytes, stream);
 *   cf_plan_destroy(plan); cf_chain_destroy(chain);
 * @endcode
 *
 * Errors: every function returns a ::cf_status_t; on failure cf_last_error() holds a message naming the
 * argument and its value (thread-local, valid until the next failing call on this thread). The library
 * never aborts or exits.
 */
#ifndef CONVFUSE_H
#define CONVFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(CONVFUSE_BUILDING_SHARED)
#define CF_API __declspec(dllexport)
#elif defined(__GNUC__)
#define CF_API __attribute__((visibility("default")))
#else
#define CF_API
#endif

/** @name Version */
/**@{*/
#define CF_VERSION_MAJOR 0
#define CF_VERSION_MINOR 1
#define CF_VERSION_PATCH 0
/** MAJOR*10000 + MINOR*100 + PATCH: compare with cf_version() to detect a header/library mismatch. */
#define CF_VERSION (CF_VERSION_MAJOR * 10000 + CF_VERSION_MINOR * 100 + CF_VERSION_PATCH)
/** The library's CF_VERSION (of the library actually loaded, not of this header). */
CF_API int cf_version(void);
/** "MAJOR.MINOR.PATCH" plus build flags, e.g. "0.1.0 (cuda sm_90a, openmp)". Static storage. */
CF_API const char *cf_version_string(void);
/**@}*/

/** Status of every call. 0 is success; the other codes say what to fix. */
typedef enum cf_status {
    CF_STATUS_SUCCESS = 0,
    CF_STATUS_INVALID_ARGUMENT,    /**< NULL where a value is required, or a value out of range */
    CF_STATUS_INVALID_SHAPE,       /**< sizes that describe no valid convolution (e.g. empty output) */
    CF_STATUS_NOT_SUPPORTED,       /**< valid, but not implemented (groups > 1, f16, a chain a backend refuses) */
    CF_STATUS_BACKEND_UNAVAILABLE, /**< backend not compiled in, or no CUDA device present */
    CF_STATUS_WORKSPACE_TOO_SMALL, /**< workspace NULL or smaller than cf_plan_workspace_size() */
    CF_STATUS_OUT_OF_MEMORY,       /**< host allocation failed (CPU backend intermediates, plan objects) */
    CF_STATUS_CUDA_ERROR,          /**< a CUDA runtime call or launch failed; cf_last_error() has its text */
    CF_STATUS_INTERNAL_ERROR,      /**< a bug in convfuse: please report the cf_last_error() text */
    CF_STATUS_COUNT
} cf_status_t;

/** Static, never-NULL name of a status ("CF_STATUS_INVALID_ARGUMENT"); unknown codes give "CF_STATUS_UNKNOWN". */
CF_API const char *cf_status_string(cf_status_t status);
/** Detail of the last failure on this thread ("" if none). Owned by the library; do not free. */
CF_API const char *cf_last_error(void);

/** Which convolution. */
typedef enum cf_conv_kind {
    CF_CONV_2D = 0,           /**< torch.nn.Conv2d */
    CF_CONV_TRANSPOSE_2D = 1, /**< torch.nn.ConvTranspose2d */
} cf_conv_kind_t;

/** Element type of src, wei, bia, dst and every per-channel vector. Only F32 is implemented. */
typedef enum cf_dtype {
    CF_DTYPE_F32 = 0,
    CF_DTYPE_F16 = 1,  /**< reserved: plans return CF_STATUS_NOT_SUPPORTED */
    CF_DTYPE_BF16 = 2, /**< reserved: plans return CF_STATUS_NOT_SUPPORTED */
} cf_dtype_t;

/** Where a plan runs. Pointers in ::cf_args_t are host pointers for CPU, device pointers for CUDA. */
typedef enum cf_backend {
    CF_BACKEND_CPU = 0,  /**< reference: double-precision accumulation, OpenMP threads */
    CF_BACKEND_CUDA = 1, /**< fused kernels; needs a build with nvcc and an sm_90 device */
} cf_backend_t;

/** Precision of the convolution's products on CUDA (the CPU backend always accumulates in double). */
typedef enum cf_math {
    CF_MATH_DEFAULT = 0,    /**< what PyTorch does: TF32 products, except where accuracy needs more
                                 (training BatchNorm and batch-norm/affine chains use 3xTF32) */
    CF_MATH_TF32 = 1,       /**< TF32 products (10-bit mantissa), fp32 accumulation */
    CF_MATH_STRICT_F32 = 2, /**< fp32-grade products (3xTF32 split), fp32 accumulation */
} cf_math_t;

/** The convolution. Fill with cf_conv_desc_init(), then change fields. Every size is PyTorch's. */
typedef struct cf_conv_desc {
    cf_conv_kind_t kind;
    int64_t n, c_in, h, w, c_out; /**< batch, input channels, input height/width, output channels */
    int64_t kh, kw;               /**< kernel size */
    int64_t stride_h, stride_w;   /**< >= 1 */
    int64_t pad_h, pad_w;         /**< >= 0 */
    int64_t out_pad_h, out_pad_w; /**< conv_transpose2d only; < stride or < dilation; 0 for conv2d */
    int64_t dil_h, dil_w;         /**< >= 1 (1 = no dilation, as in PyTorch) */
    int64_t groups;               /**< only 1 is implemented: other values give CF_STATUS_NOT_SUPPORTED */
    int has_bias;                 /**< 1: args.bia holds C_out values added to the conv output */
    cf_dtype_t dtype;             /**< CF_DTYPE_F32 */
} cf_conv_desc_t;

/**
 * Fill @p desc with the given sizes and PyTorch's defaults: stride 1, padding 0, output_padding 0,
 * dilation 1, groups 1, bias on, F32. Validation happens in cf_plan_create().
 * @returns CF_STATUS_INVALID_ARGUMENT if @p desc is NULL or @p kind unknown.
 */
CF_API cf_status_t cf_conv_desc_init(cf_conv_desc_t *desc, cf_conv_kind_t kind, int64_t n, int64_t c_in,
                                     int64_t h, int64_t w, int64_t c_out, int64_t kh, int64_t kw);

/**
 * Validate @p desc and compute the output height and width.
 * @returns CF_STATUS_INVALID_ARGUMENT (NULL pointer, size < 1, negative padding, output_padding too large,
 *          sizes overflowing int64, a tensor of more than 2^46 elements = 2^48 bytes, which no address space holds),
 *          CF_STATUS_INVALID_SHAPE (output would be empty), CF_STATUS_NOT_SUPPORTED (groups != 1, dtype).
 */
CF_API cf_status_t cf_conv_desc_output_dims(const cf_conv_desc_t *desc, int64_t *oh, int64_t *ow);

/**
 * The chain operations, applied to the conv output in the order appended. `x` is the value entering the
 * op, `c` the output channel; per-channel vectors have C_out floats and are given at run time in
 * cf_args_t.ops[i] (i = the op's position in the chain). One X-macro list generates the enum and the
 * name table: X(ENUM_SUFFIX, name).
 *   add_channel       x + a[c]                                    (args: channel_a = a)
 *   mul_scalar        x * s
 *   add_scalar        x + s
 *   affine_channel    x * a[c] + b[c]                             (args: channel_a = a, channel_b = b)
 *   batch_norm        gamma[c] * (x - mean[c]) / sqrt(var[c] + eps) + beta[c]
 *                     training: mean, biased var over (N, OH, OW) of x; running stats updated (see below)
 *                     inference: running_mean, running_var       (args: channel_a = gamma or NULL = 1,
 *                                                                  channel_b = beta or NULL = 0,
 *                                                                  running_mean, running_var, num_batches_tracked)
 *   softmax_channels  exp(x[c] - max_c x) / sum_c exp(x[c] - max_c x)   (over C_out, per pixel)
 *   sigmoid           1 / (1 + exp(-x))
 *   relu              max(x, 0)  (NaN stays NaN)
 *   tanh              tanh(x)
 *   gelu              x * (1 + erf(x / sqrt(2))) / 2
 */
#define CF_OP_LIST(X)                                                                                      \
    X(ADD_CHANNEL, add_channel)                                                                            \
    X(MUL_SCALAR, mul_scalar)                                                                              \
    X(ADD_SCALAR, add_scalar)                                                                              \
    X(AFFINE_CHANNEL, affine_channel)                                                                      \
    X(BATCH_NORM, batch_norm)                                                                              \
    X(SOFTMAX_CHANNELS, softmax_channels)                                                                  \
    X(SIGMOID, sigmoid)                                                                                    \
    X(RELU, relu)                                                                                          \
    X(TANH, tanh)                                                                                          \
    X(GELU, gelu)

/** Kind of a chain op; see ::CF_OP_LIST for formulas. */
typedef enum cf_op_kind {
#define CF_X_ENUM(E, name) CF_OP_##E,
    CF_OP_LIST(CF_X_ENUM)
#undef CF_X_ENUM
    CF_OP_COUNT
} cf_op_kind_t;

/** Static name of an op kind ("softmax_channels"), or NULL for an unknown kind. */
CF_API const char *cf_op_kind_name(cf_op_kind_t kind);

/** Most ops in one chain. */
#define CF_CHAIN_MAX_OPS 16

/** Passed as batch_norm momentum to mean PyTorch's momentum=None: a cumulative average, factor 1/num_batches_tracked. */
#define CF_BN_MOMENTUM_CUMULATIVE (-1.0)

/** BatchNorm mode. */
typedef enum cf_bn_mode {
    CF_BN_TRAINING = 0,  /**< batch statistics; running stats updated in place when given */
    CF_BN_INFERENCE = 1, /**< running statistics */
} cf_bn_mode_t;

/** An append-only list of ops. Opaque; created empty. */
typedef struct cf_chain *cf_chain_t;
typedef const struct cf_chain *const_cf_chain_t;

/** Create an empty chain in @p chain. @returns CF_STATUS_INVALID_ARGUMENT (NULL), CF_STATUS_OUT_OF_MEMORY. */
CF_API cf_status_t cf_chain_create(cf_chain_t *chain);
/** Destroy a chain; NULL is accepted and ignored. Plans made from it stay valid (they copy it). */
CF_API cf_status_t cf_chain_destroy(cf_chain_t chain);

/**
 * @name Appending ops
 * Each returns CF_STATUS_INVALID_ARGUMENT for a NULL chain, a non-finite scalar, eps <= 0 or
 * momentum outside [0, 1] (other than CF_BN_MOMENTUM_CUMULATIVE), and CF_STATUS_NOT_SUPPORTED once the
 * chain holds CF_CHAIN_MAX_OPS ops.
 */
/**@{*/
CF_API cf_status_t cf_chain_append_add_channel(cf_chain_t chain);
CF_API cf_status_t cf_chain_append_mul_scalar(cf_chain_t chain, double s);
CF_API cf_status_t cf_chain_append_add_scalar(cf_chain_t chain, double s);
CF_API cf_status_t cf_chain_append_affine_channel(cf_chain_t chain);
/**
 * BatchNorm2d over the conv output channels.
 * Training, as torch.nn.BatchNorm2d.train(): normalise with the batch mean and biased variance
 * (M = N*OH*OW values per channel); when running_mean/running_var are given, update them as
 * running = (1 - m) * running + m * batch, with the unbiased variance (var * M / (M - 1)) for running_var;
 * num_batches_tracked (if given) += 1 first; m = @p momentum, or 1 / num_batches_tracked when @p momentum
 * is CF_BN_MOMENTUM_CUMULATIVE (then num_batches_tracked is required).
 * Inference: normalise with running_mean/running_var (both required).
 */
CF_API cf_status_t cf_chain_append_batch_norm(cf_chain_t chain, cf_bn_mode_t mode, double eps, double momentum);
CF_API cf_status_t cf_chain_append_softmax_channels(cf_chain_t chain);
CF_API cf_status_t cf_chain_append_sigmoid(cf_chain_t chain);
CF_API cf_status_t cf_chain_append_relu(cf_chain_t chain);
CF_API cf_status_t cf_chain_append_tanh(cf_chain_t chain);
CF_API cf_status_t cf_chain_append_gelu(cf_chain_t chain);
/**@}*/

/** Number of ops in @p chain. @returns CF_STATUS_INVALID_ARGUMENT for NULL arguments. */
CF_API cf_status_t cf_chain_length(const_cf_chain_t chain, int *length);
/** Kind of op @p index. @returns CF_STATUS_INVALID_ARGUMENT for NULL arguments or an index out of range. */
CF_API cf_status_t cf_chain_op_kind(const_cf_chain_t chain, int index, cf_op_kind_t *kind);

/** Run-time buffers of chain op i (unused fields stay NULL). All float vectors hold C_out values. */
typedef struct cf_op_args {
    const float *channel_a;       /**< add_channel: a; affine_channel: scale; batch_norm: gamma (NULL = 1) */
    const float *channel_b;       /**< affine_channel: shift; batch_norm: beta (NULL = 0) */
    float *running_mean;          /**< batch_norm: read (inference) or updated in place (training) */
    float *running_var;           /**< batch_norm: read (inference) or updated in place (training) */
    int64_t *num_batches_tracked; /**< batch_norm training: incremented in place (NULL = not tracked) */
} cf_op_args_t;

/** Run-time buffers of a plan: caller-owned, host (CPU) or device (CUDA) memory. */
typedef struct cf_args {
    const float *src; /**< (N, C_in, H, W) */
    const float *wei; /**< (C_out, C_in, KH, KW) or, transposed, (C_in, C_out, KH, KW) */
    const float *bia; /**< (C_out), required iff desc.has_bias */
    float *dst;       /**< (N, C_out, OH, OW); must not overlap the inputs */
    cf_op_args_t ops[CF_CHAIN_MAX_OPS];
} cf_args_t;

/** A validated descriptor + chain bound to a backend and an implementation. Opaque, immutable, thread-safe to execute. */
typedef struct cf_plan *cf_plan_t;
typedef const struct cf_plan *const_cf_plan_t;

/**
 * Validate @p desc and @p chain for @p backend and choose the implementation (fastest that supports it;
 * `CONVFUSE_VERBOSE=dispatch` prints every refusal and its reason to stderr). The chain is copied.
 * Allocates only host memory; never touches the device beyond querying its properties.
 * @returns CF_STATUS_INVALID_ARGUMENT / CF_STATUS_INVALID_SHAPE (see cf_conv_desc_output_dims(); also a
 *          malformed @p chain, e.g. a corrupted handle),
 *          CF_STATUS_NOT_SUPPORTED (no implementation of this backend serves the chain; the message says why),
 *          CF_STATUS_BACKEND_UNAVAILABLE (CUDA not built in, or no device).
 */
CF_API cf_status_t cf_plan_create(cf_plan_t *plan, const cf_conv_desc_t *desc, const_cf_chain_t chain,
                                  cf_backend_t backend, cf_math_t math);
/** Destroy a plan; NULL is accepted. */
CF_API cf_status_t cf_plan_destroy(cf_plan_t plan);
/** Name of the chosen implementation (static storage), e.g. "cuda_igemm_tf32" or "cpu_reference". */
CF_API cf_status_t cf_plan_impl_name(const_cf_plan_t plan, const char **name);
/** Output height and width of the plan. */
CF_API cf_status_t cf_plan_output_dims(const_cf_plan_t plan, int64_t *oh, int64_t *ow);
/** Bytes of workspace cf_plan_execute() needs (device memory for CUDA); 0 means none (NULL workspace ok). */
CF_API cf_status_t cf_plan_workspace_size(const_cf_plan_t plan, size_t *bytes);
/**
 * Run the plan. CUDA: enqueued on @p stream (a cudaStream_t; NULL = legacy default stream), asynchronous,
 * no allocation, no host synchronisation (CUDA-graph capturable). CPU: synchronous; @p stream is ignored.
 * @returns CF_STATUS_INVALID_ARGUMENT (a required pointer NULL, or dst overlapping an input; named in the message),
 *          CF_STATUS_WORKSPACE_TOO_SMALL, CF_STATUS_CUDA_ERROR (launch failure, with the CUDA text),
 *          CF_STATUS_OUT_OF_MEMORY (CPU intermediates).
 */
CF_API cf_status_t cf_plan_execute(const_cf_plan_t plan, const cf_args_t *args, void *workspace,
                                   size_t workspace_size, void *stream);

/**
 * One call: create a plan, run it, destroy it. The workspace must be at least what the plan needs
 * (query it with a plan first); CPU plans need none.
 */
CF_API cf_status_t cf_run(const cf_conv_desc_t *desc, const_cf_chain_t chain, cf_backend_t backend, cf_math_t math,
                          const cf_args_t *args, void *workspace, size_t workspace_size, void *stream);

/** Set @p *available to 1 if @p backend can run here (CUDA: compiled in and a device of compute capability >= 9.0). */
CF_API cf_status_t cf_backend_available(cf_backend_t backend, int *available);

#ifdef __cplusplus
}
#endif
#endif /* CONVFUSE_H */
