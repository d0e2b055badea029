//! The engine through its entry point (`rlx::engine::run`, what `rlx run` calls) with a second,
//! test-only backend: a scripted sampler (answers from the dataset's reference solutions, right
//! or wrong by seed parity) and a recording trainer. Shows that the engine needs nothing of the
//! local backend, keeps requests in flight concurrently (observed overlap, not timing), records
//! remote state references, and evaluates with a sampler alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rlx::backend::Policy;
use rlx::seam::StopReason;
use rlx::engine::{self, PolicySource};
use serde_json::Value;

use crate::common::{TestContext, repo};
use crate::fakes::{Recorder, Scripted};

/// Samples the reference solution of the problem a prompt asks for when `seed + k` is even, a
/// wrong function otherwise; 4 calls in flight.
fn scripted(cx: &TestContext) -> Arc<Scripted> {
    let sampler = Scripted::new(cx, true, |p, c| {
        let right = (c.seed.unwrap() + c.sample as u64).is_multiple_of(2);
        let body = if right { p.rows[c.problem].solution.clone() } else { "def nothing():\n    return None".to_string() };
        (format!("```python\n{body}\n```"), StopReason::Stop)
    });
    Arc::new(sampler.max_in_flight(4))
}

/// The test spec; `eval_limit` caps the eval problems (40 in the file), `schedule` adds keys to
/// the `schedule` section (`save_every`, `eval_at_start`).
fn plan(cx: &TestContext, max_steps: u32, eval_limit: u32, schedule: &str) -> rlx::plan::Plan {
    let data = repo().join("experiments/data");
    let spec = format!(
        "name: seams
seed: 5
model: {{base: ./tiny}}
backend: {{kind: tinker}}
data:
  train: [{{path: {train}, format: mbpp}}]
  eval: [{{path: {eval}, format: mbpp, limit: {eval_limit}}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: 3, group_size: 16, loss: {{kind: ppo}}}}
reward: {{test_timeout_s: 5}}
sandbox: {{kind: local, strict: false}}
eval: {{k: [1]}}
log: {{root: {root}}}
schedule: {{max_steps: {max_steps}, eval_every: 0, {schedule}}}",
        train = data.join("easy_python_train.jsonl").display(),
        eval = data.join("easy_python_eval.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
        root = cx.path().join("runs").display(),
    );
    let path = cx.write("spec.yaml", &spec);
    rlx::plan::plan(&path, &[]).unwrap()
}

fn jsonl(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_drives_any_backend_with_requests_in_flight() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    // No baseline eval, 8 eval problems at the end: the eval path has its own test below.
    let plan = plan(&cx, 2, 8, "save_every: 1, eval_at_start: false");
    let sampler = scripted(&cx);
    let trainer = Arc::new(Recorder::new(sampler.clone()));
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &engine::StopSignal::default(), &()).await.unwrap();
    assert_eq!(outcome, engine::RunOutcome::Finished { steps: 2 });

    // 3 prompts × 16 samples in batches of 2 prompts: the second batch was submitted before the
    // first was answered; forward_backward and optim_step were submitted back to back.
    assert!(sampler.in_flight.max() >= 2, "sample requests never overlapped (max {})", sampler.in_flight.max());
    assert_eq!(trainer.in_flight.max(), 2, "optim_step was not submitted while forward_backward was in flight");
    let log = trainer.log.lock().unwrap().clone();
    let dir = cx.path().join("runs").join(&plan.run_id);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect::<Vec<_>>(), vec![0, 1]);
    // Seed parity makes groups mixed: rewards strictly between 0 and 1, and every datum trained.
    for (m, fb) in metrics.iter().zip(log.iter().filter(|l| l.starts_with("forward_backward"))) {
        let reward = m["train/correct_mean"].as_f64().unwrap();
        assert!(reward > 0.0 && reward < 1.0, "correct_mean {reward}");
        assert_eq!(fb, &format!("forward_backward {} ppo", m["train/datums"].as_f64().unwrap() as usize));
    }
    assert_eq!(log.iter().filter(|l| l.starts_with("optim_step 0.00001")).count(), 2, "{log:?}");
    // The final eval's pass@1 is the share of even seeds (the scripted rule).
    let even = (0..8u64).filter(|i| engine::problems::derive_seed(5 ^ 0xE7A1, -1, *i).is_multiple_of(2)).count();
    assert_eq!(metrics[1]["eval/pass@1"].as_f64().unwrap(), even as f64 / 8.0);
    // Remote state references are recorded as given.
    let checkpoints = jsonl(&dir.join("checkpoints.jsonl"));
    let states: Vec<&str> = checkpoints.iter().map(|c| c["state_path"].as_str().unwrap()).collect();
    assert_eq!(states, ["scripted://step-000000", "scripted://step-000001"]);
    assert!(!dir.join("checkpoints").exists(), "a remote backend's run writes no local state");
}

