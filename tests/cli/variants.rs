//! The GRPO variants of docs/variants.md through the engine: dynamic sampling with a scripted
//! sampler whose groups are mostly degenerate (refill rounds until the step is full, its metrics,
//! the cap on rounds, an exact resume mid-run, the same draws pipelined), loss aggregation as the
//! trainer receives it, runs of the embedded trainer on a tiny model with the loss/advantage
//! variants on (GSPO, token-mean aggregation, overlong penalty and masking, the KL penalty),
//! validation refusals, and the KL reference on Tinker through `rlx serve`.

use std::sync::Arc;

use rlx::backend::Policy;
use rlx::engine::{self, PolicySource};
use rlx::seam::{AdamParams, Datum, LossFn, SamplingParams, StopReason};
use serde_json::Value;

use crate::common::{TestContext, jsonl, only_run, repo};
use crate::fakes::{Recorder, Scripted};

/// Answers a problem of the training file right on even samples and wrong on odd ones when its
/// line number is a multiple of 3 ([`is_informative`]), and wrong on every sample otherwise: two
/// groups in three are degenerate (all fail). With `mix_format`, wrong answers on odd samples
/// come without a code block (a format error): an all-wrong group's rewards then differ by the
/// format coefficient. The sampler logs the problem of every request, in order (`asked`).
fn scripted(cx: &TestContext, mix_format: bool) -> Arc<Scripted> {
    Arc::new(Scripted::new(cx, false, move |p, c| {
        let (i, k) = (c.problem, c.sample);
        let right = is_informative(i) && k % 2 == 0;
        let body = if right { p.rows[i].solution.clone() } else { "def nothing():\n    return None".to_string() };
        let text = if !right && mix_format && k % 2 == 1 { "I cannot solve this.".to_string() } else { format!("```python\n{body}\n```") };
        (text, StopReason::Stop)
    }))
}

/// Whether the scripted sampler answers problem `i` right on some samples.
fn is_informative(i: usize) -> bool {
    i.is_multiple_of(3)
}

fn dynamic_plan(cx: &TestContext, max_extra_rounds: u32) -> rlx::plan::Plan {
    dynamic_plan_with(cx, max_extra_rounds, "")
}

