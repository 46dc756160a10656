/* Capture files (docs/capture-format.md): safetensors = 8-byte little-endian header length,
 * a JSON header (cJSON) naming each tensor's dtype, shape and byte range in the data
 * section, then the raw little-endian tensor bytes. The binary parts are read by hand.
 *
 * Every size that comes from the file is checked against the file length before it is
 * used to allocate or seek: a corrupt or hostile header gives PW_ERROR_FORMAT / _IO, never
 * a huge allocation or a read past the end. Offsets are 64-bit throughout. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 + realpath */
#define _FILE_OFFSET_BITS 64

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"
#include "pw_internal.h"

/* The safetensors reference implementation refuses headers above 100 MB; so do we. */
#define PW_MAX_HEADER_BYTES 100000000ull
#define PW_MAX_DIMS 16
/* Offsets and shapes are JSON numbers (doubles in cJSON): exact up to 2^53. */
#define PW_MAX_JSON_INT 9007199254740992.0

/* ---- dtypes ------------------------------------------------------------------------ */
typedef struct dtype_info {
    const char *name;
    int64_t size; /* bytes per element */
} dtype_info_t;

static const dtype_info_t k_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
};

static const dtype_info_t *dtype_find(const char *name)
{
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(k_dtypes[i].name, name) == 0) return &k_dtypes[i];
    return NULL;
}

/* ---- small helpers ----------------------------------------------------------------- */
static char *dup_string(const char *s)
{
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* 1 if s is well-formed UTF-8 (no overlong forms, surrogates or code points above
 * U+10FFFF): safetensors headers are JSON text, which must be UTF-8. */
static int utf8_valid(const char *s)
{
    const unsigned char *b = (const unsigned char *)s;
    while (*b) {
        const unsigned c = *b;
        int more;
        uint32_t cp, min;
        if (c < 0x80) {
            b++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            more = 1, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        for (int i = 1; i <= more; i++) {
            if ((b[i] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (b[i] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        b += more + 1;
    }
    return 1;
}

/* Copies at most cap-1 bytes of s into buf for an error message: printable ASCII as is,
 * every other byte as \xNN (a name from a damaged file may hold anything). */
static const char *escaped(char *buf, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t used = 0;
    for (const unsigned char *b = (const unsigned char *)s; *b && used + 5 < cap; b++) {
        if (*b >= 32 && *b < 127 && *b != '\\') {
            buf[used++] = (char)*b;
        } else {
            buf[used++] = '\\';
            buf[used++] = 'x';
            buf[used++] = hex[*b >> 4];
            buf[used++] = hex[*b & 15];
        }
    }
    buf[used] = '\0';
    return buf;
}

/* Whether `bytes` can be held at all: no more than the machine's physical memory. The
 * tensors allocated here are then written in full, and with memory overcommit (Linux
 * vm.overcommit_memory = 1, common on GPU hosts) a malloc of terabytes succeeds and the
 * writes that follow page until the process is killed: the size is refused first. */
static int fits_memory(uint64_t bytes)
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes / (uint64_t)page > (uint64_t)pages) return 0;
#endif
    (void)bytes;
    return 1;
}

static void *alloc_bytes(int64_t bytes)
{
    if (bytes < 0 || (uint64_t)bytes > (uint64_t)SIZE_MAX || !fits_memory((uint64_t)bytes)) return NULL;
    return malloc(bytes > 0 ? (size_t)bytes : 1);
}

static void *alloc_zeroed(int64_t count, int64_t elem)
{
    if (count < 0 || elem <= 0 || (uint64_t)count > (uint64_t)SIZE_MAX / (uint64_t)elem) return NULL;
    if (!fits_memory((uint64_t)count * (uint64_t)elem)) return NULL;
    return calloc(count > 0 ? (size_t)count : 1, (size_t)elem);
}

/* Product of non-negative factors, or -1 on overflow of int64. */
static int64_t checked_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0) return 0;
    if (a > INT64_MAX / b) return -1;
    return a * b;
}

static int32_t load_i32_le(const unsigned char *b)
{
    const uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                       ((uint32_t)b[3] << 24);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static int16_t load_i16_le(const unsigned char *b)
{
    const uint16_t u = (uint16_t)(b[0] | (b[1] << 8));
    int16_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static void store_u32_le(unsigned char *b, uint32_t u)
{
    b[0] = (unsigned char)u;
    b[1] = (unsigned char)(u >> 8);
    b[2] = (unsigned char)(u >> 16);
    b[3] = (unsigned char)(u >> 24);
}

/* Formats "[a, b, c]" into buf. */
static const char *shape_string(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, cap - used, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* Parses a whole decimal string as an integer in [lo, hi]. */
static int parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s) return 0;
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (*p < '0' || *p > '9') return 0;
    errno = 0;
    char *end = NULL;
    const long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return 0;
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return 0;
    *out = v;
    return 1;
}

/* ---- the header of one tensor ------------------------------------------------------ */
typedef struct tensor_entry {
    const char *name;          /* points into the cJSON tree */
    const dtype_info_t *dtype;
    const char *dtype_name;
    int ndim;
    int64_t shape[PW_MAX_DIMS];
    int64_t begin, end;        /* byte range inside the data section */
} tensor_entry_t;

typedef struct reader {
    const char *path;
    FILE *file;
    int64_t file_size;
    int64_t data_start; /* 8 + header length */
    int64_t data_size;  /* file_size - data_start */
} reader_t;

static int json_uint(const cJSON *item, int64_t *out)
{
    if (!cJSON_IsNumber(item)) return 0;
    const double v = item->valuedouble;
    if (!(v >= 0.0) || v > PW_MAX_JSON_INT || floor(v) != v) return 0;
    *out = (int64_t)v;
    return 1;
}

/* Why json_uint refuses an item: "is negative", "is too large (...)", ... */
static const char *json_uint_problem(const cJSON *item)
{
    if (!cJSON_IsNumber(item)) return "is not a number";
    const double v = item->valuedouble;
    if (v != v) return "is not a number";
    if (v < 0.0) return "is negative";
    if (floor(v) != v && v <= PW_MAX_JSON_INT) return "is not an integer";
    return "is too large (at most 2^53)";
}

static pw_status_t parse_tensor_entry(const reader_t *rd, const cJSON *item, tensor_entry_t *t)
{
    memset(t, 0, sizeof *t);
    t->name = item->string;
    if (!cJSON_IsObject(item))
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: header entry is not a JSON object", rd->path,
                       t->name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype))
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: \"dtype\" missing or not a string", rd->path,
                       t->name);
    t->dtype_name = dtype->valuestring;
    t->dtype = dtype_find(dtype->valuestring);
    if (!t->dtype)
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: unknown dtype '%.32s'", rd->path, t->name,
                       dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: \"shape\" missing or not an array", rd->path,
                       t->name);
    const int ndim = cJSON_GetArraySize(shape);
    if (ndim > PW_MAX_DIMS)
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: shape has %d dimensions (at most %d)", rd->path,
                       t->name, ndim, PW_MAX_DIMS);
    t->ndim = ndim;
    int i = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape)
    {
        if (!json_uint(dim, &t->shape[i])) {
            if (cJSON_IsNumber(dim)) /* an integer as one (2^62, not 4.6116860184273879e+18) */
                return pw_fail(PW_ERROR_FORMAT,
                               floor(dim->valuedouble) == dim->valuedouble && fabs(dim->valuedouble) < 1e30
                                   ? "%s: %s: shape[%d] = %.0f %s"
                                   : "%s: %s: shape[%d] = %.17g %s",
                               rd->path, t->name, i, dim->valuedouble, json_uint_problem(dim));
            return pw_fail(PW_ERROR_FORMAT, "%s: %s: shape[%d] %s (a non-negative integer)", rd->path,
                           t->name, i, json_uint_problem(dim));
        }
        i++;
    }
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_uint(cJSON_GetArrayItem(offsets, 0), &t->begin) ||
        !json_uint(cJSON_GetArrayItem(offsets, 1), &t->end))
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: %s: \"data_offsets\" must be [begin, end] non-negative integers",
                       rd->path, t->name);
    if (t->end < t->begin)
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: data_offsets [%lld, %lld] end before begin",
                       rd->path, t->name, (long long)t->begin, (long long)t->end);
    int64_t elems = 1;
    for (i = 0; i < ndim && elems >= 0; i++) elems = checked_mul(elems, t->shape[i]);
    const int64_t bytes = elems < 0 ? -1 : checked_mul(elems, t->dtype->size);
    char sbuf[160];
    if (bytes < 0)
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: shape %s is too large", rd->path, t->name,
                       shape_string(sbuf, sizeof sbuf, ndim, t->shape));
    if (bytes != t->end - t->begin)
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: %s: data_offsets [%lld, %lld] hold %lld bytes, dtype %s shape %s "
                       "needs %lld",
                       rd->path, t->name, (long long)t->begin, (long long)t->end,
                       (long long)(t->end - t->begin), t->dtype_name,
                       shape_string(sbuf, sizeof sbuf, ndim, t->shape), (long long)bytes);
    return PW_SUCCESS;
}

