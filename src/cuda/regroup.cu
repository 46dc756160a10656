/* regroup.cu — online regroup on sm_90 (docs/semantics.md §3, paper §3.1 Algorithm 1, §3.3).
 *
 * One CTA per (regroup window, KV head), one thread per query of the window (W = 64 or
 * 128). The result is Algorithm 1 exactly, for every context length and every input
 * (ids of -1, out of range, repeated; short requests; guarded mode): byte-equal to
 * pw_ref_regroup. bench/NOTES.md has the napkin math and the measured versions.
 *
 * Kernel v3 (regroup_kernel, the library's), plan of one window:
 *  1. Request lookup loads first, then a speculative load of the window's 64-byte Top-K
 *     rows, so both global trips overlap; one request (the common case): no barrier.
 *     Meanwhile each warp clears its column of the page -> query masks (below).
 *  2. S_j (docs/semantics.md §1): ids that are visible and first in the row, branch-free; the others
 *     become -1. Visible-page count by a shift when P is a power of two.
 *  3. Page -> query masks qmask[c][row] (bit l of word c: query 32c + l selected the page
 *     of that row), word-major so that warp c only touches column c (cleared and filled
 *     without a block barrier) and distinct pages of one OR hit distinct banks.
 *     Direct path: row = page id, no renumbering at all. Taken by every window when
 *     max_pages_per_request <= Tile::kDirectMaxPages (2048 pages at W128, 4096 at W64;
 *     host-known: the mask columns are cleared while the loads fly), else per window
 *     ("adaptive" launch) when the window's last query sees at most that many pages
 *     (known after the request lookup, so that window clears its column only then). A
 *     page id >= max_pages_per_request cannot be visible under the documented contract
 *     (kv_len <= max_pages_per_request * P); it is treated as outside S_j, so broken device
 *     kv_lens never make the kernel write outside its shared memory; in an adaptive window
 *     every visible id is below the last query's visible count, which bounds the rows.
 *     Long direct path (kLong, since 2026-12-03; max_pages_per_request up to
 *     Tile::kLongMaxPages = 14,336 pages at W128, 28,672 at W64, e.g. 1M-token contexts):
 *     the same direct indexing with columns max_pages_per_request (rounded up to 4) rows
 *     apart in up to 224 KB of dynamic shared memory (launch_long sets the kernel's
 *     attribute); each window clears its columns up to its last query's visible pages
 *     after the lookup. Taken where the device allows that much shared memory and the
 *     launch's waves stay within twice the adaptive launch's (choose_long).
 *     Hash path (past that, or where the long path is not taken): rows are dense numbers 0..D-1 of the
 *     window's distinct pages (D <= W*16) given by a shared-memory hash set, as in v2.
 *     Lanes of a warp that hold the same page at the same row position (sink page, own
 *     page, recent pages: the common case on sorted rows) form a run; the run's head does
 *     one shared OR of the run's lane mask; the other lanes OR 0 into a sink word, so the
 *     ORs need no branch (ptxas makes a conditional shared atomic a divergent branch).
 *  4. Each thread transposes its 16 mask rows into M[w][j] (16 bits): bit i set iff page i
 *     of query j is also in S_w. After w joins the group, query j's pages outside the
 *     union are pend_j & ~M[w][j]: one 16-bit shared load per query per step.
 *  5. One warp runs Algorithm 1 with no block barrier: lane owns W/32 queries, key =
 *     |S_j \ U| << kKeyShift | j * (bytes of an M row), one redux.sync.min per step; the
 *     winner's key masked is the byte offset of its M row. SASS of one member step at
 *     W128 (34 instructions, v2: 46), its dependent chain:
 *       REDUX.MIN -> IMAD.U32 (uniform to vector) -> LOP3 (offset) -> IMAD (+ lane) ->
 *       LDS.64 -> LOP3 (pend & ~M) -> 4x POPC (issued 8 cycles apart: 16/clk/SM) ->
 *       IMAD (key) -> VIMNMX -> REDUX.MIN;
 *     v2's also had SHF/LEA in the address and a group-close SEL before the POPCs. The
 *     groups are explicit: the seed costs no redux on the chain (the group's last member
 *     step also finds the two smallest unassigned ids s0 < s1, off the chain, and the
 *     next seed is s1 if that member is s0, else s0), the g-1 member steps are unrolled,
 *     and n is made warp-uniform (a redux result) so ptxas sees every loop branch as
 *     uniform (no divergence check before each redux.sync).
 *  6. Guarded mode: the identity grouping's union visits are sum over pages of the number
 *     of g-query runs with a bit set in qmask[.][page] (a popcount per 32-bit word; kLong:
 *     the same number from M, sum over queries j of the pages of S_j outside the earlier
 *     members of j's identity group, g - 1 shared loads per query, instead of a scan of
 *     thousands of rows); greedy visits are the winners' new-page counts. Identity is kept
 *     unless greedy is strictly smaller.
 * Output: perm[h*N + slot] = original row, written once per slot. No workspace, no host
 * synchronisation; dynamic shared memory (dyn_smem_bytes) <= 32 KB, static < 1 KB (the
 * fused dev kernels: 8.9-11.8 KB), so no
 * launch attribute is needed (the long path: up to 224 KB, its attribute set on the host
 * by every call that takes it, which stream capture allows): capturable in a CUDA graph.
 * Block barriers on the direct path with one request: 3 (v2: 9; kLong guarded: 4).
 * Kernel v2 (hash renumbering always; W128 28.4 us, W64 21.7 us on A-hot) was removed
 * after v3 was measured; its numbers are in bench/NOTES.md.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "regroup_common.cuh"
#include "regroup_dev.h"
#include "selection.h"
#include "ptx.cuh"
#include "union_group.cuh"

namespace {

using pw_dev::kFullMask;
using pw_dev::kMaxTopk;

constexpr int32_t kEmptyKey = -1;          /* hash slot holds no page (pages are >= 0) */
constexpr uint32_t kFusedBarrier = 1;       /* named barrier of the fused kernel's order hand-off (0: __syncthreads) */
constexpr uint32_t kStreamBarrier = 2;      /* kStream: warps 1.. have summed the group counts */
constexpr uint32_t kAssignedKey = 0x40000000u; /* key of a query no longer selectable */

/* Tile constants of one window of W queries. */
template <int W> struct Tile {
    static constexpr int kWords = W / 32;                 /* words of a query mask */
    static constexpr int kMaxPages = W * kMaxTopk;        /* distinct pages of a window */
    static constexpr int kLog2Slots = W == 128 ? 12 : 11; /* hash slots = 2 * kMaxPages */
    static constexpr int kSlots = 1 << kLog2Slots;
    /* v3: M rows, keys of the greedy loop and the direct path's bound. */
    static constexpr uint32_t kRowBytes = 2u * W;         /* one row of M (uint16 per query) */
    static constexpr int kKeyShift = W == 128 ? 15 : 13;  /* log2(W * kRowBytes) */
    static constexpr uint32_t kOffsetMask = (1u << kKeyShift) - 1u;
    static constexpr size_t kMBytes = (size_t)W * W * 2u;
    /* Words between qmask columns (both paths; a compile-time constant, so a mask row's
     * words are one register + immediate offsets); the direct path's page bound. */
    static constexpr int kColStride = (int)(32u * 1024u / (4u * kWords)); /* 2048 / 4096 */
    static constexpr int kDirectMaxPages = kColStride;
    /* kLong kernels: the direct path past kDirectMaxPages, column stride = qm_rows (V
     * rounded up to 4) at run time, up to 224 KB of masks (14,336 pages = 1.8M tokens of
     * P = 128 at W128; 28,672 at W64) within the 227 KB a CTA may opt in to on sm_90. */
    static constexpr int kLongMaxPages = (int)(224u * 1024u / (4u * kWords)); /* 14336 / 28672 */
    static constexpr size_t kHashBytes = (size_t)kSlots * 6u; /* keys + lids */
};
static_assert((1u << Tile<128>::kKeyShift) == 128u * Tile<128>::kRowBytes, "W128 key layout");
static_assert((1u << Tile<64>::kKeyShift) == 64u * Tile<64>::kRowBytes, "W64 key layout");
static_assert((17u << Tile<128>::kKeyShift) < kAssignedKey, "costs stay below kAssignedKey");

