/* pageweaver bench: the paper's measurements (docs/semantics.md §5) on capture files.
 *
 * Per capture (Q/K/V generated with the documented generator when the file has none):
 *  - CPU, always: permutations from the reference (identity, guarded and greedy W64/W128,
 *    greedy W512/W2048, random within requests), their union visits / C_4 / rho_Q, and a
 *    reference check on a slice of rows (FP64 exact vs the FP8-emulating reference of each
 *    precision, and vs the GPU outputs of both precisions when there is a GPU);
 *  - GPU (tools/cli/bench_gpu.c): full calls T0, T_fixed, T_online (W64/W128, guarded and
 *    greedy), Union4, per-query, offline groupings, the physically reordered variant, and
 *    T_online W128 / Union4 W128 with PW_PRECISION_FP8X2, each timed by CUDA-graph
 *    replay; floors from the L2 bandwidth and the FP8 GEMM rate measured in the same run.
 * Tables on stdout, one progress line per arm on stderr, every figure in --json FILE.
 * Without a GPU (or a CUDA build) it says so and does the CPU part. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, dup, fdopen */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../src/pw_internal.h" /* PW_STACK_RATIO_MILLI: the FP8X2 tile rule's thresholds */
#include "bench.h"
#include "cli.h"

#define PAGE_BYTES (2.0 * 128 * 128)            /* K + V of one page, one KV head (FP8) */
#define STEP_FLOP (64.0 * 128 * 128 * 4)          /* one CTA-page step: 64 rows, QK + PV */
#define PAPER_T0_OVER_ONLINE (1.36633 / 1.30792)  /* docs/semantics.md §5 */
#define PAPER_NATIVE_OVER_UNION8 2.662
#define PAPER_UNION4_OVER_UNION8 1.075
#define MAX_FILES 64

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: pageweaver bench [options] CAPTURE...\n"
            "\n"
            "The measurements of docs/semantics.md section 5 on capture files (docs/capture-format.md).\n"
            "CPU (always): union visits, C_4 and rho_Q of identity order, guarded/greedy\n"
            "regroup at W64/W128, greedy W512/W2048 and a random order (reference regroup);\n"
            "a reference check on a slice of rows (FP64 exact vs the FP8-emulating reference,\n"
            "for PW_PRECISION_FP8 and PW_PRECISION_FP8X2).\n"
            "GPU (an sm_90 device): full-call times T0 (identity Union8), T_fixed (caller's\n"
            "precomputed guarded W128 permutation), T_online (in-call regroup, W64/W128,\n"
            "guarded and greedy), S_exec = T0 - T_fixed, C_online = T_online - T_fixed,\n"
            "S_net = T0 - T_online; Union4 and per-query full calls; offline groupings\n"
            "(execution only: identity, random, greedy W512, W2048); Q and Top-K physically\n"
            "moved into W128 order with the output moved back; T_online W128 (Union8) and\n"
            "Union4 W128 again with PW_PRECISION_FP8X2 (two-term FP8 Q and P); each arm's\n"
            "floor max(L2->SM bytes / L2 bandwidth, executed FLOP / dense FP8 GEMM rate),\n"
            "both rates measured in the same run.\n"
            "The default kernel (Union4): identity order (T_identity), the caller's guarded W128\n"
            "permutation (T_fixed), in-call guarded W128 (T_online) and the default plan\n"
            "(PW_PLAN_CONFIG_INIT: regroup when the time guard says it pays, T_default) are\n"
            "timed by interleaved replays (one replay of each in turn); printed: T_identity /\n"
            "T_default, S_exec, C_online, each arm's p90 - median spread, the plan's choice and\n"
            "the time guard's predicted saving and cost.\n"
            "\n"
            "Timing: each arm's call is captured in a CUDA graph per input copy; warm-up\n"
            "replays, then timed replays back to back with CUDA events around each one,\n"
            "rotating the copies of Q, Top-K and O; median, min and p90 are reported.\n"
            "\n"
            "options:\n"
            "  --json FILE       write every figure as JSON (opened before the work; '-' = stdout,\n"
            "                    the text report then goes to stderr; a .safetensors name is refused)\n"
            "  --replays N       timed replays per arm (default 100; the protocol wants >= 50)\n"
            "  --warmup N        warm-up replays per arm (default 10)\n"
            "  --copies N        input copies rotated by the replays, 1..8 (default 3)\n"
            "  --check-rows N    rows of the reference check (default 256; 0 = none)\n"
            "  --seed N          random order and check rows (default 1)\n"
            "  --interleaved-replays N  replays per arm of the interleaved default-kernel\n"
            "                    arms (default 200)\n"
            "  --table-pages N   widen every page table to at least N columns, padded with page\n"
            "                    0 (an engine's table sized for its longest context; the padding\n"
            "                    is never visible), before anything runs; a wider table is kept\n"
            "  --vt-prepass M    auto (default: the plan's rule), on or off: the V^T pre-pass of\n"
            "                    every Union4 arm (PW_PLAN_VT_PREPASS / PW_PLAN_NO_VT_PREPASS)\n"
            "  --fp8x2-tile T    auto (default: the device decides per call), stacked or lean: the\n"
            "                    FP8X2 tile of the Union4 arms on the pre-pass (PW_PLAN_FP8X2_STACKED /\n"
            "                    PW_PLAN_NO_FP8X2_STACKED)\n"
            "  --union4-window W 64 or 128: the regroup window of every Union4 arm, the\n"
            "                    default plan's included, and of their caller permutations\n"
            "                    (default: the default plan picks its window, PW_WINDOW_AUTO;\n"
            "                    the other Union4 arms and the permutations use 128)\n"
            "  --max-query-rows N pw_plan_config_t.max_query_rows of every plan (read by the\n"
            "                    default plan, AUTO): 0 (default: not known), N, or -1 for each\n"
            "                    capture's own most query rows of a request (as an engine that\n"
            "                    passes its max_seqlen_q)\n"
            "  --cpu-only        skip the GPU part even when a GPU is present\n"
            "  --no-rates        do not measure L2 bandwidth / FP8 GEMM rate (no floors)\n"
            "  -q, --quiet       no progress lines on stderr\n"
            "  -h, --help        this help\n"
            "  --                every later argument is a capture, also one that starts with '-'\n"
            "\n"
            "Exit status: 0 success, 1 a capture could not be read or a GPU step failed,\n"
            "2 usage error.\n");
}

const char *bench_arm_name(int arm)
{
    static const char *names[NUM_ARMS] = {
        "T0 identity (union8)",
        "T_fixed caller perm W128 (union8)",
        "T_online guarded W64 (union8)",
        "T_online guarded W128 (union8)",
        "T_online greedy W64 (union8)",
        "T_online greedy W128 (union8)",
        "union4 guarded W128",
        "per-query",
        "offline identity (exec only)",
        "offline random (exec only)",
        "offline greedy W512 (exec only)",
        "offline greedy W2048 (exec only)",
        "reordered Q/Top-K W128 + moves",
        "reordered Q/Top-K W128, call only",
        "T_online guarded W128 (union8 FP8X2)",
        "union4 guarded W128 (FP8X2)",
        "union4 identity (T_identity)",
        "union4 caller perm W128 (T_fixed)",
        "default plan (T_default)",
        "default plan, 8-query regroup objective",
        "default plan, objective not by tile",
        "default plan, timed alone",
    };
    return arm >= 0 && arm < NUM_ARMS ? names[arm] : "?";
}

const char *bench_arm_key(int arm)
{
    static const char *keys[NUM_ARMS] = {
        "t0", "t_fixed_w128", "t_online_w64", "t_online_w128", "t_online_greedy_w64", "t_online_greedy_w128",
        "union4_w128", "per_query", "fixed_identity", "fixed_random", "fixed_w512", "fixed_w2048",
        "reordered_w128", "reordered_w128_call_only", "union8_w128_fp8x2", "union4_w128_fp8x2",
        "union4_identity", "union4_fixed_w128", "default", "default_g8", "default_not_by_tile", "default_alone",
    };
    return arm >= 0 && arm < NUM_ARMS ? keys[arm] : "?";
}

const char *bench_perm_name(int perm)
{
    static const char *names[NUM_PERMS] = {"identity", "guarded W64", "guarded W128", "greedy W64",
                                           "greedy W128", "greedy W512", "greedy W2048", "random",
                                           "guarded W128 g4", "guarded W128 g2", "guarded W64 g4"};
    return perm >= 0 && perm < NUM_PERMS ? names[perm] : "?";
}

