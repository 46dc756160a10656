/* attention_common.cuh — the per-row arithmetic and tile helpers every sparse attention
 * kernel shares (the Union4 / per-query / cluster Union8 kernels of attention.cu, and any
 * kernel written next to them), so that every kernel computes
 * each row with exactly the same instructions in the same order: outputs are bitwise equal
 * across kernels and groupings (docs/semantics.md, "Arithmetic").
 *
 * Layouts (the file comment of attention.cu has the derivation): a warp of a 64-row
 * consumer warpgroup owns accumulator rows 16w..16w+15 = one query slot (rows are
 * slot*16 + head); the PV reduction axis ("position") is the permutation
 *   token t = 16a + 8b + 2q + e  <->  position 16a + 4q + 2b + e   (a<8, b<2, q<4, e<2)
 * so that P leaves the QK accumulator as the PV wgmma's A fragments and V^T is written
 * with 4-byte stores. */
#ifndef PW_ATTENTION_COMMON_CUH
#define PW_ATTENTION_COMMON_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "attention_config.cuh"
#include "ptx.cuh"

namespace pw {

/* Byte offset of 16-byte chunk `chunk` of row `row` in a 128B-swizzled tile of 128-byte rows. */
static __device__ __forceinline__ uint32_t sw128(uint32_t row, uint32_t chunk)
{
    return row * 128u + ((chunk ^ (row & 7u)) << 4);
}

/* Last token (0..PAGE - 1) of page `logical` that one of the member slots may see: the largest
 * last visible token min(c, L - 1) of the slots in `members` (limits[w], bit w), relative to
 * the page. Every token past it lies outside the A_i of every member row, so its V bytes may
 * hold anything (NaN codes in unwritten or recycled slots, docs/semantics.md); the V
 * transpose stores zeros there instead (load_v_chunk), since P = 0 alone would still let
 * 0 x NaN = NaN into the PV sums of every row. Tokens up to it are inside some member's
 * A_i, hence caller data, and stay as they are. A member page always holds one visible
 * token of each member (S_i), so the value is >= 0 for well-formed metadata. PAGE = 64 (the
 * lean kernels' page-64 forms): at most 63, so positions 64..127 of the 128-column step,
 * which hold no token of the page, are zeroed too. */
template <int SLOTS, int PAGE = kPageSize>
static __device__ __forceinline__ uint8_t page_v_limit(uint32_t members, const int64_t (&limits)[SLOTS],
                                                       int32_t logical)
{
    int64_t last = -1;
#pragma unroll
    for (int w = 0; w < SLOTS; w++)
        if ((members >> w) & 1u) last = limits[w] > last ? limits[w] : last;
    const int64_t v = last - (int64_t)logical * PAGE;
    return (uint8_t)(v < 0 ? 0 : v > PAGE - 1 ? PAGE - 1 : v);
}

/* Quantises one warpgroup's 64 Q rows to FP8 into the tile at q_addr (per-row scale,
 * docs/semantics.md §4.5) and stores the per-row score factor in row_factor[64]. tid: the thread's index in
 * its warpgroup (0..127). query_rows[w]: original row of slot w, or -1 for an empty slot
 * (its Q rows are zero). q_lo_addr: 0, or (PW_PRECISION_FP8X2) the tile that receives Q's
 * second term e4m3(q / q_scale - q8) (the difference is exact in FP32).
 * kStacked (dev impl 12, attention_stacked.cuh): tiles of 64 rows, q_addr for slots 0-1
 * and q_lo_addr for slots 2-3 (0: not written); (slot s, head h) goes to warp
 * w = 2 (s % 2) + h / 8 of its tile, row 16 w + h % 8 for q8 and 16 w + 8 + h % 8 for its
 * second term; at G = 8 one tile holds the 4 slots (q_addr): (s, h) in warp w = s, rows
 * 16 w + h and 16 w + 8 + h; at G = 4 one tile holds 8 slots: (s, h) in warp w = s / 2, rows
 * 16 w + 4 (s % 2) + h and that + 8. Same codes as the other layouts.
 * In two parts: load_q_rows (the global loads) and quantize_q_loaded (the rest);
 * quantize_q_rows, after them, runs both. */
/* The original row (or -1) of the slot that load_q_rows' pass `pass` reads for the thread's
 * row_in_pass: slot pass * 8 / 16 (the Union4 tile, also the stacked G = 16 layout); dense:
 * one slot per pass (G = 8) or two (G = 4); stacked G = 8: rows 8 s + h = head h of slot s,
 * passes 0-3 (4-7 read nothing). */
template <bool kStacked, int G, bool kDense, int SLOTS>
static __device__ __forceinline__ int32_t q_row_slot(const int32_t (&query_rows)[SLOTS], int pass, int row_in_pass)
{
    if constexpr (kDense && G == 4) return row_in_pass >= 4 ? query_rows[2 * pass + 1] : query_rows[2 * pass];
    else if constexpr (kDense) return query_rows[pass];
    else if constexpr (kStacked && G == 8) return pass < 4 ? query_rows[pass] : -1;
    else if constexpr (kStacked && G == 4) // rows 4 s + h: slots 2 pass, 2 pass + 1 (passes 4-7 read nothing)
        return pass < 4 ? (row_in_pass >= 4 ? query_rows[2 * pass + 1] : query_rows[2 * pass]) : -1;
    else return query_rows[pass * 8 / kHeadsPerKv];
}

template <bool kStacked = false, int G = kHeadsPerKv, bool kDense = false, int SLOTS = kSlotsPerCta>
static __device__ __forceinline__ void load_q_rows(uint4 (&raw)[kRows / 8], int tid, const AttentionParams &p,
                                                   int kv_head, const int32_t (&query_rows)[SLOTS])
{
    constexpr int kPasses = kRows / 8; // 8 rows per pass, 16 threads per row, 8 bf16 each
    static_assert(kHeadsPerKv % 8 == 0, "a pass of 8 rows stays inside one slot");
    // G < 16 Q heads per KV head (the padded tile): a slot's rows 16s + h hold head h < G;
    // the rows h >= G stay zero (never stored: store_rows<G>).
    static_assert(G == 16 || G == 8 || G == 4, "G: 16, 8 or 4");
    static_assert(!kStacked || G == 16 || G == 8 || G == 4, "the stacked layout has G = 16, 8 or 4");
    // kDense (dev impls 13 and 14, attention_dense.cuh): G = 8 or 4 on the dense tile, 64 / G
    // slots, row G s + h = head h of slot s: a pass is one slot (G = 8) or two (G = 4).
    static_assert(!kDense || (((G == 8 && SLOTS == 8) || (G == 4 && SLOTS == 16)) && !kStacked),
                  "the dense layout: G = 8 with 8 slots, or G = 4 with 16");
    static_assert(kDense || SLOTS == (kStacked && G == 4 ? 8 : kSlotsPerCta),
                  "4 slots per tile unless dense (or stacked at G = 4: 8)");
    const int sub = tid % 16;
    const int row_in_pass = tid / 16;
    // Every pass's load first: one load in flight at a time left the prologue waiting for
    // L2 / HBM kPasses times in a row (ncu, impl 2: ~4% of the stall samples).
#pragma unroll
    for (int pass = 0; pass < kPasses; pass++) {
        const int row = pass * 8 + row_in_pass;
        // = row / 16 (dense: row / G; at G = 4 a pass's rows are slots 2 pass and 2 pass + 1,
        // picked by a select so that query_rows keeps constant indices: registers)
        const int32_t n = q_row_slot<kStacked, G, kDense>(query_rows, pass, row_in_pass);
        raw[pass] = make_uint4(0, 0, 0, 0);
        if (n >= 0 && (kDense || kStacked || G == kHeadsPerKv || row % kHeadsPerKv < G)) {
            const uint16_t *src = p.q + (int64_t)n * p.q_stride +
                                  ((int64_t)kv_head * G + row % (kDense || kStacked ? G : kHeadsPerKv)) * kHeadDim +
                                  sub * 8;
            raw[pass] = __ldg(reinterpret_cast<const uint4 *>(src));
        }
    }
}

/* quantize_q_rows after its loads (load_q_rows): the stacked tile issues them before its
 * page list is built, so that Q's HBM latency overlaps the metadata loads. */
template <bool kStacked = false, int G = kHeadsPerKv, bool kDense = false, int SLOTS = kSlotsPerCta,
          bool kStackedLoZero = false>
static __device__ __forceinline__ void quantize_q_loaded(const uint4 (&raw)[kRows / 8], uint32_t q_addr,
                                                         uint32_t q_lo_addr, float *row_factor, int tid,
                                                         const int32_t (&query_rows)[SLOTS], float score_scale)
{
    constexpr int kPasses = kRows / 8;
    const int sub = tid % 16;
    const int row_in_pass = tid / 16;
#pragma unroll
    for (int pass = 0; pass < kPasses; pass++) {
        const int row = pass * 8 + row_in_pass;
        const int32_t n = q_row_slot<kStacked, G, kDense>(query_rows, pass, row_in_pass);
        float v[8];
        const uint32_t w[4] = {raw[pass].x, raw[pass].y, raw[pass].z, raw[pass].w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = __uint_as_float(w[k] << 16);
            v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float q_scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        float x[8];
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = __fdiv_rn(v[k], q_scale);
        uint32_t packed[2], packed_lo[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            uint16_t codes[2];
#pragma unroll
            for (int h = 0; h < 2; h++) codes[h] = cvt_e4m3x2_rn_satfinite(x[4 * k + 2 * h], x[4 * k + 2 * h + 1]);
            packed[k] = (uint32_t)codes[0] | ((uint32_t)codes[1] << 16);
            if (kStacked || q_lo_addr) {
                uint16_t lo_codes[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float f0, f1;
                    e4m3x2_to_float2(codes[h], f0, f1);
                    lo_codes[h] = cvt_e4m3x2_rn_satfinite(x[4 * k + 2 * h] - f0, x[4 * k + 2 * h + 1] - f1);
                }
                packed_lo[k] = (uint32_t)lo_codes[0] | ((uint32_t)lo_codes[1] << 16);
            }
        }
        if constexpr (kStacked) {
            const int slot = row / G, head = row % G;
            // G = 16: two tiles of slots 0-1 / 2-3; G = 8: one tile of slots 0-3, G = 4: one of
            // slots 0-7 (passes 4-7 unused)
            const uint32_t tile =
                G == 16 ? (slot >= 2 ? q_lo_addr : q_addr) : (slot < (G == 8 ? 4 : 8) ? q_addr : 0u);
            const uint32_t hi_row = G == 16  ? 16u * (2u * (slot % 2) + head / 8) + head % 8
                                    : G == 8 ? 16u * slot + head
                                             : 16u * (slot / 2) + 4u * (slot % 2) + head;
            if (tile) { // dev impl 12 passes one tile (q_lo_addr = 0): slots 0-1 only
                st_shared_v2_u32(tile + sw128(hi_row, sub / 2) + (sub % 2) * 8, packed[0], packed[1]);
                // kStackedLoZero (FP8 on the stacked tile): the second term's row 0
                st_shared_v2_u32(tile + sw128(hi_row + 8, sub / 2) + (sub % 2) * 8, kStackedLoZero ? 0u : packed_lo[0],
                                 kStackedLoZero ? 0u : packed_lo[1]);
            }
        } else {
            const uint32_t offset = sw128(row, sub / 2) + (sub % 2) * 8;
            st_shared_v2_u32(q_addr + offset, packed[0], packed[1]);
            if (q_lo_addr) st_shared_v2_u32(q_lo_addr + offset, packed_lo[0], packed_lo[1]);
        }
        if (sub == 0) row_factor[row] = n >= 0 ? q_scale * score_scale : 0.0f;
    }
}

template <bool kStacked = false, int G = kHeadsPerKv, bool kDense = false, int SLOTS = kSlotsPerCta>
static __device__ void quantize_q_rows(uint32_t q_addr, uint32_t q_lo_addr, float *row_factor, int tid,
                                       const AttentionParams &p, int kv_head,
                                       const int32_t (&query_rows)[SLOTS], float score_scale)
{
    uint4 raw[kRows / 8];
    load_q_rows<kStacked, G, kDense, SLOTS>(raw, tid, p, kv_head, query_rows);
    quantize_q_loaded<kStacked, G, kDense, SLOTS>(raw, q_addr, q_lo_addr, row_factor, tid, query_rows, score_scale);
}

/* V tile [token][d] (TMA layout) -> sm.vt [d][position] with the position permutation of
 * the file comment, half cc (0, 1) of this warp's 32 d: d = 16 (2 warp + cc) .. +15.
 * Consumer threads only. */
/* One warp's view of V^T chunk c (head dims d = 16c .. 16c+15, c = 0..7): lane (a, q) loads
 * tokens t0, t0+1, t0+8, t0+9 (t0 = 16a + 2q) of those 16 d and stores 16 words of V^T. */
struct VChunk {
    uint4 r[4];
};

/* vlim: the page's page_v_limit (CTA-uniform). On a page that crosses a boundary (a member's
 * causal position or the KV length: vlim < 127) the tokens past vlim load as zeros, so that
 * whatever bytes the cache holds there never reach a PV sum; every other page pays one
 * uniform compare. */
static __device__ __forceinline__ VChunk load_v_chunk(uint32_t v, uint32_t chunk, int vlim)
{
    const int lane = threadIdx.x % 32;
    const uint32_t t0 = 16 * (lane / 4) + 2 * (lane % 4);
    VChunk x;
    x.r[0] = ld_shared_v4_u32(v + sw128(t0, chunk));
    x.r[1] = ld_shared_v4_u32(v + sw128(t0 + 1, chunk));
    x.r[2] = ld_shared_v4_u32(v + sw128(t0 + 8, chunk));
    x.r[3] = ld_shared_v4_u32(v + sw128(t0 + 9, chunk));
    if (vlim < kPageSize - 1) {
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        const int t = (int)t0;
        if (t > vlim) x.r[0] = zero;
        if (t + 1 > vlim) x.r[1] = zero;
        if (t + 8 > vlim) x.r[2] = zero;
        if (t + 9 > vlim) x.r[3] = zero;
    }
    return x;
}

/* kLowRegs: the swizzle is applied as a XOR on a chunk-dependent address, so that the
 * compiler cannot precompute the lane's 8 swizzled column offsets (they held ~8 registers
 * through the transpose, the lean kernel's register peak: attention_lean.cuh). Same
 * addresses, same bytes. */
template <bool kLowRegs = false>
static __device__ __forceinline__ void store_vt_chunk(uint32_t vt, uint32_t chunk, const VChunk &x)
{
    const int lane = threadIdx.x % 32;
    const uint32_t a = lane / 4, q = lane % 4;
    const uint32_t w0[4] = {x.r[0].x, x.r[0].y, x.r[0].z, x.r[0].w}, w1[4] = {x.r[1].x, x.r[1].y, x.r[1].z, x.r[1].w};
    const uint32_t w2[4] = {x.r[2].x, x.r[2].y, x.r[2].z, x.r[2].w}, w3[4] = {x.r[3].x, x.r[3].y, x.r[3].z, x.r[3].w};
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const uint32_t x0 = __byte_perm(w0[u], w1[u], 0x5140), x1 = __byte_perm(w0[u], w1[u], 0x7362);
        const uint32_t y0 = __byte_perm(w2[u], w3[u], 0x5140), y1 = __byte_perm(w2[u], w3[u], 0x7362);
        const uint32_t out[4] = {__byte_perm(x0, y0, 0x5410), __byte_perm(x0, y0, 0x7632),
                                 __byte_perm(x1, y1, 0x5410), __byte_perm(x1, y1, 0x7632)};
        if constexpr (kLowRegs) {
            // sw128(d, a) + 4q = 128 d + (16 a ^ 16 (d & 7)) + 4q with d & 7 = (4u + dd) & 7.
            // vt is 1024-aligned, so bits 4-6 of row_base hold exactly 16 a and the XOR
            // touches nothing else: one LOP3 per store on a chunk-dependent value.
            const uint32_t row_base = vt + 128u * (16u * chunk + 4u * u) + 4u * q + (a << 4);
#pragma unroll
            for (int dd = 0; dd < 4; dd++)
                st_shared_u32((row_base ^ (uint32_t)(((4 * u + dd) & 7) << 4)) + 128u * dd, out[dd]);
        } else {
#pragma unroll
            for (int dd = 0; dd < 4; dd++) {
                const uint32_t d = 16 * chunk + 4 * u + dd;
                st_shared_u32(vt + sw128(d, a) + 4 * q, out[dd]);
            }
        }
    }
}

/* One warp: chunk `chunk` of V^T (vlim: as load_v_chunk). */
template <bool kLowRegs = false>
static __device__ __forceinline__ void transpose_v_chunk(uint32_t vt, uint32_t v, uint32_t chunk, int vlim)
{
    store_vt_chunk<kLowRegs>(vt, chunk, load_v_chunk(v, chunk, vlim));
}

/* Half cc (0, 1) of this warp's d range: chunk 2w + cc. */
static __device__ __forceinline__ void transpose_v_half(uint32_t vt, uint32_t v, int cc, int vlim)
{
    transpose_v_chunk(vt, v, 2 * (threadIdx.x / 32) + cc, vlim);
}

/* The whole V tile (both halves of every warp's d range). */
static __device__ __forceinline__ void transpose_v(uint32_t vt, uint32_t v, int vlim)
{
#pragma unroll
    for (int cc = 0; cc < 2; cc++) transpose_v_half(vt, v, cc, vlim);
}

/* The 16 bytes of shared memory at addr keep the bits set in keep, the others become 0
 * (any: some bit of keep is set; without, nothing is loaded). */
static __device__ __forceinline__ void keep_bytes_v4(uint32_t addr, const uint32_t (&keep)[4], bool any)
{
    uint4 x = any ? ld_shared_v4_u32(addr) : make_uint4(0u, 0u, 0u, 0u);
    x.x &= keep[0];
    x.y &= keep[1];
    x.z &= keep[2];
    x.w &= keep[3];
    st_shared_v4_u32(addr, x);
}

/* Zeroes, in a V^T tile [d][position] (the layout store_vt_chunk writes), the positions of
 * the tokens past vlim (0..126): what load_v_chunk does during an in-kernel transpose, for
 * a V^T that arrived ready (the lean kernel with the pre-pass). 128 threads, thread t owns
 * row d = t. Position 16a + 4q + 2b + e holds token 16a + 8b + 2q + e. */
static __device__ __forceinline__ void zero_vt_after(uint32_t vt, int vlim)
{
    const uint32_t d = threadIdx.x % 128;
#pragma unroll 1
    for (int a = vlim / 16; a < kPageSize / 16; a++) {
        const int first = 16 * a;
        const uint32_t addr = vt + sw128(d, (uint32_t)a);
        uint32_t keep[4] = {0u, 0u, 0u, 0u};
        if (first <= vlim) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int token = first + 8 * ((j >> 1) & 1) + 2 * (j >> 2) + (j & 1);
                if (token <= vlim) keep[j / 4] |= 0xffu << (8 * (j % 4));
            }
        }
        keep_bytes_v4(addr, keep, first <= vlim);
    }
}

