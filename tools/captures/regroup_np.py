"""CALIBRATION TOOL ONLY: a small numpy model of docs/semantics.md §1-§3 (support sets, Query Union
statistics, Algorithm 1 online regroup) used to calibrate the synthetic generator and
to tabulate the shipped captures. The product's reference is src/ref_regroup.c
(pw_ref_regroup) and its CLI `pageweaver stats`; this file is checked against it
(tools/captures/test_captures.py compares both when the CLI is built) and never used by
the library.

Definitions (docs/semantics.md): S_i = distinct ids p of row i with 0 <= p <= min(c_i, L_i - 1) // P;
identity groups = consecutive runs of g=8 queries inside a request; regroup = per window
of W queries (windows start at each request's first query, never cross requests),
greedy: seed = smallest unassigned id, then argmin over unassigned j of
(|S_j \\ U|, j), group closes at g members. Union visits = sum over groups of |U_G|;
rho_Q = sum_i |S_i| / union visits.
"""
import numpy as np

GROUP = 8


def support_sets(topk, cu_seqlens_q, prefix_lens, kv_lens, page):
    """topk [N, K] (one KV head) -> list of sorted unique int arrays S_i (docs/semantics.md §1)."""
    n = topk.shape[0]
    limit = np.empty(n, np.int64)
    for r in range(len(prefix_lens)):
        a, b = int(cu_seqlens_q[r]), int(cu_seqlens_q[r + 1])
        c = int(prefix_lens[r]) + np.arange(b - a, dtype=np.int64)
        limit[a:b] = np.minimum(c, int(kv_lens[r]) - 1) // page
    t = topk.astype(np.int64)
    valid = (t >= 0) & (t <= limit[:, None])
    return [np.unique(t[i][valid[i]]) for i in range(n)]


def _greedy_window(sets, g=GROUP):
    """Algorithm 1 inside one window; sets: list of id arrays. Returns (perm, unions)."""
    w = len(sets)
    if w == 0:
        return [], []
    allp = np.unique(np.concatenate(sets)) if any(len(s) for s in sets) else np.zeros(0, int)
    m = np.zeros((w, len(allp)), bool)
    for j, s in enumerate(sets):
        m[j, np.searchsorted(allp, s)] = True
    left = np.ones(w, bool)
    perm, unions = [], []
    while left.any():
        seed = int(np.argmax(left))  # smallest unassigned id
        u = m[seed].copy()
        left[seed] = False
        members = [seed]
        while len(members) < g and left.any():
            cost = (m & ~u).sum(1)
            cost = np.where(left, cost, np.iinfo(np.int64).max)
            j = int(np.argmin(cost))  # ties: argmin returns the lowest id
            members.append(j)
            left[j] = False
            u |= m[j]
        perm += members
        unions.append(int(u.sum()))
    return perm, unions


def union_visits(sets, cu_seqlens_q, window=None, g=GROUP):
    """Sum of group union sizes: identity grouping (window None) or Algorithm 1 with
    windows of `window` queries."""
    total = 0
    for r in range(len(cu_seqlens_q) - 1):
        a, b = int(cu_seqlens_q[r]), int(cu_seqlens_q[r + 1])
        if window is None:
            for s in range(a, b, g):
                grp = sets[s:min(b, s + g)]
                total += len(np.unique(np.concatenate(grp))) if grp else 0
        else:
            for s in range(a, b, window):
                total += sum(_greedy_window(sets[s:min(b, s + window)], g)[1])
    return total


def capture_stats(topk_ids, cu_seqlens_q, prefix_lens, kv_lens, page=128):
    """Statistics of one capture over all KV heads (sums over heads):
    dict with queries, selected (sum |S_i|), groups, identity, w64, w128 union visits,
    rho_identity, rho_w128, reduction_w64/w128 (fraction), union8_mean."""
    hkv = topk_ids.shape[0]
    out = dict(queries=0, selected=0, groups=0, identity=0, w64=0, w128=0)
    cu = np.asarray(cu_seqlens_q)
    for h in range(hkv):
        sets = support_sets(np.asarray(topk_ids[h]), cu, prefix_lens, kv_lens, page)
        out["queries"] += len(sets)
        out["selected"] += int(sum(len(s) for s in sets))
        out["groups"] += int(sum(-(-(int(cu[r + 1]) - int(cu[r])) // GROUP)
                                 for r in range(len(cu) - 1)))
        out["identity"] += union_visits(sets, cu)
        out["w64"] += union_visits(sets, cu, 64)
        out["w128"] += union_visits(sets, cu, 128)
    out["rho_identity"] = out["selected"] / max(1, out["identity"])
    out["rho_w128"] = out["selected"] / max(1, out["w128"])
    out["reduction_w64"] = 1 - out["w64"] / max(1, out["identity"])
    out["reduction_w128"] = 1 - out["w128"] / max(1, out["identity"])
    out["union8_mean"] = out["identity"] / max(1, out["groups"])
    return out