/// A run stopped after its first step resumes from the backend's remote state reference: the
/// engine hands `scripted://step-000000` back to `load_state` and runs the remaining step once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumes_from_a_remote_state_reference() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let plan = plan(&cx, 2, 4, "save_every: 0, eval_at_start: false");
    let sampler = scripted(&cx);
    let trainer = Arc::new(Recorder::new(sampler));
    let stop = engine::StopSignal::default();
    let on_step = {
        let stop = stop.clone();
        move |e: engine::Event| {
            if matches!(e, engine::Event::Step { step: 0, .. }) {
                stop.request();
            }
        }
    };
    let first = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &stop, &on_step).await.unwrap();
    assert_eq!(first, engine::RunOutcome::Interrupted { steps: 1 });
    let second = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &engine::StopSignal::default(), &()).await.unwrap();
    assert_eq!(second, engine::RunOutcome::Finished { steps: 2 });

    let log = trainer.log.lock().unwrap().clone();
    let saves: Vec<&String> = log.iter().filter(|l| l.starts_with("save_state")).collect();
    assert_eq!(saves, ["save_state step-000000", "save_state step-000001"], "{log:?}");
    assert!(log.contains(&"load_state scripted://step-000000".to_string()), "{log:?}");
    assert_eq!(log.iter().filter(|l| l.starts_with("optim_step")).count(), 2, "each step trained once: {log:?}");
    let dir = cx.path().join("runs").join(&plan.run_id);
    let events: Vec<String> = jsonl(&dir.join("events.jsonl")).iter().map(|e| e["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(events, ["start", "interrupted", "resume", "finished"]);
    let resume = jsonl(&dir.join("events.jsonl")).into_iter().find(|e| e["event"] == "resume").unwrap();
    assert_eq!((resume["from_checkpoint"].as_str(), resume["next_step"].as_u64()), (Some("step-000000"), Some(1)));
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, [0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluation_needs_only_a_sampler() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let plan = plan(&cx, 0, 40, "save_every: 1");
    let sampler = scripted(&cx);
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Fixed(sampler.clone())), &engine::StopSignal::default(), &()).await.unwrap();
    assert_eq!(outcome, engine::RunOutcome::Finished { steps: 0 });
    let dir = cx.path().join("runs").join(&plan.run_id);
    let results = jsonl(&dir.join("eval_results.jsonl"));
    assert_eq!(results.len(), 40);
    for (i, r) in results.iter().enumerate() {
        let expect = u64::from(engine::problems::derive_seed(5 ^ 0xE7A1, -1, i as u64).is_multiple_of(2));
        assert_eq!(r["correct"].as_u64().unwrap(), expect, "{r}");
    }
    // 40 prompts × 1 sample in batches of 32: two calls, overlapping.
    assert_eq!(sampler.calls.load(Ordering::SeqCst), 2);
    assert_eq!(sampler.in_flight.max(), 2);

    // Training with a sampler-only policy is refused with a clear error.
    let plan = plan_steps(&cx);
    let err = engine::run(&plan, PolicySource::Given(Policy::Fixed(sampler)), &engine::StopSignal::default(), &()).await.unwrap_err();
    assert!(err.is_user_error());
    assert!(err.to_string().contains("cannot train"), "{err}");
}

fn plan_steps(cx: &TestContext) -> rlx::plan::Plan {
    plan(cx, 1, 40, "save_every: 1")
}
