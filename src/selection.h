/* S_i of docs/semantics.md §1 (the pages a query selected and may see) and the grouping checks shared
 * by the regroup reference, union preparation, the union metrics and, later, the attention
 * reference. Internal header (not installed). */
#ifndef PW_SELECTION_H
#define PW_SELECTION_H

#include <stdint.h>

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Highest logical page a query may see: min(c, L - 1) / P, in 64 bits (docs/semantics.md §1).
 * Negative (no page visible) when L = 0. c: causal position, L: KV length, P: page size,
 * all in tokens. */
static inline int64_t pw_last_visible_page(int64_t causal_pos, int64_t kv_len,
                                           int32_t page_size)
{
    const int64_t last_token = causal_pos < kv_len - 1 ? causal_pos : kv_len - 1;
    return last_token < 0 ? -1 : last_token / page_size;
}

/* S_i: the distinct ids p of one Top-K row with 0 <= p <= pw_last_visible_page(c, L, P),
 * written ascending to pages_out; returns |S_i| (0..k). Every other id (negative, past
 * the KV length, wholly after c, any int32 value) is dropped.
 *   row: [k] int32 logical page ids.   pages_out: [k] int32 (may not alias row). */
int32_t pw_selection(const int32_t *row, int32_t k, int64_t causal_pos, int64_t kv_len,
                     int32_t page_size, int32_t *pages_out);

/* S_i of query row `row` (global, in request `request`) for KV head `kv_head`, reading
 * topk_ids [Hkv, N, K]. Arguments are assumed checked (pw_problem_check). */
int32_t pw_selection_of_row(const pw_problem_t *problem, const pw_requests_t *requests,
                            const int32_t *topk_ids, int32_t kv_head, int32_t request,
                            int32_t row, int32_t *pages_out);

/* Checks a grouping's layout: struct_size, window >= 0, group_size in 1..8 (not mode, which
 * union preparation ignores).
 * Errors: PW_ERROR_INVALID_ARGUMENT naming the field. */
pw_status_t pw_check_grouping(const pw_grouping_t *grouping);

/* grouping->mode is one a regroup runs (IDENTITY, GREEDY, GUARDED; AUTO belongs to plans),
 * grouping checked: else PW_ERROR_INVALID_ARGUMENT. pw_ref_regroup's and pw_regroup's. */
pw_status_t pw_check_regroup_mode(const pw_grouping_t *grouping);

/* The argument checks of a device regroup call (pw_regroup) that do not depend on the
 * device: the problem (no request arrays read: they are device data), max_pages_per_request,
 * the grouping and its mode, the request pointers, topk_ids and perm (N > 0).
 * PW_ERROR_INVALID_ARGUMENT naming the field. The CUDA build adds its size limits
 * (PW_ERROR_UNSUPPORTED); a build without CUDA makes these first, then says UNSUPPORTED. */
pw_status_t pw_check_regroup_call(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  const int32_t *perm);

/* The same for union preparation (pw_union_prepare): the problem, max_pages_per_request, the
 * grouping, the request pointers, topk_ids and perm (N > 0), meta's arrays and max_groups >=
 * pw_max_groups. PW_ERROR_INVALID_ARGUMENT. */
pw_status_t pw_check_union_prepare_call(const pw_problem_t *problem, const int32_t *topk_ids,
                                        const pw_requests_t *requests, const pw_grouping_t *grouping,
                                        const int32_t *perm, const pw_union_meta_t *meta);

/* The largest Top-K of the GPU's union preparation (src/cuda/union_group.cuh's kMaxUnionTopk):
 * a larger K is PW_ERROR_UNSUPPORTED there, before meta's capacity is checked. */
#define PW_UNION_MAX_TOPK 64

/* meta.union_capacity >= group_size x topk (pw_union_prepare's, after
 * pw_check_union_prepare_call and, on the GPU, its K <= PW_UNION_MAX_TOPK limit; the build
 * without CUDA makes it too). PW_ERROR_INVALID_ARGUMENT. */
pw_status_t pw_check_union_capacity(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                    const pw_union_meta_t *meta);

#ifdef __cplusplus
}
#endif
#endif
