/* attention.cu — the sparse attention kernels of docs/semantics.md §4 on sm_90a.
 *
 *   Union8    (paper §4.2-4.3): a 2-CTA cluster per 8-slot group and KV head. CTA r owns
 *             slots 4r..4r+3 = 64 rows (4 queries x 16 heads), one M64 wgmma tile. CTA 0's
 *             thread 0 multicasts each union page's K and V tiles (16 KiB each) into
 *             both CTAs; kStages slots per CTA; "page landed" (full) and "slot released by
 *             both CTAs" (empty, in CTA 0) are separate barriers.
 *   Union4:   the same arithmetic, one CTA per 4-slot half of the 8-slot group, walking
 *             only the pages its half selected.
 *   PerQuery: one CTA per (query, KV head), rows 0..15 used; walks the query's own Top-K
 *             row (the design of SGLang's native SM90 sparse prefill).
 *
 * Arithmetic (docs/semantics.md §4, mirrored by pw_ref_attention(PW_REF_FP8_EMULATE)):
 *   q_scale = amax|q_row| / 448, q8 = e4m3(q / q_scale); scores from the FP8 QK wgmma,
 *   x = acc * q_scale * k_scale * s, kept in log2 units; FP32 running max m and sum l;
 *   per page, p = 2^(x - m), p8 = e4m3(256 p), the page's PV is computed into a freshly
 *   zeroed accumulator (scale-d = 0) and added in FP32 registers to O, for member rows
 *   only, after O *= 2^(m_old - m_new). o = O * v_scale / (256 l), BF16; LSE = m + ln l.
 *   (In the code 256 p is produced directly as 2^(acc * f - m + 8), one FFMA and one ex2
 *   per score, and l is kept as 256 * sum p: the same values up to float rounding.)
 * Versions and what each measured: bench/NOTES.md.
 *   Each row sees exactly its own pages in ascending order, so O and LSE are bitwise the
 *   same whichever group a query executes in.
 *
 * Layouts: a warp of the consumer warpgroup owns accumulator rows 16w..16w+15, i.e. one
 * query slot (rows are slot*16 + head), so member and causal masks are warp-uniform.
 * The PV reduction axis ("position") is a fixed permutation of the page's 128 tokens,
 * chosen so that both P (written from the QK accumulator) and V^T (transposed from the
 * TMA tile) are written with 4-byte stores and no shuffles:
 *   token t = 16a + 8b + 2q + e  <->  position 16a + 4q + 2b + e   (a<8, b<2, q<4, e<2).
 *
 * Implementations (template IMPL, pw_union_attention_dev in attention_dev.h; the public
 * pw_union_attention runs impl 6 for Union8 and Union4 and impl 9, the lean kernel of
 * attention_lean.cuh, for per-query; the full call's Union4 runs impl 10 on large inputs
 * (the plan's rule; impls 13 / 14, the dense tiles, at G = 8 / 4 unless FP8X2 with per-token scales): the fastest measured, bench/NOTES.md v6 and v8). All give the same bytes: each row still sees
 * its own pages in ascending order with the same arithmetic. Impls 1, 3 (A: a decoupled
 * cluster; A + B), 4 (C: a warp-specialised Union8 CTA), 5 (B + pipelined QK) and 7
 * (impl 6 with a batched transpose) measured slower or no faster and left the tree (git
 * history and bench/NOTES.md v5, v6 have them).
 *   impl 0  v4 (bench/NOTES.md). Union8 in lock-step: both CTAs wait for every union page,
 *           CTA 0 refills a stage once both released it.
 *   impl 2  B, "P from registers". The PV wgmma takes A (P, e4m3) from registers
 *           (wgmma_m64n128k32_f32_e4m3_rs). The position permutation above makes each
 *           thread's P words exactly its A fragments (PTX ISA 9.7.15.5.1.1.3, Figure 152,
 *           wgmma .m64nNk32 A for 8-bit types: register r of k-block kb holds row
 *           16 warp + lane/4 (+8 for r = 1, 3), columns 4 (lane%4) + 0..3 (+16 for r = 2, 3),
 *           i.e. positions 32kb + 16(r/2) + 4q + 0..3 = the word w(r%2) of a = 2kb + r/2),
 *           so V^T is unchanged. No P buffer, no P stores, no P proxy fence. One CTA barrier
 *           right after the transpose (after the QK wgmma wait), which both publishes V^T and
 *           ends every read of the stage: the stage is released there, before the softmax.
 *           Non-member warps still join the warpgroup-wide PV wgmma with P = 0 (their rows
 *           are not added). The end-of-page barrier stays: it keeps the next transpose off
 *           V^T until every warp's PV wgmma completed.
 *   impl 6  B + "idle-warp V transpose" (IMPL = kImplPRegs | kImplIdleVt; the library's
 *           since v6), every variant. On a page that some of the CTA's slots did not select,
 *           the warps of those slots (warp w = slot w) share the 8 d-chunks of the V
 *           transpose while the member warps wait for QK and run the softmax; only a page
 *           all four slots selected is transposed by every warp right after the QK issue,
 *           as in B. The one barrier before PV therefore moves after the softmax (it now
 *           also publishes V^T written by the non-member warps, after fence.proxy.async),
 *           and the stage is released there instead of before the softmax. The ncu profile
 *           of B (bench/NOTES.md) had ~20% of its stall samples in non-member warps waiting
 *           at the PV wgmma for the member warps' softmax, and the transpose on the chain
 *           of every page before the softmax.
 *   impl 8  impl 6 without the zeroing of V past the members' last visible token (below):
 *           the kernel before the cache-poison fix, kept only so that bench_kernels times
 *           both in one run (dev; NaN in an invisible V slot poisons whole rows there).
 *   impl 9, 10  the lean kernel (attention_lean.cuh; its own comment has its design and
 *           invariants), Union4 and per-query only.
 *   impl 12 "stacked FP8X2" (attention_stacked.cuh): Union4, FP8X2 only, on the pre-pass;
 *           the two terms in the rows of 2-slot tiles, one tile per CTA, tiles without a
 *           member skipped. Its own rounding of the FP8X2 arithmetic (not impl 6's bytes);
 *           faster where consecutive queries share few pages, slower on the captures
 *           (bench/NOTES.md v9). Since the twenty-first session also the full call's second
 *           FP8X2 tile, chosen per call on the device and run persistent there
 *           (pw_union_attention_vt). Impl 11 (both tiles in one CTA) left the tree.
 *   impls 15, 16 "quad" (impl 10 in FP8 at four CTAs per SM, QK 1.5 times) measured 6-16%
 *           slower than impl 10 and left the tree (bench/NOTES.md, fortieth session; code:
 *           commit 73193c6).
 *   Union4 and per-query have no cluster: they run impls 0, 2, 6, 8, 9 and 10 as given.
 *
 * Cache bytes no query may see (docs/semantics.md): every impl but 8 zeroes, in V^T, the
 * tokens of a page past the last token any of the CTA's member slots may see
 * (page_v_limit, computed once per page in the page list), because a masked token's P = 0
 * does not stop 0 x NaN = NaN in the PV sum of every row of the tile. Scores need nothing:
 * masked scores are selected to -inf before the row max and the exponential, so NaN in
 * K never propagates. Only pages that cross a member's causal position or the KV length
 * take the zeroing branch (CTA-uniform); tokens up to the limit are some member's visible
 * tokens, so the bytes the tensor cores read never depend on what invisible slots hold.
 *   PW_PRECISION_FP8X2 (kImplX2) runs on impls 2 and 6 (and 9, 10).
 *
 * Synchronisation invariants (the list the code relies on; "observed" = a wait returned):
 *  S1 (stage WAR) A CTA releases stage s only after a CTA barrier that follows every
 *     thread's last read of it: the QK wgmma waited for (wgmma.wait_group by each warp)
 *     and the transpose's loads done. v4: the end-of-page barrier; impl 2: the
 *     V^T barrier; impl 6: the V^T barrier, now after the softmax (member warps waited for
 *     QK before their softmax; non-member warps waited for QK after their share of the
 *     transpose, before that barrier); a lock-step page without members: the end-of-page
 *     barrier.
 *  S2 (full phases) full[s] of CTA c completes one phase per page that lands in stage s of
 *     c; phase m is page m of (s, c) in list order, and every thread of c waits for it with
 *     parity m & 1. Phase m + 1 cannot complete before every thread of c observed phase m:
 *     it needs the bytes of page m + 1 of (s, c), issued only after c released page m
 *     (S1: after a barrier behind every thread's wait on phase m), and its arming arrive,
 *     made by c's thread 0 after its own wait on phase m. So no waiter ever sees its barrier
 *     two phases ahead (which a parity wait would mistake for "not yet"), the bytes of page
 *     m + 1 never land in phase m (they would complete it early), and every phase is
 *     observed before an arrive of the next one (PTX ISA 9.7.13.15.4 requires it).
 *  S3 (arming) Exactly one arrive.expect_tx(32 KiB) per phase of full[s] (count 1), by
 *     thread 0 of the CTA, right after its wait on the previous phase (phase m + 1 after
 *     the wait on phase m), before CTA 0 can issue the page's copies.
 *  S4 (empty phases) empty[s] (count = CTAs of the cluster) completes one phase per release
 *     of a page of stage s. The producer waits for the release of page n - 1 of stage s
 *     (parity (n - 1) & 1) before issuing page n of stage s; the release of page n needs page n, so that barrier cannot be
 *     two phases ahead of its only waiter either, and each waited phase is observed
 *     before the next phase's arrive. The last phase of each barrier is never waited for
 *     and has no successor.
 *  S5 (V^T and P WAR/RAW) V^T and P are written with generic stores, then
 *     fence.proxy.async, then a CTA barrier, then read by the PV wgmma (async proxy); the
 *     next page's transpose writes V^T only after the end-of-page barrier that follows
 *     every warp's PV wgmma wait (impl 6: any warp may write any d-chunk of V^T; the
 *     chunks of a page are disjoint, and the V^T barrier orders all of them before the
 *     PV wgmma). B's P never touches shared memory; its registers are kept
 *     live (wgmma_fence_operand) until the PV wgmma has been waited for.
 *  S6 (exit) Neither CTA of a cluster leaves before the final cluster barrier: CTA 1 can
 *     still arrive on CTA 0's empty barriers and receive its multicast copies.
 * Deadlock freedom (lock-step): CTA 1 never waits for CTA 0 except through pages, and the
 *   producer waits only for the release of page i after issuing every page up to i + 1.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "attention_dev.h"
#include "attention_launch.cuh"
#include "attention_work.cuh"
#include "ptx.cuh"
#include "pw_internal.h"
#include <string.h>

#include <atomic>

namespace pw {

/* CTA 0's thread 0: load page `i` of the page list (K and V tiles of this KV head) into
 * stage `s` of every CTA of the cluster. */
