"""Independent reference for `stagecraft-cli run`: continues a Stagecraft checkpoint's training in
PyTorch, float64, and prints what every step computed.

From checkpoint step k (model.safetensors, optimizer.safetensors, trainer.json, run.yaml) it runs
steps k+1 .. LAST of the same run with nothing of Stagecraft's but its documented contracts:
  - the model is the one config.json names, as Hugging Face's modeling code defines it, written
    with torch.nn.functional, gradients by autograd: GPT-2 (pre-LN, tanh GELU, learned positions,
    tied head), or Llama / Qwen2 (RMSNorm, rotary positions in the rotate-half form, grouped-query
    attention with each key/value head repeated for its query heads as transformers' repeat_kv
    does, SwiGLU, optional q/k/v biases, tied or untied head);
  - a mixture of experts (Mixtral's or Qwen3-MoE's names, config.json says which) as
    docs/engine.md defines it: softmax router over every expert, the top k (torch.topk), their
    probabilities renormalised to sum to 1 (Mixtral always; Qwen3-MoE where norm_topk_prob), each
    token's output the weighted sum of its k SwiGLU experts plus the shared experts; with a
    capacity factor (run.yaml model.moe.capacity_factor) each expert keeps its first
    ceil(cf N k / E) assignments in token order; the load-balancing loss coef E sum_e f_e P_e of
    each micro-batch (f_e the share of its N k assignments that went to e, held constant, P_e the
    mean probability of e), summed over the layers, averaged over the micro-batches
    (train.micro_batch samples each, in batch order) and added to the LM loss;
  - the batch of optimizer step s (0-based) is sample j = 0 .. global_batch-1 at token
    splitmix64-hash(seed, s, j) mod (tokens - seq_len), a window of seq_len + 1 tokens
    (runtime/token_data.h); the loss is the mean cross-entropy over every token of the batch;
  - the gradients are clipped by torch.nn.utils.clip_grad_norm_ (global norm, train.grad_clip);
  - torch.optim.AdamW (eps 1e-8, train.beta1 / beta2) with train.weight_decay on matrices (2-D
    tensors: the embeddings and the projections' weights), none on biases and norms, its moments and step
    taken from optimizer.safetensors and trainer.json;
  - the lr of step s is linear warm-up lr (s + 1) / warmup_steps for s < warmup_steps, then cosine
    from lr to min_lr over the remaining steps - warmup_steps (train.* in run.yaml).

usage: train_ref.py START_CHECKPOINT DATA_FILE LAST_STEP [CHECKPOINT ...]
prints one JSON object: {"steps": [{step, loss, grad_norm, lr}] for steps k+1 .. LAST (1-based, as
the engine's step events count them), "weights": [{step, max_abs_diff, max_abs_moved,
rel_l2_diff}] for every CHECKPOINT given (the engine's weights after that many steps): the largest
difference from the reference, how far the weights moved since step k, and the L2 norm of the
difference over the L2 norm of that movement}.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F
import yaml  # python3-yaml: a dependency of python3-torch

sys.dont_write_bytecode = True  # the suites run this from the source tree: no __pycache__ there
from gpt2_eval import load as load_f32_safetensors  # noqa: E402 (beside this file)


def read_safetensors(path):
    """The tensors of a Stagecraft checkpoint file (gpt2_eval.py's reader), in float64."""
    return {name: t.double() for name, t in load_f32_safetensors(path).items()}


MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def batch(tokens, seed, step, samples, T):
    span = len(tokens) - T
    idx, tgt = [], []
    for j in range(samples):
        start = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ j) % span
        idx.append(tokens[start:start + T])
        tgt.append(tokens[start + 1:start + T + 1])
    return torch.tensor(idx), torch.tensor(tgt)


