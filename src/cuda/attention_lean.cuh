/* attention_lean.cuh — dev impl 9, "lean" (v8 in bench/NOTES.md): the Union4 and per-query
 * kernels rebuilt for three CTAs per SM instead of two. Included by attention.cu and by
 * attention_page64.cu (its 64-token-page forms); it uses attention_work.cuh's cta_work,
 * build_page_list and quantize_q; same rows, same arithmetic, same bytes as impl 6.
 *
 * Why: every profile of impls 2-7 (bench/NOTES.md) says the kernels are latency-bound on one
 * warpgroup's serial page chain with only two chains per SM (issue slots ~70% idle, tensor
 * pipe and MUFU far from busy); FlashInfer's SM90 sparse prefill keeps four 128-thread CTAs
 * per SM with one K and one V tile each. Impl 6 needs 96 KiB of shared memory (two K + V
 * stages, V^T, Q, P / Q-lo) and 210 registers, so two CTAs fit. This kernel:
 *   - one K tile and one V tile (16 KiB each), each with its own full barrier, refilled as
 *     soon as the last warp is done with it (after its QK wgmma wait, which follows its
 *     share of the transpose), not at a CTA barrier;
 *   - the PV product in two N = 64 halves of the head dimension, each into a freshly zeroed
 *     32-register accumulator added to O before the next (the same per-element sums as
 *     one N = 128 wgmma: the reduction axis and its order are unchanged);
 *   - 64 KiB + lists of shared memory (Q and Q's second term always reserved) and
 *     __launch_bounds__(128, 3): at most 168 registers.
 * Everything else is impl 6: warp w owns slot w (rows 16w..16w+15), the warps whose slot did
 * not select the page transpose V during the member warps' softmax (every warp on a page all
 * four selected), V past the members' last visible token is zeroed (page_v_limit), P goes
 * from the QK accumulator straight into the PV A fragments.
 *
 * Synchronisation (the invariants the code relies on):
 *  L1 (K WAR) K(i+1) is issued by the warp whose arrival on k_done completes page i's four
 *     arrivals; each warp arrives after its own wgmma.wait_group of page i's QK, so every
 *     read of the K tile finished. The counter is monotonic (4 arrivals per page; the
 *     arrival that makes it a multiple of 4 is the last), release/acquire by
 *     __threadfence_block around the atomic, and fence.proxy.async before the copy.
 *  L2 (V WAR) V(i+1) likewise on v_done, with the same arrival point (after the warp's
 *     transpose share, if any, and its QK wait).
 *  L3 (full phases) k_full / v_full complete one phase per page (phase i = page i, waited
 *     with parity i & 1). Every warp waits k_full(i) before its QK; at least one warp waits
 *     v_full(i) on every page (a page has transposing warps: all four, or the non-members)
 *     and does so before page i's pre-PV CTA barrier, so phase i is complete before any
 *     warp reaches page i + 1. Phase i + 1 needs the copy issued after all four arrivals of
 *     page i, which follow each waiter's wait on phase i: no waiter sees a barrier two
 *     phases ahead, and each phase is armed (arrive.expect_tx by the issuing thread, right
 *     before its copy) only after the previous one completed.
 *  L4 (V^T) generic stores, fence.proxy.async, CTA barrier, PV wgmma reads; the next page's
 *     transpose writes V^T only after the end-of-page CTA barrier behind every warp's PV
 *     waits.
 *  L5 (exit) the last page issues nothing, and every issued copy is waited for by the loop,
 *     so no copy lands after the CTA left.
 */
#ifndef PW_ATTENTION_LEAN_CUH
#define PW_ATTENTION_LEAN_CUH

#include "attention_launch.cuh"
#include "attention_work.cuh"

