/* The full prefill call (docs/semantics.md §5): a plan fixes shapes and choices, pw_sparse_prefill
 * enqueues regroup -> union preparation -> attention on one stream.
 *
 * Plain C host code: it only carves the caller's workspace and calls the device entry
 * points (src/cuda/regroup.cu, union_prepare.cu, attention.cu), which enqueue and return.
 * A call enqueues three kernels: the regroup (or the identity permutation), union
 * preparation, attention; with the V^T pre-pass (below) a memset before union preparation,
 * the scan and the transpose before attention, and a fallback attention launch when the
 * table has more entries than the tile capacity. PW_REGROUP_AUTO picks regroup or identity
 * per call from the time guard (src/time_guard.c).
 * Nothing here allocates device memory, synchronises or reads device memory, so a call is
 * capturable in a CUDA graph. Without CUDA in the build the device step returns
 * PW_ERROR_UNSUPPORTED; creation and the size query still work (they are host arithmetic).
 *
 * Workspace layout (each part 256-byte aligned, after aligning the base up to 256):
 *   topk_padded   [Hkv, N, Kd] int32        (K not 16, 32 or 64 only: the Top-K rows padded
 *                                            with -1 to Kd = 16, 32 or 64; every later
 *                                            step sees K = Kd)
 *   perm          [Hkv, N] int32            (absent with PW_PLAN_CALLER_PERM)
 *   perm_alt      [Hkv, N] int32            (by_tile plans whose calls may choose the tile
 *                                            per call (FP8X2; FP8 with per-token scales at
 *                                            G = 16), unless PW_PLAN_NO_REGROUP_BY_TILE:
 *                                            the g = 2 regroup's permutation,
 *                                            pw_vt_buffers_t.perm_alt)
 *   num_groups    [Hkv] int32
 *   groups        [Hkv, max_groups] pw_group_desc_t
 *   union_pages   [Hkv, max_groups, 8 Kd] int32
 *   member_masks  [Hkv, max_groups, 8 Kd] uint8
 *   regroup       pw_regroup_workspace_size() bytes (absent with PW_PLAN_CALLER_PERM)
 *   vt_touched    [Hkv, R, max_pages] uint8  (Union4 with the V^T pre-pass only: pages of any union,
 *                                            marked from the Top-K ids); at G = 16, Kd = 16,
 *                                            P = 128 then, 8-byte aligned, 4 uint64: the FP8X2
 *                                            tile choice's two counts, the stacked tile's work
 *                                            counter, one spare (pw_vt_buffers_t.stack_stat;
 *                                            cleared with the marks)
 *   vt_slots      [Hkv, R, max_pages] int32  (the same: each touched page's tile)
 *   vt_list       [Hkv, C] int64             (the page of each tile)
 *   vt_count      [Hkv] uint32               (pages touched per KV head)
 *   vt_tiles      [Hkv, C] x 32 KiB V^T tiles (f16 for FP8X2 without per-token scales unless the
 *                                            call runs the stacked tile, else E4M3 in the first half), C = vt_capacity
 *   schedule      17 uint32 class counts (256 bytes), then [17, 2 Hkv max_groups] int32
 *                 class lists: the attention CTAs' longest-first order (pre-pass only;
 *                 pw_vt_buffers_t in pw_internal.h; cleared by a memset before union
 *                 preparation, which fills it). For the dense G = 4 tile the counts are
 *                 followed by [Hkv max_groups] uint32 pair sizes (cleared with them), then
 *                 [17, Hkv max_groups] lists: 256 + 72 Hkv max_groups bytes of the part
 * Whether a Union4 plan runs the pre-pass: PW_PLAN_VT_PREPASS / NO_VT_PREPASS, else the rule
 * in pw_plan_create (pageweaver.h). Such a call enqueues the V^T pre-pass (src/cuda/
 * vt_prepare.cu: a memset of vt_touched, then three kernels: mark from the Top-K ids, which
 * also zeroes vt_count; scan; transpose) before attention (which reads vt_slots and
 * vt_tiles), and, when the table has more entries than C (R x max_pages > C), a fallback
 * attention launch for the KV heads whose pages did not fit. The pre-pass reads none of the
 * regroup's or union preparation's outputs: under stream capture the call makes those two
 * a parallel branch of the graph beside it (pw_capture_branch_open). Every part is written
 * before it is read in each call, so the workspace may hold anything between calls. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pageweaver.h"
#include "pw_internal.h"
#include "time_guard.h"

#define PW_PLAN_ALIGN ((size_t)256)
#define PW_PLAN_GROUP_SIZE PW_UNION_GROUP_SIZE /* union metadata groups (Union8's); Union4 walks each half */
#define PW_PLAN_UNION4_REGROUP_SIZE 4 /* Union4's regroup objective: 4-query unions (C_4) */
#define PW_PLAN_STACKED_REGROUP_SIZE 2 /* the stacked 2-slot tile's (G = 16): pair unions (by_tile plans) */
#define PW_PLAN_STACKED8_REGROUP_SIZE 4 /* the stacked 4-slot tile's (G = 8): 4-query unions, C_4 */

enum {
    PART_TOPK_PADDED, PART_PERM, PART_PERM_ALT, PART_NUM_GROUPS, PART_GROUPS, PART_UNION_PAGES, PART_MASKS, PART_REGROUP, PART_VT_TOUCHED,
    PART_VT_SLOTS, PART_VT_LIST, PART_VT_COUNT, PART_VT_TILES, PART_SCHED, NUM_PARTS
};
#define PW_PLAN_CONFIG_V1_SIZE offsetof(pw_plan_config_t, vt_max_pages) /* before vt_max_pages */
#define PW_PLAN_CONFIG_V2_SIZE offsetof(pw_plan_config_t, max_query_rows) /* before max_query_rows */
#define PW_PLAN_VT_MIN_QUERIES 4096 /* the pre-pass rule (pageweaver.h, PW_PLAN_VT_PREPASS): N >= 4096, */
#define PW_PLAN_VT_MIN_QUERIES_WIDE_TOPK 2048 /* or N >= 2048 ... */
#define PW_PLAN_VT_MIN_TOPK_WIDE 32           /* ... with the caller's K >= 32 */
#define PW_PLAN_VT_MIN_QUERIES_LIMITED 8192   /* the rule where the tile limit is below the default */
#define PW_PLAN_VT_MIN_PER_PAGE 64   /* the rule: selections per touched page (N x K / 64 tiles) */
#define PW_PLAN_VT_DEFAULT_PAGES 2048 /* tiles per KV head when config.vt_max_pages is 0 ... */
#define PW_PLAN_VT_DEFAULT_TOTAL 32768 /* ... and at most this many in all (1 GiB) */
#define PW_PLAN_VT_MAX_ENTRIES_PER_SELECTION 4 /* the rule: page-table entries per selection */
#define PW_PLAN_VT_MAX_SCAN_CTAS 0x7fffffffLL /* the scan's 1-D grid of 256 threads */

