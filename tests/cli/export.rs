//! `rlx export` and `rlx eval` on checkpoints. Tiny random models the tests write (LoRA and full
//! fine-tunes, trained a few steps so adapters are far from zero): transformers loads the
//! exported Hugging Face directory and PEFT the adapter, in a pinned virtualenv, with logits
//! within 1e-4 of rlx's own forward; the GGUF export reads back into rlx with the same logits.
//! A real `rlx run`: export by run directory and step, the model card, every bad input with
//! exit 2 and nothing partial left; `rlx eval` of a checkpoint and of the base, paired by
//! `rlx compare`. SmolLM2 (the quickstart's model): HF and GGUF exports against transformers and
//! llama.cpp (llama-cpp-python), greedy completions compared with rlx's.

// Tests report measured values and skips on stderr by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device, Tensor};
use rlx::backend::local::model::{Arch, Model, ParamBuilder, Tuning, random_weights};
use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions};
use rlx::seam::{AdamParams, Datum, LossFn, LossFnInputs};
use serde_json::{Value, json};

use crate::common::{TestContext, jsonl, python_env, repo};

/// transformers + PEFT on CPU, pinned.
pub(crate) const HF_REQUIREMENTS: &[&str] = &["torch==2.15.0", "transformers==5.23.0", "peft==0.21.2", "safetensors==0.8.0", "numpy==2.4.6"];

pub(crate) fn hf_python() -> Option<PathBuf> {
    python_env("hf", HF_REQUIREMENTS)
}

/// Runs tests/cli/export_ref.py; its JSON output.
pub(crate) fn reference(python: &Path, args: &[&str]) -> Value {
    let script = repo().join("tests/cli/export_ref.py");
    let out = Command::new(python).arg(script).args(args).output().expect("python runs");
    assert!(out.status.success(), "export_ref.py {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A tiny random model of `arch` as an HF directory (character tokenizer, ChatML template).
pub(crate) fn tiny_hf(dir: &Path, arch: Arch) {
    let (tok_json, vocab) = crate::engine::char_tokenizer();
    let mut cfg = crate::trainer::tiny_config(arch);
    cfg.vocab_size = vocab;
    cfg.max_position_embeddings = 2048;
    let tokenizer = tokenizers::Tokenizer::from_bytes(tok_json.to_string().as_bytes()).unwrap();
    let w = random_weights(&cfg, 0.2, 7, DType::F32).unwrap();
    let opts = TrainerOptions { tuning: Tuning::Full, seed: 7, max_tokens_per_microbatch: 4096, ..Default::default() };
    LocalTrainer::from_weights(cfg, w, Some(tokenizer), opts, PathBuf::from("random")).unwrap().export_merged(dir).unwrap();
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": chatml, "eos_token": "<|im_end|>"}).to_string()).unwrap();
}

fn pg_datum(tokens: &[u32], adv: f32) -> Datum {
    let n = tokens.len() - 1;
    Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: None, logprobs: Some(vec![-3.0; n]), advantages: Some(vec![adv; n]) },
    }
}

/// A trainer on the model at `base`, trained `steps` steps with learning rate `lr` so that its
/// parameters (adapters) are far from where they started, and saved to `state`.
pub(crate) fn trained(base: &Path, tuning: Tuning, steps: usize, lr: f64, tokens: &[u32], state: &Path) -> LocalTrainer {
    let loaded = rlx::backend::local::load(base).unwrap();
    let opts = TrainerOptions { tuning, seed: 3, max_tokens_per_microbatch: 4096, ..Default::default() };
    let mut tr = LocalTrainer::new(loaded, opts).unwrap();
    let adam = AdamParams { learning_rate: lr, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 0.0 };
    for i in 0..steps {
        tr.forward_backward(&[pg_datum(tokens, if i % 2 == 0 { 1.0 } else { 0.5 })], &LossFn::ImportanceSampling).unwrap();
        tr.optim_step(&adam).unwrap();
    }
    std::fs::create_dir_all(state).unwrap();
    tr.save_state(state).unwrap();
    tr
}

/// rlx's own forward (adapters unmerged): logits `[tokens, vocab]`.
pub(crate) fn rlx_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let t = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&t, 0, None).unwrap().squeeze(0).unwrap().to_dtype(DType::F32).unwrap().to_vec2().unwrap()
}

