/* Per-op static facts, generated from CF_OP_LIST: a new op adds one CF_OP_FACTS_ line here (the build
 * fails without it). */
#include "internal.h"

/* CF_OP_FACTS_<E>: channel vectors read (channel_a/channel_b), elementwise (depends only on x and c). */
#define CF_OP_FACTS_ADD_CHANNEL 1, true
#define CF_OP_FACTS_MUL_SCALAR 0, true
#define CF_OP_FACTS_ADD_SCALAR 0, true
#define CF_OP_FACTS_AFFINE_CHANNEL 2, true
#define CF_OP_FACTS_BATCH_NORM 2, false /* training needs whole-tensor statistics; gamma/beta optional */
#define CF_OP_FACTS_SOFTMAX_CHANNELS 0, false /* reduces over C_out at each pixel */
#define CF_OP_FACTS_SIGMOID 0, true
#define CF_OP_FACTS_RELU 0, true
#define CF_OP_FACTS_TANH 0, true
#define CF_OP_FACTS_GELU 0, true

#define CF_X_INFO(E, name) {#name, CF_OP_FACTS_##E},
const cf_op_info_t cf_op_infos[] = {CF_OP_LIST(CF_X_INFO)};
#undef CF_X_INFO

/* internal.h declares the array with CF_OP_COUNT entries, so also count the list itself. */
#define CF_X_ONE(E, name) +1
_Static_assert(sizeof cf_op_infos / sizeof cf_op_infos[0] == CF_OP_COUNT, "cf_op_infos must have CF_OP_COUNT entries");
_Static_assert(0 CF_OP_LIST(CF_X_ONE) == CF_OP_COUNT, "CF_OP_LIST and cf_op_kind_t disagree");
#undef CF_X_ONE

const char *cf_op_kind_name(cf_op_kind_t kind)
{
    if ((int)kind < 0 || (int)kind >= CF_OP_COUNT)
        return NULL;
    return cf_op_infos[kind].name;
}
