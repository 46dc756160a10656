/* bench_regroup.c — timing of the GPU regroup (pw_regroup) and union preparation
 * (pw_union_prepare) kernels alone, and the union visits they lead to (docs/semantics.md §3, §4.1, §5).
 *
 *   bench_regroup [--replays N] [--hkv LIST] CAPTURE...
 *       default captures: .data/workloads/sel_A_hot.safetensors and every .safetensors
 *       file in captures/; default --hkv 1,4; default --replays 50.
 *
 * Per capture and KV-head count H (the capture's heads are tiled when it has fewer: 4 heads
 * of a 1-head workload are 4 copies of it, which costs the kernels the same as 4 distinct
 * heads), each configuration is captured in a CUDA graph of C calls, call c reading copy
 * c of the Top-K ids and writing copy c of the outputs, with C copies so that they span
 * >= 96 MiB (more than the 50 MiB L2: every call starts cold, as after a selector that
 * wrote other data since). 3 warm-up replays, then N timed replays, CUDA events around
 * each replay; time per call = replay time / C (so it includes the in-graph gap between
 * kernel nodes, printed once as the per-call time of a near-empty kernel node). Also
 * printed: the same with one input copy (L2-warm ids).
 * Statistics: median, p10, p90 of the per-call time over the replays.
 *
 * Union visits of the identity grouping and of greedy/guarded W64/W128 come from the GPU
 * metadata (pw_union_stats), each GPU permutation is checked against pw_ref_regroup, and
 * the paper's figures (H200, one KV head, 15,272 queries: W64 19.3-19.5 us, W128
 * 34.6-34.9 us; union visits 102,429 -> 89,426 = -12.70% at W128) are printed alongside.
 * Issue 13: "fused" rows time pw_regroup_union_prepare_dev_variant (one launch; one launch
 * with the hash path forced) next to "regroup+prepare" (the two launches it replaces), and
 * a "fused W.." line per capture says whether its perm and metadata bytes equal the two
 * launches'.
 * Last, "dev" lines time the regroup kernel variants of src/cuda/regroup_dev.h on the
 * first capture (one KV head, greedy): kernel v3 (the library's; shuffle argmin; prep
 * only), v3 with its hash path forced (full and prep only) and v3 with __match_any_sync
 * mask ORs, each full
 * variant's permutation checked against the reference; (full - prep only) / W is the
 * cost of one greedy step.
 * Results and the reasoning behind the kernels: bench/NOTES.md. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"

#ifdef PW_HAVE_CUDA
#include <cuda_runtime.h>

#include "../src/cuda/regroup_dev.h" /* internal: kernel variants for the dev table */
#include "../src/pw_internal.h"         /* internal: pw_regroup_dual */

#include "bench_check.h" /* CK, PK */

enum { MAX_COPIES = 64, MAX_FILES = 64 };
static const size_t ROTATE_BYTES = (size_t)96 << 20;

/* One copy of the inputs and outputs of a call. */
typedef struct copy {
    int32_t *ids;  /* [H, N, K] */
    int32_t *perm; /* [H, N] */
    int32_t *perm_alt; /* [H, N]: DUAL's second permutation */
    pw_union_meta_t meta;
} copy_t;

typedef struct bench_problem {
    pw_problem_t problem;
    pw_requests_t requests; /* device */
    int32_t *host_ids;      /* [H, N, K] */
    pw_requests_t host_requests;
    copy_t copies[MAX_COPIES];
    int num_copies;
    int variant; /* -1: pw_regroup; else pw_regroup_dev_variant(variant) */
    int fused_variant; /* FUSED: pw_regroup_union_prepare_dev_variant(fused_variant) */
    cudaStream_t stream;
} bench_problem_t;

/* BOTH: pw_regroup then pw_union_prepare (two launches); FUSED: regroup + union
 * preparation through pw_regroup_union_prepare_dev_variant (0 = one launch, the library's
 * since issue 13; 1 = one launch, hash path forced; 2 = the two launches again). */
