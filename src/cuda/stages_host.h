/* The chain as the fused kernels' epilogue runs it (host side): the op table and the stage program. Consecutive
 * per-channel affine ops fold into one AFFINE stage (x*a[c] + b[c], a table per stage), an AFFINE stage followed by
 * sigmoid becomes AFFINE_SIGMOID, every other op is a stage of its own. Shared by the implicit GEMM (igemm.cu) and
 * the stride-2 transposed-conv kernel (convt_s2.cu): both parameter structs carry the same fields. */
#ifndef CONVFUSE_CUDA_STAGES_HOST_H
#define CONVFUSE_CUDA_STAGES_HOST_H

#include "igemm.cuh"
#include "internal.h"

#include <string.h>

static inline bool cf_ig_is_affine_op(cf_op_kind_t k)
{
    return k == CF_OP_ADD_CHANNEL || k == CF_OP_MUL_SCALAR || k == CF_OP_ADD_SCALAR || k == CF_OP_AFFINE_CHANNEL ||
           k == CF_OP_BATCH_NORM;
}

static inline int cf_ig_stage_kind_of(cf_op_kind_t k)
{
    switch (k) {
    case CF_OP_SOFTMAX_CHANNELS: return CF_IG_SOFTMAX;
    case CF_OP_SIGMOID: return CF_IG_SIGMOID;
    case CF_OP_RELU: return CF_IG_RELU;
    case CF_OP_TANH: return CF_IG_TANH;
    case CF_OP_GELU: return CF_IG_GELU;
    default: return CF_IG_AFFINE;
    }
}

/* Fill p's op table and stage program for chain ops [op_begin, op_end) (stage 0 takes the conv bias when op_begin is
 * 0). A training batch norm reads its folded scale/shift from bn_scale/bn_shift. p->ntables never shrinks below what
 * the caller sized. P: cf_ig_params or cf_ct_params. */
template <class P>
static void cf_ig_fill_stages(const struct cf_plan *plan, const cf_args_t *args, int op_begin, int op_end,
                              const float *bn_scale, const float *bn_shift, P *p)
{
    p->nops = op_end;
    for (int i = op_begin; i < op_end; ++i) {
        const cf_op_t *o = &plan->chain.ops[i];
        cf_ig_op *d = &p->op[i];
        memset(d, 0, sizeof *d);
        d->kind = o->kind;
        d->scalar = o->scalar;
        d->eps = o->eps;
        d->a = args->ops[i].channel_a;
        d->b = args->ops[i].channel_b;
        d->rm = args->ops[i].running_mean;
        d->rv = args->ops[i].running_var;
        if (o->kind == CF_OP_BATCH_NORM && o->bn_mode == CF_BN_TRAINING) {
            d->bn_folded = 1;
            d->a = bn_scale;
            d->b = bn_shift;
        }
    }
    int ns = 0, nt = 0;
    p->softmax_stage = -1;
    p->stage[0].kind = CF_IG_AFFINE;
    p->stage[0].op_begin = p->stage[0].op_end = op_begin;
    p->stage[0].with_bias = op_begin == 0;
    p->stage[0].table = nt++;
    ns = 1;
    for (int i = op_begin; i < op_end; ++i) {
        const cf_op_kind_t k = plan->chain.ops[i].kind;
        if (cf_ig_is_affine_op(k)) {
            if (p->stage[ns - 1].kind != CF_IG_AFFINE) {
                cf_ig_stage *s = &p->stage[ns++];
                s->kind = CF_IG_AFFINE;
                s->op_begin = i;
                s->with_bias = 0;
                s->table = nt++;
            }
            p->stage[ns - 1].op_end = i + 1;
        } else {
            cf_ig_stage *s = &p->stage[ns++];
            s->kind = cf_ig_stage_kind_of(k);
            s->op_begin = s->op_end = i;
            s->with_bias = 0;
            s->table = -1;
            if (s->kind == CF_IG_SOFTMAX)
                p->softmax_stage = ns - 1;
        }
    }
    /* AFFINE then SIGMOID: one stage over a table prescaled by -log2(e) */
    for (int i = 0; i + 1 < ns; ++i)
        if (p->stage[i].kind == CF_IG_AFFINE && p->stage[i + 1].kind == CF_IG_SIGMOID) {
            p->stage[i].kind = CF_IG_AFFINE_SIGMOID;
            for (int j = i + 1; j + 1 < ns; ++j)
                p->stage[j] = p->stage[j + 1];
            --ns;
            if (p->softmax_stage > i)
                --p->softmax_stage;
        }
    p->nstage = ns;
    p->ntables = nt > p->ntables ? nt : p->ntables;
}

#endif
