/* Host-side checks of one GPU attention call's arguments (docs/semantics.md §1, §6), shared by
 * pw_union_attention and pw_sparse_prefill: the full call runs them before it enqueues its
 * first kernel, so that a bad argument never leaves regroup and union preparation behind
 * in a stream or a captured graph. Compiled in every build (no CUDA needed). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"
#include "pw_internal.h"

/* Whether args' struct_size covers `field` (the struct_size convention of pageweaver.h:
 * a caller built against an older header passes a smaller struct). */
#define ARGS_HAVE(args, field) \
    ((args)->struct_size >= offsetof(pw_attention_args_t, field) + sizeof((args)->field))

pw_precision_t pw_args_precision(const pw_attention_args_t *args)
{
    /* A struct of the size before the precision field existed reads as docs/semantics.md §4's FP8. */
    return ARGS_HAVE(args, precision) ? args->precision : PW_PRECISION_FP8;
}

/* Fields added after it: a struct without them has none of them. */
const float *pw_args_sinks(const pw_attention_args_t *args)
{
    return ARGS_HAVE(args, sink_logits) ? args->sink_logits : NULL;
}

int pw_args_f16_vt(const pw_attention_args_t *args)
{
    const pw_token_scales_t ts = pw_args_token_scales(args);
    return pw_args_precision(args) == PW_PRECISION_FP8X2 && !ts.k && !ts.v;
}

pw_token_scales_t pw_args_token_scales(const pw_attention_args_t *args)
{
    const pw_token_scales_t none = {NULL, NULL, 0, 0};
    return ARGS_HAVE(args, token_scales) ? args->token_scales : none;
}

int pw_dense_tile_g(const pw_problem_t *problem)
{
    /* Any K <= 64 (page lists of 8 K entries, 16 K for the G = 4 pairs), pages of 128 or 64
     * tokens. */
    const int32_t g = problem->q_heads_per_kv;
    return (g == 8 || g == 4) && problem->topk <= 64 ? g : 0;
}

int pw_vt_runs_dense(const pw_problem_t *problem, const pw_attention_args_t *args)
{
    if (!problem || !args) return 0;
    /* Per-token scales: FP8 only (FP8X2's run on the stacked tile, pw_vt_buffers_t.stack_mode). */
    const pw_token_scales_t ts = pw_args_token_scales(args);
    return (!ts.k && !ts.v) || pw_args_precision(args) == PW_PRECISION_FP8 ? pw_dense_tile_g(problem) : 0;
}

/* FP8 with per-token scales at G = 16: the stacked tile or the lean kernel's per-token-scale
 * form, per call (plan.c, stack_mode). */
static int stack_per_call_fp8_ts(const pw_problem_t *problem, const pw_attention_args_t *args)
{
    const pw_token_scales_t ts = pw_args_token_scales(args);
    return pw_args_precision(args) == PW_PRECISION_FP8 && (ts.k || ts.v) && problem->q_heads_per_kv == 16;
}

pw_status_t pw_check_vt_stack(const pw_problem_t *problem, const pw_attention_args_t *args,
                              const pw_vt_buffers_t *vt)
{
    if (vt->stack_mode == PW_STACK_NEVER) return PW_SUCCESS;
    const int64_t entries = (int64_t)problem->num_kv_heads * problem->num_requests * problem->max_pages_per_request;
    if ((vt->stack_mode != PW_STACK_PER_CALL && vt->stack_mode != PW_STACK_ALWAYS) ||
        (vt->stack_mode == PW_STACK_PER_CALL && !pw_args_f16_vt(args) && !stack_per_call_fp8_ts(problem, args)) ||
        (problem->q_heads_per_kv != 16 && problem->q_heads_per_kv != 8 && problem->q_heads_per_kv != 4) ||
        problem->topk != 16 ||
        problem->page_size != 128 || !vt->touched ||
        vt->stack_stat != (unsigned long long *)(void *)(vt->touched + PW_STACK_STAT_OFFSET(entries)))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "V^T buffers: the stacked tile (stack_mode %d) runs at G = 16, 8 or 4, K = 16, P = 128 "
                       "(per call only in FP8X2 without per-token scales and in FP8 with them at G = 16), its counts "
                       "right after the marks (stack_stat)",
                       vt->stack_mode);
    /* Without ts_tiles the pre-pass leaves the tiles' second halves as they were: the
     * stacked tile would read whatever they hold as the pages' scales. */
    const pw_token_scales_t ts = pw_args_token_scales(args);
    if ((ts.k || ts.v) && !vt->ts_tiles)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "V^T buffers: the stacked tile (stack_mode %d) with per-token scales reads each page's scales "
                       "behind its E4M3 tile, which the pre-pass writes only with ts_tiles set (ts_tiles is 0)",
                       vt->stack_mode);
    return PW_SUCCESS;
}

