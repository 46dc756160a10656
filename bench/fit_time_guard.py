#!/usr/bin/env python3
"""Refits the time guard of PW_REGROUP_AUTO (src/time_guard.c; the model is documented at
pw_plan_info in include/pageweaver.h) from `pageweaver bench --json` output. One command:

    python3 bench/fit_time_guard.py BENCH.json [MORE.json ...] --write src/time_guard_constants.h

Without --write it prints the fit and the per-capture check only. Standard library only.

What it fits (all times in us; rows = N * Hkv; windows = Hkv * (ceil(N / W) + R - 1)):
  S_exec(kernel, W128) = T_identity - T_fixed: least squares S = a * rows + b over the
      captures of at most --s-max-rows rows (default 20,000: where the decision is made;
      an unweighted line through 65K-row chunks predicted 2-3x the measured saving of
      1,024-row chunks, 2026-12-03), giving rate_ns_per_row = 1000 a and rows0 = -b / a
      (rate 0 when a <= 0: never pays).
      Union4 (the default kernel): gpu.default_kernel (interleaved replays); Union8: arms
      t0 and t_fixed_w128.
  W64: rate(W64) = rate(W128) x the median of (union-visit reduction at W64 / at W128)
      over the captures; rows0 as W128. Union4 from a run with `--union4-window 64` when
      one is given (its default_kernel figures are W64's: T_identity - T_fixed at the W64
      permutation), fitted as W128's; the model's W64 constants decide PW_WINDOW_AUTO's
      window (pw_time_guard_window), so refit both from one device call:
      `PW_SCALING_WINDOWS="128 64" scripts/gpu-check scaling13`.
  C_online(W128) = T_online - T_fixed of both kernels, captures whose
      max_pages_per_request <= 14,336 (the regroup's direct or long direct path; 2048 before
      2026-12-03, when past 2048 it took the hash path) and whose call runs without the
      V^T pre-pass (Union8 never runs it; Union4: default_plan.vt_prepass of the JSON, or,
      in files written before that field, fewer than 4,096 queries, which never ran it;
      since 2026-12-05 the 4,096-query 256K / 1M chunks run it too, so their Union4 points
      leave this fit, whose cost then rests on Union8's and the smaller chunks'):
      under capture the pre-pass is a graph branch beside the regroup and hides most of it
      (3-9 us instead of ~15 us), and the calls the guard decides on are small ones, which
      do not run it. Least squares C = fixed + per_window * windows. hash_factor: median of C / prediction over the
      captures past 14,336 pages. C_online(W64) = t_online_w64 - t0 + S_exec(W64, Union8)
      with S_exec(W64) scaled from W128 as above, and the W64 run's Union4 C_online where
      no pre-pass hides it; fitted the same way.
  fp8x2_factor: median of union4_w128_fp8x2 / union4_w128 (attention time ratio, taken as
      the ratio of the savings).
  margin_us: not fitted (--margin; default the --base header's, else 2.0).
Values it cannot fit (e.g. no capture past the direct bound) keep the defaults below,
which are the constants fitted to issue 13's table, or with --base HEADER the values of that
installed header (scaling13 passes src/time_guard_constants.h); the script says which.
  --self-test  checks the fit on synthetic data made from a known model."""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys

DEFAULTS = {
    "rate": [[4.96, 6.7], [4.96, 6.7]],   # [Union8, Union4][W64, W128] ns per row
    "rows0": [[2900.0, 2900.0], [2900.0, 2900.0]],
    "fp8x2_factor": 1.24,
    "fixed": [7.0, 11.3],                   # [W64, W128] us
    "per_window": [0.0245, 0.0245],
    "hash_factor": 2.4,
    "direct_max_pages": [4096, 2048],
    "long_max_pages": [28672, 14336],  # the K <= 16 regroup's long direct path (regroup.cu kLong, 2026-12-03)
    "margin": 2.0,
}
U8, U4 = 0, 1
PREPASS_MIN_QUERIES = 4096  # the pre-pass rule before 2026-12-05 (files written before default_plan.vt_prepass): fewer queries never ran it
W64, W128 = 0, 1


