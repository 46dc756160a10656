/* CPU reference of union preparation (docs/semantics.md §4, paper §4.1) and the logical-reuse metrics
 * of docs/semantics.md §2: per group, the ascending union of its members' S_i, member masks whose bit
 * is the execution slot, and the group descriptor. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pw_internal.h"
#include "selection.h"

static int compare_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Every perm row of every KV head must be a bijection inside each request. seen: [N]. */
static pw_status_t check_perm(const pw_problem_t *problem, const pw_requests_t *requests,
                              const int32_t *perm, uint8_t *seen)
{
    const int32_t n_rows = problem->num_tokens;
    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        const int32_t *perm_h = perm + (int64_t)h * n_rows;
        memset(seen, 0, (size_t)n_rows);
        for (int32_t r = 0; r < problem->num_requests; r++) {
            const int32_t begin = requests->cu_seqlens_q[r], end = requests->cu_seqlens_q[r + 1];
            for (int32_t s = begin; s < end; s++) {
                const int32_t row = perm_h[s];
                if (row < begin || row >= end)
                    return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                                   "perm[kv head %d, slot %d] is %d, outside request %d rows "
                                   "[%d, %d)",
                                   h, s, row, r, begin, end);
                if (seen[row])
                    return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                                   "perm[kv head %d, slot %d] repeats row %d (not a bijection "
                                   "inside request %d)",
                                   h, s, row, r);
                seen[row] = 1;
            }
        }
    }
    return PW_SUCCESS;
}

/* Union, member masks and descriptor of the group of slots [slot_begin, slot_begin + m)
 * of KV head h, request r. selected: [g, K] and merged: [g * K] scratch. */
static void prepare_group(const pw_problem_t *problem, const int32_t *topk_ids,
                          const pw_requests_t *requests, const int32_t *perm_h, int32_t h,
                          int32_t r, int32_t slot_begin, int32_t m, int32_t union_capacity,
                          int32_t *union_pages, uint8_t *member_masks, pw_group_desc_t *desc,
                          int32_t *selected, int32_t *count, int32_t *merged)
{
    const int32_t k = problem->topk;
    int32_t total = 0;
    for (int32_t s = 0; s < m; s++) {
        int32_t *sel = selected + (int64_t)s * k;
        count[s] = pw_selection_of_row(problem, requests, topk_ids, h, r, perm_h[slot_begin + s],
                                       sel);
        for (int32_t t = 0; t < count[s]; t++) merged[total++] = sel[t];
    }
    qsort(merged, (size_t)total, sizeof *merged, compare_int32);
    int32_t size = 0;
    for (int32_t t = 0; t < total; t++)
        if (size == 0 || merged[t] != merged[size - 1]) merged[size++] = merged[t];

    for (int32_t u = 0; u < union_capacity; u++) {
        union_pages[u] = u < size ? merged[u] : -1;
        member_masks[u] = 0;
    }
    for (int32_t s = 0; s < m; s++) {
        const int32_t *sel = selected + (int64_t)s * k;
        for (int32_t t = 0; t < count[s]; t++) {
            const int32_t *hit = bsearch(&sel[t], union_pages, (size_t)size, sizeof *union_pages,
                                         compare_int32);
            member_masks[hit - union_pages] |= (uint8_t)(1u << s);
        }
    }
    desc->slot_begin = slot_begin;
    desc->request = r;
    desc->num_members = m;
    desc->union_size = size;
    desc->half_union_size[0] = 0;
    desc->half_union_size[1] = 0;
    for (int32_t u = 0; u < size; u++) {
        desc->half_union_size[0] += (member_masks[u] & 0x0Fu) != 0;
        desc->half_union_size[1] += (member_masks[u] & 0xF0u) != 0;
    }
    desc->reserved[0] = 0;
    desc->reserved[1] = 0;
}

static pw_status_t check_meta_pointers(const pw_union_meta_t *meta)
{
    if (!meta) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta is NULL");
    if (!meta->num_groups || !meta->groups || !meta->union_pages || !meta->member_masks)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.num_groups, groups, union_pages and member_masks must not be NULL");
    if (meta->max_groups < 0 || meta->union_capacity < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.max_groups (%lld) and meta.union_capacity (%d) must be >= 0",
                       (long long)meta->max_groups, meta->union_capacity);
    return PW_SUCCESS;
}