namespace pw {

constexpr int kLeanCtasPerSm = 3;
constexpr int kLeanMaxWidth = 4; // softmax row-max tree width (attention_common.cuh): 16 spilled O

/* CAP: entries of the page list (kMaxUnion = 128 for K = 16; 4 K for K = 32 and 64: the
 * pages of one 4-query half or one query). */
template <int CAP>
struct __align__(1024) SmemPlanLeanT {
    uint8_t k[kTileBytes];              // K of the current page [token][d], TMA 128B-swizzled
    uint8_t v[kTileBytes];              // V of the current page [token][d], TMA 128B-swizzled
    uint8_t vt[kTileBytes];             // V^T [d][position], 128B-swizzled
    uint8_t q[kRows * kHeadDim];        // Q (FP8) [row][d], 128B-swizzled
    uint8_t q_lo[kRows * kHeadDim];     // PW_PRECISION_FP8X2: Q's second term
    uint64_t k_full;                    // K of page i landed (phase i)
    uint64_t v_full;                    // V of page i landed (phase i)
    uint32_t k_done;                    // arrivals of warps done with the K tile (4 per page)
    uint32_t v_done;                    // arrivals of warps done with the V tile (4 per page)
    int32_t page_logical[CAP];          // the pages this CTA walks, ascending
    int32_t page_physical[CAP];
    uint8_t page_members[CAP];          // bit w: slot w selected the page
    uint8_t page_vlim[CAP];             // last token of the page a member slot may see
    int32_t page_vt[CAP];               // PREVT: the pre-pass's tile of each page (vt_slots)
    float row_factor[kRows];
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
};
using SmemPlanLean = SmemPlanLeanT<kMaxUnion>; // K = 16 (and 32), the dense tiles
constexpr size_t kSmemBytesLean = sizeof(SmemPlanLean) + 1024;
/* The page list's capacity of the lean kernel for the device's K. */
constexpr int lean_list_capacity(int topk) { return topk <= 16 ? kMaxUnion : 4 * topk; }
template <int TOPK> constexpr size_t kSmemBytesLeanK = sizeof(SmemPlanLeanT<lean_list_capacity(TOPK)>) + 1024;
static_assert(kLeanCtasPerSm * (kSmemBytesLeanK<64> + 1024) <= 228 * 1024, "lean K = 64: three CTAs per SM no longer fit");
static_assert(offsetof(SmemPlanLean, vt) == offsetof(SmemPlanLean, v) + kTileBytes, "lean: the f16 V^T tile fills v and vt");
// 228 KiB per SM, 1 KiB of it reserved per CTA.
static_assert(kLeanCtasPerSm * (kSmemBytesLean + 1024) <= 228 * 1024, "lean: three CTAs per SM no longer fit");

/* TS (per-token scales): each warp's copy of the current page's K and V scales, and what the
 * three-CTA form reloads instead of holding it in registers: the warp's last visible token
 * and KV head (in the page loop), its query row and the rows' sinks (in the epilogue). */
template <int CAP>
struct __align__(1024) SmemPlanLeanTsT : SmemPlanLeanT<CAP> {
    float scales[kThreads / 32][2][kPageSize];
    int64_t warp_limit[kThreads / 32];
    int32_t warp_row[kThreads / 32];
    int32_t warp_kv_head[kThreads / 32];
    float row_sink[kRows]; // three-CTA instances: each row's sink logit (-inf: none), from the prologue
};
using SmemPlanLeanTs = SmemPlanLeanTsT<kMaxUnion>;
constexpr size_t kSmemBytesLeanTs = sizeof(SmemPlanLeanTs) + 1024;
template <int TOPK> constexpr size_t kSmemBytesLeanTsK = sizeof(SmemPlanLeanTsT<lean_list_capacity(TOPK)>) + 1024;
/* CTAs per SM of a TS instance. Three (168 registers) where ptxas fits the instance without
 * spilling (checked by the build: spills are errors) and shared memory allows: the Union4
 * kernel on the V^T pre-pass at K = 16 (pages of 128 or 64 tokens), at G = 16 in both
 * precisions and at G = 8 / 4 in FP8X2, i.e. what pw_sparse_prefill runs with per-token
 * scales on large chunks at K = 16 (A-hot against two CTAs: G = 16 -15.0% FP8, -13.2% FP8X2;
 * G = 8 FP8X2 -17.4%; bench/NOTES.md, 2026-12-03; G = 4 and P = 64 not timed). Two
 * elsewhere: forced to three, the other instances spill 4-72 bytes. */
template <int VARIANT, bool X2, bool PREVT, int G, int TOPK>
constexpr int lean_ts_ctas_per_sm()
{
    return VARIANT == kUnion4 && PREVT && TOPK == kTopK && (G == kHeadsPerKv || X2) ? 3 : 2;
}
static_assert(3 * (kSmemBytesLeanTs + 1024) <= 228 * 1024, "lean TS, K = 16: three CTAs per SM no longer fit");

/* The three-CTA TS instances' reloads: this warp's entry of a per-warp shared array, or
 * this thread's two rows of a per-row one, loaded where the call stands. asm volatile keeps
 * the compiler front end from moving or merging the load, and the address is formed from
 * %tid.x inside the asm, so no value computed in the prologue feeds it; ptxas sees a plain
 * ld.shared and could still hoist it, but has not (checked in the SASS of the three-CTA
 * instances, e.g. the limit's LDS.64 inside the member branch): what this buys is register
 * allocation (no value held across the page loop), never results. */
static __device__ __forceinline__ int32_t lds_warp_s32_here(const int32_t *base)
{
    int32_t v;
    asm volatile("{\n\t.reg .u32 t;\n\tmov.u32 t, %%tid.x;\n\tshr.u32 t, t, 5;\n\tshl.b32 t, t, 2;\n\t"
                 "add.u32 t, t, %1;\n\tld.shared.s32 %0, [t];\n\t}"
                 : "=r"(v) : "r"(smem_u32(base)));
    return v;
}
static __device__ __forceinline__ int64_t lds_warp_s64_here(const int64_t *base)
{
    int64_t v;
    asm volatile("{\n\t.reg .u32 t;\n\tmov.u32 t, %%tid.x;\n\tshr.u32 t, t, 5;\n\tshl.b32 t, t, 3;\n\t"
                 "add.u32 t, t, %1;\n\tld.shared.s64 %0, [t];\n\t}"
                 : "=l"(v) : "r"(smem_u32(base)));
    return v;
}
/* base[r0] and base[r0 + 8] of a per-row shared array (row_factor, row_sink): this thread's
 * two rows, r0 = 16 warp + lane / 4 = tid / 4 + 8 (tid / 32). */
static __device__ __forceinline__ void lds_thread_rows_here(const float *base, float &g0, float &g1)
{
    asm volatile("{\n\t.reg .u32 t, u;\n\tmov.u32 t, %%tid.x;\n\tshr.u32 u, t, 5;\n\tshr.u32 t, t, 2;\n\t"
                 "mad.lo.u32 t, u, 8, t;\n\tmad.lo.u32 t, t, 4, %2;\n\tld.shared.f32 %0, [t];\n\t"
                 "ld.shared.f32 %1, [t+32];\n\t}"
                 : "=f"(g0), "=f"(g1) : "r"(smem_u32(base)));
}

/* Thread 0: the page ring's full barriers and done counters (L1-L3), published by the page
 * list's CTA barrier. Any plan with k_full / v_full / k_done / v_done (the stacked kernel's
 * too). */
template <class Plan>
static __device__ __forceinline__ void lean_init_ring(Plan &sm)
{
    if (threadIdx.x == 0) {
        mbarrier_init(&sm.k_full, 1);
        mbarrier_init(&sm.v_full, 1);
        sm.k_done = 0u;
        sm.v_done = 0u;
        fence_mbarrier_init_release_cluster();
    }
}

/* One page's scores: wait for K of page `parity`'s phase, acc = Q K^T (FP8X2: + Q_lo K^T)
 * by the warpgroup's wgmmas, waited for. The lean and dense kernels' QK step. */
template <bool X2, class Plan>
static __device__ __forceinline__ void lean_qk_page(float (&acc)[64], Plan &sm, uint32_t parity, uint64_t desc_q,
                                                    uint64_t desc_k)
{
    mbarrier_wait_parity(&sm.k_full, parity);
    qk_issue<X2>(acc, desc_q, X2 ? wgmma_desc_k_major_sw128(sm.q_lo) : 0, desc_k);
    wgmma_wait_group<0>();
    wgmma_fence_operand(acc);
}

/* The V^T pre-pass's tile `tile` of KV head `kv_head` (vt_prepare.cu; kVtTileBytes apart). */
static __device__ __forceinline__ const uint8_t *prevt_tile(const AttentionParams &p, int kv_head, int32_t tile)
{
    return p.vt_tiles + ((int64_t)kv_head * p.vt_capacity + tile) * kVtTileBytes;
}

/* The pre-pass's V^T tile of page phase `parity`: every thread waits for it; on a page past a
 * member's last visible token (vlim < PAGE - 1, CTA-uniform) every thread zeroes the positions
 * past vlim (zero_vt_after on the E4M3 tile in sm.vt, F16: zero_vt16_after on the f16 tile in
 * sm.v | sm.vt) before one CTA barrier. The lean and dense kernels' PREVT step before PV.
 * PAGE = 64: the pre-pass wrote zeros at positions 64..127 (vt_prepare.cu). */
template <bool F16, class Plan, int PAGE = kPageSize>
static __device__ __forceinline__ void prevt_wait_zeroed(Plan &sm, uint32_t parity, int vlim)
{
    mbarrier_wait_parity(&sm.v_full, parity);
    if (vlim < PAGE - 1) {
        if constexpr (F16) zero_vt16_after(smem_u32(sm.v), vlim);
        else zero_vt_after(smem_u32(sm.vt), vlim);
        fence_proxy_async_shared_cta(); // V^T (generic stores) -> PV wgmma
        __syncthreads();
    }
}

/* The last visible column of a query (last visible token my_limit) on page `logical` of
 * PAGE tokens: PAGE = 64 clamps it to 63, so that the 128-column step masks the columns
 * that hold no token of the page. (A function, not a lambda: a lambda capturing my_limit
 * changed the P = 128 kernels' instruction order.) */
template <int PAGE>
static __device__ __forceinline__ int64_t page_column_limit(int64_t my_limit, int32_t logical)
{
    const int64_t lim = my_limit - (int64_t)logical * PAGE;
    if constexpr (PAGE < kPageSize) return lim < PAGE - 1 ? lim : (int64_t)(PAGE - 1);
    else return lim;
}

/* One warp (lane 0 after __syncwarp) says it is done with a tile; the arrival that completes
 * the page's four runs issue() (arm `full` and copy the next page's tile: L1, L2). */
template <class Issue>
static __device__ __forceinline__ void lean_release(uint32_t *done, int next, int num_pages, Issue issue)
{
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
        __threadfence_block();
        const uint32_t old = atom_add_shared(smem_u32(done), 1u);
        if ((old & 3u) == 3u && next < num_pages) {
            __threadfence_block();
            fence_proxy_async_shared_cta();
            issue(next);
        }
    }
}

