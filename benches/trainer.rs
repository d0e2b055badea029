//! Throughput of the local candle backend on SmolLM2-135M against PyTorch + transformers (+ peft),
//! same CPU, same shapes, in one run. Prints a table; asserts nothing (timings are noisy).
//!
//! `cargo bench --bench trainer` (add `-- --threads N`, default all cores; `-- --phases a,b` for a
//! subset). Each phase runs in a
//! child process so its peak RSS is its own: sampling 64 new tokens after a 32-token prompt at
//! batch 1 and 16 (temperature 1, full distribution), and a training step (forward, backward,
//! clip, AdamW) on 4 × 128 tokens with the importance-sampling loss, LoRA (r 16, all seven
//! projections) and full fine-tuning. The PyTorch side (`benches/trainer_torch.py`) loads the
//! same weights, exported by rlx from the GGUF as an HF directory; it is skipped with a message if
//! `torch`/`transformers`/`peft` are not importable (`RLX_TORCH_PYTHON` names another interpreter).
//! The `grpo_plain` and `grpo_packed` phases (rlx alone) time a GRPO-shaped LoRA step, 4 groups ×
//! 8 sequences of a 166-token prompt and 32–64 sampled tokens (PPO), without and with prompt
//! packing, and print the ratio; `reference_candle` and `reference` time `grpo.kl`'s reference
//! log-probabilities of that batch through candle's model unpacked (the path before) and through
//! the training pass packed, and print that ratio.
//! Sampling uses the Q8_0 weights `backend.sample_weights` defaults to; `RLX_BENCH_SAMPLE_WEIGHTS=f32`
//! samples with the f32 weights instead.
//!
//! One run of each side cannot tell 0.9× from 1.3× (PyTorch's own rate moved by a third between
//! runs on one machine), so `-- --paired train_lora,train_full` measures ratios instead: pairs of
//! child processes (rlx and its anchor, in ABBA order so that a drift in the machine's speed
//! cancels), repeated until the 95% interval of the median ratio is within ±`--target` (default
//! 0.1) or `--max-reps` pairs (default 30) have run, then prints every pair's ratio, the median
//! and its distribution-free interval (`rlx::quantile::median_interval`). The anchor of
//! `train_*` and `sample*` is PyTorch, of `grpo_packed` `grpo_plain`, of `reference`
//! `reference_candle`. `--ablate KEY=VALUE` pairs rlx with that environment variable against
//! rlx without it instead (`RLX_ALLOC=keep`, `RLX_TRAIN_PACK=off`, `RLX_ISA=avx2`, ...), the
//! way to measure what one change buys.

// A benchmark reports on stdout/stderr by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use rlx::backend::local::model::{ParamBuilder, Tuning};
use rlx::backend::local::{LocalSampler, LocalTrainer, LoraConfig, Model, TrainerOptions};
use rlx::seam::{AdamParams, Datum, LossFn, LossFnInputs, SamplingParams};

#[path = "../tests/cli/smollm2_fetch.rs"]
mod fetch;

const PROMPT: usize = 32;
const NEW: usize = 64;
const BATCH: usize = 4;
const SEQ: usize = 128;
const STEPS: usize = 2;
const PHASES: [&str; 8] = ["sample1", "sample16", "train_lora", "train_full", "grpo_plain", "grpo_packed", "reference_candle", "reference"];
/// The GRPO-shaped step: groups × sequences per group, prompt tokens, completion tokens 48 ± 16.
const GROUPS: usize = 4;
const GROUP_SIZE: usize = 8;
const GRPO_PROMPT: usize = 166;

fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

/// Deterministic pseudo-random token ids (the content does not matter for speed).
fn tokens(n: usize, seed: u64, vocab: usize) -> Vec<u32> {
    let mut r = rlx::rng::SplitMix64::new(seed);
    (0..n).map(|_| (r.next_u64() % vocab as u64) as u32).collect()
}

