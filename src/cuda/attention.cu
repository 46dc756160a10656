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
 * pw_union_attention runs kDefaultImpl = impl 6, the fastest measured: bench/NOTES.md,
 * v6). All give the same bytes: each row still sees its own pages in ascending order with
 * the same arithmetic.
 *   impl 0  v4 (bench/NOTES.md). Union8 in lock-step: both CTAs wait for every union page,
 *           CTA 0 refills a stage once both released it.
 *   impl 1  A, "decoupled cluster" (Union8 only). D_i = {CTA c : one of c's 4 slots selected
 *           union page i} (member_masks: low nibble CTA 0, high nibble CTA 1). CTA 0's
 *           thread 0 (the producer, also a consumer) loads page i into stage i % kStages of
 *           the CTAs of D_i only (plain TMA for {0}, multicast mask 2 or 3 otherwise); a CTA
 *           not in D_i skips page i entirely (no wait, no arithmetic, no release). Per
 *           (stage s, CTA c) one empty barrier empty_cta[s][c] in CTA 0 (count 1; CTA 1
 *           arrives remotely). The producer issues pages in list order; before page j goes
 *           into stage s it waits, for each c in D_j that received an earlier page in s, for
 *           c's release of that page (PagePump keeps, per (s, c), "received one" and the
 *           parity of the phase that releases it). It runs at fixed points of CTA 0's own
 *           work: at the top of each of CTA 0's pages i (blocking until page i is issued,
 *           then whatever is already free), while CTA 0 waits for page i to land (polled with
 *           a 256 ns suspend hint), right after CTA 0 issues its PV wgmma, and after CTA 0's
 *           last page (blocking until every page is issued).
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
 *   impl 3  A + B.
 *   impl 4  C, "warp-specialised CTA" (Union8 only; union8_ws_kernel). One CTA of 384 threads
 *           per (8-slot group, KV head), no cluster, __launch_bounds__(384, 1). Warpgroup 0
 *           is the producer (setmaxnreg.dec to kRegsProducerC): its thread 0 issues plain TMA
 *           loads of K and V of union page i into stage i % kStagesC (3 stages, each K, V
 *           and V^T); all 128 threads wait for the page (full[s]), transpose V into vt[s],
 *           fence.proxy.async, bar.sync 1, 128, and thread 0 arrives on vtready[s]
 *           (count 1). Warpgroups 1 and 2 are consumers c = 0, 1 (setmaxnreg.inc to
 *           kRegsConsumerC), each owning slots 4c..4c+3 = 64 rows, one M64 tile, exactly
 *           the rows, layout and arithmetic of impl 2's CTA c: Q quantised into its own
 *           q[c] (bar.sync 2 + c, 128), then for every union page in list order: wait
 *           vtready[s] and full[s]; if one of its slots selected the page (member byte bits
 *           4c..4c+3), QK wgmma (SS), impl 2's softmax, PV wgmma (P from registers, V^T
 *           from vt[s]), O update of member rows; then bar.sync 2 + c, 128 and its thread 0
 *           arrives on empty[s] (count 2: one per consumer). Thread 0 of the producer
 *           waits for empty[s]'s phase of page i - kStagesC before it issues page i (pages
 *           up to the one being transposed block, later ones are only tested), and every
 *           producer thread waits for it before writing vt[s].
 *           Measured (H200, A-hot): bitwise equal to impl 0, as fast as impl 2 (-1% / -0.3%),
 *           racecheck / synccheck clean: a dev variant and the base of the next step
 *           (bench/NOTES.md, v5 C).
 *   impl 5  (removed 2026-12-01) B + the next page's QK wgmma in flight during the softmax
 *           (two score accumulators, 254-255 registers): measured 3.5-15% slower than B
 *           (bench/NOTES.md, v6); the cache-poison fix's per-page V limit made it spill, so
 *           it left the tree (git history has it). pw_union_attention_dev(5) gives
 *           PW_ERROR_UNSUPPORTED.
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
 *   impl 7  impl 6 with the non-member warps' transpose done two chunks per pass, both
 *           chunks' shared-memory loads issued before the first byte permute (dev).
 *   impl 8  impl 6 without the zeroing of V past the members' last visible token (below):
 *           the kernel before the cache-poison fix, kept only so that bench_kernels times
 *           both in one run (dev; NaN in an invisible V slot poisons whole rows there).
 *   Union4 and per-query have no cluster: they run impl & 2 (impl 4: 2; impl 6: 6;
 *   impl 7: 7; impl 8: 8).
 *
 * Cache bytes no query may see (docs/semantics.md): every impl but 8 zeroes, in V^T, the
 * tokens of a page past the last token any of the CTA's member slots may see
 * (page_v_limit, computed once per page in the page list), because a masked token's P = 0
 * does not stop 0 x NaN = NaN in the PV sum of every row of the tile. Scores need nothing:
 * masked scores are selected to -inf before the row max and the exponential, so NaN in
 * K never propagates. Only pages that cross a member's causal position or the KV length
 * take the zeroing branch (CTA-uniform); tokens up to the limit are some member's visible
 * tokens, so the bytes the tensor cores read never depend on what invisible slots hold.
 *   PW_PRECISION_FP8X2 (kImplX2) runs on impls 2 and 6.
 *
 * Synchronisation invariants (the list the code relies on; "observed" = a wait returned):
 *  S1 (stage WAR) A CTA releases stage s only after a CTA barrier that follows every
 *     thread's last read of it: the QK wgmma waited for (wgmma.wait_group by each warp)
 *     and the transpose's loads done. v4/impl 1: the end-of-page barrier; impl 2/3: the
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
 *     thread 0 of the CTA: v4/impl 2 arm phase m + 1 right after the wait on phase m;
 *     impl 1/3 arm the phase of page i at the top of page i, which may be before or after
 *     the bytes of page i land: PTX ISA 9.7.13.15.2 lets tx-count go down to -(2^20 - 1)
 *     and 9.7.13.15.6 completes a phase only when the pending arrivals AND the tx-count
 *     are zero, so bytes landing first leave the phase pending (tx-count -32768, one
 *     arrival missing) and arrive.expect_tx (expect-tx before the arrive-on, 9.7.13.15.5.1
 *     and mbarrier.arrive.expect_tx) then completes it; arming first leaves tx-count at
 *     +32768 until the bytes land. 32 KiB < 2^20.
 *  S4 (empty phases) empty[s] (lock-step, count = CTAs) / empty_cta[s][c] (decoupled,
 *     count 1) complete one phase per release of a page of stage s (of c). The producer
 *     waits for the release of page n - 1 of (s, c) (parity (n - 1) & 1) before issuing
 *     page n of (s, c); the release of page n needs page n, so that barrier cannot be
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
 *  S6 (decoupled destinations) A CTA receives page i iff it has a member of page i, and it
 *     waits for page i iff it has a member: the same byte of member_masks decides both, and
 *     both CTAs build the same page list (same indices, same stages).
 *  S7 (exit) Neither CTA leaves before the final cluster barrier: CTA 1 can still arrive on
 *     CTA 0's empty barriers, and CTA 0's producer issues CTA 1's pages until CTA 1 has
 *     waited for all of them (S6), so no copy lands in a CTA that has left.
 * Invariants of C (impl 4); "page i" is use u = i / kStagesC of stage s = i % kStagesC, and
 * each of full[s], vtready[s], empty[s] completes exactly one phase per use (phase u,
 * waited with parity u & 1):
 *  C1 (stage WAR) A consumer arrives on empty[s] for page i only after bar.sync 2 + c,
 *     which follows each of its warps' wgmma.wait_group of the QK and PV wgmmas that read
 *     kv[s][0] and vt[s]. The producer overwrites stage s (TMA into kv[s], generic stores
 *     into vt[s]) for page i + kStagesC only after observing both arrivals (thread 0
 *     before issuing, every producer thread before its transpose). The transpose's own
 *     reads of kv[s][1] precede bar.sync 1 and hence vtready(i) and both releases.
 *  C2 (no waiter two phases behind) full[s] phase u + 1 needs the TMA of page
 *     i + kStagesC, issued after empty(i), which needs both consumers' arrivals after
 *     their waits on full(i) and vtready(i), which follows bar.sync 1 after every producer
 *     thread's wait on full(i). vtready(i + kStagesC) needs a producer transpose after
 *     empty(i), i.e. after both consumers waited for vtready(i). empty(i + kStagesC) needs
 *     vtready(i + kStagesC), published after every producer thread waited for empty(i).
 *     So every waiter observes phase u before phase u + 1 can complete (no parity
 *     aliasing), and every phase is observed before the next phase's first arrive.
 *  C3 (no early release) A consumer whose slots did not select page i still waits for
 *     vtready(i) before arriving on empty[s]: otherwise two skipping consumers could
 *     complete empty(i) before the producer wrote V^T of page i and let page
 *     i + kStagesC into the stage while it is still being transposed. Both consumers
 *     arrive once per page, so arrivals of one phase never mix with the next (an arrive
 *     for page i + kStagesC follows vtready(i + kStagesC), after empty(i) completed).
 *  C4 (arming) thread 0 of the producer does the one arrive.expect_tx(32 KiB) of full[s]
 *     for page i right before issuing its two loads (S3).
 *  C5 (publication) V^T: generic stores, fence.proxy.async by each writer, bar.sync 1,
 *     128, then mbarrier.arrive (release) on vtready[s]; the consumers' wait (acquire)
 *     precedes their PV wgmma (as impl 2's fence + CTA barrier). K: each consumer thread
 *     also waits for full[s] itself before its QK wgmma. Q: fence.proxy.async and
 *     bar.sync 2 + c before the first QK wgmma.
 *  C6 (deadlock freedom, exit) Only __syncthreads before the role split (barrier init,
 *     page list). Afterwards the consumers wait only for the producer's vtready and full,
 *     which need only earlier releases; thread 0 of the producer blocks only for empty of
 *     pages at least kStagesC before the page being transposed, whose vtready it already
 *     published, so both consumers reach their arrivals. Every issued page is waited for
 *     by the producer before it exits, so no TMA lands in a finished CTA.
 * Deadlock freedom of impl 1/3. CTA 1 waits only for its own pages (each issued by the
 *   producer in list order) and its own CTA barriers: it never waits for CTA 0's work. The
 *   producer blocks only (a) at the top of CTA 0's own page i, for pages j <= i, and (b)
 *   after CTA 0's last page, for every page. Such a wait is for the release of an earlier
 *   page k < j of stage j % kStages by a CTA c in D_j. If c = 0, k is one of CTA 0's pages
 *   before i (or any of them in (b)), already consumed and released in program order
 *   before this point: the wait returns at once. If c = 1, every page up to j - 1 has been
 *   issued, so CTA 1 can consume all of its pages up to k without CTA 0 and then releases
 *   k: the wait ends. Everywhere else the producer only tests (mbarrier.test_wait) and
 *   moves on. So the case "producer blocked on CTA 1's release while CTA 1 waits for a page
 *   the producer has not issued" cannot arise: CTA 1's pages up to k are all issued when
 *   the producer starts waiting for k. Lock-step impls (0, 2) keep v4's argument: CTA 1
 *   never waits for CTA 0 except through pages, and the producer waits only for the
 *   release of page i after issuing every page up to i + 1.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "attention_dev.h"
#include "ptx.cuh"
#include "pw_internal.h"
#include <string.h>

#include <atomic>

namespace pw {

/* The per-CTA page list: the pages this CTA walks (ascending logical id), their physical
 * pages and the member bits of this CTA's 4 slots (with DEST, decoupled Union8, also D_i:
 * bit c set when CTA c has a member). Pages whose physical id is outside the cache are
 * dropped (and counted). Every CTA of a cluster builds the same page sequence. */
template <int VARIANT, bool DEST, class Plan>
static __device__ void build_page_list(Plan &sm, const AttentionParams &p, int kv_head,
                                       int64_t group, int half, int request, int32_t query_row,
                                       const int64_t (&limits)[kSlotsPerCta], int union_size)
{
    const int64_t query_limit = limits[0]; // per-query: the query's last visible token
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int32_t logical = -1;
    uint32_t members = 0; // this CTA's 4 slot bits
    uint32_t dest = 0;    // DEST: bit c = CTA c has a member
    if (VARIANT == kPerQuery) {
        // The query's own Top-K row: valid ids (docs/semantics.md §1), distinct, ascending.
        if (tid < kTopK) {
            const int32_t *row = p.topk_ids + ((int64_t)kv_head * p.num_tokens + query_row) * kTopK;
            const int32_t id = row[tid];
            const bool valid = id >= 0 && (int64_t)id <= query_limit / kPageSize;
            bool first = valid;
            for (int k = 0; k < tid; k++) first = first && row[k] != id;
            if (first) {
                logical = id;
                members = 1u;
            }
        }
    } else {
        if (tid < union_size) {
            const int64_t base = ((int64_t)kv_head * p.max_groups + group) * p.union_capacity;
            logical = p.union_pages[base + tid];
            members = (p.member_masks[base + tid] >> (4 * half)) & 0xFu;
            if (DEST) {
                const uint32_t mask = p.member_masks[base + tid];
                dest = ((mask & 0x0Fu) != 0u ? 1u : 0u) | ((mask & 0xF0u) != 0u ? 2u : 0u);
            }
            if (VARIANT == kUnion4 && members == 0) logical = -1; // Union4 skips its half's non-pages
        }
    }
    int32_t physical = -1;
    if (logical >= 0) {
        physical = p.page_table[(int64_t)request * p.page_table_stride + logical];
        // A V^T tile exists for logical pages < vt_pages only (the lean kernel on the pre-pass;
        // a larger id needs kv_len > max_pages_per_request * P, broken device data).
        if (p.vt_tiles && (int64_t)logical >= p.vt_pages) physical = -1;
        if (physical < 0 || (int64_t)physical >= p.num_cache_pages) {
            // Invalid physical page: never read, contributes nothing, counted once per
            // (query, KV head, page) by the CTA that owns the query.
            if (p.bad_page_count && members) atomicAdd(p.bad_page_count, (uint32_t)__popc(members));
            logical = -1;
        }
    }
    // Order-preserving compaction of the kept entries.
    const bool keep = logical >= 0;
    const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) sm.warp_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0;
    for (int w = 0; w < warp; w++) offset += sm.warp_count[w];
    if (keep) {
        const int at = offset + __popc(ballot & ((1u << lane) - 1u));
        sm.page_logical[at] = logical;
        sm.page_physical[at] = physical;
        sm.page_members[at] = (uint8_t)members;
        sm.page_vlim[at] = page_v_limit(members, limits, logical);
        if constexpr (DEST) sm.page_dest[at] = (uint8_t)dest;
    }
    if (tid == 0) {
        int total = 0;
        for (int w = 0; w < kThreads / 32; w++) total += sm.warp_count[w];
        sm.num_pages = total;
    }
    // For the per-query variant the kept ids are distinct but not yet sorted: sort the (at
    // most 16) entries by rank after the barrier.
    __syncthreads();
    if (VARIANT == kPerQuery) {
        const int n = sm.num_pages;
        int32_t my_page = -1, my_phys = -1;
        uint8_t my_vlim = 0;
        int rank = 0;
        if (tid < n) {
            my_page = sm.page_logical[tid];
            my_phys = sm.page_physical[tid];
            my_vlim = sm.page_vlim[tid];
            for (int k = 0; k < n; k++) rank += sm.page_logical[k] < my_page;
        }
        __syncthreads();
        if (tid < n) {
            sm.page_logical[rank] = my_page;
            sm.page_physical[rank] = my_phys;
            sm.page_members[rank] = 1;
            sm.page_vlim[rank] = my_vlim;
        }
        __syncthreads();
    }
}

/* q_lo_addr: 0, or (PW_PRECISION_FP8X2) the tile for Q's second term. */
template <class Plan>
static __device__ __forceinline__ void quantize_q(Plan &sm, const AttentionParams &p, int kv_head,
                                                  const int32_t (&query_rows)[kSlotsPerCta], float score_scale,
                                                  uint32_t q_lo_addr)
{
    quantize_q_rows(smem_u32(sm.q), q_lo_addr, sm.row_factor, threadIdx.x, p, kv_head, query_rows, score_scale);
}

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

/* Decoupled Union8 (kImplDecoupled): the producer's state, kept by CTA 0's thread 0. */
struct PagePump {
    int next;       // the next page of the list to issue; pages are issued in list order
    uint32_t slots; // per (stage s, CTA c), bit 2(2s+c): c has received a page in stage s;
                    // bit 2(2s+c)+1: parity of the empty_cta[s][c] phase that releases it
};

/* Decoupled Union8, CTA 0's thread 0: issues pages pump.next, pump.next + 1, ... in list
 * order, page j into stage j % kStages of the CTAs in D_j = sm.page_dest[j] only. Before
 * that, every CTA c of D_j that already received a page in that stage must have released
 * it (phase `parity` of empty_cta[s][c] complete). Pages j <= block_until wait for those
 * releases; later pages are issued only if the releases already happened (test_wait, never
 * suspending), and the pump stops at the first page that is not ready. */
static __device__ __forceinline__ void pump_pages(PagePump &pump, SmemPlan &sm, const AttentionParams &p,
                                                  int num_pages, int block_until, int kv_head,
                                                  uint64_t l2_policy)
{
#pragma unroll 1
    while (pump.next < num_pages) {
        const int j = pump.next, s = j % kStages;
        const uint32_t dest = sm.page_dest[j];
        const bool block = j <= block_until;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const uint32_t at = 2u * (2u * s + c);
            if (((dest >> c) & 1u) && ((pump.slots >> at) & 1u)) {
                const uint32_t parity = (pump.slots >> (at + 1)) & 1u;
                if (block) {
                    if (c == 0) mbarrier_wait_parity(&sm.empty_cta[s][0], parity);
                    else mbarrier_wait_parity_cluster(&sm.empty_cta[s][1], parity);
                } else {
                    const uint32_t done = c == 0 ? mbarrier_test_wait_parity(&sm.empty_cta[s][0], parity)
                                                 : mbarrier_test_wait_parity_acquire_cluster(&sm.empty_cta[s][1], parity);
                    if (!done) return; // nothing issued, nothing changed: retried later
                }
            }
        }
        const int32_t page = sm.page_physical[j];
        if (dest == 1u) { // CTA 0 alone: a plain copy
            tma_load_4d(sm.kv[s][0], &p.k_map, &sm.full[s], 0, kv_head, 0, page, l2_policy);
            tma_load_4d(sm.kv[s][1], &p.v_map, &sm.full[s], 0, kv_head, 0, page, l2_policy);
        } else if (dest != 0u) { // CTA 1 alone (mask 2) or both (mask 3)
            tma_load_4d_multicast(sm.kv[s][0], &p.k_map, &sm.full[s], (uint16_t)dest, 0, kv_head, 0, page, l2_policy);
            tma_load_4d_multicast(sm.kv[s][1], &p.v_map, &sm.full[s], (uint16_t)dest, 0, kv_head, 0, page, l2_policy);
        }
#pragma unroll
        for (int c = 0; c < 2; c++) {
            if ((dest >> c) & 1u) { // the first page of (s, c): set "received"; later: flip the parity
                const uint32_t at = 2u * (2u * s + c);
                pump.slots ^= ((pump.slots >> at) & 1u) ? (2u << at) : (1u << at);
            }
        }
        pump.next = j + 1;
    }
}

