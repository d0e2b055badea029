//! The run directory: files of design §5, atomic JSON, whole JSONL lines, torn-line tolerance,
//! typed readers, and refusing a directory written by a newer rlx.

use crate::common::TestContext;
use rlx::runlog::metrics::{eval, time, train};
use rlx::runlog::{self, EventRecord, MetricsLine, PromptTokens, RunDir, State, files};
use serde_json::json;

fn plan(cx: &TestContext) -> rlx::plan::Plan {
    let mut p = rlx::plan::plan(&cx.path().join("spec.yaml"), &[rlx::spec::overrides::parse("lr=2e-5").unwrap()]).unwrap();
    p.log.root = cx.path().join("runs");
    p
}

#[test]
fn create_writes_the_self_describing_files() {
    let cx = TestContext::new();
    let p = plan(&cx);
    let dir = RunDir::create(&p).unwrap();
    assert_eq!(dir.path(), cx.path().join("runs").join(&p.run_id));
    assert_eq!(std::fs::read_to_string(dir.file(files::SPEC)).unwrap(), crate::common::MINIMAL);
    let resolved: serde_json::Value = dir.read_json(files::RESOLVED).unwrap().unwrap();
    assert_eq!(resolved["optimizer"]["learning_rate"], 2e-5);
    assert_eq!(resolved["grpo"]["group_size"], 8, "defaults are written out");
    assert!(resolved["prompt"]["user"].as_str().unwrap().starts_with('/'), "paths are absolute");
    let prov: serde_json::Value = dir.read_json(files::PROVENANCE).unwrap().unwrap();
    assert_eq!(prov["overrides"][0], "optimizer.learning_rate=2e-5");
    assert_eq!(prov["run_id"], p.run_id.as_str());
    assert_eq!(prov["templates"][0]["role"], "prompt.user");
    assert_eq!(prov["templates"][0]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(prov["datasets"][0]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(prov["rlx_version"], env!("CARGO_PKG_VERSION"));
    // The same file, typed.
    let typed = dir.provenance().unwrap();
    assert_eq!(typed.run_id, p.run_id);
    assert_eq!(typed.overrides, vec!["optimizer.learning_rate=2e-5".to_string()]);
    assert_eq!(typed.templates[0].role, "prompt.user");
    assert_eq!(typed.datasets[0].split, runlog::Split::Train);
    assert!(typed.data.is_none() && typed.prompt_tokens.is_none() && typed.sandbox.is_none());
    let st = dir.status().unwrap().unwrap();
    assert_eq!(st.state, State::Running);
    assert_eq!(st.max_steps, 3);
    assert_eq!(st.schema_version, runlog::SCHEMA_VERSION);

    // Re-creating the same experiment reopens it (resume), keeping its state.
    let mut s2 = st.clone();
    s2.steps_done = 2;
    dir.set_status(&s2).unwrap();
    let again = RunDir::create(&p).unwrap();
    assert_eq!(again.status().unwrap().unwrap().steps_done, 2);
}

#[test]
fn the_plan_applies_the_fusion_pool_and_the_tracker_names_and_resolved_json_records_them() {
    let cx = TestContext::new();
    let sets = ["sandbox.kind=fusion", "log.sinks.wandb.mode=offline", "log.sinks.mlflow.tracking_uri=http://127.0.0.1:9"];
    let overrides: Vec<_> = sets.iter().map(|o| rlx::spec::overrides::parse(o).unwrap()).collect();
    let mut p = rlx::plan::plan(&cx.path().join("spec.yaml"), &overrides).unwrap();
    p.log.root = cx.path().join("runs");
    assert_eq!(p.sandbox.concurrency, Some(32), "the plan, not the sandbox, applies the pool size");
    let w = p.log.trackers.wandb.as_ref().expect("on");
    assert_eq!((w.project.as_str(), w.name.as_str()), (p.name.as_str(), p.run_id.as_str()));
    assert_eq!(p.log.trackers.mlflow.as_ref().expect("on").experiment, p.name);
    assert!(p.log.trackers.tensorboard.is_none());
    let dir = RunDir::create(&p).unwrap();
    let resolved: serde_json::Value = dir.read_json(files::RESOLVED).unwrap().unwrap();
    assert_eq!(resolved["sandbox"]["concurrency"], 32);
    assert_eq!(resolved["log"]["sinks"]["wandb"]["project"], p.name.as_str());
    assert_eq!(resolved["log"]["sinks"]["wandb"]["name"], p.run_id.as_str());
    assert_eq!(resolved["log"]["sinks"]["mlflow"]["experiment"], p.name.as_str());
    // A server URL may carry credentials: it stays what the spec wrote.
    assert_eq!(resolved["log"]["sinks"]["mlflow"]["tracking_uri"], "http://127.0.0.1:9");
    // The local pool's size is the machine's: not written.
    let local = rlx::plan::plan(&cx.path().join("spec.yaml"), &[]).unwrap();
    assert_eq!(local.sandbox.concurrency, None);
}

#[test]
fn metrics_survive_a_torn_write() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    let mut m = dir.jsonl(files::METRICS).unwrap();
    for step in 0..3 {
        m.append(&json!({"step": step, "train/reward_mean": 0.1 * f64::from(step)})).unwrap();
    }
    m.sync().unwrap();
    drop(m);
    // Simulate a crash in the middle of writing step 3.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.file(files::METRICS)).unwrap();
    f.write_all(br#"{"step": 3, "train/rew"#).unwrap();
    drop(f);
    let read = runlog::read_jsonl::<serde_json::Value>(&dir.file(files::METRICS)).unwrap();
    assert_eq!(read.rows.len(), 3);
    assert_eq!(read.torn_line, Some(4));
    // Resuming appends cleanly after the last whole line.
    let mut m = dir.jsonl(files::METRICS).unwrap();
    m.append(&json!({"step": 3})).unwrap();
    let read = runlog::read_jsonl::<serde_json::Value>(&dir.file(files::METRICS)).unwrap();
    assert_eq!(read.rows.iter().map(|r| r["step"].as_i64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    // The typed reader sees the same lines.
    let typed = dir.metrics().unwrap();
    assert_eq!(typed.rows.iter().map(|l| l.step).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(typed.rows[2].get(train::REWARD_MEAN), Some(0.2));
    assert_eq!(typed.rows[3].get(train::REWARD_MEAN), None);
}

#[test]
fn typed_records_are_written_and_read_back() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    let mut m = dir.jsonl(files::METRICS).unwrap();
    let baseline = MetricsLine::new(-1, [(eval::pass_at(1), 0.25), (time::EVAL_S.to_string(), 3.5)].into());
    m.append(&baseline).unwrap();
    drop(m);
    let text = std::fs::read_to_string(dir.file(files::METRICS)).unwrap();
    assert_eq!(text, "{\"step\":-1,\"eval/pass@1\":0.25,\"time/eval_s\":3.5}\n");
    assert_eq!(dir.metrics().unwrap().rows, vec![baseline]);

    let mut e = dir.jsonl(files::EVENTS).unwrap();
    e.append(&EventRecord::start(0)).unwrap();
    e.append(&EventRecord::failed(&std::io::Error::other("sandbox gone"))).unwrap();
    drop(e);
    let events = dir.events().unwrap().rows;
    assert!(matches!(&events[..], [EventRecord::Start { .. }, EventRecord::Failed { error, .. }] if error == "sandbox gone"), "{events:?}");
}

#[test]
fn provenance_updates_keep_what_was_there() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    let before = dir.provenance().unwrap();
    dir.update_provenance(|p| p.prompt_tokens = Some(PromptTokens { min: Some(3), mean: 4.5, max: Some(6), problems: 2 })).unwrap();
    dir.update_provenance(|p| p.sandbox = Some(json!({"kind": "fusion", "url": "http://127.0.0.1:8080"}))).unwrap();
    let after = dir.provenance().unwrap();
    assert_eq!(after.prompt_tokens.as_ref().unwrap().max, Some(6));
    assert_eq!(after.sandbox.as_ref().unwrap()["kind"], "fusion");
    assert_eq!(runlog::Provenance { prompt_tokens: None, sandbox: None, ..after }, before);
    // Readers of the raw JSON (older tools, jq) see the keys where the engine used to put them.
    let raw: serde_json::Value = dir.read_json(files::PROVENANCE).unwrap().unwrap();
    assert_eq!(raw["prompt_tokens"]["min"], 3);
    assert!(raw.get("data").is_none());
}

#[test]
fn a_run_directory_from_a_newer_rlx_is_refused() {
    let cx = TestContext::new();
    let p = plan(&cx);
    let dir = RunDir::create(&p).unwrap();
    let mut st: serde_json::Value = dir.read_json(files::STATUS).unwrap().unwrap();
    st["schema_version"] = json!(runlog::SCHEMA_VERSION + 1);
    dir.write_json(files::STATUS, &st).unwrap();
    let err = RunDir::open(dir.path()).unwrap_err();
    assert!(matches!(err, runlog::Error::NewerFormat { found, .. } if found == runlog::SCHEMA_VERSION + 1), "{err}");
    assert!(err.to_string().ends_with("upgrade rlx"), "{err}");
    // Nor does a re-run of the same experiment touch it.
    assert!(matches!(RunDir::create(&p).unwrap_err(), runlog::Error::NewerFormat { .. }));
}

#[test]
fn readers_see_whole_lines_while_a_writer_appends() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    let path = dir.file(files::ROLLOUTS);
    let big = "x".repeat(20_000);
    let mut w = runlog::JsonlWriter::open(&path).unwrap();
    // A second writer on the same file is refused rather than allowed to interleave or repair.
    let busy = runlog::JsonlWriter::open(&path).unwrap_err();
    assert!(busy.to_string().contains("being written by another process"), "{busy}");
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = 0;
            for _ in 0..200 {
                let r = runlog::read_jsonl::<serde_json::Value>(&path).expect("a concurrent read never sees corruption");
                assert!(r.rows.len() >= last);
                last = r.rows.len();
            }
        });
        for i in 0..200 {
            w.append(&json!({"i": i, "text": big})).unwrap();
        }
        reader.join().unwrap();
    });
    drop(w);
    let read = runlog::read_jsonl::<serde_json::Value>(&path).unwrap();
    assert_eq!(read.rows.len(), 200);
    assert_eq!(read.torn_line, None);
    assert!(runlog::JsonlWriter::open(&path).is_ok(), "the lock is released with the writer");
}

