/* union_ws.cu — the warp-specialised 8-query kernel ("WS", dev impl 9; design of issue 12).
 *
 * One CTA of 384 threads works through 8-slot groups (items h * max_groups + group, in the
 * schedule's order): persistent CTAs fetching items from a counter, or one item per CTA.
 *   WG 0, the producer (setmaxnreg 56): per group, builds the group's list (union pages in
 *     the cache, physical ids, member bytes, per-page V limits, the 8 slots' rows and last
 *     visible tokens) into one of two group slots; thread 0 streams every union page of the
 *     group once (K into the K ring, V into a raw V tile, both on one tx barrier); all 128
 *     threads transpose V into the V^T ring (zeros past the members' last visible token:
 *     cache bytes no query may see never reach an output) and thread 0 publishes ready[s].
 *   WG 1 and WG 2, the consumers (setmaxnreg 224), own slots 0-3 and 4-7 (64 rows each, one
 *     M64 wgmma tile; rows slot*16 + head as in attention.cu): per group, Q quantised into
 *     their own tile, then ONLY the pages their half selected: QK, the softmax of the member
 *     warps, PV with P from registers into a freshly zeroed accumulator, O += for member
 *     rows (attention_common.cuh: the same instructions as every other kernel, so O and LSE
 *     are bitwise those of Union4 / per-query / cluster Union8), release, and at the end the
 *     epilogue straight to the original rows.
 * The two halves share one page stream: a page both selected is loaded and transposed once.
 * The stage's empty barrier counts 256 arrivals per use: each thread of a consumer that
 * used the page arrives after its PV wait; for a half without members on the page the
 * producer arrives 128 times at once when it issues the page. There is no CTA-wide
 * barrier after the role split.
 *
 * Stream indexing: the CTA's pages are numbered e = 0, 1, ... over its groups in order (all
 * union pages kept in the list, whoever uses them). Page e lives in K/V^T stage
 * s = e % kWsStages (use u = e / kWsStages) and raw V tile e % kWsRawV. Every barrier of a
 * stage completes exactly one phase per use; waiters use parity u & 1.
 *
 * Invariants (what the code relies on):
 *  W1 (stage WAR) The producer issues page e (TMA into K[s]) and writes V^T[s] only after
 *     empty[s] completed phase u - 1 (every producer thread waits for it before its
 *     transpose; thread 0 before the TMA): both consumers released page e - kWsStages (a
 *     consumer thread arrives after its wgmma.wait_group of the PV, which follows the QK
 *     wait: K[s] and V^T[s] are no longer read), or the producer arrived for a half that
 *     did not use it.
 *  W2 (raw V WAR) Page e's V lands in raw tile e % kWsRawV; the previous page of that tile,
 *     e - kWsRawV, was transposed before thread 0 issues page e: thread 0 issues at most
 *     kWsRawV - 1 pages past the one being transposed, and only after the named barrier
 *     that ends every producer thread's loads of the previous transpose (which fenced its
 *     generic accesses against the async proxy first).
 *  W3 (no parity aliasing) A parity wait is right only when the waiter is at most one phase
 *     ahead of the barrier and never one behind. The producer threads wait every phase of
 *     empty[s] and loaded[s] in order, and nothing completes a phase of those two twice
 *     ahead of them (page e + kWsStages needs their own issue). A consumer, though, skips
 *     the pages its half did not select, so when it reaches page e of stage s the stage may
 *     still hold (or wait for) page e - kWsStages, e - 2 kWsStages, ...: its parity of use
 *     u would alias with an earlier use. So a consumer first waits for the stage's
 *     monotonic ready_page[s] to read e (st.release by producer thread 0 after the
 *     transpose, ld.acquire by the consumer): from then on loaded[s] and ready[s] have
 *     completed phase u and cannot complete u + 1 before this consumer releases page e
 *     (it is a user), and their parity waits are exact.
 *     The group slots: both consumers take every group in order, and gfull[gs] cannot run
 *     two phases ahead of them (the producer waits gempty[gs] first).
 *  W4 (publication) V^T: generic stores, fence.proxy.async by each writer, the producer's
 *     named barrier, then mbarrier.arrive (release) on ready[s] and the release store of
 *     ready_page[s]; consumers acquire both before the PV wgmma. K: consumers also wait
 *     loaded[s] themselves. Q: the consumer's stores, fence.proxy.async, its named barrier,
 *     then the QK wgmma. Group lists: every producer thread arrives (release) on gfull[gs]
 *     after its own writes of the list.
 *  W5 (group slots) Slot gs = g % 2 holds the CTA's group g. The producer rewrites it for
 *     group g + 2 only after gempty[gs] completed phase g / 2 (both consumers' arrivals after
 *     their last read of the list, behind their named barrier); gfull[gs] (count 1, producer
 *     thread 0 after the producer's named barrier) publishes it; consumers wait parity
 *     (g / 2) & 1. The producer writes group g + 1's list before it streams g + 1's pages.
 *  W6 (exit) The producer stops after publishing a stop list (num_pages = -1); every page
 *     it issued was waited for (loaded) by every producer thread, so no TMA is in flight.
 *     The consumers stop at the stop list, after releasing all their pages.
 * Synchronisation checked by compute-sanitizer racecheck / synccheck (scripts/gpu-check).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "attention_common.cuh"
#include "pw_internal.h"
#include "union_ws.cuh"
#include "union_ws_launch.h"

namespace pw {

/* Producer warpgroup, all 128 threads: the next item's list into slot `gs`. Returns false
 * (and publishes a stop list) when no work is left. tid: 0..127. */
