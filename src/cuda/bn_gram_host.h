/* Host entry points of the batch-norm statistics from the input Gram (bn_gram.cu), used by igemm.cu. */
#ifndef CONVFUSE_CUDA_BN_GRAM_HOST_H
#define CONVFUSE_CUDA_BN_GRAM_HOST_H

#include "bn_gram.cuh"
#include "internal.h"

#include <cuda_runtime.h>

/* Workspace the path needs (0 where unsupported). */
size_t cf_gram_workspace_bytes(const struct cf_plan *plan, int bn);
/* Launch the Gram pass, its class sums and the statistics block: stats gets one (count, mean, M2) block and *ok_out
 * points at the device flag that says whether it stands (the direct pass and the finalize read it). *ok_out is
 * NULL where the path does not run (unsupported, or turned off): then the direct pass must. ops: the chain's ops
 * [0, bn) as the device sees them. cf_bn_finalize_kernel finishes the batch norm from the block where the flag
 * stands. The sum and statistics kernels are launched with PDL (cf_pdl_enabled), the Gram kernel without. */
cf_status_t cf_gram_launch(const struct cf_plan *plan, const cf_args_t *args, int bn, const struct cf_ig_op *ops,
                           void *workspace, float *stats, cudaStream_t stream, int **ok_out);

#endif
