/* Fuzz target: the host API on problems decoded from arbitrary bytes.
 *
 * Each input describes one small problem (1..3 requests, 1..2 KV heads, G, D, P, K, a page
 * table, Top-K ids with every kind of invalid id, FP8 caches with NaN codes, scales, sinks,
 * per-token scales, token-major or strided caches), sometimes with a field broken on
 * purpose. The target calls pw_problem_check, pw_ref_regroup, pw_ref_union_prepare,
 * pw_union_stats(_windows), pw_ref_grouping_stats, pw_fp8x2_stack_choice and
 * pw_ref_attention in its three modes,
 * and checks what must hold whatever the input (docs/semantics.md):
 *  - no crash, no sanitizer report, and every failure has a message;
 *  - a problem pw_problem_check refuses is refused by every function that reads it;
 *  - a regroup is a bijection inside each request of each KV head;
 *  - union metadata equals the unions of the members' page sets S, computed here from the
 *    definition (semantics §1), with member masks and half unions;
 *  - pw_ref_attention's EXACT outputs and LSE equal an FP64 brute force written here from
 *    the definition, and bad_page_count the pages outside the cache;
 *  - no output element is left unwritten (outputs are poisoned before each call);
 *  - NaN codes written into every cache slot and per-token scale that no row can see
 *    change no output bit, in every mode (semantics §1).
 * Written from docs/semantics.md, independently of src/. Built as a libFuzzer target by
 * scripts/fuzz (clang) and, for the test suite, with tests/fuzz/replay_main.c (any C
 * compiler) over the committed corpus and seeded random inputs. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "pageweaver.h"

/* ---- the byte source: every take returns 0 once the input is spent ------------------- */
typedef struct source {
    const uint8_t *data;
    size_t size, at;
} source_t;

static uint32_t take_bits(source_t *s, int bytes)
{
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) v = v << 8 | (s->at < s->size ? s->data[s->at++] : 0u);
    return v;
}

/* lo..hi inclusive (hi - lo < 2^16). */
static int32_t take_range(source_t *s, int32_t lo, int32_t hi)
{
    const uint32_t span = (uint32_t)(hi - lo) + 1u;
    return lo + (int32_t)(take_bits(s, span > 256 ? 2 : 1) % span);
}

/* 1 with probability about 1 / n (0 once the input is spent: the plain case). */
static int take_rare(source_t *s, int n)
{
    return take_range(s, 0, n - 1) == n - 1;
}

/* A value for a field that is normally in [0, limit]: mostly in range, sometimes one of
 * the values that break code (negative, at the limit, past it, int32 extremes). */
static int32_t take_index(source_t *s, int32_t limit)
{
    switch (take_range(s, 0, 15)) {
    case 11: return -1;
    case 12: return INT32_MIN;
    case 13: return INT32_MAX;
    case 14: return limit + 1;
    case 15: return (int32_t)take_bits(s, 4);
    default: return take_range(s, 0, limit);
    }
}

/* A float scale: mostly ordinary, sometimes 0, negative, tiny, huge, inf or NaN. */
static float take_scale(source_t *s, int allow_nonfinite)
{
    switch (take_range(s, 0, allow_nonfinite ? 11 : 8)) {
    case 4: return 0.0f;
    case 5: return -0.5f;
    case 6: return 1e-30f;
    case 7: return 1e30f;
    case 8: return 3.0e38f;
    case 9: return INFINITY;
    case 10: return -INFINITY;
    case 11: return NAN;
    default: return (float)take_range(s, 1, 64) / 16.0f;
    }
}

/* ---- the problem ------------------------------------------------------------------- */
#define MAX_R 3

typedef struct fuzz_problem {
    pw_problem_t pb;
    int32_t cu[MAX_R + 1], prefix[MAX_R], kv[MAX_R];
    int32_t *page_table; /* [R, stride] */
    int64_t stride;
    int32_t *topk;       /* [Hkv, N, K] */
    pw_requests_t rq;
    /* attention tensors */
    pw_bf16_t *q;        /* [N, Hq, D], q_stride = Hq * D */
    uint8_t *cache;      /* K and V bytes, addressed through kc / vc and the strides */
    size_t cache_bytes;
    pw_fp8_e4m3_t *kc, *vc;
    int64_t kv_stride;   /* token-major */
    pw_cache_layout_t layout;
    float k_scale, v_scale;
    float *sinks;        /* [Hq] or NULL */
    pw_bf16_t *sink_keys; /* [Hq, D] or NULL */
    float *ts_k, *ts_v;  /* [Hkv * slots] or NULL */
    int64_t ts_stride_h, ts_stride_t;
    pw_precision_t precision;
    /* The bytes of the later choices (grouping, reference mode, plan config), read before
     * the bulk data so that they do not all become 0 once a large cache used up the input. */
    uint8_t choices[64];
} fuzz_problem_t;

static void problem_free(fuzz_problem_t *f)
{
    free(f->page_table);
    free(f->topk);
    free(f->q);
    free(f->cache);
    free(f->sinks);
    free(f->sink_keys);
    free(f->ts_k);
    free(f->ts_v);
}

static pw_bf16_t take_bf16(source_t *s)
{
    if (take_rare(s, 64)) {
        switch (take_range(s, 0, 2)) {
        case 0: return pw_bf16_from_float(NAN);
        case 1: return pw_bf16_from_float(INFINITY);
        default: return pw_bf16_from_float(1e30f);
        }
    }
    return pw_bf16_from_float((float)take_range(s, -64, 64) / 16.0f);
}

/* Builds a problem from the bytes. Array sizes always match the shapes (a caller that
 * lies about its allocations is out of scope); values may be anything. */
