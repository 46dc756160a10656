/* regroup.cu — online regroup on sm_90 (SPEC §3, paper §3.1 Algorithm 1, §3.3).
 *
 * One CTA per (regroup window, KV head), one thread per query of the window (W = 64 or
 * 128). The result is Algorithm 1 exactly, for every context length: pages are renumbered
 * per window, so nothing depends on a page-count capacity (the paper's 512-page bitmaps
 * and their identity fallback beyond 64K tokens are gone).
 *
 * Plan of one window (bench/NOTES.md has the napkin math and the measured versions):
 *  1. Each thread loads its 64-byte Top-K row, keeps the ids of S_j (SPEC §1) and drops
 *     repeats inside the row.
 *  2. The window's distinct pages get dense numbers 0..D-1 (D <= W*16) through a
 *     shared-memory hash set; lanes of a warp that hold the same page at the same row
 *     position (sink page, own page, recent pages: the common case on sorted rows) share
 *     one insert and one mask update.
 *  3. Page -> query masks: qmask[page] has bit j set iff query j selected the page.
 *  4. Each thread transposes its 16 mask rows into M[w][j] (16 bits): bit i set iff page i
 *     of query j is also in S_w. After w joins the group, query j's pages outside the
 *     union are pend_j & ~M[w][j], so the greedy step costs one 16-bit shared load per
 *     query instead of a walk over a bitmap or a hash lookup per page.
 *  5. One warp runs the W dependent steps of Algorithm 1 with no block barrier: each lane
 *     owns W/32 queries, key = |S_j \ U| * 128 + j, one redux.sync.min per step.
 *  6. Guarded mode: the identity grouping's union visits are sum over pages of the number
 *     of g-query runs with a bit set in qmask[page] (a popcount per 32-bit word); greedy
 *     visits are the winners' new-page counts. Identity is kept unless greedy is
 *     strictly smaller.
 * Output: perm[h*N + slot] = original row, written once per slot. No workspace, no host
 * synchronisation: capturable in a CUDA graph.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "regroup_common.cuh"
#include "regroup_dev.h"
#include "selection.h"

namespace {

using pw_dev::kFullMask;
using pw_dev::kMaxTopk;

constexpr int32_t kEmptyKey = -1;          /* hash slot holds no page (pages are >= 0) */
constexpr uint32_t kAssignedKey = 0x40000000u; /* key of a query no longer selectable */

/* Tile constants of one window of W queries. */
template <int W> struct Tile {
    static constexpr int kWords = W / 32;                 /* words of a query mask */
    static constexpr int kMaxPages = W * kMaxTopk;        /* distinct pages of a window */
    static constexpr int kLog2Slots = W == 128 ? 12 : 11; /* hash slots = 2 * kMaxPages */
    static constexpr int kSlots = 1 << kLog2Slots;
};

/* Shared memory of one CTA. The hash set, the page -> query masks and the M matrix are
 * alive one after the other and share their storage. */
template <int W> struct Smem {
    union alignas(16) {
        struct {
            int32_t keys[Tile<W>::kSlots];  /* page id or kEmptyKey */
            uint16_t lids[Tile<W>::kSlots]; /* dense page number of the page in keys[] */
        } hash;
        uint32_t qmask[Tile<W>::kMaxPages][Tile<W>::kWords]; /* [page][query word] */
        uint16_t m[W][W];                                    /* M[w][j], see the plan */
    } u;
    uint16_t vmask[W]; /* bit i: position i of query j's row is in S_j (first occurrence) */
    uint8_t sizes[W];  /* |S_j| */
    uint8_t order[W];  /* greedy order: local query id of each slot */
    int32_t found, row0, len, c0, kv_len;
    int32_t num_pages;        /* D */
    uint32_t identity_visits; /* guarded mode: union visits of the identity grouping */
};
static_assert(sizeof(Smem<128>) <= 48 * 1024, "regroup W128 must fit static shared memory");

struct RegroupParams {
    const int32_t *topk_ids;    /* [Hkv, N, K] */
    const int32_t *cu_seqlens;  /* [R+1] */
    const int32_t *prefix_lens; /* [R] */
    const int32_t *kv_lens;     /* [R] */
    int32_t *perm;              /* [Hkv, N], written */
    int32_t num_tokens, num_requests, topk, page_size, group_size, guarded;
};

