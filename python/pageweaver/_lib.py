"""ctypes layer over libpageweaver.so: loading, the struct mirrors, status -> exception.

Why ctypes: the package needs no compile against PyTorch's C++ ABI (one wheel serves every
torch build), and C users and Python users share one shared library, the same on CPU-only
machines (reference path) and GPU machines. The C header cannot be read from Python, so
every struct mirrored here is checked against the library's own sizeof / offsetof numbers
(pw_abi_query) when the library is loaded: a header change that this file does not follow
raises ImportError instead of passing garbage to C.

Where the library comes from, first match wins:
  1. the environment variable PAGEWEAVER_LIBRARY (a path to libpageweaver.so), e.g. a
     build tree's `build/libpageweaver.so` when running from a checkout;
  2. libpageweaver.so next to this file (what `pip install .` puts there) or in another
     folder of the package's __path__ (`pip install -e .`).
"""
import ctypes
import os
import sys
import threading

# ---- pw_status_t --------------------------------------------------------------------
PW_SUCCESS = 0
PW_ERROR_INVALID_ARGUMENT = 1
PW_ERROR_UNSUPPORTED = 2
PW_ERROR_OUT_OF_MEMORY = 3
PW_ERROR_INSUFFICIENT_WORKSPACE = 4
PW_ERROR_CUDA = 5
PW_ERROR_NO_DEVICE = 6
PW_ERROR_IO = 7
PW_ERROR_FORMAT = 8

# ---- enums (values fixed by the C API; the defaults come from pw_abi_query) ----------
PW_DTYPE_FLOAT32 = 0
PW_DTYPE_BFLOAT16 = 1
PW_DTYPE_FLOAT64 = 2
PW_REF_EXACT = 0
PW_REF_FP8_EMULATE_F16_P = 2  # pw_ref_mode_t: FP8X2 with P in f16 (the V^T pre-pass's)
PW_REF_FP8_EMULATE = 1
PRECISIONS = {"fp8": 0, "fp8x2": 1}            # pw_precision_t
REGROUP_MODES = {"identity": 0, "greedy": 1, "guarded": 2, "auto": 3}  # pw_regroup_mode_t
KERNELS = {"union8": 0, "union4": 1, "per_query": 2}         # pw_kernel_t
PW_WINDOW_AUTO = -1  # pw_plan_config_t.window: the plan picks 64 or 128 (the default since 2026-12-05)


class PageWeaverError(RuntimeError):
    """A call into libpageweaver failed. `status` is the pw_status_t name (e.g.
    "PW_ERROR_CUDA"), the message is the library's pw_last_error() text."""

    def __init__(self, status, message):
        super().__init__(f"{message} [{status}]")
        self.status = status


class InvalidArgumentError(PageWeaverError, ValueError):
    """PW_ERROR_INVALID_ARGUMENT: a bad size, layout or value."""


class UnsupportedError(PageWeaverError, NotImplementedError):
    """PW_ERROR_UNSUPPORTED: a valid configuration without an implemented path (e.g. a
    shape off the GPU fast path, a GPU other than sm_90)."""


class NoDeviceError(PageWeaverError):
    """PW_ERROR_NO_DEVICE: no usable CUDA device."""


class CudaError(PageWeaverError):
    """PW_ERROR_CUDA: a CUDA runtime call or launch failed."""


class LibraryMemoryError(PageWeaverError, MemoryError):
    """PW_ERROR_OUT_OF_MEMORY: a host allocation inside the library failed."""


_ERRORS = {
    PW_ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    PW_ERROR_UNSUPPORTED: UnsupportedError,
    PW_ERROR_OUT_OF_MEMORY: LibraryMemoryError,
    PW_ERROR_INSUFFICIENT_WORKSPACE: InvalidArgumentError,
    PW_ERROR_CUDA: CudaError,
    PW_ERROR_NO_DEVICE: NoDeviceError,
}


# ---- struct mirrors (include/pageweaver.h) --------------------------------------------
class Problem(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_tokens", ctypes.c_int32),
                ("num_requests", ctypes.c_int32), ("num_kv_heads", ctypes.c_int32),
                ("q_heads_per_kv", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("page_size", ctypes.c_int32), ("topk", ctypes.c_int32),
                ("max_pages_per_request", ctypes.c_int32),
                ("num_cache_pages", ctypes.c_int64), ("softmax_scale", ctypes.c_float)]


class Requests(ctypes.Structure):
    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("prefix_lens", ctypes.c_void_p),
                ("kv_lens", ctypes.c_void_p), ("page_table", ctypes.c_void_p),
                ("page_table_stride", ctypes.c_int64)]


class PlanConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("regroup", ctypes.c_int),
                ("window", ctypes.c_int32), ("kernel", ctypes.c_int),
                ("flags", ctypes.c_uint32), ("vt_max_pages", ctypes.c_int32),
                ("max_query_rows", ctypes.c_int32)]


class PlanInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("regroup", ctypes.c_int),
                ("configured", ctypes.c_int), ("window", ctypes.c_int32), ("kernel", ctypes.c_int),
                ("saving_us", ctypes.c_double), ("cost_us", ctypes.c_double),
                ("margin_us", ctypes.c_double), ("regroup_group_size", ctypes.c_int32),
                ("vt_prepass", ctypes.c_int32), ("dense_tile", ctypes.c_int32),
                ("vt_capacity", ctypes.c_int64), ("fp8x2_stacked", ctypes.c_int32),
                ("token_scales_stacked", ctypes.c_int32)]


class TokenScales(ctypes.Structure):
    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("stride_h", ctypes.c_int64), ("stride_t", ctypes.c_int64)]


class CacheLayout(ctypes.Structure):
    _fields_ = [("page_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64),
                ("token_stride", ctypes.c_int64)]


class AttentionArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("q", ctypes.c_void_p),
                ("q_stride", ctypes.c_int64), ("k_cache", ctypes.c_void_p),
                ("v_cache", ctypes.c_void_p), ("kv_stride", ctypes.c_int64),
                ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
                ("topk_ids", ctypes.c_void_p), ("requests", Requests),
                ("o", ctypes.c_void_p), ("o_stride", ctypes.c_int64),
                ("o_dtype", ctypes.c_int), ("lse", ctypes.c_void_p),
                ("bad_page_count", ctypes.c_void_p), ("precision", ctypes.c_int),
                ("sink_logits", ctypes.c_void_p), ("token_scales", TokenScales),
                ("sink_keys", ctypes.c_void_p), ("cache_layout", CacheLayout)]


_MIRRORS = {"pw_problem_t": Problem, "pw_requests_t": Requests, "pw_token_scales_t": TokenScales,
            "pw_cache_layout_t": CacheLayout,
            "pw_plan_config_t": PlanConfig, "pw_plan_info_t": PlanInfo,
            "pw_attention_args_t": AttentionArgs}


