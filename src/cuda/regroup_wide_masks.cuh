/* regroup_wide_masks.cuh — Algorithm 1 (paper §3.1, docs/semantics.md §3) on sm_90 for Top-K
 * rows of 17..64 ids with v3's layout (regroup.cu): pw_regroup_dev_variant 7 (regroup_dev.h).
 * Included by regroup.cu after regroup_wide.cuh (it uses Tile, RegroupParams, nonzero_runs,
 * clear_column, launch_status and the wide kernels' window lookup, wide_find_window).
 *
 * Why: the wide kernel (variant 6) spends ~500-960 ns a greedy step (two block barriers and
 * K shared loads per thread), 71 / 123 us per A-hot call at K = 32 / 64; v3 spends ~77 ns a
 * step at K = 16 with one warp and a precomputed matrix M. This kernel is v3's plan with
 * K-bit rows (K = 32: one word, K = 64: two):
 *  1. One CTA per (window, KV head), one thread per query; thread 0 finds the request by a
 *     binary search (as variant 6), the warps clear their mask columns meanwhile.
 *  2. Direct-indexed page -> query masks qm[c][page] (bit l of word c: query 32c + l
 *     selected the page), word-major so that warp c writes only column c. S_j (visible,
 *     first in the row) comes out of the same atomicOr: only this thread sets its bit, so
 *     a repeated id finds its bit already set. Direct only: with max_pages_per_request <=
 *     2048 (W128) / 4096 (W64) every window runs here (a page id >= max_pages_per_request
 *     is treated as outside S_j: v3's rule, it cannot be visible under the contract, and
 *     broken kv_lens never index outside the columns); past that bound the call is split
 *     in two launches (p.adaptive): this kernel takes the windows whose last query sees
 *     at most the bound (every id it keeps is below that count, which bounds the rows),
 *     variant 6 (a hash set) the others, each CTA deciding by the same count.
 *  3. M[w][j] (K bits): bit i set iff page i of query j is in S_w, by a 32 x 32 bit
 *     transpose of the K mask rows' word c per thread (K/32 transposes per word).
 *     M is W x W x K/8 bytes: 64 KiB (W128, K32), 128 KiB (W128, K64).
 *  4. One warp runs the greedy loop exactly as v3: lane owns W/32 consecutive queries,
 *     pend_j &= ~M[w][j] after each member w, key = |pend_j| << kKeyShift | j's M row offset,
 *     one redux.sync.min per step, the next seed found off the chain.
 *  5. Guarded mode: the identity grouping's visits from the mask columns (nonzero_runs).
 * Output: perm[h*N + row0 + s] = row0 + order[s] (identity order when guarded mode keeps it).
 * Broken device data (cu_seqlens out of range) make a CTA exit without writing; nothing is
 * read or written outside the buffers. */
#ifndef PW_REGROUP_WIDE_MASKS_CUH
#define PW_REGROUP_WIDE_MASKS_CUH