static __device__ __noinline__ bool ws_build_group(SmemPlanWs &sm, const AttentionParams &p, int gs, int fetch_index,
                                      int tid)
{
    WsGroup &gl = sm.group[gs];
    const int warp = tid / 32, lane = tid % 32;
    if (tid == 0) {
        // Next item with a group: dynamic (a counter shared by the persistent CTAs) or the
        // CTA's own item. Items past num_groups[h] hold no group (the host sizes by bounds).
        int32_t item = -1;
        for (int t = fetch_index;;) { // items < 2^31 (the launcher checks)
            if (p.work_counter) t = atomicAdd(p.work_counter, 1);
            if (t >= p.num_items) break;
            const int32_t it = p.schedule ? p.schedule[t] : t;
            const int32_t h = (int32_t)(it / p.max_groups);
            if (it % p.max_groups < p.num_groups[h]) {
                item = it;
                break;
            }
            if (!p.work_counter) break; // one item per CTA: an empty one ends the CTA
        }
        sm.item = item;
    }
    bar_sync_named(kWsBarProducer, 128);
    const int32_t item = sm.item;
    if (item < 0) {
        if (tid == 0) gl.num_pages = -1;
        return false;
    }
    const int kv_head = (int)(item / p.max_groups);
    const int64_t group = item % p.max_groups;
    const pw_group_desc_t g = p.groups[(int64_t)kv_head * p.max_groups + group];
    // The 8 slots' rows and last visible tokens min(c, L - 1) first: the V limits need them.
    if (tid < kGroupSize) {
        const int32_t row = tid < g.num_members ? p.perm[(int64_t)kv_head * p.num_tokens + g.slot_begin + tid] : -1;
        const int32_t cu_begin = p.cu_seqlens_q[g.request];
        const int64_t prefix = p.prefix_lens[g.request], kv_len = p.kv_lens[g.request];
        const int64_t c = prefix + (row - cu_begin);
        gl.query_rows[tid] = row;
        gl.limits[tid] = row >= 0 ? (c < kv_len - 1 ? c : kv_len - 1) : -1;
    }
    int32_t logical = -1, physical = -1;
    uint32_t members = 0;
    if (tid < g.union_size) {
        const int64_t base = ((int64_t)kv_head * p.max_groups + group) * p.union_capacity;
        logical = p.union_pages[base + tid];
        members = p.member_masks[base + tid];
    }
    if (logical >= 0) {
        physical = p.page_table[(int64_t)g.request * p.page_table_stride + logical];
        if (physical < 0 || (int64_t)physical >= p.num_cache_pages) {
            // Never read, contributes nothing, counted once per (query, KV head, page).
            if (p.bad_page_count && members) atomicAdd(p.bad_page_count, (uint32_t)__popc(members));
            logical = -1;
        }
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, logical >= 0);
    if (lane == 0) sm.warp_count[warp] = __popc(ballot);
    bar_sync_named(kWsBarProducer, 128); // limits and warp counts visible
    int offset = 0;
    for (int w = 0; w < warp; w++) offset += sm.warp_count[w];
    if (logical >= 0) {
        const int at = offset + __popc(ballot & ((1u << lane) - 1u));
        gl.page_logical[at] = logical;
        gl.page_physical[at] = physical;
        gl.page_members[at] = (uint8_t)members;
        gl.page_vlim[at] = page_v_limit(members, gl.limits, logical); // one V^T serves both halves
    }
    if (tid == 0) {
        gl.num_pages = sm.warp_count[0] + sm.warp_count[1] + sm.warp_count[2] + sm.warp_count[3];
        gl.kv_head = kv_head;
    }
    return true;
}