static int compare_by_begin(const void *a, const void *b)
{
    const tensor_entry_t *x = *(const tensor_entry_t *const *)a;
    const tensor_entry_t *y = *(const tensor_entry_t *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Every range inside the data section, no two non-empty ranges overlapping. A header whose
 * ranges tile [0, max_end) exactly but run past the end of the file is a truncated file
 * (PW_ERROR_IO); any other range past the end is a bad header (PW_ERROR_FORMAT). */
static pw_status_t check_ranges(const reader_t *rd, tensor_entry_t *tensors, int count)
{
    if (count == 0) return PW_SUCCESS;
    tensor_entry_t **order = malloc((size_t)count * sizeof *order);
    if (!order) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", rd->path);
    for (int i = 0; i < count; i++) order[i] = &tensors[i];
    qsort(order, (size_t)count, sizeof *order, compare_by_begin);
    pw_status_t st = PW_SUCCESS;
    int tiled = order[0]->begin == 0;
    int64_t max_end = 0;
    const tensor_entry_t *prev = NULL;
    for (int i = 0; i < count; i++) {
        const tensor_entry_t *t = order[i];
        if (t->begin == t->end) continue; /* empty tensors occupy nothing */
        if (prev && t->begin < prev->end) {
            st = pw_fail(PW_ERROR_FORMAT,
                         "%s: data_offsets of %s [%lld, %lld] and %s [%lld, %lld] overlap",
                         rd->path, prev->name, (long long)prev->begin, (long long)prev->end,
                         t->name, (long long)t->begin, (long long)t->end);
            goto done;
        }
        if (prev && t->begin != prev->end) tiled = 0;
        if (!prev && t->begin != 0) tiled = 0;
        if (t->end > max_end) max_end = t->end;
        prev = t;
    }
    if (max_end > rd->data_size) {
        if (tiled) {
            st = pw_fail(PW_ERROR_IO,
                         "%s: truncated: header and tensors need %lld bytes, the file has %lld",
                         rd->path, (long long)(rd->data_start + max_end),
                         (long long)rd->file_size);
            goto done;
        }
        for (int i = 0; i < count; i++) {
            const tensor_entry_t *t = order[i];
            if (t->end > rd->data_size) {
                st = pw_fail(PW_ERROR_FORMAT,
                             "%s: %s: data_offsets [%lld, %lld] out of range: the data section "
                             "has %lld bytes",
                             rd->path, t->name, (long long)t->begin, (long long)t->end,
                             (long long)rd->data_size);
                goto done;
            }
        }
    }
done:
    free(order);
    return st;
}

static const tensor_entry_t *find_tensor(const tensor_entry_t *tensors, int count,
                                         const char *name)
{
    for (int i = 0; i < count; i++)
        if (strcmp(tensors[i].name, name) == 0) return &tensors[i];
    return NULL;
}

/* Checks the dtype and the shape of one tensor against the expected values
 * (expected[d] < 0: any size). `what` describes the expectation, e.g. "[R+1]". */
static pw_status_t expect_tensor(const reader_t *rd, const tensor_entry_t *t, const char *dt1,
                                 const char *dt2, int ndim, const int64_t *expected,
                                 const char *what)
{
    if (strcmp(t->dtype_name, dt1) != 0 && (!dt2 || strcmp(t->dtype_name, dt2) != 0)) {
        if (dt2)
            return pw_fail(PW_ERROR_FORMAT, "%s: %s: dtype %s, expected %s or %s", rd->path,
                           t->name, t->dtype_name, dt1, dt2);
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: dtype %s, expected %s", rd->path, t->name,
                       t->dtype_name, dt1);
    }
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        if (expected && expected[d] >= 0 && expected[d] != t->shape[d]) ok = 0;
    if (!ok) {
        char got[160], want[160];
        shape_string(got, sizeof got, t->ndim, t->shape);
        if (expected) {
            int64_t shown[PW_MAX_DIMS];
            int any_free = 0;
            for (int d = 0; d < ndim; d++) {
                shown[d] = expected[d];
                if (expected[d] < 0) any_free = 1;
            }
            if (!any_free) {
                shape_string(want, sizeof want, ndim, shown);
                return pw_fail(PW_ERROR_FORMAT, "%s: %s: shape %s, expected %s = %s", rd->path,
                               t->name, got, what, want);
            }
        }
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: shape %s, expected %s", rd->path, t->name, got,
                       what);
    }
    return PW_SUCCESS;
}

static pw_status_t read_range(const reader_t *rd, const tensor_entry_t *t, void *buf)
{
    const int64_t bytes = t->end - t->begin;
    if (bytes == 0) return PW_SUCCESS;
    if (fseeko(rd->file, (off_t)(rd->data_start + t->begin), SEEK_SET) != 0)
        return pw_fail(PW_ERROR_IO, "%s: %s: cannot seek to byte %lld: %s", rd->path, t->name,
                       (long long)(rd->data_start + t->begin), strerror(errno));
    const size_t got = fread(buf, 1, (size_t)bytes, rd->file);
    if (got != (size_t)bytes)
        return pw_fail(PW_ERROR_IO, "%s: %s: truncated: expected %lld bytes at offset %lld, "
                       "read %zu",
                       rd->path, t->name, (long long)bytes, (long long)(rd->data_start + t->begin),
                       got);
    return PW_SUCCESS;
}

/* Reads an I32 or I16 tensor into a new int32 array. */
static pw_status_t read_int_tensor(const reader_t *rd, const tensor_entry_t *t, int32_t **out)
{
    const int64_t bytes = t->end - t->begin;
    const int64_t esize = t->dtype->size;
    const int64_t count = bytes / esize;
    unsigned char *raw = alloc_bytes(bytes);
    int32_t *values = alloc_zeroed(count, sizeof(int32_t));
    if (!raw || !values) {
        free(raw);
        free(values);
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: %s: cannot allocate %lld bytes", rd->path,
                       t->name, (long long)(count * 4));
    }
    const pw_status_t st = read_range(rd, t, raw);
    if (st == PW_SUCCESS) {
        for (int64_t i = 0; i < count; i++)
            values[i] = esize == 2 ? (int32_t)load_i16_le(raw + 2 * i) : load_i32_le(raw + 4 * i);
    }
    free(raw);
    if (st != PW_SUCCESS) {
        free(values);
        return st;
    }
    *out = values;
    return PW_SUCCESS;
}

/* Reads a tensor's bytes as they are (u8 / e4m3) or as little-endian u16 (bf16). */
static pw_status_t read_raw_tensor(const reader_t *rd, const tensor_entry_t *t, void **out)
{
    const int64_t bytes = t->end - t->begin;
    unsigned char *raw = alloc_bytes(bytes);
    if (!raw)
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: %s: cannot allocate %lld bytes", rd->path,
                       t->name, (long long)bytes);
    const pw_status_t st = read_range(rd, t, raw);
    if (st != PW_SUCCESS) {
        free(raw);
        return st;
    }
    if (t->dtype->size == 2) { /* to host order in place */
        for (int64_t i = 0; i < bytes / 2; i++) {
            const uint16_t v = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
            memcpy(raw + 2 * i, &v, 2);
        }
    }
    *out = raw;
    return PW_SUCCESS;
}

static pw_status_t read_scale(const reader_t *rd, const tensor_entry_t *t, float *out)
{
    unsigned char raw[4];
    PW_TRY(read_range(rd, t, raw));
    const int32_t bits = load_i32_le(raw);
    memcpy(out, &bits, sizeof *out);
    if (!(isfinite(*out) && *out > 0.0f)) /* docs/capture-format.md (pw_capture_write refuses them too) */
        return pw_fail(PW_ERROR_FORMAT, "%s: %s is %g: a capture's scales must be finite and > 0", rd->path, t->name,
                       (double)*out);
    return PW_SUCCESS;
}

/* ---- metadata ------------------------------------------------------------------------ */
static const char *const k_reserved_keys[] = {"format",   "format_version", "page_size",
                                              "q_heads_per_kv", "head_dim", "softmax_scale",
                                              "qkv_seed"};

