//! `rlx sweep`: grids, stable run ids, skipping finished runs, the sweep record.

use crate::common::{TestContext, repo};
use rlx::runlog::sweep::SweepDir;
use rlx::runlog::{RunDir, State};

fn ids(stdout: &str) -> Vec<String> {
    stdout.lines().skip(1).filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect()
}

#[test]
fn dry_run_lists_the_grid() {
    let cx = TestContext::new();
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "group_size=4,8", "seed=[0,1,2]", "steps=2", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("12 run(s) (seed is a replicate axis)"), "{}", r.stdout);
    let first = ids(&r.stdout);
    assert_eq!(first.len(), 12);
    assert_eq!(first.iter().collect::<std::collections::BTreeSet<_>>().len(), 12, "distinct runs");
    assert!(r.stdout.contains("grpo.group_size=4 optimizer.learning_rate=1e-5 seed=0"), "{}", r.stdout);
    assert!(r.stdout.lines().skip(1).all(|l| l.contains("new")));
    // Stable across invocations, whatever the syntax of the axes.
    let again = cx.run(&["sweep", "spec.yaml", "lr=1e-5,4e-5", "group_size=[4,8]", "seed=0,1,2", "steps=2", "--dry-run"]);
    assert_eq!(ids(&again.stdout), first);
    // A dry run writes nothing.
    assert!(!cx.path().join("sweeps").exists());
}

#[test]
fn default_spec_from_the_repository_root() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlx"))
        .current_dir(repo())
        .args(["sweep", "lr=[1e-5,4e-5]", "--dry-run"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("sweep default-sweep-"), "{stdout}");
    assert_eq!(ids(&stdout).len(), 2);
}

#[test]
fn finished_runs_are_skipped_and_the_sweep_is_recorded() {
    let cx = TestContext::new();
    let dry = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "--dry-run"]);
    let members = ids(&dry.stdout);
    // Mark the first member finished, as a completed run would.
    let spec = cx.path().join("spec.yaml");
    let ov = rlx::spec::overrides::parse("lr=1e-5").unwrap();
    let plan = rlx::plan::plan(&spec, &[ov]).unwrap();
    assert_eq!(plan.run_id, members[0]);
    let mut plan_in_cx = plan.clone();
    plan_in_cx.log.root = cx.path().join("runs");
    let dir = RunDir::create(&plan_in_cx).unwrap();
    let mut st = dir.status().unwrap().unwrap();
    st.state = State::Finished;
    st.steps_done = st.max_steps;
    dir.set_status(&st).unwrap();

    let dry = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "--dry-run"]);
    assert!(dry.stdout.lines().nth(1).unwrap().contains("finished"), "{}", dry.stdout);
    assert!(dry.stdout.lines().nth(2).unwrap().contains("new"), "{}", dry.stdout);

    // A real launch runs only the unfinished member (which fails at set-up here: its model is in
    // no cache) and records the sweep.
    let r = crate::common::Run::from(
        cx.rlx().args(["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "--max-parallel", "2"]).env("HF_HUB_CACHE", cx.path().join("empty-hf")).env("HF_HUB_OFFLINE", "1").output().unwrap(),
    );
    assert!(r.stderr.contains("1 finished run(s) skipped"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("▶ {}", members[1])), "{}", r.stderr);
    assert!(!r.stderr.contains(&format!("▶ {}", members[0])), "{}", r.stderr);
    let sweeps: Vec<_> = std::fs::read_dir(cx.path().join("sweeps")).unwrap().collect();
    assert_eq!(sweeps.len(), 1);
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweeps[0].as_ref().unwrap().path().join("sweep.json")).unwrap()).unwrap();
    assert_eq!(rec["members"].as_array().unwrap().len(), 2);
    assert_eq!(rec["members"][0]["state"], "finished");
    assert_eq!(rec["members"][1]["overrides"][0], "optimizer.learning_rate=4e-5");
    assert_eq!(rec["axes"][0]["key"], "optimizer.learning_rate");
    // The member's own output went to a file beside the record (parallel mode).
    let out = sweeps[0].as_ref().unwrap().path().join(format!("{}.out", members[1]));
    assert!(std::fs::read_to_string(out).unwrap().contains("not found in the Hugging Face cache"));
    assert_eq!(r.code, 1, "a failed member fails the sweep");
    assert_eq!(rec["members"][1]["state"], "failed (exit 2)");
    // The same record through runlog's reader.
    let typed = SweepDir::open(&sweeps[0].as_ref().unwrap().path()).unwrap().record().unwrap();
    assert_eq!(typed.members.iter().map(|m| m.run_id.as_str()).collect::<Vec<_>>(), members.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(typed.members[1].exit_code, Some(2));
    assert_eq!(typed.axes[0].values, vec!["1e-5".to_string(), "4e-5".to_string()]);
}

#[test]
fn sweep_errors() {
    let cx = TestContext::new();
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "optimizer.learnig_rate=1", "--dry-run"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.error_count(), 1, "reported once, not once per member: {}", r.stderr);
    assert!(r.stderr.contains("did you mean `learning_rate`?"));
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5]", "lr=[2e-5]", "--dry-run"]);
    assert!(r.stderr.contains("swept twice"), "{}", r.stderr);
    let r = cx.run(&["sweep", "missing.yaml", "lr=[1e-5]"]);
    assert_eq!(r.code, 2);
    let r = cx.run(&["sweep", "lr=[1e-5]"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("experiments/default.yaml"), "{}", r.stderr);
}
