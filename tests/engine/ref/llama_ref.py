"""Reference for tst_kernels: the Llama family's layers in PyTorch, float64, forward and backward.

Written from Hugging Face transformers' modeling_llama (LlamaRMSNorm, LlamaRotaryEmbedding with
rotate_half and apply_rotary_pos_emb, repeat_kv, LlamaMLP's act_fn(gate_proj(x)) * up_proj(x)),
independently of Stagecraft's kernels, autograd for every gradient. One difference, on purpose:
transformers computes the rotary inverse frequencies and angles in float32; here they are
float64, so that the comparison is of the formula, not of float32 angle rounding.

usage: llama_ref.py IN OUT
  IN:  int32 B T NH NKV HS F; float32 theta eps; then float64, flat:
         rms_x (B*T, C) with C = NH*HS, rms_w (C), rms_dout (B*T, C),
         qkv (B, T, (NH + 2*NKV)*HS) laid out q | k | v, rope_dout (same shape),
         att_dout (B, T, NH*HS),
         glu_x (B*T, 2F) laid out gate | up, glu_dout (B*T, F).
  OUT: float64, flat:
         rms_out (B*T, C), rms_dx (B*T, C), rms_dw (C),
         rope_out (qkv's shape), rope_dqkv (qkv's shape),
         att_out (B, T, NH*HS), att_dqkv (qkv's shape),
         glu_out (B*T, F), glu_dx (B*T, 2F).
  Each backward is of sum(out * dout) for its dout; the attention takes qkv as it is (no rotation).
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):  # LlamaRMSNorm.forward
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotary_cos_sin(T, HS, theta):  # LlamaRotaryEmbedding: (T, HS) each
    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    t = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):  # q (B, NH, T, HS), k (B, NKV, T, HS); cos, sin (T, HS)
    cos, sin = cos[None, None], sin[None, None]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):  # (B, NKV, T, HS) -> (B, NKV * n_rep, T, HS), each K/V head n_rep times in a row
    b, nkv, t, hs = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, nkv, n_rep, t, hs).reshape(b, nkv * n_rep, t, hs)


def split_heads(qkv, B, T, NH, NKV, HS):  # (B, T, (NH + 2 NKV) HS) -> q, k, v as (B, heads, T, HS)
    q, k, v = qkv.split([NH * HS, NKV * HS, NKV * HS], dim=2)
    return (q.view(B, T, NH, HS).transpose(1, 2), k.view(B, T, NKV, HS).transpose(1, 2),
            v.view(B, T, NKV, HS).transpose(1, 2))


def join_heads(x, B, T):  # (B, heads, T, HS) -> (B, T, heads HS)
    return x.transpose(1, 2).reshape(B, T, -1)


def main():
    data = open(sys.argv[1], "rb").read()
    B, T, NH, NKV, HS, Fd = struct.unpack_from("<6i", data, 0)
    theta, eps = struct.unpack_from("<2f", data, 24)
    flat = torch.frombuffer(bytearray(data[32:]), dtype=torch.float64)
    C, W = NH * HS, (NH + 2 * NKV) * HS
    at = 0

    def take(*shape):
        nonlocal at
        n = math.prod(shape)
        t = flat[at:at + n].clone().view(shape)
        at += n
        return t

    rms_x, rms_w, rms_dout = take(B * T, C), take(C), take(B * T, C)
    qkv, rope_dout, att_dout = take(B, T, W), take(B, T, W), take(B, T, C)
    glu_x, glu_dout = take(B * T, 2 * Fd), take(B * T, Fd)
    assert at == flat.numel(), "input size mismatch"
    out = []

    # RMSNorm
    x, w = rms_x.requires_grad_(True), rms_w.requires_grad_(True)
    y = rms_norm(x, w, eps)
    (y * rms_dout).sum().backward()
    out += [y, x.grad, w.grad]

    # Rotary positions on q and k; v passes through.
    x = qkv.clone().requires_grad_(True)
    q, k, v = split_heads(x, B, T, NH, NKV, HS)
    cos, sin = rotary_cos_sin(T, HS, theta)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    y = torch.cat([join_heads(q, B, T), join_heads(k, B, T), join_heads(v, B, T)], dim=2)
    (y * rope_dout).sum().backward()
    out += [y, x.grad]

    # Grouped-query causal attention: K and V repeated per query head (repeat_kv).
    x = qkv.clone().requires_grad_(True)
    q, k, v = split_heads(x, B, T, NH, NKV, HS)
    k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
    att = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = join_heads(att @ v, B, T)
    (y * att_dout).sum().backward()
    out += [y, x.grad]

    # SwiGLU
    x = glu_x.requires_grad_(True)
    gate, up = x.split(Fd, dim=1)
    y = F.silu(gate) * up
    (y * glu_dout).sum().backward()
    out += [y, x.grad]

    with open(sys.argv[2], "wb") as f:
        f.write(torch.cat([t.detach().reshape(-1) for t in out]).double().numpy().tobytes())


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