const pw_bf16_t *pw_args_sink_keys(const pw_attention_args_t *args)
{
    return ARGS_HAVE(args, sink_keys) ? args->sink_keys : NULL;
}

static pw_cache_layout_t args_cache_layout(const pw_attention_args_t *args)
{
    const pw_cache_layout_t none = {0, 0, 0};
    return ARGS_HAVE(args, cache_layout) ? args->cache_layout : none;
}

pw_cache_strides_t pw_args_cache_strides(const pw_problem_t *problem, const pw_attention_args_t *args)
{
    const pw_cache_layout_t l = args_cache_layout(args);
    pw_cache_strides_t s;
    if (l.page_stride != 0) {
        s.page = l.page_stride;
        s.head = l.head_stride != 0 ? l.head_stride : problem->head_dim; /* Hkv = 1: unused */
        s.token = l.token_stride;
    } else {
        s.page = (int64_t)problem->page_size * args->kv_stride;
        s.head = problem->head_dim;
        s.token = args->kv_stride;
    }
    return s;
}

pw_status_t pw_check_cache_layout(const pw_problem_t *problem, const pw_attention_args_t *args, int gpu)
{
    const pw_cache_layout_t l = args_cache_layout(args);
    const int token_major = l.page_stride == 0;
    const int64_t hkv_d = (int64_t)problem->num_kv_heads * problem->head_dim;
    if (token_major) {
        if (l.head_stride != 0 || l.token_stride != 0)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                           "args.cache_layout: page_stride is 0 (the token-major layout) but head_stride %lld / "
                           "token_stride %lld are set",
                           (long long)l.head_stride, (long long)l.token_stride);
        if (args->kv_stride < hkv_d)
            return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.kv_stride %lld must be >= Hkv*D = %lld",
                           (long long)args->kv_stride, (long long)hkv_d);
    } else if (l.page_stride < 0 || l.token_stride <= 0 || l.head_stride < 0 ||
               (l.head_stride == 0 && problem->num_kv_heads > 1)) {
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.cache_layout: strides must be > 0 (page %lld, head %lld, token %lld; head_stride "
                       "may be 0 only with one KV head)",
                       (long long)l.page_stride, (long long)l.head_stride, (long long)l.token_stride);
    }
    /* Both layouts as (page, head, token) strides, in double: the token-major page stride
     * P * kv_stride is formed in 64 bits (pw_args_cache_strides) only once this passed. Every
     * element addressed below 2^62; the GPU's tensor maps take strides that are multiples
     * of 16 below 2^40. */
    const char *what = token_major ? "args.kv_stride" : "args.cache_layout";
    const double page = token_major ? (double)problem->page_size * (double)args->kv_stride : (double)l.page_stride;
    const double head = token_major || l.head_stride == 0 ? (double)problem->head_dim : (double)l.head_stride;
    const double token = token_major ? (double)args->kv_stride : (double)l.token_stride;
    const double last = ((double)problem->num_cache_pages - 1.0) * page + ((double)problem->num_kv_heads - 1.0) * head +
                        ((double)problem->page_size - 1.0) * token + (double)problem->head_dim;
    if (last >= 4611686018427387904.0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "%s: %lld pages at these strides address elements past 2^62", what,
                       (long long)problem->num_cache_pages);
    const double limit = 1099511627776.0; /* 2^40 */
    if (gpu && (fmod(page, 16.0) != 0.0 || fmod(head, 16.0) != 0.0 || fmod(token, 16.0) != 0.0 || page >= limit ||
                head >= limit || token >= limit))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "%s: the GPU needs strides that are multiples of 16 elements and below 2^40 (page %.0f, "
                       "head %.0f, token %.0f)",
                       what, page, head, token);
    if (gpu && (((uintptr_t)args->k_cache & 15u) != 0 || ((uintptr_t)args->v_cache & 15u) != 0))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.k_cache / args.v_cache must be 16-byte aligned on the GPU");
    return PW_SUCCESS;
}