/* DUAL: pw_regroup_dual, the full call's regroup where the FP8X2 tile is picked per call
 * (g of the grouping into perm, g = 2 into perm_alt; one launch). */
typedef enum what { REGROUP = 0, UNION_PREPARE = 1, BOTH = 2, FUSED = 3, DUAL = 4 } what_t;

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    return d;
}

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = dev_alloc(bytes);
    if (bytes) CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Calls of one configuration on copies [0, calls) (copy index c % copies_used). */
static void enqueue(bench_problem_t *b, what_t what, const pw_grouping_t *g, int calls,
                    int copies_used)
{
    for (int c = 0; c < calls; c++) {
        copy_t *cp = &b->copies[c % copies_used];
        if (what == DUAL) {
            PK(pw_regroup_dual(&b->problem, cp->ids, &b->requests, g, 2, cp->perm, cp->perm_alt,
                               (pw_stream_t)b->stream));
            continue;
        }
        if (what == FUSED) {
            PK(pw_regroup_union_prepare_dev_variant(b->fused_variant, &b->problem, cp->ids, &b->requests, g,
                                                    cp->perm, &cp->meta, (pw_stream_t)b->stream));
            continue;
        }
        if (what != UNION_PREPARE && b->variant >= 0)
            PK(pw_regroup_dev_variant(b->variant, &b->problem, cp->ids, &b->requests, g, cp->perm,
                                      (pw_stream_t)b->stream));
        else if (what != UNION_PREPARE)
            PK(pw_regroup(&b->problem, cp->ids, &b->requests, g, cp->perm, NULL, 0,
                          (pw_stream_t)b->stream));
        if (what != REGROUP)
            PK(pw_union_prepare(&b->problem, cp->ids, &b->requests, g, cp->perm, &cp->meta,
                                (pw_stream_t)b->stream));
    }
}

typedef struct timing {
    float median, p10, p90;
} timing_t;

/* Graph of C calls, replays timed with events; per-call microseconds. */
static timing_t time_config(bench_problem_t *b, what_t what, const pw_grouping_t *g,
                            int copies_used, int replays)
{
    const int calls = b->num_copies;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeGlobal));
    enqueue(b, what, g, calls, copies_used);
    CK(cudaStreamEndCapture(b->stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(exec, b->stream));
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(replays + 1));
    float *us = malloc(sizeof(float) * (size_t)replays);
    for (int i = 0; i <= replays; i++) CK(cudaEventCreate(&ev[i]));
    CK(cudaEventRecord(ev[0], b->stream));
    for (int i = 0; i < replays; i++) {
        CK(cudaGraphLaunch(exec, b->stream));
        CK(cudaEventRecord(ev[i + 1], b->stream));
    }
    CK(cudaStreamSynchronize(b->stream));
    for (int i = 0; i < replays; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
        us[i] = ms * 1000.0f / (float)calls;
    }
    qsort(us, (size_t)replays, sizeof *us, cmp_float);
    timing_t t = {us[replays / 2], us[replays / 10], us[(replays * 9) / 10]};
    for (int i = 0; i <= replays; i++) CK(cudaEventDestroy(ev[i]));
    free(ev);
    free(us);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return t;
}

