//! `rlx compare` on run directories the tests write: three arms × seeds, a failed run with a
//! torn last line, a run on a different eval problem set and without one metric; a one-run
//! report that replays the quickstart's 42.5% → 55.0% (11 problems up, 6 down); the HTML report
//! (self-contained, screenshotted in headless Chromium when it is installed) and the PNGs; a run
//! from a newer rlx; sweeps; and two real runs of a tiny model.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{TestContext, repo};

/// One run directory to write.
struct Fixture<'a> {
    id: &'a str,
    lr: f64,
    seed: u32,
    eval_path: &'a str,
    /// `finished`, `failed`, ...
    state: &'a str,
    steps_done: u32,
    /// Eval steps and, at each, the ids of the problems solved (n = 1 per problem).
    evals: Vec<(i64, Vec<String>)>,
    /// The eval problem ids.
    problems: Vec<String>,
    /// Whether train lines carry `train/reward_mean`.
    reward: bool,
    /// Bytes appended to metrics.jsonl without a newline (a torn write).
    torn: Option<&'a str>,
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("p{i:02}")).collect()
}

fn write_run(root: &Path, f: &Fixture) -> PathBuf {
    let dir = root.join(f.id);
    std::fs::create_dir_all(&dir).unwrap();
    let resolved = json!({
        "name": "fx", "seed": f.seed,
        "model": {"base": "tiny", "finetune": "lora"},
        "data": {"eval": [{"path": f.eval_path, "format": "mbpp"}]},
        "optimizer": {"learning_rate": f.lr},
        "schedule": {"max_steps": 10, "eval_every": 5},
        "eval": {"k": [1], "temperature": 0.7},
        "log": {"root": root.display().to_string()},
    });
    std::fs::write(dir.join("resolved.json"), serde_json::to_string_pretty(&resolved).unwrap()).unwrap();
    let mut status = json!({
        "schema_version": 1, "run_id": f.id, "state": f.state, "steps_done": f.steps_done, "max_steps": 10,
        "started_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:10:00Z",
    });
    if f.state == "failed" {
        status["reason"] = json!("sandbox worker died");
    }
    std::fs::write(dir.join("status.json"), serde_json::to_string_pretty(&status).unwrap()).unwrap();
    let mut metrics = String::new();
    let mut results = String::new();
    let eval_at = |s: i64| f.evals.iter().find(|(st, _)| *st == s);
    let pass = |solved: &Vec<String>| solved.len() as f64 / f.problems.len() as f64;
    if let Some((_, solved)) = eval_at(-1) {
        metrics += &format!("{}\n", json!({"step": -1, "eval/pass@1": pass(solved), "eval/problems": f.problems.len(), "time/eval_s": 5.0}));
    }
    for step in 0..i64::from(f.steps_done) {
        let mut line = json!({"step": step, "train/loss": 1.0 / (step as f64 + 1.0), "train/completion_tokens": 100, "time/step_s": 10.0});
        if f.reward {
            line["train/reward_mean"] = json!(0.1 * step as f64);
        }
        if let Some((_, solved)) = eval_at(step) {
            line["eval/pass@1"] = json!(pass(solved));
            line["time/eval_s"] = json!(5.0);
        }
        metrics += &format!("{line}\n");
    }
    for (step, solved) in &f.evals {
        for p in &f.problems {
            let ok = solved.contains(p);
            results += &format!(
                "{}\n",
                json!({"step": step, "problem_id": p, "n": 1, "correct": u32::from(ok), "statuses": [if ok { "passed" } else { "failed" }], "tests_passed": [u32::from(ok)], "metrics": {"pass@1": if ok { 1.0 } else { 0.0 }}})
            );
        }
    }
    if let Some(t) = f.torn {
        metrics += t;
    }
    std::fs::write(dir.join("metrics.jsonl"), metrics).unwrap();
    std::fs::write(dir.join("eval_results.jsonl"), results).unwrap();
    let ck = json!({"name": "step-000004", "step": 4, "data_cursor": 10, "state_path": "checkpoints/step-000004", "sampler_path": null, "time": "2025-01-01T00:05:00Z", "kind": "periodic"});
    std::fs::write(dir.join("checkpoints.jsonl"), format!("{ck}\n")).unwrap();
    dir
}

/// Three arms on 20 eval problems p00..p19 with one sample each, evaluated at −1, 4 and 9:
/// - lr=0.0001, seeds 0,1,2: at step 9 they solve p00..p07, p00..p08, p00..p09 (40, 45, 50%);
/// - lr=0.0003, seeds 0,1 solve p00..p10 and p00..p12 (55, 65%); seed 2 failed at step 6 with a
///   torn last line;
/// - lr=0.001, seed 0, on another eval file with problems p10..p29, solving p10..p15 and p20..p27
///   (70%), and logging no `train/reward_mean`.
fn fixture(root: &Path) {
    let base = |n: usize| (-1, ids(0..n.min(4)));
    let mid = |n: usize| (4, ids(0..n.saturating_sub(2)));
    let runs = [
        ("fx-a0", 1e-4, 0, 8),
        ("fx-a1", 1e-4, 1, 9),
        ("fx-a2", 1e-4, 2, 10),
        ("fx-b0", 3e-4, 0, 11),
        ("fx-b1", 3e-4, 1, 13),
    ];
    for (id, lr, seed, solved) in runs {
        write_run(
            root,
            &Fixture { id, lr, seed, eval_path: "data/eval.jsonl", state: "finished", steps_done: 10, evals: vec![base(solved), mid(solved), (9, ids(0..solved))], problems: ids(0..20), reward: true, torn: None },
        );
    }
    write_run(
        root,
        &Fixture {
            id: "fx-b2",
            lr: 3e-4,
            seed: 2,
            eval_path: "data/eval.jsonl",
            state: "failed",
            steps_done: 6,
            evals: vec![base(9), mid(9)],
            problems: ids(0..20),
            reward: true,
            torn: Some(r#"{"step": 6, "train/lo"#),
        },
    );
    let mut c_solved = ids(10..16);
    c_solved.extend(ids(20..28));
    write_run(
        root,
        &Fixture {
            id: "fx-c0",
            lr: 1e-3,
            seed: 0,
            eval_path: "data/eval-b.jsonl",
            state: "finished",
            steps_done: 10,
            evals: vec![(-1, ids(10..14)), (4, ids(10..20)), (9, c_solved)],
            problems: ids(10..30),
            reward: false,
            torn: None,
        },
    );
}

fn runs_in(cx: &TestContext) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| format!("runs/{}", e.file_name().to_string_lossy())).collect();
    v.sort();
    v
}