/* The two halves of a page's softmax that softmax_page and the other tiles' softmaxes share, for this
 * thread's rows r0 and r0 + 8 (quad shuffles: warp-collective).
 * softmax_rows_max: mx0 / mx1 the thread's partial row maxima, g0 / g1 the factors that take
 * them to log2 units (applied after the quad's maximum: exact, the max commutes with a
 * positive factor); updates the running max m and returns alpha = 2^(m_old - m_new)
 * (m = -inf on the first page: alpha = 0).
 * softmax_rows_sum: s0 / s1 the thread's partial sums of 256 p; l = l alpha + the quad's sum
 * (l is kept as 256 * sum p). */
static __device__ __forceinline__ void softmax_rows_max(float mx0, float mx1, float g0, float g1, float &m0, float &m1,
                                                        float &alpha0, float &alpha1)
{
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0 * g0), mn1 = fmaxf(m1, mx1 * g1);
    alpha0 = ex2_approx(m0 - mn0);
    alpha1 = ex2_approx(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
}

static __device__ __forceinline__ void softmax_rows_sum(float s0, float s1, float alpha0, float alpha1, float &l0,
                                                        float &l1)
{
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    l0 = fmaf(l0, alpha0, s0);
    l1 = fmaf(l1, alpha1, s1);
}