/* Builds an H-head problem from a capture (heads tiled) and its device copies. */
static void setup(const pw_capture_t *c, int32_t hkv, bench_problem_t *b)
{
    memset(b, 0, sizeof *b);
    b->variant = -1;
    b->problem = c->problem;
    b->problem.num_kv_heads = hkv;
    const pw_problem_t *p = &b->problem;
    const size_t n = (size_t)p->num_tokens, k = (size_t)p->topk, r = (size_t)p->num_requests;
    const size_t head_elems = n * k;
    b->host_ids = malloc((size_t)hkv * head_elems * 4 + 4);
    for (int32_t h = 0; h < hkv; h++)
        memcpy(b->host_ids + (size_t)h * head_elems,
               c->topk_ids + (size_t)(h % c->problem.num_kv_heads) * head_elems, head_elems * 4);
    b->host_requests = pw_capture_requests(c);
    b->requests.cu_seqlens_q = dev_copy(c->cu_seqlens_q, (r + 1) * 4);
    b->requests.prefix_lens = dev_copy(c->prefix_lens, r * 4);
    b->requests.kv_lens = dev_copy(c->kv_lens, r * 4);
    const size_t ids_bytes = (size_t)hkv * head_elems * 4;
    b->num_copies = (int)((ROTATE_BYTES + ids_bytes - 1) / (ids_bytes ? ids_bytes : 1));
    if (b->num_copies < 2) b->num_copies = 2;
    if (b->num_copies > MAX_COPIES) b->num_copies = MAX_COPIES;
    pw_grouping_t g = PW_GROUPING_INIT;
    g.window = 64; /* the larger group bound of W64 / W128 */
    const int64_t mg = pw_max_groups(p, &g);
    const int32_t cap = 8 * p->topk;
    for (int i = 0; i < b->num_copies; i++) {
        copy_t *cp = &b->copies[i];
        cp->ids = dev_copy(b->host_ids, ids_bytes);
        cp->perm = dev_alloc((size_t)hkv * n * 4);
        cp->perm_alt = dev_alloc((size_t)hkv * n * 4);
        cp->meta.max_groups = mg;
        cp->meta.union_capacity = cap;
        cp->meta.num_groups = dev_alloc((size_t)hkv * 4);
        cp->meta.groups = dev_alloc((size_t)hkv * (size_t)mg * sizeof(pw_group_desc_t));
        cp->meta.union_pages = dev_alloc((size_t)hkv * (size_t)mg * (size_t)cap * 4);
        cp->meta.member_masks = dev_alloc((size_t)hkv * (size_t)mg * (size_t)cap);
    }
    CK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
}

static void teardown(bench_problem_t *b)
{
    for (int i = 0; i < b->num_copies; i++) {
        copy_t *cp = &b->copies[i];
        CK(cudaFree(cp->ids));
        CK(cudaFree(cp->perm));
        CK(cudaFree(cp->perm_alt));
        CK(cudaFree(cp->meta.num_groups));
        CK(cudaFree(cp->meta.groups));
        CK(cudaFree(cp->meta.union_pages));
        CK(cudaFree(cp->meta.member_masks));
    }
    CK(cudaFree((void *)b->requests.cu_seqlens_q));
    CK(cudaFree((void *)b->requests.prefix_lens));
    CK(cudaFree((void *)b->requests.kv_lens));
    CK(cudaStreamDestroy(b->stream));
    free(b->host_ids);
}

/* One run of a grouping on copy 0: GPU perm checked against the reference, union stats of
 * the GPU metadata. Returns 1 when the perm matches. */
