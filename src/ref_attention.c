/* CPU reference of the sparse prefill attention (docs/semantics.md §1 semantics, docs/semantics.md §4.5 arithmetic).
 *
 * The modes (EXACT, FP8_EMULATE, FP8_EMULATE_F16_P) share one gather step: for each KV head h and query row n (request r, causal
 * position c = prefix_r + n - cu_seqlens_q[r], KV length L = kv_lens[r]) the row's page set
 *   S = distinct ids p of its Top-K row with 0 <= p <= min(c, L-1) / P
 * is walked in ASCENDING page order; each page's visible tokens t = p*P + j (t < L, t <= c)
 * are gathered, K and V dequantised to double. A page whose physical id lies outside
 * [0, num_cache_pages) is counted in *bad_page_count and contributes nothing. Then for each
 * of the G Q heads of h:
 *
 *  PW_REF_EXACT: the specification in FP64. q = bf16 value, k = k_scale * e4m3 value,
 *    v = v_scale * e4m3 value; x_t = s * (q . k_t); o = sum_t softmax(x)_t v_t;
 *    LSE = max x + log(sum exp(x - max)), rounded to float. A sink logit sk (args->
 *    sink_logits) adds exp(sk - max) to the sum (the max then includes sk) and nothing to o.
 *
 *  PW_REF_FP8_EMULATE: the arithmetic the GPU kernel performs, step by step; this is the
 *    function the kernel's output is checked against TIGHTLY (the EXACT mode is the loose,
 *    accuracy check). The choices it encodes, all from docs/semantics.md §4.5:
 *    - Q quantised per (query, head) row: q_scale = amax|q| / 448 (float; a row of zeros
 *      keeps 1), q8 = e4m3_rne_satfinite(q / q_scale), division in float.
 *    - Score x = (float)(q8 . k8) * q_scale * k_scale * s, float multiplies in that order.
 *      q8 . k8 is exact (products of E4M3 values are exact in double and the sum of D <= 1024
 *      of them fits in 53 bits), standing for the FP32 tensor-core accumulation of one
 *      K-tile row; the kernel's accumulator may differ from this in the last bits.
 *    - Online softmax over pages in ascending order, FP32 state (m, l, O):
 *        m_new = max(m, max of the page's x);  alpha = expf(m - m_new), 1 while m = -inf;
 *        p_t   = expf(x_t - m_new);  l = l * alpha + (sum of the page's p_t, in token order);
 *        p8_t  = e4m3_rne_satfinite(256 * p_t);
 *        acc   = sum_t p8_t * v8_t  (exact in double, then rounded to float once: the page's
 *                freshly zeroed PV accumulator; O is never carried in it across pages)
 *        O     = O * alpha + acc.
 *    - End: o = O * v_scale / (256 * l), LSE = m + logf(l) (natural log), in float.
 *      With a sink logit sk (args->sink_logits, not -inf): ms = fmaxf(m, sk),
 *      a = expf(m - ms), b = expf(sk - ms), l' = l * a + b, o = O * v_scale * a / (256 * l'),
 *      LSE = ms + logf(l').
 *    - Sinks given as keys (args->sink_keys): the row's logit for head g is
 *      (q . key) * s, the dot of the BF16 values in float, d ascending (each product exact),
 *      then as sink_logits. EXACT: the dot in double, times s, rounded to float once.
 *    - Per-token scales (args->token_scales, semantics §4.5): x_t gets * ks_t last; per page,
 *      vmax = the smallest power of two >= the largest |vs_t| of the row's visible tokens
 *      on the page (1 if they are all 0), the weight is e4m3(256 * (p_t * (vs_t / vmax)))
 *      (l sums p_t; vs_t / vmax is exact), and O = O + (acc * vmax) (exact). EXACT folds
 *      ks_t / vs_t into the dequantised K / V.
 *    - args->precision == PW_PRECISION_FP8X2 (pw_precision_t): Q and P each get a second
 *      E4M3 term that carries the first one's rounding error, and both terms enter the
 *      same exact sums: q8 + q8lo with q8lo = e4m3_rne_satfinite(q / q_scale - q8) (float;
 *      the difference is exact), and p8 + p8lo with p8lo = e4m3_rne_satfinite(
 *      f16(256 * p) - p8) (f16: round to nearest even, 11 significant bits, as the kernel's
 *      f16x2 residual; the difference is exact in f16).
 *    - PW_REF_FP8_EMULATE_F16_P (the V^T pre-pass kernels, semantics §4.5): FP8X2 without
 *      per-token scales takes the weight once as f16(256 * p) instead of p8 + p8lo.
 *    Float expressions are written one operation at a time so that the compiler has
 *    nothing to contract (C11 without extensions: GCC keeps -ffp-contract=off).
 *
 * Both modes: s = problem->softmax_scale as a float; 0 selects 1/sqrt(D) computed in double
 * and rounded once to float (the GPU host code must pass the same float). A row with no
 * visible token gets o = 0 exactly and LSE = -inf, or the head's sink logit. Outputs are written only for rows
 * [0, N) x heads [0, Hq) x d [0, D); padding of strided views stays untouched. o_dtype
 * FLOAT64 / FLOAT32 / BFLOAT16 (RNE; the EXACT mode's value goes through float first).
 * Only host memory is touched.
 *
 * Speed: the G Q heads of a KV head are processed together, so each gathered K/V token is
 * read once per row and the innermost loops run over heads or head dims (vectorisable);
 * every head still sums in exactly the order written above. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pageweaver.h"
#include "pw_internal.h"

/* Sinks past this (just under FLT_MAX / log2(e) ~ 2.36e38, +inf included) give o = 0 x the
 * row's weighted sum and LSE = the sink (docs/semantics.md §1): the limit, and what the
 * kernels' log2-unit arithmetic returns (finish_row's factor 0). */
