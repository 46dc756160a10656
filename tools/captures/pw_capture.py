"""Capture files from numpy (docs/capture-format.md): save_capture, load_capture,
CaptureError, parse_softmax_scale, parse_qkv_seed.

The implementation lives in the PyTorch package, python/pageweaver/_capture_format.py,
which needs only numpy and safetensors; it is loaded here by path, so the capture tools
run without torch and without the compiled library. From PyTorch, use
`pageweaver.save_capture` / `pageweaver.load_capture` (torch tensors in and out).
"""
import importlib.util
import os
import sys

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                     "python", "pageweaver", "_capture_format.py")
_spec = importlib.util.spec_from_file_location("pageweaver_capture_format", _PATH)
_impl = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _impl
_spec.loader.exec_module(_impl)

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
