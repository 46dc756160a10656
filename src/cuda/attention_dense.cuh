/* attention_dense.cuh — dev impl 13: G = 8 Q heads per KV head on a dense tile (issue 16;
 * design and the count that decided it: bench/NOTES.md, seventh session). Included by
 * attention.cu after attention_lean.cuh (it uses that file's plan, ring and release
 * protocol, and attention_common.cuh's softmax pieces).
 *
 * The padded tile (the lean kernel with G = 8) gives each query 16 rows of which 8 are
 * zero, so it runs twice the tensor work a G = 8 call needs. Here the M64 tile holds 8
 * queries x 8 heads: one CTA per union group of 8 (the union metadata's groups, 8-bit
 * member masks), walking the group's whole union once. Warp w owns slots 2w (rows
 * 16w..16w+7) and 2w + 1 (rows 16w+8..16w+15); a thread's accumulator rows r0 and r0 + 8
 * are then head lane / 4 of two different queries, each with its own limit and its own
 * membership of the page:
 *   - a warp with neither slot a member converts zeros to P and skips the O update;
 *   - a member warp's row whose slot is not a member keeps m, l and O bit for bit: its
 *     scores (garbage, left unmasked) are discarded: m restored after the row max, P
 *     exactly 0, rescale factor exactly 1 (softmax_page_two_queries), and its O is not
 *     updated (pv_add_to_o_two_queries);
 *   - each member row sees its member pages in ascending order with softmax_page's
 *     arithmetic (the same instructions, per-row limits), so the outputs are bitwise those
 *     of the padded tile, of G = 16's first 8 heads and of every grouping.
 * Everything else is the lean kernel on the V^T pre-pass (PREVT): one K and one V^T tile,
 * refilled by the last warp done with it (L1-L5 of attention_lean.cuh, four arrivals per
 * page), V^T past the members' last visible token zeroed before the PV (page_v_limit over
 * the 8 slots), P straight from the QK accumulator into the PV A fragments, PV in two
 * N = 64 halves. FP8 and FP8X2; per-token scales in FP8 only (the TS template, below
 * dense_walk: FP8X2 returns PW_ERROR_UNSUPPORTED, its full call runs them on the stacked tile).
 *
 * test_gqa_padded compares it bitwise with the padded tile (H200, 2026-12-02: equal);
 * pw_sparse_prefill runs it for G = 8 on the V^T pre-pass (FP8X2 without per-token scales,
 * FP8 with them too: pw_union_attention_vt), its CTAs in the longest-first order of the plan's
 * schedule.
 * PAGE = 64 (both dense tiles, instantiated in attention_page64.cu): as the lean kernel's
 * PAGE = 64 form (attention_lean.cuh): K by 64-row boxes, member limits clamped to 63
 * (page_column_limit), the pre-pass's tiles zero past 63. */
#ifndef PW_ATTENTION_DENSE_CUH
#define PW_ATTENTION_DENSE_CUH