static int visits_of(bench_problem_t *b, const pw_grouping_t *g, pw_union_stats_t *st)
{
    const pw_problem_t *p = &b->problem;
    const size_t n_perm = (size_t)p->num_kv_heads * (size_t)p->num_tokens;
    copy_t *cp = &b->copies[0];
    enqueue(b, BOTH, g, 1, 1);
    const int64_t mg = cp->meta.max_groups, cap = cp->meta.union_capacity, hkv = p->num_kv_heads;
    pw_union_meta_t h = {mg, (int32_t)cap, malloc((size_t)hkv * 4),
                         malloc((size_t)(hkv * mg) * sizeof(pw_group_desc_t)),
                         malloc((size_t)(hkv * mg * cap) * 4), malloc((size_t)(hkv * mg * cap))};
    int32_t *perm = malloc(n_perm * 4 + 4), *ref = malloc(n_perm * 4 + 4);
    CK(cudaMemcpyAsync(perm, cp->perm, n_perm * 4, cudaMemcpyDeviceToHost, b->stream));
    CK(cudaMemcpyAsync(h.num_groups, cp->meta.num_groups, (size_t)hkv * 4, cudaMemcpyDeviceToHost,
                       b->stream));
    CK(cudaMemcpyAsync(h.groups, cp->meta.groups, (size_t)(hkv * mg) * sizeof(pw_group_desc_t),
                       cudaMemcpyDeviceToHost, b->stream));
    CK(cudaMemcpyAsync(h.union_pages, cp->meta.union_pages, (size_t)(hkv * mg * cap) * 4,
                       cudaMemcpyDeviceToHost, b->stream));
    CK(cudaMemcpyAsync(h.member_masks, cp->meta.member_masks, (size_t)(hkv * mg * cap),
                       cudaMemcpyDeviceToHost, b->stream));
    CK(cudaStreamSynchronize(b->stream));
    PK(pw_union_stats(p, &h, st, NULL));
    PK(pw_ref_regroup(p, b->host_ids, &b->host_requests, g, ref));
    const int same = memcmp(perm, ref, n_perm * 4) == 0;
    free(perm);
    free(ref);
    free(h.num_groups);
    free(h.groups);
    free(h.union_pages);
    free(h.member_masks);
    return same;
}

/* 1 when pw_regroup_union_prepare_dev_variant 0 (one launch), 1 (hash forced) and 3
 * (streamed) give the same perm and metadata bytes as variant 2 (pw_regroup +
 * pw_union_prepare) on copy 0 (variant 2 runs first). */
static int fused_same(bench_problem_t *b, const pw_grouping_t *g)
{
    const pw_problem_t *p = &b->problem;
    copy_t *cp = &b->copies[0];
    const size_t n_perm = (size_t)p->num_kv_heads * (size_t)p->num_tokens * 4;
    const size_t rows = (size_t)p->num_kv_heads * (size_t)cp->meta.max_groups, cap = (size_t)cp->meta.union_capacity;
    const size_t sizes[5] = {n_perm, (size_t)p->num_kv_heads * 4, rows * sizeof(pw_group_desc_t), rows * cap * 4,
                             rows * cap};
    const void *src[5] = {cp->perm, cp->meta.num_groups, cp->meta.groups, cp->meta.union_pages,
                          cp->meta.member_masks};
    unsigned char *want[5], *got[5];
    int same = 1;
    static const int order[4] = {2, 1, 0, 3};
    for (int k = 0; k < 4; k++) {
        const int v = order[k];
        for (int i = 0; i < 5; i++) CK(cudaMemsetAsync((void *)src[i], 0xAB, sizes[i], b->stream));
        PK(pw_regroup_union_prepare_dev_variant(v, p, cp->ids, &b->requests, g, cp->perm, &cp->meta,
                                                (pw_stream_t)b->stream));
        for (int i = 0; i < 5; i++) {
            unsigned char *h = malloc(sizes[i] + 1);
            CK(cudaMemcpyAsync(h, src[i], sizes[i], cudaMemcpyDeviceToHost, b->stream));
            CK(cudaStreamSynchronize(b->stream));
            if (v == 2) {
                want[i] = h;
            } else {
                got[i] = h;
                same &= memcmp(want[i], got[i], sizes[i]) == 0;
                free(got[i]);
            }
        }
    }
    for (int i = 0; i < 5; i++) free(want[i]);
    return same;
}

/* Per-call time of a near-empty kernel node (pw_regroup IDENTITY on 8 rows, 1 KV head) in
 * a graph of 64 such calls: the launch gap included in every per-call figure above. */