static void problem_decode(source_t *s, fuzz_problem_t *f)
{
    memset(f, 0, sizeof *f);
    pw_problem_t pb = PW_PROBLEM_INIT;
    const int32_t r_count = take_range(s, 1, MAX_R);
    pb.num_requests = r_count;
    pb.num_kv_heads = take_range(s, 1, 2);
    /* Sometimes a shape of the GPU's fast path (what pw_plan_create takes), with few
     * queries to keep the reference cheap; else small shapes of any kind. */
    const int fast = take_rare(s, 32);
    static const int32_t groups[] = {1, 2, 3, 4, 8, 16}, fast_groups[] = {4, 8, 16};
    pb.q_heads_per_kv = fast ? fast_groups[take_range(s, 0, 2)] : groups[take_range(s, 0, 5)];
    pb.head_dim = fast ? 128 : take_range(s, 1, 8);
    pb.page_size = fast ? (take_range(s, 0, 1) ? 64 : 128) : take_range(s, 1, 6);
    pb.topk = fast ? take_range(s, 1, 20) : take_range(s, 1, 6);
    const int32_t page = pb.page_size;
    for (size_t i = 0; i < sizeof f->choices; i++) f->choices[i] = (uint8_t)take_bits(s, 1);

    int32_t n = 0, max_kv = 0;
    f->cu[0] = 0;
    for (int32_t r = 0; r < r_count; r++) {
        /* mostly short chunks; sometimes long enough for full groups of 8 and windows */
        const int32_t qlen = fast ? take_range(s, 0, 2) : take_rare(s, 4) ? take_range(s, 6, 20) : take_range(s, 0, 5);
        f->prefix[r] = take_range(s, 0, 2 * page);
        f->kv[r] = f->prefix[r] + qlen + take_range(s, 0, page);
        n += qlen;
        f->cu[r + 1] = n;
        if (f->kv[r] > max_kv) max_kv = f->kv[r];
    }
    pb.num_tokens = n;
    pb.max_pages_per_request = (max_kv + page - 1) / page + take_range(s, 0, 1);
    pb.num_cache_pages = take_range(s, 1, 8);
    pb.softmax_scale = take_rare(s, 2) ? take_scale(s, 0) : 0.0f;
    if (pb.softmax_scale < 0.0f) pb.softmax_scale = 0.0f;

    /* A broken field, sometimes (what an engine's bug would pass). */
    switch (take_range(s, 0, 23)) {
    case 13: f->cu[take_range(s, 0, r_count)] = take_index(s, n); break;
    case 14: f->prefix[take_range(s, 0, r_count - 1)] = take_index(s, 4 * page); break;
    case 15: f->kv[take_range(s, 0, r_count - 1)] = take_index(s, 4 * page); break;
    case 16: pb.max_pages_per_request = take_index(s, 8); break;
    case 17: pb.num_cache_pages = take_index(s, 8); break;
    case 18: pb.softmax_scale = take_scale(s, 1); break;
    case 19: pb.struct_size = take_range(s, 0, 1) ? 0 : (uint32_t)sizeof(pw_problem_t) - 4; break;
    case 20: pb.q_heads_per_kv = take_index(s, 65); break;
    case 21: pb.head_dim = take_range(s, 0, 1) ? 0 : -1; break;
    case 22: pb.page_size = take_range(s, 0, 1) ? 0 : -4; break;
    case 23: pb.topk = take_range(s, 0, 1) ? 0 : -1; break;
    default: break;
    }
    /* The arrays are sized by the shapes that can be allocated; a broken shape is checked
     * before any array is read (else the library reads what no caller could have passed). */
    const int32_t hkv = pb.num_kv_heads;
    const int32_t gq = pb.q_heads_per_kv >= 1 && pb.q_heads_per_kv <= 64 ? pb.q_heads_per_kv : 1;
    const int32_t dim = pb.head_dim >= 1 ? pb.head_dim : 1;
    const int32_t kk = pb.topk >= 1 ? pb.topk : 1;
    const int32_t cols = pb.max_pages_per_request >= 0 && pb.max_pages_per_request <= 64
                             ? pb.max_pages_per_request : 0;
    const int64_t pages = pb.num_cache_pages >= 0 && pb.num_cache_pages <= 64 ? pb.num_cache_pages : 0;
    const int32_t psz = pb.page_size >= 1 ? pb.page_size : 1;
    f->pb = pb;

    f->stride = cols + take_range(s, 0, 2);
    f->page_table = calloc((size_t)r_count * (size_t)(f->stride > 0 ? f->stride : 1), sizeof(int32_t));
    for (int32_t r = 0; r < r_count; r++)
        for (int32_t p = 0; p < cols; p++)
            f->page_table[r * f->stride + p] =
                take_rare(s, 6) ? take_index(s, (int32_t)pages) : take_range(s, 0, (int32_t)(pages > 0 ? pages - 1 : 0));

    const size_t rows = (size_t)hkv * (size_t)n;
    f->topk = calloc(rows * (size_t)kk + 1, sizeof(int32_t));
    for (size_t i = 0; i < rows * (size_t)kk; i++)
        f->topk[i] = take_rare(s, 4) ? take_index(s, cols) : take_range(s, 0, cols > 0 ? cols - 1 : 0);

    f->rq.cu_seqlens_q = f->cu;
    f->rq.prefix_lens = f->prefix;
    f->rq.kv_lens = f->kv;
    f->rq.page_table = f->page_table;
    f->rq.page_table_stride = f->stride;

    /* Attention tensors (only read once the shapes passed the checks); the scalars first. */
    f->k_scale = take_rare(s, 3) ? take_scale(s, 1) : 1.0f;
    f->v_scale = take_rare(s, 3) ? take_scale(s, 1) : 1.0f;
    f->precision = take_rare(s, 16) ? (pw_precision_t)7 : (pw_precision_t)take_range(s, 0, 1);
    const int sink_kind = take_range(s, 0, 5), token_scale_kind = take_range(s, 0, 3);
    const int64_t hq = (int64_t)hkv * gq;
    f->q = malloc(((size_t)n * (size_t)hq * (size_t)dim + 1) * sizeof(pw_bf16_t));
    for (size_t i = 0; i < (size_t)n * (size_t)hq * (size_t)dim; i++) f->q[i] = take_bf16(s);

    const int64_t slots = pages * psz;
    const int strided = take_range(s, 0, 2) == 0;
    if (strided) { /* vLLM-like: [pages, Hkv, P, 2 * D], K then V in each token's row */
        f->layout.token_stride = 2 * (int64_t)dim + take_range(s, 0, 1) * 16;
        f->layout.head_stride = psz * f->layout.token_stride;
        f->layout.page_stride = hkv * f->layout.head_stride;
        f->cache_bytes = (size_t)(pages * f->layout.page_stride) + 1;
        f->kv_stride = 0;
    } else {
        f->kv_stride = (int64_t)hkv * dim + take_range(s, 0, 1) * 8;
        f->cache_bytes = 2 * (size_t)(slots * f->kv_stride) + 1;
    }
    f->cache = malloc(f->cache_bytes);
    for (size_t i = 0; i < f->cache_bytes; i++)
        f->cache[i] = take_rare(s, 32) ? (uint8_t)(take_range(s, 0, 1) ? 0x7f : 0xff) : (uint8_t)take_bits(s, 1);
    f->kc = f->cache;
    f->vc = strided ? f->cache + dim : f->cache + slots * f->kv_stride;

    switch (sink_kind) {
    case 4:
        f->sinks = malloc((size_t)hq * sizeof(float));
        for (int64_t h = 0; h < hq; h++) f->sinks[h] = take_rare(s, 3) ? take_scale(s, 1) : (float)take_range(s, -8, 8);
        break;
    case 5:
        f->sink_keys = malloc((size_t)hq * (size_t)dim * sizeof(pw_bf16_t));
        for (int64_t i = 0; i < hq * dim; i++) f->sink_keys[i] = take_bf16(s);
        break;
    default: break;
    }
    if (token_scale_kind == 3) {
        const int head_major = take_range(s, 0, 1);
        f->ts_stride_h = head_major ? slots : 1;
        f->ts_stride_t = head_major ? 1 : hkv;
        const size_t count = (size_t)(hkv * slots) + 1;
        f->ts_k = malloc(count * sizeof(float));
        f->ts_v = take_range(s, 0, 1) ? malloc(count * sizeof(float)) : NULL;
        for (size_t i = 0; i < count; i++) {
            f->ts_k[i] = take_rare(s, 8) ? take_scale(s, 1) : (float)take_range(s, 1, 32) / 8.0f;
            if (f->ts_v) f->ts_v[i] = take_rare(s, 8) ? take_scale(s, 1) : (float)take_range(s, 1, 32) / 8.0f;
        }
    }
}