namespace pw {

constexpr int kDenseSlots = 8; // query positions per CTA: 8 x 8 heads = 64 rows
constexpr int kDenseG = 8;

/* A dense CTA's work: one (group, KV head), block = kv_head * max_groups + group. */
struct DenseWork {
    int kv_head, request, union_size;
    int64_t group;
    int32_t query_rows[kDenseSlots]; // original row of each slot, -1: empty
    int64_t limits[kDenseSlots];     // each slot's last visible token, -1: empty
};

/* The work of group `item` (= KV head x max_groups + group): its request, union size, 8 slots'
 * rows and last visible tokens; false for a head the launch skips or a group past the head's.
 * partner_only (the stacked G = 4 tile's second item of a pair, stack_item_block): also false
 * unless the group is its predecessor's partner, i.e. its index inside its window (inside its
 * request for identity groups) is odd (dense4_work's pairing), and for an item past the last
 * KV head (the last group's successor). */
static __device__ __forceinline__ bool dense_group_work(const AttentionParams &p, int64_t item, DenseWork &w,
                                                        bool partner_only = false)
{
    w.kv_head = (int)(item / p.max_groups);
    if (partner_only && w.kv_head >= p.num_kv_heads) return false;
    if (vt_skips_head(p, w.kv_head)) return false;
    w.group = item % p.max_groups;
    if (w.group >= p.num_groups[w.kv_head]) return false;
    const pw_group_desc_t g = p.groups[(int64_t)w.kv_head * p.max_groups + w.group];
    const int32_t cu_begin = p.cu_seqlens_q[g.request];
    if (partner_only) {
        const int32_t rel = g.slot_begin - cu_begin;
        if (((p.group_window > 0 ? rel % p.group_window : rel) / kDenseSlots) % 2 == 0) return false;
    }
    w.request = g.request;
    w.union_size = g.union_size;
    const int64_t prefix = p.prefix_lens[w.request], kv_len = p.kv_lens[w.request];
#pragma unroll
    for (int k = 0; k < kDenseSlots; k++) {
        w.query_rows[k] = k < g.num_members ? p.perm[(int64_t)w.kv_head * p.num_tokens + g.slot_begin + k] : -1;
        // Last visible token: min(c, L - 1) (docs/semantics.md §1).
        const int64_t c = prefix + (w.query_rows[k] - cu_begin);
        w.limits[k] = w.query_rows[k] >= 0 ? (c < kv_len - 1 ? c : kv_len - 1) : -1;
    }
    return true;
}

static __device__ __forceinline__ bool dense_work(const AttentionParams &p, DenseWork &w)
{
    const int64_t item = p.sched_count ? scheduled_block(p) : (int64_t)blockIdx.x;
    if (item < 0) return false; // past the scheduled items
    return dense_group_work(p, item, w);
}

/* softmax_page for a thread whose rows r0 and r0 + 8 belong to two queries: lim0 / lim1
 * their last visible columns on the page, mem0 / mem1 whether each selected it (at least
 * one does; kBoth: both do, the common case, compiled without a select). A member row:
 * softmax_page's instructions and results exactly (the same masking, row-max tree, FFMA
 * and sums). A non-member row (kBoth false) is not masked: its scores are garbage that no
 * result keeps (they may even be NaN where the cache holds NaN past every member's last
 * token): its m is restored after the row max, its alpha is 1 and its p exactly 0, so m
 * and l keep their bits. Its factor is taken as 1, so that an empty slot's factor 0 cannot
 * send the member row down the non-positive-factor path (that path is chosen per row: for
 * a member row f > 0 exactly when softmax_page's pair test passes, both rows' factors
 * sharing the sign of the score scale there: the padded tile's other row is a zero row,
 * factor 1 x score scale). Warp-collective (quad shuffles); lim / mem are warp-uniform per
 * row half. (Before 2026-12-02 a non-member row was masked whole through a limit of -1,
 * which ran the 64 compares of a partial page on most steps: 21% of the kernel's
 * instructions were compares and selects, ncu, bench/NOTES.md.) */
template <bool kBoth, int NCOLS = kPageSize>
static __device__ __forceinline__ void softmax_page_two_queries(float (&acc)[64], int64_t lim0, int64_t lim1,
                                                                bool mem0, bool mem1, uint32_t q, float f0,
                                                                float f1, float &m0, float &m1, float &l0,
                                                                float &l1, float &alpha0, float &alpha1)
{
    // NCOLS = 64 (pages of 64 tokens): acc[32..63] (columns 64..127) masked by position,
    // as softmax_page<.., 64> does.
    constexpr int kK = NCOLS / 2;
    if (!kBoth) {
        if (!mem0) {
            lim0 = NCOLS - 1;
            f0 = 1.0f;
        }
        if (!mem1) {
            lim1 = NCOLS - 1;
            f1 = 1.0f;
        }
    }
    // A non-positive factor (k_scale <= 0, never in practice): that row's scores scaled
    // first, before the mask (-inf x f would be +inf or NaN), then the code below with f = 1.
    const bool plain0 = !(f0 > 0.0f), plain1 = !(f1 > 0.0f);
    const float g0 = plain0 ? 1.0f : f0, g1 = plain1 ? 1.0f : f1;
    if (plain0 || plain1) {
#pragma unroll
        for (int k = 0; k < kK; k++)
            if ((k % 4) < 2 ? plain0 : plain1) acc[k] *= (k % 4) < 2 ? f0 : f1;
    }
    if (lim0 < NCOLS - 1 || lim1 < NCOLS - 1) { // a member's partial page (rare)
        // Columns 0..NCOLS-1: a limit clamped to -1..NCOLS-1 masks the same columns, in 32 bits.
        const int c0 = lim0 < 0 ? -1 : (int)(lim0 < NCOLS - 1 ? lim0 : NCOLS - 1);
        const int c1 = lim1 < 0 ? -1 : (int)(lim1 < NCOLS - 1 ? lim1 : NCOLS - 1);
#pragma unroll
        for (int k = 0; k < kK; k++) {
            const int col = 8 * (k / 4) + 2 * q + (k % 2);
            acc[k] = col <= ((k % 4) < 2 ? c0 : c1) ? acc[k] : -INFINITY;
        }
    }
    // softmax_page<kLeanMaxWidth>'s row-max tree (width 4), element for element.
    float mx0, mx1;
    row_max_tree<kLeanMaxWidth, NCOLS>(acc, mx0, mx1);
    const float m0_before = m0, m1_before = m1;
    softmax_rows_max(mx0, mx1, g0, g1, m0, m1, alpha0, alpha1);
    if (!kBoth) {
        if (!mem0) m0 = m0_before, alpha0 = 1.0f;
        if (!mem1) m1 = m1_before, alpha1 = 1.0f;
    }
    const float c0 = 8.0f - m0, c1 = 8.0f - m1;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int k = 0; k < kK; k++) {
        const bool first_row = (k % 4) < 2;
        float pk = ex2_approx(fmaf(acc[k], first_row ? g0 : g1, first_row ? c0 : c1));
        if (!kBoth && !(first_row ? mem0 : mem1)) pk = 0.0f;
        acc[k] = pk; // 256 * p
        if (first_row) s0 += pk; else s1 += pk;
    }
#pragma unroll
    for (int k = kK; k < 64; k++) acc[k] = 0.0f; // NCOLS = 64: no token
    softmax_rows_sum(s0, s1, alpha0, alpha1, l0, l1);
}

/* The epilogue of one warp: row r0 (G = 8: head lane / 4 of slot 2w; G = 4: head lane / 4
 * % 4 of slot 4w + lane / 16; original row row0) and r0 + 8 (the same head of the slot
 * after next, G = 8: 2w + 1; G = 4: 4w + 2 + lane / 16; row1); an empty slot (-1) stores
 * nothing. The arithmetic of store_rows per row. */
template <int G = kDenseG>
static __device__ __forceinline__ void dense_store_rows(const AttentionParams &p, const float (&o)[64], int32_t row0,
                                                        int32_t row1, int kv_head, int lane, float m0, float m1,
                                                        float l0, float l1, float v_scale)
{
    const int q = lane % 4, head = G == 8 ? lane / 4 : (lane / 4) % G;
    const int64_t hq = (int64_t)kv_head * G + head;
    float inv0 = 0.0f, inv1 = 0.0f, lse0 = 0.0f, lse1 = 0.0f;
    if (row0 >= 0) finish_row(m0, l0, v_scale, sink_of(p, hq, row0), inv0, lse0);
    if (row1 >= 0) finish_row(m1, l1, v_scale, sink_of(p, hq, row1), inv1, lse1);
    uint16_t *out0 = row0 >= 0 ? p.o + (int64_t)row0 * p.o_stride + hq * kHeadDim : nullptr;
    uint16_t *out1 = row1 >= 0 ? p.o + (int64_t)row1 * p.o_stride + hq * kHeadDim : nullptr;
#pragma unroll
    for (int b = 0; b < 16; b++) {
        const int col = 8 * b + 2 * q;
        if (out0)
            *reinterpret_cast<__nv_bfloat162 *>(out0 + col) = __floats2bfloat162_rn(o[4 * b] * inv0, o[4 * b + 1] * inv0);
        if (out1)
            *reinterpret_cast<__nv_bfloat162 *>(out1 + col) =
                __floats2bfloat162_rn(o[4 * b + 2] * inv1, o[4 * b + 3] * inv1);
    }
    if (p.lse && q == 0) {
        const int64_t stride = (int64_t)p.num_kv_heads * G;
        if (row0 >= 0) p.lse[(int64_t)row0 * stride + hq] = lse0;
        if (row1 >= 0) p.lse[(int64_t)row1 * stride + hq] = lse1;
    }
}

/* pv_add_to_o for the two queries' rows: a non-member row's O is left as it is (o * 1 + 0
 * would turn -0 into +0, and its P of 0 times V is not even 0 if V holds NaN at a position
 * another member may see). kBoth: both rows are members (no select). kTs (per-token scales):
 * o = o * alpha + (pv * vmax), each row its own vmax (the product exact). */
