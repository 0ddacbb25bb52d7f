"""Reference for tst_kernels: a GPT-2 forward and backward in PyTorch, float64.

Written from the GPT-2 definition (Radford et al. 2019; Hugging Face's modeling_gpt2 and nanoGPT
compute the same), independently of Stagecraft's kernels: torch.nn.functional for layer norm,
GELU (tanh), softmax and cross-entropy, autograd for every gradient.

usage: gpt_ref.py IN OUT
  IN:  int32 B T C NH V L; int32 tokens (B*T); int32 targets (B*T); float64 parameters, flat, in
       the order of PARAMS below (Hugging Face names and shapes; Conv1D weights are (in, out)).
  OUT: float64 loss; logits (B*T*V); gradients of the mean loss, flat, same order as IN.
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F


def param_shapes(C, V, T, L):
    shapes = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        p = f"h.{l}."
        shapes += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                   (p + "attn.c_attn.weight", (C, 3 * C)), (p + "attn.c_attn.bias", (3 * C,)),
                   (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                   (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                   (p + "mlp.c_fc.weight", (C, 4 * C)), (p + "mlp.c_fc.bias", (4 * C,)),
                   (p + "mlp.c_proj.weight", (4 * C, C)), (p + "mlp.c_proj.bias", (C,))]
    return shapes + [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]


def main():
    data = open(sys.argv[1], "rb").read()
    B, T, C, NH, V, L = struct.unpack_from("<6i", data, 0)
    off = 24
    tokens = torch.frombuffer(bytearray(data[off:off + 4 * B * T]), dtype=torch.int32).long().view(B, T)
    off += 4 * B * T
    targets = torch.frombuffer(bytearray(data[off:off + 4 * B * T]), dtype=torch.int32).long().view(B * T)
    off += 4 * B * T
    flat = torch.frombuffer(bytearray(data[off:]), dtype=torch.float64)
    params, at = {}, 0
    order = param_shapes(C, V, T, L)
    for name, shape in order:
        n = math.prod(shape)
        params[name] = flat[at:at + n].clone().view(shape).requires_grad_(True)
        at += n
    assert at == flat.numel(), "parameter count mismatch"

    HS = C // NH
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = params["wte"][tokens] + params["wpe"][torch.arange(T)]
    for l in range(L):
        p = lambda n: params[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps=1e-5)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps=1e-5)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], eps=1e-5)
    logits = x @ params["wte"].t()  # tied head
    loss = F.cross_entropy(logits.view(B * T, V), targets)
    loss.backward()

    out = [loss.detach().view(1), logits.detach().reshape(-1)]
    out += [params[name].grad.reshape(-1) for name, _ in order]
    with open(sys.argv[2], "wb") as f:
        f.write(torch.cat(out).double().numpy().tobytes())  # numpy: a dependency of python3-torch


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