namespace {

template <int W, int K> struct WideMaskTile {
    static constexpr int kWords = W / 32;                      /* words of a query mask */
    static constexpr int kColStride = Tile<W>::kColStride;     /* rows of a mask column */
    static constexpr int kDirectMaxPages = Tile<W>::kDirectMaxPages;
    static constexpr int kPosWords = K / 32;                   /* words of one M entry */
    static constexpr uint32_t kEntryBytes = 4u * kPosWords;    /* M[w][j] */
    static constexpr uint32_t kRowBytes = (uint32_t)W * kEntryBytes; /* M[w][.] */
    static constexpr int kKeyShift = (W == 128 ? 14 : 12) + (K == 64 ? 3 : 2); /* log2(W * kRowBytes) */
    static constexpr uint32_t kOffsetMask = (1u << kKeyShift) - 1u;
    static constexpr size_t kQmBytes = (size_t)kWords * kColStride * 4u; /* 32 KiB */
    static constexpr size_t kMBytes = (size_t)W * kRowBytes;
    static constexpr size_t kBytes = kQmBytes + kMBytes;
};
static_assert((1u << WideMaskTile<128, 32>::kKeyShift) == 128u * WideMaskTile<128, 32>::kRowBytes, "W128 K32 keys");
static_assert((1u << WideMaskTile<128, 64>::kKeyShift) == 128u * WideMaskTile<128, 64>::kRowBytes, "W128 K64 keys");
static_assert((1u << WideMaskTile<64, 32>::kKeyShift) == 64u * WideMaskTile<64, 32>::kRowBytes, "W64 K32 keys");
static_assert((1u << WideMaskTile<64, 64>::kKeyShift) == 64u * WideMaskTile<64, 64>::kRowBytes, "W64 K64 keys");
static_assert((65u << WideMaskTile<128, 64>::kKeyShift) < kAssignedKey, "costs stay below kAssignedKey");
static_assert(WideMaskTile<128, 64>::kBytes + 4096 <= 227u * 1024u, "W128 K64 fits one SM's shared memory");

/* a[c] bit r := a[r] bit c (32 x 32 bits; five rounds of block swaps). */
static __device__ __forceinline__ void transpose32x32(uint32_t (&a)[32])
{
#pragma unroll
    for (int j = 16; j > 0; j >>= 1) {
        const uint32_t m = j == 16 ? 0x0000ffffu : j == 8 ? 0x00ff00ffu : j == 4 ? 0x0f0f0f0fu
                         : j == 2 ? 0x33333333u : 0x55555555u;
#pragma unroll
        for (int k = 0; k < 32; k++) {
            if (k & j) continue;
            const uint32_t t = ((a[k] >> j) ^ a[k | j]) & m;
            a[k | j] ^= t;
            a[k] ^= t << j;
        }
    }
}

/* This lane's QPL entries of one M row (QPL * K/8 consecutive bytes, 8- or 16-byte aligned). */
template <int QPL, int PW>
static __device__ __forceinline__ void load_wide_m_row(const unsigned char *row_lane, uint32_t (&mw)[QPL][PW])
{
    constexpr int kWordsPerLane = QPL * PW;
    if constexpr (kWordsPerLane % 4 == 0) {
#pragma unroll
        for (int v = 0; v < kWordsPerLane / 4; v++) {
            const uint4 x = reinterpret_cast<const uint4 *>(row_lane)[v];
            const uint32_t w4[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int u = 0; u < 4; u++) mw[(4 * v + u) / PW][(4 * v + u) % PW] = w4[u];
        }
    } else { /* W64, K32: two words */
        const uint2 x = *reinterpret_cast<const uint2 *>(row_lane);
        mw[0][0] = x.x;
        mw[1][0] = x.y;
    }
}

template <int W, int K>
__global__ void __launch_bounds__(W, 1) regroup_wide_masks_kernel(const RegroupParams p)
{
    using T = WideMaskTile<W, K>;
    constexpr int QPL = W / 32, PW = T::kPosWords;
    extern __shared__ __align__(16) unsigned char dyn[];
    uint32_t *const qm = reinterpret_cast<uint32_t *>(dyn); /* [kWords][kColStride] */
    unsigned char *const m = dyn + T::kQmBytes;             /* [W][W][PW] words */
    __shared__ int32_t s_ok, s_row0, s_n, s_kv_len;
    __shared__ int64_t s_causal0;
    __shared__ uint32_t s_valid[W][PW]; /* bit i: position i of query j's row is in S_j */
    __shared__ uint8_t s_sizes[W];      /* |S_j| */
    __shared__ uint8_t s_order[W];
    __shared__ uint32_t s_identity_visits;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t head = (int32_t)blockIdx.y, t = (int32_t)blockIdx.x;
    uint32_t *const qm_col = qm + warp * T::kColStride;

    if (tid == 0) {
        wide_find_window<W>(p, t, s_ok, s_row0, s_n, s_causal0, s_kv_len); /* variant 6's rule */
        s_identity_visits = 0;
    }
    if (!p.adaptive) clear_column(qm_col, p.qm_rows, lane); /* only this warp writes its column */
    __syncthreads();
    if (!s_ok) return; /* block-uniform: a surplus CTA leaves */
    const int32_t row0 = s_row0, n = s_n;
    /* The window's last query sees the most pages; its count bounds every id kept below. */
    const uint32_t last_visible = pw_dev::visible_page_count(s_causal0 + n - 1, s_kv_len, p.page_size);
    if (p.adaptive) { /* split call: the windows past the bound are variant 6's (block-uniform) */
        if (!wide_window_fits_masks<W>(last_visible)) return;
        clear_column(qm_col, (int32_t)((last_visible + 3u) & ~3u), lane); /* kDirectMaxPages % 4 == 0 */
        __syncwarp();
    }

    /* --- 1. S_j and the mask columns: one atomicOr per visible id, which also finds the
     * repeats (this thread alone sets its bit of the column). */
    int32_t ids[K];
    uint32_t vm[PW];
#pragma unroll
    for (int h = 0; h < PW; h++) vm[h] = 0u;
    if (tid < n) {
        uint32_t visible = pw_dev::visible_page_count(s_causal0 + tid, s_kv_len, p.page_size);
        visible = min(visible, p.adaptive ? last_visible : (uint32_t)p.max_pages); /* see the file comment */
        const int32_t *row = p.topk_ids + ((int64_t)head * p.num_tokens + row0 + tid) * p.topk;
#pragma unroll
        for (int i = 0; i < K; i++) {
            const int32_t id = i < p.topk ? __ldcs(row + i) : -1;
            ids[i] = (uint32_t)id < visible ? id : -1;
        }
        const uint32_t bit = 1u << lane;
#pragma unroll
        for (int i = 0; i < K; i++) {
            if (ids[i] < 0) continue;
            const uint32_t old = atomicOr(qm_col + ids[i], bit);
            if (old & bit) ids[i] = -1; /* a repeat: not in S_j */
            else vm[i / 32] |= 1u << (i % 32);
        }
    } else {
#pragma unroll
        for (int i = 0; i < K; i++) ids[i] = -1;
    }
    uint32_t size = 0;
#pragma unroll
    for (int h = 0; h < PW; h++) {
        s_valid[tid][h] = vm[h];
        size += (uint32_t)__popc(vm[h]);
    }
    s_sizes[tid] = (uint8_t)size;
    __syncthreads(); /* every column is complete */

    /* --- 2. Guarded mode: the identity grouping's union visits (g in 1, 2, 4, 8). */
    if (p.guarded) {
        const int32_t num_rows = (int32_t)min(last_visible, p.adaptive ? last_visible : (uint32_t)p.max_pages);
        uint32_t v = 0;
        for (int x = tid; x < num_rows; x += W) {
#pragma unroll
            for (int c = 0; c < T::kWords; c++) v += nonzero_runs(qm[c * T::kColStride + x], p.group_size);
        }
        v = __reduce_add_sync(kFullMask, v);
        if (lane == 0 && v != 0) atomicAdd(&s_identity_visits, v);
    }

    /* --- 3. M[32c + b][tid]: this thread's K mask rows, word c, transposed. */
#pragma unroll
    for (int c = 0; c < T::kWords; c++) {
#pragma unroll
        for (int h = 0; h < PW; h++) {
            uint32_t a[32];
#pragma unroll
            for (int i = 0; i < 32; i++) a[i] = ids[32 * h + i] >= 0 ? qm[c * T::kColStride + ids[32 * h + i]] : 0u;
            transpose32x32(a);
#pragma unroll
            for (int b = 0; b < 32; b++)
                *reinterpret_cast<uint32_t *>(m + (size_t)(32 * c + b) * T::kRowBytes + (size_t)tid * T::kEntryBytes +
                                              4u * h) = a[b];
        }
    }
    __syncthreads();
    if (warp != 0) return;

    /* --- 4. Algorithm 1, one warp (v3's loop with K-bit pend words). Lane owns queries
     * lane * QPL + k; base[k] = the query's M row offset, or kAssignedKey once placed. */
    uint32_t valid[QPL][PW], base[QPL];
#pragma unroll
    for (int k = 0; k < QPL; k++) {
        const int j = lane * QPL + k;
#pragma unroll
        for (int h = 0; h < PW; h++) valid[k][h] = s_valid[j][h];
        base[k] = j < n ? (uint32_t)j * T::kRowBytes : kAssignedKey;
    }
    uint32_t visits = 0;
    const unsigned char *const m_lane = m + (size_t)lane * QPL * T::kEntryBytes;
    /* n as a uniform value (a redux result), so that every loop branch below is uniform. */
    const int32_t nu = (int32_t)__reduce_min_sync(kFullMask, (uint32_t)n);
    const int32_t g = p.group_size;
    uint32_t best = base[0];
#pragma unroll
    for (int k = 1; k < QPL; k++) best = min(best, base[k]);
    uint32_t seed = __reduce_min_sync(kFullMask, best);
    uint32_t mw[QPL][PW];
    load_wide_m_row<QPL, PW>(m_lane + (seed & T::kOffsetMask), mw);
    int32_t s = 0;
    bool more = nu > 0;
    while (more) { /* one group: slots [s, end); seed known, its M row loaded */
#pragma unroll
        for (int k = 0; k < QPL; k++) base[k] = base[k] == seed ? kAssignedKey : base[k];
        if (lane == 0) s_order[s] = (uint8_t)(seed / T::kRowBytes);
        visits += s_sizes[seed / T::kRowBytes];
        const int32_t end = min(nu, s + g);
        more = end < nu;
        const bool has_last = end - s >= 2; /* a member after the seed */
        ++s;
        uint32_t pend[QPL][PW];
#pragma unroll
        for (int k = 0; k < QPL; k++)
#pragma unroll
            for (int h = 0; h < PW; h++) pend[k][h] = valid[k][h];
        /* One member step: pend takes the previous member's M row first; the winner's key
         * masked is its M row offset, the key itself marks it assigned. */
        auto member_step = [&]() -> uint32_t {
            uint32_t key[QPL];
#pragma unroll
            for (int k = 0; k < QPL; k++) {
                uint32_t cost = 0;
#pragma unroll
                for (int h = 0; h < PW; h++) {
                    pend[k][h] &= ~mw[k][h];
                    cost += (uint32_t)__popc(pend[k][h]);
                }
                key[k] = (cost << T::kKeyShift) + base[k];
            }
            uint32_t kmin = key[0];
#pragma unroll
            for (int k = 1; k < QPL; k++) kmin = min(kmin, key[k]);
            const uint32_t win = __reduce_min_sync(kFullMask, kmin);
            const uint32_t w_off = win & T::kOffsetMask;
#pragma unroll
            for (int k = 0; k < QPL; k++) base[k] = key[k] == win ? kAssignedKey : base[k];
            if (lane == 0) s_order[s] = (uint8_t)(w_off / T::kRowBytes);
            visits += win >> T::kKeyShift;
            ++s;
            return w_off;
        };
        while (s + 1 < end) /* every member but the last (uniform) */
            load_wide_m_row<QPL, PW>(m_lane + member_step(), mw);
        if (has_last) {
            /* The group's last member (its M row is not needed). Off the chain: the two
             * smallest unassigned ids s0 < s1 before it; the next seed is s1 if the member
             * is s0, else s0. */
            uint32_t b0 = base[0];
#pragma unroll
            for (int k = 1; k < QPL; k++) b0 = min(b0, base[k]);
            const uint32_t s0 = __reduce_min_sync(kFullMask, b0);
            uint32_t b1 = kAssignedKey;
#pragma unroll
            for (int k = 0; k < QPL; k++) b1 = min(b1, base[k] == s0 ? kAssignedKey : base[k]);
            const uint32_t s1 = __reduce_min_sync(kFullMask, b1);
            const uint32_t w_off = member_step();
            seed = w_off == s0 ? s1 : s0;
        } else { /* a group of one query */
            uint32_t b0 = base[0];
#pragma unroll
            for (int k = 1; k < QPL; k++) b0 = min(b0, base[k]);
            seed = __reduce_min_sync(kFullMask, b0);
        }
        /* The next seed's row (masked: in bounds even after the last group). */
        load_wide_m_row<QPL, PW>(m_lane + (seed & T::kOffsetMask), mw);
    }
    __syncwarp();
    const bool keep_greedy = !p.guarded || visits < s_identity_visits;
    int32_t *out = p.perm + (int64_t)head * p.num_tokens + row0;
    for (int32_t x = lane; x < n; x += 32) out[x] = row0 + (keep_greedy ? (int32_t)s_order[x] : x);
}

template <int W, int K>
pw_status_t launch_wide_masks(const RegroupParams &params, int32_t num_kv_heads, cudaStream_t stream)
{
    void (*kernel)(RegroupParams) = regroup_wide_masks_kernel<W, K>;
    const size_t smem = WideMaskTile<W, K>::kBytes;
    const cudaError_t e =
        cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "regroup (wide Top-K, masks): cudaFuncSetAttribute (%zu bytes): %s", smem,
                       cudaGetErrorString(e));
    const dim3 grid((unsigned)(params.num_tokens / W + params.num_requests), (unsigned)num_kv_heads);
    kernel<<<grid, W, smem, stream>>>(params);
    return launch_status("regroup (wide Top-K, masks)");
}

