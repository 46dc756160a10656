/* Device regroup and union preparation entry points in a build without CUDA: they exist
 * (so programs link either way), make the argument checks that do not depend on the device
 * (selection.c: the CUDA build makes the same ones first) and then return
 * PW_ERROR_UNSUPPORTED. The CUDA build defines
 * them in src/cuda/regroup.cu and src/cuda/union_prepare.cu. pw_regroup_workspace_size is
 * host arithmetic: defined here for both builds (the same argument checks in each). */
#include "pageweaver.h"
#include "pw_internal.h"
#include "selection.h"

pw_status_t pw_regroup_workspace_size(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                      size_t *bytes)
{
    if (!bytes) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    *bytes = 0; /* the kernels need none */
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_grouping(grouping));
#ifdef PW_HAVE_CUDA
    return PW_SUCCESS;
#else
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup_workspace_size: built without CUDA");
#endif
}

#ifndef PW_HAVE_CUDA

pw_status_t pw_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                       const pw_requests_t *requests, const pw_grouping_t *grouping,
                       int32_t *perm, void *workspace, size_t workspace_bytes,
                       pw_stream_t stream)
{
    (void)workspace;
    (void)workspace_bytes;
    (void)stream;
    PW_TRY(pw_check_regroup_call(problem, topk_ids, requests, grouping, perm));
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_regroup: built without CUDA");
}

pw_status_t pw_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                             const pw_requests_t *requests, const pw_grouping_t *grouping,
                             const int32_t *perm, const pw_union_meta_t *meta,
                             pw_stream_t stream)
{
    (void)stream;
    PW_TRY(pw_check_union_prepare_call(problem, topk_ids, requests, grouping, perm, meta));
    /* The GPU's order: a K past its limit is unsupported before the capacity is checked. */
    if (problem->topk <= PW_UNION_MAX_TOPK) PW_TRY(pw_check_union_capacity(problem, grouping, meta));
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_union_prepare: built without CUDA");
}

#endif
