/* The kernels' division by invariant integers (src/cuda/udiv.h) against the C division operator: every divisor up
 * to 4096 with the numerators near its multiples and the range ends, then random divisors and numerators over the
 * whole valid range (n < 2^31, d < 2^31). */
#include "check.h"
#include "cuda/udiv.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd31(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 33); /* 31 bits */
}

static int failures_shown = 0;
static int check_one(uint32_t n, uint32_t d, cf_udiv_t v)
{
    const uint32_t got = cf_udiv(n, v), want = n / d;
    if (got != want && failures_shown++ < 10)
        fprintf(stderr, "    %u / %u: got %u, want %u\n", n, d, got, want);
    return got == want;
}

int main(void)
{
    long bad = 0, total = 0;
    const uint32_t top = 0x7fffffffu;
    for (uint32_t d = 1; d <= 4096; ++d) {
        const cf_udiv_t v = cf_udiv_make(d);
        for (uint32_t k = 0; k < 64; ++k) /* around the first multiples */
            for (int e = -1; e <= 1; ++e) {
                const int64_t n = (int64_t)k * d + e;
                if (n >= 0) {
                    bad += !check_one((uint32_t)n, d, v);
                    ++total;
                }
            }
        const uint32_t q = top / d; /* around the last multiples below 2^31 */
        for (uint32_t k = q > 3 ? q - 3 : 0; k <= q; ++k)
            for (int e = -1; e <= 1; ++e) {
                const int64_t n = (int64_t)k * d + e;
                if (n >= 0 && n <= top) {
                    bad += !check_one((uint32_t)n, d, v);
                    ++total;
                }
            }
        bad += !check_one(top, d, v);
        ++total;
    }
    for (int i = 0; i < 2000000; ++i) {
        const uint32_t d = 1 + rnd31() % top, sh = rnd31() % 31;
        const uint32_t dd = d >> sh ? d >> sh : 1; /* small and large divisors alike */
        const uint32_t n = rnd31();
        bad += !check_one(n, dd, cf_udiv_make(dd));
        ++total;
    }
    CHECK(bad == 0);
    printf("udiv: %ld of %ld quotients wrong\n", bad, total);
    return check_summary("test_udiv");
}
