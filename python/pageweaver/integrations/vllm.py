"""vLLM's MiniMax-M3 sparse attention (prefill), taken with vLLM's own arguments.

vLLM (vllm/models/minimax_m3/common/ops/sparse_attn.py, minimax_m3_sparse_attn) keeps K
and V of a layer in ONE cache tensor, with blocks of P tokens = PageWeaver's pages
(page_size = P, read from the cache's shape; the GPU runs P = 128 and 64), block_table
[B, max_blocks] as the page table and topk_idx holding logical block ids in the same
blocks. Its backends use one of two layouts, both taken here:
  - [num_blocks, Hkv, P, 2*D]: block b, KV head h, token offset t holds K in [..., :D] and
    V in [..., D:] ("interleaved", head-major inside a block);
  - [num_blocks, 2, P, Hkv, D]: K in [:, 0], V in [:, 1], token-major inside a block.

PageWeaver reads either in place: K and V are passed as [pages, Hkv, P, D] views (for the
second layout kv_cache[:, i].permute(0, 2, 1, 3)), whose strides (page, head, token) become
the library's args.cache_layout (one call for every KV head, no copy). Per-token scales
[Hkv, slots] (slot = block * P + offset, vLLM's indexing) go to k_token_scales /
v_token_scales.
"""
import torch

from .._op import PAGE_SIZE_ADVICE, sparse_prefill
from ._common import engine_names, host_float, i32 as _i32, max_rows_hint, scale_kwargs

__all__ = ["minimax_m3_sparse_attn"]

_FP8 = torch.float8_e4m3fn

# sparse_prefill's parameter names as vLLM's (its errors name the engine's arguments)
_NAMES = {"page_table": "block_table", "kv_lens": "seq_lens", "out": "output",
          "max_seqlen_q": "max_query_len", "softmax_scale": "sm_scale", "k_token_scales": "k_scale",
          "v_token_scales": "v_scale", "k_cache": "kv_cache (its K view [num_blocks, Hkv, P, D])",
          "v_cache": "kv_cache (its V view [num_blocks, Hkv, P, D])"}


def _views(kv_cache):
    """K and V of the cache as [num_blocks, Hkv, P, D] views (no copy): the interleaved
    [num_blocks, Hkv, P, 2*D] layout, or [num_blocks, 2, P, Hkv, D]."""
    if kv_cache.dim() not in (4, 5):
        raise ValueError(f"kv_cache: shape {list(kv_cache.shape)}, expected "
                         f"[num_blocks, Hkv, P, 2*D] or [num_blocks, 2, P, Hkv, D] (P = block size)")
    if kv_cache.dtype != _FP8:
        raise TypeError(f"kv_cache: dtype {kv_cache.dtype}: PageWeaver reads FP8 E4M3 "
                        f"caches (torch.float8_e4m3fn) only")
    if kv_cache.dim() == 5:
        nb, two, p, hkv, d = kv_cache.shape
        if two != 2 or p < 1 or kv_cache.stride(4) != 1:
            raise ValueError(f"kv_cache: shape {list(kv_cache.shape)}, strides "
                             f"{list(kv_cache.stride())}: [num_blocks, 2 (K, V), P, Hkv, D] with "
                             f"blocks of >= 1 token and contiguous rows expected")
        return kv_cache[:, 0].permute(0, 2, 1, 3), kv_cache[:, 1].permute(0, 2, 1, 3)
    nb, hkv, p, two_d = kv_cache.shape
    if p < 1 or two_d % 2 or kv_cache.stride(3) != 1:
        raise ValueError(f"kv_cache: shape {list(kv_cache.shape)}, strides "
                         f"{list(kv_cache.stride())}: blocks of >= 1 token, an even last dim "
                         f"(K | V) and contiguous rows expected")
    d = two_d // 2
    return kv_cache[..., :d], kv_cache[..., d:]


def minimax_m3_sparse_attn(q, kv_cache, topk_idx, block_table, cu_seqlens_q, seq_lens,
                           prefix_lens, max_query_len, num_kv_heads, sm_scale, output,
                           k_scale=None, v_scale=None, *, bad_page_count=None,
                           precision=None, regroup=None, kernel=None):
    """Drop-in for vLLM's minimax_m3_sparse_attn (prefill): writes `output`, returns None.

    q [total_q, Hq, D] bfloat16; kv_cache float8_e4m3fn (vLLM's `--kv-cache-dtype fp8_e4m3`:
    PageWeaver reads E4M3 only, a bfloat16 or E5M2 cache raises TypeError), [num_blocks, Hkv, P, 2*D] (K in
    [..., :D], V in [..., D:]) or [num_blocks, 2, P, Hkv, D] (K in [:, 0], V in [:, 1]); P,
    the block size, is the page size: 128 or 64 on the GPU, other P raise
    pageweaver.UnsupportedError there; any P on the CPU;
    topk_idx [Hkv, total_q, topk] int32 logical block ids (blocks of P tokens);
    block_table [B, max_blocks] int32: physical block of each logical block; cu_seqlens_q
    [B+1], seq_lens [B] (KV lengths), prefix_lens [B] (int32 or int64). max_query_len:
    a host int is passed on as sparse_prefill(max_seqlen_q=) (lets regroup "auto" skip
    the regroup of decode-like batches); a tensor or None: not known, never read. num_kv_heads: must equal the cache's Hkv.
    sm_scale: softmax scale. output [total_q, Hq, D] bfloat16, written. k_scale / v_scale:
    None (1.0), floats, one-element tensors (per-tensor), or per-token scales [Hkv, slots]
    (slot = block * P + offset; float32, or converted to it; passed as
    k_token_scales / v_token_scales: Union4 and per-query kernels only). Keywords as for
    pageweaver.sparse_prefill. One library call for every KV head; no synchronisation;
    capturable. Errors (eager calls) name vLLM's arguments (block_table, seq_lens, output, max_query_len,
    ...), not sparse_prefill's."""
    if not isinstance(kv_cache, torch.Tensor):
        raise TypeError(f"kv_cache: expected a torch.Tensor [num_blocks, Hkv, P, 2*D] or "
                        f"[num_blocks, 2, P, Hkv, D], got {type(kv_cache).__name__}")
    if not isinstance(output, torch.Tensor):
        raise TypeError("output: vLLM's minimax_m3_sparse_attn writes into output and returns "
                        "None; pass the [total_q, Hq, D] bfloat16 tensor to fill")
    k, v = _views(kv_cache)
    hkv, page_size = k.shape[1], k.shape[2]
    if hkv != num_kv_heads:
        raise ValueError(f"num_kv_heads is {num_kv_heads}, kv_cache holds {hkv}")
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2:
        raise ValueError("block_table: expected an int tensor [B, max_blocks]")
    block_table = _i32("block_table", block_table)
    topk = _i32("topk_idx", topk_idx)
    cu, lens, pre = (_i32("cu_seqlens_q", cu_seqlens_q), _i32("seq_lens", seq_lens),
                     _i32("prefix_lens", prefix_lens))
    sm_scale = host_float("sm_scale", sm_scale)
    scales = scale_kwargs(k_scale, v_scale, hkv, k.shape[0] * page_size)
    with engine_names(_NAMES, [(PAGE_SIZE_ADVICE, "the block size is kv_cache's P")]):
        sparse_prefill(q, k, v, topk, block_table, cu, lens, pre, softmax_scale=sm_scale, out=output,
                       precision=precision, regroup=regroup, kernel=kernel,
                       bad_page_count=bad_page_count, page_size=page_size,
                       max_seqlen_q=max_rows_hint(max_query_len), **scales)
    return None