#define SINK_HUGE 2.3e38f

/* Heads handled together by dot_scores: the Q row block is padded to a multiple of it. */
enum { HEAD_BLOCK = 8 };

/* Per-call scratch, sized for the largest row, allocated once. T = most tokens of a row. */
typedef struct ref_scratch {
    int32_t *pages;      /* [K] S of the current row, ascending */
    int64_t *page_first; /* [K + 1] first gathered token of each kept page; [|S|] = T_row */
    double *k;           /* [T, D] gathered K (EXACT: k_scale * e4m3; EMULATE: e4m3 value) */
    double *v;           /* [T, D] gathered V, same convention with v_scale */
    float *ks, *vs;      /* [T] per-token K / V scales of the gathered tokens (1 without) */
    int64_t group_pad;   /* G rounded up to a multiple of HEAD_BLOCK */
    double *q;           /* [D, group_pad] the row's Q heads, transposed, zero padded
                            (EMULATE: q8 values) */
    double *x;           /* [T, G] scores; EXACT: then softmax weights exp(x - max) */
    double *p8;          /* [T, G] EMULATE: e4m3 value of 256 * p (FP8X2: p8 + p8lo) */
    double *acc;         /* [G, D] PV accumulator in double */
    float *o_f;          /* [G, D] EMULATE: the FP32 running output O */
    double *out;         /* [G, D] final output of the row's heads */
    double *sum;         /* [G] EXACT: softmax denominators */
    float *q_scale;      /* [G] EMULATE: per-head Q scale */
    float *m, *l;        /* [G] EMULATE: running max and running sum */
    float *lse;          /* [G] LSE of the row's heads */
    float *key_sinks;    /* [G] the row's sink logits from args->sink_keys */
    double e4m3_value[256]; /* value of each E4M3 code */
} ref_scratch_t;

static void scratch_free(ref_scratch_t *s)
{
    free(s->pages);
    free(s->page_first);
    free(s->k);
    free(s->v);
    free(s->ks);
    free(s->vs);
    free(s->q);
    free(s->x);
    free(s->p8);
    free(s->acc);
    free(s->o_f);
    free(s->out);
    free(s->sum);
    free(s->q_scale);
    free(s->m);
    free(s->l);
    free(s->lse);
    free(s->key_sinks);
}