template <int CLUSTER, class Plan>
static __device__ __forceinline__ void issue_page_load(Plan &sm, const AttentionParams &p, int i, int s,
                                                       int kv_head, uint64_t l2_policy)
{
    const int32_t page = sm.page_physical[i];
    if (CLUSTER == 2) {
        tma_load_4d_multicast(sm.kv[s][0], &p.k_map, &sm.full[s], 0x3, 0, kv_head, 0, page, l2_policy);
        tma_load_4d_multicast(sm.kv[s][1], &p.v_map, &sm.full[s], 0x3, 0, kv_head, 0, page, l2_policy);
    } else {
        tma_load_4d(sm.kv[s][0], &p.k_map, &sm.full[s], 0, kv_head, 0, page, l2_policy);
        tma_load_4d(sm.kv[s][1], &p.v_map, &sm.full[s], 0, kv_head, 0, page, l2_policy);
    }
}

/* Thread 0: this CTA is done with stage s (every thread's reads of it finished before the
 * CTA barrier that precedes this call). */
template <int CLUSTER, class Plan>
static __device__ __forceinline__ void release_stage(Plan &sm, int s)
{
    if (CLUSTER == 2) mbarrier_arrive_cluster(&sm.empty[s], 0);
    else mbarrier_arrive(&sm.empty[s]);
}

/* Lock-step producer (impl 0 and 2, Union4, per-query): once every CTA released stage s
 * (page i), load page i + kStages into it. */
template <int CLUSTER, class Plan>
static __device__ __forceinline__ void refill_stage(Plan &sm, const AttentionParams &p, int i, int s,
                                                    int num_pages, int kv_head, uint64_t l2_policy)
{
    if (i + kStages < num_pages) {
        if (CLUSTER == 2) mbarrier_wait_parity_cluster(&sm.empty[s], (i / kStages) & 1);
        else mbarrier_wait_parity(&sm.empty[s], (i / kStages) & 1);
        issue_page_load<CLUSTER>(sm, p, i + kStages, s, kv_head, l2_policy);
    }
}

template <int VARIANT, int IMPL>
__global__ void __launch_bounds__(kThreads, 2) sparse_attention_kernel(const __grid_constant__ AttentionParams p)
{
    constexpr int kCluster = VARIANT == kUnion8 ? 2 : 1;
    constexpr bool kPRegs = (IMPL & kImplPRegs) != 0;
    constexpr bool kX2 = (IMPL & kImplX2) != 0; // PW_PRECISION_FP8X2
    constexpr bool kIdleVt = (IMPL & kImplIdleVt) != 0;
    constexpr bool kNoVMask = (IMPL & kImplNoVMask) != 0; // dev impl 8: before the cache-poison fix
    static_assert(!kIdleVt || kPRegs, "idle-warp V transpose: on B only");
    static_assert(!kX2 || kPRegs, "FP8X2 keeps Q's second term in the P tile: B (P from registers) only");
    extern __shared__ uint8_t smem_raw[];
    SmemPlan &sm = smem_plan<SmemPlan>(smem_raw);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t rank = kCluster == 2 ? cluster_ctarank() : 0;

    // ---- which work this CTA owns -------------------------------------------------------
    CtaWork work;
    if (!cta_work<VARIANT>(p, rank, work)) return; // CTA-uniform; both CTAs of a cluster agree
    const int kv_head = work.kv_head, half = work.half, request = work.request, union_size = work.union_size;
    const int64_t group = work.group;
    const int32_t(&query_rows)[kSlotsPerCta] = work.query_rows;
    const int64_t(&limits)[kSlotsPerCta] = work.limits;

    if (tid == 0) {
        for (int s = 0; s < kStages; s++) {
            mbarrier_init(&sm.full[s], 1);
            mbarrier_init(&sm.empty[s], kCluster);
        }
        fence_mbarrier_init_release_cluster();
    }
    build_page_list<VARIANT>(sm, p, kv_head, group, half, request, query_rows[0], limits,
                             union_size); // ends with __syncthreads
    if (kCluster == 2) {
        barrier_cluster_arrive_release();
        barrier_cluster_wait_acquire();
    }
    const int num_pages = sm.num_pages;
    const bool producer = tid == 0 && (kCluster == 1 || rank == 0); // issues the TMA loads
    uint64_t keep_kv = 0;
    if (tid == 0) {
        // Thread 0 of every CTA arms its own full barriers (each CTA's barrier needs its own
        // expect-tx, also for multicast copies issued by CTA 0); CTA 0 issues the first loads.
        if (producer) {
            prefetch_tensormap(&p.k_map);
            prefetch_tensormap(&p.v_map);
            keep_kv = createpolicy_evict_last();
        }
        for (int i = 0; i < kStages && i < num_pages; i++) {
            mbarrier_arrive_expect_tx(&sm.full[i], kStageTxBytes);
            if (producer) issue_page_load<kCluster>(sm, p, i, i, kv_head, keep_kv);
        }
    }
    {
        // ---- consumer warpgroup ----------------------------------------------------------
        const float k_scale = *p.k_scale, v_scale = *p.v_scale;
        const float log2e = 1.4426950408889634f;
        quantize_q(sm, p, kv_head, query_rows, k_scale * p.softmax_scale * log2e, kX2 ? smem_u32(sm.p) : 0u);
        fence_proxy_async_shared_cta();
        __syncthreads();

        int32_t my_row = -1; // constant-index selects: a run-time index would put the
        int64_t my_limit = -1; // arrays in local memory
#pragma unroll
        for (int w = 0; w < kSlotsPerCta; w++) {
            if (w == warp) {
                my_row = query_rows[w];
                my_limit = limits[w];
            }
        }
        const uint32_t q = lane % 4;
        const int r0 = 16 * warp + lane / 4; // accumulator rows r0 and r0 + 8
        const float f0 = sm.row_factor[r0], f1 = sm.row_factor[r0 + 8];
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
        float o[64];
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.0f;
        const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q);
        const uint64_t desc_p = wgmma_desc_k_major_sw128(sm.p);
        const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt);
        const uint32_t vt_addr = smem_u32(sm.vt), p_addr = smem_u32(sm.p);

