//! Run-health signals (docs/diagnostics.md): each driven by a run of the engine with a scripted
//! sampler (what the completions are, step by step) and a recording trainer (what the loss,
//! gradient norm and sampler/learner divergence are), graded by the real local sandbox. Each test
//! asserts the `events.jsonl` event and the warning line the console prints; `action: stop` ends
//! the run failed with a checkpoint, and the run resumes from it.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rlx::backend::Policy;
use rlx::engine::{self, PolicySource};
use rlx::seam::{LossStats, StopReason};
use serde_json::Value;

use crate::common::{TestContext, jsonl, repo, sandbox_server};
use crate::fakes::{Problems, Recorder, Reported, Scripted};

/// What a scripted completion is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// The reference solution.
    Right,
    /// Code that defines the wrong function.
    Wrong,
    /// Prose, no code block.
    NoCode,
    /// Code that never ends.
    Loop,
    /// Wrong code, cut off by `max_tokens`.
    Truncated,
    /// Wrong code that the fault-injecting proxy below answers with HTTP 503.
    InfraFail,
    /// A one-line wrong answer (a completion-length collapse).
    Short,
}

/// Decides each completion from (training step, is-eval, problem index, sample index).
type Script = dyn Fn(usize, bool, usize, usize) -> Answer + Send + Sync;

/// A sampler answering `script`, or `greedy` for a greedy eval when given, with each token's
/// log-probability `logprob(step)`, on the training file's problems, then the eval file's.
fn scripted_with(cx: &TestContext, script: Box<Script>, greedy: Option<Box<Script>>, logprob: fn(usize) -> f32) -> Arc<Scripted> {
    let sampler = Scripted::new(cx, true, move |p, c| {
        let script = match &greedy {
            Some(g) if c.greedy => g,
            _ => &script,
        };
        completion(p, c.problem, script(c.step, c.eval, c.problem, c.sample))
    });
    Arc::new(sampler.logprob(logprob))
}

fn scripted(cx: &TestContext, script: Box<Script>) -> Arc<Scripted> {
    scripted_with(cx, script, None, |_| -0.5)
}

fn completion(p: &Problems, i: usize, answer: Answer) -> (String, StopReason) {
    match answer {
        Answer::Right => (format!("```python\n{}\n```", p.rows[i].solution), StopReason::Stop),
        Answer::Wrong => ("```python\ndef nothing():\n    return None\n```".into(), StopReason::Stop),
        Answer::NoCode => ("I would write a function.".into(), StopReason::Stop),
        Answer::Loop => ("```python\nwhile True:\n    pass\n```".into(), StopReason::Stop),
        Answer::Truncated => ("```python\ndef nothing():\n    return None\n```".into(), StopReason::Length),
        Answer::InfraFail => ("```python\n# INFRA-FAIL\ndef nothing():\n    return None\n```".into(), StopReason::Stop),
        Answer::Short => ("```python\n1\n```".into(), StopReason::Stop),
    }
}

/// The loss, gradient norm, sampler/learner divergence and mean importance ratio of the `n`th
/// optimizer step.
type Numbers = dyn Fn(usize) -> (f64, f64, f64, f64) + Send + Sync;

/// A remote trainer that trains nothing and reports `numbers`: one ratio for every token
/// (outside PPO's [0.8, 1.2] all of them clip), and no gradient norm where it is negative.
fn recorder(sampler: Arc<Scripted>, numbers: Box<Numbers>) -> Arc<Recorder> {
    Arc::new(Recorder::new(sampler).remote().numbers(move |n| {
        let (loss, grad_norm, kl, ratio) = numbers(n);
        let clip_fraction = if (0.8..=1.2).contains(&ratio) { 0.0 } else { 1.0 };
        let stats = LossStats { tokens: 10, ratio_mean: ratio, ratio_max: ratio, kl_sample_train: kl, clip_fraction, ..LossStats::default() };
        Reported { loss, stats, grad_norm: (grad_norm >= 0.0).then_some(grad_norm) }
    }))
}

/// The numbers of a calm run: loss 1, gradient norm 1, no divergence, ratio 1.
fn calm(_: usize) -> (f64, f64, f64, f64) {
    (1.0, 1.0, 0.0, 1.0)
}

