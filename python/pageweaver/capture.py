"""Capture files from PyTorch in one call (format: docs/capture-format.md).

    pageweaver.save_capture("layer43.safetensors", topk_idx, cu_seqlens_q, prefix_lens,
                            kv_lens, page_table, q=q, k_cache=k, v_cache=v,
                            k_scale=ks, v_scale=vs, metadata={"model": "...", "layer": "43"})
    tensors, metadata = pageweaver.load_capture("layer43.safetensors", device="cuda")

Tensors may live on any device: save_capture copies them to the host (it synchronises:
call it from a debugging or recording hook, never inside a CUDA graph). The validation and
the file writing are the numpy implementation in _capture_format.py (the same code the
capture tools use), so a file written here reads back in the C reader and the tools.
"""
import numpy as np
import torch

from . import _capture_format as _fmt
from ._capture_format import CaptureError

__all__ = ["save_capture", "load_capture", "CaptureError"]

_TORCH_DTYPES = {"BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn}


def _host(name, x):
    """A torch tensor (any device) -> numpy; BF16 -> uint16 bits, E4M3 -> uint8 bits.
    Anything else (numpy arrays, lists, numbers, None) passes through unchanged."""
    if not isinstance(x, torch.Tensor):
        return x
    t = x.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy()
    if t.dtype.is_floating_point and t.dtype not in (torch.float32, torch.float64):
        raise CaptureError(f"{name}: dtype {t.dtype} is not stored in captures (q: bfloat16 "
                           f"or float32; caches: float8_e4m3fn)")
    return t.numpy()


def save_capture(path, topk_idx, cu_seqlens_q, prefix_lens, kv_lens, page_table=None, *,
                 q=None, k_cache=None, v_cache=None, k_scale=None, v_scale=None,
                 softmax_scale=None, q_heads_per_kv=None, metadata=None, **kwargs):
    """Validate and atomically write one capture of a sparse_prefill call's inputs.

    topk_idx [Hkv, N, K] int, cu_seqlens_q [R+1], prefix_lens [R], kv_lens [R],
    page_table [R, max_pages] or None: as pageweaver.sparse_prefill takes them (the page
    size is 128). q [N, Hq, D] bfloat16 (or float32, rounded to BF16), k_cache / v_cache
    [slots, Hkv, D] float8_e4m3fn (or 4-D [pages, Hkv, 128, D] views, stored token-major)
    with k_scale / v_scale (floats or one-element tensors): optional, all of the caches and
    scales or none. Sinks and per-token scales are not stored (the format has no field for
    them yet). q_heads_per_kv: None = Hq / Hkv from
    q (16 without q). softmax_scale: None for 1/sqrt(D). metadata: provenance strings.
    Further keywords (qkv_seed, topk_dtype, allow_uncovered_pages, head_dim) go to the
    format writer (see _capture_format.save_capture). Raises CaptureError on any
    inconsistency, before anything is written. Returns path."""
    ids = _host("topk_idx", topk_idx)
    hkv = np.asarray(ids).shape[0] if np.asarray(ids).ndim == 3 else 1
    qa = _host("q", q)
    if q_heads_per_kv is None:
        q_heads_per_kv = int(np.asarray(qa).shape[1]) // hkv if qa is not None and \
            np.asarray(qa).ndim == 3 else 16
    if qa is not None and "head_dim" not in kwargs and np.asarray(qa).ndim == 3:
        kwargs["head_dim"] = int(np.asarray(qa).shape[2])
    # 4-D cache views [pages, Hkv, 128, D] (e.g. vLLM's interleaved cache split into K and V)
    # are stored token-major, [pages * 128, Hkv, D]: the same slots, slot = page * 128 + t.
    if isinstance(k_cache, torch.Tensor) and k_cache.dim() == 4:
        k_cache = k_cache.permute(0, 2, 1, 3).reshape(-1, k_cache.shape[1], k_cache.shape[3])
    if isinstance(v_cache, torch.Tensor) and v_cache.dim() == 4:
        v_cache = v_cache.permute(0, 2, 1, 3).reshape(-1, v_cache.shape[1], v_cache.shape[3])
    if isinstance(k_scale, torch.Tensor):
        k_scale = _host("k_scale", k_scale.float())
    if isinstance(v_scale, torch.Tensor):
        v_scale = _host("v_scale", v_scale.float())
    return _fmt.save_capture(
        path, ids, _host("cu_seqlens_q", cu_seqlens_q), _host("prefix_lens", prefix_lens),
        _host("kv_lens", kv_lens), _host("page_table", page_table), q=qa,
        k_cache=_host("k_cache", k_cache), v_cache=_host("v_cache", v_cache),
        k_scale=k_scale, v_scale=v_scale, page_size=128, q_heads_per_kv=q_heads_per_kv,
        softmax_scale=softmax_scale, metadata=metadata, **kwargs)


def load_capture(path, device="cpu"):
    """Read a capture: returns (tensors, metadata). tensors maps each stored name to a
    torch tensor on `device`: q as bfloat16, k_cache / v_cache as float8_e4m3fn, topk_ids
    as int32 (also when stored as int16), the rest in their stored dtype (int32 request
    arrays and page table, float32 [1] scales), ready for pageweaver.sparse_prefill (pass
    them by position or rename: the capture's `topk_ids` is sparse_prefill's `topk_idx`).
    metadata: the file's string map. A malformed file raises CaptureError naming the file
    and the problem; an unreadable one OSError."""
    arrays, meta, dtypes = _fmt.load_capture(path, return_dtypes=True)
    out = {}
    for name, a in arrays.items():
        t = torch.from_numpy(np.array(a))  # a writable copy of the file's bytes
        dt = dtypes[name]
        if dt in _TORCH_DTYPES:
            t = t.view(_TORCH_DTYPES[dt])
        if name == "topk_ids":
            t = t.to(torch.int32)
        out[name] = t.to(device)
    return out, meta
