/* bench_kernels.c — the attention kernels alone (Union8, Union4, per-query), for kernel
 * development (llm.c dev/ style). The full call and the paper's measurements are
 * `pageweaver bench`; this harness isolates pw_union_attention.
 *
 *   bench_kernels [--reps N] [--impls LIST] CAPTURE...   (LIST: slot keys, see `slots` below:
 *       0, 2, 6, 8, 9, a (= 10) the dev impls, x / y / b FP8X2 on impls 6 / 9 / 10, t impl 12
 *       (s: impl 12 in FP8, its second term 0: FP8's bytes, compared bitwise with slot 0)
 *       (stacked FP8X2, Union4 only: NRMS against slot x, which must be in LIST), d / e impl 13
 *       (the dense G = 8 tile, FP8 / FP8X2: G = 8 captures only, e.g. --impls 6dxe), f / g
 *       impl 14 (the dense G = 4 tile: G = 4 captures only, e.g. --impls 6fxg))
 *       (default capture: .data/workloads/sel_A_hot.safetensors; LIST e.g. 0,3, default all)
 *   PW_KBENCH_SCHEDULE=lpt: the Union4 lean (9, 10; at G != 16 also 6, which runs 9 there)
 *       and dense (13) kernels' CTAs in the full call's longest-first order
 *       (pw_dev_set_schedule; lists built here from the host metadata, exact order inside
 *       each size class); unset: block order, as `pw_union_attention` runs them.
 *
 * Per capture: metadata for identity and guarded-W128 groupings from the CPU reference
 * (outside the timed region), Q/K/V generated (seed 0), then each kernel captured in a
 * CUDA graph and replayed: 5 warm-up replays, N timed replays (default 50) with CUDA
 * events around each, rotating 3 copies of Q and O so L2 holds only what it would in a
 * serving loop (the KV cache is shared by the copies, as in one layer's call); median,
 * min and p90 in microseconds. Useful FLOP = visible (query, token) pairs x G x 128 x 4;
 * executed FLOP = CTA-page steps x 64 x 128 x 128 x 4 (QK + PV), where a step is a page
 * of the CTA's list with at least one member (Union8/Union4: C_4; per-query: sum |S_i|).
 *
 * Implementations (src/cuda/attention_dev.h, pw_union_attention_dev): every kernel runs
 * impl 0 (v4) and the impls that change it: 2 (B, P from registers), 6 (B + V transposed by
 * the warps without a member; the library's Union8), 8 (6 before the cache-poison fix: V past
 * the members' last visible token not zeroed, the "before" of that fix's A/B); Union4 and
 * per-query also 9 (the lean kernel, three CTAs per SM; the library's) and 10 (lean on the
 * V^T pre-pass: the full call's Union4). Impls 1, 3, 4, 5, 7 and the warp-specialised
 * 8-query kernel measured slower and were removed (bench/NOTES.md, v5-v7). Before
 * timing, each
 * impl runs once untimed with LSE on, and its O and LSE bytes are compared with impl 0's
 * on the same inputs: a difference prints a "!!! BITWISE MISMATCH" line and the program
 * exits with status 2 after the table. The timed replays run without LSE, as before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"

#include "../src/cuda/attention_dev.h" /* internal: kernel implementations for the dev table */

#include "bench_check.h" /* CK, PK */

enum { COPIES = 3 };