struct RegroupParams {
    const int32_t *topk_ids;    /* [Hkv, N, K] */
    const int32_t *cu_seqlens;  /* [R+1] */
    const int32_t *prefix_lens; /* [R] */
    const int32_t *kv_lens;     /* [R] */
    int32_t *perm;              /* [Hkv, N], written */
    int32_t num_tokens, num_requests, topk, page_size, group_size, guarded;
    int32_t max_pages;  /* problem.max_pages_per_request (V) */
    int32_t page_shift; /* log2(page_size) when a power of two, else -1 */
    int32_t direct;     /* 1: direct-indexed masks (V <= kDirectMaxPages), 0: see adaptive */
    int32_t adaptive;   /* with direct == 0: 1 = each window picks direct or hash by its
                           visible pages, 0 = hash path always (dev variant) */
    int32_t qm_rows;    /* direct path: qmask rows to clear, V rounded up to 4 (>= 4) */
    /* Fused union preparation (kFused kernels only; pw_union_meta_t of pw_union_prepare): */
    int32_t *num_groups;      /* [Hkv] */
    pw_group_desc_t *groups;  /* [Hkv, max_groups] */
    int32_t *union_pages;     /* [Hkv, max_groups, capacity] */
    uint8_t *member_masks;    /* [Hkv, max_groups, capacity] */
    int64_t max_groups;
    int32_t capacity;
    int32_t vec_out;          /* 1: capacity % 4 == 0 and 16- / 4-byte aligned rows */
    /* Dual kernels only (pw_regroup_dual): warp 1 runs Algorithm 1 with alt_group_size into
     * perm_alt while warp 0 runs it with group_size into perm. */
    int32_t *perm_alt;        /* [Hkv, N], written */
    int32_t alt_group_size;
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

/* One sample of the request search: request r's first row b when r < hi, and in the last
 * round (step == 1) also its end row, prefix and KV length; the outputs keep their values
 * when r >= hi. */
static __device__ __forceinline__ void load_request_sample(const RegroupParams &p, int32_t r,
                                                           int32_t hi, int32_t step, int32_t &b,
                                                           int32_t &e, int32_t &prefix,
                                                           int32_t &kv_len)
{
    if (r >= hi) return;
    b = __ldg(p.cu_seqlens + r);
    if (step == 1) {
        e = __ldg(p.cu_seqlens + r + 1);
        prefix = __ldg(p.prefix_lens + r);
        kv_len = __ldg(p.kv_lens + r);
    }
}

/* Zeroes rows [0, rows) of a warp's mask column (rows a multiple of 4; one warp). */
static __device__ __forceinline__ void clear_column(uint32_t *col, int32_t rows, int lane)
{
    uint4 *col4 = reinterpret_cast<uint4 *>(col);
    for (int x = lane; x < rows / 4; x += 32) col4[x] = make_uint4(0u, 0u, 0u, 0u);
}

/* Marks every slot of the hash set empty (whole block; a barrier must follow before use). */
template <int W> static __device__ __forceinline__ void clear_hash_keys(unsigned char *dyn, int tid)
{
    int4 *keys4 = reinterpret_cast<int4 *>(dyn);
    for (int x = tid; x < Tile<W>::kSlots / 4; x += W)
        keys4[x] = make_int4(kEmptyKey, kEmptyKey, kEmptyKey, kEmptyKey);
}

/* Argmin of the greedy step across the warp. kArgminRedux (the library's choice) uses
 * redux.sync.min; the others exist for bench/bench_regroup.c (pw_regroup_dev_variant):
 * a 5-round xor-shuffle butterfly, and "prep only" that skips the greedy loop and writes
 * identity order (timing of everything but the loop; not a regroup). */
enum { kArgminRedux = 0, kArgminShuffle = 1, kPrepOnly = 2 };

/* *word |= v when pred, else *sink |= 0. Unconditional on purpose: ptxas turns a
 * conditional shared atomic into a BSSY/BRA region (a divergent branch per call site),
 * while this is one ATOMS.OR per call site; the sink words (one per lane) lie in 32
 * distinct banks, so the idle lanes add few bank conflicts. */
static __device__ __forceinline__ void shared_or_or_sink(bool pred, uint32_t *word, uint32_t *sink,
                                                         uint32_t v)
{
    atomicOr(pred ? word : sink, pred ? v : 0u);
}

/* Visible page count of docs/semantics.md §1 (as pw_dev::visible_page_count), with a shift when the page
 * size is a power of two (page_shift >= 0). */
static __device__ __forceinline__ uint32_t visible_pages(int64_t causal_pos, int32_t kv_len,
                                                         int32_t page_size, int32_t page_shift)
{
    const int64_t last = causal_pos < (int64_t)kv_len - 1 ? causal_pos : (int64_t)kv_len - 1;
    if (last < 0) return 0u;
    const uint32_t l = (uint32_t)last;
    return (page_shift >= 0 ? l >> page_shift : l / (uint32_t)page_size) + 1u;
}

/* Lanes [lane, end) of a run that starts at this lane: end = the first lane above that
 * does not continue it (cont: lanes continuing the run of the lane below). */
static __device__ __forceinline__ uint32_t run_lanes(uint32_t cont, int lane)
{
    const uint32_t lanes_lt = (1u << lane) - 1u;
    const uint32_t above = ~cont & ~(lanes_lt | (1u << lane)); /* lanes above that start anew */
    return ((above & (0u - above)) - 1u) & ~lanes_lt;          /* above == 0: up to lane 31 */
}

/* lop3.b32 (PTX ISA 9.7.8.6) with LUT 0xCA: bits of if_set where mask is set, else bits of
 * if_clear; one LOP3 (written as C, ptxas splits it into two). */
static __device__ __forceinline__ uint32_t lop3_select(uint32_t mask, uint32_t if_set,
                                                       uint32_t if_clear)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xCA;" : "=r"(d) : "r"(mask), "r"(if_set), "r"(if_clear));
    return d;
}

/* transpose16x16x2 with fewer instructions: the 8-bit round is two byte permutations per
 * row pair, the others two (shift, bit-select) pairs instead of the xor-swap's five. */
static __device__ __forceinline__ void transpose16x16x2_v3(uint32_t (&a)[16])
{
#pragma unroll
    for (int i = 0; i < 8; i++) { /* bytes: a = [a0 b0 a2 b2], b = [a1 b1 a3 b3] */
        const uint32_t x = a[i], y = a[i + 8];
        a[i] = __byte_perm(x, y, 0x6240);
        a[i + 8] = __byte_perm(x, y, 0x7351);
    }
#pragma unroll
    for (int s = 4; s > 0; s >>= 1) {
        const uint32_t keep = s == 4 ? 0x0f0f0f0fu : s == 2 ? 0x33333333u : 0x55555555u;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (i & s) continue;
            const uint32_t x = a[i], y = a[i + s];
            a[i] = lop3_select(keep << s, y << s, x);
            a[i + s] = lop3_select(keep, x >> s, y);
        }
    }
}

/* Warp minimum of the greedy keys: redux.sync.min (library) or a shuffle butterfly. */
template <int kArgmin> static __device__ __forceinline__ uint32_t warp_min(uint32_t v)
{
    if constexpr (kArgmin == kArgminShuffle) {
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, d));
        return v;
    } else {
        return __reduce_min_sync(kFullMask, v);
    }
}

/* This lane's QPL 16-bit columns of one M row (row_lane: the lane's slice of the row). */
template <int QPL>
static __device__ __forceinline__ void load_m_row(const unsigned char *row_lane,
                                                  uint32_t (&mw)[(QPL + 1) / 2])
{
    if constexpr (QPL == 4) {
        const uint2 v = *reinterpret_cast<const uint2 *>(row_lane);
        mw[0] = v.x;
        mw[1] = v.y;
    } else {
        mw[0] = *reinterpret_cast<const uint32_t *>(row_lane);
    }
}

/* Static shared memory of v3; the masks, the hash set and M live in dynamic shared memory
 * (dyn_smem_bytes), one after the other in the same bytes. */
template <int W> struct SmemV3 {
    uint16_t vmask[W]; /* bit i: position i of query j's row is in S_j (first occurrence) */
    uint8_t sizes[W];  /* |S_j| */
    uint8_t order[W];  /* greedy order: local query id of each slot */
    int32_t found, row0, len, c0, kv_len; /* request lookup result (R > 1) */
    int32_t req, win;         /* request lookup result (R > 1): request, window in it */
    int32_t groups_before;    /* fused: groups of the KV head's requests before this one */
    int32_t groups_total;     /* fused, CTA 0: groups of the KV head */
    int32_t num_pages;        /* hash path: D */
    uint32_t identity_visits; /* guarded mode: union visits of the identity grouping */
    uint32_t sink[32];        /* target of the idle lanes' mask ORs (shared_or_or_sink) */
};

/* Dynamic shared memory of one v3 CTA: max of M, and the qmask columns (the last one only
 * as long as its rows: V rounded up, or D <= W*16) or the hash set. <= 32 KB; kLong: the
 * kWords columns of qm_rows words, up to 224 KB. */