struct pw_plan {
    pw_problem_t problem;   /* the caller's, with topk = Kd: K padded to 16, 32 or 64 */
    int32_t given_topk;     /* the caller's K (1..64) */
    pw_plan_config_t config;
    pw_grouping_t regroup;  /* what pw_regroup runs (mode, window, g = 4 for Union4 or 8);
                               with AUTO the mode is GUARDED and each call may run
                               IDENTITY instead; union preparation uses `grouping` (g = 8) */
    int regroup_pays[2];    /* AUTO: the time guard's choice per pw_precision_t (1 =
                               regroup); decided once at creation (host shapes only) */
    double saving_us[2], cost_us[2]; /* the time guard's figures per precision */
    pw_grouping_t grouping; /* group boundaries for union preparation and attention */
    int64_t max_groups;     /* per KV head: pw_max_groups(problem, grouping) */
    int32_t union_capacity; /* 8 * Kd */
    int vt_prepass;         /* Union4: the V^T pre-pass + lean kernel (else impl 6 transposes V) */
    int stack_eligible;     /* vt_prepass at G = 16, 8 or 4, Kd = 16, P = 128: calls may run
                               the stacked tile (stack_mode) */
    int64_t vt_capacity;    /* V^T tiles per KV head (C); a head touching more falls back */
    int by_tile;            /* not PW_PLAN_NO_REGROUP_BY_TILE, on a stack_eligible plan at G = 16 or 8
                               that regroups itself: calls regroup for the tile they run (FP8X2's; FP8's
                               with per-token scales or PW_PLAN_FP8X2_STACKED)
                               (at G = 4 both tiles walk 8-query unions: g = 8 either way) */
    size_t part_offset[NUM_PARTS]; /* from the aligned base */
    size_t part_bytes[NUM_PARTS];
    size_t workspace_bytes; /* total the caller provides, including alignment slack */
};

/* The G of the dense tile the plan's calls without per-token scales run (8 or 4), else 0
 * (pw_union_attention_vt's choice, pw_vt_runs_dense, on the V^T pre-pass). */
static int plan_runs_dense(const pw_plan_t *plan)
{
    return plan->vt_prepass ? pw_dense_tile_g(&plan->problem) : 0;
}

/* Which tile a call on the tiles runs (pw_vt_buffers_t.stack_mode): the stacked tile
 * (ALWAYS), the other tile (NEVER) or, for FP8X2 without per-token scales and FP8 with them
 * at G = 16 on an eligible plan by default, the device's choice per call (PER_CALL); the
 * flags fix it. PW_STACK_NEVER
 * on a plan that is not stack_eligible.
 * FP8X2 with per-token scales: the stacked tile always by default: the other tile is then
 * the lean kernel's per-token-scale form (G = 16) or the padded tile (G = 8 / 4: the dense
 * tiles read them in FP8 only), and the stacked tile measured faster on every input, the
 * captures included (H200, A / B / C-hot and two captures: 0.70-0.86x at G = 16, 0.48-0.50x
 * at G = 8, 0.27-0.38x at G = 4; bench/NOTES.md, 29th session).
 * FP8 (since 2026-12-04, 34th session): the stacked tile with its second-term rows 0 computes
 * FP8's arithmetic bit for bit (the lean kernel's and the dense tiles' outputs, with and
 * without per-token scales: test_token_scales_on_tiles). With per-token scales at G = 8 / 4
 * it runs by default: the dense tiles' per-token-scale forms measured 1.35-1.8x its time on
 * every input (H200 full call, A-hot G = 8 / 4: 1171 / 934 us on the dense tile, 648 / 519 on
 * the stacked tile; austen_L15_pre0: 1708 / 1093 vs 1267 / 737). With per-token scales at
 * G = 16 the device picks per call with FP8X2's G = 16 rule (the stacked tile 0.90-0.98x the
 * lean kernel's per-token-scale form on A / B / C-hot, r 0.67-0.75; 1.06-1.07x on two
 * captures, r 0.84-0.87: break-even ~0.77). Without per-token scales FP8 keeps the lean
 * kernel and the dense tiles (G = 16: the stacked tile 1.05-1.26x; G = 8 / 4 it was
 * 0.92-0.97x on A / C-hot but 1.0-1.21x on B-hot and a capture, a break-even below FP8X2's
 * rule; bench/NOTES.md, 34th session) unless PW_PLAN_FP8X2_STACKED. */
static int stack_mode(const pw_plan_t *plan, const pw_attention_args_t *args)
{
    if (!plan->stack_eligible) return PW_STACK_NEVER;
    if (plan->config.flags & PW_PLAN_FP8X2_STACKED) return PW_STACK_ALWAYS;
    if (plan->config.flags & PW_PLAN_NO_FP8X2_STACKED) return PW_STACK_NEVER;
    const pw_token_scales_t ts = pw_args_token_scales(args);
    const int scaled = ts.k || ts.v;
    if (pw_args_precision(args) != PW_PRECISION_FP8X2)
        return !scaled ? PW_STACK_NEVER : plan->problem.q_heads_per_kv == 16 ? PW_STACK_PER_CALL : PW_STACK_ALWAYS;
    return scaled ? PW_STACK_ALWAYS : PW_STACK_PER_CALL;
}

/* The G of the dense tile whose work items and regroup objective the call's tile takes
 * (0: the lean kernel's halves): the dense tile itself (pw_vt_runs_dense: without per-token
 * scales, or FP8 with them), or, with per-token scales in FP8X2, the stacked tile always run (stack_mode) at G = 8 / 4,
 * which walks the dense tile's items (groups at G = 8, pairs of groups at G = 4); at G = 16
 * it walks the lean kernel's halves. */
#ifdef PW_HAVE_CUDA
static int call_dense_g(const pw_plan_t *plan, const pw_attention_args_t *args, int stack)
{
    if (!plan->vt_prepass) return 0;
    const int dense_g = pw_vt_runs_dense(&plan->problem, args);
    return dense_g ? dense_g : stack == PW_STACK_ALWAYS ? pw_dense_tile_g(&plan->problem) : 0;
}
#endif

/* g of a call's regroup: with by_tile (not PW_PLAN_NO_REGROUP_BY_TILE) a call that always
 * runs the stacked tile: its tiles' unions (2 at G = 16: pairs; 4 at G = 8: Union4 halves,
 * C_4); otherwise the dense tiles walk 8-query unions (G = 8: 90,783 union visits
 * on A-hot after the g = 8 regroup, 95,292 after g = 4; G = 4, pairs of them: 69,233
 * merged visits, 70,524 after g = 4, 71,891 in identity order; H200 full call 0.713 ms
 * FP8X2 against 0.727 in identity order, bench/NOTES.md), every other tile (also a dense
 * plan's FP8X2 call with per-token scales and PW_PLAN_NO_FP8X2_STACKED: the padded tile)
 * the plan's objective (g = 4 for
 * Union4's halves, 8 for Union8 or PW_PLAN_REGROUP_GROUPS_OF_8).
 * dense_g: the tile's G (plan_runs_dense, or pw_vt_runs_dense for a call), 0 for none;
 * stack: the call's stack_mode. */
static int32_t stacked_regroup_size(const pw_plan_t *plan) /* by_tile plans only: G = 16 or 8 */
{
    return plan->problem.q_heads_per_kv == 8 ? PW_PLAN_STACKED8_REGROUP_SIZE : PW_PLAN_STACKED_REGROUP_SIZE;
}

static int32_t regroup_size(const pw_plan_t *plan, int dense_g, int stack)
{
    if (plan->by_tile && stack == PW_STACK_ALWAYS) return stacked_regroup_size(plan);
    if (dense_g) return PW_PLAN_GROUP_SIZE;
    return plan->regroup.group_size;
}

/* a * b + c, or 0 (with *ok = 0) past SIZE_MAX. */
static size_t mul_add(int64_t a, int64_t b, int *ok)
{
    if (a < 0 || b < 0 || (b != 0 && (uint64_t)a > (uint64_t)SIZE_MAX / (uint64_t)b)) {
        *ok = 0;
        return 0;
    }
    return (size_t)a * (size_t)b;
}

static size_t align_up(size_t x, int *ok)
{
    if (x > SIZE_MAX - (PW_PLAN_ALIGN - 1)) {
        *ok = 0;
        return 0;
    }
    return (x + PW_PLAN_ALIGN - 1) & ~(PW_PLAN_ALIGN - 1);
}