/* PW_FUZZ_VERBOSE=1 in the environment: the decoded problem on stderr (triage). */
static int verbose(void)
{
    static int on = -1;
    if (on < 0) on = getenv("PW_FUZZ_VERBOSE") && getenv("PW_FUZZ_VERBOSE")[0] == '1';
    return on;
}

static void describe(const fuzz_problem_t *f)
{
    if (!verbose()) return;
    const pw_problem_t *p = &f->pb;
    fprintf(stderr, "N %d R %d Hkv %d G %d D %d P %d K %d max_pages %d cache_pages %lld scale %g k_scale %g v_scale %g "
            "precision %d sinks %s keys %s token scales %s/%s layout %s\n", p->num_tokens, p->num_requests,
            p->num_kv_heads, p->q_heads_per_kv, p->head_dim, p->page_size, p->topk, p->max_pages_per_request,
            (long long)p->num_cache_pages, (double)p->softmax_scale, (double)f->k_scale, (double)f->v_scale,
            (int)f->precision, f->sinks ? "yes" : "no", f->sink_keys ? "yes" : "no", f->ts_k ? "k" : "-",
            f->ts_v ? "v" : "-", f->layout.page_stride ? "strided" : "token-major");
    for (int32_t r = 0; r < p->num_requests; r++)
        fprintf(stderr, "  request %d: rows [%d, %d) prefix %d kv %d\n", r, f->cu[r], f->cu[r + 1], f->prefix[r], f->kv[r]);
    if (f->sinks)
        for (int64_t h = 0; h < (int64_t)p->num_kv_heads * p->q_heads_per_kv; h++)
            fprintf(stderr, "  sink[%lld] %g\n", (long long)h, (double)f->sinks[h]);
}

/* Whether the shapes are ones the arrays above were sized for. */
static int shapes_sane(const fuzz_problem_t *f)
{
    const pw_problem_t *p = &f->pb;
    return p->struct_size == sizeof(pw_problem_t) && p->q_heads_per_kv >= 1 && p->q_heads_per_kv <= 64 &&
           p->head_dim >= 1 && p->page_size >= 1 && p->topk >= 1 && p->max_pages_per_request >= 0 &&
           p->max_pages_per_request <= 64 && p->num_cache_pages >= 0 && p->num_cache_pages <= 64;
}

/* ---- the definition (semantics §1), written here independently ---------------------- */
/* BF16 and E4M3 values from their bits (semantics §4.5: E4M3 "fn", no infinities, S.1111.111
 * is NaN, subnormals 2^-9 m), not the library's decoders. */
static double bf16_value(pw_bf16_t bits)
{
    const uint32_t word = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &word, 4);
    return (double)f;
}

static double e4m3_value(pw_fp8_e4m3_t bits)
{
    const int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
    if (exponent == 15 && mantissa == 7) return NAN;
    const double magnitude = exponent == 0 ? ldexp((double)mantissa, -9) : ldexp(1.0 + mantissa / 8.0, exponent - 7);
    return sign ? -magnitude : magnitude;
}

static int32_t request_of(const fuzz_problem_t *f, int32_t row)
{
    int32_t r = 0;
    while (f->cu[r + 1] <= row) r++;
    return r;
}

/* Insertion sort of ids ascending, with tags[i] (NULL: none) moving along. */
static void sort_ids(int32_t *ids, uint8_t *tags, int32_t n)
{
    for (int32_t i = 1; i < n; i++)
        for (int32_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            const int32_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
            if (tags) {
                const uint8_t b = tags[j];
                tags[j] = tags[j - 1];
                tags[j - 1] = b;
            }
        }
}

/* S of row `row` of KV head h: ascending distinct ids p with 0 <= p <= min(c, L - 1) / P. */
static int32_t support(const fuzz_problem_t *f, int32_t h, int32_t row, int32_t *out)
{
    const pw_problem_t *p = &f->pb;
    const int32_t r = request_of(f, row);
    const int64_t c = (int64_t)f->prefix[r] + (row - f->cu[r]);
    const int64_t last = c < (int64_t)f->kv[r] - 1 ? c : (int64_t)f->kv[r] - 1;
    int32_t count = 0;
    if (last < 0) return 0;
    const int32_t *ids = f->topk + ((int64_t)h * p->num_tokens + row) * p->topk;
    for (int32_t k = 0; k < p->topk; k++) {
        const int64_t id = ids[k];
        if (id < 0 || id > last / p->page_size) continue;
        int dup = 0;
        for (int32_t j = 0; j < count; j++) dup |= out[j] == id;
        if (!dup) out[count++] = (int32_t)id;
    }
    sort_ids(out, NULL, count);
    return count;
}

/* ---- regroup and union preparation ------------------------------------------------- */
/* 1 if perm is, for every KV head, a bijection of the rows inside each request; else 0
 * with the first fault described in why. */
static int is_bijection(const fuzz_problem_t *f, const int32_t *perm, char *why, size_t why_len)
{
    const pw_problem_t *p = &f->pb;
    uint8_t *seen = calloc((size_t)p->num_tokens + 1, 1);
    int ok = 1;
    for (int32_t h = 0; h < p->num_kv_heads && ok; h++) {
        memset(seen, 0, (size_t)p->num_tokens + 1);
        for (int32_t slot = 0; slot < p->num_tokens && ok; slot++) {
            const int32_t row = perm[(int64_t)h * p->num_tokens + slot];
            if (row < 0 || row >= p->num_tokens) {
                snprintf(why, why_len, "perm[%d][%d] = %d", h, slot, row);
                ok = 0;
            } else if (request_of(f, row) != request_of(f, slot)) {
                snprintf(why, why_len, "slot %d holds row %d of another request", slot, row);
                ok = 0;
            } else if (seen[row]) {
                snprintf(why, why_len, "row %d twice in KV head %d", row, h);
                ok = 0;
            }
            if (ok) seen[row] = 1;
        }
    }
    free(seen);
    return ok;
}

static void check_perm(const fuzz_problem_t *f, const int32_t *perm)
{
    char why[96] = "";
    CHECK(is_bijection(f, perm, why, sizeof why), "%s", why);
}

