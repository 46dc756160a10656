"""Write and read PageWeaver capture files (docs/capture-format.md, format version 1):
the numpy side, shared by the PyTorch package (pageweaver.save_capture / load_capture,
which convert torch tensors to and from these arrays) and the capture tools
(tools/captures/pw_capture.py loads this file by path, so they need neither torch nor the
compiled library).

    save_capture("layer43.safetensors", topk_ids, cu_seqlens_q, prefix_lens, kv_lens,
                 metadata={"model": "...", "layer": "43"})

`save_capture` validates the layout against the format, then writes through the
`safetensors` package to a temporary file in the target folder and renames it into place,
so a crash or a validation error never leaves a partial capture behind.

numpy has no bfloat16 or float8 dtype: pass `q` as float32 (rounded to BF16 here, round
to nearest even) or as uint16 BF16 bit patterns, and the caches as uint8 E4M3 bit
patterns. `load_capture` hands them back as uint16 / uint8 bit patterns.

Only the standard library, numpy and (to write) safetensors: no package-relative import.
"""
import errno
import json
import math
import numbers
import os
import re
import tempfile
import warnings

import numpy as np

FORMAT = "pageweaver.capture"
FORMAT_VERSION = "1"


class CaptureError(ValueError):
    """The arrays or metadata do not make a valid capture (save_capture), or the file is
    not a readable capture (load_capture; the underlying exception is its __cause__)."""


# Limits of the C reader (src/capture.c, pw_problem_check in src/problem.c).
INT32_MAX = 2**31 - 1
MAX_DEFAULT_TABLE_ENTRIES = 2**26  # PW_CAPTURE_MAX_DEFAULT_TABLE_ENTRIES (pageweaver_capture.h)
MAX_TOPK = 1024
MAX_Q_HEADS_PER_KV = 64
MAX_HEAD_DIM = 1024
MAX_PAGE_SIZE = 2**20
MAX_SOFTMAX_SCALE = 3.0e38
# Metadata keys the C reader parses itself (k_reserved_keys in src/capture.c).
RESERVED_KEYS = ("format", "format_version", "page_size", "q_heads_per_kv", "head_dim",
                 "softmax_scale", "qkv_seed")

# The C reader parses softmax_scale with strtod (C locale): optional leading white space,
# sign, then a decimal or hexadecimal floating constant, nothing after it. inf / nan are
# parsed by strtod too but refused as not finite, so they are left out here.
_C_SPACE = " \t\n\v\f\r"
_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                        r"(?:[pP][+-]?[0-9]+)?")
# qkv_seed: strtoull in base 10 with the first character a digit (no sign, no space).
_U64 = re.compile(r"[0-9]+")


def parse_softmax_scale(text):
    """The value of a softmax_scale metadata string as the C reader reads it, or None when
    the reader refuses it. Stricter in one case: a positive value that rounds to 0 as a
    float32 (the reader would silently use the default 1/sqrt(D)) is refused too."""
    body = text.lstrip(_C_SPACE)
    try:
        if _HEX_FLOAT.fullmatch(body):
            v = float.fromhex(body)
        elif _DEC_FLOAT.fullmatch(body):
            v = float(body)
        else:
            return None
    except (ValueError, OverflowError):
        return None
    if not (math.isfinite(v) and 0.0 < v <= MAX_SOFTMAX_SCALE) or np.float32(v) == 0:
        return None
    return v


def parse_qkv_seed(text):
    """The value of a qkv_seed metadata string as the C reader reads it (an unsigned 64-bit
    decimal integer, digits only), or None when the reader refuses it."""
    if not _U64.fullmatch(text):
        return None
    v = int(text)
    return v if v < 2**64 else None


def _check_utf8(what, s):
    if not isinstance(s, str):
        raise CaptureError(f"{what}: expected a str, got {type(s).__name__}")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CaptureError(f"{what}: not valid UTF-8 ({e.reason} at index {e.start})") from e
    if "\0" in s:
        raise CaptureError(f"{what}: contains a NUL character (the C reader cannot hold it)")