static int is_reserved_key(const char *key)
{
    for (size_t i = 0; i < sizeof k_reserved_keys / sizeof k_reserved_keys[0]; i++)
        if (strcmp(key, k_reserved_keys[i]) == 0) return 1;
    return 0;
}

static pw_status_t meta_append(pw_capture_t *c, const char *key, const char *value)
{
    pw_capture_meta_t *grown = realloc(c->meta, ((size_t)c->num_meta + 1) * sizeof *grown);
    if (!grown) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "out of memory (capture metadata)");
    c->meta = grown;
    char *k = dup_string(key), *v = dup_string(value);
    if (!k || !v) {
        free(k);
        free(v);
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "out of memory (capture metadata)");
    }
    c->meta[c->num_meta].key = k;
    c->meta[c->num_meta].value = v;
    c->num_meta++;
    return PW_SUCCESS;
}

static pw_status_t meta_required_int(const reader_t *rd, const cJSON *meta, const char *key,
                                     int64_t *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(meta, key);
    if (!item)
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.%s: missing (required)", rd->path, key);
    if (!parse_int64(item->valuestring, 1, INT32_MAX, out))
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.%s is '%.40s', expected a positive "
                       "integer",
                       rd->path, key, item->valuestring);
    return PW_SUCCESS;
}

/* Fills problem fields, qkv_seed and the provenance list from __metadata__. */
static pw_status_t parse_metadata(const reader_t *rd, const cJSON *meta, pw_capture_t *c)
{
    if (!meta)
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: __metadata__: missing (a capture needs format=" PW_CAPTURE_FORMAT
                       ", format_version, page_size, q_heads_per_kv, head_dim)",
                       rd->path);
    if (!cJSON_IsObject(meta))
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__: not a JSON object", rd->path);
    const cJSON *item;
    cJSON_ArrayForEach(item, meta)
    {
        if (!cJSON_IsString(item))
            return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.%s: value is not a string",
                           rd->path, item->string);
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(meta, "format");
    if (!format)
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.format: missing (expected '%s')",
                       rd->path, PW_CAPTURE_FORMAT);
    if (strcmp(format->valuestring, PW_CAPTURE_FORMAT) != 0)
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.format is '%.40s', expected '%s'",
                       rd->path, format->valuestring, PW_CAPTURE_FORMAT);
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(meta, "format_version");
    int64_t v = 0;
    if (!version)
        return pw_fail(PW_ERROR_FORMAT, "%s: __metadata__.format_version: missing (expected '%d')",
                       rd->path, PW_CAPTURE_FORMAT_VERSION);
    if (!parse_int64(version->valuestring, 0, INT32_MAX, &v) || v != PW_CAPTURE_FORMAT_VERSION)
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: __metadata__.format_version is '%.40s', this reader reads version %d",
                       rd->path, version->valuestring, PW_CAPTURE_FORMAT_VERSION);
    int64_t page_size, g, d;
    PW_TRY(meta_required_int(rd, meta, "page_size", &page_size));
    PW_TRY(meta_required_int(rd, meta, "q_heads_per_kv", &g));
    PW_TRY(meta_required_int(rd, meta, "head_dim", &d));
    c->problem.page_size = (int32_t)page_size;
    c->problem.q_heads_per_kv = (int32_t)g;
    c->problem.head_dim = (int32_t)d;
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(meta, "softmax_scale");
    if (scale) {
        char *end = NULL;
        const double s = strtod(scale->valuestring, &end);
        if (end == scale->valuestring || *end != '\0' || !(s > 0.0) || !isfinite(s) ||
            s > 3.0e38 || (float)s == 0.0f) /* (rounds to 0 = the default 1/sqrt(D)) */
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: __metadata__.softmax_scale is '%.40s', expected a positive "
                           "finite number (not 0 as a float32)",
                           rd->path, scale->valuestring);
        c->problem.softmax_scale = (float)s;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(meta, "qkv_seed");
    if (seed && !parse_u64(seed->valuestring, &c->qkv_seed))
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: __metadata__.qkv_seed is '%.40s', expected an unsigned 64-bit integer",
                       rd->path, seed->valuestring);
    cJSON_ArrayForEach(item, meta)
    {
        if (!is_reserved_key(item->string)) PW_TRY(meta_append(c, item->string, item->valuestring));
    }
    return PW_SUCCESS;
}

/* ---- reading ------------------------------------------------------------------------- */
static pw_status_t open_reader(reader_t *rd, const char *path)
{
    memset(rd, 0, sizeof *rd);
    rd->path = path;
    rd->file = fopen(path, "rb");
    if (!rd->file) return pw_fail(PW_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(rd->file), &sb) != 0)
        return pw_fail(PW_ERROR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return pw_fail(PW_ERROR_IO, "%s: not a regular file", path);
    rd->file_size = (int64_t)sb.st_size;
    return PW_SUCCESS;
}