static void *to_dev(const void *h, size_t n)
{
    void *d;
    CK(cudaMalloc(&d, n ? n : 16));
    if (n) CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The schedule kind of a dev impl at G (pw_dev_set_schedule): 1 dense G = 8 groups, 2 dense
 * G = 4 pairs, 0 the lean kernels' halves; the stacked tile (12) reads the dense tile's kind
 * at G = 8 and 4 (union_attention). */
static int sched_kind(int impl, int g)
{
    if (impl == 12) return g == 8 ? 1 : g == 4 ? 2 : 0;
    return impl == 13 ? 1 : impl == 14 ? 2 : 0;
}

typedef struct meta_set {
    pw_union_meta_t dev;
    int32_t *perm_dev;
    /* PW_KBENCH_SCHEDULE=lpt: longest-first CTA orders (pw_dev_set_schedule: 17 class
     * counts, then the class lists) of the lean kernels' halves [0], of the dense G = 8
     * tile's groups [1] and of the dense G = 4 tile's pairs [2]; NULL otherwise. */
    uint32_t *lpt_count_dev[3];
    int32_t *lpt_list_dev[3];
    int64_t lpt_stride[3];
    pw_union_stats_t stats;
    int64_t tile_steps; /* dev impl 12: (CTA page, 2-slot tile) pairs with a member */
    int64_t pair_visits; /* dev impl 14: pages of the merged unions of leader / partner group pairs */
} meta_set_t;

/* Dev impl 14's pairs (attention_dense.cuh, dense4_work): group gi of KV head h leads a pair
 * when its index in its window (in its request for W = 0) is even; its partner is the next
 * group when that continues it (same request and window, 8 slots on). Returns the partner's
 * index, -1 for a leader without one, -2 for a group that is not a leader. */
static int64_t pair_partner(const pw_capture_t *c, const pw_grouping_t *g, const pw_union_meta_t *m, int64_t h,
                            int64_t gi)
{
    const int64_t mg = m->max_groups;
    const pw_group_desc_t *A = &m->groups[h * mg + gi];
    const int32_t rel = A->slot_begin - c->cu_seqlens_q[A->request];
    if (((g->window > 0 ? rel % g->window : rel) / 8) % 2) return -2;
    if (gi + 1 >= m->num_groups[h]) return -1;
    const pw_group_desc_t *B = &m->groups[h * mg + gi + 1];
    const int32_t rel_b = B->slot_begin - c->cu_seqlens_q[A->request];
    const int same_window = g->window <= 0 || rel_b / g->window == rel / g->window;
    return B->request == A->request && B->slot_begin == A->slot_begin + 8 && same_window ? gi + 1 : -1;
}

static void make_meta(const pw_capture_t *c, const pw_grouping_t *g, meta_set_t *out)
{
    const pw_problem_t *p = &c->problem;
    const pw_requests_t rq = pw_capture_requests(c);
    const int64_t hkv = p->num_kv_heads, mg = pw_max_groups(p, g), cap = 8 * p->topk;
    int32_t *perm = malloc(hkv * p->num_tokens * 4);
    PK(pw_ref_regroup(p, c->topk_ids, &rq, g, perm));
    pw_union_meta_t m = {mg, (int32_t)cap, malloc(hkv * 4), malloc(hkv * mg * sizeof(pw_group_desc_t)),
                         malloc(hkv * mg * cap * 4), malloc(hkv * mg * cap)};
    PK(pw_ref_union_prepare(p, c->topk_ids, &rq, g, perm, &m));
    PK(pw_union_stats(p, &m, &out->stats, NULL));
    out->tile_steps = 0;
    /* Dev impl 14's page visits: each pair's merged union (pair_partner). */
    out->pair_visits = 0;
    for (int64_t h = 0; h < hkv; h++)
        for (int64_t gi = 0; gi < m.num_groups[h]; gi++) {
            const int64_t partner = pair_partner(c, g, &m, h, gi);
            if (partner == -2) continue;
            const pw_group_desc_t *A = &m.groups[h * mg + gi];
            int64_t merged = A->union_size;
            if (partner >= 0) {
                const pw_group_desc_t *B = &m.groups[h * mg + partner];
                const int32_t *pa = m.union_pages + (h * mg + gi) * cap, *pb = m.union_pages + (h * mg + partner) * cap;
                int x = 0, y = 0;
                merged = 0;
                while (x < A->union_size || y < B->union_size) {
                    if (y >= B->union_size || (x < A->union_size && pa[x] < pb[y])) x++;
                    else if (x >= A->union_size || pb[y] < pa[x]) y++;
                    else x++, y++;
                    merged++;
                }
            }
            out->pair_visits += merged;
        }
    for (int64_t h = 0; h < hkv; h++)
        for (int64_t gi = 0; gi < m.num_groups[h]; gi++) {
            const int64_t base = (h * mg + gi) * cap;
            for (int e = 0; e < m.groups[h * mg + gi].union_size; e++)
                for (int t = 0; t < 4; t++) out->tile_steps += (m.member_masks[base + e] >> (2 * t)) & 3u ? 1 : 0;
        }
    const char *sched = getenv("PW_KBENCH_SCHEDULE");
    for (int dense = 0; dense < 3; dense++) {
        out->lpt_count_dev[dense] = NULL;
        out->lpt_list_dev[dense] = NULL;
        out->lpt_stride[dense] = 0;
        if (!sched || strcmp(sched, "lpt") != 0) continue;
        /* The full call's layout (union preparation's sched_append): class min(pages / 8,
         * 16); here each class in descending size, ties in block order. */
        enum { CLASSES = 17 };
        const int64_t n = (dense ? 1 : 2) * hkv * mg;
        int32_t *list = malloc(CLASSES * n * 4), *size = malloc(n * 4);
        uint32_t count[CLASSES] = {0};
        for (int64_t b = 0; b < n; b++) {
            const int64_t item = dense ? b : b / 2, h = item / mg, gi = item % mg;
            size[b] = -1; /* no work: not listed */
            if (gi < m.num_groups[h]) {
                const pw_group_desc_t *d = &m.groups[h * mg + gi];
                size[b] = dense ? d->union_size : (d->num_members > 4 * (b % 2) ? d->half_union_size[b % 2] : -1);
            }
            if (dense == 2 && gi < m.num_groups[h]) {
                /* Pairs: a leader lists the sum of its and its partner's union sizes, as union
                 * preparation does; a partner is not listed. */
                const int64_t partner = pair_partner(c, g, &m, h, gi);
                if (partner == -2) size[b] = -1;
                else if (partner >= 0) size[b] += m.groups[h * mg + partner].union_size;
            }
        }
        for (int32_t s = 2 * (int32_t)cap; s >= 0; s--)
            for (int64_t b = 0; b < n; b++)
                if (size[b] == s) {
                    const int cls = s / 8 < CLASSES - 1 ? s / 8 : CLASSES - 1;
                    list[cls * n + count[cls]++] = (int32_t)b;
                }
        out->lpt_count_dev[dense] = to_dev(count, sizeof count);
        out->lpt_list_dev[dense] = to_dev(list, CLASSES * n * 4);
        out->lpt_stride[dense] = n;
        free(list);
        free(size);
    }
    out->dev.max_groups = mg;
    out->dev.union_capacity = (int32_t)cap;
    out->dev.num_groups = to_dev(m.num_groups, hkv * 4);
    out->dev.groups = to_dev(m.groups, hkv * mg * sizeof(pw_group_desc_t));
    out->dev.union_pages = to_dev(m.union_pages, hkv * mg * cap * 4);
    out->dev.member_masks = to_dev(m.member_masks, hkv * mg * cap);
    out->perm_dev = to_dev(perm, hkv * p->num_tokens * 4);
    free(perm);
    free(m.num_groups);
    free(m.groups);
    free(m.union_pages);
    free(m.member_masks);
}

/* Visible (query, token) pairs summed over KV heads: the useful work. */
static double visible_pairs(const pw_capture_t *c)
{
    const pw_problem_t *p = &c->problem;
    double total = 0;
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int r = 0; r < p->num_requests; r++)
            for (int32_t n = c->cu_seqlens_q[r]; n < c->cu_seqlens_q[r + 1]; n++) {
                const int64_t cpos = c->prefix_lens[r] + (n - c->cu_seqlens_q[r]);
                const int64_t lim = cpos < c->kv_lens[r] - 1 ? cpos : c->kv_lens[r] - 1;
                const int32_t *row = c->topk_ids + ((int64_t)h * p->num_tokens + n) * p->topk;
                for (int k = 0; k < p->topk; k++) {
                    const int32_t id = row[k];
                    if (id < 0 || id > lim / p->page_size) continue;
                    int dup = 0;
                    for (int j = 0; j < k; j++) dup |= row[j] == id;
                    if (dup) continue;
                    const int64_t first = (int64_t)id * p->page_size;
                    const int64_t last = first + p->page_size - 1 < lim ? first + p->page_size - 1 : lim;
                    total += (double)(last - first + 1);
                }
            }
    return total;
}

