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

/// The `key=value` pairs of each line of a dry run's table.
fn assignments(stdout: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().skip(2).filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
        .collect()
}

#[test]
fn sample_draws_the_same_configurations_from_the_same_seed() {
    let cx = TestContext::new();
    let args = |n: &str, seed: &str| {
        cx.run(&["sweep", "spec.yaml", "lr=loguniform(1e-6,1e-4)", "temperature=uniform(0.5,1.0)", "seed=range(0,3)", "group_size=[2,4]", "--sample", n, "--sample-seed", seed, "--dry-run"])
    };
    let r = args("200", "7");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("sweep mini-sweep-") && r.stdout.lines().next().unwrap().contains("200 run(s) drawn with seed 7"), "{}", r.stdout);
    let first = ids(&r.stdout);
    assert_eq!(first.len(), 200);
    assert_eq!(first.iter().collect::<std::collections::BTreeSet<_>>().len(), 200, "distinct runs");
    // Same seed: the same configurations, so the same run ids and sweep id.
    let again = args("200", "7");
    assert_eq!(again.stdout, r.stdout);
    // A smaller N keeps the first configurations; another seed draws others.
    assert_eq!(ids(&args("5", "7").stdout), first[..5]);
    let other = ids(&args("200", "8").stdout);
    assert!(other.iter().filter(|id| first.contains(id)).count() < 20, "another seed, other runs");
    // Ranges and scales respected.
    let mut below_1e5 = 0;
    for a in assignments(&r.stdout) {
        let lr: f64 = a["optimizer.learning_rate"].parse().unwrap();
        assert!((1e-6..=1e-4).contains(&lr), "{a:?}");
        below_1e5 += usize::from(lr < 1e-5);
        let t: f64 = a["sampling.temperature"].parse().unwrap();
        assert!((0.5..=1.0).contains(&t), "{a:?}");
        assert!(["0", "1", "2"].contains(&a["seed"].as_str()), "{a:?}");
        assert!(["2", "4"].contains(&a["grpo.group_size"].as_str()), "{a:?}");
    }
    // Log scale: two decades, about half the draws in each (a linear scale puts 9% below 1e-5).
    assert!((70..=130).contains(&below_1e5), "{below_1e5} of 200 below 1e-5");
}

#[test]
fn ranges_in_a_grid_and_their_errors() {
    let cx = TestContext::new();
    // `range` and `choice` list their values in a grid.
    let r = cx.run(&["sweep", "spec.yaml", "seed=range(0,3)", "group_size=choice(2,4)", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ids(&r.stdout), ids(&cx.run(&["sweep", "spec.yaml", "seed=[0,1,2]", "group_size=2,4", "--dry-run"]).stdout));
    // Errors point into the argument.
    let r = cx.run(&["sweep", "spec.yaml", "lr=loguniform(0,1e-4)", "--sample", "3", "--dry-run"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("`loguniform` needs positive bounds") && r.stderr.contains("--> command line:1:15"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "lr=logunifrom(1e-6,1e-4)", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("did you mean `loguniform`?") && r.stderr.contains("^^^^^^^^^^"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "lr=uniform(1e-5,abc)", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("`abc` is not a number") && r.stderr.contains("--> command line:1:17"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "lr=loguniform(1e-6,1e-4", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("`loguniform(` is not closed"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "lr=uniform(1e-5,2e-5)", "--dry-run"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("a grid cannot list its values") && r.stderr.contains("--sample N"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "seed=range(0,2)", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("only 2 distinct configuration(s)"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "steps=2", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("`--sample` needs something to draw from"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "seed=range(0,2)", "seed=[4,5]", "--sample", "3", "--dry-run"]);
    assert!(r.stderr.contains("`seed` varies twice"), "{}", r.stderr);
    // A drawn value the schema refuses is reported like a typed one.
    let r = cx.run(&["sweep", "spec.yaml", "group_size=range(-2,0)", "--dry-run"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("grpo.group_size"), "{}", r.stderr);
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5]", "--sample-seed", "3", "--dry-run"]);
    assert_eq!(r.code, 2, "--sample-seed needs --sample: {}", r.stderr);
}

#[test]
fn a_sampled_sweep_records_its_draws_and_status_reads_it() {
    let cx = TestContext::new();
    let r = crate::common::Run::from(
        cx.rlx()
            .args(["sweep", "spec.yaml", "lr=loguniform(1e-6,1e-4)", "--sample", "2", "--sample-seed", "3", "--max-parallel", "2"])
            .env("HF_HUB_CACHE", cx.path().join("empty-hf"))
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 1, "the members fail at set-up (no model): {}", r.stderr);
    let sweep = std::fs::read_dir(cx.path().join("sweeps")).unwrap().next().unwrap().unwrap().path();
    let rec = SweepDir::open(&sweep).unwrap().record().unwrap();
    assert_eq!(rec.sample, Some(rlx::runlog::sweep::SampleRecord { n: 2, seed: 3 }));
    assert_eq!(rec.axes[0].values, vec!["loguniform(1e-6,1e-4)".to_string()]);
    assert!(rec.members[0].overrides[0].starts_with("optimizer.learning_rate="));
    assert!(rec.slurm_jobs.is_empty() && rec.members.iter().all(|m| m.slurm.is_none()));
    let st = cx.run(&["sweep", "status", sweep.to_str().unwrap()]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert!(st.stdout.starts_with(&format!("sweep {}: 2 run(s), local", rec.sweep_id)), "{}", st.stdout);
    for m in &rec.members {
        assert!(st.stdout.lines().any(|l| l.contains(&m.run_id) && l.contains("failed 0/3")), "{}", st.stdout);
    }
    assert!(st.stderr.contains("2 failed"), "{}", st.stderr);
    let missing = cx.run(&["sweep", "status", cx.path().join("nope").to_str().unwrap()]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
}
