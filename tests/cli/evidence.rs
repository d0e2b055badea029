//! Evidence a skeptic accepts (issue #54), on constructed data with known answers: pass@1 by
//! problem category in `rlx compare` (an arm's seeds pooled per problem) and `rlx doctor`, under
//! both protocols; `scripts/trl_anchor.py`'s report pooled per problem, with the interval of
//! TRL − rlx and the equivalence test; and `rlx grade` regrading a run's stored answers against
//! new tests, counting the verdicts that change.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{TestContext, python_available, repo};

/// Problems p0..p3 count, p4..p7 keep.
const PROBLEMS: usize = 8;

fn category(i: usize) -> &'static str {
    if i < 4 { "count" } else { "keep" }
}

/// A run with a sampled eval (4 samples a problem) and a greedy one at steps −1 and 9: `sampled`
/// the correct counts, `greedy` the pass/fail, each (baseline, final) per problem.
fn write_run(root: &Path, id: &str, seed: u32, sampled: [(u32, u32); PROBLEMS], greedy: [(bool, bool); PROBLEMS]) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let resolved = json!({
        "name": "cat", "seed": seed, "model": {"base": "tiny"},
        "data": {"eval": [{"path": "data/family_test.jsonl", "format": "mbpp"}]},
        "schedule": {"max_steps": 10, "eval_every": 10},
        "eval": {"k": [1], "samples": 4, "temperature": 0.7, "greedy": true},
    });
    std::fs::write(dir.join("resolved.json"), resolved.to_string()).unwrap();
    let status = json!({"schema_version": 1, "run_id": id, "state": "finished", "steps_done": 10, "max_steps": 10, "started_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:10:00Z"});
    std::fs::write(dir.join("status.json"), status.to_string()).unwrap();
    let (mut results, mut metrics) = (String::new(), String::new());
    for (at, step) in [(0, -1i64), (1, 9)] {
        let (mut sum, mut greedy_sum) = (0.0, 0.0);
        for i in 0..PROBLEMS {
            let c = if at == 0 { sampled[i].0 } else { sampled[i].1 };
            let ok = if at == 0 { greedy[i].0 } else { greedy[i].1 };
            sum += f64::from(c) / 4.0;
            greedy_sum += f64::from(u8::from(ok));
            let statuses: Vec<&str> = (0..4).map(|k| if k < c { "passed" } else { "failed" }).collect();
            let (id, cat) = (format!("p{i}"), category(i));
            results += &format!("{}\n", json!({"step": step, "problem_id": id, "category": cat, "n": 4, "correct": c, "statuses": statuses, "tests_passed": [1, 1, 1, 1], "metrics": {"pass@1": f64::from(c) / 4.0}}));
            results += &format!("{}\n", json!({"step": step, "protocol": "greedy", "problem_id": id, "category": cat, "n": 1, "correct": u32::from(ok), "statuses": [if ok { "passed" } else { "failed" }], "tests_passed": [1], "metrics": {"pass@1": f64::from(u8::from(ok))}}));
        }
        let n = PROBLEMS as f64;
        metrics += &format!("{}\n", json!({"step": step, "eval/pass@1": sum / n, "eval/greedy/pass@1": greedy_sum / n, "eval/format_rate": 1.0, "eval/greedy/format_rate": 1.0, "eval/problems": PROBLEMS, "time/eval_s": 5.0}));
    }
    std::fs::write(dir.join("eval_results.jsonl"), results).unwrap();
    std::fs::write(dir.join("metrics.jsonl"), metrics).unwrap();
    dir
}