/// The dynamic-sampling spec with `grpo_extra` keys added to `grpo`.
fn dynamic_plan_with(cx: &TestContext, max_extra_rounds: u32, grpo_extra: &str) -> rlx::plan::Plan {
    let data = repo().join("experiments/data");
    let spec = format!(
        "name: dynamic
seed: 11
model: {{base: ./tiny}}
backend: {{kind: local}}
data:
  train: [{{path: {train}, format: mbpp}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: 3, group_size: 4, loss: {{kind: ppo}}, dynamic_sampling: {{max_extra_rounds: {max_extra_rounds}}}{grpo_extra}}}
reward: {reward}
sandbox: {{kind: local, strict: false}}
log: {{root: {root}, rollouts: all}}
schedule: {{max_steps: 3, eval_every: 0, save_every: 1, eval_at_start: false}}",
        train = data.join("easy_python_train.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
        root = cx.path().join("runs").display(),
        reward = if grpo_extra.contains("python") {
            format!("{{kind: python, path: {}, function: reward, test_timeout_s: 5}}", repo().join("rewards/example_reward.py").display())
        } else {
            "{test_timeout_s: 5, format_coef: 0}".to_string()
        },
    );
    // `python` in `grpo_extra` only selects the reward above.
    let spec = spec.replace(", python}", "}");
    let path = cx.write("spec.yaml", &spec);
    rlx::plan::plan(&path, &[]).unwrap()
}

/// Runs `plan` to the end on a fresh scripted backend, stopping once after `stop_after` steps
/// when given (then resuming on a new backend, as a restarted process would).
async fn run(cx: &TestContext, plan: &rlx::plan::Plan, stop_after: Option<u32>) -> (Arc<Recorder>, Vec<usize>) {
    run_on(scripted(cx, false), plan, stop_after).await
}

/// [`run`] on the scripted sampler given.
async fn run_on(sampler: Arc<Scripted>, plan: &rlx::plan::Plan, stop_after: Option<u32>) -> (Arc<Recorder>, Vec<usize>) {
    let trainer = Arc::new(Recorder::new(sampler.clone()).remote());
    let mut asked = vec![];
    if let Some(n) = stop_after {
        let stop = engine::StopSignal::default();
        let on_step = {
            let stop = stop.clone();
            move |e: engine::Event| {
                if matches!(e, engine::Event::Step { step, .. } if step + 1 == n) {
                    stop.request();
                }
            }
        };
        let first = engine::run(plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &stop, &on_step).await.unwrap();
        assert_eq!(first, engine::RunOutcome::Interrupted { steps: n });
        asked.extend(sampler.asked.lock().unwrap().drain(..));
    }
    let outcome = engine::run(plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &engine::StopSignal::default(), &()).await.unwrap();
    assert_eq!(outcome, engine::RunOutcome::Finished { steps: 3 });
    asked.extend(sampler.asked.lock().unwrap().drain(..));
    (trainer, asked)
}

fn metric(m: &Value, k: &str) -> usize {
    m[k].as_f64().unwrap_or_else(|| panic!("no {k} in {m}")) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_sampling_refills_until_full_and_resumes_exactly() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let plan = dynamic_plan(&cx, 10);
    let (trainer, asked) = run(&cx, &plan, None).await;
    let dir = cx.path().join("runs").join(&plan.run_id);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 3);
    let (mut drawn_total, mut discarded_total, mut refilled) = (0, 0, 0);
    for m in &metrics {
        let (drawn, discarded, rounds, groups) = (metric(m, "train/problems_drawn"), metric(m, "train/groups_discarded"), metric(m, "train/sample_rounds"), metric(m, "train/groups"));
        // Full: exactly prompts_per_step informative groups, each trained on (4 datums a group).
        assert_eq!(groups - discarded, 3, "{m}");
        assert_eq!(metric(m, "train/datums"), 12, "{m}");
        assert_eq!((drawn, metric(m, "train/groups_skipped")), (groups, discarded), "{m}");
        assert!(discarded < 30 + 3, "the budget (10 rounds' worth of 3) and the last draw at most: {m}");
        refilled += usize::from(rounds > 1);
        drawn_total += drawn;
        discarded_total += discarded;
    }
    assert!(refilled >= 2, "steps refilled: {refilled}");
    assert!(discarded_total > drawn_total / 2, "most groups are degenerate: {discarded_total} of {drawn_total}");
    // Every problem drawn was sampled once, in order, and counts in the data cursor.
    assert_eq!(asked.len(), drawn_total);
    assert_eq!(*trainer.datums.lock().unwrap(), vec![12, 12, 12]);
    let cursors: Vec<u64> = jsonl(&dir.join("checkpoints.jsonl")).iter().map(|c| c["data_cursor"].as_u64().unwrap()).collect();
    let mut sum = 0;
    let expect: Vec<u64> = metrics.iter().map(|m| { sum += metric(m, "train/problems_drawn") as u64; sum }).collect();
    assert_eq!(cursors, expect);
    // Each round draws the shortfall: replay the sampler's log with the scripted rule.
    let mut at = 0;
    for m in &metrics {
        let (mut have, mut taken, mut want, mut rounds) = (0, 0, 3, 0);
        while want > 0 {
            have += asked[at..at + want].iter().filter(|&&i| is_informative(i)).count();
            (at, taken, rounds) = (at + want, taken + want, rounds + 1);
            // Past 30 set aside (10 rounds' worth of 3) whatever comes counts.
            want = if taken - have >= 30 { 3usize.saturating_sub(taken) } else { 3 - have };
        }
        assert_eq!(rounds, metric(m, "train/sample_rounds"), "{m}");
    }

    // The same experiment stopped after step 1 and resumed: the same problems, seeds, rewards
    // and metrics (timings aside).
    let cx2 = TestContext::new();
    crate::engine::tiny_model(&cx2.path().join("tiny"));
    let plan2 = dynamic_plan(&cx2, 10);
    assert_eq!(plan2.run_id, plan.run_id);
    let (_, asked2) = run(&cx2, &plan2, Some(1)).await;
    assert_eq!(asked2, asked, "the resumed run drew the same problems in the same order");
    let dir2 = cx2.path().join("runs").join(&plan2.run_id);
    let strip = |v: Vec<Value>| -> Vec<Value> {
        v.into_iter()
            .map(|mut m| {
                m.as_object_mut().unwrap().retain(|k, _| !k.starts_with("time/") && !k.starts_with("sandbox/"));
                m
            })
            .collect()
    };
    assert_eq!(strip(jsonl(&dir2.join("metrics.jsonl"))), strip(metrics));
    // Per-test timings and tracebacks (which name the sandbox's scratch directory) differ
    // between runs; the verdicts must not.
    let verdicts = |v: Vec<Value>| -> Vec<Value> {
        v.into_iter()
            .map(|mut r| {
                for t in r["tests"].as_array_mut().into_iter().flatten() {
                    t.as_object_mut().unwrap().retain(|k, _| k != "time_ms" && k != "error");
                }
                r
            })
            .collect()
    };
    assert_eq!(verdicts(jsonl(&dir2.join("rollouts.jsonl"))), verdicts(jsonl(&dir.join("rollouts.jsonl"))));
    let cursors2: Vec<u64> = jsonl(&dir2.join("checkpoints.jsonl")).iter().map(|c| c["data_cursor"].as_u64().unwrap()).collect();
    assert_eq!(cursors2, cursors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_sampling_stops_at_its_cap() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    // One extra round's worth: 3 groups may be set aside per step.
    let plan = dynamic_plan(&cx, 1);
    let (_, asked) = run(&cx, &plan, None).await;
    let metrics = jsonl(&cx.path().join("runs").join(&plan.run_id).join("metrics.jsonl"));
    let mut at = 0;
    let mut capped = 0;
    for m in &metrics {
        let (groups, discarded) = (metric(m, "train/groups"), metric(m, "train/groups_discarded"));
        let informative = groups - discarded;
        assert!(informative <= 3);
        // Each round draws at most the shortfall (3), so the round that spends the budget ends
        // the step with fewer than 3 + 3 set aside.
        assert!(discarded < 6, "{m}");
        // Not full only when the budget was spent; it then trains on what it has.
        if informative < 3 {
            assert!(discarded >= 3 && groups >= 3, "{m}");
            capped += 1;
        }
        assert_eq!(metric(m, "train/datums"), informative * 4, "{m}");
        let drawn = metric(m, "train/problems_drawn");
        assert_eq!(asked[at..at + drawn].iter().filter(|&&i| is_informative(i)).count(), informative);
        at += drawn;
    }
    assert!(capped >= 1, "no step reached the cap: {metrics:?}");
}

/// DAPO's filter is on correctness: all-wrong groups whose rewards differ (some answers lack a
/// code block and miss the format coefficient) are set aside, counted and refilled under
/// `metric: correct`, and trained on under `metric: reward`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_sampling_filters_on_correctness_not_on_shaped_rewards() {
    for (filter, sets_aside) in [("correct", true), ("reward", false)] {
        let cx = TestContext::new();
        crate::engine::tiny_model(&cx.path().join("tiny"));
        let path = cx.path().join("runs");
        let plan = dynamic_plan_with(&cx, 10, "");
        let text = std::fs::read_to_string(&plan.written.path).unwrap()
            .replace("max_extra_rounds: 10}", &format!("max_extra_rounds: 10, metric: {filter}}}"))
            .replace("format_coef: 0}", "format_coef: 0.1}");
        let spec = cx.write("spec.yaml", &text);
        let plan = rlx::plan::plan(&spec, &[]).unwrap();
        let sampler = scripted(&cx, true);
        let (trainer, asked) = run_on(sampler, &plan, None).await;
        let dir = path.join(&plan.run_id);
        let metrics = jsonl(&dir.join("metrics.jsonl"));
        let rollouts = jsonl(&dir.join("rollouts.jsonl"));
        // Every all-wrong group has rewards 0 and −0.1 (formatted or not): not all equal.
        let all_wrong_differ = rollouts.iter().any(|r| r["status"] == "failed" && r["reward"].as_f64() == Some(0.0)) && rollouts.iter().any(|r| r["status"] == "format_error" && r["reward"].as_f64() == Some(-0.1));
        assert!(all_wrong_differ, "the script makes all-wrong groups' rewards differ");
        let discarded: usize = metrics.iter().map(|m| metric(m, "train/groups_discarded")).sum();
        if sets_aside {
            assert!(discarded > 0, "{filter}: all-wrong groups set aside: {metrics:?}");
            assert_eq!(asked.len(), metrics.iter().map(|m| metric(m, "train/problems_drawn")).sum::<usize>());
            assert!(metrics.iter().all(|m| metric(m, "train/sample_rounds") > 1 || metric(m, "train/groups_discarded") == 0));
            // Only groups with a right answer trained: 3 a step, 4 datums each.
            assert_eq!(*trainer.datums.lock().unwrap(), vec![12, 12, 12], "{filter}");
            for r in rollouts.iter().filter(|r| !r["skipped"].as_bool().unwrap()) {
                let i = sampler_index(&r["problem_id"]);
                assert!(is_informative(i), "{filter}: trained an all-wrong group: {r}");
            }
        } else {
            assert_eq!(discarded, 0, "{filter}: every group's rewards differ");
            assert!(metrics.iter().all(|m| metric(m, "train/sample_rounds") == 1), "{metrics:?}");
        }
    }
}

