#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t pw_test_seed(int argc, char **argv)
{
    uint64_t seed = 0;
    int have = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0) {
            seed = strtoull(argv[i + 1], NULL, 0);
            have = 1;
        }
    }
    const char *env = getenv("PW_TEST_SEED");
    if (!have && env && *env) {
        seed = strtoull(env, NULL, 0);
        have = 1;
    }
    if (!have) seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    printf("seed: %llu (rerun with --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

void pw_rng_init(pw_rng_t *rng, uint64_t seed) { rng->state = seed ^ 0x9e3779b97f4a7c15ull; }

uint64_t pw_rng_next(pw_rng_t *rng)
{
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t pw_rng_range(pw_rng_t *rng, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1u;
    if (span == 0) return (int64_t)pw_rng_next(rng);
    return lo + (int64_t)(pw_rng_next(rng) % span);
}

double pw_rng_uniform(pw_rng_t *rng) { return (double)(pw_rng_next(rng) >> 11) * 0x1.0p-53; }

double pw_rng_normal(pw_rng_t *rng)
{
    double u1 = pw_rng_uniform(rng), u2 = pw_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

void case_finish(test_case_t *tc, int32_t num_requests, int32_t hkv, int32_t page_size, int32_t topk)
{
    pw_problem_t init = PW_PROBLEM_INIT;
    tc->problem = init;
    tc->problem.num_requests = num_requests;
    tc->problem.num_kv_heads = hkv;
    tc->problem.page_size = page_size;
    tc->problem.topk = topk;
    tc->problem.num_tokens = tc->cu[num_requests];
    int64_t max_kv = 1;
    for (int32_t r = 0; r < num_requests; r++)
        if (tc->kv[r] > max_kv) max_kv = tc->kv[r];
    tc->problem.max_pages_per_request = (int32_t)((max_kv + page_size - 1) / page_size);
    tc->requests.cu_seqlens_q = tc->cu;
    tc->requests.prefix_lens = tc->prefix;
    tc->requests.kv_lens = tc->kv;
    tc->requests.page_table = NULL;
    tc->requests.page_table_stride = 0;
    const size_t cells = (size_t)hkv * (size_t)tc->problem.num_tokens * (size_t)topk + 1;
    tc->topk = calloc(cells, sizeof *tc->topk);
    assert_non_null(tc->topk);
}

void case_free(test_case_t *tc)
{
    free(tc->topk);
    tc->topk = NULL;
}

int32_t *topk_row(const test_case_t *tc, int32_t h, int32_t row)
{
    return tc->topk + ((int64_t)h * tc->problem.num_tokens + row) * tc->problem.topk;
}

int32_t request_of(const test_case_t *tc, int32_t row)
{
    int32_t r = 0;
    while (!(tc->cu[r] <= row && row < tc->cu[r + 1])) r++;
    return r;
}

void case_random(test_case_t *tc, pw_rng_t *rng, int32_t max_qlen, int32_t max_pool)
{
    memset(tc, 0, sizeof *tc);
    const int32_t num_requests = (int32_t)pw_rng_range(rng, 1, PW_TEST_MAX_REQUESTS);
    static const int32_t page_sizes[] = {1, 4, 16, 128};
    const int32_t page_size = page_sizes[pw_rng_range(rng, 0, 3)];
    const int32_t topk = (int32_t)pw_rng_range(rng, 1, 20);
    const int32_t hkv = (int32_t)pw_rng_range(rng, 1, 3);
    for (int32_t r = 0; r < num_requests; r++) {
        const int64_t kind = pw_rng_range(rng, 0, 5);
        const int32_t qlen = kind == 0 ? 0 : kind == 1 ? 1 : (int32_t)pw_rng_range(rng, 2, max_qlen);
        tc->cu[r + 1] = tc->cu[r] + qlen;
        tc->prefix[r] = (int32_t)pw_rng_range(rng, 0, 3000);
        tc->kv[r] = tc->prefix[r] + qlen + (int32_t)pw_rng_range(rng, 0, 400);
    }
    case_finish(tc, num_requests, hkv, page_size, topk);
    int32_t pool[64];
    if (max_pool > 64) max_pool = 64;
    for (int32_t h = 0; h < hkv; h++) {
        for (int32_t r = 0; r < num_requests; r++) {
            const int32_t last_page = (tc->kv[r] - 1) / page_size;
            const int32_t pool_size = (int32_t)pw_rng_range(rng, 1, max_pool);
            for (int32_t i = 0; i < pool_size; i++) pool[i] = (int32_t)pw_rng_range(rng, 0, last_page);
            for (int32_t row = tc->cu[r]; row < tc->cu[r + 1]; row++) {
                int32_t *ids = topk_row(tc, h, row);
                for (int32_t t = 0; t < topk; t++) {
                    const int64_t u = pw_rng_range(rng, 0, 99);
                    if (u < 70) ids[t] = pool[pw_rng_range(rng, 0, pool_size - 1)];
                    else if (u < 76) ids[t] = -1;
                    else if (u < 79) ids[t] = INT32_MAX;
                    else if (u < 82) ids[t] = INT32_MIN;
                    else if (u < 88) ids[t] = last_page + 1 + (int32_t)pw_rng_range(rng, 0, 5);
                    else if (u < 94 && t > 0) ids[t] = ids[t - 1];
                    else ids[t] = (int32_t)pw_rng_range(rng, 0, last_page);
                }
            }
        }
    }
}

pw_grouping_t grouping_of(pw_regroup_mode_t mode, int32_t window, int32_t g)
{
    pw_grouping_t grouping = PW_GROUPING_INIT;
    grouping.mode = mode;
    grouping.window = window;
    grouping.group_size = g;
    return grouping;
}

int32_t naive_selection(const test_case_t *tc, int32_t h, int32_t row, int32_t *out)
{
    const int32_t r = request_of(tc, row);
    const int64_t c = (int64_t)tc->prefix[r] + (row - tc->cu[r]);
    const int64_t kv = tc->kv[r], page = tc->problem.page_size;
    const int32_t *ids = topk_row(tc, h, row);
    int32_t n = 0;
    for (int32_t t = 0; t < tc->problem.topk; t++) {
        const int32_t p = ids[t];
        if (p < 0 || (int64_t)p * page > c || (int64_t)p * page >= kv) continue;
        int dup = 0;
        for (int32_t i = 0; i < n; i++) dup |= out[i] == p;
        if (!dup) out[n++] = p;
    }
    for (int32_t i = 1; i < n; i++) /* insertion sort */
        for (int32_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            const int32_t tmp = out[j];
            out[j] = out[j - 1];
            out[j - 1] = tmp;
        }
    return n;
}

pw_capture_t *pw_test_random_attention_problem(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                               int max_q, int max_prefix, int max_tail)
{
    return pw_test_random_attention_problem_k(rng, qkv_seed, hkv, num_requests, max_q, 0, max_prefix, max_tail, 16);
}

pw_capture_t *pw_test_random_attention_problem_k(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                                 int max_q, int min_prefix, int max_prefix, int max_tail, int topk)
{
    return pw_test_random_attention_problem_kp(rng, qkv_seed, hkv, num_requests, max_q, min_prefix, max_prefix,
                                               max_tail, topk, 128);
}

pw_capture_t *pw_test_random_attention_problem_kp(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                                  int max_q, int min_prefix, int max_prefix, int max_tail, int topk,
                                                  int page_size)
{
    pw_problem_t p = PW_PROBLEM_INIT;
    p.page_size = page_size;
    p.num_requests = num_requests;
    p.num_kv_heads = hkv;
    p.topk = topk;
    int32_t qlen[64], prefix[64], kvlen[64];
    int64_t n = 0, max_pages = 0;
    for (int r = 0; r < num_requests; r++) {
        qlen[r] = r == 1 ? 1 : (int32_t)pw_rng_range(rng, 1, max_q);
        prefix[r] = (int32_t)pw_rng_range(rng, min_prefix, max_prefix);
        kvlen[r] = prefix[r] + qlen[r] + (int32_t)pw_rng_range(rng, 0, max_tail); // L >= prefix + qlen
        n += qlen[r];
        const int64_t pages = (kvlen[r] + page_size - 1) / page_size;
        if (pages > max_pages) max_pages = pages;
    }
    p.num_tokens = (int32_t)n;
    p.max_pages_per_request = (int32_t)max_pages;
    p.num_cache_pages = max_pages * num_requests + 3;
    pw_capture_t *c = NULL;
    assert_pw_ok(pw_capture_create(&p, PW_CAPTURE_LOAD_QKV, &c));
    c->cu_seqlens_q[0] = 0;
    for (int r = 0; r < num_requests; r++) {
        c->cu_seqlens_q[r + 1] = c->cu_seqlens_q[r] + qlen[r];
        c->prefix_lens[r] = prefix[r];
        c->kv_lens[r] = kvlen[r];
    }
    pw_test_shuffle_page_table(c, rng);
    for (int h = 0; h < hkv; h++) {
        for (int r = 0; r < num_requests; r++) {
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                int32_t *row = c->topk_ids + ((int64_t)h * n + i) * topk;
                const int64_t cpos = prefix[r] + (i - c->cu_seqlens_q[r]);
                const int64_t last = (cpos < kvlen[r] - 1 ? cpos : kvlen[r] - 1) / page_size;
                const int kind = (int)pw_rng_range(rng, 0, 19);
                for (int k = 0; k < topk; k++) {
                    int32_t id = (int32_t)pw_rng_range(rng, 0, last);
                    const int64_t u = pw_rng_range(rng, 0, 99);
                    if (kind == 0) id = -1;                               // empty row
                    else if (u < 8) id = -1;                              // padding
                    else if (u < 12) id = row[k > 0 ? k - 1 : 0];         // duplicate
                    else if (u < 14) id = (int32_t)(last + 1 + pw_rng_range(rng, 0, 3)); // future
                    else if (u < 15) id = INT32_MAX;
                    else if (u < 16) id = INT32_MIN;
                    else if (u < 30) id = (int32_t)last;                  // own page (partial)
                    row[k] = id;
                }
            }
        }
    }
    assert_pw_ok(pw_capture_generate_qkv(c, qkv_seed));
    // Vary Q row magnitudes so the per-row Q scale matters.
    for (int64_t i = 0; i < n * hkv * 16; i++) {
        const float f = (float)pw_rng_range(rng, 1, 8) / 4.0f;
        for (int k = 0; k < 128; k++) {
            pw_bf16_t *x = c->q + i * 128 + k;
            *x = pw_bf16_from_float(pw_bf16_to_float(*x) * f);
        }
    }
    return c;
}

void pw_test_visible_slots(const pw_capture_t *c, uint8_t *visible)
{
    const pw_problem_t *p = &c->problem;
    const int64_t hkv = p->num_kv_heads, P = p->page_size, n = p->num_tokens;
    memset(visible, 0, (size_t)(p->num_cache_pages * P * hkv));
    for (int64_t h = 0; h < hkv; h++) {
        for (int32_t r = 0; r < p->num_requests; r++) {
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t cpos = (int64_t)c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int64_t kv_len = c->kv_lens[r];
                for (int32_t k = 0; k < p->topk; k++) {
                    const int64_t id = c->topk_ids[(h * n + i) * p->topk + k];
                    if (id < 0 || id >= p->max_pages_per_request) continue;
                    const int64_t phys = c->page_table[(int64_t)r * p->max_pages_per_request + id];
                    if (phys < 0 || phys >= p->num_cache_pages) continue;
                    for (int64_t t = id * P; t < (id + 1) * P && t <= cpos && t < kv_len; t++)
                        visible[(phys * P + t % P) * hkv + h] = 1;
                }
            }
        }
    }
}

int64_t pw_test_poison_caches(pw_capture_t *c, const uint8_t *visible, int code_even, int code_odd, pw_rng_t *rng)
{
    const pw_problem_t *p = &c->problem;
    const int64_t hkv = p->num_kv_heads, d = p->head_dim, pairs = p->num_cache_pages * p->page_size * hkv;
    int64_t written = 0;
    for (int64_t i = 0; i < pairs; i++) {
        if (visible[i]) continue;
        uint8_t *k = c->k_cache + i * d, *v = c->v_cache + i * d;
        for (int64_t j = 0; j < d; j++) {
            if (code_even < 0) {
                k[j] = (uint8_t)pw_rng_next(rng);
                v[j] = (uint8_t)pw_rng_next(rng);
            } else {
                k[j] = v[j] = (uint8_t)(j % 2 ? code_odd : code_even);
            }
        }
        written++;
    }
    return written;
}

void pw_test_shuffle_page_table(pw_capture_t *c, pw_rng_t *rng)
{
    const pw_problem_t *p = &c->problem;
    const int64_t total = p->num_cache_pages;
    int32_t *phys = malloc((size_t)total * 4);
    assert_non_null(phys);
    for (int64_t i = 0; i < total; i++) phys[i] = (int32_t)i;
    for (int64_t i = total - 1; i > 0; i--) {
        const int64_t j = pw_rng_range(rng, 0, i);
        const int32_t t = phys[i];
        phys[i] = phys[j];
        phys[j] = t;
    }
    for (int64_t i = 0; i < (int64_t)p->num_requests * p->max_pages_per_request; i++) c->page_table[i] = phys[i];
    c->page_table_synthesised = 0;
    free(phys);
}

pw_attention_args_t pw_test_capture_args(const pw_capture_t *c, pw_dtype_t dt, void *o, float *lse, uint32_t *bad,
                                         pw_precision_t precision)
{
    const pw_problem_t *p = &c->problem;
    const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv;
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    a.q = c->q;
    a.q_stride = hq * p->head_dim;
    a.k_cache = c->k_cache;
    a.v_cache = c->v_cache;
    a.kv_stride = (int64_t)p->num_kv_heads * p->head_dim;
    a.k_scale = &c->k_scale;
    a.v_scale = &c->v_scale;
    a.topk_ids = c->topk_ids;
    a.requests = pw_capture_requests(c);
    a.o = o;
    a.o_stride = hq * p->head_dim;
    a.o_dtype = dt;
    a.lse = lse;
    a.bad_page_count = bad;
    a.precision = precision;
    return a;
}

pw_attention_args_t pw_test_host_args(const void *q, const void *cache, const void *scale, const void *topk,
                                      const void *cu, const void *prefix, const void *kv, const void *table,
                                      int64_t table_stride, void *o)
{
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    a.q = q;
    a.q_stride = 16 * 128;
    a.k_cache = a.v_cache = cache;
    a.kv_stride = 128;
    a.k_scale = a.v_scale = scale;
    a.topk_ids = topk;
    a.requests.cu_seqlens_q = cu;
    a.requests.prefix_lens = prefix;
    a.requests.kv_lens = kv;
    a.requests.page_table = table;
    a.requests.page_table_stride = table_stride;
    a.o = o;
    a.o_stride = 16 * 128;
    a.o_dtype = PW_DTYPE_BFLOAT16;
    return a;
}
