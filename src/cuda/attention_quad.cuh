/* attention_quad.cuh — dev impl 15, "quad": the lean Union4 kernel on the V^T pre-pass in
 * PW_PRECISION_FP8 (impl 10's FP8 form: G = 16, Top-K 16, pages of 128 tokens, no per-token
 * scales) rebuilt for FOUR CTAs per SM instead of three. An experiment of issue 12's fast
 * mode (bench/NOTES.md, thirty-ninth session); not run by any library entry point.
 *
 * Why: every profile of the FP8 lean kernel says it is latency-bound (A-hot W128, 26th
 * session: tensor pipe active 37%, 0.44 eligible warps per scheduler, three dependent
 * QK -> softmax -> PV chains per SM, 161 registers). A fourth chain needs <= 128 registers
 * (65,536 / (4 x 128)), and the lean kernel holds O (64) and a page's 128 scores (64)
 * together during the softmax. Here the scores are taken in two N = 64 halves (32
 * registers), and the page's row maximum, which the softmax needs before its first
 * exponential, comes from a first QK pass over the second half:
 *   pass 1  scores of tokens 64..127 -> their row maxima (kept: 2 registers);
 *   pass 2  scores of tokens 0..63   -> the page's maxima, m, alpha; p of tokens 0..63, the
 *           row sums started, P words of tokens 0..63 (8 registers);
 *   pass 3  scores of tokens 64..127 again -> p, the row sums continued, their P words.
 * Element k of a half is element k (first half) or 32 + k (second) of the N = 128 product
 * (the same per-element sums: the reduction over d is unchanged), every maximum is exact
 * in any order, and p is computed and summed in the lean kernel's element order (tokens
 * 0..63 first, then 64..127, each in the accumulator's order), so O, l and m, hence the
 * outputs, are bitwise the lean kernel's. The price: QK runs 1.5 times (FP8's executed
 * tensor work x 1.25).
 *
 * A page that no member sees past token 63 (a query's own page, the KV length's) runs pass 2
 * alone: the second half's scores would all be masked (p = +0: nothing added, zero P words).
 *
 * Shared memory: K (16 KiB), V^T (16 KiB, from the pre-pass), Q (8 KiB) and the page lists:
 * ~43 KiB, four CTAs per SM (the lean kernel reserves V, V^T and Q's second term too).
 * Synchronisation: the lean kernel's ring (attention_lean.cuh, L1-L5) with K released after
 * pass 3 instead of after the one QK: L1 holds (every warp's last read of the K tile is
 * pass 3's wgmma, waited for before its arrival on k_done). SPLITK (dev impl 16) keeps L1
 * and L3 per half of the K tile: tokens 0..63 (k_full / k_done, last read by pass 2) and
 * 64..127 (k_full_b / k_done_b, last read by pass 3, or pass 1 where pass 3 is skipped);
 * every warp waits both halves' phase i on page i.
 */
#ifndef PW_ATTENTION_QUAD_CUH
#define PW_ATTENTION_QUAD_CUH

#include "attention_launch.cuh"
#include "attention_lean.cuh" // the ring (lean_init_ring, lean_release), prevt_tile, prevt_wait_zeroed
#include "attention_work.cuh"

