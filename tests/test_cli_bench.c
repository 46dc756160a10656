/* `pageweaver bench` run as a child process, CPU part only (--cpu-only, so the test means
 * the same on machines with and without a GPU): exit codes, --help, errors naming the file,
 * and the --json figures against the library: union visits / C_4 of identity and
 * regrouped orders equal pw_ref_grouping_stats, the reference check's NRMS is the FP8
 * error's size, useful FLOP equals the visible pairs counted here.
 *
 * The binary is PW_CLI_PATH (set by CMake), or the PW_CLI environment variable. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pageweaver_capture.h"
#include "testutil.h"

#ifndef PW_CLI_PATH
#define PW_CLI_PATH "pageweaver"
#endif

static uint64_t g_seed;
static const char *g_cli;
static char g_tmp[64];
static char *g_stdout, *g_stderr;

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (f) {
        int ch;
        while ((ch = fgetc(f)) != EOF) {
            if (len + 1 >= cap) {
                cap = cap ? cap * 2 : 4096;
                char *grown = realloc(text, cap);
                if (!grown) break;
                text = grown;
            }
            text[len++] = (char)ch;
        }
        fclose(f);
    }
    if (!text) text = calloc(1, 1);
    else text[len] = '\0';
    return text;
}

/* Runs the tool with `args` (already quoted); returns its exit status, -1 on a crash. */
static int bench(const char *args)
{
    char out[128], err[128], cmd[2048];
    snprintf(out, sizeof out, "%s/stdout", g_tmp);
    snprintf(err, sizeof err, "%s/stderr", g_tmp);
    snprintf(cmd, sizeof cmd, "'%s' bench %s >'%s' 2>'%s'", g_cli, args, out, err);
    const int status = system(cmd);
    free(g_stdout);
    free(g_stderr);
    g_stdout = read_all(out);
    g_stderr = read_all(err);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    print_message("  pageweaver bench %s -> %d\n", args, code);
    return code;
}

/* A small capture: 2 requests (one with a prefix), Hkv heads, G Q heads per KV head,
 * Top-16 rows mixing a drifting hot set, the query's own page and -1 padding. Q/K/V are not
 * stored: the tool generates them. */
static pw_capture_t *capture_of_pages(pw_rng_t *rng, int32_t hkv, int32_t g, int32_t max_pages)
{
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = 300;
    p.num_requests = 2;
    p.num_kv_heads = hkv;
    p.q_heads_per_kv = g;
    p.max_pages_per_request = max_pages; /* ceil(max kv_len / P): the synthesised page table */
    pw_capture_t *c = NULL;
    assert_pw_ok(pw_capture_create(&p, 0, &c));
    const int32_t qlen[2] = {180, 120}, prefix[2] = {0, 2500};
    c->cu_seqlens_q[0] = 0;
    for (int r = 0; r < 2; r++) {
        c->cu_seqlens_q[r + 1] = c->cu_seqlens_q[r] + qlen[r];
        c->prefix_lens[r] = prefix[r];
        c->kv_lens[r] = prefix[r] + qlen[r];
    }
    if (max_pages > 21) c->kv_lens[1] = max_pages * 128; /* a longer context, no more queries */
    for (int32_t h = 0; h < hkv; h++)
        for (int r = 0; r < 2; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = prefix[r] + (i - c->cu_seqlens_q[r]), own = pos / 128;
                int32_t *row = c->topk_ids + ((int64_t)h * p.num_tokens + i) * 16;
                for (int k = 0; k < 16; k++) {
                    const int64_t u = pw_rng_range(rng, 0, 9);
                    if (k == 0) row[k] = (int32_t)own;
                    else if (u < 2) row[k] = -1;
                    else if (u < 7) row[k] = (int32_t)((own + pw_rng_range(rng, 0, 5) + i / 40) % (own + 1));
                    else row[k] = (int32_t)pw_rng_range(rng, 0, own);
                }
            }
    return c;
}

static pw_capture_t *small_capture(pw_rng_t *rng, int32_t hkv, int32_t g)
{
    return capture_of_pages(rng, hkv, g, 21);
}

