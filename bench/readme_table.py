#!/usr/bin/env python3
"""readme_table.py — the README's benchmark tables from a `pageweaver bench --json` file.

    python3 bench/readme_table.py bench.json > table.md

Prints two Markdown tables: the arms of the first capture (the headline shape, A-hot when
the sweep starts with it) and one row per capture (union visits, T0, T_online W128,
T0/T_online, C_online, Union4, per-query, NRMS of the GPU output against the exact FP64
reference). Times in ms, medians of the graph replays; definitions in docs/bench.md.
"""
import json
import os
import sys


def ms(arm):
    return f"{arm['median_ms']:.3f}" if arm and arm.get("ran") else "-"


def ratio(arm):
    return f"{arm['time_over_floor']:.2f}" if arm and arm.get("ran") and "time_over_floor" in arm else ""


def headline(cap):
    arms, der = cap["gpu"]["arms"], cap["gpu"]["derived"]
    t = arms["t_online_w128"]["median_ms"]
    rows = [
        ("T0: Union8, identity order", arms["t0"], ""),
        ("T_fixed: Union8, precomputed W128 permutation", arms["t_fixed_w128"],
         f"S_exec = {der['s_exec_us']:.0f} us"),
        ("**T_online: Union8 + guarded W128 regroup in the call**", arms["t_online_w128"],
         f"C_online {der['c_online_w128_us']:.1f} us, S_net {der['s_net_w128_us']:.0f} us, "
         f"T0/T_online {der['t0_over_t_online_w128']:.3f} (paper 1.045)"),
        ("T_online, guarded W64", arms["t_online_w64"], f"C_online {der['c_online_w64_us']:.1f} us "
         "(includes W64's different attention work)"),
        ("**Union4 + guarded W128 regroup (the library default)**", arms["union4_w128"],
         f"{t / arms['union4_w128']['median_ms']:.2f}x faster than Union8 (paper: Union8 1.075x faster)"),
        ("per-query kernel (SGLang-native design, same arithmetic)", arms["per_query"],
         f"{der['per_query_over_union8_online_w128']:.2f}x Union8 T_online, "
         f"{arms['per_query']['median_ms'] / arms['union4_w128']['median_ms']:.2f}x Union4 "
         "(paper vs SGLang native 2.66x)"),
    ]
    out = ["| arm | ms | time / floor | note |", "| --- | --- | --- | --- |"]
    for name, arm, note in rows:
        out.append(f"| {name} | {ms(arm)} | {ratio(arm)} | {note} |")
    off = " / ".join(ms(arms[k]) for k in ("fixed_random", "fixed_w512", "fixed_w2048"))
    out.append(f"| offline random permutation / greedy W512 / W2048 (exec only) | {off} | | "
               "paper 1.832 / 1.234 / 1.185 |")
    return "\n".join(out)


def per_capture(caps):
    out = ["| capture | rho_Q id | visits id -> W128 | T0 | T_online W128 | T0/T_online | "
           "C_online W128 (us) | Union4 W128 | per-query | per-query / Union4 | NRMS |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cap in caps:
        g, gpu = cap["groupings"], cap["gpu"]
        arms, der = gpu["arms"], gpu["derived"]
        name = os.path.basename(cap["path"]).replace(".safetensors", "")
        vi, vw = g["identity"]["union_visits"], g["guarded_w128"]["union_visits"]
        nrms = cap.get("reference_check", {}).get("nrms_gpu_vs_exact")
        pq_u4 = arms["per_query"]["median_ms"] / arms["union4_w128"]["median_ms"]
        out.append(
            f"| {name} | {g['identity']['rho_q']:.2f} | {vi:,} -> {vw:,} "
            f"(-{100 * (vi - vw) / vi:.1f}%) | {ms(arms['t0'])} | {ms(arms['t_online_w128'])} | "
            f"{der['t0_over_t_online_w128']:.3f} | {der['c_online_w128_us']:.1f} | "
            f"{ms(arms['union4_w128'])} | {ms(arms['per_query'])} | {pq_u4:.2f} | "
            f"{100 * nrms:.2f}% |" if nrms is not None else "| |")
    return "\n".join(out)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    with open(sys.argv[1]) as f:
        data = json.load(f)
    caps = [c for c in data["captures"] if c.get("gpu", {}).get("ran")]
    if not caps:
        print("readme_table.py: no capture with GPU timings in the file", file=sys.stderr)
        return 1
    r = data.get("rates", {})
    print(f"Rates measured in the same run: L2 read {r.get('l2_read_tbps', 0):.2f} TB/s, dense FP8 "
          f"GEMM (cuBLASLt) {r.get('fp8_gemm_tflops', 0):.0f} TFLOP/s.\n")
    print(headline(caps[0]))
    print()
    print(per_capture(caps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
