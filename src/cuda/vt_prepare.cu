/* vt_prepare.cu — the V^T pre-pass of the full call's Union4 kernel (attention_lean.cuh,
 * PREVT; bench/NOTES.md v8 and v8.1).
 *
 * The attention kernels multiply P by V with V as the wgmma B operand, which FP8 wgmma takes
 * K-major only: V [token][d] must become V^T [d][position] (position: the token permutation
 * that lets P go from the QK accumulator straight into the A fragments, attention.cu). Done
 * inside the attention kernel, the transpose and the barrier that publishes it sit on every
 * page's chain (bench/NOTES.md v8: 9-14% of the lean kernel's time). Here each page that
 * some group's union holds is transposed once per call, in three launches after a memset:
 *  0. mark (one thread per Top-K row): touched[h][r][l] = 1 for every id l that is in S_i
 *     (docs/semantics.md §1) of a query i of request r; zeroes count[h]. These are exactly
 *     the pages of the call's unions, whatever the grouping (every union page is some
 *     member's id, every query is a member of one group), so the pre-pass does not wait
 *     for the regroup or union preparation: in a captured graph the full call runs them as
 *     a parallel branch beside these launches (plan.c, pw_capture_branch_open).
 *     With stack_mode PER_CALL the same launch has more CTAs, which take the FP8X2 tile
 *     choice's two counts over the Top-K rows in identity order (stack_count<R>; the memset
 *     clears them with the marks; pw_vt_buffers_t.stack_stat in pw_internal.h).
 *  1. scan (one thread per (KV head, request, page-table column)): a page whose `touched`
 *     byte is set (touched NULL: every page a query of its request may see) takes the next
 *     tile of its KV head (a warp-aggregated atomic on count[h]) and records it in
 *     slots[h][r][l] (-1 past capacity) and, below capacity, in list[h][tile]. Other slots
 *     keep whatever they held: the attention kernels read a slot only when its `touched`
 *     byte is set (with broken device data, e.g. a non-monotone cu_seqlens_q, union
 *     preparation may place a query in a request the mark did not: such a page is
 *     dropped). Tiles are handed out densely, so the workspace holds `capacity` tiles per
 *     KV head whatever the page table's width (an engine's table sized for its longest
 *     context costs 4 bytes of slots per column, not a 32 KiB tile).
 *  2. transpose (CTAs striding over the tiles of each KV head): tile i receives V^T of page
 *     list[h][i] in exactly the shared-memory byte order the attention kernel reads, so
 *     that it loads it with one bulk copy: E4M3, the first 16 KiB of the 32 KiB tile, in
 *     the order the in-kernel transpose writes (128B-swizzled rows of 128 positions); or,
 *     with f16_tiles (FP8X2 without per-token scales), f16 values of the same codes (exact)
 *     in two 16 KiB chunks of 64 positions in natural order (attention_common.cuh, "FP8X2
 *     on f16 V^T tiles"), unless the call runs the stacked tile (stack_mode ALWAYS,
 *     or PER_CALL with PW_STACK_CHOSEN on the counts), which reads E4M3 tiles. With per-token
 *     scales, pages of 128 tokens and ts_tiles (the stacked tile may run: their only
 *     reader), the E4M3 tile's second half then starts with the
 *     page's 128 K scales, 128 V scales (floats, raw), the V scales' 128 prefix maxima
 *     of |vs| and the 128 vs / vmax of a row that sees the whole page (the stacked tile
 *     copies them with K). A KV head
 *     with count > capacity is left alone: its attention runs
 *     on the kernel that transposes V itself (pw_union_attention_vt's fallback launch).
 * Tokens past any query's sight are NOT zeroed here: the attention kernel zeroes, per CTA,
 * the positions past its members' last visible token (zero_vt_after), as the in-kernel
 * transpose does, so the bytes the tensor cores read are the same and so are the outputs.
 * Pages whose physical id is outside the cache are skipped (the attention kernel drops
 * them). The `touched` bytes are cleared (a memset) and `count` zeroed in every call before
 * marking, and a slot is read only when this call's mark is set, so nothing carries over between calls:
 * the workspace may hold anything before a call (e.g. torch's caching allocator hands out
 * used memory).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "pageweaver.h"
#include "ptx.cuh"
#include "pw_internal.h"
#include "regroup_common.cuh"
#include "union_group.cuh"

namespace {

struct VtParams {
    const int32_t *topk_ids;    // [Hkv, N, K] (the mark)
    int32_t num_tokens, topk, page_size;
    const uint8_t *v_cache;     // e4m3, (page, h, t, d) at page * page_stride + h * head_stride + t * token_stride + d
    int64_t page_stride, head_stride, token_stride; // pw_args_cache_strides (16-byte multiples)
    const int32_t *page_table;  // [R, page_table_stride]
    int64_t page_table_stride;
    const int32_t *prefix_lens, *kv_lens, *cu_seqlens_q; // [R], [R], [R+1]
    pw_vt_buffers_t vt;
    int64_t max_pages, num_cache_pages;
    int32_t num_requests, num_kv_heads;
    int32_t heads_per_kv;       // G: the stacked tile's counts (pairs / 4-query halves) and rule
    uint32_t mark_ctas;         // the mark launch's CTAs past these count the units and blocks (stack_stat)
    // Per-token scales (args.token_scales; NULL: none): with the E4M3 tiles of pages of 128
    // tokens and vt.ts_tiles each tile's second half starts with the page's K then V scales
    // (the stacked tile's)
    const float *ts_k, *ts_v;
    int64_t ts_stride_h, ts_stride_t;
};

constexpr int kScanThreads = 256;
constexpr int kMarkThreads = 256;
constexpr int64_t kMarkMaxCtas = 8192; // the mark strides over the rows past this grid
constexpr int64_t kStackMaxCtas = 1024; // the stacked tile's counts stride over the blocks past this
constexpr size_t kStackHashBytes = (size_t)(kMarkThreads / 32) * 2 * 256 * 8; // G = 4's hash tables (32 KiB)

/* Query i's request (*request) and the bound of the ids union preparation keys for it:
 * 0 <= id < the returned limit = min(visible pages, 2^29, max_pages). The request: the
 * largest r with cu_seqlens_q[r] <= i, kept only when i lies in its row range
 * (pw_dev::request_rows); -1 when it does not (broken device data): no id is kept. Used by
 * the mark and by the stacked tile's counts. */
