/* Programmatic dependent launch (PDL) along the training batch norm's chain of kernels (Gram, sums, statistics,
 * direct pass, finalize, output pass). A kernel launched with the PDL attribute may start while the kernel before it
 * on the stream is still running, once that kernel's blocks have all called cf_grid_release() (or exited). Whatever
 * it reads from its predecessors it reads after cf_grid_wait(), which returns when they have completed and their
 * writes are visible; before it, it may only read what was complete before the chain's first kernel started (the
 * inputs, the weights) and write nothing. The chain's first kernel is launched without the attribute, so it waits
 * for the caller's work as any launch does. Without the attribute both calls return at once. */
#ifndef CONVFUSE_CUDA_PDL_CUH
#define CONVFUSE_CUDA_PDL_CUH

#include <cuda_runtime.h>

#include <utility>

namespace cf {

__device__ __forceinline__ void cf_grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void cf_grid_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when pdl is set */
template <typename... P, typename... A>
static inline cudaError_t cf_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                    bool pdl, A &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

} /* namespace cf */

#endif
