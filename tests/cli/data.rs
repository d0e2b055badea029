//! Dataset loading: every file in ../shared/data loads with the right problem and test counts,
//! and rows that fit no format are reported with the file and row. Without ../shared (a user's
//! clone) the tests of those files are skipped.

use std::path::Path;

use rlx::data::{self, Format, Tests};

use crate::common::shared_data;

// Paths under ../shared/data.
const LCB: &str = "lcb/lcb_train_580.json";
const CODE_CONTESTS: &str = "lcb/code_contests_test_165.json";
const MBPP: &str = "mbpp/mbpp.jsonl";
const MBPP_SANITIZED: &str = "mbpp/sanitized-mbpp.json";

fn counts(problems: &[data::Problem]) -> (usize, usize, usize, usize, usize) {
    let (mut stdin, mut functional, mut asserts) = (0, 0, 0);
    let mut tests = 0;
    for p in problems {
        tests += p.tests.len();
        match &p.tests {
            Tests::Stdin { .. } => stdin += 1,
            Tests::Functional { .. } => functional += 1,
            Tests::Asserts { .. } => asserts += 1,
            Tests::Check { .. } => {}
        }
    }
    (problems.len(), stdin, functional, asserts, tests)
}

#[test]
fn livecodebench_580() {
    let Some(lcb) = shared_data(LCB) else { return };
    let problems = data::load_file(&lcb, None).unwrap();
    assert_eq!(counts(&problems), (580, 303, 277, 0, 1543));
    // Functional problems take their method name from the starter code.
    let p = &problems[0];
    assert_eq!(p.id, "lcb_train_580/0");
    match &p.tests {
        Tests::Functional { fn_name, cases } => {
            assert_eq!(fn_name, "countSeniors");
            assert_eq!(cases[0].output, "2");
        }
        other => panic!("expected functional tests, got {other:?}"),
    }
    assert!(p.starter_code.as_deref().unwrap().contains("class Solution"));
}

#[test]
fn code_contests_165() {
    let Some(cc) = shared_data(CODE_CONTESTS) else { return };
    let problems = data::load_file(&cc, None).unwrap();
    assert_eq!(counts(&problems), (165, 165, 0, 0, 1837));
    // Forcing the format it has works too; forcing another one fails on row 0.
    assert_eq!(data::load_file(&cc, Some(Format::Taco)).unwrap().len(), 165);
    let err = data::load_file(&cc, Some(Format::Mbpp)).unwrap_err();
    assert!(err.to_string().contains("row 0"), "{err}");
}

#[test]
fn mbpp_full_and_sanitized() {
    let (Some(mbpp), Some(mbpp_sanitized)) = (shared_data(MBPP), shared_data(MBPP_SANITIZED)) else { return };
    let full = data::load_file(&mbpp, None).unwrap();
    assert_eq!(counts(&full), (974, 0, 0, 974, 2922));
    let with_setup = full.iter().filter(|p| matches!(&p.tests, Tests::Asserts { setup, .. } if !setup.trim().is_empty())).count();
    assert_eq!(with_setup, 2);
    assert_eq!(full[0].id, "1");
    let sanitized = data::load_file(&mbpp_sanitized, None).unwrap();
    assert_eq!(counts(&sanitized), (427, 0, 0, 427, 1324));
    let with_imports = sanitized.iter().filter(|p| matches!(&p.tests, Tests::Asserts { setup, .. } if !setup.trim().is_empty())).count();
    assert_eq!(with_imports, 13);
}

#[test]
fn unknown_rows_are_reported_with_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.jsonl");
    std::fs::write(
        &path,
        "{\"problem\": \"p\", \"tests\": [{\"input\": \"1\", \"output\": \"1\"}]}\n{\"question\": \"q\", \"answer\": 3}\n",
    )
    .unwrap();
    let err = data::load_file(&path, None).unwrap_err().to_string();
    assert!(err.contains("mixed.jsonl") && err.contains("row 1") && err.contains("`answer`"), "{err}");
}

#[test]
fn bad_json_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "{\"problem\": \"p\", \"tests\": []}\n{not json\n").unwrap();
    let err = data::load_file(&path, None).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
}

/// `(tests per problem, problems with that many)`, ascending.
fn histogram(problems: &[data::Problem]) -> Vec<(usize, usize)> {
    let mut h = std::collections::BTreeMap::new();
    for p in problems {
        *h.entry(p.tests.len()).or_insert(0) += 1;
    }
    h.into_iter().collect()
}

fn raw_rows(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "jsonl") {
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

#[test]
fn per_problem_test_counts_match_the_files() {
    // Each problem has exactly as many tests as its row lists, counted from the raw JSON.
    type Count = fn(&serde_json::Value) -> usize;
    let (Some(lcb), Some(cc), Some(mbpp), Some(sanitized)) =
        (shared_data(LCB), shared_data(CODE_CONTESTS), shared_data(MBPP), shared_data(MBPP_SANITIZED))
    else {
        return;
    };
    let cases: [(&Path, Count); 4] = [
        (&lcb, |r| r["tests"].as_array().unwrap().len()),
        (&cc, |r| r["tests"]["inputs"].as_array().unwrap().len()),
        (&mbpp, |r| r["test_list"].as_array().unwrap().len()),
        (&sanitized, |r| r["test_list"].as_array().unwrap().len()),
    ];
    for (path, count) in cases {
        let problems = data::load_file(path, None).unwrap();
        let rows = raw_rows(path);
        assert_eq!(problems.len(), rows.len(), "{}", path.display());
        for (i, (p, row)) in problems.iter().zip(&rows).enumerate() {
            assert_eq!(p.tests.len(), count(row), "{} row {i}", path.display());
        }
    }
    // The distributions, as documented in reference/datasets.md (computed with Python).
    let lcb = data::load_file(&lcb, None).unwrap();
    assert_eq!(histogram(&lcb), [(2, 233), (3, 315), (4, 29), (5, 2), (6, 1)]);
    let sanitized = data::load_file(&sanitized, None).unwrap();
    assert_eq!(histogram(&sanitized), [(3, 397), (4, 22), (5, 4), (6, 3), (7, 1)]);
    let cc = data::load_file(&cc, None).unwrap();
    let h = histogram(&cc);
    assert_eq!((h.first().copied(), h.last().copied()), (Some((1, 40)), Some((138, 1))));
}