/// Two seeds of one recipe. Per problem (pooled over the seeds, sampled pass@1 as c/4):
///
/// | problem | cat | sampled base | s0 final | s1 final | pooled | greedy base | s0 | s1 | pooled |
/// |---|---|---|---|---|---|---|---|---|---|
/// | p0 | count | 0 | 4 | 4 | 1 | 0 | 1 | 1 | 1 |
/// | p1 | count | 0 | 2 | 4 | .75 | 0 | 0 | 1 | .5 |
/// | p2 | count | 2 | 2 | 2 | .5 | 1 | 1 | 1 | 1 |
/// | p3 | count | 4 | 4 | 2 | .75 | 1 | 1 | 0 | .5 |
/// | p4 | keep | 1 | 2 | 1 | .375 | 0 | 0 | 1 | .5 |
/// | p5 | keep | 1 | 0 | 0 | 0 | 1 | 0 | 0 | 0 |
/// | p6 | keep | 0 | 0 | 0 | 0 | 0 | 0 | 1 | .5 |
/// | p7 | keep | 0 | 2 | 4 | .75 | 0 | 0 | 0 | 0 |
fn two_seeds(root: &Path) {
    let base = [0, 0, 2, 4, 1, 1, 0, 0];
    let greedy_base = [false, false, true, true, false, true, false, false];
    let finals = [([4, 2, 2, 4, 2, 0, 0, 2], [true, false, true, true, false, false, false, false]), ([4, 4, 2, 2, 1, 0, 0, 4], [true, true, true, false, true, false, true, false])];
    for (seed, (s, g)) in finals.into_iter().enumerate() {
        let sampled = std::array::from_fn(|i| (base[i], s[i]));
        let greedy = std::array::from_fn(|i| (greedy_base[i], g[i]));
        write_run(root, &format!("s{seed}"), seed as u32, sampled, greedy);
    }
}

fn section<'a>(out: &'a str, title: &str) -> &'a str {
    let start = out.find(title).unwrap_or_else(|| panic!("no `{title}` in:\n{out}"));
    let rest = &out[start..];
    rest.find("\n\n").map_or(rest, |e| &rest[..e])
}