template <bool kBoth, bool kTs = false>
static __device__ __forceinline__ void pv_add_to_o_two_queries(float (&o)[64], const float (&pv)[32], int part,
                                                               bool mem0, bool mem1, float alpha0, float alpha1,
                                                               float vmax0 = 1.0f, float vmax1 = 1.0f)
{
#pragma unroll
    for (int k = 0; k < 32; k++) {
        const bool first_row = (k % 4) < 2;
        const float add = kTs ? __fmul_rn(pv[k], first_row ? vmax0 : vmax1) : pv[k];
        const float updated = fmaf(o[32 * part + k], first_row ? alpha0 : alpha1, add);
        o[32 * part + k] = kBoth || (first_row ? mem0 : mem1) ? updated : o[32 * part + k];
    }
}

/* Per-token scales on the dense tiles (TS, FP8 only; docs/semantics.md §4.5): after the
 * softmax (acc = 256 p, the scores having been multiplied by their K scales first:
 * ts_scale_scores), P x (vs_t / vmax) for this thread's two rows, each with its own vmax:
 * the rows are two queries, whose visible tokens differ on a page holding a member's last
 * visible token. lim0 / lim1 the rows' last visible columns, mem0 / mem1 whether each row's
 * query selected the page (a non-member row's P is 0 and its vmax 1). vabs, the largest |vs|
 * of the row's visible tokens, is taken by the lanes whose row is the same query's (G = 8:
 * the warp, G = 4: its half), each reading 4 or 8 of the page's tokens: the value the lean
 * kernel's ts_v_normaliser takes over its buffer masked past lim (fmaxf drops NaN in both).
 * vs_t / vmax by ts_vmax_of's multiplications, 0 past the row's limit: the lean kernel's products (softmax_page's kFoldV),
 * so each member row's P is the padded tile's bit for bit. A page both rows see whole (most
 * pages) takes one factor per column. Shuffles: called by every lane of a member warp. */
template <int G>
static __device__ __forceinline__ void ts_scale_p_two_queries(float (&acc)[64], int64_t lim0, int64_t lim1, bool mem0,
                                                              bool mem1, uint32_t q, const float *vs, float &vmax0,
                                                              float &vmax1)
{
    constexpr int kLast = kPageSize - 1;
    const int c0 = !mem0 || lim0 < 0 ? -1 : lim0 < kLast ? (int)lim0 : kLast;
    const int c1 = !mem1 || lim1 < 0 ? -1 : lim1 < kLast ? (int)lim1 : kLast;
    // vabs of each row: the lanes that share the row's query (G = 8: the warp; G = 4: its
    // half) read the page's tokens in turn (4 or 8 scalar loads a lane, masked by each row's
    // limit), then their maximum by shuffles within the group.
    constexpr int kLanes = G == 8 ? 32 : 16;
    const int lane = (int)(threadIdx.x % 32);
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
    for (int j = 0; j < kPageSize / kLanes; j++) {
        const int t = lane % kLanes + kLanes * j;
        const float v = fabsf(vs[t]);
        if (t <= c0) a0 = fmaxf(a0, v);
        if (t <= c1) a1 = fmaxf(a1, v);
    }
#pragma unroll
    for (int d = kLanes / 2; d >= 1; d /= 2) {
        a0 = fmaxf(a0, __shfl_xor_sync(0xffffffffu, a0, d));
        a1 = fmaxf(a1, __shfl_xor_sync(0xffffffffu, a1, d));
    }
    float pre0, inv0, pre1, inv1;
    vmax0 = ts_vmax_of(a0, pre0, inv0);
    vmax1 = ts_vmax_of(a1, pre1, inv1);
    if (c0 == kLast && c1 == kLast) { // both rows see the page whole (most pages): one vmax, one factor per column
#pragma unroll
        for (int b = 0; b < 16; b++) {
            const float2 v = lds_float2_here(vs + 8 * b + 2 * q);
            const float rx = __fmul_rn(__fmul_rn(v.x, pre0), inv0), ry = __fmul_rn(__fmul_rn(v.y, pre0), inv0);
#pragma unroll
            for (int e = 0; e < 4; e++) acc[4 * b + e] = __fmul_rn(acc[4 * b + e], e % 2 ? ry : rx);
        }
        return;
    }
#pragma unroll
    for (int b = 0; b < 16; b++) {
        const float2 v = lds_float2_here(vs + 8 * b + 2 * q);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int k = 4 * b + e, col = 8 * b + 2 * (int)q + (e % 2);
            const bool first_row = e < 2;
            const float r = __fmul_rn(__fmul_rn(e % 2 ? v.y : v.x, first_row ? pre0 : pre1), first_row ? inv0 : inv1);
            acc[k] = col <= (first_row ? c0 : c1) ? __fmul_rn(acc[k], r) : 0.0f;
        }
    }
}

/* The dense tiles' page walk (dev impls 13 and 14), after the page list is built (ends
 * with __syncthreads; the ring initialised): the first page's loads, Q quantised to the
 * dense layout (row G s + h), then per page QK, the two queries' softmax of each thread's
 * rows, P, V^T (zeroed past a member's last visible token) and PV, and the epilogue.
 * G = 8: warp w holds slots 2w and 2w + 1 (membership warp-uniform per row half); G = 4:
 * slots 4w + lane / 16 and 4w + 2 + lane / 16 (per lane, the quad of a row agrees; the
 * both-members path needs all four slots of the warp). */