/// The line of the training file a problem id names (MBPP ids are the line's `task_id`).
fn sampler_index(id: &Value) -> usize {
    let text = std::fs::read_to_string(repo().join("experiments/data/easy_python_train.jsonl")).unwrap();
    let id: u64 = id.as_str().and_then(|s| s.parse().ok()).or_else(|| id.as_u64()).expect("a numeric MBPP id");
    text.lines().position(|l| serde_json::from_str::<Value>(l).unwrap()["task_id"].as_u64() == Some(id)).expect("a training problem")
}

/// The loss/advantage variants on the embedded trainer: GSPO, token-mean aggregation, the soft
/// overlong penalty and the KL penalty (LoRA: the reference is the base with the adapter off) in
/// one run; overlong masking in another.
/// GSPO at its default band against a sampler it can hold (f32 weights, the learner at the
/// sampling temperature): on-policy the sequence ratio is 1, nothing clips, and sequences of both
/// signs train. (Against quantised weights validate refuses the band:
/// `validation_refuses_what_cannot_run`.)
#[test]
fn gspo_at_its_default_band_trains_both_signs_against_an_f32_sampler() {
    if !crate::common::python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    // The tiny random model's completions all fail and all run to max_tokens: a reward by the
    // number of distinct characters makes a group's rewards differ, so both signs occur.
    cx.write("r/rew.py", "def reward(problem, completion, code, verdict):\n    return float(len(set(completion)))\n");
    let text = crate::engine::spec_with(2, 100, "")
        .replace("finetune: full}", "finetune: lora, lora: {rank: 4}}")
        .replace("backend: {kind: local, threads: 1}", "backend: {kind: local, threads: 1, sample_weights: f32}")
        .replace("reward: {test_timeout_s: 2}", "reward: {kind: python, path: r/rew.py, test_timeout_s: 2}")
        .replace("grpo: {prompts_per_step: 2, group_size: 3, skip_degenerate: false}", "grpo: {prompts_per_step: 2, group_size: 3, skip_degenerate: false, loss: {kind: gspo}}");
    assert!(text.contains("sample_weights: f32") && text.contains("kind: gspo") && text.contains("kind: python"), "{text}");
    cx.write("spec.yaml", &text);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    for m in jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64().unwrap() >= 0) {
        assert_eq!(m["train/clip_fraction"].as_f64(), Some(0.0), "{m}");
        assert!((m["train/ratio_mean"].as_f64().unwrap() - 1.0).abs() < 1e-3, "{m}");
    }
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    let trained = |sign: f64| rollouts.iter().filter(|r| r["skipped"] == false && r["advantage"].as_f64().unwrap() * sign > 0.0).count();
    assert!(trained(1.0) > 0 && trained(-1.0) > 0, "trained sequences: {} positive, {} negative", trained(1.0), trained(-1.0));
}

