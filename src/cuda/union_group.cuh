/* union_group.cuh — one group's union metadata from its members' candidates, by one warp
 * (docs/semantics.md §4.1): shared by the union preparation kernel (union_prepare.cu) and the fused
 * regroup + union preparation kernel (regroup.cu). Internal; not installed.
 *
 * A group has at most 8 members x K ids = 32 x KPL candidates (KPL = K / 4 keys per lane:
 * 4, 8 or 16 for K = 16, 32, 64); lane l holds ids KPL*(l%4) .. KPL*(l%4)+KPL-1 of member
 * l/4 as 32-bit keys page*8 + member (no candidate: kNoKey). The warp sorts the keys
 * (bitonic, KPL per lane), then:
 *   - a key starts a union entry when its page differs from the previous key's page;
 *     ballots + popcounts give every key the index of its entry (ascending pages);
 *   - entry masks are shared-memory ORs of 1 << member into the byte of the entry, which
 *     is already the member_masks row layout (4 entries per 32-bit word);
 *   - rows are written with 16-byte (pages) and 4-byte (masks) stores when kVecOut, -1 / 0
 *     padded to the capacity, the descriptor with one 4-byte store per lane. */
#ifndef PW_UNION_GROUP_CUH
#define PW_UNION_GROUP_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "pageweaver.h"
#include "regroup_common.cuh"

namespace pw_dev {

constexpr int kMaxUnionTopk = 64;             /* the largest K of union preparation */
constexpr uint32_t kNoKey = 0xffffffffu;
constexpr uint32_t kMaxUnionPageId = 1u << 29; /* page * 8 + member fits 32 bits */

/* Groups of a request of q queries: windows of W cut into runs of g (W = 0: one window). */
static __device__ __forceinline__ int32_t groups_in_request(int32_t q, int32_t window, int32_t g)
{
    if (q <= 0) return 0;
    if (window <= 0 || window >= q) return q / g + (q % g != 0);
    const int32_t per_window = window / g + (window % g != 0);
    const int32_t rest = q % window;
    return (q / window) * per_window + rest / g + (rest % g != 0);
}

/* Groups of request r (0 when the device data break the layout). */
static __device__ __forceinline__ int32_t groups_of_request(const int32_t *cu_seqlens, int32_t r,
                                                            int32_t num_tokens, int32_t window,
                                                            int32_t g)
{
    int32_t b, e;
    if (!request_rows(cu_seqlens, r, num_tokens, &b, &e)) return 0;
    return groups_in_request(e - b, window, g);
}

static __device__ __forceinline__ void compare_swap(uint32_t &a, uint32_t &b, bool ascending)
{
    const uint32_t lo = min(a, b), hi = max(a, b);
    a = ascending ? lo : hi;
    b = ascending ? hi : lo;
}

/* Bitonic sort of the warp's 32 x KPL keys, ascending by element e = lane*KPL + k.
 * Strides below KPL stay inside a lane; strides >= KPL exchange with lane ^ (stride/KPL). */
template <int KPL>
static __device__ __forceinline__ void sort_keys(uint32_t (&key)[KPL], int lane)
{
    static_assert(KPL == 4 || KPL == 8 || KPL == 16, "4, 8 or 16 keys per lane");
#pragma unroll
    for (int size = 2; size <= 32 * KPL; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            if (stride >= KPL) {
                const int lane_stride = stride / KPL;
                const bool lower = (lane & lane_stride) == 0;
                const bool ascending = ((lane * KPL) & size) == 0;
                const bool take_min = lower == ascending;
#pragma unroll
                for (int k = 0; k < KPL; k++) {
                    const uint32_t other = __shfl_xor_sync(kFullMask, key[k], lane_stride);
                    key[k] = take_min ? min(key[k], other) : max(key[k], other);
                }
            } else {
#pragma unroll
                for (int k = 0; k < KPL; k++) {
                    if (k & stride) continue;
                    compare_swap(key[k], key[k | stride], ((lane * KPL + k) & size) == 0);
                }
            }
        }
    }
}

/* Where one group's metadata goes. */
struct UnionGroupOut {
    int32_t *pages;       /* [capacity] union_pages row */
    uint8_t *masks;       /* [capacity] member_masks row */
    pw_group_desc_t *desc;
    int32_t capacity;
    int32_t slot_begin, request, members;
};

/* The group's |U_G|, |U_G0| and |U_G1| (warp-uniform), as written to its descriptor. */
struct UnionGroupSizes {
    int32_t size, half0, half1;
};