def forward(w, idx, tgt, cfg, moe):
    if cfg["model_type"] in ("mixtral", "qwen3_moe"):
        # The aux loss is each micro-batch's: the batch in micro-batches, each's LM + aux, averaged.
        mb = moe["micro_batch"]
        parts = [forward_llama(w, idx[i:i + mb], tgt[i:i + mb], cfg, moe) for i in range(0, idx.shape[0], mb)]
        return sum(parts) / len(parts)
    if cfg["model_type"] in ("llama", "mistral", "qwen2"):
        return forward_llama(w, idx, tgt, cfg)
    return forward_gpt2(w, idx, tgt, cfg["n_layer"], cfg["n_embd"], cfg["n_head"])


def moe_mlp(w, i, h, cfg, moe):
    """The mixture-of-experts MLP of layer i on h (B, T, C): its output and load-balancing loss."""
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    N = x.shape[0]
    mixtral = cfg["model_type"] == "mixtral"
    E = cfg["num_local_experts"] if mixtral else cfg["num_experts"]
    k = cfg["num_experts_per_tok"]
    pre = "model.layers.%d.%s." % (i, "block_sparse_moe" if mixtral else "mlp")
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    probs = (x @ w[pre + "gate.weight"].T).softmax(dim=-1)
    top_p, top_e = torch.topk(probs, k, dim=-1)
    if mixtral or cfg.get("norm_topk_prob", False):
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    keep = torch.ones(N, k, dtype=torch.bool)
    if moe["capacity_factor"] > 0:
        cap = math.ceil(moe["capacity_factor"] * N * k / E)
        used = [0] * E
        for t in range(N):
            for j in range(k):
                e = int(top_e[t, j])
                keep[t, j] = used[e] < cap
                used[e] += int(keep[t, j])
    out = torch.zeros_like(x)
    for e in range(E):
        weight = (top_p * ((top_e == e) & keep)).sum(dim=-1)  # (N): the combine weight of e per token
        p = lambda n: w[pre + "experts.%d.%s.weight" % (e, n)]
        out = out + weight[:, None] * ((F.silu(x @ p(names[0]).T) * (x @ p(names[1]).T)) @ p(names[2]).T)
    shared = "model.layers.%d.mlp.shared_experts." % i
    if shared + "gate_proj.weight" in w:
        s = lambda n: w[shared + n + ".weight"]
        out = out + (F.silu(x @ s("gate_proj").T) * (x @ s("up_proj").T)) @ s("down_proj").T
    f = torch.stack([(top_e == e).sum() for e in range(E)]).double() / (N * k)  # before capacity
    aux = moe["aux_loss"] * E * (f * probs.mean(dim=0)).sum()
    return out.reshape(B, T, C), aux


def rms_norm(x, weight, eps):
    # transformers' LlamaRMSNorm: x / sqrt(mean(x^2) + eps), times the weight.
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(x, theta):
    # transformers' LlamaRotaryEmbedding and apply_rotary_pos_emb: x (B, heads, T, hs) at
    # positions 0 .. T-1, inverse frequencies theta^(-2i/hs), the angles repeated over both halves.
    T, hs = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def forward_llama(w, idx, tgt, cfg, moe=None):
    B, T = idx.shape
    aux = 0.0
    L, C, nh = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hs, eps, theta = C // nh, cfg["rms_norm_eps"], cfg["rope_theta"]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = w["model.embed_tokens.weight"][idx]
    for i in range(L):
        p = lambda n: w["model.layers.%d.%s" % (i, n)]
        h = rms_norm(x, p("input_layernorm.weight"), eps)

        def proj(name, heads):
            y = h @ p("self_attn.%s_proj.weight" % name).T
            bias = "model.layers.%d.self_attn.%s_proj.bias" % (i, name)
            if bias in w:
                y = y + w[bias]
            return y.view(B, T, heads, hs).transpose(1, 2)

        q, k, v = proj("q", nh), proj("k", nkv), proj("v", nkv)
        q, k = rotary(q, theta), rotary(k, theta)
        # repeat_kv: key/value head j serves query heads j * nh/nkv .. (j + 1) * nh/nkv - 1.
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        x = x + y @ p("self_attn.o_proj.weight").T
        h = rms_norm(x, p("post_attention_layernorm.weight"), eps)
        if moe is not None and i not in cfg.get("mlp_only_layers", []):
            y, a = moe_mlp(w, i, h, cfg, moe)
            x, aux = x + y, aux + a
            continue
        x = x + (F.silu(h @ p("mlp.gate_proj.weight").T) * (h @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T)) + aux


