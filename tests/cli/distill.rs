//! On-policy distillation (`grpo.distill`) on the tiny random models: the teacher's
//! log-probabilities the trainer computes are the teacher's own (against its sampler's
//! `prompt_logprobs`, another code path); a student distilled from another random model with the
//! same tokenizer moves toward it (`train/teacher_kl` falls); a teacher equal to the student
//! adds nothing; a teacher with another tokenizer is a located error at validate; a run killed
//! inside distillation resumes with every step once.

use std::path::Path;

use rlx::backend::local::{LocalTrainer, TrainerOptions, load};
use rlx::seam::SamplingParams;

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
fn the_trainer_scores_the_teacher_at_temperature_1_as_the_teachers_sampler_does() {
    let cx = TestContext::new();
    let (student_dir, teacher_dir) = (cx.path().join("tiny"), cx.path().join("teacher"));
    tiny_model(&student_dir);
    tiny_model_seeded(&teacher_dir, 11);
    // The student scores its own tokens at 0.7; the teacher must still be scored at 1.
    let opts = TrainerOptions { temperature: 0.7, ..Default::default() };
    let mut student = LocalTrainer::new(load(&student_dir).unwrap(), opts).unwrap();
    let mut teacher = LocalTrainer::new(load(&teacher_dir).unwrap(), TrainerOptions::default()).unwrap();
    let prompt = [4u32, 5, 6, 7];
    let seq = student.sampler().unwrap().sample(&prompt, 1, &SamplingParams { max_tokens: 10, seed: Some(3), ..Default::default() }).unwrap().remove(0);
    let tokens = [&prompt[..], &seq.tokens].concat();
    let d = rlx::seam::make_datum(&tokens, &seq.logprobs, prompt.len(), 1.0);
    let scored = student.teacher_logprobs(&teacher_dir, std::slice::from_ref(&d)).unwrap().remove(0);
    let own = teacher.sampler().unwrap().prompt_logprobs(&tokens).unwrap();
    let policy = student.forward(&[d]).unwrap().remove(0).logprobs;
    let mut differs = 0;
    for i in 0..seq.tokens.len() {
        let t = prompt.len() - 1 + i;
        assert!((scored[t] - own[t + 1]).abs() < 1e-4, "token {i}: trainer {} against the teacher's sampler {}", scored[t], own[t + 1]);
        differs += usize::from((scored[t] - policy[t]).abs() > 1e-3);
    }
    assert!(differs > 0, "the teacher is another model: its scores must differ from the student's");
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
    // A missing teacher, and a teacher that is not on this machine.
    for (teacher, want) in [("./nowhere", "is not a model directory (no `config.json`)"), ("owner/teacher", "is not a model directory on this machine")] {
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
