/* attention_config.cuh — tile constants, the shared-memory plan and the barrier plan of the
 * sparse attention kernels (Union8, Union4, per-query). The design is in the comment of attention.cu
 * and bench/NOTES.md for what each choice measured. */
#ifndef PW_ATTENTION_CONFIG_CUH
#define PW_ATTENTION_CONFIG_CUH

#include <cuda.h>
#include <stdint.h>

#include "pageweaver.h"
#include "pw_internal.h" /* PW_SCHED_CLASSES, PW_VT_TILE_BYTES */

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
// One V^T tile of the pre-pass (vt_prepare.cu): 32 KiB, holding the page's V^T in E4M3 (the
// first 16 KiB: FP8, and FP8X2 with per-token scales) or in f16 (FP8X2 without per-token
// scales: P in f16 times V in f16, docs/semantics.md §4.5).
constexpr int kVtTileBytes = PW_VT_TILE_BYTES; // the plan's tile stride (pw_internal.h)
static_assert(kVtTileBytes == 2 * kTileBytes, "an f16 V^T tile is two E4M3 tiles' bytes");
constexpr uint32_t kStageTxBytes = 2 * kTileBytes; // K + V of one page

enum Variant { kUnion8 = 0, kUnion4 = 1, kPerQuery = 2 };

/* Implementation bits (pw_union_attention_dev, src/cuda/attention_dev.h). Design and
 * invariants: the comment of attention.cu; what each measured: bench/NOTES.md. */
enum ImplBits {
    kImplPRegs = 2,     // B: P as the register A operand of the PV wgmma, one barrier before softmax
    kImplX2 = 8,        // with B only: PW_PRECISION_FP8X2 (two-term FP8 Q and P; Q's second
                        // term in the P tile, which B leaves unused)
    kImplIdleVt = 16,   // with B only: the warps without a member on the page transpose V
                        // during the member warps' softmax (dev impl 6)
    kImplNoVMask = 64,  // dev impl 8 only (A/B timing of the cache-poison fix): impl 6 without
                        // zeroing V past the members' last visible token (NOT NaN-safe)
};
// Dev impls 1, 3 (A: decoupled cluster; A + B), 4 (C: warp-specialised Union8), 5 (B +
// pipelined QK) and 7 (impl 6 with a batched transpose) measured slower or no faster
// (bench/NOTES.md v5, v6) and left the tree: PW_ERROR_UNSUPPORTED.
constexpr int kImplIdleVtDev = 6; // dev impl 6 = kImplPRegs | kImplIdleVt
constexpr int kImplNoVMaskDev = 8; // dev impl 8 = kImplPRegs | kImplIdleVt | kImplNoVMask (before the fix)
constexpr int kImplLeanDev = 9;    // dev impl 9 = "lean" (attention_lean.cuh): three CTAs per SM
constexpr int kImplLeanPreVtDev = 10; // dev impl 10 = lean on the V^T pre-pass (attention_lean.cuh, PREVT)
// Internal dispatch values of impls 9 and 10 per precision (dev numbers 9 and 10 would collide
// with the bit sets kImplPRegs | kImplX2 = 10 and friends).
constexpr int kImplLean = 2009, kImplLeanX2 = 3009, kImplLeanPreVt = 2010, kImplLeanPreVtX2 = 3010;
// Dev impl 11 (stacked FP8X2, two 2-slot tiles per Union4 CTA) was never the fastest (slower
// than impl 12 on the hot workloads, than impl 10 on the captures: bench/NOTES.md v9) and
// left the tree: PW_ERROR_UNSUPPORTED.
constexpr int kImplStack1Dev = 12;       // dev impl 12 = stacked FP8X2, one 2-slot tile per CTA (attention_stacked.cuh)
constexpr int kImplStack1PreVtX2 = 3012;  // its dispatch value (FP8X2)
constexpr int kImplStack1PreVtFp8 = 2012; // in PW_PRECISION_FP8: the second term's rows 0 (FP8's bytes, 34th session)
constexpr bool impl_is_stacked(int impl) { return impl == kImplStack1PreVtX2 || impl == kImplStack1PreVtFp8; }
constexpr int kImplDense8Dev = 13;        // dev impl 13 = G = 8 on a dense tile (attention_dense.cuh)
constexpr int kImplDense8 = 2013, kImplDense8X2 = 3013; // its dispatch values per precision
constexpr int kImplDense4Dev = 14;        // dev impl 14 = G = 4 on a dense tile (attention_dense.cuh)
constexpr int kImplDense4 = 2014, kImplDense4X2 = 3014; // its dispatch values per precision
constexpr int kNumImpls = 15;

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
};