static float graph_node_floor(int replays)
{
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = 8;
    p.max_pages_per_request = 1;
    const int32_t cu[2] = {0, 8}, zero[1] = {0}, kv[1] = {8};
    pw_requests_t rq = {dev_copy(cu, 8), dev_copy(zero, 4), dev_copy(kv, 4), NULL, 0};
    int32_t *ids = dev_alloc(8 * 16 * 4), *perm = dev_alloc(8 * 4);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_IDENTITY;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    const int calls = 64;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int c = 0; c < calls; c++) PK(pw_regroup(&p, ids, &rq, &g, perm, NULL, 0, (pw_stream_t)st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float *us = malloc(sizeof(float) * (size_t)replays);
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(exec, st));
    for (int i = 0; i < replays; i++) {
        float ms = 0;
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        us[i] = ms * 1000.0f / (float)calls;
    }
    qsort(us, (size_t)replays, sizeof *us, cmp_float);
    const float median = us[replays / 2];
    free(us);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(ids));
    CK(cudaFree(perm));
    CK(cudaFree((void *)rq.cu_seqlens_q));
    CK(cudaFree((void *)rq.prefix_lens));
    CK(cudaFree((void *)rq.kv_lens));
    return median;
}

/* Kernel variants (src/cuda/regroup_dev.h) on one capture, greedy mode, one KV head. The
 * difference between a full variant and its prep-only twin, divided by W steps, is the
 * cost of one greedy step. */
static void bench_variants(const char *path, int replays)
{
    pw_capture_t *c = NULL;
    PK(pw_capture_read(path, 0, &c));
    bench_problem_t b;
    setup(c, 1, &b);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    enum { NUM_VARIANTS = 9 };
    /* prep[v]: the prep-only variant of the same kernel and path, or -1 (v is prep only). */
    static const struct {
        const char *name;
        int prep;
    } variants[NUM_VARIANTS] = {
        {"v3 redux (library)", 2},  {"v3 shuffle argmin", 2}, {"v3 prep only", -1},
        {"v3 hash path forced", 5}, {"v3 match_any ORs", 2},  {"v3 hash forced prep", -1},
        {"wide-K kernel", -2}, /* -2: no prep-only twin, perm checked */
        {"wide-K masks kernel", -2},
        {"v3 without long path", -2}, /* = variant 0 where V <= the 32 KB direct bound */
    };
    const size_t n_perm = (size_t)b.problem.num_tokens;
    int32_t *got = malloc(n_perm * 4 + 4), *ref = malloc(n_perm * 4 + 4);
    printf("dev: max_pages_per_request %d (v3 direct-indexed masks up to 2048 pages at W128, "
           "4096 at W64; the library's long direct path up to 14336 / 28672 pages where it pays; "
           "else per window direct or hash)\n",
           b.problem.max_pages_per_request);
    for (int32_t w = 64; w <= 128; w *= 2) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = PW_REGROUP_GREEDY;
        g.window = w;
        PK(pw_ref_regroup(&b.problem, b.host_ids, &b.host_requests, &g, ref));
        float t[NUM_VARIANTS];
        for (int v = 0; v < NUM_VARIANTS; v++) {
            b.variant = v;
            const timing_t cold = time_config(&b, REGROUP, &g, b.num_copies, replays);
            t[v] = cold.median;
            enqueue(&b, REGROUP, &g, 1, 1);
            CK(cudaMemcpyAsync(got, b.copies[0].perm, n_perm * 4, cudaMemcpyDeviceToHost, b.stream));
            CK(cudaStreamSynchronize(b.stream));
            const int same = memcmp(got, ref, n_perm * 4) == 0;
            printf("dev %-30.30s W%-4d variant %d %-22s %8.2f us (p10 %.2f, p90 %.2f)%s\n", base, w,
                   v, variants[v].name, cold.median, cold.p10, cold.p90,
                   variants[v].prep == -1 ? ""
                   : same               ? "  perm == reference"
                                        : "  perm DIFFERS from the reference");
        }
        printf("dev %-30.30s W%-4d greedy step (= (full - prep only) / W):", base, w);
        for (int v = 0; v < NUM_VARIANTS; v++)
            if (variants[v].prep >= 0)
                printf(" %s %.0f ns;", variants[v].name, 1000.0 * (t[v] - t[variants[v].prep]) / w);
        printf("\n");
        /* The same input with a wide page table (an engine sized for 1M-token contexts):
         * the library kernel then runs its long direct path (variant 0; 128 KB of masks
         * per CTA at W128), variant 8 picks the direct or hash path per window (adaptive). */
        const int32_t v_saved = b.problem.max_pages_per_request;
        b.problem.max_pages_per_request = 8192;
        for (int k = 0; k < 2; k++) {
            b.variant = k ? 8 : 0;
            const timing_t wide = time_config(&b, REGROUP, &g, b.num_copies, replays);
            enqueue(&b, REGROUP, &g, 1, 1);
            CK(cudaMemcpyAsync(got, b.copies[0].perm, n_perm * 4, cudaMemcpyDeviceToHost, b.stream));
            CK(cudaStreamSynchronize(b.stream));
            printf("dev %-30.30s W%-4d max_pages_per_request 8192 (%s) %8.2f us "
                   "(p10 %.2f, p90 %.2f)%s\n",
                   base, w, k ? "variant 8, per-window path choice" : "variant 0, long direct path", wide.median,
                   wide.p10, wide.p90,
                   memcmp(got, ref, n_perm * 4) == 0 ? "  perm == reference" : "  perm DIFFERS from the reference");
        }
        b.problem.max_pages_per_request = v_saved;
    }
    free(got);
    free(ref);
    teardown(&b);
    pw_capture_free(c);
}

