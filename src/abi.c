/* pw_abi_query: the struct layouts and *_INIT defaults of pageweaver.h, by name, for
 * language bindings that cannot read a C header (the Python package's ctypes layer checks
 * every struct it mirrors against these numbers when it loads the library, and takes the
 * defaults of its `None` arguments from here, so a changed header can never be misread
 * silently). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pageweaver.h"

typedef struct abi_entry {
    const char *name;
    int64_t value;
} abi_entry_t;

#define PW_ABI_SIZE(T) {"sizeof " #T, (int64_t)sizeof(T)}
#define PW_ABI_OFFSET(T, field) {"offsetof " #T "." #field, (int64_t)offsetof(T, field)}

int64_t pw_abi_query(const char *name)
{
    if (!name) return -1;
    static const pw_problem_t problem = PW_PROBLEM_INIT;
    static const pw_plan_config_t config = PW_PLAN_CONFIG_INIT;
    static const pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    static const pw_plan_info_t info = PW_PLAN_INFO_INIT;
    const abi_entry_t table[] = {
        PW_ABI_SIZE(pw_problem_t),
        PW_ABI_OFFSET(pw_problem_t, struct_size),
        PW_ABI_OFFSET(pw_problem_t, num_tokens),
        PW_ABI_OFFSET(pw_problem_t, num_requests),
        PW_ABI_OFFSET(pw_problem_t, num_kv_heads),
        PW_ABI_OFFSET(pw_problem_t, q_heads_per_kv),
        PW_ABI_OFFSET(pw_problem_t, head_dim),
        PW_ABI_OFFSET(pw_problem_t, page_size),
        PW_ABI_OFFSET(pw_problem_t, topk),
        PW_ABI_OFFSET(pw_problem_t, max_pages_per_request),
        PW_ABI_OFFSET(pw_problem_t, num_cache_pages),
        PW_ABI_OFFSET(pw_problem_t, softmax_scale),
        PW_ABI_SIZE(pw_requests_t),
        PW_ABI_OFFSET(pw_requests_t, cu_seqlens_q),
        PW_ABI_OFFSET(pw_requests_t, prefix_lens),
        PW_ABI_OFFSET(pw_requests_t, kv_lens),
        PW_ABI_OFFSET(pw_requests_t, page_table),
        PW_ABI_OFFSET(pw_requests_t, page_table_stride),
        PW_ABI_SIZE(pw_plan_config_t),
        PW_ABI_OFFSET(pw_plan_config_t, struct_size),
        PW_ABI_OFFSET(pw_plan_config_t, regroup),
        PW_ABI_OFFSET(pw_plan_config_t, window),
        PW_ABI_OFFSET(pw_plan_config_t, kernel),
        PW_ABI_OFFSET(pw_plan_config_t, flags),
        PW_ABI_OFFSET(pw_plan_config_t, vt_max_pages),
        PW_ABI_OFFSET(pw_plan_config_t, max_query_rows),
        PW_ABI_SIZE(pw_plan_info_t),
        PW_ABI_OFFSET(pw_plan_info_t, struct_size),
        PW_ABI_OFFSET(pw_plan_info_t, regroup),
        PW_ABI_OFFSET(pw_plan_info_t, configured),
        PW_ABI_OFFSET(pw_plan_info_t, window),
        PW_ABI_OFFSET(pw_plan_info_t, kernel),
        PW_ABI_OFFSET(pw_plan_info_t, saving_us),
        PW_ABI_OFFSET(pw_plan_info_t, cost_us),
        PW_ABI_OFFSET(pw_plan_info_t, margin_us),
        PW_ABI_OFFSET(pw_plan_info_t, regroup_group_size),
        PW_ABI_OFFSET(pw_plan_info_t, vt_prepass),
        PW_ABI_OFFSET(pw_plan_info_t, dense_tile),
        PW_ABI_OFFSET(pw_plan_info_t, vt_capacity),
        PW_ABI_OFFSET(pw_plan_info_t, fp8x2_stacked),
        PW_ABI_OFFSET(pw_plan_info_t, token_scales_stacked),
        PW_ABI_SIZE(pw_attention_args_t),
        PW_ABI_OFFSET(pw_attention_args_t, struct_size),
        PW_ABI_OFFSET(pw_attention_args_t, q),
        PW_ABI_OFFSET(pw_attention_args_t, q_stride),
        PW_ABI_OFFSET(pw_attention_args_t, k_cache),
        PW_ABI_OFFSET(pw_attention_args_t, v_cache),
        PW_ABI_OFFSET(pw_attention_args_t, kv_stride),
        PW_ABI_OFFSET(pw_attention_args_t, k_scale),
        PW_ABI_OFFSET(pw_attention_args_t, v_scale),
        PW_ABI_OFFSET(pw_attention_args_t, topk_ids),
        PW_ABI_OFFSET(pw_attention_args_t, requests),
        PW_ABI_OFFSET(pw_attention_args_t, o),
        PW_ABI_OFFSET(pw_attention_args_t, o_stride),
        PW_ABI_OFFSET(pw_attention_args_t, o_dtype),
        PW_ABI_OFFSET(pw_attention_args_t, lse),
        PW_ABI_OFFSET(pw_attention_args_t, bad_page_count),
        PW_ABI_OFFSET(pw_attention_args_t, precision),
        PW_ABI_OFFSET(pw_attention_args_t, sink_logits),
        PW_ABI_OFFSET(pw_attention_args_t, token_scales),
        PW_ABI_OFFSET(pw_attention_args_t, sink_keys),
        PW_ABI_OFFSET(pw_attention_args_t, cache_layout),
        PW_ABI_SIZE(pw_cache_layout_t),
        PW_ABI_OFFSET(pw_cache_layout_t, page_stride),
        PW_ABI_OFFSET(pw_cache_layout_t, head_stride),
        PW_ABI_OFFSET(pw_cache_layout_t, token_stride),
        PW_ABI_SIZE(pw_token_scales_t),
        PW_ABI_OFFSET(pw_token_scales_t, k),
        PW_ABI_OFFSET(pw_token_scales_t, v),
        PW_ABI_OFFSET(pw_token_scales_t, stride_h),
        PW_ABI_OFFSET(pw_token_scales_t, stride_t),
        {"init pw_problem_t.q_heads_per_kv", problem.q_heads_per_kv},
        {"init pw_problem_t.head_dim", problem.head_dim},
        {"init pw_problem_t.page_size", problem.page_size},
        {"init pw_problem_t.topk", problem.topk},
        {"init pw_plan_config_t.regroup", (int64_t)config.regroup},
        {"init pw_plan_config_t.window", config.window},
        {"init pw_plan_config_t.kernel", (int64_t)config.kernel},
        {"init pw_plan_config_t.flags", (int64_t)config.flags},
        {"init pw_plan_config_t.vt_max_pages", config.vt_max_pages},
        {"init pw_plan_config_t.max_query_rows", config.max_query_rows},
        {"init pw_attention_args_t.precision", (int64_t)args.precision},
        {"init pw_attention_args_t.o_dtype", (int64_t)args.o_dtype},
        {"init pw_attention_args_t.struct_size", (int64_t)args.struct_size},
        {"init pw_plan_config_t.struct_size", (int64_t)config.struct_size},
        {"init pw_plan_info_t.token_scales_stacked", (int64_t)info.token_scales_stacked},
        {"PW_PLAN_SHORT_REQUEST_ROWS", PW_PLAN_SHORT_REQUEST_ROWS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) return table[i].value;
    return -1;
}