static double visible_pairs(const pw_capture_t *c)
{
    const pw_problem_t *p = &c->problem;
    double pairs = 0;
    for (int32_t h = 0; h < p->num_kv_heads; h++)
        for (int32_t r = 0; r < p->num_requests; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int32_t *row = c->topk_ids + ((int64_t)h * p->num_tokens + i) * 16;
                /* brute force over tokens: t visible iff its page is in the row and t <= pos */
                for (int64_t t = 0; t <= pos && t < c->kv_lens[r]; t++) {
                    int hit = 0;
                    for (int k = 0; k < 16 && !hit; k++) hit = row[k] == t / 128;
                    pairs += hit;
                }
            }
    return pairs;
}

static double json_number(const cJSON *obj, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *at = obj;
    for (char *save = NULL, *key = strtok_r(buf, ".", &save); key; key = strtok_r(NULL, ".", &save)) {
        at = cJSON_GetObjectItemCaseSensitive(at, key);
        if (!at) fail_msg("JSON has no %s", path);
    }
    if (!cJSON_IsNumber(at)) fail_msg("JSON %s is not a number", path);
    return at->valuedouble;
}

static void test_usage(void **state)
{
    (void)state;
    assert_int_equal(bench("--help"), 0);
    assert_non_null(strstr(g_stdout, "usage: pageweaver bench"));
    assert_non_null(strstr(g_stdout, "CUDA graph"));
    assert_int_equal(bench(""), 2);
    assert_int_equal(bench("--bogus x.safetensors"), 2);
    assert_int_equal(bench("--replays 0 x.safetensors"), 2);
    assert_int_equal(bench("--copies 9 x.safetensors"), 2);
    assert_int_equal(bench("--cpu-only -q /nonexistent/none.safetensors"), 1);
    assert_non_null(strstr(g_stderr, "none.safetensors"));
    /* Option errors name the accepted range. */
    assert_int_equal(bench("--replays 0 x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--replays needs an integer in 1..100000, got '0'"));
    assert_int_equal(bench("--copies=9 x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "1..8"));
    assert_int_equal(bench("--check-rows abc x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--check-rows needs an integer in 0.."));
    assert_int_equal(bench("--json"), 2);
    /* A forgotten --json name: the next option is not taken as the file (it wrote a file
     * named --replays, found by test_cli's random argument lists, 2026-12-05). */
    const int replays_existed = access("--replays", F_OK) == 0;
    assert_int_equal(bench("--json --replays 5 x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--json needs a file name, got the option-like '--replays'"));
    if (!replays_existed) assert_int_equal(access("--replays", F_OK), -1);
    /* `--json a.safetensors b.safetensors` (stats' --json takes no value) overwrote the
     * first capture with the report (a review, 2026-12-06): refused before anything opens. */
    const int capture_existed = access("pw_json_target.safetensors", F_OK) == 0;
    assert_int_equal(bench("--json pw_json_target.safetensors x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--json pw_json_target.safetensors: the report would replace a capture"));
    if (!capture_existed) assert_int_equal(access("pw_json_target.safetensors", F_OK), -1);
    assert_int_equal(bench("--json=b.safetensors x.safetensors"), 2);
    assert_int_equal(bench("--vt-prepass maybe x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--vt-prepass needs auto, on or off, got 'maybe'"));
    assert_int_equal(bench("--fp8x2-tile=both x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--fp8x2-tile needs auto, stacked or lean, got 'both'"));
    assert_int_equal(bench("--help"), 0);
    assert_non_null(strstr(g_stdout, "--fp8x2-tile"));
    assert_non_null(strstr(g_stdout, "--union4-window"));
    assert_int_equal(bench("--union4-window 0 x.safetensors"), 2); /* 0 is the internal "not given" */
    assert_non_null(strstr(g_stderr, "--union4-window needs an integer in 64..128, got '0'"));
    assert_int_equal(bench("--union4-window=100 x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--union4-window needs 64 or 128, got 100"));
}

/* --json to a path that cannot be written fails before any work; --json - is stdout. */
static void test_json_destination(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x15u);
    pw_capture_t *c = small_capture(&rng, 1, 16);
    char path[128], args[512];
    snprintf(path, sizeof path, "%s/dest.safetensors", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    snprintf(args, sizeof args, "--cpu-only --check-rows 2 --json /nonexistent/dir/x.json '%s'", path);
    assert_int_equal(bench(args), 1);
    assert_non_null(strstr(g_stderr, "/nonexistent/dir/x.json"));
    assert_null(strstr(g_stdout, "no timings")); /* refused before the work */
    assert_null(strstr(g_stderr, "[bench]"));

    const int dash_existed = access("-", F_OK) == 0;
    snprintf(args, sizeof args, "--cpu-only --check-rows 2 --json - '%s'", path);
    assert_int_equal(bench(args), 0);
    cJSON *doc = cJSON_Parse(g_stdout); /* stdout is the JSON document alone */
    assert_non_null(doc);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(doc, "captures"));
    /* the checked rows are listed (bench/flashinfer_peer.py checks the same ones), ascending */
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0),
                                         "reference_check"),
        "row_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 2);
    assert_true(cJSON_GetArrayItem(ids, 0)->valueint < cJSON_GetArrayItem(ids, 1)->valueint);
    assert_int_equal((int)json_number(doc, "protocol.seed"), 1);
    cJSON_Delete(doc);
    assert_non_null(strstr(g_stderr, "guarded W128")); /* the report went to stderr */
    if (!dash_existed) assert_int_equal(access("-", F_OK), -1); /* no file named '-' */

    /* The report never overwrites an input (a review, 2026-12-06: `--json cap.st cap.st`
     * truncated the capture, then called it truncated), nor a .safetensors name in any case. */
    char other[160], upper[160];
    snprintf(other, sizeof other, "%s/dest.st", g_tmp);
    snprintf(upper, sizeof upper, "%s/DEST.SAFETENSORS", g_tmp);
    assert_int_equal(rename(path, other), 0);
    snprintf(args, sizeof args, "--cpu-only --check-rows 2 --json '%s' '%s'", other, other);
    assert_int_equal(bench(args), 2);
    assert_non_null(strstr(g_stderr, "is the input"));
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 2 '%s'", other);
    assert_int_equal(bench(args), 0); /* still a capture */
    snprintf(args, sizeof args, "--cpu-only --check-rows 2 --json '%s' '%s'", upper, other);
    assert_int_equal(bench(args), 2);
    assert_int_equal(access(upper, F_OK), -1);
    remove(other);
    pw_capture_free(c);
}