template <int W> static __device__ __forceinline__ uint32_t hash_slot(int32_t page)
{
    return ((uint32_t)page * 0x9E3779B1u) >> (32 - Tile<W>::kLog2Slots);
}

/* Number of runs of g bits (g in 1, 2, 4, 8, runs aligned at bit 0) with a bit set. */
static __device__ __forceinline__ uint32_t nonzero_runs(uint32_t x, int32_t g)
{
    if (g >= 2) x |= x >> 1;
    if (g >= 4) x |= x >> 2;
    if (g >= 8) x |= x >> 4;
    const uint32_t run_start = g == 8 ? 0x01010101u : g == 4 ? 0x11111111u
                             : g == 2 ? 0x55555555u : 0xffffffffu;
    return (uint32_t)__popc(x & run_start);
}

/* Transposes two 16 x 16 bit matrices at once, one in the low and one in the high halves
 * of a[0..15]: afterwards bit i of half h of a[k] is what bit k of half h of a[i] was.
 * Four rounds of block swaps (8x8, 4x4, 2x2, 1x1), 8 row pairs each. */
static __device__ __forceinline__ void transpose16x16x2(uint32_t (&a)[16])
{
#pragma unroll
    for (int s = 8; s > 0; s >>= 1) {
        const uint32_t keep = s == 8 ? 0x00ff00ffu : s == 4 ? 0x0f0f0f0fu
                            : s == 2 ? 0x33333333u : 0x55555555u;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (i & s) continue;
            const uint32_t t = ((a[i] >> s) ^ a[i + s]) & keep;
            a[i + s] ^= t;
            a[i] ^= t << s;
        }
    }
}

/* Argmin of the greedy step across the warp. kArgminRedux (the library's choice) uses
 * redux.sync.min; the others exist for bench/bench_regroup.c (pw_regroup_dev_variant):
 * a 5-round xor-shuffle butterfly, and "prep only" that skips the greedy loop and writes
 * identity order (timing of everything but the loop; not a regroup). */
enum { kArgminRedux = 0, kArgminShuffle = 1, kPrepOnly = 2 };

