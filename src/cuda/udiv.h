/* Division by a value fixed for many divisions (a phase's row width, tiles per image), as one multiply-high, an add
 * and a shift instead of the ~20 instructions of a 32-bit integer division (Granlund and Montgomery, "Division by
 * invariant integers using multiplication", 1994, round-up method). Plain C, so the host tests check it too
 * (tests/c/test_udiv.c). Valid for 0 <= n < 2^31 and 1 <= d < 2^31: then hi + n < 2n fits in 32 bits. */
#ifndef CONVFUSE_CUDA_UDIV_H
#define CONVFUSE_CUDA_UDIV_H

#include <stdint.h>

#ifdef __CUDACC__
#define CF_UDIV_HD __host__ __device__
#else
#define CF_UDIV_HD
#endif

typedef struct {
    uint32_t mul; /* floor(2^32 (2^shr - d) / d) + 1 */
    uint32_t shr; /* ceil(log2 d) */
} cf_udiv_t;

CF_UDIV_HD static inline cf_udiv_t cf_udiv_make(uint32_t d)
{
    uint32_t l = 0;
    while (l < 31 && (1u << l) < d)
        ++l;
    cf_udiv_t r;
    r.mul = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - d)) / d + 1);
    r.shr = l;
    return r;
}

CF_UDIV_HD static inline uint32_t cf_udiv(uint32_t n, cf_udiv_t v)
{
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, v.mul);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)n * v.mul) >> 32);
#endif
    return (hi + n) >> v.shr;
}

#endif