constexpr size_t kSmemBytes = sizeof(SmemPlan) + 1024; // + alignment slack of the dynamic base
static_assert(kSmemBytes <= 227 * 1024, "shared-memory plan exceeds the sm_90 limit");
static_assert(2 * kSmemBytes <= 228 * 1024, "two CTAs per SM no longer fit");

/* Kernel parameters (by value; the tensor maps must stay in parameter space). */
struct AttentionParams {
    CUtensorMap k_map;               // k_cache as [pages][P][Hkv][D] e4m3, box [1][P][1][128]
    CUtensorMap v_map;               // v_cache, same
    CUtensorMap ts_map;              // the stacked tile with per-token scales: the scales behind each
                                     // pre-pass tile as [tiles][4][128] floats, box [1][4][128]
                                     // (vt_prepare.cu); a tensor copy, so that compute-sanitizer's
                                     // racecheck sees no thread write them (bench/NOTES.md, 29th session)
    const uint16_t *q;               // [N, Hq, D] bf16, row stride q_stride elements
    int64_t q_stride;
    uint16_t *o;                     // [N, Hq, D] bf16, row stride o_stride elements
    int64_t o_stride;
    float *lse;                      // [N, Hq] or NULL
    const float *k_scale;            // device scalar
    const float *v_scale;            // device scalar
    const float *sink_logits;        // [Hq] attention sinks (natural log) or NULL
    const uint16_t *sink_keys;       // [Hq, D] bf16 sink keys or NULL (not with sink_logits)
    // Per-token scales (args.token_scales; lean kernels only, TS): the scale of KV head h,
    // cache slot s at [h * ts_stride_h + s * ts_stride_t]; a NULL side is all 1.
    const float *ts_k;
    const float *ts_v;
    int64_t ts_stride_h;
    int64_t ts_stride_t;
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
    int64_t max_pages;               // max_pages_per_request: pages of a page-table row (larger
                                     // ids are bad pages) and of a request's V^T tile row
    // Lean kernel with the V^T pre-pass (vt_prepare.cu): V^T tiles [Hkv, vt_capacity] of
    // kVtTileBytes each, in the kernel's shared-memory byte order (E4M3 or f16: kVtTileBytes); vt_slots [Hkv, R, max_pages]
    // (vt_entry) holds the tile of each page the pre-pass marked this call (vt_touched; the
    // other entries may hold anything); vt_count [Hkv] the
    // pages each KV head touched. A KV head with vt_count > vt_capacity has no tiles: its
    // CTAs of the pre-pass kernel exit and the kernel that transposes V itself runs them,
    // launched after it with vt_fallback = true (whose CTAs of the other heads exit).
    // All NULL / 0 for every other launch.
    const uint8_t *vt_tiles;
    const uint8_t *vt_touched;       // the pre-pass's marks (NULL: every visible page has a tile)
    const int32_t *vt_slots;
    const uint32_t *vt_count;
    int64_t vt_capacity;
    bool vt_fallback;
    int32_t heads_per_kv;            // G: 16, or 8 / 4 on the lean kernels' padded tile (lean_attention_kernel<..., G>)
    // Longest-first order of the Union4 lean (PREVT) and dense kernels' CTAs (pw_vt_buffers_t,
    // filled by union preparation; bench/NOTES.md "Longest first"): CTA b runs the b-th item
    // of the class lists, largest class first (scheduled_block). NULL: block order.
    const uint32_t *sched_count;     // [kSchedClasses]
    const int32_t *sched_list;       // [kSchedClasses, sched_stride]
    int64_t sched_stride;
    int32_t group_window;            // the union groups' window W (0: runs of 8 from each request start)
    int32_t topk;                    // the device's K: 16, or 32 / 64 on the lean kernels (lean_attention_kernel<..., TOPK>)
    int32_t page_size;               // P: 128, or 64 on the lean kernels (lean_attention_kernel<..., PAGE>; host dispatch only)
    // FP8X2 on the tiles at G = 16, 8 or 4, K = 16, P = 128 (pw_vt_buffers_t.stack_mode): with
    // PER_CALL two kernels are launched, the lean kernel (G = 16) or the dense G = 8 / 4 tile and
    // the stacked tile, and the CTAs of the one this call does not run exit at once
    // (stacked_call). NEVER (0): the launch runs as it is (every other launch, and the dev
    // entry's).
    int32_t stack_mode;              // PW_STACK_NEVER / PW_STACK_PER_CALL / PW_STACK_ALWAYS
    unsigned long long *stack_stat;  // [0], [1]: the pre-pass's counts (PER_CALL; vt_prepare.cu),
                                          // [2]: the stacked tile's work counter (PER_CALL, ALWAYS)
    int64_t stack_items;             // the stacked tile's persistent launch: its items (G = 16:
                                     // 2 per Union4 half of the grid; G = 8: 1); 0: one item per CTA
};

