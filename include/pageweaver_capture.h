/*
 * pageweaver_capture.h — capture files: the inputs of one prefill call of one attention
 * layer (Top-K page selections, request layout, optionally Q and the FP8 KV caches) in a
 * safetensors file. The layout is fixed in docs/capture-format.md (format version 1);
 * this module reads and writes it (library libpageweaver_capture, links cJSON).
 *
 * Like the core library, nothing here prints or exits: every function returns a
 * pw_status_t and, on failure, pw_last_error() names the file and the field at fault, e.g.
 *   "run.safetensors: topk_ids: dtype F32, expected I32 or I16".
 */
#ifndef PAGEWEAVER_CAPTURE_H
#define PAGEWEAVER_CAPTURE_H

#include <stdint.h>

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PW_CAPTURE_FORMAT "pageweaver.capture" /* __metadata__["format"] */
#define PW_CAPTURE_FORMAT_VERSION 1            /* __metadata__["format_version"] */

/* One provenance entry of __metadata__ (model, text, layer, selector, ...). */
typedef struct pw_capture_meta {
    char *key;   /* NUL-terminated, owned by the capture */
    char *value; /* NUL-terminated, owned by the capture */
} pw_capture_meta_t;

/* A capture in memory. Every pointer is owned by the capture (malloc'ed by this module)
 * and released by pw_capture_free. Shapes use the names of pageweaver.h. */
typedef struct pw_capture {
    pw_problem_t problem;  /* N, R, Hkv, G, D, P, K, max_pages_per_request, num_cache_pages,
                              softmax_scale (0 when the file has none: 1/sqrt(D)) */
    int32_t *topk_ids;     /* [Hkv, N, K] logical page ids (I16 files are widened) */
    int32_t *cu_seqlens_q; /* [R+1] */
    int32_t *prefix_lens;  /* [R] tokens */
    int32_t *kv_lens;      /* [R] tokens */
    int32_t *page_table;   /* [R, max_pages_per_request], never NULL after a read */
    int page_table_synthesised; /* 1: the file had no page_table and page_table holds the
                                   documented default r * max_pages + p (not written back) */
    int topk_was_i16;      /* 1: the file stored topk_ids as I16 */
    pw_bf16_t *q;          /* [N, Hkv*G, D] bf16 or NULL */
    pw_fp8_e4m3_t *k_cache; /* [num_cache_pages * P, Hkv, D] e4m3 or NULL */
    pw_fp8_e4m3_t *v_cache; /* same shape as k_cache; NULL iff k_cache is NULL */
    float k_scale;         /* real K = k_scale * e4m3 value (meaningful with k_cache) */
    float v_scale;         /* real V = v_scale * e4m3 value */
    uint64_t qkv_seed;     /* __metadata__["qkv_seed"], 0 when absent */
    int32_t num_meta;      /* provenance entries */
    pw_capture_meta_t *meta; /* [num_meta]: every __metadata__ key except the reserved ones
                                (format, format_version, page_size, q_heads_per_kv,
                                head_dim, softmax_scale, qkv_seed), in file order */
    char *path;            /* file the capture was read from (NULL if created in memory) */
} pw_capture_t;

/* Flags of pw_capture_read / pw_capture_create. */
enum {
    /* Load q, k_cache, v_cache, k_scale, v_scale when the file has them. Without this
     * flag they are still checked (dtype, shape, offsets) but not read: a stats pass over
     * a large capture reads only the int32 tensors. */
    PW_CAPTURE_LOAD_QKV = 1u << 0,
    /* After loading: generate whatever of Q / K,V the file lacks with
     * pw_capture_generate_qkv(capture, qkv_seed) (Q alone, or the caches alone). */
    PW_CAPTURE_GENERATE_QKV = 1u << 1
};

/* Most entries of the default page table a reader makes up for a file without its
 * page_table (R x ceil(max(kv_lens) / P)): 2^26 (256 MiB of int32). A file whose default
 * layout needs more is refused (PW_ERROR_FORMAT; pw_capture_write refuses to write one,
 * PW_ERROR_INVALID_ARGUMENT): a few hundred bytes of header could otherwise make a reader
 * allocate and fill gigabytes. Such captures store their page_table (since 2026-12-05). */
