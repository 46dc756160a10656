"""pageweaver.integrations on synthetic engine tensors (CPU): each adapter's output equals
pageweaver.sparse_prefill on the equivalent token-major caches and page table, bitwise."""
import numpy
import pytest
import torch

import pageweaver
from pageweaver.integrations import sglang, vllm
from pageweaver.integrations._common import engine_names
from problems import P


def packed(gen, *, b, hkv, g, d, k, max_qlen=30, max_prefix=400, page=P):
    """Requests, Q and Top-K ids of pages of `page` tokens (engine conventions: seq_lens =
    KV length)."""
    qlen = torch.randint(1, max_qlen + 1, (b,), generator=gen)
    prefix = torch.randint(0, max_prefix + 1, (b,), generator=gen)
    seq = prefix + qlen + torch.randint(0, 5, (b,), generator=gen)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), qlen.cumsum(0)])
    n = int(cu[-1])
    max_pages = int((seq.max() + page - 1) // page)
    topk = torch.randint(-1, max_pages + 1, (hkv, n, k), generator=gen, dtype=torch.int32)
    q = torch.randn((n, hkv * g, d), generator=gen).to(torch.bfloat16)
    i32 = lambda t: t.to(torch.int32)  # noqa: E731
    return q, topk, i32(cu), i32(seq), i32(prefix)


def fp8(shape, gen):
    return (torch.randn(shape, generator=gen) * 32).to(torch.float8_e4m3fn)


def bits(t):
    return t.view(torch.int16)


# ---- SGLang ---------------------------------------------------------------------------
def sglang_case(gen, *, b=3, hkv=2, g=4, d=64, k=6, page=P):
    q, topk, cu, seq, prefix = packed(gen, b=b, hkv=hkv, g=g, d=d, k=k, page=page)
    pool_pages = 64 * P // page
    num_slots = pool_pages * page + 1  # SGLang pools carry a padding slot: not a whole page
    k_cache, v_cache = fp8((num_slots, hkv, d), gen), fp8((num_slots, hkv, d), gen)
    max_reqs, max_context = b + 3, 700  # not a multiple of 128
    req_to_token = torch.randint(0, num_slots, (max_reqs, max_context), generator=gen, dtype=torch.int32)
    rows = torch.randperm(max_reqs, generator=gen)[:b]
    phys = torch.randperm(pool_pages, generator=gen)
    pages = -(-max_context // page)
    table = torch.full((b, pages), -1, dtype=torch.int32)
    used = 0
    for i in range(b):
        for p in range(-(-int(seq[i]) // page)):
            where = int(phys[used])
            used += 1
            table[i, p] = where
            lo, hi = p * page, min((p + 1) * page, int(seq[i]))
            req_to_token[rows[i], lo:hi] = where * page + torch.arange(hi - lo, dtype=torch.int32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, req_to_token=req_to_token,
                slot_ids=rows.to(torch.int64), topk_idx=topk, cu_seqlens=cu, seq_lens=seq,
                prefix_lens=prefix), table


def sglang_call(c, sink=None, **kw):
    """SGLang's positional form: (q, k_cache, v_cache, sink, req_to_token, slot_ids,
    topk_idx, block_size_q, block_size_k, cu_seqlens, seq_lens, prefix_lens, max_seqlen_q)."""
    block_size_k = kw.pop("block_size_k", P)
    max_q = int((c["cu_seqlens"][1:] - c["cu_seqlens"][:-1]).max())
    return sglang.minimax_sparse_prefill(c["q"], c["k_cache"], c["v_cache"], sink,
                                         c["req_to_token"], c["slot_ids"], c["topk_idx"], 1, block_size_k,
                                         c["cu_seqlens"], c["seq_lens"], c["prefix_lens"], max_q, **kw)


def direct(c, table, **kw):
    return pageweaver.sparse_prefill(c["q"], c["k_cache"], c["v_cache"], c["topk_idx"], table,
                                     c["cu_seqlens"], c["seq_lens"], c["prefix_lens"], **kw)


def test_sglang_page_table_and_output(seed):
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen)
    errors = torch.zeros(1, dtype=torch.int64)
    got = sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"], c["seq_lens"],
                                              layout_errors=errors)
    assert torch.equal(got, table), f"seed {seed}"
    assert int(errors) == 0
    o = sglang_call(c, k_scale=0.03125, v_scale=torch.tensor(0.03125), sm_scale=0.1, q_scale=0.5)
    want = direct(c, table, k_scale=0.03125, v_scale=0.03125, softmax_scale=0.1 * 0.5)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"
    # int64 request arrays (engines use both) and a precomputed page table: same bits.
    o2 = sglang_call(dict(c, seq_lens=c["seq_lens"].long(), cu_seqlens=c["cu_seqlens"].long()),
                     page_table=table, k_scale=0.03125, v_scale=0.03125, sm_scale=0.1, q_scale=0.5)
    assert torch.equal(bits(o2), bits(want))


def test_sglang_bad_pages_are_counted_and_contribute_nothing(seed):
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=1, g=2, d=32, k=8)
    r2t, row = c["req_to_token"], int(c["slot_ids"][0])
    first = int(r2t[row, 0])
    r2t[row, 0], r2t[row, 1] = first + 1, first  # page 0 of request 0: not one run
    if int(c["seq_lens"][1]) > P:  # page 1 of request 1: one run, but not 128-aligned
        row1 = int(c["slot_ids"][1])
        r2t[row1, P:2 * P] = r2t[row1, P:2 * P] + 64
        bad_pages = 2
        table[1, 1] = -1
    else:
        bad_pages = 1
    table[0, 0] = -1
    errors = torch.zeros(1, dtype=torch.int32)
    bad = torch.zeros(1, dtype=torch.int32)
    o = sglang_call(c, layout_errors=errors, bad_page_count=bad)
    assert int(errors) == bad_pages, f"seed {seed}"
    want_bad = torch.zeros(1, dtype=torch.int32)
    want = direct(c, table, bad_page_count=want_bad)
    assert torch.equal(bits(o), bits(want)) and int(bad) == int(want_bad), f"seed {seed}"


def test_sglang_sink_keys(seed):
    """SGLang's sink (per-Q-head keys [Hq, D]) goes to sparse_prefill(sink_keys=...): the same
    bits; a float32 sink is rounded to bfloat16 first."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    sink = torch.randn(4, 32, generator=gen) * 100  # logits of std ~100, on the scores' scale here
    o = sglang_call(c, sink)
    want = direct(c, table, softmax_scale=32 ** -0.5, sink_keys=sink.to(torch.bfloat16))
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"
    assert not torch.equal(bits(o), bits(direct(c, table, softmax_scale=32 ** -0.5))), f"seed {seed}"


def test_sglang_per_token_scales(seed):
    """Per-token k_scale / v_scale [Hkv, slots] pass through as k_token_scales /
    v_token_scales: the same bits as the direct call with them."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    slots = c["k_cache"].shape[0]
    kt = torch.exp2(torch.rand(2, slots, generator=gen) * 2 - 1)
    vt = torch.exp2(torch.rand(2, slots, generator=gen) * 6 - 3)
    o = sglang_call(c, k_scale=kt, v_scale=vt.T.contiguous().T)  # different strides: made one
    want = direct(c, table, softmax_scale=32 ** -0.5, k_token_scales=kt, v_token_scales=vt)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"


def test_sglang_pages_of_64_tokens(seed):
    """block_size_k=64: the page table of 64-token pages (a run aligned to 64 but not to 128
    is a good page) and the same bits as sparse_prefill(page_size=64) on it."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, page=64)
    errors = torch.zeros(1, dtype=torch.int64)
    got = sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"], c["seq_lens"],
                                              layout_errors=errors, page_size=64)
    assert torch.equal(got, table) and int(errors) == 0, f"seed {seed}"
    assert bool((table % 2 == 1).any()), "the case should hold pages that are not 128-aligned"
    o = sglang_call(c, block_size_k=64, k_scale=0.03125, v_scale=0.0625)
    want = direct(c, table, k_scale=0.03125, v_scale=0.0625, page_size=64)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"
    o = sglang_call(c, block_size_k=numpy.int64(64), k_scale=0.03125, v_scale=0.0625)  # any integer type
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"
    # Read as 128-token pages, the same mapping is a layout error on most pages.
    sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"], c["seq_lens"],
                                        layout_errors=errors)
    assert int(errors) > 0, f"seed {seed}"


def test_sglang_refuses_what_it_cannot_do():
    c, _ = sglang_case(torch.Generator().manual_seed(3), b=1, hkv=1, g=2, d=32, k=4)
    with pytest.raises(TypeError, match="sink"):
        sglang_call(c, [[0.0] * 32] * 2)
    with pytest.raises(ValueError, match="sink"):  # logits instead of keys
        sglang_call(c, torch.zeros(2))
    # Keys of the wrong shape name SGLang's argument and q's [Hq, D] (they were reported
    # as sparse_prefill's sink_keys: a review, 2026-12-06).
    hq, d = c["q"].shape[1:]
    for shape in ((hq, 16), (1, d), (hq + 1, d)):
        with pytest.raises(ValueError, match=rf"sink: shape \[{shape[0]}, {shape[1]}\].*\[{hq}, {d}\]"):
            sglang_call(c, torch.zeros(shape))
    # The block form (several query rows per Top-K row) and the caches PageWeaver cannot read.
    for bad in (2, 0, None, 1.0, True):
        with pytest.raises(ValueError, match="block_size_q"):
            sglang.flash_prefill_with_gqa_share_sparse(c["q"], c["k_cache"], c["v_cache"], None,
                                                       c["req_to_token"], c["slot_ids"], c["topk_idx"], bad, P,
                                                       c["cu_seqlens"], c["seq_lens"], c["prefix_lens"], 8)
    for name in ("per_query_topk_idx", "query_group_mask"):
        with pytest.raises(ValueError, match=name):
            sglang_call(c, **{name: c["topk_idx"]})
    with pytest.raises(TypeError, match="k_cache"):  # SGLang's default bfloat16 KV cache
        sglang_call(dict(c, k_cache=c["k_cache"].to(torch.bfloat16), v_cache=c["v_cache"].to(torch.bfloat16)))
    with pytest.raises(ValueError, match="k_scale"):
        sglang_call(c, k_scale=torch.ones(3))
    with pytest.raises(TypeError, match="bfloat16"):  # float16 (FP8 is SGLang's quantised Q: test_sglang_fp8_q)
        sglang_call(dict(c, q=c["q"].to(torch.float16)))
    for bad in (0, 64.0, True, 2 ** 21, "64"):
        with pytest.raises(ValueError, match="block_size_k"):
            sglang_call(c, block_size_k=bad)
    with pytest.raises(ValueError, match="page_size"):
        sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"], c["seq_lens"],
                                            page_size=0)
    # Per-token scales of the wrong shape: the error names SGLang's argument and the shape
    # it needs ([Hkv, >= slots]), not the keyword it is passed on as.
    slots = c["k_cache"].shape[0]
    with pytest.raises(ValueError, match=rf"k_scale: shape \[{slots}, 1\].*\[1, >= {slots}\]"):
        sglang_call(c, k_scale=torch.ones(slots, 1))
    with pytest.raises(TypeError, match="v_scale: list"):
        sglang_call(c, v_scale=[1.0])
    with pytest.raises(TypeError, match="q_scale: a meta tensor"):
        sglang_call(c, q_scale=torch.ones((), device="meta"))
    # A scale that folds to 0 / NaN: the error names SGLang's arguments, not softmax_scale.
    for bad in (0.0, float("nan"), -0.75, float("inf")):
        with pytest.raises(ValueError, match="sm_scale 0.1 x q_scale"):
            sglang_call(c, sm_scale=0.1, q_scale=bad)
        with pytest.raises(ValueError, match="sm_scale 0.1 x q_scale"):  # also where it is folded into an FP8 q
            sglang_call(dict(c, q=c["q"].to(torch.float8_e4m3fn)), sm_scale=0.1, q_scale=bad)


def test_sglang_engine_call_forms(seed):
    """SGLang's call of flash_prefill_with_gqa_share_sparse, positional and by keyword as its
    ops wrapper makes it (block_size_q, max_seqlen_q, use_tma, cu_seqblocks_q, ...): the
    same bits as the direct call; minimax_sparse_prefill is the same function."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    want = direct(c, table, k_scale=0.5, v_scale=0.25, softmax_scale=0.1 * 0.5)
    assert sglang.minimax_sparse_prefill is sglang.flash_prefill_with_gqa_share_sparse
    lead = (c["q"], c["k_cache"], c["v_cache"], None, c["req_to_token"], c["slot_ids"], c["topk_idx"], 1, P,
            c["cu_seqlens"], c["seq_lens"], c["prefix_lens"], 64)
    o = sglang.flash_prefill_with_gqa_share_sparse(*lead, sm_scale=0.1, use_tma=True, q_scale=0.5, k_scale=0.5,
                                                   v_scale=0.25)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"
    # Past max_seqlen_q SGLang's versions order differently: keywords only, never misread.
    with pytest.raises(TypeError):
        sglang.flash_prefill_with_gqa_share_sparse(*lead, 0.1)
    with pytest.raises(TypeError):
        sglang.flash_prefill_with_gqa_share_sparse(*lead, None, None, sm_scale=0.1)
    o = sglang.flash_prefill_with_gqa_share_sparse(
        q=c["q"], k_cache=c["k_cache"], v_cache=c["v_cache"], sink=None, req_to_token=c["req_to_token"],
        slot_ids=c["slot_ids"], topk_idx=c["topk_idx"], block_size_q=1, block_size_k=P,
        cu_seqlens=c["cu_seqlens"], seq_lens=c["seq_lens"], prefix_lens=c["prefix_lens"], max_seqlen_q=64,
        sm_scale=0.1, use_tma=False, cu_seqblocks_q=c["cu_seqlens"], max_seqblock_q=64, q_scale=0.5,
        k_scale=0.5, v_scale=0.25, safe_slots=True)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"


def test_sglang_fp8_q(seed):
    """SGLang's FP8 attention-GEMM mode passes q = Q / q_scale in float8_e4m3fn with q_scale:
    multiplied back into bfloat16, q_scale not applied to the logits again (a review,
    2026-12-05: a bfloat16 Q with the engine's q_scale kept scaled the logits twice)."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    q8 = (c["q"].float() / 0.75).to(torch.float8_e4m3fn)
    o = sglang_call(dict(c, q=q8), sm_scale=0.1, q_scale=0.75)
    want = direct(dict(c, q=(q8.float() * 0.75).to(torch.bfloat16)), table, softmax_scale=0.1)
    assert torch.equal(bits(o), bits(want)), f"seed {seed}"


def test_sglang_layout_refused_without_a_counter(seed):
    """SGLang with --page-size 1: its allocator gives slots from 1, so even a contiguous
    request is not one P-aligned run per page. Without layout_errors= the call refuses it
    (it used to map every page outside the cache: all-zero output, silently); with it the
    pages are counted and contribute nothing, as documented; an aligned layout passes."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=1, g=2, d=32, k=4)
    shifted = c["req_to_token"].clone()
    for i in range(2):
        row = int(c["slot_ids"][i])
        shifted[row, : int(c["seq_lens"][i])] = 1 + torch.arange(int(c["seq_lens"][i]), dtype=torch.int32) + 300 * i
    with pytest.raises(ValueError, match="--page-size 128"):
        sglang_call(dict(c, req_to_token=shifted))
    errors = torch.zeros(1, dtype=torch.int64)
    sglang_call(dict(c, req_to_token=shifted), layout_errors=errors)
    assert int(errors) == sum(-(-int(n) // P) for n in c["seq_lens"]), f"seed {seed}"
    o = sglang_call(c)  # aligned: checked, accepted
    assert torch.equal(bits(o), bits(direct(c, table, softmax_scale=32 ** -0.5))), f"seed {seed}"


# ---- vLLM -----------------------------------------------------------------------------
def vllm_case(gen, *, b=3, hkv=2, g=4, d=64, k=6, extra_heads=0, page=P):
    q, topk, cu, seq, prefix = packed(gen, b=b, hkv=hkv, g=g, d=d, k=k, page=page)
    nb = 40 * P // page
    store = fp8((nb, hkv + extra_heads, page, 2 * d), gen)
    kv_cache = store[:, :hkv]  # extra_heads > 0: a padded (strided) cache
    max_blocks = int((seq.max() + page - 1) // page) + 1
    block_table = torch.randperm(nb, generator=gen)[: b * max_blocks].view(b, max_blocks).to(torch.int32)
    # The same data token-major: K[b * page + t, h] = kv_cache[b, h, t, :D].
    k_tm = kv_cache[..., :d].permute(0, 2, 1, 3).reshape(nb * page, hkv, d).contiguous()
    v_tm = kv_cache[..., d:].permute(0, 2, 1, 3).reshape(nb * page, hkv, d).contiguous()
    return q, kv_cache, topk, block_table, cu, seq, prefix, k_tm, v_tm


@pytest.mark.parametrize("hkv,g,d,extra", [(1, 16, 128, 0), (2, 4, 64, 0), (2, 2, 32, 1)])
def test_vllm_interleaved_cache(seed, hkv, g, d, extra):
    gen = torch.Generator().manual_seed(seed)
    q, kv_cache, topk, bt, cu, seq, prefix, k_tm, v_tm = vllm_case(gen, hkv=hkv, g=g, d=d, extra_heads=extra)
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)
    ks, vs = torch.tensor([0.03125]), torch.tensor([0.0625])
    ret = vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, hkv, 0.08, out, ks, vs)
    assert ret is None
    want = pageweaver.sparse_prefill(q, k_tm, v_tm, topk, bt, cu, seq, prefix, k_scale=ks,
                                     v_scale=vs, softmax_scale=0.08)
    assert torch.equal(bits(out), bits(want)), f"seed {seed}"


@pytest.mark.parametrize("page", [P, 64])
def test_vllm_two_plane_cache(seed, page):
    """kv_cache [num_blocks, 2, P, Hkv, D] (K in [:, 0], V in [:, 1], token-major inside a
    block, the layout of vLLM's other MiniMax-M3 backends): read in place through strides,
    the same bits as the interleaved layout holding the same values, with per-tensor and
    per-token scales."""
    gen = torch.Generator().manual_seed(seed)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=2, g=2, d=32, page=page)
    d = kv_cache.shape[-1] // 2
    two = torch.stack([kv_cache[..., :d].permute(0, 2, 1, 3), kv_cache[..., d:].permute(0, 2, 1, 3)], dim=1)
    assert two.shape == (kv_cache.shape[0], 2, page, 2, d) and two.is_contiguous()
    slots = kv_cache.shape[0] * page
    kt = torch.exp2(torch.rand(2, slots, generator=gen) * 2 - 1)
    for scales in ((0.5, 0.25), (kt, kt.flip(1))):
        want = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)
        got = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.1, want, *scales)
        vllm.minimax_m3_sparse_attn(q, two, topk, bt, cu, seq, prefix, 30, 2, 0.1, got, *scales)
        assert not torch.isnan(want.float()).any()
        assert torch.equal(bits(got), bits(want)), f"seed {seed}, page {page}"
    with pytest.raises(ValueError, match="num_kv_heads"):
        vllm.minimax_m3_sparse_attn(q, two, topk, bt, cu, seq, prefix, 30, 1, 0.1, got)
    with pytest.raises(ValueError, match=r"2 \(K, V\)"):
        vllm.minimax_m3_sparse_attn(q, torch.cat([two, two], 1), topk, bt, cu, seq, prefix, 30, 2, 0.1, got)