/* This thread's partial maxima of its rows r0 (mx0) and r0 + 8 (mx1) over the page's
 * scores in acc, as a tree (instead of a chain of 32 dependent FMNMX per row; the max is
 * exact, so the order changes nothing): kMaxWidth independent partial maxima per row (16:
 * a 5-level tree; fewer hold fewer registers at once, for kernels short of them). */
template <int kMaxWidth, int NCOLS = kPageSize>
static __device__ __forceinline__ void row_max_tree(const float (&acc)[64], float &mx0, float &mx1)
{
    static_assert(kMaxWidth >= 2 && kMaxWidth <= 16 && (kMaxWidth & (kMaxWidth - 1)) == 0, "tree width");
    static_assert(NCOLS == kPageSize || NCOLS == 64, "columns 0..127 or 0..63");
    static_assert(kMaxWidth <= NCOLS / 8, "every partial maximum takes at least one pair");
    float t0[kMaxWidth], t1[kMaxWidth];
#pragma unroll
    for (int j = 0; j < NCOLS / 8; j++) { // acc[4j..4j+3]: columns 8j + 2q, +1 (NCOLS = 64: k < 32)
        const float a0 = fmaxf(acc[4 * j], acc[4 * j + 1]), a1 = fmaxf(acc[4 * j + 2], acc[4 * j + 3]);
        if (j < kMaxWidth) {
            t0[j] = a0;
            t1[j] = a1;
        } else {
            t0[j % kMaxWidth] = fmaxf(t0[j % kMaxWidth], a0);
            t1[j % kMaxWidth] = fmaxf(t1[j % kMaxWidth], a1);
        }
    }
    constexpr int kLevels = kMaxWidth == 16 ? 4 : kMaxWidth == 8 ? 3 : kMaxWidth == 4 ? 2 : 1;
#pragma unroll
    for (int level = 0; level < kLevels; level++) { // a counted loop: fully unrolled, constant indices
        const int w = kMaxWidth >> (level + 1);
#pragma unroll
        for (int j = 0; j < kMaxWidth / 2; j++)
            if (j < w) t0[j] = fmaxf(t0[j], t0[j + w]), t1[j] = fmaxf(t1[j], t1[j + w]);
    }
    mx0 = t0[0];
    mx1 = t1[0];
}