pw_status_t pw_check_row_strides(const pw_problem_t *problem, const pw_attention_args_t *args)
{
    /* The largest element of Q, O and the page table, in elements, bounded so that every
     * byte offset stays below 2^62 (Q bf16, O up to 8 bytes, the table int32). */
    const double n = problem->num_tokens, r = problem->num_requests;
    const double hq_d = (double)problem->num_kv_heads * problem->q_heads_per_kv * problem->head_dim;
    if (n > 0 && (n - 1.0) * (double)args->q_stride + hq_d >= 2305843009213693952.0) /* 2^61 */
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.q_stride %lld: %lld rows address elements past 2^61",
                       (long long)args->q_stride, (long long)problem->num_tokens);
    if (n > 0 && (n - 1.0) * (double)args->o_stride + hq_d >= 576460752303423488.0) /* 2^59 */
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.o_stride %lld: %lld rows address elements past 2^59",
                       (long long)args->o_stride, (long long)problem->num_tokens);
    if (r > 0 && (r - 1.0) * (double)args->requests.page_table_stride + problem->max_pages_per_request >=
                     1152921504606846976.0) /* 2^60 */
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.requests.page_table_stride %lld: %lld rows address entries past 2^60",
                       (long long)args->requests.page_table_stride, (long long)problem->num_requests);
    return PW_SUCCESS;
}

/* Bytes [base + i * stride, base + i * stride + len) for i in [0, rows): a tensor's rows
 * (stride >= len > 0, rows > 0; every offset below 2^62, as the callers checked). */
typedef struct byte_rows {
    uintptr_t base;
    int64_t stride, len, rows;
    const char *name;
} byte_rows_t;

static int rows_overlap(const byte_rows_t *a, const byte_rows_t *b)
{
    const uintptr_t a_end = a->base + (uintptr_t)((a->rows - 1) * a->stride + a->len);
    const uintptr_t b_end = b->base + (uintptr_t)((b->rows - 1) * b->stride + b->len);
    if (a_end <= b->base || b_end <= a->base) return 0; /* disjoint extents */
    if (a->rows > 1 && b->rows > 1 && a->stride == b->stride) {
        /* Same row stride s: row j of b starts d bytes (mod s) after some row of a. They
         * share a byte iff [d, d + b.len) meets [0, a.len) or [s, s + a.len). */
        const int64_t s = a->stride;
        const int64_t diff = (int64_t)(b->base - a->base); /* two's complement difference */
        const int64_t d = ((diff % s) + s) % s;
        return d < a->len || d + b->len > s;
    }
    return 1;
}