template <bool X2, int G, class Plan, int SLOTS, int PAGE = kPageSize, bool TS = false>
static __device__ __forceinline__ void dense_walk(Plan &sm, const AttentionParams &p, int tid, int kv_head,
                                                  const int32_t (&query_rows)[SLOTS], const int64_t (&limits)[SLOTS])
{
    static_assert((G == 8 && SLOTS == 8) || (G == 4 && SLOTS == 16), "dense tiles: 8 x 8 or 16 x 4");
    static_assert(!(TS && X2), "dense tiles: per-token scales in FP8 only (FP8X2 runs them on the stacked tile)");
    const int warp = tid / 32, lane = tid % 32;
    // TS: this warp's copy of the current page's K and V scales (2 x 128 floats), in the raw
    // V tile, which FP8 on the pre-pass never uses (its V^T tile is sm.vt; the dense tiles
    // always run on the pre-pass, and the f16 V^T tile that spans v | vt is FP8X2's: no TS).
    static_assert(sizeof(sm.v) >= kThreads / 32 * 2 * kPageSize * sizeof(float), "dense TS: the scale buffers fit sm.v");
    float(&ts_buf)[2][kPageSize] = reinterpret_cast<float(*)[2][kPageSize]>(sm.v)[warp];
    // The bits of warp w's slots in a page's member mask (G = 8: 2w, 2w + 1; G = 4: 4w..4w+3).
    auto warp_selects = [&](int i) {
        return G == 8 ? ((uint32_t)sm.page_members[i] >> (2 * warp)) & 3u : ((uint32_t)sm.page_members[i] >> (4 * warp)) & 0xfu;
    };
    const int num_pages = sm.num_pages;
    const uint64_t keep_kv = createpolicy_evict_last();
    auto vt_tile = [&](int i) { return prevt_tile(p, kv_head, sm.page_vt[i]); };
    auto issue_k = [&](int next) {
        mbarrier_arrive_expect_tx(&sm.k_full, PAGE * kHeadDim); // PAGE = 64: rows 0..63 of the K tile
        tma_load_4d(sm.k, &p.k_map, &sm.k_full, 0, kv_head, 0, sm.page_physical[next], keep_kv);
    };
    // FP8X2 (these kernels have no per-token scales): P in f16 on the f16 V^T tile, which
    // fills the plan's v and vt tiles (32 KiB).
    constexpr bool kF16 = X2;
    auto issue_v = [&](int next) {
        mbarrier_arrive_expect_tx(&sm.v_full, kF16 ? kVtTileBytes : kTileBytes);
        if constexpr (kF16)
            bulk_load(sm.v, vt_tile(next), kVtTileBytes, &sm.v_full, keep_kv);
        else
            bulk_load(sm.vt, vt_tile(next), kTileBytes, &sm.v_full, keep_kv);
    };
    if (tid == 0 && num_pages > 0) {
        prefetch_tensormap(&p.k_map);
        issue_k(0);
        issue_v(0);
    }

    const float k_scale = *p.k_scale, v_scale = *p.v_scale;
    const float log2e = 1.4426950408889634f;
    quantize_q_rows<false, G, true>(smem_u32(sm.q), X2 ? smem_u32(sm.q_lo) : 0u, sm.row_factor, tid, p, kv_head,
                                    query_rows, k_scale * p.softmax_scale * log2e);
    fence_proxy_async_shared_cta();
    __syncthreads();

    // This thread's two slots (rows r0 and r0 + 8).
    const int s0 = G == 8 ? 2 * warp : 4 * warp + lane / 16, s1 = G == 8 ? s0 + 1 : s0 + 2;
    int32_t row0 = -1, row1 = -1;
    int64_t limit0 = -1, limit1 = -1;
    if constexpr (G == 8) {
#pragma unroll
        for (int w = 0; w < kThreads / 32; w++) {
            if (w == warp) {
                row0 = query_rows[2 * w];
                row1 = query_rows[2 * w + 1];
                limit0 = limits[2 * w];
                limit1 = limits[2 * w + 1];
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; k++) {
            if (k == s0) row0 = query_rows[k], limit0 = limits[k];
            if (k == s1) row1 = query_rows[k], limit1 = limits[k];
        }
    }
    const uint32_t q = lane % 4;
    const int r0 = 16 * warp + lane / 4;
    const float f0 = sm.row_factor[r0], f1 = sm.row_factor[r0 + 8];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q);
    const uint64_t desc_k = wgmma_desc_k_major_sw128(sm.k);
    const uint64_t desc_vt = wgmma_desc_k_major_sw128(sm.vt);
    if constexpr (TS)
        if (num_pages > 0 && warp_selects(0) != 0u) ts_load_page<PAGE>(ts_buf, p, kv_head, sm.page_physical[0], lane);

    float acc[64]; // the page's scores, then 256 p
#pragma unroll 1
    for (int i = 0; i < num_pages; i++) {
        const uint32_t parity = (uint32_t)i & 1u;
        const uint32_t members = sm.page_members[i];
        // G = 8: warp-uniform; G = 4: per lane (member and all: warp-uniform)
        const bool mem0 = (members >> s0) & 1u, mem1 = (members >> s1) & 1u;
        const uint32_t warp_bits = (members >> (4 * warp)) & 0xfu;
        const bool member = G == 8 ? mem0 || mem1 : warp_bits != 0u;
        const bool all = G == 8 ? mem0 && mem1 : warp_bits == 0xfu;
        const int vlim = sm.page_vlim[i]; // CTA-uniform

        lean_qk_page<X2>(acc, sm, parity, desc_q, desc_k);
        lean_release(&sm.k_done, i + 1, num_pages, issue_k);

        float alpha0 = 1.0f, alpha1 = 1.0f;
        [[maybe_unused]] float vmax0 = 1.0f, vmax1 = 1.0f;
        if (member) {
            // PAGE = 64: each row's limit clamped to 63 (page_column_limit), columns 64..127 masked.
            const int64_t lim0 = page_column_limit<PAGE>(limit0, sm.page_logical[i]);
            const int64_t lim1 = page_column_limit<PAGE>(limit1, sm.page_logical[i]);
            if constexpr (TS) { // the scores x their K scales, then the softmax as without scales
                cp_async_wait_all();
                __syncwarp();
                ts_scale_scores<PAGE>(acc, q, ts_buf[0]);
            }
            if (all)
                softmax_page_two_queries<true, PAGE>(acc, lim0, lim1, mem0, mem1, q, f0, f1, m0, m1, l0, l1, alpha0,
                                                     alpha1);
            else
                softmax_page_two_queries<false, PAGE>(acc, lim0, lim1, mem0, mem1, q, f0, f1, m0, m1, l0, l1, alpha0,
                                                      alpha1);
            if constexpr (TS) ts_scale_p_two_queries<G>(acc, lim0, lim1, mem0, mem1, q, ts_buf[1], vmax0, vmax1);
        }
        // TS: the next page's scales, once every lane has read this page's.
        if constexpr (TS) {
            if (i + 1 < num_pages && warp_selects(i + 1) != 0u) {
                __syncwarp();
                ts_load_page<PAGE>(ts_buf, p, kv_head, sm.page_physical[i + 1], lane);
            }
        }
        if constexpr (kF16) { // f16 P on the f16 V^T tile (v | vt), then the next page
            uint32_t ph[32];
            p_fragments_f16(acc, ph, member);
            prevt_wait_zeroed<true, Plan, PAGE>(sm, parity, vlim);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float pv[32];
                pv_part_f16(pv, ph, vt16_half_desc(sm.v, h));
                if (all) pv_add_to_o_two_queries<true>(o, pv, h, mem0, mem1, alpha0, alpha1);
                else if (member) pv_add_to_o_two_queries<false>(o, pv, h, mem0, mem1, alpha0, alpha1);
            }
            wgmma_fence_operand(ph);
            lean_release(&sm.v_done, i + 1, num_pages, issue_v);
            continue;
        }
        uint32_t pa[16];
        uint32_t pl[X2 ? 16 : 1];
        p_fragments<X2>(acc, pa, pl);
        if (!member) {
#pragma unroll
            for (int k = 0; k < 16; k++) pa[k] = 0u;
#pragma unroll
            for (int k = 0; k < (X2 ? 16 : 1); k++) pl[k] = 0u;
        }
        prevt_wait_zeroed<false, Plan, PAGE>(sm, parity, vlim);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float pv[32];
            pv_part<X2, 64>(pv, pa, pl, desc_vt + (uint64_t)(h * 64 * kPageSize >> 4));
            if (all) pv_add_to_o_two_queries<true, TS>(o, pv, h, mem0, mem1, alpha0, alpha1, vmax0, vmax1);
            else if (member) pv_add_to_o_two_queries<false, TS>(o, pv, h, mem0, mem1, alpha0, alpha1, vmax0, vmax1);
        }
        wgmma_fence_operand(pa);
        if constexpr (X2) wgmma_fence_operand(pl);
        lean_release(&sm.v_done, i + 1, num_pages, issue_v);
    }
    // The lane re-read here (%laneid, volatile): its derived values (lane / 4, ...) are
    // not held in registers across the page loop.
    int lane_end;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane_end));
    if (row0 >= 0 || row1 >= 0) dense_store_rows<G>(p, o, row0, row1, kv_head, lane_end, m0, m1, l0, l1, v_scale);
}

