//! The local (candle) trainer backend on tiny random models the tests generate: logits against an
//! independent numpy implementation, gradients against finite differences, KV-cache decoding
//! against full recomputation, bit-exact resume, gradient coverage, and a GRPO learning test.
//! The SmolLM2 test (real GGUF from PyPI) lives in `trainer_smollm2.rs`.

// Tests report measured values and skips on stderr by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device, Tensor};
use rlx::backend::local::model::{Arch, Model, ParamBuilder, Tuning, random_weights};
use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions};
use rlx::seam::{AdamParams, Datum, LossFn, LossFnInputs, SampleRequest, SampledSequence, SamplingParams, Stop, StopReason};

pub(crate) use rlx::backend::local::model::tiny_config;

fn trainer(arch: Arch, tuning: Tuning, dtype: DType, seed: u64) -> LocalTrainer {
    let cfg = tiny_config(arch);
    let w = random_weights(&cfg, 0.2, seed, dtype).unwrap();
    let opts = TrainerOptions { tuning, seed, max_tokens_per_microbatch: 4096, ..Default::default() };
    LocalTrainer::from_weights(cfg, w, None, opts, PathBuf::from("random")).unwrap()
}

fn lora() -> Tuning {
    Tuning::Lora(LoraConfig::all_linear(4))
}

/// One policy-gradient datum: prompt [2, 3], sampled [5, 7, 9].
fn pg_datum(adv: f32) -> Datum {
    Datum {
        model_input: vec![2, 3, 5, 7],
        loss_fn_inputs: LossFnInputs {
            target_tokens: vec![3, 5, 7, 9],
            weights: None,
            logprobs: Some(vec![0.0, -2.5, -3.0, -3.5]),
            advantages: Some(vec![0.0, adv, adv, adv]),
        },
    }
}

fn sft_datum(tokens: &[u32]) -> Datum {
    let n = tokens.len() - 1;
    Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: Some(vec![1.0; n]), logprobs: None, advantages: None },
    }
}

fn adam(lr: f64) -> AdamParams {
    AdamParams { learning_rate: lr, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.01, grad_clip_norm: 1.0 }
}

fn ensure_numpy() -> bool {
    let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    if ok(Command::new("python3").args(["-c", "import numpy"])) {
        return true;
    }
    ok(Command::new("python3").args(["-m", "pip", "install", "--quiet", "numpy"])) && ok(Command::new("python3").args(["-c", "import numpy"]))
}

fn numpy_logits(dir: &Path, tokens: &[u32]) -> Vec<Vec<f64>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/trainer_ref.py");
    let out = Command::new("python3").arg(script).arg(dir).arg(serde_json::to_string(tokens).unwrap()).output().unwrap();
    assert!(out.status.success(), "reference failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn model_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let t = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&t, 0, None).unwrap().squeeze(0).unwrap().to_dtype(DType::F32).unwrap().to_vec2().unwrap()
}

#[test]
fn logits_match_numpy_reference_for_every_arch() {
    assert!(ensure_numpy(), "numpy is needed for the reference implementation and `pip install numpy` failed");
    let tokens: Vec<u32> = vec![0, 5, 17, 3, 39, 22, 8, 8, 1, 30];
    for (arch, tuning) in [(Arch::Llama, Tuning::Full), (Arch::Qwen2, Tuning::Full), (Arch::Qwen3, lora())] {
        let mut tr = trainer(arch, tuning.clone(), DType::F32, 11);
        if tuning != Tuning::Full {
            // Move the adapters off zero so the export must really merge them.
            for _ in 0..2 {
                tr.forward_backward(&[pg_datum(1.0)], &LossFn::ImportanceSampling).unwrap();
                tr.optim_step(&adam(0.05)).unwrap();
            }
        }
        let dir = tempfile::tempdir().unwrap();
        tr.export_merged(dir.path()).unwrap();
        let want = numpy_logits(dir.path(), &tokens);
        let got = model_logits(tr.model(), &tokens);
        let mut max_err = 0f64;
        for (g, w) in got.iter().zip(&want) {
            for (a, b) in g.iter().zip(w) {
                max_err = max_err.max((f64::from(*a) - b).abs());
            }
        }
        assert!(max_err < 1e-4, "{arch:?}: max |logit diff| = {max_err}");
        // The exported directory loads back into the same function.
        let loaded = rlx::backend::local::load(dir.path()).unwrap();
        let pb = ParamBuilder::new(&loaded.weights, &Tuning::Frozen, dir.path(), 0);
        let m = Model::new(&loaded.config, &pb).unwrap();
        let again = model_logits(&m, &tokens);
        let d = again.iter().flatten().zip(got.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d < 1e-4, "{arch:?}: reloaded export differs by {d}");
    }
}