pw_status_t pw_check_output_overlap(const pw_problem_t *problem, const pw_attention_args_t *args, int32_t ids_topk)
{
    const int64_t n = problem->num_tokens, r = problem->num_requests;
    const int64_t hkv = problem->num_kv_heads, hq = hkv * problem->q_heads_per_kv;
    const int64_t d = problem->head_dim;
    const int64_t o_size = args->o_dtype == PW_DTYPE_FLOAT64 ? 8 : args->o_dtype == PW_DTYPE_BFLOAT16 ? 2 : 4;
    if (n <= 0 || !args->o || !args->q) return PW_SUCCESS;
    const pw_cache_strides_t cs = pw_args_cache_strides(problem, args);
    /* A cache's extent: its last addressed element + 1 (as pw_check_cache_layout bounds it). */
    const int64_t cache_len = (problem->num_cache_pages - 1) * cs.page + (problem->num_kv_heads - 1) * cs.head +
                              ((int64_t)problem->page_size - 1) * cs.token + d;
    /* The per-token scales' extent in bytes (pw_check_token_scales bounds it when a scale
     * array is given; the strides mean nothing otherwise). */
    const pw_token_scales_t ts = pw_args_token_scales(args);
    const int64_t slots = problem->num_cache_pages * problem->page_size;
    const int64_t ts_len = ts.k || ts.v ? ((hkv - 1) * ts.stride_h + (slots - 1) * ts.stride_t + 1) * 4 : 0;
    /* The Top-K ids' bytes, Hkv x N x K x 4: no earlier check bounds the product. */
    if (args->topk_ids && (double)hkv * (double)n * (double)ids_topk * 4.0 >= 4611686018427387904.0) /* 2^62 */
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.topk_ids: Hkv x N x K = %lld x %lld x %d ids address bytes past 2^62",
                       (long long)hkv, (long long)n, (int)ids_topk);
    const int64_t ids_len = hkv * n * ids_topk * 4;
    const pw_requests_t *rq = &args->requests;
    /* Row strides in bytes only where there is a second row (at N = 1 or R = 1 a stride is
     * unbounded and unused). */
    const int64_t pt_len = (int64_t)problem->max_pages_per_request * 4;
    const byte_rows_t outputs[] = {
        {(uintptr_t)args->o, n > 1 ? args->o_stride * o_size : hq * d * o_size, hq * d * o_size, n, "args.o"},
        {(uintptr_t)args->lse, n * hq * 4, n * hq * 4, 1, "args.lse"},
        {(uintptr_t)args->bad_page_count, 4, 4, 1, "args.bad_page_count"},
    };
    const byte_rows_t inputs[] = {
        {(uintptr_t)args->q, n > 1 ? args->q_stride * 2 : hq * d * 2, hq * d * 2, n, "args.q"},
        {(uintptr_t)args->k_cache, cache_len, cache_len, 1, "args.k_cache"},
        {(uintptr_t)args->v_cache, cache_len, cache_len, 1, "args.v_cache"},
        {(uintptr_t)args->k_scale, 4, 4, 1, "args.k_scale"},
        {(uintptr_t)args->v_scale, 4, 4, 1, "args.v_scale"},
        {(uintptr_t)args->topk_ids, ids_len, ids_len, 1, "args.topk_ids"},
        {(uintptr_t)rq->cu_seqlens_q, (r + 1) * 4, (r + 1) * 4, 1, "args.requests.cu_seqlens_q"},
        {(uintptr_t)rq->prefix_lens, r * 4, r * 4, 1, "args.requests.prefix_lens"},
        {(uintptr_t)rq->kv_lens, r * 4, r * 4, 1, "args.requests.kv_lens"},
        {(uintptr_t)rq->page_table, r > 1 ? rq->page_table_stride * 4 : pt_len, pt_len, r, "args.requests.page_table"},
        {(uintptr_t)pw_args_sinks(args), hq * 4, hq * 4, 1, "args.sink_logits"},
        {(uintptr_t)pw_args_sink_keys(args), hq * d * 2, hq * d * 2, 1, "args.sink_keys"},
        {(uintptr_t)ts.k, ts_len, ts_len, 1, "args.token_scales.k"},
        {(uintptr_t)ts.v, ts_len, ts_len, 1, "args.token_scales.v"},
    };
    const size_t n_out = sizeof outputs / sizeof outputs[0], n_in = sizeof inputs / sizeof inputs[0];
    for (size_t i = 0; i < n_out; i++) {
        if (!outputs[i].base || outputs[i].len <= 0 || outputs[i].rows <= 0) continue;
        for (size_t j = 0; j < n_in; j++) {
            if (!inputs[j].base || inputs[j].len <= 0 || inputs[j].rows <= 0) continue;
            if (rows_overlap(&outputs[i], &inputs[j]))
                return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                               "%s overlaps %s: the outputs must not share memory with the inputs (attention in "
                               "place is not supported)",
                               outputs[i].name, inputs[j].name);
        }
        for (size_t j = i + 1; j < n_out; j++)
            if (outputs[j].base && rows_overlap(&outputs[i], &outputs[j]))
                return pw_fail(PW_ERROR_INVALID_ARGUMENT, "%s and %s overlap", outputs[i].name, outputs[j].name);
    }
    return PW_SUCCESS;
}

pw_status_t pw_check_token_scales(const pw_problem_t *problem, const pw_attention_args_t *args)
{
    const pw_token_scales_t ts = pw_args_token_scales(args);
    if (!ts.k && !ts.v) return PW_SUCCESS;
    /* The largest float index, (Hkv - 1) stride_h + (slots - 1) stride_t, below 2^60 (its
     * byte offset below 2^62). */
    const double last = (double)(problem->num_kv_heads - 1) * (double)ts.stride_h +
                        ((double)problem->num_cache_pages * problem->page_size - 1.0) * (double)ts.stride_t;
    if (last >= 1152921504606846976.0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.token_scales: strides (stride_h %lld, stride_t %lld) address elements past 2^60",
                       (long long)ts.stride_h, (long long)ts.stride_t);
    return PW_SUCCESS;
}

