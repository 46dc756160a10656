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
starting at a multiple of P, which SGLang gives with --page-size P. A page whose slots are
not is a layout error: page_table_from_req_to_token counts it in the caller's
`layout_errors` word and maps it outside the cache, so it contributes nothing (and every
selection of it is counted in `bad_page_count` by the kernel); the sparse prefill call
refuses such a layout unless the caller passes that word (or its own page_table).
"""
import math

import torch

from .._op import MAX_PAGE_SIZE, PAGE_SIZE, PAGE_SIZE_ADVICE, sparse_prefill
from ._common import as_int as _as_int, engine_names, host_float, i32 as _i32, max_rows_hint, scale_kwargs

__all__ = ["page_table_from_req_to_token", "flash_prefill_with_gqa_share_sparse", "minimax_sparse_prefill"]


# sparse_prefill's parameter names as SGLang's (its errors name the engine's arguments)
_NAMES = {"kv_lens": "seq_lens", "cu_seqlens_q": "cu_seqlens", "sink_keys": "sink",
          "k_token_scales": "k_scale", "v_token_scales": "v_scale"}


def _page_size(name, value):
    """An int page size 1..MAX_PAGE_SIZE (any integer type but bool), else ValueError naming
    `name`."""
    size = _as_int(value)
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


def flash_prefill_with_gqa_share_sparse(q, k_cache, v_cache, sink, req_to_token, slot_ids, topk_idx,
                                        block_size_q, block_size_k, cu_seqlens, seq_lens, prefix_lens,
                                        max_seqlen_q=None, *, sm_scale=None, use_tma=True, cu_seqblocks_q=None,
                                        max_seqblock_q=None, q_scale=None, k_scale=None, v_scale=None,
                                        per_query_topk_idx=None, query_group_mask=None, safe_slots=False,
                                        page_table=None, page_size=None, layout_errors=None,
                                        bad_page_count=None, out=None, precision=None, regroup=None,
                                        kernel=None):
    """SGLang's MiniMax sparse prefill kernel through PageWeaver: the arguments and names of
    SGLang's `flash_prefill_with_gqa_share_sparse` (its Triton kernel,
    python/sglang/kernels/ops/attention/minimax_sparse/prefill/topk_sparse.py), so that the
    engine's call reaches it unchanged: its thirteen leading arguments (q ... max_seqlen_q)
    by position or keyword, every later one by keyword only (SGLang's versions order those
    differently: `per_query_topk_idx, query_group_mask` before `sm_scale` in one, `safe_slots`
    after `use_tma` in another; a fourteenth positional argument raises TypeError rather
    than being read as the wrong one). SGLang's form that takes `page_table` / `page_size`
    instead of req_to_token / slot_ids maps to page_table= here when its page size is
    block_size_k. Returns o [total_q, Hq, 128] bfloat16 (in `out` when given).
    `minimax_sparse_prefill` is the same function.

    q [total_q, Hq, 128]: bfloat16 (PageWeaver quantises Q per row itself), or SGLang's FP8
    Q (float8_e4m3fn, = Q / q_scale: it is multiplied back by q_scale into bfloat16, a copy,
    and q_scale is then not applied again). k_cache, v_cache [slots, Hkv, 128]
    float8_e4m3fn: SGLang's FP8 KV cache (`--kv-cache-dtype fp8_e4m3`); a bfloat16 or E5M2
    cache raises TypeError (PageWeaver reads E4M3 only). sink: None, or SGLang's per-Q-head
    sink keys [Hq, 128] (row n's sink logit for head h is softmax_scale * (q[n, h] .
    sink[h]), passed as pageweaver.sparse_prefill(sink_keys=...); a dtype other than
    bfloat16 is rounded to bfloat16 first, a copy). req_to_token, slot_ids: SGLang's token
    mapping (see page_table_from_req_to_token), or page_table= a table made by it earlier in
    the forward pass for the same block_size_k (then they are not read). topk_idx [Hkv,
    total_q, topk] int32 logical pages of block_size_k tokens (-1 padded), one row per query:
    block_size_q must be 1 (SGLang's MiniMax backend runs 1; ValueError otherwise, and for
    per_query_topk_idx / query_group_mask, which only its block form uses). cu_seqlens
    [B+1], seq_lens [B] (KV lengths), prefix_lens [B] (int32 or int64). block_size_k: the
    page size P (the GPU runs 128 and 64, other P raise pageweaver.UnsupportedError there;
    the CPU any P). max_seqlen_q: a host int is passed on as sparse_prefill(max_seqlen_q=)
    (lets regroup "auto" skip the regroup of decode-like batches; a tensor or None: not
    known, never read). use_tma, cu_seqblocks_q, max_seqblock_q, safe_slots: accepted for
    the engine's call and not needed (with block_size_q = 1 the query blocks are the rows). sm_scale: None for 1/sqrt(128); q_scale (with a bfloat16 q) multiplies
    every logit (folded into the softmax scale, as SGLang does); k_scale / v_scale: None
    (1.0), floats, one-element device tensors, or per-token scales [Hkv, slots] (passed as
    k_token_scales / v_token_scales).

    The page layout: SGLang must run with --page-size equal to block_size_k, so that each
    page's token slots are one run starting at a multiple of P (with --page-size 1 they are
    not: PageWeaver reads pages, not tokens). With page_table= the caller vouches for it.
    Otherwise the table is derived here and its layout errors (pages that are not such runs)
    are counted: into `layout_errors` when given (no synchronisation, capturable; such pages
    contribute nothing, and the caller reads the count), else checked here with one host
    read and refused (ValueError naming --page-size); under stream capture without
    page_table= or layout_errors= the call is refused (it could not check).
    page_size: None, or SGLang's KV pool page size (`--page-size`, a host int >= 1), as SGLang
    passes it: not needed (PageWeaver's page is block_size_k tokens, and the layout is checked
    as above); it names the setting in the layout error. bad_page_count, out, precision,
    regroup, kernel: as for pageweaver.sparse_prefill. Errors (eager calls) name SGLang's arguments
    (seq_lens, cu_seqlens, sink, ...), not sparse_prefill's.
    """
    if _as_int(block_size_q) != 1:
        raise ValueError(f"block_size_q is {block_size_q!r}: PageWeaver takes one Top-K row per "
                         f"query (block_size_q = 1, as SGLang's MiniMax backend runs)")
    for name, value in (("per_query_topk_idx", per_query_topk_idx), ("query_group_mask", query_group_mask)):
        if value is not None:
            raise ValueError(f"{name}: not supported (SGLang's block form, block_size_q > 1); pass "
                             f"one Top-K row per query in topk_idx")
    del use_tma, cu_seqblocks_q, max_seqblock_q, safe_slots  # not needed, see above
    if sink is not None:
        if not isinstance(sink, torch.Tensor):
            raise TypeError("sink: expected None or a [Hq, 128] tensor of sink keys")
        want = tuple(q.shape[1:]) if isinstance(q, torch.Tensor) and q.dim() == 3 else None  # (Hq, D)
        if sink.dim() != 2 or (want is not None and tuple(sink.shape) != want):
            want = f"[{want[0]}, {want[1]}]" if want is not None else "[Hq, 128]"
            raise ValueError(f"sink: shape {list(sink.shape)}: SGLang's sink is one key per Q "
                             f"head, {want} (Hq, D of q; logits [Hq] go to "
                             f"pageweaver.sparse_prefill(sinks=...))")
        sink = sink.to(torch.bfloat16).contiguous()  # no copy when already bf16 and contiguous
    block_size_k = _page_size("block_size_k", block_size_k)
    if page_size is not None:
        pool = _as_int(page_size)
        if pool is None or pool < 1:
            raise ValueError(f"page_size is {page_size!r}: expected None or SGLang's --page-size, an "
                             f"int >= 1")
        page_size = pool
    derived = page_table is None
    sm_scale, q_scale = host_float("sm_scale", sm_scale), host_float("q_scale", q_scale)
    if q_scale is not None:
        try:
            q_ok = math.isfinite(float(q_scale)) and float(q_scale) > 0.0
        except (TypeError, ValueError):
            raise TypeError(f"q_scale: {type(q_scale).__name__} {q_scale!r}: expected None or a "
                            f"float") from None
        if not q_ok:  # also for an FP8 q, where it is folded into q below
            raise ValueError(f"sm_scale {sm_scale!r} x q_scale {q_scale!r}: q_scale must be finite "
                             f"and > 0")
    if isinstance(q, torch.Tensor) and q.dtype == torch.float8_e4m3fn:
        # SGLang's FP8 attention-GEMM mode: q = Q / q_scale. Back to bfloat16; the scale is
        # then in q and must not be applied to the logits again.
        q = (q.float() * (1.0 if q_scale is None else float(q_scale))).to(torch.bfloat16)
        q_scale = None
    elif isinstance(q, torch.Tensor) and q.dtype != torch.bfloat16:
        raise TypeError(f"q: dtype {q.dtype}, expected torch.bfloat16 (or SGLang's "
                        f"float8_e4m3fn Q with its q_scale)")
    lens = _i32("seq_lens", seq_lens)
    if page_table is None:
        check = layout_errors is None
        if check and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise ValueError("req_to_token: under stream capture pass layout_errors= (a counter the "
                             "caller reads) or page_table= (a table made earlier): the page layout "
                             "cannot be checked here without a host read")
        counter = torch.zeros(1, dtype=torch.int64, device=req_to_token.device) if check else layout_errors
        page_table = page_table_from_req_to_token(req_to_token, slot_ids, lens,
                                                  layout_errors=counter, page_size=block_size_k)
        bad = int(counter) if check else 0  # the one host read
        if bad:
            raise ValueError(f"req_to_token: {bad} page(s) of {block_size_k} tokens are not one "
                             f"run of KV slots starting at a multiple of {block_size_k}: run SGLang with "
                             f"--page-size {block_size_k}"
                             f"{'' if page_size is None else f' (it is {page_size})'} "
                             f"(PageWeaver reads whole pages), or pass "
                             f"layout_errors= to count such pages instead (they then contribute nothing)")
    scale = float(sm_scale) if sm_scale is not None else q.shape[-1] ** -0.5
    if q_scale is not None:
        scale = scale * float(q_scale)
        if not (math.isfinite(scale) and scale > 0.0):  # name the engine's arguments
            raise ValueError(f"sm_scale {sm_scale!r} x q_scale {q_scale!r} = {scale!r}: the "
                             f"softmax scale must be finite and > 0")
    cache_ok = isinstance(k_cache, torch.Tensor) and k_cache.dim() == 3
    names = dict(_NAMES, softmax_scale="sm_scale" if q_scale is None else "sm_scale x q_scale")
    if derived:
        names["page_table"] = "req_to_token / slot_ids (as a page table)"
    with engine_names(names, [(PAGE_SIZE_ADVICE, "block_size_k sets the page size")]):
        return sparse_prefill(q, k_cache, v_cache, _i32("topk_idx", topk_idx), page_table,
                              _i32("cu_seqlens", cu_seqlens), lens, _i32("prefix_lens", prefix_lens),
                              softmax_scale=scale, out=out, precision=precision, regroup=regroup,
                              kernel=kernel, bad_page_count=bad_page_count, sink_keys=sink,
                              page_size=block_size_k, max_seqlen_q=max_rows_hint(max_seqlen_q),
                              **scale_kwargs(k_scale, v_scale, k_cache.shape[1] if cache_ok else None,
                                             k_cache.shape[0] if cache_ok else None))


minimax_sparse_prefill = flash_prefill_with_gqa_share_sparse
