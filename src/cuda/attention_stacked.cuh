/* attention_stacked.cuh — dev impl 12, "stacked FP8X2" (bench/NOTES.md v9): Union4 on the
 * V^T pre-pass in PW_PRECISION_FP8X2, with each term pair stacked in the rows of one tile and
 * one 2-slot tile per CTA at a time; since the twenty-first session also the full call's
 * second FP8X2 tile, chosen per call on the device (pw_vt_buffers_t.stack_mode), where it
 * runs persistent (below). G = 8 (27th session): the same tile holds a whole Union4 half,
 * 4 slots x 8 heads x two terms (warp w = slot w, rows 16 w + h and 16 w + 8 + h), one item
 * per half, walking the half's union: the full call's other FP8X2 tile beside the dense
 * G = 8 tile (H200 A-hot full call 0.64 ms against the dense tile's 0.75). Included by attention.cu (it uses that file's cta_work and
 * build_page_list and the lean kernel's release protocol, attention_lean.cuh).
 *
 * Why: the lean kernel (impl 10) runs FP8X2 as two products per page: Q's two terms
 * (64 rows = 4 queries x 16 heads) times K into one accumulator, then P's two terms times
 * V^T into one accumulator: 4 x 64 x 128 x 128 x 2 FLOP per CTA page, whichever of the
 * 4 queries selected the page (on A-hot W128 ~1.9 of 4 do). Here the 4 slots of a Union4
 * half form two tiles of 2 slots, each in its own CTA, and a tile holds both terms of its
 * 32 (slot, head) rows: row r holds q8 and row r + 8 its second term, which the same thread
 * owns in the wgmma accumulator layout. So one M64 product gives both terms' scores in the
 * thread's two rows; their FP32 sum is the score. P's terms go the same way into the A
 * fragments (row r: p8, row r + 8: its second term), and the PV product's two rows are
 * summed into O. A CTA walks only the pages its 2 slots selected: per half page 1 or 2 tile
 * products instead of always 2 (the same tensor work as impl 10 when both tiles have a
 * member), but each page a tile selected is loaded by that tile's CTA (L2 -> SM bytes:
 * tile steps x 32 KiB instead of C_4 x 32 KiB).
 *
 * Arithmetic: the same Q and P codes as impl 10 (quantize_q_rows<true>, p_pair_lo), the same
 * page order, masks and softmax per row; what differs is where the two terms are added:
 * here the FP32 sum of two tensor-core accumulations, there one accumulation. So the bytes
 * differ from the other FP8X2 kernels (NRMS vs exact is the measure: test_attention_gpu),
 * and each row is still computed alone: bitwise independent of the grouping.
 *
 * Resources: O is 32 registers (one row per thread after the fold), and the kernel fits 128
 * registers at four CTAs per SM. QK and PV each run as one N = 128 product, waited once (64
 * accumulators; 127-128 registers, with the thread index and the grid size re-read where
 * used and the next item's index kept in shared memory: held in registers they went to local
 * memory; the per-token-scale instances form their member masks and their slot's limit
 * address from a thread index re-read per page for the same reason). No raw V tile (the
 * pre-pass's V^T only) and one Q tile: ~47 KiB of shared memory (the per-token scales' two
 * 2 KiB buffers included in every instance).
 * Synchronisation: as impl 10 (attention_lean.cuh L1-L5): every warp arrives on k_done once
 * per page, after its QK's wait; on v_done once, after its PV's wait.
 *  L6 (TS scale buffers, WAR) page i's K / V scales land in ts[i % 2] with K(i) (k_full). The
 *     copy of page i + 1 is issued by the last warp to arrive on k_done after page i's QK
 *     wait; each warp read page i - 1's scales (ts[(i + 1) % 2]) in page i - 1's softmax,
 *     before that arrival in program order, and the arrival (lean_release) is a release that
 *     the issuer's block fence and proxy fence complete, as L1 for the K tile. So the
 *     buffers need no release of their own (the 34th session's mbarrier ts_empty went in
 *     the 37th: 2-5% faster with per-token scales; the scales test clean under racecheck /
 *     synccheck, bench/NOTES.md).
 * Items: the dev entry runs one tile per CTA (CTA pair b = half b); the full call launches at
 * most 4 CTAs per SM that take items (tiles) from a work counter (stack_stat[2], cleared by
 * the pre-pass's memset), thread 0 taking the next item's index at the start of an item
 * (its round trip overlaps the item's schedule lookup; kept in shared memory, not in a
 * register across the page loop); a static stride instead measured 2.7% slower on A-hot
 * (load imbalance). Across items a CTA keeps its
 * barriers: k_full / v_full complete one phase per page, so a page's parity counts from the
 * pages of earlier items (sm.base), and k_done / v_done stay multiples of 4 between items;
 * two CTA barriers at the top of each item order the previous item's readers of the shared
 * state (page list, slots, Q tile) before the new item's writers, and the first copy of an
 * item is fenced after the previous item's generic writes (the V^T zeroing).
 * Dev impl 11 (both tiles in one CTA, three CTAs per SM) was never the fastest (slower than
 * this kernel on the hot workloads, than impl 10 on the captures) and left the tree
 * (bench/NOTES.md v9). */
