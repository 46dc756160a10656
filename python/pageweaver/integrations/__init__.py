"""Adapters that take serving engines' sparse-attention arguments as they are.

- pageweaver.integrations.sglang.flash_prefill_with_gqa_share_sparse (= minimax_sparse_prefill):
  SGLang's MiniMax sparse prefill kernel, same arguments in the same order (token-level
  req_to_token page mapping to pages of block_size_k = 128 or 64 tokens, which needs SGLang's
  --page-size = block_size_k; [slots, Hkv, D] FP8 E4M3 caches).
- pageweaver.integrations.vllm.minimax_m3_sparse_attn: vLLM's MiniMax-M3 sparse attention
  (block_table, the interleaved [num_blocks, Hkv, P, 2*D] cache, blocks of P = 128 or 64
  tokens), a drop-in for its
  prefill call.
"""
from . import sglang, vllm  # noqa: F401

__all__ = ["sglang", "vllm"]