fn loss_value(tr: &mut LocalTrainer, data: &[Datum], loss: &LossFn) -> f64 {
    tr.forward_backward(data, loss).unwrap().loss
}

#[test]
fn gradients_match_finite_differences() {
    for (arch, tuning, loss) in [
        (Arch::Qwen3, Tuning::Full, LossFn::ImportanceSampling),
        (Arch::Qwen2, Tuning::Full, LossFn::CrossEntropy),
        (Arch::Llama, lora(), LossFn::Dro { beta: 0.1 }),
        // GSPO: the sequence ratio couples a datum's tokens (a clip range wide enough that the
        // derivative exists everywhere the differences probe).
        (Arch::Qwen2, lora(), LossFn::Gspo { clip_low_threshold: 1e-3, clip_high_threshold: 1e3 }),
        // PPO with clip-higher's asymmetric range.
        (Arch::Qwen3, Tuning::Full, LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.28 }),
    ] {
        let mut tr = trainer(arch, tuning.clone(), DType::F64, 5);
        if tuning != Tuning::Full {
            // Non-zero B so that A has a gradient too.
            for (name, v) in tr.params() {
                if name.ends_with("lora_B.weight") {
                    v.set(&(v.randn_like(0.0, 0.1).unwrap())).unwrap();
                }
            }
        }
        let data = vec![pg_datum(1.5), sft_datum(&[4, 6, 8, 10, 12])];
        let data: Vec<Datum> = if loss.is_policy_gradient() {
            vec![pg_datum(1.5), pg_datum(-0.5)]
        } else {
            data.into_iter().map(|mut d| {
                d.loss_fn_inputs.logprobs = None;
                d.loss_fn_inputs.advantages = None;
                d
            }).collect()
        };
        tr.forward_backward(&data, &loss).unwrap();
        let grads: HashMap<String, Tensor> = tr.grads().unwrap().map(|(n, g)| (n.to_string(), g.clone())).collect();
        let params: Vec<(String, candle_core::Var)> = tr.params().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let mut checked = 0;
        for (name, var) in params.iter().step_by(3) {
            let flat = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let g = grads[name].flatten_all().unwrap().to_vec1::<f64>().unwrap();
            for idx in [0, flat.len() / 2, flat.len() - 1] {
                let h = 1e-5;
                let mut plus = flat.clone();
                plus[idx] += h;
                var.set(&Tensor::from_vec(plus, var.shape(), &Device::Cpu).unwrap()).unwrap();
                let lp = loss_value(&mut tr, &data, &loss);
                let mut minus = flat.clone();
                minus[idx] -= h;
                var.set(&Tensor::from_vec(minus, var.shape(), &Device::Cpu).unwrap()).unwrap();
                let lm = loss_value(&mut tr, &data, &loss);
                var.set(&Tensor::from_vec(flat.clone(), var.shape(), &Device::Cpu).unwrap()).unwrap();
                let fd = (lp - lm) / (2.0 * h);
                let tol = 1e-6 + 1e-4 * fd.abs().max(g[idx].abs());
                assert!((fd - g[idx]).abs() < tol, "{arch:?} {name}[{idx}]: autograd {} vs finite difference {fd}", g[idx]);
                checked += 1;
            }
        }
        assert!(checked >= 9, "{arch:?}: only {checked} entries checked");
    }
}

#[test]
fn every_trainable_var_gets_a_nonzero_gradient() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        for tuning in [Tuning::Full, lora()] {
            let mut tr = trainer(arch, tuning.clone(), DType::F32, 3);
            if tuning != Tuning::Full {
                // A fresh adapter has B = 0, hence dL/dA = 0 by construction; one step moves B.
                tr.forward_backward(&[pg_datum(1.0)], &LossFn::ImportanceSampling).unwrap();
                tr.optim_step(&adam(0.01)).unwrap();
            }
            tr.forward_backward(&[pg_datum(1.0), pg_datum(-1.0), sft_datum(&[1, 2, 3])].map(|mut d| {
                d.loss_fn_inputs.logprobs.get_or_insert_with(|| vec![0.0; 2]);
                d.loss_fn_inputs.advantages.get_or_insert_with(|| vec![0.3; 2]);
                d
            }), &LossFn::ImportanceSampling).unwrap();
            let zero: Vec<String> = tr
                .grads()
                .unwrap()
                .filter(|(_, g)| g.abs().unwrap().sum_all().unwrap().to_vec0::<f32>().unwrap() == 0.0)
                .map(|(n, _)| n.to_string())
                .collect();
            assert!(zero.is_empty(), "{arch:?} {tuning:?}: no gradient for {zero:?}");
            let n = tr.params().count();
            let expected = match (&tuning, arch) {
                (Tuning::Full, Arch::Llama) => 1 + 1 + 2 * 9,       // tied head; 9 tensors per layer
                (Tuning::Full, Arch::Qwen2) => 1 + 1 + 1 + 2 * 12,  // head; +3 q/k/v biases per layer
                (Tuning::Full, Arch::Qwen3) => 1 + 1 + 1 + 2 * 11,  // head; +2 q/k norms per layer
                _ => 2 * 7 * 2,                                     // A and B on 7 projections, 2 layers
            };
            assert_eq!(n, expected, "{arch:?} {tuning:?}: trainable tensors");
        }
    }
}

