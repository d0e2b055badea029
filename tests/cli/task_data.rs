//! The quickstart's list-function task (`experiments/data/family_*.jsonl`): its tests reject the
//! plausible wrong programs (the mutation check, `experiments/data/mutants.py`, run with the real
//! Python), no dev or test problem equals or complements a training problem, and the committed
//! files are what the generator writes.

use std::path::Path;
use std::process::{Command, Output};

use super::common::{TestContext, python_available, repo};

fn python(args: &[&str], dir: &Path) -> Output {
    Command::new("python3").args(args).current_dir(dir).output().expect("python3 runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Every problem of the three splits against its wrong programs: none passes every test, and the
/// only ones set aside are the five equivalent to their reference (named in docs).
#[test]
fn no_wrong_program_passes_every_test_of_the_task() {
    if !python_available() {
        return;
    }
    let out = python(&["experiments/data/mutants.py"], &repo());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("mutation check: 149 problems x 1186 wrong programs (5 equivalent set aside): 0 pass every test"), "{t}");
    for (file, n) in [("family_train.jsonl", 70), ("family_dev.jsonl", 28), ("family_test.jsonl", 51)] {
        assert!(t.lines().any(|l| l.starts_with(file) && l.split_whitespace().nth(1) == Some(&n.to_string())), "{file}: {t}");
    }
    // The set-aside ones are equivalent on every input: adding zeros does not change a sum, and
    // a list of zeros is already sorted.
    let equivalent: Vec<&str> = t.lines().filter(|l| l.contains("equivalent, set aside")).collect();
    assert_eq!(equivalent.len(), 5, "{t}");
    assert!(equivalent.iter().all(|l| l.contains("sum_positive") || l.contains("sum_negative") || l.contains("keep_zero: sorted")), "{t}");
    assert!(!t.contains("FAIL"), "{t}");
}

/// The check fails where it should: the old task's `count_gt2` (its four random tests hold no
/// repeated counted value, so `len(set(...))` passed) and its `keep_lt3` beside the training
/// problem it equals (`drop_gt2`) and a complement (`keep_gt2`).
#[test]
fn the_mutation_check_names_survivors_and_leaks() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    let weak = cx.write(
        "weak.jsonl",
        concat!(
            r#"{"task_id": 1, "text": "count", "code": "def count_gt2(xs):\n    return sum(1 for x in xs if x > 2)", "test_list": ["assert count_gt2([11, 7, -1, 3, -2]) == 3", "assert count_gt2([2, -5, 4]) == 1", "assert count_gt2([9, 6, 12, 5]) == 4", "assert count_gt2([0, 1]) == 0"]}"#,
            "\n",
            r#"{"task_id": 2, "text": "keep", "code": "def keep_lt3(xs):\n    return [x for x in xs if x < 3]", "test_list": ["assert keep_lt3([3, 2, 1]) == [2, 1]", "assert keep_lt3([5, -1, 2, 2]) == [-1, 2, 2]", "assert keep_lt3([4]) == []"]}"#,
            "\n"
        ),
    );
    let train = cx.write(
        "train.jsonl",
        concat!(
            r#"{"task_id": 9, "text": "drop", "code": "def drop_gt2(xs):\n    return [x for x in xs if not (x > 2)]", "test_list": ["assert drop_gt2([3, 2]) == [2]"]}"#,
            "\n",
            r#"{"task_id": 10, "text": "keep", "code": "def keep_gt2(xs):\n    return [x for x in xs if x > 2]", "test_list": ["assert keep_gt2([3, 2]) == [3]"]}"#,
            "\n"
        ),
    );
    let out = python(&["experiments/data/mutants.py", weak.to_str().unwrap(), train.to_str().unwrap()], &repo());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("task 1 count_gt2: wrong program passes every test: len(set(...))"), "{t}");
    // Its 3 among the tests rejects x > 3, and nothing else gets through.
    assert!(!t.contains("task 1 count_gt2: wrong program passes every test: expr"), "{t}");
    assert!(t.contains("weak.jsonl: task 2 equals") && t.contains("train.jsonl: task 9"), "{t}");
    assert!(t.contains("weak.jsonl: task 2 is the complement of") && t.contains("train.jsonl: task 10"), "{t}");
}

/// The committed files are the generator's output, byte for byte (its tests depend on no model),
/// and another split seed deals the same problems otherwise, with the same tests.
#[test]
fn the_committed_task_is_what_the_generator_writes() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    let dir = repo().join("experiments/data");
    let out_dir = cx.path().join("s37");
    let out = python(&["families.py", "--out", out_dir.to_str().unwrap()], &dir);
    assert!(out.status.success(), "{}", text(&out));
    for split in ["train", "dev", "test"] {
        let name = format!("family_{split}.jsonl");
        assert_eq!(std::fs::read(out_dir.join(&name)).unwrap(), std::fs::read(dir.join(&name)).unwrap(), "{name} differs from the generator's");
    }
    let other = cx.path().join("s1");
    let out = python(&["families.py", "--split-seed", "1", "--out", other.to_str().unwrap()], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = ["train", "dev", "test"]
            .iter()
            .flat_map(|s| std::fs::read_to_string(d.join(format!("family_{s}.jsonl"))).unwrap().lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["code"].as_str().unwrap().to_owned()).collect::<Vec<_>>())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&out_dir), names(&other), "the same problems in both splits");
    let test = |d: &Path| std::fs::read_to_string(d.join("family_test.jsonl")).unwrap();
    assert_ne!(test(&out_dir), test(&other), "another split seed deals another test split");
    let check = python(&["mutants.py", &format!("{}/family_train.jsonl", other.display()), &format!("{}/family_dev.jsonl", other.display()), &format!("{}/family_test.jsonl", other.display())], &dir);
    assert!(check.status.success(), "{}", text(&check));
}