#pragma unroll 1
        for (int i = 0; i < num_pages; i++) {
            const int s = i % kStages;
            mbarrier_wait_parity(&sm.full[s], (i / kStages) & 1);
            // Phase (i / kStages) of full[s] is complete: arm the next one (page i + kStages)
            // before CTA 0 can issue its load.
            if (tid == 0 && i + kStages < num_pages) mbarrier_arrive_expect_tx(&sm.full[s], kStageTxBytes);
            const uint32_t members = sm.page_members[i];
            if (members != 0) { // CTA-uniform: skip pages none of this CTA's slots selected
                // FP8X2: + Q's second term . K, same accumulator (desc_p: its tile)
                qk_issue<kX2>(acc, desc_q, desc_p, wgmma_desc_k_major_sw128(sm.kv[s][0]));
                const bool member = (members >> warp) & 1u; // warp-uniform
                const int vlim = kNoVMask ? kPageSize - 1 : sm.page_vlim[i]; // CTA-uniform
                if constexpr (kIdleVt) {
                    // The warps whose slot did not select the page transpose V while the
                    // member warps run the softmax (the PV wgmma waits for both anyway);
                    // a page every slot selected is transposed by all four, as in B.
                    const uint32_t idle = ~members & 0xFu; // CTA-uniform
                    if (idle == 0u) {
                        transpose_v(vt_addr, smem_u32(sm.kv[s][1]), vlim); // overlaps the QK wgmma
                    } else if (!member) {
                        const int n_idle = __popc(idle), idle_rank = __popc(idle & ((1u << warp) - 1u));
#pragma unroll 1
                        for (int chunk = idle_rank; chunk < kHeadDim / 16; chunk += n_idle)
                            transpose_v_chunk(vt_addr, smem_u32(sm.kv[s][1]), (uint32_t)chunk, vlim);
                    }
                } else {
                    transpose_v(vt_addr, smem_u32(sm.kv[s][1]), vlim); // overlaps the QK wgmma
                }
                wgmma_wait_group<0>();
                wgmma_fence_operand(acc);
                if constexpr (kPRegs && !kIdleVt) {
                    // V^T is complete once every warp passed here, and stage s is no longer
                    // read (K: each warp waited for its QK wgmma above; V: the transpose's
                    // loads): one barrier, then the stage goes back to the producer while
                    // the softmax runs.
                    fence_proxy_async_shared_cta(); // V^T (generic stores) -> PV wgmma
                    __syncthreads();
                    if (tid == 0) release_stage<kCluster>(sm, s);
                }

                float alpha0 = 1.0f, alpha1 = 1.0f;
                uint32_t pa[16]; // kPRegs: P of this thread as the PV wgmma's A fragments
                uint32_t pl[kX2 ? 16 : 1]; // kX2: P's second term, same layout
#pragma unroll
                for (int k = 0; k < 16; k++) pa[k] = 0u; // non-member warps: rows of zeros, not added
#pragma unroll
                for (int k = 0; k < (kX2 ? 16 : 1); k++) pl[k] = 0u;
                if (member) {
                    softmax_page(acc, my_limit - (int64_t)sm.page_logical[i] * kPageSize, q, f0, f1, m0,
                                 m1, l0, l1, alpha0, alpha1);
#pragma unroll
                    for (int a = 0; a < 8; a++) {
                        uint32_t w0, w1;
                        p_words(acc, a, w0, w1);
                        if constexpr (kX2) p_words_lo(acc, a, w0, w1, pl[2 * a], pl[2 * a + 1]);
                        if constexpr (kPRegs) {
                            pa[2 * a] = w0;
                            pa[2 * a + 1] = w1;
                        } else {
                            st_shared_u32(p_addr + sw128(r0, a) + 4 * q, w0);
                            st_shared_u32(p_addr + sw128(r0 + 8, a) + 4 * q, w1);
                        }
                    }
                }
                if constexpr (!kPRegs) {
                    fence_proxy_async_shared_cta(); // P and V^T (generic stores) -> wgmma
                    __syncthreads();
                }
                if constexpr (kIdleVt) {
                    // V^T complete, stage s no longer read (QK waited for by every warp, the
                    // transpose's loads done): one barrier, the stage goes back, then PV.
                    fence_proxy_async_shared_cta(); // V^T (generic stores) -> PV wgmma
                    __syncthreads();
                    if (tid == 0) release_stage<kCluster>(sm, s);
                }
                wgmma_fence_operand(acc);
                wgmma_fence();
#pragma unroll
                for (int kb = 0; kb < kPageSize / 32; kb++) {
                    if constexpr (kPRegs)
                        wgmma_m64n128k32_f32_e4m3_rs(acc, pa[4 * kb], pa[4 * kb + 1], pa[4 * kb + 2], pa[4 * kb + 3],
                                                     desc_vt + 2 * kb, kb > 0);
                    else
                        wgmma_m64n128k32_f32_e4m3_ss(acc, desc_p + 2 * kb, desc_vt + 2 * kb, kb > 0);
                }
                if constexpr (kX2) { // + P's second term . V, same zeroed-per-page accumulator
#pragma unroll
                    for (int kb = 0; kb < kPageSize / 32; kb++)
                        wgmma_m64n128k32_f32_e4m3_rs(acc, pl[4 * kb], pl[4 * kb + 1], pl[4 * kb + 2], pl[4 * kb + 3],
                                                     desc_vt + 2 * kb, 1);
                }
                wgmma_commit_group();
                // The PV wgmma runs on the tensor cores: the producer's turn.
                if constexpr (kPRegs) {
                    if (producer) refill_stage<kCluster>(sm, p, i, s, num_pages, kv_head, keep_kv);
                }
                wgmma_wait_group<0>();
                wgmma_fence_operand(acc);
                if constexpr (kPRegs) wgmma_fence_operand(pa);
                if constexpr (kX2) wgmma_fence_operand(pl);
                if (member) {
#pragma unroll
                    for (int k = 0; k < 64; k++) o[k] = fmaf(o[k], (k % 4) < 2 ? alpha0 : alpha1, acc[k]);
                }
            }
            if constexpr (!kPRegs) {
                // Every thread is done with slot s (wgmma reads waited, V^T reads done): release
                // it (to CTA 0's empty barrier for a cluster). CTA 0 refills it with page
                // i + kStages once both CTAs released it.
                __syncthreads();
                if (tid == 0) {
                    if (kCluster == 2) mbarrier_arrive_cluster(&sm.empty[s], 0);
                    else mbarrier_arrive(&sm.empty[s]);
                    if (producer && i + kStages < num_pages) {
                        if (kCluster == 2) mbarrier_wait_parity_cluster(&sm.empty[s], (i / kStages) & 1);
                        else mbarrier_wait_parity(&sm.empty[s], (i / kStages) & 1);
                        issue_page_load<kCluster>(sm, p, i + kStages, s, kv_head, keep_kv);
                    }
                }
            } else {
                // kPRegs: a member page released its stage before the softmax; this barrier
                // only keeps the next page's transpose off V^T until every warp's PV wgmma
                // completed. A lock-step page without members (impl 2 of Union8) releases
                // here, after every thread's wait on full[s] above.
                __syncthreads();
                if (members == 0 && tid == 0) {
                    release_stage<kCluster>(sm, s);
                    if (producer) refill_stage<kCluster>(sm, p, i, s, num_pages, kv_head, keep_kv);
                }
            }
        }

        // ---- epilogue: o = O * v_scale / (256 l), BF16, straight to the original row -----
        if (my_row >= 0) store_rows(p, o, my_row, kv_head, lane, m0, m1, l0, l1, v_scale);
    }

    // Neither CTA of a cluster may exit while the other can still arrive on its barriers
    // or receive its multicast writes.
    if (kCluster == 2) {
        barrier_cluster_arrive_release();
        barrier_cluster_wait_acquire();
    }
}


} // namespace pw