constexpr int kSchedClasses = PW_SCHED_CLASSES;

/* A schedule's buffers (pw_vt_buffers_t's, or the dev entry's); kind: its items, as
 * pw_vt_buffers_t's sched_dense (0 halves, 1 groups, 2 pairs of groups). */
struct DevSchedule {
    const uint32_t *count;
    const int32_t *list;
    int64_t stride;
    int kind;
};

/* The work item (block index in the grid's own numbering) CTA b (blockIdx.x) runs under the
 * schedule, -1 past the listed items (the CTA has nothing to do). The class counts are
 * loaded together (one round trip), then one load of the list entry. (The stacked tile has
 * its own form with the counts in shared memory: stack_item_block.) */
static __device__ __forceinline__ int64_t scheduled_block(const AttentionParams &p, int64_t b = blockIdx.x)
{
    uint32_t count[kSchedClasses];
#pragma unroll
    for (int c = 0; c < kSchedClasses; c++) count[c] = __ldg(p.sched_count + c);
    int64_t at = -1;
#pragma unroll
    for (int c = kSchedClasses - 1; c >= 0; c--) {
        if (at < 0 && b < (int64_t)count[c]) at = (int64_t)c * p.sched_stride + b;
        b -= count[c];
    }
    return at < 0 ? -1 : __ldg(p.sched_list + at);
}

/* Index of (KV head h, request r, logical page l) in the pre-pass's per-page arrays
 * ([Hkv, R, max_pages]: the pre-pass's `touched` bytes and the tile index vt_slots). */
static __host__ __device__ __forceinline__ int64_t vt_entry(int64_t h, int64_t r, int64_t l, int64_t num_requests,
                                                            int64_t max_pages)
{
    return (h * num_requests + r) * max_pages + l;
}

/* Whether a call runs the stacked FP8X2 tile: the plan's forced mode, or PW_STACK_CHOSEN on
 * the pre-pass's counts (read after the mark launch: by the transpose and the attention
 * kernels, the same answer in every CTA of every launch of the call). */
static __device__ __forceinline__ bool stack_runs(int mode, const unsigned long long *stat, int heads_per_kv)
{
    if (mode == PW_STACK_ALWAYS) return true;
    return mode == PW_STACK_PER_CALL && PW_STACK_CHOSEN(heads_per_kv, __ldg(stat), __ldg(stat + 1));
}

static __device__ __forceinline__ bool stacked_call(const AttentionParams &p)
{
    return stack_runs(p.stack_mode, p.stack_stat, p.heads_per_kv);
}

/* Whether this launch skips KV head h: the pre-pass kernel skips heads whose pages did not
 * fit the tiles, the fallback launch every other head (no pre-pass: never). */
static __device__ __forceinline__ bool vt_skips_head(const AttentionParams &p, int h)
{
    return p.vt_count != nullptr && ((int64_t)p.vt_count[h] > p.vt_capacity) != p.vt_fallback;
}

} // namespace pw

#endif