pw_status_t pw_ref_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                                 const pw_requests_t *requests, const pw_grouping_t *grouping,
                                 const int32_t *perm, pw_union_meta_t *meta)
{
    if (!requests) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests is NULL");
    PW_TRY(pw_check_problem_layout(problem, requests));
    PW_TRY(pw_check_grouping(grouping));
    PW_TRY(check_meta_pointers(meta));
    const int32_t n_rows = problem->num_tokens, g = grouping->group_size, k = problem->topk;
    if (n_rows > 0 && (!topk_ids || !perm))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "topk_ids and perm must not be NULL");
    const int64_t needed_groups = pw_max_groups(problem, grouping);
    if (meta->max_groups < needed_groups)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta.max_groups is %lld, < pw_max_groups %lld",
                       (long long)meta->max_groups, (long long)needed_groups);
    if ((int64_t)meta->union_capacity < (int64_t)g * k)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta.union_capacity is %d, < group_size %d * topk %d",
                       meta->union_capacity, g, k);

    uint8_t *seen = malloc((size_t)n_rows + 1);
    int32_t *selected = malloc((size_t)g * (size_t)k * sizeof *selected);
    int32_t *merged = malloc((size_t)g * (size_t)k * sizeof *merged);
    int32_t count[8];
    pw_status_t status = PW_SUCCESS;
    if (!seen || !selected || !merged) {
        status = pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_ref_union_prepare: scratch");
        goto done;
    }
    status = check_perm(problem, requests, perm, seen);
    if (status != PW_SUCCESS) goto done;

    const int64_t cap = meta->union_capacity;
    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        const int32_t *perm_h = perm + (int64_t)h * n_rows;
        int64_t num = 0; /* groups written for this KV head */
        for (int32_t r = 0; r < problem->num_requests; r++) {
            const int32_t begin = requests->cu_seqlens_q[r], end = requests->cu_seqlens_q[r + 1];
            const int32_t step = grouping->window > 0 ? grouping->window : end - begin;
            /* w0 + step may exceed INT32_MAX (W is any int32 >= 1): stepped in 64 bits. */
            for (int64_t next = begin; next < end; next += step) {
                const int32_t w0 = (int32_t)next;
                const int32_t w_end = end - w0 < step ? end : w0 + step;
                for (int32_t s0 = w0; s0 < w_end; s0 += g, num++) {
                    const int32_t m = w_end - s0 < g ? w_end - s0 : g;
                    const int64_t at = (int64_t)h * meta->max_groups + num;
                    prepare_group(problem, topk_ids, requests, perm_h, h, r, s0, m,
                                  meta->union_capacity, meta->union_pages + at * cap,
                                  meta->member_masks + at * cap, meta->groups + at, selected,
                                  count, merged);
                }
            }
        }
        meta->num_groups[h] = (int32_t)num;
    }
done:
    free(seen);
    free(selected);
    free(merged);
    return status;
}

/* Adds group `at` of meta (flat index over [Hkv, max_groups]) to stats. */
static pw_status_t add_group(const pw_union_meta_t *meta, int64_t at, pw_union_stats_t *stats)
{
    const pw_group_desc_t *desc = meta->groups + at;
    const uint8_t *masks = meta->member_masks + at * meta->union_capacity;
    /* Counts a union preparation cannot write: wrong metadata (not prepared, or another
     * problem's), reported instead of summed. */
    if (desc->num_members < 1 || desc->union_size < 0 || desc->union_size > meta->union_capacity ||
        desc->half_union_size[0] < 0 || desc->half_union_size[1] < 0 ||
        desc->half_union_size[0] > desc->union_size || desc->half_union_size[1] > desc->union_size)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta group %lld of kv head %lld: num_members %d, union_size %d, half unions %d / %d "
                       "(need num_members >= 1 and 0 <= halves <= union_size <= union_capacity %d)",
                       (long long)(at % meta->max_groups), (long long)(at / meta->max_groups), desc->num_members,
                       desc->union_size, desc->half_union_size[0], desc->half_union_size[1], meta->union_capacity);
    stats->queries += desc->num_members;
    stats->groups += 1;
    for (int32_t u = 0; u < desc->union_size && u < meta->union_capacity; u++)
        for (uint32_t bits = masks[u]; bits; bits &= bits - 1u) stats->selections += 1;
    stats->union_visits += desc->union_size;
    stats->c4 += desc->half_union_size[0] + desc->half_union_size[1];
    return PW_SUCCESS;
}

static void finish(pw_union_stats_t *stats)
{
    stats->rho_q =
        stats->union_visits > 0 ? (double)stats->selections / (double)stats->union_visits : 0.0;
}

static pw_status_t check_num_groups(const pw_problem_t *problem, const pw_union_meta_t *meta)
{
    for (int32_t h = 0; h < problem->num_kv_heads; h++)
        if (meta->num_groups[h] < 0 || meta->num_groups[h] > meta->max_groups)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "meta.num_groups[%d] is %d, outside 0..max_groups %lld", h,
                           meta->num_groups[h], (long long)meta->max_groups);
    return PW_SUCCESS;
}