/* K > 16: the wide-Top-K kernels (dev variant 6, the hash set; dev variant 7, v3's layout,
 * which pw_regroup runs for K 17..64) in greedy and guarded mode, each permutation checked
 * against the reference, and union preparation of the guarded W128 permutation. */
static void bench_wide_capture(const pw_capture_t *c, const char *path, int32_t hkv, int replays)
{
    bench_problem_t b;
    setup(c, hkv, &b);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const size_t n_perm = (size_t)hkv * (size_t)b.problem.num_tokens;
    int32_t *got = malloc(n_perm * 4 + 4), *ref = malloc(n_perm * 4 + 4);
    const pw_regroup_mode_t modes[4] = {PW_REGROUP_GREEDY, PW_REGROUP_GUARDED, PW_REGROUP_GREEDY, PW_REGROUP_GUARDED};
    const int32_t windows[4] = {64, 64, 128, 128};
    for (int i = 0; i < 8; i++) {
        b.variant = 6 + i / 4; /* 6: hash set, every thread in the loop; 7: v3's layout (pw_regroup's) */
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = modes[i % 4];
        g.window = windows[i % 4];
        const timing_t cold = time_config(&b, REGROUP, &g, b.num_copies, replays);
        enqueue(&b, REGROUP, &g, 1, 1);
        CK(cudaMemcpyAsync(got, b.copies[0].perm, n_perm * 4, cudaMemcpyDeviceToHost, b.stream));
        CK(cudaStreamSynchronize(b.stream));
        PK(pw_ref_regroup(&b.problem, b.host_ids, &b.host_requests, &g, ref));
        printf("%-36.36s %4d %-16s %4d %4d | %8.2f %8.2f %8.2f | K=%d dev variant %d%s\n", base, hkv,
               modes[i % 4] == PW_REGROUP_GREEDY ? "regroup greedy" : "regroup guarded", windows[i % 4], b.num_copies,
               cold.median, cold.p10, cold.p90, b.problem.topk, b.variant,
               memcmp(got, ref, n_perm * 4) == 0 ? ", perm == reference" : ", perm DIFFERS from the reference");
    }
    pw_grouping_t g128 = PW_GROUPING_INIT;
    enqueue(&b, REGROUP, &g128, b.num_copies, b.num_copies);
    CK(cudaStreamSynchronize(b.stream));
    const timing_t up = time_config(&b, UNION_PREPARE, &g128, b.num_copies, replays);
    printf("%-36.36s %4d %-16s %4d %4d | %8.2f %8.2f %8.2f | K=%d\n", base, hkv, "union prepare", 128, b.num_copies,
           up.median, up.p10, up.p90, b.problem.topk);
    free(got);
    free(ref);
    teardown(&b);
}

