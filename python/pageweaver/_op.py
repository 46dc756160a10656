"""pageweaver.sparse_prefill: the torch custom op over pw_sparse_prefill / pw_ref_attention.

Structure: `sparse_prefill` (plain Python, traced by torch.compile) checks nothing that
needs data, allocates the output (and LSE) and calls the custom op
`pageweaver::sparse_prefill_out`, which writes `out` / `lse` / `bad_page_count` in place
and returns nothing (a custom op may not return a tensor that aliases an input, so the
wrapper returns the buffers it passed). The op's fake implementation runs the same shape /
dtype checks on fake tensors, so a bad call fails while tracing.

CUDA path, per call: argument checks, plan lookup (cached), workspace from torch's caching
allocator on the current stream, pw_sparse_prefill on the current stream. No
synchronisation, no host read of device data: capturable in a CUDA graph. Scales given as
device tensors are passed by address (a captured graph reads their current contents on
every replay); Python floats become cached one-element device tensors.

CPU path: pw_ref_attention (the FP64 reference): PW_REF_FP8_EMULATE with the chosen
precision, or PW_REF_EXACT for precision="exact".
"""
import ctypes
import math
import numbers
import operator
import threading
from collections import OrderedDict
from typing import Optional

import torch

from . import _lib

PAGE_SIZE = 128  # tokens per KV page (the page table's unit), the default; the GPU also runs 64
MAX_PAGE_SIZE = 1 << 20  # the reference's limit (pageweaver.h)

_BF16 = torch.bfloat16
_FP8 = torch.float8_e4m3fn
_I32 = torch.int32
_O_DTYPES = {torch.bfloat16: _lib.PW_DTYPE_BFLOAT16, torch.float32: _lib.PW_DTYPE_FLOAT32,
             torch.float64: _lib.PW_DTYPE_FLOAT64}
_EXACT = -1  # precision code of "exact" (CPU reference only)
_FP8X2_PREPASS = -2  # "fp8x2_prepass": FP8X2 with P in f16, as on the V^T pre-pass (CPU only)


# ---- argument translation -------------------------------------------------------------
def _enum(name, value, table, default, extra=()):
    if value is None:
        return default
    if isinstance(value, str):
        key = value.lower()
        if key in table:
            return table[key]
    raise ValueError(f"{name}={value!r}: expected None (the library's default) or one of "
                     f"{sorted(table) + list(extra)}")


def _precision_code(precision):
    if isinstance(precision, str) and precision.lower() == "exact":
        return _EXACT
    if isinstance(precision, str) and precision.lower() == "fp8x2_prepass":
        return _FP8X2_PREPASS
    return _enum("precision", precision, _lib.PRECISIONS, _lib.DEFAULT_PRECISION,
                 extra=("exact (CPU tensors only)", "fp8x2_prepass (CPU tensors only)"))


def _softmax_scale_arg(softmax_scale):
    """The value the library gets for softmax_scale (0.0 for None = 1/sqrt(D)). A value that
    is not a positive finite float32 (rounds to 0, or past the float32 range) is refused:
    the library reads 0 as the default, so a tiny scale must not turn into it. Plain
    comparisons, no ctypes or math calls: torch.compile traces this function (a float that
    changes between calls is symbolic there; the comparisons guard on the range only)."""
    if softmax_scale is None:
        return 0.0
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise TypeError(f"softmax_scale: {type(softmax_scale).__name__} {softmax_scale!r}: "
                        f"expected None or a Python float (a tensor would need a host read)")
    scale = float(softmax_scale)
    # As a float32: x rounds to 0 iff x <= 2^-150 (half the smallest subnormal, a tie to
    # even), to inf iff x >= _F32_OVERFLOW; NaN fails both comparisons.
    if not (_F32_UNDERFLOW < scale < _F32_OVERFLOW):
        raise ValueError(f"softmax_scale is {softmax_scale!r}: must be finite and > 0 as a float32 "
                         f"(about 1.4e-45 .. 3.4e38; None for 1/sqrt(D))")
    return scale


_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103  # the smallest magnitude that rounds to inf as a float32
_F32_UNDERFLOW = 2.0 ** -150             # the largest positive value that rounds to 0 as a float32


def _scale_arg(name, s):
    """(tensor or None, float value) of a k_scale / v_scale argument."""
    if isinstance(s, torch.Tensor):
        return s, 0.0
    # Any real number: Python's int / float and NumPy's scalars (numpy.float32 etc.), not bool.
    if isinstance(s, bool) or not isinstance(s, numbers.Real):
        t = type(s)
        kind = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        raise TypeError(f"{name}: expected a real number or a 0-dim / 1-element float32 tensor, got {kind}")
    # The library takes it as a float32 (args.k_scale / v_scale; on the GPU a float32 tensor):
    # a double at or past float32's overflow threshold (2^128 - 2^103, halfway between the
    # largest float32 and 2^128) would round to inf; an int past the double range does not
    # convert at all (inf here). Plain comparisons: torch.compile traces this function (no
    # ctypes or math calls here).
    try:
        v = float(s)
    except OverflowError:
        v = math.inf
    if not (-_F32_OVERFLOW < v < _F32_OVERFLOW):  # NaN fails both
        raise ValueError(f"{name} is {s!r}: must be finite as a float32 (|x| <= about 3.4e38)")
    return None, v


