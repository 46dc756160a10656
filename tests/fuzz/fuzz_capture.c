/* Fuzz target: pw_capture_read on arbitrary bytes (docs/capture-format.md).
 *
 * The bytes are written to a file and read with and without PW_CAPTURE_LOAD_QKV. What
 * must hold whatever the bytes:
 *  - no crash, no sanitizer report; a failure returns NULL with a message;
 *  - a capture that reads passes pw_problem_check with its own requests;
 *  - reading with PW_CAPTURE_LOAD_QKV accepts exactly what reading without it accepts
 *    (the flag loads tensors, it does not change what is checked);
 *  - read with PW_CAPTURE_LOAD_QKV, written back (pw_capture_write) and read again, it is
 *    the same capture: problem, every array, the scales, the provenance entries, the
 *    synthesised-table flag.
 * Built as a libFuzzer target by scripts/fuzz (clang) and, for the test suite, with
 * tests/fuzz/replay_main.c over the committed corpus and seeded random inputs. Files go to
 * $TMPDIR (default /tmp), named by the process id. */
#define _POSIX_C_SOURCE 200809L /* strdup, getpid, opendir */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "pageweaver_capture.h"

static char g_in[4096], g_out[4096];

static void remove_files(void)
{
    remove(g_in);
    remove(g_out);
}

static void paths(void)
{
    if (g_in[0]) return;
    atexit(remove_files);
    const char *dir = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = "/tmp";
    snprintf(g_in, sizeof g_in, "%s/pw_fuzz_capture_in.%ld.safetensors", dir, (long)getpid());
    snprintf(g_out, sizeof g_out, "%s/pw_fuzz_capture_out.%ld.safetensors", dir, (long)getpid());
}

static int same_array(const void *a, const void *b, size_t bytes)
{
    if (!a || !b) return a == b;
    return bytes == 0 || memcmp(a, b, bytes) == 0;
}

/* The two captures hold the same data (c2 read back from what c was written as). */
static void check_same(const pw_capture_t *c, const pw_capture_t *c2, unsigned flags)
{
    const pw_problem_t *p = &c->problem, *p2 = &c2->problem;
    CHECK(p->num_tokens == p2->num_tokens && p->num_requests == p2->num_requests &&
              p->num_kv_heads == p2->num_kv_heads && p->q_heads_per_kv == p2->q_heads_per_kv &&
              p->head_dim == p2->head_dim && p->page_size == p2->page_size && p->topk == p2->topk &&
              p->max_pages_per_request == p2->max_pages_per_request &&
              p->num_cache_pages == p2->num_cache_pages,
          "problem shapes differ after a write and a read");
    CHECK(memcmp(&p->softmax_scale, &p2->softmax_scale, sizeof(float)) == 0, "softmax_scale %.9g -> %.9g",
          (double)p->softmax_scale, (double)p2->softmax_scale);
    const size_t n = (size_t)p->num_tokens, r = (size_t)p->num_requests;
    CHECK(same_array(c->topk_ids, c2->topk_ids, (size_t)p->num_kv_heads * n * (size_t)p->topk * 4), "topk_ids differ");
    CHECK(same_array(c->cu_seqlens_q, c2->cu_seqlens_q, (r + 1) * 4), "cu_seqlens_q differ");
    CHECK(same_array(c->prefix_lens, c2->prefix_lens, r * 4), "prefix_lens differ");
    CHECK(same_array(c->kv_lens, c2->kv_lens, r * 4), "kv_lens differ");
    CHECK(same_array(c->page_table, c2->page_table, r * (size_t)p->max_pages_per_request * 4), "page_table differs");
    CHECK(c->page_table_synthesised == c2->page_table_synthesised, "page_table_synthesised %d -> %d",
          c->page_table_synthesised, c2->page_table_synthesised);
    CHECK(c2->topk_was_i16 == 0, "written as I32, read as I16");
    CHECK(c->qkv_seed == c2->qkv_seed, "qkv_seed differs");
    if (flags & PW_CAPTURE_LOAD_QKV) {
        const size_t hq = (size_t)p->num_kv_heads * (size_t)p->q_heads_per_kv;
        CHECK(same_array(c->q, c2->q, n * hq * (size_t)p->head_dim * 2), "q differs");
        const size_t cache = (size_t)p->num_cache_pages * (size_t)p->page_size * (size_t)p->num_kv_heads *
                             (size_t)p->head_dim;
        CHECK(same_array(c->k_cache, c2->k_cache, cache) && same_array(c->v_cache, c2->v_cache, cache),
              "caches differ");
        if (c->k_cache) {
            CHECK(memcmp(&c->k_scale, &c2->k_scale, 4) == 0 && memcmp(&c->v_scale, &c2->v_scale, 4) == 0,
                  "scales differ");
        }
    }
    CHECK(c->num_meta == c2->num_meta, "%d provenance entries -> %d", c->num_meta, c2->num_meta);
    for (int32_t i = 0; i < c->num_meta; i++)
        CHECK(!strcmp(c->meta[i].key, c2->meta[i].key) && !strcmp(c->meta[i].value, c2->meta[i].value),
              "provenance entry %d differs", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    paths();
    FILE *f = fopen(g_in, "wb");
    CHECK(f, "cannot create %s", g_in);
    CHECK(size == 0 || fwrite(data, 1, size, f) == size, "cannot write %s", g_in);
    CHECK(fclose(f) == 0, "cannot write %s", g_in);

    pw_status_t status[2];
    for (unsigned flags = 0; flags <= PW_CAPTURE_LOAD_QKV; flags++) {
        pw_capture_t *c = (pw_capture_t *)(uintptr_t)1; /* must be overwritten */
        const pw_status_t st = FRESH(pw_capture_read(g_in, flags, &c));
        status[flags] = st;
        if (st != PW_SUCCESS) {
            CHECK(c == NULL, "a failed read left *out non-NULL");
            check_failure_message(st, "pw_capture_read");
            continue;
        }
        CHECK(c != NULL, "a successful read gave NULL");
        pw_requests_t rq = pw_capture_requests(c);
        CHECK(pw_problem_check(&c->problem, &rq) == PW_SUCCESS, "a capture that reads fails pw_problem_check: %s",
              pw_last_error());
        /* Round trip of what was loaded: without PW_CAPTURE_LOAD_QKV the caches are not in
         * memory, so a write drops them (and the cache size would come from the table). */
        if (!(flags & PW_CAPTURE_LOAD_QKV)) {
            pw_capture_free(c);
            continue;
        }
        const pw_status_t w = FRESH(pw_capture_write(g_out, c, 0));
        CHECK(w == PW_SUCCESS || w == PW_ERROR_IO || w == PW_ERROR_OUT_OF_MEMORY,
              "a capture that reads cannot be written: %s: %s", pw_status_string(w), pw_last_error());
        if (w == PW_SUCCESS) {
            pw_capture_t *c2 = NULL;
            const pw_status_t r2 = FRESH(pw_capture_read(g_out, flags, &c2));
            CHECK(r2 == PW_SUCCESS, "the written capture does not read: %s", pw_last_error());
            check_same(c, c2, flags);
            pw_capture_free(c2);
        }
        pw_capture_free(c);
    }
    /* Out of memory can strike one read and not the other; anything else must agree. */
    if (status[0] != PW_ERROR_OUT_OF_MEMORY && status[1] != PW_ERROR_OUT_OF_MEMORY)
        CHECK((status[0] == PW_SUCCESS) == (status[1] == PW_SUCCESS), "without QKV: %s, with: %s",
              pw_status_string(status[0]), pw_status_string(status[1]));
    return 0;
}
