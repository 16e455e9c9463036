/* Training batch-norm statistics from the input's moments (docs/kb2_73.md, "statistics from the input Gram").
 *
 * For a stride-1 convolution y_c = w_c . p + bias_c, with p the 72-long patch (C_in x kh x kw) of an output
 * pixel, the batch statistics of channel c over the N*OH*OW pixels are
 *     mean_c = w_c . E[p] + bias_c,        var_c = w_c^T Cov(p) w_c,
 * so they need the patches' first and second moments, not the conv. The second moments are shifted windows of
 * one autocorrelation: G[(ci,d),(cj,e)] = sum over the window R(d) of x'_ci(q) x'_cj(q + e - d), with x' = x - s
 * (s_ci the mean of channel ci's first input row: the shift keeps E[x'] small against the spread). The product
 * x'_ci(q) x'_cj(q + o) is summed once per offset o (13 of them for 3x3) and position class of q, not once per
 * pair of taps (81): C_in^2 * 13 FFMA per pixel against the conv's C_out * 72 MACs, and exact fp32 products.
 *
 * Position classes: each row is one of the kh-1 top rows, the core rows [kh-1, OH) or the kh-1 bottom rows, and
 * each column likewise. R(d) is a union of classes, so G is assembled from per-class sums without subtraction.
 * The core rows (core and edge columns) hold nearly all the work: bands of them staged in shared memory, a warp
 * per row slot with sliding register windows; the border rows' classes are "frame jobs" from global memory.
 *
 * Kernels: cf_gram_kernel (one wave of CTAs: core rows, then one frame job each; per-CTA partial sums, reduced in
 * double and stored as float), cf_gram_sum_kernel (fixed-order sums per tap window: G and the first moments),
 * cf_gram_stats_kernel (a block per channel: the quadratic form, the mean, the guard). The result is one (count,
 * mean, M2) block in the statistics buffer; where the statistics stand, cf_bn_finalize_kernel (igemm.cu) finishes
 * the batch norm from it (scale/shift, running statistics).
 *
 * Guard: var_c = w^T Cov w cancels when the patch values are strongly correlated (smooth images, weights that
 * difference neighbours). Its rounding error is at most about eps_acc * (sum_k |w_k| sqrt(E[x'_k^2]))^2; where
 * that exceeds var_c * CF_GRAM_KAPPA for any channel, the flag stays 0 and the direct statistics pass (the conv
 * on tensor cores, 2xTF32) runs instead: the decision is taken on the device, so no host synchronisation. */
#ifndef CONVFUSE_CUDA_BN_GRAM_CUH
#define CONVFUSE_CUDA_BN_GRAM_CUH

#include "igemm.cuh"

#define CF_GRAM_KH 3
#define CF_GRAM_KW 3
/* offsets o = (oy, ox) with oy in [0, kh), ox in [-(kw-1), kw-1], and ox >= 0 where oy = 0 (the rest by symmetry) */
#define CF_GRAM_EO (CF_GRAM_KW + (CF_GRAM_KH - 1) * (2 * CF_GRAM_KW - 1))
#define CF_GRAM_NCLS ((2 * CF_GRAM_KH - 1) * (2 * CF_GRAM_KW - 1))
#define CF_GRAM_CORE ((CF_GRAM_KH - 1) * (2 * CF_GRAM_KW - 1) + (CF_GRAM_KW - 1)) /* the core x core class */
#define CF_GRAM_MAX_CIN 8
#define CF_GRAM_THREADS 256
#define CF_GRAM_MAX_ROWS 8192 /* rows of partial sums (the class table of the sum kernel) */
#define CF_GRAM_KAPPA 256.0 /* the guard's bound on the cancellation ratio (docs/kb2_73.md) */

struct cf_gram_params {
    /* the input as a TMA tensor {W, H, C, N} (fastest first), box {ls, box_rows, C_in, 1} from x = -4: one copy
     * per band lands in the shared layout below, its zero fill the column guards (tma = 1) */
    CUtensorMap tmap;
    int tma;          /* the map is set: stage by TMA (else cp.async / plain copies) */
    int tma_geometry; /* the layout admits the TMA box (W a multiple of 4, ls and rows as below) */
    int box_rows;     /* rows per box: rb + kh - 1, made odd */
    int bufs;         /* staging buffers (TMA): 1 or 2 */
    int es_off;       /* floats from the staging base to the edge columns' sums (past staging and flush area) */
    int debug;        /* CONVFUSE_GRAM_DEBUG, for timing the parts: 1 skips the frame jobs, 2 the core products */
    int frame_first;  /* CONVFUSE_GRAM_FRAME_FIRST (default 1): the second half of the grid does its frame job first */
    const float *src, *wei, *bia;
    int n, cin, h, w, cout, oh, ow;
    int cinp;  /* C_in rounded up to even: a lane owns the channel pairs (2 cig, cj) and (2 cig + 1, cj) */
    int ne;    /* entries per class: cinp^2 * EO second moments, then cinp first moments */
    int lanes; /* (cinp/2) * cinp lanes per row slot */
    int slots; /* row slots per CTA, CF_GRAM_THREADS / lanes */
    /* CTA m: core rows [R m / main_ctas, R (m+1) / main_ctas) of the batch's R = N (OH - kh + 1), in bands of at
     * most rb rows within an image; then frame job m, if m < frame_jobs */
    int rb, main_ctas;
    int c0, c1; /* 4-column chunks [c0, c1] cover the core columns [kw-1, OW) */
    int ls, cs; /* shared row stride (floats; column v at 4 + v) and channel stride (= 4 mod 16: conflict-free) */
    int frame_jobs;
    /* jobs of each frame class, [cls_first, + cls_count); the core class: the main CTAs */
    int cls_first[CF_GRAM_NCLS], cls_count[CF_GRAM_NCLS];
    int nrows;      /* rows of partial sums: 5 main_ctas + frame_jobs */
    float *part;    /* [ne][nrows]: per entry, each CTA's core sum, its 4 edge-column classes', then each frame
                       job's (in double within a CTA, rounded once) */
    double *gram;   /* [K][K], K = C_in kh kw: sum over the pixels of x'_k x'_l (patch entries k, l) */
    double *s1;     /* [K]: sum over the pixels of x'_k */
    float *stats;   /* (count, mean, M2) per channel: block 0 of the statistics buffer */
    int *ok;        /* [0] 1: the statistics stand, 0: the direct pass computes them; [1] the largest cancellation
                       ratio (float bits) */
    int bn;         /* the batch norm's chain index: ops [0, bn) are per-channel affine, folded with the bias */
    struct cf_ig_op op[CF_CHAIN_MAX_OPS];
};

#endif