#include "attention_lean.cuh" // dev impl 9 (v8 "lean")
#include "attention_dense.cuh" // dev impls 13 and 14 (G = 8 / 4 on a dense tile)
#include "attention_stacked.cuh" // dev impl 12 (v9 "stacked FP8X2"; its G = 4 work is the dense tiles')

/* ------------------------------------------------------------------------------------ */
/* Host side                                                                            */
/* ------------------------------------------------------------------------------------ */
namespace {

typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled from the driver, fetched at run time so that the library does not
 * link libcuda (binaries then load, and skip cleanly, on machines without a driver). */
pw_status_t get_encode_tiled(EncodeTiledFn *fn)
{
    static EncodeTiledFn cached = nullptr;
    if (!cached) {
        void *ptr = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                               cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !ptr)
            return pw_fail(PW_ERROR_CUDA, "cuTensorMapEncodeTiled not found in the driver (%s)",
                           cudaGetErrorString(e));
        cached = reinterpret_cast<EncodeTiledFn>(ptr);
    }
    *fn = cached;
    return PW_SUCCESS;
}

/* A cache [pages][P][Hkv][D] e4m3 as a 4-D tensor map (innermost first) with one page of
 * one KV head (P tokens x 128 bytes; P = 64 lands in rows 0..63 of a 128-row tile) per box,
 * 128B-swizzled for the wgmma descriptors. */
pw_status_t make_cache_map(CUtensorMap *map, const void *cache, const char *name, int64_t pages,
                           int kv_heads, int page_size, const pw_cache_strides_t &cs)
{
    EncodeTiledFn encode = nullptr;
    PW_TRY(get_encode_tiled(&encode));
    // Dimensions (d, KV head, token, page) whatever the layout (args.cache_layout): the
    // kernels' coordinates and the box ([P tokens][128 d] of one head and page) stay.
    const cuuint64_t dims[4] = {(cuuint64_t)pw::kHeadDim, (cuuint64_t)kv_heads, (cuuint64_t)page_size,
                                (cuuint64_t)pages};
    const cuuint64_t strides[3] = {(cuuint64_t)cs.head, (cuuint64_t)cs.token, (cuuint64_t)cs.page};
    const cuuint32_t box[4] = {(cuuint32_t)pw::kHeadDim, 1, (cuuint32_t)page_size, 1};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void *>(cache), dims,
                              strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.%s: cuTensorMapEncodeTiled failed (CUresult %d) for strides (page %lld, head "
                       "%lld, token %lld elements): pointer must be 16-byte aligned, strides multiples of 16",
                       name, (int)r, (long long)cs.page, (long long)cs.head, (long long)cs.token);
    return PW_SUCCESS;
}

/* The stacked tile's per-token scales (vt_prepare.cu): behind each pre-pass tile's E4M3 V^T
 * (tiles [Hkv x capacity], kVtTileBytes apart), 4 x 128 floats (K scales, V scales, their
 * prefix maxima, vs / vmax of the whole page), as a 3-D tensor map [tiles][4][128] (innermost first) with one tile's per
 * box. The kernel copies them with a tensor copy rather than cp.async.bulk: compute-sanitizer's
 * racecheck attributes a raw bulk copy's shared-memory write to the issuing thread and does
 * not order it before other warps' reads by the mbarrier's complete_tx (a false hazard; a
 * tensor copy has no writer thread). */
pw_status_t make_ts_map(CUtensorMap *map, const uint8_t *tiles, int64_t num_tiles)
{
    EncodeTiledFn encode = nullptr;
    PW_TRY(get_encode_tiled(&encode));
    const cuuint64_t dims[3] = {(cuuint64_t)pw::kPageSize, 4, (cuuint64_t)num_tiles};
    const cuuint64_t strides[2] = {(cuuint64_t)pw::kPageSize * 4, (cuuint64_t)pw::kVtTileBytes};
    const cuuint32_t box[3] = {(cuuint32_t)pw::kPageSize, 4, 1};
    const cuuint32_t elem[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<uint8_t *>(tiles + pw::kTileBytes),
                              dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return pw_fail(PW_ERROR_CUDA, "the V^T tiles' per-token scales: cuTensorMapEncodeTiled failed (CUresult %d)",
                       (int)r);
    return PW_SUCCESS;
}

} // namespace

extern "C" pw_status_t pw_check_attention_device(void)
{
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return pw_fail(PW_ERROR_NO_DEVICE,
                       "no usable CUDA device (no GPU or no NVIDIA driver on this machine?): CUDA says \"%s\"",
                       cudaGetErrorString(e));
    }
    if (major != 9)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "PageWeaver's kernels need an sm_90 (Hopper) GPU; device %d is sm_%d%d", dev,
                       major, minor);
    return PW_SUCCESS;
}

namespace {

/* One kernel of sparse_attention_kernel<VARIANT, IMPL>. */
/* A kernel's function attributes are per device: set them once per (kernel, device) on the
 * calling thread's current device. `done` is that kernel's set of configured devices (bit
 * d, devices 0..63; a device past 63 sets them on every launch). Two threads configuring
 * the same kernel on the same device at once both set the same values (harmless). */
static pw_status_t configure_kernel(const void *kernel, size_t smem, bool max_carveout, std::atomic<uint64_t> &done,
                                    const char *what)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "%s: cudaGetDevice: %s", what, cudaGetErrorString(e));
    const uint64_t bit = dev >= 0 && dev < 64 ? 1ull << dev : 0ull;
    if (bit && (done.load(std::memory_order_acquire) & bit)) return PW_SUCCESS;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess && max_carveout)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "%s: cudaFuncSetAttribute (dynamic shared memory %zu bytes) on device %d: %s", what,
                       smem, dev, cudaGetErrorString(e));
    done.fetch_or(bit, std::memory_order_release);
    return PW_SUCCESS;
}