/* `--cpu-only --check-rows 0` reads no Q / K / V: a capture whose generated caches would
 * be past PW_CAPTURE_MAX_GENERATED_BYTES (a review, 2026-12-06: a 714-byte file made the
 * tool fill 4 GB) reports its plans and statistics; anything that reads them is refused by
 * the reader, naming the bound. */
static void test_no_generation_without_a_reader(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x17u);
    /* 2^23 pages of context (kv_lens[1] = 2^30): caches of 2 x 2^24 pages x 16 KB */
    pw_capture_t *c = capture_of_pages(&rng, 1, 16, 1 << 23);
    char path[128], args[512];
    snprintf(path, sizeof path, "%s/huge_kv.safetensors", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 0 '%s'", path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "union visits"));
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 2 '%s'", path);
    assert_int_equal(bench(args), 1);
    assert_non_null(strstr(g_stderr, "PW_CAPTURE_MAX_GENERATED_BYTES"));
    remove(path);
    pw_capture_free(c);
}

/* Caches shorter than the page table reaches: the pairs whose page lies outside them are
 * counted, warned about in the text and reported in the JSON. */
static void test_bad_pages_warned(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xbadu);
    pw_capture_t *c = small_capture(&rng, 2, 16);
    c->problem.num_cache_pages = 1; /* 128 slots; the default table reaches page 41 */
    assert_pw_ok(pw_capture_generate_parts(c, g_seed, PW_CAPTURE_PART_KV));
    char path[128], json_path[128], args[512];
    snprintf(path, sizeof path, "%s/short.safetensors", g_tmp);
    snprintf(json_path, sizeof json_path, "%s/short.json", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    /* Expected: distinct selected pages p <= pos / 128 with physical r * 21 + p >= 1. */
    int64_t want = 0;
    for (int32_t h = 0; h < 2; h++)
        for (int r = 0; r < 2; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int32_t *row = c->topk_ids + ((int64_t)h * 300 + i) * 16;
                uint8_t seen[64] = {0};
                for (int k = 0; k < 16; k++)
                    if (row[k] >= 0 && row[k] <= pos / 128 && !seen[row[k]]) {
                        seen[row[k]] = 1;
                        want += r * 21 + row[k] >= 1;
                    }
            }
    print_message("  expected bad (query, head, page) pairs: %lld\n", (long long)want);
    assert_true(want > 0);
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 8 --json '%s' '%s'", json_path, path);
    assert_int_equal(bench(args), 0);
    char expect[160];
    snprintf(expect, sizeof expect, "WARNING: %lld (query, KV head, page) pairs", (long long)want);
    assert_non_null(strstr(g_stdout, expect));
    char *text = read_all(json_path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    const cJSON *cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_int_equal((int64_t)json_number(cap, "problem.bad_page_pairs"), want);
    cJSON_Delete(doc);
    remove(json_path);
    remove(path);
    pw_capture_free(c);
}

static void test_cpu_figures(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    pw_capture_t *c = small_capture(&rng, 2, 16);
    char path[128], json_path[128], args[512];
    snprintf(path, sizeof path, "%s/small.safetensors", g_tmp);
    snprintf(json_path, sizeof json_path, "%s/bench.json", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    snprintf(args, sizeof args, "--cpu-only --check-rows 12 --seed 5 --json '%s' '%s'", json_path, path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "no timings"));
    assert_non_null(strstr(g_stdout, "guarded W128"));
    assert_non_null(strstr(g_stderr, "[bench]")); /* progress lines */
    char *text = read_all(json_path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(doc, "gpu")));
    const cJSON *cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_non_null(cap);

    const pw_requests_t rq = pw_capture_requests(c);
    const struct {
        const char *key;
        pw_regroup_mode_t mode;
        int32_t window;
    } cases[] = {{"identity", PW_REGROUP_IDENTITY, 0},      {"guarded_w64", PW_REGROUP_GUARDED, 64},
                 {"guarded_w128", PW_REGROUP_GUARDED, 128}, {"greedy_w128", PW_REGROUP_GREEDY, 128},
                 {"greedy_w512", PW_REGROUP_GREEDY, 512},   {"greedy_w2048", PW_REGROUP_GREEDY, 2048}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = cases[i].mode;
        g.window = cases[i].window;
        pw_union_stats_t want;
        assert_pw_ok(pw_ref_grouping_stats(&c->problem, c->topk_ids, &rq, &g, &want, NULL));
        char key[96];
        snprintf(key, sizeof key, "groupings.%s.union_visits", cases[i].key);
        assert_int_equal((int64_t)json_number(cap, key), want.union_visits);
        snprintf(key, sizeof key, "groupings.%s.c4", cases[i].key);
        assert_int_equal((int64_t)json_number(cap, key), want.c4);
        snprintf(key, sizeof key, "groupings.%s.selections", cases[i].key);
        assert_int_equal((int64_t)json_number(cap, key), want.selections);
    }
    /* A random order within requests keeps the selections and loses reuse. */
    assert_true(json_number(cap, "groupings.random.union_visits") > json_number(cap, "groupings.identity.union_visits"));
    assert_int_equal((int64_t)json_number(cap, "groupings.random.selections"),
                     (int64_t)json_number(cap, "groupings.identity.selections"));
    const double pairs = visible_pairs(c);
    print_message("  visible pairs %.0f, JSON %.0f\n", pairs, json_number(cap, "problem.visible_pairs"));
    assert_true(pairs > 0);
    assert_true(fabs(json_number(cap, "problem.visible_pairs") - pairs) < 0.5);
    assert_true(fabs(json_number(cap, "problem.useful_flop") - pairs * 16 * 128 * 4) < 1.0);
    assert_int_equal((int)json_number(cap, "reference_check.rows"), 12);
    const double nrms = json_number(cap, "reference_check.nrms_emulate_vs_exact");
    print_message("  FP8-emulating vs exact NRMS %.4f\n", nrms);
    assert_true(nrms > 0.005 && nrms < 0.08); /* the size of the FP8 error (~3.6%), not 0, not a bug */
    const double nrms_x2 = json_number(cap, "reference_check.nrms_emulate_fp8x2_vs_exact");
    print_message("  FP8X2-emulating vs exact NRMS %.5f\n", nrms_x2);
    assert_true(nrms_x2 > 1e-5 && nrms_x2 < 0.01 && nrms_x2 < nrms / 4); /* two-term FP8: ~0.1% */
    assert_int_equal((int64_t)json_number(cap, "problem.bad_page_pairs"), 0);
    assert_null(strstr(g_stdout, "WARNING"));
    /* This chunk is too small for the V^T pre-pass: no FP8X2 tile choice is reported. */
    assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cap, "reference_check"),
                                                 "fp8x2_stack_ratio"));
    /* The default plan's W64 grouping (g = 4) is listed; --union4-window is 0 (not given). */
    {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = PW_REGROUP_GUARDED;
        g.window = 64;
        g.group_size = 4;
        pw_union_stats_t want;
        assert_pw_ok(pw_ref_grouping_stats(&c->problem, c->topk_ids, &rq, &g, &want, NULL));
        assert_int_equal((int64_t)json_number(cap, "groupings.guarded_w64_g4.c4"), want.c4);
        assert_int_equal((int64_t)json_number(doc, "protocol.union4_window"), 0);
    }
    cJSON_Delete(doc);
    /* With the pre-pass forced, the report gives the FP8X2 tile choice's ratio, the host
     * function's (pw_fp8x2_stack_choice), and the reference check emulates that tile. */
    snprintf(args, sizeof args, "--cpu-only --check-rows 12 --seed 5 --vt-prepass on --json '%s' '%s'", json_path,
             path);
    assert_int_equal(bench(args), 0);
    text = read_all(json_path);
    doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_non_null(cap);
    uint64_t counts[2];
    int stacked = -1;
    const pw_requests_t requests = pw_capture_requests(c);
    assert_pw_ok(pw_fp8x2_stack_choice(&c->problem, c->topk_ids, &requests, counts, &stacked));
    const double ratio = (double)counts[0] / (2.0 * (double)counts[1]);
    print_message("  FP8X2 tile ratio %.4f (JSON %.4f): %s\n", ratio,
                  json_number(cap, "reference_check.fp8x2_stack_ratio"), stacked ? "stacked" : "lean");
    assert_true(fabs(json_number(cap, "reference_check.fp8x2_stack_ratio") - ratio) < 1e-9);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cap, "reference_check"),
                                                       "fp8x2_stacked");
    assert_true(cJSON_IsBool(st) && cJSON_IsTrue(st) == (stacked == 1));
    assert_non_null(strstr(g_stdout, "FP8X2 tile: pairs' pages"));
    cJSON_Delete(doc);
    /* --union4-window 64: Union4's caller permutations (and every Union4 arm) at W64; the
     * report and the JSON say so, and the default plan is made at W64. */
    snprintf(args, sizeof args, "--cpu-only --check-rows 0 --union4-window 64 --json '%s' '%s'", json_path, path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "(--union4-window)"));
    assert_true(strstr(g_stdout, "default plan (W64,") || strstr(g_stdout, "default plan (W0,"));
    text = read_all(json_path);
    doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    assert_int_equal((int64_t)json_number(doc, "protocol.union4_window"), 64);
    cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_non_null(cap);
    assert_int_equal((int64_t)json_number(cap, "groupings.guarded_w128_g4.window"), 64);
    assert_int_equal((int64_t)json_number(cap, "groupings.guarded_w128_g4.c4"),
                     (int64_t)json_number(cap, "groupings.guarded_w64_g4.c4"));
    cJSON_Delete(doc);
    remove(json_path);
    remove(path);
    pw_capture_free(c);
}