/* The softmax of one page for this thread's two accumulator rows r0 and r0 + 8 (docs/semantics.md §4,
 * the arithmetic of the file comment). acc: the page's QK scores in, 256 p out. lim: last
 * visible column of the query on this page (columns past it are masked). f0 / f1: the rows'
 * score factors. Updates the running max m (log2 units) and l (kept as 256 * sum p), and
 * returns the rescale factors alpha = 2^(m_old - m_new) of O. Warp-collective (quad
 * shuffles); only for a warp whose query selected the page. */
static __device__ __forceinline__ float2 lds_float2_here(const float *at);                   // (below)
static __device__ __forceinline__ float ts_v_normaliser(const float *vs, float &pre, float &inv); // (below)

/* kFoldV (per-token scales, the lean kernels' TS form; vs the warp's V scales, masked past
 * lim: ts_mask_v): P x (vs_t / vmax) in the same pass, acc = 256 p x ((vs_t x pre) x inv)
 * (ts_v_normaliser's vmax, returned in *vmax, and factors; l sums the unscaled p), vs read by
 * volatile shared loads (lds_float2_here) where used: the bits of a separate pass over acc
 * after the softmax (2026-12-04's ts_scale_p) without it; that pass, and the normaliser
 * taken before the softmax, held the registers that the three-CTA instances do not have
 * (12-108 B of spills). */
template <int kMaxWidth = 16, int NCOLS = kPageSize, bool kFoldV = false>
static __device__ __forceinline__ void softmax_page(float (&acc)[64], int64_t lim, uint32_t q, float f0,
                                                    float f1, float &m0, float &m1, float &l0, float &l1,
                                                    float &alpha0, float &alpha1, const float *vs = nullptr,
                                                    float *vmax = nullptr)
{
    // NCOLS = 64 (pages of 64 tokens: lim <= 63): columns 64..127, acc[32..63], hold no
    // token and are masked by position, at compile time: p = 0 there without a compare, a
    // max or an exponential (the bits of masking them to -inf: 2^-inf = +0 adds nothing to
    // the sums, and -inf changes no maximum).
    constexpr int kK = NCOLS / 2; // acc elements of columns 0..NCOLS-1
    // Scores x = acc * f (log2 units). With f > 0 the row max is taken on acc and the scale
    // is folded into one FFMA per element together with the max and the x256 of P:
    // p256 = 2^(acc*f - m + 8) = 256 * p. A non-positive f (k_scale <= 0, never in
    // practice) takes the plain path: scale first, before the mask below (a masked -inf
    // times f would be +inf for f < 0, NaN for f = 0), then the same code with f = 1.
    float g0 = f0, g1 = f1;
    if (!(f0 > 0.0f && f1 > 0.0f)) {
#pragma unroll
        for (int k = 0; k < kK; k++) acc[k] *= (k % 4) < 2 ? f0 : f1;
        g0 = g1 = 1.0f;
    }
    // Only the query's own (partial) page and a page past the KV length mask tokens: a
    // warp-uniform branch keeps the compares off every other page.
    if (lim < NCOLS - 1) {
#pragma unroll
        for (int k = 0; k < kK; k++) {
            const int col = 8 * (k / 4) + 2 * q + (k % 2);
            acc[k] = col <= lim ? acc[k] : -INFINITY;
        }
    }
    float mx0, mx1;
    row_max_tree<kMaxWidth, NCOLS>(acc, mx0, mx1);
    // A member page always holds a visible token, so mx is finite.
    softmax_rows_max(mx0, mx1, g0, g1, m0, m1, alpha0, alpha1);
    const float c0 = 8.0f - m0, c1 = 8.0f - m1;
    float s0 = 0.0f, s1 = 0.0f;
    [[maybe_unused]] float rx = 1.0f, ry = 1.0f, pre = 1.0f, inv = 1.0f;
    if constexpr (kFoldV) *vmax = ts_v_normaliser(vs, pre, inv);
#pragma unroll
    for (int k = 0; k < kK; k++) {
        const bool first_row = (k % 4) < 2;
        if constexpr (kFoldV) {
            if (k % 4 == 0) { // columns 8 (k / 4) + 2q, +1
                const float2 v = lds_float2_here(vs + 8 * (k / 4) + 2 * q);
                rx = __fmul_rn(__fmul_rn(v.x, pre), inv);
                ry = __fmul_rn(__fmul_rn(v.y, pre), inv);
            }
        }
        const float pk = ex2_approx(fmaf(acc[k], first_row ? g0 : g1, first_row ? c0 : c1));
        acc[k] = kFoldV ? __fmul_rn(pk, k % 2 ? ry : rx) : pk; // 256 * p (x vs / vmax)
        if (first_row) s0 += pk; else s1 += pk;
    }
#pragma unroll
    for (int k = kK; k < 64; k++) acc[k] = 0.0f; // NCOLS = 64: no token
    softmax_rows_sum(s0, s1, alpha0, alpha1, l0, l1);
}

