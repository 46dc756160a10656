"""PageWeaver for PyTorch: sparse prefill attention over per-query Top-K KV pages with
online query regrouping (NVIDIA Hopper, sm_90), and its FP64 reference on the CPU.

    import pageweaver
    o = pageweaver.sparse_prefill(q, k_cache, v_cache, topk_idx, page_table,
                                  cu_seqlens_q, kv_lens, prefix_lens, k_scale=ks, v_scale=vs)

`pageweaver.sparse_prefill` is a torch custom op (`torch.ops.pageweaver.sparse_prefill_out`
underneath): it runs on the tensors' device and the current CUDA stream, never
synchronises, and can be captured in CUDA graphs and by torch.compile(fullgraph=True).
`pageweaver.integrations` adapts SGLang's and vLLM's MiniMax sparse-attention arguments;
`save_capture` / `load_capture` write and read the library's capture files.
"""
from . import _lib
from ._lib import (CudaError, InvalidArgumentError, LibraryMemoryError, NoDeviceError,
                   PageWeaverError, UnsupportedError)
from ._op import PAGE_SIZE, check_gpu_support, sparse_prefill
from .capture import CaptureError, load_capture, save_capture

__version__ = _lib.lib.pw_version_string().decode()
library_path = _lib.library_path

__all__ = ["sparse_prefill", "check_gpu_support", "save_capture", "load_capture", "PAGE_SIZE",
           "PageWeaverError", "InvalidArgumentError", "UnsupportedError", "NoDeviceError",
           "CudaError", "LibraryMemoryError", "CaptureError", "integrations", "library_path"]


def __getattr__(name):
    if name == "integrations":  # imported on first use
        import importlib
        return importlib.import_module(".integrations", __name__)
    raise AttributeError(f"module 'pageweaver' has no attribute {name!r}")
