#!/usr/bin/env python3
"""The Python package's tests as ctest runs them (CMakeLists.txt, from the repository root).

  run_pytest.py cpu LIB       pytest python/tests -m "not gpu" against LIB (libpageweaver.so)
  run_pytest.py gpu LIB       pytest python/tests -m gpu against LIB
  run_pytest.py package DIR   `pip install .` (CPU library: fast) into DIR/site, then the
                              installed package's smoke test and examples/chunked_prefill.py

Exit codes for ctest: 0 passed; 77 SKIP (torch / pytest / scikit-build-core missing, or
every selected test skipped, e.g. the GPU tests on a machine without a GPU), printed with
the reason; anything else failed. pytest collecting no test at all is a failure, never a
pass or a skip.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def missing(*modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


def run_pytest(part, library):
    env = dict(os.environ, PAGEWEAVER_LIBRARY=os.path.abspath(library))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        env["PW_PYTEST_SUMMARY"] = summary
        marker = "gpu" if part == "gpu" else "not gpu"
        rc = subprocess.call([sys.executable, "-m", "pytest", os.path.join(ROOT, "python", "tests"),
                              "-m", marker, "-rs", "-p", "no:cacheprovider"], env=env, cwd=ROOT)
        counts = {}
        if os.path.exists(summary):
            with open(summary) as f:
                counts = json.load(f)
    ran = sum(counts.get(k, 0) for k in ("passed", "failed", "error", "skipped"))
    if rc == 5 or ran == 0:
        print(f"FAIL: pytest ran no test (exit {rc}, counts {counts})")
        return 1
    if rc != 0:
        return rc
    if counts.get("passed", 0) == 0 and counts.get("skipped", 0) > 0:
        print(f"SKIP: all {counts['skipped']} {part} tests skipped (reasons above)")
        return SKIP
    return 0


def run_package(dest):
    site, build = os.path.join(dest, "site"), os.path.join(dest, "build")
    shutil.rmtree(site, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
           "--disable-pip-version-check", "--target", site,
           "-C", "cmake.define.PW_WITH_CUDA=OFF", "-C", f"build-dir={build}", ROOT]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        return rc
    env = {k: v for k, v in os.environ.items() if k not in ("PAGEWEAVER_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    check = ("import os, pageweaver; p = pageweaver.library_path; print('installed:', p, "
             "pageweaver.__version__); assert p.startswith(os.path.realpath(%r)) or "
             "p.startswith(%r), p" % (site, site))
    for cmd in ([sys.executable, "-c", check],
                [sys.executable, os.path.join(ROOT, "examples", "chunked_prefill.py")]):
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd, env=env, cwd=dest)
        if rc != 0:
            return rc
    return 0


def main():
    part = sys.argv[1] if len(sys.argv) > 1 else ""
    if part not in ("cpu", "gpu", "package") or len(sys.argv) != 3:
        print(__doc__)
        return 2
    need = ["torch", "pytest", "numpy", "safetensors"]
    if part == "package":
        need.append("scikit_build_core")
    lack = missing(*need)
    if lack:
        print(f"SKIP: python3 ({sys.executable}) lacks {', '.join(lack)}; scripts/test "
              f"installs scripts/requirements-test.txt")
        return SKIP
    return run_package(sys.argv[2]) if part == "package" else run_pytest(part, sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