#[test]
fn the_embedded_trainer_runs_the_variants() {
    let run = |grpo_extra: &str| -> (Vec<Value>, Vec<Value>) {
        let cx = TestContext::new();
        crate::engine::tiny_model(&cx.path().join("tiny"));
        let text = crate::engine::spec_with(2, 100, "").replace("finetune: full}", "finetune: lora, lora: {rank: 4}}").replace(
            "grpo: {prompts_per_step: 2, group_size: 3, skip_degenerate: false}",
            &format!("grpo: {{prompts_per_step: 2, group_size: 3, skip_degenerate: false, {grpo_extra}}}"),
        );
        cx.write("spec.yaml", &text);
        let r = cx.run(&["run", "spec.yaml"]);
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        let dir = only_run(&cx);
        let metrics = jsonl(&dir.join("metrics.jsonl")).into_iter().filter(|m| m["step"].as_i64().unwrap() >= 0).collect();
        (metrics, jsonl(&dir.join("rollouts.jsonl")))
    };

    let (metrics, rollouts) = run("loss: {kind: gspo, clip_low_threshold: 0.5, clip_high_threshold: 2.0}, loss_agg: {kind: token_mean}, overlong: {kind: soft_penalty, cache_tokens: 4}, kl: {coef: 0.1, estimator: k3}");
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        assert_eq!(metric(m, "train/datums"), 6, "{m}");
        assert!(m["train/loss"].as_f64().unwrap().is_finite(), "{m}");
        // k3 is never negative.
        assert!(m["train/kl_reference"].as_f64().unwrap() >= 0.0, "{m}");
        assert!(m["train/entropy"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m.get("train/overlong_masked").is_none());
    }
    // The soft penalty over the last 4 of 12 tokens, on top of the reward strategy's.
    let mut penalised = 0;
    for r in &rollouts {
        let tokens = r["tokens"].as_u64().unwrap() as f64;
        let penalty = if tokens <= 8.0 { 0.0 } else { (8.0 - tokens) / 4.0 };
        let base = match r["status"].as_str().unwrap() {
            "format_error" => -0.1,
            "passed" => 1.0,
            _ => 0.0,
        };
        assert!((r["reward"].as_f64().unwrap() - (base + penalty)).abs() < 1e-9, "{r}");
        penalised += usize::from(penalty < 0.0);
    }
    assert!(penalised > 0, "no completion reached the penalty zone");

    // At step 0 the policy is the base (the adapter's B starts at zero): the estimate is the
    // sampler's Q8_0 weights against the f32 reference, close to 0.
    assert!(metrics[0]["train/kl_reference"].as_f64().unwrap() < 0.05, "{}", metrics[0]);

    // Masked importance weights: the masked share is the clip fraction. The tiny model samples
    // with its own f32 weights (ratios 1 ± 1e-6), so a cap of 1 masks about half the tokens,
    // and a cap every ratio passes masks nothing.
    for (mode, cap) in [("token_mask", 1.0), ("sequence_mask", 1.0), ("token_mask", 1e6)] {
        let (metrics, _) = run(&format!("rollout_correction: {{mode: {mode}, cap: {cap}}}"));
        for m in &metrics {
            let clipped = m["train/clip_fraction"].as_f64().unwrap();
            assert!(m["train/loss"].as_f64().unwrap().is_finite(), "{m}");
            if cap > 100.0 {
                assert_eq!(clipped, 0.0, "{m}");
            } else {
                assert!(clipped > 0.0 && clipped < 1.0, "{mode}: {m}");
            }
        }
    }

    let (metrics, _) = run("overlong: {kind: mask}");
    for m in &metrics {
        let masked = metric(m, "train/overlong_masked");
        let truncated = (m["train/truncated_rate"].as_f64().unwrap() * 6.0).round() as usize;
        assert_eq!(masked, truncated, "{m}");
        assert_eq!(metric(m, "train/datums"), 6 - masked, "{m}");
    }
}

/// Under full fine-tuning the reference is a frozen copy of the base, loaded again from the
/// model's source: at step 0 it is the policy itself.
#[test]
fn under_full_fine_tuning_the_reference_is_a_frozen_copy() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let text = crate::engine::spec_with(2, 100, "").replace("skip_degenerate: false}", "skip_degenerate: false, kl: {coef: 0.1}}");
    assert!(text.contains("finetune: full"));
    cx.write("spec.yaml", &text);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let metrics: Vec<Value> = jsonl(&only_run(&cx).join("metrics.jsonl")).into_iter().filter(|m| m["step"].as_i64().unwrap() >= 0).collect();
    let kl: Vec<f64> = metrics.iter().map(|m| m["train/kl_reference"].as_f64().unwrap()).collect();
    assert!(kl[0].abs() < 0.05, "step 0: {kl:?}");
    assert!(kl.iter().all(|k| k.is_finite()), "{kl:?}");
}

/// The reference stays the base while the policy moves: after an update the trainer's own
/// log-probabilities change and the reference's are still those of the untrained model, under
/// full fine-tuning (a frozen copy loaded from the model's files) and under LoRA (adapter off).
#[test]
fn the_reference_does_not_move_with_the_policy() {
    let cx = TestContext::new();
    let dir = cx.path().join("tiny");
    crate::engine::tiny_model(&dir);
    let datum = Datum {
        model_input: vec![5, 6, 7, 8, 9],
        loss_fn_inputs: rlx::seam::LossFnInputs { target_tokens: vec![6, 7, 8, 9, 10], weights: None, logprobs: Some(vec![-4.0; 5]), advantages: Some(vec![1.0; 5]) },
    };
    let adam = AdamParams { learning_rate: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 0.0 };
    for tuning in [rlx::backend::local::Tuning::Full, rlx::backend::local::Tuning::Lora(rlx::backend::local::LoraConfig::all_linear(4))] {
        let opts = rlx::backend::local::TrainerOptions { tuning: tuning.clone(), ..Default::default() };
        let mut tr = rlx::backend::local::LocalTrainer::new(rlx::backend::local::load(&dir).unwrap(), opts).unwrap();
        let before = tr.forward(std::slice::from_ref(&datum)).unwrap()[0].logprobs.clone();
        for _ in 0..3 {
            tr.forward_backward(std::slice::from_ref(&datum), &LossFn::ImportanceSampling).unwrap();
            tr.optim_step(&adam).unwrap();
        }
        let after = tr.forward(std::slice::from_ref(&datum)).unwrap()[0].logprobs.clone();
        let reference = tr.reference_logprobs(std::slice::from_ref(&datum)).unwrap().remove(0);
        let moved = before.iter().zip(&after).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved > 0.05, "{tuning:?}: the policy did not move ({moved})");
        for (r, b) in reference.iter().zip(&before) {
            assert!((r - b).abs() < 1e-4, "{tuning:?}: reference {r} vs the untrained policy {b}");
        }
    }
}

