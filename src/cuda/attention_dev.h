/* attention_dev.h — development entry point of the sparse attention kernels (internal, not
 * installed, not part of the public API): runs pw_union_attention with a chosen
 * implementation so that bench/bench_kernels.c and tests/gpu/test_attention_gpu.c can time
 * and check the alternatives in one GPU run. Design: the comment of src/cuda/attention.cu. */
#ifndef PW_ATTENTION_DEV_H
#define PW_ATTENTION_DEV_H

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* impl 0: v4 (the library default until v5): the bitwise reference of bench_kernels.
 * impl 2: B, "P from registers" (the library default in v5): the PV wgmma takes P from
 *         registers (no P buffer, one CTA barrier before the softmax, the stage released
 *         before the softmax).
 * impl 6: B + "idle-warp V transpose" (every kernel; pw_union_attention's Union8 and Union4):
 *         the warps whose slot did not select the page transpose V while the member warps
 *         run the softmax; the barrier before PV moves after the softmax.
 * impl 8: impl 6 before the cache-poison fix (V past the members' last visible token not
 *         zeroed: NaN codes in invisible cache slots reach the output). For A/B timing and
 *         as test_cache_poison's witness only.
 * impl 9: "lean" (Union4 and per-query only; Union8 gives PW_ERROR_UNSUPPORTED;
 *         pw_union_attention's per-query since v8): impl 6's arithmetic and rows
 *         in a kernel that fits three CTAs per SM (one K and one V tile refilled by the last
 *         warp done with it, PV in two N = 64 halves, <= 168 registers):
 *         src/cuda/attention_lean.cuh, bench/NOTES.md v8.
 * impl 10: impl 9 on V^T tiles written by the pre-pass (vt_prepare.cu): no transposes and
 *         no CTA barrier in the page loop but on pages past a member's last visible token
 *         (the full call's Union4 kernel on large inputs, bench/NOTES.md v8). Here the call allocates its
 *         own tiles (cudaMallocAsync on the stream) and the pre-pass transposes every page a
 *         query of each request may see; Union4 and per-query only.
 * impl 12: "stacked FP8X2" (Union4 and PW_PRECISION_FP8X2 only, own tiles as impl 10): the
 *         two terms of Q and P in rows r and r + 8 of one 2-slot tile, one tile per CTA,
 *         tiles without a member skipped (src/cuda/attention_stacked.cuh, bench/NOTES.md v9).
 *         Its own rounding of the FP8X2 arithmetic: NOT bitwise equal to the other FP8X2
 *         impls (bitwise independent of the grouping, NRMS vs exact as theirs).
 * impl 13: G = 8 on a dense tile (Union4 plans' groups of 8, PW_KERNEL_UNION4 only;
 *         per-token scales in FP8 only; own V^T tiles as impl 10): 8 queries x 8 heads per M64 tile, one
 *         CTA per group walking its whole union once (src/cuda/attention_dense.cuh, issue
 *         16). FP8: bitwise equal to the padded tile's G = 8 outputs (test_gqa_padded; H200,
 *         2026-12-02); FP8X2: P in f16 on f16 V^T tiles (docs/semantics.md §4.5). pw_sparse_prefill runs it for G = 8 on the V^T pre-pass
 *         (pw_union_attention_vt) unless the call is FP8X2 with per-token scales.
 * impl 14: G = 4 on a dense tile (PW_KERNEL_UNION4 only, per-token scales in FP8 only, own V^T tiles
 *         as impl 10): 16 queries x 4 heads per M64 tile, two consecutive 8-query groups of
 *         the metadata (a pair: the group at an even index of its window and the next one
 *         when it continues it) walking their merged union once (attention_dense.cuh).
 *         The padded tile's G = 4 outputs bitwise (FP8; test_gqa_padded, test_topk_wide).
 *         Impls 13 and 14 take K = 16, 32 and 64 (page lists of 8 K / 16 K entries).
 * impls 1, 3, 4, 5, 7, 11 were removed (measured slower or no faster; bench/NOTES.md v5, v6,
 *         v9): PW_ERROR_UNSUPPORTED. Impls 15 and 16 ("quad", FP8 at four CTAs per SM)
 *         measured 6-16% slower than impl 10 and left the tree (fortieth session; code:
 *         commit 73193c6): outside 0..14, so PW_ERROR_INVALID_ARGUMENT.
 * O and LSE are bitwise identical for every impl but 12 in FP8; in FP8X2 impls 10, 13 and 14
 * (without per-token scales: P in f16 on the pre-pass's f16 tiles, docs/semantics.md §4.5)
 * are bitwise identical to each other, 2, 6 and 9 to each other, and 12 has its own. args->precision = PW_PRECISION_FP8X2
 * runs on impls 2, 6, 9, 10, 12, 13 and 14 only; other impls give PW_ERROR_UNSUPPORTED, as does
 * impl 12 in FP8. Other arguments and errors as pw_union_attention; PW_ERROR_INVALID_ARGUMENT
 * for an impl outside 0..14. Every impl but 8 is NaN-safe (cache bytes no query may see
 * never reach an output). */
pw_status_t pw_union_attention_dev(int impl, const pw_problem_t *problem, const pw_attention_args_t *args,
                                   const pw_grouping_t *grouping, const int32_t *perm,
                                   const pw_union_meta_t *meta, pw_kernel_t kernel, pw_stream_t stream);

/* The longest-first CTA order (bench/NOTES.md, "Longest first") for the next
 * pw_union_attention_dev calls' Union4 CTAs on impls 9 and 10 (dense = 0; also impl 6 at
 * G != 16 or with per-token scales, which runs impl 9), 13 (dense = 1) or 14 (dense = 2), in the layout
 * union preparation writes for the full call (pw_vt_buffers_t in src/pw_internal.h):
 * count [17] device, items per size class; list [17, stride] device, each class's items
 * (impls 9 / 10: block 2 x (h x max_groups + group) + half of every half with a member;
 * impl 13: h x max_groups + group of every group; impl 14: h x max_groups + group of every
 * pair's leader, union preparation's pairing). count NULL (the default) restores the
 * blocks' own order. The library's own entry points never read it. Not thread-safe; no
 * check of the arrays. */
void pw_dev_set_schedule(const uint32_t *count, const int32_t *list, int64_t stride, int dense);

/* At most `ctas` CTAs (> 0) in the full call's persistent launches of the stacked tile (dev
 * impl 12's kernel, which takes its items from a work counter), so that each CTA runs many
 * items in turn: tests of the item chaining (the next item's index in shared memory, the
 * page barriers' phases carried across items, items with nothing to run between real ones)
 * on problems too small to give a CTA a second item at the default grid (kStack1CtasPerSm
 * CTAs per SM). 0 (the default) restores it. The outputs must not change (each item is
 * computed alone). The library's own entry points never set it. Not thread-safe. */
void pw_dev_set_stack_ctas(int ctas);

/* Fills the shared memory of every SM of the current device with the 32-bit `word`
 * (tests: 0xFFFFFFFF is a NaN in E4M3, f16 and FP32), one CTA per SM holding the largest
 * dynamic shared memory a CTA may have, so that the kernels launched after it find those
 * bytes wherever they read shared memory they did not write (the 64-token pages' tile
 * halves, attention_lean.cuh). Enqueued on `stream`; PW_ERROR_CUDA on a launch error. */
pw_status_t pw_dev_poison_shared_memory(uint32_t word, pw_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