static __device__ __forceinline__ int64_t query_page_limit(const VtParams &p, int32_t i, int32_t *request)
{
    int32_t lo = 0, hi = p.num_requests; // cu_seqlens_q[lo] <= i < cu_seqlens_q[hi] if monotone
    while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (__ldg(p.cu_seqlens_q + mid) <= i) lo = mid;
        else hi = mid;
    }
    *request = lo;
    int32_t b, end;
    if (!pw_dev::request_rows(p.cu_seqlens_q, lo, p.num_tokens, &b, &end) || i < b || i >= end) return -1;
    const uint32_t visible = min(
        pw_dev::visible_page_count((int64_t)__ldg(p.prefix_lens + lo) + (i - b), __ldg(p.kv_lens + lo), p.page_size),
        pw_dev::kMaxUnionPageId);
    return min((int64_t)visible, p.max_pages);
}

/* The key of query i's id k (KV head h) for the stacked tile's counts: (request << 32) | id
 * when the id is one union preparation keeps (query_page_limit), else `none` (a value no
 * key takes: request < 2^31). */
static __device__ __forceinline__ unsigned long long stack_key(const VtParams &p, int32_t h, int64_t i, int k,
                                                               unsigned long long none)
{
    if (i >= p.num_tokens) return none;
    int32_t request;
    const int64_t limit = query_page_limit(p, (int32_t)i, &request);
    const int32_t id = __ldg(p.topk_ids + ((int64_t)h * p.num_tokens + i) * p.topk + k);
    return (int64_t)(uint32_t)id < limit ? ((unsigned long long)(uint32_t)request << 32) | (uint32_t)id : none;
}

/* The blocks of kQueries consecutive queries of one KV head that the counts read: every
 * PW_STACK_SAMPLE-th (those starting at query kQueries PW_STACK_SAMPLE j). */
static __host__ __device__ __forceinline__ int64_t stack_sampled_blocks(int64_t num_tokens, int64_t queries)
{
    const int64_t stride = queries * PW_STACK_SAMPLE;
    return (num_tokens + stride - 1) / stride;
}

/* Whether key x is one of the 32 keys of register set `set` across the warp. */
static __device__ __forceinline__ bool key_in(unsigned long long set, unsigned long long x)
{
    bool in = false;
#pragma unroll 8
    for (int src = 0; src < 32; src++) in |= __shfl_sync(0xffffffffu, set, src) == x;
    return in;
}

/* The counts' end (stack_count, stack_count_hashed): each warp's two sums (lane 0's) into
 * shared memory, then the CTA's into stack_stat[0] and [1] by one thread. */
