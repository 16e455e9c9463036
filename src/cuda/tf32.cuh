/* fp32 -> TF32 rounding shared by the tensor-core kernels. */
#ifndef CONVFUSE_CUDA_TF32_CUH
#define CONVFUSE_CUDA_TF32_CUH

#include <stdint.h>

namespace cf {

/* x rounded to nearest TF32 (ties away from zero), as bits whose 13 low mantissa bits are zero, so the tensor core
 * (which ignores those bits) reads it exactly. cvt.rna compiles to three instructions on sm_90 (|x| < inf test,
 * half an ulp added where it holds, mask). The bare add-and-mask idiom is one instruction shorter but wrong for
 * NaNs with high payload bits: 0x7fffffff, the NaN a GPU's 0/0 gives, carries into the sign and becomes -0.
 * A NaN whose payload lies only in the 13 low bits reads as inf here, as it does to the tensor core unrounded. */
__device__ __forceinline__ uint32_t cf_tf32_rna(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float cf_tf32_rna_f(float x) { return __uint_as_float(cf_tf32_rna(x)); }

} // namespace cf

#endif
