"""vLLM's MiniMax-M3 sparse attention (prefill), taken with vLLM's own arguments.

vLLM (vllm/models/minimax_m3/common/ops/sparse_attn.py, minimax_m3_sparse_attn) keeps K
and V of a layer in ONE cache tensor [num_blocks, Hkv, 128, 2*D]: block b, KV head h,
token offset t holds K in [..., :D] and V in [..., D:] ("interleaved", head-major inside a
block), with blocks of 128 tokens = PageWeaver's pages and block_table [B, max_blocks]
as the page table.

How PageWeaver addresses it with its token-major API ([slots, Hkv, D], one slot stride):
for one KV head h, the rows of block b form a run of 128 rows of 2*D bytes, so the cache
read as "virtual pages" of 128 slots with slot stride 2*D (K at offset 0, V at offset D)
holds block b of head h in virtual page b * (stride(0) / U) + h * (stride(1) / U),
U = 128 * 2 * D elements. Each KV head is one pw_sparse_prefill call (Hkv = 1) over that
view, with the page table block_table * (stride(0) / U) + h * (stride(1) / U) made on the
device. No copy of the cache; one call per KV head (a tensor-parallel rank of MiniMax-M3
usually holds one KV head, so usually one call).
"""
import torch

from .._op import PAGE_SIZE, sparse_prefill

__all__ = ["minimax_m3_sparse_attn"]

_FP8 = torch.float8_e4m3fn


def _i32(name, t):
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: expected an int32 / int64 tensor")
    return t.to(torch.int32).contiguous()


def _scale(name, s):
    if s is None:
        return 1.0
    if isinstance(s, torch.Tensor):
        if s.numel() != 1:
            raise NotImplementedError(
                f"{name}: shape {list(s.shape)}: per-token / per-head KV scales "
                f"[num_kv_heads, max_kv_tokens] are not supported yet (per-tensor only)")
        return s.reshape(1) if s.dtype == torch.float32 else s.float().reshape(1)
    return float(s)


def _virtual_caches(kv_cache):
    """(k, v, page stride of a block, page stride of a KV head) of the virtual-page view."""
    if kv_cache.dim() != 4:
        raise ValueError(f"kv_cache: shape {list(kv_cache.shape)}, expected "
                         f"[num_blocks, Hkv, {PAGE_SIZE}, 2*D]")
    if kv_cache.dtype != _FP8:
        raise TypeError(f"kv_cache: dtype {kv_cache.dtype}: PageWeaver reads FP8 E4M3 "
                        f"caches (torch.float8_e4m3fn) only")
    nb, hkv, p, two_d = kv_cache.shape
    if p != PAGE_SIZE or two_d % 2:
        raise ValueError(f"kv_cache: shape {list(kv_cache.shape)}: blocks of {PAGE_SIZE} "
                         f"tokens and an even last dim (K | V) expected")
    d = two_d // 2
    unit = PAGE_SIZE * two_d
    s0, s1, s2, s3 = kv_cache.stride()
    if s3 != 1 or s2 != two_d or (hkv > 1 and s1 % unit) or (nb > 1 and s0 % unit):
        raise NotImplementedError(
            f"kv_cache: strides {[s0, s1, s2, s3]}: the [num_blocks, Hkv, 128, 2*D] layout "
            f"is addressed as pages of 128 rows of 2*D elements, which needs each "
            f"(block, head) to be one contiguous [128, 2*D] run at a multiple of "
            f"{unit} elements")
    block_pages = s0 // unit if nb > 1 else 0
    head_pages = s1 // unit if hkv > 1 else 0
    pages = (nb - 1) * block_pages + (hkv - 1) * head_pages + 1
    if pages > 2**31 - 1:
        raise NotImplementedError(f"kv_cache: {pages} virtual pages exceed int32 page ids")
    size, stride = (pages * PAGE_SIZE, 1, d), (two_d, two_d, 1)
    off = kv_cache.storage_offset()
    k = torch.as_strided(kv_cache, size, stride, off)
    v = torch.as_strided(kv_cache, size, stride, off + d)
    return k, v, block_pages, head_pages


def minimax_m3_sparse_attn(q, kv_cache, topk_idx, block_table, cu_seqlens_q, seq_lens,
                           prefix_lens, max_query_len, num_kv_heads, sm_scale, output,
                           k_scale=None, v_scale=None, *, bad_page_count=None,
                           precision=None, regroup=None, kernel=None):
    """Drop-in for vLLM's minimax_m3_sparse_attn (prefill): writes `output`, returns None.

    q [total_q, Hq, D] bfloat16; kv_cache [num_blocks, Hkv, 128, 2*D] float8_e4m3fn (K in
    [..., :D], V in [..., D:]); topk_idx [Hkv, total_q, topk] int32 logical block ids;
    block_table [B, max_blocks] int32: physical block of each logical block; cu_seqlens_q
    [B+1], seq_lens [B] (KV lengths), prefix_lens [B] (int32 or int64). max_query_len:
    unused (kept for the signature). num_kv_heads: must equal kv_cache.shape[1].
    sm_scale: softmax scale. output [total_q, Hq, D] bfloat16, written. k_scale / v_scale:
    None (1.0) or one-element tensors (per-token [Hkv, tokens] scales: NotImplementedError).
    Keywords as for pageweaver.sparse_prefill. No synchronisation; capturable."""
    if kv_cache.dim() == 4 and kv_cache.shape[1] != num_kv_heads:
        raise ValueError(f"num_kv_heads is {num_kv_heads}, kv_cache holds "
                         f"{kv_cache.shape[1]}")
    k, v, block_pages, head_pages = _virtual_caches(kv_cache)
    hkv = kv_cache.shape[1]
    if q.dim() != 3 or q.shape[1] % hkv:
        raise ValueError(f"q: shape {list(q.shape)}, expected [total_q, Hq, D] with Hq a "
                         f"multiple of {hkv}")
    g = q.shape[1] // hkv
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2:
        raise ValueError("block_table: expected an int tensor [B, max_blocks]")
    topk = _i32("topk_idx", topk_idx)
    if topk.dim() != 3 or topk.shape[0] != hkv:
        raise ValueError(f"topk_idx: shape {list(topk.shape)}, expected [{hkv}, total_q, topk]")
    cu, lens, pre = (_i32("cu_seqlens_q", cu_seqlens_q), _i32("seq_lens", seq_lens),
                     _i32("prefix_lens", prefix_lens))
    ks, vs = _scale("k_scale", k_scale), _scale("v_scale", v_scale)
    blocks = block_table.to(torch.int32)
    if block_pages != 1:
        blocks = blocks * block_pages
    for h in range(hkv):
        table = blocks + h * head_pages if h else blocks
        sparse_prefill(q[:, h * g:(h + 1) * g], k, v, topk[h:h + 1], table, cu, lens, pre,
                       k_scale=ks, v_scale=vs, softmax_scale=sm_scale,
                       out=output[:, h * g:(h + 1) * g], precision=precision,
                       regroup=regroup, kernel=kernel, bad_page_count=bad_page_count)
    return None