pw_status_t pw_check_args_struct(const pw_attention_args_t *args)
{
    if (!args) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args is NULL");
    if (args->struct_size < PW_ATTENTION_ARGS_MIN_SIZE)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.struct_size is %u, expected %zu (initialise with PW_ATTENTION_ARGS_INIT; "
                       "the smallest accepted, 0.1.0's struct, is %zu)",
                       args->struct_size, sizeof(pw_attention_args_t), (size_t)PW_ATTENTION_ARGS_MIN_SIZE);
    const pw_precision_t precision = pw_args_precision(args);
    if (precision != PW_PRECISION_FP8 && precision != PW_PRECISION_FP8X2)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.precision is %d (PW_PRECISION_FP8 or PW_PRECISION_FP8X2)", (int)precision);
    if (pw_args_sinks(args) && pw_args_sink_keys(args))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.sink_logits and args.sink_keys are both set: give a sink as a logit or as a key, not both");
    const pw_token_scales_t ts = pw_args_token_scales(args);
    if ((ts.k || ts.v) && (ts.stride_h < 0 || ts.stride_t < 0))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.token_scales: strides must be >= 0 (stride_h %lld, stride_t %lld elements)",
                       (long long)ts.stride_h, (long long)ts.stride_t);
    return PW_SUCCESS;
}

pw_status_t pw_check_gpu_attention_args(const pw_problem_t *problem, const pw_attention_args_t *args,
                                        pw_kernel_t kernel)
{
    return pw_check_gpu_attention_args_k(problem, args, kernel, problem ? problem->topk : 0);
}

