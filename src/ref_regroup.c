/* CPU reference of online regroup (docs/semantics.md §3, paper §3.1 Algorithm 1): identity, greedy and
 * guarded orders, window by window.
 *
 * Sets never depend on a page-count capacity: each window's pages are renumbered to dense
 * indices 0..D-1 of the window's distinct valid pages (ascending), D <= window * K, so
 * the result is the same for any context length (the paper's GPU version stops at 512
 * pages; this reference has no such cliff). Membership of U is a stamp per dense page. */
#include <stdint.h>
#include <stdlib.h>

#include "pw_internal.h"
#include "selection.h"

/* One window's selections S_j (j = 0..n-1 local query ids, ascending original ids). */
typedef struct window_sets {
    int32_t n;         /* queries in the window */
    int32_t k;         /* Top-K: row stride of page */
    int32_t *count;    /* [n] |S_j| */
    int32_t *page;     /* [n, k] dense page indices of S_j (first count[j] valid) */
    int32_t *distinct; /* [n * k] scratch: the window's distinct logical pages */
    int32_t *stamp;    /* [n * k] per dense page: group number that holds it in U */
    int32_t next_stamp;
} window_sets_t;

static int compare_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Reads S_j of rows [row0, row0 + n) of request r, KV head h, and renumbers the pages. */
static void load_window(const pw_problem_t *problem, const pw_requests_t *requests,
                        const int32_t *topk_ids, int32_t h, int32_t r, int32_t row0, int32_t n,
                        window_sets_t *ws)
{
    const int32_t k = problem->topk;
    ws->n = n;
    ws->k = k;
    int32_t total = 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t *s = ws->page + (int64_t)j * k;
        ws->count[j] = pw_selection_of_row(problem, requests, topk_ids, h, r, row0 + j, s);
        for (int32_t t = 0; t < ws->count[j]; t++) ws->distinct[total++] = s[t];
    }
    qsort(ws->distinct, (size_t)total, sizeof *ws->distinct, compare_int32);
    int32_t d = 0;
    for (int32_t t = 0; t < total; t++)
        if (d == 0 || ws->distinct[t] != ws->distinct[d - 1]) ws->distinct[d++] = ws->distinct[t];
    for (int32_t j = 0; j < n; j++) {
        int32_t *s = ws->page + (int64_t)j * k;
        for (int32_t t = 0; t < ws->count[j]; t++) {
            const int32_t *hit = bsearch(&s[t], ws->distinct, (size_t)d, sizeof *ws->distinct,
                                         compare_int32);
            s[t] = (int32_t)(hit - ws->distinct);
        }
    }
    for (int32_t t = 0; t < d; t++) ws->stamp[t] = -1;
    ws->next_stamp = 0;
}

/* |S_j \ U| where U = pages stamped `stamp`. */
static int32_t new_pages(const window_sets_t *ws, int32_t j, int32_t stamp)
{
    const int32_t *s = ws->page + (int64_t)j * ws->k;
    int32_t fresh = 0;
    for (int32_t t = 0; t < ws->count[j]; t++) fresh += ws->stamp[s[t]] != stamp;
    return fresh;
}

/* U := U + S_j; returns how many pages that added. */
static int32_t add_to_union(window_sets_t *ws, int32_t j, int32_t stamp)
{
    const int32_t *s = ws->page + (int64_t)j * ws->k;
    int32_t fresh = 0;
    for (int32_t t = 0; t < ws->count[j]; t++) {
        fresh += ws->stamp[s[t]] != stamp;
        ws->stamp[s[t]] = stamp;
    }
    return fresh;
}

/* Algorithm 1 on one window: order[slot] = local query id. Per group: seed = smallest
 * unassigned id, then argmin over unassigned j of (|S_j \ U|, j), U updated after every
 * addition, until g members or no query left. assigned: [n] scratch. */
static void greedy_window(window_sets_t *ws, int32_t g, int32_t *order, uint8_t *assigned)
{
    const int32_t n = ws->n;
    for (int32_t j = 0; j < n; j++) assigned[j] = 0;
    int32_t placed = 0;
    while (placed < n) {
        const int32_t stamp = ws->next_stamp++;
        int32_t seed = 0;
        while (assigned[seed]) seed++;
        assigned[seed] = 1;
        add_to_union(ws, seed, stamp);
        order[placed++] = seed;
        for (int32_t members = 1; members < g && placed < n; members++) {
            int32_t best = -1, best_cost = 0;
            for (int32_t j = 0; j < n; j++) { /* ascending j: strict < keeps the smallest id */
                if (assigned[j]) continue;
                const int32_t cost = new_pages(ws, j, stamp);
                if (best < 0 || cost < best_cost) {
                    best = j;
                    best_cost = cost;
                }
            }
            assigned[best] = 1;
            add_to_union(ws, best, stamp);
            order[placed++] = best;
        }
    }
}

