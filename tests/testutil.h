/* Shared test helpers: seeded random numbers (the seed is printed and can be set with
 * --seed N or PW_TEST_SEED), and the cmocka includes in the order cmocka needs. */
#ifndef PW_TESTUTIL_H
#define PW_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"

/* Parses --seed N (or the PW_TEST_SEED environment variable; else a time-based seed),
 * prints "seed: N (rerun with --seed N)" and returns it. */
uint64_t pw_test_seed(int argc, char **argv);

/* splitmix64-style generator state; one per test so tests stay independent. */
typedef struct pw_rng { uint64_t state; } pw_rng_t;
void pw_rng_init(pw_rng_t *rng, uint64_t seed);
uint64_t pw_rng_next(pw_rng_t *rng);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t pw_rng_range(pw_rng_t *rng, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double pw_rng_uniform(pw_rng_t *rng);
/* Standard normal (Box-Muller). */
double pw_rng_normal(pw_rng_t *rng);

/* Asserts that a pw_ call succeeded, printing pw_last_error() when it did not. */
#define assert_pw_ok(expr)                                                                  \
    do {                                                                                    \
        pw_status_t st_ = (expr);                                                           \
        if (st_ != PW_SUCCESS)                                                              \
            fail_msg("%s -> %s: %s", #expr, pw_status_string(st_), pw_last_error());       \
    } while (0)

/* ---- random selection problems (regroup and union tests) --------------------------- */
#define PW_TEST_MAX_REQUESTS 8

/* One problem: shapes, request layout (host) and Top-K ids [Hkv, N, K]. */
typedef struct test_case {
    pw_problem_t problem;
    int32_t cu[PW_TEST_MAX_REQUESTS + 1];
    int32_t prefix[PW_TEST_MAX_REQUESTS];
    int32_t kv[PW_TEST_MAX_REQUESTS];
    pw_requests_t requests;
    int32_t *topk; /* [Hkv, N, K] */
} test_case_t;

/* Completes a case whose cu/prefix/kv are set: problem shapes, requests, zeroed topk. */
void case_finish(test_case_t *tc, int32_t num_requests, int32_t hkv, int32_t page_size, int32_t topk);
void case_free(test_case_t *tc);
int32_t *topk_row(const test_case_t *tc, int32_t h, int32_t row);
int32_t request_of(const test_case_t *tc, int32_t row);
/* Random case: 1..8 requests of 0, 1 or up to max_qlen queries, prefixes, KV lengths; rows
 * drawn mostly from a per-request pool of up to max_pool pages (so queries overlap), with
 * -1, INT32_MIN/MAX, ids past the KV length or in the future, and duplicates. */
void case_random(test_case_t *tc, pw_rng_t *rng, int32_t max_qlen, int32_t max_pool);
pw_grouping_t grouping_of(pw_regroup_mode_t mode, int32_t window, int32_t g);
/* S_i by its definition, written independently of the library: page p is kept iff its
 * first token p*P is <= c and < L (64-bit product). Ascending, distinct; returns |S_i|. */
int32_t naive_selection(const test_case_t *tc, int32_t h, int32_t row, int32_t *out);

/* ---- random attention problems and cache poison (attention tests) ------------------ */
/* A random attention problem with every edge of the semantics mixed in: several requests
 * (request 1 has one query), prefixes up to max_prefix, KV lengths prefix + qlen + 0..max_tail
 * (partial last pages, KV past the chunk's last query), rows of -1, duplicates, future,
 * INT32_MIN / INT32_MAX ids, a shuffled page table over a cache with spare pages; Q, K and V
 * from pw_capture_generate_qkv(qkv_seed), Q rows scaled x0.25..x2. G = 16, D = P = 128,
 * K = 16. */
pw_capture_t *pw_test_random_attention_problem(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                               int max_q, int max_prefix, int max_tail);
/* The same with `topk` ids per row and prefixes of min_prefix..max_prefix tokens
 * (pw_test_random_attention_problem: 16 and 0). */
pw_capture_t *pw_test_random_attention_problem_k(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                                 int max_q, int min_prefix, int max_prefix, int max_tail, int topk);
/* The same with pages of page_size tokens (pw_test_random_attention_problem_k: 128). */
pw_capture_t *pw_test_random_attention_problem_kp(pw_rng_t *rng, uint64_t qkv_seed, int hkv, int num_requests,
                                                  int max_q, int min_prefix, int max_prefix, int max_tail, int topk,
                                                  int page_size);

/* Fills c->page_table's first num_requests rows (max_pages_per_request columns each) with a
 * random permutation of the physical pages 0 .. num_cache_pages - 1 (Fisher-Yates from rng)
 * and marks the table as given (not synthesised). */
void pw_test_shuffle_page_table(pw_capture_t *c, pw_rng_t *rng);

/* The reference call's arguments for the capture's host tensors: output o [N, Hq, D] of
 * dtype dt (row stride Hq * D), lse [N, Hq] and bad_page_count may be NULL. */
pw_attention_args_t pw_test_capture_args(const pw_capture_t *c, pw_dtype_t dt, void *o, float *lse, uint32_t *bad,
                                         pw_precision_t precision);

/* Attention arguments over stand-in buffers (host memory, or fake pointers never
 * dereferenced) for tests of the host-side checks: G = 16, D = 128, one token-major cache
 * for K and V (kv_stride 128, i.e. Hkv = 1), one scale for both, a page table of
 * table_stride ids per request, bf16 O with Q's row stride 16 * 128. */
pw_attention_args_t pw_test_host_args(const void *q, const void *cache, const void *scale, const void *topk,
                                      const void *cu, const void *prefix, const void *kv, const void *table,
                                      int64_t table_stride, void *o);

/* Marks the (cache slot, KV head) pairs inside some A_i of the call (docs/semantics.md,
 * "Visibility"): visible[slot * Hkv + h] = 1, else 0, for slot < num_cache_pages * P.
 * Written from the definition, independently of the library: query n of request r sees
 * token t of logical page p iff p is one of its Top-K ids, t / P = p, t <= c_n and
 * t < L_r; the slot is page_table[r][p] * P + t % P (pages outside the cache: nothing). */
void pw_test_visible_slots(const pw_capture_t *c, uint8_t *visible);

/* Overwrites the D bytes of K and V of every (slot, KV head) that `visible` leaves 0 with
 * code_even / code_odd on even / odd bytes; code_even = code_odd = -1: random bytes from
 * rng. Returns the number of (slot, head) pairs written. */
int64_t pw_test_poison_caches(pw_capture_t *c, const uint8_t *visible, int code_even, int code_odd, pw_rng_t *rng);

#endif