def _library_path():
    env = os.environ.get("PAGEWEAVER_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise ImportError(f"PAGEWEAVER_LIBRARY={env!r} is not a file")
        return env
    # Next to this file, or in any folder of the package's path (an editable install,
    # `pip install -e .`, keeps the sources here and the built library in site-packages).
    folders = [os.path.dirname(os.path.abspath(__file__))]
    package = sys.modules.get(__package__)
    folders += [f for f in getattr(package, "__path__", []) if f not in folders]
    for folder in folders:
        here = os.path.join(folder, "libpageweaver.so")
        if os.path.isfile(here):
            return here
    raise ImportError(
        "libpageweaver.so not found: install the package (`pip install .` in the "
        "repository builds it), or point PAGEWEAVER_LIBRARY at a built "
        "libpageweaver.so (cmake -DPW_BUILD_SHARED=ON)")


def _check_abi(lib, path):
    """Every mirrored struct against the library's own sizeof / offsetof numbers."""
    if not hasattr(lib, "pw_abi_query"):
        raise ImportError(f"{path}: no pw_abi_query (a library older than this package)")
    q = lib.pw_abi_query
    q.argtypes, q.restype = [ctypes.c_char_p], ctypes.c_int64
    problems = []
    for cname, mirror in _MIRRORS.items():
        have = q(f"sizeof {cname}".encode())
        if have != ctypes.sizeof(mirror):
            problems.append(f"sizeof {cname}: library {have}, package {ctypes.sizeof(mirror)}")
        for field, _ in mirror._fields_:
            off = q(f"offsetof {cname}.{field}".encode())
            mine = getattr(mirror, field).offset
            if off != mine:
                problems.append(f"offsetof {cname}.{field}: library {off}, package {mine}")
    if problems:
        raise ImportError(f"{path} does not match this package's view of pageweaver.h "
                          f"(rebuild / reinstall both together): " + "; ".join(problems))


def _load():
    path = _library_path()
    lib = ctypes.CDLL(path)
    _check_abi(lib, path)
    c_int64, c_size_t, vp = ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p
    sigs = {
        "pw_version_string": ([], ctypes.c_char_p),
        "pw_status_string": ([ctypes.c_int], ctypes.c_char_p),
        "pw_last_error": ([], ctypes.c_char_p),
        "pw_problem_check": ([ctypes.POINTER(Problem), ctypes.POINTER(Requests)], ctypes.c_int),
        "pw_plan_create": ([ctypes.POINTER(Problem), ctypes.POINTER(PlanConfig),
                            ctypes.POINTER(vp)], ctypes.c_int),
        "pw_plan_workspace_size": ([vp, ctypes.POINTER(c_size_t)], ctypes.c_int),
        "pw_sparse_prefill": ([vp, ctypes.POINTER(AttentionArgs), vp, vp, c_size_t, vp],
                              ctypes.c_int),
        "pw_plan_destroy": ([vp], None),
        "pw_plan_info": ([vp, ctypes.c_int, ctypes.POINTER(PlanInfo)], ctypes.c_int),
        "pw_ref_attention": ([ctypes.POINTER(Problem), ctypes.POINTER(AttentionArgs),
                              ctypes.c_int], ctypes.c_int),
        "pw_abi_query": ([ctypes.c_char_p], c_int64),
    }
    for name, (argtypes, restype) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib, path


lib, library_path = _load()


def abi(name):
    """pw_abi_query(name): a size, offset or *_INIT default of the loaded library."""
    v = lib.pw_abi_query(name.encode())
    if v < 0:
        raise KeyError(f"pw_abi_query does not know {name!r}")
    return v


DEFAULT_PRECISION = abi("init pw_attention_args_t.precision")
DEFAULT_REGROUP = abi("init pw_plan_config_t.regroup")
# PW_WINDOW_AUTO is -1, which is also abi()'s "unknown name"; every library version knows
# this name (128 before the window was picked by the plan), so -1 is the value here.
DEFAULT_WINDOW = lib.pw_abi_query(b"init pw_plan_config_t.window")
DEFAULT_KERNEL = abi("init pw_plan_config_t.kernel")
# pw_plan_config_t.max_query_rows up to this keeps "auto" in identity order; any other value
# plans as 0 does (the plan cache keys on the difference only)
SHORT_REQUEST_ROWS = abi("PW_PLAN_SHORT_REQUEST_ROWS")
_INIT_PROBLEM = tuple(abi(f"init pw_problem_t.{f}") for f in
                      ("q_heads_per_kv", "head_dim", "page_size", "topk"))


def check(status, what):
    """Raises the exception of a failed pw_* call, carrying pw_last_error() (thread-local:
    read here, on the calling thread, right after the call)."""
    if status == PW_SUCCESS:
        return
    message = lib.pw_last_error().decode("utf-8", "replace")
    name = lib.pw_status_string(status).decode()
    raise _ERRORS.get(status, PageWeaverError)(name, f"{what}: {message}")


def new_problem():
    p = Problem()
    p.struct_size = ctypes.sizeof(Problem)
    p.num_requests = 1
    p.num_kv_heads = 1
    p.q_heads_per_kv, p.head_dim, p.page_size, p.topk = _INIT_PROBLEM
    return p


def new_args():
    a = AttentionArgs()
    a.struct_size = ctypes.sizeof(AttentionArgs)
    a.o_dtype = PW_DTYPE_FLOAT32
    a.precision = DEFAULT_PRECISION
    return a


class Plan:
    """A pw_plan_t with its workspace size. pw_sparse_prefill on one plan is not
    thread-safe (pageweaver.h): `lock` serialises the calls that share it."""

    __slots__ = ("handle", "workspace_bytes", "lock")

    def __init__(self, problem, regroup, window, kernel, flags=0, vt_max_pages=0, max_query_rows=0):
        cfg = PlanConfig()
        cfg.struct_size = ctypes.sizeof(PlanConfig)
        cfg.regroup, cfg.window, cfg.kernel, cfg.flags = regroup, window, kernel, flags
        # (an int32 field: past its range, 0, which plans the same as any value above
        # SHORT_REQUEST_ROWS; a negative value is the library's error)
        cfg.vt_max_pages = vt_max_pages
        cfg.max_query_rows = max_query_rows if max_query_rows < 2**31 else 0
        handle = ctypes.c_void_p()
        check(lib.pw_plan_create(ctypes.byref(problem), ctypes.byref(cfg),
                                 ctypes.byref(handle)), "pw_plan_create")
        self.handle = handle
        nbytes = ctypes.c_size_t()
        check(lib.pw_plan_workspace_size(handle, ctypes.byref(nbytes)),
              "pw_plan_workspace_size")
        self.workspace_bytes = nbytes.value
        self.lock = threading.Lock()

    def info(self, precision):
        """pw_plan_info for `precision` (a pw_precision_t code): a PlanInfo. Fields past the
        returned struct_size (an older library) are left 0."""
        info = PlanInfo()
        info.struct_size = ctypes.sizeof(PlanInfo)
        check(lib.pw_plan_info(self.handle, precision, ctypes.byref(info)), "pw_plan_info")
        return info

    def __del__(self):
        h = getattr(self, "handle", None)
        if h is not None and h.value and lib is not None:
            lib.pw_plan_destroy(h)
            self.handle = None