fn max_diff(ours: &[Vec<f32>], theirs: &Value) -> f64 {
    let theirs: Vec<Vec<f64>> = serde_json::from_value(theirs.clone()).unwrap();
    assert_eq!(ours.len(), theirs.len());
    ours.iter().flatten().zip(theirs.iter().flatten()).map(|(a, b)| (f64::from(*a) - b).abs()).fold(0.0, f64::max)
}

const TOKENS: [u32; 10] = [3, 40, 41, 72, 8, 33, 60, 61, 12, 5];

#[test]
fn hf_exports_load_in_transformers_and_peft_with_rlx_logits() {
    let Some(python) = hf_python() else { return };
    let cx = TestContext::new();
    for (arch, lora) in [(Arch::Qwen3, true), (Arch::Llama, false), (Arch::Qwen2, true)] {
        let tag = format!("{arch:?}").to_lowercase();
        let base = cx.path().join(format!("base-{tag}"));
        tiny_hf(&base, arch);
        let tuning = if lora { Tuning::Lora(LoraConfig::all_linear(4)) } else { Tuning::Full };
        let state = cx.path().join(format!("ck-{tag}/step-000003"));
        let tr = trained(&base, tuning, 4, 0.05, &TOKENS, &state);
        let ours = rlx_logits(tr.model(), &TOKENS);
        let out = format!("hf-{tag}");
        let r = cx.run(&["export", state.to_str().unwrap(), "--out", &out]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md", "rlx_export.json"] {
            assert!(cx.path().join(&out).join(f).is_file(), "{arch:?}: no {f} in {:?}", std::fs::read_dir(cx.path().join(&out)).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>());
        }
        let tokens = serde_json::to_string(&TOKENS).unwrap();
        let d = max_diff(&ours, &reference(&python, &["hf", cx.path().join(&out).to_str().unwrap(), &tokens]));
        eprintln!("{arch:?} {}: transformers vs rlx max |Δlogit| = {d:.2e}", if lora { "LoRA" } else { "full" });
        assert!(d < 1e-4, "{arch:?}: transformers' logits differ from rlx's by {d}");
        // The export moved: the trained model is not the base.
        let base_logits = reference(&python, &["hf", base.to_str().unwrap(), &tokens]);
        assert!(max_diff(&ours, &base_logits) > 1e-2, "{arch:?}: training left the logits unchanged; the test would prove nothing");
        if lora {
            let adapter = format!("adapter-{tag}");
            let r = cx.run(&["export", state.to_str().unwrap(), "--adapter-only", "--out", &adapter]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            let cfg: Value = serde_json::from_slice(&std::fs::read(cx.path().join(&adapter).join("adapter_config.json")).unwrap()).unwrap();
            assert_eq!((cfg["r"].as_u64(), cfg["lora_alpha"].as_u64(), cfg["peft_type"].as_str()), (Some(4), Some(8), Some("LORA")));
            let d = max_diff(&ours, &reference(&python, &["peft", base.to_str().unwrap(), cx.path().join(&adapter).to_str().unwrap(), &tokens]));
            eprintln!("{arch:?} LoRA: PEFT vs rlx max |Δlogit| = {d:.2e}");
            assert!(d < 1e-4, "{arch:?}: PEFT's logits differ from rlx's by {d}");
        }
    }
}

/// GGUF from an HF base, f32 and Q8_0: rlx's own GGUF loader reads the file back into the same
/// function (f32 within 1e-4; Q8_0 within its rounding).
#[test]
fn gguf_exports_read_back_with_the_same_logits() {
    let cx = TestContext::new();
    for arch in [Arch::Llama, Arch::Qwen3] {
        let tag = format!("{arch:?}").to_lowercase();
        let base = cx.path().join(format!("base-{tag}"));
        tiny_hf(&base, arch);
        let state = cx.path().join(format!("ck-{tag}/step-000002"));
        let tr = trained(&base, Tuning::Lora(LoraConfig::all_linear(4)), 3, 0.05, &TOKENS, &state);
        let ours = rlx_logits(tr.model(), &TOKENS);
        for (dtype, tol) in [("f32", 1e-4), ("q8_0", 0.1)] {
            let out = cx.path().join(format!("gguf-{tag}-{dtype}"));
            let r = cx.run(&["export", state.to_str().unwrap(), "--format", "gguf", "--dtype", dtype, "--out", out.to_str().unwrap()]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            let file = out.join(format!("model-{dtype}.gguf"));
            let loaded = rlx::backend::local::load(&file).unwrap();
            assert_eq!(loaded.config.num_hidden_layers, 2);
            let pb = ParamBuilder::new(&loaded.weights, &Tuning::Frozen, &file, 0);
            let again = rlx_logits(&Model::new(&loaded.config, &pb).unwrap(), &TOKENS);
            let d = again.iter().flatten().zip(ours.iter().flatten()).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max);
            eprintln!("{arch:?} GGUF {dtype}: read back vs rlx max |Δlogit| = {d:.2e}");
            assert!(d < tol, "{arch:?} {dtype}: the GGUF reads back {d} away");
        }
    }
}

fn lora_spec(max_steps: u32) -> String {
    crate::engine::spec_with(max_steps, 1, "").replace("finetune: full", "finetune: lora, lora: {rank: 2}")
}

fn only_child(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    v.sort();
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

#[test]
fn a_run_exports_by_step_with_a_card_and_bad_input_exits_2() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &lora_spec(2));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let run = only_child(&cx.path().join("runs"));
    let run_s = run.to_str().unwrap();
    let prov: Value = serde_json::from_slice(&std::fs::read(run.join("provenance.json")).unwrap()).unwrap();

    let r = cx.run(&["export", run_s, "--out", "exported"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let meta: Value = serde_json::from_slice(&std::fs::read(cx.path().join("exported/rlx_export.json")).unwrap()).unwrap();
    assert_eq!(meta["run_id"], prov["run_id"]);
    assert_eq!(meta["spec_hash"], prov["spec_hash"]);
    assert_eq!((meta["checkpoint"].as_str(), meta["step"].as_u64()), (Some("step-000001"), Some(1)), "{meta}");
    let evals: Vec<i64> = meta["evals"].as_array().unwrap().iter().map(|e| e["step"].as_i64().unwrap()).collect();
    assert_eq!(evals, vec![-1, 1], "the baseline and the eval at the checkpoint's step");
    let card = std::fs::read_to_string(cx.path().join("exported/README.md")).unwrap();
    assert!(card.contains(prov["run_id"].as_str().unwrap()) && card.contains(prov["spec_hash"].as_str().unwrap()) && card.contains("eval/pass@1"), "{card}");
    assert!(card.starts_with("---\nbase_model: "), "{card}");

    let r = cx.run(&["export", &format!("{run_s}@0"), "--out", "at0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let meta0: Value = serde_json::from_slice(&std::fs::read(cx.path().join("at0/rlx_export.json")).unwrap()).unwrap();
    assert_eq!(meta0["step"], 0);
    let w1 = std::fs::read(cx.path().join("exported/model.safetensors")).unwrap();
    let w0 = std::fs::read(cx.path().join("at0/model.safetensors")).unwrap();
    assert_eq!(w1.len(), w0.len());

    // `@best`: the checkpointed step whose eval scored highest. Only step 1 has both an eval and
    // a checkpoint; an eval of step 0 scoring above it (appended to the run's metrics) moves it.
    let step_of = |out: &str| -> Value { serde_json::from_slice::<Value>(&std::fs::read(cx.path().join(out).join("rlx_export.json")).unwrap()).unwrap()["step"].clone() };
    let r = cx.run(&["export", &format!("{run_s}@best"), "--out", "best"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(step_of("best"), 1);
    let at1 = jsonl(&run.join("metrics.jsonl")).into_iter().find(|l| l["step"] == 1 && l.get("eval/pass@1").is_some()).unwrap()["eval/pass@1"].as_f64().unwrap();
    let mut metrics = std::fs::OpenOptions::new().append(true).open(run.join("metrics.jsonl")).unwrap();
    std::io::Write::write_all(&mut metrics, format!("{}\n", json!({"step": 0, "eval/pass@1": at1 + 0.25})).as_bytes()).unwrap();
    let r = cx.run(&["export", &format!("{run_s}@best"), "--out", "best0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(step_of("best0"), 0);
    let r = cx.run(&["export", &format!("{run_s}@worst"), "--out", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`@worst` is not a step") && r.stderr.contains("@best"), "{}", r.stderr);

    // Bad input: exit 2, a message naming what is wrong, nothing written.
    let r = cx.run(&["export", &format!("{run_s}@7"), "--out", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("has no checkpoint at step `7`") && r.stderr.contains("steps 0, 1"), "{}", r.stderr);
    let r = cx.run(&["export", run_s, "--out", "exported"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not an empty directory"), "{}", r.stderr);
    assert_eq!(std::fs::read(cx.path().join("exported/model.safetensors")).unwrap(), w1, "the existing export is untouched");
    let r = cx.run(&["export", "tiny", "--out", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("neither a run directory"), "{}", r.stderr);
    let r = cx.run(&["export", run_s, "--format", "gguf", "--adapter-only", "--out", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = cx.run(&["export", run_s, "--dtype", "q8_0", "--out", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!cx.path().join("nope").exists());

    // Evaluate the checkpoint and the base under the run's protocol, greedily, then pair them.
    let r = cx.run(&["eval", &format!("{run_s}@1"), "eval.samples=1", "eval.temperature=0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = cx.run(&["eval", &format!("{run_s}@base"), "eval.samples=1", "eval.temperature=0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut evals: Vec<PathBuf> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| e.path()).filter(|p| *p != run).collect();
    evals.sort();
    assert_eq!(evals.len(), 2);
    let model_paths: Vec<Value> = evals.iter().map(|d| {
        let resolved: Value = serde_json::from_slice(&std::fs::read(d.join("resolved.json")).unwrap()).unwrap();
        resolved["backend"]["model_path"].clone()
    }).collect();
    let ck = run.join("checkpoints/step-000001");
    assert!(model_paths.contains(&json!(ck.display().to_string())) && model_paths.contains(&Value::Null), "{model_paths:?}");
    for d in &evals {
        assert_eq!(jsonl(&d.join("eval_results.jsonl")).len(), 2, "two eval problems");
        // An eval run has no checkpoint of its own to export.
        let r = cx.run(&["export", d.to_str().unwrap(), "--out", "nope"]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains("has no checkpoint"), "{}", r.stderr);
    }
    let r = cx.run(&["compare", evals[0].to_str().unwrap(), evals[1].to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("model_path"), "{}", r.stdout);
    let r = cx.run(&["eval", &format!("{run_s}@9")]);
    assert_eq!(r.code, 2, "{}", r.stderr);

    // Nothing partial anywhere.
    for e in std::fs::read_dir(cx.path()).unwrap().flatten() {
        assert!(!e.file_name().to_string_lossy().contains("rlx-partial"), "left behind: {:?}", e.path());
    }
}

#[test]
fn a_full_fine_tune_has_no_adapter_to_export() {
    let cx = TestContext::new();
    let base = cx.path().join("base");
    tiny_hf(&base, Arch::Qwen3);
    let state = cx.path().join("ck/step-000001");
    trained(&base, Tuning::Full, 1, 0.01, &TOKENS, &state);
    let r = cx.run(&["export", state.to_str().unwrap(), "--adapter-only", "--out", "a"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("full fine-tune"), "{}", r.stderr);
    assert!(!cx.path().join("a").exists());
}

/// The quickstart's first `n` evaluation prompts, as `rlx render` shows them (chat template
/// applied), so the comparison runs on exactly what an evaluation sends.
fn quickstart_eval_prompts(n: usize) -> Vec<String> {
    let cx = TestContext::new();
    let spec = repo().join("experiments/quickstart.yaml");
    let r = cx.run(&["render", spec.to_str().unwrap(), "--eval", "--n", &n.to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut prompts = vec![];
    let mut current: Option<Vec<&str>> = None;
    for line in r.stdout.lines() {
        if line.starts_with("──") {
            if let Some(lines) = current.take() {
                prompts.push(lines.join("\n"));
            }
            if line.starts_with("── problem") {
                current = Some(vec![]);
            }
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    assert_eq!(prompts.len(), n, "{}", r.stdout);
    prompts
}

/// SmolLM2 (the quickstart's model, a Q4_1 GGUF) with a trained LoRA adapter: the HF export in
/// transformers (logits, tokenizer, chat template), and the GGUF export in llama.cpp, whose greedy
/// completions of the quickstart's eval prompts equal rlx's (f32; Q8_0's agreement reported).
#[test]
fn smollm2_exports_match_transformers_and_llama_cpp() {
    let gguf = match crate::trainer_smollm2::fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED smollm2_exports_match_transformers_and_llama_cpp: {why}");
            return;
        }
    };
    let cx = TestContext::new();
    let loaded = rlx::backend::local::load(&gguf).unwrap();
    let tok = loaded.tokenizer.clone().unwrap();
    let prompts = quickstart_eval_prompts(4);
    let ids: Vec<Vec<u32>> = prompts.iter().map(|p| tok.encode(p.as_str(), false).unwrap().get_ids().to_vec()).collect();
    let state = cx.path().join("ck/step-000001");
    let mut tr = trained(&gguf, Tuning::Lora(LoraConfig::all_linear(8)), 2, 2e-3, &ids[0][..40], &state);
    let sampler = tr.sampler().unwrap();
    let stop: Vec<rlx::seam::Stop> = loaded.config.eos_token_ids.iter().map(|&t| rlx::seam::Stop::Token(t)).collect();
    let params = rlx::seam::SamplingParams { max_tokens: 48, temperature: 0.0, stop, seed: Some(0), ..Default::default() };
    let ours: Vec<Vec<u32>> = ids
        .iter()
        .map(|p| {
            let mut t = sampler.sample(p, 1, &params).unwrap().remove(0).tokens;
            if t.last().is_some_and(|x| loaded.config.eos_token_ids.contains(x)) {
                t.pop();
            }
            t
        })
        .collect();

    if let Some(python) = hf_python() {
        let r = cx.run(&["export", state.to_str().unwrap(), "--out", "hf"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let hf = cx.path().join("hf");
        let short = serde_json::to_string(&ids[1][..32]).unwrap();
        let d = max_diff(&rlx_logits(tr.model(), &ids[1][..32]), &reference(&python, &["hf", hf.to_str().unwrap(), &short]));
        eprintln!("SmolLM2 LoRA: transformers vs rlx max |Δlogit| = {d:.2e} over 32 tokens × 49152");
        assert!(d < 1e-3, "transformers' logits differ from rlx's by {d}");
        let t = reference(&python, &["tok", hf.to_str().unwrap(), "Write a function `half(n)`.\n  def f(): return 12345"]);
        let want = tok.encode("Write a function `half(n)`.\n  def f(): return 12345", false).unwrap().get_ids().to_vec();
        assert_eq!(serde_json::from_value::<Vec<u32>>(t["ids"].clone()).unwrap(), want, "AutoTokenizer on the export tokenizes as rlx does");
        assert!(t["chat"].as_str().unwrap().ends_with("<|im_start|>assistant\n"), "{t}");
    }

    let Some(llama) = python_env("llama-cpp", crate::llama_cpp::LLAMA_CPP_PYTHON) else { return };
    let prompt_json = serde_json::to_string(&ids).unwrap();
    for dtype in ["f32", "q8_0"] {
        let out = cx.path().join(format!("gguf-{dtype}"));
        let r = cx.run(&["export", state.to_str().unwrap(), "--format", "gguf", "--dtype", dtype, "--out", out.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let file = out.join(format!("model-{dtype}.gguf"));
        let theirs: Vec<Vec<u32>> = serde_json::from_value(reference(&llama, &["gguf", file.to_str().unwrap(), &prompt_json, "48"])).unwrap();
        let same = ours.iter().zip(&theirs).filter(|(a, b)| a == b).count();
        let prefix: Vec<usize> = ours.iter().zip(&theirs).map(|(a, b)| a.iter().zip(b).take_while(|(x, y)| x == y).count()).collect();
        eprintln!("SmolLM2 GGUF {dtype}: llama.cpp's greedy completions equal rlx's on {same}/{} prompts (common prefixes {prefix:?} of {:?} tokens)", ours.len(), ours.iter().map(Vec::len).collect::<Vec<_>>());
        for (o, t) in ours.iter().zip(&theirs) {
            eprintln!("  rlx:   {:?}\n  llama: {:?}", tok.decode(o, false).unwrap(), tok.decode(t, false).unwrap());
        }
        if dtype == "f32" {
            assert_eq!(same, ours.len(), "llama.cpp's f32 greedy completions differ from rlx's");
        }
    }
}

#[test]
fn a_local_model_path_must_be_a_checkpoint_of_an_eval_only_run() {
    let cx = TestContext::new();
    cx.write("spec.yaml", &crate::common::MINIMAL.replace("backend: {kind: local}", "backend: {kind: local, model_path: ck}"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("checkpoint `ck` does not exist") && r.stderr.contains("`schedule.max_steps` is 3"), "{}", r.stderr);
    std::fs::create_dir(cx.path().join("ck")).unwrap();
    let r = cx.run(&["validate", "spec.yaml", "schedule.max_steps=0"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("has no `state.json`"), "{}", r.stderr);
}
