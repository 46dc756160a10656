/* regroup_wide.cuh — Algorithm 1 (paper §3.1, docs/semantics.md §3) on sm_90 for Top-K rows
 * of up to 64 ids: pw_regroup_dev_variant 6 (regroup_dev.h). A first, simple kernel for
 * K > 16, where v3 (regroup.cu: 16-position masks and M rows) stops; since 2026-12-02
 * (thirteenth session) pw_regroup runs it at K 17..64 only past the direct-indexed page
 * bound (max_pages_per_request > 2048 at W128, 4096 at W64), and regroup_wide_masks.cuh
 * (variant 7, 3.4-5.5x faster on A-hot) below it. tests/gpu/test_regroup_gpu.c checks it byte for byte
 * against pw_ref_regroup (test_wide_topk, the K 32 / 64 captures; H200 2026-12-02, racecheck
 * clean). Included by regroup.cu (after its RegroupParams, regroup_params and launch_status,
 * which it uses).
 *
 * One CTA per (window, KV head) as v3 (N/W + R CTAs per KV head, request r owning CTAs
 * cu[r]/W + r onwards; thread 0 finds the request by a binary search), one thread per query:
 *  1. S_j: the row's ids that are visible (docs/semantics.md §1) and first in the row; a
 *     shared-memory hash set (2 W K slots, linear probing) gives each distinct page a slot,
 *     and each thread keeps its pages' slots in registers (16 bits each).
 *  2. Guarded mode: the identity grouping's union visits; groups of g in 1, 2, 4, 8 lie in one
 *     warp, which ORs its members' slots into its union bitmap a group at a time and counts
 *     the bits it set.
 *  3. The greedy loop with every thread: the seed is the smallest unassigned id; each member
 *     step, each unassigned query counts its pages whose slot does not carry the group's
 *     stamp (K shared loads), a block minimum of (count << 8 | j) picks the winner, whose
 *     thread stamps its slots. Two block barriers per step: measured on the H200 (A-hot,
 *     W128 greedy) 64 / 71 / 123 us a call at K 16 / 32 / 64, ~500-960 ns a step (v3: ~77 ns
 *     a step at K = 16; bench/NOTES.md twelfth session).
 * Output: perm[h*N + row0 + s] = row0 + order[s] (identity order when guarded mode keeps it).
 * With p.adaptive (the second launch of regroup_wide_masks' split call) a CTA whose window's
 * last query sees at most 2048 (W128) / 4096 (W64) pages exits: the masks kernel did it.
 * Broken device data (cu_seqlens out of range) make a CTA exit without writing; nothing is
 * read or written outside the buffers. */
#ifndef PW_REGROUP_WIDE_CUH
#define PW_REGROUP_WIDE_CUH

