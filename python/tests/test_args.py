"""Argument checks: every bad argument raises TypeError / ValueError naming the tensor, or
the library's error (carrying pw_last_error) for what only the library checks."""
import pathlib
import sys

import pytest
import torch

import pageweaver
from problems import op_args, random_problem

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))  # bench/shapes.py


@pytest.fixture
def p():
    return random_problem(torch.Generator().manual_seed(7), hkv=2, g=2, d=32, k=4, bad_pages=False)


def run(p, **kw):
    args = dict(zip(("q", "k_cache", "v_cache", "topk_idx", "page_table", "cu_seqlens_q",
                     "kv_lens", "prefix_lens"), op_args(p)))
    for key in list(kw):
        if key in args:
            args[key] = kw.pop(key)
    return pageweaver.sparse_prefill(*args.values(), **kw)


@pytest.mark.parametrize("field,value,exc,words", [
    ("q", lambda p: p["q"].float(), TypeError, ["q", "bfloat16"]),
    ("q", lambda p: None, TypeError, ["q", "torch.Tensor", "NoneType"]),
    ("q", lambda p: p["q"].tolist(), TypeError, ["q", "torch.Tensor", "list"]),
    ("q", lambda p: p["q"][0], ValueError, ["q", "[N, Hq, D]"]),
    ("q", lambda p: p["q"].transpose(1, 2).contiguous().transpose(1, 2), ValueError, ["q", "strides"]),
    ("k_cache", lambda p: p["k_cache"].view(torch.uint8), TypeError, ["k_cache", "float8_e4m3fn"]),
    ("v_cache", lambda p: p["v_cache"][:-128], ValueError, ["v_cache", "differs"]),
    ("q", lambda p: p["q"][:, :3], ValueError, ["heads", "multiple"]),
    ("topk_idx", lambda p: p["topk_idx"].long(), TypeError, ["topk_idx", "int32"]),
    ("topk_idx", lambda p: p["topk_idx"][:1], ValueError, ["topk_idx", "KV heads", "the caches 2"]),
    ("topk_idx", lambda p: p["topk_idx"][:, :, :0], ValueError, ["topk_idx", "K = 0"]),
    ("topk_idx", lambda p: p["topk_idx"].transpose(0, 1).contiguous().transpose(0, 1), ValueError,
     ["topk_idx", "contiguous"]),
    ("page_table", lambda p: p["page_table"][:, :0], ValueError, ["page_table"]),
    ("page_table", lambda p: torch.cat([p["page_table"], p["page_table"]]), ValueError, ["page_table", "rows"]),
    ("page_table", lambda p: torch.cat([p["page_table"], p["page_table"]], 1)[:, ::2], ValueError,
     ["page_table", "columns"]),
    ("cu_seqlens_q", lambda p: p["cu_seqlens_q"][:-1], ValueError, ["cu_seqlens_q", "shape"]),
    ("kv_lens", lambda p: p["kv_lens"].to(torch.int64), TypeError, ["kv_lens", "int32"]),
    ("prefix_lens", lambda p: p["prefix_lens"].to("meta"), ValueError, ["prefix_lens", "meta"]),
])
def test_tensor_errors_name_the_tensor(p, field, value, exc, words):
    with pytest.raises(exc) as e:
        run(p, **{field: value(p)})
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_out_sharing_memory_with_q_is_refused(p):
    """Attention in place (out = q, or out over q's rows) is refused by the library's check
    (args.o overlaps args.q), on every device; a separate out of the same shape works."""
    with pytest.raises(pageweaver.InvalidArgumentError, match="args.o overlaps args.q"):
        run(p, out=p["q"])
    run(p, out=torch.empty_like(p["q"]))


def test_numpy_scalar_scales_are_accepted(p):
    """k_scale / v_scale as NumPy scalars (what an engine reads from a config) give the bytes
    of the same Python floats (a fresh user's trial, 2026-12-05: numpy.float32 was refused
    with "expected a float ..., got float32"); a NumPy array is still refused, by its type's
    full name."""
    np = pytest.importorskip("numpy")
    want = run(p, k_scale=0.5, v_scale=2.0)
    got = run(p, k_scale=np.float32(0.5), v_scale=np.float64(2.0))
    assert torch.equal(got, want)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        run(p, k_scale=np.ones(1, dtype=np.float32))