fn run_phase(gguf: &Path, phase: &str) -> serde_json::Value {
    let loaded = rlx::backend::local::load(gguf).expect("load GGUF");
    let vocab = loaded.config.vocab_size;
    if let Some(n) = phase.strip_prefix("sample") {
        let n: usize = n.parse().expect("sample<N>");
        let pb = ParamBuilder::new(&loaded.weights, &Tuning::Frozen, gguf, 0);
        let mut model = Model::new(&loaded.config, &pb).expect("model");
        if std::env::var("RLX_BENCH_SAMPLE_WEIGHTS").as_deref() != Ok("f32") {
            model.quantize_for_inference(|_, w| rlx::backend::local::quant::q8_0(w)).expect("quantise");
        }
        let s = LocalSampler::new(Arc::new(model), None);
        let prompt = tokens(PROMPT, 1, vocab);
        let p = SamplingParams { max_tokens: NEW, temperature: 1.0, seed: Some(0), ..Default::default() };
        s.sample(&prompt[..8], n, &SamplingParams { max_tokens: 4, ..p.clone() }).expect("warm-up");
        let t = Instant::now();
        let out = s.sample(&prompt, n, &p).expect("sample");
        let dt = t.elapsed().as_secs_f64();
        let generated: usize = out.iter().map(|o| o.tokens.len()).sum();
        return serde_json::json!({"phase": phase, "tokens_per_s": generated as f64 / dt, "peak_rss_mb": peak_rss_mb()});
    }
    if let Some(layout) = phase.strip_prefix("grpo_") {
        return grpo_phase(loaded, vocab, layout == "packed");
    }
    if phase.starts_with("reference") {
        return reference_phase(loaded, vocab, phase);
    }
    let tuning = if phase == "train_lora" { Tuning::Lora(LoraConfig { rank: 16, alpha: 32.0, ..LoraConfig::all_linear(16) }) } else { Tuning::Full };
    let mut tr = LocalTrainer::new(loaded, TrainerOptions { tuning, seed: 0, max_tokens_per_microbatch: microbatch(), ..Default::default() }).expect("trainer");
    let data: Vec<Datum> = (0..BATCH as u64)
        .map(|i| {
            let lp: Vec<f32> = tokens(SEQ, 100 + i, 1000).iter().map(|&x| -(x as f32) / 200.0).collect();
            let adv: Vec<f32> = tokens(SEQ, 200 + i, 1000).iter().map(|&x| x as f32 / 500.0 - 1.0).collect();
            Datum {
                model_input: tokens(SEQ, 10 + i, vocab),
                loss_fn_inputs: LossFnInputs { target_tokens: tokens(SEQ, 20 + i, vocab), weights: None, logprobs: Some(lp), advantages: Some(adv) },
            }
        })
        .collect();
    let adam = AdamParams { learning_rate: 1e-5, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 1.0 };
    let step = |tr: &mut LocalTrainer| -> (f64, f64, f64) {
        let t0 = Instant::now();
        tr.forward_backward(&data, &LossFn::ImportanceSampling).expect("forward_backward");
        let t1 = Instant::now();
        tr.optim_step(&adam).expect("optim_step");
        let t2 = Instant::now();
        ((t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64(), (t2 - t0).as_secs_f64())
    };
    step(&mut tr); // warm-up
    let (mut fb, mut opt, mut total) = (0.0, 0.0, 0.0);
    for _ in 0..STEPS {
        let (a, b, c) = step(&mut tr);
        fb += a;
        opt += b;
        total += c;
    }
    let n = STEPS as f64;
    // Forward alone, for the backward/forward ratio the issue asks about.
    let t = Instant::now();
    tr.forward(&data).expect("forward");
    let fwd = t.elapsed().as_secs_f64();
    serde_json::json!({"phase": phase, "tokens_per_s": (BATCH * SEQ) as f64 / (total / n), "step_s": total / n,
                       "fwd_bwd_s": fb / n, "optim_s": opt / n, "fwd_only_s": fwd, "peak_rss_mb": peak_rss_mb()})
}

/// A GRPO-shaped LoRA step (see the module doc), with prompt packing on or off.
fn grpo_phase(loaded: rlx::backend::local::Loaded, vocab: usize, pack: bool) -> serde_json::Value {
    let mut tr = grpo_trainer(loaded);
    tr.set_prompt_packing(pack);
    let data = grpo_data(vocab);
    let positions: usize = data.iter().map(|d| d.model_input.len()).sum();
    let adam = AdamParams { learning_rate: 1e-5, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 1.0 };
    let mut step = || {
        let t = Instant::now();
        tr.forward_backward(&data, &LossFn::PPO).expect("forward_backward");
        tr.optim_step(&adam).expect("optim_step");
        t.elapsed().as_secs_f64()
    };
    step(); // warm-up
    let total: f64 = (0..STEPS).map(|_| step()).sum();
    let step_s = total / STEPS as f64;
    serde_json::json!({"phase": if pack { "grpo_packed" } else { "grpo_plain" }, "tokens_per_s": positions as f64 / step_s, "step_s": step_s, "sequences": data.len(), "positions": positions, "peak_rss_mb": peak_rss_mb()})
}

/// `grpo.kl`'s reference log-probabilities of the GRPO-shaped batch: the phase `reference` runs
/// the hand-written pass with prompt packing (what `rlx run` does), `reference_candle` (its
/// child gets `RLX_TRAIN_PASS=autograd`) candle's model over unpacked rows, the path before.
fn reference_phase(loaded: rlx::backend::local::Loaded, vocab: usize, phase: &str) -> serde_json::Value {
    let mut tr = grpo_trainer(loaded);
    let data = grpo_data(vocab);
    let positions: usize = data.iter().map(|d| d.model_input.len()).sum();
    tr.reference_logprobs(&data[..2]).expect("warm-up");
    let t = Instant::now();
    for _ in 0..STEPS {
        tr.reference_logprobs(&data).expect("reference_logprobs");
    }
    let step_s = t.elapsed().as_secs_f64() / STEPS as f64;
    serde_json::json!({"phase": phase, "tokens_per_s": positions as f64 / step_s, "step_s": step_s, "peak_rss_mb": peak_rss_mb()})
}

fn grpo_trainer(loaded: rlx::backend::local::Loaded) -> LocalTrainer {
    let tuning = Tuning::Lora(LoraConfig { rank: 16, alpha: 32.0, ..LoraConfig::all_linear(16) });
    LocalTrainer::new(loaded, TrainerOptions { tuning, seed: 0, max_tokens_per_microbatch: microbatch(), ..Default::default() }).expect("trainer")
}

/// [`GROUPS`] × [`GROUP_SIZE`] PPO datums sharing each group's prompt, completions 48 ± 16 tokens.
fn grpo_data(vocab: usize) -> Vec<Datum> {
    let mut data = Vec::new();
    for g in 0..GROUPS as u64 {
        let prompt = tokens(GRPO_PROMPT, 300 + g, vocab);
        for k in 0..GROUP_SIZE as u64 {
            let len = 32 + (tokens(1, 400 + g * 64 + k, 33)[0] as usize);
            let completion = tokens(len, 500 + g * 64 + k, vocab);
            let input: Vec<u32> = prompt.iter().chain(&completion[..len - 1]).copied().collect();
            let targets: Vec<u32> = prompt[1..].iter().chain(&completion).copied().collect();
            let on = |j: usize| j + 1 >= GRPO_PROMPT;
            let adv = if k % 2 == 0 { 1.0 } else { -1.0 };
            data.push(Datum {
                loss_fn_inputs: LossFnInputs {
                    target_tokens: targets,
                    weights: None,
                    logprobs: Some((0..input.len()).map(|j| if on(j) { -1.5 } else { 0.0 }).collect()),
                    advantages: Some((0..input.len()).map(|j| if on(j) { adv } else { 0.0 }).collect()),
                },
                model_input: input,
            });
        }
    }
    data
}

/// Tokens per forward/backward micro-batch: `$RLX_BENCH_MICROBATCH`, else the spec's default
/// (what `rlx run` does; PyTorch takes the 4 × 128 batch in one pass).
fn microbatch() -> usize {
    std::env::var("RLX_BENCH_MICROBATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(rlx::spec::defaults::MAX_TOKENS_PER_MICROBATCH as usize)
}

/// The interpreter with torch/transformers/peft: `$RLX_TORCH_PYTHON` (a virtualenv's python),
/// else `python3`.
fn torch_python() -> String {
    std::env::var("RLX_TORCH_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// PyTorch's kernels capped at the level `RLX_ISA` caps rlx's to, so that `RLX_ISA=avx2` on an
/// AVX-512 host compares like with like. Uncapped, PyTorch's MKL GEMM kept AVX-512 while rlx ran
/// AVX2: 202 against 161 tokens/s for PyTorch's full fine-tuning on one Xeon (2026-11-29), a 1.25×
/// handicap that an AVX2-only machine, where both sides run AVX2, does not have.
fn torch_isa_caps() -> Vec<(&'static str, &'static str)> {
    match std::env::var("RLX_ISA").ok().as_deref() {
        Some("avx2") => vec![("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("DNNL_MAX_CPU_ISA", "AVX2")],
        _ => vec![],
    }
}

fn child(args: &[&str], env: &[(&str, &str)]) -> Option<serde_json::Value> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe).args(args).envs(env.iter().copied()).output().ok()?;
    if !out.status.success() {
        eprintln!("phase {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    String::from_utf8_lossy(&out.stdout).lines().rev().find_map(|l| serde_json::from_str(l).ok())
}

fn torch_phase(dir: &Path, phase: &str, threads: usize) -> Option<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/trainer_torch.py");
    let out = Command::new(torch_python()).arg(script).arg(dir).arg(phase).arg(threads.to_string()).envs(torch_isa_caps()).output().ok()?;
    if !out.status.success() {
        eprintln!("torch phase {phase} failed: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
        return None;
    }
    String::from_utf8_lossy(&out.stdout).lines().rev().find_map(|l| serde_json::from_str(l).ok())
}

/// What `--paired` measures with.
struct Paired<'a> {
    gguf: &'a Path,
    hf_dir: &'a Path,
    threads: usize,
    has_torch: bool,
    /// Stop once the interval is within ± this of the median.
    target: f64,
    max_reps: usize,
    /// Pair rlx with this variable set against rlx without it.
    ablate: Option<(String, String)>,
}

/// One side of a pair: its tokens/s and peak RSS.
fn side(cfg: &Paired<'_>, phase: &str, anchor: bool) -> Option<(f64, f64)> {
    let gguf = cfg.gguf.to_str().expect("utf-8 path");
    let out = match (&cfg.ablate, anchor) {
        (Some((k, v)), false) => child(&["--phase", phase, gguf], &[(k.as_str(), v.as_str())]),
        // rlx as it is: the ablation's anchor, or the side measured against an anchor.
        (Some(_), true) | (None, false) => child(&["--phase", phase, gguf], &[]),
        (None, true) => match phase {
            "grpo_packed" => child(&["--phase", "grpo_plain", gguf], &[]),
            "reference" => child(&["--phase", "reference_candle", gguf], &[("RLX_TRAIN_PASS", "autograd")]),
            _ if cfg.has_torch => torch_phase(cfg.hf_dir, phase, cfg.threads),
            _ => None,
        },
    }?;
    Some((out["tokens_per_s"].as_f64()?, out["peak_rss_mb"].as_f64().unwrap_or(f64::NAN)))
}

/// Pairs of `phase` against its anchor until the median ratio's interval is narrow enough.
fn paired(cfg: &Paired<'_>, phase: &str) {
    let anchor = match (&cfg.ablate, phase) {
        (Some((k, v)), _) => format!("rlx without {k}={v}"),
        (None, "grpo_packed") => "grpo_plain".into(),
        (None, "reference") => "reference_candle".into(),
        (None, _) => "PyTorch".into(),
    };
    let label = cfg.ablate.as_ref().map_or("rlx".to_string(), |(k, v)| format!("rlx with {k}={v}"));
    println!("{phase}: {label} / {anchor}, tokens/s, pairs in ABBA order (95% interval of the median ratio, target ±{})", cfg.target);
    let (mut ratios, mut rss) = (Vec::new(), (Vec::new(), Vec::new()));
    for rep in 0..cfg.max_reps {
        // ABBA: A first on even pairs, B first on odd ones.
        let (a, b) = if rep % 2 == 0 {
            let a = side(cfg, phase, false);
            (a, side(cfg, phase, true))
        } else {
            let b = side(cfg, phase, true);
            (side(cfg, phase, false), b)
        };
        let (Some((a, ra)), Some((b, rb))) = (a, b) else {
            println!("  pair {}: a side failed; stopping", rep + 1);
            break;
        };
        ratios.push(a / b);
        rss.0.push(ra);
        rss.1.push(rb);
        println!("  pair {:>2}: {a:>8.1} / {b:>8.1} = {:.3}", rep + 1, a / b);
        if let Some(m) = rlx::quantile::median_interval(&mut ratios.clone(), 0.95)
            && (m.hi - m.median).max(m.median - m.lo) <= cfg.target
        {
            break;
        }
    }
    let n = ratios.len();
    match rlx::quantile::median_interval(&mut ratios, 0.95) {
        Some(m) => println!(
            "  {phase}: median ratio {:.3}, 95% interval [{:.3}, {:.3}] (coverage {:.1}%, {n} pairs); peak RSS median {:.0} MB / {:.0} MB",
            m.median,
            m.lo,
            m.hi,
            100.0 * m.coverage,
            rlx::quantile::quantile(&mut rss.0, 0.5),
            rlx::quantile::quantile(&mut rss.1, 0.5),
        ),
        None => println!("  {phase}: {n} pairs, too few for a 95% interval (6 needed)"),
    }
}

#[global_allocator]
static ALLOC: rlx::alloc::ReuseLarge = rlx::alloc::ReuseLarge::new();

fn main() {
    // SAFETY: first statement of `main`; no other thread exists yet.
    unsafe { rlx::backend::local::cpu::configure() };
    rlx::alloc::configure(&ALLOC);
    let args: Vec<String> = std::env::args().collect();
    let threads = args.iter().position(|a| a == "--threads").and_then(|i| args.get(i + 1)).and_then(|t| t.parse().ok()).unwrap_or_else(|| {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    });
    if let Some(i) = args.iter().position(|a| a == "--phase") {
        let gguf = PathBuf::from(&args[i + 2]);
        println!("{}", run_phase(&gguf, &args[i + 1]));
        return;
    }
    let gguf = match fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(why) => {
            println!("SmolLM2 GGUF unavailable, benchmark skipped: {why}");
            return;
        }
    };
    // candle's CPU GEMM sizes its thread pool from RAYON_NUM_THREADS, read in each child.
    let threads_s = threads.to_string();
    // SAFETY: no other thread exists yet that could read the environment concurrently.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", &threads_s) };
    let hf_dir = std::env::temp_dir().join("rlx-bench-smollm2-hf");
    if !hf_dir.join("model.safetensors").exists() {
        let loaded = rlx::backend::local::load(&gguf).expect("load GGUF");
        let tr = LocalTrainer::new(loaded, TrainerOptions::default()).expect("trainer");
        tr.export_merged(&hf_dir).expect("export");
    }
    let has_torch = Command::new(torch_python()).args(["-c", "import torch, transformers, peft"]).status().is_ok_and(|s| s.success());
    if !has_torch {
        println!("PyTorch side skipped: `python3 -c 'import torch, transformers, peft'` failed (pip install torch transformers peft)");
    }
    println!("SmolLM2-135M-Instruct (f32, dequantised from Q4_1), {threads} threads; sampling: {PROMPT}-token prompt + {NEW} new tokens; training: {BATCH}x{SEQ} tokens, importance_sampling, AdamW + clip");
    if let Some(i) = args.iter().position(|a| a == "--paired") {
        let opt = |name: &str| args.iter().position(|a| a == name).and_then(|j| args.get(j + 1));
        let cfg = Paired {
            gguf: &gguf,
            hf_dir: &hf_dir,
            threads,
            has_torch,
            target: opt("--target").and_then(|t| t.parse().ok()).unwrap_or(0.1),
            max_reps: opt("--max-reps").and_then(|t| t.parse().ok()).unwrap_or(30),
            ablate: opt("--ablate").and_then(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())),
        };
        for phase in args.get(i + 1).map(String::as_str).unwrap_or("train_lora,train_full").split(',') {
            paired(&cfg, phase);
        }
        return;
    }
    println!("{:<11} {:>14} {:>14} {:>8} {:>12} {:>12}", "phase", "rlx tok/s", "torch tok/s", "ratio", "rlx MB", "torch MB");
    // `--phases sample1,train_full` runs a subset.
    let only: Option<Vec<String>> = args.iter().position(|a| a == "--phases").and_then(|i| args.get(i + 1)).map(|p| p.split(',').map(String::from).collect());
    let (mut grpo_steps, mut reference_steps) = (Vec::new(), Vec::new());
    for phase in PHASES.iter().copied().filter(|p| only.as_ref().is_none_or(|o| o.iter().any(|x| x == p))) {
        let env: &[(&str, &str)] = if phase == "reference_candle" { &[("RLX_TRAIN_PASS", "autograd")] } else { &[] };
        let ours = child(&["--phase", phase, gguf.to_str().expect("utf-8 path")], env);
        let theirs = if has_torch && !phase.starts_with("grpo") && !phase.starts_with("reference") { torch_phase(&hf_dir, phase, threads) } else { None };
        if phase.starts_with("grpo") {
            grpo_steps.push(ours.as_ref().and_then(|o| o["step_s"].as_f64()));
        }
        if phase.starts_with("reference") {
            reference_steps.push(ours.as_ref().and_then(|o| o["step_s"].as_f64()));
        }
        let f = |v: &Option<serde_json::Value>, k: &str| v.as_ref().and_then(|v| v[k].as_f64());
        let (a, b) = (f(&ours, "tokens_per_s"), f(&theirs, "tokens_per_s"));
        let fmt = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.1}"));
        let ratio = match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        println!("{:<11} {:>14} {:>14} {:>8} {:>12} {:>12}", phase, fmt(a), fmt(b), ratio, fmt(f(&ours, "peak_rss_mb")), fmt(f(&theirs, "peak_rss_mb")));
        if let Some(o) = &ours
            && o.get("step_s").is_some() {
                println!("            rlx detail: {o}");
            }
        if let Some(t) = &theirs
            && t.get("step_s").is_some() {
                println!("            torch detail: {t}");
            }
    }
    if let [Some(plain), Some(packed)] = grpo_steps[..] {
        println!("GRPO step ({GROUPS}x{GROUP_SIZE}, {GRPO_PROMPT}-token prompt, LoRA r16): {plain:.2} s plain, {packed:.2} s packed: {:.2}x faster with prompt packing", plain / packed);
    }
    if let [Some(candle), Some(packed)] = reference_steps[..] {
        println!("KL reference log-probabilities of that batch: {candle:.2} s through candle's model unpacked, {packed:.2} s through the training pass packed: {:.2}x faster", candle / packed);
    }
}