/* The whole warp: sorts the keys and writes the group's rows and descriptor; returns its
 * sizes. s_pages [32 * KPL] int32 and s_masks [8 * KPL] uint32: this warp's shared
 * scratch, 16-byte aligned. */
template <bool kVecOut, int KPL>
static __device__ __forceinline__ UnionGroupSizes union_group_emit(uint32_t (&key)[KPL], int lane,
                                                        int32_t *s_pages, uint32_t *s_masks,
                                                        const UnionGroupOut &out)
{
    constexpr int kCandidates = 32 * KPL;
    sort_keys<KPL>(key, lane);

    /* --- Union entries: a key starts one when its page differs from the previous key's. */
    const uint32_t below = __shfl_up_sync(kFullMask, key[KPL - 1], 1);
    bool starts[KPL];
    starts[0] = key[0] != kNoKey && (lane == 0 || (below >> 3) != (key[0] >> 3));
#pragma unroll
    for (int k = 1; k < KPL; k++) starts[k] = key[k] != kNoKey && (key[k - 1] >> 3) != (key[k] >> 3);
    const uint32_t lanes_lt = (1u << lane) - 1u;
    int32_t rank = 0, size = 0;
#pragma unroll
    for (int k = 0; k < KPL; k++) {
        const uint32_t ballot = __ballot_sync(kFullMask, starts[k]);
        rank += __popc(ballot & lanes_lt);
        size += __popc(ballot);
    }
    /* Entries are numbered in key order e = lane*KPL + k: the entries of lower lanes first
     * (rank above), then this lane's own. A warp that emits several groups with one
     * scratch (the fused regroup kernel): the previous group's reads of s_pages (other
     * lanes' entries, on the unvectorised path) are done before this lane clears its
     * entries. */
    __syncwarp();
#pragma unroll
    for (int c = 0; c < KPL / 4; c++) {
        reinterpret_cast<int4 *>(s_pages)[lane * (KPL / 4) + c] = make_int4(-1, -1, -1, -1);
        s_masks[lane * (KPL / 4) + c] = 0u;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < KPL; k++) {
        rank += starts[k];
        if (key[k] == kNoKey) continue;
        const int32_t u = rank - 1; /* entry of this key's page */
        if (starts[k]) s_pages[u] = (int32_t)(key[k] >> 3);
        atomicOr(&s_masks[u >> 2], 1u << ((key[k] & 7u) + 8u * (uint32_t)(u & 3)));
    }
    __syncwarp();

    /* --- Half sizes: entries with a member in slots 0..3, in slots 4..7. */
    uint32_t count0 = 0, count1 = 0;
#pragma unroll
    for (int c = 0; c < KPL / 4; c++) {
        const uint32_t mw = s_masks[c * 32 + lane];
        uint32_t lo = mw & 0x0f0f0f0fu, hi = (mw >> 4) & 0x0f0f0f0fu;
        lo |= lo >> 1;
        lo |= lo >> 2;
        hi |= hi >> 1;
        hi |= hi >> 2;
        count0 += (uint32_t)__popc(lo & 0x01010101u);
        count1 += (uint32_t)__popc(hi & 0x01010101u);
    }
    const int32_t half0 = (int32_t)__reduce_add_sync(kFullMask, count0);
    const int32_t half1 = (int32_t)__reduce_add_sync(kFullMask, count1);

    /* --- Rows and descriptor. */
    if (kVecOut) {
        for (int32_t x = lane * 4; x < out.capacity; x += 128) {
            int4 pv = make_int4(-1, -1, -1, -1);
            uint32_t mv = 0u;
            if (x < kCandidates) {
                pv = reinterpret_cast<const int4 *>(s_pages)[x / 4];
                mv = s_masks[x / 4];
            }
            *reinterpret_cast<int4 *>(out.pages + x) = pv;
            *reinterpret_cast<uint32_t *>(out.masks + x) = mv;
        }
    } else {
        for (int32_t x = lane; x < out.capacity; x += 32) {
            out.pages[x] = x < kCandidates ? s_pages[x] : -1;
            out.masks[x] =
                x < kCandidates ? (uint8_t)(s_masks[x >> 2] >> (8 * (x & 3))) : (uint8_t)0;
        }
    }
    if (lane < 8) {
        const int32_t field = lane == 0 ? out.slot_begin : lane == 1 ? out.request
                            : lane == 2 ? out.members : lane == 3 ? size : lane == 4 ? half0
                            : lane == 5 ? half1 : 0;
        reinterpret_cast<int32_t *>(out.desc)[lane] = field;
    }
    return UnionGroupSizes{size, half0, half1};
}

} // namespace pw_dev

#endif
