#!/usr/bin/env python3
"""TRL anchor: the same GRPO experiment trained by rlx and by TRL's GRPOTrainer, graded by rlx.

    python3 scripts/trl_anchor.py [SPEC] [KEY=VALUE ...] [--seeds 0,1,2] [--out DIR]

For each seed it
  1. runs `rlx run SPEC KEY=VALUE... seed=S` (or reuses that run when it finished already);
  2. reads the run's `resolved.json` (the recipe with every default filled in) and maps it onto
     `GRPOConfig`, printing the table and every setting that TRL cannot match;
  3. starts TRL from the same weights: rlx's own base (the GGUF dequantised to f32), written as a
     Hugging Face directory by `rlx export` of the run's checkpoint with its LoRA B set to zero;
  4. trains with TRL on the prompts `rlx render` prints (token counts checked), in the order rlx
     sampled them, rewarded by `rlx grade` with rlx's `tests_all_pass` + `format_coef` formula
     (checked against the rewards rlx recorded for its own first step);
  5. turns TRL's LoRA adapter into an rlx checkpoint (`rlx export --adapter-only` of it gives the
     adapter back, checked) so that `rlx eval` evaluates both systems' checkpoints through the same
     code: greedy (T 0, 1 sample) and sampled (the spec's eval temperature and samples);
  6. prints per seed baseline -> final for both systems under both protocols, seconds per step, and
     paired tests between the systems' final per-problem scores (and pooled over seeds).

Runs as any python3; the TRL side runs in a cached virtualenv under ~/.cache/rlx/venvs (made on
first use; prints SKIPPED naming what is missing when it cannot be made). Heavy jobs run under
`flock /tmp/rlx-cpu.lock`. See docs/trl-anchor.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paired_stats as stats  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TRL_PIN = "trl==1.16.0"
# The export tests' virtualenv (tests/cli/export.rs): torch 2.15 CPU, transformers 5.23, peft 0.21.2.
HF_PINS = ["torch==2.15.0", "transformers==5.23.0", "peft==0.21.2", "accelerate==1.15.0"]
VENVS = Path.home() / ".cache" / "rlx" / "venvs"
IN_VENV = "RLX_TRL_ANCHOR_VENV"


def log(msg: str) -> None:
    print(msg, flush=True)


def skipped(why: str) -> None:
    log(f"SKIPPED: {why}")
    sys.exit(0)


# ---------------------------------------------------------------------------------------------
# The virtualenv
# ---------------------------------------------------------------------------------------------


def hf_venv() -> Path | None:
    """An existing export-test venv with the pinned HF stack, if any."""
    for d in sorted(VENVS.glob("hf-*")):
        sp = list(d.glob("lib/python3*/site-packages"))
        if sp and (sp[0] / "torch").is_dir() and (sp[0] / "peft").is_dir():
            return d
    return None


def ensure_venv() -> Path:
    """The anchor's venv: trl pinned, on top of the HF venv's site-packages (a .pth file) when
    that venv exists, else a fresh venv with every pin installed from PyPI."""
    base = hf_venv()
    key = hashlib.sha256(json.dumps([TRL_PIN, HF_PINS, str(base)]).encode()).hexdigest()[:8]
    venv = VENVS / f"trl-{key}"
    py = venv / "bin" / "python"
    ok = venv / ".rlx-ready"
    if ok.exists():
        return py
    VENVS.mkdir(parents=True, exist_ok=True)
    lock = open(VENVS / f"trl-{key}.lock", "w")
    try:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
    except ImportError:
        pass
    if ok.exists():
        return py
    host = shutil.which("python3.11") or sys.executable
    t0 = time.time()
    log(f"setting up {venv} ({TRL_PIN}" + (f" over {base.name}" if base else f", {' '.join(HF_PINS)}") + ")")
    shutil.rmtree(venv, ignore_errors=True)
    r = subprocess.run([host, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        skipped(f"`{host} -m venv` failed: {r.stderr.strip()[-300:]}")
    pins = [TRL_PIN]
    if base is not None:
        ver = subprocess.run([str(py), "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
        base_sp = next(base.glob(f"lib/python{ver}/site-packages"), None)
        if base_sp is None:
            skipped(f"{base} has no site-packages for python {ver}")
        sp = next(venv.glob(f"lib/python{ver}/site-packages"))
        (sp / "_rlx_hf_base.pth").write_text(f"{base_sp}\n")
    else:
        pins = HF_PINS + pins
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", *pins], capture_output=True, text=True)
    if r.returncode != 0:
        skipped(f"pip install {' '.join(pins)} failed (PyPI unreachable?): {r.stderr.strip()[-400:]}")
    chk = subprocess.run([str(py), "-c", "import trl, peft, torch, transformers"], capture_output=True, text=True)
    if chk.returncode != 0:
        skipped(f"trl/peft/torch/transformers do not import in {venv}: {chk.stderr.strip()[-300:]}")
    ok.write_text(f"{time.time() - t0:.1f}\n")
    log(f"venv ready in {time.time() - t0:.1f} s")
    return py


# ---------------------------------------------------------------------------------------------
# rlx
# ---------------------------------------------------------------------------------------------


class Rlx:
    def __init__(self, binary: str, lock: str | None):
        self.bin = binary
        self.lock = lock if lock and shutil.which("flock") else None

    def run(self, args: list[str], heavy: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [self.bin, *args]
        if heavy and self.lock:
            cmd = ["flock", self.lock, *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(f"error: `{' '.join(cmd)}` exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return r


def run_dir_of(rlx: Rlx, spec: str, overrides: list[str]) -> Path:
    out = rlx.run(["validate", spec, *overrides, "--explain"]).stdout
    m = re.search(r"^\s*directory\s+(\S+)", out, re.M)
    if not m:
        raise SystemExit(f"error: `rlx validate --explain` printed no run directory:\n{out}")
    return Path(m.group(1))


def finished(run: Path) -> bool:
    try:
        return json.loads((run / "status.json").read_text()).get("state") == "finished"
    except (OSError, ValueError):
        return False


def rlx_train(rlx: Rlx, spec: str, overrides: list[str]) -> tuple[Path, float]:
    run = run_dir_of(rlx, spec, overrides)
    if finished(run):
        log(f"rlx: reusing the finished run {run}")
        return run, float("nan")
    if run.exists():
        shutil.rmtree(run)  # an interrupted run of ours: start it again rather than mix two
    log(f"rlx: training {run.name} ... (load average {os.getloadavg()[0]:.2f})")
    t0 = time.time()
    rlx.run(["run", spec, *overrides], heavy=True)
    log(f"rlx: done in {time.time() - t0:.0f} s (load average {os.getloadavg()[0]:.2f})")
    return run, time.time() - t0


def render_prompts(rlx: Rlx, spec: str, overrides: list[str], n: int, eval_set: bool = False) -> dict[str, tuple[str, int]]:
    """problem id -> (prompt text exactly as rlx renders it, rlx's token count)."""
    args = ["render", spec, *overrides, "--n", str(n)] + (["--eval"] if eval_set else [])
    out = rlx.run(args).stdout
    head = re.compile(r"^── problem \d+ \((.+?)\) · (\d+) tokens ──\n", re.M)
    marks = list(head.finditer(out))
    end = re.search(r"^──\n", out[marks[-1].end():], re.M) if marks else None
    prompts = {}
    for i, m in enumerate(marks):
        stop = marks[i + 1].start() if i + 1 < len(marks) else marks[-1].end() + end.start()
        text = out[m.end():stop]
        if not text.endswith("\n"):
            raise SystemExit(f"error: cannot parse `rlx render` output near problem {m.group(1)}")
        prompts[m.group(1)] = (text[:-1], int(m.group(2)))  # render prints a blank line after each
    return prompts


def eval_dir(rlx: Rlx, target: str, overrides: list[str], cache: dict, name: str) -> Path:
    if name in cache and (Path(cache[name]) / "eval_results.jsonl").exists():
        return Path(cache[name])
    log(f"rlx eval {target} {' '.join(overrides)}")
    r = rlx.run(["eval", target, *overrides], heavy=True)
    m = re.search(r"results → (\S+)/eval_results\.jsonl", r.stdout + r.stderr)
    if not m:
        raise SystemExit(f"error: `rlx eval` printed no results path:\n{r.stderr[-2000:]}")
    cache[name] = m.group(1)
    return Path(m.group(1))


def per_problem(path: Path, step: str = "last") -> dict[str, float]:
    """problem id -> correct/n at one eval of an eval_results.jsonl (`base`: step -1), from the
    spec's sampling protocol: an eval with `eval.greedy` also writes one greedy row per problem
    (`"protocol": "greedy"`), which must not replace the sampled one. An eval run at T 0 writes
    only rows without a protocol, and those are greedy."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("protocol", "sampled") == "sampled"]
    steps = sorted({r["step"] for r in rows})
    want = steps[0] if step == "base" else steps[-1]
    return {str(r["problem_id"]): r["correct"] / r["n"] for r in rows if r["step"] == want}


# ---------------------------------------------------------------------------------------------
# The mapping
# ---------------------------------------------------------------------------------------------

LOSS_AGG = {  # rlx grpo.loss_agg -> TRL loss_type, and why it is the same objective
    "sum": ("dr_grpo", "Σ_i Σ_t ℓ vs Σ/(N·max_tokens): a constant factor, which Adam (eps 1e-12) divides out"),
    "sequence_mean": ("grpo", "mean over each sequence's tokens, then over sequences: the same"),
    "token_mean": ("dapo", "Σ/(tokens of the step): the same"),
    "constant": ("dr_grpo", "Σ/(N·C): the same when C = max_tokens"),
}


def mapping(spec: dict) -> tuple[dict, list[tuple[str, str, str]], list[str]]:
    """resolved.json -> (GRPOConfig kwargs and LoRA settings, rows of the table, what cannot be matched)."""
    g, s, o, m = spec["grpo"], spec["sampling"], spec["optimizer"], spec["model"]
    rows, unmatched = [], []
    cfg: dict = {}

    def row(rlx_key, value, trl, note=""):
        rows.append((f"{rlx_key} = {value}", trl, note))

    if m.get("finetune") != "lora":
        unmatched.append(f"model.finetune = {m.get('finetune')}: the anchor trains LoRA only")
    lora = m["lora"]
    cfg["lora"] = {"r": lora["rank"], "lora_alpha": lora["alpha"], "target_modules": lora["targets"]}
    row("model.lora.rank / alpha", f"{lora['rank']} / {lora['alpha']}", f"LoraConfig(r={lora['rank']}, lora_alpha={lora['alpha']})",
        "scale α/r on both; dropout 0, no bias")
    row("model.lora.targets", ",".join(lora["targets"]), "target_modules (same names)")
    cfg["learning_rate"] = o["learning_rate"]
    row("optimizer.learning_rate", o["learning_rate"], f"learning_rate={o['learning_rate']}, lr_scheduler_type=constant, warmup 0",
        "rlx has no schedule")
    cfg["adam_beta1"], cfg["adam_beta2"], cfg["adam_epsilon"] = o["beta1"], o["beta2"], o["eps"]
    row("optimizer.beta1/beta2/eps", f"{o['beta1']}/{o['beta2']}/{o['eps']}", "adam_beta1/adam_beta2/adam_epsilon, optim=adamw_torch")
    cfg["weight_decay"] = o["weight_decay"]
    row("optimizer.weight_decay", o["weight_decay"], f"weight_decay={o['weight_decay']}")
    cfg["max_grad_norm"] = o["grad_clip_norm"]
    row("optimizer.grad_clip_norm", o["grad_clip_norm"], f"max_grad_norm={o['grad_clip_norm']}", "0: no clipping on both")
    P, G = g["prompts_per_step"], g["group_size"]
    cfg["num_generations"] = G
    cfg["per_device_train_batch_size"] = G
    cfg["gradient_accumulation_steps"] = P
    row("grpo.group_size", G, f"num_generations={G}")
    row("grpo.prompts_per_step", P, f"per_device_train_batch_size={G} × gradient_accumulation_steps={P}",
        f"{P * G} completions, one optimizer step per step")
    cfg["max_steps"] = spec["schedule"]["max_steps"]
    row("schedule.max_steps", cfg["max_steps"], f"max_steps={cfg['max_steps']}")
    cfg["max_completion_length"] = s["max_tokens"]
    cfg["temperature"] = s["temperature"]
    cfg["top_p"] = s["top_p"]
    cfg["top_k"] = s["top_k"]
    row("sampling.max_tokens", s["max_tokens"], f"max_completion_length={s['max_tokens']}")
    row("sampling.temperature/top_p/top_k", f"{s['temperature']}/{s['top_p']}/{s['top_k']}", "temperature/top_p/top_k")
    if s.get("stop"):
        stops = [x for x in s["stop"] if isinstance(x, str)]
        if len(stops) != len(s["stop"]):
            unmatched.append(f"sampling.stop = {s['stop']}: only stop strings are mapped, not token ids")
        cfg["stop_strings"] = stops
        row("sampling.stop", stops, "generation_kwargs stop_strings + completions cut as rlx cuts them",
            "a completion ends with the token whose text completes the stop string; nothing after it is trained")
        if bool(g.get("overlong") and g["overlong"].get("kind") == "mask"):
            unmatched.append("overlong mask with stop strings: TRL's mask_truncated_completions counts a completion "
                             "that ended at a stop string as truncated")
    adv = g["advantage"]["kind"]
    scale = {"mean_center": "none", "zscore": "group"}.get(adv)
    if scale is None:
        unmatched.append(f"grpo.advantage = {adv}: TRL's GRPOTrainer has no such advantage (mean_center used)")
        scale = "none"
    cfg["scale_rewards"] = scale
    row("grpo.advantage", adv, f"scale_rewards={scale}", "A = r − mean(r) of the group" if scale == "none" else "z-score")
    loss = g["loss"]
    kind = loss["kind"]
    if kind in ("ppo", "importance_sampling"):
        lo, hi = loss.get("clip_low_threshold", 0.0), loss.get("clip_high_threshold", 1e9)
        cfg["epsilon"], cfg["epsilon_high"] = 1 - lo, hi - 1
        row("grpo.loss", f"{kind} [{lo}, {hi}]", f"epsilon={1 - lo:.3g}, epsilon_high={hi - 1:.3g}",
            "TRL's ratio is 1 on-policy (no old logprobs from the sampler): the clip never acts")
        if kind == "importance_sampling":
            unmatched.append("grpo.loss = importance_sampling: TRL always clips; with TRL's on-policy ratio of 1 the gradients are the same")
    else:
        unmatched.append(f"grpo.loss = {kind}: no TRL loss_type mapped (ppo's clip used)")
        cfg["epsilon"], cfg["epsilon_high"] = 0.2, 0.2
    agg = (g.get("loss_agg") or {"kind": "sum"})["kind"]
    cfg["loss_type"], why = LOSS_AGG[agg]
    if agg == "constant" and (g["loss_agg"].get("tokens") or s["max_tokens"]) != s["max_tokens"]:
        unmatched.append("grpo.loss_agg.tokens ≠ max_tokens: TRL's dr_grpo divides by max_completion_length")
    if agg == "sum" and o["grad_clip_norm"] > 0:
        unmatched.append("loss_agg sum with grad clipping: the clip sees TRL's dr_grpo gradient N·max_tokens times smaller")
    row("grpo.loss_agg", agg, f"loss_type={cfg['loss_type']}", why)
    kl = g.get("kl")
    cfg["beta"] = kl["coef"] if kl else 0.0
    row("grpo.kl", kl or "off", f"beta={cfg['beta']}", "k3 estimator in TRL" if kl else "no reference model")
    if kl and kl.get("estimator", "k1") != "k3":
        unmatched.append(f"grpo.kl.estimator = {kl.get('estimator', 'k1')}: TRL's KL is k3 in the loss")
    cfg["num_iterations"] = 1
    row("(one update per step)", "1 optimizer step", "num_iterations=1, steps_per_generation=grad. accum.")
    if g.get("skip_degenerate"):
        row("grpo.skip_degenerate", True, "(nothing)", "a group with one reward has A = 0: no gradient on either side")
    ov = g.get("overlong")
    cfg["mask_truncated_completions"] = bool(ov and ov.get("kind") == "mask")
    if ov and ov.get("kind") != "mask":
        unmatched.append(f"grpo.overlong = {ov}: no soft overlong penalty in TRL's GRPOTrainer")
    for key in ("dynamic_sampling",):
        if g.get(key):
            unmatched.append(f"grpo.{key} = {g[key]}: not in TRL's GRPOTrainer")
    if g.get("max_steps_off_policy"):
        unmatched.append(f"grpo.max_steps_off_policy = {g['max_steps_off_policy']}: TRL samples on-policy")
    known = {"prompts_per_step", "group_size", "batch_size", "advantage", "skip_degenerate", "loss", "loss_agg",
             "kl", "overlong", "dynamic_sampling", "max_steps_off_policy", "learner_temperature"}
    for k, v in g.items():
        if k not in known and v not in (None, False):
            unmatched.append(f"grpo.{k} = {v}: new to this script, not mapped")
    r = spec["reward"]
    if r["kind"] != "tests_all_pass" or r.get("terms"):
        unmatched.append(f"reward.kind = {r['kind']}: the anchor computes tests_all_pass + format_coef only")
    row("reward", f"{r['kind']} + {r['format_coef']}·format, {r['test_timeout_s']} s/test",
        "reward_funcs=[rlx grade]", "same sandbox, code extraction and formula")
    cfg["seed"] = spec["seed"]
    row("seed", spec["seed"], f"seed={spec['seed']}", "different RNGs: same seed, different samples")
    if "learner_temperature" in g:  # rlx ≥ the learner-temperature change: None = sampling.temperature
        lt = g["learner_temperature"]
        eff = lt if lt is not None else (s["temperature"] if s["temperature"] > 0 else 1.0)
        cfg["learner_temperature"] = eff
        row("grpo.learner_temperature", lt if lt is not None else f"default ({eff})", f"learner logits / {eff}",
            "TRL's fused LM head gets this temperature")
    else:
        unmatched.append("learner temperature: TRL divides the learner's logits by sampling.temperature; this rlx "
                         "has no grpo.learner_temperature and scores the untempered policy "
                         "(--trl-learner-temperature 1 makes TRL do the same)")
    row("sampler", "rlx: GGUF blocks (Q4_1, int8 activations)", "TRL: HF generate, f32",
        "TRL's importance ratio is exactly 1 (old logprobs = its learner's)")
    unmatched.append("sampler: rlx samples from its GGUF blocks (Q4_1 base, int8 activations) and scores what it "
                     "sampled with its f32 trainer; TRL samples and scores in f32 with the same weights (ratio 1)")
    unmatched.append("random streams: sampling seeds, LoRA A init (both Kaiming-uniform, B = 0) differ")
    return cfg, rows, unmatched


def print_table(rows, unmatched) -> None:
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    log(f"\n{'rlx (resolved spec)':<{w1}}  {'TRL GRPOConfig':<{w2}}  note")
    for a, b, c in rows:
        log(f"{a:<{w1}}  {b:<{w2}}  {c}")
    log("not matched:")
    for u in unmatched:
        log(f"  - {u}")
    log("")


# ---------------------------------------------------------------------------------------------
# Checkpoints: rlx state <-> PEFT adapter
# ---------------------------------------------------------------------------------------------


def last_checkpoint(run: Path) -> Path:
    rows = [json.loads(x) for x in (run / "checkpoints.jsonl").read_text().splitlines() if x.strip()]
    return run / rows[-1]["state_path"]


def synth_run(template_run: Path, dest: Path, tensors: dict, step_name: str, ckpt_row: dict) -> Path:
    """A run directory rlx reads as its own: the template run's spec and a checkpoint holding
    `tensors` (the LoRA parameters; Adam moments zero)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        shutil.rmtree(dest)
    ck = dest / "checkpoints" / step_name
    ck.mkdir(parents=True)
    for f in ("spec.yaml", "resolved.json", "status.json", "provenance.json"):
        if (template_run / f).exists():
            shutil.copy(template_run / f, dest / f)
    tmpl = last_checkpoint(template_run)
    shutil.copy(tmpl / "state.json", ck / "state.json")
    state = load_file(tmpl / "state.safetensors")
    out = {}
    for k, v in state.items():
        if k.startswith("adam_"):
            out[k] = torch.zeros_like(v)
        else:
            name = k.removeprefix("param.")
            if name not in tensors:
                raise SystemExit(f"error: the adapter has no tensor for rlx's `{name}`")
            t = tensors[name].to(torch.float32).contiguous()
            if t.shape != v.shape:
                raise SystemExit(f"error: `{k}`: adapter {tuple(t.shape)}, rlx {tuple(v.shape)}")
            out[k] = t
    save_file(out, ck / "state.safetensors")
    (dest / "checkpoints.jsonl").write_text(json.dumps({**ckpt_row, "name": step_name, "state_path": f"checkpoints/{step_name}"}) + "\n")
    return dest


def base_hf(rlx: Rlx, rlx_run: Path, out: Path) -> Path:
    """rlx's base model, as rlx trains on it, as a Hugging Face directory: the run's checkpoint
    with every LoRA B zero, merged by `rlx export` (W + (α/r)·0·A = W exactly)."""
    import torch
    from safetensors.torch import load_file

    dest = out / "base-hf"
    if (dest / "model.safetensors").exists():
        return dest
    state = load_file(last_checkpoint(rlx_run) / "state.safetensors")
    zero = {k.removeprefix("param."): (torch.zeros_like(v) if k.endswith("lora_B.weight") else v)
            for k, v in state.items() if k.startswith("param.")}
    row = json.loads((rlx_run / "checkpoints.jsonl").read_text().splitlines()[-1])
    synth = synth_run(rlx_run, out / "base-run", zero, "step-base", row)
    rlx.run(["export", str(synth), "--out", str(dest)])
    return dest


def trl_checkpoint(rlx: Rlx, rlx_run: Path, adapter: Path, dest: Path) -> tuple[Path, float]:
    """TRL's PEFT adapter as an rlx checkpoint of a run with rlx's spec; returns it and the max
    |Δ| between the adapter and what `rlx export --adapter-only` reads back from it."""
    from safetensors.torch import load_file

    peft = load_file(adapter / "adapter_model.safetensors")
    tensors = {k.removeprefix("base_model.model."): v for k, v in peft.items()}
    row = json.loads((rlx_run / "checkpoints.jsonl").read_text().splitlines()[-1])
    name = last_checkpoint(rlx_run).name
    run = synth_run(rlx_run, dest, tensors, name, row)
    back = dest.parent / "trl-adapter-roundtrip"
    shutil.rmtree(back, ignore_errors=True)
    rlx.run(["export", str(run), "--adapter-only", "--out", str(back)])
    again = load_file(back / "adapter_model.safetensors")
    diff = 0.0
    for k, v in peft.items():
        k2 = k if k in again else k.replace(".weight", ".default.weight")
        if k2 not in again:
            raise SystemExit(f"error: rlx's adapter export lacks `{k}`")
        diff = max(diff, (again[k2].float() - v.float()).abs().max().item())
    return run, diff


# ---------------------------------------------------------------------------------------------
# The reward: rlx grade
# ---------------------------------------------------------------------------------------------


def grade(rlx_bin: str, problems: str, fmt: str, rows: list[dict], timeout: float, memory_mb: int, work: Path) -> list[dict]:
    work.mkdir(parents=True, exist_ok=True)
    cin, cout = work / "completions.jsonl", work / "verdicts.jsonl"
    cin.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [rlx_bin, "grade", "--problems", problems, "--completions", str(cin), "--out", str(cout), "--no-progress",
           "--timeout", str(timeout), "--memory-mb", str(memory_mb)]
    if fmt and fmt != "auto":
        cmd += ["--format", fmt]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 3):
        raise RuntimeError(f"`rlx grade` exited {r.returncode}: {r.stderr[-2000:]}")
    return [json.loads(x) for x in cout.read_text().splitlines() if x.strip()]