/// A plan of `steps` steps, 2 of 4 training problems × 2 samples, with `diagnostics`, and
/// `extra` YAML lines replacing the base spec's sections of the same name.
fn plan(cx: &TestContext, steps: u32, diagnostics: &str, extra: &str) -> rlx::plan::Plan {
    if !cx.path().join("tiny").exists() {
        crate::engine::tiny_model(&cx.path().join("tiny"));
    }
    let data = repo().join("experiments/data");
    let spec = format!(
        "name: health
seed: 5
model: {{base: ./tiny}}
backend: {{kind: local}}
data:
  train: [{{path: {train}, format: mbpp, limit: 4}}]
  eval: [{{path: {eval}, format: mbpp, limit: 2}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: 2, group_size: 2}}
reward: {{test_timeout_s: 1}}
sandbox: {{kind: local, strict: false}}
log: {{root: {root}, rollouts: all}}
schedule: {{max_steps: {steps}, eval_every: 0, save_every: 0, eval_at_start: false}}
diagnostics: {{{diagnostics}}}",
        train = data.join("easy_python_train.jsonl").display(),
        eval = data.join("easy_python_eval.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
        root = cx.path().join("runs").display(),
    );
    // `extra`'s sections replace the base spec's.
    let key = |l: &str| l.split(':').next().unwrap_or_default().to_owned();
    // (An indented line, `  eval: ...`, replaces the line of the same indentation and key.)
    let mut lines: Vec<String> = spec.lines().map(str::to_owned).collect();
    for e in extra.lines().filter(|l| !l.is_empty()) {
        match lines.iter().position(|l| key(l) == key(e)) {
            Some(i) => lines[i] = e.to_owned(),
            None => lines.push(e.to_owned()),
        }
    }
    let path = cx.write("spec.yaml", &lines.join("\n"));
    rlx::plan::plan(&path, &[]).unwrap()
}

/// What a run left: its outcome, the warning lines, the diagnostic events.
struct Ran {
    outcome: Result<engine::RunOutcome, engine::Error>,
    warnings: Vec<String>,
    diagnostics: Vec<Value>,
    dir: std::path::PathBuf,
}

impl Ran {
    /// The one event of `signal`, and the warning line that names it.
    fn fired(&self, signal: &str) -> (&Value, &String) {
        let events: Vec<&Value> = self.diagnostics.iter().filter(|e| e["signal"] == signal).collect();
        assert_eq!(events.len(), 1, "{signal} fired once: {:#?}", self.diagnostics);
        let line = self.warnings.iter().find(|w| w.contains(&format!(": {signal}"))).unwrap_or_else(|| panic!("no warning line for {signal}: {:#?}", self.warnings));
        assert!(line.contains("remedy: "), "{line}");
        (events[0], line)
    }

    fn not_fired(&self, signal: &str) {
        assert!(self.diagnostics.iter().all(|e| e["signal"] != signal), "{signal} fired: {:#?}", self.diagnostics);
    }
}

async fn run(cx: &TestContext, plan: &rlx::plan::Plan, script: Box<Script>, numbers: Box<Numbers>) -> Ran {
    run_on(plan, recorder(scripted(cx, script), numbers)).await
}

async fn run_on(plan: &rlx::plan::Plan, trainer: Arc<Recorder>) -> Ran {
    let warnings = Arc::new(Mutex::new(vec![]));
    let sink = {
        let warnings = warnings.clone();
        move |e: engine::Event| {
            if let engine::Event::Warning(w) = e {
                warnings.lock().unwrap().push(w);
            }
        }
    };
    let outcome = engine::run(plan, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &sink).await;
    let dir = plan.log.root.join(&plan.run_id);
    let diagnostics = jsonl(&dir.join("events.jsonl")).into_iter().filter(|e| e["event"] == "diagnostic").collect();
    let warnings = warnings.lock().unwrap().clone();
    Ran { outcome, warnings, diagnostics, dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reward_flat_at_zero_and_degenerate_groups_fire_and_a_stop_resumes() {
    let cx = TestContext::new();
    let p = plan(&cx, 5, "reward_flat_zero: {steps: 3, action: stop}, groups_degenerate: {steps: 2}", "");
    let sampler = scripted(&cx, Box::new(|_, _, _, _| Answer::Wrong));
    let trainer = recorder(sampler, Box::new(calm));
    let ran = run_on(&p, trainer.clone()).await;
    let (e, line) = ran.fired("groups_degenerate");
    assert_eq!(e["step"], 1, "two degenerate steps: 0 and 1");
    assert!(line.starts_with("diagnostic step 1: groups_degenerate: every group degenerate"), "{line}");
    let (e, line) = ran.fired("reward_flat_zero");
    assert_eq!((e["step"].as_i64(), e["action"].as_str()), (Some(2), Some("stop")));
    assert!(e["evidence"].as_str().unwrap().contains("no completion passed for 3 steps (steps 0–2)"), "{e}");
    assert!(e["remedy"].as_str().unwrap().contains("filter easier problems"), "{e}");
    assert!(line.contains("(diagnostics action: stop)"), "{line}");
    // Failed, with a checkpoint of the last step, and resumable.
    let err = ran.outcome.expect_err("the stop action fails the run");
    assert!(err.to_string().contains("stopped by the diagnostic `reward_flat_zero` at step 2"), "{err}");
    assert!(err.is_user_error());
    let status: Value = serde_json::from_slice(&std::fs::read(ran.dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_u64()), (Some("failed"), Some(3)));
    let cks = jsonl(&ran.dir.join("checkpoints.jsonl"));
    assert_eq!(cks.last().unwrap()["step"], 2, "{cks:?}");
    // Resumed with the stop turned off (as `rlx run --resume` with an override would), the run
    // continues at step 3; the signal's episode goes on, so it does not fire again.
    let p2 = plan(&cx, 5, "reward_flat_zero: {steps: 3, action: warn}, groups_degenerate: {steps: 2}", "");
    assert_eq!(p2.run_id, p.run_id, "diagnostics are not part of the run id");
    let again = run_on(&p2, trainer).await;
    assert_eq!(again.outcome.unwrap(), engine::RunOutcome::Finished { steps: 5 });
    let steps: Vec<i64> = jsonl(&ran.dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0, 1, 2, 3, 4]);
    assert_eq!(again.diagnostics.iter().filter(|e| e["signal"] == "reward_flat_zero").count(), 1, "{:#?}", again.diagnostics);
    // `rlx doctor` replays the same signals over the run directory, with the smoke test.
    let r = cx.run(&["doctor", ran.dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("(finished, 5 of 5 steps)"), "{}", r.stdout);
    assert!(r.stdout.contains("Smoke test: the reference's expectations for its first 50 steps, scaled to 5 steps"), "{}", r.stdout);
    assert!(r.stdout.contains("NO   steps 0–1    (ref. 5–15 )  train reward trends upward"), "flat at zero is no upward trend: {}", r.stdout);
    assert!(r.stdout.contains("step 1: groups_degenerate: every group degenerate"), "{}", r.stdout);
    assert!(r.stdout.contains("step 2: reward_flat_zero (diagnostics action: stop): no completion passed for 3 steps (steps 0–2)"), "{}", r.stdout);
    assert!(r.stdout.contains("(2 recorded in events.jsonl while the run went)"), "{}", r.stdout);
    let bad = cx.run(&["doctor", cx.path().to_str().unwrap()]);
    assert_eq!(bad.code, 2, "not a run directory: {}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degenerate_groups_fire_when_they_are_trained_too() {
    // `skip_degenerate: false`: the all-wrong groups are trained (with zero advantages) rather
    // than skipped, and the signal still sees them.
    let cx = TestContext::new();
    let p = plan(&cx, 3, "reward_flat_zero: {steps: 9}, groups_degenerate: {steps: 2}", "grpo: {prompts_per_step: 2, group_size: 2, skip_degenerate: false}");
    let ran = run(&cx, &p, Box::new(|_, _, _, _| Answer::Wrong), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let metrics = jsonl(&ran.dir.join("metrics.jsonl"));
    assert_eq!((metrics[0]["train/groups_skipped"].as_f64(), metrics[0]["train/groups_degenerate"].as_f64()), (Some(0.0), Some(2.0)), "{}", metrics[0]);
    let (e, line) = ran.fired("groups_degenerate");
    assert_eq!(e["step"], 1);
    assert!(line.contains("every group degenerate (all rewards equal, so every advantage zero) for 2 steps"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reward_flat_at_one_fires_and_off_silences_it() {
    let cx = TestContext::new();
    let ran = run(&cx, &plan(&cx, 3, "reward_flat_one: {steps: 2}, groups_degenerate: {steps: 9}", ""), Box::new(|_, _, _, _| Answer::Right), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("reward_flat_one");
    assert_eq!(e["step"], 1);
    assert!(line.contains("every completion passed for 2 steps (steps 0–1)"), "{line}");
    ran.not_fired("reward_flat_zero");
    let cx = TestContext::new();
    let ran = run(&cx, &plan(&cx, 3, "reward_flat_one: {steps: 2, action: off}", ""), Box::new(|_, _, _, _| Answer::Right), Box::new(calm)).await;
    ran.not_fired("reward_flat_one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_falling_format_rate_fires() {
    let cx = TestContext::new();
    // Half right, half wrong (never degenerate) for two steps, then no code at all.
    let script = |step: usize, _: bool, _: usize, k: usize| match (step < 2, k % 2) {
        (true, 0) => Answer::Right,
        (true, _) => Answer::Wrong,
        (false, _) => Answer::NoCode,
    };
    let ran = run(&cx, &plan(&cx, 3, "format_rate_falling: {drop: 0.5}", ""), Box::new(script), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("format_rate_falling");
    assert_eq!(e["step"], 2);
    assert!(line.contains("train/format_rate fell from 100.0% at step 0 to 0.0%"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exploding_loss_and_a_sampler_learner_divergence_fire() {
    let cx = TestContext::new();
    let half = |_: usize, _: bool, _: usize, k: usize| if k.is_multiple_of(2) { Answer::Right } else { Answer::Wrong };
    // The gradient norm jumps 50× at the fifth optimizer step, the mean importance ratio 30× at
    // the eighth (the signal re-arms in between); the divergence is 0.3 nats/token throughout;
    // the loss grows by 10% a step, which is no explosion.
    let numbers = |n: usize| (1.0 + 0.1 * n as f64, if n == 4 { 50.0 } else { 1.0 }, 0.3, if n == 7 { 30.0 } else { 1.0 });
    let ran = run(&cx, &plan(&cx, 8, "window: 3, logprob_divergence: {rate: 0.1}", ""), Box::new(half), Box::new(numbers)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let explosions: Vec<&Value> = ran.diagnostics.iter().filter(|e| e["signal"] == "loss_exploding").collect();
    assert_eq!(explosions.iter().map(|e| e["step"].as_i64().unwrap()).collect::<Vec<_>>(), vec![4, 7], "{explosions:?}");
    assert!(explosions[0]["evidence"].as_str().unwrap().starts_with("optim/grad_norm 50.00 is 50.0× its median over the previous 3 steps"), "{}", explosions[0]);
    assert!(explosions[1]["evidence"].as_str().unwrap().starts_with("train/ratio_mean 30.00 is 30.0× its median"), "{}", explosions[1]);
    let lines: Vec<&String> = ran.warnings.iter().filter(|w| w.contains(": loss_exploding: ")).collect();
    assert_eq!(lines.len(), 2, "{:#?}", ran.warnings);
    let (e, line) = ran.fired("logprob_divergence");
    assert_eq!(e["step"], 2, "the first full window");
    assert!(line.contains("train/kl_sample_train 0.3000 nats/token over the last 3 steps"), "{line}");
}

/// Clipping that dominates fires once a window of steps mostly clipped (the scripted ratio 0.5
/// from the third optimizer step on: every token outside PPO's band).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clipping_that_dominates_fires() {
    let cx = TestContext::new();
    let half = |_: usize, _: bool, _: usize, k: usize| if k.is_multiple_of(2) { Answer::Right } else { Answer::Wrong };
    let numbers = |n: usize| (1.0, 1.0, 0.0, if n >= 2 { 0.5 } else { 1.0 });
    let ran = run(&cx, &plan(&cx, 5, "window: 2", ""), Box::new(half), Box::new(numbers)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("clipping_dominant");
    assert_eq!(e["step"], 3, "the first window of two clipped steps");
    assert!(line.contains("train/clip_fraction 100.0% of action tokens over the last 2 steps (threshold 50.0%)"), "{line}");
    let metrics = jsonl(&ran.dir.join("metrics.jsonl"));
    assert_eq!(metrics[3]["train/clip_fraction"], 1.0);
}

/// A backend that reports no gradient norm (a Tinker-API server may not): the metrics line has
/// none, and `loss_exploding` does not take its absence for an explosion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_gradient_norm_stays_absent_and_fires_nothing() {
    let cx = TestContext::new();
    let half = |_: usize, _: bool, _: usize, k: usize| if k.is_multiple_of(2) { Answer::Right } else { Answer::Wrong };
    let numbers = |_: usize| (1.0, -1.0, 0.0, 1.0);
    let ran = run(&cx, &plan(&cx, 5, "window: 2", ""), Box::new(half), Box::new(numbers)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let metrics = jsonl(&ran.dir.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 5);
    assert!(metrics.iter().all(|m| m.get("optim/grad_norm").is_none() && m["train/loss"].is_number()), "{metrics:?}");
    assert!(ran.diagnostics.iter().all(|e| e["signal"] != "loss_exploding"), "{:?}", ran.diagnostics);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_timeouts_and_truncation_fire() {
    let cx = TestContext::new();
    // One sample in two loops forever; every completion is cut off by max_tokens.
    let script = |_: usize, _: bool, _: usize, k: usize| if k.is_multiple_of(2) { Answer::Loop } else { Answer::Truncated };
    let ran = run(&cx, &plan(&cx, 2, "window: 2, sandbox_timeouts: {rate: 0.3}, truncation: {rate: 0.4}", ""), Box::new(script), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("sandbox_timeouts");
    assert_eq!(e["step"], 0);
    assert!(line.contains("of the step's") && line.contains("tests timed out (threshold 30.0%)"), "{line}");
    let m = &jsonl(&ran.dir.join("metrics.jsonl"))[0];
    assert!(m["sandbox/timeout_rate"].as_f64().unwrap() > 0.3, "{m}");
    let rollouts = jsonl(&ran.dir.join("rollouts.jsonl"));
    assert!(rollouts.iter().any(|r| r["tests"][0]["status"] == "timeout"), "per-test statuses recorded");
    let (e, _) = ran.fired("truncation");
    assert_eq!(e["step"], 1, "the first full window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_reward_rising_while_eval_stays_flat_names_leads() {
    let cx = TestContext::new();
    // Training problems answered right from step 3 on; eval problems never.
    let script = |step: usize, eval: bool, _: usize, k: usize| match (eval, step >= 3, k % 2) {
        (true, _, _) => Answer::Wrong,
        (false, true, _) => Answer::Right,
        (false, false, 0) => Answer::Wrong,
        (false, false, _) => Answer::NoCode,
    };
    let p = plan(&cx, 6, "window: 2, reward_without_eval_gain: {reward_rise: 0.5, eval_gain: 0.05}", "schedule: {max_steps: 6, eval_every: 3, save_every: 0, eval_at_start: true}");
    let ran = run(&cx, &p, Box::new(script), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("reward_without_eval_gain");
    assert_eq!(e["step"], 5, "checked after the eval at the end");
    assert!(line.contains("while eval pass@1 went 0.0% → 0.0% since the baseline"), "{line}");
    let leads: Vec<&str> = e["leads"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(!leads.is_empty() && leads.iter().all(|l| l.starts_with("training problem ") && l.contains("rlx show")), "{leads:?}");
    // The baseline eval and the one after step 2 fired nothing: no rise yet.
    assert_eq!(ran.diagnostics.iter().filter(|e| e["signal"] == "reward_without_eval_gain").count(), 1);
}

/// 8 eval problems, evaluated at the start and after the last of 4 steps: 4 samples at
/// temperature 0.7 (pass@1, pass@4) and greedily.
fn eval_plan(cx: &TestContext, diagnostics: &str) -> rlx::plan::Plan {
    let eval = repo().join("experiments/data/easy_python_eval.jsonl");
    let extra = format!(
        "  eval: [{{path: {}, format: mbpp, limit: 8}}]\nschedule: {{max_steps: 4, eval_every: 4, save_every: 0, eval_at_start: true}}\neval: {{k: [1, 4], samples: 4, temperature: 0.7}}",
        eval.display()
    );
    plan(cx, 4, diagnostics, &extra)
}

/// Training: half right, never degenerate.
fn half(_: usize, _: bool, _: usize, k: usize) -> Answer {
    if k.is_multiple_of(2) { Answer::Right } else { Answer::Wrong }
}

/// What `rlx doctor` says about `dir`.
fn doctor(cx: &TestContext, dir: &std::path::Path) -> String {
    let r = cx.run(&["doctor", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_getting_worse_fires_greedy_below_baseline_and_coverage_collapse_and_doctor_says_so() {
    let cx = TestContext::new();
    // Sampled eval: at the baseline one sample in four right on every problem (pass@1 25%,
    // pass@4 100%); after training every sample right on half the problems and none on the
    // other half (pass@1 50%, pass@4 50%). Greedy: every problem right, then none.
    let sampled = |step: usize, eval: bool, i: usize, k: usize| match (eval, step) {
        (false, _) => half(step, eval, i, k),
        (true, 0) => if k == 0 { Answer::Right } else { Answer::Wrong },
        (true, _) => if i.is_multiple_of(2) { Answer::Right } else { Answer::Wrong },
    };
    let greedy = |step: usize, _: bool, _: usize, _: usize| if step == 0 { Answer::Right } else { Answer::Wrong };
    let p = eval_plan(&cx, "");
    let sampler = scripted_with(&cx, Box::new(sampled), Some(Box::new(greedy)), |_| -0.5);
    let trainer = recorder(sampler, Box::new(calm));
    let ran = run_on(&p, trainer).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    // Both protocols recorded: metrics, and per-problem records tagged by protocol.
    let metrics = jsonl(&ran.dir.join("metrics.jsonl"));
    let at = |step: i64| metrics.iter().find(|m| m["step"] == step && m.get("eval/pass@1").is_some()).unwrap().clone();
    assert_eq!((at(-1)["eval/pass@1"].as_f64(), at(-1)["eval/pass@4"].as_f64(), at(-1)["eval/greedy/pass@1"].as_f64()), (Some(0.25), Some(1.0), Some(1.0)));
    assert_eq!((at(3)["eval/pass@1"].as_f64(), at(3)["eval/pass@4"].as_f64(), at(3)["eval/greedy/pass@1"].as_f64()), (Some(0.5), Some(0.5), Some(0.0)));
    let results = jsonl(&ran.dir.join("eval_results.jsonl"));
    let greedy_records: Vec<&Value> = results.iter().filter(|r| r["protocol"] == "greedy").collect();
    assert_eq!(greedy_records.len(), 16, "8 problems × 2 evals");
    assert!(greedy_records.iter().all(|r| r["n"] == 1), "{greedy_records:?}");
    assert_eq!(results.iter().filter(|r| r.get("protocol").is_none() && r["n"] == 4).count(), 16);
    // 8 problems lost, none gained: exact McNemar p = 2/2^8 = 0.0078.
    let (e, line) = ran.fired("greedy_below_baseline");
    assert_eq!(e["step"], 3);
    assert!(line.contains("greedy pass@1 100.0% at the baseline → 0.0% at step 3 on 8 problems: 8 lost, 0 gained (exact McNemar p = 0.008, threshold 0.05)"), "{line}");
    assert!(e["leads"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains("passed greedily at the baseline, fails at step 3")), "{e}");
    let (e, line) = ran.fired("coverage_collapse");
    assert_eq!(e["step"], 3);
    assert!(line.contains("eval pass@4 fell 100.0% → 50.0% since the baseline (more than 5.0%) while pass@1 rose 25.0% → 50.0%"), "{line}");
    // Doctor: sampled pass@1 doubled, but greedy fell beyond noise, so the eval expectation is
    // not met, and it says which protocol did what.
    let out = doctor(&cx, &ran.dir);
    assert!(out.contains("NO   steps 1–3"), "{out}");
    assert!(out.contains("sampled pass@1 25.0% → 50.0%"), "{out}");
    assert!(out.contains("greedy pass@1 100.0% → 0.0% DOWN (McNemar exact p = 0.008, 0 up, 8 down)"), "{out}");
    assert!(out.contains("greedy_below_baseline") && out.contains("coverage_collapse"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_getting_better_under_both_protocols_is_ok_in_doctor() {
    let cx = TestContext::new();
    // Every eval answer wrong at the baseline and right after training, in both protocols.
    let script = |step: usize, eval: bool, i: usize, k: usize| match (eval, step) {
        (false, _) => half(step, eval, i, k),
        (true, 0) => Answer::Wrong,
        (true, _) => Answer::Right,
    };
    let ran = run(&cx, &eval_plan(&cx, ""), Box::new(script), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    ran.not_fired("greedy_below_baseline");
    ran.not_fired("coverage_collapse");
    let out = doctor(&cx, &ran.dir);
    assert!(out.contains("ok   steps 1–3"), "{out}");
    assert!(out.contains("sampled pass@1 0.0% → 100.0% up (sign-flip exact p = 0.008, 8 up, 0 down); greedy pass@1 0.0% → 100.0% up (McNemar exact p = 0.008, 8 up, 0 down)"), "{out}");
    // pass@1 split into format and correctness given format: every answer had its code block, so
    // the gain is all in the answers.
    assert!(out.contains("format: sampled pass@1 well-formed 100.0% → 100.0%, given well-formed 0.0% → 100.0%; greedy pass@1 well-formed 100.0% → 100.0%, given well-formed 0.0% → 100.0%"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entropy_and_completion_length_collapsing_fire() {
    let cx = TestContext::new();
    // Two steps of full answers at 1 nat per token, then one-line answers at 0.1.
    let script = |step: usize, eval: bool, i: usize, k: usize| if step < 2 { half(step, eval, i, k) } else { Answer::Short };
    let p = plan(&cx, 4, "window: 2", "");
    let sampler = scripted_with(&cx, Box::new(script), None, |step| if step < 2 { -1.0 } else { -0.1 });
    let trainer = recorder(sampler, Box::new(calm));
    let ran = run_on(&p, trainer).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let (e, line) = ran.fired("entropy_collapse");
    assert_eq!(e["step"], 3, "the first step with two windows apart");
    assert!(line.contains("train/entropy 0.1000 over steps 2–3, 10.0% of its 1.000 over steps 0–1 (threshold 25.0%)"), "{line}");
    let (e, line) = ran.fired("length_collapse");
    assert_eq!(e["step"], 3);
    assert!(line.contains("train/completion_tokens_mean ") && line.contains("over steps 2–3") && line.contains("(threshold 50.0%)"), "{line}");
    // `action: off` silences them.
    let cx = TestContext::new();
    let p = plan(&cx, 4, "window: 2, entropy_collapse: {fraction: 0.25, action: off}, length_collapse: {fraction: 0.5, action: off}", "");
    let sampler = scripted_with(&cx, Box::new(script), None, |step| if step < 2 { -1.0 } else { -0.1 });
    let trainer = recorder(sampler, Box::new(calm));
    let ran = run_on(&p, trainer).await;
    ran.not_fired("entropy_collapse");
    ran.not_fired("length_collapse");
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fusion_sandbox_with_nothing_listening_stops_the_run_before_sampling() {
    let cx = TestContext::new();
    let url = format!("http://127.0.0.1:{}", closed_port());
    let p = plan(&cx, 2, "", &format!("sandbox: {{kind: fusion, url: {url}}}"));
    let sampler = scripted(&cx, Box::new(|_, _, _, _| Answer::Right));
    let trainer = recorder(sampler.clone(), Box::new(calm));
    let ran = run_on(&p, trainer).await;
    let err = ran.outcome.expect_err("no sandbox, no run");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain.push_str(&format!(": {s}"));
        source = s.source();
    }
    assert!(chain.contains(&format!("Sandbox Fusion at {url} (sandbox.url) cannot grade: GET /v1/ping failed")), "{chain}");
    match &err {
        engine::Error::Sandbox(rlx::sandbox::Error::Preflight { hint, .. }) => assert!(hint.starts_with("start the server"), "{hint}"),
        other => panic!("not a preflight failure: {other:?}"),
    }
    assert!(err.is_user_error(), "a URL where no server answers is the spec's to fix");
    assert_eq!(sampler.steps.load(Ordering::SeqCst), 0, "nothing was sampled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_dies_mid_run_stops_the_run_at_that_step() {
    let cx = TestContext::new();
    let (server, url) = sandbox_server();
    let p = plan(&cx, 4, "", &format!("sandbox: {{kind: fusion, url: {url}}}\nrollout: {{infra_retries: 1}}"));
    let half = |_: usize, _: bool, _: usize, k: usize| if k.is_multiple_of(2) { Answer::Right } else { Answer::Wrong };
    let sampler = scripted(&cx, Box::new(half));
    let trainer = recorder(sampler, Box::new(calm));
    let server = Mutex::new(Some(server));
    let sink = move |e: engine::Event| {
        if let engine::Event::Step { step: 0, .. } = e
            && let Some(mut s) = server.lock().unwrap().take()
        {
            s.kill().unwrap();
            s.wait().unwrap();
        }
    };
    let outcome = engine::run(&p, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &sink).await;
    let err = outcome.expect_err("the sandbox is gone");
    assert!(err.to_string().starts_with("step 1: all 2 groups were dropped after sandbox infrastructure errors"), "{err}");
    let dir = p.log.root.join(&p.run_id);
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_u64()), (Some("failed"), Some(1)));
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert_eq!((cks.len(), cks[0]["step"].as_u64()), (1, Some(0)), "resumable from step 0: {cks:?}");
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0], "the failed step is not recorded as done");
}

/// A Sandbox Fusion front that answers HTTP 503 to programs containing `INFRA-FAIL` and passes
/// everything else to `upstream` (the real `rlx sandbox serve`).
pub(crate) const FLAKY_PROXY: &str = r#"
import base64, http.server, json, sys, urllib.request
UP = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, body):
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(200, b'"pong"')
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        req = json.loads(body)
        # The program and its job travel as Sandbox Fusion's base64 files.
        texts = [req.get("code", "").encode()] + [base64.b64decode(v) for v in (req.get("files") or {}).values()]
        if any(b"INFRA-FAIL" in t for t in texts):
            return self.reply(503, b'{"detail": "injected"}')
        req = urllib.request.Request(UP + "/run_code", data=body, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req) as r:
            self.reply(200, r.read())
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infrastructure_errors_above_the_threshold_fire() {
    let cx = TestContext::new();
    let (mut server, upstream) = sandbox_server();
    let mut proxy = Command::new("python3").args(["-c", FLAKY_PROXY, &upstream]).stdout(Stdio::piped()).spawn().unwrap();
    let mut port = String::new();
    std::io::BufReader::new(proxy.stdout.take().unwrap()).read_line(&mut port).unwrap();
    let url = format!("http://127.0.0.1:{}", port.trim());
    let p = plan(&cx, 2, "infra_errors: {rate: 0.05}", &format!("sandbox: {{kind: fusion, url: {url}}}\nrollout: {{infra_retries: 1}}"));
    // The first training problem's second sample always meets a 503; every other one is graded.
    let script = |_: usize, eval: bool, i: usize, k: usize| if !eval && i == 0 && k == 1 { Answer::InfraFail } else if k == 0 { Answer::Right } else { Answer::Wrong };
    let ran = run(&cx, &p, Box::new(script), Box::new(calm)).await;
    let _ = (proxy.kill(), proxy.wait(), server.kill(), server.wait());
    assert!(ran.outcome.is_ok(), "one group in two dropped is not a dead sandbox: {:?}", ran.outcome);
    let (e, line) = ran.fired("infra_errors");
    assert!(line.contains("25.0% of the step's gradings failed for infrastructure reasons after retries"), "{line}");
    let m = &jsonl(&ran.dir.join("metrics.jsonl"))[e["step"].as_u64().unwrap() as usize];
    assert_eq!((m["sandbox/infra_rate"].as_f64(), m["train/groups_infra_dropped"].as_f64()), (Some(0.25), Some(1.0)), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_eval_sources_are_reported_apart_and_completions_recorded() {
    let cx = TestContext::new();
    let eval = repo().join("experiments/data/easy_python_eval.jsonl");
    let sources = format!("  eval: [{{path: {e}, format: mbpp, limit: 2}}, {{path: {e}, format: mbpp, skip: 2, limit: 3, name: later}}]", e = eval.display());
    let p = plan(&cx, 1, "", &format!("{sources}\nschedule: {{max_steps: 1, eval_every: 0, save_every: 0, eval_at_start: true}}"));
    // The first source's problems are answered right, the second's wrong.
    let script = |_: usize, eval: bool, i: usize, _: usize| if eval && i < 34 { Answer::Right } else { Answer::Wrong };
    let ran = run(&cx, &p, Box::new(script), Box::new(calm)).await;
    assert!(ran.outcome.is_ok(), "{:?}", ran.outcome);
    let metrics = jsonl(&ran.dir.join("metrics.jsonl"));
    for m in [&metrics[0], &metrics[1]] {
        assert_eq!(m["eval/easy_python_eval/pass@1"], 1.0, "{m}");
        assert_eq!((m["eval/later/pass@1"].as_f64(), m["eval/later/problems"].as_f64()), (Some(0.0), Some(3.0)), "{m}");
        assert_eq!(m["eval/pass@1"], 0.4, "pooled over 5 problems: {m}");
    }
    let results = jsonl(&ran.dir.join("eval_results.jsonl"));
    assert_eq!(results.iter().filter(|r| r["source"] == "later").count(), 6, "3 problems × 2 evals");
    let samples = jsonl(&ran.dir.join("eval_rollouts.jsonl"));
    assert_eq!(samples.len(), 10, "one sample per problem per eval (log.rollouts: all, eval.samples 1)");
    assert!(samples.iter().all(|s| s["prompt"].as_array().is_some_and(|p| !p.is_empty()) && s["tests"].is_array()), "{:?}", samples[0]);
}