/* PREVT (dev impl 10, the full call's Union4 kernel): V^T arrives ready, written by the
 * pre-pass (vt_prepare.cu) into p.vt_tiles in exactly the bytes the in-kernel transpose
 * would write (without the zeroing), and is loaded by one bulk copy. The page loop then has
 * no transposes and no CTA barrier except on a page that crosses a member's last visible
 * token (vlim < 127), where every thread zeroes the positions past vlim (zero_vt_after)
 * before one barrier: the same V^T bytes, hence the same outputs, as impl 9. V^T of page
 * i + 1 is loaded once every warp waited for page i's PV.
 *
 * TS (per-token scales, docs/semantics.md §4.5): each warp copies the K and V scales of its
 * next member page into its own shared-memory buffer (cp.async, issued right after it has
 * read the current page's, so the copy flies during PV and the next QK), multiplies the
 * scores by the K scales (ts_scale_scores) and runs the softmax as without scales on the
 * products with P x vs / vmax in its last pass (softmax_page's kFoldV), then the page's PV
 * sum by vmax. With
 * every scale 1 the bytes of the kernel without. (Until 2026-12-04 the softmax took the
 * factor f x ks_t per column, three more multiplies a score: bench/NOTES.md, 31st session.)
 * Warp-private: no barrier beyond __syncwarp. Two or three CTAs per SM (lean_ts_ctas_per_sm).
 *
 * G = 8 or 4 Q heads per KV head (the padded tile): each slot's 16 rows hold its G heads
 * and 16 - G zero rows, whose scores, softmax and PV run like any other row's and are never
 * stored (quantize_q<G>, store_rows<G>): everything per row stays as for G = 16, at 16 / G
 * times the useful tensor work.
 *
 * TOPK = 32 or 64 (the device's K): the same kernel with a page list of 4 K entries
 * (build_page_list reads the group's 8 K union entries in passes); the page loop does not
 * depend on K.
 *
 * PAGE = 64 (pages of 64 tokens; instantiated in attention_page64.cu): each page is one
 * 128-column step whose columns 64..127 hold no token. K and V (without the pre-pass) come
 * by TMA boxes of 64 rows into rows 0..63 of their tiles, so rows 64..127 keep whatever an
 * earlier page (or nothing) left there; softmax_page<.., 64> (and the dense tiles' softmax)
 * never reads those columns' scores: acc[32..63] get p = 0 by position, at compile time,
 * without a compare, a max or an exponential (the bits the earlier select to -inf gave), so
 * stale bytes, even NaN codes, never reach p; every member's limit is clamped to 63, so only
 * a page holding a member's last visible token compares; page_v_limit <= 63 zeroes their
 * V^T positions (the in-kernel
 * transpose's load_v_chunk; on the pre-pass vt_prepare.cu writes zeros there), so that
 * P = 0 meets V = 0. The arithmetic of every visible token is the P = 128 kernel's; the
 * tensor work per page is the same, i.e. twice it per token (bench/NOTES.md). */
