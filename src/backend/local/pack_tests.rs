//! Prompt packing against the plain layout on tiny random models: the same per-token
//! log-probabilities, loss and gradients (up to float summation order), and the same weights
//! after an optimizer step.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};

use super::model::{Arch, Tuning, random_weights, tiny_config};
use super::pack::{self, Row, Sharing};
use super::trainer::{LocalTrainer, TrainerOptions};
use crate::seam::LoraConfig;
use crate::seam::{AdamParams, Datum, KlKind, KlLoss, LossFn, LossFnInputs};

/// A LoRA trainer (adapters on the head too where it is untied) with `B` moved off zero, so
/// that every adapter matrix has a gradient.
fn trainer(arch: Arch, temperature: f32, cap: usize, pack: bool) -> LocalTrainer {
    let cfg = tiny_config(arch);
    let mut lora = LoraConfig::all_linear(4);
    if arch != Arch::Llama {
        lora.targets.push("lm_head".into());
    }
    let w = random_weights(&cfg, 0.2, 5, DType::F32).unwrap();
    let opts = TrainerOptions { tuning: Tuning::Lora(lora), seed: 5, max_tokens_per_microbatch: cap, temperature, ..Default::default() };
    let mut tr = LocalTrainer::from_weights(cfg, w, None, opts, PathBuf::from("random")).unwrap();
    for (name, v) in tr.params() {
        if name.ends_with("lora_B.weight") {
            let b: Vec<f32> = (0..v.elem_count()).map(|i| 0.1 * (i as f32 * 0.7).sin()).collect();
            v.set(&Tensor::from_vec(b, v.shape(), &Device::Cpu).unwrap()).unwrap();
        }
    }
    tr.set_prompt_packing(pack);
    tr
}

/// `prompt` then `completion` as a GRPO datum: sampler log-probs and advantage `adv` on the
/// completion's targets, zero on the prompt's.
fn datum(prompt: &[u32], completion: &[u32], adv: f32) -> Datum {
    let input: Vec<u32> = prompt.iter().chain(&completion[..completion.len() - 1]).copied().collect();
    let targets: Vec<u32> = prompt[1..].iter().chain(completion).copied().collect();
    let p = prompt.len() - 1;
    let on = |j: usize| j >= p;
    Datum {
        loss_fn_inputs: LossFnInputs {
            weights: Some((0..input.len()).map(|j| if on(j) { 1.0 } else { 0.0 }).collect()),
            logprobs: Some((0..input.len()).map(|j| if on(j) { -1.0 - 0.1 * j as f32 } else { 0.0 }).collect()),
            advantages: Some((0..input.len()).map(|j| if on(j) { adv } else { 0.0 }).collect()),
            target_tokens: targets,
        },
        model_input: input,
    }
}