def test_vllm_per_token_scales_and_padded_rows(seed):
    """Per-token scales [Hkv, slots] pass through as k_token_scales / v_token_scales (the
    same bits as the token-major call with them); rows padded inside a wider cache row
    are read through the strides."""
    gen = torch.Generator().manual_seed(seed)
    q, kv_cache, topk, bt, cu, seq, prefix, k_tm, v_tm = vllm_case(gen, hkv=2, g=2, d=32)
    out = torch.empty(q.shape, dtype=torch.bfloat16)
    kt = torch.exp2(torch.rand(2, 40 * P, generator=gen) * 2 - 1)
    vt = torch.exp2(torch.rand(2, 40 * P, generator=gen) * 6 - 3)
    vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.1, out, kt, vt)
    want = pageweaver.sparse_prefill(q, k_tm, v_tm, topk, bt, cu, seq, prefix, softmax_scale=0.1,
                                     k_token_scales=kt, v_token_scales=vt)
    assert torch.equal(bits(out), bits(want)), f"seed {seed}"
    wide = torch.cat([kv_cache, kv_cache], dim=-1)[..., :64]  # rows of 64 inside rows of 128
    vllm.minimax_m3_sparse_attn(q, wide, topk, bt, cu, seq, prefix, 30, 2, 0.1, out)
    want = pageweaver.sparse_prefill(q, k_tm, v_tm, topk, bt, cu, seq, prefix, softmax_scale=0.1)
    assert torch.equal(bits(out), bits(want)), f"seed {seed}"