template <int VARIANT, bool X2, bool PREVT = false, bool TS = false, int G = kHeadsPerKv, int TOPK = kTopK,
          int PAGE = kPageSize>
__global__ void __launch_bounds__(kThreads, TS ? lean_ts_ctas_per_sm<VARIANT, X2, PREVT, G, TOPK>() : kLeanCtasPerSm)
    lean_attention_kernel(const __grid_constant__ AttentionParams p)
{
    static_assert(VARIANT != kUnion8, "lean: Union4 and per-query only");
    static_assert(PAGE == kPageSize || PAGE == 64, "lean: pages of 128 or 64 tokens");
    constexpr uint32_t kKvTxBytes = PAGE * kHeadDim; // one TMA box of K (or V): PAGE rows of 128 bytes
    using Plan = SmemPlanLeanT<lean_list_capacity(TOPK)>;
    extern __shared__ uint8_t smem_raw[];
    Plan &sm = smem_plan<Plan>(smem_raw);
    // TS: this warp's scale buffer (the plan's extension; not touched otherwise).
    float(&ts_buf)[2][kPageSize] =
        reinterpret_cast<SmemPlanLeanTsT<lean_list_capacity(TOPK)> &>(sm).scales[threadIdx.x / 32];
    // TS at three CTAs per SM (168 registers): the page loop reloads the warp's limit, the
    // rows' factors and the KV head from shared memory, the epilogue the warp's row and the
    // rows' sinks (computed in the prologue: no call in the epilogue, whose calling
    // convention kept values in local memory). At two CTAs these cost 2.5-3.6% (the
    // per-token-scale kernel without the pre-pass, bench/NOTES.md): there the plain forms.
    constexpr bool kTs3 = TS && lean_ts_ctas_per_sm<VARIANT, X2, PREVT, G, TOPK>() == 3;
    auto &ts_sm = reinterpret_cast<SmemPlanLeanTsT<lean_list_capacity(TOPK)> &>(sm);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    // The full call's first launch: this call may run the stacked tile (FP8X2; FP8 with
    // per-token scales at G = 16, since the 34th session).
    if constexpr (PREVT && (X2 || (TS && G == kHeadsPerKv && TOPK == kTopK && PAGE == kPageSize)) && VARIANT == kUnion4)
        if (stacked_call(p)) return;
    CtaWork work;
    // Under the longest-first schedule (Union4 on the tiles): the scheduled item, or none.
    const int64_t block = VARIANT == kUnion4 && p.sched_count ? scheduled_block(p) : -1; // -1: blockIdx.x
    if (VARIANT == kUnion4 && p.sched_count && block < 0) return;
    if (!cta_work<VARIANT>(p, 0, work, block)) return; // CTA-uniform
    const int kv_head = work.kv_head;

    lean_init_ring(sm);
    build_page_list<VARIANT, Plan, kSlotsPerCta, TOPK, PAGE>(sm, p, kv_head, work.group, work.half, work.request,
                                                             work.query_rows[0], work.limits, work.union_size,
                                                             PREVT ? sm.page_vt : nullptr); // ends with __syncthreads
    const int num_pages = sm.num_pages;
    const uint64_t keep_kv = createpolicy_evict_last();
    // PREVT: the pre-pass's V^T tile of page i of the list.
    auto vt_tile = [&](int i) { return prevt_tile(p, kv_head, sm.page_vt[i]); };
    auto issue_k = [&](int next) {
        mbarrier_arrive_expect_tx(&sm.k_full, kKvTxBytes);
        tma_load_4d(sm.k, &p.k_map, &sm.k_full, 0, kv_head, 0, sm.page_physical[next], keep_kv);
    };
    // FP8X2 on the pre-pass without per-token scales: P in f16 on the f16 V^T tile, which
    // fills the v and vt tiles (32 KiB; the raw V tile is unused with the pre-pass).
    constexpr bool kF16 = PREVT && X2 && !TS;
    auto issue_v = [&](int next) {
        mbarrier_arrive_expect_tx(&sm.v_full, kF16 ? kVtTileBytes : PREVT ? kTileBytes : kKvTxBytes);
        if constexpr (kF16)
            bulk_load(sm.v, vt_tile(next), kVtTileBytes, &sm.v_full, keep_kv);
        else if constexpr (PREVT)
            bulk_load(sm.vt, vt_tile(next), kTileBytes, &sm.v_full, keep_kv);
        else
            tma_load_4d(sm.v, &p.v_map, &sm.v_full, 0, kv_head, 0, sm.page_physical[next], keep_kv);
    };
    if (tid == 0 && num_pages > 0) {
        prefetch_tensormap(&p.k_map);
        prefetch_tensormap(&p.v_map);
        mbarrier_arrive_expect_tx(&sm.k_full, kKvTxBytes);
        tma_load_4d(sm.k, &p.k_map, &sm.k_full, 0, kv_head, 0, sm.page_physical[0], keep_kv);
        issue_v(0);
    }

    const float k_scale = *p.k_scale, v_scale = *p.v_scale;
    const float log2e = 1.4426950408889634f;
    quantize_q<G>(sm, p, kv_head, work.query_rows, k_scale * p.softmax_scale * log2e, X2 ? smem_u32(sm.q_lo) : 0u);
    fence_proxy_async_shared_cta();
    __syncthreads();

    int32_t my_row = -1;
    int64_t my_limit = -1;
#pragma unroll
    for (int w = 0; w < kSlotsPerCta; w++) {
        if (w == warp) {
            my_row = work.query_rows[w];
            my_limit = work.limits[w];
        }
    }
    const uint32_t q = lane % 4;
    const int r0 = 16 * warp + lane / 4;
    const float f0 = sm.row_factor[r0], f1 = sm.row_factor[r0 + 8];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q);
    const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.k);
    const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt);
    const uint32_t vt_addr = smem_u32(sm.vt), v_addr = smem_u32(sm.v);

    if constexpr (TS) {
        if constexpr (kTs3) {
            if (lane == 0) {
                ts_sm.warp_limit[warp] = my_limit;
                ts_sm.warp_row[warp] = my_row;
                ts_sm.warp_kv_head[warp] = kv_head;
            }
            // This thread's two rows' sinks (heads lane / 4 and lane / 4 + 8; rows of heads
            // >= G are padding), written by the quad's first lane.
            float s0 = -INFINITY, s1 = -INFINITY;
            if (my_row >= 0 && (G == kHeadsPerKv || (int)(lane / 4) < G)) {
                s0 = sink_of(p, (int64_t)kv_head * G + lane / 4, my_row);
                if (G == kHeadsPerKv) s1 = sink_of(p, (int64_t)kv_head * G + lane / 4 + 8, my_row);
            }
            if (q == 0) {
                ts_sm.row_sink[r0] = s0;
                ts_sm.row_sink[r0 + 8] = s1;
            }
            __syncwarp();
        }
        if (num_pages > 0 && ((sm.page_members[0] >> warp) & 1u))
            ts_load_page<PAGE>(ts_buf, p, kv_head, sm.page_physical[0], lane);
    }

    float acc[64]; // the page's scores, then 256 p
