/* union_prepare.cu — union preparation on sm_90 (docs/semantics.md §4.1, paper §4.1).
 *
 * One warp per group, 8 groups per CTA: the warp loads its members' Top-K rows (lane l:
 * ids KPL*(l%4) .. KPL*(l%4)+KPL-1 of member l/4, KPL = 4 / 8 / 16 for K <= 16 / 32 / 64:
 * 16-byte loads when K = 4 KPL), makes the keys page*8 + slot
 * of the ids in S_i, and union_group_emit (union_group.cuh: warp sort, ballots, shared
 * mask bytes, row stores) writes the group. The fused regroup kernel (regroup.cu) emits
 * its groups with the same function.
 * The dense group index needs the group counts of the requests before this group: every
 * CTA scans cu_seqlens_q (chunks of requests per thread, one block scan), so the kernel
 * needs no workspace and no second launch; CTA 0 of each KV head writes num_groups.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"
#include "ptx.cuh"
#include "pw_internal.h"
#include "regroup_common.cuh"
#include "selection.h"
#include "union_group.cuh"

namespace {

using pw_dev::kFullMask;

constexpr int kGroupsPerCta = 8; /* one warp per group */
constexpr int kThreads = 32 * kGroupsPerCta;
using pw_dev::kNoKey;
constexpr uint32_t kMaxPageId = pw_dev::kMaxUnionPageId; /* page * 8 + slot fits 32 bits */

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
    uint32_t *sched_count;      /* [PW_SCHED_CLASSES] or NULL: the attention CTAs' order */
    int32_t *sched_list;        /* [PW_SCHED_CLASSES, sched_stride] (pw_vt_buffers_t) */
    int64_t sched_stride;
    int sched_dense;            /* items: 0 4-query halves, 1 groups (dense G = 8), 2 pairs (dense G = 4) */
    uint32_t *sched_pairs;      /* sched_dense 2: [Hkv, max_groups], zeroed: a pair's first size */
    /* kAlt kernels (pw_vt_buffers_t.perm_alt): the stacked tile's perm, the call's choice */
    const int32_t *perm_alt;    /* [Hkv, N] */
    const unsigned long long *stack_stat;
    int32_t *perm_out;          /* = perm: written from perm_alt when the stacked tile runs */
    int32_t heads_per_kv;       /* G: PW_STACK_CHOSEN's ratio */
};

/* Appends work item `item` of `pages` pages to its size class's list (any order inside a
 * class: the outputs do not depend on the CTA order). Classes of Kd / 2 pages (Kd = 4 KPL:
 * 8 pages for K <= 16, 16 for K 17..32, 32 above), so that 0..8 Kd pages spread over the 17
 * classes. */
template <int KPL>
static __device__ __forceinline__ void sched_append(const UnionParams &p, int32_t pages, int64_t item)
{
    constexpr int kShift = KPL == 4 ? 3 : KPL == 8 ? 4 : 5;
    const int c = min(pages >> kShift, PW_SCHED_CLASSES - 1);
    const uint32_t at = atomicAdd(p.sched_count + c, 1u);
    p.sched_list[(int64_t)c * p.sched_stride + at] = (int32_t)item;
}

static __device__ __forceinline__ int32_t groups_of(const UnionParams &p, int32_t r)
{
    return pw_dev::groups_of_request(p.cu_seqlens, r, p.num_tokens, p.window, p.group_size);
}

/* kAlt: the permutation is perm_alt when the call runs the stacked tile (PW_STACK_CHOSEN on
 * stack_stat, whose counts the mark launch finished before this launch), which each slot's
 * reader then copies into perm_out; else perm (pw_vt_buffers_t.perm_alt). */