#ifndef PW_ATTENTION_STACKED_CUH
#define PW_ATTENTION_STACKED_CUH

namespace pw {

/* The softmax of one page for this thread's one row (32 scores s[2b + e] at columns
 * 8b + 2q + e): softmax_page's arithmetic for a single row. */
static __device__ __forceinline__ void softmax_row32(float (&s)[32], int64_t lim, uint32_t q, float f, float &m,
                                                     float &l, float &alpha)
{
    float g = f;
    if (!(f > 0.0f)) { // scaled before the mask (-inf x f would be +inf or NaN)
#pragma unroll
        for (int k = 0; k < 32; k++) s[k] *= f;
        g = 1.0f;
    }
    if (lim < kPageSize - 1) {
#pragma unroll
        for (int k = 0; k < 32; k++) {
            const int col = 8 * (k / 2) + 2 * q + (k % 2);
            s[k] = col <= lim ? s[k] : -INFINITY;
        }
    }
    float t[4];
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float a = fmaxf(s[2 * j], s[2 * j + 1]);
        t[j % 4] = j < 4 ? a : fmaxf(t[j % 4], a);
    }
    float mx = fmaxf(fmaxf(t[0], t[2]), fmaxf(t[1], t[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx * g);
    alpha = ex2_approx(m - mn);
    m = mn;
    const float c = 8.0f - mn;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; k++) {
        const float pk = ex2_approx(fmaf(s[k], g, c));
        s[k] = pk; // 256 * p
        sum += pk;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = fmaf(l, alpha, sum);
}

/* A fragments of the stacked PV product from one row's 256 p: word 2a (row r) = p8 of
 * positions 16a + 4q .. +3 (p_words' element order), word 2a + 1 (row r + 8) = their
 * second terms (p_pair_lo); !kX2 (PW_PRECISION_FP8 on the stacked tile): 0, so row r + 8
 * of the PV product adds exactly 0. */
template <bool kX2 = true>
static __device__ __forceinline__ void stacked_p_fragments(const float (&s)[32], uint32_t (&pa)[16])
{
#pragma unroll
    for (int a = 0; a < 8; a++) {
        const uint16_t c0 = cvt_e4m3x2_rn_satfinite(s[4 * a], s[4 * a + 1]);
        const uint16_t c1 = cvt_e4m3x2_rn_satfinite(s[4 * a + 2], s[4 * a + 3]);
        pa[2 * a] = (uint32_t)c0 | ((uint32_t)c1 << 16);
        if constexpr (kX2)
            pa[2 * a + 1] = (uint32_t)p_pair_lo(s[4 * a], s[4 * a + 1], c0) |
                            ((uint32_t)p_pair_lo(s[4 * a + 2], s[4 * a + 3], c1) << 16);
        else
            pa[2 * a + 1] = 0u;
    }
}

/* QK of one page into this thread's 32 scores s[2b + e] (columns 8b + 2q + e): row r (q8 x
 * K) plus row r + 8 (its second term x K), summed in FP32. One N = 128 product waited once
 * (64 accumulators), in every instance: each wait is a round trip on the CTA's chain (H200,
 * A-hot and C-hot: one product instead of two N = 64 halves each waited, -0.3..-3.0% on the
 * call at G = 16, -1.5..-4.6% at G = 8 / 4 without per-token scales, -2.3..-4.5% with them;
 * four N = 32 quarters instead of halves, +9..14%: bench/NOTES.md, 32nd and 33rd sessions). */
static __device__ __forceinline__ void stacked_qk(float (&s)[32], uint64_t desc_q, uint64_t desc_k)
{
    float acc[64];
    qk_issue<false>(acc, desc_q, 0, desc_k); // the lean kernel's N = 128 QK (one Q tile: the terms are rows)
    wgmma_wait_group<0>();
    wgmma_fence_operand(acc);
#pragma unroll
    for (int b = 0; b < 16; b++) { // row r (q8 x K) + row r + 8 (second term x K)
        s[2 * b] = acc[4 * b] + acc[4 * b + 2];
        s[2 * b + 1] = acc[4 * b + 1] + acc[4 * b + 3];
    }
}

/* The page's PV product (P's two terms in rows r / r + 8 of the A fragments pa, V^T at
 * desc_vt) into fresh accumulators, one N = 128 product waited once, its two rows summed into
 * O: o = o alpha + (pv_r + pv_r+8) (x pv_factor when kTs and it is not 1: the per-token
 * scales' O unit), member rows only. */
template <bool kTs>
static __device__ __forceinline__ void stacked_pv_add(float (&o)[32], const uint32_t (&pa)[16], uint64_t desc_vt,
                                                      float alpha, float pv_factor, bool member)
{
    float pv[64];
    const uint32_t none[1] = {0u};
    pv_part<false, kPageSize>(pv, pa, none, desc_vt);
    if (member) {
        if (!kTs || pv_factor == 1.0f) {
#pragma unroll
            for (int b = 0; b < 16; b++) {
                o[2 * b] = fmaf(o[2 * b], alpha, pv[4 * b] + pv[4 * b + 2]);
                o[2 * b + 1] = fmaf(o[2 * b + 1], alpha, pv[4 * b + 1] + pv[4 * b + 3]);
            }
        } else {
#pragma unroll
            for (int b = 0; b < 16; b++) {
                o[2 * b] = fmaf(o[2 * b], alpha, __fmul_rn(pv[4 * b] + pv[4 * b + 2], pv_factor));
                o[2 * b + 1] = fmaf(o[2 * b + 1], alpha, __fmul_rn(pv[4 * b + 1] + pv[4 * b + 3], pv_factor));
            }
        }
    }
}

/* Per-token scales (args.token_scales; docs/semantics.md §4.5) on the stacked tile. Each
 * page's scales come from the second half of its pre-pass tile (vt_prepare.cu), copied with
 * its K by a tensor copy (p.ts_map): ks[128], vs[128] (raw, NaN possible where no row may
 * look), pmax[128], pmax[t] = the largest |vs_u| over u <= t (0 if none is finite), so that
 * a row whose visible tokens are 0..lim reads its page's vmax input in one load, and
 * rfull[128] = vs_t / vmax for a row that sees the whole page. One copy for the CTA's slots,
 * whose rows see different tokens: each thread masks by its own row's lim (the selects
 * softmax_row32 and stacked_ts_scale_p make past lim, only on such a page). H200, A-hot
 * FP8X2: 1.15x the call without scales at G = 16 (the lean kernel's per-token-scale form:
 * 1.63x), 1.11x at G = 8 and 4 (the padded tile: 2.2x / 2.9x); bench/NOTES.md, 29th session;
 * 1.13-1.14x at G = 16 on A-hot and C-hot since both products are one each, against
 * 1.17-1.18x before in the same processes (33rd session).
 *
 * The scores times the K scales, s_t x ks_t (rounded; then softmax_row32 takes x = that
 * times f: the folded factors in another order than the emulation's, within its bound;
 * every ks_t = 1 leaves the scores' bits). Past lim the product may be NaN: softmax_row32
 * selects -inf there. */
static __device__ __forceinline__ void stacked_ts_scale_scores(float (&s)[32], uint32_t q, const float *ks)
{
#pragma unroll
    for (int b = 0; b < 16; b++) {
        const float2 k2 = *reinterpret_cast<const float2 *>(ks + 8 * b + 2 * q);
        s[2 * b] = __fmul_rn(s[2 * b], k2.x);
        s[2 * b + 1] = __fmul_rn(s[2 * b + 1], k2.y);
    }
}

/* After softmax_row32 (s = 256 p_t, l summed the unscaled p): s = 256 p_t x (vs_t / vmax),
 * vmax = the smallest power of two >= pmax[lim] (1 if that is not finite and > 0), vs_t /
 * vmax by multiplications only (a subnormal vmax takes vs_t up by 2^64 first: exact), 0 past
 * lim (where vs_t may be NaN). A row that sees the whole page (lim >= 127, most pages) reads
 * vs_t / vmax ready (rfull, the pre-pass's, by the same operations: the same bits). Returns
 * vmax, by which the page's PV sum is multiplied (a power of two: exact). Every scale 1:
 * vmax 1 and s unchanged. */
static __device__ __forceinline__ float stacked_ts_scale_p(float (&s)[32], int64_t lim, uint32_t q, const float *vs,
                                                           const float *pmax, const float *rfull)
{
    if (lim >= kPageSize - 1) {
        const float vabs = pmax[kPageSize - 1];
#pragma unroll
        for (int b = 0; b < 16; b++) {
            const float2 r2 = *reinterpret_cast<const float2 *>(rfull + 8 * b + 2 * q);
            s[2 * b] = __fmul_rn(s[2 * b], r2.x);
            s[2 * b + 1] = __fmul_rn(s[2 * b + 1], r2.y);
        }
        float pre, inv; // (only vmax: the pre-pass applied them)
        return ts_vmax_of(vabs, pre, inv);
    }
    const int lim32 = lim < 0 ? -1 : (int)lim;
    const float vabs = lim32 >= 0 ? pmax[lim32] : 0.0f;
    float pre, inv;
    const float vmax = ts_vmax_of(vabs, pre, inv);
#pragma unroll
    for (int b = 0; b < 16; b++) {
        const float2 v2 = *reinterpret_cast<const float2 *>(vs + 8 * b + 2 * q);
        s[2 * b] = __fmul_rn(s[2 * b], __fmul_rn(__fmul_rn(v2.x, pre), inv));
        s[2 * b + 1] = __fmul_rn(s[2 * b + 1], __fmul_rn(__fmul_rn(v2.y, pre), inv));
    }
#pragma unroll
    for (int k = 0; k < 32; k++) {
        const int col = 8 * (k / 2) + 2 * (int)q + (k % 2);
        s[k] = col <= lim32 ? s[k] : 0.0f;
    }
    return vmax;
}

constexpr int kStack1CtasPerSm = 4;

struct __align__(1024) SmemPlanStack1 {
    uint8_t k[kTileBytes];              // K of the current page [token][d], TMA 128B-swizzled
    uint8_t vt[kTileBytes];             // V^T of the current page (the pre-pass's tile)
    uint8_t q[kRows * kHeadDim];        // the tile: rows 16w + j: q8, 16w + 8 + j: its second term
    uint64_t k_full;
    uint64_t v_full;
    uint32_t k_done;
    uint32_t v_done;
    int32_t page_logical[kMaxUnion];
    int32_t page_physical[kMaxUnion];
    uint8_t page_members[kMaxUnion];    // bits 2t, 2t + 1 (this CTA's tile t)
    uint8_t page_vlim[kMaxUnion];
    int32_t page_vt[kMaxUnion];
    float row_factor[kRows];
    int64_t slot_limit[8];              // the tile's slots: 2 (G = 16), 4 (G = 8) or 8 (G = 4)
    int32_t slot_row[8];
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
    uint32_t base;                      // the persistent loop's pages walked before this item (barrier phases)
    uint32_t item;                      // the persistent loop's current item
    uint32_t next_item;                 // ... and the one after it (thread 0's, from the work counter)
    int32_t block;                      // its Union4 half (CTA-pair index; G = 4: stack_item_block's group code), -1: none
    uint32_t sched_counts[kSchedClasses]; // the longest-first schedule's class sizes (read once)
    // TS: page i's K scales (ts[i % 2][0]), V scales ([1]), their prefix maxima ([2]) and
    // vs / vmax of the whole page ([3]),
    // copied with its K (k_full) from the second half of the page's pre-pass tile; two
    // buffers: page i + 1's copy is issued with K(i + 1), by the last warp to arrive on
    // k_done after page i's QK; each warp read page i - 1's scales (the buffer the copy
    // overwrites) before that arrival, in program order, and the arrival is a release (L6
    // below: no release of its own).
    alignas(128) float ts[2][4][kPageSize];
};
constexpr uint32_t kStackTsBytes = 4 * kPageSize * sizeof(float); // one page's scales (vt_prepare.cu)
constexpr size_t kSmemBytesStack1 = sizeof(SmemPlanStack1) + 1024;

/* The Union4 half (CTA-pair index) that item (a tile) belongs to: scheduled_block's lookup
 * with the class sizes read from shared memory; -1 past the items or the listed ones. G = 16:
 * two items (tiles) per half, the schedule lists halves (the lean kernel's kind); G = 8: one
 * item per half, the schedule lists groups (the dense G = 8 tile's kind: the other kernel of
 * these calls, whose schedule union preparation writes), items 2 j and 2 j + 1 being the
 * halves of the j-th listed group. G = 4: two items per group index (one per CTA pair of the
 * grid), the schedule lists pairs of groups (the dense G = 4 tile's kind: leader groups):
 * item 2 j runs the j-th listed leader, 2 j + 1 its partner, the next group, if it is one
 * (stack4_work); without a schedule item 2 b runs group b and 2 b + 1 nothing. The G = 4
 * result is a code: 2 x (KV head x max_groups + group) + (1: run only if it is a partner),
 * -2 for nothing. One global load (the list entry) when there is a schedule. */
template <int G>
static __device__ __forceinline__ int32_t stack_item_block(const AttentionParams &p, const SmemPlanStack1 &sm,
                                                           uint32_t item, uint32_t num_items)
{
    if (item >= num_items) return -1;
    int64_t b = (int64_t)(item / 2u); // G = 16: the half; G = 8: the group; G = 4: the pair
    if (!p.sched_count) {
        if constexpr (G == 4) return item % 2u ? -2 : (int32_t)(2 * b);
        return G == 16 ? (int32_t)b : (int32_t)item;
    }
    int64_t at = -1;
#pragma unroll
    for (int c = kSchedClasses - 1; c >= 0; c--) {
        const int64_t count = (int64_t)sm.sched_counts[c];
        if (at < 0 && b < count) at = (int64_t)c * p.sched_stride + b;
        b -= count;
    }
    if (at < 0) return -1;
    const int32_t listed = __ldg(p.sched_list + at);
    if constexpr (G == 4) return item % 2u ? 2 * (listed + 1) + 1 : 2 * listed;
    return G == 16 ? listed : 2 * listed + (int32_t)(item % 2u);
}

/* G = 4: the group of stack_item_block's code (dense_group_work, partner_only for an odd
 * code); false when there is nothing to run. */
static __device__ __forceinline__ bool stack4_work(const AttentionParams &p, int32_t code, DenseWork &w)
{
    return dense_group_work(p, code / 2, w, code % 2 != 0);
}
static_assert(kStack1CtasPerSm * (kSmemBytesStack1 + 1024) <= 228 * 1024, "stack1: four CTAs per SM no longer fit");

/* The tiles of one Union4 half: G = 16, two of 2 slots (32 (slot, head) rows each); G = 8,
 * one of its 4 slots; G = 4, one tile holds a whole 8-query group, one item per CTA pair of
 * the grid (stack_item_block). Also the host's items per CTA pair (attention.cu, stack_items). */
constexpr int stack_tiles(int g) { return g == 16 ? 2 : 1; }

/* The Q head and the tile slot of thread tid's accumulator row (rows 16 w + lane / 4 and
 * + 8: one (slot, head) row, two terms). G = 16: the tile's 2 slots, two warps a slot;
 * G = 8: a warp a slot; G = 4: two slots a warp, 2 w (lanes 0-15) and 2 w + 1 (lanes 16-31). */
template <int G>
static __device__ __forceinline__ int stack_thread_head(int tid)
{
    const int warp = tid / 32, lane = tid % 32;
    return G == 16 ? 8 * (warp % 2) + lane / 4 : G == 8 ? lane / 4 : (lane / 4) % 4;
}
template <int G>
static __device__ __forceinline__ int stack_thread_slot(int tid)
{
    const int warp = tid / 32, lane = tid % 32;
    return G == 16 ? warp / 2 : G == 8 ? warp : 2 * warp + lane / 16;
}

template <int VARIANT, int G = kHeadsPerKv, bool TS = false, bool X2 = true>
__global__ void __launch_bounds__(kThreads, kStack1CtasPerSm)
    stack1_attention_kernel(const __grid_constant__ AttentionParams p)
{
    static_assert(VARIANT == kUnion4, "stack1: Union4 only");
    static_assert(G == 16 || G == 8 || G == 4, "stack1: G = 16, 8 or 4");
    // Slots per tile: 2 (G = 16), 4 (G = 8), 8 (G = 4: warp w holds slots 2 w and 2 w + 1)
    constexpr int kTiles = stack_tiles(G), kTileSlots = G == 4 ? kDenseSlots : 4 / kTiles;
    extern __shared__ uint8_t smem_raw[];
    SmemPlanStack1 &sm = smem_plan<SmemPlanStack1>(smem_raw);
    // The full call's second launch (pw_union_attention_vt): this call may run the other tile
    // (the lean kernel, at G = 8 / 4 the dense tile).
    if (p.stack_mode != PW_STACK_NEVER && !stacked_call(p)) return;
    // Items: tiles, kTiles per Union4 half (G = 16: two 2-slot tiles, CTA-pair index
    // b = item / 2, tile item % 2; G = 8: one, b = item; G = 4: a group, item 2 b or
    // 2 b + 1 of pair b; stack_item_block).
    // The full call's launch is persistent (stack_items > 0: a few CTAs per SM stride over
    // the items, so that a call that runs the lean kernel exits a small grid); otherwise one
    // item per CTA (the dev entry).
    // Items in turn from a work counter (stack_stat[2], zeroed by the pre-pass's memset):
    // thread 0 takes the next item's index at the start of this one (waited for before the
    // item's second barrier, overlapping its schedule lookup; until the 32nd session it was
    // waited for only at the next item, but held in a register across the page loop), so a
    // CTA that finishes early takes more, as the hardware's CTA scheduler would give them (a
    // static stride measured 2.7% slower than one CTA per item; bench/NOTES.md, 21st session).
    // (The counter's address is formed at each use from the kernel parameters: held across
    // the loop it took 8 bytes of local memory in the TS instances at 128 registers.)
    const bool counted = p.stack_items > 0;
    const uint32_t num_items = p.stack_items > 0 ? (uint32_t)p.stack_items : gridDim.x;
    lean_init_ring(sm);
    static_assert(kSchedClasses <= kThreads, "one thread per schedule class");
    if (p.sched_count && threadIdx.x < kSchedClasses) sm.sched_counts[threadIdx.x] = __ldg(p.sched_count + threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
        sm.base = 0u; // pages this CTA walked before the item: the barriers' phases go on
        sm.next_item = counted ? (uint32_t)atomicAdd(p.stack_stat + 2, 1ull) : blockIdx.x;
    }
    // (base and the next item kept in shared memory: live across the prologue or the page
    // loop, each cost spills at 128 registers.)
#pragma unroll 1
    for (;;) {
        __syncthreads(); // every thread read the previous item's index and left its shared state
        if (threadIdx.x == 0) {
            // The item after this one is taken from the counter now, its value stored once the
            // item's own schedule lookup (a global load too) has returned: both round trips
            // overlap, and no register holds it across the page loop.
            uint32_t grid; // (read here, volatile: hoisted out of the loop, ptxas kept it in local memory)
            asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(grid));
            const uint32_t current = sm.next_item;
            const uint32_t next = counted ? (uint32_t)atomicAdd(p.stack_stat + 2, 1ull) : current + grid;
            sm.item = current;
            sm.block = stack_item_block<G>(p, sm, current, num_items);
            sm.next_item = next;
        }
        __syncthreads();
        const uint32_t item = sm.item;
        // Under the longest-first schedule (the full call's; the half's two tiles are adjacent).
        // -1: past the items or the listed halves (so is every later item: the counter only grows).
        const int64_t block = sm.block;
        if (block < 0) {
            if (G == 4 && block == -2) continue; // G = 4: an item with nothing to run
            break;
        }
        const int tile = (int)(item % (uint32_t)kTiles);
        constexpr int kRowSlots = G == 4 ? kDenseSlots : kSlotsPerCta;
        int kv_head, tid;
        int32_t rows[kRowSlots];
        uint4 q_raw[kRows / 8];
        if constexpr (G == 4) {
            DenseWork work;
            if (!stack4_work(p, (int32_t)block, work)) continue; // CTA-uniform
            kv_head = work.kv_head;
            asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid)); // (as below)
#pragma unroll
            for (int k = 0; k < kDenseSlots; k++) {
                rows[k] = work.query_rows[k];
                if (tid == k) {
                    sm.slot_limit[k] = work.limits[k];
                    sm.slot_row[k] = rows[k];
                }
            }
            load_q_rows<true, G, false, kDenseSlots>(q_raw, tid, p, kv_head, rows);
            build_page_list<VARIANT, SmemPlanStack1, kDenseSlots>(sm, p, kv_head, work.group, 0, work.request,
                                                                  work.query_rows[0], work.limits, work.union_size,
                                                                  sm.page_vt, 0xffu, tid); // ends with __syncthreads
        } else {
            CtaWork work;
            if (!cta_work<VARIANT>(p, 0, work, block)) continue;                   // CTA-uniform
            if ((tile ? work.query_rows[2] : work.query_rows[0]) < 0) continue;    // an empty tile (G = 16)
            kv_head = work.kv_head;
            // The thread index read anew for each item (volatile): values derived from it (shared
            // addresses of the prologue) are not hoisted out of the persistent loop, where they
            // would stay live across the page loop (ptxas spilled 32 bytes at 128 registers).
            asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
#pragma unroll
            for (int k = 0; k < kSlotsPerCta; k++) rows[k] = -1;
#pragma unroll
            for (int k = 0; k < kTileSlots; k++) {
                // G = 16: tile 1 holds slots 2, 3 (constant indices: the arrays stay in registers);
                // G = 8: the one tile, slots 0-3
                const int upper = kTiles == 2 ? 2 + k : k;
                rows[k] = tile ? work.query_rows[upper] : work.query_rows[k];
                if (tid == k) {
                    sm.slot_limit[k] = tile ? work.limits[upper] : work.limits[k];
                    sm.slot_row[k] = rows[k];
                }
            }
            // Q's loads first: their latency (HBM) overlaps the page list's loads.
            load_q_rows<true, G>(q_raw, tid, p, kv_head, rows);
            build_page_list<VARIANT>(sm, p, kv_head, work.group, work.half, work.request, work.query_rows[0],
                                     work.limits, work.union_size, sm.page_vt,
                                     ((1u << kTileSlots) - 1u) << (kTileSlots * tile), tid); // ends with __syncthreads
        }
        const int lane = tid % 32;
        const int num_pages = sm.num_pages;
        const uint32_t base = sm.base; // written before the __syncthreads that ends build_page_list
        // (The cache policy is made at each issue: kept live across the page loop it cost
        // the registers of the persistent loop, 32 bytes of spills at 128.)
        auto issue_k = [&](int next) {
            // TS: buffer next % 2 last held page next - 2 (or a previous item's page: CTA
            // barriers). L6: the issuer is the last warp to arrive on k_done after page
            // next - 1's QK, and every warp read page next - 2's scales before its arrival
            // (lean_release: __syncwarp, block fence, atomic; the issuer's block fence and
            // proxy fence follow the count), so no generic read of the buffer is outstanding.
            mbarrier_arrive_expect_tx(&sm.k_full, kTileBytes + (TS ? kStackTsBytes : 0u));
            tma_load_4d(sm.k, &p.k_map, &sm.k_full, 0, kv_head, 0, sm.page_physical[next], createpolicy_evict_last());
            if constexpr (TS) // the page's scales, behind its E4M3 V^T in the pre-pass's tile
                tma_load_3d(sm.ts[next % 2], &p.ts_map, &sm.k_full, 0, 0,
                            (int32_t)((int64_t)kv_head * p.vt_capacity + sm.page_vt[next]), createpolicy_evict_last());
        };
        auto issue_v = [&](int next) {
            mbarrier_arrive_expect_tx(&sm.v_full, kTileBytes);
            bulk_load(sm.vt, prevt_tile(p, kv_head, sm.page_vt[next]), kTileBytes, &sm.v_full,
                      createpolicy_evict_last());
        };
        if (tid == 0 && num_pages > 0) {
            prefetch_tensormap(&p.k_map);
            if constexpr (TS) prefetch_tensormap(&p.ts_map);
            fence_proxy_async_shared_cta(); // the previous item's generic accesses -> these async writes
            issue_k(0);
            issue_v(0);
        }

