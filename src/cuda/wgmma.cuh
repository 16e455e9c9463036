/* wgmma (sm_90a) wrappers: TF32 operands, fp32 accumulators, B from shared memory; A from registers (RS: the
 * implicit GEMM) or from shared memory too (SS: convt_s2, m64n64k8 and m64n8k8).
 * Each accumulator register must be named in the PTX, hence the written-out operand lists. */
#ifndef CONVFUSE_CUDA_WGMMA_CUH
#define CONVFUSE_CUDA_WGMMA_CUH

#include <stdint.h>

/* wgmma exists only in the sm_90a feature set; the portable compute_90 PTX the build also embeds gets a trap
 * (the host picks the wgmma variant only on a 9.0 device, where the sm_90a code runs). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CF_WGMMA(...) asm volatile(__VA_ARGS__)
#else
#define CF_WGMMA(...) __trap()
#endif

namespace cf {

/* Shared-memory matrix descriptor, no swizzle: core matrices of 8 rows x 16 bytes stored contiguously;
 * lbo = bytes between core matrices adjacent in K, sbo = adjacent in M/N (PTX ISA, "Matrix Descriptor"). */
__device__ __forceinline__ uint64_t wgmma_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}

__device__ __forceinline__ void wgmma_fence() { CF_WGMMA("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { CF_WGMMA("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { CF_WGMMA("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/* Pin registers the tensor core reads or writes asynchronously: the compiler sees wgmma as an ordinary asm
 * statement, so without this it could move reads of the accumulators above the wait, or reuse an A fragment's
 * registers while the wgmma that reads them is still in flight. */
template <int N>
__device__ __forceinline__ void wgmma_pin(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_pin(uint32_t (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(r[i])::"memory");
}

/* ordinary shared-memory stores become visible to the tensor core's async proxy */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* d (+)= a * B, m64n128k8, A: registers in the m16n8k8 fragment layout (warp w of the warpgroup holds
 * rows 16w..16w+15), B: K-major in shared memory through `desc`; SCALE_D = 0 overwrites d. */
template <int SCALE_D>
__device__ __forceinline__ void wgmma_m64n128k8_tf32(float (&d)[64], const uint32_t (&a)[4], uint64_t desc)
{
    CF_WGMMA("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(SCALE_D));
}

/* d (+)= a * B, m64n64k8, A: registers in the m16n8k8 fragment layout (warp w of the warpgroup holds
 * rows 16w..16w+15), B: K-major in shared memory through `desc`; SCALE_D = 0 overwrites d. */
template <int SCALE_D>
__device__ __forceinline__ void wgmma_m64n64k8_tf32(float (&d)[32], const uint32_t (&a)[4], uint64_t desc)
{
    CF_WGMMA("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(SCALE_D));
}

/* d (+)= a * B, m64n32k8, A: registers in the m16n8k8 fragment layout (warp w of the warpgroup holds
 * rows 16w..16w+15), B: K-major in shared memory through `desc`; SCALE_D = 0 overwrites d. */
template <int SCALE_D>
__device__ __forceinline__ void wgmma_m64n32k8_tf32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc)
{
    CF_WGMMA("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(SCALE_D));
}


/* d (+)= A * B, m64n64k8 TF32, both operands from shared memory (SS) through descriptors given as 32-bit halves
 * (lo: start address and LBO, hi: SBO; wgmma_desc's layout). scale_d = 0 overwrites d. */
__device__ __forceinline__ void wgmma_ss_m64n64k8_tf32(float (&d)[32], uint32_t a_lo, uint32_t a_hi, uint32_t b_lo,
                                                       uint32_t b_hi, int scale_d)
{
    CF_WGMMA("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%32, %33};\nmov.b64 db, {%34, %35};\n"
             "setp.ne.b32 p, %36, 0;\n"
             "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, da, db, p, 1, 1;\n}\n"
             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
             : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "r"(scale_d));
}

/* d (+)= A * B, m64n8k8 TF32, both operands from shared memory (SS) through descriptors given as 32-bit halves
 * (lo: start address and LBO, hi: SBO; wgmma_desc's layout). scale_d = 0 overwrites d. */
__device__ __forceinline__ void wgmma_ss_m64n8k8_tf32(float (&d)[4], uint32_t a_lo, uint32_t a_hi, uint32_t b_lo,
                                                       uint32_t b_hi, int scale_d)
{
    CF_WGMMA("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%4, %5};\nmov.b64 db, {%6, %7};\n"
             "setp.ne.b32 p, %8, 0;\n"
             "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, da, db, p, 1, 1;\n}\n"
             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
             : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "r"(scale_d));
}

} // namespace cf

#endif
