"""Independent numpy reference for the local trainer's transformer (Llama / Qwen2 / Qwen3).

Reads a Hugging Face directory written by `LocalTrainer::export_merged` (config.json +
model.safetensors, parsed by hand) and prints the logits of one token sequence as JSON. The math
follows transformers' modeling_llama/qwen2/qwen3 in float64; it shares no code with the Rust side.
Usage: python3 trainer_ref.py DIR '[1, 2, 3]'
"""
import json
import struct
import sys

import numpy as np

d, toks = sys.argv[1], json.loads(sys.argv[2])
cfg = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8 : 8 + n])
W = {}
for k, v in hdr.items():
    if k == "__metadata__":
        continue
    s, e = v["data_offsets"]
    assert v["dtype"] == "F32", v["dtype"]
    W[k] = np.frombuffer(raw[8 + n + s : 8 + n + e], dtype=np.float32).reshape(v["shape"]).astype(np.float64)

H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps, theta, L = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["num_hidden_layers"]
qwen3 = cfg["model_type"] == "qwen3"
T = len(toks)


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def lin(x, p):
    y = x @ W[p + ".weight"].T
    b = W.get(p + ".bias")
    return y + b if b is not None else y


def rot(x):
    return np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], -1)


inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
ang = np.outer(np.arange(T), inv)
cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
x = W["model.embed_tokens.weight"][toks]
for l in range(L):
    p = f"model.layers.{l}"
    h = rms(x, W[p + ".input_layernorm.weight"])
    q = lin(h, p + ".self_attn.q_proj").reshape(T, H, hd).transpose(1, 0, 2)
    k = lin(h, p + ".self_attn.k_proj").reshape(T, KV, hd).transpose(1, 0, 2)
    v = lin(h, p + ".self_attn.v_proj").reshape(T, KV, hd).transpose(1, 0, 2)
    if qwen3:
        q, k = rms(q, W[p + ".self_attn.q_norm.weight"]), rms(k, W[p + ".self_attn.k_norm.weight"])
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + np.triu(np.full((T, T), -np.inf), 1)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    x = x + lin((s @ v).transpose(1, 0, 2).reshape(T, H * hd), p + ".self_attn.o_proj")
    h = rms(x, W[p + ".post_attention_layernorm.weight"])
    g = lin(h, p + ".mlp.gate_proj")
    x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + ".mlp.up_proj"), p + ".mlp.down_proj")
x = rms(x, W["model.norm.weight"])
head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
print(json.dumps((x @ head.T).tolist()))