template <int KPL, bool kVecIn, bool kVecOut, bool kAlt = false, bool kPdl = false>
static __device__ __forceinline__ void union_prepare_body(const UnionParams &p)
{
    constexpr int kCandidates = 32 * KPL; /* 8 members x K */
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
    const int32_t *perm = p.perm;
    bool use_alt = false;
    /* kPdl: the permutations and stack_stat are the previous grids' outputs, read after
     * griddepcontrol.wait below; otherwise here, overlapping the scan. */
    auto load_guess = [&]() {
        if constexpr (kAlt) { /* both guesses in flight with the choice's counts */
            const unsigned long long pair_pages = __ldg(p.stack_stat), block_pages = __ldg(p.stack_stat + 1);
            int32_t guess_alt = -1;
            if (guess_slot0 + member < p.num_tokens) { /* perm: through L2 (other CTAs may write it, below) */
                guess_orig = __ldcg(p.perm + (int64_t)head * p.num_tokens + guess_slot0 + member);
                guess_alt = __ldg(p.perm_alt + (int64_t)head * p.num_tokens + guess_slot0 + member);
            }
            use_alt = PW_STACK_CHOSEN(p.heads_per_kv, pair_pages, block_pages); /* CTA-uniform */
            if (use_alt) {
                perm = p.perm_alt;
                guess_orig = guess_alt;
            }
        } else if (guess_slot0 + member < p.num_tokens) {
            guess_orig = __ldg(p.perm + (int64_t)head * p.num_tokens + guess_slot0 + member);
        }
    };
    if constexpr (!kPdl) load_guess();

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
    if constexpr (kPdl) {
        pw::grid_dependency_wait(); /* the regroup's permutations (and the mark's stack_stat) are complete */
        load_guess();
    }
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
    uint32_t key[KPL];
#pragma unroll
    for (int k = 0; k < KPL; k++) key[k] = kNoKey;
    if (member < members) {
        const int32_t orig =
            slot_begin == guess_slot0
                ? guess_orig
                : __ldg(perm + (int64_t)head * p.num_tokens + slot_begin + member);
        /* the slot's one writer: the group's member lane of part 0 (no other CTA reads it) */
        if (kAlt && use_alt && part == 0) p.perm_out[(int64_t)head * p.num_tokens + slot_begin + member] = orig;
        if (orig >= b && orig < e) {
            uint32_t visible =
                pw_dev::visible_page_count((int64_t)prefix + (orig - b), kv_len, p.page_size);
            visible = min(visible, kMaxPageId);
            const int32_t *row = p.topk_ids + ((int64_t)head * p.num_tokens + orig) * p.topk;
            int32_t ids[KPL];
            if (kVecIn) {
#pragma unroll
                for (int c = 0; c < KPL / 4; c++) {
                    const int4 v = __ldcs(reinterpret_cast<const int4 *>(row) + part * (KPL / 4) + c);
                    ids[4 * c + 0] = v.x;
                    ids[4 * c + 1] = v.y;
                    ids[4 * c + 2] = v.z;
                    ids[4 * c + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int k = 0; k < KPL; k++)
                    ids[k] = part * KPL + k < p.topk ? __ldcs(row + part * KPL + k) : -1;
            }
#pragma unroll
            for (int k = 0; k < KPL; k++)
                if ((uint32_t)ids[k] < visible) key[k] = ((uint32_t)ids[k] << 3) | (uint32_t)member;
        }
    }
    const int64_t at = (int64_t)head * p.max_groups + first_group + warp;
    pw_dev::UnionGroupOut out;
    out.pages = p.union_pages + at * p.capacity;
    out.masks = p.member_masks + at * p.capacity;
    out.desc = p.groups + at;
    out.capacity = p.capacity;
    out.slot_begin = slot_begin;
    out.request = r;
    out.members = members;
    const pw_dev::UnionGroupSizes sizes =
        pw_dev::union_group_emit<kVecOut, KPL>(key, lane, s_pages[warp], s_masks[warp], out);
    if (p.sched_count && lane == 0) {
        // Every item the attention kernel runs: each group (dense), each pair of groups
        // (dense G = 4: dense4_work's pairing), each half with a member (the lean kernel's
        // cta_work), including those with an empty union.
        if (p.sched_dense == 2) {
            // The group's index in its window (in its request when the request fits one
            // window or W = 0) and the window's group count: groups 2c and 2c + 1 of a
            // window are a pair, led by 2c.
            int32_t index = offset, window_groups = (q + g - 1) / g;
            if (p.window > 0 && p.window < q) {
                const int32_t per_window = p.window / g + (p.window % g != 0);
                const int32_t w0 = (offset / per_window) * p.window;
                index = offset % per_window;
                window_groups = (min(p.window, q - w0) + g - 1) / g;
            }
            if (index % 2 == 0 && index + 1 >= window_groups) {
                sched_append<KPL>(p, sizes.size, at); // a leader without a partner
            } else {
                // The pair's second warp to get here appends it, with the two union sizes'
                // sum (an upper bound of the merged union; each size <= 8 K <= 512).
                const int64_t leader = at - (index % 2);
                const uint32_t first = atomicAdd(p.sched_pairs + leader, (uint32_t)sizes.size | 0x10000u);
                if (first >> 16) sched_append<KPL>(p, (int32_t)(first & 0xffffu) + sizes.size, leader);
            }
        } else if (p.sched_dense) {
            sched_append<KPL>(p, sizes.size, at);
        } else {
            sched_append<KPL>(p, sizes.half0, 2 * at);
            if (members > 4) sched_append<KPL>(p, sizes.half1, 2 * at + 1);
        }
    }
}

/* K <= 32 (4 or 8 keys per lane); K = 64 (16 per lane) with a minimum of one CTA per SM,
 * without which ptxas held the kernel at 64 registers and spilled 16 bytes (95 with it). */
template <int KPL, bool kVecIn, bool kVecOut, bool kPdl = false>
__global__ void __launch_bounds__(kThreads) union_prepare_kernel(const UnionParams p)
{
    union_prepare_body<KPL, kVecIn, kVecOut, false, kPdl>(p);
}

/* K <= 16 with pw_vt_buffers_t.perm_alt (the stacked tile's calls only). kPdl: launched as
 * a programmatic dependent of the regroup (pw_vt_buffers_t.pdl; the by-tile calls run this
 * kernel, the calls without the pre-pass the plain one). */
template <bool kVecIn, bool kVecOut, bool kPdl = false>
__global__ void __launch_bounds__(kThreads) union_prepare_kernel_alt(const UnionParams p)
{
    union_prepare_body<4, kVecIn, kVecOut, true, kPdl>(p);
}

template <bool kVecIn, bool kVecOut>
__global__ void __launch_bounds__(kThreads, 1) union_prepare_kernel_k64(const UnionParams p)
{
    union_prepare_body<16, kVecIn, kVecOut>(p);
}

/* An ordinary launch, or (pdl) one with cudaLaunchAttributeProgrammaticStreamSerialization:
 * the kernel may start while the previous kernel on the stream (the regroup, which
 * signals griddepcontrol.launch_dependents before its greedy loop) still runs; it waits
 * for it before reading its outputs. */
template <bool kPdl>
static void launch_maybe_pdl(void (*kernel)(UnionParams), dim3 grid, cudaStream_t st, const UnionParams &params)
{
    if constexpr (!kPdl) {
        kernel<<<grid, kThreads, 0, st>>>(params);
    } else {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = st;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        (void)cudaLaunchKernelEx(&cfg, kernel, params); /* its error is the launch check's */
    }
}

/* kAlt (K <= 16, pw_vt_buffers_t.perm_alt): union_prepare_kernel_alt. */
template <int KPL, bool kVecIn, bool kVecOut, bool kAlt, bool kPdl>
void launch_union_prepare_kernel(const UnionParams &params, dim3 grid, cudaStream_t st)
{
    static_assert(!kAlt || KPL == 4, "the stacked tile's calls have K <= 16");
    /* also the K <= 16 kernel without perm_alt (calls without the
     * V^T pre-pass, whose regroup is on the serial path, e.g. chunks of fewer than 4,096
     * queries) */
    static_assert(!kPdl || KPL == 4, "only the K <= 16 kernels are launched as programmatic dependents");
    if constexpr (kAlt) launch_maybe_pdl<kPdl>(union_prepare_kernel_alt<kVecIn, kVecOut, kPdl>, grid, st, params);
    else if constexpr (KPL == 16) launch_maybe_pdl<false>(union_prepare_kernel_k64<kVecIn, kVecOut>, grid, st, params);
    else launch_maybe_pdl<kPdl>(union_prepare_kernel<KPL, kVecIn, kVecOut, kPdl>, grid, st, params);
}

template <int KPL, bool kAlt = false, bool kPdl = false>
void launch_union_prepare_at(const UnionParams &params, bool vec_in, bool vec_out, dim3 grid, cudaStream_t st)
{
    if (vec_in && vec_out) launch_union_prepare_kernel<KPL, true, true, kAlt, kPdl>(params, grid, st);
    else if (vec_in) launch_union_prepare_kernel<KPL, true, false, kAlt, kPdl>(params, grid, st);
    else if (vec_out) launch_union_prepare_kernel<KPL, false, true, kAlt, kPdl>(params, grid, st);
    else launch_union_prepare_kernel<KPL, false, false, kAlt, kPdl>(params, grid, st);
}

/* pdl with K <= 16 only (KPL 4): the by-tile calls (the alt kernel) and the calls without
 * the pre-pass (the plain kernel). */
template <int KPL, bool kAlt = false>
void launch_union_prepare(const UnionParams &params, bool vec_in, bool vec_out, dim3 grid, cudaStream_t st,
                          bool pdl = false)
{
    if constexpr (KPL == 4) {
        if (pdl) {
            launch_union_prepare_at<KPL, kAlt, true>(params, vec_in, vec_out, grid, st);
            return;
        }
    }
    launch_union_prepare_at<KPL, kAlt, false>(params, vec_in, vec_out, grid, st);
}

} // namespace

