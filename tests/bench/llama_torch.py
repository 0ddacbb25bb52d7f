"""Hugging Face's Llama written with torch.nn, for the PyTorch baselines of the benchmarks
(bench_llama_torch.py on the CPU, bench_gpu_train_torch.py on a GPU): RMSNorm, rotate-half rotary
positions, grouped-query attention with K/V repeated for their query heads (transformers'
repeat_kv), SwiGLU, a tied or untied head. The attention is the caller's: PyTorch 2's
scaled_dot_product_attention on a GPU, softmax over a causal mask (CausalSoftmax) where PyTorch
1.13 has no such function.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, c, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(c)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class CausalSoftmax:
    """Causal attention as softmax(q k^T / sqrt(hs)) v over a mask made once for seq rows."""

    def __init__(self, seq):
        self.mask = torch.ones(seq, seq, dtype=torch.bool).tril()

    def __call__(self, q, k, v):
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        return F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1) @ v


class LlamaBlock(nn.Module):
    def __init__(self, c, nh, nkv, ffn, attention):
        super().__init__()
        self.nh, self.nkv, self.hs, self.attention = nh, nkv, c // nh, attention
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(c), RMSNorm(c)
        self.q_proj = nn.Linear(c, nh * self.hs, bias=False)
        self.k_proj = nn.Linear(c, nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(c, nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(nh * self.hs, c, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(c, ffn, bias=False), nn.Linear(c, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, c, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.nh, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.nkv, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.nkv, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(self.nh // self.nkv, dim=1), v.repeat_interleave(self.nh // self.nkv, dim=1)
        y = self.attention(q, k, v)
        x = x + self.o_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """layers blocks of hidden c, nh query heads on nkv key/value heads, SwiGLU width ffn, a
    vocabulary of vocab, rotary positions for seq rows at base theta; the head tied to the
    embedding (as Llama 3.2 1B) or its own (as Llama 3 8B). forward gives the mean cross-entropy."""

    def __init__(self, layers, c, nh, nkv, ffn, vocab, seq, theta, tied, attention):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, c)
        self.layers = nn.ModuleList(LlamaBlock(c, nh, nkv, ffn, attention) for _ in range(layers))
        self.norm = RMSNorm(c)
        self.lm_head = None if tied else nn.Linear(c, vocab, bias=False)
        hs = c // nh
        inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2).float() / hs))
        emb = torch.cat((torch.outer(torch.arange(seq).float(), inv_freq),) * 2, dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = blk(x, self.cos[:t], self.sin[:t])
        x = self.norm(x)
        logits = x @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
