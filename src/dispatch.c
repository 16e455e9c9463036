/* The ordered dispatch tables: per backend, fastest implementation first. The first whose supports()
 * accepts the plan serves it; CONVFUSE_VERBOSE=dispatch prints every refusal and the choice. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const cf_impl_t *const cf_cpu_impls[] = {&cf_impl_cpu_reference, NULL};

/* Appends "; <impl>: <reason>" to the refusal list (truncated silently: cf_error bounds it anyway). */
static void append_refusal(char *list, size_t size, const char *impl, const char *reason)
{
    size_t used = strlen(list);
    if (used + 1 >= size)
        return;
    snprintf(list + used, size - used, "%s%s: %s", used > 0 ? "; " : "", impl, reason);
}

static cf_status_t select_from(struct cf_plan *plan, const cf_impl_t *const *table, const char *backend_name)
{
    const bool verbose = cf_verbose("dispatch");
    char refusals[1536] = "";
    for (const cf_impl_t *const *it = table; *it != NULL; it++) {
        const cf_impl_t *impl = *it;
        char reason[256] = "";
        if (impl->supports(plan, reason, sizeof reason)) {
            if (verbose)
                fprintf(stderr, "convfuse: dispatch: %s: chosen\n", impl->name);
            plan->impl = impl;
            return CF_STATUS_SUCCESS;
        }
        if (reason[0] == '\0')
            snprintf(reason, sizeof reason, "refused without a reason");
        if (verbose)
            fprintf(stderr, "convfuse: dispatch: %s: refused: %s\n", impl->name, reason);
        append_refusal(refusals, sizeof refusals, impl->name, reason);
    }
    return cf_error(CF_STATUS_NOT_SUPPORTED, "no %s implementation supports this plan: %s", backend_name,
                    refusals[0] != '\0' ? refusals : "the dispatch table is empty");
}

cf_status_t cf_dispatch_select(struct cf_plan *plan)
{
    switch (plan->backend) {
    case CF_BACKEND_CPU:
        return select_from(plan, cf_cpu_impls, "CPU");
    case CF_BACKEND_CUDA: {
#ifdef CONVFUSE_WITH_CUDA
        int sm = 0;
        char reason[256] = "";
        if (!cf_cuda_device_ok(&sm, reason, sizeof reason)) {
            if (cf_verbose("dispatch"))
                fprintf(stderr, "convfuse: dispatch: cuda backend unavailable: %s\n", reason);
            return cf_error(CF_STATUS_BACKEND_UNAVAILABLE, "CUDA backend unavailable: %s",
                            reason[0] != '\0' ? reason : "no usable device");
        }
        plan->device_sm_count = sm;
        return select_from(plan, cf_cuda_impls, "CUDA");
#else
        return cf_error(CF_STATUS_BACKEND_UNAVAILABLE,
                        "convfuse was built without CUDA (nvcc not found at build time, or CONVFUSE_CUDA=OFF)");
#endif
    }
    }
    return cf_error(CF_STATUS_INVALID_ARGUMENT, "backend = %d is not a cf_backend_t", (int)plan->backend);
}