static_assert(pw_dev::kMaxUnionTopk == PW_UNION_MAX_TOPK, "selection.h's copy of the K limit");

/* Host checks of pw_union_prepare (also made by the fused regroup entry, regroup.cu). */
extern "C" pw_status_t pw_check_union_prepare_args(const pw_problem_t *problem,
                                                   const int32_t *topk_ids,
                                                   const pw_requests_t *requests,
                                                   const pw_grouping_t *grouping,
                                                   const int32_t *perm,
                                                   const pw_union_meta_t *meta)
{
    PW_TRY(pw_check_union_prepare_call(problem, topk_ids, requests, grouping, perm, meta)); /* selection.c */
    const int64_t needed = pw_max_groups(problem, grouping);
    if (problem->topk > pw_dev::kMaxUnionTopk)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_union_prepare: topk is %d; the GPU supports 1..%d", problem->topk,
                       pw_dev::kMaxUnionTopk);
    PW_TRY(pw_check_union_capacity(problem, grouping, meta)); /* selection.c: both builds */
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


extern "C" pw_status_t pw_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                                        const pw_requests_t *requests,
                                        const pw_grouping_t *grouping, const int32_t *perm,
                                        const pw_union_meta_t *meta, pw_stream_t stream)
{
    return pw_union_prepare_scheduled(problem, topk_ids, requests, grouping, perm, meta, NULL, stream);
}