/* The metadata against the unions of the members' S (semantics §4.1). */
static void check_meta(const fuzz_problem_t *f, const pw_grouping_t *grouping, const int32_t *perm,
                       const pw_union_meta_t *meta)
{
    const pw_problem_t *p = &f->pb;
    const int32_t g = grouping->group_size, cap = meta->union_capacity;
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)p->topk);
    int32_t *uni = malloc(sizeof(int32_t) * (size_t)cap);
    uint8_t *members = malloc((size_t)cap); /* members[j]: bit m iff member m selected uni[j] */
    int64_t selections_total = 0, selections_meta = 0;
    for (int32_t h = 0; h < p->num_kv_heads; h++) {
        const int32_t groups = meta->num_groups[h];
        CHECK(groups >= 0 && groups <= meta->max_groups, "num_groups[%d] = %d", h, groups);
        int32_t next_slot = 0;
        for (int32_t gi = 0; gi < groups; gi++) {
            const pw_group_desc_t *d = &meta->groups[(int64_t)h * meta->max_groups + gi];
            CHECK(d->slot_begin == next_slot, "group %d begins at slot %d, expected %d", gi, d->slot_begin, next_slot);
            CHECK(d->num_members >= 1 && d->num_members <= g, "group %d: %d members", gi, d->num_members);
            next_slot += d->num_members;
            CHECK(next_slot <= p->num_tokens, "group %d runs past N", gi);
            const int32_t *pages = meta->union_pages + ((int64_t)h * meta->max_groups + gi) * cap;
            const uint8_t *masks = meta->member_masks + ((int64_t)h * meta->max_groups + gi) * cap;
            int32_t u = 0, half[2] = {0, 0};
            for (int32_t m = 0; m < d->num_members; m++) {
                const int32_t row = perm[(int64_t)h * p->num_tokens + d->slot_begin + m];
                CHECK(request_of(f, row) == d->request, "group %d member %d in another request", gi, m);
                const int32_t ns = support(f, h, row, sel);
                selections_total += ns;
                for (int32_t i = 0; i < ns; i++) {
                    int32_t j = 0;
                    while (j < u && uni[j] != sel[i]) j++;
                    if (j == u) {
                        uni[u] = sel[i];
                        members[u++] = 0;
                    }
                    members[j] |= (uint8_t)(1u << m);
                }
            }
            sort_ids(uni, members, u);
            CHECK(d->union_size == u, "group %d: union_size %d, expected %d", gi, d->union_size, u);
            for (int32_t j = 0; j < cap; j++) {
                if (j >= u) {
                    CHECK(pages[j] == -1, "group %d: union_pages[%d] = %d after the union", gi, j, pages[j]);
                    continue;
                }
                CHECK(pages[j] == uni[j], "group %d: union_pages[%d] = %d, expected %d", gi, j, pages[j], uni[j]);
                const uint8_t want = members[j];
                CHECK(masks[j] == want, "group %d page %d: mask 0x%x, expected 0x%x", gi, uni[j], masks[j], want);
                if (want & 0x0f) half[0]++;
                if (want & 0xf0) half[1]++;
                for (int m = 0; m < 8; m++) selections_meta += (masks[j] >> m) & 1;
            }
            CHECK(d->half_union_size[0] == half[0] && d->half_union_size[1] == half[1],
                  "group %d: half unions %d / %d, expected %d / %d", gi, d->half_union_size[0],
                  d->half_union_size[1], half[0], half[1]);
        }
        CHECK(next_slot == p->num_tokens, "KV head %d: groups cover %d of %d slots", h, next_slot, p->num_tokens);
    }
    CHECK(selections_meta == selections_total, "member masks hold %lld selections, expected %lld",
          (long long)selections_meta, (long long)selections_total);
    pw_union_stats_t total;
    const pw_status_t st = FRESH(pw_union_stats(p, meta, &total, NULL));
    CHECK(st == PW_SUCCESS, "pw_union_stats on prepared metadata: %s", pw_last_error());
    CHECK(total.selections == selections_total, "stats: %lld selections, expected %lld",
          (long long)total.selections, (long long)selections_total);
    int64_t count = 0;
    const pw_status_t sw = FRESH(pw_union_stats_windows(p, &f->rq, grouping, meta, NULL, 0, &count));
    CHECK(sw == PW_SUCCESS, "pw_union_stats_windows (count): %s", pw_last_error());
    if (count > 0) {
        pw_window_stats_t *ws = malloc(sizeof *ws * (size_t)count);
        CHECK(pw_union_stats_windows(p, &f->rq, grouping, meta, ws, count, &count) == PW_SUCCESS,
              "pw_union_stats_windows: %s", pw_last_error());
        int64_t sum = 0;
        for (int64_t i = 0; i < count; i++) sum += ws[i].stats.selections;
        CHECK(sum == selections_total, "windows: %lld selections, expected %lld", (long long)sum,
              (long long)selections_total);
        free(ws);
    }
    free(sel);
    free(uni);
    free(members);
}

/* Metadata a caller may pass to the statistics functions after a bad copy: fields
 * overwritten with anything. They answer with an error or with counts that add up. */
static void corrupt_meta(source_t *s, const fuzz_problem_t *f, const pw_grouping_t *grouping, pw_union_meta_t *meta)
{
    const pw_problem_t *p = &f->pb;
    const int edits = take_range(s, 0, 3);
    const int64_t slots = (int64_t)p->num_kv_heads * meta->max_groups;
    for (int e = 0; e < edits && slots > 0; e++) {
        pw_group_desc_t *d = &meta->groups[take_range(s, 0, (int32_t)(slots - 1 < 65535 ? slots - 1 : 65535))];
        switch (take_range(s, 0, 6)) {
        case 0: meta->num_groups[take_range(s, 0, p->num_kv_heads - 1)] = take_index(s, (int32_t)meta->max_groups); break;
        case 1: d->num_members = take_index(s, 9); break;
        case 2: d->union_size = take_index(s, meta->union_capacity); break;
        case 3: d->half_union_size[take_range(s, 0, 1)] = take_index(s, meta->union_capacity); break;
        case 4: d->request = take_index(s, p->num_requests); break;
        case 5: d->slot_begin = take_index(s, p->num_tokens); break;
        default: meta->member_masks[take_range(s, 0, meta->union_capacity - 1)] = (uint8_t)take_bits(s, 1); break;
        }
    }
    pw_union_stats_t total;
    pw_status_t st = FRESH(pw_union_stats(p, meta, &total, NULL));
    check_failure_message(st, "pw_union_stats");
    if (st == PW_SUCCESS)
        CHECK(total.queries >= 0 && total.groups >= 0 && total.selections >= 0 && total.union_visits >= 0 &&
                  total.c4 >= 0 && total.selections <= 8 * total.union_visits && total.c4 <= 2 * total.union_visits,
              "pw_union_stats on edited metadata: queries %lld groups %lld selections %lld visits %lld c4 %lld",
              (long long)total.queries, (long long)total.groups, (long long)total.selections,
              (long long)total.union_visits, (long long)total.c4);
    int64_t count = -1;
    st = FRESH(pw_union_stats_windows(p, &f->rq, grouping, meta, NULL, 0, &count));
    check_failure_message(st, "pw_union_stats_windows");
    if (st != PW_SUCCESS) return;
    CHECK(count >= 0, "count %lld", (long long)count);
    const int64_t capacity = take_range(s, 0, (int32_t)(count < 64 ? count : 64));
    pw_window_stats_t *ws = malloc(sizeof *ws * (size_t)(capacity + 1));
    int64_t count2 = -1;
    st = FRESH(pw_union_stats_windows(p, &f->rq, grouping, meta, ws, capacity, &count2));
    check_failure_message(st, "pw_union_stats_windows");
    CHECK(count2 == count, "count %lld, then %lld", (long long)count, (long long)count2);
    CHECK(st == (capacity < count ? PW_ERROR_INSUFFICIENT_WORKSPACE : PW_SUCCESS),
          "capacity %lld for %lld windows: %s", (long long)capacity, (long long)count, pw_status_string(st));
    free(ws);
}