/* Thread 0: this CTA is done with stage s (every thread's reads of it finished before the
 * CTA barrier that precedes this call). */
template <int CLUSTER, bool DECOUPLED, class Plan>
static __device__ __forceinline__ void release_stage(Plan &sm, int s, uint32_t rank)
{
    if constexpr (DECOUPLED) {
        if (rank == 0) mbarrier_arrive(&sm.empty_cta[s][0]);
        else mbarrier_arrive_cluster(&sm.empty_cta[s][1], 0);
    } else if (CLUSTER == 2) {
        mbarrier_arrive_cluster(&sm.empty[s], 0);
    } else {
        mbarrier_arrive(&sm.empty[s]);
    }
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

/* Which work a CTA owns: its KV head, request, group (union variants) and half (Union8: the
 * cluster rank), the original rows of its 4 query slots (-1: empty slot) and each slot's
 * last visible token. false: nothing to do (a group past num_groups, or the empty second
 * half of a Union4 group); CTA-uniform, and both CTAs of a cluster agree. */
struct CtaWork {
    int kv_head, half, request, union_size;
    int64_t group;
    int32_t query_rows[kSlotsPerCta];
    int64_t limits[kSlotsPerCta];
};

template <int VARIANT>
static __device__ __forceinline__ bool cta_work(const AttentionParams &p, uint32_t rank, CtaWork &w)
{
    int num_members = 0;
    w.half = 0;
    w.request = 0;
    w.union_size = 0;
    w.group = 0;
#pragma unroll
    for (int k = 0; k < kSlotsPerCta; k++) w.query_rows[k] = -1;
    if (VARIANT == kPerQuery) {
        w.kv_head = blockIdx.x / p.num_tokens;
        w.query_rows[0] = blockIdx.x % p.num_tokens;
        int lo = 0, hi = p.num_requests - 1; // request r with cu[r] <= n < cu[r+1]
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.cu_seqlens_q[mid] <= w.query_rows[0]) lo = mid; else hi = mid - 1;
        }
        w.request = lo;
        num_members = 1;
    } else {
        const int64_t item = blockIdx.x / 2;
        w.half = VARIANT == kUnion8 ? (int)rank : (int)(blockIdx.x % 2);
        w.kv_head = (int)(item / p.max_groups);
        w.group = item % p.max_groups;
        if (w.group >= p.num_groups[w.kv_head]) return false;
        const pw_group_desc_t g = p.groups[(int64_t)w.kv_head * p.max_groups + w.group];
        w.request = g.request;
        num_members = g.num_members;
        w.union_size = g.union_size;
        if (VARIANT == kUnion4 && num_members <= 4 * w.half) return false; // empty half, no cluster peer
        for (int k = 0; k < kSlotsPerCta; k++) {
            const int slot = 4 * w.half + k;
            if (slot < num_members)
                w.query_rows[k] = p.perm[(int64_t)w.kv_head * p.num_tokens + g.slot_begin + slot];
        }
    }
    const int32_t cu_begin = p.cu_seqlens_q[w.request];
    const int64_t prefix = p.prefix_lens[w.request], kv_len = p.kv_lens[w.request];
    // Last visible token of each slot's query: min(c, L - 1) (docs/semantics.md §1).
