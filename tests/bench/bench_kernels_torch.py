"""PyTorch baseline for bench_kernels: the same GPT-2 block and 4-layer training step on the CPU.

usage: /usr/bin/python3 tests/bench/bench_kernels_torch.py [threads ...]   (default 1 2)

Prints ms per forward + backward of one block (C 256, NH 4, T 256, B 8) and ms/step and tokens/s
of the 4-layer model (V 256, AdamW, clip 1.0), best of several repeats after a warm-up, and the
process's CPU ms per step (all threads; with one thread, what a step costs on an idle machine). For each thread
count n it tries PyTorch's OpenMP at n with OpenBLAS at n, and at 1 with OpenBLAS at n (on
Debian both runtimes spin, and sharing the cores that way is often faster); it prints both.
Needs python3-torch (Debian 12: PyTorch 1.13, OpenBLAS GEMMs).
"""
import ctypes
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    _openblas = ctypes.CDLL("libopenblas.so.0")
except OSError:
    _openblas = None


def set_threads(torch_threads, blas_threads):
    torch.set_num_threads(torch_threads)
    if _openblas is not None:
        _openblas.openblas_set_num_threads(blas_threads)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2)
                   for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def best_time(f, reps, warm=2):
    for _ in range(warm):
        f()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    return min(t)


def time_train_step(model, B, T, V):
    """Best seconds of one AdamW training step (clip 1.0) of `model(idx, targets)` on a random batch
    after a warm-up, and the process's mean CPU seconds per step (all threads)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def train_step():
        opt.zero_grad(set_to_none=True)
        model(idx, tgt).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    c0 = time.process_time()
    best = best_time(train_step, 10, 3)
    return best, (time.process_time() - c0) / 13  # mean over warm-up and timed steps


def main():
    threads = [int(a) for a in sys.argv[1:]] or [1, 2]
    L, C, NH, T, B, V = 4, 256, 4, 256, 8, 256
    torch.manual_seed(0)
    print(f"{'threads':>7} {'torch/blas':>10} {'block ms':>9} {'ms/step':>9} {'tokens/s':>9} {'cpu ms/step':>12}")
    for n in threads:
        for tt, bt in sorted({(n, n), (1, n)}):
            set_threads(tt, bt)
            blk = Block(C, NH)
            x = torch.randn(B, T, C, requires_grad=True)
            dy = torch.randn(B, T, C) * 1e-3

            def block_step():
                blk.zero_grad(set_to_none=True)
                blk(x).backward(dy)

            tb = best_time(block_step, 15)
            ts, cpu = time_train_step(GPT(L, C, NH, T, V), B, T, V)
            print(f"{n:>7} {f'{tt}/{bt}':>10} {tb * 1e3:>9.1f} {ts * 1e3:>9.1f} {B * T / ts:>9.0f} {cpu * 1e3:>12.1f}")


if __name__ == "__main__":
    main()