const char *bench_perm_key(int perm)
{
    static const char *keys[NUM_PERMS] = {"identity", "guarded_w64", "guarded_w128", "greedy_w64",
                                          "greedy_w128", "greedy_w512", "greedy_w2048", "random",
                                          "guarded_w128_g4", "guarded_w128_g2", "guarded_w64_g4"};
    return perm >= 0 && perm < NUM_PERMS ? keys[perm] : "?";
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* splitmix64: the random order and the check rows (seeded, reproducible). */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t below(uint64_t *state, int64_t n)
{
    return n <= 0 ? 0 : (int64_t)(next_u64(state) % (uint64_t)n);
}

/* ---------------------------------------------------------------------------------- */
/* CPU part                                                                           */
/* ---------------------------------------------------------------------------------- */

/* One walk over every row's set S_i (docs/semantics.md §1: distinct ids 0 <= p <= min(c, L-1) / P):
 *   *visible: sum over KV heads and rows of |A_i|, the useful (query, token) pairs;
 *   *bad:     (query, KV head, page) pairs of S_i whose physical page, page_table[r][p],
 *             is outside [0, num_cache_pages): the pairs pw_ref_attention counts in
 *             bad_page_count. A capture whose caches are shorter than its page table
 *             reaches gives wrong outputs without this warning. */
static void count_pairs(const pw_capture_t *c, double *visible, int64_t *bad)
{
    const pw_problem_t *p = &c->problem;
    const int32_t k = p->topk, ps = p->page_size, stride = p->max_pages_per_request;
    double total = 0;
    int64_t outside = 0;
    for (int32_t h = 0; h < p->num_kv_heads; h++)
        for (int32_t r = 0; r < p->num_requests; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = (int64_t)c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int64_t last_token = pos < c->kv_lens[r] - 1 ? pos : (int64_t)c->kv_lens[r] - 1;
                const int32_t *row = c->topk_ids + ((int64_t)h * p->num_tokens + i) * k;
                for (int32_t a = 0; a < k; a++) {
                    const int64_t id = row[a];
                    if (id < 0 || last_token < 0 || id > last_token / ps) continue;
                    int dup = 0;
                    for (int32_t b = 0; b < a && !dup; b++) dup = row[b] == row[a];
                    if (dup) continue;
                    const int64_t first = id * ps, end = first + ps - 1 < last_token ? first + ps - 1 : last_token;
                    total += (double)(end - first + 1);
                    const int64_t physical = c->page_table[(int64_t)r * stride + id];
                    if (physical < 0 || physical >= p->num_cache_pages) outside++;
                }
            }
    *visible = total;
    *bad = outside;
}

static void random_perm(const pw_capture_t *c, uint64_t seed, int32_t *perm)
{
    const pw_problem_t *p = &c->problem;
    uint64_t state = seed;
    for (int32_t h = 0; h < p->num_kv_heads; h++) {
        int32_t *row = perm + (int64_t)h * p->num_tokens;
        for (int32_t r = 0; r < p->num_requests; r++) {
            const int32_t b = c->cu_seqlens_q[r], e = c->cu_seqlens_q[r + 1];
            for (int32_t i = b; i < e; i++) row[i] = i;
            for (int32_t i = e - 1; i > b; i--) {
                const int32_t j = b + (int32_t)below(&state, i - b + 1);
                const int32_t t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
    }
}

/* Union statistics of a host permutation grouped in windows of `window`. */
static int perm_stats(const pw_capture_t *c, const int32_t *perm, int32_t window, pw_union_stats_t *out)
{
    const pw_problem_t *p = &c->problem;
    const pw_requests_t rq = pw_capture_requests(c);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.window = window;
    const int64_t hkv = p->num_kv_heads, mg = pw_max_groups(p, &g), cap = 8 * (int64_t)p->topk;
    pw_union_meta_t m = {mg, (int32_t)cap, malloc((size_t)hkv * 4), malloc((size_t)(hkv * mg) * sizeof(pw_group_desc_t)),
                         malloc((size_t)(hkv * mg * cap) * 4), malloc((size_t)(hkv * mg * cap))};
    int rc = 1;
    if (m.num_groups && m.groups && m.union_pages && m.member_masks &&
        pw_ref_union_prepare(p, c->topk_ids, &rq, &g, perm, &m) == PW_SUCCESS &&
        pw_union_stats(p, &m, out, NULL) == PW_SUCCESS)
        rc = 0;
    free(m.num_groups);
    free(m.groups);
    free(m.union_pages);
    free(m.member_masks);
    return rc;
}

/* Identity-order statistics of the rows moved into `perm` order (the reordered arms). */
static int reordered_stats(const pw_capture_t *c, const int32_t *perm, pw_union_stats_t *out)
{
    const pw_problem_t *p = &c->problem;
    const int64_t n = p->num_tokens, k = p->topk;
    int32_t *moved = malloc((size_t)(p->num_kv_heads * n * k) * 4);
    if (!moved) return 1;
    for (int64_t h = 0; h < p->num_kv_heads; h++)
        for (int64_t s = 0; s < n; s++)
            memcpy(moved + (h * n + s) * k, c->topk_ids + (h * n + perm[h * n + s]) * k, (size_t)k * 4);
    const pw_requests_t rq = pw_capture_requests(c);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_IDENTITY;
    g.window = 0;
    const int rc = pw_ref_grouping_stats(p, moved, &rq, &g, out, NULL) != PW_SUCCESS;
    free(moved);
    return rc;
}

/* Reference check buffers (kept until the GPU output can be compared). */
typedef struct check_state {
    uint8_t *rows;    /* [N]: 1 = checked */
    double *exact;    /* [N, Hq, D] */
    float *emulate;   /* [N, Hq, D], PW_PRECISION_FP8 */
    float *emulate_x2; /* [N, Hq, D], PW_PRECISION_FP8X2 */
} check_state_t;

static void check_free(check_state_t *cs)
{
    free(cs->rows);
    free(cs->exact);
    free(cs->emulate);
    free(cs->emulate_x2);
    memset(cs, 0, sizeof *cs);
}

static double nrms_rows(const pw_problem_t *p, const uint8_t *rows, const double *ref, const float *f32,
                        const pw_bf16_t *b16, int64_t *nan_count)
{
    const int64_t row_elems = (int64_t)p->num_kv_heads * p->q_heads_per_kv * p->head_dim;
    double num = 0, den = 0;
    int64_t nan = 0;
    for (int64_t i = 0; i < p->num_tokens; i++) {
        if (!rows[i]) continue;
        for (int64_t e = i * row_elems; e < (i + 1) * row_elems; e++) {
            const double v = f32 ? f32[e] : pw_bf16_to_float(b16[e]);
            if (isnan(v)) {
                nan++;
                continue;
            }
            num += (v - ref[e]) * (v - ref[e]);
            den += ref[e] * ref[e];
        }
    }
    if (nan_count) *nan_count = nan;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* FP64 exact and FP8-emulating references (both precisions) on a random slice of rows: the other rows'
 * Top-K rows are emptied in a copy, so the references only pay for the slice. */
static int reference_check(bench_capture_t *bc, const bench_options_t *o, check_state_t *cs)
{
    pw_capture_t *c = bc->capture;
    const pw_problem_t *p = &c->problem;
    const int64_t n = p->num_tokens, hkv = p->num_kv_heads, k = p->topk;
    const size_t elems = (size_t)n * hkv * p->q_heads_per_kv * p->head_dim;
    memset(cs, 0, sizeof *cs);
    if (o->check_rows <= 0 || n == 0 || !c->q || !c->k_cache) return 0;
    cs->rows = calloc((size_t)n, 1);
    cs->exact = malloc(elems * sizeof(double));
    cs->emulate = malloc(elems * sizeof(float));
    cs->emulate_x2 = malloc(elems * sizeof(float));
    int32_t *sliced = malloc((size_t)(hkv * n * k) * 4);
    if (!cs->rows || !cs->exact || !cs->emulate || !cs->emulate_x2 || !sliced) {
        free(sliced);
        check_free(cs);
        return 1;
    }
    uint64_t state = o->seed ^ 0xc4ec4ull;
    int64_t want = o->check_rows < n ? o->check_rows : n, got = 0;
    if (want == n) memset(cs->rows, 1, (size_t)n);
    while (got < want && want < n) {
        const int64_t i = below(&state, n);
        if (!cs->rows[i]) {
            cs->rows[i] = 1;
            got++;
        }
    }
    for (int64_t h = 0; h < hkv; h++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t a = 0; a < k; a++)
                sliced[(h * n + i) * k + a] = cs->rows[i] ? c->topk_ids[(h * n + i) * k + a] : -1;
    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.q = c->q;
    args.q_stride = hkv * p->q_heads_per_kv * p->head_dim;
    args.k_cache = c->k_cache;
    args.v_cache = c->v_cache;
    args.kv_stride = hkv * p->head_dim;
    args.k_scale = &c->k_scale;
    args.v_scale = &c->v_scale;
    args.topk_ids = sliced;
    args.requests = pw_capture_requests(c);
    args.o_stride = args.q_stride;
    args.o = cs->exact;
    args.o_dtype = PW_DTYPE_FLOAT64;
    int rc = pw_ref_attention(p, &args, PW_REF_EXACT) != PW_SUCCESS;
    args.o = cs->emulate;
    args.o_dtype = PW_DTYPE_FLOAT32;
    args.precision = PW_PRECISION_FP8; /* the fast mode's figure; FP8X2 (the default) next */
    if (!rc) rc = pw_ref_attention(p, &args, PW_REF_FP8_EMULATE) != PW_SUCCESS;
    args.o = cs->emulate_x2;
    args.precision = PW_PRECISION_FP8X2;
    /* The Union4 FP8X2 arms run on the V^T pre-pass where the plan's rule says so (the
     * default plan's info: same rule), whose FP8X2 takes P in f16 (semantics §4.5). */
    /* ... or, where the plan chooses the stacked 2-slot tile for this input, P as two E4M3
     * terms (pageweaver.h, PW_PLAN_FP8X2_STACKED). */
    bc->x2_stacked = 0;
    bc->stack_counts[0] = bc->stack_counts[1] = 0;
    if (bc->default_known && bc->default_info.fp8x2_stacked) {
        const pw_requests_t rq = pw_capture_requests(c);
        int stacked = 0;
        if (pw_fp8x2_stack_choice(p, c->topk_ids, &rq, bc->stack_counts, &stacked) != PW_SUCCESS) rc = 1;
        bc->x2_stacked = bc->default_info.fp8x2_stacked == 2 || stacked;
    }
    bc->x2_f16_p = bc->default_known && bc->default_info.vt_prepass && !bc->x2_stacked;
    if (!rc)
        rc = pw_ref_attention(p, &args, bc->x2_f16_p ? PW_REF_FP8_EMULATE_F16_P : PW_REF_FP8_EMULATE) != PW_SUCCESS;
    free(sliced);
    if (rc) {
        fprintf(stderr, "pageweaver bench: %s: reference check: %s\n", bc->path, pw_last_error());
        check_free(cs);
        return 1;
    }
    bc->check_rows = (int)want;
    if (want <= BENCH_MAX_LISTED_ROWS && (bc->check_row_ids = malloc((size_t)want * sizeof(int32_t))) != NULL)
        for (int64_t i = 0, w = 0; i < n; i++)
            if (cs->rows[i]) bc->check_row_ids[w++] = (int32_t)i;
    bc->nrms_emulate_vs_exact = nrms_rows(p, cs->rows, cs->exact, cs->emulate, NULL, NULL);
    bc->nrms_emulate_x2_vs_exact = nrms_rows(p, cs->rows, cs->exact, cs->emulate_x2, NULL, NULL);
    return 0;
}

static int cpu_part(bench_capture_t *bc, const bench_options_t *o)
{
    pw_capture_t *c = bc->capture;
    const pw_problem_t *p = &c->problem;
    const pw_requests_t rq = pw_capture_requests(c);
    const size_t perm_bytes = (size_t)p->num_kv_heads * (size_t)p->num_tokens * 4;
    static const int32_t windows[NUM_PERMS] = {0, 64, 128, 64, 128, 512, 2048, 0, 128, 128, 64};
    static const pw_regroup_mode_t modes[NUM_PERMS] = {
        PW_REGROUP_IDENTITY, PW_REGROUP_GUARDED, PW_REGROUP_GUARDED, PW_REGROUP_GREEDY,  PW_REGROUP_GREEDY,
        PW_REGROUP_GREEDY,   PW_REGROUP_GREEDY,  PW_REGROUP_IDENTITY, PW_REGROUP_GUARDED, PW_REGROUP_GUARDED,
        PW_REGROUP_GUARDED};
    count_pairs(c, &bc->visible_pairs, &bc->bad_pages);
    for (int i = 0; i < NUM_PERMS; i++) {
        bc->perms[i] = malloc(perm_bytes ? perm_bytes : 4);
        if (!bc->perms[i]) return 1;
        /* Union4's caller permutations follow --union4-window (their names say W128) */
        const int union4_perm = i == PERM_W128_GUARDED_G4 || i == PERM_W128_GUARDED_G2;
        bc->perm_window[i] = union4_perm && bc->union4_window ? bc->union4_window : windows[i];
        const double t = now_ms();
        if (i == PERM_RANDOM) {
            random_perm(c, o->seed, bc->perms[i]);
        } else {
            pw_grouping_t g = PW_GROUPING_INIT;
            g.mode = modes[i];
            g.window = bc->perm_window[i];
            if (i == PERM_W128_GUARDED_G4 || i == PERM_W64_GUARDED_G4) g.group_size = 4; /* Union4's objective */
            if (i == PERM_W128_GUARDED_G2) g.group_size = 2; /* the stacked tile's (PW_PLAN_NO_REGROUP_BY_TILE) */
            if (pw_ref_regroup(p, c->topk_ids, &rq, &g, bc->perms[i]) != PW_SUCCESS) {
                fprintf(stderr, "pageweaver bench: %s: regroup %s: %s\n", bc->path, bench_perm_name(i), pw_last_error());
                return 1;
            }
        }
        bc->perm_cpu_ms[i] = now_ms() - t;
        if (perm_stats(c, bc->perms[i], bc->perm_window[i], &bc->stats[i]) != 0) {
            fprintf(stderr, "pageweaver bench: %s: union statistics %s: %s\n", bc->path, bench_perm_name(i),
                    pw_last_error());
            return 1;
        }
    }
    if (reordered_stats(c, bc->perms[PERM_W128_GUARDED], &bc->reordered_stats) != 0) {
        fprintf(stderr, "pageweaver bench: %s: reordered statistics: %s\n", bc->path, pw_last_error());
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Figures                                                                            */
/* ---------------------------------------------------------------------------------- */

/* The grouping whose statistics describe an arm's attention kernel work. */
static const pw_union_stats_t *arm_stats(const bench_capture_t *bc, int arm)
{
    switch (arm) {
    case ARM_T0:
    case ARM_UNION4_IDENTITY:
    case ARM_FIXED_IDENTITY: return &bc->stats[PERM_IDENTITY];
    case ARM_DEFAULT:
    case ARM_DEFAULT_NOT_BY_TILE: /* the default's C_4 is g = 4's too (a call on the stacked tile runs g = 2's) */
    case ARM_DEFAULT_ALONE:
        if (bc->default_known && bc->default_info.regroup == PW_REGROUP_IDENTITY) return &bc->stats[PERM_IDENTITY];
        /* at the default plan's window (PW_WINDOW_AUTO may pick 64) */
        return bc->default_known && bc->default_info.window != bc->perm_window[PERM_W128_GUARDED_G4]
                   ? &bc->stats[PERM_W64_GUARDED_G4]
                   : &bc->stats[PERM_W128_GUARDED_G4];
    case ARM_DEFAULT_G8:
        if (bc->default_known && bc->default_info.regroup == PW_REGROUP_IDENTITY) return &bc->stats[PERM_IDENTITY];
        return bc->default_known && bc->default_info.window == 64 ? &bc->stats[PERM_W64_GUARDED]
                                                                  : &bc->stats[PERM_W128_GUARDED];
    case ARM_UNION4:
    case ARM_UNION4_X2:
    case ARM_UNION4_FIXED_W128: /* its permutation: the g = 2 one where the FP8X2 default runs the stacked tile */
        return bench_arm_is_x2(arm) && bc->x2_stacked ? &bc->stats[PERM_W128_GUARDED_G2] : &bc->stats[PERM_W128_GUARDED_G4];
    case ARM_ONLINE_W64: return &bc->stats[PERM_W64_GUARDED];
    case ARM_ONLINE_W64_GREEDY: return &bc->stats[PERM_W64_GREEDY];
    case ARM_ONLINE_W128_GREEDY: return &bc->stats[PERM_W128_GREEDY];
    case ARM_FIXED_RANDOM: return &bc->stats[PERM_RANDOM];
    case ARM_FIXED_W512: return &bc->stats[PERM_W512_GREEDY];
    case ARM_FIXED_W2048: return &bc->stats[PERM_W2048_GREEDY];
    case ARM_REORDERED:
    case ARM_REORDERED_ATTN: return &bc->reordered_stats;
    default: return &bc->stats[PERM_W128_GUARDED];
    }
}

typedef struct arm_figures {
    double l2_bytes, exec_flop, useful_flop, floor_ms, time_over_floor, useful_tflops, exec_tflops;
    int64_t visits, c4;
} arm_figures_t;

static arm_figures_t arm_figures(const bench_capture_t *bc, int arm, const bench_rates_t *rates)
{
    arm_figures_t f;
    memset(&f, 0, sizeof f);
    const pw_union_stats_t *st = arm_stats(bc, arm);
    f.visits = st->union_visits;
    f.c4 = st->c4;
    f.useful_flop = bc->visible_pairs * 16.0 * 128 * 4;
    if (arm == ARM_PER_QUERY) {
        f.l2_bytes = (double)st->selections * PAGE_BYTES;
        f.exec_flop = (double)st->selections * STEP_FLOP;
        f.visits = st->selections;
        f.c4 = st->selections;
    } else if (arm == ARM_UNION4 || arm == ARM_UNION4_X2 || bench_arm_in_default_arithmetic(arm)) { /* Union4 */
        f.l2_bytes = (double)st->c4 * PAGE_BYTES;
        f.exec_flop = (double)st->c4 * STEP_FLOP;
    } else {
        f.l2_bytes = (double)st->union_visits * PAGE_BYTES;
        f.exec_flop = (double)st->c4 * STEP_FLOP;
    }
    /* PW_PRECISION_FP8X2 runs QK and PV twice on the tensor cores (two E4M3 terms of Q and P) */
    if (bench_arm_is_x2(arm)) f.exec_flop *= 2;
    if (rates && rates->measured) {
        const double t_bytes = f.l2_bytes / (rates->l2_read_tbps * 1e12) * 1e3;
        const double t_flop = f.exec_flop / (rates->fp8_gemm_tflops * 1e12) * 1e3;
        f.floor_ms = t_bytes > t_flop ? t_bytes : t_flop;
    }
    const bench_arm_result_t *ar = &bc->arms[arm];
    if (ar->ran && ar->t.median_ms > 0) {
        f.useful_tflops = f.useful_flop / (ar->t.median_ms * 1e-3) / 1e12;
        f.exec_tflops = f.exec_flop / (ar->t.median_ms * 1e-3) / 1e12;
        if (f.floor_ms > 0) f.time_over_floor = ar->t.median_ms / f.floor_ms;
    }
    return f;
}

static double reduction_pct(const bench_capture_t *bc, int perm)
{
    const double base = (double)bc->stats[PERM_IDENTITY].union_visits;
    return base > 0 ? 100.0 * (base - (double)bc->stats[perm].union_visits) / base : 0.0;
}

static double med(const bench_capture_t *bc, int arm)
{
    return bc->arms[arm].ran ? bc->arms[arm].t.median_ms : NAN;
}

/* The default kernel's interleaved arms (docs/bench.md, "Default kernel"). */
typedef struct default_figures {
    int ran;                          /* all four arms timed */
    double t_identity, t_default, t_online, t_fixed;     /* medians, ms */
    double spread_identity, spread_default, spread_online, spread_fixed; /* p90 - median, ms */
    double ratio;                     /* T_identity / T_default */
    double s_exec_us, c_online_us;    /* T_identity - T_fixed, T_online - T_fixed */
    double excess_us;                 /* T_default - T_identity */
    double allowance_us;              /* max(0.5% of T_identity, the larger of the two spreads) */
    int never_slower;                 /* excess <= allowance */
} default_figures_t;

static default_figures_t default_figures(const bench_capture_t *bc)
{
    default_figures_t f;
    memset(&f, 0, sizeof f);
    const int online = bench_default_online_arm();
    const int arms[4] = {ARM_UNION4_IDENTITY, ARM_DEFAULT, online, ARM_UNION4_FIXED_W128};
    f.ran = 1;
    for (int i = 0; i < 4; i++) f.ran &= bc->arms[arms[i]].ran;
    if (!f.ran) return f;
    const bench_timing_t *ti = &bc->arms[ARM_UNION4_IDENTITY].t, *td = &bc->arms[ARM_DEFAULT].t,
                         *to = &bc->arms[online].t, *tf = &bc->arms[ARM_UNION4_FIXED_W128].t;
    f.t_identity = ti->median_ms;
    f.t_default = td->median_ms;
    f.t_online = to->median_ms;
    f.t_fixed = tf->median_ms;
    f.spread_identity = ti->p90_ms - ti->median_ms;
    f.spread_default = td->p90_ms - td->median_ms;
    f.spread_online = to->p90_ms - to->median_ms;
    f.spread_fixed = tf->p90_ms - tf->median_ms;
    f.ratio = f.t_identity / f.t_default;
    f.s_exec_us = (f.t_identity - f.t_fixed) * 1e3;
    f.c_online_us = (f.t_online - f.t_fixed) * 1e3;
    f.excess_us = (f.t_default - f.t_identity) * 1e3;
    const double spread = f.spread_identity > f.spread_default ? f.spread_identity : f.spread_default;
    const double half_pct = 0.005 * f.t_identity;
    f.allowance_us = (spread > half_pct ? spread : half_pct) * 1e3;
    f.never_slower = f.excess_us <= f.allowance_us;
    return f;
}

static const char *mode_word(pw_regroup_mode_t m)
{
    switch (m) {
    case PW_REGROUP_IDENTITY: return "identity";
    case PW_REGROUP_GREEDY: return "greedy";
    case PW_REGROUP_GUARDED: return "guarded";
    case PW_REGROUP_AUTO: return "auto";
    }
    return "?";
}

static void print_protocol(const bench_options_t *o)
{
    printf("timing protocol: one call per input copy captured in a CUDA graph; %d warm-up replays, then %d "
           "timed replays back to back, a CUDA event pair around each, rotating %d copies of Q, Top-K and O "
           "(K/V cache, page table and request arrays shared); median (min, p90) per arm.\n",
           o->warmup, o->replays, o->copies);
    if (o->replays < 50) printf("note: %d replays is fewer than the protocol's 50\n", o->replays);
    if (o->table_pages > 0)
        printf("page tables widened to %d columns (--table-pages; a capture's wider table is kept as it is)\n",
               o->table_pages);
    if (o->vt_flags & (PW_PLAN_VT_PREPASS | PW_PLAN_NO_VT_PREPASS))
        printf("V^T pre-pass forced %s on every Union4 arm (--vt-prepass)\n",
               o->vt_flags & PW_PLAN_VT_PREPASS ? "on" : "off");
    if (o->vt_flags & (PW_PLAN_FP8X2_STACKED | PW_PLAN_NO_FP8X2_STACKED))
        printf("FP8X2 tile forced to the %s on every Union4 arm (--fp8x2-tile)\n",
               o->vt_flags & PW_PLAN_FP8X2_STACKED ? "stacked tile" : "lean kernel (G = 8: the dense tile)");
}

static void print_capture(const bench_capture_t *bc, const bench_rates_t *rates, int gpu)
{
    const pw_capture_t *c = bc->capture;
    const pw_problem_t *p = &c->problem;
    int32_t max_kv = 0;
    for (int32_t r = 0; r < p->num_requests; r++)
        if (c->kv_lens[r] > max_kv) max_kv = c->kv_lens[r];
    printf("\n== %s: N=%d R=%d Hkv=%d G=%d K=%d, longest context %d tokens, useful %.1f GFLOP\n", bc->path,
           p->num_tokens, p->num_requests, p->num_kv_heads, p->q_heads_per_kv, p->topk, max_kv,
           bc->visible_pairs * p->q_heads_per_kv * p->head_dim * 4 / 1e9);
    if (bc->bad_pages > 0)
        printf("WARNING: %lld (query, KV head, page) pairs select a page whose physical id is outside the "
               "caches' %lld pages: those pages contribute nothing, so outputs and errors below are not "
               "meaningful (caches shorter than the page table reaches?)\n",
               (long long)bc->bad_pages, (long long)p->num_cache_pages);
    printf("%-16s %13s %10s %12s %12s %7s %12s\n", "grouping", "union_visits", "vs_ident", "C_4", "selections",
           "rho_Q", "cpu_regroup");
    for (int i = 0; i < NUM_PERMS; i++) {
        const pw_union_stats_t *s = &bc->stats[i];
        char name[32]; /* Union4's arms' permutations at --union4-window 64 say so */
        if ((i == PERM_W128_GUARDED_G4 || i == PERM_W128_GUARDED_G2) && bc->perm_window[i] != 128)
            snprintf(name, sizeof name, "union4 W%d g%d", (int)bc->perm_window[i], i == PERM_W128_GUARDED_G4 ? 4 : 2);
        else
            snprintf(name, sizeof name, "%s", bench_perm_name(i));
        printf("%-16s %13lld %9.2f%% %12lld %12lld %7.3f %9.1f ms\n", name, (long long)s->union_visits,
               reduction_pct(bc, i) != 0.0 ? -reduction_pct(bc, i) : 0.0, (long long)s->c4, (long long)s->selections, s->rho_q, bc->perm_cpu_ms[i]);
    }
    printf("union visits: identity %lld -> W64 %lld (%.2f%% fewer) -> W128 %lld (%.2f%% fewer)  [paper, 64K "
           "capture, W128: -12.70%%]\n",
           (long long)bc->stats[PERM_IDENTITY].union_visits, (long long)bc->stats[PERM_W64_GUARDED].union_visits,
           reduction_pct(bc, PERM_W64_GUARDED), (long long)bc->stats[PERM_W128_GUARDED].union_visits,
           reduction_pct(bc, PERM_W128_GUARDED));
    if (bc->check_rows > 0) {
        printf("reference check on %d rows (FP64 exact reference on the dequantised caches): FP8-emulating "
               "reference NRMS %.4f",
               bc->check_rows, bc->nrms_emulate_vs_exact);
        if (bc->gpu_checked)
            printf("; GPU (T_online W128) NRMS %.4f vs exact, %.2e vs emulating, NaN %lld  [paper Union8: "
                   "0.022-0.040]",
                   bc->nrms_gpu_vs_exact, bc->nrms_gpu_vs_emulate, (long long)bc->gpu_nan);
        const int g8 = p->q_heads_per_kv == 8, g4 = p->q_heads_per_kv == 4; /* the stacked tile's form: 4 slots (G = 8), 8 (G = 4) or 2 */
        printf("\nFP8X2 (two-term FP8 Q, P %s): FP8X2-emulating reference NRMS %.4f vs exact",
               bc->x2_f16_p     ? "in f16 on the V^T pre-pass"
               : bc->x2_stacked ? (g8 ? "as two E4M3 terms: the stacked 4-slot tile" : "as two E4M3 terms: the stacked 2-slot tile")
                                : "as two E4M3 terms",
               bc->nrms_emulate_x2_vs_exact);
        if (bc->stack_counts[1])
            printf(" [FP8X2 tile: %s pages / 2 x blocks' %.3f, every 4th block (rule < %.3f): %s]",
                   g8 ? "4-query halves'" : g4 ? "8-query groups'" : "pairs'",
                   (double)bc->stack_counts[0] / (2.0 * (double)bc->stack_counts[1]),
                   PW_STACK_RATIO_MILLI(p->q_heads_per_kv) / 1000.0,
                   bc->x2_stacked ? "stacked" : g8 || g4 ? "dense" : "lean");
        if (bc->gpu_x2_checked)
            printf("; GPU (union4 W128 FP8X2) NRMS %.4f vs exact, %.2e vs FP8X2-emulating, NaN %lld",
                   bc->nrms_gpu_x2_vs_exact, bc->nrms_gpu_x2_vs_emulate, (long long)bc->gpu_x2_nan);
        printf("\n");
    }
    if (bc->default_known)
        printf("default plan (W%d, union4, regroup %s, %s%s) runs: %s   [time guard: saving %.1f us vs cost %.1f "
               "us + margin %.1f us]\n",
               bc->default_info.window, mode_word(bc->default_info.configured),
               bench_default_precision() == PW_PRECISION_FP8X2 ? "FP8X2" : "FP8",
               bc->max_query_rows ? ", max_query_rows given" : "", mode_word(bc->default_info.regroup),
               bc->default_info.saving_us, bc->default_info.cost_us, bc->default_info.margin_us);
    else
        printf("default plan: none, the library takes no plan for this shape (%s)\n", bc->default_note);
    if (!gpu) return;
    if (!bc->gpu_ran && !bc->arms[ARM_T0].ran) {
        printf("GPU: not run (%s)\n", bc->gpu_note);
        return;
    }
    if (bc->device_meta_checked)
        printf("in-call W128 regroup on the device: permutation and union statistics %s the CPU reference\n",
               bc->device_meta_matches ? "equal" : "DIFFER FROM");
    if (bc->gpu_bad_pages_counted && (bc->gpu_bad_pages > 0 || bc->bad_pages > 0))
        printf("%s: the kernel counted %lld (query, KV head, page) pairs outside the caches, the CPU %lld\n",
               bc->gpu_bad_pages == bc->bad_pages ? "WARNING" : "WARNING (counts differ)",
               (long long)bc->gpu_bad_pages, (long long)bc->bad_pages);
    printf("%-36s %9s %9s %9s %9s %9s %8s %8s %9s %8s %s\n", "arm", "median_ms", "min_ms", "p90_ms", "visits",
           "C_4", "exec_GF", "use_TF/s", "floor_ms", "t/floor", "out==T0");
    for (int a = 0; a < NUM_ARMS; a++) {
        const bench_arm_result_t *ar = &bc->arms[a];
        const arm_figures_t f = arm_figures(bc, a, rates);
        if (!ar->ran) {
            printf("%-36s FAILED: %s\n", bench_arm_name(a), ar->error[0] ? ar->error : "not run");
            continue;
        }
        char same[48];
        if (ar->same_as_t0 < 0) snprintf(same, sizeof same, "-");
        else if (ar->same_as_t0) snprintf(same, sizeof same, "bitwise");
        else snprintf(same, sizeof same, "NO (%.3f%% differ)", 100.0 * ar->differing);
        /* FP8X2 arms: other arithmetic, so T0's bytes are not expected; the Union4 one is
         * compared with the Union8 FP8X2 arm instead */
        if (a == ARM_ONLINE_W128_X2 && ar->same_as_t0 >= 0)
            snprintf(same, sizeof same, "FP8X2 (%.1f%% differ)", 100.0 * ar->differing);
        else if (a == ARM_UNION4_X2 && ar->same_as_x2 > 0)
            snprintf(same, sizeof same, "== union8 FP8X2");
        else if (a == ARM_UNION4_X2 && ar->same_as_x2 == 0) /* the pre-pass's f16 P (semantics §4.5) */
            snprintf(same, sizeof same, "union8 FP8X2 NRMS %.1e", ar->nrms_x2);
        else if (a == ARM_UNION4_X2)
            snprintf(same, sizeof same, "-");
        else if (bench_arm_is_x2(a)) /* the default kernel's group in the default arithmetic */
            snprintf(same, sizeof same, "FP8X2");
        char floor_s[16], ratio_s[16];
        if (f.floor_ms > 0) {
            snprintf(floor_s, sizeof floor_s, "%.4f", f.floor_ms);
            snprintf(ratio_s, sizeof ratio_s, "%.2f", f.time_over_floor);
        } else {
            snprintf(floor_s, sizeof floor_s, "-");
            snprintf(ratio_s, sizeof ratio_s, "-");
        }
        printf("%-36s %9.4f %9.4f %9.4f %9lld %9lld %8.1f %8.1f %9s %8s %s\n", bench_arm_name(a), ar->t.median_ms,
               ar->t.min_ms, ar->t.p90_ms, (long long)f.visits, (long long)f.c4, f.exec_flop / 1e9, f.useful_tflops,
               floor_s, ratio_s, same);
    }
    const double t0 = med(bc, ARM_T0), tf = med(bc, ARM_FIXED_W128), to = med(bc, ARM_ONLINE_W128),
                 to64 = med(bc, ARM_ONLINE_W64), pq = med(bc, ARM_PER_QUERY), u4 = med(bc, ARM_UNION4);
    printf("S_exec without the identity-perm step = offline identity - T_fixed = %.2f us\n",
           (med(bc, ARM_FIXED_IDENTITY) - tf) * 1e3);
    printf("S_exec = T0 - T_fixed = %.2f us   C_online = T_online - T_fixed = %.2f us (W128), %.2f us (W64)   "
           "S_net = T0 - T_online = %.2f us (W128)   [paper: 95.96, 37.55, 58.41 us]\n",
           (t0 - tf) * 1e3, (to - tf) * 1e3, (to64 - tf) * 1e3, (t0 - to) * 1e3);
    printf("T0 / T_online(W128) = %.4f   [paper 1.045]    per-query / Union8 T_online(W128) = %.3f   [paper vs "
           "SGLang native SM90: 2.66]    Union4 / Union8 = %.3f   [paper 1.075]\n",
           t0 / to, pq / to, u4 / to);
    printf("FP8X2 / FP8 time: Union4 W128 %.3f, Union8 T_online W128 %.3f\n", med(bc, ARM_UNION4_X2) / u4,
           med(bc, ARM_ONLINE_W128_X2) / to);
    const default_figures_t df = default_figures(bc);
    if (df.ran) {
        printf("default kernel (union4), interleaved replays (%d each), median (p90 - median) ms: T_identity %.4f "
               "(%.4f)  T_default %.4f (%.4f)  T_online %.4f (%.4f)  T_fixed %.4f (%.4f)\n",
               bc->arms[ARM_DEFAULT].t.replays, df.t_identity, df.spread_identity, df.t_default, df.spread_default,
               df.t_online, df.spread_online, df.t_fixed, df.spread_fixed);
        printf("T_identity / T_default = %.4f  [goal >= 1.06 on A-hot]   never slower: %s (T_default - T_identity "
               "= %+.2f us, allowed %.2f us = max(0.5%% of T_identity, the larger spread))\n",
               df.ratio, df.never_slower ? "yes" : "NO", df.excess_us, df.allowance_us);
        printf("default kernel at W%d: S_exec = T_identity - T_fixed = %.2f us (time guard: %.1f)   C_online = "
               "T_online - T_fixed = %.2f us (time guard: %.1f)  [goals: <= 6 us on A-hot, <= 8 us at a 1M-token "
               "context]\n",
               bc->perm_window[PERM_W128_GUARDED_G4], df.s_exec_us, bc->measured_window_info.saving_us, df.c_online_us,
               bc->measured_window_info.cost_us);
        if (bc->paired_rounds)
            printf("default kernel, paired per round (%d rounds; median of the per-round differences, 95%% interval "
                   "of that median): C_online = T_online - T_fixed %.2f us [%.2f, %.2f]   T_default - T_identity "
                   "%+.2f us [%+.2f, %+.2f]\n",
                   bc->paired_rounds, bc->c_online_paired.median_us, bc->c_online_paired.lo_us,
                   bc->c_online_paired.hi_us, bc->excess_paired.median_us, bc->excess_paired.lo_us,
                   bc->excess_paired.hi_us);
        if (bc->arms[ARM_DEFAULT_G8].ran)
            printf("Union4 regroup objective (interleaved): 4-query unions (default) %.4f ms, C_4 %lld vs 8-query "
                   "unions (PW_PLAN_REGROUP_GROUPS_OF_8) %.4f ms, C_4 %lld: ratio 8-query / 4-query %.4f\n",
                   df.t_default, (long long)arm_stats(bc, ARM_DEFAULT)->c4, med(bc, ARM_DEFAULT_G8),
                   (long long)arm_stats(bc, ARM_DEFAULT_G8)->c4, med(bc, ARM_DEFAULT_G8) / df.t_default);
        if (bc->arms[ARM_DEFAULT_NOT_BY_TILE].ran)
            printf("regroup objective by tile (the default) %.4f ms vs not (PW_PLAN_NO_REGROUP_BY_TILE, interleaved) "
                   "%.4f ms: ratio default / not by tile %.4f; T_identity / T_not_by_tile %.4f\n",
                   df.t_default, med(bc, ARM_DEFAULT_NOT_BY_TILE), df.t_default / med(bc, ARM_DEFAULT_NOT_BY_TILE),
                   df.t_identity / med(bc, ARM_DEFAULT_NOT_BY_TILE));

        if (bc->arms[ARM_DEFAULT_ALONE].ran)
            printf("default call timed alone (its own replays back to back, as a peer's harness times the peer): "
                   "%.4f ms (p90 %.4f); interleaved with the other plans above: %.4f ms\n",
                   med(bc, ARM_DEFAULT_ALONE), bc->arms[ARM_DEFAULT_ALONE].t.p90_ms, df.t_default);
    }
    printf("floors: attention kernel only (regroup and union preparation not included); L2->SM bytes = page "
           "walks x 32 KiB (Union8: union visits, multicast; Union4: C_4; per-query: sum |S_i|); executed "
           "FLOP = CTA-page steps x 64 x 128 x 128 x 4.\n");
    printf("reordered arms: rows are moved, so each row's causal position becomes its slot's: the output differs "
           "from T0 where a query's visible tokens changed; timing only.\n");
    printf("FP8X2 arms: args.precision = PW_PRECISION_FP8X2 (QK and PV twice on the tensor cores: executed "
           "FLOP doubled); their output is not T0's (other arithmetic): union4 FP8X2 is compared with union8 "
           "FP8X2 (bitwise; by NRMS where union4 runs on the V^T pre-pass, whose FP8X2 takes P in f16: "
           "docs/semantics.md 4.5).\n");
}

/* ---------------------------------------------------------------------------------- */
/* JSON                                                                               */
/* ---------------------------------------------------------------------------------- */
static cJSON *stats_json(const pw_union_stats_t *s)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "queries", (double)s->queries);
    cJSON_AddNumberToObject(j, "groups", (double)s->groups);
    cJSON_AddNumberToObject(j, "selections", (double)s->selections);
    cJSON_AddNumberToObject(j, "union_visits", (double)s->union_visits);
    cJSON_AddNumberToObject(j, "c4", (double)s->c4);
    cJSON_AddNumberToObject(j, "rho_q", s->rho_q);
    return j;
}

static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

/* name_us, name_lo_us, name_hi_us of a paired figure. */
static void add_paired(cJSON *o, const char *name, const bench_paired_t *f)
{
    char key[64];
    snprintf(key, sizeof key, "%s_us", name);
    add_num(o, key, f->median_us);
    snprintf(key, sizeof key, "%s_lo_us", name);
    add_num(o, key, f->lo_us);
    snprintf(key, sizeof key, "%s_hi_us", name);
    add_num(o, key, f->hi_us);
}

static cJSON *capture_json(const bench_capture_t *bc, const bench_rates_t *rates)
{
    const pw_capture_t *c = bc->capture;
    const pw_problem_t *p = &c->problem;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", bc->path);
    cJSON *pj = cJSON_AddObjectToObject(j, "problem");
    cJSON_AddNumberToObject(pj, "num_tokens", p->num_tokens);
    cJSON_AddNumberToObject(pj, "num_requests", p->num_requests);
    cJSON_AddNumberToObject(pj, "num_kv_heads", p->num_kv_heads);
    cJSON_AddNumberToObject(pj, "q_heads_per_kv", p->q_heads_per_kv);
    cJSON_AddNumberToObject(pj, "topk", p->topk);
    cJSON_AddNumberToObject(pj, "max_pages_per_request", p->max_pages_per_request);
    cJSON_AddNumberToObject(pj, "num_cache_pages", (double)p->num_cache_pages);
    cJSON_AddNumberToObject(pj, "visible_pairs", bc->visible_pairs);
    cJSON_AddNumberToObject(pj, "bad_page_pairs", (double)bc->bad_pages);
    cJSON_AddNumberToObject(pj, "useful_flop", bc->visible_pairs * p->q_heads_per_kv * p->head_dim * 4);
    cJSON *gj = cJSON_AddObjectToObject(j, "groupings");
    for (int i = 0; i < NUM_PERMS; i++) {
        cJSON *s = stats_json(&bc->stats[i]);
        cJSON_AddNumberToObject(s, "window", bc->perm_window[i]);
        cJSON_AddNumberToObject(s, "reduction_pct", reduction_pct(bc, i));
        cJSON_AddNumberToObject(s, "cpu_regroup_ms", bc->perm_cpu_ms[i]);
        cJSON_AddItemToObject(gj, bench_perm_key(i), s);
    }
    cJSON_AddItemToObject(gj, "reordered_w128_identity", stats_json(&bc->reordered_stats));
    cJSON *rj = cJSON_AddObjectToObject(j, "reference_check");
    cJSON_AddNumberToObject(rj, "rows", bc->check_rows);
    if (bc->check_row_ids) /* the same rows in bench/flashinfer_peer.py (its --seed = this run's --seed) */
        cJSON_AddItemToObject(rj, "row_ids", cJSON_CreateIntArray(bc->check_row_ids, bc->check_rows));
    if (bc->check_rows > 0) {
        add_num(rj, "nrms_emulate_vs_exact", bc->nrms_emulate_vs_exact);
        add_num(rj, "nrms_emulate_fp8x2_vs_exact", bc->nrms_emulate_x2_vs_exact);
        cJSON_AddBoolToObject(rj, "fp8x2_emulation_f16_p", bc->x2_f16_p);
        cJSON_AddBoolToObject(rj, "fp8x2_stacked", bc->x2_stacked);
        if (bc->stack_counts[1])
            add_num(rj, "fp8x2_stack_ratio", (double)bc->stack_counts[0] / (2.0 * (double)bc->stack_counts[1]));
    }
    if (bc->gpu_checked) {
        add_num(rj, "nrms_gpu_vs_exact", bc->nrms_gpu_vs_exact);
        add_num(rj, "nrms_gpu_vs_emulate", bc->nrms_gpu_vs_emulate);
        cJSON_AddNumberToObject(rj, "gpu_nan", (double)bc->gpu_nan);
    }
    if (bc->gpu_x2_checked) { /* the output of the union4_w128_fp8x2 arm */
        add_num(rj, "nrms_gpu_fp8x2_vs_exact", bc->nrms_gpu_x2_vs_exact);
        add_num(rj, "nrms_gpu_fp8x2_vs_emulate", bc->nrms_gpu_x2_vs_emulate);
        cJSON_AddNumberToObject(rj, "gpu_fp8x2_nan", (double)bc->gpu_x2_nan);
    }
    cJSON *gpu = cJSON_AddObjectToObject(j, "gpu");
    cJSON_AddBoolToObject(gpu, "ran", bc->gpu_ran);
    cJSON_AddStringToObject(gpu, "note", bc->gpu_note);
    if (bc->device_meta_checked) cJSON_AddBoolToObject(gpu, "device_w128_metadata_matches_reference", bc->device_meta_matches);
    if (bc->gpu_bad_pages_counted) cJSON_AddNumberToObject(gpu, "bad_page_pairs", (double)bc->gpu_bad_pages);
    cJSON *arms = cJSON_AddObjectToObject(gpu, "arms");
    for (int a = 0; a < NUM_ARMS && bc->gpu_ran; a++) {
        const bench_arm_result_t *ar = &bc->arms[a];
        const arm_figures_t f = arm_figures(bc, a, rates);
        cJSON *aj = cJSON_AddObjectToObject(arms, bench_arm_key(a));
        cJSON_AddStringToObject(aj, "name", bench_arm_name(a));
        cJSON_AddBoolToObject(aj, "ran", ar->ran);
        if (!ar->ran) {
            cJSON_AddStringToObject(aj, "error", ar->error);
            continue;
        }
        cJSON_AddNumberToObject(aj, "median_ms", ar->t.median_ms);
        cJSON_AddNumberToObject(aj, "min_ms", ar->t.min_ms);
        cJSON_AddNumberToObject(aj, "p90_ms", ar->t.p90_ms);
        cJSON_AddNumberToObject(aj, "mean_ms", ar->t.mean_ms);
        cJSON_AddNumberToObject(aj, "replays", ar->t.replays);
        cJSON_AddNumberToObject(aj, "page_walks", (double)f.visits);
        cJSON_AddNumberToObject(aj, "cta_page_steps", (double)f.c4);
        cJSON_AddNumberToObject(aj, "l2_bytes", f.l2_bytes);
        cJSON_AddNumberToObject(aj, "executed_flop", f.exec_flop);
        cJSON_AddNumberToObject(aj, "useful_flop", f.useful_flop);
        cJSON_AddNumberToObject(aj, "useful_tflops", f.useful_tflops);
        cJSON_AddNumberToObject(aj, "executed_tflops", f.exec_tflops);
        if (f.floor_ms > 0) {
            cJSON_AddNumberToObject(aj, "floor_ms", f.floor_ms);
            cJSON_AddNumberToObject(aj, "time_over_floor", f.time_over_floor);
        }
        if (ar->same_as_t0 >= 0) {
            cJSON_AddBoolToObject(aj, "output_equals_t0", ar->same_as_t0);
            cJSON_AddNumberToObject(aj, "output_differing_fraction", ar->differing);
        }
        if (ar->same_as_x2 >= 0) {
            cJSON_AddBoolToObject(aj, "output_equals_union8_w128_fp8x2", ar->same_as_x2);
            cJSON_AddNumberToObject(aj, "output_differing_fraction_union8_w128_fp8x2", ar->differing_x2);
            cJSON_AddNumberToObject(aj, "output_nrms_union8_w128_fp8x2", ar->nrms_x2);
        }
    }
    if (bc->gpu_ran) {
        const double t0 = med(bc, ARM_T0), tf = med(bc, ARM_FIXED_W128), to = med(bc, ARM_ONLINE_W128),
                     to64 = med(bc, ARM_ONLINE_W64), pq = med(bc, ARM_PER_QUERY), u4 = med(bc, ARM_UNION4);
        cJSON *dj = cJSON_AddObjectToObject(gpu, "derived");
        add_num(dj, "s_exec_us", (t0 - tf) * 1e3);
        add_num(dj, "s_exec_exec_only_us", (med(bc, ARM_FIXED_IDENTITY) - tf) * 1e3);
        add_num(dj, "c_online_w128_us", (to - tf) * 1e3);
        add_num(dj, "c_online_w64_us", (to64 - tf) * 1e3);
        add_num(dj, "s_net_w128_us", (t0 - to) * 1e3);
        add_num(dj, "t0_over_t_online_w128", t0 / to);
        add_num(dj, "per_query_over_union8_online_w128", pq / to);
        add_num(dj, "union4_over_union8_online_w128", u4 / to);
        add_num(dj, "fp8x2_over_fp8_union4", med(bc, ARM_UNION4_X2) / u4);
        add_num(dj, "fp8x2_over_fp8_union8", med(bc, ARM_ONLINE_W128_X2) / to);
        cJSON_AddNumberToObject(dj, "paper_t0_over_t_online", PAPER_T0_OVER_ONLINE);
        cJSON_AddNumberToObject(dj, "paper_native_over_union8", PAPER_NATIVE_OVER_UNION8);
        cJSON_AddNumberToObject(dj, "paper_union4_over_union8", PAPER_UNION4_OVER_UNION8);
        const default_figures_t df = default_figures(bc);
        if (df.ran) {
            cJSON *fj = cJSON_AddObjectToObject(gpu, "default_kernel");
            cJSON_AddNumberToObject(fj, "interleaved_replays", bc->arms[ARM_DEFAULT].t.replays);
            cJSON_AddStringToObject(fj, "precision",
                                    bench_default_precision() == PW_PRECISION_FP8X2 ? "fp8x2" : "fp8");
            add_num(fj, "t_identity_ms", df.t_identity);
            add_num(fj, "t_default_ms", df.t_default);
            add_num(fj, "t_online_ms", df.t_online);
            add_num(fj, "t_fixed_ms", df.t_fixed);
            add_num(fj, "spread_identity_ms", df.spread_identity);
            add_num(fj, "spread_default_ms", df.spread_default);
            add_num(fj, "spread_online_ms", df.spread_online);
            add_num(fj, "spread_fixed_ms", df.spread_fixed);
            add_num(fj, "t_identity_over_t_default", df.ratio);
            add_num(fj, "s_exec_us", df.s_exec_us);
            add_num(fj, "c_online_us", df.c_online_us);
            /* S_exec and C_online are measured at this window; the guard's figures at it */
            cJSON_AddNumberToObject(fj, "window", bc->perm_window[PERM_W128_GUARDED_G4]);
            add_num(fj, "guard_saving_us", bc->measured_window_info.saving_us);
            add_num(fj, "guard_cost_us", bc->measured_window_info.cost_us);
            if (bc->paired_rounds) {
                cJSON_AddNumberToObject(fj, "paired_rounds", bc->paired_rounds);
                add_paired(fj, "c_online_paired", &bc->c_online_paired);
                add_paired(fj, "excess_paired", &bc->excess_paired);
            }
            if (bc->arms[ARM_DEFAULT_G8].ran) {
                add_num(fj, "t_default_g8_ms", med(bc, ARM_DEFAULT_G8));
                add_num(fj, "g8_over_g4", med(bc, ARM_DEFAULT_G8) / df.t_default);
            }
            if (bc->arms[ARM_DEFAULT_NOT_BY_TILE].ran) {
                add_num(fj, "t_default_not_by_tile_ms", med(bc, ARM_DEFAULT_NOT_BY_TILE));
                add_num(fj, "default_over_not_by_tile", df.t_default / med(bc, ARM_DEFAULT_NOT_BY_TILE));

            }
            if (bc->arms[ARM_DEFAULT_ALONE].ran) add_num(fj, "t_default_alone_ms", med(bc, ARM_DEFAULT_ALONE));
            add_num(fj, "t_default_minus_t_identity_us", df.excess_us);
            add_num(fj, "allowance_us", df.allowance_us);
            cJSON_AddBoolToObject(fj, "never_slower", df.never_slower);
        }
    }
    if (bc->default_known) {
        cJSON *pj2 = cJSON_AddObjectToObject(j, "default_plan");
        cJSON_AddStringToObject(pj2, "configured", mode_word(bc->default_info.configured));
        cJSON_AddStringToObject(pj2, "precision", bench_default_precision() == PW_PRECISION_FP8X2 ? "fp8x2" : "fp8");
        cJSON_AddStringToObject(pj2, "runs", mode_word(bc->default_info.regroup));
        cJSON_AddNumberToObject(pj2, "window", bc->default_info.window);
        cJSON_AddNumberToObject(pj2, "max_query_rows", bc->max_query_rows);
        add_num(pj2, "predicted_saving_us", bc->default_info.saving_us);
        add_num(pj2, "predicted_cost_us", bc->default_info.cost_us);
        add_num(pj2, "margin_us", bc->default_info.margin_us);
        /* Whether the call runs the V^T pre-pass: under capture it is a graph branch beside
         * the regroup, which then costs the call less (bench/fit_time_guard.py fits the
         * guard's cost on calls without it). */
        cJSON_AddBoolToObject(pj2, "vt_prepass", bc->default_info.vt_prepass != 0);
    } else {
        cJSON *pj2 = cJSON_AddObjectToObject(j, "default_plan");
        cJSON_AddStringToObject(pj2, "error", bc->default_note);
    }
    return j;
}

static int write_json(FILE *out, const char *path, const bench_options_t *o, const bench_rates_t *rates, int gpu,
                      const char *gpu_reason, bench_capture_t *bcs, int nfiles)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tool", "pageweaver bench");
    cJSON_AddStringToObject(root, "version", pw_version_string());
    cJSON_AddBoolToObject(root, "gpu", gpu);
    cJSON_AddStringToObject(root, "device", gpu_reason);
    cJSON *pj = cJSON_AddObjectToObject(root, "protocol");
    cJSON_AddStringToObject(pj, "method", "CUDA graph of one call per input copy; warm-up replays; timed replays "
                                          "back to back with a CUDA event pair around each; copies of Q, Top-K "
                                          "and O rotated; median, min, p90");
    cJSON_AddNumberToObject(pj, "replays", o->replays);
    cJSON_AddNumberToObject(pj, "warmup", o->warmup);
    cJSON_AddNumberToObject(pj, "copies", o->copies);
    cJSON_AddNumberToObject(pj, "interleaved_replays", o->interleaved_replays);
    cJSON_AddNumberToObject(pj, "union4_window", o->union4_window);
    cJSON_AddNumberToObject(pj, "max_query_rows", o->max_query_rows);
    { /* random order and check rows; written as the integer itself (a double loses seeds past
       * 2^53, and cJSON prints 15 digits): bench/flashinfer_peer.py --seed takes it */
        char seed_text[24];
        snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)o->seed);
        cJSON_AddRawToObject(pj, "seed", seed_text);
    }
    cJSON *rj = cJSON_AddObjectToObject(root, "rates");
    cJSON_AddBoolToObject(rj, "measured", rates->measured);
    if (rates->measured) {
        cJSON_AddNumberToObject(rj, "l2_read_tbps", rates->l2_read_tbps);
        cJSON_AddNumberToObject(rj, "l2_buffer_mib", rates->l2_buffer_mib);
        cJSON_AddNumberToObject(rj, "fp8_gemm_tflops", rates->fp8_gemm_tflops);
        cJSON_AddNumberToObject(rj, "fp8_gemm_tflops_precise_accum", rates->fp8_gemm_tflops_precise);
        cJSON_AddNumberToObject(rj, "fp8_gemm_tflops_fast_accum", rates->fp8_gemm_tflops_fast_accum);
        cJSON_AddNumberToObject(rj, "gemm_size", rates->gemm_size);
    } else {
        cJSON_AddStringToObject(rj, "note", rates->error);
    }
    cJSON *cj = cJSON_AddArrayToObject(root, "captures");
    for (int f = 0; f < nfiles; f++)
        if (bcs[f].capture) cJSON_AddItemToArray(cj, capture_json(&bcs[f], rates));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    int rc = !text;
    if (text) rc = fputs(text, out) < 0 || fputc('\n', out) == EOF;
    rc |= fclose(out) != 0;
    free(text);
    if (rc) fprintf(stderr, "pageweaver bench: cannot write %s\n", strcmp(path, "-") == 0 ? "the JSON to stdout" : path);
    return rc;
}

/* The most query rows of one request (what an engine passes as max_seqlen_q); a capture's
 * layout was checked when it was read (cu_seqlens_q non-decreasing). */
static int32_t most_rows_of_a_request(const pw_capture_t *c)
{
    int32_t most = 0;
    for (int32_t r = 0; r < c->problem.num_requests; r++) {
        const int32_t rows = c->cu_seqlens_q[r + 1] - c->cu_seqlens_q[r];
        if (rows > most) most = rows;
    }
    return most;
}

/* --table-pages: the page table [R, max_pages] becomes [R, pages], each row padded with
 * physical page 0 (as engines pad theirs); nothing else changes, so the results must not. */
static int widen_page_table(pw_capture_t *c, int pages)
{
    pw_problem_t *p = &c->problem;
    if (pages <= p->max_pages_per_request) return 0;
    const size_t old_cols = (size_t)p->max_pages_per_request, r = (size_t)p->num_requests;
    int32_t *t = calloc(r * (size_t)pages, sizeof *t);
    if (!t) return 1;
    for (size_t i = 0; i < r; i++) memcpy(t + i * (size_t)pages, c->page_table + i * old_cols, old_cols * sizeof *t);
    free(c->page_table);
    c->page_table = t;
    p->max_pages_per_request = pages;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
int pw_cli_bench(int argc, char **argv)
{
    bench_options_t o = {100, 10, 3, 256, 1, 0, 1, 0, 200, 0, 0u, 0, 0};
    const char *json_path = NULL;
    const char *files[MAX_FILES];
    int nfiles = 0;
    long replays = o.replays, warmup = o.warmup, copies = o.copies, check_rows = o.check_rows, seed = 1;
    long interleaved = o.interleaved_replays;
    long table_pages = 0, union4_window = 0, max_query_rows = 0;
    const struct {
        const char *name;
        long lo, hi;
        long *value;
    } numeric[] = {
        {"--replays", 1, 100000, &replays},        {"--warmup", 0, 100000, &warmup},
        {"--copies", 1, 8, &copies},               {"--check-rows", 0, 1L << 30, &check_rows},
        {"--seed", 0, 1L << 62, &seed},            {"--interleaved-replays", 1, 100000, &interleaved},
        {"--table-pages", 0, 1L << 29, &table_pages}, {"--union4-window", 64, 128, &union4_window},
        {"--max-query-rows", -1, 0x7fffffffL, &max_query_rows},
    };
    /* Options that force a pair of plan flags on every Union4 arm: auto (neither), or one. */
    const struct {
        const char *name, *on_word, *off_word;
        uint32_t on, off;
    } forced[] = {
        {"--vt-prepass", "on", "off", PW_PLAN_VT_PREPASS, PW_PLAN_NO_VT_PREPASS},
        {"--fp8x2-tile", "stacked", "lean", PW_PLAN_FP8X2_STACKED, PW_PLAN_NO_FP8X2_STACKED},
    };
    int options_done = 0; /* after "--" every argument is a capture, as in stats */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_done && strcmp(a, "--") == 0) {
            options_done = 1;
            continue;
        }
        if (options_done || a[0] != '-' || a[1] == '\0') { /* a capture ('-' included, as before) */
            if (nfiles == MAX_FILES) {
                fprintf(stderr, "pageweaver bench: more than %d captures\n", MAX_FILES);
                return PW_CLI_USAGE;
            }
            files[nfiles++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        const size_t name_len = a[0] == '-' && a[1] == '-' && eq ? (size_t)(eq - a) : strlen(a);
        int n = -1;
        for (int k = 0; k < (int)(sizeof numeric / sizeof numeric[0]); k++)
            if (strlen(numeric[k].name) == name_len && strncmp(a, numeric[k].name, name_len) == 0) n = k;
        int f = -1;
        for (int k = 0; k < (int)(sizeof forced / sizeof forced[0]); k++)
            if (strlen(forced[k].name) == name_len && strncmp(a, forced[k].name, name_len) == 0) f = k;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_help(stdout);
            return PW_CLI_OK;
        } else if (strcmp(a, "--json") == 0 || strncmp(a, "--json=", 7) == 0) {
            json_path = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            if (!json_path || !*json_path) {
                fprintf(stderr, "pageweaver bench: --json needs a file name ('-' for stdout)\n");
                return PW_CLI_USAGE;
            }
            /* `--json --replays 50 x.safetensors` forgot the name: refuse a value that reads
             * as an option (a file of that name: --json=./--replays), rather than write a
             * file called --replays. */
            if (a[6] != '=' && json_path[0] == '-' && json_path[1] != '\0') {
                fprintf(stderr,
                        "pageweaver bench: --json needs a file name, got the option-like '%s' (for a file "
                        "of that name: --json=./%s)\n",
                        json_path, json_path);
                return PW_CLI_USAGE;
            }
        } else if (n >= 0) {
            const char *v = eq && name_len < strlen(a) ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!pw_cli_parse_long(v, numeric[n].lo, numeric[n].hi, numeric[n].value)) {
                fprintf(stderr, "pageweaver bench: %s needs an integer in %ld..%ld, got '%s'\n", numeric[n].name,
                        numeric[n].lo, numeric[n].hi, v ? v : "");
                return PW_CLI_USAGE;
            }
        } else if (f >= 0) {
            const char *v = eq && name_len < strlen(a) ? eq + 1 : (i + 1 < argc ? argv[++i] : "");
            o.vt_flags &= ~(forced[f].on | forced[f].off);
            if (strcmp(v, forced[f].on_word) == 0) o.vt_flags |= forced[f].on;
            else if (strcmp(v, forced[f].off_word) == 0) o.vt_flags |= forced[f].off;
            else if (strcmp(v, "auto") != 0) {
                fprintf(stderr, "pageweaver bench: %s needs auto, %s or %s, got '%s'\n", forced[f].name,
                        forced[f].on_word, forced[f].off_word, v);
                return PW_CLI_USAGE;
            }
        } else if (strcmp(a, "--cpu-only") == 0) {
            o.cpu_only = 1;
        } else if (strcmp(a, "--no-rates") == 0) {
            o.rates = 0;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o.quiet = 1;
        } else {
            fprintf(stderr, "pageweaver bench: unknown option '%s' (try --help)\n", a);
            return PW_CLI_USAGE;
        }
    }
    o.replays = (int)replays;
    o.warmup = (int)warmup;
    o.copies = (int)copies;
    o.check_rows = (int)check_rows;
    if (union4_window != 0 && union4_window != 64 && union4_window != 128) {
        fprintf(stderr, "pageweaver bench: --union4-window needs 64 or 128, got %ld\n", union4_window);
        return PW_CLI_USAGE;
    }
    o.union4_window = (int)union4_window;
    o.max_query_rows = (int)max_query_rows;
    o.seed = (uint64_t)seed;
    o.interleaved_replays = (int)interleaved;
    o.table_pages = (int)table_pages;
    if (nfiles == 0) {
        fprintf(stderr, "pageweaver bench: no capture given (try --help)\n");
        return PW_CLI_USAGE;
    }
    /* `--json a.safetensors b.safetensors` (stats takes --json without a value) would destroy
     * a.safetensors; `--json x.st x.st` would destroy its own input. */
    if (pw_cli_check_output("bench", "--json", json_path, files, nfiles) != 0) return PW_CLI_USAGE;
    /* The JSON destination is opened before the work, so that a bad path fails at once.
     * '-' is stdout: the text report then goes to stderr, keeping stdout one document. */
    FILE *json_out = NULL;
    if (json_path && strcmp(json_path, "-") == 0) {
        fflush(stdout);
        const int fd = dup(STDOUT_FILENO);
        json_out = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!json_out || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            fprintf(stderr, "pageweaver bench: cannot redirect the report for --json -\n");
            return PW_CLI_BAD_INPUT;
        }
    } else if (json_path) {
        json_out = fopen(json_path, "w");
        if (!json_out) {
            fprintf(stderr, "pageweaver bench: --json %s: cannot open for writing: %s\n", json_path,
                    strerror(errno));
            return PW_CLI_BAD_INPUT;
        }
    }

    char reason[256];
    const int gpu = !o.cpu_only && bench_gpu_available(reason, sizeof reason);
    if (o.cpu_only) snprintf(reason, sizeof reason, "--cpu-only");
    printf("pageweaver bench %s\n", pw_version_string());
    if (gpu) {
        printf("device: %s\n", reason);
        print_protocol(&o);
    } else {
        printf("no timings: they need an sm_90 GPU (%s). Running the CPU part: union statistics of the "
               "groupings and the reference check.\n",
               reason);
    }
    if (o.max_query_rows)
        printf("max_query_rows %d on every plan (--max-query-rows%s)\n", o.max_query_rows,
               o.max_query_rows < 0 ? ": each capture's own most rows of a request" : "");
    if (o.union4_window) /* the CPU part's Union4 permutations too */
        printf("regroup window %d on every Union4 arm, the default plan's included, and their caller "
               "permutations (--union4-window)\n",
               o.union4_window);
    bench_rates_t rates;
    memset(&rates, 0, sizeof rates);
    snprintf(rates.error, sizeof rates.error, gpu ? "not measured (--no-rates)" : "no GPU");
    if (gpu && o.rates) {
        if (!o.quiet) fprintf(stderr, "[bench] measuring L2 read bandwidth and the FP8 GEMM rate\n");
        bench_gpu_rates(&rates);
        if (rates.measured)
            printf("measured rates: L2 read %.2f TB/s (%.0f MiB buffer, 16-byte .cg loads); dense FP8 GEMM %.0f "
                   "TFLOP/s (cuBLASLt e4m3 %d^3, TN, bf16 out; fast accumulation %.0f, default %.0f): floors use "
                   "%.2f TB/s and %.0f TFLOP/s\n",
                   rates.l2_read_tbps, rates.l2_buffer_mib, rates.fp8_gemm_tflops, rates.gemm_size,
                   rates.fp8_gemm_tflops_fast_accum, rates.fp8_gemm_tflops_precise, rates.l2_read_tbps,
                   rates.fp8_gemm_tflops);
        else
            printf("rates not measured (%s): no floors\n", rates.error);
    }

    bench_capture_t *bcs = calloc((size_t)nfiles, sizeof *bcs);
    if (!bcs) {
        if (json_out) fclose(json_out);
        return PW_CLI_BAD_INPUT;
    }
    int failed = 0;
    for (int f = 0; f < nfiles; f++) {
        bench_capture_t *bc = &bcs[f];
        bc->path = files[f];
        /* Q / K / V only where something reads them (the GPU arms, the reference check):
         * `--cpu-only --check-rows 0` reports plans and union statistics from the ids. */
        const unsigned read_flags =
            o.cpu_only && o.check_rows == 0 ? 0u : (unsigned)(PW_CAPTURE_LOAD_QKV | PW_CAPTURE_GENERATE_QKV);
        const pw_status_t st = pw_capture_read(files[f], read_flags, &bc->capture);
        if (st != PW_SUCCESS) {
            fputs("pageweaver bench: ", stderr);
            pw_cli_fputs_escaped(pw_last_error(), stderr);
            fputc('\n', stderr);
            failed = 1;
            continue;
        }
        bc->vt_flags = o.vt_flags;
        bc->union4_window = o.union4_window;
        bc->max_query_rows = o.max_query_rows >= 0 ? o.max_query_rows : most_rows_of_a_request(bc->capture);
        const pw_problem_t *shape = &bc->capture->problem;
        if (bc->max_query_rows > 0 &&
            (int64_t)shape->num_tokens > (int64_t)shape->num_requests * bc->max_query_rows) {
            /* pw_plan_create refuses such a config (N > R x value: some request must be longer);
             * say it is the flag, not the shape */
            fprintf(stderr,
                    "pageweaver bench: %s: --max-query-rows %d: this capture has %d query rows in %d requests, "
                    "so some request has more; every plan refuses it (its longest has %d; -1 passes each "
                    "capture's own)\n",
                    files[f], bc->max_query_rows, shape->num_tokens, shape->num_requests,
                    most_rows_of_a_request(bc->capture));
            pw_capture_free(bc->capture);
            bc->capture = NULL; /* skipped by everything after, as an unreadable file */
            failed = 1;
            continue;
        }
        if (widen_page_table(bc->capture, o.table_pages) != 0) {
            fprintf(stderr, "pageweaver bench: %s: no memory to widen the page table\n", files[f]);
            pw_capture_free(bc->capture);
            bc->capture = NULL;
            failed = 1;
            continue;
        }
        const pw_problem_t *p = &bc->capture->problem;
        bc->fast_path = p->q_heads_per_kv == 16 && p->head_dim == 128 && p->page_size == 128 && p->topk == 16;
        { /* the default plan's choice for any shape a plan takes (G 16 / 8 / 4, K <= 64):
           * host arithmetic, no GPU needed; none when pw_plan_create refuses the shape */
            pw_plan_t *plan = NULL;
            bc->default_info = (pw_plan_info_t)PW_PLAN_INFO_INIT;
            pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT; /* with --vt-prepass / --fp8x2-tile, as the Union4 arms */
            cfg.flags = o.vt_flags;
            if (o.union4_window) cfg.window = o.union4_window;
            cfg.max_query_rows = bc->max_query_rows;
            if (pw_plan_create(p, &cfg, &plan) == PW_SUCCESS &&
                pw_plan_info(plan, bench_default_precision(), &bc->default_info) == PW_SUCCESS)
                bc->default_known = 1;
            else
                snprintf(bc->default_note, sizeof bc->default_note, "%s", pw_last_error());
            pw_plan_destroy(plan);
            plan = NULL;
            /* T_online's and T_fixed's window; a second plan only where the default picked another */
            const int32_t measured_window = o.union4_window ? o.union4_window : 128;
            bc->measured_window_info = bc->default_info;
            if (bc->default_known && bc->default_info.window != measured_window) {
                cfg.window = measured_window;
                if (pw_plan_create(p, &cfg, &plan) != PW_SUCCESS ||
                    pw_plan_info(plan, bench_default_precision(), &bc->measured_window_info) != PW_SUCCESS)
                    bc->measured_window_info = bc->default_info; /* the same shape: not expected */
                pw_plan_destroy(plan);
            }
        }
        if (!o.quiet) fprintf(stderr, "[bench] %s: CPU reference groupings\n", bc->path);
        if (cpu_part(bc, &o) != 0) {
            failed = 1;
            continue;
        }
        check_state_t cs;
        if (!o.quiet && o.check_rows > 0) fprintf(stderr, "[bench] %s: reference check\n", bc->path);
        if (reference_check(bc, &o, &cs) != 0) failed = 1;
        if (gpu && !bc->fast_path) {
            snprintf(bc->gpu_note, sizeof bc->gpu_note,
                     "shape G=%d D=%d P=%d K=%d: this bench's arms run G=16 P=128 K=16 only (G=8 / 4, P=64 and K other "
                     "than 16: bench/shapes.py)",
                     p->q_heads_per_kv, p->head_dim, p->page_size, p->topk);
        } else if (gpu) {
            if (bench_gpu_capture(bc, &o) != 0) failed = 1;
            const size_t elems = (size_t)p->num_tokens * p->num_kv_heads * 16 * 128;
            if (bc->gpu_output && cs.rows) {
                bc->gpu_checked = 1;
                bc->nrms_gpu_vs_exact = nrms_rows(p, cs.rows, cs.exact, NULL, bc->gpu_output, &bc->gpu_nan);
            }
            if (bc->gpu_output_x2 && cs.rows) {
                bc->gpu_x2_checked = 1;
                bc->nrms_gpu_x2_vs_exact =
                    nrms_rows(p, cs.rows, cs.exact, NULL, bc->gpu_output_x2, &bc->gpu_x2_nan);
            }
            /* vs the emulating references: their float outputs as the reference (the exact
             * one is overwritten, so after every comparison with it) */
            if (bc->gpu_checked) {
                for (size_t e = 0; e < elems; e++) cs.exact[e] = cs.emulate[e];
                bc->nrms_gpu_vs_emulate = nrms_rows(p, cs.rows, cs.exact, NULL, bc->gpu_output, NULL);
            }
            if (bc->gpu_x2_checked) {
                for (size_t e = 0; e < elems; e++) cs.exact[e] = cs.emulate_x2[e];
                bc->nrms_gpu_x2_vs_emulate = nrms_rows(p, cs.rows, cs.exact, NULL, bc->gpu_output_x2, NULL);
            }
        }
        check_free(&cs);
        free(bc->gpu_output);
        bc->gpu_output = NULL;
        free(bc->gpu_output_x2);
        bc->gpu_output_x2 = NULL;
        print_capture(bc, &rates, gpu);
        fflush(stdout);
    }
    if (json_out && write_json(json_out, json_path, &o, &rates, gpu, reason, bcs, nfiles) != 0) failed = 1;
    for (int f = 0; f < nfiles; f++) {
        for (int i = 0; i < NUM_PERMS; i++) free(bcs[f].perms[i]);
        free(bcs[f].check_row_ids);
        pw_capture_free(bcs[f].capture);
    }
    free(bcs);
    return failed ? PW_CLI_BAD_INPUT : PW_CLI_OK;
}
