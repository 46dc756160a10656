/* regroup_dev.h — development entry point of the regroup kernels (internal, not installed,
 * not part of the public API): runs pw_regroup with a chosen kernel variant so that
 * bench/bench_regroup.c can time the alternatives in one GPU run (src/cuda/regroup.cu has
 * both kernels' plans). */
#ifndef PW_REGROUP_DEV_H
#define PW_REGROUP_DEV_H

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* variant 0: the library's kernel (v3, redux.sync argmin), exactly pw_regroup: direct-
 *            indexed masks when max_pages_per_request <= 2048 (W128) / 4096 (W64), else
 *            per window: direct when the window's last query sees <= that many pages,
 *            else the hash path.
 * variant 1: v3 with a 5-round xor-shuffle argmin (same result).
 * variant 2: v3, everything but the greedy loop; writes identity order (timing only).
 * variant 3: v3 with the hash path whatever max_pages_per_request (same result).
 * variant 4: v3 with __match_any_sync mask ORs on the direct path (same result).
 * variant 5: v3 hash path forced, everything but the greedy loop (timing only).
 * variant 6: the wide-Top-K kernel (regroup_wide.cuh): K up to 64 (0..5: K <= 16), a
 *            hash set always, every thread in the greedy loop; the same result.
 * variant 7: the wide-Top-K kernel with v3's layout (regroup_wide_masks.cuh): K up to 64,
 *            direct-indexed masks, K-bit M rows, one warp in the greedy loop; when
 *            max_pages_per_request exceeds 2048 (W128) / 4096 (W64), a split call:
 *            this kernel for the windows whose last query sees at most that many
 *            pages, variant 6 for the others; the same result. pw_regroup runs it for
 *            K 17..64.
 * variant 8: variant 0 without the long direct path (the library's path before
 *            2026-12-03): past 2048 (W128) / 4096 (W64) pages, each window direct or
 *            hash by its own pages; the same result (an A/B arm for bench_regroup).
 * Variant 0 runs the long direct path (regroup.cu, kLong: columns of V rows in up to 224
 * KB of shared memory) when 2048 < V <= 14,336 (W128) / 4096 < V <= 28,672 (W64), the
 * device allows the shared memory and its waves are at most twice the adaptive launch's.
 * (Kernel v2, variants 3 and 4 until it was removed, is in bench/NOTES.md.)
 * Other arguments and errors as pw_regroup (no workspace); a variant outside 0..8 is
 * PW_ERROR_INVALID_ARGUMENT. */
pw_status_t pw_regroup_dev_variant(int variant, const pw_problem_t *problem,
                                   const int32_t *topk_ids, const pw_requests_t *requests,
                                   const pw_grouping_t *grouping, int32_t *perm,
                                   pw_stream_t stream);

/* *long_path = 1 when pw_regroup (variant 0) would run the long direct path for these
 * arguments on the current device, else 0 (K > 16, IDENTITY, N = 0: 0). pw_regroup_dual
 * decides the same way for its own kernel, whose static shared memory is 128 bytes larger
 * (at an occupancy edge the two may differ).
 * Errors as pw_regroup; no launch (it sets the long kernel's shared-memory attribute). */
pw_status_t pw_regroup_dev_long_path(const pw_problem_t *problem, const int32_t *topk_ids,
                                     const pw_requests_t *requests, const pw_grouping_t *grouping,
                                     int *long_path);

/* Regroup and union preparation of its permutation (pw_regroup + pw_union_prepare with one
 * grouping):
 * variant 0: one launch, kernel v3 with the union metadata written by each window's CTA
 *            once its order is known (NOT used by pw_sparse_prefill: synccheck found
 *            divergent __syncthreads in it, bench/NOTES.md v3.2);
 * variant 1: variant 0 with the hash path forced (same result);
 * variant 2: two launches, pw_regroup then pw_union_prepare (the path before the fusion).
 * variant 3: variant 0 with the groups emitted while the greedy loop runs: warps 1.. wait
 *            for each group's mbarrier (arrived by warp 0 when the group closes) and
 *            write it; where guarded mode keeps identity order they write every group
 *            again after the loop (twenty-fourth session; H200, twenty-fifth: bytes ==
 *            the reference on every test case, A-hot W128 16.1 us against 19.4 for
 *            variant 0 and 19.1 for variant 2, slower at W64; not used by the plan:
 *            bench/NOTES.md). It keeps W + 1 mbarriers per CTA: compute-sanitizer
 *            synccheck needs --num-cuda-barriers 256 for it.
 * IDENTITY mode and N = 0 always take variant 2's path. Arguments and errors: those of
 * pw_regroup and pw_union_prepare; a variant outside 0..3 is PW_ERROR_INVALID_ARGUMENT. */
pw_status_t pw_regroup_union_prepare_dev_variant(int variant, const pw_problem_t *problem,
                                                 const int32_t *topk_ids,
                                                 const pw_requests_t *requests,
                                                 const pw_grouping_t *grouping, int32_t *perm,
                                                 const pw_union_meta_t *meta, pw_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