static void run_grouping(source_t *s, const fuzz_problem_t *f, int problem_ok)
{
    const pw_problem_t *p = &f->pb;
    pw_grouping_t grouping = PW_GROUPING_INIT;
    grouping.mode = (pw_regroup_mode_t)take_range(s, 0, 3); /* 3 = AUTO: refused */
    static const int32_t windows[] = {0, 1, 2, 3, 5, 64, 128, -1};
    grouping.window = windows[take_range(s, 0, 7)];
    grouping.group_size = take_range(s, 0, 9);
    const int grouping_ok = grouping.mode != PW_REGROUP_AUTO && grouping.window >= 0 &&
                            grouping.group_size >= 1 && grouping.group_size <= 8;

    int32_t *perm = malloc(sizeof(int32_t) * ((size_t)p->num_kv_heads * (size_t)p->num_tokens + 1));
    pw_requests_t rq = f->rq;
    rq.page_table = NULL; /* the grouping functions take none */
    pw_status_t st = FRESH(pw_ref_regroup(p, f->topk, &rq, &grouping, perm));
    check_failure_message(st, "pw_ref_regroup");
    if (!problem_ok || !grouping_ok)
        CHECK(st != PW_SUCCESS, "pw_ref_regroup accepted %s", !problem_ok ? "a refused problem" : "a bad grouping");
    if (st != PW_SUCCESS) {
        free(perm);
        return;
    }
    check_perm(f, perm);

    pw_union_meta_t meta = PW_UNION_META_INIT;
    st = FRESH(pw_union_meta_alloc_host(p, &grouping, &meta));
    check_failure_message(st, "pw_union_meta_alloc_host");
    CHECK(st == PW_SUCCESS, "pw_union_meta_alloc_host after a regroup: %s", pw_last_error());
    st = FRESH(pw_ref_union_prepare(p, f->topk, &rq, &grouping, perm, &meta));
    check_failure_message(st, "pw_ref_union_prepare");
    CHECK(st == PW_SUCCESS, "pw_ref_union_prepare on a regroup's permutation: %s", pw_last_error());
    check_meta(f, &grouping, perm, &meta);

    pw_union_stats_t direct, convenience;
    CHECK(pw_union_stats(p, &meta, &direct, NULL) == PW_SUCCESS, "%s", pw_last_error());
    st = FRESH(pw_ref_grouping_stats(p, f->topk, &rq, &grouping, &convenience, NULL));
    CHECK(st == PW_SUCCESS, "pw_ref_grouping_stats: %s", pw_last_error());
    CHECK(direct.selections == convenience.selections && direct.union_visits == convenience.union_visits &&
              direct.c4 == convenience.c4 && direct.groups == convenience.groups,
          "pw_ref_grouping_stats differs from regroup + prepare + stats");

    /* A caller's permutation: a shuffle inside each request, sometimes with an entry
     * broken. Union preparation accepts it iff it is a bijection inside each request. */
    for (int32_t h = 0; h < p->num_kv_heads; h++) {
        int32_t *row = perm + (int64_t)h * p->num_tokens;
        for (int32_t r = 0; r < p->num_requests; r++)
            for (int32_t i = f->cu[r]; i < f->cu[r + 1]; i++) row[i] = i;
        for (int32_t r = 0; r < p->num_requests; r++)
            for (int32_t i = f->cu[r + 1] - 1; i > f->cu[r]; i--) { /* Fisher-Yates from the bytes */
                const int32_t j = f->cu[r] + take_range(s, 0, i - f->cu[r]);
                const int32_t t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
    }
    if (p->num_tokens > 0 && take_rare(s, 2)) {
        const int64_t at = take_range(s, 0, p->num_kv_heads * p->num_tokens - 1);
        perm[at] = take_index(s, p->num_tokens);
    }
    char why[96] = "";
    const int bijection = is_bijection(f, perm, why, sizeof why);
    st = FRESH(pw_ref_union_prepare(p, f->topk, &rq, &grouping, perm, &meta));
    check_failure_message(st, "pw_ref_union_prepare");
    CHECK((st == PW_SUCCESS) == bijection, "pw_ref_union_prepare: %s for a permutation that is %sa bijection",
          pw_status_string(st), bijection ? "" : "not ");
    if (st == PW_SUCCESS) check_meta(f, &grouping, perm, &meta);
    if (st == PW_SUCCESS) corrupt_meta(s, f, &grouping, &meta);
    pw_union_meta_free_host(&meta);
    free(perm);
}

/* pw_fp8x2_stack_choice: each unit's distinct pages are a subset of its block's, so the
 * block counts lie between half the unit counts and the unit counts; the verdict follows
 * the documented rule at G = 16 / 8 / 4. */
static void run_stack_choice(const fuzz_problem_t *f, int problem_ok)
{
    const pw_problem_t *p = &f->pb;
    pw_requests_t rq = f->rq;
    rq.page_table = NULL;
    uint64_t counts[2] = {UINT64_MAX, UINT64_MAX};
    int stacked = -1;
    const pw_status_t st = FRESH(pw_fp8x2_stack_choice(p, f->topk, &rq, counts, &stacked));
    check_failure_message(st, "pw_fp8x2_stack_choice");
    if (!problem_ok) CHECK(st != PW_SUCCESS, "pw_fp8x2_stack_choice accepted a refused problem");
    if (st != PW_SUCCESS) return;
    CHECK(counts[1] <= counts[0] && counts[0] <= 2 * counts[1], "counts %llu (units) / %llu (blocks)",
          (unsigned long long)counts[0], (unsigned long long)counts[1]);
    CHECK(stacked == 0 || stacked == 1, "stacked = %d", stacked);
    const int g = p->q_heads_per_kv;
    if (g == 16 || g == 8 || g == 4) {
        const uint64_t r = g == 16 ? 750 : g == 8 ? 840 : 870;
        CHECK(stacked == (counts[0] * 1000 < r * 2 * counts[1]), "G %d: stacked %d for counts %llu / %llu", g,
              stacked, (unsigned long long)counts[0], (unsigned long long)counts[1]);
    }
}

/* ---- attention ----------------------------------------------------------------------- */
/* Output poison per dtype: signalling-NaN payloads (quiet bit clear), which the
 * library's conversions never write (a NaN result is quiet). */
static const uint64_t k_poison64 = 0x7ff4deadbeef0001ull;
static const uint32_t k_poison32 = 0x7fa5deadu;
static const uint16_t k_poison16 = 0x7fa5u;

static void poison_outputs(uint8_t *o, size_t elems, pw_dtype_t dt)
{
    for (size_t i = 0; i < elems; i++) {
        if (dt == PW_DTYPE_FLOAT64) memcpy(o + i * 8, &k_poison64, 8);
        else if (dt == PW_DTYPE_FLOAT32) memcpy(o + i * 4, &k_poison32, 4);
        else memcpy(o + i * 2, &k_poison16, 2);
    }
}

static int is_poison(const uint8_t *o, size_t i, pw_dtype_t dt)
{
    if (dt == PW_DTYPE_FLOAT64) return memcmp(o + i * 8, &k_poison64, 8) == 0;
    if (dt == PW_DTYPE_FLOAT32) return memcmp(o + i * 4, &k_poison32, 4) == 0;
    return memcmp(o + i * 2, &k_poison16, 2) == 0;
}

static int64_t slot_at(const fuzz_problem_t *f, int64_t h, int64_t slot)
{
    const int64_t page = slot / f->pb.page_size, t = slot % f->pb.page_size;
    if (f->layout.page_stride) return page * f->layout.page_stride + h * f->layout.head_stride + t * f->layout.token_stride;
    return slot * f->kv_stride + h * f->pb.head_dim;
}

/* The cache slots row `row` of KV head h sees (semantics §1: tokens t <= c, t < L of its
 * pages S, through the page table) into slot_of[] (room for K x P), their count returned;
 * *bad += the pages of S outside the cache. sel: room for K ids. */
static int64_t visible_tokens(const fuzz_problem_t *f, int32_t h, int32_t row, int32_t *sel, int64_t *slot_of,
                              uint32_t *bad)
{
    const pw_problem_t *p = &f->pb;
    const int32_t r = request_of(f, row);
    const int64_t c = (int64_t)f->prefix[r] + (row - f->cu[r]);
    const int32_t ns = support(f, h, row, sel);
    int64_t nt = 0;
    for (int32_t i = 0; i < ns; i++) {
        const int64_t phys = f->page_table[r * f->stride + sel[i]];
        if (phys < 0 || phys >= p->num_cache_pages) {
            (*bad)++;
            continue;
        }
        for (int64_t t = (int64_t)sel[i] * p->page_size; t < ((int64_t)sel[i] + 1) * p->page_size; t++)
            if (t <= c && t < f->kv[r]) slot_of[nt++] = phys * p->page_size + t % p->page_size;
    }
    return nt;
}

/* visible[h * slots + slot] = 1 iff some row of KV head h sees that cache slot. */
static uint8_t *visible_slots(const fuzz_problem_t *f)
{
    const pw_problem_t *p = &f->pb;
    const int64_t slots = p->num_cache_pages * p->page_size;
    uint8_t *vis = calloc((size_t)(p->num_kv_heads * slots) + 1, 1);
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)p->topk);
    int64_t *slot_of = malloc(sizeof(int64_t) * (size_t)((int64_t)p->topk * p->page_size + 1));
    uint32_t bad = 0;
    for (int32_t h = 0; h < p->num_kv_heads; h++)
        for (int32_t row = 0; row < p->num_tokens; row++) {
            const int64_t nt = visible_tokens(f, h, row, sel, slot_of, &bad);
            for (int64_t t = 0; t < nt; t++) vis[h * slots + slot_of[t]] = 1;
        }
    free(sel);
    free(slot_of);
    return vis;
}