template <int W, bool kLong = false> static size_t dyn_smem_bytes(const RegroupParams &p)
{
    using T = Tile<W>;
    if (kLong) { /* every column qm_rows long, then M in the same bytes */
        const size_t masks = (size_t)T::kWords * (size_t)p.qm_rows * 4u;
        return masks > T::kMBytes ? masks : T::kMBytes;
    }
    const size_t cols = (size_t)(T::kWords - 1) * T::kColStride * 4u;
    size_t masks = cols + (p.direct ? (size_t)p.qm_rows : (size_t)T::kMaxPages) * 4u;
    if (!p.direct && T::kHashBytes > masks) masks = T::kHashBytes;
    const size_t direct_at_bound = (size_t)T::kWords * T::kColStride * 4u;
    if (!p.direct && p.adaptive && direct_at_bound > masks) masks = direct_at_bound;
    return masks > T::kMBytes ? masks : T::kMBytes;
}
static_assert(sizeof(SmemV3<128>) + 32 * 1024 <= 48 * 1024, "v3 W128 must fit 48 KB");
static_assert(sizeof(SmemV3<128>) + 128 * 16 * 4 + 32 * 1024 <= 48 * 1024,
              "fused W128 (+ the S_i ids) must fit 48 KB");
static_assert(sizeof(SmemV3<128>) + 128 * 16 * 4 + 129 * 8 + 16 + 3 * 640 + 32 * 1024 <= 48 * 1024,
              "streamed fused W128 (+ its barriers and the emitters' scratch) must fit 48 KB");
static_assert(Tile<64>::kMBytes >= 2 * 640 && Tile<128>::kMBytes >= 4 * 640,
              "fused union scratch (640 B per warp) fits in the bytes of M");
static_assert(Tile<128>::kMaxPages <= Tile<128>::kColStride, "hash rows fit a column");
static_assert(Tile<64>::kMaxPages <= Tile<64>::kColStride, "hash rows fit a column");
static_assert(Tile<128>::kLongMaxPages % 4 == 0 && Tile<64>::kLongMaxPages % 4 == 0, "long columns of whole uint4");

/* kMatch: the direct path's mask ORs group a position's lanes by __match_any_sync (one OR
 * per distinct page) instead of runs of equal neighbours (dev variant; same result). */
/* Groups of requests [r_lo, r_hi) of one KV head, summed over the CTA's threads
 * [t0, t0 + nthreads) (this thread: index t) into *sum with one shared add per warp.
 * Every lane of the calling warps must call it. */
static __device__ __forceinline__ void add_request_groups(const RegroupParams &p, int32_t window,
                                                          int32_t r_lo, int32_t r_hi, int32_t t,
                                                          int32_t nthreads, int32_t *sum)
{
    int32_t mine = 0;
    for (int32_t r = r_lo + t; r < r_hi; r += nthreads)
        mine += pw_dev::groups_of_request(p.cu_seqlens, r, p.num_tokens, window, p.group_size);
    const uint32_t warp_sum = __reduce_add_sync(kFullMask, (uint32_t)mine);
    if ((threadIdx.x & 31) == 0 && warp_sum != 0) atomicAdd(sum, (int32_t)warp_sum);
}

/* Fused kernels, a CTA with no window (surplus, or broken device data): CTA 0 still
 * writes the KV head's group count (pw_union_prepare writes it in every case). Block-
 * uniform; sm.groups_total was zeroed by thread 0 before the first barrier below. */
template <int W>
static __device__ __forceinline__ void fused_exit_count(const RegroupParams &p, SmemV3<W> &sm,
                                                        int32_t head)
{
    if (blockIdx.x != 0) return;
    __syncthreads();
    add_request_groups(p, W, 0, p.num_requests, (int32_t)threadIdx.x, W, &sm.groups_total);
    __syncthreads();
    if (threadIdx.x == 0) p.num_groups[head] = sm.groups_total;
}

/* Group gi of the window (slots [gi*g, gi*g + g) of its order; identity: slot s holds
 * query s) written by one warp at the global group index first + gi: keys from the stored
 * S_i ids, union_group_emit writes the rows (docs/semantics.md §4.1 order). scratch: 640
 * bytes of shared memory for this warp. */