def linear_fit(xs, ys):
    """Least squares y = a x + b; (a, b), or (0, mean) when x does not vary."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return a, my - a * mx


def windows_of(p, w):
    n, r, h = p["num_tokens"], p["num_requests"], p["num_kv_heads"]
    return h * ((n + w - 1) // w + max(r - 1, 0))


def med_ms(arms, key):
    a = arms.get(key)
    return a["median_ms"] if a and a.get("ran") and "median_ms" in a else None


def points(docs):
    """One dict per capture with a GPU run: shapes and the measured figures (us)."""
    out = []
    for doc in docs:
        w64_run = doc.get("protocol", {}).get("union4_window", 0) == 64  # --union4-window 64
        if doc.get("protocol", {}).get("union4_window", 0) not in (0, 64, 128):
            print(f"fit_time_guard: skipped a run with union4_window {doc['protocol']['union4_window']} "
                  "(the model has W64 and W128)", file=sys.stderr)
            continue
        for c in doc.get("captures", []):
            g = c.get("gpu", {})
            if not g.get("ran"):
                continue
            p, arms = c["problem"], g.get("arms", {})
            if p.get("topk", 16) > 16:  # the K > 16 form has its own constants (time_guard_wide_constants.h)
                continue
            pt = {"path": c["path"], "rows": p["num_tokens"] * p["num_kv_heads"],
                  "w128": windows_of(p, 128), "w64": windows_of(p, 64),
                  "pages": p.get("max_pages_per_request", 0), "problem": p}
            # The model's rate is the FP8 one (FP8X2 calls scale it by fp8x2_factor): a group
            # timed in FP8X2 (the library's default arithmetic) is brought back to FP8 terms by
            # the capture's own Union4 FP8X2 / FP8 ratio (at W64 in a W64 run).
            # C_online (regroup + union preparation) does not depend on the arithmetic.
            u4, u4x2 = med_ms(arms, "union4_w128"), med_ms(arms, "union4_w128_fp8x2")
            if u4 and u4x2:
                pt["x2"] = u4x2 / u4
            dk = g.get("default_kernel")
            scale = pt.get("x2", DEFAULTS["fp8x2_factor"]) if dk and dk.get("precision") == "fp8x2" else 1.0
            if w64_run:  # its Union4 figures at W64; its Union8 arms are the W128 run's again
                if dk:
                    pt["w64_run"] = True
                    pt["s_u4_64"], pt["c_u4_64"] = dk["s_exec_us"] / scale, dk["c_online_us"]
                    pt["x2_scale"] = scale
                    pt["prepass"] = c.get("default_plan", {}).get("vt_prepass")
                    pt.pop("x2", None)  # the fp8x2_factor fit reads the W128 run's
                    out.append(pt)
                continue
            gr = c.get("groupings", {})
            r64, r128 = gr.get("guarded_w64", {}).get("reduction_pct"), gr.get("guarded_w128", {}).get("reduction_pct")
            pt["red_ratio"] = r64 / r128 if r64 is not None and r128 else None
            t0, tf, to, to64 = (med_ms(arms, k) for k in ("t0", "t_fixed_w128", "t_online_w128", "t_online_w64"))
            if None not in (t0, tf, to):
                pt["s_u8"], pt["c_u8"] = (t0 - tf) * 1e3, (to - tf) * 1e3
                if to64 is not None and pt["red_ratio"] is not None:
                    pt["c64"] = (to64 - t0) * 1e3 + pt["s_u8"] * pt["red_ratio"]
            if dk:
                pt["s_u4"], pt["c_u4"] = dk["s_exec_us"] / scale, dk["c_online_us"]
                pt["s_net_u4"] = dk["s_exec_us"] - pt["c_u4"]
                pt["x2_group"] = dk.get("precision") == "fp8x2"
                vt = c.get("default_plan", {}).get("vt_prepass")
                if vt is None:  # written before the field: only small chunks are known to run without it
                    vt = None if p["num_tokens"] >= PREPASS_MIN_QUERIES else False
                pt["prepass"] = vt
            out.append(pt)
    return out


def unhidden_cost(p, key):
    """Point p has the cost `key`, measured on a call whose regroup no pre-pass hides:
    Union8 never runs the pre-pass; Union4 only where it is known not to have run."""
    return key in p and (key not in ("c_u4", "c_u4_64") or p.get("prepass") is False)


BASE_FIELDS = (("rate", (2, 2)), ("rows0", (2, 2)), ("fp8x2_factor", ()), ("fixed", (2,)), ("per_window", (2,)),
               ("hash_factor", ()), ("direct_max_pages", (2,)), ("margin", ()), ("long_max_pages", (2,)))


def macro_numbers(text, macro, count):
    """The numbers of a header's `#define MACRO { ... }` initialiser, comments left out, in
    order; ValueError unless there are `count` of them."""
    found = re.search(r"#define\s+" + macro + r"\b(.*?)(?:#endif|\Z)", text, flags=re.S)
    if not found:
        raise ValueError(f"no {macro}")
    body = re.sub(r"/\*.*?\*/", " ", found.group(1), flags=re.S)
    nums = [float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", body)]
    if len(nums) != count:
        raise ValueError(f"{len(nums)} numbers in {macro}, expected {count}")
    return nums


def read_base(text):
    """The constants of an installed header (the PW_TIME_GUARD_FITTED initialiser, fields in
    BASE_FIELDS' order), as a model dict; ValueError when it does not have that shape."""
    nums = macro_numbers(text, "PW_TIME_GUARD_FITTED", sum(math.prod(shape) for _, shape in BASE_FIELDS))
    m, i = {}, 0
    for name, shape in BASE_FIELDS:
        if shape == ():
            m[name], i = nums[i], i + 1
        elif shape == (2,):
            m[name], i = nums[i:i + 2], i + 2
        else:
            m[name], i = [nums[i:i + 2], nums[i + 2:i + 4]], i + 4
    for key in ("direct_max_pages", "long_max_pages"):
        m[key] = [int(v) for v in m[key]]
    return m


def read_wide_base(text):
    """cost_us [K32, K64][W64, W128], saving_factor [W64, W128] and the K = 16 saving
    constants it multiplies (saving_rate [Union8, Union4][W64, W128], saving_rows0,
    saving_fp8x2_factor) of src/time_guard_wide_constants.h (the PW_TIME_GUARD_WIDE
    initialiser: cost_us, hash_cost_us, wave_windows, hash_wave_windows, saving_factor,
    saving_rate_ns_per_row, saving_rows0, saving_fp8x2_factor); ValueError when it does not
    have that shape (the 26-number form before the per-window factor is refused)."""
    nums = macro_numbers(text, "PW_TIME_GUARD_WIDE", 27)
    return {"cost": [nums[0:2], nums[2:4]], "saving_factor": nums[16:18],
            "saving_rate": [nums[18:20], nums[20:22]], "saving_rows0": [nums[22:24], nums[24:26]],
            "saving_fp8x2_factor": nums[26]}


def wide_factor(m, shapes_docs, wide):
    """The Top-K > 16 guard's saving factor against model m (src/time_guard_wide_constants.h's
    definition, thirteenth session): per capture of K > 16, precision and G, the attention
    time a W128 regroup saved, T(G<g>id) - T(G<g>greedy) + the wide regroup's cost (the
    header's cost_us: the greedy arm's call includes the regroup), over m's K = 16 saving for
    the same rows (Union4, W128, in that precision); the factor is the smallest ratio. Reads
    bench/shapes.py --json documents with the G16id / G16greedy (G8, G4) arms. With the W64
    arms (G16greedy64 ...) the same ratio at W64 (the header's W64 cost, m's W64 saving) gives
    W64's factor (its own minimum: since the forty-third session each window has a factor),
    and a line gives the measured W64 - W128 call time. Returns ([W64 factor or None, W128
    factor or None], report lines)."""
    groups, lines = {}, []
    wide_tables = set()
    for di, doc in enumerate(shapes_docs):  # each document's arms pair among themselves
        for r in doc.get("rows", []):
            mt = re.fullmatch(r"G(16|8|4)(id|greedy|greedy64)", r.get("arm", ""))
            if not mt or r.get("topk", 16) <= 16:
                continue
            if r.get("table_pages", 0) > 2048:  # the header's cost_us is the direct kernel's
                wide_tables.add((r["file"].rsplit("/", 1)[-1], r["table_pages"]))
                continue
            key = (r["file"].rsplit("/", 1)[-1], r["precision"], int(mt.group(1)), di)
            groups.setdefault(key, {"row": r})[mt.group(2)] = r["median_us"]
    lines += [f"{name} with a {tp}-column page table (shapes.py --table-pages): skipped, past W128's direct "
              "bound (the factor is taken with the direct kernel's cost)" for name, tp in sorted(wide_tables)]
    ratios = [[], []]
    for (name, prec, g, _), v in sorted(groups.items()):
        if "id" not in v or "greedy" not in v:
            continue
        r = v["row"]
        kd = 0 if r["topk"] <= 32 else 1
        saving = v["id"] - v["greedy"] + wide["cost"][kd][W128]
        rows = r["num_tokens"] * r["num_kv_heads"]
        s_model = predict(m, {"rows": rows, "w128": 0, "w64": 0, "pages": 0}, U4, W128, x2=prec == "fp8x2")[0]
        if s_model <= 0:
            lines.append(f"{name} {prec} G={g}: the K = 16 model saves nothing at {rows} rows; skipped")
            continue
        ratios[W128].append(saving / s_model)
        lines.append(f"{name} K={r['topk']} {prec} G={g}: saved {saving:.1f} us (identity {v['id']:.1f}, "
                     f"regrouped {v['greedy']:.1f}, regroup {wide['cost'][kd][W128]:.2f}) / model {s_model:.1f} us "
                     f"= {saving / s_model:.3f}")
        if "greedy64" in v:
            saving64 = v["id"] - v["greedy64"] + wide["cost"][kd][W64]
            s64 = predict(m, {"rows": rows, "w128": 0, "w64": 0, "pages": 0}, U4, W64, x2=prec == "fp8x2")[0]
            if s64 > 0:
                ratios[W64].append(saving64 / s64)
            lines.append(f"{name} K={r['topk']} {prec} G={g} W64: saved {saving64:.1f} us (regrouped "
                         f"{v['greedy64']:.1f}, regroup {wide['cost'][kd][W64]:.2f}) / model {s64:.1f} us = "
                         + (f"{saving64 / s64:.3f}" if s64 > 0 else "(model saves nothing)")
                         + f"; W64 - W128 measured {v['greedy64'] - v['greedy']:+.1f} us")
    return [min(x) if x else None for x in ratios], lines


def fit(pts, margin, s_max_rows=20000, base=None):
    """Fits the model to the points; what it cannot fit keeps base's value (DEFAULTS if None)."""
    m = json.loads(json.dumps(base or DEFAULTS))
    kept = "the base header's" if base else "the defaults"
    if margin is not None:
        m["margin"] = margin
    notes = []
    # S_exec (and the W64 / W128 reduction ratio) from one-request inputs only: the saving's
    # model has no R term (with requests of a few rows the saving falls towards 0, which
    # pw_plan_config_t.max_query_rows covers), so a batch of short requests would bend the
    # per-row rate; C_online counts R in its windows and takes every input.
    one = [p for p in pts if p["problem"].get("num_requests", 1) == 1]
    ratios = [p["red_ratio"] for p in one if p.get("red_ratio")]
    ratio = statistics.median(ratios) if ratios else None
    for k, key in ((U8, "s_u8"), (U4, "s_u4")):
        data = [(p["rows"], p[key]) for p in one if key in p and p["rows"] <= s_max_rows]
        name = "Union8" if k == U8 else "Union4"
        if len({x for x, _ in data}) < 2:
            notes.append(f"{name} S_exec: fewer than two sizes measured; kept {m['rate'][k][W128]} ns/row above "
                         f"{m['rows0'][k][W128]:.0f} rows")
            continue
        a, b = linear_fit([x for x, _ in data], [y for _, y in data])
        rate, rows0 = (a * 1000.0, -b / a) if a > 0 else (0.0, 0.0)
        m["rate"][k][W128], m["rows0"][k][W128] = rate, rows0
        base_rate = (base or DEFAULTS)["rate"][k]
        m["rate"][k][W64] = rate * ratio if ratio else rate * base_rate[W64] / base_rate[W128]
        m["rows0"][k][W64] = rows0
        if not ratio:
            notes.append(f"{name} W64 rate: no W64/W128 reduction ratio; scaled as {kept}")
    data = [(p["rows"], p["s_u4_64"]) for p in one if "s_u4_64" in p and p["rows"] <= s_max_rows]
    if len({x for x, _ in data}) >= 2:
        a, b = linear_fit([x for x, _ in data], [y for _, y in data])
        m["rate"][U4][W64], m["rows0"][U4][W64] = (a * 1000.0, -b / a) if a > 0 else (0.0, 0.0)
    elif any("s_u4_64" in p for p in pts):
        notes.append("Union4 W64 S_exec: fewer than two sizes in the W64 run; scaled from W128")
    for w, key, wkey in ((W128, ("c_u8", "c_u4"), "w128"), (W64, ("c64", "c_u4_64"), "w64")):
        bound = m["long_max_pages"][w]
        data = [(p[wkey], p[k]) for p in pts for k in key if unhidden_cost(p, k) and p["pages"] <= bound]
        if not data:
            notes.append(f"C_online W{64 if w == W64 else 128}: no direct-path data; kept {kept}")
            continue
        a, b = linear_fit([x for x, _ in data], [y for _, y in data])
        if a < 0:  # more windows never cost less: flat fit
            a, b = 0.0, sum(y for _, y in data) / len(data)
        m["fixed"][w], m["per_window"][w] = b, a
        if w == W128:
            hashed = [y / (b + a * x) for p in pts for k in key if unhidden_cost(p, k) and p["pages"] > bound
                      for x, y in [(p[wkey], p[k])] if b + a * x > 0]
            if hashed:
                m["hash_factor"] = max(1.0, statistics.median(hashed))
            else:
                notes.append(f"hash_factor: no capture past the long direct bound; kept {m['hash_factor']:.6g} ({kept})")
    x2 = [p["x2"] for p in pts if "x2" in p]
    if x2:
        m["fp8x2_factor"] = statistics.median(x2)
    else:
        notes.append(f"fp8x2_factor: no FP8X2 arms; kept {kept}")
    return m, notes


def predict(m, p, kernel, w=W128, x2=False):
    rows = p["rows"]
    s = m["rate"][kernel][w] * (m["fp8x2_factor"] if x2 else 1.0) * (rows - m["rows0"][kernel][w]) / 1000.0
    c = m["fixed"][w] + m["per_window"][w] * p["w128" if w == W128 else "w64"]
    if p["pages"] > m["long_max_pages"][w]:
        c *= m["hash_factor"]
    return s, c, s > c + m["margin"]


def header(m, sources, rows, notes=()):
    f = lambda v: f"{v:.6g}"  # noqa: E731
    pair = lambda v: "{" + ", ".join(f(x) for x in v) + "}"  # noqa: E731
    table = "\n".join(" *   " + r for r in rows)
    table += "".join("\n * Note: " + n for n in notes)
    return f"""/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check scaling13` runs the bench on the scaling set and the fit; bench/NOTES.md).
 * Captures of Top-K > 16 are skipped. The K > 16 form (src/time_guard_wide_constants.h)
 * multiplies its own copy of the K = 16 saving constants: a refit here leaves its choices
 * as they are; re-measure its factor against the new fit (--wide) and install both there.
 *
 * Written by bench/fit_time_guard.py on {datetime.date.today().isoformat()} from {", ".join(sources)}.
 * Per capture (measured / predicted, us; Union4 = the default kernel, W128, in the arithmetic its group ran):
{table}
 */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \\
    {{                                                                                       \\
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{{pair(m["rate"][U8])}, {pair(m["rate"][U4])}}}, \\
        /* rows0 */ {{{pair(m["rows0"][U8])}, {pair(m["rows0"][U4])}}},                       \\
        /* fp8x2_factor */ {f(m["fp8x2_factor"])},                                              \\
        /* fixed_us [W64, W128] */ {pair(m["fixed"])},                                          \\
        /* per_window_us */ {pair(m["per_window"])},                                            \\
        /* hash_factor */ {f(m["hash_factor"])},                                                \\
        /* direct_max_pages */ {{{m["direct_max_pages"][0]}, {m["direct_max_pages"][1]}}},     \\
        /* margin_us */ {f(m["margin"])},                                                       \\
        /* long_max_pages */ {{{m["long_max_pages"][0]}, {m["long_max_pages"][1]}}}            \\
    }}

#endif
"""


def report(m, pts):
    rows = []
    for p in pts:
        if p.get("w64_run"):
            s, c, _ = predict(m, p, U4, w=W64, x2=p["x2_scale"] != 1.0)
            name = p["path"].rsplit("/", 1)[-1]
            rows.append(f"{name} (Union4 W64 run): S {p['s_u4_64'] * p['x2_scale']:.1f}/{s:.1f}, "
                        f"C {p['c_u4_64']:.1f}/{c:.1f}")
            continue
        s, c, pays = predict(m, p, U4, x2=p.get("x2_group", False))
        meas = ""
        if "s_u4" in p:
            agree = (p["s_net_u4"] > 0) == pays
            s_meas = p["s_net_u4"] + p["c_u4"]  # in the group's own arithmetic, as the prediction
            meas = (f"S {s_meas:.1f}/{s:.1f}, C {p['c_u4']:.1f}/{c:.1f}, S_net {p['s_net_u4']:+.1f} -> "
                    f"{'regroup' if pays else 'identity'}{'' if agree else ' (DISAGREES with the sign of S_net)'}")
        else:
            meas = f"predicted S {s:.1f}, C {c:.1f} -> {'regroup' if pays else 'identity'}"
        name = p["path"].rsplit("/", 1)[-1]
        rows.append(f"{name}: N*Hkv {p['rows']}, {p['pages']} pages: {meas}")
    rows.append("Thresholds (Union4, W128, one request, one KV head; the fewest queries that regroup, "
                "page table within / past the long direct bound): " +
                ", ".join(f"{name} {threshold(m, x2, 504)} / {threshold(m, x2, 16384)}"
                          for name, x2 in (("FP8X2", True), ("FP8", False))))
    return rows


def threshold(m, x2, pages, limit=1 << 20):
    """The fewest queries for which the model regroups, or 'never'."""
    for n in range(1, limit):
        prob = {"num_tokens": n, "num_requests": 1, "num_kv_heads": 1}
        pt = {"rows": n, "w128": windows_of(prob, 128), "w64": windows_of(prob, 64), "pages": pages}
        if predict(m, pt, U4, x2=x2)[2]:
            return f"~{n:,}"
    return "never"


def flat(v):
    """A field of the model as a flat list of numbers."""
    return [x for row in v for x in (row if isinstance(row, list) else [row])] if isinstance(v, list) else [v]


def self_test():
    """Synthetic bench documents from a known model: the fit must give it back."""
    truth = json.loads(json.dumps(DEFAULTS))
    truth["rate"] = [[3.0, 4.0], [2.5, 5.0]]
    truth["rows0"] = [[2000.0, 2000.0], [3000.0, 3000.0]]
    truth["fixed"], truth["per_window"], truth["hash_factor"] = [6.0, 10.0], [0.0, 0.02], 2.0
    captures = []
    for n, pages in ((1024, 392), (4096, 416), (16384, 512), (65536, 896), (4096, 8192), (4096, 16384)):
        prob = {"num_tokens": n, "num_requests": 1, "num_kv_heads": 1, "max_pages_per_request": pages}
        pt = {"rows": n, "w128": windows_of(prob, 128), "w64": windows_of(prob, 64), "pages": pages}
        s8, c, _ = predict(truth, pt, U8)
        s4, _, _ = predict(truth, pt, U4)
        s8_64 = s8 * 0.75
        c64 = (truth["fixed"][W64] + truth["per_window"][W64] * pt["w64"]) * \
            (2.0 if pages > truth["long_max_pages"][W64] else 1.0)
        tf, tf4 = 1.0, 0.9  # ms
        arms = {"t0": tf + s8 / 1e3, "t_fixed_w128": tf, "t_online_w128": tf + c / 1e3,
                "t_online_w64": tf + s8 / 1e3 - s8_64 / 1e3 + c64 / 1e3, "union4_w128": tf4 + c / 1e3}
        arms["union4_w128_fp8x2"] = arms["union4_w128"] * 1.25
        captures.append({"path": f"synthetic_{n}_{pages}", "problem": prob,
                         "groupings": {"guarded_w64": {"reduction_pct": 7.5}, "guarded_w128": {"reduction_pct": 10.0}},
                         "gpu": {"ran": True, "arms": {k: {"ran": True, "median_ms": v} for k, v in arms.items()},
                                 "default_kernel": {"s_exec_us": s4, "c_online_us": c}}})
    # A call on the V^T pre-pass (the regroup mostly hidden: C far below the model) and a
    # 65K-row one off the model's line: neither may move the fit.
    # A file written before default_plan.vt_prepass (no field) at 4,096+ queries: unknown, so
    # its cost is left out too (vt None), within and past the direct bound.
    for n, pages, vt, s_scale, c_us in ((16384, 512, True, 1.0, 3.0), (65536, 512, False, 0.7, None),
                                        (16384, 16384, True, 1.0, 3.0), (8192, 512, None, 1.0, 4.0),
                                        (8192, 16384, None, 1.0, 4.0)):
        prob = {"num_tokens": n, "num_requests": 1, "num_kv_heads": 1, "max_pages_per_request": pages}
        pt = {"rows": n, "w128": windows_of(prob, 128), "w64": windows_of(prob, 64), "pages": pages}
        s4, c, _ = predict(truth, pt, U4)
        cap = {"path": f"synthetic_{n}_{pages}_vt{vt}", "problem": prob,
               "gpu": {"ran": True, "arms": {}, "default_kernel": {"s_exec_us": s4 * s_scale, "c_online_us": c_us or c}}}
        if vt is not None:
            cap["default_plan"] = {"vt_prepass": vt}
        captures.append(cap)
    # Batches of many short requests (no pre-pass): their cost is on the model's line (its
    # windows count R), their saving far below it (a request of a few rows leaves the regroup
    # little to choose): the cost joins the fit, the saving may not move the per-row rate.
    for n, r, pages in ((4096, 4096, 256), (4096, 512, 512)):
        prob = {"num_tokens": n, "num_requests": r, "num_kv_heads": 1, "max_pages_per_request": pages}
        pt = {"rows": n, "w128": windows_of(prob, 128), "w64": windows_of(prob, 64), "pages": pages}
        s4, c, _ = predict(truth, pt, U4)
        s8, c8, _ = predict(truth, pt, U8)
        tf = 1.0
        arms = {"t0": tf + 0.05 * s8 / 1e3, "t_fixed_w128": tf, "t_online_w128": tf + c8 / 1e3}
        captures.append({"path": f"synthetic_requests_{n}_{r}", "problem": prob, "default_plan": {"vt_prepass": False},
                         "groupings": {"guarded_w64": {"reduction_pct": 0.1}, "guarded_w128": {"reduction_pct": 1.0}},
                         "gpu": {"ran": True, "arms": {k: {"ran": True, "median_ms": v} for k, v in arms.items()},
                                 "default_kernel": {"s_exec_us": 0.05 * s4, "c_online_us": c}}})
    m, notes = fit(points([{"captures": captures}]), 2.0)
    close = lambda a, b: abs(a - b) <= 1e-6 * max(1.0, abs(b))  # noqa: E731
    ok = all(close(m["rate"][k][W128], truth["rate"][k][W128]) and close(m["rows0"][k][W128], truth["rows0"][k][W128])
             for k in (U8, U4))
    ok &= all(close(m["rate"][k][W64], truth["rate"][k][W128] * 0.75) for k in (U8, U4))
    ok &= close(m["fixed"][W128], 10.0) and close(m["per_window"][W128], 0.02) and close(m["hash_factor"], 2.0)
    ok &= close(m["fixed"][W64], 6.0) and close(m["per_window"][W64], 0.0) and close(m["fp8x2_factor"], 1.25)
    text = header(m, ["self-test"], report(m, points([{"captures": captures}])))
    ok &= "PW_TIME_GUARD_FITTED" in text and text.count("{") == text.count("}")
    # A --union4-window 64 run beside it: Union4's W64 saving is fitted from it directly,
    # and its costs (no pre-pass) join Union8's W64 ones; the pre-pass call's may not.
    truth["rate"][U4][W64], truth["rows0"][U4][W64] = 3.5, 2500.0
    w64_caps = []
    for n, pages, vt in ((1024, 392, False), (2048, 400, False), (3072, 408, False), (16384, 512, True)):
        prob = {"num_tokens": n, "num_requests": 1, "num_kv_heads": 1, "max_pages_per_request": pages}
        pt = {"rows": n, "w128": windows_of(prob, 128), "w64": windows_of(prob, 64), "pages": pages}
        s4, c64, _ = predict(truth, pt, U4, w=W64)
        w64_caps.append({"path": f"synthetic_w64_{n}", "problem": prob, "default_plan": {"vt_prepass": vt},
                         "gpu": {"ran": True, "arms": {}, "default_kernel": {"s_exec_us": s4,
                                                                             "c_online_us": 1.0 if vt else c64}}})
    docs = [{"captures": captures}, {"protocol": {"union4_window": 64}, "captures": w64_caps}]
    m2, _ = fit(points(docs), 2.0)
    ok &= close(m2["rate"][U4][W64], 3.5) and close(m2["rows0"][U4][W64], 2500.0)
    ok &= close(m2["rate"][U8][W64], truth["rate"][U8][W128] * 0.75)  # Union8: scaled as before
    ok &= close(m2["fixed"][W64], 6.0) and close(m2["per_window"][W64], 0.0)
    ok &= "Union4 W64 run" in header(m2, ["self-test"], report(m2, points(docs)))
    # --base: a written header reads back as its model, and what a fit cannot fit (here the
    # hash factor: no capture past the long direct bound) keeps the base's value.
    back = read_base(text)
    ok &= all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for k in m for x, y in zip(flat(back[k]), flat(m[k])))
    back["hash_factor"] = 3.25
    m3, notes3 = fit(points([{"captures": captures[:4]}]), 2.0, base=back)
    ok &= close(m3["hash_factor"], 3.25) and any("base header" in n for n in notes3)
    ok &= close(m3["fixed"][W128], 10.0)  # fitted values still come from the data
    # --wide: shapes.py rows whose savings are known multiples of the model's; the factor is
    # the smallest, and K = 16 rows or arms without a pair are ignored.
    wide = {"cost": [[10.0, 20.0], [15.0, 30.0]], "saving_factor": [0.5, 0.5]}
    shape_rows = []
    for name, k, g, prec, mult in (("a_k32", 32, 16, "fp8", 1.5), ("a_k32", 32, 4, "fp8", 0.6),
                                   ("a_k64", 64, 8, "fp8x2", 0.9), ("a_k16", 16, 4, "fp8", 0.1)):
        s_model = predict(m, {"rows": 15272, "w128": 0, "w64": 0, "pages": 0}, U4, W128, x2=prec == "fp8x2")[0]
        cost = wide["cost"][0 if k <= 32 else 1][W128]
        t_id = 1000.0
        for arm, t in ((f"G{g}id", t_id), (f"G{g}greedy", t_id - (mult * s_model - cost))):
            shape_rows.append({"file": f"x/{name}.safetensors", "num_tokens": 15272, "num_kv_heads": 1, "topk": k,
                               "page_size": 128, "q_heads_per_kv": g, "precision": prec, "arm": arm,
                               "median_us": t})
    shape_rows.append(dict(shape_rows[0], arm="G8id"))  # no G8greedy: ignored
    factor, wlines = wide_factor(m, [{"rows": shape_rows}], wide)
    ok &= factor[W64] is None and factor[W128] is not None and close(factor[W128], 0.6) and len(wlines) == 3
    # a W64 arm: its ratio (here 0.5 of the model's W64 saving) is W64's factor, W128's stays
    s64 = predict(m, {"rows": 15272, "w128": 0, "w64": 0, "pages": 0}, U4, W64)[0]
    shape_rows.append(dict(shape_rows[0], arm="G16greedy64", median_us=1000.0 - (0.5 * s64 - wide["cost"][0][W64])))
    factor, wlines = wide_factor(m, [{"rows": shape_rows}], wide)
    ok &= factor[W64] is not None and close(factor[W64], 0.5) and close(factor[W128], 0.6) and len(wlines) == 4
    ok &= any("W64 - W128 measured" in x for x in wlines)
    # two documents of the same captures (e.g. two devices): each pairs its own arms, and
    # the factor is the least over both (a later document does not replace an earlier one)
    other = [dict(r, median_us=r["median_us"] + (0.2 * s_model if r["arm"] == "G4greedy" else 0.0))
             for r in shape_rows if r["arm"] in ("G4id", "G4greedy")]  # a_k32 G4: 0.6 -> 0.4
    factor2, _ = wide_factor(m, [{"rows": shape_rows}, {"rows": other}], wide)
    factor3, _ = wide_factor(m, [{"rows": other}, {"rows": shape_rows}], wide)
    ok &= close(factor2[W128], 0.4) and close(factor3[W128], 0.4) and close(factor2[W64], 0.5)
    widened = [dict(r, table_pages=3000, median_us=r["median_us"] + (0.5 * s_model if r["arm"] == "G4greedy" else 0.0))
               for r in other]  # would give 0.1 if read
    factor4, wl4 = wide_factor(m, [{"rows": shape_rows}, {"rows": widened}], wide)
    ok &= close(factor4[W128], 0.6) and any("3000-column page table" in x for x in wl4)
    wtext = ("#define PW_TIME_GUARD_WIDE { /* cost_us */ {{13.02, 21.20}, {19.14, 30.74}}, {{1, 2}, {3, 4}}, "
             "{{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}, /* saving_factor */ {0.465, 0.823}, {{4.38, 5.85}, {4.74, 6.33}}, "
             "{{2550.7, 2550.7}, {376.2, 376.2}}, 1.2566 }\n#endif\n")
    wb = read_wide_base(wtext)
    ok &= wb["cost"] == [[13.02, 21.20], [19.14, 30.74]] and wb["saving_factor"] == [0.465, 0.823]
    ok &= wb["saving_rate"] == [[4.38, 5.85], [4.74, 6.33]] and wb["saving_rows0"][U4] == [376.2, 376.2]
    ok &= close(wb["saving_fp8x2_factor"], 1.2566)
    for old in (wtext.replace(", {{4.38, 5.85}, {4.74, 6.33}}, {{2550.7, 2550.7}, {376.2, 376.2}}, 1.2566", ""),
                wtext.replace("{0.465, 0.823}", "0.584")):
        try:  # the shapes before 2026-12-05 (17 numbers) and before the per-window factor (26) are refused
            read_wide_base(old)
            ok = False
        except ValueError:
            pass
    # The installed header parses (the --base that scaling13 passes).
    installed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "time_guard_constants.h")
    if os.path.exists(installed):
        with open(installed) as fh:
            inst = read_base(fh.read())
        ok &= all(v > 0 for v in flat(inst["long_max_pages"]) + flat(inst["direct_max_pages"])) and inst["margin"] >= 0
    installed_wide = os.path.join(os.path.dirname(installed), "time_guard_wide_constants.h")
    if os.path.exists(installed_wide):
        with open(installed_wide) as fh:
            ok &= all(f > 0 for f in read_wide_base(fh.read())["saving_factor"])
    print("fit_time_guard self-test:", "ok" if ok else "FAILED", json.dumps(m), notes)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="*")
    ap.add_argument("--write", metavar="HEADER", help="write the constants header (src/time_guard_constants.h)")
    ap.add_argument("--base", metavar="HEADER",
                    help="an installed constants header: what the fit cannot fit keeps its values, not the defaults")
    ap.add_argument("--wide", metavar="SHAPES_JSON", nargs="+",
                    help="bench/shapes.py --json runs of the K = 32 / 64 captures (arms G16id,G16greedy,G8id,"
                         "G8greedy,G4id,G4greedy for W128, and G16greedy64,G8greedy64,G4greedy64 for W64): print "
                         "the Top-K > 16 saving factor of each window against the fitted model (the least ratio "
                         "over every document; arms pair within a document)")
    ap.add_argument("--wide-base", metavar="HEADER", default=None,
                    help="the wide constants header (default src/time_guard_wide_constants.h next to this script)")
    ap.add_argument("--margin", type=float, default=None,
                    help="margin_us (not fitted): default the base header's, else %g" % DEFAULTS["margin"])
    ap.add_argument("--s-max-rows", type=int, default=20000,
                    help="fit the saving over captures of at most this many rows (N * Hkv)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.json:
        ap.error("no bench JSON given")
    docs = []
    for path in a.json:
        with open(path) as fh:
            docs.append(json.load(fh))
    pts = points(docs)
    if not pts:
        sys.exit("fit_time_guard: no capture with GPU timings in " + ", ".join(a.json))
    base = None
    if a.base:
        with open(a.base) as fh:
            try:
                base = read_base(fh.read())
            except ValueError as e:
                sys.exit(f"fit_time_guard: --base {a.base}: {e}")
    m, notes = fit(pts, a.margin, a.s_max_rows, base)
    rows = report(m, pts)
    print("fitted:", json.dumps(m))
    for n in notes:
        print("note:", n)
    for r in rows:
        print(r)
    if a.wide:
        wide_path = a.wide_base or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src",
                                                "time_guard_wide_constants.h")
        with open(wide_path) as fh:
            try:
                wide = read_wide_base(fh.read())
            except ValueError as e:
                sys.exit(f"fit_time_guard: {wide_path}: {e}")
        shapes_docs = []
        for path in a.wide:
            with open(path) as fh:
                shapes_docs.append(json.load(fh))
        factor, lines = wide_factor(m, shapes_docs, wide)
        for line in lines:
            print("wide:", line)
        if factor[W128] is None:  # (W64's ratio needs the same capture's W128 pair)
            print("wide: no K > 16 capture with both an id and a greedy arm; no factor")
        else:
            def fmt(f):
                return "none (no arm at this window)" if f is None else f"{f:.3f}"
            print(f"wide saving_factor against this fit: W64 {fmt(factor[W64])}, W128 {fmt(factor[W128])} "
                  f"(installed {json.dumps(wide['saving_factor'])} against its own K = 16 saving constants, rate "
                  f"{json.dumps(wide['saving_rate'])}, rows0 {json.dumps(wide['saving_rows0'])}, FP8X2 "
                  f"{wide['saving_fp8x2_factor']:g})")
            print("wide: to install, set src/time_guard_wide_constants.h by hand: saving_factor "
                  f"{{{fmt(factor[W64])}, {fmt(factor[W128])}}}, saving_rate_ns_per_row {json.dumps(m['rate'])}, "
                  f"saving_rows0 {json.dumps(m['rows0'])}, saving_fp8x2_factor {m['fp8x2_factor']:.6g} (this fit's)")
    if a.write:
        with open(a.write, "w") as fh:
            fh.write(header(m, [p.rsplit("/", 1)[-1] for p in a.json], rows, notes))
        print("wrote", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
