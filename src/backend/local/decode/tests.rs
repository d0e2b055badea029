//! The decoding path against candle's forward on the same weights, against itself (a prefill
//! equals decoding token by token, bit for bit), and continuous batching (shared prompt
//! beginnings, repeated prompts, greedy requests among sampled ones) against one request at a
//! time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use rlx_kernels::Team;

use super::cache::{Shape, Slot};
use super::forward::{Row, Scratch};
use super::Decoder;
use super::batch::{self, Prompts};
use crate::backend::local::model::{ParamBuilder, Tuning, random_weights, tiny_config};
use crate::backend::local::quant;
use crate::backend::local::{Arch, Config, LocalSampler, Model};
use crate::seam::{SampleRequest, SamplingParams, Stop, StopReason};

/// The trainer tests' tiny model (Llama tied, Qwen2 with q/k/v biases, Qwen3 with q/k norms) at
/// block-sized widths: Q8_0 needs every input width a multiple of 32.
fn config(arch: Arch) -> Config {
    Config { vocab_size: 50, hidden_size: 64, intermediate_size: 96, head_dim: 16, ..tiny_config(arch) }
}

/// Random weights with frozen LoRA adapters (B off zero) on every projection.
fn weights(cfg: &Config, seed: u64) -> HashMap<String, Tensor> {
    let mut w = random_weights(cfg, 0.3, seed, DType::F32).unwrap();
    let mut rng = crate::rng::SplitMix64::new(seed + 1);
    let mut names: Vec<String> = w.keys().filter(|k| k.ends_with("_proj.weight")).cloned().collect();
    names.sort();
    for name in names {
        let (out, inp) = w[&name].dims2().unwrap();
        let prefix = name.trim_end_matches(".weight");
        let mut t = |rows: usize, cols: usize| Tensor::from_vec((0..rows * cols).map(|_| 0.2 * rng.normal() as f32).collect::<Vec<_>>(), (rows, cols), &Device::Cpu).unwrap();
        let (a, b) = (t(4, inp), t(out, 4));
        w.insert(format!("{prefix}.lora_A.weight"), a);
        w.insert(format!("{prefix}.lora_B.weight"), b);
        w.insert(format!("{prefix}.lora_scale"), Tensor::new(&[0.5f32], &Device::Cpu).unwrap());
    }
    w
}

fn model(cfg: &Config, w: &HashMap<String, Tensor>) -> Model {
    Model::new(cfg, &ParamBuilder::new(w, &Tuning::Frozen, Path::new("random"), 0)).unwrap()
}

/// A model with Q8_0 copies, and the same model with its projection weights replaced by what
/// the copies stand for (so the two differ only in how activations are rounded).
fn quantised_pair(arch: Arch, seed: u64) -> (Model, Model) {
    let cfg = config(arch);
    let mut w = weights(&cfg, seed);
    let mut q = model(&cfg, &w);
    q.quantize_for_inference(|_, t| quant::q8_0(t)).unwrap();
    for (i, l) in q.layers().iter().enumerate() {
        let a = &l.self_attn;
        let m = &l.mlp;
        for (n, lin) in [("self_attn.q_proj", &a.q_proj), ("self_attn.k_proj", &a.k_proj), ("self_attn.v_proj", &a.v_proj), ("self_attn.o_proj", &a.o_proj), ("mlp.gate_proj", &m.gate_proj), ("mlp.up_proj", &m.up_proj), ("mlp.down_proj", &m.down_proj)] {
            let qm = lin.quantized().unwrap();
            w.insert(format!("model.layers.{i}.{n}.weight"), Tensor::from_vec(qm.dequantize(), (qm.n(), qm.k()), &Device::Cpu).unwrap());
        }
    }
    let head = q.lm_head().quantized().unwrap();
    let head_w = Tensor::from_vec(head.dequantize(), (head.n(), head.k()), &Device::Cpu).unwrap();
    if cfg.tie_word_embeddings {
        // Tied: the embedding is the head's weight; keep the embedding f32 for both models by
        // giving the reference an untied head with the dequantised values.
        let mut cfg2 = cfg.clone();
        cfg2.tie_word_embeddings = false;
        w.insert("lm_head.weight".into(), head_w);
        return (q, model(&cfg2, &w));
    }
    w.insert("lm_head.weight".into(), head_w);
    (q, model(&cfg, &w))
}

fn candle_logits(m: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let t = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    m.forward(&t, 0, None).unwrap().squeeze(0).unwrap().to_vec2().unwrap()
}