static __device__ __forceinline__ void stack_add_sums(const VtParams &p, int warp, int lane, unsigned long long units,
                                                      unsigned long long whole)
{
    __shared__ unsigned long long part[kMarkThreads / 32][2];
    if (lane == 0) {
        part[warp][0] = units;
        part[warp][1] = whole;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long a = 0, b = 0;
        for (int w = 0; w < kMarkThreads / 32; w++) {
            a += part[w][0];
            b += part[w][1];
        }
        if (a) atomicAdd(p.vt.stack_stat, a);
        if (b) atomicAdd(p.vt.stack_stat + 1, b);
    }
}

/* The stacked tile's counts (pw_vt_buffers_t.stack_stat; K = 16): one warp per sampled block
 * (stack_sampled_blocks) of two units of 2R consecutive queries (R = 1, G = 16: pairs in blocks of 4; R = 2, G = 8:
 * 4-query halves in blocks of 8; G = 4's 8-query groups in blocks of 16: stack_count_hashed), key register r of unit u holding, in lane l, id l % 16 of
 * query i0 + 2R u + 2r + l / 16. A unit's distinct keys are those that lead their
 * __match_any_sync set in their register and are in none of the unit's earlier registers;
 * the block's are unit 0's plus unit 1's distinct keys unit 0 lacks. Sums of integers: the
 * same totals whatever the order of the atomics. */
template <int R>
static __device__ void stack_count(const VtParams &p, uint32_t cta)
{
    constexpr int kQueries = 4 * R; // per block
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The sampled blocks: every PW_STACK_SAMPLE-th of each KV head (block b of head h starts
    // at query kQueries b).
    const int64_t per_head = stack_sampled_blocks(p.num_tokens, kQueries), blocks = per_head * p.num_kv_heads;
    const int64_t warps = (int64_t)(gridDim.x - p.mark_ctas) * (kMarkThreads / 32);
    unsigned long long units = 0, whole = 0;
    for (int64_t j = (int64_t)cta * (kMarkThreads / 32) + warp; j < blocks; j += warps) { // warp-uniform
        const int32_t h = (int32_t)(j / per_head);
        const int64_t i0 = (int64_t)kQueries * PW_STACK_SAMPLE * (j - (int64_t)h * per_head);
        const unsigned long long none = 0xffffffff00000000ull; // | register, lane: distinct from every key
        unsigned long long key[2][R];
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                key[u][r] = stack_key(p, h, i0 + 2 * R * u + 2 * r + lane / 16, lane % 16,
                                      none | (uint32_t)(((u * R + r) << 5) | lane));
        int n[2] = {0, 0}, fresh = 0; // each unit's distinct keys; unit 1's that unit 0 lacks
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const unsigned long long k = key[u][r];
                const unsigned m = __match_any_sync(0xffffffffu, k);
                bool lead = (k >> 32) != 0xffffffffu && __ffs(m) - 1 == lane;
                // (key_in's shuffles run in every lane: no short-circuit around them)
#pragma unroll
                for (int e = 0; e < r; e++) {
                    const bool earlier = key_in(key[u][e], k);
                    lead = lead && !earlier;
                }
                n[u] += __popc(__ballot_sync(0xffffffffu, lead));
                if (u == 1) {
                    bool in0 = false;
#pragma unroll
                    for (int e = 0; e < R; e++) in0 |= key_in(key[0][e], k);
                    fresh += __popc(__ballot_sync(0xffffffffu, lead && !in0));
                }
            }
        units += (unsigned long long)(n[0] + n[1]);
        whole += (unsigned long long)(n[0] + fresh);
    }
    stack_add_sums(p, warp, lane, units, whole);
}

/* stack_count's G = 4 form (8-query units in blocks of 16): the same two sums, each unit's
 * distinct keys counted by inserting them into an open-addressing hash table in shared
 * memory (one per unit, 256 slots for at most 128 keys, linear probing with atomicCAS:
 * the insert that claims an empty slot is the key's one count), and unit 1's new keys
 * looked up in unit 0's table. The shuffle form needed 28 key_in loops a block (~1,800
 * 64-bit shuffles in one warp's dependent chain): the G = 4 per-call call paid ~15 us for
 * them on the mark launch, its critical path (H200, bench/NOTES.md, 28th session); here a
 * block costs ~8 atomics and ~8 lookups a lane. Exact counts: the same sums as the shuffle
 * form and the host's pw_fp8x2_stack_choice (test_full_call_gpu reads them back). */