#define PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES (1ll << 26)

/* Most bytes of Q and K / V caches that PW_CAPTURE_GENERATE_QKV generates for a file that
 * lacks them (N x Hq x D x 2 for Q, 2 x num_cache_pages x P x Hkv x D for the caches): 2^31
 * (2 GiB; the largest shipped or generated input needs ~0.3 GB). Their size comes from the
 * header alone (a 700-byte file with kv_lens of 2M tokens and 8 KV heads asked for 4 GB
 * and minutes of generation), so a file past it is refused (PW_ERROR_FORMAT, naming the
 * sizes): such a capture stores its Q / K / V. pw_capture_generate_qkv itself has no cap
 * (since 2026-12-06). */
#define PW_CAPTURE_MAX_GENERATED_BYTES (1ll << 31)

/* Flags of pw_capture_write. */
enum {
    PW_CAPTURE_WRITE_TOPK_I16 = 1u << 0 /* store topk_ids as I16 (every id must fit) */
};

/* Reads a capture file.
 *   path:  a safetensors file in the layout of docs/capture-format.md.
 *   flags: PW_CAPTURE_LOAD_QKV, PW_CAPTURE_GENERATE_QKV (bitwise or), or 0.
 *   out:   receives a new capture (free with pw_capture_free); NULL on failure.
 * Derived fields: problem.max_pages_per_request is the page table's column count, or
 * ceil(max(kv_lens) / P) without a page table; problem.num_cache_pages is
 * slots / P of the caches when present, else R * max_pages without a page table, else
 * max(page_table) + 1. The result passes pw_problem_check.
 * Sizes are 64-bit; nothing read from the file is trusted before it is checked against
 * the file length.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL path/out, unknown flag),
 *         PW_ERROR_IO (cannot open or read, truncated: bytes expected vs present),
 *         PW_ERROR_FORMAT (header length, JSON (also: nested deeper than cJSON's
 *         CJSON_NESTING_LIMIT), a key or string that is not UTF-8, missing tensor, dtype,
 *         shape, data_offsets out of range or overlapping, cache slots not a multiple of
 *         page_size (the caches are [pages * P, Hkv, D], docs/semantics.md section 6), k_scale or
 *         v_scale not finite and > 0 (checked with or without PW_CAPTURE_LOAD_QKV), metadata,
 *         request layout, with a hint when topk_ids looks like [N, Hkv, K]; the message
 *         names the file and the field. Names are quoted from the file as they are (they
 *         may hold control bytes: escape them before printing), except in the UTF-8
 *         errors, which show the offending string with bytes outside printable ASCII as
 *         \xNN),
 *         PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_capture_read(const char *path, unsigned flags, pw_capture_t **out);

/* Creates an empty capture for `problem` (copied): zeroed topk_ids, cu_seqlens_q,
 * prefix_lens, kv_lens and a page_table of [R, problem->max_pages_per_request] filled
 * with the default r * max_pages + p (page_table_synthesised = 1: set it to 0 after
 * filling in a real one to have it written). With PW_CAPTURE_LOAD_QKV also zeroed q and
 * caches of problem->num_cache_pages * P slots, scales 1. The caller fills the arrays.
 * Errors: PW_ERROR_INVALID_ARGUMENT (shapes as in pw_problem_check), PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_capture_create(const pw_problem_t *problem, unsigned flags, pw_capture_t **out);

/* Releases a capture and everything it owns. Accepts NULL. */
void pw_capture_free(pw_capture_t *capture);