#pragma unroll
    for (int k = 0; k < kSlotsPerCta; k++) {
        const int64_t c = prefix + (w.query_rows[k] - cu_begin);
        w.limits[k] = w.query_rows[k] >= 0 ? (c < kv_len - 1 ? c : kv_len - 1) : -1;
    }
    return true;
}

template <int VARIANT, int IMPL>
__global__ void __launch_bounds__(kThreads, 2) sparse_attention_kernel(const __grid_constant__ AttentionParams p)
{
    constexpr int kCluster = VARIANT == kUnion8 ? 2 : 1;
    constexpr bool kDecoupled = kCluster == 2 && (IMPL & kImplDecoupled) != 0;
    constexpr bool kPRegs = (IMPL & kImplPRegs) != 0;
    constexpr bool kX2 = (IMPL & kImplX2) != 0; // PW_PRECISION_FP8X2
    constexpr bool kIdleVt = (IMPL & kImplIdleVt) != 0;
    constexpr bool kVtBatch = (IMPL & kImplVtBatch) != 0;
    constexpr bool kNoVMask = (IMPL & kImplNoVMask) != 0; // dev impl 8: before the cache-poison fix
    static_assert(!kVtBatch || kIdleVt, "batched transpose: on impl 6 only");
    static_assert(!kIdleVt || (kPRegs && !kDecoupled), "idle-warp V transpose: on B only");
    static_assert(!kX2 || kPRegs, "FP8X2 keeps Q's second term in the P tile: B (P from registers) only");
    extern __shared__ uint8_t smem_raw[];
    SmemPlan &sm = *reinterpret_cast<SmemPlan *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));

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
            if constexpr (kDecoupled) {
                mbarrier_init(&sm.empty_cta[s][0], 1); // used in CTA 0 only
                mbarrier_init(&sm.empty_cta[s][1], 1);
            } else {
                mbarrier_init(&sm.empty[s], kCluster);
            }
        }
        fence_mbarrier_init_release_cluster();
    }
    build_page_list<VARIANT, kDecoupled>(sm, p, kv_head, group, half, request, query_rows[0], limits,
                                         union_size); // ends with __syncthreads
    if (kCluster == 2) {
        barrier_cluster_arrive_release();
        barrier_cluster_wait_acquire();
    }
    const int num_pages = sm.num_pages;
    const bool producer = tid == 0 && (kCluster == 1 || rank == 0); // issues the TMA loads
    uint64_t keep_kv = 0;
    PagePump pump = {0, 0u}; // decoupled Union8: the producer's state
    if (kDecoupled) {
        // Every CTA arms its full barrier right before it waits for each of its own pages
        // (the bytes may land before or after: see the file comment); CTA 0 issues the
        // first page of each stage now.
        if (producer) {
            prefetch_tensormap(&p.k_map);
            prefetch_tensormap(&p.v_map);
            keep_kv = createpolicy_evict_last();
            pump_pages(pump, sm, p, num_pages, -1, kv_head, keep_kv);
        }
    } else if (tid == 0) {
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
        uint32_t full_phase = 0; // decoupled: bit s = parity of this CTA's next page in stage s

#pragma unroll 1
        for (int i = 0; i < num_pages; i++) {
            const int s = i % kStages;
            uint32_t members;
            if constexpr (kDecoupled) {
                members = sm.page_members[i];
                if (members == 0) continue; // CTA-uniform: not addressed to this CTA, never landed here
                const uint32_t parity = (full_phase >> s) & 1u;
                full_phase ^= 1u << s;
                if (tid == 0) {
                    // Arm this CTA's phase for page i (the phase of its previous page in
                    // stage s completed and was waited for by every thread of the CTA).
                    mbarrier_arrive_expect_tx(&sm.full[s], kStageTxBytes);
                    if (producer) {
                        // Issue everything up to page i (blocking on earlier releases), then
                        // what is already free; while page i is in flight, keep refilling
                        // stages the peer released.
                        pump_pages(pump, sm, p, num_pages, i, kv_head, keep_kv);
                        while (pump.next < num_pages && !mbarrier_try_wait_parity_hint(&sm.full[s], parity, 256))
                            pump_pages(pump, sm, p, num_pages, -1, kv_head, keep_kv);
                    }
                }
                mbarrier_wait_parity(&sm.full[s], parity);
            } else {
                mbarrier_wait_parity(&sm.full[s], (i / kStages) & 1);
                // Phase (i / kStages) of full[s] is complete: arm the next one (page i + kStages)
                // before CTA 0 can issue its load.
                if (tid == 0 && i + kStages < num_pages) mbarrier_arrive_expect_tx(&sm.full[s], kStageTxBytes);
                members = sm.page_members[i];
            }
            if (members != 0) { // CTA-uniform: skip pages none of this CTA's slots selected
                const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.kv[s][0]);
                wgmma_fence_operand(acc);
                wgmma_fence();
#pragma unroll
                for (int kb = 0; kb < kHeadDim / 32; kb++)
                    wgmma_m64n128k32_f32_e4m3_ss(acc, desc_q + 2 * kb, desc_k + 2 * kb, kb > 0);
                if constexpr (kX2) { // + Q's second term . K, same accumulator (desc_p: its tile)
#pragma unroll
                    for (int kb = 0; kb < kHeadDim / 32; kb++)
                        wgmma_m64n128k32_f32_e4m3_ss(acc, desc_p + 2 * kb, desc_k + 2 * kb, 1);
                }
                wgmma_commit_group();
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
                        if constexpr (kVtBatch) {
                            const uint32_t v_addr = smem_u32(sm.kv[s][1]);
                            // Two chunks per pass, both chunks' loads before the first
                            // byte permute (ncu of impl 6: ~15% of the stall samples were
                            // PRMTs waiting for their LDS).
#pragma unroll 1
                            for (int chunk = idle_rank; chunk < kHeadDim / 16; chunk += 2 * n_idle) {
                                const int next = chunk + n_idle;
                                const VChunk x = load_v_chunk(v_addr, (uint32_t)chunk, vlim);
                                if (next < kHeadDim / 16) {
                                    const VChunk y = load_v_chunk(v_addr, (uint32_t)next, vlim);
                                    store_vt_chunk(vt_addr, (uint32_t)chunk, x);
                                    store_vt_chunk(vt_addr, (uint32_t)next, y);
                                } else {
                                    store_vt_chunk(vt_addr, (uint32_t)chunk, x);
                                }
                            }
                        } else {
#pragma unroll 1
                            for (int chunk = idle_rank; chunk < kHeadDim / 16; chunk += n_idle)
                                transpose_v_chunk(vt_addr, smem_u32(sm.kv[s][1]), (uint32_t)chunk, vlim);
                        }
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
                    if (tid == 0) release_stage<kCluster, kDecoupled>(sm, s, rank);
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
                    if (tid == 0) release_stage<kCluster, kDecoupled>(sm, s, rank);
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
                if constexpr (kDecoupled) {
                    if (producer) pump_pages(pump, sm, p, num_pages, -1, kv_head, keep_kv);
                } else if constexpr (kPRegs) {
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
            if constexpr (!kPRegs && !kDecoupled) {
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
            } else if constexpr (!kPRegs) {
                // Decoupled, P through shared memory: as v4, but to this CTA's own empty barrier.
                __syncthreads();
                if (tid == 0) release_stage<kCluster, kDecoupled>(sm, s, rank);
            } else {
                // kPRegs: a member page released its stage before the softmax; this barrier
                // only keeps the next page's transpose off V^T until every warp's PV wgmma
                // completed. A lock-step page without members (impl 2 of Union8) releases
                // here, after every thread's wait on full[s] above.
                __syncthreads();
                if (!kDecoupled && members == 0 && tid == 0) {
                    release_stage<kCluster, kDecoupled>(sm, s, rank);
                    if (producer) refill_stage<kCluster>(sm, p, i, s, num_pages, kv_head, keep_kv);
                }
            }
        }
        // Decoupled: CTA 0's thread 0 issues whatever its own pages did not pull in yet.
        if constexpr (kDecoupled) {
            if (producer) pump_pages(pump, sm, p, num_pages, num_pages - 1, kv_head, keep_kv);
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


/* ---- C (impl 4): warp-specialised Union8 CTA ------------------------------------------- */

/* C: the group's page list (every union page, ascending; bad physical pages dropped and
 * counted as build_page_list does), member bytes kept whole (bit w = slot w, 0..7). Warps
 * 0-3 build it (a union has at most kMaxUnion = 128 pages); every thread of the CTA joins
 * the two __syncthreads. */
static __device__ void build_page_list_c(SmemPlanC &sm, const AttentionParams &p, int kv_head, int64_t group,
                                         int request, int union_size, const int64_t (&limits)[kGroupSize])
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const bool builder = tid < kMaxUnion; // warp-uniform
    int32_t logical = -1, physical = -1;
    uint32_t members = 0, ballot = 0;
    if (builder) {
        if (tid < union_size) {
            const int64_t base = ((int64_t)kv_head * p.max_groups + group) * p.union_capacity;
            logical = p.union_pages[base + tid];
            members = p.member_masks[base + tid];
        }
        if (logical >= 0) {
            physical = p.page_table[(int64_t)request * p.page_table_stride + logical];
            if (physical < 0 || (int64_t)physical >= p.num_cache_pages) {
                // Counted once per (query, KV head, page): the two Union8 CTAs of impl 0-3
                // count their own nibble each, this CTA the whole byte.
                if (p.bad_page_count && members) atomicAdd(p.bad_page_count, (uint32_t)__popc(members));
                logical = -1;
            }
        }
        ballot = __ballot_sync(0xffffffffu, logical >= 0);
        if (lane == 0) sm.warp_count[warp] = __popc(ballot);
    }
    __syncthreads();
    if (builder) {
        int offset = 0;
        for (int w = 0; w < warp; w++) offset += sm.warp_count[w];
        if (logical >= 0) {
            const int at = offset + __popc(ballot & ((1u << lane) - 1u));
            sm.page_logical[at] = logical;
            sm.page_physical[at] = physical;
            sm.page_members[at] = (uint8_t)members;
            sm.page_vlim[at] = page_v_limit(members, limits, logical); // the producer transposes for all 8 slots
        }
        if (tid == 0) {
            int total = 0;
            for (int w = 0; w < kMaxUnion / 32; w++) total += sm.warp_count[w];
            sm.num_pages = total;
        }
    }
    __syncthreads();
}

/* C, producer thread 0: issues pages next, next + 1, ... (page j into stage j % kStagesC;
 * K and V, plain TMA). Page j >= kStagesC needs the release of page j - kStagesC of its
 * stage (phase j / kStagesC - 1 of empty[s]): pages j <= block_until wait for it, later ones
 * are issued only if it already happened (test_wait, never suspending). */
static __device__ __forceinline__ void issue_pages_c(SmemPlanC &sm, const AttentionParams &p, int &next,
                                                     int block_until, int num_pages, int kv_head, uint64_t policy)
{
#pragma unroll 1
    while (next < num_pages) {
        const int j = next, s = j % kStagesC;
        if (j >= kStagesC) {
            const uint32_t parity = (uint32_t)(j / kStagesC - 1) & 1u;
            if (j <= block_until) mbarrier_wait_parity(&sm.empty[s], parity);
            else if (!mbarrier_test_wait_parity(&sm.empty[s], parity)) return;
        }
        const int32_t page = sm.page_physical[j];
        mbarrier_arrive_expect_tx(&sm.full[s], kStageTxBytes);
        tma_load_4d(sm.kv[s][0], &p.k_map, &sm.full[s], 0, kv_head, 0, page, policy);
        tma_load_4d(sm.kv[s][1], &p.v_map, &sm.full[s], 0, kv_head, 0, page, policy);
        next = j + 1;
    }
}

/* C: one CTA of 384 threads per (8-slot group, KV head), no cluster; design and invariants
 * C1-C6 in the file comment. */
__global__ void __launch_bounds__(kThreadsC, 1) union8_ws_kernel(const __grid_constant__ AttentionParams p)
{
    extern __shared__ uint8_t smem_raw[];
    SmemPlanC &sm = *reinterpret_cast<SmemPlanC *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
    const int tid = threadIdx.x, wg = tid / 128;

    const int64_t item = blockIdx.x;
    const int kv_head = (int)(item / p.max_groups);
    const int64_t group = item % p.max_groups;
    if (group >= p.num_groups[kv_head]) return; // CTA-uniform, before any barrier
    const pw_group_desc_t g = p.groups[(int64_t)kv_head * p.max_groups + group];

    if (tid == 0) {
        for (int s = 0; s < kStagesC; s++) {
            mbarrier_init(&sm.full[s], 1);
            mbarrier_init(&sm.vtready[s], 1);
            mbarrier_init(&sm.empty[s], 2);
        }
        fence_mbarrier_init_release_cluster();
    }
    {
        // Last visible token of each of the group's 8 slots (page_v_limit of the union pages).
        const int32_t cu_begin = p.cu_seqlens_q[g.request];
        const int64_t prefix = p.prefix_lens[g.request], kv_len = p.kv_lens[g.request];
        int64_t limits8[kGroupSize];
#pragma unroll
        for (int slot = 0; slot < kGroupSize; slot++) {
            const int32_t row = slot < g.num_members ? p.perm[(int64_t)kv_head * p.num_tokens + g.slot_begin + slot] : -1;
            const int64_t cpos = prefix + (row - cu_begin);
            limits8[slot] = row >= 0 ? (cpos < kv_len - 1 ? cpos : kv_len - 1) : -1;
        }
        build_page_list_c(sm, p, kv_head, group, g.request, g.union_size, limits8); // ends with __syncthreads
    }
    const int num_pages = sm.num_pages;
    // From here on: mbarriers and named barriers only (NamedBarrierC).

    if (wg == 0) {
        // ---- producer warpgroup: TMA (thread 0), V transpose (all 128) ------------------
        setmaxnreg_dec<kRegsProducerC>();
        uint64_t keep_kv = 0;
        int next = 0; // thread 0: the next page to issue
        if (tid == 0) {
            prefetch_tensormap(&p.k_map);
            prefetch_tensormap(&p.v_map);
            keep_kv = createpolicy_evict_last();
        }
#pragma unroll 1
        for (int i = 0; i < num_pages; i++) {
            const int s = i % kStagesC;
            const uint32_t use = (uint32_t)(i / kStagesC); // page i is use `use` of stage s
            if (tid == 0) {
                // Everything up to page i (blocking), then what is free; while page i is in
                // flight, keep issuing pages whose stage the consumers released.
                issue_pages_c(sm, p, next, i, num_pages, kv_head, keep_kv);
                while (!mbarrier_try_wait_parity_hint(&sm.full[s], use & 1u, 256))
                    issue_pages_c(sm, p, next, -1, num_pages, kv_head, keep_kv);
            }
            // V^T of stage s is no longer read (both consumers released page i - kStagesC: C2)
            // and page i landed.
            if (i >= kStagesC) mbarrier_wait_parity(&sm.empty[s], (use - 1u) & 1u);
            mbarrier_wait_parity(&sm.full[s], use & 1u);
            transpose_v(smem_u32(sm.vt[s]), smem_u32(sm.kv[s][1]), sm.page_vlim[i]);
            fence_proxy_async_shared_cta(); // V^T (generic stores) -> the consumers' PV wgmma
            bar_sync_named(kBarProducerC, 128);
            if (tid == 0) {
                mbarrier_arrive(&sm.vtready[s]);
                issue_pages_c(sm, p, next, -1, num_pages, kv_head, keep_kv);
            }
        }
        return;
    }

    // ---- consumer warpgroup c: slots 4c..4c+3, 64 rows, impl 2's arithmetic ----------------
    setmaxnreg_inc<kRegsConsumerC>();
    const int c = wg - 1;
    const int ctid = tid - 128 * wg; // thread of the warpgroup
    const int warp = ctid / 32, lane = ctid % 32;
    const uint32_t bar_id = kBarConsumerC0 + (uint32_t)c;
    int32_t query_rows[kSlotsPerCta] = {-1, -1, -1, -1};
#pragma unroll
    for (int w = 0; w < kSlotsPerCta; w++) {
        const int slot = 4 * c + w;
        if (slot < g.num_members) query_rows[w] = p.perm[(int64_t)kv_head * p.num_tokens + g.slot_begin + slot];
    }
    const int32_t cu_begin = p.cu_seqlens_q[g.request];
    const int64_t prefix = p.prefix_lens[g.request], kv_len = p.kv_lens[g.request];
    int64_t limits[kSlotsPerCta];
#pragma unroll
    for (int w = 0; w < kSlotsPerCta; w++) {
        const int64_t cpos = prefix + (query_rows[w] - cu_begin);
        limits[w] = query_rows[w] >= 0 ? (cpos < kv_len - 1 ? cpos : kv_len - 1) : -1;
    }
    const float k_scale = *p.k_scale, v_scale = *p.v_scale;
    const float log2e = 1.4426950408889634f;
    quantize_q_rows(smem_u32(sm.q[c]), 0u, sm.row_factor[c], ctid, p, kv_head, query_rows,
                    k_scale * p.softmax_scale * log2e);
    fence_proxy_async_shared_cta(); // Q (generic stores) -> QK wgmma
    bar_sync_named(bar_id, 128);

    int32_t my_row = -1;
    int64_t my_limit = -1;
#pragma unroll
    for (int w = 0; w < kSlotsPerCta; w++) {
        if (w == warp) {
            my_row = query_rows[w];
            my_limit = limits[w];
        }
    }
    const uint32_t q = lane % 4;
    const int r0 = 16 * warp + lane / 4; // accumulator rows r0 and r0 + 8
    const float f0 = sm.row_factor[c][r0], f1 = sm.row_factor[c][r0 + 8];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[64];
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q[c]);

#pragma unroll 1
    for (int i = 0; i < num_pages; i++) {
        const int s = i % kStagesC;
        const uint32_t use = (uint32_t)(i / kStagesC);
        // Every page, also one without members here: the release below must follow the
        // producer's V^T of page i (C3).
        mbarrier_wait_parity(&sm.vtready[s], use & 1u);
        mbarrier_wait_parity(&sm.full[s], use & 1u); // K and V bytes, acquired by this thread
        const uint32_t members = (uint32_t)(sm.page_members[i] >> (4 * c)) & 0xFu;
        if (members != 0) { // warpgroup-uniform
            const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.kv[s][0]);
            const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt[s]);
            wgmma_fence_operand(acc);
            wgmma_fence();
#pragma unroll
            for (int kb = 0; kb < kHeadDim / 32; kb++)
                wgmma_m64n128k32_f32_e4m3_ss(acc, desc_q + 2 * kb, desc_k + 2 * kb, kb > 0);
            wgmma_commit_group();
            wgmma_wait_group<0>();
            wgmma_fence_operand(acc);

            const bool member = (members >> warp) & 1u; // warp-uniform
            float alpha0 = 1.0f, alpha1 = 1.0f;
            uint32_t pa[16]; // P of this thread as the PV wgmma's A fragments (impl 2)
#pragma unroll
            for (int k = 0; k < 16; k++) pa[k] = 0u;
            if (member) { // the softmax and P of impl 2 (bitwise the same rows)
                softmax_page(acc, my_limit - (int64_t)sm.page_logical[i] * kPageSize, q, f0, f1, m0, m1,
                             l0, l1, alpha0, alpha1);
#pragma unroll
                for (int a = 0; a < 8; a++) p_words(acc, a, pa[2 * a], pa[2 * a + 1]);
            }
            wgmma_fence_operand(acc);
            wgmma_fence();
#pragma unroll
            for (int kb = 0; kb < kPageSize / 32; kb++)
                wgmma_m64n128k32_f32_e4m3_rs(acc, pa[4 * kb], pa[4 * kb + 1], pa[4 * kb + 2], pa[4 * kb + 3],
                                             desc_vt + 2 * kb, kb > 0);
            wgmma_commit_group();
            wgmma_wait_group<0>();
            wgmma_fence_operand(acc);
            wgmma_fence_operand(pa);
            if (member) {
#pragma unroll
                for (int k = 0; k < 64; k++) o[k] = fmaf(o[k], (k % 4) < 2 ? alpha0 : alpha1, acc[k]);
            }
        }
        // Every warp of this warpgroup is done with stage s (its wgmma reads waited for): one
        // release per consumer warpgroup (C1).
        bar_sync_named(bar_id, 128);
        if (ctid == 0) mbarrier_arrive(&sm.empty[s]);
    }

    // ---- epilogue (impl 2's)
    if (my_row >= 0) store_rows(p, o, my_row, kv_head, lane, m0, m1, l0, l1, v_scale);
}

} // namespace pw