extern "C" pw_status_t pw_union_prepare_clear_schedule(const pw_problem_t *problem, const pw_union_meta_t *meta,
                                                      const pw_vt_buffers_t *vt, pw_stream_t stream)
{
    if (!vt || !vt->sched_count) return PW_SUCCESS;
    const size_t bytes = vt->sched_dense == 2 ? PW_SCHED_COUNTS_BYTES + (size_t)problem->num_kv_heads *
                                                                           (size_t)meta->max_groups * sizeof(uint32_t)
                                              : PW_SCHED_CLASSES * sizeof(uint32_t);
    const cudaError_t e = cudaMemsetAsync(vt->sched_count, 0, bytes, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "pw_union_prepare: clearing the schedule's counts: %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_union_prepare_scheduled(const pw_problem_t *problem, const int32_t *topk_ids,
                                                const pw_requests_t *requests,
                                                const pw_grouping_t *grouping, const int32_t *perm,
                                                const pw_union_meta_t *meta, const pw_vt_buffers_t *vt,
                                                pw_stream_t stream)
{
    PW_TRY(pw_check_union_prepare_args(problem, topk_ids, requests, grouping, perm, meta));
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
    params.sched_count = vt ? vt->sched_count : NULL;
    params.sched_list = vt ? vt->sched_list : NULL;
    params.sched_stride = vt ? vt->sched_stride : 0;
    params.sched_dense = vt ? vt->sched_dense : 0;
    /* The pair schedule's scratch follows the counts (pw_vt_buffers_t). */
    params.sched_pairs = params.sched_count && params.sched_dense == 2
                             ? (uint32_t *)(void *)((uint8_t *)params.sched_count + PW_SCHED_COUNTS_BYTES)
                             : NULL;
    params.perm_alt = vt ? vt->perm_alt : NULL;
    params.stack_stat = vt ? vt->stack_stat : NULL;
    params.perm_out = const_cast<int32_t *>(perm);
    params.heads_per_kv = problem->q_heads_per_kv;
    if (params.perm_alt && (vt->stack_mode != PW_STACK_PER_CALL || !vt->stack_stat || problem->topk > 16 ||
                            params.perm_alt == perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_union_prepare: perm_alt needs stack_mode PER_CALL, stack_stat, K <= 16 and a buffer other "
                       "than perm");
    if (vt && vt->pdl && problem->topk > 16)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_union_prepare: a programmatic-dependent launch (pdl) needs K <= 16");

    /* The bound covers every group; CTA 0 of each KV head also writes num_groups (so a
     * call with N = 0 still writes zeros). */
    const int64_t bound = pw_max_groups(problem, grouping);
    const dim3 grid((unsigned)((bound + kGroupsPerCta - 1) / kGroupsPerCta > 0
                                   ? (bound + kGroupsPerCta - 1) / kGroupsPerCta
                                   : 1),
                    (unsigned)problem->num_kv_heads);
    const int kpl = problem->topk <= 16 ? 4 : problem->topk <= 32 ? 8 : 16; /* keys per lane */
    const bool vec_in = problem->topk == 4 * kpl && ((uintptr_t)topk_ids % 16u) == 0;
    const bool vec_out = meta->union_capacity % 4 == 0 &&
                         ((uintptr_t)meta->union_pages % 16u) == 0 &&
                         ((uintptr_t)meta->member_masks % 4u) == 0;
    cudaStream_t st = (cudaStream_t)stream;
    const bool pdl = vt && vt->pdl;
    if (params.sched_count && !pdl) /* the class counts (and the pairs' sizes) start at zero in every call; a pdl launch's caller cleared them */
        PW_TRY(pw_union_prepare_clear_schedule(problem, meta, vt, stream));
    if (params.perm_alt) launch_union_prepare<4, true>(params, vec_in, vec_out, grid, st, pdl);
    else if (kpl == 4) launch_union_prepare<4>(params, vec_in, vec_out, grid, st, pdl);
    else if (kpl == 8) launch_union_prepare<8>(params, vec_in, vec_out, grid, st);
    else launch_union_prepare<16>(params, vec_in, vec_out, grid, st);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return pw_fail(PW_ERROR_CUDA, "pw_union_prepare: kernel launch failed: %s (%s)",
                       cudaGetErrorString(err), cudaGetErrorName(err));
    return PW_SUCCESS;
}

/* Top-K rows of K ids padded to the device's K (16, 32 or 64) with -1 (pw_sparse_prefill):
 * every later step reads k_padded ids per row, and -1 is an ignored id (semantics §1), so
 * the support sets, the unions and the outputs are those of the K ids. */
__global__ void pad_topk_kernel(const int32_t *src, int32_t k, int32_t k_padded, int32_t *dst, int64_t rows)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; // one output id
    if (i >= rows * k_padded) return;
    const int64_t row = i / k_padded;
    const int32_t j = (int32_t)(i % k_padded);
    dst[i] = j < k ? src[row * k + j] : -1;
}

extern "C" pw_status_t pw_pad_topk(const int32_t *topk_ids, int32_t k, int32_t k_padded, int32_t *padded,
                                   int64_t rows, pw_stream_t stream)
{
    if (rows <= 0) return PW_SUCCESS;
    if (k < 1 || k >= k_padded || k_padded > pw_dev::kMaxUnionTopk || !topk_ids || !padded)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_pad_topk: k %d, k_padded %d (1 <= k < k_padded <= %d) or a NULL buffer",
                       k, k_padded, pw_dev::kMaxUnionTopk);
    if (rows > INT64_MAX / 64 - 256) return pw_fail(PW_ERROR_UNSUPPORTED, "Top-K padding: %lld rows", (long long)rows);
    const int64_t blocks = (rows * k_padded + 255) / 256;
    if (blocks > 0x7fffffff) return pw_fail(PW_ERROR_UNSUPPORTED, "Top-K padding: %lld rows", (long long)rows);
    pad_topk_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(topk_ids, k, k_padded, padded, rows);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "Top-K padding launch: %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}