/* P words of block a (0..7) from the softmax's 256 p: row r0 (w0) and r0 + 8 (w1), positions
 * 16a + 4q .. +3 = tokens 16a+2q, +1, 16a+8+2q, +1, E4M3. They are also the A fragments of
 * the PV wgmma (ptx.cuh, _rs): for k-block kb, a[0] = row r0 positions 32kb + 4q.. (a = 2kb),
 * a[1] = row r0 + 8, a[2] / a[3] = the same for a = 2kb + 1 (positions + 16). */
static __device__ __forceinline__ void p_words(const float (&acc)[64], int a, uint32_t &w0, uint32_t &w1)
{
    w0 = (uint32_t)cvt_e4m3x2_rn_satfinite(acc[8 * a + 0], acc[8 * a + 1]) |
         ((uint32_t)cvt_e4m3x2_rn_satfinite(acc[8 * a + 4], acc[8 * a + 5]) << 16);
    w1 = (uint32_t)cvt_e4m3x2_rn_satfinite(acc[8 * a + 2], acc[8 * a + 3]) |
         ((uint32_t)cvt_e4m3x2_rn_satfinite(acc[8 * a + 6], acc[8 * a + 7]) << 16);
}

/* PW_PRECISION_FP8X2: P's second term for the words p_words made of block a (w0, w1 are
 * its output): e4m3(f16(256 p) - p8) per element, in f16x2 (the difference is exact
 * there: p8 is 256 p rounded to 4 significant bits, both are f16 values within a factor 2,
 * or p8 = 0). Same element order as p_words. */
static __device__ __forceinline__ uint16_t p_pair_lo(float e0, float e1, uint16_t codes)
{
    return cvt_e4m3x2_f16x2_rn_satfinite(sub_f16x2(cvt_f16x2_rn(e0, e1), cvt_f16x2_e4m3x2(codes)));
}

static __device__ __forceinline__ void p_words_lo(const float (&acc)[64], int a, uint32_t w0, uint32_t w1,
                                                  uint32_t &l0, uint32_t &l1)
{
    l0 = (uint32_t)p_pair_lo(acc[8 * a + 0], acc[8 * a + 1], (uint16_t)(w0 & 0xffffu)) |
         ((uint32_t)p_pair_lo(acc[8 * a + 4], acc[8 * a + 5], (uint16_t)(w0 >> 16)) << 16);
    l1 = (uint32_t)p_pair_lo(acc[8 * a + 2], acc[8 * a + 3], (uint16_t)(w1 & 0xffffu)) |
         ((uint32_t)p_pair_lo(acc[8 * a + 6], acc[8 * a + 7], (uint16_t)(w1 >> 16)) << 16);
}

/* One page's scores, issued and committed (not waited for): acc = Q K^T by the warpgroup's
 * wgmmas, with FP8X2 + Q_lo K^T into the same accumulator (desc_q_lo: Q's second term). */
template <bool X2>
static __device__ __forceinline__ void qk_issue(float (&acc)[64], uint64_t desc_q, uint64_t desc_q_lo, uint64_t desc_k)
{
    wgmma_fence_operand(acc);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kHeadDim / 32; kb++)
        wgmma_m64n128k32_f32_e4m3_ss(acc, desc_q + 2 * kb, desc_k + 2 * kb, kb > 0);
    if constexpr (X2) {
#pragma unroll
        for (int kb = 0; kb < kHeadDim / 32; kb++)
            wgmma_m64n128k32_f32_e4m3_ss(acc, desc_q_lo + 2 * kb, desc_k + 2 * kb, 1);
    }
    wgmma_commit_group();
}

/* The page's P as the PV wgmma's A fragments (p_words: pa) and, with FP8X2, its second term
 * (p_words_lo: pl), from the softmax's 256 p in acc. */
template <bool X2>
static __device__ __forceinline__ void p_fragments(const float (&acc)[64], uint32_t (&pa)[16],
                                                   uint32_t (&pl)[X2 ? 16 : 1])
{
#pragma unroll
    for (int a = 0; a < 8; a++) {
        p_words(acc, a, pa[2 * a], pa[2 * a + 1]);
        if constexpr (X2) p_words_lo(acc, a, pa[2 * a], pa[2 * a + 1], pl[2 * a], pl[2 * a + 1]);
    }
}

/* One kN-wide part of PV (kN = 128: the whole head dimension, 64: a half, 32: a quarter),
 * into the freshly zeroed accumulator pv (kN / 2 registers): P (pa, and pl with FP8X2) times
 * the V^T rows that desc_b addresses; waited for. The reduction axis and its order are those
 * of one N = 128 product, so o = o * alpha + pv (pv_add_to_o) gives the same sums. */
