//! Deterministic selection of problems: the per-source filters of the spec, the per-problem test
//! cap, the seeded shuffle of the training set, and the dataset fingerprint.
//!
//! Everything here is a pure function of its inputs (no clock, no hash-map iteration order, no
//! RNG crate whose stream could change between versions), so the same spec and the same data give
//! the same problems in the same order on every machine, and [`fingerprint`] can prove it.
//!
//! Order of operations for one source (see [`apply`]): `ids` → `difficulty` → `platform` →
//! `date_from`/`date_to` → `limit` (the first N survivors in file order) → `max_tests` on each kept
//! problem.

use crate::rng::SplitMix64;
use std::collections::BTreeSet;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Problem, Tests};
use crate::spec::types::Source;

/// Metadata keys that may hold a problem's date, in the order they are tried. LiveCodeBench rows
/// have `contest_date` (ISO date-time), LeetCodeDataset rows `estimated_date`.
pub const DATE_KEYS: [&str; 4] = ["contest_date", "date", "estimated_date", "release_date"];

/// Why a source's filters could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `date_from`/`date_to` is not a calendar day `YYYY-MM-DD`.
    #[error("`{field}` must be a date `YYYY-MM-DD`, found `{value}`")]
    BadDate {
        /// `date_from` or `date_to`.
        field: &'static str,
        /// What was given.
        value: String,
    },
    /// `ids` names problems the source does not have. Silently training on fewer problems than
    /// listed would hide a typo.
    #[error("{} of the {total} `ids` are not in the source: {}", missing.len(), list(missing))]
    UnknownIds {
        /// The ids not found (at most the first 10 are shown in the message).
        missing: Vec<String>,
        /// How many ids were asked for.
        total: usize,
    },
    /// A difficulty or date filter is set but no problem carries that field at all; the filter
    /// would drop everything, which is a spec mistake rather than an empty selection.
    #[error("`{field}` is set but no problem in the source has {what}")]
    NoField {
        /// The spec field (`difficulty`, `platform`, `date_from`, `date_to`).
        field: &'static str,
        /// The metadata looked for.
        what: String,
    },
    /// The filters kept nothing.
    #[error("the filters keep none of the {before} problems ({stages})")]
    Empty {
        /// Problems before filtering.
        before: usize,
        /// How many each stage kept, e.g. "difficulty kept 0".
        stages: String,
    },
}

