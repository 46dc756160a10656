/* regroup_common.cuh — device helpers shared by the regroup (regroup.cu) and union
 * preparation (union_prepare.cu) kernels: S_i validity of docs/semantics.md §1 and the loads of one
 * Top-K row. Internal; not installed. */
#ifndef PW_REGROUP_COMMON_CUH
#define PW_REGROUP_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

namespace pw_dev {

constexpr uint32_t kFullMask = 0xffffffffu;
constexpr int kMaxTopk = 16; /* Top-K ids per row the regroup kernel v3 handles (union
                                preparation: kMaxUnionTopk, union_group.cuh) */

/* Number of page ids a query may see: ids p with 0 <= p < count are in S_i when selected
 * (docs/semantics.md §1: p <= min(c, L - 1) / P). 0 when nothing is visible. 64-bit token arithmetic;
 * the result fits 32 bits because L <= INT32_MAX. */
static __device__ __forceinline__ uint32_t visible_page_count(int64_t causal_pos, int32_t kv_len,
                                                              int32_t page_size)
{
    const int64_t last = causal_pos < (int64_t)kv_len - 1 ? causal_pos : (int64_t)kv_len - 1;
    return last < 0 ? 0u : (uint32_t)((uint32_t)last / (uint32_t)page_size) + 1u;
}

/* Loads the K (<= 16) ids of one Top-K row into ids[0..15], -1 past K.
 * kVec: K == 16 and the row is 16-byte aligned (four 16-byte loads); else scalar loads.
 * The rows are read once per kernel: streaming loads keep them out of L1. */
template <bool kVec>
static __device__ __forceinline__ void load_topk_row(const int32_t *row, int32_t k,
                                                     int32_t (&ids)[kMaxTopk])
{
    if (kVec) {
        const int4 *v = reinterpret_cast<const int4 *>(row);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int4 x = __ldcs(v + c);
            ids[4 * c + 0] = x.x;
            ids[4 * c + 1] = x.y;
            ids[4 * c + 2] = x.z;
            ids[4 * c + 3] = x.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kMaxTopk; i++) ids[i] = i < k ? __ldcs(row + i) : -1;
    }
}

/* A request's row range [begin, end) from cu_seqlens_q, or an empty range when the device
 * data break the documented layout (never read outside [0, N)). */
static __device__ __forceinline__ bool request_rows(const int32_t *cu_seqlens, int32_t r,
                                                    int32_t num_tokens, int32_t *begin,
                                                    int32_t *end)
{
    const int32_t b = __ldg(cu_seqlens + r), e = __ldg(cu_seqlens + r + 1);
    *begin = b;
    *end = e;
    return b >= 0 && e >= b && e <= num_tokens;
}

} // namespace pw_dev

#endif
