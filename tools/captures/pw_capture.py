"""Write and read PageWeaver capture files (docs/capture-format.md, format version 1).

One call from a serving engine's hook:

    from pw_capture import save_capture
    save_capture("layer43.safetensors", topk_ids, cu_seqlens_q, prefix_lens, kv_lens,
                 metadata={"model": "...", "layer": "43"})

`save_capture` validates the layout against the format, then writes through the
`safetensors` package to a temporary file in the target folder and renames it into place,
so a crash or a validation error never leaves a partial capture behind.

numpy has no bfloat16 or float8 dtype: pass `q` as float32 (rounded to BF16 here, round
to nearest even) or as uint16 BF16 bit patterns, and the caches as uint8 E4M3 bit
patterns. `load_capture` hands them back as uint16 / uint8 bit patterns.
"""
import json
import os
import tempfile

import numpy as np

FORMAT = "pageweaver.capture"
FORMAT_VERSION = "1"


class CaptureError(ValueError):
    """The arrays or metadata do not make a valid capture."""


def _as_i32(name, a, ndim):
    a = np.asarray(a)
    if a.ndim != ndim:
        raise CaptureError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise CaptureError(f"{name}: expected an integer array, got {a.dtype}")
    if a.size and (a.min() < -2**31 or a.max() > 2**31 - 1):
        raise CaptureError(f"{name}: values do not fit int32")
    return np.ascontiguousarray(a, dtype="<i4")


