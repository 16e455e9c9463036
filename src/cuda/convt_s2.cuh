/* Stride-2 transposed convolution (k4, s2, p1, output_padding 0/1; KB2-91's ConvTranspose2d) + chain, one kernel:
 * warp-specialised, both wgmma operands from shared memory.
 *
 * Phases. Output row oh = 2j + qh reads input rows j + qh - 1 + a (a = 0, 1; kh = 3 - qh - 2a), column ow = 2i + qw
 * reads input columns i + qw - 1 + b (kw = 3 - qw - 2b). A CTA owns one row phase qh and computes BOTH column
 * phases of its pixels, so it writes whole output rows (a CTA of one column phase writes every other word of each
 * sector: KB2-91's column-phase pair spent 0.66 of 1.72 ms on that, docs/kb2_91.md).
 *
 * Channels. Both column phases x 128 channels of B would be 256 KB; a cluster of two CTAs splits the channels
 * (C_out in (64, 128]: 64 each, "split mode" of the implicit GEMM) and exchanges each pixel's softmax (max, sum) over
 * distributed shared memory; C_out <= 64 runs one CTA per cluster. B (2 column phases x 4 taps x C_in x 64 channels,
 * TF32-rounded, 128 KB at C_in = 64) stays in shared memory.
 *
 * Tiles. A tile is 64 consecutive phase columns i (a 64-column segment of the input) of one phase row j: GEMM
 * M = 64 positions, N = 64 channels, K = 4 taps x C_in, twice (the column phases). Tiles run in (image, segment, j)
 * order, so consecutive tiles of a CTA share an input row.
 *
 * Input rows in a ring. A producer warpgroup copies each input row segment once per CTA (64 columns + a column of
 * halo on each side, every channel) into a ring of 4 slots, transposed to channel-innermost: per group of 4
 * channels a plane of 16-byte positions (CF_CT_PLANE). That is TF32 wgmma's K-major layout with no swizzle
 * (8 positions x 16 bytes = one core matrix), so every tap is the descriptor's start address moved by 16 bytes per
 * column and a ring slot per row: no per-thread A fragments, no gather (the register-fed kernel spent ~0.56 of its
 * 1.3 ms there, docs/kb2_91.md). Three consumer warpgroups (two with CONVFUSE_CT_WGS=2) take the tiles in turn:
 * the epilogue, three times the wgmma's time per tile, runs in two warpgroups while the third's wgmma do. A row's
 * slot is freed once its tiles' wgmma are done (not their epilogues), so 4 slots keep the producer a row ahead.
 *
 * The extra column. With output_padding 1 and W a multiple of 64, column phase 0 has one position past the last
 * segment (ow = 2W, one tap column). Its 64 channels come from m64n8k8 products with the roles swapped (the B tile
 * read as A: channels x K, the ring's position W-1 as an 8-position B; 7 of them are ignored).
 *
 * Preconditions (cf_ct_supports): C_in <= 64, C_out <= 128, W a multiple of 4, TF32 products, at most one softmax,
 * no training batch norm; per image C_in*H*W and C_out*OH*OW < 2^31; 16-byte aligned src and wei. */
#ifndef CONVFUSE_CUDA_CONVT_S2_CUH
#define CONVFUSE_CUDA_CONVT_S2_CUH

#include "igemm.cuh" /* cf_ig_op, cf_ig_stage */

#define CF_CT_SEG 64      /* positions per tile */
#define CF_CT_POS 66      /* filled positions per plane: columns seg*64 - 1 .. seg*64 + 64 */
#define CF_CT_PLANE 73    /* positions per plane: 66, 6 more read by the extra column's n8 tile, 1 so that a plane is
                             292 = 4 (mod 32) words: the producer's 16-byte writes of 8 planes hit 8 bank groups */
#define CF_CT_SLOTS 4     /* ring slots: two tiles' wgmma in flight read three rows, the fourth fills */
#define CF_CT_STG_LD 36   /* per-warp store staging: 8 channels x 32 columns (float2 writes conflict-free) */
#define CF_CT_MAX_WGS 3   /* consumer warpgroups (cf_ct_params.ncw: 2 or 3) */
/* Timing ablations (development only, outputs wrong; bench/ablate.sh ABLATE_CT_MASKS builds them): 1 no global
 * stores, 2 no input loads (constants), 4 no softmax exchange, 8 no epilogue math, 16 one k8 step per tap, 64 no
 * extra-column products (the m64n8k8 pair per k8 step); 32 swaps the pair's channel halves between the CTAs (results
 * right: it tells a CTA's fault from a channel's). */
#ifndef CF_CT_ABLATE
#define CF_CT_ABLATE 0
#endif
/* store staging per 8-channel slab: 1 column-major (two LDS.128 a lane), 0 channel-major (eight LDS.32) */
#ifndef CF_CT_STG128
#define CF_CT_STG128 0
#endif
#define CF_CT_THREADS_MAX (128 * (1 + CF_CT_MAX_WGS)) /* producer warpgroup + consumers: 128 registers a thread */

struct cf_ct_params {
    const float *src, *wei, *bia;
    float *dst;
    int n, cin, h, w, cout, oh, ow;
    int cp;      /* C_in rounded up to 8 */
    int ksteps;  /* k8 steps per tap: cp / 8 */
    int nseg;    /* 64-position segments per phase row: ceil(W / 64) */
    int ph[2];   /* phase rows of row phase 0 and 1 */
    int tiles[2];
    int groups0; /* clusters of row phase 0 (then row phase 1) */
    int groups;  /* clusters in the grid */
    int ncw;     /* consumer warpgroups, each taking every ncw-th tile of the CTA's range (CONVFUSE_CT_WGS) */
    /* the chain (stages_host.h) */
    int nstage, softmax_stage, ntables, nops;
    struct cf_ig_stage stage[CF_CHAIN_MAX_OPS + 1];
    struct cf_ig_op op[CF_CHAIN_MAX_OPS];
};

/* Shared memory, in this order: B (1 KB aligned), the ring, staging, softmax exchange, extra-column values, affine
 * tables, mbarriers. */
__host__ __device__ static inline size_t cf_ct_b_bytes(const struct cf_ct_params *p) { return (size_t)8 * p->ksteps * 2048; }
__host__ __device__ static inline size_t cf_ct_slot_bytes(const struct cf_ct_params *p) { return (size_t)(p->cp / 4) * CF_CT_PLANE * 16; }
#define CF_CT_STG_BYTES(ncw) ((size_t)(ncw) * 4 * 8 * CF_CT_STG_LD * 4) /* [consumer warp][8 channels][LD] */
#define CF_CT_XCH_BYTES(ncw) ((size_t)(ncw) * 2 * 129 * 8) /* [warpgroup][slot][2 col. phases x 64 positions + extra] */
#define CF_CT_EXT_BYTES(ncw) ((size_t)(ncw) * 64 * 4)
#define CF_CT_BAR_BYTES (16 * 8) /* full [4], empty [4], exchange [warpgroup][2] */
static inline size_t cf_ct_smem_bytes(const struct cf_ct_params *p)
{
    return 1024 + cf_ct_b_bytes(p) + CF_CT_SLOTS * cf_ct_slot_bytes(p) + CF_CT_STG_BYTES(p->ncw) +
           CF_CT_XCH_BYTES(p->ncw) + CF_CT_EXT_BYTES(p->ncw) + (size_t)p->ntables * 64 * 8 + CF_CT_BAR_BYTES;
}

#endif
