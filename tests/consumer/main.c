/* The consumer project's program: links the core library and the capture library, and
 * exercises a host function (the reference regroup statistics), the device entry point
 * (pw_sparse_prefill: pulls the CUDA code and its runtime into the link) and the capture
 * library (cJSON). Exit 0 when all of it behaves as documented on this machine. */
#include <stdio.h>
#include <string.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"

int main(void)
{
    printf("consumer: PageWeaver %s\n", pw_version_string());
    if (pw_version_number() != PW_VERSION_NUMBER) return 1;

    /* Two queries of one request that select the same two pages: one group of 2 visits
     * 2 pages, so rho_Q = 4 selections / 2 visits. */
    pw_problem_t problem = PW_PROBLEM_INIT;
    problem.num_tokens = 2;
    problem.topk = 2;
    problem.page_size = 4;
    problem.max_pages_per_request = 2;
    const int32_t cu[2] = {0, 2}, prefix[1] = {6}, kv[1] = {8}, topk[4] = {0, 1, 1, 0};
    pw_requests_t rq = PW_REQUESTS_INIT;
    rq.cu_seqlens_q = cu;
    rq.prefix_lens = prefix;
    rq.kv_lens = kv;
    pw_grouping_t grouping = PW_GROUPING_INIT;
    pw_union_stats_t stats;
    if (pw_ref_grouping_stats(&problem, topk, &rq, &grouping, &stats, NULL) != PW_SUCCESS ||
        stats.union_visits != 2 || stats.selections != 4) {
        printf("consumer: grouping stats wrong: %s\n", pw_last_error());
        return 1;
    }

    /* The device entry point: no device tensors given, so it must refuse with a message
     * (it never reaches the GPU); linking it needs the CUDA runtime in a CUDA build. */
    pw_problem_t fast = PW_PROBLEM_INIT;
    fast.num_tokens = 16;
    fast.max_pages_per_request = 4;
    fast.num_cache_pages = 4;
    pw_plan_t *plan = NULL;
    if (pw_plan_create(&fast, NULL, &plan) != PW_SUCCESS) return 1;
    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.o_dtype = PW_DTYPE_BFLOAT16;
    const pw_status_t st = pw_sparse_prefill(plan, &args, NULL, NULL, 0, NULL);
    pw_plan_destroy(plan);
    printf("consumer: pw_sparse_prefill without tensors -> %s (%s)\n", pw_status_string(st),
           pw_last_error());
    if (st != PW_ERROR_INVALID_ARGUMENT && st != PW_ERROR_INSUFFICIENT_WORKSPACE) return 1;

    /* The capture library (cJSON underneath). */
    pw_capture_t *capture = NULL;
    if (pw_capture_create(&problem, 0, &capture) != PW_SUCCESS) return 1;
    pw_capture_free(capture);
    printf("consumer: ok\n");
    return 0;
}