static int compare_key_ptrs(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A JSON object whose keys repeat is refused (check_utf8_tree calls this for every object):
 * cJSON would answer lookups with the first value and other readers (Python's json) with
 * the last, so the two readers of this format would read different files. Sorted copy of
 * the keys: n log n per object. */
static pw_status_t check_unique_keys(const reader_t *rd, const cJSON *obj, const char *what)
{
    size_t n = 0;
    for (const cJSON *it = obj->child; it; it = it->next) n++;
    if (n < 2) return PW_SUCCESS;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", rd->path);
    size_t i = 0;
    for (const cJSON *it = obj->child; it; it = it->next) keys[i++] = it->string ? it->string : "";
    qsort(keys, n, sizeof *keys, compare_key_ptrs);
    pw_status_t st = PW_SUCCESS;
    for (i = 1; i < n; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            char buf[96];
            st = pw_fail(PW_ERROR_FORMAT, "%s: %s: key '%s' appears more than once", rd->path, what,
                         escaped(buf, sizeof buf, keys[i]));
            break;
        }
    free(keys);
    return st;
}

/* Every key and string value of the header must be UTF-8 (JSON text is; the Python
 * safetensors package refuses anything else). The message names the key, escaped. */
static pw_status_t check_utf8_tree(const reader_t *rd, const cJSON *item, const char *owner)
{
    char buf[96], vbuf[64];
    for (const cJSON *child = item->child; child; child = child->next) {
        if (child->string && !utf8_valid(child->string))
            return pw_fail(PW_ERROR_FORMAT, "%s: header: key '%s' is not valid UTF-8", rd->path,
                           escaped(buf, sizeof buf, child->string));
        const char *name = child->string ? child->string : owner;
        if (cJSON_IsString(child) && child->valuestring && !utf8_valid(child->valuestring))
            return pw_fail(PW_ERROR_FORMAT, "%s: header: the value of '%s' is not valid UTF-8 "
                           "('%s')",
                           rd->path, escaped(buf, sizeof buf, name),
                           escaped(vbuf, sizeof vbuf, child->valuestring));
        if (child->child) PW_TRY(check_utf8_tree(rd, child, name));
    }
    /* (one walk of the tree: every object's keys also unique) */
    return cJSON_IsObject(item) ? check_unique_keys(rd, item, owner) : PW_SUCCESS;
}

/* Depth of [ / { nesting at byte `at` of the JSON text (strings skipped). */
static int nesting_at(const char *text, size_t at)
{
    int depth = 0, max_depth = 0, in_string = 0;
    for (size_t i = 0; i < at && text[i]; i++) {
        const char ch = text[i];
        if (in_string) {
            if (ch == '\\' && text[i + 1]) i++;
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max_depth) max_depth = depth;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return max_depth;
}

/* What the header's JSON text may hold beyond what cJSON checks, so that every reader
 * gives the same verdict and reads the same values (Python's json and the safetensors
 * readers refuse the rest; found by tests/fuzz and its review, 2026-12-05):
 *  - no raw control byte inside a string, and only space, tab, LF and CR between tokens
 *    (cJSON skips any byte <= 32 and copies strings as they are: a key "page\x14table"
 *    read as an unknown tensor, i.e. a file without its page table);
 *  - no \u0000 escape (cJSON ends the string there: "page_table\u0000x" read as
 *    page_table, where Python sees an unknown tensor);
 *  - no byte order mark (cJSON skips it);
 *  - numbers as JSON integers, -?(0|[1-9][0-9]*) (cJSON reads 60.0, 60e0 and 060 as 60). */
static pw_status_t check_json_text(const reader_t *rd, const char *text, size_t len)
{
    if (len >= 3 && (unsigned char)text[0] == 0xef && (unsigned char)text[1] == 0xbb &&
        (unsigned char)text[2] == 0xbf)
        return pw_fail(PW_ERROR_FORMAT, "%s: header: starts with a UTF-8 byte order mark (JSON text must not)",
                       rd->path);
    int in_string = 0, escaped = 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (in_string) {
            if (escaped) {
                escaped = 0;
                if (c == 'u' && i + 4 < len && memcmp(text + i + 1, "0000", 4) == 0)
                    return pw_fail(PW_ERROR_FORMAT,
                                   "%s: header: \\u0000 inside a JSON string at byte %zu (a NUL cannot be "
                                   "held in a name or a value)",
                                   rd->path, i - 1);
            } else if (c == '\\') {
                escaped = 1;
            } else if (c == '"') {
                in_string = 0;
            } else if (c < 0x20) {
                return pw_fail(PW_ERROR_FORMAT,
                               "%s: header: control byte 0x%02x inside a JSON string at byte %zu (JSON "
                               "needs it escaped)",
                               rd->path, c, i);
            }
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = i;
            while (end < len && (strchr("0123456789+-.eE", text[end]) != NULL) && text[end] != '\0') end++;
            const size_t first = i + (c == '-');
            int integer = first < end;
            for (size_t j = first; j < end; j++) integer = integer && text[j] >= '0' && text[j] <= '9';
            if (integer && end - first > 1 && text[first] == '0') integer = 0; /* a leading zero */
            if (!integer) {
                char shown[24];
                const size_t n = end - i < sizeof shown - 1 ? end - i : sizeof shown - 1;
                memcpy(shown, text + i, n);
                shown[n] = '\0';
                return pw_fail(PW_ERROR_FORMAT,
                               "%s: header: number '%s' at byte %zu is not a JSON integer (shapes and "
                               "data_offsets are written as integers)",
                               rd->path, shown, i);
            }
            i = end - 1;
        } else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            return pw_fail(PW_ERROR_FORMAT, "%s: header: control byte 0x%02x between JSON tokens at byte %zu",
                           rd->path, c, i);
        }
    }
    return PW_SUCCESS;
}

/* Reads and parses the JSON header; *root receives the cJSON tree. */
static pw_status_t read_header(reader_t *rd, cJSON **root)
{
    unsigned char len_bytes[8];
    if (rd->file_size < 8)
        return pw_fail(PW_ERROR_IO,
                       "%s: truncated: expected at least 8 bytes (header length), file has %lld",
                       rd->path, (long long)rd->file_size);
    if (fread(len_bytes, 1, 8, rd->file) != 8)
        return pw_fail(PW_ERROR_IO, "%s: cannot read the header length", rd->path);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | len_bytes[i];
    if (header_len < 2 || header_len > PW_MAX_HEADER_BYTES)
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: header length %llu is not plausible (2..%llu bytes): not a "
                       "safetensors file?",
                       rd->path, (unsigned long long)header_len,
                       (unsigned long long)PW_MAX_HEADER_BYTES);
    if ((int64_t)header_len > rd->file_size - 8)
        return pw_fail(PW_ERROR_IO,
                       "%s: truncated: header length says %llu bytes of JSON, so at least %llu "
                       "bytes are expected, the file has %lld",
                       rd->path, (unsigned long long)header_len,
                       (unsigned long long)(header_len + 8), (long long)rd->file_size);
    rd->data_start = 8 + (int64_t)header_len;
    rd->data_size = rd->file_size - rd->data_start;
    char *text = malloc((size_t)header_len + 1);
    if (!text) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: cannot allocate the header", rd->path);
    if (fread(text, 1, (size_t)header_len, rd->file) != (size_t)header_len) {
        free(text);
        return pw_fail(PW_ERROR_IO, "%s: cannot read the %llu-byte header", rd->path,
                       (unsigned long long)header_len);
    }
    text[header_len] = '\0';
    const pw_status_t controls = check_json_text(rd, text, (size_t)header_len);
    if (controls != PW_SUCCESS) {
        free(text);
        return controls;
    }
    const char *end = NULL;
    cJSON *tree = cJSON_ParseWithLengthOpts(text, (size_t)header_len, &end, 0);
    if (!tree) {
        const long long at = end ? (long long)(end - text) : -1;
        char near[24] = "";
        if (end && at >= 0 && (uint64_t)at < header_len) {
            size_t k = 0;
            for (; k < sizeof near - 1 && end[k]; k++)
                near[k] = (end[k] >= 32 && end[k] < 127) ? end[k] : '?';
            near[k] = '\0';
        }
        const int depth = at >= 0 ? nesting_at(text, (size_t)at + 1) : 0;
        free(text);
        if (depth >= CJSON_NESTING_LIMIT)
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: header: JSON nested deeper than %d levels (the parser's limit) "
                           "at byte %lld",
                           rd->path, CJSON_NESTING_LIMIT, at);
        return pw_fail(PW_ERROR_FORMAT, "%s: header: JSON parse error at byte %lld near '%s'",
                       rd->path, at, near);
    }
    /* Only whitespace (the padding) may follow the JSON value. */
    for (const char *p = end; p && p < text + header_len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            const long long at = (long long)(p - text);
            cJSON_Delete(tree);
            free(text);
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: header: unexpected bytes after the JSON object at byte %lld",
                           rd->path, at);
        }
    }
    free(text);
    if (!cJSON_IsObject(tree)) {
        cJSON_Delete(tree);
        return pw_fail(PW_ERROR_FORMAT, "%s: header: not a JSON object", rd->path);
    }
    const pw_status_t st = check_utf8_tree(rd, tree, "header"); /* and unique keys */
    if (st != PW_SUCCESS) {
        cJSON_Delete(tree);
        return st;
    }
    *root = tree;
    return PW_SUCCESS;
}

/* Ranges and shapes of the tensors this format knows. */
typedef struct layout {
    const tensor_entry_t *topk, *cu, *prefix, *kv, *page_table, *q, *k, *v, *ks, *vs;
} layout_t;

/* The most common hook mistake: topk_ids stored as [N, Hkv, K]. `tokens` is N as another
 * tensor gives it (cu_seqlens_q[R], or q's first dimension), `heads` what would then be
 * Hkv; a plausible Hkv is small. */
#define PW_SWAP_HINT " (topk_ids looks like [N, Hkv, K]; the format wants [Hkv, N, K])"
static int topk_looks_swapped(const tensor_entry_t *topk, int64_t tokens, int64_t heads)
{
    return topk->ndim == 3 && topk->shape[0] == tokens && topk->shape[1] == heads &&
           tokens != heads && heads >= 1 && heads <= 1024;
}

/* Re-raises the last error with PW_SWAP_HINT appended. */
static pw_status_t fail_with_swap_hint(pw_status_t st)
{
    char why[512];
    snprintf(why, sizeof why, "%s", pw_last_error());
    return pw_fail(st, "%s" PW_SWAP_HINT, why);
}

static pw_status_t required(const reader_t *rd, const tensor_entry_t *tensors, int count,
                            const char *name, const tensor_entry_t **out)
{
    *out = find_tensor(tensors, count, name);
    if (!*out) return pw_fail(PW_ERROR_FORMAT, "%s: missing required tensor '%s'", rd->path, name);
    return PW_SUCCESS;
}