static __device__ __forceinline__ uint32_t stack_hash(unsigned long long k)
{
    return ((uint32_t)(k ^ (k >> 29)) * 0x9E3779B1u) >> 24; // 0..255
}

static __device__ __forceinline__ bool stack_insert(unsigned long long (&table)[256], unsigned long long k)
{
    for (uint32_t h = stack_hash(k);; h = (h + 1u) & 255u) {
        const unsigned long long old = atomicCAS(&table[h], ~0ull, k);
        if (old == ~0ull) return true; // claimed: a new key
        if (old == k) return false;
    }
}

static __device__ __forceinline__ bool stack_lookup(const unsigned long long (&table)[256], unsigned long long k)
{
    for (uint32_t h = stack_hash(k);; h = (h + 1u) & 255u) {
        const unsigned long long v = table[h];
        if (v == k) return true;
        if (v == ~0ull) return false; // (a table holds at most 128 keys: an empty slot ends every probe)
    }
}

static __device__ __forceinline__ void stack_count_hashed(const VtParams &p, uint32_t cta)
{
    constexpr int R = 4, kQueries = 4 * R; // per block
    // per warp: unit 0's, unit 1's; dynamic shared memory, given by G = 4's launch only
    // (kStackHashBytes): as a static array every mark launch carried its 32 KiB, which slowed
    // the G = 16 call's mark launch, which union preparation waits for (A-hot C_online
    // 5.7 -> 11.3 us; bench/NOTES.md, 29th session)
    extern __shared__ unsigned long long stack_tables_raw[];
    auto &tables = *reinterpret_cast<unsigned long long(*)[kMarkThreads / 32][2][256]>(stack_tables_raw);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t per_head = stack_sampled_blocks(p.num_tokens, kQueries), blocks = per_head * p.num_kv_heads;
    const int64_t warps = (int64_t)(gridDim.x - p.mark_ctas) * (kMarkThreads / 32);
    unsigned long long units = 0, whole = 0; // this lane's shares
    for (int64_t j = (int64_t)cta * (kMarkThreads / 32) + warp; j < blocks; j += warps) { // warp-uniform
        // (32-bit: blocks <= N Hkv / 64 < 2^31; the 64-bit division's call kept a value in local memory)
        const int32_t h = (int32_t)((uint32_t)j / (uint32_t)per_head);
        const int64_t i0 = (int64_t)kQueries * PW_STACK_SAMPLE * (j - (int64_t)h * per_head);

        const unsigned long long none = 0xffffffff00000000ull; // never a key (request < 2^31)
        unsigned long long key[2][R];
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int r = 0; r < R; r++) key[u][r] = stack_key(p, h, i0 + 2 * R * u + 2 * r + lane / 16, lane % 16, none);
        // This warp's tables, their addresses formed after the key loads (whose 64-bit divisions
        // are calls: a warp-derived value held across them went to local memory).
        int tid_now;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_now));
        unsigned long long(&t0)[256] = tables[tid_now / 32][0];
        unsigned long long(&t1)[256] = tables[tid_now / 32][1];
#pragma unroll
        for (int t = 0; t < 256; t += 32) {
            t0[t + tid_now % 32] = ~0ull;
            t1[t + tid_now % 32] = ~0ull;
        }
        __syncwarp();
        int n0 = 0, n1 = 0, fresh = 0; // this lane's new keys of unit 0, of unit 1, of unit 1 not in unit 0
        uint32_t new1 = 0;              // bit r: key[1][r] was new in unit 1
#pragma unroll
        for (int r = 0; r < R; r++)
            if (key[0][r] != none) n0 += stack_insert(t0, key[0][r]);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const bool fresh1 = key[1][r] != none && stack_insert(t1, key[1][r]);
            new1 |= (uint32_t)fresh1 << r;
            n1 += fresh1;
        }
        __syncwarp(); // unit 0's table complete
#pragma unroll
        for (int r = 0; r < R; r++) fresh += ((new1 >> r) & 1u) && !stack_lookup(t0, key[1][r]);
        units += (unsigned long long)(n0 + n1);
        whole += (unsigned long long)(n0 + fresh);
        __syncwarp(); // every lane done with the tables before the next block clears them
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        units += __shfl_xor_sync(0xffffffffu, units, off);
        whole += __shfl_xor_sync(0xffffffffu, whole, off);
    }
    int tid_end; // re-read (volatile): the warp index held across the loop's division calls went to local memory
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_end));
    stack_add_sums(p, tid_end / 32, tid_end % 32, units, whole);
}