@pytest.mark.parametrize("page", [64, 16])
def test_vllm_blocks_of_other_sizes(seed, page):
    """kv_cache [num_blocks, Hkv, P, 2*D] with P = 64 (and 16 on the CPU): P is the page size
    (read from the cache), the same bits as the token-major call with page_size=P, per-token
    scales indexed slot = block * P + offset."""
    gen = torch.Generator().manual_seed(seed)
    q, kv_cache, topk, bt, cu, seq, prefix, k_tm, v_tm = vllm_case(gen, hkv=2, g=2, d=32, page=page)
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)
    vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.1, out, 0.5, 0.25)
    want = pageweaver.sparse_prefill(q, k_tm, v_tm, topk, bt, cu, seq, prefix, k_scale=0.5,
                                     v_scale=0.25, softmax_scale=0.1, page_size=page)
    assert torch.equal(bits(out), bits(want)), f"seed {seed}"
    slots = kv_cache.shape[0] * page
    kt = torch.exp2(torch.rand(2, slots, generator=gen) * 2 - 1)
    vt = torch.exp2(torch.rand(2, slots, generator=gen) * 6 - 3)
    vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.1, out, kt, vt)
    want = pageweaver.sparse_prefill(q, k_tm, v_tm, topk, bt, cu, seq, prefix, softmax_scale=0.1,
                                     k_token_scales=kt, v_token_scales=vt, page_size=page)
    assert torch.equal(bits(out), bits(want)), f"seed {seed}: per-token scales"