static pw_status_t scratch_alloc(ref_scratch_t *s, int64_t topk, int64_t max_tokens,
                                 int64_t group, int64_t dim)
{
    memset(s, 0, sizeof *s);
    if (max_tokens < 1) max_tokens = 1;
    const double bytes = (double)max_tokens * (double)(dim + group) * 2.0 * sizeof(double);
    if (bytes > (double)(SIZE_MAX / 4))
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "reference scratch of %.0f bytes is too large",
                       bytes);
    const size_t t = (size_t)max_tokens, d = (size_t)dim, g = (size_t)group;
    s->group_pad = (group + HEAD_BLOCK - 1) / HEAD_BLOCK * HEAD_BLOCK;
    s->pages = malloc((size_t)topk * sizeof *s->pages);
    s->page_first = malloc(((size_t)topk + 1) * sizeof *s->page_first);
    s->k = malloc(t * d * sizeof *s->k);
    s->v = malloc(t * d * sizeof *s->v);
    s->ks = malloc(t * sizeof *s->ks);
    s->vs = malloc(t * sizeof *s->vs);
    s->q = calloc(d * (size_t)s->group_pad, sizeof *s->q); /* padding stays 0 */
    s->x = malloc(t * g * sizeof *s->x);
    s->p8 = malloc(t * g * sizeof *s->p8);
    s->acc = malloc(g * d * sizeof *s->acc);
    s->o_f = malloc(g * d * sizeof *s->o_f);
    s->out = malloc(g * d * sizeof *s->out);
    s->sum = malloc(g * sizeof *s->sum);
    s->q_scale = malloc(g * sizeof *s->q_scale);
    s->m = malloc(g * sizeof *s->m);
    s->l = malloc(g * sizeof *s->l);
    s->lse = malloc(g * sizeof *s->lse);
    s->key_sinks = malloc(g * sizeof *s->key_sinks);
    if (!s->pages || !s->page_first || !s->k || !s->v || !s->ks || !s->vs || !s->q || !s->x || !s->p8 || !s->acc ||
        !s->o_f || !s->out || !s->sum || !s->q_scale || !s->m || !s->l || !s->lse || !s->key_sinks) {
        scratch_free(s);
        return pw_fail(PW_ERROR_OUT_OF_MEMORY, "reference scratch of %.0f bytes: out of memory",
                       bytes);
    }
    return PW_SUCCESS;
}

static pw_status_t check_args(const pw_problem_t *problem, const pw_attention_args_t *a,
                              pw_ref_mode_t mode)
{
    PW_TRY(pw_check_args_struct(a)); /* NULL, struct_size, precision */
    PW_TRY(pw_problem_check(problem, &a->requests));
    if (mode != PW_REF_EXACT && mode != PW_REF_FP8_EMULATE && mode != PW_REF_FP8_EMULATE_F16_P)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "mode is %d (PW_REF_EXACT, PW_REF_FP8_EMULATE or PW_REF_FP8_EMULATE_F16_P)", (int)mode);
    if (problem->num_tokens == 0) return PW_SUCCESS; /* nothing is read or written */
    if (!a->requests.page_table)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.requests.page_table is NULL (required)");
    if (!a->q) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.q is NULL");
    if (!a->k_cache) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.k_cache is NULL");
    if (!a->v_cache) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.v_cache is NULL");
    if (!a->k_scale) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.k_scale is NULL");
    if (!a->v_scale) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.v_scale is NULL");
    if (!a->topk_ids) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.topk_ids is NULL");
    if (!a->o) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.o is NULL");
    if (!isfinite(*a->k_scale) || !isfinite(*a->v_scale))
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.k_scale (%g) and args.v_scale (%g) must be finite",
                       (double)*a->k_scale, (double)*a->v_scale);
    const int64_t hq_d =
        (int64_t)problem->num_kv_heads * problem->q_heads_per_kv * problem->head_dim;
    if (a->q_stride < hq_d)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.q_stride is %lld, < Hq*D = %lld",
                       (long long)a->q_stride, (long long)hq_d);
    if (a->o_stride < hq_d)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT, "args.o_stride is %lld, < Hq*D = %lld",
                       (long long)a->o_stride, (long long)hq_d);
    PW_TRY(pw_check_cache_layout(problem, a, 0));
    PW_TRY(pw_check_token_scales(problem, a));
    if (a->o_dtype != PW_DTYPE_FLOAT32 && a->o_dtype != PW_DTYPE_BFLOAT16 &&
        a->o_dtype != PW_DTYPE_FLOAT64)
        return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                       "args.o_dtype is %d (FLOAT32, BFLOAT16 or FLOAT64)", (int)a->o_dtype);
    PW_TRY(pw_check_row_strides(problem, a));
    PW_TRY(pw_check_output_overlap(problem, a, problem->topk));
    return PW_SUCCESS;
}

/* S of one row (docs/semantics.md §1): distinct valid ids, ascending. Returns |S|. */
static int32_t row_pages(const int32_t *ids, int32_t k, int64_t last_valid_page, int32_t *pages)
{
    int32_t count = 0;
    for (int32_t i = 0; i < k; i++) {
        const int64_t p = ids[i];
        if (p < 0 || p > last_valid_page) continue;
        /* Insertion into the sorted list, skipping duplicates. */
        int32_t at = count;
        while (at > 0 && pages[at - 1] > ids[i]) at--;
        if (at > 0 && pages[at - 1] == ids[i]) continue;
        memmove(pages + at + 1, pages + at, (size_t)(count - at) * sizeof *pages);
        pages[at] = ids[i];
        count++;
    }
    return count;
}