template <int W, bool kVec, int kArgmin>
__global__ void __launch_bounds__(W) regroup_kernel(const RegroupParams p)
{
    using T = Tile<W>;
    __shared__ Smem<W> sm;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t head = (int32_t)blockIdx.y;
    const int32_t t = (int32_t)blockIdx.x;

    /* --- Window of this CTA. Sparse numbering, no scan over requests: request r owns
     * CTAs [first_r, first_r + windows_r) with first_r = cu[r]/W + r, disjoint for
     * consecutive requests because floor(a/W) + ceil(q/W) <= floor((a+q)/W) + 1;
     * floor(N/W) + R CTAs cover every window and the surplus ones exit. first_r grows
     * with r, so the CTA finds the last r with first_r <= t by a W-ary search: each round
     * samples W requests and counts (one barrier) how many start at or before t; one
     * round when R <= W, log_W(R) rounds in general. */
    /* Speculative Top-K row load: window t starts at row t*W whenever every earlier
     * request's length is a multiple of W (always with one request), so the row load
     * overlaps the request lookup; a wrong guess costs a second load. */
    const int64_t guess_row0 = (int64_t)t * W;
    int32_t page[kMaxTopk];
    if (guess_row0 + tid < p.num_tokens) {
        pw_dev::load_topk_row<kVec>(
            p.topk_ids + ((int64_t)head * p.num_tokens + guess_row0 + tid) * p.topk, p.topk, page);
    } else {
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) page[i] = -1;
    }
    if (tid == 0) {
        sm.found = 0;
        sm.num_pages = 0;
        sm.identity_visits = 0;
    }
    {
        int4 *keys4 = reinterpret_cast<int4 *>(sm.u.hash.keys);
        for (int x = tid; x < T::kSlots / 4; x += W)
            keys4[x] = make_int4(kEmptyKey, kEmptyKey, kEmptyKey, kEmptyKey);
    }
    __syncthreads();
    for (int32_t lo = 0, hi = p.num_requests;;) { /* the request is in [lo, hi) */
        const int32_t step = (hi - lo) / W + ((hi - lo) % W != 0);
        const int32_t r = lo + tid * step;
        bool starts_by_t = false;
        int32_t b = 0, e = 0, prefix = 0, kv_len = 0;
        if (r < hi) {
            b = __ldg(p.cu_seqlens + r);
            if (step == 1) { /* last round: everything the owner needs, in one trip */
                e = __ldg(p.cu_seqlens + r + 1);
                prefix = __ldg(p.prefix_lens + r);
                kv_len = __ldg(p.kv_lens + r);
            }
            starts_by_t = b >= 0 && b / W + r <= t;
        }
        const int32_t count = __syncthreads_count(starts_by_t); /* a prefix of the samples */
        if (step == 1) {
            if (count > 0 && tid == count - 1 && e >= b && e <= p.num_tokens) {
                const int32_t k = t - (b / W + r); /* window of request r */
                const int32_t windows = (e - b) / W + ((e - b) % W != 0);
                if (k < windows) {
                    sm.row0 = b + k * W;
                    sm.len = min(W, e - b - k * W);
                    sm.c0 = prefix + k * W;
                    sm.kv_len = kv_len;
                    sm.found = 1;
                }
            }
            break;
        }
        if (count == 0) break; /* only with a broken cu_seqlens (cu[0] != 0) */
        lo += (count - 1) * step;
        hi = min(hi, lo + step);
    }
    __syncthreads();
    if (!sm.found) return;
    const int32_t row0 = sm.row0;
    const int32_t n = min(sm.len, p.num_tokens - row0); /* clamp: broken cu_seqlens only */
    const int32_t kv_len = sm.kv_len;
    const int64_t causal0 = sm.c0;

    /* --- 1. S_j: ids that are visible and first in the row; the others become -1. */
    uint32_t vmask = 0;
    if (row0 != guess_row0) { /* block-uniform */
        if (tid < n)
            pw_dev::load_topk_row<kVec>(
                p.topk_ids + ((int64_t)head * p.num_tokens + row0 + tid) * p.topk, p.topk, page);
    }
    if (tid < n) {
        const uint32_t visible =
            pw_dev::visible_page_count(causal0 + tid, kv_len, p.page_size);
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++)
            vmask |= (uint32_t)((uint32_t)page[i] < visible) << i;
    } else {
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) page[i] = -1;
    }