#[test]
fn kv_cache_decoding_equals_full_recomputation() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let mut tr = trainer(arch, Tuning::Full, DType::F32, 7);
        let s = tr.sampler().unwrap();
        let prompt = vec![3u32, 14, 15, 9, 2];
        let params = SamplingParams { max_tokens: 20, temperature: 0.0, ..Default::default() };
        let got = s.sample(&prompt, 1, &params).unwrap().remove(0);
        // Recompute the whole sequence every step, no cache.
        let mut seq = prompt.clone();
        for (i, &tok) in got.tokens.iter().enumerate() {
            let logits = model_logits(s.model(), &seq);
            let last = logits.last().unwrap();
            let argmax = last.iter().enumerate().fold((0, f32::MIN), |b, (j, &x)| if x > b.1 { (j, x) } else { b }).0 as u32;
            assert_eq!(tok, argmax, "{arch:?}: step {i}");
            let max = last.iter().copied().fold(f32::MIN, f32::max);
            let lse = max + last.iter().map(|x| (x - max).exp()).sum::<f32>().ln();
            assert!((got.logprobs[i] - (last[argmax as usize] - lse)).abs() < 1e-4, "{arch:?}: logprob at step {i}");
            seq.push(tok);
        }
        assert_eq!(got.tokens.len(), 20);
        assert_eq!(got.stop_reason, StopReason::Length);
    }
}

#[test]
fn prompts_of_different_lengths_decode_as_one_batch() {
    // Left padding must be invisible: every row of a mixed batch reports the log-probabilities the
    // unpadded model gives its own sequence, and greedy rows pick the unpadded argmax.
    for arch in [Arch::Llama, Arch::Qwen3] {
        let mut tr = trainer(arch, Tuning::Full, DType::F32, 21);
        let s = tr.sampler().unwrap();
        let requests = vec![
            SampleRequest { prompt: vec![3, 14, 15, 9, 2, 6, 5, 3, 5], num_samples: 3, seed: Some(1), greedy: false },
            SampleRequest { prompt: vec![7], num_samples: 2, seed: Some(2), greedy: false },
            SampleRequest { prompt: vec![8, 9, 7, 9], num_samples: 0, seed: Some(3), greedy: false },
            SampleRequest { prompt: vec![2, 7, 1, 8], num_samples: 1, seed: Some(4), greedy: false },
        ];
        for temperature in [0.0, 1.0] {
            let params = SamplingParams { max_tokens: 10, temperature, ..Default::default() };
            let out = s.sample_batch(&requests, &params).unwrap();
            assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 2, 0, 1]);
            for (r, seqs) in requests.iter().zip(&out) {
                for seq in seqs {
                    assert_eq!(seq.tokens.len(), 10);
                    let mut full = r.prompt.clone();
                    full.extend(&seq.tokens);
                    let logits = model_logits(s.model(), &full[..full.len() - 1]);
                    for (i, &tok) in seq.tokens.iter().enumerate() {
                        let row = &logits[r.prompt.len() - 1 + i];
                        let max = row.iter().copied().fold(f32::MIN, f32::max);
                        let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f32>().ln();
                        assert!((seq.logprobs[i] - (row[tok as usize] - lse)).abs() < 1e-4, "{arch:?} T={temperature}: prompt {:?} token {i}", r.prompt);
                        if temperature == 0.0 {
                            assert!(row[tok as usize] >= max - 1e-4, "{arch:?}: greedy picks the argmax");
                        }
                    }
                }
            }
            // Same seeds alone or in a batch: the same samples at temperature 1 (per-sample streams).
            if temperature == 1.0 {
                let mut p = params.clone();
                p.seed = Some(2);
                let alone = s.sample(&[7], 2, &p).unwrap();
                for (a, b) in alone.iter().zip(&out[1]) {
                    assert_eq!(a.tokens, b.tokens);
                    assert!(a.logprobs.iter().zip(&b.logprobs).all(|(x, y)| (x - y).abs() < 1e-5));
                }
            }
        }
        // A greedy request among sampled ones (an eval's two protocols in one call) decodes as
        // a call at temperature 0 does; the sampled request beside it still samples.
        let sampled = SamplingParams { max_tokens: 10, temperature: 1.0, ..Default::default() };
        let mixed = [SampleRequest { greedy: true, ..requests[0].clone() }, requests[0].clone()];
        let got = s.sample_batch(&mixed, &sampled).unwrap();
        let want = s.sample_batch(&requests[..1], &SamplingParams { temperature: 0.0, ..sampled.clone() }).unwrap();
        let tokens = |seqs: &[SampledSequence]| seqs.iter().map(|q| q.tokens.clone()).collect::<Vec<_>>();
        assert_eq!(tokens(&got[0]), tokens(&want[0]), "{arch:?}: greedy request in a sampled call");
        assert_ne!(tokens(&got[1]), tokens(&want[0]), "{arch:?}: the sampled request samples");
    }
}