template <bool X2, int kN>
static __device__ __forceinline__ void pv_part(float (&pv)[kN / 2], const uint32_t (&pa)[16],
                                               const uint32_t (&pl)[X2 ? 16 : 1], uint64_t desc_b)
{
    static_assert(kN == 128 || kN == 64 || kN == 32, "PV parts: N = 128, 64 or 32");
    auto mma = [&](uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc, int scale_d) {
        if constexpr (kN == 128) wgmma_m64n128k32_f32_e4m3_rs(pv, a0, a1, a2, a3, desc, scale_d);
        else if constexpr (kN == 64) wgmma_m64n64k32_f32_e4m3_rs(pv, a0, a1, a2, a3, desc, scale_d);
        else wgmma_m64n32k32_f32_e4m3_rs(pv, a0, a1, a2, a3, desc, scale_d);
    };
    wgmma_fence_operand(pv);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kPageSize / 32; kb++)
        mma(pa[4 * kb], pa[4 * kb + 1], pa[4 * kb + 2], pa[4 * kb + 3], desc_b + 2 * kb, kb > 0);
    if constexpr (X2) {
#pragma unroll
        for (int kb = 0; kb < kPageSize / 32; kb++)
            mma(pl[4 * kb], pl[4 * kb + 1], pl[4 * kb + 2], pl[4 * kb + 3], desc_b + 2 * kb, 1);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operand(pv);
}

/* ---- FP8X2 on f16 V^T tiles (docs/semantics.md §4.5; bench/NOTES.md, tenth session) ----
 * With the V^T pre-pass and without per-token scales, FP8X2 takes P once in f16 instead of
 * as two E4M3 terms: one conversion per pair of p instead of four and a subtraction, and
 * the PV product as f16 x f16 wgmmas (half the E4M3 rate: the tensor time of the two E4M3
 * terms) on an f16 V^T, in which every E4M3 value of V is exact. The f16 tile is 32 KiB:
 * [d][position] in two 16 KiB chunks of 64 positions each, rows of 128 bytes 128B-swizzled,
 * positions in their natural order (the k16 A fragment of P is the QK accumulator's layout:
 * no permutation). */

/* P (acc = 256 p of this thread's two rows) as the f16 A fragments of the 8 k16 steps:
 * step kb holds columns 16 kb .. 16 kb + 15, i.e. acc[8 kb .. 8 kb + 7], round to nearest;
 * zeros for a warp that is not a member (converted first, then zeroed: its dead scores are
 * not kept live). */
static __device__ __forceinline__ void p_fragments_f16(const float (&acc)[64], uint32_t (&ph)[32], bool member)
{
#pragma unroll
    for (int k = 0; k < 32; k++) ph[k] = cvt_f16x2_rn(acc[2 * k], acc[2 * k + 1]);
    if (!member) {
#pragma unroll
        for (int k = 0; k < 32; k++) ph[k] = 0u;
    }
}

/* One N = 64 half of PV on the f16 V^T tile at desc_b (the half's first row): eight k16
 * steps into the freshly zeroed accumulator pv, waited for. The same roles as pv_part. */
static __device__ __forceinline__ void pv_part_f16(float (&pv)[32], const uint32_t (&ph)[32], uint64_t desc_b)
{
    wgmma_fence_operand(pv);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kPageSize / 16; kb++)
        wgmma_m64n64k16_f32_f16_rs(pv, ph[4 * kb], ph[4 * kb + 1], ph[4 * kb + 2], ph[4 * kb + 3],
                                   desc_b + (uint64_t)((kb / 4) * (kTileBytes >> 4) + (kb % 4) * 2), kb > 0);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operand(pv);
}

/* Descriptor of row 64 h (h = 0, 1: the N = 64 half) of the f16 V^T tile at `tile`. */
static __device__ __forceinline__ uint64_t vt16_half_desc(const void *tile, int h)
{
    return wgmma_desc_k_major_sw128(tile) + (uint64_t)(h * 64 * 128 >> 4);
}

/* zero_vt_after on the f16 tile at vt (32 KiB): positions past vlim (0..126) become +0.
 * 128 threads, thread t owns row d = t; unit a (positions 8a .. 8a + 7) of chunk a / 8. */