#include "attention_lean.cuh" // dev impl 9 (v8 "lean")

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
 * one KV head (128 tokens x 128 bytes) per box, 128B-swizzled for the wgmma descriptors. */
pw_status_t make_cache_map(CUtensorMap *map, const void *cache, const char *name, int64_t pages,
                           int kv_heads, int64_t kv_stride)
{
    EncodeTiledFn encode = nullptr;
    PW_TRY(get_encode_tiled(&encode));
    const cuuint64_t dims[4] = {(cuuint64_t)pw::kHeadDim, (cuuint64_t)kv_heads, (cuuint64_t)pw::kPageSize,
                                (cuuint64_t)pages};
    const cuuint64_t strides[3] = {(cuuint64_t)pw::kHeadDim, (cuuint64_t)kv_stride,
                                   (cuuint64_t)kv_stride * pw::kPageSize};
    const cuuint32_t box[4] = {(cuuint32_t)pw::kHeadDim, 1, (cuuint32_t)pw::kPageSize, 1};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void *>(cache), dims,
                              strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.%s: cuTensorMapEncodeTiled failed (CUresult %d): pointer must be "
                       "16-byte aligned, kv_stride a multiple of 16",
                       name, (int)r);
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

/* C (impl 4): the warp-specialised Union8 kernel, one CTA per (group, KV head). */
pw_status_t launch_c(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0};
    PW_TRY(configure_kernel((const void *)pw::union8_ws_kernel, pw::kSmemBytesC, false, configured,
                            "attention kernel (C)"));
    pw::union8_ws_kernel<<<grid, pw::kThreadsC, pw::kSmemBytesC, stream>>>(params);
    const cudaError_t last = cudaGetLastError();
    if (last != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "attention kernel launch (C): %s", cudaGetErrorString(last));
    return PW_SUCCESS;
}

