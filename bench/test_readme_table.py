#!/usr/bin/env python3
"""Tests of bench/readme_table.py (run from the repository root; CTest does).

- On the shipped docs/bench-h200.json: both tables are printed, one row per capture with
  GPU timings, and every table line is in README.md (the README shows the JSON it names).
- A JSON without GPU timings exits 1 with a message; no argument exits 2.
- With the FP8X2 arms added to a copy (fake times): the Union4 FP8X2 row and columns
  appear, every capture row has the header's column count.
- With a default_alone arm added to a copy: the default row names it and the FlashInfer
  table gains the "timed alone" column and ratios.
- The FlashInfer table has one row per capture both files have (the peer may have run
  fewer inputs than the bench: the twenty-sixth session's has no 1M-context chunk).
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join("bench", "readme_table.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    with open("docs/bench-h200.json") as f:
        data = json.load(f)
    timed = [c for c in data["captures"] if c.get("gpu", {}).get("ran")]
    r = run("docs/bench-h200.json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = [l for l in lines if l.startswith("| ") and not l.startswith("| ---")]
    headline = [l for l in rows if l.startswith("| T0") or l.startswith("| **") or
                l.startswith("| per-query") or l.startswith("| offline") or l.startswith("| T_")]
    assert len(headline) == 7, headline
    cols = [l for l in rows if l.startswith("| capture")][0].count("|")
    per_capture = [l for l in rows if l.count("|") == cols and not l.startswith("| capture")]
    assert len(per_capture) == len(timed), (len(per_capture), len(timed))
    with open("README.md") as f:
        readme = f.read()
    missing = [l for l in lines if l.startswith("|") and l not in readme]
    assert not missing, "README.md lacks these table lines of docs/bench-h200.json:\n" + "\n".join(missing)

    # The FlashInfer table (--peer docs/flashinfer-h200.json): one row per capture both files
    # have, every line in README.md.
    if os.path.exists("docs/flashinfer-h200.json"):
        with open("docs/flashinfer-h200.json") as f:
            peer_ok = {os.path.basename(p["capture"]) for p in json.load(f)["captures"] if p.get("status") == "ok"}
        both = [c for c in timed if os.path.basename(c["path"]) in peer_ok]
        assert both, "docs/flashinfer-h200.json shares no capture with docs/bench-h200.json"
        r = run("docs/bench-h200.json", "--peer", "docs/flashinfer-h200.json")
        assert r.returncode == 0, r.stderr
        peer_lines = [l for l in r.stdout.splitlines() if l.startswith("| ")]
        start = [i for i, l in enumerate(peer_lines) if l.startswith("| capture | default call")]
        assert len(start) == 1, peer_lines
        peer_rows = peer_lines[start[0] + 2:]
        assert len(peer_rows) == len(both), (len(peer_rows), len(both))
        missing = [l for l in peer_lines if l not in readme]
        assert not missing, "README.md lacks these peer-table lines:\n" + "\n".join(missing)

    with tempfile.TemporaryDirectory() as d:
        fake = copy.deepcopy(data)
        for cap in fake["captures"]:
            if not cap.get("gpu", {}).get("ran"):
                continue
            arms = cap["gpu"]["arms"]
            arms["union8_w128_fp8x2"] = dict(arms["t_online_w128"], median_ms=9.876)
            arms["union4_w128_fp8x2"] = dict(arms["union4_w128"], median_ms=8.765)
            cap["gpu"]["derived"]["fp8x2_over_fp8_union4"] = 1.25
            cap["gpu"]["derived"]["fp8x2_over_fp8_union8"] = 1.5
            cap.setdefault("reference_check", {})["nrms_gpu_fp8x2_vs_exact"] = 0.00123
        path = os.path.join(d, "x2.json")
        with open(path, "w") as f:
            json.dump(fake, f)
        r = run(path)
        assert r.returncode == 0, r.stderr
        x2_rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and not l.startswith("| ---")]
        x2_row = [l for l in x2_rows if "FP8X2 (two-term" in l]
        assert len(x2_row) == 1 and "| 8.765 |" in x2_row[0] and "1.25x" in x2_row[0] and "1.50x" in x2_row[0] \
            and "0.12%" in x2_row[0], x2_row
        header = [l for l in x2_rows if l.startswith("| capture")]
        assert len(header) == 1 and "| Union4 FP8X2 |" in header[0] and "| NRMS FP8X2 |" in header[0], header
        cols = header[0].count("|")
        caps = [l for l in x2_rows if l.count("|") == cols and not l.startswith("| capture")]
        assert len(caps) == len(timed) and all("| 8.765 |" in l and "| 0.12% |" in l for l in caps), caps

        # pageweaver bench's default_alone arm (the call timed by itself): the headline's
        # default row names it, the peer table gains its column and ratios, every row has
        # the header's column count.
        if os.path.exists("docs/flashinfer-h200.json"):
            alone = copy.deepcopy(data)
            for cap in alone["captures"]:
                if cap.get("gpu", {}).get("ran") and cap["gpu"]["arms"].get("default", {}).get("ran"):
                    cap["gpu"]["arms"]["default_alone"] = dict(cap["gpu"]["arms"]["default"], median_ms=0.5)
            path = os.path.join(d, "alone.json")
            with open(path, "w") as f:
                json.dump(alone, f)
            r = run(path, "--peer", "docs/flashinfer-h200.json")
            assert r.returncode == 0, r.stderr
            lines = [l for l in r.stdout.splitlines() if l.startswith("| ")]
            assert any(l.startswith("| **Default call") and "timed alone 0.500 ms" in l for l in lines), lines
            head = [i for i, l in enumerate(lines) if l.startswith("| capture | default call")]
            assert len(head) == 1 and "| timed alone, ms |" in lines[head[0]], lines
            cols = lines[head[0]].count("|")
            rows = lines[head[0] + 2:]
            assert len(rows) == len(both) and all(l.count("|") == cols and "| 0.500 |" in l for l in rows), rows

        path = os.path.join(d, "cpu.json")
        with open(path, "w") as f:
            json.dump({"captures": [{"path": "x", "gpu": {"ran": False}}]}, f)
        r = run(path)
        assert r.returncode == 1 and "no capture with GPU timings" in r.stderr, (r.returncode, r.stderr)
    assert run().returncode == 2
    print(f"readme_table: {len(per_capture)} capture rows, README tables match docs/bench-h200.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