pw_status_t pw_check_gpu_attention_args_k(const pw_problem_t *problem, const pw_attention_args_t *args,
                                          pw_kernel_t kernel, int32_t ids_topk)
{
    PW_TRY(pw_problem_check(problem, NULL));
    PW_TRY(pw_check_args_struct(args));
    if (kernel != PW_KERNEL_UNION8 && kernel != PW_KERNEL_UNION4 && kernel != PW_KERNEL_PER_QUERY)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "kernel is %d (not a pw_kernel_t)", (int)kernel);
    const int g = problem->q_heads_per_kv;
    const int k = problem->topk;
    if ((g != 16 && g != 8 && g != 4) || problem->head_dim != 128 ||
        (problem->page_size != 128 && problem->page_size != 64) || (k != 16 && k != 32 && k != 64))
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "no GPU path for G=%d D=%d P=%d K=%d (supported: G=16, 8 or 4, D=128, P=128 or 64, K=16, 32 or "
                       "64; pw_sparse_prefill also takes any K in 1..64, padded with -1 to 16, 32 or 64)",
                       g, problem->head_dim, problem->page_size, k);
    if (problem->page_size == 64 && kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "P=64: the Union8 kernel runs pages of 128 tokens only (PW_KERNEL_UNION4, the default, and "
                       "PW_KERNEL_PER_QUERY run P = 64)");
    if (k > 16 && kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "K=%d: the Union8 kernel runs K = 16 only (PW_KERNEL_UNION4, the default, and "
                       "PW_KERNEL_PER_QUERY run K = 32 and 64)",
                       k);
    if (g != 16 && kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "G=%d Q heads per KV head: the Union8 kernel runs G=16 only (PW_KERNEL_UNION4, the "
                       "default, and PW_KERNEL_PER_QUERY run G=8 and 4: a padded tile, or on Union4's V^T "
                       "pre-pass a dense tile)",
                       g);
    const int o_dtype_ok = args->o_dtype == PW_DTYPE_BFLOAT16;
    if (problem->num_tokens == 0) /* nothing is read: the tensors may be NULL */
        return o_dtype_ok ? PW_SUCCESS
                          : pw_fail(PW_ERROR_UNSUPPORTED, "args.o_dtype must be PW_DTYPE_BFLOAT16 on the GPU");
    const pw_requests_t *rq = &args->requests;
    const struct {
        const void *ptr;
        const char *name;
    } required[] = {{args->q, "args.q"},
                    {args->k_cache, "args.k_cache"},
                    {args->v_cache, "args.v_cache"},
                    {args->k_scale, "args.k_scale"},
                    {args->v_scale, "args.v_scale"},
                    {args->o, "args.o"},
                    {rq->cu_seqlens_q, "args.requests.cu_seqlens_q"},
                    {rq->prefix_lens, "args.requests.prefix_lens"},
                    {rq->kv_lens, "args.requests.kv_lens"},
                    {rq->page_table, "args.requests.page_table"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].ptr) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "%s is NULL (N > 0)", required[i].name);
    if (kernel == PW_KERNEL_PER_QUERY && !args->topk_ids)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.topk_ids is NULL (the per-query kernel reads it)");
    if (!o_dtype_ok) return pw_fail(PW_ERROR_UNSUPPORTED, "args.o_dtype must be PW_DTYPE_BFLOAT16 on the GPU");
    if (((uintptr_t)pw_args_sink_keys(args) & 15u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.sink_keys must be 16-byte aligned on the GPU ([Hq, D] bf16, rows read as 16-byte vectors)");
    const pw_token_scales_t ts = pw_args_token_scales(args);
    if ((ts.k || ts.v) && kernel == PW_KERNEL_UNION8)
        return pw_fail(PW_ERROR_UNSUPPORTED,
                       "args.token_scales: the Union8 kernel does not read per-token K / V scales "
                       "(PW_KERNEL_UNION4, the default, and PW_KERNEL_PER_QUERY do)");
    if ((((uintptr_t)ts.k | (uintptr_t)ts.v) & 3u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.token_scales: k and v must be 4-byte aligned (float32)");
    PW_TRY(pw_check_token_scales(problem, args));
    if (((uintptr_t)pw_args_sinks(args) & 3u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.sink_logits must be 4-byte aligned (float32)");
    if (((uintptr_t)args->lse & 3u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.lse must be 4-byte aligned (float32) on the GPU");
    if (((uintptr_t)args->bad_page_count & 3u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.bad_page_count must be 4-byte aligned (a uint32 the GPU adds to atomically)");
    const int64_t hq_d = (int64_t)problem->num_kv_heads * problem->q_heads_per_kv * problem->head_dim;
    if (((uintptr_t)args->q & 15u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.q must be 16-byte aligned on the GPU (rows read as 16-byte vectors)");
    if (args->q_stride < hq_d || args->q_stride % 8 != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.q_stride %lld must be >= Hq*D = %lld and a multiple of 8 elements on the GPU",
                       (long long)args->q_stride, (long long)hq_d);
    if (((uintptr_t)args->o & 3u) != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.o must be 4-byte aligned on the GPU (bf16 pairs stored as 4 bytes)");
    if (args->o_stride < hq_d || args->o_stride % 2 != 0)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.o_stride %lld must be >= Hq*D = %lld and even on the GPU",
                       (long long)args->o_stride, (long long)hq_d);
    PW_TRY(pw_check_cache_shape(problem));
    PW_TRY(pw_check_cache_layout(problem, args, 1));
    PW_TRY(pw_check_row_strides(problem, args));
    if (rq->page_table_stride < problem->max_pages_per_request)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.requests.page_table_stride %lld < max_pages_per_request %d",
                       (long long)rq->page_table_stride, problem->max_pages_per_request);
    PW_TRY(pw_check_output_overlap(problem, args, ids_topk));
    return PW_SUCCESS;
}

pw_status_t pw_check_union_attention_buffers(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                             const int32_t *perm, const pw_union_meta_t *meta, pw_kernel_t kernel)
{
    if (problem->num_tokens == 0 || kernel == PW_KERNEL_PER_QUERY) return PW_SUCCESS;
    if (!grouping || grouping->struct_size < sizeof(pw_grouping_t))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "grouping is NULL or grouping.struct_size is too small "
                                                  "(initialise with PW_GROUPING_INIT)");
    if (grouping->group_size != PW_UNION_GROUP_SIZE)
        return pw_fail(PW_ERROR_UNSUPPORTED, "the union kernels need grouping.group_size = %d (got %d)",
                       PW_UNION_GROUP_SIZE, grouping->group_size);
    if (!perm || !meta || !meta->num_groups || !meta->groups || !meta->union_pages || !meta->member_masks)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "perm and every meta buffer must be given for the union kernels");
    const int64_t groups = pw_max_groups(problem, grouping);
    if ((int64_t)meta->union_capacity < (int64_t)PW_UNION_GROUP_SIZE * problem->topk || meta->max_groups < groups)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "meta capacities too small: union_capacity %d (need >= 8 K = %d), max_groups %lld "
                       "(need >= %lld)",
                       meta->union_capacity, PW_UNION_GROUP_SIZE * problem->topk, (long long)meta->max_groups,
                       (long long)groups);
    return PW_SUCCESS;
}