static pw_status_t check_layout(const reader_t *rd, const tensor_entry_t *tensors, int count,
                                pw_capture_t *c, layout_t *l)
{
    memset(l, 0, sizeof *l);
    PW_TRY(required(rd, tensors, count, "topk_ids", &l->topk));
    PW_TRY(required(rd, tensors, count, "cu_seqlens_q", &l->cu));
    PW_TRY(required(rd, tensors, count, "prefix_lens", &l->prefix));
    PW_TRY(required(rd, tensors, count, "kv_lens", &l->kv));
    l->page_table = find_tensor(tensors, count, "page_table");
    l->q = find_tensor(tensors, count, "q");
    l->k = find_tensor(tensors, count, "k_cache");
    l->v = find_tensor(tensors, count, "v_cache");
    l->ks = find_tensor(tensors, count, "k_scale");
    l->vs = find_tensor(tensors, count, "v_scale");

    pw_problem_t *p = &c->problem;
    PW_TRY(expect_tensor(rd, l->topk, "I32", "I16", 3, NULL, "[Hkv, N, K]"));
    const int64_t hkv = l->topk->shape[0], n = l->topk->shape[1], k = l->topk->shape[2];
    if (hkv < 1 || hkv > INT32_MAX || n > INT32_MAX || k < 1 || k > INT32_MAX)
        return pw_fail(PW_ERROR_FORMAT,
                       "%s: topk_ids: shape [%lld, %lld, %lld]: need Hkv >= 1, K >= 1, all < 2^31",
                       rd->path, (long long)hkv, (long long)n, (long long)k);
    PW_TRY(expect_tensor(rd, l->prefix, "I32", NULL, 1, NULL, "[R]"));
    const int64_t r = l->prefix->shape[0];
    if (r < 1 || r >= INT32_MAX)
        return pw_fail(PW_ERROR_FORMAT, "%s: prefix_lens: shape [%lld], expected [R] with R >= 1",
                       rd->path, (long long)r);
    const int64_t want_cu[1] = {r + 1}, want_r[1] = {r};
    PW_TRY(expect_tensor(rd, l->cu, "I32", NULL, 1, want_cu, "[R+1]"));
    PW_TRY(expect_tensor(rd, l->kv, "I32", NULL, 1, want_r, "[R]"));
    p->num_kv_heads = (int32_t)hkv;
    p->num_tokens = (int32_t)n;
    p->topk = (int32_t)k;
    p->num_requests = (int32_t)r;
    c->topk_was_i16 = strcmp(l->topk->dtype_name, "I16") == 0;

    if (l->page_table) {
        const int64_t want_pt[2] = {r, -1};
        PW_TRY(expect_tensor(rd, l->page_table, "I32", NULL, 2, want_pt, "[R, max_pages]"));
        if (l->page_table->shape[1] > INT32_MAX)
            return pw_fail(PW_ERROR_FORMAT, "%s: page_table: %lld columns (must be < 2^31)",
                           rd->path, (long long)l->page_table->shape[1]);
        p->max_pages_per_request = (int32_t)l->page_table->shape[1];
    }
    const int64_t hq = hkv * p->q_heads_per_kv, d = p->head_dim;
    if (l->q) {
        const int64_t want_q[3] = {n, hq, d};
        const pw_status_t st = expect_tensor(rd, l->q, "BF16", NULL, 3, want_q, "[N, Hkv*G, D]");
        if (st != PW_SUCCESS && l->q->ndim == 3 && l->q->shape[1] % p->q_heads_per_kv == 0 &&
            topk_looks_swapped(l->topk, l->q->shape[0], l->q->shape[1] / p->q_heads_per_kv))
            return fail_with_swap_hint(st);
        PW_TRY(st);
    }
    if (!l->k != !l->v)
        return pw_fail(PW_ERROR_FORMAT, "%s: %s: present without %s (both caches or neither)",
                       rd->path, l->k ? "k_cache" : "v_cache", l->k ? "v_cache" : "k_cache");
    if (l->k) {
        const int64_t want_kv[3] = {-1, hkv, d};
        PW_TRY(expect_tensor(rd, l->k, "F8_E4M3", NULL, 3, want_kv, "[slots, Hkv, D]"));
        const int64_t want_v[3] = {l->k->shape[0], hkv, d};
        PW_TRY(expect_tensor(rd, l->v, "F8_E4M3", NULL, 3, want_v, "[slots, Hkv, D] like k_cache"));
        const tensor_entry_t *scales[2] = {l->ks, l->vs};
        const char *names[2] = {"k_scale", "v_scale"};
        for (int i = 0; i < 2; i++) {
            if (!scales[i])
                return pw_fail(PW_ERROR_FORMAT, "%s: missing tensor '%s' (required with the caches)",
                               rd->path, names[i]);
            const int64_t one[1] = {1};
            /* A scalar (shape []) is accepted as well as [1]. */
            if (scales[i]->ndim != 0)
                PW_TRY(expect_tensor(rd, scales[i], "F32", NULL, 1, one, "[1]"));
            else
                PW_TRY(expect_tensor(rd, scales[i], "F32", NULL, 0, NULL, "[1]"));
        }
        if (l->k->shape[0] % p->page_size != 0)
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: k_cache: %lld slots is not a multiple of page_size %d (the cache "
                           "is [pages * P, Hkv, D], docs/semantics.md section 6)",
                           rd->path, (long long)l->k->shape[0], p->page_size);
        p->num_cache_pages = l->k->shape[0] / p->page_size;
    }
    return PW_SUCCESS;
}

/* The failure of pw_problem_check on a read capture, as a FORMAT error naming the file,
 * with the hint when topk_ids looks like [N, Hkv, K]. */
static pw_status_t fail_layout(const reader_t *rd, const layout_t *l, const pw_capture_t *c)
{
    char why[512];
    snprintf(why, sizeof why, "%s", pw_last_error());
    const int swapped = topk_looks_swapped(l->topk, c->cu_seqlens_q[c->problem.num_requests], l->topk->shape[1]);
    return pw_fail(PW_ERROR_FORMAT, "%s: %s%s", rd->path, why, swapped ? PW_SWAP_HINT : "");
}

/* A file without K / V caches whose largest page id (page_table cell `at`) sizes the caches
 * to generate past what can be made: the error names the cell. */
static pw_status_t fail_caches_of_page_id(const reader_t *rd, const pw_capture_t *c, int64_t at, pw_status_t status,
                                          double bytes, const char *why)
{
    const int64_t cols = c->problem.max_pages_per_request;
    return pw_fail(status,
                   "%s: page_table[%lld][%lld] = %d: the file has no K/V caches, so they would be generated "
                   "for physical pages 0..%d (%.3g GB with Q), %s; store the caches in the file or number the "
                   "pages densely",
                   rd->path, (long long)(at / cols), (long long)(at % cols), c->page_table[at], c->page_table[at],
                   bytes / 1e9, why);
}