static pw_attention_args_t make_args(const fuzz_problem_t *f, const pw_fp8_e4m3_t *kc, const pw_fp8_e4m3_t *vc,
                                     const float *ts_k, const float *ts_v, void *o, pw_dtype_t dt, float *lse,
                                     uint32_t *bad)
{
    const int64_t hq = (int64_t)f->pb.num_kv_heads * f->pb.q_heads_per_kv;
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    a.q = f->q;
    a.q_stride = hq * f->pb.head_dim;
    a.k_cache = kc;
    a.v_cache = vc;
    a.kv_stride = f->kv_stride;
    a.cache_layout = f->layout;
    a.k_scale = &f->k_scale;
    a.v_scale = &f->v_scale;
    a.topk_ids = f->topk;
    a.requests = f->rq;
    a.o = o;
    a.o_stride = hq * f->pb.head_dim;
    a.o_dtype = dt;
    a.lse = lse;
    a.bad_page_count = bad;
    a.precision = f->precision;
    a.sink_logits = f->sinks;
    a.sink_keys = f->sink_keys;
    a.token_scales.k = ts_k;
    a.token_scales.v = ts_v;
    a.token_scales.stride_h = f->ts_stride_h;
    a.token_scales.stride_t = f->ts_stride_t;
    return a;
}

/* The exact outputs by brute force over the visible tokens (semantics §1). cond[i] is 0
 * for a row-head whose scores are too large for any FP64 evaluation order to agree
 * (|x| terms past 1e6: exp of a difference rounded at that size), tol[i] the absolute
 * tolerance of its outputs: any FP64 order of the sums moves a score by at most ~(D + 2)
 * eps x size (size = scale x sum |q_d k_d|, the largest of the row), hence each weight's
 * ratio by twice that, and the PV sum by ~tokens x eps, all relative to the largest |v| the
 * row sees (with margins of 4x). */
static void brute_force(const fuzz_problem_t *f, double *o, float *lse, uint32_t *bad, uint8_t *cond, double *tol)
{
    const pw_problem_t *p = &f->pb;
    const int64_t g = p->q_heads_per_kv, dim = p->head_dim, hq = p->num_kv_heads * g;
    const double scale = p->softmax_scale != 0.0f ? (double)p->softmax_scale : (double)(float)(1.0 / sqrt((double)dim));
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)p->topk);
    const int64_t max_tokens = (int64_t)p->topk * p->page_size;
    double *x = malloc(sizeof(double) * (size_t)(max_tokens + 1));
    int64_t *slot_of = malloc(sizeof(int64_t) * (size_t)(max_tokens + 1));
    *bad = 0;
    for (int64_t h = 0; h < p->num_kv_heads; h++)
        for (int32_t row = 0; row < p->num_tokens; row++) {
            const int64_t nt = visible_tokens(f, (int32_t)h, row, sel, slot_of, bad);
            for (int64_t j = 0; j < g; j++) {
                const int64_t head = h * g + j, at = (int64_t)row * hq + head;
                const pw_bf16_t *q = f->q + at * dim;
                double sink = -INFINITY;
                if (f->sinks) sink = (double)f->sinks[head];
                if (f->sink_keys) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < dim; d++)
                        dot += (double)bf16_value(q[d]) * (double)bf16_value(f->sink_keys[head * dim + d]);
                    sink = (double)(float)(scale * dot);
                }
                double *out = o + at * dim;
                for (int64_t d = 0; d < dim; d++) out[d] = 0.0;
                cond[at] = 1;
                tol[at] = 0.0;
                if (nt == 0) { /* no visible token: o = 0, LSE = the sink (-inf without) */
                    lse[at] = (float)sink;
                    continue;
                }
                /* A sink past 2.3e38 (+inf included; sk x log2 e would pass FLT_MAX): the
                 * limit, o = 0 x the weighted sum (NaN data the row sees stays NaN). */
                const int limit = sink > (double)2.3e38f;
                double m = limit ? -INFINITY : sink, size = !limit && fabs(sink) < INFINITY ? fabs(sink) : 0.0;
                double vmax = 0.0;
                for (int64_t t = 0; t < nt; t++) {
                    const double ks = f->ts_k ? (double)f->ts_k[h * f->ts_stride_h + slot_of[t] * f->ts_stride_t] : 1.0;
                    const pw_fp8_e4m3_t *k = f->kc + slot_at(f, h, slot_of[t]);
                    double dot = 0.0, dot_abs = 0.0;
                    for (int64_t d = 0; d < dim; d++) {
                        const double term = (double)bf16_value(q[d]) *
                                            ((double)f->k_scale * (double)e4m3_value(k[d]) * ks);
                        dot += term;
                        dot_abs += fabs(term);
                    }
                    x[t] = scale * dot;
                    if (scale * dot_abs > size) size = scale * dot_abs;
                    if (x[t] > m) m = x[t];
                }
                double sum = sink == -INFINITY || limit ? 0.0 : exp(sink - m);
                for (int64_t t = 0; t < nt; t++) {
                    x[t] = exp(x[t] - m);
                    if (limit) x[t] *= 0.0;
                    sum += x[t];
                }
                if (limit) sum = 1.0;
                for (int64_t t = 0; t < nt; t++) {
                    const double vs = f->ts_v ? (double)f->ts_v[h * f->ts_stride_h + slot_of[t] * f->ts_stride_t] : 1.0;
                    const pw_fp8_e4m3_t *v = f->vc + slot_at(f, h, slot_of[t]);
                    for (int64_t d = 0; d < dim; d++) {
                        const double value = (double)f->v_scale * (double)e4m3_value(v[d]) * vs;
                        out[d] += x[t] * value;
                        if (fabs(value) > vmax) vmax = fabs(value);
                    }
                }
                for (int64_t d = 0; d < dim; d++) out[d] /= sum;
                lse[at] = limit ? (float)sink : (float)(m + log(sum));
                cond[at] = !(size > 1e6);
                const double eps = 1.2e-16; /* 2^-53 with margin */
                tol[at] = vmax * (8.0 * (double)(dim + 2) * eps * size + 4.0 * (double)nt * eps + 1e-15);
            }
        }
    free(sel);
    free(x);
    free(slot_of);
}

