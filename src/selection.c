/* S_i of docs/semantics.md §1 and grouping checks (see selection.h). */
#include <stdlib.h>

#include "pw_internal.h"
#include "selection.h"

static int compare_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t pw_selection(const int32_t *row, int32_t k, int64_t causal_pos, int64_t kv_len,
                     int32_t page_size, int32_t *pages_out)
{
    const int64_t last_page = pw_last_visible_page(causal_pos, kv_len, page_size);
    int32_t n = 0;
    for (int32_t t = 0; t < k; t++)
        if (row[t] >= 0 && (int64_t)row[t] <= last_page) pages_out[n++] = row[t];
    qsort(pages_out, (size_t)n, sizeof *pages_out, compare_int32);
    int32_t distinct = 0;
    for (int32_t t = 0; t < n; t++)
        if (distinct == 0 || pages_out[t] != pages_out[distinct - 1])
            pages_out[distinct++] = pages_out[t];
    return distinct;
}

int32_t pw_selection_of_row(const pw_problem_t *problem, const pw_requests_t *requests,
                            const int32_t *topk_ids, int32_t kv_head, int32_t request,
                            int32_t row, int32_t *pages_out)
{
    const int64_t k = problem->topk;
    const int64_t causal_pos = (int64_t)requests->prefix_lens[request] +
                               (row - requests->cu_seqlens_q[request]);
    const int32_t *ids = topk_ids + ((int64_t)kv_head * problem->num_tokens + row) * k;
    return pw_selection(ids, (int32_t)k, causal_pos, requests->kv_lens[request],
                        problem->page_size, pages_out);
}

pw_status_t pw_check_regroup_mode(const pw_grouping_t *grouping)
{
    if (grouping->mode == PW_REGROUP_IDENTITY || grouping->mode == PW_REGROUP_GREEDY ||
        grouping->mode == PW_REGROUP_GUARDED)
        return PW_SUCCESS;
    return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping.mode is %d (IDENTITY 0, GREEDY 1 or GUARDED 2%s)",
                   (int)grouping->mode,
                   grouping->mode == PW_REGROUP_AUTO ? "; AUTO is a plan's mode: pw_plan_create decides per call" : "");
}

/* The request pointers and, with N > 0, topk_ids and perm. */
static pw_status_t check_call_pointers(const pw_problem_t *problem, const int32_t *topk_ids,
                                       const pw_requests_t *requests, const int32_t *perm)
{
    if (!requests || !requests->cu_seqlens_q || !requests->prefix_lens || !requests->kv_lens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests and its cu_seqlens_q, prefix_lens, kv_lens must not be NULL");
    if (problem->num_tokens > 0 && (!topk_ids || !perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "topk_ids and perm must not be NULL");
    return PW_SUCCESS;
}

pw_status_t pw_check_regroup_call(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  const int32_t *perm)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_max_pages(problem));
    PW_TRY(pw_check_grouping(grouping));
    PW_TRY(pw_check_regroup_mode(grouping));
    return check_call_pointers(problem, topk_ids, requests, perm);
}

pw_status_t pw_check_union_prepare_call(const pw_problem_t *problem, const int32_t *topk_ids,
                                        const pw_requests_t *requests, const pw_grouping_t *grouping,
                                        const int32_t *perm, const pw_union_meta_t *meta)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_max_pages(problem));
    PW_TRY(pw_check_grouping(grouping));
    PW_TRY(check_call_pointers(problem, topk_ids, requests, perm));
    if (!meta) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta is NULL");
    if (!meta->num_groups || !meta->groups || !meta->union_pages || !meta->member_masks)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.num_groups, groups, union_pages and member_masks must not be NULL");
    const int64_t needed = pw_max_groups(problem, grouping);
    if (meta->max_groups < needed)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta.max_groups is %lld, < pw_max_groups %lld",
                       (long long)meta->max_groups, (long long)needed);
    return PW_SUCCESS;
}

pw_status_t pw_check_union_capacity(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                    const pw_union_meta_t *meta)
{
    if ((int64_t)meta->union_capacity < (int64_t)grouping->group_size * problem->topk)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta.union_capacity is %d, < group_size %d * topk %d",
                       meta->union_capacity, grouping->group_size, problem->topk);
    return PW_SUCCESS;
}

pw_status_t pw_check_grouping(const pw_grouping_t *grouping)
{
    if (!grouping) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping is NULL");
    if (grouping->struct_size < sizeof(pw_grouping_t))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "grouping.struct_size is %u, expected %zu (initialise with "
                       "PW_GROUPING_INIT)",
                       grouping->struct_size, sizeof(pw_grouping_t));
    if (grouping->window < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping.window is %d (< 0)",
                       grouping->window);
    if (grouping->group_size < 1 || grouping->group_size > 8)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping.group_size is %d (1..8)",
                       grouping->group_size);
    return PW_SUCCESS;
}
