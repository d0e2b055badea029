//! Step time of a remote backend sequential and k steps deep (engine/stream.rs), against the
//! slowest stage: a backend that sleeps Tinker-like latencies (scaled by `--scale`, default 0.1
//! of sampling 20 s per group request with ±25% jitter, forward_backward 6 s, optim_step 2 s,
//! save_weights_for_sampler 3 s), the real local sandbox grading the completions, the real
//! engine. Requests run in parallel on the "service" (each sleeps its own latency), as on Tinker.
//!
//! Prints, per mode: mean step time (steps after the first two), its ratio to the two stages
//! (sampling a step's groups: one request's mean latency, the requests running in parallel;
//! training a step: forward_backward + optim_step + save_weights_for_sampler, which queue behind
//! each other), staleness mean/max and the stale groups set aside. Asserts nothing.
//!
//! `cargo bench --bench pipeline` (options after `--`: `--scale F` (0.1), `--steps N` (10),
//! `--prompts N` (4 per step), `--modes 0,1,2,4`, `--verbose`: every step's line).

// A benchmark reports on stdout/stderr by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use candle_core::DType;
use rlx::backend::local::model::{Arch, Config, random_weights, tiny_config};
use rlx::backend::local::{LocalTrainer, TrainerOptions, Tuning};
use rlx::backend::{Pending, Policy, Sampler, Trainer};
use rlx::engine::{self, PolicySource};
use rlx::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef, StopReason};
use serde_json::{Value, json};

/// Latencies of the emulated service, seconds.
#[derive(Clone, Copy)]
struct Latency {
    sample: f64,
    jitter: f64,
    forward_backward: f64,
    optim: f64,
    save_for_sampler: f64,
}

/// Answers half of each group right; sleeps the sampling latency (the longest of a call's
/// requests: they run in parallel on the service).
struct SlowSampler {
    tokenizer: tokenizers::Tokenizer,
    answers: Arc<Vec<(String, String)>>,
    lat: Latency,
    draws: Arc<AtomicU64>,
}

/// A uniform draw in [-1, 1) from a counter (SplitMix64), so every mode sees the same jitters.
fn jitter(n: u64) -> f64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

impl Sampler for SlowSampler {
    fn sample(&self, requests: Vec<SampleRequest>, _params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        let mut wait: f64 = 0.0;
        let out = requests
            .iter()
            .map(|r| {
                wait = wait.max(self.lat.sample * (1.0 + self.lat.jitter * jitter(self.draws.fetch_add(1, Ordering::SeqCst))));
                let text = self.tokenizer.decode(&r.prompt, false).unwrap();
                let code = self.answers.iter().find(|(s, _)| text.contains(s.as_str())).map_or("pass".to_owned(), |(_, c)| c.clone());
                (0..r.num_samples)
                    .map(|k| {
                        let body = if k % 2 == 0 { code.clone() } else { "def nothing():\n    return None".into() };
                        let mut tokens = self.tokenizer.encode(format!("```python\n{body}\n```"), false).unwrap().get_ids().to_vec();
                        tokens.push(1);
                        SampledSequence { logprobs: vec![-0.5; tokens.len()], tokens, stop_reason: StopReason::Stop }
                    })
                    .collect()
            })
            .collect();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            Ok(out)
        })
    }
}

/// The trainer side: requests queue behind each other, as a Tinker model's `seq_id`s do.
struct SlowTrainer {
    sampler: Arc<SlowSampler>,
    lat: Latency,
    queue: Arc<tokio::sync::Mutex<()>>,
}

impl SlowTrainer {
    fn after<T: Send + 'static>(&self, secs: f64, value: T) -> Pending<T> {
        let queue = self.queue.clone();
        Box::pin(async move {
            let _turn = queue.lock().await;
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            Ok(value)
        })
    }
}