/* Whether the V^T pre-pass's scan grid (Hkv x R x max_pages entries, 256 per CTA, 1-D)
 * fits; no product can overflow (each factor < 2^31, divided before the last product). */
static int vt_scan_fits(const pw_problem_t *p)
{
    const int64_t per_head_ctas = ((int64_t)p->num_requests * p->max_pages_per_request + 255) / 256;
    return per_head_ctas <= PW_PLAN_VT_MAX_SCAN_CTAS / p->num_kv_heads;
}

/* c: a full-size config (pw_plan_create checks struct_size and widens an earlier one). */
static pw_status_t check_config(const pw_problem_t *p, const pw_plan_config_t *c)
{
    if (c->flags & ~(uint32_t)(PW_PLAN_CALLER_PERM | PW_PLAN_VT_PREPASS | PW_PLAN_NO_VT_PREPASS |
                               PW_PLAN_REGROUP_GROUPS_OF_8 | PW_PLAN_FP8X2_STACKED | PW_PLAN_NO_FP8X2_STACKED |
                               PW_PLAN_NO_REGROUP_BY_TILE))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "config.flags 0x%x has unknown bits", c->flags);
    if ((c->flags & PW_PLAN_FP8X2_STACKED) && (c->flags & PW_PLAN_NO_FP8X2_STACKED))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.flags has both PW_PLAN_FP8X2_STACKED and PW_PLAN_NO_FP8X2_STACKED");
    if ((c->flags & PW_PLAN_VT_PREPASS) && (c->flags & PW_PLAN_NO_VT_PREPASS))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.flags has both PW_PLAN_VT_PREPASS and PW_PLAN_NO_VT_PREPASS");
    if (c->kernel != PW_KERNEL_UNION8 && c->kernel != PW_KERNEL_UNION4 && c->kernel != PW_KERNEL_PER_QUERY)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "config.kernel is %d (not a pw_kernel_t)", (int)c->kernel);
    if ((c->flags & (PW_PLAN_VT_PREPASS | PW_PLAN_NO_VT_PREPASS)) && c->kernel != PW_KERNEL_UNION4)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.flags: PW_PLAN_VT_PREPASS / PW_PLAN_NO_VT_PREPASS need PW_KERNEL_UNION4");
    if (c->regroup != PW_REGROUP_IDENTITY && c->regroup != PW_REGROUP_GREEDY &&
        c->regroup != PW_REGROUP_GUARDED && c->regroup != PW_REGROUP_AUTO)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "config.regroup is %d (not a pw_regroup_mode_t)",
                       (int)c->regroup);
    const int caller_perm = (c->flags & PW_PLAN_CALLER_PERM) != 0;
    if (caller_perm && c->kernel == PW_KERNEL_PER_QUERY)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config: PW_PLAN_CALLER_PERM with PW_KERNEL_PER_QUERY (it uses no permutation)");
    if (c->window < 0 && c->window != PW_WINDOW_AUTO)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "config.window is %d (< 0 and not PW_WINDOW_AUTO)", c->window);
    const int g = p->q_heads_per_kv;
    if ((g != 16 && g != 8 && g != 4) || p->head_dim != 128 || (p->page_size != 128 && p->page_size != 64) ||
        p->topk < 1 || p->topk > 64)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "no GPU path for G=%d D=%d P=%d K=%d (supported: G=16, 8 or 4, D=128, P=128 or 64, K=1..64; "
                       "K is padded with -1 to 16, 32 or 64)",
                       g, p->head_dim, p->page_size, p->topk);
    if (p->page_size == 64 && c->kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "P=64: the Union8 kernel runs pages of 128 tokens only (PW_KERNEL_UNION4, the default, and "
                       "PW_KERNEL_PER_QUERY run P = 64)");
    if (p->topk > 16 && c->kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "K=%d: the Union8 kernel runs K = 16 (and K < 16, padded) only (PW_KERNEL_UNION4, the default, and "
                       "PW_KERNEL_PER_QUERY run K up to 64)",
                       p->topk);
    if (g != 16 && c->kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "G=%d Q heads per KV head: the Union8 kernel runs G=16 only (PW_KERNEL_UNION4, the "
                       "default, and PW_KERNEL_PER_QUERY run G=8 and 4: a padded tile, or on Union4's V^T "
                       "pre-pass a dense tile)",
                       g);
    /* K > 16 with AUTO and a window other than 64 / 128: no regroup runs in the call (the
     * time guard rejects the window, below), so the window only cuts the union groups (kept
     * from before the guard covered K > 16); otherwise regroups run in windows of 64 / 128. */
    if (!caller_perm && c->regroup != PW_REGROUP_IDENTITY && c->kernel != PW_KERNEL_PER_QUERY &&
        (p->topk <= 16 || c->regroup != PW_REGROUP_AUTO) && c->window != 64 && c->window != 128 &&
        c->window != PW_WINDOW_AUTO)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "config.window is %d; the in-call regroup supports 64 and 128", c->window);
    if (p->num_kv_heads > 65535)
        return pw_fail(PW_ERROR_UNSUPPORTED, "num_kv_heads %d > 65535", p->num_kv_heads);
    /* Limits of the device steps, checked here so that a plan that is accepted never fails
     * half-way through a call (after regroup and union preparation were enqueued). */
    if (c->kernel != PW_KERNEL_PER_QUERY && p->max_pages_per_request > PW_MAX_UNION_PAGE_ID)
        return pw_fail(PW_ERROR_UNSUPPORTED, "max_pages_per_request %d > 2^29 (union preparation's page keys)",
                       p->max_pages_per_request);
    if (c->vt_max_pages < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.vt_max_pages is %d (< 0; 0 for the default min(%d, %d / Hkv))", c->vt_max_pages,
                       PW_PLAN_VT_DEFAULT_PAGES, PW_PLAN_VT_DEFAULT_TOTAL);
    if (c->max_query_rows < 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.max_query_rows is %d (< 0; 0 when the most rows of a request is not known)",
                       c->max_query_rows);
    /* cu_seqlens_q[R] = N: R requests of at most max_query_rows rows hold at most R x that
     * many. A hint the shape contradicts is an engine passing the wrong value (it would keep
     * identity order on long requests): refused, not ignored. */
    if (c->max_query_rows > 0 && (int64_t)p->num_tokens > (int64_t)p->num_requests * c->max_query_rows)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "config.max_query_rows is %d, but N = %d query rows in R = %d requests: some request "
                       "has more rows (pass the most rows of any request, or 0 when not known)",
                       c->max_query_rows, p->num_tokens, p->num_requests);
    if ((c->flags & PW_PLAN_VT_PREPASS) && !vt_scan_fits(p))
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "PW_PLAN_VT_PREPASS with Hkv x R x max_pages = %.4g page-table entries (the V^T "
                       "pre-pass's scan grid)",
                       (double)p->num_kv_heads * p->num_requests * p->max_pages_per_request); /* may pass 2^63 */
    return PW_SUCCESS;
}