/// The reference's log-probabilities come from the training pass with the group's prompt packed
/// once per row; they must equal an independent computation: candle's model over each datum on
/// its own, `log_softmax(logits / T)` at the target, at a sampling temperature ≠ 1.
#[test]
fn packed_reference_logprobs_equal_candles_model_per_datum() {
    use candle_core::{DType, Tensor};
    use rlx::backend::local::LoraConfig;
    use rlx::backend::local::model::{Arch, Tuning};
    let temperature = 0.7f32;
    let mut tr = crate::trainer::tempered_trainer(Arch::Qwen2, Tuning::Lora(LoraConfig::all_linear(4)), DType::F32, 9, temperature);
    let vocab = tr.model().config().vocab_size;
    let prompt = [2u32, 3, 4, 5, 6, 7];
    let data: Vec<Datum> = [vec![8, 9, 10], vec![11, 12, 13, 14], vec![8, 15, 16, 17, 18]]
        .into_iter()
        .map(|completion| {
            let all: Vec<u32> = prompt.iter().chain(&completion).copied().collect();
            let n = all.len() - 1;
            let on = |j: usize| j + 1 >= prompt.len();
            Datum {
                model_input: all[..n].to_vec(),
                loss_fn_inputs: rlx::seam::LossFnInputs {
                    target_tokens: all[1..].to_vec(),
                    weights: None,
                    logprobs: Some(vec![-1.0; n]),
                    advantages: Some((0..n).map(|j| if on(j) { 1.0 } else { 0.0 }).collect()),
                },
            }
        })
        .collect();
    let reference = tr.reference_logprobs(&data).unwrap();
    // Untrained LoRA (B = 0): the policy's candle model is the base.
    for (d, r) in data.iter().zip(&reference) {
        let n = d.model_input.len();
        let tokens = Tensor::from_slice(&d.model_input, (1, n), &candle_core::Device::Cpu).unwrap();
        let logits = tr.model().forward(&tokens, 0, None).unwrap().reshape((n, vocab)).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(r.len(), n);
        for (j, row) in logits.iter().enumerate() {
            let want = crate::trainer::log_softmax_at(row, d.loss_fn_inputs.target_tokens[j], f64::from(temperature));
            assert!((f64::from(r[j]) - want).abs() < 1e-4, "datum of {n} tokens, position {j}: {} vs {want}", r[j]);
        }
    }
    // The same after the policy moves: the reference stays where it was.
    let adam = AdamParams { learning_rate: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 0.0 };
    for _ in 0..2 {
        tr.forward_backward(&data, &LossFn::ImportanceSampling).unwrap();
        tr.optim_step(&adam).unwrap();
    }
    assert_eq!(tr.reference_logprobs(&data).unwrap(), reference);
}