def f32_to_bf16_bits(x):
    """float32 array -> uint16 BF16 bit patterns, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype("<u2")


def save_capture(path, topk_ids, cu_seqlens_q, prefix_lens, kv_lens, page_table=None,
                 q=None, k_cache=None, v_cache=None, k_scale=None, v_scale=None, *,
                 page_size=128, q_heads_per_kv=16, head_dim=128, softmax_scale=None,
                 qkv_seed=None, metadata=None, topk_dtype=None):
    """Validate and atomically write one capture.

    topk_ids [Hkv, N, K] int (stored int16 when every value fits and topk_dtype is None,
    else int32; any value is legal, -1 pads); cu_seqlens_q [R+1] (0 ... N, non-decreasing);
    prefix_lens [R] >= 0; kv_lens [R] >= prefix + chunk queries; page_table [R, max_pages]
    or None; q [N, Hkv*G, D] float32 or uint16 BF16 bits; k_cache, v_cache
    [slots, Hkv, D] uint8 E4M3 bits (both or neither) with k_scale, v_scale floats.
    metadata: dict of provenance strings (model, text, token_span, layer, selector, ...).
    Raises CaptureError on any inconsistency, before anything is written. Returns path.
    """
    t = np.asarray(topk_ids)
    if t.ndim != 3:
        raise CaptureError(f"topk_ids: expected [Hkv, N, K], got shape {t.shape}")
    if not np.issubdtype(t.dtype, np.integer):
        raise CaptureError(f"topk_ids: expected integers, got {t.dtype}")
    hkv, n, k = t.shape
    if hkv < 1 or k < 1:
        raise CaptureError(f"topk_ids: empty head or K dimension, shape {t.shape}")
    fits16 = t.size == 0 or (t.min() >= -32768 and t.max() <= 32767)
    if topk_dtype is None:
        topk_dtype = "<i2" if fits16 else "<i4"
    topk_dtype = np.dtype(topk_dtype)
    if topk_dtype not in (np.dtype("<i2"), np.dtype("<i4")):
        raise CaptureError("topk_dtype must be int16 or int32")
    if topk_dtype == np.dtype("<i2") and not fits16:
        raise CaptureError("topk_ids: values do not fit int16")
    t = _as_i32("topk_ids", t, 3).astype(topk_dtype)

    cu = _as_i32("cu_seqlens_q", cu_seqlens_q, 1)
    pre = _as_i32("prefix_lens", prefix_lens, 1)
    kvl = _as_i32("kv_lens", kv_lens, 1)
    r = len(pre)
    if r < 1 or len(cu) != r + 1 or len(kvl) != r:
        raise CaptureError(f"need cu_seqlens_q [R+1], prefix_lens [R], kv_lens [R]; got "
                           f"{len(cu)}, {len(pre)}, {len(kvl)}")
    if cu[0] != 0 or cu[-1] != n or np.any(np.diff(cu) < 0):
        raise CaptureError(f"cu_seqlens_q must rise from 0 to N={n}: {cu.tolist()[:8]}...")
    if np.any(pre < 0):
        raise CaptureError("prefix_lens must be >= 0")
    qlen = np.diff(cu)
    if np.any(kvl.astype(np.int64) < pre.astype(np.int64) + qlen):
        bad = int(np.argmax(kvl.astype(np.int64) < pre.astype(np.int64) + qlen))
        raise CaptureError(f"request {bad}: kv_len {kvl[bad]} < prefix {pre[bad]} + "
                           f"chunk {qlen[bad]}")
    for name, v in (("page_size", page_size), ("q_heads_per_kv", q_heads_per_kv),
                    ("head_dim", head_dim)):
        if int(v) < 1:
            raise CaptureError(f"{name} must be >= 1")

    tensors = {"topk_ids": t, "cu_seqlens_q": cu, "prefix_lens": pre, "kv_lens": kvl}
    dtypes = {"topk_ids": "int16" if t.dtype == np.dtype("<i2") else "int32",
              "cu_seqlens_q": "int32", "prefix_lens": "int32", "kv_lens": "int32"}
    if page_table is not None:
        pt = _as_i32("page_table", page_table, 2)
        need = -(-int(kvl.max()) // int(page_size))
        if pt.shape[0] != r or pt.shape[1] < need:
            raise CaptureError(f"page_table: expected [R={r}, >= {need}], got {pt.shape}")
        tensors["page_table"] = pt
        dtypes["page_table"] = "int32"
    if q is not None:
        qa = np.asarray(q)
        if qa.shape != (n, hkv * int(q_heads_per_kv), int(head_dim)):
            raise CaptureError(f"q: expected [{n}, {hkv * int(q_heads_per_kv)}, "
                               f"{head_dim}], got {qa.shape}")
        if qa.dtype == np.uint16:
            qa = np.ascontiguousarray(qa, dtype="<u2")
        elif np.issubdtype(qa.dtype, np.floating):
            qa = f32_to_bf16_bits(qa)
        else:
            raise CaptureError("q: float32 or uint16 BF16 bits")
        tensors["q"] = qa
        dtypes["q"] = "bfloat16"
    if (k_cache is None) != (v_cache is None):
        raise CaptureError("k_cache and v_cache: both or neither")
    if k_cache is not None:
        if k_scale is None or v_scale is None:
            raise CaptureError("k_scale and v_scale are required with the caches")
        for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
            c = np.asarray(c)
            if c.dtype != np.uint8 or c.ndim != 3 or c.shape[1:] != (hkv, int(head_dim)):
                raise CaptureError(f"{name}: expected uint8 E4M3 bits [slots, {hkv}, "
                                   f"{head_dim}], got {c.dtype} {c.shape}")
            tensors[name] = np.ascontiguousarray(c)
            dtypes[name] = "float8_e4m3fn"
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            tensors[name] = np.asarray([s], dtype="<f4").reshape(1)
            dtypes[name] = "float32"

    meta = {}
    for key, val in (metadata or {}).items():
        meta[str(key)] = val if isinstance(val, str) else json.dumps(val) \
            if isinstance(val, (list, dict)) else str(val)
    meta.update({"format": FORMAT, "format_version": FORMAT_VERSION,
                 "page_size": str(int(page_size)), "q_heads_per_kv": str(int(q_heads_per_kv)),
                 "head_dim": str(int(head_dim))})
    if softmax_scale is not None:
        meta["softmax_scale"] = repr(float(softmax_scale))
    if qkv_seed is not None:
        meta["qkv_seed"] = str(int(qkv_seed))

    from safetensors import TensorSpec, serialize_file

    specs = {name: TensorSpec(dtype=dtypes[name], shape=list(a.shape),
                              data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in tensors.items()}
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".capture-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        serialize_file(specs, tmp, metadata=meta)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


_NP = {"I16": "<i2", "I32": "<i4", "F32": "<f4", "BF16": "<u2", "F8_E4M3": "u1",
       "U8": "u1", "I64": "<i8"}


def load_capture(path):
    """Read a capture: returns (tensors: dict name -> numpy array, metadata: dict).
    BF16 comes back as uint16 bits, F8_E4M3 as uint8 bits. Checks the format key."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise CaptureError(f"{path}: not a safetensors file")
    hlen = int.from_bytes(raw[:8], "little")
    if hlen > len(raw) - 8:
        raise CaptureError(f"{path}: header length {hlen} exceeds the file")
    header = json.loads(raw[8:8 + hlen])
    meta = header.pop("__metadata__", {}) or {}
    if meta.get("format") != FORMAT:
        raise CaptureError(f"{path}: metadata format is {meta.get('format')!r}, "
                           f"not {FORMAT!r}")
    base = 8 + hlen
    out = {}
    for name, h in header.items():
        if h["dtype"] not in _NP:
            raise CaptureError(f"{path}: tensor {name} has unsupported dtype {h['dtype']}")
        a0, a1 = h["data_offsets"]
        out[name] = np.frombuffer(raw, dtype=_NP[h["dtype"]], count=(a1 - a0) //
                                  np.dtype(_NP[h["dtype"]]).itemsize,
                                  offset=base + a0).reshape(h["shape"])
    for need in ("topk_ids", "cu_seqlens_q", "prefix_lens", "kv_lens"):
        if need not in out:
            raise CaptureError(f"{path}: required tensor {need} missing")
    return out, meta