static __device__ __forceinline__ void zero_vt16_after(uint32_t vt, int vlim)
{
    const uint32_t d = threadIdx.x % 128;
#pragma unroll 1
    for (int a = vlim / 8; a < kPageSize / 8; a++) {
        const int first = 8 * a;
        const uint32_t addr = vt + (uint32_t)(a / 8) * kTileBytes + sw128(d, (uint32_t)(a % 8));
        uint32_t keep[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (first + j <= vlim) keep[j / 2] |= 0xffffu << (16 * (j % 2));
        keep_bytes_v4(addr, keep, first <= vlim);
    }
}

/* O columns of part `part` (kN wide) += the part's PV: o = o * alpha + pv, alpha0 for the
 * row r0 elements, alpha1 for r0 + 8. */
template <int kN>
static __device__ __forceinline__ void pv_add_to_o(float (&o)[64], const float (&pv)[kN / 2], int part,
                                                   float alpha0, float alpha1)
{
#pragma unroll
    for (int k = 0; k < kN / 2; k++)
        o[kN / 2 * part + k] = fmaf(o[kN / 2 * part + k], (k % 4) < 2 ? alpha0 : alpha1, pv[k]);
}

/* ---- Per-token scales (args.token_scales, docs/semantics.md §4.5; the lean and dense kernels' TS forms) ----
 * In the lean kernels rows r0 and r0 + 8 of a thread are two heads of one query, so they see
 * the same tokens: one vmax per warp and page (softmax_page's kFoldV). The dense tiles' two rows are two
 * queries: one vmax per row (attention_dense.cuh, ts_scale_p_two_queries). */

/* One warp copies the K and V scales of page `physical` (KV head kv_head) into its buffer,
 * buf[0] K and buf[1] V, all PAGE slots (semantics §4.5: any slot of a selected page may be
 * read; the ones a row cannot see are never used; PAGE = 64: entries 64..127 are not
 * loaded: ts_scale_scores<64> does not read the K ones, and ts_mask_v (the lean kernels)
 * or the dense tiles' per-row limits (<= 63) keep the V ones out);
 * cp.async, committed; a side without scales is written as 1. The reader waits (cp_async_wait_all) and __syncwarp()s first. */
template <int PAGE = kPageSize>
static __device__ __forceinline__ void ts_load_page(float (&buf)[2][kPageSize], const AttentionParams &p,
                                                    int kv_head, int32_t physical, int lane)
{
    const int64_t head = (int64_t)kv_head * p.ts_stride_h, slot0 = (int64_t)physical * PAGE;
#pragma unroll
    for (int j = 0; j < PAGE / 32; j++) {
        const int t = lane + 32 * j;
        const int64_t at = head + (slot0 + t) * p.ts_stride_t;
        if (p.ts_k) cp_async_4(&buf[0][t], p.ts_k + at);
        else buf[0][t] = 1.0f;
        if (p.ts_v) cp_async_4(&buf[1][t], p.ts_v + at);
        else buf[1][t] = 1.0f;
    }
    cp_async_commit();
}

/* A float2 from shared memory, loaded where it is written in the program (asm volatile: the
 * front end neither moves nor merges it; ptxas sees a plain ld.shared): a second pass over a
 * page's scales reads them again instead of keeping 32 of them live from the first (the
 * dense tiles' ts_scale_p_two_queries; it changes registers, not results). */
static __device__ __forceinline__ float2 lds_float2_here(const float *at)
{
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"((uint32_t)__cvta_generic_to_shared(at)));
    return v;
}

/* The scores times their tokens' K scales (docs/semantics.md §4.5): acc = acc x ks_t,
 * rounded, for this thread's rows r0 and r0 + 8 (one scale per column: both rows see the
 * same token); the softmax (softmax_page, or the dense tiles' softmax_page_two_queries) then
 * runs on the products exactly as without scales, with the rows' factors f: x_t = (acc x
 * ks_t) x f, the form the stacked tile takes too, so every ks_t = 1 leaves the scores' bits.
 * Past a row's last visible column the product may be NaN (a slot no row may see: its scale
 * is never used); the softmax masks those columns after this (by selects, or by position for
 * NCOLS = 64, whose columns 64..127 hold no token and are not multiplied here). */
template <int NCOLS = kPageSize>
static __device__ __forceinline__ void ts_scale_scores(float (&acc)[64], uint32_t q, const float *ks)
{
#pragma unroll
    for (int b = 0; b < NCOLS / 8; b++) {
        const float2 k2 = lds_float2_here(ks + 8 * b + 2 * q);
        acc[4 * b] = __fmul_rn(acc[4 * b], k2.x);
        acc[4 * b + 1] = __fmul_rn(acc[4 * b + 1], k2.y);
        acc[4 * b + 2] = __fmul_rn(acc[4 * b + 2], k2.x);
        acc[4 * b + 3] = __fmul_rn(acc[4 * b + 3], k2.y);
    }
}

/* The V scales past lim set to 0 in the warp's buffer (lim < 127: warp-uniform, only a
 * query's own page, a page past the KV length, and every step of a 64-token page), so that
 * the normaliser (ts_v_normaliser) and softmax_page's kFoldV products see only the row's visible tokens (the slots' own
 * values may be NaN: semantics §4.5 never reads them; p = 0 there, and P x 0 = 0).
 * Warp-collective (after the buffer's copy has landed: cp_async_wait_all, __syncwarp). */
static __device__ __forceinline__ void ts_mask_v(float (&buf)[2][kPageSize], int64_t lim, int lane)
{
    const int lim32 = lim < 0 ? -1 : (int)lim; // lim < 127 here
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPageSize / 32; j++) {
        const int t = lane + 32 * j;
        if (t > lim32) buf[1][t] = 0.0f;
    }
    __syncwarp();
}

/* The smallest power of two >= a (a finite, > 0); past FLT_MAX's exponent: +inf. */
static __device__ __forceinline__ float pow2_at_least(float a)
{
    const uint32_t u = __float_as_uint(a);
    if (u >= 0x00800000u) return (u & 0x007fffffu) ? __uint_as_float((u & 0x7f800000u) + 0x00800000u) : a;
    return __uint_as_float((u & (u - 1u)) ? 1u << (32 - __clz(u)) : u); // subnormal: the integer's next power
}

/* vmax from vabs, the largest |vs| of a row's visible tokens on a page: the smallest power of
 * two >= vabs (1 if vabs is not finite and > 0), and the factors with which vs_t / vmax is
 * correctly rounded by multiplications only (no division in the page loop): vmax = 2^e, so
 * vs_t * 2^-e rounds once; a subnormal vmax (2^-e would overflow) first takes vs_t up by
 * pre = 2^64 (exact: a visible |vs_t| <= vmax < 2^-126) and multiplies by inv = 2^(-e-64)
 * (the quotient >= 2^-23 is normal: exact). vs_t / vmax = (vs_t pre) inv. Shared by the
 * lean kernels, the stacked tile and the pre-pass's ready vs / vmax (the same bits). */
static __device__ __forceinline__ float ts_vmax_of(float vabs, float &pre, float &inv)
{
    const float vmax = (vabs > 0.0f && vabs <= 3.402823466e38f) ? pow2_at_least(vabs) : 1.0f;
    const bool tiny = vmax < 1.17549435e-38f;
    pre = tiny ? 18446744073709551616.0f : 1.0f; // 2^64
    inv = __frcp_rn(__fmul_rn(vmax, pre));       // a power of two: exact
    return vmax;
}

/* The page's V-scale normaliser (ts_vmax_of) over its tokens (ts_mask_v set the masked
 * slots' to 0). Lane l reads tokens l, l + 32, ... (4 loads, not the 32 values of its
 * columns, which would stay live), then the warp's maximum; fmaxf drops NaN, as the
 * reference's comparison does. */
static __device__ __forceinline__ float ts_v_normaliser(const float *vs, float &pre, float &inv)
{
    const int lane = threadIdx.x % 32;
    float vabs = 0.0f;
#pragma unroll
    for (int j = 0; j < kPageSize / 32; j++) vabs = fmaxf(vabs, fabsf(vs[lane + 32 * j]));
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) vabs = fmaxf(vabs, __shfl_xor_sync(0xffffffffu, vabs, d));
    return ts_vmax_of(vabs, pre, inv);
}

/* pv_add_to_o with per-token V scales: o = o * alpha + (pv * vmax), the product exact. */
template <int kN>
static __device__ __forceinline__ void pv_add_to_o_ts(float (&o)[64], const float (&pv)[kN / 2], int part,
                                                      float alpha0, float alpha1, float vmax)
{
#pragma unroll
    for (int k = 0; k < kN / 2; k++)
        o[kN / 2 * part + k] = fmaf(o[kN / 2 * part + k], (k % 4) < 2 ? alpha0 : alpha1, __fmul_rn(pv[k], vmax));
}

/* The end of one row (docs/semantics.md §1 and §4.5 step 4): from the running max m (log2
 * units) and l = 256 * sum p, the factor that takes O to o and the row's LSE (natural log),
 * with the head's sink logit `sink` (natural log; -inf: none). Without a sink the same
 * instructions as before sinks existed: factor = v_scale / l, LSE = (m + log2 l - 8) ln 2. */