template <int VARIANT, int IMPL>
pw_status_t launch(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0}; // devices this kernel's attributes are set on
    void (*kernel)(pw::AttentionParams) = pw::sparse_attention_kernel<VARIANT, IMPL>;
    const size_t smem = pw::kSmemBytes;
    PW_TRY(configure_kernel((const void *)kernel, smem, false, configured, "attention kernel"));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(pw::kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    if (VARIANT == pw::kUnion8) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, params);
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "attention kernel launch: %s", cudaGetErrorString(e));
    const cudaError_t last = cudaGetLastError();
    if (last != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "attention kernel launch: %s", cudaGetErrorString(last));
    return PW_SUCCESS;
}

} // namespace

/* attention_launch.cuh */
pw_status_t pw::launch_one_cta_kind(void (*kernel)(pw::AttentionParams), size_t smem, std::atomic<uint64_t> &configured,
                                const char *what, const pw::AttentionParams &params, unsigned grid,
                                pw_stream_t stream)
{
    char name[64];
    snprintf(name, sizeof name, "attention kernel (%s)", what);
    PW_TRY(configure_kernel((const void *)kernel, smem, true, configured, name));
    kernel<<<grid, pw::kThreads, smem, stream>>>(params);
    const cudaError_t last = cudaGetLastError();
    if (last != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "attention kernel launch (%s): %s", what, cudaGetErrorString(last));
    return PW_SUCCESS;
}

namespace {

template <int VARIANT, bool X2, bool PREVT = false>
pw_status_t launch_lean(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.page_size == 64) return pw::launch_lean_page64<VARIANT, X2, PREVT>(params, grid, stream);
    return pw::launch_lean_page<VARIANT, X2, PREVT, pw::kPageSize>(params, grid, stream);
}

std::atomic<int> g_dev_stack_ctas{0}; // pw_dev_set_stack_ctas: the persistent stacked grid's cap (0: none)

/* Dev impl 12 (attention_stacked.cuh): one tile per CTA, four CTAs per SM; `grid` counts
 * two CTAs per (group, KV head), this kernel runs four at G = 16 (2-slot tiles), two at G = 8
 * (one 4-slot tile per half), two at G = 4 (one 8-slot tile per group, the second item of a
 * pair its partner's or nothing: stack_item_block). */
template <int VARIANT, int G, bool TS, bool X2>
pw_status_t launch_stack1_g(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0};
    constexpr unsigned kTiles = (unsigned)pw::stack_tiles(G);
    unsigned ctas;
    if (params.stack_items > 0) { // persistent (the full call): kStack1CtasPerSm CTAs per SM take the items
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "stacked tile: SM count: %s", cudaGetErrorString(e));
        int64_t resident = (int64_t)sms * pw::kStack1CtasPerSm;
        const int cap = g_dev_stack_ctas.load(std::memory_order_relaxed); // tests only (pw_dev_set_stack_ctas)
        if (cap > 0 && cap < resident) resident = cap;
        ctas = (unsigned)(params.stack_items < resident ? params.stack_items : resident); // items = 2 grid < 2^32
    } else { // one item per CTA (the dev entry): kTiles CTAs per half
        if (grid > 0x7fffffffu / kTiles) return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 12: grid too large");
        ctas = kTiles * grid;
    }
    const char *name = TS ? (G == 16 ? "stack1 TS" : G == 8 ? "stack1 G = 8 TS" : "stack1 G = 4 TS")
                          : (G == 16 ? "stack1" : G == 8 ? "stack1 G = 8" : "stack1 G = 4");
    return pw::launch_one_cta_kind(pw::stack1_attention_kernel<VARIANT, G, TS, X2>, pw::kSmemBytesStack1, configured, name,
                                   params, ctas, stream);
}

/* G and per-token scales (params.ts_k / ts_v: the TS instance reads each page's scales from
 * the second half of its pre-pass tile, vt_prepare.cu). */
template <int VARIANT, bool TS, bool X2>
pw_status_t launch_stack1_ts(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.heads_per_kv == 8) return launch_stack1_g<VARIANT, 8, TS, X2>(params, grid, stream);
    if (params.heads_per_kv == 4) return launch_stack1_g<VARIANT, 4, TS, X2>(params, grid, stream);
    return launch_stack1_g<VARIANT, 16, TS, X2>(params, grid, stream);
}

/* X2: FP8X2's two terms; false: PW_PRECISION_FP8, the second term's rows 0 (Q's and P's),
 * so each row's sums add exactly 0 and the outputs are the lean kernel's and the dense
 * tiles' bytes (test_token_scales_on_tiles). */
template <int VARIANT, bool X2 = true>
pw_status_t launch_stack1(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.ts_k || params.ts_v) return launch_stack1_ts<VARIANT, true, X2>(params, grid, stream);
    return launch_stack1_ts<VARIANT, false, X2>(params, grid, stream);
}

/* Dev impls 13 (G = 8) and 14 (G = 4) (attention_dense.cuh): the dense tiles for the call's
 * K; pages of 64 tokens in attention_page64.cu. */
template <int G, bool X2>
pw_status_t launch_dense(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    if (params.page_size == 64) return pw::launch_dense_page64<G, X2>(params, grid, stream);
    return pw::launch_dense_page<G, X2, pw::kPageSize>(params, grid, stream);
}

/* One implementation of one variant: impl (bits of pw::ImplBits: 0, 2, 6, 8 and their
 * FP8X2 forms) or one of the lean kernel's dispatch values (kImplLean...). `grid` counts
 * two CTAs per (group, KV head). */
template <int VARIANT>
pw_status_t launch_impl(int impl, const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    // PW_PRECISION_FP8X2 (union_attention maps impls 2 and 6 to these)
    if (impl == (pw::kImplPRegs | pw::kImplX2)) return launch<VARIANT, pw::kImplPRegs | pw::kImplX2>(params, grid, stream);
    if (impl == (pw::kImplPRegs | pw::kImplIdleVt | pw::kImplX2))
        return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt | pw::kImplX2>(params, grid, stream);
    if (impl == pw::kImplLean || impl == pw::kImplLeanX2 || impl == pw::kImplLeanPreVt ||
        impl == pw::kImplLeanPreVtX2) {
        if constexpr (VARIANT == pw::kUnion8)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impls 9 and 10 (lean) run Union4 and per-query only");
        else if (impl == pw::kImplLeanX2) return launch_lean<VARIANT, true>(params, grid, stream);
        else if (impl == pw::kImplLeanPreVt) return launch_lean<VARIANT, false, true>(params, grid, stream);
        else if (impl == pw::kImplLeanPreVtX2) return launch_lean<VARIANT, true, true>(params, grid, stream);
        else return launch_lean<VARIANT, false>(params, grid, stream);
    }
    if (impl == pw::kImplDense8 || impl == pw::kImplDense8X2) {
        if constexpr (VARIANT != pw::kUnion4)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 13 (dense G = 8) runs on Union4 plans' groups only");
        else if (impl == pw::kImplDense8X2) return launch_dense<8, true>(params, grid, stream);
        else return launch_dense<8, false>(params, grid, stream);
    }
    if (impl == pw::kImplDense4 || impl == pw::kImplDense4X2) {
        if constexpr (VARIANT != pw::kUnion4)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 14 (dense G = 4) runs on Union4 plans' groups only");
        else if (impl == pw::kImplDense4X2) return launch_dense<4, true>(params, grid, stream);
        else return launch_dense<4, false>(params, grid, stream);
    }
    if (pw::impl_is_stacked(impl)) {
        if constexpr (VARIANT != pw::kUnion4)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 12 (the stacked tile) runs Union4 only");
        else if (impl == pw::kImplStack1PreVtFp8)
            return launch_stack1<VARIANT, false>(params, grid, stream);
        else
            return launch_stack1<VARIANT>(params, grid, stream);
    }
    if (impl == pw::kImplIdleVtDev) return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt>(params, grid, stream);
    if (impl == pw::kImplNoVMaskDev)
        return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt | pw::kImplNoVMask>(params, grid, stream);
    if (impl == pw::kImplPRegs) return launch<VARIANT, pw::kImplPRegs>(params, grid, stream);
    if (impl == 0) return launch<VARIANT, 0>(params, grid, stream);
    // Dev impls 1, 3, 4, 5, 7 left the tree (attention_config.cuh); union_attention rejects them first.
    return pw_fail(PW_ERROR_UNSUPPORTED, "attention: no implementation %d", impl);
}

