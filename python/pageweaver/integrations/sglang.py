"""SGLang's MiniMax sparse prefill, taken with SGLang's own arguments.

SGLang (python/sglang/kernels/ops/attention/minimax_sparse/prefill/) calls its sparse
prefill kernels with
  q [total_q, Hq, 128], k_cache / v_cache [slots, Hkv, 128] (token-level pools: slot =
  the token's index in the KV pool), topk_idx [Hkv, total_q, topk] int32 logical page ids
  of block_size_k tokens (-1 padded), cu_seqlens [B+1], seq_lens [B] (KV length, this
  chunk included), prefix_lens [B], and the token-level page mapping req_to_token
  [max_reqs, max_context] int32 with slot_ids [B] (the requests' rows in it, int64).
PageWeaver reads pages of P = block_size_k tokens (128 or 64 on the GPU) through a page
table: page_table_from_req_to_token derives it on the device (torch ops, no
synchronisation, capturable): logical page p of request b is physical page s // P when its
token slots s, s+1, ... (those below the request's KV length) are one contiguous run
starting at a multiple of P. A page whose slots are not is a layout error: it is counted in
the caller's `layout_errors` word and mapped outside the cache, so it contributes nothing
(and every selection of it is counted in `bad_page_count` by the kernel).
"""
import math
import operator

import torch

from .._op import MAX_PAGE_SIZE, PAGE_SIZE, sparse_prefill
from ._common import host_float, i32 as _i32, scale_kwargs

__all__ = ["page_table_from_req_to_token", "minimax_sparse_prefill"]


def _page_size(name, value):
    """An int page size 1..MAX_PAGE_SIZE (any integer type but bool), else ValueError naming
    `name`."""
    try:
        size = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        size = None
    if size is None or not 1 <= size <= MAX_PAGE_SIZE:
        raise ValueError(f"{name} is {value!r}: expected an int in 1..{MAX_PAGE_SIZE} (tokens per "
                         f"page; the GPU runs 128 and 64)")
    return size