/* Producer thread 0: issues stream pages [*next, until) of the current group (page e of the
 * stream is list entry e - e0), blocking on empty[s] for each. */
template <int MODE>
static __device__ __forceinline__ void ws_issue(SmemPlanWs &sm, const AttentionParams &p, const WsGroup &gl,
                                                int e0, int &next, int until)
{
    const uint64_t policy = createpolicy_evict_last(); // KV pages are re-read by other groups
    for (; next < until; next++) {
        const int s = next % kWsStages;
        const int u = next / kWsStages;
        if (u > 0) mbarrier_wait_parity(&sm.empty[s], (uint32_t)((u - 1) & 1)); // W1
        const int k = next - e0;
        const int32_t page = gl.page_physical[k];
        mbarrier_arrive_expect_tx(&sm.loaded[s], 2 * kTileBytes);
        tma_load_4d(sm.k[s], &p.k_map, &sm.loaded[s], 0, gl.kv_head, 0, page, policy);
        tma_load_4d(sm.v[next % kWsRawV], &p.v_map, &sm.loaded[s], 0, gl.kv_head, 0, page, policy);
        if (MODE != kWsLockStep) {
            // A half without members never touches the page: its 128 arrivals, now.
            const uint32_t m = gl.page_members[k];
            if ((m & 0x0Fu) == 0u) mbarrier_arrive_count(&sm.empty[s], 128);
            if ((m & 0xF0u) == 0u) mbarrier_arrive_count(&sm.empty[s], 128);
        }
    }
}

