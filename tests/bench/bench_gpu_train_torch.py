"""The same GPT-2 and Llama steps as bench_gpu_train in PyTorch on one GPU, for the ratio: fp32
with TF32 off (or bf16 autocast), scaled_dot_product_attention (causal; a Llama's K/V repeated
for their query heads), fused AdamW, optionally torch.compile.

    python3 bench_gpu_train_torch.py [compile] [bf16] [micro_batch=B] [accumulate=N] [model=774M]

micro_batch=B sets every shape's micro-batch (default 8, 8, 4 and 4); accumulate=N sums N
micro-batches' gradients before each update, as bench_gpu_train --accumulate does; model=NAME
runs one shape (124M, 350M, 774M or llama-1b) instead of all four.

Prints ms a step and tokens/s per shape; asserts nothing.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_torch import Llama  # beside this file

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, c, nh, vocab=50304, seq=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(seq, c)
        self.h = nn.ModuleList(Block(c, nh) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# bench_gpu_train's shapes: name, layers, hidden, heads, key/value heads, FFN, vocabulary,
# default micro-batch; GPT-2's and Llama 3.2 1B's.
SHAPES = (("124M", 12, 768, 12, 12, 3072, 50304, 8), ("350M", 24, 1024, 16, 16, 4096, 50304, 8),
          ("774M", 36, 1280, 20, 20, 5120, 50304, 4), ("llama-1b", 16, 2048, 32, 8, 8192, 128256, 4))


def main():
    use_compile = "compile" in sys.argv[1:]
    bf16 = "bf16" in sys.argv[1:]
    options = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    unknown = set(options) - {"micro_batch", "accumulate", "model"} | {a for a in sys.argv[1:] if "=" not in a} - {"compile", "bf16"}
    if unknown:
        sys.exit(f"bench_gpu_train_torch.py: unknown argument(s) {sorted(unknown)}; "
                 "takes compile, bf16, micro_batch=B, accumulate=N, model=124M|350M|774M|llama-1b")
    only = options.get("model")
    if only not in (None, *(shape[0] for shape in SHAPES)):
        sys.exit("bench_gpu_train_torch.py: model takes 124M, 350M, 774M or llama-1b")
    try:
        micro_batch = int(options.get("micro_batch", 0))
        accumulate = int(options.get("accumulate", 1))
    except ValueError:
        sys.exit("bench_gpu_train_torch.py: micro_batch and accumulate take whole numbers")
    if micro_batch < 0 or accumulate < 1:
        sys.exit("bench_gpu_train_torch.py: micro_batch must be at least 1 and accumulate at least 1")
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}, {'bf16 autocast' if bf16 else 'fp32 (TF32 off)'}, "
          f"sdpa, {'torch.compile' if use_compile else 'eager'}, {accumulate} micro-batch(es) a step")
    print(f"{'model':8} {'B':>3} {'ms/step':>9} {'tokens/s':>9}")
    for name, layers, c, nh, nkv, ffn, vocab, b in SHAPES:
        if only and name != only:
            continue
        b = micro_batch or b
        torch.manual_seed(0)
        model = (Llama(layers, c, nh, nkv, ffn, vocab, seq=1024, theta=500000.0, tied=True, attention=sdpa_causal)
                 if name.startswith("llama") else Gpt(layers, c, nh, vocab)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
        step_fn = torch.compile(model) if use_compile else model
        idx = torch.randint(0, 50257, (b, 1024), device="cuda")
        tgt = torch.randint(0, 50257, (b, 1024), device="cuda")
        best = math.inf
        for rep in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(accumulate):
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    loss = step_fn(idx, tgt) / accumulate
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if rep >= 2:
                best = min(best, time.perf_counter() - t0)
        print(f"{name:8} {b:3d} {best * 1e3:9.1f} {b * accumulate * 1024 / best:9.0f}", flush=True)
        del model, opt


if __name__ == "__main__":
    main()