#[test]
fn sampling_is_seeded_batched_and_stops() {
    let mut tr = trainer(Arch::Qwen3, Tuning::Full, DType::F32, 9);
    let s = tr.sampler().unwrap();
    let p = SamplingParams { max_tokens: 12, temperature: 1.0, top_p: 0.95, top_k: Some(20), stop: vec![], seed: Some(42) };
    let a = s.sample(&[1, 2, 3], 4, &p).unwrap();
    let b = s.sample(&[1, 2, 3], 4, &p).unwrap();
    assert_eq!(a, b, "same seed, same tokens");
    // Sample i does not depend on how many samples run beside it (rows leave the batch as they stop).
    let single = s.sample(&[1, 2, 3], 1, &p).unwrap();
    assert_eq!(single[0], a[0]);
    let other = s.sample(&[1, 2, 3], 4, &SamplingParams { seed: Some(43), ..p.clone() }).unwrap();
    assert_ne!(a, other);
    // Stop on a token: the first sampled token of sample 0 stops it immediately.
    let stop = SamplingParams { stop: vec![Stop::Token(a[0].tokens[0])], ..p.clone() };
    let c = s.sample(&[1, 2, 3], 4, &stop).unwrap();
    assert_eq!(c[0].tokens, vec![a[0].tokens[0]]);
    assert_eq!(c[0].stop_reason, StopReason::Stop);
    for (x, y) in c.iter().zip(&a) {
        assert!(y.tokens.starts_with(&x.tokens));
    }
    // Bad input is an error, not a panic.
    assert!(s.sample(&[], 1, &p).is_err());
    assert!(s.sample(&[1000], 1, &p).is_err());
    assert!(s.sample(&[1], 1, &SamplingParams { top_p: 0.0, ..p.clone() }).is_err());
    assert!(s.sample(&[1], 1, &SamplingParams { stop: vec![Stop::Text("x".into())], ..p }).is_err());
}

#[test]
fn sampler_logprobs_match_trainer_logprobs_on_policy() {
    for tuning in [Tuning::Full, lora()] {
        let mut tr = trainer(Arch::Qwen2, tuning, DType::F32, 13);
        // Move the weights (and LoRA's B off zero) so the sampler snapshot must carry them.
        for _ in 0..2 {
            tr.forward_backward(&[pg_datum(1.0)], &LossFn::ImportanceSampling).unwrap();
            tr.optim_step(&adam(0.05)).unwrap();
        }
        on_policy_check(&mut tr);
    }
}

fn on_policy_check(tr: &mut LocalTrainer) {
    let s = tr.sampler().unwrap();
    let prompt = [4u32, 5, 6];
    let seq = s.sample(&prompt, 1, &SamplingParams { max_tokens: 8, seed: Some(1), ..Default::default() }).unwrap().remove(0);
    let d = rlx::seam::make_datum(&[&prompt[..], &seq.tokens].concat(), &seq.logprobs, prompt.len(), 0.0);
    let out = tr.forward(&[d]).unwrap().remove(0);
    for (i, lp) in seq.logprobs.iter().enumerate() {
        assert!((out.logprobs[prompt.len() - 1 + i] - lp).abs() < 1e-4, "token {i}");
    }
}

fn params_snapshot(tr: &LocalTrainer) -> Vec<Vec<f32>> {
    tr.params().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
}

#[test]
fn save_load_continue_equals_straight_through() {
    for tuning in [Tuning::Full, lora()] {
        let data = [pg_datum(1.0), pg_datum(-0.5)];
        let step = |tr: &mut LocalTrainer| {
            tr.forward_backward(&data, &LossFn::PPO).unwrap();
            tr.optim_step(&adam(0.01)).unwrap();
        };
        let mut a = trainer(Arch::Qwen3, tuning.clone(), DType::F32, 21);
        for _ in 0..3 {
            step(&mut a);
        }
        let dir = tempfile::tempdir().unwrap();
        a.save_state(dir.path()).unwrap();
        for _ in 0..3 {
            step(&mut a);
        }
        let mut b = trainer(Arch::Qwen3, tuning.clone(), DType::F32, 21);
        step(&mut b); // diverge first: load must overwrite everything
        b.load_state(dir.path()).unwrap();
        assert_eq!(b.step(), 3);
        for _ in 0..3 {
            step(&mut b);
        }
        assert_eq!(params_snapshot(&a), params_snapshot(&b), "{tuning:?}: resumed training differs");
        // A state from another tuning is refused.
        let mut other = trainer(Arch::Qwen3, if tuning == Tuning::Full { lora() } else { Tuning::Full }, DType::F32, 21);
        assert!(matches!(other.load_state(dir.path()), Err(rlx::backend::Error::StateMismatch { .. })));
    }
}