/* The timed slots: a dev impl (src/cuda/attention_dev.h) and a precision. Slot 0 is the
 * reference of the bitwise check; slots with compare = 0 have their own arithmetic (FP8X2:
 * checked by test_attention_gpu against each other) or write nothing (the page stream
 * alone), so they are timed only. --impls picks slots by their key character. */
typedef struct slot {
    char key;
    int impl, x2, compare, no_union8;
    const char *name;
} slot_t;
/* FP8X2 slots with compare = 1 are checked against slot 'x' (impl 6 in FP8X2) instead. */
static const slot_t slots[] = {
    {'0', 0, 0, 1, 0, "v4"},      {'2', 2, 0, 1, 0, "B"},       {'6', 6, 0, 1, 0, "B+idleVt"},
    {'8', 8, 0, 1, 0, "pre-fix"}, {'x', 6, 1, 0, 0, "X2"},      {'9', 9, 0, 1, 1, "lean"},
    {'y', 9, 1, 1, 1, "leanX2"},  {'a', 10, 0, 1, 1, "preVt"},  {'b', 10, 1, 2, 1, "preVtX2"},
    {'t', 12, 1, 2, 1, "stack1X2"}, {'d', 13, 0, 1, 1, "dense8"}, {'e', 13, 1, 2, 1, "dense8X2"},
    {'f', 14, 0, 1, 1, "dense4"}, {'g', 14, 1, 2, 1, "dense4X2"},
    {'s', 12, 0, 1, 1, "stack1FP8"}, /* FP8, the second term 0 */
};
/* Top-K above 16 (K 32 / 64): only impls 6 (which runs 9 there), 9, 10 and 13 take it (the
 * others and the Union8 arms are skipped), and slot '6' is the bitwise reference.
 * Inputs with G != 16 Q heads per KV head: impls 0, 2 and 8 and the Union8 arms have no
 * path (PW_ERROR_UNSUPPORTED) and are skipped, impl 12 runs G = 8 (one 4-slot tile a half); slot '6' (the padded tile there) is the bitwise
 * reference instead of slot 0. Slots 'd' / 'e' (dev impl 13, the dense G = 8 tile) run on G = 8
 * inputs and Union4 arms only; their executed FLOP count union visits (one 64-row tile of 8
 * queries per page of a group's union), not C_4. */