def forward_gpt2(w, idx, tgt, L, C, nh):
    B, T = idx.shape
    hs = C // nh
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    for i in range(L):
        p = lambda n: w["h.%d.%s" % (i, n)]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T))


def lr_at(s, t):
    if t["warmup_steps"] > 0 and s < t["warmup_steps"]:
        return t["lr"] * (s + 1) / t["warmup_steps"]
    span = max(1, t["steps"] - t["warmup_steps"])
    progress = min(1.0, max(0.0, (s - t["warmup_steps"]) / span))
    return t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * progress))


def main():
    start_dir, data_path, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
    checks = sys.argv[4:]
    run = yaml.safe_load(open(start_dir + "/run.yaml"))
    cfg = json.load(open(start_dir + "/config.json"))
    t = run["train"]
    # YAML 1.1 (PyYAML) reads "3e-04" as a string: the numbers are taken as floats explicitly.
    for k in ("lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip"):
        t[k] = float(t[k])
    T = run["model"]["seq_len"]
    m = run["model"].get("moe") or {}
    moe = {"aux_loss": float(m.get("aux_loss", 0.01)), "capacity_factor": float(m.get("capacity_factor", 0.0)),
           "micro_batch": int(t.get("micro_batch", 1))}
    first = json.load(open(start_dir + "/trainer.json"))["step"]
    raw = open(data_path, "rb").read()
    tokens = list(raw) if data_path.endswith(".txt") else list(struct.unpack("<%dH" % (len(raw) // 2), raw))

    w = read_safetensors(start_dir + "/model.safetensors")
    start = {n: x.clone() for n, x in w.items()}
    moments = read_safetensors(start_dir + "/optimizer.safetensors")
    for x in w.values():
        x.requires_grad_(True)
    names = sorted(w)
    decay = [w[n] for n in names if w[n].dim() >= 2]
    no_decay = [w[n] for n in names if w[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=1e-8)
    for n in names:
        opt.state[w[n]] = {"step": torch.tensor(float(first)), "exp_avg": moments["exp_avg." + n].clone(),
                           "exp_avg_sq": moments["exp_avg_sq." + n].clone()}

    steps, weights = [], []
    for s in range(first, last):
        idx, tgt = batch(tokens, t["seed"], s, t["global_batch"], T)
        opt.zero_grad(set_to_none=True)
        loss = forward(w, idx, tgt, cfg, moe)
        loss.backward()
        max_norm = t["grad_clip"] if t["grad_clip"] > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_([w[n] for n in names], max_norm)
        lr = lr_at(s, t)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        steps.append({"step": s + 1, "loss": loss.item(), "grad_norm": norm.item(), "lr": lr})
        for d in checks:
            if json.load(open(d + "/trainer.json"))["step"] == s + 1:
                eng = read_safetensors(d + "/model.safetensors")
                diff = moved = dmax = mmax = 0.0
                for n in names:
                    ref = w[n].detach()
                    diff += float(((ref - eng[n]) ** 2).sum())
                    moved += float(((ref - start[n]) ** 2).sum())
                    dmax = max(dmax, float((ref - eng[n]).abs().max()))
                    mmax = max(mmax, float((ref - start[n]).abs().max()))
                weights.append({"step": s + 1, "max_abs_diff": dmax, "max_abs_moved": mmax,
                                "rel_l2_diff": math.sqrt(diff) / max(math.sqrt(moved), 1e-300)})
    print(json.dumps({"steps": steps, "weights": weights}))


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
