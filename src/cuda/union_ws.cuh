/* union_ws.cuh — tile constants, shared-memory plan, barriers and register split of the
 * warp-specialised 8-query kernel (union_ws.cu; design and invariants in its file comment). */
#ifndef PW_UNION_WS_CUH
#define PW_UNION_WS_CUH

#include <stdint.h>

#include "attention_config.cuh"

namespace pw {

/* One CTA of 3 warpgroups: WG 0 produces (TMA, V transpose, group lists), WG 1 and WG 2
 * consume the 4-slot halves 0 and 1 of each 8-slot group (64 rows each, one M64 tile). */
constexpr int kWsThreads = 384;
constexpr int kWsStages = 4;   // K + V^T ring (32 KiB a stage)
constexpr int kWsRawV = 3;     // V tiles as TMA lands them, waiting for the transpose (16 KiB each)
constexpr int kWsGroupSlots = 2; // group lists: the consumers' current group and the next one
// setmaxnreg: the launch gives 65536 / 384 -> 168 registers a thread; the producer drops to
// 64 (the transpose holds 16 data registers per chunk; the group-list build is a separate,
// not inlined function: inlined into the page loop, its values spilled at 64), the
// consumers rise to 216 (O, the page's accumulator, P and P's second term: ptxas -v shows
// no spill at 216 for FP8X2; 208 spilled a few words, as did a producer of 56 or 48).
constexpr int kWsRegsProducer = 64;
constexpr int kWsRegsConsumer = 216;
constexpr int kWsRegsLaunch = 65536 / kWsThreads / 8 * 8; // 168
static_assert(128 * kWsRegsProducer + 256 * kWsRegsConsumer <= kWsThreads * kWsRegsLaunch,
              "register split exceeds the CTA's launch allocation");

// Named barriers (bar.sync id, 128 threads); 0 is __syncthreads, used only before the role split.
enum WsNamedBarrier : uint32_t {
    kWsBarProducer = 1,  // the producer warpgroup
    kWsBarConsumer0 = 2, // + c: consumer warpgroup c
};

/* Modes of the kernel template (dev: bench_kernels' A/B of the design choices). */
enum WsMode {
    kWsNormal = 0,     // each consumer walks only the pages its half selected
    kWsStreamOnly = 1, // consumers wait for and release their pages, no arithmetic (outputs unwritten)
    kWsLockStep = 2,   // each consumer waits for and releases every union page (impl 4's walk)
};

/* One group's list, written by the producer warpgroup, read by both consumers. */
struct WsGroup {
    int32_t page_logical[kMaxUnion];  // the group's union pages that are in the cache, ascending
    int32_t page_physical[kMaxUnion];
    uint8_t page_members[kMaxUnion];  // bit s: slot s (0..7) selected the page
    uint8_t page_vlim[kMaxUnion];     // last token a member slot may see (page_v_limit)
    int64_t limits[kGroupSize];       // last visible token of each slot (-1: empty slot)
    int32_t query_rows[kGroupSize];   // original row of each slot (-1: empty slot)
    int32_t num_pages;                // pages in the lists; -1: no more work (the CTA stops)
    int32_t kv_head;
};

struct __align__(1024) SmemPlanWs {
    uint8_t k[kWsStages][kTileBytes];    // K of the stage's page [token][d], TMA 128B-swizzled
    uint8_t vt[kWsStages][kTileBytes];   // V^T of the stage's page [d][position], 128B-swizzled
    uint8_t v[kWsRawV][kTileBytes];      // V as it lands [token][d] (TMA), until transposed
    uint8_t q[2][kRows * kHeadDim];      // consumer c's Q (FP8) [row][d], 128B-swizzled
    uint8_t q_lo[2][kRows * kHeadDim];   // PW_PRECISION_FP8X2: Q's second term
    float row_factor[2][kRows];          // q_scale * k_scale * softmax_scale * log2(e)
    WsGroup group[kWsGroupSlots];
    uint64_t loaded[kWsStages];          // K and V of the stage's page landed (tx count 32 KiB; count 1)
    uint64_t ready[kWsStages];           // V^T written (count 1: producer thread 0)
    uint64_t empty[kWsStages];           // stage free again (count 256: every consumer thread, the
                                         // producer arriving 128 for a half without members)
    uint64_t gfull[kWsGroupSlots];       // group list written (count 128: every producer thread)
    uint64_t gempty[kWsGroupSlots];      // both consumers done with the list (count 2)
    int32_t ready_page[kWsStages];       // stream index of the page whose V^T the stage holds (-1: none
                                         // yet): a consumer that skipped pages may be several uses of a
                                         // stage ahead of the producer, where a parity wait would alias
    int32_t warp_count[4];
    int32_t item;                        // the producer's fetched item (broadcast)
};

constexpr size_t kSmemBytesWs = sizeof(SmemPlanWs) + 1024; // + alignment slack of the dynamic base
static_assert(kSmemBytesWs <= 227 * 1024, "shared-memory plan exceeds the sm_90 limit");

} // namespace pw

#endif