/* Sizes and offsets of the workspace parts. */
static pw_status_t layout(pw_plan_t *plan)
{
    const pw_problem_t *p = &plan->problem;
    const int caller_perm = (plan->config.flags & PW_PLAN_CALLER_PERM) != 0;
    memset(plan->part_bytes, 0, sizeof plan->part_bytes);
    memset(plan->part_offset, 0, sizeof plan->part_offset);
    plan->workspace_bytes = 0;
    const int64_t hkv = p->num_kv_heads, mg = plan->max_groups, cap = plan->union_capacity;
    int ok = 1;
    if (p->num_tokens == 0) return PW_SUCCESS; /* nothing is enqueued: no workspace (NULL and 0) */
    if (plan->given_topk != p->topk) plan->part_bytes[PART_TOPK_PADDED] = mul_add(hkv * p->topk * 4, p->num_tokens, &ok);
    if (plan->config.kernel == PW_KERNEL_PER_QUERY) goto place;
    if (!caller_perm) {
        plan->part_bytes[PART_PERM] = mul_add(hkv * 4, p->num_tokens, &ok);
        if (plan->by_tile && !(plan->config.flags & PW_PLAN_FP8X2_STACKED)) /* per-call choice only */
            plan->part_bytes[PART_PERM_ALT] = mul_add(hkv * 4, p->num_tokens, &ok);
        size_t regroup_bytes = 0;
#ifdef PW_HAVE_CUDA
        PW_TRY(pw_regroup_workspace_size(p, &plan->regroup, &regroup_bytes));
#endif
        plan->part_bytes[PART_REGROUP] = regroup_bytes;
    }
    plan->part_bytes[PART_NUM_GROUPS] = (size_t)hkv * 4;
    plan->part_bytes[PART_GROUPS] = mul_add(hkv * (int64_t)sizeof(pw_group_desc_t), mg, &ok);
    const size_t rows = mul_add(hkv, mg, &ok);
    plan->part_bytes[PART_UNION_PAGES] = mul_add((int64_t)rows, cap * 4, &ok);
    plan->part_bytes[PART_MASKS] = mul_add((int64_t)rows, cap, &ok);
    if (plan->vt_prepass) {
        const size_t entries = mul_add(hkv * (int64_t)p->num_requests, p->max_pages_per_request, &ok);
        /* The marks, then (plans that may run the stacked tile) its counts and work counter,
         * cleared by the same memset (pw_vt_buffers_t.stack_stat). */
        plan->part_bytes[PART_VT_TOUCHED] =
            plan->stack_eligible ? (entries > SIZE_MAX - 64 ? (ok = 0, 0) : PW_STACK_STAT_OFFSET(entries) + PW_STACK_STAT_BYTES)
                                 : entries;
        plan->part_bytes[PART_VT_SLOTS] = mul_add((int64_t)entries, 4, &ok);
        plan->part_bytes[PART_VT_LIST] = mul_add(hkv * 8, plan->vt_capacity, &ok);
        plan->part_bytes[PART_VT_COUNT] = (size_t)hkv * 4;
        plan->part_bytes[PART_VT_TILES] = mul_add(hkv * (int64_t)PW_VT_TILE_BYTES, plan->vt_capacity, &ok);
        const size_t lists = mul_add(PW_SCHED_CLASSES * 2 * 4, (int64_t)rows, &ok);
        plan->part_bytes[PART_SCHED] =
            lists > SIZE_MAX - PW_SCHED_COUNTS_BYTES ? (ok = 0, 0) : PW_SCHED_COUNTS_BYTES + lists;
    }
place:;
    size_t at = 0;
    for (int i = 0; i < NUM_PARTS && ok; i++) {
        plan->part_offset[i] = at;
        const size_t end = align_up(plan->part_bytes[i], &ok);
        if (at > SIZE_MAX - end) ok = 0;
        else at += end;
    }
    if (ok && at > SIZE_MAX - (PW_PLAN_ALIGN - 1)) ok = 0;
    if (!ok)
        return pw_fail(PW_ERROR_UNSUPPORTED, "workspace for N=%d Hkv=%d exceeds SIZE_MAX",
                       p->num_tokens, p->num_kv_heads);
    plan->workspace_bytes = at ? at + PW_PLAN_ALIGN - 1 : 0;
    return PW_SUCCESS;
}

/* PW_WINDOW_AUTO (pageweaver.h): an AUTO plan that can regroup takes the time guard's
 * window in the default arithmetic (FP8X2); every other plan 128 (the default before).
 * p: the plan's problem (topk = Kd). */
static int32_t auto_window(const pw_problem_t *p, const pw_plan_config_t *c)
{
    if (c->regroup != PW_REGROUP_AUTO || (c->flags & PW_PLAN_CALLER_PERM) || c->kernel == PW_KERNEL_PER_QUERY)
        return 128;
    const pw_time_guard_inputs_t in = {p->num_tokens,     p->num_requests, p->num_kv_heads, p->max_pages_per_request,
                                       c->kernel,         PW_PRECISION_FP8X2, 128};
    return pw_time_guard_window(&in, p->topk, pw_time_guard_model(), pw_time_guard_wide_model());
}