pw_status_t pw_union_stats(const pw_problem_t *problem, const pw_union_meta_t *meta,
                           pw_union_stats_t *total, pw_union_stats_t *per_kv_head)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(check_meta_pointers(meta));
    if (!total) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "total is NULL");
    PW_TRY(check_num_groups(problem, meta));
    memset(total, 0, sizeof *total);
    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        pw_union_stats_t head;
        memset(&head, 0, sizeof head);
        for (int32_t i = 0; i < meta->num_groups[h]; i++)
            PW_TRY(add_group(meta, (int64_t)h * meta->max_groups + i, &head));
        finish(&head);
        if (per_kv_head) per_kv_head[h] = head;
        total->queries += head.queries;
        total->groups += head.groups;
        total->selections += head.selections;
        total->union_visits += head.union_visits;
        total->c4 += head.c4;
    }
    finish(total);
    return PW_SUCCESS;
}

pw_status_t pw_union_stats_windows(const pw_problem_t *problem, const pw_requests_t *requests,
                                   const pw_grouping_t *grouping, const pw_union_meta_t *meta,
                                   pw_window_stats_t *window_stats_out, int64_t capacity,
                                   int64_t *count)
{
    if (!requests) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests is NULL");
    PW_TRY(pw_check_problem_layout(problem, requests));
    PW_TRY(pw_check_grouping(grouping));
    PW_TRY(check_meta_pointers(meta));
    if (!count) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "count is NULL");
    if (window_stats_out && capacity < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_union_stats_windows: capacity is %lld (< 0)",
                       (long long)capacity);
    PW_TRY(check_num_groups(problem, meta));
    const int32_t window = grouping->window;
    int64_t num = 0;
    pw_window_stats_t current;
    memset(&current, 0, sizeof current);
    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        for (int32_t i = 0; i < meta->num_groups[h]; i++) {
            const int64_t at = (int64_t)h * meta->max_groups + i;
            const pw_group_desc_t *desc = meta->groups + at;
            const int32_t r = desc->request;
            if (r < 0 || r >= problem->num_requests)
                return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                               "meta group %d of kv head %d has request %d (0..%d)", i, h, r,
                               problem->num_requests - 1);
            const int32_t begin = requests->cu_seqlens_q[r], end = requests->cu_seqlens_q[r + 1];
            if (desc->slot_begin < begin || desc->slot_begin >= end)
                return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                               "meta group %d of kv head %d starts at slot %d, outside request "
                               "%d slots [%d, %d)",
                               i, h, desc->slot_begin, r, begin, end);
            const int32_t k = window > 0 ? (desc->slot_begin - begin) / window : 0;
            if (num == 0 || current.kv_head != h || current.request != r || current.window != k) {
                if (num > 0 && num <= capacity && window_stats_out) {
                    finish(&current.stats);
                    window_stats_out[num - 1] = current;
                }
                memset(&current, 0, sizeof current);
                current.kv_head = h;
                current.request = r;
                current.window = k;
                current.slot_begin = window > 0 ? begin + k * window : begin;
                current.num_slots = window > 0 && end - current.slot_begin > window
                                        ? window
                                        : end - current.slot_begin;
                num++;
            }
            PW_TRY(add_group(meta, at, &current.stats));
        }
    }
    if (num > 0 && num <= capacity && window_stats_out) {
        finish(&current.stats);
        window_stats_out[num - 1] = current;
    }
    *count = num;
    if (window_stats_out && capacity < num)
        return pw_fail(PW_ERROR_INSUFFICIENT_WORKSPACE,
                       "pw_union_stats_windows: capacity %lld < %lld windows",
                       (long long)capacity, (long long)num);
    return PW_SUCCESS;
}

pw_status_t pw_ref_grouping_stats(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  pw_union_stats_t *total, pw_union_stats_t *per_kv_head)
{
    if (!requests) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests is NULL");
    PW_TRY(pw_check_problem_layout(problem, requests));
    PW_TRY(pw_check_grouping(grouping));
    /* The metadata sized (and its size checked against the address space) as
     * pw_union_meta_alloc_host does; perm [Hkv, N] (at most 2^31 x 2^31 entries: the product
     * checked in double before it is formed). */
    pw_union_meta_t meta;
    PW_TRY(pw_union_meta_alloc_host(problem, grouping, &meta));
    const double perm_bytes = (double)problem->num_kv_heads * (double)problem->num_tokens * sizeof(int32_t);
    int32_t *perm = perm_bytes < (double)SIZE_MAX / 2 ? malloc((size_t)perm_bytes + 1) : NULL;
    pw_status_t status;
    if (!perm)
        status = pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_ref_grouping_stats: a permutation of %.4g entries", perm_bytes / 4);
    else
        status = pw_ref_regroup(problem, topk_ids, requests, grouping, perm);
    if (status == PW_SUCCESS)
        status = pw_ref_union_prepare(problem, topk_ids, requests, grouping, perm, &meta);
    if (status == PW_SUCCESS) status = pw_union_stats(problem, &meta, total, per_kv_head);
    pw_union_meta_free_host(&meta);
    free(perm);
    return status;
}