#pragma unroll
    for (int i = 1; i < kMaxTopk; i++) {
        bool repeat = false;
#pragma unroll
        for (int k = 0; k < i; k++) repeat |= page[i] == page[k];
        if (repeat) vmask &= ~(1u << i);
    }
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++)
        if (!((vmask >> i) & 1u)) page[i] = -1;
    sm.vmask[tid] = (uint16_t)vmask;
    sm.sizes[tid] = (uint8_t)__popc(vmask);

    /* --- 2. Dense page numbers. A lane whose page at position i equals the page of the
     * lane below at the same position continues that lane's run; run heads do the work. */
    uint32_t cont[kMaxTopk]; /* ballot: lanes that continue the run of the lane below */
    uint32_t heads = 0;      /* bit i: this lane heads a run at position i */
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        const int32_t below = __shfl_up_sync(kFullMask, page[i], 1);
        const bool c = lane > 0 && page[i] >= 0 && page[i] == below;
        cont[i] = __ballot_sync(kFullMask, c);
        if (page[i] >= 0 && !c) heads |= 1u << i;
    }
    uint32_t slot[kMaxTopk];
    int32_t found[kMaxTopk];
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) { /* all first probes in flight together */
        slot[i] = hash_slot<W>(page[i]);
        found[i] = kEmptyKey;
        if ((heads >> i) & 1u)
            found[i] = atomicCAS(&sm.u.hash.keys[slot[i]], kEmptyKey, page[i]);
    }
    uint32_t inserted = 0;
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        if (!((heads >> i) & 1u)) continue;
        uint32_t s = slot[i];
        int32_t key = found[i];
        while (key != kEmptyKey && key != page[i]) { /* linear probing */
            s = (s + 1u) & (uint32_t)(T::kSlots - 1);
            key = atomicCAS(&sm.u.hash.keys[s], kEmptyKey, page[i]);
        }
        if (key == kEmptyKey) inserted |= 1u << i;
        slot[i] = s;
    }
    {
        /* Numbers for the pages this warp inserted: one shared counter add per warp. */
        const uint32_t mine = (uint32_t)__popc(inserted);
        uint32_t incl = mine;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const uint32_t v = __shfl_up_sync(kFullMask, incl, d);
            if (lane >= d) incl += v;
        }
        uint32_t base = 0;
        if (lane == 31 && incl != 0) base = (uint32_t)atomicAdd(&sm.num_pages, (int32_t)incl);
        uint32_t next = __shfl_sync(kFullMask, base, 31) + incl - mine;
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++)
            if ((inserted >> i) & 1u) sm.u.hash.lids[slot[i]] = (uint16_t)next++;
    }
    const uint32_t lanes_le = (2u << lane) - 1u; /* lanes 0..lane */
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) { /* run members take their head's slot */
        const int src = 31 - __clz(~cont[i] & lanes_le);
        const uint32_t s = __shfl_sync(kFullMask, slot[i], src);
        if ((cont[i] >> lane) & 1u) slot[i] = s;
    }
    __syncthreads();
    uint32_t lid[kMaxTopk];
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) lid[i] = (vmask >> i) & 1u ? sm.u.hash.lids[slot[i]] : 0u;
    const int32_t num_pages = sm.num_pages;
    __syncthreads(); /* the hash set is dead: its storage becomes qmask */

    /* --- 3. Page -> query masks. */
    for (int x = tid; x < num_pages; x += W) {
        if constexpr (T::kWords == 4)
            *reinterpret_cast<uint4 *>(sm.u.qmask[x]) = make_uint4(0u, 0u, 0u, 0u);
        else
            *reinterpret_cast<uint2 *>(sm.u.qmask[x]) = make_uint2(0u, 0u);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        if (!((heads >> i) & 1u)) continue;
        const uint32_t above = ~cont[i] & ~lanes_le; /* lanes above that start anew */
        const int end = above ? __ffs(above) - 1 : 32;
        const uint32_t run = (end == 32 ? kFullMask : (1u << end) - 1u) & ~((1u << lane) - 1u);
        atomicOr(&sm.u.qmask[lid[i]][warp], run);
    }
    __syncthreads();

    /* --- 4. Identity visits (guarded) and this thread's 16 mask rows. */
    if (p.guarded) {
        uint32_t v = 0;
        for (int x = tid; x < num_pages; x += W) {
#pragma unroll
            for (int c = 0; c < T::kWords; c++) v += nonzero_runs(sm.u.qmask[x][c], p.group_size);
        }
        v = __reduce_add_sync(kFullMask, v);
        if (lane == 0 && v != 0) atomicAdd(&sm.identity_visits, v);
    }
    uint32_t q[kMaxTopk][T::kWords];
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        const bool have = (vmask >> i) & 1u;
        if constexpr (T::kWords == 4) {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (have) v = *reinterpret_cast<const uint4 *>(sm.u.qmask[lid[i]]);
            q[i][0] = v.x;
            q[i][1] = v.y;
            q[i][2] = v.z;
            q[i][3] = v.w;
        } else {
            uint2 v = make_uint2(0u, 0u);
            if (have) v = *reinterpret_cast<const uint2 *>(sm.u.qmask[lid[i]]);
            q[i][0] = v.x;
            q[i][1] = v.y;
        }
    }
    __syncthreads(); /* qmask is dead: its storage becomes M */

    /* --- 5. M[w][tid]: 16-bit columns of the transposed mask rows. */
#pragma unroll
    for (int c = 0; c < T::kWords; c++) {
        uint32_t a[16];
#pragma unroll
        for (int i = 0; i < 16; i++) a[i] = q[i][c];
        transpose16x16x2(a);
#pragma unroll
        for (int k = 0; k < 16; k++) {
            sm.u.m[32 * c + k][tid] = (uint16_t)(a[k] & 0xffffu);
            sm.u.m[32 * c + 16 + k][tid] = (uint16_t)(a[k] >> 16);
        }
    }
    __syncthreads();
    if (warp != 0) return;

    /* --- 6. Algorithm 1, one warp. Lane owns queries lane*QPL + k; pend[k] and valid[k]
     * sit in the 16-bit half of the M word where that query's column lies. */
    constexpr int QPL = W / 32;
    uint32_t valid[QPL], pend[QPL], base[QPL];