/* TOPK = 32 or 64 (pw_sparse_prefill at G = 8 on the pre-pass, dev impl 13): the same
 * kernel with a page list of the group's 8 K union pages (build_page_list reads them in
 * passes). First run on the H200 2026-12-02 (twelfth session): bitwise the padded tile's
 * FP8 outputs, A-hot G = 8 K = 32 0.67x its time (bench/NOTES.md). */
constexpr int dense8_list_capacity(int topk) { return topk <= 16 ? kMaxUnion : 8 * topk; }
template <int TOPK> constexpr size_t kSmemBytesDense8K = sizeof(SmemPlanLeanT<dense8_list_capacity(TOPK)>) + 1024;
static_assert(kSmemBytesDense8K<16> == kSmemBytesLean, "dense G = 8, K = 16: the lean plan");
static_assert(kLeanCtasPerSm * (kSmemBytesDense8K<64> + 1024) <= 228 * 1024, "dense G = 8, K = 64: three CTAs per SM no longer fit");

/* CTAs per SM of the dense tiles' per-token-scale (TS) instances: two. At three (168
 * registers; the tiles without scales use 165-168) the K = 16 instances spilled 204-284
 * bytes, 44-72 with only the P scaling's whole-page path and 12-36 without any P scaling
 * (ptxas, 2026-12-04; bench/NOTES.md, 31st session). */
constexpr int kDenseTsCtasPerSm = 2;

template <bool X2, int TOPK = kTopK, int PAGE = kPageSize, bool TS = false>
__global__ void __launch_bounds__(kThreads, TS ? kDenseTsCtasPerSm : kLeanCtasPerSm)
    dense8_attention_kernel(const __grid_constant__ AttentionParams p)
{
    using Plan = SmemPlanLeanT<dense8_list_capacity(TOPK)>;
    extern __shared__ uint8_t smem_raw[];
    Plan &sm = smem_plan<Plan>(smem_raw);
    const int tid = threadIdx.x;

    if constexpr (X2 && TOPK == kTopK && PAGE == kPageSize) // the full call's first launch: this call may run the stacked tile
        if (stacked_call(p)) return;
    DenseWork work;
    if (!dense_work(p, work)) return; // CTA-uniform
    const int kv_head = work.kv_head;

    lean_init_ring(sm);
    // The group's whole union with its 8 slots' member bits (half 0, mask 0xff); ends with
    // __syncthreads.
    build_page_list<kUnion4, Plan, kDenseSlots, TOPK, PAGE>(sm, p, kv_head, work.group, 0, work.request,
                                                            work.query_rows[0], work.limits, work.union_size,
                                                            sm.page_vt, 0xffu);
    dense_walk<X2, kDenseG, Plan, kDenseSlots, PAGE, TS>(sm, p, tid, kv_head, work.query_rows, work.limits);
}

/* ---- Dev impl 14: G = 4 on a dense tile (issue 16; bench/NOTES.md, eighth and ninth
 * sessions). test_gqa_padded compares it bitwise with the padded G = 4 tile (H200,
 * 2026-12-02: equal); pw_sparse_prefill runs it for G = 4 on the V^T pre-pass (FP8X2
 * without per-token scales, FP8 with them too: pw_union_attention_vt).
 *
 * The M64 tile holds 16 queries x 4 heads, row 4 s + h: two consecutive 8-query groups of
 * the union metadata (a pair) walk their merged union once. A group is a pair's leader when
 * its index inside its window (inside its request for identity groups) is even; its partner
 * is the next group of the metadata when that one continues it (same request and window,
 * slot_begin 8 further): slots 8-15. Otherwise (a window's odd last group) slots 8-15 are empty.
 * Block order: one CTA per group index, a non-leader's CTA exiting at once; under the plan's
 * schedule (union preparation's pair lists, sched_dense 2) CTA b runs the b-th leader,
 * largest pair first. Three CTAs per SM.
 *
 * Warp w owns slots 4w..4w+3; a thread's rows r0 = 16w + lane / 4 and r0 + 8 are head
 * (lane / 4) % 4 of slots 4w + lane / 16 and 4w + 2 + lane / 16: membership is per lane
 * (the quad of a row agrees), so the softmax's kBoth path needs all four slots of the warp
 * to be members (softmax_page_two_queries is per lane otherwise: its shuffles stay outside
 * its branches). Everything else is dev impl 13's: the member rows' arithmetic is
 * softmax_page's, so the outputs are the padded tile's bits.
 *
 * TOPK = 32 or 64 (pw_sparse_prefill at G = 4 on the pre-pass, dev impl 14): the same
 * kernel with a pair list of 2 x 8 K entries (SmemPlanDense4Wide); only the page list's
 * construction differs, so the outputs are still the padded tile's bits (H200, 2026-12-02).
 * Three CTAs per SM at K = 32, two at K = 64 (see dense4_ctas_per_sm). */