/// What a backend cannot run, or what contradicts itself, is refused before the run with the
/// key, the reason and what to use instead.
#[test]
fn validation_refuses_what_cannot_run() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let cases = [
        ("backend: {kind: tinker}", "loss: {kind: gspo}", "`grpo.loss: {kind: gspo}` cannot run on Tinker", "clip_high_threshold: 1.28"),
        // A declared server (`backend.server`) is named with what it lacks (docs/self-hosting.md).
        ("backend: {kind: tinker, server: skyrl}", "loss: {kind: gspo}", "`grpo.loss: {kind: gspo}` cannot run on the `skyrl` Tinker server (`backend.server: skyrl`)", "clip_high_threshold: 1.28"),
        ("backend: {kind: tinker, server: verl_tinker}", "loss: {kind: cispo}", "`grpo.loss: {kind: cispo}` cannot run on the `verl_tinker` Tinker server", "its losses are cross_entropy, importance_sampling, ppo"),
        ("backend: {kind: local}", "loss: {kind: dro}, loss_agg: {kind: token_mean}", "cannot be used with `grpo.loss: {kind: dro}`", "does not scale with the advantage"),
        ("backend: {kind: local}", "overlong: {kind: soft_penalty, cache_tokens: 12}", "must be below `sampling.max_tokens` (12)", "cache_tokens"),
        ("backend: {kind: local}", "dynamic_sampling: {}", "`grpo.skip_degenerate` is false", "remove `skip_degenerate: false`"),
        // k3 has no correct advantage form: refused there, on Tinker (where it is the only form)
        // and locally when asked for.
        ("backend: {kind: tinker}", "kl: {coef: 0.05, estimator: k3}", "k3 cannot be applied as an advantage penalty", "use `estimator: k1` on Tinker"),
        ("backend: {kind: local}", "kl: {coef: 0.05, estimator: k3, form: advantage}", "k3 cannot be applied as an advantage penalty", "leave `form` out"),
        ("backend: {kind: tinker}", "kl: {coef: 0.05, form: loss}", "`grpo.kl.form: loss` cannot run on Tinker", "form: advantage"),
        ("backend: {kind: local}", "kl: {coef: 0.05, estimator: k3, discount: 0.9}", "`grpo.kl.discount` shapes the advantage penalty", "use `estimator: k1`"),
        ("backend: {kind: local}", "loss: {kind: ppo}, rollout_correction: {mode: token_truncate}", "`grpo.rollout_correction` weights `importance_sampling`'s ratio, not `ppo`'s", "loss: {kind: importance_sampling}"),
        ("backend: {kind: tinker}", "rollout_correction: {mode: token_mask}", "masked importance weights cannot run on Tinker", "mode: token_truncate"),
        // GSPO at the paper's band against a sampler on quantised weights (the local default).
        ("backend: {kind: local}", "loss: {kind: gspo}", "GSPO's clip band [0.9997, 1.0004] cannot hold its sequence ratio", "`backend.sample_weights: f32`"),
    ];
    for (backend, grpo, error, hint) in cases {
        let text = crate::engine::spec_with(1, 1, "")
            .replace("backend: {kind: local, threads: 1}", backend)
            .replace("finetune: full}", "finetune: lora}")
            .replace("skip_degenerate: false}", &format!("skip_degenerate: false, {grpo}}}"));
        cx.write("spec.yaml", &text);
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, 2, "{grpo}: {}", r.stderr);
        assert!(r.stderr.contains(error) && r.stderr.contains(hint), "{grpo}: {}", r.stderr);
    }
    // SkyRL's JAX engine takes LoRA ranks up to its `max_lora_rank` (32 by default).
    let rank = crate::engine::spec_with(1, 1, "").replace("backend: {kind: local, threads: 1}", "backend: {kind: tinker, server: skyrl}").replace("finetune: full}", "finetune: lora, lora: {rank: 64}}");
    cx.write("spec.yaml", &rank);
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("LoRA rank 64 is above the `skyrl` Tinker server's default `max_lora_rank` of 32") && r.stderr.contains("model.lora.rank"), "{}", r.stderr);
    // The same variants on the local backend, where they run, validate.
    let ok = crate::engine::spec_with(1, 1, "")
        .replace("backend: {kind: local, threads: 1}", "backend: {kind: local, threads: 1, sample_weights: f32}")
        .replace("skip_degenerate: false}", "loss: {kind: gspo}, loss_agg: {kind: constant}, overlong: {kind: mask}, dynamic_sampling: {max_extra_rounds: 2}, kl: {coef: 0.01, estimator: k3}}");
    assert!(ok.contains("sample_weights: f32"));
    cx.write("spec.yaml", &ok);
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// On Tinker the KL reference is a sampling client of the base model (`compute_logprobs`):
/// through `rlx serve`, its log-probabilities equal the untrained LoRA policy's (B = 0), and a
/// run with `grpo.kl` trains and reports the estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_tinker_the_reference_is_a_base_model_sampler() {
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    crate::engine::tiny_model(&model);
    let served = crate::tinker_sdk::Server::start(&cx, &model, &["--long-poll-s", "2"]);
    let policy = rlx::backend::tinker::open(crate::tinker::options(&served.url, &model)).await.unwrap();
    let Policy::Trainable(trainer) = policy else { panic!("Tinker policies train") };
    let datum = Datum {
        model_input: vec![5, 6, 7, 8, 9],
        loss_fn_inputs: rlx::seam::LossFnInputs { target_tokens: vec![6, 7, 8, 9, 10], weights: None, logprobs: None, advantages: None },
    };
    let reference = trainer.reference_logprobs(vec![datum.clone(), datum.clone()]).await.unwrap();
    let policy = trainer.forward(vec![datum], LossFn::CrossEntropy).await.unwrap();
    assert_eq!(reference.len(), 2);
    assert_eq!(reference[0], reference[1]);
    assert_eq!(reference[0].len(), 5);
    for (r, p) in reference[0].iter().zip(&policy.outputs[0].logprobs) {
        assert!(r.is_finite() && (r - p).abs() < 1e-4, "reference {r} vs untrained policy {p}");
    }
    let records = served.record();
    assert_eq!(records.iter().filter(|r| r["path"] == "/api/v1/create_sampling_session").count(), 1, "one reference session, reused");

    // A run with the KL penalty through Tinker.
    let spec = crate::engine::spec_with(1, 100, "")
        .replace("model: {base: ./tiny, finetune: full}", "model: {base: ./tiny, finetune: lora, lora: {rank: 4, alpha: 8}}")
        .replace("backend: {kind: local, threads: 1}", &format!("backend: {{kind: tinker, base_url: '{}', max_in_flight: 4}}", served.url))
        .replace("skip_degenerate: false}", "skip_degenerate: false, loss: {kind: ppo, clip_high_threshold: 1.28}, loss_agg: {kind: sequence_mean}, kl: {coef: 0.05}}");
    cx.write("spec.yaml", &spec);
    let out = tokio::task::block_in_place(|| cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = jsonl(&only_run(&cx).join("metrics.jsonl")).into_iter().find(|m| m["step"] == 0).unwrap();
    assert!(m["train/kl_reference"].is_number() && m["train/loss"].is_number(), "{m}");
}

/// Pipelined (`max_steps_off_policy: 1`) on a trainer that runs elsewhere, groups
/// stream: problems are drawn in the sequential run's order, the step takes the first
/// informative groups that arrive, and one step's groups are drawn ahead (plus one for each
/// group set aside); every group trains at most one version behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_dynamic_sampling_draws_what_the_sequential_run_draws() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let (_, sequential) = run(&cx, &dynamic_plan(&cx, 10), None).await;
    let cx2 = TestContext::new();
    crate::engine::tiny_model(&cx2.path().join("tiny"));
    let plan = dynamic_plan_with(&cx2, 10, ", max_steps_off_policy: 1");
    let (_, pipelined) = run(&cx2, &plan, None).await;
    assert_eq!(pipelined[..sequential.len()], sequential[..], "the same problems in the same order");
    let metrics = jsonl(&cx2.path().join("runs").join(&plan.run_id).join("metrics.jsonl"));
    // Ahead: one step's groups (k · prompts_per_step), plus one per group the last step set aside.
    let last_set_aside = metric(metrics.last().unwrap(), "train/groups_discarded");
    assert!(pipelined.len() <= sequential.len() + 3 + last_set_aside, "drawn ahead: {} more", pipelined.len() - sequential.len());
    for m in &metrics {
        assert!(metric(m, "train/off_policy_steps") <= 1 && metric(m, "train/staleness_max") <= 1, "{m}");
        assert_eq!(metric(m, "train/groups") - metric(m, "train/groups_discarded"), 3, "full: {m}");
    }
}

