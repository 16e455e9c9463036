/* Host entry points of the fused implicit GEMM (igemm.cu), used by the dispatch table (backend.cu). */
#ifndef CONVFUSE_CUDA_IGEMM_HOST_H
#define CONVFUSE_CUDA_IGEMM_HOST_H

#include "internal.h"

#include <cudaTypedefs.h>

/* 3 for 3xTF32 products, 1 for TF32, as the plan's math mode and chain resolve. */
int cf_ig_products(const struct cf_plan *plan);
/* Index of the training batch_norm op in the chain, or -1. */
int cf_ig_bn_train_index(const struct cf_plan *plan);
/* Training batch norm: store the conv output and normalise in place (true) or recompute the conv (false). */
bool cf_ig_bn_inplace(const struct cf_plan *plan);
/* Whether the kernel serves the plan with these products and this softmax path; else why. */
bool cf_ig_supports(const struct cf_plan *plan, int products, bool chunked, char *why, size_t why_size);
size_t cf_ig_workspace_bytes(const struct cf_plan *plan);
/* Return a CF_STATUS_CUDA_ERROR naming the call where a CUDA runtime call fails. */
#define CF_CUDA_TRY(call)                                                                                   \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess)                                                                              \
            return cf_error(CF_STATUS_CUDA_ERROR, "%s: %s (%s)", #call, cudaGetErrorString(e_),             \
                            cudaGetErrorName(e_));                                                          \
    } while (0)

/* An integer knob from the environment, clamped to [lo, hi]; dflt when unset or empty. */
int cf_env_int(const char *name, int dflt, int lo, int hi);

/* A tiled fp32 TMA map of `rank` dimensions (fastest first; strides in bytes of dimensions 1..rank-1), element
 * strides 1, no interleave, zero fill out of bounds. False: no driver entry point, or the encoder refused. */
bool cf_tmap_f32(CUtensorMap *map, const void *base, int rank, const cuuint64_t *dim, const cuuint64_t *stride,
                 const cuuint32_t *box, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion);
/* Kernels after the first of a chain are launched with programmatic dependent launch (pdl.cuh): sm_90 and newer,
 * unless CONVFUSE_PDL=0. */
bool cf_pdl_enabled(void);
cf_status_t cf_ig_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream);

#endif
