/* Fused implicit-GEMM convolution + chain epilogue on tensor cores (mma.sync m16n8k8 TF32).
 *
 * One kernel body serves conv2d and conv_transpose2d. A transposed convolution with stride s splits into
 * s_h*s_w "phases" (output rows oh = qh + s_h*j, columns ow = qw + s_w*i); inside a phase every output
 * pixel uses the same taps, and input row ih = j + c_h[tap] (a plain shifted convolution). conv2d is the
 * single phase with ih = stride_h*j + c_h[tap]. So for every phase:
 *     GEMM  M = N*PH*PW pixels,  N = C_out,  K = taps * C_in,
 *     A[m][(tap,ci)] = src[n, ci, a_h*j + c_h[tap], a_w*i + c_w[tap]]  (0 outside the image),
 *     B[(tap,ci)][co] = wei[.., kh(tap), kw(tap)].
 *
 * Work split: a persistent grid; each CTA takes a contiguous range of 256-pixel tiles (tiles are ordered
 * phase by phase) and keeps its phase's whole B in shared memory when it fits ("resident"), otherwise
 * streams B in K blocks. 8 warps; a warp owns 32 pixels x one chunk of 8*NT channels, so a channel softmax
 * over a chunk needs only quad shuffles.
 *
 * Preconditions (checked by the host before launch, see igemm.cu):
 *   - channel softmax: when C_out > 8*NT the channel chunks are visited twice per tile (online max/sum,
 *     then recompute and write): no intermediate in device memory;
 *   - per image, C_in*H*W and C_out*OH*OW < 2^31 elements (batch offsets are 64-bit);
 *   - at most CF_IG_MAX_PHASES phases and CF_IG_MAX_TAPS taps per phase.
 */
#ifndef CONVFUSE_CUDA_IGEMM_CUH
#define CONVFUSE_CUDA_IGEMM_CUH

#include "convfuse.h"

#include <cuda.h> /* CUtensorMap */

#define CF_IG_WARPS 8
#define CF_IG_THREADS (CF_IG_WARPS * 32)
#define CF_IG_TILE_M (CF_IG_WARPS * 32) /* pixels per tile: 32 per warp (mma.sync) or 16 per warp (wgmma) */
#define CF_IG_MAX_WARPS 16             /* sizes the per-warp shared arrays */
#define CF_IG_WGS 4                    /* wgmma variant: warpgroups per CTA. 3 (384 threads, 168 registers, no spills)
                                          measured slower than 4 (128 registers): KB2-91 2.24 vs 1.77 ms */
#define CF_IG_WG_TILE_M (CF_IG_WGS * 64) /* wgmma variant: pixels per tile, 64 per warpgroup */
#define CF_IG_STAGE_LD 32              /* staging row stride; rows are rotated (ig_stg_idx) so that both the fragment
                                          writes and the row reads are free of bank conflicts */
#define CF_IG_SPLIT_LD 36 /* split mode: staging row stride (float2 fragment writes and row reads conflict-free) */
/* split mode: the softmax (max, sum) exchange, float2 [2 slots][warpgroup][column phase][64 pixel pairs] */
#define CF_IG_XCH_FLOAT2 (2 * CF_IG_WGS * 2 * 64)
#define CF_IG_MAX_PHASES 64
#define CF_IG_MAX_TAPS 128
#define CF_IG_A_STAGES 4 /* cp.async pipeline depth of the A fragments */

/* Epilogue stages. Consecutive per-channel affine ops (conv bias, add_channel, mul/add_scalar,
 * affine_channel, batch_norm) are folded into one AFFINE stage, x*a[c] + b[c], at CTA start in double. */
enum cf_ig_stage_kind {
    CF_IG_AFFINE = 0,
    CF_IG_AFFINE_SIGMOID, /* sigmoid(x*a + b) with the table prescaled by -log2(e): 1 FFMA + EX2 + ADD + RCP */
    CF_IG_SOFTMAX,
    CF_IG_SIGMOID,
    CF_IG_RELU,
    CF_IG_TANH,
    CF_IG_GELU,
};