static void bench_capture(const char *path, int32_t hkv, int replays)
{
    pw_capture_t *c = NULL;
    PK(pw_capture_read(path, 0, &c));
    if (c->problem.topk > 16) {
        bench_wide_capture(c, path, hkv, replays);
        pw_capture_free(c);
        return;
    }
    bench_problem_t b;
    setup(c, hkv, &b);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct {
        const char *name;
        what_t what;
        pw_regroup_mode_t mode;
        int32_t window;
        int fused_variant;
        int32_t group_size; /* 0: PW_GROUPING_INIT's (8) */
    } configs[] = {
        {"regroup greedy", REGROUP, PW_REGROUP_GREEDY, 64, 0, 0},
        {"regroup guarded", REGROUP, PW_REGROUP_GUARDED, 64, 0, 0},
        {"regroup greedy", REGROUP, PW_REGROUP_GREEDY, 128, 0, 0},
        {"regroup guarded", REGROUP, PW_REGROUP_GUARDED, 128, 0, 0},
        {"union prepare", UNION_PREPARE, PW_REGROUP_GUARDED, 128, 0, 0},
        {"regroup+prepare", BOTH, PW_REGROUP_GUARDED, 128, 0, 0},
        {"fused (1 launch)", FUSED, PW_REGROUP_GUARDED, 128, 0, 0},
        {"fused hash forced", FUSED, PW_REGROUP_GUARDED, 128, 1, 0},
        {"fused streamed", FUSED, PW_REGROUP_GUARDED, 128, 3, 0},
        {"regroup+prepare", BOTH, PW_REGROUP_GUARDED, 64, 0, 0},
        {"fused (1 launch)", FUSED, PW_REGROUP_GUARDED, 64, 0, 0},
        {"fused streamed", FUSED, PW_REGROUP_GUARDED, 64, 3, 0},
        /* the full call's regroups at G = 16: g = 4 (the lean kernel's objective), and both
         * g = 4 and g = 2 in one launch (the objective by tile) */
        {"regroup guarded g4", REGROUP, PW_REGROUP_GUARDED, 128, 0, 4},
        {"dual g4 + g2", DUAL, PW_REGROUP_GUARDED, 128, 0, 4},
    };
    /* Permutations for the union-prepare-only timing. */
    pw_grouping_t g128 = PW_GROUPING_INIT;
    enqueue(&b, REGROUP, &g128, b.num_copies, b.num_copies);
    CK(cudaStreamSynchronize(b.stream));
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = configs[i].mode;
        g.window = configs[i].window;
        if (configs[i].group_size) g.group_size = configs[i].group_size;
        b.fused_variant = configs[i].fused_variant;
        const timing_t cold = time_config(&b, configs[i].what, &g, b.num_copies, replays);
        const timing_t warm = time_config(&b, configs[i].what, &g, 1, replays);
        printf("%-36.36s %4d %-16s %4d %4d | %8.2f %8.2f %8.2f | %8.2f\n", base, hkv,
               configs[i].name, configs[i].window, b.num_copies, cold.median, cold.p10, cold.p90,
               warm.median);
    }
    /* The fused kernel's perm and metadata (copy 0) against the two launches' (variant 2). */
    for (int32_t w = 64; w <= 128; w *= 2) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.window = w;
        printf("%-36.36s %4d fused W%d: perm and metadata %s the two launches'\n", base, hkv, w,
               fused_same(&b, &g) ? "==" : "DIFFER FROM");
    }
    /* Union visits. */
    pw_union_stats_t st[5];
    const pw_regroup_mode_t modes[5] = {PW_REGROUP_IDENTITY, PW_REGROUP_GREEDY, PW_REGROUP_GUARDED,
                                        PW_REGROUP_GREEDY, PW_REGROUP_GUARDED};
    const int32_t windows[5] = {128, 64, 64, 128, 128};
    int all_same = 1;
    for (int m = 0; m < 5; m++) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = modes[m];
        g.window = windows[m];
        all_same &= visits_of(&b, &g, &st[m]);
    }
    const double id = (double)st[0].union_visits;
    printf("%-36.36s %4d visits: identity %lld | W64 greedy %lld (%+.2f%%) guarded %lld "
           "(%+.2f%%) | W128 greedy %lld (%+.2f%%) guarded %lld (%+.2f%%) | paper W128 -12.70%% "
           "| GPU perms %s the reference\n",
           base, hkv, (long long)st[0].union_visits, (long long)st[1].union_visits,
           100.0 * ((double)st[1].union_visits / id - 1.0), (long long)st[2].union_visits,
           100.0 * ((double)st[2].union_visits / id - 1.0), (long long)st[3].union_visits,
           100.0 * ((double)st[3].union_visits / id - 1.0), (long long)st[4].union_visits,
           100.0 * ((double)st[4].union_visits / id - 1.0), all_same ? "==" : "DIFFER FROM");
    teardown(&b);
    pw_capture_free(c);
}