template <int W>
static __device__ __forceinline__ void emit_window_group(const RegroupParams &p, const uint8_t *order, bool identity,
                                                         const int32_t *s_ids, unsigned char *scratch,
                                                         int32_t head, int32_t req, int64_t first, int32_t row0,
                                                         int32_t n, int32_t gi)
{
    const int lane = threadIdx.x & 31;
    const int32_t g = p.group_size;
    int32_t *const s_pages = reinterpret_cast<int32_t *>(scratch);
    uint32_t *const s_masks = reinterpret_cast<uint32_t *>(scratch + 512);
    const int member = lane >> 2, part = lane & 3;
    const int64_t at_group = first + gi;
    if (at_group >= p.max_groups) return; /* broken device data only */
    const int32_t begin = gi * g, members = min(g, n - begin);
    uint32_t key[4] = {pw_dev::kNoKey, pw_dev::kNoKey, pw_dev::kNoKey, pw_dev::kNoKey};
    if (member < members) {
        const int32_t j = identity ? begin + member : (int32_t)order[begin + member];
        const int4 v = reinterpret_cast<const int4 *>(s_ids + j * kMaxTopk)[part];
        const int32_t ids[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (ids[k] >= 0) key[k] = ((uint32_t)ids[k] << 3) | (uint32_t)member;
    }
    const int64_t at = (int64_t)head * p.max_groups + at_group;
    pw_dev::UnionGroupOut out;
    out.pages = p.union_pages + at * p.capacity;
    out.masks = p.member_masks + at * p.capacity;
    out.desc = p.groups + at;
    out.capacity = p.capacity;
    out.slot_begin = row0 + begin;
    out.request = req;
    out.members = members;
    if (p.vec_out) pw_dev::union_group_emit<true>(key, lane, s_pages, s_masks, out);
    else pw_dev::union_group_emit<false>(key, lane, s_pages, s_masks, out);
}

/* The window's groups (runs of g slots of the final order) by the CTA's warps, one group
 * per warp at a time, at the global group index groups_before + win * per_window + i.
 * Needs 640 bytes of dynamic shared memory per warp (M is dead by now). */
template <int W>
static __device__ __forceinline__ void fused_union_prepare(const RegroupParams &p, SmemV3<W> &sm,
                                                           const int32_t *s_ids,
                                                           unsigned char *dyn, int32_t head,
                                                           int32_t req, int32_t win, int32_t row0,
                                                           int32_t n)
{
    const int warp = threadIdx.x >> 5;
    const int32_t g = p.group_size;
    if (blockIdx.x == 0 && threadIdx.x == 0) p.num_groups[head] = sm.groups_total;
    const int32_t per_window = W / g + (W % g != 0);
    const int64_t first = (int64_t)sm.groups_before + (int64_t)win * per_window;
    const int32_t num = n / g + (n % g != 0);
    for (int32_t gi = warp; gi < num; gi += W / 32)
        emit_window_group<W>(p, sm.order, false, s_ids, dyn + warp * 640, head, req, first, row0, n, gi);
}

/* kStream (dev): warps 1.. emit each group as soon as warp 0's greedy loop has closed it
 * (group_bar[gi], one arrive by warp 0's lane 0 after it wrote the group's order bytes),
 * so that union preparation overlaps the loop instead of following it; group_bar[W] marks
 * the end of the loop with *keep_greedy set: where guarded mode keeps identity order, the
 * emitters write every group again in identity order. scratch: 640 bytes per warp, apart
 * from M (which the loop still reads). */
template <int W>
static __device__ __forceinline__ void stream_union_prepare(const RegroupParams &p, SmemV3<W> &sm,
                                                            const int32_t *s_ids, unsigned char *scratch,
                                                            uint64_t *group_bar, const uint32_t *keep_greedy,
                                                            int32_t head, int32_t req, int32_t win, int32_t row0,
                                                            int32_t n)
{
    constexpr int kEmitters = W / 32 - 1;
    const int e = (int)(threadIdx.x >> 5) - 1;
    const int32_t g = p.group_size;
    if (blockIdx.x == 0 && threadIdx.x == 32) p.num_groups[head] = sm.groups_total;
    const int32_t per_window = W / g + (W % g != 0);
    const int64_t first = (int64_t)sm.groups_before + (int64_t)win * per_window;
    const int32_t num = n / g + (n % g != 0);
    unsigned char *const mine = scratch + e * 640;
    for (int32_t gi = e; gi < num; gi += kEmitters) {
        pw::mbarrier_wait_parity(&group_bar[gi], 0);
        emit_window_group<W>(p, sm.order, false, s_ids, mine, head, req, first, row0, n, gi);
    }
    pw::mbarrier_wait_parity(&group_bar[W], 0);
    if (!*keep_greedy)
        for (int32_t gi = e; gi < num; gi += kEmitters)
            emit_window_group<W>(p, sm.order, true, s_ids, mine, head, req, first, row0, n, gi);
}

/* kFused: after the greedy order is known, the CTA also writes its window's union
 * metadata (pw_union_prepare's bytes for the same permutation and grouping).
 * kDual (pw_regroup_dual): warp 1, idle in the other kernels while warp 0 runs the greedy
 * loop, runs the same loop on the same M with p.alt_group_size into perm_alt (and, guarded,
 * against the identity visits counted with that g): two regroups for the latency of one.
 * kLong (launch_long): the direct path for a page table past kDirectMaxPages (up to
 * kLongMaxPages), columns p.qm_rows apart in up to 224 KB of dynamic shared memory; each
 * window clears its columns up to its last query's visible pages once the lookup is done
 * (as an adaptive window does), and never takes the hash path. */
template <int W, bool kVec, int kArgmin, bool kMatch, bool kFused, bool kDual = false, bool kLong = false,
          bool kStream = false>
__global__ void __launch_bounds__(W) regroup_kernel(const RegroupParams p)
{
    static_assert(!kStream || (kFused && kArgmin == kArgminRedux), "kStream: a fused kernel with the greedy loop");
    static_assert(!(kDual && kFused), "the dual regroup writes two permutations, no union metadata");
    static_assert(!(kLong && kFused), "the fused kernel keeps the 32 KB layout");
    using T = Tile<W>;
    __shared__ SmemV3<W> sm;
    __shared__ uint8_t s_order_alt[kDual ? W : 1];  /* dual: warp 1's greedy order */
    __shared__ uint32_t s_identity_visits_alt;      /* dual, guarded: identity visits at alt g */
    /* fused: the ids of S_i (union preparation's rule, -1 elsewhere) of each query */
    __shared__ __align__(16) int32_t s_ids[kFused ? W * kMaxTopk : 4];
    /* kStream: one barrier per group of the window and one for the loop's end; the emitters'
     * scratch (M is still in use while they emit) */
    __shared__ uint64_t s_group_bar[kStream ? W + 1 : 1];
    __shared__ uint32_t s_keep_greedy;
    __shared__ __align__(16) unsigned char s_emit[kStream ? (W / 32 - 1) * 640 : 16];
    extern __shared__ __align__(16) unsigned char dyn[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t head = (int32_t)blockIdx.y;
    const int32_t t = (int32_t)blockIdx.x;
    bool direct = kLong || p.direct != 0; /* block-uniform; an adaptive launch decides after the lookup */
    const bool adaptive = kLong || (!direct && p.adaptive != 0); /* kLong: clears after the lookup */
    const int32_t col_stride = kLong ? p.qm_rows : T::kColStride; /* words between mask columns */
    uint32_t *const qm = reinterpret_cast<uint32_t *>(dyn); /* [kWords][col_stride] */
    uint32_t *const qm_col = qm + warp * col_stride;        /* this warp's column */
    if (tid == 0) {
        sm.found = 0;
        sm.num_pages = 0;
        sm.identity_visits = 0;
        if constexpr (kDual) s_identity_visits_alt = 0;
        sm.req = 0;
        sm.win = 0;
        sm.groups_before = 0;
        sm.groups_total = 0;
        if constexpr (kStream) {
            s_keep_greedy = 1u;
            pw::mbarrier_init(&s_group_bar[W], 1);
        }
    }
    if constexpr (kStream) pw::mbarrier_init(&s_group_bar[tid], 1); /* one per thread, not 129 in thread 0 */

    /* --- Window of this CTA. Sparse numbering, no scan over requests: request r owns
     * CTAs [first_r, first_r + windows_r) with first_r = cu[r]/W + r, disjoint for
     * consecutive requests because floor(a/W) + ceil(q/W) <= floor((a+q)/W) + 1;
     * floor(N/W) + R CTAs cover every window and the surplus ones exit. first_r grows
     * with r, so the CTA finds the last r with first_r <= t by a W-ary search: each round
     * samples W requests and counts (one barrier) how many start at or before t; one
     * round when R <= W. The lookup loads leave first and the speculative Top-K row load
     * (window t starts at row t*W whenever every earlier request's length is a multiple
     * of W, always with one request) right after them, so neither waits for the other;
     * R == 1 needs no barrier. */
    const int32_t num_req = p.num_requests;
    int32_t lo = 0, hi = num_req;
    int32_t step = hi / W + (hi % W != 0);
    int32_t b = 0, e = 0, prefix = 0, kv_req = 0;
    load_request_sample(p, num_req == 1 ? 0 : tid * step, hi, step, b, e, prefix, kv_req);
    const int64_t guess_row0 = (int64_t)t * W;
    int32_t page[kMaxTopk];
    if (guess_row0 + tid < p.num_tokens) {
        pw_dev::load_topk_row<kVec>(
            p.topk_ids + ((int64_t)head * p.num_tokens + guess_row0 + tid) * p.topk, p.topk, page);
    } else {
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) page[i] = -1;
    }
    if (direct && !adaptive) { /* this warp's mask column; only this warp writes it until the OR barrier */
        clear_column(qm_col, p.qm_rows, lane);
    } else if (!adaptive) {
        clear_hash_keys<W>(dyn, tid);
    }
    int32_t row0, len, kv_len, req = 0, win;
    int64_t causal0;
    if (num_req == 1) { /* every thread read request 0 (one broadcast load each) */
        if (b < 0 || e < b || e > p.num_tokens) { /* broken cu_seqlens only */
            if constexpr (kFused) fused_exit_count<W>(p, sm, head);
            return;
        }
        const int32_t k = t - b / W;                     /* window of the request */
        const int32_t windows = (e - b) / W + ((e - b) % W != 0);
        if (k < 0 || k >= windows) { /* surplus CTA */
            if constexpr (kFused) fused_exit_count<W>(p, sm, head);
            return;
        }
        win = k;
        row0 = b + k * W;
        len = min(W, e - row0);
        causal0 = (int64_t)prefix + (int64_t)k * W;
        kv_len = kv_req;
    } else {
        for (;;) { /* the request is in [lo, hi) */
            const int32_t r = lo + tid * step;
            const bool starts_by_t = r < hi && b >= 0 && b / W + r <= t;
            const int32_t count = __syncthreads_count(starts_by_t); /* a prefix of the samples */
            if (step == 1) {
                if (count > 0 && tid == count - 1 && e >= b && e <= p.num_tokens) {
                    const int32_t k = t - (b / W + r);
                    const int32_t windows = (e - b) / W + ((e - b) % W != 0);
                    if (k < windows) {
                        sm.row0 = b + k * W;
                        sm.len = min(W, e - b - k * W);
                        sm.c0 = prefix + k * W;
                        sm.kv_len = kv_req;
                        sm.req = r;
                        sm.win = k;
                        sm.found = 1;
                    }
                }
                break;
            }
            if (count == 0) break; /* only with a broken cu_seqlens (cu[0] != 0) */
            lo += (count - 1) * step;
            hi = min(hi, lo + step);
            step = (hi - lo) / W + ((hi - lo) % W != 0);
            load_request_sample(p, lo + tid * step, hi, step, b, e, prefix, kv_req);
        }
        __syncthreads();
        if (!sm.found) {
            if constexpr (kFused) fused_exit_count<W>(p, sm, head);
            return;
        }
        req = sm.req;
        win = sm.win;
        row0 = sm.row0;
        len = sm.len;
        causal0 = sm.c0;
        kv_len = sm.kv_len;
    }
    const int32_t n = min(len, p.num_tokens - row0); /* clamp: broken cu_seqlens only */
    if (adaptive) { /* the window's last query sees the most pages (block-uniform) */
        uint32_t rows = visible_pages(causal0 + n - 1, kv_len, p.page_size, p.page_shift);
        if constexpr (kLong) rows = min(rows, (uint32_t)p.max_pages); /* the rows the ORs below may touch */
        direct = kLong || rows <= (uint32_t)T::kDirectMaxPages;
        if (direct) /* kDirectMaxPages and qm_rows are multiples of 4: the rounded rows fit the column */
            clear_column(qm_col, (int32_t)((rows + 3u) & ~3u), lane);
        else
            clear_hash_keys<W>(dyn, tid); /* the hash path's barrier follows before use */
    }

    /* --- S_j: ids that are visible and first in the row; the others become -1. */
    if (row0 != guess_row0 && tid < n) /* block-uniform guess */
        pw_dev::load_topk_row<kVec>(
            p.topk_ids + ((int64_t)head * p.num_tokens + row0 + tid) * p.topk, p.topk, page);
    uint32_t visible =
        tid < n ? visible_pages(causal0 + tid, kv_len, p.page_size, p.page_shift) : 0u;
    /* fused: S_i as pw_union_prepare reads it (no max_pages clamp; equal under the contract) */
    const uint32_t visible_union = min(visible, pw_dev::kMaxUnionPageId);
    if (direct) visible = min(visible, (uint32_t)p.max_pages); /* see the file comment */
    uint32_t vmask = 0, vmask_union = 0;
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        vmask |= (uint32_t)((uint32_t)page[i] < visible) << i;
        if constexpr (kFused) vmask_union |= (uint32_t)((uint32_t)page[i] < visible_union) << i;
    }
#pragma unroll
    for (int i = 1; i < kMaxTopk; i++) {
        bool repeat = false;
#pragma unroll
        for (int k = 0; k < i; k++) repeat |= page[i] == page[k];
        vmask &= ~((uint32_t)repeat << i);
        if constexpr (kFused) vmask_union &= ~((uint32_t)repeat << i);
    }
    if constexpr (kFused) {
        int4 *const row = reinterpret_cast<int4 *>(s_ids + tid * kMaxTopk);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int32_t v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = (vmask_union >> (4 * c + k)) & 1u ? page[4 * c + k] : -1;
            row[c] = make_int4(v[0], v[1], v[2], v[3]);
        }
    }
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) page[i] = (vmask >> i) & 1u ? page[i] : -1;
    sm.vmask[tid] = (uint16_t)vmask;
    sm.sizes[tid] = (uint8_t)__popc(vmask);

    /* --- Page -> query masks; afterwards page[i] is the mask row of position i (-1: none). */
    int32_t num_rows; /* rows of qmask that may hold bits */
    if (direct) {
        const uint32_t last_visible = visible_pages(causal0 + n - 1, kv_len, p.page_size, p.page_shift);
        num_rows = (int32_t)min(last_visible, (uint32_t)p.max_pages);
        __syncwarp(); /* this warp's column is clear */
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) {
            if constexpr (kMatch) {
                const uint32_t same = __match_any_sync(kFullMask, page[i]);
                const bool leader = page[i] >= 0 && (same & ((1u << lane) - 1u)) == 0u;
                shared_or_or_sink(leader, qm_col + page[i], &sm.sink[lane], same);
            } else {
                const int32_t below = __shfl_up_sync(kFullMask, page[i], 1);
                const bool c = lane > 0 && page[i] >= 0 && page[i] == below;
                const uint32_t cont = __ballot_sync(kFullMask, c);
                shared_or_or_sink(page[i] >= 0 && !c, qm_col + page[i], &sm.sink[lane],
                                  run_lanes(cont, lane));
            }
        }
    } else {
        /* Hash path: dense numbers for the window's distinct pages. A
         * lane whose page at position i equals the page of the lane below continues that
         * lane's run; run heads do the work. */
        uint32_t cont[kMaxTopk]; /* ballot: lanes that continue the run of the lane below */
        uint32_t heads = 0;      /* bit i: this lane heads a run at position i */
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) {
            const int32_t below = __shfl_up_sync(kFullMask, page[i], 1);
            const bool c = lane > 0 && page[i] >= 0 && page[i] == below;
            cont[i] = __ballot_sync(kFullMask, c);
            if (page[i] >= 0 && !c) heads |= 1u << i;
        }
        __syncthreads(); /* the hash keys are clear */
        int32_t *const keys = reinterpret_cast<int32_t *>(dyn);
        uint16_t *const lids = reinterpret_cast<uint16_t *>(dyn + (size_t)T::kSlots * 4u);
        uint32_t slot[kMaxTopk];
        int32_t found[kMaxTopk];
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) { /* all first probes in flight together */
            slot[i] = hash_slot<W>(page[i]);
            found[i] = kEmptyKey;
            if ((heads >> i) & 1u) found[i] = atomicCAS(&keys[slot[i]], kEmptyKey, page[i]);
        }
        uint32_t inserted = 0;
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) {
            if (!((heads >> i) & 1u)) continue;
            uint32_t s = slot[i];
            int32_t key = found[i];
            while (key != kEmptyKey && key != page[i]) { /* linear probing */
                s = (s + 1u) & (uint32_t)(T::kSlots - 1);
                key = atomicCAS(&keys[s], kEmptyKey, page[i]);
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
                if ((inserted >> i) & 1u) lids[slot[i]] = (uint16_t)next++;
        }
        const uint32_t lanes_le = (2u << lane) - 1u; /* lanes 0..lane */
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) { /* run members take their head's slot */
            const int src = 31 - __clz(~cont[i] & lanes_le);
            const uint32_t s = __shfl_sync(kFullMask, slot[i], src);
            if ((cont[i] >> lane) & 1u) slot[i] = s;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) page[i] = page[i] >= 0 ? (int32_t)lids[slot[i]] : -1;
        num_rows = sm.num_pages;
        __syncthreads(); /* the hash set is dead: its storage becomes qmask */
        for (int x = lane; x < num_rows; x += 32) qm_col[x] = 0u;
        __syncwarp();
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++)
            shared_or_or_sink((heads >> i) & 1u, qm_col + page[i], &sm.sink[lane],
                              run_lanes(cont[i], lane));
    }
    __syncthreads(); /* every column is complete */

    /* --- Identity visits (guarded; kLong: from M, below) and this thread's 16 mask rows. */
    if (!kLong && p.guarded) {
        uint32_t v = 0, v_alt = 0;
        for (int x = tid; x < num_rows; x += W) {
#pragma unroll
            for (int c = 0; c < T::kWords; c++) {
                v += nonzero_runs(qm[c * col_stride + x], p.group_size);
                if constexpr (kDual) v_alt += nonzero_runs(qm[c * col_stride + x], p.alt_group_size);
            }
        }
        v = __reduce_add_sync(kFullMask, v);
        if (lane == 0 && v != 0) atomicAdd(&sm.identity_visits, v);
        if constexpr (kDual) {
            v_alt = __reduce_add_sync(kFullMask, v_alt);
            if (lane == 0 && v_alt != 0) atomicAdd(&s_identity_visits_alt, v_alt);
        }
    }
    uint32_t q[kMaxTopk][T::kWords];
