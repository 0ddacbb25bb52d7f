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

from bench_kernels_torch import set_threads, time_train_step
from llama_torch import CausalSoftmax, Llama


def main():
    threads = [int(a) for a in sys.argv[1:]] or [1, 2]
    L, C, NH, NKV, F_, T, B, V = 4, 256, 4, 2, 688, 256, 8, 256
    torch.manual_seed(0)
    print(f"{'threads':>7} {'torch/blas':>10} {'ms/step':>9} {'tokens/s':>9} {'cpu ms/step':>12}")
    for n in threads:
        for tt, bt in sorted({(n, n), (1, n)}):
            set_threads(tt, bt)
            model = Llama(L, C, NH, NKV, F_, V, seq=T, theta=10000.0, tied=False, attention=CausalSoftmax(T))
            ts, cpu = time_train_step(model, B, T, V)
            print(f"{n:>7} {f'{tt}/{bt}':>10} {ts * 1e3:>9.1f} {B * T / ts:>9.0f} {cpu * 1e3:>12.1f}")


if __name__ == "__main__":
    main()