static pw_status_t load_tensors(const reader_t *rd, const layout_t *l, unsigned flags,
                                pw_capture_t *c)
{
    pw_problem_t *p = &c->problem;
    PW_TRY(read_int_tensor(rd, l->topk, &c->topk_ids));
    PW_TRY(read_int_tensor(rd, l->cu, &c->cu_seqlens_q));
    PW_TRY(read_int_tensor(rd, l->prefix, &c->prefix_lens));
    PW_TRY(read_int_tensor(rd, l->kv, &c->kv_lens));
    const int64_t r = p->num_requests;
    int64_t max_id_at = -1; /* page-table cell holding the largest id, when it sized the caches */
    if (l->page_table) {
        PW_TRY(read_int_tensor(rd, l->page_table, &c->page_table));
        if (!l->k) {
            int64_t max_id = -1;
            const int64_t cells = r * p->max_pages_per_request;
            for (int64_t i = 0; i < cells; i++)
                if (c->page_table[i] > max_id) {
                    max_id = c->page_table[i];
                    max_id_at = i;
                }
            if (max_id < 0 && cells > 0 && p->num_tokens > 0) /* (N = 0 needs no cache) */
                return pw_fail(PW_ERROR_FORMAT,
                               "%s: page_table: none of its %lld entries is a physical page id (all are "
                               "negative); without caches in the file the cache holds pages 0..max(page_table)",
                               rd->path, (long long)cells);
            p->num_cache_pages = max_id + 1;
        }
    } else {
        int64_t max_kv = 0;
        for (int64_t i = 0; i < r; i++)
            if (c->kv_lens[i] > max_kv) max_kv = c->kv_lens[i];
        const int64_t max_pages = (max_kv + p->page_size - 1) / p->page_size;
        p->max_pages_per_request = (int32_t)max_pages;
        /* The request layout first: a broken file must not cost the table's allocation
         * (a 500-byte file with a huge kv_lens asked for gigabytes, then failed). */
        pw_requests_t layout = pw_capture_requests(c);
        layout.page_table = NULL;
        if (pw_problem_check(p, &layout) != PW_SUCCESS) return fail_layout(rd, l, c);
        /* (The bound, 2^26, also keeps every default id within int32.) */
        if (r * max_pages > PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES)
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: page_table: absent, and the default layout needs R * "
                           "ceil(max(kv_lens)/P) = %lld * %lld entries, more than the %lld a reader "
                           "makes up (PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES): such a file stores its page_table",
                           rd->path, (long long)r, (long long)max_pages,
                           (long long)PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES);
        c->page_table = alloc_zeroed(r * max_pages, sizeof(int32_t));
        if (!c->page_table)
            return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: cannot allocate the default page table",
                           rd->path);
        for (int64_t i = 0; i < r * max_pages; i++) c->page_table[i] = (int32_t)i;
        c->page_table_synthesised = 1;
        if (!l->k) p->num_cache_pages = r * max_pages;
    }
    const pw_requests_t rq = pw_capture_requests(c);
    if (pw_problem_check(p, &rq) != PW_SUCCESS) return fail_layout(rd, l, c);
    float k_scale = 0.0f, v_scale = 0.0f;
    if (l->k) { /* read (8 bytes) and checked with or without PW_CAPTURE_LOAD_QKV */
        PW_TRY(read_scale(rd, l->ks, &k_scale));
        PW_TRY(read_scale(rd, l->vs, &v_scale));
    }
    if (flags & PW_CAPTURE_LOAD_QKV) {
        if (l->q) PW_TRY(read_raw_tensor(rd, l->q, (void **)&c->q));
        if (l->k) {
            PW_TRY(read_raw_tensor(rd, l->k, (void **)&c->k_cache));
            PW_TRY(read_raw_tensor(rd, l->v, (void **)&c->v_cache));
            c->k_scale = k_scale;
            c->v_scale = v_scale;
        }
    }
    if (flags & PW_CAPTURE_GENERATE_QKV) {
        unsigned parts = 0;
        if (!c->q) parts |= PW_CAPTURE_PART_Q;
        if (!c->k_cache) parts |= PW_CAPTURE_PART_KV;
        /* What the header alone asks for: bounded before anything is allocated. */
        const double q_bytes = (parts & PW_CAPTURE_PART_Q)
                                   ? (double)p->num_tokens * p->num_kv_heads * p->q_heads_per_kv * p->head_dim * 2.0
                                   : 0.0;
        const double kv_bytes = (parts & PW_CAPTURE_PART_KV)
                                    ? 2.0 * (double)p->num_cache_pages * p->page_size * p->num_kv_heads * p->head_dim
                                    : 0.0;
        if (q_bytes + kv_bytes > (double)PW_CAPTURE_MAX_GENERATED_BYTES && kv_bytes > 0.0 && max_id_at >= 0) {
            char why[96];
            snprintf(why, sizeof why, "more than the %.3g GB a reader generates (PW_CAPTURE_MAX_GENERATED_BYTES)",
                     (double)PW_CAPTURE_MAX_GENERATED_BYTES / 1e9);
            return fail_caches_of_page_id(rd, c, max_id_at, PW_ERROR_FORMAT, q_bytes + kv_bytes, why);
        }
        if (q_bytes + kv_bytes > (double)PW_CAPTURE_MAX_GENERATED_BYTES)
            return pw_fail(PW_ERROR_FORMAT,
                           "%s: the file has no %s, and generating %s takes %.3g GB (Q %.3g GB, K and V "
                           "%.3g GB: %lld cache pages of %d tokens x %d KV heads), more than the %.3g GB a "
                           "reader generates (PW_CAPTURE_MAX_GENERATED_BYTES): such a file stores its Q / K / V",
                           rd->path, parts == PW_CAPTURE_PART_Q ? "q" : parts == PW_CAPTURE_PART_KV ? "k_cache / v_cache" : "q, k_cache, v_cache",
                           parts == PW_CAPTURE_PART_Q ? "it" : "them", (q_bytes + kv_bytes) / 1e9, q_bytes / 1e9,
                           kv_bytes / 1e9, (long long)p->num_cache_pages, p->page_size, p->num_kv_heads,
                           (double)PW_CAPTURE_MAX_GENERATED_BYTES / 1e9);
        const pw_status_t st = parts ? pw_capture_generate_parts(c, c->qkv_seed, parts) : PW_SUCCESS;
        if (st == PW_ERROR_OUT_OF_MEMORY && (parts & PW_CAPTURE_PART_KV) && max_id_at >= 0)
            return fail_caches_of_page_id(rd, c, max_id_at, PW_ERROR_OUT_OF_MEMORY, q_bytes + kv_bytes,
                                          "which cannot be allocated");
        PW_TRY(st);
    }
    return PW_SUCCESS;
}

pw_status_t pw_capture_read(const char *path, unsigned flags, pw_capture_t **out)
{
    if (!out) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_read: out is NULL");
    *out = NULL;
    if (!path) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_read: path is NULL");
    if (flags & ~(unsigned)(PW_CAPTURE_LOAD_QKV | PW_CAPTURE_GENERATE_QKV))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_read: unknown flags 0x%x", flags);

    reader_t rd;
    cJSON *root = NULL;
    tensor_entry_t *tensors = NULL;
    pw_capture_t *c = NULL;
    pw_status_t st = open_reader(&rd, path);
    if (st != PW_SUCCESS) goto done;
    st = read_header(&rd, &root);
    if (st != PW_SUCCESS) goto done;

    c = calloc(1, sizeof *c);
    if (!c) {
        st = pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto done;
    }
    const pw_problem_t init = PW_PROBLEM_INIT;
    c->problem = init;
    c->k_scale = c->v_scale = 1.0f;
    c->path = dup_string(path);
    if (!c->path) {
        st = pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto done;
    }

    const int children = cJSON_GetArraySize(root);
    tensors = calloc(children > 0 ? (size_t)children : 1, sizeof *tensors);
    if (!tensors) {
        st = pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto done;
    }
    int count = 0;
    const cJSON *meta = NULL, *item;
    cJSON_ArrayForEach(item, root)
    {
        if (strcmp(item->string, "__metadata__") == 0) {
            meta = item;
            continue;
        }
        st = parse_tensor_entry(&rd, item, &tensors[count]);
        if (st != PW_SUCCESS) goto done;
        count++;
    }
    st = check_ranges(&rd, tensors, count);
    if (st != PW_SUCCESS) goto done;
    st = parse_metadata(&rd, meta, c);
    if (st != PW_SUCCESS) goto done;
    layout_t layout;
    st = check_layout(&rd, tensors, count, c, &layout);
    if (st != PW_SUCCESS) goto done;
    st = load_tensors(&rd, &layout, flags, c);

done:
    if (rd.file) fclose(rd.file);
    free(tensors);
    cJSON_Delete(root);
    if (st != PW_SUCCESS) {
        pw_capture_free(c);
        return st;
    }
    *out = c;
    return PW_SUCCESS;
}

/* ---- creating, freeing, small accessors ---------------------------------------------- */
void pw_capture_free(pw_capture_t *c)
{
    if (!c) return;
    free(c->topk_ids);
    free(c->cu_seqlens_q);
    free(c->prefix_lens);
    free(c->kv_lens);
    free(c->page_table);
    free(c->q);
    free(c->k_cache);
    free(c->v_cache);
    for (int32_t i = 0; i < c->num_meta; i++) {
        free(c->meta[i].key);
        free(c->meta[i].value);
    }
    free(c->meta);
    free(c->path);
    free(c);
}

pw_requests_t pw_capture_requests(const pw_capture_t *c)
{
    pw_requests_t rq = {NULL, NULL, NULL, NULL, 0};
    if (!c) return rq;
    rq.cu_seqlens_q = c->cu_seqlens_q;
    rq.prefix_lens = c->prefix_lens;
    rq.kv_lens = c->kv_lens;
    rq.page_table = c->page_table;
    rq.page_table_stride = c->problem.max_pages_per_request;
    return rq;
}

pw_status_t pw_capture_create(const pw_problem_t *problem, unsigned flags, pw_capture_t **out)
{
    if (!out) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_create: out is NULL");
    *out = NULL;
    if (flags & ~(unsigned)PW_CAPTURE_LOAD_QKV)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_create: unknown flags 0x%x", flags);
    PW_TRY(pw_problem_check(problem, NULL));
    const pw_problem_t *p = problem;
    pw_capture_t *c = calloc(1, sizeof *c);
    if (!c) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_capture_create: out of memory");
    c->problem = *p;
    c->problem.struct_size = sizeof(pw_problem_t);
    c->k_scale = c->v_scale = 1.0f;
    const int64_t r = p->num_requests, n = p->num_tokens;
    const int64_t topk_count = checked_mul(checked_mul(p->num_kv_heads, n), p->topk);
    const int64_t pt_count = checked_mul(r, p->max_pages_per_request);
    int ok = topk_count >= 0 && pt_count >= 0;
    if (ok) {
        c->topk_ids = alloc_zeroed(topk_count, sizeof(int32_t));
        c->cu_seqlens_q = alloc_zeroed(r + 1, sizeof(int32_t));
        c->prefix_lens = alloc_zeroed(r, sizeof(int32_t));
        c->kv_lens = alloc_zeroed(r, sizeof(int32_t));
        c->page_table = alloc_zeroed(pt_count, sizeof(int32_t));
        ok = c->topk_ids && c->cu_seqlens_q && c->prefix_lens && c->kv_lens && c->page_table;
    }
    if (ok) {
        for (int64_t i = 0; i < pt_count; i++) c->page_table[i] = (int32_t)i;
        c->page_table_synthesised = 1;
    }
    if (ok && (flags & PW_CAPTURE_LOAD_QKV)) {
        const int64_t q_count =
            checked_mul(checked_mul(n, (int64_t)p->num_kv_heads * p->q_heads_per_kv), p->head_dim);
        const int64_t kv_count = checked_mul(
            checked_mul(checked_mul(p->num_cache_pages, p->page_size), p->num_kv_heads),
            p->head_dim);
        ok = q_count >= 0 && kv_count >= 0;
        if (ok) {
            c->q = alloc_zeroed(q_count, sizeof(pw_bf16_t));
            c->k_cache = alloc_zeroed(kv_count, 1);
            c->v_cache = alloc_zeroed(kv_count, 1);
            ok = c->q && c->k_cache && c->v_cache;
        }
    }
    if (!ok) {
        pw_capture_free(c);
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_capture_create: cannot allocate the tensors");
    }
    *out = c;
    return PW_SUCCESS;
}

