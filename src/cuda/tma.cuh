/* mbarrier and TMA helpers, shared by the implicit GEMM's input patch (igemm_kernel.cuh) and the Gram statistics
 * band staging (bn_gram.cu). */
#ifndef CONVFUSE_CUDA_TMA_CUH
#define CONVFUSE_CUDA_TMA_CUH

#include <cuda.h>
#include <stdint.h>

namespace cf {

__device__ __forceinline__ void ig_mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* Wait for phase `parity` of the mbarrier. One PTX loop: a C loop around try_wait is a divergent branch to ptxas,
 * which then serialised the in-flight wgmma of the 3xTF32 variants (C7518, "WG.DP in divergent path"). The bytes
 * its phase waited for (TMA copies, the peer's st.async in split mode) are visible after it. */
__device__ __forceinline__ void ig_mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nCF_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra CF_MBAR_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* The transaction bytes of this phase, and this thread's arrival (count-1 barriers: one call per phase), before
 * the copies that complete them (ig_tma_copy4d). */
__device__ __forceinline__ void ig_mbar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

/* one 4-D box into shared memory, its bytes completing on `bar` (which expects them: ig_mbar_expect) */
__device__ __forceinline__ void ig_tma_copy4d(const CUtensorMap *map, uint32_t dst, uint32_t bar, int x, int c, int y,
                                              int n)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4, %5}], [%6];" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(c), "r"(y), "r"(n), "r"(bar)
                 : "memory");
}

/* one 4-D box of the input into shared memory; completion (its byte count) is signalled on `bar` */
__device__ __forceinline__ void ig_tma_load(const CUtensorMap *map, uint32_t dst, uint32_t bar, uint32_t bytes, int x,
                                            int c, int y, int n)
{
    ig_mbar_expect(bar, bytes);
    ig_tma_copy4d(map, dst, bar, x, c, y, n);
}

} /* namespace cf */

#endif
