/* Host union metadata sized for a problem and grouping (pw_union_meta_alloc_host), so that
 * the CPU union preparation needs no hand-computed capacities. */
#include <stdint.h>
#include <stdlib.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "selection.h"

pw_status_t pw_union_meta_alloc_host(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                     pw_union_meta_t *meta)
{
    if (!meta) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "meta is NULL");
    const pw_union_meta_t empty = PW_UNION_META_INIT;
    *meta = empty;
    PW_TRY(pw_check_problem_layout(problem, NULL));
    PW_TRY(pw_check_grouping(grouping));
    const int64_t hkv = problem->num_kv_heads;
    const int64_t groups = pw_max_groups(problem, grouping);
    const int64_t capacity = (int64_t)grouping->group_size * problem->topk; /* <= 8 * 1024 */
    /* Element counts; each buffer gets at least one element so that N = 0 still allocates. */
    const double cells = (double)hkv * (double)groups;
    if (cells * (double)capacity * 4.0 > (double)SIZE_MAX / 2)
        return pw_fail(PW_ERROR_OUT_OF_MEMORY,
                       "pw_union_meta_alloc_host: %.4g groups x %lld pages do not fit in memory",
                       cells, (long long)capacity); /* cells: a double (hkv x groups may pass 2^63) */
    const size_t n_groups = (size_t)(hkv * groups) + 1, n_pages = n_groups * (size_t)capacity;
    pw_union_meta_t m = empty;
    m.max_groups = groups;
    m.union_capacity = (int32_t)capacity;
    m.num_groups = calloc((size_t)hkv, sizeof *m.num_groups);
    m.groups = calloc(n_groups, sizeof *m.groups);
    m.union_pages = calloc(n_pages, sizeof *m.union_pages);
    m.member_masks = calloc(n_pages, sizeof *m.member_masks);
    if (!m.num_groups || !m.groups || !m.union_pages || !m.member_masks) {
        pw_union_meta_free_host(&m);
        return pw_fail(PW_ERROR_OUT_OF_MEMORY,
                       "pw_union_meta_alloc_host: %lld groups x %lld pages: out of memory",
                       (long long)(hkv * groups), (long long)capacity);
    }
    *meta = m;
    return PW_SUCCESS;
}

void pw_union_meta_free_host(pw_union_meta_t *meta)
{
    if (!meta) return;
    free(meta->num_groups);
    free(meta->groups);
    free(meta->union_pages);
    free(meta->member_masks);
    const pw_union_meta_t empty = PW_UNION_META_INIT;
    *meta = empty;
}