/* One chain op as the device sees it. batch_norm in training mode, applied after the statistics pass,
 * reads its folded scale/shift from the workspace (bn_folded = 1, a = scale, b = shift). */
struct cf_ig_op {
    int kind;      /* cf_op_kind_t */
    int bn_folded; /* batch_norm: a/b already hold scale/shift (training, from the statistics pass) */
    double scalar; /* mul/add_scalar */
    double eps;    /* batch_norm inference */
    const float *a, *b, *rm, *rv;
};

struct cf_ig_stage {
    int kind;               /* cf_ig_stage_kind */
    int op_begin, op_end;   /* AFFINE: ops folded, [op_begin, op_end) */
    int with_bias;          /* AFFINE: the conv bias is folded in first */
    int table;              /* AFFINE: index of its per-channel (a, b) table in shared memory */
};

struct cf_ig_params {
    /* patch stages by TMA (pk_tma): the input as a 4-D tensor {W, C, H, N} (fastest first), box {pk_ld, 8,
     * pk_rows, 1} from x = -pk_gap, so the out-of-bounds fill writes the zero column halo (see ig_patch_feed) */
    CUtensorMap tmap; /* carries its own 128-byte alignment */
    /* TMA store (tma_store): the output as a 3-D tensor {OH*OW, C_out, N}, box {32 pixels, 8*NT channels, 1},
     * 128-byte swizzle. Single-phase patch tiles are runs of consecutive pixels of one image, so a warpgroup's 64
     * pixels x its channel chunk leave as two boxes from shared memory (ig_store_tma). */
    CUtensorMap tmap_out;
    int tma_store;
    int store_parts; /* TMA store: the boxes written and copied out in this many channel slices (1, 2 or 4) */
    const float *src, *wei, *bia;
    float *dst;
    int n, cin, h, w, cout, oh, ow, kh, kw;
    int transposed;
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int sh, sw;             /* phases per dimension (stride for transposed, 1 for conv2d) */
    int cin_pad, kc;        /* C_in rounded up to 8; k8 steps per tap = cin_pad / 8 */
    int nt_total, nchunk;   /* n8 tiles over C_out; channel chunks of 8*NT */
    int resident;           /* whole B of a phase stays in shared memory */
    int wg;                 /* wgmma variant: B in core-matrix layout (twice, big and small, for 3xTF32) */
    int kblk;               /* streaming: k8 steps per B block */
    int b_floats;           /* floats of the B buffer in shared memory */
    int nphase;
    int cluster;            /* CTAs per cluster: the s_w column phases of a row phase work the same tiles in
                               lock-step, so their interleaved columns meet in L2 as full sectors */
    int pw_pairs;           /* cluster mode: columns per phase row in pair space, ceil(OW / s_w) */
    int ngroup;             /* tile groups: phases (cluster 1) or row phases (cluster s_w) */
    int tile_start[CF_IG_MAX_PHASES + 1]; /* prefix sums of 256-pixel tiles per group */
    int num_tiles;
    int tile_interleave;    /* cluster c takes tiles c, c + clusters, ... (else a contiguous range) */
    int nstage, softmax_stage, ntables;
    struct cf_ig_stage stage[CF_CHAIN_MAX_OPS + 1];
    int nops;
    struct cf_ig_op op[CF_CHAIN_MAX_OPS];
    int stats_mode;         /* 1: no store; per-CTA per-channel (count, mean, M2) into stats */
    float *stats;           /* [gridDim.x][cout_pad][3]: count, mean, M2 */
    const int *skip_if;     /* statistics pass: nothing to do where this device flag is set (the Gram statistics
                               stand, bn_gram.cuh) */
    int a_floats;           /* shared floats of the A region: the per-thread ring, or the input patches */
    int pace;               /* cluster mode: tiles between the pair's pacing barriers */
    /* Input patch (wgmma only, see ig_patch_feed): each warpgroup copies the input rows its 64 pixels read,
     * 8 channels per stage, with 16-byte cp.async into a ring of pk_stages buffers; every tap is then an
     * address offset into it. Tiles do not cross images (tiles per image = ceil(PH*PW / 256)). */
    int patch;
    int pk_ld;              /* floats per patch row: W + pk_gap, = 4 or 12 mod 16 (conflict-free A reads) */
    int pk_gap;             /* zero columns between rows (the column halo of the taps) */
    int pk_stage;           /* floats per stage buffer */
    int pk_stages;          /* ring slots: 1 (8 channels per stage) or 2 (4 channels per stage) */
    int pk_cps, pk_kc;      /* channels per stage (8 or 4) and stages per tile, ceil(C_in / pk_cps) */
    int pk_vec;             /* cp.async copies of pk_vec floats (4, or 2 or 1 where W is not a multiple of 4) */
    int pk_drr, pk_dch;     /* a warpgroup's 128 copies span pk_drr rows and pk_dch chunks of W/pk_vec */
    int pk_rows;            /* patch rows (R) per stage buffer: the most any tile needs */
    int pk_tma;             /* stages arrive by one TMA box load each (else 16-byte cp.async by all 128 threads) */
    int pk_prefetch;        /* TMA, one slot: the next tile's first stage is issued before this tile's epilogue */
    /* Split mode (stride-2 column phases, C_out in two chunks of 64): the cluster's two CTAs split the channels
     * instead of the column phases. Each computes both column phases of the same pixel pairs for its 64 channels,
     * the pair exchanges each pixel's softmax (max, sum) through distributed shared memory, and each CTA writes
     * whole output rows of its channels (a column-phase CTA wrote every other column: half-filled sectors). */
    int split;
};