/* touched[h][r][l] = 1 for every Top-K id l in S_i of a query i of request r (the ids union
 * preparation keys: 0 <= l < min(visible pages, 2^29), and l < max_pages, the table's
 * width); count[h] = 0 for the scan. One thread per (KV head, query) row of K ids. The
 * request of query i: the largest r with cu_seqlens_q[r] <= i, kept only when i lies in its
 * row range (pw_dev::request_rows). Plain byte stores: every writer of a byte writes 1. */
__global__ void __launch_bounds__(kMarkThreads) vt_mark_kernel(const VtParams p)
{
    if (blockIdx.x >= p.mark_ctas) { // CTA-uniform: the stacked tile's counts (PW_STACK_PER_CALL)
        // R = PW_STACK_UNIT_QUERIES(G) / 2 key registers per unit
        const int unit = PW_STACK_UNIT_QUERIES(p.heads_per_kv);
        if (unit == 8) stack_count_hashed(p, blockIdx.x - p.mark_ctas);
        else if (unit == 4) stack_count<2>(p, blockIdx.x - p.mark_ctas);
        else stack_count<1>(p, blockIdx.x - p.mark_ctas);
        return;
    }
    if (blockIdx.x == 0)
        for (int32_t h = threadIdx.x; h < p.num_kv_heads; h += kMarkThreads) p.vt.count[h] = 0u; // read by the next launch only
    const int64_t rows = (int64_t)p.num_kv_heads * p.num_tokens;
    for (int64_t row = (int64_t)blockIdx.x * kMarkThreads + threadIdx.x; row < rows;
         row += (int64_t)p.mark_ctas * kMarkThreads) {
        const int32_t h = (int32_t)(row / p.num_tokens), i = (int32_t)(row - (int64_t)h * p.num_tokens);
        int32_t lo;
        const int64_t limit = query_page_limit(p, i, &lo);
        if (limit < 0) continue;
        uint8_t *const marks = p.vt.touched + ((int64_t)h * p.num_requests + lo) * p.max_pages;
        const int32_t *ids = p.topk_ids + row * p.topk;
        if (p.topk % 4 == 0 && ((uintptr_t)ids % 16u) == 0) { // K = 16 / 32 / 64 rows: 16-byte loads
            for (int k = 0; k < p.topk; k += 4) {
                const int4 v = __ldcs(reinterpret_cast<const int4 *>(ids + k));
                if ((int64_t)(uint32_t)v.x < limit) marks[v.x] = 1;
                if ((int64_t)(uint32_t)v.y < limit) marks[v.y] = 1;
                if ((int64_t)(uint32_t)v.z < limit) marks[v.z] = 1;
                if ((int64_t)(uint32_t)v.w < limit) marks[v.w] = 1;
            }
        } else {
            for (int k = 0; k < p.topk; k++) {
                const int32_t id = __ldcs(ids + k);
                if ((int64_t)(uint32_t)id < limit) marks[id] = 1;
            }
        }
    }
}

/* The staged tile's first kUnits x 2 KiB (E4M3: 8, f16: 16) from shared memory to dst,
 * coalesced: 16 bytes per thread and pass. */
template <int kUnits>
static __device__ __forceinline__ void copy_tile_out(uint8_t *dst, const uint8_t *vt, int tid)
{
#pragma unroll
    for (int k = 0; k < kUnits; k++) {
        const int idx = tid + 128 * k;
        reinterpret_cast<uint4 *>(dst)[idx] = pw::ld_shared_v4_u32(pw::smem_u32(vt) + 16 * idx);
    }
}

/* PAGE: tokens per page (128, or 64: each page still takes a whole tile). */
template <int PAGE>
__global__ void __launch_bounds__(kScanThreads) vt_scan_kernel(const VtParams p)
{
    const int64_t per_head = (int64_t)p.num_requests * p.max_pages;
    const int64_t e = (int64_t)blockIdx.x * kScanThreads + threadIdx.x;
    const int lane = threadIdx.x % 32;
    bool touched = false;
    int32_t h = -1;
    int64_t rl = 0;
    if (e < per_head * p.num_kv_heads) {
        h = (int32_t)(e / per_head);
        rl = e % per_head;
        if (p.vt.touched) {
            touched = p.vt.touched[e] != 0;
        } else {
            // Every page a query of the request may see: [0, ceil(min(kv_len, prefix + q_len) / P)).
            const int64_t r = rl / p.max_pages, l = rl % p.max_pages;
            const int64_t q_len = (int64_t)p.cu_seqlens_q[r + 1] - p.cu_seqlens_q[r];
            const int64_t last = min((int64_t)p.kv_lens[r], (int64_t)p.prefix_lens[r] + q_len);
            touched = l * PAGE < last;
        }
    }
    // Lanes of one KV head take consecutive tiles with one atomic (the lowest such lane's).
    const uint32_t same = __match_any_sync(0xffffffffu, touched ? h : -2 - lane);
    uint32_t base = 0;
    if (touched && lane == __ffs(same) - 1) base = atomicAdd(p.vt.count + h, (uint32_t)__popc(same));
    base = __shfl_sync(0xffffffffu, base, __ffs(same) - 1);
    if (!touched) return;
    const uint32_t tile = base + (uint32_t)__popc(same & ((1u << lane) - 1u));
    const bool fits = (int64_t)tile < p.vt.capacity;
    p.vt.slots[e] = fits ? (int32_t)tile : -1;
    if (fits) p.vt.list[(int64_t)h * p.vt.capacity + tile] = rl;
}

