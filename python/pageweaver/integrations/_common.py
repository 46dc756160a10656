"""Argument conversions the engine adapters share."""
import contextlib
import re

import torch

from .._op import host_int as as_int  # value as an int (any integer type but bool), else None


_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def i32(name, t):
    """An engine's int32 / int64 index tensor as int32, contiguous (no copy when it already
    is int32 and contiguous). int64 values outside int32 saturate to -2^31 / 2^31 - 1 (on
    the tensor's device, no synchronisation) instead of wrapping: every index field reads
    those as out of range (a Top-K id past any context or below 0 is ignored, a physical
    page outside the cache is a bad page, a length that large is refused), where a wrapped
    value could land on a real page. TypeError naming `name` for other dtypes."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: dtype {t.dtype}, expected an integer tensor (int32 / int64)")
    if t.dtype == torch.int64:
        t = t.clamp(_I32_MIN, _I32_MAX)
    return t.to(torch.int32).contiguous()


def host_float(name, x):
    """A scalar an adapter folds into the softmax scale on the host: a CPU tensor of one
    element as a Python float, anything else as given. A device tensor is refused
    (TypeError naming `name`): reading it would synchronise the stream."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.device.type != "cpu" or x.numel() != 1:
        raise TypeError(f"{name}: a {x.device.type} tensor of {x.numel()} elements; pass a "
                        f"Python float (reading a device tensor would synchronise the stream)")
    return float(x)


def max_rows_hint(value):
    """An engine's max_seqlen_q / max_query_len for sparse_prefill(max_seqlen_q=): a host
    int >= 0 (any integer type but bool) as it is, anything else (None, a tensor, which
    would take a host read) as None, "not known". Never raises itself; sparse_prefill
    refuses a value the batch contradicts (N > R x value: some request is longer)."""
    v = None if isinstance(value, torch.Tensor) else as_int(value)
    return v if v is not None and v >= 0 else None


def scale_kwargs(k_scale, v_scale, hkv=None, slots=None):
    """An engine's k_scale / v_scale as pageweaver.sparse_prefill keywords: None (1.0), a
    float or a one-element tensor go to k_scale / v_scale (float32); a 2-D tensor holds
    per-token scales [Hkv, slots] (float32, converted otherwise) and goes to
    k_token_scales / v_token_scales with the per-tensor scale 1.0, both given one stride
    pair (made contiguous when theirs differ). hkv / slots, when known, are checked here
    so that the error names the engine's argument. ValueError naming it otherwise."""
    kw = {}
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        tok = None
        if s is None:
            val = 1.0
        elif not isinstance(s, torch.Tensor):
            try:
                val = float(s)
            except (TypeError, ValueError):
                raise TypeError(f"{name}: {type(s).__name__} {s!r}: expected None, a float, a "
                                f"one-element tensor or per-token scales [Hkv, slots]") from None
        elif s.numel() == 1:
            val = s.reshape(1) if s.dtype == torch.float32 else s.float().reshape(1)
        elif s.dim() != 2 or (hkv is not None and (s.shape[0] != hkv or s.shape[1] < slots)):
            want = f"[{hkv}, >= {slots}]" if hkv is not None else "[Hkv, slots]"
            raise ValueError(f"{name}: shape {list(s.shape)}: expected one element or per-token "
                             f"scales {want} (num_kv_heads, cache slots)")
        else:
            val, tok = 1.0, s if s.dtype == torch.float32 else s.float()
        kw[name] = val
        kw[name[0] + "_token_scales"] = tok
    k_tok, v_tok = kw["k_token_scales"], kw["v_token_scales"]
    if k_tok is not None and v_tok is not None and k_tok.stride() != v_tok.stride():
        kw["k_token_scales"], kw["v_token_scales"] = k_tok.contiguous(), v_tok.contiguous()
    return kw


_LEADING_NAME = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)")


@contextlib.contextmanager
def engine_names(names, hints=()):
    """Errors of the pageweaver.sparse_prefill call inside, in the engine's words (eager
    calls; under torch.compile they keep sparse_prefill's names): a
    ValueError / TypeError (pageweaver's own errors included) whose message starts with one
    of sparse_prefill's parameter names (its messages name the argument first: "kv_lens:
    shape [1], expected [2]", "max_seqlen_q is 2, ...") gets the engine's name from `names`
    ({pageweaver name: engine name}) in its place, the same exception otherwise (type,
    other arguments, traceback). Only the leading name is replaced: the rest of a message
    may use the same words as prose, except the (old, new) phrases of `hints`, replaced
    wherever they occur (sparse_prefill's advice that names its own keywords)."""
    try:
        yield
    except (ValueError, TypeError) as e:
        # Under torch.compile the exception is left as it is: Dynamo cannot trace an
        # assignment to e.args, and its error would then hide the message (a review,
        # 2026-12-06); the errors of the op's fake implementation never reach here anyway.
        if torch.compiler.is_compiling():
            raise
        if e.args and isinstance(e.args[0], str):
            msg = e.args[0]
            for old, new in hints:
                msg = msg.replace(old, new)
            m = _LEADING_NAME.match(msg)
            if m and m.group(1) in names:
                msg = names[m.group(1)] + msg[m.end():]
            e.args = (msg,) + e.args[1:]
        raise