/* Visible tokens of the row's pages, gathered page by page in ascending order into s->k and
 * s->v (and their per-token scales into s->ks / s->vs: 1 without; EXACT folds them into the
 * values, in double: exact, 24 x 4 x 24 significant bits); fills s->page_first and returns
 * the token count. Pages whose physical id is outside the cache are counted and gathered
 * as empty. */
static int64_t gather_row(const pw_problem_t *problem, const pw_attention_args_t *a,
                          const pw_token_scales_t *ts, int exact, ref_scratch_t *s, int32_t num_pages,
                          int64_t request, int64_t kv_head, int64_t last_token, const double *k_value,
                          const double *v_value)
{
    const pw_requests_t *rq = &a->requests;
    const int64_t page = problem->page_size, dim = problem->head_dim;
    const pw_cache_strides_t cs = pw_args_cache_strides(problem, a);
    int64_t tokens = 0;
    for (int32_t i = 0; i < num_pages; i++) {
        s->page_first[i] = tokens;
        const int64_t logical = s->pages[i];
        const int64_t physical = rq->page_table[request * rq->page_table_stride + logical];
        if (physical < 0 || physical >= problem->num_cache_pages) {
            if (a->bad_page_count) (*a->bad_page_count)++;
            continue;
        }
        const int64_t begin = logical * page; /* 64-bit: never p*P in 32 bits */
        int64_t end = begin + page;
        if (end > last_token + 1) end = last_token + 1;
        for (int64_t t = begin; t < end; t++, tokens++) {
            const int64_t slot = physical * page + (t - begin);
            const int64_t at_cache = physical * cs.page + kv_head * cs.head + (t - begin) * cs.token;
            const pw_fp8_e4m3_t *k8 = a->k_cache + at_cache;
            const pw_fp8_e4m3_t *v8 = a->v_cache + at_cache;
            const int64_t at = kv_head * ts->stride_h + slot * ts->stride_t;
            const float ks = ts->k ? ts->k[at] : 1.0f, vs = ts->v ? ts->v[at] : 1.0f;
            s->ks[tokens] = ks;
            s->vs[tokens] = vs;
            const double kf = exact ? (double)ks : 1.0, vf = exact ? (double)vs : 1.0;
            for (int64_t d = 0; d < dim; d++) {
                s->k[tokens * dim + d] = k_value[k8[d]] * kf;
                s->v[tokens * dim + d] = v_value[v8[d]] * vf;
            }
        }
    }
    s->page_first[num_pages] = tokens;
    return tokens;
}

/* x rounded to the nearest f16 value (ties to even; 11 significant bits, subnormal step
 * 2^-24, no overflow handling: |x| <= 256 here). */
static double round_f16(double x)
{
    if (x == 0.0) return x;
    int e;
    (void)frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int ulp_exp = e - 11;
    if (ulp_exp < -24) ulp_exp = -24;
    return ldexp(nearbyint(ldexp(x, -ulp_exp)), ulp_exp); /* default rounding mode: even */
}

/* The G Q heads of row n and KV head h into s->q ([D, group_pad], transposed). EXACT: the
 * bf16 values. EMULATE: q8 = e4m3(q / q_scale) with q_scale = amax|q| / 448 per head (1 for
 * a row of zeros), all in float (FP8X2: q8 + q8lo); the scales go to s->q_scale. */
static void load_q_row(const pw_attention_args_t *a, ref_scratch_t *s, pw_ref_mode_t mode,
                       int64_t n, int64_t h, int64_t group, int64_t dim)
{
    const int two_term = pw_args_precision(a) == PW_PRECISION_FP8X2;
    for (int64_t g = 0; g < group; g++) {
        const pw_bf16_t *q = a->q + n * a->q_stride + (h * group + g) * dim;
        if (mode == PW_REF_EXACT) {
            for (int64_t d = 0; d < dim; d++)
                s->q[d * s->group_pad + g] = (double)pw_bf16_to_float(q[d]);
            continue;
        }
        float amax = 0.0f;
        for (int64_t d = 0; d < dim; d++) {
            const float value = fabsf(pw_bf16_to_float(q[d]));
            if (value > amax) amax = value;
        }
        const float q_scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int64_t d = 0; d < dim; d++) {
            const float scaled = pw_bf16_to_float(q[d]) / q_scale;
            const double q8 = s->e4m3_value[pw_fp8_e4m3_from_float(scaled)];
            double value = q8;
            if (two_term) {
                const float residual = scaled - (float)q8; /* exact */
                value += s->e4m3_value[pw_fp8_e4m3_from_float(residual)];
            }
            s->q[d * s->group_pad + g] = value;
        }
        s->q_scale[g] = q_scale;
    }
}