fn list(ids: &[String]) -> String {
    let shown: Vec<String> = ids.iter().take(10).map(|i| format!("`{i}`")).collect();
    let more = if ids.len() > 10 { format!(" and {} more", ids.len() - 10) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

/// What [`apply`] did, for logs and provenance.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Stats {
    /// Problems the source held.
    pub before: usize,
    /// Problems kept.
    pub after: usize,
    /// Tests removed by `max_tests`, over all kept problems.
    pub tests_dropped: usize,
}

/// Apply `source`'s filters to the problems loaded from it.
///
/// - `ids`: keep problems whose id is listed (order stays the file's); every listed id must exist.
/// - `difficulty`: keep problems whose `metadata.difficulty` equals one of the values, ignoring
///   ASCII case (`easy` matches `EASY`); numbers compare by their decimal text.
/// - `platform`: the same on `metadata.platform` (LiveCodeBench's `leetcode`, `atcoder`,
///   `codeforces`).
/// - `date_from`/`date_to` (inclusive): compare the `YYYY-MM-DD` prefix of the first date field in
///   [`DATE_KEYS`]. **Problems without a date are dropped** when either bound is set: a date window
///   is usually a contamination cut-off, and an undated problem cannot be shown to fall inside it.
/// - `skip`: drop the first N problems that survive the filters above, in file order.
/// - `limit`: the first N problems that survive the filters above, in file order.
/// - `max_tests`: see [`cap_tests`].
///
/// # Errors
/// [`Error::BadDate`], [`Error::UnknownIds`], [`Error::NoField`] (a difficulty or date filter on a
/// source where no problem has that field), [`Error::Empty`] (nothing left).
pub fn apply(problems: Vec<Problem>, source: &Source) -> Result<(Vec<Problem>, Stats), Error> {
    let before = problems.len();
    let from = source.date_from.as_deref().map(|d| day("date_from", d)).transpose()?;
    let to = source.date_to.as_deref().map(|d| day("date_to", d)).transpose()?;
    let mut stages: Vec<String> = Vec::new();
    let mut kept = problems;

    if !source.ids.is_empty() {
        let wanted: BTreeSet<&str> = source.ids.iter().map(String::as_str).collect();
        let present: BTreeSet<&str> = kept.iter().map(|p| p.id.as_str()).collect();
        let missing: Vec<String> = source.ids.iter().filter(|i| !present.contains(i.as_str())).cloned().collect();
        if !missing.is_empty() {
            return Err(Error::UnknownIds { missing, total: source.ids.len() });
        }
        kept.retain(|p| wanted.contains(p.id.as_str()));
        stages.push(format!("ids kept {}", kept.len()));
    }

    if !source.difficulty.is_empty() {
        if !kept.iter().any(|p| difficulty(p).is_some()) {
            return Err(Error::NoField { field: "difficulty", what: "a `difficulty`".into() });
        }
        kept.retain(|p| difficulty(p).is_some_and(|d| source.difficulty.iter().any(|w| w.eq_ignore_ascii_case(&d))));
        stages.push(format!("difficulty kept {}", kept.len()));
    }

    if !source.platform.is_empty() {
        if !kept.iter().any(|p| platform(p).is_some()) {
            return Err(Error::NoField { field: "platform", what: "a `platform`".into() });
        }
        kept.retain(|p| platform(p).is_some_and(|d| source.platform.iter().any(|w| w.eq_ignore_ascii_case(d))));
        stages.push(format!("platform kept {}", kept.len()));
    }

    if from.is_some() || to.is_some() {
        if !kept.iter().any(|p| date(p).is_some()) {
            let field = if from.is_some() { "date_from" } else { "date_to" };
            let keys: Vec<String> = DATE_KEYS.iter().map(|k| format!("`{k}`")).collect();
            return Err(Error::NoField { field, what: format!("a date (looked for {})", keys.join(", ")) });
        }
        kept.retain(|p| {
            date(p).is_some_and(|d| from.is_none_or(|f| d.as_str() >= f) && to.is_none_or(|t| d.as_str() <= t))
        });
        stages.push(format!("dates kept {}", kept.len()));
    }

    if let Some(skip) = source.skip {
        kept.drain(..(skip as usize).min(kept.len()));
        stages.push(format!("skip kept {}", kept.len()));
    }
    if let Some(limit) = source.limit {
        kept.truncate(limit as usize);
    }
    if kept.is_empty() {
        let stages = if stages.is_empty() { "the source is empty".to_owned() } else { stages.join(", ") };
        return Err(Error::Empty { before, stages });
    }

    let mut tests_dropped = 0;
    if let Some(n) = source.max_tests {
        for p in &mut kept {
            tests_dropped += cap_tests(&mut p.tests, n as usize);
        }
    }
    let after = kept.len();
    Ok((kept, Stats { before, after, tests_dropped }))
}

/// Validate a spec date; returns it unchanged (dates compare as strings).
fn day<'a>(field: &'static str, value: &'a str) -> Result<&'a str, Error> {
    if is_day(value) { Ok(value) } else { Err(Error::BadDate { field, value: value.to_owned() }) }
}

/// `YYYY-MM-DD` naming a day of the Gregorian calendar (also what `rlx validate` accepts): a
/// contamination window ending `2025-02-30` or `2025-04-31` is a typo, not a bound.
pub fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    if !(b.len() == 10 && b[4] == b'-' && b[7] == b'-' && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())) {
        return false;
    }
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(0);
    let (year, month, day) = (num(0..4), num(5..7), num(8..10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let last = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=last).contains(&day)
}