namespace pw {

constexpr int kQuadCtasPerSm = 4;

template <int CAP>
struct __align__(1024) SmemPlanQuadT {
    uint8_t k[kTileBytes];              // K of the current page [token][d], TMA 128B-swizzled
    uint8_t vt[kTileBytes];             // V^T of the current page (the pre-pass's E4M3 tile)
    uint8_t q[kRows * kHeadDim];        // Q (FP8) [row][d], 128B-swizzled
    uint64_t k_full;                    // K of page i landed (phase i); SPLITK: its tokens 0..63
    uint64_t v_full;                    // V^T of page i landed (phase i)
    uint32_t k_done;                    // arrivals of warps done with the K tile (4 per page); SPLITK: tokens 0..63
    uint32_t v_done;                    // arrivals of warps done with the V^T tile (4 per page)
    uint64_t k_full_b;                  // SPLITK: tokens 64..127 of page i's K landed (phase i)
    uint32_t k_done_b;                  // SPLITK: arrivals of warps done with tokens 64..127 (4 per page)
    int32_t page_logical[CAP];          // the pages this CTA walks, ascending
    int32_t page_physical[CAP];
    uint8_t page_members[CAP];          // bit w: slot w selected the page
    uint8_t page_vlim[CAP];             // last token of the page a member slot may see
    int32_t page_vt[CAP];               // the pre-pass's tile of each page (vt_slots)
    float row_factor[kRows];
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
    // Reloaded where used instead of held in registers through the page loop (128 of them):
    int64_t warp_limit[kThreads / 32]; // each warp's last visible token
    int32_t warp_row[kThreads / 32];   // each warp's query row (-1: empty slot)
    int32_t kv_head;
};
using SmemPlanQuad = SmemPlanQuadT<kMaxUnion>;
constexpr size_t kSmemBytesQuad = sizeof(SmemPlanQuad) + 1024;
// 228 KiB per SM, 1 KiB of it reserved per CTA.
static_assert(kQuadCtasPerSm * (kSmemBytesQuad + 1024) <= 228 * 1024, "quad: four CTAs per SM no longer fit");

/* Half h (0: tokens 0..63, 1: tokens 64..127) of the page's scores: acc = Q K[64h ..]^T by
 * the warpgroup's wgmmas, waited for. */
static __device__ __forceinline__ void quad_qk_half(float (&acc)[32], uint64_t desc_q, uint64_t desc_k, int h)
{
    const uint64_t desc_kh = desc_k + (uint64_t)(h * 64 * kHeadDim >> 4);
    wgmma_fence_operand(acc);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kHeadDim / 32; kb++)
        wgmma_m64n64k32_f32_e4m3_ss(acc, desc_q + 2 * kb, desc_kh + 2 * kb, kb > 0);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operand(acc);
}

/* softmax_page's first steps on half h of the scores (columns 64h + 8 (k / 4) + 2q + k % 2):
 * with a non-positive factor (plain) the scores times it first, then -inf past lim. */
static __device__ __forceinline__ void quad_prepare_half(float (&acc)[32], int h, int64_t lim, uint32_t q, float f0,
                                                         float f1, bool plain)
{
    if (plain) {
#pragma unroll
        for (int k = 0; k < 32; k++) acc[k] *= (k % 4) < 2 ? f0 : f1;
    }
    if (lim < 64 * h + 63) {
#pragma unroll
        for (int k = 0; k < 32; k++) {
            const int col = 64 * h + 8 * (k / 4) + 2 * q + (k % 2);
            acc[k] = col <= lim ? acc[k] : -INFINITY;
        }
    }
}

/* 256 p of half of the scores, in softmax_page's arithmetic and element order: p256 =
 * 2^(acc g + c), summed into s0 (row r0) / s1 (row r0 + 8) element by element. */
static __device__ __forceinline__ void quad_exp_half(float (&acc)[32], float g0, float g1, float c0, float c1,
                                                     float &s0, float &s1)
{
#pragma unroll
    for (int k = 0; k < 32; k++) {
        const bool first_row = (k % 4) < 2;
        const float pk = ex2_approx(fmaf(acc[k], first_row ? g0 : g1, first_row ? c0 : c1));
        acc[k] = pk;
        if (first_row) s0 += pk; else s1 += pk;
    }
}

/* P words of half h (p_words' blocks 4h .. 4h + 3 of the page) into pa[8h .. 8h + 7]; zeros
 * for a warp that is not a member. */
static __device__ __forceinline__ void quad_p_words(const float (&acc)[32], int h, bool member, uint32_t (&pa)[16])
{
#pragma unroll
    for (int a = 0; a < 4; a++) {
        uint32_t w0, w1;
        p_words(acc, a, w0, w1);
        pa[8 * h + 2 * a] = member ? w0 : 0u;
        pa[8 * h + 2 * a + 1] = member ? w1 : 0u;
    }
}

/* SPLITK (dev impl 16): the K tile as two halves of 64 tokens (8 KiB each, TMA boxes of 64
 * tokens: p.k_half_map, the same swizzled bytes at the same offsets), each with its own full
 * barrier and done counter (the lean ring's L1 and L3 per half): tokens 0..63 are released
 * after pass 2, their last use, so the next page's copy of them starts a pass earlier, and
 * only the 8 KiB of tokens 64..127 are issued after pass 3 (their copy is the one the next
 * page's pass 1 waits for). Without SPLITK the whole K tile is released after pass 3. */
