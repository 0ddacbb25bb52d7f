"""Independent reference for `stagecraft-cli eval`: reads a Stagecraft checkpoint's
model.safetensors with nothing but the standard library and PyTorch, runs GPT-2 as Hugging Face
defines it (pre-LN blocks, tanh GELU, tied head), and prints the mean next-token cross-entropy
over windows k = 0..N-1 of seq_len + 1 tokens starting at k * seq_len.

usage: gpt2_eval.py CHECKPOINT_DIR DATA_FILE WINDOWS
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e["dtype"]
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(blob[b:end]), dtype=torch.float32).reshape(e["shape"])
    return out


def main():
    ckpt, data_path, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = json.load(open(ckpt + "/config.json"))
    w = load(ckpt + "/model.safetensors")
    L, C, nh, T = cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_positions"]
    raw = open(data_path, "rb").read()
    if data_path.endswith(".txt"):
        tokens = list(raw)
    else:
        tokens = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
    hs = C // nh
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    total = 0.0
    with torch.no_grad():
        for k in range(windows):
            window = torch.tensor(tokens[k * T:k * T + T + 1])
            idx, tgt = window[:-1], window[1:]
            x = w["wte.weight"][idx] + w["wpe.weight"][:T]
            for i in range(L):
                p = "h.%d." % i
                h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
                qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
                q, kk, v = qkv.split(C, dim=-1)
                q = q.view(T, nh, hs).transpose(0, 1)
                kk = kk.view(T, nh, hs).transpose(0, 1)
                v = v.view(T, nh, hs).transpose(0, 1)
                att = (q @ kk.transpose(-2, -1)) / math.sqrt(hs)
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = (att @ v).transpose(0, 1).reshape(T, C)
                x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
                h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
                h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
                x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
            x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
            head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
            total += F.cross_entropy(x @ head.T, tgt).item()
    print("%.9f" % (total / windows))


if __name__ == "__main__":
    main()