#[test]
fn microbatching_gives_the_same_gradient() {
    let data: Vec<Datum> = (0..5).map(|i| pg_datum(i as f32 - 2.0)).collect();
    let mut one = trainer(Arch::Llama, Tuning::Full, DType::F64, 4);
    let mut many = trainer(Arch::Llama, Tuning::Full, DType::F64, 4);
    let cfg = tiny_config(Arch::Llama);
    let w = random_weights(&cfg, 0.2, 4, DType::F64).unwrap();
    many = LocalTrainer::from_weights(cfg, w, None, TrainerOptions { max_tokens_per_microbatch: 8, ..many.options().clone() }, "random".into()).unwrap();
    let l1 = one.forward_backward(&data, &LossFn::CISPO).unwrap();
    let l2 = many.forward_backward(&data, &LossFn::CISPO).unwrap();
    assert!((l1.loss - l2.loss).abs() < 1e-10);
    for ((_, g1), (_, g2)) in one.grads().unwrap().zip(many.grads().unwrap()) {
        let d = (g1 - g2).unwrap().abs().unwrap().max_all().unwrap().to_vec0::<f64>().unwrap();
        assert!(d < 1e-10);
    }
}

#[test]
fn invalid_datums_are_errors() {
    let mut tr = trainer(Arch::Llama, Tuning::Full, DType::F32, 1);
    let mut d = pg_datum(1.0);
    d.loss_fn_inputs.target_tokens.pop();
    let e = tr.forward_backward(&[d], &LossFn::PPO).unwrap_err().to_string();
    assert!(e.contains("datum 0") && e.contains("target_tokens"), "{e}");
    let mut d = pg_datum(1.0);
    d.loss_fn_inputs.advantages = None;
    assert!(tr.forward_backward(&[d], &LossFn::ImportanceSampling).is_err());
    let mut d = pg_datum(1.0);
    d.model_input[0] = 400;
    assert!(tr.forward_backward(&[d], &LossFn::ImportanceSampling).is_err());
    assert!(tr.forward_backward(&[], &LossFn::ImportanceSampling).is_err());
    assert!(tr.optim_step(&adam(0.1)).is_err(), "no gradient accumulated");
}

/// GRPO on a verifiable toy task: the prompt is one "digit" token d in 10..20 and the reward is
/// the fraction of the 4 completion tokens equal to d (copy it). Chance level is 1/40.
#[test]
fn grpo_with_importance_sampling_learns_a_verifiable_task() {
    let mut tr = trainer(Arch::Qwen3, Tuning::Full, DType::F32, 2);
    let (group, prompts_per_step, steps) = (8usize, 4usize, 40usize);
    let mut rewards_per_step = Vec::new();
    for step in 0..steps {
        let s = tr.sampler().unwrap();
        let mut data = Vec::new();
        let mut total = 0.0;
        for p in 0..prompts_per_step {
            let d = 10 + ((step * prompts_per_step + p) * 7 % 10) as u32;
            let params = SamplingParams { max_tokens: 4, seed: Some((step * 100 + p) as u64), ..Default::default() };
            let seqs = s.sample(&[0, d], group, &params).unwrap();
            let rewards: Vec<f32> = seqs.iter().map(|q| q.tokens.iter().filter(|&&t| t == d).count() as f32 / 4.0).collect();
            let mean = rewards.iter().sum::<f32>() / group as f32;
            total += mean;
            for (q, r) in seqs.iter().zip(&rewards) {
                let a = r - mean;
                let mut input = vec![0, d];
                input.extend(&q.tokens[..q.tokens.len() - 1]);
                let mut targets = vec![d];
                targets.extend(&q.tokens);
                let mut lp = vec![0.0];
                lp.extend(&q.logprobs);
                let mut adv = vec![0.0];
                adv.extend(std::iter::repeat_n(a, q.tokens.len()));
                data.push(Datum {
                    model_input: input,
                    loss_fn_inputs: LossFnInputs { target_tokens: targets, weights: None, logprobs: Some(lp), advantages: Some(adv) },
                });
            }
        }
        rewards_per_step.push(total / prompts_per_step as f32);
        let out = tr.forward_backward(&data, &LossFn::ImportanceSampling).unwrap();
        // On-policy: the sampler's logprobs are the learner's, so every ratio is 1.
        assert!(out.stats.tokens == 0 || (out.stats.ratio_mean - 1.0).abs() < 1e-3, "ratio {}", out.stats.ratio_mean);
        tr.optim_step(&AdamParams { learning_rate: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 1.0 }).unwrap();
    }
    let start: f32 = rewards_per_step[..5].iter().sum::<f32>() / 5.0;
    let end: f32 = rewards_per_step[steps - 5..].iter().sum::<f32>() / 5.0;
    eprintln!("GRPO mean reward: first 5 steps {start:.3}, last 5 steps {end:.3}");
    assert!(end > start + 0.3, "mean reward did not rise enough: start {start:.3}, end {end:.3}, curve {rewards_per_step:?}");
}

