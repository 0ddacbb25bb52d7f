"""PyTorch baseline for `bench_train --llama`: the same small Llama's training step on the CPU.

usage: /usr/bin/python3 tests/bench/bench_llama_torch.py [threads ...]   (default 1 2)

The model is Hugging Face's Llama written with torch.nn (RMSNorm, rotate-half rotary positions,
grouped-query attention with K/V repeated for their query heads, SwiGLU, untied head): 4 layers,
C 256, 4 query heads on 2 key/value heads, FFN 688, T 256, B 8, V 256, AdamW, clip 1.0. Prints
ms/step and tokens/s, best of several repeats after a warm-up, and the process's CPU ms per step,
with PyTorch's threads and OpenBLAS's set as bench_kernels_torch.py sets them. Needs python3-torch (Debian 12: PyTorch 1.13).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_kernels_torch import set_threads, time_train_step


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, C, NH, NKV, F_):
        super().__init__()
        self.NH, self.NKV, self.hs = NH, NKV, C // NH
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(C), RMSNorm(C)
        self.q_proj = nn.Linear(C, NH * self.hs, bias=False)
        self.k_proj = nn.Linear(C, NKV * self.hs, bias=False)
        self.v_proj = nn.Linear(C, NKV * self.hs, bias=False)
        self.o_proj = nn.Linear(NH * self.hs, C, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(C, F_, bias=False), nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.NH, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.NKV, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.NKV, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(self.NH // self.NKV, dim=1), v.repeat_interleave(self.NH // self.NKV, dim=1)
        att = F.softmax(((q @ k.transpose(-2, -1)) / self.hs ** 0.5).masked_fill(~mask, float("-inf")), dim=-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, L, C, NH, NKV, F_, T, V, theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Block(C, NH, NKV, F_) for _ in range(L))
        self.norm, self.lm_head = RMSNorm(C), nn.Linear(C, V, bias=False)
        hs = C // NH
        inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2).float() / hs))
        emb = torch.cat((torch.outer(torch.arange(T).float(), inv_freq),) * 2, dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()
        self.mask = torch.ones(T, T, dtype=torch.bool).tril()

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def main():
    threads = [int(a) for a in sys.argv[1:]] or [1, 2]
    L, C, NH, NKV, F_, T, B, V = 4, 256, 4, 2, 688, 256, 8, 256
    torch.manual_seed(0)
    print(f"{'threads':>7} {'torch/blas':>10} {'ms/step':>9} {'tokens/s':>9} {'cpu ms/step':>12}")
    for n in threads:
        for tt, bt in sorted({(n, n), (1, n)}):
            set_threads(tt, bt)
            ts, cpu = time_train_step(Llama(L, C, NH, NKV, F_, T, V), B, T, V)
            print(f"{n:>7} {f'{tt}/{bt}':>10} {ts * 1e3:>9.1f} {B * T / ts:>9.0f} {cpu * 1e3:>12.1f}")


if __name__ == "__main__":
    main()