#define G_REFERENCE_SLOT 2 /* '6' */
/* compare = 2: an arithmetic of its own (dev impl 12 sums FP8X2's two terms outside the
 * tensor cores; impls 10, 13 and 14 in FP8X2 take P in f16 on the pre-pass's f16 V^T,
 * docs/semantics.md §4.5): NRMS of O and the largest LSE difference against slot 'x', not
 * bytes. */
/* 'a' / 'b': lean + V^T pre-pass, the dev entry allocating its own tiles (attention_dev.h). */
#define X2_REFERENCE_SLOT 4 /* 'x' */
#define NUM_SLOTS ((int)(sizeof slots / sizeof slots[0]))

/* Fills args for Q/O copy k; lse may be NULL. */
static pw_attention_args_t make_args(const pw_problem_t *p, pw_bf16_t *q, pw_bf16_t *o, float *lse, uint8_t *kc,
                                     uint8_t *vc, float *ks, float *vs, int32_t *topk, int32_t *cu, int32_t *pre,
                                     int32_t *kvl, int32_t *pt)
{
    const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv;
    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.q = q;
    args.q_stride = hq * 128;
    args.k_cache = kc;
    args.v_cache = vc;
    args.kv_stride = (int64_t)p->num_kv_heads * 128;
    args.k_scale = ks;
    args.v_scale = vs;
    args.topk_ids = topk;
    args.requests.cu_seqlens_q = cu;
    args.requests.prefix_lens = pre;
    args.requests.kv_lens = kvl;
    args.requests.page_table = pt;
    args.requests.page_table_stride = p->max_pages_per_request;
    args.o = o;
    args.o_stride = hq * 128;
    args.o_dtype = PW_DTYPE_BFLOAT16;
    args.lse = lse;
    return args;
}

static void set_precision(pw_attention_args_t *args, int slot)
{
    args->precision = slots[slot].x2 ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8;
}

