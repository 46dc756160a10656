"""Random mutations of valid calls on the CPU (the C library's reference).

test_mutated_calls: each sparse_prefill argument may be transposed, strided, broadcast
(stride 0), cast to another dtype, emptied, flattened, cut short, given an extreme value or
a NaN, or moved to the meta device; sinks, `out`, per-token scales, a tensor k_scale, a
bad_page_count or a page_size may join. The call raises TypeError / ValueError (the
package's InvalidArgumentError is a ValueError) or returns; when it returns, the same call
in precision "exact" equals the independent float64 implementation of problems.py on the
mutated tensors (never a wrong answer). tests/fuzz/README.md runs it with the C library
built under AddressSanitizer + UBSan (~2,700 calls clean on 2026-12-05).

test_vllm_layouts: vLLM's adapter on the same values in other memory layouts (permuted
storage, padded dimensions, the two-plane cache) gives the same output bits, or a
TypeError / ValueError for a layout the library cannot address (rows of q or the cache's D
not contiguous), never other bits. test_sglang_layouts: the same for SGLang's adapter (its
refusals: rows of q or a cache slot's [Hkv, D] not contiguous, K and V slot strides that
differ)."""
import random

import torch

import pageweaver
from problems import op_args, random_problem, reference

NAMES = ("q", "k_cache", "v_cache", "topk_idx", "page_table", "cu_seqlens_q", "kv_lens", "prefix_lens")


def mutate(t, rng):
    k = rng.randrange(13)
    if k == 0 and t.dim() > 1:
        return t.transpose(0, -1)
    if k == 1 and t.shape[0] > 1:
        return t[::2]
    if k == 2 and t.shape[0] > 0:
        return t[:1].expand(t.shape[0], *t.shape[1:])  # rows of stride 0
    if k == 3:
        return t.to(rng.choice([torch.int64, torch.int16, torch.float32, torch.bfloat16, torch.uint8]))
    if k == 4:
        return t[:0]
    if k == 5:
        return t.reshape(-1)
    if k == 6:
        return t.unsqueeze(0)
    if k == 7 and t.dim():
        return t[..., :max(1, t.shape[-1] - 1)]
    if k == 8 and t.dtype == torch.int32 and t.numel():
        u = t.contiguous().clone()
        u.view(-1)[rng.randrange(u.numel())] = rng.choice([-1, 2**31 - 1, -2**31, 10**6])
        return u
    if k == 9 and t.numel():
        return t.as_strided(t.shape, [0] * t.dim())
    if k == 10 and t.dtype in (torch.bfloat16, torch.float32) and t.numel():
        u = t.contiguous().clone()
        u.view(-1)[0] = float("nan")
        return u
    if k == 11:
        return t.to("meta")
    return t


def test_mutated_calls(seed):
    rng = random.Random(seed)
    outcomes = {"returned": 0, "checked": 0, "refused": 0}
    for it in range(400):
        gen = torch.Generator().manual_seed(seed * 1000 + it)
        hkv, g = rng.choice([1, 2]), rng.choice([16, 8, 4])
        p = random_problem(gen, hkv=hkv, g=g, d=rng.choice([128, 64]), k=rng.choice([16, 4, 33]),
                           max_requests=3, max_qlen=6, max_prefix=200)
        args = list(op_args(p))
        kw = dict(k_scale=p["k_scale"], v_scale=p["v_scale"])
        for _ in range(rng.randrange(1, 3)):
            i = rng.randrange(len(args))
            args[i] = mutate(args[i], rng)
        hq, d = p["q"].shape[1], p["q"].shape[2]
        extra = rng.randrange(8)
        if extra == 0:
            kw["sinks"] = mutate(torch.zeros(hq), rng)
        elif extra == 1:
            kw["out"] = mutate(torch.empty(p["q"].shape, dtype=torch.bfloat16), rng)
        elif extra == 2:
            kw["k_token_scales"] = mutate(torch.ones(hkv, p["k_cache"].shape[0]), rng)
        elif extra == 3:
            kw["sink_keys"] = mutate(torch.zeros(hq, d, dtype=torch.bfloat16), rng)
        elif extra == 4:
            kw["k_scale"] = mutate(torch.tensor([p["k_scale"]]), rng)
        elif extra == 5:
            kw["bad_page_count"] = mutate(torch.zeros(1, dtype=torch.int32), rng)
        elif extra == 6:
            kw["page_size"] = rng.choice([64, 128, 0, -1, 100])
        kw["precision"] = rng.choice([None, "fp8", "fp8x2", "exact"])
        try:
            pageweaver.sparse_prefill(*args, **kw)
        except (TypeError, ValueError):
            outcomes["refused"] += 1
            continue
        outcomes["returned"] += 1
        # A call that returns must be right: the same call in exact arithmetic against the
        # float64 implementation (where problems.reference models the call: pages of 128,
        # float scales, no caller-provided outputs).
        if kw.get("page_size") is not None or not isinstance(kw["k_scale"], float) or \
                kw.get("out") is not None or kw.get("bad_page_count") is not None:
            continue
        q = args[0]
        o64 = torch.empty(q.shape, dtype=torch.float64)
        exact = dict(kw, precision="exact", out=o64, return_lse=True)
        _, lse = pageweaver.sparse_prefill(*args, **exact)
        mutated = dict(zip(NAMES, args), k_scale=kw["k_scale"], v_scale=kw["v_scale"])
        ro, rl, _ = reference(mutated, sinks=kw.get("sinks"), sink_keys=kw.get("sink_keys"),
                              k_token_scales=kw.get("k_token_scales"))
        assert torch.allclose(o64, ro, rtol=1e-9, atol=1e-12, equal_nan=True), \
            f"seed {seed} call {it}: a mutated call returned a wrong o " \
            f"({[(n, tuple(a.shape), a.stride(), a.dtype) for n, a in zip(NAMES, args)]})"
        assert torch.allclose(lse.to(torch.float64), rl, rtol=1e-6, atol=1e-6, equal_nan=True), \
            f"seed {seed} call {it}: a mutated call returned a wrong LSE"
        outcomes["checked"] += 1
    print(f"seed {seed}: {outcomes}")
    assert outcomes["refused"] > 0 and outcomes["returned"] > 0, outcomes