# ---- checks ---------------------------------------------------------------------------
# Written as `if bad: raise ...` so that no message is formatted on the good path (the
# checks run on every call: they are most of the package's host time).
def _check_index(name, t, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != _I32:
        raise TypeError(f"{name}: dtype {t.dtype}, expected torch.int32")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, q on {device} (all tensors on one device)")
    if t.shape != shape:
        raise ValueError(f"{name}: shape {list(t.shape)}, expected {list(shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous())")


# The advice of a cache whose pages are not page_size tokens; the engine adapters put their
# own setting in its place (integrations._common.engine_names' hints).
PAGE_SIZE_ADVICE = "pass page_size= for other pages"


def _check_cache(name, c, dev, d, page_size=PAGE_SIZE):
    if not isinstance(c, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(c).__name__}")
    if c.dtype != _FP8:
        raise TypeError(f"{name}: dtype {c.dtype}, expected torch.float8_e4m3fn (uint8 E4M3 "
                        f"bit patterns: pass .view(torch.float8_e4m3fn))")
    if c.device != dev:
        raise ValueError(f"{name} is on {c.device}, q on {dev} (all tensors on one device)")
    if c.dim() in (3, 4) and c.shape[-1] != d:
        raise ValueError(f"{name}: head dim {c.shape[-1]} (shape {list(c.shape)}), q's is {d}: "
                         f"the caches and q must have the same D")
    if c.dim() == 4:  # [pages, Hkv, P, D], any strides >= 0 with d contiguous
        if c.shape[2] != page_size or c.stride(3) != 1 or any(
                st <= 0 and n > 1 for st, n in zip(c.stride()[:3], c.shape[:3])):
            raise ValueError(f"{name}: shape {list(c.shape)}, strides {list(c.stride())}: a "
                             f"4-D cache is [pages, Hkv, {page_size}, D] (page_size={page_size}: "
                             f"{PAGE_SIZE_ADVICE}) with D contiguous and positive page / head / "
                             f"token strides (no broadcast views)")
        return
    if c.dim() != 3:
        raise ValueError(f"{name}: shape {list(c.shape)}, expected [slots, Hkv, D] (slot = "
                         f"physical page * {page_size} + offset) or [pages, Hkv, {page_size}, D]")
    if c.stride(2) != 1 or (c.shape[1] > 1 and c.stride(1) != d):
        raise ValueError(f"{name}: strides {list(c.stride())}: each slot's [Hkv, D] block must "
                         f"be contiguous (strides [kv_stride, D, 1]; other layouts: pass "
                         f"[pages, Hkv, {page_size}, D] views)")


def _check_scale(name, t, device):
    if t.dtype != torch.float32:
        raise TypeError(f"{name}: dtype {t.dtype}, expected torch.float32")
    if t.numel() != 1:
        raise ValueError(f"{name}: {t.numel()} elements, expected one (0-dim or [1]); "
                         f"per-(KV head, slot) scales go to k_token_scales= / v_token_scales=")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, q on {device} (a device scale is read by "
                         f"the kernel)")


def _check_q(q):
    """q is a bfloat16 tensor [N, Hq, D] (TypeError / ValueError naming it)."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q: expected a torch.Tensor, got {type(q).__name__}")
    if q.dtype != _BF16:
        raise TypeError(f"q: dtype {q.dtype}, expected torch.bfloat16")
    if q.dim() != 3:
        raise ValueError(f"q: shape {list(q.shape)}, expected [N, Hq, D]")


def check_args(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
               prefix_lens, k_scale, v_scale, out, lse, bad_page_count, sinks=None,
               sink_keys=None, k_token_scales=None, v_token_scales=None, page_size=PAGE_SIZE):
    """Shape / dtype / device / stride checks that need no data (fake tensors pass through
    here too). Returns (N, R, Hkv, G, D, K, max_pages, num_cache_pages, kv_stride)."""
    if isinstance(page_size, bool) or not isinstance(page_size, (int, torch.SymInt)) or \
            not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size is {page_size!r}: an int in 1..{MAX_PAGE_SIZE} (tokens per "
                         f"KV page; the GPU runs 128 and 64)")
    _check_q(q)
    n, hq, d = q.shape
    dev = q.device
    if q.stride(2) != 1 or q.stride(1) != d:
        raise ValueError(f"q: strides {list(q.stride())}: each row's [Hq, D] block must be "
                         f"contiguous (strides [q_stride, D, 1]; a view into a fused QKV "
                         f"buffer is fine)")
    _check_cache("k_cache", k_cache, dev, d, page_size)
    _check_cache("v_cache", v_cache, dev, d, page_size)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache: shape {list(v_cache.shape)} differs from k_cache "
                         f"{list(k_cache.shape)}")
    if k_cache.dim() == 4:  # strided pages: args.cache_layout
        pages, hkv, _, dk = k_cache.shape
        if k_cache.stride() != v_cache.stride():
            raise ValueError(f"v_cache: strides {list(v_cache.stride())} differ from k_cache's "
                             f"{list(k_cache.stride())} (one layout for both)")
        slots = pages * page_size
    else:
        slots, hkv, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"k_cache: head dim {dk}, q has {d}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q has {hq} heads, not a multiple of the caches' {hkv} KV heads")
    kv_stride = k_cache.stride(0) if slots > 1 else hkv * d
    if k_cache.dim() == 4:
        kv_stride = 0  # not read: _fill_args sets args.cache_layout
    elif slots > 1 and v_cache.stride(0) != kv_stride:
        raise ValueError(f"v_cache: slot stride {v_cache.stride(0)} differs from k_cache's "
                         f"{kv_stride} (one kv_stride for both)")
    if k_cache.dim() == 3 and kv_stride < hkv * d:
        raise ValueError(f"k_cache: slot stride {kv_stride} < Hkv*D = {hkv * d} (slots may not overlap)")
    if slots // page_size < 1:
        raise ValueError(f"k_cache: {slots} slots, fewer than one page of {page_size}")
    if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 3:
        raise ValueError("topk_idx: expected an int32 tensor [Hkv, N, K]")
    k = topk_idx.shape[2]
    if topk_idx.shape[0] != hkv:
        raise ValueError(f"topk_idx: {topk_idx.shape[0]} KV heads (shape {list(topk_idx.shape)}), "
                         f"the caches {hkv}: topk_idx is [Hkv, N, K] with the caches' Hkv")
    if k < 1:
        raise ValueError(f"topk_idx: shape {list(topk_idx.shape)}: no Top-K column (K = 0); "
                         f"pad a row that selects nothing with -1")
    _check_index("topk_idx", topk_idx, (hkv, n, k), dev)
    if not isinstance(prefix_lens, torch.Tensor) or prefix_lens.dim() != 1:
        raise ValueError("prefix_lens: expected an int32 tensor [R]")
    r = prefix_lens.shape[0]
    if r < 1:
        raise ValueError("prefix_lens: no request (R = 0)")
    _check_index("prefix_lens", prefix_lens, (r,), dev)
    _check_index("kv_lens", kv_lens, (r,), dev)
    _check_index("cu_seqlens_q", cu_seqlens_q, (r + 1,), dev)
    if not isinstance(page_table, torch.Tensor) or page_table.dim() != 2:
        raise ValueError("page_table: expected an int32 tensor [R, max_pages]")
    if page_table.dtype != _I32:
        raise TypeError(f"page_table: dtype {page_table.dtype}, expected torch.int32")
    if page_table.device != dev:
        raise ValueError(f"page_table is on {page_table.device}, q on {dev}")
    if page_table.shape[0] != r:
        raise ValueError(f"page_table: {page_table.shape[0]} rows, expected R = {r}")
    max_pages = page_table.shape[1]
    if max_pages < 1:
        raise ValueError("page_table: no column (max_pages = 0)")
    if page_table.stride(1) != 1 and max_pages > 1:
        raise ValueError(f"page_table: strides {list(page_table.stride())}, columns must be "
                         f"contiguous")
    if r > 1 and page_table.stride(0) < max_pages:
        raise ValueError(f"page_table: row stride {page_table.stride(0)} < max_pages {max_pages} (rows may not "
                         f"overlap; call .contiguous())")
    if k_scale is not None:
        _check_scale("k_scale", k_scale, dev)
    if v_scale is not None:
        _check_scale("v_scale", v_scale, dev)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected a torch.Tensor, got {type(out).__name__}")
    if out.dtype not in _O_DTYPES:
        raise TypeError(f"out: dtype {out.dtype}, expected torch.bfloat16 (the reference also "
                        f"writes float32 / float64)")
    if out.device != dev:
        raise ValueError(f"out is on {out.device}, q on {dev}")
    if out.shape != q.shape:
        raise ValueError(f"out: shape {list(out.shape)}, expected [N, Hq, D] = {[n, hq, d]}")
    if out.stride(2) != 1 or out.stride(1) != d:
        raise ValueError(f"out: strides {list(out.stride())}: each row's [Hq, D] block must be "
                         f"contiguous")
    if lse is not None and (lse.dtype != torch.float32 or lse.device != dev or
                            lse.shape != (n, hq) or not lse.is_contiguous()):
        raise ValueError(f"lse: expected a contiguous float32 [N, Hq] = {[n, hq]} tensor on {dev}")
    if bad_page_count is not None and (
            bad_page_count.dtype not in (torch.int32, torch.uint32) or
            bad_page_count.numel() != 1 or bad_page_count.device != dev):
        raise TypeError(f"bad_page_count: expected a one-element int32 / uint32 tensor on {dev}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or sinks.dtype != torch.float32:
            raise TypeError(f"sinks: expected a float32 tensor [Hq] = [{hq}] (one logit per Q "
                            f"head), got {getattr(sinks, 'dtype', type(sinks).__name__)}")
        if sinks.shape != (hq,) or not sinks.is_contiguous() or sinks.device != dev:
            raise ValueError(f"sinks: shape {list(sinks.shape)}, strides {list(sinks.stride())} "
                             f"on {sinks.device}; expected a contiguous (stride 1) [Hq] = [{hq}] "
                             f"tensor on {dev}")
    if sink_keys is not None:
        if sinks is not None:
            raise ValueError("sinks and sink_keys: give a sink as a logit or as a key, not both")
        if not isinstance(sink_keys, torch.Tensor) or sink_keys.dtype != _BF16:
            raise TypeError(f"sink_keys: expected a bfloat16 tensor [Hq, D] = [{hq}, {d}], got "
                            f"{getattr(sink_keys, 'dtype', type(sink_keys).__name__)}")
        if sink_keys.shape != (hq, d) or not sink_keys.is_contiguous() or sink_keys.device != dev:
            raise ValueError(f"sink_keys: shape {list(sink_keys.shape)}, strides "
                             f"{list(sink_keys.stride())} on {sink_keys.device}; expected a "
                             f"contiguous [Hq, D] = [{hq}, {d}] tensor on {dev}")
    strides = None
    for name, t in (("k_token_scales", k_token_scales), ("v_token_scales", v_token_scales)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            got = f"dtype {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: expected a float32 torch.Tensor [Hkv, slots] = "
                            f"[{hkv}, {slots}] (one scale per KV head and cache slot), got {got}")
        if t.dim() != 2 or t.shape[0] != hkv or t.shape[1] < slots or t.device != dev or \
                min(t.stride()) < 0:
            raise ValueError(f"{name}: shape {list(t.shape)}, strides {list(t.stride())} on "
                             f"{t.device}; expected [Hkv, >= slots] = [{hkv}, {slots}] with "
                             f"strides >= 0 on {dev}")
        if strides is not None and t.stride() != strides:
            raise ValueError(f"k_token_scales and v_token_scales: strides {list(strides)} and "
                             f"{list(t.stride())} differ (one stride pair addresses both)")
        strides = t.stride()
    return n, r, hkv, hq // hkv, d, k, max_pages, slots // page_size, kv_stride


# ---- caches ---------------------------------------------------------------------------
_MAX_PLANS = 256
_plans = OrderedDict()
_plans_lock = threading.Lock()
# Private, for benchmarks only (bench/shapes.py's pre-pass arms): pw_plan_config_t.flags of
# the plans made while it is set (e.g. PW_PLAN_VT_PREPASS = 1 << 1); part of the cache key.
_plan_flags = 0
# Private, for benchmarks only (bench/shapes.py's W64 arms): pw_plan_config_t.window of the
# plans made while it is not None (64 or 128; the library's default, PW_WINDOW_AUTO, lets
# the time guard pick); part of the cache key. check_gpu_support reports it too.
_plan_window = None
# Private, for benchmarks only (bench/shapes.py's fallback arms): pw_plan_config_t.vt_max_pages
# of the plans made while it is set (0: the library's default); part of the cache key.
_plan_vt_max_pages = 0


_INT32_MAX = 2**31 - 1


def host_int(value):
    """value as an int (any integer type but bool: NumPy's too), else None. A Python int is
    returned as it is: under torch.compile an int that changes between calls is symbolic,
    and operator.index would pin it to its value (a recompile per value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return None


def _page_size_arg(value):
    """page_size: None -> 128; any integer type but bool as an int in 1..MAX_PAGE_SIZE, else
    TypeError (not an integer) / ValueError (out of range)."""
    if value is None:
        return PAGE_SIZE
    v = None if isinstance(value, torch.Tensor) else host_int(value)  # (a tensor: a host read)
    if v is None:
        raise TypeError(f"page_size: {type(value).__name__} {value!r}, expected None or an int "
                        f"(tokens per KV page)")
    if not 1 <= v <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size is {v}: an int in 1..{MAX_PAGE_SIZE} (tokens per KV page; "
                         f"the GPU runs 128 and 64)")
    return v


def _max_seqlen_q_arg(value):
    """max_seqlen_q: None -> 0 (not known); an int >= 0 (any integer type but bool; past
    2^31 - 1 read as 2^31 - 1, which means the same: longer than any group), else
    TypeError / ValueError. A tensor is refused: reading it would be a host read. Under
    torch.compile a symbolic int stays symbolic (host_int): the caller buckets it with
    _plan_max_rows, so a compiled graph guards on the bucket, not on the value."""
    if value is None:
        return 0
    v = None if isinstance(value, torch.Tensor) else host_int(value)
    if v is None:
        raise TypeError(f"max_seqlen_q: {type(value).__name__} {value!r}, expected None or a host int "
                        f"(the most query rows of one request)")
    if v < 0:
        raise ValueError(f"max_seqlen_q is {v}: expected >= 0 (0 or None: not known)")
    return v if v <= _INT32_MAX else _INT32_MAX


def _check_max_seqlen_q(max_rows, n, r):
    """A max_seqlen_q that the batch contradicts (N rows in R requests, each of at most
    max_rows: N <= R * max_rows) is an engine passing the wrong value: ValueError, as the
    library's pw_plan_create refuses it. Checked where all three are plain ints (under
    torch.compile a SymInt is not checked here: the plan refuses its bucket's bound)."""
    if (type(max_rows) is int and type(n) is int and type(r) is int and max_rows
            and n > r * max_rows):
        raise ValueError(f"max_seqlen_q is {max_rows}, but q has {n} rows in {r} requests "
                         f"(cu_seqlens_q has {r + 1} entries): a request then has more than "
                         f"{max_rows} rows (pass the most query rows of any request, or None)")


def _plan_max_rows(regroup, max_query_rows):
    """max_query_rows as the plan reads it: "auto" with 1..SHORT_REQUEST_ROWS keeps identity
    order, as SHORT_REQUEST_ROWS itself does; every other value (and mode) plans as 0. So one
    of those two is passed and keyed: one cached plan per shape and choice, not one per
    batch's max_seqlen_q."""
    short = regroup == _lib.REGROUP_MODES["auto"] and 0 < max_query_rows <= _lib.SHORT_REQUEST_ROWS
    return _lib.SHORT_REQUEST_ROWS if short else 0


def _window(window):
    return window if _plan_window is None else _plan_window


def _plan(key, problem, regroup, window, kernel, max_query_rows=0):
    """The cached plan of (device, shapes, softmax scale, config). LRU of _MAX_PLANS; an
    evicted plan is destroyed when its last user drops it."""
    flags, vt_max_pages = _plan_flags, _plan_vt_max_pages
    window = _window(window)
    max_query_rows = _plan_max_rows(regroup, max_query_rows)
    key = (key, flags, window, vt_max_pages, max_query_rows)
    with _plans_lock:
        p = _plans.get(key)
        if p is not None:
            _plans.move_to_end(key)
            return p
    p = _lib.Plan(problem, regroup, window, kernel, flags, vt_max_pages, max_query_rows)  # may raise: nothing cached then
    with _plans_lock:
        p = _plans.setdefault(key, p)
        _plans.move_to_end(key)
        while len(_plans) > _MAX_PLANS:
            _plans.popitem(last=False)
    return p


_MAX_SCALES = 1024
_scales = {}
_capture_keepalive = []  # scale tensors made during graph capture (4 bytes each, never freed)
_scales_lock = threading.Lock()


def _device_scale(value, device):
    """A one-element float32 tensor holding `value` on `device`. Cached (never evicted, so a
    kernel still in flight never reads a reused block) up to _MAX_SCALES values; never
    created into the cache while the stream is capturing a CUDA graph (the fill would only
    run at replay)."""
    key = (device, value)
    t = _scales.get(key)
    if t is not None:
        return t
    if torch.cuda.is_current_stream_capturing():
        # Filled at replay by the captured fill. Kept alive for good: freed inside the capture,
        # its block would be handed to the next allocation of the same capture (this call's
        # workspace), which would overwrite the scale before the kernel reads it.
        t = torch.full((1,), value, dtype=torch.float32, device=device)
        _capture_keepalive.append(t)
        return t
    if len(_scales) >= _MAX_SCALES:
        return torch.full((1,), value, dtype=torch.float32, device=device)
    t = torch.full((1,), value, dtype=torch.float32, device=device)
    with _scales_lock:
        return _scales.setdefault(key, t)


def _current_stream(index):
    try:
        return torch._C._cuda_getCurrentRawStream(index)
    except AttributeError:  # not in every torch build
        return torch.cuda.current_stream(index).cuda_stream


def _problem(n, r, hkv, g, d, k, max_pages, num_pages, softmax_scale, page_size=PAGE_SIZE):
    """The pw_problem_t of a call, from check_args' sizes."""
    problem = _lib.new_problem()
    problem.num_tokens, problem.num_requests, problem.num_kv_heads = n, r, hkv
    problem.q_heads_per_kv, problem.head_dim, problem.page_size = g, d, page_size
    problem.topk, problem.max_pages_per_request = k, max_pages
    problem.num_cache_pages, problem.softmax_scale = num_pages, softmax_scale
    return problem


# ---- the op ---------------------------------------------------------------------------
def _fill_args(args, q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
               prefix_lens, out, lse, bad_page_count, n, hq, d, kv_stride, sinks=None,
               sink_keys=None, k_token_scales=None, v_token_scales=None):
    args.q = q.data_ptr()
    args.q_stride = q.stride(0) if n > 1 else hq * d
    args.k_cache = k_cache.data_ptr()
    args.v_cache = v_cache.data_ptr()
    args.kv_stride = kv_stride
    if k_cache.dim() == 4:  # [pages, Hkv, 128, D] views: strides of pages, heads, tokens
        pages, hkv = k_cache.shape[:2]
        s0, s1, s2, _ = k_cache.stride()
        lay = args.cache_layout
        lay.page_stride = s0 if pages > 1 else 16  # one page: its stride is never used
        lay.head_stride = s1 if hkv > 1 else 0
        lay.token_stride = s2
    args.topk_ids = topk_idx.data_ptr()
    rq = args.requests
    rq.cu_seqlens_q = cu_seqlens_q.data_ptr()
    rq.prefix_lens = prefix_lens.data_ptr()
    rq.kv_lens = kv_lens.data_ptr()
    rq.page_table = page_table.data_ptr()
    rq.page_table_stride = page_table.stride(0) if page_table.shape[0] > 1 else page_table.shape[1]
    args.o = out.data_ptr()
    args.o_stride = out.stride(0) if n > 1 else hq * d
    args.o_dtype = _O_DTYPES[out.dtype]
    args.lse = lse.data_ptr() if lse is not None else None
    args.bad_page_count = bad_page_count.data_ptr() if bad_page_count is not None else None
    args.sink_logits = sinks.data_ptr() if sinks is not None else None
    args.sink_keys = sink_keys.data_ptr() if sink_keys is not None else None
    ts = k_token_scales if k_token_scales is not None else v_token_scales
    if ts is not None:
        args.token_scales.k = k_token_scales.data_ptr() if k_token_scales is not None else None
        args.token_scales.v = v_token_scales.data_ptr() if v_token_scales is not None else None
        args.token_scales.stride_h, args.token_scales.stride_t = ts.stride()


def _sparse_prefill_out(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       topk_idx: torch.Tensor, page_table: torch.Tensor,
                       cu_seqlens_q: torch.Tensor, kv_lens: torch.Tensor,
                       prefix_lens: torch.Tensor, k_scale: Optional[torch.Tensor],
                       v_scale: Optional[torch.Tensor], k_scale_value: float,
                       v_scale_value: float, softmax_scale: float, precision: int,
                       regroup: int, kernel: int, out: torch.Tensor,
                       lse: Optional[torch.Tensor],
                       bad_page_count: Optional[torch.Tensor],
                       sinks: Optional[torch.Tensor] = None,
                       sink_keys: Optional[torch.Tensor] = None,
                       k_token_scales: Optional[torch.Tensor] = None,
                       v_token_scales: Optional[torch.Tensor] = None,
                       page_size: int = PAGE_SIZE, max_seqlen_q: int = 0) -> None:
    """The op behind pageweaver.sparse_prefill (see there). k_scale / v_scale: a device
    tensor, or None and the float in k_scale_value / v_scale_value. precision: a
    pw_precision_t, or -1 for the exact reference, -2 for FP8X2 with P in f16 (both CPU
    only). regroup / kernel:
    pw_regroup_mode_t / pw_kernel_t. sinks: [Hq] float32 sink logits or None; sink_keys:
    [Hq, D] bfloat16 sink keys or None; k_token_scales / v_token_scales: [Hkv, slots]
    float32 per-token scales or None; page_size: tokens per KV page; max_seqlen_q: the most
    query rows of one request, 0 when not known (pw_plan_config_t.max_query_rows)."""
    n, r, hkv, g, d, k, max_pages, num_pages, kv_stride = check_args(
        q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens, prefix_lens,
        k_scale, v_scale, out, lse, bad_page_count, sinks, sink_keys, k_token_scales,
        v_token_scales, page_size)
    hq = hkv * g
    problem = _problem(n, r, hkv, g, d, k, max_pages, num_pages, softmax_scale, page_size)
    args = _lib.new_args()
    _fill_args(args, q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
               prefix_lens, out, lse, bad_page_count, n, hq, d, kv_stride, sinks, sink_keys,
               k_token_scales, v_token_scales)
    if q.device.type == "cpu":
        _run_reference(problem, args, k_scale, v_scale, k_scale_value, v_scale_value,
                       precision)
    elif q.device.type == "cuda":
        _run_cuda(problem, args, q.device, k_scale, v_scale, k_scale_value, v_scale_value,
                  precision, regroup, kernel, max_seqlen_q)
    else:
        raise ValueError(f"q is on {q.device}: pageweaver runs on 'cuda' (sm_90) and 'cpu' "
                         f"(the reference)")


try:
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode as _in_dispatch_mode
except ImportError:  # not in every torch: always take the dispatcher then
    def _in_dispatch_mode():
        return True


sparse_prefill_out = torch.library.custom_op(
    "pageweaver::sparse_prefill_out", _sparse_prefill_out,
    mutates_args=("out", "lse", "bad_page_count"))


def _run_reference(problem, args, k_scale, v_scale, k_value, v_value, precision):
    keep = []
    for field, t, v in (("k_scale", k_scale, k_value), ("v_scale", v_scale, v_value)):
        if t is not None:
            setattr(args, field, t.data_ptr())
        else:
            f = ctypes.c_float(v)
            keep.append(f)
            setattr(args, field, ctypes.addressof(f))
    if precision == _EXACT:
        mode = _lib.PW_REF_EXACT
    elif precision == _FP8X2_PREPASS:
        mode = _lib.PW_REF_FP8_EMULATE_F16_P
        args.precision = _lib.PRECISIONS["fp8x2"]
    else:
        mode = _lib.PW_REF_FP8_EMULATE
        args.precision = precision
    _lib.check(_lib.lib.pw_ref_attention(ctypes.byref(problem), ctypes.byref(args), mode),
               "pw_ref_attention")


def _run_cuda(problem, args, device, k_scale, v_scale, k_value, v_value, precision,
              regroup, kernel, max_query_rows=0):
    if precision in (_EXACT, _FP8X2_PREPASS):
        raise ValueError(f"precision={'exact' if precision == _EXACT else 'fp8x2_prepass'!r} is the CPU "
                         "reference only; on the GPU use 'fp8x2' (two-term FP8, which takes P in f16 on "
                         "the V^T pre-pass) or 'fp8'")
    args.precision = precision
    if problem.num_tokens and args.o_dtype != _lib.PW_DTYPE_BFLOAT16:
        raise TypeError("out: the GPU writes torch.bfloat16 only")
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, problem.num_tokens, problem.num_requests, problem.num_kv_heads,
           problem.q_heads_per_kv, problem.head_dim, problem.page_size, problem.topk,
           problem.max_pages_per_request, problem.num_cache_pages, problem.softmax_scale,
           regroup, kernel)
    plan = _plan(key, problem, regroup, _lib.DEFAULT_WINDOW, kernel,
                 max_query_rows)  # raises for shapes the GPU does not run
    if problem.num_tokens == 0:  # nothing to run (the cached plan checked the shapes, host only)
        return
    # Held until the call returns: a scale tensor freed here would hand its block to the
    # workspace allocated below, which the call writes before the kernel reads the scale.
    k_scale_t = k_scale if k_scale is not None else _device_scale(k_value, device)
    v_scale_t = v_scale if v_scale is not None else _device_scale(v_value, device)
    args.k_scale = k_scale_t.data_ptr()
    args.v_scale = v_scale_t.data_ptr()
    nbytes = plan.workspace_bytes
    workspace = torch.empty((nbytes,), dtype=torch.uint8, device=device) if nbytes else None
    ws_ptr = workspace.data_ptr() if workspace is not None else None
    switch = torch.cuda.current_device() != index
    prev = torch.cuda.current_device() if switch else None
    if switch:
        torch.cuda.set_device(index)  # the library launches on the thread's current device
    try:
        stream = _current_stream(index)
        with plan.lock:
            status = _lib.lib.pw_sparse_prefill(plan.handle, ctypes.byref(args), None, ws_ptr,
                                                nbytes, stream)
            _lib.check(status, "pw_sparse_prefill")
    finally:
        if switch:
            torch.cuda.set_device(prev)


@sparse_prefill_out.register_fake
def _(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens, prefix_lens,
      k_scale, v_scale, k_scale_value, v_scale_value, softmax_scale, precision, regroup,
      kernel, out, lse, bad_page_count, sinks=None, sink_keys=None, k_token_scales=None,
      v_token_scales=None, page_size=PAGE_SIZE, max_seqlen_q=0):
    check_args(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
               prefix_lens, k_scale, v_scale, out, lse, bad_page_count, sinks, sink_keys,
               k_token_scales, v_token_scales, page_size)


def sparse_prefill(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
                   prefix_lens, *, k_scale=1.0, v_scale=1.0, softmax_scale=None, out=None,
                   return_lse=False, precision=None, regroup=None, kernel=None,
                   bad_page_count=None, sinks=None, sink_keys=None, k_token_scales=None,
                   v_token_scales=None, page_size=None, max_seqlen_q=None):
    """Sparse prefill attention over per-query Top-K KV pages, with online query regrouping.

    For every query row n (request r, causal position c = prefix_lens[r] + n -
    cu_seqlens_q[r]) and KV head h, the row attends to the tokens t of the logical pages
    p in its Top-K row with 0 <= p <= min(c, kv_lens[r] - 1) // 128, t < kv_lens[r] and
    t <= c (duplicates count once; any other id, -1 padding included, is ignored); each of
    the G = Hq / Hkv Q heads of KV head h gets softmax(q . k * softmax_scale) v over them.
    A row without a visible token gets o = 0 and LSE = -inf (with sinks: LSE = the
    head's sink). Logical page p of request r
    is physical page page_table[r, p] of the caches (slot = physical page * 128 + offset).

    Tensors (one device; "cuda" needs an sm_90 GPU, "cpu" runs the FP64 reference):
      q            [N, Hq, D] bfloat16; rows may be strided (q.stride(0) >= Hq*D, e.g. a
                   view into a fused QKV buffer), each row's [Hq, D] contiguous.
      k_cache, v_cache [slots, Hkv, D] float8_e4m3fn, slot = page * 128 + offset; one slot
                   stride for both (>= Hkv*D; on the GPU a multiple of 16, 16-byte
                   aligned). Pages past slots // 128 count as outside the cache, a partial
                   last page too (an engine's pool may end in padding slots, as SGLang's
                   does; a cache sliced to a sequence's length must be padded to whole
                   pages, or its last tokens are not seen). Or both
                   [pages, Hkv, 128, D] with positive page / head / token strides (the
                   same for both, D contiguous; on the GPU multiples of 16 below 2^40):
                   e.g. vLLM's interleaved
                   [num_blocks, Hkv, 128, 2*D] cache as kv[..., :D] and kv[..., D:], read in
                   place (args.cache_layout); slots are then page * 128 + offset too.
      topk_idx     [Hkv, N, K] int32 contiguous: logical page ids (any int32 value). The GPU
                   takes K up to 64 (padded with -1 to 16, 32 or 64); K > 16 runs the
                   "union4" (default) and "per_query" kernels; "greedy" / "guarded" run
                   the wide-Top-K GPU regroup (windows of 128; the same outputs,
                   bitwise), "auto" does where the time guard predicts a net saving
                   (large chunks: A-hot's 15,272 queries with a 504-column page table
                   do, a few thousand do not; a table of 2,049-4,096 columns needs
                   ~7.6K-13.3K queries per KV head, a wider one ~19.8K-24.4K at K <= 32
                   and never at K > 32: pageweaver.check_gpu_support shows the choice).
      page_table   [R, max_pages] int32, rows may be strided: physical page per logical
                   page; kv_lens[r] <= max_pages * 128.
      cu_seqlens_q [R+1], kv_lens [R], prefix_lens [R] int32 contiguous: packed requests,
                   cu_seqlens_q = 0 ... N, kv_lens[r] >= prefix_lens[r] + chunk rows of r
                   (the chunk's own K/V are already in the cache).
    Keywords:
      k_scale, v_scale  per-tensor dequantisation scales (real K = k_scale * e4m3 value):
                   a Python float (finite), or a 0-dim / 1-element float32 tensor on q's
                   device, read by the kernel at run time (a captured CUDA graph replays
                   with whatever the tensor holds then; its value is not checked). Any
                   finite value is used as given, 0 and negative ones included
                   (docs/semantics.md §4.5: k_scale = 0 makes every visible score 0).
      softmax_scale  None for 1/sqrt(D), or a float > 0 (finite as a float32). Under
                   torch.compile a compile-time constant (a graph per value, as a model
                   has one); k_scale / v_scale floats may change between calls.
      out          None (allocated) or [N, Hq, D] bfloat16 (CPU also float32 / float64),
                   rows may be strided; written in place. It, lse and bad_page_count
                   must not overlap any input (q, the caches, topk_ids, the request
                   tensors, the sinks, the scales) or each other (no attention in
                   place: InvalidArgumentError).
      return_lse   also return the LSE [N, Hq] float32 (natural log of the row's softmax
                   denominator, scaled scores; -inf for empty rows, or the head's sink).
      precision    None (the library's default: "fp8x2"), "fp8" (FP8 Q and P, the fast
                   mode, ~3.5% error), "fp8x2" (two-term FP8 Q and P, ~0.2% error), or on
                   the CPU "exact" (FP64 attention over the dequantised inputs instead of
                   emulating the GPU arithmetic, of the kernels that transpose V themselves
                   for "fp8x2": two E4M3 P terms) or "fp8x2_prepass" (FP8X2 with P in f16,
                   as the GPU's V^T pre-pass on large chunks without per-token scales;
                   docs/semantics.md §4.5; the softmax scale is the API's float32,
                   1/sqrt(D) rounded to float32 when None).
      regroup      None (library default: "auto"), "identity", "greedy", "guarded" or
                   "auto" (guarded where the library's cost model says regrouping pays,
                   in the window of 64 or 128 positions it predicts saves more; "greedy"
                   and "guarded" use 128). Outputs do not depend on it.
                   CPU tensors (the reference) ignore regroup and kernel: the GPU's
                   choices are what check_gpu_support reports.
      kernel       None (library default), "union4", "union8" or "per_query". In "fp8"
                   outputs do not depend on it; in "fp8x2" Union4 on large chunks (the V^T
                   pre-pass) takes P in f16, the other paths as two E4M3 terms (~1.7e-3
                   NRMS apart, docs/semantics.md §4.5).
      bad_page_count  optional one-element int32 / uint32 tensor on q's device, incremented
                   once per (row, KV head, selected visible page) whose physical page lies
                   outside the cache (that page contributes nothing). Never reset here.
      sinks        optional [Hq] float32 tensor on q's device, contiguous: attention sinks,
                   one logit per Q head on the scale of softmax_scale * q . k (natural
                   log). Each row's softmax denominator gains exp(sinks[h]) and its
                   numerator nothing; the LSE includes it; -inf = no sink for that head,
                   +inf: o = 0 and LSE = +inf, NaN: NaN LSE (and o on rows with a visible
                   token). Read by the kernel at run time (graph replays see new values);
                   no gradient flows (the op has no backward).
      sink_keys    optional [Hq, D] bfloat16 tensor on q's device, contiguous: sinks as one
                   key per Q head (SGLang's form): row n's sink logit for head h is
                   softmax_scale * (q[n, h] . sink_keys[h]) (FP32, computed by the kernel
                   in its epilogue from the unquantised Q); not together with sinks. On
                   the GPU its data pointer must be 16-byte aligned (torch's allocations
                   are; a view starting at an element offset that is not a multiple of 8
                   is not: ValueError).
      k_token_scales, v_token_scales  optional float32 tensors [Hkv, slots] (more columns
                   allowed) on q's device, any strides >= 0, the same for both: per-(KV
                   head, cache slot) K / V scales as vLLM keeps them; real K of slot s =
                   k_scale * k_token_scales[h, s] * e4m3 value (V likewise). Slots no row
                   may see are never used (NaN allowed there). The FP8 arithmetic with them
                   (P times vs / the page's largest |vs| before quantisation) is
                   docs/semantics.md §4.5. GPU: the Union4 (default) and per-query kernels;
                   kernel="union8" raises UnsupportedError.
      page_size    None (128) or the tokens per KV page P, 1..2^20: every page "128" above
                   is then P (slots, the 4-D caches' third dimension, the page of a causal
                   position; not the regroup's windows). A [slots, Hkv, D] cache does not
                   carry P: a cache of 64-token pages read with the default P = 128 gives
                   wrong pages, not an error. The GPU runs P = 128 and 64 (64: the Union4, default, and
                   per-query kernels, each page one 128-column step with half its columns
                   masked; kernel="union8" and other P raise UnsupportedError naming it);
                   the CPU reference takes any P.
      max_seqlen_q None (not known) or a host int: the most query rows of any one request
                   in this call, as engines keep it (SGLang's and vLLM's max_seqlen_q /
                   max_query_len). Read by regroup "auto" only: where every request has at
                   most 8 rows the call keeps identity order without launching the regroup
                   (decode-like and speculative-verification batches: up to the regroup's
                   group no grouping changes the work, and up to 8 the regroup measured
                   costlier than what it saves; pageweaver.h, max_query_rows). A value
                   below a request's rows never changes an output (at worst a call is
                   not regrouped), but one the shapes contradict (N > R x max_seqlen_q)
                   raises ValueError. The cached plan's key and a torch.compile graph
                   take its bucket (1..8 or not), not the value.
    Returns out, or (out, lse) with return_lse.

    Runs on q's device and the current CUDA stream, asynchronously: no synchronisation, no
    host read of device data (request lengths, ids and the page table are read by the
    kernels), workspace from torch's caching allocator, so a call can be captured in a CUDA
    graph and by torch.compile(fullgraph=True). On the GPU the request layout is not
    validated (that needs a host read): an inconsistent layout gives unspecified output
    but no out-of-bounds access; the CPU path validates it. On both paths a page-table
    entry outside the cache (negative, or >= the cache's pages) is a bad page, not an
    error: it contributes nothing and is counted in bad_page_count (pass one to see it).
    Non-finite data a row sees: on the CPU in "fp8" / "fp8x2" a NaN / Inf score raises
    InvalidArgumentError (naming the row: the emulated arithmetic has no answer then), in
    "exact" it propagates (NaN output and LSE for that row, as FP64 arithmetic gives);
    NaN in V gives NaN output rows on every path (the GPU cannot raise on data). Data in
    cache slots no row may see is never read into an output.

    Errors: TypeError / ValueError naming the tensor (dtype, shape, device, strides);
    pageweaver.InvalidArgumentError (a ValueError) / UnsupportedError (a
    NotImplementedError: e.g. G not 16 / 8 / 4, D != 128 or K > 64 on the GPU, a GPU other than
    sm_90) / NoDeviceError / CudaError carrying the library's message.
    """
    ks, kv = _scale_arg("k_scale", k_scale)
    vs, vv = _scale_arg("v_scale", v_scale)
    scale = _softmax_scale_arg(softmax_scale)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse: {type(return_lse).__name__} {return_lse!r}, expected a bool")
    prec = _precision_code(precision)
    mode = _enum("regroup", regroup, _lib.REGROUP_MODES, _lib.DEFAULT_REGROUP)
    kern = _enum("kernel", kernel, _lib.KERNELS, _lib.DEFAULT_KERNEL)
    psize = _page_size_arg(page_size)
    max_rows = _max_seqlen_q_arg(max_seqlen_q)
    _check_q(q)  # (before its shape is used below; check_args checks the rest)
    if torch.compiler.is_compiling():
        # A float scale that changes between calls is a SymFloat under torch.compile:
        # passed as the op's float it would be specialised (a recompile per value); as a
        # one-element tensor on q's device (what the GPU path makes of a float anyway) it
        # stays a graph value (ones * v: AOT autograd keeps it symbolic, torch.full and
        # torch.scalar_tensor of it are specialised, torch 2.11).
        if ks is None:
            ks, kv = torch.ones((1,), dtype=torch.float32, device=q.device) * kv, 0.0
        if vs is None:
            vs, vv = torch.ones((1,), dtype=torch.float32, device=q.device) * vv, 0.0
    # Only where cu_seqlens_q's length agrees with kv_lens / prefix_lens: otherwise that is
    # the error, and check_args (in the op) names it, not max_seqlen_q (a review, 2026-12-06).
    if all(isinstance(t, torch.Tensor) and t.dim() == 1 for t in (cu_seqlens_q, kv_lens, prefix_lens)) and \
            cu_seqlens_q.shape[0] - 1 == kv_lens.shape[0] == prefix_lens.shape[0]:
        _check_max_seqlen_q(max_rows, q.shape[0], cu_seqlens_q.shape[0] - 1)
    # What the plan reads of it (SHORT_REQUEST_ROWS or 0): the op and its cache key get the
    # bucket, so a compiled graph guards on it, not on each batch's value.
    max_rows = _plan_max_rows(mode, max_rows)
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device) if return_lse else None
    if (type(q) is torch.Tensor and not torch.compiler.is_compiling() and
            q.device.type != "meta" and not _in_dispatch_mode()):
        # Plain eager call on real tensors: the op's implementation directly (the
        # dispatcher's custom-op layers cost ~10 us of host time and add nothing here); the
        # version counters of the written buffers are bumped as the dispatcher would.
        _sparse_prefill_out(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q,
                            kv_lens, prefix_lens, ks, vs, kv, vv, scale, prec, mode, kern,
                            out, lse, bad_page_count, sinks, sink_keys, k_token_scales,
                            v_token_scales, psize, max_rows)
        _bump(out)
        if bad_page_count is not None:
            _bump(bad_page_count)
    else:  # tracing (torch.compile, fake / meta tensors, dispatch modes): the custom op
        sparse_prefill_out(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
                           prefix_lens, ks, vs, kv, vv, scale, prec, mode, kern, out, lse,
                           bad_page_count, sinks, sink_keys, k_token_scales, v_token_scales,
                           psize, max_rows)
    return (out, lse) if return_lse else out


def _check_gpu_layout(q, k_cache, v_cache, n, hq, d, kv_stride, page_size=PAGE_SIZE):
    """The GPU's alignment and stride rules (the C library's pw_check_gpu_attention_args),
    which the CPU reference does not need: raises InvalidArgumentError as the GPU call would."""
    def fail(msg):
        raise _lib.InvalidArgumentError("PW_ERROR_INVALID_ARGUMENT", msg)
    if q.data_ptr() % 16:
        fail("q must be 16-byte aligned on the GPU (rows read as 16-byte vectors)")
    q_stride = q.stride(0) if n > 1 else hq * d
    if q_stride < hq * d or q_stride % 8:
        fail(f"q's row stride {q_stride} must be >= Hq*D = {hq * d} and a multiple of 8 elements on the GPU")
    if k_cache.data_ptr() % 16 or v_cache.data_ptr() % 16:
        fail("k_cache / v_cache must be 16-byte aligned on the GPU")
    if k_cache.dim() == 4:
        pages, hkv = k_cache.shape[:2]
        s0, s1, s2, _ = k_cache.stride()
        page, head, token = (s0 if pages > 1 else 16), (s1 if hkv > 1 else d), s2
    else:
        page, head, token = page_size * kv_stride, d, kv_stride
    if any(x % 16 or x >= 1 << 40 for x in (page, head, token)):
        fail(f"the GPU needs cache strides that are multiples of 16 elements and below 2^40 "
             f"(page {page}, head {head}, token {token})")


def check_gpu_support(q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens,
                      prefix_lens, *, softmax_scale=None, precision=None, regroup=None,
                      kernel=None, sinks=None, sink_keys=None, k_token_scales=None,
                      v_token_scales=None, page_size=None, max_seqlen_q=None):
    """Whether the GPU path would accept these arguments, decided on the host (any device,
    CPU tensors included): for an engine's CPU-only CI, where sparse_prefill runs the FP64
    reference, which takes shapes the GPU refuses (README: At a glance; docs/shapes.md).

    Same arguments as sparse_prefill (scales and outputs left out). Checks the tensors as
    sparse_prefill does, then the plan the GPU call would make (pw_plan_create: G, head dim,
    page size, Top-K, kernel, regroup), the precision ('exact' is the CPU's only) and the
    kernel's support of per-token scales (Union8 has none), and the GPU's layout rules
    the reference does not need (q, k_cache, v_cache 16-byte aligned; q's row stride a
    multiple of 8 elements; cache page / head / token strides multiples of 16 elements).
    Reads no tensor data: device values (ids, lengths, page-table entries) are checked by
    the call itself. Raises UnsupportedError (a NotImplementedError) naming what the GPU
    does not run, InvalidArgumentError for a layout the GPU refuses, or the errors of
    sparse_prefill for malformed arguments.

    Returns what the GPU call would run (the plan's choices, pw_plan_info in pageweaver.h),
    a dict: "kernel" ('union4', 'union8' or 'per_query'); "regroup" (the call's regroup
    for this precision: 'identity', 'greedy' or 'guarded'), "regroup_group_size" (0
    without a regroup) and "regroup_window" (its window, 64 or 128: "auto" picks the one
    its cost model predicts saves more; 0 without a regroup); "vt_prepass" (bool: Union4's V^T pre-pass, the rule's "large
    chunks": 4,096+ queries, or 2,048+ at Top-K >= 32, and a page table of at most 4
    entries per selection; docs/shapes.md) and "vt_capacity"
    (its tiles per KV head, 0 without it); "tile": 'g16' (16 Q heads per KV head),
    'dense' (G = 8 or 4 on the pre-pass, in 'fp8x2' without per-token scales: 8 queries x 8
    heads, or 16 queries x 4 heads, per tile) or 'padded' (G = 8 or 4 otherwise: 16 / G times
    the useful tensor work; in 'fp8x2' with per-token scales on the pre-pass the stacked
    tile runs instead: "fp8x2_tile"). A KV head whose unions touch more than vt_capacity pages in a
    call runs that call on the kernel that transposes V (the padded tile at G = 8 and 4),
    decided on the device (none can when R x max_pages_per_request <= vt_capacity); in
    'fp8' the outputs are the same bits either way, in 'fp8x2' the pre-pass takes P in f16
    (without per-token scales; with them, two E4M3 terms there too, which this dict does
    not depend on) and the other kernel two E4M3 terms (docs/semantics.md §4.5: ~1.7e-3
    NRMS apart, both ~0.2% from exact; precision='fp8x2_prepass' on CPU tensors emulates
    the pre-pass's). "fp8x2_tile": on the pre-pass at G = 16, 8 or 4, K <= 16, P = 128 in
    'fp8x2', 'per_call' (the device picks the lean kernel, at G = 8 or 4 the dense tile, or
    the stacked tile per call from how many pages consecutive queries share: pageweaver.h,
    PW_PLAN_FP8X2_STACKED; a grouping-independent choice whose bytes differ by ~2e-3 NRMS,
    both ~0.2% from exact; a call that runs the stacked tile regroups with g = 2, at G = 8
    with 4, at G = 4 with 8 as the dense tile, not "regroup_group_size": pageweaver.h,
    PW_PLAN_NO_REGROUP_BY_TILE), 'stacked' (the stacked tile always: the plan's flag, or
    per-token scales, where it measured faster than the other tile on every input: 'fp8x2'
    at G = 16, 8 and 4, and since 2026-12-04 'fp8' at G = 8 and 4, where the stacked tile's
    second term is 0 and its outputs are the dense tile's bytes; then "regroup_group_size"
    is the stacked tile's, 2 at G = 16, 4 at G = 8, 8 at G = 4; 'fp8' with per-token scales
    at G = 16 is 'per_call', the same bytes either way), else None (no such choice: the
    tile above runs). N = 0:
    {"kernel": ..., "tile": None} (nothing runs)."""
    _check_q(q)  # (before its shape is used below; check_args checks the rest)
    prec = _precision_code(precision)
    if prec in (_EXACT, _FP8X2_PREPASS):
        raise _lib.UnsupportedError("PW_ERROR_UNSUPPORTED", f"precision={precision!r} is the CPU "
                                    "reference only; the GPU runs 'fp8x2' (the default) and 'fp8'")
    mode = _enum("regroup", regroup, _lib.REGROUP_MODES, _lib.DEFAULT_REGROUP)
    kern = _enum("kernel", kernel, _lib.KERNELS, _lib.DEFAULT_KERNEL)
    scale = _softmax_scale_arg(softmax_scale)  # sparse_prefill's checks and errors
    max_rows = _max_seqlen_q_arg(max_seqlen_q)
    # A stand-in for out with the shape and row layout check_args wants, one row of storage.
    rows = q.shape[1] * q.shape[2]
    out = torch.empty(max(rows, 1), dtype=torch.bfloat16, device=q.device).as_strided(
        q.shape, (0, q.shape[2], 1))
    psize = _page_size_arg(page_size)
    n, r, hkv, g, d, k, max_pages, num_pages, kv_stride = check_args(
        q, k_cache, v_cache, topk_idx, page_table, cu_seqlens_q, kv_lens, prefix_lens,
        None, None, out, None, None, sinks, sink_keys, k_token_scales, v_token_scales, psize)
    _check_max_seqlen_q(max_rows, n, r)
    if (k_token_scales is not None or v_token_scales is not None) and kern == _lib.KERNELS["union8"]:
        raise _lib.UnsupportedError("PW_ERROR_UNSUPPORTED", "k_token_scales / v_token_scales: "
                                    "the Union8 kernel does not read per-token scales "
                                    "(kernel='union4', the default, and 'per_query' do)")
    if sink_keys is not None and (sink_keys.storage_offset() * sink_keys.element_size()) % 16:
        raise _lib.InvalidArgumentError("PW_ERROR_INVALID_ARGUMENT", "sink_keys: the GPU reads "
                                        "16-byte aligned rows; this view starts at byte offset "
                                        f"{sink_keys.storage_offset() * 2} of its storage")
    kernel_name = {v: name for name, v in _lib.KERNELS.items()}[kern]
    # The plan refuses unsupported shapes (G, D, P, K, kernel) at N = 0 too.
    plan = _lib.Plan(_problem(n, r, hkv, g, d, k, max_pages, num_pages, scale, psize), mode,
                     _window(_lib.DEFAULT_WINDOW), kern,
                     max_query_rows=_plan_max_rows(mode, max_rows))  # raises what the GPU would
    if n == 0:
        del plan
        return {"kernel": kernel_name, "regroup": "identity", "regroup_group_size": 0, "regroup_window": 0,
                "vt_prepass": False, "vt_capacity": 0, "tile": None, "fp8x2_tile": None}
    _check_gpu_layout(q, k_cache, v_cache, n, hkv * g, d, kv_stride, psize)
    info = plan.info(prec)
    del plan
    token_scales = k_token_scales is not None or v_token_scales is not None
    fp8 = prec == _lib.PRECISIONS["fp8"]
    # the dense tiles read per-token scales in 'fp8' only ('fp8x2' runs them on the stacked tile)
    tile = "g16" if g == 16 else "dense" if info.dense_tile and (fp8 or not token_scales) else "padded"
    modes = {v: name for name, v in _lib.REGROUP_MODES.items()}
    group_size = int(info.regroup_group_size)
    fp8x2_tile = {1: "per_call", 2: "stacked"}.get(int(info.fp8x2_stacked))
    if token_scales:
        # per-token scales: pw_plan_info's token_scales_stacked: the stacked tile always
        # ('fp8x2' at G = 16, 8, 4 and 'fp8' at G = 8, 4 by default, faster than the other
        # tile on every input measured), regrouped for it: g = 2 at G = 16, 4 at G = 8, 8 at
        # G = 4 (unless the plan keeps identity order); or per call ('fp8' at G = 16)
        fp8x2_tile = {1: "per_call", 2: "stacked"}.get(int(info.token_scales_stacked))
    if fp8x2_tile == "stacked" and token_scales:
        group_size = {16: 2, 8: 4, 4: 8}[g] if group_size else 0
    elif info.dense_tile and token_scales and group_size and not fp8:
        group_size = 4  # 'fp8x2' with per-token scales off the stacked tile: the padded tile (pw_sparse_prefill)
    regroups = info.regroup != _lib.REGROUP_MODES["identity"]
    return {"kernel": kernel_name, "regroup": modes.get(info.regroup, str(info.regroup)),
            "regroup_group_size": group_size, "regroup_window": int(info.window) if regroups else 0,
            "vt_prepass": bool(info.vt_prepass),
            "vt_capacity": int(info.vt_capacity), "tile": tile, "fp8x2_tile": fp8x2_tile}


def _bump(t):
    try:
        torch.autograd.graph.increment_version(t)
    except AttributeError:  # torch < 2.4
        pass