template <bool X2, int MODE>
__global__ void __launch_bounds__(kWsThreads, 1) union_ws_kernel(const __grid_constant__ AttentionParams p)
{
    extern __shared__ uint8_t smem_raw[];
    SmemPlanWs &sm = *reinterpret_cast<SmemPlanWs *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
    const int tid = threadIdx.x, wg = tid / 128;

    if (tid == 0) {
        for (int s = 0; s < kWsStages; s++) {
            mbarrier_init(&sm.loaded[s], 1);
            mbarrier_init(&sm.ready[s], 1);
            mbarrier_init(&sm.empty[s], 256);
        }
        for (int s = 0; s < kWsStages; s++) sm.ready_page[s] = -1;
        for (int g = 0; g < kWsGroupSlots; g++) {
            mbarrier_init(&sm.gfull[g], 128);
            mbarrier_init(&sm.gempty[g], 2);
        }
        fence_mbarrier_init_release_cluster();
    }
    __syncthreads();

    if (wg == 0) {
        // ---- producer warpgroup ----------------------------------------------------------
        setmaxnreg_dec<kWsRegsProducer>();
        const int warp = tid / 32;
        if (tid == 0) {
            prefetch_tensormap(&p.k_map);
            prefetch_tensormap(&p.v_map);
        }
        int e0 = 0;   // stream index of the current group's first page (< 2^31 pages a CTA)
        int next = 0; // thread 0: next stream page to issue
#pragma unroll 1
        for (int g = 0;; g++) {
            const int gs = g % kWsGroupSlots;
            if (g >= kWsGroupSlots) mbarrier_wait_parity(&sm.gempty[gs], (uint32_t)((g / kWsGroupSlots - 1) & 1)); // W5
            const bool more = ws_build_group(sm, p, gs, (int)(blockIdx.x + g * gridDim.x), tid);
            bar_sync_named(kWsBarProducer, 128); // the list is whole (the producer reads num_pages next)
            mbarrier_arrive(&sm.gfull[gs]);      // W4: each thread releases its own writes of the list
            if (!more) break;
            const WsGroup &gl = sm.group[gs];
            const int n = gl.num_pages;
#pragma unroll 1
            for (int k = 0; k < n; k++) {
                const int e = e0 + k;
                const int s = e % kWsStages;
                const int u = e / kWsStages;
                if (tid == 0) ws_issue<MODE>(sm, p, gl, e0, next, e0 + (k + kWsRawV < n ? k + kWsRawV : n)); // W2
                if (u > 0) mbarrier_wait_parity(&sm.empty[s], (uint32_t)((u - 1) & 1)); // W1: V^T[s] free
                mbarrier_wait_parity(&sm.loaded[s], (uint32_t)(u & 1));
                if (MODE != kWsStreamOnly) {
                    const uint32_t v = smem_u32(sm.v[e % kWsRawV]), vt = smem_u32(sm.vt[s]);
                    const int vlim = gl.page_vlim[k];
#pragma unroll 1
                    for (int cc = 0; cc < 2; cc++) { // one chunk's 16 data registers at a time
                        const uint32_t chunk = (uint32_t)(2 * warp + cc);
                        store_vt_chunk(vt, chunk, load_v_chunk(v, chunk, vlim));
                    }
                }
                fence_proxy_async_shared_cta(); // W4 (V^T), W2 (raw V reads before the next TMA into it)
                bar_sync_named(kWsBarProducer, 128);
                if (tid == 0) {
                    mbarrier_arrive(&sm.ready[s]);
                    st_release_shared_s32(&sm.ready_page[s], e); // W3
                }
            }
            e0 += n;
        }
        return;
    }

    // ---- consumer warpgroup c: slots 4c..4c+3 ------------------------------------------------
    setmaxnreg_inc<kWsRegsConsumer>();
    const int c = wg - 1;
    const int ctid = tid - 128 * wg;
    const int warp = ctid / 32, lane = ctid % 32;
    const uint32_t bar_id = kWsBarConsumer0 + (uint32_t)c;
    const float log2e = 1.4426950408889634f;
    const uint32_t q = lane % 4;
    const int r0 = 16 * warp + lane / 4; // accumulator rows r0 and r0 + 8
    int e0 = 0;
#pragma unroll 1
    for (int g = 0;; g++) {
        const int gs = g % kWsGroupSlots;
        mbarrier_wait_parity(&sm.gfull[gs], (uint32_t)((g / kWsGroupSlots) & 1));
        const WsGroup &gl = sm.group[gs];
        const int n = gl.num_pages;
        if (n < 0) break; // W6
        const int kv_head = gl.kv_head;
        int32_t query_rows[kSlotsPerCta];
#pragma unroll
        for (int w = 0; w < kSlotsPerCta; w++) query_rows[w] = gl.query_rows[4 * c + w];
        const bool any_row = query_rows[0] >= 0; // slots fill from 0: an empty half has no slot 4c
        const float k_scale = *p.k_scale, v_scale = *p.v_scale;
        if (any_row && MODE != kWsStreamOnly)
            quantize_q_rows(smem_u32(sm.q[c]), X2 ? smem_u32(sm.q_lo[c]) : 0u, sm.row_factor[c], ctid, p, kv_head,
                            query_rows, k_scale * p.softmax_scale * log2e);
        fence_proxy_async_shared_cta(); // W4 (Q)
        bar_sync_named(bar_id, 128);
        int32_t my_row = -1;
        int64_t my_limit = -1;
#pragma unroll
        for (int w = 0; w < kSlotsPerCta; w++) {
            if (w == warp) {
                my_row = query_rows[w];
                my_limit = gl.limits[4 * c + w];
            }
        }
        const float f0 = sm.row_factor[c][r0], f1 = sm.row_factor[c][r0 + 8];
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
        float o[64], acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.0f;
#pragma unroll 1
        for (int k = 0; k < n; k++) {
            const uint32_t members = (uint32_t)(gl.page_members[k] >> (4 * c)) & 0xFu; // warpgroup-uniform
            if (MODE != kWsLockStep && members == 0u) continue; // the producer released it for us
            const int e = e0 + k;
            const int s = e % kWsStages;
            const uint32_t parity = (uint32_t)((e / kWsStages) & 1);
            while (ld_acquire_shared_s32(&sm.ready_page[s]) != e) __nanosleep(20); // W3
            mbarrier_wait_parity(&sm.ready[s], parity);  // V^T (complete: no alias, W3)
            mbarrier_wait_parity(&sm.loaded[s], parity); // K's bytes, acquired by this thread (W4)
            if (MODE != kWsStreamOnly && members != 0u) {
                const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q[c]);
                const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.k[s]);
                wgmma_fence_operand(acc);
                wgmma_fence();
#pragma unroll
                for (int kb = 0; kb < kHeadDim / 32; kb++)
                    wgmma_m64n128k32_f32_e4m3_ss(acc, desc_q + 2 * kb, desc_k + 2 * kb, kb > 0);
                if constexpr (X2) { // + Q's second term . K, same accumulator
#pragma unroll
                    for (int kb = 0; kb < kHeadDim / 32; kb++)
                        wgmma_m64n128k32_f32_e4m3_ss(acc, wgmma_desc_k_major_sw128(sm.q_lo[c]) + 2 * kb, desc_k + 2 * kb, 1);
                }
                wgmma_commit_group();
                wgmma_wait_group<0>();
                wgmma_fence_operand(acc);
                const bool member = (members >> warp) & 1u; // warp-uniform
                float alpha0 = 1.0f, alpha1 = 1.0f;
                uint32_t pa[16];            // P as the PV wgmma's A fragments; non-members: zeros, not added
                uint32_t pl[X2 ? 16 : 1];   // X2: P's second term, same layout
#pragma unroll
                for (int i = 0; i < 16; i++) pa[i] = 0u;
#pragma unroll
                for (int i = 0; i < (X2 ? 16 : 1); i++) pl[i] = 0u;
                if (member) {
                    softmax_page(acc, my_limit - (int64_t)gl.page_logical[k] * kPageSize, q, f0, f1, m0, m1, l0, l1,
                                 alpha0, alpha1);
#pragma unroll
                    for (int a = 0; a < 8; a++) {
                        p_words(acc, a, pa[2 * a], pa[2 * a + 1]);
                        if constexpr (X2) p_words_lo(acc, a, pa[2 * a], pa[2 * a + 1], pl[2 * a], pl[2 * a + 1]);
                    }
                }
                const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt[s]);
                wgmma_fence_operand(acc);
                wgmma_fence();
#pragma unroll
                for (int kb = 0; kb < kPageSize / 32; kb++)
                    wgmma_m64n128k32_f32_e4m3_rs(acc, pa[4 * kb], pa[4 * kb + 1], pa[4 * kb + 2], pa[4 * kb + 3],
                                                 desc_vt + 2 * kb, kb > 0);
                if constexpr (X2) { // + P's second term . V, same zeroed-per-page accumulator
#pragma unroll
                    for (int kb = 0; kb < kPageSize / 32; kb++)
                        wgmma_m64n128k32_f32_e4m3_rs(acc, pl[4 * kb], pl[4 * kb + 1], pl[4 * kb + 2], pl[4 * kb + 3],
                                                     desc_vt + 2 * kb, 1);
                }
                wgmma_commit_group();
                wgmma_wait_group<0>();
                wgmma_fence_operand(acc);
                wgmma_fence_operand(pa);
                if constexpr (X2) wgmma_fence_operand(pl);
                mbarrier_arrive(&sm.empty[s]); // W1: this thread's reads of K[s] and V^T[s] are done
                if (member) {
#pragma unroll
                    for (int i = 0; i < 64; i++) o[i] = fmaf(o[i], (i % 4) < 2 ? alpha0 : alpha1, acc[i]);
                }
            } else {
                mbarrier_arrive(&sm.empty[s]);
            }
        }
        e0 += n;
        if (MODE != kWsStreamOnly && my_row >= 0) store_rows(p, o, my_row, kv_head, lane, m0, m1, l0, l1, v_scale);
        bar_sync_named(bar_id, 128); // every warp is done with the list, Q and row_factor (W5)
        if (ctid == 0) mbarrier_arrive(&sm.gempty[gs]);
    }
}