/* A shape the bench's GPU arms do not run (G = 4) still gets the CPU figures and the
 * default plan's choice (printed for every shape a plan takes, K > 16 too). */
/* --max-query-rows: -1 passes each capture's own most rows of a request to every plan (an
 * engine's max_seqlen_q). A batch of 512 requests of 8 rows regroups without it (the time
 * guard's saving has no R term) and keeps identity order with it
 * (pw_plan_config_t.max_query_rows); the JSON records the value. */
static void test_max_query_rows(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x5eedu);
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = 4096;
    p.num_requests = 512;
    p.max_pages_per_request = 8; /* ceil(1,008 / 128): the synthesised page table */
    pw_capture_t *c = NULL;
    assert_pw_ok(pw_capture_create(&p, 0, &c));
    c->cu_seqlens_q[0] = 0;
    for (int32_t r = 0; r < p.num_requests; r++) {
        c->cu_seqlens_q[r + 1] = (r + 1) * 8;
        c->prefix_lens[r] = 1000;
        c->kv_lens[r] = 1008;
    }
    for (int64_t i = 0; i < (int64_t)p.num_tokens * 16; i++)
        c->topk_ids[i] = i % 16 < 6 ? (int32_t)pw_rng_range(&rng, 0, 7) : -1;
    char path[128], json_path[128], args[512];
    snprintf(path, sizeof path, "%s/verify.safetensors", g_tmp);
    snprintf(json_path, sizeof json_path, "%s/verify.json", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    pw_capture_free(c);
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 0 --max-query-rows -1 --json '%s' '%s'", json_path,
             path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "max_query_rows given) runs: identity"));
    char *text = read_all(json_path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    const cJSON *cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_int_equal((int)json_number(cap, "default_plan.max_query_rows"), 8);
    assert_int_equal((int)json_number(cap, "default_plan.window"), 0);
    assert_int_equal((int)json_number(doc, "protocol.max_query_rows"), -1);
    cJSON_Delete(doc);
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 0 --max-query-rows 0 --json '%s' '%s'", json_path, path);
    assert_int_equal(bench(args), 0);
    assert_null(strstr(g_stdout, "max_query_rows given"));
    assert_non_null(strstr(g_stdout, "FP8X2) runs: guarded")); /* the same batch without the hint */
    text = read_all(json_path);
    doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "captures"), 0);
    assert_int_equal((int)json_number(cap, "default_plan.max_query_rows"), 0);
    cJSON_Delete(doc);
    /* A value the capture contradicts names the flag (it printed "no plan for this shape"
     * and exited 0, a review, 2026-12-06); `--` ends the options, as in stats. */
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 0 --max-query-rows 7 -- '%s'", path);
    assert_int_equal(bench(args), 1);
    assert_non_null(strstr(g_stderr, "--max-query-rows 7: this capture has 4096 query rows in 512 requests"));
    assert_null(strstr(g_stdout, "default plan"));
    snprintf(args, sizeof args, "--cpu-only -q --check-rows 0 -- '%s'", path);
    assert_int_equal(bench(args), 0);
    assert_int_equal(bench("--cpu-only -q -- --replays"), 1); /* a capture named --replays */
    assert_non_null(strstr(g_stderr, "--replays"));
    assert_int_equal(bench("--max-query-rows -2 x.safetensors"), 2);
    assert_non_null(strstr(g_stderr, "--max-query-rows needs an integer in -1..2147483647"));
}