const char *pw_capture_get_meta(const pw_capture_t *c, const char *key)
{
    if (!c || !key) return NULL;
    for (int32_t i = 0; i < c->num_meta; i++)
        if (strcmp(c->meta[i].key, key) == 0) return c->meta[i].value;
    return NULL;
}

pw_status_t pw_capture_set_meta(pw_capture_t *c, const char *key, const char *value)
{
    if (!c || !key || !value)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_set_meta: NULL argument");
    if (!*key || is_reserved_key(key))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_set_meta: key '%s' is empty or reserved (set the capture's "
                       "fields instead)",
                       key);
    if (!utf8_valid(key) || !utf8_valid(value)) {
        char buf[64];
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_set_meta: %s '%s' is not valid UTF-8 (safetensors headers "
                       "are JSON text)",
                       utf8_valid(key) ? "value" : "key",
                       escaped(buf, sizeof buf, utf8_valid(key) ? value : key));
    }
    for (int32_t i = 0; i < c->num_meta; i++) {
        if (strcmp(c->meta[i].key, key) == 0) {
            char *v = dup_string(value);
            if (!v) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "out of memory (capture metadata)");
            free(c->meta[i].value);
            c->meta[i].value = v;
            return PW_SUCCESS;
        }
    }
    return meta_append(c, key, value);
}

/* ---- the documented Q/K/V generator --------------------------------------------------- */
typedef struct qkv_stream { uint64_t state; } qkv_stream_t;