pw::DevSchedule g_dev_schedule[3] = {}; // pw_dev_set_schedule: [0] halves, [1] groups, [2] pairs

pw_status_t union_attention(int impl, const pw_problem_t *problem, const pw_attention_args_t *args,
                            const pw_grouping_t *grouping, const int32_t *perm, const pw_union_meta_t *meta,
                            pw_kernel_t kernel, pw_stream_t stream, const pw_vt_buffers_t *vt = nullptr,
                            bool vt_fallback = false, bool dev_entry = false)
{
    PW_TRY(pw_check_gpu_attention_args(problem, args, kernel)); // src/attention_args.c
    const pw_token_scales_t token_scales = pw_args_token_scales(args);
    const bool padded_g = problem->q_heads_per_kv != pw::kHeadsPerKv;
    const bool has_ts = token_scales.k || token_scales.v;
    const bool wide_k = problem->topk > pw::kTopK;
    // K = 32 / 64, per-token scales and G = 8 / 4 run on the lean kernels (impls 9 and 10:
    // longer page lists, TS and G forms; impl 12, the stacked tile, also takes per-token
    // scales and G = 8 / 4 at K = 16): the library's Union4 kernel (impl 6) hands such
    // calls to impl 9, which gives the same bytes as impl 6 would (every kernel of one
    // arithmetic does). Dev impls 13 and 14 (the dense G = 8 / 4 tiles, 8 K / 16 K-entry
    // lists) take any K too: the library runs them at G = 8 / 4 on the pre-pass
    // (pw_dense_tile_g).
    // Pages of 64 tokens run on the lean and dense kernels only (their PAGE = 64 forms).
    const bool page64 = problem->page_size == 64;
    if ((wide_k || has_ts || padded_g || page64) && impl == pw::kImplIdleVtDev) impl = pw::kImplLeanDev;
    const bool lean_impl = impl == pw::kImplLeanDev || impl == pw::kImplLeanPreVtDev;
    const bool dense_impl = impl == pw::kImplDense8Dev || impl == pw::kImplDense4Dev;
    if (page64 && !lean_impl && !dense_impl)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "P=64: dev impl %d runs pages of 128 tokens only (the library's Union4 and per-query "
                       "kernels and dev impls 9, 10, 13 and 14 run P = 64)",
                       impl);
    if (wide_k && !lean_impl && !dense_impl)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "K=%d: dev impl %d runs K = 16 only (the library's kernels and dev impls 9, 10, 13 and "
                       "14 run K = 32 and 64)",
                       problem->topk, impl);
    if (dense_impl) {
        const int dense_g = impl == pw::kImplDense8Dev ? 8 : 4;
        if (problem->q_heads_per_kv != dense_g)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl %d (dense tile) runs G = %d only (G is %d)", impl, dense_g,
                           problem->q_heads_per_kv);
        if (has_ts && pw_args_precision(args) == PW_PRECISION_FP8X2)
            return pw_fail(PW_ERROR_UNSUPPORTED,
                           "args.token_scales: dev impl %d (dense G = %d) reads them in PW_PRECISION_FP8 only (FP8X2 "
                           "runs them on the stacked tile, dev impl 12, or the padded tile)",
                           impl, dense_g);
        if (kernel != PW_KERNEL_UNION4)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl %d (dense G = %d) runs with PW_KERNEL_UNION4 (its metadata)",
                           impl, dense_g);
    } else if (impl == pw::kImplStack1Dev && (padded_g || has_ts)) {
        // dev impl 12 at G = 8: one 4-slot tile (4 queries x 8 heads x 2 terms) per half; at
        // G = 4 one 8-slot tile (8 queries x 4 heads x 2 terms) per group; per-token scales
        // at every G (each page's scales behind its E4M3 V^T tile: vt_prepare.cu, ts_tiles)
    } else if ((has_ts || padded_g) && !lean_impl) {
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "%s: dev impl %d does not run it (the library's kernels and dev impls 9 and 10 do)",
                       padded_g ? "G != 16 Q heads per KV head" : "args.token_scales", impl);
    }
    if (impl == 1 || impl == 3 || impl == 4 || impl == 5 || impl == 7 || impl == 11)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "dev impl %d was removed: measured slower or no faster than the impl it varied "
                       "(bench/NOTES.md: 1 and 3 v5 A, 4 v5 C, 5 and 7 v6, 11 v9)",
                       impl);
    if (pw_args_precision(args) == PW_PRECISION_FP8X2) {
        // Two-term FP8 exists on B (impl 2) and on impl 6 (the library's), for every variant.
        if (impl == pw::kImplIdleVtDev) impl = pw::kImplPRegs | pw::kImplIdleVt | pw::kImplX2;
        else if (impl == pw::kImplLeanDev) impl = pw::kImplLeanX2;
        else if (impl == pw::kImplLeanPreVtDev) impl = pw::kImplLeanPreVtX2;
        else if (impl == pw::kImplStack1Dev) impl = pw::kImplStack1PreVtX2;
        else if (impl == pw::kImplDense8Dev) impl = pw::kImplDense8X2;
        else if (impl == pw::kImplDense4Dev) impl = pw::kImplDense4X2;
        else if (impl == pw::kImplPRegs)
            impl = pw::kImplPRegs | pw::kImplX2;
        else
            return pw_fail(PW_ERROR_UNSUPPORTED,
                           "PW_PRECISION_FP8X2 has no path in dev impl %d (impls 2, 6, 9, 10, 12, 13 and 14 have)", impl);
    } else if (impl == pw::kImplStack1Dev) {
        impl = pw::kImplStack1PreVtFp8; // FP8 on the stacked tile: the second term 0
    } else if (impl == pw::kImplLeanDev) {
        impl = pw::kImplLean;
    } else if (impl == pw::kImplLeanPreVtDev) {
        impl = pw::kImplLeanPreVt;
    } else if (impl == pw::kImplDense8Dev) {
        impl = pw::kImplDense8;
    } else if (impl == pw::kImplDense4Dev) {
        impl = pw::kImplDense4;
    }
    if (problem->num_tokens == 0) return PW_SUCCESS; // nothing enqueued: perm and meta are not read
    const pw_requests_t *rq = &args->requests;
    PW_TRY(pw_check_union_attention_buffers(problem, grouping, perm, meta, kernel)); // attention_args.c: both builds
    PW_TRY(pw_check_attention_device());

    pw::AttentionParams params;
    memset(&params, 0, sizeof params);
    const pw_cache_strides_t cache_strides = pw_args_cache_strides(problem, args);
    PW_TRY(make_cache_map(&params.k_map, args->k_cache, "k_cache", problem->num_cache_pages,
                          problem->num_kv_heads, problem->page_size, cache_strides));
    PW_TRY(make_cache_map(&params.v_map, args->v_cache, "v_cache", problem->num_cache_pages,
                          problem->num_kv_heads, problem->page_size, cache_strides));
    params.q = args->q;
    params.q_stride = args->q_stride;
    params.o = static_cast<uint16_t *>(args->o);
    params.o_stride = args->o_stride;
    params.lse = args->lse;
    params.k_scale = args->k_scale;
    params.v_scale = args->v_scale;
    params.sink_logits = pw_args_sinks(args);
    params.sink_keys = reinterpret_cast<const uint16_t *>(pw_args_sink_keys(args));
    params.ts_k = token_scales.k;
    params.ts_v = token_scales.v;
    params.ts_stride_h = token_scales.stride_h;
    params.ts_stride_t = token_scales.stride_t;
    params.topk_ids = args->topk_ids;
    params.cu_seqlens_q = rq->cu_seqlens_q;
    params.prefix_lens = rq->prefix_lens;
    params.kv_lens = rq->kv_lens;
    params.page_table = rq->page_table;
    params.page_table_stride = rq->page_table_stride;
    params.num_tokens = problem->num_tokens;
    params.num_requests = problem->num_requests;
    params.num_kv_heads = problem->num_kv_heads;
    params.num_cache_pages = problem->num_cache_pages;
    // 0 selects 1/sqrt(D) computed in double and rounded once, as the reference does.
    params.softmax_scale = problem->softmax_scale > 0.0f ? problem->softmax_scale : (float)(1.0 / sqrt((double)problem->head_dim));
    params.bad_page_count = args->bad_page_count;
    params.max_pages = problem->max_pages_per_request;
    params.heads_per_kv = problem->q_heads_per_kv;
    params.topk = problem->topk;
    params.page_size = problem->page_size;
    {
        // The longest-first CTA order: the full call's first launch on the tiles (union
        // preparation filled it for the kernel it chose: halves for the lean kernel, groups
        // for the dense tiles: groups, pairs), or the dev entry's (pw_dev_set_schedule, read
        // by pw_union_attention_dev calls only); none for every other launch
        // (the public pw_union_attention, the fallback launch). Only the Union4 lean and
        // dense kernels read it, and only a schedule of their kind of item.
        const bool dense8_impl = impl == pw::kImplDense8 || impl == pw::kImplDense8X2;
        const bool dense4_impl = impl == pw::kImplDense4 || impl == pw::kImplDense4X2;
        const bool stacked8 = pw::impl_is_stacked(impl) && problem->q_heads_per_kv == 8; // groups (its halves)
        const bool stacked4 = pw::impl_is_stacked(impl) && problem->q_heads_per_kv == 4; // pairs (their groups)
        const bool lean_impl = impl == pw::kImplLean || impl == pw::kImplLeanX2 || impl == pw::kImplLeanPreVt ||
                               impl == pw::kImplLeanPreVtX2 || pw::impl_is_stacked(impl); // halves
        const int kind = dense8_impl || stacked8 ? 1 : dense4_impl || stacked4 ? 2 : 0;
        const pw::DevSchedule none = {nullptr, nullptr, 0, 0};
        const pw::DevSchedule s = vt ? (vt_fallback ? none
                                                    : pw::DevSchedule{vt->sched_count, vt->sched_list, vt->sched_stride,
                                                                      vt->sched_dense})
                                     : dev_entry ? g_dev_schedule[kind]
                                                 : none;
        if (kernel == PW_KERNEL_UNION4 && (dense8_impl || dense4_impl || lean_impl) && s.count && s.kind == kind) {
            params.sched_count = s.count;
            params.sched_list = s.list;
            params.sched_stride = s.stride;
        }
    }
    if (vt) { // the full call's pre-pass: its tiles (impl 10), or the fallback launch's head test
        params.vt_tiles = vt_fallback ? nullptr : vt->tiles;
        params.vt_slots = vt_fallback ? nullptr : vt->slots;
        params.vt_touched = vt_fallback ? nullptr : vt->touched;
        params.vt_count = vt->count;
        params.vt_capacity = vt->capacity;
        params.vt_fallback = vt_fallback;
        if (!vt_fallback) { // which of the two FP8X2 tiles runs (pw_union_attention_vt)
            params.stack_mode = vt->stack_mode;
            params.stack_stat = vt->stack_stat;
        }
    }
    uint8_t *own = nullptr; // dev impl 10 without the full call's buffers: its own, for this call
    const bool stacked = pw::impl_is_stacked(impl);
    const bool dense = impl == pw::kImplDense8 || impl == pw::kImplDense8X2 || impl == pw::kImplDense4 ||
                       impl == pw::kImplDense4X2;
    if (stacked && kernel != PW_KERNEL_UNION4)
        return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 12 (the stacked tile) runs Union4 only");
    if ((impl == pw::kImplLeanPreVt || impl == pw::kImplLeanPreVtX2 || stacked || dense) && !vt) {
        if (kernel == PW_KERNEL_UNION8)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 10 (lean + V^T pre-pass) runs Union4 and per-query only");
        // Every page a query may see gets a tile: capacity R x max_pages per KV head.
        const size_t hkv = (size_t)problem->num_kv_heads, cap = (size_t)problem->num_requests * problem->max_pages_per_request;
        const size_t count_bytes = 256, slot_bytes = (hkv * cap * 4 + 255) / 256 * 256,
                     list_bytes = (hkv * cap * 8 + 255) / 256 * 256; // tiles 256-byte aligned (bulk copies: 16)
        const size_t bytes = count_bytes + slot_bytes + list_bytes + hkv * cap * pw::kVtTileBytes;
        cudaError_t e = cudaMallocAsync((void **)&own, bytes, (cudaStream_t)stream);
        if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "dev entry's V^T tiles: cudaMallocAsync(%zu): %s", bytes, cudaGetErrorString(e));
        pw_vt_buffers_t b;
        memset(&b, 0, sizeof b); // every field this path does not set: 0 / NULL (stack_mode NEVER)
        b.touched = NULL;
        b.count = reinterpret_cast<uint32_t *>(own);
        b.slots = reinterpret_cast<int32_t *>(own + count_bytes);
        b.list = reinterpret_cast<int64_t *>(own + count_bytes + slot_bytes);
        b.tiles = own + count_bytes + slot_bytes + list_bytes;
        b.capacity = (int64_t)cap;
        b.f16_tiles = stacked ? 0 : pw_args_f16_vt(args); // the stacked kernel reads E4M3 tiles
        b.ts_tiles = stacked; // and the per-token scales behind them (with the call's: make_ts_map)
        b.sched_count = NULL; // the dev entry's order: pw_dev_set_schedule
        b.sched_list = NULL;
        b.sched_stride = 0;
        b.sched_dense = 0;
        pw_status_t st = hkv * 4 <= count_bytes ? PW_SUCCESS : pw_fail(PW_ERROR_UNSUPPORTED, "dev entry's V^T tiles: Hkv > 64");
        if (st == PW_SUCCESS) {
            e = cudaMemsetAsync(b.count, 0, hkv * 4, (cudaStream_t)stream);
            st = e == cudaSuccess ? pw_vt_prepare(problem, args, &b, stream)
                                  : pw_fail(PW_ERROR_CUDA, "dev entry's V^T tiles: cudaMemsetAsync: %s", cudaGetErrorString(e));
        }
        if (st != PW_SUCCESS) {
            cudaFreeAsync(own, (cudaStream_t)stream);
            return st;
        }
        params.vt_tiles = b.tiles;
        params.vt_slots = b.slots;
        params.vt_touched = nullptr; // every visible page has a tile
        params.vt_count = b.count;
        params.vt_capacity = b.capacity;
    }
    pw_status_t status;
    if (stacked && has_ts && params.vt_tiles) { // the stacked tile's scales (a tensor map over the tiles)
        status = make_ts_map(&params.ts_map, params.vt_tiles, (int64_t)problem->num_kv_heads * params.vt_capacity);
        if (status != PW_SUCCESS) {
            if (own) cudaFreeAsync(own, (cudaStream_t)stream);
            return status;
        }
    }
    if (kernel == PW_KERNEL_PER_QUERY) {
        const int64_t grid = (int64_t)problem->num_tokens * problem->num_kv_heads;
        if (grid > 0x7fffffff) status = pw_fail(PW_ERROR_UNSUPPORTED, "N * Hkv = %lld CTAs exceeds the grid limit", (long long)grid);
        else status = launch_impl<pw::kPerQuery>(impl, params, (unsigned)grid, stream);
    } else {
        params.perm = perm;
        params.num_groups = meta->num_groups;
        params.groups = meta->groups;
        params.union_pages = meta->union_pages;
        params.member_masks = meta->member_masks;
        params.max_groups = meta->max_groups;
        params.union_capacity = meta->union_capacity;
        params.group_window = grouping->window;
        const int64_t grid = 2 * meta->max_groups * problem->num_kv_heads;
        // The stacked tile in the full call runs persistent (launch_stack1): its items.
        params.stack_items = stacked && params.stack_mode != PW_STACK_NEVER
                                 ? pw::stack_tiles(problem->q_heads_per_kv) * grid
                                 : 0;
        if (grid > 0x7fffffff) status = pw_fail(PW_ERROR_UNSUPPORTED, "2 * groups * Hkv = %lld CTAs exceeds the grid limit", (long long)grid);
        else if (kernel == PW_KERNEL_UNION8) status = launch_impl<pw::kUnion8>(impl, params, (unsigned)grid, stream);
        else status = launch_impl<pw::kUnion4>(impl, params, (unsigned)grid, stream);
    }
    if (own) {
        const cudaError_t e = cudaFreeAsync(own, (cudaStream_t)stream);
        if (e != cudaSuccess && status == PW_SUCCESS)
            status = pw_fail(PW_ERROR_CUDA, "dev entry's V^T tiles: cudaFreeAsync: %s", cudaGetErrorString(e));
    }
    return status;
}

} // namespace