/* k8 steps per input-patch stage: one per tap with 8 channels per stage, one per pair of taps with 4 (ig_patch_feed) */
__host__ __device__ static inline int cf_ig_patch_steps(int cps, int ntaps)
{
    return cps == 8 ? ntaps : (ntaps + 1) / 2;
}

/* Floats of the per-thread A ring (the gathering main loops). */
#define CF_IG_RING_FLOATS (CF_IG_A_STAGES * 8 * CF_IG_THREADS)

/* Shared-memory bytes the kernel needs for these parameters. */
static inline size_t cf_ig_smem_bytes(const struct cf_ig_params *p, int nt)
{
    size_t bytes = 1024 + (size_t)p->b_floats * 4;            /* B fragments, 1 KB-aligned */
    bytes += (size_t)p->a_floats * 4;                         /* A: per-thread ring or input patches */
    bytes += (size_t)p->ntables * p->nt_total * 8 * 8;        /* affine tables, float2 per channel */
    bytes += (size_t)5 * CF_IG_MAX_TAPS * 4;                  /* tap tables */
    bytes += (size_t)CF_IG_MAX_WARPS * 8 * (p->split ? CF_IG_SPLIT_LD : CF_IG_STAGE_LD) * 4; /* per-warp store staging:
                                                                                  8 channels x 32 pixels */
    if (p->split)
        bytes += (size_t)CF_IG_XCH_FLOAT2 * 8; /* softmax exchange */
    if (p->tma_store) /* 2 boxes per warpgroup of 8*NT rows x 128 bytes, 1 KB-aligned (swizzle atoms) */
        bytes += 1024 + (size_t)CF_IG_WGS * 2 * nt * 8 * 128;
    if (p->stats_mode) {
        bytes += (size_t)CF_IG_MAX_WARPS * p->nt_total * 8 * 2 * 4 + CF_IG_MAX_WARPS * 4; /* per-warp running stats */
    }
    return bytes;
}

#endif