/* Union visits sum_G |U_G| of an order cut into runs of g slots. */
static int64_t window_visits(window_sets_t *ws, int32_t g, const int32_t *order)
{
    int64_t visits = 0;
    for (int32_t s0 = 0; s0 < ws->n; s0 += g) {
        const int32_t stamp = ws->next_stamp++;
        for (int32_t s = s0; s < s0 + g && s < ws->n; s++)
            visits += add_to_union(ws, order[s], stamp);
    }
    return visits;
}

pw_status_t pw_ref_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                           const pw_requests_t *requests, const pw_grouping_t *grouping,
                           int32_t *perm)
{
    if (!requests) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests is NULL");
    PW_TRY(pw_check_problem_layout(problem, requests));
    PW_TRY(pw_check_grouping(grouping));
    PW_TRY(pw_check_regroup_mode(grouping));
    const int32_t n_rows = problem->num_tokens, g = grouping->group_size;
    /* N = 0 writes and reads nothing: NULL is accepted, as pw_ref_attention accepts it. */
    if (n_rows > 0 && !perm) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "perm is NULL");
    if (n_rows > 0 && !topk_ids) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "topk_ids is NULL");
    if (n_rows == 0) return PW_SUCCESS;

    /* Largest window: W, or the longest request when W = 0 (or W is larger). */
    int32_t max_window = 0;
    for (int32_t r = 0; r < problem->num_requests; r++) {
        const int32_t len = requests->cu_seqlens_q[r + 1] - requests->cu_seqlens_q[r];
        const int32_t w = grouping->window > 0 && grouping->window < len ? grouping->window : len;
        if (w > max_window) max_window = w;
    }
    const size_t cells = (size_t)max_window * (size_t)problem->topk + 1;
    if (cells > (size_t)INT32_MAX)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "pw_ref_regroup: window %d x topk %d exceeds 2^31 - 1 selections",
                       max_window, problem->topk);
    window_sets_t ws = {0};
    ws.count = malloc(((size_t)max_window + 1) * sizeof *ws.count);
    ws.page = malloc(cells * sizeof *ws.page);
    ws.distinct = malloc(cells * sizeof *ws.distinct);
    ws.stamp = malloc(cells * sizeof *ws.stamp);
    int32_t *greedy = malloc(((size_t)max_window + 1) * sizeof *greedy);
    int32_t *identity = malloc(((size_t)max_window + 1) * sizeof *identity);
    uint8_t *assigned = malloc((size_t)max_window + 1);
    pw_status_t status = PW_SUCCESS;
    if (!ws.count || !ws.page || !ws.distinct || !ws.stamp || !greedy || !identity ||
        !assigned) {
        status = pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_ref_regroup: %zu-cell scratch", cells);
        goto done;
    }
    for (int32_t j = 0; j < max_window; j++) identity[j] = j;

    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        int32_t *perm_h = perm + (int64_t)h * n_rows;
        for (int32_t r = 0; r < problem->num_requests; r++) {
            const int32_t begin = requests->cu_seqlens_q[r], end = requests->cu_seqlens_q[r + 1];
            const int32_t step = grouping->window > 0 ? grouping->window : end - begin;
            /* row0 + step may exceed INT32_MAX (W is any int32 >= 1): stepped in 64 bits. */
            for (int64_t next = begin; next < end; next += step) {
                const int32_t row0 = (int32_t)next;
                const int32_t n = end - row0 < step ? end - row0 : step;
                const int32_t *order = identity;
                if (grouping->mode != PW_REGROUP_IDENTITY) {
                    load_window(problem, requests, topk_ids, h, r, row0, n, &ws);
                    greedy_window(&ws, g, greedy, assigned);
                    order = greedy;
                    if (grouping->mode == PW_REGROUP_GUARDED &&
                        !(window_visits(&ws, g, greedy) < window_visits(&ws, g, identity)))
                        order = identity;
                }
                for (int32_t j = 0; j < n; j++) perm_h[row0 + j] = row0 + order[j];
            }
        }
    }
done:
    free(ws.count);
    free(ws.page);
    free(ws.distinct);
    free(ws.stamp);
    free(greedy);
    free(identity);
    free(assigned);
    return status;
}