constexpr int kDense4Slots = 16;
constexpr int kDense4G = 4;
constexpr int kPairUnion = 2 * kMaxUnion; // pages of a merged pair (K = 16: 256)

struct __align__(1024) SmemPlanDense4 {
    uint8_t k[kTileBytes];               // K of the current page [token][d], TMA 128B-swizzled
    uint8_t v[kTileBytes];               // FP8X2: the first half of the f16 V^T tile (v | vt)
    uint8_t vt[kTileBytes];              // V^T of the current page (the pre-pass's tile)
    uint8_t q[kRows * kHeadDim];         // Q (FP8) [row][d], 128B-swizzled
    uint8_t q_lo[kRows * kHeadDim];      // PW_PRECISION_FP8X2: Q's second term
    uint64_t k_full;
    uint64_t v_full;
    uint32_t k_done;
    uint32_t v_done;
    int32_t merge_page[kPairUnion];      // the two groups' lists merged with repeats (scratch)
    uint16_t merge_mask[kPairUnion];
    int32_t page_logical[kPairUnion];    // the pages this CTA walks, ascending
    int32_t page_physical[kPairUnion];
    uint16_t page_members[kPairUnion];   // bit s: slot s selected the page
    uint8_t page_vlim[kPairUnion];
    int32_t page_vt[kPairUnion];
    float row_factor[kRows];
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
};
constexpr size_t kSmemBytesDense4 = sizeof(SmemPlanDense4) + 1024;
static_assert(offsetof(SmemPlanDense4, vt) == offsetof(SmemPlanDense4, v) + kTileBytes, "dense G = 4: the f16 V^T tile fills v and vt");
static_assert(kLeanCtasPerSm * (kSmemBytesDense4 + 1024) <= 228 * 1024, "dense G = 4: three CTAs per SM no longer fit");

/* TOPK = 32 / 64: CAP = 2 x 8 K = 512 / 1024 entries. The K = 16 plan's merge scratch (6
 * bytes an entry) is gone: build_pair_page_list merges into page_physical (pages) and
 * page_vt (member masks, one int32 each), which it reads back only before its compaction's
 * CTA barrier and overwrites after it; staging stays in page_logical / page_members. What
 * remains is 15 bytes an entry beside the 64 KiB of tiles that the walk uses whole (FP8X2:
 * K, the f16 V^T tile in v | vt, q and q_lo): 72 KiB at K = 32 (three CTAs per SM fit),
 * 80 KiB at K = 64 (they would need 3 x 82 KiB of 228; at most ~9.7 bytes an entry fit). */
template <int CAP>
struct __align__(1024) SmemPlanDense4Wide {
    uint8_t k[kTileBytes];               // as in SmemPlanDense4
    uint8_t v[kTileBytes];
    uint8_t vt[kTileBytes];
    uint8_t q[kRows * kHeadDim];
    uint8_t q_lo[kRows * kHeadDim];
    uint64_t k_full;
    uint64_t v_full;
    uint32_t k_done;
    uint32_t v_done;
    int32_t page_logical[CAP];           // staging, then the pages this CTA walks, ascending
    int32_t page_physical[CAP];          // the merged pages with repeats (scratch), then as named
    uint16_t page_members[CAP];          // staging, then bit s: slot s selected the page
    uint8_t page_vlim[CAP];
    int32_t page_vt[CAP];                // the merged member masks (scratch), then as named
    float row_factor[kRows];
    int32_t warp_count[kThreads / 32];
    int32_t num_pages;
};

/* The pair list's entries: two groups' union rows of 8 K pages each. */
constexpr int dense4_list_capacity(int topk) { return 2 * kDenseSlots * topk; }
template <int TOPK> struct Dense4Plan { using type = SmemPlanDense4Wide<dense4_list_capacity(TOPK)>; };
template <> struct Dense4Plan<kTopK> { using type = SmemPlanDense4; };
template <int TOPK> constexpr size_t kSmemBytesDense4K = sizeof(typename Dense4Plan<TOPK>::type) + 1024;
/* K = 64: two CTAs per SM (its plan is 80 KiB, above). Three would need the list at <= 9.7
 * bytes an entry: e.g. page_physical and page_vt looked up by the issuing lane instead of
 * stored (a global load in front of every copy), or FP8 only, the list in the v tile and
 * q_lo that its walk leaves unused. */
constexpr int dense4_ctas_per_sm(int topk) { return topk <= 32 ? kLeanCtasPerSm : 2; }
static_assert(dense4_list_capacity(kTopK) == kPairUnion && kSmemBytesDense4K<kTopK> == kSmemBytesDense4,
              "dense G = 4, K = 16: the plan above");
static_assert(offsetof(SmemPlanDense4Wide<1024>, vt) == offsetof(SmemPlanDense4Wide<1024>, v) + kTileBytes,
              "dense G = 4 wide: the f16 V^T tile fills v and vt");
static_assert(dense4_ctas_per_sm(32) * (kSmemBytesDense4K<32> + 1024) <= 228 * 1024,
              "dense G = 4, K = 32: three CTAs per SM no longer fit");
static_assert(dense4_ctas_per_sm(64) * (kSmemBytesDense4K<64> + 1024) <= 228 * 1024,
              "dense G = 4, K = 64: two CTAs per SM no longer fit");
static_assert(kLeanCtasPerSm * (kSmemBytesDense4K<64> + 1024) > 228 * 1024,
              "dense G = 4, K = 64: three CTAs per SM fit now: set dense4_ctas_per_sm(64) to kLeanCtasPerSm");

/* build_pair_page_list's merge scratch: its own arrays at K = 16; page_physical / page_vt
 * in the wide plans (SmemPlanDense4Wide). */
static __device__ __forceinline__ int32_t *dense4_merge_pages(SmemPlanDense4 &sm) { return sm.merge_page; }
static __device__ __forceinline__ uint16_t *dense4_merge_masks(SmemPlanDense4 &sm) { return sm.merge_mask; }
template <int CAP>
static __device__ __forceinline__ int32_t *dense4_merge_pages(SmemPlanDense4Wide<CAP> &sm) { return sm.page_physical; }
template <int CAP>
static __device__ __forceinline__ int32_t *dense4_merge_masks(SmemPlanDense4Wide<CAP> &sm) { return sm.page_vt; }

