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
/* cuTensorMapEncodeTiled through the runtime (the library links no libcuda), or NULL without a driver entry point */
PFN_cuTensorMapEncodeTiled_v12000 cf_tmap_encoder(void);
cf_status_t cf_ig_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream);

#endif
