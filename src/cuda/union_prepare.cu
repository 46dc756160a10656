/* union_prepare.cu — union preparation on sm_90 (SPEC §4.1, paper §4.1).
 *
 * One warp per group, 8 groups per CTA. A group has at most 8 members x 16 ids = 128
 * candidates; lane l holds ids 4*(l%4) .. 4*(l%4)+3 of member l/4 (one 16-byte load).
 * Each candidate becomes the 32-bit key page*8 + slot (invalid: 0xffffffff), the warp
 * sorts the 128 keys (bitonic, 4 per lane, 15 shuffle rounds), and then:
 *   - a key starts a union entry when its page differs from the previous key's page;
 *     ballots + popcounts give every key the index of its entry (ascending pages);
 *   - entry masks are shared-memory ORs of 1 << slot into the byte of the entry, which
 *     is already the member_masks row layout (4 entries per 32-bit word);
 *   - rows are written with 16-byte (pages) and 4-byte (masks) stores, -1 / 0 padded to
 *     union_capacity, the descriptor with one 4-byte store per lane.
 * The dense group index needs the group counts of the requests before this group: every
 * CTA scans cu_seqlens_q (chunks of requests per thread, one block scan), so the kernel
 * needs no workspace and no second launch; CTA 0 of each KV head writes num_groups.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "regroup_common.cuh"
#include "selection.h"

namespace {

using pw_dev::kFullMask;
using pw_dev::kMaxTopk;

constexpr int kGroupsPerCta = 8; /* one warp per group */
constexpr int kThreads = 32 * kGroupsPerCta;
constexpr int kCandidates = 8 * kMaxTopk; /* 128: 4 per lane */
constexpr uint32_t kNoKey = 0xffffffffu;
constexpr uint32_t kMaxPageId = 1u << 29; /* page * 8 + slot fits 32 bits */

struct UnionParams {
    const int32_t *topk_ids;    /* [Hkv, N, K] */
    const int32_t *cu_seqlens;  /* [R+1] */
    const int32_t *prefix_lens; /* [R] */
    const int32_t *kv_lens;     /* [R] */
    const int32_t *perm;        /* [Hkv, N] */
    int32_t *num_groups;        /* [Hkv] */
    pw_group_desc_t *groups;    /* [Hkv, max_groups] */
    int32_t *union_pages;       /* [Hkv, max_groups, capacity] */
    uint8_t *member_masks;      /* [Hkv, max_groups, capacity] */
    int64_t max_groups;
    int32_t capacity;
    int32_t num_tokens, num_requests, topk, page_size, window, group_size;
};

/* Groups of a request of q queries: windows of W cut into runs of g (W = 0: one window). */
static __device__ __forceinline__ int32_t groups_in_request(int32_t q, int32_t window, int32_t g)
{
    if (q <= 0) return 0;
    if (window <= 0 || window >= q) return q / g + (q % g != 0);
    const int32_t per_window = window / g + (window % g != 0);
    const int32_t rest = q % window;
    return (q / window) * per_window + rest / g + (rest % g != 0);
}

static __device__ __forceinline__ int32_t groups_of(const UnionParams &p, int32_t r)
{
    int32_t b, e;
    if (!pw_dev::request_rows(p.cu_seqlens, r, p.num_tokens, &b, &e)) return 0;
    return groups_in_request(e - b, p.window, p.group_size);
}

static __device__ __forceinline__ void compare_swap(uint32_t &a, uint32_t &b, bool ascending)
{
    const uint32_t lo = min(a, b), hi = max(a, b);
    a = ascending ? lo : hi;
    b = ascending ? hi : lo;
}

/* Bitonic sort of the warp's 128 keys, ascending by element e = lane*4 + k. Strides 1 and
 * 2 stay inside a lane; strides >= 4 exchange with lane ^ (stride/4). */
static __device__ __forceinline__ void sort128(uint32_t (&key)[4], int lane)
{
#pragma unroll
    for (int size = 2; size <= kCandidates; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            if (stride >= 4) {
                const int lane_stride = stride >> 2;
                const bool lower = (lane & lane_stride) == 0;
                const bool ascending = ((lane * 4) & size) == 0;
                const bool take_min = lower == ascending;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint32_t other = __shfl_xor_sync(kFullMask, key[k], lane_stride);
                    key[k] = take_min ? min(key[k], other) : max(key[k], other);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    if (k & stride) continue;
                    compare_swap(key[k], key[k | stride], ((lane * 4 + k) & size) == 0);
                }
            }
        }
    }
}