#pragma unroll
    for (int k = 0; k < QPL; k++) {
        const int j = lane * QPL + k;
        const uint32_t vm = sm.vmask[j];
        valid[k] = (k & 1) ? vm << 16 : vm;
        pend[k] = 0;
        base[k] = j < n ? (uint32_t)j : kAssignedKey;
    }
    int32_t members = 0;
    uint32_t visits = 0;
    /* This lane's slice of M row 0; row w lies w * 2W bytes further. */
    const unsigned char *m_lane = reinterpret_cast<const unsigned char *>(&sm.u.m[0][lane * QPL]);
    /* Branch-free step: pend is 0 at a seed step (cleared when a group closes), so the
     * key is then (0, j) and the minimum is the smallest unassigned id. */
#pragma unroll 2
    for (int32_t s = 0; s < (kArgmin == kPrepOnly ? 0 : n); s++) {
        uint32_t best = kFullMask;
#pragma unroll
        for (int k = 0; k < QPL; k++) best = min(best, ((uint32_t)__popc(pend[k]) << 7) + base[k]);
        uint32_t win_key;
        if constexpr (kArgmin == kArgminShuffle) {
            win_key = best;
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) win_key = min(win_key, __shfl_xor_sync(kFullMask, win_key, d));
        } else {
            win_key = __reduce_min_sync(kFullMask, best);
        }
        const uint32_t w = win_key & 127u;
        uint32_t mw[(QPL + 1) / 2];
        if constexpr (QPL == 4) {
            const uint2 v = *reinterpret_cast<const uint2 *>(m_lane + w * (2u * W));
            mw[0] = v.x;
            mw[1] = v.y;
        } else {
            mw[0] = *reinterpret_cast<const uint32_t *>(m_lane + w * (2u * W));
        }
        if (lane == 0) sm.order[s] = (uint8_t)w;
        visits += members == 0 ? (uint32_t)sm.sizes[w] : win_key >> 7;
#pragma unroll
        for (int k = 0; k < QPL; k++)
            if ((uint32_t)(lane * QPL + k) == w) base[k] = kAssignedKey;
        ++members;
        const bool closes = members == p.group_size;
#pragma unroll
        for (int k = 0; k < QPL; k++) {
            const uint32_t rest = (members == 1 ? valid[k] : pend[k]) & ~mw[k / 2];
            pend[k] = closes ? 0u : rest;
        }
        members = closes ? 0 : members;
    }
    __syncwarp();
    const bool keep_greedy =
        kArgmin != kPrepOnly && (!p.guarded || visits < sm.identity_visits);
    int32_t *out = p.perm + (int64_t)head * p.num_tokens + row0;
    for (int32_t s = lane; s < n; s += 32) out[s] = row0 + (keep_greedy ? (int32_t)sm.order[s] : s);
}

/* perm[h*N + s] = s. */
__global__ void identity_perm_kernel(int32_t *perm, int32_t num_tokens)
{
    int32_t *row = perm + (int64_t)blockIdx.y * num_tokens;
    for (int32_t s = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); s < num_tokens;
         s += (int32_t)(gridDim.x * blockDim.x))
        row[s] = s;
}

pw_status_t check_regroup_args(const pw_problem_t *problem, const int32_t *topk_ids,
                               const pw_requests_t *requests, const pw_grouping_t *grouping,
                               const int32_t *perm)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_grouping(grouping));
    if (grouping->mode != PW_REGROUP_IDENTITY && grouping->mode != PW_REGROUP_GREEDY &&
        grouping->mode != PW_REGROUP_GUARDED)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping.mode is %d (0..2)",
                       (int)grouping->mode);
    if (!requests || !requests->cu_seqlens_q || !requests->prefix_lens || !requests->kv_lens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "requests and its cu_seqlens_q, prefix_lens, kv_lens must not be NULL");
    if (problem->num_tokens > 0 && (!topk_ids || !perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "topk_ids and perm must not be NULL");
    if (problem->num_kv_heads > 65535)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup: num_kv_heads %d > 65535",
                       problem->num_kv_heads);
    if (grouping->mode == PW_REGROUP_IDENTITY) return PW_SUCCESS;
    if ((int64_t)problem->num_tokens / 64 + problem->num_requests > (int64_t)INT32_MAX)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup: N / 64 + R exceeds 2^31 - 1 CTAs");
    if (grouping->window != 64 && grouping->window != 128)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_regroup: grouping.window is %d; the GPU regroup supports 64 and 128",
                       grouping->window);
    if (problem->topk > kMaxTopk)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup: topk is %d; the GPU supports 1..%d",
                       problem->topk, kMaxTopk);
    const int32_t g = grouping->group_size;
    if (grouping->mode == PW_REGROUP_GUARDED && g != 1 && g != 2 && g != 4 && g != 8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_regroup: guarded mode supports group_size 1, 2, 4, 8 (got %d)", g);
    return PW_SUCCESS;
}