impl Trainer for SlowTrainer {
    // A remote service: the engine streams groups k steps deep.
    fn runs_elsewhere(&self) -> bool {
        true
    }
    fn forward_backward(&self, data: Vec<Datum>, _loss: LossFn) -> Pending<ForwardBackwardOutput> {
        let outputs = data.iter().map(|d| rlx::seam::DatumOutput { logprobs: vec![-0.5; d.model_input.len()] }).collect();
        self.after(self.lat.forward_backward, ForwardBackwardOutput { loss: 1.0, outputs, stats: Default::default() })
    }
    fn optim_step(&self, _adam: AdamParams) -> Pending<OptimStepOutput> {
        self.after(self.lat.optim, OptimStepOutput { grad_norm: Some(1.0), clipped: false, step: 1, metrics: Default::default() })
    }
    fn save_state(&self, name: &str) -> Pending<StateRef> {
        self.after(0.0, StateRef(format!("bench://{name}")))
    }
    fn load_state(&self, _state: &StateRef) -> Pending<()> {
        self.after(0.0, ())
    }
    fn sampler(&self) -> Pending<Arc<dyn Sampler>> {
        let s: Arc<dyn Sampler> = self.sampler.clone();
        self.after(self.lat.save_for_sampler, s)
    }
}

/// A tiny random Qwen3 with a character tokenizer: the prompts' tokenizer and chat template.
fn tiny_model(dir: &Path) {
    let specials = ["<|im_start|>", "<|im_end|>", "<unk>"];
    let mut vocab = serde_json::Map::new();
    let mut added = vec![];
    for (i, s) in specials.iter().enumerate() {
        vocab.insert(s.to_string(), json!(i));
        added.push(json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
    }
    for c in std::iter::once('\n').chain((32u8..=126).map(char::from)) {
        let id = vocab.len();
        vocab.insert(c.to_string(), json!(id));
    }
    let n = vocab.len();
    let tok: Value = json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null, "pre_tokenizer": null,
        "post_processor": null, "decoder": {"type": "Fuse"}, "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []}});
    // The trainer tests' tiny Qwen3, with this tokenizer's vocabulary and room for long prompts.
    let cfg = Config { vocab_size: n, max_position_embeddings: 2048, ..tiny_config(Arch::Qwen3) };
    let tokenizer = tokenizers::Tokenizer::from_bytes(tok.to_string().as_bytes()).unwrap();
    let w = random_weights(&cfg, 0.2, 7, DType::F32).unwrap();
    let opts = TrainerOptions { tuning: Tuning::Full, seed: 7, max_tokens_per_microbatch: 4096, ..Default::default() };
    LocalTrainer::from_weights(cfg, w, Some(tokenizer), opts, PathBuf::from("random")).unwrap().export_merged(dir).unwrap();
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": chatml, "eos_token": "<|im_end|>"}).to_string()).unwrap();
}

struct Args {
    /// Print every step's staleness, stale groups and waits.
    verbose: bool,
    scale: f64,
    steps: u32,
    prompts: u32,
    modes: Vec<u32>,
}

fn args() -> Args {
    let mut a = Args { verbose: false, scale: 0.1, steps: 10, prompts: 4, modes: vec![0, 1, 2, 4] };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--scale" => a.scale = val().parse().expect("--scale F"),
            "--steps" => a.steps = val().parse().expect("--steps N"),
            "--prompts" => a.prompts = val().parse().expect("--prompts N"),
            "--modes" => a.modes = val().split(',').map(|k| k.parse().expect("--modes 0,1,2")).collect(),
            "--verbose" => a.verbose = true,
            "--bench" => {}
            other => panic!("unknown option {other}"),
        }
    }
    a
}

