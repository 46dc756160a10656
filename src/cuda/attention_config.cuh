/* attention_config.cuh — tile constants, the shared-memory plan and the barrier plan of the
 * sparse attention kernels (Union8, Union4, per-query). The design is in the comment of attention.cu
 * and bench/NOTES.md for what each choice measured. */
#ifndef PW_ATTENTION_CONFIG_CUH
#define PW_ATTENTION_CONFIG_CUH

#include <cuda.h>
#include <stdint.h>

#include "pageweaver.h"

namespace pw {

constexpr int kHeadDim = 128;        // D
constexpr int kPageSize = 128;       // P, tokens per page
constexpr int kTopK = 16;            // K
constexpr int kHeadsPerKv = 16;      // G
constexpr int kSlotsPerCta = 4;      // query positions per CTA: 4 x 16 heads = 64 rows
constexpr int kRows = kSlotsPerCta * kHeadsPerKv; // 64 = one wgmma M64 tile
constexpr int kGroupSize = 8;        // Union8 group
constexpr int kMaxUnion = kGroupSize * kTopK; // 128 pages at most in one group's union
constexpr int kStages = 2;           // KV double buffer (paper's choice; 3 stages measured slower, bench/NOTES.md)
// One warpgroup does QK, softmax and PV ("the same warps execute QK, softmax, and PV",
// paper Fig. 3); its thread 0 also issues the TMA loads. A separate producer warp was
// tried first: 160 threads at 2 CTAs/SM cap registers at 168 and spill (ptxas -v), while
// 128 threads get 255.
constexpr int kThreads = 128;
constexpr int kTileBytes = kPageSize * kHeadDim; // 16 KiB: one page of K (or V) for one KV head, FP8
constexpr uint32_t kStageTxBytes = 2 * kTileBytes; // K + V of one page

enum Variant { kUnion8 = 0, kUnion4 = 1, kPerQuery = 2 };

/* Implementation bits (pw_union_attention_dev, src/cuda/attention_dev.h); 0 is v4, the
 * library's default. Design and invariants: the comment of attention.cu. */
enum ImplBits {
    kImplDecoupled = 1, // A, Union8 only: per-CTA page streams, TMA only to the CTAs that need a page
    kImplPRegs = 2,     // B: P as the register A operand of the PV wgmma, one barrier before softmax
    kImplX2 = 8,        // with B only: PW_PRECISION_FP8X2 (two-term FP8 Q and P; Q's second
                        // term in the P tile, which B leaves unused)
    kImplIdleVt = 16,   // with B only: the warps without a member on the page transpose V
                        // during the member warps' softmax (dev impl 6)
    kImplVtBatch = 32,  // with kImplIdleVt: that transpose two chunks per pass (dev impl 7)
    kImplNoVMask = 64,  // dev impl 8 only (A/B timing of the cache-poison fix): impl 6 without
                        // zeroing V past the members' last visible token (NOT NaN-safe)
};
constexpr int kImplWarpSpec = 4; // C, Union8 only: warp-specialised CTA (a value, not a bit)
constexpr int kImplPipe = 5;     // removed (measured slower, bench/NOTES.md v6): PW_ERROR_UNSUPPORTED
constexpr int kImplIdleVtDev = 6; // dev impl 6 = kImplPRegs | kImplIdleVt
constexpr int kImplVtBatchDev = 7; // dev impl 7 = kImplPRegs | kImplIdleVt | kImplVtBatch
constexpr int kImplNoVMaskDev = 8; // dev impl 8 = kImplPRegs | kImplIdleVt | kImplNoVMask (before the fix)
constexpr int kImplLeanDev = 9;    // dev impl 9 = "lean" (attention_lean.cuh): three CTAs per SM
constexpr int kImplLeanPreVtDev = 10; // dev impl 10: TIMING ONLY, wrong outputs (attention_lean.cuh, PREVT)
// Internal dispatch values of impls 9 and 10 per precision (dev numbers 9 and 10 would collide
// with the bit sets kImplPRegs | kImplX2 = 10 and friends).
constexpr int kImplLean = 2009, kImplLeanX2 = 3009, kImplLeanPreVt = 2010, kImplLeanPreVtX2 = 3010;
constexpr int kNumImpls = 11;

/* Shared memory of one CTA. Tiles are 1024-byte aligned (128-byte swizzle atoms); the
 * multicast copies land at the same offsets in both CTAs of a cluster. */
struct __align__(1024) SmemPlan {
    uint8_t kv[kStages][2][kTileBytes]; // [stage][K=0 / V=1][token][d], TMA 128B-swizzled
    uint8_t vt[kTileBytes];             // V transposed: [d][position], 128B-swizzled
    uint8_t q[kRows * kHeadDim];        // Q (FP8) [row][d], 128B-swizzled
    uint8_t p[kRows * kPageSize];       // P (FP8, x256) [row][position], 128B-swizzled
    uint64_t full[kStages];             // page landed in this CTA (tx-count barrier)
    uint64_t empty[kStages];            // slot released by every consumer CTA (in CTA 0)
    int32_t page_logical[kMaxUnion];    // the pages this CTA walks, ascending
    int32_t page_physical[kMaxUnion];
    uint8_t page_members[kMaxUnion];    // bit w: this CTA's slot w selected the page
    uint8_t page_vlim[kMaxUnion];       // last token of the page a member slot may see (page_v_limit)
    float row_factor[kRows];            // q_scale * k_scale * softmax_scale * log2(e)
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
    // Decoupled Union8 only (kImplDecoupled); after the v4 fields so that their offsets stay.
    uint64_t empty_cta[kStages][2];     // slot of stage s released by CTA c (in CTA 0; count 1)
    uint8_t page_dest[kMaxUnion];       // D_i: bit c set when one of CTA c's 4 slots selected page i
};

constexpr size_t kSmemBytes = sizeof(SmemPlan) + 1024; // + alignment slack of the dynamic base
static_assert(kSmemBytes <= 227 * 1024, "shared-memory plan exceeds the sm_90 limit");
static_assert(2 * kSmemBytes <= 228 * 1024, "two CTAs per SM no longer fit");

/* C (impl 4, Union8 only): one CTA of kThreadsC per (8-slot group, KV head). Warpgroup 0
 * is the producer (TMA, V transpose), warpgroups 1 and 2 are the consumers of slots 0-3 and
 * 4-7. setmaxnreg moves registers from the producer to the consumers: the launch gives
 * 65536 / 384 -> 168 per thread, the producer drops to kRegsProducerC and the consumers
 * rise to kRegsConsumerC (ptxas -v, sm_90a: consumer path R0-R173, producer within 72, no
 * spills). 3 stages of K + V + V^T (48 KiB each) + 2 Q tiles + lists: 162 KiB (+ 1 KiB
 * alignment slack), 1 CTA per SM. */
constexpr int kThreadsC = 384;
constexpr int kStagesC = 3;
constexpr int kRegsProducerC = 72;
constexpr int kRegsConsumerC = 216;
constexpr int kRegsLaunchC = 65536 / kThreadsC / 8 * 8; // 168: what __launch_bounds__(384, 1) gives (ptxas -v)
// setmaxnreg moves registers within the CTA's launch allocation (384 x 168 = 64,512): the
// consumers' .inc waits until the producer's .dec returned enough of it.
static_assert(128 * kRegsProducerC + 256 * kRegsConsumerC <= kThreadsC * kRegsLaunchC,
              "C: register split exceeds the CTA's launch allocation");
static_assert(kRegsProducerC % 8 == 0 && kRegsConsumerC % 8 == 0, "setmaxnreg counts are multiples of 8");

// C's named barriers (bar.sync id, 128 threads); id 0 is __syncthreads, used only before
// the role split.
enum NamedBarrierC : uint32_t {
    kBarProducerC = 1,  // the producer warpgroup: V^T of a stage written
    kBarConsumerC0 = 2, // + c: consumer warpgroup c (Q written; a stage's wgmma reads done)
};

struct __align__(1024) SmemPlanC {
    uint8_t kv[kStagesC][2][kTileBytes]; // [stage][K=0 / V=1][token][d], TMA 128B-swizzled
    uint8_t vt[kStagesC][kTileBytes];    // V^T of the stage's page: [d][position], 128B-swizzled
    uint8_t q[2][kRows * kHeadDim];      // Q (FP8) of consumer c: [row][d], 128B-swizzled
    uint64_t full[kStagesC];             // K and V of the stage's page landed (tx-count, count 1)
    uint64_t vtready[kStagesC];          // V^T written by the producer warpgroup (count 1)
    uint64_t empty[kStagesC];            // both consumer warpgroups done with the stage (count 2)
    int32_t page_logical[kMaxUnion];     // the group's union pages, ascending
    int32_t page_physical[kMaxUnion];
    uint8_t page_members[kMaxUnion];     // bit w: slot w (0..7) selected the page
    uint8_t page_vlim[kMaxUnion];        // last token of the page a member slot (0..7) may see
    float row_factor[2][kRows];          // per consumer: q_scale * k_scale * softmax_scale * log2(e)
    int32_t warp_count[kMaxUnion / 32];
    int32_t num_pages;
};
constexpr size_t kSmemBytesC = sizeof(SmemPlanC) + 1024;
static_assert(kSmemBytesC <= 227 * 1024, "C: shared-memory plan exceeds the sm_90 limit");

/* Kernel parameters (by value; the tensor maps must stay in parameter space). */
struct AttentionParams {
    CUtensorMap k_map;               // k_cache as [pages][P][Hkv][D] e4m3, box [1][128][1][128]
    CUtensorMap v_map;               // v_cache, same
    const uint16_t *q;               // [N, Hq, D] bf16, row stride q_stride elements
    int64_t q_stride;
    uint16_t *o;                     // [N, Hq, D] bf16, row stride o_stride elements
    int64_t o_stride;
    float *lse;                      // [N, Hq] or NULL
    const float *k_scale;            // device scalar
    const float *v_scale;            // device scalar
    const int32_t *topk_ids;         // [Hkv, N, K] (per-query variant)
    const int32_t *cu_seqlens_q;     // [R+1]
    const int32_t *prefix_lens;      // [R]
    const int32_t *kv_lens;          // [R]
    const int32_t *page_table;       // [R, page_table_stride]
    int64_t page_table_stride;
    const int32_t *perm;             // [Hkv, N] (union variants)
    const int32_t *num_groups;       // [Hkv]
    const pw_group_desc_t *groups;   // [Hkv, max_groups]
    const int32_t *union_pages;      // [Hkv, max_groups, union_capacity]
    const uint8_t *member_masks;     // [Hkv, max_groups, union_capacity]
    int64_t max_groups;
    int32_t union_capacity;
    int32_t num_tokens;              // N
    int32_t num_requests;            // R
    int32_t num_kv_heads;            // Hkv
    int64_t num_cache_pages;
    float softmax_scale;
    uint32_t *bad_page_count;        // device counter or NULL
    // Lean kernel with the V^T pre-pass (vt_prepare.cu): V^T tiles [Hkv, R, vt_pages] of
    // kTileBytes each, in the kernel's shared-memory byte order; NULL for every other kernel.
    const uint8_t *vt_tiles;
    int64_t vt_pages;                // max_pages_per_request: pages of a request's tile row
};

} // namespace pw

#endif