#[test]
fn a_directory_of_another_run_is_refused() {
    let cx = TestContext::new();
    let p = plan(&cx);
    let dir = RunDir::create(&p).unwrap();
    let mut st = dir.status().unwrap().unwrap();
    st.run_id = "someone-else".into();
    dir.set_status(&st).unwrap();
    let err = RunDir::create(&p).unwrap_err();
    assert!(err.to_string().contains("holds run `someone-else`"), "{err}");
    assert!(RunDir::open(&cx.path().join("nope")).is_err());
}

#[test]
fn logs_go_to_the_run_log_once_attached() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    runlog::logfile::attach(&dir.file(files::LOG)).unwrap();
    use std::io::Write;
    let mut sink = runlog::logfile::LogSink;
    sink.write_all(b"step 0 done\n").unwrap();
    runlog::logfile::detach();
    sink.write_all(b"after detach\n").unwrap();
    let log = std::fs::read_to_string(dir.file(files::LOG)).unwrap();
    assert_eq!(log, "step 0 done\n");
}

#[test]
fn one_process_per_run() {
    let cx = TestContext::new();
    let dir = RunDir::create(&plan(&cx)).unwrap();
    let held = dir.lock().unwrap();
    let err = dir.lock().unwrap_err();
    assert!(err.to_string().contains("being written by another process"), "{err}");
    drop(held);
    assert!(dir.lock().is_ok());
}
