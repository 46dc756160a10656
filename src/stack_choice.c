/* The per-call choice between FP8X2's two tiles on the V^T pre-pass (pageweaver.h,
 * PW_PLAN_FP8X2_STACKED): the host reference of the counts the pre-pass's mark launch
 * takes on the device (src/cuda/vt_prepare.cu, stack_count) and of the rule that reads
 * them (PW_STACK_CHOSEN, src/pw_internal.h), from each query's S_i (selection.h). Plain C,
 * host arrays. */
#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "selection.h"

/* Query i's pages as keys (request << 32) | page, ascending, into keys; returns how many:
 * S_i below PW_MAX_UNION_PAGE_ID (the device's bound; with a valid layout S_i is also
 * below max_pages_per_request). No query past N. */
static int query_keys(const pw_problem_t *p, const int32_t *topk_ids, const pw_requests_t *rq, int32_t h,
                      int64_t i, int32_t request, uint64_t *keys)
{
    if (i >= p->num_tokens) return 0;
    int32_t pages[16];
    const int32_t n = pw_selection_of_row(p, rq, topk_ids, h, request, (int32_t)i, pages);
    int count = 0;
    for (int32_t k = 0; k < n && pages[k] < PW_MAX_UNION_PAGE_ID; k++)
        keys[count++] = ((uint64_t)(uint32_t)request << 32) | (uint32_t)pages[k];
    return count;
}

/* a u b of two ascending lists of distinct keys, ascending, into out (NULL: only counted);
 * returns its size. */
static int merge_union(const uint64_t *a, int na, const uint64_t *b, int nb, uint64_t *out)
{
    int n = 0, x = 0, y = 0;
    while (x < na || y < nb) {
        const uint64_t key = y >= nb || (x < na && a[x] <= b[y]) ? a[x] : b[y];
        x += x < na && a[x] == key;
        y += y < nb && b[y] == key;
        if (out) out[n] = key;
        n++;
    }
    return n;
}

pw_status_t pw_fp8x2_stack_choice(const pw_problem_t *problem, const int32_t *topk_ids, const pw_requests_t *requests,
                                  uint64_t counts[2], int *stacked)
{
    if (!topk_ids || !requests || !counts || !stacked)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_fp8x2_stack_choice: NULL argument");
    PW_TRY(pw_check_problem_layout(problem, requests)); /* shapes and request arrays; no cache needed */
    if (problem->topk > 16)
        return pw_fail(PW_ERROR_UNSUPPORTED, "pw_fp8x2_stack_choice: K = %d (the stacked tile runs K <= 16)",
                       problem->topk);
    /* Units of U consecutive queries (pairs at G = 16, 4-query halves at G = 8, 8-query
     * groups at G = 4), blocks of two units. */
    const int g = problem->q_heads_per_kv, U = PW_STACK_UNIT_QUERIES(g);
    counts[0] = counts[1] = 0;
    for (int32_t h = 0; h < problem->num_kv_heads; h++) {
        int32_t request = 0; /* of the next query: cu_seqlens_q ascends (checked above) */
        for (int64_t i0 = 0; i0 < problem->num_tokens; i0 += 2 * U * PW_STACK_SAMPLE) { /* the sampled blocks */
            uint64_t keys[16][16], unit[2][128], merged[128];
            int n[16], nu[2];
            for (int q = 0; q < 2 * U; q++) {
                while (i0 + q < problem->num_tokens && requests->cu_seqlens_q[request + 1] <= i0 + q) request++;
                n[q] = query_keys(problem, topk_ids, requests, h, i0 + q, request, keys[q]);
            }
            for (int t = 0; t < 2; t++) { /* unit t: queries U t .. U t + U - 1 */
                nu[t] = 0;
                for (int q = U * t; q < U * t + U; q++) {
                    const int m = merge_union(unit[t], nu[t], keys[q], n[q], merged);
                    for (int k = 0; k < m; k++) unit[t][k] = merged[k];
                    nu[t] = m;
                }
            }
            counts[0] += (uint64_t)(nu[0] + nu[1]);
            counts[1] += (uint64_t)merge_union(unit[0], nu[0], unit[1], nu[1], NULL);
        }
    }
    *stacked = PW_STACK_CHOSEN(g, counts[0], counts[1]) ? 1 : 0;
    return PW_SUCCESS;
}