#[test]
fn compare_and_doctor_break_pass_at_1_down_by_category() {
    let cx = TestContext::new();
    two_seeds(&cx.path().join("runs"));
    let r = cx.run(&["compare", "runs/s0", "runs/s1", "--steps", "-1,last"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let t = section(&r.stdout, "pass@1 by category");
    assert!(t.contains("(#1,#2), step -1 → last"), "{t}");
    let row = |name: &str| t.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("no {name} row: {t}")).split_whitespace().collect::<Vec<_>>().join(" ");
    // count: sampled (0 + 0 + .5 + 1)/4 = 37.5% → (1 + .75 + .5 + .75)/4 = 75.0%, p0 and p1 up,
    // p3 down; greedy 50.0% → 75.0% the same way.
    assert_eq!(row("count"), "count 4 37.5 → 75.0 (+37.5; 2↑ 1↓) 50.0 → 75.0 (+25.0; 2↑ 1↓)");
    // keep: sampled 12.5% → (.375 + 0 + 0 + .75)/4 = 28.125%; greedy 25.0% → 25.0%, with two
    // problems up (p4, p6) and one down (p5): level is not unchanged.
    assert_eq!(row("keep"), "keep 4 12.5 → 28.1 (+15.6; 2↑ 1↓) 25.0 → 25.0 (+0.0; 2↑ 1↓)");
    // Every problem once: 25.0% → 51.6% sampled (p0, p1, p4, p7 up; p3, p5 down), greedy 37.5% →
    // 50.0%. Counted per seed × problem it would be 16 pairs, not 8.
    assert_eq!(row("all"), "all 8 25.0 → 51.6 (+26.6; 4↑ 2↓) 37.5 → 50.0 (+12.5; 4↑ 2↓)");
    let wide: Vec<&str> = r.stdout.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "lines over 100 columns: {wide:#?}");
    // JSON carries the same numbers.
    let j = cx.run(&["compare", "runs/s0", "runs/s1", "--steps", "-1,last", "--format", "json"]);
    let v: Value = serde_json::from_str(&j.stdout).unwrap();
    let keep = &v["categories"][0]["rows"][1];
    assert_eq!((keep["category"].as_str(), keep["sampled"]["to"].as_f64(), keep["greedy"]["up"].as_u64()), (Some("keep"), Some(0.28125), Some(2)));

    // Doctor on seed 0 alone: sampled count 37.5% → 75.0% (p0, p1 up), keep 12.5% → 25.0% (p4,
    // p7 up, p5 down); greedy count 50.0% → 75.0%, keep 25.0% → 0.0%.
    let d = cx.run(&["doctor", "runs/s0"]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    let b = section(&d.stdout, "By category");
    assert!(b.contains("By category (pass@1 %, the baseline → step 9, each problem once; no test per category)"), "{b}");
    let line = |name: &str| b.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("no {name} line: {b}")).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(b.lines().nth(1).unwrap().contains("sampled") && b.lines().nth(1).unwrap().contains("greedy"), "{b}");
    assert_eq!(line("count"), "count 4 37.5 → 75.0 (+37.5; 2↑ 0↓) 50.0 → 75.0 (+25.0; 1↑ 0↓)");
    assert_eq!(line("keep"), "keep 4 12.5 → 25.0 (+12.5; 2↑ 1↓) 25.0 → 0.0 (−25.0; 0↑ 1↓)");
    assert_eq!(line("all"), "all 8 25.0 → 50.0 (+25.0; 4↑ 1↓) 37.5 → 37.5 (+0.0; 1↑ 1↓)");
    assert!(b.lines().all(|l| l.chars().count() <= 100), "{b}");

    // Records without a category: no breakdown, in either command.
    let plain = cx.path().join("runs/s0/eval_results.jsonl");
    let text = std::fs::read_to_string(&plain).unwrap().replace(r#""category":"count","#, "").replace(r#""category":"keep","#, "");
    std::fs::write(&plain, text).unwrap();
    assert!(!cx.run(&["doctor", "runs/s0"]).stdout.contains("By category"));
    assert!(!cx.run(&["compare", "runs/s0"]).stdout.contains("pass@1 by category"));
    // Unless the eval file the run names carries them now (a run made before records had one):
    // joined by problem id, and said so.
    let rows: String = (0..PROBLEMS).map(|i| json!({"task_id": format!("p{i}"), "text": "t", "code": "c", "test_list": ["assert True"], "category": category(i)}).to_string() + "\n").collect();
    cx.write("data/family_test.jsonl", &rows);
    let d = cx.run(&["doctor", "runs/s0"]);
    assert!(d.stdout.contains("(its eval records name no category: the categories of 8 problems read from `data/family_test.jsonl` now)"), "{}", d.stdout);
    assert_eq!(section(&d.stdout, "By category").lines().find(|l| l.trim_start().starts_with("keep")).unwrap().split_whitespace().collect::<Vec<_>>().join(" "), "keep 4 12.5 → 25.0 (+12.5; 2↑ 1↓) 25.0 → 0.0 (−25.0; 0↑ 1↓)");
    let c = cx.run(&["compare", "runs/s0"]);
    assert!(c.stdout.contains("pass@1 by category") && c.stdout.contains("categories of 8 problems read from"), "{}", c.stdout);
}

/// The committed task's rows each name their operation, and the loader keeps it: what the eval
/// records carry.
#[test]
fn every_task_row_names_its_operation() {
    for split in ["train", "dev", "test"] {
        let text = std::fs::read_to_string(repo().join(format!("experiments/data/family_{split}.jsonl"))).unwrap();
        for line in text.lines() {
            let row: Value = serde_json::from_str(line).unwrap();
            let name = row["code"].as_str().unwrap().split('(').next().unwrap().trim_start_matches("def ").to_owned();
            let want = match name.split('_').collect::<Vec<_>>()[..] {
                ["sum", t] if !t.is_empty() && row["code"].as_str().unwrap().contains(" if ") => "sum",
                ["sum", _] => "sum_map",
                [_, "all"] => "map",
                [op, _] => op,
                _ => panic!("{name}"),
            };
            assert_eq!(row["category"].as_str(), Some(want), "{split}: {name}");
        }
    }
}

/// The TRL anchor's report on constructed results (no training): 40 problems, three seeds.
/// Greedy: both systems' baseline solves p00..p19; rlx's final too, TRL's p01..p20 on every seed.
/// Sampled: the baseline solves p00..p03; rlx's final p00..p07, p00..p08, p00..p09 on seeds 0, 1,
/// 2; TRL's the same without p00 and with p39.
fn anchor_results() -> Value {
    let ids: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
    let score = |solved: &dyn Fn(usize) -> bool| -> Value { ids.iter().enumerate().map(|(i, id)| (id.clone(), json!(if solved(i) { 1.0 } else { 0.0 }))).collect::<serde_json::Map<_, _>>().into() };
    let results: Vec<Value> = (0..3usize)
        .map(|s| {
            let mut r = json!({
                "seed": s, "run": format!("runs/r{s}"), "trl_run": format!("seed-{s}/trl-run"),
                "rlx_step_s": [10.0, 10.0],
                "rlx_tokens": [{"step_s": 10.0, "action_tokens": 300, "datums": 16, "prompt_tokens_mean": 100.0},
                               {"step_s": 10.0, "action_tokens": 500, "datums": 16, "prompt_tokens_mean": 100.0}],
                "group_size": 8, "completions_per_step": 16,
                "trl": {"versions": {"trl": "1.16.0", "torch": "2.15.0", "transformers": "5.23.0"},
                        "timing": {"step_s": [40.0, 40.0], "generate_s": [15.0, 15.0], "reward_s": [1.0, 1.0]},
                        "log": [{"num_tokens": 2000, "completions/mean_length": 25.0}, {"num_tokens": 4200, "completions/mean_length": 30.0}]},
                "scores": {
                    "base_greedy": score(&|i| i < 20), "rlx_greedy": score(&|i| i < 20), "trl_greedy": score(&|i| (1..21).contains(&i)),
                    "base_sampled": score(&|i| i < 4), "rlx_sampled": score(&|i| i < 8 + s), "trl_sampled": score(&|i| (i < 8 + s && i != 0) || i == 39),
                },
            });
            if s == 2 {
                r.as_object_mut().unwrap().remove("rlx_tokens");
            }
            r
        })
        .collect();
    json!(results)
}

#[test]
fn trl_anchor_pools_per_problem_with_an_interval_and_an_equivalence_test() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    let file = cx.write("results.json", &anchor_results().to_string());
    let anchor = |margin: &str| {
        let out = std::process::Command::new("python3").arg(repo().join("scripts/trl_anchor.py")).args(["--report", file.to_str().unwrap(), "--margin", margin]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let out = anchor("10");
    let pooled = section(&out, "pooled per problem over seeds 0,1,2");
    // rlx's sampled gain pooled per problem: p04..p07 +1, p08 +2/3, p09 +1/3: 6 up, exact
    // sign-flip p = 2/2^6 = 0.0312. Counted per seed × problem it would be 15 up, p = 6.1e-5.
    assert!(pooled.contains("sampled RLX base → final: 10.0% → 22.5%, +12.5 pp, 6 up / 0 down of 40 problems, sign-flip exact p = 0.0312"), "{pooled}");
    assert!(!out.contains("6.1e-05"), "{out}");
    // TRL − rlx greedy: −1 at p00, +1 at p20 on every seed, so per problem too: mean 0, SE =
    // √(2/39)/√40 = 0.0358, 95% t interval ±2.023·SE = ±7.2 pp; equivalent within ±10 pp (TOST
    // p = 0.004, as `rlx compare --margin 10` on the same differences).
    assert!(pooled.contains("greedy TRL − rlx final: +0.0 pp, 95% CI [-7.2, +7.2] pp, TRL better on 1, rlx on 1 of 40 problems, sign-flip exact p = 1"), "{pooled}");
    assert!(pooled.contains("equivalent within ±10.0 pp (TOST p = 0.00403; 90% CI [-6.0, +6.0] pp)"), "{pooled}");
    assert!(pooled.contains("sampled TRL − rlx final: +0.0 pp, 95% CI [-7.2, +7.2] pp"), "{pooled}");
    // Within ±5 pp it is not shown, and a non-significant difference is not called none.
    let narrow = anchor("5");
    assert!(narrow.contains("not shown equivalent within ±5.0 pp (TOST p = 0.0852; 90% CI [-6.0, +6.0] pp); no difference detected, which is not evidence of none"), "{narrow}");
    // Tokens per second of step: rlx 800 completion tokens and 2 × 2 groups' 100-token prompts in
    // 20 s; TRL 16 × (25 + 30) completion tokens and 4,200 tokens in all in 80 s.
    assert!(out.contains("seed 0: rlx 40.0 completion, 60.0 trained; TRL 11.0 completion, 52.5 trained"), "{out}");
    assert!(out.contains("seed 2: rlx not recorded; TRL 11.0 completion, 52.5 trained"), "{out}");
    assert!(out.contains("seconds per training step: rlx 10.0, TRL 40.0 (generate 15.0, rlx grade 1.0, the rest 24.0); TRL/rlx = 4.00×"), "{out}");
    let bad = std::process::Command::new("python3").arg(repo().join("scripts/trl_anchor.py")).args(["--report", file.to_str().unwrap(), "--margin", "0"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// A run's stored answers graded again against new tests: `len(set(...))` passed the old tests of
/// `count_gt2` (no repeated value) and fails the new ones; an answer the old tests rejected by
/// mistake passes; a format error stays one.
#[test]
fn grade_regrades_a_runs_stored_answers() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    let problems = cx.write(
        "family_test.jsonl",
        concat!(
            r#"{"task_id": 62001, "text": "count", "code": "def count_gt2(xs):\n    return sum(1 for x in xs if x > 2)", "test_list": ["assert count_gt2([3, 3, 1]) == 2", "assert count_gt2([]) == 0"], "category": "count"}"#,
            "\n",
            r#"{"task_id": 62002, "text": "keep", "code": "def keep_even(xs):\n    return [x for x in xs if x % 2 == 0]", "test_list": ["assert keep_even([1, 2, 4]) == [2, 4]"], "category": "keep"}"#,
            "\n"
        ),
    );
    let answer = |code: &str| format!("```python\n{code}\n```\n");
    let rec = |step: i64, protocol: Option<&str>, id: &str, text: String, status: &str| {
        let mut v = json!({"step": step, "problem_id": id, "sample": 0, "text": text, "code": null, "status": status, "tests_passed": 0, "tests_total": 2, "stop_reason": "stop", "tokens": 10});
        if let Some(p) = protocol {
            v["protocol"] = json!(p);
        }
        v.to_string() + "\n"
    };
    let set = answer("def count_gt2(xs):\n    return len(set(x for x in xs if x > 2))");
    let right = answer("def count_gt2(xs):\n    return sum(1 for x in xs if x > 2)");
    let keep = answer("def keep_even(xs):\n    return [x for x in xs if x % 2 == 0]");
    let records = [
        rec(11, None, "62001", set.clone(), "passed"),
        rec(11, None, "62001", right.clone(), "passed"),
        rec(11, None, "62002", keep.clone(), "failed"),
        rec(11, None, "62002", "I cannot.".into(), "format_error"),
        rec(11, Some("greedy"), "62001", set, "passed"),
        rec(-1, None, "62001", right, "passed"),
    ]
    .concat();
    let stored = cx.write("eval_rollouts.jsonl", &records);
    let r = cx.run(&["grade", "--no-progress", "--problems", problems.to_str().unwrap(), "--completions", stored.to_str().unwrap(), "--out", "verdicts.jsonl"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("against the stored verdicts: step 11: 2 of 4 changed (1 passed → failed, 1 failed → passed: 62001, 62002)"), "{}", r.stderr);
    assert!(r.stderr.contains("against the stored verdicts: step 11 greedy: 1 of 1 changed (1 passed → failed, 0 failed → passed: 62001)"), "{}", r.stderr);
    assert!(r.stderr.contains("against the stored verdicts: step -1: 0 of 1 changed (0 passed → failed, 0 failed → passed)"), "{}", r.stderr);
    let verdicts: Vec<Value> = std::fs::read_to_string(cx.path().join("verdicts.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let statuses: Vec<&str> = verdicts.iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["failed", "passed", "passed", "format_error", "failed", "passed"]);
}

/// A real evaluation (the tiny model on the embedded backend) of two rows of the committed task:
/// each eval record carries its problem's category, under both protocols.
#[test]
fn a_real_evaluation_records_each_problems_category() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let rows: Vec<&str> = include_str!("../../experiments/data/family_test.jsonl").lines().take(2).collect();
    cx.write("fam.jsonl", &(rows.join("\n") + "\n"));
    let want: Vec<(String, String)> = rows.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()).map(|r| (r["task_id"].to_string(), r["category"].as_str().unwrap().to_owned())).collect();
    cx.write(
        "cat.yaml",
        &format!(
            "name: cat
model: {{base: ./tiny}}
backend: {{kind: local}}
data:
  train: [{{path: fam.jsonl, format: mbpp}}]
  eval: [{{path: fam.jsonl, format: mbpp}}]
prompt: {{user: {}}}
sampling: {{max_tokens: 8}}
sandbox: {{kind: local, strict: false}}
eval: {{k: [1], samples: 1, temperature: 0.7, greedy: true}}
",
            repo().join("prompts/mbpp_user.j2").display()
        ),
    );
    let r = cx.run(&["eval", "cat.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let text = format!("{}{}", r.stdout, r.stderr);
    let path = text.split("results → ").nth(1).and_then(|t| t.split_whitespace().next()).unwrap_or_else(|| panic!("no results path: {text}"));
    let records = crate::common::jsonl(&cx.path().join(path));
    assert_eq!(records.len(), 4, "2 problems × 2 protocols: {records:?}");
    for r in &records {
        let id = r["problem_id"].as_str().unwrap();
        let cat = &want.iter().find(|(w, _)| w == id).unwrap_or_else(|| panic!("{id}")).1;
        assert_eq!(r["category"].as_str(), Some(cat.as_str()), "{r}");
    }
}