#[test]
fn arms_seeds_failed_torn_and_another_problem_set() {
    let cx = TestContext::new();
    fixture(&cx.path().join("runs"));
    let mut args = vec!["compare"];
    let runs = runs_in(&cx);
    args.extend(runs.iter().map(String::as_str));
    let r = cx.run(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for line in r.stdout.lines() {
        assert!(line.chars().count() <= 100, "wider than 100 columns: {line:?}");
    }
    // Arms over seeds, by hand (t with m−1 df):
    // lr=0.0001: 40, 45, 50 → mean 45, sd 5, half-width 4.302653·5/√3 = 12.42 → [32.6, 57.4].
    // lr=0.0003: 55, 65 (seed 2 failed before step 9) → mean 60, sd 7.071, half-width
    //   12.7062·7.071/√2 = 63.53 → [−3.5, 123.5].
    // lr=0.001: 70 from one seed: no interval.
    // reward at step 9: 0.9 for every seed (0.1·step), so no spread: an interval of width 0.
    let expected = "\
rlx compare: 7 runs → 3 arms (differ in: data.eval.0.path, lr) · seeds {0,1,2} · eval: 20 problems,
    n=1, T=0.7
deciding metric: eval/pass@1 (higher is better) at step 9, the last step common to the finished runs

arm labels (the keys that differ)
  A  data.eval.0.path=data/eval.jsonl, lr=0.0001  (#1,#2,#3)
  B  data.eval.0.path=data/eval.jsonl, lr=0.0003  (#4,#5,#6)
  C  data.eval.0.path=data/eval-b.jsonl, lr=0.001  (#7)

runs
  #   run    status    steps   wall  tokens  arm  seed
  #1  fx-a0  finished  10/10  1m55s   1,000  A       0
  #2  fx-a1  finished  10/10  1m55s   1,000  A       1
  #3  fx-a2  finished  10/10  1m55s   1,000  A       2
  #4  fx-b0  finished  10/10  1m55s   1,000  B       0
  #5  fx-b1  finished  10/10  1m55s   1,000  B       1
  #6  fx-b2  failed     6/10  1m10s     600  B       2
  #7  fx-c0  finished  10/10  1m55s   1,000  C       0

metrics (final value, best value and its step, value at the deciding step)
  #   eval/pass@1 final  best @step     @9  train/reward_mean final  best @step   @9
  #1              40.0%    40.0% @9  40.0%                      0.9      0.9 @9  0.9
  #2              45.0%    45.0% @9  45.0%                      0.9      0.9 @9  0.9
  #3              50.0%    50.0% @9  50.0%                      0.9      0.9 @9  0.9
  #4              55.0%    55.0% @9  55.0%                      0.9      0.9 @9  0.9
  #5              65.0%    65.0% @9  65.0%                      0.9      0.9 @9  0.9
  #6              35.0%    35.0% @4      —                      0.5      0.5 @5    —
  #7              70.0%    70.0% @9  70.0%                        —           —    —
";
    // wall: 10 steps × 10 s + 3 evals × 5 s = 115 s; the failed run: 6 × 10 + 2 × 5 = 70 s.
    assert!(r.stdout.starts_with(expected), "got:\n{}\nwant prefix:\n{expected}", r.stdout);
    let block = section(&r.stdout, "arms (");
    let rows: Vec<&str> = block.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{block}");
    // Two keys differ: the arms are lettered, and the legend above says what each letter is.
    assert!(rows[0].contains(" A ") && rows[0].contains("#1,#2,#3") && rows[0].contains("45.0 [32.6, 57.4]"), "{block}");
    assert!(rows[1].contains(" B ") && rows[1].contains("#4,#5,#6") && rows[1].contains("60.0 [-3.5, 123.5]"), "{block}");
    assert!(rows[2].trim_start().starts_with('★') && rows[2].contains(" C ") && rows[2].contains("70.0 (1 seed)"), "{block}");
    // The metrics table: final, best @step, value at the deciding step.
    let m = section(&r.stdout, "metrics (");
    let row1 = m.lines().find(|l| l.trim_start().starts_with("#1 ")).unwrap();
    assert_eq!(row1.split_whitespace().collect::<Vec<_>>()[..5], ["#1", "40.0%", "40.0%", "@9", "40.0%"], "{m}");
    let row6 = m.lines().find(|l| l.trim_start().starts_with("#6 ")).unwrap();
    assert_eq!(row6.split_whitespace().collect::<Vec<_>>()[..5], ["#6", "35.0%", "35.0%", "@4", "—"], "{m}");

    // Paired, arm B (lr=0.0003) against A (lr=0.0001, the first run's arm), pooled over seeds at step 9.
    // Per problem (B − A): p08 +1/3, p09 +2/3, p10 +1, p11 +1/2, p12 +1/2, 15 ties: mean 3/20 =
    // +15.0 pp. Sign-flip exact over the 5 non-zero differences: only the 2 all-same-sign patterns
    // of 2^5 reach |T| = 3: p = 2/32 = 0.0625.
    let b = section(&r.stdout, "`B` − `A` ");
    assert!(b.contains("Δ +15.0 pp"), "{b}");
    assert!(b.contains("sign-flip exact p = 0.062 · 5 better, 0 worse, 15 tied of 20 problems"), "{b}");
    // Welch over seeds: Δ = 60 − 45 = 15 pp, SE = √(25/3 + 50/2) = 5.774 pp, df = 33.33² /
    // ((25/3)²/2 + 25²/1) = 1.684; scipy 1.14.1 stats.ttest_ind([55,65], [40,45,50],
    // equal_var=False): t = 2.598, df = 1.684, p = 0.1444, 95% CI [−14.88, +44.88].
    assert!(b.contains("recipe level   Δ +15.0 pp [−14.9, +44.9]  Welch t, df 1.7, p = 0.144 (2 vs 3 seeds)"), "{b}");
    assert!(b.contains("verdict: no difference detected") && b.contains("not evidence that they are the same"), "{b}");
    // Two arms against A: Holm over {0.0625, 0.03125} → 0.03125·2 = 0.0625 and max(0.0625, 0.0625).
    assert!(b.contains("raw p = 0.06") && b.contains("Holm-adjusted over the 2 arms against `A`: p = 0.06"), "{b}");
    // The one-seed arm on another problem set: paired on the 10 shared problems p10..p19 only; it
    // solves p10..p15 there and arm A none: 6 better, equal magnitudes, p = 2/2^6 = 0.03125.
    let c = section(&r.stdout, "`C` − `A` ");
    assert!(c.contains("over 10 problems") && c.contains("sign-flip exact p = 0.031 · 6 better, 0 worse, 4 tied of 10 problems (20 unshared"), "{c}");
    assert!(c.contains("recipe level   untested: needs ≥ 2 seeds per arm (1 vs 3)"), "{c}");
    // Raw p = 0.031, but one of two arms compared: Holm doubles it to 0.062, so no difference is
    // detected, with its interval.
    assert!(c.contains("raw p = 0.031") && c.contains("Holm-adjusted over the 2 arms against `A`: p = 0.06"), "{c}");
    assert!(c.contains("no difference detected between `C`'s and `A`'s") && !c.contains("checkpoints are better than"), "{c}");

    let w = section(&r.stdout, "warnings");
    for want in [
        "#6 `fx-b2`: metrics.jsonl: torn last line 8 skipped",
        "#6 `fx-b2` is failed at step 6/10: sandbox worker died; its values are partial",
        "runs end at different steps",
        "`train/reward_mean` is missing from #7: not comparable there",
        "`eval/pass@1` has no value at step 9 in #6: left out of the arm statistics",
        "eval settings differ (`data.eval.0.path`)",
        "runs evaluated different problems (#1: 20, #2: 20, #3: 20, #4: 20, #5: 20, #7: 20 problems; 10",
        "arm `C` has 1 seed",
    ] {
        assert!(w.contains(want), "missing warning {want:?} in\n{w}");
    }
    // The best checkpoint of each run: #1's best eval is step 9 (no checkpoint there), and a run
    // whose best eval was at step 4 gets that checkpoint.
    assert!(r.stdout.contains("#1 eval/pass@1 40.0% at step 9 → no checkpoint saved at that step"), "{}", r.stdout);
    assert!(r.stdout.contains("#6 eval/pass@1 35.0% at step 4 → checkpoint `step-000004` (checkpoints/step-000004)"), "{}", r.stdout);
}

/// The lines of the block whose title starts with `title`, up to the next blank line.
fn section<'a>(out: &'a str, title: &str) -> &'a str {
    let start = out.find(&format!("\n{title}")).map(|i| i + 1).unwrap_or_else(|| panic!("no `{title}` in\n{out}"));
    let rest = &out[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

#[test]
fn formats_json_csv_md_and_sorting() {
    let cx = TestContext::new();
    fixture(&cx.path().join("runs"));
    let j = cx.run(&["compare", "runs", "--format", "json"]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let v: Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 7);
    let arm = &v["arms"][0];
    assert_eq!(arm["values"][0]["stat"]["m"], 3);
    assert!((arm["values"][0]["stat"]["mean"].as_f64().unwrap() - 0.45).abs() < 1e-12);
    assert!((arm["values"][0]["stat"]["ci"]["lo"].as_f64().unwrap() - (0.45 - 4.302_652_73 * 0.05 / 3f64.sqrt())).abs() < 1e-8);
    assert_eq!(v["comparisons"][0]["paired"]["better"], 5);
    assert!((v["comparisons"][0]["paired"]["sign_flip"]["p"].as_f64().unwrap() - 0.0625).abs() < 1e-12);
    assert_eq!(v["decisions"][0]["step"], 9);

    let c = cx.run(&["compare", "runs", "--format", "csv"]);
    let lines: Vec<&str> = c.stdout.lines().collect();
    assert_eq!(lines.len(), 8);
    assert!(lines[0].starts_with("index,run_id,path,arm,seed,status,steps_done,max_steps,wall_s,tokens,data.eval.0.path,optimizer.learning_rate,eval/pass@1:final"), "{}", lines[0]);
    assert!(lines[1].starts_with("1,fx-a0,"), "{}", lines[1]);
    assert!(lines[1].contains(",A,0,finished,10,10,115,1000,data/eval.jsonl,0.0001,0.4,9,0.4,9,0.4,9"), "{}", lines[1]);

    let md = cx.run(&["compare", "runs", "--format", "md"]);
    assert!(md.stdout.contains("| #1 | fx-a0 | finished | 10/10 |"), "{}", md.stdout);
    assert!(md.stdout.contains("|---|---|---|---:|---:|---:|"), "{}", md.stdout);

    // Best first by the deciding metric; a run without a value at step 9 sorts last.
    let s = cx.run(&["compare", "runs", "--sort", "eval/pass@1", "--format", "csv"]);
    let order: Vec<&str> = s.stdout.lines().skip(1).map(|l| l.split(',').nth(1).unwrap()).collect();
    assert_eq!(order, ["fx-c0", "fx-b1", "fx-b0", "fx-a2", "fx-a1", "fx-a0", "fx-b2"]);
}

#[test]
fn bad_input_gets_clear_errors() {
    let cx = TestContext::new();
    fixture(&cx.path().join("runs"));
    let r = cx.run(&["compare", "runs", "--metric", "eval/pass@l"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: no run has metric `eval/pass@l`") && r.stderr.contains("help: did you mean `eval/pass@1`?"), "{}", r.stderr);
    let r = cx.run(&["compare", "nowhere"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`nowhere` does not exist"), "{}", r.stderr);
    // A directory holding no runs is an error; a stray file among runs is skipped with a warning.
    std::fs::create_dir_all(cx.path().join("empty")).unwrap();
    let r = cx.run(&["compare", "empty"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("`empty` is not a run directory (no status.json)"), "{}", r.stderr);
    cx.write("runs/NOTES.txt", "lr sweep\n");
    let r = cx.run(&["compare", "runs/fx-a0", "runs/NOTES.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("`runs/NOTES.txt` is not a directory: skipped"), "{}", r.stdout);
    let r = cx.run(&["compare", "runs", "--baseline", "lr=9"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("`--baseline lr=9` matches no run or arm"), "{}", r.stderr);
    let r = cx.run(&["compare", "runs", "--steps", "-1"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("is not two steps"), "{}", r.stderr);
    // A run directory from a newer rlx.
    let newer = cx.path().join("runs/fx-a0/status.json");
    let mut s: Value = serde_json::from_slice(&std::fs::read(&newer).unwrap()).unwrap();
    s["schema_version"] = json!(99);
    std::fs::write(&newer, s.to_string()).unwrap();
    let r = cx.run(&["compare", "runs/fx-a0", "runs/fx-a1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("written by a newer rlx (format version 99; this rlx reads up to 2); upgrade rlx"), "{}", r.stderr);
}

/// The quickstart's result, replayed: 40 problems, 17 solved at the baseline and 22 after
/// training, 11 gained and 6 lost.
fn quickstart_like(root: &Path) -> PathBuf {
    let before: Vec<String> = ids(0..17);
    let mut after: Vec<String> = ids(6..17);
    after.extend(ids(17..28));
    write_run(
        root,
        &Fixture { id: "qs", lr: 3e-4, seed: 0, eval_path: "data/eval.jsonl", state: "finished", steps_done: 10, evals: vec![(-1, before), (4, ids(0..23)), (9, after)], problems: ids(0..40), reward: true, torn: None },
    )
}

#[test]
fn one_run_baseline_against_final_is_a_paired_test() {
    let cx = TestContext::new();
    quickstart_like(&cx.path().join("runs"));
    let r = cx.run(&["compare", "runs/qs"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = section(&r.stdout, "within runs");
    // 42.5% → 55.0%, 11 up and 6 down: exact McNemar p = 2·Σ_{i≤6} C(17,i)/2^17 = 0.3323
    // (scipy 1.14.1 stats.binomtest(6, 17).pvalue = 0.332306), mid-p 0.2379: could be noise.
    assert!(w.contains("#1 step -1 → 9: 42.5% → 55.0%  Δ +12.5 pp"), "{w}");
    assert!(w.contains("McNemar exact p = 0.332 (mid-p 0.238) · 11 up, 6 down, 23 same of 40 problems"), "{w}");
    assert!(w.contains("no change detected (p ≥ 0.05; Δ 95% CI [−"), "{w}");
    // The bootstrap interval straddles 0 like the test says.
    let ci = w.lines().find(|l| l.contains("#1 step")).unwrap().split('[').nth(1).unwrap();
    assert!(ci.starts_with('−') && ci.contains(", +"), "{w}");
    // Best evaluation (step 4, 57.5%) with its checkpoint, and the run's whole config.
    assert!(r.stdout.contains("#1 eval/pass@1 57.5% at step 4 → checkpoint `step-000004`"), "{}", r.stdout);
    let config = section(&r.stdout, "config (resolved spec)");
    assert!(config.contains("optimizer.learning_rate  0.0003") && config.contains("eval.temperature         0.7") && config.contains("seed                     0"), "{config}");
    // And its curves.
    let r = cx.run(&["compare", "runs/qs", "--html", "one.html"]);
    assert_eq!(r.code, 0);
    let html = std::fs::read_to_string(cx.path().join("one.html")).unwrap();
    assert!(html.contains("eval/pass@1 vs step") && html.contains("McNemar exact p = 0.332"), "one-run HTML lacks its curve or test");
    // `--steps 4,last`: a different pair of eval steps; `--steps 3,last` names a step with no eval.
    let r = cx.run(&["compare", "runs/qs", "--steps", "4,last"]);
    assert!(r.stdout.contains("#1 step 4 → 9: 57.5% → 55.0%  Δ −2.5 pp"), "{}", r.stdout);
    let r = cx.run(&["compare", "runs/qs", "--steps=3,last"]);
    assert!(r.stdout.contains("#1: no eval at step 3 (eval steps: -1, 4, 9)"), "{}", r.stdout);
}

/// The issue-37 run, replayed: 40 problems, 8 samples at temperature 0.7 and greedy pass@1
/// (`eval.greedy`) at the baseline and after step 11. Sampled pass@1 33.8% → 54.4% (29 problems
/// up, 7 down), pass@8 90.0% → 72.5%; greedy 80.0% → 60.0% with 2 problems gained and 10 lost.
fn two_protocols(root: &Path) -> PathBuf {
    let dir = root.join("qs2");
    std::fs::create_dir_all(&dir).unwrap();
    let resolved = json!({
        "name": "qs2", "seed": 0, "model": {"base": "tiny"},
        "data": {"eval": [{"path": "data/eval.jsonl", "format": "mbpp"}]},
        "schedule": {"max_steps": 12, "eval_every": 12},
        "eval": {"k": [1, 2, 4, 8], "samples": 8, "temperature": 0.7, "greedy": true},
    });
    std::fs::write(dir.join("resolved.json"), resolved.to_string()).unwrap();
    let status = json!({"schema_version": 1, "run_id": "qs2", "state": "finished", "steps_done": 12, "max_steps": 12, "started_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:10:00Z"});
    std::fs::write(dir.join("status.json"), status.to_string()).unwrap();
    let (mut results, mut metrics) = (String::new(), String::new());
    for step in [-1i64, 11] {
        let (solved, correct, greedy): (usize, u32, Vec<usize>) = if step < 0 { (36, 3, (0..32).collect()) } else { (29, 6, (0..22).chain([32, 33]).collect()) };
        for i in 0..40 {
            let c = if i < solved { correct } else { 0 };
            let statuses: Vec<&str> = (0..8).map(|k| if k < c { "passed" } else { "failed" }).collect();
            results += &format!("{}\n", json!({"step": step, "problem_id": format!("p{i:02}"), "n": 8, "correct": c, "statuses": statuses, "tests_passed": vec![1; 8], "metrics": {"pass@1": f64::from(c) / 8.0}}));
            let ok = greedy.contains(&i);
            results += &format!("{}\n", json!({"step": step, "protocol": "greedy", "problem_id": format!("p{i:02}"), "n": 1, "correct": u32::from(ok), "statuses": [if ok { "passed" } else { "failed" }], "tests_passed": [1], "metrics": {"pass@1": if ok { 1.0 } else { 0.0 }}}));
        }
        let pass1 = solved as f64 * f64::from(correct) / 8.0 / 40.0;
        let (format, greedy_format) = if step < 0 { (0.75, 0.9) } else { (1.0, 1.0) };
        metrics += &format!("{}\n", json!({"step": step, "eval/pass@1": pass1, "eval/greedy/pass@1": greedy.len() as f64 / 40.0, "eval/format_rate": format, "eval/greedy/format_rate": greedy_format, "eval/problems": 40, "time/eval_s": 5.0}));
    }
    std::fs::write(dir.join("eval_results.jsonl"), results).unwrap();
    std::fs::write(dir.join("metrics.jsonl"), metrics).unwrap();
    dir
}

#[test]
fn both_protocols_baseline_against_final_within_100_columns() {
    let cx = TestContext::new();
    two_protocols(&cx.path().join("runs"));
    let r = cx.run(&["compare", "runs/qs2", "--steps", "-1,last"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let wide: Vec<&str> = r.stdout.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "lines over 100 columns: {wide:#?}");
    let w = section(&r.stdout, "within runs");
    assert!(w.contains("#1 step -1 → 11: 33.8% → 54.4%  Δ +20.6 pp"), "{w}");
    // Exact McNemar on 2 gained and 10 lost: 2·(1 + 12 + 66)/2^12 = 0.0386 (scipy
    // stats.binomtest(2, 12).pvalue = 0.038574).
    assert!(w.contains("greedy pass@1: 80.0% → 60.0%  Δ −20.0 pp  McNemar exact b = 2, c = 10, p = 0.039"), "{w}");
    assert!(w.contains("sampled pass@1 up beyond noise (") && w.contains("greedy pass@1 DOWN beyond noise (McNemar exact p = 0.039)"), "{w}");
    assert!(!w.contains("training changed the eval score"), "one protocol up and one down is not one verdict: {w}");
    // pass@1 = well-formed × pass@1 given well-formed: sampled 33.75% of 75% well-formed is 45.0%
    // of the well-formed, 54.4% of 100% after; greedy 80% of 90% is 88.9%, then 60.0% of 100%.
    assert!(w.contains("sampled: well-formed 75.0% → 100.0%, pass@1 given well-formed 45.0% → 54.4%"), "{w}");
    assert!(w.contains("greedy: well-formed 90.0% → 100.0%, pass@1 given well-formed 88.9% → 60.0%"), "{w}");
    // Both protocols and pass@k up to the largest k, baseline, final and Δ, in one table that
    // was not split into column groups.
    let t = section(&r.stdout, "greedy pass@1 (1 sample at temperature 0) and sampled pass@k");
    let header = t.lines().find(|l| l.starts_with("  #")).unwrap();
    assert!(header.contains("greedy") && header.contains("pass@1") && header.contains("pass@2") && header.contains("pass@4") && header.contains("pass@8"), "{t}");
    assert!(t.contains("-1 (baseline)") && t.contains("90.0") && t.contains("72.5") && t.contains("−17.5") && t.contains("−20.0"), "{t}");
    assert_eq!(t.lines().filter(|l| l.contains("pass@8")).count(), 1, "one column group: {t}");
    // The HTML report carries the same blocks.
    let r = cx.run(&["compare", "runs/qs2", "--steps", "-1,last", "--html", "two.html"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(cx.path().join("two.html")).unwrap();
    assert!(html.contains("McNemar exact b = 2, c = 10, p = 0.039") && html.contains("greedy pass@1 DOWN beyond noise") && html.contains("pass@8"), "the HTML lacks a protocol");
}

/// Constructed per-problem data with known answers: seeds pooled per problem (not seeds ×
/// problems), Holm over three arms against one baseline, and the equivalence test.
#[test]
fn pooled_per_problem_holm_and_equivalence() {
    let cx = TestContext::new();
    let root = cx.path().join("runs");
    let run = |id: &str, lr: f64, seed: u32, base: Vec<String>, last: Vec<String>, problems: usize| {
        write_run(&root, &Fixture { id, lr, seed, eval_path: "data/eval.jsonl", state: "finished", steps_done: 10, evals: vec![(-1, base), (9, last)], problems: ids(0..problems), reward: true, torn: None });
    };
    // One arm, three seeds, from p00..p03 to p00..p07, p00..p08, p00..p09. Per problem: p04..p07
    // +1, p08 +2/3, p09 +1/3: 6 problems up, sign-flip exact p = 2/2^6 = 0.031. Counted as
    // seeds × problems it would be 15 up, 0 down, McNemar p = 2/2^15 = 6.1e-5.
    for (seed, n) in [(0, 8), (1, 9), (2, 10)] {
        run(&format!("s{seed}"), 1e-4, seed, ids(0..4), ids(0..n), 20);
    }
    let r = cx.run(&["compare", "runs/s0", "runs/s1", "runs/s2", "--steps", "-1,last"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = section(&r.stdout, "pooled over each arm's seeds");
    assert!(p.contains("(#1,#2,#3; seeds 0,1,2), step -1 → last:"), "{p}");
    assert!(p.contains("sampled: 20.0% → 45.0%  Δ +25.0 pp") && p.contains("sign-flip exact p = 0.031 · 6 up, 0 down, 14 level of 20 problems"), "{p}");
    assert!(!p.contains("6.1e-5"), "{p}");

    // Three arms against A on 20 problems at step 9: B gains 6 problems (raw p = 2/2^6 = 0.031),
    // C 5 (0.062), D 8 (0.0078). Holm: D 0.0078·3 = 0.023, B 0.031·2 = 0.062, C max(0.062,
    // 0.062) = 0.062: only D survives.
    std::fs::remove_dir_all(&root).unwrap();
    for (id, lr, n) in [("a", 1e-4, 4), ("b", 2e-4, 10), ("c", 3e-4, 9), ("d", 5e-4, 12)] {
        run(id, lr, 0, ids(0..4), ids(0..n), 20);
    }
    let r = cx.run(&["compare", "runs/a", "runs/b", "runs/c", "runs/d"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let b = section(&r.stdout, "`lr=0.0002` − `lr=0.0001`");
    assert!(b.contains("raw p = 0.031") && b.contains("Holm-adjusted over the 3 arms against `lr=0.0001`: p = 0.06") && b.contains("no difference detected"), "{b}");
    let c = section(&r.stdout, "`lr=0.0003` − `lr=0.0001`");
    assert!(c.contains("raw p = 0.06") && c.contains("Holm-adjusted over the 3 arms against `lr=0.0001`: p = 0.06"), "{c}");
    let d = section(&r.stdout, "`lr=0.0005` − `lr=0.0001`");
    assert!(d.contains("raw p = 0.008") && d.contains("Holm-adjusted over the 3 arms against `lr=0.0001`: p = 0.023"), "{d}");
    assert!(d.contains("checkpoints are better than"), "{d}");

    // Equivalence: A solves p00..p19 of 40, B p01..p20: Δ = −1 at p00, +1 at p20, mean 0,
    // SE = √(2/39)/√40 = 0.03581. Within ±10 pp: t = 2.793 on 39 df, one-sided p = 0.0041 (by
    // numerical integration of the t density): equivalent. Within ±5 pp: t = 1.396, p = 0.085: not
    // shown equivalent, and never called "the same".
    std::fs::remove_dir_all(&root).unwrap();
    run("e1", 1e-4, 0, ids(0..20), ids(0..20), 40);
    run("e2", 2e-4, 0, ids(0..20), ids(1..21), 40);
    let r = cx.run(&["compare", "runs/e1", "runs/e2", "--margin", "10"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let e = section(&r.stdout, "`lr=0.0002` − `lr=0.0001`");
    assert!(e.contains("equivalent within ±10.0 pp (TOST: both one-sided t tests reject, p = 0.004"), "{e}");
    let r = cx.run(&["compare", "runs/e1", "runs/e2", "--margin", "5"]);
    let e = section(&r.stdout, "`lr=0.0002` − `lr=0.0001`");
    assert!(e.contains("not shown equivalent within ±5.0 pp (TOST p = 0.08"), "{e}");
    // Read across the report's line wrapping.
    let flat = e.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!flat.contains("the same") || flat.contains("not evidence that they are the same"), "{e}");
    let bad = cx.run(&["compare", "runs/e1", "runs/e2", "--margin", "0"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("not a margin in percentage points"), "{}", bad.stderr);
}

/// Decodes a PNG and counts its pixels that are neither white nor grey-ish (chart colours).
fn coloured_pixels(png: &[u8]) -> (u32, u32, usize) {
    let p = tiny_skia::Pixmap::decode_png(png).expect("a valid PNG");
    let colourful = p.pixels().iter().filter(|c| {
        let (r, g, b) = (c.red() as i32, c.green() as i32, c.blue() as i32);
        (r - g).abs() + (g - b).abs() + (r - b).abs() > 60
    });
    (p.width(), p.height(), colourful.count())
}

#[test]
fn html_report_is_self_contained_and_pngs_have_text() {
    let cx = TestContext::new();
    fixture(&cx.path().join("runs"));
    let r = cx.run(&["compare", "runs", "--html", "report.html", "--png", "charts"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("wrote report.html") && r.stderr.contains("chart(s) to charts"), "{}", r.stderr);
    let html = std::fs::read_to_string(cx.path().join("report.html")).unwrap();
    for banned in ["src=\"http", "href=\"http", "<script", "@import", "url(http", "<link"] {
        assert!(!html.contains(banned), "the report references the network: {banned}");
    }
    assert!(html.contains("@font-face{font-family:rlx-sans;src:url(data:font/ttf;base64,"));
    // Two charts per metric (step, wall time): eval/pass@1 and train/reward_mean.
    assert_eq!(html.matches("<svg ").count(), 4);
    for want in ["eval/pass@1 vs step", "eval/pass@1 vs wall time", "train/reward_mean vs step", "wall time (minutes", "eval/pass@1 (%)", "mean of 3 seeds", "Read these first", "fx-b2"] {
        assert!(html.contains(want), "{want} missing");
    }
    let mut pngs: Vec<String> = std::fs::read_dir(cx.path().join("charts")).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    pngs.sort();
    assert_eq!(pngs, ["eval_pass_1-step.png", "eval_pass_1-wall.png", "train_reward_mean-step.png", "train_reward_mean-wall.png"]);
    let (w, h, colour) = coloured_pixels(&std::fs::read(cx.path().join("charts/eval_pass_1-step.png")).unwrap());
    assert_eq!(w, 1520, "760 px at 2×");
    assert!(h > 600 && colour > 2000, "{w}×{h}, {colour} coloured pixels");
    // Text is drawn: the title band (top 40 px at 2×) holds dark glyph pixels.
    let p = tiny_skia::Pixmap::decode_png(&std::fs::read(cx.path().join("charts/eval_pass_1-step.png")).unwrap()).unwrap();
    let dark = p.pixels()[..(p.width() * 80) as usize].iter().filter(|c| c.red() < 100 && c.green() < 100 && c.blue() < 100).count();
    assert!(dark > 500, "title text missing ({dark} dark pixels)");
    let _ = std::fs::copy(cx.path().join("charts/eval_pass_1-step.png"), repo().join("target/compare-chart-example.png"));
    screenshot(&cx.path().join("report.html"));
}

/// Opens the report in headless Chromium (Debian's `chromium`; `.ci/run` installs it) and takes
/// a screenshot; the screenshot must show the charts' colours. Kept under
/// `target/compare-screenshot.png` for people to look at.
#[allow(clippy::print_stderr)]
fn screenshot(html: &Path) {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|c| std::process::Command::new("which").arg(c).output().is_ok_and(|o| o.status.success())) else {
        eprintln!("SKIPPED compare screenshot: no chromium installed (`apt-get install chromium`)");
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let out = html.with_file_name("screenshot.png");
    let status = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--window-size=1280,2400"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", out.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium runs");
    assert!(status.status.success(), "chromium failed: {}", String::from_utf8_lossy(&status.stderr));
    let bytes = std::fs::read(&out).expect("chromium wrote the screenshot");
    let (w, _, colour) = coloured_pixels(&bytes);
    assert_eq!(w, 1280);
    assert!(colour > 5000, "the screenshot shows no charts ({colour} coloured pixels)");
    let keep = repo().join("target/compare-screenshot.png");
    let _ = std::fs::create_dir_all(keep.parent().unwrap());
    let _ = std::fs::copy(&out, &keep);
}

#[test]
fn sweep_directories_and_directories_of_runs() {
    let cx = TestContext::new();
    let runs = cx.path().join("runs");
    fixture(&runs);
    let sweep = cx.path().join("sweeps/fx-sweep-1");
    std::fs::create_dir_all(&sweep).unwrap();
    let member = |id: &str| json!({"run_id": id, "dir": runs.join(id), "assignment": {}, "overrides": [], "state": "finished"});
    let record = json!({
        "schema_version": 1, "sweep_id": "fx-sweep-1", "spec": "/x/spec.yaml", "argv": [], "axes": [], "fixed": [],
        "members": [member("fx-a0"), member("fx-b0"), member("fx-never")],
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
    });
    std::fs::write(sweep.join("sweep.json"), record.to_string()).unwrap();
    let r = cx.run(&["compare", "sweeps/fx-sweep-1", "runs/fx-a0", "--format", "csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let order: Vec<&str> = r.stdout.lines().skip(1).map(|l| l.split(',').nth(1).unwrap()).collect();
    assert_eq!(order, ["fx-a0", "fx-b0"], "members once each, in sweep order");
    let r = cx.run(&["compare", "sweeps/fx-sweep-1"]);
    assert!(r.stdout.contains("sweep `fx-sweep-1`: member `fx-never` has no run directory yet"), "{}", r.stdout);
}

/// Two real runs of a tiny random model (the engine test's), at two learning rates, compared:
/// whatever the engine writes, compare reads. The report is printed (`--nocapture` shows it).
#[test]
#[allow(clippy::print_stderr)]
fn two_real_runs_of_a_tiny_model() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let data = repo().join("experiments/data");
    let spec = format!(
        "name: tiny
seed: 3
model: {{base: ./tiny, finetune: full}}
backend: {{kind: local, threads: 1}}
data:
  train: [{{path: {train}, format: mbpp, limit: 4}}]
  eval: [{{path: {eval}, format: mbpp, limit: 3}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 8, temperature: 1.0}}
grpo: {{prompts_per_step: 2, group_size: 2, skip_degenerate: false}}
reward: {{test_timeout_s: 2}}
sandbox: {{kind: local, strict: false}}
optimizer: {{learning_rate: 1e-3}}
schedule: {{max_steps: 2, eval_every: 1, save_every: 2}}
eval: {{k: [1, 2], samples: 2, temperature: 1.0, max_tokens: 6}}
",
        train = data.join("easy_python_train.jsonl").display(),
        eval = data.join("easy_python_eval.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
    );
    cx.write("spec.yaml", &spec);
    for lr in ["lr=1e-3", "lr=1e-2"] {
        let r = cx.run(&["run", "spec.yaml", lr]);
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    }
    let runs = runs_in(&cx);
    assert_eq!(runs.len(), 2);
    let r = cx.run(&["compare", &runs[0], &runs[1], "--html", "r.html"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    eprintln!("{}", r.stdout);
    assert!(r.stdout.contains("rlx compare: 2 runs → 2 arms (differ in: lr) · seeds {3} · eval: 3 problems, n=2, T=1"), "{}", r.stdout);
    // Two samples per problem: pass@k for k = 1..2, and a sign-flip test instead of McNemar.
    // Sampled at T=1, so greedy pass@1 too (`eval.greedy` on by default).
    assert!(r.stdout.contains("greedy pass@1 (1 sample at temperature 0) and sampled pass@k (%), first eval and compared step"), "{}", r.stdout);
    let p = section(&r.stdout, "greedy pass@1 (1 sample");
    let words = |i: usize| p.lines().nth(i).unwrap().split_whitespace().collect::<Vec<_>>();
    assert_eq!(words(2), ["#", "step", "greedy", "pass@1", "pass@2"], "{p}");
    // The baseline, the compared step and their difference, one row each.
    assert!(words(3).len() == 6 && words(3)[..3] == ["#1", "-1", "(baseline)"], "{p}");
    assert!(words(4).len() == 5 && words(4)[..2] == ["#1", "1"], "{p}");
    assert!(words(5).len() == 5 && words(5)[..2] == ["Δ", "(pp)"], "{p}");
    let ids: BTreeSet<&str> = r.stdout.lines().filter(|l| l.trim_start().starts_with("#1  tiny-") || l.trim_start().starts_with("#2  tiny-")).collect();
    assert_eq!(ids.len(), 2, "{}", r.stdout);
    assert!(std::fs::read_to_string(cx.path().join("r.html")).unwrap().contains("pass@k vs k"));

}

/// Four runs that differ in six keys, two of them files under a 100-character directory: the
/// arms are lettered `A`..`D`, a legend says what each letter is (files below their common
/// directory), and every line of the report fits 100 columns; the HTML report uses the same
/// labels. (Before: each label was the whole differing config, over 250 characters.)
#[test]
#[allow(clippy::print_stderr)]
fn many_differing_keys_get_letters_a_legend_and_fit_100_columns() {
    let cx = TestContext::new();
    let root = cx.path().join("runs");
    let deep = format!("/home/someone/projects/{}/rlx-checkout", "very-long-directory-name-".repeat(3));
    let configs = [
        ("mk-a", 1e-4, 8, 0.7, "train.jsonl", "user.j2", "[1]"),
        ("mk-b", 3e-4, 16, 0.7, "train.jsonl", "user.j2", "[1]"),
        ("mk-c", 3e-4, 8, 1.0, "train-hard.jsonl", "user.j2", "[1,8]"),
        ("mk-d", 1e-3, 8, 0.7, "train.jsonl", "user-cot.j2", "[1]"),
    ];
    for (id, lr, group, temp, train, user, k) in configs {
        let dir = write_run(
            &root,
            &Fixture { id, lr, seed: 0, eval_path: "data/eval.jsonl", state: "finished", steps_done: 10, evals: vec![(-1, ids(0..5)), (9, ids(0..9))], problems: ids(0..20), reward: true, torn: None },
        );
        let path = dir.join("resolved.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        v["grpo"] = json!({"group_size": group});
        v["sampling"] = json!({"temperature": temp});
        v["data"]["train"] = json!([{"path": format!("{deep}/experiments/data/{train}"), "format": "mbpp"}]);
        v["prompt"] = json!({"user": format!("{deep}/prompts/{user}")});
        v["eval"]["k"] = serde_json::from_str(k).unwrap();
        std::fs::write(&path, v.to_string()).unwrap();
    }
    let r = cx.run(&["compare", "runs", "--html", "many.html"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    eprintln!("{}", r.stdout);
    for line in r.stdout.lines() {
        assert!(line.chars().count() <= 100, "wider than 100 columns: {line:?}");
    }
    assert!(!r.stdout.contains(&deep), "absolute paths are shown below their common directory:\n{}", r.stdout);
    // Long lines wrap 4 columns under their own indentation.
    let unwrapped = r.stdout.replace("\n      ", " ").replace("\n    ", " ");
    assert!(unwrapped.contains("4 runs → 4 arms (differ in: data.train.0.path, eval.k, group_size, lr, prompt.user, temperature)"), "{}", r.stdout);
    let legend = section(&unwrapped, "arm labels");
    let lines: Vec<&str> = legend.lines().skip(1).collect();
    assert_eq!(lines.len(), 4, "{legend}");
    for (line, letter) in lines.iter().zip(["A", "B", "C", "D"]) {
        assert!(line.trim_start().starts_with(&format!("{letter}  data.train.0.path=…/")), "{legend}");
    }
    assert!(lines[2].contains("data.train.0.path=…/data/train-hard.jsonl") && lines[2].contains("eval.k=[1,8]") && lines[2].contains("temperature=1.0"), "{legend}");
    assert!(lines[3].contains("prompt.user=…/prompts/user-cot.j2") && lines[3].contains("lr=0.001") && lines[3].contains("(#4)"), "{legend}");
    // The runs table names the arm, not six more columns; the comparisons use the letters.
    let runs = section(&r.stdout, "runs");
    assert_eq!(runs.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>(), ["#", "run", "status", "steps", "wall", "tokens", "arm", "seed"], "{runs}");
    for b in ["`B` − `A`", "`C` − `A`", "`D` − `A`"] {
        assert!(r.stdout.contains(&format!("\n{b} (eval/pass@1")), "missing {b}:\n{}", r.stdout);
    }
    let html = std::fs::read_to_string(cx.path().join("many.html")).unwrap();
    assert!(html.contains("<h2>arm labels (the keys that differ)</h2>") && html.contains("<h2>`B` − `A` (eval/pass@1; paired at eval step 9)</h2>"), "the HTML report has the legend and short headings");
    assert!(!html.contains(&format!("{deep}/prompts")), "the HTML report shows paths short too");
}

/// Three real runs from two clones of a repository (two temporary directories holding the same
/// data files and prompt template; one model): the clones' identical files at different
/// absolute paths are no difference, so the only key that differs is the one set on the command
/// line and the labels are its values. Each run has two named eval sources and a diagnostic
/// that fired: both are in the report. The colder arm gets problem `1` wrong, so it is the
/// largest drop, and the HTML report links it to both sides' completions.
#[test]
#[allow(clippy::print_stderr)]
fn three_real_runs_from_two_clones() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(crate::show::scripted_server());
    let (one, two) = (TestContext::new(), TestContext::new());
    let a = crate::show::served_run(&one, &server, &[]);
    crate::show::served_spec(&two, &server.url(), Some(&one.path().join("tiny")));
    let b = crate::show::served_run(&two, &server, &[]);
    let c = crate::show::served_run(&two, &server, &["eval.temperature=0.5"]);
    let resolved = |d: &Path| -> Value { serde_json::from_slice(&std::fs::read(d.join("resolved.json")).unwrap()).unwrap() };
    assert_ne!(resolved(&a)["data"]["eval"][0]["path"], resolved(&b)["data"]["eval"][0]["path"], "the clones' files are at different paths");
    let dirs: Vec<String> = [&a, &b, &c].iter().map(|d| d.display().to_string()).collect();
    let r = one.run(&["compare", &dirs[0], &dirs[1], &dirs[2], "--html", "clones.html"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    eprintln!("{}", r.stdout);
    for line in r.stdout.lines() {
        assert!(line.chars().count() <= 100, "wider than 100 columns: {line:?}");
    }
    assert!(r.stdout.contains("rlx compare: 3 runs → 2 arms (differ in: eval.temperature)"), "{}", r.stdout);
    for path_key in ["data.train.0.path", "data.eval.0.path", "data.eval.1.path", "prompt.user"] {
        assert!(!r.stdout.contains(path_key), "`{path_key}` holds the same bytes in both clones:\n{}", r.stdout);
    }
    let arms = section(&r.stdout, "arms (");
    assert!(arms.contains("temperature=1.0  #1,#2") && arms.contains("temperature=0.5  #3"), "{arms}");
    assert!(!r.stdout.contains("arm labels"), "one key: no legend needed");
    // Per-source pass@k: `easy` (f right, g wrong) 50% → 50% for the warm arm; the cold one
    // gets f wrong at both evals (the baseline is evaluated at the eval temperature too).
    let src = section(&r.stdout, "eval by source");
    let row = |run: &str, source: &str| src.lines().find(|l| l.split_whitespace().take(2).eq([run, source])).unwrap_or_else(|| panic!("no {run} {source} in\n{src}")).split_whitespace().collect::<Vec<_>>();
    assert_eq!(row("#1", "easy")[2..5], ["2", "-1→1", "50.0→50.0"], "{src}");
    assert_eq!(row("#1", "hard")[2..5], ["1", "-1→1", "0.0→0.0"], "{src}");
    assert_eq!(row("#3", "easy")[2..5], ["2", "-1→1", "0.0→0.0"], "{src}");
    // The diagnostic each run fired (every group degenerate at step 0).
    let diag = section(&r.stdout, "diagnostics fired");
    assert!(diag.lines().nth(1).unwrap().starts_with("  #1,#2,#3 step 0 groups_degenerate: every group degenerate"), "one line for the same firing in three runs: {diag}");
    // The drop, linked in the HTML report to both sides' completions of problem 1.
    let cmp = section(&r.stdout, "`temperature=0.5` − `temperature=1.0`");
    assert!(cmp.contains("largest drops: 1 (−100.0 pp)"), "{cmp}");
    let html = std::fs::read_to_string(one.path().join("clones.html")).unwrap();
    let anchor = "drop-0-1";
    assert!(html.contains(&format!("largest drops: <a href=\"#{anchor}\">1</a> (−100.0 pp)")), "the drop links to its completions");
    let section_html = &html[html.find(&format!("id=\"{anchor}\"")).expect("the drop's section")..];
    for side in ["#1 `temperature=1.0` step 1", "#2 `temperature=1.0` step 1", "#3 `temperature=0.5` step 1"] {
        assert!(section_html.contains(&format!("<h4>{side}</h4>")), "missing side {side}");
    }
    assert!(section_html.contains("return 1") && section_html.contains("return 0"), "both sides' code");
    assert!(section_html.contains("<span class=\"fail\">wrong answer</span>") && section_html.contains("<b class=\"pass\">passed</b>"), "verdicts per sample and per test");
    assert!(html.contains("eval by source") && html.contains("diagnostics fired"));
    // Kept for people to look at, as the screenshot is.
    let _ = std::fs::create_dir_all(repo().join("target"));
    let _ = std::fs::copy(one.path().join("clones.html"), repo().join("target/compare-clones.html"));
}

/// Two real runs of the tiny model, one under `RLX_TRAIN_PACK=off`: `provenance.json` records
/// the switch in force in each (`on` by default), and `rlx compare` shows it as the one config
/// difference, so the two runs are two arms instead of one arm's replicates.
#[test]
fn an_environment_switch_that_changes_results_is_recorded_and_compared() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &crate::engine::spec_with(1, 1, "").replace("eval_every: 2", "eval_every: 1"));
    for (name, pack) in [("name=pack-on", None), ("name=pack-off", Some("off"))] {
        let mut c = cx.rlx();
        c.args(["run", "spec.yaml", name]);
        if let Some(v) = pack {
            c.env("RLX_TRAIN_PACK", v);
        }
        let r = crate::common::Run::from(c.output().unwrap());
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    }
    let runs = runs_in(&cx);
    assert_eq!(runs.len(), 2);
    let switches = |run: &str| {
        let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cx.path().join(run).join("provenance.json")).unwrap()).unwrap();
        p["switches"].clone()
    };
    let (on, off) = if runs[0].contains("pack-on") { (&runs[0], &runs[1]) } else { (&runs[1], &runs[0]) };
    assert_eq!(switches(on)["RLX_TRAIN_PACK"], "on", "{}", switches(on));
    assert_eq!(switches(off)["RLX_TRAIN_PACK"], "off", "{}", switches(off));
    for key in ["RLX_TRAIN_PASS", "RLX_ALLOC", "RLX_ISA"] {
        assert_eq!(switches(on)[key], switches(off)[key], "{key}");
    }
    let r = cx.run(&["compare", on, off]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("rlx compare: 2 runs → 2 arms (differ in: env.RLX_TRAIN_PACK)"), "{}", r.stdout);
    assert!(r.stdout.contains("`RLX_TRAIN_PACK=off`") && r.stdout.contains("`RLX_TRAIN_PACK=on`"), "the arms are named by the switch: {}", r.stdout);
}