/// `loss_agg: sequence_mean` reaches the trainer as advantages divided by N·L_i: each datum's
/// advantage times the step's datum count and its own sampled-token count is the group's
/// mean-centred reward (±0.5: two of four samples right).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_mean_divides_each_datum_by_its_length_and_the_datum_count() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let (trainer, _) = run(&cx, &dynamic_plan_with(&cx, 10, ", loss_agg: {kind: sequence_mean}"), None).await;
    let calls = trainer.inputs.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    for data in calls {
        let n = data.len() as f32;
        let lens: Vec<usize> = data.iter().map(|(q, _)| q.iter().filter(|&&x| x != 0.0).count()).collect();
        assert!(lens.iter().any(|&l| l != lens[0]), "right and wrong answers differ in length: {lens:?}");
        for ((q, a), l) in data.iter().zip(&lens) {
            for (x, y) in q.iter().zip(a) {
                if *x == 0.0 {
                    assert_eq!(*y, 0.0, "context tokens keep a zero advantage");
                } else {
                    assert!(((y * n * *l as f32).abs() - 0.5).abs() < 1e-5, "A·N·L = {} (N {n}, L {l})", y * n * *l as f32);
                }
            }
        }
    }
}

/// With a Python reward the function is called once per group as rounds come in, and its values
/// stay with their groups across rounds: the rounds follow the scripted rule and the `tests`
/// component's mean is the share of right answers over every group drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_sampling_with_a_python_reward() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let plan = dynamic_plan_with(&cx, 10, ", python");
    let (trainer, asked) = run(&cx, &plan, None).await;
    let metrics = jsonl(&cx.path().join("runs").join(&plan.run_id).join("metrics.jsonl"));
    let mut at = 0;
    for m in &metrics {
        let drawn = metric(m, "train/problems_drawn");
        let informative = asked[at..at + drawn].iter().filter(|&&i| is_informative(i)).count();
        assert_eq!((informative, metric(m, "train/groups") - metric(m, "train/groups_discarded")), (3, 3), "{m}");
        at += drawn;
        let right = m["train/correct_mean"].as_f64().unwrap();
        assert!((m["reward/tests"].as_f64().unwrap() - right).abs() < 1e-9, "{m}");
        assert_eq!(m["train/reward_failures"], 0.0, "{m}");
    }
    assert_eq!(*trainer.datums.lock().unwrap(), vec![12, 12, 12]);
}

/// The loss form of `grpo.kl` on a tiny model: at one position, every vocabulary token y is a
/// datum whose KL coefficient is π(y) (so the sampled sum is the exact expectation over y ∼ π),
/// and the gradient the trainer applies must equal ∇KL(π‖π_ref) at that position, by central
/// differences of the exact KL (both estimators).
#[test]
fn the_kl_loss_term_follows_the_gradient_of_kl_to_the_reference() {
    use candle_core::{DType, Device, Tensor};
    use rlx::backend::local::model::{Arch, Tuning, random_weights};
    use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions};
    use rlx::seam::{KlKind, KlLoss, LossFnInputs};
    let cfg = crate::trainer::tiny_config(Arch::Qwen2);
    let vocab = cfg.vocab_size as u32;
    for kind in [KlKind::K1, KlKind::K3] {
        let w = random_weights(&cfg, 0.2, 4, DType::F64).unwrap();
        let opts = TrainerOptions { tuning: Tuning::Lora(LoraConfig::all_linear(4)), seed: 4, max_tokens_per_microbatch: 4096, ..Default::default() };
        let mut tr = LocalTrainer::from_weights(cfg.clone(), w, None, opts, "random".into()).unwrap();
        // Move the adapters off zero: π ≠ π_ref. Fixed values rather than `randn_like` (candle's
        // unseeded RNG): with a fresh draw each run, an entry whose gradient sits at the central
        // difference's f32 noise floor failed the check now and then.
        for (name, v) in tr.params() {
            if name.ends_with("lora_B.weight") {
                let n = v.elem_count();
                let vals: Vec<f64> = (0..n).map(|i| 0.5 * ((i as f64 * 0.618_033_988_7 + name.len() as f64 * 0.1).fract() - 0.5)).collect();
                v.set(&Tensor::from_vec(vals, v.shape(), &Device::Cpu).unwrap()).unwrap();
            }
        }
        let datum = |y: u32, q: f32| Datum {
            model_input: vec![2, 3],
            loss_fn_inputs: LossFnInputs { target_tokens: vec![3, y], weights: None, logprobs: Some(vec![0.0, q]), advantages: Some(vec![0.0, 0.0]) },
        };
        let all: Vec<Datum> = (0..vocab).map(|y| datum(y, 0.0)).collect();
        let kl_at = |tr: &mut LocalTrainer| -> f64 {
            let logp: Vec<f64> = tr.forward(&all).unwrap().iter().map(|o| f64::from(o.logprobs[1])).collect();
            let reference: Vec<f64> = tr.reference_logprobs(&all).unwrap().iter().map(|r| f64::from(r[1])).collect();
            logp.iter().zip(&reference).map(|(l, r)| l.exp() * (l - r)).sum()
        };
        let kl0 = kl_at(&mut tr);
        assert!(kl0 > 1e-3, "the policy must differ from the reference ({kl0})");
        // On-policy datums (q = logp) weighted by π(y).
        let logp: Vec<f32> = tr.forward(&all).unwrap().iter().map(|o| o.logprobs[1]).collect();
        let data: Vec<Datum> = (0..vocab).map(|y| datum(y, logp[y as usize])).collect();
        let reference = tr.reference_logprobs(&data).unwrap();
        let coef = logp.iter().map(|&l| vec![0.0, l.exp()]).collect();
        let kl = KlLoss { estimator: kind, reference, coef };
        tr.forward_backward_with(&data, &LossFn::ImportanceSampling, Some(&kl)).unwrap();
        let grads: std::collections::HashMap<String, Tensor> = tr.grads().unwrap().map(|(n, g)| (n.to_string(), g.clone())).collect();
        let params: Vec<(String, candle_core::Var)> = tr.params().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let mut checked = 0;
        for (name, var) in params.iter().filter(|(n, _)| n.contains("lora")).step_by(5) {
            let flat = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let g = grads[name].flatten_all().unwrap().to_vec1::<f64>().unwrap();
            for idx in [0, flat.len() / 3] {
                let h = 1e-3;
                let mut at = |x: f64| {
                    let mut v = flat.clone();
                    v[idx] += x;
                    var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu).unwrap()).unwrap();
                    kl_at(&mut tr)
                };
                let fd = (at(h) - at(-h)) / (2.0 * h);
                var.set(&Tensor::from_vec(flat.clone(), var.shape(), &Device::Cpu).unwrap()).unwrap();
                // Forward log-probabilities come back as f32: a 2% tolerance covers their rounding
                // in the differences (a wrong estimator's gradient is off by far more: k3 in the
                // advantage form is 0.01–0.14× of it).
                let scale = g.iter().fold(0f64, |m, x| m.max(x.abs()));
                assert!((fd - g[idx]).abs() < 2e-2 * (fd.abs().max(g[idx].abs()) + 0.1 * scale), "{kind:?} {name}[{idx}]: applied {} vs ∇KL {fd} (largest entry {scale})", g[idx]);
                checked += usize::from(fd.abs() > 1e-6);
            }
        }
        assert!(checked >= 3, "{kind:?}: only {checked} non-zero entries checked");
    }
}