def test_vllm_refuses_what_it_cannot_do():
    gen = torch.Generator().manual_seed(5)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=1, g=2, d=32)
    out = torch.empty(q.shape, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="k_scale"):
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 1, 0.1, out,
                                    torch.ones(2, 40 * P))
    with pytest.raises(ValueError, match="kv_cache"):
        vllm.minimax_m3_sparse_attn(q, kv_cache.transpose(2, 3).contiguous().transpose(2, 3),
                                    topk, bt, cu, seq, prefix, 30, 1, 0.1, out)
    with pytest.raises(TypeError, match="FP8"):
        vllm.minimax_m3_sparse_attn(q, kv_cache.to(torch.bfloat16), topk, bt, cu, seq, prefix,
                                    30, 1, 0.1, out)
    with pytest.raises(ValueError, match="kv_cache"):  # blocks of 0 tokens
        vllm.minimax_m3_sparse_attn(q, kv_cache[:, :, :0], topk, bt, cu, seq, prefix, 30, 1, 0.1, out)
    with pytest.raises(ValueError, match="num_kv_heads"):
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.1, out)
    with pytest.raises(TypeError, match="output"):  # vLLM's op only writes into output
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 1, 0.1, None)
    with pytest.raises(TypeError, match="k_scale: list"):
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 1, 0.1, out, [1.0])
    with pytest.raises(TypeError, match="kv_cache: expected a torch.Tensor"):  # not AttributeError
        vllm.minimax_m3_sparse_attn(q, [1], topk, bt, cu, seq, prefix, 30, 1, 0.1, out)