        const float k_scale = *p.k_scale;
        const float log2e = 1.4426950408889634f;
        quantize_q_loaded<true, G, false, kRowSlots, !X2>(q_raw, smem_u32(sm.q), 0u, sm.row_factor, tid, rows,
                                                     k_scale * p.softmax_scale * log2e);
        fence_proxy_async_shared_cta();
        __syncthreads();

        const uint32_t q = lane % 4;
        const int head = stack_thread_head<G>(tid), my_slot = stack_thread_slot<G>(tid);
        const float f = sm.row_factor[my_slot * G + head];
        float m = -INFINITY, l = 0.0f;
        float o[32];
#pragma unroll
        for (int k = 0; k < 32; k++) o[k] = 0.0f;
        // TS: o holds O / o_unit, o_unit a power of two: the largest vmax of the row's pages
        // so far (0 before its first). A page whose vmax is o_unit (most: vmax is the page's
        // largest |vs| rounded up to a power of two) adds its PV sum as the call without
        // scales does, with no multiply; a larger vmax first takes o to the new unit
        // (o x o_unit / vmax <= 1), a smaller one scales its PV sum by vmax / o_unit <= 1.
        // Every step is a power-of-two scaling of the absolute form o = o alpha + PV x vmax
        // (docs/semantics.md §4.5): the same bits while the values stay normal floats; O
        // is multiplied by o_unit before the output's 1 / l.
        float o_unit = 0.0f;

#pragma unroll 1
        for (int i = 0; i < num_pages; i++) {
            const uint32_t parity = (base + (uint32_t)i) & 1u;
            // G = 16 / 8: warp-uniform; G = 4: per half warp, `walk` (either slot) warp-uniform
            // G = 4 and the per-token-scale instances: the thread index re-read (volatile), else
            // the member masks and the slot's limit address, formed once, went to local memory
            int tid_page = tid;
            if constexpr (G == 4 || TS) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_page));
            const bool member = (sm.page_members[i] >> (kTileSlots * tile + stack_thread_slot<G>(tid_page))) & 1u;
            const bool walk = G == 4 ? ((sm.page_members[i] >> (2 * (tid_page / 32))) & 3u) != 0u : member;
            const int vlim = sm.page_vlim[i];
            mbarrier_wait_parity(&sm.k_full, parity);
            const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q), desc_k = wgmma_desc_k_major_sw128(sm.k);
            float s[32];
            stacked_qk(s, desc_q, desc_k);
            lean_release(&sm.k_done, i + 1, num_pages, issue_k); // L1
            float alpha = 1.0f, vmax = 1.0f;
            uint32_t pa[16];
            if (walk) {
                // G = 4: the half warp whose slot did not select the page runs the same
                // instructions (the quad shuffles need every lane) on scores no result keeps
                // (garbage, even NaN past every member's last token): its m and l are put
                // back, its alpha is 1 and its P exactly 0 (the dense tiles' rule).
                const float m_kept = m, l_kept = l;
                const int64_t lim = sm.slot_limit[stack_thread_slot<G>(tid_page)] - (int64_t)sm.page_logical[i] * kPageSize;
                if constexpr (TS) stacked_ts_scale_scores(s, q, sm.ts[i % 2][0]);
                softmax_row32(s, lim, q, f, m, l, alpha);
                if constexpr (TS)
                    vmax = stacked_ts_scale_p(s, lim, q, sm.ts[i % 2][1], sm.ts[i % 2][2], sm.ts[i % 2][3]);
                stacked_p_fragments<X2>(s, pa);
                if (G == 4 && !member) {
                    m = m_kept;
                    l = l_kept;
                    alpha = 1.0f;
#pragma unroll
                    for (int k = 0; k < 16; k++) pa[k] = 0u;
                }
            } else {
#pragma unroll
                for (int k = 0; k < 16; k++) pa[k] = 0u;
            }
            // (TS: this warp's last read of page i's scales; its k_done arrival after page
            // i + 1's QK releases the buffer, L6.)
            prevt_wait_zeroed<false>(sm, parity, vlim);
            const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt);
            // TS: the page's PV sum in units of o_unit (vmax / o_unit; 1 on most pages)
            float pv_factor = 1.0f;
            if (TS && member && vmax != o_unit) {
                if (vmax > o_unit) { // the row's first page, or a larger vmax: o to the new unit
                    const float down = __fdiv_rn(o_unit, vmax); // a power of two <= 1 (0 at first)
#pragma unroll
                    for (int k = 0; k < 32; k++) o[k] = __fmul_rn(o[k], down);
                    o_unit = vmax;
                } else {
                    pv_factor = __fdiv_rn(vmax, o_unit); // a power of two < 1
                }
            }
            stacked_pv_add<TS>(o, pa, desc_vt, alpha, pv_factor, member);
            wgmma_fence_operand(pa);
            lean_release(&sm.v_done, i + 1, num_pages, issue_v); // L2
        }
        if (tid == 0) sm.base = base + (uint32_t)num_pages; // read after the next item's barriers
        // The thread's place formed again from a re-read thread index (volatile): kept from the
        // prologue, a value of it went to local memory in the G = 4 TS instance (128 registers).
        int tid_end;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_end));
        const int head_end = stack_thread_head<G>(tid_end);
        const uint32_t q_end = (uint32_t)tid_end % 4u;
        const int32_t row = sm.slot_row[stack_thread_slot<G>(tid_end)];
        if (row >= 0) {
            float inv, lse;
            finish_row(m, l, *p.v_scale, sink_of(p, (int64_t)kv_head * G + head_end, row), inv, lse);
            if (TS && o_unit > 0.0f) { // O back in absolute units (a power of two: exact while O is normal;
                                       // on inv instead, inv x o_unit could round below FLT_MIN)
#pragma unroll
                for (int k = 0; k < 32; k++) o[k] = __fmul_rn(o[k], o_unit);
            }
            uint16_t *out = p.o + (int64_t)row * p.o_stride + ((int64_t)kv_head * G + head_end) * kHeadDim;
#pragma unroll
            for (int b = 0; b < 16; b++)
                *reinterpret_cast<__nv_bfloat162 *>(out + 8 * b + 2 * q_end) =
                    __floats2bfloat162_rn(o[2 * b] * inv, o[2 * b + 1] * inv);
            if (p.lse && q_end == 0)
                p.lse[(int64_t)row * (p.num_kv_heads * G) + (int64_t)kv_head * G + head_end] = lse;
        }
    }
}

} // namespace pw

#endif