/// Two groups (one with a completion of a single token) around a datum whose prompt differs.
fn groups() -> Vec<Datum> {
    let (p1, p2) = ([2, 3, 5, 7, 11, 13], [4, 6, 8, 10]);
    vec![
        datum(&p1, &[20], 1.0),
        datum(&p1, &[21, 22, 23], -0.5),
        datum(&p1, &[24, 25, 26, 27, 28], 0.7),
        datum(&p1, &[29, 30], -1.2),
        datum(&[9, 9, 3], &[31, 32], 0.4),
        datum(&p2, &[33, 34], 0.9),
        datum(&p2, &[35, 36, 37, 38], -0.9),
    ]
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn grads(tr: &LocalTrainer) -> Vec<(String, Vec<f32>)> {
    tr.grads().unwrap().map(|(n, g)| (n.to_string(), g.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect()
}

/// Both layouts on `data` under `loss`: log-probabilities from `forward` and `forward_backward`,
/// the loss, and every gradient.
fn assert_same(arch: Arch, temperature: f32, cap: usize, data: &[Datum], loss: &LossFn, kl: Option<&KlLoss>) {
    let what = format!("{arch:?} T={temperature} cap {cap} {loss:?} kl {}", kl.is_some());
    let (mut plain, mut packed) = (trainer(arch, temperature, cap, false), trainer(arch, temperature, cap, true));
    for (a, b) in plain.forward(data).unwrap().iter().zip(&packed.forward(data).unwrap()) {
        assert_eq!(a.logprobs.len(), b.logprobs.len());
        assert!(max_abs(&a.logprobs, &b.logprobs) < 1e-5, "{what}: forward log-probs {:?} vs {:?}", a.logprobs, b.logprobs);
    }
    let a = plain.forward_backward_with(data, loss, kl).unwrap();
    let b = packed.forward_backward_with(data, loss, kl).unwrap();
    assert!((a.loss - b.loss).abs() < 1e-5 * a.loss.abs().max(1.0), "{what}: loss {} vs {}", a.loss, b.loss);
    for (x, y) in a.outputs.iter().zip(&b.outputs) {
        assert!(max_abs(&x.logprobs, &y.logprobs) < 1e-5, "{what}: log-probs {:?} vs {:?}", x.logprobs, y.logprobs);
    }
    let (ga, gb) = (grads(&plain), grads(&packed));
    assert_eq!(ga.len(), gb.len());
    for ((name, x), (_, y)) in ga.iter().zip(&gb) {
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{what}: {name} has no gradient");
        let err = max_abs(x, y);
        assert!(err <= 1e-5 * scale, "{what}: {name} differs by {err} (scale {scale})");
    }
}

#[test]
fn the_plan_packs_each_group_and_leaves_a_different_prompt_alone() {
    let data = groups();
    let ppo = LossFn::PPO;
    let plan = pack::plan(&data, 4096, Sharing::for_loss(&ppo, None));
    assert_eq!(plan.len(), 1, "two groups in one micro-batch");
    assert_eq!(plan[0].rows, vec![Row { count: 4, shared: 5 }, Row { count: 1, shared: 0 }, Row { count: 2, shared: 3 }]);
    // A cap of 12 splits the first group (5 shared + 1 + 3 + 5 + 2 = 16) into rows of 9 and 12.
    let rows: Vec<Row> = pack::plan(&data, 12, Sharing::for_loss(&ppo, None)).into_iter().flat_map(|c| c.rows).collect();
    assert_eq!(rows[..2], [Row { count: 2, shared: 5 }, Row { count: 2, shared: 5 }]);
}

#[test]
fn packed_rows_give_the_log_probs_and_gradients_of_plain_rows() {
    let data = groups();
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        assert_same(arch, 1.0, 4096, &data, &LossFn::PPO, None);
        assert_same(arch, 0.7, 4096, &data, &LossFn::ImportanceSampling, None);
    }
    // Cross-entropy (zero weights on the prompt), CISPO, and a KL term on the completions.
    assert_same(Arch::Qwen3, 1.0, 4096, &data, &LossFn::CrossEntropy, None);
    assert_same(Arch::Llama, 1.3, 4096, &data, &LossFn::CISPO, None);
    let kl = KlLoss {
        estimator: KlKind::K3,
        reference: data.iter().map(|d| (0..d.model_input.len()).map(|j| -2.0 - 0.05 * j as f32).collect()).collect(),
        coef: data.iter().map(|d| d.loss_fn_inputs.weights.as_ref().unwrap().iter().map(|w| 0.1 * w).collect()).collect(),
    };
    assert_same(Arch::Qwen2, 0.7, 4096, &data, &LossFn::PPO, Some(&kl));
}

#[test]
fn a_group_split_across_rows_and_micro_batches_gives_the_same_gradients() {
    for cap in [12, 20] {
        assert_same(Arch::Qwen3, 0.7, cap, &groups(), &LossFn::PPO, None);
    }
}

#[test]
fn an_optimizer_step_with_packing_equals_one_without_and_packing_is_deterministic() {
    let adam = AdamParams { learning_rate: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.01, grad_clip_norm: 1.0 };
    let data = groups();
    let mut after = Vec::new();
    for pack in [false, true, true] {
        let mut tr = trainer(Arch::Llama, 0.7, 4096, pack);
        tr.forward_backward(&data, &LossFn::PPO).unwrap();
        tr.optim_step(&adam).unwrap();
        after.push(tr.params().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect::<Vec<_>>());
    }
    let before = trainer(Arch::Llama, 0.7, 4096, false);
    let moved = before.params().zip(&after[0]).any(|((_, v), w)| max_abs(&v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), w) > 1e-3);
    assert!(moved, "the step changed nothing");
    for (x, y) in after[0].iter().zip(&after[1]) {
        assert!(max_abs(x, y) < 1e-5, "weights after a packed step differ by {}", max_abs(x, y));
    }
    assert_eq!(after[1], after[2], "packing is not deterministic");
}
