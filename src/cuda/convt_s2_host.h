/* Host entry points of the stride-2 transposed-conv kernel (convt_s2.cu), used by the dispatch table (backend.cu). */
#ifndef CONVFUSE_CUDA_CONVT_S2_HOST_H
#define CONVFUSE_CUDA_CONVT_S2_HOST_H

#include "internal.h"

/* Whether the kernel serves the plan (shape, chain, math mode, device); else why. */
bool cf_ct_supports(const struct cf_plan *plan, char *why, size_t why_size);
size_t cf_ct_workspace_bytes(const struct cf_plan *plan);
/* A misaligned src or wei (16-byte loads) runs the implicit GEMM instead. */
cf_status_t cf_ct_execute(const struct cf_plan *plan, const cf_args_t *args, void *workspace, void *stream);

#endif
