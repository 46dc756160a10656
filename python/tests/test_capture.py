"""pageweaver.save_capture / load_capture: torch tensors in, torch tensors out, same bits,
and the op gives the same output on the loaded inputs."""
import re

import pytest
import torch

import pageweaver
from problems import op_args, random_problem


def test_round_trip(tmp_path, seed):
    p = random_problem(torch.Generator().manual_seed(seed), hkv=2, g=4, d=32, k=4, bad_pages=False)
    path = tmp_path / "cap.safetensors"
    ret = pageweaver.save_capture(str(path), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                                  p["kv_lens"], p["page_table"], q=p["q"], k_cache=p["k_cache"],
                                  v_cache=p["v_cache"], k_scale=torch.tensor(p["k_scale"]),
                                  v_scale=p["v_scale"], softmax_scale=0.2,
                                  metadata={"model": "test", "layer": 3})
    assert ret == str(path)
    t, meta = pageweaver.load_capture(str(path))
    assert meta["model"] == "test" and meta["layer"] == "3" and meta["q_heads_per_kv"] == "4"
    assert meta["head_dim"] == "32" and float(meta["softmax_scale"]) == 0.2
    assert t["q"].dtype == torch.bfloat16 and t["k_cache"].dtype == torch.float8_e4m3fn
    assert t["topk_ids"].dtype == torch.int32
    for name, key in (("q", "q"), ("topk_ids", "topk_idx"), ("page_table", "page_table"),
                      ("cu_seqlens_q", "cu_seqlens_q"), ("kv_lens", "kv_lens"),
                      ("prefix_lens", "prefix_lens")):
        assert torch.equal(t[name].view(torch.uint8), p[key].contiguous().view(torch.uint8)), name
    for name in ("k_cache", "v_cache"):
        assert torch.equal(t[name].view(torch.uint8), p[name].view(torch.uint8)), name
    want = pageweaver.sparse_prefill(*op_args(p), k_scale=p["k_scale"], v_scale=p["v_scale"],
                                     softmax_scale=0.2)
    got = pageweaver.sparse_prefill(t["q"], t["k_cache"], t["v_cache"], t["topk_ids"],
                                    t["page_table"], t["cu_seqlens_q"], t["kv_lens"],
                                    t["prefix_lens"], k_scale=t["k_scale"], v_scale=t["v_scale"],
                                    softmax_scale=float(meta["softmax_scale"]))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_four_d_cache_views_are_stored_token_major(tmp_path, seed):
    """vLLM's interleaved [pages, Hkv, 128, 2*D] cache passed as its K and V views: the file
    holds the token-major bytes, and the loaded call equals the call on the views."""
    p = random_problem(torch.Generator().manual_seed(seed), hkv=2, g=4, d=32, k=4, bad_pages=False)
    pages = p["k_cache"].shape[0] // 128
    k4 = p["k_cache"].view(pages, 128, 2, 32).permute(0, 2, 1, 3)
    v4 = p["v_cache"].view(pages, 128, 2, 32).permute(0, 2, 1, 3)
    kv = torch.cat([k4, v4], dim=-1).contiguous()  # [pages, Hkv, 128, 2*D]
    path = tmp_path / "cap4.safetensors"
    pageweaver.save_capture(str(path), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                            p["kv_lens"], p["page_table"], q=p["q"], k_cache=kv[..., :32],
                            v_cache=kv[..., 32:], k_scale=1.0, v_scale=1.0)
    t, _ = pageweaver.load_capture(str(path))
    for name in ("k_cache", "v_cache"):
        assert torch.equal(t[name].view(torch.uint8), p[name].view(torch.uint8)), name
    want = pageweaver.sparse_prefill(p["q"], kv[..., :32], kv[..., 32:], *op_args(p)[3:])
    got = pageweaver.sparse_prefill(t["q"], t["k_cache"], t["v_cache"], *op_args(p)[3:])
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"seed {seed}"