fn main() {
    let a = args();
    let lat = Latency { sample: 20.0 * a.scale, jitter: 0.25, forward_backward: 6.0 * a.scale, optim: 2.0 * a.scale, save_for_sampler: 3.0 * a.scale };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    tiny_model(&work.path().join("tiny"));
    let mut answers = vec![];
    for l in std::fs::read_to_string(repo.join("experiments/data/easy_python_train.jsonl")).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        answers.push((v["text"].as_str().unwrap().to_string(), v["code"].as_str().unwrap().to_string()));
    }
    let answers = Arc::new(answers);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!(
        "latencies (s): sample {:.2} ±{:.0}% per group request (parallel on the service), forward_backward {:.2}, optim_step {:.2}, save_weights_for_sampler {:.2}; grading: the local sandbox",
        lat.sample,
        lat.jitter * 100.0,
        lat.forward_backward,
        lat.optim,
        lat.save_for_sampler
    );
    println!("{} steps of {} problems × 4 completions; step time: mean over steps 2..{}", a.steps, a.prompts, a.steps - 1);
    println!("stages: sampling a step's groups {:.2} s (mean latency; requests in parallel), training a step {:.2} s (serial)", lat.sample, lat.forward_backward + lat.optim + lat.save_for_sampler);
    println!();
    let train = lat.forward_backward + lat.optim + lat.save_for_sampler;
    println!("{:<12} {:>8} {:>10} {:>10} {:>16} {:>8}", "mode", "step s", "/sampling", "/training", "staleness m/max", "stale");
    for &k in &a.modes {
        let root = work.path().join(format!("runs-{k}"));
        let spec = format!(
            "name: pipeline
seed: 1
model: {{base: {tiny}}}
backend: {{kind: local}}
data:
  train: [{{path: {train}, format: mbpp}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: {p}, group_size: 4, max_steps_off_policy: {k}}}
reward: {{test_timeout_s: 5}}
sandbox: {{kind: local, strict: false}}
log: {{root: {root}, rollouts: none}}
schedule: {{max_steps: {steps}, eval_every: 0, save_every: 0, eval_at_start: false}}",
            tiny = work.path().join("tiny").display(),
            train = repo.join("experiments/data/easy_python_train.jsonl").display(),
            user = repo.join("prompts/mbpp_user.j2").display(),
            root = root.display(),
            p = a.prompts,
            steps = a.steps,
        );
        let path = work.path().join(format!("spec-{k}.yaml"));
        std::fs::write(&path, spec).unwrap();
        let plan = rlx::plan::plan(&path, &[]).unwrap();
        let tokenizer = tokenizers::Tokenizer::from_file(work.path().join("tiny/tokenizer.json")).unwrap();
        let sampler = Arc::new(SlowSampler { tokenizer, answers: answers.clone(), lat, draws: Arc::default() });
        let trainer = Arc::new(SlowTrainer { sampler, lat, queue: Arc::default() });
        rt.block_on(engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &())).unwrap();
        let lines: Vec<Value> = std::fs::read_to_string(root.join(&plan.run_id).join("metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let steady: Vec<&Value> = lines.iter().filter(|m| m["step"].as_i64().is_some_and(|s| s >= 2)).collect();
        let mean = |key: &str| steady.iter().filter_map(|m| m[key].as_f64()).sum::<f64>() / steady.len().max(1) as f64;
        let max = |key: &str| steady.iter().filter_map(|m| m[key].as_f64()).fold(0.0, f64::max);
        if a.verbose {
            for m in &lines {
                let g = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
                eprintln!(
                    "  k={k} step {}: step {:.2} s, staleness {}/{}, stale {}, trainer wait {:.2} s, sampler wait {:.2} s",
                    m["step"],
                    g("time/step_s"),
                    g("train/staleness_mean"),
                    g("train/staleness_max"),
                    g("train/groups_stale"),
                    g("time/trainer_wait_s"),
                    g("time/sampler_wait_s")
                );
            }
        }
        let step_s = mean("time/step_s");
        let mode = if k == 0 { "sequential".to_owned() } else { format!("k = {k}") };
        let staleness = if k == 0 { "0 / 0".to_owned() } else { format!("{:.2} / {:.0}", mean("train/staleness_mean"), max("train/staleness_max")) };
        let stale = steady.iter().filter_map(|m| m["train/groups_stale"].as_f64()).map(|x| x as u64).sum::<u64>();
        println!("{mode:<12} {step_s:>8.2} {:>9.2}× {:>9.2}× {staleness:>16} {stale:>8}", step_s / lat.sample, step_s / train);
    }
}