#pragma unroll
    for (int i = 0; i < kMaxTopk; i++) {
        const bool have = page[i] >= 0;
#pragma unroll
        for (int c = 0; c < T::kWords; c++) q[i][c] = have ? qm[c * col_stride + page[i]] : 0u;
    }
    __syncthreads(); /* qmask is dead: its storage becomes M */

    /* --- M[w][tid]: 16-bit columns of the transposed mask rows. */
    uint16_t (*const m)[W] = reinterpret_cast<uint16_t (*)[W]>(dyn);
#pragma unroll
    for (int c = 0; c < T::kWords; c++) {
        uint32_t a[16];
#pragma unroll
        for (int i = 0; i < 16; i++) a[i] = q[i][c];
        transpose16x16x2_v3(a);
#pragma unroll
        for (int k = 0; k < 16; k++) {
            m[32 * c + k][tid] = (uint16_t)(a[k] & 0xffffu);
            m[32 * c + 16 + k][tid] = (uint16_t)(a[k] >> 16);
        }
    }
    __syncthreads();
    /* The greedy loop is what remains: union preparation, launched as a programmatic
     * dependent (plan.c), may start now and scan its requests while the loop runs (it
     * waits for this grid before it reads the permutation). No effect without one. */
    pw::grid_launch_dependents();
    if constexpr (kLong) {
        if (p.guarded) {
            /* Identity visits from M instead of a scan of thousands of mask rows: query tid's
             * pages outside the earlier members of its identity group (g-aligned runs of
             * slots; guarded g is 1, 2, 4 or 8), summed over the window = the sum over pages
             * of the g-runs with a bit set. Rows of queries past n are zero. */
            const uint32_t vm = sm.vmask[tid];
            uint32_t seen = 0u;
            for (int w = tid & ~(p.group_size - 1); w < tid; w++) seen |= m[w][tid];
            const uint32_t v = __reduce_add_sync(kFullMask, (uint32_t)__popc(vm & ~seen));
            if (lane == 0 && v != 0) atomicAdd(&sm.identity_visits, v);
            if constexpr (kDual) {
                uint32_t seen_alt = 0u;
                for (int w = tid & ~(p.alt_group_size - 1); w < tid; w++) seen_alt |= m[w][tid];
                const uint32_t va = __reduce_add_sync(kFullMask, (uint32_t)__popc(vm & ~seen_alt));
                if (lane == 0 && va != 0) atomicAdd(&s_identity_visits_alt, va);
            }
        }
        __syncthreads(); /* the counts are complete before the loop's end reads them */
    }
    /* dual: warp 1 runs the loop with the other g (warp-uniform) */
    const bool alt = kDual && warp == 1;
    if (warp != 0 && !alt) {
        if constexpr (kFused) {
            /* While warp 0 runs the greedy loop: the groups of the requests before this
             * one (CTA 0: of all requests too), for the global group index. */
            const int32_t t1 = tid - 32, n1 = W - 32;
            add_request_groups(p, W, 0, req, t1, n1, &sm.groups_before);
            if (blockIdx.x == 0) add_request_groups(p, W, 0, num_req, t1, n1, &sm.groups_total);
            if constexpr (kStream) {
                pw::bar_sync_named(kStreamBarrier, W - 32); /* the counts are summed */
                stream_union_prepare<W>(p, sm, s_ids, s_emit, s_group_bar, &s_keep_greedy, head, req, win, row0, n);
                return;
            }
            /* The greedy order is final: warp 0 arrives after its loop, at another place in
             * the program, so not __syncthreads (its .aligned form requires one instruction
             * for the whole CTA: compute-sanitizer synccheck flagged it, H200 2026-12-01). */
            pw::barrier_sync_unaligned(kFusedBarrier, W);
            fused_union_prepare<W>(p, sm, s_ids, dyn, head, req, win, row0, n);
        }
        return;
    }

    uint8_t *const order = alt ? s_order_alt : sm.order; /* sm.order but in a dual kernel's warp 1 */
    /* --- Algorithm 1, one warp. Lane owns queries lane*QPL + k; pend[k] and valid[k] sit
     * in the 16-bit half of the M word where that query's column lies. base[k] = the
     * query's M row offset (j * kRowBytes), or kAssignedKey once it has a slot. */
    constexpr int QPL = W / 32;
    uint32_t valid[QPL], base[QPL];