/// Logits of every position of `tokens`, one decoding step per token.
fn step_by_step(dec: &Decoder, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut slots = vec![Slot::default()];
    slots[0].reserve(Shape::of(dec.config()), tokens.len());
    let mut s = Scratch::default();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &token)| {
            dec.forward(&mut slots, &[Row { slot: 0, pos, token }], &[0], &mut s, None).unwrap();
            s.logits.clone()
        })
        .collect()
}

/// Every architecture, with biases, q/k norms, a tied head and LoRA adapters: the decoding path
/// gives candle's logits on the same weights up to the rounding of activations to int8 blocks.
#[test]
fn logits_match_candle_on_the_same_weights_for_every_arch() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let (q, reference) = quantised_pair(arch, 3);
        let dec = Decoder::new(&q).unwrap().expect("every projection has a Q8_0 copy");
        let tokens = [3u32, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9, 3, 2, 38, 4, 6, 2, 6, 4];
        let (got, want) = (step_by_step(&dec, &tokens), candle_logits(&reference, &tokens));
        // Relative L2 error per position. Rounding activations to int8 costs about 0.6% per
        // quantisation (9 in a row here): measured 1.5–8.7% per position, 3.2% on average; a
        // wrong rotation, cache position or head is of the order of 100%.
        let errs: Vec<f64> = got
            .iter()
            .zip(&want)
            .map(|(g, w)| {
                let err: f64 = g.iter().zip(w).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
                err / w.iter().map(|&b| f64::from(b).powi(2)).sum::<f64>().sqrt()
            })
            .collect();
        let mean = errs.iter().sum::<f64>() / errs.len() as f64;
        let worst = errs.iter().copied().fold(0f64, f64::max);
        assert!(mean < 0.05 && worst < 0.15, "{arch:?}: relative error of the logits {mean:.4} on average, {worst:.4} at most: {errs:.3?}");
        assert!(worst > 0.0, "{arch:?}: the activations are quantised, so some difference is expected");
    }
}

/// Without quantised copies (`sample_weights: f32`) there is no decoding path.
#[test]
fn f32_models_decode_with_candle() {
    let cfg = config(Arch::Qwen3);
    assert!(Decoder::new(&model(&cfg, &weights(&cfg, 1))).unwrap().is_none());
}

/// A prompt's prefill (all its rows in one step, two prompts in one step, split across the
/// cores or not) gives bit for bit the logits of decoding it one token at a time.
#[test]
fn a_prefill_equals_decoding_token_by_token() {
    for arch in [Arch::Llama, Arch::Qwen3] {
        let (q, _) = quantised_pair(arch, 5);
        let dec = Decoder::new(&q).unwrap().unwrap();
        let (a, b) = ([3u32, 14, 15, 9, 2, 6, 5], [7u32, 1, 8, 2, 8]);
        let (one_a, one_b) = (step_by_step(&dec, &a), step_by_step(&dec, &b));
        for par in [false, true] {
            let mut slots = vec![Slot::default(), Slot::default()];
            for s in &mut slots {
                s.reserve(Shape::of(dec.config()), 8);
            }
            let rows: Vec<Row> = a.iter().enumerate().map(|(pos, &token)| Row { slot: 0, pos, token }).chain(b.iter().enumerate().map(|(pos, &token)| Row { slot: 1, pos, token })).collect();
            let want: Vec<usize> = (0..rows.len()).collect();
            let mut s = Scratch::default();
            if par {
                rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap().install(|| Team::run(|team| dec.forward(&mut slots, &rows, &want, &mut s, Some(team)))).unwrap();
            } else {
                dec.forward(&mut slots, &rows, &want, &mut s, None).unwrap();
            }
            let v = dec.config().vocab_size;
            for (i, expect) in one_a.iter().chain(&one_b).enumerate() {
                assert_eq!(&s.logits[i * v..(i + 1) * v], &expect[..], "{arch:?} par={par}: row {i}");
            }
        }
    }
}

