"""The Python side of tests/cli/export.rs: what transformers, PEFT and llama.cpp make of the
files `rlx export` wrote. Prints one JSON document on stdout.

Usage:
  export_ref.py hf DIR TOKENS_JSON                 logits of a Hugging Face directory
  export_ref.py peft BASE_DIR ADAPTER_DIR TOKENS_JSON   logits of the base with the adapter
  export_ref.py tok DIR TEXT                       AutoTokenizer ids of TEXT, and the chat template's rendering
  export_ref.py gguf FILE PROMPTS_JSON MAX_TOKENS  llama.cpp greedy completions (token ids) of token prompts
"""

import json
import sys


def logits(model, tokens):
    import torch

    with torch.no_grad():
        out = model(torch.tensor([tokens], dtype=torch.long)).logits[0]
    return out.to(torch.float64).tolist()


def main():
    mode = sys.argv[1]
    if mode in ("hf", "peft"):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(2)
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32)
        if mode == "peft":
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, sys.argv[3])
        model.eval()
        print(json.dumps(logits(model, json.loads(sys.argv[-1]))))
    elif mode == "tok":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(sys.argv[2])
        text = sys.argv[3]
        chat = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
        print(json.dumps({"ids": tok.encode(text, add_special_tokens=False), "chat": chat}))
    elif mode == "gguf":
        from llama_cpp import Llama

        llm = Llama(model_path=sys.argv[2], n_ctx=1024, n_threads=2, verbose=False, logits_all=False)
        out = []
        for prompt in json.loads(sys.argv[3]):
            llm.reset()
            toks = []
            for t in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
                if t == llm.token_eos() or len(toks) >= int(sys.argv[4]):
                    break
                toks.append(t)
            out.append(toks)
        print(json.dumps(out))
    else:
        sys.exit(f"unknown mode {mode}")


main()