#pragma unroll
    for (int k = 0; k < QPL; k++) {
        const int j = lane * QPL + k;
        const uint32_t vm = sm.vmask[j];
        valid[k] = (k & 1) ? vm << 16 : vm;
        base[k] = j < n ? (uint32_t)j * T::kRowBytes : kAssignedKey;
    }
    uint32_t visits = 0;
    const unsigned char *const m_lane = dyn + lane * QPL * 2; /* lane's slice of M row 0 */
    if constexpr (kArgmin != kPrepOnly) {
        /* n as a uniform value (a redux result lives in a uniform register; g is a kernel
         * parameter), so ptxas sees every branch below as uniform: no divergence check
         * before each redux.sync and no reconvergence barriers in the loop. */
        const int32_t nu = (int32_t)__reduce_min_sync(kFullMask, (uint32_t)n);
        int32_t g = p.group_size;
        if constexpr (kDual) /* uniform too (a redux result), as n */
            g = (int32_t)__reduce_min_sync(kFullMask, (uint32_t)(alt ? p.alt_group_size : p.group_size));
        /* Seed of the first group: the smallest id (its key is its M row offset). The row
         * of each group's seed is requested before the loop's back edge, so the branch
         * hides under the load. */
        uint32_t best = base[0];
#pragma unroll
        for (int k = 1; k < QPL; k++) best = min(best, base[k]);
        uint32_t seed = warp_min<kArgmin>(best);
        uint32_t mw[(QPL + 1) / 2];
        load_m_row<QPL>(m_lane + (seed & T::kOffsetMask), mw);
        int32_t s = 0;
        int32_t closed = 0; /* kStream: groups closed so far */
        bool more = nu > 0;
        while (more) { /* one group: slots [s, end); seed known, its M row in flight */
#pragma unroll
            for (int k = 0; k < QPL; k++) base[k] = base[k] == seed ? kAssignedKey : base[k];
            if (lane == 0) order[s] = (uint8_t)(seed / T::kRowBytes);
            visits += sm.sizes[seed / T::kRowBytes];
            const int32_t end = min(nu, s + g);
            more = end < nu;
            const bool has_last = end - s >= 2; /* a member after the seed */
            ++s;
            uint32_t pend[QPL];
#pragma unroll
            for (int k = 0; k < QPL; k++) pend[k] = valid[k];
            /* One member step: pend takes the previous winner's M row first; the winner's
             * key masked is its M row offset, the key itself marks it assigned. */
            auto member_step = [&]() -> uint32_t {
                uint32_t key[QPL];
#pragma unroll
                for (int k = 0; k < QPL; k++) {
                    pend[k] &= ~mw[k / 2];
                    key[k] = ((uint32_t)__popc(pend[k]) << T::kKeyShift) + base[k];
                }
                uint32_t kmin = key[0];
#pragma unroll
                for (int k = 1; k < QPL; k++) kmin = min(kmin, key[k]);
                const uint32_t win = warp_min<kArgmin>(kmin);
                const uint32_t w_off = win & T::kOffsetMask;
#pragma unroll
                for (int k = 0; k < QPL; k++) base[k] = key[k] == win ? kAssignedKey : base[k];
                if (lane == 0) order[s] = (uint8_t)(w_off / T::kRowBytes);
                visits += win >> T::kKeyShift;
                ++s;
                return w_off;
            };
#pragma unroll
            for (int member = 1; member < 7; member++) { /* all members but the last */
                if (s + 1 >= end) break;
                load_m_row<QPL>(m_lane + member_step(), mw);
            }
            if (has_last) {
                /* The group's last member (its M row is not needed). Meanwhile, off the
                 * step's dependent chain: the two smallest unassigned ids s0 < s1 before
                 * it; the next seed is s1 if the member is s0, else s0. */
                uint32_t b0 = base[0];
#pragma unroll
                for (int k = 1; k < QPL; k++) b0 = min(b0, base[k]);
                const uint32_t s0 = warp_min<kArgmin>(b0);
                uint32_t b1 = kAssignedKey;
#pragma unroll
                for (int k = 0; k < QPL; k++) b1 = min(b1, base[k] == s0 ? kAssignedKey : base[k]);
                const uint32_t s1 = warp_min<kArgmin>(b1);
                const uint32_t w_off = member_step();
                seed = w_off == s0 ? s1 : s0;
            } else {
                /* A group of one (g == 1, or a last group of one query): one redux. */
                uint32_t b0 = base[0];
#pragma unroll
                for (int k = 1; k < QPL; k++) b0 = min(b0, base[k]);
                seed = warp_min<kArgmin>(b0);
            }
            /* Next group's seed row (masked: in bounds even after the last group). */
            load_m_row<QPL>(m_lane + (seed & T::kOffsetMask), mw);
            if constexpr (kStream) { /* this group's order bytes are written: its emitter may go
                                      * (after the seed row's load has left: it is on the chain) */
                if (lane == 0) pw::mbarrier_arrive(&s_group_bar[closed]);
                ++closed;
            }
        }
    }
    __syncwarp();
    const bool keep_greedy =
        kArgmin != kPrepOnly && (!p.guarded || visits < (alt ? s_identity_visits_alt : sm.identity_visits));
    int32_t *out = (alt ? p.perm_alt : p.perm) + (int64_t)head * p.num_tokens + row0;
    for (int32_t s = lane; s < n; s += 32) {
        const int32_t j = keep_greedy ? (int32_t)order[s] : s;
        out[s] = row0 + j;
        if constexpr (kFused && !kStream) sm.order[s] = (uint8_t)j; /* the final order, for the groups */
    }
    if constexpr (kStream) { /* the emitters read the choice after this arrive */
        if (lane == 0) {
            s_keep_greedy = keep_greedy ? 1u : 0u;
            pw::mbarrier_arrive(&s_group_bar[W]);
        }
        return;
    }
    if constexpr (kFused) {
        pw::barrier_sync_unaligned(kFusedBarrier, W); /* with the other warps: order final, group counts summed */
        fused_union_prepare<W>(p, sm, s_ids, dyn, head, req, win, row0, n);
    }
}

/* perm[h*N + s] = s. */
__global__ void identity_perm_kernel(int32_t *perm, int32_t num_tokens)
{
    int32_t *row = perm + (int64_t)blockIdx.y * num_tokens;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x; /* 64-bit: N near 2^31 must not wrap */
    for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < num_tokens; s += stride)
        row[s] = (int32_t)s;
}

pw_status_t check_regroup_args(const pw_problem_t *problem, const int32_t *topk_ids,
                               const pw_requests_t *requests, const pw_grouping_t *grouping,
                               const int32_t *perm, int32_t max_topk = kMaxTopk)
{
    PW_TRY(pw_check_regroup_call(problem, topk_ids, requests, grouping, perm)); /* selection.c */
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
    if (problem->topk > max_topk)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_regroup: topk is %d; the GPU's GREEDY / GUARDED regroup supports 1..%d "
                       "(IDENTITY takes any K)",
                       problem->topk, max_topk);
    const int32_t g = grouping->group_size;
    if (grouping->mode == PW_REGROUP_GUARDED && g != 1 && g != 2 && g != 4 && g != 8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_regroup: guarded mode supports group_size 1, 2, 4, 8 (got %d)", g);
    return PW_SUCCESS;
}

