//! Remote backends k steps deep (engine/stream.rs): a scripted remote backend whose sampler
//! versions are the trainer's optimizer steps, and whose `forward_backward` takes a while, shows
//! the groups of the next k steps being requested while a step trains, no group trained more
//! than k versions behind, and the step records in order with the eval recorded at its step.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlx::backend::{Pending, Policy, Sampler, Trainer};
use rlx::engine::{self, PolicySource};
use rlx::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef, StopReason};
use serde_json::Value;

use crate::common::{TestContext, jsonl, repo};

/// What happened, in order: `sample <version>` (`eval <version>` for an eval problem),
/// `fb <n> start`, `fb <n> end`.
type Log = Arc<Mutex<Vec<String>>>;

/// Answers every problem half right, half wrong; logs each request with its version.
struct Versioned {
    version: u32,
    tokenizer: tokenizers::Tokenizer,
    answers: Arc<Vec<(String, String, bool)>>,
    log: Log,
    /// Versions from this one on refuse every request (not an infrastructure error: the run
    /// stops).
    broken_from: Option<u32>,
}

impl Sampler for Versioned {
    fn sample(&self, requests: Vec<SampleRequest>, _params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        if self.broken_from.is_some_and(|b| self.version >= b) {
            return Box::pin(async { Err(rlx::backend::Error::InvalidArgument { what: "sampler", reason: "broken on purpose".into() }) });
        }
        let out = requests
            .iter()
            .map(|r| {
                let text = self.tokenizer.decode(&r.prompt, false).unwrap();
                let (_, code, eval) = self.answers.iter().find(|(statement, _, _)| text.contains(statement.as_str())).expect("a known problem").clone();
                self.log.lock().unwrap().push(format!("{} {}", if eval { "eval" } else { "sample" }, self.version));
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
        Box::pin(async move { Ok(out) })
    }
}

/// A remote trainer: `forward_backward` takes 150 ms; samplers carry the optimizer step count.
struct Remote {
    tokenizer: tokenizers::Tokenizer,
    answers: Arc<Vec<(String, String, bool)>>,
    steps: AtomicU32,
    log: Log,
    broken_from: Option<u32>,
}

impl Trainer for Remote {
    // A remote service: the engine streams groups k steps deep.
    fn runs_elsewhere(&self) -> bool {
        true
    }
    fn forward_backward(&self, data: Vec<Datum>, _loss: LossFn) -> Pending<ForwardBackwardOutput> {
        let n = self.steps.load(Ordering::SeqCst);
        let log = self.log.clone();
        log.lock().unwrap().push(format!("fb {n} start"));
        let outputs = data.iter().map(|d| rlx::seam::DatumOutput { logprobs: vec![-0.5; d.model_input.len()] }).collect();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            log.lock().unwrap().push(format!("fb {n} end"));
            Ok(ForwardBackwardOutput { loss: 1.0, outputs, stats: Default::default() })
        })
    }
    fn optim_step(&self, _adam: AdamParams) -> Pending<OptimStepOutput> {
        let n = self.steps.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(OptimStepOutput { grad_norm: Some(1.0), clipped: false, step: u64::from(n) + 1, metrics: Default::default() }) })
    }
    fn save_state(&self, name: &str) -> Pending<StateRef> {
        let uri = format!("scripted://{name}");
        Box::pin(async move { Ok(StateRef(uri)) })
    }
    fn load_state(&self, state: &StateRef) -> Pending<()> {
        // `scripted://step-000009`: the state after step 9, ten optimizer steps.
        if let Some(s) = state.0.strip_prefix("scripted://step-").and_then(|n| n.parse::<u32>().ok()) {
            self.steps.store(s + 1, Ordering::SeqCst);
        }
        Box::pin(async move { Ok(()) })
    }
    fn sampler(&self) -> Pending<Arc<dyn Sampler>> {
        let s: Arc<dyn Sampler> = Arc::new(Versioned { version: self.steps.load(Ordering::SeqCst), tokenizer: self.tokenizer.clone(), answers: self.answers.clone(), log: self.log.clone(), broken_from: self.broken_from });
        Box::pin(async move { Ok(s) })
    }
}