int main(int argc, char **argv)
{
    int replays = 50;
    int32_t heads[8] = {1, 4};
    int num_heads = 2;
    const char *files[MAX_FILES];
    static char found[MAX_FILES][512];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--replays") == 0 && i + 1 < argc) {
            replays = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--hkv") == 0 && i + 1 < argc) {
            num_heads = 0;
            for (char *s = argv[++i]; *s && num_heads < 8;) {
                heads[num_heads++] = (int32_t)strtol(s, &s, 10);
                if (*s == ',') s++;
                else break;
            }
        } else if (nfiles < MAX_FILES) {
            files[nfiles++] = argv[i];
        }
    }
    if (replays < 10) replays = 10;
    if (nfiles == 0) {
        files[nfiles++] = ".data/workloads/sel_A_hot.safetensors";
        DIR *dir = opendir("captures");
        struct dirent *e;
        while (dir && (e = readdir(dir)) && nfiles < MAX_FILES) {
            const size_t len = strlen(e->d_name);
            if (len > 12 && len < 400 && strcmp(e->d_name + len - 12, ".safetensors") == 0) {
                snprintf(found[nfiles], sizeof found[0], "captures/%s", e->d_name);
                files[nfiles] = found[nfiles];
                nfiles++;
            }
        }
        if (dir) closedir(dir);
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_regroup: no CUDA device; the timings need an H200\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_regroup on %s (%d SMs); %d replays per configuration; times in us per call\n",
           prop.name, prop.multiProcessorCount, replays);
    printf("paper (H200, 1 KV head, 15,272 queries): W64 19.3-19.5 us, W128 34.6-34.9 us "
           "(grouping alone); targets: W64 <= 6 us, W128 <= 10 us, union prepare <= 5 us\n");
    printf("graph node floor (near-empty kernel, graph of 64): %.2f us per call, included in "
           "every figure below\n",
           graph_node_floor(replays));
    printf("%-36s %4s %-16s %4s %4s | %8s %8s %8s | %8s\n", "capture", "Hkv", "kernel", "W",
           "cpy", "median", "p10", "p90", "L2-warm");
    for (int f = 0; f < nfiles; f++)
        for (int h = 0; h < num_heads; h++) bench_capture(files[f], heads[h], replays);
    bench_variants(files[0], replays);
    return 0;
}

#else /* !PW_HAVE_CUDA */

int main(void)
{
    printf("bench_regroup: built without CUDA; nothing to time\n");
    return 0;
}

#endif