/* A dense G = 4 CTA's work: the leader group and its partner (-1: none). */
struct Dense4Work {
    int kv_head, request, size_a, size_b;
    int64_t group_a, group_b;
    int32_t query_rows[kDense4Slots];
    int64_t limits[kDense4Slots];
};

static __device__ __forceinline__ bool dense4_work(const AttentionParams &p, Dense4Work &w)
{
    // Under the plan's schedule the items are the pairs' leaders, largest first (union
    // preparation, sched_dense 2); else one CTA per group, the partners exiting at once.
    const int64_t item = p.sched_count ? scheduled_block(p) : (int64_t)blockIdx.x;
    if (item < 0) return false; // past the scheduled items
    w.kv_head = (int)(item / p.max_groups);
    if (vt_skips_head(p, w.kv_head)) return false;
    w.group_a = item % p.max_groups;
    const int32_t groups = p.num_groups[w.kv_head];
    if (w.group_a >= groups) return false;
    const int64_t base = (int64_t)w.kv_head * p.max_groups;
    const pw_group_desc_t a = p.groups[base + w.group_a];
    const int32_t cu_begin = p.cu_seqlens_q[a.request];
    const int32_t rel = a.slot_begin - cu_begin; // rel % W (or rel) is a multiple of 8: runs of 8 from each window start
    const int32_t index = (p.group_window > 0 ? rel % p.group_window : rel) / kDenseSlots;
    if (index % 2 != 0) return false; // a partner: its leader's CTA runs it
    w.request = a.request;
    w.size_a = a.union_size;
    w.group_b = -1;
    w.size_b = 0;
    int members_b = 0;
    if (w.group_a + 1 < groups) {
        const pw_group_desc_t b = p.groups[base + w.group_a + 1];
        // The next group continues this one inside the same window (W = 24, say, ends a
        // window on an even index: the next group is then the next window's leader).
        const int32_t rel_b = b.slot_begin - cu_begin;
        const bool same_window = p.group_window <= 0 || rel_b / p.group_window == rel / p.group_window;
        if (b.request == a.request && b.slot_begin == a.slot_begin + kDenseSlots && same_window) {
            w.group_b = w.group_a + 1;
            w.size_b = b.union_size;
            members_b = b.num_members;
        }
    }
    const int64_t prefix = p.prefix_lens[w.request], kv_len = p.kv_lens[w.request];
#pragma unroll
    for (int k = 0; k < kDense4Slots; k++) {
        const bool in_a = k < kDenseSlots;
        const int m = in_a ? k : k - kDenseSlots;
        const bool filled = in_a ? m < a.num_members : m < members_b;
        w.query_rows[k] = filled ? p.perm[(int64_t)w.kv_head * p.num_tokens + a.slot_begin + k] : -1;
        // Last visible token: min(c, L - 1) (docs/semantics.md §1).
        const int64_t c = prefix + (w.query_rows[k] - cu_begin);
        w.limits[k] = w.query_rows[k] >= 0 ? (c < kv_len - 1 ? c : kv_len - 1) : -1;
    }
    return true;
}

/* The pair's page list: both groups' union rows (ascending) merged into one ascending list
 * with 16-bit member masks (group a's bits 0-7, b's 8-15), pages outside the cache dropped
 * and counted (once per member query, as build_page_list), each page's vlim and pre-pass
 * tile. TOPK: the device's K (rows of 8 K entries, a list of 2 x 8 K). Ends with
 * __syncthreads. */
template <int TOPK, class Plan, int PAGE = kPageSize>
static __device__ void build_pair_page_list(Plan &sm, const AttentionParams &p, const Dense4Work &w)
{
    constexpr int kRowEntries = kDenseSlots * TOPK, kEntries = 2 * kRowEntries;
    // Consecutive entries per thread in the dedupe step (K = 16: 2).
    constexpr int kPerThread = kEntries / kThreads;
    static_assert(kPerThread * kThreads == kEntries && sizeof(sm.page_logical) == kEntries * sizeof(int32_t),
                  "dense G = 4: the plan's list holds the pair's 2 x 8 K entries, a whole number per thread");
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // union_size <= union_capacity = 8 K for well-formed metadata; clamped so that corrupt
    // sizes cannot write past the 2 x 8 K entries.
    const int na = min(w.size_a, kRowEntries), nb = min(w.size_b, kRowEntries), n = na + nb;
    int32_t *const merge_page = dense4_merge_pages(sm);
    auto *const merge_mask = dense4_merge_masks(sm); // K = 16: uint16_t; wide plans: int32_t
    const int64_t row_a = ((int64_t)w.kv_head * p.max_groups + w.group_a) * p.union_capacity;
    const int64_t row_b = ((int64_t)w.kv_head * p.max_groups + w.group_b) * p.union_capacity;
    // Stage the two rows: a at [0, na), b at [na, n) (both ascending, distinct inside a row).
    for (int e = tid; e < n; e += kThreads) {
        const bool in_a = e < na;
        const int64_t at = in_a ? row_a + e : row_b + (e - na);
        sm.page_logical[e] = p.union_pages[at];
        sm.page_members[e] = (uint16_t)((uint32_t)p.member_masks[at] << (in_a ? 0 : kDenseSlots));
    }
    __syncthreads();
    // Merge by rank: an entry of a goes before the entries of b with a larger page, an entry
    // of b after those of a with a page <= its own, so a page in both lists lands as a's
    // copy followed by b's.
    for (int e = tid; e < n; e += kThreads) {
        const bool in_a = e < na;
        const int32_t page = sm.page_logical[e];
        const int32_t *other = sm.page_logical + (in_a ? na : 0);
        int lo = 0, hi = in_a ? nb : na; // first index of `other` past page (a: >= page, b: > page)
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (in_a ? other[mid] < page : other[mid] <= page) lo = mid + 1; else hi = mid;
        }
        const int at = (in_a ? e : e - na) + lo;
        merge_page[at] = page;
        merge_mask[at] = sm.page_members[e];
    }
    __syncthreads();
    // One entry per distinct page (a repeat joins its bits to the first copy), then the
    // checks of build_page_list, then an order-preserving compaction of the kept pages.
    int32_t kept_logical[kPerThread], kept_physical[kPerThread], kept_vt[kPerThread];
    uint32_t kept_members[kPerThread];
    bool keep[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
        const int e = kPerThread * tid + j; // consecutive entries per thread: order kept below
        int32_t logical = -1, physical = -1, vt = 0;
        uint32_t members = 0;
        if (e < n && (e == 0 || merge_page[e - 1] != merge_page[e])) {
            logical = merge_page[e];
            members = merge_mask[e];
            if (e + 1 < n && merge_page[e + 1] == logical) members |= merge_mask[e + 1];
        }
        if (logical >= 0) {
            physical = (int64_t)logical < p.max_pages ? p.page_table[(int64_t)w.request * p.page_table_stride + logical] : -1;
            if (physical < 0 || (int64_t)physical >= p.num_cache_pages) {
                if (p.bad_page_count && members) atomicAdd(p.bad_page_count, (uint32_t)__popc(members));
                logical = -1;
            }
        }
        if (logical >= 0) {
            const int64_t entry = vt_entry(w.kv_head, w.request, logical, p.num_requests, p.max_pages);
            if (p.vt_touched && !p.vt_touched[entry]) logical = -1; // not marked: broken device data only (vt_prepare.cu)
            else vt = p.vt_slots[entry];
        }
        keep[j] = logical >= 0;
        kept_logical[j] = logical;
        kept_physical[j] = physical;
        kept_vt[j] = vt;
        kept_members[j] = members;
    }
    int mine = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; j++) mine += (int)keep[j];
    // Exclusive prefix of `mine` over the CTA in thread order (= entry order).
    int incl = mine;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
    }
    if (lane == 31) sm.warp_count[warp] = incl;
    __syncthreads();
    int offset = incl - mine;
    for (int v = 0; v < warp; v++) offset += sm.warp_count[v];
    // The staging arrays are dead now (merge_* hold the merged list), and so is merge_*
    // (every read of it was before the barrier above; the wide plans' merge_* is
    // page_physical / page_vt): the kept pages go to page_*.
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
        if (!keep[j]) continue;
        sm.page_logical[offset] = kept_logical[j];
        sm.page_physical[offset] = kept_physical[j];
        sm.page_members[offset] = (uint16_t)kept_members[j];
        sm.page_vlim[offset] = page_v_limit<kDense4Slots, PAGE>(kept_members[j], w.limits, kept_logical[j]);
        sm.page_vt[offset] = kept_vt[j];
        offset++;
    }
    if (tid == 0) {
        int total = 0;
        for (int v = 0; v < kThreads / 32; v++) total += sm.warp_count[v];
        sm.num_pages = total;
    }
    __syncthreads();
}