/* Writes a capture file (format version 1): topk_ids (I32, or I16 with
 * PW_CAPTURE_WRITE_TOPK_I16), cu_seqlens_q, prefix_lens, kv_lens, page_table unless
 * page_table_synthesised, q when non-NULL, k_cache/v_cache/k_scale/v_scale when both
 * caches are non-NULL; __metadata__ gets format, format_version, page_size,
 * q_heads_per_kv, head_dim, qkv_seed, softmax_scale (when non-zero, "%.9g") and the
 * provenance entries. Tensors are contiguous in the order above; the header is padded
 * with spaces to a multiple of 8 bytes (as the safetensors reference writer does).
 * Atomic for a regular file (or a new path): the bytes go to a temporary file
 * "<path>.tmp.<pid>.<n>" in the same directory, which is flushed, synced and renamed over
 * the target (a symbolic link's final target) only when complete; on any failure only
 * the temporary file is removed and an existing capture keeps its old contents. A path
 * that is not a regular file (a device such as /dev/full, a pipe) is written in place and
 * never removed.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL arrays, request layout, an I16 id out of
 *         range, only one of the caches, with the caches a k_scale or v_scale that is not
 *         finite and > 0; page_table_synthesised with
 *         problem.max_pages_per_request != ceil(max(kv_lens) / P): the reader rebuilds
 *         the default table from kv_lens, so the shapes would not round-trip),
 *         PW_ERROR_IO (cannot create or write the file, its directory does not exist,
 *         the path is a directory; the message names the path and the system error),
 *         PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_capture_write(const char *path, const pw_capture_t *capture, unsigned flags);

/* The request view of a capture (pointers into it; page_table stride = max_pages). */
pw_requests_t pw_capture_requests(const pw_capture_t *capture);

/* Value of a provenance entry, or NULL. */
const char *pw_capture_get_meta(const pw_capture_t *capture, const char *key);

/* Adds or replaces a provenance entry (reserved keys are refused: set the struct fields).
 * Key and value must be UTF-8 (the header is JSON text; readers such as the Python
 * safetensors package refuse anything else).
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL, empty or reserved key, key or value not valid
 *         UTF-8: overlong forms, surrogates and code points above U+10FFFF are refused),
 *         PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_capture_set_meta(pw_capture_t *capture, const char *key, const char *value);

/* Replaces q, k_cache and v_cache by generated values (the documented generator, also in
 * docs/capture-format.md, so that any language can reproduce it bit for bit):
 *
 *   splitmix64 stream, one per tensor, state0 = seed XOR tag with tag 0x51 ('Q') for q,
 *   0x4b ('K') for k_cache, 0x56 ('V') for v_cache; each step:
 *       state += 0x9e3779b97f4a7c15;  z = state;
 *       z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
 *       z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
 *       output z ^ (z >> 31)                       (all uint64, wrapping)
 *   uniform u = (output >> 11) * 2^-53 in [0, 1) (FP64);
 *   one normal x from two consecutive uniforms u1, u2 (Box-Muller, FP64):
 *       x = sqrt(-2 ln(1 - u1)) * cos(2 pi u2)
 *   q[n][h][d]       = bf16_rne((float)x)          over n, h, d row-major ([N, Hkv*G, D])
 *   k_cache[s][h][d] = e4m3_rne_satfinite((float)(x * 64))   over s, h, d row-major
 *   v_cache          = the same with the 'V' stream;  k_scale = v_scale = 1/64.
 *
 * Caches have problem.num_cache_pages * P slots. The libm functions (log, cos, sqrt) are
 * the only platform dependence; after rounding to BF16 / E4M3 a last-bit libm difference
 * almost never shows.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL), PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_capture_generate_qkv(pw_capture_t *capture, uint64_t seed);

/* Generates only the parts selected by `parts` (PW_CAPTURE_PART_Q, PW_CAPTURE_PART_KV)
 * with the generator above; the other parts are left unchanged.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL capture, a bit of `parts` other than those two),
 *         PW_ERROR_OUT_OF_MEMORY. */
enum { PW_CAPTURE_PART_Q = 1u << 0, PW_CAPTURE_PART_KV = 1u << 1 };
pw_status_t pw_capture_generate_parts(pw_capture_t *capture, uint64_t seed, unsigned parts);

#ifdef __cplusplus
}
#endif
#endif /* PAGEWEAVER_CAPTURE_H */