#[test]
fn samplers_are_snapshots_of_the_weights() {
    let mut tr = trainer(Arch::Llama, lora(), DType::F32, 17);
    let p = SamplingParams { max_tokens: 10, seed: Some(5), ..Default::default() };
    let old = tr.sampler().unwrap();
    let before = old.sample(&[1, 2], 3, &p).unwrap();
    for _ in 0..3 {
        tr.forward_backward(&[pg_datum(1.0)], &LossFn::ImportanceSampling).unwrap();
        tr.optim_step(&adam(0.2)).unwrap();
    }
    assert_eq!(old.sample(&[1, 2], 3, &p).unwrap(), before, "a handed-out sampler must not see later steps");
    let after = tr.sampler().unwrap().sample(&[1, 2], 3, &p).unwrap();
    assert_ne!(after.iter().map(|s| &s.logprobs).collect::<Vec<_>>(), before.iter().map(|s| &s.logprobs).collect::<Vec<_>>());
}

/// The same trainer in f32 (the hand-written training pass) and in f64 (candle's autograd, which
/// `gradients_match_finite_differences` checks), with LoRA's B moved off zero in both.
fn twin_trainers(arch: Arch, tuning: &Tuning, seed: u64) -> (LocalTrainer, LocalTrainer) {
    let mut pair = [DType::F32, DType::F64].map(|dt| trainer(arch, tuning.clone(), dt, seed));
    for tr in &mut pair {
        for (name, v) in tr.params() {
            if name.ends_with("lora_B.weight") {
                let n = v.elem_count();
                let b: Vec<f64> = (0..n).map(|i| 0.1 * (i as f64 * 0.7 + seed as f64).sin()).collect();
                v.set(&Tensor::from_vec(b, v.shape(), &Device::Cpu).unwrap().to_dtype(v.dtype()).unwrap()).unwrap();
            }
        }
    }
    let [a, b] = pair;
    (a, b)
}

#[test]
fn hand_written_pass_matches_autograd_in_values_and_gradients() {
    // Rows of different lengths (padding), every loss family, every arch, full and LoRA (the
    // untied heads with an adapter on the LM head too).
    let data: Vec<Datum> = [pg_datum(1.5), sft_datum(&[4, 6, 8, 10, 12, 14, 3]), pg_datum(-0.5)]
        .map(|mut d| {
            let n = d.model_input.len();
            d.loss_fn_inputs.logprobs.get_or_insert_with(|| (0..n).map(|i| -1.0 - i as f32 * 0.3).collect());
            d.loss_fn_inputs.advantages.get_or_insert_with(|| vec![0.7; n]);
            d
        })
        .into();
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let mut lora_head = LoraConfig::all_linear(4);
        if arch != Arch::Llama {
            lora_head.targets.push("lm_head".into());
        }
        // Equal lengths with every position weighted: no row of the head's backward is skipped.
        let dense = [sft_datum(&[4, 6, 8, 10, 12]), sft_datum(&[5, 7, 9, 11, 13])];
        for (tuning, loss, data) in [
            (Tuning::Full, LossFn::PPO, &data[..]),
            (Tuning::Lora(lora_head), LossFn::Dro { beta: 0.1 }, &data[..]),
            (Tuning::Full, LossFn::CrossEntropy, &data[..]),
            (Tuning::Full, LossFn::CrossEntropy, &dense[..]),
            (Tuning::Full, LossFn::GSPO, &data[..]),
            (Tuning::Full, LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.28 }, &data[..]),
        ] {
            let (mut f32_tr, mut f64_tr) = twin_trainers(arch, &tuning, 8);
            let a = f32_tr.forward_backward(data, &loss).unwrap();
            let b = f64_tr.forward_backward(data, &loss).unwrap();
            assert!((a.loss - b.loss).abs() < 1e-4 * b.loss.abs().max(1.0), "{arch:?} {tuning:?}: loss {} vs {}", a.loss, b.loss);
            for (oa, ob) in a.outputs.iter().zip(&b.outputs) {
                for (x, y) in oa.logprobs.iter().zip(&ob.logprobs) {
                    assert!((x - y).abs() < 1e-4, "{arch:?} {tuning:?}: logprob {x} vs {y}");
                }
            }
            let g64: HashMap<String, Vec<f64>> = f64_tr.grads().unwrap().map(|(n, g)| (n.to_string(), g.flatten_all().unwrap().to_vec1::<f64>().unwrap())).collect();
            let mut compared = 0;
            for (name, g) in f32_tr.grads().unwrap() {
                let g = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let want = &g64[name];
                let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
                assert!(scale > 0.0, "{arch:?} {tuning:?}: {name} has no gradient in the reference");
                let err = g.iter().zip(want).fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()));
                assert!(err <= 1e-3 * scale + 1e-6, "{arch:?} {tuning:?}: {name} differs by {err} (scale {scale})");
                compared += 1;
            }
            assert_eq!(compared, g64.len(), "{arch:?} {tuning:?}: gradient sets differ");
        }
    }
}