/* NaN matching NaN, an infinity itself, else |a - b| <= tol. */
static int close_enough(double a, double b, double tol)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= tol;
}

static size_t dtype_size(pw_dtype_t dt)
{
    return dt == PW_DTYPE_FLOAT64 ? 8 : dt == PW_DTYPE_FLOAT32 ? 4 : 2;
}

static void run_attention(source_t *s, fuzz_problem_t *f, int problem_ok)
{
    const pw_problem_t *p = &f->pb;
    const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv, dim = p->head_dim;
    const size_t elems = (size_t)p->num_tokens * (size_t)hq * (size_t)dim, rows = (size_t)p->num_tokens * (size_t)hq;
    const pw_dtype_t dt = take_rare(s, 3) ? (pw_dtype_t)take_range(s, 0, 1) : PW_DTYPE_FLOAT64;
    const pw_ref_mode_t mode = (pw_ref_mode_t)take_range(s, 0, 2);
    const int valid_precision = f->precision == PW_PRECISION_FP8 || f->precision == PW_PRECISION_FP8X2;
    /* Top-K ids may be any int32; the scales must be finite once a row is computed (N = 0
     * reads only the request arrays) */
    const int scales_ok = p->num_tokens == 0 || (isfinite(f->k_scale) && isfinite(f->v_scale));

    uint8_t *o = malloc(elems * 8 + 8), *o2 = malloc(elems * 8 + 8);
    float *lse = malloc(rows * sizeof(float) + 4), *lse2 = malloc(rows * sizeof(float) + 4);
    uint32_t bad = 0, bad2 = 0;
    poison_outputs(o, elems, dt);
    memset(lse, 0xa5, rows * sizeof(float) + 4);
    pw_attention_args_t a = make_args(f, f->kc, f->vc, f->ts_k, f->ts_v, o, dt, lse, &bad);
    const pw_status_t st = FRESH(pw_ref_attention(p, &a, mode));
    check_failure_message(st, "pw_ref_attention");
    if (!problem_ok || !valid_precision || !scales_ok)
        CHECK(st != PW_SUCCESS, "pw_ref_attention accepted %s",
              !problem_ok ? "a refused problem" : !valid_precision ? "an unknown precision" : "a non-finite scale");
    if (st == PW_SUCCESS) {
        /* Every output written: the poison (a signalling-NaN payload, which no conversion
         * makes: they give quiet NaNs) is gone from each element, in each dtype. */
        for (size_t i = 0; i < elems; i++)
            CHECK(!is_poison(o, i, dt), "output element %zu (dtype %d) unwritten", i, (int)dt);
        for (size_t i = 0; i < rows; i++) {
            uint32_t bits;
            memcpy(&bits, lse + i, 4);
            CHECK(bits != 0xa5a5a5a5u, "LSE %zu unwritten", i);
        }
    }
    if (st == PW_SUCCESS && mode == PW_REF_EXACT && dt == PW_DTYPE_FLOAT64) {
        double *want = malloc(elems * 8 + 8), *tol = malloc(rows * 8 + 8);
        float *want_lse = malloc(rows * 4 + 4);
        uint8_t *cond = malloc(rows + 1);
        uint32_t want_bad = 0;
        brute_force(f, want, want_lse, &want_bad, cond, tol);
        CHECK(bad == want_bad, "bad_page_count %u, expected %u", bad, want_bad);
        for (size_t i = 0; i < rows; i++) {
            if (!cond[i]) continue;
            for (int64_t d = 0; d < dim; d++) {
                double got;
                memcpy(&got, o + (i * (size_t)dim + (size_t)d) * 8, 8);
                const double w = want[i * (size_t)dim + (size_t)d];
                CHECK(close_enough(got, w, tol[i]), "row-head %zu d %lld: o %.17g, brute force %.17g (tolerance %g)", i,
                      (long long)d, got, w, tol[i]);
            }
            const float gl = lse[i], wl = want_lse[i];
            CHECK((isnan(gl) && isnan(wl)) || gl == wl || fabsf(gl - wl) <= 1e-6f * (1.0f + fabsf(wl)),
                  "row-head %zu: LSE %.9g, brute force %.9g", i, (double)gl, (double)wl);
        }
        free(tol);
        free(cond);
        free(want);
        free(want_lse);
    }

    /* NaN codes in every slot no row sees, and NaN per-token scales there: no output bit
     * and no status may change. */
    if (problem_ok) {
        const int64_t slots = p->num_cache_pages * p->page_size;
        uint8_t *vis = visible_slots(f);
        uint8_t *poisoned = malloc(f->cache_bytes);
        memcpy(poisoned, f->cache, f->cache_bytes);
        const int64_t v_off = (int64_t)(f->vc - f->cache);
        float *tk = NULL, *tv = NULL;
        const size_t ts_count = (size_t)(p->num_kv_heads * slots) + 1;
        if (f->ts_k) {
            tk = malloc(ts_count * sizeof(float));
            memcpy(tk, f->ts_k, ts_count * sizeof(float));
        }
        if (f->ts_v) {
            tv = malloc(ts_count * sizeof(float));
            memcpy(tv, f->ts_v, ts_count * sizeof(float));
        }
        for (int64_t h = 0; h < p->num_kv_heads; h++)
            for (int64_t slot = 0; slot < slots; slot++) {
                if (vis[h * slots + slot]) continue;
                const int64_t at = slot_at(f, h, slot);
                memset(poisoned + at, 0x7f, (size_t)dim);
                memset(poisoned + v_off + at, 0xff, (size_t)dim);
                if (tk) tk[h * f->ts_stride_h + slot * f->ts_stride_t] = NAN;
                if (tv) tv[h * f->ts_stride_h + slot * f->ts_stride_t] = NAN;
            }
        poison_outputs(o2, elems, dt);
        memset(lse2, 0xa5, rows * sizeof(float) + 4);
        pw_attention_args_t b = make_args(f, (const pw_fp8_e4m3_t *)poisoned, (const pw_fp8_e4m3_t *)(poisoned + v_off),
                                          tk, tv, o2, dt, lse2, &bad2);
        const pw_status_t st2 = FRESH(pw_ref_attention(p, &b, mode));
        CHECK(st2 == st, "status %s with NaN in unseen slots, %s without", pw_status_string(st2), pw_status_string(st));
        if (st == PW_SUCCESS) {
            CHECK(memcmp(o, o2, elems * dtype_size(dt)) == 0, "outputs changed with NaN in slots no row sees");
            CHECK(memcmp(lse, lse2, rows * sizeof(float)) == 0, "LSE changed with NaN in slots no row sees");
            CHECK(bad == bad2, "bad_page_count changed with NaN in slots no row sees");
        }
        free(vis);
        free(poisoned);
        free(tk);
        free(tv);
    }
    free(o);
    free(o2);
    free(lse);
    free(lse2);
}