template <bool kVecIn, bool kVecOut>
__global__ void __launch_bounds__(kThreads) union_prepare_kernel(const UnionParams p)
{
    __shared__ int32_t s_warp_sum[kGroupsPerCta];
    __shared__ int32_t s_request[kGroupsPerCta], s_offset[kGroupsPerCta];
    __shared__ alignas(16) int32_t s_pages[kGroupsPerCta][kCandidates];
    __shared__ alignas(16) uint32_t s_masks[kGroupsPerCta][kCandidates / 4];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t head = (int32_t)blockIdx.y;
    const int32_t first_group = (int32_t)blockIdx.x * kGroupsPerCta;

    /* Speculative perm load: group G starts at slot G*g whenever g divides W and every
     * earlier request's length is a multiple of W (always with one request), so the load
     * overlaps the scan below; a wrong guess costs a second load. */
    const int32_t g = p.group_size;
    const int member = lane >> 2, part = lane & 3;
    const int64_t guess_slot0 = ((int64_t)first_group + warp) * g;
    int32_t guess_orig = -1;
    if (guess_slot0 + member < p.num_tokens)
        guess_orig = __ldg(p.perm + (int64_t)head * p.num_tokens + guess_slot0 + member);

    /* --- Which request holds each of this CTA's 8 groups: exclusive scan of the groups
     * per request over contiguous chunks of requests. */
    if (tid < kGroupsPerCta) s_request[tid] = -1;
    const int32_t per_thread = (p.num_requests + kThreads - 1) / kThreads;
    const int32_t r_begin = (int32_t)min((int64_t)p.num_requests, (int64_t)tid * per_thread);
    const int32_t r_end = min(p.num_requests, r_begin + per_thread);
    int32_t local = 0;
    for (int32_t r = r_begin; r < r_end; r++) local += groups_of(p, r);
    int32_t incl = local;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int32_t v = __shfl_up_sync(kFullMask, incl, d);
        if (lane >= d) incl += v;
    }
    if (lane == 31) s_warp_sum[warp] = incl;
    __syncthreads();
    int32_t before = incl - local;
    for (int w = 0; w < warp; w++) before += s_warp_sum[w];
    if (blockIdx.x == 0 && tid == kThreads - 1) p.num_groups[head] = before + local;
    const int32_t last_group = first_group + kGroupsPerCta;
    for (int32_t r = r_begin; r < r_end && before < last_group; r++) {
        const int32_t count = groups_of(p, r);
        const int32_t lo = max(before, first_group), hi = min(before + count, last_group);
        for (int32_t gi = lo; gi < hi; gi++) {
            s_request[gi - first_group] = r;
            s_offset[gi - first_group] = gi - before;
        }
        before += count;
    }
    __syncthreads();
    const int32_t r = s_request[warp];
    if (r < 0) return; /* past the last group of this KV head */

    /* --- Slots of the group. */
    const int32_t offset = s_offset[warp];
    int32_t b, e;
    pw_dev::request_rows(p.cu_seqlens, r, p.num_tokens, &b, &e);
    const int32_t q = e - b;
    int32_t slot_begin, members;
    if (p.window > 0 && p.window < q) {
        const int32_t per_window = p.window / g + (p.window % g != 0);
        const int32_t w0 = (offset / per_window) * p.window; /* window start in the request */
        const int32_t in_window = (offset % per_window) * g;
        slot_begin = b + w0 + in_window;
        members = min(g, min(p.window, q - w0) - in_window);
    } else {
        slot_begin = b + offset * g;
        members = min(g, q - offset * g);
    }
    const int32_t prefix = __ldg(p.prefix_lens + r), kv_len = __ldg(p.kv_lens + r);

    /* --- Candidates: key = page * 8 + slot for the ids of S_i, else kNoKey. */
    uint32_t key[4] = {kNoKey, kNoKey, kNoKey, kNoKey};
    if (member < members) {
        const int32_t orig =
            slot_begin == guess_slot0
                ? guess_orig
                : __ldg(p.perm + (int64_t)head * p.num_tokens + slot_begin + member);
        if (orig >= b && orig < e) {
            uint32_t visible =
                pw_dev::visible_page_count((int64_t)prefix + (orig - b), kv_len, p.page_size);
            visible = min(visible, kMaxPageId);
            const int32_t *row = p.topk_ids + ((int64_t)head * p.num_tokens + orig) * p.topk;
            int32_t ids[4];
            if (kVecIn) {
                const int4 v = __ldcs(reinterpret_cast<const int4 *>(row) + part);
                ids[0] = v.x;
                ids[1] = v.y;
                ids[2] = v.z;
                ids[3] = v.w;
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    ids[k] = part * 4 + k < p.topk ? __ldcs(row + part * 4 + k) : -1;
            }
#pragma unroll
            for (int k = 0; k < 4; k++)
                if ((uint32_t)ids[k] < visible) key[k] = ((uint32_t)ids[k] << 3) | (uint32_t)member;
        }
    }
    sort128(key, lane);

    /* --- Union entries: a key starts one when its page differs from the previous key's. */
    const uint32_t below = __shfl_up_sync(kFullMask, key[3], 1);
    bool starts[4];
    starts[0] = key[0] != kNoKey && (lane == 0 || (below >> 3) != (key[0] >> 3));
