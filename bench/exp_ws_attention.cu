/* exp_ws_attention.cu — issue 12's cheap experiments R1-R3 for the warp-specialised 8-query
 * kernel, on synthetic pages (no library data, no correctness check: timing and the
 * compiler's register report only). Not part of the library; bench/NOTES.md has the
 * predictions and the results.
 *
 *   exp_ws_attention [--groups N] [--union U] [--density D] [--reps R] [--variant I]
 *
 * One persistent CTA per SM, three warpgroups: a producer (one thread issues the bulk
 * copies of each union page's K and V^T tiles, 2 x 16 KiB, into rings of KR / VR stages) and
 * two consumers, each owning one 4-query half of an 8-query group (64 rows = one M64 wgmma
 * tile), walking the group's union pages in order. Two rings, K and V^T,
 * each streamed by its own producer thread (so that the K stream never waits for a V
 * release): full barriers (the producer's expect_tx, 16 KiB) and empty barriers (256
 * arrivals per page: 128 from each half, every thread of a consumer that used the page;
 * for a half that skips it (MODE 2, SKIP), one count-128 arrival by the producer when it
 * issues the copy; in MODE 0 / 1 every consumer waits for and releases every page, so no
 * thread arrives for a later use of a stage before the earlier one completed: each phase
 * of an empty barrier is one page). A consumer releases K(k) as soon as QK(k) is done,
 * before it waits for K(k + 1). In MODE 0 / 1 every wait then points to an earlier page and
 * no cycle is possible. In MODE 2 with SKIP one is: a consumer holds V(k) while it waits
 * for its next own page's K; if that page is more than KR + VR uses ahead, its fill can
 * need the other consumer to pass a V stage that waits for this very release. The host
 * therefore gives a half a filler page (no member) wherever its gap would exceed that
 * (kFillerGap), and a skipping consumer waits for the stage's "issued" counter before its
 * parity wait (see wait_k). The first H200 runs hung on both.
 *
 * Variants (template MODE, SKIP, X2):
 *   MODE 0  R1, stream only: consumers wait and release, no arithmetic.
 *   MODE 1  consume, no overlap: per member page QK (wgmma, wait), softmax, PV.
 *   MODE 2  consume with overlap (issue 12 item 2): the next member page's QK is issued
 *           before this page's softmax (into the second score accumulator).
 *           The consumer walks its own page list (the host's, [groups][2][kMaxUnion] union
 *           indices) and the producer arrives for the pages it skips; PV in four N = 32
 *           quarters (16-register fresh accumulators) to fit 240 registers.
 *   SKIP    1: a consumer computes only the pages its half selected; 0: every union page
 *           (the lock-step of the old Union8 cluster kernel), for R2's comparison.
 *   X2      PW_PRECISION_FP8X2: QK and PV twice (Q and P as two FP8 terms).
 * The arithmetic is the library's (attention_common.cuh: softmax_page, p_fragments, pv_part,
 * pv_add_to_o, the wgmma wrappers), on random FP8 tiles; outputs go to a buffer only to keep
 * them live. R3 is ptxas's report for the MODE 2 consumers (setmaxnreg 240), read from
 * `-Xptxas -v` of this file. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention_common.cuh"

namespace {

using namespace pw;

constexpr int kRing = 4;                      // default stages of each of the K and V^T rings
constexpr int kFillerGap = 2 * kRing;         // a half's own pages at most this far apart
constexpr int kConsumers = 2;                 // one per 4-query half of the 8-query group
constexpr int kWsThreads = 128 * (1 + kConsumers);
constexpr uint32_t kEmptyArrivals = 128 * kConsumers;

template <int KR, int VR> // stages of the K ring and of the V^T ring (16 KiB each)
struct __align__(1024) SmemWs {
    uint8_t k[KR][kTileBytes];
    uint8_t vt[VR][kTileBytes];
    uint8_t q[kConsumers][kRows * kHeadDim];
    uint8_t q_lo[kConsumers][kRows * kHeadDim];
    uint64_t k_full[KR], v_full[VR];   // copy landed (the producer's expect_tx)
    uint64_t k_empty[KR], v_empty[VR]; // 256 arrivals: each half's 128 threads, or the
                                             // producer's count-128 arrival for a skipping half
    uint32_t k_issued[KR], v_issued[VR]; // 1 + the last use issued into the stage
};
template <int KR, int VR> constexpr size_t kSmemWs = sizeof(SmemWs<KR, VR>) + 1024;
static_assert(kSmemWs<6, 6> <= 227 * 1024, "shared-memory plan");

struct ExpParams {
    const uint8_t *k_tiles;   // [pool][16 KiB], any bytes (finite E4M3 codes)
    const uint8_t *vt_tiles;  // [pool][16 KiB]
    const int32_t *pages;     // [groups][kMaxUnion] page of the pool
    const uint8_t *masks;     // [groups][kMaxUnion] bits 0-3: half 0's slots, 4-7: half 1's
    const int32_t *union_size; // [groups]
    const uint8_t *own;       // [groups][2][kMaxUnion] union indices each half computes (MODE 2)
    const int32_t *own_count; // [groups][2]
    const uint8_t *computes;  // [groups][kMaxUnion] bit h: half h computes the page (member or filler)
    const uint16_t *q;        // [groups][2][64 rows][128] BF16 (QLOAD)
    int num_groups;
    float *out;               // [gridDim.x][2][128 threads] one float per thread
};

// mbarrier.arrive with a count (PTX ISA 9.7.13.15.13, sm_90): `count` arrivals at once.
__device__ __forceinline__ void mbarrier_arrive_count(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ uint32_t half_members(const ExpParams &p, int g, int i, int half)
{
    return (p.masks[(int64_t)g * kMaxUnion + i] >> (4 * half)) & 0xFu;
}

// One consumer's work on one page's scores: softmax, P, PV in kN-wide parts of the head
// dimension (kN = 64: two halves, as the lean kernel; 32: four quarters, 16-register fresh
// accumulators), O update. Scores in acc (64 registers), dead afterwards.
template <bool X2, int kN>
__device__ __forceinline__ void softmax_pv(float (&acc)[64], float (&o)[64], uint64_t desc_vt, uint32_t q,
                                           float f0, float f1, float &m0, float &m1, float &l0, float &l1)
{
    float alpha0, alpha1;
    softmax_page<4>(acc, kPageSize - 1, q, f0, f1, m0, m1, l0, l1, alpha0, alpha1);
    uint32_t pa[16];
    uint32_t pl[X2 ? 16 : 1];
    p_fragments<X2>(acc, pa, pl);
#pragma unroll
    for (int part = 0; part < kHeadDim / kN; part++) {
        float pv[kN / 2];
        pv_part<X2, kN>(pv, pa, pl, desc_vt + (uint64_t)(part * kN * kPageSize >> 4));
        pv_add_to_o<kN>(o, pv, part, alpha0, alpha1);
    }
}


// QLOAD: each consumer loads its half's 64 x 128 BF16 Q of the group and writes it as FP8
// (and the second term) into its swizzled Q tile before the group's first QK: the per-group
// prologue the persistent kernel pays (here not overlapped with the previous group's tail;
// a constant scale stands in for the per-row amax reduction).
template <bool X2>
__device__ __forceinline__ void load_q_half(const uint16_t *src, uint8_t *q, uint8_t *q_lo, int t, int half)
{
    for (int c = t; c < kRows * kHeadDim / 16; c += 128) { // one 16-element chunk per step
        const int row = c / 8, chunk = c % 8;
        const uint4 a = __ldg(reinterpret_cast<const uint4 *>(src + row * kHeadDim + chunk * 16));
        const uint4 b = __ldg(reinterpret_cast<const uint4 *>(src + row * kHeadDim + chunk * 16 + 8));
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float x0 = __uint_as_float(w[2 * k] << 16) * 8.0f, x1 = __uint_as_float(w[2 * k] & 0xffff0000u) * 8.0f;
            const float x2 = __uint_as_float(w[2 * k + 1] << 16) * 8.0f,
                        x3 = __uint_as_float(w[2 * k + 1] & 0xffff0000u) * 8.0f;
            const uint16_t h01 = cvt_e4m3x2_rn_satfinite(x0, x1), h23 = cvt_e4m3x2_rn_satfinite(x2, x3);
            hi[k] = (uint32_t)h01 | ((uint32_t)h23 << 16);
            if constexpr (X2) {
                float r0, r1, r2, r3;
                e4m3x2_to_float2(h01, r0, r1);
                e4m3x2_to_float2(h23, r2, r3);
                lo[k] = (uint32_t)cvt_e4m3x2_rn_satfinite((x0 - r0) * 16.0f, (x1 - r1) * 16.0f) |
                        ((uint32_t)cvt_e4m3x2_rn_satfinite((x2 - r2) * 16.0f, (x3 - r3) * 16.0f) << 16);
            }
        }
        st_shared_v4_u32(smem_u32(q) + sw128((uint32_t)row, (uint32_t)chunk), make_uint4(hi[0], hi[1], hi[2], hi[3]));
        if constexpr (X2)
            st_shared_v4_u32(smem_u32(q_lo) + sw128((uint32_t)row, (uint32_t)chunk),
                             make_uint4(lo[0], lo[1], lo[2], lo[3]));
    }
    fence_proxy_async_shared_cta();   // generic stores -> the wgmma's reads
    bar_sync_named(1 + half, 128);    // this consumer warpgroup only
}

template <int MODE, bool SKIP, bool X2, bool QLOAD, int KR, int VR>
__global__ void __launch_bounds__(kWsThreads, 1) ws_kernel(const ExpParams p)
{
    extern __shared__ uint8_t smem_raw[];
    SmemWs<KR, VR> &sm = *reinterpret_cast<SmemWs<KR, VR> *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
    const int tid = threadIdx.x, wg = tid / 128, t = tid % 128;
    if (tid == 0) {
        for (int s = 0; s < KR; s++) {
            mbarrier_init(&sm.k_full[s], 1);
            mbarrier_init(&sm.k_empty[s], kEmptyArrivals);
            sm.k_issued[s] = 0u;
        }
        for (int s = 0; s < VR; s++) {
            mbarrier_init(&sm.v_full[s], 1);
            mbarrier_init(&sm.v_empty[s], kEmptyArrivals);
            sm.v_issued[s] = 0u;
        }
        fence_mbarrier_init_release_cluster();
    }
    // Synthetic Q (both terms): finite E4M3 codes, the same for every group.
    for (int i = tid; i < kConsumers * kRows * kHeadDim / 4; i += kWsThreads) {
        reinterpret_cast<uint32_t *>(sm.q)[i] = 0x38303438u ^ (uint32_t)(i * 0x01010101u & 0x07070707u);
        reinterpret_cast<uint32_t *>(sm.q_lo)[i] = 0x20182028u ^ (uint32_t)(i * 0x01000101u & 0x07070707u);
    }
    fence_proxy_async_shared_cta();
    __syncthreads();

    if (wg == 0) { // ---- producers: warp 0 streams K, warp 1 streams V^T (one thread each)
        setmaxnreg_dec<24>();
        if (t != 0 && t != 32) return;
        const bool is_k = t == 0;
        uint64_t *const full = is_k ? sm.k_full : sm.v_full;
        uint64_t *const empty = is_k ? sm.k_empty : sm.v_empty;
        const uint8_t *const src = is_k ? p.k_tiles : p.vt_tiles;
        const uint64_t keep = createpolicy_evict_last();
        uint32_t use = 0; // pages issued so far (ring position)
        for (int g = blockIdx.x; g < p.num_groups; g += gridDim.x) {
            const int n = p.union_size[g];
            for (int i = 0; i < n; i++, use++) {
                const uint32_t ring = is_k ? (uint32_t)KR : (uint32_t)VR;
                const int s = (int)(use % ring);
                if (use >= ring) mbarrier_wait_parity(&empty[s], ((use / ring) - 1) & 1u);
                const int32_t page = p.pages[(int64_t)g * kMaxUnion + i];
                mbarrier_arrive_expect_tx(&full[s], kTileBytes);
                bulk_load(is_k ? sm.k[s] : sm.vt[s], src + (int64_t)page * kTileBytes, kTileBytes, &full[s], keep);
                *(volatile uint32_t *)&(is_k ? sm.k_issued : sm.v_issued)[s] = use + 1u;
                if (SKIP && MODE == 2) { // the halves that skip the page: their 128 arrivals
                    const uint32_t c = p.computes[(int64_t)g * kMaxUnion + i];
                    const uint32_t skipping = ((c & 1u) == 0u) + ((c & 2u) == 0u);
                    if (skipping) mbarrier_arrive_count(&empty[s], 128u * skipping);
                }
            }
        }
        return;
    }

    // ---- consumers: warpgroup 1 owns half 0, warpgroup 2 half 1
    setmaxnreg_inc<240>();
    const int half = wg - 1, lane = t % 32;
    const uint32_t q = lane % 4;
    const uint64_t desc_q = wgmma_desc_k_major_sw128(sm.q[half]);
    const uint64_t desc_q_lo = wgmma_desc_k_major_sw128(sm.q_lo[half]);
    const float f0 = 0.01f, f1 = 0.01f;
    float sink = 0.0f;
    uint32_t use = 0; // this consumer's position in the ring (the same sequence as the producers')
    // A consumer that skips pages (MODE 2 with SKIP) does not wait for their fills, so it can
    // reach a stage a whole ring ahead of the producer (a parity wait would then pass on the
    // phase of use u - 2 kRing) or behind it; so it first waits until the producer has issued
    // use u into the stage (k_issued / v_issued, monotonic), then for the phase. Issued means
    // the stage's previous use was released, hence filled: the full barrier is in u's phase.
    // (The first H200 runs of this file hung without it, as v7 did.)
    auto wait_k = [&](uint32_t u) {
        if (SKIP && MODE == 2)
            while (*(volatile const uint32_t *)&sm.k_issued[u % KR] < u + 1u) {
            }
        mbarrier_wait_parity(&sm.k_full[u % KR], (u / KR) & 1u);
    };
    auto wait_v = [&](uint32_t u) {
        if (SKIP && MODE == 2)
            while (*(volatile const uint32_t *)&sm.v_issued[u % VR] < u + 1u) {
            }
        mbarrier_wait_parity(&sm.v_full[u % VR], (u / VR) & 1u);
    };
    auto release_k = [&](uint32_t u) { mbarrier_arrive(&sm.k_empty[u % KR]); };
    auto release_v = [&](uint32_t u) { mbarrier_arrive(&sm.v_empty[u % VR]); };
    for (int g = blockIdx.x; g < p.num_groups; g += gridDim.x) {
        const int n = p.union_size[g];
        float o[64];
#pragma unroll
        for (int k = 0; k < 64; k++) o[k] = 0.0f;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
        if constexpr (MODE == 0) {
            for (int i = 0; i < n; i++) {
                wait_k(use + i);
                wait_v(use + i);
                release_k(use + i);
                release_v(use + i);
            }
        } else if constexpr (MODE == 1) {
            float acc[64];
            for (int i = 0; i < n; i++) {
                const uint32_t u = use + i;
                wait_k(u);
                wait_v(u);
                if (!SKIP || half_members(p, g, i, half) != 0u) {
                    qk_issue<X2>(acc, desc_q, desc_q_lo, wgmma_desc_k_major_sw128(sm.k[u % KR]));
                    wgmma_wait_group<0>();
                    wgmma_fence_operand(acc);
                    softmax_pv<X2, 64>(acc, o, wgmma_desc_k_major_sw128(sm.vt[u % VR]), q, f0, f1, m0, m1, l0, l1);
                }
                release_k(u);
                release_v(u);
            }
        } else {
            // A static schedule, as ptxas wants it for overlapped wgmmas: page k's QK is in
            // flight when step k starts; step k waits for it, releases K(k), issues QK(k + 1)
            // (waiting for K(k + 1) while V(k) is held: safe while the next own page is at
            // most KR + VR uses ahead, which the host's filler pages ensure), then softmax(k)
            // under QK(k + 1), PV(k),
            // V(k) released. Two score accumulators in turn (the loop unrolled by two); the
            // last page's step is peeled (no next QK). Control values are warp-uniform redux
            // results, so ptxas sees no divergent branch around the wgmmas.
            float acc_a[64], acc_b[64];
            if constexpr (QLOAD)
                load_q_half<X2>(p.q + ((int64_t)g * 2 + half) * kRows * kHeadDim, sm.q[half], sm.q_lo[half], t, half);
            const int cnt = (int)__reduce_min_sync(0xffffffffu, (uint32_t)(SKIP ? p.own_count[2 * g + half] : n));
            const uint8_t *own = p.own + ((int64_t)g * 2 + half) * kMaxUnion;
            auto ring = [&](int k) -> uint32_t {
                return __reduce_min_sync(0xffffffffu, use + (SKIP ? (uint32_t)own[k] : (uint32_t)k));
            };
            auto step = [&](int k, float (&cur)[64], float (&nxt)[64], bool last) {
                const uint32_t u = ring(k);
                wgmma_wait_group<0>(); // QK(k)
                wgmma_fence_operand(cur);
                release_k(u);
                if (!last) {
                    const uint32_t un = ring(k + 1);
                    wait_k(un);
                    qk_issue<X2>(nxt, desc_q, desc_q_lo, wgmma_desc_k_major_sw128(sm.k[un % KR]));
                }
                wait_v(u);
                softmax_pv<X2, 32>(cur, o, wgmma_desc_k_major_sw128(sm.vt[u % VR]), q, f0, f1, m0, m1, l0,
                                        l1);
                release_v(u);
            };
            if (cnt > 0) {
                const uint32_t u0 = ring(0);
                wait_k(u0);
                qk_issue<X2>(acc_a, desc_q, desc_q_lo, wgmma_desc_k_major_sw128(sm.k[u0 % KR]));
                int k = 0;
                for (; k + 2 < cnt; k += 2) { // two full steps, each with a next page
                    step(k, acc_a, acc_b, false);
                    step(k + 1, acc_b, acc_a, false);
                }
                if (k + 1 < cnt) { // two pages left: k (acc_a in flight) and k + 1
                    step(k, acc_a, acc_b, false);
                    step(k + 1, acc_b, acc_a, true);
                } else { // one page left: k (acc_a in flight)
                    step(k, acc_a, acc_b, true);
                }
            }
            wgmma_wait_group<0>();
        }
        use += (uint32_t)n;
        float s = l0 + l1 + m0 * 1e-30f;
#pragma unroll
        for (int k = 0; k < 64; k++) s += o[k];
        sink += s;
    }
    p.out[((int64_t)blockIdx.x * kConsumers + half) * 128 + t] = sink;
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

template <int MODE, bool SKIP, bool X2, bool QLOAD = false, int KR = kRing, int VR = kRing>
int run_variant(const char *name, const ExpParams &p, int ctas, int reps, double page_steps, double half_steps)
{
    static_assert(kFillerGap <= KR + VR, "the host's filler pages assume gaps <= KR + VR (else a hang)");
    void (*k)(ExpParams) = ws_kernel<MODE, SKIP, X2, QLOAD, KR, VR>;
    const size_t smem = kSmemWs<KR, VR>;
    CK(cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    k<<<ctas, kWsThreads, smem>>>(p); // warm-up, with a 5 s watchdog (a hang is a result)
    CK(cudaGetLastError());
    for (int waited_ms = 0; cudaStreamQuery(0) == cudaErrorNotReady; waited_ms++) {
        if (waited_ms > 5000) {
            printf("%-34s HUNG (no completion after 5 s)\n", name);
            fflush(stdout);
            _exit(3); // a hung kernel cannot be recovered in this process
        }
        usleep(1000);
    }
    CK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float best = 1e30f, total = 0.0f;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a));
        k<<<ctas, kWsThreads, smem>>>(p);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaGetLastError());
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, a, b));
        best = ms < best ? ms : best;
        total += ms;
    }
    const double flop_per_half_step = 4.0 * 64 * 128 * 128 * (X2 ? 2 : 1); // QK + PV, 64 rows
    const double steps = MODE == 0 ? 0.0 : SKIP ? half_steps : 2.0 * page_steps;
    printf("%-34s min %8.1f us  mean %8.1f us  %6.0f executed TFLOP/s\n", name, best * 1e3, total / reps * 1e3,
           steps * flop_per_half_step / (best * 1e-3) / 1e12);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    int groups = 1909, union_pages = 48, reps = 20, pool = 504, only = -1;
    double density = 0.705; // A-hot W128: C_4 / (2 x union visits) = 127,847 / 181,566
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--groups")) groups = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--union")) union_pages = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--density")) density = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--variant")) only = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: exp_ws_attention [--groups N] [--union U] [--density D] [--reps R] [--variant I]\n");
            return 2;
        }
    }
    if (union_pages < 1 || union_pages > kMaxUnion || groups < 1) {
        fprintf(stderr, "--union must be 1..%d, --groups >= 1\n", kMaxUnion);
        return 2;
    }
    int dev = 0, sms = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess || prop.major != 9) {
        printf("SKIP: needs an sm_90 GPU\n");
        return 77;
    }
    sms = prop.multiProcessorCount;
    setvbuf(stdout, nullptr, _IOLBF, 0); // each result line reaches a pipe before a timeout
    // Synthetic inputs (fixed seed): tiles of finite E4M3 codes, random pages of a pool,
    // member bits with the given per-half density (each computed page has >= 1 member).
    const size_t tiles = (size_t)pool * kTileBytes;
    uint8_t *h_tiles = (uint8_t *)malloc(tiles);
    int32_t *h_pages = (int32_t *)calloc((size_t)groups * kMaxUnion, 4);
    uint8_t *h_masks = (uint8_t *)calloc((size_t)groups * kMaxUnion, 1);
    int32_t *h_sizes = (int32_t *)malloc((size_t)groups * 4);
    uint8_t *h_own = (uint8_t *)calloc((size_t)groups * 2 * kMaxUnion, 1);
    int32_t *h_own_count = (int32_t *)calloc((size_t)groups * 2, 4);
    uint8_t *h_computes = (uint8_t *)calloc((size_t)groups * kMaxUnion, 1);
    if (!h_tiles || !h_pages || !h_masks || !h_sizes || !h_own || !h_own_count || !h_computes) return 1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    auto rnd = [&]() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    for (size_t i = 0; i < tiles; i++) h_tiles[i] = (uint8_t)(rnd() & 0x37u) | (uint8_t)((rnd() & 1u) << 7);
    double page_steps = 0.0, half_steps = 0.0, fillers = 0.0;
    for (int g = 0; g < groups; g++) {
        h_sizes[g] = union_pages;
        for (int i = 0; i < union_pages; i++) {
            h_pages[(size_t)g * kMaxUnion + i] = (int32_t)(rnd() % (uint64_t)pool);
            uint8_t m = 0;
            for (int h = 0; h < 2; h++)
                if ((double)(rnd() % 1000000) / 1e6 < density) m |= (uint8_t)((1u << (rnd() % 4)) << (4 * h));
            if (!m) m = (uint8_t)(1u << (rnd() % 8)); // a union page has a member somewhere
            h_masks[(size_t)g * kMaxUnion + i] = m;
            for (int h = 0; h < 2; h++) {
                // A half computes its member pages, plus a filler page (no member: its rows
                // stay masked) wherever its previous own page of the group is more than
                // kFillerGap pages back. The consumer holds V(k) while it waits for the next
                // own page's K; a K fill more than KR + VR uses ahead can need the other
                // consumer to pass a V stage that waits for that very release: a cycle.
                // Fillers keep every gap within kFillerGap <= KR + VR (run_variant asserts).
                int32_t &cnt = h_own_count[2 * g + h];
                uint8_t *own = h_own + ((size_t)g * 2 + h) * kMaxUnion;
                const bool member = ((m >> (4 * h)) & 0xfu) != 0u;
                const bool filler = !member && cnt > 0 && i - own[cnt - 1] >= kFillerGap;
                if (member || filler) {
                    own[cnt++] = (uint8_t)i;
                    h_computes[(size_t)g * kMaxUnion + i] |= (uint8_t)(1u << h);
                    half_steps += 1.0;
                    fillers += filler;
                }
            }
            page_steps += 1.0;
        }
    }
    ExpParams p;
    uint8_t *d_k = nullptr, *d_vt = nullptr, *d_masks = nullptr;
    int32_t *d_pages = nullptr, *d_sizes = nullptr, *d_own_count = nullptr;
    uint16_t *d_q = nullptr;
    uint8_t *d_own = nullptr, *d_computes = nullptr;
    float *d_out = nullptr;
    CK(cudaMalloc(&d_k, tiles));
    CK(cudaMalloc(&d_vt, tiles));
    CK(cudaMalloc(&d_pages, (size_t)groups * kMaxUnion * 4));
    CK(cudaMalloc(&d_masks, (size_t)groups * kMaxUnion));
    CK(cudaMalloc(&d_sizes, (size_t)groups * 4));
    CK(cudaMalloc(&d_own, (size_t)groups * 2 * kMaxUnion));
    {   // Q of every group: BF16 values in [-1, 1)
        const size_t elems = (size_t)groups * 2 * kRows * kHeadDim;
        uint16_t *h_q = (uint16_t *)malloc(elems * 2);
        if (!h_q) return 1;
        for (size_t i = 0; i < elems; i++) h_q[i] = (uint16_t)(0x3c00u + (rnd() & 0x7fu)) | (uint16_t)((rnd() & 1u) << 15);
        CK(cudaMalloc(&d_q, elems * 2));
        CK(cudaMemcpy(d_q, h_q, elems * 2, cudaMemcpyHostToDevice));
        free(h_q);
    }
    CK(cudaMalloc(&d_own_count, (size_t)groups * 2 * 4));
    CK(cudaMalloc(&d_computes, (size_t)groups * kMaxUnion));
    CK(cudaMemcpy(d_computes, h_computes, (size_t)groups * kMaxUnion, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_own, h_own, (size_t)groups * 2 * kMaxUnion, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_own_count, h_own_count, (size_t)groups * 2 * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_out, (size_t)sms * kConsumers * 128 * 4));
    CK(cudaMemcpy(d_k, h_tiles, tiles, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_vt, h_tiles, tiles, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pages, h_pages, (size_t)groups * kMaxUnion * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_masks, h_masks, (size_t)groups * kMaxUnion, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_sizes, h_sizes, (size_t)groups * 4, cudaMemcpyHostToDevice));
    p.k_tiles = d_k;
    p.vt_tiles = d_vt;
    p.pages = d_pages;
    p.masks = d_masks;
    p.union_size = d_sizes;
    p.own = d_own;
    p.own_count = d_own_count;
    p.computes = d_computes;
    p.q = d_q;
    p.num_groups = groups;
    p.out = d_out;
    printf("exp_ws_attention: %s, %d SMs; %d groups x %d union pages (pool %d), per-half member density %.3f: "
           "%.0f union page visits, %.0f half steps (C_4, of them %.0f fillers)\n",
           prop.name, sms, groups, union_pages, pool, density, page_steps, half_steps, fillers);
    int rc = 0;
    if (only < 0 || only == 0) rc |= run_variant<0, true, false>("R1 stream only", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 1) rc |= run_variant<1, true, false>("FP8   no overlap, own pages", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 2) rc |= run_variant<1, false, false>("FP8   no overlap, every page", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 3) rc |= run_variant<2, true, false>("FP8   overlap, own pages", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 4) rc |= run_variant<2, false, false>("FP8   overlap, every page", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 5) rc |= run_variant<1, true, true>("FP8X2 no overlap, own pages", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 6) rc |= run_variant<2, true, true>("FP8X2 overlap, own pages", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 7) rc |= run_variant<2, false, true>("FP8X2 overlap, every page", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 8) rc |= run_variant<2, true, false, true>("FP8   overlap, own pages, Q/group", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 9) rc |= run_variant<2, true, true, true>("FP8X2 overlap, own pages, Q/group", p, sms, reps, page_steps, half_steps);
    // Deeper rings (K stages, V^T stages): does decoupling the two consumers restore the
    // executed rate of the every-page walk in the own-pages walk?
    if (only < 0 || only == 10) rc |= run_variant<1, true, false, false, 6, 6>("FP8   no overlap, own, ring 6+6", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 11) rc |= run_variant<2, true, false, false, 6, 6>("FP8   overlap, own, ring 6+6", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 12) rc |= run_variant<2, true, false, false, 8, 4>("FP8   overlap, own, ring 8+4", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 13) rc |= run_variant<2, false, false, false, 6, 6>("FP8   overlap, every, ring 6+6", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 14) rc |= run_variant<1, true, true, false, 6, 6>("FP8X2 no overlap, own, ring 6+6", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 15) rc |= run_variant<2, true, true, false, 6, 6>("FP8X2 overlap, own, ring 6+6", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 16) rc |= run_variant<2, true, true, false, 8, 4>("FP8X2 overlap, own, ring 8+4", p, sms, reps, page_steps, half_steps);
    if (only < 0 || only == 17) rc |= run_variant<2, false, true, false, 6, 6>("FP8X2 overlap, every, ring 6+6", p, sms, reps, page_steps, half_steps);
    cudaFree(d_k);
    cudaFree(d_vt);
    cudaFree(d_pages);
    cudaFree(d_masks);
    cudaFree(d_sizes);
    cudaFree(d_own);
    cudaFree(d_own_count);
    cudaFree(d_computes);
    free(h_computes);
    cudaFree(d_q);
    free(h_own);
    free(h_own_count);
    cudaFree(d_out);
    free(h_tiles);
    free(h_pages);
    free(h_masks);
    free(h_sizes);
    return rc;
}