#pragma unroll 1
    for (int i = 0; i < num_pages; i++) {
        const uint32_t parity = (uint32_t)i & 1u;
        const uint32_t members = sm.page_members[i]; // != 0: these variants walk member pages only
        const bool member = (members >> warp) & 1u;  // warp-uniform
        const uint32_t idle = ~members & 0xFu;       // CTA-uniform
        const int vlim = sm.page_vlim[i];            // CTA-uniform

        // A page every slot selected: all four warps transpose V before the QK wgmma, while
        // the scores' 64 registers are free (during the wgmma they are not: O + scores +
        // the transpose's registers exceeded the 168 of three CTAs per SM).
        if (!PREVT && idle == 0u) {
            mbarrier_wait_parity(&sm.v_full, parity);
#pragma unroll 1
            for (int chunk = 2 * warp; chunk < 2 * warp + 2; chunk++)
                transpose_v_chunk<true>(vt_addr, v_addr, (uint32_t)chunk, vlim);
            lean_release(&sm.v_done, i + 1, num_pages, issue_v);
        }
        lean_qk_page<X2>(acc, sm, parity, desc_q, desc_k);
        // Releases only outside the wgmma's flight: a lane-0-only path while it is in flight
        // makes ptxas serialise the wgmmas (C7520).
        lean_release(&sm.k_done, i + 1, num_pages, issue_k);

        float alpha0 = 1.0f, alpha1 = 1.0f;
        [[maybe_unused]] float vmax = 1.0f;
        if constexpr (TS) {
            if (member) {
                cp_async_wait_all();
                __syncwarp();
                ts_scale_scores<PAGE>(acc, q, ts_buf[0]); // acc x ks, then the softmax as without scales
                const int64_t lim = page_column_limit<PAGE>(kTs3 ? lds_warp_s64_here(ts_sm.warp_limit) : my_limit,
                                                            sm.page_logical[i]);
                if (lim < kPageSize - 1) ts_mask_v(ts_buf, lim, lane); // warp-uniform
                float g0 = f0, g1 = f1;
                if constexpr (kTs3) lds_thread_rows_here(sm.row_factor, g0, g1);
                // ... with P x vs / vmax in its last pass (kFoldV)
                softmax_page<kLeanMaxWidth, PAGE, true>(acc, lim, q, g0, g1, m0, m1, l0, l1, alpha0, alpha1,
                                                        ts_buf[1], &vmax);
            }
            // The next member page's scales, once every lane has read this page's.
            if (i + 1 < num_pages && ((sm.page_members[i + 1] >> warp) & 1u)) {
                __syncwarp();
                ts_load_page<PAGE>(ts_buf, p, kTs3 ? lds_warp_s32_here(ts_sm.warp_kv_head) : kv_head,
                                   sm.page_physical[i + 1], lane);
            }
        } else if (member) {
            softmax_page<kLeanMaxWidth, PAGE>(acc, page_column_limit<PAGE>(my_limit, sm.page_logical[i]), q, f0,
                                              f1, m0, m1, l0, l1, alpha0, alpha1);
        }
        // P as the PV wgmma's A fragments, converted by every warp: a non-member warp
        // converts its raw scores and zeroes the words after its transpose share, so that
        // during the transpose it holds 16 (FP8X2: 32) registers of P instead of the 64 of
        // the scores (ptxas kept the scores live through a transpose that preceded the
        // conversion).
        if constexpr (kF16) { // f16 P on the f16 V^T tile (v | vt), then the next page
            uint32_t ph[32];
            p_fragments_f16(acc, ph, member);
            prevt_wait_zeroed<true, Plan, PAGE>(sm, parity, vlim);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float pv[32];
                pv_part_f16(pv, ph, vt16_half_desc(sm.v, h));
                if (member) pv_add_to_o<64>(o, pv, h, alpha0, alpha1);
            }
            wgmma_fence_operand(ph);
            lean_release(&sm.v_done, i + 1, num_pages, issue_v);
            continue;
        }
        uint32_t pa[16];
        uint32_t pl[X2 ? 16 : 1];
        p_fragments<X2>(acc, pa, pl);
        if (PREVT && !member) {
#pragma unroll
            for (int k = 0; k < 16; k++) pa[k] = 0u;
#pragma unroll
            for (int k = 0; k < (X2 ? 16 : 1); k++) pl[k] = 0u;
        }
        if (!PREVT && !member) {
            // The warps whose slot did not select the page share the transpose while the
            // member warps run the softmax; their rows join the PV wgmma with P = 0 (not
            // added to O).
            mbarrier_wait_parity(&sm.v_full, parity);
            const int n_idle = __popc(idle), idle_rank = __popc(idle & ((1u << warp) - 1u));
#pragma unroll 1
            for (int chunk = idle_rank; chunk < kHeadDim / 16; chunk += n_idle)
                transpose_v_chunk<true>(vt_addr, v_addr, (uint32_t)chunk, vlim);
#pragma unroll
            for (int k = 0; k < 16; k++) pa[k] = 0u;
#pragma unroll
            for (int k = 0; k < (X2 ? 16 : 1); k++) pl[k] = 0u;
        }
        if (!PREVT && idle != 0u) lean_release(&sm.v_done, i + 1, num_pages, issue_v);
        if constexpr (PREVT) {
            prevt_wait_zeroed<false, Plan, PAGE>(sm, parity, vlim);
        } else {
            fence_proxy_async_shared_cta(); // V^T (generic stores) -> PV wgmma
            __syncthreads();
        }
        // PV in two halves of the head dimension (d 0..63, 64..127), each into a freshly
        // zeroed accumulator; member rows add it to O.
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float pv[32];
            pv_part<X2, 64>(pv, pa, pl, desc_vt + (uint64_t)(h * 64 * kPageSize >> 4));
            if constexpr (TS) {
                if (kTs3 && h == 1) { // P's registers free before the last O update (pv_part waited)
                    wgmma_fence_operand(pa);
                    if constexpr (X2) wgmma_fence_operand(pl);
                }
                if (member) pv_add_to_o_ts<64>(o, pv, h, alpha0, alpha1, vmax);
            } else {
                if (member) pv_add_to_o<64>(o, pv, h, alpha0, alpha1);
            }
        }
        if constexpr (!kTs3) {
            wgmma_fence_operand(pa);
            if constexpr (X2) wgmma_fence_operand(pl);
        }
        if constexpr (PREVT)
            lean_release(&sm.v_done, i + 1, num_pages, issue_v);
        else
            __syncthreads(); // L4: V^T free for the next page's transpose
    }
    if constexpr (kTs3) {
        const int32_t row_end = lds_warp_s32_here(ts_sm.warp_row);
        float s0, s1; // the rows' sinks from the prologue
        lds_thread_rows_here(ts_sm.row_sink, s0, s1);
        if (row_end >= 0)
            store_rows_with<G>(p, o, row_end, kv_head, lane, m0, m1, l0, l1, v_scale,
                               [&](int head) { return head < 8 ? s0 : s1; });
    } else {
        if (my_row >= 0) store_rows<G>(p, o, my_row, kv_head, lane, m0, m1, l0, l1, v_scale);
    }
}

