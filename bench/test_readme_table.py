#!/usr/bin/env python3
"""Tests of bench/readme_table.py (run from the repository root; CTest does).

- On the shipped docs/bench-h200.json: both tables are printed, one row per capture with
  GPU timings, and every table line is in README.md (the README shows the JSON it names).
- A JSON without GPU timings exits 1 with a message; no argument exits 2.
"""
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
    per_capture = [l for l in rows if l.count("|") == 12 and not l.startswith("| capture")]
    assert len(per_capture) == len(timed), (len(per_capture), len(timed))
    with open("README.md") as f:
        readme = f.read()
    missing = [l for l in lines if l.startswith("|") and l not in readme]
    assert not missing, "README.md lacks these table lines of docs/bench-h200.json:\n" + "\n".join(missing)

    with tempfile.TemporaryDirectory() as d:
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
