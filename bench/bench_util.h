/* bench_util.h — small CUDA helpers of `pageweaver bench` (tools/cli/bench*.c), built into
 * the pw_bench_util library, never into libpageweaver. Every launcher enqueues on `stream`
 * and returns the launch's cudaError_t as an int (0 = success).
 *
 * Shapes use the names of pageweaver.h: N query rows, Hkv KV heads, 16 Q heads per KV head,
 * D = 128, K = 16 Top-K ids per (KV head, row). */
#ifndef PW_BENCH_UTIL_H
#define PW_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `bytes` (a multiple of 16) of buf `passes` times with 16-byte L1-bypassing loads
 * (ld.global.cg), the part each CTA reads moving every pass; `sink` (one device uint32)
 * is written only if the XOR of everything read hits an unlikely value, so the loads
 * cannot be dropped. Launch: blocks x 512 threads. The L2 bandwidth probe. */
int pwb_l2_read(const void *buf, size_t bytes, int passes, int blocks, uint32_t *sink,
                pw_stream_t stream);

/* Fills n bytes with E4M3 values of random sign and magnitude in about [2^-3, 2^3]
 * (never NaN), from a seeded hash of the index: GEMM operands. */
int pwb_fill_e4m3(uint8_t *buf, size_t n, uint64_t seed, pw_stream_t stream);

/* Physical regrouping ("Q and Top-K moved into execution order"): for every KV head h
 * and slot s, with r = perm[h*N + s]:
 *   q_out[s, h*16 .. h*16+15, :]  = q_in[r, h*16 .. h*16+15, :]     (bf16, row strides in
 *                                                                     elements)
 *   topk_out[h, s, :]             = topk_in[h, r, :]                (int32, K = 16)
 * q strides must be multiples of 8 elements and the pointers 16-byte aligned. */
int pwb_gather_rows(const pw_bf16_t *q_in, int64_t q_in_stride, const int32_t *topk_in,
                    const int32_t *perm, int32_t num_tokens, int32_t num_kv_heads,
                    pw_bf16_t *q_out, int64_t q_out_stride, int32_t *topk_out,
                    pw_stream_t stream);

/* The inverse for the output: o_out[r, h*16 .. h*16+15, :] = o_in[s, h*16 .. , :] with
 * r = perm[h*N + s] (bf16, same alignment rules). */
int pwb_scatter_rows(const pw_bf16_t *o_in, int64_t o_in_stride, const int32_t *perm,
                     int32_t num_tokens, int32_t num_kv_heads, pw_bf16_t *o_out,
                     int64_t o_out_stride, pw_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