#[test]
fn hand_written_pass_microbatches_sum_to_the_full_batch_gradient() {
    let data: Vec<Datum> = (0..5).map(|i| pg_datum(i as f32 - 2.0)).collect();
    let cfg = tiny_config(Arch::Qwen3);
    let build = |mb: usize| {
        let w = random_weights(&cfg, 0.2, 4, DType::F32).unwrap();
        let opts = TrainerOptions { tuning: Tuning::Full, seed: 4, max_tokens_per_microbatch: mb, ..Default::default() };
        LocalTrainer::from_weights(cfg.clone(), w, None, opts, "random".into()).unwrap()
    };
    let (mut one, mut many) = (build(4096), build(8));
    let l1 = one.forward_backward(&data, &LossFn::CISPO).unwrap();
    let l2 = many.forward_backward(&data, &LossFn::CISPO).unwrap();
    assert!((l1.loss - l2.loss).abs() < 1e-5);
    for ((n, g1), (_, g2)) in one.grads().unwrap().zip(many.grads().unwrap()) {
        let scale = g1.abs().unwrap().max_all().unwrap().to_vec0::<f32>().unwrap();
        let d = (g1 - g2).unwrap().abs().unwrap().max_all().unwrap().to_vec0::<f32>().unwrap();
        assert!(d <= 1e-5 * scale.max(1.0), "{n}: {d}");
    }
}

pub(crate) fn tempered_trainer(arch: Arch, tuning: Tuning, dtype: DType, seed: u64, temperature: f32) -> LocalTrainer {
    let cfg = tiny_config(arch);
    let w = random_weights(&cfg, 0.2, seed, dtype).unwrap();
    let opts = TrainerOptions { tuning, seed, max_tokens_per_microbatch: 4096, temperature, ..Default::default() };
    LocalTrainer::from_weights(cfg, w, None, opts, PathBuf::from("random")).unwrap()
}

/// `log softmax(logits / T)[target]` in f64, from the model's raw logits: the independent
/// computation the learner's temperature must match.
pub(crate) fn log_softmax_at(logits: &[f32], target: u32, t: f64) -> f64 {
    let z: Vec<f64> = logits.iter().map(|&x| f64::from(x) / t).collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + z.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    z[target as usize] - lse
}

#[test]
fn learner_temperature_scores_the_log_softmax_of_logits_over_t() {
    // Both paths (the hand-written f32 pass and candle's f64 autograd), both heads.
    for (arch, dtype) in [(Arch::Llama, DType::F32), (Arch::Qwen2, DType::F32), (Arch::Qwen3, DType::F64)] {
        for t in [0.7f32, 1.0, 1.6] {
            let tr = tempered_trainer(arch, lora(), dtype, 21, t);
            let d = pg_datum(1.0);
            let got = tr.forward(std::slice::from_ref(&d)).unwrap().remove(0).logprobs;
            let logits = model_logits(tr.model(), &d.model_input);
            for (i, (row, &target)) in logits.iter().zip(&d.loss_fn_inputs.target_tokens).enumerate() {
                let want = log_softmax_at(row, target, f64::from(t));
                assert!((f64::from(got[i]) - want).abs() < 1e-4, "{arch:?} T={t} position {i}: {} vs log_softmax(z/T) {want}", got[i]);
            }
            if t != 1.0 {
                // Not the untempered distribution (the test would pass vacuously if T were ignored).
                let plain = log_softmax_at(&logits[1], d.loss_fn_inputs.target_tokens[1], 1.0);
                assert!((f64::from(got[1]) - plain).abs() > 1e-3, "{arch:?} T={t}: the temperature changed nothing");
            }
        }
    }
}