/* Dev impl 9 ("lean", attention_lean.cuh): Union4 and per-query, three CTAs per SM. */
template <int VARIANT, bool X2, bool PREVT = false>
pw_status_t launch_lean(const pw::AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured{0}; // devices this kernel's attributes are set on
    void (*kernel)(pw::AttentionParams) = pw::lean_attention_kernel<VARIANT, X2, PREVT>;
    PW_TRY(configure_kernel((const void *)kernel, pw::kSmemBytesLean, true, configured, "attention kernel (lean)"));
    kernel<<<grid, pw::kThreads, pw::kSmemBytesLean, stream>>>(params);
    const cudaError_t last = cudaGetLastError();
    if (last != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "attention kernel launch (lean): %s", cudaGetErrorString(last));
    return PW_SUCCESS;
}

/* One implementation (pw::ImplBits or kImplWarpSpec) of one variant. The decoupled bit
 * and C exist for Union8 only: the single-CTA variants run impl & kImplPRegs, and impl 4
 * as 2. Impl 5 was removed. `grid` counts two CTAs per (group, KV
 * head); C launches one. */
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
    if (impl == pw::kImplPipe)
        return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 5 (B + pipelined QK) was removed: measured 3.5-15%% slower "
                                             "than impl 2 (bench/NOTES.md, v6)");
    if (impl == pw::kImplIdleVtDev) return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt>(params, grid, stream);
    if (impl == pw::kImplVtBatchDev)
        return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt | pw::kImplVtBatch>(params, grid, stream);
    if (impl == pw::kImplNoVMaskDev)
        return launch<VARIANT, pw::kImplPRegs | pw::kImplIdleVt | pw::kImplNoVMask>(params, grid, stream);
    if (impl == pw::kImplWarpSpec) {
        if constexpr (VARIANT == pw::kUnion8) return launch_c(params, grid / 2, stream);
        impl = pw::kImplPRegs;
    }
    if constexpr (VARIANT == pw::kUnion8) {
        switch (impl) {
        case 1: return launch<VARIANT, 1>(params, grid, stream);
        case 2: return launch<VARIANT, 2>(params, grid, stream);
        case 3: return launch<VARIANT, 3>(params, grid, stream);
        default: return launch<VARIANT, 0>(params, grid, stream);
        }
    }
    else {
        if (impl & pw::kImplPRegs) return launch<VARIANT, pw::kImplPRegs>(params, grid, stream);
        return launch<VARIANT, 0>(params, grid, stream);
    }
}