#pragma unroll
    for (int k = 1; k < 4; k++) starts[k] = key[k] != kNoKey && (key[k - 1] >> 3) != (key[k] >> 3);
    const uint32_t lanes_lt = (1u << lane) - 1u;
    int32_t rank = 0, size = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t ballot = __ballot_sync(kFullMask, starts[k]);
        rank += __popc(ballot & lanes_lt);
        size += __popc(ballot);
    }
    reinterpret_cast<int4 *>(s_pages[warp])[lane] = make_int4(-1, -1, -1, -1);
    s_masks[warp][lane] = 0u;
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 4; k++) {
        rank += starts[k];
        if (key[k] == kNoKey) continue;
        const int32_t u = rank - 1; /* entry of this key's page */
        if (starts[k]) s_pages[warp][u] = (int32_t)(key[k] >> 3);
        atomicOr(&s_masks[warp][u >> 2], 1u << ((key[k] & 7u) + 8u * (uint32_t)(u & 3)));
    }
    __syncwarp();

    /* --- Half sizes: entries with a member in slots 0..3, in slots 4..7. */
    const uint32_t mw = s_masks[warp][lane];
    uint32_t lo = mw & 0x0f0f0f0fu, hi = (mw >> 4) & 0x0f0f0f0fu;
    lo |= lo >> 1;
    lo |= lo >> 2;
    hi |= hi >> 1;
    hi |= hi >> 2;
    const int32_t half0 = (int32_t)__reduce_add_sync(kFullMask, (uint32_t)__popc(lo & 0x01010101u));
    const int32_t half1 = (int32_t)__reduce_add_sync(kFullMask, (uint32_t)__popc(hi & 0x01010101u));

    /* --- Rows and descriptor. */
    const int64_t at = (int64_t)head * p.max_groups + first_group + warp;
    int32_t *pages_out = p.union_pages + at * p.capacity;
    uint8_t *masks_out = p.member_masks + at * p.capacity;
    if (kVecOut) {
        for (int32_t x = lane * 4; x < p.capacity; x += 128) {
            int4 pv = make_int4(-1, -1, -1, -1);
            uint32_t mv = 0u;
            if (x < kCandidates) {
                pv = reinterpret_cast<const int4 *>(s_pages[warp])[x / 4];
                mv = s_masks[warp][x / 4];
            }
            *reinterpret_cast<int4 *>(pages_out + x) = pv;
            *reinterpret_cast<uint32_t *>(masks_out + x) = mv;
        }
    } else {
        for (int32_t x = lane; x < p.capacity; x += 32) {
            pages_out[x] = x < kCandidates ? s_pages[warp][x] : -1;
            masks_out[x] =
                x < kCandidates ? (uint8_t)(s_masks[warp][x >> 2] >> (8 * (x & 3))) : (uint8_t)0;
        }
    }
    if (lane < 8) {
        const int32_t field = lane == 0 ? slot_begin : lane == 1 ? r : lane == 2 ? members
                            : lane == 3 ? size : lane == 4 ? half0 : lane == 5 ? half1 : 0;
        reinterpret_cast<int32_t *>(p.groups + at)[lane] = field;
    }
}