/* The library's implementations (bench/NOTES.md): Union8 and Union4 run impl 6 (B with the
 * V transpose done by the warps without a member, v6); per-query runs impl 9, the lean
 * kernel (three CTAs per SM, v8: 10-20% faster there, but 4-17% slower than impl 6 on
 * Union4 chunks of <= 4,096 queries and only 3-5% faster on large ones). The full call's
 * Union4 runs impl 10 (lean on the V^T pre-pass's tiles: pw_union_attention_vt) where its
 * plan's rule says so. */
constexpr int kDefaultImplUnion = pw::kImplIdleVtDev;
constexpr int kDefaultImplPerQuery = pw::kImplLeanDev;

static_assert(pw::kGroupSize == PW_UNION_GROUP_SIZE, "pw_internal.h's copy of the union group size");

extern "C" pw_status_t pw_union_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                                          const pw_grouping_t *grouping, const int32_t *perm,
                                          const pw_union_meta_t *meta, pw_kernel_t kernel,
                                          pw_stream_t stream)
{
    return union_attention(kernel == PW_KERNEL_PER_QUERY ? kDefaultImplPerQuery : kDefaultImplUnion, problem, args,
                           grouping, perm, meta, kernel, stream);
}

extern "C" pw_status_t pw_union_attention_vt(const pw_problem_t *problem, const pw_attention_args_t *args,
                                             const pw_grouping_t *grouping, const int32_t *perm,
                                             const pw_union_meta_t *meta, const pw_vt_buffers_t *vt,
                                             pw_stream_t stream)
{
    if ((!vt || !vt->tiles || !vt->slots || !vt->count || vt->capacity < 1) && problem && problem->num_tokens > 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_union_attention_vt: V^T buffers missing");
    // G = 8 or 4 (FP8, or FP8X2 without per-token scales): the dense tiles (8 queries x 8 heads, or 16
    // queries x 4 heads = a pair of 8-query groups, per M64 tile, walking the whole union
    // once; the padded tile's bits; A-hot FP8X2 W128 kernel 0.70x (G = 8) / 0.60x (G = 4)
    // the time of the kernel that transposes V, bench/NOTES.md ninth session); otherwise the
    // lean kernel on the tiles.
    const int dense_g = pw_vt_runs_dense(problem, args);
    const int impl = dense_g == 8 ? pw::kImplDense8Dev : dense_g == 4 ? pw::kImplDense4Dev : pw::kImplLeanPreVtDev;
    // FP8X2 at G = 16, 8 or 4, K = 16, P = 128: the lean kernel (G = 16) or the dense tile
    // (G = 8 / 4), the stacked tile (dev impl 12), or both launched with the choice made on the
    // device (pw_vt_buffers_t.stack_mode).
    const int stack_mode = vt ? vt->stack_mode : PW_STACK_NEVER;
    if (vt && problem) PW_TRY(pw_check_vt_stack(problem, args, vt));
    if (stack_mode != PW_STACK_ALWAYS)
        PW_TRY(union_attention(impl, problem, args, grouping, perm, meta, PW_KERNEL_UNION4, stream, vt));
    if (stack_mode != PW_STACK_NEVER)
        PW_TRY(union_attention(pw::kImplStack1Dev, problem, args, grouping, perm, meta, PW_KERNEL_UNION4, stream, vt));
    // KV heads whose pages did not fit the tiles (possible only when the page table has more
    // entries than the capacity) run on the library's Union4 kernel.
    if (problem->num_tokens > 0 && (int64_t)problem->num_requests * problem->max_pages_per_request > vt->capacity)
        return union_attention(kDefaultImplUnion, problem, args, grouping, perm, meta, PW_KERNEL_UNION4, stream, vt,
                               true);
    return PW_SUCCESS;
}

namespace {
__global__ void poison_shared_memory_kernel(uint32_t word, uint32_t words)
{
    extern __shared__ uint32_t smem_words[];
    for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) smem_words[i] = word;
}
} // namespace