pw_status_t union_attention(int impl, const pw_problem_t *problem, const pw_attention_args_t *args,
                            const pw_grouping_t *grouping, const int32_t *perm, const pw_union_meta_t *meta,
                            pw_kernel_t kernel, pw_stream_t stream, const uint8_t *vt_tiles = nullptr)
{
    PW_TRY(pw_check_gpu_attention_args(problem, args, kernel)); // src/attention_args.c
    if (pw_args_precision(args) == PW_PRECISION_FP8X2) {
        // Two-term FP8 exists on B (impl 2) and on impl 6 (the library's), for every variant.
        if (impl == pw::kImplIdleVtDev) impl = pw::kImplPRegs | pw::kImplIdleVt | pw::kImplX2;
        else if (impl == pw::kImplLeanDev) impl = pw::kImplLeanX2;
        else if (impl == pw::kImplLeanPreVtDev) impl = pw::kImplLeanPreVtX2;
        else if (impl == pw::kImplPRegs || (impl == pw::kImplWarpSpec && kernel != PW_KERNEL_UNION8))
            impl = pw::kImplPRegs | pw::kImplX2;
        else
            return pw_fail(PW_ERROR_UNSUPPORTED,
                           "PW_PRECISION_FP8X2 has no path in dev impl %d (impls 2, 6, 9 and 10 have)", impl);
    } else if (impl == pw::kImplLeanDev) {
        impl = pw::kImplLean;
    } else if (impl == pw::kImplLeanPreVtDev) {
        impl = pw::kImplLeanPreVt;
    }
    const pw_requests_t *rq = &args->requests;
    if (kernel != PW_KERNEL_PER_QUERY) {
        if (!grouping || grouping->struct_size < sizeof(pw_grouping_t))
            return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping is NULL or grouping.struct_size is too small "
                                                      "(initialise with PW_GROUPING_INIT)");
        if (grouping->group_size != pw::kGroupSize)
            return pw_fail(PW_ERROR_UNSUPPORTED, "the union kernels need grouping.group_size = 8 (got %d)",
                           grouping->group_size);
        if (!perm || !meta || !meta->num_groups || !meta->groups || !meta->union_pages || !meta->member_masks)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT, "perm and every meta buffer must be given for the union kernels");
        if (meta->union_capacity < pw::kMaxUnion || meta->max_groups < pw_max_groups(problem, grouping))
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "meta capacities too small: union_capacity %d (need >= %d), max_groups %lld "
                           "(need >= %lld)",
                           meta->union_capacity, pw::kMaxUnion, (long long)meta->max_groups,
                           (long long)pw_max_groups(problem, grouping));
    }
    if (problem->num_tokens == 0) return PW_SUCCESS;
    PW_TRY(pw_check_attention_device());

    pw::AttentionParams params;
    memset(&params, 0, sizeof params);
    PW_TRY(make_cache_map(&params.k_map, args->k_cache, "k_cache", problem->num_cache_pages,
                          problem->num_kv_heads, args->kv_stride));
    PW_TRY(make_cache_map(&params.v_map, args->v_cache, "v_cache", problem->num_cache_pages,
                          problem->num_kv_heads, args->kv_stride));
    params.q = args->q;
    params.q_stride = args->q_stride;
    params.o = static_cast<uint16_t *>(args->o);
    params.o_stride = args->o_stride;
    params.lse = args->lse;
    params.k_scale = args->k_scale;
    params.v_scale = args->v_scale;
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
    params.vt_tiles = vt_tiles;
    params.vt_pages = problem->max_pages_per_request;
    uint8_t *own_tiles = nullptr; // dev impl 10 without the full call's tiles: its own, for this call
    if ((impl == pw::kImplLeanPreVt || impl == pw::kImplLeanPreVtX2) && !vt_tiles) {
        if (kernel == PW_KERNEL_UNION8)
            return pw_fail(PW_ERROR_UNSUPPORTED, "dev impl 10 (lean + V^T pre-pass) runs Union4 and per-query only");
        const size_t bytes = (size_t)problem->num_kv_heads * problem->num_requests *
                             (size_t)problem->max_pages_per_request * pw::kTileBytes;
        cudaError_t e = cudaMallocAsync((void **)&own_tiles, bytes, (cudaStream_t)stream);
        if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "dev impl 10: cudaMallocAsync(%zu): %s", bytes, cudaGetErrorString(e));
        const pw_status_t st = pw_vt_prepare(problem, args, NULL, own_tiles, stream);
        if (st != PW_SUCCESS) {
            cudaFreeAsync(own_tiles, (cudaStream_t)stream);
            return st;
        }
        params.vt_tiles = own_tiles;
    }
    pw_status_t status;
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
        const int64_t grid = 2 * meta->max_groups * problem->num_kv_heads;
        if (grid > 0x7fffffff) status = pw_fail(PW_ERROR_UNSUPPORTED, "2 * groups * Hkv = %lld CTAs exceeds the grid limit", (long long)grid);
        else if (kernel == PW_KERNEL_UNION8) status = launch_impl<pw::kUnion8>(impl, params, (unsigned)grid, stream);
        else status = launch_impl<pw::kUnion4>(impl, params, (unsigned)grid, stream);
    }
    if (own_tiles) {
        const cudaError_t e = cudaFreeAsync(own_tiles, (cudaStream_t)stream);
        if (e != cudaSuccess && status == PW_SUCCESS)
            status = pw_fail(PW_ERROR_CUDA, "dev impl 10: cudaFreeAsync: %s", cudaGetErrorString(e));
    }
    return status;
}

} // namespace

