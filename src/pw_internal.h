/* Internal helpers shared by the library's host and device sources (not installed). */
#ifndef PW_INTERNAL_H
#define PW_INTERNAL_H

#include <stddef.h>

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records a formatted message for pw_last_error() and returns status. */
pw_status_t pw_fail(pw_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void pw_clear_error(void);

/* Returns early with the status of a failing pw_ call. */
#define PW_TRY(expr)                                                                        \
    do {                                                                                    \
        pw_status_t pw_try_status_ = (expr);                                                \
        if (pw_try_status_ != PW_SUCCESS) return pw_try_status_;                            \
    } while (0)

/* max_pages_per_request >= 1 whenever num_tokens > 0 (PW_PROBLEM_INIT leaves it 0): what
 * pw_problem_check checks with host request arrays, also checked by the device entry points
 * (pw_regroup, pw_union_prepare), which cannot read the arrays. */
pw_status_t pw_check_max_pages(const pw_problem_t *p);

/* pw_problem_check without the cache shapes: what the grouping functions (regroup, union
 * preparation, statistics) need, which never read the page table or the caches. */
pw_status_t pw_check_problem_layout(const pw_problem_t *problem, const pw_requests_t *requests);

/* The shapes an attention call needs beyond the layout (pw_problem_check checks them when a
 * page table is given): with N > 0, max_pages_per_request >= 1 and num_cache_pages >= 1
 * (PW_PROBLEM_INIT leaves both 0). PW_ERROR_INVALID_ARGUMENT naming the field. */
pw_status_t pw_check_cache_shape(const pw_problem_t *problem);

/* pw_attention_args_t as it was before `precision` (0.1.0): still accepted, read as
 * PW_PRECISION_FP8 (the struct_size convention of pageweaver.h). */
#define PW_ATTENTION_ARGS_MIN_SIZE offsetof(pw_attention_args_t, precision)

/* args->precision, or PW_PRECISION_FP8 for a struct without the field. */
pw_precision_t pw_args_precision(const pw_attention_args_t *args);

/* args->token_scales, or all NULL for a struct without the field. */
pw_token_scales_t pw_args_token_scales(const pw_attention_args_t *args);

/* 1 when a call's V^T pre-pass writes f16 tiles (pw_vt_buffers_t.f16_tiles): FP8X2 without
 * per-token scales (docs/semantics.md §4.5), else 0. */
int pw_args_f16_vt(const pw_attention_args_t *args);

/* The caches' strides in elements: token t of physical page `page`, KV head h, element d at
 * page * page + h * head + t * token + d (args.cache_layout, or the token-major layout:
 * P * kv_stride, D, kv_stride). */
typedef struct pw_cache_strides {
    int64_t page, head, token;
} pw_cache_strides_t;
pw_cache_strides_t pw_args_cache_strides(const pw_problem_t *problem, const pw_attention_args_t *args);

/* The caches' addressing (problem checked): token-major kv_stride >= Hkv*D, or a strided
 * layout with positive strides (head_stride 0 allowed with Hkv = 1) and every element
 * addressed below 2^62; `gpu`: also the tensor maps' rules (strides multiples of 16 below
 * 2^40, caches 16-byte aligned). PW_ERROR_INVALID_ARGUMENT naming the field. */
pw_status_t pw_check_cache_layout(const pw_problem_t *problem, const pw_attention_args_t *args, int gpu);

/* Q, O and page-table strides (problem checked): the largest element of each below 2^61,
 * 2^59 and 2^60 elements (byte offsets below 2^62). PW_ERROR_INVALID_ARGUMENT naming the
 * field. */
pw_status_t pw_check_row_strides(const pw_problem_t *problem, const pw_attention_args_t *args);

/* The outputs (o, and lse and bad_page_count when given) share no byte with any input (q,
 * the caches, k_scale / v_scale, topk_ids, the request arrays, the page table, the sinks,
 * the per-token scales) or with each other (problem, strides, page-table stride, cache
 * layout and token scales checked; N > 0, o and q set); args.topk_ids holds [Hkv, N,
 * ids_topk] ids (problem->topk, or the caller's K before padding). Rows are compared as
 * strided ranges: two ranges with the same row stride may interleave (e.g. Q and O as
 * column blocks of one buffer); other overlapping extents count as overlapping.
 * PW_ERROR_INVALID_ARGUMENT naming both fields: the kernels read Q and the caches while
 * other CTAs write O, so attention in place is not supported. */
pw_status_t pw_check_output_overlap(const pw_problem_t *problem, const pw_attention_args_t *args, int32_t ids_topk);

/* Per-token scales' index range (problem checked): every (KV head, slot) index below 2^60
 * elements. PW_ERROR_INVALID_ARGUMENT naming the field. */
pw_status_t pw_check_token_scales(const pw_problem_t *problem, const pw_attention_args_t *args);

/* args->sink_keys, or NULL for a struct without the field. */
const pw_bf16_t *pw_args_sink_keys(const pw_attention_args_t *args);

/* args->sink_logits, or NULL for a struct without the field. */
const float *pw_args_sinks(const pw_attention_args_t *args);

/* args non-NULL, struct_size >= PW_ATTENTION_ARGS_MIN_SIZE, a valid precision:
 * PW_ERROR_INVALID_ARGUMENT otherwise. */
pw_status_t pw_check_args_struct(const pw_attention_args_t *args);

/* Every host-side check of a GPU attention call (src/attention_args.c): the problem, args
 * (struct, precision, tensors, strides, alignment), the kernel value and the fast-path
 * shape; with N = 0 the tensors are not required. Grouping and metadata:
 * pw_check_union_attention_buffers. */
pw_status_t pw_check_gpu_attention_args(const pw_problem_t *problem, const pw_attention_args_t *args,
                                        pw_kernel_t kernel);
/* The same, with args.topk_ids holding rows of ids_topk ids (pw_sparse_prefill: the caller's
 * K, which the plan pads to problem->topk = Kd on the device). */
pw_status_t pw_check_gpu_attention_args_k(const pw_problem_t *problem, const pw_attention_args_t *args,
                                          pw_kernel_t kernel, int32_t ids_topk);

/* The union kernels' group size: union metadata groups runs of 8 slots (Union8's cluster;
 * Union4 walks each 4-slot half). */
#define PW_UNION_GROUP_SIZE 8

/* pw_union_attention's checks of its grouping, permutation and metadata (after
 * pw_check_gpu_attention_args; both builds, src/attention_args.c): nothing for N = 0 or
 * PW_KERNEL_PER_QUERY; otherwise grouping non-NULL and initialised, group_size 8
 * (PW_ERROR_UNSUPPORTED otherwise), perm and every meta buffer given, union_capacity >= 8 K and
 * max_groups >= pw_max_groups. PW_ERROR_INVALID_ARGUMENT. */
pw_status_t pw_check_union_attention_buffers(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                             const int32_t *perm, const pw_union_meta_t *meta, pw_kernel_t kernel);

/* The CUDA build: PW_ERROR_NO_DEVICE without a usable CUDA device, PW_ERROR_UNSUPPORTED for
 * a device other than sm_90 (src/cuda/attention.cu). */
pw_status_t pw_check_attention_device(void);

/* CUDA build (src/cuda/union_prepare.cu): every host-side check of pw_union_prepare. */
pw_status_t pw_check_union_prepare_args(const pw_problem_t *problem, const int32_t *topk_ids,
                                        const pw_requests_t *requests, const pw_grouping_t *grouping,
                                        const int32_t *perm, const pw_union_meta_t *meta);

/* The V^T pre-pass's device buffers (parts of a plan's workspace; bench/NOTES.md v8.1).
 *   touched [Hkv, R, max_pages] uint8: the pre-pass clears it (a memset) and sets the byte
 *           of every Top-K id in S_i of a query of the request, i.e. of every union page
 *           (NULL: every page a query of its request may see);
 *   slots   [Hkv, R, max_pages] int32: the tile of each touched page this call (-1 past
 *           capacity), written by the scan; the attention kernels read it only where
 *           `touched` is set (a union page without the mark, possible only with broken
 *           device data, is dropped);
 *   list    [Hkv, capacity] int64: the page (r * max_pages + l) of each tile;
 *   count   [Hkv] uint32: pages each KV head touched; zeroed by the mark (touched set) or by
 *           the caller (touched NULL) before the scan; a head with count > capacity has no tiles and runs
 *           on the kernel that transposes V itself (the fallback launch);
 *   tiles   [Hkv, capacity] x 32 KiB (kVtTileBytes): V^T tiles in the attention kernels'
 *           shared-memory order, E4M3 in the first 16 KiB, or f16 (f16_tiles);
 *   f16_tiles  1: the pre-pass writes f16 V^T (FP8X2 without per-token scales: the lean
 *           and dense kernels' f16 P, docs/semantics.md §4.5), 0: E4M3;
 *   ts_tiles  1: the pre-pass writes each E4M3 tile's per-token scale arrays behind it (the
 *           stacked tile may run and the call has per-token scales: attention_stacked.cuh,
 *           their only reader; ~2 KiB a tile), 0: it does not (the other kernels read
 *           args.token_scales themselves). The pre-pass also checks that the call has
 *           per-token scales (1 without them writes nothing); the stacked tile with
 *           per-token scales on buffers with 0 is refused (pw_check_vt_stack). */
typedef struct pw_vt_buffers {
    uint8_t *touched;
    int32_t *slots;
    int64_t *list;
    uint32_t *count;
    uint8_t *tiles;
    int64_t capacity;
    int f16_tiles;
    int ts_tiles;
    /* Longest-first order of the attention kernel's CTAs on the tiles (bench/NOTES.md,
     * "Longest first"): union preparation appends every work item to the list of its size
     * class, min(pages / 8, 16); CTA b runs the b-th item counting from the largest class
     * (attention_config.cuh). The items, by sched_dense:
     *   0 (lean kernel): a 4-query half with a member, even one whose union is empty, as
     *     its block 2 (h max_groups + group) + half, pages = the half's union;
     *   1 (dense G = 8 tile): a group, as h max_groups + group, pages = its union;
     *   2 (dense G = 4 tile): a pair's leader group, as h max_groups + group, pages = the
     *     sum of the two unions (the second of the pair's two preparing warps appends it;
     *     a leader without a partner appends itself).
     * sched_count [PW_SCHED_CLASSES] in PW_SCHED_COUNTS_BYTES (cleared by a memset before
     * union preparation); with sched_dense 2 the pairs' scratch, [Hkv, max_groups] uint32,
     * follows them (cleared by the same memset); sched_list [PW_SCHED_CLASSES,
     * sched_stride] with sched_stride >= the items. NULL sched_count: block order. */
    uint32_t *sched_count;
    int32_t *sched_list;
    int64_t sched_stride;
    int sched_dense;
    /* Calls at G = 16, 8 or 4, K = 16, P = 128 on the pre-pass's tiles (bench/NOTES.md,
     * 21st, 27th and 28th sessions; FP8, with its second-term rows 0, since the 34th): which
     * tile runs, the lean kernel (G = 16) or the dense
     * G = 8 / 4 tile (P in f16 on f16 tiles), or the stacked tile (dev impl 12: both terms in
     * the rows of one tile, tiles without a member skipped; E4M3 tiles; G = 16: 2-slot
     * tiles, G = 8: one 4-slot tile per Union4 half, G = 4: one 8-slot tile per group). PW_STACK_NEVER (0): the other tile, as every other
     * call; PW_STACK_ALWAYS: the stacked tile; PW_STACK_PER_CALL (FP8X2 without per-token
     * scales, FP8 with them at G = 16): decided on the device
     * from stack_stat, two counts over the call's Top-K rows in identity order (a function
     * of the inputs only, never of the grouping): [0] the distinct valid pages of each unit
     * of consecutive queries (G = 16: pairs 2i, 2i + 1; G = 8: 4i .. 4i + 3; G = 4: 8i ..
     * 8i + 7), summed, [1] those of each block of two units (4, 8 or 16 queries), summed,
     * both over every
     * PW_STACK_SAMPLE-th block of each KV head (a query's valid pages: its
     * request's key, as union preparation's: 0 <= id < min(visible pages, max_pages));
     * PW_STACK_CHOSEN(G, [0], [1]) decides; [2] the stacked kernel's
     * work counter (its persistent CTAs take items in turn). stack_stat lies right after
     * `touched` (at touched + PW_STACK_STAT_OFFSET(entries)) whenever stack_mode is not
     * NEVER, so the pre-pass's memset clears it with the marks; the mark launch fills [0]
     * and [1] (PER_CALL). */
    int stack_mode;
    unsigned long long *stack_stat;
    /* plan.c's by_tile calls (the regroup objective follows the tile, unless
     * PW_PLAN_NO_REGROUP_BY_TILE), stack_mode PER_CALL only, else NULL: [Hkv, N] the
     * permutation of the stacked tile's regroup objective (pw_regroup_dual's perm_alt, g =
     * 2 at G = 16, 4 at G = 8). Union preparation, enqueued after the mark launch that fills stack_stat, reads
     * the call's choice: when the stacked tile runs it prepares the groups of perm_alt and
     * copies each slot of it into perm (the permutation the attention kernels read), else
     * it prepares perm's. */
    const int32_t *perm_alt;
    /* plan.c's by_tile calls, where union preparation follows the library's own kernels
     * (captured: the regroup and the mark launch; eager: the mark), and its calls without
     * the pre-pass that regroup on the device at K <= 16 (the regroup's one kernel right
     * before; no perm_alt, no stack_stat, no schedule): launched as a
     * programmatic dependent (cudaLaunchAttributeProgrammaticStreamSerialization) that scans
     * the requests before griddepcontrol.wait and reads the permutations and stack_stat
     * after it; the schedule's counts are then cleared by the caller before the regroup
     * (pw_union_prepare_clear_schedule), so that no memset node sits between the kernels.
     * 0: an ordinary launch after the memset. */
    int pdl;
} pw_vt_buffers_t;

/* Union preparation's page keys (page * 8 + slot in 32 bits; union_group.cuh's
 * kMaxUnionPageId): a plan takes max_pages_per_request up to this, and ids at or past it
 * are never union pages. */
#define PW_MAX_UNION_PAGE_ID (1 << 29)

enum { PW_STACK_NEVER = 0, PW_STACK_PER_CALL = 1, PW_STACK_ALWAYS = 2 };
/* vt's stack_mode against the call (G = 16, 8 or 4, K = 16, P = 128; PER_CALL: FP8X2
 * without per-token scales, FP8 with them at G = 16), the place of stack_stat (right after the marks) and, with
 * per-token scales, ts_tiles set (the stacked tile reads the scale arrays the pre-pass
 * writes only then); PW_SUCCESS for NEVER.
 * Checked by pw_vt_prepare before it enqueues anything, and by pw_union_attention_vt. */
pw_status_t pw_check_vt_stack(const pw_problem_t *problem, const pw_attention_args_t *args,
                              const pw_vt_buffers_t *vt);
/* Where stack_stat lies after `entries` touched bytes, and the bytes its words take. */
#define PW_STACK_STAT_OFFSET(entries) ((((size_t)(entries)) + 7u) & ~(size_t)7u)
#define PW_STACK_STAT_BYTES 32u
/* The per-call choice: the stacked tile when the units' pages are fewer than
 * PW_STACK_RATIO_MILLI(G) / 1000 of twice the blocks' pages (the stacked kernel's tile steps
 * per step of the other tile, in identity order). G = 16: units are pairs of queries, blocks
 * are 4-query Union4 halves, the other tile the lean kernel. H200, A-hot-like synthetic
 * selections and two captures (bench/NOTES.md, 21st session): the stacked kernel's time over
 * the lean kernel's is ~0.11 + 1.23 x that ratio (0.76 at 0.53, 0.93 at 0.67, 1.02 at 0.74,
 * 1.14 at 0.84): break-even ~0.73; after the stacked tile's one-product QK / PV (33rd session)
 * 0.89 at 0.674 (A-hot), 0.95 at 0.726 and 0.97 at 0.747 (A-hot regenerated with
 * --p-hot 0.85 / 0.9), 0.99 at 0.744 (B-hot), 1.04 at 0.794, 1.10 at 0.836 (two captures):
 * break-even ~0.76, threshold 0.75 (was 0.71). G = 8: units are 4-query halves (the 4-slot tile's
 * union), blocks 8-query groups (the dense G = 8 tile's): kernel time ratio 0.66 at 0.54,
 * 0.84 at 0.71, 0.92 at 0.80, 1.02 at 0.87, 1.04 at 0.88 (bench/NOTES.md, 27th session):
 * break-even ~0.845. G = 4: units are 8-query groups (the 8-slot tile's union), blocks
 * pairs of groups (the dense G = 4 tile's merged union); the full call forced to each tile
 * (FP8X2, W128): stacked / dense 0.80 at r 0.70, 0.82 at 0.73, 0.94 at 0.82, 0.97 at 0.88,
 * 1.02 at 0.89, and the default call pays ~15 us more when the stacked tile runs (the
 * dense grid's CTAs exit) than when the dense tile does (bench/NOTES.md, 28th session):
 * r = 0.87. */
/* The counts read every PW_STACK_SAMPLE-th block of each KV head (blocks 0, S, 2S, ...):
 * the 8-query blocks' shuffles took ~20 us of a 3-KV-head call counted in full (H200,
 * bench/NOTES.md, 27th session), and the ratio is a mean over thousands of blocks. */
#define PW_STACK_SAMPLE 4
/* The counts' unit of consecutive queries at G (a block is two units): the stacked tile's
 * queries, 2 at G = 16 (a 2-slot tile), 4 at G = 8 (a Union4 half), 8 at G = 4 (a group). */
#define PW_STACK_UNIT_QUERIES(g) ((g) == 8 ? 4 : (g) == 4 ? 8 : 2)
#define PW_STACK_MAX_RATIO_MILLI 750u
#define PW_STACK_MAX_RATIO_MILLI_G8 840u
#define PW_STACK_MAX_RATIO_MILLI_G4 870u
#define PW_STACK_RATIO_MILLI(g)                                                                                     \
    ((g) == 8 ? PW_STACK_MAX_RATIO_MILLI_G8 : (g) == 4 ? PW_STACK_MAX_RATIO_MILLI_G4 : PW_STACK_MAX_RATIO_MILLI)
#define PW_STACK_CHOSEN(g, unit_pages, block_pages)                                                              \
    ((unsigned long long)(unit_pages) * 1000ull <                                                                \
     (unsigned long long)PW_STACK_RATIO_MILLI(g) * 2ull * (unsigned long long)(block_pages))

#define PW_VT_TILE_BYTES 32768   /* one V^T tile (P x D f16; E4M3 uses its first half): the plan's stride, kVtTileBytes */
#define PW_SCHED_CLASSES 17       /* pages / (K / 2) for 0..8 K pages (K = 16: 8-page classes) */
#define PW_SCHED_COUNTS_BYTES 256 /* the class counts' room before the pairs' scratch or the lists */

/* Clears vt's schedule counts (and the dense G = 4 pairs' scratch) on the stream: what
 * pw_union_prepare_scheduled does first unless vt->pdl (plan.c clears them before
 * the regroup when union preparation is launched as its programmatic dependent). */
pw_status_t pw_union_prepare_clear_schedule(const pw_problem_t *problem, const pw_union_meta_t *meta,
                                            const pw_vt_buffers_t *vt, pw_stream_t stream);
/* CUDA build: pw_union_prepare that, with vt->sched_count (the full call's pre-pass
 * buffers), also clears (memset, unless vt->pdl) and fills the attention CTAs'
 * schedule lists; vt->pdl launches it as a programmatic dependent of the previous kernel
 * (pw_vt_buffers_t.pdl; K <= 16 only, else PW_ERROR_INVALID_ARGUMENT; with or without
 * perm_alt); vt->perm_alt
 * and stack_stat as documented there. vt NULL:
 * pw_union_prepare. */
pw_status_t pw_union_prepare_scheduled(const pw_problem_t *problem, const int32_t *topk_ids,
                                       const pw_requests_t *requests, const pw_grouping_t *grouping,
                                       const int32_t *perm, const pw_union_meta_t *meta,
                                       const pw_vt_buffers_t *vt, pw_stream_t stream);

/* Two parallel branches of a captured graph on one stream (CUDA build,
 * src/cuda/capture_branch.cu). When `stream` is capturing, open remembers the capture's
 * current dependencies (the fork), next remembers where the first branch ended and makes
 * the stream's next work depend on the fork again, and join adds the first branch's end to
 * the stream's dependencies, so that what follows waits for both branches. When the stream
 * is not capturing (or the fork or the first branch's end has more than
 * PW_CAPTURE_BRANCH_MAX_DEPS nodes), the three calls do nothing and the branches run one
 * after the other in stream order: the same work, the same results. No allocation, no
 * stream or event of the library's own; a failing CUDA call gives PW_ERROR_CUDA. */
#define PW_CAPTURE_BRANCH_MAX_DEPS 16

/* A captured stream's dependency set, saved and restored (the branches below are made of
 * these; the full call's by_tile calls, plan.c, shape a larger graph with them). get: active
 * 0 when the stream is not being captured or the set has more than PW_CAPTURE_BRANCH_MAX_DEPS
 * nodes; set (add 0) replaces the stream's set with the saved one, set (add 1) adds it. */
typedef struct pw_capture_deps {
    int active;
    size_t count;
    void *nodes[PW_CAPTURE_BRANCH_MAX_DEPS];          /* cudaGraphNode_t */
    unsigned char edges[PW_CAPTURE_BRANCH_MAX_DEPS][8]; /* cudaGraphEdgeData */
} pw_capture_deps_t;
pw_status_t pw_capture_deps_get(pw_stream_t stream, pw_capture_deps_t *deps);
pw_status_t pw_capture_deps_set(pw_stream_t stream, const pw_capture_deps_t *deps, int add);

typedef struct pw_capture_branch {
    int active;              /* the branches are being built */
    pw_capture_deps_t fork;  /* the dependencies before the first branch */
    pw_capture_deps_t first; /* the first branch's end */
} pw_capture_branch_t;
pw_status_t pw_capture_branch_open(pw_stream_t stream, pw_capture_branch_t *branch);
pw_status_t pw_capture_branch_next(pw_stream_t stream, pw_capture_branch_t *branch);
pw_status_t pw_capture_branch_join(pw_stream_t stream, pw_capture_branch_t *branch);

/* G if the problem's G Q heads per KV head have a dense tile on the V^T pre-pass (8: dev
 * impl 13; 4: dev impl 14, pairs of 8-query groups; both for any K <= 64), else 0. */
int pw_dense_tile_g(const pw_problem_t *problem);

/* The G of the dense tile pw_union_attention_vt runs for these arguments (pw_dense_tile_g
 * without per-token scales, or with them in PW_PRECISION_FP8), else 0 (the lean kernel; with
 * per-token scales in FP8X2 the stacked tile where pw_vt_buffers_t.stack_mode says so). The
 * plan's schedule and regroup follow it. */
int pw_vt_runs_dense(const pw_problem_t *problem, const pw_attention_args_t *args);

/* CUDA build (src/cuda/union_prepare.cu): rows x k Top-K ids -> rows x k_padded, -1 after k
 * (pw_sparse_prefill's padding of K to the device's 16, 32 or 64; 1 <= k < k_padded <= 64). */
pw_status_t pw_pad_topk(const int32_t *topk_ids, int32_t k, int32_t k_padded, int32_t *padded, int64_t rows,
                        pw_stream_t stream);

/* CUDA build (src/cuda/vt_prepare.cu): the V^T pre-pass of the Union4 full call. With
 * vt->touched: a memset and the mark (touched bytes from args->topk_ids and the request
 * layout; count zeroed), so that it depends on no regroup or union preparation; without
 * (every visible page; vt->count must be zero before the call): no mark. Then the scan
 * gives each touched page a tile and each tile receives its page's V^T. Arguments as
 * checked for pw_union_attention. */
pw_status_t pw_vt_prepare(const pw_problem_t *problem, const pw_attention_args_t *args,
                          const pw_vt_buffers_t *vt, pw_stream_t stream);
/* The same in two parts (parts: an or of these): PW_VT_MARKS the memset and the mark launch
 * (and the stacked tile's counts), PW_VT_TILES the scan and the transpose, which must follow
 * the marks on the stream (a by_tile call, plan.c, puts union preparation between them in
 * a graph: it reads the counts). Both: pw_vt_prepare. */
enum { PW_VT_MARKS = 1, PW_VT_TILES = 2 };
pw_status_t pw_vt_prepare_parts(const pw_problem_t *problem, const pw_attention_args_t *args,
                                const pw_vt_buffers_t *vt, int parts, pw_stream_t stream);

/* CUDA build (src/cuda/regroup.cu): pw_regroup (GREEDY or GUARDED, K <= 16, W 64 / 128) in
 * one launch with two group sizes: grouping->group_size into perm and alt_group_size (1, 2,
 * 4 or 8) into perm_alt; each byte-equal to pw_regroup's with that g (a second warp of
 * each window's CTA walks the same masks): plan.c's by_tile calls. */
pw_status_t pw_regroup_dual(const pw_problem_t *problem, const int32_t *topk_ids, const pw_requests_t *requests,
                            const pw_grouping_t *grouping, int32_t alt_group_size, int32_t *perm, int32_t *perm_alt,
                            pw_stream_t stream);

/* CUDA build: pw_union_attention with PW_KERNEL_UNION4 on the pre-pass's V^T tiles (the
 * lean kernel, attention_lean.cuh, PREVT; at G = 8 / 4 the dense tiles, attention_dense.cuh,
 * unless FP8X2 with per-token scales: pw_vt_runs_dense), its CTAs in vt's longest-first order when vt->sched_count
 * is set: the full call's attention step. When
 * R x max_pages > vt->capacity a second launch, the kernel that transposes V itself, runs
 * the KV heads whose pages did not fit (its CTAs of the other heads exit at once). */
pw_status_t pw_union_attention_vt(const pw_problem_t *problem, const pw_attention_args_t *args,
                                  const pw_grouping_t *grouping, const int32_t *perm,
                                  const pw_union_meta_t *meta, const pw_vt_buffers_t *vt, pw_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