namespace {

/* Shared memory of one window (dynamic): the hash set's keys and stamps (2 W K slots), then
 * in guarded mode one union bitmap over the slots per warp (the identity visits). */
template <int W, int K> struct WideTile {
    static constexpr int kSlots = 2 * W * K; /* a power of two: W and K are */
    static constexpr int kLog2Slots = W == 128 ? (K == 64 ? 14 : 13) : (K == 64 ? 13 : 12);
    static constexpr size_t kKeyBytes = (size_t)kSlots * 4u;
    static constexpr size_t kStampBytes = (size_t)kSlots; /* one uint8 per slot */
    static constexpr int kBitmapWords = kSlots / 32;
    /* Guarded mode adds the per-warp bitmaps. */
    static size_t bytes(bool guarded)
    {
        return kKeyBytes + kStampBytes + (guarded ? (size_t)(W / 32) * kBitmapWords * 4u : 0u);
    }
};
static_assert((1 << WideTile<128, 64>::kLog2Slots) == WideTile<128, 64>::kSlots, "slots W128 K64");
static_assert((1 << WideTile<128, 32>::kLog2Slots) == WideTile<128, 32>::kSlots, "slots W128 K32");
static_assert((1 << WideTile<64, 64>::kLog2Slots) == WideTile<64, 64>::kSlots, "slots W64 K64");
static_assert((1 << WideTile<64, 32>::kLog2Slots) == WideTile<64, 32>::kSlots, "slots W64 K32");
static_assert(WideTile<128, 64>::kSlots < 0xffff, "slot numbers fit 16 bits, 0xffff free");
constexpr uint32_t kNoSlot = 0xffffu;

template <int W, int K> static __device__ __forceinline__ uint32_t wide_hash(int32_t page)
{
    return ((uint32_t)page * 0x9E3779B1u) >> (32 - WideTile<W, K>::kLog2Slots);
}

/* Block minimum of v (every thread of the W-thread block calls it; one barrier). The caller
 * places another barrier before the next call (s_min is rewritten there). */
template <int W> static __device__ __forceinline__ uint32_t block_min(uint32_t v, uint32_t *s_min)
{
    const uint32_t r = __reduce_min_sync(kFullMask, v);
    if ((threadIdx.x & 31) == 0) s_min[threadIdx.x >> 5] = r;
    __syncthreads();
    uint32_t m = s_min[0];
#pragma unroll
    for (int w = 1; w < W / 32; w++) m = min(m, s_min[w]);
    return m;
}

/* Position i's slot (16 bits each, two per register; kNoSlot: not in S_j). */
template <int K> static __device__ __forceinline__ uint32_t slot_at(const uint32_t (&sl)[K / 2], int i)
{
    return (sl[i / 2] >> (16 * (i & 1))) & 0xffffu;
}

/* |S_j \ U| for the group stamped gid, from this thread's slots. */
template <int K>
static __device__ __forceinline__ uint32_t fresh_pages(const uint32_t (&sl)[K / 2], const uint8_t *stamp, uint8_t gid)
{
    uint32_t cost = 0;
#pragma unroll
    for (int i = 0; i < K; i++) {
        const uint32_t s = slot_at<K>(sl, i);
        if (s != kNoSlot) cost += stamp[s] != gid;
    }
    return cost;
}

/* U := U + S_j (this thread's slots) for the group stamped gid. */
template <int K> static __device__ __forceinline__ void stamp_pages(const uint32_t (&sl)[K / 2], uint8_t *stamp, uint8_t gid)
{
#pragma unroll
    for (int i = 0; i < K; i++) {
        const uint32_t s = slot_at<K>(sl, i);
        if (s != kNoSlot) stamp[s] = gid;
    }
}

/* CTA t's window (thread 0 of the wide-Top-K kernels, both variants): the last request r
 * with cu[r] / W + r <= t (strictly increasing in r for a valid cu_seqlens), then the
 * window in it. ok = 0 for a surplus CTA and for broken device data (cu_seqlens out of
 * range); else row0, n (queries), causal0 (the first query's causal position) and kv_len. */
template <int W>
static __device__ __forceinline__ void wide_find_window(const RegroupParams &p, int32_t t, int32_t &ok, int32_t &row0,
                                                        int32_t &n, int64_t &causal0, int32_t &kv_len)
{
    int32_t lo = 0, hi = p.num_requests - 1, found = -1;
    while (lo <= hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        const int32_t b = __ldg(p.cu_seqlens + mid);
        if (b >= 0 && (int64_t)(b / W) + mid <= (int64_t)t) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    ok = 0;
    if (found >= 0) {
        const int32_t b = __ldg(p.cu_seqlens + found), e = __ldg(p.cu_seqlens + found + 1);
        if (b >= 0 && e >= b && e <= p.num_tokens) {
            const int32_t k = t - (b / W + found);
            const int32_t windows = (e - b) / W + ((e - b) % W != 0);
            if (k >= 0 && k < windows) {
                row0 = b + k * W;
                n = min(W, e - row0);
                causal0 = (int64_t)__ldg(p.prefix_lens + found) + (int64_t)k * W;
                kv_len = __ldg(p.kv_lens + found);
                ok = 1;
            }
        }
    }
}

/* The split call's rule (p.adaptive, regroup_wide_masks.cuh): a window whose last query
 * sees last_visible pages runs on the masks kernel iff they fit its direct-indexed columns;
 * the other windows on this kernel. Both kernels decide by this one function. */
template <int W> static __device__ __forceinline__ bool wide_window_fits_masks(uint32_t last_visible)
{
    return last_visible <= (uint32_t)Tile<W>::kDirectMaxPages;
}

template <int W, int K>
__global__ void __launch_bounds__(W) regroup_wide_kernel(const RegroupParams p)
{
    using T = WideTile<W, K>;
    extern __shared__ __align__(16) unsigned char dyn[];
    int32_t *const keys = reinterpret_cast<int32_t *>(dyn);
    uint8_t *const stamp = dyn + T::kKeyBytes;
    __shared__ int32_t s_ok, s_row0, s_n, s_kv_len;
    __shared__ int64_t s_causal0;
    __shared__ uint8_t s_order[W];
    __shared__ uint32_t s_min[W / 32];
    __shared__ uint32_t s_seed_size;
    __shared__ uint32_t s_identity_visits;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t head = (int32_t)blockIdx.y, t = (int32_t)blockIdx.x;

    if (tid == 0) {
        wide_find_window<W>(p, t, s_ok, s_row0, s_n, s_causal0, s_kv_len);
        s_identity_visits = 0;
    }
    __syncthreads();
    if (!s_ok) return; /* block-uniform: a surplus CTA leaves before touching the hash set */
    const int32_t row0 = s_row0, n = s_n;
    /* Second launch of a split call (regroup_wide_masks.cuh, p.adaptive): the windows whose
     * last query sees at most the direct bound were the masks kernel's. Block-uniform. */
    if (p.adaptive && wide_window_fits_masks<W>(pw_dev::visible_page_count(s_causal0 + n - 1, s_kv_len, p.page_size)))
        return;
    for (int x = tid; x < T::kSlots; x += W) {
        keys[x] = kEmptyKey;
        stamp[x] = 0;
    }
    __syncthreads();

    /* --- 1. S_j (visible, first in the row) and each page's slot, by position. */
    uint32_t sl[K / 2];
#pragma unroll
    for (int i = 0; i < K / 2; i++) sl[i] = 0xffffffffu; /* kNoSlot in both halves */
    uint32_t size = 0; /* |S_j| */
    if (tid < n) {
        const uint32_t visible = pw_dev::visible_page_count(s_causal0 + tid, s_kv_len, p.page_size);
        const int32_t *row = p.topk_ids + ((int64_t)head * p.num_tokens + row0 + tid) * p.topk;
        int32_t ids[K];
#pragma unroll
        for (int i = 0; i < K; i++) {
            const int32_t id = i < p.topk ? __ldcs(row + i) : -1;
            ids[i] = (uint32_t)id < visible ? id : -1;
        }
#pragma unroll
        for (int i = 1; i < K; i++) {
            bool repeat = false;
#pragma unroll
            for (int k = 0; k < i; k++) repeat |= ids[i] == ids[k];
            if (repeat) ids[i] = -1;
        }
#pragma unroll
        for (int i = 0; i < K; i++) {
            if (ids[i] < 0) continue;
            uint32_t s = wide_hash<W, K>(ids[i]);
            int32_t key = atomicCAS(&keys[s], kEmptyKey, ids[i]);
            while (key != kEmptyKey && key != ids[i]) { /* linear probing; <= W K keys in 2 W K slots */
                s = (s + 1u) & (uint32_t)(T::kSlots - 1);
                key = atomicCAS(&keys[s], kEmptyKey, ids[i]);
            }
            sl[i / 2] = (sl[i / 2] & ~(0xffffu << (16 * (i & 1)))) | (s << (16 * (i & 1)));
            size++;
        }
    }
    __syncthreads(); /* every page has its slot; the stamps are clear */

    /* --- 2. Guarded mode: the identity grouping's union visits. Guarded g is 1, 2, 4 or 8,
     * so each group of g consecutive queries lies in one warp: the warp ORs its members'
     * slots into its union bitmap, a group at a time, and counts the bits it set. */
    const int32_t g = p.group_size;
    if (p.guarded) {
        uint32_t *const bitmap = reinterpret_cast<uint32_t *>(dyn + T::kKeyBytes + T::kStampBytes) +
                                 (size_t)warp * T::kBitmapWords;
        uint32_t visits = 0;
        for (int32_t gl = 0; gl < 32 / g; gl++) { /* warp-uniform */
            for (int x = lane; x < T::kBitmapWords; x += 32) bitmap[x] = 0u;
            __syncwarp();
            if (lane / g == gl) {
#pragma unroll
                for (int i = 0; i < K; i++) {
                    const uint32_t s = slot_at<K>(sl, i);
                    if (s == kNoSlot) continue;
                    const uint32_t bit = 1u << (s & 31u);
                    visits += (atomicOr(&bitmap[s >> 5], bit) & bit) == 0u;
                }
            }
            __syncwarp();
        }
        visits = __reduce_add_sync(kFullMask, visits);
        if (lane == 0 && visits) atomicAdd(&s_identity_visits, visits);
    }

    /* --- 3. Algorithm 1: groups of g slots, stamps 1, 2, ... per group (<= W groups). */
    bool assigned = tid >= n;
    uint32_t greedy_visits = 0; /* the same in every thread (block-wide values) */
    int32_t s = 0;
    uint8_t gid = 0;
    while (s < n) { /* block-uniform */
        gid++;
        /* The seed: the smallest unassigned id; U = S_seed. */
        const uint32_t seed = block_min<W>(assigned ? 0xffffffffu : (uint32_t)tid, s_min);
        if ((uint32_t)tid == seed) {
            stamp_pages<K>(sl, stamp, gid);
            assigned = true;
            s_order[s] = (uint8_t)tid;
            s_seed_size = size;
        }
        __syncthreads();
        greedy_visits += s_seed_size;
        s++;
        for (int m = 1; m < g && s < n; m++) { /* block-uniform */
            const uint32_t cost = assigned ? 0u : fresh_pages<K>(sl, stamp, gid);
            const uint32_t win = block_min<W>(assigned ? 0xffffffffu : (cost << 8) | (uint32_t)tid, s_min);
            greedy_visits += win >> 8;
            if ((uint32_t)tid == (win & 0xffu)) {
                stamp_pages<K>(sl, stamp, gid);
                assigned = true;
                s_order[s] = (uint8_t)tid;
            }
            __syncthreads(); /* the stamps and s_min are read before the next step writes them */
            s++;
        }
    }
    const bool keep_greedy = !p.guarded || greedy_visits < s_identity_visits;
    int32_t *out = p.perm + (int64_t)head * p.num_tokens + row0;
    for (int32_t x = tid; x < n; x += W) out[x] = row0 + (keep_greedy ? (int32_t)s_order[x] : x);
}

template <int W, int K>
pw_status_t launch_wide(const RegroupParams &params, int32_t num_kv_heads, cudaStream_t stream)
{
    void (*kernel)(RegroupParams) = regroup_wide_kernel<W, K>;
    const size_t smem = WideTile<W, K>::bytes(params.guarded != 0);
    const cudaError_t e =
        cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "regroup (wide Top-K): cudaFuncSetAttribute (%zu bytes): %s", smem,
                       cudaGetErrorString(e));
    const dim3 grid((unsigned)(params.num_tokens / W + params.num_requests), (unsigned)num_kv_heads);
    kernel<<<grid, W, smem, stream>>>(params);
    return launch_status("regroup (wide Top-K)");
}

/* pw_regroup_dev_variant 6 for a GREEDY / GUARDED grouping (its checks made: K <= 64). */
pw_status_t regroup_wide(const RegroupParams &params, const pw_grouping_t *grouping, int32_t num_kv_heads,
                         cudaStream_t st)
{
    if (grouping->window == 64)
        return params.topk <= 32 ? launch_wide<64, 32>(params, num_kv_heads, st)
                                 : launch_wide<64, 64>(params, num_kv_heads, st);
    return params.topk <= 32 ? launch_wide<128, 32>(params, num_kv_heads, st)
                             : launch_wide<128, 64>(params, num_kv_heads, st);
}

} // namespace

#endif
