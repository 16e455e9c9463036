/* Internal declarations shared by the core, the CPU backend and the CUDA backend. Not installed. */
#ifndef CONVFUSE_INTERNAL_H
#define CONVFUSE_INTERNAL_H

#include "convfuse.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One op of a chain, with its plan-time parameters (run-time buffers come in cf_args_t.ops[i]). */
typedef struct cf_op {
    cf_op_kind_t kind;
    double scalar;   /* mul_scalar, add_scalar */
    cf_bn_mode_t bn_mode;
    double eps;      /* batch_norm */
    double momentum; /* batch_norm; CF_BN_MOMENTUM_CUMULATIVE (< 0) = cumulative average */
} cf_op_t;

struct cf_chain {
    int length;
    cf_op_t ops[CF_CHAIN_MAX_OPS];
};

/* Per-op static facts, generated from CF_OP_LIST (src/ops.c). */
typedef struct cf_op_info {
    const char *name;
    int channel_vectors; /* how many of channel_a/channel_b the op reads (batch_norm: 2, both optional) */
    bool elementwise;    /* depends only on x and the channel: can run anywhere in a fused epilogue */
} cf_op_info_t;
extern const cf_op_info_t cf_op_infos[CF_OP_COUNT];

struct cf_impl;

struct cf_plan {
    cf_conv_desc_t conv;
    int64_t oh, ow;
    struct cf_chain chain;
    cf_backend_t backend;
    cf_math_t math;
    const struct cf_impl *impl;
    size_t workspace_bytes;
    int device_sm_count; /* CUDA plans: multiprocessors of the current device at plan time */
};

/* An implementation: an entry of the ordered dispatch table (src/dispatch.c). */
typedef struct cf_impl {
    const char *name;
    cf_backend_t backend;
    /* true if it serves the plan; otherwise writes why (one line) into reason[reason_size]. */
    bool (*supports)(const struct cf_plan *plan, char *reason, size_t reason_size);
    size_t (*workspace_bytes)(const struct cf_plan *plan);
    /* Arguments are already checked for presence by the core. */
    cf_status_t (*execute)(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream);
} cf_impl_t;

/* Set this thread's last-error message (printf format) and return `status`. */
cf_status_t cf_error(cf_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* True if CONVFUSE_VERBOSE (comma list) contains `what`, e.g. "dispatch". */
bool cf_verbose(const char *what);

/* Element counts of the plan's tensors. */
int64_t cf_plan_src_elems(const struct cf_plan *plan);
int64_t cf_plan_wei_elems(const struct cf_plan *plan);
int64_t cf_plan_dst_elems(const struct cf_plan *plan);

/* Walk the backend's ordered dispatch table (src/dispatch.c) and set plan->impl (and, for CUDA,
 * plan->device_sm_count) to the first implementation that supports the plan. The plan's other fields
 * must already be filled. NOT_SUPPORTED lists every refusal; BACKEND_UNAVAILABLE says why. */
cf_status_t cf_dispatch_select(struct cf_plan *plan);

/* CPU reference backend (src/cpu/reference.c). */
extern const cf_impl_t cf_impl_cpu_reference;

#ifdef CONVFUSE_WITH_CUDA
/* CUDA backend (src/cuda/): NULL-terminated list, fastest first. */
extern const cf_impl_t *const cf_cuda_impls[];
/* 1 if a device of compute capability >= 9.0 is present; fills its SM count. Never fails loudly. */
int cf_cuda_device_ok(int *sm_count, char *reason, size_t reason_size);
#endif

#ifdef __cplusplus
}
#endif
#endif
