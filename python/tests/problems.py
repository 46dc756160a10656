"""Random packed sparse-prefill problems and an INDEPENDENT float64 implementation of the
semantics (docs: the page / visibility rules in include/pageweaver.h and README), written
from the rules, not from the C reference:

  row n of request r, causal position c = prefix[r] + n - cu[r], KV length L = kv_lens[r];
  S = distinct ids p of its Top-K row with 0 <= p <= min(c, L - 1) // 128;
  visible tokens A = {t : t // 128 in S, t < L, t <= c}, token t of logical page p in slot
  page_table[r][p] * 128 + t % 128; a physical page outside the cache contributes nothing
  and is counted once per (row, KV head, page);
  o = softmax(scale * q . k_t) v_t over A per Q head (Q head h uses KV head h // G); empty
  A: o = 0, LSE = -inf.
"""
import math

import torch

P = 128
E4M3_NAN = 0x7F  # a NaN code: put in every cache byte no query may see


def random_problem(gen, *, hkv=1, g=16, d=128, k=16, max_requests=3, max_qlen=40,
                   max_prefix=300, bad_pages=True, page=P):
    """CPU tensors of one random problem (dict), generated from torch.Generator gen, with
    pages of `page` tokens (pass page_size=page to the op when it is not 128)."""
    def rint(lo, hi):  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    r = rint(1, max_requests)
    qlens = [rint(0, max_qlen) for _ in range(r)]
    if sum(qlens) == 0:
        qlens[0] = 1
    prefix = [rint(0, max_prefix) for _ in range(r)]
    kv = [prefix[i] + qlens[i] + rint(0, 20) for i in range(r)]
    max_pages = max(-(-x // page) for x in kv) + rint(0, 2)
    num_pages = r * max_pages + rint(1, 3)
    perm = torch.randperm(num_pages, generator=gen)
    table = perm[: r * max_pages].view(r, max_pages).to(torch.int32).clone()
    if bad_pages:  # a few entries outside the cache (an input error the kernel counts)
        for _ in range(rint(0, 2)):
            table[rint(0, r - 1), rint(0, max_pages - 1)] = rint(num_pages, num_pages + 5)
        if rint(0, 1):
            table[rint(0, r - 1), rint(0, max_pages - 1)] = -rint(1, 3)
    cu = [0]
    for x in qlens:
        cu.append(cu[-1] + x)
    n = cu[-1]
    # Top-K ids: mostly valid pages, with duplicates, -1 padding, future and past-KV ids.
    topk = torch.randint(-2, max_pages + 3, (hkv, n, k), generator=gen, dtype=torch.int32)
    pad = torch.rand((hkv, n, k), generator=gen) < 0.2
    topk[pad] = -1
    q = torch.randn((n, hkv * g, d), generator=gen).to(torch.bfloat16)
    # Caches: NaN codes everywhere, real values only in the slots of tokens t < L.
    kc = torch.full((num_pages * page, hkv, d), E4M3_NAN, dtype=torch.uint8)
    vc = kc.clone()
    for i in range(r):
        for t in range(kv[i]):
            phys = int(table[i, t // page])
            if 0 <= phys < num_pages:
                s = phys * page + t % page
                kc[s] = (torch.randn((hkv, d), generator=gen) * 64).to(torch.float8_e4m3fn).view(torch.uint8)
                vc[s] = (torch.randn((hkv, d), generator=gen) * 64).to(torch.float8_e4m3fn).view(torch.uint8)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return dict(q=q, k_cache=kc.view(torch.float8_e4m3fn), v_cache=vc.view(torch.float8_e4m3fn),
                topk_idx=topk, page_table=table, cu_seqlens_q=i32(cu), kv_lens=i32(kv),
                prefix_lens=i32(prefix), k_scale=1.0 / 64, v_scale=1.0 / 64)


def op_args(p):
    """The positional arguments of pageweaver.sparse_prefill, in order."""
    return (p["q"], p["k_cache"], p["v_cache"], p["topk_idx"], p["page_table"],
            p["cu_seqlens_q"], p["kv_lens"], p["prefix_lens"])


def reference(p, softmax_scale=None, sinks=None, sink_keys=None, k_token_scales=None,
              v_token_scales=None):
    """(o [N, Hq, D] float64, lse [N, Hq] float64, bad page count) by the rules above.
    sinks: optional [Hq] logits: exp(sinks[h]) joins each row's denominator (a row with no
    visible token: o = 0, LSE = sinks[h]). sink_keys: optional [Hq, D]: the row's logit is
    scale * (q[n, h] . key[h]) in float64, rounded to float32 once. k_token_scales /
    v_token_scales: optional [Hkv, slots]: real K of (slot s, head h) = k_scale *
    k_token_scales[h, s] * e4m3 (V likewise)."""
    q, kc, vc = p["q"], p["k_cache"], p["v_cache"]
    n_rows, hq, d = q.shape
    hkv = kc.shape[1]
    g = hq // hkv
    num_pages = kc.shape[0] // P
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    scale = float(torch.tensor(scale, dtype=torch.float32))  # the API's scale is a float32
    kf = kc.to(torch.float32).to(torch.float64) * float(p["k_scale"])
    vf = vc.to(torch.float32).to(torch.float64) * float(p["v_scale"])
    slots_all = kc.shape[0]
    if k_token_scales is not None:
        kf = kf * k_token_scales[:, :slots_all].T.to(torch.float64).unsqueeze(-1)
    if v_token_scales is not None:
        vf = vf * v_token_scales[:, :slots_all].T.to(torch.float64).unsqueeze(-1)
    cu, kv, pre, table = (p["cu_seqlens_q"].tolist(), p["kv_lens"].tolist(),
                          p["prefix_lens"].tolist(), p["page_table"].tolist())
    o = torch.zeros((n_rows, hq, d), dtype=torch.float64)
    lse = torch.full((n_rows, hq), -math.inf, dtype=torch.float64)
    if sink_keys is not None:
        skr = (q.to(torch.float64) * sink_keys.to(torch.float64)).sum(-1) * scale  # [N, Hq]
        skr = skr.to(torch.float32).to(torch.float64)
    else:
        sk = sinks.to(torch.float64) if sinks is not None else torch.full((hq,), -math.inf, dtype=torch.float64)
        skr = sk.expand(n_rows, hq)
    if sinks is not None or sink_keys is not None:
        lse[:] = skr  # rows with no visible token keep it
    bad = 0
    for r in range(len(pre)):
        for n in range(cu[r], cu[r + 1]):
            c = pre[r] + n - cu[r]
            last = min(c, kv[r] - 1)
            for h in range(hkv):
                pages = sorted({int(x) for x in p["topk_idx"][h, n] if 0 <= x <= last // P})
                slots = []
                for page in pages:
                    phys = table[r][page]
                    if not 0 <= phys < num_pages:
                        bad += 1
                        continue
                    slots += [phys * P + t % P for t in range(page * P, min((page + 1) * P, last + 1))]
                if not slots:
                    continue
                idx = torch.tensor(slots)
                kk, vv = kf[idx, h], vf[idx, h]
                qh = q[n, h * g:(h + 1) * g].to(torch.float64)
                x = qh @ kk.T * scale
                sink = skr[n, h * g:(h + 1) * g].unsqueeze(1)
                m = torch.maximum(x.max(dim=1, keepdim=True).values, sink)
                e = torch.exp(x - m)
                s = e.sum(dim=1, keepdim=True) + torch.exp(sink - m)
                o[n, h * g:(h + 1) * g] = (e @ vv) / s
                lse[n, h * g:(h + 1) * g] = (m + torch.log(s)).squeeze(1)
    return o, lse, bad


def nrms(a, b):
    """||a - b|| / ||b|| over all elements (float64)."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    den = b.norm()
    return float((a - b).norm() / den) if den > 0 else float((a - b).norm())
