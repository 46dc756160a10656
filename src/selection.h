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

#ifdef __cplusplus
}
#endif
#endif