static void test_cpu_other_shape(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x4444u);
    pw_capture_t *c = small_capture(&rng, 1, 4);
    char path[128], args[256];
    snprintf(path, sizeof path, "%s/g4.safetensors", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    snprintf(args, sizeof args, "-q --no-rates --check-rows 4 '%s'", path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "G=4"));
    assert_non_null(strstr(g_stdout, "reference check on 4 rows"));
    /* The window the time guard picks (PW_WINDOW_AUTO: W64 or W128), or W0 where it keeps
     * identity order in both precisions (the plan is then the identity plan). */
    assert_true(strstr(g_stdout, "default plan (W128, union4, regroup auto") ||
                strstr(g_stdout, "default plan (W64, union4, regroup auto") ||
                strstr(g_stdout, "default plan (W0, union4, regroup auto"));
    remove(path);
    pw_capture_free(c);

    /* G = 3: no plan takes it; the report says so (the line was silently missing). */
    c = small_capture(&rng, 1, 3);
    snprintf(path, sizeof path, "%s/g3.safetensors", g_tmp);
    assert_pw_ok(pw_capture_write(path, c, 0));
    snprintf(args, sizeof args, "-q --no-rates --check-rows 4 '%s'", path);
    assert_int_equal(bench(args), 0);
    assert_non_null(strstr(g_stdout, "default plan: none, the library takes no plan for this shape ("));
    remove(path);
    pw_capture_free(c);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    g_cli = getenv("PW_CLI") ? getenv("PW_CLI") : PW_CLI_PATH;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/pw_cli_bench_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_cpu_figures),
        cmocka_unit_test(test_cpu_other_shape),
        cmocka_unit_test(test_json_destination),
        cmocka_unit_test(test_bad_pages_warned),
        cmocka_unit_test(test_max_query_rows),
        cmocka_unit_test(test_no_generation_without_a_reader),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/stdout", g_tmp);
    remove(path);
    snprintf(path, sizeof path, "%s/stderr", g_tmp);
    remove(path);
    rmdir(g_tmp);
    free(g_stdout);
    free(g_stderr);
    return rc;
}