/* PAGE = 64: the page's 64 rows are staged, rows 64..127 of the staged tile are zeros, so
 * the tile's positions 64..127 (no token) hold zeros whatever the cache holds: the 64-token
 * lean kernel's steps multiply P = 0 by them (attention_lean.cuh). */
template <int PAGE>
__global__ void __launch_bounds__(128) vt_transpose_kernel(const VtParams p)
{
    __shared__ __align__(1024) uint8_t v[pw::kTileBytes];
    __shared__ __align__(1024) uint8_t vt[pw::kVtTileBytes]; // E4M3: the first half
    const int32_t h = (int32_t)blockIdx.y;
    const int64_t count = p.vt.count[h];
    if (count > p.vt.capacity) return; // CTA-uniform: this head runs on the fallback kernel
    const int tid = threadIdx.x, warp = tid / 32;
    // E4M3 tiles when the call runs the stacked tile (its counts are complete: the mark ran).
    const bool f16_tiles =
        p.vt.f16_tiles && !pw::stack_runs(p.vt.stack_mode, p.vt.stack_stat, p.heads_per_kv); // CTA-uniform
    for (int64_t i = blockIdx.x; i < count; i += gridDim.x) {
        const int64_t rl = p.vt.list[(int64_t)h * p.vt.capacity + i];
        const int64_t r = rl / p.max_pages, l = rl % p.max_pages;
        const int32_t physical = p.page_table[r * p.page_table_stride + l];
        if (physical < 0 || (int64_t)physical >= p.num_cache_pages) continue; // CTA-uniform
        // Page rows [token][d] of KV head h into the TMA layout (128B-swizzled), 8 x 16 B per thread.
        const uint8_t *src = p.v_cache + (int64_t)physical * p.page_stride + (int64_t)h * p.head_stride;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int idx = tid + 128 * k, t = idx / 8, c = idx % 8;
            uint4 x;
            if constexpr (PAGE < pw::kPageSize)
                x = t < PAGE ? __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)t * p.token_stride + 16 * c))
                             : make_uint4(0u, 0u, 0u, 0u);
            else
                x = __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)t * p.token_stride + 16 * c));
            pw::st_shared_v4_u32(pw::smem_u32(v) + pw::sw128((uint32_t)t, (uint32_t)c), x);
        }
        __syncthreads(); // v written; also: every thread's reads of the previous tile's vt are done
        uint8_t *dst = p.vt.tiles + ((int64_t)h * p.vt.capacity + i) * (int64_t)pw::kVtTileBytes;
        if (f16_tiles) {
            // Thread t owns row d = t of V^T: unit a (positions 8a .. 8a + 7) of chunk a / 8.
            const uint32_t d = (uint32_t)tid, col = pw::smem_u32(v) + d % 16;
#pragma unroll 2
            for (int a = 0; a < pw::kPageSize / 8; a++) {
                uint32_t w[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t t = 8u * (uint32_t)a + 2u * (uint32_t)j;
                    const uint32_t lo = pw::ld_shared_u8(col + pw::sw128(t, d / 16));
                    const uint32_t hi = pw::ld_shared_u8(col + pw::sw128(t + 1u, d / 16));
                    w[j] = pw::cvt_f16x2_e4m3x2((uint16_t)(lo | hi << 8));
                }
                pw::st_shared_v4_u32(pw::smem_u32(vt) + (uint32_t)(a / 8) * pw::kTileBytes + pw::sw128(d, (uint32_t)(a % 8)),
                                     make_uint4(w[0], w[1], w[2], w[3]));
            }
            __syncthreads();
            copy_tile_out<16>(dst, vt, tid);
            continue;
        }