# ---- both ------------------------------------------------------------------------------
def test_int64_indices_past_int32_saturate_instead_of_wrapping(seed):
    """int64 Top-K ids and block-table entries outside int32 are out of range (an ignored id,
    a bad page), never wrapped onto a real page: ids + 2^32 used to alias the ids."""
    gen = torch.Generator().manual_seed(seed)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=2, g=2, d=32)
    def call(t, b, bad=None):
        out = torch.empty(q.shape, dtype=torch.bfloat16)
        vllm.minimax_m3_sparse_attn(q, kv_cache, t, b, cu, seq, prefix, 30, 2, 0.1, out,
                                    bad_page_count=bad)
        return out

    far = topk.to(torch.int64)
    far = torch.where(far >= 0, far + (1 << 32), far - (1 << 32))
    got = call(far, bt)
    none = call(torch.full_like(topk, -1), bt)
    assert torch.equal(bits(got), bits(none)), f"seed {seed}"
    assert not torch.equal(bits(call(topk, bt)), bits(none))  # the ids themselves select pages
    huge = bt.to(torch.int64) + (1 << 32)
    bad = torch.zeros(1, dtype=torch.int32)
    got = call(topk, huge, bad)
    assert torch.equal(bits(got), bits(call(topk, torch.full_like(bt, -1))))
    assert int(bad) > 0


