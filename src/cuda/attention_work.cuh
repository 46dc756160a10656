/* attention_work.cuh — what one CTA of the Union8 / Union4 / per-query kernels works on:
 * its KV head, group, half and query slots (cta_work), its page list (build_page_list) and
 * its Q tile (quantize_q). Shared by attention.cu and the translation units that instantiate
 * more of the lean kernel (attention_page64.cu). PAGE: tokens per page (64 or 128). */
#ifndef PW_ATTENTION_WORK_CUH
#define PW_ATTENTION_WORK_CUH

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "ptx.cuh"

namespace pw {

/* The per-CTA page list: the pages this CTA walks (ascending logical id), their physical
 * pages and the member bits of this CTA's 4 slots (SLOTS = 8, half 0 and slot_mask 0xff:
 * the whole group, the dense tile of attention_dense.cuh). Pages whose physical id is
 * outside the cache are dropped (and counted). Every CTA of a cluster builds the same page
 * sequence. TOPK: the device's K (16, 32, 64; the lean kernel only above 16): the
 * per-query row's stride, and the group rows' 8 K entries, read in passes of one entry per
 * thread; the list keeps at most its capacity (4 K >= the pages of 4 queries, so only
 * broken device metadata could reach it). PAGE: tokens per page (64 on the lean kernels'
 * page-64 forms, attention_lean.cuh). tid_read: -1 (threadIdx.x), or the caller's own read of
 * it (the same value): the stacked tile passes a volatile re-read so that ptxas does not
 * hoist this function's warp and lane out of its persistent loop (they went to local
 * memory at 128 registers). */
template <int VARIANT, class Plan, int SLOTS = kSlotsPerCta, int TOPK = kTopK, int PAGE = kPageSize>
static __device__ void build_page_list(Plan &sm, const AttentionParams &p, int kv_head,
                                       int64_t group, int half, int request, int32_t query_row,
                                       const int64_t (&limits)[SLOTS], int union_size,
                                       int32_t *page_vt = nullptr, uint32_t slot_mask = 0xFu, int tid_read = -1)
{
    constexpr int kEntries = VARIANT == kPerQuery ? TOPK : kGroupSize * TOPK;
    constexpr int kPasses = (kEntries + kThreads - 1) / kThreads;
    constexpr int kCapacity = (int)(sizeof(sm.page_logical) / sizeof(sm.page_logical[0]));
    static_assert(VARIANT != kPerQuery || TOPK <= kThreads, "per-query: one thread per Top-K id");
    const int64_t query_limit = limits[0]; // per-query: the query's last visible token
    const int tid = tid_read >= 0 ? tid_read : (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    int kept = 0; // kPasses > 1: entries kept by the earlier passes (CTA-uniform)
#pragma unroll 1
    for (int pass = 0; pass < kPasses; pass++) {
        const int e = pass * kThreads + tid; // this thread's entry
        int32_t logical = -1;
        uint32_t members = 0; // this CTA's 4 slot bits
        if (VARIANT == kPerQuery) {
            // The query's own Top-K row: valid ids (docs/semantics.md §1), distinct, ascending.
            if (tid < TOPK) {
                const int32_t *row = p.topk_ids + ((int64_t)kv_head * p.num_tokens + query_row) * TOPK;
                const int32_t id = row[tid];
                // query_limit < 0 (no visible token: broken device lengths) keeps nothing.
                const bool valid = id >= 0 && query_limit >= 0 && (int64_t)id <= query_limit / PAGE;
                bool first = valid;
                for (int k = 0; k < tid; k++) first = first && row[k] != id;
                if (first) {
                    logical = id;
                    members = 1u;
                }
            }
        } else {
            if (e < union_size && (kPasses == 1 || e < kEntries)) {
                const int64_t base = ((int64_t)kv_head * p.max_groups + group) * p.union_capacity;
                logical = p.union_pages[base + e];
                members = (p.member_masks[base + e] >> (4 * half)) & slot_mask; // dev impl 12: 2 of the 4 slots
                if (VARIANT == kUnion4 && members == 0) logical = -1; // Union4 skips its half's non-pages
            }
        }
        // The page's physical id and (page_vt: the lean kernel on the pre-pass) its V^T tile
        // and mark, loaded together: one round trip, not three in a row.
        int32_t physical = -1, vt = 0;
        bool marked = true;
        if (logical >= 0) {
            // Page-table rows (and the pre-pass's V^T tiles) hold max_pages_per_request pages: a
            // larger id needs kv_len > max_pages_per_request * P, broken device data; it is a bad
            // page, and the table is not read past the row.
            if ((int64_t)logical < p.max_pages) {
                physical = p.page_table[(int64_t)request * p.page_table_stride + logical];
                if (page_vt) {
                    const int64_t entry = vt_entry(kv_head, request, logical, p.num_requests, p.max_pages);
                    if (p.vt_touched) marked = p.vt_touched[entry] != 0;
                    vt = p.vt_slots[entry];
                }
            }
            if (physical < 0 || (int64_t)physical >= p.num_cache_pages) {
                // Invalid physical page: never read, contributes nothing, counted once per
                // (query, KV head, page) by the CTA that owns the query.
                if (p.bad_page_count && members) atomicAdd(p.bad_page_count, (uint32_t)__popc(members));
                logical = -1;
            }
        }
        // A page the pre-pass did not mark has no tile (broken device data only,
        // vt_prepare.cu): dropped, its stale slot (loaded above) never used.
        if (page_vt && !marked) logical = -1;
        // Order-preserving compaction of the kept entries.
        const bool keep = logical >= 0;
        const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
        if (kPasses > 1 && pass > 0) __syncthreads(); // every thread read the previous pass's counts
        if (lane == 0) sm.warp_count[warp] = __popc(ballot);
        __syncthreads();
        int offset = kept;
        for (int w = 0; w < warp; w++) offset += sm.warp_count[w];
        if (keep) {
            const int at = offset + __popc(ballot & ((1u << lane) - 1u));
            if (kPasses == 1 || at < kCapacity) {
                sm.page_logical[at] = logical;
                sm.page_physical[at] = physical;
                sm.page_members[at] = (uint8_t)members;
                sm.page_vlim[at] = page_v_limit<SLOTS, PAGE>(members, limits, logical);
                if (page_vt) page_vt[at] = vt;
            }
        }
        if constexpr (kPasses == 1) {
            if (tid == 0) {
                int total = 0;
                for (int w = 0; w < kThreads / 32; w++) total += sm.warp_count[w];
                sm.num_pages = total;
            }
        } else {
            for (int w = 0; w < kThreads / 32; w++) kept += sm.warp_count[w];
            if (tid == 0 && pass == kPasses - 1) sm.num_pages = min(kept, kCapacity);
        }
    }
    // For the per-query variant the kept ids are distinct but not yet sorted: sort the (at
    // most K) entries by rank after the barrier.
    __syncthreads();
    if (VARIANT == kPerQuery) {
        const int n = sm.num_pages;
        int32_t my_page = -1, my_phys = -1, my_vt = 0;
        uint8_t my_vlim = 0;
        int rank = 0;
        if (tid < n) {
            my_page = sm.page_logical[tid];
            my_phys = sm.page_physical[tid];
            my_vlim = sm.page_vlim[tid];
            if (page_vt) my_vt = page_vt[tid];
            for (int k = 0; k < n; k++) rank += sm.page_logical[k] < my_page;
        }
        __syncthreads();
        if (tid < n) {
            sm.page_logical[rank] = my_page;
            sm.page_physical[rank] = my_phys;
            sm.page_members[rank] = 1;
            sm.page_vlim[rank] = my_vlim;
            if (page_vt) page_vt[rank] = my_vt;
        }
        __syncthreads();
    }
}

/* q_lo_addr: 0, or (PW_PRECISION_FP8X2) the tile for Q's second term. */
template <int G = kHeadsPerKv, class Plan>
static __device__ __forceinline__ void quantize_q(Plan &sm, const AttentionParams &p, int kv_head,
                                                  const int32_t (&query_rows)[kSlotsPerCta], float score_scale,
                                                  uint32_t q_lo_addr)
{
    quantize_q_rows<false, G>(smem_u32(sm.q), q_lo_addr, sm.row_factor, threadIdx.x, p, kv_head, query_rows,
                              score_scale);
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
static __device__ __forceinline__ bool cta_work(const AttentionParams &p, uint32_t rank, CtaWork &w,
                                                int64_t block_arg = -1)
{
    // dev impl 12 passes blockIdx.x / 2 (two CTAs per half); 32-bit unsigned as blockIdx.x, so
    // that the other kernels' index arithmetic (and code) stays what it was.
    const uint32_t block = block_arg < 0 ? blockIdx.x : (uint32_t)block_arg;
    int num_members = 0;
    w.half = 0;
    w.request = 0;
    w.union_size = 0;
    w.group = 0;
#pragma unroll
    for (int k = 0; k < kSlotsPerCta; k++) w.query_rows[k] = -1;
    if (VARIANT == kPerQuery) {
        w.kv_head = block / p.num_tokens;
        if (vt_skips_head(p, w.kv_head)) return false;
        w.query_rows[0] = block % p.num_tokens;
        int lo = 0, hi = p.num_requests - 1; // request r with cu[r] <= n < cu[r+1]
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.cu_seqlens_q[mid] <= w.query_rows[0]) lo = mid; else hi = mid - 1;
        }
        w.request = lo;
        num_members = 1;
    } else {
        const int64_t item = block / 2;
        w.half = VARIANT == kUnion8 ? (int)rank : (int)(block % 2);
        w.kv_head = (int)(item / p.max_groups);
        w.group = item % p.max_groups;
        // The descriptor loaded with the group count and the head's V^T count (one round
        // trip, not three): its slot exists (max_groups); past num_groups it is not used.
        const pw_group_desc_t g = p.groups[(int64_t)w.kv_head * p.max_groups + w.group];
        const int32_t num_groups = p.num_groups[w.kv_head];
        if (vt_skips_head(p, w.kv_head)) return false; // both CTAs of a cluster agree
        if (w.group >= num_groups) return false;
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

} // namespace pw

#endif