template <bool X2, int TOPK = kTopK, int PAGE = kPageSize, bool TS = false>
__global__ void __launch_bounds__(kThreads, TS ? kDenseTsCtasPerSm : dense4_ctas_per_sm(TOPK))
    dense4_attention_kernel(const __grid_constant__ AttentionParams p)
{
    using Plan = typename Dense4Plan<TOPK>::type;
    extern __shared__ uint8_t smem_raw[];
    Plan &sm = smem_plan<Plan>(smem_raw);
    const int tid = threadIdx.x;

    if constexpr (X2 && TOPK == kTopK && PAGE == kPageSize) // the full call's first launch: this call may run the stacked tile
        if (stacked_call(p)) return;
    Dense4Work work;
    if (!dense4_work(p, work)) return; // CTA-uniform
    const int kv_head = work.kv_head;

    lean_init_ring(sm);
    build_pair_page_list<TOPK, Plan, PAGE>(sm, p, work); // ends with __syncthreads
    dense_walk<X2, kDense4G, Plan, kDense4Slots, PAGE, TS>(sm, p, tid, kv_head, work.query_rows, work.limits);
}

/* ---- Host: one launch of a dense tile for the call's K, pages of PAGE tokens ---- */

/* The dense kernel for G (8: dev impl 13, 4: dev impl 14), precision, K and page size, and
 * its dynamic shared memory. */
template <int G, bool X2, int TOPK, int PAGE, bool TS = false>
constexpr void (*dense_kernel())(AttentionParams)
{
    if constexpr (G == 8) return dense8_attention_kernel<X2, TOPK, PAGE, TS>;
    else return dense4_attention_kernel<X2, TOPK, PAGE, TS>;
}
template <int G, int TOPK> constexpr size_t dense_smem_bytes() { return G == 8 ? kSmemBytesDense8K<TOPK> : kSmemBytesDense4K<TOPK>; }

/* Dev impl 13 (G = 8): one CTA per (group of 8, KV head), three per SM; dev impl 14 (G = 4):
 * one CTA per (group of 8, KV head), the leaders of a pair running, three per SM (two at
 * K = 64). `grid` counts two CTAs per (group, KV head) as for the other union kernels.
 * K = 32 / 64: page lists of 8 K entries (G = 8) or pair lists of 2 x 8 K (G = 4). */
template <int G, bool X2, int PAGE>
pw_status_t launch_dense_page(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    static std::atomic<uint64_t> configured[6];
    const int k = params.topk == 64 ? 2 : params.topk == 32 ? 1 : 0;
    const size_t smem[3] = {dense_smem_bytes<G, kTopK>(), dense_smem_bytes<G, 32>(), dense_smem_bytes<G, 64>()};
    if constexpr (!X2) { // per-token scales (TS): FP8 only (union_attention refuses FP8X2's)
        if (params.ts_k || params.ts_v) {
            void (*const ts_kernels[3])(AttentionParams) = {dense_kernel<G, false, kTopK, PAGE, true>(),
                                                            dense_kernel<G, false, 32, PAGE, true>(),
                                                            dense_kernel<G, false, 64, PAGE, true>()};
            return launch_one_cta_kind(ts_kernels[k], smem[k], configured[3 + k],
                                       G == 8 ? "dense G = 8, per-token scales" : "dense G = 4, per-token scales",
                                       params, grid / 2, stream);
        }
    }
    void (*const kernels[3])(AttentionParams) = {dense_kernel<G, X2, kTopK, PAGE>(), dense_kernel<G, X2, 32, PAGE>(),
                                                 dense_kernel<G, X2, 64, PAGE>()};
    return launch_one_cta_kind(kernels[k], smem[k], configured[k], G == 8 ? "dense G = 8" : "dense G = 4", params,
                               grid / 2, stream);
}

} // namespace pw

#endif