def _int_arg(name, v, lo, hi):
    """An integer argument in [lo, hi] (bool and non-integral numbers refused)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise CaptureError(f"{name}: expected an integer, got {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise CaptureError(f"{name} is {v}, must lie in [{lo}, {hi}]")
    return v


def _scale_value(name, s):
    """k_scale / v_scale: a number or a one-element array; float32, finite and > 0."""
    try:
        a = np.asarray(s, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise CaptureError(f"{name}: expected a number, got {s!r}") from e
    if a.size != 1:
        raise CaptureError(f"{name}: expected one number, got shape {a.shape}")
    with np.errstate(over="ignore"):
        f = np.float32(a.reshape(()))
    if not (np.isfinite(f) and f > 0):
        raise CaptureError(f"{name} is {float(a.reshape(()))!r} (as float32 {float(f)!r}): "
                           f"must be finite and > 0")
    return np.asarray([f], dtype="<f4")


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
                 qkv_seed=None, metadata=None, topk_dtype=None, allow_uncovered_pages=False):
    """Validate and atomically write one capture.

    topk_ids [Hkv, N, K] int (K <= 1024; stored int16 when every value fits and topk_dtype
    is None, else int32; any value is legal, -1 pads); cu_seqlens_q [R+1] (0 ... N,
    non-decreasing); prefix_lens [R] >= 0; kv_lens [R] >= prefix + chunk queries;
    page_table [R, max_pages] or None (default layout: request r's logical page p in
    physical page r * ceil(max(kv_lens)/P) + p); q [N, Hkv*G, D] float32 or uint16 BF16
    bits; k_cache, v_cache [slots, Hkv, D] uint8 E4M3 bits (both or neither, same shape,
    slots a multiple of page_size) with k_scale, v_scale (float32, finite, > 0).
    page_size 1..2^20, q_heads_per_kv 1..64, head_dim 1..1024 (the C reader's limits).
    softmax_scale: None or 0 (default 1/sqrt(D), key not written) or finite in (0, 3e38].
    qkv_seed: None or an integer in [0, 2^64).
    metadata: dict of provenance strings (model, text, token_span, layer, selector, ...);
    keys must be non-empty str, values str (numbers are written with str(), lists and dicts
    as JSON), all valid UTF-8 without NUL. The reserved keys softmax_scale and qkv_seed
    are parsed by the reader and must hold values it accepts (and agree with the
    arguments of the same name); format, format_version, page_size, q_heads_per_kv,
    head_dim may only repeat what this call writes.
    Every physical page that a valid selection can reach (logical pages 0 ..
    (prefix + chunk - 1) // P of each request with queries, through page_table or the
    default layout) must lie in [0, slots / P) of the caches (or be >= 0 without caches);
    allow_uncovered_pages=True turns that refusal into a warning (for captures that test
    the bad-page path on purpose).
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
    if k > MAX_TOPK or n > INT32_MAX or hkv > INT32_MAX:
        raise CaptureError(f"topk_ids: shape {t.shape}: K must be <= {MAX_TOPK}, "
                           f"Hkv and N < 2^31")
    fits16 = t.size == 0 or (t.min() >= -32768 and t.max() <= 32767)
    if topk_dtype is None:
        topk_dtype = "<i2" if fits16 else "<i4"
    topk_dtype = np.dtype(topk_dtype)
    if topk_dtype not in (np.dtype("<i2"), np.dtype("<i4")):
        raise CaptureError("topk_dtype must be int16 or int32")
    if topk_dtype == np.dtype("<i2") and not fits16:
        raise CaptureError("topk_ids: values do not fit int16")
    t = _as_i32("topk_ids", t, 3).astype(topk_dtype)

    page_size = _int_arg("page_size", page_size, 1, MAX_PAGE_SIZE)
    q_heads_per_kv = _int_arg("q_heads_per_kv", q_heads_per_kv, 1, MAX_Q_HEADS_PER_KV)
    head_dim = _int_arg("head_dim", head_dim, 1, MAX_HEAD_DIM)

    cu = _as_i32("cu_seqlens_q", cu_seqlens_q, 1)
    pre = _as_i32("prefix_lens", prefix_lens, 1)
    kvl = _as_i32("kv_lens", kv_lens, 1)
    r = len(pre)
    if r < 1 or len(cu) != r + 1 or len(kvl) != r:
        raise CaptureError(f"need cu_seqlens_q [R+1], prefix_lens [R], kv_lens [R]; got "
                           f"{len(cu)}, {len(pre)}, {len(kvl)}")
    qlen = _check_requests(cu, pre, kvl, t.shape)
    need = -(-int(kvl.max()) // page_size)  # ceil(max(kv_lens) / P)

    tensors = {"topk_ids": t, "cu_seqlens_q": cu, "prefix_lens": pre, "kv_lens": kvl}
    dtypes = {"topk_ids": "int16" if t.dtype == np.dtype("<i2") else "int32",
              "cu_seqlens_q": "int32", "prefix_lens": "int32", "kv_lens": "int32"}
    pt = None
    if page_table is not None:
        pt = _as_i32("page_table", page_table, 2)
        if pt.shape[0] != r or pt.shape[1] < need:
            raise CaptureError(f"page_table: expected [R={r}, >= {need}], got {pt.shape}")
        tensors["page_table"] = pt
        dtypes["page_table"] = "int32"
    else:
        _check_default_table(r, need)
    if q is not None:
        qa = np.asarray(q)
        if qa.shape != (n, hkv * q_heads_per_kv, head_dim):
            raise CaptureError(f"q: expected [{n}, {hkv * q_heads_per_kv}, "
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
    cache_pages = None
    if k_cache is not None:
        if k_scale is None or v_scale is None:
            raise CaptureError("k_scale and v_scale are required with the caches")
        for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
            c = np.asarray(c)
            if c.dtype != np.uint8 or c.ndim != 3 or c.shape[1:] != (hkv, head_dim):
                raise CaptureError(f"{name}: expected uint8 E4M3 bits [slots, {hkv}, "
                                   f"{head_dim}], got {c.dtype} {c.shape}")
            tensors[name] = np.ascontiguousarray(c)
            dtypes[name] = "float8_e4m3fn"
        slots = tensors["k_cache"].shape[0]
        if tensors["v_cache"].shape != tensors["k_cache"].shape:
            raise CaptureError(f"v_cache: shape {tensors['v_cache'].shape} differs from "
                               f"k_cache {tensors['k_cache'].shape}")
        if slots % page_size:
            raise CaptureError(f"k_cache: {slots} slots is not a multiple of page_size "
                               f"{page_size} (slot = physical page * P + offset)")
        cache_pages = slots // page_size
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            tensors[name] = _scale_value(name, s)
            dtypes[name] = "float32"
    elif k_scale is not None or v_scale is not None:
        raise CaptureError("k_scale / v_scale given without the caches")
    _check_coverage(pt, pre, qlen, need, page_size, cache_pages, allow_uncovered_pages)

    meta = _build_metadata(metadata, page_size, q_heads_per_kv, head_dim, softmax_scale,
                           qkv_seed)

    from safetensors import TensorSpec, serialize_file

    specs = {name: TensorSpec(dtype=dtypes[name], shape=list(a.shape),
                              data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in tensors.items()}
    if os.path.isdir(path):  # os.replace's error would name the temporary file
        raise IsADirectoryError(errno.EISDIR, "is a directory (pass a file path)", str(path))
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


def _check_requests(cu, pre, kvl, topk_shape):
    """cu_seqlens_q rises from 0 to N (topk_ids' [Hkv, N, K]), prefix_lens >= 0, and every
    kv_len covers its prefix and chunk. Returns the chunk lengths."""
    n = topk_shape[1]
    if cu[0] != 0 or cu[-1] != n or np.any(np.diff(cu) < 0):
        hint = ""
        if len(cu) and cu[0] == 0 and topk_shape[0] == cu[-1] and np.all(np.diff(cu) >= 0):
            hint = (f" (topk_ids has shape {list(topk_shape)}: it looks like [N, Hkv, K]; "
                    f"the format wants [Hkv, N, K], e.g. topk_ids.transpose(1, 0, 2))")
        raise CaptureError(f"cu_seqlens_q must rise from 0 to N={n}: {cu.tolist()[:8]}...{hint}")
    if np.any(pre < 0):
        raise CaptureError("prefix_lens must be >= 0")
    qlen = np.diff(cu)
    if np.any(kvl.astype(np.int64) < pre.astype(np.int64) + qlen):
        bad = int(np.argmax(kvl.astype(np.int64) < pre.astype(np.int64) + qlen))
        raise CaptureError(f"request {bad}: kv_len {kvl[bad]} < prefix {pre[bad]} + "
                           f"chunk {qlen[bad]}")
    return qlen


def _check_default_table(r, need):
    """Without a page table the default layout numbers R x need pages (need = ceil(max
    kv_len / P)); there may be at most MAX_DEFAULT_TABLE_ENTRIES of them (2^26: the C reader
    makes the table up in memory, and a few hundred bytes of header must not ask it for
    gigabytes; the bound also keeps the ids within int32), as the C reader requires."""
    if r * need > MAX_DEFAULT_TABLE_ENTRIES:
        raise CaptureError(f"page_table: absent, and the default layout needs R * "
                           f"ceil(max(kv_lens)/P) = {r} * {need} entries, more than the "
                           f"{MAX_DEFAULT_TABLE_ENTRIES} a reader makes up: pass a page_table")


def _check_coverage(pt, pre, qlen, max_pages, page_size, cache_pages, allow):
    """Every physical page a valid selection can reach lies in the cache (docs/semantics.md §1: a row at
    causal position c may select logical pages 0 .. c // P; the last row of request r has
    c = prefix + chunk - 1). cache_pages None (no caches): only negative ids are refused,
    the reader sizes the generated caches to max(page_table) + 1."""
    for req in range(len(pre)):
        if qlen[req] == 0:
            continue
        last = (int(pre[req]) + int(qlen[req]) - 1) // page_size
        if pt is None:
            phys = req * max_pages + np.arange(last + 1, dtype=np.int64)
        else:
            phys = pt[req, :last + 1].astype(np.int64)
        hi = cache_pages if cache_pages is not None else 2**63
        bad = (phys < 0) | (phys >= hi)
        if np.any(bad):
            p = int(np.argmax(bad))
            where = "page_table" if pt is not None else "the default page table"
            have = (f"the caches hold {cache_pages} pages" if cache_pages is not None
                    else "physical ids must be >= 0")
            msg = (f"request {req}: logical page {p} (reachable: pages 0..{last}) maps through "
                   f"{where} to physical page {int(phys[p])}, outside the cache ({have}); "
                   f"{int(bad.sum())} such page(s)")
            if not allow:
                raise CaptureError(msg + " (allow_uncovered_pages=True writes it anyway)")
            warnings.warn("save_capture: " + msg, stacklevel=3)


def _build_metadata(metadata, page_size, q_heads_per_kv, head_dim, softmax_scale, qkv_seed):
    """The __metadata__ map: provenance strings plus the reserved keys, each checked."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise CaptureError(f"metadata: expected a dict, got {type(metadata).__name__}")
    meta = {}
    for key, val in metadata.items():
        _check_utf8("metadata key", key)
        if not key:
            raise CaptureError("metadata: empty key")
        if val is None or isinstance(val, (bytes, bytearray)):
            raise CaptureError(f"metadata[{key!r}]: expected a str, got "
                               f"{type(val).__name__}")
        if not isinstance(val, str):
            val = json.dumps(val) if isinstance(val, (list, tuple, dict)) else str(val)
        _check_utf8(f"metadata[{key!r}]", val)
        meta[key] = val
    fixed = {"format": FORMAT, "format_version": FORMAT_VERSION,
             "page_size": str(page_size), "q_heads_per_kv": str(q_heads_per_kv),
             "head_dim": str(head_dim)}
    for key, val in fixed.items():
        if key in meta and meta[key] != val:
            raise CaptureError(f"metadata[{key!r}] is {meta[key]!r}, but this call writes "
                               f"{val!r} (reserved key: pass the argument instead)")
    meta.update(fixed)

    if "softmax_scale" in meta:
        given = parse_softmax_scale(meta["softmax_scale"])
        if given is None:
            raise CaptureError(f"metadata['softmax_scale'] is {meta['softmax_scale']!r}: the "
                               f"reader needs a finite number in (0, 3e38] (not 0; leave the "
                               f"key out for the default 1/sqrt(D))")
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
            raise CaptureError(f"softmax_scale: expected a number, got {softmax_scale!r}")
        v = float(softmax_scale)
        if v == 0.0:
            if "softmax_scale" in meta:
                raise CaptureError("softmax_scale=0 (default) but metadata['softmax_scale'] "
                                   f"is {meta['softmax_scale']!r}")
        else:
            text = repr(v)
            if parse_softmax_scale(text) is None:
                raise CaptureError(f"softmax_scale is {v!r}: must be finite and in (0, 3e38] "
                                   f"(float32 > 0), or 0 / None for the default 1/sqrt(D)")
            if "softmax_scale" in meta and parse_softmax_scale(meta["softmax_scale"]) != v:
                raise CaptureError(f"softmax_scale={v!r} but metadata['softmax_scale'] is "
                                   f"{meta['softmax_scale']!r}")
            meta["softmax_scale"] = text

    if "qkv_seed" in meta and parse_qkv_seed(meta["qkv_seed"]) is None:
        raise CaptureError(f"metadata['qkv_seed'] is {meta['qkv_seed']!r}: the reader needs "
                           f"decimal digits only, value < 2^64")
    if qkv_seed is not None:
        seed = _int_arg("qkv_seed", qkv_seed, 0, 2**64 - 1)
        if "qkv_seed" in meta and parse_qkv_seed(meta["qkv_seed"]) != seed:
            raise CaptureError(f"qkv_seed={seed} but metadata['qkv_seed'] is "
                               f"{meta['qkv_seed']!r}")
        meta["qkv_seed"] = str(seed)
    return meta


_NP = {"I16": "<i2", "I32": "<i4", "F32": "<f4", "BF16": "<u2", "F8_E4M3": "u1",
       "F8_E5M2": "u1", "U8": "u1", "I8": "i1", "BOOL": "u1", "U16": "<u2", "F16": "<f2",
       "U32": "<u4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}
MAX_HEADER_BYTES = 100_000_000  # as the C reader and the safetensors reference


def load_capture(path, return_dtypes=False):
    """Read a capture: returns (tensors: dict name -> numpy array, metadata: dict), and with
    return_dtypes=True a third dict name -> safetensors dtype string ("BF16", "F8_E4M3", ...).
    BF16 comes back as uint16 bits, F8_E4M3 as uint8 bits. Checks the safetensors layout
    (header a JSON object, every tensor's dtype / shape / byte range consistent and inside
    the file, no overlaps), the format and format_version keys and the required tensors.
    A malformed file raises CaptureError naming the file and the problem (the underlying
    exception, if any, is its __cause__); a file that cannot be opened raises OSError."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        tensors, meta, dtypes = _parse_capture(raw)
        return (tensors, meta, dtypes) if return_dtypes else (tensors, meta)
    except CaptureError as e:
        raise CaptureError(f"{path}: {e}") from e.__cause__
    except (ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CaptureError(f"{path}: malformed capture ({type(e).__name__}: {e})") from e


def _unique_keys(pairs):
    """A JSON object whose keys repeat is refused, as the C reader refuses it (json would
    keep the last value, cJSON the first: the two readers would read different files)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise CaptureError(f"header: key {key[:40]!r} appears more than once")
        # A NUL (\u0000) ends a C string: the C reader refuses it anywhere in the header
        # (names, values, strings inside lists), so this one does too.
        if "\0" in key or _holds_nul(value):
            raise CaptureError(f"header: a string holds a NUL character (\\u0000) near key {key[:40]!r}")
        out[key] = value
    return out


def _holds_nul(value):
    """Whether a parsed JSON value (objects already checked by _unique_keys) holds a string
    with a NUL, inside lists included."""
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _not_an_integer(text):
    """json's hook for a number that is not a JSON integer (60.0, 60e0) and for NaN /
    Infinity: the C reader refuses them anywhere in the header (docs/capture-format.md)."""
    raise CaptureError(f"header: number {text[:24]!r} is not a JSON integer (shapes and data_offsets "
                       f"are written as integers)")


def _parse_capture(raw):
    if len(raw) < 8:
        raise CaptureError(f"not a safetensors file: {len(raw)} bytes, the header length "
                           f"alone takes 8")
    hlen = int.from_bytes(raw[:8], "little")
    if hlen < 2 or hlen > MAX_HEADER_BYTES:
        raise CaptureError(f"header length {hlen} is not plausible (2..{MAX_HEADER_BYTES}): "
                           f"not a safetensors file?")
    if hlen > len(raw) - 8:
        raise CaptureError(f"truncated: header length {hlen} exceeds the file "
                           f"({len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + hlen].decode("utf-8"), object_pairs_hook=_unique_keys,
                            parse_float=_not_an_integer, parse_constant=_not_an_integer)
    except UnicodeDecodeError as e:
        raise CaptureError(f"header is not valid UTF-8 ({e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise CaptureError(f"header: JSON parse error: {e}") from e
    except RecursionError as e:
        raise CaptureError("header: JSON nested too deeply") from e
    if not isinstance(header, dict):
        raise CaptureError(f"header: not a JSON object (a {type(header).__name__})")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CaptureError("__metadata__: not a JSON object of strings")
    if meta.get("format") != FORMAT:
        raise CaptureError(f"metadata format is {meta.get('format')!r}, not {FORMAT!r}")
    version = meta.get("format_version")
    if version is None or not re.fullmatch(r"[+-]?[0-9]+", version) or \
            int(version) != int(FORMAT_VERSION):
        raise CaptureError(f"metadata format_version is {version!r}, this reader reads "
                           f"version {FORMAT_VERSION}")
    base = 8 + hlen
    data_size = len(raw) - base
    out, dtypes, ranges = {}, {}, []
    for name, h in header.items():
        if not isinstance(h, dict):
            raise CaptureError(f"tensor {name}: header entry is not a JSON object")
        dt = h.get("dtype")
        if dt not in _NP:
            raise CaptureError(f"tensor {name}: unsupported dtype {dt!r}")
        shape, offs = h.get("shape"), h.get("data_offsets")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise CaptureError(f"tensor {name}: shape {shape!r} is not a list of "
                               f"non-negative integers")
        if not isinstance(offs, list) or len(offs) != 2 or not all(
                isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs) \
                or offs[1] < offs[0]:
            raise CaptureError(f"tensor {name}: data_offsets {offs!r} is not [begin, end] "
                               f"with 0 <= begin <= end")
        a0, a1 = offs
        itemsize = np.dtype(_NP[dt]).itemsize
        nbytes = int(np.prod(shape, dtype=object)) * itemsize if shape else itemsize
        if nbytes != a1 - a0:
            raise CaptureError(f"tensor {name}: data_offsets [{a0}, {a1}] hold {a1 - a0} "
                               f"bytes, dtype {dt} shape {shape} needs {nbytes}")
        if a1 > data_size:
            raise CaptureError(f"tensor {name}: data_offsets [{a0}, {a1}] out of range: the "
                               f"data section has {data_size} bytes (truncated file?)")
        if a1 > a0:
            ranges.append((a0, a1, name))
        dtypes[name] = dt
        out[name] = np.frombuffer(raw, dtype=_NP[dt], count=nbytes // itemsize,
                                  offset=base + a0).reshape(shape)
    ranges.sort()
    for (b0, b1, n0), (c0, c1, n1) in zip(ranges, ranges[1:]):
        if c0 < b1:
            raise CaptureError(f"data_offsets of {n0} [{b0}, {b1}] and {n1} [{c0}, {c1}] "
                               f"overlap")
    for need in ("topk_ids", "cu_seqlens_q", "prefix_lens", "kv_lens"):
        if need not in out:
            raise CaptureError(f"required tensor {need} missing")
    _check_contents(out, meta, dtypes)
    return out, meta, dtypes


def _expect(name, out, dtypes, allowed, shape, what):
    """Tensor `name` has a dtype in `allowed` and `shape` (None: any size there)."""
    dt, got = dtypes[name], list(out[name].shape)
    if dt not in allowed:
        raise CaptureError(f"{name}: dtype {dt}, expected {' or '.join(allowed)}")
    if len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
        raise CaptureError(f"{name}: shape {got}, expected {what}")


def _check_contents(out, meta, dtypes):
    """What the C reader (pw_capture_read) checks past the safetensors layout: the reserved
    metadata keys' values, each known tensor's dtype and shape, the caches' pairing and slot
    count. So that a file the C side refuses is not read here with its values cast."""
    ints = {}
    for key in ("page_size", "q_heads_per_kv", "head_dim"):
        text = meta.get(key)
        if text is None:
            raise CaptureError(f"__metadata__.{key}: missing (required)")
        if not re.fullmatch(r"[+]?[0-9]+", text) or not 1 <= int(text) <= INT32_MAX:
            raise CaptureError(f"__metadata__.{key} is {text[:40]!r}, expected a positive integer")
        ints[key] = int(text)
    for key, hi in (("page_size", MAX_PAGE_SIZE), ("q_heads_per_kv", MAX_Q_HEADS_PER_KV),
                    ("head_dim", MAX_HEAD_DIM)):
        if ints[key] > hi:
            raise CaptureError(f"__metadata__.{key} is {ints[key]} (1..{hi})")
    if "softmax_scale" in meta and parse_softmax_scale(meta["softmax_scale"]) is None:
        raise CaptureError(f"__metadata__.softmax_scale is {meta['softmax_scale'][:40]!r}, "
                           f"expected a positive finite number")
    if "qkv_seed" in meta and parse_qkv_seed(meta["qkv_seed"]) is None:
        raise CaptureError(f"__metadata__.qkv_seed is {meta['qkv_seed'][:40]!r}, expected an "
                           f"unsigned 64-bit integer")
    _expect("topk_ids", out, dtypes, ("I32", "I16"), [None] * 3, "[Hkv, N, K]")
    hkv, n, k = out["topk_ids"].shape
    if not (1 <= hkv <= INT32_MAX and n <= INT32_MAX and 1 <= k <= MAX_TOPK):
        raise CaptureError(f"topk_ids: shape {[hkv, n, k]}: need Hkv >= 1, 1 <= K <= {MAX_TOPK}, "
                           f"all < 2^31")
    _expect("prefix_lens", out, dtypes, ("I32",), [None], "[R]")
    r = out["prefix_lens"].shape[0]
    if not 1 <= r < INT32_MAX:
        raise CaptureError(f"prefix_lens: shape [{r}], expected [R] with R >= 1")
    _expect("cu_seqlens_q", out, dtypes, ("I32",), [r + 1], "[R+1]")
    _expect("kv_lens", out, dtypes, ("I32",), [r], "[R]")
    _check_requests(out["cu_seqlens_q"], out["prefix_lens"], out["kv_lens"], [hkv, n, k])
    page = ints["page_size"]
    if "page_table" in out:
        _expect("page_table", out, dtypes, ("I32",), [r, None], "[R, max_pages]")
        if n > 0 and "k_cache" not in out and out["page_table"].size and out["page_table"].max() < 0:
            raise CaptureError(f"page_table: none of its {out['page_table'].size} entries is a "
                               f"physical page id (all are negative); without caches in the file "
                               f"the cache holds pages 0..max(page_table)")
        cap = out["page_table"].shape[1] * ints["page_size"]
        over = np.nonzero(out["kv_lens"].astype(np.int64) > cap)[0]
        if len(over):
            i = int(over[0])
            raise CaptureError(f"kv_lens[{i}] is {int(out['kv_lens'][i])}, > the page table's "
                               f"{out['page_table'].shape[1]} columns x page_size {ints['page_size']}")
    g, d = ints["q_heads_per_kv"], ints["head_dim"]
    if "q" in out:
        _expect("q", out, dtypes, ("BF16",), [n, hkv * g, d], "[N, Hkv*G, D]")
    if ("k_cache" in out) != ("v_cache" in out):
        have, other = ("k_cache", "v_cache") if "k_cache" in out else ("v_cache", "k_cache")
        raise CaptureError(f"{have}: present without {other} (both caches or neither)")
    if "k_cache" in out:
        _expect("k_cache", out, dtypes, ("F8_E4M3",), [None, hkv, d], "[slots, Hkv, D]")
        slots = out["k_cache"].shape[0]
        _expect("v_cache", out, dtypes, ("F8_E4M3",), [slots, hkv, d], "[slots, Hkv, D] like k_cache")
        for name in ("k_scale", "v_scale"):
            if name not in out:
                raise CaptureError(f"missing tensor {name!r} (required with the caches)")
            _expect(name, out, dtypes, ("F32",), [1] if out[name].ndim else [], "[1]")
            value = float(out[name].reshape(-1)[0])
            if not (math.isfinite(value) and value > 0.0):
                raise CaptureError(f"{name} is {value!r}: a capture's scales must be finite and > 0")
        if slots % ints["page_size"]:
            raise CaptureError(f"k_cache: {slots} slots is not a multiple of page_size "
                               f"{ints['page_size']} (the cache is [pages * P, Hkv, D])")
        if n > 0 and slots // page < 1:
            raise CaptureError(f"k_cache: {slots} slots, no page of {page} tokens (the chunk has "
                               f"{n} queries)")
    if "page_table" not in out:
        _check_default_table(r, -(-int(out["kv_lens"].max()) // page))