pw_status_t pw_plan_create(const pw_problem_t *problem, const pw_plan_config_t *config,
                           pw_plan_t **out)
{
    if (!out) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_cache_shape(problem)); /* a plan is made for attention */
    const pw_plan_config_t defaults = PW_PLAN_CONFIG_INIT;
    pw_plan_config_t given = defaults;
    if (config) {
        /* A config of the size before vt_max_pages (callers built against the earlier
         * header) is read with vt_max_pages = 0, the default; a smaller one is refused
         * before anything past its size is read. */
        if (config->struct_size == PW_PLAN_CONFIG_V1_SIZE || config->struct_size == PW_PLAN_CONFIG_V2_SIZE) {
            memcpy(&given, config, config->struct_size);
            given.struct_size = sizeof(pw_plan_config_t);
        } else if (config->struct_size < sizeof(pw_plan_config_t)) {
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "config.struct_size is %u, expected %zu (initialise with PW_PLAN_CONFIG_INIT; "
                           "%zu and %zu, the sizes before vt_max_pages and before max_query_rows, are also read)",
                           config->struct_size, sizeof(pw_plan_config_t), (size_t)PW_PLAN_CONFIG_V1_SIZE,
                           (size_t)PW_PLAN_CONFIG_V2_SIZE);
        } else {
            given = *config;
        }
    }
    config = &given;
    PW_TRY(check_config(problem, config));

    pw_plan_t *plan = calloc(1, sizeof *plan);
    if (!plan) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_plan_create: %zu bytes", sizeof *plan);
    plan->problem = *problem;
    plan->given_topk = problem->topk;
    /* Kd: every device step runs on rows of 16, 32 or 64 ids (-1 padded). */
    plan->problem.topk = problem->topk <= 16 ? 16 : problem->topk <= 32 ? 32 : 64;
    problem = &plan->problem;
    if (given.window == PW_WINDOW_AUTO) given.window = auto_window(problem, &given);
    plan->config = *config;
    plan->config.struct_size = sizeof(pw_plan_config_t);
    const int caller_perm = (config->flags & PW_PLAN_CALLER_PERM) != 0;
    const pw_grouping_t init = PW_GROUPING_INIT;
    plan->regroup = init;
    plan->regroup.mode = config->regroup == PW_REGROUP_AUTO ? PW_REGROUP_GUARDED : config->regroup;
    plan->regroup.window = config->regroup == PW_REGROUP_IDENTITY ? 0 : config->window;
    /* Union4 executes C_4 = |U_G0| + |U_G1| (each 4-query half walks its own union), so its
     * regroup minimises 4-query unions (Algorithm 1 with g = 4: C_4 0.8-3.2% smaller than
     * with g = 8 on every shipped capture and workload, A-hot 2.3%; bench/NOTES.md); union
     * preparation still groups 8 slots, whose halves are then exactly the greedy 4-query
     * groups. */
    plan->regroup.group_size = config->kernel == PW_KERNEL_UNION4 && !(config->flags & PW_PLAN_REGROUP_GROUPS_OF_8)
                                   ? PW_PLAN_UNION4_REGROUP_SIZE
                                   : PW_PLAN_GROUP_SIZE;
    plan->grouping = plan->regroup;
    plan->grouping.group_size = PW_PLAN_GROUP_SIZE;
    /* AUTO: the time guard per precision. A plan that regroups in either precision groups
     * in windows of W for both (a call that keeps identity order then has runs of 8 from
     * each request start, the same groups as window 0 since W is a multiple of 8); one that
     * keeps identity order in both is the identity plan (below). */
    /* K > 16 (Kd 32, 64): the wide-Top-K regroup kernels, and the time guard's K > 16 form
     * (their measured cost, the K = 16 saving scaled down; src/time_guard_wide_constants.h).
     * AUTO at K > 16 also takes a window other than 64 / 128 (accepted before the guard
     * covered K > 16): it then keeps identity order, the guard rejecting that window. */
    const int can_regroup = !caller_perm && config->kernel != PW_KERNEL_PER_QUERY &&
                            config->regroup != PW_REGROUP_IDENTITY;
    /* config.max_query_rows (AUTO): where every request has at most PW_PLAN_SHORT_REQUEST_ROWS
     * rows, the plan keeps identity order without asking the time guard (pageweaver.h). Up to
     * the group size a call regroups with (2, 4 or 8) no grouping changes the work; from there
     * to 8 only the split of <= 8 rows into Union4's two 4-query halves (or the stacked tile's
     * pairs) can, which measured less than the regroup costs (H100: 512 requests of 8 rows,
     * regrouped +4.3 us of 409 us; of 5 rows, -1.3 us of 260; bench/NOTES.md, forty-seventh
     * session). */
    const int short_requests = config->regroup == PW_REGROUP_AUTO && config->max_query_rows > 0 &&
                               config->max_query_rows <= PW_PLAN_SHORT_REQUEST_ROWS;
    for (int prec = 0; prec < 2; prec++) {
        const pw_time_guard_inputs_t in = {problem->num_tokens, problem->num_requests,
                                           problem->num_kv_heads, problem->max_pages_per_request,
                                           config->kernel, (pw_precision_t)prec, config->window};
        const pw_time_guard_wide_inputs_t wide = {in, problem->topk};
        const int pays =
            can_regroup &&
            (problem->topk <= 16
                 ? pw_time_guard(&in, pw_time_guard_model(), &plan->saving_us[prec], &plan->cost_us[prec])
                 : pw_time_guard_wide(&wide, pw_time_guard_model(), pw_time_guard_wide_model(),
                                      &plan->saving_us[prec], &plan->cost_us[prec]));
        if (short_requests && can_regroup) plan->saving_us[prec] = 0.0; /* (nothing to save: see above) */
        plan->regroup_pays[prec] = config->regroup == PW_REGROUP_AUTO ? pays && !short_requests : can_regroup;
    }
    /* Identity order: runs of 8 inside each request (window 0). A caller's permutation is
     * grouped in the caller's windows. Either way the groups are runs of 8 slots from the
     * request start whenever W is a multiple of 8. An AUTO plan with a regroup window (64 /
     * 128) whose time guard keeps identity order in both precisions is the identity plan
     * (window 0: the same group slots, grids and launches), so that its calls are the
     * identity plan's calls (a K > 16 plan's other window keeps cutting its groups). */
    if (caller_perm) plan->grouping.window = config->window;
    else if ((config->regroup == PW_REGROUP_AUTO && (config->window == 64 || config->window == 128) &&
              !plan->regroup_pays[0] && !plan->regroup_pays[1]) ||
             config->kernel == PW_KERNEL_PER_QUERY) {
        /* (per-query: no regroup, no groups; pw_plan_info's window 0 in every mode, as AUTO's
         * already was: a review, 2026-12-05, found GREEDY / GUARDED reporting 128) */
        plan->grouping.window = 0;
        plan->grouping.mode = PW_REGROUP_IDENTITY; /* pw_plan_workspace_views: what ran */
    }
    plan->max_groups = pw_max_groups(problem, &plan->grouping);
    plan->union_capacity = PW_PLAN_GROUP_SIZE * problem->topk;
    /* The attention kernels' 1-D grids (attention.cu), checked here for the same reason. */
    const int64_t ctas = config->kernel == PW_KERNEL_PER_QUERY
                             ? (int64_t)problem->num_tokens * problem->num_kv_heads
                             : 2 * plan->max_groups * (int64_t)problem->num_kv_heads;
    if (ctas > 0x7fffffff) {
        free(plan);
        return pw_fail(PW_ERROR_UNSUPPORTED, "the attention kernel would need %lld CTAs (> 2^31 - 1)",
                       (long long)ctas);
    }
    /* Union4: the V^T pre-pass pays when there are enough queries and each page is shared by
     * many (H200, bench/NOTES.md v8: 3-20% faster at 4,096+ queries with >= 128 selections per
     * page slot; 10-16% slower at 1,024 queries and at 8 selections per page slot). All the
     * measured points have one KV head, so the rule counts queries, not rows. */
    if (config->kernel == PW_KERNEL_UNION4 && problem->num_tokens > 0) {
        const int64_t entries = (int64_t)problem->num_requests * problem->max_pages_per_request;
        const int64_t selections = (int64_t)problem->num_tokens * plan->given_topk; /* the caller's ids */
        /* Default: 2048 tiles per KV head, and 1 GiB of tiles in all for many KV heads. */
        int64_t max_tiles = PW_PLAN_VT_DEFAULT_PAGES;
        if (max_tiles > PW_PLAN_VT_DEFAULT_TOTAL / problem->num_kv_heads)
            max_tiles = PW_PLAN_VT_DEFAULT_TOTAL / problem->num_kv_heads > 0
                            ? PW_PLAN_VT_DEFAULT_TOTAL / problem->num_kv_heads
                            : 1;
        if (config->vt_max_pages > 0) max_tiles = config->vt_max_pages;
        int64_t cap = entries < max_tiles ? entries : max_tiles;
        if (config->flags & PW_PLAN_VT_PREPASS) {
            plan->vt_prepass = 1;
        } else if (!(config->flags & PW_PLAN_NO_VT_PREPASS) && (problem->num_tokens >= PW_PLAN_VT_MIN_QUERIES ||
                    (problem->num_tokens >= PW_PLAN_VT_MIN_QUERIES_WIDE_TOPK &&
                     plan->given_topk >= PW_PLAN_VT_MIN_TOPK_WIDE)) &&
                   entries <= PW_PLAN_VT_MAX_ENTRIES_PER_SELECTION * selections && vt_scan_fits(problem)) {
            /* Host half: enough queries (4,096, or 2,048 with K >= 32; the measurements:
             * pageweaver.h, PW_PLAN_VT_PREPASS), and a table whose per-call memset and scan (one
             * byte and one thread per entry) stay small against the call (at most 4 entries
             * per selection: an engine's 8,192-column table for 4,096 queries of one
             * request, 32 requests at 16,384 queries). Device half: a KV head runs on the
             * tiles only when its unions touch at most N x K / 64 pages (each page selected
             * 64 times on average), so C never exceeds that. */
            const int64_t pays = selections / PW_PLAN_VT_MIN_PER_PAGE;
            if (cap > pays) cap = pays;
            /* A table with more entries than tiles (a KV head may fall back) takes the
             * pre-pass too at the default tile limit (measured there, one KV head:
             * pageweaver.h); with fewer tiles per KV head (more than 16 KV heads, a smaller
             * vt_max_pages), unmeasured, 8,192+ queries as before 2026-12-05. */
            plan->vt_prepass = entries <= cap || max_tiles >= PW_PLAN_VT_DEFAULT_PAGES ||
                               problem->num_tokens >= PW_PLAN_VT_MIN_QUERIES_LIMITED;
        }
        /* No tile to hand out (a table of no pages: only with N = 0, which enqueues
         * nothing): no pre-pass, whatever the flags. */
        if (cap < 1) plan->vt_prepass = 0;
        plan->vt_capacity = cap;
    }
    /* Calls on the tiles at G = 16, 8 or 4, K <= 16, P = 128 run the lean kernel (G = 16)
     * or the dense G = 8 / 4 tile (FP8X2 with per-token scales: the padded tile), or the
     * stacked tile (stack_mode: FP8X2 per call, or always with per-token scales; FP8 with
     * per-token scales at G = 8 / 4; the flags). */
    plan->stack_eligible = plan->vt_prepass &&
                           (problem->q_heads_per_kv == 16 || problem->q_heads_per_kv == 8 ||
                            problem->q_heads_per_kv == 4) &&
                           problem->topk == 16 && problem->page_size == 128;
    /* The regroup objective follows the FP8X2 tile (unless PW_PLAN_NO_REGROUP_BY_TILE) where
     * an FP8X2 call may run the stacked tile and the plan regroups (a plan whose time guard
     * keeps identity order in FP8X2 never uses it). */
    plan->by_tile = !(config->flags & PW_PLAN_NO_REGROUP_BY_TILE) && plan->stack_eligible &&
                    problem->q_heads_per_kv != 4 && can_regroup &&
                    plan->regroup_pays[PW_PRECISION_FP8X2] && !(config->flags & PW_PLAN_NO_FP8X2_STACKED);
    const pw_status_t st = layout(plan);
    if (st != PW_SUCCESS) {
        free(plan);
        return st;
    }
    *out = plan;
    return PW_SUCCESS;
}