static uint64_t stream_next(qkv_stream_t *s)
{
    s->state += 0x9e3779b97f4a7c15ull;
    uint64_t z = s->state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double stream_normal(qkv_stream_t *s)
{
    const double u1 = (double)(stream_next(s) >> 11) * 0x1.0p-53;
    const double u2 = (double)(stream_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

pw_status_t pw_capture_generate_parts(pw_capture_t *c, uint64_t seed, unsigned parts)
{
    if (!c) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_generate_parts: capture is NULL");
    if (parts & ~(unsigned)(PW_CAPTURE_PART_Q | PW_CAPTURE_PART_KV))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_generate_parts: unknown parts 0x%x (PW_CAPTURE_PART_Q | "
                       "PW_CAPTURE_PART_KV)",
                       parts);
    const pw_problem_t *p = &c->problem;
    if (parts & PW_CAPTURE_PART_Q) {
        const int64_t count = checked_mul(
            checked_mul(p->num_tokens, (int64_t)p->num_kv_heads * p->q_heads_per_kv), p->head_dim);
        pw_bf16_t *q = count >= 0 ? alloc_zeroed(count, sizeof *q) : NULL;
        if (!q) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_capture_generate_qkv: cannot allocate q");
        qkv_stream_t s = {seed ^ 0x51u};
        for (int64_t i = 0; i < count; i++) q[i] = pw_bf16_from_float((float)stream_normal(&s));
        free(c->q);
        c->q = q;
    }
    if (parts & PW_CAPTURE_PART_KV) {
        const int64_t count = checked_mul(
            checked_mul(checked_mul(p->num_cache_pages, p->page_size), p->num_kv_heads),
            p->head_dim);
        pw_fp8_e4m3_t *k = count >= 0 ? alloc_zeroed(count, 1) : NULL;
        pw_fp8_e4m3_t *v = count >= 0 ? alloc_zeroed(count, 1) : NULL;
        if (!k || !v) {
            free(k);
            free(v);
            return pw_fail(PW_ERROR_OUT_OF_MEMORY,
                           "pw_capture_generate_qkv: cannot allocate the caches (%lld bytes each)",
                           (long long)count);
        }
        qkv_stream_t sk = {seed ^ 0x4bu}, sv = {seed ^ 0x56u};
        for (int64_t i = 0; i < count; i++) {
            k[i] = pw_fp8_e4m3_from_float((float)(stream_normal(&sk) * 64.0));
            v[i] = pw_fp8_e4m3_from_float((float)(stream_normal(&sv) * 64.0));
        }
        free(c->k_cache);
        free(c->v_cache);
        c->k_cache = k;
        c->v_cache = v;
        c->k_scale = c->v_scale = 1.0f / 64.0f;
    }
    return PW_SUCCESS;
}

pw_status_t pw_capture_generate_qkv(pw_capture_t *c, uint64_t seed)
{
    return pw_capture_generate_parts(c, seed, PW_CAPTURE_PART_Q | PW_CAPTURE_PART_KV);
}

/* ---- writing -------------------------------------------------------------------------- */
typedef struct write_item {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[3];
    int64_t bytes;
    const void *data; /* host order */
    int kind;         /* 0: int32 as I32, 1: int32 as I16, 2: uint16, 3: bytes, 4: float */
} write_item_t;

static int write_all(FILE *f, const void *buf, size_t n) { return fwrite(buf, 1, n, f) == n; }

static int write_item_data(FILE *f, const write_item_t *w)
{
    unsigned char chunk[1 << 16];
    if (w->kind == 3) return write_all(f, w->data, (size_t)w->bytes);
    const int64_t esize = w->kind == 0 || w->kind == 4 ? 4 : 2;
    const int64_t count = w->bytes / esize;
    const int64_t per_chunk = (int64_t)sizeof chunk / esize;
    for (int64_t base = 0; base < count; base += per_chunk) {
        const int64_t m = count - base < per_chunk ? count - base : per_chunk;
        for (int64_t i = 0; i < m; i++) {
            uint32_t u;
            if (w->kind == 0 || w->kind == 4) {
                memcpy(&u, (const unsigned char *)w->data + 4 * (base + i), 4);
                store_u32_le(chunk + 4 * i, u);
            } else {
                uint16_t h;
                if (w->kind == 1)
                    h = (uint16_t)(int16_t)((const int32_t *)w->data)[base + i];
                else
                    memcpy(&h, (const unsigned char *)w->data + 2 * (base + i), 2);
                chunk[2 * i] = (unsigned char)h;
                chunk[2 * i + 1] = (unsigned char)(h >> 8);
            }
        }
        if (!write_all(f, chunk, (size_t)(m * esize))) return 0;
    }
    return 1;
}

static int add_meta_string(cJSON *meta, const char *key, const char *value)
{
    return cJSON_AddStringToObject(meta, key, value) != NULL;
}

/* Opens the output of pw_capture_write. A regular file (or a path that does not exist
 * yet) is written through a temporary file in the same directory, renamed over the target
 * only once complete: *target is the file to replace (a symbolic link's final target), *tmp
 * the temporary file. Anything else (a device such as /dev/full, a pipe) is written in
 * place and never removed: *tmp stays NULL. */
static pw_status_t open_output(const char *path, FILE **out, char **target, char **tmp)
{
    static unsigned counter;
    struct stat sb;
    const int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        if (S_ISDIR(sb.st_mode)) return pw_fail(PW_ERROR_IO, "%s: is a directory", path);
        *out = fopen(path, "wb");
        if (!*out) return pw_fail(PW_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
        return PW_SUCCESS;
    }
    struct stat lsb;
    if (exists && lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        *target = realpath(path, NULL);
        if (!*target)
            return pw_fail(PW_ERROR_IO, "%s: cannot resolve the link: %s", path, strerror(errno));
    } else {
        *target = dup_string(path);
        if (!*target) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    const size_t cap = strlen(*target) + 48;
    *tmp = malloc(cap);
    if (!*tmp) {
        free(*target);
        *target = NULL;
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(*tmp, cap, "%s.tmp.%ld.%u", *target, (long)getpid(), counter++);
        fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd >= 0 && exists) (void)fchmod(fd, sb.st_mode & 07777); /* keep the old mode */
    *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!*out) {
        if (fd >= 0) {
            err = errno;
            close(fd);
            remove(*tmp);
        }
        free(*target);
        free(*tmp);
        *target = *tmp = NULL;
        return pw_fail(PW_ERROR_IO, "%s: cannot create: %s", path, strerror(err));
    }
    return PW_SUCCESS;
}

pw_status_t pw_capture_write(const char *path, const pw_capture_t *c, unsigned flags)
{
    if (!path || !c) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_write: NULL argument");
    if (flags & ~(unsigned)PW_CAPTURE_WRITE_TOPK_I16)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_write: unknown flags 0x%x", flags);
    const pw_problem_t *p = &c->problem;
    if (!c->topk_ids || !c->cu_seqlens_q || !c->prefix_lens || !c->kv_lens)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_write: topk_ids, cu_seqlens_q, prefix_lens, kv_lens must not "
                       "be NULL");
    if (!c->page_table_synthesised && !c->page_table)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_write: page_table is NULL (set page_table_synthesised for the "
                       "default layout)");
    if (!c->k_cache != !c->v_cache)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_write: k_cache and v_cache must both be set or both NULL");
    if (c->k_cache && !(isfinite(c->k_scale) && c->k_scale > 0.0f && isfinite(c->v_scale) && c->v_scale > 0.0f))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "pw_capture_write: k_scale (%g) and v_scale (%g) must be finite and > 0 (the format's rule)",
                       (double)c->k_scale, (double)c->v_scale);
    pw_requests_t rq = pw_capture_requests(c);
    /* Without K/V tensors the file holds no cache size (the reader derives one from the
     * page table), so num_cache_pages need not be set: the layout is checked without it. */
    if (!c->k_cache) rq.page_table = NULL;
    PW_TRY(pw_problem_check(p, &rq));
    if (c->page_table_synthesised) {
        /* The reader rebuilds the default table from kv_lens: it must be the same shape. */
        int64_t max_kv = 0;
        for (int32_t r = 0; r < p->num_requests; r++)
            if (c->kv_lens[r] > max_kv) max_kv = c->kv_lens[r];
        if ((max_kv + p->page_size - 1) / p->page_size != p->max_pages_per_request)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "pw_capture_write: page_table_synthesised needs max_pages_per_request "
                           "= ceil(max(kv_lens)/P) = %lld, problem has %d",
                           (long long)((max_kv + p->page_size - 1) / p->page_size),
                           p->max_pages_per_request);
        if ((int64_t)p->num_requests * p->max_pages_per_request > PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "pw_capture_write: page_table_synthesised with R * max_pages = %lld entries, more "
                           "than the %lld a reader makes up (PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES): set "
                           "page_table_synthesised = 0 to store the table",
                           (long long)p->num_requests * p->max_pages_per_request,
                           (long long)PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES);
    }
    const int i16 = (flags & PW_CAPTURE_WRITE_TOPK_I16) != 0;
    const int64_t hkv = p->num_kv_heads, n = p->num_tokens, k = p->topk, r = p->num_requests;
    const int64_t topk_count = hkv * n * k;
    if (i16) {
        for (int64_t i = 0; i < topk_count; i++)
            if (c->topk_ids[i] < INT16_MIN || c->topk_ids[i] > INT16_MAX)
                return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                               "pw_capture_write: topk_ids[%lld] = %d does not fit I16",
                               (long long)i, c->topk_ids[i]);
    }

    write_item_t items[10];
    int count = 0;
    items[count++] = (write_item_t){"topk_ids", i16 ? "I16" : "I32", 3, {hkv, n, k},
                                    topk_count * (i16 ? 2 : 4), c->topk_ids, i16 ? 1 : 0};
    items[count++] = (write_item_t){"cu_seqlens_q", "I32", 1, {r + 1, 0, 0}, (r + 1) * 4,
                                    c->cu_seqlens_q, 0};
    items[count++] = (write_item_t){"prefix_lens", "I32", 1, {r, 0, 0}, r * 4, c->prefix_lens, 0};
    items[count++] = (write_item_t){"kv_lens", "I32", 1, {r, 0, 0}, r * 4, c->kv_lens, 0};
    if (!c->page_table_synthesised)
        items[count++] = (write_item_t){"page_table", "I32", 2, {r, p->max_pages_per_request, 0},
                                        r * p->max_pages_per_request * 4, c->page_table, 0};
    if (c->q) {
        const int64_t hq = hkv * p->q_heads_per_kv, d = p->head_dim;
        items[count++] = (write_item_t){"q", "BF16", 3, {n, hq, d}, n * hq * d * 2, c->q, 2};
    }
    if (c->k_cache) {
        const int64_t slots = p->num_cache_pages * p->page_size, d = p->head_dim;
        const int64_t bytes = slots * hkv * d;
        items[count++] = (write_item_t){"k_cache", "F8_E4M3", 3, {slots, hkv, d}, bytes,
                                        c->k_cache, 3};
        items[count++] = (write_item_t){"v_cache", "F8_E4M3", 3, {slots, hkv, d}, bytes,
                                        c->v_cache, 3};
        items[count++] = (write_item_t){"k_scale", "F32", 1, {1, 0, 0}, 4, &c->k_scale, 4};
        items[count++] = (write_item_t){"v_scale", "F32", 1, {1, 0, 0}, 4, &c->v_scale, 4};
    }

    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    int ok = root && meta;
    char num[64];
    ok = ok && add_meta_string(meta, "format", PW_CAPTURE_FORMAT);
    snprintf(num, sizeof num, "%d", PW_CAPTURE_FORMAT_VERSION);
    ok = ok && add_meta_string(meta, "format_version", num);
    snprintf(num, sizeof num, "%d", p->page_size);
    ok = ok && add_meta_string(meta, "page_size", num);
    snprintf(num, sizeof num, "%d", p->q_heads_per_kv);
    ok = ok && add_meta_string(meta, "q_heads_per_kv", num);
    snprintf(num, sizeof num, "%d", p->head_dim);
    ok = ok && add_meta_string(meta, "head_dim", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)c->qkv_seed);
    ok = ok && add_meta_string(meta, "qkv_seed", num);
    if (p->softmax_scale != 0.0f) {
        snprintf(num, sizeof num, "%.9g", (double)p->softmax_scale);
        ok = ok && add_meta_string(meta, "softmax_scale", num);
    }
    for (int32_t i = 0; ok && i < c->num_meta; i++) {
        if (!c->meta[i].key || !c->meta[i].value || is_reserved_key(c->meta[i].key)) continue;
        ok = add_meta_string(meta, c->meta[i].key, c->meta[i].value);
    }
    int64_t offset = 0;
    for (int i = 0; ok && i < count; i++) {
        cJSON *t = cJSON_AddObjectToObject(root, items[i].name);
        ok = t && cJSON_AddStringToObject(t, "dtype", items[i].dtype);
        cJSON *shape = ok ? cJSON_AddArrayToObject(t, "shape") : NULL;
        cJSON *offs = ok ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        ok = shape && offs;
        for (int d = 0; ok && d < items[i].ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)items[i].shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        offset += items[i].bytes;
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return pw_fail(PW_ERROR_OUT_OF_MEMORY, "pw_capture_write: cannot build the header");

    const size_t json_len = strlen(text);
    const size_t header_len = (json_len + 7) / 8 * 8;
    char *target = NULL, *tmp = NULL;
    FILE *f = NULL;
    const pw_status_t st = open_output(path, &f, &target, &tmp);
    if (st != PW_SUCCESS) {
        free(text);
        return st;
    }
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    ok = write_all(f, len_bytes, 8) && write_all(f, text, json_len);
    for (size_t i = json_len; ok && i < header_len; i++) ok = fputc(' ', f) != EOF;
    free(text);
    for (int i = 0; ok && i < count; i++) ok = write_item_data(f, &items[i]);
    int err = ok ? 0 : errno;
    if (ok && fflush(f) != 0) ok = 0, err = errno;
    if (ok && tmp && fsync(fileno(f)) != 0) ok = 0, err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (ok && tmp && rename(tmp, target) != 0) ok = 0, err = errno;
    if (!ok && tmp) remove(tmp); /* never the target: it keeps its old contents */
    free(target);
    free(tmp);
    if (!ok)
        return pw_fail(PW_ERROR_IO, "%s: write failed: %s", path,
                       strerror(err ? err : EIO));
    return PW_SUCCESS;
}
