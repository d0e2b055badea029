//! `rlx validate`: every error class has a message, a location and (where one exists) a hint;
//! all problems in a file are reported at once; `--explain` prints the plan.

use crate::common::{Run, TestContext, repo};

fn validate_fixture(name: &str) -> Run {
    validate_in_repo(&[&format!("tests/fixtures/specs/{name}")])
}

/// `rlx validate ARGS` from the repository's root.
fn validate_in_repo(args: &[&str]) -> Run {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlx")).current_dir(repo()).env("NO_COLOR", "1").arg("validate").args(args).output().unwrap();
    Run::from(out)
}

/// (fixture, message fragment, `file:line:col` of the caret, hint fragment or "").
const BAD: &[(&str, &str, &str, &str)] = &[
    ("bad_name.yaml", "`name` must be letters, digits", ":1:7", ""),
    ("batch_arithmetic.yaml", "`grpo.batch_size` is 64, but `prompts_per_step` × `group_size` = 8 × 16 = 128", ":8:57", "set `prompts_per_step: 4`"),
    ("broken_template.yaml", "does not compile: unexpected end of input", "broken.j2:3:", "named by `prompt.feedback` at tests/fixtures/specs/bad/broken_template.yaml:8:13"),
    ("chat_training.yaml", "`backend.api: chat` cannot serve training (`schedule.max_steps` is 100)", ":3:66", "not the sampled token ids and their log-probabilities"),
    ("duplicate_key.yaml", "duplicate key `seed`", ":9:1", "first defined at tests/fixtures/specs/bad/duplicate_key.yaml:8:1"),
    ("feedback_required.yaml", "`rollout.max_attempts` is 3 but `prompt.feedback` is not set", ":8:25", "feedback template"),
    ("float_for_integer.yaml", "`schedule.max_steps` must be an integer, found a number `10.0`", ":8:23", "write it as an integer: `10`"),
    ("greedy_pass_at_k.yaml", "`eval.temperature` is 0 (greedy) with 5 samples", ":8:7", "`eval.temperature` > 0"),
    ("group_size_one.yaml", "`grpo.group_size` must be at least 2 to train, found 1", ":8:20", "no baseline"),
    ("incompatible_backend.yaml", "the `openai` backend can only sample", ":3:17", "evaluation-only run"),
    ("misplaced_key.yaml", "unknown field `temperature` in `grpo`", ":9:3", "`sampling.temperature`"),
    ("missing_dataset.yaml", "dataset `../nope.jsonl` does not exist", ":5:18", ""),
    ("missing_field.yaml", "missing field `user` in `prompt`", ":6:9", "User message template"),
    ("missing_template.yaml", "template `../nope.j2` does not exist", ":7:9", ""),
    ("out_of_range.yaml", "`sampling.temperature` must be ≥ 0, found `-1`", ":9:16", ""),
    ("tinker_partial_lora.yaml", "Tinker adapts all attention projections or none", ":2:85", "list all of q_proj, k_proj, v_proj, o_proj"),
    ("tinker_tempered_learner.yaml", "sampling at temperature 0.7 on Tinker, whose learner scores at temperature 1", ":8:25", "write `grpo.learner_temperature: 1` to run it knowingly"),
    ("unknown_enum.yaml", "`sandbox.kind` must be one of `local`, `fusion`, `cwsandbox`, found `fusoin`", ":8:17", "did you mean `fusion`?"),
    ("unknown_field.yaml", "unknown field `learning_rte` in `optimizer`", ":9:3", "did you mean `learning_rate`?"),
    ("unknown_kind.yaml", "unknown `backend.kind` `tinkr`", ":3:17", "did you mean `tinker`?"),
    ("unknown_language.yaml", "`data.train[0].language` must be one of `python`, `cpp`, `c`, found `c++`", ":5:44", "did you mean `cpp`?"),
    ("weighted_without_terms.yaml", "`reward.kind: weighted` needs `reward.terms`", ":8:9", "terms: [{kind: tests_fraction"),
    ("wrong_type.yaml", "`optimizer.beta1` must be a number, found a string `fast`", ":8:20", ""),
    ("yaml11_boolean.yaml", "`data.shuffle` must be `true` or `false`, found a string `yes`", ":6:12", "YAML 1.2"),
    ("yaml_syntax.yaml", "invalid YAML", ":3:8", ""),
];

