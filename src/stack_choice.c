/* The per-call choice between FP8X2's two tiles on the V^T pre-pass (pageweaver.h,
 * PW_PLAN_FP8X2_STACKED): the host reference of the counts the pre-pass's mark launch
 * takes on the device (src/cuda/vt_prepare.cu, stack_count) and of the rule that reads
 * them (PW_STACK_CHOSEN, src/pw_internal.h). Plain C, host arrays. */
#include <stdint.h>
#include <stdlib.h>

#include "pageweaver.h"
#include "pw_internal.h"

#define STACK_MAX_PAGE_ID (1 << 29) /* union preparation's page keys (kMaxUnionPageId) */

/* The key of id k of query i (KV head h): (request << 32) | id for an id union preparation
 * keeps, else UINT64_MAX. The request is the device's: the largest r < R with
 * cu_seqlens_q[r] <= i, kept when i lies in its rows. */
static uint64_t stack_key(const pw_problem_t *p, const int32_t *topk_ids, const pw_requests_t *rq, int32_t h,
                          int64_t i, int k)
{
    if (i >= p->num_tokens || k >= p->topk) return UINT64_MAX;
    int32_t lo = 0, hi = p->num_requests;
    while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (rq->cu_seqlens_q[mid] <= i) lo = mid;
        else hi = mid;
    }
    const int32_t b = rq->cu_seqlens_q[lo], e = rq->cu_seqlens_q[lo + 1];
    if (b < 0 || e < b || e > p->num_tokens || i < b || i >= e) return UINT64_MAX;
    const int64_t pos = (int64_t)rq->prefix_lens[lo] + (i - b), kv = rq->kv_lens[lo];
    const int64_t last = pos < kv - 1 ? pos : kv - 1;
    int64_t limit = last < 0 ? 0 : last / p->page_size + 1;
    if (limit > STACK_MAX_PAGE_ID) limit = STACK_MAX_PAGE_ID;
    if (limit > p->max_pages_per_request) limit = p->max_pages_per_request;
    const int32_t id = topk_ids[((int64_t)h * p->num_tokens + i) * p->topk + k];
    return id >= 0 && id < limit ? ((uint64_t)(uint32_t)lo << 32) | (uint32_t)id : UINT64_MAX;
}

/* Distinct keys of a[0..n) (UINT64_MAX excluded) that b[0..m) lacks (b NULL: all). */
static int64_t distinct_new(const uint64_t *a, int n, const uint64_t *b, int m)
{
    int64_t count = 0;
    for (int x = 0; x < n; x++) {
        if (a[x] == UINT64_MAX) continue;
        int seen = 0;
        for (int y = 0; y < x && !seen; y++) seen = a[y] == a[x];
        for (int y = 0; b && y < m && !seen; y++) seen = b[y] == a[x];
        count += !seen;
    }
    return count;
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
    counts[0] = counts[1] = 0;
    for (int32_t h = 0; h < problem->num_kv_heads; h++)
        for (int64_t i0 = 0; i0 < problem->num_tokens; i0 += 4) {
            uint64_t pair[2][32];
            for (int q = 0; q < 4; q++)
                for (int k = 0; k < 16; k++)
                    pair[q / 2][16 * (q % 2) + k] = stack_key(problem, topk_ids, requests, h, i0 + q, k);
            const int64_t a = distinct_new(pair[0], 32, NULL, 0), b = distinct_new(pair[1], 32, NULL, 0);
            counts[0] += (uint64_t)(a + b);
            counts[1] += (uint64_t)(a + distinct_new(pair[1], 32, pair[0], 32));
        }
    *stacked = PW_STACK_CHOSEN(counts[0], counts[1]) ? 1 : 0;
    return PW_SUCCESS;
}