/* ---- plans (host side; this target is built without CUDA) -------------------------- */
/* pw_plan_create on the problem with a config from the bytes; the plan's queries; and
 * pw_sparse_prefill, which in a build without CUDA makes every host check and then
 * returns PW_ERROR_UNSUPPORTED: never success, never a crash. */
static void run_plan(source_t *s, const fuzz_problem_t *f, int problem_ok)
{
    const pw_problem_t *p = &f->pb;
    pw_plan_config_t config = PW_PLAN_CONFIG_INIT;
    config.regroup = (pw_regroup_mode_t)take_range(s, 0, 4);
    static const int32_t windows[] = {128, 64, 0, 32, -1};
    config.window = windows[take_range(s, 0, 4)];
    static const pw_kernel_t kernels[] = {PW_KERNEL_UNION4, PW_KERNEL_UNION8, PW_KERNEL_PER_QUERY, (pw_kernel_t)7};
    config.kernel = kernels[take_range(s, 0, 3)];
    config.flags = take_rare(s, 8) ? take_bits(s, 1) : 0u;
    config.vt_max_pages = take_rare(s, 4) ? take_index(s, 4096) : 0;
    switch (take_range(s, 0, 15)) {
    case 14: config.struct_size = 20; break; /* the size before vt_max_pages */
    case 15: config.struct_size = 8; break;
    default: break;
    }
    pw_plan_t *plan = (pw_plan_t *)(uintptr_t)1;
    pw_status_t st = FRESH(pw_plan_create(p, &config, &plan));
    check_failure_message(st, "pw_plan_create");
    if (!problem_ok) CHECK(st != PW_SUCCESS, "pw_plan_create accepted refused shapes");
    if (st != PW_SUCCESS) {
        CHECK(plan == NULL, "a failed pw_plan_create left *out non-NULL");
        return;
    }
    for (int precision = 0; precision < 2; precision++) {
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        st = FRESH(pw_plan_info(plan, (pw_precision_t)precision, &info));
        CHECK(st == PW_SUCCESS, "pw_plan_info: %s", pw_last_error());
        CHECK(info.regroup == PW_REGROUP_IDENTITY || info.regroup == PW_REGROUP_GREEDY ||
                  info.regroup == PW_REGROUP_GUARDED,
              "pw_plan_info: regroup %d", (int)info.regroup);
        CHECK(info.window >= 0 && info.kernel == config.kernel, "pw_plan_info: window %d, kernel %d", info.window,
              (int)info.kernel);
    }
    size_t bytes = 0;
    CHECK(pw_plan_workspace_size(plan, &bytes) == PW_SUCCESS, "pw_plan_workspace_size: %s", pw_last_error());
    void *workspace = NULL;
    if (bytes > 0 && bytes <= (64u << 20)) workspace = malloc(bytes);
    if (workspace || bytes == 0) {
        int32_t *perm_view = NULL;
        pw_union_meta_t meta_view = PW_UNION_META_INIT;
        pw_grouping_t grouping_view = PW_GROUPING_INIT;
        st = FRESH(pw_plan_workspace_views(plan, workspace, bytes, &perm_view, &meta_view, &grouping_view));
        CHECK(st == PW_SUCCESS, "pw_plan_workspace_views: %s", pw_last_error());
        if (bytes > 0) {
            st = FRESH(pw_plan_workspace_views(plan, workspace, bytes - 1, &perm_view, &meta_view, &grouping_view));
            CHECK(st == PW_ERROR_INSUFFICIENT_WORKSPACE, "a workspace one byte short: %s", pw_status_string(st));
        }
        const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv;
        pw_bf16_t *o = malloc(((size_t)p->num_tokens * (size_t)hq * (size_t)p->head_dim + 1) * sizeof(pw_bf16_t));
        pw_attention_args_t a = make_args(f, f->kc, f->vc, f->ts_k, f->ts_v, o, PW_DTYPE_BFLOAT16, NULL, NULL);
        int32_t *caller_perm = NULL;
        if (config.flags & PW_PLAN_CALLER_PERM) {
            caller_perm = malloc(((size_t)p->num_kv_heads * (size_t)p->num_tokens + 1) * sizeof(int32_t));
            for (int64_t i = 0; i < (int64_t)p->num_kv_heads * p->num_tokens; i++) caller_perm[i] = (int32_t)(i % (p->num_tokens ? p->num_tokens : 1));
        }
        st = FRESH(pw_sparse_prefill(plan, &a, caller_perm, workspace, bytes, NULL));
        check_failure_message(st, "pw_sparse_prefill");
        if (verbose())
            fprintf(stderr, "plan: workspace %zu bytes; pw_sparse_prefill: %s: %s\n", bytes, pw_status_string(st),
                    pw_last_error());
        CHECK(st != PW_SUCCESS, "pw_sparse_prefill succeeded in a build without CUDA");
        free(caller_perm);
        free(o);
    }
    free(workspace);
    pw_plan_destroy(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    source_t s = {data, size, 0};
    fuzz_problem_t f;
    problem_decode(&s, &f);
    describe(&f);
    if (!shapes_sane(&f)) {
        /* A shape the arrays were not sized for: only the checks may run. */
        const pw_status_t st = FRESH(pw_problem_check(&f.pb, &f.rq));
        check_failure_message(st, "pw_problem_check");
        CHECK(st != PW_SUCCESS || f.pb.struct_size == sizeof(pw_problem_t), "a short struct_size accepted");
        problem_free(&f);
        return 0;
    }
    pw_requests_t no_table = f.rq;
    no_table.page_table = NULL;
    const pw_status_t layout = FRESH(pw_problem_check(&f.pb, &no_table));
    check_failure_message(layout, "pw_problem_check");
    const pw_status_t full = FRESH(pw_problem_check(&f.pb, &f.rq));
    check_failure_message(full, "pw_problem_check");
    CHECK(layout == PW_SUCCESS || full != PW_SUCCESS, "a page table made a refused layout valid");
    source_t choices = {f.choices, sizeof f.choices, 0};
    run_grouping(&choices, &f, layout == PW_SUCCESS);
    run_stack_choice(&f, layout == PW_SUCCESS);
    run_plan(&choices, &f, pw_problem_check(&f.pb, NULL) == PW_SUCCESS); /* a plan sees no request arrays */
    run_attention(&choices, &f, full == PW_SUCCESS);
    problem_free(&f);
    return 0;
}
