"""The custom op under torch's tracing machinery, on the CPU: opcheck, fake / meta shapes,
torch.compile(fullgraph=True) of a module calling the op."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import pageweaver
from problems import op_args, random_problem


@pytest.fixture
def p(seed):
    return random_problem(torch.Generator().manual_seed(seed), hkv=2, g=4, d=32, k=4)


def test_opcheck(p):
    """Fake implementation, autograd registration and AOT dispatch consistency. (opcheck's
    test_schema multiplies every input, which torch cannot do for float8 on the CPU; the
    declared mutation is checked by test_only_declared_outputs_change.)"""
    n, hq, d = p["q"].shape
    out = torch.empty((n, hq, d), dtype=torch.bfloat16)
    lse = torch.empty((n, hq), dtype=torch.float32)
    bad = torch.zeros(1, dtype=torch.int32)
    args = (*op_args(p), None, torch.tensor([p["v_scale"]]), p["k_scale"], 0.0, 0.0, 1, 2, 1,
            out, lse, bad)
    torch.library.opcheck(torch.ops.pageweaver.sparse_prefill_out.default, args,
                          test_utils=("test_faketensor", "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))


def test_only_declared_outputs_change(p):
    inputs = [t.clone() for t in op_args(p)]
    out = torch.full(p["q"].shape, 3.0, dtype=torch.bfloat16)
    bad = torch.zeros(1, dtype=torch.int32)
    pageweaver.sparse_prefill(*op_args(p), out=out, bad_page_count=bad)
    for before, after in zip(inputs, op_args(p)):
        assert torch.equal(before.view(torch.uint8), after.view(torch.uint8))
    assert not torch.equal(out, torch.full_like(out, 3.0))


def test_fake_tensor_shapes(p):
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in p.items()}
        o, lse = pageweaver.sparse_prefill(*op_args(fake), return_lse=True)
        assert o.shape == p["q"].shape and o.dtype == torch.bfloat16
        assert lse.shape == p["q"].shape[:2] and lse.dtype == torch.float32
        with pytest.raises(TypeError, match="topk_idx"):  # checks run on fake tensors too
            pageweaver.sparse_prefill(*op_args(dict(fake, topk_idx=fake["topk_idx"].long())))


def test_meta_tensors(p):
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in p.items()}
    o = pageweaver.sparse_prefill(*op_args(meta))
    assert o.device.type == "meta" and o.shape == p["q"].shape


class Layer(torch.nn.Module):
    """A sparse-attention layer: projection, the op, output projection."""

    def __init__(self, hq, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d, dtype=torch.bfloat16)
        self.hq, self.d = hq, d

    def forward(self, x, k_cache, v_cache, topk, page_table, cu, kv_lens, prefix, k_scale):
        q = self.proj(x)
        o, lse = pageweaver.sparse_prefill(q, k_cache, v_cache, topk, page_table, cu, kv_lens,
                                           prefix, k_scale=k_scale, v_scale=0.015625,
                                           return_lse=True, precision="fp8x2")
        return self.proj(o) * 2, lse


def test_torch_compile_fullgraph_cpu(p):
    torch.manual_seed(0)
    layer = Layer(p["q"].shape[1], p["q"].shape[2])
    args = (*op_args(p), torch.tensor(p["k_scale"]))
    with torch.no_grad():
        want_o, want_lse = layer(*args)
        compiled = torch.compile(layer, fullgraph=True)
        got_o, got_lse = compiled(*args)
    torch.testing.assert_close(got_o, want_o, rtol=0, atol=0)
    torch.testing.assert_close(got_lse, want_lse, rtol=0, atol=0, equal_nan=True)


def test_eager_fast_path_equals_the_dispatched_op(p):
    """Plain eager calls run the implementation directly; the registered op gives the same
    bits and both bump the version counter of `out`."""
    out = torch.empty(p["q"].shape, dtype=torch.bfloat16)
    v0 = out._version
    a = pageweaver.sparse_prefill(*op_args(p), k_scale=p["k_scale"], v_scale=p["v_scale"], out=out).clone()
    assert out._version > v0
    b = torch.empty_like(out)
    torch.ops.pageweaver.sparse_prefill_out(*op_args(p), None, None, p["k_scale"], p["v_scale"],
                                            0.0, pageweaver._lib.DEFAULT_PRECISION,
                                            pageweaver._lib.DEFAULT_REGROUP,
                                            pageweaver._lib.DEFAULT_KERNEL, b, None, None)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_torch_compile_with_two_page_sizes_cpu():
    """One compiled function called with two page sizes: Dynamo makes page_size a SymInt,
    which the fake implementation's checks accept (a review, 2026-12-02: they raised)."""
    gen = torch.Generator().manual_seed(5)
    n, hkv, g, d, prefix = 24, 1, 16, 128, 100
    kv = prefix + n
    q = torch.randn((n, hkv * g, d), generator=gen).to(torch.bfloat16)
    kc = (torch.randn((256, hkv, d), generator=gen) * 8).to(torch.float8_e4m3fn)
    vc = (torch.randn((256, hkv, d), generator=gen) * 8).to(torch.float8_e4m3fn)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731

    def call(topk, table, page_size):
        return pageweaver.sparse_prefill(q, kc, vc, topk, table, i32([0, n]), i32([kv]), i32([prefix]),
                                         page_size=page_size)

    compiled = torch.compile(call, fullgraph=True)
    for page_size in (64, 32, 16):
        pages = 256 // page_size
        topk = torch.randint(0, -(-kv // page_size), (hkv, n, 16), generator=gen, dtype=torch.int32)
        table = torch.arange(pages, dtype=torch.int32).view(1, pages)
        want = call(topk, table, page_size)
        got = compiled(topk, table, page_size)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), page_size


def test_torch_compile_with_changing_host_scalars_cpu():
    """torch.compile(fullgraph=True) of a call whose host scalars change between calls, as
    an engine's do (a review, 2026-12-06): an explicit softmax_scale (both adapters pass
    one; it went through ctypes, which Dynamo cannot trace), a float k_scale / v_scale
    (a SymFloat once it changes: math.isfinite failed on it, and as the op's float it was
    specialised per value) and max_seqlen_q (operator.index pinned each value: a graph per
    batch, fullgraph failing after 8). Now a few graphs in all, each output the eager
    call's bits."""
    from torch._dynamo.utils import counters
    p = random_problem(torch.Generator().manual_seed(1), hkv=2, g=4, d=32, k=4, max_qlen=6,
                       max_requests=4)
    n, r = p["q"].shape[0], p["cu_seqlens_q"].numel() - 1
    rest = op_args(p)[1:]

    def call(q, max_rows, ks, vs):
        return pageweaver.sparse_prefill(q, *rest, max_seqlen_q=max_rows, k_scale=ks, v_scale=vs,
                                         softmax_scale=0.125) * 2

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    values = [6, 7, 8, 9, 10, 11, 12, 13, 14, 100, 6, 2**40]
    assert min(values) * r >= n  # every value is one the batch allows
    for i, max_rows in enumerate(values):
        ks, vs = 0.01 * (i + 1), 0.02 + 0.001 * i
        got = compiled(p["q"], max_rows, ks, vs)
        want = call(p["q"], max_rows, ks, vs)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), max_rows
    # the first (static) graph, then one per bucket of max_seqlen_q (<= 8, above, past int32)
    assert counters["stats"]["unique_graphs"] <= 4, dict(counters["stats"])
    # The default backend (inductor) with the adapters' explicit softmax_scale.
    torch._dynamo.reset()
    got = torch.compile(call, fullgraph=True)(p["q"], 6, 0.01, 0.02)
    assert torch.equal(got.view(torch.int16), call(p["q"], 6, 0.01, 0.02).view(torch.int16))