fn plan(cx: &TestContext, k: u32) -> rlx::plan::Plan {
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let data = repo().join("experiments/data");
    let spec = format!(
        "name: stream
seed: 2
model: {{base: ./tiny}}
backend: {{kind: local}}
data:
  train: [{{path: {train}, format: mbpp}}]
  eval: [{{path: {eval}, format: mbpp, limit: 3}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: 2, group_size: 2, max_steps_off_policy: {k}}}
reward: {{test_timeout_s: 5}}
sandbox: {{kind: local, strict: false}}
log: {{root: {root}, rollouts: all}}
schedule: {{max_steps: 6, eval_every: 3, save_every: 2, eval_at_start: false}}",
        train = data.join("easy_python_train.jsonl").display(),
        eval = data.join("easy_python_eval.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
        root = cx.path().join("runs").display(),
    );
    let path = cx.write("spec.yaml", &spec);
    rlx::plan::plan(&path, &[]).unwrap()
}

fn answers() -> Arc<Vec<(String, String, bool)>> {
    let mut out = vec![];
    for (file, eval) in [("easy_python_train.jsonl", false), ("easy_python_eval.jsonl", true)] {
        for l in std::fs::read_to_string(repo().join("experiments/data").join(file)).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            out.push((v["text"].as_str().unwrap().to_string(), v["code"].as_str().unwrap().to_string(), eval));
        }
    }
    Arc::new(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_steps_are_in_flight_and_none_trains_more_than_k_behind() {
    for k in [1u32, 2] {
        let cx = TestContext::new();
        let p = plan(&cx, k);
        let log: Log = Arc::default();
        let tokenizer = tokenizers::Tokenizer::from_file(cx.path().join("tiny/tokenizer.json")).unwrap();
        let trainer = Arc::new(Remote { tokenizer, answers: answers(), steps: AtomicU32::new(0), log: log.clone(), broken_from: None });
        let outcome = engine::run(&p, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &()).await.unwrap();
        assert_eq!(outcome, engine::RunOutcome::Finished { steps: 6 });
        let log = log.lock().unwrap().clone();
        // While step s trains, the groups of steps s+1 … s+k have been requested: by the end of
        // forward_backward s, at least (s + 1 + k) · 2 training groups (fewer near the end).
        for s in 0..5u32 {
            let end = log.iter().position(|l| *l == format!("fb {s} end")).unwrap_or_else(|| panic!("no fb {s}: {log:?}"));
            let sampled = log[..end].iter().filter(|l| l.starts_with("sample ")).count();
            let want = (s + 1 + k.min(5 - s)) as usize * 2;
            assert!(sampled >= want, "k={k}: by the end of step {s}'s update {sampled} groups were requested, want ≥ {want}: {log:?}");
        }
        let dir = p.log.root.join(&p.run_id);
        let metrics = jsonl(&dir.join("metrics.jsonl"));
        let steps: Vec<i64> = metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect();
        assert_eq!(steps, vec![0, 1, 2, 3, 4, 5], "k={k}: one line per step, in order");
        let staleness: Vec<f64> = metrics.iter().map(|m| m["train/staleness_max"].as_f64().unwrap()).collect();
        assert!(staleness.iter().all(|&x| x <= f64::from(k)), "k={k}: {staleness:?}");
        assert!(staleness.contains(&f64::from(k)), "k={k}: some step trains k versions behind: {staleness:?}");
        for m in &metrics {
            assert!(m["time/trainer_wait_s"].is_number() && m["time/sampler_wait_s"].is_number() && m["train/groups_stale"].is_number(), "{m}");
        }
        // Evals after steps 2 and 5, recorded at those steps, each on its own line's step.
        assert!(metrics[2]["eval/pass@1"].is_number() && metrics[5]["eval/pass@1"].is_number() && metrics[3].get("eval/pass@1").is_none());
        let evals: Vec<i64> = jsonl(&dir.join("eval_results.jsonl")).iter().map(|r| r["step"].as_i64().unwrap()).collect();
        assert_eq!(evals, vec![2, 2, 2, 5, 5, 5]);
        // Each completion says which version sampled it, within k of its step.
        for r in jsonl(&dir.join("rollouts.jsonl")) {
            let (step, version) = (r["step"].as_u64().unwrap(), r["policy_version"].as_u64().unwrap());
            assert!(version <= step && step - version <= u64::from(k), "k={k}: {r}");
        }
        let cks: Vec<u64> = jsonl(&dir.join("checkpoints.jsonl")).iter().map(|c| c["step"].as_u64().unwrap()).collect();
        assert_eq!(cks, vec![1, 3, 5]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_mid_stream_records_what_trained_and_the_run_resumes() {
    let cx = TestContext::new();
    let p = plan(&cx, 1);
    let tokenizer = tokenizers::Tokenizer::from_file(cx.path().join("tiny/tokenizer.json")).unwrap();
    // The sampler of version 3 (after step 2's update) breaks: its groups and step 2's eval fail.
    let broken = Arc::new(Remote { tokenizer: tokenizer.clone(), answers: answers(), steps: AtomicU32::new(0), log: Log::default(), broken_from: Some(3) });
    let err = engine::run(&p, PolicySource::Given(Policy::Trainable(broken)), &engine::StopSignal::default(), &()).await.expect_err("the broken sampler stops the run");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(c) = source {
        chain = format!("{chain}: {c}");
        source = c.source();
    }
    assert!(chain.contains("broken on purpose"), "{chain}");
    let dir = p.log.root.join(&p.run_id);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    // Steps 0-2 trained before anything broke: each is recorded (step 2 was waiting for its
    // eval, which failed), none dropped.
    assert_eq!(steps, vec![0, 1, 2], "{steps:?}");
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    let last = cks.last().unwrap();
    // The trainer's state when the sampler broke outside an update is step 2's: checkpointed
    // as such; when it broke beside an update, the periodic checkpoint of step 1 stands.
    assert!((last["step"] == 2 && last["kind"] == "interrupt") || (last["step"] == 1 && last["kind"] == "periodic"), "{cks:?}");
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_u64()), (Some("failed"), Some(3)));
    // Resumed on a working sampler, the run finishes with every step once.
    let fixed = Arc::new(Remote { tokenizer, answers: answers(), steps: AtomicU32::new(0), log: Log::default(), broken_from: None });
    let outcome = engine::run(&p, PolicySource::Given(Policy::Trainable(fixed)), &engine::StopSignal::default(), &()).await.unwrap();
    assert_eq!(outcome, engine::RunOutcome::Finished { steps: 6 });
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0, 1, 2, 3, 4, 5]);
}