/* Dev variants (regroup_dev.h). */
enum {
    kDevLibrary = 0,       /* v3, redux argmin: pw_regroup */
    kDevShuffle = 1,       /* v3, shuffle argmin */
    kDevPrepOnly = 2,      /* v3, no greedy loop (identity order) */
    kDevHashForced = 3,    /* v3 with the hash path whatever max_pages_per_request */
    kDevMatch = 4,         /* v3, __match_any_sync mask ORs on the direct path */
    kDevHashPrepOnly = 5,  /* v3 hash path, no greedy loop */
    kDevWide = 6,          /* regroup_wide.cuh: K up to 64, a hash set, every thread in the loop */
    kDevWideMasks = 7,     /* regroup_wide_masks.cuh: K up to 64, v3's layout (pw_regroup's kernel for K > 16) */
    kDevNoLong = 8,        /* v3 without the long direct path (before 2026-12-03: hash past the bound) */
    kDevLast = kDevNoLong
};

template <int W, int kArgmin, bool kMatch, bool kFused = false, bool kDual = false, bool kStream = false>
void launch_v3(const RegroupParams &params, bool vec, int32_t num_kv_heads, cudaStream_t stream)
{
    const dim3 grid((unsigned)(params.num_tokens / W + params.num_requests),
                    (unsigned)num_kv_heads);
    const size_t smem = dyn_smem_bytes<W>(params);
    if (vec)
        regroup_kernel<W, true, kArgmin, kMatch, kFused, kDual, false, kStream><<<grid, W, smem, stream>>>(params);
    else
        regroup_kernel<W, false, kArgmin, kMatch, kFused, kDual, false, kStream><<<grid, W, smem, stream>>>(params);
}

/* CTAs of a launch per wave on this device (0 if the query fails). */
static int64_t ctas_per_wave(const void *kernel, int threads, size_t smem, int sms)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (int64_t)per_sm * sms;
}

/* A launch of the long direct path (choose_long). */
struct LongLaunch {
    void (*kernel)(RegroupParams);
    RegroupParams params;
    size_t smem;
    dim3 grid;
};

/* The long direct path (kLong kernels) for a page table past kDirectMaxPages: chosen
 * (returns true, *out = the launch) when V <= kLongMaxPages, the device lets a CTA opt in
 * to that much shared memory (kWords x 4 bytes a page: 128 KB at V = 8192, W128), and its
 * waves are at most twice the adaptive launch's: a CTA of the long path runs its window in
 * about half the time of the hash path (bench/NOTES.md: A-hot 13.1 vs 27.5 us), but fewer
 * CTAs fit on an SM. Otherwise (also when a runtime query fails: the error is cleared) the
 * caller takes the adaptive path. Sets the kernel's shared-memory attribute. The dual
 * kernels hold 128 more bytes of static shared memory, so at an occupancy edge pw_regroup
 * and pw_regroup_dual may choose differently (the same permutations either way). Host
 * cost: a few runtime queries per call with V past the 32 KB bound (not cached). */
template <int W, bool kDual>
static bool choose_long(const RegroupParams &in, bool vec, int32_t num_kv_heads, LongLaunch *out)
{
    using T = Tile<W>;
    if (in.max_pages <= T::kDirectMaxPages || in.max_pages > T::kLongMaxPages) return false;
    RegroupParams params = in;
    params.qm_rows = (params.max_pages + 3) / 4 * 4;
    params.direct = 1;
    params.adaptive = 0;
    void (*long_kernel)(RegroupParams) =
        vec ? regroup_kernel<W, true, kArgminRedux, false, false, kDual, true>
            : regroup_kernel<W, false, kArgminRedux, false, false, kDual, true>;
    void (*adaptive_kernel)(RegroupParams) = vec ? regroup_kernel<W, true, kArgminRedux, false, false, kDual>
                                                 : regroup_kernel<W, false, kArgminRedux, false, false, kDual>;
    const size_t bytes = dyn_smem_bytes<W, true>(params);
    int dev = 0, optin = 0, sms = 0;
    cudaFuncAttributes attr;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&attr, (const void *)long_kernel) != cudaSuccess) {
        (void)cudaGetLastError(); /* no device or no image: the adaptive launch reports it */
        return false;
    }
    if (bytes + attr.sharedSizeBytes > (size_t)optin) return false;
    /* The attribute is the same for every call (the most any V <= kLongMaxPages needs, or
     * what the device allows), so that threads calling with different V do not race. */
    size_t most = (size_t)T::kWords * (size_t)T::kLongMaxPages * 4u;
    if (most + attr.sharedSizeBytes > (size_t)optin) most = (size_t)optin - attr.sharedSizeBytes;
    if (cudaFuncSetAttribute((const void *)long_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most) !=
        cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the adaptive launch runs instead */
        return false;
    }
    RegroupParams adaptive = in;
    adaptive.direct = 0;
    adaptive.adaptive = 1;
    const int64_t ctas = ((int64_t)in.num_tokens / W + in.num_requests) * num_kv_heads;
    const int64_t wave_long = ctas_per_wave((const void *)long_kernel, W, bytes, sms);
    const int64_t wave_adaptive = ctas_per_wave((const void *)adaptive_kernel, W, dyn_smem_bytes<W>(adaptive), sms);
    if (wave_long <= 0 || wave_adaptive <= 0) return false;
    const int64_t waves_long = (ctas + wave_long - 1) / wave_long;
    const int64_t waves_adaptive = (ctas + wave_adaptive - 1) / wave_adaptive;
    if (waves_long > 2 * waves_adaptive) return false;
    out->kernel = long_kernel;
    out->params = params;
    out->smem = bytes;
    out->grid = dim3((unsigned)(in.num_tokens / W + in.num_requests), (unsigned)num_kv_heads);
    return true;
}

/* choose_long at the grouping's window (64 or 128). */
template <bool kDual>
static bool choose_long_at(int32_t window, const RegroupParams &in, bool vec, int32_t num_kv_heads, LongLaunch *out)
{
    return window == 64 ? choose_long<64, kDual>(in, vec, num_kv_heads, out)
                        : choose_long<128, kDual>(in, vec, num_kv_heads, out);
}

/* The long direct path when choose_long picks it (returns true: launched), else nothing. */
template <bool kDual>
static bool launch_long(int32_t window, const RegroupParams &in, bool vec, int32_t num_kv_heads, cudaStream_t stream)
{
    LongLaunch l;
    if (!choose_long_at<kDual>(window, in, vec, num_kv_heads, &l)) return false;
    l.kernel<<<l.grid, window, l.smem, stream>>>(l.params);
    return true;
}

template <int W>
void launch_variant(int variant, RegroupParams params, bool vec, int32_t num_kv_heads,
                    cudaStream_t stream)
{
    const bool hash_forced = variant == kDevHashForced || variant == kDevHashPrepOnly;
    params.direct = !hash_forced && params.max_pages <= Tile<W>::kDirectMaxPages;
    params.adaptive = !hash_forced && !params.direct;
    switch (variant) {
    case kDevShuffle: launch_v3<W, kArgminShuffle, false>(params, vec, num_kv_heads, stream); break;
    case kDevPrepOnly:
    case kDevHashPrepOnly: launch_v3<W, kPrepOnly, false>(params, vec, num_kv_heads, stream); break;
    case kDevMatch: launch_v3<W, kArgminRedux, true>(params, vec, num_kv_heads, stream); break;
    default: launch_v3<W, kArgminRedux, false>(params, vec, num_kv_heads, stream); break;
    }
}

} // namespace

/* (pw_regroup_workspace_size: host only, in regroup_gpu_stub.c for both builds.) */

/* Kernel parameters of a GREEDY / GUARDED call (direct / adaptive set per window size). */
static RegroupParams regroup_params(const pw_problem_t *problem, const int32_t *topk_ids,
                                    const pw_requests_t *requests, const pw_grouping_t *grouping,
                                    int32_t *perm)
{
    RegroupParams params;
    memset(&params, 0, sizeof params);
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
    params.max_pages = problem->max_pages_per_request;
    params.page_shift = -1;
    for (int32_t s = 0; s < 31; s++)
        if (problem->page_size == (int32_t)(1u << s)) params.page_shift = s;
    params.direct = 0; /* set per window size in launch_variant */
    params.adaptive = 0;
    /* Only the direct path (V <= 4096) reads qm_rows; computed only there, so that a V
     * near INT32_MAX (valid: any V >= 0) does not overflow the rounding. */
    params.qm_rows = params.max_pages < 4 ? 4
                   : params.max_pages <= Tile<64>::kDirectMaxPages
                       ? (params.max_pages + 3) / 4 * 4
                       : 0;
    return params;
}

static pw_status_t launch_status(const char *what)
{
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "%s: kernel launch failed: %s (%s)", what,
                       cudaGetErrorString(err), cudaGetErrorName(err));
    return PW_SUCCESS;
}

#include "regroup_wide.cuh"       /* dev variant 6: the wide-Top-K kernel (uses the three above) */
#include "regroup_wide_masks.cuh" /* dev variant 7: the wide-Top-K kernel with v3's layout */