/* pw_regroup_dev_variant 7 for a GREEDY / GUARDED grouping (its checks made: K <= 64):
 * this kernel when max_pages_per_request fits the direct-indexed columns; past that bound
 * (an engine's page table sized for its longest context) a split call: this kernel for the
 * windows that fit, then variant 6 for the others. */
pw_status_t regroup_wide_masks(RegroupParams params, const pw_grouping_t *grouping, int32_t num_kv_heads,
                               cudaStream_t st)
{
    const int32_t bound = grouping->window == 64 ? Tile<64>::kDirectMaxPages : Tile<128>::kDirectMaxPages;
    params.direct = 1;
    params.adaptive = params.max_pages > bound;
    pw_status_t status;
    if (grouping->window == 64)
        status = params.topk <= 32 ? launch_wide_masks<64, 32>(params, num_kv_heads, st)
                                   : launch_wide_masks<64, 64>(params, num_kv_heads, st);
    else
        status = params.topk <= 32 ? launch_wide_masks<128, 32>(params, num_kv_heads, st)
                                   : launch_wide_masks<128, 64>(params, num_kv_heads, st);
    if (status != PW_SUCCESS || !params.adaptive) return status;
    return regroup_wide(params, grouping, num_kv_heads, st);
}

} // namespace

#endif