def page_table_from_req_to_token(req_to_token, slot_ids, seq_lens, *, layout_errors=None,
                                 page_size=PAGE_SIZE):
    """Physical page table [B, ceil(max_context / P)] int32 of SGLang's token mapping, for
    pages of P = page_size tokens (1..2^20; the GPU kernels run 128 and 64).

    req_to_token [max_reqs, max_context] int32: KV-pool slot of each token of each request
    row. slot_ids [B] (any integer dtype): each request's row (a CPU tensor is checked
    against req_to_token's rows: IndexError; on the device a row outside it gives pages of
    -1, counted in layout_errors). seq_lens [B]: KV lengths.
    layout_errors: optional one-element int32 / int64 tensor on the same device; the number
    of pages (holding at least one token of its request) whose slots are not one
    contiguous, P-aligned run is ADDED to it (never reset here). Such pages, and pages
    past the request's KV length, get physical page -1. All on the device: no sync.
    Compute it once per forward pass and pass it to every layer's call (page_table=)."""
    if req_to_token.dtype != torch.int32 or req_to_token.dim() != 2:
        raise TypeError(f"req_to_token: expected int32 [max_reqs, max_context], got "
                        f"{req_to_token.dtype} {list(req_to_token.shape)}")
    P = _page_size("page_size", page_size)
    for name, t in (("slot_ids", slot_ids), ("seq_lens", seq_lens)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.is_floating_point() or t.is_complex():
            raise TypeError(f"{name}: expected a 1-D integer tensor [B], got "
                            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__} "
                            f"{list(t.shape) if isinstance(t, torch.Tensor) else ''}")
    b = slot_ids.shape[0]
    if seq_lens.shape[0] != b:
        raise ValueError(f"slot_ids has {b} requests, seq_lens {seq_lens.shape[0]}: one row of "
                         f"req_to_token and one KV length per request")
    max_reqs, max_context = req_to_token.shape
    pages = max(1, -(-max_context // P))
    dev = req_to_token.device
    ids = slot_ids.to(device=dev, dtype=torch.long)
    if slot_ids.device.type == "cpu" and b and not bool(((slot_ids >= 0) & (slot_ids < max_reqs)).all()):
        raise IndexError(f"slot_ids {slot_ids.tolist()[:8]}: a row outside req_to_token's "
                         f"{max_reqs} rows")
    # On the device a row outside req_to_token cannot be refused without a host read: its
    # pages become -1 (layout errors: they contribute nothing) instead of an out-of-bounds read.
    valid = (ids >= 0) & (ids < max_reqs)
    rows = req_to_token.index_select(0, torch.where(valid, ids, torch.zeros_like(ids)))
    rows = torch.where(valid.unsqueeze(1), rows, torch.full_like(rows, -1))
    if pages * P != max_context:
        rows = torch.nn.functional.pad(rows, (0, pages * P - max_context), value=-1)
    tok = rows.view(b, pages, P)
    first = tok[:, :, 0]
    offsets = torch.arange(P, dtype=torch.int32, device=dev)
    position = torch.arange(pages * P, dtype=torch.int32, device=dev).view(pages, P)
    lens = seq_lens.to(device=dev, dtype=torch.int32).view(b, 1, 1)
    holds = position.unsqueeze(0) < lens                        # [B, pages, P] token exists
    run = (tok == first.unsqueeze(-1) + offsets) | ~holds        # slot = first + offset
    aligned = torch.remainder(first, P) == 0
    used = holds[:, :, 0]                                        # page holds >= 1 token
    good = run.all(dim=-1) & aligned & used
    if layout_errors is not None:
        bad = (used & ~good).sum()
        layout_errors.add_(bad.to(layout_errors.dtype))
    phys = torch.div(first, P, rounding_mode="floor")
    return torch.where(good, phys, torch.full_like(phys, -1)).to(torch.int32)


def minimax_sparse_prefill(q, k_cache, v_cache, sink, req_to_token, slot_ids, topk_idx,
                           cu_seqlens, seq_lens, prefix_lens, *, block_size_k=128,
                           sm_scale=None, q_scale=None, k_scale=None, v_scale=None,
                           page_table=None, layout_errors=None, bad_page_count=None,
                           out=None, precision=None, regroup=None, kernel=None):
    """SGLang's MiniMax sparse prefill through PageWeaver. Returns o [total_q, Hq, 128]
    bfloat16 (in `out` when given).

    q [total_q, Hq, 128] bfloat16 (the unquantised Q: PageWeaver quantises it per row
    itself; SGLang's native kernel takes a pre-quantised FP8 Q instead). k_cache, v_cache
    [slots, Hkv, 128] float8_e4m3fn. sink: None, or SGLang's per-Q-head sink keys [Hq, 128]
    (row n's sink logit for head h is softmax_scale * (q[n, h] . sink[h]), passed as
    pageweaver.sparse_prefill(sink_keys=...); a dtype other than bfloat16 is rounded to
    bfloat16 first, a copy). req_to_token, slot_ids: SGLang's token mapping (see
    page_table_from_req_to_token), or page_table= a table made by it earlier in the
    forward pass for the same block_size_k (then they are not read). topk_idx [Hkv,
    total_q, topk] int32 logical pages of block_size_k tokens, cu_seqlens [B+1], seq_lens
    [B] (KV lengths), prefix_lens [B] (int32 or int64). block_size_k: the page size P
    (the GPU runs 128 and 64, other P raise pageweaver.UnsupportedError there; the CPU
    any P). sm_scale: None for 1/sqrt(128); q_scale (a float) multiplies
    every logit (folded into the softmax scale, as SGLang does); k_scale / v_scale: None
    (1.0), floats, one-element device tensors, or per-token scales [Hkv, slots] (passed as
    k_token_scales / v_token_scales). layout_errors: see
    page_table_from_req_to_token; bad_page_count, out, precision, regroup, kernel: as for
    pageweaver.sparse_prefill. No synchronisation; capturable in a CUDA graph.
    """
    if sink is not None:
        if not isinstance(sink, torch.Tensor):
            raise TypeError("sink: expected None or a [Hq, 128] tensor of sink keys")
        if sink.dim() != 2:
            raise ValueError(f"sink: shape {list(sink.shape)}: SGLang's sink is one key per Q "
                             f"head, [Hq, 128] (logits [Hq] go to pageweaver.sparse_prefill("
                             f"sinks=...))")
        sink = sink.to(torch.bfloat16).contiguous()  # no copy when already bf16 and contiguous
    block_size_k = _page_size("block_size_k", block_size_k)
    if isinstance(q, torch.Tensor) and q.dtype != torch.bfloat16:
        raise TypeError(f"q: dtype {q.dtype}, expected torch.bfloat16 (PageWeaver quantises "
                        f"Q itself; pass the unquantised Q)")
    lens = _i32("seq_lens", seq_lens)
    if page_table is None:
        page_table = page_table_from_req_to_token(req_to_token, slot_ids, lens,
                                                  layout_errors=layout_errors,
                                                  page_size=block_size_k)
    sm_scale, q_scale = host_float("sm_scale", sm_scale), host_float("q_scale", q_scale)
    scale = float(sm_scale) if sm_scale is not None else q.shape[-1] ** -0.5
    if q_scale is not None:
        scale = scale * float(q_scale)
        if not (math.isfinite(scale) and scale > 0.0):  # name the engine's arguments
            raise ValueError(f"sm_scale {sm_scale!r} x q_scale {q_scale!r} = {scale!r}: the "
                             f"softmax scale must be finite and > 0")
    cache_ok = isinstance(k_cache, torch.Tensor) and k_cache.dim() == 3
    return sparse_prefill(q, k_cache, v_cache, _i32("topk_idx", topk_idx), page_table,
                          _i32("cu_seqlens", cu_seqlens), lens, _i32("prefix_lens", prefix_lens),
                          softmax_scale=scale, out=out, precision=precision, regroup=regroup,
                          kernel=kernel, bad_page_count=bad_page_count, sink_keys=sink,
                          page_size=block_size_k,
                          **scale_kwargs(k_scale, v_scale, k_cache.shape[1] if cache_ok else None,
                                         k_cache.shape[0] if cache_ok else None))
