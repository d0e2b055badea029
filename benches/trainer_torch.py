"""PyTorch + transformers (+ peft) side of benches/trainer.rs: the same shapes on the same CPU.

Usage: python3 trainer_torch.py HF_DIR PHASE THREADS
PHASE: sample1 | sample16 | train_lora | train_full. Prints one JSON line:
{"phase", "tokens_per_s", "peak_rss_mb"}. The model directory is SmolLM2-135M exported by rlx from
the GGUF (f32), so both sides run identical weights.
"""
import json
import resource
import sys
import time

import torch

d, phase, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
from transformers import AutoModelForCausalLM  # noqa: E402

model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
V = model.config.vocab_size
PROMPT, NEW = 32, 64
BATCH, SEQ, STEPS = 4, 128, 2


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if phase.startswith("sample"):
    model.eval()
    n = int(phase[len("sample") :])
    ids = torch.randint(0, V, (1, PROMPT)).repeat(n, 1)
    kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
              use_cache=True, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids[:, :8], **dict(kw, max_new_tokens=4, min_new_tokens=4))  # warm-up
        t = time.perf_counter()
        model.generate(ids, **kw)
        dt = time.perf_counter() - t
    print(json.dumps({"phase": phase, "tokens_per_s": n * NEW / dt, "peak_rss_mb": peak_mb()}))
else:
    if phase == "train_lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        model = get_peft_model(model, cfg)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    inp = torch.randint(0, V, (BATCH, SEQ), generator=g)
    tgt = torch.randint(0, V, (BATCH, SEQ), generator=g)
    q = -torch.rand(BATCH, SEQ, generator=g) * 5
    adv = torch.randn(BATCH, SEQ, generator=g)

    def step():
        logits = model(input_ids=inp).logits
        logp = torch.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        loss = -(torch.exp(logp - q) * adv).sum()  # importance_sampling
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    t = time.perf_counter()
    for _ in range(STEPS):
        step()
    dt = (time.perf_counter() - t) / STEPS
    print(json.dumps({"phase": phase, "tokens_per_s": BATCH * SEQ / dt, "step_s": dt, "peak_rss_mb": peak_mb()}))