def test_sglang_slot_ids_are_checked():
    c, _ = sglang_case(torch.Generator().manual_seed(4))
    rows = c["req_to_token"].shape[0]
    with pytest.raises(IndexError, match="slot_ids"):
        sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"] + rows, c["seq_lens"])
    with pytest.raises(ValueError, match="slot_ids has 2 requests, seq_lens 3"):
        sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"][:2], c["seq_lens"])
    with pytest.raises(TypeError, match="slot_ids"):
        sglang.page_table_from_req_to_token(c["req_to_token"], c["slot_ids"].float(), c["seq_lens"])
    with pytest.raises(TypeError, match="sm_scale"):
        sglang_call(c, sm_scale=torch.tensor(0.1, device="meta"))
    o = sglang_call(c, sm_scale=torch.tensor(0.1))  # a CPU tensor is a number
    assert torch.equal(bits(o), bits(sglang_call(c, sm_scale=0.1)))


def test_adapters_pass_max_seqlen_q_as_a_hint(monkeypatch):
    """Both adapters hand the engine's max_seqlen_q / max_query_len to sparse_prefill's
    max_seqlen_q when it is a host int >= 0 (the regroup's hint), else None: a device
    tensor is never read (that would be a host read), and a value that cannot be right
    (negative, a bool, a float) is "not known" rather than an error, as the engines pass
    it unchecked."""
    from pageweaver.integrations import _common
    for value, want in ((7, 7), (0, 0), (numpy.int64(3), 3), (None, None), (-1, None), (True, None),
                        (2.0, None), (torch.tensor(5), None)):
        assert _common.max_rows_hint(value) == want, value
    seen = []

    def spy(*args, **kw):
        seen.append(kw.get("max_seqlen_q", "missing"))
        return args[0]
    monkeypatch.setattr(sglang, "sparse_prefill", spy)
    monkeypatch.setattr(vllm, "sparse_prefill", spy)
    gen = torch.Generator().manual_seed(3)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    lead = (c["q"], c["k_cache"], c["v_cache"], None, c["req_to_token"], c["slot_ids"], c["topk_idx"], 1, P,
            c["cu_seqlens"], c["seq_lens"], c["prefix_lens"])
    for value in (9, torch.tensor(9), None):
        sglang.flash_prefill_with_gqa_share_sparse(*lead, value, page_table=table)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=2, g=2, d=32, extra_heads=0)
    out = torch.empty(q.shape, dtype=torch.bfloat16)
    vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, 2, 0.08, out)
    vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, torch.tensor(30), 2, 0.08, out)
    assert seen == [9, None, None, 30, None]


