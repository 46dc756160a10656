/* regroup_dev.h — development entry point of the regroup kernel (internal, not installed,
 * not part of the public API): runs pw_regroup with a chosen kernel variant so that
 * bench/bench_regroup.c can time the alternatives in one GPU run. */
#ifndef PW_REGROUP_DEV_H
#define PW_REGROUP_DEV_H

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* variant 0: the library's kernel (redux.sync argmin), exactly pw_regroup.
 * variant 1: the same with a 5-round xor-shuffle argmin (same result).
 * variant 2: everything but the greedy loop; writes identity order (timing only).
 * Other arguments and errors as pw_regroup (no workspace). */
pw_status_t pw_regroup_dev_variant(int variant, const pw_problem_t *problem,
                                   const int32_t *topk_ids, const pw_requests_t *requests,
                                   const pw_grouping_t *grouping, int32_t *perm,
                                   pw_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