@pytest.mark.parametrize("kw,exc,words", [
    (dict(k_scale=float("inf")), ValueError, ["k_scale", "finite"]),
    (dict(v_scale=float("nan")), ValueError, ["v_scale"]),
    (dict(k_scale=1e39), ValueError, ["k_scale", "float32"]),   # finite double, inf as a float32
    (dict(v_scale=-1e39), ValueError, ["v_scale", "float32"]),
    (dict(k_scale="1"), TypeError, ["k_scale"]),
    (dict(k_scale=torch.ones(2)), ValueError, ["k_scale", "one"]),
    (dict(v_scale=torch.ones(1, dtype=torch.float64)), TypeError, ["v_scale", "float32"]),
    (dict(softmax_scale=0.0), ValueError, ["softmax_scale"]),
    (dict(softmax_scale=1e-50), ValueError, ["softmax_scale", "float32"]),  # rounds to 0 = the default
    (dict(softmax_scale=1e39), ValueError, ["softmax_scale", "float32"]),   # past the float32 range
    (dict(softmax_scale="0.5"), TypeError, ["softmax_scale", "str"]),
    (dict(softmax_scale=torch.tensor(0.5)), TypeError, ["softmax_scale", "Tensor"]),
    (dict(return_lse="yes"), TypeError, ["return_lse", "bool"]),
    (dict(precision="fp16"), ValueError, ["precision", "fp8x2", "exact"]),
    (dict(regroup="random"), ValueError, ["regroup", "guarded"]),
    (dict(kernel="union16"), ValueError, ["kernel", "union4"]),
    (dict(out=torch.empty(3, 4, 32, dtype=torch.bfloat16)), ValueError, ["out", "shape"]),
    (dict(out=torch.empty(1)), ValueError, ["out"]),
    (dict(bad_page_count=torch.zeros(2, dtype=torch.int32)), TypeError, ["bad_page_count"]),
])
def test_keyword_errors(p, kw, exc, words):
    if "out" in kw and kw["out"].dim() == 1:
        kw["out"] = torch.empty(p["q"].shape, dtype=torch.float16)
        exc, words = TypeError, ["out", "dtype"]
    with pytest.raises(exc) as e:
        run(p, **kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("scale,exc", [(0.0, ValueError), (1e-50, ValueError), (True, TypeError),
                                       ("0.5", TypeError)])
def test_check_gpu_support_refuses_what_sparse_prefill_refuses(scale, exc):
    """check_gpu_support raises sparse_prefill's error for a softmax_scale sparse_prefill
    refuses (its docstring's promise), and the tiniest float32 scale is a value, not 0."""
    p = random_problem(torch.Generator().manual_seed(13), hkv=1, g=16, d=128, k=16)
    with pytest.raises(exc):
        run(p, softmax_scale=scale)
    with pytest.raises(exc):
        pageweaver.check_gpu_support(*op_args(p), softmax_scale=scale)
    assert pageweaver.check_gpu_support(*op_args(p), softmax_scale=1.5e-45)["kernel"] == "union4"
    tiny = run(p, softmax_scale=1.5e-45, precision="exact", out=torch.empty(p["q"].shape, dtype=torch.float64))
    default = run(p, precision="exact", out=torch.empty(p["q"].shape, dtype=torch.float64))
    assert not torch.equal(tiny, default)  # the tiny scale is used, not replaced by 1/sqrt(D)


def test_scales_of_zero_and_below_are_values(p):
    """k_scale / v_scale: any finite value, 0 and negative ones included (docs/semantics.md
    §4.5), the same as a Python float or a one-element tensor; k_scale = 0 makes every
    visible score 0 (each head's output the mean of V over the row's visible tokens)."""
    for ks in (0.0, -0.6):
        a = run(p, k_scale=ks, precision="exact", out=torch.empty(p["q"].shape, dtype=torch.float64))
        b = run(p, k_scale=torch.tensor(ks), precision="exact",
                out=torch.empty(p["q"].shape, dtype=torch.float64))
        assert torch.equal(a, b)
        assert torch.isfinite(a).all()
    flipped = run(p, k_scale=-1.0, precision="exact", out=torch.empty(p["q"].shape, dtype=torch.float64))
    negated = run(p, q=-p["q"], precision="exact", out=torch.empty(p["q"].shape, dtype=torch.float64))
    assert torch.allclose(flipped, negated, rtol=0, atol=1e-12)  # (-q) . k = q . (-k)


def test_library_errors_carry_its_message(p):
    bad_cu = p["cu_seqlens_q"].clone()
    bad_cu[-1] += 1
    with pytest.raises(pageweaver.InvalidArgumentError) as e:
        run(p, cu_seqlens_q=bad_cu)
    assert isinstance(e.value, ValueError)
    assert e.value.status == "PW_ERROR_INVALID_ARGUMENT"
    assert "cu_seqlens_q" in str(e.value)
    short = p["kv_lens"].clone()
    short[0] = 0
    with pytest.raises(ValueError, match="kv_lens"):
        run(p, kv_lens=short)


def test_library_version_and_defaults():
    from pageweaver import _lib
    assert pageweaver.__version__.count(".") == 2
    assert _lib.DEFAULT_PRECISION in _lib.PRECISIONS.values()
    assert _lib.DEFAULT_KERNEL in _lib.KERNELS.values()
    assert _lib.DEFAULT_REGROUP in _lib.REGROUP_MODES.values()
    assert _lib.DEFAULT_WINDOW in (_lib.PW_WINDOW_AUTO, 64, 128)  # 128 from a library before 2026-12-05
    with pytest.raises(KeyError):
        _lib.abi("sizeof nothing")


def test_gpu_only_requirements_are_named_on_cuda_tensors_only(p):
    """precision='exact' is accepted on the CPU (and refused on the GPU: test_gpu.py)."""
    out = torch.empty(p["q"].shape, dtype=torch.float64)
    run(p, precision="exact", out=out)


def test_fp8x2_prepass_on_the_cpu(p):
    """precision='fp8x2_prepass' (CPU only) emulates FP8X2 with P in f16, the V^T pre-pass's
    arithmetic (docs/semantics.md §4.5): other bytes than 'fp8x2' (two E4M3 P terms), as close
    to the exact result, the same bytes as 'fp8x2' with per-token scales; check_gpu_support
    refuses it."""
    outs = {}
    for prec in ("exact", "fp8x2", "fp8x2_prepass"):
        outs[prec] = torch.empty(p["q"].shape, dtype=torch.float64)
        run(p, precision=prec, out=outs[prec])
    exact = outs["exact"]
    def nrms(x):
        return float((x - exact).norm() / exact.norm())
    assert not torch.equal(outs["fp8x2"], outs["fp8x2_prepass"])
    # this problem's logits are sharp (FP8: ~20%): both two-term forms ~0.7%, P in f16 as close
    assert nrms(outs["fp8x2_prepass"]) <= 1.05 * nrms(outs["fp8x2"]) and nrms(outs["fp8x2"]) < 2e-2
    assert float((outs["fp8x2"] - outs["fp8x2_prepass"]).norm() / exact.norm()) < 5e-3
    with pytest.raises(pageweaver.UnsupportedError, match="fp8x2_prepass"):
        pageweaver.check_gpu_support(*op_args(p), precision="fp8x2_prepass")
    with pytest.raises(ValueError, match="fp8x2_prepass"):
        run(p, precision="fp8x2_prepas", out=torch.empty(p["q"].shape, dtype=torch.float64))


@pytest.mark.parametrize("g,d,k,kw,ok", [
    (16, 128, 16, {}, True), (8, 128, 16, {}, True), (4, 128, 5, {}, True),
    (16, 128, 16, {"kernel": "per_query"}, True),
    (16, 128, 32, {}, True), (16, 128, 40, {"kernel": "per_query"}, True), (8, 128, 64, {}, True),
    (16, 128, 32, {"kernel": "union8"}, False), (16, 128, 65, {}, False),
    (16, 64, 16, {}, False), (3, 128, 16, {}, False),
    (8, 128, 16, {"kernel": "union8"}, False), (16, 128, 16, {"precision": "exact"}, False),
])
def test_check_gpu_support_on_the_cpu(g, d, k, kw, ok):
    """check_gpu_support says on CPU tensors what the GPU call would refuse, while
    sparse_prefill itself runs them all on the CPU reference."""
    p = random_problem(torch.Generator().manual_seed(11), hkv=2, g=g, d=d, k=min(k, 16))
    if k > 16:
        p["topk_idx"] = torch.cat([p["topk_idx"]] * 5, dim=2)[:, :, :k].contiguous()
    pageweaver.sparse_prefill(*op_args(p), precision="exact")  # the reference takes them all
    if ok:
        info = pageweaver.check_gpu_support(*op_args(p), **kw)
        assert info["kernel"] == kw.get("kernel", "union4")
        # a small problem: no V^T pre-pass, so G = 8 / 4 run the padded tile
        assert info["vt_prepass"] is False and info["vt_capacity"] == 0
        assert info["tile"] == ("g16" if g == 16 else "padded")
    else:
        with pytest.raises(pageweaver.UnsupportedError):
            pageweaver.check_gpu_support(*op_args(p), **kw)
    # The same verdict with no queries (a warm-up call, an empty chunk).
    empty = dict(p, q=p["q"][:0], topk_idx=p["topk_idx"][:, :0].contiguous(),
                 cu_seqlens_q=torch.zeros_like(p["cu_seqlens_q"]))
    if ok:
        assert pageweaver.check_gpu_support(*op_args(empty), **kw)["tile"] is None
    else:
        with pytest.raises(pageweaver.UnsupportedError):
            pageweaver.check_gpu_support(*op_args(empty), **kw)


def test_check_gpu_support_token_scales_and_sink_keys():
    p = random_problem(torch.Generator().manual_seed(12), hkv=2)
    slots = p["k_cache"].shape[0]
    ts = torch.ones(2, slots)
    assert pageweaver.check_gpu_support(*op_args(p), k_token_scales=ts, v_token_scales=ts)["tile"] == "g16"
    with pytest.raises(pageweaver.UnsupportedError, match="Union8"):
        pageweaver.check_gpu_support(*op_args(p), kernel="union8", k_token_scales=ts)
    keys = torch.zeros(32 * 128 + 1, dtype=torch.bfloat16)
    assert pageweaver.check_gpu_support(*op_args(p), sink_keys=keys[:-1].view(32, 128))["kernel"] == "union4"
    with pytest.raises(pageweaver.InvalidArgumentError, match="16-byte"):
        pageweaver.check_gpu_support(*op_args(p), sink_keys=keys[1:].view(32, 128))
    with pytest.raises(ValueError, match="topk_idx"):  # malformed arguments: sparse_prefill's errors
        pageweaver.check_gpu_support(*op_args(dict(p, topk_idx=p["topk_idx"][0])))


@pytest.mark.parametrize("g,table_cols,scales,tile,prepass,precision", [
    (8, 64, False, "dense", True, "fp8x2"), (8, 64, True, "padded", True, "fp8x2"),
    (4, 64, False, "dense", True, "fp8x2"), (4, 64, True, "padded", True, "fp8x2"),
    (16, 64, False, "g16", True, "fp8x2"), (16, 64, True, "g16", True, "fp8x2"),
    (8, 20000, False, "dense", True, "fp8x2"),  # more entries than tiles (a head may fall back): since 2026-12-05 too
    (8, 64, False, "dense", True, "fp8"), (8, 64, True, "dense", True, "fp8"),
    (4, 64, True, "dense", True, "fp8"), (8, 20000, True, "dense", True, "fp8"),
    (16, 64, True, "g16", True, "fp8"), (16, 64, False, "g16", True, "fp8"), (4, 64, False, "dense", True, "fp8"),
])
def test_check_gpu_support_names_the_path(g, table_cols, scales, tile, prepass, precision):
    """A chunk of 4,096 queries: the V^T pre-pass rule holds with a short page table, and G = 8
    or 4 then runs the dense tile, in 'fp8x2' without per-token scales (with them the
    stacked tile: "fp8x2_tile"), in 'fp8' with them too (the dense tile's bytes, run since
    2026-12-04 on the stacked tile with its second term 0: "fp8x2_tile"; docs/shapes.md:
    which tile a G = 8 or 4 call runs)."""
    n, hkv, d = 4096, 1, 128
    slots = table_cols * 128
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    args = (torch.empty((n, hkv * g, d), dtype=torch.bfloat16),
            torch.empty((slots, hkv, d), dtype=torch.float8_e4m3fn),
            torch.empty((slots, hkv, d), dtype=torch.float8_e4m3fn),
            torch.zeros((hkv, n, 16), dtype=torch.int32),
            torch.arange(table_cols, dtype=torch.int32).view(1, table_cols),
            i32([0, n]), i32([n + 100]), i32([100]))
    ts = torch.ones(hkv, slots) if scales else None
    info = pageweaver.check_gpu_support(*args, k_token_scales=ts, v_token_scales=ts, precision=precision)
    assert info["kernel"] == "union4"
    assert info["vt_prepass"] is prepass
    assert (info["vt_capacity"] > 0) is prepass
    assert info["tile"] == tile
    # FP8X2 (the default) at G = 16, 8 and 4 on the pre-pass: the device picks the tile per
    # call (the lean kernel or, at G = 8 / 4, the dense tile, or the stacked tile); with
    # per-token scales the stacked tile always (faster than the other tile on every input),
    # in 'fp8' too at G = 8 / 4 (its second term 0: the dense tile's bytes)
    stacked_always = scales and prepass and (precision == "fp8x2" or g != 16)
    if precision == "fp8":  # at G = 16 with per-token scales: the device's choice per call
        fp8_per_call = scales and prepass and g == 16
        assert info["fp8x2_tile"] == ("stacked" if stacked_always else "per_call" if fp8_per_call else None)
    else:
        assert info["fp8x2_tile"] == ("stacked" if stacked_always else "per_call" if prepass else None)
    # the dense tiles regroup for 8-query unions, the padded and G = 16 tiles for 4-query
    # halves; the stacked tile always run: pairs at G = 16, 4-query halves at G = 8, 8-query
    # groups at G = 4
    if info["regroup"] != "identity":
        expect = {16: 2, 8: 4, 4: 8}[g] if stacked_always else 8 if tile == "dense" else 4
        assert info["regroup_group_size"] == expect
        assert info["regroup_window"] in (64, 128)
    else:
        assert info["regroup_window"] == 0


@pytest.mark.parametrize("n,regroup,window", [
    (1024, None, 0), (3072, None, 64), (16384, None, 128), (3072, "guarded", 128), (1024, "greedy", 128)])
def test_check_gpu_support_names_the_window(n, regroup, window):
    """regroup="auto" (the default) picks the window its cost model predicts saves more:
    identity order on a 1,024-query chunk, W64 at 3,072 (the regroup's cost about halves),
    W128 at 16,384; "greedy" and "guarded" regroup in windows of 128 always. The figures
    are the library's fitted constants (src/time_guard_constants.h): a refit may move the
    sizes, and this test then says so."""
    hkv, g, d, table_cols = 1, 16, 128, 640  # a 80K-token table: every chunk here fits
    slots = table_cols * 128
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    ids = torch.randint(0, 48 * 1024 // 128, (hkv, n, 16), generator=torch.Generator().manual_seed(n),
                        dtype=torch.int32)  # (so that the windows' groupings differ, for shapes.py below)
    args = (torch.empty((n, hkv * g, d), dtype=torch.bfloat16),
            torch.empty((slots, hkv, d), dtype=torch.float8_e4m3fn),
            torch.empty((slots, hkv, d), dtype=torch.float8_e4m3fn),
            ids, torch.arange(table_cols, dtype=torch.int32).view(1, table_cols),
            i32([0, n]), i32([48 * 1024 + n]), i32([48 * 1024]))
    info = pageweaver.check_gpu_support(*args, regroup=regroup)
    assert info["regroup_window"] == window
    assert (info["regroup"] == "identity") is (window == 0)
    # bench/shapes.py counts the call's steps in the window it runs (it passed the config's
    # PW_WINDOW_AUTO, -1, as a grouping window, which the reference refuses); on these ids the
    # windows' counts differ, so a count at another window fails here too
    import shapes
    t = {"topk_ids": args[3], "cu_seqlens_q": args[5], "kv_lens": args[6], "prefix_lens": args[7]}
    mode = pageweaver._lib.REGROUP_MODES[info["regroup"]]
    steps = shapes.executed_steps(t, info, 128)
    assert steps == shapes.union_visits(t, mode, window, 4, 128) > 0
    if window:
        assert steps != shapes.union_visits(t, mode, 192 - window, 4, 128)


def chunk_16k_args(rows_per_request=None):
    """check_gpu_support's tensors for one 16,384-query chunk at a 48K prefix (Hkv 1, G 16, a
    640-column table; zero ids: the plan reads no data), which regroups in windows of 128
    under "auto"; with rows_per_request, the same rows as 16,384 / rows_per_request requests
    of that many rows, each at a 48K prefix (8 rows: 2,048 requests, which regroup too)."""
    n, hkv, g, d, table_cols = 16384, 1, 16, 128, 640
    rows = rows_per_request or n
    r = n // rows
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return (torch.empty((n, hkv * g, d), dtype=torch.bfloat16),
            torch.empty((table_cols * 128, hkv, d), dtype=torch.float8_e4m3fn),
            torch.empty((table_cols * 128, hkv, d), dtype=torch.float8_e4m3fn),
            torch.zeros((hkv, n, 16), dtype=torch.int32),
            torch.arange(table_cols, dtype=torch.int32).repeat(r, 1),
            torch.arange(0, n + 1, rows, dtype=torch.int32), i32([48 * 1024 + rows] * r), i32([48 * 1024] * r))


@pytest.mark.parametrize("precision", ["fp8", "fp8x2"])
def test_max_seqlen_q_keeps_identity_order(precision):
    """max_seqlen_q (pw_plan_config_t.max_query_rows): where every request has at most 8
    rows, "auto" keeps identity order (up to the regroup's group no grouping changes the
    work, and from there to 8 the regroup measured costlier than what it saves; the launch
    is saved). Longer requests, None and 0 (not known) leave the time guard's choice (2,048
    requests of 8 rows regroup, as a 16,384-query chunk does); the modes that always
    regroup ignore it. A value the batch contradicts (N > R x max_seqlen_q: some request is
    longer) is refused. check_gpu_support reports the plan."""
    args = chunk_16k_args(rows_per_request=8)
    for rows in (None, 0, 8, 9, 15272, 2**40):
        info = pageweaver.check_gpu_support(*args, precision=precision, max_seqlen_q=rows)
        kept = rows == 8
        assert (info["regroup"] == "identity") is kept, (rows, info)
        assert (info["regroup_window"] == 0) is kept, (rows, info)
    info = pageweaver.check_gpu_support(*args, precision=precision, regroup="guarded", max_seqlen_q=8)
    assert info["regroup"] == "guarded"
    for rows in (1, 2, 7):  # 2,048 x 7 < 16,384
        with pytest.raises(ValueError, match=f"max_seqlen_q is {rows}, but q has 16384 rows in 2048 requests"):
            pageweaver.check_gpu_support(*args, precision=precision, max_seqlen_q=rows)
    one = chunk_16k_args()
    assert pageweaver.check_gpu_support(*one, precision=precision, max_seqlen_q=16384)["regroup"] == "guarded"
    with pytest.raises(ValueError, match="max_seqlen_q is 8"):
        pageweaver.check_gpu_support(*one, precision=precision, max_seqlen_q=8)
    for bad, error in ((-1, ValueError), (True, TypeError), (1.0, TypeError), ("4", TypeError),
                       (torch.tensor(4), TypeError)):
        with pytest.raises(error, match="max_seqlen_q"):
            pageweaver.check_gpu_support(*args, precision=precision, max_seqlen_q=bad)


def test_max_seqlen_q_plans_are_shared():
    """The plan cache keys on what the plan reads, not on the raw max_seqlen_q: every value
    above 8 (and 0, and any value with a mode other than "auto") is one plan with the
    hint's default, every value 1..8 one identity plan; a value past int32 is not wrapped
    into a small one."""
    from pageweaver import _op
    lib = pageweaver._lib
    assert lib.SHORT_REQUEST_ROWS == 8
    auto, guarded = lib.REGROUP_MODES["auto"], lib.REGROUP_MODES["guarded"]
    assert [_op._plan_max_rows(auto, m) for m in (0, 1, 5, 8, 9, 4096, 2**40)] == [0, 8, 8, 8, 0, 0, 0]
    assert _op._plan_max_rows(guarded, 1) == 0
    problem = lib.new_problem()  # 16,384 rows in 2,048 requests of 8 (consistent with any hint >= 8)
    problem.num_tokens, problem.num_requests = 16384, 2048
    problem.max_pages_per_request, problem.num_cache_pages = 640, 640
    key = ("test_max_seqlen_q_plans_are_shared",)
    plans = {m: _op._plan(key, problem, auto, lib.DEFAULT_WINDOW, lib.DEFAULT_KERNEL, m)
             for m in (0, 9, 100, 4096, 1, 3, 8)}
    assert len({id(p) for p in plans.values()}) == 2
    assert plans[0] is plans[4096] and plans[1] is plans[8] and plans[0] is not plans[1]
    assert plans[0].info(lib.DEFAULT_PRECISION).regroup == guarded
    assert plans[1].info(lib.DEFAULT_PRECISION).regroup == lib.REGROUP_MODES["identity"]
    for big in (2**32 + 1, 2**32 + 8, 2**40):  # read as 0, not wrapped to 1 / 8 / 0
        wrapped = lib.Plan(problem, auto, lib.DEFAULT_WINDOW, lib.DEFAULT_KERNEL, max_query_rows=big)
        assert wrapped.info(lib.DEFAULT_PRECISION).regroup == guarded, big


def test_max_seqlen_q_on_the_cpu():
    """The CPU reference takes max_seqlen_q and ignores it (a hint for the GPU's regroup):
    the same output for any value the batch allows, one below the longest request included
    (the check is N <= R x max_seqlen_q, what the shapes tell); a bad value, or one the
    shapes contradict, is refused there too."""
    p = random_problem(torch.Generator().manual_seed(11), max_requests=3, max_qlen=20)
    want = pageweaver.sparse_prefill(*op_args(p), k_scale=p["k_scale"], v_scale=p["v_scale"])
    n, r = p["q"].shape[0], p["cu_seqlens_q"].numel() - 1
    cu = p["cu_seqlens_q"].tolist()
    longest = max(b - a for a, b in zip(cu, cu[1:]))
    fits = -(-n // r)  # the smallest value the shapes allow
    assert fits <= longest
    for rows in (None, 0, fits, longest, 10**6):
        got = pageweaver.sparse_prefill(*op_args(p), k_scale=p["k_scale"], v_scale=p["v_scale"],
                                        max_seqlen_q=rows)
        assert torch.equal(got, want)
    for bad in (-2, fits - 1) if fits > 1 else (-2,):
        with pytest.raises(ValueError, match="max_seqlen_q"):
            pageweaver.sparse_prefill(*op_args(p), k_scale=p["k_scale"], v_scale=p["v_scale"], max_seqlen_q=bad)


def test_private_window_hook():
    """bench/shapes.py's W64 arms (G16greedy64 ...): the package's private _plan_window makes
    the plans W64 while it is set (guarded too, which otherwise takes 128), and
    check_gpu_support reports it; unset, the default again."""
    from pageweaver import _op
    args = chunk_16k_args()
    n, hkv, table_cols = 16384, 1, 640  # (chunk_16k_args' shapes)
    assert pageweaver.check_gpu_support(*args, regroup="guarded")["regroup_window"] == 128
    _op._plan_window = 64
    try:
        assert pageweaver.check_gpu_support(*args, regroup="guarded")["regroup_window"] == 64
        assert pageweaver.check_gpu_support(*args)["regroup_window"] == 64
    finally:
        _op._plan_window = None
    assert pageweaver.check_gpu_support(*args)["regroup_window"] == 128
    # The plan cache keys on the window: the hooked plan and the default one are distinct
    # cached plans of the same shapes, each with its window, and each is found again.
    lib = pageweaver._lib
    problem = lib.new_problem()
    problem.num_tokens, problem.num_kv_heads, problem.topk = n, hkv, 16
    problem.max_pages_per_request, problem.num_cache_pages = table_cols, table_cols
    key = ("test_private_window_hook", n)
    guarded, union4 = lib.REGROUP_MODES["guarded"], lib.KERNELS["union4"]
    default = _op._plan(key, problem, guarded, lib.DEFAULT_WINDOW, union4)
    _op._plan_window = 64
    try:
        hooked = _op._plan(key, problem, guarded, lib.DEFAULT_WINDOW, union4)
        assert _op._plan(key, problem, guarded, lib.DEFAULT_WINDOW, union4) is hooked
    finally:
        _op._plan_window = None
    assert hooked is not default
    assert _op._plan(key, problem, guarded, lib.DEFAULT_WINDOW, union4) is default
    assert hooked.info(lib.PRECISIONS["fp8x2"]).window == 64
    assert default.info(lib.PRECISIONS["fp8x2"]).window == 128


def test_check_gpu_support_applies_the_gpu_layout_rules():
    """Layouts the CPU reference takes but the GPU refuses are refused by check_gpu_support
    too (a fresh user's trial, 2026-12-02): a cache slot stride that is not a multiple of
    16, a cache 8 bytes off 16-byte alignment, a Q row stride not a multiple of 8, a
    broadcast Q."""
    n, hkv, g, d, slots = 256, 2, 16, 128, 4 * 128
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    fp8 = torch.float8_e4m3fn
    q = torch.zeros((n, hkv * g, d), dtype=torch.bfloat16)
    k = torch.zeros((slots, hkv, d), dtype=torch.uint8).view(fp8)
    rest = (torch.zeros((hkv, n, 16), dtype=torch.int32), torch.arange(4, dtype=torch.int32).view(1, 4),
            i32([0, n]), i32([n + 100]), i32([100]))
    assert pageweaver.check_gpu_support(q, k, k, *rest)["kernel"] == "union4"  # the baseline passes
    wide = torch.zeros((slots, 264), dtype=torch.uint8).view(fp8)[:, :256].unflatten(1, (hkv, d))
    off = torch.zeros(slots * hkv * d + 8, dtype=torch.uint8).view(fp8)[8:].view(slots, hkv, d)
    q_odd = torch.zeros((n, hkv * g * d + 1), dtype=torch.bfloat16)[:, :hkv * g * d].unflatten(1, (hkv * g, d))
    for qq, kk, what in ((q, wide, "multiples of 16"), (q, off, "16-byte aligned"),
                         (q_odd, k, "multiple of 8"), (q[:1].expand(n, hkv * g, d), k, "multiple of 8")):
        with pytest.raises(pageweaver.InvalidArgumentError, match=what):
            pageweaver.check_gpu_support(qq, kk, kk, *rest)


def test_check_gpu_support_reports_shapes_before_layouts():
    """An unsupported shape is UnsupportedError even when its layout would also be refused
    (the GPU call makes its plan first); N = 0 needs no layout; overlapping cache slots and
    page-table rows are refused as the C library refuses them (a review, 2026-12-02)."""
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    fp8 = torch.float8_e4m3fn
    n, slots = 64, 512
    for d in (8, 40):  # head dims the GPU does not run (and strides not multiples of 16)
        q = torch.zeros((n, 16, d), dtype=torch.bfloat16)
        k = torch.zeros((slots, 1, d), dtype=torch.uint8).view(fp8)
        with pytest.raises(pageweaver.UnsupportedError):
            pageweaver.check_gpu_support(q, k, k, torch.zeros((1, n, 16), dtype=torch.int32),
                                         torch.arange(4, dtype=torch.int32).view(1, 4), i32([0, n]),
                                         i32([n + 10]), i32([10]))
    wide = torch.zeros((slots, 264), dtype=torch.uint8).view(fp8)[:, :128].unflatten(1, (1, 128))
    empty = pageweaver.check_gpu_support(torch.zeros((0, 16, 128), dtype=torch.bfloat16), wide, wide,
                                         torch.zeros((1, 0, 16), dtype=torch.int32),
                                         torch.arange(4, dtype=torch.int32).view(1, 4), i32([0, 0]), i32([10]),
                                         i32([10]))
    assert empty["tile"] is None
    q = torch.zeros((n, 32, 128), dtype=torch.bfloat16)
    rest = (torch.zeros((2, n, 16), dtype=torch.int32), torch.arange(4, dtype=torch.int32).view(1, 4),
            i32([0, n]), i32([n + 10]), i32([10]))
    overlapping = torch.zeros((1, 2, 128), dtype=torch.uint8).view(fp8).expand(slots, 2, 128)
    with pytest.raises(ValueError, match="slot stride 0"):
        pageweaver.check_gpu_support(q, overlapping, overlapping, *rest)
    k = torch.zeros((slots, 2, 128), dtype=torch.uint8).view(fp8)
    shared_rows = torch.arange(4, dtype=torch.int32).view(1, 4).expand(2, 4)
    with pytest.raises(ValueError, match="row stride 0"):
        pageweaver.check_gpu_support(q, k, k, torch.zeros((2, n, 16), dtype=torch.int32), shared_rows,
                                     i32([0, 20, n]), i32([n + 10, n + 10]), i32([10, 10]))


def test_head_dim_mismatch_is_named():
    """q's D differing from the caches' is reported as such, not as a stride problem."""
    p = random_problem(torch.Generator().manual_seed(13), hkv=2)
    q = p["q"][:, :, :64].contiguous()
    with pytest.raises(ValueError, match="head dim 128.*q's is 64"):
        pageweaver.sparse_prefill(q, *op_args(p)[1:])


def test_page_size_64_on_the_cpu_equals_the_128_token_problem():
    """page_size=64 on the CPU reference (issue 16's page size): a problem whose queries
    select both 64-token halves of 128-token pages gives the 128-token problem's output
    exactly (precision='exact'); check_gpu_support takes P = 64 (Union4) and names the page
    size where the GPU refuses it (Union8, P = 32)."""
    gen = torch.Generator().manual_seed(64)
    n, hkv, g, d, prefix = 40, 1, 16, 128, 300
    kv = prefix + n
    pages = -(-kv // 128)
    q = torch.randn((n, hkv * g, d), generator=gen).to(torch.bfloat16)
    kc = (torch.randn((pages * 128, hkv, d), generator=gen) * 8).to(torch.float8_e4m3fn)
    vc = (torch.randn((pages * 128, hkv, d), generator=gen) * 8).to(torch.float8_e4m3fn)
    sel128 = torch.full((hkv, n, 16), -1, dtype=torch.int32)
    sel64 = torch.full((hkv, n, 16), -1, dtype=torch.int32)
    for i in range(n):
        cp = (prefix + i) // 128
        ids = sorted({cp, 0} | {int(x) for x in torch.randint(0, cp + 1, (2,), generator=gen)})
        sel128[0, i, :len(ids)] = torch.tensor(ids)
        halves = [2 * p + j for p in ids for j in (0, 1)]
        sel64[0, i, :len(halves)] = torch.tensor(halves)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    req = (i32([0, n]), i32([kv]), i32([prefix]))
    o128 = pageweaver.sparse_prefill(q, kc, vc, sel128, torch.arange(pages, dtype=torch.int32).view(1, -1),
                                     *req, precision="exact")
    o64 = pageweaver.sparse_prefill(q, kc, vc, sel64, torch.arange(2 * pages, dtype=torch.int32).view(1, -1),
                                    *req, precision="exact", page_size=64)
    assert torch.equal(o64, o128)
    # the same ids read as 128-token pages are a different problem
    other = pageweaver.sparse_prefill(q, kc, vc, sel64.clamp(max=pages - 1),
                                      torch.arange(pages, dtype=torch.int32).view(1, -1), *req, precision="exact")
    assert not torch.equal(other, o128)
    table64 = torch.arange(2 * pages, dtype=torch.int32).view(1, -1)
    info = pageweaver.check_gpu_support(q, kc, vc, sel64, table64, *req, page_size=64)
    assert info["kernel"] == "union4"
    with pytest.raises(pageweaver.UnsupportedError, match="P=64"):
        pageweaver.check_gpu_support(q, kc, vc, sel64, table64, *req, page_size=64, kernel="union8")
    with pytest.raises(pageweaver.UnsupportedError, match="P=32"):
        pageweaver.check_gpu_support(q, kc, vc, sel64, torch.arange(4 * pages, dtype=torch.int32).view(1, -1),
                                     *req, page_size=32)
    with pytest.raises(ValueError, match="page_size"):
        pageweaver.sparse_prefill(q, kc, vc, sel128, torch.arange(pages, dtype=torch.int32).view(1, -1), *req,
                                  page_size=0)


def test_plan_sweep_reports_the_plans_choices(tmp_path, capsys, monkeypatch):
    """bench/plan_sweep.py (host only): 432 plans; A-hot's shape regroups at W128 (also at
    Top-K 32 / 64), a 1,024-query chunk keeps identity order, and at Top-K 32 a 3,000-page
    table (past W128's direct bound, within W64's) regroups A-hot's rows at W64, with the
    installed constants, as pw_plan_info says; --against its own output reports no change,
    and a doctored line one flip."""
    import plan_sweep
    now = plan_sweep.sweep()
    assert len(now) == 432
    assert now["K16 FP8X2 hkv1 pages504 N15272"][:2] == ("regroup", 128)
    assert now["K32 FP8X2 hkv1 pages504 N15272"][:2] == ("regroup", 128)
    assert now["K64 FP8X2 hkv1 pages504 N15272"][:2] == ("regroup", 128)
    assert now["K32 FP8X2 hkv1 pages3000 N15272"][:2] == ("regroup", 64)
    assert now["K16 FP8X2 hkv1 pages504 N1024"][:2] == ("identity", 0)
    lines = [plan_sweep.line(k, v) for k, v in now.items()]
    same = tmp_path / "same.txt"
    same.write_text("\n".join(lines) + "\n")
    doctored = tmp_path / "doctored.txt"
    key = "K16 FP8X2 hkv1 pages504 N1024"
    doctored.write_text("\n".join(x.replace(": identity W0", ": regroup W64", 1) if x.startswith(key + ":") else x
                                  for x in lines) + "\n")
    monkeypatch.setattr(sys, "argv", ["plan_sweep.py", "--against", str(same)])
    assert plan_sweep.main() == 0
    assert "0 regroup / identity changes, 0 window-only changes" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["plan_sweep.py", "--against", str(doctored)])
    assert plan_sweep.main() == 0
    out = capsys.readouterr().out
    assert "K16 FP8X2 hkv1 pages504 N1024: was regroup W64, now identity W0" in out
    assert "1 regroup / identity changes" in out


def test_shapes_table_pages(tmp_path):
    """bench/shapes.py --table-pages: the page table is widened to that many columns (the
    extra ones page 0, past every kv_len), the capture's own columns unchanged, the caches
    sized for the real pages only; a width below the capture's is refused. With a 3,000-column
    table at Top-K 32 the time guard (check_gpu_support) picks W64 for 15,272 rows, and W128
    with the capture's own 504 columns (the forty-third session's per-window factors)."""
    import shapes
    n, pages = 15272, 504
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, pages, (1, n, 32), generator=gen, dtype=torch.int32)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    path = tmp_path / "cap.safetensors"
    pageweaver.save_capture(str(path), ids, i32([0, n]), i32([pages * 128 - n]), i32([pages * 128]))
    b = shapes.build(str(path), torch.device("cpu"), 1, 3000)
    table = b["rest"][1]
    assert table.shape == (1, 3000)
    assert torch.equal(table[0, :pages], torch.arange(pages, dtype=torch.int32))
    assert int(table[0, pages:].abs().sum()) == 0
    assert b["kc"].shape[0] == pages * 128
    plain = shapes.build(str(path), torch.device("cpu"), 1)
    assert plain["rest"][1].shape == (1, pages)
    with pytest.raises(SystemExit, match="already has 504 columns"):
        shapes.build(str(path), torch.device("cpu"), 1, 300)
    for bb, window in ((b, 64), (plain, 128)):
        q = torch.empty((n, 16, 128), dtype=torch.bfloat16)
        info = pageweaver.check_gpu_support(q, bb["kc"], bb["vc"], *bb["rest"])
        assert info["regroup"] != "identity" and info["regroup_window"] == window


def test_private_vt_max_pages_hook():
    """bench/shapes.py's fallback arms (G<g>fb): the private hooks make a plan with the
    pre-pass forced on and one tile per KV head (pw_plan_config_t.vt_max_pages = 1), cached
    apart from the default plan; the library's rule without them (docs/shapes.md)."""
    import shapes
    from pageweaver import _lib, _op
    problem = _op._problem(4096, 1, 1, 16, 128, 16, 8192, 8192, 0.088, 128)
    auto = _lib.REGROUP_MODES["auto"]
    kern = _lib.KERNELS["union4"]
    fp8x2 = _lib.PRECISIONS["fp8x2"]
    default = _op._plan(("t", 1), problem, auto, _lib.DEFAULT_WINDOW, kern)
    info = default.info(fp8x2)
    assert info.vt_prepass == 1 and info.vt_capacity == 4096 * 16 // 64  # wider table than tiles: on
    _op._plan_flags = shapes.arm_flags("G16fb")  # PW_PLAN_VT_PREPASS, as the G<g>vt / G<g>fb arms
    try:
        vt = _op._plan(("t", 1), problem, auto, _lib.DEFAULT_WINDOW, kern)
        _op._plan_vt_max_pages = 1  # ... with one tile (the G<g>fb arms)
        fb = _op._plan(("t", 1), problem, auto, _lib.DEFAULT_WINDOW, kern)
    finally:
        _op._plan_flags, _op._plan_vt_max_pages = 0, 0
    assert len({id(default), id(vt), id(fb)}) == 3
    assert vt.info(fp8x2).vt_capacity == 2048  # forced: C = min(entries, the tile limit)
    info = fb.info(fp8x2)
    assert info.vt_prepass == 1 and info.vt_capacity == 1
    assert _op._plan(("t", 1), problem, auto, _lib.DEFAULT_WINDOW, kern) is default


def test_float32_bounds_of_the_scales_exactly():
    """The float32 range checks are plain comparisons (torch.compile traces them; they used
    ctypes): softmax_scale x is refused iff x rounds to 0 or inf as a float32, i.e. x <=
    2^-150 (half the smallest subnormal: a tie to even, 0) or x >= 2^128 - 2^103; each
    bound checked against numpy's own rounding, and k_scale's overflow bound too."""
    import math
    np = pytest.importorskip("numpy")
    p = random_problem(torch.Generator().manual_seed(17), hkv=1, g=16, d=128, k=16)
    lo, hi = 2.0 ** -150, 2.0 ** 128 - 2.0 ** 103
    assert np.float32(lo) == 0 and np.float32(math.nextafter(lo, 1)) > 0
    assert np.isinf(np.float32(hi)) and np.isfinite(np.float32(math.nextafter(hi, 0)))
    for bad in (lo, hi, math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="softmax_scale"):
            pageweaver.check_gpu_support(*op_args(p), softmax_scale=bad)
    for good in (math.nextafter(lo, 1), math.nextafter(hi, 0)):
        pageweaver.check_gpu_support(*op_args(p), softmax_scale=good)
    for bad in (hi, -hi, math.nan):
        with pytest.raises(ValueError, match="k_scale"):
            run(p, k_scale=bad)
    run(p, k_scale=math.nextafter(hi, 0) / 2**120)  # finite as a float32 (and not huge)


def test_page_size_types():
    """page_size: any integer type (NumPy's too: it was refused as "np.int64(128): an int in
    1..2^20", a review, 2026-12-06), TypeError for bools, floats and strings, ValueError
    out of range."""
    np = pytest.importorskip("numpy")
    p = random_problem(torch.Generator().manual_seed(19), hkv=1, g=4, d=32, k=4)
    want = run(p)
    assert torch.equal(run(p, page_size=np.int64(128)), want)
    assert torch.equal(run(p, page_size=np.int32(128)), want)
    for bad in (True, 128.0, "128"):
        with pytest.raises(TypeError, match="page_size"):
            run(p, page_size=bad)
    for bad in (0, -128, 2**20 + 1):
        with pytest.raises(ValueError, match="page_size is"):
            run(p, page_size=bad)