def test_adapters_refuse_a_max_seqlen_q_the_batch_contradicts():
    """An engine's max_seqlen_q below what its own batch holds (N rows in R requests,
    N > R x max_seqlen_q) is an error, not a hint to drop: sparse_prefill refuses it, naming
    the argument, through both adapters (a review, 2026-12-06: it silently kept identity
    order)."""
    gen = torch.Generator().manual_seed(3)
    c, table = sglang_case(gen, b=2, hkv=2, g=2, d=32, k=4)
    n, r = c["q"].shape[0], c["cu_seqlens"].numel() - 1
    assert n > r  # so that 1 is too small
    lead = (c["q"], c["k_cache"], c["v_cache"], None, c["req_to_token"], c["slot_ids"], c["topk_idx"], 1, P,
            c["cu_seqlens"], c["seq_lens"], c["prefix_lens"])
    with pytest.raises(ValueError, match="max_seqlen_q is 1"):
        sglang.flash_prefill_with_gqa_share_sparse(*lead, 1, page_table=table)
    sglang.flash_prefill_with_gqa_share_sparse(*lead, n, page_table=table)  # a true bound: fine
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=2, g=2, d=32, extra_heads=0)
    assert q.shape[0] > cu.numel() - 1
    out = torch.empty(q.shape, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="max_query_len is 1"):  # vLLM's name for it
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 1, 2, 0.08, out)