def test_invalid_capture_is_refused_before_writing(tmp_path):
    p = random_problem(torch.Generator().manual_seed(2), hkv=1, g=2, d=32, k=4, bad_pages=False)
    path = tmp_path / "bad.safetensors"
    short = p["kv_lens"].clone()
    short[0] = 0
    with pytest.raises(pageweaver.CaptureError, match="kv_len"):
        pageweaver.save_capture(str(path), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"], short)
    assert not path.exists()
    path.write_bytes(b"not a capture")
    with pytest.raises(pageweaver.CaptureError, match="bad.safetensors"):
        pageweaver.load_capture(str(path))


def _rewrite_header(src, dst, edit):
    """Copy capture `src` to `dst` with its safetensors header passed through edit(header)
    (tensor entries and __metadata__; the data bytes unchanged)."""
    import json
    raw = src.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    dst.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


@pytest.mark.parametrize("edit, message", [
    (lambda h: h["topk_ids"].update(dtype="F32"), "topk_ids: dtype F32"),
    (lambda h: h["__metadata__"].update(page_size="0"), "page_size is '0'"),
    (lambda h: h["__metadata__"].update(head_dim="2048"), "head_dim is 2048"),
    (lambda h: h["__metadata__"].pop("q_heads_per_kv"), "q_heads_per_kv: missing"),
    (lambda h: h["__metadata__"].update(softmax_scale="nan"), "softmax_scale is 'nan'"),
    (lambda h: h["kv_lens"].update(dtype="U32"), "kv_lens: dtype U32"),
    (lambda h: h.pop("v_cache"), "k_cache: present without v_cache"),
    (lambda h: h.pop("v_scale"), "'v_scale'"),
    (lambda h: h["__metadata__"].update(page_size="96"), "not a multiple of page_size 96"),
    (lambda h: h["q"].update(shape=[h["q"]["shape"][0], h["q"]["shape"][2], h["q"]["shape"][1]]),
     "q: shape"),
])
def test_load_refuses_what_the_c_reader_refuses(tmp_path, edit, message):
    """A file whose layout is sound but whose contents the C reader (pw_capture_read) refuses
    raises CaptureError here too, instead of coming back with its values cast."""
    p = random_problem(torch.Generator().manual_seed(3), hkv=1, g=2, d=32, k=4, bad_pages=False)
    good = tmp_path / "good.safetensors"
    pageweaver.save_capture(str(good), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                            p["kv_lens"], p["page_table"], q=p["q"], k_cache=p["k_cache"],
                            v_cache=p["v_cache"], k_scale=1.0, v_scale=1.0, topk_dtype="<i4")
    pageweaver.load_capture(str(good))
    bad = tmp_path / "bad.safetensors"
    _rewrite_header(good, bad, edit)
    with pytest.raises(pageweaver.CaptureError, match=re.escape(message)):
        pageweaver.load_capture(str(bad))


@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -2.0])
def test_load_refuses_scales_the_format_forbids(tmp_path, name, value):
    """k_scale / v_scale must be finite and > 0 (docs/capture-format.md): a file holding
    another value is refused by load_capture, as by pw_capture_read and save_capture."""
    import json
    import struct
    p = random_problem(torch.Generator().manual_seed(4), hkv=1, g=2, d=32, k=4, bad_pages=False)
    good = tmp_path / "good.safetensors"
    pageweaver.save_capture(str(good), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                            p["kv_lens"], p["page_table"], q=p["q"], k_cache=p["k_cache"],
                            v_cache=p["v_cache"], k_scale=0.5, v_scale=0.5)
    with pytest.raises(pageweaver.CaptureError, match=name):
        pageweaver.save_capture(str(tmp_path / "refused.safetensors"), p["topk_idx"], p["cu_seqlens_q"],
                                p["prefix_lens"], p["kv_lens"], p["page_table"], q=p["q"],
                                k_cache=p["k_cache"], v_cache=p["v_cache"], **{name: value})
    raw = bytearray(good.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    begin = 8 + n + json.loads(raw[8:8 + n])[name]["data_offsets"][0]
    raw[begin:begin + 4] = struct.pack("<f", value)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(pageweaver.CaptureError, match=f"{name} is .*finite and > 0"):
        pageweaver.load_capture(str(bad))


def test_load_refuses_inconsistent_requests(tmp_path):
    """cu_seqlens_q that does not end at N, or a kv_len below its prefix and chunk."""
    import numpy as np
    from pageweaver import _capture_format as fmt
    p = random_problem(torch.Generator().manual_seed(4), hkv=1, g=2, d=32, k=4, bad_pages=False)
    good = tmp_path / "good.safetensors"
    pageweaver.save_capture(str(good), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                            p["kv_lens"], p["page_table"])
    t, meta, dt = fmt.load_capture(str(good), return_dtypes=True)
    broken = dict(t)
    broken["kv_lens"] = np.zeros_like(t["kv_lens"])
    with pytest.raises(fmt.CaptureError, match="kv_len 0 <"):
        fmt._check_contents(broken, meta, dt)
    broken = dict(t)
    kv = t["kv_lens"].copy()
    kv[0] = t["page_table"].shape[1] * 128 + 1  # past the page table
    broken["kv_lens"] = kv
    with pytest.raises(fmt.CaptureError, match="kv_lens.0. is .*page table"):
        fmt._check_contents(broken, meta, dt)
    broken = dict(t)
    cu = t["cu_seqlens_q"].copy()
    cu[-1] += 1
    broken["cu_seqlens_q"] = cu
    with pytest.raises(fmt.CaptureError, match="cu_seqlens_q must rise"):
        fmt._check_contents(broken, meta, dt)


def test_save_to_a_directory_names_it(tmp_path):
    p = random_problem(torch.Generator().manual_seed(5), hkv=1, g=2, d=32, k=4, bad_pages=False)
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        pageweaver.save_capture(str(tmp_path), p["topk_idx"], p["cu_seqlens_q"], p["prefix_lens"],
                                p["kv_lens"])
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_load_refuses_the_rest_of_what_the_c_reader_refuses(tmp_path):
    """A key repeated in the header (json would keep the last, cJSON the first), a page table
    of negative ids only without caches, caches of 0 slots, and a default page table whose
    ids pass int32: CaptureError, as pw_capture_read refuses them (a review, 2026-12-04)."""
    import json
    import numpy as np
    from pageweaver import _capture_format as fmt
    ids = np.zeros((1, 4, 16), np.int32)
    good = tmp_path / "good.safetensors"
    fmt.save_capture(str(good), ids, [0, 4], [0], [4], page_table=np.array([[0]]))
    raw = good.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    text = raw[8:8 + n].decode()
    dup = text.replace('"page_size":"128"', '"page_size":"128","page_size":"64"', 1)
    assert dup != text
    path = tmp_path / "dup.safetensors"
    path.write_bytes(len(dup.encode()).to_bytes(8, "little") + dup.encode() + raw[8 + n:])
    with pytest.raises(fmt.CaptureError, match="'page_size' appears more than once"):
        fmt.load_capture(str(path))
    neg = tmp_path / "neg.safetensors"
    with pytest.warns(UserWarning, match="outside the cache"):
        fmt.save_capture(str(neg), ids, [0, 4], [0], [4], page_table=np.array([[-1]]),
                         allow_uncovered_pages=True)
    with pytest.raises(fmt.CaptureError, match="none of its 1 entries"):
        fmt.load_capture(str(neg))
    t, meta, dt = fmt.load_capture(str(good), return_dtypes=True)
    empty = dict(t, k_cache=np.zeros((0, 1, 128), np.uint8), v_cache=np.zeros((0, 1, 128), np.uint8),
                 k_scale=np.ones(1, np.float32), v_scale=np.ones(1, np.float32))
    dt2 = dict(dt, k_cache="F8_E4M3", v_cache="F8_E4M3", k_scale="F32", v_scale="F32")
    with pytest.raises(fmt.CaptureError, match="no page of 128 tokens"):
        fmt._check_contents(empty, meta, dt2)
    wide = {k: v for k, v in t.items() if k != "page_table"}
    wide["prefix_lens"] = np.array([2**31 - 5, 0], np.int32)  # two requests x 2^31 - 1 pages of 1 token
    wide["kv_lens"] = np.array([2**31 - 1, 0], np.int32)
    wide["cu_seqlens_q"] = np.array([0, 4, 4], np.int32)
    meta1 = dict(meta, page_size="1")
    with pytest.raises(fmt.CaptureError, match="default layout needs"):
        fmt._check_contents(wide, meta1, dt)