def relaid(t, rng):
    """The same values in another memory layout: stored in a permuted order and viewed back,
    or cut out of a larger buffer (a padded dimension)."""
    if rng.randrange(2) and t.dim() > 1:
        order = list(range(t.dim()))
        rng.shuffle(order)
        inverse = [order.index(i) for i in range(t.dim())]
        return t.permute(order).contiguous().permute(inverse)
    dim = rng.randrange(t.dim())
    pad = list(t.shape)
    pad[dim] += rng.randrange(1, 4)
    big = torch.zeros(pad, dtype=t.dtype)
    at = rng.randrange(pad[dim] - t.shape[dim] + 1)
    index = [slice(None)] * t.dim()
    index[dim] = slice(at, at + t.shape[dim])
    big[tuple(index)] = t
    return big[tuple(index)]


def same_bits_or_refused(call, want, outcomes, where):
    """call() on the relaid tensors: a TypeError / ValueError counts as refused, any output
    must have want's bits (where() names the case in the failure)."""
    try:
        got = call()
    except (TypeError, ValueError):
        outcomes["refused"] += 1
        return
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
        f"other bits for the same values: {where()}"
    outcomes["same"] += 1


def test_vllm_layouts(seed):
    """vLLM's adapter reads its tensors in place through strides: the same values in other
    memory layouts (every tensor, the cache included) give the same output bits, or a
    TypeError / ValueError (a layout the library cannot address), never other bits."""
    from pageweaver.integrations import vllm
    from test_adapters import vllm_case
    rng = random.Random(seed)
    outcomes = {"same": 0, "refused": 0}
    for it in range(30):
        gen = torch.Generator().manual_seed(seed * 100 + it)
        hkv, g, d = rng.choice([(1, 4, 32), (2, 2, 16), (2, 4, 64)])
        q, kv_cache, topk, bt, cu, seq, prefix, _, _ = vllm_case(gen, hkv=hkv, g=g, d=d, k=5, page=rng.choice([128, 64, 16]))
        if rng.randrange(2):  # the two-plane layout [num_blocks, 2, P, Hkv, D] of the same values
            kv_cache = torch.stack([kv_cache[..., :d], kv_cache[..., d:]], 1).permute(0, 1, 3, 2, 4).contiguous()
        want = torch.empty(q.shape, dtype=torch.bfloat16)
        vllm.minimax_m3_sparse_attn(q, kv_cache, topk, bt, cu, seq, prefix, 30, hkv, 0.1, want)
        tensors = [q, kv_cache, topk, bt, cu, seq, prefix]
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(tensors))
            tensors[i] = relaid(tensors[i], rng)
        got = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)

        def call():
            vllm.minimax_m3_sparse_attn(tensors[0], tensors[1], *tensors[2:], 30, hkv, 0.1, got)
            return got
        same_bits_or_refused(call, want, outcomes, lambda: f"seed {seed} case {it}: layout "
                             f"{[(tuple(t.shape), t.stride()) for t in tensors]}")
    print(f"seed {seed}: {outcomes}")
    assert outcomes["same"] > 0, outcomes


def test_sglang_layouts(seed):
    """SGLang's adapter likewise: the same values of its tensors (caches, req_to_token,
    slot ids, Top-K, request arrays, q) in other memory layouts give the same output bits or
    a TypeError / ValueError, never other bits."""
    from test_adapters import sglang_call, sglang_case
    rng = random.Random(seed)
    outcomes = {"same": 0, "refused": 0}
    keys = ("q", "k_cache", "v_cache", "req_to_token", "slot_ids", "topk_idx", "cu_seqlens",
            "seq_lens", "prefix_lens")
    for it in range(30):
        gen = torch.Generator().manual_seed(seed * 100 + it)
        c, _ = sglang_case(gen, b=rng.choice([1, 2, 3]), hkv=rng.choice([1, 2]), g=2, d=32, k=5)
        want = sglang_call(c, sm_scale=0.1)
        moved = dict(c)
        for _ in range(rng.randrange(1, 4)):
            key = rng.choice(keys)
            moved[key] = relaid(moved[key], rng)
        same_bits_or_refused(lambda: sglang_call(moved, sm_scale=0.1), want, outcomes,
                             lambda: f"seed {seed} case {it}: layout "
                             f"{[(k, tuple(moved[k].shape), moved[k].stride()) for k in keys]}")
    print(f"seed {seed}: {outcomes}")
    assert outcomes["same"] > 0, outcomes