#pragma unroll 1
        for (int chunk = 2 * warp; chunk < 2 * warp + 2; chunk++)
            pw::transpose_v_chunk(pw::smem_u32(vt), pw::smem_u32(v), (uint32_t)chunk, pw::kPageSize - 1);
        if constexpr (PAGE == pw::kPageSize) {
            // Per-token scales, as the stacked tile reads them (a tensor copy with K;
            // attention_stacked.cuh) behind the E4M3 V^T (written only where the stacked
            // tile, their one reader, may run and the call has per-token scales: ts_tiles;
            // ~2 KiB a tile): the page's K scales, V scales (raw, whatever the slots hold,
            // NaN included: each row masks the tokens it cannot see; a side without scales
            // reads 1) and the V scales' prefix maxima, pmax[t] =
            // the largest |vs_u| over u <= t, NaN dropped (0 if none is a number): a row
            // that sees tokens 0..lim reads its vmax input at pmax[lim]. CTA-uniform.
            if (p.vt.ts_tiles && (p.ts_k || p.ts_v)) {
                const int64_t at = (int64_t)h * p.ts_stride_h + ((int64_t)physical * PAGE + tid) * p.ts_stride_t;
                const float ks = p.ts_k ? __ldg(p.ts_k + at) : 1.0f, vs = p.ts_v ? __ldg(p.ts_v + at) : 1.0f;
                float run = fmaxf(0.0f, fabsf(vs)); // fmaxf drops NaN
                const int lane = tid % 32;
#pragma unroll
                for (int d = 1; d < 32; d *= 2) {
                    const float up = __shfl_up_sync(0xffffffffu, run, d);
                    if (lane >= d) run = fmaxf(run, up);
                }
                float *warp_max = reinterpret_cast<float *>(vt + pw::kTileBytes); // each warp's largest |vs| (E4M3: free)
                if (lane == 31) warp_max[warp] = run;
                __syncthreads();
                float page_max = 0.0f; // pmax[127]
                for (int w = 0; w < 4; w++) {
                    if (w < warp) run = fmaxf(run, warp_max[w]);
                    page_max = fmaxf(page_max, warp_max[w]);
                }
                // vs / vmax of a row that sees the whole page, by the kernel's helper
                // (ts_vmax_of, as stacked_ts_scale_p's other path): the same bits
                float pre, inv;
                pw::ts_vmax_of(page_max, pre, inv);
                float *scales = reinterpret_cast<float *>(dst + pw::kTileBytes);
                scales[tid] = ks;
                scales[pw::kPageSize + tid] = vs;
                scales[2 * pw::kPageSize + tid] = run;
                scales[3 * pw::kPageSize + tid] = __fmul_rn(__fmul_rn(vs, pre), inv);
            }
        }
        __syncthreads();
        copy_tile_out<8>(dst, vt, tid);
    }
}

} // namespace

extern "C" pw_status_t pw_vt_prepare(const pw_problem_t *problem, const pw_attention_args_t *args,
                                     const pw_vt_buffers_t *vt, pw_stream_t stream)
{
    return pw_vt_prepare_parts(problem, args, vt, PW_VT_MARKS | PW_VT_TILES, stream);
}

