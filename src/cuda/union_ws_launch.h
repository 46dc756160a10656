/* union_ws_launch.h — host entry of the warp-specialised 8-query kernel (union_ws.cu),
 * called by attention.cu's dispatcher with the parameters it builds for every kernel. */
#ifndef PW_UNION_WS_LAUNCH_H
#define PW_UNION_WS_LAUNCH_H

#include "attention_config.cuh"
#include "pageweaver.h"

/* mode: pw::WsMode (union_ws.cuh); x2: PW_PRECISION_FP8X2. params.num_items items;
 * params.work_counter NULL: one CTA per item, else min(SMs, items) persistent CTAs fetch
 * items from it (a device int32 that must be 0 when the kernel starts). */
pw_status_t pw_launch_union_ws(const pw::AttentionParams &params, int mode, bool x2, pw_stream_t stream);

#endif