#[test]
fn tempered_gradients_match_finite_differences_and_the_hand_written_pass() {
    let t = 0.7;
    let loss = LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.28 };
    let data = vec![pg_datum(1.5), pg_datum(-0.5)];
    let mut tr = tempered_trainer(Arch::Qwen3, Tuning::Full, DType::F64, 5, t);
    tr.forward_backward(&data, &loss).unwrap();
    let grads: HashMap<String, Tensor> = tr.grads().unwrap().map(|(n, g)| (n.to_string(), g.clone())).collect();
    let params: Vec<(String, candle_core::Var)> = tr.params().map(|(n, v)| (n.to_string(), v.clone())).collect();
    let mut checked = 0;
    for (name, var) in params.iter().step_by(4) {
        let flat = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let g = grads[name].flatten_all().unwrap().to_vec1::<f64>().unwrap();
        for idx in [0, flat.len() / 2] {
            let h = 1e-5;
            let at = |tr: &mut LocalTrainer, x: f64| {
                let mut v = flat.clone();
                v[idx] += x;
                var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu).unwrap()).unwrap();
                loss_value(tr, &data, &loss)
            };
            let fd = (at(&mut tr, h) - at(&mut tr, -h)) / (2.0 * h);
            var.set(&Tensor::from_vec(flat.clone(), var.shape(), &Device::Cpu).unwrap()).unwrap();
            assert!((fd - g[idx]).abs() < 1e-6 + 1e-4 * fd.abs().max(g[idx].abs()), "{name}[{idx}]: autograd {} vs finite difference {fd} at T={t}", g[idx]);
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} entries checked");
    // The hand-written pass folds 1/T into the head's backward: same values and gradients as
    // autograd through logits / T.
    let mut pair = [DType::F32, DType::F64].map(|dt| tempered_trainer(Arch::Qwen2, lora(), dt, 8, t));
    for tr in &mut pair {
        for (name, v) in tr.params() {
            if name.ends_with("lora_B.weight") {
                let b: Vec<f64> = (0..v.elem_count()).map(|i| 0.1 * (i as f64 * 0.7).sin()).collect();
                v.set(&Tensor::from_vec(b, v.shape(), &Device::Cpu).unwrap().to_dtype(v.dtype()).unwrap()).unwrap();
            }
        }
    }
    let [mut a, mut b] = pair;
    let (la, lb) = (a.forward_backward(&data, &loss).unwrap().loss, b.forward_backward(&data, &loss).unwrap().loss);
    assert!((la - lb).abs() < 1e-4 * lb.abs().max(1.0), "loss {la} vs {lb}");
    let g64: HashMap<String, Vec<f64>> = b.grads().unwrap().map(|(n, g)| (n.to_string(), g.flatten_all().unwrap().to_vec1::<f64>().unwrap())).collect();
    for (name, g) in a.grads().unwrap() {
        let g = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let want = &g64[name];
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        let err = g.iter().zip(want).fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()));
        assert!(err <= 1e-3 * scale + 1e-6, "{name} differs by {err} (scale {scale}) at T={t}");
    }
}

#[test]
fn a_sampler_at_t_is_on_policy_for_a_learner_at_t() {
    // Sampled at 0.7 and scored at 0.7, the ratio is 1 (what PPO's clip assumes on-policy);
    // scored at 1 it is not.
    let t = 0.7;
    for learner_t in [t, 1.0] {
        let mut tr = tempered_trainer(Arch::Qwen2, lora(), DType::F32, 13, learner_t);
        for _ in 0..2 {
            tr.forward_backward(&[pg_datum(1.0)], &LossFn::ImportanceSampling).unwrap();
            tr.optim_step(&adam(0.05)).unwrap();
        }
        let s = tr.sampler().unwrap();
        let prompt = [4u32, 5, 6];
        let p = SamplingParams { max_tokens: 8, seed: Some(3), temperature: f64::from(t), ..Default::default() };
        let seq = s.sample(&prompt, 1, &p).unwrap().remove(0);
        let d = rlx::seam::make_datum(&[&prompt[..], &seq.tokens].concat(), &seq.logprobs, prompt.len(), 0.0);
        let out = tr.forward(&[d]).unwrap().remove(0);
        let gap = seq.logprobs.iter().enumerate().map(|(i, lp)| (out.logprobs[prompt.len() - 1 + i] - lp).abs()).fold(0f32, f32::max);
        if learner_t == t {
            assert!(gap < 1e-4, "scored at the sampling temperature the log-probabilities differ by {gap}");
        } else {
            assert!(gap > 1e-3, "scored at 1 the tempered sampler's log-probabilities should differ, max gap {gap}");
        }
    }
}