extern "C" pw_status_t pw_vt_prepare_parts(const pw_problem_t *problem, const pw_attention_args_t *args,
                                           const pw_vt_buffers_t *vt, int parts, pw_stream_t stream)
{
    if (parts & ~(PW_VT_MARKS | PW_VT_TILES))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "V^T pre-pass: parts 0x%x has unknown bits", (unsigned)parts);
    if (problem->num_tokens == 0 || problem->num_requests == 0) return PW_SUCCESS;
    if (problem->page_size != pw::kPageSize && problem->page_size != 64)
        return pw_fail(PW_ERROR_UNSUPPORTED, "V^T pre-pass: page_size %d (64 or 128)", problem->page_size);
    if (!vt || !vt->slots || !vt->list || !vt->count || !vt->tiles || vt->capacity < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "V^T pre-pass: buffers missing or capacity < 1");
    VtParams p;
    p.topk_ids = args->topk_ids;
    p.num_tokens = problem->num_tokens;
    p.topk = problem->topk;
    p.page_size = problem->page_size;
    p.v_cache = static_cast<const uint8_t *>(args->v_cache);
    const pw_cache_strides_t cs = pw_args_cache_strides(problem, args);
    p.page_stride = cs.page;
    p.head_stride = cs.head;
    p.token_stride = cs.token;
    p.page_table = args->requests.page_table;
    p.page_table_stride = args->requests.page_table_stride;
    p.prefix_lens = args->requests.prefix_lens;
    p.kv_lens = args->requests.kv_lens;
    p.cu_seqlens_q = args->requests.cu_seqlens_q;
    p.vt = *vt;
    p.max_pages = problem->max_pages_per_request;
    p.num_cache_pages = problem->num_cache_pages;
    p.num_requests = problem->num_requests;
    p.num_kv_heads = problem->num_kv_heads;
    p.heads_per_kv = problem->q_heads_per_kv;
    p.mark_ctas = 0;
    const pw_token_scales_t ts = pw_args_token_scales(args);
    p.ts_k = ts.k;
    p.ts_v = ts.v;
    p.ts_stride_h = ts.stride_h;
    p.ts_stride_t = ts.stride_t;
    const int64_t entries = (int64_t)problem->num_kv_heads * problem->num_requests * problem->max_pages_per_request;
    const int64_t scan_ctas = (entries + kScanThreads - 1) / kScanThreads;
    if (scan_ctas > 0x7fffffff || problem->num_kv_heads > 65535)
        return pw_fail(PW_ERROR_UNSUPPORTED, "V^T pre-pass: %lld page-table entries exceed the scan's grid",
                       (long long)entries);
    cudaError_t e;
    PW_TRY(pw_check_vt_stack(problem, args, vt));
    const bool per_call = vt->stack_mode == PW_STACK_PER_CALL, stack = vt->stack_mode != PW_STACK_NEVER;
    if (vt->touched && (parts & PW_VT_MARKS)) { // the marks (and stack_stat after them): cleared, then set from the Top-K ids (count zeroed there)
        const size_t clear = stack ? PW_STACK_STAT_OFFSET(entries) + PW_STACK_STAT_BYTES : (size_t)entries;
        e = cudaMemsetAsync(vt->touched, 0, clear, (cudaStream_t)stream);
        if (e != cudaSuccess)
            return pw_fail(PW_ERROR_CUDA, "V^T pre-pass: clearing the marks: %s", cudaGetErrorString(e));
        const int64_t rows = (int64_t)problem->num_kv_heads * problem->num_tokens;
        const int64_t need = (rows + kMarkThreads - 1) / kMarkThreads;
        const unsigned mark_ctas = (unsigned)(need < 1 ? 1 : need < kMarkMaxCtas ? need : kMarkMaxCtas);
        // PER_CALL: CTAs for the counts, one warp per sampled block (two units) up to
        // kStackMaxCtas CTAs.
        const int64_t blocks = stack_sampled_blocks(problem->num_tokens, 2 * PW_STACK_UNIT_QUERIES(problem->q_heads_per_kv)) *
                               problem->num_kv_heads;
        const int64_t stack_need = per_call ? (blocks + kMarkThreads / 32 - 1) / (kMarkThreads / 32) : 0;
        const unsigned stack_ctas = (unsigned)(stack_need < kStackMaxCtas ? stack_need : kStackMaxCtas);
        p.mark_ctas = mark_ctas;
        const size_t smem = per_call && PW_STACK_UNIT_QUERIES(problem->q_heads_per_kv) == 8 ? kStackHashBytes : 0;
        vt_mark_kernel<<<mark_ctas + stack_ctas, kMarkThreads, smem, (cudaStream_t)stream>>>(p);
        e = cudaGetLastError();
        if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "V^T pre-pass mark launch: %s", cudaGetErrorString(e));
    }
    if (!(parts & PW_VT_TILES)) return PW_SUCCESS;
    if (problem->page_size == 64) vt_scan_kernel<64><<<(unsigned)scan_ctas, kScanThreads, 0, (cudaStream_t)stream>>>(p);
    else vt_scan_kernel<pw::kPageSize><<<(unsigned)scan_ctas, kScanThreads, 0, (cudaStream_t)stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "V^T pre-pass scan launch: %s", cudaGetErrorString(e));
    // Enough CTAs to fill the GPU (4 of 48 KiB of static shared memory fit an SM), each striding over its head's tiles.
    const int64_t per_head = vt->capacity < 1024 ? vt->capacity : 1024;
    const dim3 grid((unsigned)per_head, (unsigned)problem->num_kv_heads);
    if (problem->page_size == 64) vt_transpose_kernel<64><<<grid, 128, 0, (cudaStream_t)stream>>>(p);
    else vt_transpose_kernel<pw::kPageSize><<<grid, 128, 0, (cudaStream_t)stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "V^T pre-pass transpose launch: %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}