#[test]
fn every_bad_fixture_has_a_located_error() {
    let dir = repo().join("tests/fixtures/specs/bad");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    on_disk.sort();
    let mut listed: Vec<String> = BAD.iter().map(|b| b.0.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "each file in tests/fixtures/specs/bad needs an entry in BAD");
    for (file, message, loc, hint) in BAD {
        let r = validate_fixture(&format!("bad/{file}"));
        assert_eq!(r.code, 2, "{file}: {}", r.stderr);
        assert!(r.stderr.contains(message), "{file}: expected `{message}` in\n{}", r.stderr);
        let located = r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains(loc));
        assert!(located, "{file}: expected a location containing `{loc}` in\n{}", r.stderr);
        if !hint.is_empty() {
            assert!(r.stderr.lines().any(|l| l.contains("help:") && l.contains(hint)), "{file}: expected hint `{hint}` in\n{}", r.stderr);
        }
        assert!(r.stderr.contains("1 problem found"), "{file}: one problem per fixture\n{}", r.stderr);
    }
}

#[test]
fn good_fixtures_and_shipped_experiments_validate() {
    // Every shipped spec, found rather than listed: a listed one drifted (quickstart-sft named an
    // eval file the task's regeneration had removed) while the list still passed.
    let mut specs: Vec<String> = std::fs::read_dir(repo().join("experiments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| format!("experiments/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    assert!(specs.len() >= 10, "{specs:?}");
    specs.extend(["tests/fixtures/specs/ok/minimal.yaml".into(), "tests/fixtures/specs/ok/full.yaml".into()]);
    for spec in specs {
        let r = validate_fixture(&format!("../../../{spec}"));
        assert_eq!(r.code, 0, "{spec}: {}", r.stderr);
        assert!(r.stderr.contains("is valid"), "{spec}: {}", r.stderr);
    }
}

#[test]
fn shipped_specs_declare_their_schema() {
    for entry in std::fs::read_dir(repo().join("experiments")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            let first = std::fs::read_to_string(&p).unwrap().lines().next().unwrap_or("").to_string();
            assert_eq!(first, "# yaml-language-server: $schema=../schemas/experiment.schema.json", "{}", p.display());
        }
    }
}

#[test]
fn all_problems_reported_at_once_across_file_and_overrides() {
    let cx = TestContext::new();
    cx.write(
        "spec.yaml",
        "name: my run\nmodel: {base: org/model}\nbackend: {kind: local}\ndata:\n  train: [{path: missing.jsonl}]\nprompt:\n  user: user.j2\noptimizer:\n  learning_rte: 1e-5\n  beta1: fast\ngrpo:\n  group_size: 1\n",
    );
    let r = cx.run(&["validate", "spec.yaml", "grpo.prompts_per_stp=3", "lr=-1"]);
    assert_eq!(r.code, 2);
    for m in [
        "unknown field `learning_rte` in `optimizer`",
        "`optimizer.beta1` must be a number",
        "unknown field `prompts_per_stp` in `grpo`",
        "`name` must be letters",
        "`grpo.group_size` must be at least 2",
        "dataset `missing.jsonl` does not exist",
        "`optimizer.learning_rate` must be > 0, found -1",
    ] {
        assert!(r.stderr.contains(m), "missing `{m}` in\n{}", r.stderr);
    }
    assert_eq!(r.error_count(), 7, "{}", r.stderr);
    assert!(r.stderr.contains("7 problems found"));
    // The override's problems point into the command line.
    assert!(r.stderr.contains("--> command line:1:1"), "{}", r.stderr);
    assert!(r.stderr.contains("help: did you mean `prompts_per_step`?"));
}

#[test]
fn overrides_change_the_plan_and_aliases_expand() {
    let cx = TestContext::new();
    let base = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let over = cx.run(&["validate", "spec.yaml", "lr=4e-5", "group_size=16", "steps=7", "--explain"]);
    assert_eq!(over.code, 0, "{}", over.stderr);
    assert!(over.stdout.contains("overrides       optimizer.learning_rate=4e-5 grpo.group_size=16 schedule.max_steps=7"), "{}", over.stdout);
    assert!(over.stdout.contains("steps           7"));
    assert!(over.stdout.contains("8 problems × 16 completions = 128 completions"), "{}", over.stdout);
    let id = |r: &Run| r.stderr.split("(run `").nth(1).unwrap().split('`').next().unwrap().to_string();
    assert_ne!(id(&base), id(&over));
    // Same inputs, same run id.
    assert_eq!(id(&over), id(&cx.run(&["validate", "spec.yaml", "lr=4e-5", "group_size=16", "steps=7"])));
    // A different order of overrides of different keys is the same experiment.
    assert_eq!(id(&over), id(&cx.run(&["validate", "spec.yaml", "steps=7", "group_size=16", "lr=4e-5"])));
}

#[test]
fn explain_prints_the_plan_and_pilot_estimate() {
    let cx = TestContext::new();
    cx.write("eval.jsonl", "{}\n");
    let r = cx.run(&[
        "validate", "spec.yaml", "grpo.prompts_per_step=8", "group_size=16", "max_tokens=1000", "steps=100",
        "data.eval=[{path: eval.jsonl}]", "--explain", "--pilot-pass-rate", "0.1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("≤ 128,000 per step"), "{}", r.stdout);
    assert!(r.stdout.contains("≤ 12,800,000 over the run"), "{}", r.stdout);
    assert!(r.stdout.contains("11 evals"), "{}", r.stdout);
    // 0.1^16 + 0.9^16 = 0.18530...
    assert!(r.stdout.contains("= 18.53%"), "{}", r.stdout);
    assert!(r.stdout.contains("~6.52 of 8 groups"), "{}", r.stdout);
    let bad = cx.run(&["validate", "spec.yaml", "--explain", "--pilot-pass-rate", "1.5"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("between 0 and 1"));
}

#[test]
fn relative_paths_resolve_from_their_source() {
    // Paths in the spec resolve against the spec's directory; paths in overrides against the
    // current directory.
    let cx = TestContext::new();
    cx.write("sub/spec.yaml", &crate::common::MINIMAL.replace("train.jsonl", "../train.jsonl").replace("user.j2", "../user.j2"));
    assert_eq!(cx.run(&["validate", "sub/spec.yaml"]).code, 0);
    cx.write("other.jsonl", "{}\n");
    let r = cx.run(&["validate", "sub/spec.yaml", "data.train.0.path=other.jsonl"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = cx.run(&["validate", "sub/spec.yaml", "data.train.0.path=../other.jsonl"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--> command line"), "{}", r.stderr);
}

#[test]
fn bad_override_syntax_is_a_usage_error() {
    let cx = TestContext::new();
    for (arg, msg) in [("a..b=1", "invalid key"), ("schedule.max_steps.x=1", "`schedule.max_steps` is an integer, not a mapping"), ("seed.x=1", "`seed` must be an integer, found a mapping"), ("sampling.stop=[oops", "invalid YAML")] {
        let r = cx.run(&["validate", "spec.yaml", arg]);
        assert_eq!(r.code, 2, "{arg}");
        assert!(r.stderr.contains(msg), "{arg}: {}", r.stderr);
    }
    let r = cx.run(&["validate", "nope.yaml"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("cannot read spec `nope.yaml`"), "{}", r.stderr);
}

#[test]
fn misspelled_learning_rate_names_file_line_column_and_the_fix() {
    let cx = TestContext::new();
    cx.write("typo.yaml", &format!("{}optimizer:\n  learning_rat: 1e-5\n", crate::common::MINIMAL));
    let r = cx.run(&["validate", "typo.yaml"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--> typo.yaml:10:3"), "{}", r.stderr);
    assert!(r.stderr.contains("did you mean `learning_rate`?"), "{}", r.stderr);
}

#[test]
fn a_key_of_another_backend_is_named_as_such_with_the_way_to_drop_it() {
    let r = validate_in_repo(&["experiments/quickstart.yaml", "backend.kind=tinker"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("`backend.max_tokens_per_microbatch` is only for `backend.kind: local`, and this `backend` is `kind: tinker`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.lines().any(|l| l.contains("-->") && l.contains("experiments/quickstart.yaml:21:3")), "located in the file: {}", r.stderr);
    assert!(r.stderr.lines().any(|l| l.contains("help:") && l.contains("`~backend.max_tokens_per_microbatch`")), "{}", r.stderr);
    assert!(!r.stderr.contains("belongs elsewhere"), "{}", r.stderr);
    // Dropped with `~`: that problem is gone (what is left is what Tinker itself refuses).
    let dropped = validate_in_repo(&["experiments/quickstart.yaml", "backend.kind=tinker", "~backend.max_tokens_per_microbatch"]);
    assert!(!dropped.stderr.contains("max_tokens_per_microbatch"), "{}", dropped.stderr);
    assert!(dropped.stderr.contains("on Tinker, whose learner scores at temperature 1"), "{}", dropped.stderr);
    // Removing a key that is not there is an error located on the command line.
    let typo = validate_in_repo(&["experiments/quickstart.yaml", "~backend.max_tokens"]);
    assert_eq!(typo.code, 2, "{}", typo.stderr);
    assert!(typo.stderr.contains("cannot remove `backend.max_tokens`: the spec has no such key"), "{}", typo.stderr);
    assert!(typo.stderr.contains("--> command line:1:2"), "{}", typo.stderr);
}