/* x[t][g] = q_g . k_t for every gathered token t and head g, each sum in d order.
 * q: [D, group_pad] (transposed, zero padded), k: [tokens, D], x: [tokens, group]. */
static void dot_scores(double *restrict x, const double *restrict q, const double *restrict k,
                       int64_t tokens, int64_t group, int64_t group_pad, int64_t dim)
{
    for (int64_t t = 0; t < tokens; t++) {
        for (int64_t g0 = 0; g0 < group; g0 += HEAD_BLOCK) {
            double sum[HEAD_BLOCK] = {0.0};
            for (int64_t d = 0; d < dim; d++) {
                const double kd = k[t * dim + d];
                const double *qd = q + d * group_pad + g0;
                for (int b = 0; b < HEAD_BLOCK; b++) sum[b] += qd[b] * kd;
            }
            for (int64_t b = 0; b < HEAD_BLOCK && g0 + b < group; b++)
                x[t * group + g0 + b] = sum[b];
        }
    }
}

/* acc[g][d] += w[t][g] * v[t][d] for t in [first, end), one addition per token in token
 * order (four tokens per pass over acc, to load and store it less often).
 * acc: [group, D], w: [tokens, group], v: [tokens, D]. */
static void pv_accumulate(double *restrict acc, const double *restrict w,
                          const double *restrict v, int64_t first, int64_t end, int64_t group,
                          int64_t dim)
{
    int64_t t = first;
    for (; t + 4 <= end; t += 4) {
        const double *v0 = v + t * dim, *v1 = v0 + dim, *v2 = v1 + dim, *v3 = v2 + dim;
        for (int64_t g = 0; g < group; g++) {
            const double w0 = w[t * group + g], w1 = w[(t + 1) * group + g];
            const double w2 = w[(t + 2) * group + g], w3 = w[(t + 3) * group + g];
            double *a = acc + g * dim;
            for (int64_t d = 0; d < dim; d++) {
                double sum = a[d];
                sum += w0 * v0[d];
                sum += w1 * v1[d];
                sum += w2 * v2[d];
                sum += w3 * v3[d];
                a[d] = sum;
            }
        }
    }
    for (; t < end; t++)
        for (int64_t g = 0; g < group; g++) {
            const double wt = w[t * group + g];
            for (int64_t d = 0; d < dim; d++) acc[g * dim + d] += wt * v[t * dim + d];
        }
}

/* EXACT mode: FP64 softmax over the gathered tokens, for every head of the row. */
/* sinks: the row's G sink logits (args.sink_logits + h * G), or NULL. */
static void attend_exact(ref_scratch_t *s, int64_t tokens, int64_t group, int64_t dim,
                         double scale, const float *sinks)
{
    dot_scores(s->x, s->q, s->k, tokens, group, s->group_pad, dim);
    for (int64_t g = 0; g < group; g++) {
        double max_x = -INFINITY;
        for (int64_t t = 0; t < tokens; t++) {
            s->x[t * group + g] *= scale;
            if (s->x[t * group + g] > max_x) max_x = s->x[t * group + g];
        }
        /* A sink joins the denominator only: exp(sink - max) (semantics §1); past SINK_HUGE
         * (+inf included) the limit o = 0, LSE = sink. */
        const double sink = sinks ? (double)sinks[g] : -INFINITY;
        if (sink > (double)SINK_HUGE) {
            s->lse[g] = (float)sink;
            /* Weight 0, as the kernels' factor 0 on O: 0 x the row's data, so NaN data the
             * row sees (a NaN score here, a NaN V in the PV sum) still makes o NaN. */
            for (int64_t t = 0; t < tokens; t++) s->x[t * group + g] = 0.0 * exp(s->x[t * group + g] - max_x);
            s->sum[g] = 1.0;
            continue;
        }
        if (sink > max_x) max_x = sink;
        s->sum[g] = sink == -INFINITY ? 0.0 : exp(sink - max_x);
        for (int64_t t = 0; t < tokens; t++) {
            s->x[t * group + g] = exp(s->x[t * group + g] - max_x); /* now a weight */
            s->sum[g] += s->x[t * group + g];
        }
        s->lse[g] = (float)(max_x + log(s->sum[g]));
    }
    for (int64_t i = 0; i < group * dim; i++) s->acc[i] = 0.0;
    pv_accumulate(s->acc, s->x, s->v, 0, tokens, group, dim);
    for (int64_t g = 0; g < group; g++)
        for (int64_t d = 0; d < dim; d++) s->out[g * dim + d] = s->acc[g * dim + d] / s->sum[g];
}