pw_status_t check_union_args(const pw_problem_t *problem, const int32_t *topk_ids,
                             const pw_requests_t *requests, const pw_grouping_t *grouping,
                             const int32_t *perm, const pw_union_meta_t *meta)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_grouping(grouping));
    if (!requests || !requests->cu_seqlens_q || !requests->prefix_lens || !requests->kv_lens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "requests and its cu_seqlens_q, prefix_lens, kv_lens must not be NULL");
    if (problem->num_tokens > 0 && (!topk_ids || !perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "topk_ids and perm must not be NULL");
    if (!meta) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta is NULL");
    if (!meta->num_groups || !meta->groups || !meta->union_pages || !meta->member_masks)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.num_groups, groups, union_pages and member_masks must not be NULL");
    const int64_t needed = pw_max_groups(problem, grouping);
    if (meta->max_groups < needed)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta.max_groups is %lld, < pw_max_groups %lld",
                       (long long)meta->max_groups, (long long)needed);
    if ((int64_t)meta->union_capacity < (int64_t)grouping->group_size * problem->topk)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.union_capacity is %d, < group_size %d * topk %d",
                       meta->union_capacity, grouping->group_size, problem->topk);
    if (problem->topk > kMaxTopk)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_union_prepare: topk is %d; the GPU supports 1..%d", problem->topk,
                       kMaxTopk);
    if ((uint32_t)problem->max_pages_per_request > kMaxPageId)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_union_prepare: max_pages_per_request %d > 2^29",
                       problem->max_pages_per_request);
    if (problem->num_kv_heads > 65535)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_union_prepare: num_kv_heads %d > 65535",
                       problem->num_kv_heads);
    if (needed > (int64_t)INT32_MAX - kGroupsPerCta)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_union_prepare: %lld groups per KV head",
                       (long long)needed);
    return PW_SUCCESS;
}

} // namespace

extern "C" pw_status_t pw_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                                        const pw_requests_t *requests,
                                        const pw_grouping_t *grouping, const int32_t *perm,
                                        const pw_union_meta_t *meta, pw_stream_t stream)
{
    PW_TRY(check_union_args(problem, topk_ids, requests, grouping, perm, meta));
    /* No GPU: PW_ERROR_NO_DEVICE as every device entry point, not a launch error. */
    PW_TRY(pw_check_attention_device());
    UnionParams params;
    params.topk_ids = topk_ids;
    params.cu_seqlens = requests->cu_seqlens_q;
    params.prefix_lens = requests->prefix_lens;
    params.kv_lens = requests->kv_lens;
    params.perm = perm;
    params.num_groups = meta->num_groups;
    params.groups = meta->groups;
    params.union_pages = meta->union_pages;
    params.member_masks = meta->member_masks;
    params.max_groups = meta->max_groups;
    params.capacity = meta->union_capacity;
    params.num_tokens = problem->num_tokens;
    params.num_requests = problem->num_requests;
    params.topk = problem->topk;
    params.page_size = problem->page_size;
    params.window = grouping->window;
    params.group_size = grouping->group_size;

    /* The bound covers every group; CTA 0 of each KV head also writes num_groups (so a
     * call with N = 0 still writes zeros). */
    const int64_t bound = pw_max_groups(problem, grouping);
    const dim3 grid((unsigned)((bound + kGroupsPerCta - 1) / kGroupsPerCta > 0
                                   ? (bound + kGroupsPerCta - 1) / kGroupsPerCta
                                   : 1),
                    (unsigned)problem->num_kv_heads);
    const bool vec_in = problem->topk == kMaxTopk && ((uintptr_t)topk_ids % 16u) == 0;
    const bool vec_out = meta->union_capacity % 4 == 0 &&
                         ((uintptr_t)meta->union_pages % 16u) == 0 &&
                         ((uintptr_t)meta->member_masks % 4u) == 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (vec_in && vec_out)
        union_prepare_kernel<true, true><<<grid, kThreads, 0, st>>>(params);
    else if (vec_in)
        union_prepare_kernel<true, false><<<grid, kThreads, 0, st>>>(params);
    else if (vec_out)
        union_prepare_kernel<false, true><<<grid, kThreads, 0, st>>>(params);
    else
        union_prepare_kernel<false, false><<<grid, kThreads, 0, st>>>(params);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "pw_union_prepare: kernel launch failed: %s (%s)",
                       cudaGetErrorString(err), cudaGetErrorName(err));
    return PW_SUCCESS;
}
