//! Run directories written before the plan module (run-directory `schema_version` 1, whose
//! `resolved.json` left defaults `null`) are still read: `tests/fixtures/run-v1` is a real one,
//! written by rlx 9f3343a on the tiny model of `engine.rs` (`engine::write_tiny_model`) with the
//! inputs beside it, then cut back to an interruption after step 1 (status `interrupted`, records
//! and checkpoints of later steps removed), as a stopped run leaves it.

use std::path::Path;

use serde_json::Value;

use crate::common::{TestContext, jsonl, repo};

const RUN_ID: &str = "v1-a0c26030fe";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The fixture laid out in a fresh directory: its inputs, the tiny model, and the run directory
/// with `provenance.json` pointing at the spec's new place (resume plans the spec where it was).
fn fixture(cx: &TestContext) -> std::path::PathBuf {
    let src = repo().join("tests/fixtures/run-v1");
    copy_dir(&src.join("inputs"), cx.path());
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let run = cx.path().join("runs").join(RUN_ID);
    copy_dir(&src.join("run"), &run);
    let prov = run.join("provenance.json");
    let mut p: Value = serde_json::from_slice(&std::fs::read(&prov).unwrap()).unwrap();
    p["spec_path"] = cx.path().join("spec.yaml").display().to_string().into();
    std::fs::write(&prov, serde_json::to_vec_pretty(&p).unwrap()).unwrap();
    run
}

#[test]
fn a_version_1_resolved_json_reads_as_the_current_version() {
    let v1: Value = serde_json::from_slice(&std::fs::read(repo().join("tests/fixtures/run-v1/run/resolved.json")).unwrap()).unwrap();
    assert!(v1.get("schema_version").is_none() && v1["eval"].get("samples").is_none(), "the fixture is version 1");
    let now = rlx::plan::record::upgrade(v1).unwrap();
    assert_eq!(now["schema_version"], rlx::plan::record::SCHEMA_VERSION);
    assert_eq!(now["eval"]["samples"], 1);
    // rlx before `grpo.learner_temperature` scored at temperature 1.
    assert_eq!(now["grpo"]["learner_temperature"], 1.0);
    assert_eq!(now["backend"]["max_tokens_per_microbatch"], rlx::spec::defaults::MAX_TOKENS_PER_MICROBATCH);
}

#[test]
fn a_version_1_run_directory_is_compared_and_resumed() {
    let cx = TestContext::new();
    let run = fixture(&cx);
    // Same inputs, same run id: the plan module did not change what identifies an experiment.
    let v = cx.run(&["validate", "spec.yaml"]);
    assert!(v.stderr.contains(RUN_ID) || v.stdout.contains(RUN_ID), "{}{}", v.stdout, v.stderr);

    let c = cx.run(&["compare", run.to_str().unwrap(), "--format", "json"]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    let report: Value = serde_json::from_str(&c.stdout).unwrap();
    assert!(report.to_string().contains(RUN_ID), "{}", c.stdout);

    let r = cx.run(&["run", "--resume", run.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let steps: Vec<i64> = jsonl(&run.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2, 3], "steps 2 and 3 trained once each after the resume");
    let status: Value = serde_json::from_slice(&std::fs::read(run.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "finished");
    let events = jsonl(&run.join("events.jsonl"));
    assert!(events.iter().any(|e| e["event"] == "resume"), "{events:?}");
}

/// A run reopened after a default changed goes on with the value its `resolved.json` recorded,
/// and the plan carries it (the engine reads the plan only): rlx before
/// `grpo.learner_temperature` (version 2) scored at 1, today's default is the sampling
/// temperature.
#[test]
fn a_reopened_run_is_planned_with_the_learner_temperature_it_recorded() {
    let cx = TestContext::new();
    // `log.root` is relative to the current directory: absolute here, inside the test's own.
    let root = cx.path().join("runs");
    let spec = cx.write("spec.yaml", &format!("{}sampling: {{temperature: 0.7}}\nlog: {{root: '{}'}}\n", crate::common::MINIMAL, root.display()));
    let fresh = rlx::plan::plan(&spec, &[]).unwrap();
    assert!((fresh.grpo.learner_temperature - 0.7).abs() < 1e-6, "a new run scores at the sampling temperature");
    let dir = fresh.run_dir();
    assert!(dir.starts_with(cx.path()), "{}", dir.display());
    let mut v2 = rlx::plan::record::to_json(&fresh);
    v2["schema_version"] = 2.into();
    v2["grpo"].as_object_mut().unwrap().remove("learner_temperature");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(rlx::plan::record::FILE), serde_json::to_vec(&v2).unwrap()).unwrap();
    let reopened = rlx::plan::plan(&spec, &[]).unwrap();
    assert_eq!(reopened.run_id, fresh.run_id);
    assert_eq!(reopened.grpo.learner_temperature, 1.0, "the recorded run scored at 1");
    assert_eq!(reopened.backend_options().learner_temperature, 1.0, "the trainer is opened with it");
    assert_eq!(rlx::plan::record::to_json(&reopened)["grpo"]["learner_temperature"], 1.0);
}
