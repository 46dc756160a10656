"""Quest page selection (Tang et al., "Quest: Query-Aware Sparsity for Efficient
Long-Context LLM Inference", ICML 2024) for one layer's post-RoPE Q and K.

Per KV head h and page p (P tokens), the page's key bounds are the elementwise
min and max of its keys; Quest's upper bound of q . k over the page is

    score(q, p) = sum_d max(q_d * kmin_d, q_d * kmax_d)
                = max(q, 0) . kmax + min(q, 0) . kmin          (two matmuls)

Choices made here (documented in docs/captures.md):
- GQA aggregation: a KV head's page score is the MAX of the scores of its query heads
  (a page is worth loading if any head sharing the KV head bounds high on it).
- The query's own (partial) page is always selected, as MoBA and serving engines do
  (a query always sees its local page), so its partial bounds never decide; the other
  eligible pages lie wholly at or before the query. No future key influences a selection.
- Causal rule: only pages 0 .. c // P are eligible (c = query position).
- Top-K by score, ties to the lower page id; the row holds min(K, c//P + 1) ids sorted
  ascending, right-padded with -1.
"""
import numpy as np


def quest_topk(q, k, q0, page=128, topk=16, block=2048):
    """q: [N, H, D] queries at positions q0 .. q0+N-1; k: [L, Hkv, D] keys at positions
    0 .. L-1 with L >= q0 + N. Returns int32 [Hkv, N, topk]."""
    N, H, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    L = q0 + N
    npages = -(-L // page)
    kp = np.zeros((npages * page, Hkv, D), np.float32)
    kp[:L] = k[:L]
    kp = kp.reshape(npages, page, Hkv, D)
    kmin = kp.min(axis=1)
    kmax = kp.max(axis=1)
    if L % page:  # last page partial: bounds over its real keys only
        tail = k[(npages - 1) * page:L]
        kmin[-1] = tail.min(axis=0)
        kmax[-1] = tail.max(axis=0)

    out = np.full((Hkv, N, topk), -1, np.int32)
    ids = np.arange(npages)
    for b0 in range(0, N, block):
        b1 = min(N, b0 + block)
        pos = q0 + np.arange(b0, b1)
        cp = pos // page
        for h in range(Hkv):
            best = None
            for g in range(G):
                qg = q[b0:b1, h * G + g, :]
                qp = np.maximum(qg, 0.0)
                qn = np.minimum(qg, 0.0)
                s = qp @ kmax[:, h, :].T + qn @ kmin[:, h, :].T  # [nb, npages]
                best = s if best is None else np.maximum(best, s)
            rows = np.arange(b1 - b0)
            best[rows, cp] = np.inf  # the own page is always selected
            best[ids[None, :] > cp[:, None]] = -np.inf
            # stable sort of -score: equal scores keep ascending page order
            order = np.argsort(-best, axis=1, kind="stable")[:, :topk]
            want = np.minimum(cp + 1, topk)
            sel = np.where(np.arange(topk)[None, :] < want[:, None], order, npages + 1)
            sel = np.sort(sel, axis=1)
            sel[sel > npages] = -1
            out[h, b0:b1] = sel
    return out