/// More samples than slots, rows stopping early, prompts of different lengths: every sample
/// gets its full length or its stop, and each request's samples are bit for bit those it gets
/// alone (per-sample random streams, per-row arithmetic).
#[test]
fn continuous_batching_matches_one_request_at_a_time() {
    let (q, _) = quantised_pair(Arch::Qwen2, 7);
    let s = LocalSampler::new(Arc::new(q), None);
    assert!(s.hand_written());
    let requests: Vec<SampleRequest> = (0..5u32)
        .map(|i| SampleRequest { prompt: (0..3 + 2 * i).map(|t| (t * 7 + i) % 50).collect(), num_samples: 9, seed: Some(u64::from(i)), greedy: false })
        .collect();
    // A stop token that some samples draw early, so that slots free up mid-batch.
    let params = SamplingParams { max_tokens: 12, temperature: 1.0, stop: vec![Stop::Token(4), Stop::Token(11)], ..Default::default() };
    let all = s.sample_batch(&requests, &params).unwrap();
    let mut stopped = 0;
    for (r, seqs) in requests.iter().zip(&all) {
        let alone = s.sample_batch(std::slice::from_ref(r), &params).unwrap().remove(0);
        assert_eq!(seqs, &alone, "prompt {:?}", r.prompt);
        for seq in seqs {
            match seq.stop_reason {
                StopReason::Stop => {
                    stopped += 1;
                    assert!(matches!(seq.tokens.last(), Some(4 | 11)));
                }
                StopReason::Length => assert_eq!(seq.tokens.len(), 12),
            }
            assert_eq!(seq.logprobs.len(), seq.tokens.len());
        }
    }
    assert!(stopped > 5, "some samples stop early ({stopped})");
    // Greedy decoding reports the model's own log-probabilities, which are ≤ 0.
    let greedy = s.sample(&requests[0].prompt, 2, &SamplingParams { max_tokens: 6, temperature: 0.0, ..Default::default() }).unwrap();
    assert_eq!(greedy[0], greedy[1]);
    assert!(greedy[0].logprobs.iter().all(|&l| l <= 0.0));
}

/// Prompts that share their first 12 tokens (the stem, prefilled once for the call), one prompt
/// asked twice (sampled, then greedily: one prefill), more samples than slots: every request gets
/// bit for bit what it gets alone, and the greedy request what a call at temperature 0 gives.
#[test]
fn shared_beginnings_and_repeated_prompts_decode_as_alone() {
    let (q, _) = quantised_pair(Arch::Qwen3, 11);
    let s = LocalSampler::new(Arc::new(q), None);
    let stem: Vec<u32> = (0..12u32).map(|t| (t * 5 + 3) % 50).collect();
    let prompt = |tail: &[u32]| stem.iter().chain(tail).copied().collect::<Vec<u32>>();
    let req = |prompt: Vec<u32>, n: usize, seed: u64, greedy: bool| SampleRequest { prompt, num_samples: n, seed: Some(seed), greedy };
    let requests = vec![
        req(prompt(&[7, 1]), 6, 1, false),
        req(prompt(&[7, 1]), 1, 1, true),
        req(prompt(&[9]), 5, 2, false),
        req(prompt(&[9, 9, 2, 40, 41, 13]), 7, 3, false),
        req(prompt(&[9]), 1, 2, true),
        req(prompt(&[7, 1]), 0, 4, false),
    ];
    let params = SamplingParams { max_tokens: 10, temperature: 1.0, stop: vec![Stop::Token(4), Stop::Token(11)], ..Default::default() };

    // What the call shares: the stem, and one prompt for the sampled and greedy requests of each.
    let dec = Decoder::new(s.model()).unwrap().unwrap();
    let no_stop = |_: &[u32]| Ok(false);
    let job = batch::Job { requests: &requests, params: &params, seeds: vec![0; requests.len()], stop_tokens: &[], stop_text: &no_stop };
    let shared = Prompts::new(&dec, &job, &batch::items(&requests)).unwrap();
    assert_eq!(shared.stem.as_ref().map(|p| p.len), Some(12));
    assert_eq!(shared.id, vec![0, 0, 2, 3, 2, 0]);
    // One prompt asked alone has nothing to share.
    let alone_job = batch::Job { requests: &requests[..1], ..job };
    assert!(Prompts::new(&dec, &alone_job, &batch::items(&requests[..1])).unwrap().stem.is_none());

    let all = s.sample_batch(&requests, &params).unwrap();
    assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), vec![6, 1, 5, 7, 1, 0]);
    let greedy_params = SamplingParams { temperature: 0.0, ..params.clone() };
    for (r, seqs) in requests.iter().zip(&all) {
        let alone = s.sample_batch(&[SampleRequest { greedy: false, ..r.clone() }], if r.greedy { &greedy_params } else { &params }).unwrap().remove(0);
        assert_eq!(seqs, &alone, "prompt {:?} greedy {}", r.prompt, r.greedy);
    }
    // The sampled requests really sample: their completions differ from the greedy one.
    assert!(all[0].iter().any(|seq| seq.tokens != all[1][0].tokens));
}