/* ---- Host: one launch of the lean kernel for the call's G, K and per-token scales ---- */

/* Dev impl 9 ("lean") for G Q heads per KV head, the device's K and pages of PAGE tokens:
 * Union4 and per-query, three CTAs per SM; its TS form (two or three per SM,
 * lean_ts_ctas_per_sm) when the call has per-token scales. */
template <int VARIANT, bool X2, bool PREVT, int G, int TOPK, int PAGE>
pw_status_t launch_lean_gk(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0}; // devices this kernel's attributes are set on
    static std::atomic<uint64_t> configured_ts{0};
    if (params.ts_k || params.ts_v)
        return launch_one_cta_kind(lean_attention_kernel<VARIANT, X2, PREVT, true, G, TOPK, PAGE>,
                                   kSmemBytesLeanTsK<TOPK>, configured_ts, "lean, per-token scales", params, grid,
                                   stream);
    return launch_one_cta_kind(lean_attention_kernel<VARIANT, X2, PREVT, false, G, TOPK, PAGE>, kSmemBytesLeanK<TOPK>,
                               configured, "lean", params, grid, stream);
}

template <int VARIANT, bool X2, bool PREVT, int G, int PAGE>
pw_status_t launch_lean_g(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.topk == 64) return launch_lean_gk<VARIANT, X2, PREVT, G, 64, PAGE>(params, grid, stream);
    if (params.topk == 32) return launch_lean_gk<VARIANT, X2, PREVT, G, 32, PAGE>(params, grid, stream);
    return launch_lean_gk<VARIANT, X2, PREVT, G, kTopK, PAGE>(params, grid, stream);
}

template <int VARIANT, bool X2, bool PREVT, int PAGE>
pw_status_t launch_lean_page(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.heads_per_kv == 8) return launch_lean_g<VARIANT, X2, PREVT, 8, PAGE>(params, grid, stream);
    if (params.heads_per_kv == 4) return launch_lean_g<VARIANT, X2, PREVT, 4, PAGE>(params, grid, stream);
    return launch_lean_g<VARIANT, X2, PREVT, kHeadsPerKv, PAGE>(params, grid, stream);
}

} // namespace pw

#endif