template <int VARIANT, bool SPLITK>
__global__ void __launch_bounds__(kThreads, kQuadCtasPerSm) quad_attention_kernel(const __grid_constant__ AttentionParams p)
{
    static_assert(VARIANT == kUnion4, "quad: Union4 only");
    constexpr uint32_t kKvTxBytes = kPageSize * kHeadDim;
    constexpr uint32_t kHalfTxBytes = kKvTxBytes / 2;
    using Plan = SmemPlanQuad;
    extern __shared__ uint8_t smem_raw[];
    Plan &sm = smem_plan<Plan>(smem_raw);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    CtaWork work;
    const int64_t block = p.sched_count ? scheduled_block(p) : -1; // -1: blockIdx.x
    if (p.sched_count && block < 0) return;
    if (!cta_work<VARIANT>(p, 0, work, block)) return; // CTA-uniform
    const int kv_head = work.kv_head;

    if constexpr (SPLITK) {
        if (threadIdx.x == 0) {
            mbarrier_init(&sm.k_full_b, 1);
            sm.k_done_b = 0u;
        }
    }
    lean_init_ring(sm); // its fence also publishes k_full_b's initialisation (thread 0, before it)
    build_page_list<VARIANT, Plan, kSlotsPerCta, kTopK, kPageSize>(sm, p, kv_head, work.group, work.half,
                                                                   work.request, work.query_rows[0], work.limits,
                                                                   work.union_size, sm.page_vt); // __syncthreads
    const int num_pages = sm.num_pages;
    // The issuing lane reads the KV head and makes the cache policy where it issues.
    auto issue_k = [&](int next) { // SPLITK: tokens 0..63
        mbarrier_arrive_expect_tx(&sm.k_full, SPLITK ? kHalfTxBytes : kKvTxBytes);
        tma_load_4d(sm.k, SPLITK ? &p.k_half_map : &p.k_map, &sm.k_full, 0, sm.kv_head, 0, sm.page_physical[next],
                    createpolicy_evict_last());
    };
    auto issue_k_b = [&](int next) { // SPLITK: tokens 64..127
        mbarrier_arrive_expect_tx(&sm.k_full_b, kHalfTxBytes);
        tma_load_4d(sm.k + kHalfTxBytes, &p.k_half_map, &sm.k_full_b, 0, sm.kv_head, 64, sm.page_physical[next],
                    createpolicy_evict_last());
    };
    auto issue_v = [&](int next) {
        mbarrier_arrive_expect_tx(&sm.v_full, kTileBytes);
        bulk_load(sm.vt, prevt_tile(p, sm.kv_head, sm.page_vt[next]), kTileBytes, &sm.v_full,
                  createpolicy_evict_last());
    };
    if (tid == 0) {
        sm.kv_head = kv_head; // for the other warps: published by quantize_q's barrier below
        if (num_pages > 0) {  // page 0's copies (this thread reads its own store)
            prefetch_tensormap(SPLITK ? &p.k_half_map : &p.k_map);
            issue_k(0);
            if constexpr (SPLITK) issue_k_b(0);
            issue_v(0);
        }
    }

    const float k_scale = *p.k_scale;
    const float log2e = 1.4426950408889634f;
    quantize_q<kHeadsPerKv>(sm, p, kv_head, work.query_rows, k_scale * p.softmax_scale * log2e, 0u);
    fence_proxy_async_shared_cta();
    __syncthreads();

    if (lane == 0) {
#pragma unroll
        for (int w = 0; w < kSlotsPerCta; w++) {
            if (w == warp) {
                sm.warp_row[w] = work.query_rows[w];
                sm.warp_limit[w] = work.limits[w];
            }
        }
    }
    __syncwarp();
    const uint32_t q = lane % 4;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q);
    const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.k);
    const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt);

    float acc[32]; // half of the page's scores, then 256 p