/// β > 0 keeps the policy closer to the base than β = 0, for both estimators in their default
/// forms (k1 on the advantage, k3 as a loss term): a policy-gradient loop on a tiny model whose
/// reward favours one token, sampled on-policy from the trainer's own sampler, with the exact
/// KL(π‖π_ref) over the vocabulary at the first sampled position measured at the end.
#[test]
fn a_kl_penalty_keeps_the_policy_near_the_base() {
    use candle_core::DType;
    use rlx::backend::local::model::{Arch, Tuning, random_weights};
    use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions};
    use rlx::seam::{KlKind, KlLoss, make_datum};
    let cfg = crate::trainer::tiny_config(Arch::Qwen2);
    let prompt = [2u32, 3];
    let adam = AdamParams { learning_rate: 2e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, grad_clip_norm: 0.0 };
    let drift = |kind: KlKind, beta: f32| -> f64 {
        let w = random_weights(&cfg, 0.2, 9, DType::F32).unwrap();
        let opts = TrainerOptions { tuning: Tuning::Lora(LoraConfig::all_linear(4)), seed: 9, max_tokens_per_microbatch: 4096, ..Default::default() };
        let mut tr = LocalTrainer::from_weights(cfg.clone(), w, None, opts, "random".into()).unwrap();
        for step in 0..8u64 {
            let s = tr.sampler().unwrap();
            let p = SamplingParams { max_tokens: 4, seed: Some(step), ..Default::default() };
            let seqs = s.sample(&prompt, 16, &p).unwrap();
            // Reward: how often token 7 appears; advantages centred over the group.
            let rewards: Vec<f64> = seqs.iter().map(|q| q.tokens.iter().filter(|&&t| t == 7).count() as f64).collect();
            let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
            let mut data: Vec<Datum> = seqs.iter().zip(&rewards).map(|(q, r)| make_datum(&[&prompt[..], &q.tokens].concat(), &q.logprobs, prompt.len(), r - mean)).collect();
            let reference = tr.reference_logprobs(&data).unwrap();
            let sampled: Vec<Vec<bool>> = data.iter().map(|d| d.loss_fn_inputs.advantages.as_ref().unwrap().iter().enumerate().map(|(i, _)| i + 1 >= prompt.len()).collect()).collect();
            let kl = match kind {
                KlKind::K1 => {
                    // The advantage form: A_t −= β·(q_t − ref_t) on sampled tokens.
                    for ((d, r), m) in data.iter_mut().zip(&reference).zip(&sampled) {
                        let q = d.loss_fn_inputs.logprobs.clone().unwrap();
                        for (t, a) in d.loss_fn_inputs.advantages.as_mut().unwrap().iter_mut().enumerate() {
                            if m[t] {
                                *a -= beta * (q[t] - r[t]);
                            }
                        }
                    }
                    None
                }
                KlKind::K3 => Some(KlLoss { estimator: kind, coef: sampled.iter().map(|m| m.iter().map(|&x| if x { beta } else { 0.0 }).collect()).collect(), reference }),
            };
            tr.forward_backward_with(&data, &LossFn::ImportanceSampling, kl.as_ref()).unwrap();
            tr.optim_step(&adam).unwrap();
        }
        // Exact KL(π‖π_ref) at the first sampled position.
        let all: Vec<Datum> = (0..cfg.vocab_size as u32).map(|y| make_datum(&[2, 3, y], &[0.0], 2, 0.0)).collect();
        let logp = tr.forward(&all).unwrap();
        let reference = tr.reference_logprobs(&all).unwrap();
        logp.iter().zip(&reference).map(|(l, r)| {
            let (l, r) = (f64::from(l.logprobs[1]), f64::from(r[1]));
            l.exp() * (l - r)
        }).sum()
    };
    for kind in [KlKind::K1, KlKind::K3] {
        let (free, held) = (drift(kind, 0.0), drift(kind, 1.0));
        assert!(free > 0.05, "{kind:?}: the free policy did not move ({free})");
        assert!(held < 0.5 * free, "{kind:?}: KL to the base after training with β = 1 is {held}, with β = 0 {free}");
        #[allow(clippy::print_stderr)] // shown with --nocapture: the figures docs/variants.md quotes
        {
            eprintln!("{kind:?}: KL(π‖π_ref) after 8 steps: β = 0 {free:.4}, β = 1 {held:.4}");
        }
    }
}