pw_status_t pw_plan_workspace_size(const pw_plan_t *plan, size_t *bytes)
{
    if (!plan || !bytes) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "plan and bytes must not be NULL");
    *bytes = plan->workspace_bytes;
    return PW_SUCCESS;
}

/* Device pointers of the parts inside a workspace (checked for size). */
static pw_status_t carve(const pw_plan_t *plan, void *workspace, size_t workspace_bytes,
                         unsigned char *parts[NUM_PARTS])
{
    for (int i = 0; i < NUM_PARTS; i++) parts[i] = NULL;
    if (plan->workspace_bytes == 0) return PW_SUCCESS;
    if (!workspace)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "workspace is NULL (the plan needs %zu bytes)",
                       plan->workspace_bytes);
    if (workspace_bytes < plan->workspace_bytes)
        return pw_fail(PW_ERROR_INSUFFICIENT_WORKSPACE,
                       "workspace_bytes is %zu, the plan needs %zu (pw_plan_workspace_size)",
                       workspace_bytes, plan->workspace_bytes);
    const uintptr_t base = ((uintptr_t)workspace + PW_PLAN_ALIGN - 1) & ~(uintptr_t)(PW_PLAN_ALIGN - 1);
    for (int i = 0; i < NUM_PARTS; i++)
        if (plan->part_bytes[i]) parts[i] = (unsigned char *)base + plan->part_offset[i];
    return PW_SUCCESS;
}

static pw_union_meta_t meta_view(const pw_plan_t *plan, unsigned char *parts[NUM_PARTS])
{
    pw_union_meta_t m;
    m.max_groups = plan->max_groups;
    m.union_capacity = plan->union_capacity;
    m.num_groups = (int32_t *)(void *)parts[PART_NUM_GROUPS];
    m.groups = (pw_group_desc_t *)(void *)parts[PART_GROUPS];
    m.union_pages = (int32_t *)(void *)parts[PART_UNION_PAGES];
    m.member_masks = parts[PART_MASKS];
    return m;
}

pw_status_t pw_plan_workspace_views(const pw_plan_t *plan, void *workspace,
                                    size_t workspace_bytes, int32_t **perm,
                                    pw_union_meta_t *meta, pw_grouping_t *grouping)
{
    if (!plan) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "plan is NULL");
    unsigned char *parts[NUM_PARTS];
    PW_TRY(carve(plan, workspace, workspace_bytes, parts));
    if (perm) *perm = (int32_t *)(void *)parts[PART_PERM];
    if (meta) *meta = meta_view(plan, parts);
    if (grouping) *grouping = plan->grouping;
    return PW_SUCCESS;
}

#ifdef PW_HAVE_CUDA
/* The call's permutation into own_perm: the regroup, or, where the time guard says it does
 * not pay, the identity permutation (both pw_regroup). The fused regroup + union
 * preparation kernel (pw_regroup_union_prepare_dev_variant 0; sanitizer-clean on the H200
 * since 2026-12-01) is not used: it takes one group size for the greedy pass and the
 * emitted groups, while Union4 regroups with g = 4 and prepares 8-slot groups, and it
 * measured no faster at one KV head (bench/NOTES.md, regroup v3.2). */
static pw_status_t regroup_step(const pw_plan_t *plan, const pw_attention_args_t *args, int dense_g, int stack,
                                int32_t *own_perm, unsigned char *const *parts, pw_stream_t stream)
{
    pw_grouping_t g = plan->regroup;
    if (!plan->regroup_pays[pw_args_precision(args) == PW_PRECISION_FP8X2]) g.mode = PW_REGROUP_IDENTITY;
    g.group_size = regroup_size(plan, dense_g, stack);
    return pw_regroup(&plan->problem, args->topk_ids, &args->requests, &g, own_perm, parts[PART_REGROUP],
                      plan->part_bytes[PART_REGROUP], stream);
}

/* The captured stream's dependency set after a step of a captured call (active: the call
 * began with a set that fit, and one step adds one node). */
static pw_status_t save_step(pw_stream_t stream, pw_capture_deps_t *saved)
{
    PW_TRY(pw_capture_deps_get(stream, saved));
    if (!saved->active)
        return pw_fail(PW_ERROR_CUDA, "pw_sparse_prefill: the stream's capture ended or grew during the call");
    return PW_SUCCESS;
}

/* Adds a saved dependency set to the stream's (a failed step of a captured call: the
 * caller's capture keeps every node enqueued so far), and returns st. */
static pw_status_t keep_nodes(pw_stream_t stream, pw_status_t st, const pw_capture_deps_t *saved)
{
    if (saved->active) (void)pw_capture_deps_set(stream, saved, 1);
    return st;
}

/* A call of a by_tile plan (the regroup objective follows the tile) whose FP8X2 tile the
 * device chooses (stack_mode PER_CALL): one regroup launch writes both permutations (the
 * other tile's g into perm, the stacked tile's (2 at G = 16, 4 at G = 8) into perm_alt),
 * the pre-pass's mark launch makes the choice (stack_stat), union preparation reads it and prepares the matching permutation's groups (copying perm_alt into perm when
 * the stacked tile runs), then the scan and transpose, then attention. Eager: that stream
 * order (the schedule counts' memset first). Captured: (schedule memset -> regroup) ||
 * (memset -> mark); union preparation after both, as a programmatic dependent of both
 * kernels (PDL: it scans its requests while the regroup's greedy loop runs, and waits
 * with griddepcontrol.wait before it reads their outputs; eager, its predecessor is the
 * mark, which does not signal early: no overlap there); scan -> transpose after the mark;
 * attention after union preparation and the transpose. */