/* FP8_EMULATE mode (see the file comment), every head of the row. s->q holds q8 values,
 * s->q_scale the per-head scales. */
/* Returns 0, or -1 when a score is not finite in float (scales so large that q_scale *
 * k_scale * s * (q8 . k8) overflows FP32: the arithmetic has no answer then). */
static int attend_emulate(ref_scratch_t *s, int32_t num_pages, int64_t group, int64_t dim,
                          float k_scale, float v_scale, float scale, pw_precision_t precision,
                          int f16_p, const float *sinks)
{
    /* Exact (see the file comment). */
    dot_scores(s->x, s->q, s->k, s->page_first[num_pages], group, s->group_pad, dim);
    int finite = 1;
    for (int64_t t = 0; t < s->page_first[num_pages]; t++)
        for (int64_t g = 0; g < group; g++) {
            float x = (float)s->x[t * group + g];
            x = x * s->q_scale[g];
            x = x * k_scale;
            x = x * scale;
            x = x * s->ks[t]; /* per-token K scale (1 without): exact when 1 */
            s->x[t * group + g] = x;
            finite = finite && isfinite(x);
        }
    if (!finite) return -1;
    float *m = s->m, *l = s->l;
    for (int64_t g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (int64_t i = 0; i < group * dim; i++) s->o_f[i] = 0.0f;

    for (int32_t i = 0; i < num_pages; i++) {
        const int64_t first = s->page_first[i], end = s->page_first[i + 1];
        if (first == end) continue; /* no visible token: the page contributes nothing */
        /* Per-token V scales: P of token t is multiplied by vs_t / vmax before it is
         * quantised, vmax = the smallest power of two >= the largest |vs| of the row's
         * visible tokens on the page (keeps 256 p vs_t / vmax within +-256; a power of two
         * makes the division and the product below exact), and the page's PV sum by vmax
         * after (1 and exact without per-token scales). */
        float vabs = 0.0f;
        for (int64_t t = first; t < end; t++) vabs = fabsf(s->vs[t]) > vabs ? fabsf(s->vs[t]) : vabs;
        float vmax = 1.0f; /* all zero (or NaN: propagates through vs_t) */
        if (vabs > 0.0f && isfinite(vabs)) {
            int e = 0;
            const float f = frexpf(vabs, &e); /* vabs = f 2^e, f in [0.5, 1) */
            vmax = f == 0.5f ? vabs : ldexpf(1.0f, e);
        }
        for (int64_t g = 0; g < group; g++) {
            float m_new = m[g];
            for (int64_t t = first; t < end; t++)
                if ((float)s->x[t * group + g] > m_new) m_new = (float)s->x[t * group + g];
            const float alpha = (m[g] == -INFINITY) ? 1.0f : expf(m[g] - m_new);
            float page_sum = 0.0f;
            for (int64_t t = first; t < end; t++) {
                const float p = expf((float)s->x[t * group + g] - m_new);
                page_sum = page_sum + p;
                const float pv = p * (s->vs[t] / vmax); /* per-token V scale (1 without): exact then */
                const float p256 = 256.0f * pv;
                const double p8 = s->e4m3_value[pw_fp8_e4m3_from_float(p256)];
                double weight = p8;
                if (f16_p) {
                    weight = round_f16((double)p256); /* P once in f16 (the pre-pass kernels) */
                } else if (precision == PW_PRECISION_FP8X2) {
                    const double residual = round_f16((double)p256) - p8; /* exact */
                    weight += s->e4m3_value[pw_fp8_e4m3_from_float((float)residual)];
                }
                s->p8[t * group + g] = weight;
            }
            l[g] = l[g] * alpha;
            l[g] = l[g] + page_sum;
            m[g] = m_new;
            float *o = s->o_f + g * dim;
            for (int64_t d = 0; d < dim; d++) o[d] = o[d] * alpha; /* O * alpha, then + acc */
        }
        /* The page's PV in a freshly zeroed accumulator: exact in double. */
        for (int64_t j = 0; j < group * dim; j++) s->acc[j] = 0.0;
        pv_accumulate(s->acc, s->p8, s->v, first, end, group, dim);
        for (int64_t j = 0; j < group * dim; j++) {
            const float add = (float)s->acc[j] * vmax; /* exact: a power of two (1 without scales) */
            s->o_f[j] = s->o_f[j] + add;
        }
    }
    for (int64_t g = 0; g < group; g++) {
        const float sink = sinks ? sinks[g] : -INFINITY;
        if (sink == -INFINITY) {
            const float denominator = 256.0f * l[g];
            for (int64_t d = 0; d < dim; d++) {
                const float scaled = s->o_f[g * dim + d] * v_scale;
                s->out[g * dim + d] = (double)(scaled / denominator);
            }
            s->lse[g] = m[g] + logf(l[g]);
            continue;
        }
        /* Sink (semantics §1, §4.5 step 4): the state and the sink on a common maximum,
         * ms = max(m, sink), a = exp(m - ms), b = exp(sink - ms), l' = l a + b,
         * o = O v_scale a / (256 l'), LSE = ms + ln l'; a and b below FLT_MIN are 0 (the
         * kernels' ex2.approx flushes subnormal results); a sink past SINK_HUGE,
         * +inf included: o = O x 0, LSE = the sink (the kernels work in log2 units). */
        if (sink > SINK_HUGE) { /* o = O x 0, as the kernels' factor 0: NaN in O stays */
            for (int64_t d = 0; d < dim; d++) s->out[g * dim + d] = (double)(s->o_f[g * dim + d] * 0.0f);
            s->lse[g] = sink;
            continue;
        }
        const float ms = fmaxf(m[g], sink);
        float a = expf(m[g] - ms), b = expf(sink - ms);
        if (a < FLT_MIN) a = 0.0f;
        if (b < FLT_MIN) b = 0.0f;
        float lt = l[g] * a;
        lt = lt + b;
        const float denominator = 256.0f * lt;
        for (int64_t d = 0; d < dim; d++) {
            float scaled = s->o_f[g * dim + d] * v_scale;
            scaled = scaled * a;
            s->out[g * dim + d] = (double)(scaled / denominator);
        }
        s->lse[g] = ms + logf(lt);
    }
    return 0;
}

static void write_output_row(const pw_attention_args_t *a, int64_t n, int64_t head, int64_t dim,
                             const double *row)
{
    const int64_t base = n * a->o_stride + head * dim;
    for (int64_t d = 0; d < dim; d++) {
        switch (a->o_dtype) {
        case PW_DTYPE_FLOAT64: ((double *)a->o)[base + d] = row[d]; break;
        case PW_DTYPE_FLOAT32: ((float *)a->o)[base + d] = (float)row[d]; break;
        case PW_DTYPE_BFLOAT16:
            ((pw_bf16_t *)a->o)[base + d] = pw_bf16_from_float((float)row[d]);
            break;
        }
    }
}

pw_status_t pw_ref_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                             pw_ref_mode_t mode)
{
    PW_TRY(check_args(problem, args, mode));
    const pw_requests_t *rq = &args->requests;
    const int64_t n_tokens = problem->num_tokens, hkv = problem->num_kv_heads;
    const int64_t group = problem->q_heads_per_kv, dim = problem->head_dim;
    const int64_t page = problem->page_size, hq = hkv * group;
    const int32_t topk = problem->topk;
    const float scale = problem->softmax_scale != 0.0f ? problem->softmax_scale
                                                       : (float)(1.0 / sqrt((double)dim));
    if (n_tokens == 0) return PW_SUCCESS;
    const float k_scale = *args->k_scale, v_scale = *args->v_scale;
    const float *sinks = pw_args_sinks(args); /* [Hq] or NULL */
    const pw_token_scales_t token_scales = pw_args_token_scales(args);
    const int f16_p = mode == PW_REF_FP8_EMULATE_F16_P && pw_args_f16_vt(args);
    const pw_bf16_t *sink_keys = pw_args_sink_keys(args); /* [Hq, D] or NULL */

    /* Most tokens one row can see: |S| <= K pages, and never more than its KV length. */
    int64_t max_kv = 0;
    for (int32_t r = 0; r < problem->num_requests; r++)
        if (rq->kv_lens[r] > max_kv) max_kv = rq->kv_lens[r];
    int64_t max_tokens = (int64_t)topk * page;
    if (max_tokens > max_kv) max_tokens = max_kv;

    /* E4M3 code -> value, and the gathered value per mode (k_scale * e4m3 is exact in
     * double: 24 by 4 significant bits). */
    ref_scratch_t s;
    PW_TRY(scratch_alloc(&s, topk, max_tokens, group, dim));
    double k_value[256], v_value[256];
    for (int c = 0; c < 256; c++) {
        s.e4m3_value[c] = (double)pw_fp8_e4m3_to_float((pw_fp8_e4m3_t)c);
        k_value[c] = mode == PW_REF_EXACT ? (double)k_scale * s.e4m3_value[c] : s.e4m3_value[c];
        v_value[c] = mode == PW_REF_EXACT ? (double)v_scale * s.e4m3_value[c] : s.e4m3_value[c];
    }

    for (int64_t h = 0; h < hkv; h++) {
        int64_t r = 0;
        for (int64_t n = 0; n < n_tokens; n++) {
            while (rq->cu_seqlens_q[r + 1] <= n) r++; /* request of row n */
            const int64_t causal = (int64_t)rq->prefix_lens[r] + (n - rq->cu_seqlens_q[r]);
            const int64_t kv_len = rq->kv_lens[r];
            const int64_t last_token = causal < kv_len - 1 ? causal : kv_len - 1;
            const int32_t *ids = args->topk_ids + (h * n_tokens + n) * topk;
            const int32_t num_pages = row_pages(ids, topk, last_token / page, s.pages);
            const int64_t tokens = gather_row(problem, args, &token_scales, mode == PW_REF_EXACT, &s, num_pages,
                                              r, h, last_token, k_value, v_value);

            const float *row_sinks = sinks ? sinks + h * group : NULL;
            if (sink_keys) { /* the row's logits from the keys (semantics §1, §4.5) */
                for (int64_t g = 0; g < group; g++) {
                    const pw_bf16_t *q = args->q + n * args->q_stride + (h * group + g) * dim;
                    const pw_bf16_t *key = sink_keys + (h * group + g) * dim;
                    if (mode == PW_REF_EXACT) {
                        double dot = 0.0;
                        for (int64_t d = 0; d < dim; d++)
                            dot += (double)pw_bf16_to_float(q[d]) * (double)pw_bf16_to_float(key[d]);
                        s.key_sinks[g] = (float)((double)scale * dot); /* rounded to float once */
                    } else {
                        float dot = 0.0f; /* FP32, d ascending; each product is exact in float */
                        for (int64_t d = 0; d < dim; d++) {
                            const float prod = pw_bf16_to_float(q[d]) * pw_bf16_to_float(key[d]);
                            dot = dot + prod;
                        }
                        s.key_sinks[g] = dot * scale;
                    }
                }
                row_sinks = s.key_sinks;
            }
            if (tokens == 0) { /* empty row: exactly 0, LSE -inf (or the sink logit) */
                for (int64_t i = 0; i < group * dim; i++) s.out[i] = 0.0;
                for (int64_t g = 0; g < group; g++) s.lse[g] = row_sinks ? row_sinks[g] : -INFINITY;
            } else {
                load_q_row(args, &s, mode, n, h, group, dim);
                if (mode == PW_REF_EXACT)
                    attend_exact(&s, tokens, group, dim, (double)scale, row_sinks);
                else if (attend_emulate(&s, num_pages, group, dim, k_scale, v_scale, scale,
                                        pw_args_precision(args), f16_p, row_sinks) != 0) {
                    scratch_free(&s);
                    return pw_fail(PW_ERROR_INVALID_ARGUMENT,
                                   "a score of row %lld, KV head %lld is not finite in the FP8 "
                                   "arithmetic (k_scale %g, softmax scale %g): a NaN / Inf in that "
                                   "row of q or in a K cache slot it sees, scales too large, or a "
                                   "non-finite per-token K scale (args.token_scales.k)",
                                   (long long)n, (long long)h, (double)k_scale, (double)scale);
                }
            }
            for (int64_t g = 0; g < group; g++) {
                write_output_row(args, n, h * group + g, dim, s.out + g * dim);
                if (args->lse) args->lse[n * hq + h * group + g] = s.lse[g];
            }
        }
    }
    scratch_free(&s);
    return PW_SUCCESS;
}