def reward_of(verdict: dict, format_coef: float) -> float | None:
    """rlx's tests_all_pass: 1 when every test passes, plus format_coef × (0 with a code block,
    −1 without); an infrastructure error is no reward at all (rlx drops the group)."""
    st = verdict["status"]
    if st == "infra_error":
        return None
    return (1.0 if st == "passed" else 0.0) + format_coef * (-1.0 if st == "format_error" else 0.0)


# ---------------------------------------------------------------------------------------------
# TRL training (runs in the venv, in a child process under the CPU lock)
# ---------------------------------------------------------------------------------------------


def trl_train(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.generation.utils import GenerationMixin
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(job["threads"])
    cfg = job["cfg"]
    tok = AutoTokenizer.from_pretrained(job["base"])
    # The prompts are text with the chat template applied: TRL tokenizes them as `tok(text=...)`.
    bad = [(pid, len(tok(text=p)["input_ids"]), n) for pid, (p, n) in job["prompts"].items() if len(tok(text=p)["input_ids"]) != n]
    if bad:
        raise SystemExit(f"error: TRL's tokenization of rlx's prompts differs in length (id, TRL, rlx): {bad[:5]}")
    model = AutoModelForCausalLM.from_pretrained(job["base"], dtype=torch.float32)
    order = job["order"]
    ds = Dataset.from_list([{"prompt": job["prompts"][pid][0], "problem_id": pid} for pid in order])
    timing = {"generate_s": [], "reward_s": [], "step_s": []}
    rewards_log: list[list[float]] = []
    gen = GenerationMixin.generate

    def timed_generate(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return gen(self, *a, **k)
        finally:
            timing["generate_s"].append(time.perf_counter() - t0)

    GenerationMixin.generate = timed_generate
    stops = cfg.pop("stop_strings", None)
    if stops:
        # `generation_kwargs={"stop_strings": ...}` makes HF's generate stop a row early (its
        # StopStringCriteria needs the tokenizer at the call, which TRL does not pass), but TRL
        # then pads the row and keeps every token up to the first EOS, so a stopped completion
        # would carry pad/EOS tokens that rlx never trains on. Cutting TRL's completion ids the
        # way rlx's sampler stops (the first token after which the text contains a stop string,
        # that token included: `hits_stop_text` in src/backend/local/sampler.rs) makes the
        # trained tokens and the graded text the same on both sides.
        def cut(ids):
            for i in range(len(ids)):
                if any(x in tok.decode(ids[max(0, i - 15):i + 1], skip_special_tokens=False) for x in stops):
                    return i + 1
            return len(ids)

        sampled = GenerationMixin.generate

        def generate_with_stops(self, *a, **k):
            k.setdefault("tokenizer", tok)
            return sampled(self, *a, **k)

        GenerationMixin.generate = generate_with_stops
        single = GRPOTrainer._generate_single_turn

        def single_turn_cut(self, *a, **k):
            ids, logprobs = single(self, *a, **k)
            ends = [cut(x) for x in ids]
            ids = [x[:e] for x, e in zip(ids, ends)]
            if logprobs is not None:
                logprobs = [x[:e] for x, e in zip(logprobs, ends)]
            return ids, logprobs

        GRPOTrainer._generate_single_turn = single_turn_cut
    work = Path(job["out"]) / "grade"
    infra = [0]

    def rlx_reward(prompts, completions, problem_id, **_):
        t0 = time.perf_counter()
        rows = [{"problem_id": pid, "completion": c} for pid, c in zip(problem_id, completions)]
        verdicts = grade(job["rlx"], job["problems"], job["format"], rows, job["timeout"], job["memory_mb"], work)
        out = [reward_of(v, job["format_coef"]) for v in verdicts]
        infra[0] += sum(r is None for r in out)
        rewards_log.append([r for r in out if r is not None])
        timing["reward_s"].append(time.perf_counter() - t0)
        return out

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            timing["step_s"].append(time.perf_counter() - self.t0)
            gen_s = sum(timing["generate_s"]) - self.gen0 if hasattr(self, "gen0") else sum(timing["generate_s"])
            self.gen0 = sum(timing["generate_s"])
            mean = sum(rewards_log[-1]) / max(1, len(rewards_log[-1])) if rewards_log else float("nan")
            log(f"  TRL step {state.global_step}: {timing['step_s'][-1]:.1f} s (generate {gen_s:.1f} s, "
                f"rlx grade {timing['reward_s'][-1] if timing['reward_s'] else 0:.1f} s), reward mean {mean:.3f}")
            # An interrupted run still leaves its measurements.
            (Path(job["out"]) / "progress.json").write_text(json.dumps({"timing": timing, "reward_mean": [
                sum(r) / max(1, len(r)) for r in rewards_log], "loadavg": os.getloadavg()}))

    top_k = cfg.pop("top_k")
    lora = cfg.pop("lora")
    learner_t = cfg.pop("learner_temperature", None)
    if job.get("learner_temperature") is not None:
        learner_t = job["learner_temperature"]
    if learner_t is not None:
        # GRPOTrainer hands its temperature to the fused LM head once, at construction; the
        # generation config keeps sampling.temperature.
        import trl.trainer.grpo_trainer as grpo_mod

        fused = grpo_mod.add_fused_lm_head
        grpo_mod.add_fused_lm_head = lambda model, temperature=1.0, **k: fused(model, temperature=learner_t, **k)
    args = GRPOConfig(
        output_dir=str(Path(job["out"]) / "trainer"), lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=1, save_strategy="no",
        shuffle_dataset=False, remove_unused_columns=False, disable_dropout=True, log_completions=False,
        dataloader_num_workers=0, top_k=top_k if top_k else None,
        # TRL's defaults are for GPUs short of memory: gradient checkpointing on (the backward
        # recomputes the forward) and `use_cache=False`. rlx recomputes nothing and keeps a KV
        # cache when sampling, and 135M parameters fit, so the anchor gives TRL the same.
        gradient_checkpointing=False, use_cache=True,
        generation_kwargs={"use_cache": True, **({"stop_strings": stops} if stops else {})}, **cfg)
    peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["lora_alpha"], target_modules=lora["target_modules"],
                             lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=[rlx_reward], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=peft_config, callbacks=[Clock()])
    t0, load0 = time.perf_counter(), os.getloadavg()
    trainer.train()
    wall = time.perf_counter() - t0
    adapter = Path(job["out"]) / "adapter"
    trainer.model.save_pretrained(str(adapter))
    hist = [h for h in trainer.state.log_history if "reward" in h]
    result = {
        "versions": {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "wall_s": wall, "timing": timing, "infra_errors": infra[0],
        "reward_mean": [sum(r) / max(1, len(r)) for r in rewards_log],
        "log": hist, "adapter": str(adapter), "threads": torch.get_num_threads(), "learner_temperature": learner_t,
        "loadavg_before_after": [load0, os.getloadavg()],
    }
    (Path(job["out"]) / "train.json").write_text(json.dumps(result, indent=1))


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------


def paired(a: dict, b: dict, greedy: bool) -> str:
    """One seed's B − A over the problems: greedy scores are 0/1 (exact McNemar), sampled ones
    correct/n (sign-flip)."""
    r = stats.paired(a, b, binary=greedy)
    return f"{100 * r['mean']:+.1f} pp, {r['up']} up / {r['down']} down, {r['test']} p = {r['p']:.3g}"


def mean_pct(x: dict) -> float:
    return 100 * sum(x.values()) / len(x) if x else float("nan")


# ---------------------------------------------------------------------------------------------
# One seed
# ---------------------------------------------------------------------------------------------


def one_seed(a, rlx: Rlx, seed: int, venv_py: str) -> dict:
    out = Path(a.out).resolve()
    sd = out / f"seed-{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    ov = [*a.overrides, f"seed={seed}", f"log.root={out / 'runs'}"]
    run, rlx_wall = rlx_train(rlx, a.spec, ov)
    spec = json.loads((run / "resolved.json").read_text())
    cfg, rows, unmatched = mapping(spec)
    print_table(rows, unmatched)
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rlx_steps = [m["time/step_s"] for m in metrics if m.get("step", -1) >= 0 and "time/step_s" in m]
    # What each step trained, for tokens per second: the completions' tokens (the loss's), and
    # the prompt once per trained group (rlx packs a group's completions behind one prompt).
    rlx_tokens = [{"step_s": m["time/step_s"], "action_tokens": m.get("train/action_tokens"), "datums": m.get("train/datums"),
                   "prompt_tokens_mean": m.get("train/prompt_tokens_mean")}
                  for m in metrics if m.get("step", -1) >= 0 and "time/step_s" in m]

    # The prompts: rlx's rendering of every training problem, in the order rlx sampled them.
    prompts = render_prompts(rlx, a.spec, ov, 100_000)
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    order, seen = [], set()
    for r in rollouts:
        key = (r["step"], r["group"])
        if key not in seen:
            seen.add(key)
            order.append((r["step"], r["group"], str(r["problem_id"])))
    order = [pid for _, _, pid in sorted(order)]

    # The reward: rlx grade + rlx's formula against the rewards rlx recorded for its first step.
    src = spec["data"]["train"][0]
    if len(spec["data"]["train"]) > 1:
        raise SystemExit("error: the anchor handles one training source")
    first = [r for r in rollouts if r["step"] == rollouts[0]["step"]]
    verdicts = grade(a.rlx, src["path"], src.get("format", "auto"),
                     [{"problem_id": r["problem_id"], "completion": r["text"]} for r in first],
                     spec["reward"]["test_timeout_s"], spec["sandbox"]["memory_mb"], sd / "reward-check")
    mism = [(r["problem_id"], r["reward"], reward_of(v, spec["reward"]["format_coef"]))
            for r, v in zip(first, verdicts) if reward_of(v, spec["reward"]["format_coef"]) != r["reward"]]
    log(f"reward check: rlx grade + formula on rlx's {len(first)} step-{first[0]['step']} completions: "
        f"{len(first) - len(mism)}/{len(first)} equal to rlx's recorded rewards" + (f"; differ: {mism[:4]}" if mism else ""))

    base = base_hf(rlx, run, out)
    check_prompts(spec, prompts, base)
    trl_dir = sd / "trl"
    train_json = trl_dir / "train.json"
    if not train_json.exists():
        trl_dir.mkdir(parents=True, exist_ok=True)
        job = {"cfg": cfg, "base": str(base), "prompts": prompts, "order": order, "rlx": a.rlx,
               "problems": src["path"], "format": src.get("format", "auto"),
               "timeout": spec["reward"]["test_timeout_s"], "memory_mb": spec["sandbox"]["memory_mb"],
               "format_coef": spec["reward"]["format_coef"], "out": str(trl_dir), "threads": a.threads,
               "learner_temperature": None if a.trl_learner_temperature == "sampling" else float(a.trl_learner_temperature)}
        (trl_dir / "job.json").write_text(json.dumps(job))
        log(f"TRL: training {cfg['max_steps']} steps from {base} ...")
        cmd = [venv_py, str(Path(__file__).resolve()), "_trl-train", str(trl_dir / "job.json")]
        if rlx.lock:
            cmd = ["flock", rlx.lock, *cmd]
        if subprocess.run(cmd).returncode != 0:
            raise SystemExit("error: TRL training failed (its output is above)")
    trl = json.loads(train_json.read_text())
    trl_run, roundtrip = trl_checkpoint(rlx, run, Path(trl["adapter"]), sd / "trl-run")
    log(f"TRL adapter → rlx checkpoint {trl_run}: `rlx export --adapter-only` reads it back with max |Δ| = {roundtrip:.3g}")
    if a.export_hf and not (sd / "trl-hf").exists():
        rlx.run(["export", str(trl_run), "--out", str(sd / "trl-hf")])

    cache_path = sd / "evals.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    greedy = ["eval.temperature=0", "eval.samples=1", *a.eval_overrides]
    sampled = list(a.eval_overrides)
    res = {}
    try:
        res["base_greedy"] = per_problem(eval_dir(rlx, f"{run}@base", greedy, cache, "base_greedy") / "eval_results.jsonl")
        res["rlx_greedy"] = per_problem(eval_dir(rlx, f"{run}@last", greedy, cache, "rlx_greedy") / "eval_results.jsonl")
        res["trl_greedy"] = per_problem(eval_dir(rlx, f"{trl_run}@last", greedy, cache, "trl_greedy") / "eval_results.jsonl")
        if a.reeval_rlx or a.eval_overrides:
            res["base_sampled"] = per_problem(eval_dir(rlx, f"{run}@base", sampled, cache, "base_sampled") / "eval_results.jsonl")
            res["rlx_sampled"] = per_problem(eval_dir(rlx, f"{run}@last", sampled, cache, "rlx_sampled") / "eval_results.jsonl")
        else:  # the run's own baseline and final evals: the same weights, code and seeds
            res["base_sampled"] = per_problem(run / "eval_results.jsonl", "base")
            res["rlx_sampled"] = per_problem(run / "eval_results.jsonl", "last")
        res["trl_sampled"] = per_problem(eval_dir(rlx, f"{trl_run}@last", sampled, cache, "trl_sampled") / "eval_results.jsonl")
    finally:
        cache_path.write_text(json.dumps(cache, indent=1))
    for proto in ("greedy", "sampled"):
        if "rlx_" + proto in cache and "trl_" + proto in cache:
            r = rlx.run(["compare", cache["rlx_" + proto], cache["trl_" + proto]], check=False)
            (sd / f"compare-{proto}.txt").write_text(r.stdout + r.stderr)
    return {"seed": seed, "run": str(run), "trl_run": str(trl_run), "rlx_wall_s": rlx_wall, "rlx_step_s": rlx_steps,
            "rlx_tokens": rlx_tokens, "group_size": spec["grpo"]["group_size"],
            "completions_per_step": spec["grpo"]["group_size"] * spec["grpo"]["prompts_per_step"],
            "trl": trl, "scores": res, "roundtrip": roundtrip, "spec": spec, "reward_mismatch": len(mism)}


def check_prompts(spec: dict, prompts: dict, tokenizer_dir: Path, n: int = 3) -> None:
    """An independent rendering of the first prompts (the spec's Jinja template on the problem
    row, then the model's chat template through transformers) must equal `rlx render`'s text."""
    import jinja2
    from transformers import AutoTokenizer

    tmpl_path = spec["prompt"].get("user")
    if not tmpl_path or spec["prompt"].get("system"):
        log("prompt check: the spec's prompt is not a lone user template; only token counts are checked")
        return
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(Path(tmpl_path).read_text())
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rows = {}
    for line in Path(spec["data"]["train"][0]["path"]).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[str(r.get("task_id"))] = r
    same = checked = 0
    for pid in list(prompts)[:n]:
        row = rows.get(pid)
        if row is None or "text" not in row:
            continue
        # rlx shows the first PREVIEW_TESTS (3) asserts (src/prompt/render.rs); the rest stay hidden.
        user = tmpl.render(problem={"statement": row["text"], "tests_preview": row["test_list"][:3]}).strip("\n")
        text = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False)
        checked += 1
        if text == prompts[pid][0]:
            same += 1
        else:
            log(f"prompt check: problem {pid} differs:\n  Python: {text!r}\n  rlx:    {prompts[pid][0]!r}")
    log(f"prompt check: {same}/{checked} prompts rendered in Python (Jinja + the exported chat template) "
        f"equal `rlx render`'s text")
    if same != checked:
        raise SystemExit("error: the prompts differ; TRL would not see what rlx sees")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def machine() -> str:
    try:
        cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        cpu = ""
    model = re.search(r"Model name:\s*(.+)", cpu)
    flags = re.search(r"Flags:\s*(.+)", cpu)
    isa = [f for f in (flags.group(1).split() if flags else []) if f.startswith(("avx", "amx", "fma"))]
    return f"machine: {model.group(1) if model else '?'}, {os.cpu_count()} CPUs, flags {' '.join(isa)}"


def report(results: list[dict], a) -> None:
    log("\n" + "=" * 100)
    log(machine())
    t = results[0]["trl"].get("versions", {})
    log(f"TRL {t.get('trl', '?')}, torch {t.get('torch', '?')}, transformers {t.get('transformers', '?')}; rlx {a.rlx}")
    log(f"samplers: rlx samples from the GGUF's own blocks ({a.rlx_sampler}) and trains in f32; "
        "TRL samples with transformers' generate and trains in f32")
    for r in results:
        s = r["scores"]
        log(f"\nseed {r['seed']}: rlx {r['run']}\n         TRL {r['trl_run']}")
        log(f"  {'':<14}{'greedy pass@1 (T 0, 1 sample)':<34}{'sampled pass@1 (spec eval)':<34}")
        for name in ("rlx", "trl"):
            g = f"{mean_pct(s['base_greedy']):.1f}% → {mean_pct(s[name + '_greedy']):.1f}%"
            sm = f"{mean_pct(s['base_sampled']):.1f}% → {mean_pct(s[name + '_sampled']):.1f}%"
            log(f"  {name.upper():<14}{g:<34}{sm:<34}")
        for name in ("rlx", "trl"):
            log(f"  {name.upper()} base → final: greedy {paired(s['base_greedy'], s[name + '_greedy'], True)}; "
                f"sampled {paired(s['base_sampled'], s[name + '_sampled'], False)}")
        log(f"  TRL final − rlx final: greedy {paired(s['rlx_greedy'], s['trl_greedy'], True)}; "
            f"sampled {paired(s['rlx_sampled'], s['trl_sampled'], False)}")
        log(f"  {step_times(r)}")
        if "reward_mean" in r["trl"]:
            log(f"  TRL reward mean per step: {' '.join(f'{x:.2f}' for x in r['trl']['reward_mean'])}; "
                f"infra errors {r['trl'].get('infra_errors', 0)}")
    pooled_report(results, a.margin)
    throughput(results)
    log("")


def pooled_report(results: list[dict], margin: float) -> None:
    """Every seed pooled per problem (each problem's mean over the seeds, then one test over
    problems, as `rlx compare` pools seeds), base → final for each system and TRL − rlx with its
    95% interval and the equivalence test within ±margin."""
    seeds = ",".join(str(r["seed"]) for r in results)
    log(f"\npooled per problem over seeds {seeds} (each problem's mean over the seeds, then one test over problems;"
        " seeds × problems are not independent pairs)")
    one = len(results) == 1
    for proto in ("greedy", "sampled"):
        at = {k: stats.pooled([r["scores"][f"{k}_{proto}"] for r in results]) for k in ("base", "rlx", "trl")}
        # Greedy scores of one seed are 0/1: exact McNemar; means over seeds are not binary.
        binary = proto == "greedy" and one
        for name in ("rlx", "trl"):
            x = stats.paired(at["base"], at[name], binary)
            log(f"  {proto} {name.upper()} base → final: {mean_pct(at['base']):.1f}% → {mean_pct(at[name]):.1f}%, "
                f"{100 * x['mean']:+.1f} pp, {x['up']} up / {x['down']} down of {x['problems']} problems, {x['test']} p = {x['p']:.3g}")
        x = stats.paired(at["rlx"], at["trl"], binary)
        lo, hi = x["ci"]
        log(f"  {proto} TRL − rlx final: {100 * x['mean']:+.1f} pp, 95% CI [{100 * lo:+.1f}, {100 * hi:+.1f}] pp, "
            f"TRL better on {x['up']}, rlx on {x['down']} of {x['problems']} problems, {x['test']} p = {x['p']:.3g}")
        p, equivalent, (lo90, hi90) = stats.tost(x["diffs"], margin / 100)
        verdict = "equivalent" if equivalent else "not shown equivalent"
        log(f"      {verdict} within ±{margin:.1f} pp (TOST p = {p:.3g}; 90% CI [{100 * lo90:+.1f}, {100 * hi90:+.1f}] pp)"
            + ("" if x["p"] < 0.05 or equivalent else "; no difference detected, which is not evidence of none"))


def step_times(r: dict) -> str:
    rs, tt = r["rlx_step_s"], r["trl"]["timing"]
    rlx_step = sum(rs) / len(rs) if rs else float("nan")
    trl_step = sum(tt["step_s"]) / len(tt["step_s"]) if tt["step_s"] else float("nan")
    gen = sum(tt["generate_s"]) / max(1, len(tt["step_s"]))
    rew = sum(tt["reward_s"]) / max(1, len(tt["step_s"]))
    return (f"seconds per training step: rlx {rlx_step:.1f}, TRL {trl_step:.1f} (generate {gen:.1f}, "
            f"rlx grade {rew:.1f}, the rest {trl_step - gen - rew:.1f}); TRL/rlx = {trl_step / rlx_step:.2f}×")


def rlx_rates(r: dict) -> tuple[float, float] | None:
    """rlx's (completion tokens, trained tokens) per second of training step: the loss's tokens,
    and those plus each trained group's prompt once. None when the run did not record them."""
    rows = r.get("rlx_tokens") or []
    if not rows or any(x.get(k) is None for x in rows for k in ("action_tokens", "datums", "prompt_tokens_mean")):
        return None
    secs = sum(x["step_s"] for x in rows)
    completion = sum(x["action_tokens"] for x in rows)
    prompts = sum(x["datums"] / r["group_size"] * x["prompt_tokens_mean"] for x in rows)
    return completion / secs, (completion + prompts) / secs


def trl_rates(r: dict) -> tuple[float, float] | None:
    """TRL's (completion tokens, trained tokens) per second of training step, from its log:
    `completions/mean_length` per step × the completions of a step, and `num_tokens` (prompt and
    completion of every row: each completion carries its own copy of the prompt)."""
    log_rows = [h for h in r["trl"].get("log", []) if "num_tokens" in h and "completions/mean_length" in h]
    secs = sum(r["trl"]["timing"]["step_s"])
    if not log_rows or not secs or "completions_per_step" not in r:
        return None
    completion = sum(h["completions/mean_length"] * r["completions_per_step"] for h in log_rows)
    return completion / secs, max(h["num_tokens"] for h in log_rows) / secs


def throughput(results: list[dict]) -> None:
    log("\ntokens per second of training step (completion tokens the loss is taken over; trained: "
        "those plus the prompt, which rlx packs once per group and TRL trains once per completion)")
    for r in results:
        cells = []
        for name, rates in (("rlx", rlx_rates(r)), ("TRL", trl_rates(r))):
            cells.append(f"{name} not recorded" if rates is None else f"{name} {rates[0]:.1f} completion, {rates[1]:.1f} trained")
        log(f"  seed {r['seed']}: {'; '.join(cells)}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_trl-train":
        trl_train(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", nargs="?", default=str(REPO / "experiments" / "quickstart.yaml"))
    p.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the spec, for both systems (steps=2)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--out", default="trl-anchor")
    p.add_argument("--rlx", default=os.environ.get("RLX_BIN") or shutil.which("rlx") or str(REPO / "target" / "release" / "rlx"))
    p.add_argument("--lock", default="/tmp/rlx-cpu.lock", help="flock file for heavy jobs ('' for none)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--eval", dest="eval_overrides", action="append", default=[],
                   help="an override for the evaluations only (data.eval.0.limit=8); repeatable")
    p.add_argument("--reeval-rlx", action="store_true", help="evaluate rlx's sampled protocol with `rlx eval` too")
    p.add_argument("--export-hf", action="store_true", help="also write TRL's merged model as a HF directory")
    p.add_argument("--trl-learner-temperature", default="sampling",
                   help="'sampling' (TRL's own: logits / sampling temperature) or a number (1: untempered)")
    p.add_argument("--margin", type=float, default=5.0,
                   help="equivalence margin of TRL − rlx in percentage points (two one-sided tests), default 5")
    p.add_argument("--report", metavar="RESULTS_JSON",
                   help="print the report of a results.json written before (no training, no rlx binary needed)")
    p.add_argument("--rlx-sampler", default="Q4_1 base weights, int8 activations",
                   help="rlx's sampler precision as the report names it (the quickstart's GGUF)")
    a = p.parse_intermixed_args()
    if not a.margin > 0:
        p.error(f"--margin must be a positive number of percentage points, not {a.margin}")
    if a.report:
        report(json.loads(Path(a.report).read_text()), a)
        return
    # argparse puts a leading KEY=VALUE into `spec`
    if "=" in a.spec and not Path(a.spec).exists():
        a.overrides.insert(0, a.spec)
        a.spec = str(REPO / "experiments" / "quickstart.yaml")
    if not Path(a.rlx).exists():
        skipped(f"no rlx binary at {a.rlx} (--rlx or RLX_BIN)")
    if os.environ.get(IN_VENV) != "1":
        py = ensure_venv()
        os.environ[IN_VENV] = "1"
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])
    rlx = Rlx(a.rlx, a.lock)
    results = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        results.append(one_seed(a, rlx, seed, sys.executable))
        (Path(a.out) / "results.json").write_text(json.dumps(
            [{k: v for k, v in r.items() if k != "spec"} for r in results], indent=1, default=str))
        report(results, a)


if __name__ == "__main__":
    main()