static pw_status_t by_tile_call(const pw_plan_t *plan, const pw_attention_args_t *args, int dense_g, int32_t *own_perm,
                                const pw_union_meta_t *meta, pw_vt_buffers_t *vt, unsigned char *const *parts,
                                pw_stream_t stream)
{
    const pw_problem_t *p = &plan->problem;
    int32_t *perm_alt = (int32_t *)(void *)parts[PART_PERM_ALT];
    vt->perm_alt = perm_alt;
    /* GREEDY or GUARDED (by_tile: the plan regroups in FP8X2), the other tile's g: 4 for the
     * lean kernel (G = 16), 8 for the dense G = 8 tile */
    pw_grouping_t g = plan->regroup;
    g.group_size = regroup_size(plan, dense_g, PW_STACK_PER_CALL);
    pw_capture_deps_t fork, regrouped, marked, prepared;
    PW_TRY(pw_capture_deps_get(stream, &fork));
    /* Union preparation runs as a programmatic dependent of the regroup (and the mark): its
     * schedule counts are cleared first, so that no memset node lies between them. */
    PW_TRY(pw_union_prepare_clear_schedule(p, meta, vt, stream));
    vt->pdl = 1;
    PW_TRY(pw_regroup_dual(p, args->topk_ids, &args->requests, &g, stacked_regroup_size(plan), own_perm, perm_alt,
                           stream));
    if (!fork.active) { /* not captured (or a dependency set too large to save): stream order */
        PW_TRY(pw_vt_prepare_parts(p, args, vt, PW_VT_MARKS, stream));
        PW_TRY(pw_union_prepare_scheduled(p, args->topk_ids, &args->requests, &plan->grouping, own_perm, meta, vt,
                                          stream));
        PW_TRY(pw_vt_prepare_parts(p, args, vt, PW_VT_TILES, stream));
        return pw_union_attention_vt(p, args, &plan->grouping, own_perm, meta, vt, stream);
    }
    PW_TRY(save_step(stream, &regrouped));
    /* the mark beside the regroup */
    pw_status_t st = pw_capture_deps_set(stream, &fork, 0);
    if (st == PW_SUCCESS) st = pw_vt_prepare_parts(p, args, vt, PW_VT_MARKS, stream);
    if (st == PW_SUCCESS) st = save_step(stream, &marked);
    if (st != PW_SUCCESS) return keep_nodes(stream, st, &regrouped);
    /* union preparation after both */
    st = pw_capture_deps_set(stream, &regrouped, 1);
    if (st == PW_SUCCESS)
        st = pw_union_prepare_scheduled(p, args->topk_ids, &args->requests, &plan->grouping, own_perm, meta, vt, stream);
    if (st == PW_SUCCESS) st = save_step(stream, &prepared);
    if (st != PW_SUCCESS) return keep_nodes(stream, st, &regrouped); /* with the mark, if the set failed */
    /* the scan and transpose after the mark, beside union preparation; attention after both */
    st = pw_capture_deps_set(stream, &marked, 0);
    if (st == PW_SUCCESS) st = pw_vt_prepare_parts(p, args, vt, PW_VT_TILES, stream);
    if (st == PW_SUCCESS) st = pw_capture_deps_set(stream, &prepared, 1);
    if (st != PW_SUCCESS) return keep_nodes(stream, st, &prepared);
    return pw_union_attention_vt(p, args, &plan->grouping, own_perm, meta, vt, stream);
}
#endif

pw_status_t pw_sparse_prefill(const pw_plan_t *plan, const pw_attention_args_t *args,
                              const int32_t *perm, void *workspace, size_t workspace_bytes,
                              pw_stream_t stream)
{
    if (!plan) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "plan is NULL");
    PW_TRY(pw_check_args_struct(args));
    const pw_problem_t *p = &plan->problem;
    const int caller_perm = (plan->config.flags & PW_PLAN_CALLER_PERM) != 0;
    if (caller_perm && !perm && p->num_tokens > 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "perm is NULL but the plan has PW_PLAN_CALLER_PERM");
    if (!caller_perm && perm)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "perm is given but the plan computes its own (create it with PW_PLAN_CALLER_PERM)");
    unsigned char *parts[NUM_PARTS];
    PW_TRY(carve(plan, workspace, workspace_bytes, parts));
    if (!args->topk_ids && p->num_tokens > 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.topk_ids is NULL");
    /* Every check pw_union_attention makes on the call's arguments, made first, so that a
     * bad argument is reported before the regroup and union steps are enqueued (or
     * captured into a graph). */
    PW_TRY(pw_check_gpu_attention_args_k(p, args, plan->config.kernel, plan->given_topk));
#ifndef PW_HAVE_CUDA
    /* Without CUDA, this comes before any check that speaks of the GPU (host argument
     * errors above are still reported as such). */
    (void)stream;
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_sparse_prefill: built without CUDA");
#else
    if (p->num_tokens == 0) return PW_SUCCESS; /* nothing to compute, nothing enqueued */
    PW_TRY(pw_check_attention_device()); /* before the first enqueue: NO_DEVICE, not a launch error */
    pw_attention_args_t padded = PW_ATTENTION_ARGS_INIT;
    if (plan->given_topk != p->topk) {
        /* K not 16, 32 or 64: the rows padded to Kd ids with -1 (ignored ids) in the
         * workspace; every step below reads those. A copy of the caller's struct, its
         * struct_size kept. */
        int32_t *topk_padded = (int32_t *)(void *)parts[PART_TOPK_PADDED];
        PW_TRY(pw_pad_topk(args->topk_ids, plan->given_topk, p->topk, topk_padded,
                           (int64_t)p->num_kv_heads * p->num_tokens, stream));
        memcpy(&padded, args, args->struct_size < sizeof padded ? args->struct_size : sizeof padded);
        padded.topk_ids = topk_padded;
        args = &padded;
    }
    if (plan->config.kernel == PW_KERNEL_PER_QUERY)
        return pw_union_attention(p, args, NULL, NULL, NULL, PW_KERNEL_PER_QUERY, stream);
    const int stack = stack_mode(plan, args); /* the call's FP8X2 tile (PW_STACK_NEVER without the pre-pass) */
    const int dense_g = call_dense_g(plan, args, stack); /* the tile whose items this call runs */
    const pw_union_meta_t meta = meta_view(plan, parts);
    int32_t *own_perm = (int32_t *)(void *)parts[PART_PERM];
    if (!caller_perm) perm = own_perm;
    if (!plan->vt_prepass) {
        if (!caller_perm) PW_TRY(regroup_step(plan, args, dense_g, PW_STACK_NEVER, own_perm, parts, stream));
        /* Union preparation as the regroup's programmatic dependent where it computes its
         * own permutation at K <= 16: no pre-pass hides the regroup here (4,096 queries at
         * a 1M-token context before 2026-12-05, when the rule left it off: C_online ~15.7
         * us, the regroup's ~14 us on the serial path),
         * so its request scan runs beside the regroup's greedy loop, and it waits
         * (griddepcontrol.wait) before reading the permutation. It relies on regroup_step
         * enqueuing exactly one kernel right before it (pw_regroup at K <= 16 and N > 0:
         * the identity, direct, long or hash-fallback kernel), so that its predecessor is
         * never a caller's kernel (caller_perm: an ordinary launch) nor a memset. H200
         * (37th session, Union4's default call): C_online -1.6..-2.7 us per round at
         * 1,024 / 4,096 queries, T_default unchanged within noise. */
        pw_vt_buffers_t pdl_only;
        memset(&pdl_only, 0, sizeof pdl_only);
        pdl_only.pdl = 1;
        const pw_vt_buffers_t *vt_pdl = !caller_perm && p->topk <= 16 ? &pdl_only : NULL; /* NULL: pw_union_prepare */
        PW_TRY(pw_union_prepare_scheduled(p, args->topk_ids, &args->requests, &plan->grouping, perm, &meta, vt_pdl,
                                          stream));
        return pw_union_attention(p, args, &plan->grouping, perm, &meta, plan->config.kernel, stream);
    }
    /* Union4 on the pre-pass: the pre-pass marks the union pages from the Top-K ids, gives
     * them tiles and writes their V^T; the lean kernel reads them (bench/NOTES.md v8, v8.1).
     * It needs neither the permutation nor the union metadata, so under stream capture the
     * regroup and union preparation become a branch of the graph beside it, and attention
     * waits for both (bench/NOTES.md, "the pre-pass beside the regroup"). */
    pw_vt_buffers_t vt;
    memset(&vt, 0, sizeof vt);
    vt.touched = parts[PART_VT_TOUCHED];
    vt.slots = (int32_t *)(void *)parts[PART_VT_SLOTS];
    vt.list = (int64_t *)(void *)parts[PART_VT_LIST];
    vt.count = (uint32_t *)(void *)parts[PART_VT_COUNT];
    vt.tiles = parts[PART_VT_TILES];
    vt.capacity = plan->vt_capacity;
    vt.f16_tiles = pw_args_f16_vt(args);
    vt.stack_mode = stack;
    /* The per-token scale arrays behind each E4M3 tile only where the stacked tile, their
     * one reader, may run (the pre-pass writes them only for a call that has them): not
     * with PW_PLAN_NO_FP8X2_STACKED or on a plan that is not stack_eligible. */
    vt.ts_tiles = vt.stack_mode != PW_STACK_NEVER;
    vt.stack_stat = vt.stack_mode != PW_STACK_NEVER
                        ? (unsigned long long *)(void *)(vt.touched +
                                                         PW_STACK_STAT_OFFSET((int64_t)p->num_kv_heads * p->num_requests *
                                                                              p->max_pages_per_request))
                        : NULL;
    /* Longest-first CTA order: union preparation lists the work items of the kernel
     * pw_union_attention_vt will run (lean: halves; dense G = 8 tile: groups; dense G = 4
     * tile: pairs of groups, whose sizes it adds up in a scratch of `rows` words right
     * after the counts, so that one memset clears both; then lists of `rows` entries). */
    const int64_t rows = plan->max_groups * (int64_t)p->num_kv_heads;
    const size_t pairs_bytes = dense_g == 4 ? 4 * (size_t)rows : 0;
    vt.sched_count = (uint32_t *)(void *)parts[PART_SCHED];
    vt.sched_list = (int32_t *)(void *)(parts[PART_SCHED] + PW_SCHED_COUNTS_BYTES + pairs_bytes);
    vt.sched_stride = dense_g == 4 ? rows : 2 * rows;
    vt.sched_dense = dense_g == 8 ? 1 : dense_g == 4 ? 2 : 0;
    /* caller_perm: no by_tile; a call whose precision keeps identity order (AUTO's time
     * guard; by_tile is FP8X2's) regroups for neither tile */
    if (plan->by_tile && vt.stack_mode == PW_STACK_PER_CALL &&
        plan->regroup_pays[pw_args_precision(args) == PW_PRECISION_FP8X2])
        return by_tile_call(plan, args, dense_g, own_perm, &meta, &vt, parts, stream);
    pw_capture_branch_t branch;
    PW_TRY(pw_capture_branch_open(stream, &branch));
    /* (On this path, the pre-pass without by_tile, union preparation is an ordinary launch:
     * the pre-pass branch hides the regroup's, and in the twentieth session PDL measured no
     * gain here. It is the regroup's programmatic dependent in by_tile_call (-2.3..-2.9 us
     * of C_online on A-hot) and on the path without the pre-pass above.) */
    if (!caller_perm) PW_TRY(regroup_step(plan, args, dense_g, vt.stack_mode, own_perm, parts, stream));
    PW_TRY(pw_union_prepare_scheduled(p, args->topk_ids, &args->requests, &plan->grouping, perm, &meta, &vt, stream));
    PW_TRY(pw_capture_branch_next(stream, &branch));
    /* Joined also when the pre-pass fails, so that a capture the caller continues still
     * holds the first branch before whatever it enqueues next. */
    const pw_status_t prepass = pw_vt_prepare(p, args, &vt, stream);
    const pw_status_t joined = pw_capture_branch_join(stream, &branch);
    PW_TRY(prepass);
    PW_TRY(joined);
    return pw_union_attention_vt(p, args, &plan->grouping, perm, &meta, &vt, stream);
#endif
}