def test_engine_adapters_compile_fullgraph_cpu():
    """Both engine adapters inside torch.compile(fullgraph=True), as engines compile their
    attention backends: no graph break (the adapters' error renaming is a context manager,
    since 2026-12-06), and the outputs are the eager call's bits."""
    import test_adapters as T
    from pageweaver.integrations import sglang, vllm
    gen = torch.Generator().manual_seed(3)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = T.vllm_case(gen, hkv=2, g=2, d=32)

    def v(q, out):
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.08, out)
        return out

    want = v(q, torch.empty(q.shape, dtype=torch.bfloat16))
    got = torch.compile(v, fullgraph=True)(q, torch.empty(q.shape, dtype=torch.bfloat16))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    c, table = T.sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)

    def s(q):
        return sglang.flash_prefill_with_gqa_share_sparse(
            q, c["k_cache"], c["v_cache"], None, c["req_to_token"], c["slot_ids"], c["topk_idx"], 1, T.P,
            c["cu_seqlens"], c["seq_lens"], c["prefix_lens"], 40, page_table=table, sm_scale=0.1)

    want = s(c["q"])
    got = torch.compile(s, fullgraph=True)(c["q"])
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_engine_adapter_errors_under_compile_cpu():
    """A bad engine argument under torch.compile(fullgraph=True) still shows the message
    (the adapters' eager-only renaming leaves it alone: assigning e.args while compiling
    replaced it with Dynamo's "Unsupported attribute assignment", a review, 2026-12-06)."""
    import test_adapters as T
    from pageweaver.integrations import vllm
    gen = torch.Generator().manual_seed(3)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = T.vllm_case(gen, hkv=2, g=2, d=32)
    assert q.shape[0] > cu.numel() - 1  # so that max_query_len 1 contradicts the batch

    def v(q, out):
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 1, 2, 0.08, out)
        return out

    with pytest.raises(Exception) as info:
        torch.compile(v, fullgraph=True)(q, torch.empty(q.shape, dtype=torch.bfloat16))
    assert "max_seqlen_q is 1, but q has" in str(info.value), str(info.value)[:500]