template <bool X2, int MODE>
static pw_status_t launch_ws(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    void (*kernel)(AttentionParams) = union_ws_kernel<X2, MODE>;
    // The attribute is per function and per device: set it on the current device every
    // call (a host-side call of a few hundred ns; it is not captured into graphs).
    const cudaError_t a = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytesWs);
    if (a != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "cudaFuncSetAttribute(max dynamic smem %zu): %s", kSmemBytesWs,
                       cudaGetErrorString(a));
    kernel<<<grid, kWsThreads, kSmemBytesWs, stream>>>(params);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "attention kernel launch (WS): %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}

} // namespace pw

pw_status_t pw_launch_union_ws(const pw::AttentionParams &params, int mode, bool x2, pw_stream_t stream)
{
    unsigned grid = (unsigned)params.num_items;
    if (params.work_counter) {
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "multiprocessor count: %s", cudaGetErrorString(e));
        if ((int64_t)sms < params.num_items) grid = (unsigned)sms;
    }
    if (grid == 0) return PW_SUCCESS;
    switch (mode * 2 + (x2 ? 1 : 0)) {
    case 0: return pw::launch_ws<false, pw::kWsNormal>(params, grid, stream);
    case 1: return pw::launch_ws<true, pw::kWsNormal>(params, grid, stream);
    case 2: return pw::launch_ws<false, pw::kWsStreamOnly>(params, grid, stream);
    case 3: return pw::launch_ws<true, pw::kWsStreamOnly>(params, grid, stream);
    case 4: return pw::launch_ws<false, pw::kWsLockStep>(params, grid, stream);
    case 5: return pw::launch_ws<true, pw::kWsLockStep>(params, grid, stream);
    default: return pw_fail(PW_ERROR_INVALID_ARGUMENT, "WS kernel mode %d", mode);
    }
}