/* The library's implementations (bench/NOTES.md): Union8 runs impl 6 (B with the V
 * transpose done by the warps without a member, v6); Union4 and per-query run impl 9, the
 * lean kernel (three CTAs per SM, v8). The full call's Union4 runs impl 10 (lean on the
 * V^T pre-pass's tiles: pw_union_attention_vt). */
constexpr int kDefaultImplUnion8 = pw::kImplIdleVtDev;
constexpr int kDefaultImpl = pw::kImplLeanDev;

extern "C" pw_status_t pw_union_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                                          const pw_grouping_t *grouping, const int32_t *perm,
                                          const pw_union_meta_t *meta, pw_kernel_t kernel,
                                          pw_stream_t stream)
{
    return union_attention(kernel == PW_KERNEL_UNION8 ? kDefaultImplUnion8 : kDefaultImpl, problem, args, grouping,
                           perm, meta, kernel, stream);
}

extern "C" pw_status_t pw_union_attention_vt(const pw_problem_t *problem, const pw_attention_args_t *args,
                                             const pw_grouping_t *grouping, const int32_t *perm,
                                             const pw_union_meta_t *meta, const uint8_t *vt_tiles,
                                             pw_stream_t stream)
{
    if (!vt_tiles && problem && problem->num_tokens > 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_union_attention_vt: vt_tiles is NULL");
    return union_attention(pw::kImplLeanPreVtDev, problem, args, grouping, perm, meta, PW_KERNEL_UNION4, stream,
                           vt_tiles);
}

extern "C" pw_status_t pw_union_attention_dev(int impl, const pw_problem_t *problem,
                                              const pw_attention_args_t *args, const pw_grouping_t *grouping,
                                              const int32_t *perm, const pw_union_meta_t *meta,
                                              pw_kernel_t kernel, pw_stream_t stream)
{
    if (impl < 0 || impl >= pw::kNumImpls)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_union_attention_dev: impl %d (0..%d)", impl,
                       pw::kNumImpls - 1);
    return union_attention(impl, problem, args, grouping, perm, meta, kernel, stream);
}