static __device__ __forceinline__ void finish_row(float m, float l, float v_scale, float sink, float &factor,
                                                  float &lse)
{
    const float ln2 = 0.6931471805599453f;
    if (!(l > 0.0f)) { // no visible token: o = 0, LSE = the sink (-inf without one)
        factor = 0.0f;
        lse = sink;
        return;
    }
    if (sink == -INFINITY) {
        factor = v_scale / l;
        lse = (m + log2f(l) - 8.0f) * ln2;
        return;
    }
    if (sink > 2.3e38f) { // +inf, or sink * log2(e) would overflow: the limit o = 0, LSE = sink
        factor = 0.0f;
        lse = sink;
        return;
    }
    // State and sink on a common maximum ms (log2 units): l' = l a + 256 b. ex2.approx
    // flushes results below FLT_MIN to 0 (the reference does the same).
    const float s2 = sink * 1.4426950408889634f;
    const float ms = fmaxf(m, s2);
    const float a = ex2_approx(m - ms), b = ex2_approx(s2 - ms);
    const float lt = fmaf(l, a, 256.0f * b);
    factor = v_scale * a / lt;
    lse = (ms + log2f(lt) - 8.0f) * ln2;
}

/* Sink given as a key (args.sink_keys, semantics §1 / §4.5): row `row`'s logit for Q head
 * `head`, softmax_scale * (q . key) with the unquantised BF16 Q. Each product of two BF16
 * values is exact in FP32; the sum runs in FP32 over d ascending (explicit round-to-nearest
 * adds, so that no contraction or reassociation changes the bits), then one multiply by the
 * softmax scale: the FP8-emulating reference's order. Both rows are 16-byte aligned (q by
 * the argument checks, the keys by the GPU entry points' check). */
static __device__ __noinline__ float sink_key_logit(const AttentionParams &p, int64_t head, int32_t row)
{
    const uint4 *q = reinterpret_cast<const uint4 *>(p.q + (int64_t)row * p.q_stride + head * kHeadDim);
    const uint4 *key = reinterpret_cast<const uint4 *>(p.sink_keys + head * kHeadDim);
    float dot = 0.0f;
#pragma unroll 4
    for (int c = 0; c < kHeadDim / 8; c++) {
        const uint4 qa = __ldg(q + c), ka = __ldg(key + c);
        const uint32_t qw[4] = {qa.x, qa.y, qa.z, qa.w}, kw[4] = {ka.x, ka.y, ka.z, ka.w};
#pragma unroll
        for (int j = 0; j < 4; j++) { // element 2j (low half) before 2j + 1 (high half)
            dot = __fadd_rn(dot, __fmul_rn(__uint_as_float(qw[j] << 16), __uint_as_float(kw[j] << 16)));
            dot = __fadd_rn(dot, __fmul_rn(__uint_as_float(qw[j] & 0xffff0000u), __uint_as_float(kw[j] & 0xffff0000u)));
        }
    }
    return __fmul_rn(dot, p.softmax_scale);
}

/* The sink logit of Q head `head` (of all Hq) on original row `row`: the head's logit, the
 * row's logit from the head's sink key, or -inf without sinks. */
static __device__ __forceinline__ float sink_of(const AttentionParams &p, int64_t head, int32_t row)
{
    if (p.sink_logits) return p.sink_logits[head];
    if (p.sink_keys) return sink_key_logit(p, head, row);
    return -INFINITY;
}

/* Epilogue of one warp's query: o = O * v_scale / (256 l), BF16, straight to the original row
 * my_row (>= 0), and LSE = m + ln l when asked for (finish_row: with the heads' sinks,
 * sink_of_head(h) for head h of the KV head). G < 16: only the rows of heads h < G exist
 * (head0 = lane / 4 < G; head1 = head0 + 8 never with G <= 8). */
template <int G, class SinkOf>
static __device__ __forceinline__ void store_rows_with(const AttentionParams &p, const float (&o)[64], int32_t my_row,
                                                       int kv_head, int lane, float m0, float m1, float l0,
                                                       float l1, float v_scale, SinkOf sink_of_head)
{
    static_assert(G == 16 || G == 8 || G == 4, "G: 16, 8 or 4");
    const int q = lane % 4, head0 = lane / 4, head1 = head0 + 8;
    if (G < kHeadsPerKv && head0 >= G) return;
    constexpr bool kTwo = G == kHeadsPerKv; // both rows of the thread are heads
    float inv0, inv1 = 0.0f, lse0, lse1 = 0.0f;
    finish_row(m0, l0, v_scale, sink_of_head(head0), inv0, lse0);
    if (kTwo) finish_row(m1, l1, v_scale, sink_of_head(head1), inv1, lse1);
    uint16_t *out0 = p.o + (int64_t)my_row * p.o_stride + ((int64_t)kv_head * G + head0) * kHeadDim;
    uint16_t *out1 = p.o + (int64_t)my_row * p.o_stride + ((int64_t)kv_head * G + head1) * kHeadDim;
#pragma unroll
    for (int b = 0; b < 16; b++) {
        const int col = 8 * b + 2 * q;
        const __nv_bfloat162 v0 = __floats2bfloat162_rn(o[4 * b] * inv0, o[4 * b + 1] * inv0);
        if (kTwo) {
            const __nv_bfloat162 v1 = __floats2bfloat162_rn(o[4 * b + 2] * inv1, o[4 * b + 3] * inv1);
            *reinterpret_cast<__nv_bfloat162 *>(out0 + col) = v0;
            *reinterpret_cast<__nv_bfloat162 *>(out1 + col) = v1;
        } else {
            *reinterpret_cast<__nv_bfloat162 *>(out0 + col) = v0;
        }
    }
    if (p.lse && q == 0) {
        float *lse = p.lse + (int64_t)my_row * (p.num_kv_heads * G) + (int64_t)kv_head * G;
        lse[head0] = lse0;
        if (kTwo) lse[head1] = lse1;
    }
}

/* store_rows_with with sink_of's sinks for the warp's query row my_row (each head's logit,
 * a sink key's dot product computed here, or -inf without sinks). */
template <int G = kHeadsPerKv>
static __device__ __forceinline__ void store_rows(const AttentionParams &p, const float (&o)[64], int32_t my_row,
                                                  int kv_head, int lane, float m0, float m1, float l0,
                                                  float l1, float v_scale)
{
    store_rows_with<G>(p, o, my_row, kv_head, lane, m0, m1, l0, l1, v_scale,
                       [&](int head) { return sink_of(p, (int64_t)kv_head * G + head, my_row); });
}

} // namespace pw

#endif