#pragma unroll 1
    for (int i = 0; i < num_pages; i++) {
        const uint32_t parity = (uint32_t)i & 1u;
        const uint32_t members = sm.page_members[i]; // != 0: member pages only
        const bool member = (members >> warp) & 1u;  // warp-uniform
        const int vlim = sm.page_vlim[i];            // CTA-uniform
        // This warp's rows' score factors f (reloaded: lds_thread_rows_here) and the
        // softmax's: softmax_page folds f > 0 into the exponent's FFMA (g = f), else it
        // multiplies the scores first (g = 1).
        float f0, f1;
        auto factors = [&](float &g0, float &g1) {
            lds_thread_rows_here(sm.row_factor, f0, f1);
            const bool plain = !(f0 > 0.0f && f1 > 0.0f);
            g0 = plain ? 1.0f : f0;
            g1 = plain ? 1.0f : f1;
            return plain;
        };
        auto column_limit = [&]() {
            return page_column_limit<kPageSize>(lds_warp_s64_here(sm.warp_limit), sm.page_logical[i]);
        };

        // A page no member sees past token 63 (vlim < 64: every member's column limit is below
        // 64; CTA-uniform) skips pass 3 and pass 1's maxima: those scores would all be masked,
        // p = +0, which adds nothing to a row sum and packs to zero P words, so the bytes are
        // the same. Pass 1's wgmma, and the wait before it, always run (skipping that wgmma
        // made ptxas spill; under SPLITK the wait on tokens 64..127 must stay unconditional:
        // a warp that skipped it could arrive, and so arm the next phase, while this one is
        // still pending).
        const bool second_half = vlim >= 64;

        mbarrier_wait_parity(SPLITK ? &sm.k_full_b : &sm.k_full, parity);
        // Pass 1: the row maxima of tokens 64..127.
        float mx0 = -INFINITY, mx1 = -INFINITY;
        quad_qk_half(acc, desc_q, desc_k, 1);
        if (second_half && member) {
            float g0, g1;
            const bool plain = factors(g0, g1);
            quad_prepare_half(acc, 1, column_limit(), q, f0, f1, plain);
            row_max_tree<kLeanMaxWidth, 64>(acc, mx0, mx1); // half a page: exact, as the page's
        }
        // Pass 2: tokens 0..63; the page's maxima, then their p and P words.
        if constexpr (SPLITK) mbarrier_wait_parity(&sm.k_full, parity);
        quad_qk_half(acc, desc_q, desc_k, 0);
        if constexpr (SPLITK) lean_release(&sm.k_done, i + 1, num_pages, issue_k); // tokens 0..63: done
        float alpha0 = 1.0f, alpha1 = 1.0f, s0 = 0.0f, s1 = 0.0f;
        if (member) {
            float g0, g1;
            const bool plain = factors(g0, g1);
            quad_prepare_half(acc, 0, column_limit(), q, f0, f1, plain);
            float ma0, ma1;
            row_max_tree<kLeanMaxWidth, 64>(acc, ma0, ma1);
            // A member page always holds a visible token, so the maxima are finite.
            softmax_rows_max(fmaxf(ma0, mx0), fmaxf(ma1, mx1), g0, g1, m0, m1, alpha0, alpha1);
            quad_exp_half(acc, g0, g1, 8.0f - m0, 8.0f - m1, s0, s1);
        }
        uint32_t pa[16];
        quad_p_words(acc, 0, member, pa);
        // Pass 3: tokens 64..127 again; then K is free.
        if (second_half) quad_qk_half(acc, desc_q, desc_k, 1);
        if constexpr (SPLITK) lean_release(&sm.k_done_b, i + 1, num_pages, issue_k_b);
        else lean_release(&sm.k_done, i + 1, num_pages, issue_k);
        if (member) {
            if (second_half) {
                float g0, g1;
                const bool plain = factors(g0, g1);
                quad_prepare_half(acc, 1, column_limit(), q, f0, f1, plain);
                quad_exp_half(acc, g0, g1, 8.0f - m0, 8.0f - m1, s0, s1);
            }
            softmax_rows_sum(s0, s1, alpha0, alpha1, l0, l1);
        }
        quad_p_words(acc, 1, member && second_half, pa);
        const uint32_t pl_unused[1] = {0u};
        prevt_wait_zeroed<false, Plan>(sm, parity, vlim);
        // PV in two halves of the head dimension, each into a freshly zeroed accumulator;
        // member rows add it to O (the lean kernel's).
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float pv[32];
            pv_part<false, 64>(pv, pa, pl_unused, desc_vt + (uint64_t)(h * 64 * kPageSize >> 4));
            if (member) pv_add_to_o<64>(o, pv, h, alpha0, alpha1);
        }
        wgmma_fence_operand(pa);
        lean_release(&sm.v_done, i + 1, num_pages, issue_v);
    }
    const int32_t row_end = lds_warp_s32_here(sm.warp_row);
    if (row_end >= 0) store_rows<kHeadsPerKv>(p, o, row_end, sm.kv_head, lane, m0, m1, l0, l1, *p.v_scale);
}

/* Dev impl 15's (SPLITK: 16's) launch (Union4, FP8, the pre-pass's tiles, G = 16, K = 16,
 * P = 128; the caller checked the shape; SPLITK: and encoded p.k_half_map). */
template <int VARIANT, bool SPLITK>
pw_status_t launch_quad(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0};
    return launch_one_cta_kind(quad_attention_kernel<VARIANT, SPLITK>, kSmemBytesQuad, configured,
                               SPLITK ? "quad, split K" : "quad", params, grid, stream);
}

} // namespace pw

#endif