/// A problem's difficulty as text, if it has one.
fn difficulty(p: &Problem) -> Option<String> {
    match p.metadata.get("difficulty")? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A problem's platform, if it has one.
fn platform(p: &Problem) -> Option<&str> {
    p.metadata.get("platform").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// A problem's date: the `YYYY-MM-DD` prefix of the first [`DATE_KEYS`] field that has one.
pub fn date(p: &Problem) -> Option<String> {
    DATE_KEYS.iter().find_map(|k| match p.metadata.get(*k) {
        Some(Value::String(s)) if s.len() >= 10 && s.is_char_boundary(10) && is_day(&s[..10]) => Some(s[..10].to_owned()),
        _ => None,
    })
}

/// Keep at most `n` tests: the `n` with the longest inputs, as rLLM does before grading, so the
/// cheap sample cases go first and the big stress cases stay.
///
/// Length counts Unicode scalar values (Python's `len(str)`, which rLLM uses). Ties go to the
/// earlier test, and the kept tests stay in their original relative order, so the result does
/// not depend on the sort algorithm. Stdin and functional cases are measured by their input,
/// assert scripts by the assert statement; a HumanEval `check` is one test and never cut.
/// Returns how many tests were removed.
pub fn cap_tests(tests: &mut Tests, n: usize) -> usize {
    fn keep_longest<T>(items: &mut Vec<T>, n: usize, len: impl Fn(&T) -> usize) -> usize {
        if items.len() <= n {
            return 0;
        }
        let mut order: Vec<usize> = (0..items.len()).collect();
        // Stable sort: equal lengths keep index order, so ties go to the earlier test.
        order.sort_by_key(|&i| std::cmp::Reverse(len(&items[i])));
        let keep: BTreeSet<usize> = order.into_iter().take(n).collect();
        let before = items.len();
        let mut i = 0;
        items.retain(|_| {
            let k = keep.contains(&i);
            i += 1;
            k
        });
        before - items.len()
    }
    match tests {
        Tests::Stdin { cases } | Tests::Functional { cases, .. } => keep_longest(cases, n, |c| c.input.chars().count()),
        Tests::Asserts { asserts, .. } => keep_longest(asserts, n, |a| a.chars().count()),
        Tests::Check { .. } => 0,
    }
}


/// Shuffle `items` in place with `seed`: Fisher–Yates (Durstenfeld), `i` from the last index down
/// to 1 swapping with `j = below(i + 1)` drawn from [`crate::rng::SplitMix64`]. The permutation depends only on
/// `seed` and `items.len()`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// The dataset fingerprint: SHA-256 (lowercase hex) over the problems in order, each written as
/// compact JSON with every object's keys sorted and followed by `\n` (so the hashed bytes are a
/// canonical JSONL file of the problems). It changes when any problem, test, metadata value or the
/// order changes, and not when the source file is re-encoded, re-ordered by key, or moved.
pub fn fingerprint(problems: &[Problem]) -> String {
    let mut hasher = Sha256::new();
    let mut line = String::new();
    for p in problems {
        line.clear();
        // A `Problem` always serializes (string keys, no non-finite floats from JSON input).
        let value = serde_json::to_value(p).unwrap_or(Value::Null);
        canonical(&value, &mut line);
        line.push('\n');
        hasher.update(line.as_bytes());
    }
    hex(&hasher.finalize())
}

/// Compact JSON with object keys sorted by their UTF-8 bytes, independent of `preserve_order`.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::IoCase;

    fn problem(id: &str, inputs: &[&str], meta: Value) -> Problem {
        let Value::Object(metadata) = meta else { unreachable!() };
        Problem {
            id: id.into(),
            statement: format!("statement {id}"),
            starter_code: None,
            tests: Tests::Stdin {
                cases: inputs.iter().map(|i| IoCase { input: (*i).into(), output: "o".into() }).collect(),
            },
            metadata,
        }
    }

    fn source() -> Source {
        Source::new("x.jsonl")
    }

    fn set() -> Vec<Problem> {
        vec![
            problem("a", &["1"], serde_json::json!({"difficulty": "EASY", "contest_date": "2024-08-01T00:00:00"})),
            problem("b", &["1"], serde_json::json!({"difficulty": "medium", "contest_date": "2024-09-15T00:00:00"})),
            problem("c", &["1"], serde_json::json!({"difficulty": "Hard", "date": "2025-01-02"})),
            problem("d", &["1"], serde_json::json!({"difficulty": "easy"})),
        ]
    }

    fn ids(ps: &[Problem]) -> Vec<&str> {
        ps.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn difficulty_ignores_case_and_dates_drop_undated_rows() {
        let s = Source { difficulty: vec!["easy".into(), "hard".into()], ..source() };
        let (kept, stats) = apply(set(), &s).unwrap();
        assert_eq!(ids(&kept), ["a", "c", "d"]);
        assert_eq!((stats.before, stats.after), (4, 3));

        let s = Source { date_from: Some("2024-09-01".into()), ..source() };
        assert_eq!(ids(&apply(set(), &s).unwrap().0), ["b", "c"]);
        // Bounds are inclusive on the day, whatever the time of day.
        let s = Source { date_from: Some("2024-08-01".into()), date_to: Some("2024-09-15".into()), ..source() };
        assert_eq!(ids(&apply(set(), &s).unwrap().0), ["a", "b"]);
    }

    #[test]
    fn platform_keeps_the_named_platforms_and_needs_the_field() {
        let mut ps = set();
        for (p, platform) in ps.iter_mut().zip(["AtCoder", "leetcode", "codeforces"]) {
            p.metadata.insert("platform".into(), platform.into());
        }
        let s = Source { platform: vec!["atcoder".into(), "codeforces".into()], ..source() };
        let (kept, _) = apply(ps.clone(), &s).unwrap();
        assert_eq!(ids(&kept), ["a", "c"], "case is ignored; `d` has no platform and is dropped");
        // With a date window: LiveCodeBench v6's stdin/stdout problems of one period.
        let s = Source { date_from: Some("2024-09-01".into()), ..s };
        assert_eq!(ids(&apply(ps, &s).unwrap().0), ["c"]);
        let s = Source { platform: vec!["leetcode".into()], ..source() };
        assert!(matches!(apply(set(), &s), Err(Error::NoField { field: "platform", .. })));
    }

    #[test]
    fn days_are_calendar_days() {
        for ok in ["2025-02-01", "2025-05-31", "2024-02-29", "2000-02-29", "2025-12-31"] {
            assert!(is_day(ok), "{ok}");
        }
        for bad in ["2025-02-29", "1900-02-29", "2025-04-31", "2025-00-10", "2025-13-01", "2025-05-00", "2025-5-31", "2025/05/31", "2025-05-31T00"] {
            assert!(!is_day(bad), "{bad}");
        }
        let s = Source { date_to: Some("2025-02-30".into()), ..source() };
        let err = apply(set(), &s).unwrap_err();
        assert_eq!(err.to_string(), "`date_to` must be a date `YYYY-MM-DD`, found `2025-02-30`");
    }

    #[test]
    fn ids_keep_file_order_and_unknown_ids_are_errors() {
        let s = Source { ids: vec!["c".into(), "a".into()], ..source() };
        assert_eq!(ids(&apply(set(), &s).unwrap().0), ["a", "c"]);
        let s = Source { ids: vec!["a".into(), "zz".into()], ..source() };
        let err = apply(set(), &s).unwrap_err();
        assert_eq!(err, Error::UnknownIds { missing: vec!["zz".into()], total: 2 });
        assert!(err.to_string().contains("`zz`"), "{err}");
    }

    #[test]
    fn limit_applies_after_filters_and_empty_results_are_errors() {
        let s = Source { difficulty: vec!["easy".into()], limit: Some(1), ..source() };
        assert_eq!(ids(&apply(set(), &s).unwrap().0), ["a"]);
        // `skip` then `limit`: a contiguous slice in file order (MBPP's splits by task id).
        let s = Source { skip: Some(1), limit: Some(2), ..source() };
        assert_eq!(ids(&apply(set(), &s).unwrap().0), ["b", "c"]);
        let s = Source { skip: Some(9), ..source() };
        assert!(matches!(apply(set(), &s), Err(Error::Empty { .. })));
        let s = Source { difficulty: vec!["impossible".into()], ..source() };
        let err = apply(set(), &s).unwrap_err().to_string();
        assert!(err.contains("none of the 4") && err.contains("difficulty kept 0"), "{err}");
    }

    #[test]
    fn filters_on_absent_fields_are_errors() {
        let bare = vec![problem("a", &["1"], serde_json::json!({}))];
        let s = Source { difficulty: vec!["easy".into()], ..source() };
        assert!(matches!(apply(bare.clone(), &s), Err(Error::NoField { field: "difficulty", .. })));
        let s = Source { date_to: Some("2024-01-01".into()), ..source() };
        assert!(matches!(apply(bare.clone(), &s), Err(Error::NoField { field: "date_to", .. })));
        let s = Source { date_to: Some("2024-1-1".into()), ..source() };
        assert!(matches!(apply(bare, &s), Err(Error::BadDate { field: "date_to", .. })));
    }

    #[test]
    fn max_tests_keeps_the_longest_inputs_in_their_original_order() {
        let mut t = problem("a", &["aa", "a", "cccc", "bbbb", "é", "ddd"], serde_json::json!({})).tests;
        assert_eq!(cap_tests(&mut t, 3), 3);
        let Tests::Stdin { cases } = &t else { unreachable!() };
        // Two of length 4 and one of length 3; the tie at 4 keeps both.
        assert_eq!(cases.iter().map(|c| c.input.as_str()).collect::<Vec<_>>(), ["cccc", "bbbb", "ddd"]);
        // Ties at the cut go to the earlier test; `é` is one character, like `a`.
        let mut t = problem("a", &["é", "a", "b"], serde_json::json!({})).tests;
        cap_tests(&mut t, 1);
        let Tests::Stdin { cases } = &t else { unreachable!() };
        assert_eq!(cases[0].input, "é");
        let mut t = Tests::Asserts { setup: String::new(), asserts: vec!["assert f(1)".into(), "assert f(100)".into()] };
        assert_eq!(cap_tests(&mut t, 5), 0);
        assert_eq!(cap_tests(&mut t, 1), 1);
        assert_eq!(t, Tests::Asserts { setup: String::new(), asserts: vec!["assert f(100)".into()] });
    }

    #[test]
    fn splitmix_stream_is_the_reference_one() {
        // First outputs of SplitMix64 seeded with 0 (reference C implementation by Vigna).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let base: Vec<u32> = (0..100).collect();
        let (mut a, mut b, mut c) = (base.clone(), base.clone(), base.clone());
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        shuffle(&mut c, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, base);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, base);
        // Pinned: the permutation for seed 7 must never change, or old runs stop being reproducible.
        let mut small: Vec<u32> = (0..10).collect();
        shuffle(&mut small, 7);
        assert_eq!(small, PINNED_SEED7);
    }

    // Computed independently by a Python transcription of SplitMix64 + Lemire + Fisher–Yates.
    const PINNED_SEED7: [u32; 10] = [9, 5, 8, 6, 1, 2, 4, 7, 0, 3];

    #[test]
    fn fingerprint_sees_content_and_order_not_key_order() {
        let ps = set();
        let fp = fingerprint(&ps);
        assert_eq!(fp.len(), 64);
        assert_eq!(fp, fingerprint(&set()));
        let mut swapped = set();
        swapped.swap(0, 1);
        assert_ne!(fp, fingerprint(&swapped));
        let mut edited = set();
        edited[3].statement.push(' ');
        assert_ne!(fp, fingerprint(&edited));
        // The same metadata inserted in another key order hashes the same.
        let mut reordered = set();
        let m = &mut reordered[0].metadata;
        let d = m.shift_remove("difficulty").unwrap();
        m.insert("difficulty".into(), d);
        assert_ne!(serde_json::to_string(&reordered[0]).unwrap(), serde_json::to_string(&ps[0]).unwrap());
        assert_eq!(fp, fingerprint(&reordered));
        assert_eq!(fingerprint(&[]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