pw_status_t pw_plan_info(const pw_plan_t *plan, pw_precision_t precision, pw_plan_info_t *info)
{
    if (!plan || !info) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "plan and info must not be NULL");
    /* The struct before regroup_group_size (a caller built against the earlier header)
     * gets every field it has. */
    const size_t v1_size = offsetof(pw_plan_info_t, regroup_group_size);
    if (info->struct_size < v1_size)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "info.struct_size is %u, expected %zu (at least %zu, an older header's; "
                       "initialise with PW_PLAN_INFO_INIT)",
                       info->struct_size, sizeof(pw_plan_info_t), (size_t)v1_size);
    /* The struct before vt_prepass (2026-12-01 headers): regroup_group_size, not the rest. */
    const size_t v2_size = offsetof(pw_plan_info_t, vt_prepass);
    const int has_v2 = info->struct_size >= v2_size;
    /* The struct before fp8x2_stacked (2026-12-02 headers): everything up to vt_capacity. */
    const size_t v3_size = offsetof(pw_plan_info_t, fp8x2_stacked);
    const int has_v3 = info->struct_size >= v3_size;
    /* ... and with it (its end, not sizeof, which counts the struct's tail padding). */
    const size_t v4_size = offsetof(pw_plan_info_t, fp8x2_stacked) + sizeof info->fp8x2_stacked;
    const int has_v4 = info->struct_size >= v4_size;
    /* ... and with token_scales_stacked (34th session). */
    const size_t v5_size = offsetof(pw_plan_info_t, token_scales_stacked) + sizeof info->token_scales_stacked;
    const int full = info->struct_size >= v5_size;
    if (precision != PW_PRECISION_FP8 && precision != PW_PRECISION_FP8X2)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "precision is %d (not a pw_precision_t)", (int)precision);
    const int x2 = precision == PW_PRECISION_FP8X2;
    info->struct_size = full     ? (uint32_t)(info->struct_size < sizeof(pw_plan_info_t) ? v5_size : sizeof(pw_plan_info_t))
                        : has_v4 ? (uint32_t)v4_size
                        : has_v3 ? (uint32_t)v3_size
                        : has_v2 ? (uint32_t)v2_size
                                 : (uint32_t)v1_size;
    info->configured = plan->config.regroup;
    info->regroup = plan->regroup_pays[x2] ? plan->regroup.mode : PW_REGROUP_IDENTITY;
    pw_attention_args_t probe = PW_ATTENTION_ARGS_INIT; /* a call in `precision` without per-token scales */
    probe.precision = precision;
    if (has_v2)
        info->regroup_group_size =
            info->regroup == PW_REGROUP_IDENTITY ? 0 : regroup_size(plan, plan_runs_dense(plan), stack_mode(plan, &probe));
    if (has_v3) {
        info->vt_prepass = plan->vt_prepass;
        info->dense_tile = plan_runs_dense(plan) != 0;
        info->vt_capacity = plan->vt_prepass ? plan->vt_capacity : 0;
    }
    if (has_v4) info->fp8x2_stacked = stack_mode(plan, &probe); /* PW_STACK_NEVER / PER_CALL / ALWAYS = 0 / 1 / 2 */
    if (full) {
        /* the same call with per-token scales (stack_mode reads only whether they are given) */
        static const float one = 1.0f;
        pw_attention_args_t scaled = probe;
        scaled.token_scales.k = &one;
        info->token_scales_stacked = stack_mode(plan, &scaled); /* NEVER / PER_CALL / ALWAYS = 0 / 1 / 2 */
    }
    info->window = plan->grouping.window;
    info->kernel = plan->config.kernel;
    info->saving_us = plan->saving_us[x2];
    info->cost_us = plan->cost_us[x2];
    info->margin_us = pw_time_guard_model()->margin_us;
    return PW_SUCCESS;
}

void pw_plan_destroy(pw_plan_t *plan)
{
    free(plan);
}