/* Number of differing bytes and the first differing byte offset (-1: none). */
static size_t count_diff(const void *a, const void *b, size_t n, long long *first)
{
    const unsigned char *x = a, *y = b;
    size_t count = 0;
    *first = -1;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            if (*first < 0) *first = (long long)i;
            count++;
        }
    return count;
}

int main(int argc, char **argv)
{
    int reps = 50;
    int want_impl[NUM_SLOTS];
    for (int k = 0; k < NUM_SLOTS; k++) want_impl[k] = 1;
    const char *files[32];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--impls") == 0 && i + 1 < argc) {
            const char *list = argv[++i];
            for (int k = 0; k < NUM_SLOTS; k++) want_impl[k] = strchr(list, slots[k].key) != NULL;
            want_impl[0] = 1; /* the reference of the bitwise check */
        } else if (nfiles < 32) files[nfiles++] = argv[i];
    }
    if (reps < 1) reps = 1;
    if (nfiles == 0) files[nfiles++] = ".data/workloads/sel_A_hot.safetensors";
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_kernels: no CUDA device; timings need an H200\n");
        return 0;
    }
    int mismatches = 0;
    printf("%-34s %-10s %-9s %-4s %9s %9s %9s %10s %10s %8s %6s %s\n", "capture", "kernel", "grouping", "impl",
           "median_us", "min_us", "p90_us", "useful_TF", "exec_TF", "visits", "vs_v4", "bytes_vs_v4");
    for (int f = 0; f < nfiles; f++) {
        pw_capture_t *c = NULL;
        PK(pw_capture_read(files[f], PW_CAPTURE_LOAD_QKV | PW_CAPTURE_GENERATE_QKV, &c));
        const pw_problem_t *p = &c->problem;
        const int64_t n = p->num_tokens, hkv = p->num_kv_heads, hq = hkv * p->q_heads_per_kv;
        const size_t q_bytes = (size_t)(n * hq * 128) * 2, lse_bytes = (size_t)(n * hq) * 4;
        const size_t cache_bytes = (size_t)p->num_cache_pages * 128 * hkv * 128;
        pw_bf16_t *q[COPIES], *o[COPIES];
        for (int k = 0; k < COPIES; k++) {
            q[k] = to_dev(c->q, q_bytes);
            CK(cudaMalloc((void **)&o[k], q_bytes));
        }
        float *lse_dev;
        CK(cudaMalloc((void **)&lse_dev, lse_bytes ? lse_bytes : 16));
        uint8_t *o_ref = malloc(q_bytes ? q_bytes : 1), *o_cur = malloc(q_bytes ? q_bytes : 1);
        uint8_t *l_ref = malloc(lse_bytes ? lse_bytes : 1), *l_cur = malloc(lse_bytes ? lse_bytes : 1);
        uint8_t *o_ref_x2 = malloc(q_bytes ? q_bytes : 1), *l_ref_x2 = malloc(lse_bytes ? lse_bytes : 1);
        uint8_t *kc = to_dev(c->k_cache, cache_bytes), *vc = to_dev(c->v_cache, cache_bytes);
        float *ks = to_dev(&c->k_scale, 4), *vs = to_dev(&c->v_scale, 4);
        int32_t *topk = to_dev(c->topk_ids, hkv * n * p->topk * 4);
        int32_t *cu = to_dev(c->cu_seqlens_q, (p->num_requests + 1) * 4);
        int32_t *pre = to_dev(c->prefix_lens, p->num_requests * 4);
        int32_t *kvl = to_dev(c->kv_lens, p->num_requests * 4);
        int32_t *pt = to_dev(c->page_table, (size_t)p->num_requests * p->max_pages_per_request * 4);
        const int g_heads = p->q_heads_per_kv;
        const int ref_slot = g_heads == 16 && p->topk <= 16 ? 0 : G_REFERENCE_SLOT;
        const double useful = visible_pairs(c) * g_heads * 128 * 4;
        pw_grouping_t gi = PW_GROUPING_INIT, gw = PW_GROUPING_INIT;
        gi.mode = PW_REGROUP_IDENTITY;
        gi.window = 0;
        meta_set_t mi, mw;
        make_meta(c, &gi, &mi);
        make_meta(c, &gw, &mw);
        /* Union8 runs every slot, the others the slots that are not Union8-only. */
        struct arm { pw_kernel_t k; meta_set_t *m; pw_grouping_t *g; const char *kn, *gn; double steps; } arms[] = {
            {PW_KERNEL_UNION8, &mi, &gi, "union8", "identity", (double)mi.stats.c4},
            {PW_KERNEL_UNION8, &mw, &gw, "union8", "W128", (double)mw.stats.c4},
            {PW_KERNEL_UNION4, &mi, &gi, "union4", "identity", (double)mi.stats.c4},
            {PW_KERNEL_UNION4, &mw, &gw, "union4", "W128", (double)mw.stats.c4},
            {PW_KERNEL_PER_QUERY, &mi, &gi, "per-query", "-", (double)mi.stats.selections},
        };
        if (mi.lpt_count_dev[0])
            printf("%s: lean (impls 9, 10) and dense (13, 14: pairs) Union4 CTAs in longest-first order\n", files[f]);
        printf("%s: C_4 identity %lld, W128 %lld; 2-slot tile steps (dev impl 12) identity %lld (%.3f x 2 C_4), "
               "W128 %lld (%.3f x 2 C_4)\n",
               files[f], (long long)mi.stats.c4, (long long)mw.stats.c4, (long long)mi.tile_steps,
               mi.tile_steps / (2.0 * mi.stats.c4), (long long)mw.tile_steps, mw.tile_steps / (2.0 * mw.stats.c4));
        cudaStream_t stream;
        CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        for (size_t a = 0; a < sizeof arms / sizeof arms[0]; a++) {
            double med_of[NUM_SLOTS] = {0};
            int same_of[NUM_SLOTS];
            for (int k = 0; k < NUM_SLOTS; k++) same_of[k] = 1;
            for (int impl = 0; impl < NUM_SLOTS; impl++) {
                if ((slots[impl].no_union8 && arms[a].k == PW_KERNEL_UNION8) || !want_impl[impl] ||
                    (slots[impl].impl >= 11 && arms[a].k != PW_KERNEL_UNION4)) /* stacked, dense: Union4 only */
                    continue;
                const int si = slots[impl].impl;
                if (g_heads != 16 && (si == 0 || si == 2 || si == 8 || arms[a].k == PW_KERNEL_UNION8)) continue;
                /* stacked: G = 16 (2-slot), 8 (4-slot), 4 (8-slot) tiles; K = 16 (below) */
                /* K > 16: the lean kernels (slot '6' runs 9 there) and the dense G = 8 tile only. */
                if (p->topk > 16 && ((si != 6 && si != 9 && si != 10 && si != 13) || arms[a].k == PW_KERNEL_UNION8))
                    continue;
                if (si == 13 && g_heads != 8) continue;
                if (si == 14 && g_heads != 4) continue;
                /* Untimed check run with LSE on: O and LSE bytes against impl 0's. */
                {
                    pw_attention_args_t args = make_args(p, q[0], o[0], lse_dev, kc, vc, ks, vs, topk, cu, pre, kvl, pt);
                    set_precision(&args, impl);
                    CK(cudaMemsetAsync(o[0], 0xff, q_bytes, stream));
                    CK(cudaMemsetAsync(lse_dev, 0xff, lse_bytes, stream));
                    pw_dev_set_schedule(arms[a].k == PW_KERNEL_UNION4 ? arms[a].m->lpt_count_dev[sched_kind(si, g_heads)] : NULL,
                                        arms[a].m->lpt_list_dev[sched_kind(si, g_heads)], arms[a].m->lpt_stride[sched_kind(si, g_heads)],
                                        sched_kind(si, g_heads));
                    PK(pw_union_attention_dev(slots[impl].impl, p, &args, arms[a].g, arms[a].m->perm_dev, &arms[a].m->dev, arms[a].k,
                                              stream));
                    pw_dev_set_schedule(NULL, NULL, 0, sched_kind(si, g_heads));
                    CK(cudaStreamSynchronize(stream));
                    CK(cudaGetLastError());
                    const int x2_ref = impl == X2_REFERENCE_SLOT;
                    CK(cudaMemcpy(impl == ref_slot ? o_ref : x2_ref ? o_ref_x2 : o_cur, o[0], q_bytes, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(impl == ref_slot ? l_ref : x2_ref ? l_ref_x2 : l_cur, lse_dev, lse_bytes,
                                  cudaMemcpyDeviceToHost));
                    if (slots[impl].compare == 2 && want_impl[X2_REFERENCE_SLOT]) {
                        const pw_bf16_t *ref = (const pw_bf16_t *)o_ref_x2, *cur = (const pw_bf16_t *)o_cur;
                        const float *lr = (const float *)l_ref_x2, *lc = (const float *)l_cur;
                        double num = 0.0, den = 0.0, dl = 0.0;
                        for (size_t e = 0; e < q_bytes / 2; e++) {
                            const float rf = pw_bf16_to_float(ref[e]), cf = pw_bf16_to_float(cur[e]);
                            num += ((double)cf - rf) * ((double)cf - rf);
                            den += (double)rf * rf;
                        }
                        for (size_t e = 0; e < lse_bytes / 4; e++) {
                            if (lr[e] == lc[e]) continue; /* also both -inf (empty rows) */
                            const double diff = fabs((double)lc[e] - lr[e]);
                            dl = isnan(diff) || diff > dl ? (isnan(diff) ? INFINITY : diff) : dl;
                        }
                        const double nrms = den > 0.0 ? sqrt(num / den) : 0.0;
                        printf("    %s %s %s %s: O NRMS vs impl 6 FP8X2 %.3e, max |LSE diff| %.3e\n", files[f], arms[a].kn,
                               arms[a].gn, slots[impl].name, nrms, dl);
                        /* the two FP8X2 forms differ by rounding only (LSE bound: test_attention_gpu's) */
                        same_of[impl] = nrms < 5e-3 && dl <= 1e-2;
                        if (!same_of[impl]) mismatches++;
                    } else if (impl != ref_slot && slots[impl].compare == 1 &&
                               (slots[impl].x2 ? want_impl[X2_REFERENCE_SLOT] : want_impl[ref_slot])) {
                        long long fo = -1, fl = -1;
                        const int x2 = slots[impl].x2;
                        const size_t dO = count_diff(x2 ? o_ref_x2 : o_ref, o_cur, q_bytes, &fo);
                        const size_t dL = count_diff(x2 ? l_ref_x2 : l_ref, l_cur, lse_bytes, &fl);
                        same_of[impl] = dO == 0 && dL == 0;
                        if (!same_of[impl]) {
                            mismatches++;
                            printf("!!! BITWISE MISMATCH: %s %s %s impl %d (%s) vs %s: O %zu of %zu bytes differ "
                                   "(first at byte %lld), LSE %zu of %zu bytes differ (first at byte %lld)\n",
                                   files[f], arms[a].kn, arms[a].gn, slots[impl].impl, slots[impl].name,
                                   x2 ? "impl 6 FP8X2" : ref_slot ? "impl 6" : "impl 0", dO, q_bytes, fo, dL,
                                   lse_bytes, fl);
                        }
                    }
                }
                cudaGraphExec_t exec[COPIES];
                for (int k = 0; k < COPIES; k++) {
                    pw_attention_args_t args = make_args(p, q[k], o[k], NULL, kc, vc, ks, vs, topk, cu, pre, kvl, pt);
                    set_precision(&args, impl);
                    cudaGraph_t graph;
                    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
                    pw_dev_set_schedule(arms[a].k == PW_KERNEL_UNION4 ? arms[a].m->lpt_count_dev[sched_kind(si, g_heads)] : NULL,
                                        arms[a].m->lpt_list_dev[sched_kind(si, g_heads)], arms[a].m->lpt_stride[sched_kind(si, g_heads)],
                                        sched_kind(si, g_heads));
                    PK(pw_union_attention_dev(slots[impl].impl, p, &args, arms[a].g, arms[a].m->perm_dev, &arms[a].m->dev,
                                              arms[a].k, stream));
                    pw_dev_set_schedule(NULL, NULL, 0, sched_kind(si, g_heads));
                    CK(cudaStreamEndCapture(stream, &graph));
                    CK(cudaGraphInstantiate(&exec[k], graph, 0));
                    CK(cudaGraphDestroy(graph));
                }
                for (int w = 0; w < 5; w++) CK(cudaGraphLaunch(exec[w % COPIES], stream));
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                float *t = malloc(reps * sizeof(float));
                for (int r = 0; r < reps; r++) {
                    CK(cudaEventRecord(e0, stream));
                    CK(cudaGraphLaunch(exec[r % COPIES], stream));
                    CK(cudaEventRecord(e1, stream));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[r], e0, e1));
                }
                CK(cudaGetLastError());
                qsort(t, reps, sizeof(float), cmp_float);
                const double med = t[reps / 2] * 1e3, mn = t[0] * 1e3, p90 = t[(int)(reps * 0.9)] * 1e3;
                const double steps = si == 13 || (si == 12 && g_heads == 4) ? (double)arms[a].m->stats.union_visits
                                     : si == 14                              ? (double)arms[a].m->pair_visits
                                                                             : arms[a].steps;
                const double exec_flop = steps * 64.0 * 128 * 128 * 4;
                med_of[impl] = med;
                printf("%-34s %-10s %-9s %-4s %9.1f %9.1f %9.1f %10.1f %10.1f %8lld %6.3f %s\n", files[f], arms[a].kn,
                       arms[a].gn, slots[impl].name, med, mn, p90, useful / (med * 1e-6) / 1e12,
                       exec_flop / (med * 1e-6) / 1e12, (long long)arms[a].m->stats.union_visits,
                       med_of[ref_slot] > 0 ? med / med_of[ref_slot] : 1.0,
                       impl == ref_slot ? "reference" : impl == X2_REFERENCE_SLOT ? "FP8X2 reference"
                                 : slots[impl].x2 && !want_impl[X2_REFERENCE_SLOT] ? "FP8X2 (not checked: no slot x)"
                                 : !slots[impl].x2 && !want_impl[ref_slot] ? "(not checked: no reference slot)"
                                 : !slots[impl].compare ? "(no output)"
                                 : slots[impl].compare == 2 ? (same_of[impl] ? "close (NRMS)" : "FAR (NRMS)")
                                 : same_of[impl] ? "identical" : "DIFFERENT");
                fflush(stdout);
                free(t);
                for (int k = 0; k < COPIES; k++) CK(cudaGraphExecDestroy(exec[k]));
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
            }
            /* The arm's impls side by side. */
            printf("  -> %s %s:", arms[a].kn, arms[a].gn);
            for (int impl = 0; impl < NUM_SLOTS; impl++)
                if (med_of[impl] > 0)
                    printf("  %s %.1f us (%.3fx)%s", slots[impl].name, med_of[impl], med_of[impl] / med_of[ref_slot],
                           same_of[impl] ? "" : " MISMATCH");
            printf("\n");
            fflush(stdout);
        }
        CK(cudaStreamDestroy(stream));
        for (int k = 0; k < COPIES; k++) {
            cudaFree(q[k]);
            cudaFree(o[k]);
        }
        cudaFree(lse_dev);
        free(o_ref); free(o_cur); free(l_ref); free(l_cur); free(o_ref_x2); free(l_ref_x2);
        cudaFree(kc); cudaFree(vc); cudaFree(ks); cudaFree(vs); cudaFree(topk); cudaFree(cu); cudaFree(pre);
        cudaFree(kvl); cudaFree(pt);
        for (int d = 0; d < 2; d++) {
            cudaFree(mi.lpt_count_dev[d]);
            cudaFree(mi.lpt_list_dev[d]);
            cudaFree(mw.lpt_count_dev[d]);
            cudaFree(mw.lpt_list_dev[d]);
        }
        pw_capture_free(c);
    }
    if (mismatches) {
        printf("!!! BITWISE MISMATCH: %d impl/arm pairs differ from impl 0 (see the lines above)\n", mismatches);
        return 2;
    }
    printf("bitwise check: every impl's O and LSE bytes equal impl 0's on every arm\n");
    return 0;
}