template <int W, int kArgmin>
void launch_regroup(const RegroupParams &params, bool vec, int32_t num_kv_heads,
                    cudaStream_t stream)
{
    const dim3 grid((unsigned)(params.num_tokens / W + params.num_requests),
                    (unsigned)num_kv_heads);
    if (vec)
        regroup_kernel<W, true, kArgmin><<<grid, W, 0, stream>>>(params);
    else
        regroup_kernel<W, false, kArgmin><<<grid, W, 0, stream>>>(params);
}

template <int W>
void launch_variant(int variant, const RegroupParams &params, bool vec, int32_t num_kv_heads,
                    cudaStream_t stream)
{
    if (variant == kArgminShuffle)
        launch_regroup<W, kArgminShuffle>(params, vec, num_kv_heads, stream);
    else if (variant == kPrepOnly)
        launch_regroup<W, kPrepOnly>(params, vec, num_kv_heads, stream);
    else
        launch_regroup<W, kArgminRedux>(params, vec, num_kv_heads, stream);
}

} // namespace

extern "C" pw_status_t pw_regroup_workspace_size(const pw_problem_t *problem,
                                                 const pw_grouping_t *grouping, size_t *bytes)
{
    if (!bytes) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    *bytes = 0;
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_grouping(grouping));
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_regroup_dev_variant(int variant, const pw_problem_t *problem,
                                              const int32_t *topk_ids,
                                              const pw_requests_t *requests,
                                              const pw_grouping_t *grouping, int32_t *perm,
                                              pw_stream_t stream)
{
    if (variant < kArgminRedux || variant > kPrepOnly)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_regroup_dev_variant: variant %d (0..2)",
                       variant);
    PW_TRY(check_regroup_args(problem, topk_ids, requests, grouping, perm));
    if (problem->num_tokens == 0) return PW_SUCCESS;
    cudaStream_t st = (cudaStream_t)stream;
    if (grouping->mode == PW_REGROUP_IDENTITY) {
        const int32_t threads = 256;
        int32_t blocks = (problem->num_tokens + threads - 1) / threads;
        if (blocks > 1024) blocks = 1024;
        identity_perm_kernel<<<dim3((unsigned)blocks, (unsigned)problem->num_kv_heads), threads,
                               0, st>>>(perm, problem->num_tokens);
    } else {
        RegroupParams params;
        params.topk_ids = topk_ids;
        params.cu_seqlens = requests->cu_seqlens_q;
        params.prefix_lens = requests->prefix_lens;
        params.kv_lens = requests->kv_lens;
        params.perm = perm;
        params.num_tokens = problem->num_tokens;
        params.num_requests = problem->num_requests;
        params.topk = problem->topk;
        params.page_size = problem->page_size;
        params.group_size = grouping->group_size;
        params.guarded = grouping->mode == PW_REGROUP_GUARDED;
        const bool vec = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
        if (grouping->window == 64)
            launch_variant<64>(variant, params, vec, problem->num_kv_heads, st);
        else
            launch_variant<128>(variant, params, vec, problem->num_kv_heads, st);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "pw_regroup: kernel launch failed: %s (%s)",
                       cudaGetErrorString(err), cudaGetErrorName(err));
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  int32_t *perm, void *workspace, size_t workspace_bytes,
                                  pw_stream_t stream)
{
    (void)workspace;
    (void)workspace_bytes; /* the kernels need none (size query returns 0) */
    return pw_regroup_dev_variant(kArgminRedux, problem, topk_ids, requests, grouping, perm,
                                  stream);
}
