/* Tiny assert macros for the C tests: each failure prints file:line, the test goes on, and
 * check_summary() prints "N passed, N failed" and gives the exit code. One test executable per file. */
#ifndef CONVFUSE_CHECK_H
#define CONVFUSE_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convfuse.h"

static int check_passed_count, check_failed_count;

static inline void check_record(int ok, const char *file, int line, const char *what)
{
    if (ok) {
        check_passed_count++;
    } else {
        check_failed_count++;
        fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
    }
}

/* CHECK(cond): cond must hold. */
#define CHECK(cond) check_record((cond) ? 1 : 0, __FILE__, __LINE__, #cond)

/* CHECK_STATUS(call, expected): the call returns the expected cf_status_t. */
#define CHECK_STATUS(call, expected)                                                                        \
    do {                                                                                                    \
        cf_status_t check_got_ = (call);                                                                    \
        cf_status_t check_want_ = (expected);                                                               \
        check_record(check_got_ == check_want_, __FILE__, __LINE__, #call " == " #expected);                \
        if (check_got_ != check_want_)                                                                      \
            fprintf(stderr, "    got %s, want %s; last error: \"%s\"\n", cf_status_string(check_got_),        \
                    cf_status_string(check_want_), cf_last_error());                                        \
    } while (0)

/* CHECK_ERROR(call, expected, needle): the call fails with `expected` and cf_last_error() contains `needle`. */
#define CHECK_ERROR(call, expected, needle)                                                                 \
    do {                                                                                                    \
        CHECK_STATUS(call, expected);                                                                       \
        const char *check_msg_ = cf_last_error();                                                           \
        const char *check_needle_ = (needle);                                                               \
        check_record(strstr(check_msg_, check_needle_) != NULL, __FILE__, __LINE__,                         \
                     "cf_last_error() contains " #needle);                                                  \
        if (strstr(check_msg_, check_needle_) == NULL)                                                      \
            fprintf(stderr, "    last error: \"%s\", wanted \"%s\" in it\n", check_msg_, check_needle_);        \
    } while (0)

/* CHECK_NEAR(got, want, tol): |got - want| <= tol (NaN never passes). */
#define CHECK_NEAR(got, want, tol)                                                                          \
    do {                                                                                                    \
        double check_g_ = (double)(got), check_w_ = (double)(want);                                         \
        int check_ok_ = fabs(check_g_ - check_w_) <= (tol);                                                 \
        check_record(check_ok_, __FILE__, __LINE__, #got " ~= " #want);                                     \
        if (!check_ok_)                                                                                     \
            fprintf(stderr, "    got %.9g, want %.9g (tol %g)\n", check_g_, check_w_, (double)(tol));        \
    } while (0)

/* Prints the summary line; returns the process exit code (0 if nothing failed). */
static inline int check_summary(const char *test)
{
    printf("%s: %d passed, %d failed\n", test, check_passed_count, check_failed_count);
    return check_failed_count == 0 ? 0 : 1;
}

#endif
