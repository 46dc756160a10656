/* Shape and request-layout validation shared by every entry point (docs/semantics.md §1, §6). */
#include <math.h>

#include "pageweaver.h"
#include "pw_internal.h"

pw_status_t pw_check_max_pages(const pw_problem_t *p)
{
    if (p->num_tokens > 0 && p->max_pages_per_request < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "problem.max_pages_per_request is %d; with num_tokens %d > 0 it must be >= 1 "
                       "(the page-table columns; PW_PROBLEM_INIT leaves it 0)",
                       p->max_pages_per_request, p->num_tokens);
    return PW_SUCCESS;
}

pw_status_t pw_problem_check(const pw_problem_t *p, const pw_requests_t *rq)
{
    PW_TRY(pw_check_problem_layout(p, rq));
    /* A page table will be read: the pages it names must exist. */
    if (rq && rq->page_table) PW_TRY(pw_check_cache_shape(p));
    return PW_SUCCESS;
}

pw_status_t pw_check_problem_layout(const pw_problem_t *p, const pw_requests_t *rq)
{
    if (!p) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem is NULL");
    if (p->struct_size < sizeof(pw_problem_t))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "problem.struct_size is %u, expected %zu (initialise with PW_PROBLEM_INIT)",
                       p->struct_size, sizeof(pw_problem_t));
    if (p->num_tokens < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.num_tokens is %d (< 0)", p->num_tokens);
    if (p->num_requests < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.num_requests is %d (< 1)",
                       p->num_requests);
    if (p->num_kv_heads < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.num_kv_heads is %d (< 1)",
                       p->num_kv_heads);
    if (p->q_heads_per_kv < 1 || p->q_heads_per_kv > 64)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.q_heads_per_kv is %d (1..64)",
                       p->q_heads_per_kv);
    if (p->head_dim < 1 || p->head_dim > 1024)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.head_dim is %d (1..1024)", p->head_dim);
    if (p->page_size < 1 || p->page_size > (1 << 20))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.page_size is %d (1..2^20)",
                       p->page_size);
    if (p->topk < 1 || p->topk > 1024)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.topk is %d (1..1024)", p->topk);
    if (p->max_pages_per_request < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.max_pages_per_request is %d (< 0)",
                       p->max_pages_per_request);
    if (p->num_cache_pages < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "problem.num_cache_pages is %lld (< 0)",
                       (long long)p->num_cache_pages);
    if (!(p->softmax_scale >= 0.0f) || isinf(p->softmax_scale))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "problem.softmax_scale must be finite and >= 0 (0 = 1/sqrt(D))");
    if (!rq) return PW_SUCCESS;

    if (!rq->cu_seqlens_q || !rq->prefix_lens || !rq->kv_lens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "requests.cu_seqlens_q, prefix_lens and kv_lens must not be NULL");
    if (rq->page_table && rq->page_table_stride < p->max_pages_per_request)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "requests.page_table_stride is %lld, < max_pages_per_request %d",
                       (long long)rq->page_table_stride, p->max_pages_per_request);
    if (rq->cu_seqlens_q[0] != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests.cu_seqlens_q[0] is %d, must be 0",
                       rq->cu_seqlens_q[0]);
    PW_TRY(pw_check_max_pages(p)); /* named before any kv_lens[r] exceeds it */
    const int64_t kv_cap = (int64_t)p->max_pages_per_request * p->page_size;
    /* The offsets first: a decrease is the cause to name, not the lengths it distorts. */
    for (int32_t r = 0; r < p->num_requests; r++)
        if (rq->cu_seqlens_q[r + 1] < rq->cu_seqlens_q[r])
            return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests.cu_seqlens_q decreases at request %d (%d > %d)",
                           r, rq->cu_seqlens_q[r], rq->cu_seqlens_q[r + 1]);
    /* The total next: offsets running past N would otherwise be reported as a kv_lens[r]
     * too short for its (wrong) chunk length. */
    if (rq->cu_seqlens_q[p->num_requests] != p->num_tokens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "requests.cu_seqlens_q[R=%d] is %d, must equal num_tokens %d",
                       p->num_requests, rq->cu_seqlens_q[p->num_requests], p->num_tokens);
    for (int32_t r = 0; r < p->num_requests; r++) {
        const int32_t b = rq->cu_seqlens_q[r], e = rq->cu_seqlens_q[r + 1];
        if (rq->prefix_lens[r] < 0)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT, "requests.prefix_lens[%d] is %d (< 0)", r,
                           rq->prefix_lens[r]);
        if ((int64_t)rq->kv_lens[r] < (int64_t)rq->prefix_lens[r] + (e - b))
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "requests.kv_lens[%d] is %d, < prefix %d + chunk queries %d", r,
                           rq->kv_lens[r], rq->prefix_lens[r], e - b);
        if ((int64_t)rq->kv_lens[r] > kv_cap)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "requests.kv_lens[%d] is %d, > max_pages_per_request %d * page_size %d (the page "
                           "table's columns hold fewer tokens than the request's KV length)",
                           r, rq->kv_lens[r], p->max_pages_per_request, p->page_size);
    }
    return PW_SUCCESS;
}

pw_status_t pw_check_cache_shape(const pw_problem_t *p)
{
    if (p->num_tokens == 0) return PW_SUCCESS; /* nothing is read */
    if (p->max_pages_per_request < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "problem.max_pages_per_request is %d; with num_tokens %d > 0 it must be >= 1 "
                       "(the page-table columns; PW_PROBLEM_INIT leaves it 0)",
                       p->max_pages_per_request, p->num_tokens);
    if (p->num_cache_pages < 1)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "problem.num_cache_pages is %lld; with num_tokens %d > 0 it must be >= 1 "
                       "(the physical pages of the K/V caches; PW_PROBLEM_INIT leaves it 0)",
                       (long long)p->num_cache_pages, p->num_tokens);
    return PW_SUCCESS;
}

int64_t pw_max_groups(const pw_problem_t *p, const pw_grouping_t *g)
{
    if (!p || !g || g->group_size < 1 || g->window < 0) return 0;
    const int64_t n = p->num_tokens, gs = g->group_size, w = g->window;
    int64_t bound = (n + gs - 1) / gs + p->num_requests;
    if (w > 0) bound += (n + w - 1) / w;
    return bound;
}