extern "C" pw_status_t pw_dev_poison_shared_memory(uint32_t word, pw_stream_t stream)
{
    int dev = 0, sms = 0, smem = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(poison_shared_memory_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) {
        poison_shared_memory_kernel<<<sms, 1024, smem, (cudaStream_t)stream>>>(word, (uint32_t)smem / 4u);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "pw_dev_poison_shared_memory: %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}

extern "C" void pw_dev_set_schedule(const uint32_t *count, const int32_t *list, int64_t stride, int dense)
{
    const int kind = dense == 1 || dense == 2 ? dense : 0;
    g_dev_schedule[kind] = pw::DevSchedule{count, list, stride, kind};
}

extern "C" void pw_dev_set_stack_ctas(int ctas)
{
    g_dev_stack_ctas.store(ctas > 0 ? ctas : 0, std::memory_order_relaxed);
}

extern "C" pw_status_t pw_union_attention_dev(int impl, const pw_problem_t *problem,
                                              const pw_attention_args_t *args, const pw_grouping_t *grouping,
                                              const int32_t *perm, const pw_union_meta_t *meta,
                                              pw_kernel_t kernel, pw_stream_t stream)
{
    if (impl < 0 || impl >= pw::kNumImpls)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_union_attention_dev: impl %d (0..%d)", impl,
                       pw::kNumImpls - 1);
    return union_attention(impl, problem, args, grouping, perm, meta, kernel, stream, nullptr, false, true);
}
