"""pytest setup of the package's tests.

- Seeds: every random test takes the `seed` fixture: PW_SEED from the environment, else a
  fresh random one; it is printed (pytest shows it with a failure's captured output) and
  named in assertion messages. Reproduce with PW_SEED=N pytest ... -k TEST.
- Marker `gpu`: needs an sm_90 CUDA device; skipped with the reason otherwise.
- PW_PYTEST_SUMMARY=FILE: the outcome counts as JSON (python/tests/run_pytest.py reads
  them to tell "all skipped" from "passed").
"""
import json
import os
import random

import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an sm_90 (Hopper) CUDA device")


def gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        return f"the GPU is sm_{major}{minor}; the kernels need sm_90 (Hopper)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason:
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def seed(request):
    s = int(os.environ.get("PW_SEED", random.randrange(2**31)))
    print(f"seed {s} (reproduce: PW_SEED={s} pytest -k {request.node.name})")
    torch.manual_seed(s)
    return s


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get("PW_PYTEST_SUMMARY")
    if path:
        counts = {k: len(terminalreporter.stats.get(k, [])) for k in
                  ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}
        with open(path, "w") as f:
            json.dump(counts, f)
