#!/usr/bin/env python3
"""The dynamic symbols libpageweaver.so defines are exactly the functions declared in
include/pageweaver.h plus pw_fail, the capture library's error hook (cmake/pageweaver.map
lists them; every other internal pw_* helper stays local).

Usage: check_exports.py HEADER LIBRARY   (exit 0: equal; 1: a difference, printed; 77: no nm)
"""
import re
import shutil
import subprocess
import sys


def header_functions(path):
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    return set(re.findall(r"\b(pw_[a-z0-9_]+)\s*\(", text))


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split() and line.split()[-1].startswith("pw_")}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    if not shutil.which("nm"):
        print("SKIP: nm (binutils) not found")
        return 77
    want, have = header_functions(sys.argv[1]) | {"pw_fail"}, exported(sys.argv[2])
    extra, missing = sorted(have - want), sorted(want - have)
    if extra:
        print("exported but not in the header:", " ".join(extra))
    if missing:
        print("in the header but not exported:", " ".join(missing))
    if not extra and not missing:
        print(f"ok: {len(have)} exported functions == the header's")
    return 1 if extra or missing else 0


if __name__ == "__main__":
    sys.exit(main())