extern "C" pw_status_t pw_regroup_dev_variant(int variant, const pw_problem_t *problem,
                                              const int32_t *topk_ids,
                                              const pw_requests_t *requests,
                                              const pw_grouping_t *grouping, int32_t *perm,
                                              pw_stream_t stream)
{
    if (variant < kDevLibrary || variant > kDevLast)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_regroup_dev_variant: variant %d (0..%d)",
                       variant, (int)kDevLast);
    const bool wide = variant == kDevWide || variant == kDevWideMasks;
    PW_TRY(check_regroup_args(problem, topk_ids, requests, grouping, perm, wide ? 64 : kMaxTopk));
    if (problem->num_tokens == 0) return PW_SUCCESS;
    /* No GPU: PW_ERROR_NO_DEVICE as every device entry point, not a launch error. */
    PW_TRY(pw_check_attention_device());
    cudaStream_t st = (cudaStream_t)stream;
    if (variant == kDevWide && grouping->mode != PW_REGROUP_IDENTITY)
        return regroup_wide(regroup_params(problem, topk_ids, requests, grouping, perm), grouping,
                            problem->num_kv_heads, st);
    if (variant == kDevWideMasks && grouping->mode != PW_REGROUP_IDENTITY)
        return regroup_wide_masks(regroup_params(problem, topk_ids, requests, grouping, perm), grouping,
                                  problem->num_kv_heads, st);
    if (grouping->mode == PW_REGROUP_IDENTITY) {
        const int32_t threads = 256;
        int64_t blocks = ((int64_t)problem->num_tokens + threads - 1) / threads;
        if (blocks > 1024) blocks = 1024;
        identity_perm_kernel<<<dim3((unsigned)blocks, (unsigned)problem->num_kv_heads), threads,
                               0, st>>>(perm, problem->num_tokens);
    } else {
        const RegroupParams params = regroup_params(problem, topk_ids, requests, grouping, perm);
        const bool vec = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
        /* past the 32 KB direct bound: the long direct path where it pays */
        if (variant == kDevLibrary && launch_long<false>(grouping->window, params, vec, problem->num_kv_heads, st))
            return launch_status("pw_regroup");
        if (grouping->window == 64)
            launch_variant<64>(variant, params, vec, problem->num_kv_heads, st);
        else
            launch_variant<128>(variant, params, vec, problem->num_kv_heads, st);
    }
    return launch_status("pw_regroup");
}

extern "C" pw_status_t pw_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  int32_t *perm, void *workspace, size_t workspace_bytes,
                                  pw_stream_t stream)
{
    (void)workspace;
    (void)workspace_bytes; /* the kernels need none (size query returns 0) */
    /* K <= 16: v3; K 17..64: v3's layout with K-bit rows (regroup_wide_masks.cuh); past the
     * direct-indexed page bound, a split call that runs the hash-set kernel
     * (regroup_wide.cuh) for the windows whose pages do not fit. */
    const int variant = problem && problem->topk > kMaxTopk ? kDevWideMasks : kDevLibrary;
    return pw_regroup_dev_variant(variant, problem, topk_ids, requests, grouping, perm, stream);
}

/* pw_internal.h: Algorithm 1 twice in one launch, with grouping->group_size into perm and
 * alt_group_size into perm_alt (kDual: warp 1 runs the second loop on the same masks). */
extern "C" pw_status_t pw_regroup_dual(const pw_problem_t *problem, const int32_t *topk_ids,
                                       const pw_requests_t *requests, const pw_grouping_t *grouping,
                                       int32_t alt_group_size, int32_t *perm, int32_t *perm_alt,
                                       pw_stream_t stream)
{
    PW_TRY(check_regroup_args(problem, topk_ids, requests, grouping, perm));
    if (grouping->mode == PW_REGROUP_IDENTITY)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_regroup_dual: mode IDENTITY (it runs GREEDY or GUARDED)");
    if (alt_group_size != 1 && alt_group_size != 2 && alt_group_size != 4 && alt_group_size != 8)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup_dual: alt_group_size %d (1, 2, 4 or 8)", alt_group_size);
    if (problem->num_tokens > 0 && (!perm_alt || perm_alt == perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_regroup_dual: perm_alt is NULL or perm");
    if (problem->num_tokens == 0) return PW_SUCCESS;
    PW_TRY(pw_check_attention_device());
    RegroupParams params = regroup_params(problem, topk_ids, requests, grouping, perm);
    params.perm_alt = perm_alt;
    params.alt_group_size = alt_group_size;
    const bool vec = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (launch_long<true>(grouping->window, params, vec, problem->num_kv_heads, st))
        return launch_status("pw_regroup_dual");
    if (grouping->window == 64) {
        params.direct = params.max_pages <= Tile<64>::kDirectMaxPages;
        params.adaptive = !params.direct;
        launch_v3<64, kArgminRedux, false, false, true>(params, vec, problem->num_kv_heads, st);
    } else {
        params.direct = params.max_pages <= Tile<128>::kDirectMaxPages;
        params.adaptive = !params.direct;
        launch_v3<128, kArgminRedux, false, false, true>(params, vec, problem->num_kv_heads, st);
    }
    return launch_status("pw_regroup_dual");
}

/* Fused variants (regroup_dev.h): 0 = one launch (library), 1 = one launch with the hash
 * path forced, 2 = pw_regroup then pw_union_prepare (two launches, the path before),
 * 3 = one launch with the groups emitted while the greedy loop runs (kStream). */
extern "C" pw_status_t pw_regroup_union_prepare_dev_variant(
    int variant, const pw_problem_t *problem, const int32_t *topk_ids,
    const pw_requests_t *requests, const pw_grouping_t *grouping, int32_t *perm,
    const pw_union_meta_t *meta, pw_stream_t stream)
{
    if (variant < 0 || variant > 3)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_regroup_union_prepare_dev_variant: variant %d (0..3)", variant);
    PW_TRY(check_regroup_args(problem, topk_ids, requests, grouping, perm));
    PW_TRY(pw_check_union_prepare_args(problem, topk_ids, requests, grouping, perm, meta));
    if (variant == 2 || grouping->mode == PW_REGROUP_IDENTITY || problem->num_tokens == 0) {
        PW_TRY(pw_regroup(problem, topk_ids, requests, grouping, perm, NULL, 0, stream));
        return pw_union_prepare(problem, topk_ids, requests, grouping, perm, meta, stream);
    }
    RegroupParams params = regroup_params(problem, topk_ids, requests, grouping, perm);
    params.num_groups = meta->num_groups;
    params.groups = meta->groups;
    params.union_pages = meta->union_pages;
    params.member_masks = meta->member_masks;
    params.max_groups = meta->max_groups;
    params.capacity = meta->union_capacity;
    params.vec_out = meta->union_capacity % 4 == 0 && ((uintptr_t)meta->union_pages % 16u) == 0 &&
                     ((uintptr_t)meta->member_masks % 4u) == 0;
    const bool vec = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
    const bool hash_forced = variant == 1;
    cudaStream_t st = (cudaStream_t)stream;
    if (grouping->window == 64) {
        params.direct = !hash_forced && params.max_pages <= Tile<64>::kDirectMaxPages;
        params.adaptive = !hash_forced && !params.direct;
        if (variant == 3) launch_v3<64, kArgminRedux, false, true, false, true>(params, vec, problem->num_kv_heads, st);
        else launch_v3<64, kArgminRedux, false, true>(params, vec, problem->num_kv_heads, st);
    } else {
        params.direct = !hash_forced && params.max_pages <= Tile<128>::kDirectMaxPages;
        params.adaptive = !hash_forced && !params.direct;
        if (variant == 3) launch_v3<128, kArgminRedux, false, true, false, true>(params, vec, problem->num_kv_heads, st);
        else launch_v3<128, kArgminRedux, false, true>(params, vec, problem->num_kv_heads, st);
    }
    return launch_status("pw_regroup_union_prepare");
}

/* regroup_dev.h: 1 when pw_regroup (and pw_regroup_dual) would run the long direct path. */
extern "C" pw_status_t pw_regroup_dev_long_path(const pw_problem_t *problem, const int32_t *topk_ids,
                                                const pw_requests_t *requests, const pw_grouping_t *grouping,
                                                int *long_path)
{
    if (!long_path) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "long_path is NULL");
    *long_path = 0;
    int32_t dummy = 0;
    PW_TRY(check_regroup_args(problem, topk_ids, requests, grouping, &dummy, 64));
    if (grouping->mode == PW_REGROUP_IDENTITY || problem->num_tokens == 0 || problem->topk > kMaxTopk)
        return PW_SUCCESS;
    PW_TRY(pw_check_attention_device());
    const RegroupParams params = regroup_params(problem, topk_ids, requests, grouping, &dummy);
    const bool vec = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
    LongLaunch l;
    *long_path = choose_long_at<false>(grouping->window, params, vec, problem->num_kv_heads, &l) ? 1 : 0;
    return PW_SUCCESS;
}