def test_adapter_errors_name_the_engines_arguments():
    """sparse_prefill's errors reach the engine in its own words (a review, 2026-12-06: a bad
    block_table read "page_table: ...", a short seq_lens "kv_lens: ..."), the same exception
    type; and a cu_seqlens of the wrong length is that error, not a max_seqlen_q one."""
    gen = torch.Generator().manual_seed(11)
    q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=1, g=2, d=32)
    out = torch.empty(q.shape, dtype=torch.bfloat16)
    call = vllm.minimax_m3_sparse_attn
    with pytest.raises(ValueError, match=r"^block_table: \d+ rows"):
        call(q, kv_cache, topk, torch.cat([bt, bt[:1]]), cu, seq, prefix, 30, 1, 0.1, out)
    with pytest.raises(ValueError, match=r"^seq_lens: shape"):
        call(q, kv_cache, topk, bt, cu, seq[:-1], prefix, 30, 1, 0.1, out)
    with pytest.raises(ValueError, match=r"^output: shape"):
        call(q, kv_cache, topk, bt, cu, seq, prefix, 30, 1, 0.1, out[:-1])
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: shape"):  # not "max_query_len is 30"
        call(q, kv_cache, topk, bt, cu[:-1], seq, prefix, 30, 1, 0.1, out)
    c, table = sglang_case(gen, b=2, hkv=1, g=2, d=32, k=4)
    with pytest.raises(ValueError, match=r"^seq_lens: shape"):
        sglang_call(dict(c, seq_lens=c["seq_lens"][:1]), page_table=table[:1])
    with pytest.raises(ValueError, match=r"^cu_seqlens: shape"):  # max_seqlen_q is passed: not its error
        sglang_call(dict(c, cu_seqlens=c["cu_seqlens"][:-1]), page_table=table)
    with pytest.raises(ValueError, match=r"^page_table: \d+ rows"):  # the caller's own table
        sglang_call(c, page_table=torch.cat([table, table[:1]]))
    with pytest.raises(ValueError, match=r"^sink: "):
        sglang_call(c, sink=torch.zeros(c["q"].shape[1], 32, dtype=torch.bfloat16)[:, ::2])
    # the library's own (C) errors keep their text; prose after a leading name is untouched
    with pytest.raises(ValueError, match=r"^sink: .*block_size_k sets the page size") as info:
        with engine_names({"sink_keys": "sink"}, [("pass page_size=", "block_size_k sets the page size")]):
            raise ValueError("sink_keys: bad (pass page_size= for other pages)")
    with pytest.raises(ValueError) as info:
        with engine_names({"out": "output"}):
            raise ValueError("outline: out of range")
    assert str(info.value) == "outline: out of range"


def test_sglang_takes_its_page_size(seed):
    """SGLang passes page_size=<--page-size> with req_to_token / slot_ids: accepted (the layout
    check decides), named in the layout error; not an int >= 1: ValueError."""
    gen = torch.Generator().manual_seed(seed)
    c, table = sglang_case(gen, b=2, hkv=1, g=2, d=32, k=4)
    o = sglang_call(c, page_size=P)
    assert torch.equal(bits(o), bits(direct(c, table, softmax_scale=32 ** -0.5))), f"seed {seed}"
    assert torch.equal(bits(sglang_call(c, page_size=2 * P)), bits(o))
    shifted = c["req_to_token"].clone()
    shifted[int(c["slot_ids"][0]), : int(c["seq_lens"][0])] += 1
    with pytest.raises(ValueError, match=r"--page-size 128 \(it is 1\)"):
        sglang_call(dict(c, req_to_token=shifted), page_size=1)
    for bad in (0, -4, "128", 1.5, True):
        with pytest.raises(ValueError, match="page_size"):
            sglang_call(c, page_size=bad)


def test_adapter_hints_name_the_engines_setting():
    """sparse_prefill's advice "pass page_size=" is wrong for an engine (SGLang's page is
    block_size_k; vLLM's the cache's block size): the adapters say that instead (a review,
    2026-12-06)."""
    gen = torch.Generator().manual_seed(5)
    c, table = sglang_case(gen, b=2, hkv=1, g=2, d=32, k=4)
    slots = (c["k_cache"].shape[0] // 64) * 64
    four_d = c["k_cache"][:slots].view(slots // 64, 64, 1, 32).transpose(1, 2)  # [pages, Hkv, 64, D]
    with pytest.raises(ValueError, match="block_size_k sets the page size") as info:
        sglang_call(dict(c, k_cache=four_d, v_cache=four_d), page_table=table)
    assert "pass page_size=" not in str(info.value)
